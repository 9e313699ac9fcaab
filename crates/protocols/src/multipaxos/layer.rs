//! How the core calls its layer (`crate::layers`), and the read-only view of the core that
//! layer hooks get.
//!
//! A hook that needs the core's state runs with the layer taken out of the core
//! ([`MultiPaxos::call_layer`]); what the layer asks the core to do comes back as a
//! value ([`LayerOp`], `LayerMsg`) and runs after the layer is back in place.

use super::*;
use synod_core::RequestMeta;

impl MultiPaxos {
    /// Call a hook that needs both the layer (mutably) and a view of the core: the layer is
    /// taken out for the call (the core sees [`NoLayer`] meanwhile, and the view is
    /// read-only, so no hook runs inside another).
    pub(super) fn call_layer<R>(&mut self, f: impl FnOnce(&mut dyn MultiPaxosLayer, &MultiPaxos) -> R) -> R {
        let mut layer = std::mem::replace(&mut self.layer, Box::new(NoLayer));
        let r = f(layer.as_mut(), self);
        self.layer = layer;
        r
    }

    /// A client request: the layer's admission control first (`MultiPaxosLayer::admit`).
    pub(super) fn on_client_request(&mut self, ctx: &mut Ctx<'_>, client: ClientRef, cmd: Command, meta: RequestMeta) {
        if let Some((client, cmd)) = self.call_layer(|l, core| l.admit(core, ctx, client, cmd, &meta)) {
            self.on_request(ctx, client, cmd);
        }
    }

    /// Propose what the layer has ready (leader only; the layer answers its clients).
    pub(super) fn propose_layer_ready(&mut self, ctx: &mut Ctx<'_>) {
        if self.role != Role::Leader {
            return;
        }
        let ready = self.layer.take_ready();
        if ready.is_empty() {
            return;
        }
        for cmd in ready {
            self.queue.push(None, cmd);
        }
        self.propose_queued(ctx);
    }

    /// Do what a layer's timer asked for.
    pub(super) fn run_layer_op(&mut self, ctx: &mut Ctx<'_>, op: LayerOp) {
        match op {
            LayerOp::Propose(entry) => {
                if self.role == Role::Leader {
                    self.propose(ctx, vec![(Value::Layer(entry), Vec::new())]);
                }
            }
            LayerOp::StartElection => self.start_election(ctx),
            LayerOp::Trim(bound) => {
                self.trim_bound = self.trim_bound.max(bound);
                self.trim_log();
            }
        }
    }

    // ---------------------------------------------------------------------------------------
    // The view layers get (`crate::layers`)
    // ---------------------------------------------------------------------------------------

    /// This replica.
    pub(crate) fn id(&self) -> NodeId {
        self.id
    }

    /// Leader, candidate or follower.
    pub(crate) fn role(&self) -> Role {
        self.role
    }

    /// The highest ballot promised.
    pub(crate) fn promised(&self) -> Ballot {
        self.promised
    }

    /// The current configuration's member ids, sorted.
    pub(crate) fn members(&self) -> &[NodeId] {
        &self.members
    }

    /// The quorum size of the configuration in effect.
    pub(crate) fn quorum(&self) -> usize {
        self.quorum
    }

    /// The protocol parameters (timeouts, chunk sizes).
    pub(crate) fn params(&self) -> &ProtocolParams {
        &self.params
    }

    /// Every slot up to this one is executed here.
    pub(crate) fn executed_upto(&self) -> u64 {
        self.log.executed_upto()
    }

    /// The leader this replica follows (itself when leading), if any.
    pub(crate) fn leader(&self) -> Option<NodeId> {
        if self.role == Role::Leader {
            Some(self.id)
        } else {
            self.leader
        }
    }

    /// The highest slot in the log (accepted or chosen).
    pub(crate) fn log_last(&self) -> u64 {
        self.log.last_index()
    }

    /// Client commands executed since this replica started.
    pub(crate) fn cmds_executed(&self) -> u64 {
        self.cmds_executed
    }

    /// The trim bound last learned or computed (`TrimPolicy::Bound`).
    pub(crate) fn trim_bound(&self) -> u64 {
        self.trim_bound
    }

    /// The last leader whose Accepts this replica took.
    pub(crate) fn last_successful_leader(&self) -> Option<NodeId> {
        self.last_successful_leader
    }

    /// When this replica last heard its leader (`Time::ZERO`: never).
    pub(crate) fn leader_heard_at(&self) -> Time {
        self.leader_contact.map_or(Time::ZERO, |(_, t)| t)
    }

    /// A membership entry is proposed and not executed yet (nothing may be proposed now).
    pub(crate) fn membership_pending(&self) -> bool {
        self.config_pending.is_some()
    }

    /// Operations received from clients and not yet executed (HoliPaxos Algorithm 1's
    /// in-flight count): queued here, proposed and not executed, and held by the driver.
    pub(crate) fn inflight_ops(&self, ctx: &Ctx<'_>) -> u64 {
        let proposed: usize = self.in_flight.values().map(|f| f.cmds).sum();
        (self.queue.len() + proposed) as u64 + ctx.load.queued_requests
    }
}
