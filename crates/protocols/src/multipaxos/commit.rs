//! 3. **Commit notification, the leader's periodic message, and execution.**
//!
//! The leader's committed prefix rides on every `Accept` and on periodic `Heartbeat`s (or the
//! layer's replacement for them, e.g. HoliPaxos's control message). A follower marks a slot
//! committed only if it accepted it in the leader's ballot (so it holds exactly the leader's
//! value), and fetches anything else (`catchup.rs`). The same periodic message is the
//! followers' failure detector: hearing it re-arms their election timers. Committed slots are
//! executed in slot order: commands go to the state machine, membership entries change the
//! configuration (`membership.rs`), layer entries go to the layer.
//!
//! Layer hooks here: `heartbeat`, `heartbeat_penalty`, `rejects_stale_leaders`,
//! `on_leader_heard`, `on_message`, `after_beat`, `on_executed`.

use super::*;

impl MultiPaxos {
    /// The leader's periodic message: MultiPaxos's heartbeat, or the layer's replacement
    /// (HoliPaxos's single control message, §3.4), at an interval the layer may stretch
    /// (HoliPaxos Rule 1).
    pub(super) fn send_heartbeat(&mut self, ctx: &mut Ctx<'_>) {
        match self.call_layer(|l, core| l.heartbeat(core)) {
            Some(beat) => ctx.broadcast(&Msg::Layer(beat)),
            None => ctx.broadcast(&Msg::Heartbeat { ballot: self.promised, commit_upto: self.log.committed_prefix() }),
        }
        self.lease_request(ctx);
        let every = self.params.heartbeat() * self.layer.heartbeat_penalty(ctx.now);
        ctx.set_timer(TIMER_HEARTBEAT, every);
    }

    /// Leader tick: heartbeat, and re-send Accepts that have not gathered a quorum in time
    /// (messages may be lost).
    pub(super) fn on_heartbeat_timer(&mut self, ctx: &mut Ctx<'_>) {
        if self.role != Role::Leader {
            return;
        }
        let resend_after = self.params.heartbeat() * 2;
        let stuck_after = Duration::from_millis(self.params.election_timeout_max_ms) * 3;
        // A slot a majority accepted long ago that still misses its (larger) quorum: the
        // codec's configuration needs acceptors that are gone. Phase 1 again (we stay leader
        // if we win), re-proposing it under a fresh ballot. Not when fewer than a majority
        // answer (a partition: a new ballot would only disrupt whoever leads the majority).
        let stuck = |f: &InFlight| {
            ctx.now.since(f.proposed_at) >= stuck_after && !f.acks.reached() && f.acks.count() >= self.prepare_quorum
        };
        if self.codec.reprepare_stuck() && self.in_flight.values().any(stuck) {
            self.phase1(ctx, true);
            return;
        }
        // Fast Paxos (`crate::fastpaxos`): recover fast slots that stayed undecided.
        if self.fast_tick(ctx) {
            return;
        }
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
                // Each acceptor's piece (the whole value, or its shards: the codec's).
                let mut same: Option<Bytes> = None;
                for to in missing {
                    let value = self.codec.piece_for(&e.value.value, &self.members, to);
                    let bytes = match (&same, value == e.value.value) {
                        (Some(b), true) => b.clone(),
                        (_, whole) => {
                            let b = encode(&Msg::Accept { ballot, slot, value, commit_upto });
                            if whole {
                                same = Some(b.clone());
                            }
                            b
                        }
                    };
                    ctx.push(Action::Send { to, msg: bytes });
                }
            }
        }
        self.persist_commit_marker(ctx);
        self.send_heartbeat(ctx);
        // The leader completes committed slots it holds only in part too (after a failover).
        self.fill(ctx);
    }

    /// A leader with a lower ballot than ours is alive and we are not campaigning: if the
    /// higher ballot is our own, from an election we gave up (e.g. while cut off from the
    /// cluster, after which Rule 2 keeps us passive), forget it rather than make the working
    /// leader step down with a rejection (§3.1.1 rejects heartbeats of *older leaders*; we
    /// never led with that ballot). Safe because only we propose with our ballot and we never
    /// ran phase 2 with it (`led`, durable, is below it; not leader, no election running), and
    /// never will (our next ballot is chosen above `max_seen`, which keeps it); acceptors that
    /// promised it still reject the lower ballot. Never below a ballot we led with (`led`):
    /// we accepted our own values in it (found by the simulator, idem seed 3349: a replica
    /// that led 2.2, restarted, campaigned with 3.2 and gave up, then took an Accept of 1.1
    /// for a slot it had accepted in 2.2, and two values were chosen for it). The durable promise stays higher
    /// (conservative after a restart).
    pub(super) fn drop_abandoned_ballot(&mut self, ballot: Ballot) {
        if ballot < self.promised
            && self.promised.node == self.id
            && self.promised > self.led
            && ballot >= self.promised_other
            && ballot >= self.led
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
    pub(crate) fn follow(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot) -> bool {
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
                //
                // So the failure detector's leader is also where this replica sends work
                // (clients redirected here, a layer's messages to the leader such as IDEM's
                // REQUIREs), not the candidate it promised, which never led (it gave up or
                // is cut off): otherwise nothing reaches the stale leader, it never proposes,
                // never learns of the higher ballot, and nobody campaigns again (found by the
                // simulator: idem, 5 replicas, seed 1000907 — followers that promised an
                // abandoned candidate's ballot sent their REQUIREs to it, the stale leader
                // never gathered f + 1 and the cluster stalled). Idle, nothing changes.
                self.reset_election_timer(ctx);
                self.heard_leader(ctx.now, from);
                self.leader = Some(from);
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

    /// The core's heartbeat: follow its leader and learn its committed prefix.
    pub(super) fn on_heartbeat(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, commit_upto: u64) {
        if !self.follow(ctx, from, ballot) {
            return;
        }
        self.learn_commit(ctx, from, ballot, commit_upto);
        self.persist_commit_marker(ctx);
    }

    /// A layer message: the layer decodes it and tells the core what to do with it.
    pub(super) fn on_layer_msg(&mut self, ctx: &mut Ctx<'_>, from: NodeId, msg: Bytes) {
        match self.call_layer(|l, core| l.on_message(core, ctx, from, &msg)) {
            LayerMsg::Handled => {}
            LayerMsg::Beat { ballot, commit_upto, trim_bound } => {
                self.on_layer_beat(ctx, from, ballot, commit_upto, trim_bound)
            }
            LayerMsg::Trim(bound) => {
                if let Some(bound) = bound {
                    self.trim_bound = self.trim_bound.max(bound);
                }
                self.trim_log();
            }
        }
    }

    /// The layer's replacement for the heartbeat (HoliPaxos's control message): follow,
    /// commit up to `commit_upto`, trim up to `trim_bound`, make the commit marker durable,
    /// then let the layer answer (HoliPaxos reports our LE, durable first, so a restart
    /// never executes less than what GLE was computed from).
    pub(super) fn on_layer_beat(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: NodeId,
        ballot: Ballot,
        commit_upto: u64,
        trim_bound: u64,
    ) {
        if !self.follow(ctx, from, ballot) {
            return;
        }
        self.learn_commit(ctx, from, ballot, commit_upto);
        self.trim_bound = self.trim_bound.max(trim_bound);
        self.trim_log();
        self.persist_commit_marker(ctx);
        self.call_layer(|l, core| l.after_beat(core, ctx, from, ballot));
    }

    /// The leader (in `ballot`) says everything up to `commit_upto` is chosen. Slots we
    /// accepted in that ballot hold the leader's value and are committed; anything else is
    /// fetched.
    pub(crate) fn learn_commit(&mut self, ctx: &mut Ctx<'_>, leader: NodeId, ballot: Ballot, commit_upto: u64) {
        self.leader_commit = self.leader_commit.max(commit_upto);
        let mut slot = self.log.committed_prefix() + 1;
        while slot <= commit_upto {
            match self.log.get(slot) {
                Some(s) if s.state == SlotState::InProgress && s.value.ballot == ballot && !s.value.fast => {
                    self.log.mark_committed(slot);
                }
                Some(s) if s.state != SlotState::InProgress => {}
                _ => break,
            }
            slot += 1;
        }
        self.execute(ctx);
        self.request_catchup(ctx, leader);
        self.fill(ctx);
    }

    /// Make the committed prefix durable (`CommitUpto`) when it moved.
    pub(super) fn persist_commit_marker(&mut self, ctx: &mut Ctx<'_>) {
        let c = self.log.committed_prefix();
        if c > self.persisted_commit {
            self.persisted_commit = c;
            self.persist(ctx, &[Record::CommitUpto(c)]);
        }
    }

    // ---------------------------------------------------------------------------------------
    // Execution in slot order
    // ---------------------------------------------------------------------------------------

    /// Execute committed slots in slot order: commands go to the state machine (answering
    /// the clients waiting here), layer entries to the layer, membership entries change the
    /// configuration; then maybe take a snapshot. A slot held only in part (some shards of
    /// a coded value) stops execution until `fill.rs` completes it.
    pub(crate) fn execute(&mut self, ctx: &mut Ctx<'_>) {
        let mut markers = Vec::new();
        let mut config = None;
        while let Some((slot, entry)) = self.log.next_to_execute() {
            let Some(value) = self.codec.payload(&entry.value) else { break };
            let clients = self.waiting.remove(&slot).unwrap_or_default();
            match value.as_ref() {
                Value::Cmds(batch) => {
                    for (i, cmd) in batch.iter().enumerate() {
                        let layer_reply = self.layer.on_command_executed(ctx.now, cmd);
                        let reply = Waiter::matching(clients.get(i), cmd).or(layer_reply);
                        ctx.apply(Pos::slot(slot, i as u32), cmd.clone(), reply);
                    }
                    self.cmds_executed += batch.len() as u64;
                }
                Value::Layer(e) => markers.push((slot, e.clone())),
                Value::Config(m) => config = Some((slot, m.clone())),
                // `payload` gives an executable value; a codec that returned a piece is a bug
                // that must not execute anything: stop here as for an incomplete slot.
                Value::Coded(_) => break,
            }
            self.log.advance_exec();
            // Layer entries act in order with the commands around them.
            for (slot, e) in markers.drain(..) {
                self.call_layer(|l, core| l.on_executed(core, ctx, slot, &e));
            }
            if let Some((slot, m)) = config.take() {
                self.apply_config(ctx, slot, m);
            }
        }
        self.maybe_snapshot(ctx);
    }
}
