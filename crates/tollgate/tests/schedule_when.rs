//! The time rules of schedules (issue 17): `When::next_after` and
//! `When::due_ticks` are pure, so every test here is arithmetic on fixed
//! instants; no clock, no store.

use std::time::Duration;

use tollgate::schedule::{MAX_CATCH_UP, SKIP_GRACE_MS};
use tollgate::{ErrorKind, Misfire, When, WhenPart};

/// Unix ms of an RFC 3339 time ("2026-03-29T03:00:00+02:00").
fn ms(text: &str) -> u64 {
    let at = chrono::DateTime::parse_from_rfc3339(text).expect("RFC 3339");
    u64::try_from(at.timestamp_millis()).expect("after 1970")
}

fn when(text: &str) -> When {
    When::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

/// The ticks after `from` up to and including `to`.
fn ticks(w: &When, from: u64, to: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut t = from;
    while let Some(next) = w.next_after(t).filter(|&n| n <= to) {
        out.push(next);
        t = next;
    }
    out
}

fn all(texts: &[&str]) -> Vec<u64> {
    texts.iter().map(|t| ms(t)).collect()
}

// ---- spring forward: a fixed time in the gap fires once, at the gap's end

#[test]
fn berlin_spring_forward_fixed_time_fires_once_at_the_end_of_the_gap() {
    // 2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist.
    let w = when("TZ=Europe/Berlin 30 2 * * *");
    assert_eq!(
        ticks(
            &w,
            ms("2026-03-27T12:00:00+01:00"),
            ms("2026-03-31T12:00:00+02:00")
        ),
        all(&[
            "2026-03-28T02:30:00+01:00",
            "2026-03-29T03:00:00+02:00",
            "2026-03-30T02:30:00+02:00",
            "2026-03-31T02:30:00+02:00",
        ])
    );
    // Several times in the gap: still one tick there.
    let w = when("TZ=Europe/Berlin 0,15,30,45 2 * * *");
    assert_eq!(
        ticks(
            &w,
            ms("2026-03-29T00:00:00+01:00"),
            ms("2026-03-29T12:00:00+02:00")
        ),
        all(&["2026-03-29T03:00:00+02:00"])
    );
    // A time in the gap and 03:00 itself: one tick, not two.
    let w = when("TZ=Europe/Berlin 0 2,3 * * *");
    assert_eq!(
        ticks(
            &w,
            ms("2026-03-29T00:00:00+01:00"),
            ms("2026-03-29T12:00:00+02:00")
        ),
        all(&["2026-03-29T03:00:00+02:00"])
    );
}

#[test]
fn new_york_spring_forward_fixed_time_fires_once_at_the_end_of_the_gap() {
    // 2026-03-08: 02:00 EST jumps to 03:00 EDT.
    let w = when("TZ=America/New_York 30 2 * * *");
    assert_eq!(
        ticks(
            &w,
            ms("2026-03-07T12:00:00-05:00"),
            ms("2026-03-09T12:00:00-04:00")
        ),
        all(&["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00",])
    );
    // Six-field form, with seconds.
    let w = when("TZ=America/New_York 15 30 2 * * *");
    assert_eq!(
        w.next_after(ms("2026-03-08T00:00:00-05:00")),
        Some(ms("2026-03-08T03:00:00-04:00"))
    );
}

// ---- fall back: a fixed time in the repeated hour fires at its first pass

#[test]
fn berlin_fall_back_fixed_time_fires_once_at_the_first_pass() {
    // 2026-10-25: 03:00 CEST goes back to 02:00 CET; 02:30 happens twice.
    let w = when("TZ=Europe/Berlin 30 2 * * *");
    assert_eq!(
        ticks(
            &w,
            ms("2026-10-24T12:00:00+02:00"),
            ms("2026-10-26T12:00:00+01:00")
        ),
        all(&["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00",])
    );
    // Asked from between the two passes: the second pass does not fire.
    assert_eq!(
        w.next_after(ms("2026-10-25T02:45:00+02:00")),
        Some(ms("2026-10-26T02:30:00+01:00"))
    );
}

#[test]
fn new_york_fall_back_fixed_time_fires_once_at_the_first_pass() {
    // 2026-11-01: 02:00 EDT goes back to 01:00 EST; 01:30 happens twice.
    let w = when("TZ=America/New_York 30 1 * * *");
    assert_eq!(
        ticks(
            &w,
            ms("2026-10-31T12:00:00-04:00"),
            ms("2026-11-02T12:00:00-05:00")
        ),
        all(&["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00",])
    );
}

#[test]
fn santiago_changes_at_midnight() {
    // Chile moves clocks at midnight: on 2026-09-06 00:00 jumps to 01:00 (so
    // the day has no midnight), and on 2026-04-04 23:00-24:00 happens twice
    // (the second pass after 24:00 -03 became 23:00 -04).
    let w = when("TZ=America/Santiago 0 0 * * *");
    assert_eq!(
        ticks(
            &w,
            ms("2026-09-05T12:00:00-04:00"),
            ms("2026-09-07T12:00:00-03:00")
        ),
        all(&["2026-09-06T01:00:00-03:00", "2026-09-07T00:00:00-03:00"])
    );
    let w = when("TZ=America/Santiago 30 23 * * *");
    assert_eq!(
        ticks(
            &w,
            ms("2026-04-04T12:00:00-03:00"),
            ms("2026-04-06T00:00:00-04:00")
        ),
        all(&["2026-04-04T23:30:00-03:00", "2026-04-05T23:30:00-04:00"])
    );
    let w = when("TZ=America/Santiago */30 * * * *");
    let from = ms("2026-04-04T22:00:00-03:00");
    let got = ticks(&w, from, from + 4 * 3_600_000);
    let want: Vec<u64> = (1..=8).map(|k| from + k * 1_800_000).collect();
    assert_eq!(got, want);
}

// ---- wildcard hours: real elapsed time

#[test]
fn every_fifteen_minutes_follows_elapsed_time_across_both_changes() {
    for (zone, spring, fall) in [
        ("Europe/Berlin", "2026-03-29T01:00:00Z", "2026-10-25T01:00:00Z"),
        ("America/New_York", "2026-03-08T07:00:00Z", "2026-11-01T06:00:00Z"),
    ] {
        let w = when(&format!("TZ={zone} */15 * * * *"));
        for change in [spring, fall] {
            let c = ms(change);
            let got = ticks(&w, c - 3 * 3_600_000, c + 3 * 3_600_000);
            let want: Vec<u64> = (1..=24).map(|k| c - 3 * 3_600_000 + k * 900_000).collect();
            assert_eq!(got, want, "{zone} around {change}");
        }
    }
}

#[test]
fn hourly_fires_23_and_25_times_on_the_change_days() {
    let w = when("TZ=America/New_York @hourly");
    let spring = ticks(
        &w,
        ms("2026-03-08T00:00:00-05:00") - 1,
        ms("2026-03-08T23:59:59-04:00"),
    );
    assert_eq!(spring.len(), 23);
    let fall = ticks(
        &w,
        ms("2026-11-01T00:00:00-04:00") - 1,
        ms("2026-11-01T23:59:59-05:00"),
    );
    assert_eq!(fall.len(), 25);
    // Both passes of 01:00 fire.
    assert!(fall.contains(&ms("2026-11-01T01:00:00-04:00")));
    assert!(fall.contains(&ms("2026-11-01T01:00:00-05:00")));
}

#[test]
fn an_interval_ignores_daylight_saving() {
    let anchor = ms("2026-03-29T00:05:00Z");
    let w = When::every(Duration::from_secs(600), anchor).expect("valid");
    let got = ticks(&w, ms("2026-03-28T23:00:00Z"), ms("2026-03-29T03:00:00Z"));
    let want: Vec<u64> = (0..18).map(|k| anchor + k * 600_000).collect();
    assert_eq!(got, want);
    // Same through text, and in the fall.
    let w = when(&format!("every 10m from {anchor}"));
    let got = ticks(&w, ms("2026-10-25T00:00:00Z"), ms("2026-10-25T02:00:00Z"));
    assert_eq!(got.len(), 12);
    assert!(got.windows(2).all(|p| p[1] - p[0] == 600_000));
    assert_eq!((got[0] - anchor) % 600_000, 0);
}

// ---- zones without DST

#[test]
fn kolkata_and_utc_are_plain() {
    let w = when("TZ=Asia/Kolkata 0 9 * * *");
    assert_eq!(
        ticks(&w, ms("2026-03-28T00:00:00Z"), ms("2026-03-31T00:00:00Z")),
        all(&[
            "2026-03-28T03:30:00Z",
            "2026-03-29T03:30:00Z",
            "2026-03-30T03:30:00Z",
        ])
    );
    let w = when("0 0 * * *");
    assert_eq!(
        ticks(&w, ms("2026-10-24T12:00:00Z"), ms("2026-10-27T00:00:00Z")),
        all(&[
            "2026-10-25T00:00:00Z",
            "2026-10-26T00:00:00Z",
            "2026-10-27T00:00:00Z",
        ])
    );
    // A macro fires as its expansion does.
    let (from, to) = (ms("2026-01-01T00:00:00Z"), ms("2026-02-01T00:00:00Z"));
    assert_eq!(
        ticks(&when("@daily"), from, to),
        ticks(&when("0 0 * * *"), from, to)
    );
    assert_eq!(
        ticks(&when("@weekly"), from, to),
        ticks(&when("0 0 * * 0"), from, to)
    );
}

// ---- calendar fields

#[test]
fn weekdays_at_nine() {
    let w = when("TZ=Europe/Berlin 0 9 * * 1-5");
    // Friday 2026-11-20, after nine: the next is Monday.
    assert_eq!(
        w.next_after(ms("2026-11-20T10:00:00+01:00")),
        Some(ms("2026-11-23T09:00:00+01:00"))
    );
    let week = ticks(
        &w,
        ms("2026-11-22T00:00:00+01:00"),
        ms("2026-11-29T00:00:00+01:00"),
    );
    assert_eq!(week.len(), 5);
    assert_eq!(when("0 9 * * MON-FRI"), when("0 9 * * MON-FRI"));
    assert_eq!(
        ticks(
            &when("0 9 * * mon-fri"),
            ms("2026-11-22T00:00:00Z"),
            ms("2026-11-29T00:00:00Z")
        ),
        ticks(
            &when("0 9 * * 1-5"),
            ms("2026-11-22T00:00:00Z"),
            ms("2026-11-29T00:00:00Z")
        ),
    );
    // Sunday is 0 and 7.
    assert_eq!(
        when("0 9 * * 7").next_after(ms("2026-11-20T00:00:00Z")),
        Some(ms("2026-11-22T09:00:00Z"))
    );
}

#[test]
fn day_31_skips_short_months() {
    let w = when("0 0 31 * *");
    assert_eq!(
        ticks(&w, ms("2026-01-01T00:00:00Z"), ms("2026-12-31T23:00:00Z")),
        all(&[
            "2026-01-31T00:00:00Z",
            "2026-03-31T00:00:00Z",
            "2026-05-31T00:00:00Z",
            "2026-07-31T00:00:00Z",
            "2026-08-31T00:00:00Z",
            "2026-10-31T00:00:00Z",
            "2026-12-31T00:00:00Z",
        ])
    );
}

#[test]
fn both_day_fields_restricted_match_either() {
    // Vixie cron: the 1st of the month or any Monday.
    let w = when("0 0 1 * 1");
    assert_eq!(
        ticks(&w, ms("2026-11-28T00:00:00Z"), ms("2026-12-09T00:00:00Z")),
        all(&[
            "2026-11-30T00:00:00Z",
            "2026-12-01T00:00:00Z",
            "2026-12-07T00:00:00Z",
        ])
    );
}

#[test]
fn leap_day() {
    let w = when("0 12 29 2 *");
    assert_eq!(
        w.next_after(ms("2026-01-01T00:00:00Z")),
        Some(ms("2028-02-29T12:00:00Z"))
    );
    // 2100 is not a leap year.
    assert_eq!(
        w.next_after(ms("2096-03-01T00:00:00Z")),
        Some(ms("2104-02-29T12:00:00Z"))
    );
}

// ---- determinism: any t before a tick gives that tick

#[test]
fn any_start_within_an_interval_gives_the_same_tick() {
    for text in [
        "TZ=Europe/Berlin */15 * * * *",
        "TZ=Europe/Berlin 30 2 * * *",
        "TZ=America/New_York 30 1 * * *",
        "TZ=America/New_York 0 */2 * * *",
        "TZ=Asia/Kolkata 0 9 * * 1-5",
        "TZ=Australia/Lord_Howe 15 2 * * *",
        "*/7 * * * * *",
        "every 90s from 1767225600000",
    ] {
        let w = when(text);
        let mut prev = ms("2026-03-01T00:00:00Z");
        let end = ms("2026-11-15T00:00:00Z");
        let step = if text.contains("*/7 * * * * *") { 97 } else { 1 };
        let mut n = 0u64;
        while let Some(tick) = w.next_after(prev).filter(|&t| t <= end) {
            assert!(tick > prev && tick % 1000 == 0, "{text}: {tick} after {prev}");
            if n.is_multiple_of(step) {
                for t in [prev, prev + 1, prev + (tick - prev) / 3, tick - 1000, tick - 1] {
                    assert_eq!(w.next_after(t), Some(tick), "{text}: from {t}");
                }
            }
            n += 1;
            prev = tick;
            if text.contains("*/7 * * * * *") && n > 20_000 {
                break;
            }
        }
        assert!(n > 0, "{text}");
    }
}

// ---- misfires

#[test]
fn misfire_skip_once_all() {
    let w = when("0 * * * *");
    let ten = ms("2026-06-01T10:00:00Z");
    let thirteen = ms("2026-06-01T13:00:00Z");
    let ticks3 = all(&[
        "2026-06-01T10:00:00Z",
        "2026-06-01T11:00:00Z",
        "2026-06-01T12:00:00Z",
    ]);

    // Not due yet: nothing fires, the stored tick stays.
    let early = ms("2026-06-01T09:59:59Z");
    for p in [Misfire::Skip, Misfire::Once, Misfire::All] {
        assert_eq!(w.due_ticks(ten, early, p), (vec![], ten));
    }

    // On time (just after the tick): every policy fires it.
    let on_time = ten + 400;
    for p in [Misfire::Skip, Misfire::Once, Misfire::All] {
        assert_eq!(
            w.due_ticks(ten, on_time, p),
            (vec![ten], ms("2026-06-01T11:00:00Z"))
        );
    }

    // Down from before 10:00 to 12:10.
    let now = ms("2026-06-01T12:10:00Z");
    assert_eq!(w.due_ticks(ten, now, Misfire::Skip), (vec![], thirteen));
    assert_eq!(w.due_ticks(ten, now, Misfire::Once), (vec![ticks3[2]], thirteen));
    assert_eq!(w.due_ticks(ten, now, Misfire::All), (ticks3.clone(), thirteen));

    // Skip's grace: the latest tick still fires if less than 60 s late.
    let twelve = ticks3[2];
    assert_eq!(
        w.due_ticks(ten, twelve + SKIP_GRACE_MS - 1, Misfire::Skip),
        (vec![twelve], thirteen)
    );
    assert_eq!(
        w.due_ticks(ten, twelve + SKIP_GRACE_MS, Misfire::Skip),
        (vec![], thirteen)
    );
}

#[test]
fn misfire_all_is_bounded_to_the_newest_ticks() {
    // An every-second cron down for a week, and an interval down for years.
    for w in [
        when("* * * * * *"),
        When::every(Duration::from_secs(1), 0).expect("valid"),
    ] {
        let from = ms("2026-06-01T00:00:00Z");
        let now = ms("2026-06-08T00:00:00.500Z");
        let (fire, next) = w.due_ticks(from, now, Misfire::All);
        assert_eq!(fire.len(), MAX_CATCH_UP);
        assert_eq!(*fire.last().expect("some"), now - 500);
        assert_eq!(fire[0], now - 500 - 999_000);
        assert!(fire.windows(2).all(|p| p[1] - p[0] == 1000));
        assert_eq!(next, now + 500);
    }
    let w = When::every(Duration::from_secs(1), 0).expect("valid");
    let (fire, _) = w.due_ticks(0, 10_000_000_000, Misfire::All);
    assert_eq!(fire.len(), MAX_CATCH_UP);
    // Sparse ticks: all of them from the stored one on.
    let w = when("TZ=Europe/Berlin 30 2 * * *");
    let (fire, next) = w.due_ticks(
        ms("2026-03-27T02:30:00+01:00"),
        ms("2026-03-31T12:00:00+02:00"),
        Misfire::All,
    );
    assert_eq!(
        fire,
        all(&[
            "2026-03-27T02:30:00+01:00",
            "2026-03-28T02:30:00+01:00",
            "2026-03-29T03:00:00+02:00",
            "2026-03-30T02:30:00+02:00",
            "2026-03-31T02:30:00+02:00",
        ])
    );
    assert_eq!(next, ms("2026-04-01T02:30:00+02:00"));
}

#[test]
fn due_ticks_from_the_epoch() {
    let w = When::every(Duration::from_secs(5), 0).expect("valid");
    assert_eq!(
        w.due_ticks(0, 12_000, Misfire::All),
        (vec![0, 5000, 10_000], 15_000)
    );
    assert_eq!(w.next_after(0), Some(5000));
    let w = when("*/5 * * * * *");
    assert_eq!(
        w.due_ticks(0, 12_000, Misfire::All),
        (vec![0, 5000, 10_000], 15_000)
    );
}

// ---- text

#[test]
fn display_round_trips() {
    for text in [
        "30 2 * * *",
        "TZ=Europe/Berlin 30 2 * * *",
        "TZ=America/New_York @hourly",
        "0 0 9 * * MON-FRI",
        "every 30s",
        "every 1h 30m from 1767225600000",
    ] {
        let w = when(text);
        assert_eq!(w.to_string(), text);
        assert_eq!(when(&w.to_string()), w);
    }
    assert_eq!(when("  30   2 * *  * ").to_string(), "30 2 * * *");
    assert_eq!(
        when("CRON_TZ=Asia/Kolkata 0 9 * * *").to_string(),
        "TZ=Asia/Kolkata 0 9 * * *"
    );
    assert_eq!("once".parse::<Misfire>().expect("valid"), Misfire::Once);
    assert_eq!(Misfire::All.to_string(), "all");
}

#[test]
fn bad_input_names_the_field_and_what_is_allowed() {
    let cases: &[(&str, &str)] = &[
        ("61 * * * * *", "second field"),
        ("60 * * * *", "minute field"),
        ("* 24 * * *", "hour field"),
        ("* * 0 * *", "day-of-month field"),
        ("* * 32 * *", "day-of-month field"),
        ("* * * 13 *", "month field"),
        ("* * * FOO *", "month field"),
        ("* * * * 8", "day-of-week field"),
        ("* * * * FUNDAY", "day-of-week field"),
        ("*/0 * * * *", "minute field"),
        ("5-1 * * * *", "minute field"),
        ("x * * * *", "minute field"),
        ("1,,2 * * * *", "minute field"),
        ("* * L * *", "day-of-month field"),
        ("* * * *", "fields"),
        ("* * * * * * *", "fields"),
        ("@often", "macro"),
        ("0 0 30 2 *", "no date ever matches"),
        ("TZ=Mars/Olympus 0 0 * * *", "zone"),
        ("FOO=bar 0 0 * * *", "TZ="),
        ("every 0s", "interval"),
        ("every 500ms", "interval"),
        ("every 1500ms", "interval"),
        ("every 400days", "interval"),
        ("every banana", "interval"),
        ("every 30s from soon", "anchor"),
        ("", "fields"),
    ];
    for (text, says) in cases {
        let err = When::parse(text).expect_err(text);
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{text}");
        assert!(err.to_string().contains(says), "{text:?}: {err}");
        assert!(
            err.to_string().contains("allowed"),
            "{text:?} should say what is allowed: {err}"
        );
    }
    let err = When::cron("0 0 * * *", "Nowhere/Land").expect_err("zone");
    assert!(err.to_string().contains("IANA"), "{err}");
    let err = When::every(Duration::from_secs(10), 1500).expect_err("anchor");
    assert!(err.to_string().contains("anchor"), "{err}");
    assert!(When::every(Duration::ZERO, 0).is_err());
    assert!(When::every(Duration::from_secs(366 * 86_400 + 1), 0).is_err());
    assert!(When::every(Duration::from_secs(366 * 86_400), 0).is_ok());
    assert!("sometimes".parse::<Misfire>().is_err());
}

#[test]
fn a_zone_given_apart_applies_to_cron_and_the_error_names_the_wrong_input() {
    let berlin = When::parse_in("30 2 * * *", Some("Europe/Berlin")).expect("valid");
    assert_eq!(berlin, when("TZ=Europe/Berlin 30 2 * * *"));
    assert_eq!(
        When::parse_in(" every 5s ", None).expect("valid"),
        when("every 5s")
    );
    for (text, zone, part, says) in [
        ("61 2 * * *", None, WhenPart::When, "minute"),
        ("61 2 * * *", Some("UTC"), WhenPart::When, "minute"),
        ("TZ=Mars/Olympus 30 2 * * *", None, WhenPart::When, "Mars/Olympus"),
        ("30 2 * * *", Some("Mars/Olympus"), WhenPart::Zone, "Mars/Olympus"),
        ("every 5s", Some("Europe/Berlin"), WhenPart::Zone, "UTC"),
        ("EVERY 5s", Some("UTC"), WhenPart::Zone, "interval"),
        ("TZ=Asia/Tokyo @daily", Some("UTC"), WhenPart::Zone, "once"),
        ("every 0s", None, WhenPart::When, "interval"),
    ] {
        let (got, e) = When::parse_in(text, zone).expect_err(text);
        assert_eq!(got, part, "{text:?} in {zone:?}: {e}");
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{text:?}");
        assert!(
            e.message().contains(says),
            "{text:?} in {zone:?}: {e} should say {says}"
        );
    }
}
