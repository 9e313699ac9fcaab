//! Explicit Prepare (Fig. 3, §4.6): taking over an instance whose command leader may have
//! failed, learning from a majority what may have been chosen, and finishing it.

use super::msg::{Attrs, InstId, Msg, Phase, Reported};
use super::{Epaxos, Lead, Step};
use std::collections::BTreeMap;
use synod_core::{Ballot, Command, Ctx, NodeId};

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
        // A lead of ours at a lower ballot is over: we may no longer commit at it.
        if self.leads.get(&id).is_some_and(|l| l.ballot < ballot) {
            self.leads.remove(&id);
        }
        self.saw(id, ctx.now);
        self.persist(ctx, id);
        ctx.send(from, &Msg::PrepareOk { ballot, inst: id, state });
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
        let step = Step::PreAccept { replies: Default::default(), fast: false, to_all: true, merged: attrs.clone() };
        self.leads.insert(id, Lead { ballot, step, since: ctx.now });
        self.send_all(ctx, &Msg::PreAccept { ballot, inst: id, cmds, attrs });
        self.check_pre_accept(ctx, id);
    }
}
