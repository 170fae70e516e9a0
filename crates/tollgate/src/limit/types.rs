//! Rate limits in the store layer: what a limit is (`Limit`, `Rate`,
//! `Algorithm`) and what a check answers (`Decision`), shared by both
//! stores and re-exported by `crate::limit`. The memory store's arithmetic
//! is `memory.rs`; `limit.lua` (driven by `redis.rs`) is the same steps on
//! Redis.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::{Error, Result};

/// The largest count, burst or cost a limit may have.
pub const MAX_LIMIT: u64 = 1_000_000_000;
/// The longest period a limit may have.
pub const MAX_PERIOD: Duration = Duration::from_secs(24 * 3600);
/// The shortest period a limit may have.
pub const MIN_PERIOD: Duration = Duration::from_millis(1);
/// The longest time a GCRA bucket may take to refill (burst × interval):
/// it keeps the arithmetic exact on Redis.
pub const MAX_REFILL: Duration = Duration::from_secs(30 * 24 * 3600);

/// How a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    /// The generic cell rate algorithm: a steady rate plus a burst. One
    /// timestamp per key, exact, no bursts at window edges.
    #[default]
    Gcra,
    /// `count` per calendar window of `period` (windows aligned to the
    /// epoch). Up to twice `count` can pass around a window's edge.
    FixedWindow,
    /// A fixed window's counter plus the previous window's, weighted by how
    /// much of it still overlaps the last `period`. Smooths the edge of a
    /// fixed window; approximate (it assumes the previous window's requests
    /// were spread evenly).
    SlidingWindow,
}

impl Algorithm {
    /// `gcra`, `fixed_window` or `sliding_window`.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Gcra => "gcra",
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
        }
    }
}

impl FromStr for Algorithm {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "gcra" => Ok(Algorithm::Gcra),
            "fixed_window" | "fixed" => Ok(Algorithm::FixedWindow),
            "sliding_window" | "sliding" => Ok(Algorithm::SlidingWindow),
            _ => Err(Error::invalid(format!(
                "unknown algorithm {s:?}; use gcra, fixed_window or sliding_window"
            ))),
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Checks that a count or burst (`what`) is 1 to [`MAX_LIMIT`].
fn check_count(what: &str, n: u64) -> Result<()> {
    if n == 0 || n > MAX_LIMIT {
        return Err(Error::invalid(format!(
            "{what} must be 1 to {MAX_LIMIT}, got {n}"
        )));
    }
    Ok(())
}

/// `count` events per `period`, written `10/s`, `600/min`, `5/250ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    count: u64,
    period: Duration,
}

impl Rate {
    /// Checks and builds a rate: `count` in 1..=[`MAX_LIMIT`], `period` in
    /// [`MIN_PERIOD`]..=[`MAX_PERIOD`].
    pub fn new(count: u64, period: Duration) -> Result<Rate> {
        check_count("a rate's count", count)?;
        if period < MIN_PERIOD || period > MAX_PERIOD || !period.as_nanos().is_multiple_of(1_000_000) {
            return Err(Error::invalid(format!(
                "a rate's period must be whole milliseconds from 1ms to 24h, got {period:?}"
            )));
        }
        if count > period.as_millis() as u64 * 1000 {
            return Err(Error::invalid(format!(
                "{count} per {period:?} is more than one a microsecond; use a longer period"
            )));
        }
        Ok(Rate { count, period })
    }

    /// `count` per second.
    pub fn per_second(count: u64) -> Result<Rate> {
        Rate::new(count, Duration::from_secs(1))
    }

    /// `count` per minute.
    pub fn per_minute(count: u64) -> Result<Rate> {
        Rate::new(count, Duration::from_secs(60))
    }

    /// Events per period.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }
}

impl FromStr for Rate {
    type Err = Error;

    /// `N/s`, `N/sec`, `N/m`, `N/min`, `N/h`, `N/d`, or `N/<duration>` such
    /// as `N/250ms` or `N/10s`.
    fn from_str(s: &str) -> Result<Rate> {
        let bad = || {
            Error::invalid(format!(
                "rate {s:?} is not of the form N/s, N/min, N/h or N/<duration>"
            ))
        };
        let (count, per) = s.trim().split_once('/').ok_or_else(bad)?;
        let count: u64 = count.trim().parse().map_err(|_| bad())?;
        let per = per.trim();
        let period = match per {
            "s" | "sec" | "second" => Duration::from_secs(1),
            "m" | "min" | "minute" => Duration::from_secs(60),
            "h" | "hour" => Duration::from_secs(3600),
            "d" | "day" => Duration::from_secs(86_400),
            _ => humantime::parse_duration(per).map_err(|_| bad())?,
        };
        Rate::new(count, period)
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.period.as_millis() {
            1000 => write!(f, "{}/s", self.count),
            60_000 => write!(f, "{}/min", self.count),
            3_600_000 => write!(f, "{}/h", self.count),
            86_400_000 => write!(f, "{}/d", self.count),
            ms => write!(f, "{}/{ms}ms", self.count),
        }
    }
}

/// A complete limit: algorithm, rate and (for GCRA) burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limit {
    algorithm: Algorithm,
    rate: Rate,
    burst: u64,
}

impl Limit {
    /// GCRA: `rate` on average, at most `burst` at once (a fresh key allows
    /// exactly `burst` requests immediately, then one per interval).
    pub fn gcra(rate: Rate, burst: u64) -> Result<Limit> {
        check_count("burst", burst)?;
        let limit = Limit {
            algorithm: Algorithm::Gcra,
            rate,
            burst,
        };
        let refill = Duration::from_nanos(limit.interval_ns().saturating_mul(burst));
        if refill > MAX_REFILL {
            return Err(Error::invalid(format!(
                "burst {burst} at {rate} takes {refill:?} to refill; at most 30 days is allowed"
            )));
        }
        Ok(limit)
    }

    /// `rate.count()` per calendar window of `rate.period()`.
    pub fn fixed_window(rate: Rate) -> Limit {
        Limit {
            algorithm: Algorithm::FixedWindow,
            rate,
            burst: rate.count,
        }
    }

    /// `rate.count()` per sliding `rate.period()`, estimated from two
    /// window counters.
    pub fn sliding_window(rate: Rate) -> Limit {
        Limit {
            algorithm: Algorithm::SlidingWindow,
            rate,
            burst: rate.count,
        }
    }

    /// Builds any algorithm; `burst` applies to GCRA only (default: the
    /// rate's count) and must be left out for windows.
    pub fn new(algorithm: Algorithm, rate: Rate, burst: Option<u64>) -> Result<Limit> {
        match (algorithm, burst) {
            (Algorithm::Gcra, b) => Limit::gcra(rate, b.unwrap_or(rate.count)),
            (_, Some(b)) if b != rate.count => Err(Error::invalid(format!(
                "burst applies to gcra only; a {algorithm} allows the rate's count ({}) per window",
                rate.count
            ))),
            (Algorithm::FixedWindow, _) => Ok(Limit::fixed_window(rate)),
            (Algorithm::SlidingWindow, _) => Ok(Limit::sliding_window(rate)),
        }
    }

    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The rate.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// The most one key can spend at once: the burst for GCRA, the count
    /// per window otherwise. This is the `RateLimit-Limit` figure.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// GCRA's emission interval in nanoseconds: period / count, rounded up
    /// (so rounding never lets more through than the rate).
    pub(crate) fn interval_ns(&self) -> u64 {
        let period = self.rate.period.as_nanos() as u64;
        period.div_ceil(self.rate.count)
    }

    pub(crate) fn period_us(&self) -> u64 {
        self.rate.period.as_micros() as u64
    }

    pub(crate) fn check_cost(&self, cost: u64) -> Result<()> {
        if cost == 0 {
            return Err(Error::invalid("cost must be at least 1"));
        }
        if cost > self.burst {
            return Err(Error::invalid(format!(
                "cost {cost} is more than this limit ever allows at once ({}); it could never pass",
                self.burst
            )));
        }
        Ok(())
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.algorithm {
            Algorithm::Gcra => write!(f, "gcra {} burst {}", self.rate, self.burst),
            a => write!(f, "{a} {}", self.rate),
        }
    }
}

/// One check of a key of a limiter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Check<'a> {
    /// The limited key (a client, a user, a route...).
    pub(crate) key: &'a str,
    /// The limit to check it against.
    pub(crate) limit: &'a Limit,
    /// What this request spends, if it fits.
    pub(crate) cost: u64,
}

/// The answer to one check. Durations are whole milliseconds, rounded up:
/// a request retried `retry_after` later is allowed, unless others spent
/// the budget in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Whether this request may go ahead (its cost was spent).
    pub allowed: bool,
    /// The most one key may spend at once (GCRA's burst, a window's count).
    pub limit: u64,
    /// How many more unit-cost requests would be allowed right now.
    pub remaining: u64,
    /// When refused: how long until this request's cost would be allowed.
    /// Zero when allowed.
    pub retry_after: Duration,
    /// How long until the key is back to its full allowance.
    pub reset_after: Duration,
    /// The store could not be asked (unreachable or too slow) and the
    /// limiter's [`OnStoreError`](crate::OnStoreError) decided instead.
    pub degraded: bool,
}

/// Rounds nanoseconds up to whole milliseconds.
pub(crate) fn ceil_ms(ns: u64) -> Duration {
    Duration::from_millis(ns.div_ceil(1_000_000))
}

/// Turns a store's raw answer (allowed, remaining, retry and reset in ns)
/// into a decision.
pub(crate) fn decision(
    limit: &Limit,
    allowed: bool,
    remaining: u64,
    retry_ns: u64,
    reset_ns: u64,
) -> Decision {
    Decision {
        allowed,
        limit: limit.burst,
        remaining: remaining.min(limit.burst),
        retry_after: if allowed {
            Duration::ZERO
        } else {
            ceil_ms(retry_ns)
        },
        reset_after: ceil_ms(reset_ns),
        degraded: false,
    }
}
