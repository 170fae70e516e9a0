//! The embedded store: every operation is one critical section over one
//! name's state. It is also the reference model the Redis scripts are
//! tested against, so it is written for clarity first.
//!
//! This module owns what the primitives share: `MemoryStore` (the clock,
//! the shelves of gates and queues, the rate-limit keys, the wakers), its
//! options, the footprint and the idle sweep. Each primitive's state and
//! operations sit beside its Lua: `store/gate/memory.rs`,
//! `store/jobs/memory.rs`, `store/limit/memory.rs`.
//!
//! Each gate and each job queue has a lock of its own (see `shelf`), so a
//! flood on one never holds up another. A std `Mutex` (not tokio's) is
//! right here: no critical section awaits, and each is a bounded amount of
//! map work. Wake-ups are sent after the lock is dropped so a woken waiter
//! never contends with the waker.

mod shelf;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};

use super::jobs::memory::Queue;
use super::limit::memory::Limits;

use self::shelf::Shelf;
pub(crate) use self::shelf::Shelved;
use super::gate::memory::GateState;
use super::{MemoryFootprint, Wakers};

/// Settings of the embedded store ([`Store::memory_with`](crate::Store::memory_with)).
/// Every field has a default.
#[derive(Debug, Clone)]
pub struct MemoryOptions {
    /// How long a name's state is kept once it is idle and empty: no
    /// operation on it, and no lease, ticket, kept revocation or job in it,
    /// for this long. Then it is dropped (a gate's stored capacity and
    /// admission settings with it; its next write starts a new epoch, and
    /// its fences keep growing). Default 10 minutes; 1 ms to 30 days.
    pub idle: Duration,
    /// Where the store reads the time. Default [`SystemClock`]; tests use
    /// [`ManualClock`](crate::ManualClock).
    pub clock: Arc<dyn Clock>,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        MemoryOptions {
            idle: Duration::from_secs(600),
            clock: Arc::new(SystemClock),
        }
    }
}

impl MemoryOptions {
    /// Checks the settings.
    pub(crate) fn check(&self) -> Result<()> {
        if self.idle < Duration::from_millis(1) || self.idle > Duration::from_secs(30 * 24 * 3600) {
            return Err(Error::invalid(format!(
                "the idle period must be between 1ms and 30 days, got {}ms",
                self.idle.as_millis()
            )));
        }
        Ok(())
    }
}

#[derive(Debug)]
pub(crate) struct MemoryStore {
    pub(in crate::store) clock: Arc<dyn Clock>,
    /// `MemoryOptions::idle` in ms.
    pub(in crate::store) idle_ms: u64,
    pub(in crate::store) gates: Shelf<GateState>,
    pub(in crate::store) limits: Mutex<Limits>,
    pub(in crate::store) queues: Shelf<Queue>,
    pub(in crate::store) wakers: Arc<Wakers>,
    pub(in crate::store) schedule_index: Mutex<crate::store::schedule::memory::Index>,
    /// The watched job queues and their subscribers (store/jobs/events.rs).
    pub(in crate::store) job_events: Arc<crate::store::jobs::events::Hub>,
}

impl MemoryStore {
    /// A store with `options` (checked by the caller).
    pub(crate) fn new(options: MemoryOptions) -> Self {
        MemoryStore {
            clock: options.clock,
            idle_ms: options.idle.as_millis() as u64,
            gates: Shelf::default(),
            limits: Mutex::default(),
            queues: Shelf::default(),
            wakers: Arc::default(),
            schedule_index: Mutex::default(),
            job_events: Arc::default(),
        }
    }

    /// How many names hold state now.
    pub(crate) fn footprint(&self) -> MemoryFootprint {
        MemoryFootprint {
            gates: self.gates.len(),
            queues: self.queues.len(),
            limit_keys: self.limits.lock().unwrap_or_else(PoisonError::into_inner).len(),
        }
    }

    /// Drops what has been idle long enough, looking at up to `max` names
    /// of each kind (gates, queues, limit keys), and gives spare map room
    /// back.
    pub(crate) fn sweep_idle(&self, max: usize) {
        let now = self.clock.now_ms();
        self.gates.sweep_due(now, self.idle_ms, max);
        self.queues.sweep_due(now, self.idle_ms, max);
        let mut limits = self.limits.lock().unwrap_or_else(PoisonError::into_inner);
        limits.sweep(self.clock.now_us(), max);
        limits.shrink();
    }

    pub(crate) fn wakers(&self) -> Arc<Wakers> {
        self.wakers.clone()
    }
}
