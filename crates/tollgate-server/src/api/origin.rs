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
//!
//! That compares `Origin` with `Host`, which a page reached through DNS
//! rebinding (`attacker.example` made to resolve to 127.0.0.1) sends
//! alike: [`PublicHosts`] refuses such a `Host` on a server without
//! tokens, where nothing else would stop it.

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

/// The names the API answers to ([`PublicHosts::refused`]): IP
/// literals, `localhost`, the host of `listen` when it is a name, and
/// `public_hosts`. A rebound name is none of these: its owner cannot
/// make a browser send an IP literal or `localhost` as its own `Host`.
#[derive(Debug, Clone, Default)]
pub(crate) struct PublicHosts {
    /// Lower case, without a trailing dot.
    names: Vec<String>,
    /// Whether `Host` is checked at all: without tokens (a rebound page
    /// could otherwise read and change everything), or when `public_hosts`
    /// is given. With tokens a rebound page gets nowhere anyway: a browser
    /// sends no bearer by itself, and keeps a session cookie for the name
    /// that set it.
    on: bool,
}

/// The probes answer whatever the `Host`: monitors reach a server by
/// many names, and the probes tell nothing a rebound page could use.
const ANY_HOST: [&str; 2] = ["/healthz", "/readyz"];

impl PublicHosts {
    /// From `public_hosts` (names or IP addresses, no port, no wildcard),
    /// the `listen` address and whether tokens are configured.
    pub(crate) fn new(
        public_hosts: &[String],
        listen: &str,
        with_tokens: bool,
    ) -> Result<PublicHosts, String> {
        let mut names = Vec::new();
        for given in public_hosts {
            let name = normal(given);
            let ip = name.trim_start_matches('[').trim_end_matches(']');
            let valid = !name.is_empty()
                && (ip.parse::<std::net::IpAddr>().is_ok()
                    || name
                        .split('.')
                        .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')));
            if !valid {
                return Err(format!(
                    "public_hosts: {given:?} is not a host name or an IP address (give it without scheme, port or wildcard: every port is accepted)"
                ));
            }
            names.push(name);
        }
        let on = !with_tokens || !names.is_empty();
        if let Some((host, _)) = listen.rsplit_once(':') {
            names.push(normal(host));
        }
        Ok(PublicHosts { names, on })
    }

    /// **421** `unknown_host` for a request whose `Host` is none of the
    /// names this server answers to, when the check is on.
    pub(crate) fn refused(&self, req: &Request) -> Option<ApiError> {
        if !self.on || ANY_HOST.contains(&req.uri().path()) {
            return None;
        }
        let host = match req.headers().get(header::HOST) {
            Some(v) => v.to_str().unwrap_or("\u{fffd}"),
            None => req.uri().authority()?.as_str(),
        };
        if self.allows(host) {
            return None;
        }
        let shown: String = host.chars().take(100).collect();
        Some(ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "unknown_host",
            format!(
                "this server does not answer to the name {shown:?}: reach it by an IP address or localhost, or add the name to public_hosts (--public-host, TOLLGATE_PUBLIC_HOSTS)"
            ),
        ))
    }

    /// Whether `host` (`Host`'s value: a name or IP literal, maybe a port)
    /// is one of them.
    fn allows(&self, host: &str) -> bool {
        let name = match host.rsplit_once(':') {
            Some((h, port))
                if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) && !h.is_empty() =>
            {
                h
            }
            _ => host,
        };
        let name = normal(name);
        let literal = match name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
            Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
            None => name.parse::<std::net::Ipv4Addr>().is_ok(),
        };
        literal || name == "localhost" || self.names.contains(&name)
    }
}

/// A host name compared: lower case, without a trailing dot.
fn normal(name: &str) -> String {
    name.trim().trim_end_matches('.').to_ascii_lowercase()
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

    fn to(host: &str, path: &str) -> Request {
        Request::builder()
            .uri(path)
            .header("host", host)
            .body(Body::empty())
            .expect("request")
    }

    #[test]
    fn without_tokens_only_own_names_are_answered() {
        let hosts = PublicHosts::new(&["Tollgate.Example.".to_owned()], "myhost:7700", false).expect("hosts");
        for ok in [
            "127.0.0.1:7700",
            "127.0.0.1",
            "10.1.2.3:80",
            "[::1]:7700",
            "[::1]",
            "localhost:7700",
            "LOCALHOST",
            "localhost.:7700",
            "tollgate.example:443",
            "tollgate.example.",
            "myhost:7700",
        ] {
            assert!(hosts.refused(&to(ok, "/v1/gates")).is_none(), "{ok}");
        }
        for bad in [
            "attacker.example:7700",
            "attacker.example",
            "127.0.0.1.attacker.example",
            "localhost.attacker.example",
            "2130706433:7700",
            "[::1",
            "example",
            "",
        ] {
            let refused = hosts.refused(&to(bad, "/v1/gates")).expect(bad);
            assert_eq!(refused.code, "unknown_host");
            // The probes answer any name.
            assert!(hosts.refused(&to(bad, "/healthz")).is_none(), "{bad}");
        }
        // With tokens, only when public_hosts is given.
        let off = PublicHosts::new(&[], "127.0.0.1:7700", true).expect("hosts");
        assert!(off.refused(&to("attacker.example", "/v1/gates")).is_none());
        let given = PublicHosts::new(&["a.example".to_owned()], "127.0.0.1:7700", true).expect("hosts");
        assert!(given.refused(&to("attacker.example", "/v1/gates")).is_some());
        assert!(given.refused(&to("a.example:7700", "/v1/gates")).is_none());
        for bad in [
            "",
            "a.example:7700",
            "*.example",
            "http://a.example",
            "a..example",
            "a b",
        ] {
            assert!(
                PublicHosts::new(&[bad.to_owned()], "127.0.0.1:7700", false).is_err(),
                "{bad}"
            );
        }
        for good in ["::1", "[::1]", "10.0.0.1", "a-b.example"] {
            assert!(
                PublicHosts::new(&[good.to_owned()], "127.0.0.1:7700", false).is_ok(),
                "{good}"
            );
        }
    }
}
