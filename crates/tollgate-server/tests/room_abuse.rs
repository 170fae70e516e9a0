//! The waiting room under abuse: paths spelled to dodge matching, tunnels,
//! spoofed forwarding headers, floods of arrivals, one token opening many
//! event streams, broken bodies, and the admin API's edges. `tollgate serve` as a separate process in front of a
//! real upstream; raw TCP where a client library would tidy the request up.

mod room_support;
mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::time::Duration;

use room_support::*;
use serde_json::{Value, json};
use serve_support::send;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ADMIN: &str = "admin-token-0123456789";

/// An answer read off the wire.
struct Raw {
    status: u16,
    head: String,
    body: String,
}

impl Raw {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// Sends `request` (whole, as bytes) to `base` and reads the answer until
/// the server closes (the request should say `Connection: close`).
async fn raw(base: &str, request: &str) -> Raw {
    let addr = base.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(request.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    // Bodies here are small; a chunked one is de-chunked crudely.
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body.split("\r\n")
            .enumerate()
            .filter(|(i, _)| i % 2 == 1)
            .map(|(_, l)| l)
            .collect()
    } else {
        body.to_owned()
    };
    Raw {
        status,
        head: head.to_owned(),
        body,
    }
}

fn get(path: &str, extra: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: shop.test\r\nAccept: application/json\r\n{extra}Connection: close\r\n\r\n"
    )
}

fn admin(
    c: &reqwest::Client,
    s: &serve_support::Server,
    method: reqwest::Method,
    path: &str,
) -> reqwest::RequestBuilder {
    c.request(method, s.url(path)).bearer_auth(ADMIN)
}

/// The room that answered, by the cookie it set.
fn room_of(r: &Raw) -> Option<String> {
    r.head.lines().find_map(|l| {
        let v = l.strip_prefix("set-cookie: tollgate_")?;
        Some(v.split('=').next()?.to_owned())
    })
}

/// `/static/../checkout` and its encoded spellings do not pass a paused
/// room as "static"; `/x/../vip/page` is the vip room's; `/vipx` is not;
/// what still reads two ways is a 400; the upstream gets the normal form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_are_normalised_before_matching() {
    let (_seen, up, dir) = site().await;
    let config = room_config(up, 1, r#"bypass_paths = ["/healthz", "/static/"]"#)
        .replace("bypass_paths = [\"/healthz\"]\n", "")
        + &format!(
            r#"
[rooms.vip]
upstream = "http://{up}"
path_prefix = "/vip"
capacity = 100
cookie_keys = ["{KEY}"]
"#
        );
    let s = start(&dir, &config, None);
    let proxy = s.proxy.clone().expect("proxy");
    let c = reqwest::Client::new();
    let (status, _) = send(admin(&c, &s, reqwest::Method::POST, "/v1/rooms/shop/pause")).await;
    assert_eq!(status, 200);

    // Bypassed: the asset, however its slashes are spelled.
    for path in [
        "/static/app.js",
        "/static//app.js",
        "/static/./app.js",
        "/%73tatic/app.js",
    ] {
        let r = raw(&proxy, &get(path, "")).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        assert_eq!(r.json()["path"], "/static/app.js", "{path}");
    }
    // Not bypassed: a paused room queues them, and the upstream sees none.
    for path in [
        "/static/../checkout",
        "/static/%2e%2e/checkout",
        "/static/%2E./checkout",
        "/static/.%2e/checkout",
        "/staticx/app.js",
        "/static",
    ] {
        let r = raw(&proxy, &get(path, "")).await;
        if path == "/static" {
            // The prefix itself, by whole segments, is bypassed.
            assert_eq!(r.status, 200, "{path}");
            continue;
        }
        assert_eq!(r.status, 503, "{path} passed a paused room: {}", r.body);
        assert_eq!(r.json()["status"], "queued", "{path}");
    }
    // Read two ways: refused.
    for path in [
        "/static/..\\checkout",
        "/static/..%2fcheckout",
        "/static/%5c../checkout",
        "/a%00",
        "/a%zz",
        "/static/..;/checkout",
        "/static/%2e%2e;x/checkout",
    ] {
        let r = raw(&proxy, &get(path, "")).await;
        assert_eq!(r.status, 400, "{path}: {}", r.body);
    }
    // The vip room by whole segments, after resolving.
    let r = raw(&proxy, &get("/x/../vip/page", "")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["path"], "/vip/page");
    assert_eq!(room_of(&r).as_deref(), Some("vip"));
    let r = raw(&proxy, &get("//vip//page?q=1", "")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["path"], "/vip/page");
    // ;parameters are dropped for matching, as Tomcat, Jetty and Spring
    // drop them, and kept for the site.
    let r = raw(&proxy, &get("/vip;x/page", "")).await;
    assert_eq!(room_of(&r).as_deref(), Some("vip"));
    assert_eq!(r.json()["path"], "/vip;x/page");
    let r = raw(&proxy, &get("/static;x/app.js", "")).await;
    assert_eq!(
        (r.status, r.json()["path"].clone()),
        (200, json!("/static;x/app.js")),
        "bypassed"
    );
    let r = raw(&proxy, &get("/vipx", "")).await;
    assert_eq!(r.status, 503, "/vipx is the paused shop's, not vip's");
    assert_eq!(room_of(&r).as_deref(), Some("shop"));
    // The rooms' own endpoints are found after normalising too.
    let r = raw(&proxy, &get("/x/../.tollgate/shop/status", "")).await;
    assert_eq!(r.json()["status"], "none");
}

/// Only websocket upgrades pass (the default list); h2c and the rest are
/// refused; a bypassed path never upgrades; CONNECT is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_listed_upgrades_pass() {
    let (_seen, up, dir) = site().await;
    let s = start(&dir, &room_config(up, 100, ""), None);
    let proxy = s.proxy.clone().expect("proxy");
    let h2c =
        "Upgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n";
    let r = raw(&proxy, &get("/page", h2c)).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("h2c"), "{}", r.body);
    let r = raw(&proxy, &get("/healthz", h2c)).await;
    assert_eq!(r.status, 400);
    let ws = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";
    let r = raw(&proxy, &get("/healthz", ws)).await;
    assert_eq!(r.status, 400, "no upgrade on a bypassed path: {}", r.body);
    let r = raw(
        &proxy,
        "CONNECT upstream.test:80 HTTP/1.1\r\nHost: upstream.test:80\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 405);
    // A plain request is untouched by all this.
    let r = raw(&proxy, &get("/healthz", "")).await;
    assert_eq!(r.status, 200);
}

/// What a client spells with `_` for `-` to reach a CGI or WSGI upstream
/// as `HTTP_TOLLGATE_VISITOR`, `HTTP_X_FORWARDED_FOR`...
const UNDERSCORED: [&str; 5] = [
    "tollgate_visitor",
    "tollgate_token",
    "x_forwarded_for",
    "x_forwarded_host",
    "x_real_ip",
];

/// Those spellings never reach the upstream (from a trusted proxy
/// neither); another header with `_` in its name does.
fn no_underscored_spoofs(h: &Value) {
    for dropped in UNDERSCORED {
        assert!(h.get(dropped).is_none(), "{dropped}: {h}");
    }
    assert_eq!(h["my_header"], "kept", "{h}");
}

/// A client's own X-Forwarded-* and Forwarded never reach the upstream
/// unless it is a trusted proxy, whose chain is extended; spelt with
/// underscores, never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_headers_are_replaced_unless_trusted() {
    let (_seen, up, dir) = site().await;
    let spoof = "X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Host: evil.test\r\nX-Forwarded-Proto: https\r\n\
                 X-Forwarded-Port: 443\r\nForwarded: for=6.6.6.6;host=evil.test\r\nX-Real-IP: 6.6.6.6\r\n\
                 X-Forwarded-Ssl: on\r\nX-Forwarded-Prefix: /admin\r\nConnection: tollgate-visitor\r\n\
                 Tollgate_Visitor: victim\r\nTollgate_Token: forged\r\nX_Forwarded_For: 6.6.6.6\r\n\
                 X_Forwarded_Host: evil.test\r\nX_Real_IP: 6.6.6.6\r\nMy_Header: kept\r\n";
    let s = start(&dir, &room_config(up, 100, ""), None);
    let r = raw(&s.proxy.clone().expect("proxy"), &get("/headers", spoof)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let h = r.json();
    no_underscored_spoofs(&h);
    assert_eq!(h["x-forwarded-for"], "127.0.0.1", "{h}");
    assert_eq!(h["x-forwarded-host"], "shop.test", "{h}");
    assert_eq!(h["x-forwarded-proto"], "http", "{h}");
    assert_eq!(h["x-real-ip"], "127.0.0.1", "{h}");
    for dropped in [
        "forwarded",
        "x-forwarded-port",
        "x-forwarded-ssl",
        "x-forwarded-prefix",
    ] {
        assert!(h.get(dropped).is_none(), "{dropped}: {h}");
    }
    // Naming it in Connection does not strip the room's own header.
    assert!(
        h["tollgate-visitor"].as_str().is_some_and(|v| !v.is_empty()),
        "{h}"
    );

    let trusted = start(
        &dir,
        &room_config(up, 100, r#"trusted_proxies = ["127.0.0.1/32"]"#),
        None,
    );
    let r = raw(&trusted.proxy.clone().expect("proxy"), &get("/headers", spoof)).await;
    let h = r.json();
    assert_eq!(h["x-forwarded-for"], "6.6.6.6, 127.0.0.1", "{h}");
    assert_eq!(h["x-forwarded-host"], "evil.test", "{h}");
    assert_eq!(h["x-forwarded-proto"], "https", "{h}");
    assert_eq!(h["x-real-ip"], "6.6.6.6", "{h}");
    no_underscored_spoofs(&h);
}

/// One cookieless client cannot fill the line: arrivals from one address
/// are capped (429, no place taken, not cached), others still get in line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arrivals_from_one_address_are_capped() {
    let (_seen, up, dir) = site().await;
    let s = start(
        &dir,
        &room_config(up, 1, r#"arrival_rate = "5/s""#).replace("grace = \"3s\"", "grace = \"30s\""),
        None,
    );
    let proxy = s.proxy.clone().expect("proxy");
    let c = reqwest::Client::new();
    let mut limited = 0;
    let mut queued = 0;
    for i in 0..60 {
        let mut v = Visitor::new(&format!("flood{i}"));
        let a = v.get(&c, &proxy, "/page", true).await;
        match a.status {
            429 => {
                limited += 1;
                assert!(a.headers.contains_key("retry-after"));
                assert_eq!(a.headers["cache-control"], "no-store");
                assert!(v.cookie.is_none(), "a refused arrival holds no place");
            }
            503 => queued += 1,
            200 => {}
            other => panic!("unexpected {other}: {}", a.text),
        }
    }
    assert!(limited >= 40, "only {limited} of 60 arrivals were capped");
    let (_, stats) = send(admin(&c, &s, reqwest::Method::GET, "/v1/rooms/shop")).await;
    let waiting = stats["waiting"].as_u64().expect("waiting");
    assert_eq!(waiting, queued, "{stats}");
    assert!(waiting <= 15, "the flood took {waiting} places: {stats}");
    // Another address is not held back by the first one's flood.
    let r = raw(&proxy, &get("/page", "")).await;
    assert_eq!(r.status, 429, "same address, still capped");
    let other = start(
        &dir,
        &room_config(
            up,
            1,
            r#"arrival_rate = "5/s"
trusted_proxies = ["127.0.0.1/32"]"#,
        ),
        None,
    );
    let other_proxy = other.proxy.clone().expect("proxy");
    let r = raw(&other_proxy, &get("/page", "X-Forwarded-For: 10.1.2.3\r\n")).await;
    assert_ne!(r.status, 429, "{}", r.body);
    // IPv6 by its /64: rotating addresses within it buys nothing.
    let mut codes = Vec::new();
    for i in 1..=12 {
        let from = format!("X-Forwarded-For: 2001:db8:1:2::{i:x}\r\n");
        codes.push(raw(&other_proxy, &get("/page", &from)).await.status);
    }
    assert!(codes.iter().filter(|c| **c == 429).count() >= 5, "{codes:?}");
}

/// Commands the Redis at `redis` ran in a window of 2 s.
async fn commands_in_two_seconds(redis: &support::RedisServer) -> u64 {
    let processed = || {
        let info = match redis.command(&["INFO", "stats"]) {
            redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
            redis::Value::VerbatimString { text, .. } => text,
            other => panic!("INFO: {other:?}"),
        };
        info.lines()
            .find_map(|l| l.strip_prefix("total_commands_processed:"))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .expect("total_commands_processed")
    };
    let before = processed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    processed() - before
}

/// A waiting visitor's event stream (the room's `events`), opened, and
/// read to its first event.
async fn open_stream(c: &reqwest::Client, proxy: &str, v: &Visitor) -> (u16, reqwest::Response) {
    let cookie = format!("tollgate_shop={}", v.cookie.clone().expect("a place in line"));
    let resp = c
        .get(format!("{proxy}/.tollgate/shop/events"))
        .header("cookie", cookie)
        .send()
        .await
        .expect("events");
    (resp.status().as_u16(), resp)
}

/// Reads `resp` (an event stream) until it has said `what`.
async fn read_until(resp: &mut reqwest::Response, what: &str) -> String {
    let mut text = String::new();
    while !text.contains(what) {
        let chunk = tokio::time::timeout(Duration::from_secs(5), resp.chunk())
            .await
            .unwrap_or_else(|_| panic!("no {what:?} in time: {text}"))
            .expect("chunk")
            .expect("more");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    text
}

/// One waiting visitor's token opens few event streams: past 4 on a
/// server, 429 `too_many_streams` with `Retry-After` (its place kept); the
/// ones open share one reader of its status, so the store does not work
/// harder for them (on Redis: the commands it runs stay where one stream
/// put them); they count in `max_event_subscribers`; and every one of them
/// hears the admission.
async fn a_waiting_token_opens_few_streams(redis: Option<&support::RedisServer>) {
    let (_seen, up, dir) = site().await;
    let config = format!(
        "max_event_subscribers = 6\n{}",
        room_config(up, 1, "").replace("session_ttl = \"1500ms\"", "session_ttl = \"60s\"")
    );
    let s = start(&dir, &config, redis.map(support::RedisServer::url).as_deref());
    let (_s, proxy, c, mut holder) = take_the_slot(s).await;
    let mut waiter = Visitor::new("waiter");
    assert_eq!(waiter.get(&c, &proxy, "/page", true).await.status, 503);
    let (status, mut first) = open_stream(&c, &proxy, &waiter).await;
    assert_eq!(status, 200);
    read_until(&mut first, "event: position").await;
    let base = match redis {
        Some(r) => commands_in_two_seconds(r).await,
        None => 0,
    };
    let opened = futures_util::future::join_all((0..40).map(|_| open_stream(&c, &proxy, &waiter))).await;
    let mut open = vec![first];
    for (status, resp) in opened {
        if status == 200 {
            open.push(resp);
            continue;
        }
        assert_eq!(status, 429);
        assert!(resp.headers().contains_key("retry-after"));
        let body: Value = resp.json().await.expect("a JSON error");
        assert_eq!(body["error"]["code"], "too_many_streams", "{body}");
    }
    assert_eq!(open.len(), 4, "streams open for one token");
    if let Some(r) = redis {
        let with = commands_in_two_seconds(r).await;
        // Two script calls a second per stream, before: 3 more streams
        // would have added 12 (and 2,000, 8,000).
        assert!(
            with <= base + base / 4 + 4,
            "{base} commands in 2 s with one stream, {with} with four"
        );
    }
    // The place is kept, and other visitors are not held back by it; but
    // the server's max_event_subscribers (6) counts every stream.
    let status = waiter
        .get(&c, &proxy, "/.tollgate/shop/status", true)
        .await
        .json();
    assert_eq!(status["status"], "queued", "{status}");
    let mut others = Vec::new();
    for i in 0..3 {
        let mut v = Visitor::new(&format!("other{i}"));
        assert_eq!(v.get(&c, &proxy, "/page", true).await.status, 503);
        others.push(open_stream(&c, &proxy, &v).await);
    }
    let statuses: Vec<u16> = others.iter().map(|(st, _)| *st).collect();
    assert_eq!(statuses, [200, 200, 503], "past max_event_subscribers");
    let (_, refused) = others.pop().expect("three");
    assert!(refused.headers().contains_key("retry-after"));
    let body: Value = refused.json().await.expect("a JSON error");
    assert_eq!(body["error"]["code"], "too_many_subscribers", "{body}");
    // The holder leaves: every stream of the waiter hears it.
    assert_eq!(holder.get(&c, &proxy, "/done", true).await.text, "bye");
    for resp in &mut open {
        read_until(resp, "event: admitted").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_token_opens_few_event_streams_on_memory() {
    a_waiting_token_opens_few_streams(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_token_opens_few_event_streams_on_redis() {
    let redis = support::RedisServer::start();
    a_waiting_token_opens_few_streams(Some(&redis)).await;
}

/// A status-limited waiter's 429 page is not cached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_limited_page_is_not_cached() {
    let (_seen, up, dir) = site().await;
    let (_s, proxy, c, _holder) = take_the_slot(start(
        &dir,
        &room_config(up, 1, "").replace("status_rate = \"50/s\"", "status_rate = \"1/m\""),
        None,
    ))
    .await;
    let mut waiter = Visitor::new("waiter");
    assert_eq!(waiter.get(&c, &proxy, "/page", false).await.status, 503);
    let _ = waiter.get(&c, &proxy, "/page", false).await;
    let a = waiter.get(&c, &proxy, "/page", false).await;
    assert_eq!(a.status, 429, "{}", a.text);
    assert_eq!(a.headers["cache-control"], "no-store");
    assert!(
        a.headers["content-type"]
            .to_str()
            .expect("type")
            .starts_with("text/html")
    );
}

/// The admin API: ending a waiting visitor's session says so (not 404);
/// an unknown one is a 404; admission_rate needs a value and refuses
/// what it cannot pace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_edges() {
    let (_seen, up, dir) = site().await;
    let (s, proxy, c, _holder) = take_the_slot(start(
        &dir,
        &room_config(up, 1, "").replace("grace = \"3s\"", "grace = \"30s\""),
        None,
    ))
    .await;
    let mut waiter = Visitor::new("waiter");
    assert_eq!(waiter.get(&c, &proxy, "/page", true).await.status, 503);
    let ticket = waiter
        .cookie
        .as_deref()
        .and_then(|t| t.split('.').nth(3))
        .expect("ticket in the token")
        .to_owned();
    let path = format!("/v1/rooms/shop/sessions/{ticket}");
    let (status, body) = send(admin(&c, &s, reqwest::Method::DELETE, &path)).await;
    assert_eq!((status, &body), (200, &json!({"ended": true, "was": "waiting"})));
    let (status, body) = send(admin(&c, &s, reqwest::Method::DELETE, &path)).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "session_not_found");
    let (_, stats) = send(admin(&c, &s, reqwest::Method::GET, "/v1/rooms/shop")).await;
    assert_eq!(stats["waiting"], 0);

    let rate = |body: Value| admin(&c, &s, reqwest::Method::PUT, "/v1/rooms/shop/admission_rate").json(&body);
    let (status, body) = send(rate(json!({"per_minute": 60}))).await;
    assert_eq!((status, &body["admissions_per_minute"]), (200, &json!(60)));
    let (status, body) = send(rate(json!({}))).await;
    assert_eq!(status, 400, "{{}} must not remove pacing: {body}");
    assert_eq!(body["error"]["code"], "bad_request");
    let (_, stats) = send(admin(&c, &s, reqwest::Method::GET, "/v1/rooms/shop")).await;
    assert_eq!(stats["admissions_per_minute"], 60, "the cap stayed");
    for huge in [6_001u64, 100_000, u64::from(u32::MAX)] {
        let (status, body) = send(rate(json!({ "per_minute": huge }))).await;
        assert_eq!(status, 400, "{huge}: {body}");
    }
    let (status, body) = send(rate(json!({"per_minute": 6_000}))).await;
    assert_eq!((status, &body["admissions_per_minute"]), (200, &json!(6000)));
    let (status, body) = send(rate(json!({"per_minute": null}))).await;
    assert_eq!((status, &body["admissions_per_minute"]), (200, &Value::Null));
}

/// A visitor's malformed chunked body is a 400, not "the site cannot be
/// reached". The upstream route reads the whole body before it answers
/// (`/headers` did not, and sometimes answered 200 before the bad chunk
/// arrived).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_body_is_the_visitors_fault() {
    let (_seen, up, dir) = site().await;
    let s = start(&dir, &room_config(up, 100, ""), None);
    let proxy = s.proxy.clone().expect("proxy");
    let r = raw(
        &proxy,
        "POST /body HTTP/1.1\r\nHost: shop.test\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
         5\r\nhello\r\nZZZ\r\nnot a chunk\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 400, "{}\n{}", r.head, r.body);
    let r = raw(
        &proxy,
        "POST /body HTTP/1.1\r\nHost: shop.test\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
         5\r\nhello\r\n0\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 200, "a good chunked body passes: {}", r.body);
    assert_eq!(r.body, "5", "the upstream read the whole body");
}
