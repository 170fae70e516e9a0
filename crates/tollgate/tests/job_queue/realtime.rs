//! Real-time behaviour on both stores: many consumers, and waking.

use super::*;

/// The many-consumer tests' end: each of 10,000 jobs acked exactly once,
/// and the queue agrees (nothing left, nothing delivered twice).
async fn all_acked_once(q: &JobQueue, acked: &AckedOnce) {
    acked.assert_each_once(10_000);
    let s = q.stats().await.unwrap();
    assert_eq!((s.ready, s.in_flight, s.acked, s.redelivered), (0, 0, 10_000, 0));
}

/// 20 consumers, 10,000 jobs: every job acked exactly once.
async fn every_job_once(ts: TestStore) {
    let q = queue(&ts);
    for i in 0..10_000 {
        q.push(format!("{i}"), &PushOptions::default()).await.unwrap();
    }
    let acked = AckedOnce::default();
    run_consumers(20, &q, &acked, |q, acked| async move {
        while let Some(job) = q.next(Duration::from_millis(300)).await.unwrap() {
            q.ack(&job.id, job.fence).await.unwrap();
            acked.record([&job]);
        }
    })
    .await;
    all_acked_once(&q, &acked).await;
}

/// 20 consumers taking batches of up to 25, 10,000 jobs pushed in
/// batches of 100: every job acked exactly once.
async fn every_job_once_in_batches(ts: TestStore) {
    let q = queue(&ts);
    for chunk in 0..100 {
        q.push_many(&hundred(chunk)).await.unwrap();
    }
    let acked = AckedOnce::default();
    run_consumers(20, &q, &acked, |q, acked| async move {
        let mut held = q.next_many(25, Duration::from_millis(300)).await.unwrap();
        while !held.is_empty() {
            let (flags, next) = q.ack_and_claim_many(&fences(&held), 25).await.unwrap();
            assert!(flags.iter().all(|f| *f), "an ack of a held job failed");
            acked.record(&held);
            held = next;
        }
    })
    .await;
    all_acked_once(&q, &acked).await;
}

/// A batch of 5 ready jobs wakes 5 sleeping consumers at once, not one.
async fn a_batch_wakes_as_many_consumers(ts: TestStore) {
    let q = queue(&ts);
    let sleepers: Vec<_> = (0..5)
        .map(|_| {
            let q = q.clone();
            sleeper(async move { q.next(Duration::from_secs(10)).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pushed = Instant::now();
    let jobs: Vec<(String, PushOptions)> = (0..5).map(|i| (format!("{i}"), PushOptions::default())).collect();
    q.push_many(&jobs).await.unwrap();
    for s in sleepers {
        // Each sleeper holds its job (no ack), so none can take two.
        let (_job, at) = s.await.unwrap();
        assert!(
            at.duration_since(pushed) < Duration::from_millis(200),
            "a sleeper woke {:?} after the push (the fallback re-check is 1 s)",
            at - pushed
        );
    }
}

/// A sleeping consumer is woken by a push at once, and by a delayed
/// job's due time to the millisecond, not by polling.
async fn sleeping_consumers_wake_on_time(ts: TestStore) {
    let q = queue(&ts);
    let (sleeping, options) = (q.clone(), PushOptions::default());
    let next = async move { sleeping.next(Duration::from_secs(10)).await };
    let (job, woke) = woken_by(next, Duration::from_millis(200), q.push("now", &options)).await;
    assert_eq!(job.payload, b"now");
    assert!(woke < Duration::from_millis(100), "woke {woke:?} after the push");
    q.ack(&job.id, job.fence).await.unwrap();

    let pushed = Instant::now();
    q.push("soon", &later(400)).await.unwrap();
    let job = q.next(Duration::from_secs(10)).await.unwrap().expect("a job");
    let waited = pushed.elapsed();
    assert!(
        waited >= Duration::from_millis(390) && waited < Duration::from_millis(500),
        "the 400 ms job came after {waited:?}"
    );
    q.ack(&job.id, job.fence).await.unwrap();
}

/// Cancels race claims on 2,000 jobs: no job is both run (claimed) and
/// successfully cancelled, and each is one or the other.
async fn cancel_races_claim(ts: TestStore) {
    let q = queue(&ts);
    let ids: Vec<String> = (0..2000).map(|i| format!("job-{i}")).collect();
    for id in &ids {
        q.push("x", &with_id(id)).await.unwrap();
    }
    let claimers: Vec<_> = (0..4)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some(job) = q.claim().await.unwrap() {
                    got.push(job.id);
                }
                got
            })
        })
        .collect();
    let cancellers: Vec<_> = (0..4)
        .map(|k| {
            let (q, ids) = (q.clone(), ids.clone());
            tokio::spawn(async move {
                let mut cancelled = Vec::new();
                for id in ids.iter().rev().skip(k).step_by(4) {
                    if q.cancel(id).await.unwrap() == Cancelled::Cancelled {
                        cancelled.push(id.clone());
                    }
                }
                cancelled
            })
        })
        .collect();
    let mut claimed = std::collections::HashSet::new();
    for c in claimers {
        for id in c.await.unwrap() {
            assert!(claimed.insert(id), "a job was claimed twice");
        }
    }
    let mut cancelled = std::collections::HashSet::new();
    for c in cancellers {
        cancelled.extend(c.await.unwrap());
    }
    assert!(
        claimed.is_disjoint(&cancelled),
        "a job was both run and cancelled"
    );
    assert_eq!(claimed.len() + cancelled.len(), 2000);
}

/// A consumer waiting on a paused queue is not handed the jobs pushed to
/// it; a resume wakes it at once (not its 1 s re-check).
async fn a_resume_wakes_a_waiting_consumer(ts: TestStore) {
    let q = queue(&ts);
    q.pause().await.unwrap();
    q.push("held", &PushOptions::default()).await.unwrap();
    let waiting = q.clone();
    let next = async move { waiting.next(Duration::from_secs(10)).await };
    let (job, woke) = woken_by(next, Duration::from_millis(300), q.resume()).await;
    assert_eq!(job.payload, b"held");
    assert!(
        woke < Duration::from_millis(100),
        "woke {woke:?} after the resume"
    );
    q.ack(&job.id, job.fence).await.unwrap();
    let s = q.stats().await.unwrap();
    assert_eq!((s.claimed, s.acked, s.paused), (1, 1, false));
}

on_both_stores!(
    realtime: a_resume_wakes_a_waiting_consumer,
    every_job_once,
    every_job_once_in_batches,
    a_batch_wakes_as_many_consumers,
    sleeping_consumers_wake_on_time,
    cancel_races_claim
);
