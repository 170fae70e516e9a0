//! Waiting rooms: a reverse proxy that admits at most N active visitors to
//! an unchanged upstream, queues the rest FIFO on a Gate, and shows them a
//! live page. See docs/ROOMS.md.
//!
//! A visitor is a lease (admitted) or a ticket (in line) on the room's gate,
//! named by an HMAC-signed token in a cookie (or the `Tollgate-Token`
//! header). Admission is the gate's: never more than its capacity, handed
//! to the head of the line in the same atomic step that frees a slot.

pub(crate) mod admin;
mod counters;
mod events;
mod feeds;
mod lang;
mod page;
mod path;
mod proxy;
pub(crate) use self::proxy::ViaTls;
mod token;
mod visit;
mod watch;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::{Method, Request, Response, StatusCode};
use futures_util::future::BoxFuture;
use ipnet::IpNet;
use serde::Deserialize;
use serde_json::json;
use tollgate::{Entered, ErrorKind, Gate, GateOptions, Limit, RateLimiter, Store, TicketStatus, client_ip};

use self::counters::RoomMetrics;
use self::lang::LangSetting;
use self::page::{Kind, Pages};
use self::proxy::{Hop, Upstream};
use self::token::{Keys, Visitor};
use self::watch::{Seen, View};
use crate::api::events::Subscribers;

/// The request header (and response header) that carries a visitor's token
/// for API and mobile clients.
pub(crate) const TOKEN_HEADER: &str = "tollgate-token";
/// Response header an upstream sets to end the visitor's session at once.
pub(crate) const SESSION_HEADER: &str = "tollgate-session";
/// Request header the upstream gets: the admitted visitor's session id, to
/// end it through the admin API.
pub(crate) const VISITOR_HEADER: &str = "tollgate-visitor";
/// What a waiter asking too often is told.
const KEPT: &str = "asking too often; your place in line is kept";
/// A room that is not ready logs its store errors at warn at most this
/// often (the first at once).
const WARN_EVERY: Duration = Duration::from_secs(60);
/// Paths under this prefix are the rooms' own endpoints.
pub(crate) const OWN_PATHS: &str = "/.tollgate/";

/// `[rooms.NAME]` in the config file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RoomSettings {
    /// `http://host:port` of the site behind the room.
    pub(crate) upstream: String,
    /// Requests for these hosts (the `Host` header, without port) go to
    /// this room; empty: any host.
    #[serde(default)]
    pub(crate) hosts: Vec<String>,
    /// Requests whose path starts with this go to this room. Default `/`.
    pub(crate) path_prefix: Option<String>,
    /// Most visitors active at once.
    pub(crate) capacity: u32,
    /// At most this many new admissions a minute, whatever the free
    /// capacity (for a site that cannot tell when a visitor has left).
    pub(crate) admissions_per_minute: Option<u32>,
    /// How long an admitted visitor stays active without a request.
    /// Default 5m.
    pub(crate) session_ttl: Option<String>,
    /// How long a waiter may go without asking before losing its place.
    /// Default 30s.
    pub(crate) grace: Option<String>,
    /// HMAC keys for visitor tokens, 32+ characters each: the first signs,
    /// all verify.
    pub(crate) cookie_keys: Vec<String>,
    /// How often one waiting visitor may ask for its status, per server.
    /// Default 5/s.
    pub(crate) status_rate: Option<String>,
    /// How often one client address may arrive without a valid token
    /// (each arrival may take a place in line), per server. Default 20/s,
    /// with bursts of as many. `"off"`: no cap.
    pub(crate) arrival_rate: Option<String>,
    /// `closed` (default: a "try again" page, 503) or `open` (let
    /// visitors through) while the store is unreachable.
    pub(crate) on_store_error: Option<String>,
    /// Longest wait for the store per request. Default 500.
    pub(crate) store_timeout_ms: Option<u64>,
    /// Longest wait for the upstream's response head. Default 30000.
    pub(crate) upstream_timeout_ms: Option<u64>,
    /// An HTML file replacing the default waiting page.
    pub(crate) page: Option<std::path::PathBuf>,
    /// An HTML file replacing the "try again" page (a closed room that
    /// cannot reach its store).
    pub(crate) try_again_page: Option<std::path::PathBuf>,
    /// An HTML file replacing the 502 page (the upstream cannot be reached).
    pub(crate) upstream_down_page: Option<std::path::PathBuf>,
    /// An HTML file replacing the 504 page (the upstream did not answer in
    /// time).
    pub(crate) upstream_timeout_page: Option<std::path::PathBuf>,
    /// The built-in pages' language: `en` (default), `es`, `zh`, or `auto`
    /// (from each request's `Accept-Language`, English if none fits).
    pub(crate) lang: Option<String>,
    /// Status of the waiting page: 503 (default; crawlers do not index it)
    /// or 200.
    pub(crate) queued_status: Option<u16>,
    /// Paths (prefixes) that pass without queueing: health checks, assets.
    #[serde(default)]
    pub(crate) bypass_paths: Vec<String>,
    /// Client addresses or networks that pass without queueing.
    #[serde(default)]
    pub(crate) bypass_ips: Vec<String>,
    /// `Name: value`: requests with this header pass without queueing.
    pub(crate) bypass_header: Option<String>,
    /// Proxies in front of tollgate whose `X-Forwarded-For` is believed.
    #[serde(default)]
    pub(crate) trusted_proxies: Vec<String>,
    /// Protocols a request may upgrade to (the `Upgrade` header), lower
    /// case. Default `["websocket"]`; anything else is refused with a 400.
    pub(crate) upgrades: Option<Vec<String>>,
    /// Mark the cookie `Secure` (set when visitors reach tollgate over
    /// HTTPS through a proxy). Default false.
    pub(crate) secure_cookie: Option<bool>,
    /// Label each place in line with its arrival time, so the admin API's
    /// view of the line shows ages. Default true; false saves the label's
    /// memory in the store (about 85 bytes a visitor on Redis).
    pub(crate) line_ages: Option<bool>,
}

/// Why a request passes without queueing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bypass {
    /// A bypass path: assets and health checks, open to anyone.
    Path,
    /// A bypass address or header: the operator's own.
    Trusted,
}

/// What happens while the store cannot be asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnStoreError {
    Open,
    Closed,
}

/// One configured room.
pub(crate) struct Room {
    name: String,
    gate: Gate,
    keys: Keys,
    upstream: Upstream,
    session_ttl: Duration,
    /// Renew an active visitor's lease when its token is older than this.
    renew_every: Duration,
    status_limit: RateLimiter,
    /// Per client address, for arrivals (new places in line); per server.
    arrival_limit: Option<RateLimiter>,
    on_store_error: OnStoreError,
    store_timeout: Duration,
    pages: Arc<Pages>,
    queued_status: StatusCode,
    hosts: Vec<String>,
    path_prefix: String,
    bypass_paths: Vec<String>,
    bypass_ips: Vec<IpNet>,
    bypass_header: Option<(HeaderName, HeaderValue)>,
    trusted_proxies: Vec<IpNet>,
    upgrades: Vec<String>,
    cookie_name: String,
    secure_cookie: bool,
    line_ages: bool,
    metrics: RoomMetrics,
    /// This server's view of the gate: ended sessions, settings, epoch.
    view: Arc<View>,
    /// One write-back of lost settings at a time.
    restoring: tokio::sync::Mutex<()>,
    /// Waiting visitors' event streams on this server, per ticket.
    feeds: Arc<feeds::Feeds>,
    /// The server's event streams, against `max_event_subscribers`.
    subscribers: Arc<Subscribers>,
}

impl std::fmt::Debug for Room {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Room")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

fn duration(field: &str, text: Option<&str>, default: Duration) -> Result<Duration, String> {
    match text {
        None => Ok(default),
        Some(t) => humantime::parse_duration(t).map_err(|e| format!("{field} = {t:?}: {e}")),
    }
}

fn nets(field: &str, list: &[String]) -> Result<Vec<IpNet>, String> {
    list.iter()
        .map(|p| {
            p.parse::<IpNet>()
                .or_else(|_| p.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| format!("{field}: {p:?} is not an address or network"))
        })
        .collect()
}

/// Most admissions a minute a cap may name: one per 10 ms. For more,
/// remove the cap.
pub(crate) const MAX_ADMISSIONS_PER_MINUTE: u32 = 6_000;

/// The least interval between admissions for `per_minute` of them.
pub(crate) fn admission_interval(per_minute: u32) -> Result<Duration, String> {
    if per_minute == 0 || per_minute > MAX_ADMISSIONS_PER_MINUTE {
        return Err(format!(
            "admissions per minute must be 1 to {MAX_ADMISSIONS_PER_MINUTE} (got {per_minute}); \
             for more, remove the cap"
        ));
    }
    Ok(Duration::from_millis(60_000u64.div_ceil(u64::from(per_minute))))
}

/// A GCRA limiter of `rate` (bursts of as many) on this server's own
/// embedded store, letting requests through if it ever fails.
fn per_server_limiter(room: &str, what: &str, rate: tollgate::Rate) -> Result<RateLimiter, String> {
    let limit = Limit::gcra(rate, rate.count()).map_err(|e| e.to_string())?;
    Ok(
        RateLimiter::new(&Store::memory(), &format!("room:{room}:{what}"), limit)
            .map_err(|e| e.to_string())?
            .on_store_error(tollgate::OnStoreError::Open),
    )
}

fn check_room_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!("room name {name:?}: use 1 to 64 letters, digits, - or _"));
    }
    Ok(())
}

/// Why a room could not be set up.
#[derive(Debug)]
pub(crate) enum RoomError {
    /// A bad setting (exit 64, as any bad argument).
    Setting(String),
    /// A page template that cannot be used: unreadable, or naming a
    /// placeholder its page does not fill (exit 78).
    Page(String),
}

impl From<String> for RoomError {
    fn from(message: String) -> RoomError {
        RoomError::Setting(message)
    }
}

impl std::fmt::Display for RoomError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RoomError::Setting(m) | RoomError::Page(m) => f.write_str(m),
        }
    }
}

impl RoomError {
    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            RoomError::Setting(_) => crate::exit::USAGE,
            RoomError::Page(_) => crate::exit::CONFIG,
        }
    }
}

impl Room {
    pub(crate) fn new(
        name: &str,
        s: &RoomSettings,
        store: &Store,
        subscribers: &Arc<Subscribers>,
    ) -> Result<Room, RoomError> {
        check_room_name(name)?;
        let at = |e: String| format!("[rooms.{name}] {e}");
        let session_ttl =
            duration("session_ttl", s.session_ttl.as_deref(), Duration::from_secs(300)).map_err(at)?;
        let grace = duration("grace", s.grace.as_deref(), Duration::from_secs(30)).map_err(at)?;
        if s.capacity == 0 || s.capacity > tollgate::MAX_CAPACITY {
            return Err(at(format!("capacity must be 1 to {}", tollgate::MAX_CAPACITY)).into());
        }
        let options = GateOptions {
            ttl: session_ttl,
            heartbeat: grace,
            auto_renew: false,
            fair: true,
        };
        // The stored capacity is the room's: set from the config at start,
        // changed at runtime through the admin API.
        let gate = Gate::new(store, &format!("room:{name}"), None, options).map_err(|e| at(e.to_string()))?;
        let status_rate: tollgate::Rate = s
            .status_rate
            .as_deref()
            .unwrap_or("5/s")
            .parse()
            .map_err(|e: tollgate::Error| at(format!("status_rate: {e}")))?;
        // Per server, in memory: slowing down an anxious refresher needs no
        // agreement between servers, and it saves a store round trip on
        // every status request.
        let status_limit = per_server_limiter(name, "status", status_rate).map_err(at)?;
        // Per server too: a client without a token cannot hold more than
        // this many new places a second, whichever server it asks.
        let arrival_limit = match s.arrival_rate.as_deref().unwrap_or("20/s") {
            "off" => None,
            text => {
                let rate: tollgate::Rate = text
                    .parse()
                    .map_err(|e: tollgate::Error| at(format!("arrival_rate: {e}")))?;
                Some(per_server_limiter(name, "arrivals", rate).map_err(at)?)
            }
        };
        let on_store_error = match s.on_store_error.as_deref().unwrap_or("closed") {
            "open" => OnStoreError::Open,
            "closed" => OnStoreError::Closed,
            other => return Err(at(format!("on_store_error = {other:?}: use open or closed")).into()),
        };
        let queued_status = match s.queued_status.unwrap_or(503) {
            200 => StatusCode::OK,
            503 => StatusCode::SERVICE_UNAVAILABLE,
            other => return Err(at(format!("queued_status = {other}: use 503 or 200")).into()),
        };
        let bypass_header = match &s.bypass_header {
            None => None,
            Some(h) => {
                let (n, v) = h
                    .split_once(':')
                    .ok_or_else(|| at(format!("bypass_header = {h:?}: write it as \"Name: value\"")))?;
                let name = HeaderName::try_from(n.trim())
                    .map_err(|_| at(format!("bypass_header: bad name {n:?}")))?;
                let value = HeaderValue::try_from(v.trim())
                    .map_err(|_| at(format!("bypass_header: bad value {v:?}")))?;
                Some((name, value))
            }
        };
        let path_prefix = s.path_prefix.as_deref().unwrap_or("/");
        if !path_prefix.starts_with('/') {
            return Err(at(format!("path_prefix = {path_prefix:?} must start with /")).into());
        }
        let path_prefix = path::prefix(path_prefix).map_err(|e| at(format!("path_prefix = {e}")))?;
        let bypass_paths = s
            .bypass_paths
            .iter()
            .map(|p| path::prefix(p).map_err(|e| at(format!("bypass_paths: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let lang = LangSetting::parse(s.lang.as_deref()).map_err(at)?;
        let pages = Pages::load(lang, |kind| {
            match kind {
                Kind::Waiting => &s.page,
                Kind::TryAgain => &s.try_again_page,
                Kind::UpstreamDown => &s.upstream_down_page,
                Kind::UpstreamTimeout => &s.upstream_timeout_page,
            }
            .clone()
        })
        .map_err(|e| RoomError::Page(at(e)))?;
        let pages = Arc::new(pages);
        let admission_interval = s
            .admissions_per_minute
            .map(|n| admission_interval(n).map_err(|e| at(format!("admissions_per_minute: {e}"))))
            .transpose()?;
        Ok(Room {
            name: name.to_owned(),
            gate,
            keys: Keys::new(&s.cookie_keys).map_err(at)?,
            upstream: Upstream::new(
                &s.upstream,
                Duration::from_millis(s.upstream_timeout_ms.unwrap_or(30_000)),
                pages.clone(),
            )
            .map_err(at)?,
            session_ttl,
            renew_every: session_ttl / 4,
            status_limit,
            arrival_limit,
            on_store_error,
            store_timeout: Duration::from_millis(s.store_timeout_ms.unwrap_or(500).clamp(1, 60_000)),
            pages,
            queued_status,
            hosts: s
                .hosts
                .iter()
                .map(|h| h.trim_end_matches('.').to_ascii_lowercase())
                .collect(),
            path_prefix,
            bypass_paths,
            bypass_ips: nets("bypass_ips", &s.bypass_ips).map_err(at)?,
            bypass_header,
            trusted_proxies: nets("trusted_proxies", &s.trusted_proxies).map_err(at)?,
            upgrades: s.upgrades.as_ref().map_or_else(
                || vec!["websocket".to_owned()],
                |list| list.iter().map(|p| p.trim().to_ascii_lowercase()).collect(),
            ),
            cookie_name: format!("tollgate_{name}"),
            secure_cookie: s.secure_cookie.unwrap_or(false),
            line_ages: s.line_ages.unwrap_or(true),
            metrics: RoomMetrics::new(name),
            view: Arc::new(View::new(
                watch::Settings {
                    capacity: s.capacity,
                    paused: false,
                    admission_interval,
                },
                // A token older than renew_every is checked with the store
                // anyway: an end needs remembering only that long (and the
                // clock skew, and a margin).
                (session_ttl / 4 + watch::SKEW + Duration::from_secs(1)).min(session_ttl),
                now_ms(),
            )),
            restoring: tokio::sync::Mutex::new(()),
            feeds: Arc::default(),
            subscribers: subscribers.clone(),
        })
    }

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

    /// The operator's reset of the line: everyone waiting is dropped in
    /// one step of the store (active sessions are untouched, and whoever
    /// joins after it is not dropped); returns how many. Each dropped
    /// visitor learns it on their next request ([`Room::dropped_by_reset`]).
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
    async fn dropped_by_reset(&self, since_ms: u64) -> bool {
        let skew = watch::SKEW.as_millis() as u64;
        bounded(self.store_timeout, self.gate.stats())
            .await
            .is_ok_and(|s| {
                s.line_reset_ms
                    .is_some_and(|at| since_ms <= at.saturating_add(skew))
            })
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
    async fn restore(&self) {
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
            self.gate.pause().await?;
            self.gate.set_admission_interval(s.admission_interval).await?;
            self.gate.set_capacity(s.capacity).await
        };
        match bounded(self.store_timeout, write).await {
            Ok(()) => {
                self.metrics.restored.increment(1);
                // Not always trouble: a store also drops an idle gate.
                tracing::info!(room = %self.name, capacity = s.capacity, paused = s.paused, "the store had no settings for the room (lost, or dropped while idle); written back");
                if !s.paused {
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
    pub(crate) async fn apply_config(&self) -> tollgate::Result<()> {
        let s = self.view.settings();
        self.gate.set_capacity(s.capacity).await?;
        self.gate.set_admission_interval(s.admission_interval).await
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

/// All rooms, matched in order of their path prefixes, longest first.
#[derive(Debug, Default)]
pub(crate) struct Rooms {
    rooms: Vec<Arc<Room>>,
}

impl Rooms {
    /// The configured rooms on `store`; their visitors' event streams
    /// count in `subscribers`.
    pub(crate) fn new(
        settings: &HashMap<String, RoomSettings>,
        store: &Store,
        subscribers: &Arc<Subscribers>,
    ) -> Result<Rooms, RoomError> {
        let mut rooms = settings
            .iter()
            .map(|(name, s)| Room::new(name, s, store, subscribers).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        rooms.sort_by(|a, b| {
            b.path_prefix
                .len()
                .cmp(&a.path_prefix.len())
                .then(a.name.cmp(&b.name))
        });
        Ok(Rooms { rooms })
    }

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
        if crate::api::conn::many_hosts(req.headers()) {
            return plain(
                StatusCode::BAD_REQUEST,
                &format!("bad request: {}", crate::api::conn::MANY_HOSTS),
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

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut r = typed(format!("{text}\n"), "text/plain; charset=utf-8");
    *r.status_mut() = status;
    r
}

/// How long a visitor is told to wait before trying a closed room again.
pub(crate) const TRY_AGAIN_SECONDS: u64 = 5;

/// The answer of a room that cannot decide (its store is unreachable):
/// 503 with `Retry-After`, as JSON for API clients, else `page`.
pub(crate) fn closed(headers: &HeaderMap, page: impl FnOnce() -> Response<Body>) -> Response<Body> {
    let mut r = if wants_json(headers) {
        typed(
            tollgate::error_body(
                "store_unavailable",
                "the waiting room cannot decide right now; try again shortly",
            ),
            JSON,
        )
    } else {
        page()
    };
    *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(TRY_AGAIN_SECONDS));
    r
}

/// `closed` before the store first answered, when no room is built yet:
/// the built-in page, in English.
pub(crate) fn closed_at_start(headers: &HeaderMap) -> Response<Body> {
    closed(headers, || {
        let pages = page::Pages::load(lang::LangSetting::Fixed(lang::Lang::En), |_| None)
            .unwrap_or_else(|_| unreachable!("the built-in pages need no file"));
        typed(pages.try_again("", lang::Lang::En, TRY_AGAIN_SECONDS), HTML)
    })
}

const JSON: &str = "application/json";
const HTML: &str = "text/html; charset=utf-8";

/// A response of `body`, of type `content_type`.
fn typed(body: impl Into<Body>, content_type: &'static str) -> Response<Body> {
    let mut r = Response::new(body.into());
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn wants_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/json"))
}

/// A store call bounded by the room's timeout; a timeout is `Unavailable`.
async fn bounded<T>(
    timeout: Duration,
    f: impl std::future::Future<Output = tollgate::Result<T>>,
) -> tollgate::Result<T> {
    match tokio::time::timeout(timeout, f).await {
        Ok(r) => r,
        Err(_) => Err(tollgate::Error::unavailable(format!(
            "the store did not answer within {timeout:?}"
        ))),
    }
}

/// A ticket's status, [`bounded`]. A ticket an admin took out of the
/// line is gone for a room like any ticket that left it: its visitor
/// arrives anew.
async fn ticket_status(
    timeout: Duration,
    f: impl std::future::Future<Output = tollgate::Result<tollgate::TicketStatus>>,
) -> tollgate::Result<tollgate::TicketStatus> {
    match bounded(timeout, f).await {
        Err(e) if e.is_removed() => Ok(tollgate::TicketStatus::Gone),
        other => other,
    }
}

fn is_store_error(e: &tollgate::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Unavailable | ErrorKind::Store | ErrorKind::Misconfigured
    )
}

/// A visitor's place, as shown on the page and in JSON.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Shown {
    position: u64,
    waiting: u64,
    /// The estimate as a range: from the line's measured pace, widened
    /// because the pace is irregular; `None` before there is data.
    eta: Option<(Duration, Duration)>,
}

impl Shown {
    fn of(place: &tollgate::Place) -> Shown {
        Shown {
            position: place.position,
            waiting: place.waiting,
            eta: place.eta.map(|e| (e.mul_f64(0.75), e.mul_f64(1.5))),
        }
    }

    fn json(&self) -> serde_json::Value {
        let (low, high) = match self.eta {
            Some((l, h)) => (Some(l.as_millis() as u64), Some(h.as_millis() as u64)),
            None => (None, None),
        };
        json!({"status": "queued", "position": self.position, "waiting": self.waiting,
               "eta_low_ms": low, "eta_high_ms": high})
    }
}
