//! The console's server side through `tollgate serve` (a separate process,
//! real HTTP), on the embedded store and on a real redis-server: the
//! pages' files and their headers, and the sampled series
//! (`/v1/console/series`, `/v1/console/live`) with their bad input.

mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use serve_support::{Server, send};
use support::RedisServer;

const CONFIG: &str = r#"
listen = "127.0.0.1:0"

[limits.api]
rate = "600/min"
burst = 2
"#;

fn start(redis: Option<&str>, dir: &tempfile::TempDir, extra: &str) -> Server {
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, format!("{extra}{CONFIG}")).expect("write config");
    Server::start_with(redis, &["--config", path.to_str().expect("path")])
}

/// Polls the series until `ok` holds for its last sample, or fails after
/// a generous deadline with what it last saw.
async fn until_sampled(
    c: &reqwest::Client,
    s: &Server,
    query: &str,
    ok: impl Fn(&Value, &Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = send(c.get(s.url(&format!("/v1/console/series?{query}")))).await;
        assert_eq!(status, 200, "{body}");
        if let Some(last) = body["samples"].as_array().and_then(|a| a.last())
            && ok(&body["fields"], last)
        {
            return body;
        }
        assert!(Instant::now() < deadline, "never sampled as expected: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The value of `field` in a sample row (`[at_ms, figures...]`).
fn figure(fields: &Value, row: &Value, field: &str) -> Value {
    let i = fields
        .as_array()
        .and_then(|f| f.iter().position(|x| x == field))
        .unwrap_or_else(|| panic!("no field {field} in {fields}"));
    row[i + 1].clone()
}

async fn series_follow_the_store(redis: Option<&str>) {
    let dir = tempfile::tempdir().expect("dir");
    let s = start(redis, &dir, "");
    let c = reqwest::Client::new();
    // Opening a series starts it: empty at first, with its fields and window.
    let (status, body) = send(c.get(s.url("/v1/console/series?kind=queue&name=mail"))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["window_s"], 900);
    assert_eq!(body["interval_ms"], 1000);
    assert_eq!(body["fields"][0], "ready");
    for i in 0..3 {
        let (st, b) = send(
            c.post(s.url("/v1/queues/mail/jobs"))
                .json(&json!({"payload": {"n": i}})),
        )
        .await;
        assert_eq!(st, 201, "{b}");
    }
    let body = until_sampled(&c, &s, "kind=queue&name=mail", |f, row| {
        figure(f, row, "ready") == 3 && figure(f, row, "pushed_per_s").is_number()
    })
    .await;
    // The samples are in time order, a second apart or so.
    let times: Vec<u64> = body["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .map(|r| r[0].as_u64().expect("at_ms"))
        .collect();
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");

    // A gate: holders and the line.
    let (st, b) = send(
        c.post(s.url("/v1/gates/door/enter"))
            .json(&json!({"capacity": 1})),
    )
    .await;
    assert_eq!((st, b["status"].as_str()), (200, Some("granted")), "{b}");
    let (_, b) = send(
        c.post(s.url("/v1/gates/door/enter"))
            .json(&json!({"capacity": 1})),
    )
    .await;
    assert_eq!(b["status"], "queued", "{b}");
    until_sampled(&c, &s, "kind=gate&name=door", |f, row| {
        figure(f, row, "holders") == 1 && figure(f, row, "waiting") == 1 && figure(f, row, "capacity") == 1
    })
    .await;

    // A limit: its decisions a second, counted by this server.
    until_sampled(&c, &s, "kind=limit&name=api", |_, _| true).await;
    for _ in 0..5 {
        let (st, _) = send(c.post(s.url("/v1/limits/api/check")).json(&json!({"key": "k"}))).await;
        assert!(st == 200 || st == 429, "{st}");
    }
    until_sampled(&c, &s, "kind=limit&name=api", |f, row| {
        figure(f, row, "refused_per_s").as_f64().is_some_and(|v| v > 0.0)
    })
    .await;

    // The overview counts what the server holds.
    until_sampled(&c, &s, "kind=overview", |f, row| {
        figure(f, row, "limits") == 1 && figure(f, row, "queues").as_u64() >= Some(1)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn series_follow_the_store_on_memory() {
    series_follow_the_store(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn series_follow_the_store_on_redis() {
    let redis = RedisServer::start();
    series_follow_the_store(Some(&redis.url())).await;
}

/// Reads Server-Sent Events off `resp` until one satisfies `ok`.
async fn until_event(resp: &mut reqwest::Response, ok: impl Fn(&str, &Value) -> bool) {
    let mut buf = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let chunk = tokio::time::timeout(left, resp.chunk())
            .await
            .unwrap_or_else(|_| panic!("no such event in 20 s; saw {buf}"))
            .expect("stream")
            .unwrap_or_else(|| panic!("stream ended; saw {buf}"));
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            let name = event
                .lines()
                .find_map(|l| l.strip_prefix("event:"))
                .unwrap_or("")
                .trim();
            let data = event
                .lines()
                .find_map(|l| l.strip_prefix("data:"))
                .unwrap_or("")
                .trim();
            if let Ok(v) = serde_json::from_str::<Value>(data)
                && ok(name, &v)
            {
                return;
            }
        }
    }
}

async fn live_pushes_each_sample(redis: Option<&str>) {
    let dir = tempfile::tempdir().expect("dir");
    let s = start(redis, &dir, "");
    let c = reqwest::Client::new();
    let mut resp = c
        .get(s.url("/v1/console/live?kind=queue&name=live"))
        .send()
        .await
        .expect("live");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().ok(),
        Some("text/event-stream")
    );
    // Fields: ready, delayed, in_flight, dead, ...
    until_event(&mut resp, |name, v| name == "sample" && v[1] == 0).await;
    let (st, b) = send(c.post(s.url("/v1/queues/live/jobs")).json(&json!({"payload": 1}))).await;
    assert_eq!(st, 201, "{b}");
    until_event(&mut resp, |name, v| name == "sample" && v[1] == 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_pushes_each_sample_on_memory() {
    live_pushes_each_sample(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_pushes_each_sample_on_redis() {
    let redis = RedisServer::start();
    live_pushes_each_sample(Some(&redis.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_series_queries_are_4xx_with_the_error_body() {
    let dir = tempfile::tempdir().expect("dir");
    let s = start(None, &dir, "");
    let c = reqwest::Client::new();
    let long = "x".repeat(300);
    for (query, status, code) in [
        ("kind=bogus&name=a", 400, "bad_request"),
        ("kind=", 400, "bad_request"),
        ("name=a", 400, "bad_request"),
        ("kind=gate", 400, "bad_request"),
        (&format!("kind=gate&name={long}") as &str, 400, "bad_request"),
        (&format!("kind=queue&name={long}"), 400, "bad_request"),
        (&format!("kind=schedule&name={long}"), 400, "bad_request"),
        ("kind=overview&name=a", 400, "bad_request"),
        ("kind=gate&name=a&extra=1", 400, "bad_request"),
        ("kind=room&name=nope", 404, "room_not_found"),
        ("kind=limit&name=nope", 404, "limit_not_found"),
    ] {
        for route in ["series", "live"] {
            let (st, body) = send(c.get(s.url(&format!("/v1/console/{route}?{query}")))).await;
            assert_eq!(
                (st, body["error"]["code"].as_str()),
                (status, Some(code)),
                "{route}?{query}: {body}"
            );
            assert!(body["error"]["message"].is_string(), "{body}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_are_embedded_with_strict_headers_and_the_data_needs_the_token() {
    let dir = tempfile::tempdir().expect("dir");
    let s = start(None, &dir, "tokens = [\"console-token-0123456789\"]\n");
    let c = reqwest::Client::new();
    for (path, kind) in [
        ("/ui", "text/html"),
        ("/ui/", "text/html"),
        ("/ui/index.html", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/lib.js", "text/javascript"),
        ("/ui/style.css", "text/css"),
    ] {
        // No token: a browser cannot send one with a page load.
        let resp = c.get(s.url(path)).send().await.expect("get");
        assert_eq!(resp.status().as_u16(), 200, "{path}");
        let h = resp.headers().clone();
        let header = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        assert!(header("content-type").starts_with(kind), "{path}: {h:?}");
        assert_eq!(header("cache-control"), "no-cache", "{path}");
        assert_eq!(header("x-frame-options"), "DENY", "{path}");
        assert_eq!(header("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(header("referrer-policy"), "no-referrer", "{path}");
        let csp = header("content-security-policy");
        for part in [
            "default-src 'self'",
            "script-src 'self'",
            "frame-ancestors 'none'",
        ] {
            assert!(csp.contains(part), "{path}: {csp}");
        }
        assert!(
            !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
            "{csp}"
        );
        // Revalidation: the same ETag answers 304.
        let etag = header("etag");
        assert!(etag.starts_with('"'), "{path}: {etag}");
        let again = c
            .get(s.url(path))
            .header("if-none-match", &etag)
            .send()
            .await
            .expect("get");
        assert_eq!(again.status().as_u16(), 304, "{path}");
        // Nothing from elsewhere: no CDN, no external font (the SVG
        // namespace is a name, not a fetch).
        let body = resp
            .text()
            .await
            .expect("text")
            .replace("http://www.w3.org/2000/svg", "");
        assert!(!body.contains("http://") && !body.contains("https://"), "{path}");
    }
    let html = c
        .get(s.url("/ui"))
        .send()
        .await
        .expect("get")
        .text()
        .await
        .expect("text");
    // Scripts only from files (the CSP forbids inline ones anyway).
    assert!(html.contains(r#"<script type="module" src="/ui/app.js"></script>"#));
    assert_eq!(html.matches("<script").count(), 1);
    let (st, body) = send(c.get(s.url("/ui/nope.js"))).await;
    assert_eq!((st, body["error"]["code"].as_str()), (404, Some("not_found")));
    // The data is behind the token.
    let (st, body) = send(c.get(s.url("/v1/console/series?kind=overview"))).await;
    assert_eq!((st, body["error"]["code"].as_str()), (401, Some("unauthorized")));
    let (st, _) = send(c.get(s.url("/v1/console/live?kind=overview"))).await;
    assert_eq!(st, 401);
    let (st, body) = send(
        c.get(s.url("/v1/console/series?kind=overview"))
            .bearer_auth("console-token-0123456789"),
    )
    .await;
    assert_eq!(st, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_streams_are_capped() {
    let dir = tempfile::tempdir().expect("dir");
    let s = start(None, &dir, "");
    let c = reqwest::Client::new();
    let mut open = Vec::new();
    for _ in 0..64 {
        let resp = c
            .get(s.url("/v1/console/live?kind=overview"))
            .send()
            .await
            .expect("live");
        assert_eq!(resp.status().as_u16(), 200);
        open.push(resp);
    }
    let (st, body) = send(c.get(s.url("/v1/console/live?kind=overview"))).await;
    assert_eq!(
        (st, body["error"]["code"].as_str()),
        (503, Some("too_many_streams")),
        "{body}"
    );
    // A closed stream gives its place back.
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let resp = c
            .get(s.url("/v1/console/live?kind=overview"))
            .send()
            .await
            .expect("live");
        if resp.status().as_u16() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the place never came back");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_load_before_the_store_answers_and_the_data_says_why_not() {
    // A Redis nobody listens on: the server waits for it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let url = format!("redis://127.0.0.1:{port}");
    let s = Server::spawn(Server::command(Some(&url), &[]), std::process::Stdio::null());
    let c = reqwest::Client::new();
    let resp = c.get(s.url("/ui")).send().await.expect("get");
    assert_eq!(resp.status().as_u16(), 200);
    assert!(
        resp.headers()["content-security-policy"]
            .to_str()
            .is_ok_and(|v| v.contains("default-src 'self'"))
    );
    let (st, body) = send(c.get(s.url("/v1/console/series?kind=overview"))).await;
    assert_eq!(
        (st, body["error"]["code"].as_str()),
        (503, Some("store_unavailable")),
        "{body}"
    );
}
