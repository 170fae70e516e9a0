//! The registry of names: which gates and queues exist, for listing them
//! (issue 18) without a scan of the keyspace.
//!
//! A name is added by the facade the first time this process uses it
//! (`Store::register`), not by the primitive's script: on a cluster the
//! registry lives in a slot of its own, which a script on the gate's slot
//! cannot touch. A name whose state has gone (an idle gate expired, a
//! queue emptied and dropped) stays until a listing finds it gone and
//! removes it. Redis keeps a sorted set per kind under one hash tag
//! (`redis.rs`). The memory store keeps none: it lists the names it holds
//! state for (`Shelf::names`), which its idle sweep already keeps bounded.

pub(crate) mod redis;

use std::collections::HashMap;
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

/// What a store's handles share: the recent registrations.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    recent: Mutex<Recent>,
}

/// One map per kind, keyed by the name alone, so that a check looks up a
/// borrowed name: a name registered lately (every operation but the
/// first) costs no allocation.
#[derive(Debug, Default)]
struct Recent {
    gates: HashMap<String, Instant>,
    queues: HashMap<String, Instant>,
}

impl Recent {
    fn of(&mut self, kind: Kind) -> &mut HashMap<String, Instant> {
        match kind {
            Kind::Gates => &mut self.gates,
            Kind::Queues => &mut self.queues,
        }
    }
}

/// Whether `name` is a partition of a sharded queue
/// (`<base>:p<i>of<K>`): not listed, its sharded queue is.
pub(crate) fn is_partition(name: &str) -> bool {
    let Some((_, tail)) = name.rsplit_once(":p") else {
        return false;
    };
    let Some((i, k)) = tail.split_once("of") else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    digits(i) && digits(k)
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
        if let Some(at) = recent.of(kind).get_mut(name) {
            if now.duration_since(*at) < REMEMBER_FOR {
                return false;
            }
            *at = now;
            return true;
        }
        if recent.gates.len() + recent.queues.len() >= REMEMBERED {
            // Bounded: start again (each name costs one more call).
            *recent = Recent::default();
        }
        recent.of(kind).insert(name.to_owned(), now);
        true
    }

    pub(crate) fn forget(&self, kind: Kind, name: &str) {
        let mut recent = self
            .recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        recent.of(kind).remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_names_are_told_apart() {
        assert!(is_partition("orders:p0of4"));
        assert!(is_partition("a:b:p12of16"));
        for name in [
            "orders",
            "orders:p",
            "orders:pxof4",
            "orders:p1of",
            "orders:p1of4x",
            "p0of4",
        ] {
            assert!(!is_partition(name), "{name}");
        }
    }

    #[test]
    fn a_registration_is_remembered_then_due_again_when_forgotten() {
        let r = Registry::default();
        assert!(r.due(Kind::Gates, "g"));
        assert!(!r.due(Kind::Gates, "g"));
        assert!(r.due(Kind::Queues, "g"));
        r.forget(Kind::Gates, "g");
        assert!(r.due(Kind::Gates, "g"));
    }
}
