//! What happens when Redis goes away and comes back, and what a gate leaves
//! behind in Redis.

mod support;

use std::time::{Duration, Instant};

use support::{RedisCluster, RedisServer, SentinelSet};
use tollgate::{ErrorKind, Gate, GateOptions, JobQueue, Lock, PushOptions, RedisConfig, Store};

/// A store on `server` whose calls fail after `timeout`.
async fn store_answering_within(server: &RedisServer, timeout: Duration) -> Store {
    Store::connect(RedisConfig {
        response_timeout: timeout,
        ..RedisConfig::new(server.url())
    })
    .await
    .expect("connect")
}

/// Continues a stopped redis-server when dropped, so a failing test does
/// not leave it frozen.
struct Frozen<'a>(&'a RedisServer);

impl<'a> Frozen<'a> {
    fn freeze(server: &'a RedisServer) -> Frozen<'a> {
        nix::sys::signal::kill(server.pid(), nix::sys::signal::Signal::SIGSTOP).expect("stop");
        Frozen(server)
    }
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(self.0.pid(), nix::sys::signal::Signal::SIGCONT);
    }
}

/// With Redis frozen (SIGSTOP: connections stay open, nothing answers),
/// every operation fails as unavailable within the response timeout (and
/// a small margin), one call after another: no retry, reconnect or second
/// request inside one call waits a second timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_fails_each_call_within_the_timeout() {
    let server = RedisServer::start();
    let timeout = Duration::from_secs(2);
    let store = store_answering_within(&server, timeout).await;
    let gate = Gate::new(&store, "frozen", Some(1), GateOptions::default()).expect("gate");
    let queue = JobQueue::new(&store, "frozen").expect("queue");
    let sharded = JobQueue::partitioned(&store, "frozen-sharded", 2)
        .expect("queue")
        .recheck_every(Duration::from_millis(100))
        .expect("recheck");
    sharded.push("x", &PushOptions::default()).await.expect("push");
    let frozen = Frozen::freeze(&server);
    // Past the sharded handle's re-check interval: its next call re-checks.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let bound = timeout + Duration::from_secs(1);
    for round in 0..2 {
        let started = Instant::now();
        let e = sharded
            .push("y", &PushOptions::default())
            .await
            .expect_err("frozen");
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
        assert!(
            started.elapsed() < bound,
            "round {round}: sharded push took {:?}",
            started.elapsed()
        );
        let started = Instant::now();
        let e = queue
            .push("y", &PushOptions::default())
            .await
            .expect_err("frozen");
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
        assert!(
            started.elapsed() < bound,
            "round {round}: push took {:?}",
            started.elapsed()
        );
        let started = Instant::now();
        let e = gate.enter(1, true).await.expect_err("frozen");
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
        assert!(
            started.elapsed() < bound,
            "round {round}: enter took {:?}",
            started.elapsed()
        );
        let started = Instant::now();
        store.ping().await.expect_err("frozen");
        assert!(
            started.elapsed() < bound,
            "round {round}: ping took {:?}",
            started.elapsed()
        );
    }
    drop(frozen);
    // And it works again once Redis does.
    let started = Instant::now();
    loop {
        match gate.enter(1, true).await {
            Ok(_) => break,
            Err(e) => assert!(started.elapsed() < Duration::from_secs(15), "not back: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A crowd of calls on one server goes out in pipelines (the store's
/// batching, store/redis/batch.rs): each call still gets its own answer,
/// its own server error (NOSCRIPT after a script flush, answered by a
/// reload and a retry of that call alone), and its own timeout while
/// Redis is frozen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_of_calls_is_answered_call_by_call() {
    const CROWD: usize = 200;
    let server = RedisServer::start();
    let timeout = Duration::from_secs(2);
    let store = store_answering_within(&server, timeout).await;
    let gates: Vec<Gate> = (0..CROWD)
        .map(|i| Gate::new(&store, &format!("crowd{i}"), Some(1), GateOptions::default()).expect("gate"))
        .collect();
    let enter_all = |permits: u32| {
        futures_util::future::join_all(
            gates
                .iter()
                .map(move |g| async move { g.enter(permits, false).await }),
        )
    };
    // Two rounds, the second after SCRIPT FLUSH: every call is granted its
    // own gate, each fence above the round before.
    let mut last = vec![0u64; CROWD];
    for round in 0..2 {
        if round == 1 {
            server.command(&["SCRIPT", "FLUSH"]);
        }
        let entered = enter_all(1).await;
        for (i, e) in entered.into_iter().enumerate() {
            match e.expect("enter") {
                tollgate::Entered::Granted(g) => {
                    assert!(g.fence > last[i], "round {round}, gate {i}");
                    last[i] = g.fence;
                    gates[i].leave(&g.token).await.expect("leave");
                }
                other => panic!("round {round}, gate {i}: {other:?}"),
            }
        }
    }
    // A caller's own mistake in the crowd is its own typed error.
    let asked = enter_all(2).await;
    assert!(
        asked
            .iter()
            .all(|e| e.as_ref().is_err_and(|e| e.kind() == ErrorKind::InvalidInput))
    );
    // Frozen: every call of the crowd fails within its timeout.
    let frozen = Frozen::freeze(&server);
    let started = Instant::now();
    let failed = enter_all(1).await;
    assert!(
        started.elapsed() < timeout + Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert!(
        failed
            .iter()
            .all(|e| e.as_ref().is_err_and(|e| e.kind() == ErrorKind::Unavailable))
    );
    drop(frozen);
    let started = Instant::now();
    loop {
        if enter_all(1).await.iter().all(|e| e.is_ok()) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(15), "not back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A mutex's lone lease (its own key, gate/lua/lone_absorb.lua) keeps its end in
/// its value, so stores configured with different idle periods (a rolling
/// change of the setting) agree on when it ends: held is held for all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_with_other_idle_periods_agree_on_a_lease() {
    let server = RedisServer::start();
    let with_idle = |secs| {
        Store::connect(RedisConfig {
            idle: Duration::from_secs(secs),
            ..RedisConfig::new(server.url())
        })
    };
    let (short, long) = (
        with_idle(2).await.expect("connect"),
        with_idle(600).await.expect("connect"),
    );
    let options = GateOptions {
        ttl: Duration::from_secs(30),
        auto_renew: false,
        ..GateOptions::default()
    };
    for (first, second) in [(&short, &long), (&long, &short)] {
        let a = Gate::new(first, "idle-mix", Some(1), options.clone()).expect("gate");
        let b = Gate::new(second, "idle-mix", Some(1), options.clone()).expect("gate");
        // The first grant makes the fence; the second is a lone lease.
        let warm = granted(a.enter(1, false).await.expect("enter"));
        a.leave(&warm.token).await.expect("leave");
        let held = granted(a.enter(1, false).await.expect("enter"));
        assert!(
            matches!(
                b.enter(1, false).await.expect("enter"),
                tollgate::Entered::Busy(_)
            ),
            "a lease held 30 s more looked ended to a store with another idle period"
        );
        assert_eq!(
            b.renew(&held.token, Duration::from_secs(30))
                .await
                .expect("renew"),
            Duration::from_secs(30)
        );
        a.leave(&held.token).await.expect("leave");
    }
}

/// A lone lease written by the build before the value kept its end as a
/// gap (`"<id> <end>"`, the end as server time) is still held when this
/// build reads it: nobody else is granted until it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_lease_in_the_older_form_is_still_held() {
    let server = RedisServer::start();
    let store = Store::redis(&server.url()).await.expect("connect");
    let options = GateOptions {
        ttl: Duration::from_secs(30),
        auto_renew: false,
        ..GateOptions::default()
    };
    let gate = Gate::new(&store, "old-form", Some(1), options).expect("gate");
    let warm = granted(gate.enter(1, false).await.expect("enter"));
    gate.leave(&warm.token).await.expect("leave");
    let int = |v: redis::Value| match v {
        redis::Value::Int(n) => n,
        other => panic!("expected an integer, got {other:?}"),
    };
    let m_until = int(server.command(&["PEXPIRETIME", "tollgate:gate:{old-form}:m"]));
    let now = match server.command(&["TIME"]) {
        redis::Value::Array(t) => match &t[0] {
            redis::Value::BulkString(b) => String::from_utf8_lossy(b).parse::<i64>().expect("secs") * 1000,
            other => panic!("TIME answered {other:?}"),
        },
        other => panic!("TIME answered {other:?}"),
    };
    let old = format!("oldholder {}", now + 30_000);
    server.command(&[
        "SET",
        "tollgate:gate:{old-form}:H",
        &old,
        "PXAT",
        &m_until.to_string(),
    ]);
    assert!(
        matches!(
            gate.enter(1, false).await.expect("enter"),
            tollgate::Entered::Busy(_)
        ),
        "a lease held 30 s more in the older form looked ended"
    );
    let holders = gate.holders(10).await.expect("holders");
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert!(holders[0].ttl > Duration::from_secs(25), "{holders:?}");
}

fn granted(e: tollgate::Entered) -> tollgate::Granted {
    match e {
        tollgate::Entered::Granted(g) => g,
        other => panic!("expected a grant, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_while_holding_and_waiting() {
    let mut server = RedisServer::start();
    let store = Store::redis(&server.url()).await.expect("connect");
    let options = GateOptions {
        ttl: Duration::from_secs(2),
        heartbeat: Duration::from_secs(3),
        auto_renew: true,
        fair: true,
        max_hold: None,
    };
    let lock = Lock::with_options(&store, "job", options).expect("lock");
    let held = lock
        .acquire(Duration::from_secs(5))
        .await
        .expect("store")
        .expect("free");
    let fence_before = held.fence();
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire(Duration::from_secs(30)).await })
    };
    while lock.stats().await.expect("stats").waiting == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    server.kill();
    // While it is down: clear, typed errors, no panic.
    let err = lock.try_acquire().await.expect_err("redis is down");
    assert!(err.is_unavailable(), "{err:?}");
    let waited = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .expect("the waiter gives up, it does not hang")
        .expect("task");
    assert!(waited.expect_err("the waiter sees the outage").is_unavailable());

    // Back, but empty (no persistence): the holder's renewal finds its lease
    // gone and reports the loss instead of quietly re-acquiring.
    server.restart();
    tokio::time::timeout(Duration::from_secs(10), held.lost())
        .await
        .expect("lost() fires");
    let deadline = Instant::now() + Duration::from_secs(10);
    let after = loop {
        match lock.try_acquire().await {
            Ok(Some(g)) => break g,
            Ok(None) => panic!("nobody should hold the lock on an empty server"),
            Err(e) => {
                assert!(e.is_unavailable(), "{e:?}");
                assert!(Instant::now() < deadline, "no recovery after restart: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    // Fences are seeded from server time, so they still grow after the
    // data was lost.
    assert!(
        after.fence() > fence_before,
        "{} after {}",
        after.fence(),
        fence_before
    );
    after.release().await.expect("release");
    assert!(held.release().await.expect_err("was lost").is_lease_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_and_malformed_urls_are_typed_errors() {
    let e = Store::redis("redis://127.0.0.1:1")
        .await
        .expect_err("nothing listens on port 1");
    assert!(e.is_unavailable(), "{e:?}");
    for bad in [
        "",
        "localhost:6379",
        "http://127.0.0.1:6379",
        "redis://",
        "redis://host:notaport",
    ] {
        let e = Store::redis(bad).await.expect_err(bad);
        assert!(e.is_invalid_input(), "{bad:?}: {e:?}");
    }
}

/// Set-up mistakes that no retry fixes come back as `Misconfigured`, with
/// the password kept out of the message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_up_mistakes_are_misconfigured_not_unavailable() {
    let server = RedisServer::start();
    let port = server.port;
    server.command(&[
        "ACL",
        "SETUSER",
        "app",
        "on",
        ">right-secret",
        "~*",
        "&*",
        "+@all",
    ]);
    // A user whose ACL does not allow scripts.
    server.command(&[
        "ACL",
        "SETUSER",
        "reader",
        "on",
        ">ro-secret",
        "~*",
        "+@read",
        "+ping",
        "+info",
        "+select",
    ]);
    let store = Store::redis(&format!("redis://app:right-secret@127.0.0.1:{port}"))
        .await
        .expect("the right password");
    Lock::new(&store, "x")
        .unwrap()
        .try_acquire()
        .await
        .expect("the app user may take locks");
    for url in [
        format!("redis://app:wrong-secret@127.0.0.1:{port}"),
        format!("redis://nobody:wrong-secret@127.0.0.1:{port}"),
    ] {
        let e = Store::redis(&url).await.expect_err("a wrong password");
        assert_eq!(e.kind(), ErrorKind::Misconfigured, "{url}: {e}");
        assert!(
            !e.to_string().contains("wrong-secret"),
            "the password leaked: {e}"
        );
    }
    let store = Store::redis(&format!("redis://reader:ro-secret@127.0.0.1:{port}"))
        .await
        .expect("the reader may connect");
    let e = Lock::new(&store, "x")
        .unwrap()
        .try_acquire()
        .await
        .expect_err("no EVALSHA for this user");
    assert_eq!(e.kind(), ErrorKind::Misconfigured, "{e}");
    // A limiter that fails open does so on this too, rather than erroring.
    let limit = tollgate::Limit::gcra(tollgate::Rate::per_second(10).unwrap(), 10).unwrap();
    let open = tollgate::RateLimiter::new(&store, "api", limit)
        .unwrap()
        .on_store_error(tollgate::OnStoreError::Open);
    let d = open.check("k", 1).await.expect("a degraded decision");
    assert!(d.allowed && d.degraded, "{d:?}");
    // A hardened user without INFO (`-@dangerous`) connects and works: the
    // cluster check just has no verdict.
    server.command(&[
        "ACL",
        "SETUSER",
        "hardened",
        "on",
        ">hd-secret",
        "~*",
        "&*",
        "+@all",
        "-@dangerous",
    ]);
    let store = Store::redis(&format!("redis://hardened:hd-secret@127.0.0.1:{port}"))
        .await
        .expect("a user without INFO may connect");
    Lock::new(&store, "y")
        .unwrap()
        .try_acquire()
        .await
        .expect("and take locks")
        .expect("free");
    // The default user gets a password: a URL without one is refused.
    server.command(&["ACL", "SETUSER", "default", "resetpass", ">def-secret"]);
    let e = Store::redis(&format!("redis://127.0.0.1:{port}"))
        .await
        .expect_err("no password given");
    assert_eq!(e.kind(), ErrorKind::Misconfigured, "{e}");

    // A cluster node named by a plain URL.
    let cluster = RedisCluster::start(3, 0);
    let e = Store::redis(&format!("redis://127.0.0.1:{}", cluster.nodes[0].port))
        .await
        .expect_err("a plain URL for a cluster node");
    assert_eq!(e.kind(), ErrorKind::Misconfigured, "{e}");
    assert!(e.to_string().contains("redis+cluster://"), "{e}");
}

/// A sharded queue on a cluster with one master down: the batch calls
/// answer per job, so the jobs of the partitions still up go through and
/// the caller learns exactly which did not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_batches_report_each_partition_when_a_master_is_down() {
    let mut cluster = RedisCluster::start(3, 0);
    for node in &cluster.nodes {
        node.command(&["CONFIG", "SET", "cluster-require-full-coverage", "no"]);
    }
    let store = Store::redis(&cluster.url()).await.expect("cluster store");
    let q = tollgate::JobQueue::partitioned(&store, "pf", 6).expect("queue");
    q.verify().await.expect("layout");
    // Which master holds each partition's slot.
    let masters: Vec<usize> = (0..6)
        .map(|p| {
            let part = q.partition_name(p).expect("partition");
            cluster.master_of(&format!("tollgate:jobs:{{{part}}}"))
        })
        .collect();
    let doomed = masters[0];
    let jobs: Vec<(String, PushOptions)> = (0..60)
        .map(|i| {
            let id = format!("job-{i}");
            (
                id.clone(),
                PushOptions {
                    id: Some(id),
                    ..PushOptions::default()
                },
            )
        })
        .collect();
    let first = q.push_each(&jobs[..30]).await.expect("batch");
    assert!(first.iter().all(Result::is_ok), "all up: all pushed");
    let claimed = q.claim_many(30).await.expect("claim");
    assert_eq!(claimed.len(), 30);

    cluster.nodes[doomed].kill();
    let down = |id: &str| masters[q.partition_of(id)] == doomed;
    let answers = q.push_each(&jobs[30..]).await.expect("a valid batch");
    let mut failed = 0;
    for ((id, _), answer) in jobs[30..].iter().zip(&answers) {
        match answer {
            Ok(p) => {
                assert!(!down(id), "{id} went to a dead master");
                assert_eq!(&p.id, id);
            }
            Err(f) => {
                assert!(down(id), "{id}'s master is up, yet: {}", f.error);
                assert_eq!(&f.id, id);
                assert_eq!(f.error.kind(), ErrorKind::Unavailable, "{}", f.error);
                failed += 1;
            }
        }
    }
    let expected = jobs[30..].iter().filter(|(id, _)| down(id)).count();
    assert!(
        expected > 0 && expected < 30,
        "the dead master held some partitions: {expected}"
    );
    assert_eq!(failed, expected);

    let acks: Vec<(&str, u64)> = claimed.iter().map(|j| (j.id.as_str(), j.fence)).collect();
    let acked = q.ack_each(&acks).await.expect("a valid ack batch");
    for (job, answer) in claimed.iter().zip(&acked) {
        match answer {
            Ok(flag) => assert!(*flag && !down(&job.id), "{}: {flag}", job.id),
            Err(e) => assert!(
                down(&job.id) && e.kind() == ErrorKind::Unavailable,
                "{}: {e}",
                job.id
            ),
        }
    }
    // The all-or-error form says that something failed.
    assert!(q.ack_many(&acks).await.is_err());
}

/// The keys of the gates (the registry of names, one set per kind for
/// listing, is left out: it is not a gate's).
fn keys(server: &RedisServer) -> Vec<String> {
    match server.command(&["KEYS", "*"]) {
        redis::Value::Array(v) => v
            .into_iter()
            .map(|k| match k {
                redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
                other => format!("{other:?}"),
            })
            .filter(|k| !k.contains(":registry:{names}:"))
            .collect(),
        other => panic!("KEYS answered {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_gate_keeps_one_small_key() {
    let server = RedisServer::start();
    let store = Store::redis(&server.url()).await.expect("connect");
    let gate = Gate::new(&store, "idle", Some(2), GateOptions::default()).expect("gate");
    let a = gate
        .acquire(2, Duration::from_secs(1))
        .await
        .expect("store")
        .expect("free");
    let b = {
        let gate = gate.clone();
        tokio::spawn(async move { gate.acquire(1, Duration::from_secs(10)).await })
    };
    while gate.stats().await.expect("stats").waiting == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(keys(&server).len() > 1);
    a.release().await.expect("release");
    b.await
        .expect("task")
        .expect("store")
        .expect("handed over")
        .release()
        .await
        .expect("release");
    let left = keys(&server);
    assert_eq!(
        left,
        vec!["tollgate:gate:{idle}:m".to_owned()],
        "only the meta hash stays"
    );
    // And only for the idle period (10 minutes, and a quarter more at most).
    let pttl = match server.command(&["PTTL", &left[0]]) {
        redis::Value::Int(n) => n,
        other => panic!("PTTL answered {other:?}"),
    };
    assert!(pttl > 0 && pttl <= 60_000 + 750_000, "PTTL {pttl}");
    let bytes = match server.command(&["MEMORY", "USAGE", &left[0]]) {
        redis::Value::Int(n) => n,
        other => panic!("MEMORY USAGE answered {other:?}"),
    };
    println!("idle gate: 1 key, {bytes} bytes");
    assert!(bytes < 256, "idle gate uses {bytes} bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_a_crashed_holder_expire_by_themselves() {
    let server = RedisServer::start();
    let store = Store::redis(&server.url()).await.expect("connect");
    // A gate of up to 8 keeps its holders inline in the meta hash; a
    // larger one in a sorted set (h).
    crashed_holders_leave(&server, &store, 1, &["m", "p", "q"]).await;
    crashed_holders_leave(&server, &store, 9, &["h", "m", "p", "q"]).await;
}

async fn crashed_holders_leave(server: &RedisServer, store: &Store, capacity: u32, expected: &[&str]) {
    let options = GateOptions {
        ttl: Duration::from_millis(200),
        heartbeat: Duration::from_millis(200),
        ..GateOptions::default()
    };
    let name = format!("crash{capacity}");
    let gate = Gate::new(store, &name, Some(capacity), options).expect("gate");
    // Holders and waiters that vanish: enter, never come back.
    for _ in 0..capacity {
        gate.enter(1, false).await.expect("enter");
    }
    gate.enter(1, true).await.expect("queue");
    gate.enter(1, true).await.expect("queue");
    let mut names = keys(server);
    names.sort();
    let want: Vec<String> = expected
        .iter()
        .map(|k| format!("tollgate:gate:{{{name}}}:{k}"))
        .collect();
    assert_eq!(names, want);
    // Every key but the meta hash carries a TTL past its last deadline
    // (200 ms) by at most a margin and a chunk (1 s + 10 s), and the meta
    // hash the idle period (10 min) past theirs, so a gate whose users all
    // vanished cleans up by itself.
    for key in &names {
        let pttl = match server.command(&["PTTL", key]) {
            redis::Value::Int(n) => n,
            other => panic!("PTTL answered {other:?}"),
        };
        if key.ends_with(":m") {
            assert!(
                pttl > 11_200 + 590_000 && pttl <= 11_200 + 750_000,
                "the meta hash has PTTL {pttl}"
            );
        } else {
            assert!(pttl > 200 && pttl <= 11_200, "{key} has PTTL {pttl}");
        }
    }
    // Long before that, the next operation sees through the leftovers.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let s = gate.stats().await.expect("stats");
    assert_eq!((s.holders, s.waiting, s.expiries), (0, 0, u64::from(capacity)));
    assert_eq!(keys(server), vec![format!("tollgate:gate:{{{name}}}:m")]);
    server.command(&["DEL", &format!("tollgate:gate:{{{name}}}:m")]);
}

fn memory_usage(server: &RedisServer, key: &str) -> i64 {
    match server.command(&["MEMORY", "USAGE", key, "SAMPLES", "0"]) {
        redis::Value::Int(n) => n,
        redis::Value::Nil => 0,
        other => panic!("MEMORY USAGE answered {other:?}"),
    }
}

/// Bytes of Redis memory per waiting ticket, from `MEMORY USAGE` of the
/// line's keys. Printed for docs/BENCHMARKS.md and held to the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_costs_at_most_200_bytes() {
    let server = RedisServer::start();
    let store = Store::redis(&server.url()).await.expect("connect");
    for waiters in [100usize, 1000, 10_000] {
        let name = format!("mem{waiters}");
        let gate = Gate::new(&store, &name, Some(1), GateOptions::default()).expect("gate");
        gate.enter(1, false).await.expect("holder");
        let base: i64 = ["q", "w", "p"]
            .iter()
            .map(|s| memory_usage(&server, &format!("tollgate:gate:{{{name}}}:{s}")))
            .sum();
        for _ in 0..waiters {
            gate.enter(1, true).await.expect("queue");
        }
        let total: i64 = ["q", "w", "p"]
            .iter()
            .map(|s| memory_usage(&server, &format!("tollgate:gate:{{{name}}}:{s}")))
            .sum();
        let per = (total - base) as f64 / waiters as f64;
        println!("waiters={waiters} bytes_per_waiter={per:.1}");
        assert!(per <= 200.0, "{per} bytes per waiter with {waiters} waiting");
    }
}

async fn lock_round_trip(url: &str) {
    let store = Store::redis(url).await.expect("connect");
    let lock = Lock::new(&store, "transport").expect("lock");
    let g = lock.try_acquire().await.expect("store").expect("free");
    assert!(lock.try_acquire().await.expect("store").is_none());
    g.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket_urls_work() {
    let server = RedisServer::start_unix();
    lock_round_trip(&server.socket_url()).await;
    lock_round_trip(&server.socket_url().replace("unix://", "redis+unix://")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_urls_work() {
    let server = RedisServer::start_tls();
    lock_round_trip(&server.url()).await;
    // Plain TCP to a TLS-only port fails clearly instead of hanging.
    let plain = format!("redis://127.0.0.1:{}", server.tls_port.expect("tls"));
    let mut config = tollgate::RedisConfig::new(plain);
    config.connect_timeout = Duration::from_secs(2);
    config.response_timeout = Duration::from_secs(2);
    let e = Store::connect(config).await.expect_err("not TLS");
    assert!(e.is_unavailable(), "{e:?}");
}

/// Redis Cluster, 3 masters with a replica each: the master that holds a
/// lock and a queue is killed. Operations fail as unavailable (typed, no
/// hang) until a replica is promoted, then go on without a restart. With a
/// durable handle (WAIT for 1 replica) nothing confirmed is lost: the lease
/// is still held, the pushed job is still there, and fences keep growing.
/// How long it took is printed; the bound checked here is loose (the node
/// timeout is 2 s), the benchmark reports the figure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_dies_and_a_replica_takes_over() {
    let mut cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 1))
        .await
        .expect("cluster");
    let plain = Store::redis(&cluster.url()).await.expect("connect");
    let store = plain.durable(1, Duration::from_secs(1)).await.expect("durable");
    let options = GateOptions {
        ttl: Duration::from_secs(30),
        heartbeat: Duration::from_secs(30),
        auto_renew: false,
        fair: true,
        max_hold: None,
    };
    let lock = Lock::with_options(&store, "failover", options.clone()).expect("lock");
    let held = lock.try_acquire().await.expect("confirmed").expect("free");
    let fence_before = held.fence();
    let queue = JobQueue::new(&store, "failover").expect("queue");
    queue
        .push("before", &PushOptions::default())
        .await
        .expect("confirmed push");

    let victim = cluster.master_of("tollgate:gate:{failover}:m");
    assert_eq!(
        victim,
        cluster.master_of("tollgate:jobs:{failover}:m"),
        "same tag, same slot"
    );
    // Meanwhile a producer on the plain handle (no WAIT) pushes as fast as
    // it can to a queue in the same slot: what the master acknowledged in
    // its last moments may not have reached the replica. That loss is
    // measured, not prevented.
    let fast = JobQueue::new(&plain, "failover").expect("queue");
    let acknowledged: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let producer = {
        let (fast, acknowledged) = (fast.clone(), acknowledged.clone());
        tokio::spawn(async move {
            for i in 0.. {
                let id = format!("fast-{i}");
                let options = PushOptions {
                    id: Some(id.clone()),
                    ..PushOptions::default()
                };
                match fast.push("x", &options).await {
                    Ok(_) => acknowledged.lock().unwrap().push(id),
                    Err(_) => return,
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.nodes[victim].kill();
    let killed = Instant::now();
    producer.await.expect("producer");
    let err = lock.try_acquire().await.expect_err("its master is down");
    assert!(err.is_unavailable(), "{err:?}");

    // Retry until the slot is served again. The promoted replica has no
    // replica of its own, so read through the plain handle.
    // Also note when the cluster itself names a new master for the slot,
    // to tell Redis's failover time from the client's.
    let plain_lock = Lock::with_options(&plain, "failover", options).expect("lock");
    let mut promoted_at = None;
    let back = loop {
        if promoted_at.is_none() && cluster.master_of("tollgate:gate:{failover}:m") != victim {
            promoted_at = Some(killed.elapsed());
        }
        match plain_lock.try_acquire().await {
            Ok(got) => break got,
            Err(e) => {
                assert!(e.is_unavailable(), "{e:?}");
                assert!(
                    killed.elapsed() < Duration::from_secs(30),
                    "no failover within 30 s: {e}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let unavailable = killed.elapsed();
    eprintln!(
        "gate operations were unavailable for {unavailable:?}; the cluster named a new master after \
         {promoted_at:?} (cluster-node-timeout {:?})",
        support::cluster_node_timeout()
    );
    assert!(back.is_none(), "the confirmed lease was lost in the failover");
    held.release()
        .await
        .expect_err("no replica is left to confirm the release");
    let again = plain_lock.try_acquire().await.expect("store").expect("released");
    assert!(again.fence() > fence_before, "fences keep growing");
    again.release().await.expect("release");
    let plain_queue = JobQueue::new(&plain, "failover").expect("queue");
    let job = plain_queue
        .claim()
        .await
        .expect("claim")
        .expect("the confirmed job survived");
    assert_eq!(job.payload, b"before");
    plain_queue.ack(&job.id, job.fence).await.expect("ack");
    // The unconfirmed pushes: how many of those the master acknowledged are
    // gone after the failover (a push of a lost id is Created again).
    let acknowledged = acknowledged.lock().unwrap().clone();
    let mut lost = 0;
    for id in acknowledged.iter().rev().take(2000) {
        let again = PushOptions {
            id: Some(id.clone()),
            ..PushOptions::default()
        };
        if plain_queue.push("x", &again).await.expect("push").result == tollgate::PushResult::Created {
            lost += 1;
        }
    }
    eprintln!(
        "without WAIT: {lost} of the last {} pushes the master acknowledged before it died were lost",
        acknowledged.len().min(2000)
    );
    assert!(unavailable < Duration::from_secs(15), "{unavailable:?}");
}

/// A durable handle waits for the replica after each change. With the
/// replica frozen, a grant is refused as `NotReplicated` and given back
/// (the lock stays free), and a push says so too; with it thawed, all is
/// confirmed again. The embedded store and bad settings are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_handles_wait_for_replicas() {
    let (master, replica) = RedisServer::start_with_replica().await;
    let plain = Store::redis(&master.url()).await.expect("connect");
    let store = plain
        .durable(1, Duration::from_millis(300))
        .await
        .expect("durable");
    let lock = Lock::new(&store, "durable").expect("lock");
    let held = lock.try_acquire().await.expect("confirmed").expect("free");
    held.release().await.expect("release");
    let queue = JobQueue::new(&store, "durable").expect("queue");
    queue
        .push("x", &PushOptions::default())
        .await
        .expect("confirmed push");

    // Freeze the replica: nothing is confirmed within the timeout.
    nix::sys::signal::kill(replica.pid(), nix::sys::signal::Signal::SIGSTOP).expect("stop");
    let started = Instant::now();
    let err = lock.try_acquire().await.expect_err("the replica is frozen");
    assert_eq!(err.kind(), ErrorKind::NotReplicated, "{err}");
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "WAIT waited its timeout"
    );
    let plain_lock = Lock::new(&plain, "durable").expect("lock");
    let stats = plain_lock.stats().await.expect("stats");
    assert_eq!(stats.used, 0, "the unconfirmed grant was given back");
    let err = queue
        .push("y", &PushOptions::default())
        .await
        .expect_err("not confirmed");
    assert_eq!(err.kind(), ErrorKind::NotReplicated, "{err}");
    assert_eq!(
        JobQueue::new(&plain, "durable")
            .expect("q")
            .stats()
            .await
            .expect("stats")
            .ready,
        2,
        "the push happened on the master all the same"
    );

    nix::sys::signal::kill(replica.pid(), nix::sys::signal::Signal::SIGCONT).expect("cont");
    let held = lock.try_acquire().await.expect("confirmed again").expect("free");
    held.release().await.expect("release");

    let memory = Store::memory();
    assert_eq!(
        memory
            .durable(1, Duration::from_secs(1))
            .await
            .expect_err("no replicas")
            .kind(),
        ErrorKind::InvalidInput
    );
    for (n, t) in [(0, 100), (1, 0), (101, 100), (1, 61_000)] {
        let err = plain
            .durable(n, Duration::from_millis(t))
            .await
            .expect_err("bad settings");
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{n} {t}");
    }
}

/// A Sentinel-managed master with one replica: the master is SIGKILLed.
/// Calls fail as unavailable until the Sentinel promotes the replica, then
/// go to it without a restart; with a durable handle the confirmed lease
/// and job survive; and a waiter that queued before the failover is handed
/// the lock after it (the subscription moved to the new master).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_is_followed() {
    let mut set = tokio::task::spawn_blocking(SentinelSet::start)
        .await
        .expect("set");
    let plain = Store::redis(&set.url()).await.expect("connect");
    let store = plain.durable(1, Duration::from_secs(1)).await.expect("durable");
    let options = GateOptions {
        ttl: Duration::from_secs(30),
        heartbeat: Duration::from_secs(30),
        auto_renew: false,
        fair: true,
        max_hold: None,
    };
    let lock = Lock::with_options(&store, "sentinel", options.clone()).expect("lock");
    let held = lock.try_acquire().await.expect("confirmed").expect("free");
    let queue = JobQueue::new(&store, "sentinel").expect("queue");
    queue
        .push("before", &PushOptions::default())
        .await
        .expect("confirmed push");
    let old_port = set.master.port;
    assert_eq!(set.sentinel.master_port(), Some(old_port));

    set.master.kill();
    let killed = Instant::now();
    let plain_lock = Lock::with_options(&plain, "sentinel", options).expect("lock");
    let back = loop {
        match plain_lock.try_acquire().await {
            Ok(got) => break got,
            Err(e) => {
                assert!(e.is_unavailable(), "{e:?}");
                assert!(
                    killed.elapsed() < Duration::from_secs(30),
                    "no failover within 30 s: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    eprintln!(
        "unavailable for {:?} (down-after-milliseconds 1000)",
        killed.elapsed()
    );
    assert_eq!(
        set.sentinel.master_port(),
        Some(set.replica.port),
        "the replica was promoted"
    );
    assert!(back.is_none(), "the confirmed lease was lost in the failover");

    // A waiter queues on the new master; the holder's release (through the
    // plain handle: no replica is left to confirm) hands it the lock.
    let waiter = {
        let plain_lock = plain_lock.clone();
        tokio::spawn(async move {
            let got = plain_lock.acquire(Duration::from_secs(10)).await;
            (got, Instant::now())
        })
    };
    while plain_lock.stats().await.expect("stats").waiting == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The durable handle follows the Sentinel on its own: wait until it
    // reaches the new master (it answers, or says no replica confirmed).
    loop {
        match lock.stats().await {
            Err(e) if e.is_unavailable() => tokio::time::sleep(Duration::from_millis(50)).await,
            _ => break,
        }
    }
    let released = Instant::now();
    let err = held.release().await.expect_err("not confirmed: no replica left");
    assert_eq!(err.kind(), ErrorKind::NotReplicated, "{err}");
    let (got, at) = waiter.await.expect("task");
    let got = got.expect("store").expect("handed the lock");
    assert!(
        at.duration_since(released) < Duration::from_millis(500),
        "woken by the hand-off on the new master, not by re-checking: {:?}",
        at.duration_since(released)
    );
    got.release().await.expect("release");
    let plain_queue = JobQueue::new(&plain, "sentinel").expect("queue");
    let job = plain_queue
        .claim()
        .await
        .expect("claim")
        .expect("the confirmed job survived");
    assert_eq!(job.payload, b"before");
}

/// A waiter dropped while its enter is still on the way (Redis frozen: the
/// command is sent, the answer not yet back) leaves the line once Redis
/// answers, rather than holding its place until its heartbeat runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_dropped_mid_call_leaves_the_line() {
    let server = RedisServer::start();
    let store = Store::redis(&server.url()).await.expect("connect");
    let lock = Lock::new(&store, "dropped-mid-call").expect("lock");
    let _held = lock
        .acquire(Duration::from_secs(1))
        .await
        .expect("store")
        .expect("free");
    let frozen = Frozen::freeze(&server);
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire(Duration::from_secs(30)).await })
    };
    // The enter is written to the frozen server; then the waiter goes.
    tokio::time::sleep(Duration::from_millis(200)).await;
    waiter.abort();
    let _ = waiter.await;
    drop(frozen);
    // The heartbeat is 10 s: well within it, the line is empty.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let waiting = lock.stats().await.expect("stats").waiting;
        if waiting == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the dropped waiter kept its place");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
