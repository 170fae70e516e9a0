//! The read-write lock on every store: readers together, writers alone,
//! FIFO across mixed waiters (a waiting writer holds back later readers),
//! no writer starved by a stream of readers, leases and loss.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tollgate::{ErrorKind, GateOptions, Lease, Lock, RwLock, RwMode, RwState};

use crate::support::TestStore;

const WAIT: Duration = Duration::from_secs(60);

/// Counts who is inside and fails on a reader beside a writer or two
/// writers; remembers the most readers seen together.
#[derive(Default)]
struct Inside {
    readers: AtomicUsize,
    writers: AtomicUsize,
    most_readers: AtomicUsize,
}

impl Inside {
    fn enter(&self, mode: RwMode) {
        match mode {
            RwMode::Shared => {
                let now = self.readers.fetch_add(1, Ordering::SeqCst) + 1;
                self.most_readers.fetch_max(now, Ordering::SeqCst);
                assert_eq!(self.writers.load(Ordering::SeqCst), 0, "a reader beside a writer");
            }
            RwMode::Exclusive => {
                assert_eq!(
                    self.writers.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two writers at once"
                );
                assert_eq!(self.readers.load(Ordering::SeqCst), 0, "a writer beside a reader");
            }
        }
    }

    fn leave(&self, mode: RwMode) {
        match mode {
            RwMode::Shared => self.readers.fetch_sub(1, Ordering::SeqCst),
            RwMode::Exclusive => self.writers.fetch_sub(1, Ordering::SeqCst),
        };
    }
}

/// 40 tasks, one in ten a writer, each taking the lock 5 times: never a
/// reader with a writer, never two writers, readers overlap, a writer's
/// fence is above every fence granted before it, and every grant counted.
pub(crate) async fn rw_readers_together_writers_alone(ts: TestStore) {
    let lock = RwLock::new(&ts.store, "rw-mix").expect("rwlock");
    let inside = Arc::new(Inside::default());
    let highest = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let (lock, inside, highest) = (lock.clone(), inside.clone(), highest.clone());
            let mode = if i % 10 == 3 {
                RwMode::Exclusive
            } else {
                RwMode::Shared
            };
            tokio::spawn(async move {
                for _ in 0..5 {
                    let lease = lock.acquire(mode, WAIT).await.expect("store").expect("acquired");
                    assert_eq!(RwMode::of(&lease), mode);
                    inside.enter(mode);
                    let before = highest.fetch_max(lease.fence(), Ordering::SeqCst);
                    if mode == RwMode::Exclusive {
                        // Everyone granted before this writer left before it
                        // was granted: their fences are all below its own.
                        assert!(
                            lease.fence() > before,
                            "writer fence {} not above {before}",
                            lease.fence()
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    inside.leave(mode);
                    lease.release().await.expect("release");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    let most = inside.most_readers.load(Ordering::SeqCst);
    assert!(most >= 2, "readers never held together (most at once: {most})");
    let s = lock.stats().await.expect("stats");
    assert_eq!((s.holders, s.waiting, s.grants), (0, 0, 200));
    assert_eq!(lock.state().await.expect("state"), RwState::Free);
}

/// Readers R1 R2, writer W3, readers R4 R5 queue behind a writer W0 in
/// that order: R1 and R2 enter together when W0 leaves, W3 when both
/// leave, R4 and R5 together after W3. A plain lock of the same name is a
/// capacity conflict.
pub(crate) async fn rw_fifo_across_mixed_waiters(ts: TestStore) {
    let lock = RwLock::new(&ts.store, "rw-fifo").expect("rwlock");
    let w0 = lock.try_write().await.expect("store").expect("free");
    assert_eq!(lock.state().await.expect("state"), RwState::Written);
    assert!(
        lock.try_read().await.expect("store").is_none(),
        "a reader beside the writer"
    );

    let order = [
        RwMode::Shared,
        RwMode::Shared,
        RwMode::Exclusive,
        RwMode::Shared,
        RwMode::Shared,
    ];
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Lease)>();
    for (i, mode) in order.into_iter().enumerate() {
        let (waiter, tx) = (lock.clone(), tx.clone());
        tokio::spawn(async move {
            let lease = waiter.acquire(mode, WAIT).await.expect("store").expect("granted");
            let _ = tx.send((i, lease));
        });
        // Each in line before the next starts, so arrival order is known.
        wait_for(|| async { lock.stats().await.expect("stats").waiting == i as u64 + 1 }).await;
    }
    let conflict = Lock::new(&ts.store, "rw-fifo")
        .expect("lock")
        .try_acquire()
        .await
        .expect_err("a mutex on a read-write lock's name");
    assert_eq!(conflict.kind(), ErrorKind::CapacityConflict);

    w0.release().await.expect("release w0");
    let first = [next(&mut rx).await, next(&mut rx).await];
    let mut ids: Vec<usize> = first.iter().map(|(i, _)| *i).collect();
    ids.sort_unstable();
    assert_eq!(ids, [0, 1], "the two readers at the head enter together");
    assert_eq!(lock.state().await.expect("state"), RwState::Read(2));
    quiet(
        &mut rx,
        "the writer or a reader behind it entered beside the readers",
    )
    .await;

    let [(_, r1), (_, r2)] = first;
    r1.release().await.expect("release");
    quiet(&mut rx, "the writer entered before the last reader left").await;
    r2.release().await.expect("release");
    let (i, w3) = next(&mut rx).await;
    assert_eq!(i, 2, "the writer is next");
    assert_eq!(lock.state().await.expect("state"), RwState::Written);
    quiet(&mut rx, "a reader entered beside the writer").await;

    let w3_fence = w3.fence();
    w3.release().await.expect("release");
    let last = [next(&mut rx).await, next(&mut rx).await];
    let mut ids: Vec<usize> = last.iter().map(|(i, _)| *i).collect();
    ids.sort_unstable();
    assert_eq!(ids, [3, 4]);
    assert!(last.iter().all(|(_, l)| l.fence() > w3_fence));
    for (_, l) in last {
        l.release().await.expect("release");
    }
}

/// Eight readers keep the lock read without a gap (each takes it again as
/// soon as it lets go). A writer that queues is granted once the readers
/// who held when it came have left: its wait is bounded by one hold, and
/// no newcomer reads while it waits.
pub(crate) async fn rw_a_writer_is_not_starved_by_readers(ts: TestStore) {
    const HOLD: Duration = Duration::from_millis(40);
    let lock = RwLock::new(&ts.store, "rw-starve").expect("rwlock");
    let stop = Arc::new(AtomicBool::new(false));
    let inside = Arc::new(Inside::default());
    let readers: Vec<_> = (0..8)
        .map(|_| {
            let (lock, stop, inside) = (lock.clone(), stop.clone(), inside.clone());
            tokio::spawn(async move {
                let mut rounds = 0u32;
                while !stop.load(Ordering::SeqCst) {
                    let lease = lock.read(WAIT).await.expect("store").expect("read");
                    inside.enter(RwMode::Shared);
                    tokio::time::sleep(HOLD).await;
                    inside.leave(RwMode::Shared);
                    lease.release().await.expect("release");
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    // The readers overlap from here on.
    wait_for(|| async { inside.readers.load(Ordering::SeqCst) >= 2 }).await;

    let writer = {
        let (lock, inside) = (lock.clone(), inside.clone());
        tokio::spawn(async move {
            let asked = Instant::now();
            let lease = lock.write(WAIT).await.expect("store").expect("write");
            let waited = asked.elapsed();
            inside.enter(RwMode::Exclusive);
            tokio::time::sleep(Duration::from_millis(20)).await;
            inside.leave(RwMode::Exclusive);
            lease.release().await.expect("release");
            waited
        })
    };
    // Once the writer is in line, a newcomer may not read ahead of it,
    // though readers hold.
    let mut refused = false;
    for _ in 0..500 {
        let s = lock.stats().await.expect("stats");
        if s.waiting > 0 && s.used > 0 && s.used < u64::from(tollgate::RW_PERMITS) {
            // The writer (granted at the earliest when these readers have
            // left, and holding 20 ms) cannot have come and gone since.
            if let Some(l) = lock.try_read().await.expect("store") {
                panic!("a newcomer read past the waiting writer (fence {})", l.fence());
            }
            refused = true;
            break;
        }
        assert!(
            !writer.is_finished(),
            "the writer never waited behind the readers"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let waited = writer.await.expect("writer");
    stop.store(true, Ordering::SeqCst);
    let rounds: u32 = {
        let mut sum = 0;
        for r in readers {
            sum += r.await.expect("reader");
        }
        sum
    };
    assert!(rounds >= 8, "the readers made {rounds} rounds");
    assert!(refused, "the writer was never seen waiting behind readers");
    // The readers who held when it queued each had one hold left, plus
    // the store's round trips: a bound the CI machine keeps with room.
    assert!(
        waited < Duration::from_secs(3),
        "the writer waited {waited:?} behind readers holding {HOLD:?} each"
    );
}

/// A reader's lease that is not renewed ends: lost() fires, its release
/// says so, and a writer waiting behind it is granted when it ends (a
/// crashed reader frees the lock).
pub(crate) async fn rw_leases_end_and_loss_is_told(ts: TestStore) {
    let options = GateOptions {
        ttl: Duration::from_millis(400),
        auto_renew: false,
        ..GateOptions::default()
    };
    let lock = RwLock::with_options(&ts.store, "rw-lease", options.clone()).expect("rwlock");
    let reader = lock.try_read().await.expect("store").expect("free");
    let writer = {
        let lock = RwLock::new(&ts.store, "rw-lease").expect("rwlock");
        tokio::spawn(async move { lock.write(WAIT).await.expect("store").expect("write") })
    };
    tokio::time::timeout(Duration::from_secs(5), reader.lost())
        .await
        .expect("loss told");
    let w = tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("the writer was granted when the reader's lease ended")
        .expect("task");
    assert!(w.fence() > reader.fence());
    let err = reader.release().await.expect_err("released after loss");
    assert!(err.is_lease_lost(), "{err}");
    w.release().await.expect("release");

    let unfair = GateOptions {
        fair: false,
        ..options
    };
    assert_eq!(
        RwLock::with_options(&ts.store, "rw-lease", unfair)
            .expect_err("unfair")
            .kind(),
        ErrorKind::InvalidInput
    );
}

async fn next(rx: &mut tokio::sync::mpsc::UnboundedReceiver<(usize, Lease)>) -> (usize, Lease) {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a grant within 10 s")
        .expect("sender alive")
}

/// Nothing is granted for a while.
async fn quiet(rx: &mut tokio::sync::mpsc::UnboundedReceiver<(usize, Lease)>, what: &str) {
    if let Ok(Some((i, _))) = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await {
        panic!("{what} (waiter {i})");
    }
}

async fn wait_for<F, Fut>(mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "condition not met in 10 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
