//! A disk that refuses the durable store's writes, made real: this test
//! (its own process: one test in this file) lowers its own file-size
//! limit so the log's next write fails with EFBIG, as a full disk fails
//! with ENOSPC. Changes are refused with `NotPersisted` before they are
//! applied, reads go on, nothing answered before is lost, and once the
//! limit is lifted writing resumes by itself.

use std::time::{Duration, Instant};

use nix::sys::resource::{Resource, getrlimit, setrlimit};
use tollgate::{DurableOptions, ErrorKind, Fsync, JobQueue, PushOptions, Store};

fn push(id: &str) -> PushOptions {
    PushOptions {
        id: Some(id.to_owned()),
        ..PushOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_changes_then_recovers() {
    // Past the limit a write fails with EFBIG instead of the process
    // getting SIGXFSZ (whose default ends it), as `tollgate serve` does.
    let xfsz = tokio::signal::unix::SignalKind::from_raw(nix::sys::signal::Signal::SIGXFSZ as i32);
    let _keep = tokio::signal::unix::signal(xfsz).expect("take SIGXFSZ");
    let dir = tempfile::tempdir().expect("tempdir");
    let options = DurableOptions {
        fsync: Fsync::Always,
        ..DurableOptions::new(dir.path())
    };
    let store = Store::open(options.clone()).expect("open");
    let queue = JobQueue::new(&store, "q").expect("queue");
    let payload = "x".repeat(200);
    for i in 0..5 {
        queue.push(&payload, &push(&format!("j{i}"))).await.expect("push");
    }
    let (soft, hard) = getrlimit(Resource::RLIMIT_FSIZE).expect("getrlimit");
    // No file may grow now: the next log write fails.
    setrlimit(Resource::RLIMIT_FSIZE, 0, hard).expect("setrlimit");
    let refused = queue.push(&payload, &push("j5")).await.expect_err("refused");
    assert_eq!(refused.kind(), ErrorKind::NotPersisted, "{refused}");
    let again = queue
        .push(&payload, &push("j6"))
        .await
        .expect_err("refused up front");
    assert_eq!(again.kind(), ErrorKind::NotPersisted, "{again}");
    assert!(store.durable_stats().expect("durable").log.failing);
    // Reads go on.
    let stats = queue.stats().await.expect("reads go on");
    assert_eq!(
        stats.ready, 6,
        "j5 is applied (its answer said it is not on disk yet), j6 was refused"
    );
    setrlimit(Resource::RLIMIT_FSIZE, soft, hard).expect("setrlimit");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match queue.push(&payload, &push("j7")).await {
            Ok(_) => break,
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::NotPersisted, "{e}");
                assert!(Instant::now() < deadline, "changes are not taken again: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    assert!(!store.durable_stats().expect("durable").log.failing);
    store.close();
    drop((queue, store));
    let store = Store::open(options).expect("reopen");
    let queue = JobQueue::new(&store, "q").expect("queue");
    for id in ["j0", "j1", "j2", "j3", "j4", "j5", "j7"] {
        assert!(queue.get(id).await.expect("get").is_some(), "{id} is kept");
    }
    assert!(
        queue.get("j6").await.expect("get").is_none(),
        "j6 was refused, never applied"
    );
}
