//! The HTTP/JSON API: thin handlers that parse, call a gate operation and
//! render the answer. Semantics live in the library.
//!
//! Durations in bodies and query strings are milliseconds (`ttl_ms`,
//! `heartbeat_ms`, `wait_ms`). A ticket handed out over HTTP carries the
//! lease and heartbeat lengths it was issued with (`<id>.<ttl>.<heartbeat>`),
//! so asking about it needs nothing but the ticket.

use std::time::Duration;

use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, FromRequestParts, MatchedPath, Path, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tollgate::{Entered, ErrorKind, Gate, GateOptions, GateStats, Left, Store, TicketStatus};

pub(crate) use crate::body::Json;
use crate::body::{BODY_LIMIT, limited};
/// Longest a long-poll may wait.
const MAX_WAIT: Duration = Duration::from_secs(60);

const DEFAULT_TTL_MS: u64 = 30_000;
const DEFAULT_HEARTBEAT_MS: u64 = 10_000;

#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) store: Store,
    /// Renders the Prometheus text format for /metrics.
    pub(crate) metrics: metrics_exporter_prometheus::PrometheusHandle,
    /// Gates this server has served, for the per-gate series (bounded).
    pub(crate) gates: Tracked,
    /// Job queues this server has served, for the per-queue series.
    pub(crate) queues: Tracked,
    /// Partition counts of the configured queues, and handles.
    pub(crate) queue_set: std::sync::Arc<crate::jobs_http::Queues>,
    /// Configured and ad-hoc rate limiters.
    pub(crate) limits: std::sync::Arc<crate::limits::Limiters>,
    /// The waiting rooms, for their admin routes.
    pub(crate) rooms: std::sync::Arc<crate::room::Rooms>,
    /// Rate-limits the /v1 routes when `[protect]` is configured.
    pub(crate) protect: Option<tollgate::RateLimitLayer>,
    /// Bearer tokens accepted on /v1 routes; empty: no authentication.
    pub(crate) tokens: std::sync::Arc<Tokens>,
    /// Waiting tickets per client (`max_tickets_per_client`).
    pub(crate) tickets: std::sync::Arc<crate::tickets::TicketCaps>,
    /// How long /metrics may spend gathering figures from the store.
    pub(crate) metrics_timeout: Duration,
    /// How long a request body may take to arrive.
    pub(crate) body_timeout: Duration,
    /// Turns true when the server shuts down: pending long-polls answer at
    /// once with the ticket's current status.
    pub(crate) stopping: tokio::sync::watch::Receiver<bool>,
}

/// The router, with every route of the API.
impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// At most this many gates (and as many queues) get their own series in
/// /metrics.
const TRACKED: usize = 1000;

pub(crate) fn router(state: AppState) -> Router {
    let api = Router::new()
        // Metrics name gates, so they sit behind the tokens too.
        .route("/metrics", get(metrics_text))
        .route("/v1/gates/{name}", get(stats))
        .route("/v1/gates/{name}/capacity", put(set_capacity))
        .route("/v1/gates/{name}/holders", get(holders))
        .route("/v1/gates/{name}/enter", post(enter))
        .route(
            "/v1/gates/{name}/tickets/{ticket}",
            get(ticket_status).delete(cancel),
        )
        .route("/v1/gates/{name}/tickets/{ticket}/events", get(ticket_events))
        .route("/v1/gates/{name}/leases/{token}", delete(release))
        .route("/v1/gates/{name}/leases/{token}/renew", post(renew))
        .route("/v1/limits/{name}", get(crate::limits::describe))
        .route("/v1/limits/{name}/check", post(crate::limits::check))
        .route("/v1/queues/{queue}", get(crate::jobs_http::stats))
        .route(
            "/v1/queues/{queue}/jobs",
            limited(post(crate::jobs_http::push), crate::jobs_http::PUSH_BODY_LIMIT),
        )
        .route(
            "/v1/queues/{queue}/batch",
            limited(
                post(crate::jobs_http::push_batch),
                crate::jobs_http::BATCH_BODY_LIMIT,
            ),
        )
        .route("/v1/queues/{queue}/claim", post(crate::jobs_http::claim))
        .route(
            "/v1/queues/{queue}/ack",
            limited(
                post(crate::jobs_http::ack_batch),
                crate::jobs_http::ACK_BODY_LIMIT,
            ),
        )
        .route("/v1/queues/{queue}/completed", get(crate::jobs_http::completed))
        .route("/v1/queues/{queue}/jobs/{id}", delete(crate::jobs_http::cancel))
        .route("/v1/queues/{queue}/jobs/{id}/ack", post(crate::jobs_http::ack))
        .route("/v1/queues/{queue}/jobs/{id}/nack", post(crate::jobs_http::nack))
        .route(
            "/v1/queues/{queue}/jobs/{id}/extend",
            post(crate::jobs_http::extend),
        )
        .route(
            "/v1/queues/{queue}/jobs/{id}/reschedule",
            post(crate::jobs_http::reschedule),
        )
        .route("/v1/queues/{queue}/dead", get(crate::jobs_http::dead))
        .route("/v1/queues/{queue}/dead/replay", post(crate::jobs_http::replay))
        .route("/v1/queues/{queue}/dead/purge", post(crate::jobs_http::purge))
        .route("/v1/rooms/{room}", get(crate::room::admin::stats))
        .route("/v1/rooms/{room}/capacity", put(crate::room::admin::set_capacity))
        .route(
            "/v1/rooms/{room}/admission_rate",
            put(crate::room::admin::set_admission_rate),
        )
        .route("/v1/rooms/{room}/pause", post(crate::room::admin::pause))
        .route("/v1/rooms/{room}/resume", post(crate::room::admin::resume))
        .route(
            "/v1/rooms/{room}/sessions/{session}",
            delete(crate::room::admin::end_session),
        );
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
        api.route_layer(middleware::from_fn_with_state(state.clone(), authenticate))
    };
    Router::new()
        // Probes stay open so an orchestrator needs no token.
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/openapi.json", get(openapi))
        .merge(api)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(state.clone(), front))
        .with_state(state)
}

/// Checks `Authorization: Bearer <token>` when tokens are configured, and
/// notes which token it was ([`Caller`]).
async fn authenticate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer);
    if let Some(index) = presented.and_then(|p| state.tokens.find(p)) {
        req.extensions_mut().insert(Caller(index));
        return next.run(req).await;
    }
    let mut response = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "send Authorization: Bearer <token> with one of the server's tokens",
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// The credentials of `Bearer <token>`; the scheme's name is
/// case-insensitive (RFC 7235), and one or more spaces follow it.
fn bearer(value: &str) -> Option<&str> {
    let (scheme, rest) = value.split_once(' ')?;
    let token = rest.trim_matches(' ');
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Which of the server's tokens a request presented (its place in the
/// list), set by authentication: the client a ticket is counted against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caller(pub(crate) usize);

/// The server's bearer tokens, kept as SHA-256 digests. A presented token
/// is hashed and its digest compared with every one, each comparison
/// running over all 32 bytes: the time taken depends neither on how much
/// of a guess was right nor on whether its length was, and a digest that
/// partly matches tells nothing about the token behind it.
#[derive(Debug, Default)]
pub(crate) struct Tokens(Vec<[u8; 32]>);

impl Tokens {
    pub(crate) fn new(tokens: &[String]) -> Tokens {
        Tokens(tokens.iter().map(|t| digest(t)).collect())
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The place of `presented` among the tokens, if it is one.
    fn find(&self, presented: &str) -> Option<usize> {
        let presented = digest(presented);
        let mut found = None;
        for (i, token) in self.0.iter().enumerate() {
            if same(token, &presented) && found.is_none() {
                found = Some(i);
            }
        }
        found
    }
}

fn digest(token: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes()).into()
}

/// Compares all 32 bytes, without stopping at the first difference.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    std::hint::black_box(a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y))) == 0
}

/// What every request goes through first, in one layer (each layer of
/// its own would box one more future per request, and a parked long-poll
/// keeps them all): a URI over the limit is refused (414), the body gets
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
    let response = match crate::conn::uri_too_long(&req) {
        Some(refused) => refused,
        None => {
            let timeout = state.body_timeout;
            drop(state);
            let (req, timed_out) = crate::body::deadlined(req, timeout);
            crate::body::or_timed_out(next.run(req).await, &timed_out, timeout)
        }
    };
    let status = response.status().as_u16().to_string();
    let labels = [
        ("route", route.clone()),
        ("method", method.clone()),
        ("status", status),
    ];
    metrics::counter!("tollgate_http_requests_total", &labels).increment(1);
    metrics::histogram!("tollgate_http_request_duration_seconds", &labels)
        .record(started.elapsed().as_secs_f64());
    tracing::info!(
        %method,
        route,
        status = response.status().as_u16(),
        ms = started.elapsed().as_secs_f64() * 1000.0,
        "request"
    );
    response
}

/// The one error shape: `{"error": {"code", "message"}}` with a fitting
/// status; never a 500 for a caller's mistake.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// The `{"code", "message"}` of the error, for answers that carry one
    /// error per item of a batch.
    pub(crate) fn item(&self) -> serde_json::Value {
        json!({"code": self.code, "message": self.message})
    }

    /// The answer for a library error, without counting it in the
    /// store-error metric (for the items of a batch: the batch counts once).
    pub(crate) fn uncounted(e: &tollgate::Error) -> Self {
        let (status, code) = match e.kind() {
            ErrorKind::InvalidInput => (StatusCode::BAD_REQUEST, "bad_request"),
            ErrorKind::CapacityConflict => (StatusCode::CONFLICT, "capacity_conflict"),
            ErrorKind::NoCapacity => (StatusCode::CONFLICT, "no_capacity"),
            ErrorKind::LeaseLost => (StatusCode::NOT_FOUND, "lease_not_found"),
            ErrorKind::JobRunning => (StatusCode::CONFLICT, "job_running"),
            ErrorKind::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable"),
            ErrorKind::NotReplicated => (StatusCode::SERVICE_UNAVAILABLE, "not_replicated"),
            ErrorKind::PartitionConflict => (StatusCode::CONFLICT, "partition_conflict"),
            // The server's set-up, not the caller's request.
            ErrorKind::Misconfigured => (StatusCode::INTERNAL_SERVER_ERROR, "store_misconfigured"),
            _ => (StatusCode::BAD_GATEWAY, "store_error"),
        };
        ApiError::new(status, code, e.to_string())
    }
}

impl From<tollgate::Error> for ApiError {
    fn from(e: tollgate::Error) -> Self {
        let answer = ApiError::uncounted(&e);
        if matches!(
            e.kind(),
            ErrorKind::Unavailable
                | ErrorKind::Store
                | ErrorKind::Misconfigured
                | ErrorKind::NotReplicated
                | ErrorKind::PartitionConflict
        ) {
            metrics::counter!("tollgate_store_errors_total", "code" => answer.code).increment(1);
        }
        answer
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        let mut response = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// Query extractor whose rejections use the API's error shape.
pub(crate) struct Query<T>(pub(crate) T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(v)| Query(v))
            .map_err(|e: QueryRejection| {
                ApiError::bad_request(format!("bad query string: {}", e.body_text()))
            })
    }
}

fn gate(
    state: &AppState,
    name: &str,
    capacity: Option<u32>,
    ttl_ms: u64,
    heartbeat_ms: u64,
) -> Result<Gate, ApiError> {
    let options = GateOptions {
        ttl: Duration::from_millis(ttl_ms),
        heartbeat: Duration::from_millis(heartbeat_ms),
        auto_renew: false,
    };
    let gate = Gate::new(&state.store, name, capacity, options)?;
    track(&state.gates, name);
    Ok(gate)
}

/// Names (of gates, queues) this server has served, bounded so a client
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

/// Remembers `name` for the per-name series, up to TRACKED names each.
pub(crate) fn track(set: &Tracked, name: &str) {
    let mut names = set.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if names.len() < TRACKED && !names.contains(name) {
        names.insert(name.to_owned());
    }
}

/// A ticket as handed to HTTP clients: the store's id plus the lease and
/// heartbeat lengths it was issued with.
struct HttpTicket {
    id: String,
    ttl_ms: u64,
    heartbeat_ms: u64,
}

impl HttpTicket {
    fn encode(&self) -> String {
        format!("{}.{}.{}", self.id, self.ttl_ms, self.heartbeat_ms)
    }

    fn decode(s: &str) -> Result<HttpTicket, ApiError> {
        let bad = || ApiError::bad_request(format!("{s:?} is not a ticket issued by this API"));
        let mut parts = s.split('.');
        let (Some(id), Some(ttl), Some(hb), None) = (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        Ok(HttpTicket {
            id: id.to_owned(),
            ttl_ms: ttl.parse().map_err(|_| bad())?,
            heartbeat_ms: hb.parse().map_err(|_| bad())?,
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EnterBody {
    /// Permits to take. Default 1.
    #[serde(default = "one")]
    permits: u32,
    /// The gate's capacity; stored by the first request that names one.
    capacity: Option<u32>,
    /// Lease length. Default 30 000.
    #[serde(default = "default_ttl")]
    ttl_ms: u64,
    /// How long a ticket may go unasked before it leaves the line.
    /// Default 10 000.
    #[serde(default = "default_heartbeat")]
    heartbeat_ms: u64,
    /// Join the line if not granted at once. Default true.
    #[serde(default = "yes")]
    queue: bool,
    /// Who is asking; shown in the holder list while they hold.
    label: Option<String>,
}

fn one() -> u32 {
    1
}
fn yes() -> bool {
    true
}
fn default_ttl() -> u64 {
    DEFAULT_TTL_MS
}
fn default_heartbeat() -> u64 {
    DEFAULT_HEARTBEAT_MS
}

#[derive(Debug, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
enum EnterAnswer {
    Granted {
        token: String,
        fence: u64,
        ttl_ms: u64,
    },
    Queued {
        ticket: String,
        position: u64,
        waiting: u64,
        eta_ms: Option<u64>,
    },
    Busy {
        used: u64,
        capacity: u32,
        waiting: u64,
    },
}

async fn enter(
    State(state): State<AppState>,
    Path(name): Path<String>,
    client: crate::tickets::Client,
    Json(body): Json<EnterBody>,
) -> Result<axum::Json<EnterAnswer>, ApiError> {
    let g = gate(&state, &name, body.capacity, body.ttl_ms, body.heartbeat_ms)?;
    // A client holding its cap of waiting tickets may still be granted at
    // once, but not queue another.
    let (reservation, refused) = match body.queue {
        false => (None, None),
        true => match state.tickets.reserve(&client) {
            Ok(r) => (r, None),
            Err(refused) => (None, Some(refused)),
        },
    };
    let queue = body.queue && refused.is_none();
    // In a task of its own: a client that hangs up mid-call must not drop
    // the count of a ticket the store queues anyway.
    let (gate_name, heartbeat, permits, label) = (
        name.clone(),
        Duration::from_millis(body.heartbeat_ms),
        body.permits,
        body.label.clone(),
    );
    let entered = tokio::spawn(async move {
        let entered = g.enter_as(permits, queue, label.as_deref()).await;
        if let (Ok(Entered::Queued { ticket, .. }), Some(r)) = (&entered, reservation) {
            r.keep(&gate_name, ticket, heartbeat);
        }
        entered
    })
    .await
    .map_err(|_| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "the enter failed"))??;
    if let (Entered::Busy(_), Some(refused)) = (&entered, refused) {
        return Err(refused.error());
    }
    Ok(axum::Json(match entered {
        Entered::Granted(l) => EnterAnswer::Granted {
            token: l.token,
            fence: l.fence,
            ttl_ms: l.ttl.as_millis() as u64,
        },
        Entered::Queued { ticket, place } => EnterAnswer::Queued {
            ticket: HttpTicket {
                id: ticket,
                ttl_ms: body.ttl_ms,
                heartbeat_ms: body.heartbeat_ms,
            }
            .encode(),
            position: place.position,
            waiting: place.waiting,
            eta_ms: place.eta.map(|d| d.as_millis() as u64),
        },
        Entered::Busy(o) => EnterAnswer::Busy {
            used: o.used,
            capacity: o.capacity,
            waiting: o.waiting,
        },
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StatusQuery {
    /// Long-poll: wait up to this long for the grant. Default 0, at most
    /// 60 000.
    #[serde(default)]
    wait_ms: u64,
}

#[derive(Debug, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
enum StatusAnswer {
    Granted {
        token: String,
        fence: u64,
        ttl_ms: u64,
    },
    Queued {
        position: u64,
        waiting: u64,
        eta_ms: Option<u64>,
    },
}

async fn ticket_status(
    State(state): State<AppState>,
    Path((name, ticket)): Path<(String, String)>,
    Query(q): Query<StatusQuery>,
) -> Result<axum::Json<StatusAnswer>, ApiError> {
    let t = HttpTicket::decode(&ticket)?;
    let wait = Duration::from_millis(q.wait_ms);
    if wait > MAX_WAIT {
        return Err(ApiError::bad_request(format!(
            "wait_ms must be at most {}",
            MAX_WAIT.as_millis()
        )));
    }
    let g = gate(&state, &name, None, t.ttl_ms, t.heartbeat_ms)?;
    // The long-poll keeps the ticket alive in the store as it waits: keep
    // it counted as long.
    state
        .tickets
        .waiting(&name, &t.id, wait + Duration::from_millis(t.heartbeat_ms));
    let status = tokio::select! {
        status = g.wait_status(&t.id, wait) => status?,
        () = stopped(state.stopping.clone()) => g.status(&t.id).await?,
    };
    match &status {
        TicketStatus::Queued(_) => state
            .tickets
            .waiting(&name, &t.id, Duration::from_millis(t.heartbeat_ms)),
        TicketStatus::Granted(_) | TicketStatus::Gone => state.tickets.done(&name, &t.id),
    }
    match status {
        TicketStatus::Granted(l) => Ok(axum::Json(StatusAnswer::Granted {
            token: l.token,
            fence: l.fence,
            ttl_ms: l.ttl.as_millis() as u64,
        })),
        TicketStatus::Queued(p) => Ok(axum::Json(StatusAnswer::Queued {
            position: p.position,
            waiting: p.waiting,
            eta_ms: p.eta.map(|d| d.as_millis() as u64),
        })),
        TicketStatus::Gone => Err(ticket_gone()),
    }
}

/// Server-Sent Events for one ticket: `position` whenever its place in line
/// changes (looked at least every second, which is also the ticket's
/// heartbeat), then one `granted` (the moment it is granted) or `gone`, and
/// the stream ends. A client that disconnects stops the heartbeat, so its
/// ticket leaves the line after its grace.
async fn ticket_events(
    State(state): State<AppState>,
    Path((name, ticket)): Path<(String, String)>,
) -> Result<Sse<impl futures_util::Stream<Item = Result<Event, std::convert::Infallible>>>, ApiError> {
    let t = HttpTicket::decode(&ticket)?;
    let g = gate(&state, &name, None, t.ttl_ms, t.heartbeat_ms)?;
    // Fail fast (404, 503) before the stream starts.
    let first = g.status(&t.id).await?;
    if first == TicketStatus::Gone {
        state.tickets.done(&name, &t.id);
        return Err(ticket_gone());
    }
    struct Watching {
        gate: Gate,
        name: String,
        id: String,
        heartbeat: Duration,
        tickets: std::sync::Arc<crate::tickets::TicketCaps>,
        next: Option<TicketStatus>,
        last: Option<tollgate::Place>,
        stopping: tokio::sync::watch::Receiver<bool>,
    }
    let start = Watching {
        gate: g,
        name,
        id: t.id,
        heartbeat: Duration::from_millis(t.heartbeat_ms),
        tickets: state.tickets.clone(),
        next: Some(first),
        last: None,
        stopping: state.stopping.clone(),
    };
    let stream = futures_util::stream::unfold(Some(start), |w| async move {
        let mut w = w?;
        loop {
            let status = match w.next.take() {
                Some(s) => s,
                None => {
                    let look = w.gate.wait_status(&w.id, Duration::from_secs(1));
                    tokio::select! {
                        s = look => match s {
                            Ok(s) => s,
                            Err(e) => {
                                let event = Event::default().event("error").data(json!({"code": ApiError::from(e).code}).to_string());
                                return Some((Ok(event), None));
                            }
                        },
                        () = stopped(w.stopping.clone()) => return None,
                    }
                }
            };
            match &status {
                TicketStatus::Queued(_) => w.tickets.waiting(&w.name, &w.id, w.heartbeat),
                TicketStatus::Granted(_) | TicketStatus::Gone => w.tickets.done(&w.name, &w.id),
            }
            match status {
                TicketStatus::Queued(p) if w.last == Some(p) => continue,
                TicketStatus::Queued(p) => {
                    w.last = Some(p);
                    let eta_ms = p.eta.map(|d| d.as_millis() as u64);
                    let data = json!({"position": p.position, "waiting": p.waiting, "eta_ms": eta_ms});
                    return Some((
                        Ok(Event::default().event("position").data(data.to_string())),
                        Some(w),
                    ));
                }
                TicketStatus::Granted(l) => {
                    let data =
                        json!({"token": l.token, "fence": l.fence, "ttl_ms": l.ttl.as_millis() as u64});
                    return Some((Ok(Event::default().event("granted").data(data.to_string())), None));
                }
                TicketStatus::Gone => {
                    return Some((Ok(Event::default().event("gone").data("{}")), None));
                }
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

fn ticket_gone() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "ticket_not_found",
        "no such ticket: cancelled, dropped after missed heartbeats, or its lease ended",
    )
}

/// Resolves once the server is shutting down.
async fn stopped(mut stopping: tokio::sync::watch::Receiver<bool>) {
    loop {
        if *stopping.borrow_and_update() {
            return;
        }
        if stopping.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

async fn cancel(
    State(state): State<AppState>,
    Path((name, ticket)): Path<(String, String)>,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    let t = HttpTicket::decode(&ticket)?;
    let g = gate(&state, &name, None, t.ttl_ms, t.heartbeat_ms)?;
    let left = g.leave(&t.id).await?;
    state.tickets.done(&name, &t.id);
    match left {
        Left::Cancelled => Ok(axum::Json(json!({"cancelled": true}))),
        // Granted meanwhile: cancelling gives the lease back.
        Left::Released => Ok(axum::Json(json!({"cancelled": true, "released": true}))),
        Left::Unknown => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "ticket_not_found",
            "no such ticket",
        )),
    }
}

async fn release(
    State(state): State<AppState>,
    Path((name, token)): Path<(String, String)>,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    let g = gate(&state, &name, None, DEFAULT_TTL_MS, DEFAULT_HEARTBEAT_MS)?;
    match g.leave(&token).await? {
        Left::Released => Ok(axum::Json(json!({"released": true}))),
        Left::Cancelled => Ok(axum::Json(json!({"cancelled": true}))),
        Left::Unknown => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "lease_not_found",
            "no such lease: it ended (expired or released) or never existed",
        )),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RenewBody {
    #[serde(default = "default_ttl")]
    ttl_ms: u64,
}

async fn renew(
    State(state): State<AppState>,
    Path((name, token)): Path<(String, String)>,
    Json(body): Json<RenewBody>,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    let g = gate(&state, &name, None, DEFAULT_TTL_MS, DEFAULT_HEARTBEAT_MS)?;
    let ttl = g
        .renew(&token, Duration::from_millis(body.ttl_ms))
        .await
        .inspect_err(|e| {
            if e.is_lease_lost() {
                let tracked = state
                    .gates
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .contains(&name);
                let label = if tracked { name.clone() } else { "other".to_owned() };
                metrics::counter!("tollgate_lost_leases_total", "gate" => label).increment(1);
            }
        })?;
    Ok(axum::Json(json!({"ttl_ms": ttl.as_millis() as u64})))
}

#[derive(Debug, Serialize)]
struct StatsAnswer {
    name: String,
    capacity: Option<u32>,
    used: u64,
    holders: u64,
    waiting: u64,
    grants: u64,
    expiries: u64,
    fence: u64,
}

fn stats_answer(name: String, s: GateStats) -> StatsAnswer {
    StatsAnswer {
        name,
        capacity: s.capacity,
        used: s.used,
        holders: s.holders,
        waiting: s.waiting,
        grants: s.grants,
        expiries: s.expiries,
        fence: s.fence,
    }
}

async fn stats(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<axum::Json<StatsAnswer>, ApiError> {
    let g = gate(&state, &name, None, DEFAULT_TTL_MS, DEFAULT_HEARTBEAT_MS)?;
    Ok(axum::Json(stats_answer(name, g.stats().await?)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HoldersQuery {
    /// At most this many, soonest to end first. Default 100, at most 10 000.
    #[serde(default = "hundred")]
    limit: u32,
}

fn hundred() -> u32 {
    100
}

async fn holders(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<HoldersQuery>,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    let g = gate(&state, &name, None, DEFAULT_TTL_MS, DEFAULT_HEARTBEAT_MS)?;
    let list: Vec<serde_json::Value> = g
        .holders(q.limit)
        .await?
        .into_iter()
        .map(|h| json!({"label": h.label, "ttl_ms": h.ttl.as_millis() as u64}))
        .collect();
    Ok(axum::Json(json!({"holders": list})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CapacityBody {
    capacity: u32,
}

async fn set_capacity(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Json(body): Json<CapacityBody>,
) -> Result<axum::Json<StatsAnswer>, ApiError> {
    let g = gate(&state, &name, None, DEFAULT_TTL_MS, DEFAULT_HEARTBEAT_MS)?;
    g.set_capacity(body.capacity).await?;
    Ok(axum::Json(stats_answer(name, g.stats().await?)))
}

/// Prometheus text format: request counts and latency by route and status,
/// store errors, lost leases, and for each gate this server has served
/// (up to 1,000) its capacity, holders, permits in use, line length, grants
/// and expiries, read from the store at scrape time (within the scrape's
/// deadline: see `crate::scrape`).
async fn metrics_text(State(state): State<AppState>) -> Response {
    crate::scrape::gather(&state).await;
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        state.metrics.render(),
    )
        .into_response()
}

/// The figures of one tracked gate, for /metrics: whether they were read.
pub(crate) async fn scrape_gate(state: &AppState, name: &str) -> bool {
    let Ok(g) = Gate::new(&state.store, name, None, GateOptions::default()) else {
        return false;
    };
    match g.stats().await {
        Ok(s) => {
            let gauge =
                |metric: &'static str, v: f64| metrics::gauge!(metric, "gate" => name.to_owned()).set(v);
            gauge("tollgate_gate_capacity", s.capacity.map_or(0.0, f64::from));
            gauge("tollgate_gate_holders", s.holders as f64);
            gauge("tollgate_gate_used", s.used as f64);
            gauge("tollgate_gate_waiting", s.waiting as f64);
            metrics::counter!("tollgate_gate_grants_total", "gate" => name.to_owned()).absolute(s.grants);
            metrics::counter!("tollgate_gate_expiries_total", "gate" => name.to_owned()).absolute(s.expiries);
            true
        }
        Err(e) => {
            // Counted by the conversion; the scrape goes on without it.
            let _ = ApiError::from(e);
            false
        }
    }
}

/// The API's OpenAPI 3 document, kept in docs/openapi.json.
const OPENAPI: &str = include_str!("../../../docs/openapi.json");

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
        "no such route; the API lives under /v1/gates/{name} and /v1/limits/{name}",
    )
}
