//! [`FenceLayer`]: a tower layer that refuses a request carrying a stale
//! fencing token (`Tollgate-Fence`) with 409 before it reaches the
//! service, and holds the resource's turn while an admitted one runs;
//! [`FenceHeader`], the same header as an axum extractor.
//!
//! ```
//! use tollgate::{FenceGuard, FenceKey, FenceLayer};
//! let guard = FenceGuard::new();
//! // One resource per URL path; requests without the header get 428.
//! let layer = FenceLayer::new(guard.clone(), FenceKey::Path);
//! // axum: Router::new().route("/stock/{item}", put(write)).layer(layer)
//! # let _ = layer;
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use tower_layer::Layer;
use tower_service::Service;

use super::guard::{FenceGuard, StaleFence};
use crate::error::error_response;

/// The request header carrying the holder's fencing token.
pub const FENCE_HEADER: &str = "tollgate-fence";

/// On a 409, the highest fence seen for the resource.
pub const HIGHEST_HEADER: &str = "tollgate-fence-highest";

/// A function naming the resource a request writes to, from its URI and
/// headers.
pub type FenceKeyFn = Arc<dyn Fn(&Uri, &HeaderMap) -> Option<String> + Send + Sync>;

/// What resource a request writes to: the fence is compared per key.
#[derive(Clone)]
pub enum FenceKey {
    /// The request's path, as sent (not percent-decoded: `/a%62` and
    /// `/ab` are two keys; key by a decoded route parameter with
    /// [`FenceKey::Custom`] where clients may encode alike paths apart).
    Path,
    /// The value of a request header (a request without it is refused
    /// with 400 `fence_key_required`).
    Header(HeaderName),
    /// Any function of the request's URI and headers; `None` refuses it
    /// with 400 `fence_key_required`.
    Custom(FenceKeyFn),
}

impl fmt::Debug for FenceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FenceKey::Path => f.write_str("Path"),
            FenceKey::Header(h) => f.debug_tuple("Header").field(h).finish(),
            FenceKey::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

impl FenceKey {
    fn of(&self, uri: &Uri, headers: &HeaderMap) -> Option<String> {
        match self {
            FenceKey::Path => Some(uri.path().to_owned()),
            FenceKey::Header(name) => headers.get(name)?.to_str().ok().map(str::to_owned),
            FenceKey::Custom(f) => f(uri, headers),
        }
    }
}

/// The fence a request carries: `Ok(None)` without the header, `Err` with
/// the answer for a value that is not a whole number from 1 up.
fn fence_of(headers: &HeaderMap) -> Result<Option<u64>, (StatusCode, &'static str, String)> {
    let Some(value) = headers.get(FENCE_HEADER) else {
        return Ok(None);
    };
    match value.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok()) {
        Some(fence) if fence > 0 => Ok(Some(fence)),
        _ => Err((
            StatusCode::BAD_REQUEST,
            "bad_fence",
            format!("{FENCE_HEADER} must be a fencing token, a whole number from 1 up"),
        )),
    }
}

fn missing() -> (StatusCode, &'static str, String) {
    (
        StatusCode::PRECONDITION_REQUIRED,
        "fence_required",
        format!(
            "this resource takes writes only from a lock holder: send its fencing token in {FENCE_HEADER}"
        ),
    )
}

fn stale(s: StaleFence) -> (StatusCode, &'static str, String) {
    (StatusCode::CONFLICT, "stale_fence", s.to_string())
}

fn answer<B: From<String>>(
    (status, code, message): (StatusCode, &str, String),
    highest: Option<u64>,
) -> Response<B> {
    let mut response = error_response(status, code, &message);
    if let Some(h) = highest {
        response
            .headers_mut()
            .insert(HIGHEST_HEADER, HeaderValue::from(h));
    }
    response
}

/// Admits a request only if its `Tollgate-Fence` is at least the highest
/// fence seen for its resource key ([`FenceGuard`]), and runs it holding
/// the key's turn, so an older holder's request never runs beside or after
/// a newer one's in this process. Refusals, as JSON error bodies:
/// 409 `stale_fence` (with `Tollgate-Fence-Highest`), 428 `fence_required`
/// (no header, unless [`FenceLayer::optional`]), 400 `bad_fence` or
/// `fence_key_required`. Put it on the routes that write.
#[derive(Debug, Clone)]
pub struct FenceLayer {
    guard: FenceGuard,
    key: FenceKey,
    optional: bool,
}

impl FenceLayer {
    /// Fences requests per `key`, in `guard` (share one guard between the
    /// layers of routes that write to the same resources).
    pub fn new(guard: FenceGuard, key: FenceKey) -> FenceLayer {
        FenceLayer {
            guard,
            key,
            optional: false,
        }
    }

    /// Lets requests without `Tollgate-Fence` through unchecked (for a
    /// migration: clients that do not send it yet).
    pub fn optional(mut self) -> FenceLayer {
        self.optional = true;
        self
    }
}

impl<S> Layer<S> for FenceLayer {
    type Service = FenceService<S>;

    fn layer(&self, inner: S) -> FenceService<S> {
        FenceService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`FenceLayer`] wraps around another.
#[derive(Debug, Clone)]
pub struct FenceService<S> {
    inner: S,
    layer: FenceLayer,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for FenceService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: From<String> + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<ResBody>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // The clone that was polled ready serves this request.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let fence = fence_of(req.headers());
        let key = self.layer.key.of(req.uri(), req.headers());
        let (guard, optional) = (self.layer.guard.clone(), self.layer.optional);
        Box::pin(async move {
            let fence = match fence {
                Ok(Some(f)) => f,
                Ok(None) if optional => return inner.call(req).await,
                Ok(None) => return Ok(answer(missing(), None)),
                Err(bad) => return Ok(answer(bad, None)),
            };
            let Some(key) = key else {
                let why = "this request names no resource to fence".to_owned();
                return Ok(answer((StatusCode::BAD_REQUEST, "fence_key_required", why), None));
            };
            match guard.admit(&key, fence).await {
                Ok(turn) => {
                    let response = inner.call(req).await;
                    drop(turn);
                    response
                }
                Err(s) => Ok(answer(stale(s), Some(s.highest))),
            }
        })
    }
}

/// The `Tollgate-Fence` header as an axum extractor: a handler that takes
/// it gets the fence, and a request without a valid one is answered 428
/// `fence_required` or 400 `bad_fence`. Check it with
/// [`FenceGuard::admit`] on the resource the handler writes to, and turn a
/// [`StaleFence`] into 409 with `FenceRejection::from`.
#[cfg(feature = "axum")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FenceHeader(pub u64);

/// Why [`FenceHeader`] or the fence check refused a request; answers as
/// the layer does.
#[cfg(feature = "axum")]
#[derive(Debug)]
pub struct FenceRejection {
    status: StatusCode,
    code: &'static str,
    message: String,
    highest: Option<u64>,
}

#[cfg(feature = "axum")]
impl From<StaleFence> for FenceRejection {
    fn from(s: StaleFence) -> Self {
        let (status, code, message) = stale(s);
        FenceRejection {
            status,
            code,
            message,
            highest: Some(s.highest),
        }
    }
}

#[cfg(feature = "axum")]
impl axum::response::IntoResponse for FenceRejection {
    fn into_response(self) -> axum::response::Response {
        answer((self.status, self.code, self.message), self.highest)
    }
}

#[cfg(feature = "axum")]
impl<S: Send + Sync> axum::extract::FromRequestParts<S> for FenceHeader {
    type Rejection = FenceRejection;

    async fn from_request_parts(parts: &mut http::request::Parts, _: &S) -> Result<Self, Self::Rejection> {
        let refuse = |(status, code, message): (StatusCode, &'static str, String)| FenceRejection {
            status,
            code,
            message,
            highest: None,
        };
        match fence_of(&parts.headers) {
            Ok(Some(fence)) => Ok(FenceHeader(fence)),
            Ok(None) => Err(refuse(missing())),
            Err(bad) => Err(refuse(bad)),
        }
    }
}
