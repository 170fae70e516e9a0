//! A job's delivery to a consumer: `claim` (a long-poll for due jobs,
//! under a lease), then `ack` (one or a batch), `nack` or `extend`, each
//! with the delivery's fence.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tollgate::{JobQueue, Nacked, Retry};

use super::lookup::{lease_lost, ms, queue};
use super::reads::{WithPayload, job_json};
use crate::api::body::Json;
use crate::api::error::{ApiError, Query};
use crate::state::AppState;

/// Largest batch ack body: 1,000 deliveries whose ids have the longest
/// length (128 bytes), even with every character escaped, fit.
pub(crate) const ACK_BODY_LIMIT: usize = 512 * 1024;

/// Longest a claim may wait.
const MAX_WAIT_MS: u64 = 60_000;

/// A claim's answer: the first job and all of them.
#[derive(Serialize)]
struct Claimed<'a> {
    job: Option<&'a WithPayload<'a>>,
    jobs: &'a [WithPayload<'a>],
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClaimQuery {
    /// Wait up to this long for a due job (long-poll). Default 0, at most
    /// 60 000.
    #[serde(default)]
    wait_ms: u64,
    /// The visibility lease. Default 30 000.
    lease_ms: Option<u64>,
    /// Claim up to this many jobs (1 to 1,000). Default 1.
    #[serde(default = "one")]
    max: usize,
}

fn one() -> usize {
    1
}

/// `POST /v1/queues/{queue}/claim?wait_ms=&lease_ms=&max=`: `{"job": {…},
/// "jobs": [{…}, …]}` (`job` is the first), or `{"job": null, "jobs": []}`
/// when none came due within the wait.
pub(crate) async fn claim(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<ClaimQuery>,
) -> Result<Response, ApiError> {
    if query.wait_ms > MAX_WAIT_MS {
        return Err(ApiError::bad_request(format!(
            "wait_ms must be at most {MAX_WAIT_MS}"
        )));
    }
    let q = queue(&state, &name, query.lease_ms)?;
    let mut stopping = state.stopping.clone();
    let jobs = tokio::select! {
        jobs = q.next_many(query.max, Duration::from_millis(query.wait_ms)) => jobs?,
        // Shutting down: answer a pending long-poll at once, empty.
        _ = stopping.wait_for(|s| *s) => Vec::new(),
    };
    let jobs: Vec<WithPayload<'_>> = jobs.iter().map(job_json).collect();
    let answer = Claimed {
        job: jobs.first(),
        jobs: &jobs,
    };
    Ok(axum::Json(answer).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FenceBody {
    fence: u64,
    /// nack: retry after this long instead of the job's backoff.
    delay_ms: Option<u64>,
    /// extend: the new lease from now. Default 30 000.
    lease_ms: Option<u64>,
    /// ack: keep the job as completed instead of deleting it.
    keep: Option<KeepBody>,
    /// nack: why the job failed; kept with it (its first 4 KiB) if this
    /// nack makes it dead, and listed as its `last_error`.
    error: Option<String>,
}

/// Retention of acked jobs: the last `count` (1 to 1,000,000) acked with
/// this setting, none older than `max_age_ms`. Kept jobs still dedupe.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KeepBody {
    count: usize,
    max_age_ms: u64,
}

fn keeping(q: JobQueue, keep: Option<KeepBody>) -> Result<JobQueue, ApiError> {
    match keep {
        None => Ok(q),
        Some(k) => Ok(q.keep_completed(k.count, Duration::from_millis(k.max_age_ms))?),
    }
}

/// `POST /v1/queues/{queue}/jobs/{id}/ack`.
pub(crate) async fn ack(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    Json(body): Json<FenceBody>,
) -> Result<axum::Json<Value>, ApiError> {
    keeping(queue(&state, &name, None)?, body.keep)?
        .ack(&id, body.fence)
        .await
        .map_err(lease_lost)?;
    Ok(axum::Json(json!({"acked": true})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Delivery {
    id: String,
    fence: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AckBatchBody {
    /// 1 to 1,000 deliveries.
    deliveries: Vec<Delivery>,
    keep: Option<KeepBody>,
}

/// `POST /v1/queues/{queue}/ack`: acks deliveries in one step (one per
/// partition on a partitioned queue); `{"acked": [true, false, …],
/// "failed": 0}` in order (`false`: that delivery's lease had ended, or it
/// was named twice). A delivery whose partition failed answers `null`, and
/// `errors` lists `{"index", "error"}` for each (when all failed, the
/// answer is that error's status instead).
pub(crate) async fn ack_batch(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Json(body): Json<AckBatchBody>,
) -> Result<axum::Json<Value>, ApiError> {
    if body.deliveries.is_empty() {
        return Err(ApiError::bad_request("deliveries must name 1 to 1000 jobs"));
    }
    let q = keeping(queue(&state, &name, None)?, body.keep)?;
    let deliveries: Vec<(&str, u64)> = body.deliveries.iter().map(|d| (d.id.as_str(), d.fence)).collect();
    let mut acked = Vec::with_capacity(deliveries.len());
    let mut errors = Vec::new();
    let mut last_error = None;
    for (index, answer) in q.ack_each(&deliveries).await?.into_iter().enumerate() {
        match answer {
            Ok(flag) => acked.push(Value::Bool(flag)),
            Err(e) => {
                acked.push(Value::Null);
                errors.push(json!({"index": index, "error": ApiError::uncounted(&e).item()}));
                last_error = Some(e);
            }
        }
    }
    match last_error.map(ApiError::from) {
        Some(e) if errors.len() == acked.len() => Err(e),
        _ => {
            let failed = errors.len();
            let mut answer = json!({"acked": acked, "failed": failed});
            if failed > 0 {
                answer["errors"] = Value::Array(errors);
            }
            Ok(axum::Json(answer))
        }
    }
}

/// `POST /v1/queues/{queue}/jobs/{id}/nack`.
pub(crate) async fn nack(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    Json(body): Json<FenceBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let retry = body
        .delay_ms
        .map_or(Retry::Backoff, |d| Retry::After(Duration::from_millis(d)));
    let q = queue(&state, &name, None)?;
    let nacked = match &body.error {
        Some(e) => q.nack_with_error(&id, body.fence, retry, e).await,
        None => q.nack(&id, body.fence, retry).await,
    };
    let answer = match nacked.map_err(lease_lost)? {
        Nacked::RetryAt(at) => json!({"result": "retry", "due_ms": ms(at)}),
        Nacked::Dead => json!({"result": "dead"}),
    };
    Ok(axum::Json(answer))
}

/// `POST /v1/queues/{queue}/jobs/{id}/extend`.
pub(crate) async fn extend(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    Json(body): Json<FenceBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let lease = Duration::from_millis(body.lease_ms.unwrap_or(30_000));
    let until = queue(&state, &name, None)?
        .extend(&id, body.fence, lease)
        .await
        .map_err(lease_lost)?;
    Ok(axum::Json(json!({"lease_until_ms": ms(until)})))
}
