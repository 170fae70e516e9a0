//! Listing gates and queues (issue 18): the registry of names on the
//! memory store, a redis-server, a cluster (the registry in a slot of its
//! own) and Sentinel. Paging visits every name once, the prefix filters,
//! and a name whose state is gone is dropped while listing.

mod support;

use std::time::Duration;

use support::TestStore;
use tollgate::{ErrorKind, Gate, GateOptions, JobQueue, PushOptions, RedisConfig, Store};

/// Every gate name under `prefix`, a page of `limit` at a time.
async fn all_gates(store: &Store, prefix: &str, limit: usize) -> Vec<String> {
    let mut names = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store
            .list_gates(prefix, after.as_deref(), limit)
            .await
            .expect("list gates");
        assert!(page.items.len() <= limit);
        names.extend(page.items.into_iter().map(|g| g.name));
        match page.next {
            Some(next) => after = Some(next),
            None => return names,
        }
    }
}

async fn paging_visits_every_gate_once(ts: TestStore) {
    let store = &ts.store;
    let mut want = Vec::new();
    for i in 0..23 {
        let name = format!("pg-{i:02}");
        let gate = Gate::new(store, &name, Some(3), GateOptions::default()).expect("gate");
        gate.set_capacity(2 + i % 3).await.expect("capacity");
        want.push(name);
    }
    let other = Gate::new(store, "other", Some(1), GateOptions::default()).expect("gate");
    let entered = other.enter(1, true).await.expect("enter");
    assert!(matches!(entered, tollgate::Entered::Granted(_)));

    for limit in [1, 5, 23, 100] {
        assert_eq!(all_gates(store, "pg-", limit).await, want, "limit {limit}");
    }
    let mut everything = vec!["other".to_owned()];
    everything.extend(want.iter().cloned());
    assert_eq!(all_gates(store, "", 4).await, everything);

    let page = store.list_gates("oth", None, 10).await.expect("list");
    assert_eq!(page.next, None);
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.items[0].name, "other");
    assert_eq!(page.items[0].stats.capacity, Some(1));
    assert_eq!(page.items[0].stats.holders, 1);

    // A cursor before the prefix starts at the prefix; one past it, empty.
    let page = store.list_gates("pg-", Some("a"), 2).await.expect("list");
    assert_eq!(
        page.items.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(),
        ["pg-00", "pg-01"]
    );
    let page = store.list_gates("pg-", Some("pg-22"), 2).await.expect("list");
    assert!(page.items.is_empty());
    assert_eq!(page.next, None);

    for bad in [0, tollgate::MAX_PAGE + 1] {
        let e = store.list_gates("", None, bad).await.expect_err("bad limit");
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
    }
}

/// The URL of the Redis behind `ts` (`None` on memory).
fn redis_url(ts: &TestStore) -> Option<String> {
    match (&ts.server, &ts.cluster, &ts.sentinel) {
        (Some(s), _, _) => Some(s.url()),
        (_, Some(c), _) => Some(c.url()),
        (_, _, Some(s)) => Some(s.url()),
        _ => None,
    }
}

async fn a_gate_whose_state_expired_is_dropped(ts: TestStore) {
    // On Redis, a handle whose state goes after a second idle.
    let store = match redis_url(&ts) {
        Some(url) => Store::connect(RedisConfig {
            idle: Duration::from_secs(1),
            ..RedisConfig::new(&url)
        })
        .await
        .expect("connect"),
        None => ts.store.clone(),
    };
    let ghost = Gate::new(&store, "ghost", Some(2), GateOptions::default()).expect("gate");
    ghost.set_capacity(2).await.expect("capacity");
    assert_eq!(all_gates(&store, "", 10).await, ["ghost"]);
    match &ts.clock {
        Some(_) => {
            ts.advance(Duration::from_secs(3600)).await;
            store.sweep_idle(1000);
        }
        None => {
            // Other names registered meanwhile keep the registry (it goes
            // only after an idle period with no registration at all).
            for i in 0..5 {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let g = Gate::new(&store, &format!("z-{i}"), Some(1), GateOptions::default()).expect("gate");
                g.set_capacity(1).await.expect("capacity");
            }
        }
    }
    // Registered after the ghost's state went: the registry is kept.
    let real = Gate::new(&store, "real", Some(2), GateOptions::default()).expect("gate");
    real.set_capacity(2).await.expect("capacity");

    // On Redis a page of one meets the ghost's name first: it is left out
    // (the page may be empty), and the cursor goes on past it. (The
    // embedded store lists the names it holds state for: no ghost.)
    if store.kind() == "redis" {
        let page = store.list_gates("", None, 1).await.expect("list");
        assert!(page.items.is_empty(), "{page:?}");
        assert_eq!(page.next.as_deref(), Some("ghost"));
    }
    assert_eq!(
        all_gates(&store, "", 10).await.first().map(String::as_str),
        Some("real")
    );
    // Gone from the registry: a page of one now starts at the real one.
    let page = store.list_gates("", None, 1).await.expect("list");
    assert_eq!(page.items[0].name, "real");
    // A refusal registers nothing.
    let refused = Gate::new(&store, "refused", None, GateOptions::default()).expect("gate");
    let e = refused.enter(1, false).await.expect_err("no capacity");
    assert_eq!(e.kind(), ErrorKind::NoCapacity);
    assert_eq!(all_gates(&store, "re", 10).await, ["real"]);
}

async fn queues_are_listed_with_their_figures(ts: TestStore) {
    let store = &ts.store;
    let plain = JobQueue::new(store, "lq-plain").expect("queue");
    plain.push(b"a", &PushOptions::default()).await.expect("push");
    plain
        .push(
            b"b",
            &PushOptions {
                delay: Some(Duration::from_secs(60)),
                ..PushOptions::default()
            },
        )
        .await
        .expect("push");
    // A batch alone lists a sharded queue (and a single push does too).
    let batched = JobQueue::partitioned(store, "lq-batched", 2).expect("queue");
    batched
        .push_many(&[(b"y", PushOptions::default()), (b"z", PushOptions::default())])
        .await
        .expect("push");
    let sharded = JobQueue::partitioned(store, "lq-sharded", 4).expect("queue");
    for _ in 0..5 {
        sharded.push(b"x", &PushOptions::default()).await.expect("push");
    }
    sharded.pause().await.expect("pause");

    let mut names = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store.list_queues("lq-", after.as_deref(), 1).await.expect("list");
        names.extend(page.items);
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    // The partitions are not listed: each sharded queue is, once.
    assert_eq!(
        names.iter().map(|q| q.name.as_str()).collect::<Vec<_>>(),
        ["lq-batched", "lq-plain", "lq-sharded"]
    );
    assert_eq!((names[0].partitions, names[0].stats.ready), (2, 2));
    assert_eq!(
        (names[1].partitions, names[1].stats.ready, names[1].stats.delayed),
        (1, 1, 1)
    );
    assert!(!names[1].stats.paused);
    assert_eq!((names[2].partitions, names[2].stats.ready), (4, 5));
    assert!(names[2].stats.paused);
}

on_both_stores!(manual_clock:
    paging_visits_every_gate_once,
    a_gate_whose_state_expired_is_dropped,
    queues_are_listed_with_their_figures,
);

/// A queue whose state the idle sweep dropped leaves the listing (memory:
/// the idle period passes on the hand-moved clock).
#[tokio::test]
async fn an_idle_queue_is_dropped_from_the_listing() {
    let ts = TestStore::memory();
    let store = &ts.store;
    let q = JobQueue::new(store, "idle-q").expect("queue");
    q.push(b"a", &PushOptions::default()).await.expect("push");
    let job = q.claim().await.expect("claim").expect("a job");
    q.ack(&job.id, job.fence).await.expect("ack");
    assert_eq!(
        store.list_queues("", None, 10).await.expect("list").items.len(),
        1
    );
    ts.advance(Duration::from_secs(3600)).await;
    store.sweep_idle(1000);
    let page = store.list_queues("", None, 10).await.expect("list");
    assert!(page.items.is_empty(), "{page:?}");
}
