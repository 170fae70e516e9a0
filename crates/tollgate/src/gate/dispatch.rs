//! The gate's operations of a [`Store`]: each one atomic step, one
//! critical section on the embedded store and one script on Redis, sent to
//! the backend the store has (the Redis arms box their futures: see
//! `store::Backend`).

use crate::error::Result;
use crate::store::{Backend, Listening, Store, Watch};

use super::memory::memory_barge_key;
use super::types::{
    Admission, EnterRequest, Entry, GateName, GateStats, GateWatch, Grant, Holding, Left, MAX_CURSOR,
    MAX_REVOKED_PER_WATCH, Pass, Poll, Waiting,
};

impl Store {
    pub(crate) async fn enter(&self, gate: &GateName, req: &EnterRequest<'_>) -> Result<Entry> {
        match &self.backend {
            Backend::Memory(s) => s.write(|| s.gates().enter(gate, req)).await?,
            Backend::Redis(s) => Box::pin(s.enter(gate, req)).await,
        }
    }

    /// Changes admission control (see [`Admission`]).
    pub(crate) async fn set_admission(&self, gate: &GateName, admission: &Admission) -> Result<()> {
        match &self.backend {
            Backend::Memory(s) => s.write(|| s.gates().set_admission(gate, admission)).await?,
            Backend::Redis(s) => Box::pin(s.set_admission(gate, admission)).await,
        }
    }

    pub(crate) async fn poll(&self, gate: &GateName, id: &str, ttl_ms: u64, hb_ms: u64) -> Result<Poll> {
        match &self.backend {
            Backend::Memory(s) => s.write(|| s.gates().poll(gate, id, ttl_ms, hb_ms)).await?,
            Backend::Redis(s) => Box::pin(s.poll(gate, id, ttl_ms, hb_ms)).await,
        }
    }

    pub(crate) async fn renew(&self, gate: &GateName, id: &str, ttl_ms: u64) -> Result<Option<Grant>> {
        match &self.backend {
            Backend::Memory(s) => s.write(|| s.gates().renew(gate, id, ttl_ms)).await?,
            Backend::Redis(s) => Box::pin(s.renew(gate, id, ttl_ms)).await,
        }
    }

    pub(crate) async fn leave(&self, gate: &GateName, id: &str) -> Result<Left> {
        match &self.backend {
            Backend::Memory(s) => s.write(|| s.gates().leave(gate, id, None)).await?,
            Backend::Redis(s) => Box::pin(s.leave(gate, id, None)).await,
        }
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
        match &self.backend {
            Backend::Memory(s) => s.write(|| s.gates().pass(gate, id, to)).await?,
            Backend::Redis(s) => Box::pin(s.pass(gate, id, to)).await,
        }
    }

    /// `leave`, and if a holder was released, its token recorded in the
    /// gate's revocation log for `keep_ms`, in the same step.
    pub(crate) async fn end(&self, gate: &GateName, id: &str, keep_ms: u64) -> Result<Left> {
        match &self.backend {
            Backend::Memory(s) => s.write(|| s.gates().leave(gate, id, Some(keep_ms))).await?,
            Backend::Redis(s) => Box::pin(s.leave(gate, id, Some(keep_ms))).await,
        }
    }

    /// The gate's epoch, stored settings and revocation log from `since`
    /// on; reads only.
    pub(crate) async fn watch_state(&self, gate: &GateName, since: u64) -> Result<GateWatch> {
        // Cursors are store time in ms × 1024, far below 2^53; a larger
        // `since` (never handed out) is cut there so the script's numbers
        // stay exact.
        let since = since.min(MAX_CURSOR);
        match &self.backend {
            Backend::Memory(s) => {
                s.read(|| s.gates().watch_state(gate, since, MAX_REVOKED_PER_WATCH))
                    .await
            }
            Backend::Redis(s) => Box::pin(s.watch_state(gate, since, MAX_REVOKED_PER_WATCH)).await,
        }
    }

    pub(crate) async fn set_capacity(&self, gate: &GateName, capacity: u32) -> Result<()> {
        match &self.backend {
            Backend::Memory(s) => s.write(|| s.gates().set_capacity(gate, capacity)).await?,
            Backend::Redis(s) => Box::pin(s.set_capacity(gate, capacity)).await,
        }
    }

    pub(crate) async fn holders(&self, gate: &GateName, limit: u32) -> Result<Vec<Holding>> {
        match &self.backend {
            Backend::Memory(s) => s.read(|| s.gates().holders(gate, limit)).await?,
            Backend::Redis(s) => Box::pin(s.holders(gate, limit)).await,
        }
    }

    pub(crate) async fn line(&self, gate: &GateName, limit: u32) -> Result<Vec<Waiting>> {
        match &self.backend {
            Backend::Memory(s) => s.read(|| s.gates().line(gate, limit)).await?,
            Backend::Redis(s) => Box::pin(s.line(gate, limit)).await,
        }
    }

    /// Ends the holder named by `handle` as `end` would, recorded in the
    /// revocation log for `keep_ms`.
    pub(crate) async fn revoke(&self, gate: &GateName, handle: &str, keep_ms: u64) -> Result<Left> {
        match &self.backend {
            Backend::Memory(s) => s.write(|| s.gates().revoke(gate, handle, keep_ms)).await?,
            Backend::Redis(s) => Box::pin(s.revoke(gate, handle, keep_ms)).await,
        }
    }

    pub(crate) async fn remove_waiter(&self, gate: &GateName, number: u64) -> Result<Left> {
        match &self.backend {
            Backend::Memory(s) => s.write(|| s.gates().remove_waiter(gate, number)).await?,
            Backend::Redis(s) => Box::pin(s.remove_waiter(gate, number)).await,
        }
    }

    pub(crate) async fn clear_line(&self, gate: &GateName) -> Result<u64> {
        match &self.backend {
            Backend::Memory(s) => s.write(|| s.gates().clear_line(gate)).await?,
            Backend::Redis(s) => Box::pin(s.clear_line(gate)).await,
        }
    }

    pub(crate) async fn stats(&self, gate: &GateName) -> Result<GateStats> {
        match &self.backend {
            Backend::Memory(s) => s.read(|| s.gates().stats(gate)).await?,
            Backend::Redis(s) => Box::pin(s.stats(gate)).await,
        }
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
