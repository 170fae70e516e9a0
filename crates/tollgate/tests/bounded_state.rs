//! State per name stays bounded: reads never create it, and (on the
//! embedded store) a name's state is dropped once it is idle and empty.

mod support;

use std::time::Duration;

use futures_util::future::join_all;
use support::{RedisServer, TestStore};
use tollgate::{ErrorKind, Gate, GateOptions, JobQueue, Left, MemoryFootprint, ShardedJobQueue, Store};

fn opts() -> GateOptions {
    GateOptions {
        ttl: Duration::from_secs(30),
        heartbeat: Duration::from_secs(10),
        auto_renew: false,
    }
}

/// Every read of gate `name` and queue `name`, and the writes that find
/// nothing to change.
async fn read_everything(store: &Store, name: &str) {
    let g = Gate::new(store, name, None, opts()).unwrap();
    let stats = g.stats().await.unwrap();
    assert_eq!((stats.capacity, stats.holders, stats.fence), (None, 0, 0));
    assert!(matches!(
        g.status("nosuchticket").await.unwrap(),
        tollgate::TicketStatus::Gone
    ));
    assert!(g.holders(10).await.unwrap().is_empty());
    assert_eq!(g.watch_state(0).await.unwrap().epoch, None);
    assert_eq!(
        g.renew("nosuchtoken", Duration::from_secs(1))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::LeaseLost
    );
    assert_eq!(g.leave("nosuchtoken").await.unwrap(), Left::Unknown);
    assert_eq!(
        g.end("nosuchtoken", Duration::from_secs(1)).await.unwrap(),
        Left::Unknown
    );
    // No capacity named and none stored: refused, and nothing kept.
    assert_eq!(g.enter(1, true).await.unwrap_err().kind(), ErrorKind::NoCapacity);
    g.resume().await.unwrap();
    g.set_admission_interval(None).await.unwrap();

    let q = JobQueue::new(store, name).unwrap();
    assert_eq!(q.stats().await.unwrap().ready, 0);
    assert!(q.dead(10).await.unwrap().is_empty());
    assert!(q.completed(10).await.unwrap().is_empty());
    assert!(q.claim().await.unwrap().is_none());
    assert!(q.ack("nosuchjob", 7).await.is_err());
    q.cancel("nosuchjob").await.unwrap();
    let sharded = ShardedJobQueue::new(store, &format!("{name}-s"), 4).unwrap();
    assert_eq!(sharded.stats().await.unwrap().ready, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_leave_the_embedded_store_empty() {
    let ts = TestStore::memory();
    for i in 0..100_000 {
        let g = Gate::new(&ts.store, &format!("stats-{i}"), None, opts()).unwrap();
        g.stats().await.unwrap();
    }
    for i in 0..1_000 {
        read_everything(&ts.store, &format!("all-{i}")).await;
    }
    assert_eq!(ts.store.memory_footprint(), Some(MemoryFootprint::default()));
}

async fn assert_no_keys(server: &RedisServer) {
    assert_eq!(server.command(&["DBSIZE"]), ::redis::Value::Int(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_write_nothing_to_redis() {
    let ts = TestStore::redis().await;
    let server = ts.server.as_ref().unwrap();
    for chunk in (0..10_000).collect::<Vec<_>>().chunks(500) {
        join_all(chunk.iter().map(|i| {
            let g = Gate::new(&ts.store, &format!("stats-{i}"), None, opts()).unwrap();
            async move { g.stats().await.unwrap() }
        }))
        .await;
    }
    for chunk in (0..200).collect::<Vec<_>>().chunks(50) {
        join_all(chunk.iter().map(|i| {
            let name = format!("all-{i}");
            let store = &ts.store;
            async move { read_everything(store, &name).await }
        }))
        .await;
    }
    assert_no_keys(server).await;
}
