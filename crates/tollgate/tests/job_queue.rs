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

/// Runs `consumers` tasks of `consume` at once, each with its own handle
/// on `q` and on `acked`, and waits for them all.
async fn run_consumers<Q, F, Fut>(consumers: usize, q: &Q, acked: &AckedOnce, consume: F)
where
    Q: Clone,
    F: Fn(Q, AckedOnce) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let tasks: Vec<_> = (0..consumers)
        .map(|_| tokio::spawn(consume(q.clone(), acked.clone())))
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

/// A consumer asleep in `next` (the call, not yet awaited), in a task of
/// its own: the job it woke with, and when.
fn sleeper(
    next: impl std::future::Future<Output = Result<Option<Job>, tollgate::Error>> + Send + 'static,
) -> tokio::task::JoinHandle<(Job, Instant)> {
    tokio::spawn(async move {
        let job = next.await.unwrap().expect("a job");
        (job, Instant::now())
    })
}

/// A consumer asleep in `next` (as `sleeper`) is woken by `push` (the
/// call, not yet awaited) sent `settle` later: the job it woke with, and
/// how long after the push.
async fn woken_by<T>(
    next: impl std::future::Future<Output = Result<Option<Job>, tollgate::Error>> + Send + 'static,
    settle: Duration,
    push: impl std::future::Future<Output = Result<T, tollgate::Error>>,
) -> (Job, Duration) {
    let waiter = sleeper(next);
    tokio::time::sleep(settle).await;
    let pushed = Instant::now();
    push.await.unwrap();
    let (job, at) = waiter.await.unwrap();
    (job, at.duration_since(pushed))
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

/// A dead job keeps the error of the nack that killed it (its first
/// 4 KiB, cut on a character boundary); retries and replays keep none.
async fn a_dead_job_keeps_why_it_died(ts: TestStore) {
    let q = queue(&ts);
    let two = PushOptions {
        id: Some("e".into()),
        max_attempts: 2,
        ..PushOptions::default()
    };
    q.push("x", &two).await.unwrap();
    let job = claim(&q).await;
    let retried = q
        .nack_with_error(&job.id, job.fence, Retry::After(Duration::ZERO), "first")
        .await;
    assert!(matches!(retried, Ok(Nacked::RetryAt(_))), "{retried:?}");
    let job = claim(&q).await;
    let long = "é".repeat(3000); // 6000 bytes
    let died = q.nack_with_error(&job.id, job.fence, Retry::Backoff, &long).await;
    assert_eq!(died.unwrap(), Nacked::Dead);
    let dead = q.dead(10).await.unwrap();
    let kept = dead[0].last_error.as_deref().expect("the error");
    assert_eq!(kept, "é".repeat(2048), "the first 4 KiB, whole characters");
    // Replayed, then dead without an error: none.
    assert_eq!(q.replay(Some("e")).await.unwrap(), 1);
    for _ in 0..2 {
        let job = claim(&q).await;
        q.nack(&job.id, job.fence, Retry::After(Duration::ZERO))
            .await
            .unwrap();
    }
    assert_eq!(q.dead(10).await.unwrap()[0].last_error, None);
}

/// A queue exists once something was pushed to it, and stays so when
/// drained; reads alone do not make it exist.
async fn a_queue_exists_once_pushed_to(ts: TestStore) {
    let q = queue(&ts);
    let s = q.stats().await.unwrap();
    assert!(s.is_blank(), "{s:?}");
    assert!(q.dead(10).await.unwrap().is_empty());
    none(&q).await;
    assert!(!q.exists().await.unwrap(), "reads do not make a queue");
    q.push("x", &PushOptions::default()).await.unwrap();
    assert!(q.exists().await.unwrap());
    let job = claim(&q).await;
    q.ack(&job.id, job.fence).await.unwrap();
    let s = q.stats().await.unwrap();
    assert!(!s.is_blank(), "{s:?}");
    assert!(q.exists().await.unwrap(), "a drained queue still exists");
    let other = JobQueue::new(&ts.store, "other").expect("queue");
    assert!(!other.exists().await.unwrap());
}

/// A paused queue takes pushes, and its delayed jobs come due, but
/// claims get nothing; the jobs already running can still be acked,
/// nacked and extended. Pause and resume answer whether they changed it.
async fn a_paused_queue_takes_pushes_but_hands_out_nothing(ts: TestStore) {
    let q = queue(&ts);
    for p in ["a", "b"] {
        q.push(p, &PushOptions::default()).await.unwrap();
    }
    let (a, b) = (claim(&q).await, claim(&q).await);
    assert!(!q.stats().await.unwrap().paused);
    assert!(!q.resume().await.unwrap(), "a running queue is not resumed");
    assert!(q.pause().await.unwrap());
    assert!(!q.pause().await.unwrap(), "pausing twice changes nothing");
    assert!(q.stats().await.unwrap().paused);

    q.push("c", &PushOptions::default()).await.unwrap();
    q.push("d", &later(300)).await.unwrap();
    none(&q).await;
    assert!(q.claim_many(10).await.unwrap().is_empty());
    q.extend(&a.id, a.fence, Duration::from_secs(60)).await.unwrap();
    let (acked, got) = q.ack_and_claim(&a.id, a.fence).await.unwrap();
    assert!(acked, "a running job is acked while paused");
    assert!(got.is_none(), "the claim part gets nothing");
    q.nack(&b.id, b.fence, Retry::After(Duration::ZERO))
        .await
        .unwrap();
    ts.advance(Duration::from_millis(350)).await;
    none(&q).await;
    let s = q.stats().await.unwrap();
    assert_eq!((s.ready, s.delayed, s.in_flight, s.acked), (3, 0, 0, 1));
    assert!(s.paused);

    assert!(q.resume().await.unwrap());
    assert!(!q.resume().await.unwrap(), "resuming twice changes nothing");
    assert!(!q.stats().await.unwrap().paused);
    let jobs = q.claim_many(10).await.unwrap();
    let mut got: Vec<_> = jobs.iter().map(|j| j.payload.clone()).collect();
    got.sort();
    assert_eq!(got, [b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]);
}

/// A pause alone makes the queue exist; it does not make a blank queue's
/// stats read otherwise (but `paused`).
async fn a_paused_queue_exists(ts: TestStore) {
    let q = JobQueue::new(&ts.store, "quiet").unwrap();
    assert!(!q.exists().await.unwrap());
    assert!(q.pause().await.unwrap());
    assert!(q.exists().await.unwrap());
    let s = q.stats().await.unwrap();
    assert!(s.paused);
    assert!(s.is_blank());
    assert!(q.resume().await.unwrap());
}

on_both_stores!(
    manual_clock: delayed_jobs_come_due_in_order,
    a_paused_queue_takes_pushes_but_hands_out_nothing,
    a_paused_queue_exists,
    a_queue_exists_once_pushed_to,
    a_dead_job_keeps_why_it_died,
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

#[path = "job_queue/realtime.rs"]
mod realtime;

#[path = "job_queue/sharded.rs"]
mod sharded;

#[path = "job_queue/lookup.rs"]
mod lookup;

#[path = "job_queue/groups.rs"]
mod groups;

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
