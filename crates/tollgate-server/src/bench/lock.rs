//! `tollgate bench lock|semaphore`: throughput, latency and fairness of
//! locks and semaphores through the library, one JSON line.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use tollgate::{Gate, GateOptions};

use super::args::{BenchArgs, BenchTarget};
use super::support::{
    RedisUsage, cpu_seconds, each_worker, micros, percentile_ms, redis_usage, round3, store_for,
};
use crate::exit;

#[derive(Debug, Serialize)]
struct Report {
    peer: &'static str,
    case: &'static str,
    store: String,
    workers: usize,
    seconds: f64,
    /// Acquire+release pairs (critical sections) per second.
    ops_per_s: f64,
    /// Store operations per second: each acquire and each release counts one.
    store_ops_per_s: f64,
    /// Latency of a whole acquire+release pair.
    p50_ms: f64,
    p99_ms: f64,
    /// Latency of the acquire alone (including any wait in line).
    acquire_p50_ms: f64,
    acquire_p99_ms: f64,
    /// Latency of the release alone (on a non-fair handle, a pass).
    release_p50_ms: f64,
    release_p99_ms: f64,
    n: u64,
    errors: u64,
    max_concurrent_holders: usize,
    per_worker_min: u64,
    per_worker_max: u64,
    /// Redis's work per critical section (acquire+release pair), from its
    /// `INFO` before and after (standalone Redis only; absent otherwise):
    /// CPU microseconds, script invocations, and the commands they ran
    /// (plus any sent directly, such as pub/sub).
    redis_cpu_us_per_op: Option<f64>,
    redis_scripts_per_op: Option<f64>,
    redis_calls_per_op: Option<f64>,
    /// This process's CPU (all workers) per critical section.
    client_cpu_us_per_op: f64,
    /// The runtime the workers ran on (`--threads`, `--single-thread`).
    runtime: String,
    /// The durable embedded store (--data-dir): log records and `write`
    /// calls per critical section over the whole run (warm-up included),
    /// and its syncs.
    #[serde(skip_serializing_if = "Option::is_none")]
    log_records_per_op: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    log_writes_per_op: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fsyncs: Option<u64>,
}

struct Worker {
    pairs: u64,
    errors: u64,
    pair_us: Vec<u32>,
    acquire_us: Vec<u32>,
    release_us: Vec<u32>,
}

/// `tollgate bench lock|semaphore`: the dispatcher sends only these two
/// targets here.
pub(super) async fn run(args: &BenchArgs) -> i32 {
    let (case, capacity) = match (args.target, args.contended, args.non_fair) {
        (BenchTarget::Lock, false, false) => ("mutex_uncontended", 1),
        (BenchTarget::Lock, false, true) => ("mutex_uncontended_non_fair", 1),
        (BenchTarget::Lock, true, false) => ("mutex_contended", 1),
        (BenchTarget::Lock, true, true) => ("mutex_contended_non_fair", 1),
        (_, _, false) => ("semaphore_contended", args.limit),
        (_, _, true) => ("semaphore_contended_non_fair", args.limit),
    };
    let store = match store_for(args).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    if capacity == 0 {
        eprintln!("tollgate: --limit must be at least 1");
        return exit::USAGE;
    }
    let shared = !case.starts_with("mutex_uncontended");
    let options = GateOptions {
        fair: !args.non_fair,
        ..GateOptions::default()
    };
    let run_id = format!(
        "{:x}",
        std::process::id() ^ Instant::now().elapsed().subsec_nanos()
    );
    let mut gates = Vec::with_capacity(args.workers);
    for w in 0..args.workers {
        let name = if shared {
            format!("bench:{case}:{run_id}")
        } else {
            format!("bench:{case}:{run_id}:{w}")
        };
        match Gate::new(&store, &name, Some(capacity), options.clone()) {
            Ok(g) => gates.push(g),
            Err(e) => {
                eprintln!("tollgate: {e}");
                return exit::USAGE;
            }
        }
    }

    let holders = Arc::new(AtomicUsize::new(0));
    let max_holders = Arc::new(AtomicUsize::new(0));
    // The figures cover what starts after the warm-up; the counters are
    // read then, beside the running workers.
    let measure_from = Instant::now() + args.warmup;
    let end = measure_from + args.seconds;
    let before = if args.warmup.is_zero() {
        let now = counters(args.redis.as_deref()).await;
        tokio::spawn(async move { now })
    } else {
        let url = args.redis.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(measure_from.into()).await;
            counters(url.as_deref()).await
        })
    };
    let results = each_worker(args.workers, |w| {
        let (gate, holders, max_holders) = (gates[w].clone(), holders.clone(), max_holders.clone());
        async move {
            let mut w = Worker {
                pairs: 0,
                errors: 0,
                pair_us: Vec::new(),
                acquire_us: Vec::new(),
                release_us: Vec::new(),
            };
            while Instant::now() < end {
                let t0 = Instant::now();
                let lease = match gate.acquire(1, Duration::from_secs(30)).await {
                    Ok(Some(l)) => l,
                    Ok(None) | Err(_) => {
                        w.errors += u64::from(t0 >= measure_from);
                        continue;
                    }
                };
                let t1 = Instant::now();
                let now_holding = holders.fetch_add(1, Ordering::SeqCst) + 1;
                max_holders.fetch_max(now_holding, Ordering::SeqCst);
                // The critical section: let every other task run once, so
                // an overlapping holder would be seen.
                tokio::task::yield_now().await;
                holders.fetch_sub(1, Ordering::SeqCst);
                let t2 = Instant::now();
                match lease.release().await {
                    Ok(()) if t0 < measure_from => {}
                    Ok(()) => {
                        w.pairs += 1;
                        w.acquire_us.push(micros(t1 - t0));
                        w.release_us.push(micros(t2.elapsed()));
                        w.pair_us.push(micros(t0.elapsed()));
                    }
                    Err(_) => w.errors += u64::from(t0 >= measure_from),
                }
            }
            w
        }
    })
    .await;
    let mut workers = Vec::new();
    for r in results {
        match r {
            Ok(w) => workers.push(w),
            Err(e) => {
                eprintln!("tollgate: a bench worker failed: {e}");
                return exit::SOFTWARE;
            }
        }
    }
    let elapsed = measure_from.elapsed().as_secs_f64();
    let (usage_before, cpu_before) = match before.await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tollgate: reading the counters failed: {e}");
            return exit::SOFTWARE;
        }
    };
    let (usage_after, cpu_after) = counters(args.redis.as_deref()).await;
    let client_cpu = cpu_after - cpu_before;
    let n: u64 = workers.iter().map(|w| w.pairs).sum();
    let per_op = |x: f64| (n > 0).then(|| round3(x / n as f64));
    let redis = usage_before.zip(usage_after);
    let mut pair_us: Vec<u32> = workers.iter().flat_map(|w| w.pair_us.iter().copied()).collect();
    let mut release_us: Vec<u32> = workers
        .iter()
        .flat_map(|w| w.release_us.iter().copied())
        .collect();
    let mut acquire_us: Vec<u32> = workers
        .iter()
        .flat_map(|w| w.acquire_us.iter().copied())
        .collect();
    let durable = store.durable_stats();
    let report = Report {
        peer: "tollgate",
        case,
        store: super::support::store_label(&store),
        workers: args.workers,
        seconds: round3(elapsed),
        ops_per_s: round3(n as f64 / elapsed),
        store_ops_per_s: round3(2.0 * n as f64 / elapsed),
        p50_ms: percentile_ms(&mut pair_us, 0.50),
        p99_ms: percentile_ms(&mut pair_us, 0.99),
        acquire_p50_ms: percentile_ms(&mut acquire_us, 0.50),
        acquire_p99_ms: percentile_ms(&mut acquire_us, 0.99),
        release_p50_ms: percentile_ms(&mut release_us, 0.50),
        release_p99_ms: percentile_ms(&mut release_us, 0.99),
        n,
        errors: workers.iter().map(|w| w.errors).sum(),
        max_concurrent_holders: max_holders.load(Ordering::SeqCst),
        per_worker_min: workers.iter().map(|w| w.pairs).min().unwrap_or(0),
        per_worker_max: workers.iter().map(|w| w.pairs).max().unwrap_or(0),
        redis_cpu_us_per_op: redis
            .as_ref()
            .and_then(|(a, b)| per_op((b.cpu_seconds - a.cpu_seconds) * 1e6)),
        redis_scripts_per_op: redis
            .as_ref()
            .and_then(|(a, b)| per_op(b.scripts.saturating_sub(a.scripts) as f64)),
        redis_calls_per_op: redis
            .as_ref()
            .and_then(|(a, b)| per_op(b.calls.saturating_sub(a.calls) as f64)),
        client_cpu_us_per_op: per_op(client_cpu * 1e6).unwrap_or(0.0),
        runtime: args.runtime().to_string(),
        log_records_per_op: durable.as_ref().and_then(|d| per_op(d.log.records as f64)),
        log_writes_per_op: durable.as_ref().and_then(|d| per_op(d.log.writes as f64)),
        fsyncs: durable.as_ref().map(|d| d.log.fsyncs),
    };
    match serde_json::to_string(&report) {
        Ok(line) => {
            println!("{line}");
            0
        }
        Err(e) => {
            eprintln!("tollgate: {e}");
            exit::SOFTWARE
        }
    }
}

/// Redis's counters (with `--redis`) and this process's CPU seconds, now.
async fn counters(redis: Option<&str>) -> (Option<RedisUsage>, f64) {
    let usage = match redis {
        Some(url) => redis_usage(url).await,
        None => None,
    };
    (usage, cpu_seconds())
}
