//! Chain Replication (van Renesse, Schneider, "Chain Replication for Supporting High
//! Throughput and Availability", OSDI 2004), with the chain's configuration held by the
//! replicas themselves.
//!
//! The replicas form a chain (§2): `head → … → tail`. Updates enter at the head, which
//! gives each one the next sequence number, persists it and forwards it; each server
//! persists and forwards in turn; the tail applies it (the paper's `Hist_tail` is the
//! replicated state) and acknowledges; acknowledgements flow back up, and each server
//! applies an update once its successor acknowledged it and drops it from its `Sent` list
//! (§3, "Failure of Other Servers": `Sent_i`, the updates forwarded but not yet processed
//! by the tail). The head answers the client when the acknowledgement reaches it (the
//! paper has the tail reply; here the client is connected to the head, and the head's
//! reply is sent only after the tail has applied the update, so it is the same commit
//! point). Queries are answered by the tail (§2) — see `query.rs` for the lease that keeps a
//! deposed tail from answering.
//!
//! The paper's master (§3: "a single master … itself replicated using Paxos") is here the
//! group of all `n` replicas: a configuration `(epoch, chain)` is chosen by a majority of
//! them, one Paxos instance per epoch, built from the shared ballots, quorum tracker and
//! lease grantor (`config.rs`). So configuration changes tolerate `⌊(n−1)/2⌋` failed
//! replicas, and the data tolerates the failure of all chain members but one (every
//! acknowledged update is persisted at every chain member before the tail applies it).
//!
//! The files, in the paper's order:
//! - `update.rs` — §2 and §3 update processing: head, forwarding, `Sent` list, acks, the
//!   tail applying; repair after a configuration change (§3 "Failure of the Head / Tail /
//!   Other Servers": a predecessor re-sends what its new successor lacks; a new tail applies
//!   everything it has); state transfer to a node that rejoins at the tail (§3 "Extending a
//!   Chain": snapshot + suffix); snapshots and compaction.
//! - `query.rs` — §2 query processing at the tail, under a read lease.
//! - `config.rs` — §3 the master: failure detection (timers on `ctx.now` only), removal of
//!   failed nodes, appending recovered ones, and the agreement on each new configuration.
//! - `policy.rs` — the client side: writes to the head, reads to the tail.
//!
//! Every data-path message carries its epoch; a replica ignores messages of any epoch but
//! its own (a newer one makes it ask the sender for the configuration).

mod config;
pub mod msg;
pub mod policy;
mod query;
#[cfg(test)]
mod tests;
mod update;

use crate::registry::Setup;
use bytes::Bytes;
use msg::{Config, Msg, Record};
use std::collections::BTreeMap;
use std::time::Duration;
use synod_core::lease::{Grantor, Holder, LeaseConfig};
use synod_core::protocol::decode;
use synod_core::{
    Action, Ballot, ClientRef, Command, Ctx, Event, NodeId, Pos, Protocol, ProtocolParams, ReplyBody, Role, Status,
    Time, TimerId,
};

const TIMER_TICK: TimerId = 1;
/// Most updates in one `Forward`.
const CHUNK: usize = 256;
/// Most updates forwarded to the successor and not yet held by it (go-back-N window).
const WINDOW: u64 = 4096;
/// Most updates the head keeps in flight (not yet stable); beyond, requests are refused.
const MAX_INFLIGHT: u64 = 16_384;

/// The options `chain` reads.
const OPTIONS: &[&str] = &["lease_ms", "lease_drift_ppm"];

/// Registry constructor.
pub fn build(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
    Ok(Box::new(Chain::new(setup, Variant::default())?))
}

/// Deliberate deviations, used only by the mutation tests.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Variant {
    /// The head applies and answers an update as soon as it has logged it, before the tail
    /// has it (unsafe: the head's failure loses an acknowledged update).
    pub head_answers: bool,
    /// The tail answers queries without checking its lease (unsafe: a deposed tail serves
    /// stale reads).
    pub lease_unchecked: bool,
}

/// A configuration change this replica is driving (config.rs).
struct Proposal {
    ballot: Ballot,
    /// What this replica wants epoch `cfg.epoch + 1` to be.
    want: Config,
    /// Phase 1 answers, and the highest-ballot value accepted among them.
    promises: synod_core::quorum::QuorumTracker,
    best: Option<(Ballot, Config)>,
    /// Phase 2: the value proposed, and who accepted it.
    value: Option<Config>,
    accepts: synod_core::quorum::QuorumTracker,
    refusals: synod_core::quorum::QuorumTracker,
    started: Time,
}

pub struct Chain {
    me: NodeId,
    /// Every replica of the group (the configuration group is all of them).
    members: Vec<NodeId>,
    variant: Variant,
    heartbeat: Duration,
    /// A replica not heard from for this long is suspected.
    fail_after: Duration,
    snapshot_every: u64,

    // --- configuration (config.rs) ---
    cfg: Config,
    installed_at: Time,
    promised: Ballot,
    accepted: Option<(Ballot, Config)>,
    proposal: Option<Proposal>,
    /// Highest ballot round seen in a refusal (the next proposal goes above it).
    seen_round: u64,
    heard: BTreeMap<NodeId, Time>,
    /// Each replica's last `Alive`: its epoch and whom it suspects.
    reports: BTreeMap<NodeId, (u64, Vec<NodeId>)>,
    /// Replicas whose last `Alive` said they accepted a next-epoch value not known chosen.
    pending_reports: std::collections::BTreeSet<NodeId>,
    started: Time,

    // --- lease (query.rs) ---
    lease: LeaseConfig,
    grantor: Grantor,
    holder: Holder,
    lease_epoch: u64,
    /// Grant no lease before this time (a change moving the tail is waiting for it to end).
    hold_grants_until: Time,

    // --- updates (update.rs) ---
    /// Updates after the snapshot, by sequence number.
    log: BTreeMap<u64, Command>,
    /// Highest update held.
    last: u64,
    /// Highest update applied (known processed by the tail). `Sent` = (stable, last].
    stable: u64,
    snap_index: u64,
    snapshot: Option<Bytes>,
    snap_req: Option<(u64, u64)>,
    next_token: u64,
    /// In sync with the predecessor in this epoch (the head always is).
    synced: bool,
    /// Holds every committed update (persisted): false from the moment the node is outside
    /// the chain — it may hold updates no one else has (it was head once) and lack committed
    /// ones — until a predecessor reset it and it holds all the predecessor held then. Only
    /// a trusted node may become head.
    trusted: bool,
    /// Replicas whose last `Alive` said they are not trusted.
    untrusted_reports: std::collections::BTreeSet<NodeId>,
    /// What the predecessor held when it brought us in sync: queries wait for it.
    catchup_to: u64,
    /// The successor asked for updates in this epoch (`Need`).
    succ_synced: bool,
    succ_have: u64,
    sent_upto: u64,
    succ_have_at_tick: u64,
    /// Clients waiting at the head, by sequence number.
    waiters: BTreeMap<u64, ClientRef>,
    stable_persisted: u64,
    /// Every update up to here is durable in this replica's WAL; the tail applies (makes
    /// visible, answers) only those: an update it applied and then lost in a crash could
    /// otherwise be sequenced again, differently, by this node as a later head.
    durable: u64,
    /// Persists of updates not yet reported durable: (token, highest update carried).
    unsynced: std::collections::VecDeque<(u64, u64)>,

    // --- counters ---
    reads: u64,
    repairs: u64,
    transfers: u64,
}

fn int_option(params: &ProtocolParams, name: &str, default: u64) -> Result<u64, String> {
    match params.options.get(name) {
        None => Ok(default),
        Some(v) => v.parse::<u64>().map_err(|_| format!("option {name}: {v:?} is not a non-negative integer")),
    }
}

impl Chain {
    pub(crate) fn new(setup: &Setup, variant: Variant) -> Result<Chain, String> {
        let params = &setup.params;
        params.validate()?;
        params.check_options("chain", OPTIONS)?;
        if setup.members.is_empty() || !setup.members.contains(&setup.id) {
            return Err(format!("chain: replica {} is not among the members {:?}", setup.id, setup.members));
        }
        let lease_ms = int_option(params, "lease_ms", params.election_timeout_min_ms)?;
        if lease_ms == 0 || lease_ms > params.election_timeout_min_ms {
            return Err(format!(
                "option lease_ms: {lease_ms} must be in 1..={} (the minimum election timeout: the failure detector waits at least that long)",
                params.election_timeout_min_ms
            ));
        }
        let drift_ppm = int_option(params, "lease_drift_ppm", 1000)?;
        if drift_ppm >= 100_000 {
            return Err(format!("option lease_drift_ppm: {drift_ppm} is not a plausible clock rate error (< 100000)"));
        }
        let lease =
            LeaseConfig { duration: Duration::from_millis(lease_ms), drift_ppm, guard: Duration::from_millis(1) };
        Ok(Chain {
            me: setup.id,
            members: setup.members.clone(),
            variant,
            heartbeat: params.heartbeat(),
            fail_after: Duration::from_millis(params.election_timeout_min_ms),
            snapshot_every: params.snapshot_every,
            cfg: Config { epoch: 1, chain: setup.members.clone() },
            installed_at: Time::ZERO,
            promised: Ballot::ZERO,
            accepted: None,
            proposal: None,
            seen_round: 0,
            heard: BTreeMap::new(),
            reports: BTreeMap::new(),
            pending_reports: Default::default(),
            started: Time::ZERO,
            lease,
            grantor: Grantor::default(),
            holder: Holder::default(),
            lease_epoch: 0,
            hold_grants_until: Time::ZERO,
            log: BTreeMap::new(),
            last: 0,
            stable: 0,
            snap_index: 0,
            snapshot: None,
            snap_req: None,
            next_token: 1,
            synced: false,
            catchup_to: 0,
            trusted: true,
            untrusted_reports: Default::default(),
            succ_synced: false,
            succ_have: 0,
            sent_upto: 0,
            succ_have_at_tick: 0,
            waiters: BTreeMap::new(),
            stable_persisted: 0,
            durable: 0,
            unsynced: Default::default(),
            reads: 0,
            repairs: 0,
            transfers: 0,
        })
    }

    fn is_head(&self) -> bool {
        self.cfg.head() == Some(self.me)
    }

    fn is_tail(&self) -> bool {
        self.cfg.tail() == Some(self.me)
    }

    fn persist(&mut self, ctx: &mut Ctx<'_>, records: Vec<Record>) {
        if records.is_empty() {
            return;
        }
        let token = self.next_token;
        self.next_token += 1;
        let upto =
            records.iter().filter_map(|r| if let Record::Entry { seq, .. } = r { Some(*seq) } else { None }).max();
        if let Some(upto) = upto {
            self.unsynced.push_back((token, upto));
        }
        ctx.persist(token, records.iter().map(synod_core::protocol::encode).collect());
    }

    /// The driver reports records durable: so are the updates they and every earlier
    /// persist carried (the drivers make persists durable in order).
    fn on_persisted(&mut self, ctx: &mut Ctx<'_>, token: u64) {
        while let Some(&(t, upto)) = self.unsynced.front() {
            if t > token {
                break;
            }
            self.unsynced.pop_front();
            self.durable = self.durable.max(upto.min(self.last));
        }
        if self.is_tail() && self.synced {
            let before = self.stable;
            self.apply_durable(ctx);
            if self.stable > before {
                if let Some(pred) = self.cfg.pred(self.me) {
                    ctx.send(pred, &Msg::Ack { epoch: self.cfg.epoch, stable: self.stable, have: self.last });
                }
            }
        }
    }

    /// Updates after `after` are gone (a repair reset or a snapshot replacing the log):
    /// persists still in flight no longer vouch for what now sits at those positions.
    fn forget_unsynced_after(&mut self, after: u64) {
        self.durable = self.durable.min(after);
        for entry in self.unsynced.iter_mut() {
            entry.1 = entry.1.min(after);
        }
    }

    /// Send `msg` to `to`; a message to this replica itself is handled at once.
    fn send(&mut self, ctx: &mut Ctx<'_>, to: NodeId, msg: Msg) {
        if to == self.me {
            self.on_message(ctx, to, msg);
        } else {
            ctx.send(to, &msg);
        }
    }

    fn on_message(&mut self, ctx: &mut Ctx<'_>, from: NodeId, msg: Msg) {
        match msg {
            Msg::Alive { epoch, suspects, pending, trusted } => {
                self.on_alive(ctx, from, epoch, suspects, pending, trusted)
            }
            Msg::ConfigReq => {
                let cfg = self.cfg.clone();
                ctx.send(from, &Msg::Decided { cfg });
            }
            Msg::Decided { cfg } => self.learn(ctx, cfg),
            Msg::Prepare { ballot, epoch } => self.on_prepare(ctx, from, ballot, epoch),
            Msg::Promise { ballot, epoch, accepted } => self.on_promise(ctx, from, ballot, epoch, accepted),
            Msg::Accept { ballot, cfg } => self.on_accept(ctx, from, ballot, cfg),
            Msg::Accepted { ballot, epoch } => self.on_accepted(ctx, from, ballot, epoch),
            Msg::Nack { ballot, promised } => self.on_nack(from, ballot, promised),
            Msg::Forward { epoch, reset, upto, first, entries } => {
                if self.same_epoch(ctx, from, epoch) {
                    self.on_forward(ctx, from, reset.map(|r| (r, upto)), first, entries);
                }
            }
            Msg::Ack { epoch, stable, have } => {
                if self.same_epoch(ctx, from, epoch) {
                    self.on_ack(ctx, from, stable, have);
                }
            }
            Msg::Need { epoch, stable } => {
                if self.same_epoch(ctx, from, epoch) {
                    self.on_need(ctx, from, stable);
                }
            }
            Msg::Snapshot { epoch, index, upto, data } => {
                if self.same_epoch(ctx, from, epoch) {
                    self.on_snapshot(ctx, from, index, upto, data);
                }
            }
            Msg::LeaseReq { cfg, round } => self.on_lease_req(ctx, from, cfg, round),
            Msg::LeaseAck { epoch, round } => self.on_lease_ack(from, epoch, round),
        }
    }

    /// A data-path message counts only in the receiver's own epoch; a newer one makes it
    /// ask the sender for the configuration, an older one is answered with ours.
    fn same_epoch(&mut self, ctx: &mut Ctx<'_>, from: NodeId, epoch: u64) -> bool {
        if epoch > self.cfg.epoch {
            ctx.send(from, &Msg::ConfigReq);
        } else if epoch < self.cfg.epoch {
            let cfg = self.cfg.clone();
            ctx.send(from, &Msg::Decided { cfg });
        }
        epoch == self.cfg.epoch
    }

    fn on_request(&mut self, ctx: &mut Ctx<'_>, client: ClientRef, cmd: Command) {
        if cmd.op.is_write() {
            self.on_update_request(ctx, client, cmd);
        } else {
            self.on_query(ctx, client, cmd);
        }
    }
}

impl Protocol for Chain {
    fn recover(&mut self, ctx: &mut Ctx<'_>, records: Vec<Bytes>) {
        self.started = ctx.now;
        self.installed_at = ctx.now;
        for bytes in records {
            let Ok(rec) = decode::<Record>(&bytes) else { continue };
            match rec {
                Record::Entry { seq, cmd } => {
                    if seq > self.snap_index {
                        self.log.insert(seq, cmd);
                    }
                }
                Record::Truncate { after } => {
                    self.log.split_off(&(after + 1));
                    self.stable = self.stable.min(after.max(self.snap_index));
                }
                Record::Stable { upto } => self.stable = self.stable.max(upto),
                Record::Config { cfg } => {
                    if cfg.epoch > self.cfg.epoch {
                        self.cfg = cfg;
                    }
                }
                Record::Promised { ballot } => self.promised = self.promised.max(ballot),
                Record::Trusted { trusted } => self.trusted = trusted,
                Record::Accepted { ballot, cfg } => {
                    self.promised = self.promised.max(ballot);
                    self.accepted = Some((ballot, cfg));
                }
                Record::Snapshot { index, data } => {
                    if index >= self.snap_index {
                        self.snap_index = index;
                        self.snapshot = Some(data);
                        self.log = self.log.split_off(&(index + 1));
                        self.stable = self.stable.max(index);
                    }
                }
            }
        }
        self.last = self.log.keys().next_back().copied().unwrap_or(self.snap_index).max(self.snap_index);
        // Updates are contiguous after the snapshot; a hole (a torn tail) ends the log.
        let mut expect = self.snap_index + 1;
        for &seq in self.log.keys() {
            if seq != expect {
                break;
            }
            expect += 1;
        }
        self.log.split_off(&expect);
        self.last = expect - 1;
        self.stable = self.stable.min(self.last).max(self.snap_index);
        // Everything recovered is durable.
        self.durable = self.last;
        if let Some(data) = &self.snapshot {
            ctx.push(Action::InstallSnapshot { data: data.clone() });
        }
        for (&seq, cmd) in self.log.range(self.snap_index + 1..).take_while(|(s, _)| **s <= self.stable) {
            ctx.apply(Pos::slot(seq, 0), cmd.clone(), None);
        }
        self.stable_persisted = self.stable;
        // A restarted replica may have granted a lease it no longer remembers.
        self.grantor = Grantor::after_restart(ctx.now, &self.lease);
        self.synced = self.is_head() && self.trusted;
        ctx.set_timer(TIMER_TICK, self.heartbeat);
    }

    fn on_event(&mut self, ctx: &mut Ctx<'_>, event: Event) {
        match event {
            Event::Message { from, msg, .. } => {
                if from == self.me || !self.members.contains(&from) {
                    return;
                }
                self.heard.insert(from, ctx.now);
                if let Ok(msg) = decode::<Msg>(&msg) {
                    self.on_message(ctx, from, msg);
                }
            }
            Event::Request { client, cmd, .. } => self.on_request(ctx, client, cmd),
            Event::Timer(TIMER_TICK) => self.tick(ctx),
            Event::Persisted { token } => self.on_persisted(ctx, token),
            Event::Timer(_) => {}
            Event::SnapshotTaken { token, data } => self.on_snapshot_taken(ctx, token, data),
            Event::Reconfigure { client, id, .. } => {
                let reason = "chain replication reconfigures itself: failed replicas are removed and recovered ones rejoin at the tail".to_string();
                ctx.reply(
                    client,
                    synod_core::Reply { client: 0, seq: id, from: self.me, body: ReplyBody::Invalid { reason } },
                );
            }
        }
    }

    fn status(&self) -> Status {
        let role = if !self.cfg.contains(self.me) {
            Role::Recovering
        } else if self.is_head() {
            Role::Leader
        } else {
            Role::Follower
        };
        let mut extra = BTreeMap::new();
        extra.insert("chain".into(), self.cfg.to_string());
        extra.insert("tail".into(), self.cfg.tail().map(|t| t.to_string()).unwrap_or_default());
        extra.insert("synced".into(), self.synced.to_string());
        extra.insert("trusted".into(), self.trusted.to_string());
        extra.insert("last".into(), self.last.to_string());
        extra.insert("sent".into(), self.last.saturating_sub(self.stable).to_string());
        extra.insert("lease_reads".into(), self.reads.to_string());
        extra.insert("repairs".into(), self.repairs.to_string());
        extra.insert("transfers".into(), self.transfers.to_string());
        Status {
            id: self.me,
            protocol: "chain".into(),
            role,
            ballot: self.cfg.epoch.to_string(),
            leader: self.cfg.head(),
            commit_index: self.stable,
            execute_index: self.stable,
            extra,
        }
    }

    fn describe_message(&self, msg: &[u8]) -> String {
        match decode::<Msg>(msg) {
            Ok(Msg::Forward { epoch, reset, first, entries, .. }) => {
                format!("Forward e{epoch} reset={reset:?} {first}..{}", first + entries.len() as u64)
            }
            Ok(Msg::Snapshot { epoch, index, data, .. }) => {
                format!("Snapshot e{epoch} @{index} ({} bytes)", data.len())
            }
            Ok(m) => format!("{m:?}"),
            Err(e) => format!("<undecodable: {e}>"),
        }
    }
}

/// Mutants for the mutation tests (`synod check --protocol chain-…`).
#[cfg(feature = "mutants")]
pub mod mutants {
    use super::*;

    pub fn build_head_answers(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
        Ok(Box::new(Chain::new(setup, Variant { head_answers: true, ..Variant::default() })?))
    }

    pub fn build_lease_unchecked(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
        Ok(Box::new(Chain::new(setup, Variant { lease_unchecked: true, ..Variant::default() })?))
    }
}
