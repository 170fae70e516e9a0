//! Fences only go up, whatever the store forgets or takes back: a Redis
//! restarted from an older snapshot, an append-only file that lost its
//! tail, a failover to a replica that missed the last writes, FLUSHALL,
//! and the embedded store started afresh. Every grant and every job
//! delivery after the loss carries a fence above every fence handed out
//! before it, on every path that hands one out (a Lock's lone lease, a
//! semaphore's inline grant, a hand-off to the line, a read-write lock's
//! reader and writer, an election's leader, a job's claim).

mod support;

use std::time::Duration;

use support::RedisServer;
use tollgate::{Election, JobQueue, Lock, PushOptions, RwLock, Semaphore, Store};

/// Fences by what handed them out (fences are per gate and per queue).
type Fences = Vec<(&'static str, u64)>;

/// One round of grants and deliveries on every path, each released or
/// acked: the fences, in the order handed out.
async fn fences(store: &Store, round: &str) -> Fences {
    let mut out = Vec::new();
    // A Lock's first grant makes the gate's state; the next ones are
    // lone leases (their own key and script path).
    let lock = Lock::new(store, "fg").expect("lock");
    for _ in 0..3 {
        let lease = lock.try_acquire().await.expect("store").expect("free");
        out.push(("fg", lease.fence()));
        lease.release().await.expect("release");
    }
    // A semaphore's inline holders.
    let sem = Semaphore::new(store, "fs", 3).expect("semaphore");
    let a = sem.try_acquire(1).await.expect("store").expect("free");
    let b = sem.try_acquire(2).await.expect("store").expect("free");
    out.extend([("fs", a.fence()), ("fs", b.fence())]);
    a.release().await.expect("release");
    b.release().await.expect("release");
    // A hand-off: the holder's release grants the gate to the line's head.
    let line = Lock::new(store, "fl").expect("lock");
    let first = line.try_acquire().await.expect("store").expect("free");
    let waiter = {
        let line = line.clone();
        tokio::spawn(async move { line.acquire(Duration::from_secs(10)).await })
    };
    while line.stats().await.expect("stats").waiting == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    out.push(("fl", first.fence()));
    first.release().await.expect("release");
    let second = waiter.await.expect("task").expect("store").expect("handed");
    out.push(("fl", second.fence()));
    second.release().await.expect("release");
    // A read-write lock's reader (one of its permits, inline) and writer
    // (every permit), and an election's leaders, one after another.
    let rw = RwLock::new(store, "frw").expect("rwlock");
    let reader = rw.try_read().await.expect("store").expect("free");
    out.push(("frw", reader.fence()));
    reader.release().await.expect("release");
    let writer = rw.try_write().await.expect("store").expect("free");
    out.push(("frw", writer.fence()));
    writer.release().await.expect("release");
    let election = Election::new(store, "fe").expect("election");
    for label in ["one", "two"] {
        let leader = election
            .campaign(label, Duration::ZERO)
            .await
            .expect("store")
            .expect("nobody leads");
        out.push(("fe", leader.fence()));
        leader.resign().await.expect("resign");
    }
    // A job's delivery.
    let queue = JobQueue::new(store, "fq").expect("queue");
    let options = PushOptions {
        id: Some(format!("job-{round}")),
        ..PushOptions::default()
    };
    queue.push(round, &options).await.expect("push");
    let job = queue.claim().await.expect("store").expect("a job");
    out.push(("fq", job.fence));
    queue.ack(&job.id, job.fence).await.expect("ack");
    out
}

/// For each gate and queue, every fence of `after` is above every fence
/// of `before`, and each goes up.
fn above(before: &Fences, after: &Fences, what: &str) {
    for (name, _) in after {
        let of = |list: &Fences| {
            list.iter()
                .filter(|(n, _)| n == name)
                .map(|(_, f)| *f)
                .collect::<Vec<_>>()
        };
        let (old, new) = (of(before), of(after));
        for list in [&old, &new] {
            assert!(
                list.windows(2).all(|w| w[0] < w[1]),
                "{what}, {name}: not increasing: {list:?}"
            );
        }
        let top = old.iter().max().expect("fences before");
        assert!(
            new.iter().all(|f| f > top),
            "{what}, {name}: a fence repeats or goes back: {new:?} after {old:?}"
        );
    }
}

/// The store answers again after a restart (its connection comes back).
async fn until_up(store: &Store) {
    let lock = Lock::new(store, "probe").expect("lock");
    for _ in 0..100 {
        if let Ok(Some(l)) = lock.try_acquire().await {
            l.release().await.expect("release");
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the store did not come back");
}

fn queue_job_claimed_again(job: &tollgate::Job, id: &str) {
    assert_eq!(job.id, id, "the job in the snapshot is delivered again");
    assert!(job.attempt >= 1);
}

/// Redis killed and restarted from an RDB snapshot older than the last
/// grants: the counters it reloads are behind, the fences are not. A
/// job pushed before the snapshot and claimed after it is delivered
/// again, with a greater fence than its lost delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_from_an_older_snapshot() {
    let mut server = RedisServer::start();
    let store = Store::redis(&server.url()).await.expect("connect");
    let mut before = fences(&store, "a").await;
    let queue = JobQueue::new(&store, "fq-again").expect("queue");
    let again = PushOptions {
        id: Some("again".into()),
        ..PushOptions::default()
    };
    queue.push("x", &again).await.expect("push");
    server.command(&["SAVE"]);
    before.extend(fences(&store, "b").await);
    let lost = queue.claim().await.expect("store").expect("the job");
    queue_job_claimed_again(&lost, "again");
    before.push(("fq-again", lost.fence));
    server.kill();
    server.restart();
    until_up(&store).await;
    let mut after = fences(&store, "c").await;
    let job = queue.claim().await.expect("store").expect("the job again");
    queue_job_claimed_again(&job, "again");
    after.push(("fq-again", job.fence));
    above(&before, &after, "restart from a snapshot");
}

/// Redis with an append-only file (fsync always) whose tail is lost: cut
/// back to where it stood after the first round, as a disk that dropped
/// its last writes leaves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_only_file_that_lost_its_tail() {
    let mut server = RedisServer::start_aof();
    let store = Store::redis(&server.url()).await.expect("connect");
    let mut before = fences(&store, "a").await;
    let aof = server.aof_incr_file();
    let kept = std::fs::metadata(&aof).expect("aof").len();
    before.extend(fences(&store, "b").await);
    server.kill();
    let file = std::fs::OpenOptions::new().write(true).open(&aof).expect("aof");
    assert!(
        file.metadata().expect("aof").len() > kept,
        "the second round was logged"
    );
    file.set_len(kept).expect("cut the tail");
    drop(file);
    server.restart();
    until_up(&store).await;
    // The first round's state is back, the second's is not.
    let lock = Lock::new(&store, "fg").expect("lock");
    let grants = lock.stats().await.expect("stats").grants;
    assert_eq!(grants, 3, "the file was cut back to the first round");
    let after = fences(&store, "c").await;
    above(&before, &after, "an AOF that lost its tail");
}

/// A failover to a replica that missed the last writes: the replica
/// stops following (as a promotion does) before the master's last
/// rounds, then the master dies and the store moves to the replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_a_replica_that_lagged() {
    let (mut master, replica) = RedisServer::start_with_replica().await;
    let store = Store::redis(&master.url()).await.expect("connect");
    let mut before = fences(&store, "a").await;
    // What the replica has: the first round, acknowledged.
    master.command(&["WAIT", "1", "5000"]);
    replica.command(&["REPLICAOF", "NO", "ONE"]);
    before.extend(fences(&store, "b").await);
    master.kill();
    let moved = Store::redis(&replica.url())
        .await
        .expect("connect to the new master");
    let lock = Lock::new(&moved, "fg").expect("lock");
    assert_eq!(
        lock.stats().await.expect("stats").grants,
        3,
        "the replica missed the second round"
    );
    let after = fences(&moved, "c").await;
    above(&before, &after, "a failover to a lagging replica");
}

/// FLUSHALL: every counter gone. (A loss and the next grant must be a
/// millisecond apart: fences are above the store's time in ms x 1000.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushall() {
    let server = RedisServer::start();
    let store = Store::redis(&server.url()).await.expect("connect");
    let before = fences(&store, "a").await;
    server.command(&["FLUSHALL"]);
    tokio::time::sleep(Duration::from_millis(2)).await;
    let after = fences(&store, "b").await;
    above(&before, &after, "FLUSHALL");
}

/// The embedded store started afresh (a process restarted): its fences
/// are above the last process's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_started_afresh() {
    let before = fences(&Store::memory(), "a").await;
    tokio::time::sleep(Duration::from_millis(2)).await;
    let after = fences(&Store::memory(), "b").await;
    above(&before, &after, "a new embedded store");
}
