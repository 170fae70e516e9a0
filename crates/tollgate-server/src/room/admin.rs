//! The rooms' admin API, on the main listener behind the bearer tokens:
//! stats, capacity, admission rate, pause and resume, ending a session,
//! resetting the line, and the head of the line with each waiter's age.
//!
//! As with a gate's line (api/gate_admin.rs), a waiter is named by its
//! ticket's number, never its ticket: whoever has a ticket can act as it.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post, put};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Room;
use crate::api::AppState;
use crate::api::body::Json;
use crate::api::error::{ApiError, Query};

/// The rooms' admin routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/rooms/{room}", get(stats))
        .route("/v1/rooms/{room}/capacity", put(set_capacity))
        .route("/v1/rooms/{room}/admission_rate", put(set_admission_rate))
        .route(
            "/v1/rooms/{room}/pause",
            post(|State(s): State<AppState>, Path(n): Path<String>| set_paused(s, n, true)),
        )
        .route(
            "/v1/rooms/{room}/resume",
            post(|State(s): State<AppState>, Path(n): Path<String>| set_paused(s, n, false)),
        )
        .route("/v1/rooms/{room}/sessions/{session}", delete(end_session))
        .route("/v1/rooms/{room}/reset", post(reset))
        .route("/v1/rooms/{room}/line", get(line))
        .route("/v1/rooms/{room}/line/{number}", delete(remove_waiter))
        .route("/v1/rooms/{room}/events", get(super::events::room_events))
}

pub(crate) fn room(state: &AppState, name: &str) -> Result<std::sync::Arc<Room>, ApiError> {
    state.rooms.get(name).cloned().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "room_not_found",
            format!("no waiting room {name:?} is configured"),
        )
    })
}

pub(crate) async fn stats_of(room: &Room) -> Result<Value, ApiError> {
    let s = room.gate().stats().await?;
    Ok(json!({
        "room": room.name(),
        "capacity": s.capacity,
        "active": s.holders,
        "waiting": s.waiting,
        "admitted": s.grants,
        "expired": s.expiries,
        "paused": s.paused,
        "admissions_per_minute": s.admission_interval.map(|d| (60_000.0 / d.as_millis() as f64).round() as u64),
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
    match room.end_session(&session).await? {
        tollgate::Left::Released => Ok(axum::Json(json!({"ended": true, "was": "active"}))),
        tollgate::Left::Cancelled => Ok(axum::Json(json!({"ended": true, "was": "waiting"}))),
        tollgate::Left::Unknown => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "session_not_found",
            "no active or waiting session with this id",
        )),
    }
}

/// `POST /v1/rooms/{room}/pause` (`paused`: everyone new queues; nobody
/// is evicted) and `POST /v1/rooms/{room}/resume` (free slots go to the
/// line at once).
async fn set_paused(state: AppState, name: String, paused: bool) -> Result<axum::Json<Value>, ApiError> {
    let room = room(&state, &name)?;
    if paused {
        room.gate().pause().await?;
    } else {
        room.gate().resume().await?;
    }
    Ok(axum::Json(stats_of(&room).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RateBody {
    /// New admissions a minute at most; null removes the cap. Required:
    /// `{}` must not silently remove pacing.
    #[serde(default, deserialize_with = "present")]
    per_minute: Option<Option<u32>>,
}

/// A field that may be null but must be there: `Some(None)` for null.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<u32>>, D::Error> {
    Option::<u32>::deserialize(d).map(Some)
}

/// `PUT /v1/rooms/{room}/admission_rate`.
pub(crate) async fn set_admission_rate(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Json(body): Json<RateBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let room = room(&state, &name)?;
    let interval = match body.per_minute {
        None => {
            return Err(ApiError::bad_request(
                "give per_minute: new admissions a minute, or null for no cap",
            ));
        }
        Some(None) => None,
        Some(Some(n)) => Some(super::admission_interval(n).map_err(ApiError::bad_request)?),
    };
    room.gate().set_admission_interval(interval).await?;
    Ok(axum::Json(stats_of(&room).await?))
}

/// `POST /v1/rooms/{room}/reset`: everyone waiting is dropped at once and
/// told so on their next request; active sessions are untouched.
pub(crate) async fn reset(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let room = room(&state, &name)?;
    let dropped = room.reset_line().await?;
    let mut answer = stats_of(&room).await?;
    answer["dropped"] = dropped.into();
    Ok(axum::Json(answer))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LineQuery {
    /// At most this many, head first: 1 to 1000, default 20.
    #[serde(default = "twenty")]
    limit: u32,
}

fn twenty() -> u32 {
    20
}

/// `GET /v1/rooms/{room}/line`: the head of the line, head first, each
/// waiter with its position, its ticket's number (which `DELETE
/// /v1/rooms/{room}/line/{number}` takes) and its age: ms since it joined,
/// from the arrival time the room labels each ticket with (null for a
/// ticket with no such label, such as one joined by a server from before
/// labels).
pub(crate) async fn line(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<LineQuery>,
) -> Result<axum::Json<Value>, ApiError> {
    let room = room(&state, &name)?;
    let now = super::now_ms();
    let line: Vec<Value> = room
        .gate()
        .line(q.limit)
        .await?
        .into_iter()
        .map(|w| {
            let joined = w.label.and_then(|l| l.parse::<u64>().ok());
            json!({
                "number": w.number,
                "position": w.position,
                "age_ms": joined.map(|j| now.saturating_sub(j)),
            })
        })
        .collect();
    Ok(axum::Json(json!({"room": room.name(), "line": line})))
}

/// `DELETE /v1/rooms/{room}/line/{number}`: takes one waiter out of the
/// line, as if they had left (their next request is a new arrival).
pub(crate) async fn remove_waiter(
    State(state): State<AppState>,
    Path((name, number)): Path<(String, String)>,
) -> Result<axum::Json<Value>, ApiError> {
    let room = room(&state, &name)?;
    let number: u64 = number
        .parse()
        .map_err(|_| ApiError::bad_request(format!("{number:?} is not a ticket number")))?;
    match room.gate().remove_waiter(number).await? {
        tollgate::Left::Unknown => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "ticket_not_found",
            "no ticket in line has that number: it was admitted, left or never existed",
        )),
        _ => Ok(axum::Json(json!({"removed": true}))),
    }
}
