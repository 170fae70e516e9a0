//! Ending sessions and watching a gate: `Gate::end` records released
//! holders in the gate's revocation log, `Gate::watch_state` reads it with
//! the gate's epoch and settings, writing nothing. The same assertions on
//! both stores.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use futures_util::future::join_all;
use support::{RedisServer, TestStore};
use tollgate::{Entered, ErrorKind, Gate, GateOptions, Left, MAX_REVOKED_PER_WATCH, Store, TicketStatus};

const LONG: Duration = Duration::from_secs(30);

fn opts() -> GateOptions {
    GateOptions {
        ttl: LONG,
        heartbeat: LONG,
        auto_renew: false,
        fair: true,
        max_hold: None,
    }
}

fn gate(ts: &TestStore, name: &str, capacity: Option<u32>) -> Gate {
    Gate::new(&ts.store, name, capacity, opts()).expect("valid gate")
}

async fn enter(g: &Gate) -> Entered {
    g.enter(1, true).await.expect("enter")
}

fn token(e: Entered) -> String {
    match e {
        Entered::Granted(g) => g.token,
        Entered::Queued { ticket, .. } => ticket,
        other => panic!("expected a grant or a ticket, got {other:?}"),
    }
}

/// How many keys the Redis behind `ts` holds (`None` on memory).
fn redis_keys(ts: &TestStore) -> Option<i64> {
    let servers: Vec<&RedisServer> = match (&ts.server, &ts.cluster, &ts.sentinel) {
        (Some(s), _, _) => vec![s],
        (_, Some(c), _) => c.nodes.iter().collect(),
        (_, _, Some(s)) => vec![&s.master],
        _ => return None,
    };
    Some(
        servers
            .iter()
            .map(|s| match s.command(&["DBSIZE"]) {
                ::redis::Value::Int(n) => n,
                other => panic!("DBSIZE answered {other:?}"),
            })
            .sum(),
    )
}

async fn end_records_a_released_holder_and_nothing_else(ts: TestStore) {
    let g = gate(&ts, "end", Some(1));
    let a = token(enter(&g).await);
    let waiting = token(enter(&g).await);
    // A ticket that leaves the line by `end` was never admitted: a cancel.
    assert_eq!(g.end(&waiting, LONG).await.unwrap(), Left::Cancelled);
    assert_eq!(g.end("nobodyhere", LONG).await.unwrap(), Left::Unknown);
    assert!(g.watch_state(0).await.unwrap().revoked.is_empty());

    assert_eq!(g.end(&a, LONG).await.unwrap(), Left::Released);
    // Exactly like leave otherwise: the permit is free again.
    let b = token(enter(&g).await);
    assert_eq!(g.stats().await.unwrap().used, 1);
    assert_eq!(g.leave(&b).await.unwrap(), Left::Released);
    assert_eq!(g.watch_state(0).await.unwrap().revoked, vec![a.clone()]);
    // Ended once: a second end finds nothing and records nothing new.
    assert_eq!(g.end(&a, LONG).await.unwrap(), Left::Unknown);
    assert_eq!(g.watch_state(0).await.unwrap().revoked, vec![a]);
}

async fn end_hands_the_permit_to_the_line(ts: TestStore) {
    let g = gate(&ts, "end-line", Some(1));
    let a = token(enter(&g).await);
    let b = token(enter(&g).await);
    assert_eq!(g.end(&a, LONG).await.unwrap(), Left::Released);
    assert!(matches!(g.status(&b).await.unwrap(), TicketStatus::Granted(_)));
    assert_eq!(g.watch_state(0).await.unwrap().revoked, vec![a]);
}

async fn keep_is_checked(ts: TestStore) {
    let g = gate(&ts, "keep", Some(1));
    let a = token(enter(&g).await);
    for bad in [
        Duration::ZERO,
        Duration::from_micros(999),
        Duration::from_secs(7 * 24 * 3600 + 1),
    ] {
        let e = g.end(&a, bad).await.expect_err("a keep out of range");
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad:?}");
    }
    assert_eq!(
        g.end("not a token", LONG).await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    // Nothing happened: the holder still holds.
    assert_eq!(g.stats().await.unwrap().used, 1);
    assert_eq!(
        g.end(&a, Duration::from_secs(7 * 24 * 3600)).await.unwrap(),
        Left::Released
    );
}

async fn watching_an_unknown_gate_creates_nothing(ts: TestStore) {
    let g = gate(&ts, "nobody", None);
    for since in [0, 1, u64::MAX] {
        let w = g.watch_state(since).await.unwrap();
        assert_eq!(w.epoch, None);
        assert_eq!(w.capacity, None);
        assert!(!w.paused);
        assert_eq!(w.admission_interval, None);
        assert!(w.revoked.is_empty());
    }
    assert_eq!(g.watch_state(0).await.unwrap().epoch, None);
    if let Some(keys) = redis_keys(&ts) {
        assert_eq!(keys, 0, "a watch wrote to Redis");
    }
}

async fn epoch_and_settings_follow_the_gate(ts: TestStore) {
    let g = gate(&ts, "epoch", Some(2));
    let a = token(enter(&g).await);
    let w = g.watch_state(0).await.unwrap();
    let epoch = w.epoch.expect("the first enter created the state");
    assert_eq!(
        (w.capacity, w.paused, w.admission_interval),
        (Some(2), false, None)
    );

    let b = token(enter(&g).await);
    let c = token(enter(&g).await);
    g.status(&c).await.unwrap();
    g.leave(&b).await.unwrap();
    g.end(&a, LONG).await.unwrap();
    g.set_capacity(3).await.unwrap();
    g.pause().await.unwrap();
    g.set_admission_interval(Some(Duration::from_millis(250)))
        .await
        .unwrap();
    g.stats().await.unwrap();
    g.holders(10).await.unwrap();
    let w = g.watch_state(0).await.unwrap();
    assert_eq!(w.epoch, Some(epoch), "the epoch changed while the state lived");
    assert_eq!(
        (w.capacity, w.paused, w.admission_interval),
        (Some(3), true, Some(Duration::from_millis(250)))
    );
    g.resume().await.unwrap();
    g.set_admission_interval(None).await.unwrap();
    let w = g.watch_state(0).await.unwrap();
    assert_eq!(
        (w.paused, w.admission_interval, w.epoch),
        (false, None, Some(epoch))
    );

    // Another gate's state is another incarnation.
    let other = gate(&ts, "epoch-other", Some(1));
    enter(&other).await;
    let o = other.watch_state(0).await.unwrap().epoch;
    assert!(o.is_some() && o != Some(epoch));
}

async fn revocations_are_pruned_after_their_keep(ts: TestStore) {
    let g = gate(&ts, "prune", Some(5));
    let keep = Duration::from_millis(300);
    let a = token(enter(&g).await);
    g.end(&a, keep).await.unwrap();
    ts.advance(Duration::from_millis(100)).await;
    assert_eq!(g.watch_state(0).await.unwrap().revoked, vec![a.clone()]);
    ts.advance(Duration::from_millis(350)).await;
    // Older than its keep: no longer read, even before anything prunes it.
    assert!(g.watch_state(0).await.unwrap().revoked.is_empty());
    let b = token(enter(&g).await);
    g.end(&b, keep).await.unwrap();
    assert_eq!(g.watch_state(0).await.unwrap().revoked, vec![b]);
    if let Some(server) = &ts.server {
        // The log's key never outlives its use.
        let key = "tollgate:gate:{prune}:r";
        let ::redis::Value::Int(pttl) = server.command(&["PTTL", key]) else {
            panic!("PTTL");
        };
        assert!(pttl > 0 && pttl <= 300 + 1000, "PTTL {pttl}");
        ts.advance(Duration::from_millis(1500)).await;
        assert_eq!(server.command(&["EXISTS", key]), ::redis::Value::Int(0));
    }
}

async fn a_longer_keep_is_kept_whole(ts: TestStore) {
    let g = gate(&ts, "keeps", Some(5));
    let long = token(enter(&g).await);
    g.end(&long, Duration::from_secs(10)).await.unwrap();
    let short = token(enter(&g).await);
    g.end(&short, Duration::from_millis(50)).await.unwrap();
    ts.advance(Duration::from_millis(200)).await;
    let c = token(enter(&g).await);
    g.end(&c, Duration::from_millis(50)).await.unwrap();
    // Nothing is dropped before its keep (a shorter one may be kept
    // longer: the log keeps every entry for the longest keep among them).
    let revoked = g.watch_state(0).await.unwrap().revoked;
    assert!(revoked.contains(&long) && revoked.contains(&c), "{revoked:?}");
}

async fn cursors_miss_no_end(ts: TestStore) {
    let g = gate(&ts, "cursor", Some(1000));
    let first = g.watch_state(0).await.unwrap();
    assert!(first.revoked.is_empty());
    let a = token(enter(&g).await);
    let b = token(enter(&g).await);
    g.end(&a, LONG).await.unwrap();
    let w1 = g.watch_state(first.cursor).await.unwrap();
    assert_eq!(w1.revoked, vec![a.clone()]);
    assert!(w1.cursor > first.cursor);
    g.end(&b, LONG).await.unwrap();
    let w2 = g.watch_state(w1.cursor).await.unwrap();
    assert_eq!(w2.revoked, vec![b.clone()]);
    let w3 = g.watch_state(w2.cursor).await.unwrap();
    assert!(w3.revoked.is_empty());
    assert!(w3.cursor >= w2.cursor);
    assert_eq!(g.watch_state(0).await.unwrap().revoked, vec![a, b]);

    // Ends racing with a watcher: every end that completed before a watch
    // started is in that watch's answer or an earlier one.
    let mut tokens = Vec::new();
    for _ in 0..200 {
        tokens.push(token(enter(&g).await));
    }
    let (done_tx, done_rx) = tokio::sync::watch::channel(Vec::<String>::new());
    let ender = {
        let g = g.clone();
        tokio::spawn(async move {
            for t in tokens {
                g.end(&t, LONG).await.unwrap();
                done_tx.send_modify(|d| d.push(t));
                tokio::task::yield_now().await;
            }
        })
    };
    let mut seen = HashSet::new();
    let mut cursor = w3.cursor;
    loop {
        let finished = ender.is_finished();
        let completed = done_rx.borrow().clone();
        let w = g.watch_state(cursor).await.unwrap();
        seen.extend(w.revoked);
        cursor = w.cursor;
        for t in &completed {
            assert!(
                seen.contains(t),
                "{t} ended before a watch started but was missed"
            );
        }
        if finished {
            break;
        }
    }
    ender.await.unwrap();
    assert_eq!(seen.len(), 200);
}

async fn long_logs_are_read_in_pages(ts: TestStore) {
    let g = gate(&ts, "pages", Some(20_000));
    let n = MAX_REVOKED_PER_WATCH + 50;
    let mut tokens = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let batch = join_all(chunk.iter().map(|_| enter(&g))).await;
        tokens.extend(batch.into_iter().map(token));
    }
    for chunk in tokens.chunks(500) {
        for left in join_all(chunk.iter().map(|t| g.end(t, LONG))).await {
            assert_eq!(left.unwrap(), Left::Released);
        }
    }
    let w1 = g.watch_state(0).await.unwrap();
    assert_eq!(w1.revoked.len(), MAX_REVOKED_PER_WATCH);
    let w2 = g.watch_state(w1.cursor).await.unwrap();
    assert_eq!(w2.revoked.len(), 50);
    let all: HashSet<String> = w1.revoked.into_iter().chain(w2.revoked).collect();
    assert_eq!(all, tokens.into_iter().collect::<HashSet<_>>());
}

on_both_stores!(manual_clock:
    end_records_a_released_holder_and_nothing_else,
    end_hands_the_permit_to_the_line,
    keep_is_checked,
    watching_an_unknown_gate_creates_nothing,
    epoch_and_settings_follow_the_gate,
    revocations_are_pruned_after_their_keep,
    a_longer_keep_is_kept_whole,
    cursors_miss_no_end,
    long_logs_are_read_in_pages,
);

/// A clock stepped back (NTP, or a failover to a master whose clock lags)
/// does not hide a later end from a reader: scores never go back within an
/// epoch, even once the log was pruned empty.
#[tokio::test]
async fn a_clock_stepped_back_hides_no_end() {
    let clock = tollgate::ManualClock::default();
    let store = Store::memory_with_clock(std::sync::Arc::new(clock.clone()));
    let g = Gate::new(&store, "stepped", Some(2), opts()).expect("gate");
    let first = token(g.enter(1, true).await.expect("enter"));
    g.end(&first, Duration::from_secs(1)).await.expect("end");
    assert_eq!(g.watch_state(0).await.expect("watch").revoked, [first]);
    // Two minutes on, a reader's cursor; then the clock steps back one
    // minute (still past the first end's keep, so the log is pruned empty).
    clock.advance(Duration::from_secs(120));
    let cursor = g.watch_state(0).await.expect("watch").cursor;
    clock.rewind(Duration::from_secs(60));
    let second = token(g.enter(1, true).await.expect("enter"));
    g.end(&second, Duration::from_secs(1)).await.expect("end");
    let later = g.watch_state(cursor).await.expect("watch");
    assert_eq!(
        later.revoked,
        [second],
        "an end after the clock went back was skipped"
    );
}

/// A Redis that loses its data shows a new epoch (and no state until a
/// writing operation creates it again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn epoch_changes_when_redis_loses_the_data() {
    let server = RedisServer::start();
    let store = Store::redis(&server.url()).await.expect("connect");
    let g = Gate::new(&store, "lost", Some(2), opts()).unwrap();
    let a = token(g.enter(1, true).await.unwrap());
    g.end(&a, LONG).await.unwrap();
    let before = g.watch_state(0).await.unwrap();
    assert!(before.epoch.is_some());
    assert_eq!(before.revoked, vec![a]);

    server.command(&["FLUSHALL"]);
    let w = g.watch_state(before.cursor).await.unwrap();
    assert_eq!((w.epoch, w.capacity), (None, None));
    assert!(w.revoked.is_empty());
    // Reads do not bring the state back; a write does, as a new incarnation.
    g.enter(1, true).await.unwrap();
    let after = g.watch_state(0).await.unwrap();
    assert!(after.epoch.is_some());
    assert_ne!(after.epoch, before.epoch);
    assert_eq!(after.capacity, Some(2));
    // The log was lost with the rest: after a new epoch, read from 0.
    let b = token(g.enter(1, true).await.unwrap());
    g.end(&b, LONG).await.unwrap();
    assert_eq!(g.watch_state(0).await.unwrap().revoked, vec![b]);
}

/// A gate created before epochs existed gets one at its next write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_without_an_epoch_gets_one() {
    let server = RedisServer::start();
    let store = Store::redis(&server.url()).await.expect("connect");
    let g = Gate::new(&store, "legacy", Some(1), opts()).unwrap();
    let a = token(g.enter(1, true).await.unwrap());
    server.command(&["HDEL", "tollgate:gate:{legacy}:m", "E"]);
    assert_eq!(g.watch_state(0).await.unwrap().epoch, None);
    // The leave fast path writes the meta hash: it adds the epoch.
    g.leave(&a).await.unwrap();
    assert!(g.watch_state(0).await.unwrap().epoch.is_some());
}
