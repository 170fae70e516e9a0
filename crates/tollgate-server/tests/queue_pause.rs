//! Pausing and resuming a queue over HTTP (`POST /v1/queues/{q}/pause`,
//! `/resume`) and from the CLI (`tollgate jobs pause|resume`), on the
//! embedded store and on a real redis-server: pushes are taken, claims get
//! nothing, a resume wakes a waiting claim, stats and metrics show it.

mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use serve_support::{Server, send};
use support::RedisServer;

async fn pause_over_http(s: &Server) {
    let c = reqwest::Client::new();
    let url = |p: &str| s.url(&format!("/v1/queues/held{p}"));
    let (st, p) = send(c.post(url("/pause"))).await;
    assert_eq!((st, &p), (200, &json!({"paused": true, "changed": true})));
    let (st, p) = send(c.post(url("/pause"))).await;
    assert_eq!((st, &p), (200, &json!({"paused": true, "changed": false})));
    // Pushes are taken; claims get nothing.
    let (st, p) = send(c.post(url("/jobs")).json(&json!({"payload": "x", "id": "j1"}))).await;
    assert_eq!(st, 201, "{p}");
    assert_eq!(
        send(c.post(url("/claim"))).await.1,
        json!({"job": null, "jobs": []})
    );
    let (st, stats) = send(c.get(url(""))).await;
    assert_eq!(
        (st, &stats["paused"], &stats["ready"]),
        (200, &json!(true), &json!(1)),
        "{stats}"
    );
    let text = s.metrics(None).await;
    assert!(
        text.contains(r#"tollgate_queue_paused{queue="held"} 1"#),
        "{text}"
    );

    // A claim waiting on the paused queue gets the job once it is resumed,
    // at once (not at its 1 s re-check).
    let waiting = tokio::spawn({
        let (c, u) = (c.clone(), url("/claim?wait_ms=10000"));
        async move {
            let answer = send(c.post(u)).await;
            (answer, Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "a claim on a paused queue came back");
    let resumed = Instant::now();
    let (st, p) = send(c.post(url("/resume"))).await;
    assert_eq!((st, &p), (200, &json!({"paused": false, "changed": true})));
    let ((st, j), at) = waiting.await.unwrap();
    assert_eq!((st, &j["job"]["id"]), (200, &json!("j1")), "{j}");
    let woke = at.duration_since(resumed);
    assert!(
        woke < Duration::from_millis(300),
        "the claim came {woke:?} after the resume"
    );
    let (_, p) = send(c.post(url("/resume"))).await;
    assert_eq!(p, json!({"paused": false, "changed": false}));
    assert_eq!(send(c.get(url(""))).await.1["paused"], json!(false));
    let text = s.metrics(None).await;
    assert!(
        text.contains(r#"tollgate_queue_paused{queue="held"} 0"#),
        "{text}"
    );

    // Bad input: a queue name the API refuses.
    for action in ["pause", "resume"] {
        let (st, e) = send(c.post(s.url(&format!("/v1/queues/bad%20name/{action}")))).await;
        assert_eq!(
            (st, e["error"]["code"].as_str()),
            (400, Some("bad_request")),
            "{e}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_over_http_on_the_embedded_store() {
    pause_over_http(&Server::start(None)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_over_http_on_redis() {
    let redis = RedisServer::start();
    pause_over_http(&Server::start(Some(&redis.url()))).await;
}

fn jobs(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .env_remove("TOLLGATE_REDIS_URL")
        .env("TOLLGATE_LOG", "warn")
        .arg("jobs")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("tollgate jobs")
}

/// The one JSON line a jobs command that must succeed prints.
fn ok_json(args: &[&str]) -> Value {
    let out = jobs(args);
    assert!(
        out.status.success(),
        "{args:?}: {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON line")
}

/// `--server URL` for an http:// URL (a `tollgate serve`), else `--redis URL`.
fn at(url: &str) -> [&str; 2] {
    if url.starts_with("http://") {
        ["--server", url]
    } else {
        ["--redis", url]
    }
}

fn pause_from_the_cli(url: &str) {
    let [how, url] = at(url);
    let with = |args: &[&str]| -> Vec<String> {
        args.iter()
            .map(|a| a.to_string())
            .chain([how.to_owned(), url.to_owned()])
            .collect()
    };
    let run = |args: &[&str]| {
        let all = with(args);
        ok_json(&all.iter().map(String::as_str).collect::<Vec<_>>())
    };
    assert_eq!(
        run(&["pause", "cli-q"]),
        json!({"queue": "cli-q", "paused": true, "changed": true})
    );
    assert_eq!(run(&["pause", "cli-q"])["changed"], json!(false));
    let stats = run(&["stats", "cli-q"]);
    assert_eq!(stats["paused"], json!(true), "{stats}");
    assert_eq!(
        run(&["resume", "cli-q"]),
        json!({"queue": "cli-q", "paused": false, "changed": true})
    );
    assert_eq!(run(&["resume", "cli-q"])["changed"], json!(false));
    assert_eq!(run(&["stats", "cli-q"])["paused"], json!(false));
    // Bad input: a queue name the library refuses is a usage error.
    for action in ["pause", "resume"] {
        let all = with(&[action, "bad name"]);
        let out = jobs(&all.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(
            out.status.code(),
            Some(64),
            "{action}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn pause_from_the_cli_on_redis() {
    let redis = RedisServer::start();
    pause_from_the_cli(&redis.url());
}

#[test]
fn pause_from_the_cli_through_a_server() {
    let server = Server::start(None);
    pause_from_the_cli(&server.base);
}

/// `--help` names the exit codes of both commands.
#[test]
fn pause_and_resume_help_name_their_exit_codes() {
    for action in ["pause", "resume"] {
        let out = jobs(&[action, "--help"]);
        assert_eq!(out.status.code(), Some(0));
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.contains("Exit codes: 0 "), "{help}");
        assert!(help.contains("64 bad arguments"), "{help}");
    }
}
