//! Each room's metric handles, registered once per room so the proxy's
//! hot path only increments them.

use axum::http::StatusCode;

/// Per-room metric handles.
pub(crate) struct RoomMetrics {
    pub(super) admitted: metrics::Counter,
    pub(super) queued: metrics::Counter,
    pub(super) abandoned: metrics::Counter,
    pub(super) ended_sessions: metrics::Counter,
    pub(super) expired_sessions: metrics::Counter,
    pub(super) bypassed: metrics::Counter,
    pub(super) status_limited: metrics::Counter,
    pub(super) arrivals_limited: metrics::Counter,
    /// Arrival challenges answered, solutions taken, solutions refused.
    pub(super) challenges_issued: metrics::Counter,
    pub(super) challenges_passed: metrics::Counter,
    pub(super) challenges_refused: metrics::Counter,
    pub(super) rejected_tokens: metrics::Counter,
    pub(super) failed_open: metrics::Counter,
    pub(super) failed_closed: metrics::Counter,
    pub(super) scrape_errors: metrics::Counter,
    pub(super) revoked_replays: metrics::Counter,
    pub(super) state_resets: metrics::Counter,
    pub(super) restored: metrics::Counter,
    pub(super) watch_errors: metrics::Counter,
    pub(super) tunnels_closed: metrics::Counter,
    pub(super) line_resets: metrics::Counter,
    pub(super) reset_dropped: metrics::Counter,
    pub(super) reset_told: metrics::Counter,
    pub(super) revoked: metrics::Gauge,
    pub(super) ready: metrics::Gauge,
    pub(super) wait: metrics::Histogram,
    pub(super) eta_error: metrics::Histogram,
    /// The estimates' errors again, readable (a histogram cannot be read
    /// back): the sum of their absolute values in ms, and how many, since
    /// the server started. The console charts their mean.
    pub(super) eta_errors: [std::sync::atomic::AtomicU64; 2],
    /// Proxied requests by upstream status class: 1xx to 5xx.
    proxied: [metrics::Counter; 5],
    pub(crate) upstream_seconds: metrics::Histogram,
    pub(crate) room: String,
}

impl RoomMetrics {
    /// The counter for responses of `status`'s class.
    pub(crate) fn proxied(&self, status: StatusCode) -> &metrics::Counter {
        &self.proxied[(status.as_u16() / 100).clamp(1, 5) as usize - 1]
    }

    pub(super) fn new(room: &str) -> RoomMetrics {
        let c = |name: &'static str| metrics::counter!(name, "room" => room.to_owned());
        RoomMetrics {
            admitted: c("tollgate_room_admitted_total"),
            queued: c("tollgate_room_queued_total"),
            abandoned: c("tollgate_room_abandoned_total"),
            ended_sessions: c("tollgate_room_sessions_ended_total"),
            expired_sessions: c("tollgate_room_sessions_expired_total"),
            bypassed: c("tollgate_room_bypassed_total"),
            status_limited: c("tollgate_room_status_limited_total"),
            arrivals_limited: c("tollgate_room_arrivals_limited_total"),
            challenges_issued: c("tollgate_room_challenges_issued_total"),
            challenges_passed: c("tollgate_room_challenges_passed_total"),
            challenges_refused: c("tollgate_room_challenges_refused_total"),
            rejected_tokens: c("tollgate_room_rejected_tokens_total"),
            failed_open: c("tollgate_room_store_failed_open_total"),
            failed_closed: c("tollgate_room_store_failed_closed_total"),
            scrape_errors: c("tollgate_room_scrape_errors_total"),
            revoked_replays: c("tollgate_room_revoked_replays_total"),
            state_resets: c("tollgate_room_state_resets_total"),
            restored: c("tollgate_room_settings_restored_total"),
            watch_errors: c("tollgate_room_watch_errors_total"),
            tunnels_closed: c("tollgate_room_tunnels_closed_total"),
            line_resets: c("tollgate_room_line_resets_total"),
            reset_dropped: c("tollgate_room_line_reset_dropped_total"),
            reset_told: c("tollgate_room_line_reset_told_total"),
            revoked: metrics::gauge!("tollgate_room_revoked_sessions", "room" => room.to_owned()),
            ready: metrics::gauge!("tollgate_room_ready", "room" => room.to_owned()),
            wait: metrics::histogram!("tollgate_room_wait_seconds", "room" => room.to_owned()),
            eta_error: metrics::histogram!("tollgate_room_eta_error_seconds", "room" => room.to_owned()),
            eta_errors: Default::default(),
            proxied: ["1xx", "2xx", "3xx", "4xx", "5xx"]
                .map(|class| metrics::counter!("tollgate_room_proxied_total", "room" => room.to_owned(), "status" => class)),
            upstream_seconds: metrics::histogram!("tollgate_room_upstream_seconds", "room" => room.to_owned()),
            room: room.to_owned(),
        }
    }
}
