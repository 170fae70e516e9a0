//! tollgate.example.toml is a working configuration: a server started with
//! it (on a real redis-server, its page and listen addresses pointed at a
//! temp dir and free ports) serves the API with its token, its limit and
//! its room. (That it sets every key the server knows is checked in
//! serve/settings.rs.)

mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use serve_support::{Server, send};
use support::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_config_starts_a_working_server() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut example = include_str!("../../../tollgate.example.toml").replace(
        "proxy_listen = \"127.0.0.1:7780\"",
        "proxy_listen = \"127.0.0.1:0\"",
    );
    // Each page template, in the temp dir, with the placeholders it may use.
    for (file, text) in [
        (
            "waiting.html",
            "<p>Number {{position}} of {{waiting}}; about {{eta}}.</p>",
        ),
        (
            "try-again.html",
            "<p>{{room}} is busy; again in {{retry_seconds}} s.</p>",
        ),
        ("upstream-down.html", "<p>{{status}}: {{room}} is down.</p>"),
        ("upstream-timeout.html", "<p>{{status}}: {{room}} is slow.</p>"),
    ] {
        let path = dir.path().join(file);
        std::fs::write(&path, text).expect("page");
        example = example.replace(
            &format!("\"{file}\""),
            &format!("{:?}", path.display().to_string()),
        );
    }
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, example).expect("config");
    // --listen and --redis on the command line win over the file.
    let s = Server::start_with(Some(&redis.url()), &["--config", path.to_str().expect("path")]);
    let c = reqwest::Client::new();
    assert_eq!(send(c.get(s.url("/healthz"))).await.0, 200);
    assert_eq!(send(c.get(s.url("/v1/limits/api"))).await.0, 401, "tokens are on");
    let token = "change-me-to-a-long-random-token";
    let (st, limit) = send(c.get(s.url("/v1/limits/api")).bearer_auth(token)).await;
    assert_eq!((st, limit["rate"].as_str()), (200, Some("100/min")), "{limit}");
    let (st, room) = send(c.get(s.url("/v1/rooms/shop")).bearer_auth(token)).await;
    assert_eq!((st, room["capacity"].as_u64()), (200, Some(1500)), "{room}");
    // Its read token reads, and may not change anything.
    let read = "change-me-to-another-long-token";
    assert_eq!(
        send(c.get(s.url("/v1/rooms/shop")).bearer_auth(read)).await.0,
        200
    );
    let (st, e) = send(c.post(s.url("/v1/rooms/shop/pause")).bearer_auth(read)).await;
    assert_eq!((st, e["error"]["code"].as_str()), (403, Some("forbidden")), "{e}");
    assert!(s.proxy.is_some(), "the room listens");
    // A wrong route says where the API is: every part of it.
    let (st, e) = send(c.get(s.url("/v2/nothing"))).await;
    let says = e["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(st, 404);
    for part in ["/v1/gates", "/v1/queues", "/v1/limits", "/v1/rooms"] {
        assert!(says.contains(part), "{e}");
    }
}
