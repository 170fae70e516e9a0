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
