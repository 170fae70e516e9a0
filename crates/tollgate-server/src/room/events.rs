//! `GET /v1/rooms/{room}/events`: a room's changes as Server-Sent Events
//! (docs/ROOMS.md, "Event stream").
//!
//! Read from the store's figures of the room's gate (its stats: one read
//! per stream every POLL, only while the stream is open), so they are
//! fleet-wide and cost nothing while nobody watches, but they are counts
//! per interval, not one event per visitor: `admitted` and `timed_out`
//! are the growth of the gate's grant and expiry counters, `left` the rest
//! of the drop in active sessions. Per-visitor events would need the gate
//! scripts to write them (as the job queues do); not in this version.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{FromRef, Path, State};
use axum::response::Response;
use axum::response::sse::Event;
use axum::routing::get;
use serde_json::json;
use tollgate::{GateStats, Lagged};

use super::admin::room;
use super::rooms::{Room, Rooms};
use crate::api::error::ApiError;
use crate::api::streams::{Stopping, Subscribers, stream};

/// The room's event stream, on any state that holds the rooms, the count
/// of streams and the stop signal.
pub(crate) fn routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Arc<Rooms>: FromRef<S>,
    Arc<Subscribers>: FromRef<S>,
    Stopping: FromRef<S>,
{
    Router::new().route("/v1/rooms/{room}/events", get(room_events))
}

/// How often a stream reads the room's figures.
const POLL: Duration = Duration::from_millis(500);

/// What one read showed, to compare with the next.
#[derive(Debug, Clone, Copy)]
struct Seen {
    capacity: Option<u32>,
    active: u64,
    grants: u64,
    expiries: u64,
    paused: bool,
    line_reset_ms: Option<u64>,
}

impl Seen {
    fn of(s: &GateStats) -> Seen {
        Seen {
            capacity: s.capacity,
            active: s.holders,
            grants: s.grants,
            expiries: s.expiries,
            paused: s.paused,
            line_reset_ms: s.line_reset_ms,
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The events between two reads, in a fixed order: settings and resets
/// first, then admissions, time-outs and departures.
fn changes(was: Seen, now: &GateStats, out: &mut VecDeque<Event>) {
    let at_ms = now_ms();
    let ev = |kind: &str, data: serde_json::Value| Event::default().event(kind).data(data.to_string());
    if now.capacity != was.capacity {
        out.push_back(ev(
            "capacity",
            json!({"kind": "capacity", "capacity": now.capacity, "was": was.capacity, "at_ms": at_ms}),
        ));
    }
    if now.paused != was.paused {
        let kind = if now.paused { "paused" } else { "resumed" };
        out.push_back(ev(kind, json!({"kind": kind, "at_ms": at_ms})));
    }
    if now.line_reset_ms > was.line_reset_ms {
        // An operator emptied the line (POST /v1/rooms/{room}/reset).
        out.push_back(ev(
            "reset",
            json!({"kind": "reset", "reset_ms": now.line_reset_ms, "waiting": now.waiting, "at_ms": at_ms}),
        ));
    }
    // Counters that went back: the store lost the room's state; start
    // counting afresh from this read.
    if now.grants < was.grants || now.expiries < was.expiries {
        return;
    }
    let admitted = now.grants - was.grants;
    let timed_out = now.expiries - was.expiries;
    let left = (was.active + admitted).saturating_sub(timed_out + now.holders);
    let counts = |kind: &str, count: u64| json!({"kind": kind, "count": count, "active": now.holders, "waiting": now.waiting, "at_ms": at_ms});
    for (kind, count) in [("admitted", admitted), ("timed_out", timed_out), ("left", left)] {
        if count > 0 {
            out.push_back(ev(kind, counts(kind, count)));
        }
    }
}

/// `GET /v1/rooms/{room}/events`: `hello` with the room's figures, then its
/// changes every POLL. 404 `room_not_found` for a room not configured.
pub(crate) async fn room_events(
    State(rooms): State<Arc<Rooms>>,
    State(subscribers): State<Arc<Subscribers>>,
    State(stopping): State<Stopping>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let room: Arc<Room> = room(&rooms, &name)?;
    let slot = subscribers.take()?;
    let first = room.gate().stats().await?;
    let hello = room.figures().await?;
    struct Watch {
        room: Arc<Room>,
        seen: Seen,
        pending: VecDeque<Event>,
    }
    let start = Watch {
        room,
        seen: Seen::of(&first),
        pending: VecDeque::new(),
    };
    let feed = futures_util::stream::unfold(start, |mut w| async move {
        loop {
            if let Some(e) = w.pending.pop_front() {
                return Some((Ok::<_, Lagged>(e), w));
            }
            tokio::time::sleep(POLL).await;
            // A failed read is skipped: the next one covers the interval.
            if let Ok(now) = w.room.gate().stats().await {
                changes(w.seen, &now, &mut w.pending);
                w.seen = Seen::of(&now);
            }
        }
    });
    Ok(stream(hello, feed, slot, stopping))
}
