//! The durable embedded store: what a restart keeps (read-write locks and
//! elections too), what recovery does with a torn or damaged log, a
//! second server on one directory, snapshots and compaction, time and
//! fences across a restart, and a power loss simulated by cutting the log
//! back to what had been synced.

use std::sync::Arc;
use std::time::Duration;

use tollgate::{
    DurableOptions, Election, ErrorKind, Fsync, Gate, GateOptions, JobQueue, Limit, Lock, ManualClock,
    MemoryOptions, PushOptions, RW_PERMITS, Rate, RateLimiter, Retry, RwLock, RwState, ScheduleSpec,
    Schedules, Semaphore, Store, TicketStatus, When,
};

/// Every snapshot rebuilt from the log (the way of heavy states; the
/// on_both_stores suites' durable store writes its small ones live).
fn options(dir: &std::path::Path, fsync: Fsync) -> DurableOptions {
    DurableOptions {
        fsync,
        rebuild_above: 0,
        ..DurableOptions::new(dir)
    }
}

fn open_at(dir: &std::path::Path, clock: &ManualClock) -> (Store, tollgate::Recovery) {
    let memory = MemoryOptions {
        clock: Arc::new(clock.clone()),
        ..MemoryOptions::default()
    };
    Store::open_with(memory, options(dir, Fsync::Always)).expect("open")
}

fn segments(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found: Vec<_> = std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "tgl"))
        .collect();
    found.sort();
    found
}

/// A data directory whose log holds `n` pushes to queue `q`, closed.
async fn pushed(clock: &ManualClock, n: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = open_at(dir.path(), clock);
    let queue = JobQueue::new(&store, "q").expect("queue");
    for i in 0..n {
        queue
            .push(format!("job {i}"), &PushOptions::default())
            .await
            .expect("push");
    }
    store.close();
    dir
}

const LONG: Duration = Duration::from_secs(3600);

fn long() -> GateOptions {
    GateOptions {
        ttl: LONG,
        heartbeat: LONG,
        auto_renew: false,
        fair: true,
        max_hold: None,
    }
}

/// Everything a user keeps in the store is there after a clean restart:
/// a held lock and its fence, a semaphore's holders and line, jobs in
/// every state, a paused queue, a schedule, a rate limit's spent budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_every_primitive() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(options(dir.path(), Fsync::EverySec)).expect("open");
    let lock = Lock::with_options(&store, "cron", long()).expect("lock");
    let held = lock.try_acquire().await.expect("store").expect("free");
    let fence = held.fence();
    std::mem::forget(held);

    let gate = Gate::new(&store, "printer", Some(1), long()).expect("gate");
    let holder = gate.enter(1, true).await.expect("enter");
    let waiter = gate.enter(1, true).await.expect("enter");
    let (tollgate::Entered::Granted(h), tollgate::Entered::Queued { ticket: w, .. }) = (holder, waiter)
    else {
        panic!("one holder, one waiter")
    };

    let queue = JobQueue::new(&store, "mail").expect("queue");
    let later = PushOptions {
        id: Some("later".into()),
        delay: Some(Duration::from_secs(600)),
        ..PushOptions::default()
    };
    queue.push("in ten minutes", &later).await.expect("push");
    for id in ["ready", "running", "doomed"] {
        let o = PushOptions {
            id: Some(id.into()),
            max_attempts: 1,
            ..PushOptions::default()
        };
        queue.push(id, &o).await.expect("push");
    }
    let running = queue.claim().await.expect("claim").expect("job");
    let doomed = queue.claim().await.expect("claim").expect("job");
    queue
        .nack(&doomed.id, doomed.fence, Retry::Backoff)
        .await
        .expect("nack");
    let paused = JobQueue::new(&store, "held-back").expect("queue");
    paused.pause().await.expect("pause");

    let schedules = Schedules::new(&store);
    let spec = ScheduleSpec::new(When::parse("*/5 * * * *").expect("cron"), "reports");
    schedules.upsert("nightly", &spec).await.expect("upsert");

    let limit = Limit::gcra(Rate::per_minute(3).expect("rate"), 3).expect("limit");
    let limiter = RateLimiter::new(&store, "api", limit).expect("limiter");
    for _ in 0..3 {
        assert!(limiter.check("alice", 1).await.expect("check").allowed);
    }
    store.close();
    drop((lock, gate, queue, paused, schedules, limiter, store));

    let (store, recovery) =
        Store::open_with(MemoryOptions::default(), options(dir.path(), Fsync::EverySec)).expect("reopen");
    assert!(recovery.replayed > 0, "{recovery:?}");
    let lock = Lock::with_options(&store, "cron", long()).expect("lock");
    assert!(
        lock.try_acquire().await.expect("store").is_none(),
        "the held lock is still held"
    );
    assert_eq!(lock.stats().await.expect("stats").fence, fence);

    let gate = Gate::new(&store, "printer", Some(1), long()).expect("gate");
    let st = gate.stats().await.expect("stats");
    assert_eq!((st.used, st.waiting), (1, 1));
    let status = gate.status(&w).await.expect("status");
    assert!(matches!(status, TicketStatus::Queued(_)), "{status:?}");
    gate.leave(&h.token).await.expect("leave");
    let status = gate.status(&w).await.expect("status");
    assert!(
        matches!(status, TicketStatus::Granted(_)),
        "the line moves on: {status:?}"
    );

    let queue = JobQueue::new(&store, "mail").expect("queue");
    let stats = queue.stats().await.expect("stats");
    assert_eq!(
        (stats.delayed, stats.in_flight, stats.dead),
        (1, 1, 1),
        "{stats:?}"
    );
    assert_eq!(queue.dead(10).await.expect("dead")[0].id, doomed.id);
    queue
        .ack(&running.id, running.fence)
        .await
        .expect("the delivery is still the one in flight");
    let paused = JobQueue::new(&store, "held-back").expect("queue");
    assert!(paused.stats().await.expect("stats").paused);

    let schedules = Schedules::new(&store);
    assert!(schedules.get("nightly").await.expect("get").is_some());

    let limiter = RateLimiter::new(&store, "api", limit).expect("limiter");
    assert!(
        !limiter.check("alice", 1).await.expect("check").allowed,
        "the budget stays spent"
    );
}

/// A read-write lock and an election across a restart: the readers still
/// hold it and the writer still waits first in line; the leader still
/// leads with its fence and `since`, resumes with its token, and the next
/// leader's fence is higher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_read_write_locks_and_elections() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(options(dir.path(), Fsync::EverySec)).expect("open");
    let rw = RwLock::with_options(&store, "table", long()).expect("rwlock");
    for _ in 0..2 {
        std::mem::forget(rw.try_read().await.expect("store").expect("shared"));
    }
    let tollgate::Entered::Queued { ticket: writer, .. } =
        rw.gate().enter(RW_PERMITS, true).await.expect("enter")
    else {
        panic!("the writer waits for the readers")
    };
    let election = Election::with_options(&store, "chief", long()).expect("election");
    let leadership = election
        .campaign("node-1", Duration::ZERO)
        .await
        .expect("store")
        .expect("nobody led");
    let (token, fence) = (leadership.token().to_owned(), leadership.fence());
    let before = election.leader().await.expect("leader").expect("a leader");
    std::mem::forget(leadership);
    store.close();
    drop((rw, election, store));

    let (store, _) =
        Store::open_with(MemoryOptions::default(), options(dir.path(), Fsync::EverySec)).expect("reopen");
    let rw = RwLock::with_options(&store, "table", long()).expect("rwlock");
    assert_eq!(rw.state().await.expect("state"), RwState::Read(2));
    assert!(
        rw.try_read().await.expect("store").is_none(),
        "a new reader went ahead of the waiting writer"
    );
    let status = rw.gate().status(&writer).await.expect("status");
    assert!(matches!(status, TicketStatus::Queued(_)), "{status:?}");

    let election = Election::with_options(&store, "chief", long()).expect("election");
    let after = election.leader().await.expect("leader").expect("still led");
    assert_eq!(
        (&after.label, after.fence, after.since_ms, &after.handle),
        (&before.label, before.fence, before.since_ms, &before.handle)
    );
    assert!(
        election
            .campaign("node-2", Duration::ZERO)
            .await
            .expect("store")
            .is_none(),
        "a second leader"
    );
    let resumed = election
        .resume(&token)
        .await
        .expect("store")
        .expect("the kept token resumes");
    assert_eq!(resumed.fence(), fence);
    resumed.resign().await.expect("resign");
    let next = election
        .campaign("node-2", Duration::ZERO)
        .await
        .expect("store")
        .expect("free after the resignation");
    assert!(next.fence() > fence, "{} after {fence}", next.fence());
}

/// A record cut short at the end of the log (a crash mid-write) is cut
/// off and reported; everything before it is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_last_record_is_cut_off_and_reported() {
    let clock = ManualClock::default();
    let dir = pushed(&clock, 10).await;
    let last = segments(dir.path()).pop().expect("a segment");
    // A start that wrote nothing leaves an empty newer segment (as a
    // rotation just before a crash would): the torn one is still the
    // newest holding records, and is cut, not refused.
    open_at(dir.path(), &clock).0.close();
    assert_eq!(segments(dir.path()).len(), 2, "an empty newer segment");
    let len = std::fs::metadata(&last).expect("meta").len();
    // The last record loses its last 5 bytes.
    let f = std::fs::OpenOptions::new().write(true).open(&last).expect("open");
    f.set_len(len - 5).expect("cut");
    drop(f);

    let (store, recovery) = open_at(dir.path(), &clock);
    let (file, bytes) = recovery.torn.expect("reported");
    assert_eq!(file, last);
    assert!(bytes > 0);
    let queue = JobQueue::new(&store, "q").expect("queue");
    assert_eq!(
        queue.stats().await.expect("stats").ready,
        9,
        "the nine whole pushes are there"
    );
}

/// A damaged record with whole records after it is not a torn write:
/// recovery refuses, naming the file and the offset; `check` says so,
/// and `repair` keeps what reads whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_middle_is_refused_until_repaired() {
    let clock = ManualClock::default();
    let dir = pushed(&clock, 20).await;
    let last = segments(dir.path()).pop().expect("a segment");
    let mut bytes = std::fs::read(&last).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&last, &bytes).expect("write");

    let memory = MemoryOptions {
        clock: Arc::new(clock.clone()),
        ..MemoryOptions::default()
    };
    let err = Store::open_with(memory, options(dir.path(), Fsync::Always)).expect_err("refused");
    assert_eq!(err.kind(), ErrorKind::Misconfigured);
    let text = err.to_string();
    assert!(
        text.contains(&last.display().to_string()) && text.contains("damaged at byte"),
        "{text}"
    );

    let check = tollgate::check_data_dir(dir.path()).expect("check");
    assert!(!check.recoverable());
    let bad = check.segments.last().and_then(|s| s.bad.clone()).expect("bad");
    assert!(bad.0 as usize <= middle, "{bad:?}");

    let repaired = tollgate::repair_data_dir(dir.path()).expect("repair");
    assert!(repaired.recoverable(), "{repaired:?}");
    let kept = repaired.segments.last().expect("segment").records;
    let (store, _) = open_at(dir.path(), &clock);
    let queue = JobQueue::new(&store, "q").expect("queue");
    let ready = queue.stats().await.expect("stats").ready;
    assert!(ready > 0 && ready < 20, "a prefix of the pushes: {ready}");
    assert_eq!(ready, kept, "every whole push before the damage");
    let damaged: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".damaged"))
        .collect();
    assert_eq!(damaged.len(), 1, "the cut bytes are kept aside");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_store_on_one_directory_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = Store::open(options(dir.path(), Fsync::EverySec)).expect("open");
    let err = Store::open(options(dir.path(), Fsync::EverySec)).expect_err("refused");
    assert_eq!(err.kind(), ErrorKind::Misconfigured);
    assert!(err.to_string().contains("in use by another tollgate"), "{err}");
    drop(first);
    Store::open(options(dir.path(), Fsync::EverySec)).expect("free again once the first is gone");
}

/// Snapshots let the log go: after many changes the directory holds the
/// live state plus at most about one snapshot threshold of log, and a
/// store recovered from snapshot and log agrees with the one that ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_compact_the_log_and_recover_the_same_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::default();
    let memory = MemoryOptions {
        clock: Arc::new(clock.clone()),
        ..MemoryOptions::default()
    };
    let durable = DurableOptions {
        snapshot_after: 64 << 10,
        ..options(dir.path(), Fsync::No)
    };
    let (store, _) = Store::open_with(memory.clone(), durable.clone()).expect("open");
    let queue = JobQueue::new(&store, "churn").expect("queue");
    let sem = Semaphore::with_options(&store, "pool", 3, long()).expect("sem");
    let payload = "x".repeat(200);
    for round in 0..200 {
        for i in 0..10 {
            let o = PushOptions {
                id: Some(format!("{round}-{i}")),
                ..PushOptions::default()
            };
            queue.push(&payload, &o).await.expect("push");
        }
        for job in queue.claim_many(10).await.expect("claim") {
            queue.ack(&job.id, job.fence).await.expect("ack");
        }
        let lease = sem.try_acquire(1).await.expect("store").expect("free");
        lease.release().await.expect("release");
        clock.advance(Duration::from_millis(10));
    }
    // Two left behind, to find after the restart.
    for id in ["keep-1", "keep-2"] {
        let o = PushOptions {
            id: Some(id.into()),
            ..PushOptions::default()
        };
        queue.push(&payload, &o).await.expect("push");
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while store.durable_stats().expect("durable").snapshots == 0 {
        assert!(std::time::Instant::now() < deadline, "no snapshot was taken");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    store.snapshot_now().expect("snapshot");
    let stats = store.durable_stats().expect("durable");
    let on_disk: u64 = std::fs::read_dir(dir.path())
        .expect("dir")
        .flatten()
        .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .sum();
    assert!(
        on_disk < stats.snapshot_bytes + (64 << 10) * 2,
        "{on_disk} bytes on disk for a {}-byte snapshot",
        stats.snapshot_bytes
    );
    let before = (
        queue.stats().await.expect("stats"),
        sem.stats().await.expect("stats"),
    );
    store.close();
    drop((queue, sem, store));

    let (store, recovery) = Store::open_with(memory, durable).expect("reopen");
    assert!(recovery.snapshot.is_some(), "{recovery:?}");
    let queue = JobQueue::new(&store, "churn").expect("queue");
    let sem = Semaphore::with_options(&store, "pool", 3, long()).expect("sem");
    let after = (
        queue.stats().await.expect("stats"),
        sem.stats().await.expect("stats"),
    );
    assert_eq!(before.0.ready, after.0.ready);
    assert_eq!(before.0.acked, after.0.acked);
    assert_eq!(before.0.pushed, after.0.pushed);
    assert_eq!(before.1.fence, after.1.fence);
    assert_eq!(before.1.grants, after.1.grants);
    let mut ids: Vec<_> = queue
        .claim_many(10)
        .await
        .expect("claim")
        .into_iter()
        .map(|j| j.id)
        .collect();
    ids.sort();
    assert_eq!(ids, ["keep-1", "keep-2"]);
}

/// Time passes while the server is down: a lease whose TTL ran out then
/// is over, a delayed job that came due is delivered at once; and fences
/// keep rising even if the clock went back across the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_and_fences_across_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::default();
    let (store, _) = open_at(dir.path(), &clock);
    let short = GateOptions {
        ttl: Duration::from_secs(10),
        ..long()
    };
    let lock = Lock::with_options(&store, "l", short.clone()).expect("lock");
    let lease = lock.try_acquire().await.expect("store").expect("free");
    let first = lease.fence();
    std::mem::forget(lease);
    let queue = JobQueue::new(&store, "q").expect("queue");
    let o = PushOptions {
        delay: Some(Duration::from_secs(5)),
        ..PushOptions::default()
    };
    queue.push("due soon", &o).await.expect("push");
    store.close();
    drop((lock, queue, store));

    clock.advance(Duration::from_secs(20));
    let (store, _) = open_at(dir.path(), &clock);
    let lock = Lock::with_options(&store, "l", short.clone()).expect("lock");
    let lease = lock
        .try_acquire()
        .await
        .expect("store")
        .expect("the lease ran out while down");
    let second = lease.fence();
    assert!(second > first);
    std::mem::forget(lease);
    let queue = JobQueue::new(&store, "q").expect("queue");
    let job = queue
        .claim()
        .await
        .expect("claim")
        .expect("due while down: delivered at once");
    queue.ack(&job.id, job.fence).await.expect("ack");
    let stats = queue.stats().await.expect("stats");
    assert!(
        stats.lateness_sum >= Duration::from_secs(15),
        "its lateness counts the downtime"
    );
    store.close();
    drop((lock, queue, store));

    // The clock goes back an hour across the next restart.
    clock.rewind(Duration::from_secs(3600));
    let (store, _) = open_at(dir.path(), &clock);
    let lock = Lock::with_options(&store, "l", short).expect("lock");
    // The lease granted at +20 s holds for 10 s of a clock now an hour
    // behind: it is still held. Revoke-free: wait it out by moving on.
    clock.advance(Duration::from_secs(3600 + 20));
    let lease = lock.try_acquire().await.expect("store").expect("free");
    assert!(lease.fence() > second, "{} after {second}", lease.fence());
    // A new gate's first fence is above every fence the store handed out.
    clock.rewind(Duration::from_secs(7200));
    let other = Lock::with_options(&store, "new", long()).expect("lock");
    let fresh = other.try_acquire().await.expect("store").expect("free");
    assert!(fresh.fence() > 0);
}

/// A power loss, simulated: with `always`, each answered change is on
/// disk when answered. The log is cut back to anywhere between what was
/// synced when an answer went out and its end now (the unsynced tail may
/// have reached the disk in part): recovery gives a prefix of the
/// history that holds every answered push, never a mix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_loss_keeps_a_prefix_with_every_answered_change() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::default();
    let (store, _) = open_at(dir.path(), &clock);
    let queue = JobQueue::new(&store, "q").expect("queue");
    let mut synced_after = Vec::new();
    for i in 0..60 {
        let o = PushOptions {
            id: Some(format!("{i:03}")),
            ..PushOptions::default()
        };
        queue.push("x", &o).await.expect("push");
        let seg = segments(dir.path()).pop().expect("segment");
        synced_after.push((
            seg,
            std::fs::metadata(segments(dir.path()).pop().expect("s"))
                .expect("m")
                .len(),
        ));
    }
    store.close();
    drop((queue, store));
    let copy = tempfile::tempdir().expect("tempdir");
    for (answered, (seg, len)) in synced_after.iter().enumerate().step_by(7) {
        // A fresh copy of the directory, the segment cut at `len` plus a
        // few bytes of what came after (a torn, partly written tail).
        let _ = std::fs::remove_dir_all(copy.path());
        std::fs::create_dir_all(copy.path()).expect("dir");
        for e in std::fs::read_dir(dir.path()).expect("dir").flatten() {
            if e.file_name() != "LOCK" {
                std::fs::copy(e.path(), copy.path().join(e.file_name())).expect("copy");
            }
        }
        let cut_at = len + (answered as u64 % 11);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(copy.path().join(seg.file_name().expect("name")))
            .expect("open");
        let full = f.metadata().expect("m").len();
        f.set_len(cut_at.min(full)).expect("cut");
        drop(f);
        let (store, _) = open_at(copy.path(), &clock);
        let queue = JobQueue::new(&store, "q").expect("queue");
        let mut ids: Vec<_> = queue
            .list(tollgate::JobState::Ready, None, 1000)
            .await
            .expect("list")
            .jobs
            .into_iter()
            .map(|j| j.id)
            .collect();
        ids.sort();
        let n = ids.len();
        assert!(
            n > answered,
            "push {answered} was answered, so it is on disk: {n} found"
        );
        let prefix: Vec<_> = (0..n).map(|i| format!("{i:03}")).collect();
        assert_eq!(ids, prefix, "a prefix of the pushes, never a mix");
        store.close();
    }
}

/// Many clients at once on a store syncing before every answer (group
/// commit), snapshots taken back to back meanwhile (written live, and
/// rebuilt from the log): after a restart, every answered push that was
/// not acked is there, no acked job comes back, and every fence stays
/// above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_then_a_restart() {
    for rebuild_above in [usize::MAX, 0] {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = DurableOptions {
            rebuild_above,
            ..options(dir.path(), Fsync::Always)
        };
        concurrent_clients_then_a_restart_with(options).await;
    }
}

async fn concurrent_clients_then_a_restart_with(options: DurableOptions) {
    let store = Store::open(options.clone()).expect("open");
    let mut tasks = Vec::new();
    for w in 0..16 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let queue = JobQueue::new(&store, "work").expect("queue");
            let lock = Lock::new(&store, "one").expect("lock");
            let (mut pushed, mut acked, mut fences) = (Vec::new(), Vec::new(), Vec::new());
            for i in 0..40 {
                let o = PushOptions {
                    id: Some(format!("{w}-{i}")),
                    ..PushOptions::default()
                };
                queue.push("p", &o).await.expect("push");
                pushed.push(format!("{w}-{i}"));
                if i % 2 == 0
                    && let Some(job) = queue.claim().await.expect("claim")
                {
                    queue.ack(&job.id, job.fence).await.expect("ack");
                    acked.push(job.id);
                }
                if let Some(lease) = lock.try_acquire().await.expect("lock") {
                    fences.push(lease.fence());
                    lease.release().await.expect("release");
                }
            }
            (pushed, acked, fences)
        }));
    }
    // Snapshots back to back meanwhile: each rebuilt from the log while
    // the clients change the states it covers.
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let snapshots = {
        let (store, done) = (store.clone(), done.clone());
        std::thread::spawn(move || {
            let mut taken = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) || taken == 0 {
                store.snapshot_now().expect("snapshot");
                taken += 1;
            }
            taken
        })
    };
    let (mut pushed, mut acked, mut fences) = (Vec::new(), Vec::new(), Vec::new());
    for t in tasks {
        let (p, a, f) = t.await.expect("task");
        pushed.extend(p);
        acked.extend(a);
        fences.extend(f);
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(snapshots.join().expect("snapshots") > 0);
    store.close();
    drop(store);
    let store = Store::open(options).expect("reopen");
    let queue = JobQueue::new(&store, "work").expect("queue");
    let mut left: Vec<_> = queue
        .list(tollgate::JobState::Ready, None, 1000)
        .await
        .expect("list")
        .jobs
        .into_iter()
        .map(|j| j.id)
        .collect();
    left.sort();
    let mut expected: Vec<_> = pushed.into_iter().filter(|id| !acked.contains(id)).collect();
    expected.sort();
    assert_eq!(left, expected);
    let lock = Lock::new(&store, "one").expect("lock");
    let lease = lock.try_acquire().await.expect("store").expect("free");
    assert!(fences.iter().all(|f| *f < lease.fence()));
}

/// Job queues and schedules: the same random operations on the memory
/// store and on the durable one, on one hand-moved clock, the durable one
/// closed and recovered (sometimes from a snapshot) at random steps; every
/// answer must match, fences and times included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovered_job_queue_answers_as_one_that_never_stopped() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::default();
    let memory = Store::memory_with_clock(Arc::new(clock.clone()));
    let mut durable = open_at(dir.path(), &clock).0;
    let mut restarts = 0;
    for seed in 0..40u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let name = format!("agree-{seed}");
        let schedule = format!("every-{seed}");
        let mut held: Vec<(String, u64)> = Vec::new();
        let mut history = Vec::new();
        for step in 0..80 {
            if rng.random_range(0..10) == 0 {
                if rng.random_bool(0.3) {
                    durable.snapshot_now().expect("snapshot");
                }
                durable.close();
                durable = open_at(dir.path(), &clock).0;
                restarts += 1;
                history.push(format!("{step}: restart"));
            }
            let op = rng.random_range(0..100);
            let mut answers = Vec::new();
            for store in [&memory, &durable] {
                let q = JobQueue::new(store, &name).expect("queue");
                let s = Schedules::new(store);
                let answer = match op {
                    0..=29 => {
                        let o = PushOptions {
                            id: Some(format!("j{}", rng.clone().random_range(0..30))),
                            delay: rng.clone().random_bool(0.3).then(|| Duration::from_millis(500)),
                            max_attempts: 2,
                            ..PushOptions::default()
                        };
                        format!("{:?}", q.push("p", &o).await.map(|p| (p.id, p.result, p.due)))
                    }
                    30..=49 => format!(
                        "{:?}",
                        q.claim()
                            .await
                            .map(|j| j.map(|j| (j.id, j.attempt, j.group, j.fence)))
                    ),
                    50..=64 => match held.first() {
                        Some((id, fence)) => format!("{:?}", q.ack(id, *fence).await.map_err(|e| e.kind())),
                        None => "none held".into(),
                    },
                    65..=74 => match held.last() {
                        Some((id, fence)) => format!(
                            "{:?}",
                            q.nack(id, *fence, Retry::After(Duration::from_millis(300))).await
                        ),
                        None => "none held".into(),
                    },
                    75..=79 => format!(
                        "{:?}",
                        q.cancel(&format!("j{}", rng.clone().random_range(0..30))).await
                    ),
                    80..=84 => {
                        // Odd seeds' schedules push to a group (their
                        // fires and triggers log records of their own).
                        let mut spec = ScheduleSpec::new(When::parse("every 2s").expect("when"), &name);
                        spec.group = (seed % 2 == 1).then(|| "tenant".to_owned());
                        format!("{:?}", s.upsert(&schedule, &spec).await)
                    }
                    85..=88 => format!("{:?}", schedule_tick(&s).await),
                    89 => format!("{:?}", s.trigger(&schedule).await.map(|id| id.is_some())),
                    _ => {
                        let st = q.stats().await.expect("stats");
                        format!(
                            "{:?}",
                            (
                                st.ready,
                                st.delayed,
                                st.in_flight,
                                st.dead,
                                st.pushed,
                                st.acked,
                                st.retried,
                                st.lateness_sum,
                                st.groups
                            )
                        )
                    }
                };
                answers.push(answer);
            }
            // The random draws of the op were cloned, not advanced: both
            // stores saw the same arguments. Advance once for both now.
            let _: (u32, bool) = (rng.random_range(0..30), rng.random_bool(0.3));
            if (30..50).contains(&op) {
                if let Some((id, fence)) = parse_claim(&answers[0]) {
                    held.push((id, fence));
                }
            } else if (50..=64).contains(&op) && !held.is_empty() {
                held.remove(0);
            } else if (65..=74).contains(&op) {
                held.pop();
            }
            history.push(format!("{step}: op {op} -> {}", answers[0]));
            assert_eq!(
                answers[0],
                answers[1],
                "seed {seed}: the memory store and the recovered one disagree at step {step};\nhistory:\n{}",
                history.join("\n")
            );
            clock.advance(Duration::from_millis(rng.random_range(0..400)));
        }
    }
    assert!(restarts > 200, "only {restarts} restarts");
}

/// Fires what is due of the store's schedules, as a firing process does.
async fn schedule_tick(s: &Schedules) -> String {
    match s.fire_due().await {
        Ok(report) => format!(
            "{:?}",
            report
                .fired
                .iter()
                .map(|f| (&f.job_id, f.tick_ms))
                .collect::<Vec<_>>()
        ),
        Err(e) => format!("{:?}", e.kind()),
    }
}

/// `Ok(Some((id, attempt, group, fence)))` as the claim answer prints it.
fn parse_claim(answer: &str) -> Option<(String, u64)> {
    let rest = answer.strip_prefix("Ok(Some((\"")?;
    let (id, rest) = rest.split_once('"')?;
    let fence = rest.trim_end_matches(")))").rsplit(", ").next()?.parse().ok()?;
    Some((id.to_owned(), fence))
}

/// A data directory written before groups existed (a snapshot and a log
/// tail made by the build of 2026-11-29, `tests/fixtures/v1-store`) opens
/// with every job where it was; the queue then turns fair, and a
/// snapshot of it (the new record kind) opens again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_from_before_groups_opens_and_turns_fair() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1-store");
    for entry in std::fs::read_dir(&fixture).expect("fixture") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).expect("copy");
    }
    let clock = ManualClock::new(1_800_000_000_020);
    let (store, recovery) = open_at(dir.path(), &clock);
    assert!(recovery.snapshot.is_some(), "{recovery:?}");
    let queue = JobQueue::new(&store, "old").expect("queue");
    let s = queue.stats().await.expect("stats");
    assert_eq!(
        (s.ready, s.delayed, s.in_flight, s.dead, s.groups),
        (3, 1, 1, 1, 0),
        "{s:?}"
    );
    let running = queue.get("e").await.expect("get").expect("e");
    assert_eq!(running.state, tollgate::JobState::Running);
    queue
        .set_limits(&tollgate::QueueLimits {
            concurrency: Some(2),
            ..Default::default()
        })
        .await
        .expect("limits");
    let tenant = PushOptions {
        id: Some("t1".into()),
        group: Some("tenant".into()),
        ..PushOptions::default()
    };
    queue.push("t", &tenant).await.expect("push");
    // e runs: one more may go, the default group's best (a, priority 2).
    let got = queue.claim_many(10).await.expect("claim");
    assert_eq!(got.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), ["a"]);
    store.snapshot_now().expect("snapshot");
    store.close();
    drop((queue, store));

    let (store, _) = open_at(dir.path(), &clock);
    let queue = JobQueue::new(&store, "old").expect("queue");
    let s = queue.stats().await.expect("stats");
    assert_eq!((s.ready, s.in_flight, s.groups), (3, 2, 2), "{s:?}");
    assert!(queue.claim().await.expect("claim").is_none(), "2 running");
    queue.ack(&got[0].id, got[0].fence).await.expect("ack");
    let next = queue.claim().await.expect("claim").expect("a job");
    assert_eq!(next.group.as_deref(), Some("tenant"), "the tenant's turn");
}
