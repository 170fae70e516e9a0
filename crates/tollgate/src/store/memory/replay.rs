//! What the log records of each operation: the operation codes (part of
//! the file format) and a record's fields. Each primitive's memory model
//! writes its operations' arguments and runs its records again
//! (`replay` in its `memory.rs`); `store/embedded/replay.rs` sends each
//! record to its primitive.
//!
//! A record's payload after its header fields `(lsn, time_us, rnd)` is
//! `(code, name)` then the operation's arguments, as the memory method
//! wrote them (`Logged`). Replaying runs the same memory method with the
//! store's time pinned to the recorded one (`Stamp`), so the same model
//! code makes the same state: the log holds operations, not states.
//!
//! Codes are part of the file format: never reuse or renumber one; a new
//! operation takes a new code.

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::name::Name;

/// An operation's code in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[repr(u8)]
pub(crate) enum Code {
    GateEnter = 1,
    GatePoll = 2,
    GateRenew = 3,
    GateLeave = 4,
    GatePass = 5,
    GateRevoke = 6,
    GateRemoveWaiter = 7,
    GateClearLine = 8,
    GateSetCapacity = 9,
    GateSetAdmission = 10,
    /// A read whose expiry and promotion changed the gate.
    GateTouch = 11,
    /// A gate's door set (`Gate::set_door`).
    GateSetDoor = 12,
    /// An enter with an order key (a draw's).
    GateEnterDrawn = 13,
    /// How free permits go to the line (`Gate::set_queueing`).
    GateSetQueueing = 14,
    JobLayout = 20,
    JobPush = 21,
    JobRetire = 22,
    JobClaim = 23,
    JobNack = 24,
    JobExtend = 25,
    JobCancel = 26,
    JobReschedule = 27,
    JobReplay = 28,
    JobPurge = 29,
    JobPause = 30,
    JobStats = 31,
    /// A push of jobs of which one or more has a group.
    JobPushGrouped = 32,
    JobSetLimits = 33,
    JobSetGroupLimits = 34,
    SchedulePut = 40,
    ScheduleFire = 41,
    ScheduleTrigger = 42,
    SchedulePause = 43,
    ScheduleDelete = 44,
    /// A fire of schedules of which one or more pushes jobs with a group.
    ScheduleFireGrouped = 45,
    /// A trigger of a schedule whose job has a group.
    ScheduleTriggerGrouped = 46,
    IndexSet = 50,
    IndexDrop = 51,
    Limit = 60,
    /// The idle sweep dropped a gate or a queue (with its last fence).
    DropGate = 70,
    DropQueue = 71,
}

impl Code {
    fn of(byte: u8) -> Option<Code> {
        use Code::*;
        Some(match byte {
            1 => GateEnter,
            2 => GatePoll,
            3 => GateRenew,
            4 => GateLeave,
            5 => GatePass,
            6 => GateRevoke,
            7 => GateRemoveWaiter,
            8 => GateClearLine,
            9 => GateSetCapacity,
            10 => GateSetAdmission,
            11 => GateTouch,
            12 => GateSetDoor,
            13 => GateEnterDrawn,
            14 => GateSetQueueing,
            20 => JobLayout,
            21 => JobPush,
            22 => JobRetire,
            23 => JobClaim,
            24 => JobNack,
            25 => JobExtend,
            26 => JobCancel,
            27 => JobReschedule,
            28 => JobReplay,
            29 => JobPurge,
            30 => JobPause,
            31 => JobStats,
            32 => JobPushGrouped,
            33 => JobSetLimits,
            34 => JobSetGroupLimits,
            40 => SchedulePut,
            41 => ScheduleFire,
            42 => ScheduleTrigger,
            43 => SchedulePause,
            44 => ScheduleDelete,
            45 => ScheduleFireGrouped,
            46 => ScheduleTriggerGrouped,
            50 => IndexSet,
            51 => IndexDrop,
            60 => Limit,
            70 => DropGate,
            71 => DropQueue,
            _ => return None,
        })
    }

    /// Serialized as its byte.
    pub(crate) fn byte(self) -> u8 {
        self as u8
    }

    /// The kind of name the record is about, for per-name filtering.
    pub(crate) fn space(self) -> Space {
        match self as u8 {
            1..=19 | 70 => Space::Gate,
            20..=49 | 71 => Space::Queue,
            50..=59 => Space::Index,
            _ => Space::Limits,
        }
    }
}

/// Which state a record changes: a gate's, a queue's, or one of the two
/// store-wide maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Space {
    Gate,
    Queue,
    Index,
    Limits,
}

/// A record's fields after its LSN.
#[derive(Debug)]
pub(crate) struct Record<'a> {
    pub(crate) lsn: u64,
    pub(crate) time_us: u64,
    pub(crate) rnd: u16,
    pub(crate) code: Code,
    pub(crate) name: Name,
    pub(crate) args: &'a [u8],
}

/// Reads a record's payload.
pub(crate) fn parse(payload: &[u8]) -> Result<Record<'_>> {
    let ((lsn, time_us, rnd, code, name), args) =
        postcard::take_from_bytes::<(u64, u64, u16, u8, &str)>(payload).map_err(bad)?;
    let code = Code::of(code).ok_or_else(|| corrupt(format!("unknown operation code {code}")))?;
    let name = Name::new(name)?;
    Ok(Record {
        lsn,
        time_us,
        rnd,
        code,
        name,
        args,
    })
}

fn bad(e: postcard::Error) -> Error {
    corrupt(format!("undecodable record: {e}"))
}

pub(crate) fn corrupt(message: String) -> Error {
    Error::misconfigured(message)
}

/// Decodes a record's arguments.
pub(crate) fn args<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T> {
    postcard::from_bytes(bytes).map_err(bad)
}

/// The error for a record sent to a primitive whose code is not one of
/// its own (a bug in `store/embedded/replay.rs`, never the file's).
pub(crate) fn misrouted(code: Code) -> Error {
    Error::misconfigured(format!(
        "operation code {} sent to the wrong primitive",
        code.byte()
    ))
}
