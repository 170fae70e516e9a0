//! How `tollgate schedule` reads and shows a schedule: the HTTP API's
//! view of one (what both the library and a server give, so both print
//! alike), `--when`/`--zone` and RFC 3339 times read, ticks in a zone and
//! in UTC, the list's table and `show`'s lines.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::DateTime;
use chrono_tz::Tz;
use serde_json::{Value, json};
use tollgate::{Backoff, ScheduleInfo, ScheduleSpec, When, WhenPart};

use crate::client::{Failure, usage};
use crate::exit;

pub(super) fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The API's `when` (without `TZ=`) and `zone` (none for an interval).
pub(super) fn when_and_zone(when: &When) -> (String, Option<String>) {
    match when {
        When::Cron(c) => (c.fields().to_owned(), Some(c.zone().to_owned())),
        When::Every(_) => (when.to_string(), None),
    }
}

pub(super) fn backoff_json(b: &Backoff) -> Value {
    match b {
        Backoff::Fixed(d) => json!({"kind": "fixed", "base_ms": d.as_millis() as u64}),
        Backoff::Exponential { base, max } => json!({"kind": "exponential",
            "base_ms": base.as_millis() as u64, "max_ms": max.as_millis() as u64}),
    }
}

/// A spec's fields as the HTTP API takes and shows them (no payload).
pub(super) fn spec_json(spec: &ScheduleSpec) -> Value {
    let (when, zone) = when_and_zone(&spec.when);
    json!({
        "when": when,
        "zone": zone,
        "queue": spec.queue,
        "priority": spec.priority,
        "max_attempts": spec.max_attempts,
        "backoff": backoff_json(&spec.backoff),
        "group": spec.group,
        "misfire": spec.misfire.to_string(),
        "max_catch_up": spec.max_catch_up,
        "start_ms": spec.start.map(ms),
        "end_ms": spec.end.map(ms),
        "jitter_ms": spec.jitter.as_millis() as u64,
        "paused": spec.paused,
    })
}

/// A stored schedule as the HTTP API shows it.
pub(super) fn view(info: &ScheduleInfo) -> Value {
    let spec = &info.spec;
    let mut v = spec_json(spec);
    v["name"] = json!(info.name);
    v["paused"] = json!(info.paused);
    v["next_ms"] = json!(info.next.map(ms));
    v["recent"] = info
        .recent
        .iter()
        .map(|t| json!({"job_id": t.job_id, "at_ms": ms(t.at), "manual": t.manual}))
        .collect();
    // The payload as JSON when it is JSON, else its bytes in base64 (the
    // API's two forms).
    match serde_json::from_slice::<Value>(&spec.payload) {
        Ok(p) => v["payload"] = p,
        Err(_) => v["payload_base64"] = json!(STANDARD.encode(&spec.payload)),
    }
    v
}

/// An expression (`add --when`, or `next`'s EXPR: `what` names it) and
/// `--zone` as one `When`; bad input names the argument and what is
/// allowed.
pub(super) fn when_of(what: &str, expr: &str, zone: Option<&str>) -> Result<When, Failure> {
    When::parse_in(expr, zone).map_err(|(part, e)| {
        let flag = match part {
            WhenPart::When => what,
            WhenPart::Zone => "--zone",
        };
        usage(format!("{flag}: {}", e.message()))
    })
}

/// The `When` of a view: its `when` in its `zone` (a cron expression's;
/// an interval's zone, if a server names one, is UTC whatever it says).
pub(super) fn view_when(name: &str, v: &Value) -> Result<When, Failure> {
    let expr = v["when"].as_str().unwrap_or_default().trim();
    let zone = v["zone"].as_str();
    let is_cron = !expr.get(..6).is_some_and(|w| w.eq_ignore_ascii_case("every "))
        && !expr.split_whitespace().next().is_some_and(|w| w.contains('='));
    let parsed = match zone {
        Some(zone) if is_cron => When::cron(expr, zone),
        _ => When::parse(expr),
    };
    parsed.map_err(|e| Failure {
        code: exit::SOFTWARE,
        message: format!(
            "schedule {name:?} has a `when` this version cannot read ({expr:?}, zone {zone:?}): {}",
            e.message()
        ),
    })
}

/// An RFC 3339 time given to `flag`.
pub(super) fn parse_time(flag: &str, t: &str) -> Result<SystemTime, Failure> {
    let bad = |why: String| {
        usage(format!(
            "{flag} {t:?}: {why}; allowed is an RFC 3339 time after 1970, e.g. 2026-12-01T00:00:00Z or 2026-12-01T01:00:00+01:00"
        ))
    };
    let parsed = DateTime::parse_from_rfc3339(t.trim()).map_err(|e| bad(e.to_string()))?;
    let ms = u64::try_from(parsed.timestamp_millis()).map_err(|_| bad("before 1970".to_owned()))?;
    Ok(UNIX_EPOCH + Duration::from_millis(ms))
}

/// The zone ticks are shown in: a cron expression's, else UTC.
pub(super) fn zone_of(when: &When) -> Tz {
    match when {
        When::Cron(c) => c.zone().parse().unwrap_or(Tz::UTC),
        When::Every(_) => Tz::UTC,
    }
}

/// `ms` as wall-clock time in `zone`, with its offset and abbreviation:
/// `2026-03-29T03:00:00+02:00 CEST`.
pub(super) fn local(ms: u64, zone: Tz) -> String {
    match DateTime::from_timestamp_millis(ms as i64) {
        Some(t) => t
            .with_timezone(&zone)
            .format("%Y-%m-%dT%H:%M:%S%:z %Z")
            .to_string(),
        None => format!("{ms} ms"),
    }
}

/// `ms` in UTC: `2026-03-29T01:00:00Z`.
pub(super) fn utc(ms: u64) -> String {
    match DateTime::from_timestamp_millis(ms as i64) {
        Some(t) => t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        None => format!("{ms} ms"),
    }
}

/// The zone of a view (`null` for an interval: UTC).
pub(super) fn view_zone(v: &Value) -> Tz {
    v["zone"].as_str().and_then(|z| z.parse().ok()).unwrap_or(Tz::UTC)
}

/// A tick of a view, in its zone and in UTC; `none` when there is none.
pub(super) fn tick_text(ms: Option<u64>, zone: Tz, none: &str) -> String {
    match ms {
        Some(ms) => format!("{} ({})", local(ms, zone), utc(ms)),
        None => none.to_owned(),
    }
}

/// What the next tick of a view is, in words.
pub(super) fn next_text(v: &Value) -> String {
    let none = if v["paused"].as_bool() == Some(true) {
        "none (paused)"
    } else {
        "none (no tick left)"
    };
    tick_text(v["next_ms"].as_u64(), view_zone(v), none)
}

/// Rows as columns padded to their widest cell, two spaces apart.
pub(super) fn table(rows: &[[String; 7]]) -> String {
    let mut widths = [0; 7];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// A duration in ms, as `30s` or `1h 30m`.
pub(super) fn span(ms: u64) -> String {
    humantime::format_duration(Duration::from_millis(ms)).to_string()
}

/// Every field of a view, one per line, and its recent ticks.
pub(super) fn describe(v: &Value) -> String {
    let zone = view_zone(v);
    let num = |key: &str| v[key].as_u64().map_or("-".to_owned(), |n| n.to_string());
    let at = |key: &str| tick_text(v[key].as_u64(), zone, "-");
    let payload = match (&v["payload"], v["payload_base64"].as_str()) {
        (Value::Null, Some(b)) => match STANDARD.decode(b) {
            Ok(bytes) if bytes.is_empty() => "(empty)".to_owned(),
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => format!("{text:?} (text)"),
                Err(e) => format!("{} bytes, not UTF-8", e.as_bytes().len()),
            },
            Err(_) => format!("base64 {b}"),
        },
        (p, _) => format!("{p} (JSON)"),
    };
    let b = &v["backoff"];
    let backoff = match (b["kind"].as_str(), b["base_ms"].as_u64(), b["max_ms"].as_u64()) {
        (Some("fixed"), Some(base), _) => format!("fixed {}", span(base)),
        (Some(kind), Some(base), Some(max)) => format!("{kind} {} to {}", span(base), span(max)),
        _ => b.to_string(),
    };
    let fields = [
        ("name", v["name"].as_str().unwrap_or("-").to_owned()),
        ("when", v["when"].as_str().unwrap_or("-").to_owned()),
        ("zone", zone.name().to_owned()),
        ("queue", v["queue"].as_str().unwrap_or("-").to_owned()),
        ("payload", payload),
        ("priority", num("priority")),
        ("max attempts", num("max_attempts")),
        ("backoff", backoff),
        ("group", v["group"].as_str().unwrap_or("(default)").to_owned()),
        ("misfire", v["misfire"].as_str().unwrap_or("-").to_owned()),
        ("max catch-up", num("max_catch_up")),
        ("start", at("start_ms")),
        ("end", at("end_ms")),
        ("jitter", v["jitter_ms"].as_u64().map_or("-".to_owned(), span)),
        (
            "paused",
            if v["paused"].as_bool() == Some(true) {
                "yes"
            } else {
                "no"
            }
            .to_owned(),
        ),
        ("next tick", next_text(v)),
    ];
    let mut out = String::new();
    for (label, value) in fields {
        out.push_str(&format!("{:<14}{value}\n", format!("{label}:")));
    }
    let recent = v["recent"].as_array().cloned().unwrap_or_default();
    if recent.is_empty() {
        out.push_str("recent ticks: none\n");
    } else {
        out.push_str("recent ticks (oldest first):\n");
        for t in recent {
            let manual = if t["manual"].as_bool() == Some(true) {
                "  (trigger)"
            } else {
                ""
            };
            out.push_str(&format!(
                "  {}  {}{manual}\n",
                tick_text(t["at_ms"].as_u64(), zone, "-"),
                t["job_id"].as_str().unwrap_or("-"),
            ));
        }
    }
    out
}
