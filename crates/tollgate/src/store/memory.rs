//! The embedded store: every operation is one critical section over one
//! gate's state. It is also the reference model the Redis scripts are tested
//! against, so it is written for clarity first.
//!
//! A std `Mutex` (not tokio's) is right here: no critical section awaits, and
//! each is a handful of map operations. Wake-ups are sent after the lock is
//! dropped so a woken waiter never contends with the waker.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::clock::Clock;
use crate::error::{Error, ErrorKind, Result};
use crate::name::Name;

use super::jobs::{PushOutcome, PushReq, Queue};
use super::limits::Limits;
use crate::limit::{Decision, Limit};

use super::{
    EnterRequest, Entry, GateStats, GateWatch, Grant, Holding, Left, MemoryFootprint, Occupancy, Place, Poll,
    Wakers,
};

#[derive(Debug)]
pub(crate) struct MemoryStore {
    clock: Arc<dyn Clock>,
    gates: Mutex<HashMap<Name, GateState>>,
    limits: Mutex<Limits>,
    queues: Mutex<HashMap<Name, Queue>>,
    wakers: Arc<Wakers>,
}

#[derive(Debug, Default)]
struct GateState {
    /// This incarnation of the state (see `GateWatch::epoch`).
    epoch: u64,
    capacity: Option<u32>,
    /// Last fencing token; 0 until the first grant.
    fence: u64,
    /// Line order: a counter, never a timestamp.
    seq: u64,
    grants: u64,
    expiries: u64,
    used: u64,
    /// Moving average of the gap between departures (ms), once measured.
    gap_ms: Option<u64>,
    /// When the last holder departed (ms; 0: never).
    last_departure: u64,
    /// Admission control: no new grants while paused; at most one grant
    /// per `admit_every_ms` (0: no limit), the next allowed at `admit_at`.
    paused: bool,
    admit_every_ms: u64,
    admit_at: u64,
    holders: HashMap<String, Holder>,
    holder_expiry: BTreeSet<(u64, String)>,
    line: BTreeMap<u64, String>,
    tickets: HashMap<String, Ticket>,
    ticket_deadline: BTreeSet<(u64, String)>,
    /// The revocation log: score -> token of a holder that ended, and the
    /// way back (as Redis's sorted set r: one entry per token). A score is
    /// the end's time in ms × 1024, or one more than the last if that is
    /// more, so scores strictly increase and serve as readers' cursors.
    revoked: BTreeMap<u64, String>,
    revoked_score: HashMap<String, u64>,
    /// The longest keep (ms) of the log's entries: nothing younger is
    /// pruned, nothing older is read.
    revoke_keep_ms: u64,
}

/// At most this many aged entries of the revocation log are pruned per
/// end (as `PRUNE_STEP` in leave.lua).
const PRUNE_STEP: usize = 1000;

#[derive(Debug)]
struct Holder {
    expires: u64,
    permits: u32,
    fence: u64,
    /// Handed off to a waiter that has not picked it up yet; it lives only
    /// until the waiter's heartbeat deadline.
    pending: bool,
    label: Option<String>,
    /// Came through the line. `status` reports the fence only for these,
    /// as the Redis store does (an immediate grant's fence was in the
    /// answer to `enter`).
    handed: bool,
}

#[derive(Debug)]
struct Ticket {
    seq: u64,
    permits: u32,
    deadline: u64,
    label: Option<String>,
}

impl MemoryStore {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        MemoryStore {
            clock,
            gates: Mutex::new(HashMap::new()),
            limits: Mutex::default(),
            queues: Mutex::default(),
            wakers: Arc::default(),
        }
    }

    /// How many names hold state now.
    pub(crate) fn footprint(&self) -> MemoryFootprint {
        MemoryFootprint {
            gates: self.gates.lock().unwrap_or_else(PoisonError::into_inner).len(),
            queues: self.queues.lock().unwrap_or_else(PoisonError::into_inner).len(),
            limit_keys: self.limits.lock().unwrap_or_else(PoisonError::into_inner).len(),
        }
    }

    pub(crate) fn wakers(&self) -> Arc<Wakers> {
        self.wakers.clone()
    }

    /// Runs `op` on job queue `q` (now in store ms); wakes as many sleeping
    /// consumers as it says (`true` is one).
    pub(crate) fn with_queue<T, W: Into<usize>>(
        &self,
        q: &Name,
        op: impl FnOnce(&mut Queue, u64) -> (T, W),
    ) -> T {
        let now = self.clock.now_ms();
        let (out, wake) = {
            let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
            match queues.get_mut(q) {
                Some(queue) => op(queue, now),
                None => {
                    // A read of a queue nobody wrote to leaves no trace.
                    let mut queue = Queue::default();
                    let out = op(&mut queue, now);
                    if !queue.is_blank() {
                        queues.insert(q.clone(), queue);
                    }
                    out
                }
            }
        };
        let wake = wake.into();
        if wake > 0 {
            self.wakers.wake(&super::Store::job_wake_key(q), wake);
        }
        out
    }

    pub(crate) fn job_layout(&self, q: &Name, want: u32, expect: Option<u32>, store: bool) -> (u32, bool) {
        self.with_queue(q, |queue, _| (queue.layout(want, expect, store), false))
    }

    /// `None` if the queue is retired (a partition of a replaced layout).
    pub(crate) fn job_push(&self, q: &Name, reqs: &[PushReq<'_>]) -> Option<Vec<PushOutcome>> {
        self.with_queue(q, |queue, now| {
            if queue.retired {
                return (None, 0);
            }
            let mut woken = 0;
            let outcomes = reqs
                .iter()
                .map(|req| {
                    let (outcome, wake) = queue.push(req, now);
                    woken += usize::from(wake);
                    outcome
                })
                .collect();
            (Some(outcomes), woken)
        })
    }

    pub(crate) fn job_retire(&self, q: &Name, close: bool) -> (bool, [u64; 4]) {
        self.with_queue(q, |queue, _| (queue.retire(close), false))
    }

    pub(crate) fn limit(&self, limiter: &Name, key: &str, limit: &Limit, cost: u64) -> Decision {
        let now = self.clock.now_us();
        let mut limits = self.limits.lock().unwrap_or_else(PoisonError::into_inner);
        limits.check(limiter, key, limit, cost, now)
    }

    /// A fresh epoch: the clock in µs and three random digits, as the Lua
    /// scripts make it (head.lua).
    fn new_epoch(&self) -> u64 {
        self.clock.now_us() * 1000 + rand::random_range(0..1000)
    }

    /// Runs `op` on the gate's state after expiring what ended, then wakes
    /// the waiters that were handed a lease along the way.
    fn with_gate<T>(
        &self,
        gate: &Name,
        op: impl FnOnce(&mut GateState, u64, &mut Vec<(String, u64)>) -> Result<T>,
    ) -> Result<T> {
        let now = self.clock.now_ms();
        let mut handed = Vec::new();
        let out = {
            let mut gates = self.gates.lock().unwrap_or_else(PoisonError::into_inner);
            match gates.get_mut(gate) {
                Some(state) => {
                    state.expire(now);
                    state.promote(now, &mut handed);
                    op(state, now, &mut handed)
                }
                None => {
                    // The operation runs on a blank state, kept only if it
                    // wrote something: a read (or a write that changed
                    // nothing) of a gate without state leaves no trace, as
                    // on Redis.
                    let mut state = GateState::default();
                    let out = op(&mut state, now, &mut handed);
                    if !state.is_blank() {
                        state.epoch = self.new_epoch();
                        gates.insert(gate.clone(), state);
                    }
                    out
                }
            }
        };
        for (id, fence) in &handed {
            self.wakers.hand_off(id, *fence);
        }
        out
    }

    pub(crate) fn enter(&self, gate: &Name, req: &EnterRequest<'_>) -> Result<Entry> {
        self.with_gate(gate, |s, now, _| {
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
                return Ok(Entry::Busy(Occupancy {
                    used: s.used,
                    capacity,
                    waiting: s.line.len() as u64,
                }));
            }
            s.seq += 1;
            let deadline = now + req.heartbeat_ms;
            s.line.insert(s.seq, req.id.to_owned());
            s.ticket_deadline.insert((deadline, req.id.to_owned()));
            s.tickets.insert(
                req.id.to_owned(),
                Ticket {
                    seq: s.seq,
                    permits: req.permits,
                    deadline,
                    label: req.label.map(str::to_owned),
                },
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
        self.with_gate(gate, |s, now, _| {
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
                return Ok(Poll::Unknown);
            };
            let (seq, old) = (t.seq, t.deadline);
            t.deadline = now + hb_ms;
            s.ticket_deadline.remove(&(old, id.to_owned()));
            s.ticket_deadline.insert((now + hb_ms, id.to_owned()));
            let position = s.line.range(..=seq).count() as u64;
            Ok(Poll::Queued(Place {
                position,
                waiting: s.line.len() as u64,
                eta: s.eta(position),
            }))
        })
    }

    pub(crate) fn renew(&self, gate: &Name, id: &str, ttl_ms: u64) -> Result<Option<Grant>> {
        self.with_gate(gate, |s, now, _| {
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
        self.with_gate(gate, |s, now, handed| {
            if let Some(h) = s.holders.remove(id) {
                s.holder_expiry.remove(&(h.expires, id.to_owned()));
                s.used -= u64::from(h.permits);
                s.depart(now);
                if let Some(keep) = keep_ms {
                    s.record_end(id, now, keep);
                }
                s.promote(now, handed);
                return Ok(Left::Released);
            }
            if s.drop_ticket(id) {
                // The head leaving may let the next one in.
                s.promote(now, handed);
                return Ok(Left::Cancelled);
            }
            Ok(Left::Unknown)
        })
    }

    pub(crate) fn set_capacity(&self, gate: &Name, capacity: u32) -> Result<()> {
        self.with_gate(gate, |s, now, handed| {
            s.capacity = Some(capacity);
            s.promote(now, handed);
            Ok(())
        })
    }

    pub(crate) fn set_admission(
        &self,
        gate: &Name,
        paused: Option<bool>,
        every_ms: Option<u64>,
    ) -> Result<()> {
        self.with_gate(gate, |s, now, handed| {
            if let Some(p) = paused {
                s.paused = p;
            }
            if let Some(every) = every_ms {
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
        self.with_gate(gate, |s, now, _| {
            Ok(s.holder_expiry
                .iter()
                .take(limit as usize)
                .filter_map(|(expires, id)| {
                    s.holders.get(id).map(|h| Holding {
                        label: h.label.clone(),
                        ttl: Duration::from_millis(expires.saturating_sub(now)),
                    })
                })
                .collect())
        })
    }

    /// The gate's epoch, settings and revocation log from `since` on (see
    /// watch.lua): reads only, creates nothing, expires nothing.
    pub(crate) fn watch_state(&self, gate: &Name, since: u64, max: usize) -> GateWatch {
        let now = self.clock.now_ms();
        let gates = self.gates.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(s) = gates.get(gate) else {
            return GateWatch {
                cursor: now * 1024,
                ..GateWatch::default()
            };
        };
        let from = since.max(now.saturating_sub(s.revoke_keep_ms) * 1024);
        let page: Vec<(u64, &String)> = s.revoked.range(from..).take(max).map(|(k, v)| (*k, v)).collect();
        let cursor = match page.last() {
            Some((last, _)) if page.len() == max => last + 1,
            _ => s
                .revoked
                .last_key_value()
                .map_or(0, |(top, _)| top + 1)
                .max(now * 1024),
        };
        GateWatch {
            epoch: Some(s.epoch),
            capacity: s.capacity,
            paused: s.paused,
            admission_interval: (s.admit_every_ms > 0).then(|| Duration::from_millis(s.admit_every_ms)),
            revoked: page.into_iter().map(|(_, id)| id.clone()).collect(),
            cursor,
        }
    }

    pub(crate) fn stats(&self, gate: &Name) -> Result<GateStats> {
        self.with_gate(gate, |s, _, _| {
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
            })
        })
    }
}

fn permits_exceed(permits: u32, capacity: u32) -> Error {
    Error::invalid(format!(
        "asked for {permits} permits but the gate's capacity is {capacity}"
    ))
}

impl GateState {
    /// Nothing was ever written to it (see `with_gate`).
    fn is_blank(&self) -> bool {
        self.capacity.is_none()
            && self.fence == 0
            && self.seq == 0
            && !self.paused
            && self.admit_every_ms == 0
            && self.holders.is_empty()
            && self.tickets.is_empty()
            && self.revoked.is_empty()
    }

    fn resolve_capacity(&mut self, asked: Option<u32>) -> Result<u32> {
        match (self.capacity, asked) {
            (Some(have), Some(want)) if have != want => Err(Error::new(
                ErrorKind::CapacityConflict,
                format!(
                    "the gate's capacity is {have}, the request says {want}; change it with set_capacity"
                ),
            )),
            (Some(have), _) => Ok(have),
            (None, Some(want)) => {
                self.capacity = Some(want);
                Ok(want)
            }
            (None, None) => Err(Error::new(
                ErrorKind::NoCapacity,
                "the gate has no capacity yet; name one in the request or set_capacity",
            )),
        }
    }

    /// Drops leases whose time is up and tickets whose owner stopped asking.
    fn expire(&mut self, now: u64) {
        while let Some((expires, id)) = self.holder_expiry.first().cloned() {
            if expires > now {
                break;
            }
            self.holder_expiry.pop_first();
            if let Some(h) = self.holders.remove(&id) {
                self.used -= u64::from(h.permits);
                self.expiries += 1;
                self.depart(now);
            }
        }
        while let Some((deadline, id)) = self.ticket_deadline.first().cloned() {
            if deadline > now {
                break;
            }
            self.drop_ticket(&id);
        }
    }

    /// Hands free permits to the head of the line, in order, while the head
    /// fits: a large request at the head is never overtaken by small ones.
    /// Whether admission control lets one more in now.
    fn may_admit(&self, now: u64) -> bool {
        !self.paused && (self.admit_every_ms == 0 || self.admit_at <= now)
    }

    /// Spends one admission of the admission rate.
    fn admitted(&mut self, now: u64) {
        if self.admit_every_ms > 0 {
            self.admit_at = self.admit_at.max(now) + self.admit_every_ms;
        }
    }

    fn promote(&mut self, now: u64, handed: &mut Vec<(String, u64)>) {
        let Some(capacity) = self.capacity else { return };
        while let Some((_, id)) = self.line.first_key_value() {
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
            handed.push((id, fence));
        }
    }

    fn grant(
        &mut self,
        id: &str,
        permits: u32,
        expires: u64,
        now: u64,
        pending: bool,
        label: Option<String>,
    ) -> u64 {
        // Fences start from the clock so they keep growing even if the state
        // is lost (a restarted process), as long as the clock does.
        if self.fence == 0 {
            self.fence = now * 1000;
        }
        self.fence += 1;
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

    /// Records a departure, for the estimated wait (as the Lua prelude).
    fn depart(&mut self, now: u64) {
        if self.last_departure > 0 {
            let gap = now.saturating_sub(self.last_departure);
            self.gap_ms = Some(match self.gap_ms {
                None => gap,
                Some(avg) => (avg * 8 + gap * 2 + 5) / 10,
            });
        }
        self.last_departure = now;
    }

    fn eta(&self, position: u64) -> Option<Duration> {
        self.gap_ms.map(|gap| Duration::from_millis(position * gap))
    }

    fn set_expiry(&mut self, id: &str, expires: u64) {
        if let Some(h) = self.holders.get_mut(id) {
            self.holder_expiry.remove(&(h.expires, id.to_owned()));
            h.expires = expires;
            h.pending = false;
            self.holder_expiry.insert((expires, id.to_owned()));
        }
    }

    /// Records the end of `id`'s lease in the revocation log, kept at least
    /// `keep` ms; prunes a bounded number of aged entries first.
    fn record_end(&mut self, id: &str, now: u64, keep: u64) {
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
        let score = top.map_or(0, |t| t + 1).max(now * 1024);
        if let Some(old) = self.revoked_score.insert(id.to_owned(), score) {
            self.revoked.remove(&old);
        }
        self.revoked.insert(score, id.to_owned());
    }

    fn drop_ticket(&mut self, id: &str) -> bool {
        self.take_ticket(id).is_some()
    }

    fn take_ticket(&mut self, id: &str) -> Option<Ticket> {
        let t = self.tickets.remove(id)?;
        self.line.remove(&t.seq);
        self.ticket_deadline.remove(&(t.deadline, id.to_owned()));
        Some(t)
    }
}
