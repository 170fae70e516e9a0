//! The contract a backend keeps for schedules.
//!
//! One method per atomic operation. The embedded store implements it on
//! its view of the schedule state (`memory.rs`), Redis on its store
//! (`redis.rs`); a backend implements it to carry the schedule.

use crate::error::Result;
use crate::name::Name;

use super::types as schedule;

pub(crate) trait ScheduleBackend {
    /// Records that schedule `name` lives with queue `q`; answers the
    /// queue it lived with before, if any.
    async fn schedule_index_set(&self, name: &str, q: &Name) -> Result<Option<String>>;

    /// The queue schedule `name` lives with, if any; reads only.
    async fn schedule_index_get(&self, name: &str) -> Result<Option<String>>;

    /// Forgets where schedule `name` lives if that is queue `q`.
    async fn schedule_index_drop(&self, name: &str, q: &Name) -> Result<bool>;

    /// The queues that have schedules.
    async fn schedule_queues(&self) -> Result<Vec<String>>;

    /// Takes `q`, found to hold no schedule, off the list of queues with
    /// schedules if no name points to it (a Redis index from before it
    /// counted them; the embedded store's never lists such a queue).
    async fn schedule_index_prune(&self, q: &Name) -> Result<bool>;

    /// Creates or changes a schedule of queue `q` (a compare on its revision).
    async fn schedule_put(&self, q: &Name, put: &schedule::Put<'_>) -> Result<schedule::PutOutcome>;

    /// The store's now and up to `limit` schedules of queue `q` due by it.
    async fn schedule_due(&self, q: &Name, limit: usize) -> Result<schedule::Due>;

    /// Fires ticks of schedules of queue `q`, each only if unchanged since
    /// read; answers the store's now and one outcome per schedule.
    async fn schedule_fire(
        &self,
        q: &Name,
        fires: &[schedule::Fire<'_>],
    ) -> Result<(u64, Vec<schedule::FireOutcome>)>;

    /// Pauses or resumes a schedule, taking back the jobs of ticks fired ahead;
    /// whether that changed it.
    async fn schedule_pause(&self, q: &Name, name: &str, pause: bool) -> Result<bool>;

    /// Deletes a schedule of queue `q`, with the jobs of ticks fired ahead;
    /// whether it was there.
    async fn schedule_delete(&self, q: &Name, name: &str) -> Result<bool>;

    /// A schedule of queue `q` as stored; reads only.
    async fn schedule_get(&self, q: &Name, name: &str) -> Result<Option<schedule::RawSchedule>>;

    /// Every schedule of queue `q`; reads only.
    async fn schedule_list(&self, q: &Name) -> Result<Vec<schedule::RawSchedule>>;

    /// Pushes one job of schedule `name` now (`rev`: only if unchanged),
    /// outside its timing.
    async fn schedule_trigger(
        &self,
        q: &Name,
        name: &str,
        rev: u64,
        job: &schedule::JobSpec,
    ) -> Result<schedule::TriggerOutcome>;
}
