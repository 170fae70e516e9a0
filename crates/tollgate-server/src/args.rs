//! Argument values that several commands and the config file share:
//! durations (`250ms`, `30s`), a listen address's port.

use std::time::Duration;

/// The port of a HOST:PORT listen address: digits only (u16's own parse
/// would take "+7700").
pub(crate) fn port_number(port: &str) -> Option<u16> {
    port.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| port.parse().ok())
        .flatten()
}

/// Parses `250ms`, `30s`, `5m`, `1h`; a bare number (which unit?) and a
/// negative duration are refused with a message saying so.
pub(crate) fn duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.starts_with('-') {
        return Err(format!("{s:?}: a duration cannot be negative"));
    }
    // A bare number is refused rather than guessed (seconds? ms?), as in
    // the config file's room settings.
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!("{s:?} needs a unit: {s}s, {s}ms, {s}m or {s}h"));
    }
    humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration like 250ms, 30s or 5m ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(duration("5m"), Ok(Duration::from_secs(300)));
        assert!(duration("7").is_err_and(|e| e.contains("needs a unit")));
        assert!(duration("-1s").is_err_and(|e| e.contains("negative")));
        assert!(duration("").is_err());
        assert!(duration("-1s").is_err());
        assert!(duration("soon").is_err());
        assert!(duration("99999999999999999999").is_err());
    }
}
