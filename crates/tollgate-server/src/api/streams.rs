//! What every event stream (Server-Sent Events) shares: the server's
//! limit on open streams (`max_event_subscribers`: [`Subscribers`], a
//! [`Slot`] per stream), and [`stream`], the one answer: `hello`, then a
//! forwarding task with a bounded buffer between the feed and the HTTP
//! body. A client that does not read fills it, then its feed falls behind
//! (`lagged`) or its buffer stays full for SLOW_READER (`slow_reader`),
//! and it is dropped: a final `dropped` event, its slot and its feed freed
//! at once. It never slows the store or the other streams. The queues'
//! (events.rs), the rooms' (room/events.rs) and the console's use it.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tollgate::Lagged;

use super::error::ApiError;

/// Event streams served at once by default (`max_event_subscribers`).
pub(crate) const DEFAULT_MAX_SUBSCRIBERS: usize = 1000;
/// Events waiting for one client's connection.
const CLIENT_BUFFER: usize = 256;
/// A client whose buffer stays full this long is dropped. (Bursts are
/// absorbed first by the feed's own buffer of 4,096 events: a batch push
/// of 1,000 jobs is one burst.)
const SLOW_READER: Duration = Duration::from_secs(10);
/// A comment line this often keeps idle proxies from closing a stream.
const HEARTBEAT: Duration = Duration::from_secs(15);

/// The event streams open on this server, against their limit.
#[derive(Debug)]
pub(crate) struct Subscribers {
    open: AtomicUsize,
    max: usize,
}

/// One open stream's place; freed on drop.
#[derive(Debug)]
pub(crate) struct Slot(Arc<Subscribers>);

impl Drop for Slot {
    fn drop(&mut self) {
        let left = self.0.open.fetch_sub(1, Ordering::Relaxed) - 1;
        metrics::gauge!("tollgate_event_subscribers").set(left as f64);
    }
}

impl Subscribers {
    pub(crate) fn new(max: usize) -> Subscribers {
        Subscribers {
            open: AtomicUsize::new(0),
            max,
        }
    }

    /// A place for one more stream, or 503 `too_many_subscribers`.
    pub(crate) fn take(self: &Arc<Self>) -> Result<Slot, ApiError> {
        let taken = self.open.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            (n < self.max).then_some(n + 1)
        });
        match taken {
            Ok(n) => {
                metrics::gauge!("tollgate_event_subscribers").set((n + 1) as f64);
                Ok(Slot(self.clone()))
            }
            Err(n) => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "too_many_subscribers",
                format!(
                    "this server already serves {n} event streams (max_event_subscribers); try again later"
                ),
            )),
        }
    }
}

/// Turns true when the server shuts down: every stream ends then.
#[derive(Debug, Clone)]
pub(crate) struct Stopping(pub(crate) tokio::sync::watch::Receiver<bool>);

/// Why a stream was dropped: the `dropped` event's data.
fn dropped(reason: &str, missed: Option<u64>) -> Event {
    metrics::counter!("tollgate_event_subscribers_dropped_total", "reason" => reason.to_owned()).increment(1);
    let data = json!({"reason": reason, "missed": missed});
    Event::default().event("dropped").data(data.to_string())
}

/// The response: `hello`, then what the forwarding task passes on from
/// `feed`, then `dropped` if it gave up on this client. Ends when the
/// server stops or `feed` ends.
pub(crate) fn stream(
    hello: serde_json::Value,
    feed: impl futures_util::Stream<Item = Result<Event, Lagged>> + Send + 'static,
    slot: Slot,
    Stopping(mut stopping): Stopping,
) -> Response {
    let (tx, rx) = mpsc::channel::<Event>(CLIENT_BUFFER);
    let (why_tx, why_rx) = oneshot::channel::<Event>();
    tokio::spawn(async move {
        let _slot = slot;
        let mut feed = std::pin::pin!(feed);
        let why = loop {
            let next = tokio::select! {
                _ = stopping.wait_for(|s| *s) => None,
                () = tx.closed() => None,
                next = feed.next() => next,
            };
            match next {
                Some(Ok(e)) => match tokio::time::timeout(SLOW_READER, tx.send(e)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => break None,
                    Err(_) => break Some(dropped("slow_reader", None)),
                },
                Some(Err(Lagged { missed })) => break Some(dropped("lagged", Some(missed))),
                None => break None,
            }
        };
        if let Some(why) = why {
            let _ = why_tx.send(why);
        }
        // Dropping the feed here unsubscribes at once, whatever the
        // client does with its connection.
    });
    let first = futures_util::stream::iter([Event::default().event("hello").data(hello.to_string())]);
    let events = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) });
    let last = futures_util::stream::once(why_rx).filter_map(|why| async move { why.ok() });
    let body = first.chain(events).chain(last).map(Ok::<_, Infallible>);
    Sse::new(body)
        .keep_alive(KeepAlive::new().interval(HEARTBEAT))
        .into_response()
}
