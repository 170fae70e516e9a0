//! Forwarding to the upstream: method, path, headers (with the usual
//! `X-Forwarded-*`) and body streamed both ways; WebSocket and other
//! upgrades spliced through; upstream failures turned into clear 502 / 504
//! pages.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::{Request, Response, StatusCode, Uri};
use bytes::Bytes;
use futures_util::future::BoxFuture;
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};

use super::challenge::CHALLENGE_HEADER;
use super::counters::RoomMetrics;
use super::page::Pages;
use super::token::TOKEN_HEADER;

/// Response header an upstream sets to end the visitor's session at once.
pub(crate) const SESSION_HEADER: HeaderName = HeaderName::from_static("tollgate-session");
/// Request header the upstream gets: the admitted visitor's session id, to
/// end it through the admin API.
pub(crate) const VISITOR_HEADER: HeaderName = HeaderName::from_static("tollgate-visitor");

// The forwarding headers the proxy sets, as names made once (a name given
// as text is parsed on every use).
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

/// Connection-level headers a proxy must not pass on (RFC 9110 7.6.1).
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// What an https:// upstream is trusted by and shown (the room's
/// `upstream_ca`, `upstream_client_cert`, `upstream_client_key`).
#[derive(Debug, Default, Clone)]
pub(crate) struct UpstreamTls {
    pub(crate) ca: Option<std::path::PathBuf>,
    pub(crate) client_cert: Option<std::path::PathBuf>,
    pub(crate) client_key: Option<std::path::PathBuf>,
}

impl UpstreamTls {
    /// The rustls set-up for an https:// upstream: the system's roots and
    /// `ca`'s certificates, the client certificate if given (both files or
    /// neither).
    fn client_config(&self) -> Result<rustls::ClientConfig, UpstreamError> {
        let client = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => Some((
                ("upstream_client_cert", cert.as_path()),
                ("upstream_client_key", key.as_path()),
            )),
            (None, None) => None,
            _ => {
                return Err(UpstreamError::Setting(
                    "give upstream_client_cert and upstream_client_key together".to_owned(),
                ));
            }
        };
        let ca = self.ca.as_deref().map(|p| ("upstream_ca", p));
        crate::tls_client::client_config(ca, client).map_err(UpstreamError::File)
    }

    fn is_set(&self) -> bool {
        self.ca.is_some() || self.client_cert.is_some() || self.client_key.is_some()
    }
}

/// Why an upstream could not be set up: a bad setting, or a file (CA,
/// client certificate, key) that cannot be used.
#[derive(Debug)]
pub(crate) enum UpstreamError {
    Setting(String),
    File(String),
}

pub(crate) struct Upstream {
    /// The upstream's scheme and `host:port`: a request's path and query
    /// go on them as they came (parsed once, here, not per request).
    scheme: hyper::http::uri::Scheme,
    authority: hyper::http::uri::Authority,
    /// A client (and so a pool of upstream connections) per proxy thread,
    /// and one more for anywhere else (`proxy_workers::index`): a request
    /// and the upstream connection it uses stay on one thread.
    clients: Vec<Client<HttpsConnector<HttpConnector>, UnsyncBoxBody<Bytes, hyper::Error>>>,
    timeout: Duration,
    /// The room's pages, for the 502 and 504.
    pages: Arc<Pages>,
}

/// Marks a request that reached the waiting rooms' listener over its own
/// TLS (`tls_cert`): a request extension, which no client can set.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ViaTls;

/// Where a request came from, and what it may do on the way through.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hop {
    /// The visitor, as the trusted-proxy rules make it out.
    pub(crate) client: IpAddr,
    /// The address that connected to tollgate.
    pub(crate) peer: IpAddr,
    /// Whether `peer` is a trusted proxy, whose `X-Forwarded-*` are kept.
    pub(crate) trusted_peer: bool,
    /// Whether the request's `Upgrade` may be passed on (checked against
    /// the room's list by the caller); if not, it is stripped.
    pub(crate) may_upgrade: bool,
    /// It came over this server's TLS: the upstream hears `https`.
    pub(crate) tls: bool,
}

impl Upstream {
    pub(crate) fn new(
        url: &str,
        tls: &UpstreamTls,
        timeout: Duration,
        pages: Arc<Pages>,
    ) -> Result<Upstream, UpstreamError> {
        let bad = |m: String| UpstreamError::Setting(m);
        let uri: Uri = url
            .parse()
            .map_err(|_| bad(format!("upstream = {url:?} is not a URL")))?;
        let scheme = match uri.scheme_str() {
            Some(s @ ("http" | "https")) if uri.authority().is_some() => s,
            _ => {
                return Err(bad(format!(
                    "upstream = {url:?}: give http://host:port or https://host:port"
                )));
            }
        };
        if uri.path() != "/" && !uri.path().is_empty() {
            return Err(bad(format!(
                "upstream = {url:?}: give no path; requests keep theirs"
            )));
        }
        if scheme == "http" && tls.is_set() {
            return Err(bad(format!(
                "upstream = {url:?}: upstream_ca and a client certificate apply to an https:// upstream"
            )));
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        // (The TLS connector hands http:// to the plain one: https only
        // for an https:// upstream, which gets its name from the URL's
        // host for SNI and the certificate check.)
        connector.enforce_http(false);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls.client_config()?)
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        Ok(Upstream {
            scheme: uri.scheme().cloned().unwrap_or(hyper::http::uri::Scheme::HTTP),
            authority: uri
                .authority()
                .cloned()
                .ok_or_else(|| bad(format!("upstream = {url:?}: no host")))?,
            clients: (0..=crate::proxy_workers::count())
                .map(|_| Client::builder(TokioExecutor::new()).build(connector.clone()))
                .collect(),
            timeout,
            pages,
        })
    }

    /// This thread's client.
    fn client(&self) -> &Client<HttpsConnector<HttpConnector>, UnsyncBoxBody<Bytes, hyper::Error>> {
        let i = crate::proxy_workers::index();
        self.clients.get(i).unwrap_or(&self.clients[0])
    }

    /// Sends `req` upstream and returns its answer, or an error page. An
    /// upgraded connection is spliced through until either side closes or
    /// `close` (if given) resolves.
    pub(crate) async fn forward(
        &self,
        mut req: Request<Incoming>,
        hop: Hop,
        cookie_name: &str,
        metrics: &RoomMetrics,
        close: Option<BoxFuture<'static, ()>>,
    ) -> Response<Body> {
        let upgrade = hop.may_upgrade && wants_upgrade(req.headers());
        let client_side = upgrade.then(|| hyper::upgrade::on(&mut req));
        let lang = self.pages.lang(req.headers());
        let (mut parts, body) = req.into_parts();
        // The request's own path and query (absolute or origin form), on
        // the upstream's scheme and authority.
        let mut uri = std::mem::take(&mut parts.uri).into_parts();
        uri.scheme = Some(self.scheme.clone());
        uri.authority = Some(self.authority.clone());
        if uri.path_and_query.is_none() {
            uri.path_and_query = Some(hyper::http::uri::PathAndQuery::from_static("/"));
        }
        let Ok(uri) = Uri::from_parts(uri) else {
            return error_page(
                StatusCode::BAD_REQUEST,
                "Bad request",
                "The address could not be understood.",
            );
        };
        parts.uri = uri;
        let original_host = parts.headers.get(header::HOST).cloned();
        prepare_request(&mut parts.headers, upgrade, hop, original_host, cookie_name);
        // A body the visitor breaks (a malformed chunk, a short body) fails
        // the upstream call too: that is the visitor's fault, not the site's.
        let body_failed = Arc::new(AtomicBool::new(false));
        let flag = body_failed.clone();
        let body = body
            .map_err(move |e| {
                flag.store(true, Ordering::Relaxed);
                e
            })
            .boxed_unsync();
        let started = Instant::now();
        let answer = tokio::time::timeout(
            self.timeout,
            self.client().request(Request::from_parts(parts, body)),
        )
        .await;
        metrics.upstream_seconds.record(started.elapsed().as_secs_f64());
        let mut response = match answer {
            Err(_) => {
                tracing::warn!(room = %metrics.room, "upstream timed out");
                let html = self
                    .pages
                    .upstream_error(&metrics.room, lang, true, RETRY_SECONDS);
                page_response(StatusCode::GATEWAY_TIMEOUT, html, self.pages.varies())
            }
            Ok(Err(_)) if body_failed.load(Ordering::Relaxed) => error_page(
                StatusCode::BAD_REQUEST,
                "Bad request",
                "The request's body could not be read.",
            ),
            Ok(Err(e)) => {
                if crate::tls_client::untrusted(&e) {
                    tracing::warn!(
                        room = %metrics.room, error = %crate::client::with_causes(&e),
                        "upstream certificate refused (upstream_ca names what to trust)"
                    );
                } else {
                    tracing::warn!(room = %metrics.room, error = %e, "upstream unreachable");
                }
                let html = self
                    .pages
                    .upstream_error(&metrics.room, lang, false, RETRY_SECONDS);
                page_response(StatusCode::BAD_GATEWAY, html, self.pages.varies())
            }
            Ok(Ok(mut response)) => {
                let upstream = UpstreamStatus(response.status().as_u16());
                response.extensions_mut().insert(upstream);
                if response.status() == StatusCode::SWITCHING_PROTOCOLS {
                    let Some(client_side) = client_side else {
                        // Switching protocols unasked would leave a
                        // connection nobody checks: refuse it.
                        tracing::warn!(room = %metrics.room, "upstream switched protocols unasked");
                        return error_page(
                            StatusCode::BAD_GATEWAY,
                            "The site cannot be reached",
                            "It answered in a way the waiting room does not pass on.",
                        );
                    };
                    let upstream_side = hyper::upgrade::on(&mut response);
                    let close = close.unwrap_or_else(|| Box::pin(std::future::pending()));
                    tokio::spawn(async move {
                        if let (Ok(c), Ok(u)) = (client_side.await, upstream_side.await) {
                            let (mut c, mut u) = (TokioIo::new(c), TokioIo::new(u));
                            // Dropping both ends closes the tunnel.
                            tokio::select! {
                                _ = tokio::io::copy_bidirectional(&mut c, &mut u) => {}
                                () = close => {}
                            }
                        }
                    });
                    metrics.proxied(response.status()).increment(1);
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

/// The status the upstream answered with, kept on the response for the
/// access log (absent when tollgate answered itself: timeout, unreachable).
#[derive(Debug, Clone, Copy)]
pub(super) struct UpstreamStatus(pub(super) u16);

/// The protocols a request asks to upgrade to (lower case, without
/// versions), if it asks at all.
pub(crate) fn upgrade_protocols(headers: &HeaderMap) -> Option<Vec<String>> {
    if !wants_upgrade(headers) {
        return None;
    }
    Some(
        headers
            .get_all(header::UPGRADE)
            .iter()
            .map(|v| v.to_str().unwrap_or("\u{fffd}"))
            .flat_map(|v| v.split(','))
            .map(|p| {
                let p = p.trim();
                p.split_once('/').map_or(p, |(name, _)| name).to_ascii_lowercase()
            })
            .collect(),
    )
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
    for h in &HOP_BY_HOP {
        headers.remove(h);
    }
}

/// Headers about the way here that only tollgate or a trusted proxy may
/// set: from anyone else they are dropped (and the usual ones set afresh),
/// with every other `X-Forwarded-*` (`-Ssl`, `-Scheme`, `-Prefix`, ... that
/// frameworks read).
const FORWARDING: [&str; 2] = ["x-real-ip", "forwarded"];

/// Whether the proxy owns header `name` (lower case): it sets, replaces
/// or removes it on the way to the upstream.
fn proxy_owned(name: &str) -> bool {
    name.starts_with("x-forwarded-") || name.starts_with("tollgate-") || FORWARDING.contains(&name)
}

/// Drops the headers that spell one the proxy owns with `_` for `-`
/// (`Tollgate_Visitor`, `X_Forwarded_For`): CGI and WSGI read both
/// spellings as the same `HTTP_X_FORWARDED_FOR`, so they would pass a
/// client's own value off as the proxy's (nginx drops every such header
/// by default, `underscores_in_headers off`). From anyone, trusted
/// proxies included: the proxy's own headers are never spelt so.
fn drop_underscored(headers: &mut HeaderMap) {
    let spoofs: Vec<HeaderName> = headers
        .keys()
        .filter(|k| k.as_str().contains('_') && proxy_owned(&k.as_str().replace('_', "-")))
        .cloned()
        .collect();
    for h in spoofs {
        headers.remove(h);
    }
}

fn prepare_request(
    headers: &mut HeaderMap,
    upgrade: bool,
    hop: Hop,
    original_host: Option<HeaderValue>,
    cookie_name: &str,
) {
    drop_underscored(headers);
    let upgrade_to = headers.get(header::UPGRADE).cloned();
    // The room's own header survives a client naming it in `Connection`.
    let visitor = headers.remove(VISITOR_HEADER);
    strip_hop_by_hop(headers);
    if let Some(v) = visitor {
        headers.insert(VISITOR_HEADER, v);
    }
    if upgrade && let Some(u) = upgrade_to {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, u);
    }
    // The visitor's token and its arrival challenge's solution (header
    // or `<cookie>_pass`) are the waiting room's business, not the site's.
    headers.remove(TOKEN_HEADER);
    headers.remove(CHALLENGE_HEADER);
    let is_room_cookie = |k: &str| {
        k.strip_prefix(cookie_name)
            .is_some_and(|rest| rest.is_empty() || rest == "_pass")
    };
    let cookies: Vec<String> = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|pair| !pair.is_empty() && pair.split_once('=').is_none_or(|(k, _)| !is_room_cookie(k)))
        .map(str::to_owned)
        .collect();
    headers.remove(header::COOKIE);
    if !cookies.is_empty()
        && let Ok(v) = HeaderValue::try_from(cookies.join("; "))
    {
        headers.insert(header::COOKIE, v);
    }
    // A client's own X-Forwarded-* would let it tell the site any address,
    // host or scheme: only a trusted proxy's are kept (and extended).
    let prior = if hop.trusted_peer {
        let joined: Vec<&str> = headers
            .get_all(&X_FORWARDED_FOR)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        (!joined.is_empty()).then(|| joined.join(", "))
    } else {
        for h in FORWARDING {
            headers.remove(h);
        }
        let spoofable: Vec<HeaderName> = headers
            .keys()
            .filter(|k| k.as_str().starts_with("x-forwarded-"))
            .cloned()
            .collect();
        for h in spoofable {
            headers.remove(h);
        }
        None
    };
    let peer = HeaderValue::try_from(hop.peer.to_string()).ok();
    let forwarded = match prior {
        Some(prior) => HeaderValue::try_from(format!("{prior}, {}", hop.peer)).ok(),
        None => peer.clone(),
    };
    if let Some(v) = forwarded {
        headers.insert(X_FORWARDED_FOR, v);
    }
    // (The client is the peer unless a trusted proxy said otherwise.)
    let real = match peer {
        Some(v) if hop.client == hop.peer => Some(v),
        _ => HeaderValue::try_from(hop.client.to_string()).ok(),
    };
    if let Some(v) = real {
        headers.insert(X_REAL_IP, v);
    }
    if !headers.contains_key(&X_FORWARDED_PROTO) {
        let proto = if hop.tls { "https" } else { "http" };
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(proto));
    }
    if let Some(host) = original_host
        && !headers.contains_key(&X_FORWARDED_HOST)
    {
        headers.insert(X_FORWARDED_HOST, host);
    }
}

/// How long a visitor shown a 502 or 504 is asked to wait (`Retry-After`).
const RETRY_SECONDS: u64 = 5;

/// A short HTML page for the visitor's own errors (and an upstream that
/// answers what is not passed on), in English.
pub(crate) fn error_page(status: StatusCode, title: &str, text: &str) -> Response<Body> {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title></head>\
         <body><h1>{title}</h1><p>{text}</p></body></html>\n"
    );
    page_response(status, html, false)
}

/// An HTML page with `status`; a 502 or 504 asks to retry in
/// [`RETRY_SECONDS`]. `varies`: its language followed `Accept-Language`.
fn page_response(status: StatusCode, html: String, varies: bool) -> Response<Body> {
    let mut r = Response::new(Body::from(html));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    if status == StatusCode::GATEWAY_TIMEOUT || status == StatusCode::BAD_GATEWAY {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_SECONDS));
    }
    if varies {
        r.headers_mut()
            .insert(header::VARY, HeaderValue::from_static("accept-language"));
    }
    r
}
