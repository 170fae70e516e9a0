//! Job queues in the embedded store: each operation as one critical
//! section over one queue's state (`model.rs`), logged for the durable
//! store and replayed from its log, with its events published and its
//! consumers woken.

use std::ops::Deref;

use crate::error::{Error, Result};
use crate::name::Name;
use crate::store::memory::replay::{self, Code};
use crate::store::memory::shelf::Shelf;
use crate::store::memory::{Logged, MemoryCore, Shelved, put};

use super::backend::JobBackend;
use super::events::Hub;
use super::model::Queue;
use super::types as jobs;
use super::types::{
    BackoffSpec, CancelOutcome, Claim, ClaimOutcome, Extend, Keep, Layout, ListFrom, Nack, NackOutcome,
    PushOutcome, PushReq, RawDead, RawDone, RawGroup, RawGroupLimits, RawInfo, RawLimits, RawState, RawStats,
    RescheduleOutcome, When, wake_key,
};

/// The job-queue operations of the embedded store.
impl JobMemory<'_> {
    /// Runs `op` on job queue `q` (now in store ms); wakes as many sleeping
    /// consumers as it says (`true` is one).
    /// `log` writes the operation to the durable store's log.
    fn with_queue<T, W: Into<usize>>(
        &self,
        q: &Name,
        log: Logged<'_>,
        op: impl FnOnce(&mut Queue, u64) -> (T, W),
    ) -> T {
        self.on_queue(q, true, Some(log), op)
    }

    /// `with_queue` for an operation that only reads (it does not keep an
    /// idle queue alive, and is not logged). A queue without state is read
    /// as an empty one and never put on the shelf, not even for a moment
    /// (a flood of reads of made-up names leaves no trace, and the memory
    /// gauges never count one).
    fn read_queue<T>(&self, q: &Name, op: impl FnOnce(&Queue, u64) -> T) -> T {
        let now = self.stamp().ms();
        self.queues.peek(q, now, self.idle_ms, |queue| match queue {
            Some(queue) => op(queue, now),
            None => op(&Queue::default(), now),
        })
    }

    /// Runs one queue operation (see `with_queue`); replayed operations
    /// run here too, at their recorded time.
    pub(crate) fn on_queue<T, W: Into<usize>>(
        &self,
        q: &Name,
        touch: bool,
        log: Option<Logged<'_>>,
        op: impl FnOnce(&mut Queue, u64) -> (T, W),
    ) -> T {
        let stamp = self.stamp();
        let now = stamp.ms();
        let watched = self.job_events.watching(q.as_str());
        let (out, wake) = self
            .queues
            .with(q, now, self.idle_ms, touch, Queue::default, |queue| {
                queue.events = watched.then(Vec::new);
                let out = op(queue, now);
                if let Some(log) = log {
                    self.record(&mut queue.lsn, stamp, q, log);
                }
                // Published inside the critical section: in step order.
                if let Some(events) = queue.events.take()
                    && !events.is_empty()
                {
                    self.job_events.publish(q.as_str(), now, events);
                }
                out
            });
        let wake = wake.into();
        if wake > 0 {
            self.wakers.wake(&wake_key(q), wake);
        }
        out
    }

    pub(crate) fn job_layout(&self, q: &Name, layout: &Layout) -> (u32, bool) {
        let args = |b: &mut Vec<u8>| put(b, layout);
        let log = layout
            .store
            .then_some((Code::JobLayout, &args as &dyn Fn(&mut Vec<u8>)));
        self.on_queue(q, layout.store, log, |queue, _| (queue.layout(layout), false))
    }

    /// Fails if the queue is retired (a partition of a replaced layout).
    pub(crate) fn job_push(&self, q: &Name, reqs: &[PushReq<'_>]) -> Result<Vec<PushOutcome>> {
        // Pushes without a group are logged as before groups were.
        let grouped = reqs.iter().any(|r| !r.group.is_empty());
        let args = |b: &mut Vec<u8>| {
            if grouped {
                put(b, &grouped_push_args(reqs));
            } else {
                put(b, &push_args(reqs));
            }
        };
        let code = if grouped {
            Code::JobPushGrouped
        } else {
            Code::JobPush
        };
        self.with_queue(q, (code, &args), |queue, now| {
            if queue.retired {
                return (Err(Error::retired(q.as_str())), 0);
            }
            // A group anywhere in the batch turns the queue fair first
            // (as jobs.lua's push).
            if grouped {
                queue.turn_fair(now);
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
            (Ok(outcomes), woken)
        })
    }

    pub(crate) fn job_retire(&self, q: &Name, close: bool) -> (bool, [u64; 4]) {
        let args = |b: &mut Vec<u8>| put(b, &close);
        self.with_queue(q, (Code::JobRetire, &args), |queue, _| {
            (queue.retire(close), false)
        })
    }

    /// Acks the deliveries `claim.acks` (whether each was that
    /// delivery's), then claims up to `claim.max` jobs (none with 0), in
    /// one step.
    pub(crate) fn job_claim(&self, q: &Name, claim: &Claim<'_>) -> (Vec<bool>, ClaimOutcome) {
        let Claim {
            acks,
            keep,
            lease_ms,
            max,
        } = *claim;
        let args = |b: &mut Vec<u8>| put(b, &(acks, keep, lease_ms, max as u64));
        self.with_queue(q, (Code::JobClaim, &args), |queue, now| {
            let running = queue.running();
            let mut freed = 0;
            let acked = acks
                .iter()
                .map(|(id, fence)| {
                    let (acked, wake) = queue.ack(id, *fence, keep, now);
                    freed += wake;
                    acked
                })
                .collect();
            freed += queue.slot_wakes(running);
            if max == 0 {
                let empty = ClaimOutcome::Empty {
                    next_due_ms: None,
                    now_ms: now,
                };
                return ((acked, empty), freed);
            }
            // This claim takes what the acks freed first: wake others
            // only for what it leaves.
            let (claimed, wake) = queue.claim(lease_ms, max, now);
            let took = match &claimed {
                ClaimOutcome::Jobs(jobs) => jobs.len(),
                ClaimOutcome::Empty { .. } => 0,
            };
            ((acked, claimed), wake + freed.saturating_sub(took))
        })
    }

    pub(crate) fn job_done(&self, q: &Name, limit: usize) -> Vec<RawDone> {
        self.read_queue(q, |queue, _| queue.done(limit))
    }

    pub(crate) fn job_nack(&self, q: &Name, nack: &Nack<'_>) -> NackOutcome {
        let args = |b: &mut Vec<u8>| put(b, &(nack.id, nack.fence, nack.delay_ms, nack.jitter, nack.error));
        self.with_queue(q, (Code::JobNack, &args), |queue, now| queue.nack(nack, now))
    }

    pub(crate) fn job_extend(&self, q: &Name, extend: &Extend<'_>) -> Option<u64> {
        let args = |b: &mut Vec<u8>| put(b, &(extend.id, extend.fence, extend.lease_ms));
        self.with_queue(q, (Code::JobExtend, &args), |queue, now| {
            (queue.extend(extend, now), false)
        })
    }

    pub(crate) fn job_cancel(&self, q: &Name, id: &str) -> CancelOutcome {
        let args = |b: &mut Vec<u8>| put(b, &id);
        self.with_queue(q, (Code::JobCancel, &args), |queue, _| (queue.cancel(id), false))
    }

    pub(crate) fn job_reschedule(&self, q: &Name, id: &str, when: When) -> RescheduleOutcome {
        let args = |b: &mut Vec<u8>| put(b, &(id, when));
        self.with_queue(q, (Code::JobReschedule, &args), |queue, now| {
            queue.reschedule(id, when, now)
        })
    }

    pub(crate) fn job_dead(&self, q: &Name, limit: usize) -> Vec<RawDead> {
        self.read_queue(q, |queue, _| queue.dead(limit))
    }

    pub(crate) fn job_get(&self, q: &Name, id: &str, whole: bool) -> Option<RawInfo> {
        self.read_queue(q, |queue, _| queue.info(id, whole))
    }

    pub(crate) fn job_list(
        &self,
        q: &Name,
        state: RawState,
        from: Option<&ListFrom<'_>>,
        limit: usize,
    ) -> Vec<RawInfo> {
        self.read_queue(q, |queue, _| queue.list(state, from, limit.max(1)))
    }

    pub(crate) fn job_replay(&self, q: &Name, id: Option<&str>) -> u64 {
        let args = |b: &mut Vec<u8>| put(b, &id);
        self.with_queue(q, (Code::JobReplay, &args), |queue, now| {
            let n = queue.replay(id, now);
            (n, n > 0)
        })
    }

    pub(crate) fn job_purge(&self, q: &Name, id: Option<&str>) -> u64 {
        let args = |b: &mut Vec<u8>| put(b, &id);
        self.with_queue(q, (Code::JobPurge, &args), |queue, _| (queue.purge(id), false))
    }

    /// Pauses queue `q` (`pause`) or resumes it; whether that changed it.
    pub(crate) fn job_pause(&self, q: &Name, pause: bool) -> bool {
        let args = |b: &mut Vec<u8>| put(b, &pause);
        self.with_queue(q, (Code::JobPause, &args), |queue, _| queue.set_paused(pause))
    }

    /// Stats promote the delayed jobs that are due, so they are logged
    /// (not counted as activity).
    pub(crate) fn job_stats(&self, q: &Name) -> RawStats {
        if !self.job_exists(q) {
            // Nothing to promote: read without making a state to drop.
            return Queue::default().stats(self.stamp().ms());
        }
        self.on_queue(q, false, Some((Code::JobStats, &|_| {})), |queue, now| {
            (queue.stats(now), false)
        })
    }

    /// Sets queue `q`'s limits (see `fair.rs`).
    pub(crate) fn job_set_limits(&self, q: &Name, limits: &RawLimits) {
        let args = |b: &mut Vec<u8>| put(b, limits);
        self.with_queue(q, (Code::JobSetLimits, &args), |queue, now| {
            ((), queue.set_limits(*limits, now))
        });
    }

    /// Sets or drops group `group`'s own limits; `Err` past the most a
    /// queue keeps.
    pub(crate) fn job_set_group_limits(
        &self,
        q: &Name,
        group: &str,
        limits: Option<&RawGroupLimits>,
    ) -> Result<()> {
        let args = |b: &mut Vec<u8>| put(b, &(group, limits));
        self.with_queue(q, (Code::JobSetGroupLimits, &args), |queue, now| {
            let (done, wake) = queue.set_group_limits(group, limits.copied(), now);
            (
                done.map_err(|most| Error::too_many_overrides(q.as_str(), most)),
                wake,
            )
        })
    }

    /// Queue `q`'s limits, and group `group`'s own (read only).
    pub(crate) fn job_limits(&self, q: &Name, group: Option<&str>) -> (RawLimits, Option<RawGroupLimits>) {
        self.read_queue(q, |queue, _| queue.limits(group))
    }

    /// A page of queue `q`'s groups (read only).
    pub(crate) fn job_groups(&self, q: &Name, from: Option<(u64, &str)>, limit: usize) -> Vec<RawGroup> {
        self.read_queue(q, |queue, _| queue.groups(from, limit.max(1)))
    }

    /// Whether anything was ever written to queue `q` (see `is_blank`;
    /// jobs.lua's `exists`: its `m` hash). A queue that held nothing for
    /// the idle time is dropped, and then is not.
    pub(crate) fn job_exists(&self, q: &Name) -> bool {
        self.read_queue(q, |queue, _| !queue.is_blank())
    }
}

/// The embedded store as a queue's operations see it: the shared core,
/// the queues' shelf and the event hub (`store/embedded/` holds them).
#[derive(Clone, Copy)]
pub(crate) struct JobMemory<'a> {
    pub(crate) core: &'a MemoryCore,
    pub(crate) queues: &'a Shelf<Queue>,
    pub(crate) job_events: &'a Hub,
}

impl<'a> Deref for JobMemory<'a> {
    type Target = MemoryCore;

    fn deref(&self) -> &MemoryCore {
        self.core
    }
}

type PushArgs<'a> = (&'a str, &'a [u8], When, u8, u32, BackoffSpec, bool);

/// A logged push of `Code::JobPushGrouped`: each job's arguments and
/// group.
type GroupedPushArgs<'a> = (PushArgs<'a>, &'a str);

fn grouped_push_args<'a>(reqs: &'a [PushReq<'a>]) -> Vec<GroupedPushArgs<'a>> {
    push_args(reqs)
        .into_iter()
        .zip(reqs.iter().map(|r| r.group))
        .collect()
}

fn push_args<'a>(reqs: &'a [PushReq<'a>]) -> Vec<PushArgs<'a>> {
    reqs.iter()
        .map(|r| {
            (
                r.id,
                r.payload,
                r.when,
                r.priority,
                r.max_attempts,
                r.backoff,
                r.replace,
            )
        })
        .collect()
}

fn push_req<'a>(a: PushArgs<'a>, group: &'a str) -> PushReq<'a> {
    let (id, payload, when, priority, max_attempts, backoff, replace) = a;
    PushReq {
        id,
        payload,
        when,
        priority,
        max_attempts,
        backoff,
        replace,
        group,
    }
}

/// Runs record `r` of this primitive again on `m`, whose time is pinned
/// to the record's (see `store/embedded/replay.rs`). Answers are dropped:
/// the state is what replay is for.
pub(crate) fn replay(m: &JobMemory<'_>, r: &replay::Record<'_>) -> Result<()> {
    let g = &r.name;
    match r.code {
        Code::JobLayout => {
            let l: Layout = replay::args(r.args)?;
            m.job_layout(g, &l);
        }
        Code::JobPush => {
            let reqs: Vec<PushArgs<'_>> = replay::args(r.args)?;
            let reqs: Vec<PushReq<'_>> = reqs.into_iter().map(|a| push_req(a, "")).collect();
            let _ = m.job_push(g, &reqs);
        }
        Code::JobPushGrouped => {
            let reqs: Vec<GroupedPushArgs<'_>> = replay::args(r.args)?;
            let reqs: Vec<PushReq<'_>> = reqs.into_iter().map(|(a, group)| push_req(a, group)).collect();
            let _ = m.job_push(g, &reqs);
        }
        Code::JobSetLimits => {
            m.job_set_limits(g, &replay::args(r.args)?);
        }
        Code::JobSetGroupLimits => {
            let (group, limits): (&str, Option<RawGroupLimits>) = replay::args(r.args)?;
            let _ = m.job_set_group_limits(g, group, limits.as_ref());
        }
        Code::JobRetire => {
            m.job_retire(g, replay::args(r.args)?);
        }
        Code::JobClaim => {
            let (acks, keep, lease_ms, max): (Vec<(&str, u64)>, Option<Keep>, u64, u64) =
                replay::args(r.args)?;
            let claim = Claim {
                acks: &acks,
                keep,
                lease_ms,
                max: max as usize,
            };
            m.job_claim(g, &claim);
        }
        Code::JobNack => {
            let (id, fence, delay_ms, jitter, error): (&str, u64, Option<u64>, f64, Option<&str>) =
                replay::args(r.args)?;
            m.job_nack(
                g,
                &Nack {
                    id,
                    fence,
                    delay_ms,
                    jitter,
                    error,
                },
            );
        }
        Code::JobExtend => {
            let (id, fence, lease_ms): (&str, u64, u64) = replay::args(r.args)?;
            m.job_extend(g, &Extend { id, fence, lease_ms });
        }
        Code::JobCancel => {
            m.job_cancel(g, replay::args(r.args)?);
        }
        Code::JobReschedule => {
            let (id, when): (&str, When) = replay::args(r.args)?;
            m.job_reschedule(g, id, when);
        }
        Code::JobReplay => {
            m.job_replay(g, replay::args(r.args)?);
        }
        Code::JobPurge => {
            m.job_purge(g, replay::args(r.args)?);
        }
        Code::JobPause => {
            m.job_pause(g, replay::args(r.args)?);
        }
        Code::JobStats => {
            m.job_stats(g);
        }
        other => return Err(replay::misrouted(other)),
    }
    Ok(())
}

impl JobBackend for JobMemory<'_> {
    async fn job_layout(&self, q: &Name, layout: &jobs::Layout) -> Result<(u32, bool)> {
        self.write(|| self.job_layout(q, layout)).await
    }

    async fn job_push(&self, q: &Name, reqs: &[jobs::PushReq<'_>]) -> Result<Vec<jobs::PushOutcome>> {
        self.write(|| self.job_push(q, reqs)).await?
    }

    async fn job_retire(&self, q: &Name, close: bool) -> Result<(bool, [u64; 4])> {
        self.write(|| self.job_retire(q, close)).await
    }

    async fn job_claim(&self, q: &Name, claim: &jobs::Claim<'_>) -> Result<(Vec<bool>, jobs::ClaimOutcome)> {
        self.write(|| self.job_claim(q, claim)).await
    }

    async fn job_done(&self, q: &Name, limit: usize) -> Result<Vec<jobs::RawDone>> {
        self.read(|| self.job_done(q, limit)).await
    }

    async fn job_nack(&self, q: &Name, nack: &jobs::Nack<'_>) -> Result<jobs::NackOutcome> {
        self.write(|| self.job_nack(q, nack)).await
    }

    async fn job_extend(&self, q: &Name, extend: &jobs::Extend<'_>) -> Result<Option<u64>> {
        self.write(|| self.job_extend(q, extend)).await
    }

    async fn job_cancel(&self, q: &Name, id: &str) -> Result<jobs::CancelOutcome> {
        self.write(|| self.job_cancel(q, id)).await
    }

    async fn job_reschedule(&self, q: &Name, id: &str, when: jobs::When) -> Result<jobs::RescheduleOutcome> {
        self.write(|| self.job_reschedule(q, id, when)).await
    }

    async fn job_dead(&self, q: &Name, limit: usize) -> Result<Vec<jobs::RawDead>> {
        self.read(|| self.job_dead(q, limit)).await
    }

    async fn job_get(&self, q: &Name, id: &str, whole: bool) -> Result<Option<jobs::RawInfo>> {
        self.read(|| self.job_get(q, id, whole)).await
    }

    async fn job_list(
        &self,
        q: &Name,
        state: jobs::RawState,
        from: Option<&jobs::ListFrom<'_>>,
        limit: usize,
    ) -> Result<Vec<jobs::RawInfo>> {
        self.read(|| self.job_list(q, state, from, limit)).await
    }

    async fn job_replay(&self, q: &Name, id: Option<&str>) -> Result<u64> {
        self.write(|| self.job_replay(q, id)).await
    }

    async fn job_purge(&self, q: &Name, id: Option<&str>) -> Result<u64> {
        self.write(|| self.job_purge(q, id)).await
    }

    async fn job_exists(&self, q: &Name) -> Result<bool> {
        self.read(|| self.job_exists(q)).await
    }

    async fn job_pause(&self, q: &Name, pause: bool) -> Result<bool> {
        self.write(|| self.job_pause(q, pause)).await
    }

    async fn job_stats(&self, q: &Name) -> Result<jobs::RawStats> {
        self.read(|| self.job_stats(q)).await
    }

    async fn job_set_limits(&self, q: &Name, limits: &jobs::RawLimits) -> Result<()> {
        self.write(|| self.job_set_limits(q, limits)).await
    }

    async fn job_set_group_limits(
        &self,
        q: &Name,
        group: &str,
        limits: Option<&jobs::RawGroupLimits>,
    ) -> Result<()> {
        self.write(|| self.job_set_group_limits(q, group, limits)).await?
    }

    async fn job_limits(
        &self,
        q: &Name,
        group: Option<&str>,
    ) -> Result<(jobs::RawLimits, Option<jobs::RawGroupLimits>)> {
        self.read(|| self.job_limits(q, group)).await
    }

    async fn job_groups(
        &self,
        q: &Name,
        from: Option<(u64, &str)>,
        limit: usize,
    ) -> Result<Vec<jobs::RawGroup>> {
        self.read(|| self.job_groups(q, from, limit)).await
    }
}
