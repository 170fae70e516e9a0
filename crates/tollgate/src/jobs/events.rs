//! A job queue's events (docs/JOBS.md, "Events"): what each store step
//! changed, for watchers (the console, `GET /v1/queues/{q}/events`).
//!
//! Both stores write an event in the step that makes the change (memory:
//! inside the queue's critical section, `Queue::emit`; Redis: inside the
//! script, `emit` in queue.lua), and only while someone watches: an
//! unwatched queue pays one atomic load (memory) or nothing at all (Redis:
//! the watch mark is a field read by a call the script makes anyway).
//!
//! In each process one `Hub` fans a queue's events out to its local
//! subscribers through one bounded `broadcast` channel. On Redis one
//! poller per watched queue and process reads the queue's capped stream
//! (`<base>:v`) every `POLL` and keeps the watch mark alive; on memory the
//! store publishes straight into the channel. A subscriber that falls
//! more than `CHANNEL` events behind gets `Lagged` and its stream ends:
//! it never slows the store or the others.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use tokio::sync::broadcast;

use crate::error::{Error, Result};
use crate::name::Name;
use crate::store::redis::RedisStore;

/// Events buffered per watched queue and process; a subscriber further
/// behind than this is dropped (`Lagged`).
pub const EVENTS_BUFFER: usize = 4096;
/// Events the embedded store keeps per watched queue for a resume
/// (Redis keeps about 10,000 in the stream: jobs.lua's EVENTS_KEPT).
const MEMORY_KEPT: usize = 1000;
/// How often a Redis poller reads its queue's stream.
const POLL: Duration = Duration::from_millis(100);
/// How long a watch mark lasts on Redis, and how often a poller renews it.
const WATCH_MS: u64 = 30_000;
const RENEW: Duration = Duration::from_secs(5);
/// Entries read per poll, and the most a resume replays.
const READ_BATCH: usize = 1000;

/// What happened to a queue or one of its jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum JobEventKind {
    /// A job was pushed (new, or a replacement of a waiting one).
    Pushed,
    /// A job was handed to a consumer.
    Claimed,
    /// A delivery was acked.
    Acked,
    /// A delivery was given back for a retry.
    Nacked,
    /// A job used its last attempt (by a nack or a lease that ran out).
    Dead,
    /// A running job's lease ran out; it is ready again (or dead: a
    /// `Dead` event follows).
    Expired,
    /// A dead job was put back in line.
    Replayed,
    /// A waiting or dead job was cancelled.
    Cancelled,
    /// A dead job was purged.
    Purged,
    /// A waiting job was given a new run time.
    Rescheduled,
    /// The queue was paused.
    Paused,
    /// The queue was resumed.
    Resumed,
}

impl JobEventKind {
    /// The kind's name, as in the stream and over SSE (`event:`).
    pub fn as_str(self) -> &'static str {
        match self {
            JobEventKind::Pushed => "pushed",
            JobEventKind::Claimed => "claimed",
            JobEventKind::Acked => "acked",
            JobEventKind::Nacked => "nacked",
            JobEventKind::Dead => "dead",
            JobEventKind::Expired => "expired",
            JobEventKind::Replayed => "replayed",
            JobEventKind::Cancelled => "cancelled",
            JobEventKind::Purged => "purged",
            JobEventKind::Rescheduled => "rescheduled",
            JobEventKind::Paused => "paused",
            JobEventKind::Resumed => "resumed",
        }
    }

    fn parse(s: &str) -> Option<JobEventKind> {
        Some(match s {
            "pushed" => JobEventKind::Pushed,
            "claimed" => JobEventKind::Claimed,
            "acked" => JobEventKind::Acked,
            "nacked" => JobEventKind::Nacked,
            "dead" => JobEventKind::Dead,
            "expired" => JobEventKind::Expired,
            "replayed" => JobEventKind::Replayed,
            "cancelled" => JobEventKind::Cancelled,
            "purged" => JobEventKind::Purged,
            "rescheduled" => JobEventKind::Rescheduled,
            "paused" => JobEventKind::Paused,
            "resumed" => JobEventKind::Resumed,
            _ => return None,
        })
    }
}

/// An event's place in its queue's stream: the store time (ms) it was
/// written and a sequence within that ms (a Redis stream id, `ms-seq`).
/// Ids only grow, so the last one seen resumes a watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct EventId {
    pub ms: u64,
    pub seq: u64,
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

impl FromStr for EventId {
    type Err = Error;

    /// `ms-seq`, two decimal integers.
    fn from_str(s: &str) -> Result<EventId> {
        let bad = || {
            Error::invalid(format!(
                "bad event id {s:?}: expected <ms>-<seq>, e.g. 1700000000000-0"
            ))
        };
        let (ms, seq) = s.split_once('-').ok_or_else(bad)?;
        let digits = |t: &str| !t.is_empty() && t.len() <= 20 && t.bytes().all(|b| b.is_ascii_digit());
        if !digits(ms) || !digits(seq) {
            return Err(bad());
        }
        Ok(EventId {
            ms: ms.parse().map_err(|_| bad())?,
            seq: seq.parse().map_err(|_| bad())?,
        })
    }
}

/// One event of a job queue. Never carries a payload; an error text is
/// cut to 200 bytes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct JobEvent {
    /// Its place in the stream (the SSE `id:`).
    #[serde(skip)]
    pub id: EventId,
    pub kind: JobEventKind,
    /// The job's id (none for paused and resumed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// Claimed: the attempt it starts; nacked, dead, expired: attempts
    /// used so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// Claimed: the delivery's fence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
    /// Pushed, nacked, rescheduled: when it runs (store ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_at_ms: Option<u64>,
    /// Nacked, dead by a nack: the error given, at most 200 bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When it happened (store ms; the id's ms).
    pub at_ms: u64,
}

/// The longest error text an event carries (jobs.lua: EVENT_ERROR_BYTES).
pub(crate) const EVENT_ERROR_BYTES: usize = 200;

impl JobEvent {
    /// An event without its id (the memory store sets it on publishing).
    pub(crate) fn raw(kind: JobEventKind, job: &str) -> JobEvent {
        JobEvent {
            id: EventId::default(),
            kind,
            job: (!job.is_empty()).then(|| job.to_owned()),
            attempt: None,
            fence: None,
            run_at_ms: None,
            error: None,
            at_ms: 0,
        }
    }

    /// An error text cut to EVENT_ERROR_BYTES on a char boundary.
    pub(crate) fn with_error(mut self, error: Option<&str>) -> JobEvent {
        self.error = error.filter(|e| !e.is_empty()).map(|e| {
            let mut end = e.len().min(EVENT_ERROR_BYTES);
            while !e.is_char_boundary(end) {
                end -= 1;
            }
            e[..end].to_owned()
        });
        self
    }

    /// A stream entry: its id and field/value pairs (`k` kind, `i` job,
    /// `a` attempt, `f` fence, `r` run-at, `e` error); `None` for a kind
    /// this version does not know.
    fn from_entry(id: &str, fields: &[(String, String)]) -> Option<JobEvent> {
        let id: EventId = id.parse().ok()?;
        let get = |k: &str| fields.iter().find(|(f, _)| f == k).map(|(_, v)| v.as_str());
        let mut e = JobEvent::raw(JobEventKind::parse(get("k")?)?, get("i").unwrap_or(""));
        e.id = id;
        e.at_ms = id.ms;
        e.attempt = get("a").and_then(|v| v.parse().ok());
        e.fence = get("f").and_then(|v| v.parse().ok());
        e.run_at_ms = get("r").and_then(|v| v.parse().ok());
        e.error = get("e").filter(|v| !v.is_empty()).map(str::to_owned);
        Some(e)
    }
}

/// A subscriber fell more than [`EVENTS_BUFFER`] events behind and was
/// dropped: `missed` events did not reach it. Its stream ends after this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lagged {
    pub missed: u64,
}

/// A live feed of one queue's events ([`JobQueue::events`](crate::JobQueue::events)):
/// a `Stream` of `Ok(event)`, ending after an `Err(Lagged)` if it fell
/// behind. Dropping it unsubscribes.
pub struct JobEvents {
    inner: Pin<Box<dyn Stream<Item = std::result::Result<JobEvent, Lagged>> + Send>>,
    gap: bool,
}

impl fmt::Debug for JobEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobEvents")
            .field("gap", &self.gap)
            .finish_non_exhaustive()
    }
}

impl JobEvents {
    /// Whether a resume asked for events the store no longer holds (older
    /// than its oldest kept one): some between it and the first event
    /// answered are lost.
    pub fn gap(&self) -> bool {
        self.gap
    }

    /// Several feeds as one (a sharded queue's partitions), in arrival
    /// order; ends when every one ended.
    pub(crate) fn merge(feeds: Vec<JobEvents>) -> JobEvents {
        let gap = feeds.iter().any(|f| f.gap);
        JobEvents {
            inner: Box::pin(futures_util::stream::select_all(feeds)),
            gap,
        }
    }
}

impl Stream for JobEvents {
    type Item = std::result::Result<JobEvent, Lagged>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// One watched queue in this process.
struct Channel {
    /// Its ring of EVENTS_BUFFER slots is allocated whole when the queue
    /// is first watched: an `Arc` per slot keeps that at about 40 bytes a
    /// slot (160 KiB a queue) where the event itself would take 150 (600
    /// KiB, 600 MB for a server's 1,000 streams each on its own queue).
    tx: broadcast::Sender<Arc<JobEvent>>,
    /// Memory: the last id handed out, and the events kept for a resume.
    last: EventId,
    kept: VecDeque<JobEvent>,
    /// Redis: a poller owns this channel and removes it.
    polled: bool,
}

/// The watched queues of one store in this process.
#[derive(Default)]
pub(crate) struct Hub {
    /// How many queues are watched: 0 lets the memory store skip even the
    /// map's lock.
    watched: AtomicUsize,
    channels: Mutex<HashMap<String, Channel>>,
}

impl fmt::Debug for Hub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hub")
            .field("watched", &self.watched.load(Ordering::Relaxed))
            .finish()
    }
}

/// Drops a subscriber's interest when its feed is dropped.
struct Release {
    hub: Weak<Hub>,
    queue: String,
}

impl Drop for Release {
    fn drop(&mut self) {
        if let Some(hub) = self.hub.upgrade() {
            hub.release(&self.queue);
        }
    }
}

impl Hub {
    /// Memory: whether queue `q` is watched (one atomic load when none is).
    pub(crate) fn watching(&self, q: &str) -> bool {
        self.watched.load(Ordering::Relaxed) > 0 && self.channels.lock().expect("hub").contains_key(q)
    }

    /// Memory: publishes `events` of queue `q` written at store time
    /// `now_ms`, from inside the queue's critical section (so they are in
    /// the order of the steps).
    pub(crate) fn publish(&self, q: &str, now_ms: u64, events: Vec<JobEvent>) {
        let mut channels = self.channels.lock().expect("hub");
        let Some(ch) = channels.get_mut(q) else { return };
        for mut e in events {
            let id = if now_ms > ch.last.ms {
                EventId { ms: now_ms, seq: 0 }
            } else {
                EventId {
                    ms: ch.last.ms,
                    seq: ch.last.seq + 1,
                }
            };
            ch.last = id;
            e.id = id;
            e.at_ms = id.ms;
            if ch.kept.len() == MEMORY_KEPT {
                ch.kept.pop_front();
            }
            ch.kept.push_back(e.clone());
            // No receiver left is fine: the last one is being released.
            let _ = ch.tx.send(Arc::new(e));
        }
    }

    /// Memory: a feed of queue `q`, replaying what is kept after `since`.
    pub(crate) fn subscribe_memory(self: &Arc<Self>, q: &Name, since: Option<EventId>) -> JobEvents {
        let mut channels = self.channels.lock().expect("hub");
        let ch = channels.entry(q.as_str().to_owned()).or_insert_with(|| {
            self.watched.fetch_add(1, Ordering::Relaxed);
            Channel {
                tx: broadcast::channel(EVENTS_BUFFER).0,
                last: EventId::default(),
                kept: VecDeque::new(),
                polled: false,
            }
        });
        let rx = ch.tx.subscribe();
        let (backlog, gap) = match since {
            None => (Vec::new(), false),
            Some(since) => {
                // Nothing kept: this queue was not watched here until now,
                // so what happened after `since` was never recorded.
                let gap = ch.kept.front().is_none_or(|e| e.id > since);
                (ch.kept.iter().filter(|e| e.id > since).cloned().collect(), gap)
            }
        };
        drop(channels);
        self.feed(q, backlog, rx, gap)
    }

    /// Redis: a feed of queue `q` (starting this process's poller for it
    /// if none runs), first replaying what the stream holds after `since`.
    pub(crate) async fn subscribe_redis(
        self: &Arc<Self>,
        store: &Arc<RedisStore>,
        q: &Name,
        since: Option<EventId>,
    ) -> Result<JobEvents> {
        // Marked watched before the feed is answered, so that every step
        // after this call is recorded; a new poller starts from here.
        let start = store
            .job_events(q, WATCH_MS, None, 0)
            .await?
            .last
            .unwrap_or_default();
        let rx = {
            let mut channels = self.channels.lock().expect("hub");
            let ch = channels.entry(q.as_str().to_owned()).or_insert_with(|| {
                let tx = broadcast::channel(EVENTS_BUFFER).0;
                let poller = poll(Arc::downgrade(self), store.clone(), q.clone(), tx.clone(), start);
                tokio::spawn(poller);
                Channel {
                    tx,
                    last: EventId::default(),
                    kept: VecDeque::new(),
                    polled: true,
                }
            });
            ch.tx.subscribe()
        };
        let (backlog, gap) = match since {
            None => (Vec::new(), false),
            // Nothing comes after the greatest id, and Redis refuses a
            // range that starts after it.
            Some(EventId {
                ms: u64::MAX,
                seq: u64::MAX,
            }) => (Vec::new(), false),
            Some(since) => {
                let read = store.job_events(q, 0, Some(since), READ_BATCH).await?;
                // An empty stream never held `since` (a lapsed watch
                // drops it); a full batch may stop short of where the live
                // feed starts: the events between are not sent.
                let gap = read.first.is_none_or(|first| first > since) || read.events.len() == READ_BATCH;
                (read.events, gap)
            }
        };
        Ok(self.feed(q, backlog, rx, gap))
    }

    /// The feed: `backlog` first, then the live events after it (a live
    /// event the backlog already had is skipped).
    fn feed(
        self: &Arc<Self>,
        q: &Name,
        backlog: Vec<JobEvent>,
        rx: broadcast::Receiver<Arc<JobEvent>>,
        gap: bool,
    ) -> JobEvents {
        let after = backlog.last().map(|e| e.id);
        let release = Release {
            hub: Arc::downgrade(self),
            queue: q.as_str().to_owned(),
        };
        struct State {
            backlog: std::vec::IntoIter<JobEvent>,
            rx: broadcast::Receiver<Arc<JobEvent>>,
            after: Option<EventId>,
            done: bool,
            _release: Release,
        }
        let state = State {
            backlog: backlog.into_iter(),
            rx,
            after,
            done: false,
            _release: release,
        };
        let inner = futures_util::stream::unfold(state, |mut s| async move {
            if s.done {
                return None;
            }
            if let Some(e) = s.backlog.next() {
                return Some((Ok(e), s));
            }
            loop {
                match s.rx.recv().await {
                    Ok(e) if s.after.is_some_and(|a| e.id <= a) => continue,
                    Ok(e) => return Some((Ok(Arc::unwrap_or_clone(e)), s)),
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        s.done = true;
                        return Some((Err(Lagged { missed }), s));
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        });
        JobEvents {
            inner: Box::pin(inner),
            gap,
        }
    }

    /// A feed was dropped: on memory, the last one stops the watch.
    fn release(&self, q: &str) {
        let mut channels = self.channels.lock().expect("hub");
        if let Some(ch) = channels.get(q)
            && !ch.polled
            && ch.tx.receiver_count() == 0
        {
            channels.remove(q);
            self.watched.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Redis: the poller of queue `q` stops if nobody listens any more
    /// (checked under the map's lock, so a new subscriber either finds
    /// this channel still there or starts a new poller).
    fn poller_done(&self, q: &str, tx: &broadcast::Sender<Arc<JobEvent>>) -> bool {
        let mut channels = self.channels.lock().expect("hub");
        if tx.receiver_count() > 0 {
            return false;
        }
        if channels.get(q).is_some_and(|ch| ch.tx.same_channel(tx)) {
            channels.remove(q);
        }
        true
    }
}

/// What one read of a queue's stream on Redis found.
pub(crate) struct StreamRead {
    /// The last id (a read with no `after`), or the first one held.
    pub(crate) last: Option<EventId>,
    pub(crate) first: Option<EventId>,
    pub(crate) events: Vec<JobEvent>,
}

impl StreamRead {
    /// Decodes jobs.lua's `events` reply: {last, first, entries}.
    pub(crate) fn decode(v: redis::Value) -> Option<StreamRead> {
        use redis::Value;
        let Value::Array(items) = v else { return None };
        let [last, first, entries] = <[Value; 3]>::try_from(items).ok()?;
        let text = |v: &Value| -> Option<String> {
            match v {
                Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
                Value::SimpleString(s) => Some(s.clone()),
                Value::VerbatimString { text, .. } => Some(text.clone()),
                _ => None,
            }
        };
        let id = |v: &Value| text(v).filter(|s| !s.is_empty()).and_then(|s| s.parse().ok());
        let Value::Array(entries) = entries else {
            return None;
        };
        let mut events = Vec::with_capacity(entries.len());
        for entry in entries {
            let Value::Array(pair) = entry else { return None };
            let [eid, fields] = <[Value; 2]>::try_from(pair).ok()?;
            let Value::Array(fields) = fields else { return None };
            let fields: Vec<(String, String)> = fields
                .chunks(2)
                .filter_map(|c| Some((text(&c[0])?, text(c.get(1)?)?)))
                .collect();
            // A kind from a newer version is skipped.
            if let Some(e) = JobEvent::from_entry(&text(&eid)?, &fields) {
                events.push(e);
            }
        }
        Some(StreamRead {
            last: id(&last),
            first: id(&first),
            events,
        })
    }
}

/// Redis: reads queue `q`'s stream after `start` every POLL into `tx`
/// while anyone listens, renewing the watch mark every RENEW (the first
/// subscriber set it). A failed read is retried (logged once per failure
/// spell); the stream keeps the events meanwhile, up to its cap.
async fn poll(
    hub: Weak<Hub>,
    store: Arc<RedisStore>,
    q: Name,
    tx: broadcast::Sender<Arc<JobEvent>>,
    start: EventId,
) {
    let mut last = start;
    let mut renewed = Some(tokio::time::Instant::now());
    let mut failing = false;
    loop {
        let Some(h) = hub.upgrade() else { return };
        if h.poller_done(q.as_str(), &tx) {
            return;
        }
        drop(h);
        let renew = renewed.is_none_or(|at| at.elapsed() >= RENEW);
        let watch = if renew { WATCH_MS } else { 0 };
        match store.job_events(&q, watch, Some(last), READ_BATCH).await {
            Ok(read) => {
                failing = false;
                if renew {
                    renewed = Some(tokio::time::Instant::now());
                }
                let full = read.events.len() == READ_BATCH;
                for e in read.events {
                    last = e.id;
                    // No receiver now: the next turn stops.
                    let _ = tx.send(Arc::new(e));
                }
                if full {
                    continue;
                }
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(queue = q.as_str(), error = %e, "reading the queue's events failed; retrying");
                }
                failing = true;
                renewed = None;
            }
        }
        tokio::time::sleep(POLL).await;
    }
}
