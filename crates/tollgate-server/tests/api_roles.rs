//! Who may do what over HTTP: admin and read tokens (every state-changing
//! route of docs/openapi.json refused to a read token, allowed to an
//! admin), console sessions (login, the cookie, its CSRF header, logout,
//! tampered and expired cookies, the same config on a second server, a
//! changed token), the limit on tries at a token (logins and wrong
//! bearers, one allowance per address), and cross-site changes refused
//! even without tokens. On the embedded store, and the sessions and the
//! login limit across two servers on a real redis-server.

mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use serve_support::{Server, send};
use sha2::{Digest, Sha256};
use support::RedisServer;

const ADMIN: &str = "admin-token-0123456789abcdef";
const READ: &str = "read-token-0123456789abcdef";

fn start(redis: Option<&str>, admin: &str, read: &str) -> Server {
    Server::start_with(redis, &["--token", admin, "--read-token", read])
}

/// The error code of an answer.
fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("")
}

/// A session cookie signed as the server signs them, for token `token`
/// at place `index`, expiring at `expires_ms`: pins the format, and makes
/// an expired one without waiting.
fn forge(token: &str, index: usize, expires_ms: u64) -> String {
    type H = Hmac<Sha256>;
    let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    let mut k = H::new_from_slice(&digest).expect("key");
    k.update(b"tollgate session key v1");
    let key = k.finalize().into_bytes();
    let payload = format!("v1.{index}.{expires_ms}.AAAAAAAAAAAAAAAAAAAAAA");
    let mut m = H::new_from_slice(&key).expect("key");
    m.update(payload.as_bytes());
    format!("{payload}.{}", URL_SAFE_NO_PAD.encode(m.finalize().into_bytes()))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

/// Logs in with `token`: the answer, and the cookie's `name=value`.
async fn login(s: &Server, token: &str) -> (u16, Value, Option<String>, String) {
    let resp = reqwest::Client::new()
        .post(s.url("/v1/session"))
        .json(&json!({"token": token}))
        .send()
        .await
        .expect("login");
    let status = resp.status().as_u16();
    let set = resp
        .headers()
        .get("set-cookie")
        .map(|v| v.to_str().expect("ascii").to_owned())
        .unwrap_or_default();
    let cookie = set.split(';').next().filter(|c| !c.is_empty()).map(str::to_owned);
    (status, resp.json().await.unwrap_or(Value::Null), cookie, set)
}

/// Every operation of docs/openapi.json that is not GET or HEAD, its path
/// parameters filled in: `(method, path)`. The session routes are left
/// out: they are open.
fn changes(job: &str) -> Vec<(reqwest::Method, String)> {
    let doc: Value = serde_json::from_str(include_str!("../../../docs/openapi.json")).expect("openapi");
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        if path == "/v1/session" {
            continue;
        }
        for method in ["post", "put", "delete", "patch"] {
            if item.get(method).is_none() {
                continue;
            }
            let filled = path
                .replace("{name}", "g1")
                .replace("{queue}", "q1")
                .replace("{id}", job)
                .replace("{room}", "shop")
                .replace("{number}", "1")
                .replace(['{', '}'], "");
            out.push((method.to_uppercase().parse().expect("method"), filled));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_token_reads_everything_and_changes_nothing() {
    let s = start(None, ADMIN, READ);
    let c = reqwest::Client::new();
    // Some state, made by the admin.
    let (st, pushed) = send(
        c.post(s.url("/v1/queues/q1/jobs"))
            .bearer_auth(ADMIN)
            .json(&json!({"payload": {"n": 1}, "delay_ms": 600000})),
    )
    .await;
    assert_eq!(st, 201, "{pushed}");
    let job = pushed["id"].as_str().expect("job id").to_owned();
    let (st, entered) = send(
        c.post(s.url("/v1/gates/g1/enter"))
            .bearer_auth(ADMIN)
            .json(&json!({"capacity": 1})),
    )
    .await;
    assert_eq!(st, 200, "{entered}");

    // The read token reads.
    for path in [
        "/v1/gates".to_owned(),
        "/v1/queues".to_owned(),
        "/v1/gates/g1".to_owned(),
        "/v1/gates/g1/holders".to_owned(),
        "/v1/gates/g1/line".to_owned(),
        "/v1/queues/q1".to_owned(),
        format!("/v1/queues/q1/jobs/{job}"),
        "/v1/schedules".to_owned(),
        "/v1/limits".to_owned(),
    ] {
        let (st, body) = send(c.get(s.url(&path)).bearer_auth(READ)).await;
        assert_eq!(st, 200, "GET {path}: {body}");
    }
    let metrics = c
        .get(s.url("/metrics"))
        .bearer_auth(READ)
        .send()
        .await
        .expect("metrics");
    assert_eq!(metrics.status().as_u16(), 200);
    let head = c
        .head(s.url("/v1/gates/g1"))
        .bearer_auth(READ)
        .send()
        .await
        .expect("head");
    assert_ne!(head.status().as_u16(), 403);
    let before = send(c.get(s.url("/v1/queues/q1")).bearer_auth(READ)).await.1;

    // ... and is refused every change the API documents.
    let changes = changes(&job);
    assert!(
        changes.len() >= 25,
        "only {} changes in openapi.json",
        changes.len()
    );
    for family in [
        "/v1/gates/g1/enter",
        "/v1/gates/g1/holders/handle",
        "/v1/gates/g1/leases/token",
        "/v1/queues/q1/jobs",
        "/v1/queues/q1/ack",
        "/v1/queues/q1/pause",
        "/v1/rooms/shop/pause",
        "/v1/rooms/shop/capacity",
        "/v1/schedules/g1",
        "/v1/limits/g1/check",
    ] {
        assert!(
            changes.iter().any(|(_, p)| p == family),
            "{family} not among {changes:?}"
        );
    }
    for (method, path) in &changes {
        let (st, body) = send(
            c.request(method.clone(), s.url(path))
                .bearer_auth(READ)
                .json(&json!({})),
        )
        .await;
        assert_eq!((st, code(&body)), (403, "forbidden"), "{method} {path}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains("read"), "{message}");
    }
    // Nothing moved: the job is still there, the queue as it was.
    let (st, _) = send(
        c.get(s.url(&format!("/v1/queues/q1/jobs/{job}")))
            .bearer_auth(READ),
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(
        send(c.get(s.url("/v1/queues/q1")).bearer_auth(READ)).await.1,
        before
    );

    // The admin gets past authentication on every one of them.
    for (method, path) in &changes {
        let (st, body) = send(
            c.request(method.clone(), s.url(path))
                .bearer_auth(ADMIN)
                .json(&json!({})),
        )
        .await;
        assert!(st != 401 && st != 403, "{method} {path}: {st} {body}");
    }
    // No token, or a wrong one: 401.
    assert_eq!(send(c.get(s.url("/v1/gates"))).await.0, 401);
    assert_eq!(
        send(c.get(s.url("/v1/gates")).bearer_auth("wrong-token-0123456789"))
            .await
            .0,
        401
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_cookie_stands_for_its_token_and_changes_need_its_csrf() {
    let s = start(None, ADMIN, READ);
    let c = reqwest::Client::new();
    let (st, body, cookie, set) = login(&s, ADMIN).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["role"], "admin");
    assert_eq!(body["auth"], true);
    let csrf = body["csrf"].as_str().expect("csrf").to_owned();
    let expires = body["expires_at_ms"].as_u64().expect("expires_at_ms");
    let now = now_ms();
    assert!(expires > now + 11 * 3600 * 1000 && expires <= now + 12 * 3600 * 1000 + 60_000);
    let cookie = cookie.expect("a cookie");
    assert!(cookie.starts_with("tollgate_session="), "{set}");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"] {
        assert!(set.contains(attribute), "{attribute} missing in {set}");
    }
    assert!(!set.contains("Secure"), "plain HTTP: {set}");

    // The cookie alone reads, and says who it is.
    let (st, who) = send(c.get(s.url("/v1/session")).header("cookie", &cookie)).await;
    assert_eq!(st, 200);
    assert_eq!(
        (who["role"].as_str(), who["csrf"].as_str()),
        (Some("admin"), Some(csrf.as_str()))
    );
    assert_eq!(
        send(c.get(s.url("/v1/gates")).header("cookie", &cookie)).await.0,
        200
    );
    // A stray cookie of the same name sent first (another path's, or one
    // a sibling subdomain planted) does not hide it.
    let both = format!("tollgate_session=planted; {cookie}");
    assert_eq!(
        send(c.get(s.url("/v1/gates")).header("cookie", &both)).await.0,
        200
    );
    assert_eq!(
        send(c.get(s.url("/v1/session")).header("cookie", &both)).await.0,
        200
    );
    // A change needs the CSRF header, and the right one.
    let pause = || c.post(s.url("/v1/queues/q1/pause")).header("cookie", &cookie);
    let (st, body) = send(pause()).await;
    assert_eq!((st, code(&body)), (403, "csrf"), "{body}");
    let (st, body) = send(pause().header("x-csrf-token", "not-the-right-one")).await;
    assert_eq!((st, code(&body)), (403, "csrf"), "{body}");
    let (st, body) = send(pause().header("x-csrf-token", &csrf)).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["paused"], true);

    // A read token's session: reads, and is refused changes even with its
    // CSRF value.
    let (st, body, read_cookie, _) = login(&s, READ).await;
    assert_eq!((st, body["role"].as_str()), (200, Some("read")));
    let read_cookie = read_cookie.expect("cookie");
    let read_csrf = body["csrf"].as_str().expect("csrf");
    assert_ne!(read_csrf, csrf);
    assert_eq!(
        send(c.get(s.url("/v1/queues/q1")).header("cookie", &read_cookie))
            .await
            .0,
        200
    );
    let (st, body) = send(
        c.post(s.url("/v1/queues/q1/resume"))
            .header("cookie", &read_cookie)
            .header("x-csrf-token", read_csrf),
    )
    .await;
    assert_eq!((st, code(&body)), (403, "forbidden"), "{body}");

    // A bearer says who it is, without a CSRF value.
    let (st, who) = send(c.get(s.url("/v1/session")).bearer_auth(READ)).await;
    assert_eq!(
        (st, who["role"].as_str(), &who["csrf"]),
        (200, Some("read"), &Value::Null)
    );

    // Tampered, forged elsewhere, expired: 401.
    let value = cookie.trim_start_matches("tollgate_session=");
    let tampered = value.replacen("v1.0.", "v1.1.", 1);
    let expired = forge(ADMIN, 0, now_ms() - 1);
    let valid = forge(ADMIN, 0, now_ms() + 600_000);
    for bad in [
        tampered.as_str(),
        expired.as_str(),
        "v1.0.99999999999999.x.y",
        "garbage",
        &"x".repeat(5000),
    ] {
        let cookie = format!("tollgate_session={bad}");
        let (st, body) = send(c.get(s.url("/v1/gates")).header("cookie", &cookie)).await;
        assert_eq!((st, code(&body)), (401, "unauthorized"), "{bad}");
        assert_eq!(
            send(c.get(s.url("/v1/session")).header("cookie", &cookie))
                .await
                .0,
            401
        );
    }
    // The same forgery, not expired, passes: the expired one was refused
    // for its expiry.
    let (st, _) = send(
        c.get(s.url("/v1/gates"))
            .header("cookie", format!("tollgate_session={valid}")),
    )
    .await;
    assert_eq!(st, 200);

    // Logout clears the cookie.
    let resp = c
        .delete(s.url("/v1/session"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("logout");
    assert_eq!(resp.status().as_u16(), 204);
    let cleared = resp.headers()["set-cookie"].to_str().expect("ascii");
    assert!(
        cleared.starts_with("tollgate_session=;") && cleared.contains("Max-Age=0"),
        "{cleared}"
    );
    // Without any credentials.
    assert_eq!(send(c.get(s.url("/v1/session"))).await.0, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logins_refuse_wrong_tokens_and_bad_bodies() {
    let s = start(None, ADMIN, READ);
    let c = reqwest::Client::new();
    let (st, body, cookie, _) = login(&s, "wrong-token-0123456789").await;
    assert_eq!((st, code(&body)), (401, "unauthorized"));
    assert!(cookie.is_none());
    let url = s.url("/v1/session");
    let (st, body) = send(c.post(&url).json(&json!({}))).await;
    assert_eq!((st, code(&body)), (400, "bad_request"), "missing token: {body}");
    let (st, body) = send(c.post(&url).json(&json!({"token": 7}))).await;
    assert_eq!((st, code(&body)), (400, "bad_request"), "{body}");
    let (st, body) = send(c.post(&url).header("content-type", "application/json").body("{")).await;
    assert_eq!((st, code(&body)), (400, "bad_request"), "{body}");
    let (st, _) = send(c.post(&url).header("content-type", "text/plain").body(ADMIN)).await;
    assert_eq!(st, 415);
    // On a client of its own: the server closes the connection of a body
    // it did not read, and a pooled connection would be reused.
    let huge = reqwest::Client::new()
        .post(&url)
        .json(&json!({"token": "x".repeat(100_000)}));
    assert_eq!(send(huge).await.0, 413);
    // Behind a TLS proxy the cookie is Secure.
    let resp = c
        .post(&url)
        .header("x-forwarded-proto", "https")
        .json(&json!({"token": ADMIN}))
        .send()
        .await
        .expect("login");
    assert_eq!(resp.status().as_u16(), 200);
    assert!(
        resp.headers()["set-cookie"]
            .to_str()
            .expect("ascii")
            .contains("; Secure")
    );
}

/// Tries logins from one address until refused: how many got through
/// before, and the refusal.
async fn until_refused(servers: &[&Server]) -> (usize, Value, Option<String>) {
    let c = reqwest::Client::new();
    let started = std::time::Instant::now();
    for i in 0..40 {
        let s = servers[i % servers.len()];
        let resp = c
            .post(s.url("/v1/session"))
            .json(&json!({"token": "wrong-token-0123456789"}))
            .send()
            .await
            .expect("login");
        if resp.status().as_u16() == 429 {
            let retry = resp
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().expect("ascii").to_owned());
            let body = resp.json().await.expect("json");
            // One more every 6 s after the burst of 10.
            let allowed = 10 + started.elapsed().as_secs() as usize / 6 + 1;
            assert!(i <= allowed, "{i} logins got through in {:?}", started.elapsed());
            return (i, body, retry);
        }
        assert_eq!(resp.status().as_u16(), 401);
    }
    panic!("40 logins, none refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logins_are_rate_limited_per_address() {
    let s = start(None, ADMIN, READ);
    let (tried, body, retry) = until_refused(&[&s]).await;
    assert!(tried >= 10, "refused after {tried}");
    assert_eq!(code(&body), "rate_limited");
    assert!(retry.is_some_and(|r| r.parse::<u64>().is_ok_and(|r| r >= 1)));
    // The right token too: the limit is on tries, not failures.
    let (st, body, _, _) = login(&s, ADMIN).await;
    assert_eq!((st, code(&body)), (429, "rate_limited"));
    // Bearer tokens spend the same allowance: until Retry-After, this
    // address's bearers are refused too, right or wrong.
    let (st, body) = send(reqwest::Client::new().get(s.url("/v1/gates")).bearer_auth(ADMIN)).await;
    assert_eq!((st, code(&body)), (429, "rate_limited"));
}

/// Wrong bearer tokens from one address are limited as logins are (one
/// allowance per address); a right one spends nothing, but is refused
/// too while its address is; other addresses, told apart through a
/// trusted proxy's X-Forwarded-For or by their own connection, are not.
async fn wrong_bearers_are_limited(redis: Option<&str>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("tollgate.toml");
    std::fs::write(
        &config,
        "[limits.api]\nrate = \"10000/s\"\n\n[protect]\nlimit = \"api\"\nkey = \"ip\"\ntrusted_proxies = [\"127.0.0.1/32\"]\n",
    )
    .expect("config");
    let config = config.to_str().expect("utf-8");
    let s = Server::start_with(
        redis,
        &["--token", ADMIN, "--read-token", READ, "--config", config],
    );
    let c = reqwest::Client::new();
    let from = |ip: &str| c.get(s.url("/v1/gates")).header("x-forwarded-for", ip.to_owned());
    // Right bearers spend nothing: many of them, then still a full burst.
    for _ in 0..30 {
        let (st, body) = send(from("203.0.113.7").bearer_auth(READ)).await;
        assert_eq!(st, 200, "{body}");
    }
    let started = std::time::Instant::now();
    let mut refused = None;
    for i in 0..40 {
        let resp = from("203.0.113.7")
            .bearer_auth(format!("wrong-token-{i:04}-0123456789"))
            .send()
            .await
            .expect("send");
        if resp.status().as_u16() == 429 {
            refused = Some((i, resp));
            break;
        }
        assert_eq!(resp.status().as_u16(), 401, "try {i}");
    }
    let (tried, resp) = refused.expect("40 wrong bearers, none refused");
    let allowed = 10 + started.elapsed().as_secs() as usize / 6 + 1;
    assert!((10..=allowed).contains(&tried), "refused after {tried}");
    let retry = resp.headers().get("retry-after").expect("Retry-After");
    assert!(
        retry
            .to_str()
            .expect("ascii")
            .parse::<u64>()
            .is_ok_and(|r| r >= 1)
    );
    let body: Value = resp.json().await.expect("json");
    assert_eq!(code(&body), "rate_limited", "{body}");
    // The right token from that address: refused too, else the refusal
    // would tell a right guess from a wrong one. So are its logins and
    // GET /v1/session with a bearer.
    let (st, body) = send(from("203.0.113.7").bearer_auth(ADMIN)).await;
    assert_eq!((st, code(&body)), (429, "rate_limited"));
    let (st, body) = send(
        c.get(s.url("/v1/session"))
            .header("x-forwarded-for", "203.0.113.7")
            .bearer_auth(ADMIN),
    )
    .await;
    assert_eq!((st, code(&body)), (429, "rate_limited"));
    let (st, body) = send(
        c.post(s.url("/v1/session"))
            .header("x-forwarded-for", "203.0.113.7")
            .json(&json!({"token": ADMIN})),
    )
    .await;
    assert_eq!((st, code(&body)), (429, "rate_limited"));
    // Another address behind the trusted proxy: untouched.
    let (st, body) = send(from("203.0.113.8").bearer_auth(ADMIN)).await;
    assert_eq!(st, 200, "{body}");
    let (st, body) = send(from("203.0.113.8").bearer_auth("wrong-token-x-0123456789")).await;
    assert_eq!((st, code(&body)), (401, "unauthorized"));
    // Another address of its own (not a trusted proxy: its
    // X-Forwarded-For is not believed, so naming the refused one does
    // not refuse it).
    let other = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .expect("client");
    let (st, body) = send(
        other
            .get(s.url("/v1/gates"))
            .header("x-forwarded-for", "203.0.113.7")
            .bearer_auth(ADMIN),
    )
    .await;
    assert_eq!(st, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_bearers_are_limited_per_address_on_memory() {
    wrong_bearers_are_limited(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_bearers_are_limited_per_address_on_redis() {
    let redis = RedisServer::start();
    wrong_bearers_are_limited(Some(&redis.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_and_the_login_limit_hold_across_servers_sharing_redis() {
    let redis = RedisServer::start();
    let a = start(Some(&redis.url()), ADMIN, READ);
    let b = start(Some(&redis.url()), ADMIN, READ);
    let c = reqwest::Client::new();
    let (st, body, cookie, _) = login(&a, ADMIN).await;
    assert_eq!(st, 200);
    let cookie = cookie.expect("cookie");
    let csrf = body["csrf"].as_str().expect("csrf");
    // Server b, same config, takes a's cookie and CSRF value.
    let (st, body) = send(
        c.post(b.url("/v1/queues/q1/pause"))
            .header("cookie", &cookie)
            .header("x-csrf-token", csrf),
    )
    .await;
    assert_eq!(st, 200, "{body}");
    // A server whose admin token changed does not; the read token's place
    // is the same but its key is not the admin's.
    let changed = start(Some(&redis.url()), "another-admin-token-0123456789", READ);
    let (st, body) = send(c.get(changed.url("/v1/gates")).header("cookie", &cookie)).await;
    assert_eq!((st, code(&body)), (401, "unauthorized"));
    drop(changed);
    // The login limit is kept in the store: tries on a and b add up.
    let (tried, body, _) = until_refused(&[&a, &b]).await;
    assert_eq!(code(&body), "rate_limited");
    assert!(tried >= 9, "refused after {tried}: the first login counted too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_cookie_survives_a_restart_but_not_a_token_change() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("tollgate.toml");
    let write = |read: &str| {
        std::fs::write(
            &config,
            format!("tokens = [\"{ADMIN}\"]\nread_tokens = [\"{read}\"]\napi_session_ttl = \"1h\"\n"),
        )
        .expect("config");
    };
    write(READ);
    let args = ["--config", config.to_str().expect("path")];
    let s = Server::start_with(None, &args);
    let (st, body, cookie, set) = login(&s, READ).await;
    assert_eq!((st, body["role"].as_str()), (200, Some("read")));
    assert!(set.contains("Max-Age=3600"), "{set}");
    let cookie = cookie.expect("cookie");
    drop(s);
    let c = reqwest::Client::new();
    let again = Server::start_with(None, &args);
    assert_eq!(
        send(c.get(again.url("/v1/gates")).header("cookie", &cookie))
            .await
            .0,
        200
    );
    drop(again);
    write("a-new-read-token-0123456789");
    let changed = Server::start_with(None, &args);
    assert_eq!(
        send(c.get(changed.url("/v1/gates")).header("cookie", &cookie))
            .await
            .0,
        401
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_site_changes_are_refused_without_tokens() {
    let s = Server::start(None);
    let c = reqwest::Client::new();
    let (st, body) = send(c.get(s.url("/v1/session"))).await;
    assert_eq!(st, 200);
    assert_eq!(body, json!({"auth": false, "role": "admin", "csrf": null}));
    let own = s.base.clone();
    let (st, _) = send(c.post(s.url("/v1/queues/q1/jobs")).json(&json!({"payload": 1}))).await;
    assert_eq!(st, 201);
    let pause = || c.post(s.url("/v1/queues/q1/pause"));
    for (header, value) in [
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-site", "same-site"),
        ("origin", "http://evil.example"),
        ("origin", "null"),
    ] {
        let (st, body) = send(pause().header(header, value)).await;
        assert_eq!((st, code(&body)), (403, "cross_origin"), "{header}: {value}");
    }
    // Nothing was paused.
    assert_eq!(send(c.get(s.url("/v1/queues/q1"))).await.1["paused"], false);
    // Reads from anywhere, changes from the server's own origin or from no
    // browser at all, go through.
    let (st, _) = send(
        c.get(s.url("/v1/queues/q1"))
            .header("sec-fetch-site", "cross-site"),
    )
    .await;
    assert_eq!(st, 200);
    let (st, _) = send(
        pause()
            .header("origin", &own)
            .header("sec-fetch-site", "same-origin"),
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(send(c.post(s.url("/v1/queues/q1/resume"))).await.0, 200);
    // The login is a change too.
    let (st, body) = send(
        c.post(s.url("/v1/session"))
            .header("origin", "http://evil.example")
            .json(&json!({"token": "x"})),
    )
    .await;
    assert_eq!((st, code(&body)), (403, "cross_origin"));
}

#[test]
fn a_token_has_one_role_and_read_tokens_are_checked_like_admin_ones() {
    for (args, says) in [
        (
            vec!["--token", ADMIN, "--read-token", ADMIN],
            "both an admin token (tokens, --token) and a read token",
        ),
        (vec!["--read-token", "short"], "--read-token shor… is too weak"),
        (vec!["--api-session-ttl", "1s"], "api_session_ttl must be"),
    ] {
        let out = Server::command(None, &args).output().expect("run serve");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
