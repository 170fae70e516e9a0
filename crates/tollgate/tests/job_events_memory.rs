//! What watching many queues costs this process: each watched queue
//! allocates its whole ring of `EVENTS_BUFFER` slots at once, so a server
//! serving its 1,000 streams each on its own queue pays it 1,000 times.
//! Alone in its file: the figure is the process's resident size.

use tollgate::{JobQueue, Store};

/// The process's resident set, in KiB (Linux).
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_queue_costs_a_few_hundred_kib_at_most() {
    let store = Store::memory();
    let n = 500;
    let before = rss_kib();
    let mut feeds = Vec::with_capacity(n);
    for i in 0..n {
        let q = JobQueue::new(&store, &format!("watched-{i}")).unwrap();
        feeds.push(q.events(None).await.unwrap());
    }
    let per_queue = rss_kib().saturating_sub(before) / n as u64;
    // A slot holding the event itself took about 600 KiB a queue; one
    // holding an Arc of it about 160.
    assert!(per_queue < 300, "{per_queue} KiB per watched queue");
    drop(feeds);
}
