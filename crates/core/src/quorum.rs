//! Quorum tracking: who has answered, and whether they form a quorum.

use crate::protocol::NodeId;
use std::collections::BTreeSet;

/// Size of a simple majority of `n` replicas.
pub fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// Collects distinct acknowledgements and reports when `needed` of them arrived.
/// Duplicated messages (the network may duplicate) are counted once.
#[derive(Clone, Debug, Default)]
pub struct QuorumTracker {
    acks: BTreeSet<NodeId>,
    nacks: BTreeSet<NodeId>,
    needed: usize,
}

impl QuorumTracker {
    pub fn new(needed: usize) -> Self {
        QuorumTracker { acks: BTreeSet::new(), nacks: BTreeSet::new(), needed }
    }

    /// A tracker that needs a majority of `n`.
    pub fn majority_of(n: usize) -> Self {
        Self::new(majority(n))
    }

    /// Record an acknowledgement; returns true exactly once: when the quorum is first reached.
    pub fn ack(&mut self, from: NodeId) -> bool {
        let before = self.reached();
        self.acks.insert(from);
        !before && self.reached()
    }

    /// Record a refusal. Returns true when a quorum can no longer be reached among `n` nodes.
    pub fn nack(&mut self, from: NodeId, n: usize) -> bool {
        self.nacks.insert(from);
        n.saturating_sub(self.nacks.len()) < self.needed
    }

    pub fn reached(&self) -> bool {
        self.acks.len() >= self.needed
    }

    pub fn count(&self) -> usize {
        self.acks.len()
    }

    pub fn needed(&self) -> usize {
        self.needed
    }

    pub fn has(&self, node: NodeId) -> bool {
        self.acks.contains(&node)
    }

    pub fn voters(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.acks.iter().copied()
    }

    pub fn reset(&mut self) {
        self.acks.clear();
        self.nacks.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majority_sizes() {
        assert_eq!(majority(1), 1);
        assert_eq!(majority(3), 2);
        assert_eq!(majority(4), 3);
        assert_eq!(majority(5), 3);
    }

    #[test]
    fn duplicates_count_once_and_reach_fires_once() {
        let mut q = QuorumTracker::majority_of(5);
        assert!(!q.ack(1));
        assert!(!q.ack(1));
        assert!(!q.ack(2));
        assert!(q.ack(3));
        assert!(!q.ack(4));
        assert_eq!(q.count(), 4);
    }

    #[test]
    fn nacks_detect_impossible_quorum() {
        let mut q = QuorumTracker::majority_of(3);
        assert!(!q.nack(1, 3));
        assert!(q.nack(2, 3));
    }
}
