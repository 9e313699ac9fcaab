//! MultiPaxos messages and durable records. A layer (`crate::layers`) adds its own messages
//! and log entries as opaque bytes (`Msg::Layer`, `Value::Layer`), which plain MultiPaxos
//! never sends.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use synod_core::{Ballot, Command, MemberInfo, NodeId};

/// A batch of client commands (a no-op batch is empty).
pub type Batch = Vec<Command>;

/// The value of one log slot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Value {
    /// Client commands, applied to the state machine in order.
    Cmds(Batch),
    /// A layer's entry (opaque to the core): ordered like any value, never applied to the
    /// state machine; handed to the layer when executed.
    Layer(Bytes),
    /// A membership entry: the complete configuration in effect for every slot after this
    /// one, on every replica, once this slot is executed (docs/design.md, "Membership").
    Config(Vec<MemberInfo>),
    /// Some erasure-coded shards of a batch of client commands (a payload codec's piece,
    /// `crate::layers::codec`; plain MultiPaxos never sends one). Executable once it holds
    /// `d` distinct shards.
    Coded(Coded),
}

/// Shards of one erasure-coded batch (Crossword §3.1): the batch is encoded (postcard) into
/// `len` bytes and cut into the `n` shards of a Reed–Solomon codeword with `d` data shards.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coded {
    /// Which payload this is: the ballot of the leader that made it from client commands,
    /// kept when a later leader re-proposes it. Pieces of one slot with equal `origin`, `n`
    /// and `d` are shards of one codeword, whatever ballot they were accepted in, so an
    /// acceptor and a new leader may pool them.
    pub origin: Ballot,
    pub n: u16,
    pub d: u16,
    /// Shards per acceptor in the proposal the piece came from (balanced round-robin,
    /// §3.2; `c ≥ d` = the data shards to everyone): where peers' shards are, for gossip.
    pub c: u16,
    /// An unbalanced assignment (§5.4): the shards each acceptor (by position among the
    /// members) was assigned, as consecutive counts from shard 0 (`erasure::Assignment::
    /// unbalanced`; the proposer's own entry is `n`, it keeps the data shards); empty for
    /// balanced round-robin with `c`. `c` is then the smallest follower count.
    pub counts: Vec<u16>,
    /// Encoded batch length in bytes.
    pub len: u32,
    /// Commands in the batch.
    pub cmds: u32,
    /// The shards held: (index in the codeword, bytes), sorted by index, no duplicates.
    pub shards: Vec<(u16, Bytes)>,
}

impl Coded {
    /// Another piece of the same payload.
    pub fn same_payload(&self, other: &Coded) -> bool {
        self.origin == other.origin && self.n == other.n && self.d == other.d && self.len == other.len
    }

    /// Enough shards to rebuild the batch.
    pub fn complete(&self) -> bool {
        self.shards.len() >= self.d as usize
    }

    /// Shard bytes held.
    pub fn bytes(&self) -> usize {
        self.shards.iter().map(|(_, b)| b.len()).sum()
    }
}

impl Value {
    pub fn noop() -> Value {
        Value::Cmds(Vec::new())
    }

    /// Client commands in the value.
    pub fn len(&self) -> usize {
        match self {
            Value::Cmds(b) => b.len(),
            Value::Coded(c) => c.cmds as usize,
            Value::Layer(_) | Value::Config(_) => 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One accepted slot as reported in a promise.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptedSlot {
    pub slot: u64,
    pub ballot: Ballot,
    pub value: Value,
    /// The sender knows this value is chosen.
    pub committed: bool,
    /// A fast-round vote (`crate::fastpaxos`): at the same ballot, a classic vote is the
    /// higher round, and fast votes of one ballot may differ (Fast Paxos §3.2).
    pub fast: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// Phase 1a, for every slot from `from_slot` on (one phase 1 for all future slots).
    /// Ballot 0 is a probe (a layer's `Campaign::Probe`) that every node rejects.
    Prepare { ballot: Ballot, from_slot: u64 },
    /// Phase 1b: the acceptor promised `ballot` and reports what it accepted from
    /// `from_slot`. `trimmed`: the acceptor dropped every slot up to it from its log (they
    /// are chosen and executed); a candidate that has not executed them cannot learn them
    /// from this promise and must fetch a snapshot first. Always 0 without trimming.
    Promise { ballot: Ballot, accepted: Vec<AcceptedSlot>, trimmed: u64 },
    /// Phase 2a for one slot. `commit_upto` piggybacks the leader's committed prefix.
    Accept { ballot: Ballot, slot: u64, value: Value, commit_upto: u64 },
    /// Phase 2b.
    Accepted { ballot: Ballot, slot: u64 },
    /// Refusal: the sender has promised the higher `promised` ballot. A layer may refuse
    /// with `promised = 0` ("without giving a valid ballot", HoliPaxos Rule 3).
    Nack { ballot: Ballot, promised: Ballot },
    /// Leader heartbeat with its committed prefix (unless the layer replaces it).
    Heartbeat { ballot: Ballot, commit_upto: u64 },
    /// A follower asks for the chosen values of slots `[from, to]`.
    CatchupReq { from: u64, to: u64 },
    /// Chosen values for a lagging follower.
    CatchupResp { ballot: Ballot, entries: Vec<(u64, Value)>, commit_upto: u64 },
    /// Answer to a `CatchupReq` for slots this replica trimmed: everything below `first` is
    /// only available as a snapshot. `source`: a non-leader peer known (from its LE
    /// reports) to have executed that far, to ask for it.
    Trimmed { first: u64, source: Option<NodeId> },
    /// Ask for an on-demand snapshot: `offset == 0` starts a transfer (of a fresh
    /// snapshot), otherwise continue the transfer of the snapshot at `index`.
    SnapshotReq { index: u64, offset: u64 },
    /// One chunk of the snapshot covering slots up to `index`; `members` is the
    /// configuration in effect after `index` (the snapshot is only the state machine).
    SnapshotChunk { index: u64, offset: u64, total: u64, data: Vec<u8>, members: Vec<MemberInfo> },
    /// The answer to a `Prepare` from a candidate that is more than a catch-up chunk behind
    /// what this acceptor knows is chosen (`committed`, its committed prefix), instead of a
    /// `Promise` that would have to carry every one of those slots. The acceptor did
    /// promise the ballot; the candidate gives it up and catches up in chunks first.
    Behind { ballot: Ballot, committed: u64 },
    /// A message of the layer (`crate::layers`), opaque to the core.
    Layer(Bytes),
    /// A replica that holds committed slots it cannot execute yet (only some shards of an
    /// erasure-coded value) asks a peer for these parts of them (Crossword's Reconstruct,
    /// §4.2; RSPaxos's fetch from the leader). Batched: every slot of one fetch cycle.
    FillReq { asks: Vec<(u64, Vec<u16>)> },
    /// The answer: the parts of those slots this replica holds.
    Fill { pieces: Vec<(u64, Value)> },
    /// The leader of `ballot` asks for a read lease (`lease.rs`), sent with each heartbeat.
    LeaseReq { ballot: Ballot, round: u64 },
    /// A follower of `ballot` granted lease round `round`: it refuses phase 1 of any other
    /// candidate for the lease duration on its clock.
    LeaseAck { ballot: Ballot, round: u64 },
    /// Fast Paxos (`crate::fastpaxos`) phase 2a "any": the leader of `ballot` lets
    /// acceptors vote client values in slots from `from_slot` on (Lamport, "Fast Paxos", §3.1).
    FastOpen { ballot: Ballot, from_slot: u64 },
    /// Fast Paxos phase 2b of a fast round, to the leader (the learner that tallies it).
    FastAccepted { ballot: Ballot, slot: u64, value: Value },
}

/// What MultiPaxos persists. Replayed in order on restart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// Promised not to accept below `ballot`.
    Promise(Ballot),
    /// Accepted `value` for `slot` at `ballot`.
    Accept { slot: u64, ballot: Ballot, value: Value },
    /// `value` is chosen for `slot` (learned through catch-up).
    Chosen { slot: u64, value: Value },
    /// Every slot up to `upto` is chosen and the local copy is the chosen value.
    CommitUpto(u64),
    /// A state machine snapshot covering every slot up to `index` (the start of a
    /// compacted durable image). `Bytes` encodes exactly like the `Vec<u8>` it replaced.
    Snapshot { index: u64, data: Bytes },
    /// The configuration in effect after the preceding `Snapshot` (written right after it):
    /// membership entries the snapshot covers are no longer in the durable log.
    Members(Vec<MemberInfo>),
    /// This node became leader with this ballot (ran phase 2 with it), written before its
    /// first Accept. A promise to one of our own ballots that we never led with may be given
    /// up for a live leader's lower ballot (`drop_abandoned_ballot`); one we led with never.
    Led(Ballot),
    /// Voted `value` in the fast round of `ballot` for `slot` (`crate::fastpaxos`).
    FastAccept { slot: u64, ballot: Ballot, value: Value },
    /// A record of the layer's own durable state (opaque here: only the layer decodes it,
    /// [`crate::layers::MultiPaxosLayer::recover_record`]), e.g. IDEM's per-request verdicts.
    Layer(Bytes),
}
