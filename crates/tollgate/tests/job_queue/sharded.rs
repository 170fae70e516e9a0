//! One queue over several partitions (on a cluster: several slots).

use super::*;
use tollgate::JobQueue;

fn sharded(ts: &TestStore, partitions: usize) -> JobQueue {
    JobQueue::partitioned(&ts.store, "sq", partitions).expect("sharded queue")
}

/// Pushes a job through a new handle on `name` with `partitions`: its
/// first use, where the handle checks the store's partition count.
async fn push_one(ts: &TestStore, name: &str, partitions: usize) {
    let q = JobQueue::partitioned(&ts.store, name, partitions).unwrap();
    q.push("x", &PushOptions::default()).await.unwrap();
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
        let err = JobQueue::partitioned(&ts.store, "sq", bad).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
    }
}

/// 10 consumers, 2,000 jobs over 4 partitions: every job acked exactly
/// once, and a sleeping consumer wakes on a push to any partition.
async fn every_job_once_and_wakes(ts: TestStore) {
    let q = sharded(&ts, 4);
    let (sleeping, options) = (q.clone(), PushOptions::default());
    let next = async move { sleeping.next(Duration::from_secs(10)).await };
    let (job, woke) = woken_by(next, Duration::from_millis(300), q.push("wake", &options)).await;
    assert!(woke < Duration::from_millis(200), "woke after {woke:?}");
    q.ack(&job.id, job.fence).await.unwrap();

    for chunk in 0..20 {
        q.push_many(&hundred(chunk)).await.unwrap();
    }
    let acked = AckedOnce::default();
    run_consumers(10, &q, &acked, |q, acked| async move {
        loop {
            let jobs = q.next_many(10, Duration::from_millis(300)).await.unwrap();
            if jobs.is_empty() {
                break;
            }
            assert!(q.ack_many(&fences(&jobs)).await.unwrap().iter().all(|a| *a));
            acked.record(&jobs);
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
    let four = JobQueue::partitioned(&ts.store, "pq", 4).unwrap();
    let err = four.push("x", &PushOptions::default()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PartitionConflict, "{err}");
    assert!(err.message().contains("1 partition(s)"), "{err}");
    let one = JobQueue::partitioned(&ts.store, "pq", 1).unwrap();
    let job = one.claim().await.unwrap().expect("the plain queue's job");
    assert_eq!(job.id, "old-1");
    // The count the jobs implied is stored now: once the queue is
    // empty, another count is still refused (until a repartition).
    one.ack(&job.id, job.fence).await.unwrap();
    let err = JobQueue::partitioned(&ts.store, "pq", 4)
        .unwrap()
        .verify()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PartitionConflict, "{err}");
    one.push("old", &with_id("old-2")).await.unwrap();
    let job = one.claim().await.unwrap().expect("again");

    // Not while a job runs, nor while one is dead.
    let err = JobQueue::repartition(&ts.store, "pq", 4).await.unwrap_err();
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
    let err = JobQueue::repartition(&ts.store, "pq", 4).await.unwrap_err();
    assert!(err.message().contains("1 dead"), "{err}");
    assert_eq!(one.purge(None).await.unwrap(), 1);

    JobQueue::repartition(&ts.store, "pq", 4).await.unwrap();
    let err = JobQueue::partitioned(&ts.store, "pq", 1)
        .unwrap()
        .stats()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PartitionConflict);
    let four = JobQueue::partitioned(&ts.store, "pq", 4).unwrap();
    four.verify().await.unwrap();
    let jobs: Vec<(String, PushOptions)> = (0..20)
        .map(|i| (format!("{i}"), with_id(&format!("j{i}"))))
        .collect();
    four.push_many(&jobs).await.unwrap();
    assert_eq!(four.stats().await.unwrap().ready, 20);
    let err = JobQueue::repartition(&ts.store, "pq", 8).await.unwrap_err();
    assert!(err.message().contains("20 ready"), "{err}");
    // A refused change leaves the layout as it was: open to pushes.
    four.push("more", &with_id("j20")).await.unwrap();
    // Asking for the count in force is no change, and always allowed.
    JobQueue::repartition(&ts.store, "pq", 4).await.unwrap();
    // Partitioned, the queue's own name takes no jobs: a plain
    // producer's push would never reach a consumer.
    let err = JobQueue::new(&ts.store, "pq")
        .unwrap()
        .push("stray", &PushOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PartitionConflict, "{err}");

    // Reads store nothing: looking at a name leaves it free.
    let looked = JobQueue::partitioned(&ts.store, "looked-at", 3).unwrap();
    looked.stats().await.unwrap();
    looked.dead(10).await.unwrap();
    push_one(&ts, "looked-at", 2).await;
    assert_eq!(
        looked.stats().await.unwrap_err().kind(),
        ErrorKind::PartitionConflict
    );

    // A running handle notices a repartition at its next re-check.
    let before = JobQueue::partitioned(&ts.store, "moving", 2)
        .unwrap()
        .recheck_every(Duration::from_millis(200))
        .unwrap();
    before.verify().await.unwrap();
    JobQueue::repartition(&ts.store, "moving", 5).await.unwrap();
    // Its pushes are refused at once: the old partitions are closed.
    let err = before.push("x", &PushOptions::default()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PartitionConflict, "{err}");
    // Its reads go on until its next re-check, which refuses them too.
    before.stats().await.expect("agreed less than 200 ms ago");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let err = before.stats().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PartitionConflict, "{err}");
    let five = JobQueue::partitioned(&ts.store, "moving", 5).unwrap();
    five.push("x", &PushOptions::default()).await.unwrap();
    // Back to 2 once empty: the layout of 2 is opened again.
    let job = five.claim().await.unwrap().expect("the job");
    five.ack(&job.id, job.fence).await.unwrap();
    JobQueue::repartition(&ts.store, "moving", 2).await.unwrap();
    push_one(&ts, "moving", 2).await;
    assert_eq!(
        five.push("y", &PushOptions::default()).await.unwrap_err().kind(),
        ErrorKind::PartitionConflict
    );
    assert!(
        JobQueue::partitioned(&ts.store, "moving", 2)
            .unwrap()
            .recheck_every(Duration::ZERO)
            .is_err()
    );

    // The first handle to change a fresh queue sets its count.
    JobQueue::partitioned(&ts.store, "fresh", 3)
        .unwrap()
        .verify()
        .await
        .unwrap();
    for k in [1, 2, 4] {
        let err = JobQueue::partitioned(&ts.store, "fresh", k)
            .unwrap()
            .claim()
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PartitionConflict, "{k}: {err}");
    }
    let err = JobQueue::repartition(&ts.store, "fresh", 0).await.unwrap_err();
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

/// Pause and resume reach every partition: nothing is claimed from any
/// while paused, everything after.
async fn pause_and_resume_every_partition(ts: TestStore) {
    let q = sharded(&ts, 4);
    let jobs: Vec<(String, PushOptions)> = (0..40)
        .map(|i| (format!("{i}"), with_id(&format!("j{i}"))))
        .collect();
    q.push_many(&jobs).await.unwrap();
    assert!(q.pause().await.unwrap());
    assert!(!q.pause().await.unwrap());
    assert!(q.stats().await.unwrap().paused);
    assert!(q.claim_many(40).await.unwrap().is_empty());
    assert!(q.next(Duration::from_millis(50)).await.unwrap().is_none());
    assert!(q.resume().await.unwrap());
    assert!(!q.stats().await.unwrap().paused);
    let mut n = 0;
    while let Some(job) = q.claim().await.unwrap() {
        q.ack(&job.id, job.fence).await.unwrap();
        n += 1;
    }
    assert_eq!(n, 40);
}

/// `ack_and_claim_many` on a partitioned queue: with no deliveries it
/// claims from every partition in turn; deliveries of one partition are
/// acked and claimed from in one step; deliveries spanning partitions are
/// acked, then claimed from all; a batch over MAX_BATCH is refused before
/// anything is acked.
async fn ack_and_claim_many_over_partitions(ts: TestStore) {
    let q = sharded(&ts, 4);
    let jobs: Vec<(String, PushOptions)> = (0..40)
        .map(|i| (format!("{i}"), with_id(&format!("a{i}"))))
        .collect();
    q.push_many(&jobs).await.unwrap();
    // No deliveries: four claims of one take from four partitions.
    let mut parts = std::collections::HashSet::new();
    let mut held = Vec::new();
    for _ in 0..4 {
        let (acked, got) = q.ack_and_claim_many(&[], 1).await.unwrap();
        assert!(acked.is_empty());
        let job = got.into_iter().next().expect("a job");
        parts.insert(q.partition_of(&job.id));
        held.push(job);
    }
    assert_eq!(
        parts.len(),
        4,
        "claims with no deliveries took every partition in turn"
    );
    // Too many to claim: refused, and nothing acked.
    let spanning: Vec<(&str, u64)> = held.iter().map(|j| (j.id.as_str(), j.fence)).collect();
    let err = q
        .ack_and_claim_many(&spanning, tollgate::MAX_BATCH + 1)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert_eq!(q.stats().await.unwrap().in_flight, 4, "nothing was acked");
    // Spanning partitions: every ack made, then claims from all.
    let (acked, got) = q.ack_and_claim_many(&spanning, 36).await.unwrap();
    assert_eq!(acked, vec![true; 4]);
    assert_eq!(got.len(), 36, "the rest, from every partition");
    // One partition's deliveries: acked and answered in one step.
    let one = got[0].clone();
    let (acked, more) = q
        .ack_and_claim_many(&[(one.id.as_str(), one.fence)], 5)
        .await
        .unwrap();
    assert_eq!((acked, more.len()), (vec![true], 0));
    let s = q.stats().await.unwrap();
    assert_eq!((s.acked, s.in_flight), (5, 35), "{s:?}");
}

on_both_stores!(
    realtime: pause_and_resume_every_partition,
    routes_by_id_and_drains_every_partition,
    every_job_once_and_wakes,
    partition_counts_are_kept_and_changed_only_when_empty,
    batches_answer_per_job,
    ack_and_claim_many_over_partitions
);
