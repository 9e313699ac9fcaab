//! Paxos-LBR: MultiPaxos with leader-based rejection, the baseline of IDEM (§3, Fig. 3).
//!
//! Only the leader runs the acceptance test ([`crate::admission`]), on its own count of active
//! requests (queued, proposed and not yet executed, plus what the driver holds); followers
//! redirect clients to it as in plain MultiPaxos. The leader's rejection state is its
//! in-memory load: when it crashes, no replica rejects until a new leader is elected and has
//! filled its own pipeline — the weakness Fig. 3 shows and IDEM removes.
//!
//! Options: the admission options ([`crate::admission::OPTIONS`]); `admission=off` is plain
//! MultiPaxos.

use crate::admission::{AcceptanceTest, AdmissionConfig, Mode, Verdict, OPTIONS};
use crate::layers::MultiPaxosLayer;
use crate::multipaxos::{MultiPaxos, Variant};
use crate::registry::Setup;
use std::collections::BTreeMap;
use synod_core::{ClientRef, Command, Ctx, Protocol, ReplyBody, RequestMeta, Role};

/// The registry's client policy for `paxos-lbr`: to the leader like MultiPaxos's, but a
/// client gives up on the leader's reject (and backs off, in the bench) rather than retrying
/// it, as the paper's Paxos-LBR clients do.
pub fn client(cfg: &synod_core::client_policy::ClientConfig) -> Box<dyn synod_core::ClientPolicy> {
    Box::new(synod_core::client_policy::LeaderPolicy::giving_up_on_reject(cfg.retry.clone()))
}

/// Registry constructor for `paxos-lbr`.
pub fn build(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
    let cfg = AdmissionConfig::from_params(&setup.params, Mode::Aqm)?;
    Ok(Box::new(MultiPaxos::with_layer(setup, Variant::default(), "paxos-lbr", Box::new(LeaderRejection::new(cfg)))?))
}

/// The layer: the acceptance test at the leader.
pub struct LeaderRejection {
    test: AcceptanceTest,
    rejected: u64,
}

impl LeaderRejection {
    pub fn new(cfg: AdmissionConfig) -> LeaderRejection {
        LeaderRejection { test: AcceptanceTest::new(cfg), rejected: 0 }
    }
}

impl MultiPaxosLayer for LeaderRejection {
    fn options(&self) -> &'static [&'static str] {
        OPTIONS
    }

    fn admit(
        &mut self,
        core: &MultiPaxos,
        ctx: &mut Ctx<'_>,
        client: ClientRef,
        cmd: Command,
        _meta: &RequestMeta,
    ) -> Option<(ClientRef, Command)> {
        if core.role() != Role::Leader {
            return Some((client, cmd));
        }
        let active = core.inflight_ops(ctx) as usize;
        match self.test.test(ctx.now, cmd.client, cmd.seq, active) {
            Verdict::Accept => Some((client, cmd)),
            Verdict::Reject(reason) => {
                self.rejected += 1;
                // Depends on nothing persisted: not held by the group commit.
                ctx.answer_now(client, &cmd, ReplyBody::Rejected { reason });
                None
            }
        }
    }

    fn status(&self, _core: &MultiPaxos, extra: &mut BTreeMap<String, String>) {
        let c = self.test.config();
        extra.insert("admission".into(), c.mode.name().into());
        extra.insert("reject_threshold".into(), c.threshold.to_string());
        extra.insert("rejected".into(), self.rejected.to_string());
    }
}

#[cfg(test)]
mod tests {
    use crate::multipaxos::Msg;
    use crate::testnet::{put, Net};
    use std::time::Duration;
    use synod_core::protocol::decode;
    use synod_core::{OpResult, ProtocolParams, ReplyBody};

    /// The leader rejects at RT active requests; followers only redirect, whatever their load.
    #[test]
    fn the_leader_rejects_at_the_threshold_and_followers_redirect() {
        let mut p = ProtocolParams::default();
        p.set("reject_threshold=2").unwrap();
        p.set("admission=taildrop").unwrap();
        let mut net = Net::with_params(3, super::build, p);
        let (leader, _) = net.await_leader(Duration::from_secs(5)).unwrap();
        let follower = (1..=3).find(|&n| n != leader).unwrap();
        // Accepts are lost: proposed requests stay active at the leader.
        net.drop = Box::new(|_, _, b| matches!(decode::<Msg>(b), Ok(Msg::Accept { .. })));
        net.request(leader, 1, 1, put("a", "1"));
        net.request(leader, 2, 1, put("b", "1"));
        net.request(leader, 3, 1, put("c", "1"));
        assert!(matches!(net.reply_for(3, 1), Some(ReplyBody::Rejected { .. })));
        net.request(follower, 4, 1, put("d", "1"));
        assert!(matches!(net.reply_for(4, 1), Some(ReplyBody::NotLeader { leader: Some(l) }) if *l == leader));
        net.drop = Box::new(|_, _, _| false);
        net.run_for(Duration::from_millis(500));
        assert_eq!(net.reply_for(1, 1), Some(&ReplyBody::Done(OpResult::Done)));
        net.request(leader, 3, 1, put("c", "1"));
        assert_eq!(net.reply_for(3, 1), Some(&ReplyBody::Done(OpResult::Done)));
    }
}
