//! Job queue conformance: the same assertions on the memory store (on a
//! hand-moved clock where time matters) and on a real redis-server.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::TestStore;
use tollgate::{
    Backoff, Cancelled, ErrorKind, Job, JobQueue, Nacked, OnDuplicate, PushOptions, PushResult, Retry,
};

fn queue(ts: &TestStore) -> JobQueue {
    JobQueue::new(&ts.store, "q").expect("queue")
}

fn later(ms: u64) -> PushOptions {
    PushOptions {
        delay: Some(Duration::from_millis(ms)),
        ..PushOptions::default()
    }
}

fn with_id(id: &str) -> PushOptions {
    PushOptions {
        id: Some(id.to_owned()),
        ..PushOptions::default()
    }
}

async fn claim(q: &JobQueue) -> Job {
    q.claim().await.expect("claim").expect("a due job")
}

async fn none(q: &JobQueue) {
    let got = q.claim().await.expect("claim");
    assert!(got.is_none(), "expected nothing due, got {got:?}");
}

/// Jobs `100 * chunk` to `100 * chunk + 99`, their number as the payload.
fn hundred(chunk: usize) -> Vec<(String, PushOptions)> {
    (0..100)
        .map(|i| (format!("{}", chunk * 100 + i), PushOptions::default()))
        .collect()
}

/// The (id, fence) pairs that ack `jobs`.
fn fences(jobs: &[Job]) -> Vec<(&str, u64)> {
    jobs.iter().map(|j| (j.id.as_str(), j.fence)).collect()
}

/// Runs `consumers` tasks of `consume()` at once and waits for them all.
async fn run_consumers<F, Fut>(consumers: usize, mut consume: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let tasks: Vec<_> = (0..consumers).map(|_| tokio::spawn(consume())).collect();
    for t in tasks {
        t.await.unwrap();
    }
}

/// What the many-consumer tests' consumers acked, by payload: the check
/// that every job was acked exactly once.
#[derive(Clone, Default)]
struct AckedOnce(Arc<Mutex<HashMap<String, u32>>>);

impl AckedOnce {
    /// Counts `jobs` as acked (once more each).
    fn record<'a>(&self, jobs: impl IntoIterator<Item = &'a Job>) {
        let mut acked = self.0.lock().unwrap();
        for job in jobs {
            *acked
                .entry(String::from_utf8(job.payload.clone()).unwrap())
                .or_default() += 1;
        }
    }

    /// `jobs` distinct jobs were acked, none twice.
    fn assert_each_once(&self, jobs: usize) {
        let acked = self.0.lock().unwrap();
        assert_eq!(acked.len(), jobs);
        assert!(acked.values().all(|n| *n == 1), "a job was acked twice");
    }
}

async fn delayed_jobs_come_due_in_order(ts: TestStore) {
    let q = queue(&ts);
    q.push("a", &later(600)).await.unwrap();
    q.push("b", &later(300)).await.unwrap();
    q.push("c", &PushOptions::default()).await.unwrap();
    assert_eq!(claim(&q).await.payload, b"c");
    none(&q).await;
    ts.advance(Duration::from_millis(350)).await;
    assert_eq!(claim(&q).await.payload, b"b");
    none(&q).await;
    ts.advance(Duration::from_millis(300)).await;
    assert_eq!(claim(&q).await.payload, b"a");
    let s = q.stats().await.unwrap();
    assert_eq!(
        (s.ready, s.delayed, s.in_flight, s.pushed, s.claimed),
        (0, 0, 3, 3, 3)
    );
    assert_eq!(s.recent_lateness.len(), 2, "two delayed jobs were promoted");
    // Each was claimed ~50 ms after it came due: the histogram has both,
    // in buckets above 25 ms, and their sum.
    assert_eq!(s.lateness_buckets.len(), tollgate::LATENESS_BOUNDS_MS.len() + 1);
    assert_eq!(
        s.lateness_buckets.iter().sum::<u64>(),
        2,
        "{:?}",
        s.lateness_buckets
    );
    assert_eq!(
        s.lateness_buckets[..5].iter().sum::<u64>(),
        0,
        "{:?}",
        s.lateness_buckets
    );
    assert!(
        s.lateness_sum >= Duration::from_millis(100),
        "{:?}",
        s.lateness_sum
    );
}

async fn priority_then_push_order(ts: TestStore) {
    let q = queue(&ts);
    for (p, prio) in [("low-1", 0), ("high-1", 9), ("low-2", 0), ("high-2", 9)] {
        let o = PushOptions {
            priority: prio,
            ..PushOptions::default()
        };
        q.push(p, &o).await.unwrap();
    }
    let mut order = Vec::new();
    for _ in 0..4 {
        order.push(String::from_utf8(claim(&q).await.payload).unwrap());
    }
    assert_eq!(order, ["high-1", "high-2", "low-1", "low-2"]);
}

async fn fences_guard_ack_nack_and_extend(ts: TestStore) {
    let q = queue(&ts).lease(Duration::from_millis(300)).unwrap();
    let pushed = q.push("x", &PushOptions::default()).await.unwrap();
    assert_eq!(pushed.result, PushResult::Created);
    let job = claim(&q).await;
    assert_eq!((job.id.as_str(), job.attempt), (pushed.id.as_str(), 1));
    for wrong in [job.fence + 1, job.fence - 1] {
        assert_eq!(
            q.ack(&job.id, wrong).await.unwrap_err().kind(),
            ErrorKind::LeaseLost
        );
        assert_eq!(
            q.extend(&job.id, wrong, Duration::from_secs(1))
                .await
                .unwrap_err()
                .kind(),
            ErrorKind::LeaseLost
        );
        assert_eq!(
            q.nack(&job.id, wrong, Retry::Backoff).await.unwrap_err().kind(),
            ErrorKind::LeaseLost
        );
    }
    // Extending keeps it past the first lease.
    q.extend(&job.id, job.fence, Duration::from_secs(2))
        .await
        .unwrap();
    ts.advance(Duration::from_millis(500)).await;
    none(&q).await;
    q.ack(&job.id, job.fence).await.unwrap();
    assert_eq!(
        q.ack(&job.id, job.fence).await.unwrap_err().kind(),
        ErrorKind::LeaseLost
    );
    let s = q.stats().await.unwrap();
    assert_eq!((s.in_flight, s.acked), (0, 1));
}

async fn ack_and_claim_in_one_step(ts: TestStore) {
    let q = queue(&ts);
    for p in ["a", "b"] {
        q.push(p, &PushOptions::default()).await.unwrap();
    }
    let a = claim(&q).await;
    let (acked, b) = q.ack_and_claim(&a.id, a.fence).await.unwrap();
    let b = b.expect("the next job");
    assert!(acked);
    assert_eq!(b.payload, b"b");
    // A stale fence is not acked, but the claim still happens (nothing due).
    let (acked, none_left) = q.ack_and_claim(&a.id, a.fence).await.unwrap();
    assert!(!acked);
    assert!(none_left.is_none());
    let (acked, _) = q.ack_and_claim(&b.id, b.fence).await.unwrap();
    assert!(acked);
    assert_eq!(q.stats().await.unwrap().acked, 2);
}

/// Batches: push_many is one atomic step (all or none, answers in order,
/// duplicates inside a batch act as if pushed one after another);
/// claim_many takes the first due jobs in order with their own fences;
/// ack_many answers per delivery and never acks one twice.
async fn batches_push_claim_and_ack(ts: TestStore) {
    let q = queue(&ts);
    let jobs: Vec<(String, PushOptions)> = vec![
        ("a".into(), with_id("a")),
        ("b".into(), PushOptions::default()),
        ("late".into(), later(500)),
        ("a again".into(), with_id("a")),
        (
            "c".into(),
            PushOptions {
                priority: 5,
                ..PushOptions::default()
            },
        ),
    ];
    let pushed = q.push_many(&jobs).await.unwrap();
    let results: Vec<PushResult> = pushed.iter().map(|p| p.result).collect();
    assert_eq!(
        results,
        [
            PushResult::Created,
            PushResult::Created,
            PushResult::Created,
            PushResult::Kept,
            PushResult::Created
        ]
    );
    assert_eq!(pushed[0].id, "a");
    assert!(pushed[3].due.is_none());
    // Upsert inside one batch: the later one wins, once.
    let upsert = |p: &str| {
        (
            p.to_owned(),
            PushOptions {
                on_duplicate: OnDuplicate::Replace,
                ..with_id("u")
            },
        )
    };
    let pushed = q.push_many(&[upsert("u1"), upsert("u2")]).await.unwrap();
    assert_eq!(
        (pushed[0].result, pushed[1].result),
        (PushResult::Created, PushResult::Replaced)
    );
    let s = q.stats().await.unwrap();
    assert_eq!((s.ready, s.delayed, s.pushed), (4, 1, 5), "{s:?}");
    // Keep, then replace, in one batch and with different times: one job
    // in one place, due at the replacement's time (the mirror case too).
    for (first, second) in [
        (OnDuplicate::Keep, OnDuplicate::Replace),
        (OnDuplicate::Replace, OnDuplicate::Keep),
    ] {
        let jobs = [
            (
                "v1".to_owned(),
                PushOptions {
                    delay: Some(Duration::from_millis(200)),
                    on_duplicate: first,
                    ..with_id("v")
                },
            ),
            (
                "v2".to_owned(),
                PushOptions {
                    on_duplicate: second,
                    ..with_id("v")
                },
            ),
        ];
        let results: Vec<PushResult> = q
            .push_many(&jobs)
            .await
            .unwrap()
            .iter()
            .map(|p| p.result)
            .collect();
        let expected = if second == OnDuplicate::Replace {
            PushResult::Replaced
        } else {
            PushResult::Kept
        };
        assert_eq!(results, [PushResult::Created, expected]);
        let s = q.stats().await.unwrap();
        let due_now = second == OnDuplicate::Replace;
        assert_eq!(
            (s.ready, s.delayed),
            (4 + u64::from(due_now), 1 + u64::from(!due_now)),
            "{s:?}"
        );
        assert_eq!(q.cancel("v").await.unwrap(), Cancelled::Cancelled);
        assert_eq!(
            q.cancel("v").await.unwrap(),
            Cancelled::Unknown,
            "v was in two places"
        );
        let s = q.stats().await.unwrap();
        assert_eq!((s.ready, s.delayed), (4, 1), "{s:?}");
    }

    // One bad job: nothing of the batch is pushed.
    let bad = vec![
        ("ok".to_owned(), PushOptions::default()),
        ("x".to_owned(), with_id("")),
    ];
    assert_eq!(
        q.push_many(&bad).await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    let empty: Vec<(String, PushOptions)> = Vec::new();
    assert_eq!(
        q.push_many(&empty).await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(q.stats().await.unwrap().ready, 4);

    let got = q.claim_many(3).await.unwrap();
    let payloads: Vec<&[u8]> = got.iter().map(|j| j.payload.as_slice()).collect();
    assert_eq!(payloads, [&b"c"[..], b"a", b"b"], "priority, then push order");
    assert!(got.windows(2).all(|w| w[0].fence < w[1].fence), "fences grow");
    assert!(got.iter().all(|j| j.attempt == 1));
    let rest = q.claim_many(10).await.unwrap();
    assert_eq!(rest.len(), 1, "the delayed job is not due yet");
    assert_eq!(rest[0].payload, b"u2");
    assert!(q.claim_many(10).await.unwrap().is_empty());
    assert_eq!(q.claim_many(0).await.unwrap_err().kind(), ErrorKind::InvalidInput);
    assert_eq!(
        q.claim_many(1001).await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );

    let stale = (got[1].id.as_str(), got[1].fence + 100);
    let flags = q
        .ack_many(&[
            (got[0].id.as_str(), got[0].fence),
            stale,
            (got[0].id.as_str(), got[0].fence),
            (got[2].id.as_str(), got[2].fence),
        ])
        .await
        .unwrap();
    assert_eq!(
        flags,
        [true, false, false, true],
        "a stale fence and a repeat are refused"
    );
    // Ack the rest and claim the delayed job once it is due, in one step.
    ts.advance(Duration::from_millis(600)).await;
    let (flags, next) = q
        .ack_and_claim_many(
            &[
                (got[1].id.as_str(), got[1].fence),
                (rest[0].id.as_str(), rest[0].fence),
            ],
            5,
        )
        .await
        .unwrap();
    assert_eq!(flags, [true, true]);
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].payload, b"late");
    q.ack(&next[0].id, next[0].fence).await.unwrap();
    let s = q.stats().await.unwrap();
    assert_eq!(
        (s.ready, s.delayed, s.in_flight, s.claimed, s.acked),
        (0, 0, 0, 5, 5),
        "{s:?}"
    );
}

async fn completed_jobs_kept_by_count_and_age(ts: TestStore) {
    let q = queue(&ts).keep_completed(2, Duration::from_millis(1000)).unwrap();
    for id in ["a", "b", "c"] {
        q.push(id, &with_id(id)).await.unwrap();
        let job = claim(&q).await;
        q.ack(&job.id, job.fence).await.unwrap();
    }
    let done: Vec<String> = q.completed(10).await.unwrap().into_iter().map(|d| d.id).collect();
    assert_eq!(done, ["c", "b"], "the last two, most recent first");
    assert_eq!(q.stats().await.unwrap().completed, 2);
    // A kept job still counts for dedupe; a dropped one does not.
    assert_eq!(
        q.push("again", &with_id("b")).await.unwrap().result,
        PushResult::Kept
    );
    assert_eq!(
        q.push("again", &with_id("a")).await.unwrap().result,
        PushResult::Created
    );
    ts.advance(Duration::from_millis(1100)).await;
    let job = claim(&q).await;
    assert_eq!(job.id, "a");
    q.ack(&job.id, job.fence).await.unwrap();
    let done: Vec<String> = q.completed(10).await.unwrap().into_iter().map(|d| d.id).collect();
    assert_eq!(done, ["a"], "older than a second: gone");
    assert_eq!(
        q.push("again", &with_id("b")).await.unwrap().result,
        PushResult::Created
    );
    assert!(queue(&ts).keep_completed(0, Duration::from_secs(1)).is_err());
}

async fn an_unacked_job_is_delivered_again(ts: TestStore) {
    let q = queue(&ts).lease(Duration::from_millis(200)).unwrap();
    q.push("x", &PushOptions::default()).await.unwrap();
    let first = claim(&q).await;
    none(&q).await;
    ts.advance(Duration::from_millis(300)).await;
    let second = claim(&q).await;
    assert_eq!(second.id, first.id);
    assert_eq!(second.attempt, 2);
    assert!(
        second.fence > first.fence,
        "{} after {}",
        second.fence,
        first.fence
    );
    // The first consumer woke up late: its fence is refused.
    assert_eq!(
        q.ack(&first.id, first.fence).await.unwrap_err().kind(),
        ErrorKind::LeaseLost
    );
    q.ack(&second.id, second.fence).await.unwrap();
    assert_eq!(q.stats().await.unwrap().redelivered, 1);
}

async fn retries_back_off_then_die_and_replay(ts: TestStore) {
    let q = queue(&ts);
    let o = PushOptions {
        max_attempts: 2,
        backoff: Backoff::Fixed(Duration::from_millis(300)),
        ..PushOptions::default()
    };
    let id = q.push("flaky", &o).await.unwrap().id;
    let job = claim(&q).await;
    assert!(matches!(
        q.nack(&job.id, job.fence, Retry::Backoff).await.unwrap(),
        Nacked::RetryAt(_)
    ));
    none(&q).await;
    ts.advance(Duration::from_millis(350)).await;
    let job = claim(&q).await;
    assert_eq!(job.attempt, 2);
    assert_eq!(
        q.nack(&job.id, job.fence, Retry::Backoff).await.unwrap(),
        Nacked::Dead
    );
    none(&q).await;
    let dead = q.dead(10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].id.as_str(), dead[0].attempts, dead[0].payload.as_slice()),
        (id.as_str(), 2, &b"flaky"[..])
    );
    assert_eq!(q.replay(Some(&id)).await.unwrap(), 1);
    let job = claim(&q).await;
    assert_eq!(job.attempt, 1, "a replayed job starts its attempts afresh");
    // A given retry delay wins over the backoff.
    q.nack(&job.id, job.fence, Retry::After(Duration::ZERO))
        .await
        .unwrap();
    let job = claim(&q).await;
    q.ack(&job.id, job.fence).await.unwrap();
    // Exponential backoff with jitter stays within [0.5, 1) x base x 2^(n-1).
    let o = PushOptions {
        backoff: Backoff::Exponential {
            base: Duration::from_millis(400),
            max: Duration::from_secs(60),
        },
        ..PushOptions::default()
    };
    q.push("exp", &o).await.unwrap();
    let job = claim(&q).await;
    let started = std::time::SystemTime::now();
    let Nacked::RetryAt(at) = q.nack(&job.id, job.fence, Retry::Backoff).await.unwrap() else {
        panic!("expected a retry")
    };
    let wait = at.duration_since(started).unwrap_or_default();
    if ts.clock.is_none() {
        assert!(
            wait >= Duration::from_millis(150) && wait <= Duration::from_millis(450),
            "{wait:?}"
        );
    }
    let s = q.stats().await.unwrap();
    assert_eq!((s.retried, s.dead_total, s.dead), (3, 1, 0));
}

async fn dead_letters_can_be_purged(ts: TestStore) {
    let q = queue(&ts);
    let o = PushOptions {
        max_attempts: 1,
        ..PushOptions::default()
    };
    for p in ["a", "b", "c"] {
        q.push(p, &o).await.unwrap();
        let job = claim(&q).await;
        assert_eq!(
            q.nack(&job.id, job.fence, Retry::Backoff).await.unwrap(),
            Nacked::Dead
        );
    }
    let dead = q.dead(10).await.unwrap();
    assert_eq!(dead.len(), 3);
    assert_eq!(q.purge(Some(&dead[0].id)).await.unwrap(), 1);
    assert_eq!(q.cancel(&dead[1].id).await.unwrap(), Cancelled::Purged);
    assert_eq!(q.replay(None).await.unwrap(), 1);
    assert_eq!(q.purge(None).await.unwrap(), 0);
    // The one left (jobs that died in the same millisecond are listed in
    // id order).
    assert_eq!(claim(&q).await.payload, dead[2].payload);
}

async fn cancel_and_reschedule_by_id(ts: TestStore) {
    let q = queue(&ts);
    q.push("waiting", &with_id("w")).await.unwrap();
    q.push(
        "later",
        &PushOptions {
            delay: Some(Duration::from_secs(60)),
            ..with_id("l")
        },
    )
    .await
    .unwrap();
    q.push("running", &with_id("r")).await.unwrap();
    assert_eq!(q.cancel("w").await.unwrap(), Cancelled::Cancelled);
    let job = claim(&q).await;
    assert_eq!(job.id, "r");
    assert_eq!(q.cancel("r").await.unwrap(), Cancelled::Running);
    assert_eq!(q.cancel("nope").await.unwrap(), Cancelled::Unknown);
    assert!(
        q.reschedule("r", Duration::ZERO).await.is_err(),
        "a running job cannot be moved"
    );
    assert_eq!(q.reschedule("nope", Duration::ZERO).await.unwrap(), None);
    none(&q).await;
    assert!(q.reschedule("l", Duration::ZERO).await.unwrap().is_some());
    assert_eq!(claim(&q).await.id, "l");
    q.ack("r", job.fence).await.unwrap();
}

async fn duplicate_ids_keep_or_replace(ts: TestStore) {
    let q = queue(&ts);
    assert_eq!(
        q.push("one", &with_id("d")).await.unwrap().result,
        PushResult::Created
    );
    assert_eq!(
        q.push("two", &with_id("d")).await.unwrap().result,
        PushResult::Kept
    );
    let replace = PushOptions {
        on_duplicate: OnDuplicate::Replace,
        ..with_id("d")
    };
    assert_eq!(
        q.push("three", &replace).await.unwrap().result,
        PushResult::Replaced
    );
    let job = claim(&q).await;
    assert_eq!(job.payload, b"three");
    assert_eq!(q.push("four", &replace).await.unwrap().result, PushResult::Busy);
    none(&q).await;
    q.ack("d", job.fence).await.unwrap();
    // Once acked the id is free again.
    assert_eq!(
        q.push("five", &with_id("d")).await.unwrap().result,
        PushResult::Created
    );
    assert_eq!(q.stats().await.unwrap().pushed, 2);
}

async fn bad_input_is_refused(ts: TestStore) {
    assert_eq!(
        JobQueue::new(&ts.store, "").unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        JobQueue::new(&ts.store, "has space").unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    let q = queue(&ts).max_payload(16);
    let err = q.push(vec![0u8; 17], &PushOptions::default()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    for bad in [
        PushOptions {
            max_attempts: 0,
            ..PushOptions::default()
        },
        PushOptions {
            delay: Some(Duration::from_secs(400 * 24 * 3600)),
            ..PushOptions::default()
        },
        // As far ahead as a delay may be, and never past what the store's
        // scores hold (2^64 - 1 ms once came back due at once).
        PushOptions {
            at: Some(std::time::SystemTime::now() + Duration::from_secs(400 * 24 * 3600)),
            ..PushOptions::default()
        },
        PushOptions {
            at: Some(std::time::UNIX_EPOCH + Duration::from_millis(u64::MAX)),
            ..PushOptions::default()
        },
        with_id(""),
        with_id("has space"),
        with_id(&"x".repeat(200)),
        PushOptions {
            backoff: Backoff::Exponential {
                base: Duration::from_secs(2),
                max: Duration::from_secs(1),
            },
            ..PushOptions::default()
        },
    ] {
        let err = q.push("p", &bad).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{bad:?}: {err}");
    }
    assert!(queue(&ts).lease(Duration::ZERO).is_err());
    assert_eq!(q.ack("", 1).await.unwrap_err().kind(), ErrorKind::InvalidInput);
    // Binary payloads go through untouched.
    let bytes: Vec<u8> = (0..=255u8).collect();
    let q = queue(&ts);
    q.push(&bytes, &PushOptions::default()).await.unwrap();
    assert_eq!(claim(&q).await.payload, bytes);
    // JSON convenience.
    q.push_json(
        &serde_json::json!({"to": "a@example.org"}),
        &PushOptions::default(),
    )
    .await
    .unwrap();
    let v: serde_json::Value = claim(&q).await.json().unwrap();
    assert_eq!(v["to"], "a@example.org");
}

on_both_stores!(
    manual_clock: delayed_jobs_come_due_in_order,
    priority_then_push_order,
    fences_guard_ack_nack_and_extend,
    ack_and_claim_in_one_step,
    batches_push_claim_and_ack,
    completed_jobs_kept_by_count_and_age,
    an_unacked_job_is_delivered_again,
    retries_back_off_then_die_and_replay,
    dead_letters_can_be_purged,
    cancel_and_reschedule_by_id,
    duplicate_ids_keep_or_replace,
    bad_input_is_refused,
);

/// Real-time behaviour on both stores: many consumers, and waking.
mod realtime {
    use super::*;

    /// 20 consumers, 10,000 jobs: every job acked exactly once.
    async fn every_job_once(ts: TestStore) {
        let q = queue(&ts);
        for i in 0..10_000 {
            q.push(format!("{i}"), &PushOptions::default()).await.unwrap();
        }
        let acked = AckedOnce::default();
        run_consumers(20, || {
            let (q, acked) = (q.clone(), acked.clone());
            async move {
                while let Some(job) = q.next(Duration::from_millis(300)).await.unwrap() {
                    q.ack(&job.id, job.fence).await.unwrap();
                    acked.record([&job]);
                }
            }
        })
        .await;
        acked.assert_each_once(10_000);
        let s = q.stats().await.unwrap();
        assert_eq!((s.ready, s.in_flight, s.acked, s.redelivered), (0, 0, 10_000, 0));
    }

    /// 20 consumers taking batches of up to 25, 10,000 jobs pushed in
    /// batches of 100: every job acked exactly once.
    async fn every_job_once_in_batches(ts: TestStore) {
        let q = queue(&ts);
        for chunk in 0..100 {
            q.push_many(&hundred(chunk)).await.unwrap();
        }
        let acked = AckedOnce::default();
        run_consumers(20, || {
            let (q, acked) = (q.clone(), acked.clone());
            async move {
                let mut held = q.next_many(25, Duration::from_millis(300)).await.unwrap();
                while !held.is_empty() {
                    let (flags, next) = q.ack_and_claim_many(&fences(&held), 25).await.unwrap();
                    assert!(flags.iter().all(|f| *f), "an ack of a held job failed");
                    acked.record(&held);
                    held = next;
                }
            }
        })
        .await;
        acked.assert_each_once(10_000);
        let s = q.stats().await.unwrap();
        assert_eq!((s.ready, s.in_flight, s.acked, s.redelivered), (0, 0, 10_000, 0));
    }

    /// A batch of 5 ready jobs wakes 5 sleeping consumers at once, not one.
    async fn a_batch_wakes_as_many_consumers(ts: TestStore) {
        let q = queue(&ts);
        let sleepers: Vec<_> = (0..5)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move {
                    let job = q.next(Duration::from_secs(10)).await.unwrap().expect("a job");
                    (job, Instant::now())
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let pushed = Instant::now();
        let jobs: Vec<(String, PushOptions)> =
            (0..5).map(|i| (format!("{i}"), PushOptions::default())).collect();
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
        let waiter = {
            let q = q.clone();
            tokio::spawn(async move {
                let job = q.next(Duration::from_secs(10)).await.unwrap().expect("a job");
                (job, Instant::now())
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let pushed = Instant::now();
        q.push("now", &PushOptions::default()).await.unwrap();
        let (job, at) = waiter.await.unwrap();
        assert_eq!(job.payload, b"now");
        assert!(
            at.duration_since(pushed) < Duration::from_millis(100),
            "woke {:?} after the push",
            at - pushed
        );
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

    on_both_stores!(
        realtime: every_job_once,
        every_job_once_in_batches,
        a_batch_wakes_as_many_consumers,
        sleeping_consumers_wake_on_time,
        cancel_races_claim
    );
}

/// One queue over several partitions (on a cluster: several slots).
mod sharded {
    use super::*;
    use tollgate::ShardedJobQueue;

    fn sharded(ts: &TestStore, partitions: usize) -> ShardedJobQueue {
        ShardedJobQueue::new(&ts.store, "sq", partitions).expect("sharded queue")
    }

    /// Ids route to partitions; dedupe, cancel, reschedule and fences work
    /// through the router; claims take from every partition in turn; stats
    /// add up; bad settings are refused.
    async fn routes_by_id_and_drains_every_partition(ts: TestStore) {
        let q = sharded(&ts, 4);
        assert_eq!(q.partitions(), 4);
        let ids: Vec<String> = (0..40).map(|i| format!("job-{i}")).collect();
        let jobs: Vec<(String, PushOptions)> = ids.iter().map(|id| (id.clone(), with_id(id))).collect();
        let pushed = q.push_many(&jobs).await.unwrap();
        assert!(pushed.iter().all(|p| p.result == PushResult::Created));
        let mut per_part = [0usize; 4];
        for id in &ids {
            per_part[q.partition_of(id)] += 1;
        }
        assert!(
            per_part.iter().all(|n| *n > 0),
            "40 ids cover 4 partitions: {per_part:?}"
        );
        // A duplicate id finds its partition and is kept.
        assert_eq!(
            q.push("again", &with_id("job-7")).await.unwrap().result,
            PushResult::Kept
        );
        assert_eq!(q.cancel("job-3").await.unwrap(), Cancelled::Cancelled);
        assert!(
            q.reschedule("job-4", Duration::from_secs(60))
                .await
                .unwrap()
                .is_some()
        );
        let s = q.stats().await.unwrap();
        assert_eq!((s.ready, s.delayed, s.pushed), (38, 1, 40), "{s:?}");

        // Claims in turn: the first four single claims hit four partitions.
        let mut seen = std::collections::HashSet::new();
        let mut held = Vec::new();
        for _ in 0..4 {
            let job = q.claim().await.unwrap().expect("a job");
            seen.insert(q.partition_of(&job.id));
            held.push(job);
        }
        assert_eq!(seen.len(), 4, "claims took from every partition in turn");
        let rest = q.claim_many(100).await.unwrap();
        assert_eq!(rest.len(), 34);
        held.extend(rest);
        let done = fences(&held);
        assert!(q.ack_many(&done).await.unwrap().iter().all(|a| *a));
        let stale = held[0].fence;
        assert_eq!(
            q.ack(&held[0].id, stale).await.unwrap_err().kind(),
            ErrorKind::LeaseLost
        );
        let s = q.stats().await.unwrap();
        assert_eq!(
            (s.ready, s.in_flight, s.acked, s.claimed),
            (0, 0, 38, 38),
            "{s:?}"
        );

        // Dead letters of all partitions, and replay by id.
        let opts = PushOptions {
            max_attempts: 1,
            ..with_id("doomed")
        };
        q.push("x", &opts).await.unwrap();
        let job = q.claim().await.unwrap().expect("doomed");
        assert_eq!(
            q.nack(&job.id, job.fence, Retry::Backoff).await.unwrap(),
            Nacked::Dead
        );
        assert_eq!(q.dead(10).await.unwrap().len(), 1);
        assert_eq!(q.replay(Some("doomed")).await.unwrap(), 1);
        assert_eq!(q.claim().await.unwrap().expect("replayed").id, "doomed");

        for bad in [0, tollgate::MAX_PARTITIONS + 1] {
            let err = ShardedJobQueue::new(&ts.store, "sq", bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput);
        }
    }

    /// 10 consumers, 2,000 jobs over 4 partitions: every job acked exactly
    /// once, and a sleeping consumer wakes on a push to any partition.
    async fn every_job_once_and_wakes(ts: TestStore) {
        let q = sharded(&ts, 4);
        let sleeper = {
            let q = q.clone();
            tokio::spawn(async move {
                let job = q.next(Duration::from_secs(10)).await.unwrap().expect("a job");
                (job, Instant::now())
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let pushed = Instant::now();
        q.push("wake", &PushOptions::default()).await.unwrap();
        let (job, at) = sleeper.await.unwrap();
        assert!(
            at.duration_since(pushed) < Duration::from_millis(200),
            "woke after {:?}",
            at - pushed
        );
        q.ack(&job.id, job.fence).await.unwrap();

        for chunk in 0..20 {
            q.push_many(&hundred(chunk)).await.unwrap();
        }
        let acked = AckedOnce::default();
        run_consumers(10, || {
            let (q, acked) = (q.clone(), acked.clone());
            async move {
                loop {
                    let jobs = q.next_many(10, Duration::from_millis(300)).await.unwrap();
                    if jobs.is_empty() {
                        break;
                    }
                    assert!(q.ack_many(&fences(&jobs)).await.unwrap().iter().all(|a| *a));
                    acked.record(&jobs);
                }
            }
        })
        .await;
        acked.assert_each_once(2000);
    }

    /// The store keeps a queue's partition count: handles with another one
    /// are refused before they strand a job, and the count changes only
    /// while the queue is empty.
    async fn partition_counts_are_kept_and_changed_only_when_empty(ts: TestStore) {
        // A plain queue holding a job has one partition: itself.
        let plain = JobQueue::new(&ts.store, "pq").unwrap();
        plain.push("old", &with_id("old-1")).await.unwrap();
        let four = ShardedJobQueue::new(&ts.store, "pq", 4).unwrap();
        let err = four.push("x", &PushOptions::default()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PartitionConflict, "{err}");
        assert!(err.message().contains("1 partition(s)"), "{err}");
        let one = ShardedJobQueue::new(&ts.store, "pq", 1).unwrap();
        let job = one.claim().await.unwrap().expect("the plain queue's job");
        assert_eq!(job.id, "old-1");
        // The count the jobs implied is stored now: once the queue is
        // empty, another count is still refused (until a repartition).
        one.ack(&job.id, job.fence).await.unwrap();
        let err = ShardedJobQueue::new(&ts.store, "pq", 4)
            .unwrap()
            .verify()
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PartitionConflict, "{err}");
        one.push("old", &with_id("old-2")).await.unwrap();
        let job = one.claim().await.unwrap().expect("again");

        // Not while a job runs, nor while one is dead.
        let err = ShardedJobQueue::repartition(&ts.store, "pq", 4)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.message().contains("1 running"), "{err}");
        let opts = PushOptions {
            max_attempts: 1,
            ..with_id("doomed")
        };
        one.ack(&job.id, job.fence).await.unwrap();
        one.push("x", &opts).await.unwrap();
        let job = one.claim().await.unwrap().expect("doomed");
        assert_eq!(
            one.nack(&job.id, job.fence, Retry::Backoff).await.unwrap(),
            Nacked::Dead
        );
        let err = ShardedJobQueue::repartition(&ts.store, "pq", 4)
            .await
            .unwrap_err();
        assert!(err.message().contains("1 dead"), "{err}");
        assert_eq!(one.purge(None).await.unwrap(), 1);

        ShardedJobQueue::repartition(&ts.store, "pq", 4).await.unwrap();
        let err = ShardedJobQueue::new(&ts.store, "pq", 1)
            .unwrap()
            .stats()
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PartitionConflict);
        let four = ShardedJobQueue::new(&ts.store, "pq", 4).unwrap();
        four.verify().await.unwrap();
        let jobs: Vec<(String, PushOptions)> = (0..20)
            .map(|i| (format!("{i}"), with_id(&format!("j{i}"))))
            .collect();
        four.push_many(&jobs).await.unwrap();
        assert_eq!(four.stats().await.unwrap().ready, 20);
        let err = ShardedJobQueue::repartition(&ts.store, "pq", 8)
            .await
            .unwrap_err();
        assert!(err.message().contains("20 ready"), "{err}");
        // A refused change leaves the layout as it was: open to pushes.
        four.push("more", &with_id("j20")).await.unwrap();
        // Asking for the count in force is no change, and always allowed.
        ShardedJobQueue::repartition(&ts.store, "pq", 4).await.unwrap();
        // Partitioned, the queue's own name takes no jobs: a plain
        // producer's push would never reach a consumer.
        let err = JobQueue::new(&ts.store, "pq")
            .unwrap()
            .push("stray", &PushOptions::default())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PartitionConflict, "{err}");

        // Reads store nothing: looking at a name leaves it free.
        let looked = ShardedJobQueue::new(&ts.store, "looked-at", 3).unwrap();
        looked.stats().await.unwrap();
        looked.dead(10).await.unwrap();
        ShardedJobQueue::new(&ts.store, "looked-at", 2)
            .unwrap()
            .push("x", &PushOptions::default())
            .await
            .unwrap();
        assert_eq!(
            looked.stats().await.unwrap_err().kind(),
            ErrorKind::PartitionConflict
        );

        // A running handle notices a repartition at its next re-check.
        let before = ShardedJobQueue::new(&ts.store, "moving", 2)
            .unwrap()
            .recheck_every(Duration::from_millis(200))
            .unwrap();
        before.verify().await.unwrap();
        ShardedJobQueue::repartition(&ts.store, "moving", 5)
            .await
            .unwrap();
        // Its pushes are refused at once: the old partitions are closed.
        let err = before.push("x", &PushOptions::default()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PartitionConflict, "{err}");
        // Its reads go on until its next re-check, which refuses them too.
        before.stats().await.expect("agreed less than 200 ms ago");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let err = before.stats().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PartitionConflict, "{err}");
        let five = ShardedJobQueue::new(&ts.store, "moving", 5).unwrap();
        five.push("x", &PushOptions::default()).await.unwrap();
        // Back to 2 once empty: the layout of 2 is opened again.
        let job = five.claim().await.unwrap().expect("the job");
        five.ack(&job.id, job.fence).await.unwrap();
        ShardedJobQueue::repartition(&ts.store, "moving", 2)
            .await
            .unwrap();
        ShardedJobQueue::new(&ts.store, "moving", 2)
            .unwrap()
            .push("x", &PushOptions::default())
            .await
            .unwrap();
        assert_eq!(
            five.push("y", &PushOptions::default()).await.unwrap_err().kind(),
            ErrorKind::PartitionConflict
        );
        assert!(
            ShardedJobQueue::new(&ts.store, "moving", 2)
                .unwrap()
                .recheck_every(Duration::ZERO)
                .is_err()
        );

        // The first handle to change a fresh queue sets its count.
        ShardedJobQueue::new(&ts.store, "fresh", 3)
            .unwrap()
            .verify()
            .await
            .unwrap();
        for k in [1, 2, 4] {
            let err = ShardedJobQueue::new(&ts.store, "fresh", k)
                .unwrap()
                .claim()
                .await
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::PartitionConflict, "{k}: {err}");
        }
        let err = ShardedJobQueue::repartition(&ts.store, "fresh", 0)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
    }

    /// Batches answer per job; an invalid job fails the whole batch before
    /// any partition takes one.
    async fn batches_answer_per_job(ts: TestStore) {
        let q = sharded(&ts, 4).max_payload(10);
        let bad = vec![
            ("fine".to_owned(), with_id("a")),
            ("far too long for it".to_owned(), with_id("b")),
        ];
        let err = q.push_each(&bad).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert_eq!(q.stats().await.unwrap().pushed, 0, "nothing was pushed");

        let jobs: Vec<(String, PushOptions)> = (0..12)
            .map(|i| (format!("{i}"), PushOptions::default()))
            .collect();
        let answers = q.push_each(&jobs).await.unwrap();
        let ids: Vec<String> = answers
            .into_iter()
            .map(|a| {
                let p = a.expect("every partition took its jobs");
                assert_eq!(p.result, PushResult::Created);
                p.id
            })
            .collect();
        let claimed = q.claim_many(12).await.unwrap();
        assert_eq!(claimed.len(), 12);
        let mut acks = fences(&claimed);
        acks.push((ids[0].as_str(), 999_999));
        let answers = q.ack_each(&acks).await.unwrap();
        assert_eq!(answers.len(), 13);
        assert!(answers[..12].iter().all(|a| matches!(a, Ok(true))));
        assert!(matches!(answers[12], Ok(false)), "a stale fence is not acked");
        assert!(q.ack_each(&[("", 1)]).await.is_err(), "an empty id is refused");
    }

    on_both_stores!(
        realtime: routes_by_id_and_drains_every_partition,
        every_job_once_and_wakes,
        partition_counts_are_kept_and_changed_only_when_empty,
        batches_answer_per_job
    );
}

/// Records written before they were bucketed (all in one `:d` hash) are
/// still claimed, then acked, and do not linger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_in_the_old_single_hash_still_run() {
    let ts = TestStore::redis().await;
    let redis = ts.server.as_ref().expect("redis");
    let base = "tollgate:jobs:{old}";
    redis.command(&["HSET", &format!("{base}:d"), "legacy", "7\nold payload"]);
    redis.command(&["HSET", &format!("{base}:m"), "s", "7"]);
    redis.command(&["ZADD", &format!("{base}:r"), "7", "legacy"]);
    let q = JobQueue::new(&ts.store, "old").expect("queue");
    let job = claim(&q).await;
    assert_eq!(
        (job.id.as_str(), job.payload.as_slice()),
        ("legacy", &b"old payload"[..])
    );
    q.ack(&job.id, job.fence).await.unwrap();
    assert_eq!(
        redis.command(&["EXISTS", &format!("{base}:d")]),
        ::redis::Value::Int(0)
    );
    let s = q.stats().await.unwrap();
    assert_eq!((s.ready, s.in_flight, s.acked), (0, 0, 1));
}
