//! A gate's admin routes: the head of its line, and ending someone
//! else's place in it (revoking a holder, removing a ticket from the line).
//! The holders' list (with the handles a revoke takes) is in gates.rs.
//!
//! Neither route ever shows a token or a ticket id: whoever has one can act
//! as its holder or waiter. A holder is named by its handle (a hash of its
//! token), a ticket by its number (its arrival count on the gate).

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get};
use serde::Deserialize;
use serde_json::json;
use tollgate::{Gate, GateOptions, Left};

use super::error::{ApiError, Query};
use super::tracked::track;
use crate::state::AppState;

/// The gate admin routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/gates/{name}/line", get(line))
        .route("/v1/gates/{name}/line/{number}", delete(remove_waiter))
        .route("/v1/gates/{name}/holders/{handle}", delete(revoke))
}

/// A handle on the gate; these operations use no lease or heartbeat
/// length, so the defaults do.
fn gate(state: &AppState, name: &str) -> Result<Gate, ApiError> {
    let gate = Gate::new(&state.store, name, None, GateOptions::default())?;
    track(&state.gates, name);
    Ok(gate)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LineQuery {
    /// At most this many, head first. Default 100, at most 1000.
    #[serde(default = "hundred")]
    limit: u32,
}

fn hundred() -> u32 {
    100
}

async fn line(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<LineQuery>,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    let g = gate(&state, &name)?;
    let line: Vec<serde_json::Value> = g
        .line(q.limit)
        .await?
        .into_iter()
        .map(|w| {
            json!({
                "number": w.number,
                "position": w.position,
                "permits": w.permits,
                "label": w.label,
            })
        })
        .collect();
    Ok(axum::Json(json!({"line": line})))
}

async fn revoke(
    State(state): State<AppState>,
    Path((name, handle)): Path<(String, String)>,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    let g = gate(&state, &name)?;
    match g.revoke(&handle).await? {
        Left::Unknown => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "holder_not_found",
            "no current holder has that handle: it ended (expired, released or revoked) or never existed",
        )),
        _ => Ok(axum::Json(json!({"revoked": true}))),
    }
}

async fn remove_waiter(
    State(state): State<AppState>,
    Path((name, number)): Path<(String, String)>,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    let g = gate(&state, &name)?;
    let number: u64 = number
        .parse()
        .map_err(|_| ApiError::bad_request(format!("{number:?} is not a ticket number")))?;
    match g.remove_waiter(number).await? {
        Left::Unknown => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "ticket_not_found",
            "no ticket in line has that number: it was granted, left or never existed",
        )),
        _ => Ok(axum::Json(json!({"removed": true}))),
    }
}
