//! Sessions that end stay ended, on every server sharing a room, and a
//! store that loses its data gets the room's settings back by itself.
//! `tollgate serve` processes in front of a real upstream that records
//! every session id reaching it; on the embedded store and on real Redis.

mod room_support;
mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use room_support::*;
use serve_support::{Server, send};
use support::RedisServer;

const ADMIN: &str = "admin-token-0123456789";

/// The session id the upstream saw for `who`'s last admitted request.
fn session_of(seen: &Shared, who: &str) -> String {
    seen.lock()
        .expect("lock")
        .sessions
        .get(who)
        .cloned()
        .unwrap_or_else(|| panic!("{who} never reached the upstream"))
}

/// Sessions in `ended` (id → when it ended) that reached the upstream
/// after they ended.
fn replays(seen: &Shared, ended: &[(String, Instant)]) -> Vec<String> {
    let s = seen.lock().expect("lock");
    ended
        .iter()
        .filter(|(id, at)| s.hits.iter().any(|(h, t)| h == id && t > at))
        .map(|(id, _)| id.clone())
        .collect()
}

/// A request with a saved cookie, as a replaying client would send it.
async fn replay(c: &reqwest::Client, proxy: &str, who: &str, cookie: &str) -> u16 {
    let mut v = Visitor::new(who);
    v.cookie = Some(cookie.to_owned());
    v.get(c, proxy, "/page", true).await.status
}

/// Each of the four ways a session ends, then its token sent again: on the
/// server that ended it at once, on the other server (when there is one)
/// 100 ms later. None of them reaches the upstream as that session, and
/// its status says it ended.
async fn ended_sessions_stay_ended(redis: Option<&str>, two_servers: bool) {
    let (seen, up, dir) = site().await;
    // Room for the replays too: each is admitted as a new visitor.
    let config = room_config(up, 10, "");
    let a = start(&dir, &config, redis);
    let b = two_servers.then(|| start(&dir, &config, redis));
    let pa = a.proxy.clone().expect("proxy");
    let pb = b.as_ref().map(|b| b.proxy.clone().expect("proxy"));
    // A server checks every token issued before it started (plus a
    // second for clock skew) with the store: wait that out, so b has to
    // learn of each end from the revocation log.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let c = reqwest::Client::new();
    let mut ended = Vec::new();
    for way in ["upstream", "admin", "leave", "ttl"] {
        let who = format!("by-{way}");
        let mut v = Visitor::new(&who);
        assert!(is_admitted(&v.get(&c, &pa, "/page", true).await, &who), "{way}");
        // A request on the fast path first, so the token is a trusted one.
        assert!(is_admitted(&v.get(&c, &pa, "/page", true).await, &who), "{way}");
        let cookie = v.cookie.clone().expect("cookie");
        let session = session_of(&seen, &who);
        match way {
            "upstream" => {
                let _ = v.get(&c, &pa, "/done", true).await;
            }
            "admin" => {
                let (status, body) = send(
                    c.delete(a.url(&format!("/v1/rooms/shop/sessions/{session}")))
                        .bearer_auth(ADMIN),
                )
                .await;
                assert_eq!(status, 200, "{body}");
            }
            "leave" => {
                let r = c
                    .post(format!("{pa}/.tollgate/shop/leave"))
                    .header("cookie", format!("tollgate_shop={cookie}"))
                    .send()
                    .await
                    .expect("leave");
                assert_eq!(r.status(), 200);
            }
            _ => tokio::time::sleep(Duration::from_millis(1_700)).await,
        }
        let at = Instant::now();
        ended.push((session.clone(), at));
        // Past its TTL the token itself has expired: it names nobody.
        let said = if way == "ttl" { "none" } else { "ended" };
        assert_eq!(status_of(&c, &pa, &cookie).await["status"], said, "{way}");
        replay(&c, &pa, &who, &cookie).await;
        if let Some(pb) = &pb {
            tokio::time::sleep(Duration::from_millis(100).saturating_sub(at.elapsed())).await;
            assert_eq!(status_of(&c, pb, &cookie).await["status"], said, "{way} on b");
            replay(&c, pb, &who, &cookie).await;
        }
        assert_eq!(replays(&seen, &ended), Vec::<String>::new(), "{way}");
    }
    // The other server refused them from its copy of the log.
    if let Some(b) = &b {
        let metrics = b.metrics(Some(ADMIN)).await;
        let refused = metrics
            .lines()
            .find_map(|l| l.strip_prefix("tollgate_room_revoked_replays_total{room=\"shop\"} "))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        assert!(
            refused >= 3,
            "b refused {refused} replays from its log:\n{metrics}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_sessions_stay_ended_embedded() {
    ended_sessions_stay_ended(None, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_sessions_stay_ended_redis() {
    let redis = RedisServer::start();
    ended_sessions_stay_ended(Some(&redis.url()), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_sessions_stay_ended_across_servers() {
    let redis = RedisServer::start();
    ended_sessions_stay_ended(Some(&redis.url()), true).await;
}

/// The mint-and-leave loop: one client arrives, is admitted and leaves, 50
/// times, keeping every token; then, while real visitors hold both slots
/// and three more wait, it sends all 50 at once (to both servers, when
/// there are two). None reaches the upstream, the upstream never has more
/// than 2 sessions at once, and the waiters keep their places.
async fn mint_and_leave(redis: Option<&str>, two_servers: bool) {
    let (seen, up, dir) = site().await;
    // No per-address cap: revocation must hold on its own.
    let config = room_config(up, 2, r#"arrival_rate = "off""#)
        .replace("session_ttl = \"1500ms\"", "session_ttl = \"60s\"")
        .replace("grace = \"3s\"", "grace = \"60s\"");
    let a = start(&dir, &config, redis);
    let b = two_servers.then(|| start(&dir, &config, redis));
    let proxies: Vec<String> = [Some(&a), b.as_ref()]
        .into_iter()
        .flatten()
        .map(|s| s.proxy.clone().expect("proxy"))
        .collect();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let c = reqwest::Client::new();
    let mut minted = Vec::new();
    let mut ended = Vec::new();
    for i in 0..50 {
        let proxy = &proxies[i % proxies.len()];
        let mut v = Visitor::new("minter");
        assert!(
            is_admitted(&v.get(&c, proxy, "/page", true).await, "minter"),
            "mint {i}"
        );
        let cookie = v.cookie.clone().expect("cookie");
        ended.push((session_of(&seen, "minter"), Instant::now()));
        let r = c
            .post(format!("{proxy}/.tollgate/shop/leave"))
            .header("cookie", format!("tollgate_shop={cookie}"))
            .send()
            .await
            .expect("leave");
        assert_eq!(r.status(), 200);
        minted.push(cookie);
        ended.last_mut().expect("ended").1 = Instant::now();
    }
    let mut real = Vec::new();
    for i in 0..5 {
        let mut v = Visitor::new(&format!("real{i}"));
        let a = v.get(&c, &proxies[i % proxies.len()], "/page", true).await;
        if i < 2 {
            assert!(is_admitted(&a, &v.name), "real{i}");
        } else {
            assert_eq!(a.json()["position"], (i - 1) as u64, "real{i}");
        }
        real.push(v);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let replays_sent = minted.iter().enumerate().map(|(i, cookie)| {
        let c = c.clone();
        // Sent to the other server than the one that minted it.
        let proxy = proxies[(i + 1) % proxies.len()].clone();
        let cookie = cookie.clone();
        async move { replay(&c, &proxy, &format!("replay{i}"), &cookie).await }
    });
    let statuses = futures_util::future::join_all(replays_sent).await;
    assert!(
        statuses.iter().all(|s| *s == 503),
        "replays were let in: {statuses:?}"
    );
    assert_eq!(replays(&seen, &ended), Vec::<String>::new());
    // The real waiters kept their places at the front of the line.
    for (i, v) in real.iter_mut().enumerate().skip(2) {
        let a = v.get(&c, &proxies[i % proxies.len()], "/page", true).await;
        assert_eq!(a.json()["position"], (i - 1) as u64, "{}", a.text);
    }
    // At the upstream: only the two real holders since the replays began.
    let s = seen.lock().expect("lock");
    let minted_ids: BTreeSet<&String> = ended.iter().map(|(id, _)| id).collect();
    let since: BTreeSet<&String> = s
        .hits
        .iter()
        .filter(|(id, _)| !minted_ids.contains(id))
        .map(|(id, _)| id)
        .collect();
    assert_eq!(since.len(), 2, "sessions at the upstream: {since:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mint_and_leave_embedded() {
    mint_and_leave(None, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mint_and_leave_across_servers() {
    let redis = RedisServer::start();
    mint_and_leave(Some(&redis.url()), true).await;
}

/// Visitors keep asking for pages, each with its own cookie, for `for_`;
/// returns the distinct sessions that reached the upstream from `from` on.
async fn traffic(c: &reqwest::Client, proxy: &str, visitors: &mut [Visitor], for_: Duration) {
    let until = Instant::now() + for_;
    while Instant::now() < until {
        for v in visitors.iter_mut() {
            let _ = v.get(c, proxy, "/page", true).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn sessions_since(seen: &Shared, from: Instant) -> BTreeSet<String> {
    seen.lock()
        .expect("lock")
        .hits
        .iter()
        .filter(|(_, t)| *t >= from)
        .map(|(id, _)| id.clone())
        .collect()
}

async fn ready(c: &reqwest::Client, s: &Server) -> u16 {
    c.get(s.url("/readyz"))
        .send()
        .await
        .map_or(0, |r| r.status().as_u16())
}

/// Redis loses everything (`FLUSHALL`, then a restart without persistence)
/// under traffic: the room writes its settings back by itself within a
/// second, /readyz tells the truth, the admitted visitors from before are
/// checked again, and the upstream never has more than the capacity.
async fn data_loss(on_store_error: &str) {
    let mut redis = RedisServer::start();
    let (seen, up, dir) = site().await;
    let config = room_config(
        up,
        2,
        &format!("on_store_error = \"{on_store_error}\"\narrival_rate = \"off\""),
    )
    .replace("session_ttl = \"1500ms\"", "session_ttl = \"60s\"");
    let s = start(&dir, &config, Some(&redis.url()));
    let proxy = s.proxy.clone().expect("proxy");
    let c = reqwest::Client::new();
    let mut visitors: Vec<Visitor> = (0..6).map(|i| Visitor::new(&format!("v{i}"))).collect();
    traffic(&c, &proxy, &mut visitors, Duration::from_millis(500)).await;
    let before = sessions_since(&seen, Instant::now() - Duration::from_secs(60));
    assert_eq!(before.len(), 2, "{before:?}");
    assert_eq!(ready(&c, &s).await, 200);

    for fault in ["flushall", "restart"] {
        let at = Instant::now();
        if fault == "flushall" {
            redis.command(&["FLUSHALL"]);
        } else {
            redis.kill();
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert_eq!(ready(&c, &s).await, 503, "not ready while Redis is down");
            redis.restart();
        }
        let answering = Instant::now();
        // The settings come back within a second, by themselves.
        let back = loop {
            let (_, stats) = send(c.get(s.url("/v1/rooms/shop")).bearer_auth(ADMIN)).await;
            if stats["capacity"] == 2 {
                break answering.elapsed();
            }
            assert!(
                answering.elapsed() < Duration::from_secs(1),
                "{fault}: not restored: {stats}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let ready_again = Instant::now();
        while ready(&c, &s).await != 200 {
            assert!(
                ready_again.elapsed() < Duration::from_secs(1),
                "{fault}: /readyz stays 503"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Traffic goes on; once Redis answers, at most 2 sessions reach
        // the upstream, whoever held one before.
        let from = Instant::now();
        traffic(&c, &proxy, &mut visitors, Duration::from_millis(1_500)).await;
        let after = sessions_since(&seen, from);
        assert!(
            after.len() <= 2,
            "{fault}: {} sessions after recovery: {after:?}",
            after.len()
        );
        assert!(!after.is_empty(), "{fault}: nobody admitted after recovery");
        let (_, stats) = send(c.get(s.url("/v1/rooms/shop")).bearer_auth(ADMIN)).await;
        assert_eq!(stats["active"], 2, "{fault}: {stats}");
        assert_eq!(stats["waiting"], 4, "{fault}: {stats}");
        eprintln!(
            "{fault}: settings back {back:?} after Redis answered ({:?} after the fault)",
            at.elapsed()
        );
    }
    let metrics = s.metrics(Some(ADMIN)).await;
    assert!(
        metrics.lines().any(
            |l| l.starts_with("tollgate_room_settings_restored_total{room=\"shop\"}") && !l.ends_with(" 0")
        ),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_loss_fail_closed() {
    data_loss("closed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_loss_fail_open() {
    data_loss("open").await;
}

/// An upstream that switches every connection to an echo protocol.
async fn echo_upstream() -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let up = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = head(&mut s).await;
                let _ = s
                    .write_all(
                        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n",
                    )
                    .await;
                let mut buf = [0u8; 64];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    up
}

/// An admitted visitor's upgraded connection keeps its session alive past
/// the TTL (a tunnel carries no requests), and is closed once the session
/// is ended: a tunnel is no way around an ended session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tunnels_live_and_die_with_their_session() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = echo_upstream().await;
    let dir = tempfile::tempdir().expect("dir");
    let s = start(&dir, &room_config(up, 1, r#"upgrades = ["echo"]"#), None);
    let proxy = s.proxy.clone().expect("proxy");
    let (mut conn, response) = open_tunnel(&proxy).await;
    assert!(response.starts_with("HTTP/1.1 101"), "{response}");
    // Past the session TTL (1.5 s), the tunnel still works and holds the slot.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        conn.write_all(b"ping").await.expect("write");
        let mut back = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(2), conn.read_exact(&mut back))
            .await
            .expect("echo in time")
            .expect("echo");
        assert_eq!(&back, b"ping");
    }
    let c = reqwest::Client::new();
    let (_, stats) = send(c.get(s.url("/v1/rooms/shop")).bearer_auth(ADMIN)).await;
    assert_eq!(stats["active"], 1, "the tunnel kept its session: {stats}");
    let mut other = Visitor::new("other");
    assert_eq!(
        other.get(&c, &proxy, "/page", true).await.status,
        503,
        "the slot is taken"
    );
    // The token in the 101 has expired by now (it is not renewed through
    // the tunnel), so the site ends the session by its id.
    let session = response
        .lines()
        .find_map(|l| l.strip_prefix("tollgate-token: "))
        .and_then(|t| t.split('.').nth(3))
        .expect("token header")
        .to_owned();
    let (status, body) = send(
        c.delete(s.url(&format!("/v1/rooms/shop/sessions/{session}")))
            .bearer_auth(ADMIN),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let ended = std::time::Instant::now();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(2), conn.read(&mut buf))
        .await
        .expect("the tunnel closes in time")
        .unwrap_or(0);
    assert_eq!(n, 0, "the tunnel is closed");
    assert!(
        ended.elapsed() < Duration::from_millis(300),
        "closed after {:?}",
        ended.elapsed()
    );
}

/// A tunnel whose session went with a Redis that lost its data is closed
/// (it would otherwise run on beside the visitors admitted afresh).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_does_not_outlive_lost_state() {
    use tokio::io::AsyncReadExt;
    let redis = RedisServer::start();
    let up = echo_upstream().await;
    let dir = tempfile::tempdir().expect("dir");
    let config = room_config(up, 1, r#"upgrades = ["echo"]"#)
        .replace("session_ttl = \"1500ms\"", "session_ttl = \"60s\"");
    let s = start(&dir, &config, Some(&redis.url()));
    let proxy = s.proxy.clone().expect("proxy");
    let (mut conn, response) = open_tunnel(&proxy).await;
    assert!(response.starts_with("HTTP/1.1 101"), "{response}");
    redis.command(&["FLUSHALL"]);
    let flushed = Instant::now();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(3), conn.read(&mut buf))
        .await
        .expect("the tunnel closes in time")
        .unwrap_or(0);
    assert_eq!(n, 0, "the tunnel is closed");
    eprintln!("tunnel closed {:?} after FLUSHALL", flushed.elapsed());
    // And its slot is free for a new visitor, who is counted (once the
    // room, written back paused, lifts the pause).
    let c = reqwest::Client::new();
    let mut v = Visitor::new("after");
    let asked = Instant::now();
    loop {
        // (The echo upstream answers a plain request with an unasked 101,
        // which the room turns into a 502: reaching it means admitted.)
        let a = v.get(&c, &proxy, "/page", true).await;
        if a.status == 502 {
            break;
        }
        assert_eq!(a.status, 503, "{}", a.text);
        assert!(
            asked.elapsed() < Duration::from_secs(2),
            "the slot did not come free"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, stats) = send(c.get(s.url("/v1/rooms/shop")).bearer_auth(ADMIN)).await;
    assert_eq!(
        (stats["active"].clone(), stats["waiting"].clone()),
        (1.into(), 0.into()),
        "{stats}"
    );
}

/// An end the store could not take (Redis frozen) is retried until it
/// does, so the other servers learn of it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_the_store_missed_is_retried() {
    use nix::sys::signal::{Signal, kill};
    let redis = RedisServer::start();
    let (seen, up, dir) = site().await;
    let config = room_config(up, 3, "store_timeout_ms = 300")
        .replace("session_ttl = \"1500ms\"", "session_ttl = \"60s\"");
    let a = start(&dir, &config, Some(&redis.url()));
    let b = start(&dir, &config, Some(&redis.url()));
    let (pa, pb) = (a.proxy.clone().expect("a"), b.proxy.clone().expect("b"));
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let c = reqwest::Client::new();
    let mut v = Visitor::new("frozen");
    assert!(is_admitted(&v.get(&c, &pa, "/page", true).await, "frozen"));
    assert!(is_admitted(&v.get(&c, &pb, "/page", true).await, "frozen"));
    let cookie = v.cookie.clone().expect("cookie");
    let session = session_of(&seen, "frozen");
    kill(redis.pid(), Signal::SIGSTOP).expect("freeze redis");
    let (status, body) = send(
        c.delete(a.url(&format!("/v1/rooms/shop/sessions/{session}")))
            .bearer_auth(ADMIN),
    )
    .await;
    kill(redis.pid(), Signal::SIGCONT).expect("thaw redis");
    assert_eq!(status, 503, "the store did not take it: {body}");
    let thawed = Instant::now();
    // The retry lands, and server b refuses the session from then on.
    loop {
        let (_, stats) = send(c.get(a.url("/v1/rooms/shop")).bearer_auth(ADMIN)).await;
        if stats["active"] == 0 {
            break;
        }
        assert!(
            thawed.elapsed() < Duration::from_secs(3),
            "the end was not retried: {stats}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ended = Instant::now();
    replay(&c, &pb, "frozen", &cookie).await;
    assert_eq!(replays(&seen, &[(session, ended)]), Vec::<String>::new());
}
