//! Time for the memory store. Redis reads its own clock (`TIME`) inside every
//! script; the memory store reads one of these, so tests can move time by hand
//! instead of sleeping.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of time since the Unix epoch.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64 {
        self.now_us() / 1000
    }

    /// Now, in microseconds since the Unix epoch (the resolution of Redis's
    /// `TIME`, which rate limiters need).
    fn now_us(&self) -> u64;
}

/// The wall clock of this machine: the memory store's "server time".
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_us(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to. Cloning shares the same time.
/// It counts microseconds.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock reading `start_ms`.
    pub fn new(start_ms: u64) -> Self {
        ManualClock(Arc::new(AtomicU64::new(start_ms * 1000)))
    }

    /// Moves time forward (to the microsecond).
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_micros() as u64, Ordering::SeqCst);
    }

    /// Moves time back, as a system clock stepped by NTP can: to test that
    /// nothing relies on time never going back.
    pub fn rewind(&self, by: Duration) {
        let by = by.as_micros() as u64;
        let _ = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| Some(t.saturating_sub(by)));
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new(1_700_000_000_000)
    }
}

impl Clock for ManualClock {
    fn now_us(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}
