//! The Gate: a capacity, leased holders and a FIFO line of waiters. Locks and
//! semaphores are thin facades over it.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, ErrorKind, Result};
use crate::name::{Name, check_id, check_label, check_ttl, new_id};
use crate::store::Store;
use crate::store::registry::Kind;

use super::model::DRAW_SPAN;

use super::types::{
    Admission, DoorChange, DrawRecord, EnterRequest, Entry, GateName, GateStats, GateWatch, Grant, Holding,
    Left, MAX_DOOR_NOTE, MAX_DOOR_TIME_MS, MAX_LINE_LIMIT, Occupancy, Pass, Place, Poll, Queueing, Waiting,
    check_capacity,
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
    /// [`Lease::release`](crate::Lease::release)): on Redis, one script per critical section.
    pub fair: bool,
    /// The longest a lease of this handle may be held, from its grant:
    /// renewals (automatic and [`Lease::extend`](crate::Lease::extend))
    /// never carry it past grant + `max_hold`, so a holder whose work
    /// hangs while its renewals go on still lets go, and
    /// [`Lease::lost`](crate::Lease::lost) resolves then, with
    /// [`Lease::reached_max_hold`](crate::Lease::reached_max_hold) true. A
    /// lease is also granted for at most this long. Kept by the holder's
    /// own process (by its clock, from when the granting request was sent),
    /// not by the store: someone renewing the token by hand
    /// ([`Gate::renew`]) is not held to it. Default `None`: no cap.
    /// Between 10 ms and 24 h.
    pub max_hold: Option<Duration>,
}

impl Default for GateOptions {
    fn default() -> Self {
        GateOptions {
            ttl: Duration::from_secs(30),
            heartbeat: Duration::from_secs(10),
            auto_renew: true,
            fair: true,
            max_hold: None,
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
    pub(super) store: Store,
    pub(super) name: GateName,
    pub(super) capacity: Option<u32>,
    pub(super) ttl_ms: u64,
    pub(super) heartbeat_ms: u64,
    pub(super) auto_renew: bool,
    pub(super) fair: bool,
    pub(super) max_hold: Option<Duration>,
}

impl Gate {
    /// A handle on gate `name`. `capacity` is stored with the gate by the
    /// first request that names one; `None` uses whatever is stored. A
    /// different capacity later is a [`ErrorKind::CapacityConflict`].
    pub fn new(store: &Store, name: &str, capacity: Option<u32>, options: GateOptions) -> Result<Gate> {
        let name = Name::new(name)?;
        let capacity = capacity.map(check_capacity).transpose()?;
        let mut ttl_ms = check_ttl("ttl", options.ttl)?;
        let heartbeat_ms = check_ttl("heartbeat", options.heartbeat)?;
        if let Some(max_hold) = options.max_hold {
            // Granted for no longer than it may be held.
            ttl_ms = ttl_ms.min(check_ttl("max_hold", max_hold)?);
        }
        Ok(Gate {
            store: store.clone(),
            name: GateName::with_capacity(name, capacity),
            capacity,
            ttl_ms,
            heartbeat_ms,
            auto_renew: options.auto_renew,
            fair: options.fair,
            max_hold: options.max_hold,
        })
    }

    /// The gate's name.
    pub fn name(&self) -> &Name {
        &self.name
    }

    pub(super) fn check_permits(&self, permits: u32) -> Result<()> {
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

    pub(super) fn request<'a>(&self, id: &'a str, permits: u32, queue: bool) -> EnterRequest<'a> {
        EnterRequest {
            id,
            permits,
            capacity: self.capacity,
            ttl_ms: self.ttl_ms,
            heartbeat_ms: self.heartbeat_ms,
            queue,
            label: None,
            barge: false,
            order_key: None,
        }
    }

    /// One atomic step: take `permits` now, or (if `queue`) join the line.
    pub async fn enter(&self, permits: u32, queue: bool) -> Result<Entered> {
        self.enter_as(permits, queue, None).await
    }

    /// [`Gate::enter`] with a label saying who holds (or waits), shown by
    /// [`Gate::holders`]: 1 to 64 printable ASCII characters.
    pub async fn enter_as(&self, permits: u32, queue: bool, label: Option<&str>) -> Result<Entered> {
        self.enter_new(permits, queue, label, |_| None).await
    }

    /// [`Gate::enter_as`] into a draw: while the gate's door holds for an
    /// opening ([`Door::opens_at_ms`]), the ticket's place among the
    /// others entered this way is decided by its order key, `order_key`
    /// of the new ticket's id (below [`DRAW_SPAN`]; the lowest first,
    /// ties by ticket id), and the whole draw stands behind everyone who
    /// was in line when it began and ahead of everyone who joins after.
    /// The order is settled at each join, so the opening itself costs
    /// nothing more than a plain one: it admits from the head. When the
    /// opening comes (or the hold is lifted), the draw ends and its
    /// tickets, head first, become the gate's [`last_draw`](Self::last_draw).
    /// Without a pending opening the key is ignored: the ticket joins at
    /// the end. Always queues if it cannot enter now.
    pub async fn enter_drawn(
        &self,
        permits: u32,
        label: Option<&str>,
        order_key: impl FnOnce(&str) -> u64,
    ) -> Result<Entered> {
        self.enter_new(permits, true, label, |id| Some(order_key(id)))
            .await
    }

    /// Enters under a new id, with the order key `order_key` gives it.
    async fn enter_new(
        &self,
        permits: u32,
        queue: bool,
        label: Option<&str>,
        order_key: impl FnOnce(&str) -> Option<u64>,
    ) -> Result<Entered> {
        self.check_permits(permits)?;
        if let Some(label) = label {
            check_label(label)?;
        }
        let id = new_id();
        let order_key = order_key(&id);
        if let Some(key) = order_key.filter(|k| *k >= DRAW_SPAN) {
            return Err(Error::invalid(format!(
                "an order key must be below 2^44, not {key}"
            )));
        }
        let req = EnterRequest {
            label,
            order_key,
            ..self.request(&id, permits, queue)
        };
        Ok(match self.enter_store(&id, &req).await? {
            Entry::Granted(g) => Entered::Granted(granted(id, g)),
            Entry::Queued(place) => Entered::Queued { ticket: id, place },
            Entry::Busy(o) => Entered::Busy(o),
        })
    }

    /// The tickets of the last draw that ended ([`Gate::enter_drawn`]),
    /// in their drawn order, head first: everyone in the draw when the
    /// opening came. Empty if no draw has ended. Kept while the gate's
    /// state lives (on Redis, seven days after the draw).
    pub async fn last_draw(&self) -> Result<DrawRecord> {
        self.store.last_draw(&self.name).await
    }

    /// Enters through the store. A grant that the replicas did not confirm
    /// (durable handles) is given back at once, so it cannot linger as a
    /// holder nobody knows.
    pub(super) async fn enter_store(&self, id: &str, req: &EnterRequest<'_>) -> Result<Entry> {
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

    /// Sets the gate's door in one atomic step with, if asked, the pause
    /// and a drop of the whole line (see [`DoorChange`]); answers how many
    /// tickets were dropped. A closed door refuses every newcomer with
    /// [`ErrorKind::Closed`](crate::ErrorKind::Closed) (an acquire, a try,
    /// a ticket, a pass to a waiting acquire) on every process at once;
    /// holders keep their leases and the line keeps moving. Closing with
    /// `drop_line` is a sale's "sold out": nobody new comes in and nobody
    /// waits for nothing. The door is a setting like the capacity: the
    /// store forgets it with the gate's state (see
    /// [`watch_state`](Self::watch_state)'s epoch).
    pub async fn set_door(&self, change: &DoorChange) -> Result<u64> {
        if change.door.note.len() > MAX_DOOR_NOTE {
            return Err(Error::invalid(format!(
                "a door's note is at most {MAX_DOOR_NOTE} bytes, got {}",
                change.door.note.len()
            )));
        }
        if change.door.note.chars().any(char::is_control) {
            return Err(Error::invalid("a door's note may not hold control characters"));
        }
        let door = &change.door;
        if [door.opens_at_ms, door.closes_at_ms]
            .iter()
            .flatten()
            .any(|t| *t > MAX_DOOR_TIME_MS)
        {
            return Err(Error::invalid(format!(
                "a door's times are ms since the Unix epoch, at most {MAX_DOOR_TIME_MS} (the end of the year 9999)"
            )));
        }
        if let (Some(opens), Some(closes)) = (door.opens_at_ms, door.closes_at_ms)
            && closes <= opens
        {
            return Err(Error::invalid(
                "a door must close after it opens (closes_at_ms > opens_at_ms)",
            ));
        }
        let out = self.store.set_door(&self.name, change).await;
        self.store.register_after(Kind::Gates, &self.name, &out).await;
        out
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

    /// Sets how free permits go to the line: to its head
    /// ([`Queueing::Fifo`], the default) or each to a waiter picked at
    /// random ([`Queueing::Random`]). Permits free now go to the line at
    /// once, by the new rule. A setting like the capacity: the store
    /// forgets it with the gate's state (see
    /// [`watch_state`](Self::watch_state)'s epoch and `random`).
    pub async fn set_queueing(&self, queueing: Queueing) -> Result<()> {
        let out = self.store.set_queueing(&self.name, queueing.pick_state()).await;
        self.store.register_after(Kind::Gates, &self.name, &out).await;
        out
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
    /// (which fails: [`Lease::lost`](crate::Lease::lost) fires, `extend` and `release` answer
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
}

/// At most this many releases in a row on a non-fair handle pass their
/// permits straight on to an acquire waiting in the same process (see
/// [`Lease::release`](crate::Lease::release)); the next frees them for every waiter, in every
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

pub(super) fn granted(token: String, g: Grant) -> Granted {
    Granted {
        token,
        fence: g.fence,
        ttl: Duration::from_millis(g.ttl_ms),
    }
}

pub(super) fn removed() -> Error {
    Error::new(ErrorKind::Removed, "an admin removed this ticket from the line")
}

pub(super) fn lost() -> Error {
    Error::new(ErrorKind::LeaseLost, "the lease had already ended")
}

/// A ticket in line, or a grant on its way (an enter or a pass whose answer
/// is not in yet): given back if the future is dropped.
pub(super) struct InLine {
    pub(super) gate: Option<Gate>,
    pub(super) id: String,
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
