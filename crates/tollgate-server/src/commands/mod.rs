//! The CLI commands other than `serve` and `bench`: each parses its
//! arguments, builds its store (or reaches a `tollgate serve`), and turns
//! the outcome into output and an exit code.

pub(crate) mod data;
pub(crate) mod docs;
pub(crate) mod elect;
mod elect_token;
mod fair;
pub(crate) mod gate_admin;
pub(crate) mod health;
pub(crate) mod jobs;
pub(crate) mod limit;
pub(crate) mod queue;
mod remote_lease;
pub(crate) mod room;
pub(crate) mod run;
pub(crate) mod schedule;
mod schedule_view;
pub(crate) mod status;
mod work;

use std::time::Duration;

use clap::Args;
use tollgate::{RedisConfig, Store};

use crate::args::duration;
use crate::exit;

/// Waiting for Redis replicas after each change (`WAIT`); the default:
/// none.
#[derive(Debug, Default, Args, Clone, Copy)]
pub(crate) struct DurabilityArgs {
    /// After each change, wait until this many replicas have it (Redis
    /// WAIT); a change they do not confirm in time fails as not replicated.
    #[arg(long, env = "TOLLGATE_DURABLE_REPLICAS", value_name = "N")]
    pub(crate) durable_replicas: Option<u32>,
    /// How long to wait for the replicas [default: 500ms].
    #[arg(long, env = "TOLLGATE_DURABLE_TIMEOUT", value_name = "DURATION", value_parser = duration, allow_hyphen_values = true)]
    pub(crate) durable_timeout: Option<Duration>,
}

impl DurabilityArgs {
    /// The store as asked: `store` itself, or a durable handle on it.
    pub(crate) async fn apply(&self, store: tollgate::Store) -> tollgate::Result<tollgate::Store> {
        match self.durable_replicas {
            None | Some(0) => Ok(store),
            Some(n) => {
                store
                    .durable(n, self.durable_timeout.unwrap_or(Duration::from_millis(500)))
                    .await
            }
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct StoreArgs {
    /// Redis URL (redis://, rediss://, unix://, redis+cluster://,
    /// redis+sentinel://). Falls back to TOLLGATE_REDIS_URL.
    #[arg(long, env = "TOLLGATE_REDIS_URL", value_name = "URL")]
    pub(crate) redis: Option<String>,
    /// Work through a `tollgate serve` at this http:// or https:// URL instead of
    /// Redis (it wins if both are given). Falls back to TOLLGATE_SERVER.
    #[arg(long, env = "TOLLGATE_SERVER", value_name = "URL")]
    pub(crate) server: Option<String>,
    /// Bearer token for --server. Falls back to TOLLGATE_SERVER_TOKEN.
    #[arg(
        long,
        env = "TOLLGATE_SERVER_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub(crate) server_token: Option<String>,
    /// Prefix of every Redis key.
    #[arg(long, default_value = "tollgate", value_name = "PREFIX")]
    pub(crate) prefix: String,
    #[command(flatten)]
    pub(crate) durability: DurabilityArgs,
}

impl StoreArgs {
    /// The store the command's arguments name: Redis at --redis (with
    /// --prefix and the durability asked for). Without one, says how to
    /// name one and gives the usage exit code.
    pub(crate) async fn connect(&self) -> Result<Store, i32> {
        let Some(url) = &self.redis else {
            eprintln!(
                "tollgate: no store given: pass --redis URL (e.g. redis://127.0.0.1:6379) or set TOLLGATE_REDIS_URL, \
                 or --server URL of a `tollgate serve` (TOLLGATE_SERVER)"
            );
            return Err(exit::USAGE);
        };
        connect_redis(url, &self.prefix, self.durability, None).await
    }
}

/// Connects to Redis at `url` with keys under `prefix`, durable as asked;
/// `connect_timeout` replaces the library's default when given. A failure
/// is printed and becomes its exit code. Every command that builds a store
/// comes through here (`serve`, which retries, through [`open_redis`]);
/// `bench` (default prefix, no durability) would call
/// `connect_redis(url, "tollgate", DurabilityArgs::default(), None)`.
pub(crate) async fn connect_redis(
    url: &str,
    prefix: &str,
    durability: DurabilityArgs,
    connect_timeout: Option<Duration>,
) -> Result<Store, i32> {
    open_redis(redis_config(url, prefix, connect_timeout), durability)
        .await
        .map_err(|e| {
            eprintln!("tollgate: {e}");
            exit::for_error(&e)
        })
}

/// How to reach Redis at `url`, keys under `prefix`; `connect_timeout`
/// replaces the library's default when given.
pub(crate) fn redis_config(url: &str, prefix: &str, connect_timeout: Option<Duration>) -> RedisConfig {
    let mut config = RedisConfig::new(url.to_owned());
    config.prefix = prefix.to_owned();
    if let Some(t) = connect_timeout {
        config.connect_timeout = t;
    }
    config
}

/// Connects as `config` says, durable as asked.
pub(crate) async fn open_redis(config: RedisConfig, durability: DurabilityArgs) -> tollgate::Result<Store> {
    durability.apply(Store::connect(config).await?).await
}
