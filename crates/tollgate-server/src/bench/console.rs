//! `tollgate bench console`: what operator consoles cost a busy server.
//! With --redis it first fills the scene (idempotent): room --room's line
//! to --line waiters and queue --queue to --jobs ready jobs, straight into
//! the store. Then --workers consoles run against --server for --seconds:
//! each holds the room's live stream open and, once a second, loads the
//! data of the overview, the room page and the queue page, as a console
//! reloaded every second would (more than a real one asks: it fetches only
//! on opening a page and on actions). One JSON line: the page data's
//! latency. The server's own figures with and without consoles are
//! measured beside it by scripts/bench-console.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use tollgate::{Entered, Gate, GateOptions, JobQueue, PushOptions, Store};

use super::args::BenchArgs;
use super::support::{each_worker, micros, percentile_ms, store_for};
use crate::exit;

/// Jobs per `push_many` while filling.
const BATCH: usize = 1000;

#[derive(Debug, Serialize)]
struct Report {
    peer: &'static str,
    case: &'static str,
    consoles: usize,
    seconds: f64,
    /// Page-data requests answered (each a GET of the API).
    requests: u64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    /// The slowest page's p99 (overview, room or queue), and which.
    worst_page: &'static str,
    worst_page_p99_ms: f64,
    /// Live samples the consoles received (one a second each when kept up).
    live_samples: u64,
    errors: u64,
}

/// One page of the console: its name and the API paths its data comes from.
fn pages(room: &str, queue: &str) -> [(&'static str, Vec<String>); 3] {
    [
        (
            "overview",
            ["rooms", "queues", "gates", "schedules", "limits"]
                .iter()
                .map(|k| format!("/v1/{k}?limit=20"))
                .chain(std::iter::once("/v1/console/series?kind=overview".to_owned()))
                .collect(),
        ),
        (
            "room",
            vec![
                format!("/v1/rooms/{room}"),
                format!("/v1/rooms/{room}/line?limit=10"),
                format!("/v1/console/series?kind=room&name={room}"),
            ],
        ),
        (
            "queue",
            vec![
                format!("/v1/queues/{queue}"),
                format!("/v1/queues/{queue}/jobs?state=ready&limit=50"),
                format!("/v1/queues/{queue}/jobs?state=dead&limit=50"),
                format!("/v1/console/series?kind=queue&name={queue}"),
            ],
        ),
    ]
}

pub(super) async fn run(args: &BenchArgs) -> i32 {
    let (Some(room), Some(queue)) = (args.room.as_deref(), args.queue.as_deref()) else {
        eprintln!("tollgate: `bench console` needs --room NAME and --queue NAME");
        return exit::USAGE;
    };
    if args.redis.is_some() {
        let store = match store_for(args).await {
            Ok(s) => s,
            Err(code) => return code,
        };
        if let Err(e) = fill(&store, room, args.line, queue, args.jobs).await {
            eprintln!("tollgate: cannot fill the scene: {e}");
            return exit::UNAVAILABLE;
        }
    }
    if args.workers == 0 {
        return 0;
    }
    let Some(server) = args.server.as_deref() else {
        eprintln!("tollgate: `bench console` needs --server URL to run consoles");
        return exit::USAGE;
    };
    let base: Arc<str> = server.trim_end_matches('/').into();
    let token: Option<Arc<str>> = std::env::var("TOLLGATE_TOKEN").ok().map(Into::into);
    let pages = Arc::new(pages(room, queue));
    let live_samples = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let end = start + args.seconds;
    let live_path: Arc<str> = format!("/v1/console/live?kind=room&name={room}").into();
    let results = each_worker(args.workers, |_| {
        let (base, token, pages) = (base.clone(), token.clone(), pages.clone());
        let (live_samples, live_path) = (live_samples.clone(), live_path.clone());
        async move {
            let http = reqwest::Client::new();
            let live = tokio::spawn(follow(
                http.clone(),
                format!("{base}{live_path}"),
                token.clone(),
                live_samples,
            ));
            let mut took: Vec<Vec<u32>> = vec![Vec::new(); pages.len()];
            let mut errors = 0u64;
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while Instant::now() < end {
                tick.tick().await;
                for (i, (_, paths)) in pages.iter().enumerate() {
                    for path in paths {
                        let t0 = Instant::now();
                        match get(&http, &format!("{base}{path}"), token.as_deref()).await {
                            Ok(()) => took[i].push(micros(t0.elapsed())),
                            Err(e) => {
                                errors += 1;
                                if errors <= 3 {
                                    eprintln!("tollgate: {path}: {e}");
                                }
                            }
                        }
                    }
                }
            }
            live.abort();
            (took, errors)
        }
    })
    .await;
    let elapsed = start.elapsed().as_secs_f64();
    let mut by_page: Vec<Vec<u32>> = vec![Vec::new(); pages.len()];
    let mut errors = 0;
    for r in results {
        match r {
            Ok((took, e)) => {
                errors += e;
                for (all, mine) in by_page.iter_mut().zip(took) {
                    all.extend(mine);
                }
            }
            Err(e) => {
                eprintln!("tollgate: a console failed: {e}");
                return exit::SOFTWARE;
            }
        }
    }
    let mut all: Vec<u32> = by_page.iter().flatten().copied().collect();
    let (mut worst_page, mut worst_page_p99_ms) = ("", 0.0);
    for ((name, _), samples) in pages.iter().zip(by_page.iter_mut()) {
        let p99 = percentile_ms(samples, 0.99);
        if p99 >= worst_page_p99_ms {
            (worst_page, worst_page_p99_ms) = (name, p99);
        }
    }
    let report = Report {
        peer: "tollgate",
        case: "console_page_data",
        consoles: args.workers,
        seconds: (elapsed * 1000.0).round() / 1000.0,
        requests: all.len() as u64,
        p50_ms: percentile_ms(&mut all, 0.50),
        p99_ms: percentile_ms(&mut all, 0.99),
        max_ms: percentile_ms(&mut all, 1.0),
        worst_page,
        worst_page_p99_ms,
        live_samples: live_samples.load(Ordering::Relaxed),
        errors,
    };
    match serde_json::to_string(&report) {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("tollgate: {e}");
            return exit::SOFTWARE;
        }
    }
    if errors > 0 { exit::SOFTWARE } else { 0 }
}

/// GETs `url` and reads the whole answer; an error unless 2xx.
async fn get(http: &reqwest::Client, url: &str, token: Option<&str>) -> Result<(), String> {
    let mut req = http.get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let response = req.send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response.bytes().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&body)));
    }
    Ok(())
}

/// Reads the live stream at `url` until aborted, counting its samples.
async fn follow(http: reqwest::Client, url: String, token: Option<Arc<str>>, samples: Arc<AtomicU64>) {
    let mut req = http.get(&url);
    if let Some(t) = token.as_deref() {
        req = req.bearer_auth(t);
    }
    let Ok(mut response) = req.send().await else {
        return;
    };
    let mut tail = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        tail.extend_from_slice(&chunk);
        // Count the complete events; keep what follows the last one.
        let Some(end) = tail.windows(2).rposition(|w| w == b"\n\n") else {
            continue;
        };
        let complete = String::from_utf8_lossy(&tail[..end]);
        samples.fetch_add(
            complete.matches("event: sample").count() as u64,
            Ordering::Relaxed,
        );
        tail.drain(..end + 2);
    }
}

/// Fills room `room`'s line to `line` waiters (behind one holder) and
/// queue `queue` to `jobs` ready jobs, counting what is already there.
async fn fill(store: &Store, room: &str, line: u64, queue: &str, jobs: u64) -> Result<(), String> {
    // The room's gate, as the room names it; the waiters keep their place
    // for a day without polling, so the line stays whole for the run.
    let options = GateOptions {
        ttl: Duration::from_secs(3600),
        heartbeat: Duration::from_secs(86_400),
        auto_renew: false,
        fair: true,
        max_hold: None,
    };
    let gate = Gate::new(store, &format!("room:{room}"), None, options).map_err(|e| e.to_string())?;
    let stats = gate.stats().await.map_err(|e| e.to_string())?;
    if stats.holders == 0 && stats.waiting == 0 {
        // One holder, so the rest queue (the room's capacity must be 1).
        if !matches!(gate.enter(1, true).await, Ok(Entered::Granted(_))) {
            return Err(format!("room {room:?}: the first enter was not granted"));
        }
    }
    let missing = line.saturating_sub(gate.stats().await.map_err(|e| e.to_string())?.waiting);
    let next = Arc::new(AtomicU64::new(0));
    let gate = Arc::new(gate);
    for r in each_worker(50, |_| {
        let (gate, next) = (gate.clone(), next.clone());
        async move {
            while next.fetch_add(1, Ordering::Relaxed) < missing {
                match gate.enter(1, true).await {
                    Ok(Entered::Queued { .. }) => {}
                    Ok(Entered::Granted(_)) => {
                        return Err("a waiter was granted: room capacity is not 1".to_owned());
                    }
                    Ok(Entered::Busy(_)) => return Err("the room's line refused a waiter".to_owned()),
                    Err(e) => return Err(e.to_string()),
                }
            }
            Ok(())
        }
    })
    .await
    {
        r.map_err(|e| e.to_string())??;
    }
    let q = JobQueue::new(store, queue).map_err(|e| e.to_string())?;
    let have = q.stats().await.map_or(0, |s| s.ready);
    let missing = jobs.saturating_sub(have);
    let next = Arc::new(AtomicU64::new(0));
    let q = Arc::new(q);
    for r in each_worker(8, |_| {
        let (q, next) = (q.clone(), next.clone());
        async move {
            loop {
                let from = next.fetch_add(BATCH as u64, Ordering::Relaxed);
                if from >= missing {
                    return Ok::<(), String>(());
                }
                let n = (missing - from).min(BATCH as u64) as usize;
                let batch: Vec<(Vec<u8>, PushOptions)> = (0..n)
                    .map(|i| {
                        (
                            format!("{{\"n\":{}}}", from + i as u64).into_bytes(),
                            PushOptions::default(),
                        )
                    })
                    .collect();
                q.push_many(&batch).await.map_err(|e| e.to_string())?;
            }
        }
    })
    .await
    {
        r.map_err(|e| e.to_string())??;
    }
    eprintln!(
        "tollgate: scene ready: room {room:?} with {} waiting, queue {queue:?} with {} ready",
        gate.stats().await.map_err(|e| e.to_string())?.waiting,
        q.stats().await.map_err(|e| e.to_string())?.ready
    );
    Ok(())
}
