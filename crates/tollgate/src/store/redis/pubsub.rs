//! The pub/sub listener: one RESP3 connection per store that hears
//! hand-offs (`id:fence …`) and job-queue pushes (`!<key> <n>`) and wakes
//! this process's waiters; per-channel counts so a channel is subscribed
//! while anyone here listens on it.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Msg, ProtocolVersion, PushKind};
use tokio::sync::Mutex as AsyncMutex;

use crate::error::{Error, Result};
use crate::store::wakers::Wakers;

use super::RedisStore;
use super::conn::{Target, cluster_builder};

/// Keeps this process subscribed to one gate's or queue's channel.
#[derive(Debug)]
pub(crate) struct Listening {
    /// It had to start listening just now: a hand-off may have been
    /// announced before, so the caller should poll once.
    pub(crate) fresh: bool,
    _guard: SubscriptionGuard,
}

impl RedisStore {
    /// Counts one more listener on `channel` for as long as the returned
    /// guard lives.
    pub(in crate::store) async fn subscribe(&self, channel: String) -> Result<Listening> {
        let fresh = self.subs.acquire(&channel).await?;
        Ok(Listening {
            fresh,
            _guard: SubscriptionGuard {
                subs: Arc::downgrade(&self.subs),
                channel,
            },
        })
    }
}

/// Per-channel subscription counts on the listening connection. Subscribing
/// and unsubscribing happen under one async lock so a late unsubscribe can
/// never undo a newer subscribe.
pub(super) struct Subscriptions {
    target: Arc<Target>,
    /// The listening connection and the master generation it was made for.
    conn: AsyncMutex<Option<(u64, SubConn)>>,
    counts: AsyncMutex<HashMap<String, usize>>,
    wakers: Arc<Wakers>,
}

/// A RESP3 connection to one server that hands its pushes to `tx` and
/// subscribes again by itself after a reconnect.
pub(super) async fn listener(
    info: redis::ConnectionInfo,
    config: ConnectionManagerConfig,
    tx: tokio::sync::mpsc::UnboundedSender<redis::PushInfo>,
) -> redis::RedisResult<ConnectionManager> {
    let settings = info.redis_settings().clone().set_protocol(ProtocolVersion::RESP3);
    let client = redis::Client::open(info.set_redis_settings(settings))?;
    let config = config.set_push_sender(tx).set_automatic_resubscription();
    ConnectionManager::new_with_config(client, config).await
}

/// The listening connection: plain pub/sub on one server, sharded pub/sub
/// on a cluster. Both re-subscribe by themselves after a reconnect.
#[derive(Clone)]
pub(super) enum SubConn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl SubConn {
    pub(super) async fn subscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        match self {
            SubConn::Single(c) => c.subscribe(channel).await,
            SubConn::Cluster(c) => c.ssubscribe(channel).await,
        }
    }

    pub(super) async fn unsubscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        match self {
            SubConn::Single(c) => c.unsubscribe(channel).await,
            SubConn::Cluster(c) => c.sunsubscribe(channel).await,
        }
    }
}

impl Subscriptions {
    /// The subscriptions of a store on `target`, waking `wakers`; through
    /// Sentinel they follow the master when it moves.
    pub(super) fn start(target: Arc<Target>, wakers: Arc<Wakers>) -> Arc<Subscriptions> {
        let subs = Arc::new(Subscriptions {
            target: target.clone(),
            conn: AsyncMutex::new(None),
            counts: AsyncMutex::new(HashMap::new()),
            wakers,
        });
        if let Target::Sentinel(master) = target.as_ref() {
            // When the master moves, the subscriptions move with it.
            let mut moved = master.generation.subscribe();
            let weak = Arc::downgrade(&subs);
            tokio::spawn(async move {
                while moved.changed().await.is_ok() {
                    // Until listening on the new master works (or the store
                    // is gone, or the master moves again).
                    loop {
                        let Some(subs) = weak.upgrade() else { return };
                        if subs.follow().await {
                            break;
                        }
                        drop(subs);
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        if moved.has_changed().unwrap_or(true) {
                            break;
                        }
                    }
                }
            });
        }
        subs
    }

    /// The listening connection, made anew (and subscribed to `channels`)
    /// if the master moved since it was made.
    pub(super) async fn connection(&self, channels: &HashMap<String, usize>) -> Result<SubConn> {
        let generation = self.target.generation();
        let mut slot = self.conn.lock().await;
        if let Some((g, conn)) = slot.as_ref()
            && *g == generation
        {
            return Ok(conn.clone());
        }
        let moved = slot.is_some();
        let mut conn = self.open().await?;
        if moved {
            for channel in channels.keys() {
                conn.subscribe(channel).await?;
            }
            // Whatever was published meanwhile went elsewhere.
            self.wakers.wake_all();
        }
        *slot = Some((generation, conn.clone()));
        Ok(conn)
    }

    /// After the master moved: listen on the new one at once. Returns
    /// whether that worked.
    pub(super) async fn follow(&self) -> bool {
        let counts = self.counts.lock().await;
        match self.connection(&counts).await {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(error = %e, "could not listen on the new master yet; waiters re-check meanwhile");
                false
            }
        }
    }

    pub(super) async fn open(&self) -> Result<SubConn> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let conn = match self.target.as_ref() {
            Target::Single(single) => {
                let (info, config, _) = single.as_ref();
                SubConn::Single(listener(info.clone(), config.clone(), tx).await?)
            }
            Target::Sentinel(master) => {
                let addr = master
                    .addr()
                    .ok_or_else(|| Error::unavailable("no master known yet"))?;
                let info = master.template.clone().set_addr(addr);
                SubConn::Single(listener(info, master.config.clone(), tx).await?)
            }
            Target::Cluster(nodes, config) => {
                let client = cluster_builder(nodes, config)
                    .use_protocol(ProtocolVersion::RESP3)
                    .push_sender(tx)
                    .build()?;
                SubConn::Cluster(client.get_async_connection().await?)
            }
        };
        let wakers = self.wakers.clone();
        tokio::spawn(async move {
            while let Some(push) = rx.recv().await {
                if push.kind == PushKind::Disconnection {
                    // Whatever was published meanwhile is lost: let
                    // every waiter look for itself.
                    wakers.wake_all();
                    continue;
                }
                if let Some(msg) = Msg::from_push_info(push)
                    && let Ok(text) = std::str::from_utf8(msg.get_payload_bytes())
                {
                    // "!<key> <n>": a job queue's push; wake up to n
                    // consumers.
                    if let Some(rest) = text.strip_prefix('!') {
                        let (key, n) = rest
                            .rsplit_once(' ')
                            .and_then(|(k, n)| Some((k, n.parse().ok()?)))
                            .unwrap_or((rest, 1));
                        wakers.wake(key, n);
                        continue;
                    }
                    for entry in text.split(' ') {
                        if let Some((id, fence)) = entry.split_once(':')
                            && let Ok(fence) = fence.parse()
                        {
                            wakers.hand_off(id, fence);
                        }
                    }
                }
            }
        });
        Ok(conn)
    }

    /// Counts one more listener on `channel`; subscribes if it is the first.
    pub(super) async fn acquire(&self, channel: &str) -> Result<bool> {
        let mut counts = self.counts.lock().await;
        if let Some(n) = counts.get_mut(channel) {
            *n += 1;
            return Ok(false);
        }
        let mut conn = self.connection(&counts).await?;
        conn.subscribe(channel).await?;
        counts.insert(channel.to_owned(), 1);
        Ok(true)
    }

    pub(super) async fn release(&self, channel: String) {
        let mut counts = self.counts.lock().await;
        let Some(n) = counts.get_mut(&channel) else { return };
        *n -= 1;
        if *n > 0 {
            return;
        }
        counts.remove(&channel);
        if let Ok(mut conn) = self.connection(&counts).await {
            // Best effort: a failed unsubscribe only costs stray messages.
            let _ = conn.unsubscribe(&channel).await;
        }
    }
}

/// Holds one count on a channel; releasing happens in a spawned task.
pub(crate) struct SubscriptionGuard {
    subs: Weak<Subscriptions>,
    channel: String,
}

impl fmt::Debug for SubscriptionGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubscriptionGuard")
            .field("channel", &self.channel)
            .finish()
    }
}

impl Drop for SubscriptionGuard {
    fn drop(&mut self) {
        let (Some(subs), Ok(handle)) = (self.subs.upgrade(), tokio::runtime::Handle::try_current()) else {
            return;
        };
        let channel = std::mem::take(&mut self.channel);
        handle.spawn(async move { subs.release(channel).await });
    }
}
