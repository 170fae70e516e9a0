//! tollgate.example.toml is a working configuration: as written (on the
//! embedded store, its listen addresses moved to free ports by flags) it
//! starts; its placeholder secrets, copied unchanged, are refused with
//! exit 78 naming the key; filled in (its commented-out settings
//! uncommented, on a real redis-server, its pages in a temp dir) it serves
//! the API with its token, its limit and its room. (That it sets every key
//! the server knows is checked in serve/settings.rs.)

mod example_support;
mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use serve_support::{Server, send};
use support::RedisServer;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tollgate.example.toml");

/// The example with its commented-out settings uncommented.
fn uncommented() -> String {
    example_support::uncommented(&std::fs::read_to_string(EXAMPLE).expect("the example"))
}

/// `tollgate serve --config tollgate.example.toml`, as the unit file's
/// install steps copy it, starts and answers.
#[tokio::test]
async fn the_example_starts_as_written() {
    let s = Server::start_with(None, &["--config", EXAMPLE, "--proxy-listen", "127.0.0.1:0"]);
    let c = reqwest::Client::new();
    assert_eq!(send(c.get(s.url("/healthz"))).await.0, 200);
    let (st, ready) = send(c.get(s.url("/readyz"))).await;
    assert_eq!((st, ready["store"].as_str()), (200, Some("memory")), "{ready}");
}

/// A placeholder secret copied unchanged (in the file or the environment)
/// stops the server with 78 and a message naming the key, before it
/// listens.
#[tokio::test]
async fn a_placeholder_secret_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    let text = std::fs::read_to_string(EXAMPLE).expect("the example");
    let with_token = text.replace("\n#tokens = ", "\ntokens = ");
    assert!(with_token != text, "the example shows #tokens");
    std::fs::write(&path, with_token).expect("config");
    let path = path.to_str().expect("path");
    let from_env = {
        let mut cmd = Server::command(None, &["--config", EXAMPLE]);
        cmd.env("TOLLGATE_TOKENS", "change-me-to-a-long-random-token");
        cmd
    };
    for mut cmd in [Server::command(None, &["--config", path]), from_env] {
        let out = cmd.output().expect("serve");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{stderr}");
        assert!(
            stderr.contains(
                "tollgate: tokens (--token, TOLLGATE_TOKENS): still the placeholder of tollgate.example.toml"
            ),
            "{stderr}"
        );
        assert!(out.stdout.is_empty(), "no listening line");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_config_starts_a_working_server() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    // Filled in: every setting uncommented, secrets of one's own.
    let token = "my-own-admin-token-0123456789";
    let read = "my-own-read-token-0123456789";
    let mut example = uncommented()
        .replace(
            "proxy_listen = \"127.0.0.1:7780\"",
            "proxy_listen = \"127.0.0.1:0\"",
        )
        .replace("change-me-to-a-long-random-token", token)
        .replace("change-me-to-another-long-token", read)
        .replace(
            "change-me-to-a-secret-of-32-characters",
            "my-own-key-of-32-characters-0123456789",
        )
        .replace("X-Internal: change-me", "X-Internal: my-own-0123456789")
        // TLS needs a pair of one's own (tests/tls.rs).
        .replace("\ntls_cert = ", "\n#tls_cert = ")
        .replace("\ntls_key = ", "\n#tls_key = ")
        // An https:// upstream's files apply to one (tests/room_https.rs).
        .replace("\nupstream_ca = ", "\n#upstream_ca = ")
        .replace("\nupstream_client_cert = ", "\n#upstream_client_cert = ")
        .replace("\nupstream_client_key = ", "\n#upstream_client_key = ");
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
        ("closed.html", "<p>{{room}} is {{state}}.</p>"),
        ("sold-out.html", "<p lang=\"{{lang}}\">{{room}}: {{state}}.</p>"),
        (
            "not-open.html",
            "<p>{{room}}: the line opens at {{line_opens_at}}, the sale at {{opens_at}}.</p>",
        ),
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
    let (st, limit) = send(c.get(s.url("/v1/limits/api")).bearer_auth(token)).await;
    assert_eq!((st, limit["rate"].as_str()), (200, Some("100/min")), "{limit}");
    let (st, room) = send(c.get(s.url("/v1/rooms/shop")).bearer_auth(token)).await;
    assert_eq!((st, room["capacity"].as_u64()), (200, Some(1500)), "{room}");
    // Its read token reads, and may not change anything.
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
