//! A room's state: open, paused, closed, sold out or stepped aside
//! (passthrough), kept in its gate's door (`tollgate::Door`) so every
//! server sharing the store sees one state, changed in one atomic step
//! with the gate's pause and, for sold out, the drop of the whole line.
//!
//! The door's note says which state the room is in and which state the
//! config named when it was last applied: `state=<state> config=<state>`.
//! At start a server applies its config's `state` only when that differs
//! from the one the store says was configured (the operator changed the
//! file), so a restart keeps a state set at runtime (a sold-out room stays
//! sold out) but a changed config wins.

use serde_json::Value;
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

    /// The gate's step into this state, `configured` being the state the
    /// config names. Only a move into sold out drops the line (a
    /// write-back of lost settings has no line to drop, and must not drop
    /// the visitors who joined meanwhile).
    pub(crate) fn change(self, configured: RoomState, drop_line: bool) -> DoorChange {
        DoorChange {
            door: Door {
                closed: self.refuses_newcomers(),
                note: format!("state={} config={}", self.name(), configured.name()),
            },
            paused: Some(self == RoomState::Paused),
            drop_line: drop_line && self == RoomState::SoldOut,
        }
    }

    /// The state a gate's door and pause say, and the configured state
    /// the note names, if any. A door no room wrote (no note): closed or
    /// open by the door, paused by the pause.
    pub(crate) fn of(paused: bool, door: &Door) -> (RoomState, Option<RoomState>) {
        let field = |key: &str| {
            door.note
                .split(' ')
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                .and_then(|v| RoomState::parse(v).ok())
        };
        let noted = field("state").filter(|s| s.refuses_newcomers() == door.closed);
        let state = match noted {
            // The pause is the gate's: an admin's pause of a room noted
            // open shows as paused, and the other way round.
            Some(RoomState::Open | RoomState::Paused) | None if paused && !door.closed => RoomState::Paused,
            Some(RoomState::Paused) => RoomState::Open,
            Some(s) => s,
            None if door.closed => RoomState::Closed,
            None => RoomState::Open,
        };
        (state, field("config"))
    }

    /// The state in the answers of the admin API and of a visitor's status.
    pub(crate) fn json(self) -> Value {
        Value::from(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_reads_back_from_its_door() {
        for (state, name) in STATES {
            assert_eq!(RoomState::parse(name), Ok(state));
            for configured in [RoomState::Open, RoomState::Closed] {
                let c = state.change(configured, true);
                assert_eq!(c.drop_line, state == RoomState::SoldOut);
                let paused = c.paused == Some(true);
                assert_eq!(RoomState::of(paused, &c.door), (state, Some(configured)));
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
        };
        assert_eq!(RoomState::of(false, &door(false, "")), (RoomState::Open, None));
        assert_eq!(RoomState::of(true, &door(false, "")), (RoomState::Paused, None));
        assert_eq!(RoomState::of(false, &door(true, "x")), (RoomState::Closed, None));
        // The gate's pause, set by the pause route, wins over an open note.
        let open = RoomState::Open.change(RoomState::Open, false).door;
        assert_eq!(RoomState::of(true, &open).0, RoomState::Paused);
        // A note that contradicts the door is not believed.
        assert_eq!(
            RoomState::of(false, &door(false, "state=sold_out config=open")),
            (RoomState::Open, Some(RoomState::Open))
        );
    }
}
