//! Conformance suite for a gate's door (`Gate::set_door`): a closed door
//! refuses every newcomer on every path (a Lock's lone lease, the inline
//! fast path, the general path, a pass to a waiting acquire), holders and
//! the line go on, a sold-out close drops the line in the same step as it
//! shuts, and the door is read back by stats and the watch. The same
//! assertions on every store; the durable store keeps the door across a
//! restart, from its log and from a snapshot.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use support::TestStore;
use tollgate::{
    Door, DoorChange, DurableOptions, Entered, ErrorKind, Fsync, Gate, GateOptions, Lock, MAX_DOOR_NOTE,
    MAX_DOOR_TIME_MS, ManualClock, MemoryOptions, Queueing, Semaphore, Store, TicketStatus,
};

const LONG: Duration = Duration::from_secs(30);

fn options(fair: bool) -> GateOptions {
    GateOptions {
        ttl: LONG,
        heartbeat: LONG,
        auto_renew: false,
        fair,
        max_hold: None,
    }
}

fn closed(note: &str, drop_line: bool) -> DoorChange {
    DoorChange {
        door: Door {
            closed: true,
            note: note.into(),
            ..Door::default()
        },
        paused: None,
        drop_line,
    }
}

fn open(note: &str) -> DoorChange {
    DoorChange {
        door: Door {
            closed: false,
            note: note.into(),
            ..Door::default()
        },
        paused: None,
        drop_line: false,
    }
}

fn ticket(e: Entered) -> String {
    match e {
        Entered::Queued { ticket, .. } => ticket,
        other => panic!("expected a ticket, got {other:?}"),
    }
}

fn refused<T: std::fmt::Debug>(r: tollgate::Result<T>) {
    match r {
        Err(e) => assert_eq!(e.kind(), ErrorKind::Closed, "{e}"),
        Ok(v) => panic!("a closed door let a newcomer in: {v:?}"),
    }
}

async fn a_closed_door_refuses_newcomers_and_the_line_moves_on(ts: TestStore) {
    let g = Gate::new(&ts.store, "g", Some(1), options(true)).unwrap();
    let holder = g.try_acquire(1).await.unwrap().expect("free");
    let waiter = ticket(g.enter_as(1, true, Some("w")).await.unwrap());

    assert_eq!(g.set_door(&closed("closed", false)).await.unwrap(), 0);
    refused(g.try_acquire(1).await);
    refused(g.enter_as(1, true, None).await);
    refused(g.acquire(1, Duration::from_millis(200)).await);
    let s = g.stats().await.unwrap();
    assert_eq!(
        s.door,
        Door {
            closed: true,
            note: "closed".into(),
            ..Door::default()
        }
    );
    assert_eq!((s.holders, s.waiting), (1, 1));
    let w = g.watch_state(0).await.unwrap();
    assert!(w.door.closed);
    assert_eq!(w.door.note, "closed");

    // The one in line is admitted in turn: closed is for newcomers.
    holder.release().await.unwrap();
    match g.status(&waiter).await.unwrap() {
        TicketStatus::Granted(_) => {}
        other => panic!("the line stopped behind a closed door: {other:?}"),
    }

    // Open again, with a note of its own, and in they come.
    g.set_door(&open("passthrough")).await.unwrap();
    assert_eq!(g.stats().await.unwrap().door.note, "passthrough");
    match g.enter_as(1, true, None).await.unwrap() {
        Entered::Queued { .. } => {}
        other => panic!("expected to queue behind the holder: {other:?}"),
    }
}

async fn every_fast_path_is_shut_too(ts: TestStore) {
    // A Lock's lone lease (capacity 1, no label), an inline gate's fast
    // path (capacity up to 8) and a gate past the inline size.
    let lock = Lock::with_options(&ts.store, "lock", options(true)).unwrap();
    let small = Semaphore::with_options(&ts.store, "small", 4, options(true)).unwrap();
    let large = Semaphore::with_options(&ts.store, "large", 20, options(true)).unwrap();
    // Each used once first, so each has state and its fast path is warm.
    lock.try_acquire()
        .await
        .unwrap()
        .expect("free")
        .release()
        .await
        .unwrap();
    small
        .try_acquire(1)
        .await
        .unwrap()
        .expect("free")
        .release()
        .await
        .unwrap();
    large
        .try_acquire(1)
        .await
        .unwrap()
        .expect("free")
        .release()
        .await
        .unwrap();
    for g in [lock.gate(), small.gate(), large.gate()] {
        g.set_door(&closed("", false)).await.unwrap();
        refused(g.try_acquire(1).await);
        refused(g.enter_as(1, true, None).await);
        let s = g.stats().await.unwrap();
        assert_eq!((s.holders, s.waiting), (0, 0), "{s:?}");
        g.set_door(&open("")).await.unwrap();
        let lease = g.try_acquire(1).await.unwrap().expect("open again");
        assert_eq!(g.stats().await.unwrap().door, Door::default());
        lease.release().await.unwrap();
    }
    // Closed on a gate that has no state yet: it refuses the first one.
    let fresh = Lock::with_options(&ts.store, "fresh", options(true)).unwrap();
    fresh.gate().set_door(&closed("later", false)).await.unwrap();
    refused(fresh.try_acquire().await);
}

async fn sold_out_drops_the_line_in_the_same_step(ts: TestStore) {
    let g = Gate::new(&ts.store, "sale", Some(2), options(true)).unwrap();
    let a = g.try_acquire(1).await.unwrap().expect("free");
    let b = g.try_acquire(1).await.unwrap().expect("free");
    let mut tickets = Vec::new();
    for i in 0..7 {
        tickets.push(ticket(g.enter_as(1, true, Some(&format!("v{i}"))).await.unwrap()));
    }
    let paused = DoorChange {
        paused: Some(true),
        ..closed("sold_out", true)
    };
    assert_eq!(g.set_door(&paused).await.unwrap(), 7);
    for t in &tickets {
        assert_eq!(g.status(t).await.unwrap(), TicketStatus::Gone);
    }
    let s = g.stats().await.unwrap();
    assert_eq!((s.holders, s.waiting, s.paused), (2, 0, true));
    assert!(s.line_reset_ms.is_some());
    assert_eq!(s.door.note, "sold_out");
    // Those inside finish; a freed place goes to nobody.
    a.release().await.unwrap();
    b.extend(LONG).await.unwrap();
    refused(g.try_acquire(1).await);
    assert_eq!(g.stats().await.unwrap().holders, 1);
}

async fn a_pass_to_a_waiting_acquire_is_refused_by_a_closed_door(ts: TestStore) {
    // A non-fair acquire waits outside the line for a release to pass it
    // the permit; the door closes while it waits.
    let g = Gate::new(&ts.store, "pass", Some(1), options(false)).unwrap();
    let holder = g.try_acquire(1).await.unwrap().expect("free");
    let waiting = {
        let g = g.clone();
        tokio::spawn(async move { g.acquire(1, Duration::from_secs(5)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    g.set_door(&closed("", false)).await.unwrap();
    holder.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the acquire ends")
        .expect("task");
    refused(got);
    assert_eq!(g.stats().await.unwrap().holders, 0);
}

async fn closing_is_atomic_with_concurrent_joins(ts: TestStore) {
    // Joiners keep coming while the door shuts and the line is dropped:
    // none that was answered "queued" survives the drop, and none gets
    // in once set_door has answered.
    let g = Gate::new(&ts.store, "busy", Some(1), options(true)).unwrap();
    let _holder = g.try_acquire(1).await.unwrap().expect("free");
    let shut = Arc::new(AtomicBool::new(false));
    let late = Arc::new(AtomicU64::new(0));
    let mut joiners = Vec::new();
    for _ in 0..8 {
        let (g, shut, late) = (g.clone(), shut.clone(), late.clone());
        joiners.push(tokio::spawn(async move {
            let mut queued = Vec::new();
            loop {
                let was_shut = shut.load(Ordering::SeqCst);
                match g.enter_as(1, true, None).await {
                    Ok(e) => {
                        if was_shut {
                            late.fetch_add(1, Ordering::SeqCst);
                        }
                        queued.push(ticket(e));
                    }
                    Err(e) if e.kind() == ErrorKind::Closed => return queued,
                    Err(e) => panic!("{e}"),
                }
                // (The memory store answers without yielding: let the
                // closing task run.)
                tokio::task::yield_now().await;
                assert!(queued.len() < 100_000, "the door never shut");
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let dropped = g.set_door(&closed("sold_out", true)).await.unwrap();
    shut.store(true, Ordering::SeqCst);
    let mut all = Vec::new();
    for j in joiners {
        all.extend(j.await.unwrap());
    }
    assert_eq!(
        late.load(Ordering::SeqCst),
        0,
        "a join answered after the door shut"
    );
    assert_eq!(
        dropped,
        all.len() as u64,
        "every ticket queued before the close is dropped"
    );
    assert!(!all.is_empty(), "the joiners ran");
    for t in &all {
        assert_eq!(g.status(t).await.unwrap(), TicketStatus::Gone);
    }
    assert_eq!(g.stats().await.unwrap().waiting, 0);
}

/// The store's clock now (ms): the hand-moved one, or the system's (as
/// Redis's TIME on this machine).
fn store_now(ts: &TestStore) -> u64 {
    use tollgate::Clock;
    match &ts.clock {
        Some(c) => c.now_ms(),
        None => tollgate::SystemClock.now_ms(),
    }
}

async fn a_timed_door_opens_and_closes_by_the_stores_clock(ts: TestStore) {
    let g = Gate::new(&ts.store, "sale", Some(2), options(true)).unwrap();
    let now = store_now(&ts);
    let (opens, closes) = (now + 1_500, now + 3_000);
    let change = DoorChange {
        door: Door {
            note: "sale".into(),
            opens_at_ms: Some(opens),
            closes_at_ms: Some(closes),
            ..Door::default()
        },
        ..DoorChange::default()
    };
    g.set_door(&change).await.unwrap();
    // Before the opening everyone queues, in arrival order: nobody is
    // admitted, however free the gate is.
    let mut line = Vec::new();
    for i in 0..4 {
        line.push(ticket(g.enter_as(1, true, Some(&format!("v{i}"))).await.unwrap()));
    }
    refused_none(g.try_acquire(1).await);
    let s = g.stats().await.unwrap();
    assert_eq!((s.holders, s.waiting, s.paused), (0, 4, false));
    assert_eq!(
        (s.door.opens_at_ms, s.door.closes_at_ms),
        (Some(opens), Some(closes))
    );
    let w = g.watch_state(0).await.unwrap();
    assert_eq!(w.door.opens_at_ms, Some(opens));
    for t in &line {
        assert!(matches!(g.status(t).await.unwrap(), TicketStatus::Queued(_)));
    }

    // The first operation after the opening admits exactly the capacity,
    // the head of the line first; the later ones queue behind.
    ts.advance(Duration::from_millis(1_600)).await;
    let late = ticket(g.enter_as(1, true, Some("late")).await.unwrap());
    let s = g.stats().await.unwrap();
    assert_eq!((s.holders, s.waiting, s.door.opens_at_ms), (2, 3, None));
    for (i, t) in line.iter().enumerate() {
        let granted = matches!(g.status(t).await.unwrap(), TicketStatus::Granted(_));
        assert_eq!(granted, i < 2, "ticket {i}");
    }
    match g.status(&late).await.unwrap() {
        TicketStatus::Queued(p) => assert_eq!(p.position, 3),
        other => panic!("the late one is behind the pre-queue: {other:?}"),
    }

    // At the closing time a watch reads the door closed (it writes
    // nothing); the next operation closes it, and newcomers are refused.
    ts.advance(Duration::from_millis(1_600)).await;
    let w = g.watch_state(0).await.unwrap();
    assert!(w.door.closed && w.door.closes_at_ms.is_none(), "{w:?}");
    refused(g.enter_as(1, true, None).await);
    let s = g.stats().await.unwrap();
    assert!(s.door.closed, "{s:?}");
    assert_eq!(s.door.note, "sale");

    // Times already past: no hold, and a door closed at once.
    let now = store_now(&ts);
    let past = DoorChange {
        door: Door {
            opens_at_ms: Some(now - 10),
            ..Door::default()
        },
        ..DoorChange::default()
    };
    g.set_door(&past).await.unwrap();
    assert_eq!(g.stats().await.unwrap().door, Door::default());
    let closing = DoorChange {
        door: Door {
            closes_at_ms: Some(now - 10),
            ..Door::default()
        },
        ..DoorChange::default()
    };
    g.set_door(&closing).await.unwrap();
    assert!(g.stats().await.unwrap().door.closed);
    // Bad times are refused.
    for (opens, closes) in [
        (Some(now + 10), Some(now + 10)),
        (Some(MAX_DOOR_TIME_MS + 1), None),
    ] {
        let bad = DoorChange {
            door: Door {
                opens_at_ms: opens,
                closes_at_ms: closes,
                ..Door::default()
            },
            ..DoorChange::default()
        };
        let e = g.set_door(&bad).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    }
}

/// A door that holds for an opening `in_ms` from the store's now.
fn opening(ts: &TestStore, in_ms: u64) -> DoorChange {
    DoorChange {
        door: Door {
            opens_at_ms: Some(store_now(ts) + in_ms),
            ..Door::default()
        },
        ..DoorChange::default()
    }
}

/// The keys of a draw's entrants, in the order they join: a tie (20) is
/// ordered by ticket id.
const KEYS: [u64; 6] = [50, 10, 40, 20, 30, 20];

async fn position(g: &Gate, ticket: &str) -> u64 {
    match g.status(ticket).await.unwrap() {
        TicketStatus::Queued(p) => p.position,
        other => panic!("expected {ticket} in line, got {other:?}"),
    }
}

async fn a_draw_orders_its_entrants_by_key_between_those_before_and_after(ts: TestStore) {
    let g = Gate::new(&ts.store, "draw", Some(2), options(true)).unwrap();
    g.set_door(&opening(&ts, 1_500)).await.unwrap();
    // Before the draw: in turn, ahead of it.
    let first = ticket(g.enter_as(1, true, Some("first")).await.unwrap());
    let mut drawn = Vec::new();
    for key in KEYS {
        let t = ticket(g.enter_drawn(1, None, |_| key).await.unwrap());
        drawn.push((key, t));
    }
    // A key past the draw's space is refused, nothing written.
    let e = g.enter_drawn(1, None, |_| tollgate::DRAW_SPAN).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    // Joined in turn while the draw is under way: behind all of it.
    let after = ticket(g.enter_as(1, true, Some("after")).await.unwrap());
    // One of the draw leaves before the opening: not in its record.
    let (_, gone) = drawn.remove(2);
    assert_eq!(g.leave(&gone).await.unwrap(), tollgate::Left::Cancelled);
    drawn.sort();
    let order: Vec<String> = drawn.iter().map(|(_, t)| t.clone()).collect();
    assert_eq!(position(&g, &first).await, 1);
    for (i, t) in order.iter().enumerate() {
        assert_eq!(position(&g, t).await, i as u64 + 2, "drawn ticket {i}");
    }
    assert_eq!(position(&g, &after).await, 7);
    assert_eq!(
        g.last_draw().await.unwrap(),
        tollgate::DrawRecord::default(),
        "no draw has ended yet"
    );
    let s = g.stats().await.unwrap();
    assert_eq!((s.holders, s.waiting), (0, 7));

    // The opening admits the head: the one before the draw, then the
    // draw's first; a drawn entry now joins in turn, at the end.
    let opens = store_now(&ts) + 100;
    ts.advance(Duration::from_millis(1_600)).await;
    let record = g.last_draw().await.unwrap();
    assert_eq!(record.tickets, order, "the draw's record, head first");
    assert!(
        record.ended_at_ms >= opens && record.ended_at_ms <= store_now(&ts),
        "{record:?}"
    );
    let late = ticket(g.enter_drawn(1, None, |_| 0).await.unwrap());
    assert!(matches!(
        g.status(&first).await.unwrap(),
        TicketStatus::Granted(_)
    ));
    assert!(matches!(
        g.status(&order[0]).await.unwrap(),
        TicketStatus::Granted(_)
    ));
    for (i, t) in order.iter().enumerate().skip(1) {
        assert_eq!(
            position(&g, t).await,
            i as u64,
            "drawn ticket {i} after the opening"
        );
    }
    assert_eq!(position(&g, &after).await, 5);
    assert_eq!(position(&g, &late).await, 6);

    // A second opening: a new draw, behind everyone in line now; lifting
    // the hold ends it too.
    g.set_door(&opening(&ts, 60_000)).await.unwrap();
    let mut second = Vec::new();
    for key in [7, 3] {
        second.push(ticket(g.enter_drawn(1, None, |_| key).await.unwrap()));
    }
    assert_eq!(position(&g, &second[1]).await, 7);
    assert_eq!(position(&g, &second[0]).await, 8);
    g.set_door(&DoorChange::default()).await.unwrap();
    assert_eq!(
        g.last_draw().await.unwrap().tickets,
        vec![second[1].clone(), second[0].clone()]
    );
    // A draw dropped with the line leaves no record: the last stays.
    g.set_door(&opening(&ts, 60_000)).await.unwrap();
    ticket(g.enter_drawn(1, None, |_| 1).await.unwrap());
    g.clear_line().await.unwrap();
    g.set_door(&DoorChange::default()).await.unwrap();
    assert_eq!(g.last_draw().await.unwrap().tickets.len(), 2);
    // A draw begun with nobody in line numbers from 1 again (base 1, so
    // key 5 is number 6): draws never use up the line's numbers.
    g.set_door(&opening(&ts, 60_000)).await.unwrap();
    ticket(g.enter_drawn(1, None, |_| 5).await.unwrap());
    let line = g.line(10).await.unwrap();
    assert_eq!(line.iter().map(|w| w.number).collect::<Vec<_>>(), [6]);
}

/// The picks random queueing makes from `seed` (as documented on
/// `Queueing::Random`): a Lehmer generator whose state x picks index
/// x mod n of a line of n and moves on with each grant.
fn expected_picks(seed: u64, mut line: Vec<String>) -> Vec<String> {
    const M: u64 = 2_147_483_647;
    let mut x = 1 + seed % (M - 1);
    let mut out = Vec::new();
    while !line.is_empty() {
        out.push(line.remove((x % line.len() as u64) as usize));
        x = x * 48_271 % M;
    }
    out
}

/// Random queueing: each freed place goes to the waiter the seed picks
/// from everyone in line then (the same picks on every store), never more
/// than the capacity hold, everyone is admitted while the line drains,
/// and back to first come, first served the head goes first again.
async fn random_queueing_admits_everyone_in_the_seeds_order(ts: TestStore) {
    let g = Gate::new(&ts.store, "lottery", Some(2), options(true)).unwrap();
    let mut holders = Vec::new();
    for _ in 0..2 {
        match g.enter_as(1, true, None).await.unwrap() {
            Entered::Granted(got) => holders.push(got.token),
            other => panic!("a free gate: {other:?}"),
        }
    }
    let mut line = Vec::new();
    for _ in 0..12 {
        line.push(ticket(g.enter_as(1, true, None).await.unwrap()));
    }
    g.set_queueing(Queueing::Random { seed: 7 }).await.unwrap();
    assert!(g.stats().await.unwrap().random);
    assert!(g.watch_state(0).await.unwrap().random);
    // A newcomer still queues behind a line, whatever the queueing.
    let late = ticket(g.enter_as(1, true, None).await.unwrap());
    line.push(late);
    let arrival = line.clone();
    let expected = expected_picks(7, line.clone());
    let mut admitted = Vec::new();
    while !line.is_empty() {
        g.leave(&holders.remove(0)).await.unwrap();
        let mut granted = Vec::new();
        for t in &line {
            if let TicketStatus::Granted(got) = g.status(t).await.unwrap() {
                granted.push((t.clone(), got.token));
            }
        }
        assert_eq!(granted.len(), 1, "one place freed, one admitted: {granted:?}");
        let stats = g.stats().await.unwrap();
        assert!(stats.used <= 2 && stats.holders <= 2, "{stats:?}");
        let (t, token) = granted.remove(0);
        line.retain(|x| *x != t);
        admitted.push(t);
        holders.push(token);
    }
    assert_eq!(admitted, expected, "the seed's picks");
    assert_ne!(admitted, arrival, "random, not in arrival order");
    assert_eq!(g.stats().await.unwrap().waiting, 0);
    // Back to first come, first served: the head goes first.
    g.set_queueing(Queueing::Fifo).await.unwrap();
    assert!(!g.stats().await.unwrap().random);
    let first = ticket(g.enter_as(1, true, None).await.unwrap());
    let second = ticket(g.enter_as(1, true, None).await.unwrap());
    g.leave(&holders.remove(0)).await.unwrap();
    assert!(matches!(
        g.status(&first).await.unwrap(),
        TicketStatus::Granted(_)
    ));
    assert_eq!(position(&g, &second).await, 1);
}

fn refused_none(r: tollgate::Result<Option<tollgate::Lease>>) {
    match r {
        Ok(None) => {}
        other => panic!("a gate waiting for its opening admitted someone: {other:?}"),
    }
}

async fn bad_notes_are_refused(ts: TestStore) {
    let g = Gate::new(&ts.store, "notes", Some(1), options(true)).unwrap();
    let long = "x".repeat(MAX_DOOR_NOTE + 1);
    for note in [long.as_str(), "a\nb", "\u{7}"] {
        let e = g.set_door(&closed(note, false)).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    }
    // Nothing was written: the gate has no state.
    assert_eq!(g.watch_state(0).await.unwrap().epoch, None);
    // The longest note, in any script, is kept as given.
    let most = "é".repeat(MAX_DOOR_NOTE / 2);
    g.set_door(&closed(&most, false)).await.unwrap();
    assert_eq!(g.stats().await.unwrap().door.note, most);
}

on_both_stores!(manual_clock:
    a_closed_door_refuses_newcomers_and_the_line_moves_on,
    every_fast_path_is_shut_too,
    sold_out_drops_the_line_in_the_same_step,
    closing_is_atomic_with_concurrent_joins,
    bad_notes_are_refused,
    a_timed_door_opens_and_closes_by_the_stores_clock,
    a_draw_orders_its_entrants_by_key_between_those_before_and_after,
    random_queueing_admits_everyone_in_the_seeds_order,
);

mod realtime {
    use super::*;

    on_both_stores!(realtime: a_pass_to_a_waiting_acquire_is_refused_by_a_closed_door);
}

fn durable_at(dir: &std::path::Path, clock: &ManualClock) -> Store {
    let memory = MemoryOptions {
        clock: Arc::new(clock.clone()),
        ..MemoryOptions::default()
    };
    let durable = DurableOptions {
        fsync: Fsync::Always,
        ..DurableOptions::new(dir)
    };
    Store::open_with(memory, durable).expect("open").0
}

/// The door comes back after a restart, replayed from the log, and from a
/// snapshot (a record of its own kind); a reopened door stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_durable_store_keeps_the_door_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = durable_at(dir.path(), &clock);
    let g = Gate::new(&store, "kept", Some(1), options(true)).unwrap();
    let holder = g.try_acquire(1).await.unwrap().expect("free");
    let waiter = ticket(g.enter_as(1, true, None).await.unwrap());
    assert_eq!(g.set_door(&closed("sold_out", true)).await.unwrap(), 1);
    let other = Gate::new(&store, "other", Some(1), options(true)).unwrap();
    other.set_door(&closed("closed", false)).await.unwrap();
    other.set_door(&open("")).await.unwrap();
    let before = g.stats().await.unwrap();
    store.close();
    drop((g, other, store));

    for round in ["log", "snapshot"] {
        let store = durable_at(dir.path(), &clock);
        let g = Gate::new(&store, "kept", Some(1), options(true)).unwrap();
        assert_eq!(
            g.stats().await.unwrap(),
            before,
            "after a restart from the {round}"
        );
        refused(g.try_acquire(1).await);
        assert_eq!(g.status(&waiter).await.unwrap(), TicketStatus::Gone);
        let other = Gate::new(&store, "other", Some(1), options(true)).unwrap();
        other
            .try_acquire(1)
            .await
            .unwrap()
            .expect("reopened")
            .release()
            .await
            .unwrap();
        if round == "log" {
            store.snapshot_now().expect("snapshot");
        }
        store.close();
    }
    drop(holder);
}

/// A draw under way comes back after a restart, from the log and from a
/// snapshot (`GATE_DRAW`), with every ticket's place; so does the record
/// of one that ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_durable_store_keeps_a_draw_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = durable_at(dir.path(), &clock);
    let g = Gate::new(&store, "drawn", Some(1), options(true)).unwrap();
    let opens = {
        use tollgate::Clock;
        clock.now_ms() + 10_000
    };
    let change = DoorChange {
        door: Door {
            opens_at_ms: Some(opens),
            ..Door::default()
        },
        ..DoorChange::default()
    };
    g.set_door(&change).await.unwrap();
    let mut drawn = Vec::new();
    for key in KEYS {
        drawn.push((key, ticket(g.enter_drawn(1, None, |_| key).await.unwrap())));
    }
    let after = ticket(g.enter_as(1, true, None).await.unwrap());
    drawn.sort();
    let order: Vec<String> = drawn.into_iter().map(|(_, t)| t).collect();
    store.close();
    drop((g, store));

    for round in ["log", "snapshot", "ended"] {
        let store = durable_at(dir.path(), &clock);
        let g = Gate::new(&store, "drawn", Some(1), options(true)).unwrap();
        if round == "ended" {
            // The opening came while the store was down: the first
            // operation after it ends the draw, and the record outlives
            // a restart too.
            assert_eq!(
                g.last_draw().await.unwrap().tickets,
                order,
                "after a restart from the {round}"
            );
            assert!(matches!(
                g.status(&order[0]).await.unwrap(),
                TicketStatus::Granted(_)
            ));
            store.snapshot_now().expect("snapshot");
            store.close();
            let store = durable_at(dir.path(), &clock);
            let g = Gate::new(&store, "drawn", Some(1), options(true)).unwrap();
            assert_eq!(
                g.last_draw().await.unwrap().tickets,
                order,
                "the record from a snapshot"
            );
            store.close();
            break;
        }
        for (i, t) in order.iter().enumerate() {
            assert_eq!(
                position(&g, t).await,
                i as u64 + 1,
                "after a restart from the {round}"
            );
        }
        assert_eq!(position(&g, &after).await, 7);
        if round == "log" {
            store.snapshot_now().expect("snapshot");
        } else {
            clock.advance(Duration::from_secs(11));
        }
        store.close();
    }
}

/// Random queueing's picks go on where they were after a restart, from
/// the log and from a snapshot (`GATE_MORE`): the same tickets are
/// admitted as without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_durable_store_keeps_random_queueings_picks_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = durable_at(dir.path(), &clock);
    let g = Gate::new(&store, "lottery", Some(1), options(true)).unwrap();
    let Entered::Granted(first) = g.enter_as(1, true, None).await.unwrap() else {
        panic!("a free gate")
    };
    let mut line: Vec<String> = Vec::new();
    for _ in 0..6 {
        line.push(ticket(g.enter_as(1, true, None).await.unwrap()));
    }
    g.set_queueing(Queueing::Random { seed: 99 }).await.unwrap();
    let expected = expected_picks(99, line.clone());
    let mut holder = first.token;
    store.close();
    drop((g, store));
    for (round, want) in ["log", "snapshot", "log after the snapshot"]
        .iter()
        .zip(&expected)
    {
        let store = durable_at(dir.path(), &clock);
        let g = Gate::new(&store, "lottery", Some(1), options(true)).unwrap();
        assert!(
            g.stats().await.unwrap().random,
            "after a restart from the {round}"
        );
        g.leave(&holder).await.unwrap();
        assert!(
            matches!(g.status(want).await.unwrap(), TicketStatus::Granted(_)),
            "the seed's pick after a restart from the {round}"
        );
        holder = want.clone();
        if *round == "log" {
            store.snapshot_now().expect("snapshot");
        }
        store.close();
    }
}
