//! A queue's lookups (jobs.lua: `get`, `list`), beside its steps in
//! `model.rs`: read only.

use super::{Place, Queue};
use crate::jobs::types::{ListFrom, PREVIEW_BYTES, RawInfo, RawState, ready_score};

/// Lookups (jobs.lua: `get`, `list`): read only, nothing promoted, so a
/// delayed job past its due time reads as delayed until a claim or stats
/// moves it, as on Redis.
impl Queue {
    /// Job `id` as it stands; `None` if unknown (a cancelled job is gone).
    pub(crate) fn info(&self, id: &str, whole: bool) -> Option<RawInfo> {
        let (d, place) = self.jobs.get(id)?;
        let (state, score, fence) = match *place {
            Place::Ready => (RawState::Ready, ready_score(d.prio, d.seq), None),
            Place::Delayed(at) => (RawState::Delayed, at, None),
            Place::InFlight { deadline, fence } => (RawState::Running, deadline, Some(fence)),
            Place::Dead(at) => (RawState::Dead, at, None),
            Place::Done(at) => (RawState::Completed, at, None),
        };
        Some(RawInfo {
            id: id.to_owned(),
            state,
            score,
            priority: d.prio,
            max_attempts: d.max,
            attempts: d.attempts,
            fence,
            last_error: d.error.clone(),
            payload_size: d.payload.len() as u64,
            preview: if whole {
                d.payload.clone()
            } else {
                d.payload[..d.payload.len().min(PREVIEW_BYTES)].to_vec()
            },
            group: Some(self.fair.group_of(id))
                .filter(|g| !g.is_empty())
                .map(str::to_owned),
        })
    }

    /// Up to `limit` jobs in `state` in score order (ties by id), from
    /// right after `from` if that job is still there at that score, else
    /// from the first scored `from.score` or more (jobs.lua: `list`).
    pub(crate) fn list(&self, state: RawState, from: Option<&ListFrom<'_>>, limit: usize) -> Vec<RawInfo> {
        let set = match state {
            RawState::Ready => {
                // Scored as on Redis: (255 - prio) * 2^44 + seq, in the
                // same order as this set's keys.
                let split = |s: u64| ((s >> 44).min(255) as u8, s & ((1 << 44) - 1));
                let (p, seq) = split(from.map_or(0, |f| f.score));
                let rows = (self.ready.range((p, seq, String::new())..))
                    .map(|(p, seq, id)| (ready_score(255 - p, *seq), id));
                return self.page(rows, from, limit, |f| {
                    let (p, seq) = split(f.score);
                    self.ready.contains(&(p, seq, f.id.to_owned()))
                });
            }
            RawState::Delayed => &self.delayed,
            RawState::Running => &self.in_flight,
            RawState::Dead => &self.dead,
            RawState::Completed => &self.done,
        };
        let start = from.map_or(0, |f| f.score);
        let rows = set.range((start, String::new())..).map(|(at, id)| (*at, id));
        self.page(rows, from, limit, |f| set.contains(&(f.score, f.id.to_owned())))
    }

    /// A page of `rows` (score, id in order) from `from` (`present`: its job
    /// is still there at its score).
    fn page<'a>(
        &self,
        rows: impl Iterator<Item = (u64, &'a String)>,
        from: Option<&ListFrom<'_>>,
        limit: usize,
        present: impl Fn(&ListFrom<'_>) -> bool,
    ) -> Vec<RawInfo> {
        let after = |score: u64, id: &str| match from {
            None => true,
            Some(f) if present(f) => (score, id) > (f.score, f.id),
            Some(f) => score >= f.score,
        };
        rows.filter(|(score, id)| after(*score, id))
            .take(limit)
            .filter_map(|(_, id)| self.info(id, false))
            .collect()
    }
}
