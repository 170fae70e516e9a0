//! Acquire+release pairs per second on one Redis, each of 50 tasks on its
//! own lock, over one multiplexed connection, for one shape of pair:
//!
//!   peer      SET NX PX, then a GET + compare + DEL script (redis-semaphore's
//!             Mutex, Redlock on one node: no fence, no server time)
//!   minimal   the least a fenced, server-timed pair does (as
//!             scripts/bench-redis-floor's `minimal`: TIME, HMGET, HSET in
//!             each script)
//!   tollgate  this tree's gate scripts on a mutex (enter and leave, put
//!             composed as store/lua.rs does), without the
//!             library around them
//!   pass      a non-fair semaphore's chain without the library: one gate
//!             of capacity 5, five tasks (FLOOR_WORKERS), each holding a
//!             permit and passing it on with this tree's leave script (a
//!             release and a grant in one call, as `Lease::release` does on
//!             a non-fair handle), then holding the passed lease and
//!             passing it on again; counts passes
//!
//! Usage: floor-rate REDIS_URL SHAPE [SECONDS] [LUA_DIR]; prints one JSON
//! line. Any unexpected answer panics (a shape that does not do its job
//! does not get a figure).

use std::time::{Duration, Instant};

const MINIMAL_ACQUIRE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local m = redis.call('HMGET', KEYS[1], 'c', 'f', 'h', 'k', 'W', 'E', 'G')
if m[4] or (m[3] and m[3] ~= '') then return {0} end
local f = (tonumber(m[2]) or now * 1000) + 1
redis.call('HSET', KEYS[1], 'h', ARGV[1] .. ' ' .. (now + tonumber(ARGV[2])), 'f', f)
return {1, f, tonumber(ARGV[2])}
";
const MINIMAL_RELEASE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local m = redis.call('HMGET', KEYS[1], 'h', 'k', 'W', 'r', 'l', 'E')
if string.match(m[1] or '', '^(%w+)') ~= ARGV[1] then return {0} end
local r, l = tonumber(m[4]), tonumber(m[5]) or 0
if l > 0 then if r == nil then r = now - l else r = math.floor(r * 0.8 + (now - l) * 0.2 + 0.5) end end
redis.call('HSET', KEYS[1], 'h', '', 'l', now, 'r', r or 0)
return {1}
";
const PEER_RELEASE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
/// Concurrent workers unless FLOOR_WORKERS says otherwise.
const WORKERS: usize = 50;
const TTL_MS: u64 = 10_000;
/// The `pass` shape's gate and its capacity (its default number of tasks).
const PASS_GATE: &str = "tollgate:gate:{floorpass}:m";
const PASS_CAPACITY: usize = 5;

#[derive(Clone, Copy)]
enum Shape {
    Peer,
    Minimal,
    Tollgate,
    Pass,
}

struct Scripts {
    acquire: redis::Script,
    release: redis::Script,
}

fn scripts(shape: Shape, lua_dir: &str) -> Scripts {
    // As store/lua.rs composes a script (scripts/lua-compose).
    let gate = |entry: &str| {
        let out = std::process::Command::new("scripts/lua-compose")
            .args([lua_dir, entry])
            .output()
            .unwrap_or_else(|e| panic!("scripts/lua-compose (run from the repository's root): {e}"));
        assert!(
            out.status.success(),
            "scripts/lua-compose {lua_dir} {entry}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("a script is text")
    };
    match shape {
        Shape::Peer => Scripts {
            acquire: redis::Script::new("return 0"),
            release: redis::Script::new(PEER_RELEASE),
        },
        Shape::Minimal => Scripts {
            acquire: redis::Script::new(MINIMAL_ACQUIRE),
            release: redis::Script::new(MINIMAL_RELEASE),
        },
        Shape::Tollgate | Shape::Pass => Scripts {
            acquire: redis::Script::new(&gate("enter.lua")),
            release: redis::Script::new(&gate("leave.lua")),
        },
    }
}

/// Runs `script` on `key` with `args`: the first number of its reply.
async fn first_number(
    script: &redis::Script,
    con: &mut redis::aio::MultiplexedConnection,
    key: &str,
    args: &[&str],
) -> i64 {
    let mut call = script.key(key);
    for a in args {
        call.arg(*a);
    }
    let reply: redis::Value = call.invoke_async(con).await.expect("script");
    match &reply {
        redis::Value::Int(n) => *n,
        redis::Value::Array(v) => match v.first() {
            Some(redis::Value::Int(n)) => *n,
            _ => panic!("unexpected reply {reply:?}"),
        },
        _ => panic!("unexpected reply {reply:?}"),
    }
}

/// One acquire+release pair of `shape` on worker `w`'s lock.
async fn pair(shape: Shape, s: &Scripts, con: &mut redis::aio::MultiplexedConnection, w: usize, token: &str) {
    let ttl = TTL_MS.to_string();
    let (key, acquire, release): (String, Vec<&str>, Vec<&str>) = match shape {
        Shape::Pass => unreachable!("a chain, not pairs"),
        Shape::Peer => {
            let key = format!("floor:{w}");
            let set: Option<String> = redis::cmd("SET")
                .arg(&key)
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(TTL_MS)
                .query_async(con)
                .await
                .expect("SET");
            assert!(set.is_some(), "the lock was taken");
            assert_eq!(first_number(&s.release, con, &key, &[token]).await, 1);
            return;
        }
        Shape::Minimal => (format!("floor:{{{w}}}:m"), vec![token, &ttl], vec![token]),
        // enter's ARGV as a Lock sends it (the short form of
        // lone_enter.lua): id, ttl, heartbeat, queue; leave's: id, keep
        // ('': none), the one-permit hint a Lock sends.
        Shape::Tollgate => (
            format!("tollgate:gate:{{floor{w}}}:m"),
            vec![token, &ttl, &ttl, "0"],
            vec![token, "", "1"],
        ),
    };
    assert_eq!(
        first_number(&s.acquire, con, &key, &acquire).await,
        1,
        "not granted"
    );
    assert_eq!(
        first_number(&s.release, con, &key, &release).await,
        1,
        "not released"
    );
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: floor-rate REDIS_URL peer|minimal|tollgate|pass [SECONDS] [LUA_DIR]";
    let (url, shape_name) = match (args.get(1), args.get(2)) {
        (Some(u), Some(s)) => (u.clone(), s.clone()),
        _ => panic!("{usage}"),
    };
    let shape = match shape_name.as_str() {
        "peer" => Shape::Peer,
        "minimal" => Shape::Minimal,
        "tollgate" => Shape::Tollgate,
        "pass" => Shape::Pass,
        _ => panic!("{usage}"),
    };
    let seconds: u64 = args.get(3).map_or(5, |s| s.parse().expect("SECONDS"));
    let lua_dir = args
        .get(4)
        .cloned()
        .unwrap_or_else(|| "crates/tollgate/src/gate/lua".into());
    let con = redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    // One second of warm-up (scripts loaded, connection busy), as the
    // peers' harness does, then the measured run.
    let warm_until = Instant::now() + Duration::from_secs(1);
    let end = warm_until + Duration::from_secs(seconds);
    let default_workers = if matches!(shape, Shape::Pass) {
        PASS_CAPACITY
    } else {
        WORKERS
    };
    let workers: usize =
        std::env::var("FLOOR_WORKERS").map_or(default_workers, |w| w.parse().expect("FLOOR_WORKERS"));
    let mut tasks = Vec::new();
    if matches!(shape, Shape::Pass) {
        let s = scripts(shape, &lua_dir);
        let mut c = con.clone();
        // A fresh gate: a run before this one left its holders in it.
        let _: () = redis::cmd("DEL")
            .arg(PASS_GATE)
            .query_async(&mut c)
            .await
            .expect("DEL");
        let cap = workers.to_string();
        for w in 0..workers {
            // enter's full ARGV: id, permits, capacity, ttl, heartbeat,
            // queue, label, barge.
            let args = [
                &format!("t{w}x0") as &str,
                "1",
                &cap,
                "10000",
                "10000",
                "0",
                "",
                "1",
            ];
            assert_eq!(
                first_number(&s.acquire, &mut c, PASS_GATE, &args).await,
                1,
                "not granted"
            );
        }
    }
    for w in 0..workers {
        let mut con = con.clone();
        let s = scripts(shape, &lua_dir);
        tasks.push(tokio::spawn(async move {
            let mut counted = 0u64;
            let mut i = 0u64;
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    return counted;
                }
                i += 1;
                if matches!(shape, Shape::Pass) {
                    // leave's ARGV with a pass: id, keep, hint, the pass's
                    // id, permits, ttl; answered {3, fence, ttl}.
                    let (from, to) = (format!("t{w}x{}", i - 1), format!("t{w}x{i}"));
                    let args = [&from as &str, "", "", &to, "1", "10000"];
                    assert_eq!(
                        first_number(&s.release, &mut con, PASS_GATE, &args).await,
                        3,
                        "not passed"
                    );
                } else {
                    pair(shape, &s, &mut con, w, &format!("t{w}x{i}")).await;
                }
                if t0 >= warm_until {
                    counted += 1;
                }
            }
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("worker");
    }
    println!(
        "{{\"case\":\"floor_rate\",\"shape\":\"{shape_name}\",\"workers\":{workers},\"seconds\":{seconds},\"pairs_per_s\":{:.0}}}",
        total as f64 / seconds as f64
    );
}
