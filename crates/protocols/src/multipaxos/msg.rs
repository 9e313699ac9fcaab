//! MultiPaxos messages and durable records.

use serde::{Deserialize, Serialize};
use synod_core::{Ballot, Command};

/// The value of one slot: a batch of client commands (a no-op batch is empty).
pub type Batch = Vec<Command>;

/// One accepted slot as reported in a promise.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptedSlot {
    pub slot: u64,
    pub ballot: Ballot,
    pub value: Batch,
    /// The sender knows this value is chosen.
    pub committed: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// Phase 1a, for every slot from `from_slot` on (one phase 1 for all future slots).
    Prepare { ballot: Ballot, from_slot: u64 },
    /// Phase 1b: the acceptor promised `ballot` and reports what it accepted from `from_slot`.
    Promise { ballot: Ballot, accepted: Vec<AcceptedSlot> },
    /// Phase 2a for one slot. `commit_upto` piggybacks the leader's committed prefix.
    Accept { ballot: Ballot, slot: u64, value: Batch, commit_upto: u64 },
    /// Phase 2b.
    Accepted { ballot: Ballot, slot: u64 },
    /// Refusal: the sender has promised the higher `promised` ballot.
    Nack { ballot: Ballot, promised: Ballot },
    /// Leader heartbeat with its committed prefix and highest proposed slot.
    Heartbeat { ballot: Ballot, commit_upto: u64 },
    /// A follower asks for the chosen values of slots `[from, to]`.
    CatchupReq { from: u64, to: u64 },
    /// Chosen values for a lagging follower.
    CatchupResp { ballot: Ballot, entries: Vec<(u64, Batch)>, commit_upto: u64 },
}

/// What MultiPaxos persists. Replayed in order on restart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// Promised not to accept below `ballot`.
    Promise(Ballot),
    /// Accepted `value` for `slot` at `ballot`.
    Accept { slot: u64, ballot: Ballot, value: Batch },
    /// `value` is chosen for `slot` (learned through catch-up).
    Chosen { slot: u64, value: Batch },
    /// Every slot up to `upto` is chosen and the local copy is the chosen value.
    CommitUpto(u64),
}
