//! `tollgate serve --log-format json`: every line on standard error is a
//! JSON object; request lines carry whole milliseconds; each visitor
//! request through a waiting room gets one access line; a room that
//! cannot read its state from the store says why at warn.

mod room_support;
mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use serve_support::{Server, send};

use room_support::*;

/// Every line of `path` as JSON, once it holds a line matching `until`.
async fn log_lines(path: &std::path::Path, until: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).expect("read the log");
        let lines: Vec<Value> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect();
        if until(&lines) {
            return lines;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "log so far: {text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn access(lines: &[Value], status: u64) -> Option<&Value> {
    lines
        .iter()
        .find(|l| l["target"] == "tollgate::access" && l["status"] == status)
}

#[tokio::test]
async fn json_logs_carry_integer_ms_and_one_access_line_per_visit() {
    let (seen, up, dir) = site().await;
    let config = dir.path().join("tollgate.toml");
    std::fs::write(&config, room_config(up, 1, "")).expect("config");
    let log = dir.path().join("stderr.log");
    let mut cmd = Server::command(
        None,
        &["--config", config.to_str().expect("path"), "--log-format", "json"],
    );
    cmd.env("TOLLGATE_LOG", "info");
    let s = Server::spawn(cmd, Stdio::from(std::fs::File::create(&log).expect("log file")));
    let proxy = s.proxy.clone().expect("proxy");
    let c = reqwest::Client::new();

    let (st, _) = send(
        c.post(s.url("/v1/gates/g/enter"))
            .bearer_auth("admin-token-0123456789")
            .json(&json!({"capacity": 1})),
    )
    .await;
    assert_eq!(st, 200);
    // One admitted (proxied), one queued (answered by the room itself).
    let mut holder = Visitor::new("holder");
    assert!(is_admitted(
        &holder.get(&c, &proxy, "/page?q=1", true).await,
        "holder"
    ));
    let mut waiter = Visitor::new("waiter");
    assert_eq!(waiter.get(&c, &proxy, "/page", true).await.status, 503);

    let lines = log_lines(&log, |l| access(l, 200).is_some() && access(l, 503).is_some()).await;
    let request = lines
        .iter()
        .find(|l| l["target"] == "tollgate::api" && l["route"] == "/v1/gates/{name}/enter")
        .expect("the API request's line");
    assert_eq!(request["level"], "INFO");
    assert_eq!(request["method"], "POST");
    assert_eq!(request["status"], 200);
    assert!(request["ms"].is_u64(), "{request}");

    let session = seen.lock().expect("lock").sessions["holder"].clone();
    let admitted = access(&lines, 200).expect("the admitted visit's line");
    assert_eq!(admitted["level"], "INFO");
    assert_eq!(admitted["room"], "shop");
    assert_eq!(admitted["visitor"], session.as_str(), "{admitted}");
    assert_eq!(admitted["method"], "GET");
    assert_eq!(admitted["path"], "/page", "no query string: {admitted}");
    assert_eq!(admitted["upstream_status"], 200);
    assert!(admitted["ms"].is_u64(), "{admitted}");

    let queued = access(&lines, 503).expect("the queued visit's line");
    assert!(
        queued["visitor"].as_str().is_some_and(|v| !v.is_empty()),
        "{queued}"
    );
    assert_ne!(queued["visitor"], admitted["visitor"]);
    assert!(queued.get("upstream_status").is_none(), "not proxied: {queued}");
    assert!(queued["ms"].is_u64(), "{queued}");

    // The signed tokens never reach the log.
    let text = std::fs::read_to_string(&log).expect("log");
    for cookie in [&holder.cookie, &waiter.cookie] {
        let cookie = cookie.as_deref().expect("a cookie");
        assert!(!text.contains(cookie), "a signed token in the log");
    }
}

#[tokio::test]
async fn a_room_that_cannot_read_the_store_says_why_at_warn() {
    // A user that may not run scripts: every read of the room's state
    // fails (NOPERM), so the room never becomes ready.
    let redis = support::RedisServer::start_with_args(&[
        "--user",
        "tg",
        "on",
        ">pw",
        "~*",
        "&*",
        "+@all",
        "-eval",
        "-evalsha",
        "-eval_ro",
        "-evalsha_ro",
    ]);
    let url = format!("redis://tg:pw@127.0.0.1:{}", redis.port);
    let (_, up, dir) = site().await;
    let config = dir.path().join("tollgate.toml");
    std::fs::write(&config, room_config(up, 1, "")).expect("config");
    let log = dir.path().join("stderr.log");
    let cmd = Server::command(
        Some(&url),
        &["--config", config.to_str().expect("path"), "--log-format", "json"],
    );
    let _s = Server::spawn(cmd, Stdio::from(std::fs::File::create(&log).expect("log file")));
    let is_watch_error = |l: &Value| {
        l["message"]
            .as_str()
            .is_some_and(|m| m.contains("could not read the room's state"))
    };
    let lines = log_lines(&log, |l| l.iter().any(is_watch_error)).await;
    let line = lines
        .iter()
        .find(|l| is_watch_error(l))
        .expect("the watch's error");
    assert_eq!(line["level"], "WARN", "{line}");
    assert_eq!(line["room"], "shop", "{line}");
    let error = line["error"].as_str().unwrap_or_default();
    assert!(error.contains("NOPERM") || error.contains("permission"), "{line}");
    // Once a minute, not every 40 ms read.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let text = std::fs::read_to_string(&log).expect("log");
    let repeated = text.matches("could not read the room's state").count();
    assert_eq!(repeated, 1, "{text}");
}
