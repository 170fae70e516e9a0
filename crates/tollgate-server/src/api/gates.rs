//! The gate routes (/v1/gates/{name}/...): thin handlers that parse, call
//! a gate operation and render the answer. Semantics live in the library.
//!
//! Durations in bodies and query strings are milliseconds (`ttl_ms`,
//! `heartbeat_ms`, `wait_ms`). A ticket handed out over HTTP carries the
//! lease and heartbeat lengths it was issued with (`<id>.<ttl>.<heartbeat>`),
//! so asking about it needs nothing but the ticket.

use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::routing::{delete, get, post, put};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tollgate::{Entered, Gate, GateOptions, GateStats, Left, RW_PERMITS, RwMode, TicketStatus};

use super::body::Json;
use super::error::{ApiError, Query};
use super::tracked::track;
use crate::state::AppState;

/// Longest a long-poll may wait.
const MAX_WAIT: Duration = Duration::from_secs(60);

const DEFAULT_TTL_MS: u64 = 30_000;
const DEFAULT_HEARTBEAT_MS: u64 = 10_000;
/// The gate routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
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
        fair: true,
        max_hold: None,
    };
    let gate = Gate::new(&state.store, name, capacity, options)?;
    track(&state.gates, name);
    Ok(gate)
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
    permits: Option<u32>,
    /// The gate's capacity; stored by the first request that names one.
    capacity: Option<u32>,
    /// A read-write lock's hold: `shared` (a reader) or `exclusive` (the
    /// writer). Sets the capacity and the permits; neither may be given.
    mode: Option<Mode>,
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

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Mode {
    Shared,
    Exclusive,
}

impl EnterBody {
    /// The capacity and permits asked for, from `mode` or as given.
    fn permits(&self) -> Result<(Option<u32>, u32), ApiError> {
        let Some(mode) = self.mode else {
            return Ok((self.capacity, self.permits.unwrap_or(1)));
        };
        if self.capacity.is_some() || self.permits.is_some() {
            return Err(ApiError::bad_request(
                "mode sets the capacity and the permits of a read-write lock: give neither with it",
            ));
        }
        let mode = match mode {
            Mode::Shared => RwMode::Shared,
            Mode::Exclusive => RwMode::Exclusive,
        };
        Ok((Some(RW_PERMITS), mode.permits()))
    }
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
    client: super::tickets::Client,
    Json(body): Json<EnterBody>,
) -> Result<axum::Json<EnterAnswer>, ApiError> {
    let (capacity, permits) = body.permits()?;
    let g = gate(&state, &name, capacity, body.ttl_ms, body.heartbeat_ms)?;
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
    let (gate_name, heartbeat, label) = (
        name.clone(),
        Duration::from_millis(body.heartbeat_ms),
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
        status = g.wait_status(&t.id, wait) => status,
        () = stopped(state.stopping.clone()) => g.status(&t.id).await,
    };
    if status.as_ref().is_err_and(tollgate::Error::is_removed) {
        state.tickets.done(&name, &t.id);
    }
    let status = status?;
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
/// heartbeat), then one `granted` (the moment it is granted) or `gone`, or
/// an `error` (`{"code": "ticket_removed"}`: an admin took it out of the
/// line), and the stream ends. A client that disconnects stops the heartbeat, so its
/// ticket leaves the line after its grace.
async fn ticket_events(
    State(state): State<AppState>,
    Path((name, ticket)): Path<(String, String)>,
) -> Result<Sse<impl futures_util::Stream<Item = Result<Event, std::convert::Infallible>>>, ApiError> {
    let t = HttpTicket::decode(&ticket)?;
    let g = gate(&state, &name, None, t.ttl_ms, t.heartbeat_ms)?;
    // Fail fast (404, 410, 503) before the stream starts.
    let first = g.status(&t.id).await;
    if first.as_ref().is_err_and(tollgate::Error::is_removed) {
        state.tickets.done(&name, &t.id);
    }
    let first = first?;
    if first == TicketStatus::Gone {
        state.tickets.done(&name, &t.id);
        return Err(ticket_gone());
    }
    struct Watching {
        gate: Gate,
        name: String,
        id: String,
        heartbeat: Duration,
        tickets: std::sync::Arc<super::tickets::TicketCaps>,
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
                                if e.is_removed() {
                                    w.tickets.done(&w.name, &w.id);
                                }
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
pub(crate) struct StatsAnswer {
    name: String,
    capacity: Option<u32>,
    used: u64,
    holders: u64,
    waiting: u64,
    grants: u64,
    expiries: u64,
    fence: u64,
}

pub(crate) fn stats_answer(name: String, s: GateStats) -> StatsAnswer {
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
    let list: Vec<serde_json::Value> = g.holders(q.limit).await?.into_iter().map(holding_json).collect();
    Ok(axum::Json(json!({"holders": list})))
}

/// One holder as the API and `lock status` show it.
pub(crate) fn holding_json(h: tollgate::Holding) -> serde_json::Value {
    json!({"label": h.label, "ttl_ms": h.ttl.as_millis() as u64, "handle": h.handle, "fence": h.fence})
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
