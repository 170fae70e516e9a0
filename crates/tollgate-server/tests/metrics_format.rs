//! `/metrics` by the book: a live server (embedded store, and Redis) that
//! has served a gate, a queue with a late job, a rate limit and a waiting
//! room is scraped, and the text is checked by scripts/check-metrics.py
//! (the `prometheus_client` parser plus the rules it does not enforce:
//! HELP and TYPE for every family, histograms as one family with sorted
//! buckets, every family listed in docs/METRICS.md).

mod room_support;
mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::time::Duration;

use room_support::{Visitor, room_config, site, start};
use serde_json::json;
use serve_support::{Server, check_metrics, send};
use support::RedisServer;

const TOKEN: &str = "admin-token-0123456789";

/// The value of the one series named `series` exactly (labels included).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

async fn serve_everything_then_scrape(s: &Server) -> String {
    let c = reqwest::Client::new();
    let v1 = |p: &str| s.url(&format!("/v1{p}"));
    let enter = json!({"capacity": 1, "ttl_ms": 60_000});
    let (st, _) = send(c.post(v1("/gates/title-A/enter")).bearer_auth(TOKEN).json(&enter)).await;
    assert_eq!(st, 200);
    // A job due in 50 ms, claimed after it is due: one promotion, late.
    let (st, _) = send(
        c.post(v1("/queues/mail/jobs"))
            .bearer_auth(TOKEN)
            .json(&json!({"payload": "hi", "delay_ms": 50})),
    )
    .await;
    assert_eq!(st, 201);
    tokio::time::sleep(Duration::from_millis(120)).await;
    let (st, job) = send(c.post(v1("/queues/mail/claim?wait_ms=2000")).bearer_auth(TOKEN)).await;
    assert_eq!(st, 200, "{job}");
    let (st, _) = send(
        c.post(v1("/limits/api/check"))
            .bearer_auth(TOKEN)
            .json(&json!({"key": "k"})),
    )
    .await;
    assert_eq!(st, 200);
    let proxy = s.proxy.clone().expect("room address");
    let mut visitor = Visitor::new("v");
    let page = visitor.get(&c, &proxy, "/page", false).await;
    assert_eq!(page.status, 200);
    s.metrics(Some(TOKEN)).await
}

async fn by_the_book(redis: Option<&str>) {
    let (_seen, upstream, dir) = site().await;
    let config = room_config(upstream, 5, "[limits.api]\nrate = \"10/min\"\n");
    let s = start(&dir, &config, redis);
    let text = serve_everything_then_scrape(&s).await;
    let (ok, said) = check_metrics(&text);
    assert!(ok, "{said}\n\n{text}");
    // What the checker cannot know: the figures are there and true.
    let commit = text
        .lines()
        .find(|l| l.starts_with("tollgate_build_info{"))
        .unwrap_or_else(|| panic!("no tollgate_build_info in\n{text}"));
    assert!(
        commit.contains(concat!("version=\"", env!("CARGO_PKG_VERSION"), "\"")),
        "{commit}"
    );
    assert!(commit.ends_with("} 1"), "{commit}");
    assert!(
        value(&text, "process_resident_memory_bytes").is_some_and(|b| b > 1e6),
        "{text}"
    );
    assert!(
        value(&text, "process_start_time_seconds").is_some_and(|t| t > 1.7e9),
        "{text}"
    );
    assert_eq!(
        value(&text, r#"tollgate_queue_lateness_seconds_count{queue="mail"}"#),
        Some(1.0),
        "{text}"
    );
    // The job was at least 50 ms late: not in the buckets up to 25 ms.
    assert_eq!(
        value(
            &text,
            r#"tollgate_queue_lateness_seconds_bucket{queue="mail",le="0.025"}"#
        ),
        Some(0.0),
        "{text}"
    );
    assert!(
        text.contains("# TYPE tollgate_http_request_duration_seconds histogram"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE tollgate_room_upstream_seconds histogram"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_by_the_book_on_the_embedded_store() {
    by_the_book(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_by_the_book_on_redis() {
    let redis = RedisServer::start();
    by_the_book(Some(&redis.url())).await;
}

/// The checker itself fails on what the old /metrics had: the lateness
/// histogram split into a counter and a gauge family, without HELP, its
/// buckets out of order.
#[test]
fn the_checker_refuses_a_split_histogram() {
    let text = "# TYPE tollgate_queue_lateness_seconds_bucket counter\n\
                tollgate_queue_lateness_seconds_bucket{queue=\"q\",le=\"+Inf\"} 1\n\
                tollgate_queue_lateness_seconds_bucket{queue=\"q\",le=\"0.001\"} 0\n\
                # TYPE tollgate_queue_lateness_seconds_sum gauge\n\
                tollgate_queue_lateness_seconds_sum{queue=\"q\"} 0.2\n";
    let (ok, said) = check_metrics(text);
    assert!(!ok, "{said}");
    assert!(said.contains("no HELP"), "{said}");
    assert!(said.contains("is not in docs/METRICS.md"), "{said}");
    let unsorted = "# HELP tollgate_room_wait_seconds w\n\
                    # TYPE tollgate_room_wait_seconds histogram\n\
                    tollgate_room_wait_seconds_bucket{le=\"1\"} 1\n\
                    tollgate_room_wait_seconds_bucket{le=\"0.5\"} 1\n\
                    tollgate_room_wait_seconds_bucket{le=\"+Inf\"} 1\n\
                    tollgate_room_wait_seconds_sum 0.1\n\
                    tollgate_room_wait_seconds_count 1\n";
    let (ok, said) = check_metrics(unsorted);
    assert!(!ok, "{said}");
    assert!(said.contains("le out of order"), "{said}");
}
