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
    BackoffSpec, CancelOutcome, Claim, ClaimOutcome, Extend, Keep, ListFrom, MAX_ERROR_BYTES, Nack,
    NackOutcome, PushOutcome, PushReq, RawInfo, RawJob, RawState, RescheduleOutcome, When,
};
use crate::name::{Name, new_id};
use crate::store::Store;
use crate::store::registry::Kind;

use super::events::{EventId, JobEvents};

/// The largest payload a queue accepts by default (1 MiB).
pub const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;
/// The longest job id, in bytes.
pub const MAX_JOB_ID_LEN: usize = 128;
/// Upper bounds, in ms, of the buckets of [`QueueStats::lateness_buckets`].
pub const LATENESS_BOUNDS_MS: [u64; 13] = crate::jobs::types::LATENESS_BOUNDS_MS;
/// The most jobs one batch call pushes, claims or acks.
pub const MAX_BATCH: usize = 1000;
/// The most payload bytes one `push_many` carries.
pub const MAX_BATCH_BYTES: usize = 64 * 1024 * 1024;
/// The longest delay or lease: 365 days.
pub const MAX_JOB_DELAY: Duration = Duration::from_secs(365 * 24 * 3600);

/// How a job waits before its next attempt after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backoff {
    /// Always the same wait.
    Fixed(Duration),
    /// `base × 2^(attempt−1)`, at most `max`, times a random factor in
    /// [0.5, 1) so that jobs that failed together do not retry together.
    Exponential { base: Duration, max: Duration },
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::Exponential {
            base: Duration::from_secs(1),
            max: Duration::from_secs(300),
        }
    }
}

/// What a push does when a job with the same id already exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnDuplicate {
    /// Keep the existing job untouched (dedupe).
    #[default]
    Keep,
    /// Replace a waiting job's payload, time and options (upsert). A job
    /// being run, or dead, is never replaced.
    Replace,
}

/// How to push one job. `Default` is: a fresh id, due now, priority 0,
/// 5 attempts, exponential backoff from 1 s to 5 min.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushOptions {
    /// Your own id (for dedupe or upsert); a random one if `None`.
    pub id: Option<String>,
    /// Due this long after now (the store's now).
    pub delay: Option<Duration>,
    /// Due at this time (wins over `delay`).
    pub at: Option<SystemTime>,
    /// Higher runs first among due jobs; equal priorities run in push order.
    pub priority: u8,
    /// Deliveries before the job goes to the dead letters (1 to 1000).
    pub max_attempts: u32,
    pub backoff: Backoff,
    pub on_duplicate: OnDuplicate,
}

impl Default for PushOptions {
    fn default() -> Self {
        PushOptions {
            id: None,
            delay: None,
            at: None,
            priority: 0,
            max_attempts: 5,
            backoff: Backoff::default(),
            on_duplicate: OnDuplicate::Keep,
        }
    }
}

/// What a push did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushResult {
    /// A new job.
    Created,
    /// A job with this id existed and was kept (`OnDuplicate::Keep`).
    Kept,
    /// A waiting job with this id was replaced.
    Replaced,
    /// A job with this id is running or dead; it was not replaced.
    Busy,
}

/// The answer to a push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    pub id: String,
    pub result: PushResult,
    /// When the job is due (store time), for created and replaced jobs.
    pub due: Option<SystemTime>,
}

/// A claimed job. Ack, nack or extend it through its queue before its
/// lease ends; after that it is delivered again and this delivery's fence
/// is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub id: String,
    pub payload: Vec<u8>,
    /// 1 for the first delivery.
    pub attempt: u32,
    /// Grows with every delivery of every job of the queue: pass it to what
    /// the job writes to, so a redelivered job's late first run is refused.
    pub fence: u64,
    /// When the lease ends (store time).
    pub lease_until: SystemTime,
}

impl Job {
    /// The payload parsed as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.payload)
            .map_err(|e| Error::invalid(format!("the payload is not the JSON expected: {e}")))
    }
}

/// When a failed job runs again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// After the job's own backoff.
    Backoff,
    /// After this long.
    After(Duration),
}

/// What a nack did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nacked {
    /// The job runs again at this time (store time).
    RetryAt(SystemTime),
    /// That was its last attempt: it is in the dead letters.
    Dead,
}

/// What a cancel did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    /// The job was waiting; it is gone and will not run.
    Cancelled,
    /// The job is being run: not cancelled.
    Running,
    /// The job was dead; it is purged.
    Purged,
    /// No such job.
    Unknown,
}

/// A job in the dead letters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadJob {
    pub id: String,
    pub died: SystemTime,
    pub attempts: u32,
    pub payload: Vec<u8>,
    /// Why it died: the error given to the nack that made it dead
    /// ([`JobQueue::nack_with_error`]); `None` if none was given, or it
    /// died because its last lease ended.
    pub last_error: Option<String>,
}

/// A queue's counts and recent lateness.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Due, waiting for a consumer.
    pub ready: u64,
    /// Not due yet (including retries waiting out their backoff).
    pub delayed: u64,
    /// Claimed, lease running.
    pub in_flight: u64,
    /// In the dead letters now.
    pub dead: u64,
    /// Acked jobs kept (only with `keep_completed`).
    pub completed: u64,
    pub pushed: u64,
    pub claimed: u64,
    pub acked: u64,
    pub retried: u64,
    pub dead_total: u64,
    /// Leases that ended without ack (the job went back, or died).
    pub redelivered: u64,
    /// How late the last promoted delayed jobs were made claimable (up to
    /// 200, newest first).
    pub recent_lateness: Vec<Duration>,
    /// How late every promoted delayed job was made claimable, since the
    /// queue began: a count per bucket of [`LATENESS_BOUNDS_MS`], and one
    /// more for later than the last bound.
    pub lateness_buckets: Vec<u64>,
    /// The sum of those latenesses.
    pub lateness_sum: Duration,
    /// Paused ([`JobQueue::pause`]): it takes pushes, hands out no jobs.
    pub paused: bool,
}

impl QueueStats {
    /// No job held and none ever pushed: how the stats of a queue that
    /// never existed read (so they may be those of a queue that did: [`JobQueue::exists`]
    /// tells).
    pub fn is_blank(&self) -> bool {
        self.pushed == 0 && self.ready + self.delayed + self.in_flight + self.dead + self.completed == 0
    }

    /// The `q` quantile (0.0 to 1.0) of `recent_lateness`, if there are
    /// samples.
    pub fn recent_lateness_quantile(&self, q: f64) -> Option<Duration> {
        let mut v = self.recent_lateness.clone();
        v.sort_unstable();
        let i = ((v.len() as f64 - 1.0) * q.clamp(0.0, 1.0)).round() as usize;
        v.get(i).copied()
    }
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn truncated(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A named job queue over a store. Cheap to clone.
#[derive(Debug, Clone)]
pub struct JobQueue {
    store: Store,
    name: Name,
    lease: Duration,
    max_payload: usize,
    keep: Option<Keep>,
    /// Whether pushes add the name to the registry of queues (not a
    /// sharded queue's partitions: the sharded queue adds its own name).
    pub(crate) listed: bool,
}

/// A completed job kept after its ack (see [`JobQueue::keep_completed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletedJob {
    pub id: String,
    pub acked: SystemTime,
    pub payload: Vec<u8>,
}

fn to_time(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn ms_of(d: Duration, what: &str) -> Result<u64> {
    if d > MAX_JOB_DELAY {
        return Err(Error::invalid(format!("{what} of {d:?} is longer than a year")));
    }
    Ok(d.as_millis() as u64)
}

pub(crate) fn check_job_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > MAX_JOB_ID_LEN {
        return Err(Error::invalid(format!(
            "a job id must be 1 to {MAX_JOB_ID_LEN} bytes"
        )));
    }
    if let Some(bad) = id.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::invalid(format!(
            "job id contains {bad:?}; whitespace and control characters are not allowed"
        )));
    }
    Ok(())
}

pub(crate) fn check_max(max: usize) -> Result<()> {
    if max == 0 || max > MAX_BATCH {
        return Err(Error::invalid(format!("a claim takes 1 to {MAX_BATCH} jobs")));
    }
    Ok(())
}

/// How long a consumer waiting for jobs until `deadline` sleeps before it
/// claims again: until something may be due (`next_due` from now, if
/// known) or a push wakes it, and at most a second in case a wake-up was
/// lost. `None` once the deadline has passed.
pub(crate) fn sleep_until(deadline: Instant, next_due: Option<Duration>) -> Option<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return None;
    }
    Some(
        next_due
            .map_or(left, |due| due.min(left))
            .min(Duration::from_secs(1)),
    )
}

fn lost(what: &str) -> Error {
    Error::new(
        ErrorKind::LeaseLost,
        format!("{what}: this delivery's lease ended (the job was delivered again, acked, or cancelled)"),
    )
}

impl JobQueue {
    /// The queue `name` (same rules as gate names) with a 30 s lease and a
    /// 1 MiB payload limit.
    pub fn new(store: &Store, name: &str) -> Result<JobQueue> {
        Ok(JobQueue {
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
    pub fn lease(mut self, lease: Duration) -> Result<Self> {
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
    pub fn keep_completed(mut self, count: usize, max_age: Duration) -> Result<Self> {
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
    pub async fn completed(&self, limit: usize) -> Result<Vec<CompletedJob>> {
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
    pub fn max_payload(mut self, bytes: usize) -> Self {
        self.max_payload = bytes;
        self
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
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
    pub async fn push(&self, payload: impl AsRef<[u8]>, options: &PushOptions) -> Result<Pushed> {
        let mut pushed = self.push_all(&[(payload.as_ref(), options)]).await?;
        pushed
            .pop()
            .ok_or_else(|| Error::new(ErrorKind::Store, "no answer for the push"))
    }

    /// Pushes up to [`MAX_BATCH`] jobs in one atomic step (one round trip):
    /// all of them or, if any is invalid, none. Answers in the same order.
    /// Duplicate ids within the batch behave as if pushed one after another.
    pub async fn push_many<P: AsRef<[u8]>>(&self, jobs: &[(P, PushOptions)]) -> Result<Vec<Pushed>> {
        let jobs: Vec<(&[u8], &PushOptions)> = jobs.iter().map(|(p, o)| (p.as_ref(), o)).collect();
        self.push_all(&jobs).await
    }

    /// Pushes `value` as JSON.
    pub async fn push_json<T: serde::Serialize>(&self, value: &T, options: &PushOptions) -> Result<Pushed> {
        let payload =
            serde_json::to_vec(value).map_err(|e| Error::invalid(format!("not serializable: {e}")))?;
        self.push(payload, options).await
    }

    fn job(raw: RawJob) -> Job {
        Job {
            id: raw.id,
            payload: raw.payload,
            attempt: raw.attempt,
            fence: raw.fence,
            lease_until: to_time(raw.deadline_ms),
        }
    }

    /// Acks `done` (whether each was that delivery's), then claims up to
    /// `max` due jobs, in one step.
    pub(crate) async fn settle(&self, done: &[(&str, u64)], max: usize) -> Result<(Vec<bool>, ClaimOutcome)> {
        if done.len() > MAX_BATCH || max > MAX_BATCH {
            return Err(Error::invalid(format!(
                "a claim or ack covers at most {MAX_BATCH} jobs"
            )));
        }
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
            ClaimOutcome::Jobs(raw) => raw.into_iter().map(JobQueue::job).collect(),
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

    /// Claims the first due job, if any, without waiting.
    pub async fn claim(&self) -> Result<Option<Job>> {
        Ok(self.claim_many(1).await?.pop())
    }

    /// Claims up to `max` (1 to [`MAX_BATCH`]) due jobs in one step, first
    /// due first, without waiting. Each has its own lease and fence.
    pub async fn claim_many(&self, max: usize) -> Result<Vec<Job>> {
        check_max(max)?;
        Ok(JobQueue::jobs(self.settle(&[], max).await?.1))
    }

    /// Claims the first due job, waiting up to `wait` for one: until the
    /// next due time or a push, whichever is first, with a re-check at
    /// least every second in case a wake-up was lost.
    pub async fn next(&self, wait: Duration) -> Result<Option<Job>> {
        Ok(self.next_many(1, wait).await?.pop())
    }

    /// Claims up to `max` due jobs, waiting up to `wait` for at least one
    /// (as [`JobQueue::next`] does). Empty if none came in time.
    pub async fn next_many(&self, max: usize, wait: Duration) -> Result<Vec<Job>> {
        check_max(max)?;
        let _listening = self.store.listen_jobs(&self.name).await?;
        let key = crate::jobs::types::wake_key(&self.name);
        let deadline = Instant::now() + wait;
        loop {
            // Registered before the claim, so a push in between wakes us.
            let watch = self.store.watch(&key);
            let next_due = match self.settle(&[], max).await?.1 {
                ClaimOutcome::Jobs(raw) => return Ok(raw.into_iter().map(JobQueue::job).collect()),
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
    pub async fn ack(&self, id: &str, fence: u64) -> Result<()> {
        match self.settle(&[(id, fence)], 0).await?.0.as_slice() {
            [true] => Ok(()),
            _ => Err(lost("ack")),
        }
    }

    /// Acks up to [`MAX_BATCH`] deliveries `(id, fence)` in one step.
    /// Returns, in the same order, whether each was acked (`false`: that
    /// delivery's lease had ended, or it was named twice).
    pub async fn ack_many(&self, deliveries: &[(&str, u64)]) -> Result<Vec<bool>> {
        if deliveries.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self.settle(deliveries, 0).await?.0)
    }

    /// Acks job `id`'s delivery `fence` and claims the next due job in the
    /// same atomic step (one round trip for a busy consumer). Returns
    /// whether the ack happened (`false`: that delivery's lease had ended)
    /// and the next job, if one is due.
    pub async fn ack_and_claim(&self, id: &str, fence: u64) -> Result<(bool, Option<Job>)> {
        let (acked, claimed) = self.settle(&[(id, fence)], 1).await?;
        Ok((acked.first() == Some(&true), JobQueue::jobs(claimed).pop()))
    }

    /// Acks `deliveries` and claims up to `max` due jobs (0: none) in one
    /// atomic step: the batch form of [`JobQueue::ack_and_claim`].
    pub async fn ack_and_claim_many(
        &self,
        deliveries: &[(&str, u64)],
        max: usize,
    ) -> Result<(Vec<bool>, Vec<Job>)> {
        let (acked, claimed) = self.settle(deliveries, max).await?;
        Ok((acked, JobQueue::jobs(claimed)))
    }

    /// Gives job `id`'s delivery `fence` back for a retry (or to the dead
    /// letters after its last attempt).
    pub async fn nack(&self, id: &str, fence: u64, retry: Retry) -> Result<Nacked> {
        self.nack_inner(id, fence, retry, None).await
    }

    /// [`JobQueue::nack`], saying why the job failed: if this was its last
    /// attempt, `error` is kept with the dead job (its first 4 KiB, cut on
    /// a character boundary) and shown by [`JobQueue::dead`] as
    /// `last_error`.
    pub async fn nack_with_error(&self, id: &str, fence: u64, retry: Retry, error: &str) -> Result<Nacked> {
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
    pub async fn extend(&self, id: &str, fence: u64, lease: Duration) -> Result<SystemTime> {
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
    pub async fn cancel(&self, id: &str) -> Result<Cancelled> {
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
    pub async fn reschedule(&self, id: &str, delay: Duration) -> Result<Option<SystemTime>> {
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
    pub async fn dead(&self, limit: usize) -> Result<Vec<DeadJob>> {
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
    pub async fn replay(&self, id: Option<&str>) -> Result<u64> {
        if let Some(id) = id {
            check_job_id(id)?;
        }
        self.store.job_replay(&self.name, id).await
    }

    /// Deletes a dead job (or all, with `None`). Returns how many.
    pub async fn purge(&self, id: Option<&str>) -> Result<u64> {
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
    pub async fn exists(&self) -> Result<bool> {
        self.store.job_exists(&self.name).await
    }

    /// Counts and recent lateness.
    pub async fn stats(&self) -> Result<QueueStats> {
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
        })
    }

    /// Pauses the queue: it still takes pushes, and its jobs still come
    /// due, but claims get nothing (consumers waiting in
    /// [`JobQueue::next`] keep waiting) until [`JobQueue::resume`]. Jobs
    /// already claimed run on: they can be acked, nacked and extended.
    /// Answers whether it was running (false: already paused).
    pub async fn pause(&self) -> Result<bool> {
        self.store.job_pause(&self.name, true).await
    }

    /// Resumes a paused queue, waking the consumers waiting for its jobs.
    /// Answers whether it was paused (false: it was running).
    pub async fn resume(&self) -> Result<bool> {
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
    pub async fn events(&self, since: Option<EventId>) -> Result<JobEvents> {
        self.store.job_events(&self.name, since).await
    }
}

/// Where a job is, as [`JobQueue::get`] and [`JobQueue::list`] see it. A
/// cancelled job is gone: it reads as unknown (`None`), like one that never
/// was, or a completed one that was not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JobState {
    /// Due, waiting for a consumer.
    Ready,
    /// Waiting for its due time (a first run or a retry).
    Delayed,
    /// Claimed, under a lease.
    Running,
    /// In the dead letters.
    Dead,
    /// Acked and kept ([`JobQueue::keep_completed`]).
    Completed,
}

impl JobState {
    /// Every state, in the order the words are listed.
    pub const ALL: [JobState; 5] = [
        JobState::Ready,
        JobState::Delayed,
        JobState::Running,
        JobState::Dead,
        JobState::Completed,
    ];

    /// The state's word: `ready`, `delayed`, `running`, `dead`, `completed`.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Ready => "ready",
            JobState::Delayed => "delayed",
            JobState::Running => "running",
            JobState::Dead => "dead",
            JobState::Completed => "completed",
        }
    }

    fn raw(self) -> RawState {
        match self {
            JobState::Ready => RawState::Ready,
            JobState::Delayed => RawState::Delayed,
            JobState::Running => RawState::Running,
            JobState::Dead => RawState::Dead,
            JobState::Completed => RawState::Completed,
        }
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for JobState {
    type Err = Error;

    fn from_str(s: &str) -> Result<JobState> {
        JobState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "unknown job state {s:?}: use ready, delayed, running, dead or completed"
                ))
            })
    }
}

/// The most payload bytes a [`JobInfo`] carries (its `payload_preview`).
pub const JOB_PREVIEW_BYTES: usize = crate::jobs::types::PREVIEW_BYTES;

/// About the most bytes (ids, errors, payloads) one [`JobQueue::dead`] or
/// [`JobQueue::completed`] listing holds: it ends before the first job
/// whose bytes before it reach this (so at most this plus one job).
pub const JOB_LISTING_BYTES: usize = crate::jobs::types::LISTING_BYTES;

/// The most jobs one [`JobQueue::list`] page holds.
pub const MAX_JOB_LIST: usize = 1000;

/// What the store knows of one job, read in one atomic step. The store
/// does not keep when a job was pushed, so that is not here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    pub id: String,
    pub state: JobState,
    /// Deliveries so far (0 once completed: an ack forgets them).
    pub attempts: u32,
    pub max_attempts: u32,
    pub priority: u8,
    /// Running: the fence of the current delivery.
    pub fence: Option<u64>,
    /// Delayed: when it becomes due. Running: when its lease ends. Dead:
    /// when it died. Completed: when it was acked. Ready: `None`.
    pub at: Option<SystemTime>,
    /// Dead: the error of the nack that made it dead, if one was given.
    pub last_error: Option<String>,
    /// The payload's size in bytes.
    pub payload_size: u64,
    /// The payload's first [`JOB_PREVIEW_BYTES`] bytes.
    pub payload_preview: Vec<u8>,
}

impl JobInfo {
    fn of(raw: RawInfo) -> JobInfo {
        let state = match raw.state {
            RawState::Ready => JobState::Ready,
            RawState::Delayed => JobState::Delayed,
            RawState::Running => JobState::Running,
            RawState::Dead => JobState::Dead,
            RawState::Completed => JobState::Completed,
        };
        JobInfo {
            id: raw.id,
            state,
            attempts: raw.attempts,
            max_attempts: raw.max_attempts,
            priority: raw.priority,
            fence: raw.fence,
            at: (state != JobState::Ready).then(|| to_time(raw.score)),
            last_error: raw.last_error,
            payload_size: raw.payload_size,
            payload_preview: raw.preview,
        }
    }
}

/// One page of [`JobQueue::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPage {
    pub jobs: Vec<JobInfo>,
    /// Where the next page starts; `None` once this one was not full.
    pub next: Option<String>,
}

/// A listing cursor: `<score>.<id>`, the last job of a page and its score
/// in the state's order.
fn parse_cursor(cursor: &str) -> Result<ListFrom<'_>> {
    let bad = || Error::invalid(format!("bad cursor {cursor:?}: pass the `next` of a listing"));
    let (score, id) = cursor.split_once('.').ok_or_else(bad)?;
    let score = score.parse().map_err(|_| bad())?;
    check_job_id(id).map_err(|_| bad())?;
    Ok(ListFrom { score, id })
}

/// Looking jobs up: read only, nothing is moved (a delayed job past its
/// due time reads as delayed until a claim or stats promotes it).
impl JobQueue {
    /// Job `id` as it stands, or `None` if unknown (never pushed, acked
    /// without being kept, cancelled or purged). O(1) on both stores.
    pub async fn get(&self, id: &str) -> Result<Option<JobInfo>> {
        check_job_id(id)?;
        Ok(self.store.job_get(&self.name, id, false).await?.map(JobInfo::of))
    }

    /// Job `id` as [`JobQueue::get`] reads it, and its whole payload, in
    /// the same read; `None` if unknown.
    pub async fn get_with_payload(&self, id: &str) -> Result<Option<(JobInfo, Vec<u8>)>> {
        check_job_id(id)?;
        let Some(mut raw) = self.store.job_get(&self.name, id, true).await? else {
            return Ok(None);
        };
        let payload = std::mem::take(&mut raw.preview);
        raw.preview = payload[..payload.len().min(JOB_PREVIEW_BYTES)].to_vec();
        Ok(Some((JobInfo::of(raw), payload)))
    }

    /// Up to `limit` (1 to [`MAX_JOB_LIST`]) jobs in `state`, in the state's
    /// order (ready: the claim order; delayed: due time; running: lease
    /// end; dead: death; completed: ack, oldest first), from `cursor` (a
    /// page's `next`; `None`: the start). Each page is one atomic read,
    /// O(log n + limit). Under changes between pages: a job that stays in
    /// the state at the same place for the whole walk is listed exactly
    /// once; one that moves may be missed or listed twice; if the last job
    /// of a page left, the next page starts at the first job with its
    /// score or more, so jobs sharing that score may be listed again.
    pub async fn list(&self, state: JobState, cursor: Option<&str>, limit: usize) -> Result<JobPage> {
        if limit == 0 || limit > MAX_JOB_LIST {
            return Err(Error::invalid(format!(
                "a listing takes 1 to {MAX_JOB_LIST} jobs"
            )));
        }
        let from = cursor.map(parse_cursor).transpose()?;
        let rows = self
            .store
            .job_list(&self.name, state.raw(), from.as_ref(), limit)
            .await?;
        let next = (rows.len() == limit)
            .then(|| rows.last().map(|r| format!("{}.{}", r.score, r.id)))
            .flatten();
        Ok(JobPage {
            jobs: rows.into_iter().map(JobInfo::of).collect(),
            next,
        })
    }
}
