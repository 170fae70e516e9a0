//! State per name stays bounded: reads never create it, and (on the
//! embedded store) a name's state is dropped once it is idle and empty.

mod support;

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use support::{RedisServer, TestStore};
use tollgate::{
    Entered, ErrorKind, Gate, GateOptions, JobQueue, Left, Limit, ManualClock, MemoryFootprint,
    MemoryOptions, PushOptions, Rate, RateLimiter, RedisConfig, Store,
};

fn opts() -> GateOptions {
    GateOptions {
        ttl: Duration::from_secs(30),
        heartbeat: Duration::from_secs(10),
        auto_renew: false,
        fair: true,
        max_hold: None,
    }
}

/// Every read of gate `name` and queue `name`, and the writes that find
/// nothing to change.
async fn read_everything(store: &Store, name: &str) {
    let g = Gate::new(store, name, None, opts()).unwrap();
    let stats = g.stats().await.unwrap();
    assert_eq!((stats.capacity, stats.holders, stats.fence), (None, 0, 0));
    assert!(matches!(
        g.status("nosuchticket").await.unwrap(),
        tollgate::TicketStatus::Gone
    ));
    assert!(g.holders(10).await.unwrap().is_empty());
    assert_eq!(g.watch_state(0).await.unwrap().epoch, None);
    assert_eq!(
        g.renew("nosuchtoken", Duration::from_secs(1))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::LeaseLost
    );
    assert_eq!(g.leave("nosuchtoken").await.unwrap(), Left::Unknown);
    assert_eq!(
        g.end("nosuchtoken", Duration::from_secs(1)).await.unwrap(),
        Left::Unknown
    );
    // No capacity named and none stored: refused, and nothing kept.
    assert_eq!(g.enter(1, true).await.unwrap_err().kind(), ErrorKind::NoCapacity);
    g.resume().await.unwrap();
    g.set_admission_interval(None).await.unwrap();

    let q = JobQueue::new(store, name).unwrap();
    assert_eq!(q.stats().await.unwrap().ready, 0);
    assert!(q.dead(10).await.unwrap().is_empty());
    assert!(q.completed(10).await.unwrap().is_empty());
    assert!(q.claim().await.unwrap().is_none());
    assert!(q.ack("nosuchjob", 7).await.is_err());
    q.cancel("nosuchjob").await.unwrap();
    let sharded = JobQueue::partitioned(store, &format!("{name}-s"), 4).unwrap();
    assert_eq!(sharded.stats().await.unwrap().ready, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_leave_the_embedded_store_empty() {
    let ts = TestStore::memory();
    for i in 0..100_000 {
        let g = Gate::new(&ts.store, &format!("stats-{i}"), None, opts()).unwrap();
        g.stats().await.unwrap();
    }
    for i in 0..1_000 {
        read_everything(&ts.store, &format!("all-{i}")).await;
    }
    assert_eq!(ts.store.memory_footprint(), Some(MemoryFootprint::default()));
}

async fn assert_no_keys(server: &RedisServer) {
    assert_eq!(server.command(&["DBSIZE"]), ::redis::Value::Int(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_write_nothing_to_redis() {
    let ts = TestStore::redis().await;
    let server = ts.server.as_ref().unwrap();
    for chunk in (0..10_000).collect::<Vec<_>>().chunks(500) {
        join_all(chunk.iter().map(|i| {
            let g = Gate::new(&ts.store, &format!("stats-{i}"), None, opts()).unwrap();
            async move { g.stats().await.unwrap() }
        }))
        .await;
    }
    for chunk in (0..200).collect::<Vec<_>>().chunks(50) {
        join_all(chunk.iter().map(|i| {
            let name = format!("all-{i}");
            let store = &ts.store;
            async move { read_everything(store, &name).await }
        }))
        .await;
    }
    assert_no_keys(server).await;
}

/// An embedded store on a hand-moved clock that drops idle state after
/// `idle`.
fn memory_idle(idle: Duration) -> (Store, ManualClock) {
    let clock = ManualClock::default();
    let store = Store::memory_with(MemoryOptions {
        idle,
        clock: Arc::new(clock.clone()),
    })
    .expect("valid options");
    (store, clock)
}

/// Runs operations of every kind (they sweep as they go) until the store
/// holds nothing but the probe's own rate-limit key, or `max` rounds.
async fn sweep_until_empty(store: &Store, max: usize) -> MemoryFootprint {
    let gate = Gate::new(store, "probe", None, opts()).unwrap();
    let queue = JobQueue::new(store, "probe").unwrap();
    let rate = Limit::gcra(Rate::per_second(1).unwrap(), 1_000_000).unwrap();
    let limiter = RateLimiter::new(store, "probe", rate).unwrap();
    let swept = MemoryFootprint {
        limit_keys: 1,
        ..MemoryFootprint::default()
    };
    for _ in 0..max {
        if store.memory_footprint() == Some(swept) {
            break;
        }
        gate.stats().await.unwrap();
        queue.stats().await.unwrap();
        limiter.check("probe", 1).await.unwrap();
    }
    let mut left = store.memory_footprint().unwrap();
    left.limit_keys -= 1;
    left
}

#[tokio::test]
async fn memory_options_are_checked() {
    for idle in [Duration::ZERO, Duration::from_secs(31 * 24 * 3600)] {
        let e = Store::memory_with(MemoryOptions {
            idle,
            ..MemoryOptions::default()
        })
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
    }
    let e = Store::connect(RedisConfig {
        idle: Duration::from_millis(10),
        ..RedisConfig::new("redis://127.0.0.1:1")
    })
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
}

#[tokio::test]
async fn an_idle_gate_is_dropped_and_comes_back_anew() {
    let minute = Duration::from_secs(60);
    let (store, clock) = memory_idle(minute);
    let g = Gate::new(&store, "a", Some(2), opts()).unwrap();
    let Entered::Granted(first) = g.enter(1, false).await.unwrap() else {
        panic!("granted")
    };
    g.leave(&first.token).await.unwrap();
    let epoch = g.watch_state(0).await.unwrap().epoch;
    assert!(epoch.is_some());

    clock.advance(Duration::from_secs(40));
    // Reads are not activity: a metrics scraper does not keep it.
    g.stats().await.unwrap();
    g.holders(10).await.unwrap();
    g.status("nosuchticket").await.unwrap();
    assert_eq!(
        sweep_until_empty(&store, 100).await.gates,
        1,
        "not idle long enough"
    );
    clock.advance(Duration::from_secs(21));
    assert_eq!(sweep_until_empty(&store, 100).await.gates, 0);
    let w = g.watch_state(0).await.unwrap();
    assert_eq!((w.epoch, w.capacity), (None, None));

    let Entered::Granted(again) = g.enter(1, false).await.unwrap() else {
        panic!("granted")
    };
    assert!(again.fence > first.fence);
    let w = g.watch_state(0).await.unwrap();
    assert!(w.epoch.is_some() && w.epoch != epoch);
}

#[tokio::test]
async fn what_a_gate_holds_keeps_it() {
    let minute = Duration::from_secs(60);
    let (store, clock) = memory_idle(minute);
    // A lease of 5 minutes, a ticket, a revocation kept 3 minutes.
    let long = GateOptions {
        ttl: Duration::from_secs(300),
        heartbeat: Duration::from_secs(300),
        auto_renew: false,
        fair: true,
        max_hold: None,
    };
    let held = Gate::new(&store, "held", Some(1), long.clone()).unwrap();
    held.enter(1, false).await.unwrap();
    let line = Gate::new(&store, "line", Some(1), long).unwrap();
    line.enter(1, false).await.unwrap();
    line.enter(1, true).await.unwrap();
    let ended = Gate::new(&store, "ended", Some(1), opts()).unwrap();
    let Entered::Granted(g) = ended.enter(1, false).await.unwrap() else {
        panic!("granted")
    };
    ended.end(&g.token, Duration::from_secs(180)).await.unwrap();

    clock.advance(Duration::from_secs(200));
    assert_eq!(sweep_until_empty(&store, 1000).await.gates, 3);
    clock.advance(Duration::from_secs(50));
    // The revocation ended at 180 s: quiet for a minute at 240 s.
    assert_eq!(sweep_until_empty(&store, 1000).await.gates, 2);
    clock.advance(Duration::from_secs(120));
    assert_eq!(sweep_until_empty(&store, 1000).await.gates, 0);
}

#[tokio::test]
async fn fences_grow_across_dropped_state() {
    let (store, clock) = memory_idle(Duration::from_millis(1));
    let g = Gate::new(&store, "fast", Some(1), opts()).unwrap();
    let mut last = 0;
    // More grants in one millisecond than the clock's 1,000 fences.
    for _ in 0..2_000 {
        let Entered::Granted(l) = g.enter(1, false).await.unwrap() else {
            panic!("granted")
        };
        g.leave(&l.token).await.unwrap();
        last = l.fence;
    }
    clock.advance(Duration::from_millis(2));
    assert_eq!(sweep_until_empty(&store, 100).await.gates, 0);
    let Entered::Granted(l) = g.enter(1, false).await.unwrap() else {
        panic!("granted")
    };
    assert!(l.fence > last, "{} after {last}", l.fence);
}

#[tokio::test]
async fn a_flood_of_names_is_dropped_once_idle() {
    let minute = Duration::from_secs(60);
    let (store, clock) = memory_idle(minute);
    for i in 0..100_000 {
        let g = Gate::new(&store, &format!("visitor-{i}"), Some(1), opts()).unwrap();
        let Entered::Granted(l) = g.enter(1, false).await.unwrap() else {
            panic!("granted")
        };
        g.leave(&l.token).await.unwrap();
    }
    let rate = Limit::gcra(Rate::per_second(10).unwrap(), 10).unwrap();
    let limiter = RateLimiter::new(&store, "api", rate).unwrap();
    for i in 0..20_000 {
        let q = JobQueue::new(&store, &format!("q-{i}")).unwrap();
        q.push(b"x", &PushOptions::default()).await.unwrap();
        let job = q.claim().await.unwrap().expect("a job");
        q.ack(&job.id, job.fence).await.unwrap();
        limiter.check(&format!("client-{i}"), 1).await.unwrap();
    }
    assert_eq!(
        store.memory_footprint().unwrap(),
        MemoryFootprint {
            gates: 100_000,
            queues: 20_000,
            limit_keys: 20_000
        }
    );
    clock.advance(Duration::from_secs(61));
    // Operations sweep as they go: a few due names each.
    assert_eq!(
        sweep_until_empty(&store, 100_000).await,
        MemoryFootprint::default()
    );
}

/// A redis-server and a store on it whose idle period is a second.
async fn redis_idle_1s() -> (RedisServer, Store) {
    let server = RedisServer::start();
    let store = Store::connect(RedisConfig {
        idle: Duration::from_secs(1),
        ..RedisConfig::new(server.url())
    })
    .await
    .unwrap();
    (server, store)
}

/// On Redis every key of an idle gate expires: the meta hash lives the
/// idle period past the last deadline, and is created anew (a new epoch)
/// by the next write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_of_an_idle_gate_expires_on_redis() {
    let (server, store) = redis_idle_1s().await;
    let ttl = Duration::from_secs(3);
    let o = GateOptions {
        ttl,
        heartbeat: ttl,
        auto_renew: false,
        fair: true,
        max_hold: None,
    };
    let g = Gate::new(&store, "idle", Some(1), o).unwrap();
    let pttl = |key: &str| match server.command(&["PTTL", key]) {
        ::redis::Value::Int(n) => n,
        other => panic!("PTTL answered {other:?}"),
    };
    // Through the fast path and the general one.
    for labelled in [false, true] {
        let entered = if labelled {
            g.enter_as(1, false, Some("me")).await.unwrap()
        } else {
            g.enter(1, false).await.unwrap()
        };
        let Entered::Granted(l) = entered else {
            panic!("granted")
        };
        let ticket = g.enter(1, true).await.unwrap();
        let meta = pttl("tollgate:gate:{idle}:m");
        assert!(
            meta >= 3_000 + 1_000,
            "the meta hash must outlive the lease by the idle period: {meta}"
        );
        for key in ["h", "q", "p"] {
            let t = pttl(&format!("tollgate:gate:{{idle}}:{key}"));
            assert!(t == -2 || (t > 0 && t < meta), "{key}: {t} vs {meta}");
        }
        g.leave(&l.token).await.unwrap();
        if let Entered::Queued { ticket, .. } = ticket {
            g.leave(&ticket).await.unwrap();
        }
    }
    let epoch = g.watch_state(0).await.unwrap().epoch;
    let start = std::time::Instant::now();
    while server.command(&["DBSIZE"]) != ::redis::Value::Int(0) {
        assert!(start.elapsed() < Duration::from_secs(40), "keys left behind");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(g.watch_state(0).await.unwrap().epoch, None);
    g.enter(1, false).await.unwrap();
    let again = g.watch_state(0).await.unwrap().epoch;
    assert!(again.is_some() && again != epoch);
}

/// Every key of `server` with its PTTL (-1: none).
fn keys_and_ttls(server: &RedisServer) -> Vec<(String, i64)> {
    let ::redis::Value::Array(keys) = server.command(&["KEYS", "*"]) else {
        panic!("KEYS")
    };
    keys.iter()
        .map(|k| {
            let ::redis::Value::BulkString(k) = k else {
                panic!("{k:?}")
            };
            let k = String::from_utf8_lossy(k).into_owned();
            let ::redis::Value::Int(t) = server.command(&["PTTL", &k]) else {
                panic!("PTTL")
            };
            (k, t)
        })
        .collect()
}

/// On Redis, watching queues (as `GET /v1/queues/{q}/events` does with a
/// read token) writes no key that outlives the watch, whether the queue
/// exists or not (issue 35: 2,000 streams left 1,987 meta hashes forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watching_queues_leaves_no_lasting_key_on_redis() {
    let (server, store) = redis_idle_1s().await;
    let feeds = join_all((0..200).map(|i| {
        let store = store.clone();
        async move {
            let q = JobQueue::new(&store, &format!("ro-{i}")).unwrap();
            q.events(None).await.unwrap()
        }
    }))
    .await;
    // The pollers mark the watched queues.
    let start = std::time::Instant::now();
    while keys_and_ttls(&server).len() < 200 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the watches were not marked"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(feeds);
    for (key, ttl) in keys_and_ttls(&server) {
        assert!(ttl > 0, "{key} has no expiry ({ttl})");
    }
    for i in 0..200 {
        let q = JobQueue::new(&store, &format!("ro-{i}")).unwrap();
        assert!(!q.exists().await.unwrap());
    }
}

/// On Redis a queue that held jobs and was drained leaves no key once
/// idle, as the embedded store drops it; a paused one is kept while
/// paused; a watched one that gets a job lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_queue_leaves_no_key_on_redis() {
    let (server, store) = redis_idle_1s().await;
    for i in 0..50 {
        let q = JobQueue::new(&store, &format!("drained-{i}")).unwrap();
        q.push("x", &PushOptions::default()).await.unwrap();
        q.push("y", &PushOptions::default()).await.unwrap();
        let job = q.claim().await.unwrap().unwrap();
        // An ack on its own, then a claim that finds the rest.
        q.ack(&job.id, job.fence).await.unwrap();
        let job = q.claim().await.unwrap().unwrap();
        q.ack(&job.id, job.fence).await.unwrap();
    }
    // Through a sharded handle of one partition, as the server pushes:
    // its layout of one does not keep the queue.
    let sharded = JobQueue::partitioned(&store, "sharded", 1).unwrap();
    sharded.push("x", &PushOptions::default()).await.unwrap();
    let job = sharded.claim().await.unwrap().unwrap();
    sharded.ack(&job.id, job.fence).await.unwrap();
    assert!(sharded.claim().await.unwrap().is_none());
    let cancelled = JobQueue::new(&store, "cancelled").unwrap();
    let id = cancelled.push("x", &PushOptions::default()).await.unwrap().id;
    assert_eq!(
        cancelled.cancel(&id).await.unwrap(),
        tollgate::Cancelled::Cancelled
    );
    let paused = JobQueue::new(&store, "paused").unwrap();
    paused.pause().await.unwrap();
    let resumed = JobQueue::new(&store, "resumed").unwrap();
    resumed.pause().await.unwrap();
    resumed.resume().await.unwrap();
    let kept = JobQueue::new(&store, "kept").unwrap();
    kept.push("x", &PushOptions::default()).await.unwrap();
    let start = std::time::Instant::now();
    loop {
        let left: Vec<String> = keys_and_ttls(&server).into_iter().map(|(k, _)| k).collect();
        if left
            .iter()
            .all(|k| k.contains("{paused}") || k.contains("{kept}"))
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "keys left behind: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for (key, ttl) in keys_and_ttls(&server) {
        assert_eq!(ttl, -1, "{key} of a queue that holds something must not expire");
    }
    assert!(paused.stats().await.unwrap().paused);
    assert_eq!(kept.stats().await.unwrap().ready, 1);
    assert!(
        !JobQueue::new(&store, "drained-0")
            .unwrap()
            .exists()
            .await
            .unwrap()
    );
}

/// A schedule's pushes keep their queue as a push does: a watch of the
/// queue before its first tick set its meta hash to expire (it held
/// nothing then); the tick's job clears that, so the queue's sequence
/// and counters stay while it holds jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_queue_keeps_what_its_schedule_pushes_on_redis() {
    let (server, store) = redis_idle_1s().await;
    let schedules = tollgate::Schedules::new(&store);
    let spec = tollgate::ScheduleSpec::new(tollgate::When::parse("every 1h").unwrap(), "sq");
    schedules.upsert("beat", &spec).await.unwrap();
    let q = JobQueue::new(&store, "sq").unwrap();
    let feed = q.events(None).await.unwrap();
    let meta = "tollgate:jobs:{sq}:m";
    let start = std::time::Instant::now();
    while !matches!(server.command(&["PTTL", meta]), ::redis::Value::Int(t) if t > 0) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the watch was not marked"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    schedules.trigger("beat").await.unwrap().expect("triggered");
    drop(feed);
    assert_eq!(
        server.command(&["PTTL", meta]),
        ::redis::Value::Int(-1),
        "m is kept"
    );
    assert_eq!(q.stats().await.unwrap().ready, 1);
}

/// The hashes claims and acks read and write many fields of (fences l,
/// attempts n, a fair queue's running counts u and lone ready jobs a) are
/// hash tables from their first field, never listpacks (searched field by
/// field: half the throughput at 500 jobs running); and they go with the
/// queue's last job, by ack, by a retry's ack and by death.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hashes_a_claim_reads_are_tables_and_go_with_the_last_job() {
    let (server, store) = redis_idle_1s().await;
    let q = JobQueue::new(&store, "fair").unwrap();
    for (id, group) in [("a1", "a"), ("a2", "a"), ("b1", "b"), ("c1", "c")] {
        let o = PushOptions {
            id: Some(id.into()),
            group: Some(group.into()),
            max_attempts: 2,
            ..PushOptions::default()
        };
        q.push("x", &o).await.unwrap();
    }
    let running = q.claim_many(2).await.unwrap();
    assert_eq!(running.len(), 2);
    let base = "tollgate:jobs:{fair}";
    for key in ["l", "n", "u", "a"] {
        let encoding = server.command(&["OBJECT", "ENCODING", &format!("{base}:{key}")]);
        assert_eq!(
            encoding,
            ::redis::Value::BulkString(b"hashtable".to_vec()),
            "{key}"
        );
    }
    // One retried then acked, c1 dead after its two attempts, the rest
    // acked.
    let now = tollgate::Retry::After(Duration::ZERO);
    q.nack(&running[0].id, running[0].fence, now).await.unwrap();
    q.ack(&running[1].id, running[1].fence).await.unwrap();
    while let Some(job) = q.claim().await.unwrap() {
        if job.id == "c1" {
            q.nack(&job.id, job.fence, now).await.unwrap();
        } else {
            q.ack(&job.id, job.fence).await.unwrap();
        }
    }
    assert_eq!(q.stats().await.unwrap().dead, 1);
    assert_eq!(q.purge(None).await.unwrap(), 1);
    let start = std::time::Instant::now();
    while !keys_and_ttls(&server).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "keys left behind: {:?}",
            keys_and_ttls(&server)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
