//! The waiting-room tests' shared parts: a real upstream that records what
//! it sees, a room config, a `tollgate serve` with it, and a visitor with
//! its own cookie.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::Value;

use crate::serve_support::Server;

pub const KEY: &str = "test-cookie-key-0123456789abcdef0123456789";

/// What the upstream saw: which visitors are active (first request until
/// their session ended), the most active at once, and each one's
/// `Tollgate-Visitor` session id.
#[derive(Default)]
pub struct Seen {
    /// Visitor → time of its last request.
    pub active: BTreeMap<String, Instant>,
    pub most: usize,
    pub sessions: BTreeMap<String, String>,
    pub first_seen: Vec<String>,
    pub violations: Vec<String>,
    /// Every request to /page that carried a session: (session id, when).
    pub hits: Vec<(String, Instant)>,
    /// Sessions that end by TTL: a visitor idle this long is over.
    pub ttl: Option<Duration>,
    /// Requests that reached the site with an arrival challenge's
    /// solution (the header or the pass cookie): the room strips both.
    pub challenge_leaks: usize,
}

pub type Shared = Arc<Mutex<Seen>>;

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
    let cookies = headers
        .get("cookie")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if headers.contains_key("tollgate-challenge") || cookies.contains("_pass=") {
        s.challenge_leaks += 1;
    }
    let now = Instant::now();
    // A visitor idle past its session TTL has been let go by tollgate.
    if let Some(ttl) = s.ttl {
        s.active
            .retain(|_, last| now.duration_since(*last) + Duration::from_millis(50) < ttl);
    }
    if !s.active.contains_key(&who) {
        s.first_seen.push(who.clone());
    }
    s.active.insert(who.clone(), now);
    if let Some(session) = headers.get("tollgate-visitor").and_then(|v| v.to_str().ok()) {
        s.sessions.insert(who.clone(), session.to_owned());
        s.hits.push((session.to_owned(), now));
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

/// Any other path: the path the upstream got, and its headers.
async fn echo_path(uri: Uri, headers: HeaderMap) -> impl IntoResponse {
    let mut map = serde_json::Map::new();
    for (k, v) in &headers {
        map.insert(k.to_string(), Value::from(v.to_str().unwrap_or("")));
    }
    axum::Json(serde_json::json!({"path": uri.path(), "headers": map}))
}

async fn echo_headers(headers: HeaderMap) -> impl IntoResponse {
    let mut map = serde_json::Map::new();
    for (k, v) in &headers {
        map.insert(k.to_string(), Value::from(v.to_str().unwrap_or("")));
    }
    axum::Json(Value::Object(map))
}

/// Reads the whole body before answering (its length), so a body that
/// breaks half-way fails the request instead of racing an early answer.
async fn echo_body_length(body: axum::body::Bytes) -> String {
    body.len().to_string()
}

pub async fn upstream(seen: Shared) -> SocketAddr {
    let app = axum::Router::new()
        .route("/page", get(page))
        .route("/done", get(done))
        .route("/slow", get(slow))
        .route("/headers", get(echo_headers).post(echo_headers))
        .route("/body", axum::routing::post(echo_body_length))
        .route("/healthz", get(|| async { (StatusCode::OK, "ok") }))
        .fallback(echo_path)
        .with_state(seen);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// A fresh upstream (what it sees goes to the returned `Shared`) and a
/// temp dir for config files.
pub async fn site() -> (Shared, SocketAddr, tempfile::TempDir) {
    let seen: Shared = Arc::default();
    let up = upstream(seen.clone()).await;
    (seen, up, tempfile::tempdir().expect("dir"))
}

/// The time `ms` from now as RFC 3339 with milliseconds, UTC: an
/// `opens_at` for a schedule.
pub fn rfc3339_in(ms: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    chrono::DateTime::from_timestamp_millis(now + ms)
        .expect("time")
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

pub fn room_config(upstream: SocketAddr, capacity: u32, extra: &str) -> String {
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

/// A room with long sessions and a long grace (nobody leaves it by time)
/// and no cap on arrivals, with `extra` settings.
pub fn long_config(upstream: SocketAddr, capacity: u32, extra: &str) -> String {
    room_config(upstream, capacity, &format!("arrival_rate = \"off\"\n{extra}"))
        .replace("session_ttl = \"1500ms\"", "session_ttl = \"60s\"")
        .replace("grace = \"3s\"", "grace = \"60s\"")
}

/// The value of `name{room="shop"}` in `s`'s metrics (0 if absent).
pub async fn room_metric(s: &Server, name: &str) -> u64 {
    let text = s.metrics(Some("admin-token-0123456789")).await;
    let prefix = format!("{name}{{room=\"shop\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A waiting visitor's `GET /.tollgate/shop/status` with its `cookie`.
pub async fn status_of(c: &reqwest::Client, proxy: &str, cookie: &str) -> Value {
    c.get(format!("{proxy}/.tollgate/shop/status"))
        .header("cookie", format!("tollgate_shop={cookie}"))
        .send()
        .await
        .expect("status")
        .json()
        .await
        .expect("json")
}

pub fn start(dir: &tempfile::TempDir, config: &str, redis: Option<&str>) -> Server {
    let path = dir.path().join(format!("tollgate-{}.toml", rand_suffix()));
    std::fs::write(&path, config).expect("write config");
    let s = Server::start_with(redis, &["--config", path.to_str().expect("path")]);
    assert!(s.proxy.is_some(), "no waiting-room address printed");
    s
}

pub fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// A visitor with its own cookie jar (just the room's cookie).
pub struct Visitor {
    pub name: String,
    pub cookie: Option<String>,
}

pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null)
    }
}

impl Visitor {
    pub fn new(name: &str) -> Visitor {
        Visitor {
            name: name.to_owned(),
            cookie: None,
        }
    }

    pub async fn get(&mut self, c: &reqwest::Client, base: &str, path: &str, json: bool) -> Answer {
        self.try_get(c, base, path, json).await.expect("request")
    }

    /// `get`, or `None` if the request got no answer (the server is gone).
    pub async fn try_get(
        &mut self,
        c: &reqwest::Client,
        base: &str,
        path: &str,
        json: bool,
    ) -> Option<Answer> {
        let mut req = c.get(format!("{base}{path}")).header("x-visitor", &self.name);
        if json {
            req = req.header("accept", "application/json");
        }
        if let Some(cookie) = &self.cookie {
            req = req.header("cookie", format!("tollgate_shop={cookie}"));
        }
        self.try_send(req).await
    }

    pub async fn send(&mut self, req: reqwest::RequestBuilder) -> Answer {
        self.try_send(req).await.expect("request")
    }

    pub async fn try_send(&mut self, req: reqwest::RequestBuilder) -> Option<Answer> {
        let resp = req.send().await.ok()?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        for set in headers.get_all("set-cookie") {
            let text = set.to_str().expect("cookie");
            let value = text
                .split(';')
                .next()
                .and_then(|p| p.strip_prefix("tollgate_shop="));
            if let Some(v) = value {
                self.cookie = if v.is_empty() { None } else { Some(v.to_owned()) };
            }
        }
        Some(Answer {
            status,
            headers,
            text: resp.text().await.ok()?,
        })
    }
}

pub fn is_admitted(a: &Answer, who: &str) -> bool {
    a.status == 200 && a.text == format!("upstream page for {who}")
}

/// A room of one slot, taken: `s` (started with capacity 1), its proxy's
/// address, a client, and the visitor holding the slot.
pub async fn take_the_slot(s: Server) -> (Server, String, reqwest::Client, Visitor) {
    let proxy = s.proxy.clone().expect("proxy");
    let c = reqwest::Client::new();
    let mut holder = Visitor::new("holder");
    assert!(is_admitted(
        &holder.get(&c, &proxy, "/page", true).await,
        "holder"
    ));
    (s, proxy, c, holder)
}

/// Reads an HTTP head off `stream`, byte by byte (a tunnel follows it).
pub async fn head(stream: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).await.expect("read head");
        buf.push(byte[0]);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// Asks the room at `proxy` to upgrade a connection to the `echo`
/// protocol: the connection and the answer's head.
pub async fn open_tunnel(proxy: &str) -> (tokio::net::TcpStream, String) {
    use tokio::io::AsyncWriteExt;
    let mut conn = tokio::net::TcpStream::connect(proxy.trim_start_matches("http://"))
        .await
        .expect("connect");
    conn.write_all(b"GET /ws HTTP/1.1\r\nHost: shop\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
        .await
        .expect("request");
    let response = head(&mut conn).await;
    (conn, response)
}

/// Writes `text` as a page template in `dir`: the room's config line
/// `setting = "<its path>"`.
pub fn template(dir: &tempfile::TempDir, setting: &str, text: &str) -> String {
    let file = dir.path().join(format!("{setting}-{}.html", rand_suffix()));
    std::fs::write(&file, text).expect("write template");
    format!("{setting} = \"{}\"\n", file.display())
}
