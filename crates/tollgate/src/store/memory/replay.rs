//! What the log records of each operation, and how a record is run again.
//!
//! A record's payload after its header fields `(lsn, time_us, rnd)` is
//! `(code, name)` then the operation's arguments, as the memory method
//! wrote them (`Logged`). Replaying runs the same memory method with the
//! store's time pinned to the recorded one (`Stamp`), so the same model
//! code makes the same state: the log holds operations, not states.
//!
//! Codes are part of the file format: never reuse or renumber one; a new
//! operation takes a new code.

use std::borrow::Cow;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::gate::types::{Admission, EnterRequest, Pass};
use crate::jobs::types::{BackoffSpec, Claim, Extend, Keep, Layout, Nack, PushReq, When};
use crate::limit::types::{Algorithm, Check, Limit, Rate};
use crate::name::Name;
use crate::schedule::types::{Fire, JobSpec, Next, Put};

use super::MemoryStore;

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
    SchedulePut = 40,
    ScheduleFire = 41,
    ScheduleTrigger = 42,
    SchedulePause = 43,
    ScheduleDelete = 44,
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
            40 => SchedulePut,
            41 => ScheduleFire,
            42 => ScheduleTrigger,
            43 => SchedulePause,
            44 => ScheduleDelete,
            50 => IndexSet,
            51 => IndexDrop,
            60 => Limit,
            70 => DropGate,
            71 => DropQueue,
            _ => return None,
        })
    }

    /// Serialized as its byte.
    pub(super) fn byte(self) -> u8 {
        self as u8
    }

    /// The kind of name the record is about, for per-name filtering.
    pub(super) fn space(self) -> Space {
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
pub(super) enum Space {
    Gate,
    Queue,
    Index,
    Limits,
}

type EnterArgs<'a> = (&'a str, u32, Option<u32>, u64, u64, bool, bool, Option<&'a str>);

pub(crate) fn enter_args<'a>(r: &EnterRequest<'a>) -> EnterArgs<'a> {
    (
        r.id,
        r.permits,
        r.capacity,
        r.ttl_ms,
        r.heartbeat_ms,
        r.queue,
        r.barge,
        r.label,
    )
}

type PushArgs<'a> = (&'a str, &'a [u8], When, u8, u32, BackoffSpec, bool);

pub(crate) fn push_args<'a>(reqs: &'a [PushReq<'a>]) -> Vec<PushArgs<'a>> {
    reqs.iter()
        .map(|r| {
            (
                r.id,
                r.payload,
                r.when,
                r.priority,
                r.max_attempts,
                r.backoff,
                r.replace,
            )
        })
        .collect()
}

type FireArgs<'a> = (&'a str, u64, Next, Next, JobSpec, Cow<'a, [(u64, u64)]>);

pub(crate) fn fire_args<'a>(fires: &'a [Fire<'a>]) -> Vec<FireArgs<'a>> {
    fires
        .iter()
        .map(|f| {
            (
                f.name,
                f.rev,
                f.expect,
                f.next,
                f.job,
                Cow::Borrowed(&f.ticks[..]),
            )
        })
        .collect()
}

/// (key, cost, algorithm, count, period ms, burst).
type LimitArgs<'a> = (&'a str, u64, u8, u64, u64, u64);

pub(crate) fn limit_args<'a>(c: &Check<'a>) -> LimitArgs<'a> {
    let algorithm = match c.limit.algorithm() {
        Algorithm::Gcra => 0,
        Algorithm::FixedWindow => 1,
        Algorithm::SlidingWindow => 2,
    };
    let rate = c.limit.rate();
    (
        c.key,
        c.cost,
        algorithm,
        rate.count(),
        rate.period().as_millis() as u64,
        c.limit.burst(),
    )
}

/// A record's fields after its LSN.
#[derive(Debug)]
pub(super) struct Record<'a> {
    pub(super) lsn: u64,
    pub(super) time_us: u64,
    pub(super) rnd: u16,
    pub(super) code: Code,
    pub(super) name: Name,
    pub(super) args: &'a [u8],
}

/// Reads a record's payload.
pub(super) fn parse(payload: &[u8]) -> Result<Record<'_>> {
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

pub(super) fn corrupt(message: String) -> Error {
    Error::misconfigured(message)
}

fn args<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T> {
    postcard::from_bytes(bytes).map_err(bad)
}

/// Runs `r` again on `store`, whose time is pinned to the record's.
/// Answers are dropped: the state is what replay is for.
pub(super) fn apply(store: &MemoryStore, r: &Record<'_>) -> Result<()> {
    let g = &r.name;
    match r.code {
        Code::GateEnter => {
            let (id, permits, capacity, ttl_ms, heartbeat_ms, queue, barge, label): EnterArgs<'_> =
                args(r.args)?;
            let req = EnterRequest {
                id,
                permits,
                capacity,
                ttl_ms,
                heartbeat_ms,
                queue,
                barge,
                label,
            };
            let _ = store.enter(g, &req);
        }
        Code::GatePoll => {
            let (id, ttl_ms, hb_ms): (&str, u64, u64) = args(r.args)?;
            let _ = store.poll(g, id, ttl_ms, hb_ms);
        }
        Code::GateRenew => {
            let (id, ttl_ms): (&str, u64) = args(r.args)?;
            let _ = store.renew(g, id, ttl_ms);
        }
        Code::GateLeave => {
            let (id, keep_ms): (&str, Option<u64>) = args(r.args)?;
            let _ = store.leave(g, id, keep_ms);
        }
        Code::GatePass => {
            let (id, to, permits, ttl_ms): (&str, &str, u32, u64) = args(r.args)?;
            let _ = store.pass(
                g,
                id,
                &Pass {
                    id: to,
                    permits,
                    ttl_ms,
                },
            );
        }
        Code::GateRevoke => {
            let (handle, keep_ms): (&str, u64) = args(r.args)?;
            let _ = store.revoke(g, handle, keep_ms);
        }
        Code::GateRemoveWaiter => {
            let _ = store.remove_waiter(g, args(r.args)?);
        }
        Code::GateClearLine => {
            let _ = store.clear_line(g);
        }
        Code::GateSetCapacity => {
            let _ = store.set_capacity(g, args(r.args)?);
        }
        Code::GateSetAdmission => {
            let a: Admission = args(r.args)?;
            let _ = store.set_admission(g, &a);
        }
        Code::GateTouch => {
            let _ = store.on_gate(g, false, None, |_, _, _| Ok(()));
        }
        Code::JobLayout => {
            let l: Layout = args(r.args)?;
            store.job_layout(g, &l);
        }
        Code::JobPush => {
            let reqs: Vec<PushArgs<'_>> = args(r.args)?;
            let reqs: Vec<PushReq<'_>> = reqs
                .into_iter()
                .map(
                    |(id, payload, when, priority, max_attempts, backoff, replace)| PushReq {
                        id,
                        payload,
                        when,
                        priority,
                        max_attempts,
                        backoff,
                        replace,
                    },
                )
                .collect();
            let _ = store.job_push(g, &reqs);
        }
        Code::JobRetire => {
            store.job_retire(g, args(r.args)?);
        }
        Code::JobClaim => {
            let (acks, keep, lease_ms, max): (Vec<(&str, u64)>, Option<Keep>, u64, u64) = args(r.args)?;
            let claim = Claim {
                acks: &acks,
                keep,
                lease_ms,
                max: max as usize,
            };
            store.job_claim(g, &claim);
        }
        Code::JobNack => {
            let (id, fence, delay_ms, jitter, error): (&str, u64, Option<u64>, f64, Option<&str>) =
                args(r.args)?;
            store.job_nack(
                g,
                &Nack {
                    id,
                    fence,
                    delay_ms,
                    jitter,
                    error,
                },
            );
        }
        Code::JobExtend => {
            let (id, fence, lease_ms): (&str, u64, u64) = args(r.args)?;
            store.job_extend(g, &Extend { id, fence, lease_ms });
        }
        Code::JobCancel => {
            store.job_cancel(g, args(r.args)?);
        }
        Code::JobReschedule => {
            let (id, when): (&str, When) = args(r.args)?;
            store.job_reschedule(g, id, when);
        }
        Code::JobReplay => {
            store.job_replay(g, args(r.args)?);
        }
        Code::JobPurge => {
            store.job_purge(g, args(r.args)?);
        }
        Code::JobPause => {
            store.job_pause(g, args(r.args)?);
        }
        Code::JobStats => {
            store.job_stats(g);
        }
        Code::SchedulePut => {
            let (name, timing, definition, payload, paused, start_ms): (&str, &str, &str, &[u8], bool, u64) =
                args(r.args)?;
            let put = Put {
                name,
                timing,
                definition,
                payload,
                paused,
                start_ms,
            };
            store.schedule_put(g, &put);
        }
        Code::ScheduleFire => {
            let fires: Vec<FireArgs<'_>> = args(r.args)?;
            let fires: Vec<Fire<'_>> = fires
                .into_iter()
                .map(|(name, rev, expect, next, job, ticks)| Fire {
                    name,
                    rev,
                    expect,
                    next,
                    job,
                    ticks: ticks.into_owned(),
                })
                .collect();
            store.schedule_fire(g, &fires);
        }
        Code::ScheduleTrigger => {
            let (name, rev, job): (&str, u64, JobSpec) = args(r.args)?;
            store.schedule_trigger(g, name, rev, &job);
        }
        Code::SchedulePause => {
            let (name, pause): (&str, bool) = args(r.args)?;
            store.schedule_pause(g, name, pause);
        }
        Code::ScheduleDelete => {
            store.schedule_delete(g, args(r.args)?);
        }
        Code::IndexSet => {
            store.schedule_index_set(args(r.args)?, g);
        }
        Code::IndexDrop => {
            store.schedule_index_drop(args(r.args)?, g);
        }
        Code::Limit => {
            let (key, cost, algorithm, count, period_ms, burst): LimitArgs<'_> = args(r.args)?;
            let algorithm = match algorithm {
                0 => Algorithm::Gcra,
                1 => Algorithm::FixedWindow,
                _ => Algorithm::SlidingWindow,
            };
            let rate = Rate::new(count, std::time::Duration::from_millis(period_ms))?;
            let limit = Limit::new(algorithm, rate, (algorithm == Algorithm::Gcra).then_some(burst))?;
            store.limit(
                g,
                &Check {
                    key,
                    limit: &limit,
                    cost,
                },
            );
        }
        Code::DropGate => {
            store.gates.drop_logged(g, args(r.args)?);
        }
        Code::DropQueue => {
            store.queues.drop_logged(g, args(r.args)?);
        }
    }
    Ok(())
}
