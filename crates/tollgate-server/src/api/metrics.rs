//! /metrics: the Prometheus text, and gathering its store-backed figures: every tracked gate,
//! queue and schedule and every room, a bounded number at once, under one deadline per
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

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tollgate::{Gate, GateOptions};

use super::error::ApiError;
use super::lateness::{Lateness, render_lateness};
use super::tracked::{tracked, untrack};
use crate::state::AppState;

/// The /metrics route.
pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/metrics", get(metrics_text))
}

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
    Schedule = 3,
}

const SOURCES: [&str; 4] = ["gate", "room", "queue", "schedule"];

/// Gathers the store-backed figures into the recorder, giving up on what
/// is not in by the deadline.
pub(crate) async fn gather(state: &AppState) {
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + state.metrics_timeout;
    // Per source: figures asked for, answered, and failed or not answered.
    let (mut asked, mut answered, mut failed) = ([0u64; 4], [0u64; 4], [0u64; 4]);
    let mut work: Vec<BoxFuture<'_, (Source, bool)>> = Vec::new();
    for name in tracked(&state.gates) {
        asked[Source::Gate as usize] += 1;
        work.push(Box::pin(async move {
            (Source::Gate, scrape_gate(state, &name).await)
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
    for name in tracked(&state.queues) {
        asked[Source::Queue as usize] += 1;
        work.push(Box::pin(async move {
            (Source::Queue, scrape_queue(state, &name).await)
        }));
    }
    for name in tracked(&state.schedules) {
        asked[Source::Schedule as usize] += 1;
        work.push(Box::pin(async move {
            (Source::Schedule, scrape_schedule(state, &name).await)
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

/// Prometheus text format: request counts and latency by route and status,
/// store errors, lost leases, and for each gate this server has served
/// (up to 1,000) its capacity, holders, permits in use, line length, grants
/// and expiries, read from the store at scrape time (within the scrape's
/// deadline: see [`gather`]).
async fn metrics_text(State(state): State<AppState>) -> Response {
    gather(&state).await;
    metrics_process::Collector::default().collect();
    let mut text = state.metrics.render();
    {
        let mut lateness = state
            .lateness
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Queues no longer tracked are gone from every other series too.
        let queues = tracked(&state.queues);
        lateness.retain(|q, _| queues.contains(q));
        render_lateness(&mut text, &lateness);
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        text,
    )
        .into_response()
}

/// The figures of one tracked gate, for /metrics: whether they were read.
pub(crate) async fn scrape_gate(state: &AppState, name: &str) -> bool {
    let Ok(g) = Gate::new(&state.store, name, None, GateOptions::default()) else {
        return false;
    };
    match g.stats().await {
        Ok(s) => {
            let gauge =
                |metric: &'static str, v: f64| metrics::gauge!(metric, "gate" => name.to_owned()).set(v);
            gauge("tollgate_gate_capacity", s.capacity.map_or(0.0, f64::from));
            gauge("tollgate_gate_holders", s.holders as f64);
            gauge("tollgate_gate_used", s.used as f64);
            gauge("tollgate_gate_waiting", s.waiting as f64);
            metrics::counter!("tollgate_gate_grants_total", "gate" => name.to_owned()).absolute(s.grants);
            metrics::counter!("tollgate_gate_expiries_total", "gate" => name.to_owned()).absolute(s.expiries);
            // No state at all: the store forgot the gate (idle), its place
            // goes to the next name.
            if s == tollgate::GateStats::default() {
                untrack(&state.gates, name);
            }
            true
        }
        Err(e) => {
            // Counted by the conversion; the scrape goes on without it.
            let _ = ApiError::from(e);
            false
        }
    }
}
/// One tracked queue's series for /metrics, read from the store at scrape
/// time: whether they were read.
pub(crate) async fn scrape_queue(state: &AppState, name: &str) -> bool {
    let Ok(q) = state.queue_set.open(&state.store, name) else {
        return false;
    };
    let s = match q.stats().await {
        Ok(s) => s,
        Err(e) => {
            // Counted by the conversion.
            let _ = ApiError::from(e);
            return false;
        }
    };
    let name = name.to_owned();
    let label = || ("queue", name.clone());
    for (metric, v) in [
        ("tollgate_queue_pushed_total", s.pushed),
        ("tollgate_queue_claimed_total", s.claimed),
        ("tollgate_queue_acked_total", s.acked),
        ("tollgate_queue_retried_total", s.retried),
        ("tollgate_queue_dead_lettered_total", s.dead_total),
        ("tollgate_queue_redelivered_total", s.redelivered),
        ("tollgate_queue_limited_claims_total", s.limited_claims),
    ] {
        metrics::counter!(metric, &[label()]).absolute(v);
    }
    for (metric, v) in [
        ("tollgate_queue_ready", s.ready),
        ("tollgate_queue_delayed", s.delayed),
        ("tollgate_queue_in_flight", s.in_flight),
        ("tollgate_queue_dead", s.dead),
        ("tollgate_queue_groups", s.groups),
        ("tollgate_queue_groups_held", s.groups_held),
    ] {
        metrics::gauge!(metric, &[label()]).set(v as f64);
    }
    metrics::gauge!("tollgate_queue_paused", &[label()]).set(if s.paused { 1.0 } else { 0.0 });
    // Lateness of every promotion: the store keeps the bucket counts, so
    // servers sharing Redis agree. The exporter has no histogram it can
    // set outright, so /metrics renders this one itself.
    state
        .lateness
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(
            name.clone(),
            Lateness {
                buckets: s.lateness_buckets.clone(),
                sum_seconds: s.lateness_sum.as_secs_f64(),
            },
        );
    for (q, quantile) in [(0.5, "0.5"), (0.99, "0.99"), (1.0, "1")] {
        if let Some(v) = s.recent_lateness_quantile(q) {
            metrics::gauge!("tollgate_queue_recent_lateness_seconds", "queue" => name.clone(), "quantile" => quantile)
                .set(v.as_secs_f64());
        }
    }
    // A queue the store forgot (drained and idle) frees its place.
    if s.ready + s.delayed + s.in_flight + s.dead == 0 && !q.exists().await.unwrap_or(true) {
        untrack(&state.queues, &name);
    }

    true
}

/// One tracked schedule's gauges for /metrics, read from the store at
/// scrape time: whether they were read. A deleted schedule keeps its last
/// values, and its place goes to the next name.
pub(crate) async fn scrape_schedule(state: &AppState, name: &str) -> bool {
    let info = match tollgate::Schedules::new(&state.store).get(name).await {
        Ok(Some(info)) => info,
        Ok(None) => {
            untrack(&state.schedules, name);
            return true;
        }
        Err(e) => {
            // Counted by the conversion.
            let _ = ApiError::from(e);
            return false;
        }
    };
    let seconds = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    };
    let last = info
        .recent
        .iter()
        .rev()
        .find(|t| !t.manual)
        .map_or(0.0, |t| seconds(t.at));
    let gauge = |metric: &'static str, v: f64| metrics::gauge!(metric, "schedule" => name.to_owned()).set(v);
    gauge(
        "tollgate_schedule_next_tick_timestamp_seconds",
        info.next.map_or(0.0, seconds),
    );
    gauge("tollgate_schedule_last_tick_timestamp_seconds", last);
    gauge("tollgate_schedule_paused", f64::from(u8::from(info.paused)));
    true
}
