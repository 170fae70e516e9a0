//! The CLI commands other than `serve` and `bench`: each parses its
//! arguments, builds its store (or reaches a `tollgate serve`), and turns
//! the outcome into output and an exit code.

pub(crate) mod data;
pub(crate) mod docs;
pub(crate) mod gate_admin;
pub(crate) mod health;
pub(crate) mod jobs;
pub(crate) mod limit;
mod queue;
mod remote_lease;
pub(crate) mod run;
pub(crate) mod schedule;
pub(crate) mod status;

use std::time::Duration;

use tollgate::{RedisConfig, Store};

use crate::cli::{DurabilityArgs, StoreArgs};
use crate::exit;

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
