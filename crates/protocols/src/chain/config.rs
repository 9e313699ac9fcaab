//! §3 "Coping with Server Failures": the master — here the group of all replicas.
//!
//! The paper's master detects failures, removes failed servers from the chain, tells the
//! neighbours, and adds servers at the tail; it is itself replicated with Paxos. Here each
//! replica runs the master's logic for itself and the configuration `(epoch, chain)` of each
//! new epoch is one Paxos instance among all `n` replicas (ballots `synod_core::Ballot`,
//! quorums `QuorumTracker::majority_of(n)`): Prepare/Promise, then Accept/Accepted, a
//! majority choosing. A replica learns a chosen configuration from the proposer's
//! `Decided`, from gossip (every `Alive` carries the epoch; a replica behind asks with
//! `ConfigReq`) or from a tail's lease request. Configuration changes therefore need a
//! majority of the `n` replicas up and connected: `⌊(n−1)/2⌋` failures are tolerated.
//!
//! Why not the MultiPaxos core: the core owns the replica's state machine (it applies its
//! log, takes and installs snapshots of it), and so does the chain's data path; running both
//! in one replica would give two protocols one state machine. The chain needs one decided
//! value per epoch, which is single-decree Paxos over the shared ballot, quorum and lease
//! pieces, in about a hundred lines below.
//!
//! The proposer (the "coordinator") is the first chain member this replica does not
//! suspect, if that is this replica itself; duelling proposers are safe (Paxos) and rare.
//! Its proposal, once the configuration has been in effect for a failure timeout:
//! - remove every chain member it suspects (not heard from for `election_timeout_min_ms`,
//!   `ctx.now` only), and every member whose predecessor reports it suspected (a broken link
//!   inside the chain);
//! - append at the tail every replica outside the chain that is heard from, is in the
//!   current epoch (it learned the configuration) and is not suspected by the new tail: a
//!   restarted or reconnected replica rejoins there and gets the state from its predecessor
//!   (update.rs) before it answers anything.
//!
//! Safety does not depend on these heuristics: any chain made of members of the previous one
//! in their order, plus appended nodes, keeps every acknowledged update (update.rs).

use super::*;
use synod_core::quorum::QuorumTracker;

impl Chain {
    /// The heartbeat: gossip, failure detection, repair, the tail's lease, proposals.
    pub(super) fn tick(&mut self, ctx: &mut Ctx<'_>) {
        ctx.set_timer(TIMER_TICK, self.heartbeat);
        let suspects = self.suspects(ctx.now);
        let pending = self.accepted_pending();
        ctx.broadcast(&Msg::Alive { epoch: self.cfg.epoch, suspects, pending, trusted: self.trusted });
        self.repair_tick(ctx);
        self.lease_tick(ctx);
        self.maybe_propose(ctx);
    }

    /// Replicas not heard from for the failure timeout (never this one).
    fn suspects(&self, now: Time) -> Vec<NodeId> {
        self.members
            .iter()
            .copied()
            .filter(|&m| m != self.me)
            .filter(|m| {
                let since = self.heard.get(m).copied().unwrap_or(self.started);
                now.since(since) >= self.fail_after
            })
            .collect()
    }

    /// This acceptor accepted a value for the next epoch (not known chosen): until that
    /// instance is finished it grants no lease to a tail that value moves (query.rs).
    fn accepted_pending(&self) -> bool {
        self.accepted.as_ref().is_some_and(|(_, c)| c.epoch > self.cfg.epoch)
    }

    pub(super) fn on_alive(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: NodeId,
        epoch: u64,
        suspects: Vec<NodeId>,
        pending: bool,
        trusted: bool,
    ) {
        if trusted {
            self.untrusted_reports.remove(&from);
        } else {
            self.untrusted_reports.insert(from);
        }
        if pending && epoch == self.cfg.epoch {
            self.pending_reports.insert(from);
        } else {
            self.pending_reports.remove(&from);
        }
        if epoch > self.cfg.epoch {
            ctx.send(from, &Msg::ConfigReq);
        } else if epoch < self.cfg.epoch {
            ctx.send(from, &Msg::Decided { cfg: self.cfg.clone() });
        }
        self.reports.insert(from, (epoch, suspects));
    }

    /// A chosen configuration: install it if it is newer.
    pub(super) fn learn(&mut self, ctx: &mut Ctx<'_>, cfg: Config) {
        if cfg.epoch <= self.cfg.epoch || !cfg.well_formed(&self.members) {
            return;
        }
        self.persist(ctx, vec![Record::Config { cfg: cfg.clone() }]);
        self.cfg = cfg;
        if !self.cfg.contains(self.me) {
            self.set_trusted(ctx, false);
        }
        self.installed_at = ctx.now;
        self.holder.reset();
        if self.proposal.as_ref().is_some_and(|p| p.want.epoch <= self.cfg.epoch) {
            self.proposal = None;
        }
        self.pending_reports.clear();
        self.enter_epoch(ctx);
    }

    /// The coordinator's decision: a new chain if some member failed or a replica can rejoin.
    fn maybe_propose(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        if let Some(p) = &self.proposal {
            if now.since(p.started) < self.fail_after * 2 {
                return;
            }
            self.proposal = None; // timed out: try again with a higher ballot
        }
        if !self.cfg.contains(self.me) || now.since(self.installed_at) < self.fail_after {
            return;
        }
        let suspects = self.suspects(now);
        let coordinator = self.cfg.chain.iter().copied().find(|m| !suspects.contains(m));
        if coordinator != Some(self.me) {
            return;
        }
        let fresh = |r: &(u64, Vec<NodeId>)| r.0 == self.cfg.epoch;
        let reported = |by: NodeId, whom: NodeId| {
            self.reports.get(&by).is_some_and(|r| fresh(r) && r.1.contains(&whom)) && !suspects.contains(&by)
        };
        let mut chain: Vec<NodeId> = Vec::new();
        for &m in &self.cfg.chain {
            let pred_reports = self.cfg.pred(m).is_some_and(|p| reported(p, m));
            if m == self.me || (!suspects.contains(&m) && !pred_reports) {
                chain.push(m);
            }
        }
        for &j in &self.members {
            if chain.contains(&j) || self.cfg.contains(j) || suspects.contains(&j) {
                continue;
            }
            let tail = *chain.last().expect("the coordinator stays");
            let current = self.reports.get(&j).is_some_and(fresh);
            let tail_hears = if tail == self.me { true } else { !reported(tail, j) && !suspects.contains(&tail) };
            if current && tail_hears {
                chain.push(j);
            }
        }
        // Nothing to change, unless an instance was left unfinished (a value accepted by
        // some, chosen or not): run it to the end, Paxos keeps whatever may be chosen.
        let unfinished = self.accepted_pending() || !self.pending_reports.is_empty();
        if chain == self.cfg.chain && !unfinished {
            return;
        }
        // Only a node whose history is a consistent copy may become head (a rejoined node
        // that has not been brought in sync yet may hold updates it sequenced as an old head).
        let head = chain[0];
        let head_trusted = if head == self.me { self.trusted } else { !self.untrusted_reports.contains(&head) };
        if !head_trusted {
            return;
        }
        let want = Config { epoch: self.cfg.epoch + 1, chain };
        let ballot = Ballot::new(self.promised.round.max(self.seen_round) + 1, self.me);
        let n = self.members.len();
        self.proposal = Some(Proposal {
            ballot,
            want: want.clone(),
            promises: QuorumTracker::majority_of(n),
            best: None,
            value: None,
            accepts: QuorumTracker::majority_of(n),
            refusals: QuorumTracker::majority_of(n),
            started: now,
        });
        // A tail driving a change stops using its lease (query.rs).
        self.holder.reset();
        let msg = Msg::Prepare { ballot, epoch: want.epoch };
        ctx.broadcast(&msg);
        self.send(ctx, self.me, msg);
    }

    // ---------------------------------------------------------------------------------
    // The acceptor.

    pub(super) fn on_prepare(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, epoch: u64) {
        if epoch <= self.cfg.epoch {
            let cfg = self.cfg.clone();
            self.send(ctx, from, Msg::Decided { cfg });
            return;
        }
        if epoch > self.cfg.epoch + 1 {
            self.send(ctx, from, Msg::ConfigReq);
            return;
        }
        if ballot < self.promised {
            let promised = self.promised;
            self.send(ctx, from, Msg::Nack { ballot, promised });
            return;
        }
        if ballot > self.promised {
            self.promised = ballot;
            self.persist(ctx, vec![Record::Promised { ballot }]);
        }
        let accepted = self.accepted.clone().filter(|(_, c)| c.epoch == epoch);
        self.send(ctx, from, Msg::Promise { ballot, epoch, accepted });
    }

    pub(super) fn on_accept(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, cfg: Config) {
        if cfg.epoch <= self.cfg.epoch {
            let cfg = self.cfg.clone();
            self.send(ctx, from, Msg::Decided { cfg });
            return;
        }
        if cfg.epoch > self.cfg.epoch + 1 || !cfg.well_formed(&self.members) {
            self.send(ctx, from, Msg::ConfigReq);
            return;
        }
        if self.lease_blocks(ctx.now, from, &cfg) {
            // Let the lease run out: grant no renewal while a change that moves the tail
            // waits (query.rs), so the proposer's next attempt succeeds.
            self.hold_grants_until = ctx.now + self.fail_after * 2;
        }
        if ballot < self.promised || self.lease_blocks(ctx.now, from, &cfg) {
            let promised = self.promised;
            self.send(ctx, from, Msg::Nack { ballot, promised });
            return;
        }
        self.promised = ballot;
        self.accepted = Some((ballot, cfg.clone()));
        self.persist(ctx, vec![Record::Accepted { ballot, cfg: cfg.clone() }]);
        self.send(ctx, from, Msg::Accepted { ballot, epoch: cfg.epoch });
    }

    // ---------------------------------------------------------------------------------
    // The proposer.

    pub(super) fn on_promise(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: NodeId,
        ballot: Ballot,
        epoch: u64,
        accepted: Option<(Ballot, Config)>,
    ) {
        let Some(p) = self.proposal.as_mut() else { return };
        if p.ballot != ballot || p.want.epoch != epoch || p.value.is_some() {
            return;
        }
        if let Some((b, c)) = accepted {
            if c.epoch == epoch && p.best.as_ref().is_none_or(|(bb, _)| b > *bb) {
                p.best = Some((b, c));
            }
        }
        if !p.promises.ack(from) {
            return;
        }
        // Phase 2 with the highest-ballot value accepted in this instance, else our own.
        let value = p.best.as_ref().map(|(_, c)| c.clone()).unwrap_or_else(|| p.want.clone());
        if !value.well_formed(&self.members) {
            self.proposal = None;
            return;
        }
        p.value = Some(value.clone());
        let msg = Msg::Accept { ballot, cfg: value };
        ctx.broadcast(&msg);
        self.send(ctx, self.me, msg);
    }

    pub(super) fn on_accepted(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, epoch: u64) {
        let Some(p) = self.proposal.as_mut() else { return };
        if p.ballot != ballot || p.want.epoch != epoch {
            return;
        }
        let Some(value) = p.value.clone() else { return };
        if !p.accepts.ack(from) {
            return;
        }
        // Chosen.
        self.proposal = None;
        ctx.broadcast(&Msg::Decided { cfg: value.clone() });
        self.learn(ctx, value);
    }

    pub(super) fn on_nack(&mut self, from: NodeId, ballot: Ballot, promised: Ballot) {
        self.seen_round = self.seen_round.max(promised.round);
        let n = self.members.len();
        let Some(p) = self.proposal.as_mut() else { return };
        if p.ballot == ballot && p.refusals.nack(from, n) {
            self.proposal = None;
        }
    }
}
