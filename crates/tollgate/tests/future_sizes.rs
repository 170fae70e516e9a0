//! A waiter parks its future for as long as it waits (an HTTP long-poll:
//! up to a minute, thousands at once), so the futures that wait stay
//! small: the store's dispatch boxes the Redis client's futures (kilobytes
//! each) instead of inlining them into every caller's. These bounds are a
//! few times today's sizes; inlining one Redis call again breaks them.

use std::mem::size_of_val;
use std::time::Duration;

use tollgate::{Gate, GateOptions, JobQueue, Store};

/// Today (measured 2026-11-29): `Gate::status` 344 bytes,
/// `Gate::wait_status` 520, `Gate::acquire` 1,040 (its enter request
/// carries a draw's order key since issue 39); inlined, the Redis client
/// made the first two 6,552 and 6,736.
const SMALL: usize = 1536;

#[test]
fn waiting_futures_stay_small() {
    let store = Store::memory();
    let gate = Gate::new(&store, "g", Some(1), GateOptions::default()).expect("gate");
    let wait = Duration::from_secs(1);
    let sizes = [
        ("Gate::status", size_of_val(&gate.status("t"))),
        ("Gate::wait_status", size_of_val(&gate.wait_status("t", wait))),
        ("Gate::acquire", size_of_val(&gate.acquire(1, wait))),
        ("JobQueue::next_many", {
            let q = JobQueue::new(&store, "q").expect("queue");
            size_of_val(&q.next_many(1, wait))
        }),
    ];
    for (what, size) in sizes {
        eprintln!("{what}: {size} bytes");
        assert!(size <= SMALL, "{what}'s future is {size} bytes, over {SMALL}");
    }
}
