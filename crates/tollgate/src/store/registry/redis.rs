//! The registry on Redis: a sorted set per kind, every member at score 0,
//! so ZRANGEBYLEX gives the names in byte order, a prefix as a range and a
//! cursor as an exclusive start. All kinds share the hash tag `{names}`
//! (one slot on a cluster). Single commands, no script: each step touches
//! one key (`add.lua` adds a name and keeps the set's expiry).

use redis::Value;

use super::Kind;
use crate::error::Result;
use crate::store::redis::RedisStore;

/// `add.lua`: sent with EVAL (it runs once per new name per process per
/// minute, so caching it is not worth a NOSCRIPT path).
const ADD: &str = include_str!("add.lua");

impl RedisStore {
    fn registry_key(&self, kind: Kind) -> String {
        format!("{}:registry:{{names}}:{}", self.prefix, kind.as_str())
    }

    /// Adds `name`, and keeps the set for the idle period from now, like
    /// every other key: with no registration for that long (nothing new
    /// used anywhere) it goes, and an idle store holds no keys at all.
    pub(crate) async fn registry_add(&self, kind: Kind, name: &str) -> Result<()> {
        let key = self.registry_key(kind);
        let mut add = redis::cmd("EVAL");
        add.arg(ADD)
            .arg(1)
            .arg(key)
            .arg(name)
            .arg(self.idle.as_millis() as u64);
        let _: Value = self.command(add).await?;
        Ok(())
    }

    pub(crate) async fn registry_remove(&self, kind: Kind, name: &str) -> Result<()> {
        let mut cmd = redis::cmd("ZREM");
        cmd.arg(self.registry_key(kind)).arg(name);
        let _: Value = self.command(cmd).await?;
        Ok(())
    }

    pub(crate) async fn registry_range(
        &self,
        kind: Kind,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>> {
        let min: Vec<u8> = match after {
            Some(a) if a >= prefix => [b"(", a.as_bytes()].concat(),
            _ if prefix.is_empty() => b"-".to_vec(),
            _ => [b"[", prefix.as_bytes()].concat(),
        };
        // No name holds the byte 0xff (names are UTF-8), so every name
        // that starts with the prefix sorts below prefix + 0xff.
        let max: Vec<u8> = if prefix.is_empty() {
            b"+".to_vec()
        } else {
            [b"[", prefix.as_bytes(), &[0xff]].concat()
        };
        let mut cmd = redis::cmd("ZRANGEBYLEX");
        cmd.arg(self.registry_key(kind))
            .arg(min)
            .arg(max)
            .arg("LIMIT")
            .arg(0)
            .arg(limit);
        self.command(cmd).await
    }
}
