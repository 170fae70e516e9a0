//! `/metrics` answers within its deadline whatever the store does: a
//! server tracking 1,000 gates and a queue on a real redis-server, which is
//! then frozen (SIGSTOP).

mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use nix::sys::signal::{Signal, kill};
use serve_support::{Server, send};
use support::RedisServer;

/// Freezes a redis-server until dropped.
struct Frozen(nix::unistd::Pid);

impl Frozen {
    fn new(redis: &RedisServer) -> Frozen {
        kill(redis.pid(), Signal::SIGSTOP).expect("SIGSTOP");
        Frozen(redis.pid())
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = kill(self.0, Signal::SIGCONT);
    }
}

/// The value of the series `name` (exactly, labels included), if present.
fn value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

async fn scrape(s: &Server) -> (Duration, String) {
    let started = Instant::now();
    let text = reqwest::Client::new()
        .get(s.url("/metrics"))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .expect("metrics answered")
        .text()
        .await
        .expect("text");
    (started.elapsed(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_answer_within_the_deadline_with_redis_frozen() {
    let redis = RedisServer::start();
    let s = Server::start(Some(&redis.url()));
    let c = reqwest::Client::new();
    // 1,000 tracked gates (a capacity gives each state, which keeps it
    // tracked: a gate the store has no state for frees its place) and a
    // queue.
    let statuses: Vec<u16> = futures_util::stream::iter(0..1000)
        .map(|i| {
            let req = c
                .put(s.url(&format!("/v1/gates/g{i}/capacity")))
                .json(&serde_json::json!({"capacity": 2}));
            async move { send(req).await.0 }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    assert!(statuses.iter().all(|&st| st == 200), "{statuses:?}");
    // A queue with a job (one the store has forgotten frees its place).
    let pushed = send(
        c.post(s.url("/v1/queues/q/jobs"))
            .json(&serde_json::json!({"payload": "x"})),
    )
    .await;
    assert_eq!(pushed.0, 201, "{}", pushed.1);
    assert_eq!(send(c.get(s.url("/v1/queues/q"))).await.0, 200);

    let (took, text) = scrape(&s).await;
    assert!(text.contains(r#"tollgate_gate_capacity{gate="g999"}"#), "{text}");
    assert_eq!(
        value(&text, "tollgate_scrape_timeouts_total"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        value(&text, r#"tollgate_scrape_errors_total{source="gate"}"#),
        Some(0.0),
        "{text}"
    );
    eprintln!("scrape of 1,000 gates and a queue, Redis up: {took:?}");

    let frozen = Frozen::new(&redis);
    let (took, text) = scrape(&s).await;
    eprintln!("scrape with Redis frozen: {took:?}");
    // The deadline (1 s by default) plus slack for a busy machine.
    assert!(took < Duration::from_millis(2500), "{took:?}");
    assert_eq!(
        value(&text, "tollgate_scrape_timeouts_total"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(&text, r#"tollgate_scrape_errors_total{source="gate"}"#),
        Some(1000.0),
        "{text}"
    );
    assert_eq!(
        value(&text, r#"tollgate_scrape_errors_total{source="queue"}"#),
        Some(1.0),
        "{text}"
    );
    let duration = value(&text, "tollgate_scrape_duration_seconds").expect("duration");
    assert!((0.9..2.5).contains(&duration), "{duration}");
    // The figures gathered before are still there (stale, and said so).
    assert!(text.contains(r#"tollgate_gate_capacity{gate="g999"}"#));
    drop(frozen);

    // Thawed: scrapes are whole again.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (_, text) = scrape(&s).await;
        let errors = value(&text, r#"tollgate_scrape_errors_total{source="gate"}"#);
        let (_, again) = scrape(&s).await;
        if value(&again, r#"tollgate_scrape_errors_total{source="gate"}"#) == errors {
            break;
        }
        assert!(Instant::now() < deadline, "scrapes did not recover: {again}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `--metrics-timeout` sets the deadline; out of range is refused (64).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_deadline_is_configurable() {
    let redis = RedisServer::start();
    let s = Server::start_with(Some(&redis.url()), &["--metrics-timeout", "200ms"]);
    assert_eq!(
        send(reqwest::Client::new().get(s.url("/v1/gates/g"))).await.0,
        200
    );
    let frozen = Frozen::new(&redis);
    let (took, text) = scrape(&s).await;
    assert!(took < Duration::from_millis(1500), "{took:?}");
    assert_eq!(
        value(&text, "tollgate_scrape_timeouts_total"),
        Some(1.0),
        "{text}"
    );
    drop(frozen);
    for bad in ["0ms", "2h"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["serve", "--listen", "127.0.0.1:0", "--metrics-timeout", bad])
            .env_remove("TOLLGATE_REDIS_URL")
            .output()
            .expect("serve");
        assert_eq!(out.status.code(), Some(64), "{bad}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("metrics"));
    }
}
