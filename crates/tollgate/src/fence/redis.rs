//! [`fenced_set`]: the guarded write on Redis, with the script shipped as
//! [`FENCED_SET_LUA`] for clients in other languages.

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::ConnectionLike;

use crate::error::{Error, Result};

/// The guarded write's script (`src/fence/fenced_set.lua`): its header
/// says what it takes and answers.
pub const FENCED_SET_LUA: &str = include_str!("fenced_set.lua");

static SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(FENCED_SET_LUA));

/// What a [`fenced_set`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FencedSet {
    /// Written; the key's mark is now this fence.
    Written,
    /// Refused: a write with this higher fence came first.
    Stale {
        /// The highest fence seen for the key.
        highest: u64,
    },
}

/// Sets `key` to `value` on the caller's own Redis connection only if
/// `fence` is at least the highest fence seen for it (kept at
/// `fence_key`; on Redis Cluster give both one hash tag), in one script
/// call (EVALSHA, loading it on NOSCRIPT). `ttl`, if given, is the value's.
pub async fn fenced_set<C: ConnectionLike>(
    conn: &mut C,
    key: &str,
    fence_key: &str,
    fence: u64,
    value: &[u8],
    ttl: Option<Duration>,
) -> Result<FencedSet> {
    if fence == 0 {
        return Err(Error::invalid("a fence is a whole number from 1 up"));
    }
    if key == fence_key {
        return Err(Error::invalid("the value's key and its fence's key must differ"));
    }
    let ttl_ms = match ttl {
        Some(d) if d.as_millis() == 0 || d.as_millis() >= 1_000_000_000_000_000 => {
            return Err(Error::invalid("the TTL must be from 1 ms to 15 digits of ms"));
        }
        Some(d) => d.as_millis().to_string(),
        None => String::new(),
    };
    let (written, mark): (i64, String) = SCRIPT
        .key(key)
        .key(fence_key)
        .arg(fence)
        .arg(value)
        .arg(ttl_ms)
        .invoke_async(conn)
        .await?;
    if written == 1 {
        return Ok(FencedSet::Written);
    }
    let highest = mark.parse().map_err(|_| {
        Error::invalid(format!(
            "fenced_set: the mark at {fence_key} is not a fence: {mark:?}"
        ))
    })?;
    Ok(FencedSet::Stale { highest })
}
