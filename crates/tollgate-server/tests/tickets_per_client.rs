//! `max_tickets_per_client`: one client cannot fill a line without bound.
//! A client is its bearer token when tokens are configured, else its IP
//! address; tickets stop counting once granted, cancelled, or their
//! heartbeat lapses.

mod serve_support;

use std::net::IpAddr;
use std::time::Duration;

use serde_json::{Value, json};
use serve_support::{Server, send};

/// A client whose requests come from `ip` (any of 127.0.0.0/8 is local).
fn from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<IpAddr>().expect("ip"))
        .build()
        .expect("client")
}

async fn enter(c: &reqwest::Client, s: &Server, gate: &str, body: Value) -> (u16, Value) {
    send(c.post(s.url(&format!("/v1/gates/{gate}/enter"))).json(&body)).await
}

fn refused(answer: &(u16, Value)) -> bool {
    answer.0 == 429 && answer.1["error"]["code"] == "too_many_tickets"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_ip_is_capped_and_another_is_not() {
    let s = Server::start_with(None, &["--max-tickets-per-client", "3"]);
    let (a, b) = (from("127.0.0.2"), from("127.0.0.3"));
    let (st, held) = enter(&a, &s, "line", json!({"capacity": 1})).await;
    assert_eq!((st, held["status"].as_str()), (200, Some("granted")), "{held}");
    let mut tickets = Vec::new();
    for _ in 0..3 {
        let (st, q) = enter(&a, &s, "line", json!({})).await;
        assert_eq!((st, q["status"].as_str()), (200, Some("queued")), "{q}");
        tickets.push(q["ticket"].as_str().expect("ticket").to_owned());
    }
    let answer = enter(&a, &s, "line", json!({})).await;
    assert!(refused(&answer), "{answer:?}");
    assert!(
        answer.1["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("max_tickets_per_client")),
        "{answer:?}"
    );
    // The cap is on waiting, not on entering: a grant at once still comes,
    // and `"queue": false` answers busy as ever.
    let (st, g) = enter(&a, &s, "other", json!({"capacity": 1})).await;
    assert_eq!((st, g["status"].as_str()), (200, Some("granted")), "{g}");
    let (st, g) = enter(&a, &s, "other", json!({"queue": false})).await;
    assert_eq!((st, g["status"].as_str()), (200, Some("busy")), "{g}");
    let answer = enter(&a, &s, "other", json!({})).await;
    assert!(refused(&answer), "{answer:?}");
    // Another client is not affected.
    for _ in 0..3 {
        let (st, q) = enter(&b, &s, "line", json!({})).await;
        assert_eq!((st, q["status"].as_str()), (200, Some("queued")), "{q}");
    }
    assert!(refused(&enter(&b, &s, "line", json!({})).await));

    // A cancelled ticket stops counting.
    let t = tickets.pop().expect("ticket");
    let (st, _) = send(a.delete(s.url(&format!("/v1/gates/line/tickets/{t}")))).await;
    assert_eq!(st, 200);
    let (st, q) = enter(&a, &s, "line", json!({})).await;
    assert_eq!((st, q["status"].as_str()), (200, Some("queued")), "{q}");
    assert!(refused(&enter(&a, &s, "line", json!({})).await));
    // So does a granted one, once its holder hears of it.
    let token = held["token"].as_str().expect("token");
    assert_eq!(
        send(a.delete(s.url(&format!("/v1/gates/line/leases/{token}"))))
            .await
            .0,
        200
    );
    let (st, g) = send(a.get(s.url(&format!("/v1/gates/line/tickets/{}", tickets[0])))).await;
    assert_eq!((st, g["status"].as_str()), (200, Some("granted")), "{g}");
    let (st, q) = enter(&a, &s, "line", json!({})).await;
    assert_eq!((st, q["status"].as_str()), (200, Some("queued")), "{q}");
    assert!(refused(&enter(&a, &s, "line", json!({})).await));

    let text = s.metrics(None).await;
    assert!(text.contains("tollgate_tickets_refused_total"), "{text}");
}

/// With tokens configured the client is the token, whatever the address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tokens_each_token_is_a_client() {
    let (one, two) = ("token-number-one-0123", "token-number-two-0123");
    let s = Server::start_with(
        None,
        &["--max-tickets-per-client", "2", "--token", one, "--token", two],
    );
    let c = reqwest::Client::new();
    let enter_as = |token: &'static str, body: Value| {
        let req = c
            .post(s.url("/v1/gates/line/enter"))
            .bearer_auth(token)
            .json(&body);
        async move { send(req).await }
    };
    assert_eq!(enter_as(one, json!({"capacity": 1})).await.1["status"], "granted");
    for _ in 0..2 {
        assert_eq!(enter_as(one, json!({})).await.1["status"], "queued");
    }
    assert!(refused(&enter_as(one, json!({})).await));
    for _ in 0..2 {
        assert_eq!(enter_as(two, json!({})).await.1["status"], "queued");
    }
    assert!(refused(&enter_as(two, json!({})).await));
}

/// Tickets nobody asks about leave the line after their heartbeat, and
/// stop counting then; 0 means no cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lapsed_tickets_stop_counting_and_zero_is_no_cap() {
    let s = Server::start_with(None, &["--max-tickets-per-client", "2"]);
    let c = reqwest::Client::new();
    assert_eq!(enter(&c, &s, "line", json!({"capacity": 1})).await.0, 200);
    for _ in 0..2 {
        let (st, q) = enter(&c, &s, "line", json!({"heartbeat_ms": 100})).await;
        assert_eq!((st, q["status"].as_str()), (200, Some("queued")), "{q}");
    }
    assert!(refused(&enter(&c, &s, "line", json!({})).await));
    // Forgotten one second after the heartbeat would have lapsed.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let (st, q) = enter(&c, &s, "line", json!({})).await;
    assert_eq!((st, q["status"].as_str()), (200, Some("queued")), "{q}");

    let s = Server::start_with(None, &["--max-tickets-per-client", "0"]);
    assert_eq!(enter(&c, &s, "line", json!({"capacity": 1})).await.0, 200);
    for _ in 0..50 {
        let (st, q) = enter(&c, &s, "line", json!({})).await;
        assert_eq!((st, q["status"].as_str()), (200, Some("queued")), "{q}");
    }
}
