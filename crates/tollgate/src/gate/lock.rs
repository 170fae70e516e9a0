//! `Lock`: a gate of capacity 1 with a fair line.

use std::time::Duration;

use crate::error::Result;
use crate::gate::{Gate, GateOptions, Lease};
use crate::store::Store;

use super::types::GateStats;

/// A distributed mutual-exclusion lock with leases, fencing tokens and a
/// FIFO line: waiters get it in arrival order, handed over on release.
#[derive(Debug, Clone)]
pub struct Lock {
    gate: Gate,
}

impl Lock {
    /// Lock `name` with the default options (30 s lease, renewed
    /// automatically; waiters dropped after 10 s without a heartbeat).
    pub fn new(store: &Store, name: &str) -> Result<Lock> {
        Lock::with_options(store, name, GateOptions::default())
    }

    /// Lock `name` with `options`.
    pub fn with_options(store: &Store, name: &str, options: GateOptions) -> Result<Lock> {
        Ok(Lock {
            gate: Gate::new(store, name, Some(1), options)?,
        })
    }

    /// Takes the lock if it is free and nobody waits for it.
    pub async fn try_acquire(&self) -> Result<Option<Lease>> {
        self.gate.try_acquire(1).await
    }

    /// Takes the lock, waiting in line up to `wait`; `None` if the wait ran
    /// out.
    pub async fn acquire(&self, wait: Duration) -> Result<Option<Lease>> {
        self.gate.acquire(1, wait).await
    }

    /// Holder count, line length, grants and expiries.
    pub async fn stats(&self) -> Result<GateStats> {
        self.gate.stats().await
    }

    /// The gate underneath, for the low-level operations.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }
}
