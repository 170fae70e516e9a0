//! Cross-site changes are refused, with or without tokens: a page on
//! another site must not make a visitor's browser pause a room on a
//! server at localhost (a form POST needs no body and no token when none
//! are configured), nor ride a console session cookie.
//!
//! A change (any method but GET, HEAD and OPTIONS) is refused with 403
//! `cross_origin` when its `Sec-Fetch-Site` is `cross-site` or
//! `same-site`, or its `Origin` is not the request's own (scheme, host and
//! port; the scheme is `X-Forwarded-Proto`'s when a proxy sets it, else
//! `http`). Browsers send one or both on such requests; curl, the CLI and
//! the clients send neither and are not affected.

use axum::extract::Request;
use axum::http::{HeaderMap, Method, StatusCode, header};

use super::error::ApiError;

/// The refusal for a cross-site change, if `req` is one. `listed`: its
/// `Origin` is in `cors_origins` (see [`super::cors`]), which may.
pub(crate) fn refused(req: &Request, listed: bool) -> Option<ApiError> {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return None;
    }
    let headers = req.headers();
    let origin = headers.get(header::ORIGIN).map(|v| v.to_str().unwrap_or(""));
    let fetch_site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let cross = fetch_site.eq_ignore_ascii_case("cross-site") || fetch_site.eq_ignore_ascii_case("same-site");
    let foreign = origin.is_some_and(|o| !same_origin(o, req));
    if (cross || foreign) && !listed {
        return Some(ApiError::new(
            StatusCode::FORBIDDEN,
            "cross_origin",
            "a change sent by a page of another origin is refused (Origin or Sec-Fetch-Site say so); send it from the server's own origin, or without a browser",
        ));
    }
    None
}

/// The scheme a proxy in front says the client used
/// (`X-Forwarded-Proto`, first value).
pub(crate) fn forwarded_proto(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get("x-forwarded-proto")?.to_str().ok()?;
    Some(value.split(',').next().unwrap_or("").trim())
}

/// Whether `origin` (`scheme://host[:port]`) is the request's own.
fn same_origin(origin: &str, req: &Request) -> bool {
    let scheme = forwarded_proto(req.headers())
        .unwrap_or("http")
        .to_ascii_lowercase();
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()));
    let (Some(own), Some(theirs)) = (
        host.and_then(|h| endpoint(&scheme, h)),
        origin
            .split_once("://")
            .and_then(|(s, h)| endpoint(&s.to_ascii_lowercase(), h)),
    ) else {
        return false;
    };
    own == theirs
}

/// `(scheme, host, port)` of `host[:port]` under `scheme`, the port
/// defaulted and the host lower-cased; `None` if it is not one.
fn endpoint(scheme: &str, authority: &str) -> Option<(String, String, u16)> {
    let default = match scheme {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    // IPv6 literals keep their brackets; a port follows the last ':'
    // after them.
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (h, p.parse().ok()?),
        _ => (authority, default),
    };
    if host.is_empty() || host.contains('/') {
        return None;
    }
    Some((scheme.to_owned(), host.to_ascii_lowercase(), port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    fn post(headers: &[(&str, &str)]) -> Request {
        let mut b = Request::builder().method("POST").uri("/v1/rooms/r/pause");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(Body::empty()).expect("request")
    }

    #[test]
    fn only_foreign_changes_are_refused() {
        let host = ("host", "localhost:7700");
        for ok in [
            post(&[host]),
            post(&[host, ("origin", "http://localhost:7700")]),
            post(&[host, ("origin", "HTTP://LocalHost:7700")]),
            post(&[("host", "example.com"), ("origin", "http://example.com:80")]),
            post(&[
                ("host", "example.com"),
                ("x-forwarded-proto", "https"),
                ("origin", "https://example.com"),
            ]),
            post(&[("host", "[::1]:7700"), ("origin", "http://[::1]:7700")]),
            post(&[host, ("sec-fetch-site", "same-origin")]),
            post(&[host, ("sec-fetch-site", "none")]),
        ] {
            assert!(refused(&ok, false).is_none(), "{:?}", ok.headers());
        }
        for bad in [
            post(&[host, ("sec-fetch-site", "cross-site")]),
            post(&[host, ("sec-fetch-site", "same-site")]),
            post(&[host, ("origin", "http://evil.example")]),
            post(&[host, ("origin", "http://localhost:7701")]),
            post(&[host, ("origin", "https://localhost:7700")]),
            post(&[host, ("origin", "null")]),
            post(&[("origin", "http://localhost:7700")]),
        ] {
            assert!(refused(&bad, false).is_some(), "{:?}", bad.headers());
            // An origin in cors_origins may.
            assert!(refused(&bad, true).is_none(), "{:?}", bad.headers());
        }
        let get = Request::builder()
            .uri("/v1/gates")
            .header("sec-fetch-site", "cross-site")
            .body(Body::empty())
            .expect("request");
        assert!(refused(&get, false).is_none());
    }
}
