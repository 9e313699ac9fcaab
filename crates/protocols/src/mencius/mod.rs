//! Mencius (Mao, Junqueira, Marzullo, "Mencius: Building Efficient Replicated State Machines
//! for WANs", OSDI 2008) — the rotating-owner baseline of EPaxos's evaluation (§7 there).
//!
//! One log, its slots owned round-robin: slot `s` (from 1) belongs to member
//! `members[(s − 1) mod n]`. Every slot is an instance of Paxos; its owner starts promised by
//! every acceptor at its own ballot `(0, owner)` (Coordinated Paxos), so it proposes with a
//! single round trip and no leader. Clients send to any replica; the replica proposes their
//! commands in its next own slot. The paper's rules, as they appear below:
//!
//! - **Rule 1** (propose): a server with a client request proposes it in its next unused own
//!   slot ([`Mencius::propose_own`]).
//! - **Rule 2** (skip): a server that learns of a proposal or decision in slot `s` gives up
//!   every unused own slot below `s` by proposing no-op (SKIP) in them, so the log below `s`
//!   fills without waiting for it to have requests ([`Mencius::skip_below`]). Skips of many
//!   slots travel in one message (Optimization 1/2: batching and piggybacking skips).
//! - **Rule 3** (revoke): when a server is suspected to have failed, another server takes over
//!   its unused slots with full Paxos — phase 1 at a higher ballot over a range of its slots,
//!   then phase 2 with the highest accepted value found in each slot or no-op
//!   ([`Mencius::start_revocation`]). Phase 1 is what makes this safe when the suspect was
//!   merely slow: whatever it may have got chosen in those slots is found and kept.
//! - **Rule 4** (return): a server that finds its slots taken over (a refusal at its own
//!   ballot, a decision it did not propose) moves its next own slot past them and re-proposes
//!   the requests it had there ([`Mencius::learn_chosen`], [`Mencius::on_nack`]).
//!
//! Deviations and decisions (the paper is silent or the simulator demands them):
//! - a SKIP is an ordinary no-op proposal at the owner's ballot acknowledged by a majority
//!   (the paper lets an owner's skip be learned in one message); this costs messages, not
//!   safety;
//! - an owner persists its own acceptance of a slot before sending it, so after a restart it
//!   never proposes two values in one slot at its ballot; own slots it holds accepted but not
//!   chosen are proposed again, unused ones below its recovered position are skipped;
//! - a slot that stays undecided at the execution point for 4 election timeouts is revoked
//!   even from a server that is heard from (its proposals may be lost one way);
//! - the revoker of a suspect is the first member after it in ring order that is not itself
//!   suspected, so revocations rarely duel (and Paxos keeps duels safe).
//! - once a revocation of a suspected owner finished, the revoker takes over the owner's next
//!   window as soon as the execution point reaches it, for as long as it suspects the owner
//!   ("live replicas commit no-ops periodically until the failed replica recovers"), so an
//!   outage costs throughput only at its start;
//! - catch-up: heartbeats carry the execution point; a peer answers with a chunk of decided
//!   slots, and a replica that received a full chunk that moved it asks again at once, so a
//!   replica back from a long outage catches up at the round-trip rate.
//!
//! Snapshots: every `snapshot_every` executed slots the replica takes a snapshot and compacts
//! its durable records in the background to the snapshot plus the records of the slots after
//! it, keeping `snapshot_keep` executed slots in memory for peers' catch-up; a peer behind
//! that gets the snapshot. An acceptor never promises for slots it trimmed (it could not report
//! what was chosen there): a revoker that far behind catches up instead.
//!
//! Not yet: membership changes.

pub mod msg;
#[cfg(test)]
mod tests;

use crate::registry::Setup;
use bytes::Bytes;
use msg::{Msg, Record, Reported, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use synod_core::batch::{Batcher, Waiter};
use synod_core::log::{InstanceLog, SlotState};
use synod_core::protocol::{compaction, decode, encode, encode_with_payload};
use synod_core::quorum::QuorumTracker;
use synod_core::{
    Ballot, ClientRef, Command, Ctx, Event, NodeId, Pos, Protocol, ProtocolParams, ReplyBody, Role, Status, Time,
    TimerId,
};

const TIMER_TICK: TimerId = 1;
/// Most bytes of commands in one proposal.
const MAX_BATCH_BYTES: usize = 1 << 20;
/// How many of a suspect's slots past the highest slot in use one revocation takes over.
const REVOKE_AHEAD_ROUNDS: u64 = 16;
/// Slots further than this past the execution point are ignored (not stored, not skipped
/// to): a replica that far behind catches up from its peers' heartbeat answers first, and a
/// malformed slot number cannot make it allocate a huge log window.
const MAX_AHEAD: u64 = 1 << 16;

/// Registry constructor.
pub fn build(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
    Ok(Box::new(Mencius::new(setup, Variant::default())?))
}

/// Deliberate deviations, used only by the mutation tests.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Variant {
    /// Revoke with phase 2 only: no-ops written over a suspect's slots without learning what
    /// it may have got chosen there (unsafe).
    pub revoke_without_prepare: bool,
}

/// A slot as this replica's acceptor knows it. Once chosen, `accepted` holds the decision.
#[derive(Clone, Debug)]
struct Inst {
    promised: Ballot,
    accepted: Option<(Ballot, Value)>,
}

/// A phase 2 this replica leads (its own slot, or a revoked one).
struct Proposal {
    ballot: Ballot,
    value: Value,
    acks: QuorumTracker,
    waiters: Vec<Option<Waiter>>,
    sent_at: Time,
}

/// A phase 1 over a suspect's slots (Rule 3).
struct Revocation {
    ballot: Ballot,
    owner: NodeId,
    from: u64,
    to: u64,
    promises: QuorumTracker,
    /// Per slot: the decision (ballot None) or the highest-ballot accepted value reported.
    reported: BTreeMap<u64, (Option<Ballot>, Value)>,
    started: Time,
}

pub struct Mencius {
    id: NodeId,
    members: Vec<NodeId>,
    params: ProtocolParams,
    variant: Variant,
    log: InstanceLog<Inst>,
    /// The next own slot not yet proposed in or skipped.
    next_own: u64,
    /// Highest slot seen in use anywhere.
    max_seen: u64,
    /// Highest ballot round seen (revocation ballots go above it).
    max_round: u64,
    proposals: BTreeMap<u64, Proposal>,
    /// Clients to answer when a chosen slot of ours executes.
    waiting: BTreeMap<u64, Vec<Option<Waiter>>>,
    queue: Batcher,
    heard: BTreeMap<NodeId, Time>,
    revocation: Option<Revocation>,
    /// The execution point and since when it has been there.
    stuck: (u64, Time),
    skips: u64,
    revocations: u64,
    cmds_executed: u64,
    /// The latest snapshot (slots up to `.0`), kept to send to peers behind our log.
    snapshot: Option<(u64, Bytes)>,
    /// A snapshot was requested and has not come back.
    snapshot_pending: bool,
    /// When each peer was last sent the snapshot (not more than once per election timeout).
    snapshot_sent: BTreeMap<NodeId, Time>,
    /// When a revocation of each owner's slots last finished phase 1 here.
    revoked_at: BTreeMap<NodeId, Time>,
}

impl Mencius {
    pub(crate) fn new(setup: &Setup, variant: Variant) -> Result<Mencius, String> {
        setup.params.check_options("mencius", &[])?;
        let mut members = setup.members.clone();
        members.sort_unstable();
        members.dedup();
        if !members.contains(&setup.id) {
            return Err(format!("replica {} is not among the members {members:?}", setup.id));
        }
        let mut m = Mencius {
            id: setup.id,
            members,
            params: setup.params.clone(),
            variant,
            log: InstanceLog::new(),
            next_own: 0,
            max_seen: 0,
            max_round: 0,
            proposals: BTreeMap::new(),
            waiting: BTreeMap::new(),
            queue: Batcher::new(),
            heard: BTreeMap::new(),
            revocation: None,
            stuck: (1, Time::ZERO),
            skips: 0,
            revocations: 0,
            cmds_executed: 0,
            snapshot: None,
            snapshot_pending: false,
            snapshot_sent: BTreeMap::new(),
            revoked_at: BTreeMap::new(),
        };
        m.next_own = m.first_own_from(1);
        Ok(m)
    }

    // --- slots and ownership -------------------------------------------------------------

    /// How long a silent server goes unsuspected, and how long the execution point may wait
    /// before this replica acts (the election timeouts of the parameters).
    fn timeout_max(&self) -> Duration {
        Duration::from_millis(self.params.election_timeout_max_ms)
    }

    fn timeout_min(&self) -> Duration {
        Duration::from_millis(self.params.election_timeout_min_ms)
    }

    fn n(&self) -> u64 {
        self.members.len() as u64
    }

    fn owner(&self, slot: u64) -> NodeId {
        self.members[((slot.max(1) - 1) % self.n()) as usize]
    }

    fn own_ballot(owner: NodeId) -> Ballot {
        Ballot::new(0, owner)
    }

    /// The first slot at or after `slot` owned by `owner`.
    fn first_of_from(&self, owner: NodeId, slot: u64) -> u64 {
        let pos = self.members.iter().position(|&m| m == owner).expect("a member") as u64;
        let slot = slot.max(1);
        let offset = (slot - 1) % self.n();
        slot + (pos + self.n() - offset) % self.n()
    }

    fn first_own_from(&self, slot: u64) -> u64 {
        self.first_of_from(self.id, slot)
    }

    fn promised(&self, slot: u64) -> Ballot {
        self.log.get(slot).map(|s| s.value.promised).unwrap_or(Ballot::ZERO)
    }

    fn majority(&self) -> QuorumTracker {
        QuorumTracker::majority_of(self.members.len())
    }

    fn persist(&self, ctx: &mut Ctx<'_>, records: &[Record]) {
        if !records.is_empty() {
            ctx.persist(0, records.iter().map(encode).collect());
        }
    }

    fn suspected(&self, node: NodeId, now: Time) -> bool {
        node != self.id && self.heard.get(&node).is_none_or(|t| now.since(*t) > self.timeout_max())
    }

    fn saw(&mut self, slot: u64) {
        self.max_seen = self.max_seen.max(slot);
    }

    /// Whether `slot` is one this replica handles now (see [`MAX_AHEAD`]).
    fn in_window(&self, slot: u64) -> bool {
        slot >= 1 && slot <= self.log.exec_next().saturating_add(MAX_AHEAD)
    }

    /// Rule 4: a slot of ours was decided or taken over by someone else, so everything of
    /// ours up to it is settled; propose later ones only.
    fn move_past(&mut self, slot: u64) {
        if self.owner(slot) == self.id && slot >= self.next_own {
            self.next_own = self.first_own_from(slot + 1);
        }
    }

    // --- Rule 1: propose in the next own slot ---------------------------------------------

    fn on_request(&mut self, ctx: &mut Ctx<'_>, client: ClientRef, cmd: Command) {
        self.queue.push(Some(client), cmd);
        self.propose_own(ctx);
    }

    fn propose_own(&mut self, ctx: &mut Ctx<'_>) {
        let mine = Self::own_ballot(self.id);
        let mut entries = Vec::new();
        let in_flight = self.proposals.values().filter(|p| p.ballot == mine).count();
        let mut room = self.params.pipeline_window.max(1).saturating_sub(in_flight);
        while room > 0 && !self.queue.is_empty() {
            let slot = self.next_own;
            self.next_own += self.n();
            if self.promised(slot) > mine || self.log.is_committed(slot) {
                continue; // taken over (Rule 3): never propose there
            }
            let batch = self.queue.take(self.params.max_batch.max(1), MAX_BATCH_BYTES);
            let waiters = batch.iter().map(Waiter::for_pending).collect();
            let value: Value = batch.into_iter().map(|p| p.cmd).collect();
            entries.push((slot, value, waiters));
            room -= 1;
        }
        self.propose(ctx, mine, entries);
    }

    /// Phase 2 for `entries` at `ballot`: accept locally (persisted before the message
    /// leaves), then ask everyone.
    fn propose(&mut self, ctx: &mut Ctx<'_>, ballot: Ballot, entries: Vec<(u64, Value, Vec<Option<Waiter>>)>) {
        let mut records = Vec::new();
        let mut out = Vec::new();
        let mut chosen = Vec::new();
        for (slot, value, waiters) in entries {
            if self.log.is_committed(slot) || self.promised(slot) > ballot {
                self.requeue(waiters, &value);
                continue;
            }
            self.saw(slot);
            self.log.set(
                slot,
                Inst { promised: ballot, accepted: Some((ballot, value.clone())) },
                SlotState::InProgress,
            );
            records.push(Record::Accepted { slot, ballot, value: value.clone() });
            let mut acks = self.majority();
            acks.ack(self.id);
            if acks.reached() {
                chosen.push(slot);
            }
            out.push((slot, value.clone()));
            self.proposals.insert(slot, Proposal { ballot, value, acks, waiters, sent_at: ctx.now });
        }
        if out.is_empty() {
            return;
        }
        self.persist(ctx, &records);
        ctx.broadcast(&Msg::Accept { ballot, entries: out });
        self.commit(ctx, chosen);
    }

    /// Put the client commands of an abandoned proposal back in the queue (they go into a
    /// later own slot; if the abandoned one is chosen after all, the sessions' exactly-once
    /// table keeps the command from running twice).
    fn requeue(&mut self, waiters: Vec<Option<Waiter>>, value: &Value) {
        for (i, cmd) in value.iter().enumerate() {
            if let Some(Some(w)) = waiters.get(i) {
                self.queue.push(Some(w.client), cmd.clone());
            }
        }
    }

    // --- Rule 2: skip unused own slots below a slot in use -----------------------------------

    fn skip_below(&mut self, ctx: &mut Ctx<'_>, slot: u64) {
        if slot <= self.next_own {
            return;
        }
        let mine = Self::own_ballot(self.id);
        let mut entries = Vec::new();
        let mut s = self.next_own;
        while s < slot {
            if self.promised(s) <= mine && !self.log.is_committed(s) && !self.proposals.contains_key(&s) {
                entries.push((s, Value::new(), Vec::new()));
            }
            s += self.n();
        }
        self.next_own = s;
        self.skips += entries.len() as u64;
        self.propose(ctx, mine, entries);
    }

    // --- acceptor --------------------------------------------------------------------------

    fn on_accept(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, entries: Vec<(u64, Value)>) {
        self.max_round = self.max_round.max(ballot.round);
        let mut records = Vec::new();
        let mut acked = Vec::new();
        let mut known = Vec::new();
        let mut nack = None;
        let mut highest = 0;
        for (slot, value) in entries {
            if !self.in_window(slot) {
                continue;
            }
            highest = highest.max(slot);
            self.saw(slot);
            if ballot != Self::own_ballot(self.owner(slot)) {
                self.move_past(slot);
            }
            if self.log.is_committed(slot) {
                if let Some((_, v)) = self.log.get(slot).and_then(|s| s.value.accepted.clone()) {
                    known.push((slot, v));
                }
                continue;
            }
            let promised = self.promised(slot);
            if ballot < promised {
                nack.get_or_insert((slot, promised));
                continue;
            }
            self.log.set(
                slot,
                Inst { promised: ballot, accepted: Some((ballot, value.clone())) },
                SlotState::InProgress,
            );
            records.push(Record::Accepted { slot, ballot, value });
            acked.push(slot);
        }
        self.persist(ctx, &records);
        if !acked.is_empty() {
            ctx.send(from, &Msg::Accepted { ballot, slots: acked });
        }
        if !known.is_empty() {
            ctx.send(from, &Msg::Commit { entries: known });
        }
        if let Some((slot, promised)) = nack {
            ctx.send(from, &Msg::Nack { ballot, slot, promised });
        }
        self.skip_below(ctx, highest);
        self.propose_own(ctx);
    }

    fn on_accepted(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, slots: Vec<u64>) {
        let mut chosen = Vec::new();
        for slot in slots {
            if let Some(p) = self.proposals.get_mut(&slot) {
                if p.ballot == ballot && !p.acks.reached() && p.acks.ack(from) {
                    chosen.push(slot);
                }
            }
        }
        self.commit(ctx, chosen);
    }

    /// Our proposals in `slots` reached a majority: they are chosen; tell everyone.
    fn commit(&mut self, ctx: &mut Ctx<'_>, slots: Vec<u64>) {
        if slots.is_empty() {
            return;
        }
        let entries: Vec<(u64, Value)> =
            slots.iter().filter_map(|s| self.proposals.get(s).map(|p| (*s, p.value.clone()))).collect();
        ctx.broadcast(&Msg::Commit { entries: entries.clone() });
        let mut records = Vec::new();
        for (slot, value) in entries {
            self.learn_chosen(slot, value, &mut records);
        }
        self.persist(ctx, &records);
        self.execute(ctx);
    }

    /// `value` is chosen in `slot`. Our proposal there (if any) is answered on execution if
    /// it is what was chosen, and re-queued otherwise (Rule 4).
    fn learn_chosen(&mut self, slot: u64, value: Value, records: &mut Vec<Record>) {
        if !self.in_window(slot) || self.log.is_committed(slot) {
            return;
        }
        self.saw(slot);
        let promised = self.promised(slot);
        if let Some(p) = self.proposals.remove(&slot) {
            if p.value == value {
                self.waiting.insert(slot, p.waiters);
            } else {
                self.requeue(p.waiters, &p.value);
            }
        }
        if self.owner(slot) == self.id {
            self.move_past(slot);
        }
        self.log.set(slot, Inst { promised, accepted: Some((promised, value.clone())) }, SlotState::Committed);
        records.push(Record::Chosen { slot, value });
    }

    /// Decisions from a peer: a broadcast after its phase 2, or a catch-up chunk answering
    /// our heartbeat. A full chunk that moved our execution point means the peer may know
    /// more: ask again at once (catch-up pipelined at the round-trip rate, not one chunk
    /// per heartbeat — a replica back from a long outage otherwise lags for minutes, and
    /// revocation windows reach it one by one). A chunk that moved nothing asks nothing, so
    /// the exchange always ends.
    fn on_commit(&mut self, ctx: &mut Ctx<'_>, from: NodeId, entries: Vec<(u64, Value)>) {
        let before = self.log.exec_next();
        let full_chunk = entries.len() >= self.params.catchup_chunk.max(1);
        let mut records = Vec::new();
        let mut highest = 0;
        for (slot, value) in entries {
            if self.in_window(slot) {
                highest = highest.max(slot);
            }
            self.learn_chosen(slot, value, &mut records);
        }
        self.persist(ctx, &records);
        self.execute(ctx);
        if full_chunk && self.log.exec_next() > before {
            ctx.send(from, &self.heartbeat());
        }
        self.skip_below(ctx, highest);
        self.propose_own(ctx);
    }

    fn heartbeat(&self) -> Msg {
        Msg::Heartbeat { exec_next: self.log.exec_next(), max_seen: self.max_seen, next_own: self.next_own }
    }

    fn on_nack(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, slot: u64, promised: Ballot) {
        self.max_round = self.max_round.max(promised.round);
        let n = self.members.len();
        let lost = promised > ballot
            && self.proposals.get_mut(&slot).is_some_and(|p| p.ballot == ballot && p.acks.nack(from, n));
        if lost {
            // A majority can no longer accept at this ballot: taken over (Rule 4). Our value
            // may still be chosen by the revoker; the commands go to a later own slot either
            // way. (One refusal alone does not end a proposal: the others may still accept.)
            let p = self.proposals.remove(&slot).expect("checked");
            self.requeue(p.waiters, &p.value);
            self.move_past(slot);
        }
        if self.revocation.as_ref().is_some_and(|r| r.ballot == ballot) && promised > ballot {
            self.revocation = None;
        }
        self.propose_own(ctx);
    }

    // --- Rule 3: revoke a suspect's slots ---------------------------------------------------

    /// The member that revokes `owner`'s slots: the first after it in ring order that is not
    /// suspected (from this replica's point of view).
    fn revoker_of(&self, owner: NodeId, now: Time) -> Option<NodeId> {
        let pos = self.members.iter().position(|&m| m == owner)?;
        (1..self.members.len())
            .map(|k| self.members[(pos + k) % self.members.len()])
            .find(|&m| m == self.id || !self.suspected(m, now))
    }

    fn start_revocation(&mut self, ctx: &mut Ctx<'_>, owner: NodeId, from: u64) {
        let to = self.max_seen.max(from) + self.n() * REVOKE_AHEAD_ROUNDS;
        self.max_round += 1;
        let ballot = Ballot::new(self.max_round, self.id);
        self.revocations += 1;
        if self.variant.revoke_without_prepare {
            // The mutant: write no-ops at once, learning nothing.
            let entries = self.slots_of(owner, from, to).map(|s| (s, Value::new(), Vec::new())).collect();
            self.propose(ctx, ballot, entries);
            return;
        }
        let mut promises = self.majority();
        let reported = match self.promise_slots(ballot, owner, from, to) {
            Ok(reported) => reported,
            Err(_) => return, // we promised higher ourselves: someone else is at it
        };
        self.persist(ctx, &[Record::Promised { ballot, owner, from, to }]);
        promises.ack(self.id);
        let mut r = Revocation { ballot, owner, from, to, promises, reported: BTreeMap::new(), started: ctx.now };
        Self::merge(&mut r.reported, reported);
        ctx.broadcast(&Msg::Prepare { ballot, owner, from, to });
        self.revocation = Some(r);
        self.finish_revocation(ctx);
    }

    fn slots_of(&self, owner: NodeId, from: u64, to: u64) -> impl Iterator<Item = u64> {
        let n = self.n();
        (self.first_of_from(owner, from)..=to).step_by(n as usize)
    }

    /// Promise `ballot` for `owner`'s slots in `from..=to` (all or nothing) and report what
    /// this acceptor holds there; Err(slot, promised) if it promised higher somewhere.
    fn promise_slots(
        &mut self,
        ballot: Ballot,
        owner: NodeId,
        from: u64,
        to: u64,
    ) -> Result<Vec<Reported>, (u64, Ballot)> {
        let slots: Vec<u64> = self.slots_of(owner, from, to).collect();
        for &s in &slots {
            if !self.log.is_committed(s) && self.promised(s) > ballot {
                return Err((s, self.promised(s)));
            }
        }
        let mut reported = Vec::new();
        for s in slots {
            if self.log.is_committed(s) {
                if let Some((_, v)) = self.log.get(s).and_then(|i| i.value.accepted.clone()) {
                    reported.push(Reported { slot: s, ballot: None, value: v });
                }
                continue;
            }
            let accepted = self.log.get(s).and_then(|i| i.value.accepted.clone());
            if let Some((b, v)) = &accepted {
                reported.push(Reported { slot: s, ballot: Some(*b), value: v.clone() });
            }
            self.log.set(s, Inst { promised: ballot, accepted }, SlotState::InProgress);
        }
        Ok(reported)
    }

    fn merge(into: &mut BTreeMap<u64, (Option<Ballot>, Value)>, reported: Vec<Reported>) {
        for r in reported {
            let keep = match into.get(&r.slot) {
                None => true,
                Some((None, _)) => false,
                Some((Some(b), _)) => r.ballot.is_none_or(|rb| rb > *b),
            };
            if keep {
                into.insert(r.slot, (r.ballot, r.value));
            }
        }
    }

    fn on_prepare(&mut self, ctx: &mut Ctx<'_>, from_node: NodeId, ballot: Ballot, owner: NodeId, from: u64, to: u64) {
        self.max_round = self.max_round.max(ballot.round);
        if !self.members.contains(&owner) || !self.in_window(from) || !self.in_window(to) || to < from {
            return; // malformed, or too far ahead of us to take part
        }
        if from < self.log.first_index() {
            // We trimmed some of these slots and could not report what was chosen there: no
            // promise; the revoker is behind and gets the snapshot instead.
            self.send_snapshot(ctx, from_node);
            return;
        }
        self.saw(to.min(self.max_seen.max(from)));
        match self.promise_slots(ballot, owner, from, to) {
            Ok(reported) => {
                self.persist(ctx, &[Record::Promised { ballot, owner, from, to }]);
                ctx.send(from_node, &Msg::Promise { ballot, owner, from, to, reported });
                if owner == self.id {
                    // Rule 4: our slots in the range are being taken over.
                    let last = self.slots_of(owner, from, to).last().unwrap_or(from);
                    self.move_past(last);
                    let taken: Vec<u64> = self
                        .proposals
                        .range(from..=to)
                        .filter(|(s, _)| self.owner(**s) == owner)
                        .map(|(s, _)| *s)
                        .collect();
                    for s in taken {
                        if let Some(p) = self.proposals.remove(&s) {
                            self.requeue(p.waiters, &p.value);
                        }
                    }
                }
            }
            Err((slot, promised)) => ctx.send(from_node, &Msg::Nack { ballot, slot, promised }),
        }
    }

    fn on_promise(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, reported: Vec<Reported>) {
        let Some(r) = self.revocation.as_mut() else { return };
        if r.ballot != ballot || r.promises.has(from) {
            return;
        }
        Self::merge(&mut r.reported, reported);
        r.promises.ack(from);
        self.finish_revocation(ctx);
    }

    /// With a majority of promises: decided slots are learned, the others get the highest
    /// accepted value reported, or no-op (phase 2 at the revocation ballot).
    fn finish_revocation(&mut self, ctx: &mut Ctx<'_>) {
        if !self.revocation.as_ref().is_some_and(|r| r.promises.reached()) {
            return;
        }
        let r = self.revocation.take().expect("checked");
        self.revoked_at.insert(r.owner, ctx.now);
        let mut records = Vec::new();
        let mut entries = Vec::new();
        for s in self.slots_of(r.owner, r.from, r.to).collect::<Vec<_>>() {
            match r.reported.get(&s) {
                Some((None, v)) => self.learn_chosen(s, v.clone(), &mut records),
                Some((Some(_), v)) => entries.push((s, v.clone(), Vec::new())),
                None => entries.push((s, Value::new(), Vec::new())),
            }
        }
        self.persist(ctx, &records);
        self.propose(ctx, r.ballot, entries);
        self.execute(ctx);
    }

    // --- execution ---------------------------------------------------------------------------

    fn execute(&mut self, ctx: &mut Ctx<'_>) {
        while let Some((slot, inst)) = self.log.next_to_execute() {
            let value = inst.accepted.as_ref().map(|(_, v)| v.clone()).unwrap_or_default();
            let clients = self.waiting.remove(&slot).unwrap_or_default();
            for (i, cmd) in value.iter().enumerate() {
                ctx.apply(Pos::slot(slot, i as u32), cmd.clone(), Waiter::matching(clients.get(i), cmd));
            }
            self.cmds_executed += value.len() as u64;
            self.log.advance_exec();
        }
        if self.stuck.0 != self.log.exec_next() {
            self.stuck = (self.log.exec_next(), ctx.now);
            // Rule 3, continued: the execution point moved on to the slots of an owner we
            // revoked a moment ago and still suspect: take over its next window now rather
            // than a heartbeat later, so a long outage costs throughput only once.
            if self.revocation.is_none() {
                self.unblock(ctx);
            }
        }
        self.maybe_snapshot(ctx);
    }

    // --- snapshots and log compaction --------------------------------------------------------

    fn maybe_snapshot(&mut self, ctx: &mut Ctx<'_>) {
        let every = self.params.snapshot_every;
        let done = self.log.executed_upto();
        let last = self.snapshot.as_ref().map_or(0, |(upto, _)| *upto);
        if every > 0 && !self.snapshot_pending && done >= last + every {
            self.snapshot_pending = true;
            ctx.push(synod_core::Action::TakeSnapshot { token: done });
        }
    }

    /// The records that, after a snapshot of every slot up to `upto`, stand for this
    /// replica's durable state: the snapshot, then what it holds for each later slot.
    fn image(&self, upto: u64, data: Bytes) -> Vec<Vec<Bytes>> {
        let mut image = vec![encode_with_payload(&Record::Snapshot { upto, data: Bytes::new() }, data)];
        for (slot, s) in self.log.range(upto + 1, self.log.last_index()) {
            let owner = self.owner(slot);
            let rec = match (&s.state, &s.value.accepted) {
                (SlotState::InProgress, Some((ballot, value))) => {
                    Record::Accepted { slot, ballot: *ballot, value: value.clone() }
                }
                (SlotState::InProgress, None) => {
                    Record::Promised { ballot: s.value.promised, owner, from: slot, to: slot }
                }
                (_, Some((_, value))) => Record::Chosen { slot, value: value.clone() },
                (_, None) => continue,
            };
            image.push(vec![encode(&rec)]);
            if s.state == SlotState::InProgress && s.value.accepted.as_ref().is_some_and(|(b, _)| *b < s.value.promised)
            {
                let rec = Record::Promised { ballot: s.value.promised, owner, from: slot, to: slot };
                image.push(vec![encode(&rec)]);
            }
        }
        image
    }

    fn on_snapshot_taken(&mut self, ctx: &mut Ctx<'_>, upto: u64, data: Bytes) {
        self.snapshot_pending = false;
        if self.snapshot.as_ref().is_some_and(|(u, _)| *u >= upto) {
            return;
        }
        let image = self.image(upto, data.clone());
        ctx.push(compaction(upto, image, true));
        self.snapshot = Some((upto, data));
        let keep = self.params.snapshot_keep;
        self.log.trim_before((upto + 1).saturating_sub(keep).max(1));
        self.waiting.retain(|s, _| *s >= self.log.first_index());
    }

    fn send_snapshot(&mut self, ctx: &mut Ctx<'_>, to: NodeId) {
        let Some((upto, data)) = self.snapshot.clone() else { return };
        if self.snapshot_sent.get(&to).is_some_and(|t| ctx.now.since(*t) < self.timeout_max()) {
            return;
        }
        self.snapshot_sent.insert(to, ctx.now);
        ctx.send(to, &Msg::Snapshot { upto, data });
    }

    /// A peer's snapshot of every slot up to `upto`: install it if it takes us forward, and
    /// make it durable (synchronously: what we do next depends on it).
    fn on_snapshot(&mut self, ctx: &mut Ctx<'_>, upto: u64, data: Bytes) {
        // However far ahead: a snapshot replaces the state (skipping to it allocates nothing),
        // and a replica more than MAX_AHEAD slots behind can only catch up this way (it
        // ignores slots that far ahead) — refusing it stalled a replica back from a long
        // outage, and with it every slot it owns at the others' frontier.
        if upto < self.log.exec_next() || !synod_core::session::StateMachine::is_valid_snapshot(&data) {
            return;
        }
        ctx.push(synod_core::Action::InstallSnapshot { data: data.clone() });
        self.log.skip_to(upto + 1);
        self.saw(upto);
        let below: Vec<u64> = self.proposals.range(..=upto).map(|(s, _)| *s).collect();
        for s in below {
            if let Some(p) = self.proposals.remove(&s) {
                self.requeue(p.waiters, &p.value);
            }
        }
        self.waiting.retain(|s, _| *s > upto);
        if self.next_own <= upto {
            self.next_own = self.first_own_from(upto + 1);
        }
        let image = self.image(upto, data.clone());
        ctx.push(compaction(upto, image, false));
        self.snapshot = Some((upto, data));
        self.stuck = (self.log.exec_next(), ctx.now);
        self.execute(ctx);
    }

    // --- liveness: heartbeats, retransmission, stuck slots, catch-up --------------------------

    fn on_tick(&mut self, ctx: &mut Ctx<'_>) {
        ctx.set_timer(TIMER_TICK, self.params.heartbeat());
        ctx.broadcast(&self.heartbeat());
        // Retransmit phase 2s that have waited two heartbeats, grouped by ballot.
        let resend_after = self.params.heartbeat() * 2;
        let mut by_ballot: BTreeMap<Ballot, Vec<(u64, Value)>> = BTreeMap::new();
        for (slot, p) in self.proposals.iter_mut() {
            if ctx.now.since(p.sent_at) >= resend_after {
                p.sent_at = ctx.now;
                by_ballot.entry(p.ballot).or_default().push((*slot, p.value.clone()));
            }
        }
        for (ballot, entries) in by_ballot {
            for chunk in entries.chunks(self.params.catchup_chunk.max(1)) {
                ctx.broadcast(&Msg::Accept { ballot, entries: chunk.to_vec() });
            }
        }
        if let Some(r) = &self.revocation {
            if ctx.now.since(r.started) > self.timeout_max() {
                self.revocation = None; // retried below with a higher ballot
            }
        }
        self.unblock(ctx);
        self.propose_own(ctx);
    }

    /// The execution point has not moved for a while: finish our own slot, or revoke the
    /// owner's (Rule 3).
    fn unblock(&mut self, ctx: &mut Ctx<'_>) {
        let s = self.log.exec_next();
        if s > self.max_seen {
            // Idle: nothing to wait for. The stall clock starts when a slot past the
            // execution point is first seen, not when the execution point last moved — else
            // the first command after an idle second finds every replica "stuck for long"
            // and all of them revoke at once, a duel that never ends when a phase 1 round
            // trip is a good part of the timeout (wide-area RTTs, EPaxos Fig. 4 at 5 sites).
            self.stuck = (s, ctx.now);
            return;
        }
        if self.log.is_committed(s) || self.proposals.contains_key(&s) {
            return;
        }
        let waited = ctx.now.since(self.stuck.1);
        let owner = self.owner(s);
        // An owner we revoked a moment ago and still suspect: keep revoking its slots as the
        // log reaches them ("live replicas commit no-ops periodically until the failed
        // replica recovers"), instead of letting the log stall a timeout before each window.
        let revoking = owner != self.id
            && self.suspected(owner, ctx.now)
            && self.revoked_at.get(&owner).is_some_and(|t| ctx.now.since(*t) <= self.timeout_max());
        if waited < self.timeout_min() && !revoking {
            return;
        }
        if owner == self.id {
            if waited < self.timeout_max() * 2 {
                self.finish_own(ctx, s);
            } else if self.revocation.is_none() {
                // Our own ballot keeps being refused (an unfinished revocation holds
                // promises above it): decide the slot with full Paxos ourselves.
                self.start_revocation(ctx, owner, s);
            }
            return;
        }
        let long = waited > self.timeout_max() * 4;
        if self.revocation.is_none()
            && (self.suspected(owner, ctx.now) || long)
            && (long || self.revoker_of(owner, ctx.now) == Some(self.id))
        {
            self.start_revocation(ctx, owner, s);
        }
    }

    /// Our own slot `s` is undecided and we have no proposal for it (lost by a restart):
    /// propose again what we accepted there at our ballot, or skip it if nothing.
    fn finish_own(&mut self, ctx: &mut Ctx<'_>, s: u64) {
        let mine = Self::own_ballot(self.id);
        if self.promised(s) > mine {
            return; // being taken over
        }
        let value = match self.log.get(s).and_then(|i| i.value.accepted.clone()) {
            Some((b, v)) if b == mine => v,
            Some(_) => return,
            None => Value::new(),
        };
        self.move_past(s);
        self.propose(ctx, mine, vec![(s, value, Vec::new())]);
    }

    fn on_heartbeat(&mut self, ctx: &mut Ctx<'_>, from: NodeId, exec_next: u64, max_seen: u64, next_own: u64) {
        let _ = next_own;
        if exec_next < self.log.first_index() {
            self.send_snapshot(ctx, from);
            return;
        }
        // Catch-up: send what the peer has not executed and we know chosen.
        let upto = self.log.committed_prefix();
        if exec_next <= upto && exec_next >= self.log.first_index() {
            let last = upto.min(exec_next + self.params.catchup_chunk.max(1) as u64 - 1);
            let entries: Vec<(u64, Value)> = (exec_next..=last)
                .filter_map(|s| self.log.get(s).and_then(|i| i.value.accepted.as_ref()).map(|(_, v)| (s, v.clone())))
                .collect();
            if !entries.is_empty() {
                ctx.send(from, &Msg::Commit { entries });
            }
        }
        if self.in_window(max_seen) {
            self.saw(max_seen);
        }
        self.skip_below(ctx, max_seen.min(self.max_seen));
    }
}

impl Protocol for Mencius {
    fn recover(&mut self, ctx: &mut Ctx<'_>, records: Vec<bytes::Bytes>) {
        let mine = Self::own_ballot(self.id);
        for bytes in records {
            let Ok(rec) = decode::<Record>(&bytes) else { continue };
            match rec {
                Record::Accepted { slot, ballot, value } => {
                    self.saw(slot);
                    self.max_round = self.max_round.max(ballot.round);
                    if !self.log.is_committed(slot) && ballot >= self.promised(slot) {
                        self.log.set(
                            slot,
                            Inst { promised: ballot, accepted: Some((ballot, value)) },
                            SlotState::InProgress,
                        );
                    }
                }
                Record::Promised { ballot, owner, from, to } => {
                    self.max_round = self.max_round.max(ballot.round);
                    let _ = self.promise_slots(ballot, owner, from, to);
                }
                Record::Chosen { slot, value } => {
                    let mut sink = Vec::new();
                    self.learn_chosen(slot, value, &mut sink);
                }
                Record::Snapshot { upto, data } => {
                    if upto >= self.log.exec_next() {
                        ctx.push(synod_core::Action::InstallSnapshot { data: data.clone() });
                        self.log.skip_to(upto + 1);
                        self.saw(upto);
                    }
                    self.snapshot = Some((upto, data));
                }
            }
        }
        self.next_own = self.first_own_from(self.max_seen + 1);
        // Own slots accepted at our ballot but not known chosen: finish them.
        let pending: Vec<(u64, Value)> = self
            .log
            .range(self.log.exec_next(), self.max_seen)
            .filter(|(s, i)| {
                self.owner(*s) == self.id
                    && i.state == SlotState::InProgress
                    && i.value.accepted.as_ref().is_some_and(|(b, _)| *b == mine)
                    && i.value.promised == mine
            })
            .map(|(s, i)| (s, i.value.accepted.clone().expect("filtered").1))
            .collect();
        for (slot, value) in pending {
            let mut acks = self.majority();
            acks.ack(self.id);
            self.proposals
                .insert(slot, Proposal { ballot: mine, value, acks, waiters: Vec::new(), sent_at: Time::ZERO });
        }
        self.stuck = (self.log.exec_next(), ctx.now);
        self.execute(ctx);
        ctx.set_timer(TIMER_TICK, self.params.heartbeat());
    }

    fn on_event(&mut self, ctx: &mut Ctx<'_>, event: Event) {
        match event {
            Event::Message { from, msg, .. } => {
                if !self.members.contains(&from) || from == self.id {
                    return;
                }
                self.heard.insert(from, ctx.now);
                let Ok(msg) = decode::<Msg>(&msg) else { return };
                match msg {
                    Msg::Accept { ballot, entries } => self.on_accept(ctx, from, ballot, entries),
                    Msg::Accepted { ballot, slots } => self.on_accepted(ctx, from, ballot, slots),
                    Msg::Nack { ballot, slot, promised } => self.on_nack(ctx, from, ballot, slot, promised),
                    Msg::Commit { entries } => self.on_commit(ctx, from, entries),
                    Msg::Prepare { ballot, owner, from: lo, to } => self.on_prepare(ctx, from, ballot, owner, lo, to),
                    Msg::Promise { ballot, reported, .. } => self.on_promise(ctx, from, ballot, reported),
                    Msg::Heartbeat { exec_next, max_seen, next_own } => {
                        self.on_heartbeat(ctx, from, exec_next, max_seen, next_own)
                    }
                    Msg::Snapshot { upto, data } => self.on_snapshot(ctx, upto, data),
                }
            }
            Event::Request { client, cmd, .. } => self.on_request(ctx, client, cmd),
            Event::Timer(TIMER_TICK) => self.on_tick(ctx),
            Event::SnapshotTaken { token, data } => self.on_snapshot_taken(ctx, token, data),
            Event::Timer(_) | Event::Persisted { .. } => {}
            Event::Reconfigure { client, id, .. } => {
                let body = ReplyBody::Invalid { reason: "mencius does not support membership changes".into() };
                ctx.reply(client, synod_core::Reply { client: 0, seq: id, from: self.id, body });
            }
        }
    }

    fn status(&self) -> Status {
        let mut extra = BTreeMap::new();
        extra.insert("next_own".into(), self.next_own.to_string());
        extra.insert("max_seen".into(), self.max_seen.to_string());
        extra.insert("skips".into(), self.skips.to_string());
        extra.insert("revocations".into(), self.revocations.to_string());
        extra.insert("commands_executed".into(), self.cmds_executed.to_string());
        extra.insert("snapshot_upto".into(), self.snapshot.as_ref().map_or(0, |(u, _)| *u).to_string());
        extra.insert("log_first".into(), self.log.first_index().to_string());
        Status {
            id: self.id,
            protocol: "mencius".into(),
            role: Role::Replica,
            ballot: format!("{}", self.max_round),
            leader: None,
            commit_index: self.log.committed_prefix(),
            execute_index: self.log.executed_upto(),
            extra,
        }
    }

    fn describe_message(&self, msg: &[u8]) -> String {
        match decode::<Msg>(msg) {
            Ok(Msg::Accept { ballot, entries }) => {
                let slots: Vec<String> = entries.iter().map(|(s, v)| format!("{s}:{}", v.len())).collect();
                format!("Accept b={ballot} [{}]", slots.join(" "))
            }
            Ok(Msg::Accepted { ballot, slots }) => format!("Accepted b={ballot} {slots:?}"),
            Ok(Msg::Nack { ballot, slot, promised }) => format!("Nack b={ballot} slot={slot} promised={promised}"),
            Ok(Msg::Commit { entries }) => {
                format!("Commit {:?}", entries.iter().map(|(s, _)| *s).collect::<Vec<_>>())
            }
            Ok(Msg::Prepare { ballot, owner, from, to }) => format!("Prepare b={ballot} owner={owner} {from}..={to}"),
            Ok(Msg::Promise { ballot, reported, .. }) => format!("Promise b={ballot} reported={}", reported.len()),
            Ok(Msg::Heartbeat { exec_next, max_seen, next_own }) => {
                format!("Heartbeat exec={exec_next} seen={max_seen} own={next_own}")
            }
            Ok(Msg::Snapshot { upto, data }) => format!("Snapshot upto={upto} ({} bytes)", data.len()),
            Err(_) => format!("<{} undecodable bytes>", msg.len()),
        }
    }
}

#[cfg(feature = "mutants")]
pub mod mutants {
    use super::*;

    pub fn build_revoke_without_prepare(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
        Ok(Box::new(Mencius::new(setup, Variant { revoke_without_prepare: true })?))
    }
}
