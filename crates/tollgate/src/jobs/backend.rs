//! The contract a backend keeps for job queues.
//!
//! One method per atomic operation. The embedded store implements it on
//! its view of the jobs state (`memory.rs`), Redis on its store
//! (`redis.rs`); a backend implements it to carry the jobs.

use crate::error::Result;
use crate::name::Name;

use super::types as jobs;

pub(crate) trait JobBackend {
    /// The partition count in force for the sharded queue whose base name
    /// is `q`: stored with `q`, or 1 if `q` holds jobs, or none. With
    /// `store`, stores `want` in the same step if the count in force is
    /// `expect`, or there is none, or the jobs in `q` imply `want` (1).
    /// Answers the count in force afterwards (`want` if none) and whether
    /// it is stored.
    async fn job_layout(&self, q: &Name, layout: &jobs::Layout) -> Result<(u32, bool)>;

    /// Pushes a batch of jobs in one step.
    async fn job_push(&self, q: &Name, reqs: &[jobs::PushReq<'_>]) -> Result<Vec<jobs::PushOutcome>>;

    /// Closes queue `q` to pushes while it holds nothing (`close`), or
    /// opens it again, in one step. Answers whether that was done, and the
    /// ready, delayed, in-flight and dead counts.
    async fn job_retire(&self, q: &Name, close: bool) -> Result<(bool, [u64; 4])>;

    /// Acks the deliveries `claim.acks` (whether each was that
    /// delivery's), then claims up to `claim.max` jobs (none with 0), in
    /// one step.
    async fn job_claim(&self, q: &Name, claim: &jobs::Claim<'_>) -> Result<(Vec<bool>, jobs::ClaimOutcome)>;

    /// Up to `limit` kept completed jobs, most recent first; reads only.
    async fn job_done(&self, q: &Name, limit: usize) -> Result<Vec<jobs::RawDone>>;

    /// Gives a delivery back for a retry after its backoff, or to the dead
    /// letters after its last attempt.
    async fn job_nack(&self, q: &Name, nack: &jobs::Nack<'_>) -> Result<jobs::NackOutcome>;

    /// Extends a delivery's lease if it is still that delivery's; the new
    /// deadline.
    async fn job_extend(&self, q: &Name, extend: &jobs::Extend<'_>) -> Result<Option<u64>>;

    /// Removes a job that is not running.
    async fn job_cancel(&self, q: &Name, id: &str) -> Result<jobs::CancelOutcome>;

    /// Moves a waiting job to a new due time.
    async fn job_reschedule(&self, q: &Name, id: &str, when: jobs::When) -> Result<jobs::RescheduleOutcome>;

    /// Up to `limit` dead jobs, oldest first; reads only.
    async fn job_dead(&self, q: &Name, limit: usize) -> Result<Vec<jobs::RawDead>>;

    /// Job `id` of queue `q` as it stands (read only).
    async fn job_get(&self, q: &Name, id: &str, whole: bool) -> Result<Option<jobs::RawInfo>>;

    /// Up to `limit` jobs of queue `q` in `state`, from `from` (read only).
    async fn job_list(
        &self,
        q: &Name,
        state: jobs::RawState,
        from: Option<&jobs::ListFrom<'_>>,
        limit: usize,
    ) -> Result<Vec<jobs::RawInfo>>;

    /// Puts the dead job `id` (or every dead job) back in the queue; how many.
    async fn job_replay(&self, q: &Name, id: Option<&str>) -> Result<u64>;

    /// Deletes the dead job `id` (or every dead job); how many.
    async fn job_purge(&self, q: &Name, id: Option<&str>) -> Result<u64>;

    /// Whether the queue holds or ever held anything (its counters); reads
    /// only.
    async fn job_exists(&self, q: &Name) -> Result<bool>;

    /// Pauses queue `q` (`pause`: it takes pushes, claims get nothing) or
    /// resumes it, waking its sleeping consumers. Answers whether that
    /// changed it.
    async fn job_pause(&self, q: &Name, pause: bool) -> Result<bool>;

    /// The queue's counts and counters, promoting what is due first.
    async fn job_stats(&self, q: &Name) -> Result<jobs::RawStats>;

    /// Sets queue `q`'s limits (turning it fair), in one step.
    async fn job_set_limits(&self, q: &Name, limits: &jobs::RawLimits) -> Result<()>;

    /// Sets (or with `None` drops) group `group`'s own limits in queue
    /// `q`, in one step; `Err` past the most a queue keeps.
    async fn job_set_group_limits(
        &self,
        q: &Name,
        group: &str,
        limits: Option<&jobs::RawGroupLimits>,
    ) -> Result<()>;

    /// Queue `q`'s limits, and group `group`'s own if named (read only).
    async fn job_limits(
        &self,
        q: &Name,
        group: Option<&str>,
    ) -> Result<(jobs::RawLimits, Option<jobs::RawGroupLimits>)>;

    /// A page of queue `q`'s groups, most ready jobs first (read only).
    async fn job_groups(
        &self,
        q: &Name,
        from: Option<(u64, &str)>,
        limit: usize,
    ) -> Result<Vec<jobs::RawGroup>>;
}
