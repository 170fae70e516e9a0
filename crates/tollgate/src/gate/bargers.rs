//! The non-fair acquires of this process waiting on each gate (see
//! `passing.rs`): a release takes one off to pass its permits on to, and
//! taking and leaving happen under one lock, so exactly one of the two
//! owns the attempt.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::types::Grant;

/// What a pass tells its waiter: the grant, when the pass was sent (the
/// lease's clock starts there) and how many passes in a row led to it; or
/// `None` if the permits were not free for it (the waiter tries on its own).
pub(crate) type Passed = Option<(Grant, Instant, u32)>;

#[derive(Debug, Default)]
pub(crate) struct Bargers {
    map: Mutex<HashMap<String, VecDeque<Waiter>>>,
}

#[derive(Debug)]
struct Waiter {
    id: String,
    permits: u32,
    ttl_ms: u64,
    tx: oneshot::Sender<Passed>,
}

/// A waiter taken off the queue by a release, which must tell it the
/// outcome ([`Taken::deliver`]).
#[derive(Debug)]
pub(crate) struct Taken {
    pub(crate) id: String,
    pub(crate) permits: u32,
    pub(crate) ttl_ms: u64,
    tx: oneshot::Sender<Passed>,
}

impl Taken {
    /// Tells the waiter; `false` if it is gone (its acquire was dropped),
    /// so a grant made for it must be given back.
    pub(crate) fn deliver(self, passed: Passed) -> bool {
        self.tx.send(passed).is_ok()
    }
}

impl Bargers {
    /// Whether an acquire of this process asking for at most `permits`
    /// waits on `gate` (one asking for more may wait while fewer are free).
    pub(crate) fn any(&self, gate: &str, permits: u32) -> bool {
        self.lock()
            .get(gate)
            .is_some_and(|q| q.iter().any(|w| w.permits <= permits))
    }

    /// Adds a waiter `id` on `gate` asking for `permits` for `ttl_ms`;
    /// a pass to it comes through the receiver.
    pub(crate) fn push(&self, gate: &str, id: &str, permits: u32, ttl_ms: u64) -> oneshot::Receiver<Passed> {
        let (tx, rx) = oneshot::channel();
        self.lock().entry(gate.to_owned()).or_default().push_back(Waiter {
            id: id.to_owned(),
            permits,
            ttl_ms,
            tx,
        });
        rx
    }

    /// Takes the first waiter on `gate` asking for at most `permits`
    /// (waiters whose acquire was dropped are skipped).
    pub(crate) fn take(&self, gate: &str, permits: u32) -> Option<Taken> {
        let mut map = self.lock();
        let queue = map.get_mut(gate)?;
        queue.retain(|w| !w.tx.is_closed());
        let at = queue.iter().position(|w| w.permits <= permits);
        let taken = at.and_then(|i| queue.remove(i));
        if queue.is_empty() {
            map.remove(gate);
        }
        taken.map(|w| Taken {
            id: w.id,
            permits: w.permits,
            ttl_ms: w.ttl_ms,
            tx: w.tx,
        })
    }

    /// Removes `id` from `gate`'s queue; `false` if a release took it.
    pub(crate) fn remove(&self, gate: &str, id: &str) -> bool {
        let mut map = self.lock();
        let Some(queue) = map.get_mut(gate) else {
            return false;
        };
        let found = queue.iter().position(|w| w.id == id).map(|i| queue.remove(i));
        if queue.is_empty() {
            map.remove(gate);
        }
        found.is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, VecDeque<Waiter>>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
