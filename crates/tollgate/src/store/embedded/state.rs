//! The embedded store: the shared core and every primitive's state, each
//! primitive's operations run on a view of the two (`gates()`, `jobs()`,
//! `schedules()`, `limits()`). This and its siblings (replay, snapshots,
//! recovery) are the one place that names every primitive's memory state.

use std::ops::Deref;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::gate::memory::GateMemory;
use crate::gate::model::GateState;
use crate::jobs::events::Hub;
use crate::jobs::memory::JobMemory;
use crate::jobs::model::Queue;
use crate::limit::memory::{LimitMemory, Limits};
use crate::schedule::memory::ScheduleMemory;
use crate::schedule::state::Index;
use crate::store::memory::durable::Durable;
use crate::store::memory::shelf::Shelf;
use crate::store::memory::{MemoryCore, MemoryFootprint, MemoryOptions};

#[derive(Debug)]
pub(crate) struct MemoryStore {
    pub(crate) core: MemoryCore,
    pub(crate) gates: Shelf<GateState>,
    pub(crate) limits: Mutex<Limits>,
    pub(crate) queues: Shelf<Queue>,
    pub(crate) schedule_index: Mutex<Index>,
    /// The watched job queues and their subscribers (jobs/events.rs).
    pub(crate) job_events: Arc<Hub>,
    /// The durable store's snapshots (none: memory only).
    pub(crate) durable: OnceLock<Durable>,
}

impl Deref for MemoryStore {
    type Target = MemoryCore;

    fn deref(&self) -> &MemoryCore {
        &self.core
    }
}

impl MemoryStore {
    /// A store with `options` (checked by the caller).
    pub(crate) fn new(options: MemoryOptions) -> Self {
        MemoryStore {
            core: MemoryCore::new(options),
            gates: Shelf::default(),
            limits: Mutex::default(),
            queues: Shelf::default(),
            schedule_index: Mutex::default(),
            job_events: Arc::default(),
            durable: OnceLock::new(),
        }
    }

    pub(crate) fn gates(&self) -> GateMemory<'_> {
        GateMemory {
            core: &self.core,
            gates: &self.gates,
        }
    }

    pub(crate) fn jobs(&self) -> JobMemory<'_> {
        JobMemory {
            core: &self.core,
            queues: &self.queues,
            job_events: &self.job_events,
        }
    }

    pub(crate) fn schedules(&self) -> ScheduleMemory<'_> {
        ScheduleMemory {
            jobs: self.jobs(),
            schedule_index: &self.schedule_index,
        }
    }

    pub(crate) fn limits(&self) -> LimitMemory<'_> {
        LimitMemory {
            core: &self.core,
            limits: &self.limits,
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
        let now = self.stamp().ms();
        self.gates.sweep_due(now, self.idle_ms, max);
        self.queues.sweep_due(now, self.idle_ms, max);
        let mut limits = self.limits.lock().unwrap_or_else(PoisonError::into_inner);
        limits.sweep(self.clock.now_us(), max);
        limits.shrink();
    }
}
