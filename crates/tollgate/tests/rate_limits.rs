//! Rate limiter conformance: the same assertions on the memory store (on a
//! hand-moved clock, so exact) and on a real redis-server (in real time,
//! with tolerances taken from measured durations).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use support::{RedisServer, TestStore};
use tollgate::{Algorithm, Decision, ErrorKind, Limit, OnStoreError, Rate, RateLimiter, Store};

fn gcra(count: u64, period: Duration, burst: u64) -> Limit {
    Limit::gcra(Rate::new(count, period).expect("rate"), burst).expect("limit")
}

fn limiter(ts: &TestStore, limit: Limit) -> RateLimiter {
    RateLimiter::new(&ts.store, "api", limit).expect("limiter")
}

async fn spend(l: &RateLimiter, key: &str, n: usize) -> Vec<Decision> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(l.check(key, 1).await.expect("decision"));
    }
    out
}

fn allowed(ds: &[Decision]) -> usize {
    ds.iter().filter(|d| d.allowed).count()
}

/// Waits (in real time) until the wall clock is `at` into a window of
/// `period`; Redis reads the same clock.
async fn align(period: Duration, at: Duration) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock");
    let into = Duration::from_micros((now.as_micros() % period.as_micros()) as u64);
    let wait = if into <= at { at - into } else { period - into + at };
    tokio::time::sleep(wait).await;
}

async fn gcra_gives_the_burst_then_the_rate(ts: TestStore) {
    let l = limiter(&ts, gcra(10, Duration::from_secs(1), 5));
    let ds = spend(&l, "k", 6).await;
    let remaining: Vec<u64> = ds.iter().map(|d| d.remaining).collect();
    assert_eq!(allowed(&ds), 5, "{ds:?}");
    assert_eq!(remaining, [4, 3, 2, 1, 0, 0]);
    let refused = ds[5];
    assert!(!refused.allowed);
    assert_eq!(refused.limit, 5);
    // One emission interval (100 ms) minus the little real time that passed.
    assert!(
        refused.retry_after > Duration::from_millis(80) && refused.retry_after <= Duration::from_millis(100),
        "{refused:?}"
    );
    // Full again after five intervals.
    assert!(
        refused.reset_after > Duration::from_millis(400) && refused.reset_after <= Duration::from_millis(500)
    );
    assert_eq!(ds[0].retry_after, Duration::ZERO);
    // Another key has its own allowance.
    assert!(l.check("other", 1).await.expect("decision").allowed);
    // The limiter counts its decisions, clones included (the server's
    // console charts them).
    let clone = l.clone();
    assert!(!clone.check("k", 1).await.expect("decision").allowed);
    assert_eq!(l.decided(), (6, 2));
}

async fn retry_after_is_honest(ts: TestStore) {
    for (i, limit) in [
        gcra(10, Duration::from_secs(1), 3),
        Limit::fixed_window(Rate::new(3, Duration::from_millis(500)).expect("rate")),
        Limit::sliding_window(Rate::new(3, Duration::from_millis(500)).expect("rate")),
    ]
    .into_iter()
    .enumerate()
    {
        let l = limiter(&ts, limit);
        let key = format!("k{i}");
        if ts.clock.is_none() {
            // Fixed windows start on the clock's multiples of their length,
            // for every key alike: four checks must not straddle the start
            // of the next one (CI saw 2 + 2 allowed across it, 1 ms apart).
            let probe = l.check(&format!("probe{i}"), 1).await.expect("decision");
            if probe.reset_after < Duration::from_millis(100) {
                tokio::time::sleep(probe.reset_after + Duration::from_millis(5)).await;
            }
        }
        let ds = spend(&l, &key, 4).await;
        assert_eq!(allowed(&ds), 3, "{limit}: {ds:?}");
        let wait = ds[3].retry_after;
        assert!(wait > Duration::ZERO, "{limit}: {ds:?}");
        if ts.clock.is_some() {
            // On a hand-moved clock retry-after is also tight: a millisecond
            // earlier is still refused.
            ts.advance(wait - Duration::from_millis(1)).await;
            assert!(
                !l.check(&key, 1).await.expect("decision").allowed,
                "{limit}: early retry allowed"
            );
            ts.advance(Duration::from_millis(1)).await;
        } else {
            ts.advance(wait).await;
        }
        let d = l.check(&key, 1).await.expect("decision");
        assert!(d.allowed, "{limit}: retry after {wait:?} refused: {d:?}");
    }
}

async fn cost_spends_several(ts: TestStore) {
    let l = limiter(&ts, gcra(10, Duration::from_secs(1), 5));
    let d = l.check("k", 3).await.expect("decision");
    assert!(d.allowed);
    assert_eq!(d.remaining, 2);
    let d = l.check("k", 3).await.expect("decision");
    assert!(!d.allowed, "{d:?}");
    assert_eq!(d.remaining, 2);
    // One more token is needed: one interval.
    assert!(d.retry_after <= Duration::from_millis(100) && d.retry_after > Duration::from_millis(80));
    let d = l.check("k", 2).await.expect("decision");
    assert!(d.allowed && d.remaining == 0, "{d:?}");
    for cost in [0, 6] {
        let e = l.check("k", cost).await.expect_err("bad cost");
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "cost {cost}: {e}");
    }
}

async fn changing_the_limit_takes_effect_at_once(ts: TestStore) {
    let l = limiter(&ts, gcra(1, Duration::from_secs(60), 1));
    assert!(l.check("k", 1).await.expect("decision").allowed);
    assert!(!l.check("k", 1).await.expect("decision").allowed);
    let clone = l.clone();
    clone.set_limit(gcra(100, Duration::from_secs(1), 100));
    // The key spent its one-a-minute allowance; under the new limit it
    // starts empty, one 10 ms interval from its next request, not 60 s.
    let d = l.check("k", 1).await.expect("decision");
    assert_eq!(d.limit, 100);
    assert!(d.allowed || d.retry_after <= Duration::from_millis(10), "{d:?}");
    ts.advance(Duration::from_millis(10)).await;
    let d = l.check("k", 1).await.expect("decision");
    assert!(d.allowed, "{d:?}");
    // A limit passed per call wins for that call.
    let strict = gcra(1, Duration::from_secs(60), 1);
    assert!(!l.check_with("k", 1, &strict).await.expect("decision").allowed);
}

/// Spends a full allowance just before a window edge and tries again just
/// after it: the fixed window lets a second full allowance through, GCRA
/// and the sliding window do not.
async fn window_edges(ts: TestStore) {
    let period = Duration::from_secs(1);
    let rate = Rate::new(10, period).expect("rate");
    let cases = [
        (Limit::fixed_window(rate), 10, 10),
        (Limit::sliding_window(rate), 0, 1),
        (Limit::gcra(rate, 10).expect("limit"), 0, 1),
    ];
    for (limit, at_least, at_most) in cases {
        let l = limiter(&ts, limit);
        let key = limit.algorithm().as_str();
        if ts.clock.is_some() {
            // The manual clock starts on a whole second.
            ts.advance(Duration::from_millis(950)).await;
        } else {
            align(period, Duration::from_millis(900)).await;
        }
        let before = allowed(&spend(&l, key, 10).await);
        assert_eq!(before, 10, "{limit}");
        if ts.clock.is_some() {
            ts.advance(Duration::from_millis(100)).await;
        } else {
            align(period, Duration::from_millis(50)).await;
        }
        let after = allowed(&spend(&l, key, 10).await);
        assert!(
            (at_least..=at_most).contains(&after),
            "{limit}: {after} more allowed right after the window edge"
        );
        // Let the key go idle before the next algorithm's round.
        ts.advance(Duration::from_secs(2)).await;
    }
}

/// 20 tasks offer twice the rate; GCRA lets exactly burst + elapsed/interval
/// through. On the hand-moved clock time advances in 100 ms ticks between
/// rounds of 20 concurrent requests, so the count is exact.
async fn exact_under_overload(ts: TestStore) {
    let limit = gcra(100, Duration::from_secs(1), 10);
    let l = limiter(&ts, limit);
    let passed = Arc::new(AtomicU64::new(0));
    let Some(clock) = ts.clock.clone() else {
        return exact_under_overload_in_real_time(l).await;
    };
    for _tick in 0..100 {
        let rounds: Vec<_> = (0..20)
            .map(|_| {
                let (l, passed) = (l.clone(), passed.clone());
                tokio::spawn(async move {
                    if l.check("hot", 1).await.expect("decision").allowed {
                        passed.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for r in rounds {
            r.await.expect("task");
        }
        clock.advance(Duration::from_millis(100));
    }
    // 10 at once, then one per 10 ms over the 9.9 s between the first and
    // the last round.
    assert_eq!(passed.load(Ordering::SeqCst), 10 + 990);
}

async fn exact_under_overload_in_real_time(l: RateLimiter) {
    let passed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let run = Duration::from_secs(10);
    // Each task offers 10/s: 200/s in all, twice the rate.
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let (l, passed) = (l.clone(), passed.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval_at(
                    tokio::time::Instant::now() + Duration::from_millis(5 * i),
                    Duration::from_millis(100),
                );
                let (mut first_sent, mut first_done, mut last_sent, mut last_done) =
                    (None, None, started, started);
                while started.elapsed() < run {
                    tick.tick().await;
                    let sent = Instant::now();
                    let d = l.check("hot", 1).await.expect("decision");
                    let done = Instant::now();
                    first_sent.get_or_insert(sent);
                    first_done.get_or_insert(done);
                    (last_sent, last_done) = (sent, done);
                    if d.allowed {
                        passed.fetch_add(1, Ordering::SeqCst);
                    }
                }
                (
                    first_sent.unwrap_or(started),
                    first_done.unwrap_or(started),
                    last_sent,
                    last_done,
                )
            })
        })
        .collect();
    let mut spans = Vec::new();
    for t in tasks {
        spans.push(t.await.expect("task"));
    }
    let first_sent = spans.iter().map(|s| s.0).min().expect("spans");
    let first_done = spans.iter().map(|s| s.1).min().expect("spans");
    let last_sent = spans.iter().map(|s| s.2).max().expect("spans");
    let last_done = spans.iter().map(|s| s.3).max().expect("spans");
    // The server saw the first request somewhere in [first_sent,
    // first_done] and the last in [last_sent, last_done].
    let shortest = last_sent.saturating_duration_since(first_done);
    let longest = last_done.saturating_duration_since(first_sent);
    let low = 10 + shortest.as_millis() as u64 / 10;
    let high = 10 + longest.as_millis() as u64 / 10;
    let n = passed.load(Ordering::SeqCst);
    assert!(
        (low.saturating_sub(1)..=high + 1).contains(&n),
        "{n} allowed; GCRA allows {low}..={high} over {shortest:?}..{longest:?}"
    );
}

/// 50 tasks race 500 checks at a budget of 100 that does not refill
/// meanwhile: exactly 100 pass, whatever the algorithm.
async fn never_more_than_the_budget_under_concurrency(ts: TestStore) {
    let rate = Rate::new(100, Duration::from_secs(24 * 3600)).expect("rate");
    for limit in [
        Limit::gcra(rate, 100).expect("limit"),
        Limit::fixed_window(rate),
        Limit::sliding_window(rate),
    ] {
        let l = limiter(&ts, limit);
        let passed = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..50)
            .map(|_| {
                let (l, passed) = (l.clone(), passed.clone());
                tokio::spawn(async move {
                    for _ in 0..10 {
                        let key = limit.algorithm().as_str();
                        if l.check(key, 1).await.expect("decision").allowed {
                            passed.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
        assert_eq!(passed.load(Ordering::SeqCst), 100, "{limit}");
    }
}

async fn bad_input_is_refused(ts: TestStore) {
    let l = limiter(&ts, gcra(10, Duration::from_secs(1), 5));
    for key in ["", "has space", "tab\there", &"k".repeat(257)] {
        let e = l.check(key, 1).await.expect_err("bad key");
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{key:?}: {e}");
    }
    assert!(l.check("user:42@example.org/2001:db8::1", 1).await.is_ok());
    assert!(RateLimiter::new(&ts.store, "bad name{}", l.limit()).is_err());
    assert!(Rate::new(0, Duration::from_secs(1)).is_err());
    assert!(Rate::new(1, Duration::ZERO).is_err());
    assert!(Rate::new(1, Duration::from_secs(25 * 3600)).is_err());
    for bad in [
        "",
        "10",
        "-5/s",
        "0/s",
        "ten/s",
        "5/fortnight",
        "1.5/s",
        "5/0s",
        "5/1500us",
        "1000000000/100ms",
    ] {
        let e = bad.parse::<Rate>().expect_err(bad);
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
    }
    assert_eq!(
        "600/min".parse::<Rate>().expect("rate"),
        Rate::per_minute(600).expect("rate")
    );
    assert_eq!(
        "5/250ms".parse::<Rate>().expect("rate"),
        Rate::new(5, Duration::from_millis(250)).expect("rate")
    );
    let rate = Rate::per_second(10).expect("rate");
    assert!(Limit::gcra(rate, 0).is_err());
    assert!(Limit::gcra(Rate::new(1, Duration::from_secs(86_400)).expect("rate"), 31).is_err());
    assert!(Limit::new(Algorithm::FixedWindow, rate, Some(20)).is_err());
    assert_eq!(
        Limit::new(Algorithm::Gcra, rate, None).expect("limit").burst(),
        10
    );
    assert!("leaky".parse::<Algorithm>().is_err());
}

on_both_stores!(
    manual_clock: gcra_gives_the_burst_then_the_rate,
    retry_after_is_honest,
    cost_spends_several,
    changing_the_limit_takes_effect_at_once,
    window_edges,
    exact_under_overload,
    never_more_than_the_budget_under_concurrency,
    bad_input_is_refused,
);

/// Keys carry a TTL no longer than the time they take to refill, are small,
/// and are gone once idle.
#[tokio::test]
async fn redis_keys_are_small_and_expire() {
    let server = RedisServer::start();
    let store = Store::redis(&server.url()).await.expect("connect");
    let l = RateLimiter::new(&store, "api", gcra(10, Duration::from_millis(500), 2)).expect("limiter");
    assert!(l.check("client-1234567", 1).await.expect("decision").allowed);
    let key = "tollgate:limit:{api}:g:client-1234567";
    let ::redis::Value::Int(pttl) = server.command(&["PTTL", key]) else {
        panic!("no PTTL")
    };
    assert!((1..=50).contains(&pttl), "PTTL {pttl}");
    let ::redis::Value::Int(bytes) = server.command(&["MEMORY", "USAGE", key]) else {
        panic!("no MEMORY USAGE")
    };
    assert!(bytes <= 100, "{bytes} bytes");
    let w = RateLimiter::new(
        &store,
        "api",
        Limit::sliding_window(Rate::new(5, Duration::from_millis(200)).expect("rate")),
    )
    .expect("limiter");
    assert!(w.check("client-1234567", 1).await.expect("decision").allowed);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        server.command(&["DBSIZE"]),
        ::redis::Value::Int(0),
        "idle keys remain"
    );
}

/// A dead or frozen store: each policy answers as configured within the
/// timeout, and decisions resume when Redis is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_down_follows_the_policy() {
    let mut server = RedisServer::start();
    let store = Store::redis(&server.url()).await.expect("connect");
    let limit = gcra(10, Duration::from_secs(1), 10);
    let make = |p: OnStoreError| {
        RateLimiter::new(&store, "api", limit)
            .expect("limiter")
            .on_store_error(p)
            .timeout(Duration::from_millis(100))
    };
    let (open, closed, strict) = (
        make(OnStoreError::Open),
        make(OnStoreError::Closed),
        make(OnStoreError::Error),
    );
    assert!(!open.check("k", 1).await.expect("decision").degraded);

    for how in ["frozen", "killed"] {
        match how {
            "frozen" => {
                nix::sys::signal::kill(server.pid(), nix::sys::signal::Signal::SIGSTOP).expect("stop redis")
            }
            _ => {
                nix::sys::signal::kill(server.pid(), nix::sys::signal::Signal::SIGCONT)
                    .expect("resume redis");
                server.kill();
            }
        }
        for _ in 0..3 {
            let t = Instant::now();
            let d = open.check("k", 1).await.expect("fail open");
            assert!(d.allowed && d.degraded, "{how}: {d:?}");
            let d = closed.check("k", 1).await.expect("fail closed");
            assert!(!d.allowed && d.degraded, "{how}: {d:?}");
            let e = strict.check("k", 1).await.expect_err("error policy");
            assert_eq!(e.kind(), ErrorKind::Unavailable, "{how}: {e}");
            // Three decisions, each bounded by the 100 ms timeout.
            assert!(
                t.elapsed() < Duration::from_millis(600),
                "{how}: took {:?}",
                t.elapsed()
            );
        }
    }
    server.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match strict.check("k", 1).await {
            Ok(d) => {
                assert!(!d.degraded);
                break;
            }
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("no decisions after Redis came back: {e}"),
        }
    }
}
