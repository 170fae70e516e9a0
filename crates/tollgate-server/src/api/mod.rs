//! The HTTP/JSON API: the shared state, the router that merges every
//! feature's `routes()`, the one front layer every request goes through,
//! and the probes; who may call it lives in [`auth`], [`session`] and
//! [`origin`]. Each feature (gates, jobs, limits, room admin) owns its
//! handlers and routes and depends only on this module's [`AppState`]
//! and on [`error`], never on a sibling.

pub(crate) mod auth;
pub(crate) mod body;
pub(crate) mod conn;
pub(crate) mod cors;
pub(crate) mod error;
pub(crate) mod events;
pub(crate) mod families;
pub(crate) mod gate_admin;
pub(crate) mod gates;
pub(crate) mod jobs;
pub(crate) mod limits;
pub(crate) mod listing;
pub(crate) mod metrics;
pub(crate) mod origin;
pub(crate) mod schedules;
pub(crate) mod session;
pub(crate) mod store;
pub(crate) mod tickets;

use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;
use tollgate::Store;

pub(crate) use self::auth::{Caller, Tokens};
use self::body::BODY_LIMIT;
use self::error::ApiError;

#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) store: Store,
    /// Renders the Prometheus text format for /metrics.
    pub(crate) metrics: metrics_exporter_prometheus::PrometheusHandle,
    /// The queues' lateness histograms, as last read (see metrics.rs).
    pub(crate) lateness: metrics::LatenessByQueue,
    /// Gates this server has served, for the per-gate series (bounded).
    pub(crate) gates: Tracked,
    /// Job queues this server has served, for the per-queue series.
    pub(crate) queues: Tracked,
    /// Schedules this server has configured, served or fired, for the
    /// per-schedule series.
    pub(crate) schedules: Tracked,
    /// Partition counts of the configured queues, and handles.
    pub(crate) queue_set: std::sync::Arc<jobs::Queues>,
    /// Configured and ad-hoc rate limiters.
    pub(crate) limits: std::sync::Arc<limits::Limiters>,
    /// The console's series and live streams (crate::console).
    pub(crate) console: std::sync::Arc<crate::console::Console>,
    /// The waiting rooms, for their admin routes.
    pub(crate) rooms: std::sync::Arc<crate::room::Rooms>,
    /// Rate-limits the /v1 routes when `[protect]` is configured.
    pub(crate) protect: Option<tollgate::RateLimitLayer>,
    /// Tokens (with their roles) accepted on /v1 routes, as bearer or
    /// through a session cookie; empty: no authentication.
    pub(crate) tokens: std::sync::Arc<Tokens>,
    /// Origins whose browser apps may call the API (`cors_origins`).
    pub(crate) cors: std::sync::Arc<cors::Cors>,
    /// Tries at a token per client address: logins and wrong bearers.
    pub(crate) tries: std::sync::Arc<auth::Tries>,
    /// The names the API answers to (`public_hosts`, DNS rebinding).
    pub(crate) hosts: std::sync::Arc<origin::PublicHosts>,
    /// Waiting tickets per client (`max_tickets_per_client`).
    pub(crate) tickets: std::sync::Arc<tickets::TicketCaps>,
    /// Event streams (SSE) open now, and the most at once.
    pub(crate) subscribers: std::sync::Arc<events::Subscribers>,
    /// How long /metrics may spend gathering figures from the store.
    pub(crate) metrics_timeout: Duration,
    /// How long a request body may take to arrive.
    pub(crate) body_timeout: Duration,
    /// Turns true when the server shuts down: pending long-polls answer at
    /// once with the ticket's current status.
    pub(crate) stopping: tokio::sync::watch::Receiver<bool>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// At most this many gates (and as many queues, and schedules) get their
/// own series in /metrics.
const TRACKED: usize = 1000;

/// The router: every feature's routes, merged, behind the tokens and
/// `[protect]` when configured, plus the open probes.
pub(crate) fn router(state: AppState) -> Router {
    let api = Router::new()
        // Metrics name gates, so they sit behind the tokens too.
        .merge(metrics::routes())
        .merge(gates::routes())
        .merge(gate_admin::routes())
        .merge(limits::routes())
        .merge(jobs::routes())
        .merge(events::routes())
        .merge(schedules::routes())
        .merge(listing::routes())
        .merge(store::routes())
        .merge(crate::console::routes())
        .merge(crate::room::admin::routes());
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
/// cannot blow up the /metrics series count with made-up names.
pub(crate) type Tracked = std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>;

/// The names tracked so far.
pub(crate) fn tracked(set: &Tracked) -> Vec<String> {
    set.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .cloned()
        .collect()
}

/// How many names are tracked.
pub(crate) fn tracked_len(set: &Tracked) -> usize {
    set.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .len()
}

/// Remembers `name` for the per-name series, up to TRACKED names each;
/// whether it is tracked.
pub(crate) fn track(set: &Tracked, name: &str) -> bool {
    let mut names = set.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if names.len() < TRACKED && !names.contains(name) {
        names.insert(name.to_owned());
    }
    names.contains(name)
}

/// Frees `name`'s place among the per-name series: it is gone from the
/// store (a deleted schedule, a gate or queue the store forgot), so that
/// a new name can have its series. It is tracked again if it comes back.
pub(crate) fn untrack(set: &Tracked, name: &str) {
    set.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .remove(name);
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
