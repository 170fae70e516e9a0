//! The Redis store: every operation is one Lua script (EVALSHA, loaded again
//! on NOSCRIPT), all keys of a gate share one hash tag, and every deadline is
//! computed from `redis.call('TIME')` inside the script.
//!
//! Two connections per store: a multiplexed command connection (concurrent
//! callers are pipelined on it) and a RESP3 connection that only listens for
//! hand-off messages. Both reconnect by themselves.
//!
//! On Redis Cluster (`redis+cluster://host:port,host:port`) both are
//! cluster connections: scripts go to the node that owns their hash tag's
//! slot (following MOVED and ASK), and notifications use sharded pub/sub
//! (`SPUBLISH` in the scripts, `SSUBSCRIBE` here), which stays within the
//! slot's shard and follows it when it moves.
//!
//! This folder owns the connection and the calls only: `conn.rs` (targets,
//! URLs), `sentinel.rs` (a Sentinel-named master), `script.rs` (the scripts,
//! EVALSHA, NOSCRIPT, the durable WAIT pipeline), `pubsub.rs` (the
//! listener). Each primitive's arguments and replies are encoded and decoded
//! beside its Lua: `gate/redis.rs`, `jobs/redis.rs`, `schedule/redis.rs`,
//! `limit/redis.rs`.

mod batch;
mod call;
mod conn;
mod pubsub;
mod report;
mod script;
mod sentinel;
mod version;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;

use crate::error::{Error, ErrorKind, Result};
use crate::store::wakers::Wakers;

pub(crate) use self::batch::ready_ones_first;
pub use self::conn::RedisConfig;
use self::conn::{Conn, Target, check_url, cluster_builder, cluster_nodes, manager_config, sentinel_parts};
pub(crate) use self::pubsub::Listening;
use self::pubsub::Subscriptions;
use self::report::connect_error;
use self::script::{Durable, Scripts};
use self::sentinel::SentinelMaster;
use self::version::{check_cluster_versions, check_server};

pub(crate) struct RedisStore {
    conn: Conn,
    /// On one server (not a Cluster or through Sentinel): script calls
    /// written together (batch.rs).
    batch: Option<Arc<batch::Batcher>>,
    /// `RedisConfig::response_timeout`: no operation takes longer (a
    /// durable one: plus its WAIT's timeout).
    pub(crate) timeout: Duration,
    /// `RedisConfig::idle`: how long the registry of names outlives its
    /// last registration.
    pub(crate) idle: Duration,
    pub(crate) prefix: String,
    pub(crate) scripts: Arc<Scripts>,
    wakers: Arc<Wakers>,
    /// Passes of a gate waiting to go out together (gate/redis.rs, `pass`).
    pub(crate) passes: Arc<crate::gate::pass_groups::PassGroups>,
    subs: Arc<Subscriptions>,
    /// How to open another command connection (for durable handles).
    target: Arc<Target>,
    durable: Option<Durable>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Counts one more listener on `channel` for as long as the returned
    /// guard lives (see `Subscriptions::listen`).
    pub(crate) async fn subscribe(&self, channel: &str, asked: tokio::time::Instant) -> Result<Listening> {
        self.subs.listen(channel, asked).await
    }
    pub(crate) async fn connect(config: RedisConfig) -> Result<Self> {
        config.check()?;
        if let Some(nodes) = cluster_nodes(&config.url) {
            return RedisStore::connect_cluster(nodes?, config).await;
        }
        if let Some(parts) = sentinel_parts(&config.url) {
            let (sentinels, name, template) = parts?;
            let manager_config = manager_config(&config);
            let master =
                SentinelMaster::start(sentinels, name, template, manager_config, config.response_timeout)
                    .await?;
            return Ok(RedisStore::with_target(
                Conn::Sentinel(master.clone()),
                Target::Sentinel(master),
                &config,
                false,
            ));
        }
        // Small requests should not wait on Nagle's algorithm (TCP_NODELAY,
        // as most Redis clients set it; redis-rs leaves it off by default).
        let info = check_url(&config.url)?;
        let tcp = info.tcp_settings().clone().set_nodelay(true);
        let info = info.set_tcp_settings(tcp);
        let client = redis::Client::open(info.clone())
            .map_err(|e| Error::invalid("unusable Redis URL").with_source(e))?;
        let manager_config = manager_config(&config);
        let mut conn = ConnectionManager::new_with_config(client, manager_config.clone())
            .await
            .map_err(|e| connect_error(e, "Redis", &config.url))?;
        check_server(&mut conn, &config.url).await?;
        Ok(RedisStore::with_target(
            Conn::Single(conn),
            Target::Single(Box::new((info, manager_config, config.response_timeout))),
            &config,
            false,
        ))
    }

    /// A store on `conn`, which `target` describes; `cluster` switches the
    /// scripts to sharded pub/sub.
    fn with_target(conn: Conn, target: Target, config: &RedisConfig, cluster: bool) -> RedisStore {
        let wakers = Arc::<Wakers>::default();
        let target = Arc::new(target);
        let subs = Subscriptions::start(target.clone(), wakers.clone());
        let batch = match &conn {
            Conn::Single(c) => Some(Arc::new(batch::Batcher::start(c.clone()))),
            _ => None,
        };
        RedisStore {
            conn,
            batch,
            timeout: config.response_timeout,
            idle: config.idle,
            prefix: config.prefix.clone(),
            scripts: Arc::new(Scripts::new(cluster, config.idle)),
            target,
            durable: None,
            subs,
            wakers,
            passes: Arc::default(),
        }
    }

    async fn connect_cluster(nodes: Vec<String>, config: RedisConfig) -> Result<Self> {
        let client = cluster_builder(&nodes, &config)
            .build()
            .map_err(|e| Error::invalid("unusable Redis Cluster URL").with_source(e))?;
        let mut conn = client
            .get_async_connection()
            .await
            .map_err(|e| connect_error(e, "the Redis Cluster", &config.url))?;
        check_cluster_versions(&mut conn, &config.url).await?;
        Ok(RedisStore::with_target(
            Conn::Cluster(conn),
            Target::Cluster(nodes, config.clone()),
            &config,
            true,
        ))
    }

    pub(crate) fn is_durable(&self) -> bool {
        self.durable.is_some()
    }

    pub(crate) fn wakers(&self) -> Arc<Wakers> {
        self.wakers.clone()
    }

    pub(crate) async fn ping(&self) -> Result<()> {
        let mut conn = self.conn.clone();
        self.within(self.timeout, async move {
            let _: String = redis::cmd("PING").query_async(&mut conn).await?;
            Ok(())
        })
        .await
    }

    /// Runs one plain command (no script) within the response timeout.
    pub(crate) async fn command<T: redis::FromRedisValue>(&self, cmd: redis::Cmd) -> Result<T> {
        let mut conn = self.conn.clone();
        self.within(self.timeout, async move { Ok(cmd.query_async(&mut conn).await?) })
            .await
    }
}

/// The error for a script reply of a shape the caller does not know.
pub(crate) fn unexpected(op: &str, reply: &(impl std::fmt::Debug + ?Sized)) -> Error {
    Error::new(ErrorKind::Store, format!("unexpected reply to {op}: {reply:?}"))
}
