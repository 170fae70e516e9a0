//! `tollgate bench http --server URL`: the HTTP API's throughput, enter
//! latency, hand-off latency, and the server's memory under open long-polls.
//! One JSON line per case, like the other benchmarks.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use super::args::BenchArgs;
use super::support::quantile;
use crate::exit;

/// One HTTP/1.1 keep-alive connection driven by hyper's client directly: a
/// light load generator, so that the figures measure the server rather than
/// the client's own overhead (both share this machine's two cores).
struct Conn {
    send: SendRequest<Full<Bytes>>,
    host: Arc<str>,
}

impl Conn {
    async fn open(host: &Arc<str>) -> Result<Conn, String> {
        let stream = tokio::net::TcpStream::connect(&**host)
            .await
            .map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        Ok(Conn {
            send,
            host: host.clone(),
        })
    }

    /// Sends one request and reads the whole answer: status and body.
    async fn call(
        &mut self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value), String> {
        self.send.ready().await.map_err(|e| e.to_string())?;
        let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, &*self.host)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .map_err(|e| e.to_string())?;
        let response = self.send.send_request(request).await.map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).map_err(|e| e.to_string())?
        };
        Ok((status, value))
    }

    async fn post(&mut self, path: &str, body: &Value) -> Result<Value, String> {
        self.call(Method::POST, path, Some(body)).await.map(|(_, v)| v)
    }

    async fn get(&mut self, path: &str) -> Result<Value, String> {
        self.call(Method::GET, path, None).await.map(|(_, v)| v)
    }

    async fn delete(&mut self, path: &str) -> Result<u16, String> {
        self.call(Method::DELETE, path, None).await.map(|(s, _)| s)
    }
}

/// Quantile `q` of latencies in milliseconds, rounded to the microsecond;
/// 0 without samples.
fn percentile(v: &mut [Duration], q: f64) -> f64 {
    quantile(v, q).map_or(0.0, |d| (d.as_secs_f64() * 1_000_000.0).round() / 1000.0)
}

pub(super) async fn run(args: &BenchArgs) -> i32 {
    let Some(server) = &args.server else {
        eprintln!("tollgate: `bench http` needs --server URL of a running `tollgate serve`");
        return exit::USAGE;
    };
    let Some(host) = server.strip_prefix("http://").map(|h| h.trim_end_matches('/')) else {
        eprintln!("tollgate: `bench http` needs an http:// server URL, got {server:?}");
        return exit::USAGE;
    };
    let host: Arc<str> = host.into();
    if let Err(e) = Conn::open(&host).await {
        eprintln!("tollgate: cannot connect to {server}: {e}");
        return exit::UNAVAILABLE;
    }
    let run_id = format!("{:x}", std::process::id());
    if args.flood {
        println!("{}", status_flood(&host, &run_id, args).await);
        return 0;
    }
    println!("{}", healthz(&host, args).await);
    println!("{}", enter_release(&host, &run_id, args).await);
    println!("{}", handoff(&host, &run_id, args).await);
    if args.long_polls > 0 {
        println!("{}", long_polls(&host, &run_id, args).await);
    }
    0
}

/// The ceiling: the requests per second this server answers for its most
/// trivial route (`GET /healthz`) with the same workers and client. An
/// enter+release pair is two requests, so no store can give more than half
/// of this in pairs/s.
async fn healthz(host: &Arc<str>, args: &BenchArgs) -> Value {
    let end = Instant::now() + args.seconds;
    let tasks: Vec<_> = (0..args.workers)
        .map(|_| {
            let host = host.clone();
            tokio::spawn(async move {
                let Ok(mut conn) = Conn::open(&host).await else {
                    return (0u64, 1u64);
                };
                let (mut n, mut errors) = (0, 0);
                while Instant::now() < end {
                    match conn.call(Method::GET, "/healthz", None).await {
                        Ok((200, _)) => n += 1,
                        _ => errors += 1,
                    }
                }
                (n, errors)
            })
        })
        .collect();
    let started = Instant::now();
    let (mut n, mut errors) = (0, 0);
    for t in tasks {
        let (a, b) = t.await.unwrap_or((0, 1));
        n += a;
        errors += b;
    }
    let secs = started.elapsed().as_secs_f64().max(args.seconds.as_secs_f64());
    json!({
        "peer": "tollgate", "case": "http_healthz", "workers": args.workers,
        "requests_per_s": (n as f64 / secs).round(), "n": n, "errors": errors,
    })
}

/// Each worker its own gate and connection: enter (granted at once), then
/// release.
async fn enter_release(host: &Arc<str>, run_id: &str, args: &BenchArgs) -> Value {
    let end = Instant::now() + args.seconds;
    let tasks: Vec<_> = (0..args.workers)
        .map(|w| {
            let host = host.clone();
            let gate = format!("/v1/gates/bench:http:{run_id}:{w}");
            tokio::spawn(async move {
                let (mut enters, mut pairs, mut errors) = (Vec::new(), 0u64, 0u64);
                let Ok(mut conn) = Conn::open(&host).await else {
                    return (enters, pairs, 1);
                };
                let (enter, body) = (format!("{gate}/enter"), json!({"capacity": 1, "queue": false}));
                while Instant::now() < end {
                    let t0 = Instant::now();
                    let Ok(answer) = conn.post(&enter, &body).await else {
                        errors += 1;
                        continue;
                    };
                    enters.push(t0.elapsed());
                    let Some(token) = answer["token"].as_str() else {
                        errors += 1;
                        continue;
                    };
                    match conn.delete(&format!("{gate}/leases/{token}")).await {
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
async fn handoff(host: &Arc<str>, run_id: &str, args: &BenchArgs) -> Value {
    let failed = || json!({"peer": "tollgate", "case": "http_handoff", "errors": 1});
    let gate = format!("/v1/gates/bench:handoff:{run_id}");
    let (Ok(mut a), Ok(mut b)) = (Conn::open(host).await, Conn::open(host).await) else {
        return failed();
    };
    let end = Instant::now() + args.seconds;
    let mut latencies = Vec::new();
    let mut errors = 0u64;
    let Ok(first) = a.post(&format!("{gate}/enter"), &json!({"capacity": 1})).await else {
        return failed();
    };
    let mut holder = first["token"].as_str().unwrap_or_default().to_owned();
    while Instant::now() < end {
        // `a` holds the lease; `b` queues and long-polls; then they swap.
        let Ok(queued) = b.post(&format!("{gate}/enter"), &json!({"capacity": 1})).await else {
            errors += 1;
            break;
        };
        let Some(ticket) = queued["ticket"].as_str().map(str::to_owned) else {
            errors += 1;
            break;
        };
        let waiter = {
            let path = format!("{gate}/tickets/{ticket}?wait_ms=10000");
            tokio::spawn(async move {
                let answer = b.get(&path).await;
                (answer, Instant::now(), b)
            })
        };
        // Let the long-poll arrive and settle before releasing.
        tokio::time::sleep(Duration::from_millis(5)).await;
        let sent = Instant::now();
        if a.delete(&format!("{gate}/leases/{holder}")).await != Ok(200) {
            errors += 1;
        }
        let Ok((answer, at, waiter_conn)) = waiter.await else {
            errors += 1;
            break;
        };
        match answer {
            Ok(answer) if answer["status"] == "granted" => {
                latencies.push(at.saturating_duration_since(sent));
                holder = answer["token"].as_str().unwrap_or_default().to_owned();
            }
            _ => {
                errors += 1;
                break;
            }
        }
        (a, b) = (waiter_conn, a);
    }
    let n = latencies.len();
    json!({
        "peer": "tollgate", "case": "http_handoff",
        "handoff_p50_ms": percentile(&mut latencies, 0.5), "handoff_p99_ms": percentile(&mut latencies, 0.99),
        "n": n, "errors": errors,
    })
}

pub(super) fn rss_mib(pid: u32) -> Option<f64> {
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

/// Holds `--long-polls` long-polls open on one gate, each on a connection
/// of its own, and reads the server's resident memory while they are.
async fn long_polls(host: &Arc<str>, run_id: &str, args: &BenchArgs) -> Value {
    let failed = || json!({"peer": "tollgate", "case": "http_long_polls", "errors": 1});
    let gate = format!("/v1/gates/bench:polls:{run_id}");
    let before = args.server_pid.and_then(rss_mib);
    let Ok(mut control) = Conn::open(host).await else {
        return failed();
    };
    let Ok(holder) = control
        .post(
            &format!("{gate}/enter"),
            &json!({"capacity": 1, "ttl_ms": 600_000}),
        )
        .await
    else {
        return failed();
    };
    let open = Arc::new(AtomicBool::new(true));
    let mut tickets = Vec::with_capacity(args.long_polls);
    let mut errors = 0u64;
    let body = json!({"capacity": 1, "heartbeat_ms": 120_000});
    for _ in 0..args.long_polls {
        match control.post(&format!("{gate}/enter"), &body).await {
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
            let (host, path, open) = (
                host.clone(),
                format!("{gate}/tickets/{t}?wait_ms=60000"),
                open.clone(),
            );
            tokio::spawn(async move {
                let Ok(mut conn) = Conn::open(&host).await else {
                    return false;
                };
                while open.load(Ordering::Relaxed) {
                    if conn.get(&path).await.is_err() {
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
        let _ = control.delete(&format!("{gate}/leases/{token}")).await;
    }
    for t in &tickets {
        let _ = control.delete(&format!("{gate}/tickets/{t}")).await;
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

/// Times enter + leave on `gate` about once a millisecond until `end`:
/// the enter latencies, and how many calls failed.
async fn probe(host: Arc<str>, gate: String, end: Instant) -> (Vec<Duration>, u64) {
    let (mut times, mut errors) = (Vec::new(), 0u64);
    let Ok(mut conn) = Conn::open(&host).await else {
        return (times, 1);
    };
    let (enter, body) = (format!("{gate}/enter"), json!({"capacity": 1, "queue": false}));
    while Instant::now() < end {
        let t0 = Instant::now();
        match conn.post(&enter, &body).await {
            Ok(answer) => {
                times.push(t0.elapsed());
                match answer["token"].as_str() {
                    Some(token) if conn.delete(&format!("{gate}/leases/{token}")).await == Ok(200) => {}
                    _ => errors += 1,
                }
            }
            Err(_) => errors += 1,
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    (times, errors)
}

/// A line of `--line` tickets on one gate, built through the API; then an
/// unrelated gate's enter latency, alone and while `--workers` connections
/// ask for the status of tickets deep in the line as fast as they can.
async fn status_flood(host: &Arc<str>, run_id: &str, args: &BenchArgs) -> Value {
    let gate = format!("/v1/gates/bench:flood:{run_id}");
    let other = format!("/v1/gates/bench:other:{run_id}");
    // Tickets that live through the run without asking.
    let body = json!({"capacity": 1, "ttl_ms": 3_600_000, "heartbeat_ms": 3_600_000});
    let per = args.line.div_ceil(args.workers.max(1) as u64);
    let started = Instant::now();
    let fills: Vec<_> = (0..args.workers.max(1))
        .map(|_| {
            let (host, enter, body) = (host.clone(), format!("{gate}/enter"), body.clone());
            tokio::spawn(async move {
                let mut tickets = Vec::new();
                let Ok(mut conn) = Conn::open(&host).await else {
                    return (tickets, per);
                };
                let mut errors = 0;
                for _ in 0..per {
                    match conn.post(&enter, &body).await {
                        Ok(a) => {
                            if let Some(t) = a["ticket"].as_str() {
                                tickets.push(t.to_owned());
                            }
                        }
                        Err(_) => errors += 1,
                    }
                }
                (tickets, errors)
            })
        })
        .collect();
    let (mut tickets, mut fill_errors) = (Vec::new(), 0);
    for f in fills {
        if let Ok((t, e)) = f.await {
            tickets.extend(t);
            fill_errors += e;
        }
    }
    let fill_secs = started.elapsed().as_secs_f64();
    // The deepest tickets: the ones whose position costs most to count.
    let deep: Arc<Vec<String>> = Arc::new(tickets.split_off(tickets.len().saturating_sub(1_000)));
    let alone = probe(host.clone(), other.clone(), Instant::now() + args.seconds).await;
    let end = Instant::now() + args.seconds;
    let flooding: Vec<_> = (0..args.workers)
        .map(|w| {
            let (host, gate, deep) = (host.clone(), gate.clone(), deep.clone());
            tokio::spawn(async move {
                let Ok(mut conn) = Conn::open(&host).await else {
                    return 0u64;
                };
                let mut n = 0u64;
                let mut i = w;
                while Instant::now() < end && !deep.is_empty() {
                    i = (i + 7) % deep.len();
                    if conn.get(&format!("{gate}/tickets/{}", deep[i])).await.is_ok() {
                        n += 1;
                    }
                }
                n
            })
        })
        .collect();
    let during = probe(host.clone(), other, end).await;
    let mut statuses = 0;
    for f in flooding {
        statuses += f.await.unwrap_or(0);
    }
    let (mut a, mut d) = (alone.0, during.0);
    json!({
        "peer": "tollgate", "case": "http_status_flood", "line": deep.len() + tickets.len(),
        "workers": args.workers, "fill_s": (fill_secs * 10.0).round() / 10.0, "fill_errors": fill_errors,
        "baseline_enter_p50_ms": percentile(&mut a, 0.5), "baseline_enter_p99_ms": percentile(&mut a, 0.99),
        "flood_enter_p50_ms": percentile(&mut d, 0.5), "flood_enter_p99_ms": percentile(&mut d, 0.99),
        "flood_enter_max_ms": percentile(&mut d, 1.0), "flood_enters": d.len(),
        "status_per_s": (statuses as f64 / args.seconds.as_secs_f64()).round(),
        "errors": alone.1 + during.1,
    })
}
