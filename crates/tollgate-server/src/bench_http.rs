//! `tollgate bench http --server URL`: the HTTP API's throughput, enter
//! latency, hand-off latency, and the server's memory under open long-polls.
//! One JSON line per case, like the other benchmarks.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::cli::BenchArgs;
use crate::exit;

struct Http {
    client: reqwest::Client,
    base: String,
}

impl Http {
    async fn post(&self, path: &str, body: &Value) -> Result<Value, String> {
        let resp = self
            .client
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        resp.json().await.map_err(|e| e.to_string())
    }

    async fn get(&self, path: &str) -> Result<Value, String> {
        let resp = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        resp.json().await.map_err(|e| e.to_string())
    }

    async fn delete(&self, path: &str) -> Result<u16, String> {
        let resp = self
            .client
            .delete(format!("{}{path}", self.base))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        Ok(resp.status().as_u16())
    }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1_000_000.0).round() / 1000.0
}

fn percentile(v: &mut [Duration], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    ms(v[((v.len() as f64 - 1.0) * q).round() as usize])
}

pub(crate) async fn run(args: &BenchArgs) -> i32 {
    let Some(server) = &args.server else {
        eprintln!("tollgate: `bench http` needs --server URL of a running `tollgate serve`");
        return exit::USAGE;
    };
    let client = match reqwest::Client::builder()
        .pool_max_idle_per_host(args.workers.max(64))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tollgate: {e}");
            return exit::SOFTWARE;
        }
    };
    let http = Arc::new(Http {
        client,
        base: server.trim_end_matches('/').to_owned(),
    });
    let run_id = format!("{:x}", std::process::id());
    for line in [
        enter_release(&http, &run_id, args).await,
        handoff(&http, &run_id, args).await,
    ] {
        println!("{line}");
    }
    if args.long_polls > 0 {
        println!("{}", long_polls(&http, &run_id, args).await);
    }
    0
}

/// Each worker its own gate: enter (granted at once) then release.
async fn enter_release(http: &Arc<Http>, run_id: &str, args: &BenchArgs) -> Value {
    let end = Instant::now() + args.seconds;
    let tasks: Vec<_> = (0..args.workers)
        .map(|w| {
            let http = http.clone();
            let gate = format!("/v1/gates/bench:http:{run_id}:{w}");
            tokio::spawn(async move {
                let (mut enters, mut pairs, mut errors) = (Vec::new(), 0u64, 0u64);
                let body = json!({"capacity": 1, "queue": false});
                while Instant::now() < end {
                    let t0 = Instant::now();
                    let Ok(answer) = http.post(&format!("{gate}/enter"), &body).await else {
                        errors += 1;
                        continue;
                    };
                    enters.push(t0.elapsed());
                    let Some(token) = answer["token"].as_str() else {
                        errors += 1;
                        continue;
                    };
                    match http.delete(&format!("{gate}/leases/{token}")).await {
                        Ok(200) => pairs += 1,
                        _ => errors += 1,
                    }
                }
                (enters, pairs, errors)
            })
        })
        .collect();
    let started = Instant::now();
    let (mut enters, mut pairs, mut errors) = (Vec::new(), 0, 0);
    for t in tasks {
        if let Ok((e, p, x)) = t.await {
            enters.extend(e);
            pairs += p;
            errors += x;
        }
    }
    let secs = started.elapsed().as_secs_f64().max(args.seconds.as_secs_f64());
    json!({
        "peer": "tollgate", "case": "http_enter_release", "workers": args.workers,
        "pairs_per_s": (pairs as f64 / secs).round(),
        "enter_p50_ms": percentile(&mut enters, 0.5), "enter_p99_ms": percentile(&mut enters, 0.99),
        "n": pairs, "errors": errors,
    })
}

/// Two clients pass one lock back and forth: one holds, the other waits in
/// a long-poll; the time from the release to the long-poll's answer is the
/// hand-off latency.
async fn handoff(http: &Arc<Http>, run_id: &str, args: &BenchArgs) -> Value {
    let gate = format!("/v1/gates/bench:handoff:{run_id}");
    let end = Instant::now() + args.seconds;
    let mut latencies = Vec::new();
    let mut errors = 0u64;
    let Ok(first) = http.post(&format!("{gate}/enter"), &json!({"capacity": 1})).await else {
        return json!({"peer": "tollgate", "case": "http_handoff", "errors": 1});
    };
    let mut holder = first["token"].as_str().unwrap_or_default().to_owned();
    while Instant::now() < end {
        let Ok(queued) = http.post(&format!("{gate}/enter"), &json!({"capacity": 1})).await else {
            errors += 1;
            continue;
        };
        let Some(ticket) = queued["ticket"].as_str().map(str::to_owned) else {
            errors += 1;
            break;
        };
        let waiter = {
            let (http, path) = (http.clone(), format!("{gate}/tickets/{ticket}?wait_ms=10000"));
            tokio::spawn(async move {
                let answer = http.get(&path).await;
                (answer, Instant::now())
            })
        };
        // Let the long-poll arrive and settle before releasing.
        tokio::time::sleep(Duration::from_millis(5)).await;
        let sent = Instant::now();
        if http.delete(&format!("{gate}/leases/{holder}")).await != Ok(200) {
            errors += 1;
        }
        match waiter.await {
            Ok((Ok(answer), at)) if answer["status"] == "granted" => {
                latencies.push(at.saturating_duration_since(sent));
                holder = answer["token"].as_str().unwrap_or_default().to_owned();
            }
            _ => {
                errors += 1;
                break;
            }
        }
    }
    let n = latencies.len();
    json!({
        "peer": "tollgate", "case": "http_handoff",
        "handoff_p50_ms": percentile(&mut latencies, 0.5), "handoff_p99_ms": percentile(&mut latencies, 0.99),
        "n": n, "errors": errors,
    })
}

fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some((kb / 1024.0 * 10.0).round() / 10.0)
}

/// Holds `--long-polls` long-polls open on one gate and reads the server's
/// resident memory while they are.
async fn long_polls(http: &Arc<Http>, run_id: &str, args: &BenchArgs) -> Value {
    let gate = format!("/v1/gates/bench:polls:{run_id}");
    let before = args.server_pid.and_then(rss_mib);
    let Ok(holder) = http
        .post(
            &format!("{gate}/enter"),
            &json!({"capacity": 1, "ttl_ms": 600_000}),
        )
        .await
    else {
        return json!({"peer": "tollgate", "case": "http_long_polls", "errors": 1});
    };
    let open = Arc::new(AtomicBool::new(true));
    let mut tickets = Vec::with_capacity(args.long_polls);
    let mut errors = 0u64;
    for _ in 0..args.long_polls {
        match http
            .post(
                &format!("{gate}/enter"),
                &json!({"capacity": 1, "heartbeat_ms": 120_000}),
            )
            .await
        {
            Ok(a) => match a["ticket"].as_str() {
                Some(t) => tickets.push(t.to_owned()),
                None => errors += 1,
            },
            Err(_) => errors += 1,
        }
    }
    let polls: Vec<_> = tickets
        .iter()
        .map(|t| {
            let (http, path, open) = (
                http.clone(),
                format!("{gate}/tickets/{t}?wait_ms=60000"),
                open.clone(),
            );
            tokio::spawn(async move {
                while open.load(Ordering::Relaxed) {
                    if http.get(&path).await.is_err() {
                        return false;
                    }
                }
                true
            })
        })
        .collect();
    // Give every long-poll time to connect and park on the server.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let during = args.server_pid.and_then(rss_mib);
    open.store(false, Ordering::Relaxed);
    if let Some(token) = holder["token"].as_str() {
        let _ = http.delete(&format!("{gate}/leases/{token}")).await;
    }
    for t in &tickets {
        let _ = http.delete(&format!("{gate}/tickets/{t}")).await;
    }
    let mut failed = 0;
    for p in polls {
        if !matches!(p.await, Ok(true)) {
            failed += 1;
        }
    }
    json!({
        "peer": "tollgate", "case": "http_long_polls", "long_polls": tickets.len(),
        "server_rss_mib_before": before, "server_rss_mib_with_polls_open": during,
        "errors": errors + failed,
    })
}
