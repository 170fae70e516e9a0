//! Request bodies on the API: the JSON extractors (their rejections in the
//! one error shape), the body-size limit of each route, and the deadline
//! for reading a body.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper::body::{Frame, SizeHint};
use serde::Deserialize;

use super::error::ApiError;

/// Largest request body on routes that do not say otherwise.
pub(crate) const BODY_LIMIT: usize = 16 * 1024;

/// How long a request body may take to arrive, by default.
pub(crate) const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The body-size limit in force on a route, so a 413 can name it. Set with
/// [`limited`] beside axum's `DefaultBodyLimit`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyLimit(pub(crate) usize);

/// A route with bodies up to `bytes`, instead of [`BODY_LIMIT`].
pub(crate) fn limited<S: Clone + Send + Sync + 'static>(
    route: axum::routing::MethodRouter<S>,
    bytes: usize,
) -> axum::routing::MethodRouter<S> {
    route
        .layer::<_, std::convert::Infallible>(axum::extract::DefaultBodyLimit::max(bytes))
        .layer::<_, std::convert::Infallible>(axum::Extension(BodyLimit(bytes)))
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("request bodies on this route are limited to {limit} bytes"),
    )
}

/// Whether the request says its body is JSON (`application/json`, or any
/// `application/*+json`, parameters allowed); `None` when it names no
/// content type.
fn says_json(headers: &HeaderMap) -> Option<bool> {
    let value = headers.get(header::CONTENT_TYPE)?;
    let Ok(text) = value.to_str() else {
        return Some(false);
    };
    let essence = text.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    Some(match essence.split_once('/') {
        Some(("application", sub)) => sub == "json" || sub.ends_with("+json"),
        _ => false,
    })
}

/// A JSON request body as bytes, checked: its content type, the route's
/// size limit. An empty body sent without a content type (or as JSON) is
/// read as `{}`, so a body whose fields are all optional may be left out.
#[derive(Debug)]
pub(crate) struct JsonBody(pub(crate) Bytes);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, ApiError> {
        let limit = req.extensions().get::<BodyLimit>().map_or(BODY_LIMIT, |l| l.0);
        let json = says_json(req.headers());
        let bytes = collect(req.into_body(), limit).await?;
        match json {
            None | Some(true) if bytes.is_empty() => Ok(JsonBody(Bytes::from_static(b"{}"))),
            Some(true) => Ok(JsonBody(bytes)),
            None | Some(false) => Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send the body as JSON with Content-Type: application/json",
            )),
        }
    }
}

/// Reads `body` (at most `limit` bytes) into one buffer, frame by frame:
/// each frame is dropped once copied, so a big body costs its size once
/// (collecting the frames first, then joining them, costs it twice).
async fn collect(mut body: Body, limit: usize) -> Result<Bytes, ApiError> {
    use http_body_util::BodyExt;
    if hyper::body::Body::size_hint(&body).lower() > limit as u64 {
        return Err(too_large(limit));
    }
    let mut buf = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ApiError::bad_request(format!("cannot read the body: {e}")))?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > limit {
                return Err(too_large(limit));
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(buf))
}

/// JSON body extractor whose rejections use the API's error shape.
pub(crate) struct Json<T>(pub(crate) T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let JsonBody(bytes) = JsonBody::from_request(req, state).await?;
        parse(&bytes).map(Json)
    }
}

/// Reads `bytes` as a `T`; the error names where the JSON went wrong.
pub(crate) fn parse<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("malformed JSON body: {e}")))
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BackoffBody {
    /// `fixed` or `exponential`.
    pub(crate) kind: String,
    pub(crate) base_ms: u64,
    /// Exponential only: the longest wait. Default 300 000.
    pub(crate) max_ms: Option<u64>,
}

impl BackoffBody {
    /// The backoff this names; the error says what is wrong.
    pub(crate) fn backoff(&self) -> Result<tollgate::Backoff, String> {
        match self.kind.as_str() {
            "fixed" => Ok(tollgate::Backoff::Fixed(Duration::from_millis(self.base_ms))),
            "exponential" => Ok(tollgate::Backoff::Exponential {
                base: Duration::from_millis(self.base_ms),
                max: Duration::from_millis(self.max_ms.unwrap_or(300_000)),
            }),
            other => Err(format!("backoff kind {other:?}: use fixed or exponential")),
        }
    }

    /// The request form of `backoff` (`max_ms` for exponential only).
    pub(crate) fn of(backoff: &tollgate::Backoff) -> serde_json::Value {
        match backoff {
            tollgate::Backoff::Fixed(d) => {
                serde_json::json!({"kind": "fixed", "base_ms": d.as_millis() as u64})
            }
            tollgate::Backoff::Exponential { base, max } => serde_json::json!({
                "kind": "exponential", "base_ms": base.as_millis() as u64, "max_ms": max.as_millis() as u64
            }),
        }
    }
}

/// `json` without the whitespace between its tokens: borrowed when it has
/// none.
pub(crate) fn compact(json: &str) -> Cow<'_, [u8]> {
    let bytes = json.as_bytes();
    let (mut in_string, mut escaped) = (false, false);
    let mut out: Option<Vec<u8>> = None;
    for (i, &b) in bytes.iter().enumerate() {
        let keep = if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            true
        } else {
            if b == b'"' {
                in_string = true;
            }
            !matches!(b, b' ' | b'\t' | b'\n' | b'\r')
        };
        match (&mut out, keep) {
            (Some(o), true) => o.push(b),
            (None, false) => {
                let mut o = Vec::with_capacity(bytes.len());
                o.extend_from_slice(&bytes[..i]);
                out = Some(o);
            }
            _ => {}
        }
    }
    out.map_or(Cow::Borrowed(bytes), Cow::Owned)
}

/// Set by a [`Deadlined`] body whose deadline passed before it was read.
#[derive(Debug, Clone, Default)]
pub(crate) struct TimedOut(Arc<AtomicBool>);

/// A request body that fails once its deadline passes, so a body that
/// trickles in cannot hold a request (and its connection) open for ever.
struct Deadlined {
    inner: Body,
    sleep: Pin<Box<tokio::time::Sleep>>,
    timed_out: TimedOut,
}

#[derive(Debug)]
struct BodyTimeout;

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not arrive in time")
    }
}

impl std::error::Error for BodyTimeout {}

impl hyper::body::Body for Deadlined {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.timed_out.0.store(true, Ordering::Release);
                Poll::Ready(Some(Err(BodyTimeout.into())))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Gives a request's body `timeout` (from the request's start) to arrive.
/// Pass the answer to [`or_timed_out`].
pub(crate) fn deadlined(req: Request, timeout: Duration) -> (Request, TimedOut) {
    let timed_out = TimedOut::default();
    let (parts, body) = req.into_parts();
    let body = Body::new(Deadlined {
        inner: body,
        sleep: Box::pin(tokio::time::sleep(timeout)),
        timed_out: timed_out.clone(),
    });
    (Request::from_parts(parts, body), timed_out)
}

/// The answer to a request given [`deadlined`]: a request whose body did
/// not arrive in time answers **408** `request_timeout`, and its connection
/// is closed.
pub(crate) fn or_timed_out(response: Response, timed_out: &TimedOut, timeout: Duration) -> Response {
    if !timed_out.0.load(Ordering::Acquire) {
        return response;
    }
    let mut response = ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        "request_timeout",
        format!(
            "the request body did not arrive within {} ms",
            timeout.as_millis()
        ),
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_str(v).expect("value"));
            says_json(&h)
        };
        assert_eq!(says_json(&HeaderMap::new()), None);
        assert_eq!(with("application/json"), Some(true));
        assert_eq!(with("Application/JSON; charset=utf-8"), Some(true));
        assert_eq!(with("application/cloudevents+json"), Some(true));
        assert_eq!(with("text/json"), Some(false));
        assert_eq!(with("text/plain"), Some(false));
    }

    #[test]
    fn compact_drops_whitespace_between_tokens_only() {
        let cases = [
            ("1", "1"),
            (r#"{"a":[1,2]}"#, r#"{"a":[1,2]}"#),
            ("{ \"a\" : [ 1 ,\n\t2 ] }", r#"{"a":[1,2]}"#),
            (
                r#"{"s": "x y \" z\\", "t" : "\\"}"#,
                r#"{"s":"x y \" z\\","t":"\\"}"#,
            ),
        ];
        for (json, want) in cases {
            assert_eq!(&*compact(json), want.as_bytes(), "{json}");
        }
        assert!(matches!(compact(r#"{"a":1}"#), std::borrow::Cow::Borrowed(_)));
    }
}
