//! Console sessions: `POST /v1/session` trades a token for an HttpOnly
//! cookie and a CSRF value, `GET` says who the cookie (or bearer) is,
//! `DELETE` clears the cookie. Open routes (the login is how a browser
//! gets in), rate-limited per client IP through the store so that
//! guessing is slow across every server sharing it. The cookie itself is
//! made and checked in [`super::auth`].

use std::net::IpAddr;

use axum::Router;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use serde_json::json;

use super::AppState;
use super::auth::{self, COOKIE, Session};
use super::body::Json;
use super::error::ApiError;

/// Login attempts one client IP (IPv6 by its /64) may make: a burst of
/// [`LOGIN_BURST`], then one every 6 s. A token is at least 16 printable
/// characters, so this leaves guessing hopeless while an operator who
/// mistypes a few times is not locked out.
pub(crate) const LOGIN_PER_MINUTE: u64 = 10;
pub(crate) const LOGIN_BURST: u64 = 10;

/// The limiter's name (in `tollgate_limit_decisions_total`).
pub(crate) const LOGIN_LIMITER: &str = "tollgate-session-login";

/// The login limiter over `store`: a login waits up to a second for it,
/// and answers 503 while the store cannot be asked (a login is not worth
/// failing open for).
pub(crate) fn login_limiter(store: &tollgate::Store) -> tollgate::RateLimiter {
    let limit = tollgate::Rate::per_minute(LOGIN_PER_MINUTE)
        .and_then(|rate| tollgate::Limit::gcra(rate, LOGIN_BURST))
        .unwrap_or_else(|_| unreachable!("a valid constant limit"));
    tollgate::RateLimiter::new(store, LOGIN_LIMITER, limit)
        .unwrap_or_else(|_| unreachable!("a valid constant name"))
        .timeout(std::time::Duration::from_secs(1))
}

/// The session routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/v1/session", get(show).post(login).delete(logout))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginBody {
    token: String,
}

async fn login(State(state): State<AppState>, req: Request) -> Result<Response, ApiError> {
    if state.tokens.is_empty() {
        return Ok(no_auth());
    }
    // Counted before the body is read or the token checked: every try
    // costs the same allowance.
    let ip = client_ip(&state, &req);
    let decision = state
        .login_limit
        .check(&format!("ip:{}", tollgate::ip_key(ip)), 1)
        .await?;
    if !decision.allowed {
        let mut response = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            format!(
                "too many login attempts from this address; at most {LOGIN_PER_MINUTE} a minute after a burst of {LOGIN_BURST}"
            ),
        )
        .into_response();
        let secs = decision.retry_after.as_secs_f64().ceil().max(1.0) as u64;
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        return Ok(response);
    }
    let secure = forwarded_https(req.headers());
    let Json(body) = Json::<LoginBody>::from_request(req, &state).await?;
    let Some(caller) = state.tokens.find(&body.token) else {
        return Ok(auth::unauthorized());
    };
    let ttl = state.tokens.session_ttl();
    let expires_ms = auth::now_ms() + ttl.as_millis() as u64;
    let (value, session) = state.tokens.issue(caller, expires_ms);
    let mut cookie = format!(
        "{COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        ttl.as_secs()
    );
    if secure {
        cookie.push_str("; Secure");
    }
    let mut response = axum::Json(described(&session)).into_response();
    set_cookie(&mut response, &cookie);
    Ok(response)
}

async fn show(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if state.tokens.is_empty() {
        return no_auth();
    }
    if let Some(token) = auth::presented_bearer(&headers) {
        return match state.tokens.find(token) {
            Some(caller) => axum::Json(json!({
                "auth": true,
                "role": caller.1.as_str(),
                "csrf": null,
                "expires_at_ms": null,
            }))
            .into_response(),
            None => auth::unauthorized(),
        };
    }
    match state.tokens.session_of(&headers, auth::now_ms()) {
        Some(session) => axum::Json(described(&session)).into_response(),
        None => auth::unauthorized(),
    }
}

async fn logout(headers: HeaderMap) -> Response {
    let mut cookie = format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    if forwarded_https(&headers) {
        cookie.push_str("; Secure");
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    set_cookie(&mut response, &cookie);
    response
}

fn described(session: &Session) -> serde_json::Value {
    json!({
        "auth": true,
        "role": session.caller.1.as_str(),
        "csrf": session.csrf,
        "expires_at_ms": session.expires_ms,
    })
}

/// Without tokens every caller is an admin and there is nothing to log
/// in to.
fn no_auth() -> Response {
    axum::Json(json!({"auth": false, "role": "admin", "csrf": null})).into_response()
}

fn set_cookie(response: &mut Response, cookie: &str) {
    if let Ok(v) = HeaderValue::from_str(cookie) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
}

/// Whether a proxy in front says the browser came over TLS: then the
/// cookie is `Secure`. A client that says so falsely only keeps its own
/// cookie off plain HTTP.
fn forwarded_https(headers: &HeaderMap) -> bool {
    super::origin::forwarded_proto(headers).is_some_and(|p| p.eq_ignore_ascii_case("https"))
}

/// The client's address, believing the `X-Forwarded-For` of the proxies
/// `[protect]` trusts.
fn client_ip(state: &AppState, req: &Request) -> IpAddr {
    let peer = req
        .extensions()
        .get::<tollgate::PeerAddr>()
        .map_or(IpAddr::from([0, 0, 0, 0]), |p| p.0.ip());
    state.tickets.client_ip(peer, req.headers())
}
