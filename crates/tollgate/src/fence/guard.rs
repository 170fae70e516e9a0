//! [`FenceGuard`]: the highest fence seen per resource key, in this
//! process's memory, bounded.
//!
//! Why a turn per key and not only a compare-and-raise: a request admitted
//! with fence 5 may still be writing when one with fence 6 is admitted;
//! 5's write then lands after 6's. Holding the key's turn from the check
//! until the work is done makes check and write one step for every fenced
//! request of this process, so a stale write can never land after a newer
//! holder's. Across processes the check has to live where the data lives
//! (docs/FENCING.md: Postgres, the Redis script).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::OwnedMutexGuard;

/// How many keys a guard remembers by default; past it, the least recently
/// used tenth is forgotten (see [`FenceGuard::with_max_keys`]).
pub const DEFAULT_MAX_KEYS: usize = 100_000;

/// A fence below the highest seen for its key: its holder's lease ended
/// and someone newer has been admitted since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaleFence {
    /// The fence refused.
    pub fence: u64,
    /// The highest fence seen for the key.
    pub highest: u64,
}

impl std::fmt::Display for StaleFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "fence {} is below {}, the highest seen for this resource: a newer holder has the lock",
            self.fence, self.highest
        )
    }
}

impl std::error::Error for StaleFence {}

/// The highest fencing token seen per resource key, in this process.
///
/// A fence at least the highest seen is admitted (the same holder may come
/// back, and a newer one raises the mark); a lower one is refused. The
/// record is in memory: it starts empty when the process starts, so a
/// stale holder's first request after a restart of this service is
/// admitted unless the resource itself keeps the mark (docs/FENCING.md).
/// At most `max_keys` keys are kept; past that the least recently used
/// tenth is forgotten, and a forgotten key admits any fence again.
#[derive(Debug, Clone)]
pub struct FenceGuard {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    keys: Mutex<HashMap<String, Arc<Key>>>,
    max_keys: usize,
    /// Orders uses, for forgetting the least recently used keys.
    ticks: AtomicU64,
}

#[derive(Debug)]
struct Key {
    /// The highest fence admitted, behind the key's turn.
    turn: Arc<tokio::sync::Mutex<u64>>,
    used: AtomicU64,
}

/// A request's turn at its key, admitted: other fenced requests of the
/// same key wait until it is dropped.
#[derive(Debug)]
pub struct FenceTurn {
    _turn: OwnedMutexGuard<u64>,
}

impl Default for FenceGuard {
    fn default() -> Self {
        FenceGuard::new()
    }
}

impl FenceGuard {
    /// A guard keeping up to [`DEFAULT_MAX_KEYS`] keys.
    pub fn new() -> FenceGuard {
        FenceGuard::with_max_keys(DEFAULT_MAX_KEYS)
    }

    /// A guard keeping up to `max_keys` keys (at least 1).
    pub fn with_max_keys(max_keys: usize) -> FenceGuard {
        FenceGuard {
            inner: Arc::new(Inner {
                keys: Mutex::new(HashMap::new()),
                max_keys: max_keys.max(1),
                ticks: AtomicU64::new(0),
            }),
        }
    }

    /// Waits for `key`'s turn, then admits `fence` if it is at least the
    /// highest seen (raising the mark to it) and keeps the turn until the
    /// returned [`FenceTurn`] is dropped; refuses a lower one.
    pub async fn admit(&self, key: &str, fence: u64) -> Result<FenceTurn, StaleFence> {
        let turn = self.key(key).lock_owned().await;
        let mut turn = turn;
        if fence < *turn {
            return Err(StaleFence {
                fence,
                highest: *turn,
            });
        }
        *turn = fence;
        Ok(FenceTurn { _turn: turn })
    }

    /// The highest fence admitted for `key`, if it is remembered (and not
    /// being decided by a request holding its turn).
    pub fn highest(&self, key: &str) -> Option<u64> {
        let keys = self.inner.keys.lock().unwrap_or_else(PoisonError::into_inner);
        keys.get(key)?.turn.try_lock().ok().map(|t| *t)
    }

    /// Keys remembered now.
    pub fn len(&self) -> usize {
        self.inner
            .keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// No key is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn key(&self, key: &str) -> Arc<tokio::sync::Mutex<u64>> {
        let tick = self.inner.ticks.fetch_add(1, Ordering::Relaxed);
        let mut keys = self.inner.keys.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(k) = keys.get(key) {
            k.used.store(tick, Ordering::Relaxed);
            return k.turn.clone();
        }
        if keys.len() >= self.inner.max_keys {
            forget_least_used(&mut keys, self.inner.max_keys);
        }
        let k = Arc::new(Key {
            turn: Arc::new(tokio::sync::Mutex::new(0)),
            used: AtomicU64::new(tick),
        });
        let turn = k.turn.clone();
        keys.insert(key.to_owned(), k);
        turn
    }
}

/// Forgets the least recently used tenth of the keys (at least one),
/// never a key whose turn someone holds or waits for: O(n log n) once per
/// n/10 new keys.
fn forget_least_used(keys: &mut HashMap<String, Arc<Key>>, max_keys: usize) {
    let mut by_use: Vec<(u64, String)> = keys
        .iter()
        .filter(|(_, k)| Arc::strong_count(&k.turn) == 1)
        .map(|(name, k)| (k.used.load(Ordering::Relaxed), name.clone()))
        .collect();
    by_use.sort_unstable();
    for (_, name) in by_use.into_iter().take((max_keys / 10).max(1)) {
        keys.remove(&name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_lower_fence_is_refused_an_equal_or_higher_one_admitted() {
        let g = FenceGuard::new();
        drop(g.admit("a", 5).await.expect("first"));
        drop(g.admit("a", 5).await.expect("the same holder again"));
        assert_eq!(
            g.admit("a", 4).await.expect_err("stale"),
            StaleFence { fence: 4, highest: 5 }
        );
        drop(g.admit("b", 1).await.expect("another key"));
        drop(g.admit("a", 9).await.expect("newer"));
        assert_eq!(g.highest("a"), Some(9));
        assert!(g.admit("a", 5).await.is_err());
    }

    #[tokio::test]
    async fn a_newer_fence_waits_for_the_older_ones_turn() {
        let g = FenceGuard::new();
        let old = g.admit("k", 1).await.expect("old");
        let newer = {
            let g = g.clone();
            tokio::spawn(async move { g.admit("k", 2).await.map(drop) })
        };
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!newer.is_finished(), "admitted while the older request still ran");
        drop(old);
        newer.await.expect("task").expect("admitted after");
        assert!(g.admit("k", 1).await.is_err());
    }

    #[tokio::test]
    async fn keys_are_bounded_least_recently_used_first() {
        let g = FenceGuard::with_max_keys(20);
        for i in 0..100u64 {
            drop(g.admit(&format!("k{i}"), i + 1).await.expect("admit"));
            // k0 stays in use.
            drop(g.admit("k0", 1).await.expect("k0"));
        }
        assert!(g.len() <= 20, "{} keys", g.len());
        assert_eq!(g.highest("k0"), Some(1));
        assert_eq!(g.highest("k1"), None, "the least used key is forgotten");
    }
}
