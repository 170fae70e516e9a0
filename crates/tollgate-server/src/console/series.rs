//! The console's figures over time: one ring of samples per series (the
//! overview, each configured room, and each gate, queue, schedule or limit
//! a console opened lately), a sample a second, 15 minutes kept. Pure
//! bookkeeping: sample.rs reads the store and feeds it.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Samples kept per series: 15 minutes, one a second.
pub(crate) const WINDOW: usize = 900;

/// Milliseconds between samples.
pub(crate) const INTERVAL_MS: u64 = 1_000;

/// At most this many gates, queues, schedules and limits are sampled at
/// once; opening one more drops the one viewed least recently. The cost
/// of a second's sampling is bounded by it (plus the configured rooms),
/// whatever the number of names in the store or of consoles open.
pub(crate) const MAX_TRACKED: usize = 64;

/// A series nobody has opened or watched for this long stops being sampled.
pub(crate) const VIEW_TTL: Duration = Duration::from_secs(15 * 60);

/// What a series is of; each kind has its own fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Kind {
    Overview,
    Room,
    Gate,
    Queue,
    Schedule,
    Limit,
}

impl Kind {
    pub(crate) const ALL: [Kind; 6] = [
        Kind::Overview,
        Kind::Room,
        Kind::Gate,
        Kind::Queue,
        Kind::Schedule,
        Kind::Limit,
    ];

    pub(crate) fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Overview => "overview",
            Kind::Room => "room",
            Kind::Gate => "gate",
            Kind::Queue => "queue",
            Kind::Schedule => "schedule",
            Kind::Limit => "limit",
        }
    }

    /// The figures of one sample, in order. Rates are per second over the
    /// last interval, from counter deltas; `admissions_per_minute` is
    /// measured the same way, scaled. A room's `eta_error_s` is the mean
    /// error of the estimates of the visitors this server admitted from
    /// the line in the interval (unknown when it admitted none).
    pub(crate) fn fields(self) -> &'static [&'static str] {
        match self {
            Kind::Overview => &["gates", "queues", "rooms", "limits", "schedules"],
            Kind::Room => &[
                "active",
                "waiting",
                "capacity",
                "paused",
                "admissions_per_minute",
                "eta_error_s",
            ],
            Kind::Gate => &["holders", "used", "waiting", "capacity"],
            Kind::Queue => &[
                "ready",
                "delayed",
                "in_flight",
                "dead",
                "pushed_per_s",
                "acked_per_s",
                "lateness_p99_ms",
            ],
            Kind::Schedule => &["paused", "next_in_s"],
            Kind::Limit => &["allowed_per_s", "refused_per_s"],
        }
    }

    /// The fields that are rates, in the order of the counters the
    /// sampler reads for them, each with its scale (per second, or per
    /// minute).
    pub(crate) fn rates(self) -> &'static [(&'static str, f64)] {
        match self {
            Kind::Room => &[("admissions_per_minute", 60.0)],
            // eta_error_s: from its own two counters (sample.rs).
            Kind::Queue => &[("pushed_per_s", 1.0), ("acked_per_s", 1.0)],
            Kind::Limit => &[("allowed_per_s", 1.0), ("refused_per_s", 1.0)],
            Kind::Overview | Kind::Gate | Kind::Schedule => &[],
        }
    }

    /// Sampled only while a console looks at it (the overview and the
    /// configured rooms always are).
    pub(crate) fn on_view(self) -> bool {
        !matches!(self, Kind::Overview | Kind::Room)
    }
}

/// One series: its kind and name (empty for the overview).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Key {
    pub(crate) kind: Kind,
    pub(crate) name: String,
}

/// One sample: when (server time, ms since the epoch) and the figures, in
/// the order of its kind's fields (NaN where a figure is unknown).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub(crate) at_ms: u64,
    pub(crate) values: Box<[f64]>,
}

#[derive(Debug)]
struct Entry {
    samples: VecDeque<Sample>,
    viewed: Instant,
    /// The cumulative counters behind the rates, as last read.
    counters: Option<(Instant, Vec<u64>)>,
}

/// Every series' ring, and which are sampled.
#[derive(Debug, Default)]
pub(crate) struct Board {
    series: HashMap<Key, Entry>,
}

impl Board {
    /// Notes that a console looks at `key` now, so it is sampled for
    /// the next [`VIEW_TTL`]; a new one over [`MAX_TRACKED`] drops the
    /// one viewed least recently.
    pub(crate) fn view(&mut self, key: &Key, now: Instant) {
        if let Some(e) = self.series.get_mut(key) {
            e.viewed = now;
            return;
        }
        if key.kind.on_view() {
            let viewed: Vec<(&Key, Instant)> = self
                .series
                .iter()
                .filter(|(k, _)| k.kind.on_view())
                .map(|(k, e)| (k, e.viewed))
                .collect();
            if viewed.len() >= MAX_TRACKED
                && let Some(oldest) = viewed.iter().min_by_key(|(_, at)| *at).map(|(k, _)| (*k).clone())
            {
                self.series.remove(&oldest);
            }
        }
        self.series.insert(
            key.clone(),
            Entry {
                samples: VecDeque::new(),
                viewed: now,
                counters: None,
            },
        );
    }

    /// The series to sample now: `always` (the overview and the rooms,
    /// added if new) and those viewed within [`VIEW_TTL`]; the others are
    /// dropped, and so are rooms no longer in `always`.
    pub(crate) fn targets(&mut self, always: &[Key], now: Instant) -> Vec<Key> {
        for key in always {
            if let Some(e) = self.series.get_mut(key) {
                e.viewed = now;
            } else {
                self.view(key, now);
            }
        }
        self.series.retain(|k, e| {
            if k.kind.on_view() {
                now.saturating_duration_since(e.viewed) < VIEW_TTL
            } else {
                always.contains(k)
            }
        });
        let mut keys: Vec<Key> = self.series.keys().cloned().collect();
        keys.sort_unstable();
        keys
    }

    /// Adds a sample to `key`'s ring (if it is still sampled), the oldest
    /// falling out past [`WINDOW`].
    pub(crate) fn record(&mut self, key: &Key, sample: Sample) {
        if let Some(e) = self.series.get_mut(key) {
            if e.samples.len() == WINDOW {
                e.samples.pop_front();
            }
            e.samples.push_back(sample);
        }
    }

    /// Per-second rates of `counters` since they were last given for
    /// `key` (None the first time, or after a counter went back: another
    /// process's restart, a queue deleted and made again).
    pub(crate) fn rates(&mut self, key: &Key, counters: Vec<u64>, now: Instant) -> Option<Vec<f64>> {
        let e = self.series.get_mut(key)?;
        let rates = match &e.counters {
            Some((at, before))
                if before.len() == counters.len() && before.iter().zip(&counters).all(|(b, c)| b <= c) =>
            {
                let secs = now.saturating_duration_since(*at).as_secs_f64();
                (secs > 0.0).then(|| {
                    before
                        .iter()
                        .zip(&counters)
                        .map(|(b, c)| (c - b) as f64 / secs)
                        .collect()
                })
            }
            _ => None,
        };
        e.counters = Some((now, counters));
        rates
    }

    /// `key`'s samples, oldest first, if it is sampled.
    pub(crate) fn window(&self, key: &Key) -> Option<Vec<Sample>> {
        self.series.get(key).map(|e| e.samples.iter().cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(kind: Kind, name: &str) -> Key {
        Key {
            kind,
            name: name.to_owned(),
        }
    }

    fn sample(at_ms: u64) -> Sample {
        Sample {
            at_ms,
            values: vec![at_ms as f64].into_boxed_slice(),
        }
    }

    #[test]
    fn a_ring_keeps_the_last_fifteen_minutes() {
        let mut b = Board::default();
        let k = key(Kind::Gate, "g");
        let now = Instant::now();
        b.view(&k, now);
        for t in 0..(WINDOW as u64 + 100) {
            b.record(&k, sample(t));
        }
        let w = b.window(&k).expect("sampled");
        assert_eq!(w.len(), WINDOW);
        assert_eq!(w.first().map(|s| s.at_ms), Some(100));
        assert_eq!(w.last().map(|s| s.at_ms), Some(WINDOW as u64 + 99));
    }

    #[test]
    fn at_most_max_tracked_series_the_least_recently_viewed_dropped() {
        let mut b = Board::default();
        let start = Instant::now();
        let always = [key(Kind::Overview, ""), key(Kind::Room, "shop")];
        for i in 0..MAX_TRACKED {
            b.view(
                &key(Kind::Queue, &format!("q{i}")),
                start + Duration::from_millis(i as u64),
            );
        }
        // q0 is looked at again: q1 is now the least recently viewed.
        b.view(&key(Kind::Queue, "q0"), start + Duration::from_secs(1));
        b.view(&key(Kind::Limit, "new"), start + Duration::from_secs(2));
        let targets = b.targets(&always, start + Duration::from_secs(3));
        assert_eq!(targets.len(), MAX_TRACKED + always.len());
        assert!(targets.contains(&key(Kind::Queue, "q0")));
        assert!(targets.contains(&key(Kind::Limit, "new")));
        assert!(!targets.contains(&key(Kind::Queue, "q1")));
        // The overview and the rooms never count against the bound.
        for k in &always {
            assert!(targets.contains(k));
        }
    }

    #[test]
    fn a_series_nobody_views_stops_being_sampled() {
        let mut b = Board::default();
        let start = Instant::now();
        let always = [key(Kind::Overview, "")];
        b.view(&key(Kind::Gate, "old"), start);
        b.view(&key(Kind::Gate, "fresh"), start + VIEW_TTL);
        b.view(&key(Kind::Room, "gone"), start);
        let targets = b.targets(&always, start + VIEW_TTL + Duration::from_secs(1));
        assert_eq!(targets, vec![key(Kind::Overview, ""), key(Kind::Gate, "fresh")]);
        assert!(b.window(&key(Kind::Gate, "old")).is_none());
        // A sample for a dropped series is not kept.
        b.record(&key(Kind::Gate, "old"), sample(1));
        assert!(b.window(&key(Kind::Gate, "old")).is_none());
    }

    #[test]
    fn rates_come_from_counter_deltas() {
        let mut b = Board::default();
        let k = key(Kind::Queue, "q");
        let start = Instant::now();
        b.view(&k, start);
        assert_eq!(b.rates(&k, vec![10, 4], start), None);
        assert_eq!(
            b.rates(&k, vec![30, 5], start + Duration::from_secs(2)),
            Some(vec![10.0, 0.5])
        );
        // A counter that went back (the queue was made again) gives no rate.
        assert_eq!(b.rates(&k, vec![1, 5], start + Duration::from_secs(3)), None);
        assert_eq!(
            b.rates(&k, vec![2, 5], start + Duration::from_secs(4)),
            Some(vec![1.0, 0.0])
        );
    }

    #[test]
    fn kinds_parse_and_have_fields() {
        for k in Kind::ALL {
            assert_eq!(Kind::parse(k.as_str()), Some(k));
            assert!(!k.fields().is_empty());
            for (rate, _) in k.rates() {
                assert!(k.fields().contains(rate), "{k:?}: {rate}");
            }
        }
        assert_eq!(Kind::parse("Gate"), None);
        assert_eq!(Kind::parse(""), None);
    }
}
