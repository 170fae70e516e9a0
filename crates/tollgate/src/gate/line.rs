//! A gate's line in the embedded store: first come, first served, and any
//! ticket's position in O(log n); and a draw's block within it.
//!
//! Tickets take slots in arrival order. A Fenwick tree over the slots
//! (1 where a ticket is, 0 where one left) counts the tickets up to a slot
//! in O(log n), which is the ticket's position; a `BTreeMap` by slot gives
//! the head and the order. Slots of departed tickets stay in the tree as
//! zeros until they are more than half of it; then the live tickets are
//! given slots 0, 1, 2… again and the tree is rebuilt, in O(n) for at least
//! n / 2 departures since the last time, so O(1) per departure on average.
//!
//! A draw (tickets entered with an order key while the gate holds for an
//! opening, see `GateState::queue`) is a block of the line between the
//! slots taken before it began and those taken after: its tickets stand
//! in the order of their numbers (the draw's base plus the key, as their
//! scores in Redis's q), ties by id as Redis orders equal scores. They sit
//! in a sorted vector (a join or a departure moves O(n) entries, a
//! position is a binary search) until the draw ends, when the whole line
//! takes consecutive slots again in its order.

use std::collections::BTreeMap;

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct Line {
    /// Slot -> ticket id, in line order.
    order: BTreeMap<u64, String>,
    /// The Fenwick tree: node i (from 1) sums the `i & -i` slots ending at
    /// slot `base + i - 1`.
    tree: Vec<u32>,
    /// The slot of the tree's first node.
    base: u64,
    /// The draw under way, if any (not in the gate's snapshot record,
    /// which predates it: see `store/embedded/snapshot.rs`).
    #[serde(skip)]
    pub(super) draw: Option<Draw>,
}

/// A draw's block of the line.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Draw {
    /// The draw's base (as Redis's B): a drawn ticket's number is this
    /// plus its key.
    pub(super) base: u64,
    /// Slots before this are ahead of the draw, the others behind it.
    from: u64,
    /// The draw's tickets by (number, id), ascending.
    keyed: Vec<(u64, String)>,
}

/// Tickets' new slots: (slot, ticket id).
pub(super) type Slots = Vec<(u64, String)>;

/// The slot of a ticket in a draw (its place is found by its number).
pub(super) const DRAWN: u64 = u64::MAX;

/// Below this many slots the tree is never renumbered.
const MIN_RENUMBER: usize = 64;

impl Line {
    pub(super) fn len(&self) -> usize {
        self.order.len() + self.draw.as_ref().map_or(0, |d| d.keyed.len())
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The head of the line's ticket id.
    pub(super) fn head(&self) -> Option<&String> {
        self.first(1).next()
    }

    /// The first `n` ticket ids, head first.
    pub(super) fn first(&self, n: usize) -> impl Iterator<Item = &String> {
        let from = self.draw.as_ref().map_or(u64::MAX, |d| d.from);
        let keyed = self.draw.iter().flat_map(|d| d.keyed.iter().map(|(_, id)| id));
        self.order
            .range(..from)
            .map(|(_, id)| id)
            .chain(keyed)
            .chain(self.order.range(from..).map(|(_, id)| id))
            .take(n)
    }

    /// The ticket at index `i` of the line (0: the head), in O(log n)
    /// outside a draw: a descent of the tree to the slot where the count
    /// of tickets reaches `i + 1`.
    pub(super) fn nth(&self, i: usize) -> Option<&String> {
        let (ahead, keyed) = match &self.draw {
            Some(d) => {
                let before = d.from.saturating_sub(self.base).min(self.tree.len() as u64) as usize;
                (self.prefix(before) as usize, d.keyed.as_slice())
            }
            None => (usize::MAX, &[][..]),
        };
        if i < ahead {
            return self.slot_of(i as u32 + 1);
        }
        if let Some((_, id)) = keyed.get(i - ahead) {
            return Some(id);
        }
        // Behind the draw: the tree's count up to the draw's start, plus
        // those behind it.
        let behind = i - ahead - keyed.len();
        self.slot_of((ahead + behind) as u32 + 1)
    }

    /// The ticket at the slot where the tree's running count first
    /// reaches `count` (1: the first ticket).
    fn slot_of(&self, count: u32) -> Option<&String> {
        let (mut at, mut left) = (0usize, count);
        let mut step = self.tree.len().checked_ilog2().map_or(0, |b| 1usize << b);
        while step > 0 {
            let next = at + step;
            if next <= self.tree.len() && self.tree[next - 1] < left {
                at = next;
                left -= self.tree[next - 1];
            }
            step >>= 1;
        }
        // `at` slots hold fewer than `count`; the next one reaches it.
        if at >= self.tree.len() {
            return None;
        }
        self.order.get(&(self.base + at as u64))
    }

    /// Starts a draw whose tickets' numbers are `base` plus their keys,
    /// behind every ticket in line now.
    pub(super) fn start_draw(&mut self, base: u64) {
        let from = self.base + self.tree.len() as u64;
        self.draw = Some(Draw {
            base,
            from,
            keyed: Vec::new(),
        });
    }

    /// Puts `id`, numbered `number`, in its place in the draw under way.
    pub(super) fn push_drawn(&mut self, number: u64, id: &str) {
        if let Some(d) = &mut self.draw {
            let entry = (number, id.to_owned());
            let at = d.keyed.partition_point(|e| *e < entry);
            d.keyed.insert(at, entry);
        }
    }

    /// Ends the draw under way: the whole line takes consecutive slots in
    /// its order (returned, for the tickets to learn theirs), and the
    /// draw's tickets, head first, are returned too.
    pub(super) fn end_draw(&mut self) -> Option<(Vec<String>, Slots)> {
        let drawn: Vec<String> = self
            .draw
            .as_ref()?
            .keyed
            .iter()
            .map(|(_, id)| id.clone())
            .collect();
        let ids: Vec<String> = self.first(usize::MAX).cloned().collect();
        self.draw = None;
        Some((drawn, self.lay(ids)))
    }

    /// Puts `id` at the end of the line; returns its slot.
    pub(super) fn push(&mut self, id: &str) -> u64 {
        let slot = self.base + self.tree.len() as u64;
        // A new last node covers the nodes of its span before it, plus
        // itself (1: a ticket is there).
        let n = self.tree.len() + 1;
        let covered = self.prefix(n - 1) - self.prefix(n - lowbit(n));
        self.tree.push(covered + 1);
        self.order.insert(slot, id.to_owned());
        slot
    }

    /// Takes the ticket at `slot` (numbered `number`, with id `id`) out
    /// of the line.
    pub(super) fn remove(&mut self, slot: u64, number: u64, id: &str) -> Option<String> {
        if slot == DRAWN {
            let d = self.draw.as_mut()?;
            let at = d
                .keyed
                .binary_search_by(|(n, i)| (*n, i.as_str()).cmp(&(number, id)))
                .ok()?;
            return Some(d.keyed.remove(at).1);
        }
        let id = self.order.remove(&slot)?;
        let mut i = (slot - self.base) as usize + 1;
        while i <= self.tree.len() {
            self.tree[i - 1] -= 1;
            i += lowbit(i);
        }
        Some(id)
    }

    /// The position of the ticket at `slot` (numbered `number`, with id
    /// `id`; 1: the head).
    pub(super) fn position(&self, slot: u64, number: u64, id: &str) -> u64 {
        let Some(d) = &self.draw else {
            return u64::from(self.prefix((slot - self.base) as usize + 1));
        };
        // Tickets ahead of the draw, then the draw's, then the rest.
        let ahead =
            u64::from(self.prefix(d.from.saturating_sub(self.base).min(self.tree.len() as u64) as usize));
        if slot == DRAWN {
            let rank = d.keyed.partition_point(|(n, i)| (*n, i.as_str()) < (number, id));
            return ahead + rank as u64 + 1;
        }
        let here = u64::from(self.prefix((slot - self.base) as usize + 1));
        if slot < d.from {
            here
        } else {
            here + d.keyed.len() as u64
        }
    }

    /// Whether departed slots are more than half the tree: time for
    /// `renumber`.
    pub(super) fn sparse(&self) -> bool {
        self.tree.len() > MIN_RENUMBER && self.tree.len() > 2 * self.order.len()
    }

    /// Gives the tickets consecutive slots from the current base on, in
    /// line order, and rebuilds the tree; returns each ticket's new slot.
    pub(super) fn renumber(&mut self) -> Slots {
        let base = self.base;
        if let Some(d) = &mut self.draw {
            // The draw stays between the same tickets.
            d.from = base + self.order.range(..d.from).count() as u64;
        }
        let ids = std::mem::take(&mut self.order).into_values().collect();
        self.lay(ids)
    }

    /// Gives `ids`, in order, consecutive slots from the current base on
    /// (outside the draw, if one is under way), and rebuilds the tree;
    /// returns each ticket's slot.
    fn lay(&mut self, ids: Vec<String>) -> Slots {
        let base = self.base;
        let moved: Slots = ids
            .into_iter()
            .enumerate()
            .map(|(i, id)| (base + i as u64, id))
            .collect();
        // All ones: node i covers lowbit(i) slots, all taken.
        self.tree = (1..=moved.len()).map(|i| lowbit(i) as u32).collect();
        self.order = moved.iter().cloned().collect();
        moved
    }

    /// The sum of the first `n` slots.
    fn prefix(&self, mut n: usize) -> u32 {
        let mut sum = 0;
        while n > 0 {
            sum += self.tree[n - 1];
            n -= lowbit(n);
        }
        sum
    }
}

fn lowbit(i: usize) -> usize {
    i & i.wrapping_neg()
}

#[cfg(test)]
mod tests {
    use super::{DRAWN, Line};

    #[test]
    fn positions_follow_departures_and_renumbering() {
        let mut line = Line::default();
        let mut slots: Vec<u64> = (0..1000).map(|i| line.push(&format!("t{i}"))).collect();
        // Every third ticket leaves.
        let mut live = Vec::new();
        for (i, slot) in slots.iter().enumerate() {
            if i % 3 == 0 {
                assert!(line.remove(*slot, 0, "").is_some());
            } else {
                live.push(*slot);
            }
        }
        for (i, slot) in live.iter().enumerate() {
            assert_eq!(line.position(*slot, 0, ""), i as u64 + 1);
        }
        // The first 500 of the rest leave too: sparse, renumbered.
        for slot in live.drain(..500) {
            line.remove(slot, 0, "");
        }
        assert!(line.sparse());
        slots = line.renumber().into_iter().map(|(s, _)| s).collect();
        assert!(!line.sparse());
        assert_eq!(slots.len(), line.len());
        for (i, slot) in slots.iter().enumerate() {
            assert_eq!(line.position(*slot, 0, ""), i as u64 + 1);
        }
        let more = line.push("last");
        assert_eq!(line.position(more, 0, ""), line.len() as u64);
        assert_eq!(line.head(), line.first(1).next());
    }

    #[test]
    fn a_draw_stands_between_those_before_and_after_it_in_key_order() {
        let mut line = Line::default();
        let a = line.push("a");
        let b = line.push("b");
        line.start_draw(100);
        // Keys 30, 10, 20, and a tie at 20 ordered by id.
        for (number, id) in [(130, "x"), (110, "y"), (120, "z"), (120, "w")] {
            line.push_drawn(number, id);
        }
        let c = line.push("c");
        let order: Vec<&String> = line.first(10).collect();
        assert_eq!(order, ["a", "b", "y", "w", "z", "x", "c"]);
        assert_eq!(line.position(a, 0, "a"), 1);
        assert_eq!(line.position(DRAWN, 120, "w"), 4);
        assert_eq!(line.position(DRAWN, 120, "z"), 5);
        assert_eq!(line.position(c, 0, "c"), 7);
        // Departures from either part.
        assert_eq!(line.remove(a, 0, "a").as_deref(), Some("a"));
        assert_eq!(line.remove(DRAWN, 110, "y").as_deref(), Some("y"));
        assert_eq!(line.remove(DRAWN, 110, "y"), None);
        assert_eq!(line.position(DRAWN, 120, "w"), 2);
        assert_eq!(line.position(c, 0, "c"), 5);
        assert_eq!(line.head().map(String::as_str), Some("b"));
        line.remove(b, 0, "b");
        assert_eq!(line.head().map(String::as_str), Some("w"));
        // Many departures renumber around the draw.
        let many: Vec<u64> = (0..200).map(|i| line.push(&format!("m{i}"))).collect();
        for slot in &many[..150] {
            line.remove(*slot, 0, "");
        }
        assert!(line.sparse());
        let renumbered = line.renumber();
        let c = renumbered
            .iter()
            .find(|(_, id)| id == "c")
            .map(|(slot, _)| *slot)
            .expect("c");
        assert_eq!(line.position(c, 0, "c"), 4, "c is behind the three drawn left");
        // The draw ends: the line is one again, in the same order.
        let (drawn, moved) = line.end_draw().expect("a draw");
        assert_eq!(drawn, ["w", "z", "x"]);
        assert_eq!(moved.len(), 3 + 1 + 50);
        let ids: Vec<&String> = line.first(4).collect();
        assert_eq!(ids, ["w", "z", "x", "c"]);
        for (i, (slot, id)) in moved.iter().enumerate() {
            assert_eq!(line.position(*slot, 0, id), i as u64 + 1);
        }
        assert!(line.end_draw().is_none());
    }

    #[test]
    fn nth_walks_the_line_in_order_around_departures_and_a_draw() {
        let mut line = Line::default();
        let slots: Vec<u64> = (0..100).map(|i| line.push(&format!("t{i}"))).collect();
        for slot in slots.iter().step_by(3) {
            line.remove(*slot, 0, "");
        }
        line.start_draw(1000);
        for (number, id) in [(1003, "c"), (1001, "a"), (1002, "b")] {
            line.push_drawn(number, id);
        }
        for i in 0..5 {
            line.push(&format!("after{i}"));
        }
        let order: Vec<String> = line.first(usize::MAX).cloned().collect();
        assert_eq!(order.len(), line.len());
        for (i, id) in order.iter().enumerate() {
            assert_eq!(line.nth(i), Some(id), "index {i}");
        }
        assert_eq!(line.nth(order.len()), None);
        line.end_draw();
        for (i, id) in order.iter().enumerate() {
            assert_eq!(line.nth(i), Some(id), "index {i} after the draw");
        }
        assert_eq!(Line::default().nth(0), None);
    }
}
