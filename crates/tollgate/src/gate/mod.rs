//! The gate: a capacity, leased holders and a FIFO line of waiters, the
//! one primitive behind [`Lock`], [`Semaphore`], the server's per-resource
//! queues and its waiting rooms.
//!
//! The facade (`handle.rs`: `Gate`, `Lease`, the waiting loops; `lock.rs`,
//! `semaphore.rs`) stands on the operations in `dispatch.rs`, whose types
//! are `types.rs`. `memory.rs` (with `line.rs`) is the reference model;
//! `redis.rs` and the scripts in `lua/` are the same steps on Redis;
//! `tests/stores_agree.rs` holds one to the other.

mod acquire;
pub(crate) mod backend;
pub(crate) mod bargers;
mod dispatch;
mod handle;
mod keys;
mod lease;
mod line;
mod lock;
pub(crate) mod memory;
pub(crate) mod model;
pub(crate) mod pass_groups;
mod passing;
pub(crate) mod redis;
pub(crate) mod scripts;
mod semaphore;
pub(crate) mod types;

pub use self::handle::{Entered, Gate, GateOptions, Granted, MAX_PASSES, REVOKE_KEEP, TicketStatus};
pub use self::lease::Lease;
pub use self::lock::Lock;
pub use self::semaphore::Semaphore;
pub use self::types::{
    GateStats, GateWatch, Holding, Left, MAX_CAPACITY, MAX_LINE_LIMIT, MAX_REVOKED_PER_WATCH, Occupancy,
    Place, Waiting,
};
