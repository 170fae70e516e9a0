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
//!   admission rate, state) are written back if the store has none.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tollgate::Gate;

use super::states::{RoomState, Schedule, Stored};

/// How often each server reads each room's revocation log and settings.
pub(crate) const WATCH_EVERY: Duration = Duration::from_millis(40);
/// The fast path needs a view that started at most this long ago.
pub(crate) const FRESH: Duration = Duration::from_millis(100);
/// How far apart the servers' clocks may be. A token carries the time its
/// server issued it, so on a new epoch tokens issued up to this long after
/// it was seen are checked too (each costs one store check, once).
pub(crate) const SKEW: Duration = Duration::from_secs(1);
/// Pages of the revocation log one read takes at most.
const MAX_PAGES: usize = 20;
/// Unconfirmed ends kept for retrying at most.
const MAX_PENDING: usize = 100_000;

/// The settings a room wants the store to have. Learned from the store
/// while it has them (so an admin change made through any server is kept),
/// written back when it forgets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settings {
    pub(crate) capacity: u32,
    pub(crate) admission_interval: Option<Duration>,
    /// Open, paused, closed, sold out or passthrough, and when it opens
    /// and closes (the gate's door and pause, see states.rs).
    pub(crate) state: RoomState,
    pub(crate) schedule: Schedule,
    /// Free places go to visitors picked at random (`queueing =
    /// "random"`): no place is shown.
    pub(crate) random: bool,
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
    /// How many times the tokens issued so far were distrusted: a tunnel
    /// checks its session again when this moves.
    resets: AtomicU64,
    /// Sessions ended on this server whose end the store has not
    /// confirmed yet (it failed): retried by the watch until it does.
    pending: Mutex<Vec<String>>,
    /// While settings are being written back (paused for a moment),
    /// what the store says is not what the room wants: not learned.
    hold: AtomicBool,
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
            resets: AtomicU64::new(0),
            pending: Mutex::default(),
            hold: AtomicBool::new(false),
            keep,
        }
    }

    /// How long an ended session is remembered (and kept in the store's
    /// log).
    pub(crate) fn keep(&self) -> Duration {
        self.keep
    }

    /// Stops (or starts again) learning the settings from the store.
    pub(crate) fn hold_settings(&self, hold: bool) {
        self.hold.store(hold, Ordering::Release);
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
        if !self.is_fresh(now_ms) {
            return false;
        }
        if issued_ms < self.trust_from.load(Ordering::Acquire) {
            return false;
        }
        !self.is_revoked(token)
    }

    /// Whether the last read that succeeded began under [`FRESH`] ago.
    pub(crate) fn is_fresh(&self, now_ms: u64) -> bool {
        let fresh = self.fresh_from.load(Ordering::Acquire);
        fresh != 0 && now_ms.saturating_sub(fresh) <= FRESH.as_millis() as u64
    }

    /// Moves each time the tokens issued so far are distrusted.
    pub(crate) fn resets(&self) -> u64 {
        self.resets.load(Ordering::Acquire)
    }

    /// Remembers an end the store did not confirm, to retry (at most
    /// `MAX_PENDING`; past that the oldest are given up, and those
    /// sessions end by their TTL).
    pub(crate) fn end_failed(&self, token: &str) {
        let mut pending = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if pending.len() >= MAX_PENDING {
            pending.remove(0);
        }
        pending.push(token.to_owned());
    }

    /// Takes up to `n` ends to retry.
    pub(crate) fn take_pending(&self, n: usize) -> Vec<String> {
        let mut pending = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = n.min(pending.len());
        pending.drain(..n).collect()
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
        self.resets.fetch_add(1, Ordering::AcqRel);
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

    /// One read of the store, begun at `began_ms`: learns ended sessions
    /// (every page of them: the view is fresh only once it has read to the
    /// end of the log), the settings and the epoch.
    pub(crate) async fn read(&self, gate: &Gate, began_ms: u64) -> tollgate::Result<Seen> {
        let cursor = self.lock().cursor;
        let mut w = gate.watch_state(cursor).await?;
        let mut pages = 1;
        while w.revoked.len() >= tollgate::MAX_REVOKED_PER_WATCH {
            if pages >= MAX_PAGES {
                // A log this long takes more than one read: take it in
                // and go on next time, not fresh yet.
                self.learn(&w.revoked, w.cursor, began_ms);
                return Err(tollgate::Error::unavailable(
                    "the room's revocation log is longer than one read takes",
                ));
            }
            self.learn(&w.revoked, w.cursor, began_ms);
            let more = gate.watch_state(w.cursor).await?;
            w = more;
            pages += 1;
        }
        self.learn(&w.revoked, w.cursor, began_ms);
        let seen = {
            let mut log = self.lock();
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
            Some(_) if self.hold.load(Ordering::Acquire) => {}
            Some(capacity) => {
                let stored = Stored::of(w.paused, &w.door);
                *self
                    .settings
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Settings {
                    capacity,
                    admission_interval: w.admission_interval,
                    state: stored.state,
                    schedule: stored.schedule,
                    random: w.random,
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

    /// Takes in a page of ended sessions and where the next read starts.
    fn learn(&self, revoked: &[String], cursor: u64, began_ms: u64) {
        let until = began_ms + self.keep.as_millis() as u64;
        let mut log = self.lock();
        for id in revoked {
            log.revoked.entry(id.clone()).or_insert(until);
        }
        log.cursor = cursor;
    }

    /// Drops ended sessions no token can name any more; returns how many
    /// are remembered.
    pub(crate) fn prune(&self, now_ms: u64) -> usize {
        let mut log = self.lock();
        log.revoked.retain(|_, until| *until > now_ms);
        log.revoked.len()
    }
}
