//! Firing: any number of processes may run [`Schedules::fire_due`] at
//! once, with no leader. Each reads the due schedules of every queue with
//! the store's now, works out the ticks here (the rules in `when.rs`), and
//! asks the store to push them only if the schedule is unchanged since it
//! read it; the store moves the schedule past them in the same step. A
//! process that loses the race gets "stale" and does nothing.

use std::time::Duration;

use crate::error::Result;
use crate::name::Name;
use crate::schedule::types::{Due, Fire, FireOutcome, LOOKAHEAD_MS, Next, RawSchedule};

use super::schedules::{Parsed, Schedules, refusal_error};
use super::{MAX_CATCH_UP, Misfire};

/// How many due schedules one store read answers.
const DUE_BATCH: usize = 500;
/// How many schedules one fire step carries.
const FIRE_BATCH: usize = 100;
/// The longest a firing loop sleeps: a new or resumed schedule is seen
/// within this.
pub const MAX_FIRE_SLEEP: Duration = Duration::from_millis(500);
/// Missed ticks are counted up to this many per firing.
const MISSED_COUNTED: u64 = 10_000;

/// One pass of [`Schedules::fire_due`].
#[derive(Debug, Default)]
pub struct FireReport {
    /// The ticks this process fired (a tick another process fired is not
    /// here). A job whose id existed already was kept, not pushed again.
    pub fired: Vec<FiredJob>,
    /// Per schedule, ticks that came due but were not pushed (the
    /// misfire policy dropped them), counted up to 10,000 per firing.
    pub missed: Vec<(String, u64)>,
    /// Schedules whose queue refused the push (the schedule moved on),
    /// with why.
    pub refused: Vec<(String, crate::Error)>,
    /// Schedules that could not be read (a definition this version cannot
    /// decode); they stay as they are.
    pub unreadable: Vec<(String, crate::Error)>,
    /// When to run the next pass: a second before the soonest next tick
    /// (ticks are fired up to a second ahead), at most [`MAX_FIRE_SLEEP`]
    /// from now.
    pub sleep: Duration,
}

/// A job a tick pushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiredJob {
    pub schedule: String,
    pub queue: String,
    pub job_id: String,
    /// The tick (store time, ms since the epoch).
    pub tick_ms: u64,
    /// How late the push was: from the tick to the push, by the store's
    /// clock; zero for a tick pushed ahead (up to a second before it is
    /// due, as a job delayed until the tick).
    pub lag: Duration,
}

/// A fixed spread in `[0, jitter)` for job `id`: FNV-1a of the id, so
/// every process agrees.
fn spread(id: &str, jitter: Duration) -> u64 {
    let jitter = jitter.as_millis() as u64;
    if jitter == 0 {
        return 0;
    }
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    hash % jitter
}

/// What one schedule's firing is: the ticks to push, the next to store,
/// and how many came due without being pushed.
struct Plan {
    ticks: Vec<(u64, u64)>,
    next: Next,
    missed: u64,
}

/// What to fire of `raw` at store time `now`: the ticks due by then (by
/// its misfire policy) and those due within the lookahead, which go in as
/// jobs delayed until their tick.
fn plan(name: &str, raw: &RawSchedule, parsed: &Parsed, now: u64) -> Option<Plan> {
    let spec = &parsed.spec;
    let base = match raw.next {
        Next::At(t) => t,
        Next::FromStart => match spec.first_tick(raw.from_ms) {
            Some(t) => t,
            None => {
                return Some(Plan {
                    ticks: Vec::new(),
                    next: Next::Never,
                    missed: 0,
                });
            }
        },
        Next::Never => return None,
    };
    let (mut fire, mut next, mut missed) = (Vec::new(), Some(base), 0);
    if base <= now {
        let (due, after) = spec.when.due_ticks(base, now, spec.misfire);
        fire = due;
        if spec.misfire == Misfire::All && fire.len() > spec.max_catch_up.min(MAX_CATCH_UP) {
            fire.drain(..fire.len() - spec.max_catch_up);
        }
        fire.retain(|t| spec.within_end(*t).is_some());
        let mut came_due = 0;
        let mut tick = Some(base);
        while let Some(t) = tick.filter(|t| *t <= now && spec.within_end(*t).is_some()) {
            came_due += 1;
            if came_due >= MISSED_COUNTED {
                break;
            }
            tick = spec.when.next_after(t);
        }
        missed = came_due.saturating_sub(fire.len() as u64);
        next = (after != u64::MAX).then_some(after);
    }
    // Ahead: the ticks of the lookahead, pushed now, due at their time.
    while let Some(t) = next.filter(|t| *t <= now + LOOKAHEAD_MS && spec.within_end(*t).is_some()) {
        fire.push(t);
        next = spec.when.next_after(t);
    }
    let next = match next.and_then(|t| spec.within_end(t)) {
        Some(t) => Next::At(t),
        None => Next::Never,
    };
    Some(Plan {
        ticks: fire
            .iter()
            .map(|t| (*t, t + spread(&format!("{name}@{t}"), spec.jitter)))
            .collect(),
        next,
        missed,
    })
}

impl Schedules {
    /// Fires every due tick of every schedule once, and says when to call
    /// again. Safe to run in any number of processes at once: each tick's
    /// job is pushed by exactly one of them.
    pub async fn fire_due(&self) -> Result<FireReport> {
        let mut report = FireReport {
            sleep: MAX_FIRE_SLEEP,
            ..FireReport::default()
        };
        for queue in self.store.schedule_queues().await? {
            let queue = Name::new(&queue)?;
            // Bounded: another process firing the same schedules can only
            // make this shorter.
            for _ in 0..20 {
                let due = self.store.schedule_due(&queue, DUE_BATCH).await?;
                if due.none {
                    // Listed without a schedule: an index from before it
                    // counted names per queue. Mended here, once.
                    self.store.schedule_index_prune(&queue).await?;
                    break;
                }
                if due.schedules.is_empty() {
                    if let Some(Next::At(t)) = due.soonest {
                        let ahead = t.saturating_sub(due.now_ms + LOOKAHEAD_MS);
                        report.sleep = report.sleep.min(Duration::from_millis(ahead));
                    }
                    break;
                }
                self.fire_batch(&queue, &due, &mut report).await?;
            }
        }
        Ok(report)
    }

    async fn fire_batch(&self, queue: &Name, due: &Due, report: &mut FireReport) -> Result<()> {
        let mut planned = Vec::new();
        for raw in &due.schedules {
            match self.decoded(queue, raw) {
                Ok(parsed) => {
                    if let Some(plan) = plan(&raw.name, raw, &parsed, due.now_ms) {
                        planned.push((raw, parsed, plan));
                    }
                }
                Err(e) => report.unreadable.push((raw.name.clone(), e)),
            }
        }
        // Every firing process reads the same due list: each starts at a
        // random place in it, so that at a burst they mostly fire
        // different schedules (the rest come back stale, cheaply), and
        // sends its steps at once rather than one after another.
        if !planned.is_empty() {
            let turn = rand::random::<u32>() as usize % planned.len();
            planned.rotate_left(turn);
        }
        let steps = planned.chunks(FIRE_BATCH).map(|chunk| async move {
            let fires: Vec<Fire<'_>> = chunk
                .iter()
                .map(|(raw, parsed, plan)| Fire {
                    name: &raw.name,
                    rev: raw.rev,
                    expect: raw.next,
                    next: plan.next,
                    job: parsed.job.clone(),
                    ticks: plan.ticks.clone(),
                })
                .collect();
            (chunk, self.store.schedule_fire(queue, &fires).await)
        });
        for (chunk, answer) in futures_util::future::join_all(steps).await {
            let (now, outcomes) = answer?;
            for ((raw, _, plan), outcome) in chunk.iter().zip(outcomes) {
                match outcome {
                    FireOutcome::Stale => continue,
                    FireOutcome::Refused(why) => report
                        .refused
                        .push((raw.name.clone(), refusal_error(why, queue.as_str()))),
                    FireOutcome::Fired { .. } => {
                        for (tick, _) in &plan.ticks {
                            report.fired.push(FiredJob {
                                schedule: raw.name.clone(),
                                queue: queue.as_str().to_owned(),
                                job_id: format!("{}@{tick}", raw.name),
                                tick_ms: *tick,
                                lag: Duration::from_millis(now.saturating_sub(*tick)),
                            });
                        }
                    }
                }
                if plan.missed > 0 {
                    report.missed.push((raw.name.clone(), plan.missed));
                }
            }
        }
        Ok(())
    }

    /// Runs [`fire_due`](Self::fire_due) until the task is dropped,
    /// handing each pass's report (or error) to `observe`. After an error
    /// it waits a second and goes on.
    pub async fn fire_forever(&self, mut observe: impl FnMut(Result<&FireReport>) + Send) {
        loop {
            let sleep = match self.fire_due().await {
                Ok(report) => {
                    observe(Ok(&report));
                    report.sleep
                }
                Err(e) => {
                    observe(Err(e));
                    Duration::from_secs(1)
                }
            };
            tokio::time::sleep(sleep).await;
        }
    }
}
