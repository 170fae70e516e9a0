//! The waiting room end to end: `tollgate serve` (a separate process) in
//! front of a real upstream HTTP server run by the test, on the embedded
//! store and on a real redis-server.

mod browser_support;
mod room_support;
mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use serve_support::Server;
use support::RedisServer;

use room_support::*;

#[path = "rooms/browser.rs"]
mod browser;
#[path = "rooms/pages.rs"]
mod pages;

/// What a test changes in `room_config`'s room "shop", and the store it
/// runs on; built from `ONE_SLOT` by the methods below.
#[derive(Clone, Copy)]
struct Overrides<'a> {
    capacity: u32,
    /// Settings replaced by name: `("session_ttl", r#""60s""#)` makes the
    /// line `session_ttl = "60s"`.
    set: &'a [(&'a str, &'a str)],
    /// Lines added to the room's section.
    extra: &'a str,
    redis: Option<&'a str>,
}

/// The defaults: one slot, the embedded store.
const ONE_SLOT: Overrides<'static> = Overrides {
    capacity: 1,
    set: &[],
    extra: "",
    redis: None,
};

/// Sessions that outlive the test, so only what a test does ends them.
const LONG_SESSIONS: (&str, &str) = ("session_ttl", r#""600s""#);

impl<'a> Overrides<'a> {
    fn capacity(self, capacity: u32) -> Self {
        Overrides { capacity, ..self }
    }

    fn set(self, set: &'a [(&'a str, &'a str)]) -> Self {
        Overrides { set, ..self }
    }

    fn extra(self, extra: &'a str) -> Self {
        Overrides { extra, ..self }
    }

    fn redis(self, redis: Option<&'a str>) -> Self {
        Overrides { redis, ..self }
    }

    /// The config file's text for a room in front of `upstream`.
    fn config(&self, upstream: SocketAddr) -> String {
        let mut config = room_config(upstream, self.capacity, self.extra);
        for (name, value) in self.set {
            let prefix = format!("{name} = ");
            let line = config
                .lines()
                .find(|l| l.starts_with(&prefix))
                .unwrap_or_else(|| panic!("room_config has no {name}"))
                .to_owned();
            config = config.replacen(&line, &format!("{prefix}{value}"), 1);
        }
        config
    }
}

/// A running room: the upstream (what it saw, its address), the temp
/// dir, the config and the server. Keep it bound while the test runs.
struct Room {
    seen: Shared,
    up: SocketAddr,
    dir: tempfile::TempDir,
    config: String,
    s: Server,
}

/// A fresh upstream and a `tollgate serve` with one room in front of it:
/// the room, its waiting-room address and a client.
async fn start_room(o: Overrides<'_>) -> (Room, String, reqwest::Client) {
    let (seen, up, dir) = site().await;
    let config = o.config(up);
    let s = start(&dir, &config, o.redis);
    let proxy = s.proxy.clone().expect("proxy");
    let room = Room {
        seen,
        up,
        dir,
        config,
        s,
    };
    (room, proxy, reqwest::Client::new())
}

/// Sends a request the test built with `v`'s room token as its cookie.
async fn send_as(v: &Visitor, req: reqwest::RequestBuilder, what: &str) -> reqwest::Response {
    let cookie = format!("tollgate_shop={}", v.cookie.clone().expect("cookie"));
    req.header("cookie", cookie).send().await.expect(what)
}

/// A visitor "holder" admitted at `proxy`: with one slot, the room is full.
async fn take_a_slot(c: &reqwest::Client, proxy: &str) -> Visitor {
    let mut holder = Visitor::new("holder");
    assert!(is_admitted(&holder.get(c, proxy, "/page", true).await, "holder"));
    holder
}

/// N = 3, 10 visitors: exactly 3 reach the upstream, the others wait at
/// positions 1..7 in arrival order; sessions end by the upstream's header,
/// through the admin API and by TTL, and the next in line are admitted in
/// FIFO order, never more than 3 active at once (checked at the upstream).
async fn ten_visitors_three_slots(redis: Option<&str>) {
    let (room, proxy, c) = start_room(ONE_SLOT.capacity(3).redis(redis)).await;
    let (seen, s) = (&room.seen, &room.s);
    seen.lock().expect("lock").ttl = Some(Duration::from_millis(1500));
    let mut visitors: Vec<Visitor> = (1..=10).map(|i| Visitor::new(&format!("v{i}"))).collect();
    for (i, v) in visitors.iter_mut().enumerate() {
        let a = v.get(&c, &proxy, "/page", true).await;
        if i < 3 {
            assert!(is_admitted(&a, &v.name), "{}: {} {}", v.name, a.status, a.text);
        } else {
            assert_eq!(a.status, 503, "{}: {}", v.name, a.text);
            assert_eq!(a.headers["retry-after"], "2");
            let place = a.json();
            assert_eq!(place["status"], "queued");
            assert_eq!(place["position"], i as u64 - 2, "{place}");
            assert_eq!(place["waiting"], i as u64 - 2, "{place}");
        }
        assert!(v.cookie.is_some(), "{} got no cookie", v.name);
    }
    // The HTML page for a waiter: position, and a live-update script.
    let a = visitors[9].get(&c, &proxy, "/page", false).await;
    assert_eq!(a.status, 503);
    assert!(
        a.headers["content-type"]
            .to_str()
            .expect("ct")
            .starts_with("text/html")
    );
    assert!(a.text.contains(r#"id="position">7<"#), "{}", a.text);
    assert!(a.text.contains("/.tollgate/shop/events"));

    let admitted_order = Arc::new(Mutex::new(Vec::<String>::new()));
    // v1 ends by the upstream's header; v2 through the admin API; v3 by TTL
    // (it just stops asking).
    let a = visitors[0].get(&c, &proxy, "/done", true).await;
    assert_eq!(a.text, "bye");
    assert!(visitors[0].cookie.is_none(), "the session cookie is cleared");
    let waiters: Vec<Visitor> = visitors.drain(3..).collect();
    let poll = {
        let (c, proxy, order) = (c.clone(), proxy.clone(), admitted_order.clone());
        tokio::spawn(async move {
            let mut waiters = waiters;
            let mut admitted = BTreeSet::new();
            let deadline = Instant::now() + Duration::from_secs(20);
            while admitted.len() < 3 && Instant::now() < deadline {
                for v in waiters.iter_mut() {
                    let a = v.get(&c, &proxy, "/page", true).await;
                    if admitted.contains(&v.name) {
                        // Admitted visitors stay active by browsing on.
                        assert!(
                            is_admitted(&a, &v.name),
                            "{} lost its session: {}",
                            v.name,
                            a.text
                        );
                        continue;
                    }
                    if admitted.len() == 3 {
                        assert_eq!(a.status, 503, "{}: {}", v.name, a.text);
                        continue;
                    }
                    if is_admitted(&a, &v.name) {
                        admitted.insert(v.name.clone());
                        order.lock().expect("lock").push(v.name.clone());
                    } else {
                        assert_eq!(a.status, 503, "{}: {}", v.name, a.text);
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            waiters
        })
    };
    // Wait for v4 to be admitted into v1's slot before ending v2's.
    let deadline = Instant::now() + Duration::from_secs(10);
    while admitted_order.lock().expect("lock").is_empty() {
        assert!(Instant::now() < deadline, "nobody admitted after v1 left");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let session = seen
        .lock()
        .expect("lock")
        .sessions
        .get("v2")
        .cloned()
        .expect("v2's session id");
    seen.lock().expect("lock").active.remove("v2");
    let resp = c
        .delete(format!("{}/v1/rooms/shop/sessions/{session}", s.base))
        .bearer_auth("admin-token-0123456789")
        .send()
        .await
        .expect("admin");
    assert_eq!(resp.status().as_u16(), 200);
    let mut waiters = poll.await.expect("poller");
    assert_eq!(*admitted_order.lock().expect("lock"), ["v4", "v5", "v6"]);
    // The rest still wait, in order.
    for (i, v) in waiters.iter_mut().skip(3).enumerate() {
        let a = v.get(&c, &proxy, "/page", true).await;
        assert_eq!(a.json()["position"], i as u64 + 1, "{}: {}", v.name, a.text);
    }
    {
        let seen = seen.lock().expect("lock");
        assert!(seen.violations.is_empty(), "{:?}", seen.violations);
        assert_eq!(seen.first_seen, ["v1", "v2", "v3", "v4", "v5", "v6"]);
    }
    // Admin stats agree.
    let stats: Value = reqwest::Client::new()
        .get(format!("{}/v1/rooms/shop", s.base))
        .bearer_auth("admin-token-0123456789")
        .send()
        .await
        .expect("stats")
        .json()
        .await
        .expect("json");
    assert_eq!(stats["capacity"], 3, "{stats}");
    assert_eq!(stats["waiting"], 4, "{stats}");
    let metrics = s.metrics(Some("admin-token-0123456789")).await;
    for series in [
        r#"tollgate_room_capacity{room="shop"} 3"#,
        r#"tollgate_room_waiting{room="shop"} 4"#,
        r#"tollgate_room_admitted_total{room="shop"} 6"#,
        r#"tollgate_room_sessions_ended_total{room="shop"} 2"#,
        r#"tollgate_room_wait_seconds_count{room="shop"} 6"#,
        r#"tollgate_room_proxied_total{room="shop",status="2xx"}"#,
        r#"tollgate_room_upstream_seconds_count{room="shop"}"#,
    ] {
        assert!(metrics.contains(series), "{series} missing from\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_visitors_three_slots_embedded() {
    ten_visitors_three_slots(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_visitors_three_slots_redis() {
    let redis = RedisServer::start();
    ten_visitors_three_slots(Some(&redis.url())).await;
}

/// The same on a 3-master Redis Cluster: the room's keys, scripts and
/// notifications stay in one slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_visitors_three_slots_cluster() {
    let cluster = tokio::task::spawn_blocking(|| support::RedisCluster::start(3, 0))
        .await
        .expect("cluster");
    ten_visitors_three_slots(Some(&cluster.url())).await;
}

/// The same on a Sentinel-managed master with one replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_visitors_three_slots_sentinel() {
    let set = tokio::task::spawn_blocking(support::SentinelSet::start)
        .await
        .expect("sentinel set");
    ten_visitors_three_slots(Some(&set.url())).await;
}

/// Two `tollgate serve` processes on one redis-server serve one room: the
/// capacity holds across both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_share_one_room() {
    let redis = RedisServer::start();
    let (a, proxy, c) = start_room(ONE_SLOT.capacity(3).redis(Some(&redis.url()))).await;
    let b = start(&a.dir, &a.config, Some(&redis.url()));
    let seen = &a.seen;
    let proxies = [proxy, b.proxy.clone().expect("b")];
    let mut admitted = 0;
    let mut positions = Vec::new();
    for i in 0..8 {
        let mut v = Visitor::new(&format!("v{i}"));
        let r = v.get(&c, &proxies[i % 2], "/page", true).await;
        if is_admitted(&r, &v.name) {
            admitted += 1;
        } else {
            positions.push(r.json()["position"].as_u64().expect("position"));
        }
    }
    assert_eq!(admitted, 3);
    assert_eq!(positions, [1, 2, 3, 4, 5]);
    assert!(seen.lock().expect("lock").violations.is_empty());
}

/// Tokens that are forged, edited, signed with another key, expired or
/// for another room count for nothing: the request is a new visitor's.
/// A valid token works from the Tollgate-Token header too, and keys can be
/// rotated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_cannot_be_forged_or_moved() {
    let (room, proxy, c) = start_room(ONE_SLOT).await;
    let _holder = take_a_slot(&c, &proxy).await;
    let mut waiter = Visitor::new("waiter");
    assert_eq!(waiter.get(&c, &proxy, "/page", true).await.json()["position"], 1);
    let good = waiter.cookie.clone().expect("cookie");

    let edited = good.replacen(".w.", ".a.", 1);
    let other_key = good
        .rsplit_once('.')
        .map(|(p, _)| format!("{p}.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"))
        .expect("sig");
    let other_room = good.replacen("v1.shop.", "v1.other.", 1);
    for forged in [
        "garbage",
        "v1.shop.a.abc.1.99999999999999.xyz",
        &edited,
        &other_key,
        &other_room,
    ] {
        let mut v = Visitor::new("forger");
        v.cookie = Some(forged.to_owned());
        let a = v.get(&c, &proxy, "/page", true).await;
        // Not let in, and treated as a newcomer: behind the real waiter.
        assert_eq!(a.status, 503, "{forged}: {}", a.text);
        assert!(
            a.json()["position"].as_u64().expect("position") >= 2,
            "{forged}: {}",
            a.text
        );
        assert_ne!(v.cookie.as_deref(), Some(forged));
    }
    // The header works like the cookie (API and mobile clients).
    let a = c
        .get(format!("{proxy}/page"))
        .header("tollgate-token", &good)
        .header("accept", "application/json")
        .send()
        .await
        .expect("request");
    let body: Value = a.json().await.expect("json");
    assert_eq!(body["position"], 1, "{body}");

    // Rotation: a server whose keys are [new, old] still honours the old
    // key's tokens and signs with the new one.
    let keys = format!("[\"new-key-0123456789abcdef0123456789abcd\", \"{KEY}\"]");
    let rotated = ONE_SLOT.set(&[("cookie_keys", &keys)]).config(room.up);
    drop(room.s);
    let s2 = start(&room.dir, &rotated, None);
    let proxy2 = s2.proxy.clone().expect("proxy");
    let mut v = Visitor::new("rotating");
    assert!(is_admitted(&v.get(&c, &proxy2, "/page", true).await, "rotating"));
    let new_token = v.cookie.clone().expect("cookie");
    let old_only = room_config(room.up, 1, "");
    drop(s2);
    let s3 = start(&room.dir, &old_only, None);
    let mut stale = Visitor::new("rotating");
    stale.cookie = Some(new_token);
    let a = stale
        .get(&c, &s3.proxy.clone().expect("proxy"), "/page", true)
        .await;
    // Signed with a key this server does not have: a new visitor, who
    // gets in (the room is empty) under a fresh token.
    assert!(is_admitted(&a, "rotating"));
    assert_ne!(stale.cookie, v.cookie);
}

/// A visitor refreshing 100 times a second keeps its place (it is slowed
/// down, never moved back); one that stops asking leaves after the grace
/// and the next moves up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refreshing_keeps_the_place_and_vanishing_loses_it() {
    let (_room, proxy, c) =
        start_room(ONE_SLOT.set(&[("status_rate", r#""5/s""#), ("grace", r#""1s""#), LONG_SESSIONS])).await;
    let _holder = take_a_slot(&c, &proxy).await;
    let mut eager = Visitor::new("eager");
    let mut quiet = Visitor::new("quiet");
    let mut patient = Visitor::new("patient");
    assert_eq!(eager.get(&c, &proxy, "/page", true).await.json()["position"], 1);
    assert_eq!(quiet.get(&c, &proxy, "/page", true).await.json()["position"], 2);
    assert_eq!(patient.get(&c, &proxy, "/page", true).await.json()["position"], 3);
    let (mut limited, started) = (0, Instant::now());
    for _ in 0..100 {
        let a = eager.get(&c, &proxy, "/page", true).await;
        match a.status {
            503 => assert_eq!(a.json()["position"], 1),
            429 => {
                limited += 1;
                assert!(a.headers.contains_key("retry-after"));
            }
            other => panic!("unexpected {other}: {}", a.text),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        limited > 50,
        "only {limited} of 100 slowed down in {:?}",
        started.elapsed()
    );
    // `quiet` stops asking; `patient` asks every 300 ms. After the grace
    // (1 s), quiet is gone and patient moves up.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = eager.get(&c, &proxy, "/page", true).await;
        let a = patient.get(&c, &proxy, "/page", true).await;
        if a.status == 503 && a.json()["position"] == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "quiet never left: {}", a.text);
    }
    let a = eager.get(&c, &proxy, "/page", true).await;
    assert!(a.status == 429 || a.json()["position"] == 1, "{}", a.text);
    // The quiet visitor comes back: its ticket is gone, so it queues anew
    // at the end.
    let a = quiet.get(&c, &proxy, "/page", true).await;
    assert_eq!(a.json()["position"], 3, "{}", a.text);
}

/// Lowering the capacity from 5 to 2 with 5 active evicts nobody; new
/// admissions resume only when fewer than 2 are active.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lowering_capacity_drains_without_evicting() {
    let (room, proxy, c) = start_room(ONE_SLOT.capacity(5).set(&[LONG_SESSIONS])).await;
    let s = &room.s;
    let mut active: Vec<Visitor> = (0..5).map(|i| Visitor::new(&format!("a{i}"))).collect();
    for v in active.iter_mut() {
        assert!(is_admitted(&v.get(&c, &proxy, "/page", true).await, &v.name));
    }
    let resp = c
        .put(format!("{}/v1/rooms/shop/capacity", s.base))
        .bearer_auth("admin-token-0123456789")
        .json(&serde_json::json!({"capacity": 2}))
        .send()
        .await
        .expect("admin");
    assert_eq!(resp.status().as_u16(), 200);
    let mut newcomer = Visitor::new("new");
    assert_eq!(newcomer.get(&c, &proxy, "/page", true).await.status, 503);
    // Everyone active stays active.
    for v in active.iter_mut() {
        assert!(is_admitted(&v.get(&c, &proxy, "/page", true).await, &v.name));
    }
    // Three leave: 2 remain, the newcomer still waits.
    for v in active.iter_mut().take(3) {
        assert_eq!(v.get(&c, &proxy, "/done", true).await.text, "bye");
    }
    assert_eq!(newcomer.get(&c, &proxy, "/page", true).await.status, 503);
    // One more leaves: 1 < 2, the newcomer is let in.
    assert_eq!(active[3].get(&c, &proxy, "/done", true).await.text, "bye");
    assert!(is_admitted(&newcomer.get(&c, &proxy, "/page", true).await, "new"));
}

/// The proxy passes requests through faithfully: X-Forwarded-*, the
/// body, the site's own cookies (never the room's), bypass paths, and
/// clear 502/504 pages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_forwards_faithfully() {
    let (room, proxy, c) = start_room(ONE_SLOT.extra("bypass_header = \"X-Internal: let-me-in\"")).await;
    let mut v = Visitor::new("v");
    assert!(is_admitted(&v.get(&c, &proxy, "/page", true).await, "v"));
    let req = c
        .post(format!("{proxy}/headers?x=1"))
        .header(
            "cookie",
            format!(
                "site=abc; tollgate_shop={}; other=1",
                v.cookie.clone().expect("cookie")
            ),
        )
        .header("x-visitor", "v")
        .header("tollgate-visitor", "spoofed")
        .body("payload");
    let a = v.send(req).await;
    assert_eq!(a.status, 200, "{}", a.text);
    let h = a.json();
    assert_eq!(h["cookie"], "site=abc; other=1", "{h}");
    assert_eq!(h["x-forwarded-for"], "127.0.0.1");
    assert_eq!(h["x-forwarded-proto"], "http");
    assert_eq!(h["x-forwarded-host"], proxy.trim_start_matches("http://"));
    assert_eq!(h["content-length"], "7");
    assert!(h.get("tollgate-token").is_none());
    assert_ne!(h["tollgate-visitor"], "spoofed", "{h}");
    // Bypass: health checks pass without a place in line, even when full;
    // so does a request with the bypass header.
    let r = c.get(format!("{proxy}/healthz")).send().await.expect("healthz");
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.headers().get("set-cookie").is_none());
    let r = c
        .get(format!("{proxy}/page"))
        .header("x-internal", "let-me-in")
        .send()
        .await
        .expect("bypass");
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.headers().get("set-cookie").is_none());
    let r = c
        .get(format!("{proxy}/page"))
        .header("x-internal", "guess")
        .send()
        .await
        .expect("no bypass");
    assert_eq!(
        r.status().as_u16(),
        503,
        "a wrong bypass value queues like anyone"
    );
    // The upstream too slow: 504 page.
    let a = v.get(&c, &proxy, "/slow", false).await;
    assert_eq!(a.status, 504, "{}", a.text);
    assert!(a.text.contains("taking too long"));
    // Unknown room endpoints and addresses no room serves.
    assert_eq!(
        c.get(format!("{proxy}/.tollgate/nope/status"))
            .send()
            .await
            .expect("r")
            .status()
            .as_u16(),
        404
    );
    drop(room.s);
    // The upstream down: 502 page.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead_addr = dead.local_addr().expect("addr");
    drop(dead);
    let s = start(&room.dir, &room_config(dead_addr, 1, ""), None);
    let mut v = Visitor::new("v");
    let a = v.get(&c, &s.proxy.clone().expect("proxy"), "/page", false).await;
    assert_eq!(a.status, 502, "{}", a.text);
}

/// Redis down: an `open` room lets visitors through, a `closed` one shows
/// a "try again" page (here the operator's own) with 503 and Retry-After;
/// neither hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_down_open_or_closed() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    let (room, _, c) = start_room(
        ONE_SLOT
            .extra("on_store_error = \"open\"\nstore_timeout_ms = 200")
            .redis(Some(&url)),
    )
    .await;
    let open = &room.s;
    let try_again = template(
        &room.dir,
        "try_again_page",
        "<p>{{room}}: please try again in {{retry_seconds}} s</p>",
    );
    let extra = format!("store_timeout_ms = 200\n{try_again}");
    let closed = start(&room.dir, &room_config(room.up, 1, &extra), Some(&url));
    redis.kill();
    for (s, want_in) in [(open, true), (&closed, false)] {
        let t = Instant::now();
        let mut v = Visitor::new("v");
        let a = v.get(&c, &s.proxy.clone().expect("proxy"), "/page", false).await;
        assert!(t.elapsed() < Duration::from_secs(2), "took {:?}", t.elapsed());
        if want_in {
            assert!(is_admitted(&a, "v"), "{}: {}", a.status, a.text);
        } else {
            assert_eq!(a.status, 503);
            assert_eq!(a.headers["retry-after"], "5");
            assert_eq!(a.text, "<p>shop: please try again in 5 s</p>");
        }
        let metrics = s.metrics(Some("admin-token-0123456789")).await;
        let series = if want_in {
            "tollgate_room_store_failed_open_total"
        } else {
            "tollgate_room_store_failed_closed_total"
        };
        assert!(
            metrics.contains(&format!("{series}{{room=\"shop\"}} 1")),
            "{metrics}"
        );
    }
}

/// The waiting page's live feed: position events, then `admitted` the
/// moment a slot is handed over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_stream_positions_then_admission() {
    let (_room, proxy, c) = start_room(ONE_SLOT.set(&[LONG_SESSIONS])).await;
    let mut holder = take_a_slot(&c, &proxy).await;
    let mut waiter = Visitor::new("waiter");
    assert_eq!(waiter.get(&c, &proxy, "/page", true).await.status, 503);
    let events = c.get(format!("{proxy}/.tollgate/shop/events"));
    let mut resp = send_as(&waiter, events, "events").await;
    assert_eq!(resp.status().as_u16(), 200);
    let mut text = String::new();
    while !text.contains("event: position") {
        let chunk = resp.chunk().await.expect("chunk").expect("more");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains("\"position\":1"), "{text}");
    let released = Instant::now();
    assert_eq!(holder.get(&c, &proxy, "/done", true).await.text, "bye");
    while !text.contains("event: admitted") {
        let chunk = tokio::time::timeout(Duration::from_secs(5), resp.chunk())
            .await
            .expect("admitted in time")
            .expect("chunk")
            .expect("more");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(
        released.elapsed() < Duration::from_millis(500),
        "took {:?}",
        released.elapsed()
    );
    // The reload that follows lets the visitor in.
    assert!(is_admitted(
        &waiter.get(&c, &proxy, "/page", false).await,
        "waiter"
    ));
}

/// WebSocket (any `Upgrade`) passes through: the 101 and then bytes both
/// ways, spliced between visitor and upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrades_pass_through() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // An upstream that switches to an echo protocol.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let up = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.expect("accept");
        let request = head(&mut s).await;
        assert!(
            request.to_ascii_lowercase().contains("upgrade: echo"),
            "{request}"
        );
        s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
            .await
            .expect("101");
        let mut buf = [0u8; 64];
        loop {
            let n = s.read(&mut buf).await.expect("read");
            if n == 0 {
                break;
            }
            s.write_all(&buf[..n]).await.expect("echo");
        }
    });
    let dir = tempfile::tempdir().expect("dir");
    // Only listed protocols upgrade (websocket by default).
    let s = start(
        &dir,
        &room_config(up, 1, r#"upgrades = ["websocket", "echo"]"#),
        None,
    );
    let proxy = s.proxy.clone().expect("proxy");
    let (mut conn, response) = open_tunnel(&proxy).await;
    assert!(response.starts_with("HTTP/1.1 101"), "{response}");
    assert!(
        response.contains("tollgate_shop="),
        "the visitor is admitted: {response}"
    );
    for msg in [&b"hello"[..], b"through the room"] {
        conn.write_all(msg).await.expect("write");
        let mut back = vec![0u8; msg.len()];
        tokio::time::timeout(Duration::from_secs(5), conn.read_exact(&mut back))
            .await
            .expect("echo in time")
            .expect("read");
        assert_eq!(back, msg);
    }
}

async fn admin(
    c: &reqwest::Client,
    s: &Server,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Value {
    let mut req = c
        .request(method, format!("{}/v1/rooms/shop{path}", s.base))
        .bearer_auth("admin-token-0123456789");
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.expect("admin");
    assert_eq!(resp.status().as_u16(), 200);
    resp.json().await.expect("json")
}

/// Pausing queues everyone new even with free slots; resuming lets the
/// line in. An admission rate paces entries whatever the free capacity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_and_admission_rate() {
    let (room, proxy, c) = start_room(ONE_SLOT.capacity(5).set(&[LONG_SESSIONS])).await;
    let s = &room.s;
    let mut a = Visitor::new("a");
    assert!(is_admitted(&a.get(&c, &proxy, "/page", true).await, "a"));
    let stats = admin(&c, s, reqwest::Method::POST, "/pause", None).await;
    assert_eq!(stats["paused"], true, "{stats}");
    let mut b = Visitor::new("b");
    assert_eq!(b.get(&c, &proxy, "/page", true).await.json()["position"], 1);
    // Active visitors are not affected.
    assert!(is_admitted(&a.get(&c, &proxy, "/page", true).await, "a"));
    let stats = admin(&c, s, reqwest::Method::POST, "/resume", None).await;
    assert_eq!(
        (stats["paused"].as_bool(), stats["active"].as_u64()),
        (Some(false), Some(2)),
        "{stats}"
    );
    assert!(is_admitted(&b.get(&c, &proxy, "/page", true).await, "b"));

    // 60 a minute: one a second, even with three slots free.
    let stats = admin(
        &c,
        s,
        reqwest::Method::PUT,
        "/admission_rate",
        Some(serde_json::json!({"per_minute": 60})),
    )
    .await;
    assert_eq!(stats["admissions_per_minute"], 60, "{stats}");
    let mut admitted_at = Vec::new();
    let mut visitors: Vec<Visitor> = (0..3).map(|i| Visitor::new(&format!("r{i}"))).collect();
    let started = Instant::now();
    while admitted_at.len() < 3 && started.elapsed() < Duration::from_secs(10) {
        for v in visitors.iter_mut() {
            if admitted_at.iter().any(|(n, _)| *n == v.name) {
                continue;
            }
            if is_admitted(&v.get(&c, &proxy, "/page", true).await, &v.name) {
                admitted_at.push((v.name.clone(), started.elapsed()));
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(admitted_at.len(), 3, "{admitted_at:?}");
    for pair in admitted_at.windows(2) {
        let gap = pair[1].1 - pair[0].1;
        assert!(
            gap >= Duration::from_millis(900),
            "admitted {gap:?} apart: {admitted_at:?}"
        );
    }
    let stats = admin(
        &c,
        s,
        reqwest::Method::PUT,
        "/admission_rate",
        Some(serde_json::json!({"per_minute": null})),
    )
    .await;
    assert!(stats["admissions_per_minute"].is_null(), "{stats}");
}

/// An operator's own page replaces the default, placeholders filled in;
/// `queued_status = 200` serves it with 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_waiting_page() {
    let (_seen, up, dir) = site().await;
    let page = template(
        &dir,
        "page",
        "<p>Place {{position}} of {{waiting}}, about {{eta}}; live at {{events_url}}</p>",
    );
    let extra = format!("{page}queued_status = 200");
    let (_s, proxy, c, _holder) = take_the_slot(start(&dir, &room_config(up, 1, &extra), None)).await;
    let mut v = Visitor::new("v");
    let a = v.get(&c, &proxy, "/page", false).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.headers["retry-after"], "2");
    assert_eq!(
        a.text,
        "<p>Place 1 of 1, about unknown; live at /.tollgate/shop/events</p>"
    );
}
