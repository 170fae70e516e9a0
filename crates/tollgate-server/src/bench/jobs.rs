//! `tollgate bench jobs --redis URL`: job-queue throughput (push, claim,
//! ack with a no-op handler), lateness of delayed jobs, and Redis memory
//! per queued job. One JSON line per case.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, UNIX_EPOCH};

use serde_json::json;
use tollgate::{JobQueue, PushOptions, Store};

use super::args::BenchArgs;
use super::support::{each_worker, memory_usage, now_ms, quantile, round3};
use crate::exit;

/// Quantile `q` of lateness samples (ms), to three decimals; 0 without
/// samples.
fn pct(v: &mut [f64], q: f64) -> f64 {
    quantile(v, q).map_or(0.0, round3)
}

/// The (id, fence) pairs that ack `held`.
fn fences(held: &[tollgate::Job]) -> Vec<(&str, u64)> {
    held.iter().map(|j| (j.id.as_str(), j.fence)).collect()
}

/// The throughput cases' counts, shared by their workers.
#[derive(Clone, Default)]
struct Tally {
    acked: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
}

impl Tally {
    /// Counts a batch ack's successes as acked jobs; answers how many.
    fn acked(&self, flags: &[bool]) -> u64 {
        let ok = flags.iter().filter(|f| **f).count() as u64;
        self.acked.fetch_add(ok, Ordering::Relaxed);
        ok
    }

    fn errors(&self, n: u64) {
        self.errors.fetch_add(n, Ordering::Relaxed);
    }

    /// Jobs acked, and the seconds since `started`.
    fn total(&self, started: Instant) -> (u64, f64) {
        (
            self.acked.load(Ordering::Relaxed),
            started.elapsed().as_secs_f64(),
        )
    }
}

pub(super) async fn run(args: &BenchArgs) -> i32 {
    // Without --redis: the embedded store (memory only, or on disk with
    // --data-dir); its memory per job is not measured.
    let store = match super::support::store_for(args).await {
        Ok(found) => found,
        Err(code) => return code,
    };
    let run_id = format!("{:x}", std::process::id());
    if let Some(n) = args.groups {
        if n == 0 {
            eprintln!("tollgate: --groups must be at least 1");
            return exit::USAGE;
        }
        let plain = throughput(&store, &run_id, args, 10, None).await;
        let grouped = throughput(&store, &run_id, args, 10, Some(n)).await;
        let ratio =
            grouped["jobs_per_s"].as_f64().unwrap_or(0.0) / plain["jobs_per_s"].as_f64().unwrap_or(1.0);
        println!("{plain}");
        println!("{grouped}");
        println!(
            "{}",
            json!({"peer": "tollgate", "case": "jobs_groups_ratio", "groups": n, "ratio": round3(ratio)})
        );
        return 0;
    }
    if let Some(rate) = &args.queue_rate {
        let Ok(rate) = rate.parse::<tollgate::Rate>() else {
            eprintln!("tollgate: --queue-rate {rate}: not a rate (N/s, N/min, N/<duration>)");
            return exit::USAGE;
        };
        println!(
            "{}",
            super::fair::rate_throughput(&store, &run_id, args, rate).await
        );
        return 0;
    }
    if let Some(n) = args.idle_consumers {
        println!("{}", super::fair::idle_cost(&store, &run_id, args, n).await);
        return 0;
    }
    if let Some(k) = args.partitions {
        if k == 0 || k > tollgate::MAX_PARTITIONS {
            eprintln!("tollgate: --partitions must be 1 to {}", tollgate::MAX_PARTITIONS);
            return exit::USAGE;
        }
        println!("{}", sharded_throughput(&store, &run_id, args, k).await);
        return 0;
    }
    println!("{}", throughput(&store, &run_id, args, 1, None).await);
    println!("{}", throughput(&store, &run_id, args, 10, None).await);
    println!("{}", lateness(&store, &run_id, args).await);
    // The target's case (delayed, small payload) first; then a ready line
    // and a payload too big for Redis's compact hash encoding.
    if let Some(url) = args.redis.as_deref() {
        println!("{}", memory(&store, url, &run_id, true, 10).await);
        println!("{}", memory(&store, url, &run_id, false, 10).await);
        println!("{}", memory(&store, url, &run_id, true, 100).await);
    }
    store.close();
    0
}

/// Each of --workers tasks, as fast as it can: push `batch` jobs, then ack
/// the jobs it holds and claim up to `batch` more in the same call
/// (`ack_and_claim`, or its batch form), with a no-op handler. Two script
/// calls per `batch` jobs; jobs/s is acked jobs per second. With
/// `groups`, the jobs go to that many groups in turn (a fair queue).
async fn throughput(
    store: &Store,
    run_id: &str,
    args: &BenchArgs,
    batch: usize,
    groups: Option<usize>,
) -> serde_json::Value {
    let suffix = groups.map_or(String::new(), |n| format!(":g{n}"));
    let Ok(q) = JobQueue::new(store, &format!("bench:jobs:{run_id}:{batch}{suffix}")) else {
        return json!({"case": "jobs_throughput", "errors": 1});
    };
    let end = Instant::now() + args.seconds;
    let tally = Tally::default();
    let calls = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    each_worker(args.workers, |w| {
        let (q, tally, calls) = (q.clone(), tally.clone(), calls.clone());
        async move {
            let mut jobs: Vec<(&[u8], PushOptions)> =
                (0..batch).map(|_| (&b"x"[..], PushOptions::default())).collect();
            let mut held: Vec<tollgate::Job> = Vec::new();
            let mut next_group = w * 7919;
            while Instant::now() < end {
                if let Some(n) = groups {
                    for (_, o) in &mut jobs {
                        o.group = Some(format!("g{}", next_group % n));
                        next_group += 1;
                    }
                }
                let pushed = if batch == 1 {
                    q.push(b"x", &jobs[0].1).await.map(|_| ())
                } else {
                    q.push_many(&jobs).await.map(|_| ())
                };
                calls.fetch_add(2, Ordering::Relaxed);
                if pushed.is_err() {
                    tally.errors(1);
                    continue;
                }
                match q.ack_and_claim_many(&fences(&held), batch).await {
                    Ok((flags, next)) => {
                        let ok = tally.acked(&flags);
                        tally.errors(flags.len() as u64 - ok);
                        held = next;
                    }
                    Err(_) => {
                        tally.errors(1);
                        held.clear();
                    }
                }
            }
            // What it still holds when time is up counts as done too.
            if let Ok(flags) = q.ack_many(&fences(&held)).await {
                tally.acked(&flags);
            }
        }
    })
    .await;
    let (n, secs) = tally.total(started);
    let case = match (batch, groups) {
        (_, Some(_)) => format!("jobs_throughput_batch{batch}_groups"),
        (1, None) => "jobs_throughput".to_owned(),
        _ => format!("jobs_throughput_batch{batch}"),
    };
    json!({
        "peer": "tollgate", "case": case, "groups": groups,
        "store": super::support::store_label(store), "workers": args.workers, "batch": batch,
        "jobs_per_s": (n as f64 / secs).round(),
        "store_ops_per_s": (calls.load(Ordering::Relaxed) as f64 / secs).round(),
        "acked": n, "errors": tally.errors.load(Ordering::Relaxed),
    })
}

/// Each of --workers tasks, as fast as it can: push 10 jobs, ack the ones
/// it holds, claim up to 10 more (three calls per 10 jobs), on a queue of
/// `k` partitions. Each partition is its own slot on a cluster, so this is
/// the case that can grow with the cluster.
async fn sharded_throughput(store: &Store, run_id: &str, args: &BenchArgs, k: usize) -> serde_json::Value {
    const BATCH: usize = 10;
    let Ok(q) = tollgate::JobQueue::partitioned(store, &format!("bench:sharded:{run_id}"), k) else {
        return json!({"case": "jobs_sharded_throughput", "errors": 1});
    };
    let end = Instant::now() + args.seconds;
    let tally = Tally::default();
    let started = Instant::now();
    each_worker(args.workers, |_| {
        let (q, tally) = (q.clone(), tally.clone());
        async move {
            let jobs: Vec<(&[u8], PushOptions)> =
                (0..BATCH).map(|_| (&b"x"[..], PushOptions::default())).collect();
            let mut held: Vec<tollgate::Job> = Vec::new();
            while Instant::now() < end {
                if q.push_many(&jobs).await.is_err() {
                    tally.errors(1);
                }
                if !held.is_empty() {
                    match q.ack_many(&fences(&held)).await {
                        Ok(flags) => {
                            tally.acked(&flags);
                        }
                        Err(_) => tally.errors(1),
                    }
                }
                held = q.claim_many(BATCH).await.unwrap_or_else(|_| {
                    tally.errors(1);
                    Vec::new()
                });
            }
            // What it still holds when time is up counts as done too.
            if let Ok(flags) = q.ack_many(&fences(&held)).await {
                tally.acked(&flags);
            }
        }
    })
    .await;
    let (n, secs) = tally.total(started);
    json!({
        "peer": "tollgate", "case": "jobs_sharded_throughput", "store": super::support::store_label(store), "workers": args.workers,
        "partitions": k, "batch": BATCH, "jobs_per_s": (n as f64 / secs).round(), "acked": n,
        "errors": tally.errors.load(Ordering::Relaxed),
    })
}

/// One producer pushes 2,500 jobs/s with delays spread over 0–2 s; --workers
/// consumers wait with `next`; lateness is claim time minus due time.
async fn lateness(store: &Store, run_id: &str, args: &BenchArgs) -> serde_json::Value {
    let Ok(q) = JobQueue::new(store, &format!("bench:late:{run_id}")) else {
        return json!({"case": "jobs_lateness", "errors": 1});
    };
    let stop = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(std::sync::Mutex::new(Vec::<f64>::new()));
    let consumers: Vec<_> = (0..args.workers)
        .map(|_| {
            let (q, stop, samples) = (q.clone(), stop.clone(), samples.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(Some(job)) = q.next(Duration::from_millis(200)).await else {
                        continue;
                    };
                    let claimed = now_ms();
                    if let Some(due) = std::str::from_utf8(&job.payload)
                        .ok()
                        .and_then(|s| s.parse::<u64>().ok())
                    {
                        samples
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .push(claimed.saturating_sub(due) as f64);
                    }
                    let _ = q.ack(&job.id, job.fence).await;
                }
            })
        })
        .collect();
    let rate = 2500u64;
    let pushing = args.seconds;
    let started = Instant::now();
    let mut pushed = 0u64;
    let mut errors = 0u64;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    while started.elapsed() < pushing {
        // Pace: as many as the rate allows by now.
        let allowed = (started.elapsed().as_secs_f64() * rate as f64) as u64;
        while pushed < allowed {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let delay = Duration::from_millis(seed % 2000);
            // The due time as the store computes it is known only after the
            // push; the payload carries the client's estimate, corrected
            // below with the store's answer.
            let due = now_ms() + delay.as_millis() as u64;
            let o = PushOptions {
                delay: None,
                at: Some(UNIX_EPOCH + Duration::from_millis(due)),
                ..PushOptions::default()
            };
            match q.push(due.to_string(), &o).await {
                Ok(_) => pushed += 1,
                Err(_) => errors += 1,
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Let the last delays (up to 2 s) come due and be claimed.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    stop.store(true, Ordering::Relaxed);
    for c in consumers {
        let _ = c.await;
    }
    let mut v = std::mem::take(&mut *samples.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    let n = v.len();
    json!({
        "peer": "tollgate", "case": "jobs_lateness", "store": super::support::store_label(store), "consumers": args.workers,
        "pushed_per_s": rate, "pushed": pushed, "claimed": n,
        "lateness_p50_ms": pct(&mut v, 0.5), "lateness_p99_ms": pct(&mut v, 0.99), "lateness_max_ms": pct(&mut v, 1.0),
        "errors": errors,
    })
}

/// Pushes 100,000 delayed jobs with a 10-byte payload and reads the Redis
/// memory of the queue's keys.
async fn memory(
    store: &Store,
    url: &str,
    run_id: &str,
    delayed: bool,
    payload_bytes: usize,
) -> serde_json::Value {
    let state = if delayed { "delayed" } else { "ready" };
    let name = format!("bench:mem:{run_id}:{state}:{payload_bytes}");
    let case = format!("jobs_memory_{state}_{payload_bytes}b");
    let Ok(q) = JobQueue::new(store, &name) else {
        return json!({"case": case, "errors": 1});
    };
    const N: usize = 100_000;
    let o = PushOptions {
        delay: delayed.then_some(Duration::from_secs(3600)),
        ..PushOptions::default()
    };
    let payload = vec![b'p'; payload_bytes];
    let batch: Vec<(&[u8], PushOptions)> = (0..100).map(|_| (&payload[..], o.clone())).collect();
    for _ in 0..N / 100 {
        if q.push_many(&batch).await.is_err() {
            return json!({"case": case, "errors": 1});
        }
    }
    let base = format!("tollgate:jobs:{{{name}}}");
    let keys: Vec<String> = [":w", ":r", ":m"]
        .iter()
        .map(|suffix| format!("{base}{suffix}"))
        .chain((0..4096).map(|b| format!("{base}:d:{b}")))
        .collect();
    let Some(bytes) = memory_usage(url, &keys).await else {
        return json!({"case": case, "errors": 1});
    };
    let per_job = bytes as f64 / N as f64;
    json!({
        "peer": "tollgate", "case": case, "jobs": N, "payload_bytes": payload_bytes,
        "queue_bytes": bytes, "bytes_per_job": (per_job * 10.0).round() / 10.0,
        "bytes_per_job_beyond_payload": ((per_job - payload_bytes as f64) * 10.0).round() / 10.0,
    })
}
