//! Opt-in CORS for the API (`cors_origins`, `--cors-origin`): a browser
//! app on one of the listed origins may call tollgate directly, with a
//! bearer token. Off by default, and never for an origin not listed.
//!
//! For a listed origin, a preflight (`OPTIONS` with
//! `Access-Control-Request-Method`) is answered 204 by the front layer
//! itself, before authentication (a browser sends no token with it), and
//! every other answer carries `Access-Control-Allow-Origin` with that
//! origin and exposes the headers a client reads (`Retry-After`, the
//! `RateLimit-*` ones, `WWW-Authenticate`). A listed origin's changes also
//! pass the cross-site check of [`super::origin`]. Credentials (cookies)
//! are never allowed across origins: the console's session cookie stays
//! with the console, and a cross-origin app authenticates with
//! `Authorization: Bearer`. A wildcard is refused: with no tokens
//! configured, `*` would let every site a visitor opens drive the server.

use std::collections::HashSet;

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The origins allowed to call the API from a browser.
#[derive(Debug, Default)]
pub(crate) struct Cors {
    origins: HashSet<String>,
}

/// The methods the API's routes take.
const METHODS: &str = "GET, HEAD, POST, PUT, PATCH, DELETE";
/// The request headers the API reads.
const REQUEST_HEADERS: &str = "authorization, content-type, last-event-id, x-csrf-token";
/// The response headers a cross-origin client may read.
const EXPOSED: &str = "retry-after, ratelimit-limit, ratelimit-remaining, ratelimit-reset, www-authenticate";
/// How long a browser may cache a preflight's answer (s).
const MAX_AGE: &str = "600";

impl Cors {
    /// The allow-list from `cors_origins`, each `scheme://host[:port]` with
    /// scheme `http` or `https`; normalised as browsers send `Origin`
    /// (lower case, no default port). An error names the first bad entry.
    pub(crate) fn new(origins: &[String]) -> Result<Cors, String> {
        let origins = origins
            .iter()
            .map(|o| normalise(o).ok_or_else(|| bad(o)))
            .collect::<Result<_, _>>()?;
        Ok(Cors { origins })
    }

    /// Whether a request's `Origin` value is listed.
    pub(crate) fn allows(&self, origin: &str) -> bool {
        !self.origins.is_empty() && normalise(origin).is_some_and(|o| self.origins.contains(&o))
    }

    /// The request's `Origin` if it is listed.
    pub(crate) fn allowed<'h>(&self, headers: &'h HeaderMap) -> Option<&'h HeaderValue> {
        if self.origins.is_empty() {
            return None;
        }
        headers
            .get(header::ORIGIN)
            .filter(|o| o.to_str().is_ok_and(|o| self.allows(o)))
    }
}

/// The answer to a listed origin's preflight, if `method` and `headers`
/// make one.
pub(crate) fn preflight(method: &Method, headers: &HeaderMap, origin: &HeaderValue) -> Option<Response> {
    if method != Method::OPTIONS || !headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD) {
        return None;
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    let h = response.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(METHODS),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static(REQUEST_HEADERS),
    );
    h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static(MAX_AGE));
    h.insert(header::VARY, HeaderValue::from_static("origin"));
    Some(response)
}

/// Marks an answer to a listed origin as readable by it.
pub(crate) fn allow(response: &mut Response, origin: HeaderValue) {
    let h = response.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static(EXPOSED),
    );
    h.append(header::VARY, HeaderValue::from_static("origin"));
}

fn bad(origin: &str) -> String {
    format!(
        "cors_origins: {origin:?} is not an origin: write scheme://host[:port] with http or https, no path and no wildcard, e.g. https://app.example.com"
    )
}

/// `scheme://host[:port]` in the form browsers send it, or `None`.
fn normalise(origin: &str) -> Option<String> {
    let (scheme, rest) = origin.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => "80",
        "https" => "443",
        _ => return None,
    };
    let (host, port) = match rest.rsplit_once(':') {
        // (An IPv6 host without a port has colons but ends in ']'.)
        Some((host, port)) if !port.ends_with(']') => (host, Some(port)),
        _ => (rest, None),
    };
    let host_ok = !host.is_empty()
        && (host.starts_with('[') && host.ends_with(']')
            || host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.'));
    if !host_ok {
        return None;
    }
    let host = host.to_ascii_lowercase();
    match port {
        None => Some(format!("{scheme}://{host}")),
        Some(p) if p.parse::<u16>().is_ok_and(|n| n > 0) && !p.starts_with('0') => {
            if p == default_port {
                Some(format!("{scheme}://{host}"))
            } else {
                Some(format!("{scheme}://{host}:{p}"))
            }
        }
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_compared_as_browsers_send_them() {
        let cors = Cors::new(&[
            "https://App.Example.com".to_owned(),
            "http://localhost:5173".to_owned(),
            "https://b.example:443".to_owned(),
            "http://[::1]:8080".to_owned(),
        ])
        .expect("valid");
        for yes in [
            "https://app.example.com",
            "http://localhost:5173",
            "https://b.example",
            "http://[::1]:8080",
        ] {
            assert!(cors.allows(yes), "{yes}");
        }
        for no in [
            "http://app.example.com",
            "https://app.example.com:8443",
            "http://localhost:5174",
            "http://localhost",
            "https://evil.app.example.com",
            "https://app.example.com.evil",
            "null",
            "",
        ] {
            assert!(!cors.allows(no), "{no}");
        }
        assert!(!Cors::default().allows("https://app.example.com"));
    }

    #[test]
    fn anything_but_an_origin_is_refused() {
        for bad in [
            "*",
            "https://*.example.com",
            "app.example.com",
            "ftp://app.example.com",
            "https://app.example.com/",
            "https://app.example.com/path",
            "https://app.example.com:0",
            "https://app.example.com:99999",
            "https://app.example.com:08080",
            "https://",
            "https://user@app.example.com",
            "null",
        ] {
            let e = Cors::new(&[bad.to_owned()]).expect_err(bad);
            assert!(e.contains("is not an origin"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_preflight_is_an_options_request_asking_for_a_method() {
        let origin = HeaderValue::from_static("https://app.example.com");
        let mut headers = HeaderMap::new();
        assert!(preflight(&Method::OPTIONS, &headers, &origin).is_none());
        headers.insert(
            header::ACCESS_CONTROL_REQUEST_METHOD,
            HeaderValue::from_static("POST"),
        );
        assert!(preflight(&Method::POST, &headers, &origin).is_none());
        let r = preflight(&Method::OPTIONS, &headers, &origin).expect("a preflight");
        assert_eq!(r.status(), StatusCode::NO_CONTENT);
        assert_eq!(r.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], origin);
        assert!(
            r.headers()[header::ACCESS_CONTROL_ALLOW_HEADERS]
                .to_str()
                .expect("ascii")
                .contains("authorization")
        );
        assert!(!r.headers().contains_key(header::ACCESS_CONTROL_ALLOW_CREDENTIALS));
    }
}
