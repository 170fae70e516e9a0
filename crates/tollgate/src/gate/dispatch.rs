//! The gate's operations of a [`Store`]: each one atomic step, one
//! critical section on the embedded store and one script on Redis, sent to
//! the backend the store has (the Redis arms box their futures: see
//! `store::Backend`).

use crate::error::Result;
use crate::store::{Backend, Listening, Store, Watch, on_backend};

use super::backend::GateBackend;
use super::memory::memory_barge_key;
use super::types::{
    Admission, DoorChange, DrawRecord, EnterRequest, Entry, GateName, GateStats, GateWatch, Grant, Holding,
    Left, MAX_CURSOR, MAX_REVOKED_PER_WATCH, Pass, Poll, Waiting,
};

impl Store {
    pub(crate) async fn enter(&self, gate: &GateName, req: &EnterRequest<'_>) -> Result<Entry> {
        on_backend!(self, gates, b => GateBackend::enter(b, gate, req))
    }

    /// Changes admission control (see [`Admission`]).
    pub(crate) async fn set_admission(&self, gate: &GateName, admission: &Admission) -> Result<()> {
        on_backend!(self, gates, b => GateBackend::set_admission(b, gate, admission))
    }

    /// Sets how a gate's free permits go to its line: the state of its
    /// random picks, or 0 for first come, first served (see
    /// `Queueing::pick_state`).
    pub(crate) async fn set_queueing(&self, gate: &GateName, pick: u64) -> Result<()> {
        on_backend!(self, gates, b => GateBackend::set_queueing(b, gate, pick))
    }

    /// Sets a gate's door (see [`DoorChange`]).
    pub(crate) async fn set_door(&self, gate: &GateName, change: &DoorChange) -> Result<u64> {
        on_backend!(self, gates, b => GateBackend::set_door(b, gate, change))
    }

    pub(crate) async fn poll(&self, gate: &GateName, id: &str, ttl_ms: u64, hb_ms: u64) -> Result<Poll> {
        on_backend!(self, gates, b => GateBackend::poll(b, gate, id, ttl_ms, hb_ms))
    }

    pub(crate) async fn renew(&self, gate: &GateName, id: &str, ttl_ms: u64) -> Result<Option<Grant>> {
        on_backend!(self, gates, b => GateBackend::renew(b, gate, id, ttl_ms))
    }

    pub(crate) async fn leave(&self, gate: &GateName, id: &str) -> Result<Left> {
        on_backend!(self, gates, b => GateBackend::leave(b, gate, id, None))
    }

    /// `leave` of a held lease that passes its permits on to `to`, an
    /// acquire waiting in this process, in the same step if they are free
    /// for it then (no line left, room, admission control letting one in):
    /// the outcome, and `to`'s grant if it got one.
    pub(crate) async fn pass(
        &self,
        gate: &GateName,
        id: &str,
        to: &Pass<'_>,
    ) -> Result<(Left, Option<Grant>)> {
        on_backend!(self, gates, b => GateBackend::pass(b, gate, id, to))
    }

    /// `leave`, and if a holder was released, its token recorded in the
    /// gate's revocation log for `keep_ms`, in the same step.
    pub(crate) async fn end(&self, gate: &GateName, id: &str, keep_ms: u64) -> Result<Left> {
        on_backend!(self, gates, b => GateBackend::leave(b, gate, id, Some(keep_ms)))
    }

    /// The gate's epoch, stored settings and revocation log from `since`
    /// on; reads only.
    pub(crate) async fn watch_state(&self, gate: &GateName, since: u64) -> Result<GateWatch> {
        // Cursors are store time in ms × 1024, far below 2^53; a larger
        // `since` (never handed out) is cut there so the script's numbers
        // stay exact.
        let since = since.min(MAX_CURSOR);
        on_backend!(self, gates, b => GateBackend::watch_state(b, gate, since, MAX_REVOKED_PER_WATCH))
    }

    pub(crate) async fn set_capacity(&self, gate: &GateName, capacity: u32) -> Result<()> {
        on_backend!(self, gates, b => GateBackend::set_capacity(b, gate, capacity))
    }

    pub(crate) async fn holders(&self, gate: &GateName, limit: u32) -> Result<Vec<Holding>> {
        on_backend!(self, gates, b => GateBackend::holders(b, gate, limit))
    }

    pub(crate) async fn line(&self, gate: &GateName, limit: u32) -> Result<Vec<Waiting>> {
        on_backend!(self, gates, b => GateBackend::line(b, gate, limit))
    }

    /// Ends the holder named by `handle` as `end` would, recorded in the
    /// revocation log for `keep_ms`.
    pub(crate) async fn revoke(&self, gate: &GateName, handle: &str, keep_ms: u64) -> Result<Left> {
        on_backend!(self, gates, b => GateBackend::revoke(b, gate, handle, keep_ms))
    }

    pub(crate) async fn remove_waiter(&self, gate: &GateName, number: u64) -> Result<Left> {
        on_backend!(self, gates, b => GateBackend::remove_waiter(b, gate, number))
    }

    pub(crate) async fn clear_line(&self, gate: &GateName) -> Result<u64> {
        on_backend!(self, gates, b => GateBackend::clear_line(b, gate))
    }

    pub(crate) async fn last_draw(&self, gate: &GateName) -> Result<DrawRecord> {
        on_backend!(self, gates, b => GateBackend::last_draw(b, gate))
    }

    pub(crate) async fn stats(&self, gate: &GateName) -> Result<GateStats> {
        on_backend!(self, gates, b => GateBackend::stats(b, gate))
    }

    /// Watches for permits freed on `gate` (a non-fair acquire waiting to
    /// barge in).
    pub(crate) fn watch_freed(&self, gate: &GateName) -> Watch {
        match &self.backend {
            Backend::Memory(s) => s.wakers().register(&memory_barge_key(gate)),
            Backend::Redis(s) => s.wakers().register(&s.barge_key(gate)),
        }
    }

    /// Makes sure hand-offs on `gate` reach this process. `asked` is when
    /// the caller sent the request it waits on; [`Listening::fresh`] is
    /// `true` when this process may not have been listening since then,
    /// in which case a hand-off may have been announced unheard and the
    /// caller should poll once.
    pub(crate) async fn listen(
        &self,
        gate: &GateName,
        asked: tokio::time::Instant,
    ) -> Result<Option<Listening>> {
        match &self.backend {
            Backend::Memory(_) => Ok(None),
            Backend::Redis(s) => Box::pin(s.listen(gate, asked)).await.map(Some),
        }
    }
}
