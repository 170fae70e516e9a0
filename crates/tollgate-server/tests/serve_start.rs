//! `tollgate serve` starting before its Redis: it listens at once, is
//! alive but not ready, answers 503 until Redis does, then serves; a bound
//! on the wait (`--wait-for-store`) exits 69; what no wait mends exits 78
//! at once. And a host name as the listening address.

mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;
use serve_support::{Server, send};
use support::RedisServer;

/// The exit code and standard error of a server that exits by itself
/// within `limit`, and how long it ran.
fn exited(mut s: Server, limit: Duration) -> (i32, String, Duration) {
    let started = Instant::now();
    let code = loop {
        if let Some(status) = s.child.try_wait().expect("wait") {
            break status.code().expect("an exit code, not a signal");
        }
        assert!(started.elapsed() < limit, "serve still runs after {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    s.child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    (code, stderr, started.elapsed())
}

#[tokio::test]
async fn serve_started_before_redis_serves_once_redis_answers() {
    let port = support::free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let s = Server::spawn(Server::command(Some(&url), &[]), Stdio::inherit());
    let c = reqwest::Client::new();

    // Alive, not ready; a route that needs the store says so, as JSON.
    assert_eq!(send(c.get(s.url("/healthz"))).await.0, 200);
    let (st, ready) = send(c.get(s.url("/readyz"))).await;
    assert_eq!(st, 503, "{ready}");
    assert_eq!(ready["error"]["code"], "store_unavailable", "{ready}");
    let r = c
        .post(s.url("/v1/gates/g/enter"))
        .json(&json!({"capacity": 1}))
        .send()
        .await
        .expect("enter");
    assert_eq!(r.status().as_u16(), 503);
    assert!(r.headers().contains_key("retry-after"));
    let body: serde_json::Value = r.json().await.expect("a JSON error body");
    assert_eq!(body["error"]["code"], "store_unavailable", "{body}");

    let _redis = RedisServer::start_on_port(port);
    let started = Instant::now();
    loop {
        let (st, ready) = send(c.get(s.url("/readyz"))).await;
        if st == 200 {
            assert_eq!(ready["store"], "redis");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "not ready: {ready}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (st, entered) = send(c.post(s.url("/v1/gates/g/enter")).json(&json!({"capacity": 1}))).await;
    assert_eq!(st, 200, "{entered}");
    assert_eq!(entered["status"], "granted", "{entered}");
}

#[tokio::test]
async fn wait_for_store_bounds_the_wait_and_exits_69() {
    let port = support::free_port();
    let url = format!("redis://user:secret-pw@127.0.0.1:{port}");
    let s = Server::spawn(
        Server::command(Some(&url), &["--wait-for-store", "1s"]),
        Stdio::piped(),
    );
    let (code, stderr, ran) = exited(s, Duration::from_secs(15));
    assert_eq!(code, 69, "{stderr}");
    assert!(ran >= Duration::from_millis(900), "gave up after {ran:?}");
    assert!(stderr.contains("--wait-for-store"), "{stderr}");
    assert!(stderr.contains(&format!("127.0.0.1:{port}")), "{stderr}");
    assert!(!stderr.contains("secret-pw"), "the password shows: {stderr}");
}

#[tokio::test]
async fn what_no_wait_mends_exits_78_at_once() {
    // A user of its own (the default user stays open for the support's
    // readiness check).
    let redis =
        RedisServer::start_with_args(&["--user", "alice", "on", ">the-right-password", "~*", "+@all"]);
    for url in [
        format!("redis://alice:a-wrong-password@127.0.0.1:{}", redis.port),
        format!("redis://alice:the-right-password@127.0.0.1:{}/99", redis.port),
    ] {
        let s = Server::spawn(Server::command(Some(&url), &[]), Stdio::piped());
        let (code, stderr, _) = exited(s, Duration::from_secs(10));
        assert_eq!(code, 78, "{url}: {stderr}");
        assert!(!stderr.contains("password@"), "{stderr}");
    }
}

#[tokio::test]
async fn listen_takes_a_host_name() {
    let s = Server::start_with(None, &["--listen", "localhost:0"]);
    let (st, ready) = send(reqwest::Client::new().get(s.url("/readyz"))).await;
    assert_eq!(st, 200, "{ready}");
    assert_eq!(ready["store"], "memory");
}

#[test]
fn memory_idle_comes_from_the_flag_and_the_environment() {
    // Out of range from either: refused at start naming the setting, so
    // each was read (before, only the file had it).
    let mut by_env = Server::command(None, &[]);
    by_env.env("TOLLGATE_MEMORY_IDLE", "100ms");
    let mut by_flag = Server::command(None, &["--memory-idle", "100ms"]);
    for cmd in [&mut by_env, &mut by_flag] {
        let out = cmd.stdin(Stdio::null()).output().expect("run serve");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{stderr}");
        assert!(stderr.contains("memory_idle"), "{stderr}");
    }
    // In range, it starts.
    let mut ok = Server::command(None, &[]);
    ok.env("TOLLGATE_MEMORY_IDLE", "2s");
    let s = Server::spawn(ok, Stdio::inherit());
    assert!(s.base.starts_with("http://"), "{}", s.base);
}
