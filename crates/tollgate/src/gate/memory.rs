//! Gates in the embedded store: each operation as one critical section
//! over one gate's state (`model.rs`), logged for the durable store and
//! replayed from its log; the wake-ups it sends after the lock is
//! dropped.

use std::ops::Deref;
use std::time::Duration;

use crate::error::{Error, Result};

use crate::name::Name;
use crate::store::memory::replay::{self, Code};
use crate::store::memory::shelf::Shelf;
use crate::store::memory::{Logged, MemoryCore, put};

use super::backend::GateBackend;
use super::model::{GateState, NewTicket};
use super::types::{
    Admission, DoorChange, DrawRecord, EnterRequest, Entry, GateName, GateStats, GateWatch, Grant, Holding,
    Left, Occupancy, Pass, Place, Poll, Waiting, handle_of, permits_exceed,
};

/// The gate operations of the embedded store.
impl GateMemory<'_> {
    /// Runs `op` on the gate's state after expiring what ended, then wakes
    /// the waiters that were handed a lease along the way. A gate without
    /// state gets a blank one, kept only if `op` wrote to it: a read (or a
    /// write that changed nothing) leaves no trace, as on Redis.
    /// `log` writes the operation to the durable store's log (its code
    /// and arguments), after it ran.
    fn with_gate<T>(
        &self,
        gate: &Name,
        log: Logged<'_>,
        op: impl FnOnce(&mut GateState, u64, &mut Vec<(String, u64)>) -> Result<T>,
    ) -> Result<T> {
        self.on_gate(gate, true, Some(log), op)
    }

    /// `with_gate` for reads: they do not count as activity (see
    /// `Shelf::with`), and are logged only if the expiry and promotion
    /// before them changed the gate (as a `GateTouch`).
    fn read_gate<T>(
        &self,
        gate: &Name,
        op: impl FnOnce(&mut GateState, u64, &mut Vec<(String, u64)>) -> Result<T>,
    ) -> Result<T> {
        self.on_gate(gate, false, None, op)
    }

    /// Runs one gate operation (see `with_gate`). A replayed operation
    /// runs here too, at its recorded time and with its recorded draw.
    pub(crate) fn on_gate<T>(
        &self,
        gate: &Name,
        touch: bool,
        log: Option<Logged<'_>>,
        op: impl FnOnce(&mut GateState, u64, &mut Vec<(String, u64)>) -> Result<T>,
    ) -> Result<T> {
        let stamp = self.stamp();
        let now = stamp.ms();
        let mut handed = Vec::new();
        // A fresh epoch: the clock in µs and three random digits, as the
        // Lua scripts make it (meta.lua).
        let new = || GateState {
            epoch: stamp.us * 1000 + u64::from(self.draw(stamp) % 1000),
            ..GateState::default()
        };
        let mut free = 0;
        let out = self.gates.with(gate, now, self.idle_ms, touch, new, |state| {
            let before = (state.used, state.capacity, state.held(), state.admit_every_ms);
            // (Only a logged store needs to know what a read changed; an
            // opening's end of a draw is a change.)
            let seen = (log.is_none() && self.logging()).then(|| state.moved());
            // The door's timers first: an opening admits in this step.
            state.tick_door(now);
            state.expire(now);
            state.promote(now, &mut handed);
            let out = op(state, now, &mut handed);
            free = state.freed_for_barging(before, now);
            match log {
                Some(log) => self.record(&mut state.lsn, stamp, gate, log),
                None if seen.is_some_and(|seen| seen != state.moved()) => {
                    self.record(&mut state.lsn, stamp, gate, (Code::GateTouch, &|_| {}));
                }
                None => {}
            }
            out
        });
        for (id, fence) in &handed {
            self.wakers.hand_off(id, *fence);
        }
        if free > 0 {
            self.wakers.wake(&memory_barge_key(gate), free);
        }
        out
    }

    pub(crate) fn enter(&self, gate: &Name, req: &EnterRequest<'_>) -> Result<Entry> {
        // An order key goes in a record of its own kind, so logs of
        // either age replay.
        let args = |b: &mut Vec<u8>| match req.order_key {
            None => put(b, &enter_args(req)),
            Some(key) => put(b, &(enter_args(req), key)),
        };
        let code = if req.order_key.is_some() {
            Code::GateEnterDrawn
        } else {
            Code::GateEnter
        };
        self.with_gate(gate, (code, &args), |s, now, _| {
            let capacity = s.resolve_capacity(req.capacity)?;
            if req.permits > capacity {
                return Err(permits_exceed(req.permits, capacity));
            }
            if s.door.closed {
                return Err(Error::closed());
            }
            if s.holders.contains_key(req.id) || s.tickets.contains_key(req.id) {
                return Err(Error::invalid("that id is already in use on this gate"));
            }
            if s.line.is_empty() && s.used + u64::from(req.permits) <= u64::from(capacity) && s.may_admit(now)
            {
                s.admitted(now);
                let label = req.label.map(str::to_owned);
                let fence = s.grant(req.id, req.permits, now + req.ttl_ms, now, false, label);
                return Ok(Entry::Granted(Grant {
                    fence,
                    ttl_ms: req.ttl_ms,
                }));
            }
            if !req.queue {
                // A barging waiter says it waits (as enter.lua, and as
                // rarely: once per half a heartbeat).
                if req.barge && s.barging_until < now + req.heartbeat_ms / 2 {
                    s.barging_until = now + req.heartbeat_ms;
                }
                return Ok(Entry::Busy(Occupancy {
                    used: s.used,
                    capacity,
                    waiting: s.line.len() as u64,
                }));
            }
            let ticket = NewTicket {
                permits: req.permits,
                deadline: now + req.heartbeat_ms,
                label: req.label.map(str::to_owned),
                key: req.order_key,
            };
            let number = s.queue(req.id, ticket, now);
            let waiting = s.line.len() as u64;
            let t = &s.tickets[req.id];
            let position = s.line.position(t.slot, number, req.id);
            Ok(Entry::Queued(Place {
                position,
                waiting,
                eta: s.eta(position),
            }))
        })
    }

    pub(crate) fn poll(&self, gate: &Name, id: &str, ttl_ms: u64, hb_ms: u64) -> Result<Poll> {
        // A heartbeat: not activity, but it moves deadlines, so logged.
        let args = |b: &mut Vec<u8>| put(b, &(id, ttl_ms, hb_ms));
        self.on_gate(gate, false, Some((Code::GatePoll, &args)), |s, now, handed| {
            if s.expire_one(id, now) {
                s.promote(now, handed);
                return Ok(Poll::Unknown);
            }
            if let Some(h) = s.holders.get(id) {
                if !h.pending {
                    return Ok(Poll::Granted(Grant {
                        fence: if h.handed { h.fence } else { 0 },
                        ttl_ms: h.expires - now,
                    }));
                }
                let fence = h.fence;
                s.set_expiry(id, now + ttl_ms);
                return Ok(Poll::Granted(Grant { fence, ttl_ms }));
            }
            let Some(t) = s.tickets.get_mut(id) else {
                // Only an unknown ticket looks further.
                return Ok(if s.was_removed(id, now) {
                    Poll::Removed
                } else {
                    Poll::Unknown
                });
            };
            let (slot, number, old) = (t.slot, t.number, t.deadline);
            t.deadline = now + hb_ms;
            s.ticket_deadline.remove(&(old, id.to_owned()));
            s.ticket_deadline.insert((now + hb_ms, id.to_owned()));
            let position = s.line.position(slot, number, id);
            Ok(Poll::Queued(Place {
                position,
                waiting: s.line.len() as u64,
                eta: s.eta(position),
            }))
        })
    }

    pub(crate) fn renew(&self, gate: &Name, id: &str, ttl_ms: u64) -> Result<Option<Grant>> {
        let args = |b: &mut Vec<u8>| put(b, &(id, ttl_ms));
        self.with_gate(gate, (Code::GateRenew, &args), |s, now, handed| {
            // An ended lease is never renewed, swept or not.
            if s.expire_one(id, now) {
                s.promote(now, handed);
                return Ok(None);
            }
            let Some(h) = s.holders.get(id) else {
                return Ok(None);
            };
            let fence = h.fence;
            s.set_expiry(id, now + ttl_ms);
            Ok(Some(Grant { fence, ttl_ms }))
        })
    }

    /// Releases or cancels `id`; with `keep_ms` (an end), a released
    /// holder is recorded in the revocation log in the same step.
    pub(crate) fn leave(&self, gate: &Name, id: &str, keep_ms: Option<u64>) -> Result<Left> {
        let args = |b: &mut Vec<u8>| put(b, &(id, keep_ms));
        self.with_gate(gate, (Code::GateLeave, &args), |s, now, handed| {
            Ok(s.leave(id, keep_ms, now, handed))
        })
    }

    /// Releases `id` and passes its permits on to `to` in the same step if
    /// they are free for it then (as leave.lua with a pass).
    pub(crate) fn pass(&self, gate: &Name, id: &str, to: &Pass<'_>) -> Result<(Left, Option<Grant>)> {
        let args = |b: &mut Vec<u8>| put(b, &(id, to.id, to.permits, to.ttl_ms));
        self.with_gate(gate, (Code::GatePass, &args), |s, now, handed| {
            let left = s.leave(id, None, now, handed);
            let room = s
                .capacity
                .is_some_and(|c| s.used + u64::from(to.permits) <= u64::from(c));
            if left != Left::Released
                || s.door.closed
                || !s.line.is_empty()
                || !room
                || !s.may_admit(now)
                || s.holders.contains_key(to.id)
                || s.tickets.contains_key(to.id)
            {
                return Ok((left, None));
            }
            s.admitted(now);
            let fence = s.grant(to.id, to.permits, now + to.ttl_ms, now, false, None);
            Ok((
                left,
                Some(Grant {
                    fence,
                    ttl_ms: to.ttl_ms,
                }),
            ))
        })
    }

    /// Revokes the holder whose handle is `handle` (see `handle_of`): the
    /// same step as an end (`leave` with `keep_ms`), as admin.lua runs
    /// leave.lua once it has found the token.
    pub(crate) fn revoke(&self, gate: &Name, handle: &str, keep_ms: u64) -> Result<Left> {
        let args = |b: &mut Vec<u8>| put(b, &(handle, keep_ms));
        self.with_gate(gate, (Code::GateRevoke, &args), |s, now, handed| {
            let id = s.holders.keys().find(|id| handle_of(id) == handle).cloned();
            Ok(match id {
                Some(id) => s.leave(&id, Some(keep_ms), now, handed),
                None => Left::Unknown,
            })
        })
    }

    /// Takes ticket number `number` out of the line: the same step as the
    /// ticket leaving, remembered so that its waiter learns it was removed.
    pub(crate) fn remove_waiter(&self, gate: &Name, number: u64) -> Result<Left> {
        let args = |b: &mut Vec<u8>| put(b, &number);
        self.with_gate(gate, (Code::GateRemoveWaiter, &args), |s, now, handed| {
            // (Two drawn tickets may share a number: the lowest id, as
            // admin.lua's ZRANGEBYSCORE finds.)
            let id = s
                .tickets
                .iter()
                .filter(|(_, t)| t.number == number)
                .map(|(id, _)| id)
                .min()
                .cloned();
            Ok(match id {
                Some(id) => {
                    s.note_removed(&id, now);
                    s.leave(&id, None, now, handed)
                }
                None => Left::Unknown,
            })
        })
    }

    /// Drops the whole line in one step (as admin.lua's reset).
    pub(crate) fn clear_line(&self, gate: &Name) -> Result<u64> {
        self.with_gate(gate, (Code::GateClearLine, &|_| {}), |s, now, _| {
            Ok(s.clear_line(now))
        })
    }

    /// The first `limit` tickets of the line, head first (as line.lua).
    pub(crate) fn last_draw(&self, gate: &Name) -> Result<DrawRecord> {
        self.read_gate(gate, |s, _, _| Ok(s.last_draw.clone()))
    }

    pub(crate) fn line(&self, gate: &Name, limit: u32) -> Result<Vec<Waiting>> {
        self.read_gate(gate, |s, _, _| {
            Ok(s.line
                .first(limit as usize)
                .enumerate()
                .filter_map(|(i, id)| {
                    s.tickets.get(id).map(|t| Waiting {
                        number: t.number,
                        position: i as u64 + 1,
                        permits: t.permits,
                        label: t.label.clone(),
                    })
                })
                .collect())
        })
    }

    pub(crate) fn set_capacity(&self, gate: &Name, capacity: u32) -> Result<()> {
        let args = |b: &mut Vec<u8>| put(b, &capacity);
        self.with_gate(gate, (Code::GateSetCapacity, &args), |s, now, handed| {
            s.capacity = Some(capacity);
            s.promote(now, handed);
            Ok(())
        })
    }

    pub(crate) fn set_admission(&self, gate: &Name, admission: &Admission) -> Result<()> {
        let args = |b: &mut Vec<u8>| put(b, admission);
        self.with_gate(gate, (Code::GateSetAdmission, &args), |s, now, handed| {
            if let Some(p) = admission.paused {
                s.paused = p;
            }
            if let Some(every) = admission.every_ms {
                s.admit_every_ms = every;
                if every == 0 {
                    s.admit_at = 0;
                }
            }
            s.promote(now, handed);
            Ok(())
        })
    }

    /// How free permits go to the line (as set_admission.lua with a
    /// queueing): the state of the random picks, 0 for first come, first
    /// served; permits free now go out by the new rule.
    pub(crate) fn set_queueing(&self, gate: &Name, pick: u64) -> Result<()> {
        let args = |b: &mut Vec<u8>| put(b, &pick);
        self.with_gate(gate, (Code::GateSetQueueing, &args), |s, now, handed| {
            s.pick = pick;
            s.promote(now, handed);
            Ok(())
        })
    }

    /// The door, the pause and a drop of the line in one step (as
    /// set_admission.lua with a door).
    pub(crate) fn set_door(&self, gate: &Name, change: &DoorChange) -> Result<u64> {
        let args = |b: &mut Vec<u8>| put(b, change);
        self.with_gate(gate, (Code::GateSetDoor, &args), |s, now, handed| {
            s.door = change.door.clone();
            s.tick_door(now);
            if let Some(p) = change.paused {
                s.paused = p;
            }
            let dropped = if change.drop_line { s.clear_line(now) } else { 0 };
            s.promote(now, handed);
            Ok(dropped)
        })
    }

    pub(crate) fn holders(&self, gate: &Name, limit: u32) -> Result<Vec<Holding>> {
        self.read_gate(gate, |s, now, _| {
            // Leases that ended but are not swept yet are not listed.
            Ok(s.holder_expiry
                .range((now + 1, String::new())..)
                .take(limit as usize)
                .filter_map(|(expires, id)| {
                    s.holders.get(id).map(|h| Holding {
                        handle: handle_of(id),
                        fence: h.handed.then_some(h.fence),
                        label: h.label.clone(),
                        ttl: Duration::from_millis(expires.saturating_sub(now)),
                    })
                })
                .collect())
        })
    }

    /// The gate's epoch, settings and revocation log from `since` on (see
    /// watch.lua): reads only, creates nothing, expires nothing, and does
    /// not count as activity (as on Redis, where a watch writes nothing).
    pub(crate) fn watch_state(&self, gate: &Name, since: u64, max: usize) -> GateWatch {
        let now = self.stamp().ms();
        self.gates.peek(gate, now, self.idle_ms, |s| {
            let Some(s) = s else {
                return GateWatch {
                    cursor: since,
                    ..GateWatch::default()
                };
            };
            let from = since.max(now.saturating_sub(s.revoke_keep_ms) * 1024);
            let page: Vec<(u64, &String)> = s.revoked.range(from..).take(max).map(|(k, v)| (*k, v)).collect();
            // Never past the last score handed out: the next end scores
            // above it whatever the clock says.
            let cursor = match page.last() {
                Some((last, _)) if page.len() == max => last + 1,
                _ if s.revoke_last > 0 => (s.revoke_last + 1).max(since),
                _ => since,
            };
            GateWatch {
                epoch: Some(s.epoch),
                capacity: s.capacity,
                paused: s.paused,
                admission_interval: (s.admit_every_ms > 0).then(|| Duration::from_millis(s.admit_every_ms)),
                door: s.door.at(now),
                random: s.pick > 0,
                revoked: page.into_iter().map(|(_, id)| id.clone()).collect(),
                cursor,
            }
        })
    }

    pub(crate) fn stats(&self, gate: &Name) -> Result<GateStats> {
        self.read_gate(gate, |s, _, _| {
            Ok(GateStats {
                capacity: s.capacity,
                used: s.used,
                holders: s.holders.len() as u64,
                waiting: s.line.len() as u64,
                grants: s.grants,
                expiries: s.expiries,
                fence: s.fence,
                paused: s.paused,
                admission_interval: (s.admit_every_ms > 0).then(|| Duration::from_millis(s.admit_every_ms)),
                line_reset_ms: (s.line_reset > 0).then_some(s.line_reset),
                door: s.door.clone(),
                random: s.pick > 0,
            })
        })
    }
}

/// The key barging waiters of a gate on the memory store watch (ticket ids
/// are letters and digits, so it names no ticket).
pub(crate) fn memory_barge_key(gate: &Name) -> String {
    format!("gate {gate}")
}

/// The embedded store as the gate's operations see it: the shared core
/// and the gates' shelf (`store/embedded/` holds them).
#[derive(Clone, Copy)]
pub(crate) struct GateMemory<'a> {
    pub(crate) core: &'a MemoryCore,
    pub(crate) gates: &'a Shelf<GateState>,
}

impl<'a> Deref for GateMemory<'a> {
    type Target = MemoryCore;

    fn deref(&self) -> &MemoryCore {
        self.core
    }
}

type EnterArgs<'a> = (&'a str, u32, Option<u32>, u64, u64, bool, bool, Option<&'a str>);

fn enter_args<'a>(r: &EnterRequest<'a>) -> EnterArgs<'a> {
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

/// The request a logged enter made.
fn enter_request<'a>(args: EnterArgs<'a>, order_key: Option<u64>) -> EnterRequest<'a> {
    let (id, permits, capacity, ttl_ms, heartbeat_ms, queue, barge, label) = args;
    EnterRequest {
        id,
        permits,
        capacity,
        ttl_ms,
        heartbeat_ms,
        queue,
        barge,
        label,
        order_key,
    }
}

/// Runs record `r` of this primitive again on `m`, whose time is pinned
/// to the record's (see `store/embedded/replay.rs`). Answers are dropped:
/// the state is what replay is for.
pub(crate) fn replay(m: &GateMemory<'_>, r: &replay::Record<'_>) -> Result<()> {
    let g = &r.name;
    match r.code {
        Code::GateEnter => {
            let _ = m.enter(g, &enter_request(replay::args(r.args)?, None));
        }
        Code::GateEnterDrawn => {
            let (args, key): (EnterArgs<'_>, u64) = replay::args(r.args)?;
            let _ = m.enter(g, &enter_request(args, Some(key)));
        }
        Code::GatePoll => {
            let (id, ttl_ms, hb_ms): (&str, u64, u64) = replay::args(r.args)?;
            let _ = m.poll(g, id, ttl_ms, hb_ms);
        }
        Code::GateRenew => {
            let (id, ttl_ms): (&str, u64) = replay::args(r.args)?;
            let _ = m.renew(g, id, ttl_ms);
        }
        Code::GateLeave => {
            let (id, keep_ms): (&str, Option<u64>) = replay::args(r.args)?;
            let _ = m.leave(g, id, keep_ms);
        }
        Code::GatePass => {
            let (id, to, permits, ttl_ms): (&str, &str, u32, u64) = replay::args(r.args)?;
            let _ = m.pass(
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
            let (handle, keep_ms): (&str, u64) = replay::args(r.args)?;
            let _ = m.revoke(g, handle, keep_ms);
        }
        Code::GateRemoveWaiter => {
            let _ = m.remove_waiter(g, replay::args(r.args)?);
        }
        Code::GateClearLine => {
            let _ = m.clear_line(g);
        }
        Code::GateSetCapacity => {
            let _ = m.set_capacity(g, replay::args(r.args)?);
        }
        Code::GateSetAdmission => {
            let a: Admission = replay::args(r.args)?;
            let _ = m.set_admission(g, &a);
        }
        Code::GateSetDoor => {
            let change: DoorChange = replay::args(r.args)?;
            let _ = m.set_door(g, &change);
        }
        Code::GateSetQueueing => {
            let _ = m.set_queueing(g, replay::args(r.args)?);
        }
        Code::GateTouch => {
            let _ = m.on_gate(g, false, None, |_, _, _| Ok(()));
        }
        other => return Err(replay::misrouted(other)),
    }
    Ok(())
}

impl GateBackend for GateMemory<'_> {
    async fn enter(&self, gate: &GateName, req: &EnterRequest<'_>) -> Result<Entry> {
        self.write(|| self.enter(gate, req)).await?
    }

    async fn set_admission(&self, gate: &GateName, admission: &Admission) -> Result<()> {
        self.write(|| self.set_admission(gate, admission)).await?
    }

    async fn set_door(&self, gate: &GateName, change: &DoorChange) -> Result<u64> {
        self.write(|| self.set_door(gate, change)).await?
    }

    async fn set_queueing(&self, gate: &GateName, pick: u64) -> Result<()> {
        self.write(|| self.set_queueing(gate, pick)).await?
    }

    async fn poll(&self, gate: &GateName, id: &str, ttl_ms: u64, hb_ms: u64) -> Result<Poll> {
        self.write(|| self.poll(gate, id, ttl_ms, hb_ms)).await?
    }

    async fn renew(&self, gate: &GateName, id: &str, ttl_ms: u64) -> Result<Option<Grant>> {
        self.write(|| self.renew(gate, id, ttl_ms)).await?
    }

    async fn pass(&self, gate: &GateName, id: &str, to: &Pass<'_>) -> Result<(Left, Option<Grant>)> {
        self.write(|| self.pass(gate, id, to)).await?
    }

    async fn set_capacity(&self, gate: &GateName, capacity: u32) -> Result<()> {
        self.write(|| self.set_capacity(gate, capacity)).await?
    }

    async fn holders(&self, gate: &GateName, limit: u32) -> Result<Vec<Holding>> {
        self.read(|| self.holders(gate, limit)).await?
    }

    async fn line(&self, gate: &GateName, limit: u32) -> Result<Vec<Waiting>> {
        self.read(|| self.line(gate, limit)).await?
    }

    async fn revoke(&self, gate: &GateName, handle: &str, keep_ms: u64) -> Result<Left> {
        self.write(|| self.revoke(gate, handle, keep_ms)).await?
    }

    async fn remove_waiter(&self, gate: &GateName, number: u64) -> Result<Left> {
        self.write(|| self.remove_waiter(gate, number)).await?
    }

    async fn clear_line(&self, gate: &GateName) -> Result<u64> {
        self.write(|| self.clear_line(gate)).await?
    }

    async fn stats(&self, gate: &GateName) -> Result<GateStats> {
        self.read(|| self.stats(gate)).await?
    }

    async fn last_draw(&self, gate: &GateName) -> Result<DrawRecord> {
        self.read(|| self.last_draw(gate)).await?
    }

    async fn leave(&self, gate: &GateName, id: &str, keep_ms: Option<u64>) -> Result<Left> {
        self.write(|| self.leave(gate, id, keep_ms)).await?
    }

    async fn watch_state(&self, gate: &GateName, since: u64, max: usize) -> Result<GateWatch> {
        self.read(|| self.watch_state(gate, since, max)).await
    }
}
