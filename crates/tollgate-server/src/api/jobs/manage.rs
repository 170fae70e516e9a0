//! The job routes that change a queue or a job in place: cancel and
//! reschedule a job, replay or purge the dead ones, pause and resume the
//! queue.

use std::time::Duration;

use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Value, json};
use tollgate::Cancelled;

use super::lookup::{ms, not_found, queue, running};
use crate::api::body::Json;
use crate::api::error::ApiError;
use crate::state::AppState;

/// `DELETE /v1/queues/{queue}/jobs/{id}`: cancel a waiting job (or purge a
/// dead one).
pub(crate) async fn cancel(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
) -> Result<axum::Json<Value>, ApiError> {
    match queue(&state, &name, None)?.cancel(&id).await? {
        Cancelled::Cancelled => Ok(axum::Json(json!({"result": "cancelled"}))),
        Cancelled::Purged => Ok(axum::Json(json!({"result": "purged"}))),
        Cancelled::Running => Err(running()),
        Cancelled::Unknown => Err(not_found("job", &id, &name)),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RescheduleBody {
    delay_ms: u64,
}

/// `POST /v1/queues/{queue}/jobs/{id}/reschedule`.
pub(crate) async fn reschedule(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    Json(body): Json<RescheduleBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let q = queue(&state, &name, None)?;
    match q.reschedule(&id, Duration::from_millis(body.delay_ms)).await? {
        Some(at) => Ok(axum::Json(json!({"due_ms": ms(at)}))),
        None => Err(not_found("waiting job", &id, &name)),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeadBody {
    /// One dead job; every dead job if left out.
    id: Option<String>,
}

/// `POST /v1/queues/{queue}/dead/replay`.
pub(crate) async fn replay(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Json(body): Json<DeadBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let n = queue(&state, &name, None)?.replay(body.id.as_deref()).await?;
    Ok(axum::Json(json!({"replayed": n})))
}

/// `POST /v1/queues/{queue}/dead/purge`.
pub(crate) async fn purge(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Json(body): Json<DeadBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let n = queue(&state, &name, None)?.purge(body.id.as_deref()).await?;
    Ok(axum::Json(json!({"purged": n})))
}

/// `POST /v1/queues/{queue}/pause`: the queue takes pushes but hands out
/// no jobs until resumed. A queue not yet pushed to may be paused (it then
/// exists).
pub(crate) async fn pause(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let changed = queue(&state, &name, None)?.pause().await?;
    Ok(axum::Json(json!({"paused": true, "changed": changed})))
}

/// `POST /v1/queues/{queue}/resume`: hands out jobs again, waking the
/// consumers waiting in a claim.
pub(crate) async fn resume(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let changed = queue(&state, &name, None)?.resume().await?;
    Ok(axum::Json(json!({"paused": false, "changed": changed})))
}
