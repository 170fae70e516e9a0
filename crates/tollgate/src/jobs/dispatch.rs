//! The job queue's operations of a [`Store`]: each one atomic step, one
//! critical section on the embedded store and one script on Redis, sent to
//! the backend the store has (the Redis arms box their futures: see
//! `store::Backend`).

use crate::error::Result;
use crate::name::Name;
use crate::store::{Backend, Listening, Store, on_backend};

use super::backend::JobBackend;
use super::events::{EventId, JobEvents};
use super::types as jobs;

impl Store {
    /// Makes sure pushes to job queue `queue` wake consumers in this
    /// process (Redis: subscribes to the queue's channel).
    pub(crate) async fn listen_jobs(&self, queue: &Name) -> Result<Option<Listening>> {
        match &self.backend {
            Backend::Memory(_) => Ok(None),
            Backend::Redis(s) => Box::pin(s.listen_jobs(queue)).await.map(Some),
        }
    }

    /// The partition count in force for the sharded queue whose base name
    /// is `q`: stored with `q`, or 1 if `q` holds jobs, or none. With
    /// `store`, stores `want` in the same step if the count in force is
    /// `expect`, or there is none, or the jobs in `q` imply `want` (1).
    /// Answers the count in force afterwards (`want` if none) and whether
    /// it is stored.
    pub(crate) async fn job_layout(&self, q: &Name, layout: &jobs::Layout) -> Result<(u32, bool)> {
        on_backend!(self, jobs, b => JobBackend::job_layout(b, q, layout))
    }

    /// Pushes a batch of jobs in one step.
    pub(crate) async fn job_push(
        &self,
        q: &Name,
        reqs: &[jobs::PushReq<'_>],
    ) -> Result<Vec<jobs::PushOutcome>> {
        on_backend!(self, jobs, b => JobBackend::job_push(b, q, reqs))
    }

    /// Closes queue `q` to pushes while it holds nothing (`close`), or
    /// opens it again, in one step. Answers whether that was done, and the
    /// ready, delayed, in-flight and dead counts.
    pub(crate) async fn job_retire(&self, q: &Name, close: bool) -> Result<(bool, [u64; 4])> {
        on_backend!(self, jobs, b => JobBackend::job_retire(b, q, close))
    }

    /// Acks the deliveries `claim.acks` (whether each was that
    /// delivery's), then claims up to `claim.max` jobs (none with 0), in
    /// one step.
    pub(crate) async fn job_claim(
        &self,
        q: &Name,
        claim: &jobs::Claim<'_>,
    ) -> Result<(Vec<bool>, jobs::ClaimOutcome)> {
        on_backend!(self, jobs, b => JobBackend::job_claim(b, q, claim))
    }

    pub(crate) async fn job_done(&self, q: &Name, limit: usize) -> Result<Vec<jobs::RawDone>> {
        on_backend!(self, jobs, b => JobBackend::job_done(b, q, limit))
    }

    pub(crate) async fn job_nack(&self, q: &Name, nack: &jobs::Nack<'_>) -> Result<jobs::NackOutcome> {
        on_backend!(self, jobs, b => JobBackend::job_nack(b, q, nack))
    }

    pub(crate) async fn job_extend(&self, q: &Name, extend: &jobs::Extend<'_>) -> Result<Option<u64>> {
        on_backend!(self, jobs, b => JobBackend::job_extend(b, q, extend))
    }

    pub(crate) async fn job_cancel(&self, q: &Name, id: &str) -> Result<jobs::CancelOutcome> {
        on_backend!(self, jobs, b => JobBackend::job_cancel(b, q, id))
    }

    pub(crate) async fn job_reschedule(
        &self,
        q: &Name,
        id: &str,
        when: jobs::When,
    ) -> Result<jobs::RescheduleOutcome> {
        on_backend!(self, jobs, b => JobBackend::job_reschedule(b, q, id, when))
    }

    pub(crate) async fn job_dead(&self, q: &Name, limit: usize) -> Result<Vec<jobs::RawDead>> {
        on_backend!(self, jobs, b => JobBackend::job_dead(b, q, limit))
    }

    /// Job `id` of queue `q` as it stands (read only).
    pub(crate) async fn job_get(&self, q: &Name, id: &str, whole: bool) -> Result<Option<jobs::RawInfo>> {
        on_backend!(self, jobs, b => JobBackend::job_get(b, q, id, whole))
    }

    /// Up to `limit` jobs of queue `q` in `state`, from `from` (read only).
    pub(crate) async fn job_list(
        &self,
        q: &Name,
        state: jobs::RawState,
        from: Option<&jobs::ListFrom<'_>>,
        limit: usize,
    ) -> Result<Vec<jobs::RawInfo>> {
        on_backend!(self, jobs, b => JobBackend::job_list(b, q, state, from, limit))
    }

    pub(crate) async fn job_replay(&self, q: &Name, id: Option<&str>) -> Result<u64> {
        on_backend!(self, jobs, b => JobBackend::job_replay(b, q, id))
    }

    pub(crate) async fn job_purge(&self, q: &Name, id: Option<&str>) -> Result<u64> {
        on_backend!(self, jobs, b => JobBackend::job_purge(b, q, id))
    }

    pub(crate) async fn job_exists(&self, q: &Name) -> Result<bool> {
        on_backend!(self, jobs, b => JobBackend::job_exists(b, q))
    }

    /// A live feed of queue `q`'s events, first replaying those the store
    /// still holds after `since` (jobs/events.rs).
    pub(crate) async fn job_events(&self, q: &Name, since: Option<EventId>) -> Result<JobEvents> {
        match &self.backend {
            Backend::Memory(s) => Ok(s.job_events.subscribe_memory(q, since)),
            Backend::Redis(s) => Box::pin(self.job_events.subscribe_redis(s, q, since)).await,
        }
    }

    /// Pauses queue `q` (`pause`: it takes pushes, claims get nothing) or
    /// resumes it, waking its sleeping consumers. Answers whether that
    /// changed it.
    pub(crate) async fn job_pause(&self, q: &Name, pause: bool) -> Result<bool> {
        on_backend!(self, jobs, b => JobBackend::job_pause(b, q, pause))
    }

    pub(crate) async fn job_stats(&self, q: &Name) -> Result<jobs::RawStats> {
        on_backend!(self, jobs, b => JobBackend::job_stats(b, q))
    }

    /// Sets queue `q`'s limits (turning it fair), in one step.
    pub(crate) async fn job_set_limits(&self, q: &Name, limits: &jobs::RawLimits) -> Result<()> {
        on_backend!(self, jobs, b => JobBackend::job_set_limits(b, q, limits))
    }

    /// Sets (or with `None` drops) group `group`'s own limits, in one step.
    pub(crate) async fn job_set_group_limits(
        &self,
        q: &Name,
        group: &str,
        limits: Option<&jobs::RawGroupLimits>,
    ) -> Result<()> {
        on_backend!(self, jobs, b => JobBackend::job_set_group_limits(b, q, group, limits))
    }

    /// Queue `q`'s limits, and group `group`'s own if named.
    pub(crate) async fn job_limits(
        &self,
        q: &Name,
        group: Option<&str>,
    ) -> Result<(jobs::RawLimits, Option<jobs::RawGroupLimits>)> {
        on_backend!(self, jobs, b => JobBackend::job_limits(b, q, group))
    }

    /// A page of queue `q`'s groups, most ready jobs first.
    pub(crate) async fn job_groups(
        &self,
        q: &Name,
        from: Option<(u64, &str)>,
        limit: usize,
    ) -> Result<Vec<jobs::RawGroup>> {
        on_backend!(self, jobs, b => JobBackend::job_groups(b, q, from, limit))
    }
}
