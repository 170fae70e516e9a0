//! Rate limiting: GCRA by default, fixed and sliding windows on request.
//!
//! Every decision is one atomic step in the store (one script on Redis) on
//! the store's clock, so limits hold across processes and machines and no
//! client clock is ever trusted. See docs/LIMITS.md for the algorithms and
//! their edge behaviour.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::name::Name;
use crate::store::Store;

/// The largest count, burst or cost a limit may have.
pub const MAX_LIMIT: u64 = 1_000_000_000;
/// The longest period a limit may have.
pub const MAX_PERIOD: Duration = Duration::from_secs(24 * 3600);
/// The shortest period a limit may have.
pub const MIN_PERIOD: Duration = Duration::from_millis(1);
/// The longest time a GCRA bucket may take to refill (burst × interval):
/// it keeps the arithmetic exact on Redis.
pub const MAX_REFILL: Duration = Duration::from_secs(30 * 24 * 3600);
/// The longest key, in bytes.
pub const MAX_KEY_LEN: usize = 256;
/// How long a decision may wait for the store by default before the
/// limiter's [`OnStoreError`] applies.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);

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
        if count == 0 || count > MAX_LIMIT {
            return Err(Error::invalid(format!(
                "a rate's count must be 1 to {MAX_LIMIT}, got {count}"
            )));
        }
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
        if burst == 0 || burst > MAX_LIMIT {
            return Err(Error::invalid(format!(
                "burst must be 1 to {MAX_LIMIT}, got {burst}"
            )));
        }
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

    fn check_cost(&self, cost: u64) -> Result<()> {
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
    /// limiter's [`OnStoreError`] decided instead.
    pub degraded: bool,
}

/// What a limiter answers when its store cannot be asked in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnStoreError {
    /// Return the error (`ErrorKind::Unavailable`) to the caller.
    #[default]
    Error,
    /// Allow the request (a degraded decision).
    Open,
    /// Refuse the request (a degraded decision).
    Closed,
}

impl FromStr for OnStoreError {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "error" => Ok(OnStoreError::Error),
            "open" => Ok(OnStoreError::Open),
            "closed" => Ok(OnStoreError::Closed),
            _ => Err(Error::invalid(format!(
                "unknown store-error policy {s:?}; use error, open or closed"
            ))),
        }
    }
}

/// A validated key: 1 to [`MAX_KEY_LEN`] bytes, no whitespace or control
/// characters.
pub(crate) fn check_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::invalid("key must not be empty"));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Error::invalid(format!(
            "key is {} bytes long; at most {MAX_KEY_LEN} are allowed",
            key.len()
        )));
    }
    if let Some(bad) = key.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::invalid(format!(
            "key contains {bad:?}; whitespace and control characters are not allowed"
        )));
    }
    Ok(())
}

/// A named rate limiter over a store. Cheap to clone; clones share the
/// configured limit.
///
/// ```
/// # async fn demo() -> tollgate::Result<()> {
/// use tollgate::{Limit, Rate, RateLimiter, Store};
/// let limiter = RateLimiter::new(&Store::memory(), "api", Limit::gcra(Rate::per_second(10)?, 20)?)?;
/// let d = limiter.check("client-42", 1).await?;
/// assert!(d.allowed);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RateLimiter {
    store: Store,
    name: Name,
    limit: Arc<RwLock<Limit>>,
    on_store_error: OnStoreError,
    timeout: Duration,
    counters: Arc<Counters>,
}

/// The limiter's metric handles, registered once (with the recorder
/// installed when the limiter is made), so a decision costs no lookups.
#[derive(Debug)]
struct Counters {
    allowed: metrics::Counter,
    refused: metrics::Counter,
    error: metrics::Counter,
    failed_open: metrics::Counter,
    failed_closed: metrics::Counter,
    store_errors: metrics::Counter,
}

impl Counters {
    fn new(name: &Name) -> Counters {
        let decisions = |outcome: &'static str| metrics::counter!("tollgate_limit_decisions_total", "limiter" => name.to_string(), "outcome" => outcome);
        Counters {
            allowed: decisions("allowed"),
            refused: decisions("refused"),
            error: decisions("error"),
            failed_open: decisions("failed_open"),
            failed_closed: decisions("failed_closed"),
            store_errors: metrics::counter!("tollgate_limit_store_errors_total", "limiter" => name.to_string()),
        }
    }
}

impl RateLimiter {
    /// A limiter called `name` (same rules as gate names) with its limit.
    /// All its keys share one Redis hash tag: `{name}`.
    pub fn new(store: &Store, name: &str, limit: Limit) -> Result<RateLimiter> {
        let name = Name::new(name)?;
        Ok(RateLimiter {
            store: store.clone(),
            counters: Arc::new(Counters::new(&name)),
            name,
            limit: Arc::new(RwLock::new(limit)),
            on_store_error: OnStoreError::default(),
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// What to answer when the store is unreachable or slower than the
    /// timeout. Default: return the error.
    pub fn on_store_error(mut self, policy: OnStoreError) -> Self {
        self.on_store_error = policy;
        self
    }

    /// The longest a decision waits for the store (default 100 ms).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The limiter's name.
    pub fn name(&self) -> &str {
        self.name.as_str()
    }

    /// The configured limit.
    pub fn limit(&self) -> Limit {
        *self.limit.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Replaces the configured limit; the next check (in any clone) uses it.
    /// Keys keep their state: a GCRA key's timestamp is read against the new
    /// rate and burst.
    pub fn set_limit(&self, limit: Limit) {
        *self.limit.write().unwrap_or_else(PoisonError::into_inner) = limit;
    }

    /// Spends `cost` of `key`'s allowance under the configured limit, if it
    /// is there.
    pub async fn check(&self, key: &str, cost: u64) -> Result<Decision> {
        let limit = self.limit();
        self.check_with(key, cost, &limit).await
    }

    /// Like [`check`](Self::check) with a limit given for this call.
    pub async fn check_with(&self, key: &str, cost: u64, limit: &Limit) -> Result<Decision> {
        check_key(key)?;
        limit.check_cost(cost)?;
        let ask = self.store.limit(&self.name, key, limit, cost);
        // The embedded store answers at once; only a remote one needs the
        // deadline (and the timer it costs).
        let asked = if self.store.is_remote() {
            tokio::time::timeout(self.timeout, ask).await
        } else {
            Ok(ask.await)
        };
        let error = match asked {
            Ok(Ok(d)) => {
                let counter = if d.allowed {
                    &self.counters.allowed
                } else {
                    &self.counters.refused
                };
                counter.increment(1);
                return Ok(d);
            }
            Ok(Err(e))
                if !matches!(
                    e.kind(),
                    ErrorKind::Unavailable | ErrorKind::Store | ErrorKind::Misconfigured
                ) =>
            {
                return Err(e);
            }
            Ok(Err(e)) => e,
            Err(_) => Error::new(
                ErrorKind::Unavailable,
                format!("the store did not answer within {:?}", self.timeout),
            ),
        };
        self.counters.store_errors.increment(1);
        let (allowed, counter) = match self.on_store_error {
            OnStoreError::Error => {
                tracing::warn!(limiter = %self.name, error = %error, "rate limiter: store error");
                self.counters.error.increment(1);
                return Err(error);
            }
            OnStoreError::Open => (true, &self.counters.failed_open),
            OnStoreError::Closed => (false, &self.counters.failed_closed),
        };
        counter.increment(1);
        tracing::warn!(limiter = %self.name, error = %error, allowed, "rate limiter: store error, decided without it");
        Ok(Decision {
            allowed,
            limit: limit.burst,
            remaining: 0,
            retry_after: if allowed {
                Duration::ZERO
            } else {
                Duration::from_secs(1)
            },
            reset_after: Duration::ZERO,
            degraded: true,
        })
    }
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
