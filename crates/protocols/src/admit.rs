//! Admission control in front of any protocol: the acceptance test of IDEM §5.1
//! ([`crate::admission`]) as a wrapper around a `Box<dyn Protocol>`, so that a protocol that
//! knows nothing about overload rejects early what it would otherwise queue (registered as
//! `raft-admit`: Raft with admission control). IDEM and Paxos-LBR hook the same test into the
//! MultiPaxos core through its layer interface instead, because they need the core's state
//! (the leader's in-flight slots, the REQUIRE quorum); this wrapper needs nothing but the
//! events and actions every protocol has.
//!
//! Each replica counts its *active* requests: client requests it handed to the inner protocol
//! and not yet finished, plus the requests the driver has queued for it
//! (`ctx.load.queued_requests`). A request is finished here when the inner protocol applies
//! it (`Action::Apply` of its (client, seq), answered or not), answers it finally (a `Reply`
//! or `ReplyNow` that is not speculative: done, redirect, reject, invalid), or after
//! `hold_max_ms` (default 30 s: lost with a failed leader, executed inside a snapshot). A new
//! request is tested against that count; a rejected one gets `Rejected` at once through
//! [`Action::ReplyNow`] (it depends on nothing persisted, so it is not held by the group
//! commit) and never reaches the inner protocol. A retransmission of an active request passes
//! without a new test. As in Paxos-LBR, a rejection is one replica's decision about load, not
//! a promise: its clients take it as ambivalent (`LeaderPolicy::giving_up_on_reject`), and a
//! retry may be accepted. Options: the admission options, `hold_max_ms`, and the inner
//! protocol's own.

use crate::admission::{AcceptanceTest, AdmissionConfig, Mode, ReqId, Verdict, OPTIONS};
use crate::registry::Setup;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::time::Duration;
use synod_core::{Action, Ctx, Event, Protocol, ReplyBody, Status, Time};

/// Options this wrapper reads (and removes before building the inner protocol).
const OWN_OPTIONS: &[&str] = &["hold_max_ms"];

/// Registry constructor for `raft-admit`.
pub fn build_raft(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
    wrap(setup, "raft-admit", crate::raft::build)
}

/// Build `inner` from `setup` without the admission options, and put the acceptance test in
/// front of it.
pub fn wrap(
    setup: &Setup,
    name: &'static str,
    inner: fn(&Setup) -> Result<Box<dyn Protocol>, String>,
) -> Result<Box<dyn Protocol>, String> {
    let cfg = AdmissionConfig::from_params(&setup.params, Mode::Aqm)?;
    let hold_max = match setup.params.options.get("hold_max_ms") {
        None => Duration::from_secs(30),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(ms) if ms > 0 => Duration::from_millis(ms),
            _ => return Err(format!("option hold_max_ms: expected a number > 0, got {v:?}")),
        },
    };
    let mut inner_setup = setup.clone();
    inner_setup.params.options.retain(|k, _| !OPTIONS.contains(&k.as_str()) && !OWN_OPTIONS.contains(&k.as_str()));
    let inner = inner(&inner_setup)?;
    Ok(Box::new(Admitted {
        name,
        inner,
        test: AcceptanceTest::new(cfg),
        hold_max,
        active: BTreeMap::new(),
        rejected: 0,
    }))
}

/// A protocol with the acceptance test in front of it.
pub struct Admitted {
    name: &'static str,
    inner: Box<dyn Protocol>,
    test: AcceptanceTest,
    hold_max: Duration,
    /// Requests handed to the inner protocol and not finished, with when they arrived.
    active: BTreeMap<ReqId, Time>,
    rejected: u64,
}

impl Admitted {
    /// Drop what the inner protocol finished among the actions it pushed since `mark`.
    fn finished(&mut self, ctx: &Ctx<'_>, mark: usize) {
        if self.active.is_empty() {
            return;
        }
        for a in ctx.pushed_since(mark) {
            let id = match a {
                Action::Apply { cmd, .. } => (cmd.client, cmd.seq),
                Action::Reply { reply, .. } | Action::ReplyNow { reply, .. } => match reply.body {
                    ReplyBody::Speculative { .. } | ReplyBody::SlowReply { .. } | ReplyBody::RejectedEarly { .. } => {
                        continue
                    }
                    _ => (reply.client, reply.seq),
                },
                _ => continue,
            };
            self.active.remove(&id);
        }
    }

    /// Requests older than `hold_max` will not finish through the inner protocol any more.
    fn expire(&mut self, now: Time) {
        let hold_max = self.hold_max;
        self.active.retain(|_, since| now.since(*since) < hold_max);
    }
}

impl Protocol for Admitted {
    fn recover(&mut self, ctx: &mut Ctx<'_>, records: Vec<Bytes>) {
        self.inner.recover(ctx, records);
    }

    fn on_event(&mut self, ctx: &mut Ctx<'_>, event: Event) {
        if let Event::Request { client, cmd, .. } = &event {
            let id = (cmd.client, cmd.seq);
            if !self.active.contains_key(&id) {
                if self.active.len() >= self.test.config().threshold {
                    self.expire(ctx.now);
                }
                let active = self.active.len() + ctx.load.queued_requests as usize;
                match self.test.test(ctx.now, cmd.client, cmd.seq, active) {
                    Verdict::Accept => {
                        self.active.insert(id, ctx.now);
                    }
                    Verdict::Reject(reason) => {
                        self.rejected += 1;
                        ctx.answer_now(*client, cmd, ReplyBody::Rejected { reason });
                        return;
                    }
                }
            }
        }
        let mark = ctx.pushed();
        self.inner.on_event(ctx, event);
        self.finished(ctx, mark);
    }

    /// The inner protocol's end of turn (a leader proposes the turn's requests there; with
    /// one replica they are answered at once).
    fn flush(&mut self, ctx: &mut Ctx<'_>) {
        let mark = ctx.pushed();
        self.inner.flush(ctx);
        self.finished(ctx, mark);
    }

    fn status(&self) -> Status {
        let mut s = self.inner.status();
        s.protocol = self.name.to_string();
        let c = self.test.config();
        s.extra.insert("admission".into(), c.mode.name().into());
        s.extra.insert("reject_threshold".into(), c.threshold.to_string());
        s.extra.insert("active".into(), self.active.len().to_string());
        s.extra.insert("rejected".into(), self.rejected.to_string());
        s
    }

    fn describe_message(&self, msg: &[u8]) -> String {
        self.inner.describe_message(msg)
    }
}

#[cfg(test)]
mod tests {
    use crate::testnet::{put, Net};
    use std::time::Duration;
    use synod_core::{OpResult, ProtocolParams, ReplyBody};

    fn params(extra: &[&str]) -> ProtocolParams {
        let mut p = ProtocolParams::default();
        for o in extra {
            p.set(o).unwrap();
        }
        p
    }

    /// Raft behind the acceptance test: the leader rejects at RT requests in flight (commits
    /// held back by a partition), at once and without handing them to Raft; once Raft
    /// executes the admitted ones, new requests are admitted again.
    #[test]
    fn raft_admit_rejects_at_the_threshold_and_admits_again_after_execution() {
        let mut net = Net::with_params(3, super::build_raft, params(&["reject_threshold=2", "admission=taildrop"]));
        let (leader, _) = net.await_leader(Duration::from_secs(5)).unwrap();
        // Followers cut off: nothing commits, admitted requests stay active at the leader.
        net.drop = Box::new(move |from, to, _| from != to);
        net.request(leader, 1, 1, put("a", "1"));
        net.request(leader, 2, 1, put("b", "1"));
        net.request(leader, 3, 1, put("c", "1"));
        assert!(matches!(net.reply_for(3, 1), Some(ReplyBody::Rejected { .. })), "{:?}", net.reply_for(3, 1));
        assert_eq!(net.reply_for(1, 1), None);
        let status = net.node(leader).p.status();
        assert_eq!((status.extra["active"].as_str(), status.extra["rejected"].as_str()), ("2", "1"));
        // The rejected request never reached Raft: it is not applied once the cluster heals.
        net.drop = Box::new(|_, _, _| false);
        net.run_for(Duration::from_millis(500));
        assert_eq!(net.reply_for(1, 1), Some(&ReplyBody::Done(OpResult::Done)));
        assert_eq!(net.reply_for(2, 1), Some(&ReplyBody::Done(OpResult::Done)));
        assert_eq!(net.node(leader).p.status().extra["active"], "0");
        assert!(net.node(leader).applied.iter().all(|(_, c)| c.client != 3));
        // Room again: the retry is admitted and executes.
        net.request(leader, 3, 1, put("c", "1"));
        net.run_for(Duration::from_millis(500));
        assert_eq!(net.reply_for(3, 1), Some(&ReplyBody::Done(OpResult::Done)));
    }

    /// The wrapper's options are not passed to Raft (which would refuse them), Raft's own
    /// options still are, and a bad value is an error.
    #[test]
    fn options_are_split_between_the_wrapper_and_the_inner_protocol() {
        let setup = |opts: &[&str]| crate::registry::Setup { id: 1, members: vec![1, 2, 3], params: params(opts) };
        assert!(super::build_raft(&setup(&["reject_threshold=5", "hold_max_ms=100"])).is_ok());
        assert!(super::build_raft(&setup(&["hold_max_ms=0"])).is_err());
        assert!(super::build_raft(&setup(&["no_such_option=1"])).is_err());
    }
}
