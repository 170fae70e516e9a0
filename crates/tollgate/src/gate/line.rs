//! A gate's line in the embedded store: first come, first served, and any
//! ticket's position in O(log n).
//!
//! Tickets take slots in arrival order. A Fenwick tree over the slots
//! (1 where a ticket is, 0 where one left) counts the tickets up to a slot
//! in O(log n), which is the ticket's position; a `BTreeMap` by slot gives
//! the head and the order. Slots of departed tickets stay in the tree as
//! zeros until they are more than half of it; then the live tickets are
//! given slots 0, 1, 2… again and the tree is rebuilt, in O(n) for at least
//! n / 2 departures since the last time, so O(1) per departure on average.

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
}

/// Below this many slots the tree is never renumbered.
const MIN_RENUMBER: usize = 64;

impl Line {
    pub(super) fn len(&self) -> usize {
        self.order.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The head of the line: its slot and ticket id.
    pub(super) fn head(&self) -> Option<(u64, &String)> {
        self.order.first_key_value().map(|(slot, id)| (*slot, id))
    }

    /// The first `n` ticket ids, head first.
    pub(super) fn first(&self, n: usize) -> impl Iterator<Item = &String> {
        self.order.values().take(n)
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

    /// Takes the ticket at `slot` out of the line.
    pub(super) fn remove(&mut self, slot: u64) -> Option<String> {
        let id = self.order.remove(&slot)?;
        let mut i = (slot - self.base) as usize + 1;
        while i <= self.tree.len() {
            self.tree[i - 1] -= 1;
            i += lowbit(i);
        }
        Some(id)
    }

    /// The position of the ticket at `slot` (1: the head).
    pub(super) fn position(&self, slot: u64) -> u64 {
        u64::from(self.prefix((slot - self.base) as usize + 1))
    }

    /// Whether departed slots are more than half the tree: time for
    /// `renumber`.
    pub(super) fn sparse(&self) -> bool {
        self.tree.len() > MIN_RENUMBER && self.tree.len() > 2 * self.order.len()
    }

    /// Gives the tickets consecutive slots from the current base on, in
    /// line order, and rebuilds the tree; returns each ticket's new slot.
    pub(super) fn renumber(&mut self) -> Vec<(u64, String)> {
        let base = self.base;
        let moved: Vec<(u64, String)> = std::mem::take(&mut self.order)
            .into_values()
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
    use super::Line;

    #[test]
    fn positions_follow_departures_and_renumbering() {
        let mut line = Line::default();
        let mut slots: Vec<u64> = (0..1000).map(|i| line.push(&format!("t{i}"))).collect();
        // Every third ticket leaves.
        let mut live = Vec::new();
        for (i, slot) in slots.iter().enumerate() {
            if i % 3 == 0 {
                assert!(line.remove(*slot).is_some());
            } else {
                live.push(*slot);
            }
        }
        for (i, slot) in live.iter().enumerate() {
            assert_eq!(line.position(*slot), i as u64 + 1);
        }
        // The first 500 of the rest leave too: sparse, renumbered.
        for slot in live.drain(..500) {
            line.remove(slot);
        }
        assert!(line.sparse());
        slots = line.renumber().into_iter().map(|(s, _)| s).collect();
        assert!(!line.sparse());
        assert_eq!(slots.len(), line.len());
        for (i, slot) in slots.iter().enumerate() {
            assert_eq!(line.position(*slot), i as u64 + 1);
        }
        let more = line.push("last");
        assert_eq!(line.position(more), line.len() as u64);
        assert_eq!(line.head().map(|(s, _)| s), slots.first().copied());
    }
}
