//! MultiPaxos (Lamport, "Paxos Made Simple" §3; the stable-leader variant every paper here
//! uses as its baseline), the core that layers (`crate::layers`, e.g. HoliPaxos) build on.
//!
//! Reading order, top-down (one file per phase):
//! 1. **Leader election** (`phase1.rs`) — a follower whose election timer expires runs
//!    phase 1 once for all future slots (`Prepare` from its committed prefix on); a quorum of
//!    `Promise`s makes it leader. It re-proposes, under its own ballot, the highest-ballot
//!    value each slot was accepted with, and fills holes with no-ops.
//! 2. **Normal operation** (`phase2.rs`) — the leader batches client requests (the requests
//!    of one driver turn, `Protocol::flush`, and whatever queued while the pipeline window
//!    was full), assigns the next slot and
//!    runs phase 2 (`Accept` / `Accepted`) with many slots in flight. A slot is chosen when a
//!    majority accepted it.
//! 3. **Commit notification and execution** (`commit.rs`) — the leader's committed prefix
//!    rides on every `Accept` and on periodic `Heartbeat`s; followers mark a slot committed
//!    only if they accepted it in the leader's ballot (so they hold exactly the leader's
//!    value); chosen slots are executed in slot order.
//! 4. **Catch-up** (`catchup.rs`) — anything else is fetched with `CatchupReq` (hole
//!    filling for lagging or restarted followers); committed slots held only in part (an
//!    erasure-coded piece) are completed from peers (`fill.rs`).
//! 5. **Membership** (`membership.rs`) — single-server changes through the log.
//! 6. **Trimming and snapshots** (`snapshot.rs`) — periodic or layer-bounded log trimming,
//!    durable compaction, on-demand snapshot transfer.
//! 7. **Read leases** (`lease.rs`, option `read_lease=on`) — a leader holding a lease
//!    granted by enough acceptors answers reads from its state machine, without a log slot.
//! 8. **Durability** (here, `recover`) — promises and accepted values are persisted before
//!    the messages that depend on them leave (the driver contract in
//!    `synod_core::protocol`); on restart the records are replayed and the committed prefix
//!    is re-executed.
//!
//! The layer on top (`layer.rs`; [`NoLayer`] for plain MultiPaxos) is called at the
//! extension points each file names; it never changes phase 1, phase 2 or the quorums.
//! The payload codec (`crate::layers::codec`; [`FullCopy`] for plain MultiPaxos) decides
//! what a value becomes on its way to each acceptor, how many acceptances commit it, how
//! many promises elect a leader and how phase 1 rebuilds a value from the pieces reported:
//! Crossword and RSPaxos are MultiPaxos with an erasure-coding codec.
//!
//! Reads go through the log unless `read_lease=on` (`lease.rs`); either way every operation
//! is linearizable.

mod catchup;
mod commit;
mod fill;
mod layer;
mod lease;
mod membership;
mod msg;
mod phase1;
mod phase2;
mod snapshot;

pub use msg::{AcceptedSlot, Batch, Coded, Msg, Record, Value};

use crate::layers::codec::{FullCopy, PayloadCodec, Pieces, Recovered};
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
pub(crate) const ACCEPT_AHEAD_CHUNKS: u64 = 256;
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
    /// A leader answers lease reads whether or not its lease is still valid (unsafe: a
    /// deposed leader that does not know it yet serves stale reads).
    pub lease_reads_unchecked: bool,
}

/// One log slot: the value and the ballot it was accepted in.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) ballot: Ballot,
    pub(crate) value: Value,
    /// A vote of a fast round (`crate::fastpaxos`): taken by this acceptor from a client in
    /// the leader's `ballot` without a 2a for this value, so other acceptors may hold other
    /// values at the same ballot. Never committed by the leader's commit marker alone.
    pub(crate) fast: bool,
}

/// Leader-side bookkeeping for a slot in flight.
pub(crate) struct InFlight {
    acks: QuorumTracker,
    sent_at: Time,
    /// When the slot was proposed in this ballot (`sent_at` moves with resends).
    proposed_at: Time,
    /// Client commands in the slot (the slowdown detector counts operations in flight).
    cmds: usize,
}

/// Candidate-side bookkeeping for phase 1.
struct Election {
    promises: QuorumTracker,
    /// What the promises reported for each slot (the codec decides from all of them:
    /// erasure-coded pieces are pooled).
    found: BTreeMap<u64, Vec<AcceptedSlot>>,
    from_slot: u64,
}

/// Completing committed slots held only in part (`fill.rs`).
#[derive(Default)]
struct Filling {
    /// No new fetch cycle before this time.
    next_at: Time,
    /// The first incomplete slot of the last cycle and how many cycles it stayed so.
    stuck: (u64, u32),
    /// Peers with a request unanswered: since when (the first unanswered one) and when it
    /// was last sent.
    asked: BTreeMap<NodeId, (Time, Time)>,
    /// The last log index seen and when it last grew (the deferral gap is waived once the
    /// log stops growing).
    last: (u64, Time),
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
    pub(crate) id: NodeId,
    name: &'static str,
    pub(crate) members: Vec<NodeId>,
    pub(crate) params: ProtocolParams,
    variant: Variant,
    /// Majority of the current `members` (the configuration after the executed prefix).
    pub(crate) quorum: usize,
    /// Promises that elect a leader among the current `members` (the codec's; a majority
    /// unless the codec needs more).
    prepare_quorum: usize,
    /// Peer addresses carried by membership entries (absent = as configured in the driver).
    addrs: BTreeMap<NodeId, String>,
    /// Leader: the slot of the membership entry it proposed (or re-proposed) and has not
    /// executed yet. Nothing is proposed after that slot until it is executed, and no second
    /// change is accepted meanwhile (docs/design.md, "Membership").
    config_pending: Option<u64>,
    /// The admin request waiting for that entry: (slot, client, request id).
    config_waiter: Option<(u64, ClientRef, u64)>,

    pub(crate) role: Role,
    /// Highest ballot promised (durable).
    pub(crate) promised: Ballot,
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
    pub(crate) leader: Option<NodeId>,
    /// When this replica last heard its leader (Accept / heartbeat in the current ballot).
    leader_contact: Option<(NodeId, Time)>,
    /// The last leader whose Accepts this replica took (the "last successful leader" of
    /// HoliPaxos §3.2).
    last_successful_leader: Option<NodeId>,

    pub(crate) log: InstanceLog<Entry>,
    /// Committed prefix last persisted as a `CommitUpto` record.
    persisted_commit: u64,
    /// Highest committed prefix the leader announced.
    leader_commit: u64,
    /// Client commands executed by this replica since it started (throughput).
    cmds_executed: u64,

    // Leader state.
    pub(crate) next_slot: u64,
    pub(crate) in_flight: BTreeMap<u64, InFlight>,
    pub(crate) queue: Batcher,

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
    trim_bound: u64,
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
    /// The payload codec ([`FullCopy`] for plain MultiPaxos).
    pub(crate) codec: Box<dyn PayloadCodec>,
    filling: Filling,
    /// Read leases (`lease.rs`; `None` unless `read_lease=on`).
    leases: Option<lease::Leases>,
    /// Fast rounds (`crate::fastpaxos`): None for every protocol but Fast Paxos.
    pub(crate) fast: Option<Box<crate::fastpaxos::Rounds>>,
}

impl MultiPaxos {
    /// Plain MultiPaxos (no layer), with the deviations of `variant` (mutation tests only).
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
        Self::with_codec(setup, variant, name, layer, Box::new(FullCopy))
    }

    /// MultiPaxos with `layer` on top and `codec` shaping the values sent to acceptors.
    pub(crate) fn with_codec(
        setup: &Setup,
        variant: Variant,
        name: &'static str,
        layer: Box<dyn MultiPaxosLayer>,
        codec: Box<dyn PayloadCodec>,
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
        let options: Vec<&str> =
            layer.options().iter().chain(codec.options()).chain(lease::LEASE_OPTIONS).copied().collect();
        setup.params.check_options(name, &options)?;
        let leases = lease::Leases::from_params(&setup.params)?;
        let compaction = layer.compaction();
        let quorum = variant.quorum_override.unwrap_or_else(|| majority(members.len()));
        let prepare_quorum = variant.quorum_override.unwrap_or_else(|| codec.prepare_quorum(members.len()));
        Ok(MultiPaxos {
            id: setup.id,
            name,
            members,
            params: setup.params.clone(),
            variant,
            quorum,
            prepare_quorum,
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
            trim_bound: 0,
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
            codec,
            filling: Filling::default(),
            leases,
            fast: None,
        })
    }

    /// Persist records (durable before any later message leaves: the driver contract).
    pub(crate) fn persist(&self, ctx: &mut Ctx<'_>, records: &[Record]) {
        ctx.persist(0, records.iter().map(encode).collect());
    }

    /// Persist one record of the layer's durable state (`Record::Layer`): durable before any
    /// later message leaves, replayed through `MultiPaxosLayer::recover_record`, and carried
    /// into compacted images only if `MultiPaxosLayer::durable_records` still lists it.
    pub(crate) fn persist_layer(&self, ctx: &mut Ctx<'_>, record: Bytes) {
        self.persist(ctx, &[Record::Layer(record)]);
    }

    /// Re-arm the election timer at a random timeout in `[min, max]` (seeded RNG).
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

    /// The leader we follow is alive (for `live_leader`, and for the layer).
    fn heard_leader(&mut self, now: Time, from: NodeId) {
        self.leader_contact = Some((from, now));
        self.layer.on_leader_heard();
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
                        let value = self.codec.merge(self.log.get(slot).map(|s| &s.value.value), value);
                        self.log.set(slot, Entry { ballot, value, fast: false }, SlotState::InProgress);
                    }
                }
                Ok(Record::FastAccept { slot, ballot, value }) => {
                    self.promised = self.promised.max(ballot);
                    if ballot.node != self.id {
                        self.promised_other = self.promised_other.max(ballot);
                    }
                    if !self.log.is_committed(slot) {
                        self.log.set(slot, Entry { ballot, value, fast: true }, SlotState::InProgress);
                    }
                }
                Ok(Record::Chosen { slot, value }) => {
                    self.log.set(slot, Entry { ballot: Ballot::ZERO, value, fast: false }, SlotState::Committed);
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
                Ok(Record::Layer(record)) => {
                    if let Err(e) = self.layer.recover_record(&record) {
                        self.broken = Some(format!("undecodable durable layer record: {e}"));
                        return;
                    }
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
        self.lease_restart(ctx.now);
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
                Event::Request { client, cmd, .. } => ctx.answer(client, &cmd, ReplyBody::Rejected { reason }),
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
                    Msg::FillReq { asks } => self.on_fill_req(ctx, from, asks),
                    Msg::Fill { pieces } => self.on_fill(ctx, from, pieces),
                    Msg::LeaseReq { ballot, round } => self.on_lease_req(ctx, from, ballot, round),
                    Msg::LeaseAck { ballot, round } => self.on_lease_ack(from, ballot, round),
                    Msg::FastOpen { ballot, from_slot } => self.on_fast_open(ctx, from, ballot, from_slot),
                    Msg::FastAccepted { ballot, slot, value } => self.on_fast_accepted(ctx, from, ballot, slot, value),
                }
            }
            Event::Request { client, cmd, meta } => self.on_client_request(ctx, client, cmd, meta),
            Event::Reconfigure { client, id, change } => self.on_reconfigure(ctx, client, id, change),
            Event::Timer(TIMER_ELECTION) => self.on_election_timer(ctx),
            Event::Timer(TIMER_HEARTBEAT) => self.on_heartbeat_timer(ctx),
            Event::Timer(TIMER_SNAPSHOT) => self.on_snapshot_timer(ctx),
            Event::Timer(timer) => {
                if let Some(op) = self.call_layer(|l, core| l.on_timer(core, ctx, timer)) {
                    self.run_layer_op(ctx, op);
                }
            }
            Event::SnapshotTaken { token, data } => self.on_snapshot_taken(ctx, token, data),
            Event::Persisted { .. } => {}
        }
        self.propose_layer_ready(ctx);
        self.trim_step();
    }

    /// The end of the driver's turn: the requests queued during it go out together.
    fn flush(&mut self, ctx: &mut Ctx<'_>) {
        self.propose_queued(ctx);
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
            // The key predates layers (HoliPaxos calls the bound GLE); tools read it.
            extra.insert("gle".into(), self.trim_bound.to_string());
            extra.insert("snapshots_installed".into(), self.snapshots_installed.to_string());
        }
        if let Some(s) = &self.snapshot {
            extra.insert("snapshot_index".into(), s.index.to_string());
            extra.insert("snapshot_bytes".into(), s.data.len().to_string());
        }
        self.layer.status(self, &mut extra);
        self.codec.status(&mut extra);
        self.lease_status(&mut extra);
        if let Some(f) = &self.fast {
            f.status(&mut extra);
        }
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
            Ok(Msg::Accept { ballot, slot, value: Value::Coded(c), commit_upto }) => {
                let idx: Vec<u16> = c.shards.iter().map(|(i, _)| *i).collect();
                format!(
                    "Accept b={ballot} slot={slot} coded(origin={} cmds={} len={} c={} shards={idx:?}) commit={commit_upto}",
                    c.origin, c.cmds, c.len, c.c
                )
            }
            Ok(Msg::Fill { pieces }) => format!("Fill slots={:?}", pieces.iter().map(|(s, _)| *s).collect::<Vec<_>>()),
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

    /// With `read_lease=on` forced: the leader answers reads locally without checking that
    /// its lease is still valid.
    pub fn build_lease_unchecked(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
        let mut setup = setup.clone();
        setup.params.options.insert("read_lease".into(), "on".into());
        Ok(Box::new(MultiPaxos::new(&setup, Variant { lease_reads_unchecked: true, ..Variant::default() })?))
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod membership_tests;
