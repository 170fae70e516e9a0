//! Listing the gates and queues a store holds (issue 18): pages of names
//! in byte order from the registry of names (`store/registry/`), each with
//! its headline figures, a name prefix to filter by and a cursor to go on
//! from. Names whose state has gone are dropped from the registry as a
//! listing meets them, and not shown.

use futures_util::future::join_all;

use crate::error::{Error, Result};
use crate::gate::types::{GateName, GateStats};
use crate::jobs::JobQueue;
use crate::jobs::QueueStats;
use crate::jobs::types::Layout;
use crate::name::{MAX_NAME_LEN, Name};
use crate::store::Store;
use crate::store::registry::Kind;

/// The most items one page may ask for.
pub const MAX_PAGE: usize = 1000;

/// One page of a listing.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    /// The items, by name in byte order. Fewer than asked (even none) does
    /// not mean the end: names found gone are left out.
    pub items: Vec<T>,
    /// Where the next page starts (pass it as `after`); `None` at the end.
    pub next: Option<String>,
}

/// A gate in a listing.
#[derive(Debug, Clone, PartialEq)]
pub struct GateItem {
    pub name: String,
    pub stats: GateStats,
}

/// A job queue in a listing (every partition of a sharded queue added up).
#[derive(Debug, Clone, PartialEq)]
pub struct QueueItem {
    pub name: String,
    /// The partition count in force.
    pub partitions: u32,
    pub stats: QueueStats,
}

fn check(prefix: &str, after: Option<&str>, limit: usize) -> Result<()> {
    if limit == 0 || limit > MAX_PAGE {
        return Err(Error::invalid(format!("a page holds 1 to {MAX_PAGE} items")));
    }
    if prefix.len() > MAX_NAME_LEN || after.is_some_and(|a| a.len() > MAX_NAME_LEN) {
        return Err(Error::invalid(format!(
            "a prefix or cursor is at most {MAX_NAME_LEN} bytes"
        )));
    }
    Ok(())
}

/// Whether a gate's stats are those of a gate with no state at all.
fn gate_gone(s: &GateStats) -> bool {
    *s == GateStats::default()
}

impl Store {
    /// Up to `limit` (1 to [`MAX_PAGE`]) gates whose names start with
    /// `prefix`, after `after` (a page's `next`), with their stats. A gate
    /// is listed once a process has entered it or set its capacity
    /// through this library; one whose state has gone (idle past its
    /// expiry) is dropped from the list when a listing meets it.
    pub async fn list_gates(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<GateItem>> {
        check(prefix, after, limit)?;
        let names = self.registered(Kind::Gates, prefix, after, limit).await?;
        let next = (names.len() == limit).then(|| names[limit - 1].clone());
        let stats = join_all(names.iter().map(|n| async move {
            match Name::new(n) {
                Ok(name) => self.stats(&GateName::new(name)).await.map(Some),
                Err(_) => Ok(None),
            }
        }))
        .await;
        let mut items = Vec::with_capacity(names.len());
        for (name, stats) in names.into_iter().zip(stats) {
            match stats? {
                Some(stats) if !gate_gone(&stats) => items.push(GateItem { name, stats }),
                _ => self.unregister(Kind::Gates, &name).await?,
            }
        }
        Ok(Page { items, next })
    }

    /// Up to `limit` (1 to [`MAX_PAGE`]) job queues whose names start with
    /// `prefix`, after `after` (a page's `next`), with their stats. A queue
    /// is listed once a process has pushed to it through this library; one
    /// that holds nothing any more (and is neither paused nor sharded) is
    /// dropped from the list when a listing meets it.
    pub async fn list_queues(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<QueueItem>> {
        check(prefix, after, limit)?;
        let names = self.registered(Kind::Queues, prefix, after, limit).await?;
        let next = (names.len() == limit).then(|| names[limit - 1].clone());
        let found = join_all(names.iter().map(|n| self.queue_item(n))).await;
        let mut items = Vec::with_capacity(names.len());
        for (name, item) in names.iter().zip(found) {
            match item? {
                Some(item) => items.push(item),
                None => self.unregister(Kind::Queues, name).await?,
            }
        }
        Ok(Page { items, next })
    }

    /// Queue `name` as listed, or `None` if it has gone.
    async fn queue_item(&self, name: &str) -> Result<Option<QueueItem>> {
        let Ok(q) = Name::new(name) else {
            return Ok(None);
        };
        let read = Layout {
            want: 1,
            expect: None,
            store: false,
        };
        let (partitions, stored) = self.job_layout(&q, &read).await?;
        if !stored && !self.job_exists(&q).await? {
            return Ok(None);
        }
        let stats = JobQueue::partitioned(self, name, partitions as usize)?
            .stats()
            .await?;
        Ok(Some(QueueItem {
            name: name.to_owned(),
            partitions,
            stats,
        }))
    }
}
