//! What every bench target shares: the store built from the arguments,
//! Redis memory and CPU readings, one task per worker, quantiles and
//! rounding.

use std::future::Future;
use std::time::Duration;

use tollgate::Store;

use super::args::BenchArgs;
use crate::exit;

/// The store a benchmark measures: Redis at `--redis`, or the embedded one.
/// The one place the benches build a store from their arguments; an error
/// is printed and answered as the exit code.
pub(super) async fn store_for(args: &BenchArgs) -> Result<Store, i32> {
    match args.redis.as_deref() {
        Some(url) => {
            crate::commands::connect_redis(url, "tollgate", crate::commands::DurabilityArgs::default(), None)
                .await
        }
        None => match &args.data_dir {
            None => Ok(Store::memory()),
            Some(dir) => {
                let fsync = match args.fsync.as_deref().map(str::parse).transpose() {
                    Ok(f) => f.unwrap_or_default(),
                    Err(e) => {
                        eprintln!("tollgate: --fsync: {e}");
                        return Err(exit::USAGE);
                    }
                };
                let defaults = tollgate::DurableOptions::new(dir);
                let options = tollgate::DurableOptions {
                    fsync,
                    snapshot_after: args
                        .snapshot_after_mb
                        .map_or(defaults.snapshot_after, |mb| mb << 20),
                    ..defaults
                };
                Store::open(options).map_err(|e| {
                    eprintln!("tollgate: {e}");
                    exit::for_error(&e)
                })
            }
        },
    }
}

/// The store a result names: `memory`, `redis`, or `durable-<fsync>` for
/// the embedded store on disk.
pub(super) fn store_label(store: &Store) -> String {
    match store.durable_stats().and_then(|d| d.fsync) {
        Some(f) => format!("durable-{}", f.as_str()),
        None => store.kind().to_owned(),
    }
}

/// For the benches that read Redis memory and so need Redis: its URL and
/// the store, or a usage error naming `command` when `--redis` is missing.
pub(super) async fn redis_store<'a>(args: &'a BenchArgs, command: &str) -> Result<(&'a str, Store), i32> {
    let Some(url) = args.redis.as_deref() else {
        eprintln!("tollgate: `bench {command}` needs --redis URL");
        return Err(exit::USAGE);
    };
    Ok((url, store_for(args).await?))
}

/// The Redis memory of `keys` together (`MEMORY USAGE … SAMPLES 0`: exact),
/// or `None` if Redis cannot be asked.
pub(super) async fn memory_usage(url: &str, keys: &[String]) -> Option<i64> {
    let client = redis::Client::open(url).ok()?;
    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
    let mut bytes = 0;
    for key in keys {
        let used: Option<i64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(key)
            .arg("SAMPLES")
            .arg(0)
            .query_async(&mut conn)
            .await
            .ok()?;
        bytes += used.unwrap_or(0);
    }
    Some(bytes)
}

/// Runs `work(w)` for each of `workers` workers as a task of its own (all
/// started before any is awaited, so they run together) and collects
/// their results in worker order.
pub(super) async fn each_worker<T, F, Fut>(
    workers: usize,
    mut work: F,
) -> Vec<Result<T, tokio::task::JoinError>>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let tasks: Vec<_> = (0..workers).map(|w| tokio::spawn(work(w))).collect();
    let mut results = Vec::with_capacity(tasks.len());
    for t in tasks {
        results.push(t.await);
    }
    results
}

/// The sample at quantile `q` (0 to 1, nearest rank) of `v`, which it
/// sorts; `None` without samples. Each bench converts it to the unit
/// and rounding its JSON fields have always had.
pub(super) fn quantile<T: Copy + PartialOrd>(v: &mut [T], q: f64) -> Option<T> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    Some(v[((v.len() as f64 - 1.0) * q).round() as usize])
}

/// Redis's CPU time so far (user + system, seconds), from `INFO cpu`.
pub(super) async fn redis_cpu_seconds(url: &str) -> Option<f64> {
    redis_usage(url).await.map(|u| u.cpu_seconds)
}

/// What Redis has done so far: its CPU time and its command counts.
#[derive(Debug, Clone, Default)]
pub(super) struct RedisUsage {
    /// User + system seconds (`INFO cpu`).
    pub(super) cpu_seconds: f64,
    /// Script invocations (`EVALSHA`, `EVAL`, `FCALL` and their `_RO`s).
    pub(super) scripts: u64,
    /// Every other command, those run inside scripts included
    /// (`INFO commandstats` counts a script's `redis.call`s by name).
    pub(super) calls: u64,
}

/// Redis's [`RedisUsage`] so far, or `None` if it cannot be asked (a
/// cluster or Sentinel URL: the figures would be one node's).
pub(super) async fn redis_usage(url: &str) -> Option<RedisUsage> {
    let client = redis::Client::open(url).ok()?;
    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .ok()?;
    let field = |name: &str| {
        info.lines().find_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(':')?
                .trim()
                .parse::<f64>()
                .ok()
        })
    };
    let mut usage = RedisUsage {
        cpu_seconds: field("used_cpu_user")? + field("used_cpu_sys")?,
        ..RedisUsage::default()
    };
    // cmdstat_evalsha:calls=12,usec=…
    for line in info.lines() {
        let Some((name, stats)) = line.strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) else {
            continue;
        };
        let calls = stats
            .split(',')
            .find_map(|kv| kv.strip_prefix("calls="))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        if ["evalsha", "eval", "fcall", "evalsha_ro", "eval_ro", "fcall_ro"].contains(&name) {
            usage.scripts += calls;
        } else if name != "info" {
            usage.calls += calls;
        }
    }
    Some(usage)
}

/// This process's CPU time so far (user + system), from /proc.
pub(super) fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command (which may hold spaces) in parentheses.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line, 12 and 13 here.
    (ticks(11) + ticks(12)) / 100.0
}

/// This machine's clock in Unix ms (the benches' Redis runs beside it).
pub(super) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Rounded to three decimals (of a millisecond or a second, as reported).
pub(super) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Whole microseconds, saturating: the compact sample of the lock and
/// flood benches, which keep millions of them.
pub(super) fn micros(d: Duration) -> u32 {
    d.as_micros().min(u128::from(u32::MAX)) as u32
}

/// Quantile `q` of samples in microseconds, in milliseconds (3 decimals);
/// 0 without samples.
pub(super) fn percentile_ms(v: &mut [u32], q: f64) -> f64 {
    quantile(v, q).map_or(0.0, |us| round3(f64::from(us) / 1000.0))
}
