//! The job-queue routes of `tollgate serve`, over real HTTP, on the
//! embedded store and on a real redis-server.

mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use serve_support::{Server, send};
use support::RedisServer;

async fn jobs_over_http(s: &Server) {
    let c = reqwest::Client::new();
    let url = |p: &str| s.url(&format!("/v1/queues/mail{p}"));
    // Push a JSON payload; a duplicate id is kept.
    let (st, p) = send(
        c.post(url("/jobs"))
            .json(&json!({"payload": {"to": "a@example.org"}, "id": "m1"})),
    )
    .await;
    assert_eq!((st, p["result"].as_str()), (201, Some("created")), "{p}");
    let (st, p) = send(
        c.post(url("/jobs"))
            .json(&json!({"payload": "other", "id": "m1"})),
    )
    .await;
    assert_eq!((st, p["result"].as_str()), (200, Some("kept")), "{p}");
    // Claim: the payload comes back as JSON and as base64.
    let (st, j) = send(c.post(url("/claim?lease_ms=5000"))).await;
    assert_eq!(st, 200, "{j}");
    let job = &j["job"];
    assert_eq!(job["id"], "m1");
    assert_eq!(job["payload"]["to"], "a@example.org");
    assert_eq!(job["attempt"], 1);
    let fence = job["fence"].as_u64().expect("fence");
    // Nothing else due: an empty answer.
    assert_eq!(
        send(c.post(url("/claim"))).await.1,
        json!({"job": null, "jobs": []})
    );
    // A wrong fence is refused with 409; the right one acks.
    let (st, e) = send(c.post(url("/jobs/m1/ack")).json(&json!({"fence": fence + 1}))).await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (409, Some("lease_lost")),
        "{e}"
    );
    let (st, _) = send(
        c.post(url("/jobs/m1/extend"))
            .json(&json!({"fence": fence, "lease_ms": 10_000})),
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(
        send(c.post(url("/jobs/m1/ack")).json(&json!({"fence": fence})))
            .await
            .0,
        200
    );

    // A long-poll claim is answered the moment a job is pushed.
    let waiter = {
        let (c, u) = (c.clone(), url("/claim?wait_ms=10000"));
        tokio::spawn(async move {
            let answer = send(c.post(u)).await;
            (answer, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pushed = Instant::now();
    let raw = base64_of(b"\x00\x01binary");
    assert_eq!(
        send(
            c.post(url("/jobs"))
                .json(&json!({"payload_base64": raw, "max_attempts": 1}))
        )
        .await
        .0,
        201
    );
    let ((st, j), at) = waiter.await.expect("waiter");
    assert_eq!(st, 200);
    assert!(
        at.duration_since(pushed) < Duration::from_millis(100),
        "took {:?}",
        at - pushed
    );
    assert_eq!(j["job"]["payload_base64"], raw);
    assert!(j["job"]["payload"].is_null());
    // Its only attempt fails: dead, listed, replayed.
    let id = j["job"]["id"].as_str().expect("id").to_owned();
    let fence = j["job"]["fence"].as_u64().expect("fence");
    let (st, n) = send(
        c.post(url(&format!("/jobs/{id}/nack")))
            .json(&json!({"fence": fence})),
    )
    .await;
    assert_eq!((st, n["result"].as_str()), (200, Some("dead")), "{n}");
    let (_, d) = send(c.get(url("/dead"))).await;
    assert_eq!(d["jobs"][0]["id"], id.as_str());
    assert_eq!(
        send(c.post(url("/dead/replay")).json(&json!({}))).await.1["replayed"],
        1
    );
    let (_, j) = send(c.post(url("/claim"))).await;
    assert_eq!(j["job"]["id"], id.as_str());

    // Cancel and reschedule.
    send(
        c.post(url("/jobs"))
            .json(&json!({"payload": 1, "id": "later", "delay_ms": 60_000})),
    )
    .await;
    let (st, r) = send(
        c.post(url("/jobs/later/reschedule"))
            .json(&json!({"delay_ms": 120_000})),
    )
    .await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(send(c.delete(url("/jobs/later"))).await.1["result"], "cancelled");
    assert_eq!(send(c.delete(url("/jobs/later"))).await.0, 404);
    let (st, e) = send(c.delete(url(&format!("/jobs/{id}")))).await;
    assert_eq!((st, e["error"]["code"].as_str()), (409, Some("job_running")));
    let (_, stats) = send(c.get(url(""))).await;
    assert_eq!(
        (
            stats["in_flight"].as_u64(),
            stats["acked"].as_u64(),
            stats["dead_total"].as_u64()
        ),
        (Some(1), Some(1), Some(1)),
        "{stats}"
    );

    // Bad input: 400 with the error shape.
    for (path, body) in [
        ("/jobs", json!({})),
        ("/jobs", json!({"payload": 1, "payload_base64": "AA=="})),
        ("/jobs", json!({"payload_base64": "not base64!"})),
        ("/jobs", json!({"payload": 1, "id": "has space"})),
        ("/jobs", json!({"payload": 1, "max_attempts": 0})),
        ("/jobs", json!({"payload": 1, "delay_ms": 40_000_000_000u64})),
        (
            "/jobs",
            json!({"payload": 1, "backoff": {"kind": "linear", "base_ms": 1}}),
        ),
        ("/jobs", json!({"payload": 1, "on_duplicate": "merge"})),
        ("/jobs", json!({"payload": 1, "colour": "blue"})),
        ("/jobs/x/ack", json!({})),
    ] {
        let (st, e) = send(c.post(url(path)).json(&body)).await;
        assert_eq!(
            (st, e["error"]["code"].as_str()),
            (400, Some("bad_request")),
            "{path} {body} -> {e}"
        );
    }
    assert_eq!(send(c.post(url("/claim?wait_ms=70000"))).await.0, 400);
    assert_eq!(send(c.post(s.url("/v1/queues/bad%20name/claim"))).await.0, 400);
    // A payload over the queue's limit.
    let big = json!({"payload_base64": base64_of(&vec![0u8; 1_100_000])});
    assert_eq!(send(c.post(url("/jobs")).json(&big)).await.0, 400);
    // Metrics for the queue.
    let text = s.metrics(None).await;
    assert!(
        text.contains(r#"tollgate_queue_acked_total{queue="mail"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"tollgate_queue_in_flight{queue="mail"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"tollgate_queue_lateness_seconds_bucket{queue="mail",le="+Inf"} "#),
        "{text}"
    );
    assert!(
        text.contains(r#"tollgate_queue_lateness_seconds_sum{queue="mail"} "#),
        "{text}"
    );
}

/// Batches over HTTP: push many in one step, claim several, ack several,
/// keep acked jobs and list them.
async fn batches_over_http(s: &Server) {
    let c = reqwest::Client::new();
    let url = |p: &str| s.url(&format!("/v1/queues/bulk{p}"));
    let jobs: Vec<_> = (0..5)
        .map(|i| json!({"payload": i, "id": format!("j{i}")}))
        .collect();
    let mut with_dup = jobs.clone();
    with_dup.push(json!({"payload": "dup", "id": "j0"}));
    let (st, p) = send(c.post(url("/batch")).json(&json!({"jobs": with_dup}))).await;
    assert_eq!(st, 200, "{p}");
    let results: Vec<&str> = p["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["result"].as_str().expect("result"))
        .collect();
    assert_eq!(
        results,
        ["created", "created", "created", "created", "created", "kept"]
    );
    assert_eq!(p["failed"], 0, "{p}");
    // One bad job refuses the whole batch; so do empty and oversized ones.
    let bad = json!({"jobs": [{"payload": 1}, {"payload": 2, "id": ""}]});
    let too_many: Vec<_> = (0..1001).map(|i| json!({"payload": i})).collect();
    for body in [
        bad,
        json!({"jobs": []}),
        json!({"jobs": too_many}),
        json!({"jobs": [{"nope": 1}]}),
    ] {
        let (st, e) = send(c.post(url("/batch")).json(&body)).await;
        assert_eq!(
            (st, e["error"]["code"].as_str()),
            (400, Some("bad_request")),
            "{e}"
        );
    }
    assert_eq!(send(c.get(url(""))).await.1["ready"], 5);

    let (st, j) = send(c.post(url("/claim?max=3"))).await;
    assert_eq!(st, 200, "{j}");
    let claimed = j["jobs"].as_array().expect("jobs").clone();
    let ids: Vec<&str> = claimed.iter().map(|j| j["id"].as_str().expect("id")).collect();
    assert_eq!(ids, ["j0", "j1", "j2"]);
    assert_eq!(j["job"], claimed[0]);
    for bad in ["/claim?max=0", "/claim?max=1001"] {
        assert_eq!(send(c.post(url(bad))).await.0, 400, "{bad}");
    }
    let deliveries: Vec<_> = claimed
        .iter()
        .map(|j| json!({"id": j["id"], "fence": j["fence"]}))
        .chain([json!({"id": "j0", "fence": 1})])
        .collect();
    let keep = json!({"count": 10, "max_age_ms": 60_000});
    let (st, a) = send(
        c.post(url("/ack"))
            .json(&json!({"deliveries": deliveries, "keep": keep})),
    )
    .await;
    assert_eq!((st, &a["acked"]), (200, &json!([true, true, true, false])), "{a}");
    assert_eq!((&a["failed"], a.get("errors")), (&json!(0), None), "{a}");
    let (st, e) = send(c.post(url("/ack")).json(&json!({"deliveries": []}))).await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (400, Some("bad_request")),
        "{e}"
    );
    let bad_keep = json!({"deliveries": [{"id": "j3", "fence": 1}], "keep": {"count": 0, "max_age_ms": 1}});
    assert_eq!(send(c.post(url("/ack")).json(&bad_keep)).await.0, 400);

    // The kept jobs are listed, most recent first, and still dedupe.
    let (st, done) = send(c.get(url("/completed?limit=10"))).await;
    assert_eq!(st, 200, "{done}");
    assert_eq!(done["jobs"].as_array().map(Vec::len), Some(3), "{done}");
    assert_eq!(
        done["jobs"][0]["payload"].as_i64().map(|p| p < 3),
        Some(true),
        "{done}"
    );
    let (_, p) = send(
        c.post(url("/jobs"))
            .json(&json!({"payload": "again", "id": "j1"})),
    )
    .await;
    assert_eq!(p["result"], "kept", "{p}");
    assert_eq!(send(c.get(url("/completed?limit=0"))).await.0, 400);
    // One job acked singly with retention too.
    let (_, j) = send(c.post(url("/claim"))).await;
    let (st, _) = send(
        c.post(s.url(&format!(
            "/v1/queues/bulk/jobs/{}/ack",
            j["job"]["id"].as_str().expect("id")
        )))
        .json(&json!({"fence": j["job"]["fence"], "keep": keep})),
    )
    .await;
    assert_eq!(st, 200);
    let stats = send(c.get(url(""))).await.1;
    assert_eq!(
        (&stats["completed"], &stats["acked"], &stats["ready"]),
        (&json!(4), &json!(4), &json!(1)),
        "{stats}"
    );
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_over_http_on_the_embedded_store() {
    let s = Server::start(None);
    jobs_over_http(&s).await;
    batches_over_http(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_over_http_on_a_cluster() {
    let cluster = tokio::task::spawn_blocking(|| support::RedisCluster::start(3, 0))
        .await
        .expect("cluster");
    let s = Server::start(Some(&cluster.url()));
    jobs_over_http(&s).await;
    batches_over_http(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_over_http_on_redis() {
    let redis = RedisServer::start();
    let s = Server::start(Some(&redis.url()));
    jobs_over_http(&s).await;
    batches_over_http(&s).await;
}

/// `tollgate serve` with `--config` holding `text`; its exit status and
/// standard error, for configurations it must refuse.
fn serve_refuses(redis: &str, text: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, text).expect("config");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["serve", "--listen", "127.0.0.1:0", "--redis", redis, "--config"])
        .arg(&path)
        .env_remove("TOLLGATE_REDIS_URL")
        .env("TOLLGATE_LOG", "warn")
        .output()
        .expect("serve");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A queue configured with `[queues.orders] partitions = 6` on a 3-master
/// cluster: every route works across the partitions, servers that disagree
/// on the count are refused, and with a master down a batch answers per
/// job instead of failing whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_queues_over_http() {
    let mut cluster = tokio::task::spawn_blocking(|| support::RedisCluster::start(3, 0))
        .await
        .expect("cluster");
    for node in &cluster.nodes {
        node.command(&["CONFIG", "SET", "cluster-require-full-coverage", "no"]);
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("tollgate.toml");
    std::fs::write(&config, "[queues.orders]\npartitions = 6\n").expect("config");
    let config = config.display().to_string();
    let s = Server::start_with(Some(&cluster.url()), &["--config", &config]);
    let c = reqwest::Client::new();
    let url = |s: &Server, p: &str| s.url(&format!("/v1/queues/orders{p}"));

    let jobs: Vec<_> = (0..30)
        .map(|i| json!({"payload": i, "id": format!("o{i}")}))
        .collect();
    let (st, p) = send(c.post(url(&s, "/batch")).json(&json!({"jobs": jobs}))).await;
    assert_eq!((st, &p["failed"]), (200, &json!(0)), "{p}");
    let stats = send(c.get(url(&s, ""))).await.1;
    assert_eq!(
        (&stats["partitions"], &stats["ready"]),
        (&json!(6), &json!(30)),
        "{stats}"
    );
    let (st, j) = send(c.post(url(&s, "/claim?max=30"))).await;
    assert_eq!(st, 200, "{j}");
    let claimed = j["jobs"].as_array().expect("jobs").clone();
    assert_eq!(claimed.len(), 30, "claims drain every partition");
    let deliveries: Vec<_> = claimed
        .iter()
        .map(|j| json!({"id": j["id"], "fence": j["fence"]}))
        .collect();
    let (st, a) = send(c.post(url(&s, "/ack")).json(&json!({"deliveries": deliveries}))).await;
    assert_eq!((st, &a["failed"]), (200, &json!(0)), "{a}");
    assert!(
        a["acked"].as_array().expect("acked").iter().all(|f| f == true),
        "{a}"
    );

    // A server without the setting sees a one-partition queue: refused
    // rather than pushing where no worker looks.
    let plain = Server::start(Some(&cluster.url()));
    for (st, e) in [
        send(c.get(url(&plain, ""))).await,
        send(c.post(url(&plain, "/jobs")).json(&json!({"payload": 1}))).await,
    ] {
        assert_eq!(
            (st, e["error"]["code"].as_str()),
            (409, Some("partition_conflict")),
            "{e}"
        );
    }
    drop(plain);
    // Another count refuses to start; so does a count out of range.
    let (code, err) = serve_refuses(&cluster.url(), "[queues.orders]\npartitions = 4\n");
    assert_eq!(code, Some(78), "{err}");
    assert!(err.contains("6 partition(s)"), "{err}");
    for bad in ["partitions = 0", "partitions = 257", "parts = 2"] {
        let (code, err) = serve_refuses(&cluster.url(), &format!("[queues.orders]\n{bad}\n"));
        assert_eq!(code, Some(64), "{bad}: {err}");
    }

    // One master down: its partitions' jobs fail, the rest go through.
    let jobs: Vec<_> = (0..30)
        .map(|i| json!({"payload": i, "id": format!("n{i}")}))
        .collect();
    let (_, j) = send(c.post(url(&s, "/batch")).json(&json!({"jobs": jobs[..20]}))).await;
    assert_eq!(j["failed"], 0, "{j}");
    let (_, j) = send(c.post(url(&s, "/claim?max=20"))).await;
    let claimed = j["jobs"].as_array().expect("jobs").clone();
    assert_eq!(claimed.len(), 20);
    // The queue's first partition (named as the library names it).
    let store = tollgate::Store::redis(&cluster.url()).await.expect("store");
    let part0 = tollgate::JobQueue::partitioned(&store, "orders", 6).expect("queue");
    let part0 = part0.partition_name(0).expect("partition 0");
    let doomed = cluster.master_of(&format!("tollgate:jobs:{{{part0}}}"));
    cluster.nodes[doomed].kill();
    let (st, p) = send(c.post(url(&s, "/batch")).json(&json!({"jobs": jobs[20..]}))).await;
    assert_eq!(st, 200, "{p}");
    let answers = p["jobs"].as_array().expect("jobs");
    let failed = answers.iter().filter(|a| a.get("error").is_some()).count();
    assert_eq!(p["failed"], failed, "{p}");
    assert!(
        failed > 0 && failed < 10,
        "some partitions live on the dead master: {p}"
    );
    for (i, a) in answers.iter().enumerate() {
        assert_eq!(a["id"], format!("n{}", 20 + i), "{a}");
        if let Some(e) = a.get("error") {
            assert_eq!(e["code"], "store_unavailable", "{a}");
        } else {
            assert_eq!(a["result"], "created", "{a}");
        }
    }
    let deliveries: Vec<_> = claimed
        .iter()
        .map(|j| json!({"id": j["id"], "fence": j["fence"]}))
        .collect();
    let (st, a) = send(c.post(url(&s, "/ack")).json(&json!({"deliveries": deliveries}))).await;
    assert_eq!(st, 200, "{a}");
    let acked = a["acked"].as_array().expect("acked");
    let unknown: Vec<usize> = (0..acked.len()).filter(|i| acked[*i].is_null()).collect();
    let listed: Vec<usize> = a["errors"]
        .as_array()
        .map(|e| {
            e.iter()
                .map(|x| x["index"].as_u64().expect("index") as usize)
                .collect()
        })
        .unwrap_or_default();
    assert!(!unknown.is_empty() && unknown.len() < 20, "{a}");
    assert_eq!(unknown, listed, "{a}");
    assert_eq!(a["failed"], unknown.len(), "{a}");
    assert!(acked.iter().filter(|f| !f.is_null()).all(|f| f == true), "{a}");
}

/// Redis loses its data (`FLUSHALL`) under a server configured with
/// `[queues.orders] partitions = 4`: pushes and claims go on over the four
/// partitions, and the stored count comes back by itself at the handle's
/// next re-check (every second on the server), so a server that assumes
/// one partition is refused again instead of stranding jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_queue_survives_a_flushall() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("tollgate.toml");
    std::fs::write(&config, "[queues.orders]\npartitions = 4\n").expect("config");
    let s = Server::start_with(Some(&redis.url()), &["--config", &config.display().to_string()]);
    let plain = Server::start(Some(&redis.url()));
    let c = reqwest::Client::new();
    let url = |s: &Server, p: &str| s.url(&format!("/v1/queues/orders{p}"));
    let push_and_claim = |round: usize| {
        let c = c.clone();
        let (push, claim) = (url(&s, "/batch"), url(&s, "/claim?max=20"));
        async move {
            let jobs: Vec<_> = (0..20)
                .map(|i| json!({"payload": i, "id": format!("r{round}-{i}")}))
                .collect();
            let (st, p) = send(c.post(push).json(&json!({"jobs": jobs}))).await;
            assert_eq!((st, &p["failed"]), (200, &json!(0)), "{p}");
            let (st, j) = send(c.post(claim)).await;
            assert_eq!(st, 200, "{j}");
            let mut ids: Vec<String> = j["jobs"]
                .as_array()
                .expect("jobs")
                .iter()
                .map(|j| j["id"].as_str().expect("id").to_owned())
                .collect();
            ids.sort();
            let mut want: Vec<String> = (0..20).map(|i| format!("r{round}-{i}")).collect();
            want.sort();
            assert_eq!(ids, want, "every job claimed, from its partition");
        }
    };
    push_and_claim(0).await;
    let (st, e) = send(c.get(url(&plain, ""))).await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (409, Some("partition_conflict")),
        "{e}"
    );

    redis.command(&["FLUSHALL"]);
    push_and_claim(1).await;
    let stats = send(c.get(url(&s, ""))).await.1;
    assert_eq!(
        (&stats["partitions"], &stats["in_flight"]),
        (&json!(4), &json!(20)),
        "{stats}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut round = 2;
    loop {
        let (st, e) = send(c.get(url(&plain, ""))).await;
        if st == 409 {
            assert_eq!(e["error"]["code"], "partition_conflict", "{e}");
            break;
        }
        // Until the count is stored again, the plain queue of that name
        // never held anything as far as the store knows.
        assert!(
            st == 200 || (st == 404 && e["error"]["code"] == "queue_not_found"),
            "{st} {e}"
        );
        assert!(
            Instant::now() < deadline,
            "the partition count was not stored again: {e}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
        push_and_claim(round).await;
        round += 1;
    }
}

/// POSTs a JSON body of about `bytes` bytes to `route`, writing it from
/// another task while reading the answer, whatever happens to the write.
async fn post_without_waiting(addr: &str, route: &str, bytes: usize) -> (u16, serde_json::Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut read, mut write) = stream.into_split();
    let body = format!(r#"{{"x":"{}"}}"#, "a".repeat(bytes));
    let head = format!(
        "POST {route} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let writer = tokio::spawn(async move {
        if write.write_all(head.as_bytes()).await.is_ok() {
            let _ = write.write_all(body.as_bytes()).await;
        }
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    // Until the head and the whole JSON body are in (or the server closes).
    loop {
        match tokio::time::timeout(Duration::from_secs(10), read.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => answer.extend_from_slice(&buf[..n]),
            _ => break,
        }
        let text = String::from_utf8_lossy(&answer);
        if let Some((head, rest)) = text.split_once("\r\n\r\n")
            && let Some(len) = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().to_owned())
                })
                .and_then(|v| v.parse::<usize>().ok())
            && rest.len() >= len
        {
            break;
        }
    }
    writer.abort();
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no answer to {route}: {text:?}"));
    (
        status,
        serde_json::from_str(rest).unwrap_or(serde_json::Value::Null),
    )
}

/// Each body-limited route names its own limit in a 413; a batch ack of
/// 1,000 deliveries with ids of the longest length fits its limit; a job's
/// `at_ms` is at most a year ahead, as `delay_ms` is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_limits_per_route_and_run_at_bounds() {
    let s = Server::start(None);
    let c = reqwest::Client::new();
    // Sent by hand: the server answers 413 from Content-Length alone and
    // closes, and a client still writing megabytes then fails on the write
    // (broken pipe) before it reads the answer, which is already here.
    let too_big = |route: &str, bytes: usize| {
        let (addr, route) = (s.base.trim_start_matches("http://").to_owned(), route.to_owned());
        async move { post_without_waiting(&addr, &route, bytes).await }
    };
    for (route, limit) in [
        ("/v1/gates/g/enter", 16 * 1024),
        ("/v1/queues/q/jobs", 1_500_000),
        ("/v1/queues/q/batch", 16 * 1024 * 1024),
        ("/v1/queues/q/ack", 512 * 1024),
    ] {
        let (st, e) = too_big(route, limit).await;
        assert_eq!(
            (st, e["error"]["code"].as_str()),
            (413, Some("payload_too_large")),
            "{route}: {e}"
        );
        let message = e["error"]["message"].as_str().expect("message");
        assert!(message.contains(&format!("{limit} bytes")), "{route}: {message}");
    }
    // 1,000 deliveries whose ids have the longest length (128 bytes), a
    // quarter of them with every character escaped ("\u0041" for "A").
    let id = "A".repeat(128);
    let deliveries: Vec<String> = (0..1000)
        .map(|i| {
            let fence = u64::MAX - i;
            if i % 4 == 0 {
                let escaped: String = id.chars().map(|c| format!("\\u{:04x}", c as u32)).collect();
                format!(r#"{{"id":"{escaped}","fence":{fence}}}"#)
            } else {
                format!(r#"{{"id":"{id}","fence":{fence}}}"#)
            }
        })
        .collect();
    let body = format!(r#"{{"deliveries":[{}]}}"#, deliveries.join(","));
    assert!(body.len() > 300 * 1024, "{}", body.len());
    let (st, a) = send(
        c.post(s.url("/v1/queues/q/ack"))
            .header("content-type", "application/json")
            .body(body),
    )
    .await;
    assert_eq!(
        (st, a["acked"].as_array().map(Vec::len)),
        (200, Some(1000)),
        "{a}"
    );

    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    let year_ms = 365 * 24 * 3600 * 1000;
    for at in [u64::MAX, now_ms + 2 * year_ms, now_ms + year_ms + 60_000] {
        let (st, e) = send(
            c.post(s.url("/v1/queues/q/jobs"))
                .json(&json!({"payload": 1, "at_ms": at})),
        )
        .await;
        assert_eq!(
            (st, e["error"]["code"].as_str()),
            (400, Some("bad_request")),
            "{at}: {e}"
        );
        assert!(
            e["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("a year")),
            "{e}"
        );
    }
    let (st, e) = send(
        c.post(s.url("/v1/queues/q/batch"))
            .json(&json!({"jobs": [{"payload": 1}, {"payload": 2, "at_ms": u64::MAX}]})),
    )
    .await;
    assert_eq!(st, 400, "{e}");
    for (at, due_later) in [
        (now_ms + year_ms - 60_000, true),
        (now_ms + 86_400_000, true),
        (1, false),
    ] {
        let (st, p) = send(
            c.post(s.url("/v1/queues/q/jobs"))
                .json(&json!({"payload": 1, "at_ms": at})),
        )
        .await;
        assert_eq!(st, 201, "{at}: {p}");
        let due = p["due_ms"].as_u64().expect("due");
        assert_eq!(due > now_ms + 60_000, due_later, "{at}: {p}");
    }
}

/// A 16 MiB batch whose payloads are made of many small JSON values is
/// read straight into typed structs (a `serde_json::Value` of it took
/// ~280 MB): the server's peak memory grows by a small multiple of the
/// body, not 17 times it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_batch_costs_about_its_size_in_memory() {
    let s = Server::start(None);
    let c = reqwest::Client::new();
    let peak_mb = || {
        let status = std::fs::read_to_string(format!("/proc/{}/status", s.child.id())).expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .expect("VmHWM")
            / 1024
    };
    assert_eq!(
        send(c.post(s.url("/v1/queues/warm/jobs")).json(&json!({"payload": 1})))
            .await
            .0,
        201
    );
    let before = peak_mb();
    let per_job = (16 * 1024 * 1024 - 2000) / 1000;
    let payload = format!("[{}]", vec!["1"; (per_job - 40) / 2].join(","));
    let jobs: Vec<String> = (0..1000).map(|_| format!(r#"{{"payload":{payload}}}"#)).collect();
    let body = format!(r#"{{"jobs":[{}]}}"#, jobs.join(","));
    assert!(body.len() > 15 * 1024 * 1024 && body.len() <= 16 * 1024 * 1024);
    let (st, p) = send(
        c.post(s.url("/v1/queues/q/batch"))
            .header("content-type", "application/json")
            .body(body),
    )
    .await;
    assert_eq!((st, &p["failed"]), (200, &json!(0)));
    let after = peak_mb();
    eprintln!("peak RSS {before} MB before a 16 MiB batch, {after} MB after");
    // The body, the stored payloads (the embedded store keeps them), and
    // slack; a Value tree of it was ~280 MB.
    assert!(after - before < 120, "peak RSS grew {before} -> {after} MB");
    // The payload is stored as sent (without whitespace).
    let (_, j) = send(c.post(s.url("/v1/queues/q/claim"))).await;
    assert_eq!(
        j["job"]["payload"].as_array().map(Vec::len),
        Some((per_job - 40) / 2)
    );
}

/// The most an answer of `…/dead` or `…/completed` may take here: its
/// jobs' stored bytes stop at 2 MiB plus one job (256 KiB, `tollgate::
/// JOB_LISTING_BYTES`), each payload written twice (JSON, null for these,
/// and base64: 4/3 of it), plus the other fields, under 300 bytes a job.
const ANSWER_BOUND: usize = (2 * 1024 * 1024 + 256 * 1024) * 7 / 3 + 16 * 300;

/// 16 dead and 16 completed jobs of 256 KiB each: a page of 10,000 holds
/// only the jobs up to 2 MiB, says it is truncated and stays under
/// ANSWER_BOUND; the others are read whole by id.
async fn big_listings_are_bounded(s: &Server) {
    let c = reqwest::Client::new();
    let url = |p: &str| s.url(&format!("/v1/queues/big{p}"));
    let payload = |i: usize| base64_of(&[i as u8; 256 * 1024]);
    for i in 0..32 {
        let body = json!({"payload_base64": payload(i), "id": format!("j{i:02}"), "max_attempts": 1});
        assert_eq!(send(c.post(url("/jobs")).json(&body)).await.0, 201);
    }
    let (st, claimed) = send(c.post(url("/claim?max=32"))).await;
    assert_eq!(st, 200);
    for job in claimed["jobs"].as_array().expect("jobs") {
        let (id, fence) = (job["id"].as_str().expect("id"), &job["fence"]);
        let (route, body) = if id < "j16" {
            ("nack", json!({"fence": fence, "error": "boom"}))
        } else {
            (
                "ack",
                json!({"fence": fence, "keep": {"count": 100, "max_age_ms": 3_600_000}}),
            )
        };
        assert_eq!(
            send(c.post(url(&format!("/jobs/{id}/{route}"))).json(&body))
                .await
                .0,
            200
        );
    }
    for listing in ["/dead?limit=10000", "/completed?limit=10000"] {
        let r = c.get(url(listing)).send().await.expect("listing");
        assert_eq!(r.status().as_u16(), 200);
        let text = r.text().await.expect("body");
        assert!(text.len() <= ANSWER_BOUND, "{listing}: {} bytes", text.len());
        let v: serde_json::Value = serde_json::from_str(&text).expect("json");
        let n = v["jobs"].as_array().expect("jobs").len();
        assert_eq!((n, &v["truncated"]), (8, &json!(true)), "{listing}");
    }
    let (st, small) = send(c.get(url("/dead?limit=2"))).await;
    assert_eq!((st, &small["truncated"]), (200, &json!(false)));
    // Every job is read whole by its id.
    let (st, job) = send(c.get(url("/jobs/j15"))).await;
    assert_eq!((st, job["state"].as_str()), (200, Some("dead")), "{job}");
    assert_eq!(job["payload_base64"], payload(15));
    assert_eq!(
        (&job["payload"], &job["payload_truncated"]),
        (&json!(null), &json!(true))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_listings_are_bounded_on_both_stores() {
    let redis = RedisServer::start();
    for s in [Server::start(None), Server::start(Some(&redis.url()))] {
        big_listings_are_bounded(&s).await;
    }
}
