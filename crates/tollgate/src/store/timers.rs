//! Timers: one task per store that runs whatever falls due (lease
//! renewals and expiry checks), instead of a task and a timer per lease.
//!
//! A lease that is released long before its first renewal (the common
//! case: a renewal is due a third of the TTL in) then costs one push onto
//! a heap, not a spawn, a sleep and an abort. Removal is lazy: each entry
//! carries the generation its owner had when it was pushed, and an entry
//! whose owner is gone, stopped, or has moved on to a newer entry is
//! skipped when it comes up (or dropped when the heap is compacted).
//!
//! The task runs the due work concurrently (one slow renewal never holds
//! up another) and ends when there is nothing left to wait for; the next
//! insert starts it again, on the runtime of whoever inserts. If its
//! runtime shuts down under it, the next insert starts it again too.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Something that has work to do at times it chooses (a lease).
pub(crate) trait Timed: Send + Sync + 'static {
    /// Whether the entry pushed with generation `generation` is still this
    /// one's live entry (not stopped, not superseded).
    fn is_current(&self, generation: u64) -> bool;

    /// The work due for the entry `generation`. It pushes its own next
    /// entry (if any) through [`Timers::insert`].
    fn fire(self: Arc<Self>, generation: u64) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// The per-store timer queue and its one task.
#[derive(Default)]
pub(crate) struct Timers {
    state: Mutex<State>,
    /// Wakes the task when an entry is pushed that is due before the time
    /// it sleeps until.
    wake: Notify,
}

#[derive(Default)]
struct State {
    heap: BinaryHeap<Entry>,
    /// The task is running (or spawned and about to).
    running: bool,
    /// When the task next looks at the heap (by itself); `None` while it
    /// has nothing to sleep for.
    sleeping_until: Option<Instant>,
    /// Compact the heap (drop dead entries) when it grows past this.
    compact_at: usize,
}

struct Entry {
    at: Instant,
    generation: u64,
    owner: Weak<dyn Timed>,
}

impl Entry {
    fn live(&self) -> bool {
        self.owner
            .upgrade()
            .is_some_and(|o| o.is_current(self.generation))
    }
}

// Ordered by time only, soonest on top of the (max-)heap.
impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.cmp(&self.at)
    }
}

impl fmt::Debug for Timers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entries = self.lock().heap.len();
        f.debug_struct("Timers").field("entries", &entries).finish()
    }
}

/// The smallest heap worth compacting: below it, dead entries just wait
/// for their time.
const COMPACT_MIN: usize = 1024;

impl Timers {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `owner.fire(generation)` at `at` unless by then the owner is
    /// gone or no longer current. Must be called within a Tokio runtime.
    pub(crate) fn insert(self: &Arc<Self>, at: Instant, generation: u64, owner: Weak<dyn Timed>) {
        let mut st = self.lock();
        st.heap.push(Entry {
            at,
            generation,
            owner,
        });
        if st.heap.len() > st.compact_at.max(COMPACT_MIN) {
            // Released leases leave their entries behind; dropping the
            // dead ones when the heap has doubled keeps it in proportion
            // to the live ones at a constant cost per insert.
            st.heap.retain(Entry::live);
            st.compact_at = 2 * st.heap.len();
        }
        if !st.running {
            st.running = true;
            drop(st);
            tokio::spawn(self.clone().run());
            return;
        }
        let sooner = st.sleeping_until.is_none_or(|t| at < t);
        drop(st);
        if sooner {
            self.wake.notify_one();
        }
    }

    async fn run(self: Arc<Self>) {
        let mut running = Running(Some(self.clone()));
        let mut firing = FuturesUnordered::new();
        let sleep = tokio::time::sleep_until(Instant::now());
        tokio::pin!(sleep);
        loop {
            let now = Instant::now();
            let next = {
                let mut st = self.lock();
                while let Some(top) = st.heap.peek()
                    && top.at <= now
                {
                    let Some(e) = st.heap.pop() else { break };
                    if let Some(owner) = e.owner.upgrade()
                        && owner.is_current(e.generation)
                    {
                        firing.push(owner.fire(e.generation));
                    }
                }
                if st.heap.is_empty() && firing.is_empty() {
                    st.running = false;
                    st.sleeping_until = None;
                    running.0 = None;
                    return;
                }
                st.sleeping_until = st.heap.peek().map(|e| e.at);
                st.sleeping_until
            };
            if let Some(at) = next {
                sleep.as_mut().reset(at);
            }
            tokio::select! {
                _ = &mut sleep, if next.is_some() => {}
                _ = self.wake.notified() => {}
                Some(()) = firing.next(), if !firing.is_empty() => {}
            }
        }
    }
}

/// Marks the task stopped if its future is dropped unfinished (its runtime
/// shut down), so the next insert starts another.
struct Running(Option<Arc<Timers>>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            let mut st = t.lock();
            st.running = false;
            st.sleeping_until = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering as AtOrd};
    use std::time::Duration;

    struct Counter {
        generation: AtomicU64,
        fired: AtomicUsize,
    }

    impl Timed for Counter {
        fn is_current(&self, generation: u64) -> bool {
            self.generation.load(AtOrd::SeqCst) == generation
        }

        fn fire(self: Arc<Self>, _: u64) -> Pin<Box<dyn Future<Output = ()> + Send>> {
            Box::pin(async move {
                self.fired.fetch_add(1, AtOrd::SeqCst);
            })
        }
    }

    fn counter(generation: u64) -> Arc<Counter> {
        Arc::new(Counter {
            generation: AtomicU64::new(generation),
            fired: AtomicUsize::new(0),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn only_current_entries_fire_and_an_earlier_insert_wakes_the_task() {
        let timers = Arc::new(Timers::default());
        let late = counter(1);
        let stale = counter(2);
        let early = counter(1);
        let gone = counter(1);
        let now = Instant::now();
        timers.insert(
            now + Duration::from_secs(10),
            1,
            Arc::downgrade(&late) as Weak<dyn Timed>,
        );
        timers.insert(
            now + Duration::from_secs(1),
            1,
            Arc::downgrade(&stale) as Weak<dyn Timed>,
        );
        timers.insert(
            now + Duration::from_secs(1),
            1,
            Arc::downgrade(&gone) as Weak<dyn Timed>,
        );
        drop(gone);
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Sooner than what the task sleeps for (10 s): it must wake.
        timers.insert(
            now + Duration::from_secs(2),
            1,
            Arc::downgrade(&early) as Weak<dyn Timed>,
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(early.fired.load(AtOrd::SeqCst), 1);
        assert_eq!(stale.fired.load(AtOrd::SeqCst), 0);
        assert_eq!(late.fired.load(AtOrd::SeqCst), 0);
        tokio::time::sleep(Duration::from_secs(8)).await;
        assert_eq!(late.fired.load(AtOrd::SeqCst), 1);
        // Nothing left: the task has ended, and a new insert starts it.
        tokio::task::yield_now().await;
        assert!(!timers.lock().running);
        timers.insert(Instant::now(), 1, Arc::downgrade(&late) as Weak<dyn Timed>);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(late.fired.load(AtOrd::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn dead_entries_are_compacted_away() {
        let timers = Arc::new(Timers::default());
        let keep = counter(1);
        let at = Instant::now() + Duration::from_secs(60);
        timers.insert(at, 1, Arc::downgrade(&keep) as Weak<dyn Timed>);
        for _ in 0..10 * COMPACT_MIN {
            let c = counter(1);
            timers.insert(at, 1, Arc::downgrade(&c) as Weak<dyn Timed>);
        }
        assert!(timers.lock().heap.len() <= COMPACT_MIN + 1);
    }
}
