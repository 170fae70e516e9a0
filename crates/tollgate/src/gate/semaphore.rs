//! `Semaphore`: a gate of capacity N with a fair line and multi-permit
//! acquisition.

use std::time::Duration;

use crate::error::Result;
use crate::gate::{Gate, GateOptions, Lease};
use crate::store::Store;

use super::types::GateStats;

/// A distributed counting semaphore: at most `capacity` permits held at
/// once, leased (a crashed holder's permits come back when its lease ends),
/// and fair: waiters are served in arrival order, and a large request at the
/// head of the line is not starved by smaller ones behind it.
#[derive(Debug, Clone)]
pub struct Semaphore {
    gate: Gate,
}

impl Semaphore {
    /// Semaphore `name` with `capacity` permits and the default options.
    /// The capacity is stored with the semaphore; a different one from
    /// another client is a conflict (change it with [`Semaphore::set_capacity`]).
    pub fn new(store: &Store, name: &str, capacity: u32) -> Result<Semaphore> {
        Semaphore::with_options(store, name, capacity, GateOptions::default())
    }

    /// Semaphore `name` with `capacity` permits and `options`.
    pub fn with_options(store: &Store, name: &str, capacity: u32, options: GateOptions) -> Result<Semaphore> {
        Ok(Semaphore {
            gate: Gate::new(store, name, Some(capacity), options)?,
        })
    }

    /// Takes `permits` if free and nobody waits.
    pub async fn try_acquire(&self, permits: u32) -> Result<Option<Lease>> {
        self.gate.try_acquire(permits).await
    }

    /// Takes `permits`, waiting in line up to `wait`.
    pub async fn acquire(&self, permits: u32, wait: Duration) -> Result<Option<Lease>> {
        self.gate.acquire(permits, wait).await
    }

    /// Changes the capacity at runtime (lowering never evicts a holder).
    /// Later handles must then be created with the new capacity.
    pub async fn set_capacity(&self, capacity: u32) -> Result<()> {
        self.gate.set_capacity(capacity).await
    }

    /// Holders, permits in use, line length, grants and expiries.
    pub async fn stats(&self) -> Result<GateStats> {
        self.gate.stats().await
    }

    /// The gate underneath, for the low-level operations.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }
}
