//! The schedules' operations of a [`Store`]: each one atomic step, one
//! critical section on the embedded store and one script on Redis, sent to
//! the backend the store has (the Redis arms box their futures: see
//! `store::Backend`).

use crate::error::Result;
use crate::name::Name;
use crate::store::{Backend, Store};

use super::types as schedule;

impl Store {
    /// Records that schedule `name` lives with queue `q`; answers the
    /// queue it lived with before, if any.
    pub(crate) async fn schedule_index_set(&self, name: &str, q: &Name) -> Result<Option<String>> {
        match &self.backend {
            Backend::Memory(s) => s.write(|| s.schedules().schedule_index_set(name, q)).await,
            Backend::Redis(s) => Box::pin(s.schedule_index_set(name, q)).await,
        }
    }

    pub(crate) async fn schedule_index_get(&self, name: &str) -> Result<Option<String>> {
        match &self.backend {
            Backend::Memory(s) => s.read(|| s.schedules().schedule_index_get(name)).await,
            Backend::Redis(s) => Box::pin(s.schedule_index_get(name)).await,
        }
    }

    /// Forgets where schedule `name` lives if that is queue `q`.
    pub(crate) async fn schedule_index_drop(&self, name: &str, q: &Name) -> Result<bool> {
        match &self.backend {
            Backend::Memory(s) => s.write(|| s.schedules().schedule_index_drop(name, q)).await,
            Backend::Redis(s) => Box::pin(s.schedule_index_drop(name, q)).await,
        }
    }

    /// The queues that have schedules.
    pub(crate) async fn schedule_queues(&self) -> Result<Vec<String>> {
        match &self.backend {
            Backend::Memory(s) => s.read(|| s.schedules().schedule_queues()).await,
            Backend::Redis(s) => Box::pin(s.schedule_queues()).await,
        }
    }

    /// Takes `q`, found to hold no schedule, off the list of queues with
    /// schedules if no name points to it (a Redis index from before it
    /// counted them; the embedded store's never lists such a queue).
    pub(crate) async fn schedule_index_prune(&self, q: &Name) -> Result<bool> {
        match &self.backend {
            Backend::Memory(_) => Ok(false),
            Backend::Redis(s) => Box::pin(s.schedule_index_prune(q)).await,
        }
    }

    pub(crate) async fn schedule_put(
        &self,
        q: &Name,
        put: &schedule::Put<'_>,
    ) -> Result<schedule::PutOutcome> {
        match &self.backend {
            Backend::Memory(s) => s.write(|| s.schedules().schedule_put(q, put)).await,
            Backend::Redis(s) => Box::pin(s.schedule_put(q, put)).await,
        }
    }

    /// The store's now and up to `limit` schedules of queue `q` due by it.
    pub(crate) async fn schedule_due(&self, q: &Name, limit: usize) -> Result<schedule::Due> {
        match &self.backend {
            Backend::Memory(s) => s.read(|| s.schedules().schedule_due(q, limit)).await,
            Backend::Redis(s) => Box::pin(s.schedule_due(q, limit)).await,
        }
    }

    /// Fires ticks of schedules of queue `q`, each only if unchanged since
    /// read; answers the store's now and one outcome per schedule.
    pub(crate) async fn schedule_fire(
        &self,
        q: &Name,
        fires: &[schedule::Fire<'_>],
    ) -> Result<(u64, Vec<schedule::FireOutcome>)> {
        match &self.backend {
            Backend::Memory(s) => s.write(|| s.schedules().schedule_fire(q, fires)).await,
            Backend::Redis(s) => Box::pin(s.schedule_fire(q, fires)).await,
        }
    }

    pub(crate) async fn schedule_trigger(
        &self,
        q: &Name,
        name: &str,
        rev: u64,
        job: &schedule::JobSpec,
    ) -> Result<schedule::TriggerOutcome> {
        match &self.backend {
            Backend::Memory(s) => {
                s.write(|| s.schedules().schedule_trigger(q, name, rev, job))
                    .await
            }
            Backend::Redis(s) => Box::pin(s.schedule_trigger(q, name, rev, job)).await,
        }
    }

    pub(crate) async fn schedule_pause(&self, q: &Name, name: &str, pause: bool) -> Result<bool> {
        match &self.backend {
            Backend::Memory(s) => s.write(|| s.schedules().schedule_pause(q, name, pause)).await,
            Backend::Redis(s) => Box::pin(s.schedule_pause(q, name, pause)).await,
        }
    }

    pub(crate) async fn schedule_delete(&self, q: &Name, name: &str) -> Result<bool> {
        match &self.backend {
            Backend::Memory(s) => s.write(|| s.schedules().schedule_delete(q, name)).await,
            Backend::Redis(s) => Box::pin(s.schedule_delete(q, name)).await,
        }
    }

    pub(crate) async fn schedule_get(&self, q: &Name, name: &str) -> Result<Option<schedule::RawSchedule>> {
        match &self.backend {
            Backend::Memory(s) => s.read(|| s.schedules().schedule_get(q, name)).await,
            Backend::Redis(s) => Box::pin(s.schedule_get(q, name)).await,
        }
    }

    pub(crate) async fn schedule_list(&self, q: &Name) -> Result<Vec<schedule::RawSchedule>> {
        match &self.backend {
            Backend::Memory(s) => s.read(|| s.schedules().schedule_list(q)).await,
            Backend::Redis(s) => Box::pin(s.schedule_list(q)).await,
        }
    }
}
