//! What a queue's callers hand in and get back: push options, a claimed
//! job, the outcomes of nack and cancel, dead and completed jobs, a
//! queue's figures, the limits; and the checks of ids and sizes the
//! queue facades share.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::error::{Error, ErrorKind, Result};

/// The largest payload a queue accepts by default (1 MiB).
pub const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;
/// The longest job id, in bytes.
pub const MAX_JOB_ID_LEN: usize = 128;
/// The longest group key, in bytes.
pub const MAX_GROUP_LEN: usize = 128;
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
    /// The job's group (a tenant, a customer): groups take turns at
    /// claim, and each may have its own concurrency and rate
    /// (`JobQueue::set_limits`). `None`: the default group. 1 to
    /// [`MAX_GROUP_LEN`] bytes, no whitespace or control characters.
    pub group: Option<String>,
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
            group: None,
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
    /// Its group, unless the default.
    pub group: Option<String>,
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
    /// ([`JobQueue::nack_with_error`](crate::JobQueue::nack_with_error)); `None` if none was given, or it
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
    /// Paused ([`JobQueue::pause`](crate::JobQueue::pause)): it takes pushes, hands out no jobs.
    pub paused: bool,
    /// Groups with ready or running jobs (0 on a queue that never had a
    /// group or a limit), and how many of them a limit holds back now.
    pub groups: u64,
    pub groups_held: u64,
    /// Claims that got fewer jobs than they asked for while jobs were
    /// ready: a limit held them back.
    pub limited_claims: u64,
}

impl QueueStats {
    /// No job held and none ever pushed: how the stats of a queue that
    /// never existed read (so they may be those of a queue that did: [`JobQueue::exists`](crate::JobQueue::exists)
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
pub(crate) fn truncated(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A completed job kept after its ack (see [`JobQueue::keep_completed`](crate::JobQueue::keep_completed)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletedJob {
    pub id: String,
    pub acked: SystemTime,
    pub payload: Vec<u8>,
}

pub(crate) fn to_time(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

pub(crate) fn ms_of(d: Duration, what: &str) -> Result<u64> {
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

/// Checks a group key: 1 to [`MAX_GROUP_LEN`] bytes, no whitespace or
/// control characters.
pub(crate) fn check_group(group: &str) -> Result<()> {
    if group.is_empty() || group.len() > MAX_GROUP_LEN {
        return Err(Error::invalid(format!(
            "a group key must be 1 to {MAX_GROUP_LEN} bytes"
        )));
    }
    if let Some(bad) = group.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::invalid(format!(
            "group key contains {bad:?}; whitespace and control characters are not allowed"
        )));
    }
    Ok(())
}

/// Checks an ack-and-claim's counts: at most [`MAX_BATCH`] deliveries and
/// as many jobs (0 claims none).
pub(crate) fn check_settle(done: usize, max: usize) -> Result<()> {
    if done > MAX_BATCH || max > MAX_BATCH {
        return Err(Error::invalid(format!(
            "a claim or ack covers at most {MAX_BATCH} jobs"
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

pub(crate) fn lost(what: &str) -> Error {
    Error::new(
        ErrorKind::LeaseLost,
        format!("{what}: this delivery's lease ended (the job was delivered again, acked, or cancelled)"),
    )
}
