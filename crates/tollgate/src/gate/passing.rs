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

use tokio::sync::oneshot;

use crate::store::Store;

use super::bargers::Passed;
use super::types::GateName;

/// A place in a gate's queue of this process's waiting acquires. Dropped
/// in the queue, it leaves it; dropped with a grant passed to it but not
/// taken (its acquire was given up), it gives the grant back.
#[derive(Debug)]
pub(crate) struct PassSlot {
    store: Store,
    gate: GateName,
    id: String,
    rx: oneshot::Receiver<Passed>,
}

impl PassSlot {
    /// Joins `gate`'s queue on `store` as `id`, asking for `permits` for
    /// `ttl_ms`.
    pub(crate) fn join(store: &Store, gate: &GateName, id: &str, permits: u32, ttl_ms: u64) -> PassSlot {
        let rx = store.bargers().push(gate.as_str(), id, permits, ttl_ms);
        PassSlot {
            store: store.clone(),
            gate: gate.clone(),
            id: id.to_owned(),
            rx,
        }
    }

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

impl Drop for PassSlot {
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
