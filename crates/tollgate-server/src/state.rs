//! The API's shared state: what `tollgate serve` builds once and every
//! handler receives. A feature that needs only part of it takes that part
//! as its own state (`State<Arc<Rooms>>`, `State<Stopping>`…) through the
//! [`FromRef`] impls here, and so never names [`AppState`]; this module
//! names the features' types, never the other way around.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::FromRef;
use tollgate::Store;

use crate::api::auth::{Tokens, Tries};
use crate::api::cors::Cors;
use crate::api::election_feeds::ElectionFeeds;
use crate::api::jobs::queues::Queues;
use crate::api::lateness::LatenessByQueue;
use crate::api::limiters::Limiters;
use crate::api::origin::PublicHosts;
use crate::api::streams::{Stopping, Subscribers};
use crate::api::tickets::TicketCaps;
use crate::api::tracked::Tracked;
use crate::console::Console;
use crate::room::Rooms;

/// Everything a request handler may need, cloned into each request.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) store: Store,
    /// Renders the Prometheus text format for /metrics.
    pub(crate) metrics: metrics_exporter_prometheus::PrometheusHandle,
    /// The queues' lateness histograms, as last read (see metrics.rs).
    pub(crate) lateness: LatenessByQueue,
    /// Gates this server has served, for the per-gate series (bounded).
    pub(crate) gates: Tracked,
    /// Job queues this server has served, for the per-queue series.
    pub(crate) queues: Tracked,
    /// Schedules this server has configured, served or fired, for the
    /// per-schedule series.
    pub(crate) schedules: Tracked,
    /// Partition counts of the configured queues, and handles.
    pub(crate) queue_set: Arc<Queues>,
    /// Configured and ad-hoc rate limiters.
    pub(crate) limits: Arc<Limiters>,
    /// The console's series and live streams (console/).
    pub(crate) console: Arc<Console>,
    /// The waiting rooms, for their admin routes.
    pub(crate) rooms: Arc<Rooms>,
    /// Rate-limits the /v1 routes when `[protect]` is configured.
    pub(crate) protect: Option<tollgate::RateLimitLayer>,
    /// Tokens (with their roles) accepted on /v1 routes, as bearer or
    /// through a session cookie; empty: no authentication.
    pub(crate) tokens: Arc<Tokens>,
    /// Origins whose browser apps may call the API (`cors_origins`).
    pub(crate) cors: Arc<Cors>,
    /// Tries at a token per client address: logins and wrong bearers.
    pub(crate) tries: Arc<Tries>,
    /// The names the API answers to (`public_hosts`, DNS rebinding).
    pub(crate) hosts: Arc<PublicHosts>,
    /// Waiting tickets per client (`max_tickets_per_client`).
    pub(crate) tickets: Arc<TicketCaps>,
    /// Event streams (SSE) open now, and the most at once.
    pub(crate) subscribers: Arc<Subscribers>,
    /// The elections followed by event streams, one observer each.
    pub(crate) elections: Arc<ElectionFeeds>,
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

/// The rooms, for their admin routes and event streams.
impl FromRef<AppState> for Arc<Rooms> {
    fn from_ref(state: &AppState) -> Arc<Rooms> {
        state.rooms.clone()
    }
}

/// The count of event streams, for the rooms' streams.
impl FromRef<AppState> for Arc<Subscribers> {
    fn from_ref(state: &AppState) -> Arc<Subscribers> {
        state.subscribers.clone()
    }
}

/// The tokens, for the authenticate layer.
impl FromRef<AppState> for Arc<Tokens> {
    fn from_ref(state: &AppState) -> Arc<Tokens> {
        state.tokens.clone()
    }
}

/// Tries at a token, for the authenticate layer.
impl FromRef<AppState> for Arc<Tries> {
    fn from_ref(state: &AppState) -> Arc<Tries> {
        state.tries.clone()
    }
}

/// The tickets per client (and the trusted proxies, for client addresses).
impl FromRef<AppState> for Arc<TicketCaps> {
    fn from_ref(state: &AppState) -> Arc<TicketCaps> {
        state.tickets.clone()
    }
}

/// The stop signal, for event streams.
impl FromRef<AppState> for Stopping {
    fn from_ref(state: &AppState) -> Stopping {
        Stopping(state.stopping.clone())
    }
}
