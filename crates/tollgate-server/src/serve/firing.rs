//! Fires the schedules of the store: every `tollgate serve` runs
//! [`Schedules::fire_forever`], with no leader (the store hands each tick
//! to one of them), logs what went wrong and feeds the per-schedule
//! metrics (for the schedules this server tracks: bounded like the
//! queues'). And keeps the configured schedules (`[schedules.NAME]`) in
//! the store: one found missing (Redis lost its data) is applied again.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tollgate::{FireReport, ScheduleSpec, Schedules, Store};

use crate::api::tracked::{Tracked, track};

/// The same warning (same kind, same schedule) is logged at most once
/// this often; the ones held back are counted in the next.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Warnings remembered for [`WARN_EVERY`]; past this many, forgotten.
const WARNINGS_KEPT: usize = 10_000;

/// When each warning was last logged, and how many were held back since.
#[derive(Debug, Default)]
struct Warnings(HashMap<String, (Instant, u64)>);

impl Warnings {
    /// Whether to log warning `key` now, and how many were held back.
    fn due(&mut self, key: String) -> Option<u64> {
        if self.0.len() >= WARNINGS_KEPT {
            self.0.clear();
        }
        match self.0.get_mut(&key) {
            Some((at, held)) if at.elapsed() < WARN_EVERY => {
                *held += 1;
                None
            }
            Some((at, held)) => {
                let n = *held;
                (*at, *held) = (Instant::now(), 0);
                Some(n)
            }
            None => {
                self.0.insert(key, (Instant::now(), 0));
                Some(0)
            }
        }
    }
}

/// Starts firing the schedules of `store` until `stopping` turns true.
pub(super) fn spawn(store: &Store, tracked: Tracked, mut stopping: tokio::sync::watch::Receiver<bool>) {
    let schedules = Schedules::new(store);
    tokio::spawn(async move {
        let mut warnings = Warnings::default();
        let firing = schedules.fire_forever(|pass| observe(pass, &tracked, &mut warnings));
        tokio::select! {
            () = firing => {}
            _ = stopping.wait_for(|s| *s) => {}
        }
    });
}

/// How often each configured schedule is looked for in the store: one
/// read per configured schedule per look (they are few: a config file's).
const KEEP_EVERY: Duration = Duration::from_secs(2);

/// Until `stopping`, looks for each configured schedule every
/// [`KEEP_EVERY`] and applies again one the store no longer has (a
/// FLUSHALL, a Redis restarted without its data, a failover to an empty
/// replica; or a DELETE while the file still names it), logged at warn.
/// Only a missing one: a change made through the API (pause, a new
/// `when`) stays until the next start applies the file.
pub(super) fn keep_configured(
    store: &Store,
    configured: Vec<(String, ScheduleSpec)>,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) {
    if configured.is_empty() {
        return;
    }
    let schedules = Schedules::new(store);
    tokio::spawn(async move {
        let mut warnings = Warnings::default();
        loop {
            tokio::select! {
                () = tokio::time::sleep(KEEP_EVERY) => {}
                _ = stopping.wait_for(|s| *s) => return,
            }
            let looks = configured
                .iter()
                .map(|(name, spec)| restore(&schedules, name, spec));
            for failed in futures_util::future::join_all(looks).await.into_iter().flatten() {
                let (name, e) = failed;
                if let Some(held) = warnings.due(format!("keep {name}")) {
                    tracing::warn!(schedule = name, error = %e, held_back = held, "could not check the configured schedule in the store; retrying");
                }
            }
        }
    });
}

/// Applies configured schedule `name` again if the store lost it; the
/// name and error of a look or upsert that failed.
async fn restore<'a>(
    schedules: &Schedules,
    name: &'a str,
    spec: &ScheduleSpec,
) -> Option<(&'a str, tollgate::Error)> {
    match schedules.get(name).await {
        Ok(Some(_)) => None,
        Ok(None) => match schedules.upsert(name, spec).await {
            Ok(_) => {
                tracing::warn!(
                    schedule = name,
                    "the configured schedule was missing from the store (its data lost, or deleted while configured); applied again"
                );
                None
            }
            Err(e) => Some((name, e)),
        },
        Err(e) => Some((name, e)),
    }
}

/// One pass's report: metrics and logs.
fn observe(pass: tollgate::Result<&FireReport>, tracked: &Tracked, warnings: &mut Warnings) {
    let report = match pass {
        Ok(report) => report,
        Err(e) => {
            if let Some(held) = warnings.due("store".to_owned()) {
                tracing::warn!(error = %e, held_back = held, "could not fire schedules; retrying in 1 s");
            }
            return;
        }
    };
    for job in &report.fired {
        if track(tracked, &job.schedule) {
            let label = ("schedule", job.schedule.clone());
            metrics::counter!("tollgate_schedule_fired_total", std::slice::from_ref(&label)).increment(1);
            metrics::histogram!("tollgate_schedule_lag_seconds", &[label]).record(job.lag.as_secs_f64());
        }
        tracing::debug!(
            schedule = job.schedule,
            job = job.job_id,
            queue = job.queue,
            lag_ms = job.lag.as_millis() as u64,
            "fired"
        );
    }
    for (schedule, missed) in &report.missed {
        if track(tracked, schedule) {
            metrics::counter!("tollgate_schedule_missed_ticks_total", "schedule" => schedule.clone())
                .increment(*missed);
        }
        tracing::info!(
            schedule,
            missed,
            "ticks missed while no server fired were dropped by the misfire policy"
        );
    }
    for (schedule, e) in &report.refused {
        if track(tracked, schedule) {
            metrics::counter!("tollgate_schedule_refused_total", "schedule" => schedule.clone()).increment(1);
        }
        if let Some(held) = warnings.due(format!("refused {schedule}")) {
            tracing::warn!(schedule, error = %e, held_back = held, "the schedule's queue refused its job; the schedule moved on");
        }
    }
    for (schedule, e) in &report.unreadable {
        if let Some(held) = warnings.due(format!("unreadable {schedule}")) {
            tracing::warn!(schedule, error = %e, held_back = held, "cannot read the stored schedule; it does not fire here");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_warning_is_held_back() {
        let mut w = Warnings::default();
        assert_eq!(w.due("a".to_owned()), Some(0));
        assert_eq!(w.due("a".to_owned()), None);
        assert_eq!(w.due("b".to_owned()), Some(0));
        assert_eq!(w.due("a".to_owned()), None);
        w.0.get_mut("a").expect("a").0 -= WARN_EVERY;
        assert_eq!(w.due("a".to_owned()), Some(2));
    }
}
