//! 5. **Read leases** (option `read_lease=on`; the shared `synod_core::lease` piece that
//!    MultiPaxos uses too) for Raft, Raft+ and CRaft.
//!
//! With each heartbeat the leader starts a lease round (`LeaseReq`, its send time on the
//! leader's clock is the round's start); a follower that follows it in that term grants it
//! (`LeaseAck`) and from then, for `lease_ms` on its own clock, refuses its vote — and its
//! pre-vote — to every other candidate, its own campaign included. Once a majority (the
//! leader included: `n − p + 1` for an election quorum of `p`, so every election quorum
//! holds one grantor) granted a round, the leader answers Gets from its state machine
//! without a log entry (`Action::Read`) until the round's send time plus `lease_ms` minus the
//! drift margin (`lease_drift_ppm` per clock) and a 1 ms guard. Grants start no earlier than
//! the round was sent, last at least as long in real time as the leader's usable lease, and
//! no candidate can collect a majority of votes before they all expired: by then the leader
//! stopped reading. The leader itself votes for another candidate only after it stepped
//! down (a higher term deposes it first), so its own grant needs no promise.
//!
//! A new leader reads only after it executed its no-op (Raft §8: then it executed every
//! entry committed before its term); a recovering CRaft leader (gathering shards) does not
//! read. A deposed leader (any step down) drops its lease at once. A restarted replica has
//! forgotten whom it granted a lease: it refuses every vote, its own campaign and every
//! lease request for one lease duration. `lease_ms` is at most the minimum election timeout
//! (default equal), so a crashed leader's grants have expired by the time a follower's
//! election timer fires; a replica whose timer fires while its own grant still binds it
//! campaigns when the grant expires.

use super::*;
use synod_core::lease::{Grantor, LeaseConfig};

impl Raft {
    /// On restart: refuse every candidate and lease request for one lease duration (a
    /// single replica has nobody to refuse).
    pub(super) fn lease_restart(&mut self, now: Time) {
        if self.members.len() == 1 {
            return;
        }
        if let Some(l) = self.leases.as_mut() {
            l.grantor = Grantor::after_restart(now, &l.cfg);
        }
    }

    /// A lease granted by this replica forbids it to vote for `candidate` now; `Some` with
    /// when the grant expires (on our clock).
    pub(super) fn lease_blocks(&self, now: Time, candidate: NodeId) -> Option<Time> {
        let l = self.leases.as_ref()?;
        l.grantor.blocks(now, candidate).then(|| l.grantor.current(now).map_or(now, |(_, until)| until))
    }

    /// A new leadership (or none): the lease held is void; reads wait until `floor` is
    /// executed (`u64::MAX`: until the leader appended its no-op).
    pub(super) fn lease_lead_from(&mut self, floor: u64) {
        if let Some(l) = self.leases.as_mut() {
            l.lead_from(floor);
        }
    }

    /// With a heartbeat: start a lease round (its send time is `ctx.now`).
    pub(super) fn lease_request(&mut self, ctx: &mut Ctx<'_>) {
        let needed = LeaseConfig::grants_needed(self.members.len(), self.quorum());
        let (id, term) = (self.id, self.term);
        if self.role != Role::Leader {
            return;
        }
        let Some(l) = self.leases.as_mut() else { return };
        let round = l.holder.start_round(ctx.now, id, needed, &l.cfg);
        if needed > 1 {
            ctx.broadcast(&Msg::LeaseReq { term, round });
        }
    }

    /// A follower: grant the lease of the leader we follow in `term`.
    pub(super) fn on_lease_req(&mut self, ctx: &mut Ctx<'_>, from: NodeId, term: u64, round: u64) {
        if self.leases.is_none() || !self.members.contains(&from) || !self.heard_from_leader(ctx, from, term) {
            return;
        }
        let (now, term) = (ctx.now, self.term);
        let Some(l) = self.leases.as_mut() else { return };
        if l.grantor.grant(now, from, &l.cfg) {
            ctx.send(from, &Msg::LeaseAck { term, round });
        }
    }

    /// The leader: a follower granted a round of this term. Not a sign of replication
    /// progress: `last_heard` is left alone (it times the re-sending of lost Appends, and
    /// grants that keep flowing would stall a follower whose Append was lost for good).
    pub(super) fn on_lease_ack(&mut self, ctx: &mut Ctx<'_>, from: NodeId, term: u64, round: u64) {
        if term > self.term {
            self.become_follower(ctx, term, None);
            return;
        }
        if self.role != Role::Leader || term < self.term || !self.progress.contains_key(&from) {
            return;
        }
        if let Some(l) = self.leases.as_mut() {
            l.holder.granted(round, from, &l.cfg);
        }
    }

    /// Answer `cmd` from the lease if it is a read and the lease allows it now; otherwise
    /// hand it back (it goes through the log).
    pub(super) fn try_lease_read(&mut self, ctx: &mut Ctx<'_>, client: ClientRef, cmd: Command) -> Option<Command> {
        let ok = self.role == Role::Leader && self.recovering.is_none() && !cmd.op.is_write();
        let executed = self.log.executed_upto();
        let unchecked = self.lease_reads_unchecked;
        let Some(l) = self.leases.as_mut() else { return Some(cmd) };
        if !ok || !l.try_read(ctx.now, executed, unchecked) {
            return Some(cmd);
        }
        ctx.push(Action::Read { client, cmd });
        None
    }

    /// Status field `lease_reads`.
    pub(super) fn lease_status(&self, extra: &mut BTreeMap<String, String>) {
        if let Some(l) = self.leases.as_ref() {
            extra.insert("lease_reads".into(), l.reads.to_string());
        }
    }
}
