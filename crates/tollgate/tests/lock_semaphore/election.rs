//! Leader election on every store: one leader at a time, candidates in
//! campaign order, observers that see every change in order, and a
//! restarted leader resuming with the token it kept.

use std::time::Duration;

use tollgate::{Election, GateOptions, Leader, Observer};

use crate::support::TestStore;

const WAIT: Duration = Duration::from_secs(60);

/// Reads `n` changes from an observer (each within 10 s).
async fn changes(mut o: Observer, n: usize) -> Vec<Option<Leader>> {
    let mut seen = Vec::new();
    for _ in 0..n {
        let next = tokio::time::timeout(Duration::from_secs(10), o.next())
            .await
            .expect("a change within 10 s")
            .expect("store");
        seen.push(next);
    }
    seen
}

/// Three candidates campaign in turn; each leads in campaign order after
/// the one before resigns; two observers see the same changes, in order:
/// nobody, a, b, c, nobody.
pub(crate) async fn election_one_leader_at_a_time_and_observers_see_each_change(ts: TestStore) {
    let election = Election::new(&ts.store, "scheduler").expect("election");
    let observers: Vec<_> = (0..2)
        .map(|_| tokio::spawn(changes(election.observe(), 5)))
        .collect();
    // Let the observers read the empty state first.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let a = election.campaign("a", WAIT).await.expect("store").expect("leads");
    let mut waiting = Vec::new();
    for label in ["b", "c"] {
        let e = election.clone();
        waiting.push(tokio::spawn(async move {
            e.campaign(label, WAIT).await.expect("store").expect("leads")
        }));
        // In line in this order.
        let start = std::time::Instant::now();
        while election.gate().stats().await.expect("stats").waiting < waiting.len() as u64 {
            assert!(start.elapsed() < Duration::from_secs(10));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let now = election.leader().await.expect("store").expect("a leads");
    assert_eq!((now.label.as_deref(), now.fence), (Some("a"), a.fence()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut fences = vec![a.fence()];
    a.resign().await.expect("resign");
    for (i, w) in waiting.into_iter().enumerate() {
        let l = tokio::time::timeout(Duration::from_secs(10), w)
            .await
            .expect("the next candidate leads")
            .expect("task");
        let now = election.leader().await.expect("store").expect("leads");
        assert_eq!(
            now.label.as_deref(),
            Some(["b", "c"][i]),
            "candidates lead in campaign order"
        );
        assert_eq!(now.fence, l.fence());
        assert!(l.fence() > *fences.last().expect("fence"));
        fences.push(l.fence());
        tokio::time::sleep(Duration::from_millis(300)).await;
        l.resign().await.expect("resign");
    }
    for o in observers {
        let seen = o.await.expect("observer");
        let got: Vec<Option<(String, u64)>> = seen
            .iter()
            .map(|l| l.as_ref().map(|l| (l.label.clone().unwrap_or_default(), l.fence)))
            .collect();
        let want: Vec<Option<(String, u64)>> = std::iter::once(None)
            .chain(
                ["a", "b", "c"]
                    .iter()
                    .zip(&fences)
                    .map(|(l, f)| Some(((*l).to_owned(), *f))),
            )
            .chain(std::iter::once(None))
            .collect();
        assert_eq!(got, want, "an observer missed or reordered a change");
        // The leadership's start, read from its fence, is the store's
        // clock at the grant: within a few seconds of this machine's.
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as u64;
        for l in seen.iter().flatten() {
            assert!(
                l.since_ms.abs_diff(now_ms) < 60_000,
                "since {} vs now {now_ms}",
                l.since_ms
            );
        }
    }
}

/// A leader that restarts (its process gone without resigning) resumes
/// with the token it kept, ahead of a waiting candidate and without
/// waiting out its lease; a wrong token, or one whose lease ended, does
/// not.
pub(crate) async fn election_a_restarted_leader_resumes_with_its_token(ts: TestStore) {
    let frozen = GateOptions {
        ttl: Duration::from_millis(1500),
        auto_renew: false,
        ..GateOptions::default()
    };
    let old = Election::with_options(&ts.store, "resumable", frozen)
        .expect("election")
        .campaign("node-1", WAIT)
        .await
        .expect("store")
        .expect("leads");
    let (token, fence) = (old.token().to_owned(), old.fence());
    // The old process is gone: no release, no renewal.
    std::mem::forget(old);
    let election = Election::new(&ts.store, "resumable").expect("election");
    let waiter = {
        let e = election.clone();
        tokio::spawn(async move { e.campaign("node-2", WAIT).await.expect("store").expect("leads") })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        election.resume("aaaaaaaaaaaa").await.expect("store").is_none(),
        "a wrong token resumed"
    );
    let back = election.resume(&token).await.expect("store").expect("resumed");
    assert_eq!(back.fence(), fence, "the same leadership, not a new one");
    // Renewed by the new handle past the old lease's 1.5 s.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(!back.is_lost());
    assert!(
        !waiter.is_finished(),
        "the waiting candidate led beside the resumed leader"
    );
    let now = election.leader().await.expect("store").expect("leads");
    assert_eq!((now.label.as_deref(), now.fence), (Some("node-1"), fence));
    back.resign().await.expect("resign");
    let next = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("node-2 leads")
        .expect("task");
    assert!(next.fence() > fence);
    assert!(
        election.resume(&token).await.expect("store").is_none(),
        "an ended lease resumed"
    );
    next.resign().await.expect("resign");
}
