//! Job queues: delayed and reliable jobs, each delivered to one consumer at
//! a time, redelivered when its lease runs out, retried with backoff, dead
//! letters kept (docs/JOBS.md).
//!
//! The facade is `queue.rs` (`JobQueue`: one queue over one partition or
//! K), routing each call to `partition.rs` (one partition's operations,
//! with `lookup.rs`); they stand on the operations in `dispatch.rs`,
//! whose types are `types.rs`; `job.rs` is what callers hand in and get
//! back.
//! `memory.rs` is the reference model; `lua/jobs.lua` (after
//! `lua/queue.lua`, driven by `redis.rs`) is the same steps on Redis, one
//! script, the operation in ARGV[1]; the conformance suite
//! `tests/job_queue.rs`, run on every store, holds one to the other.
//! `events.rs` is the live feed of a queue's events.

pub(crate) mod backend;
mod dead_letters;
mod dispatch;
pub(crate) mod events;
pub(crate) mod fair;
pub(crate) mod groups;
pub(crate) mod job;
mod layout;
mod lookup;
pub(crate) mod memory;
pub(crate) mod model;
pub(crate) mod partition;
pub(crate) mod queue;
pub(crate) mod redis;
pub(crate) mod types;

pub use self::events::{EVENTS_BUFFER, EventId, JobEvent, JobEventKind, JobEvents, Lagged};
pub use self::groups::{
    GroupHold, GroupInfo, GroupLimits, GroupPage, MAX_CONCURRENCY, MAX_GROUP_LIST, QueueLimits,
};
pub use self::job::{
    Backoff, Cancelled, CompletedJob, DEFAULT_MAX_PAYLOAD, DeadJob, Job, LATENESS_BOUNDS_MS, MAX_BATCH,
    MAX_BATCH_BYTES, MAX_GROUP_LEN, MAX_JOB_DELAY, MAX_JOB_ID_LEN, Nacked, OnDuplicate, PushOptions,
    PushResult, Pushed, QueueStats, Retry,
};
pub use self::lookup::{JOB_LISTING_BYTES, JOB_PREVIEW_BYTES, JobInfo, JobPage, JobState, MAX_JOB_LIST};
pub use self::queue::{JobQueue, MAX_PARTITIONS, PushFailed};
