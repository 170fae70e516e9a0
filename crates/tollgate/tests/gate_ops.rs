//! Conformance suite: every Gate operation, the same assertions on the memory
//! store and on a real redis-server.

mod support;

use std::time::Duration;

use support::TestStore;
use tollgate::{Entered, ErrorKind, Gate, GateOptions, Granted, Left, Place, TicketStatus};

const LONG: Duration = Duration::from_secs(30);
const SHORT: Duration = Duration::from_millis(300);
const PAST_SHORT: Duration = Duration::from_millis(450);

fn opts(ttl: Duration, heartbeat: Duration) -> GateOptions {
    GateOptions {
        ttl,
        heartbeat,
        auto_renew: false,
        fair: true,
        max_hold: None,
    }
}

fn gate(ts: &TestStore, capacity: Option<u32>, o: GateOptions) -> Gate {
    Gate::new(&ts.store, "g", capacity, o).expect("valid gate")
}

fn gate_named(ts: &TestStore, name: &str) -> Gate {
    Gate::new(&ts.store, name, Some(1), opts(LONG, LONG)).expect("valid gate")
}

fn granted(e: Entered) -> Granted {
    match e {
        Entered::Granted(g) => g,
        other => panic!("expected a grant, got {other:?}"),
    }
}

fn queued(e: Entered) -> (String, Place) {
    match e {
        Entered::Queued { ticket, place } => (ticket, place),
        other => panic!("expected a ticket, got {other:?}"),
    }
}

async fn status_granted(g: &Gate, ticket: &str) -> Granted {
    match g.status(ticket).await.expect("status") {
        TicketStatus::Granted(l) => l,
        other => panic!("expected {ticket} granted, got {other:?}"),
    }
}

/// A place as (position, waiting); the estimated wait is checked apart.
fn pw(p: Place) -> (u64, u64) {
    (p.position, p.waiting)
}

async fn status_place(g: &Gate, ticket: &str) -> Place {
    match g.status(ticket).await.expect("status") {
        TicketStatus::Queued(p) => p,
        other => panic!("expected {ticket} queued, got {other:?}"),
    }
}

async fn grants_until_capacity_then_queues(ts: TestStore) {
    let g = gate(&ts, Some(2), opts(LONG, LONG));
    let a = granted(g.enter(1, true).await.unwrap());
    let b = granted(g.enter(1, true).await.unwrap());
    assert!(b.fence > a.fence);
    assert_eq!(a.ttl, LONG);
    let (_, p) = queued(g.enter(1, true).await.unwrap());
    assert_eq!(pw(p), (1, 1));
    let (_, p) = queued(g.enter(1, true).await.unwrap());
    assert_eq!(pw(p), (2, 2));
    match g.enter(1, false).await.unwrap() {
        Entered::Busy(o) => {
            assert_eq!((o.used, o.capacity, o.waiting), (2, 2, 2));
        }
        other => panic!("expected busy, got {other:?}"),
    }
    let s = g.stats().await.unwrap();
    assert_eq!(
        (s.capacity, s.used, s.holders, s.waiting, s.grants),
        (Some(2), 2, 2, 2, 2)
    );
    assert_eq!(s.fence, b.fence);
}

async fn release_hands_off_to_head_in_order(ts: TestStore) {
    let g = gate(&ts, Some(1), opts(LONG, LONG));
    let a = granted(g.enter(1, true).await.unwrap());
    let (b, _) = queued(g.enter(1, true).await.unwrap());
    let (c, _) = queued(g.enter(1, true).await.unwrap());
    assert_eq!(pw(status_place(&g, &c).await), (2, 2));

    assert_eq!(g.leave(&a.token).await.unwrap(), Left::Released);
    let lb = status_granted(&g, &b).await;
    assert!(
        lb.fence > a.fence,
        "hand-off fence {} after {}",
        lb.fence,
        a.fence
    );
    assert_eq!(lb.token, b);
    assert_eq!(lb.ttl, LONG, "a picked-up hand-off runs for the full TTL");
    // Asking again is harmless and reports the same lease.
    assert_eq!(status_granted(&g, &b).await.fence, lb.fence);
    assert_eq!(pw(status_place(&g, &c).await), (1, 1));

    // A newcomer queues behind c even though it asked after b's release.
    let (d, _) = queued(g.enter(1, true).await.unwrap());
    assert_eq!(g.leave(&b).await.unwrap(), Left::Released);
    let lc = status_granted(&g, &c).await;
    assert!(lc.fence > lb.fence);
    assert_eq!(pw(status_place(&g, &d).await), (1, 1));
    assert_eq!(g.leave(&a.token).await.unwrap(), Left::Unknown, "released twice");
}

async fn counts_stay_exact_across_quick_and_queued_paths(ts: TestStore) {
    // Idle-gate grants and releases without a line take a shorter path on
    // Redis; what they leave behind must be exactly what the general path
    // would, or a later waiter is kept out by a phantom holder.
    let g = gate(&ts, Some(1), opts(LONG, LONG));
    for _ in 0..3 {
        let a = granted(g.enter(1, true).await.unwrap());
        assert_eq!(g.stats().await.unwrap().holders, 1);
        assert_eq!(g.leave(&a.token).await.unwrap(), Left::Released);
        assert_eq!(g.stats().await.unwrap().holders, 0);
    }
    let b = granted(g.enter(1, true).await.unwrap());
    let (c, _) = queued(g.enter(1, true).await.unwrap());
    g.leave(&b.token).await.unwrap();
    let lc = status_granted(&g, &c).await;
    assert!(lc.fence > b.fence);
    let s = g.stats().await.unwrap();
    assert_eq!((s.holders, s.used, s.waiting, s.grants), (1, 1, 0, 5));
    g.leave(&c).await.unwrap();
    let two = Gate::new(&ts.store, "g2", Some(2), opts(LONG, LONG)).unwrap();
    let x = granted(two.enter(1, true).await.unwrap());
    let y = granted(two.enter(1, true).await.unwrap());
    two.leave(&x.token).await.unwrap();
    assert_eq!(two.stats().await.unwrap().holders, 1);
    let z = granted(two.enter(1, false).await.unwrap());
    assert!(matches!(two.enter(1, false).await.unwrap(), Entered::Busy(_)));
    two.leave(&y.token).await.unwrap();
    two.leave(&z.token).await.unwrap();
    assert_eq!(two.stats().await.unwrap().used, 0);
}

async fn newcomer_never_overtakes_a_large_head(ts: TestStore) {
    let g = gate(&ts, Some(3), opts(LONG, LONG));
    let a = granted(g.enter(2, true).await.unwrap());
    // 1 permit is free, but the head wants 3: a 1-permit newcomer must wait.
    let (big, p) = queued(g.enter(3, true).await.unwrap());
    assert_eq!(p.position, 1);
    let (small, p) = queued(g.enter(1, true).await.unwrap());
    assert_eq!(p.position, 2);
    assert!(matches!(g.enter(1, false).await.unwrap(), Entered::Busy(_)));

    g.leave(&a.token).await.unwrap();
    let lbig = status_granted(&g, &big).await;
    assert_eq!(g.stats().await.unwrap().used, 3);
    assert_eq!(status_place(&g, &small).await.position, 1);
    g.leave(&lbig.token).await.unwrap();
    status_granted(&g, &small).await;
    assert_eq!(g.stats().await.unwrap().used, 1);
}

async fn expired_lease_frees_its_slot_and_cannot_renew(ts: TestStore) {
    let g = gate(&ts, Some(1), opts(SHORT, LONG));
    let a = granted(g.enter(1, true).await.unwrap());
    assert!(matches!(g.enter(1, false).await.unwrap(), Entered::Busy(_)));
    ts.advance(PAST_SHORT).await;
    let b = granted(g.enter(1, false).await.unwrap());
    assert!(b.fence > a.fence);
    let e = g.renew(&a.token, SHORT).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LeaseLost);
    assert_eq!(g.leave(&a.token).await.unwrap(), Left::Unknown);
    let s = g.stats().await.unwrap();
    assert_eq!((s.holders, s.expiries, s.grants), (1, 1, 2));
}

async fn renewal_extends_a_held_lease(ts: TestStore) {
    let g = gate(&ts, Some(1), opts(SHORT, LONG));
    let a = granted(g.enter(1, true).await.unwrap());
    for _ in 0..3 {
        ts.advance(Duration::from_millis(200)).await;
        assert_eq!(g.renew(&a.token, SHORT).await.unwrap(), SHORT);
    }
    assert_eq!(g.stats().await.unwrap().holders, 1);
    assert!(matches!(g.enter(1, false).await.unwrap(), Entered::Busy(_)));
    assert_eq!(g.leave(&a.token).await.unwrap(), Left::Released);
}

/// On Redis, a free gate of capacity 1 with a grant behind it gives a
/// one-permit request a lone lease (its own key, lone_absorb.lua): every promise
/// of an inline one must hold for it too. Renewed, seen by another
/// caller, expired, released late: the same answers on both stores.
async fn a_lone_lease_keeps_every_promise(ts: TestStore) {
    // A gate's first grant, lone after set_capacity, still takes its
    // fence from the clock (as an inline first grant on another gate).
    let g = gate(&ts, Some(1), opts(SHORT, LONG));
    g.set_capacity(1).await.unwrap();
    let first = granted(g.enter(1, true).await.unwrap());
    let other = gate_named(&ts, "other");
    let clocked = granted(other.enter(1, true).await.unwrap());
    assert!(
        first.fence.abs_diff(clocked.fence) < 5_000_000,
        "{} {}",
        first.fence,
        clocked.fence
    );
    assert_eq!(g.stats().await.unwrap().grants, 1);
    assert_eq!(g.leave(&first.token).await.unwrap(), Left::Released);
    let a = granted(g.enter(1, true).await.unwrap());
    assert!(a.fence > first.fence);
    ts.advance(Duration::from_millis(200)).await;
    assert_eq!(g.renew(&a.token, SHORT).await.unwrap(), SHORT);
    assert_eq!(g.leave(&a.token).await.unwrap(), Left::Released);
    assert_eq!(g.leave(&a.token).await.unwrap(), Left::Unknown);

    // Held alone, then seen by others: busy, counted, in the holders' list.
    let b = granted(g.enter(1, true).await.unwrap());
    assert!(b.fence > a.fence);
    assert!(matches!(g.enter(1, false).await.unwrap(), Entered::Busy(_)));
    let s = g.stats().await.unwrap();
    assert_eq!((s.used, s.holders, s.grants), (1, 1, 3));
    assert_eq!(g.holders(10).await.unwrap().len(), 1);
    assert_eq!(g.leave(&b.token).await.unwrap(), Left::Released);

    // Ended without a release: the slot is free, the end is counted, and
    // the late holder can neither renew nor release.
    let c = granted(g.enter(1, true).await.unwrap());
    ts.advance(PAST_SHORT).await;
    let e = g.renew(&c.token, SHORT).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LeaseLost);
    let d = granted(g.enter(1, false).await.unwrap());
    assert!(d.fence > c.fence);
    assert_eq!(g.leave(&c.token).await.unwrap(), Left::Unknown);
    let s = g.stats().await.unwrap();
    assert_eq!((s.holders, s.expiries, s.grants), (1, 1, 5));

    // A lone lease with a line behind it hands off in order.
    assert_eq!(g.leave(&d.token).await.unwrap(), Left::Released);
    let h = granted(g.enter(1, true).await.unwrap());
    let (w, p) = queued(g.enter(1, true).await.unwrap());
    assert_eq!(p.position, 1);
    assert_eq!(g.leave(&h.token).await.unwrap(), Left::Released);
    assert!(status_granted(&g, &w).await.fence > h.fence);
}

async fn a_picked_up_hand_off_ends_on_its_own_ttl(ts: TestStore) {
    // The hand-off lives until the waiter's (long) heartbeat deadline; once
    // picked up it runs for the (short) TTL, and must end then, not later.
    let long = gate(&ts, Some(1), opts(LONG, LONG));
    let g = gate(&ts, Some(1), opts(SHORT, LONG));
    let a = granted(long.enter(1, true).await.unwrap());
    let (b, _) = queued(g.enter(1, true).await.unwrap());
    g.leave(&a.token).await.unwrap();
    assert_eq!(status_granted(&g, &b).await.ttl, SHORT);
    ts.advance(PAST_SHORT).await;
    let c = granted(g.enter(1, false).await.unwrap());
    assert_eq!(g.status(&b).await.unwrap(), TicketStatus::Gone);
    assert!(c.fence > a.fence);
}

async fn renewing_to_a_shorter_ttl_takes_effect(ts: TestStore) {
    let g = gate(&ts, Some(1), opts(LONG, LONG));
    let a = granted(g.enter(1, true).await.unwrap());
    assert_eq!(g.renew(&a.token, SHORT).await.unwrap(), SHORT);
    ts.advance(PAST_SHORT).await;
    granted(g.enter(1, false).await.unwrap());
    assert_eq!(g.stats().await.unwrap().expiries, 1);
}

async fn estimated_wait_follows_the_lines_pace(ts: TestStore) {
    let g = gate(&ts, Some(1), opts(LONG, LONG));
    let a = granted(g.enter(1, true).await.unwrap());
    let (b, p) = queued(g.enter(1, true).await.unwrap());
    assert_eq!(p.eta, None, "the line has not moved yet");
    // The line formed, and moved 200 ms later: its pace is ~200 ms. b's
    // release 600 ms after that, with nobody in line, does not count (as
    // a departure it would make the pace ~600 ms).
    ts.advance(Duration::from_millis(200)).await;
    g.leave(&a.token).await.unwrap();
    let lb = status_granted(&g, &b).await;
    ts.advance(Duration::from_millis(600)).await;
    g.leave(&lb.token).await.unwrap();
    let c = granted(g.enter(1, true).await.unwrap());
    let (_, first) = queued(g.enter(1, true).await.unwrap());
    let (second, p2) = queued(g.enter(1, true).await.unwrap());
    let e1 = first.eta.expect("measured");
    assert!(
        e1 >= Duration::from_millis(150) && e1 <= Duration::from_millis(400),
        "{e1:?}"
    );
    let e2 = p2.eta.expect("measured");
    assert_eq!(e2.as_millis(), 2 * e1.as_millis(), "two grants away");
    assert_eq!(status_place(&g, &second).await.eta, Some(e2));
    g.leave(&c.token).await.unwrap();

    // Releases with nobody in line do not count (an idle gate's gaps say
    // nothing of a line's pace: on Redis a Lock's release then writes
    // nothing for it), and a line that forms starts the clock afresh:
    // leases held 400 ms with no line, then a line that moves after
    // 100 ms, then 1.5 s idle and a line that moves after 100 ms again.
    let quick = Gate::new(&ts.store, "quick", Some(1), opts(LONG, LONG)).unwrap();
    for _ in 0..2 {
        let l = granted(quick.enter(1, true).await.unwrap());
        ts.advance(Duration::from_millis(400)).await;
        quick.leave(&l.token).await.unwrap();
    }
    let mut holder = granted(quick.enter(1, true).await.unwrap()).token;
    for round in 0..2 {
        let (w, p) = queued(quick.enter(1, true).await.unwrap());
        if round == 0 {
            assert_eq!(p.eta, None, "no grant from a line yet");
        }
        ts.advance(Duration::from_millis(100)).await;
        quick.leave(&holder).await.unwrap();
        holder = status_granted(&quick, &w).await.token;
        let (next, p) = queued(quick.enter(1, true).await.unwrap());
        let e = p.eta.expect("measured");
        assert!(
            e >= Duration::from_millis(80) && e <= Duration::from_millis(300),
            "round {round}: {e:?}"
        );
        // The one in line leaves; the holder holds on, with no line.
        assert_eq!(quick.leave(&next).await.unwrap(), Left::Cancelled);
        ts.advance(Duration::from_millis(1500)).await;
    }
}

async fn labels_follow_the_lease(ts: TestStore) {
    let g = gate(&ts, Some(1), opts(LONG, LONG));
    let labels = |v: Vec<tollgate::Holding>| v.into_iter().map(|h| h.label).collect::<Vec<_>>();
    let a = granted(g.enter_as(1, true, Some("alice")).await.unwrap());
    let (b, _) = queued(g.enter_as(1, true, Some("bob")).await.unwrap());
    let (c, _) = queued(g.enter(1, true).await.unwrap());
    assert_eq!(labels(g.holders(10).await.unwrap()), [Some("alice".to_owned())]);
    let h = g.holders(10).await.unwrap();
    assert!(h[0].ttl > Duration::from_secs(25) && h[0].ttl <= LONG, "{h:?}");
    g.leave(&a.token).await.unwrap();
    // Handed over (not yet picked up): the waiter's label comes along.
    assert_eq!(labels(g.holders(10).await.unwrap()), [Some("bob".to_owned())]);
    status_granted(&g, &b).await;
    g.leave(&b).await.unwrap();
    status_granted(&g, &c).await;
    assert_eq!(labels(g.holders(10).await.unwrap()), [None]);
    g.leave(&c).await.unwrap();
    assert!(g.holders(10).await.unwrap().is_empty());
    // A cancelled ticket's label goes with it.
    let d = granted(g.enter(1, true).await.unwrap());
    let (e, _) = queued(g.enter_as(1, true, Some("eve")).await.unwrap());
    assert_eq!(g.leave(&e).await.unwrap(), Left::Cancelled);
    g.leave(&d.token).await.unwrap();
    let f = granted(g.enter(1, true).await.unwrap());
    assert_eq!(labels(g.holders(10).await.unwrap()), [None]);
    g.leave(&f.token).await.unwrap();
    for bad in ["", "ü", "tab\there", &"x".repeat(65)] {
        assert!(
            g.enter_as(1, true, Some(bad))
                .await
                .unwrap_err()
                .is_invalid_input(),
            "{bad:?}"
        );
    }
    assert!(g.holders(0).await.unwrap_err().is_invalid_input());
}

async fn silent_waiter_leaves_the_line(ts: TestStore) {
    let g = gate(&ts, Some(1), opts(LONG, SHORT));
    let _a = granted(g.enter(1, true).await.unwrap());
    let (b, _) = queued(g.enter(1, true).await.unwrap());
    let (c, _) = queued(g.enter(1, true).await.unwrap());
    ts.advance(Duration::from_millis(200)).await;
    assert_eq!(status_place(&g, &c).await.position, 2); // c keeps asking, b does not
    ts.advance(Duration::from_millis(200)).await;
    assert_eq!(pw(status_place(&g, &c).await), (1, 1));
    assert_eq!(g.status(&b).await.unwrap(), TicketStatus::Gone);
}

async fn hand_off_to_vanished_waiter_comes_back_within_its_grace(ts: TestStore) {
    let g = gate(&ts, Some(1), opts(LONG, SHORT));
    let a = granted(g.enter(1, true).await.unwrap());
    let (b, _) = queued(g.enter(1, true).await.unwrap());
    g.leave(&a.token).await.unwrap();
    // b never asks: its hand-off lives only until b's heartbeat deadline,
    // not for the 30 s TTL.
    assert!(matches!(g.enter(1, false).await.unwrap(), Entered::Busy(_)));
    ts.advance(PAST_SHORT).await;
    let c = granted(g.enter(1, false).await.unwrap());
    assert_eq!(c.ttl, LONG);
    assert_eq!(g.status(&b).await.unwrap(), TicketStatus::Gone);
    assert_eq!(g.stats().await.unwrap().expiries, 1);
}

async fn cancel_leaves_the_line(ts: TestStore) {
    let g = gate(&ts, Some(1), opts(LONG, LONG));
    let a = granted(g.enter(1, true).await.unwrap());
    let (b, _) = queued(g.enter(1, true).await.unwrap());
    let (c, _) = queued(g.enter(1, true).await.unwrap());
    assert_eq!(g.leave(&b).await.unwrap(), Left::Cancelled);
    assert_eq!(g.status(&b).await.unwrap(), TicketStatus::Gone);
    assert_eq!(pw(status_place(&g, &c).await), (1, 1));
    g.leave(&a.token).await.unwrap();
    status_granted(&g, &c).await;
    // Cancelling a ticket that was just handed a lease releases it.
    let (d, _) = queued(g.enter(1, true).await.unwrap());
    let (e, _) = queued(g.enter(1, true).await.unwrap());
    g.leave(&c).await.unwrap();
    assert_eq!(g.leave(&d).await.unwrap(), Left::Released);
    status_granted(&g, &e).await;
}

async fn capacity_changes_at_runtime(ts: TestStore) {
    let g = gate(&ts, Some(2), opts(LONG, LONG));
    let a = granted(g.enter(1, true).await.unwrap());
    let b = granted(g.enter(1, true).await.unwrap());
    let (c, _) = queued(g.enter(1, true).await.unwrap());
    let any = gate(&ts, None, opts(LONG, LONG));
    any.set_capacity(1).await.unwrap();
    let s = g.stats().await.unwrap();
    assert_eq!(
        (s.capacity, s.holders, s.used),
        (Some(1), 2, 2),
        "lowering never evicts"
    );
    any.leave(&a.token).await.unwrap();
    assert_eq!(
        status_place(&any, &c).await.position,
        1,
        "still over the new capacity"
    );
    any.leave(&b.token).await.unwrap();
    status_granted(&any, &c).await;

    let (d, _) = queued(any.enter(1, true).await.unwrap());
    let (e, _) = queued(any.enter(1, true).await.unwrap());
    any.set_capacity(3).await.unwrap();
    status_granted(&any, &d).await;
    status_granted(&any, &e).await;
    // The old handle's capacity no longer matches the stored one.
    assert_eq!(
        g.enter(1, true).await.unwrap_err().kind(),
        ErrorKind::CapacityConflict
    );
}

async fn capacity_is_stored_with_the_gate(ts: TestStore) {
    let none = gate(&ts, None, opts(LONG, LONG));
    assert_eq!(
        none.enter(1, true).await.unwrap_err().kind(),
        ErrorKind::NoCapacity
    );
    assert_eq!(none.stats().await.unwrap().capacity, None);
    let two = gate(&ts, Some(2), opts(LONG, LONG));
    granted(two.enter(1, true).await.unwrap());
    let three = gate(&ts, Some(3), opts(LONG, LONG));
    let e = three.enter(1, true).await.unwrap_err();
    assert!(e.is_conflict());
    assert!(
        e.to_string().contains('2'),
        "message names the stored capacity: {e}"
    );
    granted(none.enter(1, true).await.unwrap());
    assert_eq!(none.stats().await.unwrap().used, 2);
    // More permits than the stored capacity.
    assert!(none.enter(3, true).await.unwrap_err().is_invalid_input());
}

async fn lowering_capacity_below_a_waiting_request_drops_it(ts: TestStore) {
    let g = gate(&ts, None, opts(LONG, LONG));
    g.set_capacity(3).await.unwrap();
    let a = granted(g.enter(2, true).await.unwrap());
    let (big, _) = queued(g.enter(3, true).await.unwrap());
    let (small, _) = queued(g.enter(1, true).await.unwrap());
    g.set_capacity(2).await.unwrap();
    assert_eq!(g.status(&big).await.unwrap(), TicketStatus::Gone);
    assert_eq!(status_place(&g, &small).await.position, 1);
    g.leave(&a.token).await.unwrap();
    status_granted(&g, &small).await;
}

async fn fences_strictly_increase(ts: TestStore) {
    let g = gate(&ts, Some(2), opts(SHORT, LONG));
    let mut last = 0;
    for round in 0..5 {
        let a = granted(g.enter(1, true).await.unwrap());
        let b = granted(g.enter(1, true).await.unwrap());
        let (c, _) = queued(g.enter(1, true).await.unwrap());
        assert!(a.fence > last && b.fence > a.fence, "round {round}");
        g.leave(&a.token).await.unwrap();
        let lc = status_granted(&g, &c).await;
        assert!(lc.fence > b.fence);
        g.leave(&b.token).await.unwrap();
        g.leave(&c).await.unwrap();
        last = lc.fence;
    }
    assert_eq!(g.stats().await.unwrap().fence, last);
}

async fn bad_input_is_a_typed_error(ts: TestStore) {
    let s = &ts.store;
    let o = GateOptions::default;
    for name in ["", "a b", "{x}", "ü", &"n".repeat(129)] {
        assert!(
            Gate::new(s, name, Some(1), o()).unwrap_err().is_invalid_input(),
            "{name:?}"
        );
    }
    assert!(Gate::new(s, "g", Some(0), o()).unwrap_err().is_invalid_input());
    assert!(Gate::new(s, "g", Some(tollgate::MAX_CAPACITY + 1), o()).is_err());
    for ttl in [
        Duration::ZERO,
        Duration::from_millis(5),
        Duration::from_secs(90_000),
    ] {
        let e = Gate::new(s, "g", Some(1), GateOptions { ttl, ..o() }).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{ttl:?}");
        assert!(e.to_string().contains("ttl"), "{e}");
    }
    let g = Gate::new(s, "g", Some(2), o()).unwrap();
    assert!(g.enter(0, true).await.unwrap_err().is_invalid_input());
    let e = g.enter(3, true).await.unwrap_err();
    assert!(
        e.is_invalid_input() && e.to_string().contains("capacity is 2"),
        "{e}"
    );
    assert!(g.status("").await.unwrap_err().is_invalid_input());
    assert!(g.status("not a token!").await.unwrap_err().is_invalid_input());
    assert!(g.leave(&"x".repeat(65)).await.unwrap_err().is_invalid_input());
    assert!(
        g.renew("abc", Duration::ZERO)
            .await
            .unwrap_err()
            .is_invalid_input()
    );
    assert!(g.set_capacity(0).await.unwrap_err().is_invalid_input());
    assert_eq!(g.status("unknownticket").await.unwrap(), TicketStatus::Gone);
}

/// Paused, nobody new is granted (a free permit stays free, newcomers
/// queue behind the line); resuming hands the free permits to the line.
async fn pausing_holds_admissions(ts: TestStore) {
    let g = gate(&ts, Some(1), opts(LONG, LONG));
    let a = granted(g.enter(1, true).await.unwrap());
    let (b, _) = queued(g.enter(1, true).await.unwrap());
    g.pause().await.unwrap();
    assert!(g.stats().await.unwrap().paused);
    assert_eq!(g.leave(&a.token).await.unwrap(), Left::Released);
    assert_eq!(pw(status_place(&g, &b).await), (1, 1));
    let (c, p) = queued(g.enter(1, true).await.unwrap());
    assert_eq!(pw(p), (2, 2));
    assert!(matches!(g.enter(1, false).await.unwrap(), Entered::Busy(_)));
    assert_eq!(g.stats().await.unwrap().used, 0);
    g.resume().await.unwrap();
    let s = g.stats().await.unwrap();
    assert!(!s.paused);
    assert_eq!((s.used, s.waiting), (1, 1));
    status_granted(&g, &b).await;
    assert_eq!(pw(status_place(&g, &c).await), (1, 1));
}

/// With an admission interval, at most one grant per interval even with
/// free capacity; waiters are admitted as time allows; removing the
/// interval admits the line at once.
async fn admission_interval_paces_grants(ts: TestStore) {
    let g = gate(&ts, Some(10), opts(LONG, LONG));
    g.set_admission_interval(Some(Duration::from_secs(1)))
        .await
        .unwrap();
    assert_eq!(
        g.stats().await.unwrap().admission_interval,
        Some(Duration::from_secs(1))
    );
    granted(g.enter(1, true).await.unwrap());
    let (b, _) = queued(g.enter(1, true).await.unwrap());
    let (c, _) = queued(g.enter(1, true).await.unwrap());
    let (d, _) = queued(g.enter(1, true).await.unwrap());
    assert_eq!(pw(status_place(&g, &b).await), (1, 3));
    ts.advance(Duration::from_millis(1100)).await;
    status_granted(&g, &b).await;
    assert_eq!(pw(status_place(&g, &c).await), (1, 2));
    ts.advance(Duration::from_millis(1100)).await;
    status_granted(&g, &c).await;
    g.set_admission_interval(None).await.unwrap();
    status_granted(&g, &d).await;
    let s = g.stats().await.unwrap();
    assert_eq!((s.used, s.waiting, s.admission_interval), (4, 0, None));
    assert!(g.set_admission_interval(Some(Duration::ZERO)).await.is_err());
}

/// A line longer than one sweep step (Redis scans stale tickets of a long
/// line in bounded steps): silent waiters still leave within a few
/// operations after their grace, and everyone behind them moves up.
async fn silent_waiters_leave_a_long_line(ts: TestStore) {
    // Timings leave room for a slow machine on Redis (real time): a live
    // ticket's last heartbeat is at least 1.6 s before its deadline at the
    // check; a silent one's deadline passed at least 0.1 s before.
    let g = gate(&ts, Some(1), opts(LONG, Duration::from_millis(3000)));
    granted(g.enter(1, true).await.unwrap());
    let mut tickets = Vec::new();
    for _ in 0..1000 {
        tickets.push(queued(g.enter(1, true).await.unwrap()).0);
    }
    ts.advance(Duration::from_millis(1500)).await;
    // The second half keeps asking; the first half has gone quiet.
    for t in &tickets[500..] {
        status_place(&g, t).await;
    }
    ts.advance(Duration::from_millis(1600)).await;
    let mut ops = 0;
    while g.stats().await.unwrap().waiting > 500 {
        ops += 1;
        assert!(ops <= 12, "stale tickets still in line after {ops} operations");
    }
    assert_eq!(g.stats().await.unwrap().waiting, 500);
    assert_eq!(pw(status_place(&g, &tickets[500]).await), (1, 500));
    assert_eq!(g.status(&tickets[0]).await.unwrap(), TicketStatus::Gone);
}

/// Positions stay exact however the line thins out (the embedded store
/// renumbers its line once departed slots outnumber the waiters).
async fn positions_stay_exact_as_the_line_thins(ts: TestStore) {
    let g = gate(&ts, Some(1), opts(LONG, LONG));
    granted(g.enter(1, true).await.unwrap());
    let mut tickets = Vec::new();
    for _ in 0..300 {
        tickets.push(queued(g.enter(1, true).await.unwrap()).0);
    }
    // Two of every three leave, from anywhere in the line.
    let mut left = Vec::new();
    for (i, t) in tickets.into_iter().enumerate() {
        if i % 3 == 1 {
            left.push(t);
        } else {
            assert_eq!(g.leave(&t).await.unwrap(), Left::Cancelled);
        }
    }
    for (i, t) in left.iter().enumerate() {
        assert_eq!(pw(status_place(&g, t).await), (i as u64 + 1, 100));
    }
    let t = queued(g.enter(1, true).await.unwrap()).0;
    assert_eq!(pw(status_place(&g, &t).await), (101, 101));
}

/// Leases that all ended at once are swept in bounded steps: one
/// operation removes at most 1,000, and repeated operations converge.
async fn many_ended_leases_are_swept_in_steps(ts: TestStore) {
    const N: u64 = 20_000;
    const STEP: u64 = 1_000;
    let ttl = Duration::from_secs(3);
    let g = gate(&ts, Some(N as u32), opts(ttl, ttl));
    for _ in 0..(N / 500) {
        let batch = futures_util::future::join_all((0..500).map(|_| g.enter(1, false))).await;
        for e in batch {
            granted(e.unwrap());
        }
    }
    let before = g.stats().await.unwrap();
    assert_eq!(before.holders + before.expiries, N);
    ts.advance(ttl + Duration::from_millis(100)).await;
    let mut last = before.clone();
    let mut ops = 0;
    while last.holders > 0 {
        let s = g.stats().await.unwrap();
        let swept = s.expiries - last.expiries;
        assert!(swept <= STEP, "one operation swept {swept} leases");
        assert_eq!(s.holders + s.expiries, N);
        if last.holders >= STEP {
            assert_eq!(swept, STEP, "a full step each time while enough are left");
        }
        // Ended leases not swept yet still count as held, never granted.
        assert_eq!(s.used, s.holders);
        last = s;
        ops += 1;
        assert!(ops <= N / STEP + 1, "not converging: {last:?}");
    }
    // Leases that ended while the rest were still being granted (a slow
    // machine takes longer than the TTL to grant them all) were swept
    // by those grants: count only the ones left to sweep here.
    assert!(
        ops >= before.holders / STEP,
        "{ops} operations swept {} leases",
        before.holders
    );
    // Nothing is listed or renewable meanwhile, and the gate works again.
    assert!(g.holders(10).await.unwrap().is_empty());
    granted(g.enter(1, false).await.unwrap());
}

/// A lease that ended but is not swept yet (the sweep is bounded) cannot
/// be renewed, released, ended or picked up, nor is it listed: it is an
/// expiry.
async fn an_ended_lease_not_yet_swept_is_gone_for_its_owner(ts: TestStore) {
    const N: usize = 6_000;
    let ttl = Duration::from_secs(3);
    let g = gate(&ts, Some(N as u32), opts(ttl, ttl));
    let mut tokens = Vec::new();
    for _ in 0..(N / 500) {
        let batch = futures_util::future::join_all((0..500).map(|_| g.enter(1, false))).await;
        tokens.extend(batch.into_iter().map(|e| granted(e.unwrap()).token));
    }
    ts.advance(ttl + Duration::from_millis(100)).await;
    // Each operation sweeps the 1,000 that ended first; the last tokens
    // entered stay unswept the longest.
    assert_eq!(g.stats().await.unwrap().holders, (N - 1000) as u64);
    assert!(g.holders(10).await.unwrap().is_empty());
    let last = |i: usize| tokens[N - 1 - i].as_str();
    assert_eq!(
        g.renew(last(0), LONG).await.unwrap_err().kind(),
        ErrorKind::LeaseLost
    );
    assert_eq!(g.leave(last(1)).await.unwrap(), Left::Unknown);
    assert_eq!(g.end(last(2), LONG).await.unwrap(), Left::Unknown);
    assert_eq!(g.status(last(3)).await.unwrap(), TicketStatus::Gone);
    let mut s = g.stats().await.unwrap();
    while s.holders > 0 {
        s = g.stats().await.unwrap();
    }
    assert_eq!(s.expiries, N as u64);
    assert!(g.watch_state(0).await.unwrap().revoked.is_empty());
}

on_both_stores!(manual_clock:
    positions_stay_exact_as_the_line_thins,
    many_ended_leases_are_swept_in_steps,
    an_ended_lease_not_yet_swept_is_gone_for_its_owner,
    grants_until_capacity_then_queues,
    release_hands_off_to_head_in_order,
    counts_stay_exact_across_quick_and_queued_paths,
    newcomer_never_overtakes_a_large_head,
    expired_lease_frees_its_slot_and_cannot_renew,
    renewal_extends_a_held_lease,
    a_lone_lease_keeps_every_promise,
    silent_waiter_leaves_the_line,
    labels_follow_the_lease,
    estimated_wait_follows_the_lines_pace,
    a_picked_up_hand_off_ends_on_its_own_ttl,
    renewing_to_a_shorter_ttl_takes_effect,
    hand_off_to_vanished_waiter_comes_back_within_its_grace,
    cancel_leaves_the_line,
    capacity_changes_at_runtime,
    capacity_is_stored_with_the_gate,
    lowering_capacity_below_a_waiting_request_drops_it,
    fences_strictly_increase,
    bad_input_is_a_typed_error,
    pausing_holds_admissions,
    admission_interval_paces_grants,
    silent_waiters_leave_a_long_line,
);
