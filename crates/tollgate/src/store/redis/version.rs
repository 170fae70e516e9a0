//! Which servers tollgate runs on: each server's INFO read when connecting,
//! and a version older than supported refused.

use redis::Value;
use redis::cluster_async::ClusterConnection;

use crate::error::{Error, ErrorKind, Result};

use super::report::{connect_error, redacted};

/// The oldest Redis the scripts run on: they use commands and flags that
/// came with 7.0 (`PEXPIRETIME`, `EXPIRE … NX`, sharded pub/sub). On
/// 6.2 a script fails mid-way ("Wrong number of args calling Redis
/// command"), so an older server is refused when connecting instead.
const MIN_REDIS: (u32, u32) = (7, 0);
/// The oldest Valkey supported: its first release (a fork of Redis 7.2.4).
const MIN_VALKEY: (u32, u32) = (7, 2);

/// What a server says it is in its INFO `server` section: `server_name`
/// (Valkey) and `valkey_version`, else Redis and `redis_version`. `None`
/// when it names no version.
fn server_version(info: &str) -> Option<(&'static str, &str)> {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
    };
    match (field("server_name"), field("valkey_version")) {
        (Some(n), Some(v)) if n.eq_ignore_ascii_case("valkey") => Some(("Valkey", v)),
        (Some(n), None) if n.eq_ignore_ascii_case("valkey") => Some(("Valkey", field("redis_version")?)),
        _ => Some(("Redis", field("redis_version")?)),
    }
}

/// Refuses a server older than tollgate supports (Redis 7.0, Valkey 7.2),
/// naming the version found and the one needed; `node` says which server
/// (a URL or a cluster node's address). A version it cannot read is taken
/// as it is.
pub(super) fn check_version(info: &str, node: &str) -> Result<()> {
    let Some((name, version)) = server_version(info) else {
        return Ok(());
    };
    let (need, other) = match name {
        "Valkey" => (MIN_VALKEY, "Redis 7.0 or later"),
        _ => (MIN_REDIS, "Valkey 7.2 or later"),
    };
    let mut parts = version.split('.').map(|p| p.parse::<u32>());
    let (Some(Ok(major)), Some(Ok(minor))) = (parts.next(), parts.next()) else {
        return Ok(());
    };
    if (major, minor) >= need {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Misconfigured,
        format!(
            "{node} runs {name} {version}, which tollgate does not support: it needs {name} {}.{} or later (or {other})",
            need.0, need.1
        ),
    ))
}

/// Checks the server a plain URL reaches, with one INFO (its default
/// sections hold both `server` and `cluster`, on every version): refuses
/// a version tollgate does not support ([`check_version`]) and a Redis
/// Cluster node (keys of other slots would answer MOVED on every call).
/// A server that will not say (INFO disallowed) is taken as it is.
pub(super) async fn check_server(conn: &mut impl redis::aio::ConnectionLike, url: &str) -> Result<()> {
    let Some(info) = info(conn, url).await? else {
        return Ok(());
    };
    check_version(&info, &redacted(url))?;
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

/// The server's INFO (default sections), or `None` when its ACL forbids
/// INFO or it answers INFO with an error: no verdict then.
pub(super) async fn info(conn: &mut impl redis::aio::ConnectionLike, url: &str) -> Result<Option<String>> {
    match redis::cmd("INFO").query_async(conn).await {
        Ok(info) => Ok(Some(info)),
        // A user whose ACL forbids INFO (say `-@dangerous`): no verdict.
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm) => Ok(None),
        Err(e) => match Error::from(e) {
            // Unreachable, or a password needed and not given (NOAUTH).
            e if matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Misconfigured) => {
                Err(connect_error(e, "Redis", url))
            }
            _ => Ok(None),
        },
    }
}

/// Checks the version of every node of a cluster (masters and replicas:
/// a replica may be promoted), with one INFO sent to each.
pub(super) async fn check_cluster_versions(conn: &mut ClusterConnection, url: &str) -> Result<()> {
    use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
    let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllNodes, Some(ResponsePolicy::Special)));
    let answers = match conn.route_command(redis::cmd("INFO"), routing).await {
        Ok(Value::Map(answers)) => answers,
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm) => return Ok(()),
        Err(e) => return Err(connect_error(e, "the Redis Cluster", url)),
    };
    for (node, answer) in answers {
        // A node that answered with an error (INFO disallowed) says nothing.
        let (Ok(node), Ok(info)) = (
            redis::from_redis_value::<String>(node),
            redis::from_redis_value::<String>(answer),
        ) else {
            continue;
        };
        check_version(&info, &format!("cluster node {node} of {}", redacted(url)))?;
    }
    Ok(())
}
