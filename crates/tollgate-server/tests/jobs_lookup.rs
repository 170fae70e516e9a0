//! Looking jobs up over HTTP (`GET /v1/queues/{queue}/jobs/{id}`, and
//! `GET /v1/queues/{queue}/jobs?state=…` by pages) and from the CLI
//! (`tollgate jobs show|list`, on the store and through `--server`).

mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use serde_json::{Value, json};
use serve_support::{Server, send};
use support::RedisServer;

async fn lookups_over_http(s: &Server) {
    let c = reqwest::Client::new();
    let url = |p: &str| s.url(&format!("/v1/queues/look{p}"));
    let push = |body: Value| {
        let c = c.clone();
        let u = url("/jobs");
        async move {
            let (st, p) = send(c.post(u).json(&body)).await;
            assert!(st == 201, "{st} {p}");
        }
    };
    push(json!({"payload": {"n": 1}, "id": "run", "priority": 9})).await;
    let (st, claimed) = send(c.post(url("/claim"))).await;
    assert_eq!(st, 200);
    let fence = claimed["job"]["fence"].as_u64().expect("fence");
    // 300 bytes of which the first 256 end inside a character: the text
    // before it.
    push(json!({"payload": "é".repeat(149), "id": "text"})).await;
    push(json!({"payload_base64": "//79", "id": "bin"})).await;
    push(json!({"payload": 1, "id": "later", "delay_ms": 3_600_000})).await;

    let (st, run) = send(c.get(url("/jobs/run"))).await;
    assert_eq!(st, 200, "{run}");
    assert_eq!(
        (
            run["state"].as_str(),
            run["fence"].as_u64(),
            run["attempts"].as_u64()
        ),
        (Some("running"), Some(fence), Some(1))
    );
    assert_eq!(run["lease_until_ms"], claimed["job"]["lease_until_ms"]);
    assert_eq!(
        (
            run["payload_preview"].as_str(),
            run["payload_preview_encoding"].as_str()
        ),
        (Some(r#"{"n":1}"#), Some("utf8"))
    );
    let (_, text) = send(c.get(url("/jobs/text"))).await;
    assert_eq!(text["state"], "ready");
    assert_eq!(text["payload_size"], 300, "{text}");
    assert_eq!(text["payload_truncated"], true);
    let preview = text["payload_preview"].as_str().unwrap();
    assert_eq!(preview, format!("\"{}", "é".repeat(127)), "whole characters only");
    let (_, bin) = send(c.get(url("/jobs/bin"))).await;
    assert_eq!(
        (
            bin["payload_preview"].as_str(),
            bin["payload_preview_encoding"].as_str()
        ),
        (Some("//79"), Some("base64"))
    );
    let (_, later) = send(c.get(url("/jobs/later"))).await;
    assert_eq!(later["state"], "delayed");
    assert!(later["due_ms"].as_u64().is_some(), "{later}");
    let (st, e) = send(c.get(url("/jobs/nope"))).await;
    assert_eq!((st, e["error"]["code"].as_str()), (404, Some("job_not_found")));

    // Pages of one job each visit every ready job once, then end.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        // The ids here need no escaping in a query string.
        let after = cursor.as_ref().map_or(String::new(), |c| format!("&cursor={c}"));
        let (st, page) = send(c.get(url(&format!("/jobs?state=ready&limit=1{after}")))).await;
        assert_eq!(st, 200, "{page}");
        seen.extend(
            page["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["id"].as_str().unwrap().to_owned()),
        );
        match page["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, ["text", "bin"], "push order at one priority");
    let (_, page) = send(c.get(url("/jobs?state=running"))).await;
    assert_eq!(page["jobs"][0]["id"], "run");
    assert_eq!(page["next"], Value::Null);

    // Bad input: 400; a queue never pushed to: 404.
    for q in [
        "state=bogus",
        "",
        "state=dead&limit=0",
        "state=dead&limit=1001",
        "state=dead&cursor=zz",
        "state=dead&other=1",
    ] {
        let (st, e) = send(c.get(url(&format!("/jobs?{q}")))).await;
        assert_eq!(
            (st, e["error"]["code"].as_str()),
            (400, Some("bad_request")),
            "{q}: {e}"
        );
    }
    let (st, e) = send(c.get(s.url("/v1/queues/nosuch/jobs?state=dead"))).await;
    assert_eq!((st, e["error"]["code"].as_str()), (404, Some("queue_not_found")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_over_http_on_the_embedded_store() {
    let s = Server::start(None);
    lookups_over_http(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_over_http_on_redis() {
    let redis = RedisServer::start();
    let s = Server::start(Some(&redis.url()));
    lookups_over_http(&s).await;
}

fn tollgate(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .env_remove("TOLLGATE_REDIS_URL")
        .env("TOLLGATE_LOG", "warn")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run tollgate")
}

/// Its JSON lines; it must have exited 0.
fn lines(out: &std::process::Output) -> Vec<Value> {
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// `jobs show` and `jobs list` with `--redis URL` or `--server URL`.
fn show_and_list_from_the_cli(flag: &str, url: &str) {
    let push = |id: &str, extra: &[&str]| {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .env_remove("TOLLGATE_REDIS_URL")
            .args(["jobs", "push", "cli", "--id", id, flag, url])
            .args(extra)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("push");
        use std::io::Write;
        child.stdin.take().unwrap().write_all(id.as_bytes()).unwrap();
        assert!(child.wait().unwrap().success());
    };
    for id in ["a", "b", "c"] {
        push(id, &[]);
    }
    push("later", &["--delay", "1h"]);
    let shown = lines(&tollgate(&["jobs", "show", "cli", "b", flag, url]));
    assert_eq!(
        (
            shown[0]["id"].as_str(),
            shown[0]["state"].as_str(),
            shown[0]["payload_preview"].as_str()
        ),
        (Some("b"), Some("ready"), Some("b")),
        "{shown:?}"
    );
    // With its whole payload ("b", not JSON: only in base64).
    assert_eq!(
        (&shown[0]["payload"], shown[0]["payload_base64"].as_str()),
        (&Value::Null, Some("Yg==")),
        "{shown:?}"
    );
    let later = lines(&tollgate(&["jobs", "show", "cli", "later", flag, url]));
    assert_eq!(later[0]["state"], "delayed");

    // Two pages of two: the first ends with the cursor of the second.
    let first = lines(&tollgate(&[
        "jobs", "list", "cli", "--state", "ready", "--limit", "2", flag, url,
    ]));
    assert_eq!(
        (first[0]["id"].as_str(), first[1]["id"].as_str()),
        (Some("a"), Some("b"))
    );
    let next = first[2]["next"]
        .as_str()
        .expect("a last line with the next cursor");
    let second = lines(&tollgate(&[
        "jobs", "list", "cli", "--state", "ready", "--limit", "2", "--cursor", next, flag, url,
    ]));
    assert_eq!(second.len(), 1, "the last page, without a cursor: {second:?}");
    assert_eq!(second[0]["id"], "c");

    // Exit codes: 65 for an unknown job or queue, 64 for bad input.
    let code = |args: &[&str]| {
        let mut all = vec!["jobs"];
        all.extend_from_slice(args);
        all.extend_from_slice(&[flag, url]);
        let out = tollgate(&all);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (c, err) = code(&["show", "cli", "nope"]);
    assert_eq!(c, Some(65), "{err}");
    assert!(err.contains("no job \"nope\""), "{err}");
    assert_eq!(code(&["list", "nosuch", "--state", "dead"]).0, Some(65));
    for bad in [
        &["list", "cli", "--state", "bogus"][..],
        &["list", "cli", "--state", "ready", "--limit", "0"],
        &["list", "cli", "--state", "ready", "--limit", "1001"],
        &["list", "cli", "--state", "ready", "--cursor", "zz"],
        &["list", "cli"],
    ] {
        let (c, err) = code(bad);
        assert_eq!(c, Some(64), "{bad:?}: {err}");
    }
}

#[test]
fn show_and_list_from_the_cli_on_redis() {
    let redis = RedisServer::start();
    show_and_list_from_the_cli("--redis", &redis.url());
}

#[test]
fn show_and_list_from_the_cli_through_a_server() {
    let server = Server::start(None);
    show_and_list_from_the_cli("--server", &server.base);
}

#[test]
fn show_and_list_help_ends_with_exit_codes() {
    for cmd in ["show", "list"] {
        let out = tollgate(&["jobs", cmd, "--help"]);
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.contains("Exit codes: 0 printed"), "{help}");
        assert!(help.contains("65 no such"), "{help}");
    }
}
