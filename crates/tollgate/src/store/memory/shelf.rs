//! The embedded store's states by name: each behind a lock of its own, so
//! a flood on one name never waits on another's work, and dropped once it
//! has been idle and empty for the store's idle period.
//!
//! The map itself sits under one short-held lock: a lookup, an insert, and
//! a bounded sweep step. A state is worked on under its own lock, taken
//! after the map's is released; the map's lock is never waited for while a
//! state's is held, and the sweep only ever tries a state's lock, so the
//! two cannot deadlock.
//!
//! Dropping idle state needs no background task. Every name has one due
//! time in `due`: when to look at it next. Each operation looks at a few
//! names that are due (at most `SWEEP_STEP`), and drops those whose state
//! has been quiet for the idle period: no operation and no deadline held
//! (a lease, a ticket, a kept revocation) in that time. A name that is not
//! yet quiet gets a new due time, so each live name costs one look per
//! idle period.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::name::Name;

/// How many due names one operation looks at: enough to drop idle names
/// faster than a flood of operations can create them, few enough that no
/// operation does much of it.
const SWEEP_STEP: usize = 8;

/// What the shelf needs to know of a state.
pub(crate) trait Shelved: Default {
    /// Nothing was ever written to it: a read of a name without state
    /// leaves none behind.
    fn is_blank(&self) -> bool;

    /// The last deadline the state holds (ms; its end of use if nothing
    /// else happens), or `None` if it holds something that must be kept
    /// whatever the time (jobs, a partition layout).
    fn busy_until(&self) -> Option<u64>;

    /// The last fencing token it handed out; a state created anew for the
    /// same store starts above every dropped one (`floor`).
    fn fence(&self) -> u64;

    /// Fences it hands out from now on are above `floor`.
    fn set_fence_floor(&mut self, floor: u64);

    /// How many entries it holds (jobs; holders, tickets and kept ends):
    /// what writing it out under its lock would take time in proportion
    /// to (see `durable::take_snapshot`).
    fn weight(&self) -> usize;
}

/// Told of each name the idle sweep drops, with its last fence and the
/// time (ms), while its state's lock is held: the durable store logs it.
pub(crate) type OnDrop = Box<dyn Fn(&Name, u64, u64) + Send + Sync>;

pub(crate) struct Shelf<S> {
    inner: Mutex<Inner<S>>,
    on_drop: OnceLock<OnDrop>,
    /// Off while the durable store replays its log: a replayed store drops
    /// names where the log says the live one did, never on its own.
    sweeping: AtomicBool,
}

impl<S> std::fmt::Debug for Shelf<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shelf").finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Inner<S> {
    states: HashMap<Name, Slot<S>>,
    /// (due time in ms, name): one per name in `states`.
    due: BTreeSet<(u64, Name)>,
    /// The highest fence of any dropped state.
    floor: u64,
    /// States just dropped, freed by whoever took the map's lock once it
    /// has let go of it.
    graveyard: Vec<Arc<Mutex<Held<S>>>>,
}

#[derive(Debug)]
struct Slot<S> {
    /// This name's entry in `due`.
    due: u64,
    held: Arc<Mutex<Held<S>>>,
}

#[derive(Debug)]
struct Held<S> {
    state: S,
    /// When an operation last ran on it (ms).
    touched: u64,
    /// Taken off the shelf: whoever finds it so looks the name up again.
    dropped: bool,
}

impl<S> Default for Shelf<S> {
    fn default() -> Self {
        Shelf {
            inner: Mutex::new(Inner {
                states: HashMap::new(),
                due: BTreeSet::new(),
                floor: 0,
                graveyard: Vec::new(),
            }),
            on_drop: OnceLock::new(),
            sweeping: AtomicBool::new(true),
        }
    }
}

impl<S: Shelved> Shelf<S> {
    /// Runs `op` on `name`'s state under its own lock. A name without
    /// state gets a new one (`new`), kept only if `op` wrote to it.
    /// `touch`: the operation counts as activity (it may change settings);
    /// reads and heartbeats do not, so a reader polling a gate (metrics)
    /// does not keep it forever (what they hold is counted by its
    /// deadlines).
    pub(crate) fn with<T>(
        &self,
        name: &Name,
        now: u64,
        idle: u64,
        touch: bool,
        new: impl Fn() -> S,
        op: impl FnOnce(&mut S) -> T,
    ) -> T {
        let mut op = Some(op);
        loop {
            let (held, dead) = {
                let mut inner = self.lock();
                self.sweep(&mut inner, now, idle, SWEEP_STEP);
                let held = match inner.states.get(name) {
                    Some(slot) => slot.held.clone(),
                    None => {
                        let mut state = new();
                        state.set_fence_floor(inner.floor);
                        inner.insert(name, state, now + idle, idle)
                    }
                };
                (held, std::mem::take(&mut inner.graveyard))
            };
            drop(dead);
            let mut h = held.lock().unwrap_or_else(PoisonError::into_inner);
            if h.dropped {
                // Dropped between the lookup and now: look again.
                continue;
            }
            if touch {
                h.touched = h.touched.max(now);
            }
            let out = (op.take().expect("runs once"))(&mut h.state);
            if h.state.is_blank() {
                // Nothing written (a read of a name without state): leave
                // no trace. The map's lock is taken after this one is let go.
                h.dropped = true;
                drop(h);
                self.lock().remove(name, &held);
            }
            return out;
        }
    }

    /// Runs `read` on `name`'s state, if it has one, without creating it
    /// or counting as activity.
    pub(crate) fn peek<T>(&self, name: &Name, now: u64, idle: u64, read: impl FnOnce(Option<&S>) -> T) -> T {
        let held = {
            let mut inner = self.lock();
            self.sweep(&mut inner, now, idle, SWEEP_STEP);
            let held = inner.states.get(name).map(|slot| slot.held.clone());
            let dead = std::mem::take(&mut inner.graveyard);
            drop(inner);
            drop(dead);
            held
        };
        let Some(held) = held else { return read(None) };
        let h = held.lock().unwrap_or_else(PoisonError::into_inner);
        // Dropped since the lookup: it has no state now.
        read((!h.dropped).then_some(&h.state))
    }

    /// Looks at up to `max` due names (as operations do a few at a time),
    /// then gives the map's spare room back if most of it is empty. For a
    /// store that gets no operations: what went idle still goes.
    pub(crate) fn sweep_due(&self, now: u64, idle: u64, max: usize) {
        let mut inner = self.lock();
        self.sweep(&mut inner, now, idle, max);
        if inner.states.capacity() > 64 && inner.states.len() * 4 < inner.states.capacity() {
            let len = inner.states.len();
            inner.states.shrink_to(len * 2);
        }
        let dead = std::mem::take(&mut inner.graveyard);
        drop(inner);
        drop(dead);
    }

    /// How many names hold state.
    pub(crate) fn len(&self) -> usize {
        self.lock().states.len()
    }

    /// Up to `limit` names with state that start with `prefix`, after
    /// `after`, pass `keep`, in byte order: for listing (the embedded
    /// store lists what it holds, with no registry to keep). One pass over
    /// the map under its lock, keeping the `limit` smallest.
    pub(crate) fn names(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
        keep: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        let inner = self.lock();
        let mut smallest: std::collections::BinaryHeap<&str> = std::collections::BinaryHeap::new();
        for name in inner.states.keys() {
            let n = name.as_str();
            if !n.starts_with(prefix) || after.is_some_and(|a| n <= a) || !keep(n) {
                continue;
            }
            if smallest.len() < limit {
                smallest.push(n);
            } else if smallest.peek().is_some_and(|top| n < *top) {
                smallest.pop();
                smallest.push(n);
            }
        }
        smallest
            .into_sorted_vec()
            .into_iter()
            .map(str::to_owned)
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<S>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn sweep(&self, inner: &mut Inner<S>, now: u64, idle: u64, steps: usize) {
        if self.sweeping.load(Ordering::Relaxed) {
            inner.sweep_steps(now, idle, steps, self.on_drop.get());
        }
    }

    /// Sets who is told of dropped names (once).
    pub(crate) fn on_drop(&self, hook: OnDrop) {
        let _ = self.on_drop.set(hook);
    }

    /// Stops (`false`) or starts the idle sweep.
    pub(crate) fn set_sweeping(&self, on: bool) {
        self.sweeping.store(on, Ordering::Relaxed);
    }

    /// A logged drop, replayed: `name` goes if it has state, and the floor
    /// rises to its last fence.
    pub(crate) fn drop_logged(&self, name: &Name, fence: u64) {
        let mut inner = self.lock();
        inner.floor = inner.floor.max(fence);
        if let Some(slot) = inner.states.remove(name) {
            inner.due.remove(&(slot.due, name.clone()));
            slot.held.lock().unwrap_or_else(PoisonError::into_inner).dropped = true;
        }
    }

    /// The highest fence of any dropped state.
    pub(crate) fn floor(&self) -> u64 {
        self.lock().floor
    }

    /// Raises the floor (a snapshot's, at recovery).
    pub(crate) fn raise_floor(&self, floor: u64) {
        let mut inner = self.lock();
        inner.floor = inner.floor.max(floor);
    }

    /// Calls `each` with every name's state and when it was last touched,
    /// each under its own lock, one at a time: the map's lock is held only
    /// to list them, so operations go on meanwhile.
    pub(crate) fn each(&self, mut each: impl FnMut(&Name, &S, u64)) {
        let all: Vec<(Name, Arc<Mutex<Held<S>>>)> = {
            let inner = self.lock();
            inner
                .states
                .iter()
                .map(|(name, slot)| (name.clone(), slot.held.clone()))
                .collect()
        };
        for (name, held) in all {
            let h = held.lock().unwrap_or_else(PoisonError::into_inner);
            if !h.dropped {
                each(&name, &h.state, h.touched);
            }
        }
    }

    /// The largest `weight` of the states, each read under its own lock
    /// in turn (`each`: none held for longer).
    pub(crate) fn heaviest(&self) -> usize {
        let mut heaviest = 0;
        self.each(|_, state, _| heaviest = heaviest.max(state.weight()));
        heaviest
    }

    /// Puts a recovered state on the shelf.
    pub(crate) fn restore(&self, name: &Name, state: S, touched: u64, idle: u64) {
        let mut inner = self.lock();
        if let Some(slot) = inner.states.remove(name) {
            inner.due.remove(&(slot.due, name.clone()));
        }
        inner.insert(name, state, touched + idle, idle);
    }

    /// The LSN `lsn_of` reads from `name`'s state, if it has one.
    pub(crate) fn lsn(&self, name: &Name, lsn_of: impl FnOnce(&S) -> u64) -> Option<u64> {
        let held = self.lock().states.get(name).map(|slot| slot.held.clone())?;
        let h = held.lock().unwrap_or_else(PoisonError::into_inner);
        (!h.dropped).then(|| lsn_of(&h.state))
    }
}

impl<S: Shelved> Inner<S> {
    fn insert(&mut self, name: &Name, state: S, due: u64, idle: u64) -> Arc<Mutex<Held<S>>> {
        // Created now: that counts as activity, whatever the operation.
        let held = Arc::new(Mutex::new(Held {
            state,
            touched: due.saturating_sub(idle),
            dropped: false,
        }));
        self.due.insert((due, name.clone()));
        self.states.insert(
            name.clone(),
            Slot {
                due,
                held: held.clone(),
            },
        );
        held
    }

    /// Takes `name` off the shelf if `held` is still its state.
    fn remove(&mut self, name: &Name, held: &Arc<Mutex<Held<S>>>) {
        if let Some(slot) = self.states.get(name)
            && Arc::ptr_eq(&slot.held, held)
        {
            self.due.remove(&(slot.due, name.clone()));
            self.states.remove(name);
        }
    }

    /// Looks at up to `steps` names that are due: drops those quiet for
    /// `idle` (telling `on_drop`), and sets the next look for the others.
    fn sweep_steps(&mut self, now: u64, idle: u64, steps: usize, on_drop: Option<&OnDrop>) {
        for _ in 0..steps {
            let Some((_, name)) = self.due.first().filter(|(due, _)| *due <= now).cloned() else {
                return;
            };
            self.due.pop_first();
            let Some(held) = self.states.get(&name).map(|slot| slot.held.clone()) else {
                continue;
            };
            let next = match held.try_lock() {
                Ok(mut h) => match h.state.busy_until() {
                    Some(until) if until.max(h.touched) + idle <= now => {
                        // Quiet for the idle period: every deadline it held
                        // has passed (whatever it held is over), so
                        // dropping it changes no answer but the epoch.
                        h.dropped = true;
                        self.floor = self.floor.max(h.state.fence());
                        if let Some(hook) = on_drop {
                            hook(&name, h.state.fence(), now);
                        }
                        None
                    }
                    Some(until) => Some(until.max(h.touched) + idle),
                    None => Some(now + idle),
                },
                // In use this very moment, so not idle (or poisoned by a
                // panic: kept, as the lock keeps it for everyone else).
                Err(_) => Some(now + idle),
            };
            let Some(next) = next else {
                self.states.remove(&name);
                // Freed once the map's lock is let go: a state can be big
                // (a long line), and freeing it must not hold up others.
                self.graveyard.push(held);
                continue;
            };
            if let Some(slot) = self.states.get_mut(&name) {
                slot.due = next;
                self.due.insert((next, name));
            }
        }
    }
}
