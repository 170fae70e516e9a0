//! Fair queues: groups take turns at claim, and the queue's and each
//! group's concurrency and rate hold, on every store.

use super::*;
use tollgate::{GroupHold, GroupLimits, QueueLimits, Rate};

fn in_group(group: &str) -> PushOptions {
    PushOptions {
        group: Some(group.to_owned()),
        ..PushOptions::default()
    }
}

/// `n` jobs of `group`, their id and payload `<group>-<i>`.
fn jobs_of(group: &str, n: usize) -> Vec<(String, PushOptions)> {
    (0..n)
        .map(|i| {
            let id = format!("{group}-{i}");
            let options = PushOptions {
                id: Some(id.clone()),
                ..in_group(group)
            };
            (id, options)
        })
        .collect()
}

async fn push_group(q: &JobQueue, group: &str, n: usize) {
    for chunk in jobs_of(group, n).chunks(1000) {
        q.push_many(chunk).await.expect("push");
    }
}

fn group_of(job: &Job) -> &str {
    job.group.as_deref().unwrap_or("")
}

/// When the store handed `job` out (its lease's start, store time, ms).
fn claimed_at(job: &Job, lease: Duration) -> u64 {
    (job.lease_until - lease)
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn limits(f: impl FnOnce(&mut QueueLimits)) -> QueueLimits {
    let mut l = QueueLimits::default();
    f(&mut l);
    l
}

/// Groups take turns whatever their backlogs; within a group, priority
/// then push order; the claimed job names its group; a plain queue turns
/// fair at its first grouped push, its jobs so far in the default group.
async fn groups_take_turns(ts: TestStore) {
    let q = queue(&ts);
    q.push("plain", &with_id("plain")).await.unwrap();
    push_group(&q, "a", 5).await;
    push_group(&q, "b", 2).await;
    let urgent = PushOptions {
        priority: 9,
        id: Some("a-urgent".into()),
        ..in_group("a")
    };
    q.push("x", &urgent).await.unwrap();
    push_group(&q, "c", 1).await;
    let mut order = Vec::new();
    while let Some(job) = q.claim().await.unwrap() {
        order.push(job.id.clone());
    }
    assert_eq!(
        order,
        [
            "plain", "a-urgent", "b-0", "c-0", "a-0", "b-1", "a-1", "a-2", "a-3", "a-4"
        ],
        "the default group (first in line), then a, b, c in turn"
    );
    let s = q.stats().await.unwrap();
    assert_eq!((s.groups, s.in_flight), (4, 10), "{s:?}");
    let info = q.get("b-0").await.unwrap().unwrap();
    assert_eq!(info.group.as_deref(), Some("b"));
}

/// A group at its concurrency gets nothing more until one of its jobs
/// ends (ack, nack, lease over), while other groups run; the queue's own
/// concurrency caps them all.
async fn concurrency_holds_until_a_job_ends(ts: TestStore) {
    let lease = Duration::from_secs(5);
    let q = queue(&ts).lease(lease).unwrap();
    q.set_limits(&limits(|l| l.group_concurrency = Some(2)))
        .await
        .unwrap();
    push_group(&q, "a", 6).await;
    push_group(&q, "b", 1).await;
    let got = q.claim_many(10).await.unwrap();
    let groups: Vec<&str> = got.iter().map(group_of).collect();
    assert_eq!(groups, ["a", "b", "a"], "two of a, the one of b");
    assert!(q.claim_many(10).await.unwrap().is_empty(), "a is at its limit");
    let s = q.stats().await.unwrap();
    assert_eq!((s.groups_held, s.limited_claims), (1, 2), "{s:?}");
    let page = q.groups(None, 10).await.unwrap();
    let a = &page.groups[0];
    assert_eq!(
        (a.group.as_deref(), a.ready, a.running, a.held, a.concurrency),
        (Some("a"), 4, 2, Some(GroupHold::Concurrency), Some(2))
    );
    // An ack frees a slot: one more of a.
    q.ack(&got[0].id, got[0].fence).await.unwrap();
    let next = q.claim_many(10).await.unwrap();
    assert_eq!(next.len(), 1, "{next:?}");
    // A nack frees one too (the job goes back, due later).
    q.nack(&next[0].id, next[0].fence, Retry::After(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(q.claim_many(10).await.unwrap().len(), 1);
    // The queue's own concurrency: 3 running now (a, a, b), at most 3.
    q.set_limits(&limits(|l| {
        l.group_concurrency = Some(10);
        l.concurrency = Some(3);
    }))
    .await
    .unwrap();
    assert!(q.claim_many(10).await.unwrap().is_empty(), "the queue is at 3");
    q.ack(&got[1].id, got[1].fence).await.unwrap();
    assert_eq!(q.claim_many(10).await.unwrap().len(), 1, "one slot freed");
    // A lease that runs out frees its slot as well.
    ts.advance(lease + Duration::from_millis(50)).await;
    let again = q.claim_many(10).await.unwrap();
    assert_eq!(again.len(), 3, "every lease ended: 3 again, {again:?}");
}

/// Claims from `q` as fast as anything comes for 1.2 s of store time:
/// each job's group and when it was handed out (store ms).
async fn claim_for_a_while(ts: &TestStore, q: &JobQueue, lease: Duration) -> Vec<(String, u64)> {
    let manual = ts.clock.is_some();
    let start = Instant::now();
    let mut got = Vec::new();
    for _ in 0..(if manual { 120 } else { 1_000_000 }) {
        for job in q.claim_many(10).await.unwrap() {
            got.push((group_of(&job).to_owned(), claimed_at(&job, lease)));
        }
        if manual {
            ts.advance(Duration::from_millis(10)).await;
        } else if start.elapsed() > Duration::from_millis(1200) {
            break;
        } else {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    got
}

/// The most of `times` (ms, in order) within any window of `period` ms.
fn most_in_window(times: &[u64], period: u64) -> usize {
    let mut most = 0;
    let mut lo = 0;
    for hi in 0..times.len() {
        while times[hi] - times[lo] >= period {
            lo += 1;
        }
        most = most.max(hi - lo + 1);
    }
    most
}

/// A rate lets at most its count go in any window of one period, and all
/// of it: a claim that gets nothing spends nothing. Per group, and for
/// the queue.
async fn rates_space_the_jobs(ts: TestStore) {
    let lease = Duration::from_secs(60);
    let q = queue(&ts).lease(lease).unwrap();
    let two_a_second = Rate::per_second(2).unwrap();
    q.set_limits(&limits(|l| l.group_rate = Some(two_a_second)))
        .await
        .unwrap();
    push_group(&q, "a", 10).await;
    push_group(&q, "b", 10).await;
    let mut claimed: HashMap<String, Vec<u64>> = HashMap::new();
    for (group, at) in claim_for_a_while(&ts, &q, lease).await {
        claimed.entry(group).or_default().push(at);
    }
    for (group, times) in &mut claimed {
        times.sort_unstable();
        assert!(most_in_window(times, 1000) <= 2, "{group}: {times:?}");
        assert!((3..=4).contains(&times.len()), "{group}: {times:?}");
    }
    assert_eq!(claimed.len(), 2);
    // The queue's rate over both groups: 4 a second.
    let q2 = JobQueue::new(&ts.store, "q2").unwrap().lease(lease).unwrap();
    q2.set_limits(&limits(|l| l.rate = Some(Rate::per_second(4).unwrap())))
        .await
        .unwrap();
    push_group(&q2, "a", 10).await;
    push_group(&q2, "b", 10).await;
    let mut times: Vec<u64> = claim_for_a_while(&ts, &q2, lease)
        .await
        .into_iter()
        .map(|(_, at)| at)
        .collect();
    times.sort_unstable();
    assert!(most_in_window(&times, 1000) <= 4, "{times:?}");
    assert!((6..=8).contains(&times.len()), "{times:?}");
    let s = q2.stats().await.unwrap();
    assert!(s.limited_claims > 0, "{s:?}");
}

/// A group's own limits replace the queue's group limits for it; they
/// read back; dropped, the queue's apply again; changed limits apply at
/// the next claim.
async fn a_group_has_its_own_limits(ts: TestStore) {
    let q = queue(&ts);
    q.set_limits(&limits(|l| l.group_concurrency = Some(1)))
        .await
        .unwrap();
    let vip = GroupLimits {
        concurrency: Some(3),
        rate: None,
    };
    q.set_group_limits("vip", Some(&vip)).await.unwrap();
    assert_eq!(q.group_limits("vip").await.unwrap(), Some(vip));
    assert_eq!(q.group_limits("free").await.unwrap(), None);
    assert_eq!(q.limits().await.unwrap().group_concurrency, Some(1));
    push_group(&q, "vip", 5).await;
    push_group(&q, "free", 5).await;
    let got = q.claim_many(10).await.unwrap();
    let vips = got.iter().filter(|j| group_of(j) == "vip").count();
    assert_eq!((vips, got.len()), (3, 4), "{got:?}");
    // Raised at runtime: the held group goes at the next claim.
    q.set_limits(&limits(|l| l.group_concurrency = Some(2)))
        .await
        .unwrap();
    let more = q.claim_many(10).await.unwrap();
    assert_eq!(more.iter().map(group_of).collect::<Vec<_>>(), ["free"]);
    // Dropped: vip falls back to 2 (3 running: nothing more).
    q.set_group_limits("vip", None).await.unwrap();
    assert_eq!(q.group_limits("vip").await.unwrap(), None);
    assert!(q.claim_many(10).await.unwrap().is_empty());
    // No limits at all: everything left goes.
    q.set_limits(&QueueLimits::default()).await.unwrap();
    assert_eq!(q.claim_many(10).await.unwrap().len(), 5);
}

/// A queue that ran plain counts its running jobs once it turns fair.
async fn running_jobs_count_when_limits_arrive(ts: TestStore) {
    let q = queue(&ts);
    q.push_many(&hundred(0)[..3]).await.unwrap();
    let running = q.claim_many(2).await.unwrap();
    q.set_limits(&limits(|l| l.concurrency = Some(2))).await.unwrap();
    assert!(q.claim().await.unwrap().is_none(), "two run already");
    q.ack(&running[0].id, running[0].fence).await.unwrap();
    let last = claim(&q).await;
    // The group's count goes down with the ack of a job claimed before.
    q.ack(&running[1].id, running[1].fence).await.unwrap();
    q.ack(&last.id, last.fence).await.unwrap();
    let s = q.stats().await.unwrap();
    assert_eq!((s.in_flight, s.groups), (0, 0), "{s:?}");
}

/// Delayed, retried, replayed, cancelled and rescheduled jobs keep their
/// group; the listing pages by backlog.
async fn every_path_keeps_the_group(ts: TestStore) {
    let q = queue(&ts);
    q.set_limits(&limits(|l| l.group_concurrency = Some(1)))
        .await
        .unwrap();
    let late = PushOptions {
        delay: Some(Duration::from_millis(100)),
        id: Some("late".into()),
        ..in_group("g")
    };
    q.push("x", &late).await.unwrap();
    assert!(q.claim().await.unwrap().is_none());
    ts.advance(Duration::from_millis(150)).await;
    let job = claim(&q).await;
    assert_eq!(group_of(&job), "g");
    let once = PushOptions {
        id: Some("once".into()),
        max_attempts: 1,
        ..in_group("g")
    };
    q.push("y", &once).await.unwrap();
    assert!(q.claim().await.unwrap().is_none(), "g runs one");
    let retry = Retry::After(Duration::from_secs(60));
    assert!(matches!(
        q.nack(&job.id, job.fence, retry).await.unwrap(),
        Nacked::RetryAt(_)
    ));
    let next = claim(&q).await;
    assert_eq!(next.id, "once", "the nack freed g's slot");
    assert_eq!(
        q.nack(&next.id, next.fence, Retry::Backoff).await.unwrap(),
        Nacked::Dead
    );
    assert_eq!(q.replay(Some("once")).await.unwrap(), 1);
    assert_eq!(q.cancel("late").await.unwrap(), Cancelled::Cancelled);
    let again = claim(&q).await;
    assert_eq!((again.id.as_str(), group_of(&again)), ("once", "g"));
    q.ack(&again.id, again.fence).await.unwrap();
    // Listing: most ready first, by pages.
    push_group(&q, "big", 5).await;
    push_group(&q, "mid", 3).await;
    push_group(&q, "one", 1).await;
    let first = q.groups(None, 2).await.unwrap();
    let names: Vec<_> = first
        .groups
        .iter()
        .map(|g| (g.group.clone().unwrap(), g.ready))
        .collect();
    assert_eq!(names, [("big".to_owned(), 5), ("mid".to_owned(), 3)]);
    let rest = q.groups(first.next.as_deref(), 2).await.unwrap();
    let names: Vec<_> = rest.groups.iter().map(|g| g.group.clone().unwrap()).collect();
    assert_eq!(names, ["one"]);
    assert_eq!(rest.next, None);
}

/// 100 groups, backlogs 1,000 times apart, many consumers: while every
/// group has jobs, each gets the same share of the claims.
async fn backlogs_apart_progress_alike(ts: TestStore) {
    let q = queue(&ts).lease(Duration::from_secs(60)).unwrap();
    push_group(&q, "huge", 10_000).await;
    for g in 1..100 {
        push_group(&q, &format!("small{g:02}"), 10).await;
    }
    let claimed = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (q, claimed) = (q.clone(), claimed.clone());
            tokio::spawn(async move {
                loop {
                    let jobs = q.claim_many(7).await.unwrap();
                    if jobs.is_empty() {
                        return;
                    }
                    for j in &jobs {
                        claimed.lock().unwrap().push((j.fence, group_of(j).to_owned()));
                    }
                    q.ack_many(&fences(&jobs)).await.unwrap();
                    if claimed.lock().unwrap().len() >= 1500 {
                        return;
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let mut claimed = claimed.lock().unwrap().clone();
    claimed.sort();
    // The first 100 x 10 claims, in the order the store made them.
    let mut per_group: HashMap<String, u32> = HashMap::new();
    for (_, g) in claimed.iter().take(1000) {
        *per_group.entry(g.clone()).or_default() += 1;
    }
    let (min, max) = (
        per_group.values().min().copied().unwrap_or(0),
        per_group.values().max().copied().unwrap_or(0),
    );
    assert_eq!(per_group.len(), 100);
    assert!(
        f64::from(max) / f64::from(min) <= 1.2,
        "{min}..{max}: {per_group:?}"
    );
}

/// On a partitioned queue a group's jobs all go to its partition (ids
/// chosen there, or refused outside it, or made there by
/// `group_job_id`), its limits hold there, the queue's are split, and
/// the groups listing pages through every partition without a skip or a
/// repeat.
async fn a_partitioned_queue_keeps_each_group_in_one_partition(ts: TestStore) {
    let q = JobQueue::partitioned(&ts.store, "pq", 4).unwrap();
    let groups: Vec<String> = (0..12).map(|i| format!("t{i}")).collect();
    for g in &groups {
        push_group_ids(&q, g, 3).await;
    }
    let want = q.partition_of_group("t0");
    let wrong = (0..100)
        .map(|i| format!("k{i}"))
        .find(|id| q.partition_of(id) != want)
        .unwrap();
    let e = q
        .push(
            "x",
            &PushOptions {
                id: Some(wrong.clone()),
                ..in_group("t0")
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    let made = q.group_job_id("t0", &wrong).unwrap();
    assert_eq!(q.partition_of(&made), want);
    assert_eq!(
        q.group_job_id("t0", &wrong).unwrap(),
        made,
        "the same id each time"
    );
    // Every group's jobs sit in its partition.
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = q.groups(after.as_deref(), 5).await.unwrap();
        seen.extend(page.groups.iter().map(|g| g.group.clone().unwrap()));
        after = page.next;
        if after.is_none() {
            break;
        }
    }
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), seen.len(), "no repeat: {seen:?}");
    assert_eq!(seen.len(), 12, "no skip: {seen:?}");
    // Group limits hold per group; the queue's concurrency is split.
    let e = q
        .set_limits(&limits(|l| l.concurrency = Some(3)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "3 < 4 partitions: {e}");
    q.set_limits(&limits(|l| {
        l.concurrency = Some(8);
        l.group_concurrency = Some(1);
    }))
    .await
    .unwrap();
    assert_eq!(q.limits().await.unwrap().concurrency, Some(8), "as given");
    let got = q.claim_many(100).await.unwrap();
    let mut per_group: HashMap<&str, usize> = HashMap::new();
    for j in &got {
        *per_group.entry(group_of(j)).or_default() += 1;
        assert_eq!(q.partition_of(&j.id), q.partition_of_group(group_of(j)));
    }
    assert!(per_group.values().all(|n| *n == 1), "{per_group:?}");
    assert!(got.len() <= 8, "{} running over 8", got.len());
}

/// `n` jobs of `group` with ids the queue chooses.
async fn push_group_ids(q: &JobQueue, group: &str, n: usize) {
    for _ in 0..n {
        q.push("x", &in_group(group)).await.unwrap();
    }
}

/// Bad group keys and limits are refused with InvalidInput.
async fn bad_groups_and_limits_are_refused(ts: TestStore) {
    let q = queue(&ts);
    for bad in ["", "a b", "tab\t", &"g".repeat(129)] {
        let e = q.push("x", &in_group(bad)).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad:?}: {e}");
        let e = q.set_group_limits(bad, None).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad:?}: {e}");
    }
    for bad in [
        limits(|l| l.concurrency = Some(0)),
        limits(|l| l.group_concurrency = Some(2_000_000)),
    ] {
        let e = q.set_limits(&bad).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad:?}: {e}");
    }
    let zero = GroupLimits {
        concurrency: Some(0),
        rate: None,
    };
    assert_eq!(
        q.set_group_limits("g", Some(&zero)).await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    for (after, limit) in [(None, 0), (None, 1001), (Some("nope"), 10), (Some("x:y:z"), 10)] {
        let e = q.groups(after, limit).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{after:?} {limit}");
    }
    assert!(!q.exists().await.unwrap(), "nothing refused was written");
}

on_both_stores!(
    manual_clock: groups_take_turns,
    concurrency_holds_until_a_job_ends,
    rates_space_the_jobs,
    a_group_has_its_own_limits,
    running_jobs_count_when_limits_arrive,
    every_path_keeps_the_group,
    backlogs_apart_progress_alike,
    bad_groups_and_limits_are_refused,
    a_partitioned_queue_keeps_each_group_in_one_partition,
);
