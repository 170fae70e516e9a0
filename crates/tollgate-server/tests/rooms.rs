//! The waiting room end to end: `tollgate serve` (a separate process) in
//! front of a real upstream HTTP server run by the test, on the embedded
//! store and on a real redis-server.

#[path = "../../tollgate/tests/support/mod.rs"]
mod support;
mod serve_support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::Value;
use serve_support::Server;
use support::RedisServer;

const KEY: &str = "test-cookie-key-0123456789abcdef0123456789";

/// What the upstream saw: which visitors are active (first request until
/// their session ended), the most active at once, and each one's
/// `Tollgate-Visitor` session id.
#[derive(Default)]
struct Seen {
    /// Visitor → time of its last request.
    active: BTreeMap<String, Instant>,
    most: usize,
    sessions: BTreeMap<String, String>,
    first_seen: Vec<String>,
    violations: Vec<String>,
    /// Sessions that end by TTL: a visitor idle this long is over.
    ttl: Option<Duration>,
}

type Shared = Arc<Mutex<Seen>>;

fn visitor_of(headers: &HeaderMap) -> String {
    headers
        .get("x-visitor")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("anonymous")
        .to_owned()
}

async fn page(State(seen): State<Shared>, headers: HeaderMap) -> impl IntoResponse {
    let who = visitor_of(&headers);
    let mut s = seen.lock().expect("lock");
    let now = Instant::now();
    // A visitor idle past its session TTL has been let go by tollgate.
    if let Some(ttl) = s.ttl {
        s.active.retain(|_, last| now.duration_since(*last) + Duration::from_millis(50) < ttl);
    }
    if !s.active.contains_key(&who) {
        s.first_seen.push(who.clone());
    }
    s.active.insert(who.clone(), now);
    if let Some(session) = headers.get("tollgate-visitor").and_then(|v| v.to_str().ok()) {
        s.sessions.insert(who.clone(), session.to_owned());
    }
    let n = s.active.len();
    s.most = s.most.max(n);
    if n > 3 {
        let active: Vec<_> = s.active.keys().cloned().collect();
        s.violations.push(format!("{n} active: {active:?}"));
    }
    format!("upstream page for {who}")
}

async fn done(State(seen): State<Shared>, headers: HeaderMap) -> impl IntoResponse {
    let who = visitor_of(&headers);
    seen.lock().expect("lock").active.remove(&who);
    ([("tollgate-session", "end")], "bye")
}

async fn slow() -> impl IntoResponse {
    tokio::time::sleep(Duration::from_secs(5)).await;
    "late"
}

async fn echo_headers(headers: HeaderMap) -> impl IntoResponse {
    let mut map = serde_json::Map::new();
    for (k, v) in &headers {
        map.insert(k.to_string(), Value::from(v.to_str().unwrap_or("")));
    }
    axum::Json(Value::Object(map))
}

async fn upstream(seen: Shared) -> SocketAddr {
    let app = axum::Router::new()
        .route("/page", get(page))
        .route("/done", get(done))
        .route("/slow", get(slow))
        .route("/headers", get(echo_headers).post(echo_headers))
        .route("/healthz", get(|| async { (StatusCode::OK, "ok") }))
        .with_state(seen);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

fn room_config(upstream: SocketAddr, capacity: u32, extra: &str) -> String {
    format!(
        r#"
listen = "127.0.0.1:0"
proxy_listen = "127.0.0.1:0"
tokens = ["admin-token-0123456789"]

[rooms.shop]
upstream = "http://{upstream}"
capacity = {capacity}
cookie_keys = ["{KEY}"]
session_ttl = "1500ms"
grace = "3s"
status_rate = "50/s"
upstream_timeout_ms = 1000
bypass_paths = ["/healthz"]
{extra}
"#
    )
}

fn start(dir: &tempfile::TempDir, config: &str, redis: Option<&str>) -> Server {
    let path = dir.path().join(format!("tollgate-{}.toml", rand_suffix()));
    std::fs::write(&path, config).expect("write config");
    let s = Server::start_with(redis, &["--config", path.to_str().expect("path")]);
    assert!(s.proxy.is_some(), "no waiting-room address printed");
    s
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// A visitor with its own cookie jar (just the room's cookie).
struct Visitor {
    name: String,
    cookie: Option<String>,
}

struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    text: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null)
    }
}

impl Visitor {
    fn new(name: &str) -> Visitor {
        Visitor {
            name: name.to_owned(),
            cookie: None,
        }
    }

    async fn get(&mut self, c: &reqwest::Client, base: &str, path: &str, json: bool) -> Answer {
        let mut req = c.get(format!("{base}{path}")).header("x-visitor", &self.name);
        if json {
            req = req.header("accept", "application/json");
        }
        if let Some(cookie) = &self.cookie {
            req = req.header("cookie", format!("tollgate_shop={cookie}"));
        }
        self.send(req).await
    }

    async fn send(&mut self, req: reqwest::RequestBuilder) -> Answer {
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        for set in headers.get_all("set-cookie") {
            let text = set.to_str().expect("cookie");
            let value = text.split(';').next().and_then(|p| p.strip_prefix("tollgate_shop="));
            if let Some(v) = value {
                self.cookie = if v.is_empty() { None } else { Some(v.to_owned()) };
            }
        }
        Answer {
            status,
            headers,
            text: resp.text().await.unwrap_or_default(),
        }
    }
}

fn is_admitted(a: &Answer, who: &str) -> bool {
    a.status == 200 && a.text == format!("upstream page for {who}")
}

/// N = 3, 10 visitors: exactly 3 reach the upstream, the others wait at
/// positions 1..7 in arrival order; sessions end by the upstream's header,
/// through the admin API and by TTL, and the next in line are admitted in
/// FIFO order, never more than 3 active at once (checked at the upstream).
async fn ten_visitors_three_slots(redis: Option<&str>) {
    let seen: Shared = Arc::default();
    seen.lock().expect("lock").ttl = Some(Duration::from_millis(1500));
    let up = upstream(seen.clone()).await;
    let dir = tempfile::tempdir().expect("dir");
    let s = start(&dir, &room_config(up, 3, ""), redis);
    let proxy = s.proxy.clone().expect("proxy");
    let c = reqwest::Client::new();
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
    assert!(a.headers["content-type"].to_str().expect("ct").starts_with("text/html"));
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
                        assert!(is_admitted(&a, &v.name), "{} lost its session: {}", v.name, a.text);
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
    let session = seen.lock().expect("lock").sessions.get("v2").cloned().expect("v2's session id");
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
    let seen = seen.lock().expect("lock");
    assert!(seen.violations.is_empty(), "{:?}", seen.violations);
    assert_eq!(seen.first_seen, ["v1", "v2", "v3", "v4", "v5", "v6"]);
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
