//! A scheduled room (`opens_at`, `prequeue`, `closes_at`; `PUT
//! /v1/rooms/{room}/schedule`): before the pre-queue a visitor is told
//! when to come back and takes no place; in the pre-queue visitors join
//! and nobody reaches the site; at the opening exactly the capacity is
//! admitted from the head of the pre-queue, in one step of the store, on
//! whichever server is asked; later arrivals stand behind the pre-queue;
//! at the closing newcomers are turned away. On the embedded store, real
//! Redis, and two servers sharing one Redis; and from the config. With
//! `order_at_open = "random"` (the default) the pre-queue is drawn: no
//! place shows before the opening, the head of the draw is admitted, and
//! the published draw checks (the order recomputed here from the seed,
//! and `tollgate room verify-draw` on every receipt), while a changed
//! seed, id list or receipt does not.

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

/// The pre-queue's visitors in a random room, and in a FIFO one.
const DRAWN: usize = 6;
const IN_TURN: usize = 4;

async fn a_scheduled_opening(redis: Option<&str>, two_servers: bool, random: bool) {
    let (seen, up, dir) = site().await;
    let order = if random { "random" } else { "fifo" };
    let config = long_config(up, 2, &format!("order_at_open = \"{order}\""));
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

    // The pre-queue: visitors join across the servers, and wait whatever
    // the free capacity. In a draw, no place shows, only the draw id.
    until_ms(line_opens + 100).await;
    let mut line = Vec::new();
    let mut draw_ids = Vec::new();
    let joining = if random { DRAWN } else { IN_TURN };
    for i in 0..joining {
        let mut v = Visitor::new(&format!("pre{i}"));
        let answer = v.get(&c, &proxies[i % 2], "/page", true).await.json();
        assert_eq!(answer["status"], "before_open", "{answer}");
        assert!(
            answer["opens_in_ms"].as_u64().is_some_and(|ms| ms <= 2_000),
            "{answer}"
        );
        if random {
            assert_eq!(
                (&answer["position"], &answer["order"]),
                (&Value::Null, &"random".into()),
                "{answer}"
            );
            let status = status_of(&c, &proxies[(i + 1) % 2], v.cookie.as_deref().expect("cookie")).await;
            let id = status["draw"]["id"].as_str().expect("a draw id").to_owned();
            assert!(id.len() == 16 && status["draw"]["place"].is_null(), "{status}");
            draw_ids.push(id);
        } else {
            assert_eq!(answer["position"], i + 1, "{answer}");
            assert!(answer.get("draw").is_none(), "{answer}");
        }
        line.push(v);
    }
    let draw_url = format!("{pb}/.tollgate/shop/draw");
    let (st, before) = send(c.get(&draw_url)).await;
    let commitment = if random {
        assert_eq!(st, 200, "{before}");
        assert_eq!(
            (&before["status"], &before["seed"]),
            (&"pending".into(), &Value::Null),
            "{before}"
        );
        before["commitment"].as_str().expect("a commitment").to_owned()
    } else {
        assert_eq!(
            (st, &before["error"]["code"]),
            (404, &"no_draw".into()),
            "{before}"
        );
        String::new()
    };
    let html = line[0].get(&c, &pb, "/page", false).await;
    assert!(html.text.contains("data-opens-in-seconds=\""), "{}", html.text);
    assert_eq!(
        html.text.contains("id=\"position\">in the draw<"),
        random,
        "{}",
        html.text
    );
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
    // head of the pre-queue, exactly the capacity: in a draw, the first
    // two of the drawn order, in FIFO the first two to arrive.
    until_ms(opens + 50).await;
    let mut looks = Vec::new();
    for (i, v) in line.iter().enumerate() {
        let cookie = v.cookie.clone().expect("cookie");
        looks.push(status_of(&c, &proxies[(i + 1) % 2], &cookie).await);
    }
    // Each visitor's place: their receipt's in a draw, their arrival's
    // in FIFO.
    let places: Vec<usize> = if random {
        let drawn = revealed(&c, &draw_url).await;
        assert_eq!(drawn["commitment"], commitment.as_str(), "the commitment held");
        let ids = checked_order(&drawn);
        assert_eq!(ids.len(), DRAWN, "{drawn}");
        draw_ids
            .iter()
            .map(|id| {
                ids.iter()
                    .position(|x| x == id)
                    .expect("every visitor in the draw")
                    + 1
            })
            .collect()
    } else {
        (1..=IN_TURN).collect()
    };
    for (look, place) in looks.iter().zip(&places) {
        if *place <= 2 {
            assert_eq!(look["status"], "admitted", "place {place}: {looks:?}");
        } else {
            assert_eq!(
                (&look["status"], &look["position"]),
                (&"queued".into(), &(place - 2).into()),
                "place {place}: {looks:?}"
            );
            if random {
                assert_eq!(look["draw"]["place"], *place, "the receipt: {look}");
            }
        }
    }
    let mut admitted: Vec<usize> = (0..joining).filter(|i| places[*i] <= 2).collect();
    admitted.sort_by_key(|i| places[*i]);
    for i in &admitted {
        let v = &mut line[*i];
        assert!(is_admitted(&v.get(&c, &pa, "/page", true).await, &v.name));
    }
    // A later arrival stands behind the whole pre-queue.
    let mut late = Visitor::new("late");
    let answer = late.get(&c, &pb, "/page", true).await.json();
    assert_eq!(
        (&answer["status"], &answer["position"]),
        (&"queued".into(), &(joining - 1).into()),
        "{answer}"
    );
    {
        let seen = seen.lock().expect("lock");
        let heads: Vec<String> = admitted.iter().map(|i| format!("pre{i}")).collect();
        assert_eq!(seen.first_seen, heads, "the head of the pre-queue, in order");
    }
    if random {
        receipts_check(&draw_url, &draw_ids, &places, &commitment, &dir).await;
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
    let waiting = places.iter().position(|p| *p == 3).expect("a third place");
    let cookie = line[waiting].cookie.clone().expect("cookie");
    assert_eq!(status_of(&c, &pb, &cookie).await["status"], "queued");
}

/// The room's draw once revealed (it is, within a second of the
/// opening).
async fn revealed(c: &reqwest::Client, url: &str) -> Value {
    for _ in 0..50 {
        let (st, j) = send(c.get(url)).await;
        assert_eq!(st, 200, "{j}");
        if j["status"] == "drawn" {
            return j;
        }
        assert_eq!(j["status"], "drawing", "{j}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the draw was not revealed within 5 s of the opening");
}

/// The published order, checked by the documented procedure, written
/// here afresh: the seed hashes to the commitment, and the ids stand in
/// the order of their keys (the first 44 bits of SHA-256(seed || id)).
fn checked_order(drawn: &Value) -> Vec<String> {
    use sha2::{Digest, Sha256};
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let seed_hex = drawn["seed"].as_str().expect("the seed");
    let seed: Vec<u8> = (0..seed_hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&seed_hex[i..i + 2], 16).expect("hex"))
        .collect();
    assert_eq!(hex(&Sha256::digest(&seed)), drawn["commitment"], "{drawn}");
    let ids: Vec<String> = drawn["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.as_str().expect("id").to_owned())
        .collect();
    let key = |id: &str| {
        let d = Sha256::new()
            .chain_update(&seed)
            .chain_update(id.as_bytes())
            .finalize();
        u64::from_be_bytes(d[..8].try_into().expect("8 bytes")) >> 20
    };
    let mut recomputed = ids.clone();
    recomputed.sort_by_key(|id| (key(id), id.clone()));
    assert_eq!(
        recomputed, ids,
        "the order recomputed from the seed is the one published"
    );
    assert_eq!(drawn["entrants"], ids.len(), "{drawn}");
    ids
}

/// `tollgate room verify-draw` on every receipt (exit 0), and on a
/// changed seed, a changed id list and a wrong place (exit 1 each).
async fn receipts_check(
    url: &str,
    ids: &[String],
    places: &[usize],
    commitment: &str,
    dir: &tempfile::TempDir,
) {
    let verify = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["room", "verify-draw"])
            .args(extra)
            .output()
            .expect("run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
        )
    };
    for (id, place) in ids.iter().zip(places) {
        let (code, out) = verify(&[url, "--id", id, "--place", &place.to_string()]);
        assert_eq!(code, Some(0), "{out}");
        assert!(out.contains("\"verified\":true"), "{out}");
    }
    let (code, out) = verify(&[
        url,
        "--id",
        &ids[0],
        "--place",
        &(places[0] % DRAWN + 1).to_string(),
    ]);
    assert_eq!(code, Some(1), "a wrong place: {out}");
    // Against the commitment saved before the opening, and another.
    let (code, out) = verify(&[url, "--commitment", commitment]);
    assert_eq!(code, Some(0), "{out}");
    let (code, out) = verify(&[url, "--commitment", &"ab".repeat(32)]);
    assert_eq!(code, Some(1), "another commitment: {out}");
    // Saved copies, changed.
    let (_, body) = send(reqwest::Client::new().get(url)).await;
    let saved = |name: &str, doc: &Value| {
        let path = dir.path().join(name);
        std::fs::write(&path, doc.to_string()).expect("write");
        path.to_str().expect("path").to_owned()
    };
    let (code, out) = verify(&[&saved("draw.json", &body)]);
    assert_eq!(code, Some(0), "the saved copy as published: {out}");
    let mut other_seed = body.clone();
    other_seed["seed"] = "00".repeat(32).into();
    let (code, out) = verify(&[&saved("seed.json", &other_seed)]);
    assert_eq!(code, Some(1), "a changed seed: {out}");
    assert!(out.contains("commitment"), "{out}");
    let mut swapped = body.clone();
    let list = swapped["ids"].as_array_mut().expect("ids");
    list.swap(0, DRAWN - 1);
    let (code, out) = verify(&[&saved("swapped.json", &swapped)]);
    assert_eq!(code, Some(1), "a changed id list: {out}");
    // An id replaced: its visitor's receipt no longer checks.
    let mut replaced = body.clone();
    let third = body["ids"][2].as_str().expect("id").to_owned();
    replaced["ids"][2] = "0123456789abcdef".into();
    let (code, out) = verify(&[&saved("replaced.json", &replaced), "--id", &third, "--place", "3"]);
    assert_eq!(code, Some(1), "an id replaced: {out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_opening_embedded() {
    a_scheduled_opening(None, false, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_opening_redis() {
    let redis = RedisServer::start();
    a_scheduled_opening(Some(&redis.url()), false, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_opening_across_servers() {
    let redis = RedisServer::start();
    a_scheduled_opening(Some(&redis.url()), true, true).await;
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
        ("order_at_open = \"shuffled\"", "use random or fifo"),
        ("queueing = \"lottery\"", "use fifo or random"),
        (
            "queueing = \"random\"\norder_at_open = \"fifo\"",
            "order_at_open is for rooms with queueing = \"fifo\"",
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
