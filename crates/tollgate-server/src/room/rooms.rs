//! A room ([`Room`]: its gate, settings and this server's view of it) and
//! the rooms of a server ([`Rooms`]: matching a request to its room). A
//! room's own work outside a visit is here: its figures, the reset of its
//! line, the scrape, and the watch that keeps this server's view fresh
//! (writing back settings the store lost). A visit is visit.rs'; building
//! a room from its settings is config.rs'.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::header::{self, HeaderName, HeaderValue};
use axum::http::{Method, Request, Response, StatusCode};
use ipnet::IpNet;
use serde_json::json;
use tollgate::{Gate, Queueing, RateLimiter};

use super::answers::plain;
use super::challenge::Challenges;
use super::counters::RoomMetrics;
use super::draw::Draws;
use super::feeds::Feeds;
use super::page::Pages;
use super::path;
use super::proxy::Upstream;
use super::states::{self, Configured, RoomState, Schedule, Stored};
use super::store_call::{bounded, now_ms};
use super::token::Keys;
use super::watch::{self, Seen, View};
use crate::api::conn;
use crate::api::streams::Subscribers;

/// A room that is not ready logs its store errors at warn at most this
/// often (the first at once).
const WARN_EVERY: Duration = Duration::from_secs(60);
/// Paths under this prefix are the rooms' own endpoints.
pub(crate) const OWN_PATHS: &str = "/.tollgate/";

/// Why a request passes without queueing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Bypass {
    /// A bypass path: assets and health checks, open to anyone.
    Path,
    /// A bypass address or header: the operator's own.
    Trusted,
}

/// What happens while the store cannot be asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OnStoreError {
    Open,
    Closed,
}

/// One configured room.
pub(crate) struct Room {
    pub(super) name: String,
    /// The state and schedule `[rooms.NAME]` names (see states.rs for
    /// when they apply).
    pub(super) configured: Configured,
    pub(super) gate: Gate,
    pub(super) keys: Keys,
    pub(super) upstream: Upstream,
    pub(super) session_ttl: Duration,
    /// Renew an active visitor's lease when its token is older than this.
    pub(super) renew_every: Duration,
    pub(super) status_limit: RateLimiter,
    /// Per client address, for arrivals (new places in line); per server.
    pub(super) arrival_limit: Option<RateLimiter>,
    /// The proof of work asked of new visitors, if the room asks one.
    pub(super) challenge: Option<ArrivalChallenge>,
    /// The pre-queue's draw at the opening (`order_at_open = "random"`).
    pub(super) draw: Option<Draws>,
    pub(super) on_store_error: OnStoreError,
    pub(super) store_timeout: Duration,
    pub(super) pages: Arc<Pages>,
    pub(super) queued_status: StatusCode,
    pub(super) hosts: Vec<String>,
    pub(super) path_prefix: String,
    pub(super) bypass_paths: Vec<String>,
    pub(super) bypass_ips: Vec<IpNet>,
    pub(super) bypass_header: Option<(HeaderName, HeaderValue)>,
    pub(super) trusted_proxies: Vec<IpNet>,
    pub(super) upgrades: Vec<String>,
    pub(super) cookie_name: String,
    pub(super) secure_cookie: bool,
    pub(super) line_ages: bool,
    pub(super) metrics: RoomMetrics,
    /// This server's view of the gate: ended sessions, settings, epoch.
    pub(super) view: Arc<View>,
    /// One write-back of lost settings at a time.
    pub(super) restoring: tokio::sync::Mutex<()>,
    /// Waiting visitors' event streams on this server, per ticket.
    pub(super) feeds: Arc<Feeds>,
    /// The server's event streams, against `max_event_subscribers`.
    pub(super) subscribers: Arc<Subscribers>,
}

impl std::fmt::Debug for Room {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Room")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Room {
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The estimates given to visitors admitted from the line, against
    /// their actual waits, through this server since it started: the sum
    /// of the errors in ms, and how many.
    pub(crate) fn eta_errors(&self) -> (u64, u64) {
        let [sum, count] = &self.metrics.eta_errors;
        (
            sum.load(std::sync::atomic::Ordering::Relaxed),
            count.load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    pub(crate) fn gate(&self) -> &Gate {
        &self.gate
    }

    /// The room's figures, read from its gate in the store: what the
    /// admin routes answer, `GET /v1/rooms` lists and the room's event
    /// stream says first.
    pub(crate) async fn figures(&self) -> tollgate::Result<serde_json::Value> {
        let s = self.gate.stats().await?;
        let stored = Stored::of(s.paused, &s.door);
        let mut figures = json!({
            "room": self.name,
            "capacity": s.capacity,
            "active": s.holders,
            "waiting": s.waiting,
            "admitted": s.grants,
            "expired": s.expiries,
            "paused": s.paused,
            "state": stored.state.json(),
            "queueing": if s.random { "random" } else { "fifo" },
            "admissions_per_minute": s.admission_interval.map(|d| (60_000.0 / d.as_millis() as f64).round() as u64),
        });
        if let (Some(f), serde_json::Value::Object(schedule)) =
            (figures.as_object_mut(), stored.schedule.json())
        {
            f.extend(schedule);
        }
        figures["draw"] = self.draw_summary(&stored.schedule).await;
        Ok(figures)
    }

    /// The operator's reset of the line: everyone waiting is dropped in
    /// one step of the store (active sessions are untouched, and whoever
    /// joins after it is not dropped); returns how many. Each dropped
    /// visitor learns it on their next request ([`Room::why_gone`]).
    /// Not bounded by `store_timeout` (a visitor's wait): the step takes
    /// time in proportion to the line, and the store's own response
    /// timeout still bounds it.
    pub(crate) async fn reset_line(&self) -> tollgate::Result<u64> {
        let dropped = self.gate.clear_line().await?;
        self.metrics.line_resets.increment(1);
        self.metrics.reset_dropped.increment(dropped);
        tracing::info!(room = %self.name, dropped, "the line was reset");
        Ok(dropped)
    }

    /// Whether a visitor in line since `since_ms` (this server's clock)
    /// whose ticket is gone lost it to a reset, rather than leaving or
    /// falling silent: the gate keeps the last reset's time (the store's
    /// clock), which every server sharing the room reads alike. Clocks
    /// [`watch::SKEW`] apart still count as before it: a visitor who
    /// joined just after a reset and then left is told of the reset,
    /// which costs them nothing, whereas the other mistake would put a
    /// dropped visitor silently at the back. Asked only for a gone ticket.
    /// A room sold out says so to everyone whose ticket is gone (read from
    /// the store, not this server's view, which may lag the change).
    pub(super) async fn why_gone(&self, since_ms: u64) -> Gone {
        let skew = watch::SKEW.as_millis() as u64;
        match bounded(self.store_timeout, self.gate.stats()).await {
            Ok(s) if Stored::of(s.paused, &s.door).state == RoomState::SoldOut => Gone::SoldOut,
            Ok(s)
                if s.line_reset_ms
                    .is_some_and(|at| since_ms <= at.saturating_add(skew)) =>
            {
                Gone::Reset
            }
            _ => Gone::Left,
        }
    }

    /// Reads the room's gate for the scrape: active, waiting, capacity,
    /// admissions and expiries as the store has them (so they are right
    /// across every server sharing the room).
    pub(crate) async fn scrape(&self) {
        let Ok(s) = bounded(self.store_timeout, self.gate.stats()).await else {
            self.metrics.scrape_errors.increment(1);
            return;
        };
        let gauge =
            |metric: &'static str, v: f64| metrics::gauge!(metric, "room" => self.name.clone()).set(v);
        gauge("tollgate_room_capacity", s.capacity.map_or(0.0, f64::from));
        gauge("tollgate_room_active", s.holders as f64);
        gauge("tollgate_room_waiting", s.waiting as f64);
        metrics::counter!("tollgate_room_sessions_total", "room" => self.name.clone()).absolute(s.grants);
        metrics::counter!("tollgate_room_sessions_timed_out_total", "room" => self.name.clone())
            .absolute(s.expiries);
    }

    /// Expires ended sessions and stale waiters and hands slots on (any
    /// gate operation does; stats is the cheapest).
    async fn reap(&self) -> tollgate::Result<()> {
        bounded(self.store_timeout, self.gate.stats()).await.map(drop)
    }

    /// Logs a store error of the room's watch: at warn while the room is
    /// not ready (warming up, or its view gone stale: the error is why,
    /// and an operator looking at a room that never becomes ready needs
    /// it), at most once per [`WARN_EVERY`]; at debug otherwise (a
    /// passing error of a ready room, which its metrics count).
    fn watch_failed(&self, what: &str, e: &tollgate::Error, warned: &mut Option<std::time::Instant>) {
        if let Err(why) = self.view.ready(now_ms())
            && warned.is_none_or(|at| at.elapsed() >= WARN_EVERY)
        {
            *warned = Some(std::time::Instant::now());
            tracing::warn!(room = %self.name, error = %e, not_ready = why, "{what}");
            return;
        }
        tracing::debug!(room = %self.name, error = %e, "{what}");
    }

    /// Keeps this server's view of the room fresh until `stopping`: reads
    /// the gate's revocation log, settings and epoch every
    /// [`watch::WATCH_EVERY`], writes the settings back when the store has
    /// lost them, and once a second expires ended sessions (see
    /// [`Room::reap`]) and forgets revocations no token can name.
    pub(crate) async fn watch(&self, mut stopping: tokio::sync::watch::Receiver<bool>) {
        let mut last_reap = std::time::Instant::now();
        let mut warned = None;
        loop {
            tokio::select! {
                () = tokio::time::sleep(watch::WATCH_EVERY) => {}
                _ = stopping.changed() => return,
            }
            let began = now_ms();
            match bounded(self.store_timeout, self.view.read(&self.gate, began)).await {
                Ok(Seen::Same) => {}
                Ok(seen) => {
                    if seen == Seen::NewEpoch {
                        self.metrics.state_resets.increment(1);
                        tracing::info!(room = %self.name, "the room's state in the store was created anew; checking every session with it");
                    }
                    if seen == Seen::Forgotten {
                        self.restore().await;
                    }
                }
                Err(e) => {
                    self.metrics.watch_errors.increment(1);
                    self.watch_failed("could not read the room's state", &e, &mut warned);
                }
            }
            for token in self.view.take_pending(100) {
                if self.end_in_store(&token).await.is_err() {
                    break;
                }
            }
            self.metrics.ready.set(if self.view.ready(now_ms()).is_ok() {
                1.0
            } else {
                0.0
            });
            if last_reap.elapsed() >= Duration::from_secs(1) {
                last_reap = std::time::Instant::now();
                if let Err(e) = self.reap().await {
                    self.watch_failed("could not expire the room's ended sessions", &e, &mut warned);
                }
                let remembered = self.view.prune(now_ms());
                self.metrics.revoked.set(remembered as f64);
            }
        }
    }

    /// Writes the room's settings back into a store that lost them (a
    /// Redis that lost its data, or an idle gate the store dropped), once
    /// however many requests find them missing at the same time. It writes
    /// the room paused, then the pacing, the capacity last, and lifts the
    /// pause (unless the room was paused) only after [`watch::FRESH`] and a
    /// margin: until then another server may still let in visitors whose
    /// sessions went with the lost state, and new admissions on top of
    /// them could put more than the capacity on the site.
    pub(super) async fn restore(&self) {
        let _one = self.restoring.lock().await;
        if let Ok(now) = bounded(self.store_timeout, self.gate.stats()).await
            && now.capacity.is_some()
        {
            // Written back meanwhile, by this server or another.
            return;
        }
        let s = self.view.settings();
        self.view.hold_settings(true);
        let write = async {
            // The state's door, paused whatever the state until the margin
            // below has passed.
            let door = tollgate::DoorChange {
                paused: Some(true),
                ..states::change(s.state, &s.schedule, &self.configured, false)
            };
            self.gate.set_door(&door).await?;
            self.gate.set_admission_interval(s.admission_interval).await?;
            if s.random {
                self.gate.set_queueing(Queueing::random()).await?;
            }
            self.gate.set_capacity(s.capacity).await
        };
        match bounded(self.store_timeout, write).await {
            Ok(()) => {
                self.metrics.restored.increment(1);
                // Not always trouble: a store also drops an idle gate.
                tracing::info!(room = %self.name, capacity = s.capacity, state = s.state.name(), "the store had no settings for the room (lost, or dropped while idle); written back");
                if s.state != RoomState::Paused {
                    tokio::time::sleep(watch::FRESH + Duration::from_millis(60)).await;
                    if let Err(e) = bounded(self.store_timeout, self.gate.resume()).await {
                        tracing::warn!(room = %self.name, error = %e, "could not resume the room after writing its settings back");
                    }
                }
            }
            Err(e) => {
                tracing::warn!(room = %self.name, error = %e, "could not write the room's settings back")
            }
        }
        self.view.hold_settings(false);
    }

    /// Whether this server can admit visitors exactly: its view of the
    /// store is fresh and the store has the room's settings.
    pub(crate) fn ready(&self) -> Result<(), String> {
        self.view
            .ready(now_ms())
            .map_err(|why| format!("room {}: {why}", self.name))
    }

    /// Sets the gate's capacity and admission rate to the configured ones
    /// (at start, when the view still holds the config's; the admin API
    /// changes them at runtime).
    /// The state and schedule are applied only when the config names
    /// others than the store says it named at the last start: what was
    /// set at runtime (a sold-out room, an opening already run) survives a
    /// restart, a changed config wins.
    pub(crate) async fn apply_config(&self) -> tollgate::Result<()> {
        let s = self.view.settings();
        self.gate.set_capacity(s.capacity).await?;
        self.gate.set_admission_interval(s.admission_interval).await?;
        let now = self.gate.stats().await?;
        // (Set only when it changes: a new seed for every server's start
        // would be no fairer.)
        if now.random != s.random {
            let queueing = if s.random {
                Queueing::random()
            } else {
                Queueing::Fifo
            };
            self.gate.set_queueing(queueing).await?;
        }
        let stored = Stored::of(now.paused, &now.door);
        let c = &self.configured;
        if !stored.configured_from(c) {
            let schedule = c
                .schedule
                .for_draw(&stored.schedule, self.draw.is_some(), now_ms());
            self.gate
                .set_door(&states::change(c.state, &schedule, c, true))
                .await?;
            tracing::info!(room = %self.name, state = c.state.name(), "the room's state and schedule are the ones its config names");
        } else if stored.state != c.state || stored.schedule.as_configured() != c.schedule {
            tracing::info!(room = %self.name, state = stored.state.name(), configured = c.state.name(), "the room keeps the state and schedule set at runtime or already run (the config's are unchanged since they were applied)");
        }
        // The view as the store has it before the first visitor comes (a
        // schedule or state set at runtime, a draw under way), not the
        // config's until the watch's first read.
        self.view.read(&self.gate, now_ms()).await?;
        Ok(())
    }

    /// The room's state and schedule as the store has them now.
    async fn stored(&self) -> tollgate::Result<Stored> {
        let s = bounded(self.store_timeout, self.gate.stats()).await?;
        Ok(Stored::of(s.paused, &s.door))
    }

    /// Moves the room into `state` on every server, its schedule kept: the
    /// gate's door and pause in one step, and for sold out the whole line
    /// dropped in it (every waiter is told on their next request).
    /// Answers how many waiters were let go.
    pub(crate) async fn set_state(&self, state: RoomState) -> tollgate::Result<u64> {
        let schedule = self.stored().await?.schedule;
        let dropped = self
            .gate
            .set_door(&states::change(state, &schedule, &self.configured, true))
            .await?;
        if dropped > 0 {
            self.metrics.reset_dropped.increment(dropped);
        }
        tracing::info!(room = %self.name, state = state.name(), dropped, "the room's state was set");
        Ok(dropped)
    }

    /// Sets when the room opens and closes, on every server, its state
    /// kept (see states.rs: the store runs each at its time).
    pub(crate) async fn set_schedule(&self, schedule: Schedule) -> tollgate::Result<()> {
        let stored = self.stored().await?;
        let state = stored.state;
        let schedule = schedule.for_draw(&stored.schedule, self.draw.is_some(), now_ms());
        self.gate
            .set_door(&states::change(state, &schedule, &self.configured, false))
            .await?;
        tracing::info!(room = %self.name, opens_at = ?schedule.opens_at_ms.map(states::rfc3339), closes_at = ?schedule.closes_at_ms.map(states::rfc3339), "the room's schedule was set");
        Ok(())
    }

    /// The room's state as the store has it now (this server's view if the
    /// store cannot be read in time).
    pub(super) async fn stored_state(&self) -> RoomState {
        match self.stored().await {
            Ok(s) => s.state,
            Err(_) => self.state(),
        }
    }

    /// The room's state as this server last read it from the store.
    pub(crate) fn state(&self) -> RoomState {
        self.view.settings().state
    }

    fn matches(&self, host: Option<&str>, path: &str) -> bool {
        let host_ok = self.hosts.is_empty()
            || host.is_some_and(|h| {
                // Without port and trailing dot (`shop.example.` is the
                // same host to a browser and to nginx).
                let h = h
                    .rsplit_once(':')
                    .map_or(h, |(name, _)| name)
                    .trim_end_matches('.')
                    .to_ascii_lowercase();
                self.hosts.contains(&h)
            });
        host_ok && path::under(path, &self.path_prefix)
    }
}

/// A room's arrival challenge (see challenge.rs): how to issue and check
/// one, and where the spent ones are remembered.
#[derive(Debug)]
pub(crate) struct ArrivalChallenge {
    pub(super) challenges: Challenges,
    pub(super) spent: RateLimiter,
}

/// Why a waiting visitor's ticket is gone (`Room::why_gone`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Gone {
    /// The room sold out: everyone waiting was let go.
    SoldOut,
    /// The operator reset the line.
    Reset,
    /// The visitor left (silent past the grace), or nobody can tell.
    Left,
}

/// All rooms, matched in order of their path prefixes, longest first.
#[derive(Debug, Default)]
pub(crate) struct Rooms {
    pub(super) rooms: Vec<Arc<Room>>,
}

impl Rooms {
    pub(crate) fn get(&self, name: &str) -> Option<&Arc<Room>> {
        self.rooms.iter().find(|r| r.name == name)
    }

    pub(crate) fn all(&self) -> &[Arc<Room>] {
        &self.rooms
    }

    /// Answers one request on the proxy listener.
    pub(crate) async fn handle(
        &self,
        req: Request<hyper::body::Incoming>,
        peer: SocketAddr,
    ) -> Response<Body> {
        let mut req = req;
        if req.method() == Method::CONNECT {
            return plain(StatusCode::METHOD_NOT_ALLOWED, "CONNECT is not served here");
        }
        if conn::many_hosts(req.headers()) {
            return plain(
                StatusCode::BAD_REQUEST,
                &format!("bad request: {}", conn::MANY_HOSTS),
            );
        }
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| req.uri().host())
            .map(str::to_owned);
        // One normal form, before any matching; the upstream gets it too.
        let path = match path::normalize(req.uri().path()) {
            Ok(p) => p,
            Err(e) => return plain(StatusCode::BAD_REQUEST, &format!("bad request: {e}")),
        };
        if path != req.uri().path() {
            let target = match req.uri().query() {
                Some(q) => format!("{path}?{q}"),
                None => path.clone(),
            };
            let Ok(uri) = target.parse() else {
                return plain(StatusCode::BAD_REQUEST, "bad request: the address cannot be read");
            };
            *req.uri_mut() = uri;
        }
        // Matched without ;parameters, as the servers that drop them see it.
        let matched = path::without_params(&path);
        if let Some(rest) = matched.strip_prefix(OWN_PATHS) {
            let (room, action) = rest.split_once('/').unwrap_or((rest, ""));
            return match self.get(room) {
                Some(r) => r.own(req, action).await,
                None => plain(StatusCode::NOT_FOUND, "no such waiting room"),
            };
        }
        match self.rooms.iter().find(|r| r.matches(host.as_deref(), &matched)) {
            Some(room) => room.logged_visit(req, peer, &matched).await,
            None => plain(StatusCode::NOT_FOUND, "no waiting room serves this address"),
        }
    }
}
