//! `tollgate bench schedules --redis URL`: many schedules fired by several
//! processes at once, with no leader. Creates `--schedules` schedules each
//! firing every `--every` (their ticks spread evenly over the whole
//! seconds of the interval), starts `--firers` firing processes (this
//! executable again, in a hidden mode), and after `--seconds` checks every
//! tick of the window was pushed exactly once: the union of what the
//! firers report, each tick once, against the ticks due, and the jobs in
//! the queue. Reports the due-to-push lag, the firers' CPU, and Redis
//! memory per idle schedule (`MEMORY USAGE` of the schedules' keys).

use std::collections::HashSet;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;
use tollgate::{JobQueue, ScheduleSpec, Schedules, When};

use super::args::BenchArgs;
use super::support::{cpu_seconds, memory_usage, now_ms, quantile, redis_cpu_seconds, redis_store, round3};
use crate::exit;

pub(super) async fn run(args: &BenchArgs) -> i32 {
    match args.fire_for {
        Some(d) => fire(args, d).await,
        None => lead(args).await,
    }
}

/// The hidden mode: fire every due schedule for `d`, then print what was
/// fired (one JSON line).
async fn fire(args: &BenchArgs, d: Duration) -> i32 {
    let (_, store) = match redis_store(args, "schedules").await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let schedules = Schedules::new(&store);
    let (cpu0, started) = (cpu_seconds(), Instant::now());
    let (mut fired, mut lags_us, mut errors, mut stale_passes) = (Vec::new(), Vec::new(), 0u64, 0u64);
    let mut passes = Vec::new();
    while started.elapsed() < d {
        let pass = Instant::now();
        match schedules.fire_due().await {
            Ok(report) => {
                if !report.fired.is_empty() {
                    passes.push((
                        report.fired.len(),
                        pass.elapsed().as_micros() as u64,
                        report
                            .fired
                            .iter()
                            .map(|f| f.lag.as_millis() as u64)
                            .min()
                            .unwrap_or(0),
                    ));
                }
                if report.fired.is_empty() {
                    stale_passes += 1;
                }
                for f in report.fired {
                    lags_us.push(f.lag.as_micros() as u64);
                    fired.push(f.job_id);
                }
                errors += (report.refused.len() + report.unreadable.len()) as u64;
                tokio::time::sleep(report.sleep.min(d.saturating_sub(started.elapsed()))).await;
            }
            Err(e) => {
                eprintln!("tollgate bench: firing: {e}");
                errors += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let out = json!({
        "fired": fired,
        "lags_us": lags_us,
        "errors": errors,
        "empty_passes": stale_passes,
        "passes": passes,
        "cpu_s": cpu_seconds() - cpu0,
        "wall_s": started.elapsed().as_secs_f64(),
    });
    println!("{out}");
    0
}

async fn lead(args: &BenchArgs) -> i32 {
    let (url, store) = match redis_store(args, "schedules").await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let n = args.schedules;
    let every_s = args.every.as_secs();
    if n == 0 || n > 1_000_000 || every_s == 0 || args.every.subsec_nanos() != 0 || args.firers == 0 {
        eprintln!(
            "tollgate: bench schedules needs --schedules 1 to 1000000, --every in whole seconds, --firers 1 or more"
        );
        return exit::USAGE;
    }
    let run = format!("{:x}", rand_tag());
    let queue = format!("bench-schedules-{run}");
    let s = Schedules::new(&store);

    // The window checked starts far enough ahead that creating them all
    // and starting the firers is done by then. The schedules are plain
    // (no start or end, as most are), so they fire before and after it
    // too: only the window's ticks are counted as due.
    let setup = Duration::from_secs(20 + (n / 1000) as u64);
    let every_ms = every_s * 1000;
    let window_start = (now_ms() + setup.as_millis() as u64).div_ceil(every_ms) * every_ms;
    let window_end = window_start + args.seconds.as_millis() as u64;
    let created = Instant::now();
    let made = futures_util::future::join_all((0..32).map(|w| {
        let (s, queue) = (s.clone(), queue.clone());
        let run = run.clone();
        async move {
            for i in (w..n).step_by(32) {
                // Ticks at anchor + k·every: the anchors spread the ticks
                // evenly over the interval's whole seconds.
                let anchor = (i as u64 % every_s) * 1000;
                let when = When::parse(&format!("every {every_s}s from {anchor}"))?;
                s.upsert(&format!("b{run}-{i}"), &ScheduleSpec::new(when, &queue))
                    .await?;
            }
            Ok::<(), tollgate::Error>(())
        }
    }))
    .await;
    if let Some(Err(e)) = made.into_iter().find(Result::is_err) {
        eprintln!("tollgate: creating the schedules: {e}");
        return exit::UNAVAILABLE;
    }
    let create_s = created.elapsed().as_secs_f64();
    if now_ms() + 5000 > window_start {
        eprintln!("tollgate: creating {n} schedules took {create_s:.1}s, past the window's start; use fewer");
        return exit::SOFTWARE;
    }

    // Idle: created, none fired yet (so no history).
    let keys = schedule_keys(&queue);
    let idle_bytes = memory_usage(url, &keys).await;
    // S, Z and H one by one; the index's buckets together.
    let mut idle_by_key = Vec::new();
    for key in &keys[..3] {
        idle_by_key.push(memory_usage(url, std::slice::from_ref(key)).await.unwrap_or(0));
    }
    idle_by_key.push(memory_usage(url, &keys[3..]).await.unwrap_or(0));

    // The firers run from now until the window's end plus a margin.
    let fire_for = Duration::from_millis(window_end + 3000 - now_ms());
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("tollgate: cannot find this executable to start the firers: {e}");
            return exit::SOFTWARE;
        }
    };
    let mut children = Vec::new();
    for _ in 0..args.firers {
        let child = tokio::process::Command::new(&exe)
            .args(["bench", "schedules", "--redis", url, "--fire-for"])
            .arg(format!("{}ms", fire_for.as_millis()))
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn();
        match child {
            Ok(c) => children.push(c),
            Err(e) => {
                eprintln!("tollgate: starting a firer: {e}");
                return exit::SOFTWARE;
            }
        }
    }

    // Consumers claim each job as soon as it is due, as workers would:
    // from a tick to its job's claim is what a user waits.
    let consumers_n = args.workers.min(256);
    let consumers: Vec<_> = (0..consumers_n)
        .map(|_| {
            let q = JobQueue::new(&store, &queue);
            let until = Instant::now() + fire_for;
            tokio::spawn(async move {
                let q = q?;
                let mut late_ms = Vec::new();
                while Instant::now() < until {
                    let jobs = q.next_many(100, Duration::from_millis(500)).await?;
                    let claimed = now_ms();
                    for job in &jobs {
                        let tick = job.id.rsplit_once('@').and_then(|(_, t)| t.parse::<u64>().ok());
                        if let Some(tick) = tick.filter(|t| (window_start..=window_end).contains(t)) {
                            late_ms.push(claimed.saturating_sub(tick) as f64);
                        }
                    }
                    let acks: Vec<(&str, u64)> = jobs.iter().map(|j| (j.id.as_str(), j.fence)).collect();
                    if !acks.is_empty() {
                        q.ack_many(&acks).await?;
                    }
                }
                Ok::<Vec<f64>, tollgate::Error>(late_ms)
            })
        })
        .collect();

    // Redis's share of the window.
    tokio::time::sleep(Duration::from_millis(window_start.saturating_sub(now_ms()))).await;
    let redis_cpu0 = redis_cpu_seconds(url).await;
    tokio::time::sleep(Duration::from_millis(window_end.saturating_sub(now_ms()))).await;
    let redis_cpu_pct = match (redis_cpu0, redis_cpu_seconds(url).await) {
        (Some(a), Some(b)) => Some(round3(100.0 * (b - a) / args.seconds.as_secs_f64())),
        _ => None,
    };

    let mut outputs = Vec::new();
    for child in children {
        match child.wait_with_output().await {
            Ok(out) if out.status.success() => outputs.push(out.stdout),
            Ok(out) => {
                eprintln!("tollgate: a firer failed: {}", out.status);
                return exit::SOFTWARE;
            }
            Err(e) => {
                eprintln!("tollgate: waiting for a firer: {e}");
                return exit::SOFTWARE;
            }
        }
    }
    let history_bytes = memory_usage(url, &keys).await;
    let mut claim_late = Vec::new();
    for c in consumers {
        match c.await {
            Ok(Ok(late)) => claim_late.extend(late),
            Ok(Err(e)) => {
                eprintln!("tollgate: a consumer: {e}");
                return exit::UNAVAILABLE;
            }
            Err(e) => {
                eprintln!("tollgate: a consumer: {e}");
                return exit::SOFTWARE;
            }
        }
    }

    let expected: HashSet<String> = (0..n)
        .flat_map(|i| {
            let anchor = (i as u64 % every_s) * 1000;
            let first = window_start + (anchor + every_ms - window_start % every_ms) % every_ms;
            let run = &run;
            (first..=window_end)
                .step_by(every_ms as usize)
                .map(move |t| format!("b{run}-{i}@{t}"))
        })
        .collect();
    let (mut seen, mut fired_total, mut lags, mut errors) = (HashSet::new(), 0usize, Vec::new(), 0u64);
    let mut firers = Vec::new();
    for out in &outputs {
        let v: serde_json::Value = match serde_json::from_slice(out) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("tollgate: a firer's report: {e}");
                return exit::SOFTWARE;
            }
        };
        let fired: Vec<String> = serde_json::from_value(v["fired"].clone()).unwrap_or_default();
        let lags_us: Vec<u64> = serde_json::from_value(v["lags_us"].clone()).unwrap_or_default();
        // The lag of the window's ticks (not of the start-up's).
        for (id, us) in fired.iter().zip(lags_us) {
            if expected.contains(id) {
                lags.push(us as f64 / 1000.0);
            }
        }
        fired_total += fired.len();
        seen.extend(fired);
        errors += v["errors"].as_u64().unwrap_or(0);
        let (cpu, wall) = (
            v["cpu_s"].as_f64().unwrap_or(0.0),
            v["wall_s"].as_f64().unwrap_or(1.0),
        );
        firers.push(json!({"ticks": v["fired"].as_array().map_or(0, Vec::len), "cpu_pct": round3(100.0 * cpu / wall)}));
    }
    let missed = expected.difference(&seen).count();
    let queued = match JobQueue::new(&store, &queue) {
        Ok(q) => q.stats().await.map(|st| st.pushed).unwrap_or(0),
        Err(_) => 0,
    };
    let by_key: Vec<serde_json::Value> = ["S", "Z", "H", "index"]
        .iter()
        .zip(&idle_by_key)
        .map(|(k, b)| json!({"key": k, "bytes": round3(*b as f64 / n as f64)}))
        .collect();
    let per = |bytes: Option<i64>| bytes.map(|b| round3(b as f64 / n as f64));
    println!(
        "{}",
        json!({
            "case": "schedules",
            "schedules": n,
            "every_s": every_s,
            "ticks_per_s": round3(n as f64 / every_s as f64),
            "firers": firers,
            "consumers": consumers_n,
            "redis_cpu_pct_in_window": redis_cpu_pct,
            "window_s": args.seconds.as_secs_f64(),
            "create_s": round3(create_s),
            "expected_ticks": expected.len(),
            "fired_ticks": seen.len(),
            "duplicates": fired_total - seen.len(),
            "missed": missed,
            "fired_in_window": seen.intersection(&expected).count(),
            "jobs_pushed": queued,
            "jobs_match_fired": queued == seen.len() as u64,
            "errors": errors,
            "push_lag_ms_p50": quantile(&mut lags, 0.5).map(round3),
            "push_lag_ms_p99": quantile(&mut lags, 0.99).map(round3),
            "push_lag_ms_max": quantile(&mut lags, 1.0).map(round3),
            "tick_to_claim_ms_p50": quantile(&mut claim_late, 0.5).map(round3),
            "tick_to_claim_ms_p99": quantile(&mut claim_late, 0.99).map(round3),
            "tick_to_claim_ms_max": quantile(&mut claim_late, 1.0).map(round3),
            "claimed_in_window": claim_late.len(),
            "redis_bytes_per_idle_schedule": per(idle_bytes),
            "idle_bytes_per_schedule_by_key": by_key,
            "redis_bytes_per_schedule_with_history": per(history_bytes),
        })
    );
    if missed > 0 || fired_total != seen.len() || queued != seen.len() as u64 {
        return exit::SOFTWARE;
    }
    0
}

/// Every Redis key a queue's schedules take, with the index (whose share
/// is theirs: one field each).
fn schedule_keys(queue: &str) -> Vec<String> {
    let base = format!("tollgate:jobs:{{{queue}}}:");
    vec![format!("{base}S"), format!("{base}Z"), format!("{base}H")]
        .into_iter()
        .chain((0..256).map(|b| format!("tollgate:schedules:{{index}}:n:{b}")))
        .collect()
}

fn rand_tag() -> u32 {
    // The run's names only need to differ from earlier runs'.
    (now_ms() % 1_000_000_007) as u32 ^ std::process::id()
}
