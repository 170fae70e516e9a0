//! A waiting room on the durable embedded store across a restart of
//! `tollgate serve` (an upgrade, `systemctl restart`): the visitor who was
//! admitted is still admitted, the one who waited still waits at the same
//! place, and the line moves on as before: no one is admitted twice over
//! capacity, no one loses their place.

mod room_support;
mod serve_support;

use std::time::{Duration, Instant};

use room_support::*;
use serve_support::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_who_is_in_and_who_waits() {
    let (_seen, up, dir) = site().await;
    // Long sessions and grace: nobody leaves the room by time here.
    let config = room_config(up, 1, r#"arrival_rate = "off""#)
        .replace("session_ttl = \"1500ms\"", "session_ttl = \"60s\"")
        .replace("grace = \"3s\"", "grace = \"60s\"");
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, &config).expect("config");
    let data = dir.path().join("data");
    let args = [
        "--config",
        path.to_str().expect("path"),
        "--data-dir",
        data.to_str().expect("path"),
    ];
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
