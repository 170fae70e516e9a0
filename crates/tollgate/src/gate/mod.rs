//! The gate: a capacity, leased holders and a FIFO line of waiters, the
//! one primitive behind [`Lock`], [`Semaphore`], the server's per-resource
//! queues and its waiting rooms.
//!
//! The facade (`handle.rs`: `Gate`, `Lease`, the waiting loops; `lock.rs`,
//! `semaphore.rs`) stands on the operations in `dispatch.rs`, whose types
//! are `types.rs`. `memory.rs` (with `line.rs`) is the reference model;
//! `redis.rs` and the scripts in `lua/` are the same steps on Redis;
//! `tests/stores_agree.rs` holds one to the other.
//!
//! The rules the gate keeps, on both stores:
//!
//! - **One atomic step per operation.** `Store` has one method per operation
//!   (`enter`, `poll`, `renew`, `leave`, `set_capacity`, `stats`); callers never
//!   read then write. Each store method first expires ended leases and stale
//!   tickets, then hands free permits to the head of the line, then does its
//!   own work. Correctness needs no background job.
//! - **Ids are chosen by the client** (12 random alphanumerics) and double as
//!   ticket id and lease token. The waiter registers for its wake-up *before*
//!   it enters, so a hand-off cannot be announced before anyone listens.
//! - **Hand-off.** When permits free up, the store grants them to the head of
//!   the line in the same step and records the lease as *pending*: it expires
//!   at the waiter's heartbeat deadline, not after a full TTL, so a vanished
//!   waiter returns it quickly. The hand-off is announced with the fence
//!   (Redis: `PUBLISH <prefix>:gate:{name}:n "id:fence …"`; memory: direct).
//!   The release's reply names the hand-offs too, so a waiter in the
//!   releasing process is woken without waiting for the message.
//!   A woken waiter with automatic renewal starts at once; its first renewal
//!   makes the lease a full one. `status`/`poll` picks a pending lease up too.
//! - **Capacity** is stored with the gate by the first request that names
//!   one; a request naming another one is a `CapacityConflict`.
//! - **Fences** strictly increase per gate and per queue, across data loss
//!   and data taken back (a restart from an older snapshot, an AOF that lost
//!   its tail, a lagging replica promoted): every grant and every delivery
//!   takes max(stored fence, store time in ms × 1000) + 1 (`next_fence` in
//!   general_grant.lua, its copies in the fast paths and lone_enter.lua, the
//!   claim in jobs.lua, `GateState::grant`, `Queue::claim`). The stored
//!   `b` moves with each jump to the clock, so `f - b` still counts grants
//!   (claims). The lone lease reads server time as m's expiry (`G`) less
//!   its `PTTL` (no `TIME`). `tests/fences_after_loss.rs`.
//! - **The estimated wait follows the line's pace.** A queued ticket's
//!   estimate is its position times `r`, the moving average (0.8 / 0.2) of
//!   the gaps between grants from the line; `l` is when the line last moved,
//!   or formed (a ticket queued on an empty line sets it). Releases and
//!   expiries with nobody in line do not count: an idle gate's gaps say
//!   nothing of a line's pace (a resource held for a minute an hour would
//!   otherwise promise the next line an hour a place), and a release with
//!   no line then writes nothing for the estimate, which is what lets a
//!   Lock's release on Redis leave m alone. Both stores record it at the
//!   same step (`line_moved`: memory.rs's `promote` and `queue`, the
//!   general path's `promote`, enter.lua's queueing and line_join.lua,
//!   leave_fast.lua's hand-off).
//! - **Non-fair acquire** (`GateOptions::fair = false`). A barging acquire
//!   takes free permits even while others wait outside the line; when busy it
//!   marks the gate (`N`, until its heartbeat deadline) and waits, registered
//!   before it tries, for a wake-up: a step that frees permits and leaves
//!   them free with nobody in line announces how many (`!<m> <n>` on the
//!   gate's channel; memory: direct), and at most that many barging waiters
//!   per process try again. Fair tickets in line still go first: freed
//!   permits are handed to the line before anyone can barge.
//!   While barging acquires of this process wait on a gate, they also wait in
//!   the store handle's queue of them (`store/passing.rs`), and a newcomer
//!   joins that queue instead of trying first (if one there asks for no more
//!   than it does). A release on a non-fair handle
//!   takes the first that fits and **passes** its permits on in the same
//!   script (`leave` with a pass: the release, its hand-offs to the line,
//!   then a grant to the passed id exactly as a plain enter would make it:
//!   only with nobody left in line, room and admission control letting one
//!   in); the waiter gets the grant over a oneshot, or `None` and tries on
//!   its own. One script per critical section instead of a release, a
//!   wake-up and a race of fresh attempts that all but one lose. A waiter
//!   woken by freed permits leaves the queue under the same lock the release
//!   takes it by, so exactly one of them owns the attempt; an acquire dropped
//!   with a grant on its way gives it back (the release sees the closed
//!   channel, or the queue place's `Drop` finds the grant). At most
//!   `MAX_PASSES` (16) releases in a row pass; the next frees its permits,
//!   so another process's waiters get their turn to race
//!   (`passes_leave_other_processes_a_share`). A durable handle does not
//!   pass. On Redis, the passes on a gate whose handle names a capacity of
//!   2 to 8 (holders inline) that are ready together go out as **one call**:
//!   the first joins a per-gate group and a task sends the group once the
//!   tasks ready at that moment have run (and added theirs); `pass_many.lua`
//!   makes them in order with the code a pass alone runs (`pass_on.lua`: the
//!   same checks, each pass seeing the state the one before left), and stops
//!   at the first the alone path would leave to the general path; that one
//!   and the rest are then sent alone, all at once, within what is left of
//!   one response timeout. A pass whose caller left before its group was
//!   sent is not sent (the dropped release gives the lease back); if the
//!   task itself is dropped (its runtime shut down), its group goes with it
//!   and its callers get an error. A semaphore's holders
//!   passing on in turn reached Redis ~3.7 at a time, each reply waiting for
//!   the others' scripts; one call for them costs Redis about half per pass
//!   (`passes_ready_together_go_out_as_one_call`, docs/BENCHMARKS.md).
//! - **Ending a session** (`Gate::end(token, keep)`) is `leave` (same
//!   script, leave.lua with a keep; same critical section) that also records
//!   a released holder's token in the gate's **revocation log**, kept at
//!   least `keep` (1 ms to 7 days). A ticket leaving the line is a plain
//!   cancel: it was never admitted. Log entries are scored by the end's
//!   store time in ms × 1024, or one past the last score if that is more, so
//!   scores strictly increase and double as readers' cursors. The log keeps
//!   every entry for the longest keep among its live entries (K), starting
//!   afresh once empty; each end prunes at most 1,000 aged entries, readers
//!   skip entries older than K, and on Redis the log key (`:r`) expires K
//!   after the last end.
//! - **Removing a waiter** (`Gate::remove_waiter`) is the ticket leaving
//!   the line (admin.lua, then leave.lua), remembered in the gate's record
//!   of removals (Redis key `:x`, `GateState::removed` in memory: id ->
//!   when) for an hour, the latest 1,000 per gate, the key expiring an hour
//!   after the last removal. Only a poll that finds its ticket nowhere else
//!   looks there, so a removed waiter learns it was removed
//!   (`ErrorKind::Removed`, HTTP 410 `ticket_removed`, exit 77) and stops
//!   rather than queueing again; no other path pays for it.
//! - **Watching a gate** (`Gate::watch_state(since)`) reads, without writing
//!   or expiring anything (on Redis one `#!lua flags=no-writes` script on the
//!   gate's hash-tagged keys, so a read can never create state): the epoch,
//!   the stored capacity and admission settings, and the log from `since`.
//!   The cursor it answers is one past every score it saw (or the scores it
//!   answered, when cut at `MAX_REVOKED_PER_WATCH` = 10,000 ids) and at
//!   least now × 1024: no end that completed before a watch is missed by it
//!   and the ones before it, none is answered twice (unless ended twice).
//! - **Epochs.** The gate's state carries an epoch (meta field `E` on Redis,
//!   `GateState::epoch` in memory): store time in µs × 1000 plus three random
//!   digits, set by whichever writing operation creates the state. A store
//!   that lost the state (`FLUSHALL`, a restart without persistence, a
//!   failover to an empty replica) shows `None`, then a new epoch once
//!   something writes: the signal to re-apply configuration and to read the
//!   log from 0. Cursors and epochs assume the store's clock does not go
//!   back.
//! - **Notification with a fallback.** Waiters sleep on a per-ticket `Notify`
//!   and re-check (which is also their heartbeat) at least every
//!   `min(1 s, heartbeat / 3)`.

mod acquire;
pub(crate) mod backend;
pub(crate) mod bargers;
mod dispatch;
mod election;
mod handle;
mod keys;
mod lease;
mod line;
mod lock;
pub(crate) mod memory;
pub(crate) mod model;
pub(crate) mod pass_groups;
mod passing;
pub(crate) mod redis;
mod rwlock;
pub(crate) mod scripts;
mod semaphore;
pub(crate) mod types;

pub use self::election::{Election, Leader, Leadership, OBSERVE_EVERY, Observer, lease_handle};
pub use self::handle::{Entered, Gate, GateOptions, Granted, MAX_PASSES, REVOKE_KEEP, TicketStatus};
pub use self::lease::Lease;
pub use self::lock::Lock;
pub use self::model::DRAW_SPAN;
pub use self::rwlock::{RW_PERMITS, RwLock, RwMode, RwState};
pub use self::semaphore::Semaphore;
pub use self::types::{
    Door, DoorChange, DrawRecord, GateStats, GateWatch, Holding, Left, MAX_CAPACITY, MAX_DOOR_NOTE,
    MAX_DOOR_TIME_MS, MAX_LINE_LIMIT, MAX_REVOKED_PER_WATCH, Occupancy, Place, Queueing, Waiting,
};
