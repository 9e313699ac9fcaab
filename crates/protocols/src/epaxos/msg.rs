//! EPaxos messages (Fig. 2 and Fig. 3 of the paper, plus catch-up and liveness probes) and
//! durable records.

use serde::{Deserialize, Serialize};
use synod_core::{Ballot, Command, NodeId, Time};

/// An instance `L.i`: the `index`-th instance of command leader `space` (§4.1: each replica
/// owns its own instance sub-space).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct InstId {
    pub space: NodeId,
    pub index: u64,
}

impl std::fmt::Display for InstId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.space, self.index)
    }
}

/// The ordering attributes of a command (§4.3.1). `deps[k]` is the highest instance of the
/// k-th member (members in sorted order) that the command depends on, 0 for none: the
/// compact dependency list of §4.5 (one entry per replica); since our interference is not
/// transitive (a SCAN interferes with two PUTs that do not interfere with each other),
/// execution treats every instance of that member up to `deps[k]` as a possible dependency
/// and checks interference itself (§4.5, last sentences).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Attrs {
    pub seq: u64,
    pub deps: Vec<u64>,
}

impl Attrs {
    /// Lines 13–14: the union of dependencies and the highest sequence number.
    pub fn merge(&mut self, other: &Attrs) {
        self.seq = self.seq.max(other.seq);
        if self.deps.len() < other.deps.len() {
            self.deps.resize(other.deps.len(), 0);
        }
        for (d, o) in self.deps.iter_mut().zip(&other.deps) {
            *d = (*d).max(*o);
        }
    }
}

/// Where an instance stands on a replica (the status field of `cmds_R[L][i]`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Phase {
    /// Only a promise (Prepare) is known, no command.
    #[default]
    None,
    PreAccepted,
    Accepted,
    Committed,
}

/// A replica's view of an instance as reported in `PrepareOK` (line 39).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reported {
    pub phase: Phase,
    /// The ballot of the vote (`epoch.x.Y` of line 39): the ballot at which the replica
    /// pre-accepted or accepted what it reports.
    pub vballot: Ballot,
    pub cmds: Vec<Command>,
    pub attrs: Attrs,
}

/// A command batch and its attributes proposed for an instance at a ballot: what PreAccept,
/// Accept and TryPreAccept carry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    pub ballot: Ballot,
    pub inst: InstId,
    pub cmds: Vec<Command>,
    pub attrs: Attrs,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Line 5 (and line 35/37 during recovery, at a higher ballot).
    PreAccept(Proposal),
    /// Line 9. `changed`: the replica updated the attributes it was sent. `committed_deps`:
    /// every instance this replica knows that is related to the command and within `attrs`
    /// is committed here (the fast-path condition of §4.4 for the optimized quorum).
    PreAcceptOk { ballot: Ballot, inst: InstId, attrs: Attrs, changed: bool, committed_deps: bool },
    /// Line 17 (carries the command: with thrifty PreAccepts some acceptors never saw it).
    Accept(Proposal),
    /// Line 19.
    AcceptOk { ballot: Ballot, inst: InstId },
    /// A message at `ballot` for `inst` was refused: the replica promised `promised`.
    Nack { ballot: Ballot, inst: InstId, promised: Ballot },
    /// Line 23 (batched: commits and catch-up answers).
    Commit { entries: Vec<(InstId, Vec<Command>, Attrs)> },
    /// Line 26.
    Prepare { ballot: Ballot, inst: InstId },
    /// Line 39. `state` is None when the replica knows nothing of the instance.
    PrepareOk { ballot: Ballot, inst: InstId, state: Option<Reported> },
    /// §4.4: a recovering replica asks to pre-accept a tuple that may have been committed on
    /// the optimized fast path (sent at the recovery ballot; recorded at the default ballot,
    /// as if pre-accepted in the original round).
    TryPreAccept(Proposal),
    /// The answer to a TryPreAccept.
    TryPreAcceptReply { ballot: Ballot, inst: InstId, outcome: TpaOutcome },
    /// Ask for the commits of these instances (a replica missing a commit asks before it
    /// runs Explicit Prepare, §4.6).
    Fetch { insts: Vec<InstId> },
    /// Periodic: the highest instance known per member space (lets a replica that missed
    /// every message of an instance learn that it exists) and a clock for RTT probes (§7.3).
    Heartbeat { known: Vec<u64>, committed: Vec<u64>, sent: Time },
    /// The answer to a heartbeat: its `sent` echoed, for the round-trip time.
    Pong { sent: Time },
}

/// What a replica answers to a TryPreAccept (§4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TpaOutcome {
    /// Pre-accepted: the tuple conflicts with nothing this replica knows.
    Ok,
    /// The tuple cannot have been committed on the fast path: a committed related command is
    /// neither in its deps nor depends on it (or is in its deps with a seq at least as
    /// large), or this replica pre-accepted other attributes in the original round, or is the
    /// command leader and did not commit it.
    NotFast,
    /// An uncommitted related command conflicts: recovery waits until it is committed.
    Defer { on: InstId },
    /// This replica cannot tell now (it voted at a higher ballot, or has forgotten instances
    /// whose keys it no longer knows): ask again later.
    Retry,
}

/// Durable records: the latest state of an instance (the last record of an instance wins on
/// recovery; a promise on an instance whose command this replica never saw has phase None),
/// and a snapshot of the state machine after executing exactly the instances up to `covered`
/// per replica plus `extras` (always the first record of a compacted log, followed by the
/// records of every instance above `forgotten`, executed or not: peers may still ask for
/// them).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Record {
    Inst { inst: InstId, ballot: Ballot, vballot: Ballot, phase: Phase, cmds: Vec<Command>, attrs: Attrs },
    Snapshot { covered: Vec<u64>, extras: Vec<InstId>, forgotten: Vec<u64>, max_seq: u64, data: bytes::Bytes },
}
