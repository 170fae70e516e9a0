//! A Redis older than tollgate supports (7.0) is refused when connecting,
//! by the library (a `Misconfigured` error naming the version found and
//! the one needed: one server, every node of a Cluster, a Sentinel's
//! master), by `tollgate serve` and by a CLI command (exit 78, the same
//! message), instead of running half-broken until a script fails.
//!
//! These tests need an old `redis-server` (6.2) first in `PATH`, which a
//! fresh machine does not have: they are ignored by a plain `cargo test`,
//! and scripts/test runs them (`-- --ignored`) when `TOLLGATE_OLD_REDIS`
//! names the folder of one (`.ci/run` sets it to
//! `../shared/engines/redis-6.2.16`):
//!
//! ```sh
//! PATH="$(cd ../shared/engines/redis-6.2.16 && pwd):$PATH" \
//!   cargo test -p tollgate-server --test old_redis -- --ignored
//! ```
//!
//! Run without an old Redis first in `PATH`, they fail and say so.

mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{RedisCluster, RedisServer, SentinelSet};
use tollgate::{ErrorKind, Store};

const WHY_IGNORED: &str =
    "needs an old redis-server first in PATH; scripts/test runs it when TOLLGATE_OLD_REDIS is set";

/// The version of the `redis-server` first in `PATH`, checked to be
/// older than 7.0 (else these tests would prove nothing).
fn old_version() -> String {
    let out = Command::new("redis-server")
        .arg("--version")
        .output()
        .expect("redis-server must be in PATH");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let version = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("v="))
        .unwrap_or_default()
        .to_owned();
    let major: u32 = version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(u32::MAX);
    assert!(
        major < 7,
        "the redis-server first in PATH is {text:?}, not an old one: run these tests with an old Redis first \
         in PATH, e.g. PATH=\"$(cd ../shared/engines/redis-6.2.16 && pwd):$PATH\" \
         cargo test -p tollgate-server --test old_redis -- --ignored (scripts/test does when TOLLGATE_OLD_REDIS \
         names that folder)"
    );
    version
}

/// Checks that `message` names the version found and the one needed.
fn names_versions(message: &str, found: &str) {
    assert!(message.contains(&format!("Redis {found}")), "{message}");
    assert!(message.contains("Redis 7.0 or later"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an old redis-server first in PATH; scripts/test runs it when TOLLGATE_OLD_REDIS is set"]
async fn the_library_refuses_an_old_redis_cluster_and_sentinel_master() {
    let found = old_version();
    let redis = RedisServer::start();
    let e = Store::redis(&redis.url()).await.expect_err(WHY_IGNORED);
    assert_eq!(e.kind(), ErrorKind::Misconfigured, "{e}");
    names_versions(e.message(), &found);
    assert!(e.message().contains(&redis.url()), "names the server: {e}");

    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 0))
        .await
        .expect("cluster");
    let e = Store::redis(&cluster.url()).await.expect_err("an old cluster");
    assert_eq!(e.kind(), ErrorKind::Misconfigured, "{e}");
    names_versions(e.message(), &found);
    assert!(e.message().contains("cluster node 127.0.0.1:"), "{e}");

    let set = tokio::task::spawn_blocking(SentinelSet::start)
        .await
        .expect("sentinel");
    let e = Store::redis(&set.url()).await.expect_err("an old master");
    assert_eq!(e.kind(), ErrorKind::Misconfigured, "{e}");
    names_versions(e.message(), &found);
    assert!(e.message().contains("\"mymaster\""), "{e}");
}

/// Runs `cmd` to its end (within 20 s): its exit code and standard error.
fn exit_and_stderr(mut cmd: Command) -> (i32, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tollgate");
    let started = Instant::now();
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code().expect("an exit code, not a signal");
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("tollgate still runs after 20 s on an old Redis");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    (code, stderr)
}

#[test]
#[ignore = "needs an old redis-server first in PATH; scripts/test runs it when TOLLGATE_OLD_REDIS is set"]
fn serve_and_the_cli_exit_78_naming_the_version() {
    let found = old_version();
    let redis = RedisServer::start();
    let url = redis.url();
    let (code, stderr) = exit_and_stderr(serve_support::Server::command(Some(&url), &[]));
    assert_eq!(code, 78, "serve: {stderr}");
    names_versions(&stderr, &found);

    let mut status = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    status
        .args(["lock", "status", "l", "--redis", &url])
        .env_remove("TOLLGATE_REDIS_URL");
    let (code, stderr) = exit_and_stderr(status);
    assert_eq!(code, 78, "lock status: {stderr}");
    names_versions(&stderr, &found);
}
