//! The Gate: a capacity, leased holders and a FIFO line of waiters. Locks and
//! semaphores are thin facades over it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::{Error, ErrorKind, Result};
use crate::name::{Name, check_id, check_label, check_ttl, new_id};
use crate::store::Store;
use crate::store::registry::Kind;
use crate::store::timers::Timed;

use super::passing::{Bargers, Taken};
use super::types::{
    Admission, EnterRequest, Entry, GateName, GateStats, GateWatch, Grant, Holding, Left, MAX_LINE_LIMIT,
    Occupancy, Pass, Place, Poll, Waiting, check_capacity,
};

/// How leases and waits behave. Every field has a default.
#[derive(Debug, Clone)]
pub struct GateOptions {
    /// Lease length; with `auto_renew` it is renewed every third of it.
    /// Default 30 s. Between 10 ms and 24 h.
    pub ttl: Duration,
    /// How long a waiter may go without asking about its ticket before the
    /// store drops it from the line. Waiters ask at least every
    /// `min(1 s, heartbeat / 3)`. Default 10 s.
    pub heartbeat: Duration,
    /// Renew leases in the background until released. Default `true`.
    pub auto_renew: bool,
    /// Wait in line, first come first served (the default, `true`). With
    /// `false`, [`Gate::acquire`] barges: it takes free permits even while
    /// others wait, and otherwise waits outside the line (no ticket, no
    /// position) to be woken when permits are freed, then tries again, as
    /// `java.util.concurrent.Semaphore(permits, false)` does. Unfair: a
    /// waiter may be overtaken any number of times, and it keeps no
    /// position. Fair waiters in line still go first: freed permits are
    /// handed to the head of the line before anyone can barge. A release
    /// on such a handle passes its permits straight on to an acquire
    /// waiting in the same process, in the same step (see
    /// [`Lease::release`]): on Redis, one script per critical section.
    pub fair: bool,
}

impl Default for GateOptions {
    fn default() -> Self {
        GateOptions {
            ttl: Duration::from_secs(30),
            heartbeat: Duration::from_secs(10),
            auto_renew: true,
            fair: true,
        }
    }
}

/// A granted lease as plain data (what [`Gate::enter`] and
/// [`Gate::status`] report).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    /// The owner token: only its holder can renew or release the lease.
    pub token: String,
    /// The fencing token: strictly greater than every earlier grant's.
    /// [`Gate::status`] reports 0 for a lease that was granted at once by
    /// [`Gate::enter`] (its fence came with that answer); for tickets it
    /// reports the real fence.
    pub fence: u64,
    /// Time left on the lease, by the store's clock.
    pub ttl: Duration,
}

/// What [`Gate::enter`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entered {
    /// Permits taken now.
    Granted(Granted),
    /// In line; ask about the ticket with [`Gate::status`] at least once per
    /// heartbeat.
    Queued {
        /// The ticket id; once granted, it is also the lease's owner token.
        ticket: String,
        /// Where the ticket stands.
        place: Place,
    },
    /// Not admitted and not queued (the caller asked not to wait).
    Busy(Occupancy),
}

/// What [`Gate::status`] found for a ticket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TicketStatus {
    /// The ticket was granted; the lease now runs for the full TTL.
    Granted(Granted),
    /// Still waiting; the heartbeat deadline moved on.
    Queued(Place),
    /// Not in line and not holding: cancelled, dropped for missed
    /// heartbeats, or its lease already ended.
    Gone,
}

/// A gate with a capacity, leased holders and a fair line of waiters.
///
/// A newcomer never overtakes the line: while anyone waits, freed permits
/// belong to the head of the line, which gets them handed over directly.
#[derive(Debug, Clone)]
pub struct Gate {
    store: Store,
    name: GateName,
    capacity: Option<u32>,
    ttl_ms: u64,
    heartbeat_ms: u64,
    auto_renew: bool,
    fair: bool,
}

impl Gate {
    /// A handle on gate `name`. `capacity` is stored with the gate by the
    /// first request that names one; `None` uses whatever is stored. A
    /// different capacity later is a [`ErrorKind::CapacityConflict`].
    pub fn new(store: &Store, name: &str, capacity: Option<u32>, options: GateOptions) -> Result<Gate> {
        let name = Name::new(name)?;
        let capacity = capacity.map(check_capacity).transpose()?;
        let ttl_ms = check_ttl("ttl", options.ttl)?;
        let heartbeat_ms = check_ttl("heartbeat", options.heartbeat)?;
        Ok(Gate {
            store: store.clone(),
            name: GateName::with_capacity(name, capacity),
            capacity,
            ttl_ms,
            heartbeat_ms,
            auto_renew: options.auto_renew,
            fair: options.fair,
        })
    }

    /// The gate's name.
    pub fn name(&self) -> &Name {
        &self.name
    }

    fn check_permits(&self, permits: u32) -> Result<()> {
        if permits == 0 {
            return Err(Error::invalid("permits must be at least 1"));
        }
        if let Some(cap) = self.capacity
            && permits > cap
        {
            return Err(Error::invalid(format!(
                "asked for {permits} permits but the capacity is {cap}"
            )));
        }
        Ok(())
    }

    fn request<'a>(&self, id: &'a str, permits: u32, queue: bool) -> EnterRequest<'a> {
        EnterRequest {
            id,
            permits,
            capacity: self.capacity,
            ttl_ms: self.ttl_ms,
            heartbeat_ms: self.heartbeat_ms,
            queue,
            label: None,
            barge: false,
        }
    }

    /// One atomic step: take `permits` now, or (if `queue`) join the line.
    pub async fn enter(&self, permits: u32, queue: bool) -> Result<Entered> {
        self.enter_as(permits, queue, None).await
    }

    /// [`Gate::enter`] with a label saying who holds (or waits), shown by
    /// [`Gate::holders`]: 1 to 64 printable ASCII characters.
    pub async fn enter_as(&self, permits: u32, queue: bool, label: Option<&str>) -> Result<Entered> {
        self.check_permits(permits)?;
        if let Some(label) = label {
            check_label(label)?;
        }
        let id = new_id();
        let req = EnterRequest {
            label,
            ..self.request(&id, permits, queue)
        };
        Ok(match self.enter_store(&id, &req).await? {
            Entry::Granted(g) => Entered::Granted(granted(id, g)),
            Entry::Queued(place) => Entered::Queued { ticket: id, place },
            Entry::Busy(o) => Entered::Busy(o),
        })
    }

    /// Enters through the store. A grant that the replicas did not confirm
    /// (durable handles) is given back at once, so it cannot linger as a
    /// holder nobody knows.
    async fn enter_store(&self, id: &str, req: &EnterRequest<'_>) -> Result<Entry> {
        let out = self.store.enter(&self.name, req).await;
        self.store.register_after(Kind::Gates, &self.name, &out).await;
        match out {
            Err(e) if e.kind() == ErrorKind::NotReplicated => {
                let _ = self.store.leave(&self.name, id).await;
                Err(e)
            }
            other => other,
        }
    }

    /// Asks about a ticket: this is its heartbeat, and how a waiter picks up
    /// a lease handed to it. A ticket an admin took out of the line
    /// ([`remove_waiter`](Self::remove_waiter)) within the last hour is
    /// [`ErrorKind::Removed`] ([`Error::is_removed`]), not
    /// [`TicketStatus::Gone`]: its waiter should stop rather than queue
    /// again.
    pub async fn status(&self, ticket: &str) -> Result<TicketStatus> {
        check_id(ticket)?;
        Ok(
            match self
                .store
                .poll(&self.name, ticket, self.ttl_ms, self.heartbeat_ms)
                .await?
            {
                Poll::Granted(g) => TicketStatus::Granted(granted(ticket.to_owned(), g)),
                Poll::Queued(p) => TicketStatus::Queued(p),
                Poll::Unknown => TicketStatus::Gone,
                Poll::Removed => return Err(removed()),
            },
        )
    }

    /// Like [`Gate::status`], but a ticket still in line is watched for up
    /// to `wait` and the answer comes the moment it is granted (long-poll).
    /// The ticket keeps its heartbeat while watched.
    pub async fn wait_status(&self, ticket: &str, wait: Duration) -> Result<TicketStatus> {
        check_id(ticket)?;
        let deadline = Instant::now() + wait;
        // Registered before the first look, so no hand-off slips between.
        let watch = self.store.watch(ticket);
        let _listening = self.store.listen(&self.name, Instant::now()).await?;
        let recheck = Duration::from_millis((self.heartbeat_ms / 3).min(1000));
        loop {
            let status = self.status(ticket).await?;
            let left = deadline.saturating_duration_since(Instant::now());
            if !matches!(status, TicketStatus::Queued(_)) || left.is_zero() {
                return Ok(status);
            }
            watch.wait(recheck.min(left)).await;
        }
    }

    /// Extends a held lease to `ttl` from now. An ended lease is never
    /// brought back: that is [`ErrorKind::LeaseLost`].
    pub async fn renew(&self, token: &str, ttl: Duration) -> Result<Duration> {
        check_id(token)?;
        let ttl_ms = check_ttl("ttl", ttl)?;
        match self.store.renew(&self.name, token, ttl_ms).await? {
            Some(g) => Ok(Duration::from_millis(g.ttl_ms)),
            None => Err(lost()),
        }
    }

    /// Releases a lease or cancels a ticket.
    pub async fn leave(&self, token: &str) -> Result<Left> {
        check_id(token)?;
        self.store.leave(&self.name, token).await
    }

    /// Releases `token` and passes its permits on to a new lease of
    /// `permits` under `to`, in the same step, if they are free for it then
    /// (nobody left in line, room, admission control letting one in): what
    /// a release on a non-fair handle does for an acquire waiting in the
    /// same process ([`Lease::release`]). Here for the tests that hold the
    /// stores to one another; not part of the API.
    #[doc(hidden)]
    pub async fn leave_passing(
        &self,
        token: &str,
        to: &str,
        permits: u32,
    ) -> Result<(Left, Option<Granted>)> {
        check_id(token)?;
        check_id(to)?;
        self.check_permits(permits)?;
        let pass = Pass {
            id: to,
            permits,
            ttl_ms: self.ttl_ms,
        };
        let (left, grant) = self.store.pass(&self.name, token, &pass).await?;
        Ok((left, grant.map(|g| granted(to.to_owned(), g))))
    }

    /// Ends a session: exactly [`Gate::leave`], but when a holder is
    /// released its token also goes into the gate's revocation log, in the
    /// same atomic step, and stays there at least `keep` (1 ms to 7 days;
    /// then it is pruned). Servers that admit by a token they have seen
    /// before learn of the end from [`Gate::watch_state`]. A ticket that
    /// leaves the line is only cancelled: it was never admitted, so there
    /// is nothing to revoke.
    pub async fn end(&self, token: &str, keep: Duration) -> Result<Left> {
        check_id(token)?;
        if keep < Duration::from_millis(1) || keep > MAX_KEEP {
            return Err(Error::invalid(format!(
                "keep must be between 1ms and 7 days, got {}ms",
                keep.as_millis()
            )));
        }
        self.store.end(&self.name, token, keep.as_millis() as u64).await
    }

    /// Reads what a server keeping a local view of this gate needs, in one
    /// step that changes nothing (it never creates the gate's state, and
    /// runs no expiry): the state's epoch, the stored capacity and
    /// admission settings, and the tokens [`Gate::end`] recorded from
    /// cursor `since` on (0: all still kept).
    ///
    /// Pass each answer's `cursor` as the next `since`: an end that
    /// completed before a call started is in that call's answer or an
    /// earlier one. When the epoch changes the store lost the gate's state
    /// (and its log): start again from 0, and apply your settings again.
    /// Answers carry at most [`MAX_REVOKED_PER_WATCH`](crate::MAX_REVOKED_PER_WATCH)
    /// tokens; the cursor then continues after the last one.
    pub async fn watch_state(&self, since: u64) -> Result<GateWatch> {
        self.store.watch_state(&self.name, since).await
    }

    /// Changes the capacity. Lowering it never evicts a holder; raising it
    /// admits the head of the line at once.
    pub async fn set_capacity(&self, capacity: u32) -> Result<()> {
        check_capacity(capacity)?;
        let out = self.store.set_capacity(&self.name, capacity).await;
        self.store.register_after(Kind::Gates, &self.name, &out).await;
        out
    }

    /// Pauses admissions: nobody new is granted, everyone queues. Holders
    /// keep their leases. Undo with [`resume`](Self::resume).
    pub async fn pause(&self) -> Result<()> {
        self.set_paused(true).await
    }

    /// Resumes admissions; free permits go to the line at once.
    pub async fn resume(&self) -> Result<()> {
        self.set_paused(false).await
    }

    async fn set_paused(&self, paused: bool) -> Result<()> {
        let admission = Admission {
            paused: Some(paused),
            every_ms: None,
        };
        self.store.set_admission(&self.name, &admission).await
    }

    /// Caps the rate of admissions (grants, from the line or not) at one
    /// per `interval`, whatever the free capacity: for an upstream that
    /// cannot tell when a visitor leaves. `None` removes the cap. Waiters
    /// are admitted as they ask (each status is also a chance to admit).
    pub async fn set_admission_interval(&self, interval: Option<Duration>) -> Result<()> {
        let ms = match interval {
            None => 0,
            Some(d) if d.is_zero() => return Err(Error::invalid("an admission interval must be positive")),
            Some(d) => check_ttl("admission interval", d)?,
        };
        let interval = Admission {
            paused: None,
            every_ms: Some(ms),
        };
        self.store.set_admission(&self.name, &interval).await
    }

    /// Up to `limit` current holders, soonest to end first, with their
    /// labels and the handles [`revoke`](Self::revoke) takes.
    pub async fn holders(&self, limit: u32) -> Result<Vec<Holding>> {
        if limit == 0 || limit > 10_000 {
            return Err(Error::invalid("limit must be between 1 and 10000"));
        }
        self.store.holders(&self.name, limit).await
    }

    /// Up to `limit` (1 to [`MAX_LINE_LIMIT`]) tickets at the head of the
    /// line, head first, each with its number (which
    /// [`remove_waiter`](Self::remove_waiter) takes), position, permits
    /// and label.
    pub async fn line(&self, limit: u32) -> Result<Vec<Waiting>> {
        if limit == 0 || limit > MAX_LINE_LIMIT {
            return Err(Error::invalid(format!(
                "limit must be between 1 and {MAX_LINE_LIMIT}"
            )));
        }
        self.store.line(&self.name, limit).await
    }

    /// An admin's end of someone else's lease, named by the handle
    /// [`holders`](Self::holders) lists: the same atomic step as the holder
    /// calling [`end`](Self::end) (its permits go to the head of the line
    /// at once, and its token goes into the revocation log for
    /// [`REVOKE_KEEP`], so servers watching the gate drop it too).
    /// `Left::Released` if it was revoked, `Left::Unknown` if no current
    /// holder has that handle.
    ///
    /// **Fencing**: the revoked holder is not told. Until it next renews
    /// (which fails: [`Lease::lost`] fires, `extend` and `release` answer
    /// `LeaseLost`) it may still believe it holds, and the lease's fence is
    /// now stale: the next grant's fence is higher. A resource that
    /// refuses writes with a fence lower than the highest it has seen
    /// rejects the revoked holder's writes as soon as the new holder has
    /// written; one that checks no fence does not, and a revoke then
    /// cannot stop a holder that keeps working without renewing.
    pub async fn revoke(&self, handle: &str) -> Result<Left> {
        if handle.len() != 16 || !handle.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(Error::invalid("a holder's handle is 16 lowercase hex digits"));
        }
        self.store
            .revoke(&self.name, handle, REVOKE_KEEP.as_millis() as u64)
            .await
    }

    /// An admin's removal of ticket `number` (as [`line`](Self::line)
    /// lists it) from the line, as if it had left: everyone behind it
    /// moves up, and if it was the head, whoever now fits is admitted in
    /// the same step. The gate remembers the removal for an hour (at most
    /// the latest 1,000 per gate): the ticket's next
    /// [`status`](Self::status) is [`ErrorKind::Removed`], and a waiting
    /// [`acquire`](Self::acquire) ends with that error rather than
    /// queueing again. `Left::Cancelled` if it was removed,
    /// `Left::Unknown` if no ticket in line has that number.
    pub async fn remove_waiter(&self, number: u64) -> Result<Left> {
        if number == 0 || number > 1 << 53 {
            return Err(Error::invalid("a ticket number is between 1 and 2^53"));
        }
        self.store.remove_waiter(&self.name, number).await
    }

    /// An admin's reset of the line: every ticket waiting is dropped in
    /// one atomic step (holders are untouched, and a ticket that joins
    /// after it is not dropped), and the time is kept in the gate's
    /// [`GateStats::line_reset_ms`]. Each dropped ticket's next status
    /// answers [`TicketStatus::Gone`], as if it had left; compare the time
    /// it joined with `line_reset_ms` to tell the two apart. Returns how
    /// many were dropped. It costs time in proportion to the line, all in
    /// that one step.
    pub async fn clear_line(&self) -> Result<u64> {
        self.store.clear_line(&self.name).await
    }

    /// A snapshot: capacity, holders, line length, grants, expiries.
    pub async fn stats(&self) -> Result<GateStats> {
        self.store.stats(&self.name).await
    }

    /// Takes `permits` if they are free and nobody waits; `None` otherwise.
    pub async fn try_acquire(&self, permits: u32) -> Result<Option<Lease>> {
        self.acquire(permits, Duration::ZERO).await
    }

    /// Takes `permits`, waiting in line up to `wait`; `None` if the wait ran
    /// out. Dropping the future leaves the line.
    pub async fn acquire(&self, permits: u32, wait: Duration) -> Result<Option<Lease>> {
        self.acquire_as(permits, wait, None).await
    }

    /// [`Gate::acquire`] with a label saying who holds (or waits), shown by
    /// [`Gate::holders`]: 1 to 64 printable ASCII characters.
    pub async fn acquire_as(
        &self,
        permits: u32,
        wait: Duration,
        label: Option<&str>,
    ) -> Result<Option<Lease>> {
        self.check_permits(permits)?;
        if let Some(label) = label {
            check_label(label)?;
        }

        if !self.fair && !wait.is_zero() {
            // Boxed: a waiting future stays small (tests/future_sizes.rs).
            return Box::pin(self.barge(permits, wait, label)).await;
        }
        let deadline = Instant::now() + wait;
        let id = new_id();
        // Registered before entering, so a hand-off cannot slip past us.
        let watch = self.store.watch(&id);
        let queue = !wait.is_zero();
        let recheck = Duration::from_millis((self.heartbeat_ms / 3).min(1000));

        let mut sent = Instant::now();
        // Armed before the call: a future dropped while the store is already
        // queueing (or granting) it must still leave, or the place (or the
        // permits) would stay taken until the heartbeat (or TTL) ran out.
        // The leave goes out after the enter, on the same connection.
        let mut ticket = InLine {
            gate: Some(self.clone()),
            id: id.clone(),
        };
        match self
            .enter_store(
                &id,
                &EnterRequest {
                    label,
                    ..self.request(&id, permits, queue)
                },
            )
            .await?
        {
            Entry::Granted(g) => {
                ticket.gate = None;
                return Ok(Some(self.lease(id, permits, g, sent, 0)));
            }
            Entry::Busy(_) => {
                ticket.gate = None;
                return Ok(None);
            }
            Entry::Queued(_) => {}
        }
        let heartbeat = Duration::from_millis(self.heartbeat_ms);
        let listening = self.store.listen(&self.name, sent).await?;
        let mut look_now = listening.as_ref().is_some_and(|l| l.fresh);
        loop {
            if !look_now {
                let left = deadline.saturating_duration_since(Instant::now());
                let handed = watch.wait(recheck.min(left)).await;
                // A hand-off names the fence; the lease lives until our
                // heartbeat deadline, and renewal extends it to a full TTL.
                // Leases that are not renewed pick up the full TTL by polling.
                let until = sent + heartbeat;
                // (Not on a durable store: the poll below makes this grant
                // wait for the replicas too.)
                if let Some(fence) = handed
                    && self.auto_renew
                    && !self.store.is_durable()
                    && until > Instant::now() + heartbeat / 4
                {
                    ticket.gate = None;
                    return Ok(Some(Lease::start(
                        self.clone(),
                        id,
                        permits,
                        fence,
                        sent,
                        until,
                        0,
                    )));
                }
            }
            look_now = false;
            sent = Instant::now();
            let polled = match self
                .store
                .poll(&self.name, &id, self.ttl_ms, self.heartbeat_ms)
                .await
            {
                Ok(p) => p,
                Err(e) => {
                    // Leave the line now, not in a task that a process
                    // exiting on this error would never run: a ticket left
                    // behind blocks the line until its heartbeat runs out.
                    // (The guard stays armed while the leave runs, in case
                    // this future is dropped meanwhile.)
                    let _ = self.store.leave(&self.name, &id).await;
                    ticket.gate = None;
                    return Err(e);
                }
            };
            match polled {
                Poll::Granted(g) => {
                    // Without a notification first, this is the fallback
                    // re-check doing its job: a hand-off message was lost
                    // (or this lease is not renewed, so it polls on purpose).
                    tracing::debug!(gate = %self.name, fence = g.fence, "granted found by polling");
                    ticket.gate = None;
                    return Ok(Some(self.lease(id, permits, g, sent, 0)));
                }
                Poll::Queued(_) => {}
                Poll::Removed => {
                    // Taken out by an admin: stop, told why (nothing to
                    // leave).
                    ticket.gate = None;
                    return Err(removed());
                }
                Poll::Unknown => {
                    // Dropped from the line (this process stalled past its
                    // heartbeat, or the store lost its data): queue again.
                    sent = Instant::now();
                    if let Entry::Granted(g) = self
                        .store
                        .enter(
                            &self.name,
                            &EnterRequest {
                                label,
                                ..self.request(&id, permits, true)
                            },
                        )
                        .await?
                    {
                        ticket.gate = None;
                        return Ok(Some(self.lease(id, permits, g, sent, 0)));
                    }
                }
            }
            if Instant::now() >= deadline {
                break;
            }
        }
        ticket.gate = None;
        // A hand-off racing with the deadline is released here, not leaked.
        self.store.leave(&self.name, &id).await?;
        Ok(None)
    }

    /// A non-fair acquire ([`GateOptions::fair`] false): takes free permits
    /// even while others wait; when there are none, waits outside the line
    /// until permits are freed (or a recheck) and tries again. Meanwhile it
    /// waits in this process's queue of such acquires on the gate, so a
    /// release here can pass its permits straight on to it (see
    /// [`Lease::release`]); while that queue holds one asking for no more
    /// than it does, a newcomer joins it rather than trying first (it would
    /// lose to the permits' pass).
    async fn barge(&self, permits: u32, wait: Duration, label: Option<&str>) -> Result<Option<Lease>> {
        let deadline = Instant::now() + wait;
        let recheck = Duration::from_millis((self.heartbeat_ms / 3).min(1000));
        // Listening and watching before the first try, so permits freed
        // after it cannot go unnoticed.
        let _listening = self.store.listen(&self.name, Instant::now()).await?;
        let freed = self.store.watch_freed(&self.name);
        // A labelled acquire is never passed to (a pass takes no label),
        // nor is one on a durable handle (see `Store::durable`).
        let passable = label.is_none() && !self.store.is_durable();
        // A newcomer joins others of this process already waiting (for as
        // few permits or fewer) rather than trying first; once woken, it
        // tries.
        let mut join_first = passable && self.store.bargers().any(self.name.as_str(), permits);
        loop {
            let id = new_id();
            if !std::mem::take(&mut join_first) {
                let sent = Instant::now();
                // A future dropped while its grant is on the way still
                // gives the permits back.
                let mut attempt = InLine {
                    gate: Some(self.clone()),
                    id: id.clone(),
                };
                let entry = self
                    .enter_store(
                        &id,
                        &EnterRequest {
                            label,
                            barge: true,
                            ..self.request(&id, permits, false)
                        },
                    )
                    .await?;
                attempt.gate = None;
                match entry {
                    Entry::Granted(g) => return Ok(Some(self.lease(id, permits, g, sent, 0))),
                    Entry::Busy(_) => {}
                    Entry::Queued(_) => {
                        // Not asked to queue: give the place back, and say so.
                        self.store.leave(&self.name, &id).await?;
                        return Err(Error::new(
                            ErrorKind::Store,
                            "the store queued a request that did not ask to",
                        ));
                    }
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            if !passable {
                freed.wait(recheck.min(left)).await;
                continue;
            }
            let mut place = Bargers::join(&self.store, &self.name, &id, permits, self.ttl_ms);
            let woken = tokio::select! {
                passed = place.passed() => Some(passed),
                _ = freed.wait(recheck.min(left)) => None,
            };
            let passed = match woken {
                Some(passed) => passed,
                // A release that took this place is answering; not waited
                // for past the deadline (its grant, if any, comes back).
                None => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    tokio::time::timeout(left, place.leave()).await.ok().flatten()
                }
            };
            if let Some((grant, sent, passes)) = passed {
                return Ok(Some(self.lease(id, permits, grant, sent, passes)));
            }
        }
    }

    /// The lease of a grant; `passes`: how many releases in a row passed
    /// their permits on to reach it (see [`Lease::release`]).
    fn lease(&self, token: String, permits: u32, grant: Grant, sent: Instant, passes: u32) -> Lease {
        let until = sent + Duration::from_millis(grant.ttl_ms);
        Lease::start(self.clone(), token, permits, grant.fence, sent, until, passes)
    }
}

/// At most this many releases in a row on a non-fair handle pass their
/// permits straight on to an acquire waiting in the same process (see
/// [`Lease::release`]); the next frees them for every waiter, in every
/// process, to race for, so one busy process cannot keep a gate's permits
/// from the others for longer than that.
pub const MAX_PASSES: u32 = 16;

/// How long a [`Gate::revoke`]d token stays in the revocation log: a day.
/// A server that admits by a token it saw before (a waiting room's
/// sessions) learns of the revoke if it reads the log
/// ([`Gate::watch_state`]) within that time.
pub const REVOKE_KEEP: Duration = Duration::from_secs(24 * 60 * 60);

/// The longest a revocation is kept ([`Gate::end`]).
const MAX_KEEP: Duration = Duration::from_secs(7 * 24 * 60 * 60);

fn granted(token: String, g: Grant) -> Granted {
    Granted {
        token,
        fence: g.fence,
        ttl: Duration::from_millis(g.ttl_ms),
    }
}

fn lost() -> Error {
    Error::new(ErrorKind::LeaseLost, "the lease had already ended")
}

fn removed() -> Error {
    Error::new(ErrorKind::Removed, "an admin removed this ticket from the line")
}

/// A ticket in line, or a grant on its way (an enter or a pass whose answer
/// is not in yet): given back if the future is dropped.
struct InLine {
    gate: Option<Gate>,
    id: String,
}

impl Drop for InLine {
    fn drop(&mut self) {
        if let (Some(gate), Ok(rt)) = (self.gate.take(), tokio::runtime::Handle::try_current()) {
            let id = std::mem::take(&mut self.id);
            rt.spawn(async move {
                let _ = gate.store.leave(&gate.name, &id).await;
            });
        }
    }
}

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
    fn start(
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
    /// renewals from then on). Fails with [`ErrorKind::LeaseLost`] if it had
    /// already ended.
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        let ttl_ms = check_ttl("ttl", ttl)?;
        let s = &self.shared;
        let sent = Instant::now();
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
    /// Fails with [`ErrorKind::LeaseLost`] if it had already ended, since the
    /// work done under it may not have been exclusive.
    ///
    /// On a non-fair handle ([`GateOptions::fair`] false) whose gate has
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
    /// [`ErrorKind::LeaseLost`] if the lease had already ended.
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
        if self.gate.auto_renew {
            c.sent + (c.deadline - c.sent) / 3
        } else {
            c.deadline
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
        let left = c.deadline.saturating_duration_since(now);
        let renewal = self.gate.store.renew(&self.gate.name, &self.token, c.ttl_ms);
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
