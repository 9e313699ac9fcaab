//! Explicit Prepare (Fig. 3, §4.6): taking over an instance whose command leader may have
//! failed, learning from a majority what may have been chosen, and finishing it.
//!
//! With the optimized fast quorum F + ⌊(F+1)/2⌋ below 2F (N ≥ 5), a majority may hold as few
//! as ⌊(F+1)/2⌋ members of the fast quorum, too few to tell whether the tuple they
//! pre-accepted was committed on the fast path. Recovery then runs **TryPreAccept** (§4.4):
//! it asks the other replicas to pre-accept the tuple; a replica does so unless a command it
//! knows conflicts with it — one that is related to it (shares a key or a session, see
//! [`super::conflicts::related`]), does not depend on it, and is either not in its `deps` or
//! in them with a `seq` at least as large. A committed conflict proves the tuple was not
//! committed on the fast path (the recovery orders the command again); an uncommitted one
//! defers the recovery until it commits — unless that command's leader must have been in the
//! tuple's fast quorum, which also proves it (the cycle-breaking rule of the technical
//! report). F + 1 holders of the tuple (the failed command leader, the replicas that reported
//! it, those that pre-accepted it on request) commit it through Paxos-Accept.
//!
//! The "seq" part of the conflict test is sound only with §4.4's condition on the fast path
//! (its first variant): a command leader commits on the fast path only if the leader and
//! every reply had each related dependency committed ([`Epaxos::deps_committed`]).

use super::conflicts::related_batches;
use super::msg::{Attrs, InstId, Msg, Phase, Proposal, Reported, TpaOutcome};
use super::{Epaxos, Lead, Step};
use std::collections::{BTreeMap, BTreeSet};
use synod_core::{Ballot, Command, Ctx, NodeId};

/// A TryPreAccept round (§4.4).
pub(super) struct Trying {
    pub cmds: Vec<Command>,
    pub attrs: Attrs,
    /// Replicas asked: every one that did not report the tuple (this one included, answered
    /// locally; the command leader too, which answers NotFast if it is alive).
    pub targets: BTreeSet<NodeId>,
    pub answered: BTreeSet<NodeId>,
    /// Holders of the tuple so far: the command leader, the replicas that reported it, and
    /// the ones that pre-accepted it on request. F + 1 of them commit it.
    pub holders: usize,
    /// Replicas that must have been in the fast quorum had the tuple been committed on the
    /// fast path: a conflict with an uncommitted command one of them leads proves it was not.
    pub must: BTreeSet<NodeId>,
    /// Retransmissions so far.
    pub tries: u32,
}

/// What a TryPreAccept reply decides.
enum Decision {
    Wait,
    Accept,
    Reorder,
    GiveUp,
}

impl Epaxos {
    /// Lines 25–26: a ballot above every one seen for the instance, Prepare to all (our own
    /// answer counts as one).
    pub(super) fn start_recovery(&mut self, ctx: &mut Ctx<'_>, id: InstId) {
        if !self.valid(id) || self.is_committed(id) || self.leads.contains_key(&id) {
            return;
        }
        let me = self.id;
        let i = self.inst_mut(id);
        let ballot = i.ballot.next_for(me);
        i.ballot = ballot;
        let own = Self::report(i);
        self.persist(ctx, id);
        self.counters.recoveries += 1;
        let mut replies = BTreeMap::new();
        replies.insert(me, own);
        self.leads.insert(id, Lead { ballot, step: Step::Prepare { replies }, since: ctx.now });
        self.send_all(ctx, &Msg::Prepare { ballot, inst: id });
        self.check_prepare(ctx, id);
    }

    fn report(i: &super::Instance) -> Option<Reported> {
        (i.phase != Phase::None).then(|| Reported {
            phase: i.phase,
            vballot: i.vballot,
            cmds: i.cmds.clone(),
            attrs: i.attrs.clone(),
        })
    }

    /// Lines 38–41. A replica that has the instance committed answers with the commit.
    pub(super) fn on_prepare(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, id: InstId) {
        if !self.valid(id) {
            return;
        }
        if self.is_committed(id) {
            self.send_commit(ctx, from, id);
            return;
        }
        let promised = self.inst(id).map_or(Ballot::ZERO, |i| i.ballot);
        if ballot <= promised {
            ctx.send(from, &Msg::Nack { ballot, inst: id, promised });
            return;
        }
        let i = self.inst_mut(id);
        i.ballot = ballot;
        let state = Self::report(i);
        self.supersede_lead(id, ballot);
        self.voted(ctx, id);
        ctx.send(from, &Msg::PrepareOk { ballot, inst: id, state });
    }

    /// A promise at `ballot`: a lead of ours at a lower ballot is over (we may no longer
    /// commit at it).
    fn supersede_lead(&mut self, id: InstId, ballot: Ballot) {
        if self.leads.get(&id).is_some_and(|l| l.ballot < ballot) {
            self.leads.remove(&id);
        }
    }

    pub(super) fn on_prepare_ok(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: NodeId,
        ballot: Ballot,
        id: InstId,
        state: Option<Reported>,
    ) {
        let n = self.n();
        let Some(lead) = self.leads.get_mut(&id) else { return };
        if lead.ballot != ballot {
            return;
        }
        let Step::Prepare { replies } = &mut lead.step else { return };
        if state.as_ref().is_some_and(|r| r.attrs.deps.len() != n) {
            return;
        }
        replies.insert(from, state);
        self.check_prepare(ctx, id);
    }

    /// Lines 27–37, once a majority (this replica included) answered.
    fn check_prepare(&mut self, ctx: &mut Ctx<'_>, id: InstId) {
        let majority = self.n() / 2 + 1;
        let Some(lead) = self.leads.get(&id) else { return };
        let Step::Prepare { replies } = &lead.step else { return };
        if replies.len() < majority {
            return;
        }
        let ballot = lead.ballot;
        let replies = replies.clone();
        let reported: Vec<(NodeId, &Reported)> =
            replies.iter().filter_map(|(n, r)| r.as_ref().map(|r| (*n, r))).collect();
        // Line 28: committed somewhere.
        if let Some((_, r)) = reported.iter().find(|(_, r)| r.phase == Phase::Committed) {
            let (cmds, attrs) = (r.cmds.clone(), r.attrs.clone());
            self.commit(ctx, id, cmds, attrs);
            return;
        }
        // Line 27: the replies with the highest vote ballot.
        let Some(top) = reported.iter().map(|(_, r)| r.vballot).max() else {
            // Line 37: nobody in the majority saw a command here.
            self.recovery_phase1(ctx, id, ballot, Vec::new(), None);
            return;
        };
        let highest: Vec<(NodeId, &Reported)> = reported.iter().filter(|(_, r)| r.vballot == top).copied().collect();
        // Lines 30–31: accepted at the highest ballot.
        if let Some((_, r)) = highest.iter().find(|(_, r)| r.phase == Phase::Accepted) {
            let (cmds, attrs) = (r.cmds.clone(), r.attrs.clone());
            self.start_accept(ctx, id, ballot, cmds, attrs);
            return;
        }
        // Lines 32–33: ⌊N/2⌋ identical default-ballot pre-accepts, none from the command
        // leader: the tuple may have been committed on the fast path.
        if top == Self::default_ballot(id.space) {
            let mut groups: Vec<(&Vec<Command>, &Attrs, usize)> = Vec::new();
            for (node, r) in &highest {
                if *node == id.space || r.phase != Phase::PreAccepted {
                    continue;
                }
                match groups.iter_mut().find(|(c, a, _)| **c == r.cmds && **a == r.attrs) {
                    Some(g) => g.2 += 1,
                    None => groups.push((&r.cmds, &r.attrs, 1)),
                }
            }
            if let Some((cmds, attrs, _)) = groups.iter().find(|g| g.2 >= self.slow_replies()) {
                let (cmds, attrs) = ((*cmds).clone(), (*attrs).clone());
                self.start_accept(ctx, id, ballot, cmds, attrs);
                return;
            }
            // §4.4: fewer than F, but perhaps enough to have been part of an optimized fast
            // quorum.
            if self.try_pre_accept && !self.variant.skip_try_pre_accept && groups.len() == 1 {
                let (cmds, attrs) = (groups[0].0.clone(), groups[0].1.clone());
                if let Some(t) = self.plan_try_pre_accept(id, &replies, cmds, attrs) {
                    self.start_try_pre_accept(ctx, id, ballot, t);
                    return;
                }
            }
        }
        // Lines 34–35: the command is known; order it again, avoiding the fast path.
        if let Some((_, r)) = highest.iter().find(|(_, r)| r.phase == Phase::PreAccepted) {
            let (cmds, attrs) = (r.cmds.clone(), r.attrs.clone());
            self.recovery_phase1(ctx, id, ballot, cmds, Some(attrs));
            return;
        }
        // Line 37.
        self.recovery_phase1(ctx, id, ballot, Vec::new(), None);
    }

    /// Whether the one tuple pre-accepted at the default ballot by the replicas that answered
    /// (not the command leader) may have been committed on the optimized fast path, and if
    /// so the TryPreAccept round that finds out. None: it cannot have been (the command leader
    /// answered, so it did not commit and now cannot; or the replicas that reported the
    /// tuple and those that did not answer are fewer than a fast quorum).
    pub(super) fn plan_try_pre_accept(
        &self,
        id: InstId,
        replies: &BTreeMap<NodeId, Option<Reported>>,
        cmds: Vec<Command>,
        attrs: Attrs,
    ) -> Option<Trying> {
        if replies.contains_key(&id.space) {
            return None;
        }
        let default = Self::default_ballot(id.space);
        let group: BTreeSet<NodeId> = replies
            .iter()
            .filter(|(_, r)| {
                r.as_ref().is_some_and(|r| {
                    r.phase == Phase::PreAccepted && r.vballot == default && r.cmds == cmds && r.attrs == attrs
                })
            })
            .map(|(n, _)| *n)
            .collect();
        // Who could have been in the fast quorum: the reporters and the silent replicas
        // (the command leader among them).
        let candidates: BTreeSet<NodeId> =
            self.members.iter().copied().filter(|m| group.contains(m) || !replies.contains_key(m)).collect();
        if group.is_empty() || candidates.len() < self.fast_quorum {
            return None;
        }
        let must = if candidates.len() == self.fast_quorum { candidates } else { BTreeSet::from([id.space]) };
        let targets: BTreeSet<NodeId> = self.members.iter().copied().filter(|m| !group.contains(m)).collect();
        Some(Trying { cmds, attrs, targets, answered: BTreeSet::new(), holders: 1 + group.len(), must, tries: 0 })
    }

    fn start_try_pre_accept(&mut self, ctx: &mut Ctx<'_>, id: InstId, ballot: Ballot, t: Trying) {
        self.counters.try_pre_accepts += 1;
        let (cmds, attrs) = (t.cmds.clone(), t.attrs.clone());
        let msg = Msg::TryPreAccept(Proposal { ballot, inst: id, cmds: cmds.clone(), attrs: attrs.clone() });
        let peers: Vec<NodeId> = t.targets.iter().copied().filter(|&m| m != self.id).collect();
        let local = t.targets.contains(&self.id);
        self.leads.insert(id, Lead { ballot, step: Step::TryPreAccept(t), since: ctx.now });
        for p in peers {
            ctx.send(p, &msg);
        }
        if local {
            let outcome = self.try_pre_accept_here(ctx, id, ballot, &cmds, &attrs);
            self.on_try_pre_accept_reply(ctx, self.id, ballot, id, outcome);
        }
    }

    /// A TryPreAccept arrived (§4.4).
    pub(super) fn on_try_pre_accept(&mut self, ctx: &mut Ctx<'_>, from: NodeId, p: Proposal) {
        if !self.admit(ctx, from, &p) {
            return;
        }
        let (ballot, id) = (p.ballot, p.inst);
        self.supersede_lead(id, ballot);
        let outcome = self.try_pre_accept_here(ctx, id, ballot, &p.cmds, &p.attrs);
        self.defer_takeover(id, ctx.now);
        ctx.send(from, &Msg::TryPreAcceptReply { ballot, inst: id, outcome });
    }

    /// This replica's answer to a TryPreAccept at `ballot` (not below its promise), which it
    /// now promises; on Ok it holds the tuple, pre-accepted at the default ballot as if in
    /// the original round (a later recovery counts it with the replicas that reported it).
    pub(super) fn try_pre_accept_here(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: InstId,
        ballot: Ballot,
        cmds: &[Command],
        attrs: &Attrs,
    ) -> TpaOutcome {
        let default = Self::default_ballot(id.space);
        let (phase, vballot, same) = self
            .inst(id)
            .map_or((Phase::None, Ballot::ZERO, false), |i| (i.phase, i.vballot, i.cmds == cmds && i.attrs == *attrs));
        let outcome = if id.space == self.id {
            // The command leader did not commit it, and after this promise it cannot.
            TpaOutcome::NotFast
        } else if phase != Phase::None && vballot > default {
            TpaOutcome::Retry
        } else if phase == Phase::Accepted || (phase == Phase::PreAccepted && !same) {
            // The original round went to the slow path, or this replica pre-accepted other
            // attributes in it (thrifty: only after the fast path was given up).
            TpaOutcome::NotFast
        } else if phase == Phase::PreAccepted {
            TpaOutcome::Ok
        } else {
            let outcome = self.try_pre_accept_conflicts(id, cmds, attrs);
            if outcome == TpaOutcome::Ok {
                self.vote(id, default, Phase::PreAccepted, cmds.to_vec(), attrs.clone());
            }
            outcome
        };
        self.inst_mut(id).ballot = ballot;
        self.saw(id, ctx.now);
        self.persist(ctx, id);
        outcome
    }

    /// The conflict test of §4.4 against every instance this replica knows, including the
    /// ones it has forgotten (all executed here, so none of them depends on the uncommitted
    /// `id`).
    fn try_pre_accept_conflicts(&self, id: InstId, cmds: &[Command], attrs: &Attrs) -> TpaOutcome {
        let Some(lp) = self.pos_of(id.space) else { return TpaOutcome::Retry };
        let mut defer = None;
        for (p, insts) in self.insts.iter().enumerate() {
            let space = self.members[p];
            for (&index, d) in insts {
                let other = InstId { space, index };
                if other == id || d.phase == Phase::None || !related_batches(&d.cmds, cmds) {
                    continue;
                }
                if d.attrs.deps.get(lp).is_some_and(|&dep| dep >= id.index) {
                    continue; // it depends on the tuple
                }
                if index <= attrs.deps[p] && d.attrs.seq < attrs.seq {
                    continue; // in the tuple's deps, ordered before it
                }
                if d.phase == Phase::Committed {
                    return TpaOutcome::NotFast;
                }
                defer.get_or_insert(other);
            }
        }
        let gone = self.forgotten.lookup(cmds);
        if gone.deps.iter().zip(&attrs.deps).any(|(g, a)| g > a) || gone.seq >= attrs.seq {
            return TpaOutcome::NotFast;
        }
        let unknown = self.restored_unknown.iter().zip(&attrs.deps).any(|(u, a)| u > a)
            || (self.restored_unknown.iter().any(|&u| u > 0) && self.restored_seq >= attrs.seq);
        if unknown {
            return TpaOutcome::Retry;
        }
        match defer {
            Some(on) => TpaOutcome::Defer { on },
            None => TpaOutcome::Ok,
        }
    }

    pub(super) fn on_try_pre_accept_reply(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: NodeId,
        ballot: Ballot,
        id: InstId,
        outcome: TpaOutcome,
    ) {
        let majority = self.n() / 2 + 1;
        let Some(lead) = self.leads.get_mut(&id) else { return };
        if lead.ballot != ballot {
            return;
        }
        let Step::TryPreAccept(t) = &mut lead.step else { return };
        if !t.targets.contains(&from) || !t.answered.insert(from) {
            return;
        }
        let mut decision = match outcome {
            TpaOutcome::Ok => {
                t.holders += 1;
                Decision::Wait
            }
            TpaOutcome::NotFast => Decision::Reorder,
            TpaOutcome::Defer { on } if t.must.contains(&on.space) => Decision::Reorder,
            TpaOutcome::Defer { .. } | TpaOutcome::Retry => Decision::Wait,
        };
        if matches!(decision, Decision::Wait) {
            if t.holders >= majority {
                decision = Decision::Accept;
            } else if t.answered.len() == t.targets.len() {
                decision = Decision::GiveUp;
            }
        }
        let (cmds, attrs) = (t.cmds.clone(), t.attrs.clone());
        match decision {
            Decision::Wait => {}
            Decision::Accept => {
                self.counters.tpa_committed += 1;
                self.start_accept(ctx, id, ballot, cmds, attrs);
            }
            Decision::Reorder => self.recovery_phase1(ctx, id, ballot, cmds, Some(attrs)),
            Decision::GiveUp => {
                // Deferred (or undecided): try again later with a new Explicit Prepare.
                self.leads.remove(&id);
                self.unsettled.insert(id, ctx.now);
            }
        }
    }

    /// Phase 1 (from line 2) at a recovery ballot, without the fast path: for the command
    /// found, or for a no-op.
    fn recovery_phase1(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: InstId,
        ballot: Ballot,
        cmds: Vec<Command>,
        known: Option<Attrs>,
    ) {
        if cmds.is_empty() {
            self.counters.noops += 1;
        }
        let mut attrs = self.conflicts.attrs_for(&cmds);
        if let Some(k) = &known {
            attrs.merge(k);
        }
        self.vote(id, ballot, Phase::PreAccepted, cmds.clone(), attrs.clone());
        self.persist(ctx, id);
        let step = Step::PreAccept {
            replies: Default::default(),
            fast: false,
            to_all: true,
            merged: attrs.clone(),
            deps_ok: false,
        };
        self.leads.insert(id, Lead { ballot, step, since: ctx.now });
        self.send_all(ctx, &Msg::PreAccept(Proposal { ballot, inst: id, cmds, attrs }));
        self.check_pre_accept(ctx, id);
    }
}
