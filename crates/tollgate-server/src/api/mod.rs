//! The HTTP/JSON API: the router that merges every feature's `routes()`,
//! the one front layer every request goes through, and the probes; who
//! may call it lives in [`auth`], [`session`] and [`origin`]. Each feature
//! (gates, jobs, limits, room admin) owns its handlers and routes and
//! depends on the shared state (crate::state) and on [`error`], never on
//! this module.

pub(crate) mod auth;
pub(crate) mod body;
pub(crate) mod caller;
pub(crate) mod conn;
pub(crate) mod cors;
pub(crate) mod election_feeds;
pub(crate) mod elections;
pub(crate) mod error;
pub(crate) mod events;
pub(crate) mod families;
pub(crate) mod gate_admin;
pub(crate) mod gates;
pub(crate) mod jobs;
pub(crate) mod lateness;
pub(crate) mod limiters;
pub(crate) mod limits;
pub(crate) mod listing;
pub(crate) mod metrics;
pub(crate) mod origin;
pub(crate) mod schedules;
pub(crate) mod session;
pub(crate) mod store;
pub(crate) mod streams;
pub(crate) mod tickets;
pub(crate) mod tracked;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use self::body::BODY_LIMIT;
use self::error::ApiError;
use crate::state::AppState;

/// The router: every feature's routes, merged, behind the tokens and
/// `[protect]` when configured, plus the open probes.
pub(crate) fn router(state: AppState) -> Router {
    let api = Router::new()
        // Metrics name gates, so they sit behind the tokens too.
        .merge(metrics::routes())
        .merge(gates::routes())
        .merge(elections::routes())
        .merge(gate_admin::routes())
        .merge(limits::routes())
        .merge(jobs::routes())
        .merge(events::routes())
        .merge(schedules::routes())
        .merge(listing::routes())
        .merge(store::routes())
        .merge(crate::console::sample::routes())
        .merge(crate::room::admin::routes())
        .merge(crate::room::events::routes());
    // Rate limiting runs after authentication: a caller without a token
    // is turned away without spending anyone's allowance.
    let api = match &state.protect {
        Some(layer) => api.route_layer(layer.clone()),
        None => api,
    };
    // Without tokens there is nothing to check, and no layer to pay for.
    let api = if state.tokens.is_empty() {
        api
    } else {
        api.route_layer(middleware::from_fn_with_state(state.clone(), auth::authenticate))
    };
    Router::new()
        // Probes stay open so an orchestrator needs no token.
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/openapi.json", get(openapi))
        // The console's pages: a browser loads them without a token; the
        // data they show sits behind it.
        .merge(crate::console::pages())
        // Open: the login is how a browser gets in (it has its own limit).
        .merge(session::routes())
        .merge(api)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(state.clone(), front))
        .with_state(state)
}

/// What the API answers before the store first answers: `/healthz` (the
/// process is alive), the OpenAPI document and the console's pages;
/// everything else, `/readyz`
/// included, 503 `store_unavailable` (with Retry-After) naming the last
/// connection error, which `connecting` holds.
pub(crate) fn starting_router(connecting: tokio::sync::watch::Receiver<Option<String>>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/openapi.json", get(openapi))
        .merge(crate::console::pages())
        .fallback(not_connected)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(connecting)
}

async fn not_connected(State(connecting): State<tokio::sync::watch::Receiver<Option<String>>>) -> ApiError {
    let message = match &*connecting.borrow() {
        Some(e) => format!("not connected to the store yet; retrying ({e})"),
        None => "not connected to the store yet; connecting".to_owned(),
    };
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "store_unavailable", message)
}

/// What every request goes through first, in one layer (each layer of
/// its own would box one more future per request, and a parked long-poll
/// keeps them all): a URI over the limit is refused (414), two `Host`s
/// (400), a `Host` the server does not answer to (421, see
/// [`origin::PublicHosts`]), a change sent
/// from another site too (403, see [`origin`]) unless its origin is in
/// `cors_origins` (whose preflights are answered here, see [`cors`]), the
/// body gets
/// its deadline (408), and one structured log line and the request metrics
/// record the route pattern (never the raw path, which carries tokens),
/// status and duration.
async fn front(State(state): State<AppState>, req: Request, next: Next) -> Response {
    // Bounded label values: known methods only.
    let method = match *req.method() {
        Method::GET
        | Method::POST
        | Method::PUT
        | Method::DELETE
        | Method::HEAD
        | Method::OPTIONS
        | Method::PATCH => req.method().as_str().to_owned(),
        _ => "other".to_owned(),
    };
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let started = std::time::Instant::now();
    let cors_origin = state.cors.allowed(req.headers()).cloned();
    let refused = conn::uri_too_long(&req)
        .or_else(|| conn::many_hosts_refused(&req))
        .or_else(|| state.hosts.refused(&req).map(IntoResponse::into_response))
        .or_else(|| {
            let origin = cors_origin.as_ref()?;
            cors::preflight(req.method(), req.headers(), origin)
        })
        .or_else(|| origin::refused(&req, cors_origin.is_some()).map(IntoResponse::into_response));
    let mut response = match refused {
        Some(refused) => refused,
        None => {
            let timeout = state.body_timeout;
            // Not held across the wait below (a parked long-poll would
            // carry it for its whole minute).
            drop(state);
            let (req, timed_out) = body::deadlined(req, timeout);
            body::or_timed_out(next.run(req).await, &timed_out, timeout)
        }
    };
    if let Some(origin) = cors_origin {
        cors::allow(&mut response, origin);
    }
    let status = response.status().as_u16().to_string();
    let labels = [
        ("route", route.clone()),
        ("method", method.clone()),
        ("status", status),
    ];
    ::metrics::counter!("tollgate_http_requests_total", &labels).increment(1);
    ::metrics::histogram!("tollgate_http_request_duration_seconds", &labels)
        .record(started.elapsed().as_secs_f64());
    tracing::info!(
        %method,
        route,
        status = response.status().as_u16(),
        ms = started.elapsed().as_millis() as u64,
        "request"
    );
    response
}
/// The API's OpenAPI 3 document, kept in docs/openapi.json.
const OPENAPI: &str = include_str!("../../../../docs/openapi.json");

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

async fn healthz() -> axum::Json<serde_json::Value> {
    axum::Json(json!({"status": "ok"}))
}

async fn readyz(State(state): State<AppState>) -> Result<axum::Json<serde_json::Value>, ApiError> {
    state.store.ping().await?;
    // A room that cannot admit exactly (its view of the store is stale, or
    // the store lost its settings and they are not back yet) is not ready.
    if let Some(why) = state.rooms.all().iter().find_map(|r| r.ready().err()) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "room_not_ready",
            why,
        ));
    }
    Ok(axum::Json(
        json!({"status": "ready", "store": state.store.kind()}),
    ))
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not take that method",
    )
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such route; the API lives under /v1/gates/{name}, /v1/queues/{queue}, /v1/schedules/{name}, /v1/limits/{name}, /v1/rooms/{room} and /v1/session (see docs/HTTP.md)",
    )
}
