//! The operator's reset of a room's line, and its view of the head of the
//! line: everyone waiting is dropped in one step and told so (never put
//! silently at the back, never admitted by their old token), active
//! visitors keep browsing, and whoever arrives after it queues normally;
//! on the embedded store, real Redis, two servers sharing one Redis (and
//! one Redis Cluster, and one Sentinel-managed master).

mod room_support;
mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::time::Duration;

use room_support::*;
use serde_json::Value;
use serve_support::{Server, send};
use support::RedisServer;

const ADMIN: &str = "admin-token-0123456789";

async fn admin(c: &reqwest::Client, s: &Server, method: reqwest::Method, path: &str) -> (u16, Value) {
    send(c.request(method, s.url(path)).bearer_auth(ADMIN)).await
}

/// Two active visitors and five in line (joined on either server); the
/// line listed head first with ages; a reset on `a`; then every dropped
/// visitor, asking either server, is told of the reset (status, JSON page
/// and HTML page), its old token never admits it, the active ones keep
/// browsing, and arrivals after the reset queue from the front.
async fn reset_drops_the_line_and_says_so(redis: Option<&str>, two_servers: bool) {
    let (seen, up, dir) = site().await;
    let config = long_config(up, 2, "");
    let a = start(&dir, &config, redis);
    let b = two_servers.then(|| start(&dir, &config, redis));
    let pa = a.proxy.clone().expect("proxy");
    let pb = b.as_ref().map_or(pa.clone(), |b| b.proxy.clone().expect("proxy"));
    let c = reqwest::Client::new();
    let mut active = Vec::new();
    for i in 0..2 {
        let mut v = Visitor::new(&format!("active{i}"));
        assert!(is_admitted(&v.get(&c, &pa, "/page", true).await, &v.name));
        active.push(v);
    }
    let mut waiters = Vec::new();
    for i in 0..5 {
        let mut v = Visitor::new(&format!("waiter{i}"));
        let proxy = if i % 2 == 0 { &pa } else { &pb };
        let answer = v.get(&c, proxy, "/page", true).await.json();
        assert_eq!(answer["status"], "queued", "{answer}");
        assert_eq!(answer["position"], i + 1, "{answer}");
        waiters.push(v);
        // Ages apart by more than a clock tick.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The head of the line: in order, older toward the head.
    let (st, listed) = admin(&c, &a, reqwest::Method::GET, "/v1/rooms/shop/line").await;
    assert_eq!(st, 200, "{listed}");
    let line = listed["line"].as_array().expect("line");
    assert_eq!(line.len(), 5, "{listed}");
    for (i, w) in line.iter().enumerate() {
        assert_eq!(w["position"], i + 1, "{listed}");
        assert!(w.get("ticket").is_none() && w.get("label").is_none(), "{listed}");
    }
    for pair in line.windows(2) {
        assert!(
            pair[0]["number"].as_u64() < pair[1]["number"].as_u64(),
            "{listed}"
        );
        let (older, younger) = (pair[0]["age_ms"].as_u64(), pair[1]["age_ms"].as_u64());
        assert!(older.is_some() && older > younger, "{listed}");
    }
    let (_, two) = admin(&c, &a, reqwest::Method::GET, "/v1/rooms/shop/line?limit=2").await;
    assert_eq!(two["line"].as_array().map(Vec::len), Some(2), "{two}");
    assert_eq!(two["line"][0]["number"], line[0]["number"]);

    let cookies: Vec<String> = waiters
        .iter()
        .map(|w| w.cookie.clone().expect("cookie"))
        .collect();
    let (st, reset) = admin(&c, &a, reqwest::Method::POST, "/v1/rooms/shop/reset").await;
    assert_eq!(st, 200, "{reset}");
    assert_eq!(
        (&reset["dropped"], &reset["waiting"], &reset["active"]),
        (&Value::from(5), &Value::from(0), &Value::from(2)),
        "{reset}"
    );

    // Each dropped visitor's next status, on the other server, says so.
    for cookie in &cookies {
        assert_eq!(status_of(&c, &pb, cookie).await["status"], "reset");
    }
    // The page, as JSON and as HTML, says so too and clears the token.
    let json = waiters[0].get(&c, &pb, "/page", true).await;
    assert_eq!(json.json()["status"], "reset", "{}", json.text);
    assert!(waiters[0].cookie.is_none(), "the token is cleared");
    let html = waiters[1].get(&c, &pa, "/page", false).await;
    assert_eq!(html.status, 200);
    assert!(
        html.text.contains("The line was reset by the operator") && html.text.contains("href=\"/page\""),
        "{}",
        html.text
    );
    assert!(waiters[1].cookie.is_none(), "the token is cleared");
    // The old tokens, sent again anywhere, only ever say so.
    for cookie in &cookies {
        for proxy in [&pa, &pb] {
            let mut replay = Visitor::new("replayer");
            replay.cookie = Some(cookie.clone());
            let answer = replay.get(&c, proxy, "/page", true).await;
            assert_eq!(answer.json()["status"], "reset", "{}", answer.text);
        }
    }
    {
        let seen = seen.lock().expect("lock");
        assert!(
            seen.first_seen.iter().all(|w| w.starts_with("active")),
            "only the active visitors reached the site: {:?}",
            seen.first_seen
        );
    }
    // The active visitors keep browsing, on either server.
    for v in &mut active {
        assert!(is_admitted(&v.get(&c, &pa, "/page", true).await, &v.name));
        assert!(is_admitted(&v.get(&c, &pb, "/page", true).await, &v.name));
    }
    // A newcomer queues at the front of the new line; a dropped visitor
    // joining again (no token now) queues behind it.
    let mut late = Visitor::new("late");
    let answer = late.get(&c, &pb, "/page", true).await.json();
    assert_eq!(
        (&answer["status"], &answer["position"]),
        (&"queued".into(), &1.into()),
        "{answer}"
    );
    let again = waiters[0].get(&c, &pa, "/page", true).await.json();
    assert_eq!(
        (&again["status"], &again["position"]),
        (&"queued".into(), &2.into()),
        "{again}"
    );
    let late_cookie = late.cookie.clone().expect("cookie");
    assert_eq!(status_of(&c, &pa, &late_cookie).await["status"], "queued");
    let (_, listed) = admin(&c, &a, reqwest::Method::GET, "/v1/rooms/shop/line").await;
    assert_eq!(listed["line"].as_array().map(Vec::len), Some(2), "{listed}");

    assert_eq!(room_metric(&a, "tollgate_room_line_resets_total").await, 1);
    assert_eq!(room_metric(&a, "tollgate_room_line_reset_dropped_total").await, 5);
    let told = room_metric(&a, "tollgate_room_line_reset_told_total").await
        + match &b {
            Some(b) => room_metric(b, "tollgate_room_line_reset_told_total").await,
            None => 0,
        };
    assert!(told >= 5, "told {told} visitors of the reset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_drops_the_line_and_says_so_embedded() {
    reset_drops_the_line_and_says_so(None, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_drops_the_line_and_says_so_redis() {
    let redis = RedisServer::start();
    reset_drops_the_line_and_says_so(Some(&redis.url()), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_drops_the_line_and_says_so_across_servers() {
    let redis = RedisServer::start();
    reset_drops_the_line_and_says_so(Some(&redis.url()), true).await;
}

/// Resetting an empty line, a paused room's line, an unknown room; the
/// listing's bounds and bad input; removing one waiter by number.
async fn edges(redis: Option<&str>) {
    let (_seen, up, dir) = site().await;
    let s = start(&dir, &long_config(up, 1, ""), redis);
    let proxy = s.proxy.clone().expect("proxy");
    let c = reqwest::Client::new();
    let post = reqwest::Method::POST;
    let get = reqwest::Method::GET;

    let (st, v) = admin(&c, &s, post.clone(), "/v1/rooms/nope/reset").await;
    assert_eq!((st, &v["error"]["code"]), (404, &"room_not_found".into()), "{v}");
    let (st, v) = admin(&c, &s, get.clone(), "/v1/rooms/nope/line").await;
    assert_eq!((st, &v["error"]["code"]), (404, &"room_not_found".into()), "{v}");
    let (st, v) = send(c.post(s.url("/v1/rooms/shop/reset"))).await;
    assert_eq!(st, 401, "{v}");
    let (st, v) = admin(&c, &s, post.clone(), "/v1/rooms/shop/reset").await;
    assert_eq!((st, &v["dropped"]), (200, &0.into()), "{v}");
    let (st, v) = admin(&c, &s, get.clone(), "/v1/rooms/shop/line").await;
    assert_eq!((st, &v["line"]), (200, &Value::Array(vec![])), "{v}");

    // Paused, with the slot free: everyone new queues; a reset drops
    // them and the room stays paused.
    let (st, _) = admin(&c, &s, post.clone(), "/v1/rooms/shop/pause").await;
    assert_eq!(st, 200);
    let mut visitors = Vec::new();
    for i in 0..25 {
        let mut v = Visitor::new(&format!("v{i}"));
        assert_eq!(v.get(&c, &proxy, "/page", true).await.json()["status"], "queued");
        visitors.push(v);
    }
    for (query, expected) in [("", 20), ("?limit=1", 1), ("?limit=1000", 25)] {
        let (st, v) = admin(&c, &s, get.clone(), &format!("/v1/rooms/shop/line{query}")).await;
        assert_eq!(st, 200, "{query}: {v}");
        assert_eq!(v["line"].as_array().map(Vec::len), Some(expected), "{query}: {v}");
    }
    for bad in [
        "?limit=0",
        "?limit=1001",
        "?limit=-1",
        "?limit=lots",
        "?limit=99999999999",
        "?other=1",
    ] {
        let (st, v) = admin(&c, &s, get.clone(), &format!("/v1/rooms/shop/line{bad}")).await;
        assert_eq!(
            (st, &v["error"]["code"]),
            (400, &"bad_request".into()),
            "{bad}: {v}"
        );
    }

    // One waiter taken out by number: the rest move up.
    let (_, v) = admin(&c, &s, get.clone(), "/v1/rooms/shop/line?limit=2").await;
    let second = v["line"][1]["number"].as_u64().expect("number");
    let del = reqwest::Method::DELETE;
    let (st, v) = admin(&c, &s, del.clone(), &format!("/v1/rooms/shop/line/{second}")).await;
    assert_eq!((st, &v["removed"]), (200, &true.into()), "{v}");
    let (st, v) = admin(&c, &s, del.clone(), &format!("/v1/rooms/shop/line/{second}")).await;
    assert_eq!(
        (st, &v["error"]["code"]),
        (404, &"ticket_not_found".into()),
        "{v}"
    );
    for bad in ["x", "0", "-3"] {
        let (st, v) = admin(&c, &s, del.clone(), &format!("/v1/rooms/shop/line/{bad}")).await;
        assert_eq!(
            (st, &v["error"]["code"]),
            (400, &"bad_request".into()),
            "{bad}: {v}"
        );
    }
    let third = visitors[2].cookie.clone().expect("cookie");
    assert_eq!(status_of(&c, &proxy, &third).await["position"], 2);

    let (st, v) = admin(&c, &s, post.clone(), "/v1/rooms/shop/reset").await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (&v["dropped"], &v["paused"], &v["waiting"]),
        (&24.into(), &true.into(), &0.into()),
        "{v}"
    );
    assert_eq!(status_of(&c, &proxy, &third).await["status"], "reset");
    // Resumed: a newcomer is admitted; the dropped are not.
    let (st, _) = admin(&c, &s, post.clone(), "/v1/rooms/shop/resume").await;
    assert_eq!(st, 200);
    let mut late = Visitor::new("late");
    assert!(is_admitted(&late.get(&c, &proxy, "/page", true).await, "late"));
    assert_eq!(status_of(&c, &proxy, &third).await["status"], "reset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edges_embedded() {
    edges(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edges_redis() {
    let redis = RedisServer::start();
    edges(Some(&redis.url())).await;
}

/// Visitors arriving while two resets run: each is either dropped (and
/// told so) or in line, none lost silently, none admitted past the one
/// slot; the resets' counts and the line left add up to everyone.
async fn joins_racing_a_reset(redis: Option<&str>) {
    let (seen, up, dir) = site().await;
    let s = start(&dir, &long_config(up, 1, ""), redis);
    let (s, proxy, c, _holder) = take_the_slot(s).await;
    let joins: Vec<_> = (0..40)
        .map(|i| {
            let (c, proxy) = (c.clone(), proxy.clone());
            tokio::spawn(async move {
                // Arrivals spread over ~120 ms, across both resets.
                tokio::time::sleep(Duration::from_millis(i * 3)).await;
                let mut v = Visitor::new(&format!("racer{i}"));
                let a = v.get(&c, &proxy, "/page", true).await;
                assert_eq!(a.json()["status"], "queued", "{}", a.text);
                v.cookie.expect("cookie")
            })
        })
        .collect();
    let mut dropped = 0;
    for pause in [30, 40] {
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let (st, v) = admin(&c, &s, reqwest::Method::POST, "/v1/rooms/shop/reset").await;
        assert_eq!(st, 200, "{v}");
        dropped += v["dropped"].as_u64().expect("dropped");
    }
    let mut cookies = Vec::new();
    for j in joins {
        cookies.push(j.await.expect("join"));
    }
    let (mut told, mut queued) = (0, 0);
    for cookie in &cookies {
        match status_of(&c, &proxy, cookie).await["status"].as_str() {
            Some("reset") => told += 1,
            Some("queued") => queued += 1,
            other => panic!("neither dropped nor in line: {other:?}"),
        }
    }
    assert_eq!((told, dropped + queued), (dropped, 40));
    let (_, stats) = admin(&c, &s, reqwest::Method::GET, "/v1/rooms/shop").await;
    assert_eq!(
        (&stats["waiting"], &stats["active"]),
        (&queued.into(), &1.into()),
        "{stats}"
    );
    assert_eq!(seen.lock().expect("lock").first_seen, ["holder"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_racing_a_reset_embedded() {
    joins_racing_a_reset(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_racing_a_reset_redis() {
    let redis = RedisServer::start();
    joins_racing_a_reset(Some(&redis.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_drops_the_line_and_says_so_cluster() {
    let cluster = tokio::task::spawn_blocking(|| support::RedisCluster::start(3, 0))
        .await
        .expect("cluster");
    reset_drops_the_line_and_says_so(Some(&cluster.url()), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_drops_the_line_and_says_so_sentinel() {
    let set = tokio::task::spawn_blocking(support::SentinelSet::start)
        .await
        .expect("sentinel set");
    reset_drops_the_line_and_says_so(Some(&set.url()), true).await;
}

/// `line_ages = false`: places carry no arrival time (ages are null), and
/// a reset is still told, from the time in the visitor's token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ages_can_be_left_out() {
    let (_seen, up, dir) = site().await;
    let s = start(
        &dir,
        &long_config(up, 1, "").replace("arrival_rate", "line_ages = false\narrival_rate"),
        None,
    );
    let (s, proxy, c, _holder) = take_the_slot(s).await;
    let mut waiter = Visitor::new("waiter");
    assert_eq!(
        waiter.get(&c, &proxy, "/page", true).await.json()["status"],
        "queued"
    );
    let (st, v) = admin(&c, &s, reqwest::Method::GET, "/v1/rooms/shop/line").await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (&v["line"][0]["position"], &v["line"][0]["age_ms"]),
        (&1.into(), &Value::Null),
        "{v}"
    );
    let (st, v) = admin(&c, &s, reqwest::Method::POST, "/v1/rooms/shop/reset").await;
    assert_eq!((st, &v["dropped"]), (200, &1.into()), "{v}");
    let cookie = waiter.cookie.clone().expect("cookie");
    assert_eq!(status_of(&c, &proxy, &cookie).await["status"], "reset");
}
