//! A waiting room on the durable embedded store across a restart of
//! `tollgate serve` (an upgrade, `systemctl restart`): the visitor who was
//! admitted is still admitted, the one who waited still waits at the same
//! place, and the line moves on as before: no one is admitted twice over
//! capacity, no one loses their place; and a draw in progress keeps its
//! commitment and every visitor's place in it.

mod room_support;
mod serve_support;

use std::time::{Duration, Instant};

use room_support::*;
use serve_support::Server;

/// `serve`'s arguments for a room of capacity 1 on the embedded store in
/// `dir` (its config written there), long sessions and grace: nobody
/// leaves the room by time here.
fn durable_room(up: std::net::SocketAddr, dir: &tempfile::TempDir) -> Vec<String> {
    let config = room_config(up, 1, r#"arrival_rate = "off""#)
        .replace("session_ttl = \"1500ms\"", "session_ttl = \"60s\"")
        .replace("grace = \"3s\"", "grace = \"60s\"");
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, &config).expect("config");
    let data = dir.path().join("data");
    [
        "--config",
        path.to_str().expect("path"),
        "--data-dir",
        data.to_str().expect("path"),
    ]
    .map(str::to_owned)
    .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_who_is_in_and_who_waits() {
    let (_seen, up, dir) = site().await;
    let args = durable_room(up, &dir);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let s = Server::start_with(None, &args);
    let proxy = s.proxy.clone().expect("proxy");
    let c = reqwest::Client::new();
    let mut inside = Visitor::new("inside");
    assert!(is_admitted(
        &inside.get(&c, &proxy, "/page", true).await,
        "inside"
    ));
    let mut first = Visitor::new("first");
    let mut second = Visitor::new("second");
    assert_eq!(first.get(&c, &proxy, "/page", true).await.json()["position"], 1);
    assert_eq!(second.get(&c, &proxy, "/page", true).await.json()["position"], 2);
    s.terminate();

    let s = Server::start_with(None, &args);
    let proxy = s.proxy.clone().expect("proxy");
    assert!(
        is_admitted(&inside.get(&c, &proxy, "/page", true).await, "inside"),
        "the admitted visitor is still in"
    );
    let a = first.get(&c, &proxy, "/page", true).await.json();
    assert_eq!(
        (&a["status"], &a["position"]),
        (&"queued".into(), &1.into()),
        "{a}"
    );
    let b = second.get(&c, &proxy, "/page", true).await.json();
    assert_eq!(
        (&b["status"], &b["position"]),
        (&"queued".into(), &2.into()),
        "{b}"
    );
    // The one inside leaves: the head of the line is admitted, in turn.
    let (st, _) = serve_support::send(c.post(format!("{proxy}/.tollgate/shop/leave")).header(
        "cookie",
        format!("tollgate_shop={}", inside.cookie.clone().expect("cookie")),
    ))
    .await;
    assert!(st < 400, "leave: {st}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if is_admitted(&first.get(&c, &proxy, "/page", true).await, "first") {
            break;
        }
        assert!(Instant::now() < deadline, "the head of the line was not admitted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let b = second.get(&c, &proxy, "/page", true).await.json();
    assert_eq!(b["position"], 1, "{b}");
}

/// A draw in progress across a crash of `tollgate serve` on the durable
/// embedded store (SIGKILL, no shutdown: what was answered must already
/// be in the log): the commitment published before the crash still
/// holds, each visitor keeps their draw id, and at the opening the draw
/// is revealed with every one of them and checks against that
/// commitment (`tollgate room verify-draw --commitment`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_the_draw() {
    let (_seen, up, dir) = site().await;
    let args = durable_room(up, &dir);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let s = Server::start_with(None, &args);
    let c = reqwest::Client::new();
    let opens = rfc3339_in(8_000);
    let (st, set) = serve_support::send(
        c.put(s.url("/v1/rooms/shop/schedule"))
            .bearer_auth("admin-token-0123456789")
            .json(&serde_json::json!({"opens_at": opens, "prequeue": "1h"})),
    )
    .await;
    assert_eq!(st, 200, "{set}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let proxy = s.proxy.clone().expect("proxy");
    let mut line = Vec::new();
    let mut ids = Vec::new();
    for i in 0..5 {
        let mut v = Visitor::new(&format!("v{i}"));
        let j = v.get(&c, &proxy, "/page", true).await.json();
        assert_eq!(j["status"], "before_open", "{j}");
        let status = status_of(&c, &proxy, v.cookie.as_deref().expect("cookie")).await;
        ids.push(status["draw"]["id"].as_str().expect("draw id").to_owned());
        line.push(v);
    }
    let draw_url = |proxy: &str| format!("{proxy}/.tollgate/shop/draw");
    let (_, before) = serve_support::send(c.get(draw_url(&proxy))).await;
    let commitment = before["commitment"].as_str().expect("commitment").to_owned();
    // kill -9 (the server's drop), mid-draw.
    drop(s);

    let s = Server::start_with(None, &args);
    let proxy = s.proxy.clone().expect("proxy");
    let (_, after) = serve_support::send(c.get(draw_url(&proxy))).await;
    assert_eq!(
        (&after["status"], &after["commitment"]),
        (&"pending".into(), &commitment.as_str().into()),
        "{after}"
    );
    for (v, id) in line.iter().zip(&ids) {
        let status = status_of(&c, &proxy, v.cookie.as_deref().expect("cookie")).await;
        assert_eq!(
            (&status["status"], &status["draw"]["id"]),
            (&"before_open".into(), &id.as_str().into()),
            "{status}"
        );
    }
    // The opening: revealed with all five, and it checks.
    let deadline = Instant::now() + Duration::from_secs(20);
    let drawn = loop {
        let (_, j) = serve_support::send(c.get(draw_url(&proxy))).await;
        if j["status"] == "drawn" {
            break j;
        }
        assert!(Instant::now() < deadline, "never drawn: {j}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut published: Vec<String> = drawn["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.as_str().expect("id").to_owned())
        .collect();
    let head = published[0].clone();
    published.sort();
    let mut joined = ids.clone();
    joined.sort();
    assert_eq!(published, joined, "every visitor of the pre-queue is in the draw");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args([
            "room",
            "verify-draw",
            &draw_url(&proxy),
            "--commitment",
            &commitment,
        ])
        .args(["--id", &head, "--place", "1"])
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The head of the draw is the one admitted (capacity 1).
    let first = ids.iter().position(|id| *id == head).expect("the head");
    let mut v = Visitor::new(&format!("v{first}"));
    v.cookie = line[first].cookie.clone();
    assert!(is_admitted(&v.get(&c, &proxy, "/page", true).await, &v.name));
}
