//! A scheduled room's draw at opening (`order_at_open = "random"`): the
//! pre-queue stands in a uniformly random order when admissions start,
//! and anyone can check that order afterwards.
//!
//! How: each visitor who joins the pre-queue gets a draw id (16 hex
//! digits, an HMAC of their ticket under the room's first cookie key, so
//! it says nothing of them and cannot be turned back into their ticket)
//! and an order key, the first 44 bits of SHA-256(seed ‖ draw id). The
//! gate keeps the draw's tickets in key order as they join
//! (`Gate::enter_drawn`), so the opening costs nothing: it admits from
//! the head. The seed is an HMAC of the room and the draw's name (when
//! its opening was first scheduled, `Schedule::draw_ms`) under the same
//! key: every server derives the same one, nobody without the key can.
//! Before the opening, `GET /.tollgate/{room}/draw` publishes SHA-256 of
//! the seed (the commitment); after it, the seed and every draw id in
//! drawn order. Anyone then checks that the seed hashes to the
//! commitment and that the ids stand in the order of their keys, and a
//! visitor that their id stands at the place their receipt says
//! (`tollgate room verify-draw`, docs/ROOMS.md). This file is the
//! method, pure; drawing.rs is what a room does with it.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use super::states::Schedule;

/// The method's name, in what the draw publishes.
pub(crate) const METHOD: &str = "tollgate-draw-v1: key(id) = the first 44 bits (big-endian) of \
SHA-256(seed bytes || id as ASCII); the ids stand in ascending key order (equal keys in any order)";

/// The most draw ids one answer lists.
pub(crate) const MAX_PAGE: usize = 10_000;

type HmacSha256 = Hmac<Sha256>;

fn hmac(secret: &[u8], parts: &[&str]) -> [u8; 32] {
    let mut mac =
        HmacSha256::new_from_slice(secret).unwrap_or_else(|_| unreachable!("hmac accepts any key length"));
    for p in parts {
        mac.update(p.as_bytes());
        mac.update(&[0]);
    }
    mac.finalize().into_bytes().into()
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The seed of room `room`'s draw named `draw_ms`.
pub(crate) fn seed(secret: &[u8], room: &str, draw_ms: u64) -> [u8; 32] {
    hmac(secret, &["tollgate draw seed", room, &draw_ms.to_string()])
}

/// What is published before the opening: SHA-256 of the seed, hex.
pub(crate) fn commitment(seed: &[u8]) -> String {
    hex(&Sha256::digest(seed))
}

/// A ticket's draw id in room `room`: 16 hex digits.
pub(crate) fn draw_id(secret: &[u8], room: &str, ticket: &str) -> String {
    hex(&hmac(secret, &["tollgate draw id", room, ticket])[..8])
}

/// A draw id's order key under `seed`: below `tollgate::DRAW_SPAN`.
pub(crate) fn order_key(seed: &[u8], id: &str) -> u64 {
    let mut h = Sha256::new();
    h.update(seed);
    h.update(id.as_bytes());
    let d = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    u64::from_be_bytes(first) >> (64 - 44)
}

/// What a check of a published draw found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Checked {
    pub(crate) entrants: usize,
    /// The receipt's id's place, if a receipt was checked.
    pub(crate) place: Option<u64>,
}

/// Checks a published draw: `seed` (hex) hashes to `commitment` (hex),
/// the `ids` are distinct and stand in ascending order of their keys
/// under the seed, and, with a receipt, its id stands at its place (from
/// 1). The error says what does not hold.
pub(crate) fn verify(
    commitment_hex: &str,
    seed_hex: &str,
    ids: &[String],
    receipt: Option<(&str, u64)>,
) -> Result<Checked, String> {
    let seed = unhex(seed_hex)
        .filter(|s| s.len() == 32)
        .ok_or("the seed is not 64 hex digits")?;
    if commitment(&seed) != commitment_hex.to_ascii_lowercase() {
        return Err("the seed does not hash to the commitment published before the opening".into());
    }
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    let mut last = 0;
    for (i, id) in ids.iter().enumerate() {
        if !seen.insert(id.as_str()) {
            return Err(format!("draw id {id} is listed twice"));
        }
        let key = order_key(&seed, id);
        if i > 0 && key < last {
            return Err(format!(
                "draw id {id} at place {} is out of order: its key is below the one before it",
                i + 1
            ));
        }
        last = key;
    }
    let place = match receipt {
        None => None,
        Some((id, place)) => {
            let at = ids.iter().position(|x| x == id).map(|i| i as u64 + 1);
            match at {
                Some(p) if p == place => Some(p),
                Some(p) => return Err(format!("draw id {id} stands at place {p}, not {place}")),
                None => return Err(format!("draw id {id} is not in the draw")),
            }
        }
    };
    Ok(Checked {
        entrants: ids.len(),
        place,
    })
}

/// A room's draws: the secret its seeds and ids derive from, and the last
/// draw revealed, read from the store once per draw.
pub(crate) struct Draws {
    pub(super) secret: Vec<u8>,
    pub(super) revealed: Mutex<Option<Arc<Revealed>>>,
    /// When this server last read the store for a record (ms): at most
    /// once a second.
    pub(super) tried_ms: AtomicU64,
}

impl std::fmt::Debug for Draws {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Draws").finish_non_exhaustive()
    }
}

/// A draw after its opening: the seed, and the draw ids in drawn order.
#[derive(Debug)]
pub(crate) struct Revealed {
    pub(super) draw_ms: u64,
    pub(super) seed: [u8; 32],
    pub(super) ids: Vec<String>,
    /// Draw id -> place (from 1).
    pub(super) places: HashMap<String, u64>,
}

impl Draws {
    pub(crate) fn new(secret: &str) -> Draws {
        Draws {
            secret: secret.as_bytes().to_vec(),
            revealed: Mutex::new(None),
            tried_ms: AtomicU64::new(0),
        }
    }

    pub(super) fn cached(&self, draw_ms: u64) -> Option<Arc<Revealed>> {
        let r = self.revealed.lock().unwrap_or_else(PoisonError::into_inner);
        r.as_ref().filter(|r| r.draw_ms == draw_ms).cloned()
    }
}

/// Whether a visitor arriving now in a room scheduled as `schedule`
/// joins a draw: the opening is pending and the draw is named.
pub(crate) fn pending_draw(schedule: &Schedule, now_ms: u64) -> Option<u64> {
    schedule.pending(now_ms).and(schedule.draw_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize, tag: &str) -> Vec<String> {
        (0..n).map(|i| format!("{tag}{i:04}")).collect()
    }

    fn drawn(seed: &[u8], mut ids: Vec<String>) -> Vec<String> {
        ids.sort_by_key(|id| (order_key(seed, id), id.clone()));
        ids
    }

    #[test]
    fn a_published_draw_checks_and_a_changed_one_does_not() {
        let secret = b"a-secret-of-at-least-thirty-two-bytes!";
        let s = seed(secret, "sale", 1_764_583_200_000);
        let c = commitment(&s);
        let order = drawn(&s, ids(50, "id"));
        let checked = verify(&c, &hex(&s), &order, Some((&order[7], 8))).unwrap();
        assert_eq!(
            checked,
            Checked {
                entrants: 50,
                place: Some(8)
            }
        );
        // Another seed: not the committed one, and (with the right
        // commitment) not the order either.
        let other = seed(secret, "sale", 1);
        assert!(
            verify(&c, &hex(&other), &order, None)
                .unwrap_err()
                .contains("commitment")
        );
        assert!(
            verify(&commitment(&other), &hex(&other), &order, None)
                .unwrap_err()
                .contains("out of order")
        );
        // Two ids swapped, one replaced, one twice, one left out.
        let mut swapped = order.clone();
        swapped.swap(3, 4);
        assert!(
            verify(&c, &hex(&s), &swapped, None)
                .unwrap_err()
                .contains("out of order")
        );
        let mut replaced = order.clone();
        replaced[10] = "intruder".into();
        let e = verify(&c, &hex(&s), &replaced, None).unwrap_err();
        assert!(e.contains("out of order"), "{e}");
        let mut twice = order.clone();
        twice[1] = twice[0].clone();
        assert!(verify(&c, &hex(&s), &twice, None).is_err());
        let mut short = order.clone();
        short.remove(2);
        let e = verify(&c, &hex(&s), &short, Some((&order[7], 8))).unwrap_err();
        assert!(e.contains("place 7, not 8"), "{e}");
        assert!(
            verify(&c, &hex(&s), &order, Some(("nobody", 1)))
                .unwrap_err()
                .contains("not in the draw")
        );
        assert!(verify(&c, "xyz", &order, None).unwrap_err().contains("hex"));
        // Keys fit the gate's draw, ids are 16 hex digits and stable.
        assert!(order.iter().all(|id| order_key(&s, id) < tollgate::DRAW_SPAN));
        let id = draw_id(secret, "sale", "ticket");
        assert_eq!(id.len(), 16);
        assert_eq!(id, draw_id(secret, "sale", "ticket"));
        assert_ne!(id, draw_id(secret, "other", "ticket"));
    }

    /// Pearson's statistic of `counts` against a uniform expectation.
    fn chi_square(counts: &[u64]) -> f64 {
        let total: u64 = counts.iter().sum();
        let e = total as f64 / counts.len() as f64;
        counts.iter().map(|&o| (o as f64 - e).powi(2) / e).sum()
    }

    /// Where each of 10 entrants lands over 200 draws, seeded (the seeds
    /// are fixed, so the test is repeatable): counts[place][entrant].
    fn places(order_of: impl Fn(&[u8], Vec<String>) -> Vec<String>) -> Vec<Vec<u64>> {
        let mut counts = vec![vec![0u64; 10]; 10];
        for d in 0..200u32 {
            let s = Sha256::digest(format!("chi-square draw {d}").as_bytes());
            let entrants = ids(10, &format!("d{d}-"));
            for (place, id) in order_of(&s, entrants.clone()).iter().enumerate() {
                let who = entrants.iter().position(|x| x == id).unwrap();
                counts[place][who] += 1;
            }
        }
        counts
    }

    /// The chi-square critical values at significance 0.001: 9 degrees
    /// of freedom (one place's 10 entrants) and 81 (the 10 x 10 table with
    /// its margins fixed).
    const CRITICAL_9: f64 = 27.877;
    const CRITICAL_81: f64 = 126.1;

    #[test]
    fn every_place_is_uniform_over_200_draws_of_10() {
        let counts = places(drawn);
        for (place, row) in counts.iter().enumerate() {
            let x2 = chi_square(row);
            assert!(
                x2 < CRITICAL_9,
                "place {}: chi-square {x2:.1} over {row:?}",
                place + 1
            );
        }
        let all: Vec<u64> = counts.concat();
        let x2 = chi_square(&all);
        assert!(x2 < CRITICAL_81, "the table: chi-square {x2:.1}");
        // The test can fail: an order that favours early arrivals (a
        // quarter of the draws keep arrival order) is caught.
        let biased = places(|s, ids| if s[0] < 64 { ids } else { drawn(s, ids) });
        assert!(chi_square(&biased[0]) > CRITICAL_9, "{:?}", biased[0]);
    }
}
