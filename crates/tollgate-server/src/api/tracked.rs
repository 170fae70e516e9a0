//! The names with their own series in /metrics (gates, queues, schedules
//! this server has served, configured or fired), bounded so that made-up
//! names cannot grow the series without limit.

/// At most this many gates (and as many queues, and schedules) get their
/// own series in /metrics.
const TRACKED: usize = 1000;

/// The names (of gates, queues or schedules) with their own series in
/// /metrics, at most [`TRACKED`] of each kind, so that a caller
/// cannot blow up the /metrics series count with made-up names.
pub(crate) type Tracked = std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>;

/// The names tracked so far.
pub(crate) fn tracked(set: &Tracked) -> Vec<String> {
    set.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .cloned()
        .collect()
}

/// How many names are tracked.
pub(crate) fn tracked_len(set: &Tracked) -> usize {
    set.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .len()
}

/// Remembers `name` for the per-name series, up to TRACKED names each;
/// whether it is tracked.
pub(crate) fn track(set: &Tracked, name: &str) -> bool {
    let mut names = set.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if names.len() < TRACKED && !names.contains(name) {
        names.insert(name.to_owned());
    }
    names.contains(name)
}

/// Frees `name`'s place among the per-name series: it is gone from the
/// store (a deleted schedule, a gate or queue the store forgot), so that
/// a new name can have its series. It is tracked again if it comes back.
pub(crate) fn untrack(set: &Tracked, name: &str) {
    set.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .remove(name);
}
