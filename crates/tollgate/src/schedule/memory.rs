//! Schedules in the embedded store, the reference model of `schedule.lua`:
//! a queue's schedules are part of its state (`Queue::schedules`), so a
//! fire is one critical section over the queue, as it is one script on
//! Redis.

use std::borrow::Cow;
use std::ops::Deref;
use std::sync::Mutex;
use std::sync::PoisonError;

use crate::error::Result;
use crate::jobs::memory::JobMemory;
use crate::jobs::model::Queue;
use crate::jobs::types::{BackoffSpec, PushOutcome, PushReq, When};
use crate::name::Name;
use crate::store::memory::put as replay_put;
use crate::store::memory::replay::{self, Code};

use super::backend::ScheduleBackend;
use super::state::{Index, Record};
use super::types as schedule;
use super::types::{
    Due, Fire, FireOutcome, JobSpec, LOOKAHEAD_MS, Next, Put, PutOutcome, RawSchedule, Refusal,
    TriggerOutcome, manual_entry,
};

/// Why `queue` takes no job (schedule.lua's `refused`).
fn refused(queue: &Queue) -> Option<Refusal> {
    if queue.partitions().is_some_and(|k| k > 1) {
        Some(Refusal::Partitioned)
    } else if queue.retired {
        Some(Refusal::Retired)
    } else {
        None
    }
}

/// Pushes job `id` unless it exists; whether it was new and whether to
/// wake a consumer.
fn push_new(
    queue: &mut Queue,
    id: &str,
    job: &JobSpec,
    payload: &[u8],
    run_at: u64,
    now: u64,
) -> (bool, bool) {
    // A group turns the queue fair first, as a push's does.
    if !job.group.is_empty() {
        queue.turn_fair(now);
    }
    let req = PushReq {
        id,
        payload,
        when: When::At(run_at),
        priority: job.priority,
        max_attempts: job.max_attempts,
        backoff: job.backoff,
        replace: false,
        group: &job.group,
    };
    let (outcome, wake) = queue.push(&req, now);
    (matches!(outcome, PushOutcome::New { .. }), wake)
}

impl Queue {
    /// Takes back the jobs schedule `name` pushed ahead for ticks not yet
    /// due (still delayed) and drops them from its history; the earliest
    /// such tick (schedule.lua's `withdraw`).
    fn withdraw(&mut self, name: &str, now: u64) -> Option<u64> {
        let entries: Vec<String> = self.schedules.history.get(name)?.iter().cloned().collect();
        let mut earliest: Option<u64> = None;
        let mut kept = std::collections::VecDeque::new();
        for e in entries {
            let ahead = e.parse::<u64>().ok().filter(|tick| *tick > now);
            match ahead {
                Some(tick) if self.take_back_delayed(&format!("{name}@{e}")) => {
                    earliest = Some(earliest.map_or(tick, |t| t.min(tick)));
                }
                _ => kept.push_back(e),
            }
        }
        if earliest.is_some() {
            if kept.is_empty() {
                self.schedules.history.remove(name);
            } else {
                self.schedules.history.insert(name.to_owned(), kept);
            }
        }
        earliest
    }

    pub(crate) fn schedule_put(&mut self, put: &Put<'_>, now: u64) -> PutOutcome {
        if let Some(why) = refused(self) {
            return PutOutcome::Refused(why);
        }
        let from = now.max(put.start_ms);
        let Some(old) = self.schedules.records.get(put.name).cloned() else {
            self.schedules.write(
                put.name,
                Record {
                    rev: 1,
                    next: Next::FromStart,
                    from,
                    paused: put.paused,
                    timing: put.timing.to_owned(),
                    definition: put.definition.to_owned(),
                    payload: put.payload.to_vec(),
                },
            );
            return PutOutcome::Created;
        };
        if old.timing == put.timing && old.definition == put.definition && old.payload == put.payload {
            return PutOutcome::Unchanged;
        }
        // Ticks pushed ahead are pushed again with the change.
        let earliest = self.withdraw(put.name, now);
        let (next, from) = match earliest {
            _ if old.timing != put.timing => (Next::FromStart, from),
            Some(tick) => (Next::At(tick), old.from),
            None => (old.next, old.from),
        };
        self.schedules.write(
            put.name,
            Record {
                rev: old.rev + 1,
                next,
                from,
                paused: old.paused,
                timing: put.timing.to_owned(),
                definition: put.definition.to_owned(),
                payload: put.payload.to_vec(),
            },
        );
        PutOutcome::Changed
    }

    pub(crate) fn schedule_due(&self, limit: usize, now: u64) -> Due {
        let s = &self.schedules;
        Due {
            now_ms: now,
            soonest: s.by_next.first().map(|(next, _)| Next::decode(*next)),
            none: s.records.is_empty(),
            schedules: s
                .by_next
                .iter()
                .take_while(|(next, _)| *next <= (now + LOOKAHEAD_MS) as i64)
                .take(limit)
                .filter_map(|(_, name)| s.records.get(name).map(|r| s.raw(name, r, false)))
                .collect(),
        }
    }

    /// Returns the outcomes and how many consumers to wake.
    pub(crate) fn schedule_fire(&mut self, fires: &[Fire<'_>], now: u64) -> (Vec<FireOutcome>, usize) {
        let why = refused(self);
        let mut woken = 0;
        // A name twice in one call: only its first entry may fire.
        let mut named = std::collections::HashSet::new();
        let outcomes = fires
            .iter()
            .map(|fire| {
                if !named.insert(fire.name) {
                    return FireOutcome::Stale;
                }
                let Some(mut r) = self.schedules.records.get(fire.name).cloned() else {
                    return FireOutcome::Stale;
                };
                if r.paused
                    || r.rev != fire.rev
                    || r.next != fire.expect
                    || fire.ticks.iter().any(|(t, _)| *t > now + LOOKAHEAD_MS)
                {
                    return FireOutcome::Stale;
                }
                let mut pushed = 0;
                if why.is_none() && !fire.ticks.is_empty() {
                    for (tick, run_at) in &fire.ticks {
                        let id = format!("{}@{tick}", fire.name);
                        let (new, wake) = push_new(self, &id, &fire.job, &r.payload, *run_at, now);
                        pushed += u32::from(new);
                        woken += usize::from(wake);
                    }
                    self.schedules
                        .remember(fire.name, fire.ticks.iter().map(|(tick, _)| tick.to_string()));
                }
                r.next = fire.next;
                r.from = 0;
                self.schedules.write(fire.name, r);
                match why {
                    Some(why) => FireOutcome::Refused(why),
                    None => FireOutcome::Fired { pushed },
                }
            })
            .collect();
        (outcomes, woken)
    }

    pub(crate) fn schedule_trigger(
        &mut self,
        name: &str,
        rev: u64,
        job: &JobSpec,
        now: u64,
    ) -> (TriggerOutcome, bool) {
        if let Some(why) = refused(self) {
            return (TriggerOutcome::Refused(why), false);
        }
        let Some(r) = self.schedules.records.get(name).filter(|r| r.rev == rev).cloned() else {
            return (TriggerOutcome::Stale, false);
        };
        let mut t = now;
        while self.has_job(&format!("{name}@{}", manual_entry(t))) {
            t += 1;
        }
        let id = format!("{name}@{}", manual_entry(t));
        let (_, wake) = push_new(self, &id, job, &r.payload, now, now);
        self.schedules.remember(name, [manual_entry(t)]);
        (TriggerOutcome::Pushed(id), wake)
    }

    /// Pauses or resumes; false if there is no such schedule. A resumed
    /// schedule starts again from now.
    pub(crate) fn schedule_pause(&mut self, name: &str, pause: bool, now: u64) -> bool {
        let Some(mut r) = self.schedules.records.get(name).cloned() else {
            return false;
        };
        if r.paused != pause {
            if pause {
                self.withdraw(name, now);
            }
            r.paused = pause;
            r.rev += 1;
            if !pause {
                r.next = Next::FromStart;
                r.from = now;
            }
            self.schedules.write(name, r);
        }
        true
    }

    pub(crate) fn schedule_delete(&mut self, name: &str, now: u64) -> bool {
        self.withdraw(name, now);
        let s = &mut self.schedules;
        s.history.remove(name);
        match s.records.remove(name) {
            Some(r) => {
                s.by_next.remove(&(r.next.encode(), name.to_owned()));
                true
            }
            None => false,
        }
    }

    pub(crate) fn schedule_get(&self, name: &str) -> Option<RawSchedule> {
        let s = &self.schedules;
        s.records.get(name).map(|r| s.raw(name, r, true))
    }

    pub(crate) fn schedule_list(&self) -> Vec<RawSchedule> {
        let s = &self.schedules;
        s.records.iter().map(|(name, r)| s.raw(name, r, true)).collect()
    }
}

/// The schedule operations of the embedded store.
impl ScheduleMemory<'_> {
    fn index(&self) -> std::sync::MutexGuard<'_, Index> {
        self.schedule_index.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn schedule_index_set(&self, name: &str, queue: &Name) -> Option<String> {
        let mut index = self.index();
        let args = |b: &mut Vec<u8>| replay_put(b, &name);
        self.record(&mut index.lsn, self.stamp(), queue, (Code::IndexSet, &args));
        let old = index.names.insert(name.to_owned(), queue.as_str().to_owned());
        if old.as_deref() != Some(queue.as_str()) {
            *index.queues.entry(queue.as_str().to_owned()).or_default() += 1;
            if let Some(old) = &old {
                index.unlisted(old);
            }
        }
        old
    }

    pub(crate) fn schedule_index_get(&self, name: &str) -> Option<String> {
        self.index().names.get(name).cloned()
    }

    pub(crate) fn schedule_index_drop(&self, name: &str, queue: &Name) -> bool {
        let mut index = self.index();
        let args = |b: &mut Vec<u8>| replay_put(b, &name);
        self.record(&mut index.lsn, self.stamp(), queue, (Code::IndexDrop, &args));
        if index.names.get(name).is_some_and(|q| q == queue.as_str()) {
            index.names.remove(name);
            index.unlisted(queue.as_str());
            return true;
        }
        false
    }

    pub(crate) fn schedule_queues(&self) -> Vec<String> {
        self.index().queues.keys().cloned().collect()
    }

    pub(crate) fn schedule_put(&self, q: &Name, put: &Put<'_>) -> PutOutcome {
        let args = |b: &mut Vec<u8>| {
            replay_put(
                b,
                &(
                    put.name,
                    put.timing,
                    put.definition,
                    put.payload,
                    put.paused,
                    put.start_ms,
                ),
            );
        };
        self.on_queue(q, true, Some((Code::SchedulePut, &args)), |queue, now| {
            (queue.schedule_put(put, now), false)
        })
    }

    pub(crate) fn schedule_due(&self, q: &Name, limit: usize) -> Due {
        self.on_queue(q, false, None, |queue, now| {
            (queue.schedule_due(limit, now), false)
        })
    }

    pub(crate) fn schedule_fire(&self, q: &Name, fires: &[Fire<'_>]) -> (u64, Vec<FireOutcome>) {
        // Fires without a group are logged as before groups were.
        let grouped = fires.iter().any(|f| !f.job.group.is_empty());
        let args = |b: &mut Vec<u8>| {
            if grouped {
                let args: Vec<_> = fire_args(fires)
                    .into_iter()
                    .zip(fires.iter().map(|f| f.job.group.as_str()))
                    .collect();
                replay_put(b, &args);
            } else {
                replay_put(b, &fire_args(fires));
            }
        };
        let code = if grouped {
            Code::ScheduleFireGrouped
        } else {
            Code::ScheduleFire
        };
        self.on_queue(q, true, Some((code, &args)), |queue, now| {
            let (outcomes, woken) = queue.schedule_fire(fires, now);
            ((now, outcomes), woken)
        })
    }

    pub(crate) fn schedule_trigger(&self, q: &Name, name: &str, rev: u64, job: &JobSpec) -> TriggerOutcome {
        let grouped = !job.group.is_empty();
        let args = |b: &mut Vec<u8>| {
            if grouped {
                replay_put(b, &(name, rev, logged(job), job.group.as_str()));
            } else {
                replay_put(b, &(name, rev, logged(job)));
            }
        };
        let code = if grouped {
            Code::ScheduleTriggerGrouped
        } else {
            Code::ScheduleTrigger
        };
        self.on_queue(q, true, Some((code, &args)), |queue, now| {
            queue.schedule_trigger(name, rev, job, now)
        })
    }

    pub(crate) fn schedule_pause(&self, q: &Name, name: &str, pause: bool) -> bool {
        let args = |b: &mut Vec<u8>| replay_put(b, &(name, pause));
        self.on_queue(q, true, Some((Code::SchedulePause, &args)), |queue, now| {
            (queue.schedule_pause(name, pause, now), false)
        })
    }

    pub(crate) fn schedule_delete(&self, q: &Name, name: &str) -> bool {
        let args = |b: &mut Vec<u8>| replay_put(b, &name);
        self.on_queue(q, true, Some((Code::ScheduleDelete, &args)), |queue, now| {
            (queue.schedule_delete(name, now), false)
        })
    }

    pub(crate) fn schedule_get(&self, q: &Name, name: &str) -> Option<RawSchedule> {
        self.on_queue(q, false, None, |queue, _| (queue.schedule_get(name), false))
    }

    pub(crate) fn schedule_list(&self, q: &Name) -> Vec<RawSchedule> {
        self.on_queue(q, false, None, |queue, _| (queue.schedule_list(), false))
    }
}

/// The embedded store as the schedules' operations see it: a queue's
/// view (schedules live in their queue's state) and the index of names.
#[derive(Clone, Copy)]
pub(crate) struct ScheduleMemory<'a> {
    pub(crate) jobs: JobMemory<'a>,
    pub(crate) schedule_index: &'a Mutex<Index>,
}

impl<'a> Deref for ScheduleMemory<'a> {
    type Target = JobMemory<'a>;

    fn deref(&self) -> &JobMemory<'a> {
        &self.jobs
    }
}

/// A job spec as logged: priority, max attempts, backoff (its group, if
/// any, goes in a record of a `…Grouped` code, after the rest).
type LoggedJob = (u8, u32, BackoffSpec);

fn logged(job: &JobSpec) -> LoggedJob {
    (job.priority, job.max_attempts, job.backoff)
}

fn unlogged((priority, max_attempts, backoff): LoggedJob, group: &str) -> JobSpec {
    JobSpec {
        priority,
        max_attempts,
        backoff,
        group: group.to_owned(),
    }
}

type FireArgs<'a> = (&'a str, u64, Next, Next, LoggedJob, Cow<'a, [(u64, u64)]>);

/// A logged fire of `Code::ScheduleFireGrouped`: each schedule's
/// arguments and its job's group.
type GroupedFireArgs<'a> = (FireArgs<'a>, &'a str);

fn fire_args<'a>(fires: &'a [Fire<'a>]) -> Vec<FireArgs<'a>> {
    fires
        .iter()
        .map(|f| {
            (
                f.name,
                f.rev,
                f.expect,
                f.next,
                logged(&f.job),
                Cow::Borrowed(&f.ticks[..]),
            )
        })
        .collect()
}

fn replay_fire(m: &ScheduleMemory<'_>, q: &Name, fires: Vec<GroupedFireArgs<'_>>) {
    let fires: Vec<Fire<'_>> = fires
        .into_iter()
        .map(|((name, rev, expect, next, job, ticks), group)| Fire {
            name,
            rev,
            expect,
            next,
            job: unlogged(job, group),
            ticks: ticks.into_owned(),
        })
        .collect();
    m.schedule_fire(q, &fires);
}

/// Runs record `r` of this primitive again on `m`, whose time is pinned
/// to the record's (see `store/embedded/replay.rs`). Answers are dropped:
/// the state is what replay is for.
pub(crate) fn replay(m: &ScheduleMemory<'_>, r: &replay::Record<'_>) -> Result<()> {
    let g = &r.name;
    match r.code {
        Code::SchedulePut => {
            let (name, timing, definition, payload, paused, start_ms): (&str, &str, &str, &[u8], bool, u64) =
                replay::args(r.args)?;
            let put = Put {
                name,
                timing,
                definition,
                payload,
                paused,
                start_ms,
            };
            m.schedule_put(g, &put);
        }
        Code::ScheduleFire => {
            let fires: Vec<FireArgs<'_>> = replay::args(r.args)?;
            replay_fire(m, g, fires.into_iter().map(|f| (f, "")).collect());
        }
        Code::ScheduleFireGrouped => replay_fire(m, g, replay::args(r.args)?),
        Code::ScheduleTrigger => {
            let (name, rev, job): (&str, u64, LoggedJob) = replay::args(r.args)?;
            m.schedule_trigger(g, name, rev, &unlogged(job, ""));
        }
        Code::ScheduleTriggerGrouped => {
            let (name, rev, job, group): (&str, u64, LoggedJob, &str) = replay::args(r.args)?;
            m.schedule_trigger(g, name, rev, &unlogged(job, group));
        }
        Code::SchedulePause => {
            let (name, pause): (&str, bool) = replay::args(r.args)?;
            m.schedule_pause(g, name, pause);
        }
        Code::ScheduleDelete => {
            m.schedule_delete(g, replay::args(r.args)?);
        }
        Code::IndexSet => {
            m.schedule_index_set(replay::args(r.args)?, g);
        }
        Code::IndexDrop => {
            m.schedule_index_drop(replay::args(r.args)?, g);
        }
        other => return Err(replay::misrouted(other)),
    }
    Ok(())
}

impl ScheduleBackend for ScheduleMemory<'_> {
    async fn schedule_index_set(&self, name: &str, q: &Name) -> Result<Option<String>> {
        self.write(|| self.schedule_index_set(name, q)).await
    }

    async fn schedule_index_get(&self, name: &str) -> Result<Option<String>> {
        self.read(|| self.schedule_index_get(name)).await
    }

    async fn schedule_index_drop(&self, name: &str, q: &Name) -> Result<bool> {
        self.write(|| self.schedule_index_drop(name, q)).await
    }

    async fn schedule_queues(&self) -> Result<Vec<String>> {
        self.read(|| self.schedule_queues()).await
    }

    async fn schedule_index_prune(&self, _q: &Name) -> Result<bool> {
        // The embedded store's index never lists a queue without names.
        Ok(false)
    }

    async fn schedule_put(&self, q: &Name, put: &schedule::Put<'_>) -> Result<schedule::PutOutcome> {
        self.write(|| self.schedule_put(q, put)).await
    }

    async fn schedule_due(&self, q: &Name, limit: usize) -> Result<schedule::Due> {
        self.read(|| self.schedule_due(q, limit)).await
    }

    async fn schedule_fire(
        &self,
        q: &Name,
        fires: &[schedule::Fire<'_>],
    ) -> Result<(u64, Vec<schedule::FireOutcome>)> {
        self.write(|| self.schedule_fire(q, fires)).await
    }

    async fn schedule_pause(&self, q: &Name, name: &str, pause: bool) -> Result<bool> {
        self.write(|| self.schedule_pause(q, name, pause)).await
    }

    async fn schedule_delete(&self, q: &Name, name: &str) -> Result<bool> {
        self.write(|| self.schedule_delete(q, name)).await
    }

    async fn schedule_get(&self, q: &Name, name: &str) -> Result<Option<schedule::RawSchedule>> {
        self.read(|| self.schedule_get(q, name)).await
    }

    async fn schedule_list(&self, q: &Name) -> Result<Vec<schedule::RawSchedule>> {
        self.read(|| self.schedule_list(q)).await
    }

    async fn schedule_trigger(
        &self,
        q: &Name,
        name: &str,
        rev: u64,
        job: &schedule::JobSpec,
    ) -> Result<schedule::TriggerOutcome> {
        self.write(|| self.schedule_trigger(q, name, rev, job)).await
    }
}
