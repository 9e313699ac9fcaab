//! 2. **Normal operation: phase 2, pipelined and batched.**
//!
//! The leader batches client requests (the requests of one driver turn, proposed at its end,
//! `Protocol::flush`; adaptively, whatever queued while the pipeline window was full),
//! assigns the next slot and runs phase 2 (`Accept` / `Accepted`)
//! with many slots in flight; its own acceptance is persisted before the Accepts leave. A
//! slot is chosen when a quorum accepted it; chosen slots are executed in slot order
//! (`commit.rs`). An acceptor takes an Accept of a ballot at least its promise, persists it,
//! then answers.

use super::*;

impl MultiPaxos {
    /// Send a client to the leader we know of.
    pub(super) fn redirect(&self, ctx: &mut Ctx<'_>, client: ClientRef, cmd: &Command) {
        let leader = self.leader.filter(|l| *l != self.id);
        ctx.answer(client, cmd, ReplyBody::NotLeader { leader });
    }

    /// A client request: the leader queues it and proposes it at the end of the turn with
    /// every other request of the turn in one slot ([`Protocol::flush`]), a candidate holds
    /// it, anyone else redirects.
    pub(super) fn on_request(&mut self, ctx: &mut Ctx<'_>, client: ClientRef, cmd: Command) {
        // A read the lease covers is answered at once, without a slot (`lease.rs`).
        let Some(cmd) = self.try_lease_read(ctx, client, cmd) else { return };
        if self.fast.is_some() {
            // Fast Paxos: every acceptor votes the request itself (`crate::fastpaxos`).
            return self.fast_request(ctx, Some(client), cmd);
        }
        match self.role {
            // A candidate may win shortly: hold the request rather than bounce it.
            Role::Leader | Role::Candidate => self.queue.push(Some(client), cmd),
            _ => self.redirect(ctx, client, &cmd),
        }
    }

    /// Propose queued requests while the pipeline window has room: at the end of each turn
    /// (all the turn's requests in one slot, up to `max_batch`), and whenever slots commit
    /// (what queued while the window was full).
    pub(super) fn propose_queued(&mut self, ctx: &mut Ctx<'_>) {
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
    pub(super) fn propose(&mut self, ctx: &mut Ctx<'_>, proposals: Vec<(Value, Vec<Option<Waiter>>)>) {
        if proposals.is_empty() {
            return;
        }
        let mut records = Vec::new();
        let mut sends = Vec::new();
        for (value, clients) in proposals {
            let slot = self.next_slot;
            self.next_slot += 1;
            // The codec: what we keep, what each acceptor gets, how many acceptances commit.
            let proposal = self.codec.encode(ctx.now, slot, self.promised, value, &self.members, self.id);
            self.log.set(
                slot,
                Entry { ballot: self.promised, value: proposal.own.clone(), fast: false },
                SlotState::InProgress,
            );
            records.push(Record::Accept { slot, ballot: self.promised, value: proposal.own });
            sends.push((slot, proposal.pieces, proposal.quorum, clients));
        }
        // Persist our own acceptance before the Accepts leave (driver contract), so counting
        // ourselves in the quorum is safe.
        self.persist(ctx, &records);
        for (slot, pieces, quorum, clients) in sends {
            self.track(ctx, slot, clients, quorum);
            self.send_accepts(ctx, slot, pieces);
        }
        self.commit_ready(ctx);
    }

    /// Send the Accepts of `slot` in our ballot: one broadcast, or each acceptor its piece.
    pub(crate) fn send_accepts(&mut self, ctx: &mut Ctx<'_>, slot: u64, pieces: Pieces) {
        let ballot = self.promised;
        let commit_upto = self.log.committed_prefix();
        match pieces {
            Pieces::Same(value) => ctx.broadcast(&Msg::Accept { ballot, slot, value, commit_upto }),
            Pieces::Each(each) => {
                for (to, value) in each {
                    if to != self.id {
                        ctx.send(to, &Msg::Accept { ballot, slot, value, commit_upto });
                    }
                }
            }
        }
    }

    /// Leader bookkeeping for a slot just proposed: its acks (ours included, `quorum`
    /// commit it; the mutation tests' override wins) and the clients waiting for it.
    pub(crate) fn track(&mut self, ctx: &mut Ctx<'_>, slot: u64, clients: Vec<Option<Waiter>>, quorum: usize) {
        let mut acks = QuorumTracker::new(self.variant.quorum_override.unwrap_or(quorum));
        acks.ack(self.id);
        let cmds = clients.len();
        if clients.iter().any(|c| c.is_some()) {
            self.waiting.insert(slot, clients);
        }
        self.in_flight.insert(slot, InFlight { acks, sent_at: ctx.now, proposed_at: ctx.now, cmds });
    }

    /// Phase 2b at an acceptor: take an Accept of a ballot at least our promise (following its
    /// leader), persist it, answer, and learn the leader's committed prefix.
    pub(super) fn on_accept(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: NodeId,
        ballot: Ballot,
        slot: u64,
        value: Value,
        commit: u64,
    ) {
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
        let mut outvoted = None;
        if !self.log.is_committed(slot) {
            if self.fast.is_some() {
                // A fast vote of ours replaced by the leader's value (`crate::fastpaxos`).
                outvoted = self.log.get(slot).filter(|s| s.value.fast).map(|s| s.value.value.clone());
            }
            // Persist what arrived; hold it pooled with what we had of the same payload (a
            // coded piece never loses a shard: replay pools the records the same way).
            let held = self.codec.merge(self.log.get(slot).map(|s| &s.value.value), value.clone());
            self.log.set(slot, Entry { ballot, value: held, fast: false }, SlotState::InProgress);
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
        if let Some(old) = outvoted {
            if let Some(Entry { value, .. }) = self.log.get(slot).map(|s| &s.value) {
                let chosen = value.clone();
                self.revote_losers(ctx, old, &chosen);
            }
        }
    }

    /// An acceptance of one of our slots: a quorum commits it.
    pub(super) fn on_accepted(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, slot: u64) {
        // Only members count: every slot in flight is governed by the current configuration
        // (a membership entry stops the pipeline until it is executed).
        if self.role != Role::Leader || ballot != self.promised || !self.members.contains(&from) {
            return;
        }
        let reached = match self.in_flight.get_mut(&slot) {
            Some(f) => {
                if !f.acks.has(from) {
                    self.codec.on_accepted(ctx.now, from, slot);
                }
                f.acks.ack(from)
            }
            None => false,
        };
        if reached {
            self.commit_ready(ctx);
        }
    }

    /// Mark every in-flight slot that has a quorum committed, then execute and refill the
    /// pipeline.
    pub(crate) fn commit_ready(&mut self, ctx: &mut Ctx<'_>) {
        let done: Vec<u64> = self.in_flight.iter().filter(|(_, f)| f.acks.reached()).map(|(s, _)| *s).collect();
        for slot in &done {
            self.in_flight.remove(slot);
            self.log.mark_committed(*slot);
        }
        if !done.is_empty() {
            self.execute(ctx);
            if self.layer.commit_promptly() {
                ctx.broadcast(&Msg::Heartbeat { ballot: self.promised, commit_upto: self.log.committed_prefix() });
            }
            self.propose_queued(ctx);
        }
    }
}
