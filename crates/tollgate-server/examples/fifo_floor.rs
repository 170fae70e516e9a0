//! The floor of a strict-FIFO mutex on Redis, for `docs/BENCHMARKS.md`
//! (issue 19): the least a one-at-a-time hand-off through Redis can do,
//! measured as `tollgate bench lock --contended` measures the gate (50
//! workers in one process on a runtime of one worker thread, a critical
//! section of one yield, the acquire's latency from the call to the grant,
//! a 1 s warm-up).
//!
//! A worker enters with one script: granted, or queued at the back of the
//! line. Queued, it waits for its wake-up in this process. The holder
//! releases with one script that makes the line's head the holder and
//! names it in the reply, which wakes it at once: one round trip to
//! Redis per hand-over and the least Lua there is. Two shapes:
//!
//! - `bare` (the default): `SET NX` of a holder key or `RPUSH` onto the
//!   line; `LPOP` and `SET`, or `DEL`. No lease, fence, server time,
//!   position or pub/sub.
//! - `fenced` (`MODE=fenced`): what the gate promises a mutex and this can
//!   keep cheaply: server time, a lease with an end, a fence that strictly
//!   increases, the line's position, a heartbeat deadline per waiter (a
//!   waiter past it is skipped), the hand-off published on the gate's
//!   channel for other processes. To enter: `TIME`, `HMGET`, then
//!   `HINCRBY`+`HSET` or `ZADD` (the member carries the deadline)+`HSET`;
//!   to release: `TIME`, `HMGET`, `ZPOPMIN`, `HSET`, `PUBLISH`. (Not kept:
//!   a waiter's heartbeat renewing its deadline, multi-permit requests,
//!   labels, admission control, the line's pace, the keys' expiry.)
//!
//! `SPIN=n` adds an empty Lua loop of n turns to each script, to see how
//! the chain slows as Redis's time per call grows.
//!
//! ```sh illustrative
//! cargo build --release -p tollgate-server --example fifo_floor
//! MODE=fenced target/release/examples/fifo_floor redis://127.0.0.1:6379 50 5
//! ```
//! (URL, workers, seconds measured.) Prints one JSON line.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use redis::Script;
use tokio::sync::Notify;

// KEYS: holder, line. ARGV: id, spin. Replies 1 (granted) or 0 (queued).
const BARE_ENTER: &str = r"
for _ = 1, tonumber(ARGV[2]) do end
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then return 1 end
redis.call('RPUSH', KEYS[2], ARGV[1])
return 0";

// KEYS: holder, line. ARGV: id, spin. Replies the next holder, or nil.
const BARE_LEAVE: &str = r"
for _ = 1, tonumber(ARGV[2]) do end
local next = redis.call('LPOP', KEYS[2])
if next then redis.call('SET', KEYS[1], next) return next end
redis.call('DEL', KEYS[1])
return false";

// KEYS: the gate's hash, line. ARGV: id, spin, ttl (ms), heartbeat (ms).
// Replies the fence (granted) or minus the position (queued).
const FENCED_ENTER: &str = r"
for _ = 1, tonumber(ARGV[2]) do end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local m = redis.call('HMGET', KEYS[1], 'h', 'x', 's', 'W')
local waiting = tonumber(m[4]) or 0
if (not m[1] or m[1] == '' or tonumber(m[2]) <= now) and waiting == 0 then
  local f = redis.call('HINCRBY', KEYS[1], 'f', 1)
  redis.call('HSET', KEYS[1], 'h', ARGV[1], 'x', now + tonumber(ARGV[3]))
  return f
end
local s = (tonumber(m[3]) or 0) + 1
redis.call('ZADD', KEYS[2], s, ARGV[1] .. ' ' .. (now + tonumber(ARGV[4])))
redis.call('HSET', KEYS[1], 's', s, 'W', waiting + 1)
return -(waiting + 1)";

// KEYS: the gate's hash, line. ARGV: id, spin. Replies '<next>:<fence>',
// or nil.
const FENCED_LEAVE: &str = r"
for _ = 1, tonumber(ARGV[2]) do end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local m = redis.call('HMGET', KEYS[1], 'h', 'f', 'W')
if m[1] ~= ARGV[1] then return false end
local waiting, f = tonumber(m[3]) or 0, tonumber(m[2])
while waiting > 0 do
  local head = redis.call('ZPOPMIN', KEYS[2])[1]
  waiting = waiting - 1
  if not head then break end
  local id, deadline = string.match(head, '^(%w+) (%d+)$')
  if tonumber(deadline) > now then
    f = f + 1
    redis.call('HSET', KEYS[1], 'h', id, 'x', deadline, 'f', f, 'W', waiting)
    local handed = id .. ':' .. f
    redis.call('PUBLISH', KEYS[1], handed)
    return handed
  end
end
redis.call('HSET', KEYS[1], 'h', '', 'W', waiting)
return false";

type Error = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let url = args
        .get(1)
        .map_or("redis://127.0.0.1:6379", String::as_str)
        .to_owned();
    let workers: usize = args.get(2).map_or(Ok(50), |w| w.parse())?;
    let seconds: u64 = args.get(3).map_or(Ok(5), |s| s.parse())?;
    let fenced = match std::env::var("MODE").as_deref() {
        Ok("fenced") => true,
        Ok("bare") | Err(_) => false,
        Ok(other) => return Err(format!("MODE must be bare or fenced, not {other:?}").into()),
    };
    let spin: u64 = std::env::var("SPIN").map_or(Ok(0), |s| s.parse())?;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?
        .block_on(run(url, workers, Duration::from_secs(seconds), fenced, spin))
}

async fn run(url: String, workers: usize, seconds: Duration, fenced: bool, spin: u64) -> Result<(), Error> {
    let conn = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let tag = format!("{{floor:{}}}", std::process::id());
    let keys = Arc::new([format!("{tag}m"), format!("{tag}q")]);
    let (enter, leave) = if fenced {
        (Script::new(FENCED_ENTER), Script::new(FENCED_LEAVE))
    } else {
        (Script::new(BARE_ENTER), Script::new(BARE_LEAVE))
    };
    let scripts = Arc::new((enter, leave));
    // The hand-offs are published on a channel this process listens to,
    // as a gate's are (the messages are read and dropped: the reply woke
    // the waiter already).
    let _listening = if fenced {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let sep = if url.contains('?') { '&' } else { '?' };
        let mut sub = redis::Client::open(format!("{url}{sep}protocol=resp3"))?
            .get_multiplexed_async_connection_with_config(
                &redis::AsyncConnectionConfig::new().set_push_sender(tx),
            )
            .await?;
        sub.subscribe(&keys[0]).await?;
        tokio::spawn(async move { while rx.recv().await.is_some() {} });
        Some(sub)
    } else {
        None
    };
    let wakes: Arc<Mutex<HashMap<String, Arc<Notify>>>> = Arc::default();
    let from = Instant::now() + Duration::from_secs(1);
    let end = from + seconds;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (mut conn, keys, scripts, wakes) = (conn.clone(), keys.clone(), scripts.clone(), wakes.clone());
        tasks.push(tokio::spawn(async move {
            let me = format!("w{w}");
            let wake = Arc::new(Notify::new());
            wakes
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(me.clone(), wake.clone());
            let mut acquire_us = Vec::new();
            while Instant::now() < end {
                let t0 = Instant::now();
                let mut call = scripts.0.key(&keys[0]);
                call.key(&keys[1]).arg(&me).arg(spin);
                if fenced {
                    call.arg(30_000).arg(10_000);
                }
                let answer: i64 = call.invoke_async(&mut conn).await?;
                if answer <= 0 {
                    // (Notify keeps a wake-up that came first.)
                    wake.notified().await;
                }
                if t0 >= from {
                    acquire_us.push(t0.elapsed().as_micros());
                }
                tokio::task::yield_now().await;
                let next: Option<String> = scripts
                    .1
                    .key(&keys[0])
                    .key(&keys[1])
                    .arg(&me)
                    .arg(spin)
                    .invoke_async(&mut conn)
                    .await?;
                if let Some(next) = next {
                    let id = next.split(':').next().unwrap_or_default();
                    let waiter = wakes
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .get(id)
                        .cloned();
                    if let Some(waiter) = waiter {
                        waiter.notify_one();
                    }
                }
            }
            Ok::<_, redis::RedisError>(acquire_us)
        }));
    }
    let mut all = Vec::new();
    let mut per_worker = Vec::new();
    for t in tasks {
        let v = t.await??;
        per_worker.push(v.len());
        all.extend(v);
    }
    all.sort_unstable();
    let ms = |p: f64| {
        all.get((all.len() as f64 * p) as usize)
            .map_or(0.0, |&us| us as f64 / 1000.0)
    };
    println!(
        "{}",
        serde_json::json!({
            "case": if fenced { "fifo_floor_fenced" } else { "fifo_floor_bare" },
            "workers": workers,
            "spin": spin,
            "ops_per_s": (all.len() as f64 / seconds.as_secs_f64()).round(),
            "acquire_p50_ms": ms(0.50),
            "acquire_p99_ms": ms(0.99),
            "per_worker_min": per_worker.iter().min(),
            "per_worker_max": per_worker.iter().max(),
        })
    );
    Ok(())
}
