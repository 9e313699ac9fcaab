//! §2 "Query Processing": queries are answered by the tail from its state — under a lease.
//!
//! The trap: the paper's master removes a tail it believes failed and makes its predecessor
//! the tail; a tail that was only partitioned away and has not heard of the new
//! configuration would keep answering queries from a state that misses every update the
//! new chain completed — a stale read. Two ways out: send queries through the chain (as
//! costly as an update), or let the tail answer only under a lease from the configuration
//! group. We take the lease (`synod_core::lease`, the piece MultiPaxos's read leases use):
//! - every heartbeat the tail of epoch `e` asks every replica for a grant (`LeaseReq`,
//!   carrying its configuration); a replica in epoch `e` that follows that tail grants it
//!   (`Grantor::grant`) unless it has accepted a newer configuration with another tail, or
//!   refused one recently because of the lease (then it lets the lease run out, so a change
//!   that moves the tail — removing it, or appending a node after it — goes through);
//! - a replica that granted refuses, for the lease duration on its own clock, to accept any
//!   configuration whose tail is not the holder (`Chain::lease_blocks`), so no configuration
//!   that deposes the tail can be chosen by a majority until the grants of a majority have
//!   expired (changes that keep the tail — a failed head or middle — are not delayed);
//! - the tail answers a query only while `Holder::valid` (round send time + duration − drift
//!   margin, on its own clock) with grants from a majority, in the epoch it is tail of, in
//!   sync with its predecessor and holding everything the predecessor held when it brought it
//!   in sync (`catchup_to`: those updates may have been processed by an earlier tail), and
//!   not itself driving a configuration change.
//!
//! So by the time a newer configuration exists the old tail's lease has run out. The cost:
//! removing a failed tail waits for its lease to expire (at most `lease_ms`, by default the
//! failure timeout itself). Updates need no lease: an update is acknowledged only after it
//! passed every member of its epoch's chain, and every later chain is made of those members
//! (plus nodes that copy a predecessor's history first).

use super::*;

impl Chain {
    pub(super) fn on_query(&mut self, ctx: &mut Ctx<'_>, client: ClientRef, cmd: Command) {
        if !self.is_tail() {
            ctx.answer(client, &cmd, ReplyBody::NotLeader { leader: self.cfg.tail() });
            return;
        }
        if !self.variant.lease_unchecked && !self.lease_valid(ctx.now) {
            ctx.answer(client, &cmd, ReplyBody::Rejected { reason: "chain tail: no read lease (yet)".into() });
            return;
        }
        self.reads += 1;
        ctx.push(Action::Read { client, cmd });
    }

    pub(super) fn lease_valid(&self, now: Time) -> bool {
        self.is_tail()
            && self.synced
            && self.proposal.is_none()
            && self.lease_epoch == self.cfg.epoch
            && self.stable == self.last
            && self.stable >= self.catchup_to
            && self.holder.valid(now)
    }

    /// Grants needed: enough to meet every majority of the configuration group.
    fn grants_needed(&self) -> usize {
        LeaseConfig::grants_needed(self.members.len(), synod_core::quorum::majority(self.members.len()))
    }

    /// Whether this replica may grant a lease to the tail now (and may count its own): not
    /// once it accepted a configuration of a later epoch that moves the tail.
    fn may_grant(&self, now: Time, holder: NodeId) -> bool {
        now >= self.hold_grants_until
            && self.accepted.as_ref().is_none_or(|(_, c)| c.epoch <= self.cfg.epoch || c.tail() == Some(holder))
    }

    /// Whether the lease this replica granted forbids accepting `value` from `from` now: a
    /// configuration that moves the tail away from the lease holder, proposed by anyone but
    /// the holder itself (which stops using its lease when it proposes). After a restart
    /// the replica does not know whom it granted: it accepts nobody's change for a lease
    /// duration.
    pub(super) fn lease_blocks(&self, now: Time, from: NodeId, value: &Config) -> bool {
        match self.grantor.current(now) {
            None => false,
            Some((Some(holder), _)) => from != holder && value.tail() != Some(holder),
            Some((None, _)) => true,
        }
    }

    /// The tail's heartbeat: a new lease round.
    pub(super) fn lease_tick(&mut self, ctx: &mut Ctx<'_>) {
        if !self.is_tail() || !self.synced || self.proposal.is_some() {
            return;
        }
        if !self.may_grant(ctx.now, self.me) || !self.grantor.grant(ctx.now, self.me, &self.lease) {
            return;
        }
        if self.lease_epoch != self.cfg.epoch {
            self.holder.reset();
            self.lease_epoch = self.cfg.epoch;
        }
        let needed = self.grants_needed();
        let round = self.holder.start_round(ctx.now, self.me, needed, &self.lease);
        ctx.broadcast(&Msg::LeaseReq { cfg: self.cfg.clone(), round });
    }

    pub(super) fn on_lease_req(&mut self, ctx: &mut Ctx<'_>, from: NodeId, cfg: Config, round: u64) {
        // Only a chosen configuration reaches a tail, so a newer one is learned here.
        self.learn(ctx, cfg.clone());
        if cfg.epoch != self.cfg.epoch || self.cfg.tail() != Some(from) || !self.may_grant(ctx.now, from) {
            return;
        }
        if self.grantor.grant(ctx.now, from, &self.lease) {
            ctx.send(from, &Msg::LeaseAck { epoch: cfg.epoch, round });
        }
    }

    pub(super) fn on_lease_ack(&mut self, from: NodeId, epoch: u64, round: u64) {
        if epoch == self.cfg.epoch && self.lease_epoch == epoch && self.is_tail() && self.proposal.is_none() {
            self.holder.granted(round, from, &self.lease);
        }
    }
}
