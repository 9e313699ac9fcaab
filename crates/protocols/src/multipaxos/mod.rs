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

pub use msg::{AcceptedSlot, Batch, Msg, Record};

use crate::registry::Setup;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::time::Duration;
use synod_core::batch::{Batcher, Waiter};
use synod_core::log::{InstanceLog, SlotState};
use synod_core::protocol::{decode, encode};
use synod_core::quorum::{majority, QuorumTracker};
use synod_core::{
    Action, Ballot, ClientRef, Command, Ctx, Event, NodeId, Pos, Protocol, ProtocolParams, ReplyBody, Role, Status,
    Time, TimerId,
};

const TIMER_ELECTION: TimerId = 1;
const TIMER_HEARTBEAT: TimerId = 2;

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
}

/// One log slot: the value and the ballot it was accepted in.
#[derive(Clone, Debug)]
struct Entry {
    ballot: Ballot,
    value: Batch,
}

/// Leader-side bookkeeping for a slot in flight.
struct InFlight {
    acks: QuorumTracker,
    sent_at: Time,
}

/// Candidate-side bookkeeping for phase 1.
struct Election {
    promises: QuorumTracker,
    /// Highest-ballot value reported for each slot (committed values win).
    found: BTreeMap<u64, (Ballot, Batch, bool)>,
    from_slot: u64,
}

pub struct MultiPaxos {
    id: NodeId,
    members: Vec<NodeId>,
    params: ProtocolParams,
    variant: Variant,
    quorum: usize,

    role: Role,
    /// Highest ballot promised (durable).
    promised: Ballot,
    /// Highest ballot seen anywhere (so a new election outbids it); not a promise.
    max_seen: Ballot,
    /// Set when recovery met a record it cannot decode: the replica then stays passive
    /// (never votes), since a lost promise could let it accept what it promised to refuse.
    broken: Option<String>,
    /// The leader this replica currently follows (or itself).
    leader: Option<NodeId>,

    log: InstanceLog<Entry>,
    /// Committed prefix last persisted as a `CommitUpto` record.
    persisted_commit: u64,
    /// Highest committed prefix the leader announced.
    leader_commit: u64,

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
}

impl MultiPaxos {
    pub(crate) fn new(setup: &Setup, variant: Variant) -> Result<MultiPaxos, String> {
        setup.params.validate()?;
        if !setup.members.contains(&setup.id) {
            return Err(format!("node {} is not among the members {:?}", setup.id, setup.members));
        }
        setup.params.check_options("multipaxos", &[])?;
        let quorum = variant.quorum_override.unwrap_or_else(|| majority(setup.members.len()));
        Ok(MultiPaxos {
            id: setup.id,
            members: setup.members.clone(),
            params: setup.params.clone(),
            variant,
            quorum,
            role: Role::Follower,
            promised: Ballot::ZERO,
            max_seen: Ballot::ZERO,
            broken: None,
            leader: None,
            log: InstanceLog::new(),
            persisted_commit: 0,
            leader_commit: 0,
            next_slot: 1,
            in_flight: BTreeMap::new(),
            queue: Batcher::new(),
            election: None,
            catchup_pending_until: Time::ZERO,
            waiting: BTreeMap::new(),
        })
    }

    fn n(&self) -> usize {
        self.members.len()
    }

    fn persist(&self, ctx: &mut Ctx<'_>, records: &[Record]) {
        ctx.persist(0, records.iter().map(encode).collect());
    }

    fn reset_election_timer(&self, ctx: &mut Ctx<'_>) {
        let min = Duration::from_millis(self.params.election_timeout_min_ms);
        let max = Duration::from_millis(self.params.election_timeout_max_ms);
        let after = ctx.random_between(min, max);
        ctx.set_timer(TIMER_ELECTION, after);
    }

    // ---------------------------------------------------------------------------------------
    // 1. Leader election (phase 1 for all future slots)
    // ---------------------------------------------------------------------------------------

    fn start_election(&mut self, ctx: &mut Ctx<'_>) {
        let ballot = self.promised.max(self.max_seen).next_for(self.id);
        self.promised = ballot;
        self.role = Role::Candidate;
        self.leader = None;
        self.in_flight.clear();
        let from_slot = self.log.committed_prefix() + 1;
        let mut election = Election { promises: QuorumTracker::new(self.quorum), found: BTreeMap::new(), from_slot };
        // Our own promise, with what we accepted ourselves.
        self.persist(ctx, &[Record::Promise(ballot)]);
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
        if ballot < self.promised || (ballot == self.promised && ballot.node != from) {
            ctx.send(from, &Msg::Nack { ballot, promised: self.promised });
            return;
        }
        if ballot > self.promised {
            self.promised = ballot;
            self.persist(ctx, &[Record::Promise(ballot)]);
            self.step_down(ctx, Some(from));
        }
        self.reset_election_timer(ctx);
        ctx.send(from, &Msg::Promise { ballot, accepted: self.accepted_from(from_slot) });
    }

    fn on_promise(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, accepted: Vec<AcceptedSlot>) {
        if self.role != Role::Candidate || ballot != self.promised {
            return;
        }
        let Some(election) = self.election.as_mut() else { return };
        if election.promises.has(from) {
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
        self.leader = Some(self.id);
        ctx.cancel_timer(TIMER_ELECTION);
        let last = election.found.keys().next_back().copied().unwrap_or(0).max(self.log.last_index());
        self.next_slot = last.max(election.from_slot - 1) + 1;
        let ballot = self.promised;
        let mut found = election.found;
        let mut records = Vec::new();
        let mut proposals = Vec::new();
        for slot in election.from_slot..self.next_slot {
            if self.log.is_committed(slot) {
                continue;
            }
            let value = match found.remove(&slot) {
                Some((_, v, _)) => v,
                None => Vec::new(),
            };
            self.log.set(slot, Entry { ballot, value: value.clone() }, SlotState::InProgress);
            records.push(Record::Accept { slot, ballot, value: value.clone() });
            proposals.push((slot, value));
        }
        if !records.is_empty() {
            self.persist(ctx, &records);
        }
        for (slot, value) in proposals {
            let n = value.len();
            self.track(ctx, slot, vec![None; n]);
            ctx.broadcast(&Msg::Accept { ballot, slot, value, commit_upto: self.log.committed_prefix() });
        }
        self.send_heartbeat(ctx);
        self.propose_queued(ctx);
        self.commit_ready(ctx);
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
        }
        for p in self.queue.drain() {
            if let Some(c) = p.client {
                self.redirect(ctx, c, &p.cmd);
            }
        }
        self.reset_election_timer(ctx);
    }

    fn on_nack(&mut self, ctx: &mut Ctx<'_>, ballot: Ballot, promised: Ballot) {
        if ballot == self.promised && promised > self.promised && self.role != Role::Follower {
            self.max_seen = self.max_seen.max(promised);
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
        if self.role != Role::Leader {
            return;
        }
        let mut records = Vec::new();
        let mut sends = Vec::new();
        while !self.queue.is_empty() && self.in_flight.len() < self.params.pipeline_window {
            let batch = self.queue.take(self.params.max_batch, MAX_BATCH_BYTES);
            let slot = self.next_slot;
            self.next_slot += 1;
            let clients: Vec<Option<Waiter>> = batch.iter().map(Waiter::for_pending).collect();
            let value: Batch = batch.into_iter().map(|p| p.cmd).collect();
            self.log.set(slot, Entry { ballot: self.promised, value: value.clone() }, SlotState::InProgress);
            records.push(Record::Accept { slot, ballot: self.promised, value: value.clone() });
            sends.push((slot, value, clients));
        }
        if records.is_empty() {
            return;
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
        if clients.iter().any(|c| c.is_some()) {
            self.waiting.insert(slot, clients);
        }
        self.in_flight.insert(slot, InFlight { acks, sent_at: ctx.now });
    }

    fn on_accept(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, slot: u64, value: Batch, commit: u64) {
        if ballot < self.promised {
            ctx.send(from, &Msg::Nack { ballot, promised: self.promised });
            return;
        }
        let mut records = Vec::new();
        if ballot > self.promised {
            self.promised = ballot;
            records.push(Record::Promise(ballot));
        }
        if self.role != Role::Follower || self.leader != Some(from) {
            self.step_down(ctx, Some(from));
        }
        self.reset_election_timer(ctx);
        if !self.log.is_committed(slot) {
            self.log.set(slot, Entry { ballot, value: value.clone() }, SlotState::InProgress);
            records.push(Record::Accept { slot, ballot, value });
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
        if self.role != Role::Leader || ballot != self.promised {
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

    fn send_heartbeat(&mut self, ctx: &mut Ctx<'_>) {
        ctx.broadcast(&Msg::Heartbeat { ballot: self.promised, commit_upto: self.log.committed_prefix() });
        ctx.set_timer(TIMER_HEARTBEAT, self.params.heartbeat());
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
        for (slot, f) in self.in_flight.iter_mut() {
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

    fn on_heartbeat(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, commit_upto: u64) {
        if ballot < self.promised {
            ctx.send(from, &Msg::Nack { ballot, promised: self.promised });
            return;
        }
        if ballot > self.promised {
            self.promised = ballot;
            self.persist(ctx, &[Record::Promise(ballot)]);
        }
        if self.role != Role::Follower || self.leader != Some(from) {
            self.step_down(ctx, Some(from));
        }
        self.reset_election_timer(ctx);
        self.learn_commit(ctx, from, ballot, commit_upto);
        self.persist_commit_marker(ctx);
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
        if have >= self.leader_commit || ctx.now < self.catchup_pending_until {
            return;
        }
        let to = self.leader_commit.min(have + self.params.catchup_chunk as u64);
        self.catchup_pending_until = ctx.now + self.params.heartbeat() * 2;
        ctx.send(leader, &Msg::CatchupReq { from: have + 1, to });
    }

    fn on_catchup_req(&mut self, ctx: &mut Ctx<'_>, from_node: NodeId, from: u64, to: u64) {
        let to = to.min(from.saturating_add(self.params.catchup_chunk as u64 - 1));
        let entries: Vec<(u64, Batch)> = self
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

    fn on_catchup_resp(&mut self, ctx: &mut Ctx<'_>, from: NodeId, entries: Vec<(u64, Batch)>, commit_upto: u64) {
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
        self.catchup_pending_until = Time::ZERO;
        self.execute(ctx);
        if self.role == Role::Follower {
            self.request_catchup(ctx, from);
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
        while let Some((slot, entry)) = self.log.next_to_execute() {
            let clients = self.waiting.remove(&slot).unwrap_or_default();
            for (i, cmd) in entry.value.iter().enumerate() {
                let reply = Waiter::matching(clients.get(i), cmd);
                ctx.apply(Pos::slot(slot, i as u32), cmd.clone(), reply);
            }
            self.log.advance_exec();
        }
    }
}

impl Protocol for MultiPaxos {
    fn recover(&mut self, ctx: &mut Ctx<'_>, records: Vec<Bytes>) {
        let mut commit_upto = 0;
        for r in records.iter() {
            match decode::<Record>(r) {
                Ok(Record::Promise(b)) => self.promised = self.promised.max(b),
                Ok(Record::Accept { slot, ballot, value }) => {
                    self.promised = self.promised.max(ballot);
                    if !self.log.is_committed(slot) {
                        self.log.set(slot, Entry { ballot, value }, SlotState::InProgress);
                    }
                }
                Ok(Record::Chosen { slot, value }) => {
                    self.log.set(slot, Entry { ballot: Ballot::ZERO, value }, SlotState::Committed);
                }
                Ok(Record::CommitUpto(c)) => commit_upto = commit_upto.max(c),
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
        if self.n() == 1 {
            self.start_election(ctx);
        } else {
            self.reset_election_timer(ctx);
        }
    }

    fn on_event(&mut self, ctx: &mut Ctx<'_>, event: Event) {
        if self.broken.is_some() {
            if let Event::Request { client, cmd } = event {
                let reason = "replica is passive: its durable state is unreadable".to_string();
                ctx.answer(client, &cmd, ReplyBody::Rejected { reason });
            }
            return;
        }
        match event {
            Event::Message { from, msg, .. } => {
                let Ok(msg) = decode::<Msg>(&msg) else { return };
                if !self.members.contains(&from) {
                    return;
                }
                match msg {
                    Msg::Prepare { ballot, from_slot } => self.on_prepare(ctx, from, ballot, from_slot),
                    Msg::Promise { ballot, accepted } => self.on_promise(ctx, from, ballot, accepted),
                    Msg::Accept { ballot, slot, value, commit_upto } => {
                        self.on_accept(ctx, from, ballot, slot, value, commit_upto)
                    }
                    Msg::Accepted { ballot, slot } => self.on_accepted(ctx, from, ballot, slot),
                    Msg::Nack { ballot, promised } => self.on_nack(ctx, ballot, promised),
                    Msg::Heartbeat { ballot, commit_upto } => self.on_heartbeat(ctx, from, ballot, commit_upto),
                    Msg::CatchupReq { from: lo, to } => self.on_catchup_req(ctx, from, lo, to),
                    Msg::CatchupResp { entries, commit_upto, .. } => {
                        self.on_catchup_resp(ctx, from, entries, commit_upto)
                    }
                }
            }
            Event::Request { client, cmd } => self.on_request(ctx, client, cmd),
            Event::Timer(TIMER_ELECTION) => {
                if self.role != Role::Leader {
                    self.start_election(ctx);
                }
            }
            Event::Timer(TIMER_HEARTBEAT) => self.on_heartbeat_timer(ctx),
            Event::Timer(_) | Event::Persisted { .. } | Event::SnapshotTaken { .. } => {}
        }
    }

    fn status(&self) -> Status {
        let mut extra = BTreeMap::new();
        extra.insert("next_slot".into(), self.next_slot.to_string());
        extra.insert("in_flight".into(), self.in_flight.len().to_string());
        extra.insert("queued".into(), self.queue.len().to_string());
        extra.insert("log_len".into(), self.log.len().to_string());
        if let Some(e) = &self.broken {
            extra.insert("error".into(), e.clone());
        }
        Status {
            id: self.id,
            protocol: "multipaxos".into(),
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
            Ok(Msg::Accept { ballot, slot, value, commit_upto }) => {
                format!("Accept b={ballot} slot={slot} cmds={} commit={commit_upto}", value.len())
            }
            Ok(Msg::Promise { ballot, accepted }) => format!("Promise b={ballot} accepted={}", accepted.len()),
            Ok(Msg::CatchupResp { entries, commit_upto, .. }) => {
                format!("CatchupResp entries={} commit={commit_upto}", entries.len())
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
        Ok(Box::new(MultiPaxos::new(setup, Variant { quorum_override: Some(q), execute_on_accept: false })?))
    }

    /// Followers execute what they accept before it is chosen.
    pub fn build_early_exec(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
        Ok(Box::new(MultiPaxos::new(setup, Variant { quorum_override: None, execute_on_accept: true })?))
    }
}

#[cfg(test)]
mod tests;
