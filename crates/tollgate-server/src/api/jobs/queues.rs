//! This server's job queues: the partition counts configured
//! (`[queues.NAME]`) and a handle per queue used so far, bounded and
//! dropped when idle.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use serde::Deserialize;
use tollgate::{JobQueue, Store};

/// A queue's settings in the config file: `[queues.NAME]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct QueueSettings {
    /// Spread the queue over this many partitions (1 to 256): each is a
    /// queue of its own under its own hash tag, so on Redis Cluster the
    /// queue's load spreads over the masters. Every server and worker of
    /// the queue must use the same number. Default 1.
    #[serde(default = "one")]
    pub(crate) partitions: usize,
    /// The queue's limits applied at claim (docs/JOBS.md, "Fair queues"),
    /// set in the store when the server starts if any is given: at most
    /// this many of its jobs running at once; at most this many claims
    /// per period ("50/s"); the same per group.
    pub(crate) concurrency: Option<u32>,
    pub(crate) rate: Option<String>,
    pub(crate) group_concurrency: Option<u32>,
    pub(crate) group_rate: Option<String>,
}

impl QueueSettings {
    fn limits(&self) -> super::settings::SettingsBody {
        super::settings::SettingsBody {
            concurrency: self.concurrency,
            rate: self.rate.clone(),
            group_concurrency: self.group_concurrency,
            group_rate: self.group_rate.clone(),
        }
    }
}

fn one() -> usize {
    1
}

/// How often a configured queue's handle asks the store whether the
/// partition count is still the one in force (one round trip, only while
/// the queue is used).
const CONFIGURED_RECHECK: Duration = Duration::from_secs(1);

/// Queues kept as handles (each checks the partition count with the store
/// on first use and every 10 s, a configured one every second); past this
/// many the cache starts again.
const HANDLES_KEPT: usize = 10_000;

/// The job queues of this server: the partition counts configured, and a
/// handle per queue used so far.
#[derive(Debug, Default)]
pub(crate) struct Queues {
    partitions: HashMap<String, usize>,
    /// The limits configured, per queue (only queues that name any).
    limits: HashMap<String, tollgate::QueueLimits>,
    /// Each handle and when it was last used: unused ones are dropped
    /// ([`Queues::forget_idle`]), so a flood of made-up queue names leaves
    /// nothing behind.
    handles: Mutex<HashMap<String, (JobQueue, std::time::Instant)>>,
}

impl Queues {
    /// The configured queues, checked: names and partition counts.
    pub(crate) fn new(settings: &HashMap<String, QueueSettings>) -> Result<Queues, String> {
        let mut partitions = HashMap::new();
        let mut limits = HashMap::new();
        for (name, s) in settings {
            tollgate::Name::new(name).map_err(|e| format!("[queues.{name}]: {e}"))?;
            JobQueue::check_partitions(s.partitions)
                .map_err(|e| format!("[queues.{name}] partitions = {}: {e}", s.partitions))?;
            let l = s
                .limits()
                .limits()
                .map_err(|e| format!("[queues.{name}]: {}", e.item()["message"].as_str().unwrap_or("")))?;
            if l != tollgate::QueueLimits::default() {
                limits.insert(name.clone(), l);
            }
            partitions.insert(name.clone(), s.partitions);
        }
        Ok(Queues {
            partitions,
            limits,
            handles: Mutex::default(),
        })
    }

    /// The queues named in the config with limits, and those limits.
    pub(crate) fn configured_limits(&self) -> impl Iterator<Item = (&str, &tollgate::QueueLimits)> {
        self.limits.iter().map(|(n, l)| (n.as_str(), l))
    }

    /// The queues named in the config, with their partition counts.
    pub(crate) fn configured(&self) -> impl Iterator<Item = (&str, usize)> {
        self.partitions.iter().map(|(n, p)| (n.as_str(), *p))
    }

    /// The queue `name`: its configured partitions, else one (the plain
    /// queue).
    pub(crate) fn open(&self, store: &Store, name: &str) -> tollgate::Result<JobQueue> {
        let mut handles = self
            .handles
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((q, used)) = handles.get_mut(name) {
            *used = std::time::Instant::now();
            return Ok(q.clone());
        }
        let q = match self.partitions.get(name) {
            // The store keeps the count; if it loses it (a restart without
            // persistence, FLUSHALL, a failover to an empty replica), the
            // next re-check stores it again: make that within a second.
            Some(&k) => JobQueue::partitioned(store, name, k)?.recheck_every(CONFIGURED_RECHECK)?,
            None => JobQueue::partitioned(store, name, 1)?,
        };
        if handles.len() >= HANDLES_KEPT {
            // Bounded: start again (each handle checks with the store once).
            handles.clear();
            handles.shrink_to_fit();
        }
        handles.insert(name.to_owned(), (q.clone(), std::time::Instant::now()));
        Ok(q)
    }

    /// Names of queues this server knows within two edits of `name`,
    /// closest first: where a misspelt name finds what was meant without
    /// a scan of the store. The configured names, and the handles' while
    /// there are few of them: an unknown name must not cost a pass over
    /// thousands (a flood of made-up names would pay it on every request).
    pub(super) fn close_to(&self, name: &str) -> Vec<String> {
        let handles = self
            .handles
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let used = (handles.len() <= SUGGEST_FROM_HANDLES).then(|| handles.keys());
        let mut close: Vec<(usize, String)> = self
            .partitions
            .keys()
            .chain(used.into_iter().flatten())
            .filter(|n| n.len().abs_diff(name.len()) <= 2 && n.as_str() != name)
            .map(|n| (strsim::levenshtein(n, name), n.clone()))
            .filter(|(d, _)| *d <= 2)
            .collect();
        close.sort();
        close.dedup();
        close.into_iter().map(|(_, n)| n).collect()
    }

    /// Drops the handles of queues not used for `idle` (a configured
    /// queue's too: the next use opens it again, with its count), and
    /// gives the map's spare room back.
    pub(crate) fn forget_idle(&self, idle: Duration) {
        let mut handles = self
            .handles
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        handles.retain(|_, (_, used)| used.elapsed() < idle);
        if handles.capacity() > 64 && handles.len() * 4 < handles.capacity() {
            let len = handles.len();
            handles.shrink_to(len * 2);
        }
    }
}

/// The handles' names are looked at for a "did you mean" up to this many.
const SUGGEST_FROM_HANDLES: usize = 256;
