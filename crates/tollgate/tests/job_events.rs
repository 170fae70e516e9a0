//! A job queue's events (`JobQueue::events`) on both stores: caused by
//! another handle (on Redis another connection, as another process would
//! be), found inside the steps (a lease that ran out), in order, to every
//! subscriber; a subscriber that falls behind is dropped; a resume; and
//! nothing written while nobody watches.

mod support;

use std::time::Duration;

use futures_util::StreamExt;
use support::TestStore;
use tollgate::{
    ErrorKind, EventId, JobEvent, JobEventKind, JobEvents, JobQueue, Lagged, PushOptions, Retry, Store,
};

/// Another client of the same store: on Redis a separate connection (what
/// another process or server would use); in memory the same store.
async fn other(ts: &TestStore) -> Store {
    let url = if let Some(s) = &ts.server {
        s.url()
    } else if let Some(c) = &ts.cluster {
        c.url()
    } else if let Some(s) = &ts.sentinel {
        s.url()
    } else {
        return ts.store.clone();
    };
    Store::redis(&url).await.expect("a second connection")
}

fn with_id(id: &str, max_attempts: u32) -> PushOptions {
    PushOptions {
        id: Some(id.to_owned()),
        max_attempts,
        ..PushOptions::default()
    }
}

/// The next `n` events of `feed`, waiting up to 20 s in all (Redis's
/// poller reads every 100 ms; the machine may be loaded).
async fn take(feed: &mut JobEvents, n: usize) -> Vec<JobEvent> {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while got.len() < n {
        match tokio::time::timeout_at(deadline, feed.next()).await {
            Ok(Some(Ok(e))) => got.push(e),
            Ok(other) => panic!("feed ended after {got:?}: {other:?}"),
            Err(_) => panic!("only {} of {n} events in 20 s: {got:?}", got.len()),
        }
    }
    got
}

fn kinds(events: &[JobEvent]) -> Vec<(JobEventKind, Option<&str>)> {
    events.iter().map(|e| (e.kind, e.job.as_deref())).collect()
}

/// Pushes, claims, acks, nacks, a death, a replay, a lease that ran out
/// and a pause, all made through another handle, arrive in order with
/// their fields; ids grow.
async fn every_step_is_an_event_in_order(ts: TestStore) {
    let watcher = JobQueue::new(&ts.store, "ev").unwrap();
    let mut feed = watcher.events(None).await.unwrap();
    assert!(!feed.gap());
    let store = other(&ts).await;
    let q = JobQueue::new(&store, "ev").unwrap();
    // Redis: the poller marks the queue watched on its first read; wait
    // until an event shows it does.
    q.push("warm-up", &with_id("w", 1)).await.unwrap();
    let warm = take(&mut feed, 1).await;
    assert_eq!(kinds(&warm), [(JobEventKind::Pushed, Some("w"))]);
    q.cancel("w").await.unwrap();

    q.push("a", &with_id("a", 2)).await.unwrap();
    let a = q.claim().await.unwrap().unwrap();
    q.ack(&a.id, a.fence).await.unwrap();
    q.push("b", &with_id("b", 2)).await.unwrap();
    let b = q.claim().await.unwrap().unwrap();
    q.nack(&b.id, b.fence, Retry::After(Duration::ZERO))
        .await
        .unwrap();
    let b = q.claim().await.unwrap().unwrap();
    let long = "x".repeat(1000);
    q.nack_with_error(&b.id, b.fence, Retry::After(Duration::ZERO), &long)
        .await
        .unwrap();
    assert_eq!(q.replay(Some("b")).await.unwrap(), 1);
    let short = JobQueue::new(&store, "ev")
        .unwrap()
        .lease(Duration::from_millis(50))
        .unwrap();
    let b = short.claim().await.unwrap().unwrap();
    ts.advance(Duration::from_millis(200)).await;
    q.stats().await.unwrap();
    q.pause().await.unwrap();
    q.resume().await.unwrap();

    let got = take(&mut feed, 14).await;
    use JobEventKind::*;
    assert_eq!(
        kinds(&got),
        [
            (Cancelled, Some("w")),
            (Pushed, Some("a")),
            (Claimed, Some("a")),
            (Acked, Some("a")),
            (Pushed, Some("b")),
            (Claimed, Some("b")),
            (Nacked, Some("b")),
            (Claimed, Some("b")),
            (Dead, Some("b")),
            (Replayed, Some("b")),
            (Claimed, Some("b")),
            (Expired, Some("b")),
            (Paused, None),
            (Resumed, None),
        ]
    );
    assert!(got.windows(2).all(|w| w[0].id < w[1].id), "ids grow: {got:?}");
    assert_eq!((got[2].attempt, got[2].fence), (Some(1), Some(a.fence)));
    assert_eq!(got[7].attempt, Some(2));
    assert_eq!(got[8].error.as_deref().map(str::len), Some(200), "error text cut");
    assert_eq!(got[10].fence, Some(b.fence));
    assert_eq!(got[11].attempt, Some(1));
    assert!(got.iter().all(|e| e.at_ms == e.id.ms && e.at_ms > 0));
}

/// Two subscribers both see every event.
async fn two_subscribers_both_get_everything(ts: TestStore) {
    let watcher = JobQueue::new(&ts.store, "two").unwrap();
    let mut first = watcher.events(None).await.unwrap();
    let mut second = watcher.events(None).await.unwrap();
    let store = other(&ts).await;
    let q = JobQueue::new(&store, "two").unwrap();
    q.push("0", &with_id("j0", 5)).await.unwrap();
    take(&mut first, 1).await;
    take(&mut second, 1).await;
    for i in 1..50 {
        q.push("x", &with_id(&format!("j{i}"), 5)).await.unwrap();
    }
    let a = take(&mut first, 49).await;
    let b = take(&mut second, 49).await;
    assert_eq!(a, b);
    let ids: Vec<_> = a.iter().map(|e| e.job.clone().unwrap()).collect();
    assert_eq!(ids, (1..50).map(|i| format!("j{i}")).collect::<Vec<_>>());
}

/// A subscriber that never reads is dropped (`Lagged`, then the end)
/// once more than EVENTS_BUFFER events passed, while another one reads
/// them all and the queue serves on.
async fn a_slow_subscriber_is_dropped(ts: TestStore) {
    let watcher = JobQueue::new(&ts.store, "slow").unwrap();
    let mut reader = watcher.events(None).await.unwrap();
    let mut sleeper = watcher.events(None).await.unwrap();
    let store = other(&ts).await;
    let q = JobQueue::new(&store, "slow").unwrap();
    q.push("0", &PushOptions::default()).await.unwrap();
    take(&mut reader, 1).await;
    let n = tollgate::EVENTS_BUFFER + 500;
    let jobs: Vec<_> = (0..n).map(|_| ("p", PushOptions::default())).collect();
    for chunk in jobs.chunks(500) {
        q.push_many(chunk).await.unwrap();
        take(&mut reader, chunk.len()).await;
    }
    assert_eq!(q.stats().await.unwrap().ready, n as u64 + 1);
    match tokio::time::timeout(Duration::from_secs(20), sleeper.next()).await {
        Ok(Some(Err(Lagged { missed }))) => assert!(missed > 0),
        other => panic!("expected Lagged, got {other:?}"),
    }
    let end = tokio::time::timeout(Duration::from_secs(20), sleeper.next()).await;
    assert!(matches!(end, Ok(None)), "the feed ends after Lagged: {end:?}");
}

/// A feed resumed from an event's id gets the events after it (while
/// the store still holds them: here another subscriber keeps it watched).
async fn a_feed_resumes_after_an_id(ts: TestStore) {
    let watcher = JobQueue::new(&ts.store, "resume").unwrap();
    let mut keeper = watcher.events(None).await.unwrap();
    let mut first = watcher.events(None).await.unwrap();
    let store = other(&ts).await;
    let q = JobQueue::new(&store, "resume").unwrap();
    for i in 0..3 {
        q.push("x", &with_id(&format!("r{i}"), 5)).await.unwrap();
    }
    let seen = take(&mut first, 3).await;
    drop(first);
    for i in 3..5 {
        q.push("x", &with_id(&format!("r{i}"), 5)).await.unwrap();
    }
    take(&mut keeper, 5).await;
    let mut resumed = watcher.events(Some(seen[2].id)).await.unwrap();
    assert!(!resumed.gap());
    let got = take(&mut resumed, 2).await;
    assert_eq!(
        kinds(&got),
        [
            (JobEventKind::Pushed, Some("r3")),
            (JobEventKind::Pushed, Some("r4"))
        ]
    );
    // Live events follow the replayed ones, none twice.
    q.push("x", &with_id("r5", 5)).await.unwrap();
    let live = take(&mut resumed, 1).await;
    assert_eq!(live[0].job.as_deref(), Some("r5"));
    // An id from before anything kept: a gap.
    let old = watcher.events(Some(EventId { ms: 1, seq: 0 })).await.unwrap();
    assert!(old.gap());
}

/// A resumed feed gets every event after its id, or says `gap()`: never
/// a silent hole. Here its watcher was the queue's only one and left
/// (the memory store forgets a queue nobody watches), then came back.
async fn a_lone_watcher_resumes_or_is_told_of_a_gap(ts: TestStore) {
    let watcher = JobQueue::new(&ts.store, "lone").unwrap();
    let mut feed = watcher.events(None).await.unwrap();
    let store = other(&ts).await;
    let q = JobQueue::new(&store, "lone").unwrap();
    q.push("x", &with_id("l0", 5)).await.unwrap();
    let seen = take(&mut feed, 1).await;
    drop(feed);
    for i in 1..3 {
        q.push("x", &with_id(&format!("l{i}"), 5)).await.unwrap();
    }
    let mut resumed = watcher.events(Some(seen[0].id)).await.unwrap();
    if !resumed.gap() {
        let got = take(&mut resumed, 2).await;
        assert_eq!(
            kinds(&got),
            [
                (JobEventKind::Pushed, Some("l1")),
                (JobEventKind::Pushed, Some("l2"))
            ],
            "no gap said, so nothing may be missing"
        );
    }
}

/// A resume further behind than a replay reads at once (1,000 events)
/// says `gap()` unless every event after its id arrives.
async fn a_long_resume_replays_all_or_says_gap(ts: TestStore) {
    let watcher = JobQueue::new(&ts.store, "long").unwrap();
    let mut keeper = watcher.events(None).await.unwrap();
    let store = other(&ts).await;
    let q = JobQueue::new(&store, "long").unwrap();
    q.push("x", &with_id("first", 5)).await.unwrap();
    let since = take(&mut keeper, 1).await[0].id;
    let n = 1500;
    let jobs: Vec<_> = (0..n).map(|_| ("p", PushOptions::default())).collect();
    for chunk in jobs.chunks(500) {
        q.push_many(chunk).await.unwrap();
        take(&mut keeper, chunk.len()).await;
    }
    let mut resumed = watcher.events(Some(since)).await.unwrap();
    if !resumed.gap() {
        let got = take(&mut resumed, n).await;
        assert!(got.iter().all(|e| e.kind == JobEventKind::Pushed));
    }
}

/// Any well-formed id resumes, the greatest one too (Redis refuses a
/// range after it: the feed must not pass that on as a store error).
async fn the_greatest_id_resumes(ts: TestStore) {
    let q = JobQueue::new(&ts.store, "greatest").unwrap();
    let greatest = EventId {
        ms: u64::MAX,
        seq: u64::MAX,
    };
    let feed = q.events(Some(greatest)).await;
    assert!(feed.is_ok(), "{:?}", feed.err());
}

on_both_stores!(
    manual_clock: every_step_is_an_event_in_order,
    two_subscribers_both_get_everything,
    a_slow_subscriber_is_dropped,
    a_feed_resumes_after_an_id,
    a_lone_watcher_resumes_or_is_told_of_a_gap,
    a_long_resume_replays_all_or_says_gap,
    the_greatest_id_resumes,
);

/// Event ids parse as `ms-seq` and nothing else.
#[test]
fn event_ids_parse_strictly() {
    let id: EventId = "1700000000000-7".parse().unwrap();
    assert_eq!((id.ms, id.seq), (1_700_000_000_000, 7));
    assert_eq!(id.to_string(), "1700000000000-7");
    for bad in [
        "",
        "1",
        "-1",
        "1-",
        "a-1",
        "1-2-3",
        "1 -2",
        "99999999999999999999999-0",
    ] {
        let e = bad.parse::<EventId>().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad:?}");
    }
}

/// On Redis nothing is written for an unwatched queue: no stream, no
/// watch mark. Once watched, the stream holds its events; its mark and
/// the stream's expiry are set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwatched_queue_writes_no_events() {
    let ts = TestStore::redis().await;
    let server = ts.server.as_ref().unwrap();
    let q = JobQueue::new(&ts.store, "quiet").unwrap();
    q.push("x", &with_id("a", 1)).await.unwrap();
    let job = q.claim().await.unwrap().unwrap();
    q.nack_with_error(&job.id, job.fence, Retry::After(Duration::ZERO), "boom")
        .await
        .unwrap();
    q.replay(None).await.unwrap();
    let job = q.claim().await.unwrap().unwrap();
    q.ack(&job.id, job.fence).await.unwrap();
    q.pause().await.unwrap();
    let int = |v: ::redis::Value| match v {
        ::redis::Value::Int(n) => n,
        other => panic!("{other:?}"),
    };
    assert_eq!(int(server.command(&["EXISTS", "tollgate:jobs:{quiet}:v"])), 0);
    assert_eq!(
        int(server.command(&["HEXISTS", "tollgate:jobs:{quiet}:m", "v"])),
        0
    );

    let mut feed = q.events(None).await.unwrap();
    q.resume().await.unwrap();
    // Until the poller's first read marks it, a step may go unrecorded.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        q.push("x", &PushOptions::default()).await.unwrap();
        if let Ok(Some(Ok(_))) = tokio::time::timeout(Duration::from_millis(500), feed.next()).await {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no event in 20 s");
    }
    assert!(int(server.command(&["XLEN", "tollgate:jobs:{quiet}:v"])) >= 1);
    assert!(int(server.command(&["PTTL", "tollgate:jobs:{quiet}:v"])) > 0);
    // A watch mark alone does not make a queue exist.
    let fresh = JobQueue::new(&ts.store, "fresh").unwrap();
    let _watch = fresh.events(None).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while int(server.command(&["HEXISTS", "tollgate:jobs:{fresh}:m", "v"])) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "no watch mark in 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!fresh.exists().await.unwrap());
}

/// On Redis a watch that lapsed (its mark ran out: nobody watched for
/// 30 s, or the watchers could not reach Redis) left steps unrecorded: a
/// resume from before the lapse says `gap()` rather than replaying the
/// stream's older events as if nothing came between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_across_a_lapsed_watch_says_gap() {
    let ts = TestStore::redis().await;
    let server = ts.server.as_ref().unwrap();
    let q = JobQueue::new(&ts.store, "lapse").unwrap();
    let mut feed = q.events(None).await.unwrap();
    q.push("x", &with_id("a", 5)).await.unwrap();
    let since = take(&mut feed, 1).await[0].id;
    drop(feed);
    // The mark runs out (as 30 s after the last watcher left).
    server.command(&["HSET", "tollgate:jobs:{lapse}:m", "v", "0"]);
    q.push("x", &with_id("b", 5)).await.unwrap();
    q.push("x", &with_id("c", 5)).await.unwrap();
    let mut resumed = q.events(Some(since)).await.unwrap();
    if !resumed.gap() {
        let got = take(&mut resumed, 2).await;
        assert_eq!(
            kinds(&got),
            [
                (JobEventKind::Pushed, Some("b")),
                (JobEventKind::Pushed, Some("c"))
            ],
            "no gap said, so nothing may be missing"
        );
    }
}
