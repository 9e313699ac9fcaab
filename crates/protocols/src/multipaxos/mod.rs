//! MultiPaxos (Lamport, "Paxos Made Simple" §3; the stable-leader variant every paper here
//! uses as its baseline).
//!
//! Reading order, top-down:
//! 1. **Leader election** — a follower whose election timer expires runs phase 1 once for all
//!    future slots (`Prepare` from its committed prefix on); a quorum of `Promise`s makes it
//!    leader. It re-proposes, under its own ballot, the highest-ballot value each slot was
//!    accepted with, and fills holes with no-ops.
//! 2. **Normal operation** — the leader batches client requests (adaptive: a batch is whatever
//!    queued while the pipeline window was full), assigns the next slot and runs phase 2
//!    (`Accept` / `Accepted`) with many slots in flight. A slot is chosen when a majority
//!    accepted it; chosen slots are executed in slot order.
//! 3. **Commit notification** — the leader's committed prefix rides on every `Accept` and on
//!    periodic `Heartbeat`s; followers mark a slot committed only if they accepted it in the
//!    leader's ballot (so they hold exactly the leader's value), and fetch anything else with
//!    `CatchupReq` (hole filling for lagging or restarted followers).
//! 4. **Durability** — promises and accepted values are persisted before the messages that
//!    depend on them leave (the driver contract in `synod_core::protocol`); on restart the
//!    records are replayed and the committed prefix is re-executed.
//!
//! Reads go through the log (no leases yet), so every operation is linearizable.

mod msg;

pub use msg::{AcceptedSlot, Batch, Msg, Record, Value};

use crate::layers::{Campaign, LayerMsg, LayerOp, MultiPaxosLayer, NoLayer, TrimPolicy};
use crate::registry::Setup;
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use synod_core::batch::{Batcher, Waiter};
use synod_core::log::{InstanceLog, SlotState};
use synod_core::protocol::{compaction, decode, encode, encode_with_payload};
use synod_core::quorum::{majority, QuorumTracker};
use synod_core::snapshot::{chunk, ChunkAssembler, SnapshotPolicy};
use synod_core::{
    Action, Ballot, ClientRef, Command, Ctx, Event, MemberChange, MemberInfo, NodeId, Pos, Protocol, ProtocolParams,
    Reply, ReplyBody, Role, Status, Time, TimerId,
};

/// Trimmable slots freed per event (see `trim_step`).
const TRIM_STEP: u64 = 512;
/// How far beyond its execution point an acceptor takes Accepts, in catch-up chunks
/// (256 × the default 256-slot chunk = 65,536 slots).
const ACCEPT_AHEAD_CHUNKS: u64 = 256;
const TIMER_ELECTION: TimerId = 1;
const TIMER_HEARTBEAT: TimerId = 2;
// Timer ids 3 and 4 (and any other the core does not use) belong to the layer.
/// Retry / give up on an on-demand snapshot transfer that stopped making progress.
const TIMER_SNAPSHOT: TimerId = 5;

/// Most bytes of commands in one batch.
const MAX_BATCH_BYTES: usize = 1 << 20;

/// Registry constructor.
pub fn build(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
    Ok(Box::new(MultiPaxos::new(setup, Variant::default())?))
}

/// Deliberate deviations, used only by the mutation tests that prove the checker can fail.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Variant {
    /// Use this quorum size instead of a majority (a non-intersecting quorum is unsafe).
    pub quorum_override: Option<usize>,
    /// Followers execute accepted values before they are known to be chosen (unsafe).
    pub execute_on_accept: bool,
    /// Acceptors keep accepted values in memory only (unsafe: a crash of the replicas that
    /// accepted a chosen value, e.g. the whole cluster at once, loses it).
    pub volatile_accepts: bool,
}

/// One log slot: the value and the ballot it was accepted in.
#[derive(Clone, Debug)]
struct Entry {
    ballot: Ballot,
    value: Value,
}

/// Leader-side bookkeeping for a slot in flight.
struct InFlight {
    acks: QuorumTracker,
    sent_at: Time,
    /// Client commands in the slot (the slowdown detector counts operations in flight).
    cmds: usize,
}

/// Candidate-side bookkeeping for phase 1.
struct Election {
    promises: QuorumTracker,
    /// Highest-ballot value reported for each slot (committed values win).
    found: BTreeMap<u64, (Ballot, Value, bool)>,
    from_slot: u64,
}

/// The latest local snapshot (served to peers, and the base of the durable image).
struct LocalSnapshot {
    index: u64,
    data: Bytes,
    /// The configuration in effect after `index` (the data is only the state machine).
    members: Vec<MemberInfo>,
}

/// An on-demand snapshot being fetched from a peer.
struct Fetch {
    from: NodeId,
    progress_at: Time,
    tries: u32,
}

pub struct MultiPaxos {
    id: NodeId,
    name: &'static str,
    members: Vec<NodeId>,
    params: ProtocolParams,
    variant: Variant,
    /// Majority of the current `members` (the configuration after the executed prefix).
    quorum: usize,
    /// Peer addresses carried by membership entries (absent = as configured in the driver).
    addrs: BTreeMap<NodeId, String>,
    /// Leader: the slot of the membership entry it proposed (or re-proposed) and has not
    /// executed yet. Nothing is proposed after that slot until it is executed, and no second
    /// change is accepted meanwhile (docs/design.md, "Membership").
    config_pending: Option<u64>,
    /// The admin request waiting for that entry: (slot, client, request id).
    config_waiter: Option<(u64, ClientRef, u64)>,

    role: Role,
    /// Highest ballot promised (durable).
    promised: Ballot,
    /// Highest ballot seen anywhere (so a new election outbids it); not a promise.
    max_seen: Ballot,
    /// The highest ballot this node led with (durable: `Record::Led`).
    led: Ballot,
    /// The highest ballot of *another* node that we promised or accepted (durable: the
    /// `Promise`/`Accept` records of other nodes' ballots). We never go below it.
    promised_other: Ballot,
    /// Set when recovery met a record it cannot decode: the replica then stays passive
    /// (never votes), since a lost promise could let it accept what it promised to refuse.
    broken: Option<String>,
    /// The leader this replica currently follows (or itself).
    leader: Option<NodeId>,
    /// When this replica last heard its leader (Accept / heartbeat in the current ballot).
    leader_contact: Option<(NodeId, Time)>,
    /// The last leader whose Accepts this replica took (the "last successful leader" of
    /// HoliPaxos §3.2).
    last_successful_leader: Option<NodeId>,

    log: InstanceLog<Entry>,
    /// Committed prefix last persisted as a `CommitUpto` record.
    persisted_commit: u64,
    /// Highest committed prefix the leader announced.
    leader_commit: u64,
    /// Client commands executed by this replica since it started (throughput).
    cmds_executed: u64,

    // Leader state.
    next_slot: u64,
    in_flight: BTreeMap<u64, InFlight>,
    queue: Batcher,

    // Candidate state.
    election: Option<Election>,

    // Follower state.
    catchup_pending_until: Time,
    /// Clients whose requests this replica proposed in slots not yet executed; answered on
    /// execution if the slot's chosen command is theirs (another leader may have filled the
    /// slot). Kept apart from `in_flight` because a slot can also commit via catch-up.
    waiting: BTreeMap<u64, Vec<Option<Waiter>>>,

    // Log trimming and snapshots (plain MultiPaxos: periodic snapshots, `compact_every = 0`;
    // the layer chooses).
    trim: TrimPolicy,
    compact_every: u64,
    policy: SnapshotPolicy,
    /// The trim bound the layer learned from (or, at the leader, computed for) the cluster
    /// (`TrimPolicy::Bound`; HoliPaxos's GLE, or the quorum-executed index under quorum trim).
    gle: u64,
    /// Slots below this may be freed (below the layer's trim bound, or behind a snapshot in
    /// snapshot mode); freed [`TRIM_STEP`] per event.
    trim_to: u64,
    snapshot: Option<LocalSnapshot>,
    /// A snapshot requested from the driver: (token, index it covers, compact afterwards).
    snapshot_pending: Option<(u64, u64, bool)>,
    /// The configuration at the index of `snapshot_pending`.
    pending_members: Vec<MemberInfo>,
    next_token: u64,
    /// Peers waiting for the first chunk of the snapshot being taken.
    snapshot_waiters: BTreeSet<NodeId>,
    /// Index of the snapshot the durable image starts from (0 = none).
    durable_base: u64,
    fetch: Option<Fetch>,
    incoming: ChunkAssembler,
    snapshots_installed: u64,

    /// The layer on this core ([`NoLayer`] for plain MultiPaxos).
    layer: Box<dyn MultiPaxosLayer>,
}

impl MultiPaxos {
    pub(crate) fn new(setup: &Setup, variant: Variant) -> Result<MultiPaxos, String> {
        Self::with_layer(setup, variant, "multipaxos", Box::new(NoLayer))
    }

    /// MultiPaxos with `layer` on top ([`NoLayer`]: the plain baseline), registered as `name`.
    pub(crate) fn with_layer(
        setup: &Setup,
        variant: Variant,
        name: &'static str,
        layer: Box<dyn MultiPaxosLayer>,
    ) -> Result<MultiPaxos, String> {
        setup.params.validate()?;
        // A replica that is not among `setup.members` starts as a learner joining an
        // existing cluster: it answers as an acceptor but never campaigns until it executes
        // (or installs in a snapshot) a configuration that contains it.
        let mut members = setup.members.clone();
        members.sort_unstable();
        members.dedup();
        if members.is_empty() {
            return Err("members is empty".into());
        }
        setup.params.check_options(name, layer.options())?;
        let compaction = layer.compaction();
        let quorum = variant.quorum_override.unwrap_or_else(|| majority(members.len()));
        Ok(MultiPaxos {
            id: setup.id,
            name,
            members,
            params: setup.params.clone(),
            variant,
            quorum,
            addrs: BTreeMap::new(),
            config_pending: None,
            config_waiter: None,
            role: Role::Follower,
            promised: Ballot::ZERO,
            max_seen: Ballot::ZERO,
            led: Ballot::ZERO,
            promised_other: Ballot::ZERO,
            broken: None,
            leader: None,
            leader_contact: None,
            last_successful_leader: None,
            log: InstanceLog::new(),
            persisted_commit: 0,
            leader_commit: 0,
            cmds_executed: 0,
            next_slot: 1,
            in_flight: BTreeMap::new(),
            queue: Batcher::new(),
            election: None,
            catchup_pending_until: Time::ZERO,
            waiting: BTreeMap::new(),
            // Plain MultiPaxos compacts like Raft: periodic snapshots (`snapshot_every`, 0 = never)
            // with `snapshot_keep` entries kept for catch-up; a layer may pick another mode.
            trim: compaction.trim,
            compact_every: compaction.compact_every,
            policy: SnapshotPolicy::from_params(&setup.params),
            gle: 0,
            trim_to: 0,
            snapshot: None,
            snapshot_pending: None,
            pending_members: Vec::new(),
            next_token: 1,
            snapshot_waiters: BTreeSet::new(),
            durable_base: 0,
            fetch: None,
            incoming: ChunkAssembler::default(),
            snapshots_installed: 0,
            layer,
        })
    }

    /// Call a hook that needs both the layer (mutably) and a view of the core: the layer is
    /// taken out for the call (the core sees [`NoLayer`] meanwhile, and the view is
    /// read-only, so no hook runs inside another).
    fn with_layer_hook<R>(&mut self, f: impl FnOnce(&mut dyn MultiPaxosLayer, &MultiPaxos) -> R) -> R {
        let mut layer = std::mem::replace(&mut self.layer, Box::new(NoLayer));
        let r = f(layer.as_mut(), self);
        self.layer = layer;
        r
    }

    /// Do what a layer's timer asked for.
    fn run_layer_op(&mut self, ctx: &mut Ctx<'_>, op: LayerOp) {
        match op {
            LayerOp::Propose(entry) => {
                if self.role == Role::Leader {
                    self.propose(ctx, vec![(Value::Layer(entry), Vec::new())]);
                }
            }
            LayerOp::StartElection => self.start_election(ctx),
        }
    }

    // ---------------------------------------------------------------------------------------
    // The view layers get (`crate::layers`)
    // ---------------------------------------------------------------------------------------

    pub(crate) fn id(&self) -> NodeId {
        self.id
    }

    pub(crate) fn role(&self) -> Role {
        self.role
    }

    /// The highest ballot promised.
    pub(crate) fn promised(&self) -> Ballot {
        self.promised
    }

    /// The current configuration's member ids, sorted.
    pub(crate) fn members(&self) -> &[NodeId] {
        &self.members
    }

    pub(crate) fn quorum(&self) -> usize {
        self.quorum
    }

    pub(crate) fn params(&self) -> &ProtocolParams {
        &self.params
    }

    /// Every slot up to this one is executed here.
    pub(crate) fn executed_upto(&self) -> u64 {
        self.log.executed_upto()
    }

    /// Client commands executed since this replica started.
    pub(crate) fn cmds_executed(&self) -> u64 {
        self.cmds_executed
    }

    /// The trim bound last learned or computed (`TrimPolicy::Bound`).
    pub(crate) fn trim_bound(&self) -> u64 {
        self.gle
    }

    /// The last leader whose Accepts this replica took.
    pub(crate) fn last_successful_leader(&self) -> Option<NodeId> {
        self.last_successful_leader
    }

    /// When this replica last heard its leader (`Time::ZERO`: never).
    pub(crate) fn leader_heard_at(&self) -> Time {
        self.leader_contact.map_or(Time::ZERO, |(_, t)| t)
    }

    /// A membership entry is proposed and not executed yet (nothing may be proposed now).
    pub(crate) fn membership_pending(&self) -> bool {
        self.config_pending.is_some()
    }

    fn n(&self) -> usize {
        self.members.len()
    }

    /// Whether this replica belongs to the configuration in effect (a joining learner or a
    /// removed replica does not: it never campaigns).
    fn is_member(&self) -> bool {
        self.members.contains(&self.id)
    }

    /// The current configuration with the addresses membership entries carried.
    fn member_infos(&self) -> Vec<MemberInfo> {
        self.members
            .iter()
            .map(|id| MemberInfo { id: *id, addr: self.addrs.get(id).cloned().unwrap_or_default() })
            .collect()
    }

    /// Install a configuration (executed membership entry, snapshot, durable record) and
    /// tell the driver. Returns whether the member set changed.
    fn set_members(&mut self, ctx: &mut Ctx<'_>, members: Vec<MemberInfo>) -> bool {
        let mut ids: Vec<NodeId> = members.iter().map(|m| m.id).collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.is_empty() {
            return false; // never produced by this code; keep the current configuration
        }
        for m in members.iter().filter(|m| !m.addr.is_empty()) {
            self.addrs.insert(m.id, m.addr.clone());
        }
        self.addrs.retain(|id, _| ids.contains(id));
        let changed = ids != self.members;
        self.members = ids;
        self.quorum = self.variant.quorum_override.unwrap_or_else(|| majority(self.members.len()));
        ctx.push(Action::MembershipChanged { members: self.member_infos() });
        changed
    }

    fn persist(&self, ctx: &mut Ctx<'_>, records: &[Record]) {
        ctx.persist(0, records.iter().map(encode).collect());
    }

    fn reset_election_timer(&mut self, ctx: &mut Ctx<'_>) {
        let min = Duration::from_millis(self.params.election_timeout_min_ms);
        let max = Duration::from_millis(self.params.election_timeout_max_ms);
        let after = ctx.random_between(min, max);
        ctx.set_timer(TIMER_ELECTION, after);
    }

    /// The leader this replica follows, if it heard from it within an election timeout
    /// (itself when leading). HoliPaxos Rule 3 keeps churners below it out.
    pub(crate) fn live_leader(&self, now: Time) -> Option<NodeId> {
        if self.role == Role::Leader {
            return Some(self.id);
        }
        let max = Duration::from_millis(self.params.election_timeout_max_ms);
        self.leader_contact
            .filter(|(l, t)| self.leader == Some(*l) && self.promised.node == *l && now.since(*t) < max)
            .map(|(l, _)| l)
    }

    fn heard_leader(&mut self, now: Time, from: NodeId) {
        self.leader_contact = Some((from, now));
        self.layer.on_leader_heard();
    }

    // ---------------------------------------------------------------------------------------
    // 1. Leader election (phase 1 for all future slots)
    // ---------------------------------------------------------------------------------------

    fn on_election_timer(&mut self, ctx: &mut Ctx<'_>) {
        if self.role == Role::Leader {
            return;
        }
        if !self.is_member() {
            // A learner or a removed replica: keep following, never campaign.
            self.reset_election_timer(ctx);
            return;
        }
        match self.layer.campaign(self.quorum) {
            Campaign::Probe => self.probe(ctx),
            Campaign::Elect => self.start_election(ctx),
        }
    }

    /// The layer asked for a probe instead of a campaign (HoliPaxos Rule 2: a node that
    /// could not hear from a quorum campaigns with the invalid ballot 0). Everyone rejects it
    /// without changing state; the rejections tell the layer who is reachable.
    fn probe(&mut self, ctx: &mut Ctx<'_>) {
        if self.role == Role::Candidate {
            self.step_down(ctx, None);
        }
        // Our election timer expired: whoever we promised last is no leader we know of, so
        // stop sending clients to it.
        self.leader = None;
        self.layer.on_probe();
        let from_slot = self.log.committed_prefix() + 1;
        ctx.broadcast(&Msg::Prepare { ballot: Ballot::ZERO, from_slot });
        self.reset_election_timer(ctx);
    }

    /// A phase-1 answer (promise or rejection) from `from` for `ballot`, for the layer
    /// (HoliPaxos Rule 2 counts them).
    fn note_response(&mut self, ballot: Ballot, from: NodeId) {
        self.layer.on_phase1_answer(from, ballot, self.quorum);
    }

    fn start_election(&mut self, ctx: &mut Ctx<'_>) {
        self.phase1(ctx, true);
    }

    /// Run phase 1: `fresh` with a new ballot (an election), otherwise again in the ballot
    /// this leader already holds, after a membership entry took effect: the promises it
    /// collected came from a quorum of the old configuration, and slots after the entry are
    /// governed by the new one (docs/design.md, "Membership"). Acceptors that promised the
    /// ballot already just answer again; the followers keep following.
    fn phase1(&mut self, ctx: &mut Ctx<'_>, fresh: bool) {
        let ballot = if fresh { self.promised.max(self.max_seen).next_for(self.id) } else { self.promised };
        self.promised = ballot;
        self.role = Role::Candidate;
        self.leader = if fresh { None } else { Some(self.id) };
        self.in_flight.clear();
        if fresh {
            self.layer.on_campaign(ctx.now, ballot);
        }
        let from_slot = self.log.committed_prefix() + 1;
        let mut election = Election { promises: QuorumTracker::new(self.quorum), found: BTreeMap::new(), from_slot };
        // Our own promise, with what we accepted ourselves.
        if fresh {
            self.persist(ctx, &[Record::Promise(ballot)]);
        }
        let own = self.accepted_from(from_slot);
        Self::merge_promise(&mut election, own);
        election.promises.ack(self.id);
        self.election = Some(election);
        ctx.broadcast(&Msg::Prepare { ballot, from_slot });
        self.reset_election_timer(ctx);
        if self.election.as_ref().is_some_and(|e| e.promises.reached()) {
            self.become_leader(ctx);
        }
    }

    /// What this acceptor accepted in slots `from_slot..`.
    fn accepted_from(&self, from_slot: u64) -> Vec<AcceptedSlot> {
        self.log
            .range(from_slot, self.log.last_index())
            .map(|(slot, s)| AcceptedSlot {
                slot,
                ballot: s.value.ballot,
                value: s.value.value.clone(),
                committed: s.state != SlotState::InProgress,
            })
            .collect()
    }

    fn merge_promise(election: &mut Election, accepted: Vec<AcceptedSlot>) {
        for a in accepted {
            if a.slot < election.from_slot {
                continue;
            }
            let replace = match election.found.get(&a.slot) {
                None => true,
                Some((_, _, true)) => false,
                Some((b, _, false)) => a.committed || a.ballot > *b,
            };
            if replace {
                election.found.insert(a.slot, (a.ballot, a.value, a.committed));
            }
        }
    }

    fn on_prepare(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, from_slot: u64) {
        if !self.members.contains(&from) {
            // A removed replica (or one whose addition we have not executed yet) must not
            // disrupt the configuration we know; it learns its fate from the log.
            return;
        }
        let reprepare = ballot == self.promised && ballot.node == from;
        if !reprepare {
            // The layer may refuse first (HoliPaxos: a probe, or a churner under Rule 3).
            let now = ctx.now;
            if let Some(promised) = self.with_layer_hook(|l, core| l.screen_prepare(core, now, from, ballot)) {
                ctx.send(from, &Msg::Nack { ballot, promised });
                return;
            }
        }
        if ballot < self.promised || (ballot == self.promised && ballot.node != from) {
            ctx.send(from, &Msg::Nack { ballot, promised: self.promised });
            return;
        }
        if ballot > self.promised {
            self.promised = ballot;
            self.promised_other = self.promised_other.max(ballot);
            self.persist(ctx, &[Record::Promise(ballot)]);
            self.step_down(ctx, Some(from));
        }
        self.reset_election_timer(ctx);
        // The promise is made (plain Paxos: a higher ballot always gets one, and the
        // leader it deposes finds out as usual), but a candidate further behind than one
        // catch-up chunk is not sent it: it would carry every slot the candidate has not
        // learned (after a 20 s partition at 27k ops/s, a 161 MB message, rebuilt by each
        // acceptor on every election timeout, 300 ms of node loop each and refused by the
        // transport's frame limit: 31 s without a completed operation in a Fig. 9b run).
        // `Behind` makes the candidate give up this ballot and catch up in chunks; it can
        // win later. Withholding a promise from its candidate is a lost message to Paxos.
        let committed = self.log.committed_prefix();
        if committed >= from_slot.saturating_add(self.params.catchup_chunk.max(1) as u64) {
            ctx.send(from, &Msg::Behind { ballot, committed });
            return;
        }
        let trimmed = self.log.first_index() - 1;
        ctx.send(from, &Msg::Promise { ballot, accepted: self.accepted_from(from_slot), trimmed });
    }

    /// An acceptor promised our ballot but withheld the promise's contents because this
    /// candidate is too far behind: give the ballot up and catch up from that acceptor
    /// (chunked `CatchupReq`, or a snapshot if it has trimmed those slots).
    fn on_behind(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, committed: u64) {
        if !self.members.contains(&from) {
            return;
        }
        self.note_response(ballot, from);
        self.leader_commit = self.leader_commit.max(committed);
        if self.role == Role::Candidate && ballot == self.promised {
            self.step_down(ctx, None);
        }
        if self.role == Role::Follower {
            self.request_catchup(ctx, from);
        }
    }

    fn on_promise(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: NodeId,
        ballot: Ballot,
        accepted: Vec<AcceptedSlot>,
        trimmed: u64,
    ) {
        self.note_response(ballot, from);
        if self.role != Role::Candidate || ballot != self.promised || !self.members.contains(&from) {
            return;
        }
        let Some(election) = self.election.as_mut() else { return };
        if election.promises.has(from) {
            return;
        }
        if trimmed >= election.from_slot {
            // The acceptor dropped chosen slots we have not executed: its promise cannot
            // tell us their values. Give up this election and catch up from a snapshot.
            self.step_down(ctx, None);
            self.request_snapshot(ctx, Some(from));
            return;
        }
        Self::merge_promise(election, accepted);
        if election.promises.ack(from) {
            self.become_leader(ctx);
        }
    }

    /// Phase 1 succeeded: re-propose what may have been chosen, fill holes with no-ops.
    fn become_leader(&mut self, ctx: &mut Ctx<'_>) {
        let Some(election) = self.election.take() else { return };
        self.role = Role::Leader;
        if self.promised > self.led {
            self.led = self.promised;
            // Before any Accept of this ballot leaves (same turn, persisted first).
            self.persist(ctx, &[Record::Led(self.led)]);
        }
        self.leader = Some(self.id);
        ctx.cancel_timer(TIMER_ELECTION);
        let last = election.found.keys().next_back().copied().unwrap_or(0).max(self.log.last_index());
        self.next_slot = last.max(election.from_slot - 1) + 1;
        let ballot = self.promised;
        let mut found = election.found;
        let mut records = Vec::new();
        let mut proposals = Vec::new();
        let mut learned = false;
        // Phase 1 ran with a quorum of the configuration in effect after our committed
        // prefix, which governs the slots up to the first membership entry found; slots
        // after it are governed by the entry's configuration. So propose nothing after the
        // entry: once it is executed, phase 1 runs again under the new configuration and
        // finds what was accepted later (`apply_config`).
        self.config_pending = None;
        for slot in election.from_slot..self.next_slot {
            if self.log.is_committed(slot) {
                if self.log.get(slot).is_some_and(|s| matches!(s.value.value, Value::Config(_))) {
                    self.config_pending = Some(slot);
                    break;
                }
                continue;
            }
            let value = match found.remove(&slot) {
                // An acceptor knows this value is chosen: learn it, no phase 2. A leader that
                // was cut off for a while (its higher ballot wins when it comes back) would
                // otherwise re-propose every slot it missed at once.
                Some((_, v, true)) if !matches!(v, Value::Config(_)) => {
                    self.log.set(slot, Entry { ballot: Ballot::ZERO, value: v.clone() }, SlotState::Committed);
                    records.push(Record::Chosen { slot, value: v });
                    learned = true;
                    continue;
                }
                Some((_, v, _)) => v,
                None => Value::noop(),
            };
            let config = matches!(value, Value::Config(_));
            self.log.set(slot, Entry { ballot, value: value.clone() }, SlotState::InProgress);
            records.push(Record::Accept { slot, ballot, value: value.clone() });
            proposals.push((slot, value));
            if config {
                self.config_pending = Some(slot);
                break;
            }
        }
        if let Some(s) = self.config_pending {
            self.next_slot = s + 1;
        }
        if !records.is_empty() {
            self.persist(ctx, &records);
        }
        for (slot, value) in proposals {
            let n = value.len();
            self.track(ctx, slot, vec![None; n]);
            ctx.broadcast(&Msg::Accept { ballot, slot, value, commit_upto: self.log.committed_prefix() });
        }
        self.layer.on_become_leader(ctx);
        self.send_heartbeat(ctx);
        self.propose_queued(ctx);
        self.commit_ready(ctx);
        if learned {
            // Slots learned as chosen are executed now, not only when a later proposal
            // commits (with no new client request there would be none).
            self.execute(ctx);
        }
    }

    /// Leave the leader/candidate role, answering queued clients with a redirect.
    fn step_down(&mut self, ctx: &mut Ctx<'_>, leader: Option<NodeId>) {
        let was = self.role;
        self.role = Role::Follower;
        self.leader = leader;
        self.election = None;
        self.in_flight.clear();
        if was == Role::Leader {
            ctx.cancel_timer(TIMER_HEARTBEAT);
            self.layer.on_leadership_lost(ctx);
        }
        self.config_pending = None;
        if let Some((slot, client, id)) = self.config_waiter.take() {
            let reason = format!(
                "leadership lost before the membership entry in slot {slot} was executed; it may still take effect: check the members"
            );
            ctx.reply(client, Reply { client: 0, seq: id, from: self.id, body: ReplyBody::Rejected { reason } });
        }
        for p in self.queue.drain() {
            if let Some(c) = p.client {
                self.redirect(ctx, c, &p.cmd);
            }
        }
        self.reset_election_timer(ctx);
    }

    fn on_nack(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, promised: Ballot) {
        if !self.members.contains(&from) {
            return;
        }
        let verdict = self.with_layer_hook(|l, core| l.on_nack(core, from, ballot, promised));
        if verdict.note_ballot {
            self.max_seen = self.max_seen.max(promised);
        }
        if ballot == self.promised && promised > self.promised && self.role != Role::Follower {
            self.max_seen = self.max_seen.max(promised);
            self.step_down(ctx, None);
            return;
        }
        // The layer says the election will fail (HoliPaxos Rule 3): give it up now rather
        // than at the next timeout. As a follower this replica drops the abandoned ballot
        // when a live leader's periodic message arrives (`drop_abandoned_ballot`) and follows.
        if verdict.give_up && ballot == self.promised && ballot.node == self.id && self.role == Role::Candidate {
            self.step_down(ctx, None);
        }
    }

    // ---------------------------------------------------------------------------------------
    // 2. Normal operation (phase 2, pipelined, batched)
    // ---------------------------------------------------------------------------------------

    fn redirect(&self, ctx: &mut Ctx<'_>, client: ClientRef, cmd: &Command) {
        let leader = self.leader.filter(|l| *l != self.id);
        ctx.answer(client, cmd, ReplyBody::NotLeader { leader });
    }

    fn on_request(&mut self, ctx: &mut Ctx<'_>, client: ClientRef, cmd: Command) {
        match self.role {
            Role::Leader => {
                self.queue.push(Some(client), cmd);
                self.propose_queued(ctx);
            }
            // A candidate may win shortly: hold the request rather than bounce it.
            Role::Candidate => self.queue.push(Some(client), cmd),
            _ => self.redirect(ctx, client, &cmd),
        }
    }

    /// Propose queued requests while the pipeline window has room.
    fn propose_queued(&mut self, ctx: &mut Ctx<'_>) {
        if self.role != Role::Leader || self.config_pending.is_some() {
            return;
        }
        let mut proposals = Vec::new();
        while !self.queue.is_empty() && self.in_flight.len() + proposals.len() < self.params.pipeline_window {
            let batch = self.queue.take(self.params.max_batch, MAX_BATCH_BYTES);
            let clients: Vec<Option<Waiter>> = batch.iter().map(Waiter::for_pending).collect();
            let value = Value::Cmds(batch.into_iter().map(|p| p.cmd).collect());
            proposals.push((value, clients));
        }
        self.propose(ctx, proposals);
    }

    /// Assign the next slots to `proposals` and run phase 2 for them.
    fn propose(&mut self, ctx: &mut Ctx<'_>, proposals: Vec<(Value, Vec<Option<Waiter>>)>) {
        if proposals.is_empty() {
            return;
        }
        let mut records = Vec::new();
        let mut sends = Vec::new();
        for (value, clients) in proposals {
            let slot = self.next_slot;
            self.next_slot += 1;
            self.log.set(slot, Entry { ballot: self.promised, value: value.clone() }, SlotState::InProgress);
            records.push(Record::Accept { slot, ballot: self.promised, value: value.clone() });
            sends.push((slot, value, clients));
        }
        // Persist our own acceptance before the Accepts leave (driver contract), so counting
        // ourselves in the quorum is safe.
        self.persist(ctx, &records);
        let commit_upto = self.log.committed_prefix();
        for (slot, value, clients) in sends {
            self.track(ctx, slot, clients);
            ctx.broadcast(&Msg::Accept { ballot: self.promised, slot, value, commit_upto });
        }
        self.commit_ready(ctx);
    }

    fn track(&mut self, ctx: &mut Ctx<'_>, slot: u64, clients: Vec<Option<Waiter>>) {
        let mut acks = QuorumTracker::new(self.quorum);
        acks.ack(self.id);
        let cmds = clients.len();
        if clients.iter().any(|c| c.is_some()) {
            self.waiting.insert(slot, clients);
        }
        self.in_flight.insert(slot, InFlight { acks, sent_at: ctx.now, cmds });
    }

    fn on_accept(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, slot: u64, value: Value, commit: u64) {
        self.drop_abandoned_ballot(ballot);
        if ballot < self.promised {
            ctx.send(from, &Msg::Nack { ballot, promised: self.promised });
            return;
        }
        let mut records = Vec::new();
        if ballot > self.promised {
            self.promised = ballot;
            self.promised_other = self.promised_other.max(ballot);
            records.push(Record::Promise(ballot));
        }
        if self.role != Role::Follower || self.leader != Some(from) {
            self.step_down(ctx, Some(from));
        }
        self.reset_election_timer(ctx);
        self.heard_leader(ctx.now, from);
        self.last_successful_leader = Some(from);
        // An acceptor holds at most ACCEPT_AHEAD_CHUNKS catch-up chunks beyond its execution
        // point. Otherwise a replica far behind (a joiner before its snapshot, one restarted
        // with an empty disk) holds every slot in between as a hole: one Accept for slot
        // 10^8 would allocate gigabytes. It does not answer (never unsafe in Paxos: the slot
        // is simply not accepted here) and catches up first, which learn_commit asks for.
        let ahead = (self.params.catchup_chunk.max(1) as u64).saturating_mul(ACCEPT_AHEAD_CHUNKS);
        if slot > self.log.exec_next().saturating_add(ahead) {
            if !records.is_empty() {
                self.persist(ctx, &records);
            }
            self.learn_commit(ctx, from, ballot, commit);
            return;
        }
        if !self.log.is_committed(slot) {
            self.log.set(slot, Entry { ballot, value: value.clone() }, SlotState::InProgress);
            if !self.variant.volatile_accepts {
                records.push(Record::Accept { slot, ballot, value });
            }
        }
        if !records.is_empty() {
            self.persist(ctx, &records);
        }
        ctx.send(from, &Msg::Accepted { ballot, slot });
        if self.variant.execute_on_accept {
            self.log.mark_committed(slot);
        }
        self.learn_commit(ctx, from, ballot, commit);
    }

    fn on_accepted(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, slot: u64) {
        // Only members count: every slot in flight is governed by the current configuration
        // (a membership entry stops the pipeline until it is executed).
        if self.role != Role::Leader || ballot != self.promised || !self.members.contains(&from) {
            return;
        }
        let reached = match self.in_flight.get_mut(&slot) {
            Some(f) => f.acks.ack(from),
            None => false,
        };
        if reached {
            self.commit_ready(ctx);
        }
    }

    /// Mark every in-flight slot that has a quorum committed, then execute and refill the
    /// pipeline.
    fn commit_ready(&mut self, ctx: &mut Ctx<'_>) {
        let done: Vec<u64> = self.in_flight.iter().filter(|(_, f)| f.acks.reached()).map(|(s, _)| *s).collect();
        for slot in &done {
            self.in_flight.remove(slot);
            self.log.mark_committed(*slot);
        }
        if !done.is_empty() {
            self.execute(ctx);
            self.propose_queued(ctx);
        }
    }

    // ---------------------------------------------------------------------------------------
    // 3. Commit notification, heartbeats and catch-up
    // ---------------------------------------------------------------------------------------

    /// The leader's periodic message: MultiPaxos's heartbeat, or the layer's replacement
    /// (HoliPaxos's single control message, §3.4), at an interval the layer may stretch
    /// (HoliPaxos Rule 1).
    fn send_heartbeat(&mut self, ctx: &mut Ctx<'_>) {
        match self.with_layer_hook(|l, core| l.heartbeat(core)) {
            Some(beat) => ctx.broadcast(&Msg::Layer(beat)),
            None => ctx.broadcast(&Msg::Heartbeat { ballot: self.promised, commit_upto: self.log.committed_prefix() }),
        }
        let every = self.params.heartbeat() * self.layer.heartbeat_penalty(ctx.now);
        ctx.set_timer(TIMER_HEARTBEAT, every);
    }

    /// Leader tick: heartbeat, and re-send Accepts that have not gathered a quorum in time
    /// (messages may be lost).
    fn on_heartbeat_timer(&mut self, ctx: &mut Ctx<'_>) {
        if self.role != Role::Leader {
            return;
        }
        let resend_after = self.params.heartbeat() * 2;
        let commit_upto = self.log.committed_prefix();
        let ballot = self.promised;
        let mut resend = Vec::new();
        // The oldest first and a bounded number per tick: re-sending thousands of slots at
        // once overflows the peer queues, whose drops then make every tick re-send them all.
        let most = self.params.pipeline_window.max(64);
        for (slot, f) in self.in_flight.iter_mut() {
            if resend.len() >= most {
                break;
            }
            if ctx.now.since(f.sent_at) >= resend_after {
                f.sent_at = ctx.now;
                let missing: Vec<NodeId> =
                    self.members.iter().copied().filter(|m| *m != self.id && !f.acks.has(*m)).collect();
                resend.push((*slot, missing));
            }
        }
        for (slot, missing) in resend {
            if let Some(e) = self.log.get(slot) {
                let msg = Msg::Accept { ballot, slot, value: e.value.value.clone(), commit_upto };
                let bytes = encode(&msg);
                for to in missing {
                    ctx.push(Action::Send { to, msg: bytes.clone() });
                }
            }
        }
        self.persist_commit_marker(ctx);
        self.send_heartbeat(ctx);
    }

    /// A leader with a lower ballot than ours is alive and we are not campaigning: if the
    /// higher ballot is our own, from an election we gave up (e.g. while cut off from the
    /// cluster, after which Rule 2 keeps us passive), forget it rather than make the working
    /// leader step down with a rejection (§3.1.1 rejects heartbeats of *older leaders*; we
    /// never led with that ballot). Safe because only we propose with our ballot and we never
    /// ran phase 2 with it (`led`, durable, is below it; not leader, no election running), and
    /// never will (our next ballot is chosen above `max_seen`, which keeps it); acceptors that
    /// promised it still reject the lower ballot. The durable promise stays higher
    /// (conservative after a restart).
    fn drop_abandoned_ballot(&mut self, ballot: Ballot) {
        if ballot < self.promised
            && self.promised.node == self.id
            && self.promised > self.led
            && ballot >= self.promised_other
            && self.role == Role::Follower
            && self.election.is_none()
            && !ballot.is_zero()
        {
            self.max_seen = self.max_seen.max(self.promised);
            self.promised = ballot;
            self.promised_other = ballot;
        }
    }

    /// Follow the leader of `ballot` (a heartbeat or control message from it).
    fn follow(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot) -> bool {
        self.drop_abandoned_ballot(ballot);
        if ballot < self.promised {
            if self.layer.rejects_stale_leaders() {
                // HoliPaxos §3.1.1: a stale leader learns the newer ballot and steps down.
                ctx.send(from, &Msg::Nack { ballot, promised: self.promised });
            } else if self.role == Role::Follower && self.leader_contact.is_some_and(|(l, _)| l == from) {
                // Baseline MultiPaxos: its failure detector knows only that the leader it
                // followed is alive, not that the leader's ballot is stale (HoliPaxos §2,
                // Fig. 2: "E still answers the heartbeat from Leader B", so E never starts
                // an election). The stale leader learns of the higher ballot only when an
                // Accept of its own is rejected.
                self.reset_election_timer(ctx);
                self.heard_leader(ctx.now, from);
            }
            return false;
        }
        if ballot > self.promised {
            self.promised = ballot;
            self.promised_other = self.promised_other.max(ballot);
            self.persist(ctx, &[Record::Promise(ballot)]);
        }
        if self.role != Role::Follower || self.leader != Some(from) {
            self.step_down(ctx, Some(from));
        }
        self.reset_election_timer(ctx);
        self.heard_leader(ctx.now, from);
        true
    }

    fn on_heartbeat(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, commit_upto: u64) {
        if !self.follow(ctx, from, ballot) {
            return;
        }
        self.learn_commit(ctx, from, ballot, commit_upto);
        self.persist_commit_marker(ctx);
    }

    /// A layer message: the layer decodes it and tells the core what to do with it.
    fn on_layer_msg(&mut self, ctx: &mut Ctx<'_>, from: NodeId, msg: Bytes) {
        match self.with_layer_hook(|l, core| l.on_message(core, ctx, from, &msg)) {
            LayerMsg::Handled => {}
            LayerMsg::Beat { ballot, commit_upto, trim_bound } => {
                self.on_layer_beat(ctx, from, ballot, commit_upto, trim_bound)
            }
            LayerMsg::Trim(bound) => {
                if let Some(bound) = bound {
                    self.gle = self.gle.max(bound);
                }
                self.trim_log();
            }
        }
    }

    /// The layer's replacement for the heartbeat (HoliPaxos's control message): follow,
    /// commit up to `commit_upto`, trim up to `trim_bound`, make the commit marker durable,
    /// then let the layer answer (HoliPaxos reports our LE, durable first, so a restart
    /// never executes less than what GLE was computed from).
    fn on_layer_beat(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, commit_upto: u64, trim_bound: u64) {
        if !self.follow(ctx, from, ballot) {
            return;
        }
        self.learn_commit(ctx, from, ballot, commit_upto);
        self.gle = self.gle.max(trim_bound);
        self.trim_log();
        self.persist_commit_marker(ctx);
        self.with_layer_hook(|l, core| l.after_beat(core, ctx, from, ballot));
    }

    /// The leader (in `ballot`) says everything up to `commit_upto` is chosen. Slots we
    /// accepted in that ballot hold the leader's value and are committed; anything else is
    /// fetched.
    fn learn_commit(&mut self, ctx: &mut Ctx<'_>, leader: NodeId, ballot: Ballot, commit_upto: u64) {
        self.leader_commit = self.leader_commit.max(commit_upto);
        let mut slot = self.log.committed_prefix() + 1;
        while slot <= commit_upto {
            match self.log.get(slot) {
                Some(s) if s.state == SlotState::InProgress && s.value.ballot == ballot => {
                    self.log.mark_committed(slot);
                }
                Some(s) if s.state != SlotState::InProgress => {}
                _ => break,
            }
            slot += 1;
        }
        self.execute(ctx);
        self.request_catchup(ctx, leader);
    }

    fn request_catchup(&mut self, ctx: &mut Ctx<'_>, leader: NodeId) {
        let have = self.log.committed_prefix();
        if have >= self.leader_commit || ctx.now < self.catchup_pending_until || self.fetch.is_some() {
            return;
        }
        let to = self.leader_commit.min(have + self.params.catchup_chunk as u64);
        self.catchup_pending_until = ctx.now + self.params.heartbeat() * 2;
        ctx.send(leader, &Msg::CatchupReq { from: have + 1, to });
    }

    fn on_catchup_req(&mut self, ctx: &mut Ctx<'_>, from_node: NodeId, from: u64, to: u64) {
        if from < self.log.first_index() {
            // Trimmed here: only a snapshot can bring the requester past this point. Point
            // it to a peer the layer knows to be further (HoliPaxos: the most advanced other
            // follower of the leader's LE reports), or to this replica.
            let first = self.log.first_index();
            let source = self.layer.snapshot_source(self, from_node, first);
            ctx.send(from_node, &Msg::Trimmed { first, source: source.or(Some(self.id)) });
            return;
        }
        let to = to.min(from.saturating_add(self.params.catchup_chunk as u64 - 1));
        let entries: Vec<(u64, Value)> = self
            .log
            .range(from, to)
            .filter(|(_, s)| s.state != SlotState::InProgress)
            .map(|(slot, s)| (slot, s.value.value.clone()))
            .collect();
        if !entries.is_empty() {
            ctx.send(
                from_node,
                &Msg::CatchupResp { ballot: self.promised, entries, commit_upto: self.log.committed_prefix() },
            );
        }
    }

    fn on_catchup_resp(&mut self, ctx: &mut Ctx<'_>, from: NodeId, entries: Vec<(u64, Value)>, commit_upto: u64) {
        let before = self.log.committed_prefix();
        let mut records = Vec::new();
        for (slot, value) in entries {
            if self.log.is_committed(slot) {
                continue;
            }
            // Chosen values: the ballot they are filed under no longer matters.
            self.log.set(slot, Entry { ballot: Ballot::ZERO, value: value.clone() }, SlotState::Committed);
            records.push(Record::Chosen { slot, value });
        }
        if !records.is_empty() {
            self.persist(ctx, &records);
        }
        self.leader_commit = self.leader_commit.max(commit_upto);
        // Ask for the next chunk at once only if this one moved the committed prefix: a
        // response that filled nothing below a gap (e.g. the responder lacks the slot too)
        // waits for the pending timeout instead of ping-ponging at one instant.
        if self.log.committed_prefix() > before {
            self.catchup_pending_until = Time::ZERO;
        }
        self.execute(ctx);
        if self.role == Role::Follower {
            self.request_catchup(ctx, from);
        }
    }

    fn on_trimmed(&mut self, ctx: &mut Ctx<'_>, first: u64, source: Option<NodeId>) {
        if first > self.log.committed_prefix() + 1 && self.role == Role::Follower {
            self.request_snapshot(ctx, source.filter(|s| *s != self.id));
        }
    }

    fn persist_commit_marker(&mut self, ctx: &mut Ctx<'_>) {
        let c = self.log.committed_prefix();
        if c > self.persisted_commit {
            self.persisted_commit = c;
            self.persist(ctx, &[Record::CommitUpto(c)]);
        }
    }

    // ---------------------------------------------------------------------------------------
    // Execution in slot order
    // ---------------------------------------------------------------------------------------

    fn execute(&mut self, ctx: &mut Ctx<'_>) {
        let mut markers = Vec::new();
        let mut config = None;
        while let Some((slot, entry)) = self.log.next_to_execute() {
            let clients = self.waiting.remove(&slot).unwrap_or_default();
            match &entry.value {
                Value::Cmds(batch) => {
                    for (i, cmd) in batch.iter().enumerate() {
                        let reply = Waiter::matching(clients.get(i), cmd);
                        ctx.apply(Pos::slot(slot, i as u32), cmd.clone(), reply);
                    }
                    self.cmds_executed += batch.len() as u64;
                }
                Value::Layer(e) => markers.push((slot, e.clone())),
                Value::Config(m) => config = Some((slot, m.clone())),
            }
            self.log.advance_exec();
            // Layer entries act in order with the commands around them.
            for (slot, e) in markers.drain(..) {
                self.with_layer_hook(|l, core| l.on_executed(core, ctx, slot, &e));
            }
            if let Some((slot, m)) = config.take() {
                self.apply_config(ctx, slot, m);
            }
        }
        self.maybe_snapshot(ctx);
    }

    // ---------------------------------------------------------------------------------------
    // Membership (HoliPaxos §3.3's fix for an extended failure: remove the failed node, add a
    // replacement). Single-server changes through the log; see docs/design.md, "Membership".
    // ---------------------------------------------------------------------------------------

    /// An admin asks for a change. Only the leader proposes it, one at a time: a membership
    /// entry in slot `s` takes effect when `s` is executed and governs every slot after it,
    /// so the leader proposes nothing after `s` until then.
    fn on_reconfigure(&mut self, ctx: &mut Ctx<'_>, client: ClientRef, id: u64, change: MemberChange) {
        let me = self.id;
        let answer = |ctx: &mut Ctx<'_>, body| ctx.reply(client, Reply { client: 0, seq: id, from: me, body });
        if self.role == Role::Candidate && self.leader == Some(self.id) {
            let reason = "the leader is re-running phase 1 under a new configuration; retry".to_string();
            return answer(ctx, ReplyBody::Rejected { reason });
        }
        if self.role != Role::Leader {
            return answer(ctx, ReplyBody::NotLeader { leader: self.leader.filter(|l| *l != self.id) });
        }
        if let Some(slot) = self.config_pending {
            let reason = format!("the membership change in slot {slot} is not committed yet; retry when it is");
            return answer(ctx, ReplyBody::Rejected { reason });
        }
        let mut members = self.member_infos();
        match change {
            // A change already in effect is answered at once, so a client may retry freely.
            MemberChange::Add { id: node, .. } if self.members.contains(&node) => {
                return answer(ctx, ReplyBody::Done(synod_core::OpResult::Done));
            }
            MemberChange::Add { addr, .. } if addr.is_empty() => {
                let reason = "adding a member needs its peer address".to_string();
                return answer(ctx, ReplyBody::Invalid { reason });
            }
            MemberChange::Add { id: node, addr } => members.push(MemberInfo { id: node, addr }),
            MemberChange::Remove { id: node } if !self.members.contains(&node) => {
                return answer(ctx, ReplyBody::Done(synod_core::OpResult::Done));
            }
            MemberChange::Remove { .. } if self.members.len() == 1 => {
                let reason = "cannot remove the last member".to_string();
                return answer(ctx, ReplyBody::Invalid { reason });
            }
            MemberChange::Remove { id: node } => members.retain(|m| m.id != node),
        }
        members.sort();
        let slot = self.next_slot;
        // Set before proposing: a single-member cluster commits (and executes) at once.
        self.config_pending = Some(slot);
        self.config_waiter = Some((slot, client, id));
        self.propose(ctx, vec![(Value::Config(members), Vec::new())]);
    }

    /// The membership entry of `slot` was executed here: the configuration changes at the
    /// same log position on every replica.
    fn apply_config(&mut self, ctx: &mut Ctx<'_>, slot: u64, members: Vec<MemberInfo>) {
        let changed = self.set_members(ctx, members);
        if self.config_pending == Some(slot) {
            self.config_pending = None;
        }
        if let Some((_, client, id)) = self.config_waiter.filter(|w| w.0 == slot) {
            self.config_waiter = None;
            let body = ReplyBody::Done(synod_core::OpResult::Done);
            ctx.reply(client, Reply { client: 0, seq: id, from: self.id, body });
        }
        if !self.is_member() {
            // Removed: a leader steps down (its clients are redirected), and nobody here
            // campaigns any more.
            if self.role != Role::Follower {
                self.step_down(ctx, None);
            }
            return;
        }
        match self.role {
            // Always, even when the entry changed nothing (a re-proposed duplicate): the
            // leader may have set aside values its phase 1 found after this slot
            // (`become_leader`), and only a phase 1 from here on learns them again.
            Role::Leader => self.phase1(ctx, false),
            // Its election counts promises with the old quorum: start over later.
            Role::Candidate if changed => self.step_down(ctx, None),
            _ => {}
        }
    }

    /// Operations received from clients and not yet executed (HoliPaxos Algorithm 1's
    /// in-flight count): queued here, proposed and not executed, and held by the driver.
    pub(crate) fn inflight_ops(&self, ctx: &Ctx<'_>) -> u64 {
        let proposed: usize = self.in_flight.values().map(|f| f.cmds).sum();
        (self.queue.len() + proposed) as u64 + ctx.load.queued_requests
    }

    // ---------------------------------------------------------------------------------------
    // Log trimming, on-demand snapshots (HoliPaxos §3.3), durable compaction
    // ---------------------------------------------------------------------------------------

    /// Trim the in-memory log up to the layer's cluster bound (HoliPaxos: GLE /
    /// quorum-executed), never past what this replica executed nor past a snapshot being
    /// taken for compaction.
    fn trim_log(&mut self) {
        if !matches!(self.trim, TrimPolicy::Bound(_)) {
            return;
        }
        let floor = match self.snapshot_pending {
            Some((_, index, true)) => index,
            _ => u64::MAX,
        };
        let upto = self.gle.min(self.log.executed_upto()).min(floor);
        self.trim_to = self.trim_to.max(upto + 1);
    }

    /// Free the next [`TRIM_STEP`] trimmable slots. GLE jumps by a whole partition's worth
    /// of log when a silent node reports again (330k slots in a Fig. 9d run, whose replicas
    /// all logged 60-140 ms "message" events right after the heal): freeing them in one
    /// event would hold the node loop that long.
    fn trim_step(&mut self) {
        let first = self.log.first_index();
        if first < self.trim_to {
            self.log.trim_before(self.trim_to.min(first + TRIM_STEP));
        }
    }

    /// Ask the driver for a snapshot (for compaction and/or a peer).
    fn take_snapshot(&mut self, ctx: &mut Ctx<'_>, compact: bool) {
        if let Some(p) = self.snapshot_pending.as_mut() {
            p.2 |= compact;
            return;
        }
        let token = self.next_token;
        self.next_token += 1;
        self.snapshot_pending = Some((token, self.log.executed_upto(), compact));
        self.pending_members = self.member_infos();
        ctx.push(Action::TakeSnapshot { token });
    }

    fn maybe_snapshot(&mut self, ctx: &mut Ctx<'_>) {
        let executed = self.log.executed_upto();
        let due = match self.trim {
            TrimPolicy::Snapshot => self.policy.due(self.durable_base, executed),
            _ => self.compact_every > 0 && executed >= self.durable_base + self.compact_every,
        };
        if due && self.snapshot_pending.is_none() {
            self.take_snapshot(ctx, true);
        }
    }

    fn on_snapshot_taken(&mut self, ctx: &mut Ctx<'_>, token: u64, data: Bytes) {
        let Some((t, index, compact)) = self.snapshot_pending else { return };
        if t != token {
            return;
        }
        self.snapshot_pending = None;
        self.snapshot = Some(LocalSnapshot { index, data, members: std::mem::take(&mut self.pending_members) });
        for to in std::mem::take(&mut self.snapshot_waiters) {
            self.send_snapshot_chunk(ctx, to, 0);
        }
        if compact && index > self.durable_base {
            if self.trim == TrimPolicy::Snapshot {
                // Freed TRIM_STEP slots per event like the other modes (`trim_step`).
                self.trim_to = self.trim_to.max(self.policy.trim_point(index));
            }
            // In the background: the image is what is durable already plus a snapshot of
            // executed slots, which a crash may lose without harm.
            self.rewrite_durable(ctx, true);
        }
    }

    /// Replace the durable records by: promise, snapshot, every held slot after it, commit
    /// marker. Atomic in both drivers; in the background (`CompactDurable`) for our own
    /// snapshots, synchronously for an installed one.
    fn rewrite_durable(&mut self, ctx: &mut Ctx<'_>, background: bool) {
        let Some(s) = &self.snapshot else { return };
        let mut records = vec![
            Record::Promise(self.promised_other),
            Record::Promise(self.promised),
            Record::Led(self.led),
            Record::Snapshot { index: s.index, data: s.data.clone() },
            Record::Members(s.members.clone()),
        ];
        for (slot, e) in self.log.range(s.index + 1, self.log.last_index()) {
            records.push(match e.state {
                SlotState::InProgress => Record::Accept { slot, ballot: e.value.ballot, value: e.value.value.clone() },
                _ => Record::Chosen { slot, value: e.value.value.clone() },
            });
        }
        let c = self.log.committed_prefix();
        records.push(Record::CommitUpto(c));
        self.persisted_commit = c;
        self.durable_base = s.index;
        // The snapshot's bytes go to the driver as they are, behind their encoded header.
        let records = records
            .iter()
            .map(|r| match r {
                Record::Snapshot { index, data } => {
                    encode_with_payload(&Record::Snapshot { index: *index, data: Bytes::new() }, data.clone())
                }
                r => vec![encode(r)],
            })
            .collect();
        ctx.push(compaction(0, records, background));
    }

    /// §3.3: fetch an on-demand snapshot, preferably from a peer that is not the leader.
    fn request_snapshot(&mut self, ctx: &mut Ctx<'_>, preferred: Option<NodeId>) {
        if self.fetch.is_some() {
            return;
        }
        let from = preferred.unwrap_or_else(|| self.snapshot_source(0));
        self.fetch = Some(Fetch { from, progress_at: ctx.now, tries: 0 });
        ctx.send(from, &Msg::SnapshotReq { index: 0, offset: 0 });
        ctx.set_timer(TIMER_SNAPSHOT, self.params.heartbeat() * 4);
    }

    /// The `k`-th candidate snapshot source: the peers that are not the leader first.
    fn snapshot_source(&self, k: u32) -> NodeId {
        let mut peers: Vec<NodeId> = self.members.iter().copied().filter(|m| *m != self.id).collect();
        peers.sort_by_key(|p| (Some(*p) == self.leader, *p));
        if peers.is_empty() {
            return self.id;
        }
        peers[k as usize % peers.len()]
    }

    fn on_snapshot_timer(&mut self, ctx: &mut Ctx<'_>) {
        let stalled = self.params.heartbeat() * 4;
        let Some(f) = self.fetch.as_mut() else { return };
        if ctx.now.since(f.progress_at) >= stalled {
            // No progress: start over with the next source.
            f.tries += 1;
            f.progress_at = ctx.now;
            let tries = f.tries;
            let from = self.snapshot_source(tries);
            if let Some(f) = self.fetch.as_mut() {
                f.from = from;
            }
            ctx.send(from, &Msg::SnapshotReq { index: 0, offset: 0 });
        }
        ctx.set_timer(TIMER_SNAPSHOT, stalled);
    }

    fn on_snapshot_req(&mut self, ctx: &mut Ctx<'_>, from: NodeId, index: u64, offset: u64) {
        match &self.snapshot {
            Some(s) if offset > 0 && s.index == index => self.send_snapshot_chunk(ctx, from, offset),
            // A fresh transfer: our cached snapshot is good if it is current.
            Some(s) if s.index == self.log.executed_upto() => self.send_snapshot_chunk(ctx, from, 0),
            _ => {
                self.snapshot_waiters.insert(from);
                self.take_snapshot(ctx, false);
            }
        }
    }

    fn send_snapshot_chunk(&self, ctx: &mut Ctx<'_>, to: NodeId, offset: u64) {
        let Some(s) = &self.snapshot else { return };
        let data = chunk(&s.data, offset, self.params.snapshot_chunk_bytes).to_vec();
        let members = s.members.clone();
        ctx.send(to, &Msg::SnapshotChunk { index: s.index, offset, total: s.data.len() as u64, data, members });
    }

    #[allow(clippy::too_many_arguments)] // the fields of Msg::SnapshotChunk
    fn on_snapshot_chunk(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: NodeId,
        index: u64,
        offset: u64,
        total: u64,
        data: Vec<u8>,
        members: Vec<MemberInfo>,
    ) {
        let Some(f) = self.fetch.as_mut() else { return };
        if f.from != from || self.role == Role::Leader {
            return;
        }
        f.progress_at = ctx.now;
        if index <= self.log.executed_upto() {
            // This source is no further than we are: try the next one, and give up after
            // asking everyone (the next Trimmed answer starts over).
            f.tries += 1;
            let tries = f.tries;
            if tries as usize >= self.members.len() {
                self.fetch = None;
                ctx.cancel_timer(TIMER_SNAPSHOT);
                return;
            }
            let next = self.snapshot_source(tries);
            if let Some(f) = self.fetch.as_mut() {
                f.from = next;
            }
            ctx.send(next, &Msg::SnapshotReq { index: 0, offset: 0 });
            return;
        }
        let Some(full) = self.incoming.offer(index, offset, total, &data) else {
            let received = self.incoming.received(index);
            ctx.send(from, &Msg::SnapshotReq { index, offset: received });
            return;
        };
        self.fetch = None;
        ctx.cancel_timer(TIMER_SNAPSHOT);
        self.install_snapshot(ctx, index, Bytes::from(full), members);
    }

    /// Jump to a peer's snapshot covering every slot up to `index`.
    fn install_snapshot(&mut self, ctx: &mut Ctx<'_>, index: u64, data: Bytes, members: Vec<MemberInfo>) {
        if index <= self.log.executed_upto() || !synod_core::session::StateMachine::is_valid_snapshot(&data) {
            return;
        }
        ctx.push(Action::InstallSnapshot { data: data.clone() });
        // Only followers fetch snapshots: no leader-side membership state to update.
        self.set_members(ctx, members.clone());
        self.log.skip_to(index + 1);
        self.waiting.retain(|slot, _| *slot > index);
        self.snapshot = Some(LocalSnapshot { index, data, members });
        self.snapshots_installed += 1;
        self.leader_commit = self.leader_commit.max(index);
        self.rewrite_durable(ctx, false);
        self.execute(ctx);
        if let Some(l) = self.leader.filter(|l| *l != self.id) {
            self.request_catchup(ctx, l);
        }
    }
}

impl Protocol for MultiPaxos {
    fn recover(&mut self, ctx: &mut Ctx<'_>, records: Vec<Bytes>) {
        let mut commit_upto = 0;
        for r in records.iter() {
            match decode::<Record>(r) {
                Ok(Record::Promise(b)) => {
                    self.promised = self.promised.max(b);
                    if b.node != self.id {
                        self.promised_other = self.promised_other.max(b);
                    }
                }
                Ok(Record::Accept { slot, ballot, value }) => {
                    self.promised = self.promised.max(ballot);
                    if ballot.node != self.id {
                        self.promised_other = self.promised_other.max(ballot);
                    }
                    if !self.log.is_committed(slot) {
                        self.log.set(slot, Entry { ballot, value }, SlotState::InProgress);
                    }
                }
                Ok(Record::Chosen { slot, value }) => {
                    self.log.set(slot, Entry { ballot: Ballot::ZERO, value }, SlotState::Committed);
                }
                Ok(Record::CommitUpto(c)) => commit_upto = commit_upto.max(c),
                Ok(Record::Led(b)) => self.led = self.led.max(b),
                Ok(Record::Members(members)) => {
                    self.set_members(ctx, members.clone());
                    if let Some(s) = self.snapshot.as_mut() {
                        s.members = members;
                    }
                }
                Ok(Record::Snapshot { index, data }) => {
                    ctx.push(Action::InstallSnapshot { data: data.clone() });
                    self.log.skip_to(index + 1);
                    let members = self.member_infos();
                    self.snapshot = Some(LocalSnapshot { index, data, members });
                    self.durable_base = index;
                    commit_upto = commit_upto.max(index);
                }
                // Records are written by this code and checksummed by the WAL, so an
                // undecodable one means a format change or a bug. Skipping it could forget a
                // promise: stay passive instead, and say so in the status.
                Err(e) => {
                    self.broken = Some(format!("undecodable durable record: {e}"));
                    return;
                }
            }
        }
        for slot in self.log.first_index()..=commit_upto.min(self.log.last_index()) {
            self.log.mark_committed(slot);
        }
        self.persisted_commit = commit_upto;
        self.leader_commit = commit_upto;
        self.execute(ctx);
        if self.n() == 1 && self.is_member() {
            self.start_election(ctx);
        } else {
            self.reset_election_timer(ctx);
        }
    }

    fn on_event(&mut self, ctx: &mut Ctx<'_>, event: Event) {
        if self.broken.is_some() {
            let reason = "replica is passive: its durable state is unreadable".to_string();
            match event {
                Event::Request { client, cmd } => ctx.answer(client, &cmd, ReplyBody::Rejected { reason }),
                Event::Reconfigure { client, id, .. } => {
                    ctx.reply(client, Reply { client: 0, seq: id, from: self.id, body: ReplyBody::Rejected { reason } })
                }
                _ => {}
            }
            return;
        }
        match event {
            Event::Message { from, msg, .. } => {
                let Ok(msg) = decode::<Msg>(&msg) else { return };
                // Messages from non-members are not dropped wholesale: a joining replica
                // fetches the log and snapshots before every replica executed its addition.
                // Votes are filtered where they are counted (on_prepare, on_promise,
                // on_accepted, on_nack, LE reports go through the current members).
                if from == self.id {
                    return;
                }
                match msg {
                    Msg::Prepare { ballot, from_slot } => self.on_prepare(ctx, from, ballot, from_slot),
                    Msg::Promise { ballot, accepted, trimmed } => self.on_promise(ctx, from, ballot, accepted, trimmed),
                    Msg::Accept { ballot, slot, value, commit_upto } => {
                        self.on_accept(ctx, from, ballot, slot, value, commit_upto)
                    }
                    Msg::Accepted { ballot, slot } => self.on_accepted(ctx, from, ballot, slot),
                    Msg::Nack { ballot, promised } => self.on_nack(ctx, from, ballot, promised),
                    Msg::Behind { ballot, committed } => self.on_behind(ctx, from, ballot, committed),
                    Msg::Heartbeat { ballot, commit_upto } => self.on_heartbeat(ctx, from, ballot, commit_upto),
                    Msg::CatchupReq { from: lo, to } => self.on_catchup_req(ctx, from, lo, to),
                    Msg::CatchupResp { entries, commit_upto, .. } => {
                        self.on_catchup_resp(ctx, from, entries, commit_upto)
                    }
                    Msg::Trimmed { first, source } => self.on_trimmed(ctx, first, source),
                    Msg::SnapshotReq { index, offset } => self.on_snapshot_req(ctx, from, index, offset),
                    Msg::SnapshotChunk { index, offset, total, data, members } => {
                        self.on_snapshot_chunk(ctx, from, index, offset, total, data, members)
                    }
                    Msg::Layer(msg) => self.on_layer_msg(ctx, from, msg),
                }
            }
            Event::Request { client, cmd } => self.on_request(ctx, client, cmd),
            Event::Reconfigure { client, id, change } => self.on_reconfigure(ctx, client, id, change),
            Event::Timer(TIMER_ELECTION) => self.on_election_timer(ctx),
            Event::Timer(TIMER_HEARTBEAT) => self.on_heartbeat_timer(ctx),
            Event::Timer(TIMER_SNAPSHOT) => self.on_snapshot_timer(ctx),
            Event::Timer(timer) => {
                if let Some(op) = self.with_layer_hook(|l, core| l.on_timer(core, ctx, timer)) {
                    self.run_layer_op(ctx, op);
                }
            }
            Event::SnapshotTaken { token, data } => self.on_snapshot_taken(ctx, token, data),
            Event::Persisted { .. } => {}
        }
        self.trim_step();
    }

    fn status(&self) -> Status {
        let mut extra = BTreeMap::new();
        extra.insert("next_slot".into(), self.next_slot.to_string());
        extra.insert("in_flight".into(), self.in_flight.len().to_string());
        extra.insert("queued".into(), self.queue.len().to_string());
        extra.insert("log_len".into(), self.log.len().to_string());
        extra.insert("log_last".into(), self.log.last_index().to_string());
        extra.insert("log_capacity".into(), self.log.capacity().to_string());
        let members: Vec<String> = self.members.iter().map(|m| m.to_string()).collect();
        extra.insert("members".into(), members.join(","));
        if let Some(s) = self.config_pending {
            extra.insert("config_pending".into(), s.to_string());
        }
        if self.trim != TrimPolicy::None || self.snapshot.is_some() {
            extra.insert("trim".into(), self.trim.name().to_string());
            extra.insert("log_first".into(), self.log.first_index().to_string());
            extra.insert("gle".into(), self.gle.to_string());
            extra.insert("snapshots_installed".into(), self.snapshots_installed.to_string());
        }
        if let Some(s) = &self.snapshot {
            extra.insert("snapshot_index".into(), s.index.to_string());
            extra.insert("snapshot_bytes".into(), s.data.len().to_string());
        }
        self.layer.status(self, &mut extra);
        if let Some(e) = &self.broken {
            extra.insert("error".into(), e.clone());
        }
        Status {
            id: self.id,
            protocol: self.name.into(),
            role: self.role,
            ballot: self.promised.to_string(),
            leader: self.leader,
            commit_index: self.log.committed_prefix(),
            execute_index: self.log.executed_upto(),
            extra,
        }
    }

    fn describe_message(&self, msg: &[u8]) -> String {
        match decode::<Msg>(msg) {
            Ok(Msg::Accept { ballot, slot, value: Value::Cmds(b), commit_upto }) => {
                format!("Accept b={ballot} slot={slot} cmds={} commit={commit_upto}", b.len())
            }
            Ok(Msg::Promise { ballot, accepted, trimmed }) => {
                format!("Promise b={ballot} accepted={} trimmed={trimmed}", accepted.len())
            }
            Ok(Msg::CatchupResp { entries, commit_upto, .. }) => {
                format!("CatchupResp entries={} commit={commit_upto}", entries.len())
            }
            Ok(Msg::SnapshotChunk { index, offset, total, .. }) => {
                format!("SnapshotChunk index={index} {offset}/{total}")
            }
            Ok(Msg::Layer(msg)) => self.layer.describe_message(&msg),
            Ok(Msg::Accept { ballot, slot, value: Value::Layer(entry), commit_upto }) => {
                let value = self.layer.describe_value(&entry);
                format!("Accept {{ ballot: {ballot:?}, slot: {slot}, value: {value}, commit_upto: {commit_upto} }}")
            }
            Ok(m) => format!("{m:?}"),
            Err(e) => format!("<undecodable: {e}>"),
        }
    }
}

/// Deliberately broken variants for the mutation tests (feature `mutants`).
#[cfg(feature = "mutants")]
pub(crate) mod mutants {
    use super::*;

    /// Commits with `n/2` replies: two leaders can both commit different values.
    pub fn build_bad_quorum(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
        let q = (setup.members.len() / 2).max(1);
        Ok(Box::new(MultiPaxos::new(setup, Variant { quorum_override: Some(q), ..Variant::default() })?))
    }

    /// Followers execute what they accept before it is chosen.
    pub fn build_early_exec(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
        Ok(Box::new(MultiPaxos::new(setup, Variant { execute_on_accept: true, ..Variant::default() })?))
    }

    /// Followers acknowledge Accepts without persisting them.
    pub fn build_volatile_accepts(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
        Ok(Box::new(MultiPaxos::new(setup, Variant { volatile_accepts: true, ..Variant::default() })?))
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod membership_tests;
