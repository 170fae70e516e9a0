//! The gate in the store layer: its operations' argument and answer
//! types, shared by both stores, and the words both stores answer with
//! when a request does not fit the gate (one constructor each, so the
//! stores say the same thing). `memory.rs` (with `line.rs`) is the
//! reference model; `redis.rs` and the scripts in `lua/` are the same
//! steps on Redis; `tests/stores_agree.rs` holds one to the other.

use std::borrow::Cow;
use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::name::Name;

/// A gate's name as a `Gate` handle keeps it: with what a store derives
/// from it (the Redis keys and channel) built at the first call and kept
/// by the handle and its clones, not formatted again on every call.
#[derive(Debug, Clone)]
pub(crate) struct GateName {
    name: Name,
    redis: Arc<OnceLock<super::keys::GateKeys>>,
    /// The capacity the handle names, if any: one permit (a mutex) is a
    /// hint the Redis store passes to its release script, which checks it
    /// against the stored capacity before taking its one-permit path; up
    /// to `INLINE` lets its passes go out in groups.
    capacity: Option<u32>,
    /// Whether the handle's last enter was queued, or its last release
    /// handed the gate on: a line is likely, so a Lock's calls on Redis
    /// try the line's paths (enter_line.lua, leave_line.lua) first rather
    /// than the lone lease's and the one permit's (a hint for the cost of
    /// the call alone: every path gives the same outcome for the same
    /// state).
    lined: Arc<AtomicBool>,
}

impl GateName {
    pub(crate) fn new(name: Name) -> GateName {
        GateName::with_capacity(name, None)
    }

    /// The name of a gate that the handle gives `capacity`.
    pub(crate) fn with_capacity(name: Name, capacity: Option<u32>) -> GateName {
        GateName {
            name,
            redis: Arc::default(),
            capacity,
            lined: Arc::default(),
        }
    }

    pub(crate) fn one_permit(&self) -> bool {
        self.capacity == Some(1)
    }

    /// See `lined` above.
    pub(crate) fn lined(&self) -> bool {
        self.lined.load(Ordering::Relaxed)
    }

    pub(crate) fn set_lined(&self, lined: bool) {
        self.lined.store(lined, Ordering::Relaxed);
    }

    /// The handle names a capacity of more than one permit whose holders a
    /// Redis gate keeps inline (see `super::keys::INLINE`).
    pub(crate) fn inline_sized(&self) -> bool {
        self.capacity
            .is_some_and(|c| (2..=super::keys::INLINE).contains(&c))
    }

    /// The keys on a Redis store whose key prefix is `prefix`.
    pub(crate) fn redis_keys(&self, prefix: &str) -> Cow<'_, super::keys::GateKeys> {
        let keys = self
            .redis
            .get_or_init(|| super::keys::GateKeys::new(prefix, &self.name));
        if keys.prefix == prefix {
            Cow::Borrowed(keys)
        } else {
            // A handle used with a second store (another prefix): correct,
            // just not cached.
            Cow::Owned(super::keys::GateKeys::new(prefix, &self.name))
        }
    }
}

impl Deref for GateName {
    type Target = Name;

    fn deref(&self) -> &Name {
        &self.name
    }
}

impl fmt::Display for GateName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.name, f)
    }
}

/// One `enter` call: take `permits` of the gate for `ttl_ms`, or (if `queue`)
/// join the line under ticket `id`.
#[derive(Debug, Clone)]
pub(crate) struct EnterRequest<'a> {
    pub(crate) id: &'a str,
    pub(crate) permits: u32,
    pub(crate) capacity: Option<u32>,
    pub(crate) ttl_ms: u64,
    pub(crate) heartbeat_ms: u64,
    pub(crate) queue: bool,
    /// Busy and not queueing, the caller waits to barge in (a non-fair
    /// acquire): mark that someone does, so freed permits wake it.
    pub(crate) barge: bool,
    /// Who is asking, shown in the holder list while they hold.
    pub(crate) label: Option<&'a str>,
    /// Its order key in a draw (below `DRAW_SPAN`): while the door holds
    /// for an opening, the line orders the draw's tickets by it.
    pub(crate) order_key: Option<u64>,
}

/// An acquire waiting in this process that a release passes its permits to
/// (`Store::pass`): it takes them under `id` as a plain enter of `permits`
/// for `ttl_ms` would.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pass<'a> {
    pub(crate) id: &'a str,
    pub(crate) permits: u32,
    pub(crate) ttl_ms: u64,
}

/// One `set_admission` call: `None` leaves a setting as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Admission {
    /// Pause (`true`) or resume (`false`) admissions.
    pub(crate) paused: Option<bool>,
    /// The least interval between admissions in ms (0: none).
    pub(crate) every_ms: Option<u64>,
}

/// How a gate hands free permits to its line ([`Gate::set_queueing`](crate::Gate::set_queueing)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Queueing {
    /// First come, first served: the head of the line goes first (the
    /// default).
    #[default]
    Fifo,
    /// Each free place goes to a ticket picked at random from everyone in
    /// line at that moment, however long they have waited (a lottery
    /// held anew for every place, so nobody's chance depends on when they
    /// joined, and nobody waits for ever while the line drains). A ticket
    /// picked that needs more permits than are free is served first once
    /// they are, as a head of line would be (its pick is not redrawn while
    /// the line stays as it is). The picks follow from `seed` and the
    /// line: the same seed and the same operations pick the same tickets
    /// on either store. [`Queueing::random`] draws a seed from the
    /// operating system.
    Random {
        /// Where the picks start.
        seed: u64,
    },
}

impl Queueing {
    /// Random queueing with a seed from the operating system's generator.
    pub fn random() -> Queueing {
        Queueing::Random { seed: rand::random() }
    }

    /// The state of the gate's picks this sets (0: first come, first
    /// served; see `PICK_MOD`).
    pub(crate) fn pick_state(self) -> u64 {
        match self {
            Queueing::Fifo => 0,
            Queueing::Random { seed } => 1 + seed % (PICK_MOD - 1),
        }
    }
}

/// The picks of random queueing come from a Lehmer generator (MINSTD):
/// the state x (1 to `PICK_MOD` - 1) picks the ticket at index x mod n of
/// a line of n, and becomes x · `PICK_MUL` mod `PICK_MOD` with each grant
/// from the line. Its products stay below 2^47, exact in Lua's numbers
/// (as in lua/general_grant.lua).
pub(crate) const PICK_MOD: u64 = 2_147_483_647;
pub(crate) const PICK_MUL: u64 = 48_271;

/// The longest note a gate's door keeps, in bytes.
pub const MAX_DOOR_NOTE: usize = 200;

/// A gate's door (see [`Gate::set_door`](crate::Gate::set_door)): whether
/// newcomers may enter, and a short note its owner keeps with it (a
/// waiting room keeps its state there). Like the capacity and the pause,
/// it lives with the gate's state: when the store forgets that (a new
/// epoch), it forgets the door too.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Door {
    /// Closed: every enter fails with [`ErrorKind::Closed`](crate::ErrorKind::Closed);
    /// holders keep their leases and the line keeps moving.
    pub closed: bool,
    /// Up to [`MAX_DOOR_NOTE`] bytes of the owner's, kept as given ("" for none).
    pub note: String,
    /// Nobody is admitted before the store's clock reaches this (ms since
    /// the Unix epoch); newcomers may queue meanwhile (unless the door is
    /// closed). The first operation on the gate at or after it lifts the
    /// hold in its own atomic step, admitting the head of the line up to
    /// the capacity at once; from then on it reads `None`. A time already
    /// past is no hold.
    pub opens_at_ms: Option<u64>,
    /// The door closes when the store's clock reaches this (ms since the
    /// Unix epoch): as for `opens_at_ms`, in the first operation at or
    /// after it (a watch already reads the door closed). A time already
    /// past closes it at once.
    pub closes_at_ms: Option<u64>,
}

/// The latest time a door's timers take (the end of the year 9999, in
/// ms): below 2^53, so exact in Lua's numbers.
pub const MAX_DOOR_TIME_MS: u64 = 253_402_300_799_999;

impl Door {
    /// Whether it is the door of a gate nobody set one on.
    pub(crate) fn is_blank(&self) -> bool {
        !self.closed && self.note.is_empty() && self.opens_at_ms.is_none() && self.closes_at_ms.is_none()
    }

    /// Takes the steps due at store time `now` (as general_state.lua):
    /// the hold ends, the door closes. Whether anything changed.
    pub(crate) fn tick(&mut self, now: u64) -> bool {
        let mut changed = false;
        if self.opens_at_ms.is_some_and(|at| at <= now) {
            self.opens_at_ms = None;
            changed = true;
        }
        if self.closes_at_ms.is_some_and(|at| at <= now) {
            self.closes_at_ms = None;
            self.closed = true;
            changed = true;
        }
        changed
    }

    /// The door as it reads at `now` without changing anything (a watch).
    pub(crate) fn at(&self, now: u64) -> Door {
        let mut door = self.clone();
        door.tick(now);
        door
    }
}

/// The last draw that ended on a gate ([`Gate::last_draw`](crate::Gate::last_draw)).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct DrawRecord {
    /// When it ended (ms, the store's clock): its opening, or the change
    /// of the door that lifted the hold. 0: no draw has ended.
    pub ended_at_ms: u64,
    /// Its tickets, head first: everyone in the draw when it ended.
    pub tickets: Vec<String>,
}

/// One [`Gate::set_door`](crate::Gate::set_door) call: the door, and in
/// the same atomic step the pause and a drop of the whole line.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct DoorChange {
    /// The door from now on.
    pub door: Door,
    /// Pause (`true`) or resume (`false`) admissions too; `None` leaves it.
    pub paused: Option<bool>,
    /// Drop every ticket in line, as [`Gate::clear_line`](crate::Gate::clear_line)
    /// does (their waiters learn their ticket was dropped by a reset).
    pub drop_line: bool,
}

/// A lease the store just granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) fence: u64,
    /// Milliseconds until the lease ends, by the store's clock.
    pub(crate) ttl_ms: u64,
}

/// A ticket's place in line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// 1 for the head of the line.
    pub position: u64,
    /// How many tickets wait in line, this one included.
    pub waiting: u64,
    /// Estimated wait: position × the line's pace, the average interval
    /// between grants from this gate's line (a moving average; a line that
    /// forms starts the clock, and releases with nobody in line do not
    /// count). `None` until the line has moved once.
    pub eta: Option<Duration>,
}

/// Why an entry without queueing was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Occupancy {
    /// Permits held now.
    pub used: u64,
    /// The gate's capacity.
    pub capacity: u32,
    /// Tickets waiting in line.
    pub waiting: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    Granted(Grant),
    Queued(Place),
    Busy(Occupancy),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Poll {
    Granted(Grant),
    Queued(Place),
    /// Neither holding nor waiting: dropped for missing heartbeats, cancelled,
    /// or expired.
    Unknown,
    /// Taken out of the line by an admin (`Gate::remove_waiter`) within
    /// the last [`REMOVED_KEEP_MS`].
    Removed,
}

/// How long a gate remembers a ticket an admin removed from its line
/// (`Gate::remove_waiter`), so that its waiter's next poll learns it was
/// removed rather than that its ticket is unknown (and queues again): an
/// hour, far past any waiter's next poll. As `REMOVED_KEEP` in
/// lua/general_state.lua.
pub(crate) const REMOVED_KEEP_MS: u64 = 60 * 60 * 1000;

/// At most this many removed tickets are remembered per gate, the latest
/// ones (as `REMOVED_MAX` in lua/general_state.lua): the record stays bounded
/// whatever an admin does.
pub(crate) const REMOVED_MAX: usize = 1000;

/// What [`Gate::leave`](crate::Gate::leave) (or `end`) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Left {
    /// A held lease was released; its permits went to the line.
    Released,
    /// A ticket left the line.
    Cancelled,
    /// Nothing by that token: it had already ended.
    Unknown,
}

/// One current holder of a gate, as [`Gate::holders`](crate::Gate::holders)
/// lists them: soonest to end first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// The label given when entering, if any.
    pub label: Option<String>,
    /// Time left on the lease, by the store's clock.
    pub ttl: Duration,
    /// Names this lease to [`Gate::revoke`](crate::Gate::revoke): the first
    /// 16 hex digits of the SHA-1 of its token. It cannot be turned back
    /// into the token, so whoever reads the list can revoke the lease but
    /// never renew, release or pick it up as its holder would.
    pub handle: String,
    /// The lease's fencing token if it came through the line; `None` for
    /// one granted at once by `enter`, whose fence went out in that answer
    /// and is not kept (keeping it would cost every such grant a write).
    pub fence: Option<u64>,
}

/// One ticket in a gate's line, as [`Gate::line`](crate::Gate::line) lists
/// them: head first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// The ticket's number: the gate counts every ticket that joins its
    /// line, and this one was the `number`th. It names the ticket to
    /// [`Gate::remove_waiter`](crate::Gate::remove_waiter) and, unlike the
    /// ticket's id, gives no power to poll or pick up a lease.
    pub number: u64,
    /// 1 for the head of the line.
    pub position: u64,
    /// Permits the ticket asks for.
    pub permits: u32,
    /// The label given when entering, if any.
    pub label: Option<String>,
}

/// The most tickets one [`Gate::line`](crate::Gate::line) answer lists.
pub const MAX_LINE_LIMIT: u32 = 1000;

/// A holder's handle: the first 16 hex digits of the SHA-1 of its token,
/// as `string.sub(redis.sha1hex(id), 1, 16)` in holders.lua and admin.lua.
pub(crate) fn handle_of(id: &str) -> String {
    let mut hex = sha1_smol::Sha1::from(id).digest().to_string();
    hex.truncate(16);
    hex
}

/// A snapshot of one gate.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GateStats {
    /// The stored capacity, if any request or `set_capacity` has set one.
    pub capacity: Option<u32>,
    /// Permits held now.
    pub used: u64,
    /// Leases held now.
    pub holders: u64,
    /// Tickets in line.
    pub waiting: u64,
    /// Leases granted since the gate was created.
    pub grants: u64,
    /// Leases that ended by expiry rather than release.
    pub expiries: u64,
    /// The last fencing token handed out (0 if none yet).
    pub fence: u64,
    /// Admissions are paused: everyone new queues (see `Gate::pause`).
    pub paused: bool,
    /// At most one admission per this interval, if set
    /// (`Gate::set_admission_interval`).
    pub admission_interval: Option<Duration>,
    /// When the line was last reset (`Gate::clear_line`), in ms of the
    /// store's clock since the Unix epoch; `None` if never (in this
    /// incarnation of the gate's state).
    pub line_reset_ms: Option<u64>,
    /// The door (`Gate::set_door`).
    pub door: Door,
    /// Free places go to waiters picked at random (`Gate::set_queueing`),
    /// not to the head of the line.
    pub random: bool,
}

/// The most ids one [`Gate::watch_state`](crate::Gate::watch_state) answer
/// carries; a longer log is answered over several calls (each answer's
/// cursor continues where it stopped).
pub const MAX_REVOKED_PER_WATCH: usize = 10_000;

/// The largest cursor a watch takes (2^53: exact in Lua's numbers).
pub(super) const MAX_CURSOR: u64 = 1 << 53;

/// What a server that keeps a local view of a gate needs to know, read in
/// one step without changing anything: see
/// [`Gate::watch_state`](crate::Gate::watch_state).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GateWatch {
    /// This incarnation of the gate's state: set when the state is created
    /// by a writing operation, new whenever it is created anew (the store
    /// lost its data: `FLUSHALL`, a restart without persistence, a failover
    /// to an empty replica; or the state was dropped while idle). `None`
    /// while the gate has no state. Compare it between calls; its value
    /// means nothing else.
    pub epoch: Option<u64>,
    /// The stored capacity, if any.
    pub capacity: Option<u32>,
    /// Admissions are paused.
    pub paused: bool,
    /// The least interval between admissions, if set.
    pub admission_interval: Option<Duration>,
    /// The door (`Gate::set_door`).
    pub door: Door,
    /// Free places go to waiters picked at random (`Gate::set_queueing`).
    pub random: bool,
    /// Tokens of holders ended by [`Gate::end`](crate::Gate::end) from the
    /// cursor asked for on, oldest first, at most
    /// [`MAX_REVOKED_PER_WATCH`]. One may come again in a later answer
    /// (ended twice); keep a set.
    pub revoked: Vec<String>,
    /// Pass it as `since` next time: no end missed, none answered twice.
    /// It grows with the store's time (ms × 1024, a counter within a
    /// millisecond). After the epoch changed, start again from 0.
    pub cursor: u64,
}

/// The largest capacity a gate may have.
pub const MAX_CAPACITY: u32 = 1_000_000;

pub(crate) fn check_capacity(capacity: u32) -> Result<u32> {
    if capacity == 0 || capacity > MAX_CAPACITY {
        return Err(Error::invalid(format!(
            "capacity must be between 1 and {}, got {capacity}",
            MAX_CAPACITY
        )));
    }
    Ok(capacity)
}

/// A request naming a capacity other than the stored one `have`.
pub(crate) fn capacity_conflict(have: impl std::fmt::Display, want: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::CapacityConflict,
        format!("the gate's capacity is {have}, the request says {want}"),
    )
}

/// A request for more permits than the gate's `capacity`.
pub(crate) fn permits_exceed(permits: u32, capacity: impl std::fmt::Display) -> Error {
    Error::invalid(format!(
        "asked for {permits} permits but the gate's capacity is {capacity}"
    ))
}

/// A request naming no capacity on a gate that has none stored.
pub(crate) fn no_capacity() -> Error {
    Error::new(ErrorKind::NoCapacity, "the gate has no capacity yet")
}
