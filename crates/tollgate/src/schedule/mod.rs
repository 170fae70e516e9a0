//! Schedules that feed job queues (issue 17).
//!
//! Any number of processes fire a schedule with no leader: each computes the
//! next tick here, in Rust, and the store only compares and sets ("if the
//! stored next tick is T and T is due, push `<schedule>@<T>` and store T'").
//! So the time rules below are the whole contract between processes: they
//! are pure functions of their inputs and must stay identical across
//! versions.

mod fire;
mod schedules;
mod when;

pub use fire::{FireReport, FiredJob, MAX_FIRE_SLEEP};
pub use schedules::{
    FiredTick, MAX_SCHEDULE_NAME_LEN, ScheduleInfo, ScheduleSpec, Schedules, Upserted, check_schedule_name,
};
pub use when::{
    Cron, Every, MAX_CATCH_UP, MAX_INTERVAL, MIN_INTERVAL, Misfire, SKIP_GRACE_MS, When, WhenPart,
};
