//! What happens when Redis goes away and comes back, and what a gate leaves
//! behind in Redis.

mod support;

use std::time::{Duration, Instant};

use support::RedisServer;
use tollgate::{Gate, GateOptions, Lock, Store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_while_holding_and_waiting() {
    let mut server = RedisServer::start();
    let store = Store::redis(&server.url()).await.expect("connect");
    let options = GateOptions {
        ttl: Duration::from_secs(2),
        heartbeat: Duration::from_secs(3),
        auto_renew: true,
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

fn keys(server: &RedisServer) -> Vec<String> {
    match server.command(&["KEYS", "*"]) {
        redis::Value::Array(v) => v
            .into_iter()
            .map(|k| match k {
                redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
                other => format!("{other:?}"),
            })
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
    let options = GateOptions {
        ttl: Duration::from_millis(200),
        heartbeat: Duration::from_millis(200),
        ..GateOptions::default()
    };
    let gate = Gate::new(&store, "crash", Some(1), options).expect("gate");
    // Holders and waiters that vanish: enter, never come back.
    gate.enter(1, false).await.expect("enter");
    gate.enter(1, true).await.expect("queue");
    gate.enter(1, true).await.expect("queue");
    let mut names = keys(&server);
    names.sort();
    assert_eq!(names.len(), 4, "{names:?}");
    // Every key but the meta hash carries a TTL past its last deadline
    // (200 ms) by at most a margin and a chunk (1 s + 10 s), so a gate
    // whose users all vanished cleans up by itself.
    for key in &names {
        let pttl = match server.command(&["PTTL", key]) {
            redis::Value::Int(n) => n,
            other => panic!("PTTL answered {other:?}"),
        };
        if key.ends_with(":m") {
            assert_eq!(pttl, -1, "the meta hash keeps the fence");
        } else {
            assert!(pttl > 200 && pttl <= 11_200, "{key} has PTTL {pttl}");
        }
    }
    // Long before that, the next operation sees through the leftovers.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let s = gate.stats().await.expect("stats");
    assert_eq!((s.holders, s.waiting, s.expiries), (0, 0, 1));
    assert_eq!(keys(&server), vec!["tollgate:gate:{crash}:m".to_owned()]);
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
