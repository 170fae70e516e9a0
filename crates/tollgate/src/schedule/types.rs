//! Schedules in the store layer: the operation types both stores share.
//! A schedule lives with the job queue it pushes to (on Redis under the
//! queue's hash tag), so a tick is claimed and its job pushed in one step;
//! `memory.rs` is the reference model, `schedule.lua` (after the queue's
//! `queue.lua`, driven by `redis.rs`) the same steps on Redis. A small
//! index (`index.lua`) says which queue each schedule lives with.
//!
//! The stores never compute a tick: the client does (`crate::schedule`)
//! and the store compares and sets.

use crate::jobs::types::BackoffSpec;

/// A tick may be fired this long before it is due (ms): its job goes in
/// as a delayed job due at the tick, so firing is never on a tick's
/// critical path, and a pause, change or delete takes back the jobs of
/// ticks not yet due. Same as LOOKAHEAD in schedule.lua.
pub(crate) const LOOKAHEAD_MS: u64 = 1000;

/// How many fired ticks each schedule remembers.
pub(crate) const HISTORY: usize = 10;

/// A schedule's next tick as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum Next {
    /// The first tick at or after the schedule's `from` (the client works
    /// it out; stored as 0).
    FromStart,
    /// This tick (store ms).
    At(u64),
    /// None left (stored as -1).
    Never,
}

impl Next {
    pub(crate) fn encode(self) -> i64 {
        match self {
            Next::FromStart => 0,
            Next::At(t) => t as i64,
            Next::Never => -1,
        }
    }

    pub(crate) fn decode(v: i64) -> Next {
        match v {
            0 => Next::FromStart,
            v if v < 0 => Next::Never,
            v => Next::At(v as u64),
        }
    }
}

/// Why a queue takes no job from a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A partition of a replaced layout.
    Retired,
    /// The base of a partitioned queue: its jobs live in the partitions.
    Partitioned,
}

impl Refusal {
    pub(crate) fn from_code(code: i64) -> Option<Refusal> {
        match code {
            -1 => Some(Refusal::Retired),
            -2 => Some(Refusal::Partitioned),
            _ => None,
        }
    }
}

/// One `schedule_put`: create or change a schedule.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Put<'a> {
    pub(crate) name: &'a str,
    /// What decides the ticks (expression, zone, start, end); a change
    /// restarts the schedule from now.
    pub(crate) timing: &'a str,
    /// The rest of the definition (no newline), as the client writes it.
    pub(crate) definition: &'a str,
    pub(crate) payload: &'a [u8],
    /// Whether a new schedule starts paused (an existing one keeps its
    /// state).
    pub(crate) paused: bool,
    /// No tick before this (store ms; 0 for none).
    pub(crate) start_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PutOutcome {
    Created,
    Changed,
    Unchanged,
    Refused(Refusal),
}

/// A schedule as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawSchedule {
    pub(crate) name: String,
    /// Counts changes; a fire names the rev it computed from.
    pub(crate) rev: u64,
    pub(crate) next: Next,
    /// When its timing last (re)started (store ms).
    pub(crate) from_ms: u64,
    pub(crate) paused: bool,
    pub(crate) timing: String,
    pub(crate) definition: String,
    pub(crate) payload: Vec<u8>,
    /// The last fired ticks, oldest first: `<tick ms>` or `manual-<ms>`
    /// (the job id is `<name>@` that). Empty in a `Due`.
    pub(crate) history: Vec<String>,
}

/// The answer to `schedule_due`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Due {
    pub(crate) now_ms: u64,
    /// The lowest next tick of any running schedule of the queue.
    pub(crate) soonest: Option<Next>,
    /// The queue has no schedule at all (paused ones included).
    pub(crate) none: bool,
    pub(crate) schedules: Vec<RawSchedule>,
}

/// The job a schedule pushes, as a push takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobSpec {
    pub(crate) priority: u8,
    pub(crate) max_attempts: u32,
    pub(crate) backoff: BackoffSpec,
    /// Its group ("" the default).
    pub(crate) group: String,
}

/// One schedule of a `schedule_fire`: if it still has `rev` and `expect`
/// and every tick is due, push a job per tick (id `<name>@<tick>`, due at
/// its run-at) and store `next`.
#[derive(Debug, Clone)]
pub(crate) struct Fire<'a> {
    pub(crate) name: &'a str,
    pub(crate) rev: u64,
    pub(crate) expect: Next,
    pub(crate) next: Next,
    pub(crate) job: JobSpec,
    /// (tick ms, run-at ms), ascending.
    pub(crate) ticks: Vec<(u64, u64)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FireOutcome {
    /// Done: this many jobs were new (the rest existed already).
    Fired { pushed: u32 },
    /// Changed, paused, gone or not yet due: nothing done.
    Stale,
    /// The queue takes no job; the schedule moved on.
    Refused(Refusal),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TriggerOutcome {
    /// The id of the extra job.
    Pushed(String),
    Stale,
    Refused(Refusal),
}

/// A fired tick's entry in the history.
pub(crate) fn manual_entry(now: u64) -> String {
    format!("manual-{now}")
}
