//! `tollgate bench recovery`: how long the durable embedded store takes to
//! come back with a large state, and what it then holds in memory. One
//! run fills a fresh data directory (--jobs queued jobs of 100 bytes in
//! one queue, --keys gates each holding a lease) and prints its resident
//! memory; a second run, in a new process, with --reopen recovers it and
//! prints the time to ready and the resident memory after.
//!
//! `tollgate bench snapshot`: how long requests wait while the durable
//! store takes snapshots. It fills a fresh data directory as above, then
//! --workers tasks take and give back the gates' permits and push, claim
//! and ack jobs of the big queue for --seconds without snapshots, and as
//! long again with snapshots taken back to back: each operation's latency
//! in both phases, and the snapshots' durations.

use std::time::{Duration, Instant};

use rand::Rng;
use serde_json::json;
use tollgate::{Entered, Gate, GateOptions, JobQueue, PushOptions, Store};

use super::args::BenchArgs;
use super::support::{each_worker, micros, percentile_ms};
use crate::exit;

pub(super) async fn run(args: &BenchArgs) -> i32 {
    if args.data_dir.is_none() {
        eprintln!("tollgate: `bench recovery` needs --data-dir DIR");
        return exit::USAGE;
    }
    if args.reopen {
        let started = Instant::now();
        let store = match super::support::store_for(args).await {
            Ok(s) => s,
            Err(code) => return code,
        };
        let took = started.elapsed();
        let recovery = store.durable_stats().map(|d| d.recovery).unwrap_or_default();
        let queue = JobQueue::new(&store, "recovery").expect("a valid name");
        let stats = queue.stats().await.ok();
        let out = json!({
            "peer": "tollgate", "case": "recovery_open", "store": super::support::store_label(&store),
            "ready_ms": took.as_millis() as u64,
            "snapshot_names": recovery.snapshot_names,
            "replayed_records": recovery.replayed,
            "jobs_ready": stats.map(|s| s.ready),
            "rss_mib": super::http::rss_mib(std::process::id()),
        });
        println!("{out}");
        store.close();
        return 0;
    }
    let store = match super::support::store_for(args).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let started = Instant::now();
    if let Err(code) = fill(&store, args).await {
        return code;
    }
    let filled = started.elapsed();
    let out = json!({
        "peer": "tollgate", "case": "recovery_fill", "store": super::support::store_label(&store),
        "jobs": args.jobs, "gates": args.keys, "fill_ms": filled.as_millis() as u64,
        "rss_mib": super::http::rss_mib(std::process::id()),
        "log_bytes": store.durable_stats().map(|d| d.log.log_bytes),
    });
    println!("{out}");
    store.close();
    0
}

/// The queue `fill` fills, and the gates' names.
const QUEUE: &str = "recovery";
const GATE_PREFIX: &str = "recovery-";

/// --jobs queued jobs of 100 bytes in one queue, and --keys gates of four
/// permits each holding one lease for a day.
async fn fill(store: &Store, args: &BenchArgs) -> Result<(), i32> {
    let queue = JobQueue::new(store, QUEUE).expect("a valid name");
    let payload = vec![b'x'; 100];
    let mut pushed = 0u64;
    while pushed < args.jobs {
        let n = (args.jobs - pushed).min(1000);
        let batch: Vec<_> = (0..n).map(|_| (&payload, PushOptions::default())).collect();
        if let Err(e) = queue.push_many(&batch).await {
            eprintln!("tollgate: {e}");
            return Err(exit::for_error(&e));
        }
        pushed += n;
    }
    for i in 0..args.keys {
        if let Err(e) = gate(store, i).enter(1, false).await {
            eprintln!("tollgate: {e}");
            return Err(exit::for_error(&e));
        }
    }
    Ok(())
}

fn gate(store: &Store, i: usize) -> Gate {
    let options = GateOptions {
        ttl: Duration::from_secs(24 * 3600),
        heartbeat: Duration::from_secs(24 * 3600),
        auto_renew: false,
        fair: true,
        max_hold: None,
    };
    Gate::new(store, &format!("{GATE_PREFIX}{i}"), Some(4), options).expect("a valid name")
}

pub(super) async fn stall(args: &BenchArgs) -> i32 {
    if args.data_dir.is_none() || args.keys == 0 {
        eprintln!("tollgate: `bench snapshot` needs --data-dir DIR and --keys N (at least 1)");
        return exit::USAGE;
    }
    let store = match super::support::store_for(args).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    if let Err(code) = fill(&store, args).await {
        return code;
    }
    // The fill's log into a snapshot first, as on a server that has run
    // a while.
    if let Err(e) = store.snapshot_now() {
        eprintln!("tollgate: snapshot: {e}");
        return exit::for_error(&e);
    }
    for snapshots in [false, true] {
        println!("{}", operations(&store, args, snapshots).await);
    }
    store.close();
    0
}

/// --workers tasks for --seconds, half of them taking and giving back a
/// random gate's permit, half pushing, claiming and acking a job of the
/// big queue, each operation timed; with `snapshots`, a thread takes
/// snapshots back to back meanwhile.
async fn operations(store: &Store, args: &BenchArgs, snapshots: bool) -> serde_json::Value {
    let end = Instant::now() + args.seconds;
    let snapshotter = snapshots.then(|| {
        let store = store.clone();
        std::thread::spawn(move || {
            let mut took = Vec::new();
            while Instant::now() < end {
                let started = Instant::now();
                if let Err(e) = store.snapshot_now() {
                    eprintln!("tollgate: snapshot: {e}");
                    break;
                }
                took.push(micros(started.elapsed()));
            }
            took
        })
    });
    let keys = args.keys;
    let results = each_worker(args.workers, |w| {
        let store = store.clone();
        async move {
            let queue = JobQueue::new(&store, QUEUE).expect("a valid name");
            let mut samples: Vec<u32> = Vec::new();
            let mut errors = 0u64;
            while Instant::now() < end {
                let started = Instant::now();
                if w % 2 == 0 {
                    let g = gate(&store, rand::rng().random_range(0..keys));
                    match g.enter(1, false).await {
                        Ok(Entered::Granted(granted)) => {
                            samples.push(micros(started.elapsed()));
                            let started = Instant::now();
                            if g.leave(&granted.token).await.is_err() {
                                errors += 1;
                            }
                            samples.push(micros(started.elapsed()));
                        }
                        _ => errors += 1,
                    }
                } else {
                    if queue.push(b"x", &PushOptions::default()).await.is_err() {
                        errors += 1;
                    }
                    samples.push(micros(started.elapsed()));
                    let started = Instant::now();
                    match queue.claim().await {
                        Ok(Some(job)) => {
                            samples.push(micros(started.elapsed()));
                            let started = Instant::now();
                            if queue.ack(&job.id, job.fence).await.is_err() {
                                errors += 1;
                            }
                            samples.push(micros(started.elapsed()));
                        }
                        _ => errors += 1,
                    }
                }
            }
            (samples, errors)
        }
    })
    .await;
    let took = snapshotter
        .map(|t| t.join().unwrap_or_default())
        .unwrap_or_default();
    let (mut gates, mut jobs, mut errors) = (Vec::new(), Vec::new(), 0);
    for (w, result) in results.into_iter().enumerate() {
        let Ok((samples, e)) = result else {
            errors += 1;
            continue;
        };
        if w % 2 == 0 { &mut gates } else { &mut jobs }.extend(samples);
        errors += e;
    }
    let operations = gates.len() + jobs.len();
    let mut all = [gates.as_slice(), jobs.as_slice()].concat();
    let mut took_sorted = took.clone();
    json!({
        "peer": "tollgate", "case": "snapshot_stall", "store": super::support::store_label(store),
        "snapshots": took.len(),
        "snapshot_p50_ms": percentile_ms(&mut took_sorted, 0.50),
        "snapshot_max_ms": percentile_ms(&mut took_sorted, 1.0),
        "jobs": args.jobs, "gates": keys, "workers": args.workers,
        "operations": operations,
        "per_second": (operations as f64 / args.seconds.as_secs_f64()).round(),
        "p50_ms": percentile_ms(&mut all, 0.50),
        "p99_ms": percentile_ms(&mut all, 0.99),
        "p999_ms": percentile_ms(&mut all, 0.999),
        "max_ms": percentile_ms(&mut all, 1.0),
        "gate_p99_ms": percentile_ms(&mut gates, 0.99),
        "queue_p99_ms": percentile_ms(&mut jobs, 0.99),
        "queue_max_ms": percentile_ms(&mut jobs, 1.0),
        "rss_mib": super::http::rss_mib(std::process::id()),
        "errors": errors,
    })
}
