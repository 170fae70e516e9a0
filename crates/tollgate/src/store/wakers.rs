//! Wake-ups for waiters in this process (both stores): the memory store
//! calls them directly, the Redis store's listener on a notification.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

/// Wake-ups for waiters in this process, keyed by ticket id. A hand-off
/// carries the fence of the lease it grants, so the waiter can start work
/// without another round trip. Several watchers of one ticket (a waiting
/// `acquire` and a long-poll, say) each get the wake-up. `Notify` keeps one
/// permit, so a wake-up that arrives before the watcher sleeps is not lost.
#[derive(Debug, Default)]
pub(crate) struct Wakers {
    map: Mutex<HashMap<String, Vec<Arc<Slot>>>>,
}

#[derive(Debug, Default)]
struct Slot {
    notify: Notify,
    /// Fence of a lease handed to this ticket, if a hand-off said so.
    handed: Mutex<Option<u64>>,
}

impl Wakers {
    pub(crate) fn register(self: &Arc<Self>, id: &str) -> Watch {
        let slot = Arc::new(Slot::default());
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(id.to_owned())
            .or_default()
            .push(slot.clone());
        Watch {
            wakers: self.clone(),
            id: id.to_owned(),
            slot,
        }
    }

    /// Tells the watchers of `id` that it was handed the lease with `fence`.
    pub(crate) fn hand_off(&self, id: &str, fence: u64) {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        for slot in map.get(id).into_iter().flatten() {
            *slot.handed.lock().unwrap_or_else(PoisonError::into_inner) = Some(fence);
            slot.notify.notify_one();
        }
    }

    /// Wakes up to `n` watchers of `id` (a job queue's sleeping consumers).
    pub(crate) fn wake(&self, id: &str, n: usize) {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        for slot in map.get(id).into_iter().flatten().take(n) {
            slot.notify.notify_one();
        }
    }

    /// Wakes every watcher to look for itself (hand-offs may have been lost).
    pub(crate) fn wake_all(&self) {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        for slot in map.values().flatten() {
            slot.notify.notify_one();
        }
    }
}

/// A registered interest in one ticket; unregisters on drop.
#[derive(Debug)]
pub(crate) struct Watch {
    wakers: Arc<Wakers>,
    id: String,
    slot: Arc<Slot>,
}

impl Watch {
    /// Waits for a wake-up or `timeout`, whichever is first. Returns the
    /// fence if the wake-up was a hand-off.
    pub(crate) async fn wait(&self, timeout: Duration) -> Option<u64> {
        let _ = tokio::time::timeout(timeout, self.slot.notify.notified()).await;
        self.slot
            .handed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut map = self.wakers.map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slots) = map.get_mut(&self.id) {
            slots.retain(|s| !Arc::ptr_eq(s, &self.slot));
            if slots.is_empty() {
                map.remove(&self.id);
            }
        }
    }
}
