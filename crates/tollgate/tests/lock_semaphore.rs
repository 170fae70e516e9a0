//! Locks and semaphores under many concurrent tasks, in real time, on both
//! stores: the invariants (one holder, at most N permits, FIFO, loss is
//! reported) must hold however the tasks interleave.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use support::TestStore;
use tollgate::{GateOptions, Lock, Semaphore};

#[path = "lock_semaphore/election.rs"]
mod election;
use election::{
    election_a_restarted_leader_resumes_with_its_token,
    election_one_leader_at_a_time_and_observers_see_each_change,
};
#[path = "lock_semaphore/fencing.rs"]
mod fencing;
#[path = "lock_semaphore/rw.rs"]
mod rw;
use rw::{
    rw_a_writer_is_not_starved_by_readers, rw_fifo_across_mixed_waiters, rw_leases_end_and_loss_is_told,
    rw_readers_together_writers_alone,
};

const WAIT: Duration = Duration::from_secs(60);

fn short_lease(auto_renew: bool) -> GateOptions {
    GateOptions {
        ttl: Duration::from_millis(300),
        heartbeat: Duration::from_secs(10),
        auto_renew,
        fair: true,
        max_hold: None,
    }
}

async fn mutual_exclusion_with_50_tasks(ts: TestStore) {
    let lock = Lock::new(&ts.store, "counter").expect("lock");
    let counter = Arc::new(std::sync::Mutex::new(0u64));
    let inside = Arc::new(AtomicUsize::new(0));
    let fences = Arc::new(std::sync::Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (lock, counter, inside, fences) =
                (lock.clone(), counter.clone(), inside.clone(), fences.clone());
            tokio::spawn(async move {
                for _ in 0..4 {
                    let guard = lock.acquire(WAIT).await.expect("store").expect("acquired");
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders at once");
                    // A deliberately non-atomic read-modify-write.
                    let seen = *counter.lock().expect("counter");
                    tokio::task::yield_now().await;
                    *counter.lock().expect("counter") = seen + 1;
                    fences.lock().expect("fences").push(guard.fence());
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.expect("release");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    assert_eq!(*counter.lock().expect("counter"), 200);
    let fences = fences.lock().expect("fences").clone();
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences out of order: {fences:?}"
    );
    let s = lock.stats().await.expect("stats");
    assert_eq!((s.holders, s.waiting, s.grants), (0, 0, 200));
}

async fn semaphore_of_3_under_30_tasks(ts: TestStore) {
    let sem = Semaphore::new(&ts.store, "pool", 3).expect("semaphore");
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..30)
        .map(|_| {
            let (sem, inside, most) = (sem.clone(), inside.clone(), most.clone());
            tokio::spawn(async move {
                for _ in 0..3 {
                    let permit = sem.acquire(1, WAIT).await.expect("store").expect("acquired");
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    assert!(now <= 3, "{now} holders of a 3-permit semaphore");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await.expect("release");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    assert_eq!(most.load(Ordering::SeqCst), 3, "the limit should be reached");
    assert_eq!(sem.stats().await.expect("stats").used, 0);
}

async fn waiters_are_served_in_arrival_order(ts: TestStore) {
    let lock = Lock::new(&ts.store, "fifo").expect("lock");
    let first = lock.acquire(WAIT).await.expect("store").expect("free");
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..12 {
        let (waiter, order) = (lock.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let g = waiter.acquire(WAIT).await.expect("store").expect("acquired");
            order.lock().expect("order").push((i, g.fence()));
            g.release().await.expect("release");
        }));
        // Wait until this waiter stands in line before the next arrives.
        while lock.stats().await.expect("stats").waiting < i + 1 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    // A newcomer who only tries must not overtake the line.
    assert!(lock.try_acquire().await.expect("store").is_none());
    first.release().await.expect("release");
    for t in tasks {
        t.await.expect("task");
    }
    let order = order.lock().expect("order").clone();
    let arrivals: Vec<u64> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(arrivals, (0..12).collect::<Vec<_>>());
    assert!(order.windows(2).all(|w| w[0].1 < w[1].1));
}

async fn a_large_request_is_not_starved_by_small_ones(ts: TestStore) {
    let sem = Semaphore::new(&ts.store, "wide", 4).expect("semaphore");
    let stop = Instant::now() + Duration::from_millis(1500);
    let small: Vec<_> = (0..8)
        .map(|_| {
            let sem = sem.clone();
            tokio::spawn(async move {
                while Instant::now() < stop {
                    if let Some(p) = sem.acquire(1, WAIT).await.expect("store") {
                        tokio::time::sleep(Duration::from_millis(3)).await;
                        p.release().await.expect("release");
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let asked = Instant::now();
    let big = sem
        .acquire(4, Duration::from_secs(5))
        .await
        .expect("store")
        .expect("big request served");
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "took {:?}",
        asked.elapsed()
    );
    assert_eq!(sem.stats().await.expect("stats").used, 4);
    big.release().await.expect("release");
    for t in small {
        t.await.expect("task");
    }
}

async fn expiry_is_reported_and_never_renewed(ts: TestStore) {
    let lock = Lock::with_options(&ts.store, "lapse", short_lease(false)).expect("lock");
    let old = lock.acquire(WAIT).await.expect("store").expect("free");
    tokio::time::timeout(Duration::from_secs(2), old.lost())
        .await
        .expect("lost() fires after the TTL");
    assert!(old.is_lost());
    // lost() fires at this process's conservative estimate of the expiry,
    // a moment before the store's own clock gets there.
    let started = Instant::now();
    let new = loop {
        if let Some(new) = lock.try_acquire().await.expect("store") {
            break new;
        }
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "still held after expiry"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(new.fence() > old.fence());
    assert!(
        old.extend(Duration::from_secs(1))
            .await
            .expect_err("cannot renew")
            .is_lease_lost()
    );
    assert!(old.release().await.expect_err("cannot release").is_lease_lost());
    new.release().await.expect("release");
}

async fn automatic_renewal_keeps_the_lease(ts: TestStore) {
    let lock = Lock::with_options(&ts.store, "renewed", short_lease(true)).expect("lock");
    let held = lock.acquire(WAIT).await.expect("store").expect("free");
    let lost = held.lost();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(
        lock.try_acquire().await.expect("store").is_none(),
        "held past 3 TTLs"
    );
    assert!(!held.is_lost());
    held.release().await.expect("release");
    assert!(
        tokio::time::timeout(Duration::from_millis(100), lost)
            .await
            .is_err(),
        "no loss after release"
    );
}

/// One timer task renews every lease of a store: twenty leases of 300 ms
/// all outlive three TTLs, none is reported lost, and once released (or
/// dropped) none is renewed or reported lost any more.
async fn many_leases_are_renewed_by_the_one_keeper(ts: TestStore) {
    let locks: Vec<Lock> = (0..20)
        .map(|i| Lock::with_options(&ts.store, &format!("kept-{i}"), short_lease(true)).expect("lock"))
        .collect();
    let mut held = Vec::new();
    for lock in &locks {
        held.push(lock.acquire(WAIT).await.expect("store").expect("free"));
    }
    let lost: Vec<_> = held.iter().map(|l| l.lost()).collect();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    for (lock, lease) in locks.iter().zip(&held) {
        assert!(
            lock.try_acquire().await.expect("store").is_none(),
            "held past 3 TTLs"
        );
        assert!(!lease.is_lost());
    }
    for (i, lease) in held.into_iter().enumerate() {
        if i % 2 == 0 {
            lease.release().await.expect("release");
        } else {
            drop(lease);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    for lock in &locks {
        loop {
            if let Some(again) = lock.try_acquire().await.expect("store") {
                again.release().await.expect("release");
                break;
            }
            assert!(Instant::now() < deadline, "a dropped lease was kept");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let any_lost = futures_util::future::select_all(lost.into_iter().map(Box::pin));
    assert!(
        tokio::time::timeout(Duration::from_millis(400), any_lost)
            .await
            .is_err(),
        "no loss after release or drop"
    );
}

/// `extend` moves the lease's next look: a 300 ms lease that is not renewed
/// but extended to 1 s is not lost at 300 ms, and is at 1 s.
async fn extend_moves_the_expiry_check(ts: TestStore) {
    let lock = Lock::with_options(&ts.store, "extended", short_lease(false)).expect("lock");
    let lease = lock.acquire(WAIT).await.expect("store").expect("free");
    let started = Instant::now();
    lease.extend(Duration::from_secs(1)).await.expect("extend");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!lease.is_lost(), "lost at the old deadline");
    assert!(lock.try_acquire().await.expect("store").is_none());
    tokio::time::timeout(Duration::from_secs(2), lease.lost())
        .await
        .expect("lost() fires after the extended TTL");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
}

async fn hand_off_wakes_the_waiter_without_polling(ts: TestStore) {
    let lock = Lock::new(&ts.store, "wake").expect("lock");
    let held = lock.acquire(WAIT).await.expect("store").expect("free");
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let g = lock.acquire(WAIT).await.expect("store").expect("acquired");
            let at = Instant::now();
            g.release().await.expect("release");
            at
        })
    };
    while lock.stats().await.expect("stats").waiting == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Let the waiter settle into its sleep, then release.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let released = Instant::now();
    held.release().await.expect("release");
    let granted = waiter.await.expect("task");
    // The fallback re-check runs every second; a notified waiter is far
    // quicker than that.
    let took = granted.duration_since(released);
    assert!(took < Duration::from_millis(300), "hand-off took {took:?}");
}

async fn dropping_a_wait_leaves_the_line(ts: TestStore) {
    let lock = Lock::new(&ts.store, "impatient").expect("lock");
    let held = lock.acquire(WAIT).await.expect("store").expect("free");
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire(WAIT).await })
    };
    while lock.stats().await.expect("stats").waiting == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    waiter.abort();
    let deadline = Instant::now() + Duration::from_secs(2);
    while lock.stats().await.expect("stats").waiting > 0 {
        assert!(Instant::now() < deadline, "the dropped waiter stayed in line");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // And a dropped guard gives the lock back.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(2);
    while lock.try_acquire().await.expect("store").is_none() {
        assert!(Instant::now() < deadline, "the dropped guard kept the lock");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn wait_limit_is_honoured(ts: TestStore) {
    let sem = Semaphore::new(&ts.store, "full", 2).expect("semaphore");
    let a = sem.acquire(2, WAIT).await.expect("store").expect("free");
    let t = Instant::now();
    assert!(
        sem.acquire(1, Duration::from_millis(300))
            .await
            .expect("store")
            .is_none()
    );
    assert!(t.elapsed() >= Duration::from_millis(300) && t.elapsed() < Duration::from_secs(2));
    assert_eq!(
        sem.stats().await.expect("stats").waiting,
        0,
        "timed-out waiter left the line"
    );
    assert!(sem.try_acquire(1).await.expect("store").is_none());
    a.release().await.expect("release");
}

/// `release_after` keeps the lease for the hold and then lets it end by
/// itself (a 30 s lease shortened, nothing left renewing it), and the
/// label given on acquiring shows among the holders meanwhile.
async fn release_after_holds_then_lets_go(ts: TestStore) {
    let lock = Lock::new(&ts.store, "nightly").expect("lock");
    let lease = lock
        .gate()
        .acquire_as(1, Duration::ZERO, Some("host-a pid 7"))
        .await
        .expect("store")
        .expect("free");
    let holders = lock.gate().holders(10).await.expect("holders");
    assert_eq!(holders[0].label.as_deref(), Some("host-a pid 7"));
    let held = Instant::now();
    lease
        .release_after(Duration::from_millis(500))
        .await
        .expect("hold");
    // Held for the hold, though nothing renews or releases it.
    assert!(lock.try_acquire().await.expect("store").is_none());
    let ttl = lock.gate().holders(10).await.expect("holders")[0].ttl;
    assert!(
        ttl <= Duration::from_millis(500),
        "the 30 s lease was not shortened: {ttl:?}"
    );
    // Then free, at the hold's end (within a generous margin).
    let next = lock
        .acquire(Duration::from_secs(5))
        .await
        .expect("store")
        .expect("free after the hold");
    let waited = held.elapsed();
    assert!(
        waited >= Duration::from_millis(450) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    // A hold under 10 ms is a release now.
    next.release_after(Duration::from_millis(5))
        .await
        .expect("release");
    assert!(lock.try_acquire().await.expect("store").is_some());
}

/// `release_after` on a lease that already ended says so (it never brings
/// it back), and a hold over 24 h is refused without touching the lease.
async fn release_after_a_lost_lease_is_lease_lost(ts: TestStore) {
    let lock = Lock::with_options(&ts.store, "short", short_lease(false)).expect("lock");
    let lease = lock.try_acquire().await.expect("store").expect("free");
    tokio::time::sleep(Duration::from_millis(450)).await;
    let e = lease
        .release_after(Duration::from_secs(5))
        .await
        .expect_err("ended");
    assert!(e.is_lease_lost(), "{e}");
    let lease = lock.try_acquire().await.expect("store").expect("free again");
    let e = lease
        .release_after(Duration::from_secs(25 * 3600))
        .await
        .expect_err("too long");
    assert_eq!(e.kind(), tollgate::ErrorKind::InvalidInput, "{e}");
}

fn non_fair() -> GateOptions {
    GateOptions {
        fair: false,
        ..GateOptions::default()
    }
}

async fn non_fair_semaphore_of_3_under_30_tasks(ts: TestStore) {
    let sem = Semaphore::with_options(&ts.store, "barging-pool", 3, non_fair()).expect("semaphore");
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let fences = Arc::new(std::sync::Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..30)
        .map(|i| {
            let (sem, inside, most, fences) = (sem.clone(), inside.clone(), most.clone(), fences.clone());
            tokio::spawn(async move {
                for _ in 0..3 {
                    // Multi-permit requests too: they wait for enough.
                    let permits = if i % 5 == 0 { 2 } else { 1 };
                    let permit = sem
                        .acquire(permits, WAIT)
                        .await
                        .expect("store")
                        .expect("acquired");
                    let now = inside.fetch_add(permits as usize, Ordering::SeqCst) + permits as usize;
                    most.fetch_max(now, Ordering::SeqCst);
                    assert!(now <= 3, "{now} permits held of a 3-permit semaphore");
                    fences.lock().expect("fences").push(permit.fence());
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    inside.fetch_sub(permits as usize, Ordering::SeqCst);
                    permit.release().await.expect("release");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    assert_eq!(most.load(Ordering::SeqCst), 3, "the limit should be reached");
    let s = sem.stats().await.expect("stats");
    // Nobody ever joined the line: barging waiters wait outside it.
    assert_eq!((s.used, s.waiting, s.grants), (0, 0, 90));
    let mut fences = fences.lock().expect("fences").clone();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), 90, "every grant has its own fence");
}

async fn non_fair_waiter_is_woken_when_a_permit_is_freed(ts: TestStore) {
    let lock = Lock::with_options(&ts.store, "barging-wake", non_fair()).expect("lock");
    let held = lock.acquire(WAIT).await.expect("store").expect("free");
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let g = lock.acquire(WAIT).await.expect("store").expect("acquired");
            let at = Instant::now();
            g.release().await.expect("release");
            at
        })
    };
    // Let the waiter fail its try and settle into its sleep; it is not in
    // line, so the gate shows nobody waiting.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(lock.stats().await.expect("stats").waiting, 0);
    let released = Instant::now();
    held.release().await.expect("release");
    let granted = waiter.await.expect("task");
    // The re-check runs every second; a woken waiter is far quicker.
    let took = granted.duration_since(released);
    assert!(
        took < Duration::from_millis(300),
        "the barging waiter took {took:?}"
    );
}

async fn fair_waiters_in_line_go_before_barging_ones(ts: TestStore) {
    line_before_barging(&ts, "mixed", true).await;
}

/// Freed permits go to the line before a barging waiter even when the
/// release could pass them (its handle is non-fair, the waiter is here).
async fn a_release_passes_nothing_past_the_line(ts: TestStore) {
    line_before_barging(&ts, "no-pass-past-line", false).await;
}

/// A barging acquire waits, then a fair one queues; the holder (of a fair
/// handle or a non-fair one) releases: the fair ticket is served first.
async fn line_before_barging(ts: &TestStore, name: &str, fair_holder: bool) {
    let fair = Lock::new(&ts.store, name).expect("lock");
    let barging = Lock::with_options(&ts.store, name, non_fair()).expect("lock");
    let holder = if fair_holder { &fair } else { &barging };
    let held = holder.acquire(WAIT).await.expect("store").expect("free");
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let barger = {
        let (barging, order) = (barging.clone(), order.clone());
        tokio::spawn(async move {
            let g = barging.acquire(WAIT).await.expect("store").expect("acquired");
            order.lock().expect("order").push("barging");
            g.release().await.expect("release");
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let in_line = {
        let (fair, order) = (fair.clone(), order.clone());
        tokio::spawn(async move {
            let g = fair.acquire(WAIT).await.expect("store").expect("acquired");
            order.lock().expect("order").push("fair");
            tokio::time::sleep(Duration::from_millis(50)).await;
            g.release().await.expect("release");
        })
    };
    while fair.stats().await.expect("stats").waiting == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The barging waiter came first, but the freed lock goes to the line.
    held.release().await.expect("release");
    in_line.await.expect("task");
    barger.await.expect("task");
    assert_eq!(*order.lock().expect("order"), ["fair", "barging"]);
}

/// A release on a non-fair handle passes its permits straight on to an
/// acquire waiting in the same process, in the same step: once the release
/// returns, the waiter holds them (a try from anyone else finds them
/// taken) under a higher fence. Capacities 1 and 3 keep holders inline
/// (leave_fast.lua on Redis), 9 on a sorted set (leave.lua).
async fn non_fair_release_passes_its_permits_to_a_waiter_here(ts: TestStore) {
    for capacity in [1, 3, 9] {
        let name = format!("passing-{capacity}");
        let sem = Semaphore::with_options(&ts.store, &name, capacity, non_fair()).expect("semaphore");
        let fair = Semaphore::new(&ts.store, &name, capacity).expect("semaphore");
        let held = sem.acquire(capacity, WAIT).await.expect("store").expect("free");
        let (tx, rx) = tokio::sync::oneshot::channel();
        let waiter = {
            let sem = sem.clone();
            tokio::spawn(async move {
                let lease = sem.acquire(1, WAIT).await.expect("store").expect("acquired");
                let _ = tx.send(lease.fence());
                lease
            })
        };
        // Let the waiter fail its try and settle in to wait.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let fence = held.fence();
        held.release().await.expect("release");
        let s = fair.stats().await.expect("stats");
        assert_eq!(
            (s.used, s.waiting),
            (1, 0),
            "capacity {capacity}: the waiter holds one permit"
        );
        assert!(
            fair.try_acquire(capacity).await.expect("store").is_none(),
            "capacity {capacity}: the passed permit is not free for anyone"
        );
        let passed = rx.await.expect("granted");
        assert!(
            passed > fence,
            "capacity {capacity}: fence {passed} after {fence}"
        );
        waiter.await.expect("task").release().await.expect("release");
        assert_eq!(fair.stats().await.expect("stats").used, 0);
    }
}

/// A capacity lowered below the permits held lets nobody in, a pass
/// included: of the holders of a gate lowered to 1, the releases pass
/// nothing to the waiter; it gets in once the holders are down to none.
/// Capacity 3 keeps its holders inline (leave_fast.lua on Redis), 9 on a
/// sorted set (leave.lua).
async fn a_pass_respects_a_lowered_capacity(ts: TestStore) {
    for capacity in [3, 9] {
        let name = format!("lowered-pass-{capacity}");
        let gate = tollgate::Gate::new(&ts.store, &name, Some(capacity), non_fair()).expect("gate");
        let mut held = Vec::new();
        for _ in 0..capacity {
            held.push(gate.try_acquire(1).await.expect("store").expect("free"));
        }
        gate.set_capacity(1).await.expect("set_capacity");
        // The waiter names no capacity (the stored one is 1 now).
        let waiter = tollgate::Gate::new(&ts.store, &name, None, non_fair()).expect("gate");
        let task =
            tokio::spawn(async move { waiter.acquire(1, WAIT).await.expect("store").expect("acquired") });
        tokio::time::sleep(Duration::from_millis(100)).await;
        for expected in (1..capacity).rev() {
            held.pop().expect("held").release().await.expect("release");
            let s = gate.stats().await.expect("stats");
            assert_eq!(
                s.used,
                u64::from(expected),
                "capacity {capacity}: a pass went over the lowered capacity"
            );
        }
        held.pop().expect("held").release().await.expect("release");
        let lease = tokio::time::timeout(Duration::from_secs(3), task)
            .await
            .expect("granted once the gate emptied")
            .expect("task");
        assert_eq!(gate.stats().await.expect("stats").used, 1);
        lease.release().await.expect("release");
    }
}

/// An acquire given up while it waits to be passed permits leaves nothing
/// behind: the next release frees them (or passes them to a live waiter).
async fn a_given_up_barging_acquire_is_not_passed_to(ts: TestStore) {
    let lock = Lock::with_options(&ts.store, "given-up", non_fair()).expect("lock");
    let held = lock.acquire(WAIT).await.expect("store").expect("free");
    let gave_up = lock.acquire(Duration::from_millis(100)).await.expect("store");
    assert!(gave_up.is_none(), "the lock was held");
    // And one whose future is dropped (a timeout around it).
    let dropped = tokio::time::timeout(Duration::from_millis(100), lock.acquire(WAIT)).await;
    assert!(dropped.is_err(), "the lock was held");
    held.release().await.expect("release");
    let again = lock.try_acquire().await.expect("store");
    assert!(again.is_some(), "the released lock is free");
}

/// Only the holder's own token releases a mutex: a stranger's token, and
/// the token of a lease that ran out before the current holder came, leave
/// the holder in place. (On Redis the holder's lease is a lone lease:
/// the other tokens' releases miss it and fall through to the paths that
/// move it into h, leave_fast.lua's one-permit path among them.)
async fn only_the_holders_token_releases_a_mutex(ts: TestStore) {
    let lock = Lock::with_options(&ts.store, "own-token", short_lease(false)).expect("lock");
    let gate = tollgate::Gate::new(&ts.store, "own-token", Some(1), short_lease(false)).expect("gate");
    for _ in 0..3 {
        lock.acquire(WAIT)
            .await
            .expect("store")
            .expect("acquired")
            .release()
            .await
            .expect("release");
    }
    let held = lock.acquire(WAIT).await.expect("store").expect("acquired");
    assert_eq!(
        gate.leave("stranger").await.expect("leave"),
        tollgate::Left::Unknown
    );
    assert!(
        lock.try_acquire().await.expect("store").is_none(),
        "a stranger's token released the holder"
    );
    held.release().await.expect("the holder still held");

    let lost = lock.acquire(WAIT).await.expect("store").expect("acquired");
    let stale = lost.token().to_owned();
    tokio::time::sleep(Duration::from_millis(450)).await;
    let now_held = lock
        .try_acquire()
        .await
        .expect("store")
        .expect("the lease ran out");
    assert_eq!(gate.leave(&stale).await.expect("leave"), tollgate::Left::Unknown);
    assert!(
        lock.try_acquire().await.expect("store").is_none(),
        "a stale token released the next holder"
    );
    now_held.release().await.expect("the next holder still held");
}

/// A lease renewed in the background is held no longer than its
/// max_hold: renewals stop carrying it on, it is lost about then (and
/// says why), a waiter gets the lock, and extending it is refused.
async fn max_hold_ends_a_renewed_lease(ts: TestStore) {
    let capped = GateOptions {
        max_hold: Some(Duration::from_millis(900)),
        ..short_lease(true)
    };
    let lock = Lock::with_options(&ts.store, "capped", capped).expect("lock");
    let asked = Instant::now();
    let lease = lock.try_acquire().await.expect("store").expect("free");
    assert!(!lease.reached_max_hold());
    // A capped waiter too: its lease comes handed over from the line,
    // running to its heartbeat deadline (10 s), and must still end at its
    // own cap.
    let waiter = {
        let options = GateOptions {
            max_hold: Some(Duration::from_millis(900)),
            ..GateOptions::default()
        };
        let lock = Lock::with_options(&ts.store, "capped", options).expect("lock");
        tokio::spawn(async move {
            let lease = lock.acquire(WAIT).await.expect("store").expect("granted");
            (lease, Instant::now())
        })
    };
    tokio::time::timeout(Duration::from_secs(5), lease.lost())
        .await
        .expect("lost within 5 s");
    let held = asked.elapsed();
    // Renewed past its 300 ms lease (so the cap, not a missed renewal,
    // ended it), and not much past the 900 ms cap.
    assert!(
        held >= Duration::from_millis(850) && held < Duration::from_millis(1500),
        "held {held:?}"
    );
    assert!(lease.reached_max_hold());
    let err = lease
        .extend(Duration::from_secs(1))
        .await
        .expect_err("extended past max_hold");
    assert!(err.is_lease_lost(), "{err}");
    let (next, granted) = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter got the lock")
        .expect("task");
    assert!(next.fence() > lease.fence());
    tokio::time::timeout(Duration::from_secs(5), next.lost())
        .await
        .expect("the handed-over lease lost within 5 s");
    let held = granted.elapsed();
    assert!(
        held < Duration::from_millis(1500),
        "the handed-over lease held {held:?}"
    );
    // The store let it go too: the lock is free within moments (lost()
    // fires at this process's deadline, counted from the renewal's send,
    // a round trip before the store's).
    let free = Lock::new(&ts.store, "capped").expect("lock");
    let start = Instant::now();
    loop {
        if let Some(l) = free.try_acquire().await.expect("store") {
            l.release().await.expect("release");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_millis(500),
            "the store still held the capped lease"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

on_both_stores!(realtime:
    only_the_holders_token_releases_a_mutex,
    release_after_holds_then_lets_go,
    release_after_a_lost_lease_is_lease_lost,
    mutual_exclusion_with_50_tasks,
    semaphore_of_3_under_30_tasks,
    waiters_are_served_in_arrival_order,
    a_large_request_is_not_starved_by_small_ones,
    expiry_is_reported_and_never_renewed,
    automatic_renewal_keeps_the_lease,
    many_leases_are_renewed_by_the_one_keeper,
    extend_moves_the_expiry_check,
    hand_off_wakes_the_waiter_without_polling,
    dropping_a_wait_leaves_the_line,
    wait_limit_is_honoured,
    non_fair_semaphore_of_3_under_30_tasks,
    non_fair_waiter_is_woken_when_a_permit_is_freed,
    fair_waiters_in_line_go_before_barging_ones,
    non_fair_release_passes_its_permits_to_a_waiter_here,
    a_release_passes_nothing_past_the_line,
    a_given_up_barging_acquire_is_not_passed_to,
    a_pass_respects_a_lowered_capacity,
    max_hold_ends_a_renewed_lease,
    election_one_leader_at_a_time_and_observers_see_each_change,
    election_a_restarted_leader_resumes_with_its_token,
    rw_readers_together_writers_alone,
    rw_fifo_across_mixed_waiters,
    rw_a_writer_is_not_starved_by_readers,
    rw_leases_end_and_loss_is_told,
);

/// A gate's channel stays subscribed for a linger after its last waiter
/// (no SUBSCRIBE/UNSUBSCRIBE per queued acquire), is unsubscribed after
/// it, and a waiter that queues after that still gets its hand-off
/// without polling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lingering_subscription_ends_and_hand_offs_still_arrive() {
    let ts = TestStore::redis().await;
    let server = ts.server.as_ref().expect("server");
    let channels = || match server.command(&["PUBSUB", "CHANNELS", "*{linger}*"]) {
        ::redis::Value::Array(a) => a.len(),
        other => panic!("PUBSUB CHANNELS: {other:?}"),
    };
    let lock = Lock::new(&ts.store, "linger").expect("lock");
    let hand_off = || async {
        let held = lock.acquire(WAIT).await.expect("store").expect("free");
        let waiter = {
            let lock = lock.clone();
            tokio::spawn(async move { granted_at(lock.acquire(WAIT).await).await })
        };
        let took = hand_off_time(
            || async { lock.stats().await.expect("stats").waiting },
            held,
            waiter,
        )
        .await;
        assert!(took < Duration::from_millis(300), "hand-off took {took:?}");
    };
    hand_off().await;
    assert_eq!(channels(), 1, "unsubscribed at once");
    hand_off().await;
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(channels(), 0, "still subscribed after the linger");
    hand_off().await;
}

/// When an acquire's lease was granted (it is then released).
async fn granted_at(acquired: tollgate::Result<Option<tollgate::Lease>>) -> Instant {
    let lease = acquired.expect("store").expect("acquired");
    let at = Instant::now();
    lease.release().await.expect("release");
    at
}

/// Releases `held` once `waiting()` shows a ticket in line (and 50 ms
/// more), and answers how long after the release `waiter` (a task that
/// answers `granted_at`) was granted.
async fn hand_off_time<F, W>(
    waiting: W,
    held: tollgate::Lease,
    waiter: tokio::task::JoinHandle<Instant>,
) -> Duration
where
    W: Fn() -> F,
    F: std::future::Future<Output = u64>,
{
    while waiting().await == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let released = Instant::now();
    held.release().await.expect("release");
    waiter.await.expect("task").duration_since(released)
}

/// A hand-off to a waiter of another store (another process, as far as
/// the scripts can tell) is published: the release's reply wakes only the
/// releasing store's own waiters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_to_another_store_is_published() {
    let server = support::RedisServer::start();
    let (a, b) = (
        tollgate::Store::redis(&server.url()).await.expect("connect"),
        tollgate::Store::redis(&server.url()).await.expect("connect"),
    );
    for capacity in [1, 9] {
        // Inline holders (the fast path) and holders on a sorted set (the
        // general path).
        let name = format!("across-{capacity}");
        let holder = Semaphore::new(&a, &name, capacity).expect("semaphore");
        let waiter = Semaphore::new(&b, &name, capacity).expect("semaphore");
        let held = holder
            .acquire(capacity, WAIT)
            .await
            .expect("store")
            .expect("free");
        let task = {
            let waiter = waiter.clone();
            tokio::spawn(async move { granted_at(waiter.acquire(1, WAIT).await).await })
        };
        let took = hand_off_time(
            || async { holder.stats().await.expect("stats").waiting },
            held,
            task,
        )
        .await;
        // The fallback re-check runs every second.
        assert!(
            took < Duration::from_millis(300),
            "capacity {capacity}: hand-off took {took:?}"
        );
    }
}

/// A busy process cannot keep a non-fair gate's permits from another: at
/// most MAX_PASSES releases in a row pass them on to a waiter of the same
/// process, then they are freed for every waiter to race for. Two stores
/// (two processes, as far as the gate can tell) of 8 workers each on a
/// semaphore of 2: both get a share within 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_leave_other_processes_a_share() {
    let server = support::RedisServer::start();
    let mut counts = Vec::new();
    let until = Instant::now() + Duration::from_secs(2);
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let store = tollgate::Store::redis(&server.url()).await.expect("connect");
        let count = Arc::new(AtomicUsize::new(0));
        counts.push(count.clone());
        for _ in 0..8 {
            let sem = Semaphore::with_options(&store, "shared-pool", 2, non_fair()).expect("semaphore");
            let count = count.clone();
            tasks.push(tokio::spawn(async move {
                while Instant::now() < until {
                    let Some(g) = sem.acquire(1, Duration::from_secs(1)).await.expect("store") else {
                        continue;
                    };
                    count.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    g.release().await.expect("release");
                }
            }));
        }
    }
    for t in tasks {
        t.await.expect("task");
    }
    let (a, b) = (counts[0].load(Ordering::SeqCst), counts[1].load(Ordering::SeqCst));
    let total = a + b;
    assert!(total > 100, "only {total} sections in 2 s");
    assert!(
        a.min(b) * 10 >= total,
        "one process got {a}, the other {b}: passes kept the permits in one"
    );
}
