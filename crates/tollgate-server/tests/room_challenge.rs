//! The arrival challenge (`challenge_bits`): a new visitor gets a proof of
//! work to solve before taking a place; a solution is taken once, on any
//! server sharing the room, and a forged, unsolved or replayed one is
//! refused with a new challenge. On the embedded store, and on two
//! servers sharing one Redis. (Chromium solving the page's challenge:
//! tests/rooms/browser.rs.)

mod room_support;
mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use room_support::*;
use serde_json::Value;
use serve_support::Server;
use sha2::{Digest, Sha256};
use support::RedisServer;

/// How many zero bits `digest` starts with.
fn zero_bits(digest: &[u8]) -> u32 {
    let mut zeros = 0;
    for b in digest {
        if *b != 0 {
            return zeros + b.leading_zeros();
        }
        zeros += 8;
    }
    zeros
}

/// The first counter that solves `challenge`: the solution to send.
fn solve(challenge: &str, bits: u32) -> String {
    (0u64..)
        .map(|n| format!("{challenge}:{n}"))
        .find(|s| zero_bits(&Sha256::digest(s.as_bytes())) >= bits)
        .expect("a solution")
}

/// A counter that does not solve `challenge`.
fn unsolved(challenge: &str, bits: u32) -> String {
    (0u64..)
        .map(|n| format!("{challenge}:{n}"))
        .find(|s| zero_bits(&Sha256::digest(s.as_bytes())) < bits)
        .expect("a failing counter")
}

/// A new visitor's arrival, with `solution` in the header if any.
async fn arrive(c: &reqwest::Client, proxy: &str, who: &str, solution: Option<&str>) -> (u16, Value, String) {
    let mut req = c
        .get(format!("{proxy}/page"))
        .header("x-visitor", who)
        .header("accept", "application/json");
    if let Some(s) = solution {
        req = req.header("tollgate-challenge", s);
    }
    let resp = req.send().await.expect("arrive");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null), text)
}

async fn a_solution_is_taken_once(redis: Option<&str>, two_servers: bool) {
    let (seen, up, dir) = site().await;
    let config = long_config(up, 2, "challenge_bits = 12");
    let a = start(&dir, &config, redis);
    let b = two_servers.then(|| start(&dir, &config, redis));
    let pa = a.proxy.clone().expect("proxy");
    let pb = b.as_ref().map_or(pa.clone(), |b| b.proxy.clone().expect("proxy"));
    let c = reqwest::Client::new();

    // A newcomer is asked first; nothing reaches the site.
    let (st, asked, _) = arrive(&c, &pa, "first", None).await;
    assert_eq!(st, 403, "{asked}");
    assert_eq!(
        (
            &asked["status"],
            &asked["bits"],
            &asked["header"],
            &asked["refused"]
        ),
        (
            &"challenge".into(),
            &12.into(),
            &"Tollgate-Challenge".into(),
            &Value::Null
        ),
        "{asked}"
    );
    assert!(asked["expires_in_ms"].as_u64().is_some(), "{asked}");
    let challenge = asked["challenge"].as_str().expect("challenge").to_owned();
    assert!(seen.lock().expect("lock").first_seen.is_empty());

    // Solved, it is taken (on the other server too): the visitor is in.
    let solution = solve(&challenge, 12);
    let (st, _, text) = arrive(&c, &pb, "first", Some(&solution)).await;
    assert_eq!((st, text.as_str()), (200, "upstream page for first"));

    // The same solution again, anywhere: refused, with a new challenge.
    for proxy in [&pa, &pb] {
        let (st, again, _) = arrive(&c, proxy, "copycat", Some(&solution)).await;
        assert_eq!((st, &again["refused"]), (403, &"replayed".into()), "{again}");
        assert_ne!(again["challenge"], challenge.as_str(), "{again}");
    }
    // Forged (an edited signature) and unsolved ones are refused too.
    let fresh = arrive(&c, &pa, "bot", None).await.1["challenge"]
        .as_str()
        .expect("challenge")
        .to_owned();
    let (body, sig) = fresh.rsplit_once('.').expect("signed");
    let flipped = if sig.starts_with('A') { "B" } else { "A" };
    let forged = solve(&format!("{body}.{flipped}{}", &sig[1..]), 12);
    let (st, refused, _) = arrive(&c, &pa, "bot", Some(&forged)).await;
    assert_eq!((st, &refused["refused"]), (403, &"forged".into()), "{refused}");
    let (st, refused, _) = arrive(&c, &pb, "bot", Some(&unsolved(&fresh, 12))).await;
    assert_eq!((st, &refused["refused"]), (403, &"unsolved".into()), "{refused}");
    let (st, refused, _) = arrive(&c, &pb, "bot", Some("garbage")).await;
    assert_eq!((st, &refused["refused"]), (403, &"forged".into()), "{refused}");
    {
        let seen = seen.lock().expect("lock");
        assert_eq!(seen.first_seen, ["first"], "only the solver reached the site");
        assert_eq!(seen.challenge_leaks, 0, "the site never sees a solution");
    }
    // The fresh challenge, solved, still works once.
    let (st, _, text) = arrive(&c, &pa, "second", Some(&solve(&fresh, 12))).await;
    assert_eq!((st, text.as_str()), (200, "upstream page for second"));

    let servers: Vec<&Server> = std::iter::once(&a).chain(b.as_ref()).collect();
    let mut passed = 0;
    let mut refused = 0;
    for s in servers {
        passed += room_metric(s, "tollgate_room_challenges_passed_total").await;
        refused += room_metric(s, "tollgate_room_challenges_refused_total").await;
    }
    assert_eq!((passed, refused), (2, 5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_solution_is_taken_once_embedded() {
    a_solution_is_taken_once(None, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_solution_is_taken_once_across_servers() {
    let redis = RedisServer::start();
    a_solution_is_taken_once(Some(&redis.url()), true).await;
}

/// Too much work asked stops `serve` with exit 64, naming the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_hard_a_challenge_is_refused_at_start() {
    let (_seen, up, dir) = site().await;
    let path = dir.path().join("hard.toml");
    std::fs::write(&path, long_config(up, 1, "challenge_bits = 29")).expect("write");
    let out = Server::command(None, &["--config", path.to_str().expect("path")])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("challenge_bits"), "{stderr}");
}
