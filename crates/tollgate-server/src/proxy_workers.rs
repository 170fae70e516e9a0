//! The waiting rooms' proxy threads: each runs a single-threaded tokio
//! runtime, and a connection to the rooms' listener lives on one of them
//! from accept to close, with the upstream connections it uses (each
//! thread has its own pool: see `room::proxy::Upstream`). A request and
//! its upstream call then never hop between threads: on the work-stealing
//! runtime, the connection's task and its upstream connection's task woke
//! each other across the two threads on every request, and a bare proxy
//! on hyper did 0.92× nginx's throughput there against 1.10× on one
//! single-threaded runtime (docs/BENCHMARKS.md, the room's proxy).
//!
//! Everything else (the API, the store's background work, the accept
//! loop) stays on the main runtime; a room's calls to the store from a
//! proxy thread wake across runtimes, as any cross-task call would.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::Handle;

thread_local! {
    /// This thread's place among the proxy threads, from 1; 0 on any
    /// other thread.
    static INDEX: Cell<usize> = const { Cell::new(0) };
}

/// How many proxy threads serve the rooms: one per core (at most 64).
pub(crate) fn count() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(64)
}

/// This thread's place among the proxy threads (1 to `count()`), or 0
/// off them.
pub(crate) fn index() -> usize {
    INDEX.with(Cell::get)
}

/// The running proxy threads' runtimes; connections go to each in turn.
#[derive(Debug)]
pub(crate) struct ProxyWorkers {
    handles: Vec<Handle>,
    next: AtomicUsize,
}

impl ProxyWorkers {
    /// Starts `count()` threads, each driving its own runtime until the
    /// process ends (a connection still open then goes with it, as on the
    /// main runtime after its shutdown's grace).
    pub(crate) fn start() -> std::io::Result<ProxyWorkers> {
        let mut handles = Vec::new();
        for i in 1..=count() {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            handles.push(runtime.handle().clone());
            std::thread::Builder::new()
                .name(format!("tollgate-proxy-{i}"))
                .spawn(move || {
                    INDEX.with(|c| c.set(i));
                    runtime.block_on(std::future::pending::<()>());
                })?;
        }
        Ok(ProxyWorkers {
            handles,
            next: AtomicUsize::new(0),
        })
    }

    /// The runtime of the next thread in turn.
    pub(crate) fn next(&self) -> &Handle {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        &self.handles[i]
    }
}
