//! `tollgate bench recovery`: how long the durable embedded store takes to
//! come back with a large state, and what it then holds in memory. One
//! run fills a fresh data directory (--jobs queued jobs of 100 bytes in
//! one queue, --keys gates each holding a lease) and prints its resident
//! memory; a second run, in a new process, with --reopen recovers it and
//! prints the time to ready and the resident memory after.

use std::time::{Duration, Instant};

use serde_json::json;
use tollgate::{Gate, GateOptions, JobQueue, PushOptions};

use crate::cli::BenchArgs;
use crate::exit;

pub(super) async fn run(args: &BenchArgs) -> i32 {
    if args.data_dir.is_none() {
        eprintln!("tollgate: `bench recovery` needs --data-dir DIR");
        return exit::USAGE;
    }
    if args.reopen {
        let started = Instant::now();
        let store = match super::store_for(args).await {
            Ok(s) => s,
            Err(code) => return code,
        };
        let took = started.elapsed();
        let recovery = store.durable_stats().map(|d| d.recovery).unwrap_or_default();
        let queue = JobQueue::new(&store, "recovery").expect("a valid name");
        let stats = queue.stats().await.ok();
        let out = json!({
            "peer": "tollgate", "case": "recovery_open", "store": super::store_label(&store),
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
    let store = match super::store_for(args).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let started = Instant::now();
    let queue = JobQueue::new(&store, "recovery").expect("a valid name");
    let payload = vec![b'x'; 100];
    let mut pushed = 0u64;
    while pushed < args.jobs {
        let n = (args.jobs - pushed).min(1000);
        let batch: Vec<_> = (0..n).map(|_| (&payload, PushOptions::default())).collect();
        if let Err(e) = queue.push_many(&batch).await {
            eprintln!("tollgate: {e}");
            return exit::for_error(&e);
        }
        pushed += n;
    }
    let options = GateOptions {
        ttl: Duration::from_secs(24 * 3600),
        heartbeat: Duration::from_secs(24 * 3600),
        auto_renew: false,
        fair: true,
    };
    for i in 0..args.keys {
        let gate =
            Gate::new(&store, &format!("recovery-{i}"), Some(4), options.clone()).expect("a valid name");
        if let Err(e) = gate.enter(1, false).await {
            eprintln!("tollgate: {e}");
            return exit::for_error(&e);
        }
    }
    let filled = started.elapsed();
    let out = json!({
        "peer": "tollgate", "case": "recovery_fill", "store": super::store_label(&store),
        "jobs": pushed, "gates": args.keys, "fill_ms": filled.as_millis() as u64,
        "rss_mib": super::http::rss_mib(std::process::id()),
        "log_bytes": store.durable_stats().map(|d| d.log.log_bytes),
    });
    println!("{out}");
    store.close();
    0
}
