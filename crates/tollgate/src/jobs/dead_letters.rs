//! A queue's dead letters and kept completed jobs: listed across its
//! partitions (merged oldest first, bounded in bytes), replayed or purged.

use futures_util::future::join_all;

use crate::error::Result;
use crate::jobs::job::{CompletedJob, DeadJob};
use crate::jobs::partition::Partition;

use super::queue::JobQueue;

impl JobQueue {
    /// Up to `limit` (1 to 10,000) dead jobs, oldest first, and fewer once
    /// their bytes (ids, errors, payloads) reach
    /// [`JOB_LISTING_BYTES`](crate::JOB_LISTING_BYTES) (the first always
    /// comes), so a listing's memory stays bounded: page through the rest
    /// with [`JobQueue::list`] and read one by
    /// [`JobQueue::get_with_payload`]. A partitioned queue merges its
    /// partitions' listings.
    pub async fn dead(&self, limit: usize) -> Result<Vec<DeadJob>> {
        if let Some(only) = self.plain() {
            return only.dead(limit).await;
        }
        let size = |d: &DeadJob| d.id.len() + d.payload.len() + d.last_error.as_ref().map_or(0, String::len);
        self.merged(limit, |p| p.dead(limit), |d| d.died, size).await
    }

    /// Kept completed jobs, most recent first: up to `limit` (1 to
    /// 10,000), and fewer once their bytes reach
    /// [`JOB_LISTING_BYTES`](crate::JOB_LISTING_BYTES) (the first always
    /// comes): page through the rest with [`JobQueue::list`] and read one
    /// by [`JobQueue::get_with_payload`]. A partitioned queue merges its
    /// partitions' listings.
    pub async fn completed(&self, limit: usize) -> Result<Vec<CompletedJob>> {
        if let Some(only) = self.plain() {
            return only.completed(limit).await;
        }
        self.merged(
            limit,
            |p| p.completed(limit),
            |d| std::cmp::Reverse(d.acked),
            |d| d.id.len() + d.payload.len(),
        )
        .await
    }

    /// A listing of all partitions: each partition's (`list`, asked of all
    /// at once), put in the order of `key` and cut to `limit` and to the
    /// listing's bytes (`size`: a row's payload bytes) as one partition's
    /// is.
    async fn merged<'a, T, K, Fut>(
        &'a self,
        limit: usize,
        list: impl Fn(&'a Partition) -> Fut,
        key: impl FnMut(&T) -> K,
        size: impl Fn(&T) -> usize,
    ) -> Result<Vec<T>>
    where
        K: Ord,
        Fut: std::future::Future<Output = Result<Vec<T>>>,
    {
        self.checked(false).await?;
        let mut all = Vec::new();
        for part in join_all(self.parts.iter().map(list)).await {
            all.extend(part?);
        }
        all.sort_by_key(key);
        all.truncate(limit.clamp(1, 10_000));
        Ok(crate::jobs::types::within_listing_bytes(all, size))
    }

    /// Replays a dead job (the partition of its id), or all dead jobs.
    pub async fn replay(&self, id: Option<&str>) -> Result<u64> {
        self.on_dead(id, Partition::replay).await
    }

    /// Deletes a dead job (the partition of its id), or all dead jobs.
    pub async fn purge(&self, id: Option<&str>) -> Result<u64> {
        self.on_dead(id, Partition::purge).await
    }

    /// Runs `op` (a partition's replay or purge) on the dead job `id` in
    /// the partition of its id, or with `None` on every partition at once;
    /// answers how many jobs it took.
    async fn on_dead<'a, Op, Fut>(&'a self, id: Option<&'a str>, op: Op) -> Result<u64>
    where
        Op: Fn(&'a Partition, Option<&'a str>) -> Fut,
        Fut: std::future::Future<Output = Result<u64>>,
    {
        self.checked(true).await?;
        match id {
            Some(id) => op(self.part(id), Some(id)).await,
            None => join_all(self.parts.iter().map(|p| op(p, None)))
                .await
                .into_iter()
                .sum(),
        }
    }
}
