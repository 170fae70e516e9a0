//! When a schedule fires: a cron expression in an IANA zone, or a fixed
//! interval from an anchor.
//!
//! We evaluate cron fields ourselves over `chrono-tz` local times rather than
//! use a cron crate: every firing process must compute the same tick, so the
//! DST rules are part of our contract and must not move with a dependency's
//! release. What we take from crates is only the calendar (`chrono`) and the
//! zone database (`chrono-tz`).

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeZone};
use chrono_tz::Tz;

use crate::{Error, Result};

/// The shortest interval of [`When::every`]: 1 s (ticks are whole seconds).
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// The longest interval of [`When::every`]: 366 days.
pub const MAX_INTERVAL: Duration = Duration::from_secs(366 * 86_400);
/// [`Misfire::All`] fires at most this many ticks in one step: the newest
/// ones. Older missed ticks are dropped.
pub const MAX_CATCH_UP: usize = 1000;
/// [`Misfire::Skip`] still fires the latest due tick if it is less than this
/// late (60 s), so a process that wakes a little after a tick fires it.
pub const SKIP_GRACE_MS: u64 = 60_000;

/// How far [`When::next_after`] looks for a matching day: nine years, enough
/// for `0 0 29 2 *` across a century year that is not a leap year.
const SEARCH_DAYS: i64 = 9 * 366 + 3;
/// Bounds on any zone's UTC offset (tzdb has -12 h to +14 h, and local mean
/// times a little past that), used to bracket a DST gap.
const MAX_OFFSET_SECS: i64 = 16 * 3600;
const DAY_SECS: u32 = 86_400;

/// What to do with ticks that passed while nobody fired them (downtime).
///
/// Fed to [`When::due_ticks`]; the default is `Skip`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Misfire {
    /// Fire only a tick that is on time: the latest due tick if it is less
    /// than [`SKIP_GRACE_MS`] late; every earlier missed tick is dropped.
    #[default]
    Skip,
    /// Fire one job, for the latest due tick, standing for all the missed
    /// ones; then continue with the next tick after now.
    Once,
    /// Fire every missed tick, oldest first, but at most [`MAX_CATCH_UP`]:
    /// the newest ones; older ones are dropped.
    All,
}

impl fmt::Display for Misfire {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Misfire::Skip => "skip",
            Misfire::Once => "once",
            Misfire::All => "all",
        })
    }
}

impl FromStr for Misfire {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "skip" => Ok(Misfire::Skip),
            "once" => Ok(Misfire::Once),
            "all" => Ok(Misfire::All),
            _ => Err(Error::invalid(format!(
                "misfire policy {s:?}: allowed are skip, once, all"
            ))),
        }
    }
}

/// When a schedule fires: a cron expression in an IANA time zone, or a
/// fixed interval. Ticks are whole seconds, given as Unix milliseconds.
///
/// Text forms ([`When::parse`], also `FromStr`; `Display` gives them back):
///
/// - `30 2 * * *` — cron, 5 fields (minute hour day-of-month month
///   day-of-week) or 6 (seconds first), in UTC;
/// - `TZ=Europe/Berlin 30 2 * * *` — the same in a zone (`CRON_TZ=` too);
/// - `@hourly`, `@daily` (`@midnight`), `@weekly`, `@monthly`, `@yearly`
///   (`@annually`), optionally after `TZ=...`;
/// - `every 30s`, `every 1h 30m from 1767225600000` — an interval (≥ 1 s,
///   ≤ 366 days, whole seconds), anchored at a Unix ms (default 0).
///
/// Fields take `*`, `n`, `a-b`, `*/s`, `a-b/s`, `a/s` and lists of these;
/// months `JAN`-`DEC`, weekdays `SUN`-`SAT` (0 or 7 is Sunday); `?` is `*`
/// in the day fields. As in Vixie cron, when both day fields are
/// restricted (neither starts with `*`), a day matches either of them.
///
/// # Daylight saving time
///
/// Cron fields are matched against wall-clock time in the zone. Where the
/// wall clock skips or repeats, the hour field decides:
///
/// - **Fixed hours** (the hour field is anything but `*` or `*/n`): each
///   matching wall-clock time fires once per day. A time inside a
///   spring-forward gap (02:30 on a day that jumps from 02:00 to 03:00)
///   fires at the first instant after the gap, the transition itself
///   (03:00 local), as Vixie cron and Cronie run skipped jobs right after
///   the change; several times in one gap fire once there. A time in the
///   repeated hour of a fall-back fires at its first occurrence only (the
///   earlier UTC instant).
/// - **Wildcard hours** (`*` or `*/n`, e.g. `*/15 * * * *`, `@hourly`):
///   fire on real elapsed time: every instant whose wall-clock time
///   matches, so both passes of a repeated hour fire, and times in a gap,
///   which no instant has, do not.
/// - **Intervals** are UTC arithmetic (anchor + k·interval, k ≥ 0), untouched
///   by DST.
///
/// ```
/// use tollgate::{Misfire, When};
///
/// // 02:30 in Berlin does not exist on 2026-03-29: that day fires at 03:00
/// // CEST (01:00 UTC), when the gap ends.
/// let nightly: When = "TZ=Europe/Berlin 30 2 * * *".parse()?;
/// let sat_noon = 1_774_695_600_000; // 2026-03-28T11:00:00Z
/// assert_eq!(nightly.next_after(sat_noon), Some(1_774_746_000_000));
///
/// // The store holds the next tick; after downtime, fire the missed ones.
/// let every_minute = When::parse("every 1m")?;
/// let (fire, next) = every_minute.due_ticks(60_000, 185_000, Misfire::All);
/// assert_eq!((fire, next), (vec![60_000, 120_000, 180_000], 240_000));
/// # Ok::<(), tollgate::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum When {
    /// A cron expression in a zone.
    Cron(Cron),
    /// A fixed interval from an anchor.
    Every(Every),
}

/// Which input of [`When::parse_in`] is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenPart {
    /// The text: the interval, the cron fields or its `TZ=` prefix.
    When,
    /// The zone given apart, or giving one where it does not belong.
    Zone,
}

/// The IANA zone `name`.
fn zone_named(name: &str) -> Result<Tz> {
    name.parse().map_err(|_| {
        Error::invalid(format!(
            "schedule zone {name:?}: allowed are IANA zone names such as UTC, Europe/Berlin, America/New_York"
        ))
    })
}

/// A parsed cron expression and its zone; see [`When`] for the rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    /// The fields as written (or the macro), single-spaced: `Display` form.
    fields: String,
    zone: Tz,
    seconds: u64,
    minutes: u64,
    hours: u32,
    /// Bits 1..=31.
    days: u32,
    /// Bits 1..=12.
    months: u16,
    /// Bits 0..=6, Sunday 0.
    weekdays: u8,
    /// The day-of-month or day-of-week field starts with `*`: days must
    /// match both fields; otherwise either (Vixie cron).
    day_star: bool,
    /// The hour field is `*` or `*/n`: elapsed-time rules at DST changes.
    wall_hours: bool,
}

/// A fixed interval from an anchor; see [`When`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Every {
    interval_ms: u64,
    anchor_ms: u64,
}

impl When {
    /// Parses any of the text forms listed on [`When`].
    pub fn parse(text: &str) -> Result<When> {
        let text = text.trim();
        if let Some(rest) = strip_prefix_ci(text, "every ") {
            let (span, anchor) = match rest.find(" from ") {
                Some(i) => (&rest[..i], Some(rest[i + 6..].trim())),
                None => (rest, None),
            };
            let span = span.trim();
            let interval = humantime::parse_duration(span).map_err(|e| {
                // A bare number: humantime suggests units (ms) that no
                // schedule takes; seconds are what it most likely meant.
                let e = match span.bytes().all(|b| b.is_ascii_digit()) {
                    true => format!("time unit needed, for example {span}s or {span}m"),
                    false => e.to_string(),
                };
                Error::invalid(format!(
                    "schedule interval {span:?}: {e}; allowed are whole seconds from 1s to 366 days, e.g. \"every 30s\" or \"every 1h 30m\""
                ))
            })?;
            let anchor_ms = match anchor {
                None => 0,
                Some(a) => a.parse::<u64>().map_err(|_| {
                    Error::invalid(format!(
                        "schedule anchor {a:?}: allowed is a Unix time in milliseconds"
                    ))
                })?,
            };
            return When::every(interval, anchor_ms);
        }
        let (zone, expr) = match text.split_once(char::is_whitespace) {
            Some((first, rest)) if first.contains('=') => {
                let zone = strip_prefix_ci(first, "TZ=")
                    .or_else(|| strip_prefix_ci(first, "CRON_TZ="))
                    .ok_or_else(|| {
                        Error::invalid(format!(
                            "schedule {first:?}: the only setting allowed before the fields is TZ=<IANA zone>"
                        ))
                    })?;
                (zone, rest)
            }
            _ => ("UTC", text),
        };
        When::cron(expr, zone)
    }

    /// Parses `text` as [`parse`](Self::parse) does, in `zone` when one is
    /// given apart (an API's `zone` field, a CLI's `--zone`). A separate
    /// zone goes only with a cron expression that names none itself. The
    /// error says which of the two inputs is wrong, so a caller can point
    /// at the right field or flag.
    pub fn parse_in(text: &str, zone: Option<&str>) -> std::result::Result<When, (WhenPart, Error)> {
        let text = text.trim();
        let Some(zone) = zone else {
            return When::parse(text).map_err(|e| (WhenPart::When, e));
        };
        let first = text.split_whitespace().next().unwrap_or("");
        if first.eq_ignore_ascii_case("every") {
            return Err((
                WhenPart::Zone,
                Error::invalid(format!(
                    "zone {zone:?} goes with a cron expression; an interval ({text:?}) counts elapsed time in UTC"
                )),
            ));
        }
        if first.contains('=') {
            return Err((
                WhenPart::Zone,
                Error::invalid(format!(
                    "zone {zone:?} and a TZ= setting in {text:?}: give the zone once"
                )),
            ));
        }
        let zone = zone_named(zone).map_err(|e| (WhenPart::Zone, e))?;
        Cron::parse(text, zone)
            .map(When::Cron)
            .map_err(|e| (WhenPart::When, e))
    }

    /// A cron expression (5 or 6 fields, or a macro) in an IANA zone
    /// (`"UTC"`, `"Europe/Berlin"`).
    pub fn cron(expr: &str, zone: &str) -> Result<When> {
        Cron::parse(expr, zone_named(zone)?).map(When::Cron)
    }

    /// Ticks at `anchor_ms + k·interval` for k ≥ 0, in UTC. The interval is
    /// whole seconds from [`MIN_INTERVAL`] to [`MAX_INTERVAL`]; the anchor a
    /// whole second.
    pub fn every(interval: Duration, anchor_ms: u64) -> Result<When> {
        if interval < MIN_INTERVAL || interval > MAX_INTERVAL || interval.subsec_nanos() != 0 {
            return Err(Error::invalid(format!(
                "schedule interval {}: allowed are whole seconds from 1s to 366 days",
                humantime::format_duration(interval)
            )));
        }
        if !anchor_ms.is_multiple_of(1000) {
            return Err(Error::invalid(format!(
                "schedule anchor {anchor_ms}: allowed is a whole second (a multiple of 1000 ms)"
            )));
        }
        Ok(When::Every(Every {
            interval_ms: interval.as_secs() * 1000,
            anchor_ms,
        }))
    }

    /// The first tick strictly after `t_ms` (Unix ms), or `None` if there is
    /// none that chrono can represent. Ticks are whole seconds, so any `t`
    /// within one tick interval gives the same answer.
    pub fn next_after(&self, t_ms: u64) -> Option<u64> {
        match self {
            When::Every(e) => e.next_after(t_ms),
            When::Cron(c) => {
                let t = i64::try_from(t_ms / 1000).ok()?;
                let next = c.next_after(t)?;
                u64::try_from(next).ok()?.checked_mul(1000)
            }
        }
    }

    /// What to fire now, for the store's compare-and-set step.
    ///
    /// `next_due` is the tick the store holds as next; `now_ms` the store's
    /// time. Returns the ticks to push jobs for (ascending) and the tick to
    /// store as the new next (`u64::MAX` if the schedule never fires
    /// again). Before `next_due` is due, nothing fires and `next_due` stays.
    /// Otherwise the due ticks are those of this schedule in
    /// `[next_due, now_ms]`, handled by `policy` (see [`Misfire`]), and the
    /// new next tick is the first one after `now_ms`.
    pub fn due_ticks(&self, next_due: u64, now_ms: u64, policy: Misfire) -> (Vec<u64>, u64) {
        if next_due > now_ms {
            return (Vec::new(), next_due);
        }
        let next = self.next_after(now_ms).unwrap_or(u64::MAX);
        let fire = match policy {
            Misfire::Skip => self
                .newest_due(next_due, now_ms, 1)
                .into_iter()
                .filter(|&tick| now_ms - tick < SKIP_GRACE_MS)
                .collect(),
            Misfire::Once => self.newest_due(next_due, now_ms, 1),
            Misfire::All => self.newest_due(next_due, now_ms, MAX_CATCH_UP),
        };
        (fire, next)
    }

    /// The newest `n` ticks in `[from, now]`, ascending. Searches back from
    /// `now` over a window that doubles, so a long downtime costs about the
    /// ticks fired, not the ticks missed.
    fn newest_due(&self, from: u64, now: u64, n: usize) -> Vec<u64> {
        let mut width: u64 = 1000;
        loop {
            let start = now.saturating_sub(width).max(from);
            let mut found = VecDeque::with_capacity(n + 1);
            let mut tick = self.first_at_or_after(start);
            while let Some(t) = tick.filter(|&t| t <= now) {
                found.push_back(t);
                if found.len() > n {
                    found.pop_front();
                }
                tick = self.next_after(t);
            }
            if found.len() >= n || start == from {
                return found.into();
            }
            width = width.saturating_mul(2);
        }
    }

    /// The first tick at or after `t_ms`.
    fn first_at_or_after(&self, t_ms: u64) -> Option<u64> {
        match t_ms.checked_sub(1) {
            Some(before) => self.next_after(before),
            None => match self {
                When::Every(e) => Some(e.anchor_ms),
                When::Cron(c) => u64::try_from(c.next_after(-1)?).ok()?.checked_mul(1000),
            },
        }
    }
}

impl FromStr for When {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        When::parse(s)
    }
}

impl fmt::Display for When {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            When::Cron(c) if c.zone == Tz::UTC => f.write_str(&c.fields),
            When::Cron(c) => write!(f, "TZ={} {}", c.zone.name(), c.fields),
            When::Every(e) => {
                let span = humantime::format_duration(Duration::from_millis(e.interval_ms));
                match e.anchor_ms {
                    0 => write!(f, "every {span}"),
                    a => write!(f, "every {span} from {a}"),
                }
            }
        }
    }
}

impl Every {
    /// The interval.
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms)
    }

    /// The first tick, in Unix ms.
    pub fn anchor_ms(&self) -> u64 {
        self.anchor_ms
    }

    fn next_after(&self, t_ms: u64) -> Option<u64> {
        if t_ms < self.anchor_ms {
            return Some(self.anchor_ms);
        }
        let k = (t_ms - self.anchor_ms) / self.interval_ms + 1;
        k.checked_mul(self.interval_ms)?.checked_add(self.anchor_ms)
    }
}

/// One cron field: its name for messages, its range and its names.
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const fn field(name: &'static str, min: u32, max: u32, names: &'static [&'static str]) -> Field {
    Field {
        name,
        min,
        max,
        names,
    }
}

const MONTHS: &[&str] = &[
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const SECOND: Field = field("second", 0, 59, &[]);
const MINUTE: Field = field("minute", 0, 59, &[]);
const HOUR: Field = field("hour", 0, 23, &[]);
const DAY: Field = field("day-of-month", 1, 31, &[]);
const MONTH: Field = field("month", 1, 12, MONTHS);
// 7 is Sunday too; folded into bit 0 after parsing.
const WEEKDAY: Field = field(
    "day-of-week",
    0,
    7,
    &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
);

impl Field {
    fn invalid(&self, text: &str, why: &str) -> Error {
        let names = match self.names.first() {
            Some(first) => format!(
                " or names {first}-{}",
                self.names.last().copied().unwrap_or(first)
            ),
            None => String::new(),
        };
        Error::invalid(format!(
            "cron {} field {text:?}: {why}; allowed are {}-{}{names}, *, ranges a-b, steps */n or a-b/n, and lists of these",
            self.name, self.min, self.max
        ))
    }

    fn value(&self, text: &str, whole: &str) -> Result<u32> {
        if let Some(i) = self.names.iter().position(|n| n.eq_ignore_ascii_case(text)) {
            // Month names start at 1, weekday names at 0 (Sunday).
            return Ok(self.min + i as u32);
        }
        let v: u32 = text
            .parse()
            .map_err(|_| self.invalid(whole, &format!("{text:?} is not a number")))?;
        if v < self.min || v > self.max {
            return Err(self.invalid(whole, &format!("{v} is out of range")));
        }
        Ok(v)
    }

    /// The field as a bit set (bit v set when value v matches).
    fn parse(&self, text: &str) -> Result<u64> {
        let mut bits = 0u64;
        for item in text.split(',') {
            let (range, step) = match item.split_once('/') {
                Some((r, s)) => {
                    let step: u32 = s
                        .parse()
                        .map_err(|_| self.invalid(text, &format!("step {s:?} is not a number")))?;
                    if step == 0 || step > self.max {
                        return Err(self.invalid(text, &format!("step {step} is out of range")));
                    }
                    (r, Some(step))
                }
                None => (item, None),
            };
            let any = range == "*" || (range == "?" && self.name.starts_with("day"));
            let (lo, hi) = if any {
                (self.min, self.max)
            } else if let Some((a, b)) = range.split_once('-') {
                let (a, b) = (self.value(a, text)?, self.value(b, text)?);
                if a > b {
                    return Err(self.invalid(text, &format!("range {a}-{b} runs backwards")));
                }
                (a, b)
            } else if range.is_empty() {
                return Err(self.invalid(text, "an empty item"));
            } else {
                let a = self.value(range, text)?;
                // "a/n" means from a to the end in steps of n.
                (a, if step.is_some() { self.max } else { a })
            };
            let step = step.unwrap_or(1);
            let mut v = lo;
            while v <= hi {
                bits |= 1 << v;
                v += step;
            }
        }
        Ok(bits)
    }
}

fn strip_prefix_ci<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix).then(|| &text[prefix.len()..])
}

impl Cron {
    /// The zone the fields are matched in.
    pub fn zone(&self) -> &str {
        self.zone.name()
    }

    /// The fields as written (single-spaced), or the macro.
    pub fn fields(&self) -> &str {
        &self.fields
    }

    fn parse(expr: &str, zone: Tz) -> Result<Cron> {
        let words: Vec<&str> = expr.split_whitespace().collect();
        let expanded: Vec<&str> = match words.as_slice() {
            [m] if m.starts_with('@') => match m.to_ascii_lowercase().as_str() {
                "@yearly" | "@annually" => vec!["0", "0", "1", "1", "*"],
                "@monthly" => vec!["0", "0", "1", "*", "*"],
                "@weekly" => vec!["0", "0", "*", "*", "0"],
                "@daily" | "@midnight" => vec!["0", "0", "*", "*", "*"],
                "@hourly" => vec!["0", "*", "*", "*", "*"],
                _ => {
                    return Err(Error::invalid(format!(
                        "cron macro {m:?}: allowed are @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly"
                    )));
                }
            },
            w if w.len() == 5 || w.len() == 6 => w.to_vec(),
            w => {
                return Err(Error::invalid(format!(
                    "cron expression {expr:?}: has {} fields; allowed are 5 (minute hour day-of-month month day-of-week), 6 (seconds first) or a macro such as @daily",
                    w.len()
                )));
            }
        };
        let (sec, rest) = if expanded.len() == 6 {
            (expanded[0], &expanded[1..])
        } else {
            ("0", &expanded[..])
        };
        let weekdays = WEEKDAY.parse(rest[4])?;
        let cron = Cron {
            fields: words.join(" "),
            zone,
            seconds: SECOND.parse(sec)?,
            minutes: MINUTE.parse(rest[0])?,
            hours: HOUR.parse(rest[1])? as u32,
            days: DAY.parse(rest[2])? as u32,
            months: MONTH.parse(rest[3])? as u16,
            weekdays: ((weekdays | (weekdays >> 7)) & 0x7f) as u8,
            day_star: rest[2].starts_with('*')
                || rest[2] == "?"
                || rest[4].starts_with('*')
                || rest[4] == "?",
            wall_hours: rest[1] == "*" || rest[1].starts_with("*/"),
        };
        if cron.next_after(0).is_none() {
            return Err(Error::invalid(format!(
                "cron expression {expr:?}: no date ever matches its day-of-month and month fields; allowed are days some listed month has (not 30 or 31 in February alone)"
            )));
        }
        Ok(cron)
    }

    fn day_matches(&self, d: NaiveDate) -> bool {
        if self.months & (1 << d.month()) == 0 {
            return false;
        }
        let dom = self.days & (1 << d.day()) != 0;
        let dow = self.weekdays & (1 << d.weekday().num_days_from_sunday()) != 0;
        if self.day_star { dom && dow } else { dom || dow }
    }

    /// The first matching time of day (seconds since midnight) at or after
    /// `from`.
    fn next_time_of_day(&self, from: u32) -> Option<u32> {
        let (mut h, mut m, mut s) = (from / 3600, from / 60 % 60, from % 60);
        while h < 24 {
            if self.hours & (1 << h) != 0 {
                while m < 60 {
                    if self.minutes & (1 << m) != 0 {
                        let left = self.seconds & !((1u64 << s) - 1);
                        if left != 0 {
                            return Some(h * 3600 + m * 60 + left.trailing_zeros());
                        }
                    }
                    m += 1;
                    s = 0;
                }
            }
            h += 1;
            m = 0;
            s = 0;
        }
        None
    }

    fn offset(&self, u: i64) -> Option<i64> {
        let at = DateTime::from_timestamp(u, 0)?.naive_utc();
        Some(i64::from(
            self.zone.offset_from_utc_datetime(&at).fix().local_minus_utc(),
        ))
    }

    fn local(&self, u: i64) -> Option<NaiveDateTime> {
        let at = DateTime::from_timestamp(u, 0)?.naive_utc();
        Some(self.zone.from_utc_datetime(&at).naive_local())
    }

    /// The instants (Unix s) a matching wall-clock time fires at, by the DST
    /// rules on [`When`]: at most two.
    fn instants(&self, local: NaiveDateTime) -> [Option<i64>; 2] {
        use chrono::LocalResult::{Ambiguous, None as Gap, Single};
        match self.zone.from_local_datetime(&local) {
            Single(at) => [Some(at.timestamp()), None],
            Ambiguous(a, b) if self.wall_hours => [Some(a.timestamp()), Some(b.timestamp())],
            Ambiguous(a, b) => [Some(a.timestamp().min(b.timestamp())), None],
            Gap if self.wall_hours => [None, None],
            Gap => [self.gap_end(local), None],
        }
    }

    /// The instant a spring-forward gap containing `local` ends: the first
    /// instant whose wall clock reads later than `local`. Offsets are within
    /// ±16 h, so it lies within 16 h of `local` read as UTC; a binary search
    /// there is exact as long as the zone changes offset at most once in
    /// that window, as every tzdb zone does.
    fn gap_end(&self, local: NaiveDateTime) -> Option<i64> {
        let x = local.and_utc().timestamp();
        let (mut lo, mut hi) = (x - MAX_OFFSET_SECS - 1, x + MAX_OFFSET_SECS);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.local(mid)? > local {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(hi)
    }

    /// The first tick after `t` (Unix s).
    fn next_after(&self, t: i64) -> Option<i64> {
        let start = self.local(t)?.date() - chrono::Days::new(2);
        let mut best: Option<(i64, NaiveDate)> = None;
        let mut day = start;
        for _ in 0..SEARCH_DAYS {
            if let Some((_, found)) = best {
                // A later day can fire earlier only when a change of offset
                // crosses midnight; one more day covers that.
                if day > found.succ_opt()? {
                    break;
                }
            }
            if self.day_matches(day)
                && let Some(tick) = self.first_on_day(day, t)
                && best.is_none_or(|(b, _)| tick < b)
            {
                best = Some((tick, day));
            }
            day = day.succ_opt()?;
        }
        best.map(|(tick, _)| tick)
    }

    /// The first tick after `t` among the matching times of `day`.
    fn first_on_day(&self, day: NaiveDate, t: i64) -> Option<i64> {
        let midnight = day.and_time(NaiveTime::MIN);
        let x0 = midnight.and_utc().timestamp();
        if x0 + i64::from(DAY_SECS) + MAX_OFFSET_SECS <= t {
            // Every instant of this day is before t, whatever the offset.
            return None;
        }
        // The offsets in force around this day bound which wall-clock times
        // can fire after t, and when a later one can no longer fire earlier.
        let (mut lo_off, mut hi_off) = (i64::MAX, i64::MIN);
        for h in 0..=(2 * MAX_OFFSET_SECS / 3600 + 24) {
            let o = self.offset(x0 - MAX_OFFSET_SECS + h * 3600)?;
            lo_off = lo_off.min(o);
            hi_off = hi_off.max(o);
        }
        // A wall-clock time L fires at or after L - hi_off and at or before
        // L - lo_off: only L > t + lo_off can fire after t.
        let from = (t + lo_off + 1 - x0).max(0);
        if from >= i64::from(DAY_SECS) {
            return None;
        }
        let mut from = from as u32;
        let mut best: Option<i64> = None;
        while let Some(tod) = self.next_time_of_day(from) {
            let wall = x0 + i64::from(tod);
            if best.is_some_and(|b| wall - hi_off >= b) {
                break;
            }
            let local = midnight + chrono::TimeDelta::seconds(i64::from(tod));
            for at in self.instants(local).into_iter().flatten() {
                if at > t && best.is_none_or(|b| at < b) {
                    best = Some(at);
                }
            }
            from = tod + 1;
            if from >= DAY_SECS {
                break;
            }
        }
        best
    }
}
