//! `tollgate serve` starting before its Redis: it listens at once (its
//! listening line says it is not connected yet), is alive but not ready,
//! answers 503 until Redis does, then serves; a bound on the wait
//! (`--wait-for-store`) exits 69; what no wait mends exits 78 at once,
//! before any listening line, as a malformed URL (64) and a busy port
//! (69) do. With `--log-format json` every line is JSON. And a host name
//! as the listening address.

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

/// Runs `cmd` until it exits by itself (within `limit`): its exit code,
/// standard output and standard error.
fn run_to_exit(mut cmd: std::process::Command, limit: Duration) -> (i32, String, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let started = Instant::now();
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code().expect("an exit code, not a signal");
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("serve still runs after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let _ = child.stdout.take().expect("stdout").read_to_string(&mut stdout);
    let _ = child.stderr.take().expect("stderr").read_to_string(&mut stderr);
    (code, stdout, stderr)
}

/// Every line of `text` as a JSON object.
fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[tokio::test]
async fn serve_started_before_redis_serves_once_redis_answers() {
    let port = support::free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let s = Server::spawn(Server::command(Some(&url), &[]), Stdio::inherit());
    assert!(
        s.line
            .contains("(store: redis, not connected yet: retrying; /readyz answers 503 until it is)"),
        "{}",
        s.line
    );
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
    let asked = Instant::now();
    let s = Server::spawn(
        Server::command(Some(&url), &["--wait-for-store", "1s"]),
        Stdio::piped(),
    );
    let (code, stderr, _) = exited(s, Duration::from_secs(15));
    let ran = asked.elapsed();
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
    for (url, said) in [
        (
            format!("redis://alice:a-wrong-password@127.0.0.1:{}", redis.port),
            "check the user and password",
        ),
        (
            format!("redis://alice:the-right-password@127.0.0.1:{}/99", redis.port),
            "DB index",
        ),
    ] {
        let (code, stdout, stderr) = run_to_exit(Server::command(Some(&url), &[]), Duration::from_secs(10));
        assert_eq!(code, 78, "{url}: {stderr}");
        assert!(stderr.contains(said), "{url}: {stderr}");
        assert!(!stderr.contains("password@"), "{stderr}");
        // Never announced: a script waiting for the line sees none.
        assert_eq!(stdout, "", "{url}");
    }
    // A reachable Redis that answers: announced as connected.
    let ok = format!("redis://alice:the-right-password@127.0.0.1:{}", redis.port);
    let s = Server::spawn(Server::command(Some(&ok), &[]), Stdio::inherit());
    assert!(s.line.ends_with("(store: redis)\n"), "{}", s.line);
}

/// A URL that cannot be used is refused (64, naming the flag) before the
/// server listens: here the port it would listen on is taken, which would
/// exit 69 had it tried.
#[tokio::test]
async fn a_malformed_redis_url_exits_64_before_listening() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    for url in [
        "http://127.0.0.1:6379",
        "redis://127.0.0.1:not-a-port",
        "redis+sentinel://127.0.0.1:26379",
    ] {
        let cmd = Server::command(Some(url), &["--listen", &addr]);
        let (code, stdout, stderr) = run_to_exit(cmd, Duration::from_secs(10));
        assert_eq!(code, 64, "{url}: {stderr}");
        assert!(stderr.contains("--redis"), "{url}: {stderr}");
        assert_eq!(stdout, "", "{url}");
    }
}

/// A port another process holds: exit 69 with the address, before any
/// listening line; `serve --help` lists the code for it.
#[tokio::test]
async fn a_busy_port_exits_69() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let (code, stdout, stderr) = run_to_exit(
        Server::command(None, &["--listen", &addr]),
        Duration::from_secs(10),
    );
    assert_eq!(code, 69, "{stderr}");
    assert!(
        stderr.contains(&format!("tollgate: cannot listen on {addr}")),
        "{stderr}"
    );
    assert_eq!(stdout, "");
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["serve", "--help"])
        .output()
        .expect("help");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("69 an address to listen on cannot be bound (in use, not this host's)"),
        "{help}"
    );
}

/// With `--log-format json` every line the server prints is a JSON
/// object: the listening line (standard output), why it cannot start,
/// the shutdown notices, the log lines.
#[tokio::test]
async fn json_format_makes_every_line_json() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    // Refused at start: one ERROR line naming the cause, nothing on stdout.
    let (code, stdout, stderr) = run_to_exit(
        Server::command(Some("http://127.0.0.1:1"), &["--log-format", "json"]),
        Duration::from_secs(10),
    );
    assert_eq!((code, stdout.as_str()), (64, ""), "{stderr}");
    let lines = json_lines(&stderr);
    assert_eq!(lines.len(), 1, "{stderr}");
    assert_eq!(lines[0]["level"], "ERROR", "{stderr}");
    assert!(
        lines[0]["message"].as_str().expect("message").contains("--redis"),
        "{stderr}"
    );
    assert!(lines[0]["timestamp"].is_string(), "{stderr}");

    // Started on a Redis that does not answer yet, then stopped.
    let dir = tempfile::tempdir().expect("dir");
    let log = dir.path().join("stderr.log");
    let url = format!("redis://127.0.0.1:{}", support::free_port());
    let mut cmd = Server::command(Some(&url), &["--log-format", "json"]);
    cmd.env("TOLLGATE_LOG", "info");
    let mut s = Server::spawn(cmd, Stdio::from(std::fs::File::create(&log).expect("log")));
    let listening: serde_json::Value = serde_json::from_str(&s.line).expect("a JSON listening line");
    assert_eq!(
        (
            &listening["message"],
            &listening["store"],
            &listening["store_connected"]
        ),
        (&json!("listening"), &json!("redis"), &json!(false)),
        "{listening}"
    );
    assert_eq!(send(reqwest::Client::new().get(s.url("/healthz"))).await.0, 200);
    kill(Pid::from_raw(s.child.id() as i32), Signal::SIGTERM).expect("SIGTERM");
    let started = Instant::now();
    while s.child.try_wait().expect("wait").is_none() {
        assert!(started.elapsed() < Duration::from_secs(10), "still running");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let text = std::fs::read_to_string(&log).expect("read the log");
    let lines = json_lines(&text);
    assert!(
        lines
            .iter()
            .any(|l| l["message"] == "shutting down; answering pending long-polls"),
        "{text}"
    );
    assert!(
        lines.iter().any(|l| l["level"] == "WARN" && l["attempt"] == 1),
        "the retries are logged: {text}"
    );
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
