//! A held lease ([`Lease`]): renewed in the background from the store's
//! timers, its loss never silent, released explicitly or, when dropped,
//! in a spawned best-effort task; a release on a non-fair handle passes
//! its permits on to an acquire waiting in this process.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::{Error, ErrorKind, Result};
use crate::name::{Name, check_ttl};
use crate::store::timers::Timed;

use super::bargers::Taken;
use super::handle::{Gate, InLine, MAX_PASSES, lost};
use super::types::{Left, Pass};

/// A held lease: some permits of a gate, until released or expired.
///
/// Release it with [`Lease::release`]. If dropped instead, it is released
/// in a spawned best-effort task. Its loss (expiry, or renewal failing until
/// the lease ran out) is never silent: [`Lease::lost`] resolves.
#[derive(Debug)]
pub struct Lease {
    shared: Arc<Shared>,
    /// Released (or known lost): nothing left for `Drop` to do.
    done: bool,
}

#[derive(Debug)]
struct Shared {
    gate: Gate,
    token: String,
    fence: u64,
    permits: u32,
    clock: Mutex<LeaseClock>,
    /// The generation of the lease's one live entry in the store's timers
    /// (`store/timers.rs`); 0 once the lease is released or dropped, so no
    /// entry of it fires again. Changed only under `clock`'s lock, so a
    /// renewal's answer never overwrites a newer `extend`.
    timer: AtomicU64,
    lost: watch::Sender<bool>,
    /// How many releases in a row passed their permits on to reach this
    /// lease (0: granted by the store on its own).
    passes: u32,
    /// No renewal carries the lease past this ([`GateOptions::max_hold`](crate::GateOptions::max_hold)
    /// from when the granting request was sent).
    hold_until: Option<Instant>,
}

#[derive(Debug, Clone, Copy)]
struct LeaseClock {
    /// When the request that granted or last renewed the lease was sent:
    /// the store's deadline is at least the granted TTL after this.
    sent: Instant,
    /// The lease's end by this process's clock (a safe underestimate).
    deadline: Instant,
    /// TTL to renew with.
    ttl_ms: u64,
}

impl Lease {
    pub(super) fn start(
        gate: Gate,
        token: String,
        permits: u32,
        fence: u64,
        sent: Instant,
        deadline: Instant,
        passes: u32,
    ) -> Lease {
        let clock = LeaseClock {
            sent,
            deadline,
            ttl_ms: gate.ttl_ms,
        };
        let shared = Arc::new(Shared {
            token,
            fence,
            permits,
            clock: Mutex::new(clock),
            timer: AtomicU64::new(1),
            lost: watch::Sender::new(false),
            passes,
            hold_until: gate.max_hold.map(|d| sent + d),
            gate,
        });
        shared.schedule(1, shared.next_look(&clock));
        Lease { shared, done: false }
    }

    /// The fencing token: pass it to the resource you protect and have it
    /// reject writes with a smaller one than it has seen.
    pub fn fence(&self) -> u64 {
        self.shared.fence
    }

    /// The owner token.
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// Permits this lease holds.
    pub fn permits(&self) -> u32 {
        self.shared.permits
    }

    /// The gate's name.
    pub fn gate(&self) -> &Name {
        &self.shared.gate.name
    }

    /// When the lease ends unless renewed, by this process's clock (a safe
    /// underestimate of the store's).
    pub fn expires_at(&self) -> Instant {
        self.shared.clock().deadline
    }

    /// Whether the lease is known to be lost.
    pub fn is_lost(&self) -> bool {
        *self.shared.lost.borrow()
    }

    /// Resolves when the lease is lost: it expired, renewal was refused, or
    /// renewal kept failing until the lease ran out. Never resolves for a
    /// lease that is released in time.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.shared.lost.subscribe();
        async move {
            if rx.wait_for(|lost| *lost).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Extends the lease to `ttl` from now (and uses `ttl` for automatic
    /// renewals from then on). Fails with [`ErrorKind::LeaseLost`](crate::ErrorKind::LeaseLost) if it had
    /// already ended.
    ///
    /// With [`GateOptions::max_hold`](crate::GateOptions::max_hold), the
    /// lease is extended no further than grant + max_hold, and once that
    /// is less than 10 ms away the extension is refused with
    /// [`ErrorKind::LeaseLost`](crate::ErrorKind::LeaseLost).
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        let ttl_ms = check_ttl("ttl", ttl)?;
        let s = &self.shared;
        let sent = Instant::now();
        let Some(ttl_ms) = s.capped(ttl_ms, sent) else {
            return Err(Error::new(
                ErrorKind::LeaseLost,
                "the lease reached its max_hold: it is not extended further",
            ));
        };
        match s.gate.store.renew(&s.gate.name, &s.token, ttl_ms).await? {
            Some(g) => {
                let clock = LeaseClock {
                    sent,
                    deadline: sent + Duration::from_millis(g.ttl_ms),
                    ttl_ms,
                };
                // The next renewal (or expiry check) moves with the new
                // span; whatever was scheduled before is superseded.
                let mut c = s.clock.lock().unwrap_or_else(PoisonError::into_inner);
                let current = s.timer.load(AtomicOrdering::SeqCst);
                let next = current + 1;
                let moved = current != 0
                    && s.timer
                        .compare_exchange(current, next, AtomicOrdering::SeqCst, AtomicOrdering::SeqCst)
                        .is_ok();
                *c = clock;
                drop(c);
                if moved {
                    s.schedule(next, s.next_look(&clock));
                }
                Ok(())
            }
            None => {
                s.mark_lost();
                Err(lost())
            }
        }
    }

    /// Releases the lease; its permits go to the head of the line at once.
    /// Fails with [`ErrorKind::LeaseLost`](crate::ErrorKind::LeaseLost) if it had already ended, since the
    /// work done under it may not have been exclusive.
    ///
    /// On a non-fair handle ([`GateOptions::fair`](crate::GateOptions::fair) false) whose gate has
    /// acquires waiting in this process, the release passes its permits
    /// straight on to the first of them that fits, in the same step, if
    /// nobody waits in the gate's line (they come first). At most
    /// [`MAX_PASSES`] releases in a row pass; the next one frees its
    /// permits for every waiter, in every process, to race for.
    pub async fn release(mut self) -> Result<()> {
        self.shared.stop();
        let s = &self.shared;
        let taken = if s.gate.fair || s.passes >= MAX_PASSES {
            None
        } else {
            s.gate.store.bargers().take(s.gate.name.as_str(), s.permits)
        };
        let left = match taken {
            None => s.gate.store.leave(&s.gate.name, &s.token).await,
            Some(to) => s.pass(to).await,
        };
        // On a store error `done` stays false and Drop tries once more.
        let left = left?;
        self.done = true;
        if left == Left::Unknown {
            s.mark_lost();
            return Err(lost());
        }
        Ok(())
    }
}

impl Lease {
    /// Stops renewing and lets the lease end `hold` from now by the store's
    /// clock, with no release call and nothing left running: the permits
    /// stay taken until then even if this process exits at once. A hold
    /// under 10 ms releases now. This is how a job that finished early
    /// keeps a lock for a minimum time (`lock run --min-hold`), so that
    /// late starters on other machines find it taken. Fails with
    /// [`ErrorKind::LeaseLost`](crate::ErrorKind::LeaseLost) if the lease had already ended.
    pub async fn release_after(mut self, hold: Duration) -> Result<()> {
        if hold < crate::MIN_TTL {
            return self.release().await;
        }
        let ttl_ms = check_ttl("hold", hold)?;
        self.shared.stop();
        let s = &self.shared;
        // Never released from here on, not even by Drop: if the store
        // cannot be told, the lease ends at its current deadline.
        self.done = true;
        // The renewal sets the lease's end to now + hold on the store's
        // clock: it shortens a longer lease as well as it extends one.
        let renewed = s.gate.store.renew(&s.gate.name, &s.token, ttl_ms).await?;
        if renewed.is_none() {
            s.mark_lost();
            return Err(lost());
        }
        Ok(())
    }
}

impl Lease {
    /// The lease was held (or is within 10 ms of being held) for its
    /// [`GateOptions::max_hold`](crate::GateOptions::max_hold): it is no
    /// longer renewed, and its loss (if [`Lease::lost`] resolved) came
    /// from the cap, not from the store.
    pub fn reached_max_hold(&self) -> bool {
        self.shared
            .hold_until
            .is_some_and(|until| Instant::now() + crate::MIN_TTL >= until)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.shared.stop();
        if self.done {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let s = self.shared.clone();
            rt.spawn(async move {
                let _ = s.gate.store.leave(&s.gate.name, &s.token).await;
            });
        }
    }
}

impl Shared {
    /// Releases the lease and passes its permits on to `to`, a waiting
    /// acquire of this process, if they are free for it, and tells it.
    async fn pass(&self, to: Taken) -> Result<Left> {
        let sent = Instant::now();
        let pass = Pass {
            id: &to.id,
            permits: to.permits,
            ttl_ms: to.ttl_ms,
        };
        // If this future is dropped, or the store's answer lost, while the
        // pass is on its way, whatever it granted goes back (as for an
        // enter, see `InLine`).
        let mut on_the_way = InLine {
            gate: Some(self.gate.clone()),
            id: to.id.clone(),
        };
        let passed = self.gate.store.pass(&self.gate.name, &self.token, &pass).await;
        let (left, grant) = match passed {
            Ok(r) => r,
            Err(e) => {
                // It tries on its own.
                to.deliver(None);
                return Err(e);
            }
        };
        let handed = grant.map(|g| (g, sent, self.passes + 1));
        if to.deliver(handed) || grant.is_none() {
            on_the_way.gate = None;
        }
        // Otherwise its acquire was given up meanwhile: the guard gives
        // the permits back (in a task of its own, so neither a failure nor
        // this future's drop can keep them, and this release's outcome is
        // its own).
        Ok(left)
    }

    /// `ttl_ms` from `now`, cut to end at `hold_until`; `None` if less than
    /// the shortest lease (10 ms) is left before it.
    fn capped(&self, ttl_ms: u64, now: Instant) -> Option<u64> {
        let Some(until) = self.hold_until else {
            return Some(ttl_ms);
        };
        let left = until.saturating_duration_since(now).as_millis() as u64;
        (left >= crate::MIN_TTL.as_millis() as u64).then(|| ttl_ms.min(left))
    }

    fn clock(&self) -> LeaseClock {
        *self.clock.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn mark_lost(&self) {
        self.lost.send_replace(true);
    }

    /// No more renewals or expiry checks: released, or left to end.
    fn stop(&self) {
        self.timer.store(0, AtomicOrdering::SeqCst);
    }

    /// When to look at the lease next: a third of its current span in (if
    /// it is renewed), else at its end.
    fn next_look(&self, c: &LeaseClock) -> Instant {
        let at = if self.gate.auto_renew {
            c.sent + (c.deadline - c.sent) / 3
        } else {
            c.deadline
        };
        match self.hold_until {
            // A lease that would outlive its max_hold (one handed over
            // from the line runs to the waiter's heartbeat deadline) is
            // cut short by a renewal to the cap, which a look makes as
            // soon as it can.
            Some(until) if self.gate.auto_renew && c.deadline > until + crate::MIN_TTL => {
                at.min(until.checked_sub(crate::MIN_TTL * 2).unwrap_or(until))
            }
            _ => at,
        }
    }

    fn schedule(self: &Arc<Self>, generation: u64, at: Instant) {
        let timers = self.gate.store.timers().clone();
        let me: Weak<dyn Timed> = Arc::downgrade(self) as Weak<dyn Timed>;
        timers.insert(at, generation, me);
    }

    /// Moves the lease's timer on from `generation` (if it is still the
    /// current one) to run again at `at`, setting the clock to `clock`
    /// first if given.
    fn reschedule(self: &Arc<Self>, generation: u64, clock: Option<LeaseClock>, at: Instant) {
        let mut c = self.clock.lock().unwrap_or_else(PoisonError::into_inner);
        let next = generation + 1;
        if self
            .timer
            .compare_exchange(generation, next, AtomicOrdering::SeqCst, AtomicOrdering::SeqCst)
            .is_err()
        {
            // Released, or `extend` moved the lease on meanwhile.
            return;
        }
        if let Some(clock) = clock {
            *c = clock;
        }
        drop(c);
        self.schedule(next, at);
    }

    /// Declares the lease lost unless it was released meanwhile (a renewal
    /// racing a release is refused, and that is no loss).
    fn lost_at(&self, generation: u64) {
        if self.is_current(generation) {
            self.mark_lost();
            self.stop();
        }
    }

    /// One look at the lease, due for timer entry `generation`: renews it
    /// (if asked to) and declares it lost when the store refuses, or when
    /// its deadline passes without a successful renewal.
    async fn look(self: Arc<Self>, generation: u64) {
        let c = self.clock();
        let now = Instant::now();
        if now >= c.deadline {
            self.lost_at(generation);
            return;
        }
        if !self.gate.auto_renew {
            self.reschedule(generation, None, c.deadline);
            return;
        }
        let Some(ttl_ms) = self.capped(c.ttl_ms, now) else {
            // Held for its max_hold: no more renewals; lost at its end.
            self.reschedule(generation, None, c.deadline);
            return;
        };
        let left = c.deadline.saturating_duration_since(now);
        let renewal = self.gate.store.renew(&self.gate.name, &self.token, ttl_ms);
        match tokio::time::timeout(left, renewal).await {
            Ok(Ok(Some(g))) => {
                let clock = LeaseClock {
                    sent: now,
                    deadline: now + Duration::from_millis(g.ttl_ms),
                    ttl_ms: c.ttl_ms,
                };
                self.reschedule(generation, Some(clock), self.next_look(&clock));
            }
            Ok(Ok(None)) => self.lost_at(generation),
            Ok(Err(e)) => {
                if !self.is_current(generation) {
                    return;
                }
                tracing::warn!(gate = %self.gate.name, error = %e, "lease renewal failed; retrying");
                let ttl = Duration::from_millis(c.ttl_ms);
                let retry = Instant::now() + (ttl / 10).min(Duration::from_millis(250));
                self.reschedule(generation, None, retry.min(c.deadline));
            }
            // The store did not answer before the lease ran out.
            Err(_) => self.lost_at(generation),
        }
    }
}

impl Timed for Shared {
    fn is_current(&self, generation: u64) -> bool {
        self.timer.load(AtomicOrdering::SeqCst) == generation
    }

    fn fire(self: Arc<Self>, generation: u64) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(self.look(generation))
    }
}
