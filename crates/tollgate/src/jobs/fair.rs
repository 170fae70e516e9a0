//! A job queue's groups and limits, the reference model of the fair
//! steps of `lua/queue.lua` (`fair_*`): which group each job is in, each
//! group's ready jobs, running count and rate, the round-robin turn of
//! the groups that may run, the groups held back by a limit, and the
//! queue's own limits. Pure, like `model.rs`, which calls it at every
//! step that readies, takes or frees a job.
//!
//! A queue is plain until a job with a group is pushed or a limit is
//! set: then it turns fair (`on`), once, and stays so while it lives.
//! Plain, a claim takes the best ready job of the queue (priority, then
//! push order); fair, it takes the best ready job of the group whose turn
//! it is, so groups take turns whatever their backlogs.
//!
//! The rules both stores keep:
//! - A group with ready jobs is in exactly one of `runnable` (by turn) and
//!   `held` (until a time: its rate; or [`HELD_FOR_SLOT`]: its
//!   concurrency, until one of its jobs ends).
//! - A group enters `runnable` at the back (the queue's next turn); a
//!   claim pops the front, and puts it back at the back if it still has
//!   ready jobs (or into `held` if a limit now holds it).
//! - A rate counts the jobs handed out: a claim that finds nothing spends
//!   none. A sliding log: each rate keeps the times (ms) of the jobs it
//!   let go within its last period, and a job may go while fewer than
//!   `count` went in the period up to now, so no window of one period
//!   ever sees more than `count`, and a claim that comes late catches up
//!   (up to the count) instead of losing the time it was late.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use super::types::{RawGroup, RawGroupLimits, RawLimits, RawRate};

/// `held`'s time for a group at its concurrency: after any clock reading
/// (and exact as a Redis score, a double).
pub(crate) const HELD_FOR_SLOT: u64 = 1 << 52;

/// The most per-group overrides a queue keeps (each is a few bytes; past
/// this many, setting a new one is refused).
pub(crate) const MAX_OVERRIDES: usize = 100_000;

/// The most jobs a rate may let go per period (its log keeps that many).
pub(crate) const MAX_RATE_COUNT: u32 = 100_000;

/// The longest period a rate may have (ms): a day.
const MAX_PERIOD_MS: u64 = 86_400_000;

/// A rate's log: the times (ms) of the jobs it let go, in order.
type Log = VecDeque<u64>;

/// Whether `rate`, whose log is `log`, holds a job back at `now`: then
/// from when (ms) it lets the next go. The log's entries after `now -
/// period` count (the window (now - period, now]); the `count`-th newest
/// leaves it at its time + period.
fn rate_holds(log: Option<&Log>, rate: &RawRate, now: u64) -> Option<u64> {
    let log = log?;
    let live = log.len() - log.partition_point(|t| *t + rate.period_ms <= now);
    let count = rate.count as usize;
    (live >= count).then(|| log[log.len() - count] + rate.period_ms)
}

/// Adds a job at `now` to `log`, in time order (a store clock set back
/// puts it before later ones, as a sorted set would).
fn log_push(log: &mut Log, now: u64) {
    let at = log.partition_point(|t| *t <= now);
    log.insert(at, now);
}

/// One group: its ready jobs (readiness order, as the queue's), its
/// running count, and where it waits for its turn.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Group {
    ready: BTreeSet<(u8, u64, String)>,
    running: u64,
    /// Its turn in `runnable`, if there.
    turn: Option<u64>,
    /// Its time in `held`, if there.
    held: Option<u64>,
}

/// The groups and limits of one queue (see the module's doc).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Fair {
    on: bool,
    limits: RawLimits,
    overrides: BTreeMap<String, RawGroupLimits>,
    /// Each job's group, for jobs of a group other than the default ("").
    group_of: HashMap<String, String>,
    /// Groups with ready or running jobs.
    groups: HashMap<String, Group>,
    runnable: BTreeSet<(u64, String)>,
    held: BTreeSet<(u64, String)>,
    /// (ready count, group) of every group in `groups`: the listing's
    /// order (jobs.lua's b).
    index: BTreeSet<(u64, String)>,
    /// Each group's rate log (jobs.lua's y:<group>), and when each may
    /// go (its last entry past every period a rate can have: a day).
    logs: HashMap<String, Log>,
    logs_by_time: BTreeSet<(u64, String)>,
    /// The last turn given.
    turn: u64,
    /// The queue's rate log (jobs.lua's q).
    queue_log: Log,
    /// Claims that got fewer jobs than asked while jobs were ready.
    limited_claims: u64,
}

impl Fair {
    pub(crate) fn is_on(&self) -> bool {
        self.on
    }

    /// Nothing to keep: never turned fair (a fair queue with no limit
    /// and no job may go like a plain one).
    pub(crate) fn is_blank(&self) -> bool {
        !self.on
    }

    /// Limits that must outlive an idle period.
    pub(crate) fn has_limits(&self) -> bool {
        self.limits != RawLimits::default() || !self.overrides.is_empty()
    }

    pub(crate) fn limits(&self) -> &RawLimits {
        &self.limits
    }

    pub(crate) fn limited_claims(&self) -> u64 {
        self.limited_claims
    }

    /// Groups with ready or running jobs, and how many of them a limit
    /// holds back.
    pub(crate) fn group_counts(&self) -> (u64, u64) {
        (self.groups.len() as u64, self.held.len() as u64)
    }

    /// Job `id`'s group ("" for the default group).
    pub(crate) fn group_of(&self, id: &str) -> &str {
        self.group_of.get(id).map_or("", String::as_str)
    }

    /// Sets job `id`'s group (at its push).
    pub(crate) fn set_group(&mut self, id: &str, group: &str) {
        if group.is_empty() {
            self.group_of.remove(id);
        } else {
            self.group_of.insert(id.to_owned(), group.to_owned());
        }
    }

    /// Job `id` is gone.
    pub(crate) fn forget(&mut self, id: &str) {
        self.group_of.remove(id);
    }

    /// Turns the queue fair: every ready and running job so far is in
    /// the default group.
    pub(crate) fn turn_on<'a>(
        &mut self,
        ready: impl Iterator<Item = &'a (u8, u64, String)>,
        running: usize,
        now: u64,
    ) {
        if self.on {
            return;
        }
        self.on = true;
        let group = self.groups.entry(String::new()).or_default();
        group.ready.extend(ready.cloned());
        group.running = running as u64;
        self.reindex("", None);
        if self.groups.get("").is_some_and(|g| !g.ready.is_empty()) {
            self.place("", now);
        }
    }

    /// The limits in force for `group`: (concurrency, rate).
    fn limits_of(&self, group: &str) -> (Option<u32>, Option<RawRate>) {
        let own = self.overrides.get(group);
        (
            own.and_then(|o| o.concurrency).or(self.limits.group_concurrency),
            own.and_then(|o| o.rate).or(self.limits.group_rate),
        )
    }

    /// Whether a limit holds `group` back at `now`: its `held` time.
    fn holds(&self, group: &str, now: u64) -> Option<u64> {
        let (concurrency, rate) = self.limits_of(group);
        let running = self.groups.get(group).map_or(0, |g| g.running);
        if concurrency.is_some_and(|c| running >= u64::from(c)) {
            return Some(HELD_FOR_SLOT);
        }
        rate.and_then(|r| rate_holds(self.logs.get(group), &r, now))
    }

    /// Puts `group` (with ready jobs, in neither set) at the back of the
    /// line, or in `held` if a limit holds it. Whether it may run.
    fn place(&mut self, group: &str, now: u64) -> bool {
        let held = self.holds(group, now);
        let turn = self.turn + 1;
        let Some(g) = self.groups.get_mut(group) else {
            return false;
        };
        match held {
            Some(until) => {
                g.held = Some(until);
                self.held.insert((until, group.to_owned()));
                false
            }
            None => {
                self.turn = turn;
                g.turn = Some(turn);
                self.runnable.insert((turn, group.to_owned()));
                true
            }
        }
    }

    /// Takes `group` out of `runnable` and `held`.
    fn unplace(&mut self, group: &str) {
        if let Some(g) = self.groups.get_mut(group) {
            if let Some(turn) = g.turn.take() {
                self.runnable.remove(&(turn, group.to_owned()));
            }
            if let Some(until) = g.held.take() {
                self.held.remove(&(until, group.to_owned()));
            }
        }
    }

    /// Keeps `index` in step with `group` (whose ready count was `was`
    /// there); drops a group left with nothing.
    fn reindex(&mut self, group: &str, was: Option<u64>) {
        if let Some(was) = was {
            self.index.remove(&(was, group.to_owned()));
        }
        match self.groups.get(group) {
            Some(g) if !g.ready.is_empty() || g.running > 0 => {
                self.index.insert((g.ready.len() as u64, group.to_owned()));
            }
            Some(_) => {
                self.groups.remove(group);
            }
            None => {}
        }
    }

    fn indexed(&self, group: &str) -> Option<u64> {
        self.groups.get(group).map(|g| g.ready.len() as u64)
    }

    /// Job `key` (of `group`) is ready.
    pub(crate) fn ready(&mut self, group: &str, key: (u8, u64, String), now: u64) {
        let was = self.indexed(group);
        let g = self.groups.entry(group.to_owned()).or_default();
        g.ready.insert(key);
        let waiting = g.turn.is_some() || g.held.is_some();
        self.reindex(group, was);
        if !waiting {
            self.place(group, now);
        }
    }

    /// Ready job `key` (of `group`) leaves (cancelled, replaced, moved).
    pub(crate) fn unready(&mut self, group: &str, key: &(u8, u64, String)) {
        let was = self.indexed(group);
        let Some(g) = self.groups.get_mut(group) else {
            return;
        };
        g.ready.remove(key);
        if g.ready.is_empty() {
            self.unplace(group);
        }
        self.reindex(group, was);
    }

    /// A job of `group` stops running (acked, given back, lease over).
    /// How many consumers to wake: one if that lets a job of the group go
    /// that its concurrency held back (the queue's own: `slot_wakes`).
    pub(crate) fn release(&mut self, group: &str, now: u64) -> usize {
        let was = self.indexed(group);
        let Some(g) = self.groups.get_mut(group) else {
            return 0;
        };
        g.running = g.running.saturating_sub(1);
        let held_for_slot = g.held == Some(HELD_FOR_SLOT);
        self.reindex(group, was);
        if held_for_slot {
            self.unplace(group);
            return usize::from(self.place(group, now));
        }
        0
    }

    /// How many consumers to wake when jobs stop running, `before` of
    /// them running before and `after` after: while the queue's own
    /// concurrency was full, one per slot freed, at most one per group in
    /// line.
    pub(crate) fn slot_wakes(&self, before: usize, after: usize) -> usize {
        match self.limits.concurrency {
            Some(c) if before >= c as usize => (before - after.min(before)).min(self.runnable.len()),
            _ => 0,
        }
    }

    /// Moves the groups whose rate lets them go again to the back of the
    /// line, a bounded batch; how many.
    pub(crate) fn promote(&mut self, now: u64, batch: usize) -> usize {
        let mut n = 0;
        while n < batch
            && let Some((until, _)) = self.held.first()
            && *until <= now
        {
            let Some((_, group)) = self.held.pop_first() else {
                break;
            };
            if let Some(g) = self.groups.get_mut(&group) {
                g.held = None;
            }
            n += usize::from(self.place(&group, now));
        }
        while let Some((gone, _)) = self.logs_by_time.first()
            && *gone <= now
        {
            if let Some((_, group)) = self.logs_by_time.pop_first() {
                self.logs.remove(&group);
            }
        }
        if let Some(r) = self.limits.rate {
            while self.queue_log.front().is_some_and(|t| *t + r.period_ms <= now) {
                self.queue_log.pop_front();
            }
        }
        n
    }

    /// The next job a claim at `now` may take, with `in_flight` jobs
    /// running: the best ready job of the group whose turn it is, skipping
    /// (into `held`) groups a limit holds; `None` if a queue limit or no
    /// group lets one go. The job is taken out of its group and counted
    /// as running and against the rates.
    pub(crate) fn take(&mut self, in_flight: usize, now: u64) -> Option<(u8, u64, String)> {
        if self.limits.concurrency.is_some_and(|c| in_flight >= c as usize) {
            return None;
        }
        if let Some(r) = self.limits.rate
            && rate_holds(Some(&self.queue_log), &r, now).is_some()
        {
            return None;
        }
        loop {
            let (_, group) = self.runnable.pop_first()?;
            if let Some(g) = self.groups.get_mut(&group) {
                g.turn = None;
            }
            if self.holds(&group, now).is_some() {
                self.place(&group, now);
                continue;
            }
            let was = self.indexed(&group);
            let g = self.groups.get_mut(&group)?;
            let key = g.ready.pop_first()?;
            g.running += 1;
            let more = !g.ready.is_empty();
            self.reindex(&group, was);
            if self.limits.rate.is_some() {
                log_push(&mut self.queue_log, now);
            }
            if let (_, Some(rate)) = self.limits_of(&group) {
                let log = self.logs.entry(group.clone()).or_default();
                let was = log.back().copied();
                log_push(log, now);
                // Trimmed by the period in force when it is read; dropped
                // whole once past the longest period.
                while log.front().is_some_and(|t| *t + rate.period_ms <= now) {
                    log.pop_front();
                }
                let last = log.back().copied().unwrap_or(now);
                if let Some(was) = was {
                    self.logs_by_time.remove(&(was + MAX_PERIOD_MS, group.clone()));
                }
                self.logs_by_time.insert((last + MAX_PERIOD_MS, group.clone()));
            }
            if more {
                self.place(&group, now);
            }
            return Some(key);
        }
    }

    /// A claim asked for more than it got while `ready` jobs waited.
    pub(crate) fn count_limited(&mut self) {
        self.limited_claims += 1;
    }

    /// When a limit next lets a job go by itself (a rate; a concurrency
    /// waits for a job to end instead), if one holds any back.
    pub(crate) fn next_due(&self, now: u64) -> Option<u64> {
        let group = self.held.first().map(|(t, _)| *t).filter(|t| *t < HELD_FOR_SLOT);
        let queue = self
            .limits
            .rate
            .and_then(|r| rate_holds(Some(&self.queue_log), &r, now));
        // The sooner of the two: a consumer that wakes too early finds
        // nothing and sleeps again; one that wakes late loses time.
        match (group, queue) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Sets the queue's limits; how many consumers to wake for groups
    /// they now let go.
    pub(crate) fn set_limits(&mut self, limits: RawLimits, now: u64) -> usize {
        self.limits = limits;
        self.replace_held(None, now)
    }

    /// Sets (or with `None` drops) `group`'s own limits. `Err` if that
    /// would keep more than [`MAX_OVERRIDES`]. How many to wake.
    pub(crate) fn set_group_limits(
        &mut self,
        group: &str,
        limits: Option<RawGroupLimits>,
        now: u64,
    ) -> Result<usize, usize> {
        match limits {
            Some(l) if l != RawGroupLimits::default() => {
                if self.overrides.len() >= MAX_OVERRIDES && !self.overrides.contains_key(group) {
                    return Err(MAX_OVERRIDES);
                }
                self.overrides.insert(group.to_owned(), l);
            }
            _ => {
                self.overrides.remove(group);
            }
        }
        Ok(self.replace_held(Some(group), now))
    }

    /// `group`'s own limits, if it has any.
    pub(crate) fn group_limits(&self, group: &str) -> Option<RawGroupLimits> {
        self.overrides.get(group).copied()
    }

    /// Places the held groups again (only `group`, if named) under
    /// changed limits, in name order (not by the time each was held
    /// until: two stores' clocks may order those differently); how many
    /// may now run.
    fn replace_held(&mut self, group: Option<&str>, now: u64) -> usize {
        let mut held: Vec<String> = match group {
            Some(g) => self
                .groups
                .get(g)
                .and_then(|x| x.held)
                .map(|_| vec![g.to_owned()])
                .unwrap_or_default(),
            None => self.held.iter().map(|(_, g)| g.clone()).collect(),
        };
        held.sort();
        let mut n = 0;
        for g in held {
            self.unplace(&g);
            n += usize::from(self.place(&g, now));
        }
        n
    }

    /// Up to `limit` groups, most ready jobs first (ties: by name,
    /// descending), strictly after `from` (ready count, group) in that
    /// order if given: each partition of a queue answers from the same
    /// cursor, whether it holds that group or not.
    pub(crate) fn list(&self, from: Option<(u64, &str)>, limit: usize) -> Vec<RawGroup> {
        let rows = self.index.iter().rev();
        let after = |(n, g): &&(u64, String)| match from {
            None => true,
            Some((fn_, fg)) => (*n, g.as_str()) < (fn_, fg),
        };
        rows.filter(after)
            .take(limit)
            .map(|(ready, name)| {
                let g = self.groups.get(name);
                let (concurrency, rate) = self.limits_of(name);
                RawGroup {
                    group: name.clone(),
                    ready: *ready,
                    running: g.map_or(0, |g| g.running),
                    held_until: g.and_then(|g| g.held),
                    concurrency,
                    rate,
                }
            })
            .collect()
    }
}
