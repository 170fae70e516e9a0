//! A room's configuration: `[rooms.NAME]` ([`RoomSettings`]) checked and
//! turned into a [`Room`] (or the reason it cannot be, [`RoomError`]),
//! and the rooms of a config into [`Rooms`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::http::header::{HeaderName, HeaderValue};
use ipnet::IpNet;
use serde::Deserialize;
use tollgate::{Gate, GateOptions, Limit, RateLimiter, Store};

use super::challenge::{self, Challenges};
use super::counters::RoomMetrics;
use super::draw::Draws;
use super::lang::LangSetting;
use super::page::{Kind, Pages};
use super::path;
use super::proxy::{Upstream, UpstreamError, UpstreamTls};
use super::rooms::{ArrivalChallenge, OnStoreError, Room, Rooms};
use super::states::{self, Configured, DEFAULT_PREQUEUE, RoomState, Schedule};
use super::store_call::now_ms;
use super::token::Keys;
use super::watch::{self, View};
use crate::api::streams::Subscribers;

/// `[rooms.NAME]` in the config file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RoomSettings {
    /// `http://host:port` or `https://host:port` of the site behind the
    /// room.
    pub(crate) upstream: String,
    /// PEM certificates an https:// upstream may be signed by, besides
    /// the system's roots (a private CA, a self-signed site).
    pub(crate) upstream_ca: Option<std::path::PathBuf>,
    /// A client certificate (PEM, the chain) for an https:// upstream
    /// that asks for one, with its key (PEM) in `upstream_client_key`.
    pub(crate) upstream_client_cert: Option<std::path::PathBuf>,
    pub(crate) upstream_client_key: Option<std::path::PathBuf>,
    /// Requests for these hosts (the `Host` header, without port) go to
    /// this room; empty: any host.
    #[serde(default)]
    pub(crate) hosts: Vec<String>,
    /// Requests whose path starts with this go to this room. Default `/`.
    pub(crate) path_prefix: Option<String>,
    /// Most visitors active at once.
    pub(crate) capacity: u32,
    /// `open` (default), `paused`, `closed`, `sold_out` or `passthrough`:
    /// applied at start when it differs from the state the config named
    /// at the last start (a state set at runtime survives a restart).
    pub(crate) state: Option<String>,
    /// When the room opens (RFC 3339 with an offset): nobody is admitted
    /// before; at it, the capacity is admitted from the head of the
    /// pre-queue in one step of the store.
    pub(crate) opens_at: Option<String>,
    /// The pre-queue's order at the opening: `random` (default: drawn,
    /// and the draw published so anyone can check it) or `fifo` (arrival
    /// order).
    pub(crate) order_at_open: Option<String>,
    /// How free places go to the line: `fifo` (default: its head first)
    /// or `random` (each to a visitor picked at random from everyone
    /// waiting then; no place is shown).
    pub(crate) queueing: Option<String>,
    /// How long before `opens_at` visitors may join the line (the
    /// pre-queue). Default 30m.
    pub(crate) prequeue: Option<String>,
    /// When the room closes to newcomers (RFC 3339 with an offset).
    pub(crate) closes_at: Option<String>,
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
    /// An HTML file replacing the page of a newcomer to a closed room.
    pub(crate) closed_page: Option<std::path::PathBuf>,
    /// An HTML file replacing the page of a sold-out room.
    pub(crate) sold_out_page: Option<std::path::PathBuf>,
    /// A proof of work a new visitor's browser solves before joining the
    /// line: this many leading zero bits of SHA-256 (each doubles the
    /// work; 2^bits hashes on average). 0 (default): none. At most 28.
    pub(crate) challenge_bits: Option<u8>,
    /// An HTML file replacing the page before a scheduled room's pre-queue.
    pub(crate) not_open_page: Option<std::path::PathBuf>,
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

fn duration(field: &str, text: Option<&str>, default: Duration) -> Result<Duration, String> {
    match text {
        None => Ok(default),
        Some(t) => humantime::parse_duration(t).map_err(|e| format!("{field} = {t:?}: {e}")),
    }
}

/// A room's schedule from its times (RFC 3339) and pre-queue: a
/// pre-queue needs an opening, a closing comes after the opening.
pub(crate) fn schedule_of(
    opens_at: Option<&str>,
    closes_at: Option<&str>,
    prequeue: Option<&str>,
) -> Result<Schedule, String> {
    let opens_at_ms = opens_at.map(|t| states::parse_time("opens_at", t)).transpose()?;
    let closes_at_ms = closes_at
        .map(|t| states::parse_time("closes_at", t))
        .transpose()?;
    if prequeue.is_some() && opens_at_ms.is_none() {
        return Err("prequeue needs opens_at: it is how long before the opening visitors may join".into());
    }
    let prequeue = duration("prequeue", prequeue, DEFAULT_PREQUEUE)?;
    if prequeue > Duration::from_secs(7 * 24 * 3600) {
        return Err("prequeue is at most 7 days".into());
    }
    if let (Some(o), Some(c)) = (opens_at_ms, closes_at_ms)
        && c <= o
    {
        return Err("closes_at must be after opens_at".into());
    }
    Ok(Schedule {
        opens_at_ms,
        prequeue: if opens_at_ms.is_some() {
            prequeue
        } else {
            Duration::ZERO
        },
        closes_at_ms,
        draw_ms: None,
    })
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

/// A room's arrival challenge: signed with its first cookie key, each
/// nonce spent once in the store (shared by every server).
fn arrival_challenge(
    name: &str,
    s: &RoomSettings,
    store: &Store,
    bits: u8,
) -> Result<ArrivalChallenge, String> {
    let key = s
        .cookie_keys
        .first()
        .ok_or("cookie_keys: give at least one key (the first signs, all verify)")?;
    let lifetime = challenge::LIFETIME;
    let once = tollgate::Rate::new(1, lifetime * 2).map_err(|e| e.to_string())?;
    let limit = Limit::gcra(once, 1).map_err(|e| e.to_string())?;
    let spent = RateLimiter::new(store, &format!("room:{name}:challenge"), limit)
        .map_err(|e| e.to_string())?
        .on_store_error(tollgate::OnStoreError::Open);
    Ok(ArrivalChallenge {
        challenges: Challenges::new(name, key, bits),
        spent,
    })
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
    /// A file that cannot be used (exit 78): a page template unreadable
    /// or naming a placeholder its page does not fill, an https://
    /// upstream's CA file, client certificate or key.
    File(String),
}

impl From<String> for RoomError {
    fn from(message: String) -> RoomError {
        RoomError::Setting(message)
    }
}

impl std::fmt::Display for RoomError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RoomError::Setting(m) | RoomError::File(m) => f.write_str(m),
        }
    }
}

impl RoomError {
    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            RoomError::Setting(_) => crate::exit::USAGE,
            RoomError::File(_) => crate::exit::CONFIG,
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
            max_hold: None,
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
        let challenge = match s.challenge_bits.unwrap_or(0) {
            0 => None,
            bits if bits > challenge::MAX_BITS => {
                return Err(at(format!(
                    "challenge_bits = {bits}: at most {} (each bit doubles a visitor's work), or 0 for none",
                    challenge::MAX_BITS
                ))
                .into());
            }
            bits => Some(arrival_challenge(name, s, store, bits).map_err(at)?),
        };
        let random = match s.queueing.as_deref().unwrap_or("fifo") {
            "fifo" => false,
            "random" => true,
            other => return Err(at(format!("queueing = {other:?}: use fifo or random")).into()),
        };
        let draw = match s.order_at_open.as_deref() {
            // Random queueing admits the pre-queue at random at the
            // opening too: there is no order to draw.
            Some(_) if random => {
                return Err(at(
                    "order_at_open is for rooms with queueing = \"fifo\": with queueing = \"random\" the opening's places go at random too, each to a visitor picked from everyone waiting".to_owned(),
                )
                .into());
            }
            None if random => None,
            None | Some("random") => Some(Draws::new(s.cookie_keys.first().map_or("", String::as_str))),
            Some("fifo") => None,
            Some(other) => return Err(at(format!("order_at_open = {other:?}: use random or fifo")).into()),
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
                Kind::Closed => &s.closed_page,
                Kind::SoldOut => &s.sold_out_page,
                Kind::NotOpen => &s.not_open_page,
            }
            .clone()
        })
        .map_err(|e| RoomError::File(at(e)))?;
        let pages = Arc::new(pages);
        let admission_interval = s
            .admissions_per_minute
            .map(|n| admission_interval(n).map_err(|e| at(format!("admissions_per_minute: {e}"))))
            .transpose()?;
        let configured = Configured {
            state: RoomState::parse(s.state.as_deref().unwrap_or("open"))
                .map_err(|e| at(format!("state: {e}")))?,
            schedule: schedule_of(
                s.opens_at.as_deref(),
                s.closes_at.as_deref(),
                s.prequeue.as_deref(),
            )
            .map_err(at)?,
        };
        Ok(Room {
            name: name.to_owned(),
            configured,
            gate,
            keys: Keys::new(&s.cookie_keys).map_err(at)?,
            upstream: Upstream::new(
                &s.upstream,
                &UpstreamTls {
                    ca: s.upstream_ca.clone(),
                    client_cert: s.upstream_client_cert.clone(),
                    client_key: s.upstream_client_key.clone(),
                },
                Duration::from_millis(s.upstream_timeout_ms.unwrap_or(30_000)),
                pages.clone(),
            )
            .map_err(|e| match e {
                UpstreamError::Setting(m) => RoomError::Setting(at(m)),
                UpstreamError::File(m) => RoomError::File(at(m)),
            })?,
            session_ttl,
            renew_every: session_ttl / 4,
            status_limit,
            arrival_limit,
            challenge,
            draw,
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
                    admission_interval,
                    state: configured.state,
                    schedule: configured.schedule,
                    random,
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
}
