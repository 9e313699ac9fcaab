//! §5.2 and §4.4: forwarding of accepted requests that did not execute, REQUIRE re-sends
//! after a view change, and implicit garbage collection — all on the layer's periodic tick.

use super::accept::broadcast;
use super::*;
use synod_core::Ghost;

impl Idem {
    /// ⟨FORWARD⟩ of a request another replica accepted: accepted here whatever the load or an
    /// earlier rejection (the sender accepted it, so the client's outcome is not a definitive
    /// failure), then required like any accepted request.
    pub(super) fn on_forward(&mut self, core: &MultiPaxos, ctx: &mut Ctx<'_>, cmd: Command) {
        let id = (cmd.client, cmd.seq);
        if self.executed.contains(&id) || self.held.contains_key(&id) || self.superseded(&id) {
            return;
        }
        self.accept(core, ctx, cmd, None);
    }

    /// A newer request of the same client executed: the client gave up on this one.
    fn superseded(&self, id: &ReqId) -> bool {
        self.newest.get(&id.0).is_some_and(|s| *s > id.1)
    }

    /// Every forward delay: forward accepted requests that did not execute in time (again
    /// every five forward delays while they do not), re-send REQUIREs after a view change or when the leader may have lost them,
    /// release what can no longer execute, forget stale leader state, and move the window.
    pub(super) fn on_tick(&mut self, core: &MultiPaxos, ctx: &mut Ctx<'_>) -> Option<LayerOp> {
        let now = ctx.now;
        let leader = core.leader();
        let resend = self.cfg.forward_delay * 5;
        let mut release = Vec::new();
        let mut forward = Vec::new();
        let mut require = Vec::new();
        for (id, h) in &self.held {
            let age = now.since(h.since);
            if age >= self.cfg.hold_max || self.superseded(id) {
                release.push(*id);
                continue;
            }
            // Forwarded once the delay passed, and again every `resend` while it does not
            // execute (a forward can be lost like any message).
            let due = match h.forwarded {
                None => age >= self.cfg.forward_delay,
                Some(at) => now.since(at) >= resend,
            };
            if due {
                forward.push(*id);
            }
            let stale = match h.required {
                None => true,
                Some((l, at)) => Some(l) != leader || now.since(at) >= resend,
            };
            if stale && leader.is_some() {
                require.push(*id);
            }
        }
        for id in release {
            self.held.remove(&id);
            self.stats.released += 1;
        }
        for id in forward {
            if let Some(h) = self.held.get_mut(&id) {
                h.forwarded = Some(now);
                let cmd = h.cmd.clone();
                self.stats.forwarded += 1;
                broadcast(ctx, &IdemMsg::Forward { cmd });
            }
        }
        for id in require {
            self.send_require(core, ctx, id);
        }
        // Leader state for requests that never gathered f + 1 REQUIREs (their accepters
        // crashed) or whose proposal is long gone.
        let hold_max = self.cfg.hold_max;
        self.requires.retain(|_, r| now.since(r.first) < hold_max);
        let requires = &self.requires;
        self.bodies.retain(|id, _| requires.contains_key(id));
        self.proposed.retain(|_, t| now.since(*t) < hold_max);
        self.implicit_gc(core, ctx)
    }

    /// §4.4 and Theorem 6.1: with r_max = n × RT (the window w = r_max), a replica that
    /// received instance s + r_max discards every instance up to s. It reports each discard to
    /// the simulator (`Ghost::Discarded`), which checks exactly that rule, so a collection one
    /// instance too early (mutant `idem-gc-early`) fails the check.
    ///
    /// The theorem's *conclusion* — f + 1 replicas executed what is discarded — is not what the
    /// simulator checks, because it does not hold here and nothing relies on it: forwards are
    /// accepted whatever the load, so active sets exceed RT, and a leader pipelines proposals
    /// of requests accepted long before (a check of it failed for the correct window at
    /// `synod check --protocol idem --seed 8 --param reject_threshold=2`: the leader, its
    /// inbound link cut, proposed slots 24–30 and discarded 24 as it executed it, before any
    /// follower learned the commit). What makes the collection safe here is the core: it
    /// trims no slot this replica has not executed, and a replica that lags behind the bound
    /// fetches a snapshot (the paper's checkpoint) instead of the discarded instances.
    pub(super) fn implicit_gc(&self, core: &MultiPaxos, ctx: &mut Ctx<'_>) -> Option<LayerOp> {
        let r_max = (core.members().len() * self.cfg.admission.threshold) as u64;
        let window = if self.dev.gc_early { r_max.saturating_sub(1) } else { r_max };
        let newest = core.log_last();
        let bound = newest.saturating_sub(window);
        if bound <= core.trim_bound() {
            return None;
        }
        ctx.ghost(Ghost::Discarded { upto: bound, newest, r_max });
        Some(LayerOp::Trim(bound))
    }
}
