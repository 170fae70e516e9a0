//! The queues' lateness histograms in /metrics: what the last scrape read
//! of each tracked queue (the store keeps the bucket counts, so servers
//! sharing Redis agree), rendered as one histogram family (the exporter
//! has no histogram it can set outright).

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A queue's lateness histogram as the store keeps it: a count per bucket
/// of [`tollgate::LATENESS_BOUNDS_MS`] (then one for later than the last
/// bound; none before the first promotion) and the sum.
#[derive(Debug, Clone, Default)]
pub(crate) struct Lateness {
    pub(super) buckets: Vec<u64>,
    pub(super) sum_seconds: f64,
}

/// The last lateness read of each tracked queue.
pub(crate) type LatenessByQueue = std::sync::Arc<std::sync::Mutex<BTreeMap<String, Lateness>>>;

/// Appends `tollgate_queue_lateness_seconds` as one histogram family:
/// cumulative buckets in `le` order, `_sum` and `_count`.
pub(super) fn render_lateness(out: &mut String, by_queue: &BTreeMap<String, Lateness>) {
    const NAME: &str = "tollgate_queue_lateness_seconds";
    if by_queue.is_empty() {
        return;
    }
    let help = super::families::help(NAME);
    let _ = writeln!(out, "# HELP {NAME} {help}\n# TYPE {NAME} histogram");
    let bounds = tollgate::LATENESS_BOUNDS_MS;
    for (queue, l) in by_queue {
        let queue = label_value(queue);
        let mut cumulative = 0;
        for i in 0..=bounds.len() {
            cumulative += l.buckets.get(i).copied().unwrap_or(0);
            let le = bounds
                .get(i)
                .map_or_else(|| "+Inf".to_owned(), |ms| format!("{}", *ms as f64 / 1000.0));
            let _ = writeln!(out, "{NAME}_bucket{{queue=\"{queue}\",le=\"{le}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{NAME}_sum{{queue=\"{queue}\"}} {}", l.sum_seconds);
        let _ = writeln!(out, "{NAME}_count{{queue=\"{queue}\"}} {cumulative}");
    }
}

/// `v` escaped for a label value in the text format.
fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}
