//! Non-fair acquires waiting in this process, per gate, so that a release
//! on a non-fair handle can pass its permits straight on to one of them
//! (`Store::pass`): one script per hand-over, instead of a release, a
//! wake-up and a race of fresh attempts that all but one lose.
//!
//! A waiter joins when the gate is busy (or others of this process already
//! wait) and keeps watching for freed permits meanwhile; whichever comes
//! first wins: a pass (the releaser took it off the queue and tells it the
//! outcome over a oneshot channel), or a wake-up, after which it leaves the
//! queue and tries on its own. Taking a waiter off the queue and leaving it
//! happen under one lock, so exactly one of the two owns the attempt.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::store::Store;

use super::types::{GateName, Grant};

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

/// A place in a gate's queue of this process's waiting acquires. Dropped
/// in the queue, it leaves it; dropped with a grant passed to it but not
/// taken (its acquire was given up), it gives the grant back.
#[derive(Debug)]
pub(crate) struct Place {
    store: Store,
    gate: GateName,
    id: String,
    rx: oneshot::Receiver<Passed>,
}

impl Bargers {
    /// Whether an acquire of this process asking for at most `permits`
    /// waits on `gate` (one asking for more may wait while fewer are free).
    pub(crate) fn any(&self, gate: &str, permits: u32) -> bool {
        self.lock()
            .get(gate)
            .is_some_and(|q| q.iter().any(|w| w.permits <= permits))
    }

    /// Joins `gate`'s queue on `store` as `id`, asking for `permits` for
    /// `ttl_ms`.
    pub(crate) fn join(store: &Store, gate: &GateName, id: &str, permits: u32, ttl_ms: u64) -> Place {
        let (tx, rx) = oneshot::channel();
        store
            .bargers()
            .lock()
            .entry(gate.as_str().to_owned())
            .or_default()
            .push_back(Waiter {
                id: id.to_owned(),
                permits,
                ttl_ms,
                tx,
            });
        Place {
            store: store.clone(),
            gate: gate.clone(),
            id: id.to_owned(),
            rx,
        }
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
    fn remove(&self, gate: &str, id: &str) -> bool {
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

impl Place {
    /// Waits for a release to pass its permits on; `None` if one took this
    /// place but could not (the permits were not free for it).
    pub(crate) async fn passed(&mut self) -> Passed {
        (&mut self.rx).await.ok().flatten()
    }

    /// Leaves the queue to try on its own. If a release took this place
    /// meanwhile, waits for its outcome instead (a grant, or `None`).
    pub(crate) async fn leave(mut self) -> Passed {
        if self.store.bargers().remove(self.gate.as_str(), &self.id) {
            return None;
        }
        self.passed().await
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.store.bargers().remove(self.gate.as_str(), &self.id);
        // Closed first, so a release still on its way learns that nobody
        // waits and gives its grant back itself; one that came before is
        // given back here.
        self.rx.close();
        if let Ok(Some(_)) = self.rx.try_recv()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            let (store, gate, id) = (
                self.store.clone(),
                self.gate.clone(),
                std::mem::take(&mut self.id),
            );
            rt.spawn(async move {
                let _ = store.leave(&gate, &id).await;
            });
        }
    }
}
