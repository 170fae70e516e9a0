//! Console sessions: `POST /v1/session` trades a token for an HttpOnly
//! cookie and a CSRF value, `GET` says who the cookie (or bearer) is,
//! `DELETE` clears the cookie. Open routes (the login is how a browser
//! gets in), rate-limited per client IP through the store so that
//! guessing is slow across every server sharing it ([`auth::Tries`], the
//! same allowance wrong bearer tokens spend). The cookie itself is made
//! and checked in [`super::auth`].

use axum::Router;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use serde_json::json;

use super::auth::{self, COOKIE, Session};
use super::body::Json;
use super::error::ApiError;
use crate::state::AppState;

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
    // costs the same allowance, right or wrong.
    if let Err(refused) = state.tries.spend(auth::client_ip(&state.tickets, &req)).await? {
        return Ok(refused);
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

async fn show(State(state): State<AppState>, req: Request) -> Response {
    if state.tokens.is_empty() {
        return no_auth();
    }
    if let Some(token) = auth::presented_bearer(req.headers()) {
        let ip = auth::client_ip(&state.tickets, &req);
        return match state.tries.bearer(&state.tokens, ip, token).await {
            Ok(caller) => axum::Json(json!({
                "auth": true,
                "role": caller.1.as_str(),
                "csrf": null,
                "expires_at_ms": null,
            }))
            .into_response(),
            Err(answer) => answer,
        };
    }
    match state.tokens.session_of(req.headers(), auth::now_ms()) {
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
