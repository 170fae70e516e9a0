//! Rate limits through `tollgate serve` (a separate process, real HTTP) and
//! `tollgate limit check`, on the embedded store and on a real redis-server.

mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use serve_support::{Server, send};
use support::RedisServer;

const LIMITS: &str = r#"
listen = "127.0.0.1:0"

[limits.api]
rate = "10/min"
burst = 3

[limits.soft]
rate = "10/min"
burst = 1
on_store_error = "open"

[limits.hard]
rate = "10/min"
burst = 1
on_store_error = "closed"
timeout_ms = 50

"#;

const PROTECT: &str = r#"
[limits.clients]
rate = "60/min"
burst = 3

[protect]
limit = "clients"
key = "ip"
trusted_proxies = ["127.0.0.1/32"]
"#;

fn config(dir: &tempfile::TempDir, text: &str) -> String {
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, text).expect("write config");
    path.display().to_string()
}

async fn check(
    c: &reqwest::Client,
    s: &Server,
    limiter: &str,
    body: Value,
) -> (u16, Value, reqwest::header::HeaderMap) {
    // Each check comes from its own forwarded client, so the [protect]
    // layer's per-IP budget never gets in the way.
    let client_ip = format!("192.0.2.{}", rand_octet());
    let resp = c
        .post(s.url(&format!("/v1/limits/{limiter}/check")))
        .header("x-forwarded-for", client_ip)
        .json(&body)
        .send()
        .await
        .expect("request");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, resp.json().await.unwrap_or(Value::Null), headers)
}

fn rand_octet() -> u8 {
    use std::sync::atomic::{AtomicU8, Ordering};
    static NEXT: AtomicU8 = AtomicU8::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

async fn limits_over_http(redis: Option<&str>) {
    let dir = tempfile::tempdir().expect("dir");
    let s = Server::start_with(redis, &["--config", &config(&dir, &format!("{LIMITS}{PROTECT}"))]);
    let c = reqwest::Client::new();

    // A configured limit: three at once, then refusals with the headers.
    for left in [2, 1, 0] {
        let (st, d, h) = check(&c, &s, "api", json!({"key": "user-1"})).await;
        assert_eq!(st, 200, "{d}");
        assert_eq!(d["allowed"], true);
        assert_eq!(d["remaining"], left);
        assert_eq!(h["ratelimit-limit"], "3");
        assert_eq!(h["ratelimit-remaining"], left.to_string().as_str());
        assert!(!h.contains_key("retry-after"));
    }
    let (st, d, h) = check(&c, &s, "api", json!({"key": "user-1"})).await;
    assert_eq!(st, 429, "{d}");
    assert_eq!(d["allowed"], false);
    let retry = d["retry_after_ms"].as_u64().expect("retry_after_ms");
    assert!(retry > 5_000 && retry <= 6_000, "one interval of 6 s: {d}");
    assert_eq!(h["retry-after"], "6");
    assert_eq!(h["ratelimit-reset"], "18");
    // Other keys are untouched; cost spends several.
    let (st, d, _) = check(&c, &s, "api", json!({"key": "user-2", "cost": 3})).await;
    assert_eq!((st, d["remaining"].as_u64()), (200, Some(0)), "{d}");

    // Repeating the configured limit is fine; contradicting it is a 409.
    let (st, _, _) = check(
        &c,
        &s,
        "api",
        json!({"key": "user-3", "rate": "10/min", "burst": 3}),
    )
    .await;
    assert_eq!(st, 200);
    let (st, d, _) = check(&c, &s, "api", json!({"key": "user-3", "rate": "100/s"})).await;
    assert_eq!(
        (st, d["error"]["code"].as_str()),
        (409, Some("limit_conflict")),
        "{d}"
    );

    // A limit that is not configured comes with the check.
    for want in [200, 200, 429] {
        let body = json!({"key": "k", "rate": "5/min", "burst": 2, "algorithm": "gcra"});
        assert_eq!(check(&c, &s, "adhoc", body).await.0, want);
    }
    let (st, d, _) = check(&c, &s, "nowhere", json!({"key": "k"})).await;
    assert_eq!(
        (st, d["error"]["code"].as_str()),
        (404, Some("limit_not_found")),
        "{d}"
    );
    for body in [
        json!({"key": "k", "rate": "0/s"}),
        json!({"key": "k", "rate": "ten per second"}),
        json!({"key": "k", "rate": "5/s", "burst": 0}),
        json!({"key": "k", "rate": "5/s", "algorithm": "leaky_bucket"}),
        json!({"key": "k", "rate": "5/s", "algorithm": "fixed_window", "burst": 9}),
        json!({"key": "k", "burst": 3}),
        json!({"key": "k", "rate": "5/s", "cost": 0}),
        json!({"key": "k", "rate": "5/s", "cost": 6}),
        json!({"key": "", "rate": "5/s"}),
        json!({"key": "has space", "rate": "5/s"}),
        json!({"key": "k", "rate": "5/s", "colour": "blue"}),
        json!({"rate": "5/s"}),
        json!({"key": "k", "rate": 5}),
    ] {
        let (st, d, _) = check(&c, &s, "adhoc2", body.clone()).await;
        assert_eq!(st, 400, "{body} -> {d}");
        assert_eq!(d["error"]["code"], "bad_request", "{body} -> {d}");
    }
    let (st, d, _) = check(&c, &s, "bad%20name", json!({"key": "k", "rate": "5/s"})).await;
    assert_eq!(st, 400, "{d}");

    // Describing a configured limit.
    let (st, d) = send(c.get(s.url("/v1/limits/api"))).await;
    assert_eq!(st, 200);
    assert_eq!(
        d,
        json!({"name": "api", "algorithm": "gcra", "rate": "10/min", "burst": 3})
    );
    assert_eq!(send(c.get(s.url("/v1/limits/adhoc"))).await.0, 404);

    // Decisions are counted by limiter and outcome.
    let text = s.metrics(None).await;
    for series in [
        r#"tollgate_limit_decisions_total{limiter="api",outcome="allowed"} 5"#,
        r#"tollgate_limit_decisions_total{limiter="api",outcome="refused"} 1"#,
        r#"tollgate_limit_decisions_total{limiter="adhoc",outcome="refused"} 1"#,
    ] {
        assert!(text.contains(series), "{series} missing from\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_over_http_on_the_embedded_store() {
    limits_over_http(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_over_http_on_redis() {
    let redis = RedisServer::start();
    limits_over_http(Some(&redis.url())).await;
}

/// `[protect]` rate-limits the API itself, per client IP; X-Forwarded-For
/// counts because the test connects from a trusted proxy address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_itself_is_protected_per_client() {
    let dir = tempfile::tempdir().expect("dir");
    let s = Server::start_with(None, &["--config", &config(&dir, &format!("{LIMITS}{PROTECT}"))]);
    let c = reqwest::Client::new();
    let get = |ip: &'static str| c.get(s.url("/v1/gates/shop")).header("x-forwarded-for", ip);
    for _ in 0..3 {
        let resp = get("198.51.100.1").send().await.expect("request");
        assert_eq!(resp.status().as_u16(), 200);
        assert!(resp.headers().contains_key("ratelimit-remaining"));
    }
    let resp = get("198.51.100.1").send().await.expect("request");
    assert_eq!(resp.status().as_u16(), 429);
    assert_eq!(resp.headers()["retry-after"], "1");
    let body: Value = resp.json().await.expect("json");
    assert_eq!(body["error"]["code"], "rate_limited");
    assert_eq!(
        get("198.51.100.2")
            .send()
            .await
            .expect("request")
            .status()
            .as_u16(),
        200
    );
    // Probes are never limited.
    for _ in 0..20 {
        assert_eq!(send(c.get(s.url("/healthz"))).await.0, 200);
    }
    // The CLI connects from 127.0.0.1 without X-Forwarded-For: three
    // checks of different keys pass, then the server turns the client
    // itself away (exit 75, not "refused": the key was never checked).
    let base = s.base.clone();
    let codes = tokio::task::spawn_blocking(move || {
        (0..4)
            .map(|i| {
                limit_check(&["api", &format!("key-{i}"), "--server", &base])
                    .status
                    .code()
            })
            .collect::<Vec<_>>()
    })
    .await
    .expect("blocking");
    assert_eq!(codes, [Some(0), Some(0), Some(0), Some(75)]);
    // Every `--server` command maps that answer the same way: `lock run`
    // turned away by the server's own limit exits 75 too (not 64). The
    // budget refills one a second, so of a few quick tries at least one
    // is turned away, and each of the others runs its command (0).
    let base = s.base.clone();
    let codes = tokio::task::spawn_blocking(move || {
        (0..3)
            .map(|_| {
                tollgate(&["lock", "run", "nightly", "--server", &base, "--", "true"])
                    .status
                    .code()
            })
            .collect::<Vec<_>>()
    })
    .await
    .expect("blocking");
    assert!(codes.contains(&Some(75)), "{codes:?}");
    assert!(codes.iter().all(|c| matches!(c, Some(0 | 75))), "{codes:?}");
}

/// Redis down: the default reports the error (503), `open` allows and
/// `closed` refuses, each marked degraded, each within its timeout, with a
/// metric and a log line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_down_follows_each_limits_policy() {
    let mut redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let log = dir.path().join("serve.log");
    let s = Server::start_full(
        Some(&redis.url()),
        &["--config", &config(&dir, LIMITS)],
        Stdio::from(std::fs::File::create(&log).expect("log file")),
    );
    let c = reqwest::Client::new();
    assert_eq!(check(&c, &s, "api", json!({"key": "k"})).await.0, 200);
    redis.kill();
    for (limiter, want, allowed) in [
        ("api", 503, None),
        ("soft", 200, Some(true)),
        ("hard", 429, Some(false)),
    ] {
        let started = Instant::now();
        let (st, d, h) = check(&c, &s, limiter, json!({"key": "k"})).await;
        assert!(
            started.elapsed() < Duration::from_millis(1000),
            "{limiter}: {:?}",
            started.elapsed()
        );
        assert_eq!(st, want, "{limiter}: {d}");
        match allowed {
            None => {
                assert_eq!(d["error"]["code"], "store_unavailable");
                assert_eq!(h["retry-after"], "1");
            }
            Some(a) => {
                assert_eq!(d["allowed"], a);
                assert_eq!(d["degraded"], true);
            }
        }
    }
    let text = s.metrics(None).await;
    for series in [
        r#"tollgate_limit_store_errors_total{limiter="soft"} 1"#,
        r#"tollgate_limit_decisions_total{limiter="soft",outcome="failed_open"} 1"#,
        r#"tollgate_limit_decisions_total{limiter="hard",outcome="failed_closed"} 1"#,
        r#"tollgate_limit_decisions_total{limiter="api",outcome="error"} 1"#,
    ] {
        assert!(text.contains(series), "{series} missing from\n{text}");
    }
    let logged = std::fs::read_to_string(&log).expect("log");
    assert!(
        logged.contains("rate limiter: store error") && logged.contains("limiter=soft"),
        "{logged}"
    );
}

/// One command of each kind that goes through the server at `base`.
fn server_commands(base: &str) -> [Vec<&str>; 3] {
    [
        vec!["lock", "run", "nightly", "--server", base, "--", "true"],
        vec!["limit", "check", "api", "k", "--server", base],
        vec![
            "jobs",
            "push",
            "mail",
            "--payload-file",
            "/dev/null",
            "--server",
            base,
        ],
    ]
}

/// `tollgate ARGS`, with no store or server from the environment.
fn tollgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .env_remove("TOLLGATE_REDIS_URL")
        .env_remove("TOLLGATE_SERVER")
        .env_remove("TOLLGATE_SERVER_TOKEN")
        .args(args)
        .output()
        .expect("run tollgate")
}

fn limit_check(args: &[&str]) -> Output {
    tollgate(&[&["limit", "check"], args].concat())
}

/// Two processes, each running `tollgate limit check` over and over, share
/// one budget through Redis: exactly the burst passes between them.
#[test]
fn two_processes_share_one_budget_on_redis() {
    let redis = RedisServer::start();
    let url = redis.url();
    let worker = |url: String| {
        std::thread::spawn(move || {
            (0..12)
                .map(|_| {
                    let out = limit_check(&[
                        "cron", "nightly", "--rate", "1/min", "--burst", "10", "--redis", &url,
                    ]);
                    let d: Value = serde_json::from_slice(&out.stdout).expect("decision on stdout");
                    assert_eq!(
                        d["allowed"].as_bool(),
                        Some(out.status.code() == Some(0)),
                        "{out:?}"
                    );
                    out.status.code()
                })
                .collect::<Vec<_>>()
        })
    };
    let (a, b) = (worker(url.clone()), worker(url));
    let codes: Vec<_> = [a, b]
        .into_iter()
        .flat_map(|t| t.join().expect("worker"))
        .collect();
    assert_eq!(codes.iter().filter(|c| **c == Some(0)).count(), 10, "{codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == Some(1)).count(), 14, "{codes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_check_through_a_server_and_its_exit_codes() {
    let dir = tempfile::tempdir().expect("dir");
    let s = Server::start_with(None, &["--config", &config(&dir, LIMITS)]);
    let base = s.base.clone();
    let codes = tokio::task::spawn_blocking(move || {
        let mut codes = Vec::new();
        // A configured limit needs no --rate.
        for _ in 0..4 {
            codes.push(limit_check(&["api", "job-1", "--server", &base]).status.code());
        }
        codes
    })
    .await
    .expect("blocking");
    assert_eq!(codes, [Some(0), Some(0), Some(0), Some(1)]);

    for (args, code) in [
        (vec!["api", "k"], 64),
        (
            vec!["x", "k", "--rate", "0/s", "--redis", "redis://127.0.0.1:1"],
            64,
        ),
        (vec!["x", "k", "--burst", "3", "--server", s.base.as_str()], 64),
        (vec!["nowhere", "k", "--server", s.base.as_str()], 64),
        (
            vec!["x", "k", "--rate", "5/s", "--redis", "redis://127.0.0.1:1"],
            69,
        ),
        (
            vec!["x", "k", "--rate", "5/s", "--server", "http://127.0.0.1:1"],
            69,
        ),
    ] {
        let out = limit_check(&args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.stderr.is_empty(), "{args:?}: no message");
    }
}

/// A server whose Redis stops accepting its user (the ACL changed under
/// it) answers `store_misconfigured`, and every `--server` command maps
/// that to 78, the set-up exit code: no retry mends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_refused_by_its_redis_makes_every_server_command_exit_78() {
    let redis = RedisServer::start();
    redis.command(&["ACL", "SETUSER", "tg", "on", ">pw", "~*", "&*", "+@all"]);
    let url = redis.url().replacen("redis://", "redis://tg:pw@", 1);
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start_with(Some(&url), &["--config", &config(&dir, LIMITS)]);
    let base = s.base.clone();
    let commands = server_commands(&base);
    // While Redis accepts the user, each works.
    for args in &commands {
        let out = tokio::task::block_in_place(|| tollgate(args));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    redis.command(&["ACL", "SETUSER", "tg", "-@all"]);
    for args in &commands {
        let out = tokio::task::block_in_place(|| tollgate(args));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{args:?}: {err}");
        assert!(err.contains("refused"), "{args:?}: {err}");
    }
}

/// A server that requires a token: without one, with a wrong one, or
/// with a read token for a change, every `--server` command exits 78 and
/// names the flag to set; with it, they work (`lock status` included,
/// which a read token may run too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_wrong_server_token_exits_78_naming_the_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token = "a-good-token-0123456789";
    // `tokens` is a top-level key: before the tables.
    let read = "a-read-token-0123456789";
    let text = format!("tokens = [\"{token}\"]\nread_tokens = [\"{read}\"]\n{LIMITS}");
    let s = Server::start_with(None, &["--config", &config(&dir, &text)]);
    let base = s.base.clone();
    let mut commands = server_commands(&base).to_vec();
    commands.insert(1, vec!["lock", "status", "nightly", "--server", &base]);
    for (given, says) in [
        (None, "requires a token"),
        (Some("wrong-token-0123456789"), "refused the token"),
        (Some(read), "for reading only"),
    ] {
        for args in &commands {
            if given == Some(read) && args[1] == "status" {
                continue;
            }
            let mut args = args.clone();
            if let Some(t) = given {
                // Before any `--` and the command after it.
                args.splice(3..3, ["--server-token", t]);
            }
            let out = tokio::task::block_in_place(|| tollgate(&args));
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(78), "{args:?}: {err}");
            assert!(
                err.contains(says) && err.contains("--server-token"),
                "{args:?}: {err}"
            );
        }
    }
    for args in &commands {
        let mut args = args.clone();
        args.splice(3..3, ["--server-token", token]);
        let out = tokio::task::block_in_place(|| tollgate(&args));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let status = [
        "lock",
        "status",
        "nightly",
        "--server",
        &base,
        "--server-token",
        read,
    ];
    let out = tokio::task::block_in_place(|| tollgate(&status));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
