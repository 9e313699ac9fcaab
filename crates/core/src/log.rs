//! The instance log shared by log-based protocols: slots that are in progress, committed or
//! executed, a cursor for in-order execution, and trimming of the executed prefix.
//!
//! Slots are numbered from 1. Everything below `first_index()` has been trimmed (it lives in
//! a snapshot or was garbage-collected by GLE trimming).

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SlotState {
    /// Proposed / accepted, not known to be chosen.
    InProgress,
    /// Known chosen; not yet applied.
    Committed,
    /// Applied to the state machine.
    Executed,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot<V> {
    pub value: V,
    pub state: SlotState,
}

/// A window of slots `[first_index, last_index]`, possibly with holes.
#[derive(Clone, Debug)]
pub struct InstanceLog<V> {
    /// Index of `slots[0]`.
    base: u64,
    slots: VecDeque<Option<Slot<V>>>,
    /// Next slot to execute.
    exec_next: u64,
}

impl<V> Default for InstanceLog<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V> InstanceLog<V> {
    pub fn new() -> Self {
        InstanceLog { base: 1, slots: VecDeque::new(), exec_next: 1 }
    }

    /// First slot still held (everything below was trimmed).
    pub fn first_index(&self) -> u64 {
        self.base
    }

    /// Highest slot that holds something (or `first_index() - 1` when empty).
    pub fn last_index(&self) -> u64 {
        self.base + self.slots.len() as u64 - 1
    }

    /// Number of slots held (including holes).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The next slot to execute; all below are executed (or trimmed).
    pub fn exec_next(&self) -> u64 {
        self.exec_next
    }

    /// Number of executed slots (the execute index).
    pub fn executed_upto(&self) -> u64 {
        self.exec_next - 1
    }

    pub fn get(&self, index: u64) -> Option<&Slot<V>> {
        if index < self.base {
            return None;
        }
        self.slots.get((index - self.base) as usize).and_then(|s| s.as_ref())
    }

    pub fn get_mut(&mut self, index: u64) -> Option<&mut Slot<V>> {
        if index < self.base {
            return None;
        }
        self.slots.get_mut((index - self.base) as usize).and_then(|s| s.as_mut())
    }

    /// Put `value` at `index` with `state`, replacing what was there. Ignored for trimmed
    /// slots (returns false).
    pub fn set(&mut self, index: u64, value: V, state: SlotState) -> bool {
        if index < self.base {
            return false;
        }
        let off = (index - self.base) as usize;
        while self.slots.len() <= off {
            self.slots.push_back(None);
        }
        self.slots[off] = Some(Slot { value, state });
        true
    }

    /// Mark a held slot committed (no-op if absent or already committed/executed).
    pub fn mark_committed(&mut self, index: u64) -> bool {
        match self.get_mut(index) {
            Some(s) if s.state == SlotState::InProgress => {
                s.state = SlotState::Committed;
                true
            }
            _ => false,
        }
    }

    pub fn is_committed(&self, index: u64) -> bool {
        index < self.base
            || index < self.exec_next
            || matches!(self.get(index), Some(s) if s.state != SlotState::InProgress)
    }

    /// The next slot if it is committed and not yet executed: the caller applies it and then
    /// calls [`InstanceLog::advance_exec`]. Stops at the first hole or in-progress slot.
    pub fn next_to_execute(&self) -> Option<(u64, &V)> {
        match self.get(self.exec_next) {
            Some(s) if s.state == SlotState::Committed => Some((self.exec_next, &s.value)),
            _ => None,
        }
    }

    /// Mark `exec_next` executed and move the cursor.
    pub fn advance_exec(&mut self) {
        let i = self.exec_next;
        if let Some(s) = self.get_mut(i) {
            s.state = SlotState::Executed;
        }
        self.exec_next += 1;
    }

    /// Highest index such that every slot from `exec_next` up to it is committed (the
    /// contiguous committed prefix), or `exec_next - 1`.
    pub fn committed_prefix(&self) -> u64 {
        let mut i = self.exec_next;
        while matches!(self.get(i), Some(s) if s.state != SlotState::InProgress) {
            i += 1;
        }
        i - 1
    }

    /// Forget every slot below `index` (they must be executed). Returns how many were dropped.
    pub fn trim_before(&mut self, index: u64) -> usize {
        let index = index.min(self.exec_next);
        let mut n = 0;
        while self.base < index {
            self.slots.pop_front();
            self.base += 1;
            n += 1;
        }
        self.release_spare();
        n
    }

    /// Give back the ring buffer's spare room once the held window is a small part of it. A
    /// `VecDeque` keeps its largest capacity: after one wide window (a joiner's first Accept
    /// far past an empty log, a long GLE freeze) the live window walks through the whole
    /// buffer, touching a fresh page every few slots, so the process's memory grows for
    /// minutes although the log stays short. Shrinking when the capacity is over 4× the
    /// length copies at most a quarter of the capacity, so it is amortized O(1) per slot.
    fn release_spare(&mut self) {
        let (len, cap) = (self.slots.len(), self.slots.capacity());
        if cap > 4096 && cap > 4 * len {
            self.slots.shrink_to((2 * len).max(1024));
        }
    }

    /// Capacity of the slot buffer (for tests of memory use).
    pub fn capacity(&self) -> usize {
        self.slots.capacity()
    }

    /// Reset to an empty log whose next slot is `next` (after installing a snapshot that
    /// covers everything below `next`).
    pub fn reset_to(&mut self, next: u64) {
        self.slots.clear();
        self.base = next;
        self.exec_next = next;
        self.release_spare();
    }

    /// Jump past a snapshot that covers every slot below `next` (installed from a peer or
    /// recovered): drop the slots below `next`, keep the ones from `next` on (accepted
    /// values above the snapshot still matter to Paxos) and move the execution cursor to
    /// `next`. Returns false (and changes nothing) if execution is already at or past it.
    pub fn skip_to(&mut self, next: u64) -> bool {
        if next <= self.exec_next {
            return false;
        }
        while self.base < next && !self.slots.is_empty() {
            self.slots.pop_front();
            self.base += 1;
        }
        self.base = self.base.max(next);
        self.exec_next = next;
        self.release_spare();
        true
    }

    /// Held slots in `[from, to]` in order, skipping holes.
    pub fn range(&self, from: u64, to: u64) -> impl Iterator<Item = (u64, &Slot<V>)> {
        let from = from.max(self.base);
        let to = to.min(self.last_index());
        (from..=to).filter_map(move |i| self.get(i).map(|s| (i, s)))
    }

    /// Remove every slot above `index` (Raft: truncating a conflicting suffix).
    pub fn truncate_after(&mut self, index: u64) {
        let keep = index.saturating_sub(self.base - 1) as usize;
        self.slots.truncate(keep);
        self.release_spare();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn execute_in_order_stops_at_holes() {
        let mut log: InstanceLog<&str> = InstanceLog::new();
        log.set(1, "a", SlotState::Committed);
        log.set(3, "c", SlotState::Committed);
        assert_eq!(log.last_index(), 3);
        assert_eq!(log.next_to_execute(), Some((1, &"a")));
        log.advance_exec();
        assert_eq!(log.next_to_execute(), None, "hole at 2");
        assert_eq!(log.committed_prefix(), 1);
        log.set(2, "b", SlotState::InProgress);
        assert_eq!(log.next_to_execute(), None, "2 not committed");
        assert!(log.mark_committed(2));
        assert_eq!(log.committed_prefix(), 3);
        assert_eq!(log.next_to_execute(), Some((2, &"b")));
        log.advance_exec();
        log.advance_exec();
        assert_eq!(log.executed_upto(), 3);
        assert_eq!(log.get(2).unwrap().state, SlotState::Executed);
    }

    #[test]
    fn trimming_keeps_unexecuted() {
        let mut log: InstanceLog<u32> = InstanceLog::new();
        for i in 1..=5 {
            log.set(i, i as u32, SlotState::Committed);
        }
        log.advance_exec();
        log.advance_exec();
        assert_eq!(log.trim_before(5), 2, "only executed slots are trimmed");
        assert_eq!(log.first_index(), 3);
        assert!(log.get(2).is_none());
        assert!(log.is_committed(2));
        assert!(!log.set(1, 9, SlotState::Committed));
        assert_eq!(log.range(1, 10).map(|(i, _)| i).collect::<Vec<_>>(), vec![3, 4, 5]);
        log.truncate_after(3);
        assert_eq!(log.last_index(), 3);
        log.reset_to(10);
        assert_eq!((log.first_index(), log.exec_next(), log.last_index()), (10, 10, 9));
    }

    #[test]
    fn skip_to_keeps_slots_above_the_snapshot() {
        let mut log: InstanceLog<u32> = InstanceLog::new();
        log.set(2, 2, SlotState::InProgress);
        log.set(5, 5, SlotState::InProgress);
        log.set(6, 6, SlotState::Committed);
        assert!(log.skip_to(5));
        assert_eq!((log.first_index(), log.exec_next()), (5, 5));
        assert!(log.get(2).is_none());
        assert_eq!(log.get(5).map(|s| s.value), Some(5));
        assert!(!log.skip_to(3), "already past");
        assert!(log.skip_to(20));
        assert_eq!((log.first_index(), log.exec_next(), log.len()), (20, 20, 0));
    }

    #[test]
    fn the_buffer_shrinks_once_a_wide_window_is_gone() {
        // A joiner's first Accept lands far past its empty log; its snapshot then covers
        // everything below. The buffer must not keep the wide window's room: the live
        // window would walk through all of it.
        let mut log: InstanceLog<u64> = InstanceLog::new();
        log.set(100_000, 1, SlotState::InProgress);
        assert!(log.capacity() >= 100_000);
        assert!(log.skip_to(99_990));
        assert_eq!(log.len(), 11);
        assert!(log.capacity() <= 4096, "capacity {} after the skip", log.capacity());
        // Same after trimming a long executed prefix (a GLE freeze that ends).
        for i in 99_990..200_000 {
            log.set(i, i, SlotState::Committed);
            log.advance_exec();
        }
        assert!(log.capacity() >= 100_000);
        log.trim_before(199_000);
        assert!(log.capacity() <= 4096, "capacity {} after the trim", log.capacity());
        assert_eq!(log.get(199_500).map(|s| s.value), Some(199_500));
    }
}
