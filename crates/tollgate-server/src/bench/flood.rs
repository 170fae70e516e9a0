//! `tollgate bench flood`: does a flood of status requests on one long line
//! hold up an unrelated gate? Builds a line of --line tickets on one gate,
//! then measures enter+leave on another gate, first alone (the baseline)
//! and then while --workers tasks ask about random tickets of the long
//! line as fast as they can. One JSON line.
//!
//! On the embedded store every call completes without waiting, so each
//! flooding task yields after each call, as a server's request tasks do
//! between requests; otherwise they would keep their threads to themselves
//! and the measure would be of the scheduler, not of the store.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::{Entered, Gate, GateOptions, Store};

use super::args::BenchArgs;
use super::support::{micros, percentile_ms, store_for};
use crate::exit;

/// Enter and leave latencies (µs) on the quiet gate for `seconds`, one pair
/// every millisecond.
async fn measure(gate: &Gate, seconds: Duration) -> Result<(Vec<u32>, Vec<u32>), tollgate::Error> {
    let (mut enters, mut leaves) = (Vec::new(), Vec::new());
    let end = Instant::now() + seconds;
    while Instant::now() < end {
        let t0 = Instant::now();
        let entered = gate.enter(1, false).await?;
        let t1 = Instant::now();
        if let Entered::Granted(g) = entered {
            gate.leave(&g.token).await?;
            leaves.push(micros(t1.elapsed()));
        }
        enters.push(micros(t1 - t0));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok((enters, leaves))
}

/// A small xorshift generator: which ticket to ask about next.
struct Pick(u64);

impl Pick {
    fn new(seed: u64) -> Pick {
        Pick(seed | 1)
    }

    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn summary(enters: &mut [u32], leaves: &mut [u32]) -> serde_json::Value {
    serde_json::json!({
        "n": enters.len(),
        "enter_p50_ms": percentile_ms(enters, 0.5),
        "enter_p99_ms": percentile_ms(enters, 0.99),
        "enter_max_ms": percentile_ms(enters, 1.0),
        "leave_p50_ms": percentile_ms(leaves, 0.5),
        "leave_p99_ms": percentile_ms(leaves, 0.99),
    })
}

pub(super) async fn run(args: &BenchArgs) -> i32 {
    if args.line == 0 || args.line > 10_000_000 {
        eprintln!("tollgate: --line must be between 1 and 10000000");
        return exit::USAGE;
    }
    let store: Store = match store_for(args).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    match flood(args, &store).await {
        Ok(report) => {
            println!("{report}");
            0
        }
        Err(e) => {
            eprintln!("tollgate: {e}");
            exit::for_error(&e)
        }
    }
}

async fn flood(args: &BenchArgs, store: &Store) -> Result<serde_json::Value, tollgate::Error> {
    let long = Duration::from_secs(3600);
    let options = GateOptions {
        ttl: long,
        heartbeat: long,
        auto_renew: false,
        fair: true,
        max_hold: None,
    };
    let seed = u64::from(std::process::id()) << 32 | u64::from(Instant::now().elapsed().subsec_nanos());
    let run = format!("{seed:x}");
    let busy = Gate::new(
        store,
        &format!("bench:flood:{run}:busy"),
        Some(1),
        options.clone(),
    )?;
    let quiet = Gate::new(store, &format!("bench:flood:{run}:quiet"), Some(1000), options)?;

    // The long line: one holder, then --line tickets (50 at a time).
    busy.enter(1, false).await?;
    let started = Instant::now();
    let mut tickets = Vec::with_capacity(args.line as usize);
    while tickets.len() < args.line as usize {
        let n = 50.min(args.line as usize - tickets.len());
        let batch = futures_util::future::join_all((0..n).map(|_| busy.enter(1, true))).await;
        for entered in batch {
            if let Entered::Queued { ticket, .. } = entered? {
                tickets.push(ticket);
            }
        }
    }
    let fill_s = started.elapsed().as_secs_f64();
    let tickets = Arc::new(tickets);

    let (mut base_enters, mut base_leaves) = measure(&quiet, args.seconds).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let statuses = Arc::new(AtomicU64::new(0));
    let flooders: Vec<_> = (0..args.workers)
        .map(|w| {
            let (busy, tickets, stop, statuses) =
                (busy.clone(), tickets.clone(), stop.clone(), statuses.clone());
            let mut pick = Pick::new(seed ^ (w as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let t = &tickets[pick.below(tickets.len())];
                    if busy.status(t).await.is_ok() {
                        statuses.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    let flood_started = Instant::now();
    let measured = measure(&quiet, args.seconds).await;
    stop.store(true, Ordering::Relaxed);
    let flood_s = flood_started.elapsed().as_secs_f64();
    for f in flooders {
        let _ = f.await;
    }
    let (mut enters, mut leaves) = measured?;
    let status_per_s = statuses.load(Ordering::Relaxed) as f64 / flood_s;
    Ok(serde_json::json!({
        "peer": "tollgate",
        "case": "status_flood",
        "store": store.kind(),
        "line": args.line,
        "flood_tasks": args.workers,
        "seconds": args.seconds.as_secs_f64(),
        "fill_s": (fill_s * 1000.0).round() / 1000.0,
        "flood_status_per_s": status_per_s.round(),
        "baseline": summary(&mut base_enters, &mut base_leaves),
        "during_flood": summary(&mut enters, &mut leaves),
    }))
}
