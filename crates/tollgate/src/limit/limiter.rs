//! Rate limiting: GCRA by default, fixed and sliding windows on request.
//!
//! Every decision is one atomic step in the store (one script on Redis) on
//! the store's clock, so limits hold across processes and machines and no
//! client clock is ever trusted. See docs/LIMITS.md for the algorithms and
//! their edge behaviour.

use std::str::FromStr;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use super::types::{Decision, Limit};
use crate::error::{Error, ErrorKind, Result};
use crate::limit::types::Check;
use crate::name::{Name, check_text};
use crate::store::Store;

/// The longest key, in bytes.
pub const MAX_KEY_LEN: usize = 256;
/// How long a decision may wait for the store by default before the
/// limiter's [`OnStoreError`] applies.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);

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
    check_text(
        "key",
        key,
        MAX_KEY_LEN,
        |c| !c.is_whitespace() && !c.is_control(),
        "whitespace and control characters are not allowed",
    )
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
    /// The allowed and refused decisions again, readable: a metrics
    /// counter cannot be read back, and the server's console charts them.
    tally: [std::sync::atomic::AtomicU64; 2],
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
            tally: Default::default(),
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

    /// How many checks this limiter (and its clones) allowed and refused
    /// since it was made, in this process.
    pub fn decided(&self) -> (u64, u64) {
        let [allowed, refused] = &self.counters.tally;
        (
            allowed.load(std::sync::atomic::Ordering::Relaxed),
            refused.load(std::sync::atomic::Ordering::Relaxed),
        )
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
        let check = Check { key, limit, cost };
        let ask = self.store.limit(&self.name, &check);
        // The embedded store answers at once; only a remote one needs the
        // deadline (and the timer it costs).
        let asked = if self.store.is_remote() {
            tokio::time::timeout(self.timeout, ask).await
        } else {
            Ok(ask.await)
        };
        let error = match asked {
            Ok(Ok(d)) => {
                let (counter, tally) = if d.allowed {
                    (&self.counters.allowed, &self.counters.tally[0])
                } else {
                    (&self.counters.refused, &self.counters.tally[1])
                };
                counter.increment(1);
                tally.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
            limit: limit.burst(),
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
