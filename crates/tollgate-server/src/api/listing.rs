//! The listings (issue 18): `GET /v1/gates`, `/v1/queues`, `/v1/rooms` and
//! `/v1/limits`, each a page of names in byte order with their headline
//! figures, `{"<kind>": [...], "next": cursor|null}` (`/v1/schedules` pages
//! the same way, in schedules.rs). Gates and queues come from the store's
//! registry of names (every server's, on Redis); rooms and limits are
//! this server's configured ones.

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use serde_json::{Value, json};

use super::error::{ApiError, ListQuery, Query};
use crate::state::AppState;

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/gates", get(gates))
        .route("/v1/queues", get(queues))
        .route("/v1/rooms", get(rooms))
        .route("/v1/limits", get(limits))
}

/// `GET /v1/gates`.
async fn gates(
    State(state): State<AppState>,
    Query(q): Query<ListQuery>,
) -> Result<axum::Json<Value>, ApiError> {
    let q = q.checked()?;
    let page = state
        .store
        .list_gates(&q.prefix, q.cursor.as_deref(), q.limit)
        .await?;
    let items: Vec<Value> = page
        .items
        .iter()
        .map(|g| {
            json!({
                "gate": g.name, "capacity": g.stats.capacity, "holders": g.stats.holders,
                "used": g.stats.used, "waiting": g.stats.waiting, "paused": g.stats.paused,
            })
        })
        .collect();
    Ok(axum::Json(json!({"gates": items, "next": page.next})))
}

/// `GET /v1/queues`.
async fn queues(
    State(state): State<AppState>,
    Query(q): Query<ListQuery>,
) -> Result<axum::Json<Value>, ApiError> {
    let q = q.checked()?;
    let page = state
        .store
        .list_queues(&q.prefix, q.cursor.as_deref(), q.limit)
        .await?;
    let items: Vec<Value> = page
        .items
        .iter()
        .map(|i| {
            let s = &i.stats;
            json!({
                "queue": i.name, "partitions": i.partitions, "ready": s.ready, "delayed": s.delayed,
                "in_flight": s.in_flight, "dead": s.dead, "paused": s.paused,
            })
        })
        .collect();
    Ok(axum::Json(json!({"queues": items, "next": page.next})))
}

/// `GET /v1/rooms`: the configured rooms.
async fn rooms(
    State(state): State<AppState>,
    Query(q): Query<ListQuery>,
) -> Result<axum::Json<Value>, ApiError> {
    let q = q.checked()?;
    let mut names: Vec<&str> = state.rooms.all().iter().map(|r| r.name()).collect();
    names.sort_unstable();
    let (page, next) = q.page(names.into_iter());
    let mut items = Vec::with_capacity(page.len());
    for name in page {
        if let Some(room) = state.rooms.get(name) {
            items.push(room.figures().await?);
        }
    }
    Ok(axum::Json(json!({"rooms": items, "next": next})))
}

/// `GET /v1/limits`: the configured limits (ad-hoc limits live only in
/// the checks that name them, and are not listed).
async fn limits(
    State(state): State<AppState>,
    Query(q): Query<ListQuery>,
) -> Result<axum::Json<Value>, ApiError> {
    let q = q.checked()?;
    let all = state.limits.configured_infos();
    let (page, next) = q.page(all.iter().map(|(n, _)| n.as_str()));
    let items: Vec<&Value> = page
        .iter()
        .filter_map(|n| all.iter().find(|(m, _)| m == n).map(|(_, v)| v))
        .collect();
    Ok(axum::Json(json!({"limits": items, "next": next})))
}
