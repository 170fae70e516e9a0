//! Where state lives: the `Store` handle and its backends, the embedded
//! store (`memory/`) and Redis (`redis/`), with what every primitive shares
//! on them: `wakers.rs` (the per-process wake-up table), `timers.rs` (the
//! one task that renews a store's leases), `registry/` (the names listings
//! page through).
//!
//! Each primitive's operations are `impl Store` blocks in its own folder
//! (`gate/dispatch.rs`, `jobs/dispatch.rs`, `schedule/dispatch.rs`,
//! `limit/dispatch.rs`): every one is one atomic step, one critical
//! section in memory or one Lua script on Redis; callers never combine
//! reads and writes themselves.
//!
//! The rules every store keeps:
//!
//! - **Time.** Redis scripts read `TIME`; the memory store reads its `Clock`.
//!   A `Lease` keeps a local, conservative deadline (measured from before the
//!   request was sent) so `lost()` fires no later than the store's expiry.
//! - **Bounded work per operation.** Expiry removes at most 1,000 ended
//!   leases per call (memory and Lua alike, the earliest first), like the
//!   line's stale-ticket sweep; the rest go in later calls. Until swept an
//!   ended lease still counts as held, so its permits are not granted twice;
//!   an operation on that very lease (renew, leave, end, status) expires it
//!   first (`expire_one`), and `holders` does not list it. In memory a
//!   ticket's position is a Fenwick prefix sum (O(log n)); the line is
//!   renumbered in O(n) once departed slots outnumber the waiters (O(1) per
//!   departure on average, and only that gate waits for it). Each gate and
//!   queue has its own lock, so no request holds up another gate.
//! - **One deadline per call on Redis.** Every store call (script, WAIT,
//!   PING) runs under one `response_timeout` (a durable one: plus its WAIT
//!   timeout), whatever the connection does inside it (a reconnect's
//!   retries, a NOSCRIPT reload); a sharded queue's partition re-check that
//!   finds Redis unreachable fails the call at once instead of sending it
//!   anyway (a push during a freeze took two timeouts).
//! - **Reads never create state.** On Redis a script writes the meta hash
//!   only when something changed (and a watch cannot write at all); in
//!   memory an operation on a name without state runs on a blank one that
//!   is kept only if the operation wrote to it (`is_blank`), and a rate-limit
//!   decision stores a key only when it spends budget.
//!   `Store::memory_footprint` counts what the embedded store holds.
//! - **Idle state is dropped.** Memory: each gate and job queue sits on a
//!   `Shelf` under its own lock (the map's lock is held only to look up,
//!   insert, or sweep a few names), with one due time per name; every
//!   operation looks at up to 8 due names and drops those quiet for
//!   `MemoryOptions::idle` (default 10 min): no writing operation, and
//!   every deadline they held (lease, ticket, kept revocation, admission
//!   slot) passed that long ago. Reads and heartbeats (stats, holders,
//!   status, queue stats) are not activity, so a metrics scraper does not
//!   keep an idle gate alive; a heartbeat's effect is its moved deadline. A queue is kept while it holds any job, a
//!   partition layout of more than one partition, a retired flag (forgetting
//!   those would send pushes where no consumer looks), a pause or a
//!   schedule. Rate-limit keys whose budget is fully
//!   restored go the same way (one due time per key). A dropped state's
//!   fence raises a store-wide floor, so a gate created anew never hands out
//!   a fence it handed before. Redis: the meta hash lives `RedisConfig::idle`
//!   past every deadline its keys hold and its last change (field G
//!   remembers its expiry, set an idle / 4 beyond the need, so an active
//!   gate pays one PEXPIREAT per idle / 4; a call that changes nothing does
//!   not extend it); the other keys already expire with their last
//!   deadline. A queue's meta hash (and lateness list) expires `idle` after
//!   the queue was last found holding nothing (queue.lua's `settle`: an
//!   empty claim, an ack on its own, a cancel, purge, resume or schedule
//!   delete that may have emptied it), unless it is paused, retired or
//!   partitioned or has a schedule, as memory keeps those; whatever puts
//!   something in it again (a push, a pause, a layout, a schedule) makes
//!   it permanent again (`revive`, read with the push's own HMGET). A
//!   watch of a queue without state marks a meta hash that expires with
//!   the watch, so reads leave no lasting key.
//!   Fences need no key to survive: each is above server time × 1000. A
//!   dropped gate loses its stored capacity and admission settings; its next
//!   write starts a new epoch, which is how whoever configures it knows to
//!   set them again.

pub(crate) mod embedded;
pub(crate) mod lua;
pub(crate) mod memory;
pub(crate) mod redis;
pub(crate) mod registry;
pub(crate) mod timers;
mod wakers;

use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::gate::bargers::Bargers;
use crate::jobs::events::Hub;
use crate::name::Name;

pub use self::embedded::recovery::{check_data_dir, repair_data_dir};
pub use self::memory::durable::{
    DEFAULT_REBUILD_ABOVE, DEFAULT_SNAPSHOT_AFTER, DataCheck, DurableOptions, DurableStats, Recovery,
    SegmentCheck,
};
pub use self::memory::journal::{Fsync, JournalStats};
pub use self::memory::{MemoryFootprint, MemoryOptions};
pub(crate) use self::redis::Listening;
pub use self::redis::RedisConfig;
pub(crate) use self::wakers::{Wakers, Watch};

/// Where gate state lives. Cheap to clone; clones share connections.
#[derive(Debug, Clone)]
pub struct Store {
    pub(crate) backend: Backend,
    /// The names registered lately (and on the memory store, the registry).
    registry: Arc<registry::Registry>,
    /// Redis: the job queues this process watches (the memory store keeps
    /// its own, published from its critical sections).
    pub(crate) job_events: Arc<Hub>,
    /// The one task that renews this store's leases (`timers.rs`).
    timers: Arc<timers::Timers>,
    /// Non-fair acquires waiting in this process (`passing.rs`).
    bargers: Arc<Bargers>,
}

/// The Redis arms of the dispatch below box their futures: a Redis call's
/// future is kilobytes (the client's), and inline it would make every
/// future that calls the store that large, even on the embedded store, and
/// keep it that large while it waits (a long-poll parks for a minute). The
/// box is one allocation per network round trip.
#[derive(Debug, Clone)]
pub(crate) enum Backend {
    Memory(Arc<embedded::state::MemoryStore>),
    Redis(Arc<redis::RedisStore>),
}

/// The one list of backends, for the primitives' dispatch: runs `$call`
/// with `$b` bound to the backend this store has, the embedded store's
/// view of one primitive's state (`$view`: `gates`, `jobs`, `schedules`,
/// `limits`) or Redis, whose futures are boxed (see [`Backend`]). A new
/// backend is a variant of `Backend`, an arm here, and an implementation
/// of each primitive's backend trait (`<primitive>/backend.rs`).
macro_rules! on_backend {
    ($store:expr, $view:ident, $b:ident => $call:expr) => {
        match &$store.backend {
            $crate::store::Backend::Memory(s) => {
                let $b = &s.$view();
                $call.await
            }
            $crate::store::Backend::Redis($b) => Box::pin($call).await,
        }
    };
}
pub(crate) use on_backend;

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
        let inner = Arc::new(embedded::state::MemoryStore::new(memory));
        let recovery = embedded::recovery::open(&inner, &options)?;
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
            Backend::Memory(s) => embedded::recovery::take_snapshot(s),
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
        Store::memory_store_from(Arc::new(embedded::state::MemoryStore::new(options)))
    }

    fn memory_store_from(inner: Arc<embedded::state::MemoryStore>) -> Store {
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
    pub(crate) fn bargers(&self) -> &Arc<Bargers> {
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

    /// Checks that the store answers (Redis: `PING`).
    pub async fn ping(&self) -> Result<()> {
        match &self.backend {
            Backend::Memory(_) => Ok(()),
            Backend::Redis(s) => Box::pin(s.ping()).await,
        }
    }

    /// Registers interest in `id` being granted. Registered before `enter`,
    /// so a hand-off can never be announced before anyone listens for it.
    pub(crate) fn watch(&self, id: &str) -> Watch {
        let wakers = match &self.backend {
            Backend::Memory(s) => s.wakers(),
            Backend::Redis(s) => s.wakers(),
        };
        wakers.register(id)
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
}
