//! A waiting visitor's event stream (`GET /.tollgate/<room>/events`, what
//! the waiting page listens to): position updates while the visitor
//! waits (each look is also the ticket's heartbeat), then `admitted` (the
//! page reloads and the visitor is let in) or `gone`.
//!
//! Bounded on three sides, so one visitor's token cannot load the store
//! that every lock, queue and room shares: opening a stream is a status
//! request (`status_rate`); one ticket has at most
//! [`MAX_STREAMS_PER_TICKET`] open on a server (429 past it); and every
//! stream takes a place in the server's `max_event_subscribers` (503 past
//! it). The streams of one ticket share one reader of its status on this
//! server, so the store is asked the same whether one tab listens or
//! several do, and nothing once the last one closes.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, Response, StatusCode, header};
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use tokio::sync::watch;
use tollgate::{Gate, TicketStatus};

use super::answers::JSON;
use super::page::Shown;
use super::store_call::ticket_status;
use super::watch::View;
use crate::api::streams::{Slot, Subscribers};

/// Event streams one ticket may have open on one server: a visitor with a
/// few tabs, not a flood.
pub(crate) const MAX_STREAMS_PER_TICKET: usize = 4;

/// What a visitor refused a stream is told to wait (s): streams end when
/// pages close.
const RETRY_SECONDS: u64 = 5;

/// How long a look waits for the grant: position changes show within it,
/// a grant at once.
const LOOK: Duration = Duration::from_secs(1);

/// What the ticket's reader saw last.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Look {
    /// Nothing yet.
    Unread,
    Queued(Shown),
    Admitted,
    Gone,
    /// The store could not be asked, the n-th time in a row (each is told).
    Unavailable(u64),
}

/// The tickets with streams open on this server, each with its reader.
#[derive(Debug, Default)]
pub(super) struct Feeds {
    by_ticket: Mutex<HashMap<String, Feed>>,
}

#[derive(Debug)]
struct Feed {
    look: watch::Receiver<Look>,
    streams: usize,
}

/// One stream's place in its ticket's feed; the last one to go ends the
/// reader.
#[derive(Debug)]
struct Place {
    feeds: Arc<Feeds>,
    ticket: String,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut by_ticket = self.feeds.by_ticket();
        if let Some(feed) = by_ticket.get_mut(&self.ticket) {
            feed.streams -= 1;
            if feed.streams == 0 {
                // The reader's channel loses its last receiver: it stops.
                by_ticket.remove(&self.ticket);
            }
        }
    }
}

impl Feeds {
    fn by_ticket(&self) -> std::sync::MutexGuard<'_, HashMap<String, Feed>> {
        self.by_ticket
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A place in `ticket`'s feed (starting its reader on `gate` if it is
    /// the first), or `None` when it has [`MAX_STREAMS_PER_TICKET`].
    fn join(
        self: &Arc<Self>,
        gate: &Gate,
        view: &Arc<View>,
        ticket: &str,
        timeout: Duration,
    ) -> Option<(Place, watch::Receiver<Look>)> {
        let mut by_ticket = self.by_ticket();
        let look = match by_ticket.get_mut(ticket) {
            Some(feed) if feed.streams >= MAX_STREAMS_PER_TICKET => return None,
            Some(feed) => {
                feed.streams += 1;
                feed.look.clone()
            }
            None => {
                let (tx, look) = watch::channel(Look::Unread);
                tokio::spawn(read(gate.clone(), view.clone(), ticket.to_owned(), timeout, tx));
                by_ticket.insert(
                    ticket.to_owned(),
                    Feed {
                        look: look.clone(),
                        streams: 1,
                    },
                );
                look
            }
        };
        let place = Place {
            feeds: self.clone(),
            ticket: ticket.to_owned(),
        };
        Some((place, look))
    }

    /// Tickets with a reader on this server now.
    #[cfg(test)]
    fn readers(&self) -> usize {
        self.by_ticket().len()
    }
}

/// Reads `ticket`'s status until it is granted or gone, or nobody listens
/// any more, telling each change to `tx`.
async fn read(gate: Gate, view: Arc<View>, ticket: String, timeout: Duration, tx: watch::Sender<Look>) {
    let mut failures = 0;
    loop {
        // The first look answers at once; later ones wait for the grant.
        let wait = if *tx.borrow() == Look::Unread {
            Duration::ZERO
        } else {
            LOOK
        };
        let status = tokio::select! {
            status = ticket_status(timeout + wait, gate.wait_status(&ticket, wait)) => status,
            () = tx.closed() => return,
        };
        let look = match status {
            // (The room's state too: a change shows within a look.)
            Ok(TicketStatus::Queued(place)) => Look::Queued(Shown::of(&place, view.settings())),
            Ok(TicketStatus::Granted(_)) => Look::Admitted,
            Ok(TicketStatus::Gone) => Look::Gone,
            Err(_) => {
                failures += 1;
                Look::Unavailable(failures)
            }
        };
        if !matches!(look, Look::Unavailable(_)) {
            failures = 0;
        }
        tx.send_if_modified(|seen| std::mem::replace(seen, look) != look);
        match look {
            Look::Admitted | Look::Gone => return,
            // The store is unreachable: keep trying, once a second.
            Look::Unavailable(_) => tokio::select! {
                () = tokio::time::sleep(LOOK) => {}
                () = tx.closed() => return,
            },
            Look::Unread | Look::Queued(_) => {}
        }
    }
}

fn event(look: Look) -> Option<Event> {
    Some(match look {
        Look::Unread => return None,
        Look::Queued(shown) => Event::default().event("position").data(shown.json().to_string()),
        Look::Admitted => Event::default().event("admitted").data("{}"),
        Look::Gone => Event::default().event("gone").data("{}"),
        Look::Unavailable(_) => Event::default().event("unavailable").data("{}"),
    })
}

/// A refusal as the room's JSON error, with `Retry-After`.
fn refused(status: StatusCode, code: &str, message: &str) -> Response<Body> {
    let mut r = Response::new(Body::from(tollgate::error_body(code, message)));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_SECONDS));
    r
}

/// The stream of a waiting visitor's `ticket` (its status request already
/// counted against `status_rate`), or 429 `too_many_streams` when the
/// ticket has [`MAX_STREAMS_PER_TICKET`] open here, 503
/// `too_many_subscribers` past the server's `max_event_subscribers`.
pub(super) fn events(
    feeds: &Arc<Feeds>,
    gate: &Gate,
    view: &Arc<View>,
    timeout: Duration,
    subscribers: &Arc<Subscribers>,
    ticket: &str,
) -> Response<Body> {
    let Some((place, look)) = feeds.join(gate, view, ticket, timeout) else {
        return refused(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_streams",
            &format!(
                "this place in line already has {MAX_STREAMS_PER_TICKET} event streams open; your place is kept"
            ),
        );
    };
    let slot = match subscribers.take() {
        Ok(slot) => slot,
        Err(e) => {
            let mut r = e.into_response();
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_SECONDS));
            return r;
        }
    };
    struct Listening {
        look: watch::Receiver<Look>,
        last: Look,
        done: bool,
        _place: Place,
        _slot: Slot,
    }
    let start = Listening {
        look,
        last: Look::Unread,
        done: false,
        _place: place,
        _slot: slot,
    };
    let stream = futures_util::stream::unfold(start, |mut l| async move {
        while !l.done {
            let now = *l.look.borrow_and_update();
            if now != l.last {
                l.last = now;
                l.done = matches!(now, Look::Admitted | Look::Gone);
                if let Some(e) = event(now) {
                    return Some((Ok::<_, Infallible>(e), l));
                }
            }
            // The reader ended (granted or gone: its last look was read
            // above), or the next change.
            if l.look.changed().await.is_err() && *l.look.borrow() == l.last {
                return None;
            }
        }
        None
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tickets_streams_share_one_reader_and_are_capped() {
        let store = tollgate::Store::memory();
        let gate = Gate::new(&store, "feeds", Some(1), tollgate::GateOptions::default()).expect("gate");
        let held = gate.try_acquire(1).await.expect("acquire").expect("granted");
        let tollgate::Entered::Queued { ticket, .. } = gate.enter_as(1, true, None).await.expect("enter")
        else {
            panic!("queued");
        };
        let feeds = Arc::new(Feeds::default());
        let settings = crate::room::watch::Settings {
            capacity: 1,
            admission_interval: None,
            state: crate::room::states::RoomState::Open,
            schedule: crate::room::states::Schedule::default(),
            random: false,
        };
        let view = Arc::new(View::new(settings, Duration::from_secs(1), 0));
        let timeout = Duration::from_millis(500);
        let mut places: Vec<_> = (0..MAX_STREAMS_PER_TICKET)
            .map(|_| feeds.join(&gate, &view, &ticket, timeout).expect("a place"))
            .collect();
        assert!(
            feeds.join(&gate, &view, &ticket, timeout).is_none(),
            "past the cap"
        );
        assert_eq!(feeds.readers(), 1);
        // Every stream hears the grant from the one reader.
        held.release().await.expect("release");
        for (_, look) in &mut places {
            let admitted = look.wait_for(|l| *l == Look::Admitted);
            tokio::time::timeout(Duration::from_secs(3), admitted)
                .await
                .expect("in time")
                .expect("the last look stays");
        }
        // A place freed is a place to take; the last one gone, the feed is.
        places.pop();
        assert!(feeds.join(&gate, &view, &ticket, timeout).is_some());
        places.clear();
        assert_eq!(feeds.readers(), 0);
    }
}
