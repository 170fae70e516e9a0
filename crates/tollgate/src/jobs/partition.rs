//! Job queues: delayed and reliable delivery. Exactly one consumer gets a
//! due job, under a visibility lease with a fencing token; a job whose
//! lease ends without an ack is delivered again; after its last attempt it
//! goes to the dead letters.
//!
//! Every operation is one atomic step in the store (one script on Redis).
//! Due jobs are promoted inside `claim` itself, in bounded batches: there
//! is no scheduler, leader or mover that can stall. A waiting consumer
//! sleeps until the next due time or a push, whichever comes first.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::error::{Error, ErrorKind, Result};
use crate::jobs::types::{
    BackoffSpec, CancelOutcome, Claim, ClaimOutcome, Extend, Keep, MAX_ERROR_BYTES, Nack, NackOutcome,
    PushOutcome, PushReq, RawJob, RescheduleOutcome, When,
};
use crate::name::{Name, new_id};
use crate::store::Store;
use crate::store::registry::Kind;

use super::events::{EventId, JobEvents};
use super::job::{
    Backoff, Cancelled, CompletedJob, DEFAULT_MAX_PAYLOAD, DeadJob, Job, MAX_BATCH, MAX_BATCH_BYTES,
    MAX_JOB_DELAY, Nacked, OnDuplicate, PushOptions, PushResult, Pushed, QueueStats, Retry, check_group,
    check_job_id, check_max, check_settle, lost, ms_of, sleep_until, to_time, truncated,
};

/// One partition of a job queue: a named queue in the store, under its
/// own hash tag. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Partition {
    pub(super) store: Store,
    pub(super) name: Name,
    lease: Duration,
    max_payload: usize,
    keep: Option<Keep>,
    /// Whether pushes add the name to the registry of queues (not a
    /// sharded queue's partitions: the sharded queue adds its own name).
    pub(crate) listed: bool,
}

impl Partition {
    /// The queue `name` (same rules as gate names) with a 30 s lease and a
    /// 1 MiB payload limit.
    pub(crate) fn new(store: &Store, name: &str) -> Result<Partition> {
        Ok(Partition {
            store: store.clone(),
            name: Name::new(name)?,
            lease: Duration::from_secs(30),
            max_payload: DEFAULT_MAX_PAYLOAD,
            keep: None,
            listed: true,
        })
    }

    /// This handle's pushes leave the registry of queues alone (a sharded
    /// queue's partition).
    pub(crate) fn unlisted(mut self) -> Self {
        self.listed = false;
        self
    }

    /// How long a claimed job is a consumer's before it is delivered again
    /// (extend it for long jobs).
    pub(crate) fn lease(mut self, lease: Duration) -> Result<Self> {
        if lease < Duration::from_millis(10) || lease > MAX_JOB_DELAY {
            return Err(Error::invalid("a lease must be 10 ms to a year"));
        }
        self.lease = lease;
        Ok(self)
    }

    /// Keeps acked jobs instead of deleting them: the last `count` (1 to
    /// 1,000,000), none for longer than `max_age`, applied as jobs are
    /// acked through this handle. A kept job still counts for dedupe: a
    /// push with its id is `Kept` (or `Busy` with `Replace`) until it goes.
    pub(crate) fn keep_completed(mut self, count: usize, max_age: Duration) -> Result<Self> {
        if count == 0 || count > 1_000_000 {
            return Err(Error::invalid("keep_completed: count must be 1 to 1000000"));
        }
        self.keep = Some(Keep {
            count: count as u64,
            ms: ms_of(max_age, "a retention")?,
        });
        Ok(self)
    }

    /// Kept completed jobs, most recent first: up to `limit` (1 to
    /// 10,000), and fewer once their bytes reach
    /// [`JOB_LISTING_BYTES`] (the first always comes): page through the
    /// rest with [`JobQueue::list`] and read one by [`JobQueue::get_with_payload`].
    pub(crate) async fn completed(&self, limit: usize) -> Result<Vec<CompletedJob>> {
        Ok(self
            .store
            .job_done(&self.name, limit.clamp(1, 10_000))
            .await?
            .into_iter()
            .map(|d| CompletedJob {
                id: d.id,
                acked: to_time(d.acked_ms),
                payload: d.payload,
            })
            .collect())
    }

    /// The largest payload accepted.
    pub(crate) fn max_payload(mut self, bytes: usize) -> Self {
        self.max_payload = bytes;
        self
    }

    /// The queue's name.
    pub(crate) fn name(&self) -> &str {
        self.name.as_str()
    }

    pub(crate) fn queue_name(&self) -> &Name {
        &self.name
    }

    /// Checks one job of a push and works out its id, due time and backoff.
    pub(crate) fn prepare(
        &self,
        payload: &[u8],
        options: &PushOptions,
    ) -> Result<(String, When, BackoffSpec)> {
        if payload.len() > self.max_payload {
            return Err(Error::invalid(format!(
                "payload of {} bytes is over this queue's limit of {}",
                payload.len(),
                self.max_payload
            )));
        }
        if options.max_attempts == 0 || options.max_attempts > 1000 {
            return Err(Error::invalid("max_attempts must be 1 to 1000"));
        }
        if let Some(group) = &options.group {
            check_group(group)?;
        }
        let backoff = match options.backoff {
            Backoff::Fixed(d) => BackoffSpec {
                kind: 'f',
                base_ms: ms_of(d, "a backoff")?,
                max_ms: ms_of(d, "a backoff")?,
            },
            Backoff::Exponential { base, max } => {
                if base.is_zero() || max < base {
                    return Err(Error::invalid("exponential backoff needs 0 < base <= max"));
                }
                BackoffSpec {
                    kind: 'e',
                    base_ms: ms_of(base, "a backoff")?.max(1),
                    max_ms: ms_of(max, "a backoff")?,
                }
            }
        };
        let when = match (options.at, options.delay) {
            (Some(at), _) => {
                // As far ahead as a delay may be (this process's clock; the
                // store's decides when it is due). A time past that would
                // also overflow the store's signed scores.
                if at
                    .duration_since(SystemTime::now())
                    .is_ok_and(|ahead| ahead > MAX_JOB_DELAY)
                {
                    return Err(Error::invalid("a run-at time more than a year ahead"));
                }
                When::At(
                    at.duration_since(UNIX_EPOCH)
                        .map_err(|_| Error::invalid("run-at time is before 1970"))?
                        .as_millis() as u64,
                )
            }
            (None, Some(d)) => When::Delay(ms_of(d, "a delay")?),
            (None, None) => When::Delay(0),
        };
        let id = match &options.id {
            Some(id) => {
                check_job_id(id)?;
                id.clone()
            }
            None => new_id(),
        };
        Ok((id, when, backoff))
    }

    /// Pushes jobs in one atomic step; nothing is pushed if any is invalid.
    async fn push_all(&self, jobs: &[(&[u8], &PushOptions)]) -> Result<Vec<Pushed>> {
        if jobs.is_empty() || jobs.len() > MAX_BATCH {
            return Err(Error::invalid(format!("a push carries 1 to {MAX_BATCH} jobs")));
        }
        if jobs.iter().map(|(p, _)| p.len()).sum::<usize>() > MAX_BATCH_BYTES {
            return Err(Error::invalid(format!(
                "the payloads of one push must total at most {MAX_BATCH_BYTES} bytes"
            )));
        }
        let prepared = jobs
            .iter()
            .map(|(payload, options)| self.prepare(payload, options))
            .collect::<Result<Vec<_>>>()?;
        let reqs: Vec<PushReq<'_>> = prepared
            .iter()
            .zip(jobs)
            .map(|((id, when, backoff), (payload, options))| PushReq {
                id,
                payload,
                when: *when,
                priority: options.priority,
                max_attempts: options.max_attempts,
                backoff: *backoff,
                replace: options.on_duplicate == OnDuplicate::Replace,
                group: options.group.as_deref().unwrap_or(""),
            })
            .collect();
        let outcomes = self.store.job_push(&self.name, &reqs).await;
        if self.listed {
            self.store
                .register_after(Kind::Queues, &self.name, &outcomes)
                .await;
        }
        let outcomes = outcomes?;
        if outcomes.len() != jobs.len() {
            return Err(Error::new(
                ErrorKind::Store,
                "the store answered for the wrong number of jobs",
            ));
        }
        Ok(prepared
            .into_iter()
            .zip(outcomes)
            .map(|((id, _, _), outcome)| {
                let (result, due) = match outcome {
                    PushOutcome::New { run_at_ms } => (PushResult::Created, Some(to_time(run_at_ms))),
                    PushOutcome::Kept => (PushResult::Kept, None),
                    PushOutcome::Replaced { run_at_ms } => (PushResult::Replaced, Some(to_time(run_at_ms))),
                    PushOutcome::Busy => (PushResult::Busy, None),
                };
                Pushed { id, result, due }
            })
            .collect())
    }

    /// Pushes a job.
    pub(crate) async fn push(&self, payload: impl AsRef<[u8]>, options: &PushOptions) -> Result<Pushed> {
        let mut pushed = self.push_all(&[(payload.as_ref(), options)]).await?;
        pushed
            .pop()
            .ok_or_else(|| Error::new(ErrorKind::Store, "no answer for the push"))
    }

    /// Pushes up to [`MAX_BATCH`] jobs in one atomic step (one round trip):
    /// all of them or, if any is invalid, none. Answers in the same order.
    /// Duplicate ids within the batch behave as if pushed one after another.
    pub(crate) async fn push_many<P: AsRef<[u8]>>(&self, jobs: &[(P, PushOptions)]) -> Result<Vec<Pushed>> {
        let jobs: Vec<(&[u8], &PushOptions)> = jobs.iter().map(|(p, o)| (p.as_ref(), o)).collect();
        self.push_all(&jobs).await
    }

    fn job(raw: RawJob) -> Job {
        Job {
            id: raw.id,
            payload: raw.payload,
            attempt: raw.attempt,
            fence: raw.fence,
            lease_until: to_time(raw.deadline_ms),
            group: raw.group,
        }
    }

    /// Acks `done` (whether each was that delivery's), then claims up to
    /// `max` due jobs, in one step.
    pub(crate) async fn settle(&self, done: &[(&str, u64)], max: usize) -> Result<(Vec<bool>, ClaimOutcome)> {
        check_settle(done.len(), max)?;
        for (id, _) in done {
            check_job_id(id)?;
        }
        let claim = Claim {
            acks: done,
            keep: self.keep,
            lease_ms: self.lease.as_millis() as u64,
            max,
        };
        let (acked, claimed) = self.store.job_claim(&self.name, &claim).await?;
        if acked.len() != done.len() {
            return Err(Error::new(
                ErrorKind::Store,
                "the store answered for the wrong number of acks",
            ));
        }
        Ok((acked, claimed))
    }

    pub(crate) fn jobs(claimed: ClaimOutcome) -> Vec<Job> {
        match claimed {
            ClaimOutcome::Jobs(raw) => raw.into_iter().map(Partition::job).collect(),
            ClaimOutcome::Empty { .. } => Vec::new(),
        }
    }

    /// Makes pushes to this queue wake consumers in this process.
    pub(crate) async fn listen(&self) -> Result<Option<crate::store::Listening>> {
        self.store.listen_jobs(&self.name).await
    }

    /// A registration for this queue's next wake-up.
    pub(crate) fn watch(&self) -> crate::store::Watch {
        self.store.watch(&crate::jobs::types::wake_key(&self.name))
    }

    /// Claims up to `max` (1 to [`MAX_BATCH`]) due jobs in one step, first
    /// due first, without waiting. Each has its own lease and fence.
    pub(crate) async fn claim_many(&self, max: usize) -> Result<Vec<Job>> {
        check_max(max)?;
        Ok(Partition::jobs(self.settle(&[], max).await?.1))
    }

    /// Claims up to `max` due jobs, waiting up to `wait` for at least one
    /// (as [`JobQueue::next`] does). Empty if none came in time.
    pub(crate) async fn next_many(&self, max: usize, wait: Duration) -> Result<Vec<Job>> {
        check_max(max)?;
        let _listening = self.store.listen_jobs(&self.name).await?;
        let key = crate::jobs::types::wake_key(&self.name);
        let deadline = Instant::now() + wait;
        loop {
            // Registered before the claim, so a push in between wakes us.
            let watch = self.store.watch(&key);
            let next_due = match self.settle(&[], max).await?.1 {
                ClaimOutcome::Jobs(raw) => return Ok(raw.into_iter().map(Partition::job).collect()),
                ClaimOutcome::Empty { next_due_ms, now_ms } => {
                    next_due_ms.map(|due| Duration::from_millis(due.saturating_sub(now_ms)))
                }
            };
            let Some(sleep) = sleep_until(deadline, next_due) else {
                return Ok(Vec::new());
            };
            watch.wait(sleep).await;
        }
    }

    /// Acknowledges job `id`'s delivery `fence`: it is done and deleted.
    /// `Err(LeaseLost)` if that delivery's lease had ended.
    pub(crate) async fn ack(&self, id: &str, fence: u64) -> Result<()> {
        match self.settle(&[(id, fence)], 0).await?.0.as_slice() {
            [true] => Ok(()),
            _ => Err(lost("ack")),
        }
    }

    /// Acks up to [`MAX_BATCH`] deliveries `(id, fence)` in one step.
    /// Returns, in the same order, whether each was acked (`false`: that
    /// delivery's lease had ended, or it was named twice).
    pub(crate) async fn ack_many(&self, deliveries: &[(&str, u64)]) -> Result<Vec<bool>> {
        if deliveries.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self.settle(deliveries, 0).await?.0)
    }

    /// Acks job `id`'s delivery `fence` and claims the next due job in the
    /// same atomic step (one round trip for a busy consumer). Returns
    /// whether the ack happened (`false`: that delivery's lease had ended)
    /// and the next job, if one is due.
    pub(crate) async fn ack_and_claim(&self, id: &str, fence: u64) -> Result<(bool, Option<Job>)> {
        let (acked, claimed) = self.settle(&[(id, fence)], 1).await?;
        Ok((acked.first() == Some(&true), Partition::jobs(claimed).pop()))
    }

    /// Acks `deliveries` and claims up to `max` due jobs (0: none) in one
    /// atomic step: the batch form of [`JobQueue::ack_and_claim`].
    pub(crate) async fn ack_and_claim_many(
        &self,
        deliveries: &[(&str, u64)],
        max: usize,
    ) -> Result<(Vec<bool>, Vec<Job>)> {
        let (acked, claimed) = self.settle(deliveries, max).await?;
        Ok((acked, Partition::jobs(claimed)))
    }

    /// Gives job `id`'s delivery `fence` back for a retry (or to the dead
    /// letters after its last attempt).
    pub(crate) async fn nack(&self, id: &str, fence: u64, retry: Retry) -> Result<Nacked> {
        self.nack_inner(id, fence, retry, None).await
    }

    /// [`JobQueue::nack`], saying why the job failed: if this was its last
    /// attempt, `error` is kept with the dead job (its first 4 KiB, cut on
    /// a character boundary) and shown by [`JobQueue::dead`] as
    /// `last_error`.
    pub(crate) async fn nack_with_error(
        &self,
        id: &str,
        fence: u64,
        retry: Retry,
        error: &str,
    ) -> Result<Nacked> {
        self.nack_inner(id, fence, retry, Some(error)).await
    }

    async fn nack_inner(&self, id: &str, fence: u64, retry: Retry, error: Option<&str>) -> Result<Nacked> {
        check_job_id(id)?;
        let delay = match retry {
            Retry::Backoff => None,
            Retry::After(d) => Some(ms_of(d, "a retry delay")?),
        };
        let nack = Nack {
            id,
            fence,
            delay_ms: delay,
            jitter: rand::random::<f64>(),
            error: error.map(|e| truncated(e, MAX_ERROR_BYTES)),
        };
        match self.store.job_nack(&self.name, &nack).await? {
            NackOutcome::Retry { run_at_ms } => Ok(Nacked::RetryAt(to_time(run_at_ms))),
            NackOutcome::Dead => Ok(Nacked::Dead),
            NackOutcome::NotHeld => Err(lost("nack")),
        }
    }

    /// Extends job `id`'s delivery `fence` to `lease` from now.
    pub(crate) async fn extend(&self, id: &str, fence: u64, lease: Duration) -> Result<SystemTime> {
        check_job_id(id)?;
        let extend = Extend {
            id,
            fence,
            lease_ms: ms_of(lease, "a lease")?,
        };
        match self.store.job_extend(&self.name, &extend).await? {
            Some(deadline) => Ok(to_time(deadline)),
            None => Err(lost("extend")),
        }
    }

    /// Cancels a waiting job (O(log n)). A running job is not cancelled.
    pub(crate) async fn cancel(&self, id: &str) -> Result<Cancelled> {
        check_job_id(id)?;
        Ok(match self.store.job_cancel(&self.name, id).await? {
            CancelOutcome::Cancelled => Cancelled::Cancelled,
            CancelOutcome::Running => Cancelled::Running,
            CancelOutcome::Purged => Cancelled::Purged,
            CancelOutcome::Unknown => Cancelled::Unknown,
        })
    }

    /// Moves a waiting job to be due `delay` from now. `Ok(None)` if it is
    /// unknown or dead; `Err(JobRunning)` if it is running.
    pub(crate) async fn reschedule(&self, id: &str, delay: Duration) -> Result<Option<SystemTime>> {
        check_job_id(id)?;
        let when = When::Delay(ms_of(delay, "a delay")?);
        match self.store.job_reschedule(&self.name, id, when).await? {
            RescheduleOutcome::Moved { run_at_ms } => Ok(Some(to_time(run_at_ms))),
            RescheduleOutcome::Running => Err(Error::new(
                ErrorKind::JobRunning,
                "the job is being run; it cannot be rescheduled",
            )),
            RescheduleOutcome::Unknown => Ok(None),
        }
    }

    /// Up to `limit` (1 to 10,000) dead jobs, oldest first, and fewer once
    /// their bytes (ids, errors, payloads) reach [`JOB_LISTING_BYTES`] (the first always
    /// comes), so a listing's memory stays bounded: page through the rest
    /// with [`JobQueue::list`] and read one by [`JobQueue::get_with_payload`].
    pub(crate) async fn dead(&self, limit: usize) -> Result<Vec<DeadJob>> {
        Ok(self
            .store
            .job_dead(&self.name, limit.clamp(1, 10_000))
            .await?
            .into_iter()
            .map(|d| DeadJob {
                id: d.id,
                died: to_time(d.died_ms),
                attempts: d.attempts,
                payload: d.payload,
                last_error: d.last_error,
            })
            .collect())
    }

    /// Makes a dead job (or all, with `None`) ready again with fresh
    /// attempts. Returns how many.
    pub(crate) async fn replay(&self, id: Option<&str>) -> Result<u64> {
        if let Some(id) = id {
            check_job_id(id)?;
        }
        self.store.job_replay(&self.name, id).await
    }

    /// Deletes a dead job (or all, with `None`). Returns how many.
    pub(crate) async fn purge(&self, id: Option<&str>) -> Result<u64> {
        if let Some(id) = id {
            check_job_id(id)?;
        }
        self.store.job_purge(&self.name, id).await
    }

    /// Whether the queue ever held anything: a push was made to it (it
    /// stays so after it is drained). Its stats and listings read the
    /// same (zeros, nothing) either way; this tells a misspelt name from
    /// an idle queue. The embedded store forgets a queue that held
    /// nothing for its idle time.
    pub(crate) async fn exists(&self) -> Result<bool> {
        self.store.job_exists(&self.name).await
    }

    /// Counts and recent lateness.
    pub(crate) async fn stats(&self) -> Result<QueueStats> {
        let s = self.store.job_stats(&self.name).await?;
        Ok(QueueStats {
            ready: s.ready,
            delayed: s.delayed,
            in_flight: s.in_flight,
            dead: s.dead,
            completed: s.completed,
            pushed: s.pushed,
            claimed: s.claimed,
            acked: s.acked,
            retried: s.retried,
            dead_total: s.dead_total,
            redelivered: s.redelivered,
            recent_lateness: s.lateness_ms.into_iter().map(Duration::from_millis).collect(),
            lateness_buckets: s.lateness_buckets,
            lateness_sum: Duration::from_millis(s.lateness_sum_ms),
            paused: s.paused,
            groups: s.groups,
            groups_held: s.groups_held,
            limited_claims: s.limited_claims,
        })
    }

    /// Pauses the queue: it still takes pushes, and its jobs still come
    /// due, but claims get nothing (consumers waiting in
    /// [`JobQueue::next`] keep waiting) until [`JobQueue::resume`]. Jobs
    /// already claimed run on: they can be acked, nacked and extended.
    /// Answers whether it was running (false: already paused).
    pub(crate) async fn pause(&self) -> Result<bool> {
        self.store.job_pause(&self.name, true).await
    }

    /// Resumes a paused queue, waking the consumers waiting for its jobs.
    /// Answers whether it was paused (false: it was running).
    pub(crate) async fn resume(&self) -> Result<bool> {
        self.store.job_pause(&self.name, false).await
    }

    /// A live feed of this queue's events (pushed, claimed, acked, nacked,
    /// dead, expired, replayed, ...: [`JobEventKind`](crate::JobEventKind)), whoever caused them:
    /// on Redis every process and server using the queue, found also
    /// inside the steps (a lease that ran out), in the order the store
    /// made them. With `since` (an event's id), first the events the store
    /// still holds after it ([`JobEvents::gap`] says if some were lost).
    ///
    /// The store writes events only while someone watches, so a feed
    /// starts with what happens after it opened. A feed more than
    /// [`EVENTS_BUFFER`](crate::EVENTS_BUFFER) events behind ends with
    /// `Err(Lagged)`. On Redis each process reads a watched queue's
    /// stream once for all its feeds, every 100 ms (docs/JOBS.md,
    /// "Events").
    pub(crate) async fn events(&self, since: Option<EventId>) -> Result<JobEvents> {
        self.store.job_events(&self.name, since).await
    }
}
