//! The pub/sub listener: one RESP3 connection per store that hears
//! hand-offs (`id:fence …`) and job-queue pushes (`!<key> <n>`) and wakes
//! this process's waiters; per-channel counts so a channel is subscribed
//! while anyone here listens on it, and for a linger after.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::time::Instant;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Msg, ProtocolVersion, PushKind};
use tokio::sync::Mutex as AsyncMutex;

use crate::error::{Error, Result};
use crate::store::wakers::Wakers;

use super::conn::{Target, cluster_builder};

/// Keeps this process subscribed to one gate's or queue's channel.
#[derive(Debug)]
pub(crate) struct Listening {
    /// The channel was not (known to be) subscribed all along since the
    /// caller's request was sent: a hand-off may have been announced
    /// unheard, so the caller should poll once.
    pub(crate) fresh: bool,
    _guard: SubscriptionGuard,
}

/// How long a channel nobody here listens on any more stays subscribed: a
/// gate that queues now and then would otherwise pay a SUBSCRIBE round
/// trip for its first waiter each time, and an UNSUBSCRIBE after its last.
const LINGER: Duration = Duration::from_secs(5);

/// Per-channel subscription counts on the listening connection.
///
/// Counting is a plain (std) mutex: a listener on a channel already
/// subscribed counts itself in and out without waiting for anything, and
/// a guard's drop spawns nothing. Every SUBSCRIBE and UNSUBSCRIBE goes
/// under the one async `changes` lock, in order on the one connection, so
/// a late unsubscribe can never undo a newer subscribe. A channel is in
/// `channels` only once its SUBSCRIBE was answered, and leaves it (under
/// `changes`) before its UNSUBSCRIBE is sent: whoever finds it there can
/// rely on it until its guard drops.
pub(super) struct Subscriptions {
    target: Arc<Target>,
    /// The listening connection and the master generation it was made for.
    conn: AsyncMutex<Option<(u64, SubConn)>>,
    changes: AsyncMutex<()>,
    state: Mutex<SubState>,
    wakers: Arc<Wakers>,
}

#[derive(Default)]
struct SubState {
    channels: HashMap<Arc<str>, Channel>,
    /// A task is unsubscribing channels whose linger ran out.
    reaping: bool,
}

struct Channel {
    listeners: usize,
    /// When its SUBSCRIBE was answered: a message published after this
    /// reaches this process.
    live_since: Instant,
    /// Since when nobody listens (while `listeners` is 0).
    idle_since: Instant,
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
    /// Counts one more listener on `channel` for as long as the returned
    /// guard lives. `asked` is when the caller sent the request whose
    /// outcome it will wait for: [`Listening::fresh`] says whether the
    /// channel may have been deaf to a message published since.
    pub(super) async fn listen(self: &Arc<Self>, channel: &str, asked: Instant) -> Result<Listening> {
        let (channel, live_since) = self.acquire(channel).await?;
        Ok(Listening {
            fresh: live_since > asked,
            _guard: SubscriptionGuard {
                subs: Arc::downgrade(self),
                channel,
            },
        })
    }

    /// The subscriptions of a store on `target`, waking `wakers`; through
    /// Sentinel they follow the master when it moves.
    pub(super) fn start(target: Arc<Target>, wakers: Arc<Wakers>) -> Arc<Subscriptions> {
        let subs = Arc::new(Subscriptions {
            target: target.clone(),
            conn: AsyncMutex::new(None),
            changes: AsyncMutex::new(()),
            state: Mutex::new(SubState::default()),
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

    fn lock(&self) -> std::sync::MutexGuard<'_, SubState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The listening connection, made anew (and subscribed to every
    /// channel counted) if the master moved since it was made. Called
    /// under `changes`.
    pub(super) async fn connection(&self) -> Result<SubConn> {
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
            let channels: Vec<Arc<str>> = self.lock().channels.keys().cloned().collect();
            for channel in channels {
                conn.subscribe(&channel).await?;
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
        let _changes = self.changes.lock().await;
        match self.connection().await {
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

    /// Counts one more listener on `channel`, subscribing first unless it
    /// is subscribed already. Returns the channel's name as the count's
    /// guard keeps it, and since when it is subscribed.
    pub(super) async fn acquire(&self, channel: &str) -> Result<(Arc<str>, Instant)> {
        if let Some(hit) = self.count_in(channel) {
            return Ok(hit);
        }
        let _changes = self.changes.lock().await;
        // Subscribed by someone else while this one waited?
        if let Some(hit) = self.count_in(channel) {
            return Ok(hit);
        }
        let mut conn = self.connection().await?;
        conn.subscribe(channel).await?;
        let name: Arc<str> = Arc::from(channel);
        let now = Instant::now();
        self.lock().channels.insert(
            name.clone(),
            Channel {
                listeners: 1,
                live_since: now,
                idle_since: now,
            },
        );
        Ok((name, now))
    }

    /// Counts one more listener on `channel` if it is subscribed.
    fn count_in(&self, channel: &str) -> Option<(Arc<str>, Instant)> {
        let mut st = self.lock();
        let (name, ch) = st.channels.get_key_value(channel)?;
        let hit = (name.clone(), ch.live_since);
        st.channels.get_mut(channel)?.listeners += 1;
        Some(hit)
    }

    /// Counts one listener out. The last one out leaves the channel
    /// subscribed for [`LINGER`]; a task unsubscribes it after that unless
    /// someone listens again meanwhile.
    fn release(self: &Arc<Self>, channel: &str) {
        let mut st = self.lock();
        let Some(ch) = st.channels.get_mut(channel) else {
            return;
        };
        ch.listeners -= 1;
        if ch.listeners > 0 {
            return;
        }
        ch.idle_since = Instant::now();
        if st.reaping {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            // No runtime to reap from: the channel stays subscribed until
            // a later release finds one (a stray message costs little).
            return;
        };
        st.reaping = true;
        drop(st);
        rt.spawn(reap(Arc::downgrade(self)));
    }

    /// Unsubscribes the channels idle for [`LINGER`] by `now`. Returns when
    /// to look again, or `None` when no channel is idle any more (and the
    /// reaper stops).
    async fn reap_once(&self, now: Instant) -> Option<Instant> {
        let _changes = self.changes.lock().await;
        let (expired, next) = {
            let mut st = self.lock();
            let mut expired = Vec::new();
            let mut next: Option<Instant> = None;
            st.channels.retain(|name, ch| {
                if ch.listeners > 0 {
                    return true;
                }
                let due = ch.idle_since + LINGER;
                if due <= now {
                    expired.push(name.clone());
                    return false;
                }
                next = Some(next.map_or(due, |n| n.min(due)));
                true
            });
            if next.is_none() {
                st.reaping = false;
            }
            (expired, next)
        };
        if !expired.is_empty()
            && let Ok(mut conn) = self.connection().await
        {
            for channel in &expired {
                // Best effort: a failed unsubscribe only costs stray messages.
                let _ = conn.unsubscribe(channel).await;
            }
        }
        next
    }
}

/// The linger's end for idle channels: unsubscribes them once nobody has
/// listened for [`LINGER`], then stops when none is idle.
async fn reap(subs: Weak<Subscriptions>) {
    let mut at = Instant::now() + LINGER;
    loop {
        tokio::time::sleep_until(at).await;
        let Some(subs) = subs.upgrade() else { return };
        match subs.reap_once(Instant::now()).await {
            Some(next) => at = next,
            None => return,
        }
    }
}

/// Holds one count on a channel.
pub(crate) struct SubscriptionGuard {
    subs: Weak<Subscriptions>,
    channel: Arc<str>,
}

impl fmt::Debug for SubscriptionGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubscriptionGuard")
            .field("channel", &&*self.channel)
            .finish()
    }
}

impl Drop for SubscriptionGuard {
    fn drop(&mut self) {
        if let Some(subs) = self.subs.upgrade() {
            subs.release(&self.channel);
        }
    }
}
