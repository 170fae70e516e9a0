//! Fires the schedules of the store: every `tollgate serve` runs
//! [`Schedules::fire_forever`], with no leader (the store hands each tick
//! to one of them), logs what went wrong and feeds the per-schedule
//! metrics (for the schedules this server tracks: bounded like the
//! queues').

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tollgate::{FireReport, Schedules, Store};

use crate::api::{Tracked, track};

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
