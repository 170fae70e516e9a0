//! The two stores and the one set of operations they both implement.
//!
//! Every method here is one atomic step: one critical section in memory, one
//! Lua script on Redis. Callers never combine reads and writes themselves.
//!
//! This file is the `Store` handle and the dispatch to its backend only.
//! Each primitive's operation types and its two implementations sit in
//! its own folder (`gate/`, `jobs/`, `limit/`); `memory/` and `redis/` hold
//! what a backend shares across primitives; `wakers.rs` is the per-process
//! wake-up table both use, `timers.rs` the one task that renews a store's
//! leases.

pub(crate) mod gate;
pub(crate) mod jobs;
pub(crate) mod limit;
pub(crate) mod memory;
mod passing;
pub(crate) mod redis;
pub(crate) mod registry;
pub(crate) mod schedule;
pub(crate) mod timers;
mod wakers;

use std::sync::Arc;
use std::time::Duration;

use self::limit::{Check, Decision};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::name::Name;

use self::gate::MAX_CURSOR;
pub(crate) use self::gate::{Admission, EnterRequest, Entry, GateName, Grant, Pass, Poll, check_capacity};
pub use self::gate::{
    GateStats, GateWatch, Holding, Left, MAX_CAPACITY, MAX_REVOKED_PER_WATCH, Occupancy, Place,
};
pub use self::gate::{MAX_LINE_LIMIT, Waiting};
pub use self::jobs::events::{EVENTS_BUFFER, EventId, JobEvent, JobEventKind, JobEvents, Lagged};
pub use self::memory::MemoryOptions;
pub use self::memory::durable::{
    DEFAULT_REBUILD_ABOVE, DEFAULT_SNAPSHOT_AFTER, DataCheck, DurableOptions, DurableStats, Recovery,
    SegmentCheck, check_data_dir, repair_data_dir,
};
pub use self::memory::journal::{Fsync, JournalStats};
pub(crate) use self::passing::{Bargers, Taken};
pub(crate) use self::redis::Listening;
pub use self::redis::RedisConfig;
pub(crate) use self::wakers::{Wakers, Watch};

/// Where gate state lives. Cheap to clone; clones share connections.
#[derive(Debug, Clone)]
pub struct Store {
    backend: Backend,
    /// The names registered lately (and on the memory store, the registry).
    registry: Arc<registry::Registry>,
    /// Redis: the job queues this process watches (the memory store keeps
    /// its own, published from its critical sections).
    job_events: Arc<jobs::events::Hub>,
    /// The one task that renews this store's leases (`timers.rs`).
    timers: Arc<timers::Timers>,
    /// Non-fair acquires waiting in this process (`passing.rs`).
    bargers: Arc<passing::Bargers>,
}

/// The Redis arms of the dispatch below box their futures: a Redis call's
/// future is kilobytes (the client's), and inline it would make every
/// future that calls the store that large, even on the embedded store, and
/// keep it that large while it waits (a long-poll parks for a minute). The
/// box is one allocation per network round trip.
#[derive(Debug, Clone)]
enum Backend {
    Memory(Arc<memory::MemoryStore>),
    Redis(Arc<redis::RedisStore>),
}

impl Store {
    /// An embedded in-process store with the default settings
    /// ([`MemoryOptions`]: the system clock, idle state dropped after 10
    /// minutes).
    pub fn memory() -> Store {
        Store::memory_store(MemoryOptions::default())
    }

    /// An embedded store reading time from `clock` (tests use
    /// [`ManualClock`](crate::ManualClock) to move time without sleeping).
    pub fn memory_with_clock(clock: Arc<dyn Clock>) -> Store {
        Store::memory_store(MemoryOptions {
            clock,
            ..MemoryOptions::default()
        })
    }

    /// An embedded store with `options`; fails if they are out of range.
    pub fn memory_with(options: MemoryOptions) -> Result<Store> {
        options.check()?;
        Ok(Store::memory_store(options))
    }

    /// The durable embedded store in `options.dir`: recovered from its
    /// snapshot and log, then every change logged before it is answered
    /// (see [`DurableOptions`] and docs/DURABILITY.md). Fails with
    /// [`ErrorKind::Misconfigured`](crate::ErrorKind::Misconfigured) if
    /// another process has the directory, or if its files are damaged
    /// other than by a torn last write (which is cut off and reported).
    pub fn open(options: DurableOptions) -> Result<Store> {
        Store::open_with(MemoryOptions::default(), options).map(|(store, _)| store)
    }

    /// [`Store::open`] with the embedded store's own settings; also says
    /// what recovery found.
    pub fn open_with(memory: MemoryOptions, options: DurableOptions) -> Result<(Store, Recovery)> {
        memory.check()?;
        let inner = Arc::new(memory::MemoryStore::new(memory));
        let recovery = memory::durable::open(&inner, &options)?;
        let store = Store::memory_store_from(inner);
        Ok((store, recovery))
    }

    /// The durable store's figures: its directory, policy, log, snapshots
    /// and recovery (`None`: memory only, or Redis).
    pub fn durable_stats(&self) -> Option<DurableStats> {
        match &self.backend {
            Backend::Memory(s) => s.durable_stats(),
            Backend::Redis(_) => None,
        }
    }

    /// Takes a snapshot of the durable store now (it takes them itself as
    /// its log grows); a no-op on other stores. Blocks while it writes.
    pub fn snapshot_now(&self) -> Result<()> {
        match &self.backend {
            Backend::Memory(s) => memory::durable::take_snapshot(s),
            Backend::Redis(_) => Ok(()),
        }
    }

    /// Writes and syncs what the durable store logged, and stops its log:
    /// for a clean stop (later changes fail). A no-op on other stores.
    pub fn close(&self) {
        if let Backend::Memory(s) = &self.backend {
            s.close();
        }
    }

    fn memory_store(options: MemoryOptions) -> Store {
        Store::memory_store_from(Arc::new(memory::MemoryStore::new(options)))
    }

    fn memory_store_from(inner: Arc<memory::MemoryStore>) -> Store {
        Store {
            backend: Backend::Memory(inner),
            registry: Arc::default(),
            job_events: Arc::default(),
            timers: Arc::default(),
            bargers: Arc::default(),
        }
    }

    /// Connects to Redis at `url` (`redis://`, `rediss://`, `redis+unix://`
    /// or `unix://`) with the default configuration.
    pub async fn redis(url: &str) -> Result<Store> {
        Store::connect(RedisConfig::new(url)).await
    }

    /// Connects to Redis as `config` says. Fails if the URL is malformed or
    /// the server cannot be reached now, and with
    /// [`ErrorKind::Misconfigured`](crate::ErrorKind::Misconfigured) if it
    /// (or a node of the Cluster, or the master the Sentinels name) is
    /// older than supported: Redis 7.0, Valkey 7.2; after that, the
    /// connection is re-established automatically whenever it drops.
    pub async fn connect(config: RedisConfig) -> Result<Store> {
        Ok(Store {
            backend: Backend::Redis(Arc::new(redis::RedisStore::connect(config).await?)),
            registry: Arc::default(),
            job_events: Arc::default(),
            timers: Arc::default(),
            bargers: Arc::default(),
        })
    }

    /// A handle on the same Redis whose every operation, once its script
    /// has run, waits until `replicas` replicas confirm the change (Redis
    /// `WAIT`, up to `timeout`). Build the primitives that must not lose an
    /// acknowledged change to a failover (a lock's grant, a job's push or
    /// ack) from it; the rest can keep the plain handle.
    ///
    /// It costs a round trip to the replicas per operation and runs on a
    /// connection of its own. When fewer replicas confirm in time the
    /// operation still happened on the master, and it fails with
    /// [`ErrorKind::NotReplicated`](crate::ErrorKind::NotReplicated)
    /// (a lock or semaphore gives such a grant back at once). The embedded
    /// store has no replicas: it refuses.
    pub async fn durable(&self, replicas: u32, timeout: Duration) -> Result<Store> {
        if replicas == 0 || replicas > 100 {
            return Err(Error::invalid("durable: replicas must be 1 to 100"));
        }
        if timeout.is_zero() || timeout > Duration::from_secs(60) {
            return Err(Error::invalid("durable: the timeout must be 1 ms to 60 s"));
        }
        match &self.backend {
            Backend::Memory(_) => Err(Error::invalid(
                "the embedded store has no replicas; durable() needs Redis",
            )),
            Backend::Redis(s) => Ok(Store {
                backend: Backend::Redis(Arc::new(s.durable(replicas, timeout).await?)),
                registry: self.registry.clone(),
                job_events: self.job_events.clone(),
                timers: self.timers.clone(),
                // A durable handle does not pass (its grant would need its
                // own wait for replicas): its waiters are on their own.
                bargers: Arc::default(),
            }),
        }
    }

    /// The timer queue of this store's leases.
    pub(crate) fn timers(&self) -> &Arc<timers::Timers> {
        &self.timers
    }

    /// This store's non-fair acquires waiting in this process.
    pub(crate) fn bargers(&self) -> &Arc<passing::Bargers> {
        &self.bargers
    }

    /// Whether this is a durable handle (see [`Store::durable`]).
    pub(crate) fn is_durable(&self) -> bool {
        match &self.backend {
            Backend::Memory(_) => false,
            Backend::Redis(s) => s.is_durable(),
        }
    }

    /// Whether operations cross a network (and so can fail or stall).
    pub(crate) fn is_remote(&self) -> bool {
        matches!(self.backend, Backend::Redis(_))
    }

    /// How many names the embedded store holds state for (`None` on
    /// Redis): for metrics, and to see that idle names are dropped.
    pub fn memory_footprint(&self) -> Option<MemoryFootprint> {
        match &self.backend {
            Backend::Memory(s) => Some(s.footprint()),
            Backend::Redis(_) => None,
        }
    }

    /// Drops the embedded store's idle state now, looking at up to `max`
    /// names of each kind, and gives spare room back. Operations already do
    /// this a few names at a time; a server calls it in the background too,
    /// so that after a flood of names its memory comes back even if no
    /// operation follows. Redis expires its keys itself: a no-op there.
    pub fn sweep_idle(&self, max: usize) {
        if let Backend::Memory(s) = &self.backend {
            s.sweep_idle(max);
        }
    }

    /// `"memory"` or `"redis"`.
    pub fn kind(&self) -> &'static str {
        match &self.backend {
            Backend::Memory(_) => "memory",
            Backend::Redis(_) => "redis",
        }
    }

    pub(crate) async fn enter(&self, gate: &GateName, req: &EnterRequest<'_>) -> Result<Entry> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.enter(gate, req)).await?,
            Backend::Redis(s) => Box::pin(s.enter(gate, req)).await,
        }
    }

    /// One rate-limit decision for `check.key` of `limiter`: spends
    /// `check.cost` if it fits.
    pub(crate) async fn limit(&self, limiter: &Name, check: &Check<'_>) -> Result<Decision> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.limit(limiter, check)).await,
            Backend::Redis(s) => Box::pin(s.limit(limiter, check)).await,
        }
    }

    /// Changes admission control (see [`Admission`]).
    pub(crate) async fn set_admission(&self, gate: &GateName, admission: &Admission) -> Result<()> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.set_admission(gate, admission)).await?,
            Backend::Redis(s) => Box::pin(s.set_admission(gate, admission)).await,
        }
    }

    pub(crate) async fn poll(&self, gate: &GateName, id: &str, ttl_ms: u64, hb_ms: u64) -> Result<Poll> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.poll(gate, id, ttl_ms, hb_ms)).await?,
            Backend::Redis(s) => Box::pin(s.poll(gate, id, ttl_ms, hb_ms)).await,
        }
    }

    pub(crate) async fn renew(&self, gate: &GateName, id: &str, ttl_ms: u64) -> Result<Option<Grant>> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.renew(gate, id, ttl_ms)).await?,
            Backend::Redis(s) => Box::pin(s.renew(gate, id, ttl_ms)).await,
        }
    }

    pub(crate) async fn leave(&self, gate: &GateName, id: &str) -> Result<Left> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.leave(gate, id, None)).await?,
            Backend::Redis(s) => Box::pin(s.leave(gate, id, None)).await,
        }
    }

    /// `leave` of a held lease that passes its permits on to `to`, an
    /// acquire waiting in this process, in the same step if they are free
    /// for it then (no line left, room, admission control letting one in):
    /// the outcome, and `to`'s grant if it got one.
    pub(crate) async fn pass(
        &self,
        gate: &GateName,
        id: &str,
        to: &Pass<'_>,
    ) -> Result<(Left, Option<Grant>)> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.pass(gate, id, to)).await?,
            Backend::Redis(s) => Box::pin(s.pass(gate, id, to)).await,
        }
    }

    /// `leave`, and if a holder was released, its token recorded in the
    /// gate's revocation log for `keep_ms`, in the same step.
    pub(crate) async fn end(&self, gate: &GateName, id: &str, keep_ms: u64) -> Result<Left> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.leave(gate, id, Some(keep_ms))).await?,
            Backend::Redis(s) => Box::pin(s.leave(gate, id, Some(keep_ms))).await,
        }
    }

    /// The gate's epoch, stored settings and revocation log from `since`
    /// on; reads only.
    pub(crate) async fn watch_state(&self, gate: &GateName, since: u64) -> Result<GateWatch> {
        // Cursors are store time in ms × 1024, far below 2^53; a larger
        // `since` (never handed out) is cut there so the script's numbers
        // stay exact.
        let since = since.min(MAX_CURSOR);
        match &self.backend {
            Backend::Memory(s) => {
                s.read(|s| s.watch_state(gate, since, MAX_REVOKED_PER_WATCH))
                    .await
            }
            Backend::Redis(s) => Box::pin(s.watch_state(gate, since, MAX_REVOKED_PER_WATCH)).await,
        }
    }

    pub(crate) async fn set_capacity(&self, gate: &GateName, capacity: u32) -> Result<()> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.set_capacity(gate, capacity)).await?,
            Backend::Redis(s) => Box::pin(s.set_capacity(gate, capacity)).await,
        }
    }

    pub(crate) async fn holders(&self, gate: &GateName, limit: u32) -> Result<Vec<Holding>> {
        match &self.backend {
            Backend::Memory(s) => s.read(|s| s.holders(gate, limit)).await?,
            Backend::Redis(s) => Box::pin(s.holders(gate, limit)).await,
        }
    }

    pub(crate) async fn line(&self, gate: &GateName, limit: u32) -> Result<Vec<Waiting>> {
        match &self.backend {
            Backend::Memory(s) => s.read(|s| s.line(gate, limit)).await?,
            Backend::Redis(s) => Box::pin(s.line(gate, limit)).await,
        }
    }

    /// Ends the holder named by `handle` as `end` would, recorded in the
    /// revocation log for `keep_ms`.
    pub(crate) async fn revoke(&self, gate: &GateName, handle: &str, keep_ms: u64) -> Result<Left> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.revoke(gate, handle, keep_ms)).await?,
            Backend::Redis(s) => Box::pin(s.revoke(gate, handle, keep_ms)).await,
        }
    }

    pub(crate) async fn remove_waiter(&self, gate: &GateName, number: u64) -> Result<Left> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.remove_waiter(gate, number)).await?,
            Backend::Redis(s) => Box::pin(s.remove_waiter(gate, number)).await,
        }
    }

    pub(crate) async fn clear_line(&self, gate: &GateName) -> Result<u64> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.clear_line(gate)).await?,
            Backend::Redis(s) => Box::pin(s.clear_line(gate)).await,
        }
    }

    pub(crate) async fn stats(&self, gate: &GateName) -> Result<GateStats> {
        match &self.backend {
            Backend::Memory(s) => s.read(|s| s.stats(gate)).await?,
            Backend::Redis(s) => Box::pin(s.stats(gate)).await,
        }
    }

    /// Checks that the store answers (Redis: `PING`).
    pub async fn ping(&self) -> Result<()> {
        match &self.backend {
            Backend::Memory(_) => Ok(()),
            Backend::Redis(s) => Box::pin(s.ping()).await,
        }
    }

    /// Registers interest in `id` being granted. Registered before `enter`,
    /// so a hand-off can never be announced before anyone listens for it.
    /// Watches for permits freed on `gate` (a non-fair acquire waiting to
    /// barge in).
    pub(crate) fn watch_freed(&self, gate: &GateName) -> Watch {
        match &self.backend {
            Backend::Memory(s) => s.wakers().register(&memory_barge_key(gate)),
            Backend::Redis(s) => s.wakers().register(&s.barge_key(gate)),
        }
    }

    pub(crate) fn watch(&self, id: &str) -> Watch {
        let wakers = match &self.backend {
            Backend::Memory(s) => s.wakers(),
            Backend::Redis(s) => s.wakers(),
        };
        wakers.register(id)
    }

    /// Makes sure pushes to job queue `queue` wake consumers in this
    /// process (Redis: subscribes to the queue's channel).
    pub(crate) async fn listen_jobs(&self, queue: &Name) -> Result<Option<Listening>> {
        match &self.backend {
            Backend::Memory(_) => Ok(None),
            Backend::Redis(s) => Box::pin(s.listen_jobs(queue)).await.map(Some),
        }
    }

    /// The partition count in force for the sharded queue whose base name
    /// is `q`: stored with `q`, or 1 if `q` holds jobs, or none. With
    /// `store`, stores `want` in the same step if the count in force is
    /// `expect`, or there is none, or the jobs in `q` imply `want` (1).
    /// Answers the count in force afterwards (`want` if none) and whether
    /// it is stored.
    pub(crate) async fn job_layout(&self, q: &Name, layout: &jobs::Layout) -> Result<(u32, bool)> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.job_layout(q, layout)).await,
            Backend::Redis(s) => Box::pin(s.job_layout(q, layout)).await,
        }
    }

    /// Pushes a batch of jobs in one step.
    pub(crate) async fn job_push(
        &self,
        q: &Name,
        reqs: &[jobs::PushReq<'_>],
    ) -> Result<Vec<jobs::PushOutcome>> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.job_push(q, reqs)).await?,
            Backend::Redis(s) => Box::pin(s.job_push(q, reqs)).await,
        }
    }

    /// Closes queue `q` to pushes while it holds nothing (`close`), or
    /// opens it again, in one step. Answers whether that was done, and the
    /// ready, delayed, in-flight and dead counts.
    pub(crate) async fn job_retire(&self, q: &Name, close: bool) -> Result<(bool, [u64; 4])> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.job_retire(q, close)).await,
            Backend::Redis(s) => Box::pin(s.job_retire(q, close)).await,
        }
    }

    /// Acks the deliveries `claim.acks` (whether each was that
    /// delivery's), then claims up to `claim.max` jobs (none with 0), in
    /// one step.
    pub(crate) async fn job_claim(
        &self,
        q: &Name,
        claim: &jobs::Claim<'_>,
    ) -> Result<(Vec<bool>, jobs::ClaimOutcome)> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.job_claim(q, claim)).await,
            Backend::Redis(s) => Box::pin(s.job_claim(q, claim)).await,
        }
    }

    pub(crate) async fn job_done(&self, q: &Name, limit: usize) -> Result<Vec<jobs::RawDone>> {
        match &self.backend {
            Backend::Memory(s) => s.read(|s| s.job_done(q, limit)).await,
            Backend::Redis(s) => Box::pin(s.job_done(q, limit)).await,
        }
    }

    pub(crate) async fn job_nack(&self, q: &Name, nack: &jobs::Nack<'_>) -> Result<jobs::NackOutcome> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.job_nack(q, nack)).await,
            Backend::Redis(s) => Box::pin(s.job_nack(q, nack)).await,
        }
    }

    pub(crate) async fn job_extend(&self, q: &Name, extend: &jobs::Extend<'_>) -> Result<Option<u64>> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.job_extend(q, extend)).await,
            Backend::Redis(s) => Box::pin(s.job_extend(q, extend)).await,
        }
    }

    pub(crate) async fn job_cancel(&self, q: &Name, id: &str) -> Result<jobs::CancelOutcome> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.job_cancel(q, id)).await,
            Backend::Redis(s) => Box::pin(s.job_cancel(q, id)).await,
        }
    }

    pub(crate) async fn job_reschedule(
        &self,
        q: &Name,
        id: &str,
        when: jobs::When,
    ) -> Result<jobs::RescheduleOutcome> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.job_reschedule(q, id, when)).await,
            Backend::Redis(s) => Box::pin(s.job_reschedule(q, id, when)).await,
        }
    }

    pub(crate) async fn job_dead(&self, q: &Name, limit: usize) -> Result<Vec<jobs::RawDead>> {
        match &self.backend {
            Backend::Memory(s) => s.read(|s| s.job_dead(q, limit)).await,
            Backend::Redis(s) => Box::pin(s.job_dead(q, limit)).await,
        }
    }

    /// Job `id` of queue `q` as it stands (read only).
    pub(crate) async fn job_get(&self, q: &Name, id: &str, whole: bool) -> Result<Option<jobs::RawInfo>> {
        match &self.backend {
            Backend::Memory(s) => s.read(|s| s.job_get(q, id, whole)).await,
            Backend::Redis(s) => Box::pin(s.job_get(q, id, whole)).await,
        }
    }

    /// Up to `limit` jobs of queue `q` in `state`, from `from` (read only).
    pub(crate) async fn job_list(
        &self,
        q: &Name,
        state: jobs::RawState,
        from: Option<&jobs::ListFrom<'_>>,
        limit: usize,
    ) -> Result<Vec<jobs::RawInfo>> {
        match &self.backend {
            Backend::Memory(s) => s.read(|s| s.job_list(q, state, from, limit)).await,
            Backend::Redis(s) => Box::pin(s.job_list(q, state, from, limit)).await,
        }
    }

    pub(crate) async fn job_replay(&self, q: &Name, id: Option<&str>) -> Result<u64> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.job_replay(q, id)).await,
            Backend::Redis(s) => Box::pin(s.job_replay(q, id)).await,
        }
    }

    pub(crate) async fn job_purge(&self, q: &Name, id: Option<&str>) -> Result<u64> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.job_purge(q, id)).await,
            Backend::Redis(s) => Box::pin(s.job_purge(q, id)).await,
        }
    }

    pub(crate) async fn job_exists(&self, q: &Name) -> Result<bool> {
        match &self.backend {
            Backend::Memory(s) => s.read(|s| s.job_exists(q)).await,
            Backend::Redis(s) => Box::pin(s.job_exists(q)).await,
        }
    }

    /// Pauses queue `q` (`pause`: it takes pushes, claims get nothing) or
    /// resumes it, waking its sleeping consumers. Answers whether that
    /// changed it.
    /// A live feed of queue `q`'s events, first replaying those the store
    /// still holds after `since` (store/jobs/events.rs).
    pub(crate) async fn job_events(
        &self,
        q: &Name,
        since: Option<jobs::events::EventId>,
    ) -> Result<jobs::events::JobEvents> {
        match &self.backend {
            Backend::Memory(s) => Ok(s.job_events.subscribe_memory(q, since)),
            Backend::Redis(s) => Box::pin(self.job_events.subscribe_redis(s, q, since)).await,
        }
    }

    pub(crate) async fn job_pause(&self, q: &Name, pause: bool) -> Result<bool> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.job_pause(q, pause)).await,
            Backend::Redis(s) => Box::pin(s.job_pause(q, pause)).await,
        }
    }

    pub(crate) async fn job_stats(&self, q: &Name) -> Result<jobs::RawStats> {
        match &self.backend {
            Backend::Memory(s) => s.read(|s| s.job_stats(q)).await,
            Backend::Redis(s) => Box::pin(s.job_stats(q)).await,
        }
    }

    /// Records that schedule `name` lives with queue `q`; answers the
    /// queue it lived with before, if any.
    pub(crate) async fn schedule_index_set(&self, name: &str, q: &Name) -> Result<Option<String>> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.schedule_index_set(name, q)).await,
            Backend::Redis(s) => Box::pin(s.schedule_index_set(name, q)).await,
        }
    }

    pub(crate) async fn schedule_index_get(&self, name: &str) -> Result<Option<String>> {
        match &self.backend {
            Backend::Memory(s) => s.read(|s| s.schedule_index_get(name)).await,
            Backend::Redis(s) => Box::pin(s.schedule_index_get(name)).await,
        }
    }

    /// Forgets where schedule `name` lives if that is queue `q`.
    pub(crate) async fn schedule_index_drop(&self, name: &str, q: &Name) -> Result<bool> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.schedule_index_drop(name, q)).await,
            Backend::Redis(s) => Box::pin(s.schedule_index_drop(name, q)).await,
        }
    }

    /// The queues that have schedules.
    pub(crate) async fn schedule_queues(&self) -> Result<Vec<String>> {
        match &self.backend {
            Backend::Memory(s) => s.read(|s| s.schedule_queues()).await,
            Backend::Redis(s) => Box::pin(s.schedule_queues()).await,
        }
    }

    /// Takes `q`, found to hold no schedule, off the list of queues with
    /// schedules if no name points to it (a Redis index from before it
    /// counted them; the embedded store's never lists such a queue).
    pub(crate) async fn schedule_index_prune(&self, q: &Name) -> Result<bool> {
        match &self.backend {
            Backend::Memory(_) => Ok(false),
            Backend::Redis(s) => Box::pin(s.schedule_index_prune(q)).await,
        }
    }

    pub(crate) async fn schedule_put(
        &self,
        q: &Name,
        put: &schedule::Put<'_>,
    ) -> Result<schedule::PutOutcome> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.schedule_put(q, put)).await,
            Backend::Redis(s) => Box::pin(s.schedule_put(q, put)).await,
        }
    }

    /// The store's now and up to `limit` schedules of queue `q` due by it.
    pub(crate) async fn schedule_due(&self, q: &Name, limit: usize) -> Result<schedule::Due> {
        match &self.backend {
            Backend::Memory(s) => s.read(|s| s.schedule_due(q, limit)).await,
            Backend::Redis(s) => Box::pin(s.schedule_due(q, limit)).await,
        }
    }

    /// Fires ticks of schedules of queue `q`, each only if unchanged since
    /// read; answers the store's now and one outcome per schedule.
    pub(crate) async fn schedule_fire(
        &self,
        q: &Name,
        fires: &[schedule::Fire<'_>],
    ) -> Result<(u64, Vec<schedule::FireOutcome>)> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.schedule_fire(q, fires)).await,
            Backend::Redis(s) => Box::pin(s.schedule_fire(q, fires)).await,
        }
    }

    pub(crate) async fn schedule_trigger(
        &self,
        q: &Name,
        name: &str,
        rev: u64,
        job: &schedule::JobSpec,
    ) -> Result<schedule::TriggerOutcome> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.schedule_trigger(q, name, rev, job)).await,
            Backend::Redis(s) => Box::pin(s.schedule_trigger(q, name, rev, job)).await,
        }
    }

    pub(crate) async fn schedule_pause(&self, q: &Name, name: &str, pause: bool) -> Result<bool> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.schedule_pause(q, name, pause)).await,
            Backend::Redis(s) => Box::pin(s.schedule_pause(q, name, pause)).await,
        }
    }

    pub(crate) async fn schedule_delete(&self, q: &Name, name: &str) -> Result<bool> {
        match &self.backend {
            Backend::Memory(s) => s.write(|s| s.schedule_delete(q, name)).await,
            Backend::Redis(s) => Box::pin(s.schedule_delete(q, name)).await,
        }
    }

    pub(crate) async fn schedule_get(&self, q: &Name, name: &str) -> Result<Option<schedule::RawSchedule>> {
        match &self.backend {
            Backend::Memory(s) => s.read(|s| s.schedule_get(q, name)).await,
            Backend::Redis(s) => Box::pin(s.schedule_get(q, name)).await,
        }
    }

    pub(crate) async fn schedule_list(&self, q: &Name) -> Result<Vec<schedule::RawSchedule>> {
        match &self.backend {
            Backend::Memory(s) => s.read(|s| s.schedule_list(q)).await,
            Backend::Redis(s) => Box::pin(s.schedule_list(q)).await,
        }
    }

    /// Adds `name` to the registry of `kind` unless this process did so
    /// lately. Best effort: a failure is logged and tried again at the
    /// next use, never the operation's failure (the name would only be
    /// missing from listings).
    /// [`Store::register`] once an operation on `name` has succeeded
    /// (`out`): not when the store was not reached (a frozen Redis must
    /// cost a caller one timeout, not two), nor when it refused.
    pub(crate) async fn register_after<T>(&self, kind: registry::Kind, name: &Name, out: &Result<T>) {
        // A refusal (no capacity, a conflict) writes nothing: neither does
        // it register.
        if out.is_ok() {
            self.register(kind, name).await;
        }
    }

    pub(crate) async fn register(&self, kind: registry::Kind, name: &Name) {
        // The embedded store lists the names it holds state for.
        let Backend::Redis(s) = &self.backend else {
            return;
        };
        if !self.registry.due(kind, name.as_str()) {
            return;
        }
        if let Err(e) = Box::pin(s.registry_add(kind, name.as_str())).await {
            tracing::debug!(name = %name, error = %e, "could not register the name; will again");
            self.registry.forget(kind, name.as_str());
        }
    }

    /// Removes `name` from the registry of `kind` (its state is gone).
    pub(crate) async fn unregister(&self, kind: registry::Kind, name: &str) -> Result<()> {
        match &self.backend {
            Backend::Memory(_) => Ok(()),
            Backend::Redis(s) => {
                self.registry.forget(kind, name);
                Box::pin(s.registry_remove(kind, name)).await
            }
        }
    }

    /// Up to `limit` registered names of `kind` starting with `prefix`, in
    /// byte order, after `after` if given (the embedded store: the names
    /// it holds state for, a sharded queue's partitions left out).
    pub(crate) async fn registered(
        &self,
        kind: registry::Kind,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>> {
        match &self.backend {
            Backend::Memory(s) => Ok(match kind {
                registry::Kind::Gates => s.gates.names(prefix, after, limit, |_| true),
                registry::Kind::Queues => s
                    .queues
                    .names(prefix, after, limit, |n| !registry::is_partition(n)),
            }),
            Backend::Redis(s) => Box::pin(s.registry_range(kind, prefix, after, limit)).await,
        }
    }

    /// Makes sure hand-offs on `gate` reach this process. `asked` is when
    /// the caller sent the request it waits on; [`Listening::fresh`] is
    /// `true` when this process may not have been listening since then,
    /// in which case a hand-off may have been announced unheard and the
    /// caller should poll once.
    pub(crate) async fn listen(
        &self,
        gate: &GateName,
        asked: tokio::time::Instant,
    ) -> Result<Option<Listening>> {
        match &self.backend {
            Backend::Memory(_) => Ok(None),
            Backend::Redis(s) => Box::pin(s.listen(gate, asked)).await.map(Some),
        }
    }
}

/// How many names the embedded store holds state for
/// ([`Store::memory_footprint`]). Reads never add to these; idle names
/// leave them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryFootprint {
    /// Gates with state (holders, waiters, settings or a revocation log).
    pub gates: usize,
    /// Job queues with state.
    pub queues: usize,
    /// Rate-limit keys stored (those whose budget is fully restored go at
    /// the next sweep).
    pub limit_keys: usize,
}

/// The key barging waiters of a gate on the memory store watch (ticket ids
/// are letters and digits, so it names no ticket).
pub(crate) fn memory_barge_key(gate: &Name) -> String {
    format!("gate {gate}")
}
