//! Gates in the embedded store, the reference model of the Lua scripts in
//! `lua/`: one gate's state, the steps every operation is made of
//! (expiry, promotion, grants, as `prelude.lua` does them on Redis), and
//! each operation as one critical section over that state.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Deref;
use std::time::Duration;

use crate::error::{Error, Result};

use crate::name::Name;
use crate::store::memory::replay::{self, Code};
use crate::store::memory::shelf::Shelf;
use crate::store::memory::{Logged, MemoryCore, Shelved, put};

use super::line::Line;
use super::types::{
    Admission, EnterRequest, Entry, GateStats, GateWatch, Grant, Holding, Left, Occupancy, Pass, Place, Poll,
    REMOVED_KEEP_MS, REMOVED_MAX, Waiting, capacity_conflict, handle_of, no_capacity, permits_exceed,
};

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct GateState {
    /// The log record that last changed it (0: none; the durable store
    /// replays only records after it).
    pub(crate) lsn: u64,
    /// This incarnation of the state (see `GateWatch::epoch`).
    pub(super) epoch: u64,
    pub(super) capacity: Option<u32>,
    /// Last fencing token; 0 until the first grant.
    pub(super) fence: u64,
    /// The first fence is above this: the highest fence of any gate
    /// state this store dropped (see `Shelved`).
    pub(super) fence_floor: u64,
    /// Tickets ever queued (as Redis's s; the line orders by its own
    /// slots, never by time).
    pub(super) seq: u64,
    pub(super) grants: u64,
    pub(super) expiries: u64,
    pub(super) used: u64,
    /// Moving average of the gap between grants from the line (ms), once
    /// measured: the line's pace, for the estimated wait.
    pub(super) gap_ms: Option<u64>,
    /// When the line last moved: its last grant, or when it formed (ms;
    /// 0: never).
    pub(super) line_moved_at: u64,
    /// Admission control: no new grants while paused; at most one grant
    /// per `admit_every_ms` (0: no limit), the next allowed at `admit_at`.
    pub(super) paused: bool,
    pub(super) admit_every_ms: u64,
    pub(super) admit_at: u64,
    /// When the line was last reset (ms; 0: never), as Redis's C.
    pub(super) line_reset: u64,
    /// Until when a non-fair acquire may be waiting to barge in (ms), as
    /// Redis's N: permits freed before then wake such waiters.
    pub(super) barging_until: u64,
    pub(super) holders: HashMap<String, Holder>,
    pub(super) holder_expiry: BTreeSet<(u64, String)>,
    pub(super) line: Line,
    pub(super) tickets: HashMap<String, Ticket>,
    pub(super) ticket_deadline: BTreeSet<(u64, String)>,
    /// The revocation log: score -> token of a holder that ended, and the
    /// way back (as Redis's sorted set r: one entry per token). A score is
    /// the end's time in ms × 1024, or one more than the last if that is
    /// more, so scores strictly increase and serve as readers' cursors.
    pub(super) revoked: BTreeMap<u64, String>,
    pub(super) revoked_score: HashMap<String, u64>,
    /// The last score handed out (0: none), kept while the log empties
    /// and refills: scores never go back within an epoch, whatever the
    /// clock does, so a reader's cursor never skips a later end.
    pub(super) revoke_last: u64,
    /// The longest keep (ms) of the log's entries: nothing younger is
    /// pruned, nothing older is read.
    pub(super) revoke_keep_ms: u64,
    /// Tickets an admin took out of the line (`remove_waiter`): id -> when
    /// (ms), and the same in time order, for pruning (as Redis's sorted
    /// set x). Kept `REMOVED_KEEP_MS`, at most `REMOVED_MAX` of them.
    pub(super) removed: HashMap<String, u64>,
    pub(super) removed_at: BTreeSet<(u64, String)>,
}

impl GateState {
    /// What expiry and promotion change: compared before and after a read
    /// to see whether it must be logged.
    fn moved(&self) -> (u64, u64, u64, usize, usize, usize, usize) {
        (
            self.grants,
            self.expiries,
            self.used,
            self.holders.len(),
            self.tickets.len(),
            self.revoked.len(),
            self.removed.len(),
        )
    }
}

/// At most this many aged entries of the revocation log are pruned per
/// end (as `PRUNE_STEP` in leave.lua).
pub(super) const PRUNE_STEP: usize = 1000;

/// At most this many ended leases, and as many stale tickets, are removed
/// per operation (as `EXPIRE_STEP` in prelude.lua): a gate where a huge
/// number ended at once sheds them over several operations, none of which
/// does much. Until then an ended lease still counts as held (its permits
/// are not granted again), which is safe; it can no longer be renewed,
/// released or picked up (`expire_one`).
pub(super) const EXPIRE_STEP: usize = 1000;

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct Holder {
    pub(super) expires: u64,
    pub(super) permits: u32,
    pub(super) fence: u64,
    /// Handed off to a waiter that has not picked it up yet; it lives only
    /// until the waiter's heartbeat deadline.
    pub(super) pending: bool,
    pub(super) label: Option<String>,
    /// Came through the line. `status` reports the fence only for these,
    /// as the Redis store does (an immediate grant's fence was in the
    /// answer to `enter`).
    pub(super) handed: bool,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct Ticket {
    /// Its place in `line`.
    pub(super) slot: u64,
    /// Its number: `seq` when it joined (as its score in Redis's q).
    pub(super) number: u64,
    pub(super) permits: u32,
    pub(super) deadline: u64,
    pub(super) label: Option<String>,
}

impl Shelved for GateState {
    fn is_blank(&self) -> bool {
        self.capacity.is_none()
            && self.fence == 0
            && self.seq == 0
            && !self.paused
            && self.admit_every_ms == 0
            && self.line_reset == 0
            && self.holders.is_empty()
            && self.tickets.is_empty()
            && self.revoked.is_empty()
            && self.removed.is_empty()
    }

    /// The last lease end, ticket deadline, revocation or removal kept, or
    /// admission slot: once all have passed, nothing the gate holds is of
    /// use.
    fn busy_until(&self) -> Option<u64> {
        let lease = self.holder_expiry.last().map_or(0, |(at, _)| *at);
        let ticket = self.ticket_deadline.last().map_or(0, |(at, _)| *at);
        let revoked = self
            .revoked
            .last_key_value()
            .map_or(0, |(score, _)| score / 1024 + self.revoke_keep_ms);
        let removed = self.removed_at.last().map_or(0, |(at, _)| at + REMOVED_KEEP_MS);
        Some(lease.max(ticket).max(revoked).max(removed).max(self.admit_at))
    }

    fn fence(&self) -> u64 {
        self.fence
    }

    fn set_fence_floor(&mut self, floor: u64) {
        self.fence_floor = floor;
    }

    fn weight(&self) -> usize {
        self.holders.len() + self.tickets.len() + self.revoked.len() + self.removed.len()
    }
}

impl GateState {
    pub(super) fn resolve_capacity(&mut self, asked: Option<u32>) -> Result<u32> {
        match (self.capacity, asked) {
            (Some(have), Some(want)) if have != want => Err(capacity_conflict(have, want)),
            (Some(have), _) => Ok(have),
            (None, Some(want)) => {
                self.capacity = Some(want);
                Ok(want)
            }
            (None, None) => Err(no_capacity()),
        }
    }

    /// Drops leases whose time is up and tickets whose owner stopped
    /// asking, the earliest first, at most `EXPIRE_STEP` of each.
    pub(super) fn expire(&mut self, now: u64) {
        for _ in 0..EXPIRE_STEP {
            let Some((_, id)) = self.holder_expiry.first().filter(|(at, _)| *at <= now).cloned() else {
                break;
            };
            self.expire_one(&id, now);
        }
        for _ in 0..EXPIRE_STEP {
            let Some((_, id)) = self.ticket_deadline.first().filter(|(at, _)| *at <= now).cloned() else {
                break;
            };
            self.drop_ticket(&id);
        }
    }

    /// Removes holder `id` if its lease has ended (an expiry); returns
    /// whether it did. Operations on one lease call this first, so a lease
    /// that ended but is not swept yet is gone for them.
    pub(super) fn expire_one(&mut self, id: &str, now: u64) -> bool {
        let Some(h) = self.holders.get(id).filter(|h| h.expires <= now) else {
            return false;
        };
        self.holder_expiry.remove(&(h.expires, id.to_owned()));
        if let Some(h) = self.holders.remove(id) {
            self.used -= u64::from(h.permits);
        }
        self.expiries += 1;
        true
    }

    /// Whether admission control lets one more in now.
    pub(super) fn may_admit(&self, now: u64) -> bool {
        !self.paused && (self.admit_every_ms == 0 || self.admit_at <= now)
    }

    /// How many barging waiters to wake after an operation that started
    /// from `before` (used, capacity, paused, admission interval): the
    /// permits it freed (a departure, a larger capacity, admission control
    /// let go) and left free with nobody in line, while someone may be
    /// waiting to barge in (as the scripts' `wake_barging`).
    fn freed_for_barging(&self, before: (u64, Option<u32>, bool, u64), now: u64) -> usize {
        let (used, capacity, paused, every) = before;
        let freed = self.used < used
            || self.capacity > capacity
            || (paused && !self.paused)
            || self.admit_every_ms < every;
        let Some(cap) = self.capacity else { return 0 };
        if !freed || self.barging_until <= now || !self.line.is_empty() || !self.may_admit(now) {
            return 0;
        }
        usize::try_from(u64::from(cap).saturating_sub(self.used)).unwrap_or(usize::MAX)
    }

    /// Spends one admission of the admission rate.
    pub(super) fn admitted(&mut self, now: u64) {
        if self.admit_every_ms > 0 {
            self.admit_at = self.admit_at.max(now) + self.admit_every_ms;
        }
    }

    /// Hands free permits to the head of the line, in order, while the head
    /// fits: a large request at the head is never overtaken by small ones.
    pub(super) fn promote(&mut self, now: u64, handed: &mut Vec<(String, u64)>) {
        let Some(capacity) = self.capacity else { return };
        while let Some((_, id)) = self.line.head() {
            let id = id.clone();
            let Some(t) = self.tickets.get(&id) else { break };
            let (permits, deadline) = (t.permits, t.deadline);
            if permits > capacity {
                // Capacity was lowered below what this ticket needs: it can
                // never be served, and must not block everyone behind it.
                self.drop_ticket(&id);
                continue;
            }
            if self.used + u64::from(permits) > u64::from(capacity) || !self.may_admit(now) {
                break;
            }
            self.admitted(now);
            let label = self.take_ticket(&id).and_then(|t| t.label);
            let fence = self.grant(&id, permits, deadline, now, true, label);
            self.line_moved(now);
            handed.push((id, fence));
        }
    }

    pub(super) fn grant(
        &mut self,
        id: &str,
        permits: u32,
        expires: u64,
        now: u64,
        pending: bool,
        label: Option<String>,
    ) -> u64 {
        // Every fence is above the last one, the clock (ms x 1000) and
        // every fence of a dropped state (which may have run ahead of the
        // clock: more than 1,000 grants a millisecond), so fences keep
        // growing whatever the store forgot or took back, as long as the
        // clock goes forward. The same rule as `next_fence` in
        // lua/prelude.lua.
        self.fence = self.fence.max(now * 1000).max(self.fence_floor) + 1;
        self.grants += 1;
        self.used += u64::from(permits);
        self.holders.insert(
            id.to_owned(),
            Holder {
                expires,
                permits,
                fence: self.fence,
                pending,
                label,
                handed: pending,
            },
        );
        self.holder_expiry.insert((expires, id.to_owned()));
        self.fence
    }

    /// Records a grant from the line now, for the estimated wait (as
    /// `line_moved` in lua/prelude.lua). Departures with nobody in line
    /// do not count: an idle gate's gaps say nothing of a line's pace.
    pub(super) fn line_moved(&mut self, now: u64) {
        if self.line_moved_at > 0 {
            let gap = now.saturating_sub(self.line_moved_at);
            self.gap_ms = Some(match self.gap_ms {
                None => gap,
                Some(avg) => (avg * 8 + gap * 2 + 5) / 10,
            });
        }
        self.line_moved_at = now;
    }

    /// A waiter's estimated wait, as `eta` in lua/prelude.lua.
    pub(super) fn eta(&self, position: u64) -> Option<Duration> {
        self.gap_ms.map(|gap| Duration::from_millis(position * gap))
    }

    pub(super) fn set_expiry(&mut self, id: &str, expires: u64) {
        if let Some(h) = self.holders.get_mut(id) {
            self.holder_expiry.remove(&(h.expires, id.to_owned()));
            h.expires = expires;
            h.pending = false;
            self.holder_expiry.insert((expires, id.to_owned()));
        }
    }

    /// Records the end of `id`'s lease in the revocation log, kept at least
    /// `keep` ms; prunes a bounded number of aged entries first.
    pub(super) fn record_end(&mut self, id: &str, now: u64, keep: u64) {
        let floor = now.saturating_sub(self.revoke_keep_ms) * 1024;
        for _ in 0..PRUNE_STEP {
            let Some(aged) = self.revoked.first_entry().filter(|e| *e.key() < floor) else {
                break;
            };
            self.revoked_score.remove(&aged.remove());
        }
        // An empty log starts the keep afresh; otherwise it covers every
        // entry still kept.
        let top = self.revoked.last_key_value().map(|(score, _)| *score);
        self.revoke_keep_ms = match top {
            None => keep,
            Some(_) => self.revoke_keep_ms.max(keep),
        };
        let score = (self.revoke_last + 1).max(now * 1024);
        self.revoke_last = score;
        if let Some(old) = self.revoked_score.insert(id.to_owned(), score) {
            self.revoked.remove(&old);
        }
        self.revoked.insert(score, id.to_owned());
    }

    /// Releases or cancels `id` (as leave.lua): freed permits go to the
    /// head of the line in the same step; with `keep_ms`, a released
    /// holder is recorded in the revocation log.
    pub(super) fn leave(
        &mut self,
        id: &str,
        keep_ms: Option<u64>,
        now: u64,
        handed: &mut Vec<(String, u64)>,
    ) -> Left {
        if self.expire_one(id, now) {
            // It ended before this call: an expiry, not a release.
            self.promote(now, handed);
            return Left::Unknown;
        }
        if let Some(h) = self.holders.remove(id) {
            self.holder_expiry.remove(&(h.expires, id.to_owned()));
            self.used -= u64::from(h.permits);
            if let Some(keep) = keep_ms {
                self.record_end(id, now, keep);
            }
            self.promote(now, handed);
            return Left::Released;
        }
        if self.drop_ticket(id) {
            // The head leaving may let the next one in.
            self.promote(now, handed);
            return Left::Cancelled;
        }
        Left::Unknown
    }

    pub(super) fn drop_ticket(&mut self, id: &str) -> bool {
        self.take_ticket(id).is_some()
    }

    pub(super) fn take_ticket(&mut self, id: &str) -> Option<Ticket> {
        let t = self.tickets.remove(id)?;
        self.line.remove(t.slot);
        self.ticket_deadline.remove(&(t.deadline, id.to_owned()));
        if self.line.sparse() {
            for (slot, id) in self.line.renumber() {
                if let Some(t) = self.tickets.get_mut(&id) {
                    t.slot = slot;
                }
            }
        }
        Some(t)
    }

    /// Remembers that an admin took ticket `id` out of the line now (as
    /// admin.lua's removal): aged records go first, then the oldest past
    /// `REMOVED_MAX`.
    pub(super) fn note_removed(&mut self, id: &str, now: u64) {
        while let Some((at, _)) = self.removed_at.first()
            && at + REMOVED_KEEP_MS <= now
        {
            self.forget_first_removed();
        }
        if let Some(at) = self.removed.insert(id.to_owned(), now) {
            self.removed_at.remove(&(at, id.to_owned()));
        }
        self.removed_at.insert((now, id.to_owned()));
        while self.removed_at.len() > REMOVED_MAX {
            self.forget_first_removed();
        }
    }

    fn forget_first_removed(&mut self) {
        if let Some((_, id)) = self.removed_at.pop_first() {
            self.removed.remove(&id);
        }
    }

    /// Whether an admin took ticket `id` out of the line within the last
    /// `REMOVED_KEEP_MS` (as poll.lua's look at x).
    pub(super) fn was_removed(&self, id: &str, now: u64) -> bool {
        self.removed.get(id).is_some_and(|at| at + REMOVED_KEEP_MS > now)
    }

    /// Drops every ticket in line, holders untouched, and notes when
    /// (as admin.lua's reset); returns how many were dropped.
    pub(super) fn clear_line(&mut self, now: u64) -> u64 {
        let dropped = self.tickets.len() as u64;
        self.tickets.clear();
        self.ticket_deadline.clear();
        self.line = Line::default();
        self.line_reset = now;
        dropped
    }

    /// Puts ticket `id` at the end of the line.
    /// A line that forms starts the clock of its pace (`line_moved`).
    pub(super) fn queue(&mut self, id: &str, permits: u32, deadline: u64, label: Option<String>, now: u64) {
        if self.line.is_empty() {
            self.line_moved_at = now;
        }
        self.seq += 1;
        let slot = self.line.push(id);
        self.ticket_deadline.insert((deadline, id.to_owned()));
        self.tickets.insert(
            id.to_owned(),
            Ticket {
                slot,
                number: self.seq,
                permits,
                deadline,
                label,
            },
        );
    }
}

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
        // Lua scripts make it (head.lua).
        let new = || GateState {
            epoch: stamp.us * 1000 + u64::from(self.draw(stamp) % 1000),
            ..GateState::default()
        };
        let mut free = 0;
        let out = self.gates.with(gate, now, self.idle_ms, touch, new, |state| {
            let before = (state.used, state.capacity, state.paused, state.admit_every_ms);
            // (Only a logged store needs to know what a read changed.)
            let seen = (log.is_none() && self.logging()).then(|| state.moved());
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
        let args = |b: &mut Vec<u8>| put(b, &enter_args(req));
        self.with_gate(gate, (Code::GateEnter, &args), |s, now, _| {
            let capacity = s.resolve_capacity(req.capacity)?;
            if req.permits > capacity {
                return Err(permits_exceed(req.permits, capacity));
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
            s.queue(
                req.id,
                req.permits,
                now + req.heartbeat_ms,
                req.label.map(str::to_owned),
                now,
            );
            let waiting = s.line.len() as u64;
            Ok(Entry::Queued(Place {
                position: waiting,
                waiting,
                eta: s.eta(waiting),
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
            let (slot, old) = (t.slot, t.deadline);
            t.deadline = now + hb_ms;
            s.ticket_deadline.remove(&(old, id.to_owned()));
            s.ticket_deadline.insert((now + hb_ms, id.to_owned()));
            let position = s.line.position(slot);
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
            let id = s
                .tickets
                .iter()
                .find(|(_, t)| t.number == number)
                .map(|(id, _)| id.clone());
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

/// Runs record `r` of this primitive again on `m`, whose time is pinned
/// to the record's (see `store/embedded/replay.rs`). Answers are dropped:
/// the state is what replay is for.
pub(crate) fn replay(m: &GateMemory<'_>, r: &replay::Record<'_>) -> Result<()> {
    let g = &r.name;
    match r.code {
        Code::GateEnter => {
            let (id, permits, capacity, ttl_ms, heartbeat_ms, queue, barge, label): EnterArgs<'_> =
                replay::args(r.args)?;
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
            let _ = m.enter(g, &req);
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
        Code::GateTouch => {
            let _ = m.on_gate(g, false, None, |_, _, _| Ok(()));
        }
        other => return Err(replay::misrouted(other)),
    }
    Ok(())
}
