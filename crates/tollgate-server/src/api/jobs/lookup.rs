//! What every job route shares: the queue a request names (its handle,
//! tracked for /metrics; 404 `queue_not_found` with a "did you mean"),
//! and the errors job routes answer (`lease_lost`, `job_not_found`,
//! `job_running`).

use std::time::{Duration, UNIX_EPOCH};

use axum::http::StatusCode;
use tollgate::{ErrorKind, JobQueue};

use crate::api::error::ApiError;
use crate::api::tracked::track;
use crate::state::AppState;

pub(super) fn queue(state: &AppState, name: &str, lease_ms: Option<u64>) -> Result<JobQueue, ApiError> {
    let mut q = state.queue_set.open(&state.store, name)?;
    if let Some(ms) = lease_ms {
        q = q.lease(Duration::from_millis(ms))?;
    }
    track(&state.queues, name);
    Ok(q)
}

/// Queues named to check whether they exist for one "did you mean".
const SUGGESTIONS_CHECKED: usize = 3;

/// Called when `q` answered as an empty queue does: 404
/// `queue_not_found` if it never held anything (naming close names of
/// queues that did), else nothing.
pub(super) async fn known(state: &AppState, name: &str, q: &JobQueue) -> Result<(), ApiError> {
    if q.exists().await? {
        return Ok(());
    }
    let mut meant = Vec::new();
    for other in state
        .queue_set
        .close_to(name)
        .into_iter()
        .take(SUGGESTIONS_CHECKED)
    {
        let Ok(o) = state.queue_set.open(&state.store, &other) else {
            continue;
        };
        if o.exists().await.unwrap_or(false) {
            meant.push(format!("{other:?}"));
        }
    }
    let hint = if meant.is_empty() {
        String::new()
    } else {
        format!("; did you mean {}?", meant.join(" or "))
    };
    Err(ApiError::new(
        StatusCode::NOT_FOUND,
        "queue_not_found",
        format!("no such queue {name:?} (nothing was ever pushed to it){hint}"),
    ))
}

pub(super) fn ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub(super) fn lease_lost(e: tollgate::Error) -> ApiError {
    if e.kind() == ErrorKind::LeaseLost {
        ApiError::new(StatusCode::CONFLICT, "lease_lost", e.to_string())
    } else {
        ApiError::from(e)
    }
}

/// No job `id` (`what`: "job", "waiting job") in queue `name`.
pub(super) fn not_found(what: &str, id: &str, name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "job_not_found",
        format!("no {what} {id:?} in queue {name:?}"),
    )
}

pub(super) fn running() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "job_running",
        "the job is being run; it cannot be changed now",
    )
}
