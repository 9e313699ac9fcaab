//! Deliberately broken layers, for the mutation tests that prove the checkers can fail
//! (feature `mutants`). Each one wraps another layer and forwards every hook to it except
//! the one it breaks, so it composes with any layer.

use super::{Campaign, Compaction, LayerMsg, LayerOp, MultiPaxosLayer, NackVerdict};
use crate::multipaxos::MultiPaxos;
use bytes::Bytes;
use std::collections::BTreeMap;
use synod_core::{Ballot, Ctx, NodeId, Time, TimerId};

/// A follower takes a leader's periodic layer message ([`LayerMsg::Beat`], e.g. HoliPaxos's
/// control message) as committing *every* slot it accepted in the leader's ballot, not only
/// those up to the commit marker the message carries. Unsafe: with five replicas, the leader
/// and this follower are no quorum, so a value they both accepted may not be chosen, and a
/// new leader may choose another value for the slot this follower already executed.
pub struct EagerCommit<L>(pub L);

impl<L: MultiPaxosLayer> MultiPaxosLayer for EagerCommit<L> {
    fn on_message(&mut self, core: &MultiPaxos, ctx: &mut Ctx<'_>, from: NodeId, msg: &[u8]) -> LayerMsg {
        match self.0.on_message(core, ctx, from, msg) {
            LayerMsg::Beat { ballot, commit_upto, trim_bound } => {
                // The bug: the commit marker is ignored in favour of our whole log.
                LayerMsg::Beat { ballot, commit_upto: commit_upto.max(core.log_last()), trim_bound }
            }
            other => other,
        }
    }

    // Everything else is the wrapped layer's.

    fn options(&self) -> &'static [&'static str] {
        self.0.options()
    }
    fn compaction(&self) -> Compaction {
        self.0.compaction()
    }
    fn campaign(&mut self, quorum: usize) -> Campaign {
        self.0.campaign(quorum)
    }
    fn on_campaign(&mut self, now: Time, ballot: Ballot) {
        self.0.on_campaign(now, ballot)
    }
    fn on_probe(&mut self) {
        self.0.on_probe()
    }
    fn screen_prepare(&mut self, core: &MultiPaxos, now: Time, from: NodeId, ballot: Ballot) -> Option<Ballot> {
        self.0.screen_prepare(core, now, from, ballot)
    }
    fn on_phase1_answer(&mut self, from: NodeId, ballot: Ballot, quorum: usize) {
        self.0.on_phase1_answer(from, ballot, quorum)
    }
    fn on_nack(&mut self, core: &MultiPaxos, from: NodeId, ballot: Ballot, promised: Ballot) -> NackVerdict {
        self.0.on_nack(core, from, ballot, promised)
    }
    fn on_become_leader(&mut self, ctx: &mut Ctx<'_>) {
        self.0.on_become_leader(ctx)
    }
    fn on_leadership_lost(&mut self, ctx: &mut Ctx<'_>) {
        self.0.on_leadership_lost(ctx)
    }
    fn heartbeat(&mut self, core: &MultiPaxos) -> Option<Bytes> {
        self.0.heartbeat(core)
    }
    fn heartbeat_penalty(&mut self, now: Time) -> u32 {
        self.0.heartbeat_penalty(now)
    }
    fn rejects_stale_leaders(&self) -> bool {
        self.0.rejects_stale_leaders()
    }
    fn on_leader_heard(&mut self) {
        self.0.on_leader_heard()
    }
    fn after_beat(&mut self, core: &MultiPaxos, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot) {
        self.0.after_beat(core, ctx, from, ballot)
    }
    fn on_executed(&mut self, core: &MultiPaxos, ctx: &mut Ctx<'_>, slot: u64, entry: &[u8]) {
        self.0.on_executed(core, ctx, slot, entry)
    }
    fn on_timer(&mut self, core: &MultiPaxos, ctx: &mut Ctx<'_>, timer: TimerId) -> Option<LayerOp> {
        self.0.on_timer(core, ctx, timer)
    }
    fn snapshot_source(&self, core: &MultiPaxos, requester: NodeId, first: u64) -> Option<NodeId> {
        self.0.snapshot_source(core, requester, first)
    }
    fn recover_record(&mut self, record: &[u8]) -> Result<(), String> {
        self.0.recover_record(record)
    }
    fn durable_records(&self) -> Vec<Bytes> {
        self.0.durable_records()
    }
    fn status(&self, core: &MultiPaxos, extra: &mut BTreeMap<String, String>) {
        self.0.status(core, extra)
    }
    fn describe_message(&self, msg: &[u8]) -> String {
        self.0.describe_message(msg)
    }
    fn describe_value(&self, entry: &[u8]) -> String {
        self.0.describe_value(entry)
    }
}
