//! The rate-limit routes: `POST /v1/limits/{name}/check` (a configured
//! limit, or one the check carries) and `GET /v1/limits/{name}`; the
//! limits themselves are in limiters.rs.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use tollgate::{Decision, set_rate_limit_headers};

use super::body::Json;
use super::error::ApiError;
use super::limiters::{LimitInfo, LimitSpec};
use crate::state::AppState;

/// The limit routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/limits/{name}", get(describe))
        .route("/v1/limits/{name}/check", post(check))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CheckBody {
    /// Whose allowance: a client id, an IP, an API key.
    key: String,
    /// What this request costs. Default 1.
    #[serde(default = "one")]
    cost: u64,
    /// The limit, unless the server has one configured under this name
    /// (then it may be repeated but must match).
    rate: Option<String>,
    burst: Option<u64>,
    algorithm: Option<String>,
}

fn one() -> u64 {
    1
}

/// A decision as JSON.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct DecisionBody {
    pub(crate) allowed: bool,
    pub(crate) limit: u64,
    pub(crate) remaining: u64,
    pub(crate) retry_after_ms: u64,
    pub(crate) reset_after_ms: u64,
    /// The store was unreachable and the limiter's policy decided.
    pub(crate) degraded: bool,
}

impl From<&Decision> for DecisionBody {
    fn from(d: &Decision) -> Self {
        DecisionBody {
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            retry_after_ms: d.retry_after.as_millis() as u64,
            reset_after_ms: d.reset_after.as_millis() as u64,
            degraded: d.degraded,
        }
    }
}

/// `POST /v1/limits/{name}/check`: 200 when allowed, 429 when refused; the
/// decision in the body and in the RateLimit-* headers either way.
pub(crate) async fn check(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Json(body): Json<CheckBody>,
) -> Result<Response, ApiError> {
    let spec = match (body.rate, body.burst, body.algorithm) {
        (None, None, None) => None,
        (Some(rate), burst, algorithm) => Some(LimitSpec {
            rate,
            burst,
            algorithm,
        }),
        (None, _, _) => return Err(ApiError::bad_request("burst and algorithm need a rate")),
    };
    let (limiter, limit) = state.limits.resolve(&state.store, &name, spec.as_ref())?;
    let d = limiter.check_with(&body.key, body.cost, &limit).await?;
    let status = if d.allowed {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    let mut response = (status, axum::Json(DecisionBody::from(&d))).into_response();
    set_rate_limit_headers(response.headers_mut(), &d);
    Ok(response)
}

/// `GET /v1/limits/{name}`: a configured limit.
pub(crate) async fn describe(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<axum::Json<LimitInfo>, ApiError> {
    let limiter = state.limits.configured(&name).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "limit_not_found",
            format!("no limit {name:?} is configured on this server"),
        )
    })?;
    Ok(axum::Json(LimitInfo::of(name, limiter)))
}
