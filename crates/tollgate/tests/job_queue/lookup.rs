//! Looking jobs up: one job by id (`get`) and the jobs of a state by pages
//! (`list`), on one queue and through the partitions of a sharded one.

use super::*;
use std::collections::HashSet;
use tollgate::{JobInfo, JobQueue, JobState};

fn prio(priority: u8, id: &str) -> PushOptions {
    PushOptions {
        id: Some(id.to_owned()),
        priority,
        ..PushOptions::default()
    }
}

async fn get(q: &JobQueue, id: &str) -> JobInfo {
    q.get(id)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("job {id} is known"))
}

/// Every state is reached and reported, with what the store knows of the
/// job there; a cancelled job and one never pushed are unknown.
async fn each_state_is_reported(ts: TestStore) {
    let q = queue(&ts).keep_completed(10, Duration::from_secs(3600)).unwrap();
    q.push("run", &prio(9, "run")).await.unwrap();
    let running = claim(&q).await;
    let dies = PushOptions {
        max_attempts: 1,
        ..prio(9, "dead")
    };
    q.push("x", &dies).await.unwrap();
    let job = claim(&q).await;
    let died = q
        .nack_with_error(&job.id, job.fence, Retry::Backoff, "boom")
        .await;
    assert_eq!(died.unwrap(), Nacked::Dead);
    q.push("ok", &prio(9, "done")).await.unwrap();
    let job = claim(&q).await;
    q.ack(&job.id, job.fence).await.unwrap();
    let big = "é".repeat(150); // 300 bytes
    q.push(&big, &prio(3, "ready")).await.unwrap();
    let delayed = PushOptions {
        id: Some("later".into()),
        ..later(3_600_000)
    };
    q.push("soon", &delayed).await.unwrap();
    q.push("gone", &with_id("cancelled")).await.unwrap();
    assert_eq!(q.cancel("cancelled").await.unwrap(), Cancelled::Cancelled);

    let r = get(&q, "ready").await;
    assert_eq!(
        (r.state, r.attempts, r.priority, r.max_attempts, r.fence, r.at),
        (JobState::Ready, 0, 3, 5, None, None)
    );
    assert_eq!(r.payload_size, 300);
    assert_eq!(r.payload_preview, &big.as_bytes()[..tollgate::JOB_PREVIEW_BYTES]);
    let d = get(&q, "later").await;
    assert_eq!((d.state, d.attempts, d.fence), (JobState::Delayed, 0, None));
    assert!(d.at.expect("its due time") > std::time::SystemTime::UNIX_EPOCH);
    assert_eq!((d.payload_size, d.payload_preview.as_slice()), (4, &b"soon"[..]));
    let run = get(&q, "run").await;
    assert_eq!(
        (run.state, run.attempts, run.fence),
        (JobState::Running, 1, Some(running.fence))
    );
    assert_eq!(run.at, Some(running.lease_until), "running: its lease's end");
    let dead = get(&q, "dead").await;
    assert_eq!(
        (
            dead.state,
            dead.attempts,
            dead.max_attempts,
            dead.last_error.as_deref()
        ),
        (JobState::Dead, 1, 1, Some("boom"))
    );
    let done = get(&q, "done").await;
    assert_eq!(
        (done.state, done.attempts, done.fence),
        (JobState::Completed, 0, None)
    );
    assert!(done.at.is_some() && dead.at.is_some());
    assert_eq!(q.get("cancelled").await.unwrap(), None, "a cancelled job is gone");
    assert_eq!(q.get("never").await.unwrap(), None);

    for (state, id) in [
        (JobState::Ready, "ready"),
        (JobState::Delayed, "later"),
        (JobState::Running, "run"),
        (JobState::Dead, "dead"),
        (JobState::Completed, "done"),
    ] {
        let page = q.list(state, None, 10).await.unwrap();
        let ids: Vec<&str> = page.jobs.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(ids, [id], "{state}");
        assert_eq!(page.jobs[0], get(&q, id).await, "a row is the job's lookup");
        assert_eq!(page.next, None);
    }
    // Looking up changed nothing.
    let s = q.stats().await.unwrap();
    assert_eq!(
        (s.ready, s.delayed, s.in_flight, s.dead, s.completed),
        (1, 1, 1, 1, 1)
    );
}

/// Walks every page of `state` with `limit`; the ids in order.
async fn walk(q: &JobQueue, state: JobState, limit: usize) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor = None;
    loop {
        let page = q.list(state, cursor.as_deref(), limit).await.unwrap();
        assert!(page.jobs.len() <= limit);
        ids.extend(page.jobs.into_iter().map(|j| j.id));
        match page.next {
            Some(next) => cursor = Some(next),
            None => return ids,
        }
    }
}

/// Pages visit every job once, in the state's order (ready: the claim
/// order); jobs that share a score (delayed to the same time) are paged
/// through too; a cursor whose job left resumes without skipping any job
/// that stayed.
async fn paging_visits_every_job_once(ts: TestStore) {
    let q = queue(&ts);
    let ready: Vec<(String, PushOptions)> = (0..23)
        .map(|i| (format!("r{i}"), prio((i % 3) as u8, &format!("r{i:02}"))))
        .collect();
    q.push_many(&ready).await.unwrap();
    let delayed: Vec<(String, PushOptions)> = (0..17)
        .map(|i| {
            let options = PushOptions {
                id: Some(format!("d{i:02}")),
                ..later(3_600_000)
            };
            (format!("d{i}"), options)
        })
        .collect();
    q.push_many(&delayed).await.unwrap();

    let mut claim_order: Vec<(u8, usize, String)> = (0..23)
        .map(|i| (2 - (i % 3) as u8, i, format!("r{i:02}")))
        .collect();
    claim_order.sort();
    let expected: Vec<String> = claim_order.into_iter().map(|(_, _, id)| id).collect();
    for limit in [1, 5, 23, 100] {
        assert_eq!(walk(&q, JobState::Ready, limit).await, expected, "limit {limit}");
    }
    let mut ids = walk(&q, JobState::Delayed, 4).await;
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!((ids.len(), unique.len()), (17, 17), "{ids:?}");
    ids.sort();
    assert_eq!(ids, (0..17).map(|i| format!("d{i:02}")).collect::<Vec<_>>());

    // The cursor's job leaves before the next page: nothing that stayed
    // is skipped.
    let page = q.list(JobState::Delayed, None, 5).await.unwrap();
    let last = page.jobs.last().unwrap().id.clone();
    assert_eq!(q.cancel(&last).await.unwrap(), Cancelled::Cancelled);
    let seen: HashSet<String> = page.jobs.iter().map(|j| j.id.clone()).collect();
    let mut rest = walk_from(&q, JobState::Delayed, page.next.clone(), 5).await;
    rest.extend(seen);
    let rest: HashSet<String> = rest.into_iter().collect();
    assert_eq!(rest.len(), 17, "every job seen, the cancelled one before it left");

    // The same for ready jobs (scored by priority and push order).
    let page = q.list(JobState::Ready, None, 4).await.unwrap();
    let last = page.jobs.last().unwrap().id.clone();
    assert_eq!(q.cancel(&last).await.unwrap(), Cancelled::Cancelled);
    let mut ids: Vec<String> = page.jobs.iter().map(|j| j.id.clone()).collect();
    ids.extend(walk_from(&q, JobState::Ready, page.next.clone(), 4).await);
    assert_eq!(ids, expected, "in the claim order, each once");

    // A page at the end of an empty state, and of a queue never written.
    assert_eq!(walk(&q, JobState::Dead, 10).await, Vec::<String>::new());
    let blank = JobQueue::new(&ts.store, "blank").unwrap();
    assert!(
        blank
            .list(JobState::Ready, None, 10)
            .await
            .unwrap()
            .jobs
            .is_empty()
    );
    assert!(!blank.exists().await.unwrap(), "a lookup creates nothing");
}

async fn walk_from(q: &JobQueue, state: JobState, mut cursor: Option<String>, limit: usize) -> Vec<String> {
    let mut ids = Vec::new();
    while let Some(c) = cursor {
        let page = q.list(state, Some(&c), limit).await.unwrap();
        ids.extend(page.jobs.into_iter().map(|j| j.id));
        cursor = page.next;
    }
    ids
}

/// Bad states, limits and cursors are refused as bad input.
async fn bad_lookups_are_refused(ts: TestStore) {
    let q = queue(&ts);
    let invalid =
        |r: Result<_, tollgate::Error>| r.map(|_| ()).unwrap_err().kind() == ErrorKind::InvalidInput;
    assert!(invalid("bogus".parse::<JobState>().map(|_| ())));
    assert_eq!("dead".parse::<JobState>().unwrap(), JobState::Dead);
    assert!(invalid(q.list(JobState::Dead, None, 0).await.map(|_| ())));
    assert!(invalid(q.list(JobState::Dead, None, 1001).await.map(|_| ())));
    for cursor in ["", "x", "12", "x.id", "12.", "-1.id"] {
        assert!(
            invalid(q.list(JobState::Dead, Some(cursor), 10).await.map(|_| ())),
            "{cursor:?}"
        );
    }
    assert!(invalid(q.get("").await.map(|_| ())));
    let s = JobQueue::partitioned(&ts.store, "sq", 3).unwrap();
    for cursor in ["", "3.", "x.1.id", "0.x"] {
        assert!(
            invalid(s.list(JobState::Dead, Some(cursor), 10).await.map(|_| ())),
            "{cursor:?}"
        );
    }
}

/// Through a sharded queue: a job is found in its partition, and pages
/// go through every partition, each job once.
async fn sharded_lookups_cover_every_partition(ts: TestStore) {
    let q = JobQueue::partitioned(&ts.store, "sq", 4).unwrap();
    let jobs: Vec<(String, PushOptions)> = (0..30)
        .map(|i| (format!("{i}"), with_id(&format!("j{i}"))))
        .collect();
    q.push_many(&jobs).await.unwrap();
    let j = q.get("j7").await.unwrap().expect("j7");
    assert_eq!(
        (j.id.as_str(), j.state, j.payload_preview.as_slice()),
        ("j7", JobState::Ready, &b"7"[..])
    );
    assert_eq!(q.get("j99").await.unwrap(), None);
    for limit in [1, 7, 30, 1000] {
        let mut ids = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = q.list(JobState::Ready, cursor.as_deref(), limit).await.unwrap();
            ids.extend(page.jobs.into_iter().map(|j| j.id));
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let unique: HashSet<&String> = ids.iter().collect();
        assert_eq!((ids.len(), unique.len()), (30, 30), "limit {limit}: {ids:?}");
    }
}

/// A record still in the old single `:d` hash is read there by a lookup,
/// and left where it is (a lookup writes nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_reads_an_old_record_without_moving_it() {
    let ts = TestStore::redis().await;
    let redis = ts.server.as_ref().expect("redis");
    let base = "tollgate:jobs:{old}";
    redis.command(&[
        "HSET",
        &format!("{base}:d"),
        "legacy",
        "7,2,3,f,10,10\nold payload",
    ]);
    redis.command(&["HSET", &format!("{base}:m"), "s", "7"]);
    redis.command(&["ZADD", &format!("{base}:r"), "7", "legacy"]);
    let q = JobQueue::new(&ts.store, "old").expect("queue");
    let j = q.get("legacy").await.unwrap().expect("found");
    assert_eq!(
        (j.state, j.priority, j.max_attempts, j.payload_preview.as_slice()),
        (JobState::Ready, 2, 3, &b"old payload"[..])
    );
    let page = q.list(JobState::Ready, None, 10).await.unwrap();
    assert_eq!(page.jobs, [j]);
    assert_eq!(
        redis.command(&["HEXISTS", &format!("{base}:d"), "legacy"]),
        ::redis::Value::Int(1),
        "still in the old hash"
    );
}

/// A 512 KiB payload that names job `i`.
fn large(i: usize) -> Vec<u8> {
    let mut p = vec![b'x'; 512 * 1024];
    p[..8].copy_from_slice(format!("{i:08}").as_bytes());
    p
}

/// The bytes a listing counts for a job.
fn counted(id: &str, payload: &[u8], error: Option<&str>) -> usize {
    id.len() + payload.len() + error.map_or(0, str::len)
}

/// Whether `sizes` (in listing order) stop where the byte bound says: each
/// job but the first came while the ones before it were under
/// JOB_LISTING_BYTES, and the one after the last would not have.
fn cut_at_the_bound(sizes: &[usize]) {
    let before: usize = sizes[..sizes.len() - 1].iter().sum();
    assert!(before < tollgate::JOB_LISTING_BYTES, "{sizes:?}");
    assert!(
        before + sizes[sizes.len() - 1] >= tollgate::JOB_LISTING_BYTES,
        "{sizes:?}"
    );
}

/// Dead and completed listings hold a bounded number of bytes whatever
/// their limit (12 jobs of 512 KiB: 4 come); the
/// rest are still listed by `list` and read whole by `get_with_payload`;
/// a sharded queue's merged listing is bounded alike.
async fn listings_are_bounded_in_bytes(ts: TestStore) {
    let q = queue(&ts).keep_completed(100, Duration::from_secs(3600)).unwrap();
    let dies = PushOptions {
        max_attempts: 1,
        ..PushOptions::default()
    };
    for i in 0..24 {
        q.push(large(i), &dies).await.unwrap();
    }
    let jobs = q.claim_many(24).await.unwrap();
    for (i, job) in jobs.iter().enumerate() {
        if i < 12 {
            let died = q
                .nack_with_error(&job.id, job.fence, Retry::Backoff, "boom")
                .await;
            assert_eq!(died.unwrap(), Nacked::Dead);
        } else {
            q.ack(&job.id, job.fence).await.unwrap();
        }
    }
    let dead = q.dead(10_000).await.unwrap();
    assert_eq!(dead.len(), 4);
    let sizes: Vec<usize> = dead
        .iter()
        .map(|d| counted(&d.id, &d.payload, d.last_error.as_deref()))
        .collect();
    cut_at_the_bound(&sizes);
    let done = q.completed(10_000).await.unwrap();
    assert_eq!(done.len(), 4);
    cut_at_the_bound(
        &done
            .iter()
            .map(|d| counted(&d.id, &d.payload, None))
            .collect::<Vec<_>>(),
    );
    // The last dead job: listed, and read whole by its id.
    let page = q.list(JobState::Dead, None, 1000).await.unwrap();
    let last = page.jobs.last().expect("dead jobs listed");
    assert_eq!((page.jobs.len(), last.payload_size), (12, 512 * 1024));
    assert_eq!(last.payload_preview.len(), tollgate::JOB_PREVIEW_BYTES);
    let (info, payload) = q.get_with_payload(&last.id).await.unwrap().expect("known");
    let n: usize = std::str::from_utf8(&payload[..8]).unwrap().parse().unwrap();
    assert_eq!((info, payload), (last.clone(), large(n)));
    assert!(q.get_with_payload("nobody").await.unwrap().is_none());

    let s = JobQueue::partitioned(&ts.store, "sq", 3).unwrap();
    for i in 0..12 {
        s.push(large(i), &dies).await.unwrap();
    }
    for job in s.claim_many(12).await.unwrap() {
        assert_eq!(
            s.nack(&job.id, job.fence, Retry::Backoff).await.unwrap(),
            Nacked::Dead
        );
    }
    let dead = s.dead(10_000).await.unwrap();
    assert_eq!(dead.len(), 4);
    cut_at_the_bound(
        &dead
            .iter()
            .map(|d| counted(&d.id, &d.payload, None))
            .collect::<Vec<_>>(),
    );
    let (_, payload) = s.get_with_payload(&dead[3].id).await.unwrap().expect("known");
    assert_eq!(payload, dead[3].payload);
}

on_both_stores!(
    manual_clock: each_state_is_reported,
    paging_visits_every_job_once,
    bad_lookups_are_refused,
    sharded_lookups_cover_every_partition,
    listings_are_bounded_in_bytes
);
