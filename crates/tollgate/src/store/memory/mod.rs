//! The embedded store's core, shared by every primitive's memory model:
//! the clock, the idle period, the wakers, the log (`journal.rs`), the
//! time and draw an operation runs at (`Stamp`, pinned while a record is
//! replayed), and how a change is answered (`write`: refused while the
//! disk refuses, answered once its record is safe). It names no
//! primitive: each one keeps its state on a `Shelf` (`shelf.rs`) and runs
//! its operations on a view of this core and its own state; the store
//! that holds them all is `store/embedded/`.
//!
//! Each gate and each job queue has a lock of its own (see `shelf`), so a
//! flood on one never holds up another. A std `Mutex` (not tokio's) is
//! right here: no critical section awaits, and each is a bounded amount of
//! map work. Wake-ups are sent after the lock is dropped so a woken waiter
//! never contends with the waker.

pub(crate) mod durable;
pub(crate) mod journal;
pub(crate) mod replay;
pub(crate) mod shelf;

use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};
use crate::name::Name;

pub(crate) use self::shelf::Shelved;
use super::Wakers;
use journal::Journal;
pub(crate) use journal::put;
use replay::Code;

/// How an operation is logged: its code, and what writes its arguments.
pub(crate) type Logged<'a> = (Code, &'a dyn Fn(&mut Vec<u8>));

/// The store time an operation runs at and the random number it may draw
/// (a new gate's epoch): read once per operation, recorded with it in the
/// log, and given back when the record is replayed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stamp {
    pub(crate) us: u64,
    pub(crate) rnd: u16,
}

impl Stamp {
    pub(crate) fn ms(self) -> u64 {
        self.us / 1000
    }
}

/// Settings of the embedded store ([`Store::memory_with`](crate::Store::memory_with)).
/// Every field has a default.
#[derive(Debug, Clone)]
pub struct MemoryOptions {
    /// How long a name's state is kept once it is idle and empty: no
    /// operation on it, and no lease, ticket, kept revocation or job in it,
    /// for this long. Then it is dropped (a gate's stored capacity and
    /// admission settings with it; its next write starts a new epoch, and
    /// its fences keep growing). Default 10 minutes; 1 ms to 30 days.
    pub idle: Duration,
    /// Where the store reads the time. Default [`SystemClock`]; tests use
    /// [`ManualClock`](crate::ManualClock).
    pub clock: Arc<dyn Clock>,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        MemoryOptions {
            idle: Duration::from_secs(600),
            clock: Arc::new(SystemClock),
        }
    }
}

impl MemoryOptions {
    /// Checks the settings.
    pub(crate) fn check(&self) -> Result<()> {
        if self.idle < Duration::from_millis(1) || self.idle > Duration::from_secs(30 * 24 * 3600) {
            return Err(Error::invalid(format!(
                "the idle period must be between 1ms and 30 days, got {}ms",
                self.idle.as_millis()
            )));
        }
        Ok(())
    }
}

/// How many names the embedded store holds state for
/// ([`Store::memory_footprint`](crate::Store::memory_footprint)). Reads never add to these; idle names
/// leave them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryFootprint {
    /// Gates with state (holders, waiters, settings or a revocation log).
    pub gates: usize,
    /// Job queues with state.
    pub queues: usize,
    /// Rate-limit keys stored (those whose budget is fully restored go at
    /// the next sweep).
    pub limit_keys: usize,
}

#[derive(Debug)]
pub(crate) struct MemoryCore {
    pub(crate) clock: Arc<dyn Clock>,
    /// `MemoryOptions::idle` in ms.
    pub(crate) idle_ms: u64,
    pub(crate) wakers: Arc<Wakers>,
    /// The durable store's log, once recovery is done (none: memory only,
    /// or replaying).
    pub(crate) journal: OnceLock<Arc<Journal>>,
    /// While a record is replayed, its time (µs) and draw; 0: live.
    pinned_us: AtomicU64,
    pinned_rnd: AtomicU16,
}

impl MemoryCore {
    /// A core with `options` (checked by the caller).
    pub(crate) fn new(options: MemoryOptions) -> Self {
        MemoryCore {
            clock: options.clock,
            idle_ms: options.idle.as_millis() as u64,
            wakers: Arc::default(),
            journal: OnceLock::new(),
            pinned_us: AtomicU64::new(0),
            pinned_rnd: AtomicU16::new(0),
        }
    }

    /// The time and draw of an operation starting now (see `Stamp`).
    pub(crate) fn stamp(&self) -> Stamp {
        let pinned = self.pinned_us.load(Ordering::Relaxed);
        if pinned != 0 {
            return Stamp {
                us: pinned,
                rnd: self.pinned_rnd.load(Ordering::Relaxed),
            };
        }
        // A draw only where the log records it: a memory-only store draws
        // when it needs one (a new gate's epoch, `draw`).
        Stamp {
            us: self.clock.now_us(),
            rnd: if self.journal.get().is_some() {
                rand::random()
            } else {
                0
            },
        }
    }

    /// The random number an operation at `stamp` uses: the one recorded
    /// with it when there is a log (or while replaying one), else a fresh
    /// one.
    pub(crate) fn draw(&self, stamp: Stamp) -> u16 {
        if self.journal.get().is_none() && self.pinned_us.load(Ordering::Relaxed) == 0 {
            return rand::random();
        }
        stamp.rnd
    }

    /// Whether operations are logged (or replayed from a log).
    pub(crate) fn logging(&self) -> bool {
        self.journal.get().is_some() || self.pinned_us.load(Ordering::Relaxed) != 0
    }

    /// Pins the store's time and draw to a record's while it is replayed
    /// (`None`: back to the clock).
    pub(crate) fn pin(&self, stamp: Option<Stamp>) {
        let stamp = stamp.unwrap_or(Stamp { us: 0, rnd: 0 });
        self.pinned_rnd.store(stamp.rnd, Ordering::Relaxed);
        self.pinned_us.store(stamp.us, Ordering::Relaxed);
    }

    /// Writes an operation on `name` to the log, if this store has one,
    /// and notes its LSN in the state it changed (`lsn`). Called with that
    /// state's lock held, so one name's records keep their order.
    pub(crate) fn record(&self, lsn: &mut u64, stamp: Stamp, name: &Name, (code, args): Logged<'_>) {
        if let Some(journal) = self.journal.get() {
            *lsn = journal.append(stamp.us, stamp.rnd, |b| {
                put(b, &(code.byte(), name.as_str()));
                args(b);
            });
        }
    }

    /// Runs a change: refused up front while the disk refuses writes, and
    /// answered once its record is as safe as the fsync policy makes it.
    pub(crate) async fn write<T>(&self, op: impl FnOnce() -> T) -> Result<T> {
        self.admit()?;
        let out = op();
        self.settle().await?;
        Ok(out)
    }

    /// Runs a read, answered once what it may have seen is as safe as a
    /// change's answer would be (a read can see a change whose writer is
    /// still waiting for the disk).
    /// While the disk refuses writes, reads answer at once: what they may
    /// show that is not on disk yet was refused to its writer (or is
    /// still waiting), and the store stays readable.
    pub(crate) async fn read<T>(&self, op: impl FnOnce() -> T) -> Result<T> {
        let out = op();
        match self.journal.get() {
            Some(j) if !j.is_failing() => j.settle().await?,
            _ => {}
        }
        Ok(out)
    }

    /// Fails if changes are refused now (the disk refuses writes).
    pub(crate) fn admit(&self) -> Result<()> {
        match self.journal.get() {
            Some(j) => j.refusing(),
            None => Ok(()),
        }
    }

    /// Waits until what was logged so far is as safe as the fsync policy
    /// makes it, so an answer never reports a change a crash could undo.
    pub(crate) async fn settle(&self) -> Result<()> {
        match self.journal.get() {
            Some(j) => j.settle().await,
            None => Ok(()),
        }
    }

    pub(crate) fn wakers(&self) -> Arc<Wakers> {
        self.wakers.clone()
    }
}
