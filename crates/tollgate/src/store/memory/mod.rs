//! The embedded store: every operation is one critical section over one
//! name's state. It is also the reference model the Redis scripts are
//! tested against, so it is written for clarity first.
//!
//! Each gate and each job queue has a lock of its own (see `shelf`), so a
//! flood on one never holds up another. A std `Mutex` (not tokio's) is
//! right here: no critical section awaits, and each is a bounded amount of
//! map work. Wake-ups are sent after the lock is dropped so a woken waiter
//! never contends with the waker.

mod gate;
mod line;
mod shelf;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};
use crate::name::Name;

use super::jobs::{PushOutcome, PushReq, Queue};
use super::limits::Limits;
use crate::limit::{Decision, Limit};

use self::gate::{GateState, permits_exceed};
use self::shelf::Shelf;
pub(crate) use self::shelf::Shelved;
use super::{
    EnterRequest, Entry, GateStats, GateWatch, Grant, Holding, Left, MemoryFootprint, Occupancy, Place, Poll,
    Wakers,
};

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
    clock: Arc<dyn Clock>,
    /// `MemoryOptions::idle` in ms.
    idle_ms: u64,
    gates: Shelf<GateState>,
    limits: Mutex<Limits>,
    queues: Shelf<Queue>,
    wakers: Arc<Wakers>,
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

    /// Runs `op` on job queue `q` (now in store ms); wakes as many sleeping
    /// consumers as it says (`true` is one).
    pub(crate) fn with_queue<T, W: Into<usize>>(
        &self,
        q: &Name,
        op: impl FnOnce(&mut Queue, u64) -> (T, W),
    ) -> T {
        self.on_queue(q, true, op)
    }

    /// `with_queue` for an operation that only reads (it does not keep an
    /// idle queue alive).
    pub(crate) fn read_queue<T>(&self, q: &Name, op: impl FnOnce(&mut Queue, u64) -> T) -> T {
        self.on_queue(q, false, |queue, now| (op(queue, now), false))
    }

    fn on_queue<T, W: Into<usize>>(
        &self,
        q: &Name,
        touch: bool,
        op: impl FnOnce(&mut Queue, u64) -> (T, W),
    ) -> T {
        let now = self.clock.now_ms();
        let (out, wake) = self
            .queues
            .with(q, now, self.idle_ms, touch, Queue::default, |queue| {
                op(queue, now)
            });
        let wake = wake.into();
        if wake > 0 {
            self.wakers.wake(&super::Store::job_wake_key(q), wake);
        }
        out
    }

    pub(crate) fn job_layout(&self, q: &Name, want: u32, expect: Option<u32>, store: bool) -> (u32, bool) {
        self.on_queue(q, store, |queue, _| (queue.layout(want, expect, store), false))
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
    /// the waiters that were handed a lease along the way. A gate without
    /// state gets a blank one, kept only if `op` wrote to it: a read (or a
    /// write that changed nothing) leaves no trace, as on Redis.
    fn with_gate<T>(
        &self,
        gate: &Name,
        op: impl FnOnce(&mut GateState, u64, &mut Vec<(String, u64)>) -> Result<T>,
    ) -> Result<T> {
        self.on_gate(gate, true, op)
    }

    /// `with_gate` for reads and heartbeats: they do not count as activity
    /// (see `Shelf::with`).
    fn read_gate<T>(
        &self,
        gate: &Name,
        op: impl FnOnce(&mut GateState, u64, &mut Vec<(String, u64)>) -> Result<T>,
    ) -> Result<T> {
        self.on_gate(gate, false, op)
    }

    fn on_gate<T>(
        &self,
        gate: &Name,
        touch: bool,
        op: impl FnOnce(&mut GateState, u64, &mut Vec<(String, u64)>) -> Result<T>,
    ) -> Result<T> {
        let now = self.clock.now_ms();
        let mut handed = Vec::new();
        let new = || GateState {
            epoch: self.new_epoch(),
            ..GateState::default()
        };
        let out = self.gates.with(gate, now, self.idle_ms, touch, new, |state| {
            state.expire(now);
            state.promote(now, &mut handed);
            op(state, now, &mut handed)
        });
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
            s.queue(
                req.id,
                req.permits,
                now + req.heartbeat_ms,
                req.label.map(str::to_owned),
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
        self.read_gate(gate, |s, now, handed| {
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
                return Ok(Poll::Unknown);
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
        self.with_gate(gate, |s, now, handed| {
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
        self.with_gate(gate, |s, now, handed| {
            if s.expire_one(id, now) {
                // It ended before this call: an expiry, not a release.
                s.promote(now, handed);
                return Ok(Left::Unknown);
            }
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
        self.read_gate(gate, |s, now, _| {
            // Leases that ended but are not swept yet are not listed.
            Ok(s.holder_expiry
                .range((now + 1, String::new())..)
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
    /// watch.lua): reads only, creates nothing, expires nothing, and does
    /// not count as activity (as on Redis, where a watch writes nothing).
    pub(crate) fn watch_state(&self, gate: &Name, since: u64, max: usize) -> GateWatch {
        let now = self.clock.now_ms();
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
            })
        })
    }
}
