//! 1. **Leader election: phase 1, once for all future slots.**
//!
//! A member whose election timer expires campaigns (or, if its layer says so, probes with
//! the null ballot): it promises itself a ballot above every ballot it saw and sends
//! `Prepare` from its committed prefix on. Acceptors promise a higher ballot and report what
//! they accepted from that slot (or answer `Behind` to a candidate more than a catch-up chunk
//! behind, or `Nack` to a lower ballot). A quorum of promises makes the candidate leader: it
//! learns the values some acceptor knows are chosen, re-proposes under its own ballot the
//! highest-ballot value each other slot was accepted with, and fills holes with no-ops.
//!
//! Layer hooks here: `campaign`, `on_probe`, `on_campaign`, `screen_prepare`,
//! `on_phase1_answer`, `on_nack`, `on_become_leader`, `on_leadership_lost`.

use super::*;

impl MultiPaxos {
    /// The election timer expired without word from a leader: campaign, or probe if the
    /// layer says this replica cannot reach a quorum. Learners and removed replicas never
    /// campaign.
    pub(super) fn on_election_timer(&mut self, ctx: &mut Ctx<'_>) {
        if self.role == Role::Leader {
            return;
        }
        if !self.is_member() || self.lease_blocks(ctx.now, self.id) {
            // A learner or a removed replica: keep following, never campaign. Nor while a
            // lease we granted to another leader runs (`lease.rs`): our own vote is bound.
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
    pub(super) fn probe(&mut self, ctx: &mut Ctx<'_>) {
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
    pub(super) fn note_response(&mut self, ballot: Ballot, from: NodeId) {
        self.layer.on_phase1_answer(from, ballot, self.quorum);
    }

    /// Campaign with a new ballot.
    pub(super) fn start_election(&mut self, ctx: &mut Ctx<'_>) {
        self.phase1(ctx, true);
    }

    /// Run phase 1: `fresh` with a new ballot (an election), otherwise again in the ballot
    /// this leader already holds, after a membership entry took effect: the promises it
    /// collected came from a quorum of the old configuration, and slots after the entry are
    /// governed by the new one (docs/design.md, "Membership"). Acceptors that promised the
    /// ballot already just answer again; the followers keep following.
    pub(crate) fn phase1(&mut self, ctx: &mut Ctx<'_>, fresh: bool) {
        let ballot = if fresh { self.promised.max(self.max_seen).next_for(self.id) } else { self.promised };
        self.promised = ballot;
        self.role = Role::Candidate;
        self.leader = if fresh { None } else { Some(self.id) };
        self.in_flight.clear();
        self.lease_reset();
        self.fast_close();
        if fresh {
            self.layer.on_campaign(ctx.now, ballot);
        }
        let from_slot = self.log.committed_prefix() + 1;
        let mut election =
            Election { promises: QuorumTracker::new(self.prepare_quorum), found: BTreeMap::new(), from_slot };
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
    pub(super) fn accepted_from(&self, from_slot: u64) -> Vec<AcceptedSlot> {
        self.log
            .range(from_slot, self.log.last_index())
            .map(|(slot, s)| AcceptedSlot {
                slot,
                ballot: s.value.ballot,
                value: s.value.value.clone(),
                committed: s.state != SlotState::InProgress,
                fast: s.value.fast,
            })
            .collect()
    }

    /// Fold a promise's accepted slots into the election. The codec decides each slot from
    /// every report once a quorum promised (`become_leader`): plain Paxos takes a value some
    /// acceptor knows is chosen, otherwise the highest-ballot one; an erasure code pools the
    /// shards of that payload first.
    pub(super) fn merge_promise(election: &mut Election, accepted: Vec<AcceptedSlot>) {
        for a in accepted {
            if a.slot < election.from_slot {
                continue;
            }
            election.found.entry(a.slot).or_default().push(a);
        }
    }

    /// Phase 1b at an acceptor: the layer may refuse first, then the ballot rules (promise a
    /// higher ballot, persisted before the answer; refuse a lower one with a `Nack`).
    pub(super) fn on_prepare(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, from_slot: u64) {
        if !self.members.contains(&from) {
            // A removed replica (or one whose addition we have not executed yet) must not
            // disrupt the configuration we know; it learns its fate from the log.
            return;
        }
        let reprepare = ballot == self.promised && ballot.node == from;
        if !reprepare && self.lease_blocks(ctx.now, from) {
            // We granted another leader a lease that still runs (`lease.rs`): no promise;
            // the candidate tries again after its election timeout.
            return;
        }
        if !reprepare {
            // The layer may refuse first (HoliPaxos: a probe, or a churner under Rule 3).
            let now = ctx.now;
            if let Some(promised) = self.call_layer(|l, core| l.screen_prepare(core, now, from, ballot)) {
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
    pub(super) fn on_behind(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, committed: u64) {
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

    /// A promise for our ballot: a candidate that gathers a quorum becomes leader; one that
    /// finds the acceptor trimmed slots it lacks gives up and fetches a snapshot first.
    pub(super) fn on_promise(
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
        // Past the quorum, later promises still add pieces a slot may need (`Undecided`).
        if election.promises.ack(from) || election.promises.reached() {
            self.become_leader(ctx);
        }
    }

    /// Phase 1 succeeded: re-propose what may have been chosen, fill holes with no-ops.
    /// The codec decides each slot from the promises' reports; if one is `Undecided` (a
    /// value known chosen that the promises so far cannot rebuild), wait for more promises.
    pub(super) fn become_leader(&mut self, ctx: &mut Ctx<'_>) {
        let Some(election) = self.election.take() else { return };
        let mut verdicts: BTreeMap<u64, Recovered> = BTreeMap::new();
        for (slot, reports) in &election.found {
            if *slot < election.from_slot || self.log.is_committed(*slot) {
                continue;
            }
            match self.codec.recover_among(reports, election.promises.count(), self.n()) {
                Recovered::Undecided => {
                    self.election = Some(election);
                    return;
                }
                v => {
                    verdicts.insert(*slot, v);
                }
            }
        }
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
        let mut found = verdicts;
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
                Some(Recovered::Chosen(v)) if !matches!(v, Value::Config(_)) => {
                    self.log.set(
                        slot,
                        Entry { ballot: Ballot::ZERO, value: v.clone(), fast: false },
                        SlotState::Committed,
                    );
                    records.push(Record::Chosen { slot, value: v });
                    learned = true;
                    continue;
                }
                Some(Recovered::Chosen(v)) | Some(Recovered::Propose(v)) => v,
                Some(Recovered::Free) | Some(Recovered::Undecided) | None => Value::noop(),
            };
            let config = matches!(value, Value::Config(_));
            let proposal = self.codec.encode(ctx.now, slot, ballot, value, &self.members, self.id);
            self.log.set(slot, Entry { ballot, value: proposal.own.clone(), fast: false }, SlotState::InProgress);
            records.push(Record::Accept { slot, ballot, value: proposal.own.clone() });
            proposals.push((slot, proposal));
            if config {
                self.config_pending = Some(slot);
                break;
            }
        }
        if let Some(s) = self.config_pending {
            self.next_slot = s + 1;
        }
        // Lease reads wait until every slot the election found is executed.
        self.lease_floor(self.next_slot - 1);
        if !records.is_empty() {
            self.persist(ctx, &records);
        }
        for (slot, proposal) in proposals {
            let n = proposal.own.len();
            self.track(ctx, slot, vec![None; n], proposal.quorum);
            self.send_accepts(ctx, slot, proposal.pieces);
        }
        self.layer.on_become_leader(ctx);
        self.send_heartbeat(ctx);
        // Fast Paxos (`crate::fastpaxos`): phase 2a "any" for every slot from here on; the
        // requests held while campaigning become this leader's fast votes.
        self.fast_open(ctx);
        self.propose_queued(ctx);
        self.commit_ready(ctx);
        if learned {
            // Slots learned as chosen are executed now, not only when a later proposal
            // commits (with no new client request there would be none).
            self.execute(ctx);
        }
    }

    /// Leave the leader/candidate role, answering queued clients with a redirect.
    pub(super) fn step_down(&mut self, ctx: &mut Ctx<'_>, leader: Option<NodeId>) {
        let was = self.role;
        self.role = Role::Follower;
        self.leader = leader;
        self.election = None;
        self.lease_reset();
        self.in_flight.clear();
        self.fast_close();
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

    /// A rejection: a leader or candidate outbid by a higher ballot steps down; the layer may
    /// also declare the candidacy doomed.
    pub(super) fn on_nack(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, promised: Ballot) {
        if !self.members.contains(&from) {
            return;
        }
        let verdict = self.call_layer(|l, core| l.on_nack(core, from, ballot, promised));
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
}
