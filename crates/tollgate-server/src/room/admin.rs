//! The rooms' admin API, on the main listener behind the bearer tokens:
//! stats, capacity, and ending a session.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Room;
use crate::http::{ApiError, AppState, Json};

fn room(state: &AppState, name: &str) -> Result<std::sync::Arc<Room>, ApiError> {
    state.rooms.get(name).cloned().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "room_not_found",
            format!("no waiting room {name:?} is configured"),
        )
    })
}

async fn stats_of(room: &Room) -> Result<Value, ApiError> {
    let s = room.gate().stats().await?;
    Ok(json!({
        "room": room.name(),
        "capacity": s.capacity,
        "active": s.holders,
        "waiting": s.waiting,
        "admitted": s.grants,
        "expired": s.expiries,
    }))
}

/// `GET /v1/rooms/{room}`.
pub(crate) async fn stats(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let room = room(&state, &name)?;
    Ok(axum::Json(stats_of(&room).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CapacityBody {
    capacity: u32,
}

/// `PUT /v1/rooms/{room}/capacity`: lowering drains (nobody is evicted),
/// raising admits the line at once.
pub(crate) async fn set_capacity(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Json(body): Json<CapacityBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let room = room(&state, &name)?;
    room.gate().set_capacity(body.capacity).await?;
    Ok(axum::Json(stats_of(&room).await?))
}

/// `DELETE /v1/rooms/{room}/sessions/{session}`: ends an admitted
/// visitor's session (the `Tollgate-Visitor` header the upstream sees).
pub(crate) async fn end_session(
    State(state): State<AppState>,
    Path((name, session)): Path<(String, String)>,
) -> Result<axum::Json<Value>, ApiError> {
    let room = room(&state, &name)?;
    if room.end_session(&session).await {
        Ok(axum::Json(json!({"ended": true})))
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "session_not_found",
            "no active session with this id",
        ))
    }
}
