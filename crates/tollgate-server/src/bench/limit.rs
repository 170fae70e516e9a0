//! `tollgate bench limit`: GCRA decisions per second through the library,
//! spread over `--keys` keys, one JSON line.

use std::time::{Duration, Instant};

use serde_json::json;
use tollgate::{Limit, Rate, RateLimiter};

use super::args::BenchArgs;
use super::support::{each_worker, round3, store_for};
use crate::exit;

pub(super) async fn run(args: &BenchArgs) -> i32 {
    if args.keys == 0 || args.keys > 10_000_000 {
        eprintln!("tollgate: --keys must be between 1 and 10000000");
        return exit::USAGE;
    }
    let store = match store_for(args).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    // 10,000/s with a burst of 1,000 per key: at the rates measured here
    // nearly every decision allows and so writes, the costlier path.
    let limiter = match Rate::per_second(10_000)
        .and_then(|r| Limit::gcra(r, 1_000))
        .and_then(|l| RateLimiter::new(&store, &format!("bench:{:x}", std::process::id()), l))
    {
        Ok(l) => l.timeout(Duration::from_secs(5)),
        Err(e) => {
            eprintln!("tollgate: {e}");
            return exit::SOFTWARE;
        }
    };
    let keys: std::sync::Arc<Vec<String>> =
        std::sync::Arc::new((0..args.keys).map(|i| format!("key:{i}")).collect());
    let end = Instant::now() + args.seconds;
    let started = Instant::now();
    let results = each_worker(args.workers, |w| {
        let (limiter, keys) = (limiter.clone(), keys.clone());
        async move {
            let (mut allowed, mut refused, mut errors) = (0u64, 0u64, 0u64);
            let mut i = w * 7919;
            // Check the clock every 64 decisions: reading it costs about
            // as much as an in-memory decision.
            'run: loop {
                for _ in 0..64 {
                    i = (i + 1) % keys.len();
                    match limiter.check(&keys[i], 1).await {
                        Ok(d) if d.allowed => allowed += 1,
                        Ok(_) => refused += 1,
                        Err(_) => errors += 1,
                    }
                }
                if Instant::now() >= end {
                    break 'run;
                }
            }
            (allowed, refused, errors)
        }
    })
    .await;
    let (mut allowed, mut refused, mut errors) = (0, 0, 0);
    for r in results {
        let (a, r, e) = r.unwrap_or((0, 0, 1));
        allowed += a;
        refused += r;
        errors += e;
    }
    let secs = started.elapsed().as_secs_f64();
    let n = allowed + refused;
    println!(
        "{}",
        json!({
            "peer": "tollgate", "case": "limit_gcra", "store": store.kind(), "workers": args.workers,
            "threads": if args.single_thread { 1 } else { 0 }, "keys": args.keys,
            "seconds": round3(secs),
            "decisions_per_s": (n as f64 / secs).round(), "allowed": allowed, "refused": refused,
            "errors": errors,
        })
    );
    0
}
