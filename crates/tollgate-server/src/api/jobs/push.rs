//! Pushing jobs: `POST /v1/queues/{queue}/jobs` (one) and
//! `POST /v1/queues/{queue}/batch` (up to 1,000), read straight from the
//! request's bytes.

use std::borrow::Cow;
use std::time::{Duration, UNIX_EPOCH};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tollgate::{OnDuplicate, PushOptions, PushResult, Pushed};

use super::lookup::{ms, queue};
use crate::api::body::{BackoffBody, JsonBody, compact, parse};
use crate::api::error::ApiError;
use crate::state::AppState;

/// Largest push body: a 1 MiB payload, base64-encoded, plus options.
pub(crate) const PUSH_BODY_LIMIT: usize = 1_500_000;
/// Largest batch push body.
pub(crate) const BATCH_BODY_LIMIT: usize = 16 * 1024 * 1024;

/// One job as pushed. Read straight from the request's bytes: the payload
/// stays a slice of them (a `serde_json::Value` of a payload of many small
/// items took ~16 times its size).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PushBody<'a> {
    /// Any JSON value, stored as its JSON text (without the whitespace
    /// between tokens).
    #[serde(borrow)]
    payload: Option<&'a RawValue>,
    /// Or raw bytes, base64 (standard alphabet).
    #[serde(borrow)]
    payload_base64: Option<Cow<'a, str>>,
    id: Option<String>,
    delay_ms: Option<u64>,
    /// Due at this Unix time in ms (wins over `delay_ms`); at most a year
    /// ahead.
    at_ms: Option<u64>,
    #[serde(default)]
    priority: u8,
    max_attempts: Option<u32>,
    backoff: Option<BackoffBody>,
    /// `keep` (default) or `replace`.
    on_duplicate: Option<String>,
    /// The job's group (docs/JOBS.md, "Fair queues"); the default group
    /// if left out.
    group: Option<String>,
}

/// The payload and options of one pushed job.
fn push_of(body: PushBody<'_>) -> Result<(Cow<'_, [u8]>, PushOptions), ApiError> {
    let payload = match (body.payload, body.payload_base64) {
        (Some(v), None) => compact(v.get()),
        (None, Some(b)) => Cow::Owned(
            STANDARD
                .decode(b.as_bytes())
                .map_err(|_| ApiError::bad_request("payload_base64 is not valid base64"))?,
        ),
        (None, None) => return Err(ApiError::bad_request("give payload (JSON) or payload_base64")),
        (Some(_), Some(_)) => return Err(ApiError::bad_request("give payload or payload_base64, not both")),
    };
    let defaults = PushOptions::default();
    let backoff = match body.backoff {
        None => defaults.backoff,
        Some(b) => b.backoff().map_err(ApiError::bad_request)?,
    };
    let on_duplicate = match body.on_duplicate.as_deref() {
        None | Some("keep") => OnDuplicate::Keep,
        Some("replace") => OnDuplicate::Replace,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "on_duplicate {other:?}: use keep or replace"
            )));
        }
    };
    let at = match body.at_ms {
        None => None,
        Some(at) => Some(run_at(at)?),
    };
    let options = PushOptions {
        id: body.id,
        delay: body.delay_ms.map(Duration::from_millis),
        at,
        priority: body.priority,
        max_attempts: body.max_attempts.unwrap_or(defaults.max_attempts),
        backoff,
        on_duplicate,
        group: body.group,
    };
    Ok((payload, options))
}

/// `at_ms` as a time: at most a year ahead of now, the bound `delay_ms`
/// has (a time in the past is due at once).
fn run_at(at_ms: u64) -> Result<std::time::SystemTime, ApiError> {
    let latest = ms(std::time::SystemTime::now()).saturating_add(tollgate::MAX_JOB_DELAY.as_millis() as u64);
    if at_ms > latest {
        return Err(ApiError::bad_request(format!(
            "at_ms {at_ms} is more than a year ahead (at most {latest} now)"
        )));
    }
    Ok(UNIX_EPOCH + Duration::from_millis(at_ms))
}

/// A push's answer and its status: 201 for a created job, else 200.
fn pushed_json(p: &Pushed) -> (StatusCode, Value) {
    let (status, result) = match p.result {
        PushResult::Created => (StatusCode::CREATED, "created"),
        PushResult::Kept => (StatusCode::OK, "kept"),
        PushResult::Replaced => (StatusCode::OK, "replaced"),
        PushResult::Busy => (StatusCode::OK, "busy"),
    };
    (
        status,
        json!({"id": p.id, "result": result, "due_ms": p.due.map(ms)}),
    )
}

/// `POST /v1/queues/{queue}/jobs`.
pub(crate) async fn push(
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let q = queue(&state, &name, None)?;
    let (payload, options) = push_of(parse(&body)?)?;
    let (status, answer) = pushed_json(&q.push(&payload, &options).await?);
    Ok((status, axum::Json(answer)).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BatchBody<'a> {
    /// 1 to 1,000 jobs, each as the body of a single push.
    #[serde(borrow)]
    jobs: Vec<PushBody<'a>>,
}

/// `POST /v1/queues/{queue}/batch`: pushes up to 1,000 jobs, answering
/// per job, in order. Nothing is pushed if any job is invalid. A plain
/// queue takes them in one atomic step; a partitioned one in one step per
/// partition, so a failing partition fails only its jobs: those answer
/// `{"id", "error": {"code", "message"}}`, and `failed` counts them (when
/// every job failed, the answer is that error's status instead).
pub(crate) async fn push_batch(
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<axum::Json<Value>, ApiError> {
    let q = queue(&state, &name, None)?;
    let body: BatchBody<'_> = parse(&body)?;
    let jobs = body
        .jobs
        .into_iter()
        .map(push_of)
        .collect::<Result<Vec<_>, _>>()?;
    let mut failed = 0;
    let mut answers = Vec::with_capacity(jobs.len());
    let mut last_error = None;
    for answer in q.push_each(&jobs).await? {
        match answer {
            Ok(p) => answers.push(pushed_json(&p).1),
            Err(f) => {
                failed += 1;
                answers.push(json!({"id": f.id, "error": ApiError::uncounted(&f.error).item()}));
                last_error = Some(f.error);
            }
        }
    }
    // Counted once per batch in the store-error metric.
    match last_error.map(ApiError::from) {
        Some(e) if failed == answers.len() => Err(e),
        _ => Ok(axum::Json(json!({"jobs": answers, "failed": failed}))),
    }
}
