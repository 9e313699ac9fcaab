//! 5. **Membership: single-server changes through the log.**
//!
//! See docs/design.md, "Membership" (HoliPaxos §3.3's fix for an extended failure: remove
//! the failed node, add a replacement).
//!
//! A membership entry in slot `s` takes effect when `s` is executed, at the same log position
//! on every replica, and governs every slot after it: the leader proposes nothing after `s`
//! until then, and runs phase 1 again under the new configuration.

use super::*;

impl MultiPaxos {
    /// Size of the configuration in effect.
    pub(crate) fn n(&self) -> usize {
        self.members.len()
    }

    /// Whether this replica belongs to the configuration in effect (a joining learner or a
    /// removed replica does not: it never campaigns).
    pub(super) fn is_member(&self) -> bool {
        self.members.contains(&self.id)
    }

    /// The current configuration with the addresses membership entries carried.
    pub(super) fn member_infos(&self) -> Vec<MemberInfo> {
        self.members
            .iter()
            .map(|id| MemberInfo { id: *id, addr: self.addrs.get(id).cloned().unwrap_or_default() })
            .collect()
    }

    /// Install a configuration (executed membership entry, snapshot, durable record) and
    /// tell the driver. Returns whether the member set changed.
    pub(super) fn set_members(&mut self, ctx: &mut Ctx<'_>, members: Vec<MemberInfo>) -> bool {
        let mut ids: Vec<NodeId> = members.iter().map(|m| m.id).collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.is_empty() {
            return false; // never produced by this code; keep the current configuration
        }
        for m in members.iter().filter(|m| !m.addr.is_empty()) {
            self.addrs.insert(m.id, m.addr.clone());
        }
        self.addrs.retain(|id, _| ids.contains(id));
        let changed = ids != self.members;
        self.members = ids;
        self.quorum = self.variant.quorum_override.unwrap_or_else(|| majority(self.members.len()));
        self.prepare_quorum =
            self.variant.quorum_override.unwrap_or_else(|| self.codec.prepare_quorum(self.members.len()));
        ctx.push(Action::MembershipChanged { members: self.member_infos() });
        // Grants were counted against the old configuration.
        self.lease_reset();
        changed
    }

    /// An admin asks for a change. Only the leader proposes it, one at a time: a membership
    /// entry in slot `s` takes effect when `s` is executed and governs every slot after it,
    /// so the leader proposes nothing after `s` until then.
    pub(super) fn on_reconfigure(&mut self, ctx: &mut Ctx<'_>, client: ClientRef, id: u64, change: MemberChange) {
        let me = self.id;
        let answer = |ctx: &mut Ctx<'_>, body| ctx.reply(client, Reply { client: 0, seq: id, from: me, body });
        if self.fast.is_some() {
            let reason = "fast-paxos does not support membership changes".to_string();
            return answer(ctx, ReplyBody::Invalid { reason });
        }
        if self.role == Role::Candidate && self.leader == Some(self.id) {
            let reason = "the leader is re-running phase 1 under a new configuration; retry".to_string();
            return answer(ctx, ReplyBody::Rejected { reason });
        }
        if self.role != Role::Leader {
            return answer(ctx, ReplyBody::NotLeader { leader: self.leader.filter(|l| *l != self.id) });
        }
        if let Some(slot) = self.config_pending {
            let reason = format!("the membership change in slot {slot} is not committed yet; retry when it is");
            return answer(ctx, ReplyBody::Rejected { reason });
        }
        let mut members = self.member_infos();
        match change {
            // A change already in effect is answered at once, so a client may retry freely.
            MemberChange::Add { id: node, .. } if self.members.contains(&node) => {
                return answer(ctx, ReplyBody::Done(synod_core::OpResult::Done));
            }
            MemberChange::Add { addr, .. } if addr.is_empty() => {
                let reason = "adding a member needs its peer address".to_string();
                return answer(ctx, ReplyBody::Invalid { reason });
            }
            MemberChange::Add { id: node, addr } => members.push(MemberInfo { id: node, addr }),
            MemberChange::Remove { id: node } if !self.members.contains(&node) => {
                return answer(ctx, ReplyBody::Done(synod_core::OpResult::Done));
            }
            MemberChange::Remove { .. } if self.members.len() == 1 => {
                let reason = "cannot remove the last member".to_string();
                return answer(ctx, ReplyBody::Invalid { reason });
            }
            MemberChange::Remove { id: node } => members.retain(|m| m.id != node),
        }
        members.sort();
        let slot = self.next_slot;
        // Set before proposing: a single-member cluster commits (and executes) at once.
        self.config_pending = Some(slot);
        self.config_waiter = Some((slot, client, id));
        self.propose(ctx, vec![(Value::Config(members), Vec::new())]);
    }

    /// The membership entry of `slot` was executed here: the configuration changes at the
    /// same log position on every replica.
    pub(super) fn apply_config(&mut self, ctx: &mut Ctx<'_>, slot: u64, members: Vec<MemberInfo>) {
        let changed = self.set_members(ctx, members);
        if self.config_pending == Some(slot) {
            self.config_pending = None;
        }
        if let Some((_, client, id)) = self.config_waiter.filter(|w| w.0 == slot) {
            self.config_waiter = None;
            let body = ReplyBody::Done(synod_core::OpResult::Done);
            ctx.reply(client, Reply { client: 0, seq: id, from: self.id, body });
        }
        if !self.is_member() {
            // Removed: a leader steps down (its clients are redirected), and nobody here
            // campaigns any more.
            if self.role != Role::Follower {
                self.step_down(ctx, None);
            }
            return;
        }
        match self.role {
            // Always, even when the entry changed nothing (a re-proposed duplicate): the
            // leader may have set aside values its phase 1 found after this slot
            // (`become_leader`), and only a phase 1 from here on learns them again.
            Role::Leader => self.phase1(ctx, false),
            // Its election counts promises with the old quorum: start over later.
            Role::Candidate if changed => self.step_down(ctx, None),
            _ => {}
        }
    }
}
