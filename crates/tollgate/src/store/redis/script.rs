//! Script invocation: the scripts (each primitive's, composed by
//! store/lua.rs; the gate's in gate/scripts.rs), EVALSHA with a reload on
//! NOSCRIPT, one deadline per call, and the durable handle's script +
//! `WAIT` pipeline.

use std::future::Future;
use std::time::Duration;

use redis::{Script, Value};

use crate::error::{Error, ErrorKind, Result};
use crate::gate::scripts::GateScripts;
use crate::store::lua::{LuaFile, compose};

use super::RedisStore;
use super::conn::Conn;

/// The Lua files of a job queue's scripts: queue.lua (its keys and shared
/// steps) starts both jobs.lua and schedule.lua.
const QUEUE_FILES: &[LuaFile] = &[
    ("queue.lua", include_str!("../../jobs/lua/queue.lua")),
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

impl RedisStore {
    /// Runs `op` within `limit`: the connection's own response timeout
    /// bounds one request, but not a call that also waits for a reconnect
    /// (the connection manager's retries) or sends a second request
    /// (NOSCRIPT): against a frozen server such a call took two timeouts.
    /// This is the one deadline of the whole call.
    pub(crate) async fn within<T>(&self, limit: Duration, op: impl Future<Output = Result<T>>) -> Result<T> {
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
    pub(crate) async fn invoke_plain<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        keys: &[String],
        args: impl redis::ToRedisArgs,
    ) -> Result<T> {
        self.within(self.timeout, self.eval_plain(script, keys, args))
            .await
    }

    pub(super) async fn eval_plain<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        keys: &[String],
        args: impl redis::ToRedisArgs,
    ) -> Result<T> {
        let mut eval = redis::cmd("EVALSHA");
        eval.arg(script.get_hash()).arg(keys.len()).arg(keys).arg(args);
        let mut conn = self.conn.clone();
        let first = match &self.batch {
            Some(b) => b
                .query(&eval, &mut conn)
                .await
                .and_then(|v| Ok(redis::from_redis_value(v)?)),
            None => eval.query_async(&mut conn).await,
        };
        match first {
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
    pub(crate) async fn invoke<T: redis::FromRedisValue>(
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
    pub(super) async fn eval_durable<T: redis::FromRedisValue>(
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
    pub(super) async fn load_all(&self, conn: &mut Conn) -> Result<()> {
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
            batch: self.batch.clone(),
            timeout: self.timeout,
            idle: self.idle,
            prefix: self.prefix.clone(),
            scripts: self.scripts.clone(),
            wakers: self.wakers.clone(),
            passes: self.passes.clone(),
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_composes_with_the_store_settings() {
        let plain = Scripts::new(false, Duration::from_secs(600));
        let hashes: std::collections::BTreeSet<_> = plain.all().map(|s| s.get_hash().to_string()).collect();
        assert_eq!(hashes.len(), 16, "16 distinct scripts");
        // The idle period and the cluster's SPUBLISH reach the gate's
        // composed texts (keys.lua's IDLE, meta.lua's PUBLISH).
        let idle = Scripts::new(false, Duration::from_secs(5));
        assert_ne!(plain.gate.poll.get_hash(), idle.gate.poll.get_hash());
        let cluster = Scripts::new(true, Duration::from_secs(600));
        assert_ne!(plain.gate.leave.get_hash(), cluster.gate.leave.get_hash());
        assert_eq!(plain.gate.watch.get_hash(), cluster.gate.watch.get_hash());
    }
}
