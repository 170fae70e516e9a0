//! Job queues in the store layer: the operations' argument and answer
//! types both stores share. `memory.rs` is the reference model; `jobs.lua`
//! (driven by `redis.rs`) is the same steps on Redis, one script, the
//! operation in ARGV[1]; the conformance suite `tests/job_queue.rs`, run
//! on every store, holds one to the other.

/// When a pushed job becomes due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum When {
    /// This long after the store's now (ms).
    Delay(u64),
    /// At this store time (ms since the epoch).
    At(u64),
}

/// How a job waits between attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct BackoffSpec {
    /// `f` fixed or `e` exponential (with jitter).
    pub(crate) kind: char,
    pub(crate) base_ms: u64,
    pub(crate) max_ms: u64,
}

#[derive(Debug)]
pub(crate) struct PushReq<'a> {
    pub(crate) id: &'a str,
    pub(crate) payload: &'a [u8],
    pub(crate) when: When,
    pub(crate) priority: u8,
    pub(crate) max_attempts: u32,
    pub(crate) backoff: BackoffSpec,
    pub(crate) replace: bool,
    /// Its group: "" for the default group.
    pub(crate) group: &'a str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PushOutcome {
    New { run_at_ms: u64 },
    Kept,
    Replaced { run_at_ms: u64 },
    Busy,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawJob {
    pub(crate) id: String,
    pub(crate) payload: Vec<u8>,
    pub(crate) attempt: u32,
    pub(crate) fence: u64,
    pub(crate) deadline_ms: u64,
    /// Its group, unless the default.
    pub(crate) group: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ClaimOutcome {
    /// At least one job.
    Jobs(Vec<RawJob>),
    /// Nothing claimable; when something may be (store ms), if known, and
    /// the store's now (so the consumer can sleep exactly until then).
    Empty { next_due_ms: Option<u64>, now_ms: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NackOutcome {
    Retry { run_at_ms: u64 },
    Dead,
    NotHeld,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CancelOutcome {
    Cancelled,
    Running,
    Purged,
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RescheduleOutcome {
    Moved { run_at_ms: u64 },
    Running,
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawDead {
    pub(crate) id: String,
    pub(crate) died_ms: u64,
    pub(crate) attempts: u32,
    pub(crate) payload: Vec<u8>,
    /// The error its last nack gave, if that nack made it dead.
    pub(crate) last_error: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct RawStats {
    pub(crate) ready: u64,
    pub(crate) delayed: u64,
    pub(crate) in_flight: u64,
    pub(crate) dead: u64,
    pub(crate) pushed: u64,
    pub(crate) claimed: u64,
    pub(crate) acked: u64,
    pub(crate) retried: u64,
    pub(crate) dead_total: u64,
    pub(crate) redelivered: u64,
    /// Completed jobs kept after their ack.
    pub(crate) completed: u64,
    /// Every promotion's lateness: the sum (ms) and a count per bucket of
    /// LATENESS_BOUNDS_MS, plus one for later than the last bound.
    pub(crate) lateness_sum_ms: u64,
    pub(crate) lateness_buckets: Vec<u64>,
    pub(crate) lateness_ms: Vec<u64>,
    /// Paused: takes pushes, hands out no jobs.
    pub(crate) paused: bool,
    /// Groups with ready or running jobs (0 on a plain queue), and how
    /// many of them a limit holds back; claims that got fewer jobs than
    /// asked while jobs were ready. (Kept with the groups, not here: a
    /// snapshot holds these stats as they were before groups.)
    #[serde(skip)]
    pub(crate) groups: u64,
    #[serde(skip)]
    pub(crate) groups_held: u64,
    #[serde(skip)]
    pub(crate) limited_claims: u64,
}

/// A completed job kept after its ack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawDone {
    pub(crate) id: String,
    pub(crate) acked_ms: u64,
    pub(crate) payload: Vec<u8>,
}

/// How many acked jobs to keep, and for how long (ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Keep {
    pub(crate) count: u64,
    pub(crate) ms: u64,
}

/// One `job_layout` call on the base queue of a sharded queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Layout {
    /// The partition count this handle has.
    pub(crate) want: u32,
    /// Store `want` over this count in force (a repartition's old one).
    pub(crate) expect: Option<u32>,
    /// Store `want` if allowed; without it the call only reads.
    pub(crate) store: bool,
}

/// One `job_claim` call: acks, then claims.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Claim<'a> {
    /// Deliveries `(id, fence)` to ack first.
    pub(crate) acks: &'a [(&'a str, u64)],
    /// Keep the acked jobs as completed, if set.
    pub(crate) keep: Option<Keep>,
    /// The lease each claimed job gets (ms).
    pub(crate) lease_ms: u64,
    /// The most jobs to claim (0: none, only the acks).
    pub(crate) max: usize,
}

/// One `job_nack` call: gives a delivery back for a retry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Nack<'a> {
    pub(crate) id: &'a str,
    pub(crate) fence: u64,
    /// Retry after this long (ms); `None`: after the job's own backoff.
    pub(crate) delay_ms: Option<u64>,
    /// A random number in [0, 1) for the exponential backoff's jitter.
    pub(crate) jitter: f64,
    /// Why it failed (at most MAX_ERROR_BYTES): kept with the job if this
    /// nack makes it dead.
    pub(crate) error: Option<&'a str>,
}

/// The longest error text kept with a dead job.
pub(crate) const MAX_ERROR_BYTES: usize = 4096;

/// One `job_extend` call: a delivery's lease set to `lease_ms` from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Extend<'a> {
    pub(crate) id: &'a str,
    pub(crate) fence: u64,
    pub(crate) lease_ms: u64,
}

/// Upper bounds (ms) of the lateness histogram's buckets (as in jobs.lua).
pub(crate) const LATENESS_BOUNDS_MS: [u64; 13] =
    [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000];

/// The wake-up key of job queue `queue`: pushes announce on it, in this
/// process (memory) and through the queue's channel (Redis).
pub(crate) fn wake_key(queue: &crate::name::Name) -> String {
    format!("job-queue/{}", queue.as_str())
}

/// A job's state, as `job_get` and `job_list` see it (jobs.lua: the
/// sorted set that holds it: r, w, f, x, c).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RawState {
    Ready,
    Delayed,
    Running,
    Dead,
    Completed,
}

/// The most payload bytes a lookup answers (the rest is only counted).
pub(crate) const PREVIEW_BYTES: usize = 256;

/// The bytes a listing of dead or completed jobs reads, about (its
/// jobs' ids, errors and payloads): it stops before the first job whose
/// bytes before it reach this (the first job always comes), so one
/// listing holds at most this plus one job, whatever its `limit`
/// (jobs.lua's `listed` does the same).
pub(crate) const LISTING_BYTES: usize = 2 * 1024 * 1024;

/// `rows` cut as [`LISTING_BYTES`] says, `size` giving a row's bytes
/// (id, error, payload).
pub(crate) fn within_listing_bytes<T>(
    rows: impl IntoIterator<Item = T>,
    size: impl Fn(&T) -> usize,
) -> Vec<T> {
    let mut bytes = 0;
    rows.into_iter()
        .take_while(|row| {
            let more = bytes < LISTING_BYTES;
            bytes += size(row);
            more
        })
        .collect()
}

/// What the store knows of one job (`job_get`, a row of `job_list`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawInfo {
    pub(crate) id: String,
    pub(crate) state: RawState,
    /// The job's score in its state's sorted set, whole (ready:
    /// (255 - prio) * 2^44 + seq; otherwise a store time in ms): the
    /// listing's cursor.
    pub(crate) score: u64,
    pub(crate) priority: u8,
    pub(crate) max_attempts: u32,
    pub(crate) attempts: u32,
    /// Running: the fence of the current delivery.
    pub(crate) fence: Option<u64>,
    pub(crate) last_error: Option<String>,
    pub(crate) payload_size: u64,
    /// The payload's first PREVIEW_BYTES bytes.
    pub(crate) preview: Vec<u8>,
    /// Its group, unless the default.
    pub(crate) group: Option<String>,
}

/// Where a listing resumes: after the job `id` at `score`, or (if that job
/// left the state or moved) at the first job scored `score` or more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListFrom<'a> {
    pub(crate) score: u64,
    pub(crate) id: &'a str,
}

/// The score of a ready job (jobs.lua: `ready_score`).
pub(crate) fn ready_score(prio: u8, seq: u64) -> u64 {
    u64::from(255 - prio) * (1 << 44) + seq
}

/// A rate: at most `count` per `period_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct RawRate {
    pub(crate) count: u32,
    pub(crate) period_ms: u64,
}

/// A queue's limits, applied at claim (`None`: no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct RawLimits {
    pub(crate) concurrency: Option<u32>,
    pub(crate) rate: Option<RawRate>,
    pub(crate) group_concurrency: Option<u32>,
    pub(crate) group_rate: Option<RawRate>,
}

/// One group's own limits, over the queue's group limits (`None`: the
/// queue's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct RawGroupLimits {
    pub(crate) concurrency: Option<u32>,
    pub(crate) rate: Option<RawRate>,
}

/// One group of a queue as `job_groups` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawGroup {
    /// "" for the default group.
    pub(crate) group: String,
    pub(crate) ready: u64,
    pub(crate) running: u64,
    /// Held back by a limit until then (ms), or `HELD_FOR_SLOT`: until
    /// one of its jobs ends.
    pub(crate) held_until: Option<u64>,
    /// The limits in force for it.
    pub(crate) concurrency: Option<u32>,
    pub(crate) rate: Option<RawRate>,
}
