//! How a Redis server is named in errors: its URL with any password
//! hidden, and what a failed connection reports.

use crate::error::{Error, ErrorKind};

/// Why connecting to `what` at `url` failed: a refused set-up as it is
/// (`Misconfigured`), anything else as unreachable.
pub(super) fn connect_error(e: impl Into<Error>, what: &str, url: &str) -> Error {
    match e.into() {
        e if e.kind() == ErrorKind::Misconfigured => e,
        e => Error::new(
            ErrorKind::Unavailable,
            format!("cannot reach {what} at {}", redacted(url)),
        )
        .with_source(e),
    }
}

/// `url` with its password, if any, shown as `***` (for messages): the
/// part of the user info after its first `:` (up to the last `@`, so a
/// password holding `/` is hidden too), and `pass=` / `password=` query
/// values (unix sockets).
pub(crate) fn redacted(url: &str) -> String {
    let mut out = match url.find("://").map(|i| i + 3) {
        Some(start) => match url[start..].rfind('@').map(|i| start + i) {
            Some(at) => match url[start..at].find(':').map(|i| start + i) {
                Some(colon) => format!("{}:***{}", &url[..colon], &url[at..]),
                None => url.to_owned(),
            },
            None => url.to_owned(),
        },
        None => url.to_owned(),
    };
    for key in ["pass=", "password="] {
        let mut from = 0;
        while let Some(i) = out[from..].find(key).map(|i| from + i) {
            let value = i + key.len();
            // Only a query parameter: right after `?` or `&`.
            if i > 0 && matches!(out.as_bytes()[i - 1], b'?' | b'&') {
                let end = out[value..].find(['&', '#']).map_or(out.len(), |e| value + e);
                out.replace_range(value..end, "***");
            }
            from = value;
        }
    }
    out
}
