//! One observer per election on this server, shared by every event stream
//! that follows it: a task reading the election every
//! [`tollgate::OBSERVE_EVERY`] while anyone listens, broadcasting each
//! change. Streams cost no store reads of their own, however many.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio::sync::broadcast;
use tollgate::{Election, Leader};

/// Changes held for a slow stream before it lags.
const BUFFER: usize = 64;

/// How long an observer task waits for a change before it looks whether
/// anyone still listens.
const LOOK: Duration = Duration::from_secs(1);

/// One change, as streams send it: its event id and its data.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub(crate) id: u64,
    pub(crate) data: Arc<Value>,
}

/// The elections followed on this server now.
#[derive(Debug, Default)]
pub(crate) struct ElectionFeeds {
    feeds: Mutex<HashMap<String, broadcast::Sender<Change>>>,
}

/// The event id of a state: 2 × the leader's fence, or for a vacancy
/// one more than 2 × `fence`, the gate's last (the last leader's), so
/// ids only grow while the store keeps its fences.
pub(crate) fn id_of(leader: Option<&Leader>, fence: u64) -> u64 {
    match leader {
        Some(l) => l.fence.saturating_mul(2),
        None => fence.saturating_mul(2) + 1,
    }
}

/// The JSON of a leader (null for none).
pub(crate) fn leader_json(leader: Option<&Leader>) -> Value {
    match leader {
        None => Value::Null,
        Some(l) => json!({
            "label": l.label,
            "fence": l.fence,
            "since_ms": l.since_ms,
            "ttl_ms": l.ttl.as_millis() as u64,
            "handle": l.handle,
        }),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl ElectionFeeds {
    /// The changes of `election` from now on; starts its observer if
    /// nobody on this server follows it yet.
    pub(crate) fn subscribe(self: &Arc<Self>, election: &Election) -> broadcast::Receiver<Change> {
        let name = election.gate().name().as_str().to_owned();
        let mut feeds = self.feeds.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = feeds.get(&name) {
            return tx.subscribe();
        }
        let (tx, rx) = broadcast::channel(BUFFER);
        feeds.insert(name.clone(), tx.clone());
        drop(feeds);
        tokio::spawn(observe(self.clone(), name, election.clone(), tx));
        rx
    }

    /// Ends `name`'s feed (`tx`) if nobody listens any more; true if it
    /// did.
    fn end_if_unheard(&self, name: &str, tx: &broadcast::Sender<Change>) -> bool {
        let mut feeds = self.feeds.lock().unwrap_or_else(PoisonError::into_inner);
        let unheard = tx.receiver_count() == 0;
        if unheard && feeds.get(name).is_some_and(|t| t.same_channel(tx)) {
            feeds.remove(name);
        }
        unheard
    }
}

/// Follows one election while anyone listens: each change broadcast.
async fn observe(feeds: Arc<ElectionFeeds>, name: String, election: Election, tx: broadcast::Sender<Change>) {
    // However the task ends (a panic too), its entry goes with it: a
    // later stream then starts a new observer rather than wait on a
    // sender nobody feeds.
    struct Entry(Arc<ElectionFeeds>, String, broadcast::Sender<Change>);
    impl Drop for Entry {
        fn drop(&mut self) {
            let mut feeds = self.0.feeds.lock().unwrap_or_else(PoisonError::into_inner);
            // Only this task's own: a new one may have taken the name.
            if feeds.get(&self.1).is_some_and(|tx| tx.same_channel(&self.2)) {
                feeds.remove(&self.1);
            }
        }
    }
    let _entry = Entry(feeds.clone(), name.clone(), tx.clone());
    let mut observer = election.observe();
    loop {
        match tokio::time::timeout(LOOK, observer.next()).await {
            Ok(Ok(leader)) => {
                // A vacancy's id follows the gate's last fence, from the
                // same consistent read.
                let id = id_of(leader.as_ref(), observer.last_fence());
                let data = json!({"leader": leader_json(leader.as_ref()), "id": id, "at_ms": now_ms()});
                let _ = tx.send(Change {
                    id,
                    data: Arc::new(data),
                });
            }
            Ok(Err(e)) => {
                tracing::warn!(election = %name, error = %e, "cannot read the election; trying again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(_) => {}
        }
        if tx.receiver_count() == 0 && feeds.end_if_unheard(&name, &tx) {
            return;
        }
    }
}
