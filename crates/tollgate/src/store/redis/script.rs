//! The scripts (each primitive's, composed by store/lua.rs; the gate's in
//! gate/scripts.rs), a durable handle's settings, and what a call needs
//! to know of a reply or a key; `call.rs` runs them.

use std::time::Duration;

use redis::Script;

use crate::gate::scripts::GateScripts;
use crate::store::lua::{LuaFile, compose};

use super::conn::Conn;

/// The Lua files of a job queue's scripts: queue.lua (its keys and shared
/// steps) starts both jobs.lua (after claim.lua) and schedule.lua.
const QUEUE_FILES: &[LuaFile] = &[
    ("queue.lua", include_str!("../../jobs/lua/queue.lua")),
    ("claim.lua", include_str!("../../jobs/lua/claim.lua")),
    ("jobs.lua", include_str!("../../jobs/lua/jobs.lua")),
    ("schedule.lua", include_str!("../../schedule/lua/schedule.lua")),
];

pub(crate) struct Scripts {
    /// The gate's (gate/scripts.rs).
    pub(crate) gate: GateScripts,
    pub(crate) limit: Script,
    pub(crate) jobs: Script,
    pub(crate) schedules: Script,
    pub(crate) schedule_index: Script,
}

impl Scripts {
    pub(super) fn all(&self) -> impl Iterator<Item = &Script> {
        self.gate
            .all()
            .chain([&self.limit, &self.jobs, &self.schedules, &self.schedule_index])
    }

    /// The scripts, composed once (store/lua.rs); on a cluster they
    /// publish with `SPUBLISH` (sharded); a gate's meta hash outlives its
    /// last deadline by `idle`.
    pub(super) fn new(cluster: bool, idle: Duration) -> Self {
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
        // The files are built in; the unit tests compose every script.
        let queue = |entry| script(&compose(QUEUE_FILES, entry).expect("the queue's scripts compose"));
        Scripts {
            gate: GateScripts::new(script),
            limit: script(include_str!("../../limit/limit.lua")),
            jobs: queue("jobs.lua"),
            schedules: queue("schedule.lua"),
            schedule_index: script(include_str!("../../schedule/lua/index.lua")),
        }
    }
}

/// A durable handle's settings and its own connection.
pub(super) struct Durable {
    pub(super) replicas: u32,
    pub(super) timeout: Duration,
    pub(super) conn: Conn,
    /// Through Sentinel: 1 + the master generation the scripts were last
    /// loaded on (0: never). A NOSCRIPT costs a whole WAIT when replicas
    /// are missing, as they are right after a failover, so a new master
    /// gets every script first.
    pub(super) loaded: std::sync::atomic::AtomicU64,
}

pub(super) fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// The Redis Cluster slot of `key` (CRC16 of its hash tag, or of the whole
/// key if it has none).
pub(super) fn slot_of(key: &str) -> u16 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_composes_with_the_store_settings() {
        let plain = Scripts::new(false, Duration::from_secs(600));
        let hashes: std::collections::BTreeSet<_> = plain.all().map(|s| s.get_hash().to_string()).collect();
        assert_eq!(hashes.len(), 17, "17 distinct scripts");
        // The idle period and the cluster's SPUBLISH reach the gate's
        // composed texts (keys.lua's IDLE, meta.lua's PUBLISH).
        let idle = Scripts::new(false, Duration::from_secs(5));
        assert_ne!(plain.gate.poll.get_hash(), idle.gate.poll.get_hash());
        let cluster = Scripts::new(true, Duration::from_secs(600));
        assert_ne!(plain.gate.leave.get_hash(), cluster.gate.leave.get_hash());
        assert_eq!(plain.gate.watch.get_hash(), cluster.gate.watch.get_hash());
    }
}
