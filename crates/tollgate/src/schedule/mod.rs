//! Schedules that feed job queues (issue 17).
//!
//! Any number of processes fire a schedule with no leader: each computes the
//! next tick here, in Rust, and the store only compares and sets ("if the
//! stored next tick is T and T is due, push `<schedule>@<T>` and store T'").
//! So the time rules below are the whole contract between processes: they
//! are pure functions of their inputs and must stay identical across
//! versions.
//!
//! The facade is `schedules.rs` (`Schedules`) and `fire.rs` (firing what is
//! due); `when.rs` is the time rules. A schedule lives with the job queue
//! it pushes to, so a tick is claimed and its job pushed in one step: the
//! operations are in `dispatch.rs`, their types in `types.rs`; `memory.rs`
//! is the reference model, `lua/schedule.lua` (after the queue's
//! `lua/queue.lua`, driven by `redis.rs`) the same steps on Redis, and
//! `lua/index.lua` the index of which queue each schedule lives with.

pub(crate) mod backend;
mod dispatch;
mod fire;
pub(crate) mod memory;
mod redis;
mod schedules;
pub(crate) mod state;
pub(crate) mod types;
mod when;

pub use fire::{FireReport, FiredJob, MAX_FIRE_SLEEP};
pub use schedules::{
    FiredTick, MAX_SCHEDULE_NAME_LEN, ScheduleInfo, ScheduleSpec, Schedules, Upserted, check_schedule_name,
};
pub use when::{
    Cron, Every, MAX_CATCH_UP, MAX_INTERVAL, MIN_INTERVAL, Misfire, SKIP_GRACE_MS, When, WhenPart,
};
