//! `tollgate bench rwlock` and `tollgate bench election`: the read-write
//! lock against the exclusive lock on the same workload, and how soon
//! observers see a change of leader. One JSON line per case.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use tollgate::{Election, GateOptions, Lock, RwLock, RwMode};

use super::args::BenchArgs;
use super::support::{each_worker, micros, percentile_ms, round3, store_for, store_label};
use crate::exit;

#[derive(Debug, Serialize)]
struct RwReport {
    case: &'static str,
    store: String,
    workers: usize,
    readers_percent: u32,
    hold_ms: f64,
    seconds: f64,
    /// Critical sections (acquire, hold, release) per second.
    ops_per_s: f64,
    /// The wait for the lock, readers and writers apart.
    read_wait_p50_ms: f64,
    read_wait_p99_ms: f64,
    write_wait_p50_ms: f64,
    write_wait_p99_ms: f64,
    write_wait_max_ms: f64,
    /// The most readers seen holding at once.
    max_readers: usize,
    reads: u64,
    writes: u64,
    errors: u64,
}

#[derive(Default)]
struct RwWorker {
    reads: u64,
    writes: u64,
    errors: u64,
    read_wait_us: Vec<u32>,
    write_wait_us: Vec<u32>,
}

/// `bench rwlock`: --workers tasks, --readers-percent of each one's
/// operations reads, each holding for --hold, on one read-write lock
/// (`rw_lock`) and then the same on one exclusive lock (`exclusive_lock`,
/// the baseline), for --seconds each.
pub(super) async fn rwlock(args: &BenchArgs) -> i32 {
    let store = match store_for(args).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    if args.readers_percent > 100 {
        eprintln!("tollgate: --readers-percent must be 0 to 100");
        return exit::USAGE;
    }
    let run_id = format!("{:x}", std::process::id());
    for case in ["exclusive_lock", "rw_lock"] {
        let name = format!("bench:{case}:{run_id}");
        let rw = RwLock::new(&store, &name);
        let lock = Lock::new(&store, &format!("{name}:x"));
        let (rw, lock) = match (rw, lock) {
            (Ok(r), Ok(l)) => (r, l),
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("tollgate: {e}");
                return exit::USAGE;
            }
        };
        let readers = Arc::new(AtomicUsize::new(0));
        let max_readers = Arc::new(AtomicUsize::new(0));
        let start = Instant::now();
        let end = start + args.seconds;
        let (hold, percent) = (args.hold, args.readers_percent);
        let results = each_worker(args.workers, |w| {
            let (rw, lock, readers, max_readers) =
                (rw.clone(), lock.clone(), readers.clone(), max_readers.clone());
            async move {
                let mut out = RwWorker::default();
                let mut i: u64 = w as u64;
                while Instant::now() < end {
                    // Every worker reads and writes in the same proportion,
                    // spread through its run.
                    i += 1;
                    let read = (i * 37 % 100) < u64::from(percent);
                    let t0 = Instant::now();
                    let lease = if case == "rw_lock" {
                        let mode = if read { RwMode::Shared } else { RwMode::Exclusive };
                        rw.acquire(mode, Duration::from_secs(60)).await
                    } else {
                        lock.acquire(Duration::from_secs(60)).await
                    };
                    let Ok(Some(lease)) = lease else {
                        out.errors += 1;
                        continue;
                    };
                    let waited = micros(t0.elapsed());
                    if read {
                        let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                        max_readers.fetch_max(now, Ordering::SeqCst);
                    }
                    tokio::time::sleep(hold).await;
                    if read {
                        readers.fetch_sub(1, Ordering::SeqCst);
                    }
                    if lease.release().await.is_err() {
                        out.errors += 1;
                        continue;
                    }
                    if read {
                        out.reads += 1;
                        out.read_wait_us.push(waited);
                    } else {
                        out.writes += 1;
                        out.write_wait_us.push(waited);
                    }
                }
                out
            }
        })
        .await;
        let elapsed = start.elapsed().as_secs_f64();
        let mut all = RwWorker::default();
        for r in results {
            match r {
                Ok(w) => {
                    all.reads += w.reads;
                    all.writes += w.writes;
                    all.errors += w.errors;
                    all.read_wait_us.extend(w.read_wait_us);
                    all.write_wait_us.extend(w.write_wait_us);
                }
                Err(e) => {
                    eprintln!("tollgate: a bench worker failed: {e}");
                    return exit::SOFTWARE;
                }
            }
        }
        let report = RwReport {
            case,
            store: store_label(&store),
            workers: args.workers,
            readers_percent: percent,
            hold_ms: round3(hold.as_secs_f64() * 1000.0),
            seconds: round3(elapsed),
            ops_per_s: round3((all.reads + all.writes) as f64 / elapsed),
            read_wait_p50_ms: percentile_ms(&mut all.read_wait_us, 0.5),
            read_wait_p99_ms: percentile_ms(&mut all.read_wait_us, 0.99),
            write_wait_p50_ms: percentile_ms(&mut all.write_wait_us, 0.5),
            write_wait_p99_ms: percentile_ms(&mut all.write_wait_us, 0.99),
            write_wait_max_ms: percentile_ms(&mut all.write_wait_us, 1.0),
            max_readers: max_readers.load(Ordering::SeqCst),
            reads: all.reads,
            writes: all.writes,
            errors: all.errors,
        };
        println!("{}", serde_json::to_string(&report).unwrap_or_default());
    }
    0
}

#[derive(Debug, Serialize)]
struct ElectionReport {
    case: &'static str,
    store: String,
    observers: usize,
    rounds: usize,
    /// From the change (the resign's answer, or the lease's end by this
    /// process's clock) to each observer's seeing the next state.
    seen_p50_ms: f64,
    seen_p99_ms: f64,
    seen_max_ms: f64,
    /// Observers that saw nothing within 5 s (counted, not waited for).
    missed: u64,
}

/// `bench election`: --workers observers (each its own `Observer`, so
/// each reads the store) follow one election through --rounds changes of
/// each kind: a leader that resigns (`election_resign`), and one that
/// stops renewing, its lease of --hold left to end (`election_expiry`).
pub(super) async fn election(args: &BenchArgs) -> i32 {
    let store = match store_for(args).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let rounds = args.rounds.max(1);
    let ttl = args.hold.max(tollgate::MIN_TTL);
    for case in ["election_resign", "election_expiry"] {
        let name = format!("bench:{case}:{:x}", std::process::id());
        let options = GateOptions {
            ttl,
            auto_renew: case == "election_resign",
            ..GateOptions::default()
        };
        let election = match Election::with_options(&store, &name, options) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("tollgate: {e}");
                return exit::USAGE;
            }
        };
        let mut seen_us = Vec::new();
        let mut missed = 0;
        for round in 0..rounds {
            // The observers, at the state before the change.
            let mut observers = Vec::with_capacity(args.workers);
            let sent = Instant::now();
            let leader = match election
                .campaign(&format!("round-{round}"), Duration::from_secs(30))
                .await
            {
                Ok(Some(l)) => l,
                _ => {
                    eprintln!("tollgate: the bench's candidate did not lead");
                    return exit::SOFTWARE;
                }
            };
            for _ in 0..args.workers {
                let mut o = election.observe();
                if o.next().await.is_err() {
                    eprintln!("tollgate: an observer could not read the election");
                    return exit::SOFTWARE;
                }
                observers.push(o);
            }
            // Each observer polling from its own phase (as independent
            // processes would be), well before the change.
            let tasks: Vec<_> = observers
                .into_iter()
                .enumerate()
                .map(|(i, mut o)| {
                    let phase = Duration::from_millis(((round * 31 + i * 17) % 50) as u64);
                    tokio::spawn(async move {
                        tokio::time::sleep(phase).await;
                        tokio::time::timeout(Duration::from_secs(5), o.next())
                            .await
                            .ok()
                            .and_then(Result::ok)
                            .map(|_| Instant::now())
                    })
                })
                .collect();
            let changed_at = if case == "election_resign" {
                // At a moment unrelated to the observers' reads.
                tokio::time::sleep(Duration::from_millis(100 + (round * 13 % 50) as u64)).await;
                if leader.resign().await.is_err() {
                    eprintln!("tollgate: the resign failed");
                    return exit::SOFTWARE;
                }
                Instant::now()
            } else {
                // Frozen: no renewal, no release; its lease ends at most
                // TTL after the request that granted it was sent.
                std::mem::forget(leader);
                sent + ttl
            };
            for t in tasks {
                match t.await.ok().flatten() {
                    Some(at) => seen_us.push(micros(at.saturating_duration_since(changed_at))),
                    None => missed += 1,
                }
            }
        }
        let report = ElectionReport {
            case,
            store: store_label(&store),
            observers: args.workers,
            rounds,
            seen_p50_ms: percentile_ms(&mut seen_us, 0.5),
            seen_p99_ms: percentile_ms(&mut seen_us, 0.99),
            seen_max_ms: percentile_ms(&mut seen_us, 1.0),
            missed,
        };
        println!("{}", serde_json::to_string(&report).unwrap_or_default());
    }
    0
}
