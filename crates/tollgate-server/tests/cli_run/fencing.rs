//! docs/recipes/postgres-fence.sql against a real PostgreSQL: a `lock run`
//! frozen (SIGSTOP) past its lease wakes and writes with its old fence
//! ($TOLLGATE_FENCE); the conditional UPDATE changes nothing and the
//! trigger refuses, while the newer holder's writes are kept.

use std::path::Path;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::postgres::Postgres;
use super::{Group, redis_and_dir, run, spawn, stderr, wait_exit, wait_for_file};

fn recipe() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/recipes/postgres-fence.sql")
}

#[test]
fn postgres_refuses_a_frozen_holders_late_write() {
    let pg = Postgres::start();
    pg.run_file(&recipe());
    let (_server, url, dir) = redis_and_dir();
    let psql = pg.psql_line();
    let (ready, out) = (dir.path().join("a.ready"), dir.path().join("a.out"));
    // A: takes the lock, says so, and after a pause writes (ignoring the
    // SIGTERM its runner sends once it learns the lease is gone: the
    // late write the database must refuse).
    let a_script = format!(
        "trap '' TERM; echo $TOLLGATE_FENCE > {ready}; sleep 1; \
         {psql} -c \"UPDATE stock SET count = 9, fence = $TOLLGATE_FENCE \
         WHERE item = 'widget' AND fence <= $TOLLGATE_FENCE RETURNING 'wrote'\" -c 'SELECT 1' > {out} 2>&1; echo done >> {out}",
        ready = ready.display(),
        out = out.display(),
    );
    let mut a = Group(spawn(&[
        "lock", "run", "stock", "--ttl", "600ms", "--redis", &url, "--", "sh", "-c", &a_script,
    ]));
    let a_fence: u64 = wait_for_file(&ready, Duration::from_secs(20))
        .trim()
        .parse()
        .expect("fence");
    let group = Pid::from_raw(a.0.id() as i32);
    killpg(group, Signal::SIGSTOP).expect("SIGSTOP");
    std::thread::sleep(Duration::from_millis(1200));

    // B: the lock is free once A's lease ended; its writes go through.
    let b = run(&[
        "lock",
        "run",
        "stock",
        "--wait",
        "10s",
        "--redis",
        &url,
        "--",
        "sh",
        "-c",
        &format!(
            "{psql} -c \"UPDATE stock SET count = 5, fence = $TOLLGATE_FENCE \
             WHERE item = 'widget' AND fence <= $TOLLGATE_FENCE RETURNING fence\" \
             -c \"UPDATE ledger SET balance = 90, fence = $TOLLGATE_FENCE WHERE account = 'acme'\""
        ),
    ]);
    assert!(b.status.success(), "B: {}", stderr(&b));
    let b_fence: u64 = String::from_utf8_lossy(&b.stdout)
        .trim()
        .parse()
        .expect("B's fence, from RETURNING");
    assert!(b_fence > a_fence);

    killpg(group, Signal::SIGCONT).expect("SIGCONT");
    let code = wait_exit(&mut a.0, Duration::from_secs(30));
    assert_eq!(code, 76, "A was told it lost the lock");
    let said = wait_for_file(&out, Duration::from_secs(20));
    // Its UPDATE ran and returned no row (the 1 is the SELECT after it).
    assert_eq!(said.trim(), "1\ndone", "A's late write: {said}");
    assert_eq!(
        pg.query("SELECT count, fence FROM stock WHERE item = 'widget'"),
        format!("5|{b_fence}"),
        "A's late UPDATE matched no row; B's write is kept"
    );
    // The trigger refuses A's fence even without the WHERE clause.
    let late = pg.psql(&format!(
        "UPDATE ledger SET balance = 0, fence = {a_fence} WHERE account = 'acme'"
    ));
    assert!(!late.status.success(), "the trigger let a stale fence write");
    assert!(
        String::from_utf8_lossy(&late.stderr).contains("stale fence"),
        "{}",
        stderr(&late)
    );
    assert_eq!(pg.query("SELECT balance FROM ledger"), "90");
}
