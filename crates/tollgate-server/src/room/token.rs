//! Visitor tokens: what a visitor's cookie (or `Tollgate-Token` header)
//! carries, signed with HMAC-SHA256 so it cannot be forged or edited.
//!
//! `v1.<room>.<kind>.<id>.<stamp>.<hint>.<expires>.<signature>`: `kind` is
//! `a` (active: `id` is a lease token, `stamp` when it was last renewed) or
//! `w` (waiting: `id` is a ticket, `stamp` when it joined the line, `hint`
//! the wait it was told in ms plus one, 0 for none). Times are Unix
//! milliseconds. The signature
//! covers everything before it, so a token is bound to its room.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The request header (and response header) that carries a visitor's token
/// for API and mobile clients.
pub(crate) const TOKEN_HEADER: hyper::header::HeaderName =
    hyper::header::HeaderName::from_static("tollgate-token");

type HmacSha256 = Hmac<Sha256>;

/// What a visitor is, as far as a verified token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Visitor {
    /// Admitted: holds the lease `token`, last renewed at `renewed_ms`.
    Active { token: String, renewed_ms: u64 },
    /// In line with `ticket` since `since_ms`, told to expect `eta_ms`.
    Waiting {
        ticket: String,
        since_ms: u64,
        eta_ms: Option<u64>,
    },
}

/// Signing keys: the first signs, all verify (so keys can be rotated by
/// putting the new one first and dropping the old one later).
#[derive(Clone)]
pub(crate) struct Keys(Vec<Vec<u8>>);

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Keys({} keys)", self.0.len())
    }
}

impl Keys {
    pub(crate) fn new(keys: &[String]) -> Result<Keys, String> {
        if keys.is_empty() {
            return Err("cookie_keys: give at least one key (the first signs, all verify)".to_owned());
        }
        if keys.iter().any(|k| k.len() < 32) {
            return Err("cookie_keys: each key must be at least 32 characters of secret".to_owned());
        }
        Ok(Keys(keys.iter().map(|k| k.as_bytes().to_vec()).collect()))
    }

    fn mac(key: &[u8], payload: &str) -> HmacSha256 {
        // HMAC takes keys of any length.
        let mut mac =
            HmacSha256::new_from_slice(key).unwrap_or_else(|_| unreachable!("hmac accepts any key length"));
        mac.update(payload.as_bytes());
        mac
    }

    /// A signed token for `visitor` in `room`, valid until `expires_ms`.
    pub(crate) fn sign(&self, room: &str, visitor: &Visitor, expires_ms: u64) -> String {
        let (kind, id, stamp, hint) = match visitor {
            Visitor::Active { token, renewed_ms } => ("a", token.as_str(), *renewed_ms, 0),
            Visitor::Waiting {
                ticket,
                since_ms,
                eta_ms,
            } => (
                "w",
                ticket.as_str(),
                *since_ms,
                eta_ms.map_or(0, |e| e.saturating_add(1)),
            ),
        };
        let payload = format!("v1.{room}.{kind}.{id}.{stamp}.{hint}.{expires_ms}");
        let signature = URL_SAFE_NO_PAD.encode(Keys::mac(&self.0[0], &payload).finalize().into_bytes());
        format!("{payload}.{signature}")
    }

    /// The visitor a token names, if it is well-formed, signed by one of
    /// the keys, for `room`, and not expired. Anything else is `None`: the
    /// request is treated as a new visitor's.
    pub(crate) fn verify(&self, room: &str, token: &str, now_ms: u64) -> Option<Visitor> {
        let (payload, signature) = token.rsplit_once('.')?;
        let signature = URL_SAFE_NO_PAD.decode(signature).ok()?;
        // verify_slice compares in constant time.
        if !self
            .0
            .iter()
            .any(|k| Keys::mac(k, payload).verify_slice(&signature).is_ok())
        {
            return None;
        }
        let mut parts = payload.split('.');
        let (version, in_room, kind, id, stamp, hint, expires) = (
            parts.next()?,
            parts.next()?,
            parts.next()?,
            parts.next()?,
            parts.next()?.parse::<u64>().ok()?,
            parts.next()?.parse::<u64>().ok()?,
            parts.next()?.parse::<u64>().ok()?,
        );
        if parts.next().is_some() || version != "v1" || in_room != room || expires <= now_ms {
            return None;
        }
        match kind {
            "a" => Some(Visitor::Active {
                token: id.to_owned(),
                renewed_ms: stamp,
            }),
            "w" => Some(Visitor::Waiting {
                ticket: id.to_owned(),
                since_ms: stamp,
                eta_ms: hint.checked_sub(1),
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(k: &[&str]) -> Keys {
        Keys::new(&k.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    const A: &str = "key-a-0123456789-0123456789-0123456789";
    const B: &str = "key-b-0123456789-0123456789-0123456789";

    #[test]
    fn tokens_verify_only_as_signed() {
        let k = keys(&[A]);
        let v = Visitor::Waiting {
            ticket: "abcDEF123456".into(),
            since_ms: 1_000,
            eta_ms: Some(0),
        };
        let t = k.sign("shop", &v, 5_000);
        assert_eq!(k.verify("shop", &t, 2_000), Some(v.clone()));
        // Expired, other room, other key, edited, garbage.
        assert_eq!(k.verify("shop", &t, 5_000), None);
        assert_eq!(k.verify("tickets", &t, 2_000), None);
        assert_eq!(keys(&[B]).verify("shop", &t, 2_000), None);
        let edited = t.replacen("abcDEF123456", "abcDEF123457", 1);
        assert_eq!(k.verify("shop", &edited, 2_000), None);
        let longer = t.replacen(".5000.", ".9000.", 1);
        assert!(t.contains(".1.5000."), "{t}");
        assert_eq!(k.verify("shop", &longer, 2_000), None);
        for junk in [
            "",
            ".",
            "v1.shop.w.x.1.2.",
            "not a token",
            "v1.shop.a.x.1.99999.AAAA",
        ] {
            assert_eq!(k.verify("shop", junk, 2_000), None, "{junk:?}");
        }
        // Rotation: a token signed with the old key still verifies while
        // the old key is listed second.
        assert_eq!(keys(&[B, A]).verify("shop", &t, 2_000), Some(v));
        let active = Visitor::Active {
            token: "tok".into(),
            renewed_ms: 1_500,
        };
        let t = keys(&[B, A]).sign("shop", &active, 9_000);
        assert_eq!(keys(&[B]).verify("shop", &t, 2_000), Some(active));
        assert!(Keys::new(&["short".to_owned()]).is_err());
        assert!(Keys::new(&[]).is_err());
    }
}
