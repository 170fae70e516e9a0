//! Gathering the store-backed figures of /metrics: every tracked gate and
//! queue and every room, a bounded number at once, under one deadline per
//! scrape (`metrics_timeout`, 1 s by default).
//!
//! Why at scrape time rather than from a cache refreshed in the
//! background: the figures are as fresh as the scrape, a server nobody
//! scrapes asks the store nothing, and there is no task to keep alive. The
//! deadline bounds the answer's time whatever the store does (down, frozen,
//! slow); what was not gathered in time keeps its previous value and is
//! counted in `tollgate_scrape_errors_total`, so a stale figure is never
//! silent.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::future::BoxFuture;

use crate::http::AppState;

/// How long a scrape may spend gathering, by default.
pub(crate) const METRICS_TIMEOUT: Duration = Duration::from_secs(1);

/// Figures asked of the store at once.
const CONCURRENCY: usize = 32;

/// Where a figure comes from: the `source` label.
#[derive(Debug, Clone, Copy)]
enum Source {
    Gate = 0,
    Room = 1,
    Queue = 2,
}

const SOURCES: [&str; 3] = ["gate", "room", "queue"];

/// Gathers the store-backed figures into the recorder, giving up on what
/// is not in by the deadline.
pub(crate) async fn gather(state: &AppState) {
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + state.metrics_timeout;
    // Per source: figures asked for, answered, and failed or not answered.
    let (mut asked, mut answered, mut failed) = ([0u64; 3], [0u64; 3], [0u64; 3]);
    let mut work: Vec<BoxFuture<'_, (Source, bool)>> = Vec::new();
    for name in crate::http::tracked(&state.gates) {
        asked[Source::Gate as usize] += 1;
        work.push(Box::pin(async move {
            (Source::Gate, crate::http::scrape_gate(state, &name).await)
        }));
    }
    for room in state.rooms.all() {
        // A room counts its own store errors, within its own timeout
        // (tollgate_room_scrape_errors_total); here only the deadline.
        asked[Source::Room as usize] += 1;
        work.push(Box::pin(async move {
            room.scrape().await;
            (Source::Room, true)
        }));
    }
    for name in crate::http::tracked(&state.queues) {
        asked[Source::Queue as usize] += 1;
        work.push(Box::pin(async move {
            (Source::Queue, crate::jobs_http::scrape_queue(state, &name).await)
        }));
    }
    let mut results = futures_util::stream::iter(work).buffer_unordered(CONCURRENCY);
    let mut timed_out = false;
    loop {
        match tokio::time::timeout_at(deadline, results.next()).await {
            Ok(Some((source, ok))) => {
                answered[source as usize] += 1;
                if !ok {
                    failed[source as usize] += 1;
                }
            }
            Ok(None) => break,
            Err(_) => {
                // What is still under way is dropped (its store calls with it).
                timed_out = true;
                for i in 0..SOURCES.len() {
                    failed[i] += asked[i] - answered[i];
                }
                break;
            }
        }
    }
    // Always written (0 included), so the series exist from the first scrape.
    metrics::counter!("tollgate_scrape_timeouts_total").increment(u64::from(timed_out));
    for (i, source) in SOURCES.iter().enumerate() {
        metrics::counter!("tollgate_scrape_errors_total", "source" => *source).increment(failed[i]);
    }
    metrics::gauge!("tollgate_scrape_duration_seconds").set(started.elapsed().as_secs_f64());
}
