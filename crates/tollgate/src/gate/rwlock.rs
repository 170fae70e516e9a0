//! `RwLock`: a fair read-write lock, a gate of `RW_PERMITS` permits where
//! a reader takes one and a writer takes them all.
//!
//! Why a gate and not a primitive of its own: the gate's line is already
//! FIFO with head-of-line blocking for multi-permit requests, which is
//! exactly the fairness a read-write lock needs. A writer waiting at the
//! head needs every permit, so the readers behind it (and every newcomer:
//! nobody overtakes the line) wait until it has held and left; when it
//! leaves, one promotion grants every reader at the head of the line up to
//! the next writer, together. Leases, fences, `lost()`, hand-off without
//! polling and heartbeat-dropped waiters are the gate's. docs/BENCHMARKS.md
//! ("Read-write lock") measures the cost of this choice.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::gate::{Gate, GateOptions, Lease};
use crate::store::Store;

use super::types::{GateStats, MAX_CAPACITY};

/// The capacity of a read-write lock's gate: the most readers that can
/// hold at once, and what a writer takes. A plain [`Lock`](crate::Lock)
/// or a [`Semaphore`](crate::Semaphore) of the same name has another
/// capacity, so mixing them is a [`CapacityConflict`](crate::ErrorKind::CapacityConflict).
pub const RW_PERMITS: u32 = MAX_CAPACITY;

/// How a read-write lock is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RwMode {
    /// Among any number of other readers, never with a writer.
    Shared,
    /// Alone.
    Exclusive,
}

impl RwMode {
    /// The permits a hold of this mode takes of the lock's gate.
    pub fn permits(self) -> u32 {
        match self {
            RwMode::Shared => 1,
            RwMode::Exclusive => RW_PERMITS,
        }
    }

    /// The mode of a lease of a read-write lock, from its permits.
    pub fn of(lease: &Lease) -> RwMode {
        if lease.permits() == RW_PERMITS {
            RwMode::Exclusive
        } else {
            RwMode::Shared
        }
    }
}

/// A distributed, fair read-write lock: many readers together or one
/// writer alone, served in arrival order. A writer waiting at the head of
/// the line holds back every reader that comes after it, so a steady
/// stream of readers never starves a writer; readers in a row in the line
/// enter together.
///
/// Every hold is a [`Lease`]: renewed in the background, with a fencing
/// token (readers' fences grow too, so a writer's fence is above every
/// earlier reader's), `lost()`, and release on drop.
///
/// ```no_run
/// # async fn demo(store: &tollgate::Store) -> tollgate::Result<()> {
/// use std::time::Duration;
/// let lock = tollgate::RwLock::new(store, "prices")?;
/// if let Some(read) = lock.read(Duration::from_secs(5)).await? {
///     // ... read, alongside other readers ...
///     read.release().await?;
/// }
/// if let Some(write) = lock.write(Duration::from_secs(5)).await? {
///     // ... write, alone; hand write.fence() to what you write to ...
///     write.release().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RwLock {
    gate: Gate,
}

impl RwLock {
    /// Read-write lock `name` with the default options (30 s lease,
    /// renewed automatically; waiters dropped after 10 s without a
    /// heartbeat).
    pub fn new(store: &Store, name: &str) -> Result<RwLock> {
        RwLock::with_options(store, name, GateOptions::default())
    }

    /// Read-write lock `name` with `options`. `options.fair` must be
    /// `true`: a barging reader could starve a writer for ever.
    pub fn with_options(store: &Store, name: &str, options: GateOptions) -> Result<RwLock> {
        if !options.fair {
            return Err(Error::invalid(
                "a read-write lock is always fair (options.fair must be true): barging readers would starve writers",
            ));
        }
        Ok(RwLock {
            gate: Gate::new(store, name, Some(RW_PERMITS), options)?,
        })
    }

    /// Holds the lock in `mode`, waiting in line up to `wait`; `None` if
    /// the wait ran out. Dropping the future leaves the line.
    pub async fn acquire(&self, mode: RwMode, wait: Duration) -> Result<Option<Lease>> {
        self.gate.acquire(mode.permits(), wait).await
    }

    /// [`RwLock::acquire`] with a label saying who holds (or waits), shown
    /// by [`Gate::holders`].
    pub async fn acquire_as(
        &self,
        mode: RwMode,
        wait: Duration,
        label: Option<&str>,
    ) -> Result<Option<Lease>> {
        self.gate.acquire_as(mode.permits(), wait, label).await
    }

    /// A reader's hold, waiting up to `wait`.
    pub async fn read(&self, wait: Duration) -> Result<Option<Lease>> {
        self.acquire(RwMode::Shared, wait).await
    }

    /// The writer's hold, waiting up to `wait`.
    pub async fn write(&self, wait: Duration) -> Result<Option<Lease>> {
        self.acquire(RwMode::Exclusive, wait).await
    }

    /// A reader's hold if no writer holds and nobody waits.
    pub async fn try_read(&self) -> Result<Option<Lease>> {
        self.read(Duration::ZERO).await
    }

    /// The writer's hold if nobody holds and nobody waits.
    pub async fn try_write(&self) -> Result<Option<Lease>> {
        self.write(Duration::ZERO).await
    }

    /// Who holds now: the readers, or the writer.
    pub async fn state(&self) -> Result<RwState> {
        RwState::of(&self.gate.stats().await?)
    }

    /// The gate's figures (permits in use, line length, grants, expiries).
    pub async fn stats(&self) -> Result<GateStats> {
        self.gate.stats().await
    }

    /// The gate underneath, for the low-level operations.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }
}

/// Who holds a read-write lock, read from its gate's figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RwState {
    /// Nobody.
    Free,
    /// This many readers.
    Read(u64),
    /// The writer.
    Written,
}

impl RwState {
    /// The state a gate's figures describe, if it is a read-write lock's.
    pub fn of(stats: &GateStats) -> Result<RwState> {
        if stats.capacity.is_some_and(|c| c != RW_PERMITS) {
            return Err(Error::invalid(format!(
                "gate has capacity {}, not a read-write lock's {RW_PERMITS}",
                stats.capacity.unwrap_or(0)
            )));
        }
        Ok(match stats.used {
            0 => RwState::Free,
            u if u >= u64::from(RW_PERMITS) => RwState::Written,
            u => RwState::Read(u),
        })
    }
}
