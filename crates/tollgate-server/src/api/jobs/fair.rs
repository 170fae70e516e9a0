//! A queue's limits and groups (docs/JOBS.md, "Fair queues"):
//! `GET`/`PUT /v1/queues/{queue}/settings`, a group's own limits at
//! `/v1/queues/{queue}/groups/{group}/limits` (GET, PUT, DELETE), and the
//! listing `GET /v1/queues/{queue}/groups`.

use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tollgate::{GroupHold, GroupLimits};

use super::lookup::{ms, queue};
use super::settings::{SettingsBody, rate};
use crate::api::body::Json;
use crate::api::error::{ApiError, Query};
use crate::state::AppState;

/// `GET /v1/queues/{queue}/settings`: the queue's limits.
pub(crate) async fn settings(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<axum::Json<SettingsBody>, ApiError> {
    let q = queue(&state, &name, None)?;
    Ok(axum::Json(SettingsBody::of(&q.limits().await?)))
}

/// `PUT /v1/queues/{queue}/settings`: replaces the queue's limits (a
/// limit left out is none); they apply from the next claim. Answers them.
pub(crate) async fn set_settings(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Json(body): Json<SettingsBody>,
) -> Result<axum::Json<SettingsBody>, ApiError> {
    let limits = body.limits()?;
    let q = queue(&state, &name, None)?;
    q.set_limits(&limits).await?;
    Ok(axum::Json(SettingsBody::of(&limits)))
}

/// One group's own limits: `{"concurrency", "rate"}`, null for the
/// queue's group limit.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupLimitsBody {
    #[serde(default)]
    concurrency: Option<u32>,
    #[serde(default)]
    rate: Option<String>,
}

/// `GET /v1/queues/{queue}/groups/{group}/limits`: the group's own limits
/// (404 `limits_not_found` if it has none).
pub(crate) async fn group_limits(
    State(state): State<AppState>,
    Path((name, group)): Path<(String, String)>,
) -> Result<axum::Json<GroupLimitsBody>, ApiError> {
    let q = queue(&state, &name, None)?;
    match q.group_limits(&group).await? {
        Some(l) => Ok(axum::Json(GroupLimitsBody {
            concurrency: l.concurrency,
            rate: l.rate.map(|r| r.to_string()),
        })),
        None => Err(ApiError::new(
            axum::http::StatusCode::NOT_FOUND,
            "limits_not_found",
            format!("group {group:?} of queue {name:?} has no limits of its own"),
        )),
    }
}

/// `PUT /v1/queues/{queue}/groups/{group}/limits`: sets the group's own
/// limits, in place of the queue's group limits. Answers them.
pub(crate) async fn set_group_limits(
    State(state): State<AppState>,
    Path((name, group)): Path<(String, String)>,
    Json(body): Json<GroupLimitsBody>,
) -> Result<axum::Json<GroupLimitsBody>, ApiError> {
    let limits = GroupLimits {
        concurrency: body.concurrency,
        rate: rate("rate", body.rate.as_deref())?,
    };
    if limits == GroupLimits::default() {
        return Err(ApiError::bad_request(
            "give concurrency or rate (DELETE drops a group's own limits)",
        ));
    }
    let q = queue(&state, &name, None)?;
    q.set_group_limits(&group, Some(&limits)).await?;
    Ok(axum::Json(body))
}

/// `DELETE /v1/queues/{queue}/groups/{group}/limits`: the queue's group
/// limits apply to the group again.
pub(crate) async fn drop_group_limits(
    State(state): State<AppState>,
    Path((name, group)): Path<(String, String)>,
) -> Result<axum::Json<Value>, ApiError> {
    let q = queue(&state, &name, None)?;
    q.set_group_limits(&group, None).await?;
    Ok(axum::Json(json!({"result": "dropped"})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupsQuery {
    /// A listing's `next`; the start if left out.
    after: Option<String>,
    /// 1 to 1,000. Default 100.
    #[serde(default = "hundred")]
    limit: usize,
}

fn hundred() -> usize {
    100
}

/// `GET /v1/queues/{queue}/groups?limit=100&after=…`: the groups with
/// ready or running jobs, most ready first, and the cursor of the next
/// page (null at the end).
pub(crate) async fn groups(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<GroupsQuery>,
) -> Result<axum::Json<Value>, ApiError> {
    let q = queue(&state, &name, None)?;
    let page = q.groups(query.after.as_deref(), query.limit).await?;
    let groups: Vec<Value> = page.groups.iter().map(group_json).collect();
    Ok(axum::Json(json!({"groups": groups, "next": page.next})))
}

/// One listed group: `held` is null, "concurrency" or "rate" (then
/// `held_until_ms` says until when).
pub(crate) fn group_json(g: &tollgate::GroupInfo) -> Value {
    let (held, until) = match g.held {
        None => (None, None),
        Some(GroupHold::Concurrency) => (Some("concurrency"), None),
        Some(GroupHold::Rate(t)) => (Some("rate"), Some(ms(t))),
    };
    json!({
        "group": g.group, "ready": g.ready, "running": g.running, "held": held,
        "held_until_ms": until, "concurrency": g.concurrency,
        "rate": g.rate.map(|r| r.to_string()),
    })
}
