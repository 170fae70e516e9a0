//! A queue's schedules and the index of names as the embedded store keeps
//! them (schedule.lua's S, Z and H; index.lua): data only, so that the
//! job queue's state can hold its schedules without importing the
//! schedules' operations (`memory.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use super::types::{HISTORY, Next, RawSchedule};

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct Record {
    pub(super) rev: u64,
    pub(super) next: Next,
    pub(super) from: u64,
    pub(super) paused: bool,
    pub(super) timing: String,
    pub(super) definition: String,
    pub(super) payload: Vec<u8>,
}

/// The schedules of one queue (schedule.lua's S, Z and H).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Schedules {
    pub(super) records: HashMap<String, Record>,
    /// (next as stored, name) of every running schedule with a next tick.
    pub(super) by_next: BTreeSet<(i64, String)>,
    pub(super) history: HashMap<String, VecDeque<String>>,
}

impl Schedules {
    pub(crate) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub(super) fn write(&mut self, name: &str, r: Record) {
        if let Some(old) = self.records.get(name) {
            self.by_next.remove(&(old.next.encode(), name.to_owned()));
        }
        if !r.paused && r.next != Next::Never {
            self.by_next.insert((r.next.encode(), name.to_owned()));
        }
        self.records.insert(name.to_owned(), r);
    }

    pub(super) fn remember(&mut self, name: &str, entries: impl IntoIterator<Item = String>) {
        let list = self.history.entry(name.to_owned()).or_default();
        list.extend(entries);
        while list.len() > HISTORY {
            list.pop_front();
        }
    }

    pub(super) fn raw(&self, name: &str, r: &Record, with_history: bool) -> RawSchedule {
        RawSchedule {
            name: name.to_owned(),
            rev: r.rev,
            next: r.next,
            from_ms: r.from,
            paused: r.paused,
            timing: r.timing.clone(),
            definition: r.definition.clone(),
            payload: r.payload.clone(),
            history: match self.history.get(name) {
                Some(h) if with_history => h.iter().cloned().collect(),
                _ => Vec::new(),
            },
        }
    }
}

/// Which queue each schedule lives with, and the queues that have
/// schedules, with how many names point to each (index.lua): a queue is
/// listed while one does.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Index {
    /// The log record that last changed it (see `GateState::lsn`).
    pub(crate) lsn: u64,
    pub(super) names: HashMap<String, String>,
    pub(super) queues: BTreeMap<String, usize>,
}

impl Index {
    /// One name fewer points to `queue`: the last unlists it.
    pub(super) fn unlisted(&mut self, queue: &str) {
        if let Some(n) = self.queues.get_mut(queue) {
            *n -= 1;
            if *n == 0 {
                self.queues.remove(queue);
            }
        }
    }
}
