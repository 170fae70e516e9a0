//! `tollgate bench jobs --idle-consumers N --redis URL`: what consumers
//! cost the store while every group of a fair queue is at its
//! concurrency and nothing can be claimed (docs/BENCHMARKS.md).

use std::time::{Duration, Instant};

use serde_json::json;
use tollgate::{JobQueue, PushOptions, QueueLimits, Store};

use super::args::BenchArgs;
use super::support::{each_worker, round3};

/// Redis's CPU time so far (INFO's used_cpu_sys + used_cpu_user, s).
async fn redis_cpu(url: &str) -> Option<f64> {
    super::support::redis_usage(url).await.map(|u| u.cpu_seconds)
}

/// Redis's CPU as a share of one core over `secs` of `work`.
async fn cpu_share<F: std::future::Future<Output = ()>>(url: &str, secs: f64, work: F) -> Option<f64> {
    let before = redis_cpu(url).await?;
    let started = Instant::now();
    work.await;
    let after = redis_cpu(url).await?;
    Some((after - before) / started.elapsed().as_secs_f64().max(secs))
}

/// 100 groups, each at its concurrency of 1 with one more job ready;
/// then `n` consumers wait in `next_many` for --seconds. Reports Redis's
/// CPU share then, and over the same time with no consumer at all (its
/// own idle cost) in the same run.
pub(super) async fn idle_cost(store: &Store, run_id: &str, args: &BenchArgs, n: usize) -> serde_json::Value {
    let Some(url) = args.redis.as_deref() else {
        return json!({"case": "jobs_idle_consumers", "error": "needs --redis: it measures Redis's CPU"});
    };
    let setup = async {
        let q = JobQueue::new(store, &format!("bench:idle:{run_id}"))?.lease(Duration::from_secs(3600))?;
        q.set_limits(&QueueLimits {
            group_concurrency: Some(1),
            ..QueueLimits::default()
        })
        .await?;
        let jobs: Vec<(&[u8], PushOptions)> = (0..200)
            .map(|i| {
                let options = PushOptions {
                    group: Some(format!("g{}", i % 100)),
                    ..PushOptions::default()
                };
                (&b"x"[..], options)
            })
            .collect();
        q.push_many(&jobs).await?;
        let held = q.claim_many(1000).await?;
        tollgate::Result::Ok((q, held.len()))
    };
    let (q, held) = match setup.await {
        Ok(set) => set,
        Err(e) => {
            let e: tollgate::Error = e;
            return json!({"case": "jobs_idle_consumers", "error": e.to_string()});
        }
    };
    let secs = args.seconds.as_secs_f64();
    let quiet = cpu_share(url, secs, tokio::time::sleep(args.seconds)).await;
    let end = Instant::now() + args.seconds;
    let claimed = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let waiting = cpu_share(url, secs, async {
        each_worker(n, |_| {
            let (q, claimed) = (q.clone(), claimed.clone());
            async move {
                while let Some(left) = end.checked_duration_since(Instant::now()) {
                    if let Ok(jobs) = q.next_many(10, left).await {
                        claimed.fetch_add(jobs.len() as u64, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }
        })
        .await;
    })
    .await;
    let stats = q.stats().await.ok();
    json!({
        "peer": "tollgate", "case": "jobs_idle_consumers", "consumers": n, "groups": 100,
        "running": held, "seconds": secs,
        "redis_cpu_share_idle": quiet.map(round3),
        "redis_cpu_share_waiting": waiting.map(round3),
        "redis_cpu_share_added": quiet.zip(waiting).map(|(a, b)| round3(b - a)),
        "claimed_while_waiting": claimed.load(std::sync::atomic::Ordering::Relaxed),
        "limited_claims": stats.map(|s| s.limited_claims),
    })
}

/// A queue with `rate`, a backlog of 3 periods' worth plus 1,000 jobs,
/// and --workers consumers claiming 10 at a time and acking: the jobs
/// handed out per second over --seconds after the first period (the
/// steady rate), and its share of the rate.
pub(super) async fn rate_throughput(
    store: &Store,
    run_id: &str,
    args: &BenchArgs,
    rate: tollgate::Rate,
) -> serde_json::Value {
    let lease = Duration::from_secs(600);
    let setup = async {
        let q = JobQueue::new(store, &format!("bench:rate:{run_id}"))?.lease(lease)?;
        q.set_limits(&QueueLimits {
            rate: Some(rate),
            ..QueueLimits::default()
        })
        .await?;
        let per_s = rate.count() as f64 / rate.period().as_secs_f64();
        let backlog =
            (per_s * (args.seconds.as_secs_f64() + 3.0 * rate.period().as_secs_f64())) as usize + 1000;
        let jobs: Vec<(&[u8], PushOptions)> =
            (0..1000).map(|_| (&b"x"[..], PushOptions::default())).collect();
        for _ in 0..backlog.div_ceil(1000) {
            q.push_many(&jobs).await?;
        }
        tollgate::Result::Ok((q, per_s))
    };
    let (q, per_s) = match setup.await {
        Ok(set) => set,
        Err(e) => {
            let e: tollgate::Error = e;
            return json!({"case": "jobs_rate", "error": e.to_string()});
        }
    };
    // Claim times (store ms, from each lease's start) of every job.
    let times = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u64>::new()));
    let warm = rate.period();
    let end = Instant::now() + warm + args.seconds;
    each_worker(args.workers, |_| {
        let (q, times) = (q.clone(), times.clone());
        async move {
            while let Some(left) = end.checked_duration_since(Instant::now()) {
                let Ok(jobs) = q.next_many(10, left.min(Duration::from_secs(1))).await else {
                    continue;
                };
                let mut t = Vec::with_capacity(jobs.len());
                for j in &jobs {
                    let at = (j.lease_until - lease).duration_since(std::time::UNIX_EPOCH);
                    t.push(at.map_or(0, |d| d.as_millis() as u64));
                }
                times
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .extend(t);
                let done: Vec<(&str, u64)> = jobs.iter().map(|j| (j.id.as_str(), j.fence)).collect();
                let _ = q.ack_many(&done).await;
            }
        }
    })
    .await;
    let mut times = times
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    times.sort_unstable();
    let first = times.first().copied().unwrap_or(0);
    let from = first + warm.as_millis() as u64;
    let to = from + args.seconds.as_millis() as u64;
    let steady = times.iter().filter(|t| **t >= from && **t < to).count() as f64;
    let got = steady / args.seconds.as_secs_f64();
    // The most handed out in any window of one period (the rate's promise).
    let period = rate.period().as_millis() as u64;
    let mut most = 0;
    let mut lo = 0;
    for hi in 0..times.len() {
        while times[hi] - times[lo] >= period {
            lo += 1;
        }
        most = most.max(hi - lo + 1);
    }
    json!({
        "peer": "tollgate", "case": "jobs_rate", "rate": rate.to_string(), "workers": args.workers,
        "seconds": args.seconds.as_secs_f64(), "jobs_per_s": round3(got),
        "share_of_rate": round3(got / per_s), "most_in_one_period": most, "limit_per_period": rate.count(),
        "handed_out": times.len(),
    })
}
