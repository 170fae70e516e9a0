//! Forwarding to the upstream: method, path, headers (with the usual
//! `X-Forwarded-*`) and body streamed both ways; WebSocket and other
//! upgrades spliced through; upstream failures turned into clear 502 / 504
//! pages.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::{Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};

use super::{RoomMetrics, TOKEN_HEADER};

/// Connection-level headers a proxy must not pass on (RFC 9110 7.6.1).
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

pub(crate) struct Upstream {
    /// `http://host:port`, without a trailing slash.
    base: String,
    client: Client<HttpConnector, Incoming>,
    timeout: Duration,
}

impl Upstream {
    pub(crate) fn new(url: &str, timeout: Duration) -> Result<Upstream, String> {
        let uri: Uri = url
            .parse()
            .map_err(|_| format!("upstream = {url:?} is not a URL"))?;
        if uri.scheme_str() != Some("http") || uri.authority().is_none() {
            return Err(format!(
                "upstream = {url:?}: give http://host:port (https upstreams are not supported yet)"
            ));
        }
        if uri.path() != "/" && !uri.path().is_empty() {
            return Err(format!("upstream = {url:?}: give no path; requests keep theirs"));
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        Ok(Upstream {
            base: format!(
                "http://{}",
                uri.authority().map(|a| a.as_str()).unwrap_or_default()
            ),
            client: Client::builder(TokioExecutor::new()).build(connector),
            timeout,
        })
    }

    /// Sends `req` upstream and returns its answer, or an error page.
    pub(crate) async fn forward(
        &self,
        mut req: Request<Incoming>,
        client: IpAddr,
        cookie_name: &str,
        metrics: &RoomMetrics,
    ) -> Response<Body> {
        let upgrade = wants_upgrade(req.headers());
        let client_side = upgrade.then(|| hyper::upgrade::on(&mut req));
        let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
        let Ok(uri) = format!("{}{path}", self.base).parse::<Uri>() else {
            return error_page(
                StatusCode::BAD_REQUEST,
                "Bad request",
                "The address could not be understood.",
            );
        };
        let (mut parts, body) = req.into_parts();
        parts.uri = uri;
        let original_host = parts.headers.get(header::HOST).cloned();
        prepare_request(&mut parts.headers, upgrade, client, original_host, cookie_name);
        let started = Instant::now();
        let answer = tokio::time::timeout(
            self.timeout,
            self.client.request(Request::from_parts(parts, body)),
        )
        .await;
        metrics.upstream_seconds.record(started.elapsed().as_secs_f64());
        let mut response = match answer {
            Err(_) => {
                tracing::warn!(room = %metrics.room, "upstream timed out");
                error_page(
                    StatusCode::GATEWAY_TIMEOUT,
                    "The site is taking too long",
                    "It did not answer in time. Please try again.",
                )
            }
            Ok(Err(e)) => {
                tracing::warn!(room = %metrics.room, error = %e, "upstream unreachable");
                error_page(
                    StatusCode::BAD_GATEWAY,
                    "The site cannot be reached",
                    "Please try again in a moment.",
                )
            }
            Ok(Ok(mut response)) => {
                if response.status() == StatusCode::SWITCHING_PROTOCOLS
                    && let Some(client_side) = client_side
                {
                    let upstream_side = hyper::upgrade::on(&mut response);
                    tokio::spawn(async move {
                        if let (Ok(c), Ok(u)) = (client_side.await, upstream_side.await) {
                            let _ = tokio::io::copy_bidirectional(&mut TokioIo::new(c), &mut TokioIo::new(u))
                                .await;
                        }
                    });
                    return response.map(|_| Body::empty());
                }
                strip_hop_by_hop(response.headers_mut());
                response.map(Body::new)
            }
        };
        metrics.proxied(response.status()).increment(1);
        response.headers_mut().remove(TOKEN_HEADER);
        response
    }
}

fn wants_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("upgrade")))
}

/// Removes the hop-by-hop headers, and those named in `Connection`.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::try_from(t.trim()).ok())
        .collect();
    for h in named {
        headers.remove(h);
    }
    for h in HOP_BY_HOP {
        headers.remove(h);
    }
}

fn prepare_request(
    headers: &mut HeaderMap,
    upgrade: bool,
    client: IpAddr,
    original_host: Option<HeaderValue>,
    cookie_name: &str,
) {
    let upgrade_to = headers.get(header::UPGRADE).cloned();
    strip_hop_by_hop(headers);
    if upgrade && let Some(u) = upgrade_to {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, u);
    }
    // The visitor's token is the waiting room's business, not the site's.
    headers.remove(TOKEN_HEADER);
    let cookies: Vec<String> = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|pair| !pair.is_empty() && pair.split_once('=').is_none_or(|(k, _)| k != cookie_name))
        .map(str::to_owned)
        .collect();
    headers.remove(header::COOKIE);
    if !cookies.is_empty()
        && let Ok(v) = HeaderValue::try_from(cookies.join("; "))
    {
        headers.insert(header::COOKIE, v);
    }
    let forwarded = match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        Some(prior) => format!("{prior}, {client}"),
        None => client.to_string(),
    };
    if let Ok(v) = HeaderValue::try_from(forwarded) {
        headers.insert("x-forwarded-for", v);
    }
    if !headers.contains_key("x-forwarded-proto") {
        headers.insert("x-forwarded-proto", HeaderValue::from_static("http"));
    }
    if let Some(host) = original_host
        && !headers.contains_key("x-forwarded-host")
    {
        headers.insert("x-forwarded-host", host);
    }
}

/// A short HTML page for proxy errors.
pub(crate) fn error_page(status: StatusCode, title: &str, text: &str) -> Response<Body> {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title></head>\
         <body><h1>{title}</h1><p>{text}</p></body></html>\n"
    );
    let mut r = Response::new(Body::from(html));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    if status == StatusCode::GATEWAY_TIMEOUT || status == StatusCode::BAD_GATEWAY {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    }
    r
}
