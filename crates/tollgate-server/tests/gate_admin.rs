//! A gate's admin routes over HTTP (`GET /v1/gates/{g}/line`,
//! `DELETE /v1/gates/{g}/holders/{handle}`, `DELETE /v1/gates/{g}/line/{n}`),
//! on the embedded store and on a real redis-server.

mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use serde_json::{Value, json};
use serve_support::{Server, send};
use support::RedisServer;

async fn enter(c: &reqwest::Client, s: &Server, body: Value) -> Value {
    let (st, v) = send(c.post(s.url("/v1/gates/adm/enter")).json(&body)).await;
    assert_eq!(st, 200, "{v}");
    v
}

async fn admin_over_http(s: &Server) {
    let c = reqwest::Client::new();
    let url = |p: &str| s.url(&format!("/v1/gates/adm{p}"));
    let holder = enter(&c, s, json!({"capacity": 1, "ttl_ms": 30000, "label": "owner"})).await;
    let token = holder["token"].as_str().unwrap().to_owned();
    let mut tickets = Vec::new();
    for label in ["first", "second", "third"] {
        let v = enter(
            &c,
            s,
            json!({"capacity": 1, "label": label, "heartbeat_ms": 30000}),
        )
        .await;
        assert_eq!(v["status"], "queued", "{v}");
        tickets.push(v["ticket"].as_str().unwrap().to_owned());
    }

    // The holders carry handles, the line numbers; neither shows a token.
    let (st, held) = send(c.get(url("/holders"))).await;
    assert_eq!(st, 200, "{held}");
    let handle = held["holders"][0]["handle"].as_str().unwrap().to_owned();
    assert_eq!(held["holders"][0]["fence"], Value::Null, "{held}");
    assert!(!held.to_string().contains(&token), "{held}");
    let (st, line) = send(c.get(url("/line?limit=2"))).await;
    assert_eq!(st, 200, "{line}");
    let labels: Vec<&str> = line["line"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["first", "second"], "{line}");
    assert_eq!(
        (&line["line"][1]["position"], &line["line"][1]["permits"]),
        (&json!(2), &json!(1))
    );
    let second = line["line"][1]["number"].as_u64().unwrap();

    // Removing "second" moves "third" up.
    let (st, v) = send(c.delete(url(&format!("/line/{second}")))).await;
    assert_eq!((st, &v), (200, &json!({"removed": true})));
    let (st, v) = send(c.delete(url(&format!("/line/{second}")))).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (404, Some("ticket_not_found")),
        "{v}"
    );
    // Its waiter is told it was removed (410, not 404: it must not queue
    // again), by a status, a long-poll and an event stream alike.
    let removed = &tickets[1];
    for wait in ["", "?wait_ms=200"] {
        let (st, v) = send(c.get(url(&format!("/tickets/{removed}{wait}")))).await;
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (410, Some("ticket_removed")),
            "{wait}: {v}"
        );
    }
    let (st, v) = send(c.get(url(&format!("/tickets/{removed}/events")))).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (410, Some("ticket_removed")),
        "{v}"
    );
    // A stream open when the removal comes ends with an error event.
    let fourth = enter(
        &c,
        s,
        json!({"capacity": 1, "label": "fourth", "heartbeat_ms": 30000}),
    )
    .await;
    let fourth = fourth["ticket"].as_str().unwrap().to_owned();
    let mut stream = c
        .get(url(&format!("/tickets/{fourth}/events")))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let (_, line) = send(c.get(url("/line"))).await;
    let number = line["line"][2]["number"].as_u64().unwrap();
    assert_eq!(line["line"][2]["label"], "fourth", "{line}");
    let (st, _) = send(c.delete(url(&format!("/line/{number}")))).await;
    assert_eq!(st, 200);
    let mut text = String::new();
    let read = async {
        while let Some(chunk) = stream.chunk().await.unwrap() {
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), read)
        .await
        .expect("the stream ends");
    assert!(
        text.contains("event: error\ndata: {\"code\":\"ticket_removed\"}"),
        "{text}"
    );
    let (_, line) = send(c.get(url("/line"))).await;
    assert_eq!(line["line"][1]["label"], "third", "{line}");
    assert_eq!(line["line"][1]["position"], 2, "{line}");

    // Revoking the holder lets "first" in; the old token is lost.
    let (st, v) = send(c.delete(url(&format!("/holders/{handle}")))).await;
    assert_eq!((st, &v), (200, &json!({"revoked": true})));
    let (_, held) = send(c.get(url("/holders"))).await;
    assert_eq!(held["holders"][0]["label"], "first", "{held}");
    // It came through the line: its fence is shown (one granted at once
    // shows null).
    assert!(held["holders"][0]["fence"].as_u64().is_some(), "{held}");
    let (st, v) = send(c.post(url(&format!("/leases/{token}/renew"))).json(&json!({}))).await;
    assert_ne!(st, 200, "{v}");
    let (st, v) = send(c.delete(url(&format!("/holders/{handle}")))).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (404, Some("holder_not_found")),
        "{v}"
    );

    // Bad input is a 400.
    for path in [
        "/holders/not-a-handle",
        "/holders/0123456789ABCDEF",
        "/line/x",
        "/line/0",
        "/line/-1",
    ] {
        let (st, v) = send(c.delete(url(path))).await;
        assert_eq!(st, 400, "{path}: {v}");
    }
    for query in ["?limit=0", "?limit=1001", "?limit=x", "?other=1"] {
        let (st, v) = send(c.get(url(&format!("/line{query}")))).await;
        assert_eq!(st, 400, "{query}: {v}");
    }
    let (st, v) = send(c.get(s.url("/v1/gates/bad%20name/line"))).await;
    assert_eq!(st, 400, "{v}");
    // A gate nobody used: an empty line, no holder to revoke.
    let (st, v) = send(c.get(s.url("/v1/gates/unused/line"))).await;
    assert_eq!((st, &v), (200, &json!({"line": []})));
    let (st, _) = send(c.delete(s.url("/v1/gates/unused/holders/0123456789abcdef"))).await;
    assert_eq!(st, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_on_the_embedded_store() {
    let s = Server::start(None);
    admin_over_http(&s).await;
    let (_, doc) = send(reqwest::Client::new().get(s.url("/openapi.json"))).await;
    for path in [
        "/v1/gates/{name}/line",
        "/v1/gates/{name}/line/{number}",
        "/v1/gates/{name}/holders/{handle}",
    ] {
        assert!(doc["paths"].get(path).is_some(), "{path} is not documented");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_on_redis() {
    let redis = RedisServer::start();
    admin_over_http(&Server::start(Some(&redis.url()))).await;
}

fn cli(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .output()
        .expect("run tollgate")
}

/// `lock status --line N`, `lock revoke`, `lock remove`: `prefix` names the
/// store (`--redis URL`) or the server (`--server URL`).
async fn admin_from_the_cli(s: &Server, target: &[&str]) {
    let c = reqwest::Client::new();
    enter(&c, s, json!({"capacity": 1, "ttl_ms": 30000, "label": "owner"})).await;
    for label in ["first", "second"] {
        enter(
            &c,
            s,
            json!({"capacity": 1, "label": label, "heartbeat_ms": 30000}),
        )
        .await;
    }
    let with = |args: &[&str]| cli(&[args, target].concat());
    let o = with(&["lock", "status", "adm", "--line", "5"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let status: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let handle = status["leases"][0]["handle"]
        .as_str()
        .expect("a handle")
        .to_owned();
    let labels: Vec<&str> = status["line"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["first", "second"], "{status}");
    let second = status["line"][1]["number"].to_string();

    let o = with(&["lock", "remove", "adm", &second]);
    assert_eq!(
        (o.status.code(), o.stdout.as_slice()),
        (Some(0), &b"{\"removed\":true}\n"[..]),
        "{o:?}"
    );
    assert_eq!(with(&["lock", "remove", "adm", &second]).status.code(), Some(65));
    let o = with(&["lock", "revoke", "adm", &handle]);
    assert_eq!(
        (o.status.code(), o.stdout.as_slice()),
        (Some(0), &b"{\"revoked\":true}\n"[..]),
        "{o:?}"
    );
    assert_eq!(with(&["lock", "revoke", "adm", &handle]).status.code(), Some(65));
    assert_eq!(with(&["lock", "revoke", "adm", "nothex"]).status.code(), Some(64));
    assert_eq!(
        with(&["semaphore", "remove", "adm", "999"]).status.code(),
        Some(65)
    );
    assert_eq!(
        with(&["semaphore", "revoke", "adm", "0123456789abcdef"])
            .status
            .code(),
        Some(65)
    );
    let o = with(&["lock", "status", "adm", "--line", "5"]);
    let status: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(status["leases"][0]["label"], "first", "{status}");
    assert_eq!(status["line"], json!([]), "{status}");

    // A `lock run` waiting in line, removed: it exits 77, its command
    // never runs, and it does not queue again.
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let mut waiter = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args([&["lock", "run", "adm", "--wait", "60s"], target].concat())
        .args(["--", "touch", ran.to_str().unwrap()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run tollgate");
    let number = loop {
        let o = with(&["lock", "status", "adm", "--line", "5"]);
        let status: Value = serde_json::from_slice(&o.stdout).expect("JSON");
        if let Some(n) = status["line"][0]["number"].as_u64() {
            break n.to_string();
        }
        assert!(
            waiter.try_wait().unwrap().is_none(),
            "lock run ended before it queued"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let o = with(&["lock", "remove", "adm", &number]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let start = std::time::Instant::now();
    let code = loop {
        if let Some(status) = waiter.try_wait().unwrap() {
            break status.code();
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(15),
            "the removed waiter goes on"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(waiter.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(code, Some(77), "{stderr}");
    assert!(stderr.contains("removed"), "{stderr}");
    assert!(!ran.exists(), "the removed waiter's command ran");
    let o = with(&["lock", "status", "adm", "--line", "5"]);
    let status: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(status["line"], json!([]), "it queued again: {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_on_redis_and_through_a_server() {
    let redis = RedisServer::start();
    let url = redis.url();
    let s = Server::start(Some(&url));
    admin_from_the_cli(&s, &["--redis", &url]).await;
    let s = Server::start(None);
    let base = s.url("");
    admin_from_the_cli(&s, &["--server", base.trim_end_matches('/')]).await;
}
