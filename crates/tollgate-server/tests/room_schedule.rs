//! A scheduled room (`opens_at`, `prequeue`, `closes_at`; `PUT
//! /v1/rooms/{room}/schedule`): before the pre-queue a visitor is told
//! when to come back and takes no place; in the pre-queue visitors join
//! and nobody reaches the site; at the opening exactly the capacity is
//! admitted from the head of the pre-queue, in one step of the store, on
//! whichever server is asked; later arrivals stand behind the pre-queue;
//! at the closing newcomers are turned away. On the embedded store, real
//! Redis, and two servers sharing one Redis; and from the config.

mod room_support;
mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use room_support::*;
use serde_json::{Value, json};
use serve_support::{Server, send};
use support::RedisServer;

const ADMIN: &str = "admin-token-0123456789";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `ms` as RFC 3339 with milliseconds, UTC.
fn rfc3339(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .expect("time")
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

async fn until_ms(at: u64) {
    let left = at.saturating_sub(now_ms());
    tokio::time::sleep(Duration::from_millis(left)).await;
}

async fn a_scheduled_opening(redis: Option<&str>, two_servers: bool) {
    let (seen, up, dir) = site().await;
    let config = long_config(up, 2, "");
    let a = start(&dir, &config, redis);
    let b = two_servers.then(|| start(&dir, &config, redis));
    let pa = a.proxy.clone().expect("proxy");
    let pb = b.as_ref().map_or(pa.clone(), |b| b.proxy.clone().expect("proxy"));
    let proxies = [pa.clone(), pb.clone()];
    let c = reqwest::Client::new();

    // Opens in 4 s, its line 2 s before; closes 3 s after it opens.
    let opens = now_ms() + 4_000;
    let (line_opens, closes) = (opens - 2_000, opens + 3_000);
    let (st, set) = send(
        c.put(a.url("/v1/rooms/shop/schedule"))
            .bearer_auth(ADMIN)
            .json(&json!({"opens_at": rfc3339(opens), "prequeue": "2s", "closes_at": rfc3339(closes)})),
    )
    .await;
    assert_eq!(st, 200, "{set}");
    assert_eq!(set["prequeue_seconds"], 2, "{set}");
    assert!(set["opens_at"].as_str().is_some(), "{set}");

    // Before the pre-queue: told when, given no place, on every server
    // (once its view has the schedule: within a watch period, 40 ms).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut early = Visitor::new("early");
    for proxy in &proxies {
        let answer = early.get(&c, proxy, "/page", true).await;
        assert_eq!(answer.status, 503, "{}", answer.text);
        let j = answer.json();
        assert_eq!(j["status"], "not_open", "{j}");
        assert!(
            j["line_opens_in_ms"].as_u64().is_some_and(|ms| ms <= 2_000),
            "{j}"
        );
        assert!(answer.headers.get("retry-after").is_some());
    }
    let page = early.get(&c, &pa, "/page", false).await;
    assert_eq!(page.status, 503);
    assert!(page.text.contains("Not open yet"), "{}", page.text);
    assert!(early.cookie.is_none(), "no place before the pre-queue");
    assert!(
        now_ms() < line_opens,
        "the machine was too slow for this test's timing"
    );

    // The pre-queue: four visitors join across the servers, and wait
    // whatever the free capacity.
    until_ms(line_opens + 100).await;
    let mut line = Vec::new();
    for i in 0..4 {
        let mut v = Visitor::new(&format!("pre{i}"));
        let answer = v.get(&c, &proxies[i % 2], "/page", true).await.json();
        assert_eq!(answer["status"], "before_open", "{answer}");
        assert_eq!(answer["position"], i + 1, "{answer}");
        assert!(
            answer["opens_in_ms"].as_u64().is_some_and(|ms| ms <= 2_000),
            "{answer}"
        );
        line.push(v);
    }
    let html = line[0].get(&c, &pb, "/page", false).await;
    assert!(html.text.contains("data-opens-in-seconds=\""), "{}", html.text);
    assert!(html.text.contains("You are in the pre-queue"), "{}", html.text);
    assert!(
        seen.lock().expect("lock").first_seen.is_empty(),
        "nobody reaches the site before the opening"
    );
    assert!(
        now_ms() < opens,
        "the machine was too slow for this test's timing"
    );

    // The opening: the first look after it, on either server, admits the
    // head of the pre-queue, exactly the capacity.
    until_ms(opens + 50).await;
    let mut looks = Vec::new();
    for (i, v) in line.iter().enumerate() {
        let cookie = v.cookie.clone().expect("cookie");
        looks.push(status_of(&c, &proxies[(i + 1) % 2], &cookie).await);
    }
    let statuses: Vec<&Value> = looks.iter().map(|l| &l["status"]).collect();
    assert_eq!(
        statuses,
        ["admitted", "admitted", "queued", "queued"],
        "{looks:?}"
    );
    assert_eq!(
        (&looks[2]["position"], &looks[3]["position"]),
        (&1.into(), &2.into())
    );
    for v in &mut line[..2] {
        assert!(is_admitted(&v.get(&c, &pa, "/page", true).await, &v.name));
    }
    // A later arrival stands behind the whole pre-queue.
    let mut late = Visitor::new("late");
    let answer = late.get(&c, &pb, "/page", true).await.json();
    assert_eq!(
        (&answer["status"], &answer["position"]),
        (&"queued".into(), &3.into()),
        "{answer}"
    );
    {
        let seen = seen.lock().expect("lock");
        assert_eq!(
            seen.first_seen,
            ["pre0", "pre1"],
            "the head of the pre-queue, in order"
        );
    }

    // The closing: newcomers are turned away; the line goes on.
    until_ms(closes + 50).await;
    let mut after = Visitor::new("after");
    let answer = after.get(&c, &pa, "/page", true).await;
    assert_eq!(
        (answer.status, answer.json()["status"].clone()),
        (503, json!("closed")),
        "{}",
        answer.text
    );
    let (_, figures) = send(c.get(a.url("/v1/rooms/shop")).bearer_auth(ADMIN)).await;
    assert_eq!(figures["state"], "closed", "{figures}");
    assert_eq!(
        (&figures["opens_at"], &figures["closes_at"]),
        (&Value::Null, &Value::Null),
        "{figures}"
    );
    let cookie = line[2].cookie.clone().expect("cookie");
    assert_eq!(status_of(&c, &pb, &cookie).await["status"], "queued");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_opening_embedded() {
    a_scheduled_opening(None, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_opening_redis() {
    let redis = RedisServer::start();
    a_scheduled_opening(Some(&redis.url()), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_opening_across_servers() {
    let redis = RedisServer::start();
    a_scheduled_opening(Some(&redis.url()), true).await;
}

/// The schedule from the config, applied at start; a bad one stops
/// `serve` with exit 64 and says why; the route refuses bad bodies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_from_the_config_and_bad_ones() {
    let (_seen, up, dir) = site().await;
    let opens = now_ms() + 3_600_000;
    let extra = format!("opens_at = \"{}\"\nprequeue = \"10m\"", rfc3339(opens));
    let s = start(&dir, &long_config(up, 1, &extra), None);
    let c = reqwest::Client::new();
    let (_, figures) = send(c.get(s.url("/v1/rooms/shop")).bearer_auth(ADMIN)).await;
    assert_eq!(figures["prequeue_seconds"], 600, "{figures}");
    assert_eq!(figures["closes_at"], Value::Null, "{figures}");
    let answer = Visitor::new("v")
        .get(&c, s.proxy.as_deref().expect("proxy"), "/page", true)
        .await;
    assert_eq!(
        (answer.status, answer.json()["status"].clone()),
        (503, json!("not_open"))
    );

    for body in [
        json!({}),
        json!({"opens_at": "tomorrow"}),
        json!({"opens_at": null, "prequeue": "5m"}),
        json!({"opens_at": rfc3339(opens), "closes_at": rfc3339(opens - 1)}),
        json!({"opens_at": rfc3339(opens), "prequeue": "8d"}),
        json!({"opens_at": rfc3339(opens), "other": 1}),
    ] {
        let (st, answer) = send(
            c.put(s.url("/v1/rooms/shop/schedule"))
                .bearer_auth(ADMIN)
                .json(&body),
        )
        .await;
        assert_eq!(
            (st, &answer["error"]["code"]),
            (400, &"bad_request".into()),
            "{body}: {answer}"
        );
    }
    // Null clears it: the room is open at once.
    let (st, cleared) = send(
        c.put(s.url("/v1/rooms/shop/schedule"))
            .bearer_auth(ADMIN)
            .json(&json!({"opens_at": null})),
    )
    .await;
    assert_eq!((st, &cleared["opens_at"]), (200, &Value::Null), "{cleared}");

    for (extra, says) in [
        ("opens_at = \"soon\"", "opens_at"),
        ("prequeue = \"5m\"", "prequeue needs opens_at"),
        (
            "opens_at = \"2030-01-01T10:00:00Z\"\ncloses_at = \"2030-01-01T09:00:00Z\"",
            "closes_at must be after",
        ),
    ] {
        let path = dir.path().join(format!("bad-{}.toml", rand_suffix()));
        std::fs::write(&path, long_config(up, 1, extra)).expect("write");
        let out = Server::command(None, &["--config", path.to_str().expect("path")])
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{extra}: {stderr}");
        assert!(stderr.contains(says), "{extra}: {stderr}");
    }
}
