//! Each server's view of a room's gate: which sessions ended, whether the
//! store still has the room's settings, and whether the state it keeps is
//! the one this server's tokens were issued against.
//!
//! An admitted visitor's request is forwarded without asking the store
//! (the proxy's fast path) only while this view is fresh, so an ended
//! session stops everywhere within [`FRESH`]:
//!
//! - Every way a session ends (the site's `Tollgate-Session: end`, the
//!   admin API, the visitor's `leave`) goes through `Gate::end`, which
//!   records the session in the gate's revocation log in the same atomic
//!   step that frees its slot. Every server reads the log every
//!   [`WATCH_EVERY`] (one small read per room, whatever the traffic) and
//!   refuses those tokens. The server that ended a session refuses it at
//!   once. A session that ends by its TTL needs no record: a token older
//!   than a quarter of the TTL is always checked with the store.
//! - A view older than [`FRESH`] (the store is slow or unreachable) turns
//!   the fast path off: every admitted visitor's request is checked with
//!   the store until the view is fresh again.
//! - The gate's state carries an epoch, new whenever the state is created
//!   anew: a Redis that lost its data (`FLUSHALL`, a restart without
//!   persistence, a failover to an empty replica), or an idle gate the
//!   embedded store dropped. On a new epoch no token issued before it is
//!   trusted without a store check, and the room's settings (capacity,
//!   pause, admission rate) are written back if the store has none.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tollgate::Gate;

/// How often each server reads each room's revocation log and settings.
pub(crate) const WATCH_EVERY: Duration = Duration::from_millis(40);
/// The fast path needs a view that started at most this long ago.
pub(crate) const FRESH: Duration = Duration::from_millis(100);
/// How far apart the servers' clocks may be. A token carries the time its
/// server issued it, so on a new epoch tokens issued up to this long after
/// it was seen are checked too (each costs one store check, once).
pub(crate) const SKEW: Duration = Duration::from_secs(1);

/// The settings a room wants the store to have. Learned from the store
/// while it has them (so an admin change made through any server is kept),
/// written back when it forgets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settings {
    pub(crate) capacity: u32,
    pub(crate) paused: bool,
    pub(crate) admission_interval: Option<Duration>,
}

/// What a room's view concluded from one read of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// All as expected.
    Same,
    /// The store has no settings for the room: write them back.
    Forgotten,
    /// The state was created anew since the last read.
    NewEpoch,
}

#[derive(Debug, Default)]
struct Log {
    /// Ended sessions → when to forget them (ms, this server's clock).
    revoked: HashMap<String, u64>,
    /// The store's epoch at the last read; `None` before the first.
    epoch: Option<u64>,
    /// Where the next read of the revocation log starts.
    cursor: u64,
}

#[derive(Debug)]
pub(crate) struct View {
    log: Mutex<Log>,
    settings: Mutex<Settings>,
    /// When (ms, this server's clock) the last read that succeeded began;
    /// 0: none yet.
    fresh_from: AtomicU64,
    /// Tokens issued before this (ms) are checked with the store.
    trust_from: AtomicU64,
    /// The store has the room's settings (as of the last read).
    configured: AtomicBool,
    /// How long an ended session is remembered.
    keep: Duration,
}

impl View {
    /// A view for a server starting at `now_ms`: it cannot know which
    /// state the tokens it meets were issued against, so it checks each
    /// one issued before it started with the store once.
    pub(crate) fn new(settings: Settings, keep: Duration, now_ms: u64) -> View {
        View {
            log: Mutex::default(),
            settings: Mutex::new(settings),
            fresh_from: AtomicU64::new(0),
            trust_from: AtomicU64::new(now_ms + SKEW.as_millis() as u64),
            configured: AtomicBool::new(false),
            keep,
        }
    }

    /// How long an ended session is remembered (and kept in the store's
    /// log).
    pub(crate) fn keep(&self) -> Duration {
        self.keep
    }

    pub(crate) fn settings(&self) -> Settings {
        *self
            .settings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the admitted visitor holding `token`, issued at
    /// `issued_ms`, may pass without a store check at `now_ms`.
    pub(crate) fn trusts(&self, token: &str, issued_ms: u64, now_ms: u64) -> bool {
        let fresh = self.fresh_from.load(Ordering::Acquire);
        if fresh == 0 || now_ms.saturating_sub(fresh) > FRESH.as_millis() as u64 {
            return false;
        }
        if issued_ms < self.trust_from.load(Ordering::Acquire) {
            return false;
        }
        !self.is_revoked(token)
    }

    pub(crate) fn is_revoked(&self, token: &str) -> bool {
        self.lock().revoked.contains_key(token)
    }

    /// Refuses `token` on this server at once (the store's log tells the
    /// others).
    pub(crate) fn revoke(&self, token: &str, now_ms: u64) {
        let until = now_ms + self.keep.as_millis() as u64;
        self.lock().revoked.insert(token.to_owned(), until);
    }

    /// Distrusts every token issued before `now_ms` (give or take the
    /// servers' clock skew).
    pub(crate) fn reset(&self, now_ms: u64) {
        self.trust_from
            .fetch_max(now_ms + SKEW.as_millis() as u64, Ordering::AcqRel);
    }

    /// Whether the last read found the room's settings in the store and
    /// is recent.
    pub(crate) fn ready(&self, now_ms: u64) -> Result<(), &'static str> {
        let fresh = self.fresh_from.load(Ordering::Acquire);
        if fresh == 0 {
            return Err("the room has not read its state from the store yet");
        }
        if now_ms.saturating_sub(fresh) > 5 * FRESH.as_millis() as u64 {
            return Err("the room's view of the store is stale (the store is slow or unreachable)");
        }
        if !self.configured.load(Ordering::Acquire) {
            return Err("the store does not have the room's settings yet");
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One read of the store, begun at `began_ms`: learns ended sessions,
    /// the settings and the epoch.
    pub(crate) async fn read(&self, gate: &Gate, began_ms: u64) -> tollgate::Result<Seen> {
        let cursor = self.lock().cursor;
        let w = gate.watch_state(cursor).await?;
        let seen = {
            let mut log = self.lock();
            let until = began_ms + self.keep.as_millis() as u64;
            for id in w.revoked {
                log.revoked.entry(id).or_insert(until);
            }
            log.cursor = w.cursor;
            let seen = match (log.epoch, w.epoch) {
                (_, None) => Seen::Forgotten,
                (Some(was), Some(now)) if was != now => Seen::NewEpoch,
                _ => Seen::Same,
            };
            if seen == Seen::NewEpoch {
                // A new log, maybe on another clock: read it whole.
                log.cursor = 0;
            }
            if w.epoch.is_some() {
                log.epoch = w.epoch;
            }
            seen
        };
        match w.capacity {
            Some(capacity) => {
                *self
                    .settings
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Settings {
                    capacity,
                    paused: w.paused,
                    admission_interval: w.admission_interval,
                };
                self.configured.store(true, Ordering::Release);
            }
            None => self.configured.store(false, Ordering::Release),
        }
        if seen != Seen::Same {
            // Whatever was issued against the state that went is checked.
            self.reset(began_ms);
        }
        self.fresh_from.fetch_max(began_ms, Ordering::AcqRel);
        Ok(if w.capacity.is_none() {
            Seen::Forgotten
        } else {
            seen
        })
    }

    /// Drops ended sessions no token can name any more; returns how many
    /// are remembered.
    pub(crate) fn prune(&self, now_ms: u64) -> usize {
        let mut log = self.lock();
        log.revoked.retain(|_, until| *until > now_ms);
        log.revoked.len()
    }
}
