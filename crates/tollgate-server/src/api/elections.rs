//! `/v1/elections`: who leads an election, and its changes as Server-Sent
//! Events (docs/HTTP.md, "Elections"). Candidates campaign through the
//! gates routes: an election is a gate of capacity 1 whose holder leads
//! (`POST /v1/gates/{name}/enter` with `capacity: 1` and a `label`).

use axum::Router;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::response::sse::Event;
use axum::routing::get;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tollgate::{Election, GateOptions, Lagged};

use super::election_feeds::{id_of, leader_json};
use super::error::ApiError;
use super::streams::{Stopping, stream};
use crate::state::AppState;

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/elections/{name}", get(leader))
        .route("/v1/elections/{name}/events", get(events))
}

fn election(state: &AppState, name: &str) -> Result<Election, ApiError> {
    let options = GateOptions {
        auto_renew: false,
        ..GateOptions::default()
    };
    Ok(Election::with_options(&state.store, name, options)?)
}

/// `GET /v1/elections/{name}`: the leader now, or null.
async fn leader(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let e = election(&state, &name)?;
    let leader = e.leader().await?;
    Ok(axum::Json(
        json!({"name": name, "leader": leader_json(leader.as_ref())}),
    ))
}

/// `GET /v1/elections/{name}/events`: `hello` with the leader now, then a
/// `leader` event at each change. `Last-Event-ID` (a reconnecting client)
/// is compared with the state now: `hello.changed` says whether it moved
/// while the client was away.
async fn events(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let e = election(&state, &name)?;
    let slot = state.subscribers.take()?;
    // Subscribed before the first read: no change falls between them.
    let rx = state.elections.subscribe(&e);
    let (now, fence) = e.state().await?;
    let id = id_of(now.as_ref(), fence);
    let last: Option<u64> = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok());
    let hello = json!({
        "name": name,
        "leader": leader_json(now.as_ref()),
        "id": id,
        "resumed_from": last,
        "changed": last.map(|l| l != id),
    });
    // Each stream sends only ids above the last it sent (the hello's
    // first): a change the observer read before the hello's read says
    // nothing new.
    let feed = futures_util::stream::unfold((rx, id), |(mut rx, mut sent)| async move {
        loop {
            let event = match rx.recv().await {
                Ok(c) if c.id <= sent => continue,
                Ok(c) => {
                    sent = c.id;
                    Ok(Event::default()
                        .event("leader")
                        .id(c.id.to_string())
                        .data(c.data.to_string()))
                }
                Err(RecvError::Lagged(missed)) => Err(Lagged { missed }),
                Err(RecvError::Closed) => return None,
            };
            return Some((event, (rx, sent)));
        }
    });
    Ok(stream(hello, feed, slot, Stopping(state.stopping.clone())))
}
