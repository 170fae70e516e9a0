//! The `Schedules` handle: create, change, read, pause, trigger and delete
//! schedules, and fire the due ones (`fire.rs`).
//!
//! A schedule lives with the queue it pushes to, so the store claims a
//! tick and pushes its job in one step; a small index names each
//! schedule's queue. Changing a schedule's queue moves it: it is deleted
//! from the old queue after the index points to the new one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::jobs::partition::Partition;
use crate::jobs::{Backoff, MAX_JOB_DELAY, PushOptions};
use crate::name::Name;
use crate::schedule::types::{JobSpec, Next, Put, PutOutcome, RawSchedule, Refusal, TriggerOutcome};
use crate::store::Store;

use super::{MAX_CATCH_UP, Misfire, When};

/// The longest schedule name, in bytes: a job id is `<name>@<tick>` and
/// must fit in [`MAX_JOB_ID_LEN`](crate::MAX_JOB_ID_LEN).
pub const MAX_SCHEDULE_NAME_LEN: usize = 100;

/// What a schedule is: when it fires and the job each tick pushes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleSpec {
    /// When it fires.
    pub when: When,
    /// The queue each tick's job goes to (not a partitioned queue).
    pub queue: String,
    /// The job's payload.
    pub payload: Vec<u8>,
    /// As [`PushOptions::priority`]. Default 0.
    pub priority: u8,
    /// As [`PushOptions::max_attempts`]. Default 5.
    pub max_attempts: u32,
    /// As [`PushOptions::backoff`].
    pub backoff: Backoff,
    /// As [`PushOptions::group`]: the group of each tick's job. Default
    /// `None`, the default group.
    pub group: Option<String>,
    /// What to do with ticks missed while no process fired. Default
    /// [`Misfire::Skip`].
    pub misfire: Misfire,
    /// With [`Misfire::All`], at most this many missed ticks are pushed
    /// (the newest). 1 to [`MAX_CATCH_UP`]; default 1000.
    pub max_catch_up: usize,
    /// No tick before this.
    pub start: Option<SystemTime>,
    /// No tick after this.
    pub end: Option<SystemTime>,
    /// Each tick's job is due up to this long after the tick (a fixed
    /// spread per tick, from a hash of the job id), so that many schedules
    /// on one tick do not start their jobs at the same instant. Default 0.
    pub jitter: Duration,
    /// Whether a new schedule starts paused. Changing an existing schedule
    /// keeps its paused state: [`Schedules::pause`] and
    /// [`Schedules::resume`] change it.
    pub paused: bool,
}

impl ScheduleSpec {
    /// A schedule that pushes an empty job to `queue` at `when`, with the
    /// defaults listed on each field.
    pub fn new(when: When, queue: &str) -> ScheduleSpec {
        let push = PushOptions::default();
        ScheduleSpec {
            when,
            queue: queue.to_owned(),
            payload: Vec::new(),
            priority: push.priority,
            max_attempts: push.max_attempts,
            backoff: push.backoff,
            group: None,
            misfire: Misfire::Skip,
            max_catch_up: MAX_CATCH_UP,
            start: None,
            end: None,
            jitter: Duration::ZERO,
            paused: false,
        }
    }

    /// The first tick at or after `from_ms` (and the start), if any
    /// before the end.
    pub(crate) fn first_tick(&self, from_ms: u64) -> Option<u64> {
        let start = self.start.map_or(0, ms).max(from_ms);
        let tick = self.when.next_after(start.saturating_sub(1))?;
        self.within_end(tick)
    }

    /// `tick`, if it is not after the end.
    pub(crate) fn within_end(&self, tick: u64) -> Option<u64> {
        match self.end {
            Some(end) if tick > ms(end) => None,
            _ => Some(tick),
        }
    }
}

/// A schedule as stored, with its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleInfo {
    pub name: String,
    pub spec: ScheduleSpec,
    pub paused: bool,
    /// The next tick it will fire (store time); `None` when paused or
    /// when no tick is left.
    pub next: Option<SystemTime>,
    /// The last ticks fired (at most 10), oldest first.
    pub recent: Vec<FiredTick>,
}

/// A tick a schedule fired: the job it pushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiredTick {
    /// `<schedule>@<tick ms>`, or `<schedule>@manual-<ms>` for a trigger.
    pub job_id: String,
    /// The tick's time (for a trigger, when it was triggered).
    pub at: SystemTime,
    /// Pushed by [`Schedules::trigger`], not by the schedule's timing.
    pub manual: bool,
}

/// What an upsert did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upserted {
    Created,
    /// Changed; a changed timing (when, start, end) fires from its next
    /// tick after now, other changes keep the next tick.
    Changed,
    /// Already exactly so.
    Unchanged,
}

/// The definition as stored beside the timing and the payload: only what
/// differs from the defaults, to keep an idle schedule small in Redis.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Stored {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    priority: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_attempts: Option<u32>,
    /// `fixed:<ms>` or `exponential:<base ms>:<max ms>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    backoff: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    misfire: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_catch_up: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    jitter_ms: Option<u64>,
}

/// A schedule decoded for firing: its spec and the job as pushes take it.
#[derive(Debug)]
pub(super) struct Parsed {
    pub(super) spec: ScheduleSpec,
    pub(super) job: JobSpec,
}

pub(super) fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

pub(super) fn time(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// The text of what decides a schedule's ticks, `<when>|<start ms>|<end
/// ms>` (0 for none); a change of it restarts the schedule.
fn timing(spec: &ScheduleSpec) -> String {
    format!(
        "{}|{}|{}",
        spec.when,
        spec.start.map_or(0, ms),
        spec.end.map_or(0, ms)
    )
}

/// `timing` read back.
fn untiming(text: &str) -> Option<(When, Option<SystemTime>, Option<SystemTime>)> {
    let mut parts = text.rsplitn(3, '|');
    let end: u64 = parts.next()?.parse().ok()?;
    let start: u64 = parts.next()?.parse().ok()?;
    let when = When::parse(parts.next()?).ok()?;
    let at = |t: u64| (t > 0).then(|| time(t));
    Some((when, at(start), at(end)))
}

fn encode_backoff(b: &Backoff) -> String {
    match b {
        Backoff::Fixed(d) => format!("fixed:{}", d.as_millis()),
        Backoff::Exponential { base, max } => format!("exponential:{}:{}", base.as_millis(), max.as_millis()),
    }
}

fn decode_backoff(text: &str) -> Option<Backoff> {
    let parts: Vec<&str> = text.split(':').collect();
    let ms = |s: &str| s.parse().ok().map(Duration::from_millis);
    match parts.as_slice() {
        ["fixed", d] => Some(Backoff::Fixed(ms(d)?)),
        ["exponential", base, max] => Some(Backoff::Exponential {
            base: ms(base)?,
            max: ms(max)?,
        }),
        _ => None,
    }
}

/// Decodes schedule `raw` of queue `queue`; a definition this version
/// cannot read is a store error naming the schedule.
pub(super) fn parse(queue: &Name, raw: &RawSchedule) -> Result<Parsed> {
    let bad = |why: &str| {
        Error::new(
            ErrorKind::Store,
            format!(
                "schedule {:?} is stored in a form this version cannot read: {why}",
                raw.name
            ),
        )
    };
    let stored: Stored = serde_json::from_str(&raw.definition).map_err(|e| bad(&e.to_string()))?;
    let (when, start, end) = untiming(&raw.timing).ok_or_else(|| bad("timing"))?;
    let defaults = ScheduleSpec::new(when, queue.as_str());
    let spec = ScheduleSpec {
        payload: raw.payload.clone(),
        priority: stored.priority.unwrap_or(defaults.priority),
        max_attempts: stored.max_attempts.unwrap_or(defaults.max_attempts),
        backoff: match &stored.backoff {
            Some(b) => decode_backoff(b).ok_or_else(|| bad("backoff"))?,
            None => defaults.backoff,
        },
        group: stored.group,
        misfire: match &stored.misfire {
            Some(m) => m.parse().map_err(|e: Error| bad(e.message()))?,
            None => defaults.misfire,
        },
        max_catch_up: stored.max_catch_up.unwrap_or(defaults.max_catch_up),
        start,
        end,
        jitter: Duration::from_millis(stored.jitter_ms.unwrap_or(0)),
        paused: raw.paused,
        ..defaults
    };
    let job = job_of(&spec)?;
    Ok(Parsed { spec, job })
}

/// Checks the job part of `spec` as a push would, and returns it as the
/// store takes it.
fn job_of(spec: &ScheduleSpec) -> Result<JobSpec> {
    let queue = Partition::new(&Store::memory(), &spec.queue)
        .map_err(|e| Error::invalid(format!("schedule queue: {}", e.message())))?;
    let options = PushOptions {
        priority: spec.priority,
        max_attempts: spec.max_attempts,
        backoff: spec.backoff,
        group: spec.group.clone(),
        ..PushOptions::default()
    };
    let (_, _, backoff) = queue.prepare(&spec.payload, &options)?;
    Ok(JobSpec {
        priority: spec.priority,
        max_attempts: spec.max_attempts,
        backoff,
        group: options.group.unwrap_or_default(),
    })
}

/// Checks a schedule name.
pub fn check_schedule_name(name: &str) -> Result<Name> {
    let checked = Name::new(name).map_err(|e| Error::invalid(format!("schedule {}", e.message())))?;
    if name.len() > MAX_SCHEDULE_NAME_LEN {
        return Err(Error::invalid(format!(
            "a schedule name must be 1 to {MAX_SCHEDULE_NAME_LEN} bytes"
        )));
    }
    Ok(checked)
}

fn check(spec: &ScheduleSpec) -> Result<()> {
    job_of(spec)?;
    if spec.max_catch_up == 0 || spec.max_catch_up > MAX_CATCH_UP {
        return Err(Error::invalid(format!(
            "max_catch_up must be 1 to {MAX_CATCH_UP}"
        )));
    }
    if spec.jitter > MAX_JOB_DELAY {
        return Err(Error::invalid("jitter must be at most a year"));
    }
    if let (Some(start), Some(end)) = (spec.start, spec.end)
        && end <= start
    {
        return Err(Error::invalid("a schedule's end must be after its start"));
    }
    for t in [spec.start, spec.end].into_iter().flatten() {
        if t < UNIX_EPOCH + Duration::from_secs(1) {
            return Err(Error::invalid("a schedule's start and end must be after 1970"));
        }
    }
    Ok(())
}

pub(super) fn refusal_error(why: Refusal, queue: &str) -> Error {
    match why {
        Refusal::Retired => Error::retired(queue),
        Refusal::Partitioned => Error::invalid(format!(
            "queue {queue:?} is partitioned; a schedule pushes to an unpartitioned queue"
        )),
    }
}

/// (queue, name) -> (rev, the schedule decoded at that rev).
pub(super) type Decoded = HashMap<(String, String), (u64, Arc<Parsed>)>;

/// Schedules on one store. Cheap to clone; clones share the cache of
/// decoded schedules.
#[derive(Debug, Clone)]
pub struct Schedules {
    pub(super) store: Store,
    /// (queue, name) -> (rev, decoded), for the firing loop.
    pub(super) parsed: Arc<Mutex<Decoded>>,
}

impl Schedules {
    pub fn new(store: &Store) -> Schedules {
        Schedules {
            store: store.clone(),
            parsed: Arc::default(),
        }
    }

    /// Creates schedule `name` or changes it to `spec`. A changed timing
    /// (when, start, end) takes effect from its first tick after now; a
    /// change of the job only keeps the next tick. Bad input is an
    /// [`ErrorKind::InvalidInput`] naming the field.
    pub async fn upsert(&self, name: &str, spec: &ScheduleSpec) -> Result<Upserted> {
        check_schedule_name(name)?;
        check(spec)?;
        let queue = Name::new(&spec.queue)?;
        let defaults = ScheduleSpec::new(spec.when.clone(), &spec.queue);
        let stored = Stored {
            priority: (spec.priority != defaults.priority).then_some(spec.priority),
            max_attempts: (spec.max_attempts != defaults.max_attempts).then_some(spec.max_attempts),
            backoff: (spec.backoff != defaults.backoff).then(|| encode_backoff(&spec.backoff)),
            group: spec.group.clone(),
            misfire: (spec.misfire != defaults.misfire).then(|| spec.misfire.to_string()),
            max_catch_up: (spec.max_catch_up != defaults.max_catch_up).then_some(spec.max_catch_up),
            jitter_ms: (!spec.jitter.is_zero()).then_some(spec.jitter.as_millis() as u64),
        };
        let definition = serde_json::to_string(&stored)
            .map_err(|e| Error::new(ErrorKind::Store, format!("encoding a schedule: {e}")))?;
        let timing = timing(spec);
        let put = Put {
            name,
            timing: &timing,
            definition: &definition,
            payload: &spec.payload,
            paused: spec.paused,
            start_ms: spec.start.map_or(0, ms),
        };
        // The index first: a schedule is found through it. Then out of
        // the queue it lived with, if another, so it never fires twice.
        let before = self.store.schedule_index_set(name, &queue).await;
        // Its ticks' jobs are pushed by the store, not through a queue's
        // handle: list the queue now.
        self.store
            .register_after(crate::store::registry::Kind::Queues, &queue, &before)
            .await;
        let before = before?;
        let moved = match before {
            Some(old) if old != spec.queue => {
                let old = Name::new(&old)?;
                self.store.schedule_delete(&old, name).await?
            }
            _ => false,
        };
        let outcome = match self.store.schedule_put(&queue, &put).await? {
            PutOutcome::Refused(why) => {
                self.store.schedule_index_drop(name, &queue).await?;
                return Err(refusal_error(why, &spec.queue));
            }
            PutOutcome::Created if moved => Upserted::Changed,
            PutOutcome::Created => Upserted::Created,
            PutOutcome::Changed => Upserted::Changed,
            PutOutcome::Unchanged => Upserted::Unchanged,
        };
        // Another upsert may have moved it meanwhile: the index decides.
        if let Some(now_with) = self.store.schedule_index_get(name).await?
            && now_with != spec.queue
        {
            self.store.schedule_delete(&queue, name).await?;
        }
        Ok(outcome)
    }

    /// The queue schedule `name` lives with, if any.
    async fn queue_of(&self, name: &str) -> Result<Option<Name>> {
        check_schedule_name(name)?;
        match self.store.schedule_index_get(name).await? {
            Some(q) => Ok(Some(Name::new(&q)?)),
            None => Ok(None),
        }
    }

    async fn raw(&self, name: &str) -> Result<Option<(Name, RawSchedule)>> {
        let Some(queue) = self.queue_of(name).await? else {
            return Ok(None);
        };
        Ok(self
            .store
            .schedule_get(&queue, name)
            .await?
            .map(|raw| (queue, raw)))
    }

    /// Schedule `name` and its state, if it exists.
    pub async fn get(&self, name: &str) -> Result<Option<ScheduleInfo>> {
        match self.raw(name).await? {
            Some((queue, raw)) => Ok(Some(info(&queue, &raw)?)),
            None => Ok(None),
        }
    }

    /// Every schedule, by name.
    pub async fn list(&self) -> Result<Vec<ScheduleInfo>> {
        let mut out = Vec::new();
        for queue in self.store.schedule_queues().await? {
            let queue = Name::new(&queue)?;
            for raw in self.store.schedule_list(&queue).await? {
                out.push(info(&queue, &raw)?);
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out.dedup_by(|a, b| a.name == b.name);
        Ok(out)
    }

    /// Deletes schedule `name`; false if there was none. Jobs it pushed
    /// stay.
    pub async fn delete(&self, name: &str) -> Result<bool> {
        let Some(queue) = self.queue_of(name).await? else {
            return Ok(false);
        };
        let deleted = self.store.schedule_delete(&queue, name).await?;
        self.store.schedule_index_drop(name, &queue).await?;
        Ok(deleted)
    }

    /// Pauses schedule `name` (no tick fires until resumed); false if
    /// there is none.
    pub async fn pause(&self, name: &str) -> Result<bool> {
        self.set_paused(name, true).await
    }

    /// Resumes schedule `name` from its first tick after now (the ticks of
    /// the pause are not fired later); false if there is none.
    pub async fn resume(&self, name: &str) -> Result<bool> {
        self.set_paused(name, false).await
    }

    async fn set_paused(&self, name: &str, pause: bool) -> Result<bool> {
        match self.queue_of(name).await? {
            Some(queue) => self.store.schedule_pause(&queue, name, pause).await,
            None => Ok(false),
        }
    }

    /// Pushes one extra job of schedule `name` now, with id
    /// `<name>@manual-<ms>`; the schedule's ticks do not move (a paused
    /// schedule may be triggered too). `None` if there is no such schedule.
    pub async fn trigger(&self, name: &str) -> Result<Option<String>> {
        // A change between the read and the push makes it stale: read again.
        for _ in 0..5 {
            let Some((queue, raw)) = self.raw(name).await? else {
                return Ok(None);
            };
            let parsed = parse(&queue, &raw)?;
            match self
                .store
                .schedule_trigger(&queue, name, raw.rev, &parsed.job)
                .await?
            {
                TriggerOutcome::Pushed(id) => return Ok(Some(id)),
                TriggerOutcome::Refused(why) => return Err(refusal_error(why, queue.as_str())),
                TriggerOutcome::Stale => continue,
            }
        }
        Err(Error::new(
            ErrorKind::Store,
            format!("schedule {name:?} kept changing while it was triggered; try again"),
        ))
    }
}

/// A stored schedule as the public view.
fn info(queue: &Name, raw: &RawSchedule) -> Result<ScheduleInfo> {
    let parsed = parse(queue, raw)?;
    let next = match raw.next {
        _ if raw.paused => None,
        Next::Never => None,
        Next::At(t) => Some(time(t)),
        Next::FromStart => parsed.spec.first_tick(raw.from_ms).map(time),
    };
    let recent = raw
        .history
        .iter()
        .map(|entry| {
            let manual = entry.strip_prefix("manual-");
            let at = manual.unwrap_or(entry).parse().unwrap_or(0);
            FiredTick {
                job_id: format!("{}@{entry}", raw.name),
                at: time(at),
                manual: manual.is_some(),
            }
        })
        .collect();
    Ok(ScheduleInfo {
        name: raw.name.clone(),
        spec: parsed.spec,
        paused: raw.paused,
        next,
        recent,
    })
}

/// The cache key of a schedule.
pub(super) fn cache_key(queue: &Name, name: &str) -> (String, String) {
    (queue.as_str().to_owned(), name.to_owned())
}

impl Schedules {
    /// The decoded form of `raw`, from the cache while its rev holds.
    pub(super) fn decoded(&self, queue: &Name, raw: &RawSchedule) -> Result<Arc<Parsed>> {
        let key = cache_key(queue, &raw.name);
        let mut cache = self.parsed.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((rev, parsed)) = cache.get(&key)
            && *rev == raw.rev
        {
            return Ok(parsed.clone());
        }
        let parsed = Arc::new(parse(queue, raw)?);
        // Bounded: a cache of a few hundred thousand schedules at most is
        // dropped whole rather than tracked.
        if cache.len() > 200_000 {
            cache.clear();
        }
        cache.insert(key, (raw.rev, parsed.clone()));
        Ok(parsed)
    }
}
