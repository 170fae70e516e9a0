//! The schedules' operations of a [`Store`]: each one atomic step, one
//! critical section on the embedded store and one script on Redis, sent to
//! the backend the store has (the Redis arms box their futures: see
//! `store::Backend`).

use crate::error::Result;
use crate::name::Name;
use crate::store::{Store, on_backend};

use super::backend::ScheduleBackend;
use super::types as schedule;

impl Store {
    /// Records that schedule `name` lives with queue `q`; answers the
    /// queue it lived with before, if any.
    pub(crate) async fn schedule_index_set(&self, name: &str, q: &Name) -> Result<Option<String>> {
        on_backend!(self, schedules, b => ScheduleBackend::schedule_index_set(b, name, q))
    }

    pub(crate) async fn schedule_index_get(&self, name: &str) -> Result<Option<String>> {
        on_backend!(self, schedules, b => ScheduleBackend::schedule_index_get(b, name))
    }

    /// Forgets where schedule `name` lives if that is queue `q`.
    pub(crate) async fn schedule_index_drop(&self, name: &str, q: &Name) -> Result<bool> {
        on_backend!(self, schedules, b => ScheduleBackend::schedule_index_drop(b, name, q))
    }

    /// The queues that have schedules.
    pub(crate) async fn schedule_queues(&self) -> Result<Vec<String>> {
        on_backend!(self, schedules, b => ScheduleBackend::schedule_queues(b, ))
    }

    /// Takes `q`, found to hold no schedule, off the list of queues with
    /// schedules if no name points to it (a Redis index from before it
    /// counted them; the embedded store's never lists such a queue).
    pub(crate) async fn schedule_index_prune(&self, q: &Name) -> Result<bool> {
        on_backend!(self, schedules, b => ScheduleBackend::schedule_index_prune(b, q))
    }

    pub(crate) async fn schedule_put(
        &self,
        q: &Name,
        put: &schedule::Put<'_>,
    ) -> Result<schedule::PutOutcome> {
        on_backend!(self, schedules, b => ScheduleBackend::schedule_put(b, q, put))
    }

    /// The store's now and up to `limit` schedules of queue `q` due by it.
    pub(crate) async fn schedule_due(&self, q: &Name, limit: usize) -> Result<schedule::Due> {
        on_backend!(self, schedules, b => ScheduleBackend::schedule_due(b, q, limit))
    }

    /// Fires ticks of schedules of queue `q`, each only if unchanged since
    /// read; answers the store's now and one outcome per schedule.
    pub(crate) async fn schedule_fire(
        &self,
        q: &Name,
        fires: &[schedule::Fire<'_>],
    ) -> Result<(u64, Vec<schedule::FireOutcome>)> {
        on_backend!(self, schedules, b => ScheduleBackend::schedule_fire(b, q, fires))
    }

    pub(crate) async fn schedule_trigger(
        &self,
        q: &Name,
        name: &str,
        rev: u64,
        job: &schedule::JobSpec,
    ) -> Result<schedule::TriggerOutcome> {
        on_backend!(self, schedules, b => ScheduleBackend::schedule_trigger(b, q, name, rev, job))
    }

    pub(crate) async fn schedule_pause(&self, q: &Name, name: &str, pause: bool) -> Result<bool> {
        on_backend!(self, schedules, b => ScheduleBackend::schedule_pause(b, q, name, pause))
    }

    pub(crate) async fn schedule_delete(&self, q: &Name, name: &str) -> Result<bool> {
        on_backend!(self, schedules, b => ScheduleBackend::schedule_delete(b, q, name))
    }

    pub(crate) async fn schedule_get(&self, q: &Name, name: &str) -> Result<Option<schedule::RawSchedule>> {
        on_backend!(self, schedules, b => ScheduleBackend::schedule_get(b, q, name))
    }

    pub(crate) async fn schedule_list(&self, q: &Name) -> Result<Vec<schedule::RawSchedule>> {
        on_backend!(self, schedules, b => ScheduleBackend::schedule_list(b, q))
    }
}
