//! Waiting-room benchmarks: a trivial upstream to proxy to, and a waiting
//! line filled to a million to show how joining and status scale and what
//! a waiter costs in Redis.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tollgate::{Entered, Gate, GateOptions, TicketStatus};

use super::args::BenchArgs;
use super::support::{memory_usage, quantile, redis_store};
use crate::exit;

/// Answers every request with 200 "ok" until --seconds have passed.
pub(super) async fn upstream(args: &BenchArgs) -> i32 {
    let Some(addr) = args.listen else {
        eprintln!("tollgate: `bench upstream` needs --listen ADDR");
        return exit::USAGE;
    };
    let listener = match bind(addr).await {
        Ok(l) => l,
        Err(code) => return code,
    };
    println!(
        "bench upstream: listening on http://{}",
        listener.local_addr().unwrap_or(addr)
    );
    serve_for(listener, args.seconds, || {
        hyper::service::service_fn(|_req| async {
            Ok::<_, std::convert::Infallible>(hyper::Response::new(http_body_util::Full::new(
                bytes::Bytes::from_static(b"ok"),
            )))
        })
    })
    .await;
    0
}

/// `bench proxy`: forwards every request on --listen to --upstream with
/// the room's HTTP stack (hyper's server, hyper-util's pooled client,
/// nodelay both ways) and nothing else, until --seconds have passed.
pub(super) async fn bare_proxy(args: &BenchArgs) -> i32 {
    let (Some(addr), Some(to)) = (args.listen, args.upstream.as_deref()) else {
        eprintln!("tollgate: `bench proxy` needs --listen ADDR and --upstream http://HOST:PORT");
        return exit::USAGE;
    };
    let base = to.trim_end_matches('/').to_owned();
    if !base.starts_with("http://") || base.parse::<hyper::Uri>().is_err() {
        eprintln!("tollgate: --upstream {to:?}: give http://host:port");
        return exit::USAGE;
    }
    let listener = match bind(addr).await {
        Ok(l) => l,
        Err(code) => return code,
    };
    let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
    connector.set_nodelay(true);
    let client: hyper_util::client::legacy::Client<_, hyper::body::Incoming> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector);
    println!(
        "bench proxy: listening on http://{}, forwarding to {base}",
        listener.local_addr().unwrap_or(addr)
    );
    serve_for(listener, args.seconds, || {
        let (client, base) = (client.clone(), base.clone());
        hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            let (client, base) = (client.clone(), base.clone());
            async move {
                let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
                if let Ok(uri) = format!("{base}{path}").parse() {
                    *req.uri_mut() = uri;
                }
                let answer = match client.request(req).await {
                    Ok(r) => r.map(http_body_util::Either::Left),
                    Err(_) => {
                        let mut r = hyper::Response::new(http_body_util::Either::Right(
                            http_body_util::Full::new(bytes::Bytes::from_static(b"upstream unreachable")),
                        ));
                        *r.status_mut() = hyper::StatusCode::BAD_GATEWAY;
                        r
                    }
                };
                Ok::<_, std::convert::Infallible>(answer)
            }
        })
    })
    .await;
    0
}

/// Binds a bench server's `addr`, or says why not and gives the exit code.
async fn bind(addr: std::net::SocketAddr) -> Result<tokio::net::TcpListener, i32> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        eprintln!("tollgate: cannot listen on {addr}: {e}");
        exit::UNAVAILABLE
    })
}

/// Serves HTTP/1 on `listener` (nodelay), each connection with a service
/// from `service`, until `seconds` have passed.
async fn serve_for<S, B>(listener: tokio::net::TcpListener, seconds: Duration, service: impl Fn() -> S)
where
    S: hyper::service::Service<hyper::Request<hyper::body::Incoming>, Response = hyper::Response<B>>
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let serve = async {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let service = service();
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    };
    let _ = tokio::time::timeout(seconds, serve).await;
}

/// Quantile `q` of latencies in microseconds, to one decimal; 0 without
/// samples.
fn percentile(v: &mut [Duration], q: f64) -> f64 {
    quantile(v, q).map_or(0.0, |d| (d.as_secs_f64() * 1e7).round() / 10.0)
}

/// Fills one gate's line to each of --sizes waiters (50 tasks joining
/// concurrently), and at each size times 1,000 joins and 1,000 status
/// lookups of random waiters, and reads the line's Redis memory.
pub(super) async fn line(args: &BenchArgs) -> i32 {
    let (url, store) = match redis_store(args, "line").await {
        Ok(found) => found,
        Err(code) => return code,
    };
    let name = format!("bench:line:{:x}", std::process::id());
    // Waiters stay for the whole run: a day-long heartbeat.
    let options = GateOptions {
        ttl: Duration::from_secs(3600),
        heartbeat: Duration::from_secs(86_400),
        auto_renew: false,
        fair: true,
        max_hold: None,
    };
    let gate = match Gate::new(&store, &name, Some(1), options) {
        Ok(g) => Arc::new(g),
        Err(e) => {
            eprintln!("tollgate: {e}");
            return exit::SOFTWARE;
        }
    };
    // One holder, so everyone else queues.
    if !matches!(gate.enter(1, true).await, Ok(Entered::Granted(_))) {
        eprintln!("tollgate: the bench gate was not empty");
        return exit::SOFTWARE;
    }
    let mut tickets: Vec<String> = Vec::new();
    let mut sizes = args.sizes.clone();
    sizes.sort_unstable();
    for size in sizes {
        let missing = size.saturating_sub(tickets.len() as u64);
        let filled = Instant::now();
        let workers = args.workers.max(1) as u64;
        let tasks: Vec<_> = (0..workers)
            .map(|w| {
                let gate = gate.clone();
                let n = missing / workers + u64::from(w < missing % workers);
                tokio::spawn(async move {
                    let mut mine = Vec::with_capacity(n as usize);
                    for _ in 0..n {
                        if let Ok(Entered::Queued { ticket, .. }) = gate.enter(1, true).await {
                            mine.push(ticket);
                        }
                    }
                    mine
                })
            })
            .collect();
        for t in tasks {
            tickets.extend(t.await.unwrap_or_default());
        }
        let fill_secs = filled.elapsed().as_secs_f64();
        // Memory of the line's keys (the line and the per-waiter hash).
        let keys: Vec<String> = [":q", ":p"]
            .iter()
            .map(|suffix| format!("tollgate:gate:{{{name}}}{suffix}"))
            .collect();
        let bytes = memory_usage(url, &keys).await.unwrap_or(0);
        let waiting = tickets.len() as u64;
        // Join latency: 1,000 more, one at a time (they stay in line).
        let mut joins = Vec::with_capacity(1000);
        for _ in 0..1000 {
            let t0 = Instant::now();
            if let Ok(Entered::Queued { ticket, .. }) = gate.enter(1, true).await {
                joins.push(t0.elapsed());
                tickets.push(ticket);
            }
        }
        // Status latency of waiters spread over the line.
        let mut looks = Vec::with_capacity(1000);
        let mut positions_ok = true;
        for i in 0..1000u64 {
            let idx = ((i * 7919) % tickets.len() as u64) as usize;
            let t0 = Instant::now();
            match gate.status(&tickets[idx]).await {
                Ok(TicketStatus::Queued(p)) => {
                    looks.push(t0.elapsed());
                    positions_ok &= p.position >= 1 && p.position <= p.waiting;
                }
                _ => positions_ok = false,
            }
        }
        println!(
            "{}",
            json!({
                "peer": "tollgate", "case": "line_scaling", "store": "redis", "waiting": waiting,
                "fill_joins_per_s": (missing as f64 / fill_secs).round(),
                "join_p50_us": percentile(&mut joins, 0.5), "join_p99_us": percentile(&mut joins, 0.99),
                "status_p50_us": percentile(&mut looks, 0.5), "status_p99_us": percentile(&mut looks, 0.99),
                "positions_valid": positions_ok,
                "line_bytes": bytes, "bytes_per_waiter": (bytes as f64 / waiting.max(1) as f64 * 10.0).round() / 10.0,
            })
        );
    }
    0
}
