//! Payload codecs: what the value of an instance becomes on its way to each acceptor.
//!
//! The MultiPaxos core (`crate::multipaxos`) calls a [`PayloadCodec`] at the points where a
//! value crosses the wire or is rebuilt:
//! * **phase 2, leader** — [`encode`](PayloadCodec::encode): a value to propose becomes what
//!   the leader keeps, what each acceptor is sent and the number of acceptances that commit
//!   it; [`piece_for`](PayloadCodec::piece_for) re-derives one acceptor's piece for a resend;
//!   [`on_accepted`](PayloadCodec::on_accepted) reports each acceptance (response times);
//! * **phase 2, acceptor** — [`merge`](PayloadCodec::merge): a piece joins what the acceptor
//!   holds of the same payload (never loses a shard it had);
//! * **phase 1** — [`prepare_quorum`](PayloadCodec::prepare_quorum) promises elect a leader,
//!   and [`recover`](PayloadCodec::recover) decides a slot from the pieces the promises
//!   report (re-propose, learn as chosen, or free);
//! * **execution** — [`payload`](PayloadCodec::payload): the executable value, once the
//!   pieces held give it; otherwise the core fetches missing parts from its peers
//!   ([`fill_plan`](PayloadCodec::fill_plan), [`share`](PayloadCodec::share)), deferring the
//!   last [`deferral_gap`](PayloadCodec::deferral_gap) bytes of the log.
//!
//! [`FullCopy`] is plain MultiPaxos: every acceptor gets the whole value, a majority
//! commits, and every held value is executable, so the fetch path never runs. The
//! erasure-coded codec of Crossword and RSPaxos is `crate::crossword::RsCodec`.

use crate::multipaxos::{AcceptedSlot, Value};
use std::borrow::Cow;
use std::collections::BTreeMap;
use synod_core::quorum::majority;
use synod_core::{Ballot, NodeId, Time};

/// What to send the acceptors of one proposal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pieces {
    /// The same value to every acceptor (one encoded broadcast).
    Same(Value),
    /// Acceptor-specific pieces (each a separate message).
    Each(Vec<(NodeId, Value)>),
}

/// A value prepared for phase 2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proposal {
    /// What the leader keeps (and persists) as its own acceptance: always executable.
    pub own: Value,
    /// What the other members are sent.
    pub pieces: Pieces,
    /// Acceptances, the leader's own included, that commit the value.
    pub quorum: usize,
}

/// Phase 1's verdict on one slot, from the pieces a quorum of promises reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recovered {
    /// Some acceptor knows this (executable) value is chosen: learn it, no phase 2.
    Chosen(Value),
    /// This value may have been chosen: re-propose it.
    Propose(Value),
    /// No value can have been chosen in this slot: the leader may fill it with a no-op.
    Free,
    /// A value is known chosen but the promises so far do not hold enough of it to rebuild
    /// it: wait for more promises before leading (a codec whose quorums satisfy its
    /// availability condition never gets here).
    Undecided,
}

/// Parts (shard indices) to ask one peer for, to complete a slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ask {
    pub peer: NodeId,
    pub parts: Vec<u16>,
}

/// The extension point of the MultiPaxos core for payload coding. See the module doc.
pub trait PayloadCodec: Send {
    /// The protocol options this codec accepts (besides the layer's).
    fn options(&self) -> &'static [&'static str] {
        &[]
    }

    /// Promises a candidate needs among `n` members.
    fn prepare_quorum(&self, n: usize) -> usize {
        majority(n)
    }

    /// Prepare `value` for phase 2 of `slot` in `ballot` (a fresh batch, or a value that
    /// phase 1 recovered, which keeps its identity). `members` is sorted and contains `me`,
    /// the leader.
    fn encode(
        &mut self,
        now: Time,
        slot: u64,
        ballot: Ballot,
        value: Value,
        members: &[NodeId],
        me: NodeId,
    ) -> Proposal;

    /// The piece of the leader's `own` value for acceptor `to` (an Accept resent).
    fn piece_for(&self, own: &Value, members: &[NodeId], to: NodeId) -> Value {
        let _ = (members, to);
        own.clone()
    }

    /// Whether a leader with a slot in flight that a majority accepted but that missed its
    /// quorum for several election timeouts runs phase 1 again, so that the slot is re-proposed under a
    /// fresh ballot with a configuration the live acceptors can complete (Crossword §4.3:
    /// an instance sent with `q` above the healthy count would otherwise wait for the
    /// failed servers). Plain MultiPaxos keeps re-sending.
    fn reprepare_stuck(&self) -> bool {
        false
    }

    /// An acceptance of `slot` by `from` reached the leader at `now`.
    fn on_accepted(&mut self, _now: Time, _from: NodeId, _slot: u64) {}

    /// What an acceptor holds after it receives `incoming` for a slot where it held `held`:
    /// the union if both are parts of the same payload, else `incoming`.
    fn merge(&self, held: Option<&Value>, incoming: Value) -> Value {
        let _ = held;
        incoming
    }

    /// Decide a slot from the reports of a quorum of promises (each acceptor's piece, its
    /// ballot, and whether the acceptor knows it is chosen). Never called with no report.
    fn recover(&self, reports: &[AcceptedSlot]) -> Recovered {
        // Paxos: a value some acceptor knows is chosen, else the highest-ballot one.
        if let Some(a) = reports.iter().find(|a| a.committed) {
            return Recovered::Chosen(a.value.clone());
        }
        match reports.iter().max_by_key(|a| a.ballot) {
            Some(a) => Recovered::Propose(a.value.clone()),
            None => Recovered::Free,
        }
    }

    /// [`recover`](PayloadCodec::recover) knowing that `promises` acceptors of `n` answered
    /// (those without a report for the slot did not vote in it): Fast Paxos's rule for a
    /// slot whose highest votes are fast ones needs it (`crate::fastpaxos`).
    fn recover_among(&self, reports: &[AcceptedSlot], promises: usize, n: usize) -> Recovered {
        let _ = (promises, n);
        self.recover(reports)
    }

    /// `held` and `incoming` pooled, if both are parts of the same payload (a replica
    /// completing a committed slot from its peers' parts); None otherwise.
    fn pool(&self, held: &Value, incoming: &Value) -> Option<Value> {
        let _ = (held, incoming);
        None
    }

    /// The executable value of `held`, if the parts held give it.
    fn payload<'a>(&self, held: &'a Value) -> Option<Cow<'a, Value>> {
        Some(Cow::Borrowed(held))
    }

    /// Whether `held` gives the executable value (cheap: no decoding).
    fn complete(&self, held: &Value) -> bool {
        let _ = held;
        true
    }

    /// Bytes of payload `held` stands for (for the deferral gap).
    fn payload_bytes(&self, held: &Value) -> usize {
        let _ = held;
        0
    }

    /// Payload bytes at the end of the log a follower leaves to the critical path before
    /// it fetches missing parts (§4.2's deferral gap).
    fn deferral_gap(&self) -> usize {
        0
    }

    /// Whom to ask for which parts of the incomplete `held` (`round` counts the fetch
    /// cycles this slot stayed incomplete; `silent` peers have not answered lately).
    fn fill_plan(
        &self,
        held: &Value,
        members: &[NodeId],
        me: NodeId,
        leader: Option<NodeId>,
        round: u32,
        silent: &dyn Fn(NodeId) -> bool,
    ) -> Vec<Ask> {
        let _ = (held, members, me, leader, round, silent);
        Vec::new()
    }

    /// The parts of `held` among `parts` to send a peer that asked (None: nothing to share).
    fn share(&self, held: &Value, parts: &[u16]) -> Option<Value> {
        let _ = (held, parts);
        None
    }

    /// Add the codec's entries to the status.
    fn status(&self, _extra: &mut BTreeMap<String, String>) {}
}

/// Plain MultiPaxos: every acceptor gets the whole value and a majority commits it.
#[derive(Clone, Copy, Debug, Default)]
pub struct FullCopy;

impl PayloadCodec for FullCopy {
    fn encode(
        &mut self,
        _now: Time,
        _slot: u64,
        _b: Ballot,
        value: Value,
        members: &[NodeId],
        _me: NodeId,
    ) -> Proposal {
        Proposal { own: value.clone(), pieces: Pieces::Same(value), quorum: majority(members.len()) }
    }
}
