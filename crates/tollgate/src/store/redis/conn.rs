//! Where a Redis store's connections go: one server, a Cluster (routing
//! by slot) or the master a set of Sentinels names; the URLs that say so,
//! checked and shown with their passwords hidden.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisFuture, Value};
use std::sync::Arc;

use crate::error::{Error, Result};

use super::report::redacted;
use super::sentinel::SentinelMaster;

/// The command connection: one server (reconnecting by itself) or a
/// cluster (routing by slot, following topology changes).
#[derive(Clone)]
pub(super) enum Conn {
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
pub(super) fn cluster_nodes(url: &str) -> Option<Result<Vec<String>>> {
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
pub(super) fn sentinel_parts(
    url: &str,
) -> Option<Result<(Vec<redis::ConnectionInfo>, String, redis::ConnectionInfo)>> {
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

/// A cluster client for `nodes`, with `config`'s timeouts. Retries wait
/// 20–500 ms (redis-rs waits at least 1.28 s by default), so a request
/// fails fast while a slot has no master, and the first one after a
/// replica's promotion reaches it at once.
pub(super) fn cluster_builder(nodes: &[String], config: &RedisConfig) -> ClusterClientBuilder {
    ClusterClientBuilder::new(nodes.to_vec())
        .connection_timeout(config.connect_timeout)
        .response_timeout(config.response_timeout)
        .retries(3)
        .min_retry_wait(20)
        .max_retry_wait(500)
}

/// The connection manager's settings for one server (or a Sentinel's
/// master) as `config` says: reconnects retried twice, at most 2 s apart.
pub(super) fn manager_config(config: &RedisConfig) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_response_timeout(Some(config.response_timeout))
        .set_connection_timeout(Some(config.connect_timeout))
        .set_max_delay(Duration::from_secs(2))
        .set_number_of_retries(2)
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

/// Where a store's connections go.
pub(super) enum Target {
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
    pub(super) async fn connect(&self, extra: Duration) -> Result<Conn> {
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
    pub(super) fn generation(&self) -> u64 {
        match self {
            Target::Sentinel(m) => *m.generation.borrow(),
            _ => 0,
        }
    }
}

pub(super) fn check_url(url: &str) -> Result<redis::ConnectionInfo> {
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

pub(super) fn check_prefix(prefix: &str) -> Result<()> {
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

impl RedisConfig {
    /// Checks what can be checked without connecting: the prefix, the
    /// idle period and the URL's form (a server's, a Cluster's seed nodes,
    /// a Sentinel set's). [`Store::connect`](crate::Store::connect) does
    /// it first; a server checks before it listens.
    pub fn check(&self) -> Result<()> {
        check_prefix(&self.prefix)?;
        if self.idle < Duration::from_secs(1) || self.idle > Duration::from_secs(30 * 24 * 3600) {
            return Err(Error::invalid(format!(
                "the idle period must be between 1s and 30 days, got {}ms",
                self.idle.as_millis()
            )));
        }
        match (cluster_nodes(&self.url), sentinel_parts(&self.url)) {
            (Some(nodes), _) => nodes.map(drop),
            (None, Some(parts)) => parts.map(drop),
            (None, None) => check_url(&self.url).map(drop),
        }
    }

    /// The URL with its password, if any, shown as `***`: for messages.
    pub fn redacted_url(&self) -> String {
        redacted(&self.url)
    }
}

#[cfg(test)]
mod tests {
    use super::cluster_nodes;
    use crate::store::redis::version::check_version;

    #[test]
    pub(super) fn servers_older_than_supported_are_refused() {
        let ok = |info: &str| check_version(info, "redis://h:1").map_err(|e| e.to_string());
        for fine in [
            "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n",
            "redis_version:7.4.1\r\n",
            "redis_version:10.0.0\r\n",
            "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n",
            "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:7.2.5\r\n",
            // Nothing to read: taken as it is.
            "# Server\r\nos:Linux\r\n",
            "redis_version:unknown\r\n",
        ] {
            assert_eq!(ok(fine), Ok(()), "{fine}");
        }
        let refused = check_version("# Server\r\nredis_version:6.2.16\r\n", "redis://h:1").unwrap_err();
        assert_eq!(refused.kind(), crate::ErrorKind::Misconfigured);
        assert!(refused.message().contains("Redis 6.2.16"), "{refused}");
        assert!(
            refused.message().contains("needs Redis 7.0 or later"),
            "{refused}"
        );
        let valkey = ok("redis_version:7.0.0\r\nserver_name:valkey\r\nvalkey_version:7.0.1\r\n").unwrap_err();
        assert!(
            valkey.contains("Valkey 7.0.1") && valkey.contains("needs Valkey 7.2 or later"),
            "{valkey}"
        );
    }

    #[test]
    pub(super) fn passwords_are_kept_out_of_messages() {
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
    pub(super) fn sentinel_urls_name_sentinels_and_master() {
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
    pub(super) fn cluster_urls_name_their_seed_nodes() {
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
