//! Looking jobs up over HTTP (`GET /v1/queues/{queue}/jobs/{id}`, and
//! `GET /v1/queues/{queue}/jobs?state=…` by pages) and from the CLI
//! (`tollgate jobs show|list`, on the store and through `--server`).

mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use serde_json::{Value, json};
use serve_support::{Server, send};
use support::RedisServer;

async fn lookups_over_http(s: &Server) {
    let c = reqwest::Client::new();
    let url = |p: &str| s.url(&format!("/v1/queues/look{p}"));
    let push = |body: Value| {
        let c = c.clone();
        let u = url("/jobs");
        async move {
            let (st, p) = send(c.post(u).json(&body)).await;
            assert!(st == 201, "{st} {p}");
        }
    };
    push(json!({"payload": {"n": 1}, "id": "run", "priority": 9})).await;
    let (st, claimed) = send(c.post(url("/claim"))).await;
    assert_eq!(st, 200);
    let fence = claimed["job"]["fence"].as_u64().expect("fence");
    // 300 bytes of which the first 256 end inside a character: the text
    // before it.
    push(json!({"payload": "é".repeat(149), "id": "text"})).await;
    push(json!({"payload_base64": "//79", "id": "bin"})).await;
    push(json!({"payload": 1, "id": "later", "delay_ms": 3_600_000})).await;

    let (st, run) = send(c.get(url("/jobs/run"))).await;
    assert_eq!(st, 200, "{run}");
    assert_eq!(
        (
            run["state"].as_str(),
            run["fence"].as_u64(),
            run["attempts"].as_u64()
        ),
        (Some("running"), Some(fence), Some(1))
    );
    assert_eq!(run["lease_until_ms"], claimed["job"]["lease_until_ms"]);
    assert_eq!(
        (
            run["payload_preview"].as_str(),
            run["payload_preview_encoding"].as_str()
        ),
        (Some(r#"{"n":1}"#), Some("utf8"))
    );
    let (_, text) = send(c.get(url("/jobs/text"))).await;
    assert_eq!(text["state"], "ready");
    assert_eq!(text["payload_size"], 300, "{text}");
    assert_eq!(text["payload_truncated"], true);
    let preview = text["payload_preview"].as_str().unwrap();
    assert_eq!(preview, format!("\"{}", "é".repeat(127)), "whole characters only");
    let (_, bin) = send(c.get(url("/jobs/bin"))).await;
    assert_eq!(
        (
            bin["payload_preview"].as_str(),
            bin["payload_preview_encoding"].as_str()
        ),
        (Some("//79"), Some("base64"))
    );
    let (_, later) = send(c.get(url("/jobs/later"))).await;
    assert_eq!(later["state"], "delayed");
    assert!(later["due_ms"].as_u64().is_some(), "{later}");
    let (st, e) = send(c.get(url("/jobs/nope"))).await;
    assert_eq!((st, e["error"]["code"].as_str()), (404, Some("job_not_found")));

    // Pages of one job each visit every ready job once, then end.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        // The ids here need no escaping in a query string.
        let after = cursor.as_ref().map_or(String::new(), |c| format!("&cursor={c}"));
        let (st, page) = send(c.get(url(&format!("/jobs?state=ready&limit=1{after}")))).await;
        assert_eq!(st, 200, "{page}");
        seen.extend(
            page["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["id"].as_str().unwrap().to_owned()),
        );
        match page["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, ["text", "bin"], "push order at one priority");
    let (_, page) = send(c.get(url("/jobs?state=running"))).await;
    assert_eq!(page["jobs"][0]["id"], "run");
    assert_eq!(page["next"], Value::Null);

    // Bad input: 400; a queue never pushed to: 404.
    for q in [
        "state=bogus",
        "",
        "state=dead&limit=0",
        "state=dead&limit=1001",
        "state=dead&cursor=zz",
        "state=dead&other=1",
    ] {
        let (st, e) = send(c.get(url(&format!("/jobs?{q}")))).await;
        assert_eq!(
            (st, e["error"]["code"].as_str()),
            (400, Some("bad_request")),
            "{q}: {e}"
        );
    }
    let (st, e) = send(c.get(s.url("/v1/queues/nosuch/jobs?state=dead"))).await;
    assert_eq!((st, e["error"]["code"].as_str()), (404, Some("queue_not_found")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_over_http_on_the_embedded_store() {
    let s = Server::start(None);
    lookups_over_http(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_over_http_on_redis() {
    let redis = RedisServer::start();
    let s = Server::start(Some(&redis.url()));
    lookups_over_http(&s).await;
}
