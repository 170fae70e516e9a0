//! Fair, leased, fenced coordination primitives over an embedded store or
//! Redis.
//!
//! Everything here stands on one primitive, the [`Gate`]: a capacity, leased
//! holders and a FIFO line of waiters. [`Lock`] is a gate of capacity 1,
//! [`Semaphore`] a gate of capacity N. Every grant is a [`Lease`] with an
//! owner token, a TTL (renewed automatically by default) and a fencing token
//! that strictly increases per gate. A newcomer never overtakes the line;
//! freed permits are handed straight to the head of it.
//!
//! State lives in a [`Store`]: [`Store::memory`] (in-process) or
//! [`Store::redis`] (many processes and machines). Both behave the same; on
//! Redis each operation is one Lua script that reads Redis's own clock.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Lock, Semaphore, Store};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tollgate::Result<()> {
//! let store = Store::memory(); // or Store::redis("redis://127.0.0.1:6379").await?
//!
//! let lock = Lock::new(&store, "cron:nightly-report")?;
//! if let Some(guard) = lock.try_acquire().await? {
//!     // Hand guard.fence() to whatever you write to, so a stale holder
//!     // that wakes up late is refused.
//!     println!("running with fence {}", guard.fence());
//!     guard.release().await?;
//! }
//!
//! let pool = Semaphore::new(&store, "api-slots", 3)?;
//! let permit = pool.acquire(1, Duration::from_secs(5)).await?.expect("free");
//! assert_eq!(pool.stats().await?.used, 1);
//! permit.release().await?;
//! # Ok(())
//! # }
//! ```

#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod clock;
mod error;
mod fence;
mod gate;
mod jobs;
mod limit;
mod listing;
mod name;
pub mod schedule;
mod store;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{Error, ErrorKind, Result, error_body};
pub use fence::{
    DEFAULT_MAX_KEYS, FENCE_HEADER, FENCED_SET_LUA, FenceGuard, FenceKey, FenceKeyFn, FenceLayer,
    FenceService, FenceTurn, FencedSet, HIGHEST_HEADER, StaleFence, fenced_set,
};
#[cfg(feature = "axum")]
pub use fence::{FenceHeader, FenceRejection};
pub use gate::{
    DRAW_SPAN, Door, DoorChange, DrawRecord, Election, Entered, Gate, GateOptions, GateStats, GateWatch,
    Granted, Holding, Leader, Leadership, Lease, Left, Lock, MAX_CAPACITY, MAX_DOOR_NOTE, MAX_DOOR_TIME_MS,
    MAX_LINE_LIMIT, MAX_PASSES, MAX_REVOKED_PER_WATCH, OBSERVE_EVERY, Observer, Occupancy, Place, Queueing,
    REVOKE_KEEP, RW_PERMITS, RwLock, RwMode, RwState, Semaphore, TicketStatus, Waiting, lease_handle,
};
pub use jobs::{
    Backoff, Cancelled, CompletedJob, DEFAULT_MAX_PAYLOAD, DeadJob, EVENTS_BUFFER, EventId, GroupHold,
    GroupInfo, GroupLimits, GroupPage, JOB_LISTING_BYTES, JOB_PREVIEW_BYTES, Job, JobEvent, JobEventKind,
    JobEvents, JobInfo, JobPage, JobQueue, JobState, LATENESS_BOUNDS_MS, Lagged, MAX_BATCH, MAX_BATCH_BYTES,
    MAX_CONCURRENCY, MAX_GROUP_LEN, MAX_GROUP_LIST, MAX_JOB_DELAY, MAX_JOB_ID_LEN, MAX_JOB_LIST,
    MAX_PARTITIONS, Nacked, OnDuplicate, PushFailed, PushOptions, PushResult, Pushed, QueueLimits,
    QueueStats, Retry,
};
pub use limit::{
    Algorithm, DEFAULT_TIMEOUT, Decision, KeyBy, KeyFn, Limit, MAX_KEY_LEN, MAX_LIMIT, MAX_PERIOD,
    MAX_REFILL, MIN_PERIOD, OnStoreError, PeerAddr, Rate, RateLimit, RateLimitLayer, RateLimiter,
    RequestInfo, client_ip, ip_key, set_rate_limit_headers,
};
pub use listing::{GateItem, MAX_PAGE, Page, QueueItem};
pub use name::{MAX_NAME_LEN, MAX_TTL, MIN_TTL, Name};
pub use schedule::{
    Cron, Every, FireReport, FiredJob, FiredTick, Misfire, ScheduleInfo, ScheduleSpec, Schedules, Upserted,
    When, WhenPart,
};
pub use store::{
    DEFAULT_REBUILD_ABOVE, DEFAULT_SNAPSHOT_AFTER, DataCheck, DurableOptions, DurableStats, Fsync,
    JournalStats, MemoryFootprint, MemoryOptions, Recovery, RedisConfig, SegmentCheck, Store, check_data_dir,
    repair_data_dir,
};

// The README's examples compile and run as doctests.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

// And the durability guide's.
#[doc = include_str!("../../../docs/DURABILITY.md")]
#[cfg(doctest)]
pub struct DurabilityDoctests;

// So do the rate-limit guide's.
#[doc = include_str!("../../../docs/LIMITS.md")]
#[cfg(doctest)]
pub struct LimitsDoctests;

// And the job-queue and cluster guides'.
#[doc = include_str!("../../../docs/JOBS.md")]
#[cfg(doctest)]
pub struct JobsDoctests;

#[doc = include_str!("../../../docs/CLUSTER.md")]
#[cfg(doctest)]
pub struct ClusterDoctests;
