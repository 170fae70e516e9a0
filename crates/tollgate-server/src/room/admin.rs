//! The rooms' admin API, on the main listener behind the bearer tokens:
//! stats, capacity, admission rate, state (pause and resume among them),
//! ending a session,
//! resetting the line, and the head of the line with each waiter's age.
//!
//! As with a gate's line (api/gate_admin.rs), a waiter is named by its
//! ticket's number, never its ticket: whoever has a ticket can act as it.

use axum::Router;
use std::sync::Arc;

use axum::extract::{FromRef, Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post, put};
use serde::Deserialize;
use serde_json::{Value, json};

use super::config::{admission_interval, schedule_of};
use super::rooms::{Room, Rooms};
use super::states::RoomState;
use super::store_call::now_ms;
use crate::api::body::Json;
use crate::api::error::{ApiError, Query};

/// The rooms' admin routes, on any state that holds the rooms.
pub(crate) fn routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Arc<Rooms>: FromRef<S>,
{
    Router::new()
        .route("/v1/rooms/{room}", get(stats))
        .route("/v1/rooms/{room}/capacity", put(set_capacity))
        .route("/v1/rooms/{room}/admission_rate", put(set_admission_rate))
        .route("/v1/rooms/{room}/state", put(set_state))
        .route("/v1/rooms/{room}/schedule", put(set_schedule))
        .route(
            "/v1/rooms/{room}/pause",
            post(|State(r): State<Arc<Rooms>>, Path(n): Path<String>| set_paused(r, n, true)),
        )
        .route(
            "/v1/rooms/{room}/resume",
            post(|State(r): State<Arc<Rooms>>, Path(n): Path<String>| set_paused(r, n, false)),
        )
        .route("/v1/rooms/{room}/sessions/{session}", delete(end_session))
        .route("/v1/rooms/{room}/reset", post(reset))
        .route("/v1/rooms/{room}/line", get(line))
        .route("/v1/rooms/{room}/line/{number}", delete(remove_waiter))
}

/// The room `name`, or 404 `room_not_found`.
pub(crate) fn room(rooms: &Rooms, name: &str) -> Result<Arc<Room>, ApiError> {
    rooms.get(name).cloned().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "room_not_found",
            format!("no waiting room {name:?} is configured"),
        )
    })
}

/// `GET /v1/rooms/{room}`.
pub(crate) async fn stats(
    State(rooms): State<Arc<Rooms>>,
    Path(name): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let room = room(&rooms, &name)?;
    Ok(axum::Json(room.figures().await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CapacityBody {
    capacity: u32,
}

/// `PUT /v1/rooms/{room}/capacity`: lowering drains (nobody is evicted),
/// raising admits the line at once.
pub(crate) async fn set_capacity(
    State(rooms): State<Arc<Rooms>>,
    Path(name): Path<String>,
    Json(body): Json<CapacityBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let room = room(&rooms, &name)?;
    room.gate().set_capacity(body.capacity).await?;
    Ok(axum::Json(room.figures().await?))
}

/// `DELETE /v1/rooms/{room}/sessions/{session}`: ends an admitted
/// visitor's session (the `Tollgate-Visitor` header the upstream sees).
pub(crate) async fn end_session(
    State(rooms): State<Arc<Rooms>>,
    Path((name, session)): Path<(String, String)>,
) -> Result<axum::Json<Value>, ApiError> {
    let room = room(&rooms, &name)?;
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

/// `POST /v1/rooms/{room}/pause` (state `paused`: everyone new queues;
/// nobody is evicted) and `POST /v1/rooms/{room}/resume` (state `open`:
/// free slots go to the line at once).
async fn set_paused(rooms: Arc<Rooms>, name: String, paused: bool) -> Result<axum::Json<Value>, ApiError> {
    let room = room(&rooms, &name)?;
    room.set_state(if paused {
        RoomState::Paused
    } else {
        RoomState::Open
    })
    .await?;
    Ok(axum::Json(room.figures().await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StateBody {
    state: String,
}

/// `PUT /v1/rooms/{room}/state`: `open`, `paused`, `closed`, `sold_out`
/// or `passthrough` (docs/ROOMS.md), on every server at once; sold out
/// lets everyone waiting go in the same step. Answers the room's figures
/// and how many waiters were let go.
async fn set_state(
    State(rooms): State<Arc<Rooms>>,
    Path(name): Path<String>,
    Json(body): Json<StateBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let room = room(&rooms, &name)?;
    let state = RoomState::parse(&body.state).map_err(ApiError::bad_request)?;
    let dropped = room.set_state(state).await?;
    let mut figures = room.figures().await?;
    figures["dropped"] = json!(dropped);
    Ok(axum::Json(figures))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScheduleBody {
    /// When the room opens (RFC 3339), or null for no opening time.
    /// Required: `{}` must not silently drop a sale's opening.
    #[serde(default, deserialize_with = "present_text")]
    opens_at: Option<Option<String>>,
    /// When the room closes to newcomers (RFC 3339); absent or null: never.
    #[serde(default)]
    closes_at: Option<String>,
    /// How long before the opening visitors may join; default 30m.
    #[serde(default)]
    prequeue: Option<String>,
}

/// A text field that may be null but must be there: `Some(None)` for null.
fn present_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// `PUT /v1/rooms/{room}/schedule`: when the room opens (with its
/// pre-queue) and closes, on every server at once, its state kept; the
/// store runs each at its time (docs/ROOMS.md, Scheduled openings).
async fn set_schedule(
    State(rooms): State<Arc<Rooms>>,
    Path(name): Path<String>,
    Json(body): Json<ScheduleBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let room = room(&rooms, &name)?;
    let Some(opens_at) = body.opens_at else {
        return Err(ApiError::bad_request(
            "give opens_at: an RFC 3339 time, or null for no opening time",
        ));
    };
    let schedule = schedule_of(
        opens_at.as_deref(),
        body.closes_at.as_deref(),
        body.prequeue.as_deref(),
    )
    .map_err(ApiError::bad_request)?;
    room.set_schedule(schedule).await?;
    Ok(axum::Json(room.figures().await?))
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
    State(rooms): State<Arc<Rooms>>,
    Path(name): Path<String>,
    Json(body): Json<RateBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let room = room(&rooms, &name)?;
    let interval = match body.per_minute {
        None => {
            return Err(ApiError::bad_request(
                "give per_minute: new admissions a minute, or null for no cap",
            ));
        }
        Some(None) => None,
        Some(Some(n)) => Some(admission_interval(n).map_err(ApiError::bad_request)?),
    };
    room.gate().set_admission_interval(interval).await?;
    Ok(axum::Json(room.figures().await?))
}

/// `POST /v1/rooms/{room}/reset`: everyone waiting is dropped at once and
/// told so on their next request; active sessions are untouched.
pub(crate) async fn reset(
    State(rooms): State<Arc<Rooms>>,
    Path(name): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let room = room(&rooms, &name)?;
    let dropped = room.reset_line().await?;
    let mut answer = room.figures().await?;
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
    State(rooms): State<Arc<Rooms>>,
    Path(name): Path<String>,
    Query(q): Query<LineQuery>,
) -> Result<axum::Json<Value>, ApiError> {
    let room = room(&rooms, &name)?;
    let now = now_ms();
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
    State(rooms): State<Arc<Rooms>>,
    Path((name, number)): Path<(String, String)>,
) -> Result<axum::Json<Value>, ApiError> {
    let room = room(&rooms, &name)?;
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
