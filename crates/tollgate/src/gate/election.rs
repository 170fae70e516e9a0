//! `Election`: leader election on a gate of capacity 1. Candidates wait in
//! its line (FIFO: the longest-waiting candidate leads next), the leader
//! holds a renewed lease, loss is told by `lost()`, and anyone can read or
//! follow who leads.
//!
//! Why no state of its own: the leader is the gate's one holder, so its
//! label, lease and fence are the gate's; the fence of a capacity-1 gate's
//! holder is the gate's last fence (nobody can have been granted after
//! it), and a fence starts from the store's clock in ms × 1000, so it
//! also says when leadership began. Observers read; a read also ends a
//! lease that ran out and hands the gate to the next candidate, so a
//! watched election changes leader within one poll of the lease's end.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::gate::{Gate, GateOptions, Lease};
use crate::name::check_label;
use crate::store::Store;

use super::types::{GateStats, handle_of};

/// How often an [`Observer`] reads the election by default.
pub const OBSERVE_EVERY: Duration = Duration::from_millis(50);

/// Who leads an election, as read from the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The label the leader campaigned with.
    pub label: Option<String>,
    /// The leader's fencing token; every later leader's is higher.
    pub fence: u64,
    /// When its leadership began, in ms since the Unix epoch by the
    /// store's clock (read from the fence: exact unless the gate granted
    /// more than 1,000 leases in one millisecond, or its fences ran ahead
    /// of the clock after a store lost its data).
    pub since_ms: u64,
    /// Time left on its lease when read.
    pub ttl: Duration,
    /// The lease's handle ([`Gate::revoke`] takes it).
    pub handle: String,
}

/// A leader election: one leader at a time among any number of
/// candidates, in any number of processes.
///
/// ```no_run
/// # async fn demo(store: &tollgate::Store) -> tollgate::Result<()> {
/// use std::time::Duration;
/// let election = tollgate::Election::new(store, "scheduler")?;
/// let leadership = election.campaign("host-a", Duration::from_secs(3600)).await?;
/// if let Some(leadership) = leadership {
///     tokio::select! {
///         () = leadership.lost() => { /* stop leading at once */ }
///         () = async { /* lead: use leadership.fence() */ } => {}
///     }
///     leadership.resign().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    gate: Gate,
}

/// A candidate's leadership: a lease of the election's gate, renewed in
/// the background until resigned or lost.
#[derive(Debug)]
pub struct Leadership {
    lease: Lease,
}

impl Election {
    /// Election `name` with the default options (30 s lease, renewed
    /// every 10 s; a waiting candidate asks at least every second).
    pub fn new(store: &Store, name: &str) -> Result<Election> {
        Election::with_options(store, name, GateOptions::default())
    }

    /// Election `name` with `options` (`fair` must be `true`: candidates
    /// are served in the order they campaigned).
    pub fn with_options(store: &Store, name: &str, options: GateOptions) -> Result<Election> {
        if !options.fair {
            return Err(Error::invalid(
                "an election is always fair (options.fair must be true)",
            ));
        }
        Ok(Election {
            gate: Gate::new(store, name, Some(1), options)?,
        })
    }

    /// Campaigns as `label` (1 to 64 printable ASCII characters): leads
    /// now if nobody does, or waits in line up to `wait`. `None` if the
    /// wait ran out. Dropping the future leaves the line.
    pub async fn campaign(&self, label: &str, wait: Duration) -> Result<Option<Leadership>> {
        check_label(label)?;
        let lease = self.gate.acquire_as(1, wait, Some(label)).await?;
        Ok(lease.map(|lease| Leadership { lease }))
    }

    /// Takes leadership back after a restart, without waiting out the old
    /// lease, by proving to be the same candidate: `token` is
    /// [`Leadership::token`] as the old process kept it. `None` if that
    /// lease already ended (campaign again). Only the holder of the token
    /// can do this; a label proves nothing.
    pub async fn resume(&self, token: &str) -> Result<Option<Leadership>> {
        crate::name::check_id(token)?;
        let sent = Instant::now();
        let ttl = match self
            .gate
            .renew(token, Duration::from_millis(self.gate.ttl_ms))
            .await
        {
            Ok(ttl) => ttl,
            Err(e) if e.is_lease_lost() => return Ok(None),
            Err(e) => return Err(e),
        };
        // The lease is ours for `ttl`: its fence is the gate's last one.
        let Some(leader) = self.leader().await? else {
            return Ok(None);
        };
        if leader.handle != handle_of(token) {
            return Ok(None);
        }
        let lease = Lease::start(
            self.gate.clone(),
            token.to_owned(),
            1,
            leader.fence,
            sent,
            sent + ttl,
            0,
        );
        Ok(Some(Leadership { lease }))
    }

    /// Who leads now, if anyone.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        Ok(self.state().await?.0)
    }

    /// Who leads now, with the gate's last fence read in the same
    /// consistent view (the leader's own, or the last leader's when
    /// nobody leads; 0 if the store holds no state for the gate).
    pub async fn state(&self) -> Result<(Option<Leader>, u64)> {
        // Three reads (fence, holder, fence): consistent when no grant
        // came between the first and the last.
        for _ in 0..5 {
            let before = self.gate.stats().await?;
            check_capacity(&before)?;
            let holders = self.gate.holders(1).await?;
            let after = self.gate.stats().await?;
            if before.grants != after.grants || before.fence != after.fence {
                continue;
            }
            let leader = holders.into_iter().next().map(|h| {
                let fence = h.fence.unwrap_or(after.fence);
                Leader {
                    label: h.label,
                    fence,
                    since_ms: fence.saturating_sub(1) / 1000,
                    ttl: h.ttl,
                    handle: h.handle,
                }
            });
            return Ok((leader, after.fence));
        }
        Err(Error::unavailable(
            "the election's leader changed during every read",
        ))
    }

    /// Follows the election: [`Observer::next`] answers each change of
    /// leader (or of no leader), starting with the state now.
    pub fn observe(&self) -> Observer {
        self.observe_every(OBSERVE_EVERY)
    }

    /// [`Election::observe`], reading every `every` (at least 10 ms).
    pub fn observe_every(&self, every: Duration) -> Observer {
        Observer {
            election: self.clone(),
            every: every.max(Duration::from_millis(10)),
            last: None,
            fence: 0,
        }
    }

    /// The gate underneath.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }
}

fn check_capacity(stats: &GateStats) -> Result<()> {
    match stats.capacity {
        Some(1) | None => Ok(()),
        Some(c) => Err(Error::invalid(format!(
            "gate has capacity {c}: an election's gate has capacity 1"
        ))),
    }
}

impl Leadership {
    /// The leader's fencing token: give it to what you write to.
    pub fn fence(&self) -> u64 {
        self.lease.fence()
    }

    /// The lease's owner token: keep it (privately) to
    /// [`resume`](Election::resume) after a restart.
    pub fn token(&self) -> &str {
        self.lease.token()
    }

    /// Resolves when leadership is lost (its lease ended or could not be
    /// renewed, or an admin revoked it).
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.lease.lost()
    }

    /// Leadership was lost.
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// Steps down: the next candidate in line leads at once. Fails with
    /// [`ErrorKind::LeaseLost`](crate::ErrorKind::LeaseLost) if leadership
    /// had already been lost.
    pub async fn resign(self) -> Result<()> {
        self.lease.release().await
    }

    /// The lease underneath.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The lease underneath, to hold on with (resigning is releasing it).
    pub fn into_lease(self) -> Lease {
        self.lease
    }
}

/// The handle a lease of token `token` is listed by
/// ([`Holding::handle`](crate::Holding::handle), [`Leader::handle`]): who
/// kept a token can tell whether the listed holder is itself.
pub fn lease_handle(token: &str) -> String {
    handle_of(token)
}

/// Follows one election ([`Election::observe`]).
#[derive(Debug)]
pub struct Observer {
    election: Election,
    every: Duration,
    /// What was last answered: `None` before the first answer.
    last: Option<Option<Leader>>,
    /// The gate's last fence at that answer.
    fence: u64,
}

impl Observer {
    /// The next change: at first the state now, then each new leader (a
    /// new fence) or vacancy, as seen by reads every `every`. A leader who
    /// came and went between two reads is not seen. On a store error the
    /// observer may be asked again.
    pub async fn next(&mut self) -> Result<Option<Leader>> {
        loop {
            let (now, fence) = self.election.state().await?;
            let changed = match &self.last {
                None => true,
                Some(last) => last.as_ref().map(|l| l.fence) != now.as_ref().map(|l| l.fence),
            };
            if changed {
                self.last = Some(now.clone());
                self.fence = fence;
                return Ok(now);
            }
            tokio::time::sleep(self.every).await;
        }
    }

    /// What was last answered, if anything.
    pub fn last(&self) -> Option<&Option<Leader>> {
        self.last.as_ref()
    }

    /// The gate's last fence as read with the last answer (with no
    /// leader: the last leader's fence).
    pub fn last_fence(&self) -> u64 {
        self.fence
    }
}
