//! The protocol interface: events in, actions out.
//!
//! A protocol core never touches sockets, files, clocks, threads or global randomness. The
//! driver (the tokio runtime or the simulator) calls [`Protocol::on_event`] with a [`Ctx`]
//! that carries the replica's current time and a seeded RNG, and executes the [`Action`]s the
//! protocol pushed into it.
//!
//! ## Ordering and durability contract (both drivers honour it)
//! 1. Actions are executed in the order they were pushed.
//! 2. A [`Action::Persist`] is durable (per the node's fsync mode) before any [`Action::Send`],
//!    [`Action::Broadcast`] or [`Action::Reply`] pushed *after it* — in the same or a later
//!    event — leaves the replica. So "persist the promise, then send it" is written exactly
//!    like that. When the records are durable, [`Event::Persisted`] reports the token.
//!    The one exception is [`Action::ReplyNow`], an answer that depends on nothing persisted:
//!    it leaves at once, also after a `Persist` that is not durable yet.
//! 3. On restart, [`Protocol::recover`] receives every record persisted earlier (minus a torn
//!    tail) in order, before any other event.
//! 4. [`Action::Apply`] hands committed commands to the driver's state machine in the order
//!    pushed; the driver replies to the client named in it with the result.
//!    [`Action::Speculate`] applies one provisionally, [`Action::Rollback`] undoes those not
//!    yet confirmed by an `Apply` ([`crate::speculation`]). [`Action::Read`] answers a
//!    read-only command from the state machine without a position (lease reads).

use crate::client_policy::RequestMeta;
use crate::kv::{Command, OpResult};
use crate::time::Time;
use crate::Rng;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Replica identifier. Ids are small integers chosen in the cluster configuration.
pub type NodeId = u32;

/// A timer chosen by the protocol. Setting a timer that is already armed re-arms it.
pub type TimerId = u64;

/// Where a command sits in the replicated order. Single-log protocols (MultiPaxos, Raft) use
/// `space = 0` and the slot as `index`; EPaxos uses the command leader as `space` and its
/// instance number as `index`; Mencius uses space 0 with slots owned round-robin. `sub` is
/// the command's place within the entry's batch. Every replica must apply the same command at
/// the same `Pos` (the simulator checks it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Pos {
    pub space: u32,
    pub index: u64,
    pub sub: u32,
}

impl Pos {
    /// Command `sub` of the batch in slot `index` of a single log.
    pub fn slot(index: u64, sub: u32) -> Pos {
        Pos { space: 0, index, sub }
    }
}

impl std::fmt::Display for Pos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.space == 0 {
            write!(f, "{}:{}", self.index, self.sub)
        } else {
            write!(f, "{}.{}:{}", self.space, self.index, self.sub)
        }
    }
}

/// A client connection as seen by the replica that received the request. `node` is that
/// replica, so a protocol that forwards requests (IDEM §5.2, Nezha's proxies) can route the
/// reply back; `conn` is opaque to protocols.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ClientRef {
    pub node: NodeId,
    pub conn: u64,
}

/// A reply to one client request, identified by its session (client, seq).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    pub client: u64,
    pub seq: u64,
    /// The replica that produced the reply (clients counting replies from several replicas
    /// — Nezha fast/slow replies, IDEM rejects — need it).
    pub from: NodeId,
    pub body: ReplyBody,
}

/// What a replica answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReplyBody {
    /// The command was committed and executed; this is its result. Final.
    Done(OpResult),
    /// This replica does not serve the request; try the leader (if known).
    NotLeader { leader: Option<NodeId> },
    /// The request was refused for now (overload / admission control, IDEM §5.1); the client
    /// may retry later or elsewhere. `reason` is for humans.
    Rejected { reason: String },
    /// A reject sent before the verdict behind it is durable (IDEM's early REJECT, sent with
    /// [`Action::ReplyNow`]): a crash may make the replica forget it, so it says only that
    /// this replica refuses the request now. A `Rejected` from the same replica follows once
    /// the verdict is durable. IDEM's client counts it towards ambivalence (n − f rejects),
    /// never towards a definitive failure; other clients ignore it and wait for the
    /// `Rejected`.
    RejectedEarly { reason: String },
    /// A speculative reply, valid only when a client-side quorum of matching replies is seen
    /// (Nezha fast path: `view` and `digest` must match across a super quorum). `result` is
    /// present only in the leader's reply. `owd` is the replica's one-way-delay sample for
    /// the request (its receive time minus the sender's `RequestMeta::sent_at`, ns; Nezha
    /// §3: "the estimated OWD will be replied to the sender"; 0 when not measured).
    Speculative { view: u64, digest: u64, owd: i64, result: Option<OpResult> },
    /// A follower's slow-reply (Nezha §5.4): it has synced its log with the leader of
    /// `view` up to this request. Counts towards a client-side quorum with the leader's
    /// speculative reply of the same view; never final on its own.
    SlowReply { view: u64 },
    /// The request is invalid (e.g. value too large); the client must not retry.
    Invalid { reason: String },
}

/// Inputs to a protocol.
#[derive(Clone, Debug)]
pub enum Event {
    /// A message from a peer replica. `sent_at` is the sender's clock when the runtime sent it
    /// (Nezha's deadlines use it with the receiver's `ctx.now` to estimate one-way delays).
    Message { from: NodeId, sent_at: Time, msg: Bytes },
    /// A client request arriving at this replica. A client may send the same request to
    /// several replicas (Nezha, IDEM): each one sees this event. `meta` is what the client's
    /// policy stamped on this send (a send time, protocol bytes such as a Nezha deadline);
    /// protocols that do not use it match with `..`.
    Request { client: ClientRef, cmd: Command, meta: RequestMeta },
    /// A timer the protocol set has fired.
    Timer(TimerId),
    /// Records of an earlier [`Action::Persist`] are durable.
    Persisted { token: u64 },
    /// The snapshot requested by [`Action::TakeSnapshot`] is ready: the state machine after
    /// every command applied up to the moment of the request.
    SnapshotTaken { token: u64, data: Bytes },
    /// An administrator asks for a single-server membership change (docs/design.md,
    /// "Membership"). Answered with an [`Action::Reply`] to `client` whose `seq` is `id`:
    /// `Done` once the change is committed and in effect, `NotLeader` (ask the leader),
    /// `Rejected` (another change is still in progress: retry later) or `Invalid` (this
    /// protocol does not support membership changes, or the change makes no sense).
    Reconfigure { client: ClientRef, id: u64, change: MemberChange },
}

/// One single-server membership change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemberChange {
    /// Add replica `id`, reachable by peers at `addr` (opaque to protocols: the runtime's
    /// peer address; the protocol only carries it through the log).
    Add { id: NodeId, addr: String },
    /// Remove replica `id`.
    Remove { id: NodeId },
}

/// A member of a configuration as protocols carry it: its id and its peer address (opaque;
/// empty = the address the driver was configured with).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MemberInfo {
    pub id: NodeId,
    pub addr: String,
}

/// Outputs of a protocol, executed by the driver in order.
#[derive(Clone, Debug)]
pub enum Action {
    /// Send a message to one peer (including follower-to-follower, e.g. Crossword gossip).
    Send {
        to: NodeId,
        msg: Bytes,
    },
    /// Send a message to every other replica.
    Broadcast {
        msg: Bytes,
    },
    /// Make records durable; `token` comes back in [`Event::Persisted`].
    Persist {
        token: u64,
        records: Vec<Bytes>,
    },
    /// Drop all persisted records and persist `records` instead (log compaction: the
    /// protocol writes a compacted image of its durable state, e.g. a snapshot plus the log
    /// suffix). Atomic: after a crash either the old or the new records are recovered.
    RewriteDurable {
        token: u64,
        records: Vec<Bytes>,
    },
    /// Compaction in the background: like [`Action::RewriteDurable`], but the driver writes
    /// the new image without stopping the replica (a snapshot image can be tens of MB) and
    /// reports [`Event::Persisted`] with `token` once it replaced the old records. Meanwhile
    /// later `Persist`s are durable as usual and are kept after the image; messages pushed
    /// after it are NOT held back for it. A crash before the report recovers the old records
    /// (with every later persist); after it, `records` followed by every later persist. So
    /// `records` must be equivalent to what is already durable, plus what may be lost in a
    /// crash without harm (a snapshot of executed commands): nothing sent may depend on it
    /// before the report. If the driver cannot write it (e.g. disk full), it logs why and the
    /// old records stay, with no report. Another `CompactDurable` or a `RewriteDurable`
    /// may supersede one not yet reported, which then gets no report.
    ///
    /// Each record is given as the parts it is the concatenation of: a snapshot record is
    /// a small encoded header followed by the snapshot's bytes (see [`encode_with_payload`]),
    /// so tens of MB are never copied on the replica's thread.
    CompactDurable {
        token: u64,
        records: Vec<Vec<Bytes>>,
    },
    /// Answer a client directly (redirects, rejects, speculative replies).
    Reply {
        client: ClientRef,
        reply: Reply,
    },
    /// Answer a client at once: a reply that depends on nothing persisted is not held back
    /// behind an earlier `Persist` that is not durable yet (the runtime's group commit, the
    /// simulator's fsync window). Otherwise like [`Action::Reply`]; a `Reply` or `ReplyNow`
    /// pushed earlier and still held may leave after it. For answers that stay true if the
    /// replica crashes and forgets everything it has not made durable (Paxos-LBR's rejects,
    /// IDEM's early REJECT).
    ReplyNow {
        client: ClientRef,
        reply: Reply,
    },
    /// Apply a committed command to the state machine at `pos`; if `reply` names a client of
    /// this replica, the driver answers it with the result.
    Apply {
        pos: Pos,
        cmd: Command,
        reply: Option<ClientRef>,
    },
    /// Answer a read-only command from the state machine as it is now, without a log
    /// position (a lease read, `crate::lease`): the driver runs it on the state with final
    /// applies only (never a provisional one) and answers `client` with `Done(result)`. The
    /// protocol is responsible for that state holding every write completed before the
    /// request arrived (a leader holding a lease, having executed what its election found).
    Read {
        client: ClientRef,
        cmd: Command,
    },
    /// Apply a command provisionally, before it is committed (Nezha's leader, §5.3): if
    /// `reply` names a client of this replica, the driver answers it with
    /// `Speculative { view, digest, result }`. A later [`Action::Apply`] of the same command
    /// at the same position confirms it (it does not run twice); an `Apply` of anything else,
    /// or [`Action::Rollback`], first undoes every provisional apply not yet confirmed.
    /// Snapshots hold confirmed applies only (see [`crate::speculation`]).
    Speculate {
        pos: Pos,
        cmd: Command,
        reply: Option<SpeculativeReply>,
    },
    /// Undo every provisional apply not yet confirmed (a deposed Nezha leader, §6).
    Rollback,
    /// Arm (or re-arm) a timer.
    SetTimer {
        timer: TimerId,
        after: Duration,
    },
    CancelTimer {
        timer: TimerId,
    },
    /// Ask the driver for a snapshot of the state machine (answered by
    /// [`Event::SnapshotTaken`]).
    TakeSnapshot {
        token: u64,
    },
    /// Replace the state machine with a snapshot (received from a peer or recovered).
    InstallSnapshot {
        data: Bytes,
    },
    /// The configuration in effect on this replica changed (a membership entry was
    /// executed, or recovered from durable state or a snapshot): `members` is the complete
    /// new configuration, this replica included if it is a member. The driver connects to
    /// new members and stops talking to removed ones; `Broadcast` goes to the current
    /// members from then on. Protocols without membership changes never push it.
    MembershipChanged {
        members: Vec<MemberInfo>,
    },
    /// A fact about the protocol's own state for the simulator's protocol invariants
    /// ([`Ghost`]); a real driver ignores it.
    Ghost(Ghost),
}

/// Ghost state: facts a protocol reports about itself so that the simulator can check the
/// invariants its paper argues with, which no client history shows. A protocol that reports
/// a kind of fact promises the invariant named with it; the simulator keeps the facts across
/// crashes and fails the run when the invariant breaks. Real drivers ignore them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ghost {
    /// This replica accepted client request `(client, seq)` (admission control: IDEM §4.3).
    /// Promise: a client command is applied only after a majority of the replicas accepted
    /// it (IDEM's leader waits for f + 1 REQUIREs, so that a correct replica holds it).
    Accepted { client: u64, seq: u64 },
    /// This replica garbage-collected every log instance up to `upto` while the newest
    /// instance it had received was `newest` (IDEM §4.4, Theorem 6.1). Promise — the rule of
    /// the theorem, `upto + r_max ≤ newest` with `r_max = n × RT`: the oldest instance s of
    /// the window is discarded only once an instance with sequence number s + r_max arrived.
    Discarded { upto: u64, newest: u64, r_max: u64 },
}

/// Where and how a driver answers a provisional apply ([`Action::Speculate`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpeculativeReply {
    pub client: ClientRef,
    pub view: u64,
    pub digest: u64,
    /// The replica's one-way-delay sample, carried into `ReplyBody::Speculative::owd`.
    pub owd: i64,
}

/// What a driver hands the protocol with each event.
pub struct Ctx<'a> {
    /// This replica.
    pub id: NodeId,
    /// The replica's clock now (virtual in the simulator, possibly skewed).
    pub now: Time,
    /// Seeded randomness (election timeouts, backoff). The only randomness a protocol uses.
    pub rng: &'a mut Rng,
    /// Runtime self-monitoring inputs (HoliPaxos slowdown detector and similar).
    pub load: LoadInfo,
    /// The driver's approximate bound on how far `now` is from true time (the error bound
    /// a clock-synchronization service reports; Nezha's σ, §3). The simulator derives it
    /// from its configured skew/drift/jump bounds, the runtime takes it from its config
    /// (`clock_error_us`). Approximate: a protocol may use it for performance (how long to
    /// wait), never for correctness — real clocks break their bounds. Zero: no error known.
    pub clock_error: Duration,
    actions: &'a mut Vec<Action>,
}

/// Observations the driver makes about the replica itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadInfo {
    /// Client requests received by the driver but not yet handed to the protocol.
    pub queued_requests: u64,
}

impl<'a> Ctx<'a> {
    pub fn new(id: NodeId, now: Time, rng: &'a mut Rng, actions: &'a mut Vec<Action>) -> Self {
        Ctx { id, now, rng, load: LoadInfo::default(), clock_error: Duration::ZERO, actions }
    }

    pub fn push(&mut self, a: Action) {
        self.actions.push(a);
    }

    /// How many actions were pushed so far: a mark for [`Ctx::pushed_since`].
    pub fn pushed(&self) -> usize {
        self.actions.len()
    }

    /// The actions pushed since `mark` (a protocol wrapping another one watches what the
    /// inner protocol did with an event).
    pub fn pushed_since(&self, mark: usize) -> &[Action] {
        self.actions.get(mark..).unwrap_or(&[])
    }

    /// Encode `msg` with postcard and send it to `to`.
    pub fn send<M: Serialize>(&mut self, to: NodeId, msg: &M) {
        let msg = encode(msg);
        self.actions.push(Action::Send { to, msg });
    }

    /// Encode `msg` once and send it to every other replica.
    pub fn broadcast<M: Serialize>(&mut self, msg: &M) {
        let msg = encode(msg);
        self.actions.push(Action::Broadcast { msg });
    }

    pub fn persist(&mut self, token: u64, records: Vec<Bytes>) {
        self.actions.push(Action::Persist { token, records });
    }

    pub fn reply(&mut self, client: ClientRef, reply: Reply) {
        self.actions.push(Action::Reply { client, reply });
    }

    /// Answer `client` about `cmd` (its session ids are copied into the reply).
    pub fn answer(&mut self, client: ClientRef, cmd: &Command, body: ReplyBody) {
        let reply = Reply { client: cmd.client, seq: cmd.seq, from: self.id, body };
        self.actions.push(Action::Reply { client, reply });
    }

    /// Answer `client` about `cmd` at once, not held back by a `Persist` pushed before
    /// ([`Action::ReplyNow`]): only for an answer that depends on nothing persisted.
    pub fn answer_now(&mut self, client: ClientRef, cmd: &Command, body: ReplyBody) {
        let reply = Reply { client: cmd.client, seq: cmd.seq, from: self.id, body };
        self.actions.push(Action::ReplyNow { client, reply });
    }

    pub fn apply(&mut self, pos: Pos, cmd: Command, reply: Option<ClientRef>) {
        self.actions.push(Action::Apply { pos, cmd, reply });
    }

    /// Report a ghost fact for the simulator's protocol invariants ([`Ghost`]).
    pub fn ghost(&mut self, fact: Ghost) {
        self.push(Action::Ghost(fact));
    }

    pub fn set_timer(&mut self, timer: TimerId, after: Duration) {
        self.actions.push(Action::SetTimer { timer, after });
    }

    pub fn cancel_timer(&mut self, timer: TimerId) {
        self.actions.push(Action::CancelTimer { timer });
    }

    /// A duration drawn uniformly from `[min, max]` with the seeded RNG.
    pub fn random_between(&mut self, min: Duration, max: Duration) -> Duration {
        use rand::Rng as _;
        if max <= min {
            return min;
        }
        Duration::from_nanos(self.rng.gen_range(min.as_nanos() as u64..=max.as_nanos() as u64))
    }
}

/// Encode a protocol message or record (postcard).
pub fn encode<M: Serialize>(msg: &M) -> Bytes {
    Bytes::from(to_exact_vec(msg))
}

/// The postcard encoding of `msg` in a `Vec` allocated once at its exact size: a first pass
/// counts the bytes, the second writes them. `postcard::to_allocvec` grows its `Vec` by
/// doubling, which for a follower's WAL record of a batch of commands meant several
/// reallocations and copies, and page faults on each fresh larger buffer
/// (docs/performance.md, third pass; `cargo bench -p synod-core --bench encode`).
pub fn to_exact_vec<M: Serialize + ?Sized>(msg: &M) -> Vec<u8> {
    let size = postcard::experimental::serialized_size(msg).expect("protocol messages serialize");
    postcard::serialize_with_flavor(msg, ExactVec(Vec::with_capacity(size))).expect("protocol messages serialize")
}

/// A postcard output flavor writing into a `Vec` that was sized beforehand.
struct ExactVec(Vec<u8>);

impl postcard::ser_flavors::Flavor for ExactVec {
    type Output = Vec<u8>;

    #[inline(always)]
    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.0.push(data);
        Ok(())
    }

    #[inline(always)]
    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(data);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<Vec<u8>> {
        Ok(self.0)
    }
}

/// Encode `msg`, whose last serialized field is a byte string, as two parts without copying
/// that byte string: the postcard encoding of `msg` with the field empty minus its final
/// length byte, plus the varint length, then `payload` itself. The concatenation equals
/// `encode` of `msg` with the field set to `payload` (postcard writes a byte string as a
/// varint length and the bytes). `with_empty` must be `msg` with that field empty.
pub fn encode_with_payload<M: Serialize>(with_empty: &M, payload: Bytes) -> Vec<Bytes> {
    let mut head = to_exact_vec(with_empty);
    assert_eq!(head.pop(), Some(0), "the last field of the record must be an empty byte string");
    let mut len = payload.len() as u64;
    loop {
        let byte = (len & 0x7f) as u8;
        len >>= 7;
        if len == 0 {
            head.push(byte);
            break;
        }
        head.push(byte | 0x80);
    }
    vec![Bytes::from(head), payload]
}

/// The action that replaces a protocol's durable records by a compacted image given as parts
/// (see [`Action::CompactDurable`]): in the background for an image of what is durable already
/// plus a snapshot a crash may lose, synchronously (`RewriteDurable`, each record joined into
/// one buffer) when something sent afterwards depends on it, e.g. an installed snapshot.
pub fn compaction(token: u64, records: Vec<Vec<Bytes>>, background: bool) -> Action {
    match background {
        true => Action::CompactDurable { token, records },
        false => {
            let records = records.into_iter().map(|parts| Bytes::from(parts.concat())).collect();
            Action::RewriteDurable { token, records }
        }
    }
}

/// Decode a protocol message or record; a malformed input is an error, never a panic.
pub fn decode<'de, M: Deserialize<'de>>(bytes: &'de [u8]) -> Result<M, postcard::Error> {
    postcard::from_bytes(bytes)
}

/// The role a replica plays right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Leader,
    Follower,
    Candidate,
    /// Leaderless protocols: every replica is a command leader for its own requests.
    Replica,
    /// Recovering state from peers.
    Recovering,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Candidate => "candidate",
            Role::Replica => "replica",
            Role::Recovering => "recovering",
        };
        f.write_str(s)
    }
}

/// What `/status` and `synod ctl status` show about a replica.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub id: NodeId,
    pub protocol: String,
    pub role: Role,
    /// Ballot or term, printed the protocol's way.
    pub ballot: String,
    pub leader: Option<NodeId>,
    /// Highest position known committed (single-log protocols: slot; others: count).
    pub commit_index: u64,
    /// Commands executed (applied to the state machine).
    pub execute_index: u64,
    /// Protocol-specific fields.
    pub extra: BTreeMap<String, String>,
}

/// A replication protocol core. Object safe, so the registry can hand out `Box<dyn Protocol>`.
pub trait Protocol: Send {
    /// Called once before any event: `records` are what this replica persisted before a
    /// restart (empty on first start). The protocol rebuilds its durable state and arms its
    /// initial timers.
    fn recover(&mut self, ctx: &mut Ctx<'_>, records: Vec<Bytes>);

    /// Handle one event.
    fn on_event(&mut self, ctx: &mut Ctx<'_>, event: Event);

    /// The driver handed over every event it had ready (the end of a *turn*: the runtime's
    /// node loop calls it once after each batch of events it drained, the simulator on a
    /// zero-delay event after whatever else was due at the same instant). A protocol may
    /// defer work here to do it once per turn instead of once per event — e.g. a leader
    /// proposes all the client requests of a turn in one log entry rather than one entry
    /// each. Drivers call it after every turn in which an event was handled (and after
    /// `recover`), so deferred work is never stranded. Default: nothing.
    fn flush(&mut self, ctx: &mut Ctx<'_>) {
        let _ = ctx;
    }

    fn status(&self) -> Status;

    /// A one-line human-readable rendering of a peer message (for `synod check --trace`).
    fn describe_message(&self, msg: &[u8]) -> String {
        format!("<{} bytes>", msg.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    enum Rec {
        Other(u64),
        Snap { index: u64, term: u64, data: Bytes },
    }

    #[test]
    fn encode_with_payload_equals_the_plain_encoding() {
        for len in [0usize, 1, 127, 128, 300, 16_383, 16_384, 70_000, 3_000_000] {
            let data = Bytes::from((0..len).map(|i| i as u8).collect::<Vec<u8>>());
            let full = Rec::Snap { index: 1 << 40, term: 7, data: data.clone() };
            let parts = encode_with_payload(&Rec::Snap { index: 1 << 40, term: 7, data: Bytes::new() }, data.clone());
            assert_eq!(parts.len(), 2);
            assert!(parts[1].as_ptr() == data.as_ptr(), "the payload is not copied");
            let joined = parts.concat();
            assert_eq!(joined, encode(&full).to_vec(), "len {len}");
            assert_eq!(decode::<Rec>(&joined).unwrap(), full);
        }
    }
}
