//! Egalitarian Paxos (Moraru, Andersen, Kaminsky, "There Is More Consensus in Egalitarian
//! Parliaments", SOSP 2013).
//!
//! No leader: the replica a client talks to becomes the *command leader* of that command and
//! orders it in its own instance sub-space `L.i` (§4.1). Commands are ordered by dependencies,
//! not by a log: each carries `deps` (the instances it must follow) and `seq` (to break cycles),
//! agreed on as in Fig. 2:
//!
//! - **Phase 1 — PreAccept** ([`commit`]): the command leader computes `deps`/`seq` from its
//!   log (lines 1–5) and sends them to a fast quorum; each replica adds what it knows (lines
//!   6–9). Identical answers from the whole fast quorum commit at once (the *fast path*, line
//!   11); otherwise the union is chosen with a classic Paxos-Accept round (the *slow path*,
//!   lines 13–20). Commit is broadcast (lines 21–24).
//! - **Execution** ([`execute`], §4.3.2): a committed command runs once every instance in its
//!   dependency graph is committed; strongly connected components (Tarjan) run in inverse
//!   topological order, by `seq` inside a component.
//! - **Explicit Prepare** ([`recovery`], Fig. 3, §4.6): a replica that waits too long for an
//!   instance takes it over with a higher ballot, learns from a majority what may have been
//!   chosen and finishes it (the command, or a no-op if nobody saw it).
//!
//! Quorums (§4.4, NOTES.md): the slow path needs F+1 of N = 2F+1. The fast quorum is the
//! optimized F + ⌊(F+1)/2⌋ (`fast_quorum=optimized`, the default, as in the paper's
//! evaluation) or the basic 2F (`fast_quorum=basic`). Both are 2 for N = 3. For N ≥ 5 the
//! optimized quorum (3 of 5) comes with the TryPreAccept recovery of §4.4 ([`recovery`]) and
//! §4.4's condition on the fast path (the leader and every reply must have each related
//! dependency committed), which keeps the recovery's seq test sound.
//!
//! Choices where the paper leaves room, and deviations:
//! - **thrifty** (§6.2, as in the paper's evaluation): PreAccepts go only to the fast quorum,
//!   chosen as the peers with the lowest measured round-trip time (§7.3: a slow replica is
//!   left out). If they do not all answer within `retry_ms`, the leader sends to every peer
//!   and gives up the fast path for that instance. That also keeps Fig. 3's line 32 sound:
//!   only a fast-quorum member can hold a default-ballot pre-accept of an instance that was
//!   committed on the fast path.
//! - **dependencies** are one entry per replica (§4.5): `deps[k]` = the highest interfering
//!   instance of replica k. Our interference is not transitive (a SCAN interferes with two
//!   PUTs that do not), so execution treats every instance of k up to `deps[k]` as a possible
//!   dependency and checks interference itself, waiting for any of them that is not yet
//!   committed (§4.5, end).
//! - **sessions**: all commands of one client session interfere (they touch the session's
//!   entry in the state machine), so retries and the exactly-once table are ordered the same
//!   everywhere. The session table can be bounded by *session barriers*: with
//!   `barrier_every=N` a command leader proposes, after every N commands of its own, an
//!   internal command that interferes with every command; the state machine evicts sessions
//!   only there, so every replica evicts the same ones although non-interfering commands run
//!   in different orders (`synod_core::session`, `Order::Partial`). On by default
//!   (`barrier_every=256`; 0 turns them off and leaves the table unbounded). Every command
//!   depends on the last barrier, which depends on everything before it, so a replica whose
//!   execution waits for one uncommitted instance has its whole backlog in one dependency
//!   graph: [`execute`] is incremental (it never searches a part of the graph again that is
//!   known to wait, and edges stop at barriers), or such a replica falls further behind with
//!   every commit (it stalled under the Fig. 8 load before, results/2026-11-25-epaxos-eval).
//! - **batching** (§7.6): a command leader puts the requests that queued into one instance,
//!   at most `max_batch` of them. By default it proposes at once when fewer than
//!   `pipeline_window` of its instances are unexecuted (batches grow with load); with
//!   `batch_ms=5` it proposes what queued every 5 ms, as the paper's evaluation does.
//! - **replies** go to the client after execution at the command leader (the paper's
//!   execution latency); a command whose instance is taken over and finished as a no-op is
//!   proposed again in a new instance. With `reply=commit`, plain puts (whose result, `OK`,
//!   does not depend on the state) are answered when their instance commits at the command
//!   leader — the paper's commit latency (§7: "the commit latency ... when the command
//!   leader learns the command is committed"). That is linearizable: a command proposed
//!   after the answer gets its attributes from a quorum that intersects the ≥ F+1 replicas
//!   that recorded the put, so any interfering later command depends on it and executes
//!   after it everywhere. Reads and conditional writes are still answered after execution.
//! - **catch-up**: replicas announce the highest instance they know per sub-space in
//!   heartbeats; a replica missing a commit first asks for it (Fetch), then runs Explicit
//!   Prepare.
//! - **durability**: every vote (pre-accept, accept, promise) is persisted before it is sent
//!   (Prop. 1 and 2 need the `cmds` log on stable storage); after a restart a replica re-runs
//!   every committed command from an empty state machine and finishes its own unfinished
//!   instances through Explicit Prepare.
//!
//! - **livelock** (§4.9: "we prioritize completing old commands over proposing new
//!   commands"): a command leader proposes nothing new while `pipeline_window` of its own
//!   instances are unexecuted, so no dependency chain grows without bound and an old command
//!   executes while new interfering ones keep arriving (tested).
//!
//! - **even N** (4 replicas): the paper's N = 2F + 1 formulas would give a fast quorum of 2
//!   of 4 (disjoint fast quorums); an even N gets N − 1 ([`fast_quorum_size`]).
//!
//! Not yet: membership changes (§4.7's epochs; docs/design.md, "EPaxos", lists what they
//! need), non-thrifty fast paths with the "unchanged attributes" rule.

pub mod msg;
#[cfg(test)]
mod tests;

mod commit;
mod conflicts;
mod execute;
mod recovery;
mod snapshot;

use crate::registry::Setup;
use bytes::Bytes;
use conflicts::{Conflicts, Forgotten};
use msg::{Attrs, InstId, Msg, Phase, Record, Reported};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use synod_core::batch::{Batcher, Pending};
use synod_core::protocol::{decode, encode};
use synod_core::{
    Ballot, Command, Ctx, Event, NodeId, Protocol, ProtocolParams, ReplyBody, Role, Status, Time, TimerId,
};

const TIMER_TICK: TimerId = 1;
/// `batch_ms`: propose what queued (§7.6's batching timer).
const TIMER_BATCH: TimerId = 2;
/// Most bytes of commands in one instance (a batch, §7.6).
const MAX_BATCH_BYTES: usize = 1 << 20;
/// Instances further than this past a sub-space's committed prefix are ignored: a replica
/// that far behind catches up first, and a malformed instance number cannot make it track a
/// huge range.
const MAX_AHEAD: u64 = 1 << 16;
/// Most instances asked for (Fetch) or taken over (Explicit Prepare) per tick.
const MAX_PER_TICK: usize = 256;
/// Default `barrier_every` (module docs: "sessions"; 0 = no session barriers). With N
/// replicas and `barrier_every=B`, at most about N·B sessions are created between two
/// barriers above the state machine's limit; a barrier is one instance per B commands.
const DEFAULT_BARRIER_EVERY: u64 = 256;

/// Registry constructor.
pub fn build(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
    Ok(Box::new(Epaxos::new(setup, Variant::default())?))
}

/// Deliberate deviations, used only by the mutation tests.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Variant {
    /// A fast quorum one replica too small (unsafe: two fast quorums need not intersect in
    /// enough replicas for recovery, and for N = 3 the leader commits alone).
    pub small_fast_quorum: bool,
    /// The optimized fast quorum with the basic recovery: no TryPreAccept, so a tuple
    /// committed on the fast path and seen by fewer than F recovering replicas is ordered
    /// again (unsafe for N >= 5).
    pub skip_try_pre_accept: bool,
}

/// The fast-quorum rule of §4.4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FastQuorum {
    /// F + ⌊(F+1)/2⌋ replicas including the command leader.
    Optimized,
    /// 2F replicas (the basic protocol of §4.3).
    Basic,
}

/// The fast quorum for `n` replicas (the command leader included), and whether it is below
/// the basic quorum so that recovery needs TryPreAccept and the fast path its condition on
/// committed dependencies (§4.4).
///
/// The paper assumes N = 2F + 1. For an even N (which only a membership change or a
/// 4-replica cluster produces) F + ⌊(F+1)/2⌋ and 2F with F = ⌊(N−1)/2⌋ are unsafe: for N = 4
/// both are 2, and two interfering commands can commit on the fast path through disjoint
/// pairs {L₁, a} and {L₂, b}, neither depending on the other (`synod check --protocol epaxos
/// --replicas 4 --seed 23` found it). An even N gets the basic rule's fast quorum in the
/// form its recovery needs: Fig. 3's line 32 must see ⌊N/2⌋ identical pre-accepts among the
/// ⌊N/2⌋ + 1 non-leaders of any majority without the command leader, so the fast quorum
/// has N − 1 replicas, and at least a majority (N = 2: both). No TryPreAccept then.
pub(crate) fn fast_quorum_size(n: usize, rule: FastQuorum) -> (usize, bool) {
    let f = n.saturating_sub(1) / 2;
    if n.is_multiple_of(2) {
        return ((n - 1).max(n / 2 + 1), false);
    }
    let optimized = f + f.div_ceil(2); // F + floor((F+1)/2)
    let size = match rule {
        FastQuorum::Optimized => optimized,
        FastQuorum::Basic => 2 * f,
    };
    // Below 2F the recovery needs TryPreAccept, and the fast path its condition on deps.
    (size.max(1), rule == FastQuorum::Optimized && optimized < 2 * f)
}

/// An instance as this replica knows it (`cmds_R[L][i]`).
#[derive(Clone, Debug, Default)]
struct Instance {
    /// Highest ballot promised for the instance.
    ballot: Ballot,
    /// Ballot of the current vote (pre-accept / accept), reported by Prepare.
    vballot: Ballot,
    phase: Phase,
    /// The command batch; empty = no-op.
    cmds: Vec<Command>,
    attrs: Attrs,
    executed: bool,
}

/// What a command leader (or a replica recovering an instance) is doing for an instance.
struct Lead {
    ballot: Ballot,
    step: Step,
    /// When the current step started (retransmission).
    since: Time,
}

enum Step {
    /// Waiting for PreAcceptOKs (lines 10–15).
    PreAccept {
        replies: BTreeMap<NodeId, Attrs>,
        /// The fast path is still possible (thrifty and no fallback yet, not a recovery).
        fast: bool,
        /// Sent to every peer, not only the fast quorum.
        to_all: bool,
        merged: Attrs,
        /// With TryPreAccept recovery: the leader and every reply so far had every related
        /// dependency committed (§4.4's condition for the fast path).
        deps_ok: bool,
    },
    /// Optimized recovery (§4.4): asking replicas to pre-accept a tuple that may have been
    /// committed on the fast path.
    TryPreAccept(recovery::Trying),
    /// Waiting for AcceptOKs (line 20).
    Accept { acks: BTreeSet<NodeId> },
    /// Explicit Prepare: waiting for PrepareOKs (lines 26–37).
    Prepare { replies: BTreeMap<NodeId, Option<Reported>> },
}

/// Counters shown in `status()` (and summed by `synod check`).
#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    fast: u64,
    slow: u64,
    recoveries: u64,
    /// Recoveries that ran TryPreAccept (§4.4), and those of them that committed the tuple.
    try_pre_accepts: u64,
    tpa_committed: u64,
    noops: u64,
    sccs_multi: u64,
    scc_max: u64,
    executed: u64,
    reproposed: u64,
    /// Puts answered at commit (`reply=commit`).
    commit_replies: u64,
    /// Session barriers proposed here.
    barriers: u64,
}

pub struct Epaxos {
    id: NodeId,
    /// Members in sorted order; `deps` entries follow this order.
    members: Vec<NodeId>,
    me: usize,
    params: ProtocolParams,
    fast_quorum: usize,
    /// The optimized quorum is smaller than 2F (N >= 5): recovery runs TryPreAccept and the
    /// fast path requires committed dependencies (§4.4, [`recovery`]).
    try_pre_accept: bool,
    variant: Variant,

    retry: Duration,
    /// `reply=commit`: answer writes whose result does not depend on the state (plain puts)
    /// as soon as their instance commits at the command leader (§7's commit latency), not
    /// after execution.
    reply_at_commit: bool,
    /// `barrier_every`: this replica proposes a session barrier after this many commands of
    /// its own (0 = never; see [`commit`], "session barriers").
    barrier_every: u64,
    /// Commands proposed here since the last session barrier.
    since_barrier: u64,
    /// `batch_ms` (§7.6: "batching every 5 ms"): requests wait for this timer and go out
    /// together; None (the default) proposes at once when fewer than `pipeline_window` own
    /// instances are unexecuted, batching what queued meanwhile (adaptive batching).
    batch_every: Option<Duration>,
    batch_timer_set: bool,
    /// Instances per sub-space (index into `members`).
    insts: Vec<BTreeMap<u64, Instance>>,
    /// Highest instance index known to exist per sub-space.
    known: Vec<u64>,
    /// Every instance up to this is committed, per sub-space.
    committed_upto: Vec<u64>,
    /// Every instance up to this is executed, per sub-space.
    executed_upto: Vec<u64>,
    /// Committed, not yet executed.
    to_execute: BTreeSet<InstId>,
    /// Where the next execution searches start: instances committed or unblocked since
    /// (see [`execute`]).
    candidates: Vec<InstId>,
    /// Committed instances whose execution waits for this one (uncommitted when set; see
    /// [`execute`]: a chain).
    stuck_on: std::collections::HashMap<InstId, InstId>,
    /// The reverse of `stuck_on` (entries may be stale: checked on use).
    waiters: std::collections::HashMap<InstId, Vec<InstId>>,
    /// Per sub-space: committed, unexecuted instances holding a session barrier that depend
    /// on every earlier instance of their sub-space (where execution edges stop).
    barrier_insts: Vec<BTreeSet<u64>>,
    conflicts: Conflicts,
    /// Forgotten instances, as far as TryPreAccept needs them.
    forgotten: Forgotten,
    /// Instances up to this were forgotten before the snapshot this replica restarted from:
    /// their keys are unknown here (TryPreAccept answers Retry when they matter).
    restored_unknown: Vec<u64>,
    /// The highest seq among those (an upper bound: the snapshot's).
    restored_seq: u64,
    leads: BTreeMap<InstId, Lead>,
    /// Own proposals not yet executed: the requests to answer, or to propose again if the
    /// instance ends up with other commands (a no-op after a takeover).
    proposed: BTreeMap<u64, Vec<Pending>>,
    queue: Batcher,
    /// Instances known (or known to exist) and not committed here, since when.
    unsettled: BTreeMap<InstId, Time>,
    /// When each unsettled instance may be taken over (randomized, so replicas do not duel).
    takeover_at: BTreeMap<InstId, Time>,
    rtt: BTreeMap<NodeId, Duration>,
    /// When each peer was last heard from (a silent peer is left out of fast quorums).
    heard: BTreeMap<NodeId, Time>,
    counters: Counters,
    /// Executor work: instances and edges the execution search looked at (`status()`;
    /// tests bound it per executed instance). A cell: the search's edge lists are computed
    /// through `&self`.
    exec_steps: std::cell::Cell<u64>,
    /// Instances up to this are forgotten (executed, committed everywhere), per sub-space.
    pruned_upto: Vec<u64>,
    /// Each peer's committed prefix per sub-space, from its heartbeats.
    peer_committed: BTreeMap<NodeId, Vec<u64>>,
    /// Highest seq among executed instances (a snapshot records it).
    max_exec_seq: u64,
    snap_token: u64,
    /// `counters.executed` when the last snapshot was requested.
    snap_executed_at: u64,
    snap_pending: Option<snapshot::PendingSnapshot>,
    /// A compaction being written: its token and what its snapshot covers.
    snap_writing: Option<(u64, Vec<u64>)>,
    /// What the latest durable snapshot covers, per sub-space.
    snap_durable: Vec<u64>,
    snapshots: u64,
    /// While recovering from a compacted log: what its snapshot covers (per sub-space prefix,
    /// and instances above it).
    snap_covered: Option<(Vec<u64>, BTreeSet<InstId>)>,
}

impl Epaxos {
    pub(crate) fn new(setup: &Setup, variant: Variant) -> Result<Epaxos, String> {
        setup
            .params
            .check_options("epaxos", &["fast_quorum", "thrifty", "retry_ms", "reply", "barrier_every", "batch_ms"])?;
        let mut members = setup.members.clone();
        members.sort_unstable();
        members.dedup();
        let Some(me) = members.iter().position(|&m| m == setup.id) else {
            return Err(format!("replica {} is not among the members {members:?}", setup.id));
        };
        let n = members.len();
        let rule = match setup.params.options.get("fast_quorum").map(|s| s.as_str()) {
            None | Some("optimized") => FastQuorum::Optimized,
            Some("basic") => FastQuorum::Basic,
            Some(v) => return Err(format!("option fast_quorum: expected optimized or basic, got {v:?}")),
        };
        let (mut fast_quorum, try_pre_accept) = fast_quorum_size(n, rule);
        if variant.small_fast_quorum {
            fast_quorum -= 1;
        }
        let thrifty = setup.params.flag("thrifty", true)?; // only thrifty is implemented
        if !thrifty {
            return Err("thrifty=off needs the \"unchanged attributes\" fast-path rule of §4.4, which is not \
                        implemented; EPaxos runs thrifty (§6.2)"
                .into());
        }
        let reply_at_commit = match setup.params.options.get("reply").map(|s| s.as_str()) {
            None | Some("execute") => false,
            Some("commit") => true,
            Some(v) => return Err(format!("option reply: expected execute or commit, got {v:?}")),
        };
        let barrier_every = match setup.params.options.get("barrier_every") {
            None => DEFAULT_BARRIER_EVERY,
            Some(v) => v.parse().map_err(|_| format!("option barrier_every: not a number: {v:?}"))?,
        };
        let batch_every = match setup.params.options.get("batch_ms") {
            None => None,
            Some(v) => match v.parse::<u64>() {
                Ok(0) => None,
                Ok(ms) => Some(Duration::from_millis(ms)),
                Err(_) => return Err(format!("option batch_ms: not a number: {v:?}")),
            },
        };
        let retry = match setup.params.options.get("retry_ms") {
            None => Duration::from_millis(setup.params.election_timeout_min_ms.max(2) / 2),
            Some(v) => Duration::from_millis(v.parse().map_err(|_| format!("option retry_ms: not a number: {v:?}"))?),
        };
        Ok(Epaxos {
            id: setup.id,
            me,
            params: setup.params.clone(),
            fast_quorum,
            try_pre_accept,
            variant,
            retry,
            reply_at_commit,
            barrier_every,
            since_barrier: 0,
            batch_every,
            batch_timer_set: false,
            insts: vec![BTreeMap::new(); n],
            known: vec![0; n],
            committed_upto: vec![0; n],
            executed_upto: vec![0; n],
            to_execute: BTreeSet::new(),
            candidates: Vec::new(),
            stuck_on: Default::default(),
            waiters: Default::default(),
            barrier_insts: vec![BTreeSet::new(); n],
            conflicts: Conflicts::new(n),
            forgotten: Forgotten::new(n),
            restored_unknown: vec![0; n],
            restored_seq: 0,
            leads: BTreeMap::new(),
            proposed: BTreeMap::new(),
            queue: Batcher::new(),
            unsettled: BTreeMap::new(),
            takeover_at: BTreeMap::new(),
            rtt: BTreeMap::new(),
            heard: BTreeMap::new(),
            counters: Counters::default(),
            exec_steps: Default::default(),
            pruned_upto: vec![0; n],
            peer_committed: BTreeMap::new(),
            max_exec_seq: 0,
            snap_token: 0,
            snap_executed_at: 0,
            snap_pending: None,
            snap_writing: None,
            snap_durable: vec![0; n],
            snapshots: 0,
            snap_covered: None,
            members,
        })
    }

    // --- helpers -----------------------------------------------------------------------------

    fn n(&self) -> usize {
        self.members.len()
    }

    /// ⌊N/2⌋: the replies (besides the command leader's own vote) a slow path needs.
    fn slow_replies(&self) -> usize {
        self.n() / 2
    }

    fn pos_of(&self, node: NodeId) -> Option<usize> {
        self.members.iter().position(|&m| m == node)
    }

    fn default_ballot(space: NodeId) -> Ballot {
        Ballot::new(0, space)
    }

    fn inst(&self, id: InstId) -> Option<&Instance> {
        let p = self.pos_of(id.space)?;
        self.insts[p].get(&id.index)
    }

    fn inst_mut(&mut self, id: InstId) -> &mut Instance {
        let p = self.pos_of(id.space).expect("a member's instance");
        self.insts[p].entry(id.index).or_default()
    }

    /// Whether `id` names an instance this replica handles (a member's, within the window).
    fn valid(&self, id: InstId) -> bool {
        match self.pos_of(id.space) {
            Some(p) => id.index > self.pruned_upto[p] && id.index <= self.committed_upto[p].saturating_add(MAX_AHEAD),
            None => false,
        }
    }

    fn is_committed(&self, id: InstId) -> bool {
        self.inst(id).is_some_and(|i| i.phase == Phase::Committed)
    }

    /// Note that instance `id` exists (it was mentioned by a peer).
    fn saw(&mut self, id: InstId, now: Time) {
        let Some(p) = self.pos_of(id.space) else { return };
        if id.index > self.known[p] && id.index <= self.committed_upto[p].saturating_add(MAX_AHEAD) {
            self.known[p] = id.index;
        }
        if !self.is_committed(id) {
            self.unsettled.entry(id).or_insert(now);
        }
    }

    fn persist(&self, ctx: &mut Ctx<'_>, id: InstId) {
        let Some(i) = self.inst(id) else { return };
        ctx.persist(0, vec![encode(&Self::record_of(id, i))]);
    }

    /// The durable record of instance `id` as it stands.
    fn record_of(id: InstId, i: &Instance) -> Record {
        Record::Inst {
            inst: id,
            ballot: i.ballot,
            vballot: i.vballot,
            phase: i.phase,
            cmds: i.cmds.clone(),
            attrs: i.attrs.clone(),
        }
    }

    /// The peers a thrifty PreAccept goes to: the fast quorum minus this replica, the peers
    /// with the lowest measured round-trip time first (§7.3), ring order among equals; a
    /// peer not heard from for three heartbeats comes last (it may have failed).
    fn fast_peers(&self, now: Time) -> Vec<NodeId> {
        let n = self.n();
        let silent_after = self.params.heartbeat() * 3;
        let mut peers: Vec<(bool, Duration, usize, NodeId)> = (1..n)
            .map(|k| {
                let node = self.members[(self.me + k) % n];
                let silent = self.heard.get(&node).is_none_or(|t| now.since(*t) > silent_after);
                (silent, self.rtt.get(&node).copied().unwrap_or(Duration::from_secs(3600)), k, node)
            })
            .collect();
        peers.sort();
        peers.into_iter().take(self.fast_quorum.saturating_sub(1)).map(|(_, _, _, node)| node).collect()
    }

    fn send_all(&self, ctx: &mut Ctx<'_>, msg: &Msg) {
        ctx.broadcast(msg);
    }

    // --- events -----------------------------------------------------------------------------

    fn on_message(&mut self, ctx: &mut Ctx<'_>, from: NodeId, msg: Msg) {
        match msg {
            Msg::PreAccept(p) => self.on_pre_accept(ctx, from, p),
            Msg::PreAcceptOk { ballot, inst, attrs, committed_deps, .. } => {
                self.on_pre_accept_ok(ctx, from, ballot, inst, attrs, committed_deps)
            }
            Msg::Accept(p) => self.on_accept(ctx, from, p),
            Msg::AcceptOk { ballot, inst } => self.on_accept_ok(ctx, from, ballot, inst),
            Msg::Nack { ballot, inst, promised } => self.on_nack(ctx, ballot, inst, promised),
            Msg::Commit { entries } => {
                for (inst, cmds, attrs) in entries {
                    self.on_commit(ctx, inst, cmds, attrs);
                }
                self.execute(ctx);
            }
            Msg::Prepare { ballot, inst } => self.on_prepare(ctx, from, ballot, inst),
            Msg::PrepareOk { ballot, inst, state } => self.on_prepare_ok(ctx, from, ballot, inst, state),
            Msg::TryPreAccept(p) => self.on_try_pre_accept(ctx, from, p),
            Msg::TryPreAcceptReply { ballot, inst, outcome } => {
                self.on_try_pre_accept_reply(ctx, from, ballot, inst, outcome)
            }
            Msg::Fetch { insts } => self.on_fetch(ctx, from, insts),
            Msg::Heartbeat { known, committed, sent } => {
                if committed.len() == self.n() {
                    self.peer_committed.insert(from, committed);
                }
                for (p, &k) in known.iter().enumerate().take(self.n()) {
                    let space = self.members[p];
                    if k > self.known[p] {
                        self.saw(InstId { space, index: k }, ctx.now);
                    }
                }
                ctx.send(from, &Msg::Pong { sent });
            }
            Msg::Pong { sent } => {
                if ctx.now >= sent {
                    let sample = ctx.now.since(sent);
                    let rtt = self.rtt.entry(from).or_insert(sample);
                    *rtt = (*rtt * 7 + sample) / 8;
                }
            }
        }
    }

    /// Answer a Fetch with the commits this replica has.
    fn on_fetch(&mut self, ctx: &mut Ctx<'_>, from: NodeId, insts: Vec<InstId>) {
        let entries: Vec<(InstId, Vec<Command>, Attrs)> = insts
            .into_iter()
            .take(MAX_PER_TICK)
            .filter_map(|id| {
                let i = self.inst(id)?;
                (i.phase == Phase::Committed).then(|| (id, i.cmds.clone(), i.attrs.clone()))
            })
            .collect();
        if !entries.is_empty() {
            ctx.send(from, &Msg::Commit { entries });
        }
    }

    /// The periodic tick: heartbeats, retransmissions, asking for missing commits and taking
    /// over instances that stay uncommitted (§4.6).
    fn on_tick(&mut self, ctx: &mut Ctx<'_>) {
        ctx.set_timer(TIMER_TICK, self.params.heartbeat());
        let hb = Msg::Heartbeat { known: self.known.clone(), committed: self.committed_upto.clone(), sent: ctx.now };
        self.send_all(ctx, &hb);
        self.retransmit(ctx);
        self.forget();
        // Gaps: instances known to exist but never seen here.
        for p in 0..self.n() {
            let space = self.members[p];
            let hi = self.known[p].min(self.committed_upto[p] + MAX_AHEAD);
            let mut lo = self.committed_upto[p] + 1;
            let mut added = 0;
            while lo <= hi && added < 4 * MAX_PER_TICK {
                let id = InstId { space, index: lo };
                if !self.is_committed(id) {
                    self.unsettled.entry(id).or_insert(ctx.now);
                    added += 1;
                }
                lo += 1;
            }
        }
        let fetch_after = self.params.heartbeat() * 2;
        let mut fetch = Vec::new();
        let mut takeover = Vec::new();
        for (&id, &since) in &self.unsettled {
            if self.leads.contains_key(&id) {
                continue;
            }
            let waited = ctx.now.since(since);
            if waited >= fetch_after && fetch.len() < MAX_PER_TICK {
                fetch.push(id);
            }
            match self.takeover_at.get(&id) {
                Some(&at) if ctx.now >= at && takeover.len() < MAX_PER_TICK => takeover.push(id),
                _ => {}
            }
        }
        let pending: Vec<InstId> =
            self.unsettled.keys().filter(|id| !self.takeover_at.contains_key(id)).copied().collect();
        for id in pending {
            let since = self.unsettled[&id];
            let delay = ctx.random_between(
                Duration::from_millis(self.params.election_timeout_min_ms),
                Duration::from_millis(self.params.election_timeout_max_ms),
            );
            self.takeover_at.insert(id, since + delay);
        }
        if !fetch.is_empty() {
            self.send_all(ctx, &Msg::Fetch { insts: fetch });
        }
        for id in takeover {
            self.takeover_at.remove(&id);
            self.start_recovery(ctx, id);
        }
    }

    fn status_extra(&self) -> BTreeMap<String, String> {
        let c = &self.counters;
        let mut extra = BTreeMap::new();
        extra.insert("fast_path".into(), c.fast.to_string());
        extra.insert("slow_path".into(), c.slow.to_string());
        extra.insert("recoveries".into(), c.recoveries.to_string());
        extra.insert("try_pre_accepts".into(), c.try_pre_accepts.to_string());
        extra.insert("tpa_committed".into(), c.tpa_committed.to_string());
        extra.insert("noops".into(), c.noops.to_string());
        extra.insert("sccs_multi".into(), c.sccs_multi.to_string());
        extra.insert("scc_max".into(), c.scc_max.to_string());
        extra.insert("commands_executed".into(), c.executed.to_string());
        extra.insert("reproposed".into(), c.reproposed.to_string());
        extra.insert("commit_replies".into(), c.commit_replies.to_string());
        extra.insert("barriers".into(), c.barriers.to_string());
        extra.insert("exec_steps".into(), self.exec_steps.get().to_string());
        extra.insert("fast_quorum".into(), self.fast_quorum.to_string());
        extra.insert("instances".into(), self.insts.iter().map(|m| m.len()).sum::<usize>().to_string());
        extra.insert("unsettled".into(), self.unsettled.len().to_string());
        extra.insert("snapshots".into(), self.snapshots.to_string());
        extra.insert("forgotten_upto".into(), format!("{:?}", self.pruned_upto));
        extra
    }
}

impl Protocol for Epaxos {
    fn recover(&mut self, ctx: &mut Ctx<'_>, records: Vec<Bytes>) {
        let mut latest: BTreeMap<InstId, Instance> = BTreeMap::new();
        for bytes in records {
            let (inst, ballot, vballot, phase, cmds, attrs) = match decode::<Record>(&bytes) {
                Ok(Record::Inst { inst, ballot, vballot, phase, cmds, attrs }) => {
                    (inst, ballot, vballot, phase, cmds, attrs)
                }
                Ok(Record::Snapshot { covered, extras, forgotten, max_seq, data }) => {
                    if self.restore_snapshot(ctx, covered, extras, forgotten, max_seq, data) {
                        latest.clear();
                    }
                    continue;
                }
                Err(_) => continue,
            };
            let Some(p) = self.pos_of(inst.space) else { continue };
            if inst.index <= self.pruned_upto[p] {
                continue;
            }
            let e = latest.entry(inst).or_default();
            if e.phase == Phase::Committed {
                continue;
            }
            *e = Instance { ballot, vballot, phase, cmds, attrs, executed: false };
        }
        if self.snap_covered.is_some() {
            for (id, inst) in latest.iter_mut() {
                if self.covered_by_snapshot(*id) && inst.phase == Phase::Committed {
                    inst.executed = true;
                }
            }
        }
        for (id, inst) in latest {
            let p = self.pos_of(id.space).expect("checked");
            self.known[p] = self.known[p].max(id.index);
            if inst.phase != Phase::None {
                self.conflicts.record(p, id.index, &inst.cmds, inst.attrs.seq);
            }
            let committed = inst.phase == Phase::Committed;
            let executed = inst.executed;
            self.insts[p].insert(id.index, inst);
            if executed {
                self.max_exec_seq = self.max_exec_seq.max(self.insts[p][&id.index].attrs.seq);
            } else if committed {
                self.note_committed(p, id);
            } else {
                self.unsettled.insert(id, ctx.now);
            }
        }
        self.snap_covered = None;
        for p in 0..self.n() {
            self.advance_committed(p);
            while self.insts[p].get(&(self.executed_upto[p] + 1)).is_some_and(|i| i.executed) {
                self.executed_upto[p] += 1;
            }
        }
        self.execute(ctx);
        ctx.set_timer(TIMER_TICK, self.params.heartbeat());
    }

    fn on_event(&mut self, ctx: &mut Ctx<'_>, event: Event) {
        match event {
            Event::Message { from, msg, .. } => {
                if from == self.id || self.pos_of(from).is_none() {
                    return;
                }
                self.heard.insert(from, ctx.now);
                let Ok(msg) = decode::<Msg>(&msg) else { return };
                self.on_message(ctx, from, msg);
            }
            Event::Request { client, cmd, .. } => self.on_request(ctx, client, cmd),
            Event::Timer(TIMER_TICK) => self.on_tick(ctx),
            Event::Timer(TIMER_BATCH) => self.on_batch_timer(ctx),
            Event::SnapshotTaken { token, data } => self.on_snapshot_taken(ctx, token, data),
            Event::Persisted { token } => self.on_persisted(token),
            Event::Timer(_) => {}
            Event::Reconfigure { client, id, .. } => {
                let body = ReplyBody::Invalid { reason: "epaxos does not support membership changes yet".into() };
                ctx.reply(client, synod_core::Reply { client: 0, seq: id, from: self.id, body });
            }
        }
    }

    fn status(&self) -> Status {
        Status {
            id: self.id,
            protocol: "epaxos".into(),
            role: Role::Replica,
            ballot: self.known[self.me].to_string(),
            leader: None,
            commit_index: self.committed_upto.iter().sum(),
            execute_index: self.counters.executed,
            extra: self.status_extra(),
        }
    }

    fn describe_message(&self, msg: &[u8]) -> String {
        let attrs = |a: &Attrs| format!("seq={} deps={:?}", a.seq, a.deps);
        match decode::<Msg>(msg) {
            Ok(Msg::PreAccept(p)) => {
                format!("PreAccept {} b={} {} cmds {}", p.inst, p.ballot, p.cmds.len(), attrs(&p.attrs))
            }
            Ok(Msg::PreAcceptOk { ballot, inst, attrs: a, changed, committed_deps }) => {
                format!("PreAcceptOk {inst} b={ballot} {} changed={changed} committed_deps={committed_deps}", attrs(&a))
            }
            Ok(Msg::TryPreAccept(p)) => format!("TryPreAccept {} b={} {}", p.inst, p.ballot, attrs(&p.attrs)),
            Ok(Msg::TryPreAcceptReply { ballot, inst, outcome }) => {
                format!("TryPreAcceptReply {inst} b={ballot} {outcome:?}")
            }
            Ok(Msg::Accept(p)) => format!("Accept {} b={} {}", p.inst, p.ballot, attrs(&p.attrs)),
            Ok(Msg::AcceptOk { ballot, inst }) => format!("AcceptOk {inst} b={ballot}"),
            Ok(Msg::Nack { ballot, inst, promised }) => format!("Nack {inst} b={ballot} promised={promised}"),
            Ok(Msg::Commit { entries }) => {
                let e: Vec<String> = entries.iter().map(|(i, c, a)| format!("{i}[{}] {}", c.len(), attrs(a))).collect();
                format!("Commit {}", e.join(", "))
            }
            Ok(Msg::Prepare { ballot, inst }) => format!("Prepare {inst} b={ballot}"),
            Ok(Msg::PrepareOk { ballot, inst, state }) => match state {
                None => format!("PrepareOk {inst} b={ballot} (nothing)"),
                Some(r) => format!("PrepareOk {inst} b={ballot} {:?} v={} {}", r.phase, r.vballot, attrs(&r.attrs)),
            },
            Ok(Msg::Fetch { insts }) => format!("Fetch {} instances", insts.len()),
            Ok(Msg::Heartbeat { known, .. }) => format!("Heartbeat known={known:?}"),
            Ok(Msg::Pong { .. }) => "Pong".into(),
            Err(_) => format!("<{} undecodable bytes>", msg.len()),
        }
    }
}

#[cfg(feature = "mutants")]
pub mod mutants {
    use super::*;

    pub fn build_small_fast_quorum(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
        Ok(Box::new(Epaxos::new(setup, Variant { small_fast_quorum: true, ..Variant::default() })?))
    }
}
