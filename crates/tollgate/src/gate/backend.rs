//! The contract a backend keeps for the gate.
//!
//! One method per atomic operation. The embedded store implements it on
//! its view of the gate state (`memory.rs`), Redis on its store
//! (`redis.rs`); a backend implements it to carry the gate.

use crate::error::Result;

use super::types::{
    Admission, DoorChange, DrawRecord, EnterRequest, Entry, GateName, GateStats, GateWatch, Grant, Holding,
    Left, Pass, Poll, Waiting,
};

pub(crate) trait GateBackend {
    /// Takes permits for `req.id` if they are free and nobody waits ahead, else
    /// puts it in line (or, with `queue` off, answers busy).
    async fn enter(&self, gate: &GateName, req: &EnterRequest<'_>) -> Result<Entry>;

    /// Changes admission control (see [`Admission`]).
    async fn set_admission(&self, gate: &GateName, admission: &Admission) -> Result<()>;

    /// Sets how free permits go to the line (`Queueing::pick_state`).
    async fn set_queueing(&self, gate: &GateName, pick: u64) -> Result<()>;

    /// Sets the door, the pause with it, and drops the line if asked, in
    /// one step; answers how many tickets were dropped.
    async fn set_door(&self, gate: &GateName, change: &DoorChange) -> Result<u64>;

    /// A ticket's or lease's state, keeping a waiter in line (its heartbeat)
    /// and picking up a grant handed to it.
    async fn poll(&self, gate: &GateName, id: &str, ttl_ms: u64, hb_ms: u64) -> Result<Poll>;

    /// Extends `id`'s lease by `ttl_ms` from now; `None` if it is not held.
    async fn renew(&self, gate: &GateName, id: &str, ttl_ms: u64) -> Result<Option<Grant>>;

    /// `leave` of a held lease that passes its permits on to `to`, an
    /// acquire waiting in this process, in the same step if they are free
    /// for it then (no line left, room, admission control letting one in):
    /// the outcome, and `to`'s grant if it got one.
    async fn pass(&self, gate: &GateName, id: &str, to: &Pass<'_>) -> Result<(Left, Option<Grant>)>;

    /// Stores the gate's capacity; freed permits go to the head of the line.
    async fn set_capacity(&self, gate: &GateName, capacity: u32) -> Result<()>;

    /// Up to `limit` holders, with their labels and deadlines; reads only.
    async fn holders(&self, gate: &GateName, limit: u32) -> Result<Vec<Holding>>;

    /// Up to `limit` waiters from the head of the line; reads only.
    async fn line(&self, gate: &GateName, limit: u32) -> Result<Vec<Waiting>>;

    /// Ends the holder named by `handle` as `end` would, recorded in the
    /// revocation log for `keep_ms`.
    async fn revoke(&self, gate: &GateName, handle: &str, keep_ms: u64) -> Result<Left>;

    /// Takes the ticket with place number `number` out of the line (an admin's
    /// removal).
    async fn remove_waiter(&self, gate: &GateName, number: u64) -> Result<Left>;

    /// Empties the line; answers how many tickets were in it.
    async fn clear_line(&self, gate: &GateName) -> Result<u64>;

    /// The tickets of the last draw that ended, head first (after the
    /// door's timers due now ran: an opening due ends its draw).
    async fn last_draw(&self, gate: &GateName) -> Result<DrawRecord>;

    /// The gate's figures: capacity, used, waiting, its pace; reads only.
    async fn stats(&self, gate: &GateName) -> Result<GateStats>;

    /// Releases or cancels `id`; with `keep_ms`, a released holder's
    /// token is kept in the gate's revocation log that long, in the same
    /// step.
    async fn leave(&self, gate: &GateName, id: &str, keep_ms: Option<u64>) -> Result<Left>;

    /// The gate's epoch, stored settings and up to `max` revocations from
    /// `since` on; reads only (no expiry, no writes).
    async fn watch_state(&self, gate: &GateName, since: u64, max: usize) -> Result<GateWatch>;
}
