//! Rate-limit arithmetic shared by the memory store, written once as pure
//! functions of (state, now, limit, cost). `limit.lua` does the same
//! steps on Redis; the conformance tests hold both to the same answers.
//!
//! GCRA works in nanoseconds (one "theoretical arrival time" per key),
//! windows in microseconds (the resolution of Redis's `TIME`).

use std::collections::{BTreeSet, HashMap};
use std::ops::Deref;
use std::sync::Mutex;

use super::backend::LimitBackend;
use super::types::{Algorithm, Check, Decision, Limit, Rate, decision};
use std::sync::PoisonError;

use crate::error::Result;
use crate::name::Name;
use crate::store::memory::replay::{self, Code};
use crate::store::memory::{MemoryCore, put};

/// A key's state and when it expires (µs); an expired state is the same as
/// none, as on Redis.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
enum KeyState {
    /// GCRA: the theoretical arrival time, ns since the epoch.
    Gcra { tat_ns: u64 },
    /// Windows: current window number, its count, the previous window's.
    Window {
        w: u64,
        count: u64,
        prev: u64,
        expires_us: u64,
    },
}

impl KeyState {
    fn expired(&self, now_us: u64) -> bool {
        now_us >= self.expires_us()
    }

    /// When its budget is fully restored (µs): from then on it is the
    /// same as no state.
    fn expires_us(&self) -> u64 {
        match *self {
            KeyState::Gcra { tat_ns } => tat_ns.div_ceil(1000),
            KeyState::Window { expires_us, .. } => expires_us,
        }
    }
}

/// Every limiter's keys. A key whose budget is fully restored is dropped
/// in bounded steps as decisions run: each key has one due time in `due`
/// (when to look at it next), and each decision looks at up to
/// `SWEEP_STEP` due keys, dropping the expired ones and giving the others
/// their current expiry as the next due time.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Limits {
    /// The log record that last changed it (see `GateState::lsn`).
    pub(crate) lsn: u64,
    /// Limiter, then (GCRA or window, key). GCRA and window state live
    /// apart, as they do on Redis.
    keys: HashMap<Name, [HashMap<String, KeyState>; 2]>,
    /// (due µs, limiter, space, key): one per stored key.
    due: BTreeSet<(u64, Name, usize, String)>,
    len: usize,
}

/// Due keys looked at per decision: more than one, so that keys are
/// dropped faster than new ones come.
const SWEEP_STEP: usize = 8;

impl Limits {
    pub(crate) fn check(
        &mut self,
        limiter: &Name,
        key: &str,
        limit: &Limit,
        cost: u64,
        now_us: u64,
    ) -> Decision {
        let space = usize::from(limit.algorithm() != Algorithm::Gcra);
        let state = self
            .keys
            .get(limiter)
            .and_then(|maps| maps[space].get(key))
            .copied()
            .filter(|s| !s.expired(now_us));
        let (decision, next) = step(state, limit, cost, now_us);
        // Only a decision that leaves budget spent stores anything.
        if let Some(next) = next {
            let maps = match self.keys.get_mut(limiter) {
                Some(m) => m,
                None => self.keys.entry(limiter.clone()).or_default(),
            };
            match maps[space].get_mut(key) {
                Some(slot) => *slot = next,
                None => {
                    maps[space].insert(key.to_owned(), next);
                    self.due
                        .insert((next.expires_us(), limiter.clone(), space, key.to_owned()));
                    self.len += 1;
                }
            }
        }
        self.sweep(now_us, SWEEP_STEP);
        decision
    }

    /// Looks at up to `steps` due keys.
    pub(crate) fn sweep(&mut self, now_us: u64, steps: usize) {
        for _ in 0..steps {
            let Some(first) = self.due.first().filter(|(due, ..)| *due <= now_us) else {
                return;
            };
            let (limiter, space) = (first.1.clone(), first.2);
            let Some((_, _, _, key)) = self.due.pop_first() else {
                return;
            };
            let Some(maps) = self.keys.get_mut(&limiter) else {
                continue;
            };
            match maps[space].get(&key).map(KeyState::expires_us) {
                Some(expires) if expires <= now_us => {
                    maps[space].remove(&key);
                    self.len -= 1;
                    if maps.iter().all(HashMap::is_empty) {
                        self.keys.remove(&limiter);
                    }
                }
                Some(expires) => {
                    self.due.insert((expires, limiter, space, key));
                }
                None => {}
            }
        }
    }

    /// Gives back the maps' spare room once most of it is empty (after a
    /// flood of keys), so memory returns to what is held.
    pub(crate) fn shrink(&mut self) {
        if self.keys.capacity() > 64 && self.keys.len() * 4 < self.keys.capacity() {
            self.keys.shrink_to(self.keys.len() * 2);
        }
        for maps in self.keys.values_mut() {
            for m in maps.iter_mut() {
                if m.capacity() > 64 && m.len() * 4 < m.capacity() {
                    m.shrink_to(m.len() * 2);
                }
            }
        }
    }

    /// Keys stored (some may have expired since the last sweep).
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

/// One decision: the answer and the state to store (None: leave it).
fn step(state: Option<KeyState>, limit: &Limit, cost: u64, now_us: u64) -> (Decision, Option<KeyState>) {
    match limit.algorithm() {
        Algorithm::Gcra => {
            let tat = match state {
                Some(KeyState::Gcra { tat_ns }) => Some(tat_ns),
                _ => None,
            };
            gcra(tat, limit, cost, now_us)
        }
        algorithm => {
            let window = match state {
                Some(KeyState::Window { w, count, prev, .. }) => Some((w, count, prev)),
                _ => None,
            };
            windows(window, algorithm == Algorithm::SlidingWindow, limit, cost, now_us)
        }
    }
}

fn gcra(tat_ns: Option<u64>, limit: &Limit, cost: u64, now_us: u64) -> (Decision, Option<KeyState>) {
    let now = now_us * 1000;
    let t = limit.interval_ns();
    let tau = t * limit.burst();
    // How far the key's arrival time runs ahead of now; never more than
    // the bucket's depth, so a changed limit applies at once (a key spent
    // under a stricter limit starts the new one empty, not in debt).
    let raw = tat_ns.map_or(0, |tat| tat.saturating_sub(now));
    let ahead = raw.min(tau);
    let next = ahead + cost * t;
    if next > tau {
        let remaining = tau.saturating_sub(ahead) / t;
        // Keep the clamp, or the old debt would come back next time.
        let clamped = (raw > tau).then_some(KeyState::Gcra { tat_ns: now + tau });
        return (decision(limit, false, remaining, next - tau, ahead), clamped);
    }
    let d = decision(limit, true, (tau - next) / t, 0, next);
    (d, Some(KeyState::Gcra { tat_ns: now + next }))
}

fn windows(
    window: Option<(u64, u64, u64)>,
    sliding: bool,
    limit: &Limit,
    cost: u64,
    now_us: u64,
) -> (Decision, Option<KeyState>) {
    let n = limit.rate().count();
    let p = limit.period_us();
    let w = now_us / p;
    let elapsed = now_us - w * p;
    let (count, prev) = match window {
        Some((cw, count, prev)) if cw == w => (count, prev),
        Some((cw, count, _)) if cw + 1 == w => (0, count),
        _ => (0, 0),
    };
    let left = p - elapsed;
    let ns = |us: u64| us * 1000;
    if !sliding {
        if count + cost > n {
            return (
                decision(limit, false, n.saturating_sub(count), ns(left), ns(left)),
                None,
            );
        }
        let count = count + cost;
        let state = KeyState::Window {
            w,
            count,
            prev,
            expires_us: now_us + left,
        };
        return (decision(limit, true, n - count, 0, ns(left)), Some(state));
    }
    // The previous window's count, weighted by the share of it that still
    // lies within the last period.
    let weight = left as f64 / p as f64;
    let estimate = prev as f64 * weight + count as f64;
    if estimate + cost as f64 > n as f64 {
        let retry_us = if count + cost > n {
            // Only in the next window, once enough of this one has slid out.
            left as f64 + (p as f64 * (1.0 - (n - cost) as f64 / count as f64)).ceil()
        } else {
            (p as f64 * (1.0 - (n - cost - count) as f64 / prev as f64)).ceil() - elapsed as f64
        };
        let retry = (retry_us.max(0.0) as u64) + 1;
        let reset = if count > 0 { left + p } else { left };
        let remaining = (n as f64 - estimate).floor().max(0.0) as u64;
        return (decision(limit, false, remaining, ns(retry), ns(reset)), None);
    }
    let count = count + cost;
    let remaining = (n as f64 - (prev as f64 * weight + count as f64))
        .floor()
        .max(0.0) as u64;
    let state = KeyState::Window {
        w,
        count,
        prev,
        expires_us: now_us + left + p,
    };
    (decision(limit, true, remaining, 0, ns(left + p)), Some(state))
}

/// The rate-limit decision of the embedded store.
impl LimitMemory<'_> {
    pub(crate) fn limit(&self, limiter: &Name, check: &Check<'_>) -> Decision {
        let stamp = self.stamp();
        let mut limits = self.limits.lock().unwrap_or_else(PoisonError::into_inner);
        let decision = limits.check(limiter, check.key, check.limit, check.cost, stamp.us);
        let args = |b: &mut Vec<u8>| put(b, &limit_args(check));
        self.record(&mut limits.lsn, stamp, limiter, (Code::Limit, &args));
        decision
    }
}

/// The embedded store as a limiter's decisions see it: the shared core
/// and the keys (`store/embedded/` holds them).
#[derive(Clone, Copy)]
pub(crate) struct LimitMemory<'a> {
    pub(crate) core: &'a MemoryCore,
    pub(crate) limits: &'a Mutex<Limits>,
}

impl<'a> Deref for LimitMemory<'a> {
    type Target = MemoryCore;

    fn deref(&self) -> &MemoryCore {
        self.core
    }
}

/// (key, cost, algorithm, count, period ms, burst).
type LimitArgs<'a> = (&'a str, u64, u8, u64, u64, u64);

fn limit_args<'a>(c: &Check<'a>) -> LimitArgs<'a> {
    let algorithm = match c.limit.algorithm() {
        Algorithm::Gcra => 0,
        Algorithm::FixedWindow => 1,
        Algorithm::SlidingWindow => 2,
    };
    let rate = c.limit.rate();
    (
        c.key,
        c.cost,
        algorithm,
        rate.count(),
        rate.period().as_millis() as u64,
        c.limit.burst(),
    )
}

/// Runs record `r` of this primitive again on `m`, whose time is pinned
/// to the record's (see `store/embedded/replay.rs`). Answers are dropped:
/// the state is what replay is for.
pub(crate) fn replay(m: &LimitMemory<'_>, r: &replay::Record<'_>) -> Result<()> {
    let g = &r.name;
    match r.code {
        Code::Limit => {
            let (key, cost, algorithm, count, period_ms, burst): LimitArgs<'_> = replay::args(r.args)?;
            let algorithm = match algorithm {
                0 => Algorithm::Gcra,
                1 => Algorithm::FixedWindow,
                _ => Algorithm::SlidingWindow,
            };
            let rate = Rate::new(count, std::time::Duration::from_millis(period_ms))?;
            let limit = Limit::new(algorithm, rate, (algorithm == Algorithm::Gcra).then_some(burst))?;
            m.limit(
                g,
                &Check {
                    key,
                    limit: &limit,
                    cost,
                },
            );
        }
        other => return Err(replay::misrouted(other)),
    }
    Ok(())
}

impl LimitBackend for LimitMemory<'_> {
    async fn limit(&self, limiter: &Name, check: &Check<'_>) -> Result<Decision> {
        self.write(|| self.limit(limiter, check)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::types::Rate;

    #[test]
    fn idle_keys_are_swept() {
        let mut limits = Limits::default();
        let name = Name::new("l").unwrap();
        let limit = Limit::gcra(Rate::per_second(10).unwrap(), 10).unwrap();
        let start = 1_700_000_000_000_000;
        for i in 0..10_000 {
            limits.check(&name, &format!("k{i}"), &limit, 1, start);
        }
        assert_eq!(limits.len(), 10_000);
        // Two seconds later every key is idle; the new keys' decisions
        // sweep them in steps, and only the new keys are left.
        for i in 0..10_000 {
            limits.check(&name, &format!("n{i}"), &limit, 1, start + 2_000_000);
        }
        assert_eq!(limits.len(), 10_000);
        assert!(limits.keys[&name][0].keys().all(|k| k.starts_with('n')));
    }
}
