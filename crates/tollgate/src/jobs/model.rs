//! The job queue's reference model, the same steps as `lua/jobs.lua`: one
//! queue's state (ready, delayed, in flight, dead, completed, its events)
//! and the steps of every operation. Pure: each is a function of the
//! state, the arguments and the store's now; `memory.rs` runs them in
//! critical sections.

use std::collections::{BTreeSet, HashMap, VecDeque};

use crate::store::memory::Shelved;

use super::events::{JobEvent, JobEventKind};
use super::fair::Fair;

#[path = "model_reads.rs"]
mod reads;
use super::types::{
    BackoffSpec, CancelOutcome, ClaimOutcome, Extend, Keep, LATENESS_BOUNDS_MS, Layout, Nack, NackOutcome,
    PushOutcome, PushReq, RawDead, RawDone, RawGroup, RawGroupLimits, RawJob, RawLimits, RawStats,
    RescheduleOutcome, When, within_listing_bytes,
};

const BATCH: usize = 100;
const LATENESS_KEPT: usize = 200;
/// Dead letters kept per queue; the oldest beyond go.
pub(crate) const DEAD_KEPT: usize = 10_000;

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct JobData {
    prio: u8,
    seq: u64,
    max: u32,
    backoff: BackoffSpec,
    payload: Vec<u8>,
    attempts: u32,
    /// Why it died: the error of the nack that made it dead (jobs.lua:
    /// its `e` hash).
    error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum Place {
    Ready,
    Delayed(u64),
    InFlight { deadline: u64, fence: u64 },
    Dead(u64),
    Done(u64),
}

/// One queue's state in memory.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Queue {
    /// The log record that last changed it (see `GateState::lsn`).
    pub(crate) lsn: u64,
    seq: u64,
    fence: u64,
    jobs: HashMap<String, (JobData, Place)>,
    ready: BTreeSet<(u8, u64, String)>,
    delayed: BTreeSet<(u64, String)>,
    in_flight: BTreeSet<(u64, String)>,
    dead: BTreeSet<(u64, String)>,
    done: BTreeSet<(u64, String)>,
    lateness: VecDeque<u64>,
    stats: RawStats,
    /// The partition count of the sharded queue this is the base of.
    partitions: Option<u32>,
    /// Closed to pushes: a partition of a replaced layout.
    pub(crate) retired: bool,
    /// The first fence is above this (see `Shelved`).
    fence_floor: u64,
    /// The schedules that push to this queue (kept with it, as on Redis).
    pub(crate) schedules: crate::schedule::state::Schedules,
    /// Paused: takes pushes, hands out no jobs (jobs.lua: `paused` in m).
    paused: bool,
    /// The events of the step under way, while someone watches (set by
    /// `on_queue`; jobs.lua: `emit`, written when m's field v is live).
    #[serde(skip)]
    pub(super) events: Option<Vec<JobEvent>>,
    /// Groups and limits: written to a snapshot after the rest (see
    /// `store/embedded/snapshot.rs`), so snapshots made before them load.
    #[serde(skip)]
    pub(crate) fair: Fair,
}

impl Shelved for Queue {
    /// Nothing was ever written to it: no job, no count, no layout.
    fn is_blank(&self) -> bool {
        self.seq == 0
            && self.fence == 0
            && self.jobs.is_empty()
            && self.partitions.is_none()
            && !self.retired
            && self.stats == RawStats::default()
            && self.schedules.is_empty()
            && !self.paused
            && self.fair.is_blank()
    }

    /// A queue is dropped only when it holds nothing at all (no job of any
    /// kind, dead or kept as completed) and carries no partition layout
    /// of more than one partition and no retired flag. Those two must
    /// outlive any idle period: a layout K > 1 forgotten would let a
    /// handle with another K store its own, and producers and consumers
    /// would then disagree on where jobs go (pushes landing where no
    /// consumer looks); a retired partition forgotten would take pushes
    /// again that nobody claims. They are a few bytes per queue name,
    /// written only by `repartition` and a sharded handle's first write,
    /// never by a read. A layout of one is the plain queue's, which every
    /// sharded handle's first write stores: forgotten, the next write
    /// stores it again, and a handle naming more partitions is refused or
    /// retires the queue, loudly either way (as queue.lua's `settle`).
    fn busy_until(&self) -> Option<u64> {
        let empty = self.jobs.is_empty()
            && self.ready.is_empty()
            && self.delayed.is_empty()
            && self.in_flight.is_empty()
            && self.dead.is_empty()
            && self.done.is_empty();
        // A paused queue is kept too: dropped, it would come back running.
        let kept = self.partitions.is_some_and(|k| k > 1)
            || self.retired
            || self.paused
            || self.fair.has_limits()
            || !self.schedules.is_empty();
        (empty && !kept).then_some(0)
    }

    fn fence(&self) -> u64 {
        self.fence
    }

    fn set_fence_floor(&mut self, floor: u64) {
        self.fence_floor = floor;
    }

    fn weight(&self) -> usize {
        self.jobs.len()
    }
}

/// Takes the entries of `set` (time, id) due by `until` out of it, first
/// due first, at most `BATCH` at a time: a step's work stays bounded
/// however much fell due at once.
fn take_due(set: &mut BTreeSet<(u64, String)>, until: u64) -> Vec<(u64, String)> {
    let mut due = Vec::new();
    while due.len() < BATCH && set.first().is_some_and(|(at, _)| *at <= until) {
        due.extend(set.pop_first());
    }
    due
}

/// Readiness order: higher priority first, then push order.
fn ready_key(id: &str, d: &JobData) -> (u8, u64, String) {
    (255 - d.prio, d.seq, id.to_owned())
}

impl Queue {
    /// Records an event of the step under way if anyone watches.
    fn emit(&mut self, event: impl FnOnce() -> JobEvent) {
        if let Some(events) = &mut self.events {
            events.push(event());
        }
    }

    /// The partition count stored on this base queue, if any.
    pub(crate) fn partitions(&self) -> Option<u32> {
        self.partitions
    }

    /// Whether a job with this id exists (in any state).
    pub(crate) fn has_job(&self, id: &str) -> bool {
        self.jobs.contains_key(id)
    }

    /// Removes job `id` if it is delayed (not yet due); whether it was.
    pub(crate) fn take_back_delayed(&mut self, id: &str) -> bool {
        if !matches!(self.jobs.get(id), Some((_, Place::Delayed(_)))) {
            return false;
        }
        self.unplace(id);
        self.forget(id);
        true
    }

    /// Job `id` is gone.
    fn forget(&mut self, id: &str) {
        self.jobs.remove(id);
        self.fair.forget(id);
    }

    fn set_ready(&mut self, id: &str, now: u64) {
        if let Some((d, place)) = self.jobs.get_mut(id) {
            *place = Place::Ready;
            let key = ready_key(id, d);
            self.ready.insert(key.clone());
            if self.fair.is_on() {
                let group = self.fair.group_of(id).to_owned();
                self.fair.ready(&group, key, now);
            }
        }
    }

    /// Job `id` stops running (the caller took it out of `in_flight`); how
    /// many consumers to wake for what that lets go in its group.
    fn release(&mut self, id: &str, now: u64) -> usize {
        if !self.fair.is_on() {
            return 0;
        }
        let group = self.fair.group_of(id).to_owned();
        self.fair.release(&group, now)
    }

    /// How many running jobs there are.
    pub(crate) fn running(&self) -> usize {
        self.in_flight.len()
    }

    /// Consumers to wake for slots of the queue's concurrency freed since
    /// `before` jobs ran (see `Fair::slot_wakes`).
    pub(crate) fn slot_wakes(&self, before: usize) -> usize {
        self.fair.slot_wakes(before, self.in_flight.len())
    }

    /// Turns the queue fair (see `fair.rs`), if not yet.
    pub(crate) fn turn_fair(&mut self, now: u64) {
        self.fair.turn_on(self.ready.iter(), self.in_flight.len(), now);
    }

    fn set_delayed(&mut self, id: &str, at: u64) {
        if let Some((_, place)) = self.jobs.get_mut(id) {
            *place = Place::Delayed(at);
            self.delayed.insert((at, id.to_owned()));
        }
    }

    /// Puts job `id` in line for `run_at`: ready if due, else delayed.
    /// Returns whether to wake a sleeping consumer: the job is ready, or is
    /// now the first delayed one (a consumer may sleep until a later time).
    fn schedule(&mut self, id: &str, run_at: u64, now: u64) -> bool {
        if run_at <= now {
            self.set_ready(id, now);
            true
        } else {
            self.set_delayed(id, run_at);
            self.delayed.first().is_some_and(|(_, first)| first == id)
        }
    }

    /// Takes the job out of whichever set holds it; returns where it was.
    fn unplace(&mut self, id: &str) -> Option<Place> {
        let (d, place) = self.jobs.get(id)?;
        let place = *place;
        match place {
            Place::Ready => {
                let key = ready_key(id, d);
                self.ready.remove(&key);
                if self.fair.is_on() {
                    let group = self.fair.group_of(id).to_owned();
                    self.fair.unready(&group, &key);
                }
            }
            Place::Delayed(at) => {
                self.delayed.remove(&(at, id.to_owned()));
            }
            Place::InFlight { deadline, .. } => {
                self.in_flight.remove(&(deadline, id.to_owned()));
            }
            Place::Dead(at) => {
                self.dead.remove(&(at, id.to_owned()));
            }
            Place::Done(at) => {
                self.done.remove(&(at, id.to_owned()));
            }
        }
        Some(place)
    }

    fn bury(&mut self, id: &str, now: u64) {
        if let Some((_, place)) = self.jobs.get_mut(id) {
            *place = Place::Dead(now);
            self.dead.insert((now, id.to_owned()));
            self.stats.dead_total += 1;
        }
        if self.dead.len() > DEAD_KEPT
            && let Some((_, oldest)) = self.dead.pop_first()
        {
            self.forget(&oldest);
        }
    }

    /// Returns how many jobs became ready (and groups free to run again).
    fn promote(&mut self, now: u64) -> usize {
        let mut readied = 0;
        let running = self.in_flight.len();
        for (at, id) in take_due(&mut self.delayed, now) {
            self.set_ready(&id, now);
            let late = now - at;
            self.lateness.push_front(late);
            let bucket = LATENESS_BOUNDS_MS
                .iter()
                .position(|bound| late <= *bound)
                .unwrap_or(LATENESS_BOUNDS_MS.len());
            if self.stats.lateness_buckets.is_empty() {
                self.stats.lateness_buckets = vec![0; LATENESS_BOUNDS_MS.len() + 1];
            }
            self.stats.lateness_buckets[bucket] += 1;
            self.stats.lateness_sum_ms += late;
            readied += 1;
        }
        self.lateness.truncate(LATENESS_KEPT);
        for (_, id) in take_due(&mut self.in_flight, now) {
            self.stats.redelivered += 1;
            readied += self.release(&id, now);
            let Some(attempts) = self.jobs.get(&id).map(|(d, _)| (d.attempts, d.max)) else {
                continue;
            };
            let expired = |kind| JobEvent {
                attempt: Some(attempts.0),
                ..JobEvent::raw(kind, &id)
            };
            self.emit(|| expired(JobEventKind::Expired));
            if attempts.0 >= attempts.1 {
                self.bury(&id, now);
                self.emit(|| expired(JobEventKind::Dead));
            } else {
                self.set_ready(&id, now);
                readied += 1;
            }
        }
        if self.fair.is_on() {
            readied += self.slot_wakes(running) + self.fair.promote(now, BATCH);
        }
        readied
    }

    /// The soonest time something may become claimable: a delayed job
    /// due, a lease over, a rate letting a job go.
    fn next_due(&self, now: u64) -> Option<u64> {
        [
            self.delayed.first().map(|(at, _)| *at),
            self.in_flight.first().map(|(at, _)| *at),
            self.fair.next_due(now),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Returns the outcome and whether a sleeping consumer should be woken.
    pub(crate) fn push(&mut self, req: &PushReq<'_>, now: u64) -> (PushOutcome, bool) {
        let run_at = match req.when {
            When::Delay(d) => now + d,
            When::At(at) => at,
        };
        let mut outcome = PushOutcome::New { run_at_ms: run_at };
        let mut attempts = 0;
        match self.jobs.get(req.id).map(|(d, p)| (d.attempts, *p)) {
            Some(_) if !req.replace => return (PushOutcome::Kept, false),
            Some((_, Place::InFlight { .. } | Place::Dead(_) | Place::Done(_))) => {
                return (PushOutcome::Busy, false);
            }
            Some((tried, _)) => {
                // Attempts of a replaced job carry over, as on Redis.
                attempts = tried;
                self.unplace(req.id);
                outcome = PushOutcome::Replaced { run_at_ms: run_at };
            }
            None => self.stats.pushed += 1,
        }
        if !req.group.is_empty() {
            self.turn_fair(now);
        }
        self.fair.set_group(req.id, req.group);
        self.seq += 1;
        self.jobs.insert(
            req.id.to_owned(),
            (
                JobData {
                    prio: req.priority,
                    seq: self.seq,
                    max: req.max_attempts,
                    backoff: req.backoff,
                    payload: req.payload.to_vec(),
                    attempts,
                    error: None,
                },
                Place::Ready,
            ),
        );
        let wake = self.schedule(req.id, run_at, now);
        self.emit(|| JobEvent {
            run_at_ms: Some(run_at),
            ..JobEvent::raw(JobEventKind::Pushed, req.id)
        });
        (outcome, wake)
    }

    /// Claims up to `max` due jobs. Returns the outcome and how many other
    /// consumers to wake (for jobs readied beyond what this claim takes).
    pub(crate) fn claim(&mut self, lease_ms: u64, max: usize, now: u64) -> (ClaimOutcome, usize) {
        let readied = self.promote(now);
        if self.paused {
            // Due jobs are made ready, but none is handed out, and nobody
            // is woken for them: the consumer sleeps its usual bounded
            // sleep, and a resume wakes it.
            let empty = ClaimOutcome::Empty {
                next_due_ms: None,
                now_ms: now,
            };
            return (empty, 0);
        }
        let wake = readied.saturating_sub(max);
        let deadline = now + lease_ms;
        let mut jobs = Vec::new();
        while jobs.len() < max {
            let next = if self.fair.is_on() {
                let key = self.fair.take(self.in_flight.len(), now);
                if let Some(key) = &key {
                    self.ready.remove(key);
                }
                key
            } else {
                self.ready.pop_first()
            };
            let Some((_, _, id)) = next else {
                break;
            };
            jobs.extend(self.hand_out(id, deadline, now));
        }
        self.stats.claimed += jobs.len() as u64;
        if self.fair.is_on() && jobs.len() < max && !self.ready.is_empty() {
            self.fair.count_limited();
        }
        if jobs.is_empty() {
            let empty = ClaimOutcome::Empty {
                next_due_ms: self.next_due(now),
                now_ms: now,
            };
            return (empty, wake);
        }
        (ClaimOutcome::Jobs(jobs), wake)
    }

    /// Delivers ready job `id` (taken out of the ready sets) under a lease
    /// to `deadline`.
    fn hand_out(&mut self, id: String, deadline: u64, now: u64) -> Option<RawJob> {
        let (d, place) = self.jobs.get_mut(&id)?;
        // Above the last fence, the clock (ms x 1000) and every fence
        // of a dropped queue, which may have run ahead of the clock:
        // the gates' rule (`GateState::grant`; claim in jobs.lua).
        self.fence = self.fence.max(now * 1000).max(self.fence_floor) + 1;
        d.attempts += 1;
        *place = Place::InFlight {
            deadline,
            fence: self.fence,
        };
        let group = self.fair.group_of(&id);
        let job = RawJob {
            id: id.clone(),
            payload: d.payload.clone(),
            attempt: d.attempts,
            fence: self.fence,
            deadline_ms: deadline,
            group: (!group.is_empty()).then(|| group.to_owned()),
        };
        let (attempt, fence) = (d.attempts, self.fence);
        self.emit(|| JobEvent {
            attempt: Some(attempt),
            fence: Some(fence),
            ..JobEvent::raw(JobEventKind::Claimed, &id)
        });
        self.in_flight.insert((deadline, id));
        Some(job)
    }

    fn held(&self, id: &str, fence: u64) -> bool {
        matches!(self.jobs.get(id), Some((_, Place::InFlight { fence: f, .. })) if *f == fence)
    }

    /// Whether that was the delivery's (now acked), and how many consumers
    /// to wake for what its end lets go.
    pub(crate) fn ack(&mut self, id: &str, fence: u64, keep: Option<Keep>, now: u64) -> (bool, usize) {
        if !self.held(id, fence) {
            return (false, 0);
        }
        self.unplace(id);
        let wake = self.release(id, now);
        self.stats.acked += 1;
        self.emit(|| JobEvent::raw(JobEventKind::Acked, id));
        let Some(keep) = keep else {
            self.forget(id);
            return (true, wake);
        };
        if let Some((d, place)) = self.jobs.get_mut(id) {
            d.attempts = 0;
            *place = Place::Done(now);
            self.done.insert((now, id.to_owned()));
        }
        while self.done.len() as u64 > keep.count {
            if let Some((_, old)) = self.done.pop_first() {
                self.forget(&old);
            }
        }
        for (_, old) in take_due(&mut self.done, now.saturating_sub(keep.ms)) {
            self.forget(&old);
        }
        (true, wake)
    }

    pub(crate) fn done(&self, limit: usize) -> Vec<RawDone> {
        let rows = self.done.iter().rev().take(limit).filter_map(|(at, id)| {
            self.jobs.get(id).map(|(d, _)| RawDone {
                id: id.clone(),
                acked_ms: *at,
                payload: d.payload.clone(),
            })
        });
        within_listing_bytes(rows, |r| r.id.len() + r.payload.len())
    }

    pub(crate) fn nack(&mut self, nack: &Nack<'_>, now: u64) -> (NackOutcome, usize) {
        let Nack {
            id,
            fence,
            delay_ms,
            jitter,
            error,
        } = *nack;
        if !self.held(id, fence) {
            return (NackOutcome::NotHeld, 0);
        }
        let running = self.in_flight.len();
        self.unplace(id);
        let freed = self.release(id, now) + self.slot_wakes(running);
        let Some((d, _)) = self.jobs.get(id) else {
            return (NackOutcome::NotHeld, freed);
        };
        let attempt = Some(d.attempts);
        if d.attempts >= d.max {
            self.bury(id, now);
            if let Some((d, _)) = self.jobs.get_mut(id) {
                d.error = error.map(str::to_owned);
            }
            self.emit(|| JobEvent {
                attempt,
                ..JobEvent::raw(JobEventKind::Dead, id).with_error(error)
            });
            return (NackOutcome::Dead, freed);
        }
        let delay = delay_ms.unwrap_or_else(|| backoff_delay(&d.backoff, d.attempts, jitter));
        self.stats.retried += 1;
        let wake = self.schedule(id, now + delay, now);
        self.emit(|| JobEvent {
            attempt,
            run_at_ms: Some(now + delay),
            ..JobEvent::raw(JobEventKind::Nacked, id).with_error(error)
        });
        (
            NackOutcome::Retry {
                run_at_ms: now + delay,
            },
            freed + usize::from(wake),
        )
    }

    pub(crate) fn extend(&mut self, extend: &Extend<'_>, now: u64) -> Option<u64> {
        let Extend { id, fence, lease_ms } = *extend;
        if !self.held(id, fence) {
            return None;
        }
        self.unplace(id);
        let deadline = now + lease_ms;
        if let Some((_, place)) = self.jobs.get_mut(id) {
            *place = Place::InFlight { deadline, fence };
        }
        self.in_flight.insert((deadline, id.to_owned()));
        Some(deadline)
    }

    pub(crate) fn cancel(&mut self, id: &str) -> CancelOutcome {
        match self.jobs.get(id).map(|(_, p)| *p) {
            None => CancelOutcome::Unknown,
            Some(Place::InFlight { .. }) => CancelOutcome::Running,
            Some(place) => {
                self.unplace(id);
                self.forget(id);
                self.emit(|| JobEvent::raw(JobEventKind::Cancelled, id));
                if matches!(place, Place::Dead(_) | Place::Done(_)) {
                    CancelOutcome::Purged
                } else {
                    CancelOutcome::Cancelled
                }
            }
        }
    }

    pub(crate) fn reschedule(&mut self, id: &str, when: When, now: u64) -> (RescheduleOutcome, bool) {
        let run_at = match when {
            When::Delay(d) => now + d,
            When::At(at) => at,
        };
        match self.jobs.get(id).map(|(_, p)| *p) {
            None | Some(Place::Dead(_) | Place::Done(_)) => (RescheduleOutcome::Unknown, false),
            Some(Place::InFlight { .. }) => (RescheduleOutcome::Running, false),
            Some(_) => {
                self.unplace(id);
                let wake = self.schedule(id, run_at, now);
                self.emit(|| JobEvent {
                    run_at_ms: Some(run_at),
                    ..JobEvent::raw(JobEventKind::Rescheduled, id)
                });
                (RescheduleOutcome::Moved { run_at_ms: run_at }, wake)
            }
        }
    }

    pub(crate) fn dead(&self, limit: usize) -> Vec<RawDead> {
        let rows = self.dead.iter().take(limit).filter_map(|(at, id)| {
            self.jobs.get(id).map(|(d, _)| RawDead {
                id: id.clone(),
                died_ms: *at,
                attempts: d.attempts,
                payload: d.payload.clone(),
                last_error: d.error.clone(),
            })
        });
        within_listing_bytes(rows, |r| {
            r.id.len() + r.payload.len() + r.last_error.as_ref().map_or(0, String::len)
        })
    }

    fn dead_ids(&self, id: Option<&str>) -> Vec<String> {
        match id {
            Some(id) => vec![id.to_owned()],
            None => self.dead.iter().map(|(_, id)| id.clone()).collect(),
        }
    }

    pub(crate) fn replay(&mut self, id: Option<&str>, now: u64) -> u64 {
        let mut n = 0;
        for id in self.dead_ids(id) {
            if matches!(self.jobs.get(&id), Some((_, Place::Dead(_)))) {
                self.unplace(&id);
                if let Some((d, _)) = self.jobs.get_mut(&id) {
                    d.attempts = 0;
                    d.error = None;
                }
                self.set_ready(&id, now);
                self.emit(|| JobEvent::raw(JobEventKind::Replayed, &id));
                n += 1;
            }
        }
        n
    }

    pub(crate) fn purge(&mut self, id: Option<&str>) -> u64 {
        let mut n = 0;
        for id in self.dead_ids(id) {
            if matches!(self.jobs.get(&id), Some((_, Place::Dead(_)))) {
                self.unplace(&id);
                self.forget(&id);
                self.emit(|| JobEvent::raw(JobEventKind::Purged, &id));
                n += 1;
            }
        }
        n
    }

    /// What the queue holds: ready, delayed, in flight, dead.
    fn counts(&self) -> [u64; 4] {
        [
            &self.ready.len(),
            &self.delayed.len(),
            &self.in_flight.len(),
            &self.dead.len(),
        ]
        .map(|n| *n as u64)
    }

    /// The partition count in force for the sharded queue named like this
    /// one (as the `layout` op of jobs.lua): the stored one; else 1 if this
    /// queue holds jobs; else none. With `store`, stores `want` when the
    /// count in force is `expect`, or none, or `want` implied by the jobs.
    /// Returns the count in force afterwards (`want` if none) and whether
    /// it is stored.
    pub(crate) fn layout(&mut self, layout: &Layout) -> (u32, bool) {
        let Layout { want, expect, store } = *layout;
        let holds_jobs = self.counts().iter().any(|n| *n > 0);
        let current = self.partitions.or(holds_jobs.then_some(1));
        let implied = self.partitions.is_none() && current == Some(want);
        if store && (current == expect || current.is_none() || implied) {
            self.partitions = Some(want);
            // Partitioned, this queue itself takes no jobs; with one
            // partition it is the queue.
            self.retired = want > 1;
            return (want, true);
        }
        (current.unwrap_or(want), self.partitions.is_some())
    }

    /// Closes the queue to pushes if it holds nothing (`close`), or opens
    /// it again. Returns whether that was done, and the ready, delayed,
    /// in-flight and dead counts.
    pub(crate) fn retire(&mut self, close: bool) -> (bool, [u64; 4]) {
        let counts = self.counts();
        if !close {
            self.retired = false;
        } else if counts.iter().any(|n| *n > 0) {
            return (false, counts);
        } else {
            self.retired = true;
        }
        (true, counts)
    }

    /// Pauses the queue (`pause`) or resumes it. Returns whether that
    /// changed it, and how many sleeping consumers to wake: on a resume,
    /// one per ready job (at least one).
    pub(crate) fn set_paused(&mut self, pause: bool) -> (bool, usize) {
        if self.paused == pause {
            return (false, 0);
        }
        self.paused = pause;
        let kind = if pause {
            JobEventKind::Paused
        } else {
            JobEventKind::Resumed
        };
        self.emit(|| JobEvent::raw(kind, ""));
        let wake = if pause { 0 } else { self.ready.len().max(1) };
        (true, wake)
    }

    pub(crate) fn stats(&mut self, now: u64) -> RawStats {
        self.promote(now);
        RawStats {
            ready: self.ready.len() as u64,
            delayed: self.delayed.len() as u64,
            in_flight: self.in_flight.len() as u64,
            dead: self.dead.len() as u64,
            completed: self.done.len() as u64,
            lateness_ms: self.lateness.iter().copied().collect(),
            lateness_buckets: if self.stats.lateness_buckets.is_empty() {
                vec![0; LATENESS_BOUNDS_MS.len() + 1]
            } else {
                self.stats.lateness_buckets.clone()
            },
            paused: self.paused,
            groups: self.fair.group_counts().0,
            groups_held: self.fair.group_counts().1,
            limited_claims: self.fair.limited_claims(),
            ..self.stats.clone()
        }
    }

    /// Sets the queue's limits (turning it fair); how many consumers to
    /// wake.
    pub(crate) fn set_limits(&mut self, limits: RawLimits, now: u64) -> usize {
        self.turn_fair(now);
        self.fair.set_limits(limits, now)
    }

    /// Sets or drops `group`'s own limits (turning the queue fair); how
    /// many consumers to wake, or `Err` with the most overrides kept.
    pub(crate) fn set_group_limits(
        &mut self,
        group: &str,
        limits: Option<RawGroupLimits>,
        now: u64,
    ) -> (Result<(), usize>, usize) {
        self.turn_fair(now);
        match self.fair.set_group_limits(group, limits, now) {
            Ok(wake) => (Ok(()), wake),
            Err(most) => (Err(most), 0),
        }
    }

    /// The queue's limits, and `group`'s own if named.
    pub(crate) fn limits(&self, group: Option<&str>) -> (RawLimits, Option<RawGroupLimits>) {
        (*self.fair.limits(), group.and_then(|g| self.fair.group_limits(g)))
    }

    /// A page of the queue's groups (see `Fair::list`).
    pub(crate) fn groups(&self, from: Option<(u64, &str)>, limit: usize) -> Vec<RawGroup> {
        self.fair.list(from, limit)
    }
}

/// The wait before retry `attempts` + 1: fixed, or exponential
/// (base × 2^(attempts−1), capped) scaled by 0.5 + 0.5 × jitter.
pub(crate) fn backoff_delay(b: &BackoffSpec, attempts: u32, jitter: f64) -> u64 {
    if b.kind == 'e' {
        let exp =
            (b.base_ms as f64 * 2f64.powi(attempts.saturating_sub(1).min(62) as i32)).min(b.max_ms as f64);
        (exp * (0.5 + 0.5 * jitter)).floor() as u64
    } else {
        b.base_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::types::RawRate;

    /// A paused queue is never dropped as idle: it would come back
    /// running. Resumed and empty, it may go again.
    #[test]
    fn a_paused_queue_is_kept_while_idle() {
        let mut q = Queue::default();
        assert_eq!(q.set_paused(true), (true, 0));
        assert!(!q.is_blank());
        assert_eq!(q.busy_until(), None);
        assert_eq!(q.set_paused(false), (true, 1));
        assert_eq!(q.busy_until(), Some(0));
    }

    fn push_n(q: &mut Queue, n: usize, group: &str, now: u64) {
        let backoff = BackoffSpec {
            kind: 'f',
            base_ms: 0,
            max_ms: 0,
        };
        for i in 0..n {
            let id = format!("{group}-{i}-{now}");
            let req = PushReq {
                id: &id,
                payload: b"x",
                when: When::Delay(0),
                priority: 0,
                max_attempts: 5,
                backoff,
                replace: false,
                group,
            };
            q.push(&req, now);
        }
    }

    fn claimed(q: &mut Queue, max: usize, now: u64) -> usize {
        match q.claim(3_600_000, max, now).0 {
            ClaimOutcome::Jobs(jobs) => jobs.len(),
            ClaimOutcome::Empty { .. } => 0,
        }
    }

    /// Claims at uneven times and sizes under a rate of 3 a second (and
    /// group rates): no window of one second ever has more than 3, and
    /// each freed slot goes at the next claim.
    #[test]
    fn a_rate_is_exact_and_used_whole() {
        let mut q = Queue::default();
        let start = 1_700_000_000_000;
        let rate = RawRate {
            count: 3,
            period_ms: 1000,
        };
        let limits = RawLimits {
            rate: Some(rate),
            group_rate: Some(RawRate {
                count: 2,
                period_ms: 700,
            }),
            ..RawLimits::default()
        };
        q.set_limits(limits, start);
        push_n(&mut q, 400, "a", start);
        push_n(&mut q, 400, "b", start);
        let (mut now, mut seed, mut times) = (start, 7u64, Vec::new());
        while now < start + 60_000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let max = 1 + (seed >> 33) as usize % 5;
            for _ in 0..claimed(&mut q, max, now) {
                times.push(now);
            }
            now += (seed >> 40) % 400;
        }
        let mut lo = 0;
        for hi in 0..times.len() {
            while times[hi] - times[lo] >= 1000 {
                lo += 1;
            }
            assert!(hi - lo < 3, "more than 3 within a second at {}", times[hi]);
        }
        // Each of the 3 slots comes back 1 s after its job went, and is
        // taken by the next claim, at most 400 ms later: at least 3 jobs
        // per 1.4 s.
        assert!(times.len() >= 3 * 60_000 / 1400, "{} in 60 s", times.len());
    }

    /// A rate changed between claims applies at the next one: made
    /// faster, the jobs it now allows go at once; made slower, nothing
    /// goes until the period's window holds fewer than its count.
    #[test]
    fn a_changed_rate_applies_at_the_next_claim() {
        let mut q = Queue::default();
        let t = 1_700_000_000_000;
        let rate = |count| RawLimits {
            rate: Some(RawRate {
                count,
                period_ms: 1000,
            }),
            ..RawLimits::default()
        };
        q.set_limits(rate(2), t);
        push_n(&mut q, 20, "g", t);
        assert_eq!(claimed(&mut q, 10, t), 2);
        assert_eq!(claimed(&mut q, 10, t), 0);
        q.set_limits(rate(5), t);
        assert_eq!(claimed(&mut q, 10, t), 3, "5 in the window now");
        q.set_limits(rate(1), t);
        assert_eq!(claimed(&mut q, 10, t + 999), 0, "5 went within the second");
        assert_eq!(claimed(&mut q, 10, t + 1000), 1, "they left the window");
        // A clock set back counts the job where it went.
        assert_eq!(claimed(&mut q, 10, t + 500), 0);
    }

    #[test]
    fn dead_letters_are_capped() {
        let mut q = Queue::default();
        let backoff = BackoffSpec {
            kind: 'f',
            base_ms: 0,
            max_ms: 0,
        };
        let now = 1_700_000_000_000;
        for i in 0..DEAD_KEPT + 5 {
            let id = format!("j{i}");
            let req = PushReq {
                id: &id,
                payload: b"x",
                when: When::Delay(0),
                priority: 0,
                max_attempts: 1,
                backoff,
                replace: false,
                group: "",
            };
            q.push(&req, now + i as u64);
            let (ClaimOutcome::Jobs(jobs), _) = q.claim(1000, 1, now + i as u64) else {
                panic!("no job")
            };
            let job = &jobs[0];
            let nack = Nack {
                id: &job.id,
                fence: job.fence,
                delay_ms: None,
                jitter: 0.0,
                error: None,
            };
            assert_eq!(q.nack(&nack, now + i as u64).0, NackOutcome::Dead);
        }
        assert_eq!(q.dead.len(), DEAD_KEPT);
        assert_eq!(q.jobs.len(), DEAD_KEPT, "the dropped ones are forgotten too");
        assert_eq!(q.dead(1)[0].id, "j5", "the oldest went first");
    }
}
