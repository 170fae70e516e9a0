//! The gate's reference model: one gate's state and the steps every
//! operation is made of (expiry, promotion, grants, departures, the
//! line's pace), each naming its twin in the Lua. Pure: a step is a
//! function of the state, the arguments and the store's now; the
//! embedded store runs them in critical sections (`memory.rs`) and the
//! scripts in `lua/` are the same steps on Redis.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use crate::error::Result;

use crate::store::memory::Shelved;

use super::line::{DRAWN, Draw, Line};
use super::types::{
    Door, DrawRecord, Left, PICK_MOD, PICK_MUL, REMOVED_KEEP_MS, REMOVED_MAX, capacity_conflict, no_capacity,
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
    /// The door (as Redis's D and M): closed refuses every newcomer. Not
    /// in the gate's snapshot record, which predates it: a gate whose door
    /// is set has a record of its own kind (`GATE_DOOR`, see
    /// `store/embedded/snapshot.rs`).
    #[serde(skip)]
    pub(crate) door: Door,
    /// The tickets of the last draw that ended, head first (as Redis's
    /// key d). Like the draw under way, not in the gate's snapshot
    /// record (`GATE_DRAW`).
    #[serde(skip)]
    pub(crate) last_draw: DrawRecord,
    /// Random queueing's state (`Queueing::pick_state`; as Redis's O): the
    /// next grant from the line goes to the ticket at index `pick` mod
    /// its length. 0: first come, first served. Not in the gate's
    /// snapshot record either (`GATE_MORE`).
    #[serde(skip)]
    pub(crate) pick: u64,
}

/// The key space of one draw (as DRAW_SPAN in lua/general_state.lua): a
/// key is below it, and a draw takes that many numbers of the line's seq.
pub const DRAW_SPAN: u64 = 1 << 44;

/// How long a draw's record is kept (as DRAW_KEEP in
/// lua/general_state.lua): 7 days.
const DRAW_KEEP_MS: u64 = 7 * 24 * 3_600_000;

/// A line's seq never passes this (numbers stay exact in Lua's doubles);
/// a draw that would is not started, and its tickets join in turn.
const SEQ_MAX: u64 = 1 << 53;

/// What the gate's snapshot record does not carry of a draw: the draw
/// under way and the last one's tickets.
pub(crate) type DrawState = (Option<Draw>, DrawRecord);

impl GateState {
    /// What expiry and promotion change: compared before and after a read
    /// to see whether it must be logged.
    pub(super) fn moved(&self) -> (u64, u64, u64, usize, usize, usize, usize, bool) {
        (
            self.grants,
            self.expiries,
            self.used,
            self.holders.len(),
            self.tickets.len(),
            self.revoked.len(),
            self.removed.len(),
            self.line.draw.is_some(),
        )
    }

    /// The draw's state, for the snapshot.
    pub(crate) fn draw_state(&self) -> Option<DrawState> {
        (self.line.draw.is_some() || self.last_draw.ended_at_ms > 0)
            .then(|| (self.line.draw.clone(), self.last_draw.clone()))
    }

    /// Puts back a draw's state read from a snapshot.
    pub(crate) fn restore_draw(&mut self, (draw, last): DrawState) {
        self.line.draw = draw;
        self.last_draw = last;
    }

    /// Runs the door's timers due at `now` (`Door::tick`); an opening
    /// ends the draw under way (as general_state.lua).
    pub(super) fn tick_door(&mut self, now: u64) {
        self.door.tick(now);
        if self.door.opens_at_ms.is_none() {
            self.end_draw(now);
        }
    }

    /// Ends the draw under way, if any: its tickets, head first, are the
    /// last draw's record, and the line is one again (as F.end_draw in
    /// lua/general_state.lua).
    fn end_draw(&mut self, now: u64) {
        let Some((drawn, moved)) = self.line.end_draw() else {
            return;
        };
        for (slot, id) in moved {
            if let Some(t) = self.tickets.get_mut(&id) {
                t.slot = slot;
            }
        }
        // (Redis keeps no empty record: an empty draw leaves the last.)
        if !drawn.is_empty() {
            self.last_draw = DrawRecord {
                ended_at_ms: now,
                tickets: drawn,
            };
        }
    }
}

/// At most this many aged entries of the revocation log are pruned per
/// end (as `PRUNE_STEP` in leave.lua).
pub(super) const PRUNE_STEP: usize = 1000;

/// At most this many ended leases, and as many stale tickets, are removed
/// per operation (as `EXPIRE_STEP` in general_expire.lua): a gate where a huge
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

/// What `GateState::queue` needs of a new ticket.
pub(super) struct NewTicket {
    pub(super) permits: u32,
    pub(super) deadline: u64,
    pub(super) label: Option<String>,
    /// Its order key in a draw (see `GateState::queue`).
    pub(super) key: Option<u64>,
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
            && self.door.is_blank()
            && self.last_draw.ended_at_ms == 0
            && self.pick == 0
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
        // (A door's timers keep the gate until they have run; a draw's
        // record, as long as Redis keeps its own.)
        let timers = self.door.opens_at_ms.max(self.door.closes_at_ms).unwrap_or(0);
        let record = match self.last_draw.ended_at_ms {
            0 => 0,
            at => at + DRAW_KEEP_MS,
        };
        Some(
            lease
                .max(ticket)
                .max(revoked)
                .max(removed)
                .max(self.admit_at)
                .max(timers)
                .max(record),
        )
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
        !self.paused && self.door.opens_at_ms.is_none() && (self.admit_every_ms == 0 || self.admit_at <= now)
    }

    /// Whether admissions are held (paused, or the door not open yet): a
    /// change of it may free permits for barging waiters.
    pub(super) fn held(&self) -> bool {
        self.paused || self.door.opens_at_ms.is_some()
    }

    /// How many barging waiters to wake after an operation that started
    /// from `before` (used, capacity, paused, admission interval): the
    /// permits it freed (a departure, a larger capacity, admission control
    /// let go) and left free with nobody in line, while someone may be
    /// waiting to barge in (as the scripts' `wake_barging`).
    pub(super) fn freed_for_barging(&self, before: (u64, Option<u32>, bool, u64), now: u64) -> usize {
        let (used, capacity, paused, every) = before;
        let freed = self.used < used
            || self.capacity > capacity
            || (paused && !self.held())
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
    /// With random queueing the ticket picked (`pick`) stands for the
    /// head, and each grant moves the pick on (as F.promote in
    /// lua/general_grant.lua).
    pub(super) fn promote(&mut self, now: u64, handed: &mut Vec<(String, u64)>) {
        let Some(capacity) = self.capacity else { return };
        while !self.line.is_empty() {
            let picked = if self.pick > 0 {
                self.line.nth((self.pick % self.line.len() as u64) as usize)
            } else {
                self.line.head()
            };
            let Some(id) = picked else { break };
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
            if self.pick > 0 {
                self.pick = self.pick * PICK_MUL % PICK_MOD;
            }
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
        // lua/general_grant.lua.
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
    /// `line_moved` in lua/general_line.lua, with lua/line_pace.lua's
    /// formula). Departures with nobody in line do not count: an idle
    /// gate's gaps say nothing of a line's pace.
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

    /// A waiter's estimated wait, as `eta` in lua/general_line.lua.
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
        self.line.remove(t.slot, t.number, id);
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

    /// Puts ticket `id` at the end of the line, or with an order key
    /// (below `DRAW_SPAN`) while the door holds for an opening, in its
    /// place in the draw: behind everyone who joined before the draw
    /// began, ahead of everyone who joins the line after, in the order of
    /// the keys (as enter.lua). Returns its number.
    /// A line that forms starts the clock of its pace (`line_moved`).
    pub(super) fn queue(&mut self, id: &str, ticket: NewTicket, now: u64) -> u64 {
        if self.line.is_empty() {
            self.line_moved_at = now;
        }
        let drawn = ticket
            .key
            .filter(|_| self.door.opens_at_ms.is_some())
            .and_then(|key| {
                // A draw begun with nobody in line starts the seq again.
                if self.line.draw.is_none() && self.line.is_empty() {
                    self.seq = 0;
                }
                if self.line.draw.is_none() && self.seq + 1 + DRAW_SPAN < SEQ_MAX {
                    self.line.start_draw(self.seq + 1);
                    self.seq += 1 + DRAW_SPAN;
                }
                self.line.draw.as_ref().map(|d| d.base + key)
            });
        let (slot, number) = match drawn {
            Some(number) => {
                self.line.push_drawn(number, id);
                (DRAWN, number)
            }
            None => {
                self.seq += 1;
                (self.line.push(id), self.seq)
            }
        };
        self.ticket_deadline.insert((ticket.deadline, id.to_owned()));
        self.tickets.insert(
            id.to_owned(),
            Ticket {
                slot,
                number,
                permits: ticket.permits,
                deadline: ticket.deadline,
                label: ticket.label,
            },
        );
        number
    }
}

#[cfg(test)]
mod tests {
    use super::{GateState, NewTicket};

    /// Random queueing is a fair lottery for every place: over 2,000
    /// lines of 10 with picks from random seeds, whoever gets the first
    /// place, and the second among the 9 left, is uniform over arrival
    /// order (chi-square, α = 0.001: 27.88 for 9 degrees of freedom,
    /// 26.12 for 8). The control, first come, first served, fails it.
    #[test]
    fn random_picks_are_uniform_over_the_line() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(39);
        let picks = |seed: Option<u64>| {
            let mut s = GateState {
                capacity: Some(1),
                ..GateState::default()
            };
            let mut handed = Vec::new();
            s.grant("holder", 1, u64::MAX, 0, false, None);
            for i in 0..10 {
                let t = NewTicket {
                    permits: 1,
                    deadline: u64::MAX,
                    label: None,
                    key: None,
                };
                s.queue(&format!("t{i}"), t, 0);
            }
            s.pick = seed.map_or(0, |seed| crate::Queueing::Random { seed }.pick_state());
            // The holder leaves, then the first winner: two places handed.
            let _ = s.leave("holder", None, 0, &mut handed);
            let first = handed.first().expect("a place handed").0.clone();
            let _ = s.leave(&first, None, 0, &mut handed);
            handed
                .iter()
                .map(|(won, _)| won[1..].parse::<usize>().expect("t<i>"))
                .collect::<Vec<_>>()
        };
        let chi = |counts: &[u64]| {
            let n: u64 = counts.iter().sum();
            let e = n as f64 / counts.len() as f64;
            counts.iter().map(|c| (*c as f64 - e).powi(2) / e).sum::<f64>()
        };
        let (mut first, mut second) = ([0u64; 10], [0u64; 10]);
        for _ in 0..2_000 {
            let p = picks(Some(rng.random()));
            first[p[0]] += 1;
            // The second place's rank among the 9 left.
            second[p[1] - usize::from(p[1] > p[0])] += 1;
        }
        assert!(chi(&first) < 27.88, "first place {first:?}: chi2 {}", chi(&first));
        assert!(
            chi(&second[..9]) < 26.12,
            "second place {second:?}: chi2 {}",
            chi(&second[..9])
        );
        assert_eq!(second[9], 0);
        let mut fifo = [0u64; 10];
        for _ in 0..100 {
            fifo[picks(None)[0]] += 1;
        }
        assert!(
            chi(&fifo) > 27.88,
            "the control: first come, first served is not uniform"
        );
    }
}
