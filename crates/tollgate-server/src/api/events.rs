//! `GET /v1/queues/{queue}/events` (Server-Sent Events, issue 18;
//! docs/HTTP.md, "Event streams"): a queue's events, through the stream
//! every route shares (streams.rs: the limit, the forwarding, `dropped`).
//!
//! The events come from the library's feed (`JobQueue::events`),
//! which the store writes inside the step that makes each change, so a
//! stream shows what every server and worker on the same Redis did. The
//! feed's buffer is a ring the store writes over: a reader that falls
//! behind is dropped (`lagged`), never waited for.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::response::sse::Event;
use axum::routing::get;
use futures_util::StreamExt;
use serde_json::json;
use tollgate::{EventId, JobEvent};

use super::error::ApiError;
use super::streams::{Stopping, stream};
use crate::state::AppState;

pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/v1/queues/{queue}/events", get(queue_events))
}

/// `Last-Event-ID`, if sent: an event id (`<ms>-<seq>`), else 400.
fn last_event_id(headers: &HeaderMap) -> Result<Option<EventId>, ApiError> {
    let Some(v) = headers.get("last-event-id") else {
        return Ok(None);
    };
    let bad =
        || ApiError::bad_request("Last-Event-ID must be an event id from this stream, e.g. 1700000000000-0");
    let text = v.to_str().map_err(|_| bad())?;
    text.trim().parse().map(Some).map_err(|_| bad())
}

/// `GET /v1/queues/{queue}/events`: `hello` with the queue's figures, then
/// each event as it happens. A queue nobody used yet streams too (queues
/// are created by their first push).
pub(crate) async fn queue_events(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let since = last_event_id(&headers)?;
    let q = state.queue_set.open(&state.store, &name)?;
    let slot = state.subscribers.take()?;
    let feed = q.events(since).await?;
    let s = q.stats().await?;
    let hello = json!({
        "queue": name, "partitions": q.partitions(), "ready": s.ready, "delayed": s.delayed,
        "in_flight": s.in_flight, "dead": s.dead, "paused": s.paused,
        "resumed": since.is_some(), "gap": feed.gap(),
    });
    let feed = feed.map(|next| next.map(|e| event_of(&e)));
    Ok(stream(hello, feed, slot, Stopping(state.stopping.clone())))
}

fn event_of(e: &JobEvent) -> Event {
    let data = serde_json::to_string(e).unwrap_or_else(|_| "{}".to_owned());
    Event::default()
        .event(e.kind.as_str())
        .id(e.id.to_string())
        .data(data)
}
