//! The listings over HTTP (`GET /v1/gates`, `/v1/queues`, `/v1/rooms`,
//! `/v1/limits`, `/v1/schedules`): prefix, cursor and limit, every name
//! once when paging, 400 for bad parameters; on the embedded store and on
//! a real redis-server.

mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use serde_json::{Value, json};
use serve_support::{Server, send};
use support::RedisServer;

const CONFIG: &str = r#"
listen = "127.0.0.1:0"
proxy_listen = "127.0.0.1:0"

[limits.api]
rate = "10/min"
burst = 3

[limits.batch]
rate = "5/s"

[rooms.shop]
upstream = "http://127.0.0.1:9"
path_prefix = "/shop"
capacity = 2
cookie_keys = ["a-cookie-key-of-at-least-32-characters-0123"]

[rooms.sale]
upstream = "http://127.0.0.1:9"
path_prefix = "/sale"
capacity = 5
cookie_keys = ["a-cookie-key-of-at-least-32-characters-0123"]
"#;

fn start(redis: Option<&str>, dir: &tempfile::TempDir) -> Server {
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, CONFIG).expect("write config");
    Server::start_with(redis, &["--config", path.to_str().expect("path")])
}

/// Every item of listing `kind` (its key) under `prefix`, `limit` a page.
async fn all(c: &reqwest::Client, s: &Server, kind: &str, prefix: &str, limit: usize) -> Vec<Value> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        // The names here need no escaping.
        let mut path = format!("/v1/{kind}?prefix={prefix}&limit={limit}");
        if let Some(cur) = &cursor {
            path.push_str(&format!("&cursor={cur}"));
        }
        let (st, page) = send(c.get(s.url(&path))).await;
        assert_eq!(st, 200, "{page}");
        let got = page[kind].as_array().expect("items");
        assert!(got.len() <= limit, "{page}");
        items.extend(got.iter().cloned());
        match page["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => {
                assert_eq!(page["next"], Value::Null);
                return items;
            }
        }
    }
}

fn names(items: &[Value], key: &str) -> Vec<String> {
    items
        .iter()
        .map(|i| i[key].as_str().expect("name").to_owned())
        .collect()
}

async fn listing(s: &Server) {
    let c = reqwest::Client::new();
    let mut gates = Vec::new();
    for i in 0..12 {
        let name = format!("g-{i:02}");
        let (st, e) = send(
            c.post(s.url(&format!("/v1/gates/{name}/enter")))
                .json(&json!({"capacity": 2})),
        )
        .await;
        assert_eq!(st, 200, "{e}");
        gates.push(name);
    }
    let (st, _) = send(c.post(s.url("/v1/gates/h-1/enter")).json(&json!({"capacity": 1}))).await;
    assert_eq!(st, 200);
    for limit in [1, 5, 100] {
        assert_eq!(names(&all(&c, s, "gates", "g-", limit).await, "gate"), gates);
    }
    let (st, page) = send(c.get(s.url("/v1/gates?prefix=h"))).await;
    assert_eq!(st, 200);
    assert_eq!(
        page,
        json!({"gates": [{"gate": "h-1", "capacity": 1, "holders": 1, "used": 1, "waiting": 0, "paused": false}], "next": null})
    );

    for q in ["q-a", "q-b", "q-c"] {
        let (st, p) = send(
            c.post(s.url(&format!("/v1/queues/{q}/jobs")))
                .json(&json!({"payload": "x"})),
        )
        .await;
        assert_eq!(st, 201, "{p}");
    }
    let queues = all(&c, s, "queues", "q-", 2).await;
    assert_eq!(names(&queues, "queue"), ["q-a", "q-b", "q-c"]);
    assert_eq!(
        queues[0],
        json!({"queue": "q-a", "partitions": 1, "ready": 1, "delayed": 0, "in_flight": 0, "dead": 0, "paused": false})
    );

    let rooms = all(&c, s, "rooms", "", 1).await;
    assert_eq!(names(&rooms, "room"), ["sale", "shop"]);
    assert_eq!(
        (&rooms[1]["capacity"], &rooms[1]["active"]),
        (&json!(2), &json!(0))
    );
    let limits = all(&c, s, "limits", "", 1).await;
    assert_eq!(names(&limits, "name"), ["api", "batch"]);
    assert_eq!(all(&c, s, "limits", "b", 10).await[0]["rate"], json!("5/s"));

    for name in ["s-3", "s-1", "s-2", "t-1"] {
        let (st, p) = send(
            c.put(s.url(&format!("/v1/schedules/{name}")))
                .json(&json!({"when": "@daily", "queue": "sched-q"})),
        )
        .await;
        assert!(st == 200 || st == 201, "{st} {p}");
    }
    assert_eq!(
        names(&all(&c, s, "schedules", "s-", 2).await, "name"),
        ["s-1", "s-2", "s-3"]
    );

    for bad in [
        "/v1/gates?limit=0",
        "/v1/queues?limit=1001",
        "/v1/rooms?limit=x",
        "/v1/limits?colour=red",
        "/v1/schedules?limit=-1",
    ] {
        let (st, e) = send(c.get(s.url(bad))).await;
        assert_eq!(
            (st, e["error"]["code"].as_str()),
            (400, Some("bad_request")),
            "{bad}: {e}"
        );
    }
    let long = "x".repeat(200);
    let (st, _) = send(c.get(s.url(&format!("/v1/gates?prefix={long}")))).await;
    assert_eq!(st, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_on_the_embedded_store() {
    let dir = tempfile::tempdir().expect("dir");
    listing(&start(None, &dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_on_redis() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    listing(&start(Some(&redis.url()), &dir)).await;
}
