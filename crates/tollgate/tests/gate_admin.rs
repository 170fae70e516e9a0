//! Conformance suite for a gate's admin view and actions: the holders'
//! handles, the head of the line, revoking a holder, removing a ticket
//! from the line and resetting the whole line, the same assertions on
//! every store.

mod support;

use std::time::Duration;

use support::TestStore;
use tollgate::{Entered, ErrorKind, Gate, GateOptions, Left, TicketStatus};

const LONG: Duration = Duration::from_secs(30);

fn gate(ts: &TestStore, capacity: u32) -> Gate {
    let o = GateOptions {
        ttl: LONG,
        heartbeat: LONG,
        auto_renew: false,
        fair: true,
        max_hold: None,
    };
    Gate::new(&ts.store, "g", Some(capacity), o).expect("valid gate")
}

fn ticket(e: Entered) -> String {
    match e {
        Entered::Queued { ticket, .. } => ticket,
        other => panic!("expected a ticket, got {other:?}"),
    }
}

async fn revoke_hands_the_permit_to_the_head_at_once(ts: TestStore) {
    let g = gate(&ts, 1);
    let lease = g.try_acquire(1).await.unwrap().expect("free");
    let old_fence = lease.fence();
    let waiter = ticket(g.enter_as(1, true, Some("next")).await.unwrap());
    let holders = g.holders(10).await.unwrap();
    assert_eq!(holders.len(), 1);
    let handle = holders[0].handle.clone();
    assert_eq!(handle.len(), 16);
    // Granted at once: its fence went out in the answer, not kept.
    assert_eq!(holders[0].fence, None);
    // The handle is not the token, nor any part of it.
    assert!(!lease.token().contains(&handle));

    assert_eq!(g.revoke(&handle).await.unwrap(), Left::Released);
    // The head of the line holds now, with a higher fence.
    match g.status(&waiter).await.unwrap() {
        TicketStatus::Granted(l) => assert!(l.fence > old_fence),
        other => panic!("expected the head granted, got {other:?}"),
    }
    let holders = g.holders(10).await.unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].label.as_deref(), Some("next"));
    assert!(holders[0].fence.is_some_and(|f| f > old_fence));
    assert_ne!(holders[0].handle, handle);
    // The revoked token is in the revocation log.
    let w = g.watch_state(0).await.unwrap();
    assert_eq!(w.revoked, [lease.token().to_owned()]);

    // The revoked lease is lost for its owner.
    let e = g.renew(lease.token(), LONG).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LeaseLost);
    let e = lease.extend(LONG).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LeaseLost);
    let e = lease.release().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LeaseLost);
    // Revoking it again finds nobody.
    assert_eq!(g.revoke(&handle).await.unwrap(), Left::Unknown);
}

async fn line_lists_the_head_and_removal_shifts_positions(ts: TestStore) {
    let g = gate(&ts, 2);
    let _holder = g.try_acquire(2).await.unwrap().expect("free");
    let a = ticket(g.enter_as(1, true, Some("a")).await.unwrap());
    let b = ticket(g.enter(2, true).await.unwrap());
    let c = ticket(g.enter_as(1, true, Some("c")).await.unwrap());
    let line = g.line(10).await.unwrap();
    let seen: Vec<(u64, u32, Option<&str>)> = line
        .iter()
        .map(|w| (w.position, w.permits, w.label.as_deref()))
        .collect();
    assert_eq!(seen, [(1, 1, Some("a")), (2, 2, None), (3, 1, Some("c"))]);
    assert!(line[0].number < line[1].number && line[1].number < line[2].number);
    assert_eq!(g.line(2).await.unwrap().len(), 2);

    // Removing the middle one moves the last one up.
    assert_eq!(g.remove_waiter(line[1].number).await.unwrap(), Left::Cancelled);
    assert!(g.status(&b).await.unwrap_err().is_removed());
    match g.status(&c).await.unwrap() {
        TicketStatus::Queued(p) => assert_eq!((p.position, p.waiting), (2, 2)),
        other => panic!("expected c queued, got {other:?}"),
    }
    let numbers: Vec<u64> = g.line(10).await.unwrap().iter().map(|w| w.number).collect();
    assert_eq!(numbers, [line[0].number, line[2].number]);
    // Again: nothing by that number; a holder's number is no ticket.
    assert_eq!(g.remove_waiter(line[1].number).await.unwrap(), Left::Unknown);
    assert_eq!(
        g.remove_waiter(line[2].number + 100).await.unwrap(),
        Left::Unknown
    );
    assert!(matches!(g.status(&a).await.unwrap(), TicketStatus::Queued(_)));
}

async fn removing_the_head_admits_who_fits(ts: TestStore) {
    let g = gate(&ts, 2);
    let _holder = g.try_acquire(1).await.unwrap().expect("free");
    let big = ticket(g.enter(2, true).await.unwrap());
    let small = ticket(g.enter(1, true).await.unwrap());
    let head = g.line(1).await.unwrap()[0].number;
    assert_eq!(g.remove_waiter(head).await.unwrap(), Left::Cancelled);
    assert!(g.status(&big).await.unwrap_err().is_removed());
    assert!(matches!(
        g.status(&small).await.unwrap(),
        TicketStatus::Granted(_)
    ));
    assert!(g.line(10).await.unwrap().is_empty());
}

/// A removed ticket's owner is told so (not "unknown", which a waiter
/// answers by queueing again), for an hour; a ticket that left by itself
/// stays plainly gone.
async fn a_removed_ticket_is_told_it_was_removed(ts: TestStore) {
    let g = gate(&ts, 1);
    let _holder = g.try_acquire(1).await.unwrap().expect("free");
    let removed = ticket(g.enter(1, true).await.unwrap());
    let left = ticket(g.enter(1, true).await.unwrap());
    let number = g.line(1).await.unwrap()[0].number;
    assert_eq!(g.remove_waiter(number).await.unwrap(), Left::Cancelled);
    assert_eq!(g.leave(&left).await.unwrap(), Left::Cancelled);
    let e = g.status(&removed).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Removed);
    assert!(e.is_removed() && !e.is_lease_lost(), "{e}");
    // Asked again (a long-poll too): still removed, never back in line.
    let e = g
        .wait_status(&removed, Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(e.is_removed(), "{e}");
    assert!(matches!(g.status(&left).await.unwrap(), TicketStatus::Gone));
    assert!(g.line(10).await.unwrap().is_empty());
    // The record expires: an hour later the ticket is only gone.
    if ts.clock.is_some() {
        ts.advance(Duration::from_secs(3600)).await;
        assert!(matches!(g.status(&removed).await.unwrap(), TicketStatus::Gone));
    }
}

/// A waiting acquire whose ticket an admin removes ends with
/// `ErrorKind::Removed` and does not queue again.
async fn a_removed_acquire_stops(ts: TestStore) {
    let g = gate(&ts, 1);
    let holder = g.try_acquire(1).await.unwrap().expect("free");
    let waiter = tokio::spawn({
        let g = g.clone();
        async move { g.acquire(1, LONG).await }
    });
    let number = loop {
        if let Some(w) = g.line(1).await.unwrap().first() {
            break w.number;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(g.remove_waiter(number).await.unwrap(), Left::Cancelled);
    let out = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the removed acquire ends within its recheck")
        .unwrap();
    match out {
        Err(e) => assert_eq!(e.kind(), ErrorKind::Removed, "{e}"),
        Ok(lease) => panic!("a removed waiter got {lease:?}"),
    }
    assert!(g.line(10).await.unwrap().is_empty(), "it queued again");
    holder.release().await.unwrap();
}

/// The gate remembers the latest 1,000 removals (REMOVED_MAX): the oldest
/// beyond that is only gone.
async fn removals_are_remembered_up_to_a_bound(ts: TestStore) {
    let g = gate(&ts, 1);
    let _holder = g.try_acquire(1).await.unwrap().expect("free");
    let mut tickets = Vec::new();
    for _ in 0..1001 {
        tickets.push(ticket(g.enter(1, true).await.unwrap()));
    }
    // The first removal a moment before the rest, so it is the oldest.
    let head = g.line(1).await.unwrap()[0].number;
    assert_eq!(g.remove_waiter(head).await.unwrap(), Left::Cancelled);
    ts.advance(Duration::from_millis(2)).await;
    for _ in 0..2 {
        for w in g.line(1000).await.unwrap() {
            assert_eq!(g.remove_waiter(w.number).await.unwrap(), Left::Cancelled);
        }
    }
    assert!(matches!(g.status(&tickets[0]).await.unwrap(), TicketStatus::Gone));
    for t in &tickets[1..] {
        assert!(g.status(t).await.unwrap_err().is_removed());
    }
}

async fn bad_handles_are_refused_or_unknown(ts: TestStore) {
    let g = gate(&ts, 1);
    let _lease = g.try_acquire(1).await.unwrap().expect("free");
    for bad in ["", "zz", "0123456789ABCDEF", "0123456789abcdef0"] {
        let e = g.revoke(bad).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad:?}");
    }
    assert_eq!(g.revoke("0123456789abcdef").await.unwrap(), Left::Unknown);
    assert_eq!(
        g.remove_waiter(0).await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(g.remove_waiter(7).await.unwrap(), Left::Unknown);
    for bad in [0, tollgate::MAX_LINE_LIMIT + 1] {
        assert_eq!(g.line(bad).await.unwrap_err().kind(), ErrorKind::InvalidInput);
    }
    assert_eq!(g.stats().await.unwrap().holders, 1);
    // A gate with no state answers empty and keeps none.
    let none = Gate::new(&ts.store, "none", None, GateOptions::default()).unwrap();
    assert!(none.line(5).await.unwrap().is_empty());
    assert_eq!(none.revoke("0123456789abcdef").await.unwrap(), Left::Unknown);
}

async fn revoking_many_permits_and_a_handed_lease(ts: TestStore) {
    let g = gate(&ts, 2);
    let big = g.try_acquire(2).await.unwrap().expect("free");
    let b = ticket(g.enter_as(1, true, Some("b")).await.unwrap());
    let c = ticket(g.enter_as(1, true, Some("c")).await.unwrap());
    let d = ticket(g.enter_as(1, true, Some("d")).await.unwrap());
    let handle = g.holders(10).await.unwrap()[0].handle.clone();
    // Two permits freed: both b and c are handed a lease in the same step.
    assert_eq!(g.revoke(&handle).await.unwrap(), Left::Released);
    let s = g.stats().await.unwrap();
    assert_eq!((s.holders, s.used, s.waiting), (2, 2, 1));
    assert_eq!(g.line(10).await.unwrap()[0].label.as_deref(), Some("d"));
    // c's lease, handed but not picked up yet, is revoked too: d gets it.
    let held = g.holders(10).await.unwrap();
    let c_handle = held
        .iter()
        .find(|h| h.label.as_deref() == Some("c"))
        .unwrap()
        .handle
        .clone();
    assert_eq!(g.revoke(&c_handle).await.unwrap(), Left::Released);
    assert!(matches!(g.status(&c).await.unwrap(), TicketStatus::Gone));
    assert!(matches!(g.status(&b).await.unwrap(), TicketStatus::Granted(_)));
    assert!(matches!(g.status(&d).await.unwrap(), TicketStatus::Granted(_)));
    assert!(big.is_lost() || big.extend(LONG).await.is_err());
}

async fn clear_line_drops_every_waiter_and_no_holder(ts: TestStore) {
    let g = gate(&ts, 2);
    assert_eq!(g.stats().await.unwrap().line_reset_ms, None);
    let a = g.try_acquire(1).await.unwrap().expect("free");
    let b = g.try_acquire(1).await.unwrap().expect("free");
    // Labels and several permits leave nothing behind either.
    let mut waiting = vec![ticket(g.enter_as(2, true, Some("big")).await.unwrap())];
    for i in 0..40 {
        let label = format!("w{i}");
        waiting.push(ticket(g.enter_as(1, true, Some(&label)).await.unwrap()));
    }
    assert_eq!(g.stats().await.unwrap().waiting, 41);
    assert_eq!(g.clear_line().await.unwrap(), 41);
    let s = g.stats().await.unwrap();
    assert_eq!((s.holders, s.used, s.waiting), (2, 2, 0));
    assert!(s.line_reset_ms.is_some_and(|at| at > 0));
    for t in &waiting {
        assert!(matches!(g.status(t).await.unwrap(), TicketStatus::Gone));
        assert_eq!(g.leave(t).await.unwrap(), Left::Unknown);
    }
    assert!(g.line(10).await.unwrap().is_empty());
    // Holders keep their leases; a newcomer queues at the head of a
    // fresh line and is admitted when a holder leaves.
    a.extend(LONG).await.unwrap();
    let late = ticket(g.enter_as(1, true, Some("late")).await.unwrap());
    match g.status(&late).await.unwrap() {
        TicketStatus::Queued(p) => assert_eq!((p.position, p.waiting), (1, 1)),
        other => panic!("expected the newcomer queued, got {other:?}"),
    }
    assert_eq!(g.line(10).await.unwrap()[0].label.as_deref(), Some("late"));
    b.release().await.unwrap();
    assert!(matches!(g.status(&late).await.unwrap(), TicketStatus::Granted(_)));
    // An empty line resets to nothing, and the reset time moves on.
    let before = g.stats().await.unwrap().line_reset_ms.unwrap();
    assert_eq!(g.clear_line().await.unwrap(), 0);
    assert!(g.stats().await.unwrap().line_reset_ms.unwrap() >= before);
    a.release().await.unwrap();
}

async fn clear_line_is_atomic_with_concurrent_joins(ts: TestStore) {
    let g = gate(&ts, 1);
    let _holder = g.try_acquire(1).await.unwrap().expect("free");
    // Joins race a reset: each ticket is either dropped whole (gone) or
    // still in line, and the count dropped plus those left is everyone.
    let joins = (0..60).map(|_| {
        let g = g.clone();
        tokio::spawn(async move { ticket(g.enter(1, true).await.unwrap()) })
    });
    let joins: Vec<_> = joins.collect();
    let dropped = g.clear_line().await.unwrap();
    let mut tickets = Vec::new();
    for j in joins {
        tickets.push(j.await.unwrap());
    }
    let mut queued = 0;
    for t in &tickets {
        match g.status(t).await.unwrap() {
            TicketStatus::Queued(_) => queued += 1,
            TicketStatus::Gone => {}
            other => panic!("nobody is admitted past capacity: {other:?}"),
        }
    }
    assert_eq!(dropped + queued, tickets.len() as u64);
    let s = g.stats().await.unwrap();
    assert_eq!((s.waiting, s.holders), (queued, 1));
    assert_eq!(g.line(100).await.unwrap().len() as u64, queued);
}

async fn clear_line_on_a_gate_without_state(ts: TestStore) {
    let none = Gate::new(&ts.store, "none", None, GateOptions::default()).unwrap();
    assert_eq!(none.clear_line().await.unwrap(), 0);
    assert!(none.stats().await.unwrap().line_reset_ms.is_some());
}

on_both_stores!(manual_clock:
    clear_line_drops_every_waiter_and_no_holder,
    clear_line_is_atomic_with_concurrent_joins,
    clear_line_on_a_gate_without_state,
    revoking_many_permits_and_a_handed_lease,
    revoke_hands_the_permit_to_the_head_at_once,
    line_lists_the_head_and_removal_shifts_positions,
    removing_the_head_admits_who_fits,
    bad_handles_are_refused_or_unknown,
    a_removed_ticket_is_told_it_was_removed,
    a_removed_acquire_stops,
    removals_are_remembered_up_to_a_bound,
);
