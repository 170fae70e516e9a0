//! `tollgate bench listing`: paging through --keys gates on Redis, 100 a
//! page, as the console and `GET /v1/gates` do. Each gate holds a lease,
//! so every page also reads 100 gates' figures. One JSON line per way of
//! listing: through the library and, with --server, through the HTTP API
//! of a `tollgate serve` on the same Redis.

use std::time::{Duration, Instant};

use serde::Serialize;
use tollgate::{Gate, GateOptions, Lease, Store};

use super::args::BenchArgs;
use super::support::{each_worker, micros, percentile_ms, redis_store};
use crate::exit;

/// Names per page: the console's page size.
const PAGE: usize = 100;
/// How long the gates' leases last, should the bench die before releasing.
const HOLD: Duration = Duration::from_secs(300);

#[derive(Debug, Serialize)]
struct Report {
    peer: &'static str,
    case: &'static str,
    via: &'static str,
    store: &'static str,
    gates: usize,
    page_size: usize,
    /// Whole passes over every gate.
    passes: u64,
    pages: u64,
    /// Latency of one page, names and figures.
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    /// Gates seen per pass (each pass must see every one exactly once).
    seen_per_pass: usize,
    errors: u64,
}

pub(super) async fn run(args: &BenchArgs) -> i32 {
    let (_, store) = match redis_store(args, "listing").await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let count = args.keys;
    if count == 0 || count > 1_000_000 {
        eprintln!("tollgate: --keys (the number of gates) must be between 1 and 1000000");
        return exit::USAGE;
    }
    let prefix = format!("bench-list-{:x}-", std::process::id());
    eprintln!("tollgate: creating {count} gates under {prefix:?}");
    let leases = match fill(&store, &prefix, count, args.workers).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("tollgate: cannot create the gates: {e}");
            return exit::UNAVAILABLE;
        }
    };
    let mut code = 0;
    let library = measure(args.seconds, |cursor| {
        let (store, prefix) = (&store, &prefix);
        async move {
            let page = store
                .list_gates(prefix, cursor.as_deref(), PAGE)
                .await
                .map_err(|e| e.to_string())?;
            Ok((page.items.len(), page.next))
        }
    })
    .await;
    code |= print(report("library", &store, count, library));
    if let Some(server) = args.server.as_deref() {
        let http = reqwest::Client::new();
        let base = server.trim_end_matches('/').to_owned();
        let token = std::env::var("TOLLGATE_TOKEN").ok();
        let api = measure(args.seconds, |cursor| {
            let (http, base, prefix, token) = (&http, &base, &prefix, &token);
            async move { http_page(http, base, prefix, cursor, token.as_deref()).await }
        })
        .await;
        code |= print(report("http", &store, count, api));
    }
    // Release in parallel; what fails expires with its lease.
    let leases = std::sync::Arc::new(tokio::sync::Mutex::new(leases));
    each_worker(args.workers, |_| {
        let leases = leases.clone();
        async move {
            loop {
                let Some(lease) = leases.lock().await.pop() else {
                    break;
                };
                let _ = lease.release().await;
            }
        }
    })
    .await;
    code
}

/// Creates `count` gates named `prefix` + a number, each with a lease
/// held (capacity 2, so each shows one holder and one free permit).
async fn fill(store: &Store, prefix: &str, count: usize, workers: usize) -> Result<Vec<Lease>, String> {
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let results = each_worker(workers.clamp(1, 64), |_| {
        let (store, prefix, next) = (store.clone(), prefix.to_owned(), next.clone());
        async move {
            let mut held = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= count {
                    return Ok(held);
                }
                let gate = Gate::new(
                    &store,
                    &format!("{prefix}{i:07}"),
                    Some(2),
                    GateOptions::default(),
                )
                .map_err(|e| e.to_string())?;
                match gate.acquire(1, HOLD).await {
                    Ok(Some(lease)) => held.push(lease),
                    Ok(None) => return Err(format!("gate {i} was full")),
                    Err(e) => return Err(e.to_string()),
                }
            }
        }
    })
    .await;
    let mut leases = Vec::with_capacity(count);
    for r in results {
        leases.extend(r.map_err(|e| e.to_string())??);
    }
    Ok(leases)
}

/// What paging answered: each page's time, passes, the gates each pass
/// saw, errors.
struct Pages {
    page_us: Vec<u32>,
    passes: u64,
    seen_per_pass: usize,
    errors: u64,
}

/// Pages through the gates with `page(cursor)` (items on the page, next
/// cursor) for `seconds`, and at least one whole pass.
async fn measure<F, Fut>(seconds: Duration, mut page: F) -> Pages
where
    F: FnMut(Option<String>) -> Fut,
    Fut: std::future::Future<Output = Result<(usize, Option<String>), String>>,
{
    let end = Instant::now() + seconds;
    let mut out = Pages {
        page_us: Vec::new(),
        passes: 0,
        seen_per_pass: usize::MAX,
        errors: 0,
    };
    let (mut cursor, mut seen) = (None, 0);
    loop {
        let t0 = Instant::now();
        match page(cursor.take()).await {
            Ok((n, next)) => {
                out.page_us.push(micros(t0.elapsed()));
                seen += n;
                cursor = next;
            }
            Err(e) => {
                out.errors += 1;
                eprintln!("tollgate: a page failed: {e}");
                if out.errors > 10 {
                    break;
                }
            }
        }
        if cursor.is_none() {
            out.passes += 1;
            out.seen_per_pass = out.seen_per_pass.min(seen);
            seen = 0;
            if Instant::now() >= end {
                break;
            }
        }
    }
    if out.passes == 0 {
        out.seen_per_pass = 0;
    }
    out
}

async fn http_page(
    http: &reqwest::Client,
    base: &str,
    prefix: &str,
    cursor: Option<String>,
    token: Option<&str>,
) -> Result<(usize, Option<String>), String> {
    let mut query = vec![("prefix", prefix.to_owned()), ("limit", PAGE.to_string())];
    if let Some(c) = cursor {
        query.push(("cursor", c));
    }
    let url =
        reqwest::Url::parse_with_params(&format!("{base}/v1/gates"), &query).map_err(|e| e.to_string())?;
    let mut req = http.get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let response = req.send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    let body: serde_json::Value = response.json().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {body}"));
    }
    let n = body["gates"].as_array().map_or(0, Vec::len);
    Ok((n, body["next"].as_str().map(str::to_owned)))
}

fn report(via: &'static str, store: &Store, gates: usize, mut p: Pages) -> Report {
    Report {
        peer: "tollgate",
        case: "list_gates",
        via,
        store: store.kind(),
        gates,
        page_size: PAGE,
        passes: p.passes,
        pages: p.page_us.len() as u64,
        p50_ms: percentile_ms(&mut p.page_us, 0.50),
        p99_ms: percentile_ms(&mut p.page_us, 0.99),
        max_ms: percentile_ms(&mut p.page_us, 1.0),
        seen_per_pass: p.seen_per_pass,
        errors: p.errors,
    }
}

/// Prints `r` as one JSON line; a failed pass or a pass that did not see
/// every gate exits non-zero, so a script cannot mistake it for a figure.
fn print(r: Report) -> i32 {
    match serde_json::to_string(&r) {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("tollgate: {e}");
            return exit::SOFTWARE;
        }
    }
    if r.errors > 0 || r.seen_per_pass != r.gates {
        eprintln!(
            "tollgate: listing {} saw {} of {} gates per pass, {} errors",
            r.via, r.seen_per_pass, r.gates, r.errors
        );
        return exit::SOFTWARE;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn measure_counts_whole_passes_and_the_fewest_seen() {
        // Three pages of 100, 100, 50, and no time left after the first pass.
        let mut calls = 0;
        let p = measure(Duration::ZERO, |cursor| {
            calls += 1;
            let answer = match cursor.as_deref() {
                None => Ok((100, Some("a".to_owned()))),
                Some("a") => Ok((100, Some("b".to_owned()))),
                _ => Ok((50, None)),
            };
            async move { answer }
        })
        .await;
        assert_eq!((p.passes, p.seen_per_pass, p.errors, calls), (1, 250, 0, 3));
        assert_eq!(p.page_us.len(), 3);
    }
}
