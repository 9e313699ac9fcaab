//! The commit protocol of Fig. 2: Phase 1 (PreAccept), Phase 2 (Paxos-Accept), Commit.

use super::conflicts::{interfere, related_batches};
use super::msg::{Attrs, InstId, Msg, Phase, Proposal};
use super::{Epaxos, Lead, Step, MAX_BATCH_BYTES};
use synod_core::batch::Pending;
use synod_core::{session, Ballot, ClientRef, Command, Ctx, NodeId, Op, OpResult, ReplyBody};

impl Epaxos {
    // --- Phase 1: establish ordering constraints ------------------------------------------

    /// A client request makes this replica its command leader. Requests queue while
    /// `pipeline_window` own instances are in flight and then go out together in one
    /// instance (batching, §7.6).
    pub(super) fn on_request(&mut self, ctx: &mut Ctx<'_>, client: ClientRef, cmd: Command) {
        self.queue.push(Some(client), cmd);
        self.propose_when_due(ctx);
    }

    /// Propose what queued now (adaptive batching), or arm the `batch_ms` timer.
    pub(super) fn propose_when_due(&mut self, ctx: &mut Ctx<'_>) {
        match self.batch_every {
            None => self.propose_pending(ctx),
            Some(every) if !self.batch_timer_set && !self.queue.is_empty() => {
                self.batch_timer_set = true;
                ctx.set_timer(super::TIMER_BATCH, every);
            }
            Some(_) => {}
        }
    }

    /// The `batch_ms` timer: propose what queued (as far as the window allows).
    pub(super) fn on_batch_timer(&mut self, ctx: &mut Ctx<'_>) {
        self.batch_timer_set = false;
        self.propose_pending(ctx);
        self.propose_when_due(ctx);
    }

    pub(super) fn propose_pending(&mut self, ctx: &mut Ctx<'_>) {
        while !self.queue.is_empty() {
            let in_flight = self.proposed.len();
            if in_flight >= self.params.pipeline_window.max(1) {
                return;
            }
            let batch = self.queue.take(self.params.max_batch.max(1), MAX_BATCH_BYTES);
            self.count_towards_barrier(&batch);
            self.propose(ctx, batch);
        }
    }

    /// Session barriers (module docs): after `barrier_every` commands of our own, queue a
    /// barrier (it interferes with every command: [`super::conflicts::interfere`]). Counted
    /// when commands are proposed, so a replica that proposes nothing adds no barriers.
    fn count_towards_barrier(&mut self, batch: &[Pending]) {
        if self.barrier_every == 0 {
            return;
        }
        let commands = batch.iter().filter(|p| !session::is_barrier(&p.cmd)).count() as u64;
        self.since_barrier += commands;
        if self.since_barrier >= self.barrier_every {
            self.since_barrier = 0;
            self.counters.barriers += 1;
            self.queue.push(None, session::barrier());
        }
    }

    /// Lines 1–5: a new instance of our own, attributes from our log, PreAccept to the fast
    /// quorum (thrifty, §6.2).
    fn propose(&mut self, ctx: &mut Ctx<'_>, batch: Vec<Pending>) {
        let index = self.known[self.me] + 1;
        self.known[self.me] = index;
        let id = InstId { space: self.id, index };
        let cmds: Vec<Command> = batch.iter().map(|p| p.cmd.clone()).collect();
        let attrs = self.conflicts.attrs_for(&cmds);
        let ballot = Self::default_ballot(self.id);
        self.vote(id, ballot, Phase::PreAccepted, cmds.clone(), attrs.clone());
        self.persist(ctx, id);
        self.proposed.insert(index, batch);
        self.unsettled.insert(id, ctx.now);
        let deps_ok = !self.try_pre_accept || self.deps_committed(id, &cmds, &attrs);
        let step =
            Step::PreAccept { replies: Default::default(), fast: true, to_all: false, merged: attrs.clone(), deps_ok };
        self.leads.insert(id, Lead { ballot, step, since: ctx.now });
        let msg = Msg::PreAccept(Proposal { ballot, inst: id, cmds, attrs });
        for peer in self.fast_peers(ctx.now) {
            ctx.send(peer, &msg);
        }
        self.check_pre_accept(ctx, id);
    }

    /// Record this replica's vote for an instance (pre-accept or accept) at `ballot`.
    pub(super) fn vote(&mut self, id: InstId, ballot: Ballot, phase: Phase, cmds: Vec<Command>, attrs: Attrs) {
        let p = self.pos_of(id.space).expect("a member's instance");
        self.conflicts.record(p, id.index, &cmds, attrs.seq);
        let i = self.inst_mut(id);
        i.ballot = ballot;
        i.vballot = ballot;
        i.phase = phase;
        i.cmds = cmds;
        i.attrs = attrs;
    }

    /// Whether a PreAccept, Accept or TryPreAccept may be voted for: a well-formed instance
    /// of ours to handle, not committed (the sender gets the commit instead), and no higher
    /// ballot promised (the sender gets a Nack).
    pub(super) fn admit(&mut self, ctx: &mut Ctx<'_>, from: NodeId, p: &Proposal) -> bool {
        let (ballot, id) = (p.ballot, p.inst);
        if !self.valid(id) || p.attrs.deps.len() != self.n() {
            return false;
        }
        let (phase, promised) = self.inst(id).map_or((Phase::None, Ballot::ZERO), |i| (i.phase, i.ballot));
        if phase == Phase::Committed {
            self.send_commit(ctx, from, id);
            return false;
        }
        if ballot < promised {
            ctx.send(from, &Msg::Nack { ballot, inst: id, promised });
            return false;
        }
        true
    }

    /// Lines 6–9.
    pub(super) fn on_pre_accept(&mut self, ctx: &mut Ctx<'_>, from: NodeId, p: Proposal) {
        if !self.admit(ctx, from, &p) {
            return;
        }
        let Proposal { ballot, inst: id, cmds, attrs } = p;
        let (phase, vballot) = self.inst(id).map_or((Phase::None, Ballot::ZERO), |i| (i.phase, i.vballot));
        if phase != Phase::None && vballot == ballot {
            // A retransmission: answer what we answered (an accept at this ballot is newer).
            if phase == Phase::PreAccepted {
                let attrs = self.inst(id).expect("known").attrs.clone();
                let committed_deps = false;
                ctx.send(from, &Msg::PreAcceptOk { ballot, inst: id, attrs, changed: true, committed_deps });
            }
            return;
        }
        let mut updated = attrs.clone();
        updated.merge(&self.conflicts.attrs_for(&cmds));
        let changed = updated != attrs;
        let committed_deps = self.try_pre_accept && self.deps_committed(id, &cmds, &updated);
        self.vote(id, ballot, Phase::PreAccepted, cmds, updated.clone());
        self.voted(ctx, id);
        ctx.send(from, &Msg::PreAcceptOk { ballot, inst: id, attrs: updated, changed, committed_deps });
    }

    /// Lines 10–15 (a reply arrived).
    pub(super) fn on_pre_accept_ok(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: NodeId,
        ballot: Ballot,
        id: InstId,
        attrs: Attrs,
        committed_deps: bool,
    ) {
        let n = self.n();
        let Some(lead) = self.leads.get_mut(&id) else { return };
        if lead.ballot != ballot || attrs.deps.len() != n {
            return;
        }
        let Step::PreAccept { replies, merged, deps_ok, .. } = &mut lead.step else { return };
        *deps_ok &= committed_deps;
        merged.merge(&attrs);
        replies.insert(from, attrs);
        self.check_pre_accept(ctx, id);
    }

    /// Line 10: commit on the fast path if the whole fast quorum answered with identical
    /// attributes (and, with the optimized quorum below 2F, every one of them and the leader
    /// had each related dependency committed: §4.4's condition that keeps the recovery's seq
    /// test sound); otherwise, once a majority answered, lines 13–15: the slow path with the
    /// union.
    pub(super) fn check_pre_accept(&mut self, ctx: &mut Ctx<'_>, id: InstId) {
        let fast_needed = self.fast_quorum.saturating_sub(1);
        let slow_needed = self.slow_replies();
        let Some(lead) = self.leads.get(&id) else { return };
        let Step::PreAccept { replies, fast, merged, deps_ok, .. } = &lead.step else { return };
        let fast = &(*fast && (*deps_ok || !self.try_pre_accept));
        let ballot = lead.ballot;
        let first = replies.values().next();
        let same = replies.values().all(|a| Some(a) == first);
        let Some(inst) = self.inst(id) else { return };
        let cmds = inst.cmds.clone();
        if *fast && same && replies.len() >= fast_needed {
            let attrs = first.cloned().unwrap_or_else(|| inst.attrs.clone());
            self.counters.fast += 1;
            self.commit(ctx, id, cmds, attrs);
        } else if replies.len() >= slow_needed && !(*fast && same && replies.len() < fast_needed) {
            let attrs = merged.clone();
            self.counters.slow += 1;
            self.start_accept(ctx, id, ballot, cmds, attrs);
        }
    }

    // --- Phase 2: Paxos-Accept -------------------------------------------------------------

    /// Lines 16–17 (also lines 31 and 33 of recovery, at a higher ballot).
    pub(super) fn start_accept(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: InstId,
        ballot: Ballot,
        cmds: Vec<Command>,
        attrs: Attrs,
    ) {
        self.vote(id, ballot, Phase::Accepted, cmds.clone(), attrs.clone());
        self.persist(ctx, id);
        let step = Step::Accept { acks: Default::default() };
        self.leads.insert(id, Lead { ballot, step, since: ctx.now });
        self.send_all(ctx, &Msg::Accept(Proposal { ballot, inst: id, cmds: cmds.clone(), attrs: attrs.clone() }));
        if self.slow_replies() == 0 {
            self.commit(ctx, id, cmds, attrs);
        }
    }

    /// Lines 18–19.
    pub(super) fn on_accept(&mut self, ctx: &mut Ctx<'_>, from: NodeId, p: Proposal) {
        if !self.admit(ctx, from, &p) {
            return;
        }
        let Proposal { ballot, inst: id, cmds, attrs } = p;
        self.vote(id, ballot, Phase::Accepted, cmds, attrs);
        self.voted(ctx, id);
        ctx.send(from, &Msg::AcceptOk { ballot, inst: id });
    }

    /// After voting (or promising) for `id` at a ballot accepted here: note the instance,
    /// let whoever runs it finish before this replica takes it over, and persist the vote
    /// before it is sent (Prop. 1 and 2 need it on stable storage).
    pub(super) fn voted(&mut self, ctx: &mut Ctx<'_>, id: InstId) {
        self.saw(id, ctx.now);
        self.defer_takeover(id, ctx.now);
        self.persist(ctx, id);
    }

    /// Line 20.
    pub(super) fn on_accept_ok(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, id: InstId) {
        let Some(lead) = self.leads.get_mut(&id) else { return };
        if lead.ballot != ballot {
            return;
        }
        let Step::Accept { acks } = &mut lead.step else { return };
        acks.insert(from);
        if acks.len() >= self.slow_replies() {
            let Some(inst) = self.inst(id) else { return };
            let (cmds, attrs) = (inst.cmds.clone(), inst.attrs.clone());
            self.commit(ctx, id, cmds, attrs);
        }
    }

    /// A refusal: somebody with a higher ballot has taken the instance over. We stop leading
    /// it; what it ends up holding reaches us as a commit.
    pub(super) fn on_nack(&mut self, _ctx: &mut Ctx<'_>, ballot: Ballot, id: InstId, promised: Ballot) {
        if !self.valid(id) {
            return;
        }
        if self.leads.get(&id).is_some_and(|l| l.ballot == ballot) && promised > ballot {
            self.leads.remove(&id);
            let i = self.inst_mut(id);
            i.ballot = i.ballot.max(promised);
        }
    }

    // --- Commit ------------------------------------------------------------------------------

    /// Lines 21–23: commit locally, tell every other replica.
    pub(super) fn commit(&mut self, ctx: &mut Ctx<'_>, id: InstId, cmds: Vec<Command>, attrs: Attrs) {
        self.leads.remove(&id);
        self.on_commit(ctx, id, cmds.clone(), attrs.clone());
        self.send_all(ctx, &Msg::Commit { entries: vec![(id, cmds, attrs)] });
        self.execute(ctx);
    }

    pub(super) fn send_commit(&self, ctx: &mut Ctx<'_>, to: NodeId, id: InstId) {
        if let Some(i) = self.inst(id).filter(|i| i.phase == Phase::Committed) {
            ctx.send(to, &Msg::Commit { entries: vec![(id, i.cmds.clone(), i.attrs.clone())] });
        }
    }

    /// Line 24 (and the local half of lines 21–23). Does not execute: callers do.
    pub(super) fn on_commit(&mut self, ctx: &mut Ctx<'_>, id: InstId, cmds: Vec<Command>, attrs: Attrs) {
        if !self.valid(id) || attrs.deps.len() != self.n() || self.is_committed(id) {
            return;
        }
        let p = self.pos_of(id.space).expect("valid");
        self.conflicts.record(p, id.index, &cmds, attrs.seq);
        let i = self.inst_mut(id);
        i.phase = Phase::Committed;
        i.cmds = cmds.clone();
        i.attrs = attrs;
        self.persist(ctx, id);
        self.saw(id, ctx.now);
        self.unsettled.remove(&id);
        self.takeover_at.remove(&id);
        self.leads.remove(&id);
        self.note_committed(p, id);
        self.advance_committed(p);
        if id.space == self.id {
            self.repropose_displaced(ctx, id.index, &cmds);
            if self.reply_at_commit {
                self.reply_committed_puts(ctx, id.index);
            }
        }
    }

    /// `reply=commit` (module docs): answer the plain puts of our instance `index` now; they
    /// are executed later without a second answer.
    fn reply_committed_puts(&mut self, ctx: &mut Ctx<'_>, index: u64) {
        let Some(batch) = self.proposed.get_mut(&index) else { return };
        for p in batch.iter_mut() {
            if matches!(p.cmd.op, Op::Put { .. }) {
                if let Some(client) = p.client.take() {
                    ctx.answer(client, &p.cmd, ReplyBody::Done(OpResult::Done));
                    self.counters.commit_replies += 1;
                }
            }
        }
    }

    /// One of our instances was finished by another replica with other commands (a no-op):
    /// propose the requests we had put there again.
    fn repropose_displaced(&mut self, ctx: &mut Ctx<'_>, index: u64, chosen: &[Command]) {
        let Some(batch) = self.proposed.get_mut(&index) else { return };
        let (keep, displaced): (Vec<Pending>, Vec<Pending>) = std::mem::take(batch)
            .into_iter()
            .partition(|p| chosen.iter().any(|c| c.client == p.cmd.client && c.seq == p.cmd.seq));
        *batch = keep;
        if batch.is_empty() {
            self.proposed.remove(&index);
        }
        if !displaced.is_empty() {
            self.counters.reproposed += displaced.len() as u64;
            for p in displaced {
                self.queue.push(p.client, p.cmd);
            }
            self.propose_when_due(ctx);
        }
    }

    pub(super) fn advance_committed(&mut self, p: usize) {
        while self.insts[p].get(&(self.committed_upto[p] + 1)).is_some_and(|i| i.phase == Phase::Committed) {
            self.committed_upto[p] += 1;
        }
    }

    /// Resend what a lead is waiting for after `retry`; a thrifty PreAccept that did not hear
    /// from the whole fast quorum falls back to every replica and the slow path (§6.2).
    pub(super) fn retransmit(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        let wait = self.retry_wait(now);
        let due: Vec<InstId> =
            self.leads.iter().filter(|(_, l)| now.since(l.since) >= wait).map(|(id, _)| *id).collect();
        let peers: Vec<NodeId> = self.members.iter().copied().filter(|&m| m != self.id).collect();
        for id in due {
            let Some(inst) = self.inst(id) else { continue };
            let (cmds, attrs) = (inst.cmds.clone(), inst.attrs.clone());
            let lead = self.leads.get_mut(&id).expect("due");
            lead.since = now;
            let ballot = lead.ballot;
            match &mut lead.step {
                Step::PreAccept { replies, fast, to_all, .. } => {
                    *fast = false;
                    *to_all = true;
                    let msg = Msg::PreAccept(Proposal { ballot, inst: id, cmds, attrs });
                    let missing: Vec<NodeId> = peers.iter().copied().filter(|p| !replies.contains_key(p)).collect();
                    for p in missing {
                        ctx.send(p, &msg);
                    }
                    self.check_pre_accept(ctx, id);
                }
                Step::Accept { acks } => {
                    let msg = Msg::Accept(Proposal { ballot, inst: id, cmds, attrs });
                    let missing: Vec<NodeId> = peers.iter().copied().filter(|p| !acks.contains(p)).collect();
                    for p in missing {
                        ctx.send(p, &msg);
                    }
                }
                Step::Prepare { replies } => {
                    let missing: Vec<NodeId> = peers.iter().copied().filter(|p| !replies.contains_key(p)).collect();
                    for p in missing {
                        ctx.send(p, &Msg::Prepare { ballot, inst: id });
                    }
                }
                Step::TryPreAccept(t) => {
                    t.tries += 1;
                    if t.tries > 3 {
                        // Not enough answers: give the instance up for now (a later Explicit
                        // Prepare sees the replicas that pre-accepted the tuple meanwhile).
                        self.leads.remove(&id);
                        self.unsettled.insert(id, now);
                    } else {
                        let p = Proposal { ballot, inst: id, cmds: t.cmds.clone(), attrs: t.attrs.clone() };
                        let msg = Msg::TryPreAccept(p);
                        for p in t.targets.difference(&t.answered) {
                            ctx.send(*p, &msg);
                        }
                    }
                }
            }
        }
    }
}

impl Epaxos {
    /// How long a lead waits before it retransmits (and a thrifty PreAccept gives up the
    /// fast path): `retry_ms`, or one and a half times the slowest round trip measured to a
    /// live peer if that is longer — in the wide area a fast quorum's replies take longer
    /// than `retry_ms` (found with the 5-site Fig. 4 scenario: with 220 ms round trips every
    /// command from the farthest site gave up its fast path).
    pub(super) fn retry_wait(&self, now: synod_core::Time) -> std::time::Duration {
        let silent_after = self.params.heartbeat() * 3;
        let slowest = self
            .rtt
            .iter()
            .filter(|(p, _)| self.heard.get(p).is_some_and(|t| now.since(*t) <= silent_after))
            .map(|(_, r)| *r)
            .max()
            .unwrap_or_default();
        self.retry.max(slowest * 3 / 2)
    }

    /// Somebody else is working on instance `id` (its command leader or a recovering
    /// replica sent a message for it at a ballot we accept): restart the wait before this
    /// replica takes it over. Without this, at wide-area round trips (a recovery takes three
    /// of them, longer than the takeover timeout) replicas took the same instances over from
    /// each other with ever higher ballots and nobody finished them: execution stopped on
    /// every replica (the 5-site 100%-interference stall of the Fig. 4 runs).
    pub(super) fn defer_takeover(&mut self, id: InstId, now: synod_core::Time) {
        if let Some(since) = self.unsettled.get_mut(&id) {
            *since = now;
        }
        self.takeover_at.remove(&id);
    }

    /// §4.4's fast-path condition, as this replica sees it: every instance it knows within
    /// `attrs.deps` and related to `cmds` is committed here (so its seq is final, and a
    /// recovery that finds it with a seq at least `attrs.seq` knows the fast path was not
    /// taken). Conservative: an instance whose command is unknown, or a long uncommitted
    /// range, counts as not committed.
    pub(super) fn deps_committed(&self, id: InstId, cmds: &[Command], attrs: &Attrs) -> bool {
        for (p, insts) in self.insts.iter().enumerate() {
            let lo = self.committed_upto[p] + 1;
            let hi = attrs.deps.get(p).copied().unwrap_or(0);
            if lo > hi {
                continue;
            }
            for (seen, (&index, d)) in insts.range(lo..=hi).enumerate() {
                if seen >= 1024 {
                    return false;
                }
                if (InstId { space: self.members[p], index }) == id || d.phase == Phase::Committed {
                    continue;
                }
                if d.phase == Phase::None || related_batches(&d.cmds, cmds) {
                    return false;
                }
            }
        }
        true
    }
}

/// Whether instance `a`'s commands and `b`'s interfere (for execution).
pub(super) fn batches_interfere(a: &[Command], b: &[Command]) -> bool {
    interfere(a, b)
}
