//! Log management (HoliPaxos §3.3): how far every replica may trim its log.
//!
//! The leader collects every node's *last executed* index (LE, reported in the reply to its
//! control message) and computes the *global last executed* GLE = min over all members:
//! every replica has applied everything up to GLE, so nobody can need those entries again
//! (Lemma 1). GLE rides on the next control message and everyone trims up to it. An
//! unreachable member freezes GLE (nothing is trimmed that it might still need); the paper
//! fixes an *extended* failure by reconfiguration.
//!
//! *Quorum trim* is the paper's comparison point: trim once a majority executed (the
//! q-th highest LE). It never stalls, but a lagging replica may find its next entries gone
//! and need a snapshot. *Snapshot* is the conventional periodic-snapshot compaction (what
//! Raft does), kept for the Fig. 11 comparison; `None` never trims (plain MultiPaxos).

use std::collections::BTreeMap;
use synod_core::NodeId;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrimMode {
    /// Never trim (baseline MultiPaxos).
    None,
    /// Trim up to GLE = min LE over all members (HoliPaxos).
    Gle,
    /// Trim up to what a majority executed (comparison).
    Quorum,
    /// Periodic snapshots every `snapshot_every` entries, keeping `snapshot_keep` behind.
    Snapshot,
}

impl TrimMode {
    pub fn parse(s: &str) -> Result<TrimMode, String> {
        match s {
            "none" => Ok(TrimMode::None),
            "gle" => Ok(TrimMode::Gle),
            "quorum" => Ok(TrimMode::Quorum),
            "snapshot" => Ok(TrimMode::Snapshot),
            other => Err(format!("option trim: expected gle, quorum, snapshot or none, got {other:?}")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            TrimMode::None => "none",
            TrimMode::Gle => "gle",
            TrimMode::Quorum => "quorum",
            TrimMode::Snapshot => "snapshot",
        }
    }
}

/// The leader's view of each member's LE during one leadership.
#[derive(Clone, Debug, Default)]
pub struct LeTracker {
    le: BTreeMap<NodeId, u64>,
}

impl LeTracker {
    /// Forget all reports (a new leadership collects afresh).
    pub fn clear(&mut self) {
        self.le.clear();
    }

    /// `node` reports its LE. The latest report wins even if it is lower (a replica that
    /// restarted or was wiped executes from an earlier point again); a report that is
    /// merely reordered only makes the computed bound lower, which is safe.
    pub fn report(&mut self, node: NodeId, le: u64) {
        self.le.insert(node, le);
    }

    pub fn get(&self, node: NodeId) -> Option<u64> {
        self.le.get(&node).copied()
    }

    /// GLE: the minimum LE over `members`, once every one of them reported.
    pub fn gle(&self, members: &[NodeId]) -> Option<u64> {
        members.iter().map(|m| self.le.get(m).copied()).collect::<Option<Vec<u64>>>()?.into_iter().min()
    }

    /// The highest index executed by at least `quorum` of `members`.
    pub fn quorum_le(&self, members: &[NodeId], quorum: usize) -> Option<u64> {
        let mut les: Vec<u64> = members.iter().filter_map(|m| self.le.get(m).copied()).collect();
        if quorum == 0 || les.len() < quorum {
            return None;
        }
        les.sort_unstable_by(|a, b| b.cmp(a));
        Some(les[quorum - 1])
    }

    /// The bound for `mode` (None when it cannot be computed yet or the mode does not use
    /// LE reports).
    pub fn bound(&self, mode: TrimMode, members: &[NodeId], quorum: usize) -> Option<u64> {
        match mode {
            TrimMode::Gle => self.gle(members),
            TrimMode::Quorum => self.quorum_le(members, quorum),
            TrimMode::None | TrimMode::Snapshot => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gle_needs_every_member_and_is_the_minimum() {
        let members = [1, 2, 3];
        let mut t = LeTracker::default();
        t.report(1, 104);
        t.report(2, 101);
        assert_eq!(t.gle(&members), None, "node 3 has not reported: nothing may be trimmed");
        t.report(3, 103);
        assert_eq!(t.gle(&members), Some(101));
        assert_eq!(t.quorum_le(&members, 2), Some(103));
        // A restarted replica reports less: GLE follows it down (the leader keeps its own
        // published GLE monotone).
        t.report(2, 0);
        assert_eq!(t.gle(&members), Some(0));
        assert_eq!(t.bound(TrimMode::Quorum, &members, 2), Some(103));
        assert_eq!(t.bound(TrimMode::None, &members, 2), None);
        t.clear();
        assert_eq!(t.get(1), None);
        assert_eq!(TrimMode::parse("gle"), Ok(TrimMode::Gle));
        assert!(TrimMode::parse("sometimes").unwrap_err().contains("gle, quorum"));
    }
}
