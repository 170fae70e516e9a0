//! Job queues: delayed and reliable delivery. Exactly one consumer gets a
//! due job, under a visibility lease with a fencing token; a job whose
//! lease ends without an ack is delivered again; after its last attempt it
//! goes to the dead letters. Every operation is one atomic step in the
//! store (one script on Redis); due jobs are promoted inside `claim`
//! itself, so there is no scheduler, leader or mover that can stall.
//!
//! One API whether a queue is partitioned or not: [`JobQueue::new`] is one
//! partition, the queue itself; [`JobQueue::partitioned`] spreads it over
//! K partitions (`partition.rs`), each under its own hash tag, so on Redis
//! Cluster they live in different slots (and, with enough of them, on
//! every master) and one queue's throughput grows with the cluster.
//!
//! A job's partition follows from its id, so dedupe, cancel, reschedule
//! and every fenced call find it again. Consumers take from the partitions
//! in turn, starting each call where the last one stopped, so every
//! partition is drained. Order (priority, then push order) holds within a
//! partition; across partitions it is only approximate.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use futures_util::future::{join_all, select_all};

use crate::error::{Error, ErrorKind, Result};
use crate::jobs::job::{
    Cancelled, Job, Nacked, PushOptions, Pushed, QueueStats, Retry, check_job_id, check_max, check_settle,
    sleep_until,
};
use crate::jobs::partition::Partition;
use crate::jobs::types::{ClaimOutcome, Layout};
use crate::name::Name;
use crate::store::Store;
use crate::store::registry::Kind;

use super::events::{EventId, JobEvents};
pub use super::layout::MAX_PARTITIONS;
use super::layout::{LayoutCheck, RECHECK, check_partitions, conflict};

/// A job of a batch push that did not go through: its id (the one given,
/// or the fresh one it was given) and why.
#[derive(Debug)]
pub struct PushFailed {
    pub id: String,
    pub error: Error,
}

/// A named job queue over a store, in one partition ([`JobQueue::new`]) or
/// several ([`JobQueue::partitioned`]). Cheap to clone; clones share the
/// turn in which partitions are taken.
#[derive(Debug, Clone)]
pub struct JobQueue {
    pub(super) store: Store,
    pub(super) name: Name,
    pub(super) parts: Arc<[Partition]>,
    cursor: Arc<AtomicUsize>,
    /// When the store last agreed to this handle's partition count (none:
    /// a queue made by `new`, which does not ask).
    layout: Option<Arc<LayoutCheck>>,
    /// How often to ask the store again.
    recheck: Duration,
}

impl JobQueue {
    /// Checks a partition count (1 to [`MAX_PARTITIONS`]) without making a
    /// queue: for settings read before a store is at hand.
    pub fn check_partitions(partitions: usize) -> Result<u32> {
        check_partitions(partitions)
    }

    /// The queue `name` over `partitions` (1 to 256) partitions, named
    /// `<name>:p0of<K>` … `<name>:p<K-1>of<K>` (so two layouts never share
    /// a partition). With one partition it is the queue `name`, as
    /// [`JobQueue::new`] makes it, but checked against the store's count. Every producer and consumer of the queue must use the same
    /// number: a job's partition follows from its id and that number. The
    /// store keeps the number in force (the first handle to change the
    /// queue stores it; a queue already holding jobs as a plain queue has
    /// one), and a handle that names another gets
    /// [`ErrorKind::PartitionConflict`] on its first call, or at its next
    /// re-check (every 10 s, see [`JobQueue::recheck_every`]).
    pub fn partitioned(store: &Store, name: &str, partitions: usize) -> Result<JobQueue> {
        JobQueue::check_partitions(partitions)?;
        let base = Name::new(name)?;
        let parts = if partitions == 1 {
            vec![Partition::new(store, name)?]
        } else {
            (0..partitions)
                .map(|i| {
                    Partition::new(store, &format!("{name}:p{i}of{partitions}")).map(Partition::unlisted)
                })
                .collect::<Result<Vec<_>>>()?
        };
        Ok(JobQueue {
            store: store.clone(),
            name: base,
            parts: parts.into(),
            cursor: Arc::new(AtomicUsize::new(rand::random::<u32>() as usize)),
            layout: Some(Arc::new(LayoutCheck::new())),
            recheck: RECHECK,
        })
    }

    /// The job queue `name`, in one partition (its keys under the name's
    /// own hash tag on Redis). The store's partition count is not asked:
    /// use [`JobQueue::partitioned`] with 1 to have it checked. Fails if
    /// the name is not valid.
    pub fn new(store: &Store, name: &str) -> Result<JobQueue> {
        Ok(JobQueue {
            store: store.clone(),
            name: Name::new(name)?,
            parts: Arc::new([Partition::new(store, name)?]),
            cursor: Arc::new(AtomicUsize::new(0)),
            layout: None,
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
        let want = JobQueue::check_partitions(partitions)?;
        let base = Name::new(name)?;
        let new = JobQueue::partitioned(store, name, partitions)?;
        let store_want = |expect| Layout {
            want,
            expect,
            store: true,
        };
        let (current, _) = store.job_layout(&base, &store_want(None)).await?;
        if current != want {
            let old = JobQueue::partitioned(store, name, current as usize)?;
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
        if let Some(layout) = &self.layout {
            layout.forget();
        }
        self.checked(true).await
    }

    /// Makes sure the store has this handle's partition count in force
    /// (see `LayoutCheck::check`); a queue made by `new` does not ask.
    pub(super) async fn checked(&self, write: bool) -> Result<()> {
        match &self.layout {
            None => Ok(()),
            Some(layout) => {
                layout
                    .check(&self.store, &self.name, self.parts.len(), self.recheck, write)
                    .await
            }
        }
    }

    /// How often the handle asks the store again whether its partition
    /// count is still the one in force (after a repartition it is not):
    /// 100 ms to an hour, 10 s by default. Each time costs a round trip.
    pub fn recheck_every(mut self, every: Duration) -> Result<JobQueue> {
        if every < Duration::from_millis(100) || every > Duration::from_secs(3600) {
            return Err(Error::invalid("recheck_every must be 100 ms to an hour"));
        }
        self.recheck = every;
        Ok(self)
    }

    fn each(self, f: impl Fn(Partition) -> Result<Partition>) -> Result<JobQueue> {
        let parts = self.parts.iter().cloned().map(f).collect::<Result<Vec<_>>>()?;
        Ok(JobQueue {
            parts: parts.into(),
            ..self
        })
    }

    /// How long a claimed job is a consumer's before it is delivered again
    /// (extend it for long jobs).
    pub fn lease(self, lease: Duration) -> Result<JobQueue> {
        self.each(|q| q.lease(lease))
    }

    /// Keeps acked jobs instead of deleting them: the last `count` (1 to
    /// 1,000,000), none for longer than `max_age`, applied as jobs are
    /// acked through this handle. A kept job still counts for dedupe: a
    /// push with its id is `Kept` (or `Busy` with `Replace`) until it goes.
    ///
    /// On a partitioned queue (per partition).
    pub fn keep_completed(self, count: usize, max_age: Duration) -> Result<JobQueue> {
        self.each(|q| q.keep_completed(count, max_age))
    }

    /// The largest payload accepted.
    pub fn max_payload(self, bytes: usize) -> JobQueue {
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
        self.parts.get(i).map(Partition::name)
    }

    /// Adds the queue's name to the registry of queues (with one
    /// partition, the plain queue's push does).
    async fn register<T>(&self, out: &Result<T>) {
        if self.parts.len() > 1 {
            self.store.register_after(Kind::Queues, &self.name, out).await;
        }
    }

    /// The one partition of a queue made by [`JobQueue::new`]: its calls
    /// go straight to it, answering exactly as one partition does (a
    /// queue made by `partitioned`, even of one partition, answers as
    /// partitions do: per-partition batch answers, `<partition>.`
    /// cursors).
    pub(super) fn plain(&self) -> Option<&Partition> {
        match (&self.layout, &*self.parts) {
            (None, [only]) => Some(only),
            _ => None,
        }
    }

    pub(super) fn part(&self, id: &str) -> &Partition {
        &self.parts[self.partition_of(id)]
    }

    /// Pushes a job to the partition of its id (a fresh one if it has
    /// none).
    pub async fn push(&self, payload: impl AsRef<[u8]>, options: &PushOptions) -> Result<Pushed> {
        self.checked(true).await?;
        let mut options = options.clone();
        let id = self.routed_id(&mut options)?;
        let out = self.part(&id).push(payload, &options).await;
        self.register(&out).await;
        out
    }

    /// Pushes `value` as JSON.
    pub async fn push_json<T: serde::Serialize>(&self, value: &T, options: &PushOptions) -> Result<Pushed> {
        let payload =
            serde_json::to_vec(value).map_err(|e| Error::invalid(format!("not serializable: {e}")))?;
        self.push(payload, options).await
    }

    /// Pushes up to [`MAX_BATCH`](crate::MAX_BATCH) jobs: one atomic step
    /// per partition, the partitions at once. Answers in the same order.
    /// Nothing is pushed if any job is invalid. If a partition's step
    /// fails, the call fails although other partitions may have taken
    /// their jobs: [`JobQueue::push_each`] tells which.
    pub async fn push_many<P: AsRef<[u8]>>(&self, jobs: &[(P, PushOptions)]) -> Result<Vec<Pushed>> {
        if let Some(only) = self.plain() {
            return only.push_many(jobs).await;
        }
        self.push_each(jobs)
            .await?
            .into_iter()
            .map(|r| r.map_err(|f| f.error))
            .collect()
    }

    /// As [`JobQueue::push_many`], with an answer per job: `Ok` for
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
            let id = self.routed_id(&mut options)?;
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
        step: impl Fn(&'a Partition, Vec<T>) -> Step,
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
    fn turn(&self) -> impl Iterator<Item = &Partition> {
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
                    got.extend(Partition::jobs(ClaimOutcome::Jobs(raw)));
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
            let watches: Vec<_> = self.parts.iter().map(Partition::watch).collect();
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

    /// Acknowledges job `id`'s delivery `fence`: it is done and deleted.
    /// `Err(LeaseLost)` if that delivery's lease had ended.
    pub async fn ack(&self, id: &str, fence: u64) -> Result<()> {
        self.checked(true).await?;
        self.part(id).ack(id, fence).await
    }

    /// Acks job `id`'s delivery `fence` and claims the next due job in the
    /// same atomic step (one round trip for a busy consumer). Returns
    /// whether the ack happened (`false`: that delivery's lease had ended)
    /// and the next job, if one is due. On a partitioned queue the job
    /// comes from the acked job's partition.
    pub async fn ack_and_claim(&self, id: &str, fence: u64) -> Result<(bool, Option<Job>)> {
        self.checked(true).await?;
        self.part(id).ack_and_claim(id, fence).await
    }

    /// Acks `deliveries` and claims up to `max` due jobs (0: none) in one
    /// atomic step: the batch form of [`JobQueue::ack_and_claim`]. On a
    /// partitioned queue that is one step when the deliveries are all of
    /// one partition (the jobs then come from it); otherwise, or with no
    /// deliveries, the acks ([`JobQueue::ack_many`]), then the claim
    /// ([`JobQueue::claim_many`], from the partitions in turn). Both
    /// counts are checked before anything is acked.
    pub async fn ack_and_claim_many(
        &self,
        deliveries: &[(&str, u64)],
        max: usize,
    ) -> Result<(Vec<bool>, Vec<Job>)> {
        if let Some(only) = self.plain() {
            return only.ack_and_claim_many(deliveries, max).await;
        }
        check_settle(deliveries.len(), max)?;
        self.checked(true).await?;
        if let Some((id, _)) = deliveries.first() {
            let first = self.partition_of(id);
            if deliveries.iter().all(|(id, _)| self.partition_of(id) == first) {
                return self.parts[first].ack_and_claim_many(deliveries, max).await;
            }
        }
        let acked = self.ack_many(deliveries).await?;
        let claimed = if max == 0 {
            Vec::new()
        } else {
            self.claim_many(max).await?
        };
        Ok((acked, claimed))
    }

    /// Acks up to [`MAX_BATCH`](crate::MAX_BATCH) deliveries `(id, fence)` in one step.
    /// Returns, in the same order, whether each was acked (`false`: that
    /// delivery's lease had ended, or it was named twice).
    ///
    /// On a partitioned queue: one step per partition, at once. If a
    /// partition's step fails, the call fails although the acks of other
    /// partitions may have been made: [`JobQueue::ack_each`] tells
    /// which.
    pub async fn ack_many(&self, deliveries: &[(&str, u64)]) -> Result<Vec<bool>> {
        if let Some(only) = self.plain() {
            return only.ack_many(deliveries).await;
        }
        self.ack_each(deliveries).await?.into_iter().collect()
    }

    /// As [`JobQueue::ack_many`], with an answer per delivery:
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

    /// Gives job `id`'s delivery `fence` back for a retry (or to the dead
    /// letters after its last attempt).
    pub async fn nack(&self, id: &str, fence: u64, retry: Retry) -> Result<Nacked> {
        self.checked(true).await?;
        self.part(id).nack(id, fence, retry).await
    }

    /// [`JobQueue::nack`], saying why the job failed: if this was its last
    /// attempt, `error` is kept with the dead job (its first 4 KiB, cut on
    /// a character boundary) and shown by [`JobQueue::dead`] as
    /// `last_error`.
    pub async fn nack_with_error(&self, id: &str, fence: u64, retry: Retry, error: &str) -> Result<Nacked> {
        self.checked(true).await?;
        self.part(id).nack_with_error(id, fence, retry, error).await
    }

    /// Extends job `id`'s delivery `fence` to `lease` from now.
    pub async fn extend(&self, id: &str, fence: u64, lease: Duration) -> Result<SystemTime> {
        self.checked(true).await?;
        self.part(id).extend(id, fence, lease).await
    }

    /// Cancels a waiting job (O(log n)). A running job is not cancelled.
    pub async fn cancel(&self, id: &str) -> Result<Cancelled> {
        self.checked(true).await?;
        self.part(id).cancel(id).await
    }

    /// Moves a waiting job to be due `delay` from now. `Ok(None)` if it is
    /// unknown or dead; `Err(JobRunning)` if it is running.
    pub async fn reschedule(&self, id: &str, delay: Duration) -> Result<Option<SystemTime>> {
        self.checked(true).await?;
        self.part(id).reschedule(id, delay).await
    }

    /// Whether any partition ever held anything ([`JobQueue::exists`]),
    /// or the queue has a partition count stored (a repartitioned queue's
    /// new partitions may not have held anything yet).
    pub async fn exists(&self) -> Result<bool> {
        if self.parts.len() > 1 && self.store.job_exists(&self.name).await? {
            return Ok(true);
        }
        for e in join_all(self.parts.iter().map(Partition::exists)).await {
            if e? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The partitions' stats, added up (recent lateness: all their samples).
    pub async fn stats(&self) -> Result<QueueStats> {
        if let Some(only) = self.plain() {
            return only.stats().await;
        }
        self.checked(false).await?;
        self.totals().await
    }

    async fn totals(&self) -> Result<QueueStats> {
        let mut total = QueueStats::default();
        for s in join_all(self.parts.iter().map(Partition::stats)).await {
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
            total.groups += s.groups;
            total.groups_held += s.groups_held;
            total.limited_claims += s.limited_claims;
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
            join_all(parts.map(Partition::pause)).await
        } else {
            join_all(parts.map(Partition::resume)).await
        };
        for r in all {
            changed |= r?;
        }
        Ok(changed)
    }
}
