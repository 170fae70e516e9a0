//! `tollgate serve` as a separate process, over real HTTP, on the embedded
//! store and on a real redis-server.

mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use serve_support::{Server, send};
use support::RedisServer;

async fn enter(c: &reqwest::Client, s: &Server, gate: &str, body: Value) -> (u16, Value) {
    send(c.post(s.url(&format!("/v1/gates/{gate}/enter"))).json(&body)).await
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_else(|| panic!("no {key} in {v}"))
}

/// The seed scenario: one holder per resource, the rest wait in line.
async fn seed_scenario(s: &Server) {
    let c = reqwest::Client::new();
    // user 1 takes title A; user 2 queues for A.
    let (st, u1) = enter(
        &c,
        s,
        "title-A",
        json!({"capacity": 1, "ttl_ms": 30000, "label": "user 1"}),
    )
    .await;
    assert_eq!((st, str_of(&u1, "status")), (200, "granted"), "{u1}");
    let (st, held) = send(c.get(s.url("/v1/gates/title-A/holders"))).await;
    assert_eq!(st, 200, "{held}");
    assert_eq!(held["holders"][0]["label"].as_str(), Some("user 1"), "{held}");
    let (st, u2) = enter(&c, s, "title-A", json!({"capacity": 1, "ttl_ms": 1000})).await;
    assert_eq!((st, str_of(&u2, "status")), (200, "queued"), "{u2}");
    assert_eq!(
        (u2["position"].as_u64(), u2["waiting"].as_u64()),
        (Some(1), Some(1))
    );
    // A global "one request at a time" step, held briefly by someone else,
    // does not hold up user 3, who gets title B at once.
    let (_, global) = enter(&c, s, "global", json!({"capacity": 1})).await;
    assert_eq!(str_of(&global, "status"), "granted");
    let asked = Instant::now();
    let (st, u3) = enter(&c, s, "title-B", json!({"capacity": 1})).await;
    assert_eq!((st, str_of(&u3, "status")), (200, "granted"), "{u3}");
    assert!(asked.elapsed() < Duration::from_millis(500));
    let token = str_of(&global, "token");
    assert_eq!(
        send(c.delete(s.url(&format!("/v1/gates/global/leases/{token}"))))
            .await
            .0,
        200
    );

    // User 2 long-polls; user 1 releases early; the long-poll answers.
    let ticket = str_of(&u2, "ticket").to_owned();
    let poll = {
        let (c, url) = (
            c.clone(),
            s.url(&format!("/v1/gates/title-A/tickets/{ticket}?wait_ms=10000")),
        );
        tokio::spawn(async move {
            let r = send(c.get(url)).await;
            (r, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    let token = str_of(&u1, "token");
    let (st, body) = send(c.delete(s.url(&format!("/v1/gates/title-A/leases/{token}")))).await;
    assert_eq!(st, 200, "{body}");
    let ((st, granted), at) = poll.await.expect("poll task");
    assert_eq!((st, str_of(&granted, "status")), (200, "granted"), "{granted}");
    let took = at.duration_since(released);
    assert!(
        took < Duration::from_millis(100),
        "long-poll answered {took:?} after the release"
    );
    assert!(granted["fence"].as_u64() > u1["fence"].as_u64());
    assert_eq!(granted["ttl_ms"].as_u64(), Some(1000));

    // User 4 queues; user 2's hold ends without a release; user 4 is next.
    let (_, u4) = enter(&c, s, "title-A", json!({"capacity": 1})).await;
    assert_eq!(str_of(&u4, "status"), "queued");
    let ticket4 = str_of(&u4, "ticket");
    let started = Instant::now();
    let (st, got) = send(c.get(s.url(&format!("/v1/gates/title-A/tickets/{ticket4}?wait_ms=10000")))).await;
    assert_eq!((st, str_of(&got, "status")), (200, "granted"), "{got}");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_secs(4),
        "{waited:?}"
    );
    let (_, stats) = send(c.get(s.url("/v1/gates/title-A"))).await;
    assert_eq!(
        (stats["holders"].as_u64(), stats["expiries"].as_u64()),
        (Some(1), Some(1)),
        "{stats}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_scenario_on_the_embedded_store() {
    seed_scenario(&Server::start(None)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_scenario_on_redis() {
    let redis = RedisServer::start();
    seed_scenario(&Server::start(Some(&redis.url()))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_json_error_never_a_500() {
    let s = Server::start(None);
    let c = reqwest::Client::new();
    let raw = |body: &'static str| {
        c.post(s.url("/v1/gates/g/enter"))
            .header("content-type", "application/json")
            .body(body)
    };
    let cases: Vec<(reqwest::RequestBuilder, u16, &str)> = vec![
        (raw("{not json"), 400, "bad_request"),
        (raw(r#"{"permits": -1}"#), 400, "bad_request"),
        (raw(r#"{"surprise": 1}"#), 400, "bad_request"),
        (raw(r#"{"capacity": 0}"#), 400, "bad_request"),
        (raw(r#"{"capacity": 1, "ttl_ms": 0}"#), 400, "bad_request"),
        (
            raw(r#"{"capacity": 1, "ttl_ms": 999999999999}"#),
            400,
            "bad_request",
        ),
        (raw(r#"{"capacity": 1, "permits": 2}"#), 400, "bad_request"),
        (
            c.post(s.url("/v1/gates/g/enter")).body("{}"),
            415,
            "unsupported_media_type",
        ),
        (
            c.post(s.url("/v1/gates/g/enter"))
                .header("content-type", "application/json")
                .body(format!("{{\"pad\": \"{}\"}}", "x".repeat(20_000))),
            413,
            "payload_too_large",
        ),
        (
            c.post(s.url("/v1/gates/bad%20name/enter")).json(&json!({})),
            400,
            "bad_request",
        ),
        (
            c.post(s.url(&format!("/v1/gates/{}/enter", "n".repeat(200))))
                .json(&json!({})),
            400,
            "bad_request",
        ),
        (c.get(s.url("/v1/gates/g/tickets/nonsense")), 400, "bad_request"),
        (
            c.get(s.url("/v1/gates/g/tickets/abc.1000.1000?wait_ms=600000")),
            400,
            "bad_request",
        ),
        (
            c.get(s.url("/v1/gates/g/tickets/abc.1000.1000?wait_ms=soon")),
            400,
            "bad_request",
        ),
        (
            c.get(s.url("/v1/gates/g/tickets/abc.1000.1000")),
            404,
            "ticket_not_found",
        ),
        (c.delete(s.url("/v1/gates/g/leases/abc")), 404, "lease_not_found"),
        (
            c.post(s.url("/v1/gates/g/leases/abc/renew")).json(&json!({})),
            404,
            "lease_not_found",
        ),
        (
            c.put(s.url("/v1/gates/g/capacity")).json(&json!({"capacity": 0})),
            400,
            "bad_request",
        ),
        (c.get(s.url("/v2/anything")), 404, "not_found"),
        (c.patch(s.url("/v1/gates/g")), 405, "method_not_allowed"),
    ];
    for (req, status, code) in cases {
        let (st, body) = send(req).await;
        assert_eq!(st, status, "{body}");
        assert_eq!(body["error"]["code"].as_str(), Some(code), "{body}");
        assert!(
            body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{body}"
        );
    }
    // A conflicting capacity is a 409 that names the stored one.
    enter(&c, &s, "sized", json!({"capacity": 2})).await;
    let (st, body) = enter(&c, &s, "sized", json!({"capacity": 3})).await;
    assert_eq!(
        (st, body["error"]["code"].as_str()),
        (409, Some("capacity_conflict")),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_long_poll_keeps_its_place_until_the_heartbeat_lapses() {
    let s = Server::start(None);
    let c = reqwest::Client::new();
    enter(&c, &s, "line", json!({"capacity": 1})).await;
    let (_, t) = enter(&c, &s, "line", json!({"capacity": 1, "heartbeat_ms": 1500})).await;
    let ticket = str_of(&t, "ticket").to_owned();
    let url = s.url(&format!("/v1/gates/line/tickets/{ticket}"));
    // Start a long-poll and walk away from it.
    let poll = tokio::spawn({
        let (c, url) = (c.clone(), format!("{url}?wait_ms=30000"));
        async move { send(c.get(url)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    poll.abort();
    // Still in line shortly after (a plain GET is itself a heartbeat, so
    // only look once).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (st, body) = send(c.get(&url)).await;
    assert_eq!((st, str_of(&body, "status")), (200, "queued"), "{body}");
    // Then silence past the heartbeat grace: the ticket leaves the line.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let (st, body) = send(c.get(&url)).await;
    assert_eq!(st, 404, "{body}");
    let (_, stats) = send(c.get(s.url("/v1/gates/line"))).await;
    assert_eq!(stats["waiting"].as_u64(), Some(0), "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_outage_is_a_503_with_retry_after_and_service_resumes() {
    let mut redis = RedisServer::start();
    let s = Server::start(Some(&redis.url()));
    let c = reqwest::Client::new();
    assert_eq!(send(c.get(s.url("/readyz"))).await.0, 200);
    redis.kill();
    let resp = c
        .post(s.url("/v1/gates/g/enter"))
        .json(&json!({"capacity": 1}))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status().as_u16(), 503);
    assert_eq!(
        resp.headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap_or("")),
        Some("1")
    );
    let body: Value = resp.json().await.expect("json");
    assert_eq!(
        body["error"]["code"].as_str(),
        Some("store_unavailable"),
        "{body}"
    );
    assert_eq!(send(c.get(s.url("/readyz"))).await.0, 503);
    assert_eq!(send(c.get(s.url("/healthz"))).await.0, 200);
    let text = c
        .get(s.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        text.contains(r#"tollgate_store_errors_total{code="store_unavailable"}"#),
        "{text}"
    );
    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (st, body) = enter(&c, &s, "g", json!({"capacity": 1})).await;
        if st == 200 {
            assert_eq!(str_of(&body, "status"), "granted");
            break;
        }
        assert_eq!(st, 503, "{body}");
        assert!(Instant::now() < deadline, "no recovery");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(send(c.get(s.url("/readyz"))).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_redis_share_their_gates() {
    let redis = RedisServer::start();
    let (one, two) = (
        Server::start(Some(&redis.url())),
        Server::start(Some(&redis.url())),
    );
    let c = reqwest::Client::new();
    let (_, held) = enter(&c, &one, "shared", json!({"capacity": 1})).await;
    assert_eq!(str_of(&held, "status"), "granted");
    let (_, queued) = enter(&c, &two, "shared", json!({"capacity": 1})).await;
    assert_eq!(
        str_of(&queued, "status"),
        "queued",
        "the other server sees the holder"
    );
    let ticket = str_of(&queued, "ticket").to_owned();
    let poll = tokio::spawn({
        let (c, url) = (
            c.clone(),
            two.url(&format!("/v1/gates/shared/tickets/{ticket}?wait_ms=10000")),
        );
        async move { (send(c.get(url)).await, Instant::now()) }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    let token = str_of(&held, "token");
    assert_eq!(
        send(c.delete(one.url(&format!("/v1/gates/shared/leases/{token}"))))
            .await
            .0,
        200
    );
    let ((st, got), at) = poll.await.expect("poll");
    assert_eq!((st, str_of(&got, "status")), (200, "granted"), "{got}");
    let took = at.duration_since(released);
    assert!(
        took < Duration::from_millis(100),
        "hand-off across servers took {took:?}"
    );
    let (_, stats) = send(c.get(one.url("/v1/gates/shared"))).await;
    assert_eq!(
        (stats["holders"].as_u64(), stats["grants"].as_u64()),
        (Some(1), Some(2)),
        "{stats}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_clients_one_gate_embedded() {
    two_hundred_clients_one_gate(&Server::start(None)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_clients_one_gate_redis() {
    let redis = RedisServer::start();
    two_hundred_clients_one_gate(&Server::start(Some(&redis.url()))).await;
}

async fn two_hundred_clients_one_gate(s: &Server) {
    let c = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()
        .expect("client");
    let inside = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let (c, inside, log) = (c.clone(), inside.clone(), log.clone());
            let (enter_url, base) = (s.url("/v1/gates/one/enter"), s.url("/v1/gates/one"));
            tokio::spawn(async move {
                let sent = std::time::Instant::now();
                let (st, e) = send(c.post(enter_url).json(&json!({"capacity": 1, "ttl_ms": 30000}))).await;
                let answered = std::time::Instant::now();
                assert_eq!(st, 200, "{e}");
                let (token, fence) = match str_of(&e, "status") {
                    "granted" => (
                        str_of(&e, "token").to_owned(),
                        e["fence"].as_u64().expect("fence"),
                    ),
                    _ => {
                        let ticket = str_of(&e, "ticket").to_owned();
                        assert!(e["position"].as_u64().expect("position") >= 1);
                        loop {
                            let url = format!("{base}/tickets/{ticket}?wait_ms=30000");
                            let (st, g) = send(c.get(url)).await;
                            assert_eq!(st, 200, "{g}");
                            if str_of(&g, "status") == "granted" {
                                break (
                                    str_of(&g, "token").to_owned(),
                                    g["fence"].as_u64().expect("fence"),
                                );
                            }
                        }
                    }
                };
                let before = inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                log.lock().expect("log").push((fence, (sent, answered), before));
                inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                let (st, r) = send(c.delete(format!("{base}/leases/{token}"))).await;
                assert_eq!(st, 200, "{r}");
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("client");
    }
    let log = log.lock().expect("log").clone();
    assert_eq!(log.len(), 200);
    assert!(
        log.iter().all(|(_, _, before)| *before == 0),
        "two holders at once"
    );
    // Grants follow arrival: a client whose enter was answered before
    // another's was sent holds a lower fence. (A position is no order:
    // departures between two enters give the later one the same or a
    // lower position.)
    for (fa, (_, answered), _) in &log {
        for (fb, (sent, _), _) in &log {
            assert!(
                !(answered < sent && fa > fb),
                "a waiter was overtaken: fence {fa} before {fb}"
            );
        }
    }
    assert!(
        log.windows(2).all(|w| w[0].0 < w[1].0),
        "fences strictly increase"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_pending_long_polls() {
    let mut s = Server::start(None);
    let c = reqwest::Client::new();
    enter(&c, &s, "g", json!({"capacity": 1})).await;
    let (_, t) = enter(&c, &s, "g", json!({"capacity": 1})).await;
    let ticket = str_of(&t, "ticket").to_owned();
    let poll = tokio::spawn({
        let (c, url) = (
            c.clone(),
            s.url(&format!("/v1/gates/g/tickets/{ticket}?wait_ms=30000")),
        );
        async move { send(c.get(url)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let asked = Instant::now();
    nix_kill(s.child.id(), "TERM");
    let (st, body) = tokio::time::timeout(Duration::from_secs(5), poll)
        .await
        .expect("answered")
        .expect("task");
    assert_eq!((st, str_of(&body, "status")), (200, "queued"), "{body}");
    assert!(asked.elapsed() < Duration::from_secs(2));
    let status = s.child.wait().expect("exit");
    assert!(status.success(), "{status:?}");
}

fn nix_kill(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .expect("kill");
    assert!(ok.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_tokens_guard_the_api_but_not_the_probes() {
    let (a, b) = ("first-token-0123456789", "second-token-0123456789");
    let s = Server::start_with(None, &["--token", a, "--token", b]);
    let c = reqwest::Client::new();
    let url = s.url("/v1/gates/g/enter");
    let body = json!({"capacity": 1});
    let resp = c.post(&url).json(&body).send().await.expect("request");
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(
        resp.headers()
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap_or("")),
        Some("Bearer")
    );
    let err: Value = resp.json().await.expect("json");
    assert_eq!(err["error"]["code"].as_str(), Some("unauthorized"), "{err}");
    let (st, _) = send(c.post(&url).bearer_auth("first-token-012345678X").json(&body)).await;
    assert_eq!(st, 401, "a wrong token");
    let (st, _) = send(c.post(&url).header("authorization", a).json(&body)).await;
    assert_eq!(st, 401, "no Bearer scheme");
    for token in [a, b] {
        let (st, got) = send(c.post(&url).bearer_auth(token).json(&body)).await;
        assert_eq!(st, 200, "{got}");
    }
    assert_eq!(send(c.get(s.url("/healthz"))).await.0, 200);
    assert_eq!(send(c.get(s.url("/readyz"))).await.0, 200);
    assert_eq!(
        c.get(s.url("/metrics"))
            .send()
            .await
            .expect("metrics")
            .status()
            .as_u16(),
        401
    );
    assert_eq!(
        c.get(s.url("/metrics"))
            .bearer_auth(a)
            .send()
            .await
            .expect("metrics")
            .status()
            .as_u16(),
        200
    );

    let weak = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["serve", "--listen", "127.0.0.1:0", "--token", "short"])
        .output()
        .expect("run");
    assert_eq!(weak.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&weak.stderr).contains("16"), "{weak:?}");
}

/// Reads Server-Sent Events until the stream ends: (event, data, when).
async fn read_events(mut resp: reqwest::Response) -> Vec<(String, Value, Instant)> {
    let mut buf = String::new();
    let mut events = Vec::new();
    while let Some(chunk) = resp.chunk().await.expect("chunk") {
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let (mut event, mut data) = (String::new(), Value::Null);
            for line in block.lines() {
                if let Some(e) = line.strip_prefix("event: ") {
                    event = e.to_owned();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).expect("json data");
                }
            }
            if !event.is_empty() {
                events.push((event, data, Instant::now()));
            }
        }
    }
    events
}

async fn events_stream_positions_then_the_grant(s: &Server) {
    let c = reqwest::Client::new();
    let (_, holder) = enter(&c, s, "sse", json!({"capacity": 1})).await;
    let (_, b) = enter(&c, s, "sse", json!({"capacity": 1})).await;
    let (_, t) = enter(&c, s, "sse", json!({"capacity": 1})).await;
    let ticket = str_of(&t, "ticket");
    let resp = c
        .get(s.url(&format!("/v1/gates/sse/tickets/{ticket}/events")))
        .send()
        .await
        .expect("sse");
    assert_eq!(resp.status().as_u16(), 200);
    assert!(
        resp.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"))
    );
    let reader = tokio::spawn(read_events(resp));
    tokio::time::sleep(Duration::from_millis(300)).await;
    // b leaves the line: the stream reports position 1 (within a second).
    let b_ticket = str_of(&b, "ticket");
    assert_eq!(
        send(c.delete(s.url(&format!("/v1/gates/sse/tickets/{b_ticket}"))))
            .await
            .0,
        200
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let released = Instant::now();
    let token = str_of(&holder, "token");
    assert_eq!(
        send(c.delete(s.url(&format!("/v1/gates/sse/leases/{token}"))))
            .await
            .0,
        200
    );
    let events = tokio::time::timeout(Duration::from_secs(5), reader)
        .await
        .expect("stream ends")
        .expect("task");
    let names: Vec<&str> = events.iter().map(|(e, _, _)| e.as_str()).collect();
    assert_eq!(names, ["position", "position", "granted"], "{events:?}");
    assert_eq!(events[0].1["position"].as_u64(), Some(2));
    assert_eq!(events[1].1["position"].as_u64(), Some(1));
    let (_, granted, at) = &events[2];
    assert!(granted["fence"].as_u64() > holder["fence"].as_u64());
    let took = at.duration_since(released);
    assert!(
        took < Duration::from_millis(100),
        "grant event {took:?} after the release"
    );
    let (st, body) = send(c.get(s.url("/v1/gates/sse/tickets/nobody1234ab.1000.1000/events"))).await;
    assert_eq!(
        (st, body["error"]["code"].as_str()),
        (404, Some("ticket_not_found")),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_on_the_embedded_store() {
    events_stream_positions_then_the_grant(&Server::start(None)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_on_redis() {
    let redis = RedisServer::start();
    events_stream_positions_then_the_grant(&Server::start(Some(&redis.url()))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_in_prometheus_text_format() {
    let s = Server::start(None);
    let c = reqwest::Client::new();
    let (_, held) = enter(&c, &s, "metered", json!({"capacity": 1, "ttl_ms": 50})).await;
    enter(&c, &s, "metered", json!({"capacity": 1})).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let token = str_of(&held, "token");
    let (st, _) = send(
        c.post(s.url(&format!("/v1/gates/metered/leases/{token}/renew")))
            .json(&json!({})),
    )
    .await;
    assert_eq!(st, 404, "the lease ended");
    let resp = c.get(s.url("/metrics")).send().await.expect("metrics");
    assert_eq!(resp.status().as_u16(), 200);
    assert!(
        resp.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/plain"))
    );
    let text = resp.text().await.expect("text");
    for needle in [
        r#"tollgate_http_requests_total{route="/v1/gates/{name}/enter",method="POST",status="200"} 2"#,
        r#"tollgate_http_request_duration_seconds_bucket{route="/v1/gates/{name}/enter",method="POST",status="200",le="#,
        r#"tollgate_lost_leases_total{gate="metered"} 1"#,
        r#"tollgate_gate_capacity{gate="metered"} 1"#,
        r#"tollgate_gate_waiting{gate="metered"} 0"#,
        r#"tollgate_gate_holders{gate="metered"} 1"#,
        r#"tollgate_gate_grants_total{gate="metered"} 2"#,
        r#"tollgate_gate_expiries_total{gate="metered"} 1"#,
    ] {
        assert!(text.contains(needle), "missing {needle} in:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_file_with_environment_overrides() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("tollgate.toml");
    std::fs::write(
        &file,
        "listen = \"127.0.0.1:0\"\ntokens = [\"from-the-file-0123456789\"]\n",
    )
    .expect("write");
    let path = file.display().to_string();
    let c = reqwest::Client::new();
    let body = json!({"capacity": 1});

    let s = Server::start_with(None, &["--config", &path]);
    let (st, _) = send(
        c.post(s.url("/v1/gates/g/enter"))
            .bearer_auth("from-the-file-0123456789")
            .json(&body),
    )
    .await;
    assert_eq!(st, 200, "the file's token is accepted");
    drop(s);

    // The environment overrides the file.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    cmd.args(["serve", "--config", &path, "--data-dir", "none"])
        .env("TOLLGATE_TOKENS", "from-the-env-0123456789")
        .env("TOLLGATE_LOG", "warn")
        .env_remove("TOLLGATE_REDIS_URL");
    let s = Server::spawn(cmd, Stdio::inherit());
    let url = s.url("/v1/gates/g/enter");
    assert_eq!(
        send(c.post(&url).bearer_auth("from-the-file-0123456789").json(&body))
            .await
            .0,
        401
    );
    assert_eq!(
        send(c.post(&url).bearer_auth("from-the-env-0123456789").json(&body))
            .await
            .0,
        200
    );

    // Mistakes in the file are reported, with its name, before starting.
    std::fs::write(&file, "listen = \"127.0.0.1:0\"\nlisten_port = 8\n").expect("write");
    for args in [
        vec!["serve", "--config", path.as_str()],
        vec!["serve", "--config", "/nonexistent.toml"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(&args)
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(64), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(".toml"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_is_served_and_covers_every_route() {
    let s = Server::start(None);
    let served: Value = reqwest::get(s.url("/openapi.json"))
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    let kept: Value =
        serde_json::from_str(include_str!("../../../docs/openapi.json")).expect("docs/openapi.json");
    assert_eq!(served, kept);
    assert_eq!(served["openapi"].as_str(), Some("3.0.3"));
    for path in [
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
        "/v1/gates",
        "/v1/queues",
        "/v1/rooms",
        "/v1/limits",
        "/v1/schedules",
        "/v1/gates/{name}",
        "/v1/gates/{name}/capacity",
        "/v1/gates/{name}/holders",
        "/v1/gates/{name}/enter",
        "/v1/gates/{name}/tickets/{ticket}",
        "/v1/gates/{name}/tickets/{ticket}/events",
        "/v1/gates/{name}/leases/{token}",
        "/v1/gates/{name}/leases/{token}/renew",
        "/v1/limits/{name}",
        "/v1/limits/{name}/check",
        "/v1/queues/{queue}",
        "/v1/queues/{queue}/jobs",
        "/v1/queues/{queue}/batch",
        "/v1/queues/{queue}/claim",
        "/v1/queues/{queue}/ack",
        "/v1/queues/{queue}/completed",
        "/v1/queues/{queue}/jobs/{id}",
        "/v1/queues/{queue}/jobs/{id}/ack",
        "/v1/queues/{queue}/jobs/{id}/nack",
        "/v1/queues/{queue}/jobs/{id}/extend",
        "/v1/queues/{queue}/jobs/{id}/reschedule",
        "/v1/queues/{queue}/dead",
        "/v1/queues/{queue}/dead/replay",
        "/v1/queues/{queue}/dead/purge",
        "/v1/queues/{queue}/pause",
        "/v1/queues/{queue}/resume",
        "/v1/queues/{queue}/events",
        "/v1/rooms/{room}",
        "/v1/rooms/{room}/capacity",
        "/v1/rooms/{room}/admission_rate",
        "/v1/rooms/{room}/pause",
        "/v1/rooms/{room}/resume",
        "/v1/rooms/{room}/sessions/{session}",
        "/v1/console/series",
        "/v1/console/live",
        "/ui",
        "/ui/{file}",
        "/v1/rooms/{room}/reset",
        "/v1/rooms/{room}/line",
        "/v1/rooms/{room}/line/{number}",
        "/v1/session",
        "/v1/rooms/{room}/events",
        "/v1/store",
    ] {
        assert!(served["paths"].get(path).is_some(), "{path} is not documented");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_event_stream_keeps_its_place_until_the_heartbeat_lapses() {
    let redis = RedisServer::start();
    let s = Server::start(Some(&redis.url()));
    let c = reqwest::Client::new();
    enter(&c, &s, "stream", json!({"capacity": 1})).await;
    let (_, t) = enter(&c, &s, "stream", json!({"capacity": 1, "heartbeat_ms": 1500})).await;
    let ticket = str_of(&t, "ticket").to_owned();
    let resp = c
        .get(s.url(&format!("/v1/gates/stream/tickets/{ticket}/events")))
        .send()
        .await
        .expect("sse");
    assert_eq!(resp.status().as_u16(), 200);
    // Hold the stream for a while (it heartbeats), then walk away.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    drop(resp);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let url = s.url(&format!("/v1/gates/stream/tickets/{ticket}"));
    let (st, body) = send(c.get(&url)).await;
    assert_eq!(
        (st, str_of(&body, "status")),
        (200, "queued"),
        "still in line after 2 s: {body}"
    );
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let (st, body) = send(c.get(&url)).await;
    assert_eq!(st, 404, "gone after the grace: {body}");
}

/// `--durable-replicas 1`: every change waits for the replica. With the
/// replica frozen, a grant answers 503 `not_replicated` (and is given
/// back: the gate stays free); thawed, grants are confirmed again. On the
/// embedded store the setting is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_server_reports_unconfirmed_changes() {
    let (master, replica) = RedisServer::start_with_replica().await;
    let s = Server::start_with(
        Some(&master.url()),
        &["--durable-replicas", "1", "--durable-timeout", "300ms"],
    );
    let c = reqwest::Client::new();
    let (st, granted) = enter(&c, &s, "durable", json!({"capacity": 1})).await;
    assert_eq!(st, 200, "{granted}");
    let token = str_of(&granted, "token").to_owned();
    assert_eq!(
        send(c.delete(s.url(&format!("/v1/gates/durable/leases/{token}"))))
            .await
            .0,
        200
    );
    nix::sys::signal::kill(replica.pid(), nix::sys::signal::Signal::SIGSTOP).expect("stop");
    let (st, e) = enter(&c, &s, "durable", json!({"capacity": 1})).await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (503, Some("not_replicated")),
        "{e}"
    );
    nix::sys::signal::kill(replica.pid(), nix::sys::signal::Signal::SIGCONT).expect("cont");
    let (st, again) = enter(&c, &s, "durable", json!({"capacity": 1})).await;
    assert_eq!(st, 200, "the unconfirmed grant was given back: {again}");

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["serve", "--listen", "127.0.0.1:0", "--durable-replicas", "1"])
        .env_remove("TOLLGATE_REDIS_URL")
        .output()
        .expect("serve");
    assert_eq!(
        out.status.code(),
        Some(64),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
