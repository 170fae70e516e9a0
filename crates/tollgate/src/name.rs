//! Validation at the edge: names, ids and durations are checked once, here,
//! so the stores can trust what they get.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use rand::distr::Alphanumeric;

use crate::error::{Error, Result};

/// The longest name a gate may have, in bytes.
pub const MAX_NAME_LEN: usize = 128;

/// A validated gate name: 1 to [`MAX_NAME_LEN`] characters from
/// `A-Z a-z 0-9 _ - . : / @`. Braces are excluded because Redis Cluster reads
/// them as a hash tag.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name(Arc<str>);

/// A name is written as its text (the embedded store's snapshots and
/// log); reading one checks it again.
impl serde::Serialize for Name {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Name {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Name, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Name::new(&text).map_err(serde::de::Error::custom)
    }
}

impl Name {
    /// Checks `name` and wraps it.
    pub fn new(name: &str) -> Result<Name> {
        check_text(
            "name",
            name,
            MAX_NAME_LEN,
            is_name_char,
            "allowed are letters, digits and _ - . : / @",
        )?;
        Ok(Name(name.into()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/' | '@')
}

/// Checks a `what` (a name, a key) from outside: 1 to `max` bytes, every
/// character one that `allowed` takes; `rule` says which those are in the
/// error.
pub(crate) fn check_text(
    what: &str,
    text: &str,
    max: usize,
    allowed: impl Fn(char) -> bool,
    rule: &str,
) -> Result<()> {
    if text.is_empty() {
        return Err(Error::invalid(format!("{what} must not be empty")));
    }
    if text.len() > max {
        return Err(Error::invalid(format!(
            "{what} is {} bytes long; at most {max} are allowed",
            text.len()
        )));
    }
    if let Some(bad) = text.chars().find(|c| !allowed(*c)) {
        return Err(Error::invalid(format!("{what} contains {bad:?}; {rule}")));
    }
    Ok(())
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The shortest lease or heartbeat tollgate accepts.
pub const MIN_TTL: Duration = Duration::from_millis(10);
/// The longest lease tollgate accepts in one grant or renewal; longer work
/// renews (automatic renewal does it for you).
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Checks a lease TTL (or a heartbeat grace) and turns it into milliseconds.
pub(crate) fn check_ttl(what: &str, ttl: Duration) -> Result<u64> {
    if ttl < MIN_TTL || ttl > MAX_TTL {
        return Err(Error::invalid(format!(
            "{what} must be between {}ms and {}h, got {}ms",
            MIN_TTL.as_millis(),
            MAX_TTL.as_secs() / 3600,
            ttl.as_millis()
        )));
    }
    Ok(ttl.as_millis() as u64)
}

/// Length of lease tokens and ticket ids: 12 alphanumerics, about 71 bits
/// (unguessable, and short enough for Redis to store in its smallest string
/// allocation, which keeps a waiting ticket small).
const ID_LEN: usize = 12;

/// A fresh random owner token. It doubles as the ticket id while waiting,
/// so a granted ticket's lease is owned by the same secret.
pub(crate) fn new_id() -> String {
    rand::rng()
        .sample_iter(&Alphanumeric)
        .take(ID_LEN)
        .map(char::from)
        .collect()
}

/// Checks an owner token or ticket id that came from outside.
pub(crate) fn check_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > 64 || !id.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(Error::invalid(
            "a lease token or ticket id is 1 to 64 letters and digits",
        ));
    }
    Ok(())
}

/// Checks a holder label: 1 to 64 printable ASCII characters.
pub(crate) fn check_label(label: &str) -> Result<()> {
    if label.is_empty() || label.len() > 64 || !label.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
        return Err(Error::invalid("a label is 1 to 64 printable ASCII characters"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(Name::new("cron:nightly-report/eu@1.0_x").is_ok());
        assert!(Name::new("").unwrap_err().is_invalid_input());
        assert!(Name::new("{tag}").unwrap_err().is_invalid_input());
        assert!(Name::new("has space").unwrap_err().is_invalid_input());
        assert!(Name::new("é").unwrap_err().is_invalid_input());
        assert!(Name::new(&"a".repeat(MAX_NAME_LEN)).is_ok());
        assert!(
            Name::new(&"a".repeat(MAX_NAME_LEN + 1))
                .unwrap_err()
                .is_invalid_input()
        );
    }

    #[test]
    fn ttls() {
        assert_eq!(check_ttl("ttl", Duration::from_secs(1)).unwrap(), 1000);
        assert!(check_ttl("ttl", Duration::ZERO).unwrap_err().is_invalid_input());
        assert!(check_ttl("ttl", Duration::from_millis(9)).is_err());
        assert!(check_ttl("ttl", MAX_TTL + Duration::from_millis(1)).is_err());
    }

    #[test]
    fn ids() {
        let a = new_id();
        assert_eq!(a.len(), ID_LEN);
        assert_ne!(a, new_id());
        assert!(check_id(&a).is_ok());
        assert!(check_id("").is_err());
        assert!(check_id("a b").is_err());
    }
}
