//! One logical job queue spread over several partitions, each an ordinary
//! [`JobQueue`] under its own hash tag, so on Redis Cluster the partitions
//! live in different slots (and, with enough of them, on every master) and
//! one queue's throughput grows with the cluster.
//!
//! A job's partition follows from its id, so dedupe, cancel, reschedule
//! and every fenced call find it again. Consumers take from the partitions
//! in turn, starting each call where the last one stopped, so every
//! partition is drained. Order (priority, then push order) holds within a
//! partition; across partitions it is only approximate.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use futures_util::future::{join_all, select_all};

use crate::error::{Error, ErrorKind, Result};
use crate::jobs::job::{
    Cancelled, CompletedJob, DeadJob, Job, Nacked, PushOptions, Pushed, QueueStats, Retry, check_job_id,
    check_max, sleep_until,
};
use crate::jobs::lookup::{JobInfo, JobPage, JobState, MAX_JOB_LIST};
use crate::jobs::queue::JobQueue;
use crate::jobs::types::{ClaimOutcome, Layout};
use crate::name::{Name, new_id};
use crate::store::Store;
use crate::store::registry::Kind;

use super::events::{EventId, JobEvents};

/// The most partitions a sharded queue may have.
pub const MAX_PARTITIONS: usize = 256;

/// A job of a batch push that did not go through: its id (the one given,
/// or the fresh one it was given) and why.
#[derive(Debug)]
pub struct PushFailed {
    pub id: String,
    pub error: Error,
}

/// A job queue over `partitions` partitions. Cheap to clone; clones share
/// the turn in which partitions are taken.
#[derive(Debug, Clone)]
pub struct ShardedJobQueue {
    store: Store,
    name: Name,
    parts: Arc<[JobQueue]>,
    cursor: Arc<AtomicUsize>,
    /// When the store last agreed to this handle's partition count.
    layout: Arc<LayoutCheck>,
    /// How often to ask the store again.
    recheck: Duration,
}

/// How often a handle asks the store again, by default, whether its
/// partition count is still the one in force.
const RECHECK: Duration = Duration::from_secs(10);

/// A handle's record of the store's agreement to its partition count.
#[derive(Debug)]
struct LayoutCheck {
    since: Instant,
    /// Milliseconds after `since` (+1) of the last agreement; 0: never.
    agreed_ms: AtomicU64,
    /// A re-check is under way (the others go on meanwhile).
    rechecking: AtomicBool,
}

fn conflict(name: &Name, stored: u32, asked: usize) -> Error {
    Error::new(
        ErrorKind::PartitionConflict,
        format!(
            "queue {name} has {stored} partition(s) in the store, not {asked}: every producer and \
             consumer must use the same number (repartition the queue once it is empty to change it)"
        ),
    )
}

impl ShardedJobQueue {
    /// Checks a partition count (1 to [`MAX_PARTITIONS`]) without making a
    /// queue: for settings read before a store is at hand.
    pub fn check_partitions(partitions: usize) -> Result<u32> {
        if partitions == 0 || partitions > MAX_PARTITIONS {
            return Err(Error::invalid(format!(
                "a sharded queue has 1 to {MAX_PARTITIONS} partitions"
            )));
        }
        Ok(partitions as u32)
    }

    /// The queue `name` over `partitions` (1 to 256) partitions, named
    /// `<name>:p0of<K>` … `<name>:p<K-1>of<K>` (so two layouts never share
    /// a partition). With one partition it is the plain [`JobQueue`]
    /// `name`. Every producer and consumer of the queue must use the same
    /// number: a job's partition follows from its id and that number. The
    /// store keeps the number in force (the first handle to change the
    /// queue stores it; a queue already holding jobs as a plain queue has
    /// one), and a handle that names another gets
    /// [`ErrorKind::PartitionConflict`] on its first call, or at its next
    /// re-check (every 10 s, see [`ShardedJobQueue::recheck_every`]).
    pub fn new(store: &Store, name: &str, partitions: usize) -> Result<ShardedJobQueue> {
        ShardedJobQueue::check_partitions(partitions)?;
        let base = Name::new(name)?;
        let parts = if partitions == 1 {
            vec![JobQueue::new(store, name)?]
        } else {
            (0..partitions)
                .map(|i| JobQueue::new(store, &format!("{name}:p{i}of{partitions}")).map(JobQueue::unlisted))
                .collect::<Result<Vec<_>>>()?
        };
        Ok(ShardedJobQueue {
            store: store.clone(),
            name: base,
            parts: parts.into(),
            cursor: Arc::new(AtomicUsize::new(rand::random::<u32>() as usize)),
            layout: Arc::new(LayoutCheck {
                since: Instant::now(),
                agreed_ms: AtomicU64::new(0),
                rechecking: AtomicBool::new(false),
            }),
            recheck: RECHECK,
        })
    }

    /// Changes the number of partitions of the queue `name` to
    /// `partitions`. Only an empty queue may change: nothing ready,
    /// delayed, running or dead in any partition of the count in force
    /// (kept completed jobs stay behind and stop counting for dedupe).
    ///
    /// Each old partition is closed to pushes in one step that also checks
    /// it holds nothing, so no job can be stranded in the old layout: a
    /// producer still running with the old count gets
    /// [`ErrorKind::PartitionConflict`] from then on (and its consumers at
    /// their next re-check). If a partition still holds jobs, the ones
    /// closed so far are opened again and the call fails with the counts.
    /// Running it again finishes a change that was interrupted; running it
    /// with the old count undoes one.
    pub async fn repartition(store: &Store, name: &str, partitions: usize) -> Result<()> {
        let want = ShardedJobQueue::check_partitions(partitions)?;
        let base = Name::new(name)?;
        let new = ShardedJobQueue::new(store, name, partitions)?;
        let store_want = |expect| Layout {
            want,
            expect,
            store: true,
        };
        let (current, _) = store.job_layout(&base, &store_want(None)).await?;
        if current != want {
            let old = ShardedJobQueue::new(store, name, current as usize)?;
            let mut closed = Vec::new();
            for part in old.parts.iter() {
                match store.job_retire(part.queue_name(), true).await {
                    Ok((true, _)) => closed.push(part.queue_name()),
                    refused => {
                        for q in closed {
                            if let Err(e) = store.job_retire(q, false).await {
                                tracing::warn!(queue = %q, error = %e, "could not open a partition again");
                            }
                        }
                        refused?;
                        let s = old.totals().await?;
                        return Err(Error::invalid(format!(
                            "queue {name} still holds {} job(s) in its {current} partition(s) ({} ready, {} \
                             delayed, {} running, {} dead): drain it (and replay or purge its dead letters) first",
                            s.ready + s.delayed + s.in_flight + s.dead,
                            s.ready,
                            s.delayed,
                            s.in_flight,
                            s.dead
                        )));
                    }
                }
            }
        }
        // Open the new layout (again, after an interrupted change).
        for part in new.parts.iter() {
            store.job_retire(part.queue_name(), false).await?;
        }
        if current == want {
            return Ok(());
        }
        match store.job_layout(&base, &store_want(Some(current))).await? {
            (n, _) if n == want => Ok(()),
            (n, _) => Err(conflict(&base, n, partitions)),
        }
    }

    /// Checks now that the store has this handle's partition count in
    /// force (storing it if the queue has none yet):
    /// [`ErrorKind::PartitionConflict`] if not. Calls make the same check
    /// on a handle's first use and every 10 s after; this is for failing
    /// fast at start-up.
    pub async fn verify(&self) -> Result<()> {
        self.layout.agreed_ms.store(0, Ordering::Release);
        self.checked(true).await
    }

    /// Makes sure the store has this handle's partition count in force:
    /// asked on first use and again every `recheck`. `write`: the call
    /// will change the queue, so the count is stored if there is none (a
    /// read stores nothing). Once the store has agreed, a re-check that
    /// fails for another reason than an unreachable store does not stop
    /// the queue (the call itself will tell), and callers do not wait for a
    /// re-check another one is making.
    async fn checked(&self, write: bool) -> Result<()> {
        let layout = &self.layout;
        let now = layout.since.elapsed().as_millis() as u64 + 1;
        let agreed = layout.agreed_ms.load(Ordering::Acquire);
        if agreed != 0 {
            if now < agreed + self.recheck.as_millis() as u64 {
                return Ok(());
            }
            if layout.rechecking.swap(true, Ordering::AcqRel) {
                return Ok(());
            }
        }
        let asked = self.parts.len();
        let ask = Layout {
            want: asked as u32,
            expect: None,
            store: write,
        };
        let answer = self.store.job_layout(&self.name, &ask).await;
        if agreed != 0 {
            layout.rechecking.store(false, Ordering::Release);
        }
        match answer {
            Ok((n, stored)) if n as usize == asked => {
                if stored {
                    layout.agreed_ms.store(now, Ordering::Release);
                }
                Ok(())
            }
            Ok((n, _)) => {
                layout.agreed_ms.store(0, Ordering::Release);
                Err(conflict(&self.name, n, asked))
            }
            // Unreachable: the call itself would fail the same way, after
            // another whole timeout (a push during a freeze took two).
            Err(e)
                if agreed != 0 && !matches!(e.kind(), ErrorKind::Misconfigured | ErrorKind::Unavailable) =>
            {
                tracing::debug!(queue = %self.name, error = %e, "could not re-check the partition count; going on");
                layout.agreed_ms.store(now, Ordering::Release);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn each(self, f: impl Fn(JobQueue) -> Result<JobQueue>) -> Result<ShardedJobQueue> {
        let parts = self.parts.iter().cloned().map(f).collect::<Result<Vec<_>>>()?;
        Ok(ShardedJobQueue {
            parts: parts.into(),
            ..self
        })
    }

    /// How often the handle asks the store again whether its partition
    /// count is still the one in force (after a repartition it is not):
    /// 100 ms to an hour, 10 s by default. Each time costs a round trip.
    pub fn recheck_every(mut self, every: Duration) -> Result<ShardedJobQueue> {
        if every < Duration::from_millis(100) || every > Duration::from_secs(3600) {
            return Err(Error::invalid("recheck_every must be 100 ms to an hour"));
        }
        self.recheck = every;
        Ok(self)
    }

    /// See [`JobQueue::lease`].
    pub fn lease(self, lease: Duration) -> Result<ShardedJobQueue> {
        self.each(|q| q.lease(lease))
    }

    /// See [`JobQueue::keep_completed`] (per partition).
    pub fn keep_completed(self, count: usize, max_age: Duration) -> Result<ShardedJobQueue> {
        self.each(|q| q.keep_completed(count, max_age))
    }

    /// See [`JobQueue::max_payload`].
    pub fn max_payload(self, bytes: usize) -> ShardedJobQueue {
        self.each(|q| Ok(q.max_payload(bytes)))
            .unwrap_or_else(|_| unreachable!("max_payload cannot fail"))
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        self.name.as_str()
    }

    /// How many partitions it has.
    pub fn partitions(&self) -> usize {
        self.parts.len()
    }

    /// The partition that holds the job `id`: CRC-16 of the id, modulo the
    /// number of partitions.
    pub fn partition_of(&self, id: &str) -> usize {
        usize::from(crc16::State::<crc16::XMODEM>::calculate(id.as_bytes())) % self.parts.len()
    }

    /// The name of partition `i` (0 to K-1), the queue under which its
    /// keys live (`<prefix>:jobs:{<that name>}:…` on Redis).
    pub fn partition_name(&self, i: usize) -> Option<&str> {
        self.parts.get(i).map(JobQueue::name)
    }

    /// Adds the queue's name to the registry of queues (with one
    /// partition, the plain queue's push does).
    async fn register<T>(&self, out: &Result<T>) {
        if self.parts.len() > 1 {
            self.store.register_after(Kind::Queues, &self.name, out).await;
        }
    }

    fn part(&self, id: &str) -> &JobQueue {
        &self.parts[self.partition_of(id)]
    }

    /// Pushes a job to the partition of its id (a fresh one if it has
    /// none).
    pub async fn push(&self, payload: impl AsRef<[u8]>, options: &PushOptions) -> Result<Pushed> {
        self.checked(true).await?;
        let mut options = options.clone();
        let id = options.id.get_or_insert_with(new_id).clone();
        let out = self.part(&id).push(payload, &options).await;
        self.register(&out).await;
        out
    }

    /// Pushes up to [`MAX_BATCH`](crate::MAX_BATCH) jobs: one atomic step
    /// per partition, the partitions at once. Answers in the same order.
    /// Nothing is pushed if any job is invalid. If a partition's step
    /// fails, the call fails although other partitions may have taken
    /// their jobs: [`ShardedJobQueue::push_each`] tells which.
    pub async fn push_many<P: AsRef<[u8]>>(&self, jobs: &[(P, PushOptions)]) -> Result<Vec<Pushed>> {
        self.push_each(jobs)
            .await?
            .into_iter()
            .map(|r| r.map_err(|f| f.error))
            .collect()
    }

    /// As [`ShardedJobQueue::push_many`], with an answer per job: `Ok` for
    /// a job its partition took, else the id it was given and why its
    /// partition failed (on `Unavailable` the push may still have been
    /// made: push again with the same id, and a duplicate is `Kept`). The
    /// call itself fails, pushing nothing, if any job is invalid.
    pub async fn push_each<P: AsRef<[u8]>>(
        &self,
        jobs: &[(P, PushOptions)],
    ) -> Result<Vec<Result<Pushed, PushFailed>>> {
        if jobs.is_empty() || jobs.len() > crate::MAX_BATCH {
            return Err(Error::invalid(format!(
                "a push carries 1 to {} jobs",
                crate::MAX_BATCH
            )));
        }
        if jobs.iter().map(|(p, _)| p.as_ref().len()).sum::<usize>() > crate::MAX_BATCH_BYTES {
            return Err(Error::invalid(format!(
                "the payloads of one push must total at most {} bytes",
                crate::MAX_BATCH_BYTES
            )));
        }
        let mut routed = Vec::with_capacity(jobs.len());
        let mut ids = Vec::with_capacity(jobs.len());
        for (payload, options) in jobs {
            let mut options = options.clone();
            let id = options.id.get_or_insert_with(new_id).clone();
            // Every job is checked before any partition takes one.
            self.parts[0].prepare(payload.as_ref(), &options)?;
            routed.push((self.partition_of(&id), (payload.as_ref(), options)));
            ids.push(id);
        }
        self.checked(true).await?;
        let out = self
            .per_partition(
                routed,
                |part, batch| async move { part.push_many(&batch).await },
                |i, e| PushFailed {
                    id: ids[i].clone(),
                    error: e.duplicate(),
                },
            )
            .await;
        // Listed if any partition's step reached the store.
        let reached = match &out {
            Ok(each) if each.iter().any(Result::is_ok) => Ok(()),
            Ok(each) => match each.first() {
                Some(Err(f)) => Err(f.error.duplicate()),
                _ => Ok(()),
            },
            Err(e) => Err(e.duplicate()),
        };
        self.register(&reached).await;
        out
    }

    /// Runs `step` once per partition on that partition's share of `items`
    /// (each given with its partition), the partitions at once. Answers
    /// per item, in order; the items of a partition whose step failed get
    /// `failed(index of the item, error)`.
    async fn per_partition<'a, T, R, E, Step>(
        &'a self,
        items: Vec<(usize, T)>,
        step: impl Fn(&'a JobQueue, Vec<T>) -> Step,
        failed: impl Fn(usize, &Error) -> E,
    ) -> Result<Vec<Result<R, E>>>
    where
        Step: std::future::Future<Output = Result<Vec<R>>>,
    {
        let count = items.len();
        let mut groups: Vec<(Vec<usize>, Vec<T>)> =
            (0..self.parts.len()).map(|_| Default::default()).collect();
        for (i, (p, item)) in items.into_iter().enumerate() {
            groups[p].0.push(i);
            groups[p].1.push(item);
        }
        let mut at_each = Vec::new();
        let mut steps = Vec::new();
        for (p, (at, batch)) in groups.into_iter().enumerate() {
            if !at.is_empty() {
                at_each.push(at);
                steps.push(step(&self.parts[p], batch));
            }
        }
        let mut answers: Vec<Option<Result<R, E>>> = (0..count).map(|_| None).collect();
        for (at, answer) in at_each.into_iter().zip(join_all(steps).await) {
            match answer {
                Ok(results) if results.len() == at.len() => {
                    for (i, r) in at.into_iter().zip(results) {
                        answers[i] = Some(Ok(r));
                    }
                }
                Ok(_) => {
                    return Err(Error::new(
                        ErrorKind::Store,
                        "a partition answered for the wrong number of items",
                    ));
                }
                Err(e) => {
                    for i in at {
                        answers[i] = Some(Err(failed(i, &e)));
                    }
                }
            }
        }
        answers
            .into_iter()
            .map(|a| a.ok_or_else(|| Error::new(ErrorKind::Store, "an item of the batch got no answer")))
            .collect()
    }

    /// The partitions in the order this call takes them: each call starts
    /// one further on, so all are drained.
    fn turn(&self) -> impl Iterator<Item = &JobQueue> {
        let start = self.cursor.fetch_add(1, Ordering::Relaxed);
        let n = self.parts.len();
        (0..n).map(move |i| &self.parts[start.wrapping_add(i) % n])
    }

    /// Claims up to `max` due jobs without waiting, from the partitions in
    /// turn; also returns how soon something may be due (store ms from
    /// now) when it found nothing.
    async fn take(&self, max: usize) -> Result<(Vec<Job>, Option<Duration>)> {
        let mut got = Vec::new();
        let mut soonest: Option<Duration> = None;
        for part in self.turn() {
            let claimed = match part.settle(&[], max - got.len()).await {
                Ok((_, claimed)) => claimed,
                // Jobs already claimed from other partitions are handed
                // out, not dropped (their leases would run out unused).
                Err(e) if !got.is_empty() => {
                    tracing::warn!(error = %e, "a partition failed; returning the jobs claimed so far");
                    break;
                }
                Err(e) => return Err(e),
            };
            match claimed {
                ClaimOutcome::Jobs(raw) => {
                    got.extend(JobQueue::jobs(ClaimOutcome::Jobs(raw)));
                    if got.len() >= max {
                        break;
                    }
                }
                ClaimOutcome::Empty { next_due_ms, now_ms } => {
                    if let Some(due) = next_due_ms {
                        let wait = Duration::from_millis(due.saturating_sub(now_ms));
                        soonest = Some(soonest.map_or(wait, |s| s.min(wait)));
                    }
                }
            }
        }
        Ok((got, soonest))
    }

    /// Claims one due job, if any, without waiting.
    pub async fn claim(&self) -> Result<Option<Job>> {
        Ok(self.claim_many(1).await?.pop())
    }

    /// Claims up to `max` due jobs without waiting, from the partitions in
    /// turn.
    pub async fn claim_many(&self, max: usize) -> Result<Vec<Job>> {
        check_max(max)?;
        self.checked(true).await?;
        if let [only] = &*self.parts {
            return only.claim_many(max).await;
        }
        Ok(self.take(max).await?.0)
    }

    /// Claims one due job, waiting up to `wait` (see [`JobQueue::next`]):
    /// until the soonest due time of any partition or a push to any,
    /// re-checking at least once a second.
    pub async fn next(&self, wait: Duration) -> Result<Option<Job>> {
        Ok(self.next_many(1, wait).await?.pop())
    }

    /// Claims up to `max` due jobs, waiting up to `wait` for at least one.
    pub async fn next_many(&self, max: usize, wait: Duration) -> Result<Vec<Job>> {
        check_max(max)?;
        self.checked(true).await?;
        if let [only] = &*self.parts {
            return only.next_many(max, wait).await;
        }
        let mut listening = Vec::with_capacity(self.parts.len());
        for part in self.parts.iter() {
            listening.push(part.listen().await?);
        }
        let deadline = Instant::now() + wait;
        loop {
            // Registered before the claims, so a push in between wakes us.
            let watches: Vec<_> = self.parts.iter().map(JobQueue::watch).collect();
            let (got, soonest) = self.take(max).await?;
            if !got.is_empty() {
                return Ok(got);
            }
            let Some(sleep) = sleep_until(deadline, soonest) else {
                return Ok(Vec::new());
            };
            select_all(watches.iter().map(|w| Box::pin(w.wait(sleep)))).await;
        }
    }

    /// See [`JobQueue::ack`].
    pub async fn ack(&self, id: &str, fence: u64) -> Result<()> {
        self.checked(true).await?;
        self.part(id).ack(id, fence).await
    }

    /// See [`JobQueue::ack_many`]: one step per partition, at once. If a
    /// partition's step fails, the call fails although the acks of other
    /// partitions may have been made: [`ShardedJobQueue::ack_each`] tells
    /// which.
    pub async fn ack_many(&self, deliveries: &[(&str, u64)]) -> Result<Vec<bool>> {
        self.ack_each(deliveries).await?.into_iter().collect()
    }

    /// As [`ShardedJobQueue::ack_many`], with an answer per delivery:
    /// whether it was acked, or why its partition failed (on `Unavailable`
    /// the ack may still have been made: acking again then answers
    /// `false`, and the job is not delivered again).
    pub async fn ack_each(&self, deliveries: &[(&str, u64)]) -> Result<Vec<Result<bool>>> {
        if deliveries.len() > crate::MAX_BATCH {
            return Err(Error::invalid(format!(
                "an ack covers at most {} jobs",
                crate::MAX_BATCH
            )));
        }
        for (id, _) in deliveries {
            check_job_id(id)?;
        }
        if deliveries.is_empty() {
            return Ok(Vec::new());
        }
        self.checked(true).await?;
        let routed = deliveries
            .iter()
            .map(|(id, fence)| (self.partition_of(id), (*id, *fence)))
            .collect();
        self.per_partition(
            routed,
            |part, batch| async move { part.ack_many(&batch).await },
            |_, e| e.duplicate(),
        )
        .await
    }

    /// See [`JobQueue::nack`].
    pub async fn nack(&self, id: &str, fence: u64, retry: Retry) -> Result<Nacked> {
        self.checked(true).await?;
        self.part(id).nack(id, fence, retry).await
    }

    /// See [`JobQueue::nack_with_error`].
    pub async fn nack_with_error(&self, id: &str, fence: u64, retry: Retry, error: &str) -> Result<Nacked> {
        self.checked(true).await?;
        self.part(id).nack_with_error(id, fence, retry, error).await
    }

    /// See [`JobQueue::extend`].
    pub async fn extend(&self, id: &str, fence: u64, lease: Duration) -> Result<SystemTime> {
        self.checked(true).await?;
        self.part(id).extend(id, fence, lease).await
    }

    /// See [`JobQueue::cancel`].
    pub async fn cancel(&self, id: &str) -> Result<Cancelled> {
        self.checked(true).await?;
        self.part(id).cancel(id).await
    }

    /// See [`JobQueue::reschedule`].
    pub async fn reschedule(&self, id: &str, delay: Duration) -> Result<Option<SystemTime>> {
        self.checked(true).await?;
        self.part(id).reschedule(id, delay).await
    }

    /// Up to `limit` dead jobs of all partitions, oldest first (bounded
    /// in bytes as [`JobQueue::dead`]).
    pub async fn dead(&self, limit: usize) -> Result<Vec<DeadJob>> {
        let size = |d: &DeadJob| d.id.len() + d.payload.len() + d.last_error.as_ref().map_or(0, String::len);
        self.merged(limit, |p| p.dead(limit), |d| d.died, size).await
    }

    /// Kept completed jobs of all partitions, most recent first (bounded
    /// in bytes as [`JobQueue::completed`]).
    pub async fn completed(&self, limit: usize) -> Result<Vec<CompletedJob>> {
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
        list: impl Fn(&'a JobQueue) -> Fut,
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
        self.on_dead(id, JobQueue::replay).await
    }

    /// Deletes a dead job (the partition of its id), or all dead jobs.
    pub async fn purge(&self, id: Option<&str>) -> Result<u64> {
        self.on_dead(id, JobQueue::purge).await
    }

    /// Runs `op` (a partition's replay or purge) on the dead job `id` in
    /// the partition of its id, or with `None` on every partition at once;
    /// answers how many jobs it took.
    async fn on_dead<'a, Op, Fut>(&'a self, id: Option<&'a str>, op: Op) -> Result<u64>
    where
        Op: Fn(&'a JobQueue, Option<&'a str>) -> Fut,
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

    /// Whether any partition ever held anything ([`JobQueue::exists`]),
    /// or the queue has a partition count stored (a repartitioned queue's
    /// new partitions may not have held anything yet).
    pub async fn exists(&self) -> Result<bool> {
        if self.parts.len() > 1 && self.store.job_exists(&self.name).await? {
            return Ok(true);
        }
        for e in join_all(self.parts.iter().map(JobQueue::exists)).await {
            if e? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The partitions' stats, added up (recent lateness: all their samples).
    pub async fn stats(&self) -> Result<QueueStats> {
        self.checked(false).await?;
        self.totals().await
    }

    async fn totals(&self) -> Result<QueueStats> {
        let mut total = QueueStats::default();
        for s in join_all(self.parts.iter().map(JobQueue::stats)).await {
            let s = s?;
            total.ready += s.ready;
            total.delayed += s.delayed;
            total.in_flight += s.in_flight;
            total.dead += s.dead;
            total.completed += s.completed;
            total.pushed += s.pushed;
            total.claimed += s.claimed;
            total.acked += s.acked;
            total.retried += s.retried;
            total.dead_total += s.dead_total;
            total.redelivered += s.redelivered;
            total.recent_lateness.extend(s.recent_lateness);
            if total.lateness_buckets.len() < s.lateness_buckets.len() {
                total.lateness_buckets.resize(s.lateness_buckets.len(), 0);
            }
            for (t, n) in total.lateness_buckets.iter_mut().zip(&s.lateness_buckets) {
                *t += n;
            }
            total.lateness_sum += s.lateness_sum;
            total.paused |= s.paused;
        }
        Ok(total)
    }

    /// Pauses every partition ([`JobQueue::pause`]), one step per
    /// partition (all at once, not atomically together: a consumer may
    /// claim from a partition not yet paused). Answers whether any was
    /// running. The stats read paused while any partition is.
    pub async fn pause(&self) -> Result<bool> {
        self.set_paused(true).await
    }

    /// Resumes every partition ([`JobQueue::resume`]), one step per
    /// partition. Answers whether any was paused.
    pub async fn resume(&self) -> Result<bool> {
        self.set_paused(false).await
    }

    /// A live feed of the queue's events ([`JobQueue::events`]): with one
    /// partition, that queue's; with several, their feeds merged in
    /// arrival order. A resume (`since`) needs one partition: event ids of
    /// different partitions are not in one order.
    pub async fn events(&self, since: Option<EventId>) -> Result<JobEvents> {
        if since.is_some() && self.parts.len() > 1 {
            return Err(Error::invalid(
                "resuming the events of a partitioned queue is not supported: ids are per partition",
            ));
        }
        let mut feeds = Vec::with_capacity(self.parts.len());
        for part in self.parts.iter() {
            feeds.push(part.events(since).await?);
        }
        if feeds.len() == 1 {
            return Ok(feeds.pop().expect("one feed"));
        }
        Ok(JobEvents::merge(feeds))
    }

    async fn set_paused(&self, pause: bool) -> Result<bool> {
        self.checked(true).await?;
        let mut changed = false;
        let parts = self.parts.iter();
        let all = if pause {
            join_all(parts.map(JobQueue::pause)).await
        } else {
            join_all(parts.map(JobQueue::resume)).await
        };
        for r in all {
            changed |= r?;
        }
        Ok(changed)
    }
}

/// Looking jobs up (see [`JobQueue::get`] and [`JobQueue::list`]).
impl ShardedJobQueue {
    /// Job `id` as it stands, from the partition of its id.
    pub async fn get(&self, id: &str) -> Result<Option<JobInfo>> {
        self.checked(false).await?;
        self.part(id).get(id).await
    }

    /// See [`JobQueue::get_with_payload`].
    pub async fn get_with_payload(&self, id: &str) -> Result<Option<(JobInfo, Vec<u8>)>> {
        self.checked(false).await?;
        self.part(id).get_with_payload(id).await
    }

    /// Up to `limit` jobs in `state`: partition 0's in its order, then
    /// partition 1's, and so on (one atomic read per partition a page
    /// touches; no order across partitions). The cursor is
    /// `<partition>.<the partition's cursor>`, and gives the same
    /// guarantee as one queue's within each partition.
    pub async fn list(&self, state: JobState, cursor: Option<&str>, limit: usize) -> Result<JobPage> {
        if limit == 0 || limit > MAX_JOB_LIST {
            return Err(Error::invalid(format!(
                "a listing takes 1 to {MAX_JOB_LIST} jobs"
            )));
        }
        let (mut i, mut inner) = match cursor {
            None => (0, None),
            Some(c) => {
                let bad = || Error::invalid(format!("bad cursor {c:?}: pass the `next` of a listing"));
                let (i, rest) = c.split_once('.').ok_or_else(bad)?;
                let i: usize = i.parse().map_err(|_| bad())?;
                if i >= self.parts.len() {
                    return Err(bad());
                }
                (i, Some(rest).filter(|r| !r.is_empty()))
            }
        };
        self.checked(false).await?;
        let mut jobs = Vec::new();
        while i < self.parts.len() {
            let page = self.parts[i].list(state, inner, limit - jobs.len()).await?;
            jobs.extend(page.jobs);
            if let Some(next) = page.next {
                return Ok(JobPage {
                    jobs,
                    next: Some(format!("{i}.{next}")),
                });
            }
            i += 1;
            inner = None;
        }
        Ok(JobPage { jobs, next: None })
    }
}
