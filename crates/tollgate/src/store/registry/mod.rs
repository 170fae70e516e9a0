//! The registry of names: which gates and queues exist, for listing them
//! (issue 18) without a scan of the keyspace.
//!
//! A name is added by the facade the first time this process uses it
//! (`Store::register`), not by the primitive's script: on a cluster the
//! registry lives in a slot of its own, which a script on the gate's slot
//! cannot touch. A name whose state has gone (an idle gate expired, a
//! queue emptied and dropped) stays until a listing finds it gone and
//! removes it. The memory store keeps a sorted set per kind here; Redis, a
//! sorted set per kind under one hash tag (`redis.rs`).

pub(crate) mod redis;

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Names this process registered lately, so that registering costs one
/// store call per new name per process, not one per operation.
const REMEMBERED: usize = 10_000;
/// How long a registration is trusted before the next use adds the name
/// again: a listing may drop a name (seen gone) just as another process
/// brings it back, and that process must not trust its memory forever.
const REMEMBER_FOR: Duration = Duration::from_secs(60);

/// What kind of name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Gates,
    Queues,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Gates => "gates",
            Kind::Queues => "queues",
        }
    }
}

/// What a store's handles share: the recent registrations, and on the
/// memory store the registry itself.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    recent: Mutex<HashMap<(Kind, String), Instant>>,
    gates: Mutex<BTreeSet<String>>,
    queues: Mutex<BTreeSet<String>>,
}

impl Registry {
    /// Whether `name` must be (re)registered now; remembers it as done.
    /// The caller forgets it again if registering fails.
    pub(crate) fn due(&self, kind: Kind, name: &str) -> bool {
        let mut recent = self
            .recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        let key = (kind, name.to_owned());
        if let Some(at) = recent.get(&key)
            && now.duration_since(*at) < REMEMBER_FOR
        {
            return false;
        }
        if recent.len() >= REMEMBERED {
            // Bounded: start again (each name costs one more call).
            recent.clear();
            recent.shrink_to_fit();
        }
        recent.insert(key, now);
        true
    }

    pub(crate) fn forget(&self, kind: Kind, name: &str) {
        let mut recent = self
            .recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        recent.remove(&(kind, name.to_owned()));
    }

    fn set(&self, kind: Kind) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        let set = match kind {
            Kind::Gates => &self.gates,
            Kind::Queues => &self.queues,
        };
        set.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The memory store's registry: adds `name`.
    pub(crate) fn add(&self, kind: Kind, name: &str) {
        self.set(kind).insert(name.to_owned());
    }

    /// The memory store's registry: removes `name`.
    pub(crate) fn remove(&self, kind: Kind, name: &str) {
        self.set(kind).remove(name);
    }

    /// The memory store's registry: up to `limit` names starting with
    /// `prefix`, in byte order, after `after` if given.
    pub(crate) fn range(&self, kind: Kind, prefix: &str, after: Option<&str>, limit: usize) -> Vec<String> {
        let set = self.set(kind);
        let start = match after {
            Some(a) if a >= prefix => Bound::Excluded(a.to_owned()),
            _ => Bound::Included(prefix.to_owned()),
        };
        set.range((start, Bound::Unbounded))
            .take_while(|n| n.starts_with(prefix))
            .take(limit)
            .cloned()
            .collect()
    }
}
