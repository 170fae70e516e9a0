//! The waiting page (a template with `{{…}}` placeholders) and its live
//! updates over Server-Sent Events.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::http::Response;
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use tollgate::TicketStatus;

use super::{Room, Shown, bounded};

const DEFAULT: &str = include_str!("page.html");

/// Shown (with 503 and `Retry-After`) while a closed room cannot reach its
/// store.
pub(crate) const TRY_AGAIN: &str = "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"robots\" content=\"noindex\"><meta http-equiv=\"refresh\" content=\"5\">\
<title>Please try again</title></head><body><h1>Please try again in a moment</h1>\
<p>The waiting room cannot let anyone in right now. This page retries by itself.</p></body></html>\n";

/// A waiting-page template. Placeholders: `{{room}}`, `{{position}}`,
/// `{{waiting}}`, `{{eta}}`, `{{events_url}}`, `{{status_url}}`,
/// `{{refresh_seconds}}`.
#[derive(Debug, Clone)]
pub(crate) struct Page {
    template: String,
}

impl Page {
    pub(crate) fn default_page() -> Page {
        Page {
            template: DEFAULT.to_owned(),
        }
    }

    pub(crate) fn from_file(path: &std::path::Path) -> Result<Page, String> {
        let template =
            std::fs::read_to_string(path).map_err(|e| format!("page = {}: {e}", path.display()))?;
        Ok(Page { template })
    }

    pub(crate) fn render(&self, room: &str, shown: &Shown, refresh: u64) -> String {
        self.fill(
            room,
            &shown.position.to_string(),
            &shown.waiting.to_string(),
            &eta_text(shown.eta),
            refresh,
        )
    }

    /// The page without figures (for a visitor asking too often).
    pub(crate) fn render_unknown(&self, room: &str, refresh: u64) -> String {
        self.fill(room, "…", "…", "unknown", refresh)
    }

    fn fill(&self, room: &str, position: &str, waiting: &str, eta: &str, refresh: u64) -> String {
        self.template
            .replace("{{room}}", &escape(room))
            .replace("{{position}}", position)
            .replace("{{waiting}}", waiting)
            .replace("{{eta}}", eta)
            .replace("{{events_url}}", &format!("/.tollgate/{room}/events"))
            .replace("{{status_url}}", &format!("/.tollgate/{room}/status"))
            .replace("{{refresh_seconds}}", &refresh.to_string())
    }
}

fn minutes(d: Duration) -> String {
    let m = (d.as_secs_f64() / 60.0).round() as u64;
    match m {
        0 => "under a minute".to_owned(),
        1 => "1 minute".to_owned(),
        m => format!("{m} minutes"),
    }
}

/// "3 minutes to 6 minutes", or "unknown" before departures were measured.
fn eta_text(eta: Option<(Duration, Duration)>) -> String {
    match eta {
        None => "unknown".to_owned(),
        Some((low, high)) => {
            let (l, h) = (minutes(low), minutes(high));
            if l == h { l } else { format!("{l} to {h}") }
        }
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Position updates while the visitor waits (each look is also its
/// heartbeat), then `admitted` (the page reloads and the visitor is let
/// in) or `gone`.
pub(crate) async fn events(room: &Room, ticket: String) -> Response<Body> {
    struct Watching {
        gate: tollgate::Gate,
        ticket: String,
        timeout: Duration,
        last: Option<Shown>,
        done: bool,
    }
    let start = Watching {
        gate: room.gate().clone(),
        ticket,
        timeout: room.store_timeout,
        last: None,
        done: false,
    };
    let stream = futures_util::stream::unfold(start, |mut w| async move {
        if w.done {
            return None;
        }
        loop {
            // The first look answers at once; later ones wait up to a
            // second for the grant, so position changes show within a
            // second and a grant at once.
            let wait = if w.last.is_none() {
                Duration::ZERO
            } else {
                Duration::from_secs(1)
            };
            let status = bounded(w.timeout + wait, w.gate.wait_status(&w.ticket, wait)).await;
            let event = match status {
                Ok(TicketStatus::Queued(place)) => {
                    let shown = Shown::of(&place);
                    if w.last == Some(shown) {
                        continue;
                    }
                    w.last = Some(shown);
                    Event::default().event("position").data(shown.json().to_string())
                }
                Ok(TicketStatus::Granted(_)) => {
                    w.done = true;
                    Event::default().event("admitted").data("{}")
                }
                Ok(TicketStatus::Gone) => {
                    w.done = true;
                    Event::default().event("gone").data("{}")
                }
                Err(_) => {
                    // The store is unreachable: say so, keep trying.
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    Event::default().event("unavailable").data("{}")
                }
            };
            return Some((Ok::<_, Infallible>(event), w));
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}
