//! A tower [`Layer`] that rate-limits requests with a [`RateLimiter`]:
//! usable in any axum or hyper application.
//!
//! ```
//! # fn demo() -> tollgate::Result<()> {
//! use tollgate::{KeyBy, Limit, Rate, RateLimitLayer, RateLimiter, Store};
//! let limiter = RateLimiter::new(&Store::memory(), "web", Limit::gcra(Rate::per_second(20)?, 40)?)?;
//! let trusted = vec!["10.0.0.0/8".parse().expect("network")];
//! let layer = RateLimitLayer::new(limiter, KeyBy::ClientIp { trusted_proxies: trusted });
//! // axum: Router::new().route(..).layer(layer)
//! # let _ = layer; Ok(()) }
//! ```

use std::fmt;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use http::{Method, Request, Response, StatusCode, Uri};
use ipnet::IpNet;
use tower_layer::Layer;
use tower_service::Service;

use crate::error::{ErrorKind, error_response};
use crate::limit::{Decision, RateLimiter};

/// The client's address as the connection saw it. Insert it into each
/// request's extensions when serving with plain hyper; with axum, enable
/// this crate's `axum` feature and serve with `into_make_service_with_connect_info`
/// (`ConnectInfo<SocketAddr>` is read too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// A function picking a request's key.
pub type KeyFn = Arc<dyn Fn(&RequestInfo<'_>) -> Option<String> + Send + Sync>;

/// What a request is limited by.
#[derive(Clone)]
pub enum KeyBy {
    /// The client's IP address (IPv6 by its /64). `X-Forwarded-For` is read
    /// only when the connection comes from one of `trusted_proxies`: then
    /// the client is the right-most address in it that is not itself a
    /// trusted proxy.
    ClientIp {
        /// Proxies (addresses or networks) whose `X-Forwarded-For` is
        /// believed.
        trusted_proxies: Vec<IpNet>,
    },
    /// The value of a request header (an API key, a user id), stored
    /// hashed. Requests without it are not limited.
    Header(HeaderName),
    /// The request path (stored hashed): one budget per URL path.
    Path,
    /// Any function of the request (its result is stored hashed); `None`
    /// lets the request through unlimited.
    Custom(KeyFn),
}

impl fmt::Debug for KeyBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyBy::ClientIp { trusted_proxies } => f
                .debug_struct("ClientIp")
                .field("trusted_proxies", trusted_proxies)
                .finish(),
            KeyBy::Header(h) => f.debug_tuple("Header").field(h).finish(),
            KeyBy::Path => f.write_str("Path"),
            KeyBy::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

/// What a [`KeyBy::Custom`] function sees of a request.
#[derive(Debug)]
pub struct RequestInfo<'a> {
    /// The method.
    pub method: &'a Method,
    /// The URI.
    pub uri: &'a Uri,
    /// The headers.
    pub headers: &'a HeaderMap,
    /// The connection's peer, when known.
    pub peer: Option<SocketAddr>,
}

impl KeyBy {
    fn key<B>(&self, req: &Request<B>) -> Option<String> {
        let peer = peer(req);
        match self {
            KeyBy::ClientIp { trusted_proxies } => match peer {
                Some(p) => Some(ip_key(client_ip(p.ip(), req.headers(), trusted_proxies))),
                None => {
                    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
                    if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                        tracing::warn!(
                            "rate limit by client IP, but requests carry no PeerAddr or ConnectInfo: \
                             they pass unlimited (serve with connect info)"
                        );
                    }
                    None
                }
            },
            KeyBy::Header(name) => req
                .headers()
                .get(name)
                .map(|v| hashed(&String::from_utf8_lossy(v.as_bytes()))),
            KeyBy::Path => Some(hashed(req.uri().path())),
            KeyBy::Custom(f) => f(&RequestInfo {
                method: req.method(),
                uri: req.uri(),
                headers: req.headers(),
                peer,
            })
            .map(|k| hashed(&k)),
        }
    }
}

fn peer<B>(req: &Request<B>) -> Option<SocketAddr> {
    if let Some(PeerAddr(addr)) = req.extensions().get::<PeerAddr>() {
        return Some(*addr);
    }
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(addr)) =
        req.extensions().get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(*addr);
    }
    None
}

/// The client's address: `peer` itself unless `peer` is a trusted proxy;
/// then the right-most `X-Forwarded-For` entry that is not a trusted proxy
/// (or the left-most entry when all are). An entry that does not parse
/// stops the walk at the last trusted hop.
pub fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    let mut client = canonical(peer);
    if !is_trusted(&client) {
        return client;
    }
    // Several X-Forwarded-For headers are one list, in order. Entries are
    // split on the raw bytes, so one undecodable entry (a client can send
    // any bytes) does not hide the entries a proxy appended after it.
    let hops: Vec<&[u8]> = headers
        .get_all("x-forwarded-for")
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .collect();
    for hop in hops.iter().rev() {
        let Some(ip) = parse_hop(hop) else {
            return client;
        };
        client = canonical(ip);
        if !is_trusted(&client) {
            return client;
        }
    }
    client
}

/// One `X-Forwarded-For` entry: an address, or an address with a port
/// (`1.2.3.4:5678`, `[2001:db8::1]:443`) as some load balancers write them.
fn parse_hop(hop: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(hop).ok()?.trim();
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|s| s.ip()))
}

/// The key for a client address: IPv4 as is, IPv6 by its /64 (one
/// subscriber's usual allocation, so rotating addresses within it does
/// not buy a fresh budget). Use it for any per-address cap.
pub fn ip_key(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
    }
}

/// Keys that may hold secrets (API keys, tokens) or arbitrary text are
/// stored hashed: SHA-256, hex.
fn hashed(text: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(text.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) as plain IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Sets the `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`
/// headers (and `Retry-After` on refusal), in whole seconds rounded up.
pub fn set_rate_limit_headers(headers: &mut HeaderMap, d: &Decision) {
    let secs = |ms: u128| ms.div_ceil(1000) as u64;
    headers.insert("ratelimit-limit", HeaderValue::from(d.limit));
    headers.insert("ratelimit-remaining", HeaderValue::from(d.remaining));
    headers.insert(
        "ratelimit-reset",
        HeaderValue::from(secs(d.reset_after.as_millis())),
    );
    if !d.allowed {
        headers.insert(
            RETRY_AFTER,
            HeaderValue::from(secs(d.retry_after.as_millis()).max(1)),
        );
    }
}

/// Rate-limits every request of the wrapped service; refused requests get
/// 429 with the rate-limit headers and a JSON error, allowed ones carry the
/// headers too. When the store cannot be asked, the limiter's
/// [`OnStoreError`](crate::OnStoreError) decides; with `Error` the answer
/// is 503.
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    limiter: RateLimiter,
    key_by: KeyBy,
    cost: u64,
}

impl RateLimitLayer {
    /// Limits requests by `key_by`, each costing 1.
    pub fn new(limiter: RateLimiter, key_by: KeyBy) -> Self {
        RateLimitLayer {
            limiter,
            key_by,
            cost: 1,
        }
    }

    /// What each request costs (default 1): at least 1, at most what the
    /// limiter's limit allows at once.
    pub fn cost(mut self, cost: u64) -> crate::Result<Self> {
        let most = self.limiter.limit().burst();
        if cost == 0 || cost > most {
            return Err(crate::Error::invalid(format!(
                "a request's cost must be 1 to {most} under this limit, got {cost}"
            )));
        }
        self.cost = cost;
        Ok(self)
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`RateLimitLayer`] wraps around another.
#[derive(Debug, Clone)]
pub struct RateLimit<S> {
    inner: S,
    layer: RateLimitLayer,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S>
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
        let key = self.layer.key_by.key(&req);
        let (limiter, cost) = (self.layer.limiter.clone(), self.layer.cost);
        Box::pin(async move {
            let Some(key) = key else {
                return inner.call(req).await;
            };
            match limiter.check(&key, cost).await {
                Ok(d) if d.allowed => {
                    let mut response = inner.call(req).await?;
                    // A limit applied further in (a check endpoint, a
                    // nested layer) speaks for itself.
                    if !response.headers().contains_key("ratelimit-limit") {
                        set_rate_limit_headers(response.headers_mut(), &d);
                    }
                    Ok(response)
                }
                Ok(d) => {
                    let message = format!("rate limit exceeded; retry in {} ms", d.retry_after.as_millis());
                    let mut response =
                        error_response(StatusCode::TOO_MANY_REQUESTS, "rate_limited", &message);
                    set_rate_limit_headers(response.headers_mut(), &d);
                    Ok(response)
                }
                Err(e) if e.kind() == ErrorKind::InvalidInput => Ok(error_response(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    &format!("cannot rate-limit this request: {e}"),
                )),
                Err(e) if e.kind() == ErrorKind::Misconfigured => Ok(error_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "store_misconfigured",
                    &e.to_string(),
                )),
                Err(e) => {
                    let mut response = error_response(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "store_unavailable",
                        &e.to_string(),
                    );
                    response
                        .headers_mut()
                        .insert(RETRY_AFTER, HeaderValue::from_static("1"));
                    Ok(response)
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(xff: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in xff {
            h.append("x-forwarded-for", HeaderValue::from_str(v).expect("header"));
        }
        h
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let trusted: Vec<IpNet> = vec![
            "10.0.0.0/8".parse().expect("net"),
            "::1/128".parse().expect("net"),
        ];
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        // Untrusted peer: its own address, whatever it claims.
        assert_eq!(
            client_ip(ip("203.0.113.9"), &headers(&["1.2.3.4"]), &trusted),
            ip("203.0.113.9")
        );
        // Trusted peer: the right-most untrusted hop.
        assert_eq!(
            client_ip(
                ip("10.0.0.2"),
                &headers(&["6.6.6.6, 198.51.100.7, 10.0.0.5"]),
                &trusted
            ),
            ip("198.51.100.7")
        );
        // Several headers form one list.
        assert_eq!(
            client_ip(ip("10.0.0.2"), &headers(&["6.6.6.6", "198.51.100.7"]), &trusted),
            ip("198.51.100.7")
        );
        // No header: the proxy itself.
        assert_eq!(
            client_ip(ip("10.0.0.2"), &HeaderMap::new(), &trusted),
            ip("10.0.0.2")
        );
        // Garbage stops the walk at the last trusted hop.
        assert_eq!(
            client_ip(
                ip("10.0.0.2"),
                &headers(&["1.1.1.1, nonsense, 10.0.0.7"]),
                &trusted
            ),
            ip("10.0.0.7")
        );
        // Undecodable bytes in one entry do not hide the proxy's own entry.
        let mut raw = HeaderMap::new();
        raw.append(
            "x-forwarded-for",
            HeaderValue::from_bytes(b"\xff\xfe, 198.51.100.9").expect("header"),
        );
        assert_eq!(client_ip(ip("10.0.0.2"), &raw, &trusted), ip("198.51.100.9"));
        // Entries with ports, as some load balancers write them.
        assert_eq!(
            client_ip(ip("10.0.0.2"), &headers(&["198.51.100.8:5678"]), &trusted),
            ip("198.51.100.8")
        );
        assert_eq!(
            client_ip(ip("10.0.0.2"), &headers(&["[2001:db8::9]:443"]), &trusted),
            ip("2001:db8::9")
        );
        // IPv4-mapped IPv6 peers count as IPv4.
        assert_eq!(
            client_ip(ip("::ffff:10.1.2.3"), &headers(&["192.0.2.1"]), &trusted),
            ip("192.0.2.1")
        );
        assert_eq!(
            client_ip(ip("::1"), &headers(&["2001:db8::7"]), &trusted),
            ip("2001:db8::7")
        );
    }

    #[test]
    fn ipv6_clients_share_their_64() {
        let a = ip_key("2001:db8:1:2:aaaa::1".parse().expect("ip"));
        let b = ip_key("2001:db8:1:2:bbbb::7".parse().expect("ip"));
        assert_eq!(a, b);
        assert_eq!(a, "2001:db8:1:2::/64");
        assert_ne!(a, ip_key("2001:db8:1:3::1".parse().expect("ip")));
        assert_eq!(ip_key("192.0.2.1".parse().expect("ip")), "192.0.2.1");
    }

    #[test]
    fn error_bodies_escape_their_message() {
        let response: Response<String> =
            error_response(StatusCode::TOO_MANY_REQUESTS, "rate_limited", "a\"b\\c\n");
        assert_eq!(
            response.body(),
            r#"{"error":{"code":"rate_limited","message":"a\"b\\c\n"}}"#
        );
    }
}
