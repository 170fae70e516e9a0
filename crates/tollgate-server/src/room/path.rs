//! One normal form for request paths, computed once per request before
//! any matching, and the path the upstream then gets.
//!
//! Matching the raw path lets `/static/../checkout` pass as "static" while
//! the upstream serves the checkout. So: percent-encoded unreserved bytes
//! are decoded (RFC 3986 §6.2.2.2, which turns `%2e%2e` into `..`), runs
//! of slashes are merged (most servers do, and `//vip` must not dodge the
//! `/vip` room), dot-segments are resolved (§5.2.4), and what could still
//! be read two ways is refused: backslashes, encoded slashes and
//! backslashes, NUL, and broken escapes. Rooms and bypass rules match
//! whole segments of the result, and the upstream gets the same result,
//! so what was matched is what is served.

/// Why a path was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BadPath {
    Backslash,
    EncodedSeparator,
    Nul,
    BrokenEscape,
    NotAbsolute,
    DotWithParams,
}

impl std::fmt::Display for BadPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BadPath::Backslash => "the path holds a backslash",
            BadPath::EncodedSeparator => "the path holds an encoded / or \\",
            BadPath::Nul => "the path holds an encoded NUL",
            BadPath::BrokenEscape => "the path holds a % not followed by two hex digits",
            BadPath::NotAbsolute => "the path does not start with /",
            BadPath::DotWithParams => "the path holds a . or .. segment with ;parameters",
        })
    }
}

fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Decodes what needs no encoding and upper-cases the escapes left, so one
/// resource has one spelling.
fn decode_unreserved(raw: &str) -> Result<String, BadPath> {
    let bytes = raw.as_bytes();
    let mut out = String::with_capacity(raw.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'\\' => return Err(BadPath::Backslash),
            b'%' => {
                let (Some(hi), Some(lo)) = (
                    bytes.get(i + 1).copied().and_then(hex),
                    bytes.get(i + 2).copied().and_then(hex),
                ) else {
                    return Err(BadPath::BrokenEscape);
                };
                let v = hi * 16 + lo;
                match v {
                    b'/' | b'\\' => return Err(BadPath::EncodedSeparator),
                    0 => return Err(BadPath::Nul),
                    v if unreserved(v) => out.push(char::from(v)),
                    v => {
                        out.push('%');
                        out.push_str(&format!("{v:02X}"));
                    }
                }
                i += 3;
            }
            // What a URI may hold as is (the parser admits a few bytes
            // more, raw UTF-8 among them: encoded, so they pass unchanged
            // in meaning and the result is ASCII).
            b if b.is_ascii_graphic() => {
                out.push(char::from(b));
                i += 1;
            }
            b => {
                out.push_str(&format!("%{b:02X}"));
                i += 1;
            }
        }
    }
    Ok(out)
}

/// The normal form of `raw` (a request's path, without the query).
pub(crate) fn normalize(raw: &str) -> Result<String, BadPath> {
    if !raw.starts_with('/') {
        return Err(BadPath::NotAbsolute);
    }
    let decoded = decode_unreserved(raw)?;
    let mut segments: Vec<&str> = Vec::new();
    // A path that ends in a directory ("/a/", "/a/.", "/a/b/..") keeps its
    // trailing slash, as §5.2.4 gives it.
    let mut directory = false;
    for segment in decoded.split('/') {
        directory = true;
        // `..;x` is `..` to servers that drop ;parameters before they
        // resolve, and a plain name to others: refused, not guessed.
        if let Some((base, _)) = segment.split_once(';')
            && matches!(base, "." | "..")
        {
            return Err(BadPath::DotWithParams);
        }
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => {
                segments.push(s);
                directory = false;
            }
        }
    }
    let mut out = String::with_capacity(decoded.len());
    for s in &segments {
        out.push('/');
        out.push_str(s);
    }
    if directory || segments.is_empty() {
        out.push('/');
    }
    Ok(out)
}

/// The form rooms and bypass rules match on: each segment without its
/// `;parameters`, which Tomcat, Jetty and Spring drop before routing (so
/// `/vip;x/page` is `/vip/page` to them, and is matched so here).
pub(crate) fn without_params(normal: &str) -> std::borrow::Cow<'_, str> {
    if !normal.contains(';') {
        return std::borrow::Cow::Borrowed(normal);
    }
    let parts: Vec<&str> = normal
        .split('/')
        .map(|segment| segment.split_once(';').map_or(segment, |(base, _)| base))
        .collect();
    std::borrow::Cow::Owned(parts.join("/"))
}

/// A configured prefix in the form `under` compares with: normalized,
/// without a trailing slash (but `/` stays `/`).
pub(crate) fn prefix(configured: &str) -> Result<String, String> {
    let n = normalize(configured).map_err(|e| format!("{configured:?}: {e}"))?;
    Ok(match n.trim_end_matches('/') {
        "" => "/".to_owned(),
        p => p.to_owned(),
    })
}

/// Whether normalized `path` is `prefix` or below it, by whole segments:
/// `/vip` covers `/vip` and `/vip/page`, not `/vipx`.
pub(crate) fn under(path: &str, prefix: &str) -> bool {
    prefix == "/"
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_segments_resolve_in_every_spelling() {
        for raw in [
            "/static/../checkout",
            "/static/%2e%2e/checkout",
            "/static/%2E%2e/checkout",
            "/static/.%2e/checkout",
            "/static/./../checkout",
            "//static/../checkout",
            "/a/b/../../checkout",
            "/../../checkout",
            "/static//..//checkout",
        ] {
            assert_eq!(normalize(raw).as_deref(), Ok("/checkout"), "{raw}");
        }
    }

    #[test]
    fn directories_keep_their_slash() {
        assert_eq!(normalize("/").as_deref(), Ok("/"));
        assert_eq!(normalize("/a/").as_deref(), Ok("/a/"));
        assert_eq!(normalize("/a/b/..").as_deref(), Ok("/a/"));
        assert_eq!(normalize("/a/.").as_deref(), Ok("/a/"));
        assert_eq!(normalize("/..").as_deref(), Ok("/"));
        assert_eq!(normalize("/a//b").as_deref(), Ok("/a/b"));
    }

    #[test]
    fn escapes_are_one_spelling() {
        assert_eq!(normalize("/%7Euser/%61").as_deref(), Ok("/~user/a"));
        assert_eq!(normalize("/a%20b/%3f").as_deref(), Ok("/a%20b/%3F"));
        // Decoded once only: %252e is the text "%2e", not a dot.
        assert_eq!(normalize("/x/%252e%252e/y").as_deref(), Ok("/x/%252e%252e/y"));
    }

    #[test]
    fn what_reads_two_ways_is_refused() {
        assert_eq!(normalize("/static/..\\checkout"), Err(BadPath::Backslash));
        assert_eq!(normalize("/static/..%2fcheckout"), Err(BadPath::EncodedSeparator));
        assert_eq!(normalize("/static/..%5Ccheckout"), Err(BadPath::EncodedSeparator));
        assert_eq!(normalize("/a%00"), Err(BadPath::Nul));
        assert_eq!(normalize("/a%2"), Err(BadPath::BrokenEscape));
        assert_eq!(normalize("/a%zz"), Err(BadPath::BrokenEscape));
        assert_eq!(normalize("*"), Err(BadPath::NotAbsolute));
    }

    #[test]
    fn parameters_do_not_dodge_matching() {
        assert_eq!(normalize("/static/..;/checkout"), Err(BadPath::DotWithParams));
        assert_eq!(normalize("/static/.;x/a"), Err(BadPath::DotWithParams));
        assert_eq!(normalize("/static/%2e%2e;/checkout"), Err(BadPath::DotWithParams));
        let n = normalize("/vip;x/page;jsessionid=1").expect("normal");
        assert_eq!(n, "/vip;x/page;jsessionid=1");
        assert_eq!(without_params(&n), "/vip/page");
        assert!(under(&without_params(&n), "/vip"));
        assert_eq!(without_params("/a/b"), "/a/b");
    }

    #[test]
    fn raw_bytes_are_encoded_not_garbled() {
        assert_eq!(normalize("/caf\u{e9}").as_deref(), Ok("/caf%C3%A9"));
        assert_eq!(normalize("/a%C3%A9").as_deref(), Ok("/a%C3%A9"));
    }

    #[test]
    fn prefixes_match_whole_segments() {
        let vip = prefix("/vip/").expect("prefix");
        assert_eq!(vip, "/vip");
        assert!(under("/vip", &vip));
        assert!(under("/vip/page", &vip));
        assert!(!under("/vipx", &vip));
        assert!(!under("/vipx/page", &vip));
        assert!(under("/anything", &prefix("/").expect("root")));
        assert_eq!(prefix("/a/../b").as_deref(), Ok("/b"));
    }
}
