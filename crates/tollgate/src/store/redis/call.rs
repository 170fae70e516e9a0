//! Running a script: EVALSHA with a reload on NOSCRIPT, one deadline per
//! call, and the durable handle's script + `WAIT` pipeline on its own
//! connection.

use std::future::Future;
use std::time::Duration;

use redis::{Script, Value};

use crate::error::{Error, ErrorKind, Result};

use super::RedisStore;
use super::conn::Conn;
use super::script::{Durable, is_noscript, slot_of};

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
