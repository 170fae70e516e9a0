//! The answers a room writes itself (not the upstream's): plain text,
//! JSON or HTML by what the visitor accepts, and the 503 of a room that
//! cannot decide (its store unreachable, or not open yet).

use axum::body::Body;
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::{Response, StatusCode};

use super::{lang, page};

pub(super) const JSON: &str = "application/json";
pub(super) const HTML: &str = "text/html; charset=utf-8";

/// A JSON answer of `body`, never cached.
pub(super) fn json_response(status: StatusCode, body: impl ToString) -> Response<Body> {
    let mut r = typed(body.to_string(), JSON);
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The JSON error body (`tollgate::error_body`) with `status`.
pub(super) fn json_error(status: StatusCode, code: &str, message: &str) -> Response<Body> {
    json_response(status, tollgate::error_body(code, message))
}

/// A response of `body`, of type `content_type`.
pub(super) fn typed(body: impl Into<Body>, content_type: &'static str) -> Response<Body> {
    let mut r = Response::new(body.into());
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

pub(super) fn wants_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/json"))
}

/// The value of the request's cookie `name`, if it has one.
pub(super) fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (k, v) = pair.trim().split_once('=')?;
            (k == name).then(|| v.to_owned())
        })
}

pub(super) fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut r = typed(format!("{text}\n"), "text/plain; charset=utf-8");
    *r.status_mut() = status;
    r
}

/// How long a visitor is told to wait before trying a closed room again.
pub(crate) const TRY_AGAIN_SECONDS: u64 = 5;

/// The answer of a room that cannot decide (its store is unreachable):
/// 503 with `Retry-After`, as JSON for API clients, else `page`.
pub(crate) fn closed(headers: &HeaderMap, page: impl FnOnce() -> Response<Body>) -> Response<Body> {
    let mut r = if wants_json(headers) {
        typed(
            tollgate::error_body(
                "store_unavailable",
                "the waiting room cannot decide right now; try again shortly",
            ),
            JSON,
        )
    } else {
        page()
    };
    *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(TRY_AGAIN_SECONDS));
    r
}

/// `closed` before the store first answered, when no room is built yet:
/// the built-in page, in English.
pub(crate) fn closed_at_start(headers: &HeaderMap) -> Response<Body> {
    closed(headers, || {
        let pages = page::Pages::load(lang::LangSetting::Fixed(lang::Lang::En), |_| None)
            .unwrap_or_else(|_| unreachable!("the built-in pages need no file"));
        typed(pages.try_again("", lang::Lang::En, TRY_AGAIN_SECONDS), HTML)
    })
}
