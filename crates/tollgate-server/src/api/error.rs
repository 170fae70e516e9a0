//! The API's one error shape, `{"error": {"code", "message"}}`: the
//! [`ApiError`] every handler returns, the body builder shared with the
//! waiting rooms and hyper's rewritten answers, and the query extractor
//! whose rejections use it.

use axum::extract::FromRequestParts;
use axum::extract::rejection::QueryRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tollgate::ErrorKind;

/// The one error shape: `{"error": {"code", "message"}}` with a fitting
/// status; never a 500 for a caller's mistake.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    pub(crate) code: &'static str,
    message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// The `{"code", "message"}` of the error, for answers that carry one
    /// error per item of a batch.
    pub(crate) fn item(&self) -> serde_json::Value {
        json!({"code": self.code, "message": self.message})
    }

    /// The answer for a library error, without counting it in the
    /// store-error metric (for the items of a batch: the batch counts once).
    pub(crate) fn uncounted(e: &tollgate::Error) -> Self {
        let (status, code) = match e.kind() {
            ErrorKind::InvalidInput => (StatusCode::BAD_REQUEST, "bad_request"),
            ErrorKind::CapacityConflict => (StatusCode::CONFLICT, "capacity_conflict"),
            ErrorKind::NoCapacity => (StatusCode::CONFLICT, "no_capacity"),
            ErrorKind::LeaseLost => (StatusCode::NOT_FOUND, "lease_not_found"),
            ErrorKind::JobRunning => (StatusCode::CONFLICT, "job_running"),
            ErrorKind::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable"),
            ErrorKind::NotReplicated => (StatusCode::SERVICE_UNAVAILABLE, "not_replicated"),
            // The embedded store's disk is full or failing: changes wait.
            ErrorKind::NotPersisted => (StatusCode::INSUFFICIENT_STORAGE, "not_persisted"),
            ErrorKind::PartitionConflict => (StatusCode::CONFLICT, "partition_conflict"),
            // Not 404: the waiter must stop rather than queue again.
            ErrorKind::Removed => (StatusCode::GONE, "ticket_removed"),
            // An admin closed the gate's door: nobody new enters for now.
            ErrorKind::Closed => (StatusCode::CONFLICT, "gate_closed"),
            // The server's set-up, not the caller's request.
            ErrorKind::Misconfigured => (StatusCode::INTERNAL_SERVER_ERROR, "store_misconfigured"),
            _ => (StatusCode::BAD_GATEWAY, "store_error"),
        };
        // What mends it, in the API's words.
        let hint = match e.kind() {
            ErrorKind::CapacityConflict => {
                "; leave capacity out to use the stored one, or change it with PUT /v1/gates/{name}/capacity"
            }
            ErrorKind::NoCapacity => "; name one: capacity in the request body",
            _ => "",
        };
        ApiError::new(status, code, format!("{e}{hint}"))
    }
}

impl From<tollgate::Error> for ApiError {
    fn from(e: tollgate::Error) -> Self {
        let answer = ApiError::uncounted(&e);
        if matches!(
            e.kind(),
            ErrorKind::Unavailable
                | ErrorKind::Store
                | ErrorKind::Misconfigured
                | ErrorKind::NotReplicated
                | ErrorKind::NotPersisted
                | ErrorKind::PartitionConflict
        ) {
            metrics::counter!("tollgate_store_errors_total", "code" => answer.code).increment(1);
        }
        answer
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // The one error body, shared with the rooms and the rate-limit layer.
        let body = tollgate::error_body(self.code, &self.message);
        let json = [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))];
        let mut response = (self.status, json, body).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE || self.status == StatusCode::INSUFFICIENT_STORAGE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// Query extractor whose rejections use the API's error shape.
pub(crate) struct Query<T>(pub(crate) T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(v)| Query(v))
            .map_err(|e: QueryRejection| {
                ApiError::bad_request(format!("bad query string: {}", e.body_text()))
            })
    }
}

/// The query of every listing (`GET /v1/gates`, `/v1/queues`, `/v1/rooms`,
/// `/v1/limits`, `/v1/schedules`): names starting with `prefix`, after
/// `cursor` (a page's `next`), up to `limit` (1 to 1,000, default 100).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    #[serde(default)]
    pub(crate) prefix: String,
    pub(crate) cursor: Option<String>,
    #[serde(default = "hundred")]
    pub(crate) limit: usize,
}

fn hundred() -> usize {
    100
}

impl ListQuery {
    /// Checks the bounds the library checks too, so a configured list
    /// (rooms, limits) refuses what the store's lists refuse.
    pub(crate) fn checked(self) -> Result<ListQuery, ApiError> {
        if self.limit == 0 || self.limit > tollgate::MAX_PAGE {
            return Err(ApiError::bad_request(format!(
                "limit must be 1 to {}",
                tollgate::MAX_PAGE
            )));
        }
        if self.prefix.len() > tollgate::MAX_NAME_LEN
            || self
                .cursor
                .as_ref()
                .is_some_and(|c| c.len() > tollgate::MAX_NAME_LEN)
        {
            return Err(ApiError::bad_request(format!(
                "prefix and cursor are at most {} bytes",
                tollgate::MAX_NAME_LEN
            )));
        }
        Ok(self)
    }

    /// One page of `names` (sorted, unique): those that match, after the
    /// cursor, and the next cursor if more may follow.
    pub(crate) fn page<'a>(&self, names: impl Iterator<Item = &'a str>) -> (Vec<&'a str>, Option<String>) {
        let mut page: Vec<&str> = names
            .filter(|n| n.starts_with(&self.prefix))
            .filter(|n| self.cursor.as_deref().is_none_or(|c| *n > c))
            .take(self.limit + 1)
            .collect();
        let next = if page.len() > self.limit {
            page.truncate(self.limit);
            page.last().map(|n| (*n).to_owned())
        } else {
            None
        };
        (page, next)
    }
}
