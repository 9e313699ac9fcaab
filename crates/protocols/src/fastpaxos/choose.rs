//! Step 3, **picking a value in phase 2a** (Fast Paxos §3.2): the rule O4, as the core's
//! codec hook that decides a slot from the reports of a quorum (phase 1 of a new round, and
//! the leader's coordinated recovery of §3.3, whose reports are the fast round's 2b messages).
//!
//! Let Q be the acceptors that answered and k the highest round any of them voted in. If k
//! is a classic round, its value (one per round). If k is fast, a value v such that some
//! fast quorum R has every acceptor of Q ∩ R voting v in k — that is, at least
//! |Q| + |R| − n of Q voted v in k — if there is one (at most one: any classic quorum and
//! two fast quorums intersect); otherwise any value voted in k (we take the most voted).

use crate::layers::codec::{FullCopy, PayloadCodec, Proposal, Recovered};
use crate::multipaxos::{AcceptedSlot, Value};
use synod_core::{Ballot, NodeId, Time};

/// Fast Paxos's value picking (O4), with full copies to every acceptor.
#[derive(Clone, Copy, Debug)]
pub struct FastChoice {
    pub fast_quorum: fn(usize) -> usize,
}

impl FastChoice {
    /// O4 over `reports` from `promises` acceptors of `n`.
    pub fn pick(&self, reports: &[AcceptedSlot], promises: usize, n: usize) -> Recovered {
        if let Some(a) = reports.iter().find(|a| a.committed) {
            return Recovered::Chosen(a.value.clone());
        }
        // Rounds order by ballot, and within one ballot the classic round is above the fast.
        let Some(k) = reports.iter().map(|a| (a.ballot, !a.fast)).max() else { return Recovered::Free };
        let in_k: Vec<&Value> = reports.iter().filter(|a| (a.ballot, !a.fast) == k).map(|a| &a.value).collect();
        if k.1 {
            return Recovered::Propose(in_k[0].clone());
        }
        let mut counts: Vec<(&Value, usize)> = Vec::new();
        for v in in_k {
            match counts.iter_mut().find(|(x, _)| *x == v) {
                Some(c) => c.1 += 1,
                None => counts.push((v, 1)),
            }
        }
        // |Q ∩ R| is at least |Q| + |R| − n: that many of Q must have voted v.
        let needed = (promises + (self.fast_quorum)(n)).saturating_sub(n).max(1);
        if let Some((v, _)) = counts.iter().find(|(_, c)| *c >= needed) {
            return Recovered::Propose((*v).clone());
        }
        // No value can have been chosen in k: any will do; the most voted (first on ties).
        let best = counts.iter().map(|(_, c)| *c).max().unwrap_or(0);
        let v = counts.iter().find(|(_, c)| *c == best).map(|(v, _)| (*v).clone()).unwrap_or_else(Value::noop);
        Recovered::Propose(v)
    }
}

impl PayloadCodec for FastChoice {
    /// Classic rounds replicate the whole value to a majority, as plain MultiPaxos does.
    fn encode(&mut self, now: Time, slot: u64, b: Ballot, value: Value, members: &[NodeId], me: NodeId) -> Proposal {
        FullCopy.encode(now, slot, b, value, members, me)
    }

    fn recover(&self, reports: &[AcceptedSlot]) -> Recovered {
        // Without the number of answers, assume only the reporters answered.
        let n = reports.len();
        self.pick(reports, n, n.max(1))
    }

    fn recover_among(&self, reports: &[AcceptedSlot], promises: usize, n: usize) -> Recovered {
        self.pick(reports, promises, n)
    }
}
