//! Runs a log record again: each record goes to its primitive's `replay`
//! (in the primitive's `memory.rs`), with the store's time pinned to the
//! record's; a dropped idle name is dropped again here.

use crate::error::Result;
use crate::store::memory::replay::{self, Code, Record};
use crate::{gate, jobs, limit, schedule};

use super::state::MemoryStore;

/// Runs `r` again on `store`, whose time is pinned to the record's.
pub(crate) fn apply(store: &MemoryStore, r: &Record<'_>) -> Result<()> {
    let g = &r.name;
    match r.code {
        Code::DropGate => store.gates.drop_logged(g, replay::args(r.args)?),
        Code::DropQueue => store.queues.drop_logged(g, replay::args(r.args)?),
        Code::GateEnter
        | Code::GatePoll
        | Code::GateRenew
        | Code::GateLeave
        | Code::GatePass
        | Code::GateRevoke
        | Code::GateRemoveWaiter
        | Code::GateClearLine
        | Code::GateSetCapacity
        | Code::GateSetAdmission
        | Code::GateSetDoor
        | Code::GateSetQueueing
        | Code::GateEnterDrawn
        | Code::GateTouch => return gate::memory::replay(&store.gates(), r),
        Code::JobLayout
        | Code::JobPush
        | Code::JobRetire
        | Code::JobClaim
        | Code::JobNack
        | Code::JobExtend
        | Code::JobCancel
        | Code::JobReschedule
        | Code::JobReplay
        | Code::JobPurge
        | Code::JobPause
        | Code::JobStats
        | Code::JobPushGrouped
        | Code::JobSetLimits
        | Code::JobSetGroupLimits => return jobs::memory::replay(&store.jobs(), r),
        Code::SchedulePut
        | Code::ScheduleFire
        | Code::ScheduleTrigger
        | Code::SchedulePause
        | Code::ScheduleDelete
        | Code::ScheduleFireGrouped
        | Code::ScheduleTriggerGrouped
        | Code::IndexSet
        | Code::IndexDrop => return schedule::memory::replay(&store.schedules(), r),
        Code::Limit => return limit::memory::replay(&store.limits(), r),
    }
    Ok(())
}
