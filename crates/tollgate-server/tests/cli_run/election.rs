//! `tollgate elect` as separate processes on one Redis: one leader at a
//! time (checked from each leadership's start and end and its fence), an
//! observer that prints every change, a SIGKILLed leader replaced within
//! its lease, a SIGSTOPped one told it lost when it wakes and its fence
//! refused by the Postgres recipe, a restarted leader resuming with its
//! token file, and an observer and a leader through a server that is
//! killed and started again.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::Value;

use super::postgres::Postgres;
use super::support::free_port;
use super::{Group, Serve, redis_and_dir, spawn, stderr, tollgate, wait_exit, wait_for_file};

/// The leader now, as `elect --observe --count 1` prints it.
fn leader(url: &str, name: &str) -> Value {
    leader_on(&["--redis", url], name)
}

/// The leader now through `store` (`--redis URL` or `--server URL`).
fn leader_on(store: &[&str], name: &str) -> Value {
    let o = tollgate()
        .args(["elect", name, "--observe", "--count", "1"])
        .args(store)
        .output()
        .expect("observe");
    assert!(o.status.success(), "{}", stderr(&o));
    let line: Value = serde_json::from_slice(&o.stdout).expect("a JSON line");
    line["leader"].clone()
}

#[test]
fn three_candidates_lead_one_at_a_time_and_an_observer_sees_each() {
    let (_server, url, dir) = redis_and_dir();
    let log = dir.path().join("log");
    let observer = tollgate()
        .args(["elect", "chief", "--observe", "--count", "5", "--redis", &url])
        .stdout(Stdio::piped())
        .spawn()
        .expect("observer");
    std::thread::sleep(Duration::from_millis(300));
    // Each leads for 300 ms, logging its fence and when it began and
    // ended by this machine's clock (one clock for all three).
    let script = format!(
        "echo start $TOLLGATE_FENCE $TOLLGATE_LEADER $(date +%s%N) >> {l}; sleep 0.3; \
         echo end $TOLLGATE_FENCE $TOLLGATE_LEADER $(date +%s%N) >> {l}",
        l = log.display()
    );
    let candidates: Vec<_> = (0..3)
        .map(|i| {
            let (url, script) = (url.clone(), script.clone());
            std::thread::spawn(move || {
                let o = tollgate()
                    .args([
                        "elect",
                        "chief",
                        "--label",
                        &format!("c{i}"),
                        "--ttl",
                        "2s",
                        "--redis",
                        &url,
                    ])
                    .args(["--", "sh", "-c", &script])
                    .output()
                    .expect("elect");
                assert!(o.status.success(), "{}", stderr(&o));
            })
        })
        .collect();
    for c in candidates {
        c.join().expect("candidate");
    }
    let out = observer.wait_with_output().expect("observer");
    assert!(out.status.success());
    let text = std::fs::read_to_string(&log).expect("log");
    let mut spans: Vec<(u64, String, u128, u128)> = Vec::new();
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let (fence, label, at): (u64, String, u128) = (
            w[1].parse().expect("fence"),
            w[2].to_owned(),
            w[3].parse().expect("ns"),
        );
        match w[0] {
            "start" => spans.push((fence, label, at, 0)),
            _ => spans.iter_mut().find(|s| s.0 == fence).expect("started").3 = at,
        }
    }
    assert_eq!(spans.len(), 3, "{text}");
    spans.sort_by_key(|s| s.2);
    for w in spans.windows(2) {
        assert!(w[0].3 <= w[1].2, "two leaders at once: {w:?}");
        assert!(w[0].0 < w[1].0, "fences went down: {w:?}");
    }
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    let seen: Vec<Value> = lines.iter().map(|l| l["leader"]["fence"].clone()).collect();
    let want: Vec<Value> = std::iter::once(Value::Null)
        .chain(spans.iter().map(|s| Value::from(s.0)))
        .chain(std::iter::once(Value::Null))
        .collect();
    assert_eq!(seen, want, "the observer missed or reordered a change");
    assert_eq!(lines[1]["leader"]["label"], Value::from(spans[0].1.clone()));
}

#[test]
fn a_killed_leader_is_replaced_within_its_lease() {
    let (_server, url, _dir) = redis_and_dir();
    let first = Group(spawn(&[
        "elect",
        "k",
        "--label",
        "first",
        "--ttl",
        "1s",
        "--heartbeat",
        "1s",
        "--redis",
        &url,
        "--",
        "sleep",
        "60",
    ]));
    let start = Instant::now();
    while leader(&url, "k")["label"] != "first" {
        assert!(start.elapsed() < Duration::from_secs(20), "first never led");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _second = Group(spawn(&[
        "elect",
        "k",
        "--label",
        "second",
        "--ttl",
        "1s",
        "--heartbeat",
        "1s",
        "--redis",
        &url,
        "--",
        "sleep",
        "60",
    ]));
    std::thread::sleep(Duration::from_millis(500));
    killpg(Pid::from_raw(first.0.id() as i32), Signal::SIGKILL).expect("SIGKILL");
    let killed = Instant::now();
    loop {
        let now = leader(&url, "k");
        if now["label"] == "second" {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(3),
            "no new leader 3 s after the kill: {now}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The lease is 1 s; the waiting candidate asks every third of its
    // 1 s heartbeat.
    assert!(
        killed.elapsed() < Duration::from_millis(2500),
        "took {:?}",
        killed.elapsed()
    );
}

#[test]
fn a_frozen_leader_is_told_it_lost_and_postgres_refuses_its_fence() {
    let pg = Postgres::start();
    pg.run_file(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/recipes/postgres-fence.sql"),
    );
    let (_server, url, dir) = redis_and_dir();
    let psql = pg.psql_line();
    let (ready, out) = (dir.path().join("ready"), dir.path().join("out"));
    let frozen = format!(
        "trap '' TERM; echo $TOLLGATE_FENCE > {ready}; sleep 1; \
         {psql} -c \"UPDATE stock SET count = 9, fence = $TOLLGATE_FENCE \
         WHERE item = 'widget' AND fence <= $TOLLGATE_FENCE RETURNING 'wrote'\" -c 'SELECT 1' > {out} 2>&1; \
         echo done >> {out}",
        ready = ready.display(),
        out = out.display()
    );
    let mut a = Group(spawn(&[
        "elect", "writer", "--label", "a", "--ttl", "600ms", "--redis", &url, "--", "sh", "-c", &frozen,
    ]));
    let a_fence: u64 = wait_for_file(&ready, Duration::from_secs(20))
        .trim()
        .parse()
        .expect("fence");
    let group = Pid::from_raw(a.0.id() as i32);
    killpg(group, Signal::SIGSTOP).expect("SIGSTOP");
    let b = tollgate()
        .args([
            "elect", "writer", "--label", "b", "--ttl", "5s", "--redis", &url, "--", "sh", "-c",
        ])
        .arg(format!(
            "{psql} -c \"UPDATE stock SET count = 5, fence = $TOLLGATE_FENCE \
             WHERE item = 'widget' AND fence <= $TOLLGATE_FENCE RETURNING fence\""
        ))
        .output()
        .expect("b");
    assert!(b.status.success(), "{}", stderr(&b));
    let b_fence: u64 = String::from_utf8_lossy(&b.stdout)
        .trim()
        .parse()
        .expect("B wrote");
    assert!(b_fence > a_fence);
    killpg(group, Signal::SIGCONT).expect("SIGCONT");
    assert_eq!(
        wait_exit(&mut a.0, Duration::from_secs(30)),
        76,
        "A was told it lost"
    );
    let said = wait_for_file(&out, Duration::from_secs(20));
    assert_eq!(said.trim(), "1\ndone", "A's late write: {said}");
    assert_eq!(pg.query("SELECT count, fence FROM stock"), format!("5|{b_fence}"));
}

#[test]
fn a_restarted_leader_resumes_with_its_token_file() {
    let (_server, url, dir) = redis_and_dir();
    let token = dir.path().join("token");
    let token_s = token.to_str().expect("utf-8");
    let run = |label: &str| -> Command {
        let mut c = tollgate();
        c.args([
            "elect",
            "r",
            "--label",
            label,
            "--ttl",
            "5s",
            "--token-file",
            token_s,
            "--redis",
            &url,
        ])
        .args(["--", "sleep", "60"]);
        c
    };
    let spawn_group = |mut c: Command| {
        use std::os::unix::process::CommandExt;
        Group(c.process_group(0).stderr(Stdio::piped()).spawn().expect("spawn"))
    };
    let first = spawn_group(run("node-1"));
    wait_for_file(&token, Duration::from_secs(20));
    let led = leader(&url, "r");
    assert_eq!(led["label"], "node-1");
    let mode = std::fs::metadata(&token).expect("token file").permissions();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777, 0o600);
    // Another candidate waits in line.
    let _other = Group(spawn(&[
        "elect", "r", "--label", "node-2", "--ttl", "5s", "--redis", &url, "--", "sleep", "60",
    ]));
    std::thread::sleep(Duration::from_millis(300));
    // node-1's process dies without resigning; it restarts at once.
    killpg(Pid::from_raw(first.0.id() as i32), Signal::SIGKILL).expect("SIGKILL");
    drop(first);
    let mut again = spawn_group(run("node-1"));
    // Past the old lease's 5 s: only a resumed (and renewed) leadership
    // is still node-1's, with the same fence; node-2 never led.
    std::thread::sleep(Duration::from_millis(6000));
    let now = leader(&url, "r");
    assert_eq!(
        (&now["label"], &now["fence"]),
        (&led["label"], &led["fence"]),
        "{now}"
    );
    let _ = killpg(Pid::from_raw(again.0.id() as i32), Signal::SIGTERM);
    let code = wait_exit(&mut again.0, Duration::from_secs(20));
    assert_eq!(code, 128 + 15, "sleep got the forwarded SIGTERM");
    let mut err = String::new();
    use std::io::Read;
    again
        .0
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("read");
    assert!(err.contains("resumed leadership"), "{err}");
    assert!(!token.exists(), "the token file outlived the leadership");
}

/// Through a durable server that is SIGKILLed and started again on its
/// port and data: the leader renews through the new one and keeps its
/// leadership and fence, and an observer reconnects and prints each
/// change once, in order.
#[test]
fn through_a_server_killed_and_restarted_the_leader_leads_on_and_the_observer_follows() {
    let dir = tempfile::tempdir().expect("dir");
    let listen = format!("127.0.0.1:{}", free_port());
    let data = dir.path().join("data");
    let data = data.to_str().expect("utf-8");
    let serve = Serve::start_at(&listen, data);
    let url = serve.1.clone();
    let server = ["--server", url.as_str()];
    let a = Group(spawn(&[
        "elect", "e", "--label", "a", "--ttl", "3s", "--server", &url, "--", "sleep", "60",
    ]));
    let deadline = Instant::now() + Duration::from_secs(20);
    let led = loop {
        let now = leader_on(&server, "e");
        if now["label"] == "a" {
            break now;
        }
        assert!(Instant::now() < deadline, "a never led: {now}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut observer = tollgate()
        .args(["elect", "e", "--observe", "--count", "3", "--server", &url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("observer");
    // Its first line (a) printed: it has followed the stream.
    let mut lines = std::io::BufReader::new(observer.stdout.take().expect("stdout"));
    let mut first = String::new();
    std::io::BufRead::read_line(&mut lines, &mut first).expect("the observer's first line");

    drop(serve);
    std::thread::sleep(Duration::from_millis(500));
    let serve = Serve::start_at(&listen, data);
    assert_eq!(serve.1, url);
    // Past the lease's 3 s: only renewals through the new server kept it.
    std::thread::sleep(Duration::from_millis(3500));
    let now = leader_on(&server, "e");
    assert_eq!(
        (&now["label"], &now["fence"]),
        (&led["label"], &led["fence"]),
        "{now}"
    );

    // a resigns (SIGTERM) and is gone, then b leads for a while and
    // resigns. (b in line before a resigned would be handed the lease
    // with no vacancy between.)
    let mut a = a;
    killpg(Pid::from_raw(a.0.id() as i32), Signal::SIGTERM).expect("SIGTERM");
    wait_exit(&mut a.0, Duration::from_secs(20));
    let b = tollgate()
        .args([
            "elect", "e", "--label", "b", "--server", &url, "--", "sleep", "0.5",
        ])
        .output()
        .expect("b");
    assert!(b.status.success(), "{}", stderr(&b));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut lines, &mut rest).expect("the observer's lines");
    let out = observer.wait_with_output().expect("observer");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen: Vec<Value> = (first + &rest)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line")["leader"].clone())
        .collect();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(seen[0]["fence"], led["fence"], "{seen:?}");
    assert_eq!(seen[1], Value::Null, "a's resignation: {seen:?}");
    assert_eq!(seen[2]["label"], "b", "{seen:?}");
    assert!(seen[2]["fence"].as_u64() > led["fence"].as_u64(), "{seen:?}");
}

/// A restart that finds the old run still going does not resume: not
/// while the old `tollgate elect` runs (a second copy given the same
/// token file), nor while its command does (tollgate alone was killed
/// with SIGKILL and reaped, its command left behind holding the file's
/// lock). It campaigns instead, and leads with a higher fence once the
/// old lease has run out.
#[test]
fn a_restart_does_not_resume_while_the_old_run_or_its_command_still_runs() {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let (_server, url, dir) = redis_and_dir();
    let token = dir.path().join("token");
    let token_s = token.to_str().expect("utf-8");
    let run_cmd = |label: &str, cmd: &[&str]| -> Group {
        let child = tollgate()
            .args(["elect", "r", "--label", label, "--ttl", "2s", "--heartbeat", "1s"])
            .args(["--token-file", token_s, "--redis", &url, "--"])
            .args(cmd)
            .process_group(0)
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        Group(child)
    };
    let run = |label: &str| run_cmd(label, &["sleep", "60"]);
    // Stopped with SIGTERM (to its group): what it said.
    let said = |mut g: Group| -> String {
        let _ = killpg(Pid::from_raw(g.0.id() as i32), Signal::SIGTERM);
        wait_exit(&mut g.0, Duration::from_secs(20));
        let mut err = String::new();
        g.0.stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut err)
            .expect("read");
        err
    };
    let first = run("node-1");
    wait_for_file(&token, Duration::from_secs(20));
    let led = leader(&url, "r");
    assert_eq!(led["label"], "node-1");

    // A second copy on the same file while the first runs: it waits in
    // line, and the first leads on.
    let second = run("node-2");
    std::thread::sleep(Duration::from_millis(1000));
    let now = leader(&url, "r");
    assert_eq!(
        (&now["label"], &now["fence"]),
        (&led["label"], &led["fence"]),
        "{now}"
    );
    let err = said(second);
    assert!(
        err.contains("not resuming") && err.contains("still goes on"),
        "{err}"
    );

    // Its place in line lapses (1 s without a heartbeat) before the
    // first's lease can: the next leader is the third run's.
    std::thread::sleep(Duration::from_millis(1200));

    // tollgate alone killed (and reaped): its command (sleep) runs on,
    // holding the token file's lock it inherited.
    let mut first = first;
    nix::sys::signal::kill(Pid::from_raw(first.0.id() as i32), Signal::SIGKILL).expect("SIGKILL");
    first.0.wait().expect("reap");
    let third = run("node-1");
    let deadline = Instant::now() + Duration::from_secs(20);
    let next = loop {
        let now = leader(&url, "r");
        if now["fence"].as_u64() > led["fence"].as_u64() {
            break now;
        }
        assert!(Instant::now() < deadline, "nobody led after the old lease: {now}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(next["label"], "node-1", "{next}");
    let err = said(third);
    assert!(
        err.contains("not resuming") && err.contains("still goes on"),
        "{err}"
    );
    assert!(!err.contains("resumed leadership"), "{err}");
    // The left-behind command goes with the first run's group.
    drop(first);

    // A command that closes the lock it inherited (TOLLGATE_LOCK_FD),
    // left behind by a kill -9 of tollgate alone: the file names it, and
    // the next run does not resume while it runs.
    let closing = [
        "bash",
        "-c",
        "eval \"exec ${TOLLGATE_LOCK_FD}<&-\"; exec sleep 60",
    ];
    // (The first run's file, naming its command, goes first: the wait
    // below is for node-3's.)
    std::fs::remove_file(&token).expect("the first run's file");
    let mut fourth = run_cmd("node-3", &closing);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&token).is_ok_and(|t| t.contains("cmd=")) {
        assert!(Instant::now() < deadline, "node-3 never led");
        std::thread::sleep(Duration::from_millis(50));
    }
    let led = leader(&url, "r");
    assert_eq!(led["label"], "node-3");
    nix::sys::signal::kill(Pid::from_raw(fourth.0.id() as i32), Signal::SIGKILL).expect("SIGKILL");
    fourth.0.wait().expect("reap");
    let fifth = run("node-3");
    let deadline = Instant::now() + Duration::from_secs(20);
    while leader(&url, "r")["fence"].as_u64() <= led["fence"].as_u64() {
        assert!(Instant::now() < deadline, "nobody led after node-3's lease");
        std::thread::sleep(Duration::from_millis(100));
    }
    let err = said(fifth);
    assert!(
        err.contains("not resuming") && err.contains("its command"),
        "{err}"
    );
    drop(fourth);
}
