//! The optional arrival challenge (`challenge_bits` in `[rooms.NAME]`): a
//! small proof of work a new visitor's browser solves before it joins the
//! line, to raise what a bot army pays per place without bothering a
//! person for more than a moment. No third party, no tracking.
//!
//! A challenge is `c1.<room>.<nonce>.<issued ms>.<bits>.<signature>`,
//! signed with the room's first cookie key (HMAC-SHA256), so any server
//! sharing the room checks it without a store call. A solution is
//! `<challenge>:<counter>` whose SHA-256 starts with `bits` zero bits; it
//! comes in the `Tollgate-Challenge` header or the `tollgate_<room>_pass`
//! cookie (the page sets it). A challenge lives [`LIFETIME`], and each is
//! good for one arrival: its nonce is spent in the store (shared by every
//! server), so a solution replayed anywhere is refused.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256};

/// The request header a solution may come in.
pub(crate) const CHALLENGE_HEADER: hyper::header::HeaderName =
    hyper::header::HeaderName::from_static("tollgate-challenge");
/// How long a challenge may be solved and used.
pub(crate) const LIFETIME: Duration = Duration::from_secs(5 * 60);
/// The most work a room may ask (2^bits hashes on average).
pub(crate) const MAX_BITS: u8 = 28;

type HmacSha256 = Hmac<Sha256>;

/// Why a solution was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Not a challenge this room signed, or not in the expected form.
    Forged,
    /// Signed, but older than [`LIFETIME`] (or from the future).
    Expired,
    /// The counter does not give enough leading zero bits.
    Unsolved,
    /// Solved, but used for an arrival before (on any server).
    Replayed,
}

impl Refusal {
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Refusal::Forged => "forged",
            Refusal::Expired => "expired",
            Refusal::Unsolved => "unsolved",
            Refusal::Replayed => "replayed",
        }
    }
}

/// A room's challenges: its key and difficulty.
#[derive(Clone)]
pub(crate) struct Challenges {
    room: String,
    key: Vec<u8>,
    bits: u8,
}

impl std::fmt::Debug for Challenges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Challenges({} bits)", self.bits)
    }
}

impl Challenges {
    pub(crate) fn new(room: &str, key: &str, bits: u8) -> Challenges {
        Challenges {
            room: room.to_owned(),
            key: key.as_bytes().to_vec(),
            bits,
        }
    }

    pub(crate) fn bits(&self) -> u8 {
        self.bits
    }

    fn sign(&self, payload: &str) -> String {
        let mut mac = HmacSha256::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("hmac accepts any key length"));
        mac.update(payload.as_bytes());
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    }

    /// A fresh challenge, issued at `now_ms`.
    pub(crate) fn issue(&self, now_ms: u64) -> String {
        let mut nonce = [0u8; 12];
        rand::rng().fill_bytes(&mut nonce);
        let nonce = URL_SAFE_NO_PAD.encode(nonce);
        let payload = format!("c1.{}.{nonce}.{now_ms}.{}", self.room, self.bits);
        let signature = self.sign(&payload);
        format!("{payload}.{signature}")
    }

    /// The nonce of `solution` if it answers a challenge of this room,
    /// unexpired at `now_ms`, with enough work; the nonce is then to be
    /// spent (see the module's notes on replays).
    pub(crate) fn check(&self, solution: &str, now_ms: u64) -> Result<String, Refusal> {
        let (challenge, counter) = solution.rsplit_once(':').ok_or(Refusal::Forged)?;
        if counter.is_empty() || counter.len() > 20 || !counter.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Refusal::Forged);
        }
        let (payload, signature) = challenge.rsplit_once('.').ok_or(Refusal::Forged)?;
        let given = URL_SAFE_NO_PAD.decode(signature).map_err(|_| Refusal::Forged)?;
        let mut mac = HmacSha256::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("hmac accepts any key length"));
        mac.update(payload.as_bytes());
        // (verify_slice compares in constant time.)
        mac.verify_slice(&given).map_err(|_| Refusal::Forged)?;
        let parts: Vec<&str> = payload.split('.').collect();
        let [version, room, nonce, issued, bits] = parts.as_slice() else {
            return Err(Refusal::Forged);
        };
        let (issued, bits) = (
            issued.parse::<u64>().map_err(|_| Refusal::Forged)?,
            bits.parse::<u8>().map_err(|_| Refusal::Forged)?,
        );
        // A challenge of easier days is not good enough now.
        if *version != "c1" || *room != self.room || bits < self.bits {
            return Err(Refusal::Forged);
        }
        let lifetime = LIFETIME.as_millis() as u64;
        if issued > now_ms + 60_000 || now_ms.saturating_sub(issued) > lifetime {
            return Err(Refusal::Expired);
        }
        if leading_zero_bits(&Sha256::digest(solution.as_bytes())) < u32::from(bits) {
            return Err(Refusal::Unsolved);
        }
        Ok((*nonce).to_owned())
    }
}

/// How many zero bits `digest` starts with.
pub(crate) fn leading_zero_bits(digest: &[u8]) -> u32 {
    let mut zeros = 0;
    for b in digest {
        if *b == 0 {
            zeros += 8;
        } else {
            return zeros + b.leading_zeros();
        }
    }
    zeros
}

/// Solves `challenge` (what a browser's page does, for tests and clients
/// written in Rust): the first counter that does.
#[cfg(test)]
pub(crate) fn solve(challenge: &str, bits: u8) -> String {
    (0u64..)
        .map(|n| format!("{challenge}:{n}"))
        .find(|s| leading_zero_bits(&Sha256::digest(s.as_bytes())) >= u32::from(bits))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_solved_challenge_is_taken_once_checked_and_anything_else_is_refused() {
        let c = Challenges::new("shop", "key-0123456789-0123456789-0123456789", 10);
        let now = 1_764_583_200_000;
        let challenge = c.issue(now);
        let solution = solve(&challenge, 10);
        let nonce = c.check(&solution, now + 1_000).expect("solved");
        assert!(challenge.contains(&format!(".{nonce}.")));
        // Two challenges differ.
        assert_ne!(c.issue(now), challenge);
        // Forged: another room's, another key's, an edited one, a bad counter.
        let other_room = Challenges::new("hall", "key-0123456789-0123456789-0123456789", 10);
        assert_eq!(other_room.check(&solution, now), Err(Refusal::Forged));
        let other_key = Challenges::new("shop", "another-key-0123456789-0123456789", 10);
        assert_eq!(other_key.check(&solution, now), Err(Refusal::Forged));
        let edited = solution.replacen(".10.", ".1.", 1);
        assert_eq!(c.check(&edited, now), Err(Refusal::Forged));
        for bad in [
            "",
            ":",
            "x:1",
            &format!("{challenge}:"),
            &format!("{challenge}:-1"),
            &format!("{challenge}:1e3"),
        ] {
            assert_eq!(c.check(bad, now), Err(Refusal::Forged), "{bad}");
        }
        // Not enough work (almost surely: counter 0 rarely gives 10 zero bits).
        let lazy = (0u64..)
            .map(|n| format!("{challenge}:{n}"))
            .find(|s| leading_zero_bits(&Sha256::digest(s.as_bytes())) < 10)
            .expect("a counter that fails");
        assert_eq!(c.check(&lazy, now), Err(Refusal::Unsolved));
        // Expired, or from the future.
        let late = now + LIFETIME.as_millis() as u64 + 1;
        assert_eq!(c.check(&solution, late), Err(Refusal::Expired));
        assert_eq!(c.check(&solution, now - 120_000), Err(Refusal::Expired));
        // A room that asks more now refuses the easier challenge.
        let harder = Challenges::new("shop", "key-0123456789-0123456789-0123456789", 12);
        assert_eq!(harder.check(&solution, now), Err(Refusal::Forged));
    }

    #[test]
    fn leading_zero_bits_count() {
        assert_eq!(leading_zero_bits(&[0, 0, 0x0f, 0xff]), 20);
        assert_eq!(leading_zero_bits(&[0x80]), 0);
        assert_eq!(leading_zero_bits(&[0, 0]), 16);
        assert_eq!(leading_zero_bits(&[0x01]), 7);
    }
}
