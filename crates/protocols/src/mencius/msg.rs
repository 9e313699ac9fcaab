//! Mencius messages and durable records.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use synod_core::{Ballot, Command};

/// The value of one slot: client commands, or nothing (a SKIP / no-op).
pub type Value = Vec<Command>;

/// What an acceptor reports about one slot in a promise.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reported {
    pub slot: u64,
    /// The ballot the value was accepted in; `None`: known chosen (committed).
    pub ballot: Option<Ballot>,
    pub value: Value,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// Phase 2a for several slots at one ballot. The owner's own ballot `(0, owner)` needs no
    /// phase 1 (Coordinated Paxos: every acceptor starts promised to it); a revoker's is higher.
    Accept { ballot: Ballot, entries: Vec<(u64, Value)> },
    /// Phase 2b for these slots.
    Accepted { ballot: Ballot, slots: Vec<u64> },
    /// Refusal of an Accept or Prepare: the sender promised `promised` for `slot`.
    Nack { ballot: Ballot, slot: u64, promised: Ballot },
    /// These slots are chosen (learners apply them in slot order).
    Commit { entries: Vec<(u64, Value)> },
    /// Phase 1a of a revocation (Rule 3): take over `owner`'s slots in `from..=to`.
    Prepare { ballot: Ballot, owner: u32, from: u64, to: u64 },
    /// Phase 1b: promised `ballot` for those slots; what was accepted or chosen in them.
    Promise { ballot: Ballot, owner: u32, from: u64, to: u64, reported: Vec<Reported> },
    /// Periodic liveness and progress: the sender's next unexecuted slot, the highest slot
    /// it has seen used, and the next slot it will propose in.
    Heartbeat { exec_next: u64, max_seen: u64, next_own: u64 },
    /// The state machine after every slot up to `upto` (for a peer behind the sender's
    /// trimmed log).
    Snapshot { upto: u64, data: Bytes },
}

/// Durable records, replayed in order on restart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// Accepted `value` in `slot` at `ballot` (also the owner's own proposal, persisted
    /// before it is sent so a restarted owner never proposes twice in one slot).
    Accepted { slot: u64, ballot: Ballot, value: Value },
    /// Promised `ballot` for `owner`'s slots in `from..=to`.
    Promised { ballot: Ballot, owner: u32, from: u64, to: u64 },
    /// `slot` is chosen with `value`.
    Chosen { slot: u64, value: Value },
    /// The state machine after every slot up to `upto`: the first record of a compacted image.
    Snapshot { upto: u64, data: Bytes },
}
