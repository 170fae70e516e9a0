//! The sampler (once a second: the overview from cheap sources, every
//! configured room, and the series consoles look at, each one store read)
//! and the console's data routes: `GET /v1/console/series` (a series'
//! window) and `GET /v1/console/live` (its new samples, as Server-Sent
//! Events).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::routing::get;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::series::{INTERVAL_MS, Key, Kind, Sample, WINDOW};
use super::{Console, MAX_STREAMS, Tick};
use crate::api::error::{ApiError, Query};
use crate::state::AppState;

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/console/series", get(series))
        .route("/v1/console/live", get(live))
}

/// How long one second's sampling may wait for the store in all; what has
/// not answered by then is left out of that second.
const ROUND_DEADLINE: Duration = Duration::from_millis(900);

/// Samples every second until the server stops.
pub(crate) fn spawn(state: AppState, mut stopping: tokio::sync::watch::Receiver<bool>) {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(INTERVAL_MS));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = every.tick() => {}
                _ = stopping.changed() => return,
            }
            round(&state).await;
        }
    });
}

/// One second's samples, recorded and sent to the live streams.
async fn round(state: &AppState) {
    let console = &state.console;
    let mut always = vec![Key {
        kind: Kind::Overview,
        name: String::new(),
    }];
    always.extend(state.rooms.all().iter().map(|r| Key {
        kind: Kind::Room,
        name: r.name().to_owned(),
    }));
    let targets = console.board().targets(&always, Instant::now());
    let at_ms = now_ms();
    let reads = futures_util::future::join_all(targets.iter().map(|k| read(state, k)));
    let Ok(read) = tokio::time::timeout(ROUND_DEADLINE, reads).await else {
        tracing::debug!("the console's sampling took over {ROUND_DEADLINE:?}; this second is skipped");
        return;
    };
    let now = Instant::now();
    let mut tick = Vec::with_capacity(targets.len());
    {
        let mut board = console.board();
        for (key, figures) in targets.into_iter().zip(read) {
            let Some(Figures { mut values, counters }) = figures else {
                continue;
            };
            if let Some(counters) = counters {
                let rates = board.rates(&key, counters, now);
                fill_rates(key.kind, &mut values, rates.as_deref());
            }
            let sample = Sample {
                at_ms,
                values: values.into_boxed_slice(),
            };
            board.record(&key, sample.clone());
            tick.push((key, sample));
        }
    }
    // No receiver is not an error: nobody is watching.
    let _ = console.ticks.send(Arc::new(tick));
}

/// The figures read for one series, and the counters its rates come from.
struct Figures {
    values: Vec<f64>,
    counters: Option<Vec<u64>>,
}

/// Puts the rates (NaN until two readings exist) in their fields, and a
/// room's mean estimate error: the growth of the errors' sum over that of
/// their count (the interval cancels out).
fn fill_rates(kind: Kind, values: &mut [f64], rates: Option<&[f64]>) {
    for (i, (field, scale)) in kind.rates().iter().enumerate() {
        if let Some(at) = kind.fields().iter().position(|f| f == field) {
            values[at] = rates.and_then(|r| r.get(i)).map_or(f64::NAN, |r| r * scale);
        }
    }
    if kind == Kind::Room
        && let Some([_, sum, count]) = rates
        && *count > 0.0
        && let Some(at) = kind.fields().iter().position(|f| *f == "eta_error_s")
    {
        values[at] = sum / count / 1000.0;
    }
}

/// Milliseconds since the epoch by this server's clock: when a sample was
/// taken (the page draws against the browser's clock, on the same scale).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// One store read (none for the overview and limits); None when the
/// store did not answer or the thing is gone.
async fn read(state: &AppState, key: &Key) -> Option<Figures> {
    let b = |x: bool| if x { 1.0 } else { 0.0 };
    let nan = f64::NAN;
    match key.kind {
        Kind::Overview => {
            // Cheap sources only: the embedded store counts its shelves;
            // on Redis, the names this server has served (never a scan).
            let (gates, queues) = match state.store.memory_footprint() {
                Some(f) => (f.gates, f.queues),
                None => (
                    crate::api::tracked::tracked_len(&state.gates),
                    crate::api::tracked::tracked_len(&state.queues),
                ),
            };
            Some(Figures {
                values: vec![
                    gates as f64,
                    queues as f64,
                    state.rooms.all().len() as f64,
                    state.limits.configured_count() as f64,
                    crate::api::tracked::tracked_len(&state.schedules) as f64,
                ],
                counters: None,
            })
        }
        Kind::Room => {
            let room = state.rooms.get(&key.name)?;
            let errors = room.eta_errors();
            let s = room.gate().stats().await.ok()?;
            Some(Figures {
                values: vec![
                    s.holders as f64,
                    s.waiting as f64,
                    s.capacity.map_or(f64::NAN, f64::from),
                    b(s.paused),
                    nan,
                    nan,
                ],
                counters: Some(vec![s.grants, errors.0, errors.1]),
            })
        }
        Kind::Gate => {
            let options = tollgate::GateOptions {
                auto_renew: false,
                fair: true,
                ..tollgate::GateOptions::default()
            };
            let gate = tollgate::Gate::new(&state.store, &key.name, None, options).ok()?;
            let s = gate.stats().await.ok()?;
            Some(Figures {
                values: vec![
                    s.holders as f64,
                    s.used as f64,
                    s.waiting as f64,
                    s.capacity.map_or(f64::NAN, f64::from),
                ],
                counters: None,
            })
        }
        Kind::Queue => {
            let q = state.queue_set.open(&state.store, &key.name).ok()?;
            let s = q.stats().await.ok()?;
            let p99 = s
                .recent_lateness_quantile(0.99)
                .map_or(nan, |d| d.as_millis() as f64);
            Some(Figures {
                values: vec![
                    s.ready as f64,
                    s.delayed as f64,
                    s.in_flight as f64,
                    s.dead as f64,
                    nan,
                    nan,
                    p99,
                ],
                counters: Some(vec![s.pushed, s.acked]),
            })
        }
        Kind::Schedule => {
            let info = tollgate::Schedules::new(&state.store)
                .get(&key.name)
                .await
                .ok()??;
            let next = info.next.map_or(nan, |n| {
                n.duration_since(std::time::SystemTime::now())
                    .map_or(0.0, |d| d.as_secs_f64().round())
            });
            Some(Figures {
                values: vec![b(info.paused), next],
                counters: None,
            })
        }
        Kind::Limit => {
            let limiter = state.limits.configured(&key.name)?;
            let (allowed, refused) = limiter.decided();
            Some(Figures {
                values: vec![nan, nan],
                counters: Some(vec![allowed, refused]),
            })
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SeriesQuery {
    kind: String,
    #[serde(default)]
    name: String,
}

/// The series a query names, checked: a known kind, a valid name (a
/// configured one for rooms and limits), none for the overview.
fn checked(state: &AppState, q: &SeriesQuery) -> Result<Key, ApiError> {
    let kind = Kind::parse(&q.kind).ok_or_else(|| {
        let kinds: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
        ApiError::bad_request(format!("kind: one of {}", kinds.join(", ")))
    })?;
    let name = q.name.clone();
    let not_found = |code: &'static str, what: &str| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            code,
            format!("no {what} {name:?} is configured on this server"),
        )
    };
    match kind {
        Kind::Overview if !name.is_empty() => {
            return Err(ApiError::bad_request("the overview takes no name"));
        }
        Kind::Overview => {}
        Kind::Room if state.rooms.get(&name).is_none() => {
            return Err(not_found("room_not_found", "waiting room"));
        }
        Kind::Limit if state.limits.configured(&name).is_none() => {
            return Err(not_found("limit_not_found", "limit"));
        }
        Kind::Schedule => {
            tollgate::schedule::check_schedule_name(&name)?;
        }
        Kind::Queue => {
            state.queue_set.open(&state.store, &name)?;
        }
        Kind::Gate | Kind::Room | Kind::Limit => {
            tollgate::Name::new(&name)?;
        }
    }
    Ok(Key { kind, name })
}

fn sample_json(s: &Sample) -> Value {
    let mut row = Vec::with_capacity(s.values.len() + 1);
    row.push(json!(s.at_ms));
    // JSON has no NaN: an unknown figure is null. Counts stay integers.
    row.extend(s.values.iter().map(|&v| {
        if !v.is_finite() {
            Value::Null
        } else if v.fract() == 0.0 && v.abs() < 9e15 {
            json!(v as i64)
        } else {
            json!((v * 1000.0).round() / 1000.0)
        }
    }));
    Value::Array(row)
}

/// `GET /v1/console/series?kind=&name=`: the series' window so far
/// (empty when it was not sampled yet: from now on it is, for 15 minutes).
async fn series(
    State(state): State<AppState>,
    Query(q): Query<SeriesQuery>,
) -> Result<axum::Json<Value>, ApiError> {
    let key = checked(&state, &q)?;
    let samples = {
        let mut board = state.console.board();
        board.view(&key, Instant::now());
        board.window(&key).unwrap_or_default()
    };
    Ok(axum::Json(json!({
        "kind": key.kind.as_str(),
        "name": key.name,
        "interval_ms": INTERVAL_MS,
        "window_s": WINDOW as u64 * INTERVAL_MS / 1000,
        "fields": key.kind.fields(),
        "samples": samples.iter().map(sample_json).collect::<Vec<_>>(),
    })))
}

/// A live stream's hold on one of the [`MAX_STREAMS`] places.
struct Place(Arc<Console>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `GET /v1/console/live?kind=&name=`: a `sample` event (`[at_ms,
/// figures...]`, the fields of `/v1/console/series`) for each new sample
/// of the series. Watching keeps it sampled. A reader that falls behind
/// (more than a few seconds of samples unread) is dropped: the page
/// reconnects and reloads the window.
async fn live(
    State(state): State<AppState>,
    Query(q): Query<SeriesQuery>,
) -> Result<Sse<impl futures_util::Stream<Item = Result<Event, std::convert::Infallible>>>, ApiError> {
    let key = checked(&state, &q)?;
    let console = state.console.clone();
    if console.streams.fetch_add(1, Ordering::Relaxed) >= MAX_STREAMS {
        console.streams.fetch_sub(1, Ordering::Relaxed);
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_streams",
            format!("this server already serves {MAX_STREAMS} live console streams; try again later"),
        ));
    }
    let place = Place(console.clone());
    console.board().view(&key, Instant::now());
    let ticks = console.ticks.subscribe();
    struct Watching {
        ticks: broadcast::Receiver<Tick>,
        key: Key,
        /// Held for the stream's life; also how it reaches the board.
        place: Place,
    }
    let watching = Watching { ticks, key, place };
    let stream = futures_util::stream::unfold(watching, |mut w| async move {
        loop {
            match w.ticks.recv().await {
                Ok(tick) => {
                    let Some((_, sample)) = tick.iter().find(|(k, _)| *k == w.key) else {
                        continue;
                    };
                    w.place.0.board().view(&w.key, Instant::now());
                    let event = Event::default()
                        .event("sample")
                        .data(sample_json(sample).to_string());
                    return Some((Ok(event), w));
                }
                // Behind: the stream ends (at shutdown the listener ends
                // it, as every event stream).
                Err(_) => return None,
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_the_mean_estimate_error_fill_their_fields() {
        let mut room = vec![1.0, 2.0, 3.0, 0.0, f64::NAN, f64::NAN];
        // 0.5 admissions a second; errors of 3 s over 2 admissions.
        fill_rates(Kind::Room, &mut room, Some(&[0.5, 3000.0, 2.0]));
        assert_eq!(room, vec![1.0, 2.0, 3.0, 0.0, 30.0, 1.5]);
        // Nobody admitted from the line: the error is unknown.
        let mut room = vec![0.0, 0.0, 1.0, 0.0, f64::NAN, f64::NAN];
        fill_rates(Kind::Room, &mut room, Some(&[0.0, 0.0, 0.0]));
        assert!(room[5].is_nan() && room[4] == 0.0);
        let mut queue = vec![0.0; Kind::Queue.fields().len()];
        fill_rates(Kind::Queue, &mut queue, None);
        assert!(queue[4].is_nan() && queue[5].is_nan() && queue[0] == 0.0);
        let mut limit = vec![f64::NAN; 2];
        fill_rates(Kind::Limit, &mut limit, Some(&[4.0, 1.0]));
        assert_eq!(limit, vec![4.0, 1.0]);
    }
}
