//! Waiting rooms: a reverse proxy that admits at most N active visitors to
//! an unchanged upstream, queues the rest FIFO on a Gate, and shows them a
//! live page. See docs/ROOMS.md.
//!
//! A visitor is a lease (admitted) or a ticket (in line) on the room's gate,
//! named by an HMAC-signed token in a cookie (or the `Tollgate-Token`
//! header). Admission is the gate's: never more than its capacity, handed
//! to the head of the line in the same atomic step that frees a slot.

pub(crate) mod admin;
mod answers;
mod challenge;
mod config;
mod counters;
pub(crate) mod draw;
mod drawing;
pub(crate) mod events;
mod feeds;
mod lang;
mod notices;
mod page;
mod path;
mod proxy;
mod rooms;
mod states;
mod store_call;
mod token;
mod visit;
mod watch;

pub(crate) use self::answers::closed_at_start;
pub(crate) use self::config::{RoomError, RoomSettings};
pub(crate) use self::proxy::ViaTls;
pub(crate) use self::rooms::Rooms;
