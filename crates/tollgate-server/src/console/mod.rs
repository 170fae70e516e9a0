//! The operator console (issue 18): a small page app served at `/ui` on
//! the API's listener (never on a room's), its files in the binary, and
//! the figures it charts, sampled here once a second (series.rs,
//! sample.rs). The pages are open (a browser cannot send a bearer token
//! with a page load); every figure and action they use is an API route
//! behind the same authentication as the rest (docs/CONSOLE.md).

pub(crate) mod sample;
pub(crate) mod series;

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::api::error::ApiError;

/// At most this many live streams at once, over all consoles.
pub(crate) const MAX_STREAMS: usize = 64;

/// One second's samples, as sent to the live streams.
pub(crate) type Tick = Arc<Vec<(series::Key, series::Sample)>>;

/// The console's state in a server: the series and the live streams.
#[derive(Debug)]
pub(crate) struct Console {
    board: Mutex<series::Board>,
    /// Each second's samples. A few seconds' worth is buffered per
    /// stream; a stream further behind is ended, never waited for.
    ticks: tokio::sync::broadcast::Sender<Tick>,
    /// Live streams open now.
    streams: AtomicUsize,
}

impl Default for Console {
    fn default() -> Self {
        Console {
            board: Mutex::default(),
            ticks: tokio::sync::broadcast::channel(8).0,
            streams: AtomicUsize::new(0),
        }
    }
}

impl Console {
    fn board(&self) -> MutexGuard<'_, series::Board> {
        self.board
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The console's files, embedded: one page, its modules and its style.
const FILES: &[(&str, &str, &str)] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("assets/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/app.js"),
    ),
    (
        "lib.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/lib.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("assets/style.css"),
    ),
];

/// Scripts and styles from this origin only (none inline), no framing,
/// no referrer: the console steers the server, so it must not be
/// embeddable or leak its URLs.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; \
                   frame-ancestors 'none'";

/// The console's pages, outside authentication (the data is not); also
/// served while the store is not open yet (the page then shows the
/// API's 503).
pub(crate) fn pages<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/ui", get(|h: HeaderMap| async move { file("index.html", &h) }))
        .route("/ui/", get(|h: HeaderMap| async move { file("index.html", &h) }))
        .route(
            "/ui/{file}",
            get(|Path(f): Path<String>, h: HeaderMap| async move { file(&f, &h) }),
        )
}

/// An embedded file, revalidated on every load (`no-cache` with an ETag
/// of its content): after an upgrade the page and its modules never mix
/// versions, and an unchanged file costs a 304.
fn file(name: &str, headers: &HeaderMap) -> Response {
    let Some((_, content_type, body)) = FILES.iter().find(|(n, _, _)| *n == name) else {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "no such console file; the console is at /ui",
        )
        .into_response();
    };
    let etag = etag(body);
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes());
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, *content_type)], *body).into_response()
    };
    let h = response.headers_mut();
    let set = |h: &mut HeaderMap, name, value: &'static str| {
        h.insert(name, HeaderValue::from_static(value));
    };
    set(h, header::CACHE_CONTROL, "no-cache");
    set(h, header::CONTENT_SECURITY_POLICY, CSP);
    set(h, header::X_FRAME_OPTIONS, "DENY");
    set(h, header::REFERRER_POLICY, "no-referrer");
    set(h, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    response
}

fn etag(body: &str) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(body.as_bytes());
    let hex: String = d[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}
