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

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, IntoConnectionInfo, Msg, Pipeline, ProtocolVersion, PushKind, RedisFuture, Script, Value};
use tokio::sync::Mutex as AsyncMutex;

use crate::error::{Error, ErrorKind, Result};
use crate::limit::{Algorithm, Decision, Limit, decision};

use super::jobs::{
    CancelOutcome, ClaimOutcome, Keep, LATENESS_BOUNDS_MS, NackOutcome, PushOutcome, PushReq, RawDead,
    RawDone, RawJob, RawStats, RescheduleOutcome, When,
};
use crate::name::Name;

use super::{
    EnterRequest, Entry, GateStats, GateWatch, Grant, Holding, Left, Listening, Occupancy, Place, Poll,
    Wakers,
};

/// A gate script: head (time, meta), an optional fast path, the general
/// path's prelude, and the operation's body.
macro_rules! gate_script {
    ($body:literal) => {
        concat!(
            include_str!("lua/head.lua"),
            "\n",
            include_str!("lua/prelude.lua"),
            "\n",
            include_str!($body)
        )
    };
    ($fast:literal, $body:literal) => {
        concat!(
            include_str!("lua/head.lua"),
            "\n",
            include_str!($fast),
            "\n",
            include_str!("lua/prelude.lua"),
            "\n",
            include_str!($body)
        )
    };
}

struct Scripts {
    enter: Script,
    poll: Script,
    renew: Script,
    leave: Script,
    set_capacity: Script,
    stats: Script,
    holders: Script,
    limit: Script,
    set_admission: Script,
    watch: Script,
    jobs: Script,
}

impl Scripts {
    fn all(&self) -> [&Script; 11] {
        [
            &self.enter,
            &self.poll,
            &self.renew,
            &self.leave,
            &self.set_capacity,
            &self.stats,
            &self.holders,
            &self.limit,
            &self.set_admission,
            &self.watch,
            &self.jobs,
        ]
    }

    /// The scripts; on a cluster they publish with `SPUBLISH` (sharded);
    /// a gate's meta hash outlives its last deadline by `idle`.
    fn new(cluster: bool, idle: Duration) -> Self {
        let script = |text: &str| {
            let text = text.replace(
                "local IDLE = 600000",
                &format!("local IDLE = {}", idle.as_millis()),
            );
            if cluster {
                Script::new(&text.replace("redis.call('PUBLISH'", "redis.call('SPUBLISH'"))
            } else {
                Script::new(&text)
            }
        };
        Scripts {
            enter: script(gate_script!("lua/enter_fast.lua", "lua/enter.lua")),
            poll: script(gate_script!("lua/poll.lua")),
            renew: script(gate_script!("lua/renew.lua")),
            leave: script(gate_script!("lua/leave_fast.lua", "lua/leave.lua")),
            set_capacity: script(gate_script!("lua/set_capacity.lua")),
            stats: script(gate_script!("lua/stats.lua")),
            holders: script(gate_script!("lua/holders.lua")),
            limit: script(include_str!("lua/limit.lua")),
            set_admission: script(gate_script!("lua/set_admission.lua")),
            // Alone: no prelude, since a watch must not expire or write.
            watch: script(include_str!("lua/watch.lua")),
            jobs: script(include_str!("lua/jobs.lua")),
        }
    }
}

/// The command connection: one server (reconnecting by itself) or a
/// cluster (routing by slot, following topology changes).
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    /// The master a set of Sentinels names, followed across failovers.
    Sentinel(Arc<SentinelMaster>),
}

impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
            Conn::Sentinel(m) => {
                let m = m.clone();
                Box::pin(async move {
                    let mut c = m.connection().await?;
                    let r = c.req_packed_command(cmd).await;
                    m.check_after(&r);
                    r
                })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Sentinel(m) => {
                let m = m.clone();
                Box::pin(async move {
                    let mut c = m.connection().await?;
                    let r = c.req_packed_commands(pipeline, offset, count).await;
                    m.check_after(&r);
                    r
                })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Sentinel(m) => m.template.redis_settings().db(),
        }
    }
}

/// The seed nodes of a `redis+cluster://` or `rediss+cluster://` URL, as
/// plain node URLs; `None` for any other URL.
fn cluster_nodes(url: &str) -> Option<Result<Vec<String>>> {
    let lower = url.to_ascii_lowercase();
    let (scheme, rest) = if lower.starts_with("redis+cluster://") {
        ("redis", &url["redis+cluster://".len()..])
    } else if lower.starts_with("rediss+cluster://") {
        ("rediss", &url["rediss+cluster://".len()..])
    } else {
        return None;
    };
    let (rest, fragment) = match rest.split_once('#') {
        Some((r, f)) => (r, format!("#{f}")),
        None => (rest, String::new()),
    };
    let (auth, hosts) = match rest.rsplit_once('@') {
        Some((a, h)) => (format!("{a}@"), h),
        None => (String::new(), rest),
    };
    let hosts = hosts.trim_end_matches('/');
    let nodes: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| format!("{scheme}://{auth}{h}{fragment}"))
        .collect();
    if nodes.is_empty() || hosts.contains('/') {
        return Some(Err(Error::invalid(format!(
            "{:?}: a cluster URL is redis+cluster://[user:pass@]host:port[,host:port…] (no database)",
            redacted(url)
        ))));
    }
    for node in &nodes {
        if let Err(e) = node.as_str().into_connection_info() {
            return Some(Err(Error::invalid(format!(
                "malformed node {:?} in {:?}",
                redacted(node),
                redacted(url)
            ))
            .with_source(e)));
        }
    }
    Some(Ok(nodes))
}

/// The Sentinels, master name and Redis settings of a
/// `redis+sentinel://[user:pass@]host:port[,host:port…]/<master>[/<db>]`
/// URL; `None` for any other URL.
fn sentinel_parts(url: &str) -> Option<Result<(Vec<redis::ConnectionInfo>, String, redis::ConnectionInfo)>> {
    let prefix = "redis+sentinel://";
    if !url.to_ascii_lowercase().starts_with(prefix) {
        return None;
    }
    let bad = || {
        Error::invalid(format!(
            "{:?}: a Sentinel URL is redis+sentinel://[user:pass@]host:port[,host:port…]/<master name>[/<db>]",
            redacted(url)
        ))
    };
    let rest = &url[prefix.len()..];
    let (auth, rest) = match rest.rsplit_once('@') {
        Some((a, r)) => (format!("{a}@"), r),
        None => (String::new(), rest),
    };
    let mut parts = rest.split('/');
    let hosts = parts.next().unwrap_or_default();
    let Some(master) = parts.next().filter(|m| !m.is_empty()) else {
        return Some(Err(bad()));
    };
    let db = parts.next().unwrap_or("0");
    if parts.next().is_some() || hosts.is_empty() {
        return Some(Err(bad()));
    }
    let mut sentinels = Vec::new();
    for host in hosts.split(',').map(str::trim).filter(|h| !h.is_empty()) {
        match format!("redis://{host}").into_connection_info() {
            Ok(info) => sentinels.push(info),
            Err(e) => return Some(Err(bad().with_source(e))),
        }
    }
    // The master's settings (auth, database); its address comes from the
    // Sentinels.
    let template = match format!("redis://{auth}sentinel-master:6379/{db}").into_connection_info() {
        Ok(info) => info,
        Err(e) => return Some(Err(bad().with_source(e))),
    };
    if sentinels.is_empty() {
        return Some(Err(bad()));
    }
    Some(Ok((sentinels, master.to_owned(), template)))
}

/// The master that a set of Sentinels names. It asks them again every
/// second and after any error that hints at a failover (unreachable,
/// READONLY, MASTERDOWN), and moves its connection to the new master;
/// `generation` counts the moves (subscriptions follow it).
struct SentinelMaster {
    sentinels: Vec<redis::ConnectionInfo>,
    name: String,
    template: redis::ConnectionInfo,
    config: ConnectionManagerConfig,
    /// The response timeout `config` carries.
    response_timeout: Duration,
    /// A refresh is queued or running (failing calls ask for one each).
    refresh_pending: std::sync::atomic::AtomicBool,
    current: std::sync::Mutex<Option<(redis::ConnectionAddr, ConnectionManager)>>,
    refreshing: AsyncMutex<()>,
    generation: tokio::sync::watch::Sender<u64>,
}

impl SentinelMaster {
    /// Finds the master now and keeps following it while the handle lives.
    async fn start(
        sentinels: Vec<redis::ConnectionInfo>,
        name: String,
        template: redis::ConnectionInfo,
        config: ConnectionManagerConfig,
        response_timeout: Duration,
    ) -> Result<Arc<SentinelMaster>> {
        let master = Arc::new(SentinelMaster {
            sentinels,
            name,
            template,
            config,
            response_timeout,
            refresh_pending: std::sync::atomic::AtomicBool::new(false),
            current: std::sync::Mutex::new(None),
            refreshing: AsyncMutex::new(()),
            generation: tokio::sync::watch::Sender::new(0),
        });
        master.refresh().await?;
        let weak = Arc::downgrade(&master);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let Some(master) = weak.upgrade() else { return };
                let _ = master.refresh().await;
            }
        });
        Ok(master)
    }

    /// Asks the Sentinels in turn for the master's address.
    async fn ask(&self) -> Result<redis::ConnectionAddr> {
        let mut last = None;
        for sentinel in &self.sentinels {
            let answer = async {
                let client = redis::Client::open(sentinel.clone())?;
                let mut conn = client.get_multiplexed_async_connection().await?;
                let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(&self.name)
                    .query_async(&mut conn)
                    .await?;
                Ok::<_, redis::RedisError>(addr)
            };
            match tokio::time::timeout(Duration::from_secs(2), answer).await {
                Ok(Ok(Some((host, port)))) => return Ok(redis::ConnectionAddr::Tcp(host, port)),
                Ok(Ok(None)) => last = Some(format!("no Sentinel knows a master named {:?}", self.name)),
                Ok(Err(e)) => last = Some(format!("Sentinel {}: {e}", sentinel.addr())),
                Err(_) => last = Some(format!("Sentinel {} did not answer", sentinel.addr())),
            }
        }
        Err(Error::new(
            ErrorKind::Unavailable,
            last.unwrap_or_else(|| "no Sentinel answered".to_owned()),
        ))
    }

    /// Moves to the master the Sentinels name, if it changed.
    async fn refresh(&self) -> Result<()> {
        let _one = self.refreshing.lock().await;
        let addr = self.ask().await?;
        if self.current().is_some_and(|(a, _)| a == addr) {
            return Ok(());
        }
        let client = redis::Client::open(self.template.clone().set_addr(addr.clone()))?;
        let conn = ConnectionManager::new_with_config(client, self.config.clone()).await?;
        let moved = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .replace((addr, conn))
            .is_some();
        if moved {
            self.generation.send_modify(|g| *g += 1);
        }
        Ok(())
    }

    /// The current master's address.
    fn addr(&self) -> Option<redis::ConnectionAddr> {
        self.current().map(|(a, _)| a)
    }

    /// The master's address and the connection to it, if one is known.
    fn current(&self) -> Option<(redis::ConnectionAddr, ConnectionManager)> {
        self.current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    async fn connection(&self) -> redis::RedisResult<ConnectionManager> {
        let not_connected =
            |why: String| redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::NotConnected, why));
        if self.current().is_none() {
            self.refresh().await.map_err(|e| not_connected(e.to_string()))?;
        }
        self.current()
            .map(|(_, c)| c)
            .ok_or_else(|| not_connected("no master known yet".to_owned()))
    }

    /// After an error that hints at a failover, asks the Sentinels again
    /// (in the background; this call still fails, and the next one goes to
    /// the new master).
    fn check_after<T>(self: &Arc<Self>, r: &redis::RedisResult<T>) {
        let Err(e) = r else { return };
        let hint = e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_timeout()
            || matches!(
                e.kind(),
                redis::ErrorKind::Server(
                    redis::ServerErrorKind::ReadOnly | redis::ServerErrorKind::MasterDown
                )
            );
        // One refresh at a time, however many calls fail meanwhile.
        if hint
            && !self
                .refresh_pending
                .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            let master = self.clone();
            tokio::spawn(async move {
                let _ = master.refresh().await;
                master
                    .refresh_pending
                    .store(false, std::sync::atomic::Ordering::Release);
            });
        }
    }
}

/// A cluster client for `nodes`, with `config`'s timeouts. Retries wait
/// 20–500 ms (redis-rs waits at least 1.28 s by default), so a request
/// fails fast while a slot has no master, and the first one after a
/// replica's promotion reaches it at once.
fn cluster_builder(nodes: &[String], config: &RedisConfig) -> ClusterClientBuilder {
    ClusterClientBuilder::new(nodes.to_vec())
        .connection_timeout(config.connect_timeout)
        .response_timeout(config.response_timeout)
        .retries(3)
        .min_retry_wait(20)
        .max_retry_wait(500)
}

/// How to reach Redis. Build with [`RedisConfig::new`] and adjust fields.
#[derive(Debug, Clone)]
pub struct RedisConfig {
    /// `redis://[user:pass@]host:port[/db]`, `rediss://…` for TLS,
    /// `redis+unix:///path/to/socket` / `unix:///path`, a Redis Cluster:
    /// `redis+cluster://[user:pass@]host:port[,host:port…]` (seed nodes;
    /// `rediss+cluster://` for TLS), or a master that Sentinels name:
    /// `redis+sentinel://[user:pass@]host:port[,host:port…]/<master>[/<db>]`.
    pub url: String,
    /// Prefix of every key and channel. Default `tollgate`. Letters, digits
    /// and `_ - . :` only.
    pub prefix: String,
    /// How long one operation may take before it fails as unavailable.
    /// Default 5 s.
    pub response_timeout: Duration,
    /// How long connecting may take. Default 5 s.
    pub connect_timeout: Duration,
    /// How long a gate's keys outlive the last deadline they hold (a
    /// lease's end, a waiter's heartbeat deadline, a kept revocation) and
    /// the last operation on it: then every key of the idle gate has
    /// expired, its stored capacity and admission settings with it (its
    /// next write starts a new epoch; fences keep growing, since they
    /// start from server time). Default 10 minutes; 1 s to 30 days. Every
    /// handle on one Redis should use the same value.
    pub idle: Duration,
}

impl RedisConfig {
    /// The defaults, for `url`.
    pub fn new(url: impl Into<String>) -> Self {
        RedisConfig {
            url: url.into(),
            prefix: "tollgate".to_owned(),
            response_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            idle: Duration::from_secs(600),
        }
    }
}

pub(crate) struct RedisStore {
    conn: Conn,
    /// `RedisConfig::response_timeout`: no operation takes longer (a
    /// durable one: plus its WAIT's timeout).
    timeout: Duration,
    prefix: String,
    scripts: Arc<Scripts>,
    wakers: Arc<Wakers>,
    subs: Arc<Subscriptions>,
    /// How to open another command connection (for durable handles).
    target: Arc<Target>,
    durable: Option<Durable>,
}

/// A durable handle's settings and its own connection.
struct Durable {
    replicas: u32,
    timeout: Duration,
    conn: Conn,
    /// Through Sentinel: 1 + the master generation the scripts were last
    /// loaded on (0: never). A NOSCRIPT costs a whole WAIT when replicas
    /// are missing, as they are right after a failover, so a new master
    /// gets every script first.
    loaded: std::sync::atomic::AtomicU64,
}

/// Where a store's connections go.
enum Target {
    /// One server: connection info and the manager's settings.
    /// (with the response timeout those settings carry).
    Single(Box<(redis::ConnectionInfo, ConnectionManagerConfig, Duration)>),
    /// A cluster: its seed nodes and settings.
    Cluster(Vec<String>, RedisConfig),
    /// The master of a Sentinel-managed set.
    Sentinel(Arc<SentinelMaster>),
}

impl Target {
    /// A new command connection whose requests may take `extra` longer than
    /// the store's response timeout (a WAIT's own timeout).
    async fn connect(&self, extra: Duration) -> Result<Conn> {
        match self {
            Target::Single(single) => {
                let (info, config, timeout) = single.as_ref();
                let client = redis::Client::open(info.clone())?;
                let config = config.clone().set_response_timeout(Some(*timeout + extra));
                Ok(Conn::Single(
                    ConnectionManager::new_with_config(client, config).await?,
                ))
            }
            Target::Cluster(nodes, config) => {
                let mut config = config.clone();
                config.response_timeout += extra;
                Ok(Conn::Cluster(
                    cluster_builder(nodes, &config)
                        .build()?
                        .get_async_connection()
                        .await?,
                ))
            }
            // Its own follower, so its connection is its own too.
            Target::Sentinel(m) => {
                let config = m
                    .config
                    .clone()
                    .set_response_timeout(Some(m.response_timeout + extra));
                let own = SentinelMaster::start(
                    m.sentinels.clone(),
                    m.name.clone(),
                    m.template.clone(),
                    config,
                    m.response_timeout + extra,
                )
                .await?;
                Ok(Conn::Sentinel(own))
            }
        }
    }

    /// How many times the master moved (Sentinel only; else always 0).
    fn generation(&self) -> u64 {
        match self {
            Target::Sentinel(m) => *m.generation.borrow(),
            _ => 0,
        }
    }
}

fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// The Redis Cluster slot of `key` (CRC16 of its hash tag, or of the whole
/// key if it has none).
fn slot_of(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes
        .iter()
        .position(|b| *b == b'{')
        .and_then(|open| {
            let close = bytes[open + 1..].iter().position(|b| *b == b'}')?;
            (close > 0).then(|| &bytes[open + 1..open + 1 + close])
        })
        .unwrap_or(bytes);
    crc16::State::<crc16::XMODEM>::calculate(tagged) % 16384
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

fn check_url(url: &str) -> Result<redis::ConnectionInfo> {
    let lower = url.to_ascii_lowercase();
    if ![
        "redis://",
        "rediss://",
        "redis+unix://",
        "unix://",
        "valkey://",
        "valkeys://",
    ]
    .iter()
    .any(|s| lower.starts_with(s))
    {
        return Err(Error::invalid(format!(
            "{:?} is not a Redis URL; use redis://host:port, rediss://host:port, unix:///path, redis+cluster://host:port,… or redis+sentinel://host:port,…/master",
            redacted(url)
        )));
    }
    url.into_connection_info()
        .map_err(|e| Error::invalid(format!("malformed Redis URL {:?}", redacted(url))).with_source(e))
}

fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty()
        || prefix.len() > 64
        || !prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))
    {
        return Err(Error::invalid(
            "key prefix must be 1 to 64 letters, digits or _ - . :",
        ));
    }
    Ok(())
}

impl RedisStore {
    pub(crate) async fn connect(config: RedisConfig) -> Result<Self> {
        check_prefix(&config.prefix)?;
        if config.idle < Duration::from_secs(1) || config.idle > Duration::from_secs(30 * 24 * 3600) {
            return Err(Error::invalid(format!(
                "the idle period must be between 1s and 30 days, got {}ms",
                config.idle.as_millis()
            )));
        }
        if let Some(nodes) = cluster_nodes(&config.url) {
            return RedisStore::connect_cluster(nodes?, config).await;
        }
        if let Some(parts) = sentinel_parts(&config.url) {
            let (sentinels, name, template) = parts?;
            let manager_config = ConnectionManagerConfig::new()
                .set_response_timeout(Some(config.response_timeout))
                .set_connection_timeout(Some(config.connect_timeout))
                .set_max_delay(Duration::from_secs(2))
                .set_number_of_retries(2);
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
        let manager_config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(config.response_timeout))
            .set_connection_timeout(Some(config.connect_timeout))
            .set_max_delay(Duration::from_secs(2))
            .set_number_of_retries(2);
        let mut conn = ConnectionManager::new_with_config(client, manager_config.clone())
            .await
            .map_err(|e| connect_error(e, "Redis", &config.url))?;
        check_not_cluster(&mut conn, &config.url).await?;
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
        let subs = Arc::new(Subscriptions {
            target: target.clone(),
            conn: AsyncMutex::new(None),
            counts: AsyncMutex::new(HashMap::new()),
            wakers: wakers.clone(),
        });
        if let Target::Sentinel(master) = target.as_ref() {
            // When the master moves, the subscriptions move with it.
            let mut moved = master.generation.subscribe();
            let weak = Arc::downgrade(&subs);
            tokio::spawn(async move {
                while moved.changed().await.is_ok() {
                    // Until listening on the new master works (or the store
                    // is gone, or the master moves again).
                    loop {
                        let Some(subs) = weak.upgrade() else { return };
                        if subs.follow().await {
                            break;
                        }
                        drop(subs);
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        if moved.has_changed().unwrap_or(true) {
                            break;
                        }
                    }
                }
            });
        }
        RedisStore {
            conn,
            timeout: config.response_timeout,
            prefix: config.prefix.clone(),
            scripts: Arc::new(Scripts::new(cluster, config.idle)),
            target,
            durable: None,
            subs,
            wakers,
        }
    }

    async fn connect_cluster(nodes: Vec<String>, config: RedisConfig) -> Result<Self> {
        let client = cluster_builder(&nodes, &config)
            .build()
            .map_err(|e| Error::invalid("unusable Redis Cluster URL").with_source(e))?;
        let conn = client
            .get_async_connection()
            .await
            .map_err(|e| connect_error(e, "the Redis Cluster", &config.url))?;
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

    fn base(&self, gate: &Name) -> String {
        format!("{}:gate:{{{}}}", self.prefix, gate.as_str())
    }

    async fn run(&self, script: &Script, gate: &Name, args: impl redis::ToRedisArgs) -> Result<Vec<i64>> {
        self.run_as(script, gate, args).await
    }

    async fn run_as<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        gate: &Name,
        args: impl redis::ToRedisArgs,
    ) -> Result<T> {
        let base = self.base(gate);
        self.invoke(script, &gate_keys(&base), args, &base).await
    }

    /// Runs `op` within `limit`: the connection's own response timeout
    /// bounds one request, but not a call that also waits for a reconnect
    /// (the connection manager's retries) or sends a second request
    /// (NOSCRIPT): against a frozen server such a call took two timeouts.
    /// This is the one deadline of the whole call.
    async fn within<T>(&self, limit: Duration, op: impl Future<Output = Result<T>>) -> Result<T> {
        match tokio::time::timeout(limit, op).await {
            Ok(out) => out,
            Err(_) => Err(Error::new(
                ErrorKind::Unavailable,
                format!("Redis did not answer within {} ms", limit.as_millis()),
            )),
        }
    }

    /// Runs `script` on `keys` (which share `tagged`'s hash tag) with
    /// `args`, on the plain command connection even on a durable handle:
    /// for scripts that write nothing, for which a WAIT would be waste.
    async fn invoke_plain<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        keys: &[String],
        args: impl redis::ToRedisArgs,
    ) -> Result<T> {
        self.within(self.timeout, self.eval_plain(script, keys, args))
            .await
    }

    async fn eval_plain<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        keys: &[String],
        args: impl redis::ToRedisArgs,
    ) -> Result<T> {
        let mut eval = redis::cmd("EVALSHA");
        eval.arg(script.get_hash()).arg(keys.len()).arg(keys).arg(args);
        let mut conn = self.conn.clone();
        match eval.query_async(&mut conn).await {
            Err(e) if is_noscript(&e) => {
                // Just this one: many callers may land here at once.
                script.prepare_invoke().load_async(&mut conn).await?;
                Ok(eval.query_async(&mut conn).await?)
            }
            other => Ok(other?),
        }
    }

    /// Runs `script` on `keys` (which share `tagged`'s hash tag) with
    /// `args`. On a durable handle, the script and a `WAIT` go together as
    /// one pipeline on the durable connection (on a cluster, to the slot's
    /// master), so the WAIT counts exactly the script's writes.
    async fn invoke<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        keys: &[String],
        args: impl redis::ToRedisArgs,
        tagged: &str,
    ) -> Result<T> {
        let Some(d) = &self.durable else {
            return self.invoke_plain(script, keys, args).await;
        };
        self.within(
            self.timeout + d.timeout,
            self.eval_durable(d, script, keys, args, tagged),
        )
        .await
    }

    /// `invoke` on a durable handle: the script and a WAIT.
    async fn eval_durable<T: redis::FromRedisValue>(
        &self,
        d: &Durable,
        script: &Script,
        keys: &[String],
        args: impl redis::ToRedisArgs,
        tagged: &str,
    ) -> Result<T> {
        // Built once; the arguments (payloads too) are copied only here.
        let mut eval = redis::cmd("EVALSHA");
        eval.arg(script.get_hash()).arg(keys.len()).arg(keys).arg(args);
        if let Conn::Sentinel(m) = &d.conn {
            let generation = *m.generation.borrow() + 1;
            if d.loaded.load(std::sync::atomic::Ordering::Acquire) != generation {
                self.load_all(&mut d.conn.clone()).await?;
                d.loaded.store(generation, std::sync::atomic::Ordering::Release);
            }
        }
        let mut pipe = redis::pipe();
        pipe.add_command(eval);
        pipe.cmd("WAIT").arg(d.replicas).arg(d.timeout.as_millis() as u64);
        let mut loaded = false;
        let replies = loop {
            let sent: redis::RedisResult<Vec<Value>> = match &d.conn {
                Conn::Single(c) => pipe.query_async(&mut c.clone()).await,
                Conn::Sentinel(m) => match m.connection().await {
                    Ok(mut c) => {
                        let r = pipe.query_async(&mut c).await;
                        m.check_after(&r);
                        r
                    }
                    Err(e) => Err(e),
                },
                Conn::Cluster(c) => {
                    use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
                    let route = Route::new(slot_of(tagged), SlotAddr::Master);
                    c.clone()
                        .route_pipeline(pipe.clone(), 0, 2, SingleNodeRoutingInfo::SpecificNode(route))
                        .await
                }
            };
            // A cluster answers a failed command inside the replies.
            let sent = sent.and_then(|mut replies| {
                if let Some(first) = replies.first_mut() {
                    *first = std::mem::replace(first, Value::Nil).extract_error()?;
                }
                Ok(replies)
            });
            match sent {
                Err(e) if !loaded && is_noscript(&e) => {
                    self.load_all(&mut d.conn.clone()).await?;
                    loaded = true;
                }
                other => break other?,
            }
        };
        let bad = |e: redis::ParsingError| Error::new(ErrorKind::Store, format!("unexpected reply: {e}"));
        let [out, acked] = <[Value; 2]>::try_from(replies)
            .map_err(|_| Error::new(ErrorKind::Store, "unexpected reply to a script and WAIT"))?;
        let out: T = redis::from_redis_value(out).map_err(bad)?;
        let acked: i64 = redis::from_redis_value(acked).map_err(bad)?;
        if acked < i64::from(d.replicas) {
            return Err(Error::new(
                ErrorKind::NotReplicated,
                format!(
                    "the change was made, but only {acked} of {} replicas confirmed it within {:?}; \
                     it may be lost if the master fails now",
                    d.replicas, d.timeout
                ),
            ));
        }
        Ok(out)
    }

    /// Loads every script on `conn`'s node (every master, on a cluster): a
    /// node that lacks one script (restarted, or a replica just promoted)
    /// lacks them all.
    async fn load_all(&self, conn: &mut Conn) -> Result<()> {
        for script in self.scripts.all() {
            script.prepare_invoke().load_async(conn).await?;
        }
        Ok(())
    }

    /// A handle on the same Redis whose every operation, once its script
    /// ran, waits until `replicas` replicas have it (`WAIT`), on its own
    /// connection so the wait holds up no one else.
    pub(crate) async fn durable(&self, replicas: u32, timeout: Duration) -> Result<RedisStore> {
        let conn = self.target.connect(timeout).await.map_err(|e| match e.kind() {
            ErrorKind::Misconfigured | ErrorKind::InvalidInput => e,
            _ => Error::new(
                ErrorKind::Unavailable,
                "cannot open a connection for durable operations",
            )
            .with_source(e),
        })?;
        Ok(RedisStore {
            conn: self.conn.clone(),
            timeout: self.timeout,
            prefix: self.prefix.clone(),
            scripts: self.scripts.clone(),
            wakers: self.wakers.clone(),
            subs: self.subs.clone(),
            target: self.target.clone(),
            durable: Some(Durable {
                replicas,
                timeout,
                conn,
                loaded: std::sync::atomic::AtomicU64::new(0),
            }),
        })
    }

    pub(crate) async fn enter(&self, gate: &Name, req: &EnterRequest<'_>) -> Result<Entry> {
        let r = self
            .run(
                &self.scripts.enter,
                gate,
                (
                    req.id,
                    req.permits,
                    req.capacity.unwrap_or(0),
                    req.ttl_ms,
                    req.heartbeat_ms,
                    u8::from(req.queue),
                    req.label.unwrap_or(""),
                ),
            )
            .await?;
        match r.as_slice() {
            [1, fence, ttl] => Ok(Entry::Granted(grant(*fence, *ttl))),
            [2, position, waiting, eta] => Ok(Entry::Queued(place(*position, *waiting, *eta))),
            [3, used, capacity, waiting] => Ok(Entry::Busy(Occupancy {
                used: *used as u64,
                capacity: *capacity as u32,
                waiting: *waiting as u64,
            })),
            [-1, have] => Err(Error::new(
                ErrorKind::CapacityConflict,
                format!(
                    "the gate's capacity is {have}, the request says {}; change it with set_capacity",
                    req.capacity.unwrap_or(0)
                ),
            )),
            [-2, capacity] => Err(Error::invalid(format!(
                "asked for {} permits but the gate's capacity is {capacity}",
                req.permits
            ))),
            [-3] => Err(Error::new(
                ErrorKind::NoCapacity,
                "the gate has no capacity yet; name one in the request or set_capacity",
            )),
            other => Err(unexpected("enter", other)),
        }
    }

    /// One rate-limit decision. GCRA keys are strings and window keys
    /// hashes, so they live under different names.
    pub(crate) async fn limit(
        &self,
        limiter: &Name,
        key: &str,
        limit: &Limit,
        cost: u64,
    ) -> Result<Decision> {
        let (space, algo, a, b) = match limit.algorithm() {
            Algorithm::Gcra => ("g", "g", limit.interval_ns(), limit.burst()),
            Algorithm::FixedWindow => ("w", "f", limit.rate().count(), limit.period_us()),
            Algorithm::SlidingWindow => ("w", "s", limit.rate().count(), limit.period_us()),
        };
        let tagged = format!("{}:limit:{{{}}}:{space}:{key}", self.prefix, limiter.as_str());
        let r: Vec<i64> = self
            .invoke(
                &self.scripts.limit,
                std::slice::from_ref(&tagged),
                (algo, cost, a, b),
                &tagged,
            )
            .await?;
        match r.as_slice() {
            [allowed, remaining, retry, reset] => Ok(decision(
                limit,
                *allowed == 1,
                (*remaining).max(0) as u64,
                (*retry).max(0) as u64,
                (*reset).max(0) as u64,
            )),
            other => Err(unexpected("limit", other)),
        }
    }

    pub(crate) async fn poll(&self, gate: &Name, id: &str, ttl_ms: u64, hb_ms: u64) -> Result<Poll> {
        let r = self.run(&self.scripts.poll, gate, (id, ttl_ms, hb_ms)).await?;
        match r.as_slice() {
            [1, fence, ttl] => Ok(Poll::Granted(grant(*fence, *ttl))),
            [2, position, waiting, eta] => Ok(Poll::Queued(place(*position, *waiting, *eta))),
            [0] => Ok(Poll::Unknown),
            other => Err(unexpected("poll", other)),
        }
    }

    pub(crate) async fn renew(&self, gate: &Name, id: &str, ttl_ms: u64) -> Result<Option<Grant>> {
        let r = self.run(&self.scripts.renew, gate, (id, ttl_ms)).await?;
        match r.as_slice() {
            [1, ttl] => Ok(Some(grant(0, *ttl))),
            [0] => Ok(None),
            other => Err(unexpected("renew", other)),
        }
    }

    /// Releases or cancels `id`; with `keep_ms` (an end), a released
    /// holder is recorded in the revocation log in the same script.
    pub(crate) async fn leave(&self, gate: &Name, id: &str, keep_ms: Option<u64>) -> Result<Left> {
        let r = match keep_ms {
            None => self.run(&self.scripts.leave, gate, id).await?,
            Some(keep) => self.run(&self.scripts.leave, gate, (id, keep)).await?,
        };
        match r.as_slice() {
            [1] => Ok(Left::Released),
            [2] => Ok(Left::Cancelled),
            [0] => Ok(Left::Unknown),
            other => Err(unexpected("leave", other)),
        }
    }

    pub(crate) async fn set_capacity(&self, gate: &Name, capacity: u32) -> Result<()> {
        let r = self.run(&self.scripts.set_capacity, gate, capacity).await?;
        match r.as_slice() {
            [1] => Ok(()),
            other => Err(unexpected("set_capacity", other)),
        }
    }

    pub(crate) async fn holders(&self, gate: &Name, limit: u32) -> Result<Vec<Holding>> {
        let r: Vec<redis::Value> = self.run_as(&self.scripts.holders, gate, limit).await?;
        let mut out = Vec::with_capacity(r.len() / 2);
        for pair in r.chunks(2) {
            let [redis::Value::Int(ttl), label] = pair else {
                return Err(Error::new(ErrorKind::Store, "unexpected reply to holders"));
            };
            let label = match label {
                redis::Value::BulkString(b) if !b.is_empty() => Some(String::from_utf8_lossy(b).into_owned()),
                _ => None,
            };
            out.push(Holding {
                label,
                ttl: Duration::from_millis((*ttl).max(0) as u64),
            });
        }
        Ok(out)
    }

    pub(crate) async fn stats(&self, gate: &Name) -> Result<GateStats> {
        let r = self.run(&self.scripts.stats, gate, Vec::<String>::new()).await?;
        match r.as_slice() {
            [
                capacity,
                used,
                holders,
                waiting,
                grants,
                expiries,
                fence,
                paused,
                every,
            ] => Ok(GateStats {
                capacity: u32::try_from(*capacity).ok(),
                used: *used as u64,
                holders: *holders as u64,
                waiting: *waiting as u64,
                grants: *grants as u64,
                expiries: *expiries as u64,
                fence: *fence as u64,
                paused: *paused == 1,
                admission_interval: (*every > 0).then(|| Duration::from_millis(*every as u64)),
            }),
            other => Err(unexpected("stats", other)),
        }
    }

    /// The gate's epoch, stored settings and the revocation log from
    /// `since` on, read without writing (a no-writes script).
    pub(crate) async fn watch_state(&self, gate: &Name, since: u64, max: usize) -> Result<GateWatch> {
        let keys = gate_keys(&self.base(gate));
        let v: Vec<Value> = self
            .invoke_plain(&self.scripts.watch, &keys, (since, max))
            .await?;
        let bad = || Error::new(ErrorKind::Store, "unexpected reply to watch_state");
        let int = |v: &Value| -> Result<i64> { redis::from_redis_value_ref(v).map_err(|_| bad()) };
        let [epoch, capacity, paused, every, cursor, ids @ ..] = v.as_slice() else {
            return Err(bad());
        };
        let epoch: String = redis::from_redis_value_ref(epoch).map_err(|_| bad())?;
        Ok(GateWatch {
            epoch: if epoch.is_empty() {
                None
            } else {
                Some(epoch.parse().map_err(|_| bad())?)
            },
            capacity: u32::try_from(int(capacity)?).ok(),
            paused: int(paused)? == 1,
            admission_interval: u64::try_from(int(every)?)
                .ok()
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
            cursor: int(cursor)?.max(0) as u64,
            revoked: ids
                .iter()
                .map(|id| redis::from_redis_value_ref(id).map_err(|_| bad()))
                .collect::<Result<_>>()?,
        })
    }

    pub(crate) async fn set_admission(
        &self,
        gate: &Name,
        paused: Option<bool>,
        every_ms: Option<u64>,
    ) -> Result<()> {
        let paused = match paused {
            Some(true) => "1".to_owned(),
            Some(false) => "0".to_owned(),
            None => String::new(),
        };
        let every = every_ms.map(|e| e.to_string()).unwrap_or_default();
        let r = self
            .run(&self.scripts.set_admission, gate, (paused, every))
            .await?;
        match r.as_slice() {
            [1] => Ok(()),
            other => Err(unexpected("set_admission", other)),
        }
    }

    pub(crate) async fn ping(&self) -> Result<()> {
        let mut conn = self.conn.clone();
        self.within(self.timeout, async move {
            let _: String = redis::cmd("PING").query_async(&mut conn).await?;
            Ok(())
        })
        .await
    }

    pub(crate) async fn listen(&self, gate: &Name) -> Result<Listening> {
        self.subscribe(format!("{}:n", self.base(gate))).await
    }

    /// Counts one more listener on `channel` for as long as the returned
    /// guard lives.
    async fn subscribe(&self, channel: String) -> Result<Listening> {
        let fresh = self.subs.acquire(&channel).await?;
        Ok(Listening {
            fresh,
            _guard: SubscriptionGuard {
                subs: Arc::downgrade(&self.subs),
                channel,
            },
        })
    }
}

/// Job queues on Redis: one script (`lua/jobs.lua`), the operation in
/// ARGV[1].
impl RedisStore {
    fn jobs_base(&self, q: &Name) -> String {
        format!("{}:jobs:{{{}}}", self.prefix, q.as_str())
    }

    async fn run_jobs<T: redis::FromRedisValue>(
        &self,
        q: &Name,
        op: &str,
        args: impl redis::ToRedisArgs,
    ) -> Result<T> {
        let base = self.jobs_base(q);
        let keys: Vec<String> = [":m", ":d", ":r", ":w", ":f", ":l", ":n", ":x", ":t", ":c"]
            .iter()
            .map(|s| format!("{base}{s}"))
            .collect();
        let all = (
            op,
            format!("{base}:n"),
            format!("!{}", super::Store::job_wake_key(q)),
            args,
        );
        self.invoke(&self.scripts.jobs, &keys, all, &base).await
    }

    pub(crate) async fn listen_jobs(&self, q: &Name) -> Result<Listening> {
        self.subscribe(format!("{}:n", self.jobs_base(q))).await
    }

    pub(crate) async fn job_layout(
        &self,
        q: &Name,
        want: u32,
        expect: Option<u32>,
        store: bool,
    ) -> Result<(u32, bool)> {
        let expect = expect.map_or_else(String::new, |e| e.to_string());
        let r: Vec<i64> = self
            .run_jobs(q, "layout", (want, expect, if store { "1" } else { "0" }))
            .await?;
        match r.as_slice() {
            [n, stored] if *n > 0 => Ok((*n as u32, *stored == 1)),
            _ => Err(unexpected("layout", &r)),
        }
    }

    pub(crate) async fn job_retire(&self, q: &Name, close: bool) -> Result<(bool, [u64; 4])> {
        let r: Vec<i64> = self.run_jobs(q, "retire", if close { "1" } else { "0" }).await?;
        match r.as_slice() {
            [done, counts @ ..] if counts.len() == 4 => {
                Ok((*done == 1, [0, 1, 2, 3].map(|i| counts[i].max(0) as u64)))
            }
            _ => Err(unexpected("retire", &r)),
        }
    }

    /// Pushes a batch of jobs in one script call.
    pub(crate) async fn job_push(&self, q: &Name, reqs: &[PushReq<'_>]) -> Result<Vec<PushOutcome>> {
        let mut args: Vec<Vec<u8>> = Vec::with_capacity(1 + 10 * reqs.len());
        args.push(int_arg(reqs.len() as i64));
        for req in reqs {
            let (delay, at) = match req.when {
                When::Delay(d) => (d as i64, 0),
                When::At(at) => (-1, at as i64),
            };
            args.extend([
                req.id.as_bytes().to_vec(),
                req.payload.to_vec(),
                int_arg(delay),
                int_arg(at),
                int_arg(i64::from(req.priority)),
                int_arg(i64::from(req.max_attempts)),
                req.backoff.kind.to_string().into_bytes(),
                int_arg(req.backoff.base_ms as i64),
                int_arg(req.backoff.max_ms as i64),
                if req.replace {
                    b"replace".to_vec()
                } else {
                    b"keep".to_vec()
                },
            ]);
        }
        let r: Vec<i64> = self.run_jobs(q, "push", args).await?;
        if r.len() != 2 * reqs.len() {
            return Err(unexpected("push", &r));
        }
        r.chunks(2)
            .map(|pair| match pair {
                [1, at] => Ok(PushOutcome::New {
                    run_at_ms: *at as u64,
                }),
                [2, _] => Ok(PushOutcome::Kept),
                [3, at] => Ok(PushOutcome::Replaced {
                    run_at_ms: *at as u64,
                }),
                [4, _] => Ok(PushOutcome::Busy),
                other => Err(unexpected("push", other)),
            })
            .collect()
    }

    /// Acks the deliveries `acks` (whether each was that delivery's) and
    /// claims up to `max` jobs (none with 0), in one script call.
    pub(crate) async fn job_claim(
        &self,
        q: &Name,
        acks: &[(&str, u64)],
        keep: Option<Keep>,
        lease_ms: u64,
        max: usize,
    ) -> Result<(Vec<bool>, ClaimOutcome)> {
        let (n, ms) = keep.map_or((0, 0), |k| (k.count, k.ms));
        let mut args: Vec<Vec<u8>> = vec![
            int_arg(lease_ms as i64),
            int_arg(max as i64),
            int_arg(n as i64),
            int_arg(ms as i64),
        ];
        for (id, fence) in acks {
            args.push(id.as_bytes().to_vec());
            args.push(int_arg(*fence as i64));
        }
        let v: redis::Value = self.run_jobs(q, "claim", args).await?;
        let bad = || Error::new(ErrorKind::Store, "unexpected reply to claim");
        let redis::Value::Array(items) = v else {
            return Err(bad());
        };
        let int = |v: &redis::Value| -> Option<i64> { redis::from_redis_value_ref(v).ok() };
        let k = items.first().and_then(int).ok_or_else(bad)? as usize;
        let flags = items.get(1..1 + k).ok_or_else(bad)?;
        let acked = flags.iter().map(|f| int(f) == Some(1)).collect();
        Ok((acked, claim_reply(&items[1 + k..])?))
    }

    pub(crate) async fn job_done(&self, q: &Name, limit: usize) -> Result<Vec<RawDone>> {
        let v: Vec<redis::Value> = self.run_jobs(q, "done", limit.max(1)).await?;
        let bad = || Error::new(ErrorKind::Store, "unexpected reply to done");
        v.chunks(3)
            .map(|row| match row {
                [id, at, payload] => Ok(RawDone {
                    id: redis::from_redis_value_ref(id).map_err(|_| bad())?,
                    acked_ms: redis::from_redis_value_ref::<String>(at)
                        .ok()
                        .and_then(|d| d.parse::<f64>().ok())
                        .ok_or_else(bad)? as u64,
                    payload: redis::from_redis_value_ref(payload).map_err(|_| bad())?,
                }),
                _ => Err(bad()),
            })
            .collect()
    }

    pub(crate) async fn job_nack(
        &self,
        q: &Name,
        id: &str,
        fence: u64,
        delay_ms: Option<u64>,
        jitter: f64,
    ) -> Result<NackOutcome> {
        let delay = delay_ms.map_or(-1, |d| d as i64);
        let r: Vec<i64> = self
            .run_jobs(q, "nack", (id, fence.to_string(), delay, format!("{jitter:.6}")))
            .await?;
        match r.as_slice() {
            [1, at] => Ok(NackOutcome::Retry {
                run_at_ms: *at as u64,
            }),
            [2] => Ok(NackOutcome::Dead),
            [0] => Ok(NackOutcome::NotHeld),
            other => Err(unexpected("nack", other)),
        }
    }

    pub(crate) async fn job_extend(
        &self,
        q: &Name,
        id: &str,
        fence: u64,
        lease_ms: u64,
    ) -> Result<Option<u64>> {
        let r: Vec<i64> = self
            .run_jobs(q, "extend", (id, fence.to_string(), lease_ms))
            .await?;
        match r.as_slice() {
            [1, deadline] => Ok(Some(*deadline as u64)),
            [0] => Ok(None),
            other => Err(unexpected("extend", other)),
        }
    }

    pub(crate) async fn job_cancel(&self, q: &Name, id: &str) -> Result<CancelOutcome> {
        let r: Vec<i64> = self.run_jobs(q, "cancel", id).await?;
        match r.as_slice() {
            [1] => Ok(CancelOutcome::Cancelled),
            [2] => Ok(CancelOutcome::Running),
            [3] => Ok(CancelOutcome::Purged),
            [0] => Ok(CancelOutcome::Unknown),
            other => Err(unexpected("cancel", other)),
        }
    }

    pub(crate) async fn job_reschedule(&self, q: &Name, id: &str, when: When) -> Result<RescheduleOutcome> {
        let (delay, at) = match when {
            When::Delay(d) => (d as i64, 0),
            When::At(at) => (-1, at as i64),
        };
        let r: Vec<i64> = self.run_jobs(q, "reschedule", (id, delay, at)).await?;
        match r.as_slice() {
            [1, at] => Ok(RescheduleOutcome::Moved {
                run_at_ms: *at as u64,
            }),
            [2] => Ok(RescheduleOutcome::Running),
            [0] => Ok(RescheduleOutcome::Unknown),
            other => Err(unexpected("reschedule", other)),
        }
    }

    pub(crate) async fn job_dead(&self, q: &Name, limit: usize) -> Result<Vec<RawDead>> {
        let v: Vec<redis::Value> = self.run_jobs(q, "dead", limit.max(1)).await?;
        let bad = || Error::new(ErrorKind::Store, "unexpected reply to dead");
        v.chunks(4)
            .map(|row| match row {
                [id, died, attempts, payload] => Ok(RawDead {
                    id: redis::from_redis_value_ref(id).map_err(|_| bad())?,
                    died_ms: redis::from_redis_value_ref::<String>(died)
                        .ok()
                        .and_then(|d| d.parse::<f64>().ok())
                        .ok_or_else(bad)? as u64,
                    attempts: redis::from_redis_value_ref::<i64>(attempts).map_err(|_| bad())? as u32,
                    payload: redis::from_redis_value_ref(payload).map_err(|_| bad())?,
                }),
                _ => Err(bad()),
            })
            .collect()
    }

    pub(crate) async fn job_replay(&self, q: &Name, id: Option<&str>) -> Result<u64> {
        let r: Vec<i64> = self.run_jobs(q, "replay", id.unwrap_or("")).await?;
        Ok(r.first().copied().unwrap_or(0).max(0) as u64)
    }

    pub(crate) async fn job_purge(&self, q: &Name, id: Option<&str>) -> Result<u64> {
        let r: Vec<i64> = self.run_jobs(q, "purge", id.unwrap_or("")).await?;
        Ok(r.first().copied().unwrap_or(0).max(0) as u64)
    }

    pub(crate) async fn job_stats(&self, q: &Name) -> Result<RawStats> {
        let r: Vec<i64> = self.run_jobs(q, "stats", Vec::<String>::new()).await?;
        let buckets = LATENESS_BOUNDS_MS.len() + 1;
        if r.len() < 12 + buckets {
            return Err(unexpected("stats", &r));
        }
        let u = |i: usize| r[i].max(0) as u64;
        Ok(RawStats {
            ready: u(0),
            delayed: u(1),
            in_flight: u(2),
            dead: u(3),
            pushed: u(4),
            claimed: u(5),
            acked: u(6),
            retried: u(7),
            dead_total: u(8),
            redelivered: u(9),
            completed: u(10),
            lateness_sum_ms: u(11),
            lateness_buckets: r[12..12 + buckets].iter().map(|v| (*v).max(0) as u64).collect(),
            lateness_ms: r[12 + buckets..].iter().map(|v| (*v).max(0) as u64).collect(),
        })
    }
}

/// A claim's reply: `{1, id, payload, attempt, fence, deadline}` or
/// `{0, next due or -1, now}`.
fn claim_reply(items: &[redis::Value]) -> Result<ClaimOutcome> {
    let bad = || Error::new(ErrorKind::Store, "unexpected reply to claim");
    let int = |v: &redis::Value| -> Option<i64> { redis::from_redis_value_ref(v).ok() };
    match items {
        [flag, next, now] if int(flag) == Some(0) => Ok(ClaimOutcome::Empty {
            next_due_ms: int(next).and_then(|n| u64::try_from(n).ok()),
            now_ms: int(now).ok_or_else(bad)? as u64,
        }),
        [flag, n, rows @ ..]
            if int(flag) == Some(1) && int(n).is_some_and(|n| n as usize * 5 == rows.len()) =>
        {
            let jobs = rows
                .chunks(5)
                .map(|row| {
                    let [id, payload, attempt, fence, deadline] = row else {
                        return Err(bad());
                    };
                    let fence: String = redis::from_redis_value_ref(fence).map_err(|_| bad())?;
                    Ok(RawJob {
                        id: redis::from_redis_value_ref(id).map_err(|_| bad())?,
                        payload: redis::from_redis_value_ref(payload).map_err(|_| bad())?,
                        attempt: int(attempt).ok_or_else(bad)? as u32,
                        fence: fence.parse().map_err(|_| bad())?,
                        deadline_ms: int(deadline).ok_or_else(bad)? as u64,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(ClaimOutcome::Jobs(jobs))
        }
        _ => Err(bad()),
    }
}

/// The keys of the gate whose keys start with `base` (see prelude.lua).
fn gate_keys(base: &str) -> Vec<String> {
    [":m", ":h", ":p", ":q", ":r"]
        .iter()
        .map(|s| format!("{base}{s}"))
        .collect()
}

/// An integer script argument.
fn int_arg(n: i64) -> Vec<u8> {
    n.to_string().into_bytes()
}

fn grant(fence: i64, ttl: i64) -> Grant {
    Grant {
        fence: fence.max(0) as u64,
        ttl_ms: ttl.max(0) as u64,
    }
}

fn place(position: i64, waiting: i64, eta_ms: i64) -> Place {
    Place {
        position: position.max(0) as u64,
        waiting: waiting.max(0) as u64,
        eta: u64::try_from(eta_ms).ok().map(Duration::from_millis),
    }
}

/// Why connecting to `what` at `url` failed: a refused set-up as it is
/// (`Misconfigured`), anything else as unreachable.
fn connect_error(e: impl Into<Error>, what: &str, url: &str) -> Error {
    match e.into() {
        e if e.kind() == ErrorKind::Misconfigured => e,
        e => Error::new(
            ErrorKind::Unavailable,
            format!("cannot reach {what} at {}", redacted(url)),
        )
        .with_source(e),
    }
}

/// `url` with its password, if any, shown as `***` (for messages): the
/// part of the user info after its first `:` (up to the last `@`, so a
/// password holding `/` is hidden too), and `pass=` / `password=` query
/// values (unix sockets).
pub(crate) fn redacted(url: &str) -> String {
    let mut out = match url.find("://").map(|i| i + 3) {
        Some(start) => match url[start..].rfind('@').map(|i| start + i) {
            Some(at) => match url[start..at].find(':').map(|i| start + i) {
                Some(colon) => format!("{}:***{}", &url[..colon], &url[at..]),
                None => url.to_owned(),
            },
            None => url.to_owned(),
        },
        None => url.to_owned(),
    };
    for key in ["pass=", "password="] {
        let mut from = 0;
        while let Some(i) = out[from..].find(key).map(|i| from + i) {
            let value = i + key.len();
            // Only a query parameter: right after `?` or `&`.
            if i > 0 && matches!(out.as_bytes()[i - 1], b'?' | b'&') {
                let end = out[value..].find(['&', '#']).map_or(out.len(), |e| value + e);
                out.replace_range(value..end, "***");
            }
            from = value;
        }
    }
    out
}

/// Refuses a plain URL that reaches a Redis Cluster node: keys of other
/// slots would answer MOVED on every call. A server that will not say
/// (INFO disallowed) is taken as it is.
async fn check_not_cluster(conn: &mut ConnectionManager, url: &str) -> Result<()> {
    let info: String = match redis::cmd("INFO").arg("cluster").query_async(conn).await {
        Ok(info) => info,
        // A user whose ACL forbids INFO (say `-@dangerous`): no verdict.
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm) => return Ok(()),
        Err(e) => {
            return match Error::from(e) {
                // Unreachable, or a password needed and not given (NOAUTH).
                e if matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Misconfigured) => {
                    Err(connect_error(e, "Redis", url))
                }
                _ => Ok(()),
            };
        }
    };
    if info.lines().any(|l| l.trim() == "cluster_enabled:1") {
        return Err(Error::new(
            ErrorKind::Misconfigured,
            format!(
                "{} is a Redis Cluster node: use redis+cluster://host:port[,host:port…] so calls reach each slot's master",
                redacted(url)
            ),
        ));
    }
    Ok(())
}

fn unexpected(op: &str, reply: &[i64]) -> Error {
    Error::new(ErrorKind::Store, format!("unexpected reply to {op}: {reply:?}"))
}

/// Per-channel subscription counts on the listening connection. Subscribing
/// and unsubscribing happen under one async lock so a late unsubscribe can
/// never undo a newer subscribe.
struct Subscriptions {
    target: Arc<Target>,
    /// The listening connection and the master generation it was made for.
    conn: AsyncMutex<Option<(u64, SubConn)>>,
    counts: AsyncMutex<HashMap<String, usize>>,
    wakers: Arc<Wakers>,
}

/// A RESP3 connection to one server that hands its pushes to `tx` and
/// subscribes again by itself after a reconnect.
async fn listener(
    info: redis::ConnectionInfo,
    config: ConnectionManagerConfig,
    tx: tokio::sync::mpsc::UnboundedSender<redis::PushInfo>,
) -> redis::RedisResult<ConnectionManager> {
    let settings = info.redis_settings().clone().set_protocol(ProtocolVersion::RESP3);
    let client = redis::Client::open(info.set_redis_settings(settings))?;
    let config = config.set_push_sender(tx).set_automatic_resubscription();
    ConnectionManager::new_with_config(client, config).await
}

/// The listening connection: plain pub/sub on one server, sharded pub/sub
/// on a cluster. Both re-subscribe by themselves after a reconnect.
#[derive(Clone)]
enum SubConn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl SubConn {
    async fn subscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        match self {
            SubConn::Single(c) => c.subscribe(channel).await,
            SubConn::Cluster(c) => c.ssubscribe(channel).await,
        }
    }

    async fn unsubscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        match self {
            SubConn::Single(c) => c.unsubscribe(channel).await,
            SubConn::Cluster(c) => c.sunsubscribe(channel).await,
        }
    }
}

impl Subscriptions {
    /// The listening connection, made anew (and subscribed to `channels`)
    /// if the master moved since it was made.
    async fn connection(&self, channels: &HashMap<String, usize>) -> Result<SubConn> {
        let generation = self.target.generation();
        let mut slot = self.conn.lock().await;
        if let Some((g, conn)) = slot.as_ref()
            && *g == generation
        {
            return Ok(conn.clone());
        }
        let moved = slot.is_some();
        let mut conn = self.open().await?;
        if moved {
            for channel in channels.keys() {
                conn.subscribe(channel).await?;
            }
            // Whatever was published meanwhile went elsewhere.
            self.wakers.wake_all();
        }
        *slot = Some((generation, conn.clone()));
        Ok(conn)
    }

    /// After the master moved: listen on the new one at once. Returns
    /// whether that worked.
    async fn follow(&self) -> bool {
        let counts = self.counts.lock().await;
        match self.connection(&counts).await {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(error = %e, "could not listen on the new master yet; waiters re-check meanwhile");
                false
            }
        }
    }

    async fn open(&self) -> Result<SubConn> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let conn = match self.target.as_ref() {
            Target::Single(single) => {
                let (info, config, _) = single.as_ref();
                SubConn::Single(listener(info.clone(), config.clone(), tx).await?)
            }
            Target::Sentinel(master) => {
                let addr = master
                    .addr()
                    .ok_or_else(|| Error::unavailable("no master known yet"))?;
                let info = master.template.clone().set_addr(addr);
                SubConn::Single(listener(info, master.config.clone(), tx).await?)
            }
            Target::Cluster(nodes, config) => {
                let client = cluster_builder(nodes, config)
                    .use_protocol(ProtocolVersion::RESP3)
                    .push_sender(tx)
                    .build()?;
                SubConn::Cluster(client.get_async_connection().await?)
            }
        };
        let wakers = self.wakers.clone();
        tokio::spawn(async move {
            while let Some(push) = rx.recv().await {
                if push.kind == PushKind::Disconnection {
                    // Whatever was published meanwhile is lost: let
                    // every waiter look for itself.
                    wakers.wake_all();
                    continue;
                }
                if let Some(msg) = Msg::from_push_info(push)
                    && let Ok(text) = std::str::from_utf8(msg.get_payload_bytes())
                {
                    // "!<key> <n>": a job queue's push; wake up to n
                    // consumers.
                    if let Some(rest) = text.strip_prefix('!') {
                        let (key, n) = rest
                            .rsplit_once(' ')
                            .and_then(|(k, n)| Some((k, n.parse().ok()?)))
                            .unwrap_or((rest, 1));
                        wakers.wake(key, n);
                        continue;
                    }
                    for entry in text.split(' ') {
                        if let Some((id, fence)) = entry.split_once(':')
                            && let Ok(fence) = fence.parse()
                        {
                            wakers.hand_off(id, fence);
                        }
                    }
                }
            }
        });
        Ok(conn)
    }

    /// Counts one more listener on `channel`; subscribes if it is the first.
    async fn acquire(&self, channel: &str) -> Result<bool> {
        let mut counts = self.counts.lock().await;
        if let Some(n) = counts.get_mut(channel) {
            *n += 1;
            return Ok(false);
        }
        let mut conn = self.connection(&counts).await?;
        conn.subscribe(channel).await?;
        counts.insert(channel.to_owned(), 1);
        Ok(true)
    }

    async fn release(&self, channel: String) {
        let mut counts = self.counts.lock().await;
        let Some(n) = counts.get_mut(&channel) else { return };
        *n -= 1;
        if *n > 0 {
            return;
        }
        counts.remove(&channel);
        if let Ok(mut conn) = self.connection(&counts).await {
            // Best effort: a failed unsubscribe only costs stray messages.
            let _ = conn.unsubscribe(&channel).await;
        }
    }
}

/// Holds one count on a channel; releasing happens in a spawned task.
pub(crate) struct SubscriptionGuard {
    subs: Weak<Subscriptions>,
    channel: String,
}

impl fmt::Debug for SubscriptionGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubscriptionGuard")
            .field("channel", &self.channel)
            .finish()
    }
}

impl Drop for SubscriptionGuard {
    fn drop(&mut self) {
        let (Some(subs), Ok(handle)) = (self.subs.upgrade(), tokio::runtime::Handle::try_current()) else {
            return;
        };
        let channel = std::mem::take(&mut self.channel);
        handle.spawn(async move { subs.release(channel).await });
    }
}

#[cfg(test)]
mod tests {
    use super::cluster_nodes;

    #[test]
    fn passwords_are_kept_out_of_messages() {
        for (url, shown) in [
            ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
            ("redis://:s3cret@h:6379", "redis://:***@h:6379"),
            ("redis://user:s3cret@h:6379/2", "redis://user:***@h:6379/2"),
            ("redis://user:ab/cd@h:6379", "redis://user:***@h:6379"),
            ("redis://user:a@b@h:6379", "redis://user:***@h:6379"),
            ("redis://user@h:6379", "redis://user@h:6379"),
            (
                "redis+cluster://u:s3cret@a:1,b:2",
                "redis+cluster://u:***@a:1,b:2",
            ),
            (
                "redis+sentinel://u:x/y@a:1,b:2/m/0",
                "redis+sentinel://u:***@a:1,b:2/m/0",
            ),
            (
                "unix:///run/redis.sock?db=1&pass=s3cret",
                "unix:///run/redis.sock?db=1&pass=***",
            ),
            (
                "unix:///run/redis.sock?password=s3cret&user=u",
                "unix:///run/redis.sock?password=***&user=u",
            ),
            ("localhost:6379", "localhost:6379"),
        ] {
            assert_eq!(super::redacted(url), shown, "{url}");
        }
    }

    #[test]
    fn sentinel_urls_name_sentinels_and_master() {
        let (sentinels, name, template) =
            super::sentinel_parts("redis+sentinel://u:p@a:26379,b:26380/mymaster/2")
                .expect("a sentinel url")
                .expect("well formed");
        assert_eq!(sentinels.len(), 2);
        assert_eq!(name, "mymaster");
        assert_eq!(template.redis_settings().db(), 2);
        assert!(super::sentinel_parts("redis://a:6379").is_none());
        for bad in [
            "redis+sentinel://a:26379",
            "redis+sentinel://a:26379/",
            "redis+sentinel:///mymaster",
            "redis+sentinel://a:26379/m/0/extra",
            "redis+sentinel://a:x/m",
        ] {
            assert!(matches!(super::sentinel_parts(bad), Some(Err(_))), "{bad}");
        }
    }

    #[test]
    fn cluster_urls_name_their_seed_nodes() {
        let nodes = |url: &str| cluster_nodes(url).map(|r| r.map_err(|e| e.to_string()));
        assert_eq!(nodes("redis://127.0.0.1:6379"), None);
        assert_eq!(
            nodes("redis+cluster://a:7000,b:7001"),
            Some(Ok(vec!["redis://a:7000".to_owned(), "redis://b:7001".to_owned()]))
        );
        assert_eq!(
            nodes("rediss+cluster://u:p@a:7000, b:7001/#insecure"),
            Some(Ok(vec![
                "rediss://u:p@a:7000#insecure".to_owned(),
                "rediss://u:p@b:7001#insecure".to_owned()
            ]))
        );
        for bad in [
            "redis+cluster://",
            "redis+cluster://a:7000/2",
            "redis+cluster://a:notaport",
        ] {
            assert!(matches!(nodes(bad), Some(Err(_))), "{bad}");
        }
    }
}
