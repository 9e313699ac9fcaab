//! 8. **Read leases** (option `read_lease=on`; `synod_core::lease`).
//!
//! With each heartbeat the leader asks for a lease (`LeaseReq`); a follower of its ballot
//! grants it (`LeaseAck`) and from then refuses phase 1 of every other candidate — its own
//! campaign included — for `lease_ms` on its clock. Once enough followers granted a round
//! (with the leader, `n − p + 1` for an election quorum of `p`: every election quorum meets
//! them), the leader answers read-only requests from its state machine without a log
//! position (`Action::Read`) until the round's send time plus `lease_ms` minus the drift
//! margin (`lease_drift_ppm`, ppm of rate error per clock) and a 1 ms guard. It does so only
//! after executing every slot its election found (values chosen under earlier leaders), and
//! not while a membership change is pending; otherwise reads go through the log as before.
//! A restarted replica has forgotten whom it granted a lease: it refuses every candidate
//! for one lease duration.

use super::*;
use synod_core::lease::{Grantor, LeaseConfig};
pub(super) use synod_core::lease::{Leases, LEASE_OPTIONS};

impl MultiPaxos {
    /// On restart: refuse every candidate for one lease duration.
    pub(super) fn lease_restart(&mut self, now: Time) {
        if let Some(l) = self.leases.as_mut() {
            l.grantor = Grantor::after_restart(now, &l.cfg);
        }
    }

    /// A lease granted by this acceptor forbids it to help elect `candidate` now.
    pub(super) fn lease_blocks(&self, now: Time, candidate: NodeId) -> bool {
        self.leases.as_ref().is_some_and(|l| l.grantor.blocks(now, candidate))
    }

    /// A new ballot, leadership lost or the configuration changed: the lease held is void.
    pub(super) fn lease_reset(&mut self) {
        if let Some(l) = self.leases.as_mut() {
            l.holder.reset();
        }
    }

    /// The leader of a new ballot may read once it executed up to `floor`.
    pub(super) fn lease_floor(&mut self, floor: u64) {
        if let Some(l) = self.leases.as_mut() {
            l.lead_from(floor);
        }
    }

    /// With a heartbeat: start a lease round.
    pub(super) fn lease_request(&mut self, ctx: &mut Ctx<'_>) {
        let needed = LeaseConfig::grants_needed(self.members.len(), self.prepare_quorum);
        let (id, ballot) = (self.id, self.promised);
        let Some(l) = self.leases.as_mut() else { return };
        if self.role != Role::Leader {
            return;
        }
        let round = l.holder.start_round(ctx.now, id, needed, &l.cfg);
        if needed > 1 {
            ctx.broadcast(&Msg::LeaseReq { ballot, round });
        }
    }

    /// A follower: grant the lease of the leader we follow.
    pub(super) fn on_lease_req(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, round: u64) {
        if self.leases.is_none() || !self.members.contains(&from) || ballot.node != from {
            return;
        }
        // Adopts the ballot like a heartbeat (persisting a higher promise before the ack).
        if !self.follow(ctx, from, ballot) {
            return;
        }
        let now = ctx.now;
        let Some(l) = self.leases.as_mut() else { return };
        if l.grantor.grant(now, from, &l.cfg) {
            ctx.send(from, &Msg::LeaseAck { ballot, round });
        }
    }

    /// The leader: a follower granted a round.
    pub(super) fn on_lease_ack(&mut self, from: NodeId, ballot: Ballot, round: u64) {
        if self.role != Role::Leader || ballot != self.promised || !self.members.contains(&from) {
            return;
        }
        if let Some(l) = self.leases.as_mut() {
            l.holder.granted(round, from, &l.cfg);
        }
    }

    /// Answer `cmd` from the lease if it is a read and the lease allows it now.
    pub(super) fn try_lease_read(&mut self, ctx: &mut Ctx<'_>, client: ClientRef, cmd: Command) -> Option<Command> {
        let executed = self.log.executed_upto();
        let ok = self.role == Role::Leader && self.config_pending.is_none() && !cmd.op.is_write();
        let ignore_expiry = self.variant.lease_reads_unchecked;
        let Some(l) = self.leases.as_mut() else { return Some(cmd) };
        if !ok || !l.try_read(ctx.now, executed, ignore_expiry) {
            return Some(cmd);
        }
        ctx.push(Action::Read { client, cmd });
        None
    }

    /// Status fields.
    pub(super) fn lease_status(&self, extra: &mut BTreeMap<String, String>) {
        if let Some(l) = self.leases.as_ref() {
            extra.insert("lease_reads".into(), l.reads.to_string());
        }
    }
}
