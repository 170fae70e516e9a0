//! The waiting loops of [`Gate::acquire`]: in line (fair), or barging
//! (non-fair, with passes from releases in this process), each answer
//! turned into a [`Lease`].

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, ErrorKind, Result};
use crate::name::{check_label, new_id};

use super::handle::{Gate, InLine, removed};
use super::lease::Lease;
use super::passing::PassSlot;
use super::types::{EnterRequest, Entry, Grant, Poll};

impl Gate {
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
        let entered = self
            .enter_store(
                &id,
                &EnterRequest {
                    label,
                    ..self.request(&id, permits, queue)
                },
            )
            .await;
        // A closed door took nothing: no leave to send.
        if entered.as_ref().is_err_and(Error::is_closed) {
            ticket.gate = None;
        }
        match entered? {
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
            let mut place = PassSlot::join(&self.store, &self.name, &id, permits, self.ttl_ms);
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
