//! A room's states (`PUT /v1/rooms/{room}/state`): closed turns newcomers
//! away while the line moves on, sold out lets everyone waiting go at once
//! and says so, passthrough steps aside, open takes the line again; on
//! the embedded store, real Redis and two servers sharing one Redis. And
//! a state set at runtime survives a restart, while a changed config wins.
//! Random queueing (`queueing = "random"`) admits everyone at random,
//! never past the capacity, and shows no place.

mod room_support;
mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::time::Duration;

use room_support::*;
use serde_json::{Value, json};
use serve_support::{Server, send};
use support::RedisServer;

const ADMIN: &str = "admin-token-0123456789";

async fn set_state(c: &reqwest::Client, s: &Server, state: &str) -> Value {
    let (st, body) = send(
        c.put(s.url("/v1/rooms/shop/state"))
            .bearer_auth(ADMIN)
            .json(&json!({ "state": state })),
    )
    .await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["state"], state, "{body}");
    body
}

/// Asks until `check` holds (a server's view of the state follows the
/// store within a watch period), or fails after two seconds.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<String>>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        match check().await {
            None => return,
            Some(last) if std::time::Instant::now() > deadline => panic!("{what}: {last}"),
            Some(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

async fn every_state_does_what_it_says(redis: Option<&str>, two_servers: bool) {
    let (seen, up, dir) = site().await;
    let config = long_config(up, 2, "");
    let a = start(&dir, &config, redis);
    let b = two_servers.then(|| start(&dir, &config, redis));
    let pa = a.proxy.clone().expect("proxy");
    let pb = b.as_ref().map_or(pa.clone(), |b| b.proxy.clone().expect("proxy"));
    let proxies = vec![pa.clone(), pb.clone()];
    let c = reqwest::Client::new();
    let mut active = Vec::new();
    for i in 0..2 {
        let mut v = Visitor::new(&format!("active{i}"));
        assert!(is_admitted(&v.get(&c, &pa, "/page", true).await, &v.name));
        active.push(v);
    }
    let mut waiters = Vec::new();
    for i in 0..3 {
        let mut v = Visitor::new(&format!("waiter{i}"));
        let proxy = if i % 2 == 0 { &pa } else { &pb };
        let answer = v.get(&c, proxy, "/page", true).await.json();
        assert_eq!(
            (&answer["status"], &answer["state"]),
            (&"queued".into(), &"open".into()),
            "{answer}"
        );
        waiters.push(v);
    }

    // Closed: newcomers are turned away on either server at once (the
    // gate's door, not a server's view), as JSON and as a page.
    let closed = set_state(&c, &a, "closed").await;
    assert_eq!(
        (&closed["dropped"], &closed["waiting"]),
        (&0.into(), &3.into()),
        "{closed}"
    );
    let mut newcomer = Visitor::new("newcomer");
    let answer = newcomer.get(&c, &pb, "/page", true).await;
    assert_eq!(answer.status, 503, "{}", answer.text);
    assert_eq!(answer.json(), json!({"status": "closed", "state": "closed"}));
    let page = newcomer.get(&c, &pa, "/page", false).await;
    assert_eq!(page.status, 503);
    assert!(page.text.contains("The waiting room is closed"), "{}", page.text);
    assert!(newcomer.cookie.is_none(), "no place was given");
    // Those in line keep their places, and are told the state.
    let cookie = waiters[2].cookie.clone().expect("cookie");
    eventually("a waiter told the room is closed", || {
        let (c, proxy, cookie) = (c.clone(), pb.clone(), cookie.clone());
        async move {
            let s = status_of(&c, &proxy, &cookie).await;
            (s["state"] != "closed" || s["position"] != 3).then(|| s.to_string())
        }
    })
    .await;
    let html = waiters[1].get(&c, &pb, "/page", false).await;
    assert!(html.text.contains("data-state=\"closed\""), "{}", html.text);
    // Those inside keep browsing, and the line moves on: one more place
    // goes to the head of the line, not to a newcomer.
    for v in &mut active {
        assert!(is_admitted(&v.get(&c, &pb, "/page", true).await, &v.name));
    }
    let (st, raised) = send(
        c.put(a.url("/v1/rooms/shop/capacity"))
            .bearer_auth(ADMIN)
            .json(&json!({"capacity": 3})),
    )
    .await;
    assert_eq!(st, 200, "{raised}");
    let head = &mut waiters[0];
    assert!(is_admitted(&head.get(&c, &pa, "/page", true).await, "waiter0"));

    // Sold out: the two still waiting are let go in the same step, and
    // told so at their next request on either server.
    let sold = set_state(&c, b.as_ref().unwrap_or(&a), "sold_out").await;
    assert_eq!(
        (&sold["dropped"], &sold["waiting"]),
        (&2.into(), &0.into()),
        "{sold}"
    );
    let cookie = waiters[1].cookie.clone().expect("cookie");
    assert_eq!(
        status_of(&c, &pa, &cookie).await,
        json!({"status": "sold_out", "state": "sold_out"})
    );
    let page = waiters[2].get(&c, &pa, "/page", false).await;
    assert_eq!(page.status, 410);
    assert!(page.text.contains("<h1>Sold out</h1>"), "{}", page.text);
    assert!(waiters[2].cookie.is_none(), "the token is cleared");
    let answer = newcomer.get(&c, &pb, "/page", true).await;
    assert_eq!(answer.status, 410, "{}", answer.text);
    assert_eq!(answer.json()["status"], "sold_out");
    // Those inside finish.
    for v in active.iter_mut().chain([&mut waiters[0]]) {
        assert!(is_admitted(&v.get(&c, &pb, "/page", true).await, &v.name));
    }
    {
        let seen = seen.lock().expect("lock");
        assert!(
            seen.first_seen
                .iter()
                .all(|w| w.starts_with("active") || w == "waiter0"),
            "only those let in reached the site: {:?}",
            seen.first_seen
        );
    }

    // Passthrough: everyone goes straight to the site, full or not.
    set_state(&c, &a, "passthrough").await;
    let mut passer = Visitor::new("passer");
    // (Each server's view learns the state within a watch period: ask
    // every server until all have.)
    eventually("passthrough on every server", || {
        let (c, proxies) = (c.clone(), proxies.clone());
        async move {
            for proxy in &proxies {
                let answer = Visitor::new("passer").get(&c, proxy, "/page", true).await;
                if !is_admitted(&answer, "passer") {
                    return Some(answer.text);
                }
            }
            None
        }
    })
    .await;
    assert!(is_admitted(&passer.get(&c, &pa, "/page", true).await, "passer"));
    assert!(passer.cookie.is_none(), "no token in passthrough");

    // Open again: the room is full, so a newcomer queues.
    let open = set_state(&c, &a, "open").await;
    assert_eq!(open["paused"], false, "{open}");
    eventually("open again on every server", || {
        let (c, proxies) = (c.clone(), proxies.clone());
        async move {
            for proxy in &proxies {
                let answer = Visitor::new("late").get(&c, proxy, "/page", true).await.json();
                if answer["status"] != "queued" || answer["state"] != "open" {
                    return Some(answer.to_string());
                }
            }
            None
        }
    })
    .await;
    // Pause and resume are the states paused and open.
    let (st, paused) = send(c.post(a.url("/v1/rooms/shop/pause")).bearer_auth(ADMIN)).await;
    assert_eq!((st, &paused["state"]), (200, &"paused".into()), "{paused}");
    let (st, resumed) = send(c.post(a.url("/v1/rooms/shop/resume")).bearer_auth(ADMIN)).await;
    assert_eq!((st, &resumed["state"]), (200, &"open".into()), "{resumed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_state_does_what_it_says_embedded() {
    every_state_does_what_it_says(None, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_state_does_what_it_says_redis() {
    let redis = RedisServer::start();
    every_state_does_what_it_says(Some(&redis.url()), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_state_does_what_it_says_across_servers() {
    let redis = RedisServer::start();
    every_state_does_what_it_says(Some(&redis.url()), true).await;
}

/// `queueing = "random"`: never more than the capacity on the site, each
/// freed place goes to a waiter the store picks at random (not in arrival
/// order), everyone is admitted while the line drains, and no waiter is
/// shown a place or an estimate (JSON and page) or offered a draw.
async fn random_queueing_admits_everyone_at_random(redis: Option<&str>, two_servers: bool) {
    let (seen, up, dir) = site().await;
    let config = long_config(up, 3, "queueing = \"random\"");
    let a = start(&dir, &config, redis);
    let b = two_servers.then(|| start(&dir, &config, redis));
    let pa = a.proxy.clone().expect("proxy");
    let pb = b.as_ref().map_or(pa.clone(), |b| b.proxy.clone().expect("proxy"));
    let c = reqwest::Client::new();
    let mut inside = Vec::new();
    for i in 0..3 {
        let mut v = Visitor::new(&format!("first{i}"));
        assert!(is_admitted(&v.get(&c, &pa, "/page", true).await, &v.name));
        inside.push(v);
    }
    let mut line = Vec::new();
    for i in 0..12 {
        let mut v = Visitor::new(&format!("w{i:02}"));
        let proxy = if i % 2 == 0 { &pa } else { &pb };
        let a = v.get(&c, proxy, "/page", true).await;
        assert_eq!(a.status, 503, "{}", a.text);
        let j = a.json();
        assert_eq!(j["status"], "queued", "{j}");
        assert_eq!(j["position"], Value::Null, "no place to show: {j}");
        assert_eq!(j["order"], "random", "{j}");
        assert_eq!(j["waiting"], i + 1, "{j}");
        assert_eq!(j["eta_low_ms"], Value::Null, "{j}");
        line.push((v, i % 2 == 0));
    }
    let page = line[0].0.get(&c, &pa, "/page", false).await;
    assert!(
        page.text.contains(r#"id="position">in the draw<"#),
        "{}",
        page.text
    );
    assert!(page.text.contains("Places are given at random"), "{}", page.text);
    let (st, stats) = send(c.get(a.url("/v1/rooms/shop")).bearer_auth(ADMIN)).await;
    assert_eq!((st, &stats["queueing"]), (200, &json!("random")), "{stats}");
    let (st, body) = send(c.get(format!("{pa}/.tollgate/shop/draw"))).await;
    assert_eq!((st, &body["error"]["code"]), (404, &json!("no_draw")), "{body}");
    // The line drains: whoever is inside leaves, one at a time, and the
    // waiters ask on; each freed place goes to one of them.
    let arrival: Vec<String> = line.iter().map(|(v, _)| v.name.clone()).collect();
    let mut admitted = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !line.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "not everyone admitted: {admitted:?}"
        );
        if let Some(mut v) = inside.pop() {
            assert_eq!(v.get(&c, &pa, "/done", true).await.text, "bye");
        }
        let before = admitted.len();
        let wait = std::time::Instant::now() + Duration::from_secs(5);
        while admitted.len() == before {
            assert!(std::time::Instant::now() < wait, "a place freed, nobody admitted");
            let mut i = 0;
            while i < line.len() {
                let proxy = if line[i].1 { &pa } else { &pb };
                let a = line[i].0.get(&c, proxy, "/page", true).await;
                if is_admitted(&a, &line[i].0.name) {
                    let (v, _) = line.remove(i);
                    admitted.push(v.name.clone());
                    inside.push(v);
                } else {
                    assert_eq!(a.status, 503, "{}", a.text);
                    assert_eq!(a.json()["position"], Value::Null, "{}", a.text);
                    i += 1;
                }
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        assert_eq!(
            admitted.len(),
            before + 1,
            "one place freed, one admitted: {admitted:?}"
        );
    }
    let s = seen.lock().expect("lock");
    assert!(s.violations.is_empty(), "{:?}", s.violations);
    assert!(s.most <= 3, "{} on the site at once", s.most);
    // (The chance that twelve random picks come out in arrival order is
    // 1 in 12!, about 2e-9.)
    assert_ne!(admitted, arrival, "admitted in arrival order: not at random");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_queueing_admits_everyone_at_random_embedded() {
    random_queueing_admits_everyone_at_random(None, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_queueing_admits_everyone_at_random_across_servers() {
    let redis = RedisServer::start();
    random_queueing_admits_everyone_at_random(Some(&redis.url()), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_states_are_refused() {
    let (_seen, up, dir) = site().await;
    let s = start(&dir, &long_config(up, 1, ""), None);
    let c = reqwest::Client::new();
    for body in [
        json!({"state": "nope"}),
        json!({"state": "Open"}),
        json!({}),
        json!({"state": 1}),
    ] {
        let (st, answer) = send(
            c.put(s.url("/v1/rooms/shop/state"))
                .bearer_auth(ADMIN)
                .json(&body),
        )
        .await;
        assert_eq!(st, 400, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], "bad_request", "{answer}");
    }
    let (st, answer) = send(
        c.put(s.url("/v1/rooms/none/state"))
            .bearer_auth(ADMIN)
            .json(&json!({"state": "open"})),
    )
    .await;
    assert_eq!((st, &answer["error"]["code"]), (404, &"room_not_found".into()));
    let (st, _) = send(
        c.put(s.url("/v1/rooms/shop/state"))
            .json(&json!({"state": "open"})),
    )
    .await;
    assert_eq!(st, 401, "the route needs a token");
}

/// A sold-out room stays sold out when its servers restart with the same
/// config; a config that names another state than at the last start wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_set_at_runtime_survives_a_restart_until_the_config_changes() {
    let redis = RedisServer::start();
    let (_seen, up, dir) = site().await;
    let c = reqwest::Client::new();
    let first = start(&dir, &long_config(up, 1, ""), Some(&redis.url()));
    set_state(&c, &first, "sold_out").await;
    drop(first);

    let again = start(&dir, &long_config(up, 1, ""), Some(&redis.url()));
    let (_, figures) = send(c.get(again.url("/v1/rooms/shop")).bearer_auth(ADMIN)).await;
    assert_eq!(figures["state"], "sold_out", "{figures}");
    let answer = Visitor::new("v")
        .get(&c, again.proxy.as_deref().expect("proxy"), "/page", true)
        .await;
    assert_eq!(answer.status, 410, "{}", answer.text);
    drop(again);

    let changed = start(
        &dir,
        &long_config(up, 1, "state = \"paused\""),
        Some(&redis.url()),
    );
    let (_, figures) = send(c.get(changed.url("/v1/rooms/shop")).bearer_auth(ADMIN)).await;
    assert_eq!(
        (&figures["state"], &figures["paused"]),
        (&"paused".into(), &true.into()),
        "{figures}"
    );
    let answer = Visitor::new("v")
        .get(&c, changed.proxy.as_deref().expect("proxy"), "/page", true)
        .await
        .json();
    assert_eq!(
        (&answer["status"], &answer["state"]),
        (&"queued".into(), &"paused".into()),
        "{answer}"
    );
}
