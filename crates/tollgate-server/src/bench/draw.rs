//! `tollgate bench draw`: a scheduled opening of a pre-queue of --line
//! visitors in a draw (`Gate::enter_drawn`, as a room with `order_at_open
//! = "random"` puts them), on --redis or the embedded store. --workers
//! tasks ask random visitors' status without pause before, during and
//! after the opening; the report gives the fill rate, the status latency
//! before the opening and in the second from it (where the step that ends
//! the draw runs: its record of every ticket is written then), the
//! slowest call of that second, and checks that the draw's record holds
//! every visitor and exactly the capacity was admitted (draw_opening).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;
use serde_json::json;
use tollgate::{Door, DoorChange, Entered, Gate, GateOptions, TicketStatus};

use super::args::BenchArgs;
use super::support::{micros, now_ms, percentile_ms, store_for, store_label};
use crate::exit;

/// The gate's capacity: admitted at the opening in the same step.
const CAPACITY: u32 = 100;
/// How long after the fill the opening comes (the baseline's window).
const BEFORE: Duration = Duration::from_millis(2_000);
/// How long after the opening the workers go on.
const AFTER: Duration = Duration::from_millis(2_000);

pub(super) async fn run(args: &BenchArgs) -> i32 {
    let store = match store_for(args).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let size = args.line;
    if size == 0 || size > 1_000_000 {
        eprintln!("tollgate: --line (the pre-queue) must be between 1 and 1000000");
        return exit::USAGE;
    }
    let long = Duration::from_secs(1_800);
    let options = GateOptions {
        ttl: long,
        heartbeat: long,
        auto_renew: false,
        fair: true,
        max_hold: None,
    };
    let name = format!("bench-draw-{:x}-{}", std::process::id(), now_ms());
    let gate = match Gate::new(&store, &name, Some(CAPACITY), options) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("tollgate: {e}");
            return exit::SOFTWARE;
        }
    };
    // Held for an opening far ahead while the pre-queue fills.
    let hold = |opens_at_ms| DoorChange {
        door: Door {
            opens_at_ms: Some(opens_at_ms),
            ..Door::default()
        },
        ..DoorChange::default()
    };
    if let Err(e) = gate.set_door(&hold(now_ms() + 3_600_000)).await {
        eprintln!("tollgate: {e}");
        return exit::for_error(&e);
    }
    let workers = args.workers.max(1) as u64;
    let filled = Instant::now();
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            let gate = gate.clone();
            let n = size / workers + u64::from(w < size % workers);
            tokio::spawn(async move {
                let mut mine = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let key = rand::rng().random_range(0..tollgate::DRAW_SPAN);
                    if let Ok(Entered::Queued { ticket, .. }) = gate.enter_drawn(1, None, |_| key).await {
                        mine.push(ticket);
                    }
                }
                mine
            })
        })
        .collect();
    let mut tickets = Vec::with_capacity(size as usize);
    for t in tasks {
        tickets.extend(t.await.unwrap_or_default());
    }
    let fill_secs = filled.elapsed().as_secs_f64();
    let tickets = Arc::new(tickets);

    // The opening, BEFORE from now by the store's clock (this machine's:
    // Redis runs beside it); the workers ask throughout.
    let opens_at = now_ms() + BEFORE.as_millis() as u64;
    if let Err(e) = gate.set_door(&hold(opens_at)).await {
        eprintln!("tollgate: {e}");
        return exit::for_error(&e);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let askers: Vec<_> = (0..workers)
        .map(|_| {
            let (gate, tickets, stop) = (gate.clone(), tickets.clone(), stop.clone());
            tokio::spawn(async move {
                // (start, ms since the epoch; latency, µs; answered)
                let mut samples: Vec<(u64, u32, bool)> = Vec::new();
                while !stop.load(Ordering::Relaxed) && !tickets.is_empty() {
                    let t = &tickets[rand::rng().random_range(0..tickets.len())];
                    let (at, t0) = (now_ms(), Instant::now());
                    let ok = matches!(
                        gate.status(t).await,
                        Ok(TicketStatus::Queued(_) | TicketStatus::Granted(_))
                    );
                    samples.push((at, micros(t0.elapsed()), ok));
                    // (The embedded store answers without ever waiting:
                    // let the timer that stops this loop run.)
                    tokio::task::yield_now().await;
                }
                samples
            })
        })
        .collect();
    tokio::time::sleep(BEFORE + AFTER).await;
    stop.store(true, Ordering::Relaxed);
    let mut samples = Vec::new();
    for a in askers {
        samples.extend(a.await.unwrap_or_default());
    }
    let record = gate.last_draw().await;
    let stats = gate.stats().await;
    let errors = samples.iter().filter(|s| !s.2).count();
    let window = |from: u64, to: u64| -> Vec<u32> {
        samples
            .iter()
            .filter(|s| s.0 >= from && s.0 < to)
            .map(|s| s.1)
            .collect()
    };
    let mut before = window(opens_at.saturating_sub(BEFORE.as_millis() as u64), opens_at);
    let mut during = window(opens_at, opens_at + 1_000);
    let rate = |v: &[u32], ms: u64| (v.len() as f64 * 1000.0 / ms as f64).round();
    let (drawn, admitted) = match (&record, &stats) {
        (Ok(r), Ok(s)) => (r.tickets.len(), s.holders),
        _ => (0, 0),
    };
    let _ = gate.clear_line().await;
    println!(
        "{}",
        json!({
            "peer": "tollgate", "case": "draw_opening", "store": store_label(&store),
            "pre_queue": tickets.len(), "workers": workers,
            "fill_joins_per_s": (tickets.len() as f64 / fill_secs).round(),
            "status_per_s_before": rate(&before, BEFORE.as_millis() as u64),
            "status_p50_ms_before": percentile_ms(&mut before, 0.5),
            "status_p99_ms_before": percentile_ms(&mut before, 0.99),
            "status_per_s_opening_second": rate(&during, 1_000),
            "status_p50_ms_opening_second": percentile_ms(&mut during, 0.5),
            "status_p99_ms_opening_second": percentile_ms(&mut during, 0.99),
            "status_max_ms_opening_second": percentile_ms(&mut during, 1.0),
            "drawn": drawn, "admitted": admitted, "errors": errors,
        })
    );
    if drawn != tickets.len() || admitted != u64::from(CAPACITY).min(tickets.len() as u64) || errors > 0 {
        eprintln!("tollgate: the opening did not draw every visitor or admit exactly the capacity");
        return exit::SOFTWARE;
    }
    0
}
