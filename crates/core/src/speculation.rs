//! Speculative execution with rollback, for the drivers.
//!
//! A protocol may execute a command before it is committed (Nezha's leader executes on
//! release and answers with the result, §5.3) and may have to undo that after a view change
//! (§6). It says so with [`Action::Speculate`](crate::Action::Speculate) (apply provisionally)
//! and [`Action::Rollback`](crate::Action::Rollback) (undo every provisional apply not yet
//! confirmed); a later [`Action::Apply`](crate::Action::Apply) of the same command at the
//! same position confirms a provisional apply. Every driver keeps one [`Speculation`] next
//! to its state machine, so the three executors share these rules.
//!
//! The state before each provisional apply is kept (the state machine's maps are
//! persistent, so a clone is O(1) and shares structure): confirming drops it, rolling back
//! restores the oldest one. Snapshots and the simulator's checks look at
//! [`Speculation::settled`], the state with final applies only.

use crate::kv::{Command, OpResult};
use crate::protocol::Pos;
use crate::session::StateMachine;
use std::collections::VecDeque;

#[derive(Clone, Debug, Default)]
pub struct Speculation {
    /// Provisional applies in order: position, command, result, and the state before it.
    pending: VecDeque<(Pos, Command, OpResult, StateMachine)>,
}

impl Speculation {
    /// Apply `cmd` at `pos` provisionally; returns its result.
    pub fn speculate(&mut self, sm: &mut StateMachine, pos: Pos, cmd: &Command) -> OpResult {
        let before = sm.clone();
        let result = sm.apply_at(pos, cmd).result();
        self.pending.push_back((pos, cmd.clone(), result.clone(), before));
        result
    }

    /// A final apply: confirms the oldest provisional apply if it is this command at this
    /// position (its result is returned, nothing runs twice); otherwise undoes every
    /// provisional apply first, then applies.
    pub fn apply(&mut self, sm: &mut StateMachine, pos: Pos, cmd: &Command) -> OpResult {
        match self.pending.front() {
            Some((p, c, _, _)) if *p == pos && c == cmd => {
                let (_, _, result, _) = self.pending.pop_front().expect("front exists");
                return result;
            }
            Some(_) => {
                self.rollback(sm);
            }
            None => {}
        }
        sm.apply_at(pos, cmd).result()
    }

    /// Undo every provisional apply not yet confirmed; returns how many were undone.
    pub fn rollback(&mut self, sm: &mut StateMachine) -> usize {
        let n = self.pending.len();
        if let Some((_, _, _, before)) = self.pending.drain(..).next() {
            *sm = before;
        }
        n
    }

    /// The state with final applies only.
    pub fn settled<'a>(&'a self, sm: &'a StateMachine) -> &'a StateMachine {
        self.pending.front().map_or(sm, |(_, _, _, before)| before)
    }

    /// Provisional applies not yet confirmed.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// The state machine was replaced (snapshot installed, restart): forget everything.
    pub fn reset(&mut self) {
        self.pending.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::Op;
    use bytes::Bytes;

    fn put(seq: u64, v: &str) -> Command {
        let op = Op::Put { key: Bytes::from_static(b"k"), value: Bytes::copy_from_slice(v.as_bytes()) };
        Command { client: 1, seq, acked_below: seq, now_ms: 0, op }
    }

    #[test]
    fn confirmed_applies_run_once_and_rollback_restores_the_settled_state() {
        let mut sm = StateMachine::new();
        let mut spec = Speculation::default();
        spec.apply(&mut sm, Pos::slot(1, 0), &put(1, "a"));
        let settled = sm.clone();
        spec.speculate(&mut sm, Pos::slot(2, 0), &put(2, "b"));
        spec.speculate(&mut sm, Pos::slot(3, 0), &put(3, "c"));
        assert_eq!(spec.settled(&sm), &settled);
        // Confirm the first: nothing runs again.
        let count = sm.applied_count();
        spec.apply(&mut sm, Pos::slot(2, 0), &put(2, "b"));
        assert_eq!(sm.applied_count(), count);
        assert_eq!(spec.pending(), 1);
        let after_two = spec.settled(&sm).clone();
        assert_eq!(after_two.applied_count(), 2);
        // Roll the third back.
        assert_eq!(spec.rollback(&mut sm), 1);
        assert_eq!(sm, after_two);
        // A final apply of something else at a provisional position undoes it first.
        spec.speculate(&mut sm, Pos::slot(3, 0), &put(3, "c"));
        spec.apply(&mut sm, Pos::slot(3, 0), &put(4, "d"));
        assert_eq!(spec.pending(), 0);
        let mut expect = after_two.clone();
        expect.apply_at(Pos::slot(3, 0), &put(4, "d"));
        assert_eq!(sm, expect);
    }
}
