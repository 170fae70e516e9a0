//! Every metric family `/metrics` can show: its type, labels and meaning,
//! in one table. The recorder gets each meaning as `# HELP`; docs/METRICS.md
//! holds the same table (a test compares them), and the metrics test fails
//! on a family scraped that is not here.

/// A family's Prometheus type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
    Histogram,
}

#[cfg(test)]
impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One family: name, type, labels (comma-separated, "" for none), meaning.
#[derive(Debug)]
pub(crate) struct Family {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    /// Read by the docs test only.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) labels: &'static str,
    pub(crate) help: &'static str,
}

const fn family(name: &'static str, kind: Kind, labels: &'static str, help: &'static str) -> Family {
    Family {
        name,
        kind,
        labels,
        help,
    }
}

use Kind::{Counter, Gauge, Histogram};

/// tollgate's own families (the `process_*` ones come from
/// metrics-process, which describes them itself). One row a family.
#[rustfmt::skip]
pub(crate) const FAMILIES: &[Family] = &[
    family( "tollgate_build_info", Gauge, "version, commit", "Always 1; the labels name the version and the git commit of this binary."),
    family( "tollgate_http_requests_total", Counter, "route, method, status", "API requests answered, by route pattern (e.g. /v1/gates/{name}/enter), method and status."),
    family( "tollgate_http_request_duration_seconds", Histogram, "route, method, status", "API request latency, 0.5 ms to 60 s buckets."),
    family( "tollgate_store_errors_total", Counter, "code", "API answers the store caused, by error code (store_unavailable, store_error, store_misconfigured, not_replicated, not_persisted, partition_conflict)."),
    family( "tollgate_store_fsync_seconds", Histogram, "", "Durable embedded store: how long each sync of its log took."),
    family( "tollgate_store_snapshot_seconds", Histogram, "", "Durable embedded store: how long each snapshot took (written, synced, renamed)."),
    family( "tollgate_store_log_bytes", Gauge, "", "Durable embedded store: bytes of its log segments on disk now."),
    family( "tollgate_store_log_written_bytes_total", Counter, "", "Durable embedded store: bytes written to its log since start."),
    family( "tollgate_store_log_records_total", Counter, "", "Durable embedded store: log records written since start."),
    family( "tollgate_store_snapshot_bytes", Gauge, "", "Durable embedded store: the size of its last snapshot (0: none since start)."),
    family( "tollgate_store_snapshots_total", Counter, "", "Durable embedded store: snapshots taken since start."),
    family( "tollgate_store_last_snapshot_timestamp_seconds", Gauge, "", "Durable embedded store: when its last snapshot finished (Unix time; 0: none since start)."),
    family( "tollgate_store_disk_failing", Gauge, "", "Durable embedded store: 1 while its disk refuses the log's writes (changes are refused with 507), else 0."),
    family( "tollgate_lost_leases_total", Counter, "gate", "Renewals that found the lease already ended."),
    family( "tollgate_tickets_refused_total", Counter, "", "Enters refused with too_many_tickets (see max_tickets_per_client)."),
    family( "tollgate_gate_capacity", Gauge, "gate", "The gate's stored capacity (0: none yet), read from the store at scrape time."),
    family("tollgate_gate_holders", Gauge, "gate", "Leases held now."),
    family("tollgate_gate_used", Gauge, "gate", "Permits in use now."),
    family( "tollgate_gate_waiting", Gauge, "gate", "Tickets in the gate's line now."),
    family( "tollgate_gate_grants_total", Counter, "gate", "Grants since the gate was created, from the store."),
    family( "tollgate_gate_expiries_total", Counter, "gate", "Leases that ended by their TTL since the gate was created, from the store."),
    family( "tollgate_queue_pushed_total", Counter, "queue", "Jobs pushed, from the store."),
    family( "tollgate_queue_claimed_total", Counter, "queue", "Jobs claimed (each delivery counts)."),
    family("tollgate_queue_acked_total", Counter, "queue", "Jobs acked."),
    family( "tollgate_queue_retried_total", Counter, "queue", "Jobs nacked and scheduled again."),
    family( "tollgate_queue_dead_lettered_total", Counter, "queue", "Jobs moved to the dead letters."),
    family( "tollgate_queue_redelivered_total", Counter, "queue", "Jobs delivered again after their lease ended."),
    family( "tollgate_queue_ready", Gauge, "queue", "Jobs due and waiting for a consumer."),
    family("tollgate_queue_delayed", Gauge, "queue", "Jobs not yet due."),
    family( "tollgate_queue_in_flight", Gauge, "queue", "Jobs claimed and not yet acked."),
    family("tollgate_queue_dead", Gauge, "queue", "Dead letters kept."),
    family( "tollgate_queue_limited_claims_total", Counter, "queue", "Claims that got fewer jobs than they asked for while jobs were ready: a limit held them back (docs/JOBS.md#fair-queues)."),
    family( "tollgate_queue_groups", Gauge, "queue", "Groups with ready or running jobs (0 on a queue that never had a group or a limit)."),
    family( "tollgate_queue_groups_held", Gauge, "queue", "Groups whose ready jobs a limit holds back now (their concurrency or rate)."),
    family( "tollgate_queue_paused", Gauge, "queue", "1 while the queue is paused (it takes pushes, hands out no jobs), else 0."),
    family( "tollgate_queue_lateness_seconds", Histogram, "queue", "How late each job became ready after its due time, every promotion since the queue was created (kept in the store, so servers sharing it agree)."),
    family( "tollgate_queue_recent_lateness_seconds", Gauge, "queue, quantile", "Lateness of the last 200 promotions: quantile 0.5, 0.99 and 1 (the most)."),
    family( "tollgate_event_subscribers", Gauge, "", "Event streams (SSE) this server serves now (see max_event_subscribers)."),
    family( "tollgate_event_subscribers_dropped_total", Counter, "reason", "Event streams this server ended because the client fell behind: reason slow_reader (its buffer of 256 events stayed full for 10 s) or lagged (its feed fell more than 4096 events behind)."),
    family( "tollgate_schedule_fired_total", Counter, "schedule", "Ticks this server fired (pushed the tick's job); each tick is fired by one server only."),
    family( "tollgate_schedule_lag_seconds", Histogram, "schedule", "From each tick this server fired to the push of its job, by the store's clock: 0 for a tick fired ahead (up to a second before it is due, the usual case), above 0 only for a tick fired late (after downtime or an overload)."),
    family( "tollgate_schedule_missed_ticks_total", Counter, "schedule", "Ticks that came due while no server fired them and that the misfire policy dropped, counted by the server that found them."),
    family( "tollgate_schedule_refused_total", Counter, "schedule", "Firings of the schedule this server saw its queue refuse (a partitioned queue, or a replaced partition layout)."),
    family( "tollgate_schedule_next_tick_timestamp_seconds", Gauge, "schedule", "The schedule's next tick, Unix seconds (0: paused, or no tick left), read from the store at scrape time."),
    family( "tollgate_schedule_last_tick_timestamp_seconds", Gauge, "schedule", "The last tick any server fired, Unix seconds (0: none yet), from the store."),
    family( "tollgate_schedule_paused", Gauge, "schedule", "1 while the schedule is paused, else 0, from the store."),
    family( "tollgate_limit_decisions_total", Counter, "limiter, outcome", "Rate-limit decisions: allowed, refused, error or failed_open / failed_closed (the store could not decide)."),
    family( "tollgate_limit_store_errors_total", Counter, "limiter", "Rate-limit decisions the store failed or did not answer within the limiter's timeout."),
    family( "tollgate_scrape_errors_total", Counter, "source", "Figures a scrape could not read from the store (source gate, room, queue or schedule): a store error, or not answered by the scrape's deadline."),
    family( "tollgate_scrape_timeouts_total", Counter, "", "Scrapes that reached their deadline before every figure was in."),
    family( "tollgate_scrape_duration_seconds", Gauge, "", "How long the last scrape spent reading the store."),
    family( "tollgate_memory_gates", Gauge, "", "Embedded store only: gates holding state now."),
    family( "tollgate_memory_queues", Gauge, "", "Embedded store only: queues holding state now."),
    family( "tollgate_memory_limit_keys", Gauge, "", "Embedded store only: rate-limit keys holding state now."),
    family( "tollgate_room_capacity", Gauge, "room", "The room's capacity, read from the store at scrape time (right across servers)."),
    family("tollgate_room_active", Gauge, "room", "Visitors admitted now."),
    family("tollgate_room_waiting", Gauge, "room", "Visitors in line now."),
    family( "tollgate_room_sessions_total", Counter, "room", "Sessions granted, from the store."),
    family( "tollgate_room_sessions_timed_out_total", Counter, "room", "Sessions that ended by their TTL, from the store."),
    family( "tollgate_room_admitted_total", Counter, "room", "Admissions on this server."),
    family( "tollgate_room_queued_total", Counter, "room", "Arrivals on this server that had to wait."),
    family( "tollgate_room_abandoned_total", Counter, "room", "Waiters who came back after losing their place."),
    family( "tollgate_room_sessions_ended_total", Counter, "room", "Sessions ended early (upstream header, API, leave)."),
    family( "tollgate_room_sessions_expired_total", Counter, "room", "Requests with a token whose lease had ended."),
    family( "tollgate_room_bypassed_total", Counter, "room", "Requests that bypassed the room (bypass paths)."),
    family( "tollgate_room_status_limited_total", Counter, "room", "Status requests refused by the per-visitor limit."),
    family( "tollgate_room_arrivals_limited_total", Counter, "room", "Arrivals refused by arrival_rate."),
    family( "tollgate_room_challenges_issued_total", Counter, "room", "Arrival challenges answered to new visitors (challenge_bits)."),
    family( "tollgate_room_challenges_passed_total", Counter, "room", "Arrivals whose challenge solution was taken."),
    family( "tollgate_room_challenges_refused_total", Counter, "room", "Challenge solutions refused: forged, expired, unsolved or replayed."),
    family( "tollgate_room_rejected_tokens_total", Counter, "room", "Requests with a bad or forged token."),
    family( "tollgate_room_store_failed_open_total", Counter, "room", "Requests let through because the store failed (on_store_error = open)."),
    family( "tollgate_room_store_failed_closed_total", Counter, "room", "Requests refused because the store failed (on_store_error = closed)."),
    family( "tollgate_room_scrape_errors_total", Counter, "room", "Scrapes that could not read the room's figures from the store."),
    family( "tollgate_room_revoked_replays_total", Counter, "room", "Requests with the token of a session that ended."),
    family( "tollgate_room_revoked_sessions", Gauge, "room", "Ended sessions this server remembers."),
    family( "tollgate_room_state_resets_total", Counter, "room", "Times this server found the room's state created anew in the store."),
    family( "tollgate_room_settings_restored_total", Counter, "room", "Times this server wrote the room's settings back into a store that had lost them."),
    family( "tollgate_room_watch_errors_total", Counter, "room", "Failed reads of the room's state (every 40 ms)."),
    family( "tollgate_room_tunnels_closed_total", Counter, "room", "Upgraded connections closed because their session ended."),
    family( "tollgate_room_line_resets_total", Counter, "room", "Resets of the line through this server's admin API."),
    family( "tollgate_room_line_reset_dropped_total", Counter, "room", "Visitors dropped from the line by those resets."),
    family( "tollgate_room_line_reset_told_total", Counter, "room", "Answers by this server telling a dropped visitor that the line was reset (a visitor asking twice counts twice)."),
    family( "tollgate_room_ready", Gauge, "room", "1 while this server's view is fresh and the store has the room's settings, else 0."),
    family( "tollgate_room_wait_seconds", Histogram, "room", "Time from joining the line to admission (0 for straight through)."),
    family( "tollgate_room_eta_error_seconds", Histogram, "room", "How far the estimate given on joining was from the actual wait."),
    family( "tollgate_room_proxied_total", Counter, "room, status", "Requests forwarded upstream, by the upstream's status class (1xx to 5xx)."),
    family( "tollgate_room_upstream_seconds", Histogram, "room", "Upstream response time."),
];

/// Gives the recorder every family's meaning (`# HELP`), and sets
/// `tollgate_build_info`.
pub(crate) fn register() {
    metrics::gauge!("tollgate_build_info", "version" => env!("CARGO_PKG_VERSION"), "commit" => env!("TOLLGATE_COMMIT"))
        .set(1.0);
    metrics_process::Collector::default().describe();
    for f in FAMILIES {
        match f.kind {
            Kind::Counter => metrics::describe_counter!(f.name, f.help),
            Kind::Gauge => metrics::describe_gauge!(f.name, f.help),
            Kind::Histogram => metrics::describe_histogram!(f.name, f.help),
        }
    }
}

/// The meaning of family `name` ("" if it is not one).
pub(crate) fn help(name: &str) -> &'static str {
    FAMILIES.iter().find(|f| f.name == name).map_or("", |f| f.help)
}

/// docs/METRICS.md's table, as it must read.
#[cfg(test)]
fn markdown_table() -> String {
    let mut t = String::from("| metric | type | labels | meaning |\n|---|---|---|---|\n");
    for f in FAMILIES {
        let labels = if f.labels.is_empty() {
            "—".to_owned()
        } else {
            f.labels
                .split(", ")
                .map(|l| format!("`{l}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        t.push_str(&format!(
            "| `{}` | {} | {labels} | {} |\n",
            f.name,
            f.kind.as_str(),
            f.help
        ));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_metrics_md_lists_every_family_as_the_code_describes_it() {
        let docs = include_str!("../../../../docs/METRICS.md");
        let table = markdown_table();
        assert!(
            docs.contains(&table),
            "docs/METRICS.md must contain this table, as it is:\n\n{table}"
        );
    }

    #[test]
    fn every_family_is_named_once() {
        let mut names: Vec<_> = FAMILIES.iter().map(|f| f.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "a family is listed twice");
    }
}
