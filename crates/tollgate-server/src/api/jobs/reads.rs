//! The read-only job routes: a queue's figures, its dead and completed
//! jobs, one job, a page of jobs in one state; and the JSON of a job that
//! they, the claims and the CLI share.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tollgate::{Job, JobInfo, JobState};

use super::lookup::{known, ms, not_found, queue};
use crate::api::error::{ApiError, Query};
use crate::state::AppState;

/// A job's `fields` and its payload twice: as JSON (null if it is not
/// JSON), written out as stored rather than parsed into a tree (a payload
/// of many small values would take many times its size in memory), and
/// as base64.
#[derive(Serialize)]
pub(crate) struct WithPayload<'a> {
    #[serde(flatten)]
    fields: Value,
    payload: Option<&'a RawValue>,
    payload_base64: String,
}

fn with_payload(fields: Value, payload: &[u8]) -> WithPayload<'_> {
    WithPayload {
        fields,
        payload: serde_json::from_slice(payload).ok(),
        payload_base64: STANDARD.encode(payload),
    }
}

pub(super) fn job_json(job: &Job) -> WithPayload<'_> {
    with_payload(
        json!({"id": job.id, "attempt": job.attempt, "fence": job.fence, "lease_until_ms": ms(job.lease_until),
               "group": job.group}),
        &job.payload,
    )
}

/// The answer of `GET /dead` and `GET /completed`: the jobs, and whether
/// the listing stopped at its byte bound ([`tollgate::JOB_LISTING_BYTES`])
/// before `limit`, so that more may follow.
#[derive(Serialize)]
struct Listing<'a> {
    jobs: Vec<WithPayload<'a>>,
    truncated: bool,
}

impl<'a> Listing<'a> {
    /// `jobs`, whose ids, errors and payloads took `bytes`, asked for with
    /// `limit`.
    fn new(jobs: Vec<WithPayload<'a>>, bytes: usize, limit: usize) -> Listing<'a> {
        let truncated = jobs.len() < limit && bytes >= tollgate::JOB_LISTING_BYTES;
        Listing { jobs, truncated }
    }
}

/// `GET /v1/queues/{queue}/completed?limit=100`: kept completed jobs, most
/// recent first, bounded in bytes as the library's listing is.
pub(crate) async fn completed(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<DeadQuery>,
) -> Result<Response, ApiError> {
    let q = queue(&state, &name, None)?;
    let limit = query.limit()?;
    let list = q.completed(limit).await?;
    if list.is_empty() {
        known(&state, &name, &q).await?;
    }
    let bytes = list.iter().map(|d| d.id.len() + d.payload.len()).sum();
    let jobs = list
        .iter()
        .map(|d| with_payload(json!({"id": d.id, "acked_ms": ms(d.acked)}), &d.payload))
        .collect();
    Ok(axum::Json(Listing::new(jobs, bytes, limit)).into_response())
}

/// `GET /v1/queues/{queue}`.
pub(crate) async fn stats(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let q = queue(&state, &name, None)?;
    let s = q.stats().await?;
    if s.is_blank() {
        known(&state, &name, &q).await?;
    }
    let pick = |q: f64| s.recent_lateness_quantile(q).map(|d| d.as_millis() as u64);
    Ok(axum::Json(json!({
        "queue": name, "partitions": q.partitions(), "ready": s.ready, "delayed": s.delayed, "in_flight": s.in_flight, "dead": s.dead, "completed": s.completed,
        "pushed": s.pushed, "claimed": s.claimed, "acked": s.acked, "retried": s.retried,
        "dead_total": s.dead_total, "redelivered": s.redelivered, "paused": s.paused,
        "groups": s.groups, "groups_held": s.groups_held, "limited_claims": s.limited_claims,
        "recent_lateness_p50_ms": pick(0.5), "recent_lateness_p99_ms": pick(0.99),
        "recent_lateness_max_ms": pick(1.0),
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeadQuery {
    #[serde(default = "hundred")]
    limit: usize,
}

fn hundred() -> usize {
    100
}

impl DeadQuery {
    fn limit(&self) -> Result<usize, ApiError> {
        if self.limit == 0 || self.limit > 10_000 {
            return Err(ApiError::bad_request("limit must be 1 to 10000"));
        }
        Ok(self.limit)
    }
}

/// `GET /v1/queues/{queue}/dead?limit=100`: bounded in bytes as the
/// library's listing is.
pub(crate) async fn dead(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<DeadQuery>,
) -> Result<Response, ApiError> {
    let q = queue(&state, &name, None)?;
    let limit = query.limit()?;
    let list = q.dead(limit).await?;
    if list.is_empty() {
        known(&state, &name, &q).await?;
    }
    let bytes = list
        .iter()
        .map(|d| d.id.len() + d.payload.len() + d.last_error.as_ref().map_or(0, String::len))
        .sum();
    let jobs = list
        .iter()
        .map(|d| {
            let fields = json!({"id": d.id, "died_ms": ms(d.died), "attempts": d.attempts,
                                "last_error": d.last_error});
            with_payload(fields, &d.payload)
        })
        .collect();
    Ok(axum::Json(Listing::new(jobs, bytes, limit)).into_response())
}

/// A job as `GET /v1/queues/{queue}/jobs/{id}` and the listing answer
/// it (the CLI prints the same): its state's time under that state's
/// word elsewhere in the API (due_ms, lease_until_ms, died_ms, acked_ms),
/// and a preview of the payload: its first bytes as text if they are
/// UTF-8 (a character cut at the end dropped), else as base64.
pub(crate) fn job_info_json(j: &JobInfo) -> Value {
    let preview = &j.payload_preview;
    let text = match std::str::from_utf8(preview) {
        Ok(t) => Some(t),
        // Only a character cut by the preview's end: the text before it.
        Err(e) if e.error_len().is_none() && (preview.len() as u64) < j.payload_size => {
            std::str::from_utf8(&preview[..e.valid_up_to()]).ok()
        }
        Err(_) => None,
    };
    let (encoding, shown) = match text {
        Some(t) => ("utf8", t.to_owned()),
        None => ("base64", STANDARD.encode(preview)),
    };
    let mut v = json!({
        "id": j.id, "state": j.state.as_str(), "attempts": j.attempts, "max_attempts": j.max_attempts,
        "priority": j.priority, "fence": j.fence, "last_error": j.last_error,
        "payload_size": j.payload_size, "payload_preview": shown, "payload_preview_encoding": encoding,
        "payload_truncated": (preview.len() as u64) < j.payload_size, "group": j.group,
    });
    let at = match j.state {
        JobState::Delayed => Some("due_ms"),
        JobState::Running => Some("lease_until_ms"),
        JobState::Dead => Some("died_ms"),
        JobState::Completed => Some("acked_ms"),
        _ => None,
    };
    if let (Some(field), Some(t)) = (at, j.at) {
        v[field] = json!(ms(t));
    }
    v
}

/// `GET /v1/queues/{queue}/jobs/{id}`: one job as it stands (read only),
/// with its whole payload too (the listings carry a preview, or a bounded
/// number of payloads). 404 `job_not_found` for a job the store does not
/// hold (never pushed, cancelled, purged, or acked without being kept).
pub(crate) async fn show(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    match queue(&state, &name, None)?.get_with_payload(&id).await? {
        Some((j, payload)) => Ok(axum::Json(shown(&j, &payload)).into_response()),
        None => Err(not_found("job", &id, &name)),
    }
}

/// A job as `GET /v1/queues/{queue}/jobs/{id}` shows it (and the CLI's
/// `jobs show`): [`job_info_json`] and its whole `payload`.
pub(crate) fn shown<'a>(j: &JobInfo, payload: &'a [u8]) -> WithPayload<'a> {
    with_payload(job_info_json(j), payload)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    /// ready, delayed, running, dead or completed.
    state: String,
    /// A listing's `next`; the start if left out.
    cursor: Option<String>,
    /// 1 to 1,000. Default 100.
    #[serde(default = "hundred")]
    limit: usize,
}

/// `GET /v1/queues/{queue}/jobs?state=dead&cursor=…&limit=100`: a page of
/// the jobs in one state, and the cursor of the next (null at the end).
pub(crate) async fn list(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<axum::Json<Value>, ApiError> {
    let job_state: JobState = query.state.parse()?;
    if query.limit == 0 || query.limit > tollgate::MAX_JOB_LIST {
        return Err(ApiError::bad_request(format!(
            "limit must be 1 to {}",
            tollgate::MAX_JOB_LIST
        )));
    }
    let q = queue(&state, &name, None)?;
    let page = q.list(job_state, query.cursor.as_deref(), query.limit).await?;
    if page.jobs.is_empty() && query.cursor.is_none() {
        known(&state, &name, &q).await?;
    }
    let jobs: Vec<Value> = page.jobs.iter().map(job_info_json).collect();
    Ok(axum::Json(json!({"jobs": jobs, "next": page.next})))
}
