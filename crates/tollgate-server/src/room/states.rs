//! A room's state (open, paused, closed, sold out or stepped aside:
//! passthrough) and its schedule (an opening time with a pre-queue before
//! it, a closing time), kept in its gate's door (`tollgate::Door`) so
//! every server sharing the store sees one state, changed in one atomic
//! step with the gate's pause and, for sold out, the drop of the whole
//! line. The opening and the closing are the door's timers: the store runs
//! each at its own time, in the first operation on the room after it, so
//! no server has to be there and no two can disagree.
//!
//! The door's note says which state the room is in, how long its
//! pre-queue is, and what the config named when it was last applied:
//! `state=<state> prequeue=<ms> config=<state>,<opens>,<closes>,<ms>`. At
//! start a server applies its config's state and schedule only when they
//! differ from what the store says was configured (the operator changed
//! the file), so a restart keeps what was set at runtime (a sold-out room
//! stays sold out, an opening already run is not scheduled again) but a
//! changed config wins.

use std::time::Duration;

use serde_json::{Value, json};
use tollgate::{Door, DoorChange};

/// A room's state (`state` in `[rooms.NAME]`, `PUT /v1/rooms/{room}/state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum RoomState {
    /// Admits up to the capacity, queues the rest.
    #[default]
    Open,
    /// Admits nobody new: everyone queues (the gate's pause).
    Paused,
    /// Nobody new joins (a closed page); those inside finish and those
    /// already in line keep their places and are admitted in turn.
    Closed,
    /// Nobody new joins, and everyone waiting is told at once and let go
    /// (the line is dropped in the same step); those inside finish.
    SoldOut,
    /// The room steps aside: every request goes to the site, with no line
    /// and no token, its settings kept for when it is opened again.
    Passthrough,
}

/// Every state, by its name.
pub(crate) const STATES: [(RoomState, &str); 5] = [
    (RoomState::Open, "open"),
    (RoomState::Paused, "paused"),
    (RoomState::Closed, "closed"),
    (RoomState::SoldOut, "sold_out"),
    (RoomState::Passthrough, "passthrough"),
];

impl RoomState {
    pub(crate) fn name(self) -> &'static str {
        STATES.iter().find(|(s, _)| *s == self).map_or("open", |(_, n)| n)
    }

    /// A state by its name; the error lists the names.
    pub(crate) fn parse(name: &str) -> Result<RoomState, String> {
        STATES
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(s, _)| *s)
            .ok_or_else(|| {
                let names: Vec<&str> = STATES.iter().map(|(_, n)| *n).collect();
                format!("unknown state {name:?}: use one of {}", names.join(", "))
            })
    }

    /// Whether newcomers are refused by the gate's door.
    pub(crate) fn refuses_newcomers(self) -> bool {
        matches!(self, RoomState::Closed | RoomState::SoldOut)
    }

    /// The state in the answers of the admin API and of a visitor's status.
    pub(crate) fn json(self) -> Value {
        Value::from(self.name())
    }
}

/// When a room opens and closes (`opens_at`, `closes_at` and `prequeue`
/// in `[rooms.NAME]`, `PUT /v1/rooms/{room}/schedule`). An opening or
/// closing that has run reads `None`: it is the door's timer, gone once
/// run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Schedule {
    /// Nobody is admitted before this (ms since the Unix epoch, the
    /// store's clock); at it, the capacity is admitted from the head of
    /// the pre-queue in one step.
    pub(crate) opens_at_ms: Option<u64>,
    /// Visitors may join the line from this long before the opening;
    /// earlier they get the "not open yet" page.
    pub(crate) prequeue: Duration,
    /// The room closes to newcomers at this (ms since the Unix epoch).
    pub(crate) closes_at_ms: Option<u64>,
    /// A room that draws its pre-queue's order (`order_at_open =
    /// "random"`): the draw's name, which its seed derives from (see
    /// draw.rs): when its opening was first scheduled (ms, this server's
    /// clock). Kept while that opening is moved, so the seed committed to
    /// stays; kept after it, so the draw can be revealed. Never in the
    /// config: `Schedule::for_draw` names it.
    pub(crate) draw_ms: Option<u64>,
}

/// The pre-queue when a schedule names none.
pub(crate) const DEFAULT_PREQUEUE: Duration = Duration::from_secs(30 * 60);

impl Schedule {
    /// Where a visitor arriving at `now_ms` (this server's clock) stands.
    pub(crate) fn phase(&self, now_ms: u64) -> Phase {
        match self.opens_at_ms {
            Some(at) if now_ms < at.saturating_sub(self.prequeue.as_millis() as u64) => Phase::NotOpen(at),
            Some(at) if now_ms < at => Phase::PreQueue(at),
            _ => Phase::Open,
        }
    }

    /// This schedule as set at `now_ms` over `stored` (what the store
    /// had), in a room that draws (`draws`): a pending opening keeps the
    /// draw's name of the one it moves, or is a new draw named `now_ms`;
    /// without one, the last draw's name stays (its seed is revealed).
    pub(crate) fn for_draw(mut self, stored: &Schedule, draws: bool, now_ms: u64) -> Schedule {
        // (The stored opening is pending as long as the store holds for
        // it: this server's clock may be ahead of the store's.)
        self.draw_ms = match (draws, self.pending(now_ms), stored.opens_at_ms) {
            (false, _, _) => None,
            (true, Some(_), Some(_)) if stored.draw_ms.is_some() => stored.draw_ms,
            (true, Some(_), _) => Some(now_ms),
            (true, None, _) => stored.draw_ms,
        };
        self
    }

    /// The schedule without its draw's name (to compare with the config's).
    pub(crate) fn as_configured(self) -> Schedule {
        Schedule {
            draw_ms: None,
            ..self
        }
    }

    /// The opening a waiter at `now_ms` still waits for, if any.
    pub(crate) fn pending(&self, now_ms: u64) -> Option<u64> {
        self.opens_at_ms.filter(|at| *at > now_ms)
    }

    /// The schedule in the admin API's answers: times in RFC 3339 (UTC).
    pub(crate) fn json(&self) -> Value {
        json!({
            "opens_at": self.opens_at_ms.map(rfc3339),
            "closes_at": self.closes_at_ms.map(rfc3339),
            "prequeue_seconds": self.prequeue.as_secs(),
        })
    }
}

/// A scheduled room's phase, by the clock of the server asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Before the pre-queue opens (the opening time, ms).
    NotOpen(u64),
    /// The pre-queue: visitors join and wait for the opening (its time).
    PreQueue(u64),
    /// Open (or not scheduled).
    Open,
}

/// A time in ms since the Unix epoch as RFC 3339, UTC, to the second.
pub(crate) fn rfc3339(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64).map_or_else(String::new, |t| {
        t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    })
}

/// An RFC 3339 time (with its offset) as ms since the Unix epoch.
pub(crate) fn parse_time(field: &str, text: &str) -> Result<u64, String> {
    let t = chrono::DateTime::parse_from_rfc3339(text.trim()).map_err(|e| {
        format!("{field}: {text:?} is not an RFC 3339 time with an offset ({e}), e.g. 2026-12-01T10:00:00Z")
    })?;
    u64::try_from(t.timestamp_millis())
        .ok()
        .filter(|ms| *ms <= tollgate::MAX_DOOR_TIME_MS)
        .ok_or_else(|| format!("{field}: {text:?} is out of range (1970 to 9999)"))
}

/// What `[rooms.NAME]` names: the state and the schedule, applied at
/// start when they differ from what the store says the config named last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Configured {
    pub(crate) state: RoomState,
    pub(crate) schedule: Schedule,
}

impl Configured {
    /// The config's mark in the door's note.
    fn mark(&self) -> String {
        let t = |ms: Option<u64>| ms.map_or_else(|| "-".to_owned(), |ms| ms.to_string());
        format!(
            "{},{},{},{}",
            self.state.name(),
            t(self.schedule.opens_at_ms),
            t(self.schedule.closes_at_ms),
            self.schedule.prequeue.as_millis()
        )
    }
}

/// What a room's gate says of the room: its state and schedule, and
/// whether the config it was last configured from is `configured`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stored {
    pub(crate) state: RoomState,
    pub(crate) schedule: Schedule,
    mark: Option<String>,
}

impl Stored {
    /// The room as a gate's door and pause say. A door no room wrote (no
    /// note): closed or open by the door, paused by the pause.
    pub(crate) fn of(paused: bool, door: &Door) -> Stored {
        let field = |key: &str| {
            door.note
                .split(' ')
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        };
        let noted = field("state")
            .and_then(|v| RoomState::parse(v).ok())
            .filter(|s| s.refuses_newcomers() == door.closed);
        let state = match noted {
            // The pause is the gate's: an admin's pause of a room noted
            // open shows as paused, and the other way round.
            Some(RoomState::Open | RoomState::Paused) | None if paused && !door.closed => RoomState::Paused,
            Some(RoomState::Paused) => RoomState::Open,
            Some(s) => s,
            None if door.closed => RoomState::Closed,
            None => RoomState::Open,
        };
        let prequeue = field("prequeue")
            .and_then(|v| v.parse().ok())
            .map_or(DEFAULT_PREQUEUE, Duration::from_millis);
        Stored {
            state,
            schedule: Schedule {
                opens_at_ms: door.opens_at_ms,
                prequeue,
                closes_at_ms: door.closes_at_ms,
                draw_ms: field("draw").and_then(|v| v.parse().ok()),
            },
            mark: field("config").map(str::to_owned),
        }
    }

    /// Whether the store was last configured from `configured`.
    pub(crate) fn configured_from(&self, configured: &Configured) -> bool {
        self.mark.as_deref() == Some(configured.mark().as_str())
    }
}

/// The gate's step into `state` with `schedule`, `configured` being what
/// the config names. Only a move into sold out drops the line (a
/// write-back of lost settings has no line to drop, and must not drop the
/// visitors who joined meanwhile).
pub(crate) fn change(
    state: RoomState,
    schedule: &Schedule,
    configured: &Configured,
    drop_line: bool,
) -> DoorChange {
    DoorChange {
        door: Door {
            closed: state.refuses_newcomers(),
            note: format!(
                "state={} prequeue={} config={}{}",
                state.name(),
                schedule.prequeue.as_millis(),
                configured.mark(),
                schedule
                    .draw_ms
                    .map_or_else(String::new, |ms| format!(" draw={ms}"))
            ),
            opens_at_ms: schedule.opens_at_ms,
            closes_at_ms: schedule.closes_at_ms,
        },
        paused: Some(state == RoomState::Paused),
        drop_line: drop_line && state == RoomState::SoldOut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_and_schedule_reads_back_from_its_door() {
        let schedules = [
            Schedule::default(),
            Schedule {
                opens_at_ms: Some(1_764_583_200_000),
                prequeue: Duration::from_secs(90),
                closes_at_ms: Some(1_764_590_400_000),
                draw_ms: Some(1_764_500_000_000),
            },
        ];
        for (state, name) in STATES {
            assert_eq!(RoomState::parse(name), Ok(state));
            for schedule in schedules {
                let configured = Configured {
                    state: RoomState::Closed,
                    schedule,
                };
                let c = change(state, &schedule, &configured, true);
                assert_eq!(c.drop_line, state == RoomState::SoldOut);
                assert!(c.door.note.len() <= tollgate::MAX_DOOR_NOTE, "{}", c.door.note);
                let stored = Stored::of(c.paused == Some(true), &c.door);
                assert_eq!((stored.state, stored.schedule), (state, schedule));
                assert!(stored.configured_from(&configured));
                assert!(!stored.configured_from(&Configured::default()));
            }
        }
        assert!(RoomState::parse("Open").is_err());
        assert!(RoomState::parse("").unwrap_err().contains("sold_out"));
    }

    #[test]
    fn a_door_without_a_room_note_reads_by_the_door_and_the_pause() {
        let door = |closed: bool, note: &str| Door {
            closed,
            note: note.into(),
            ..Door::default()
        };
        let of = |paused, d: &Door| Stored::of(paused, d).state;
        assert_eq!(of(false, &door(false, "")), RoomState::Open);
        assert_eq!(of(true, &door(false, "")), RoomState::Paused);
        assert_eq!(of(false, &door(true, "x")), RoomState::Closed);
        assert_eq!(
            Stored::of(false, &door(false, "")).schedule.prequeue,
            DEFAULT_PREQUEUE
        );
        // The gate's pause, set by the pause route, wins over an open note.
        let open = change(
            RoomState::Open,
            &Schedule::default(),
            &Configured::default(),
            false,
        )
        .door;
        assert_eq!(of(true, &open), RoomState::Paused);
        // A note that contradicts the door is not believed.
        assert_eq!(of(false, &door(false, "state=sold_out")), RoomState::Open);
        // A room whose closing time ran reads closed.
        let mut sale = change(
            RoomState::Open,
            &Schedule::default(),
            &Configured::default(),
            false,
        )
        .door;
        sale.closed = true;
        assert_eq!(of(false, &sale), RoomState::Closed);
    }

    #[test]
    fn phases_and_times() {
        let s = Schedule {
            opens_at_ms: Some(10_000),
            prequeue: Duration::from_secs(4),
            closes_at_ms: None,
            draw_ms: None,
        };
        // A draw is named when its opening is first scheduled, and keeps
        // its name while the opening moves and after it.
        let drawn = s.for_draw(&Schedule::default(), true, 5_000);
        assert_eq!(drawn.draw_ms, Some(5_000));
        let moved = Schedule {
            opens_at_ms: Some(20_000),
            ..s
        }
        .for_draw(&drawn, true, 7_000);
        assert_eq!(moved.draw_ms, Some(5_000));
        let opened = Schedule::default().for_draw(&moved, true, 8_000);
        assert_eq!(opened.draw_ms, Some(5_000));
        let ran = Schedule {
            opens_at_ms: None,
            ..moved
        };
        let next = s.for_draw(&ran, true, 9_500);
        assert_eq!(next.draw_ms, Some(9_500), "the last opening ran: a new draw");
        // The store still holds for the opening (its clock trails this
        // server's): the same draw, moved.
        let held = Schedule {
            opens_at_ms: Some(9_000),
            ..moved
        };
        assert_eq!(s.for_draw(&held, true, 9_500).draw_ms, Some(5_000));
        assert_eq!(s.for_draw(&drawn, false, 6_000).draw_ms, None);
        assert_eq!(
            moved.as_configured(),
            Schedule {
                opens_at_ms: Some(20_000),
                ..s
            }
        );
        assert_eq!(s.phase(5_999), Phase::NotOpen(10_000));
        assert_eq!(s.phase(6_000), Phase::PreQueue(10_000));
        assert_eq!(s.phase(9_999), Phase::PreQueue(10_000));
        assert_eq!(s.phase(10_000), Phase::Open);
        assert_eq!(Schedule::default().phase(0), Phase::Open);
        assert_eq!(rfc3339(1_764_583_200_000), "2025-12-01T10:00:00Z");
        assert_eq!(
            parse_time("opens_at", "2025-12-01T11:00:00+01:00"),
            Ok(1_764_583_200_000)
        );
        assert!(
            parse_time("opens_at", "2025-12-01 10:00")
                .unwrap_err()
                .contains("opens_at")
        );
        assert!(parse_time("opens_at", "1969-12-31T23:59:59Z").is_err());
    }
}
