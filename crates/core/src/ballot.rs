//! Ballots (Paxos) / terms (Raft): a round number made unique by the proposer's id.

use crate::protocol::NodeId;
use serde::{Deserialize, Serialize};

/// A ballot orders first by round, then by node id, so two proposers never share one.
/// `Ballot::ZERO` is below every real ballot (HoliPaxos Rule 2 campaigns with it as the
/// "invalid" ballot).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Ballot {
    pub round: u64,
    pub node: NodeId,
}

impl Ballot {
    pub const ZERO: Ballot = Ballot { round: 0, node: 0 };

    pub fn new(round: u64, node: NodeId) -> Ballot {
        Ballot { round, node }
    }

    /// The smallest ballot owned by `node` that is greater than `self`.
    pub fn next_for(self, node: NodeId) -> Ballot {
        Ballot { round: self.round + 1, node }
    }

    pub fn is_zero(self) -> bool {
        self == Ballot::ZERO
    }
}

impl std::fmt::Display for Ballot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.round, self.node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordering_is_round_then_node() {
        assert!(Ballot::new(1, 5) < Ballot::new(2, 0));
        assert!(Ballot::new(2, 0) < Ballot::new(2, 1));
        assert!(Ballot::ZERO < Ballot::new(0, 1));
        let b = Ballot::new(3, 2).next_for(1);
        assert_eq!(b, Ballot::new(4, 1));
        assert!(b > Ballot::new(3, 2));
    }
}
