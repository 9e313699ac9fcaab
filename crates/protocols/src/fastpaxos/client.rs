//! Clients and replies. In Fast Paxos the proposers send their values straight to the
//! acceptors (§3.1): a client sends each request to every replica ([`MulticastPolicy`]).
//! Only the leader answers, after the command is chosen and executed ([`FastReplies`], the
//! core's layer hook for a reply it does not wait for itself); a lost request or reply is
//! retried with the same session ids, and the session table executes it once.

use crate::layers::MultiPaxosLayer;
use std::collections::BTreeMap;
use synod_core::client_policy::{
    final_outcome, ClientConfig, ClientCtx, ClientPolicy, Outcome, RequestMeta, RetryTimes,
};
use synod_core::{ClientRef, Command, Ctx, NodeId, Reply, Time};

const ATTEMPT_TIMER: u64 = 1;

/// The registry's client constructor for `fast-paxos`.
pub fn multicast_policy(cfg: &ClientConfig) -> Box<dyn ClientPolicy> {
    Box::new(MulticastPolicy::new(cfg.retry.clone()))
}

/// Send every request to all replicas; the first final reply ends it; after an attempt
/// timeout send it to all again (same session ids: executed at most once).
#[derive(Clone, Debug)]
pub struct MulticastPolicy {
    times: RetryTimes,
    active: bool,
}

impl MulticastPolicy {
    pub fn new(times: RetryTimes) -> Self {
        MulticastPolicy { times, active: false }
    }

    fn send_all(&self, cx: &mut ClientCtx<'_>) {
        cx.send_all(RequestMeta { sent_at: cx.now, ext: Default::default() });
        cx.set_timer(ATTEMPT_TIMER, self.times.attempt_timeout);
    }
}

impl ClientPolicy for MulticastPolicy {
    fn begin(&mut self, cx: &mut ClientCtx<'_>, _cmd: &Command) {
        if cx.members.is_empty() {
            return cx.finish(Outcome::Unknown("no replicas known".into()));
        }
        self.active = true;
        self.send_all(cx);
    }

    fn on_reply(&mut self, cx: &mut ClientCtx<'_>, reply: Reply) {
        if !self.active {
            return;
        }
        // NotLeader / Rejected are not final: the leader answers once the request is chosen.
        if let Some(outcome) = final_outcome(&reply.body) {
            self.active = false;
            cx.cancel_timer(ATTEMPT_TIMER);
            cx.finish(outcome);
        }
    }

    fn on_timer(&mut self, cx: &mut ClientCtx<'_>, id: u64) {
        if self.active && id == ATTEMPT_TIMER {
            self.send_all(cx);
        }
    }

    fn on_unreachable(&mut self, _cx: &mut ClientCtx<'_>, _node: NodeId) {
        // The other replicas got the request too; the attempt timer covers the rest.
    }
}

/// The layer of `fast-paxos`: remembers, per client session, the connection its current
/// request came in on, and has the leader answer it when the command is executed.
#[derive(Debug, Default)]
pub struct FastReplies {
    leading: bool,
    /// client → (seq, connection): one outstanding request per session.
    clients: BTreeMap<u64, (u64, ClientRef)>,
}

impl MultiPaxosLayer for FastReplies {
    fn admit(
        &mut self,
        _core: &crate::multipaxos::MultiPaxos,
        _ctx: &mut Ctx<'_>,
        client: ClientRef,
        cmd: Command,
        meta: &RequestMeta,
    ) -> Option<(ClientRef, Command)> {
        // A proposer's value must be the same at every acceptor (§3.1), but each replica
        // stamps its own receipt time on a command: take the client's send time instead,
        // which the policy stamps once per attempt.
        let mut cmd = cmd;
        if meta.sent_at != Time::ZERO {
            cmd.now_ms = meta.sent_at.as_nanos() / 1_000_000;
        }
        let newer = self.clients.get(&cmd.client).is_none_or(|(seq, _)| *seq <= cmd.seq);
        if newer {
            self.clients.insert(cmd.client, (cmd.seq, client));
        }
        Some((client, cmd))
    }

    fn on_command_executed(&mut self, _now: Time, cmd: &Command) -> Option<ClientRef> {
        match self.clients.get(&cmd.client) {
            Some((seq, client)) if *seq == cmd.seq => {
                let client = *client;
                self.clients.remove(&cmd.client);
                self.leading.then_some(client)
            }
            _ => None,
        }
    }

    fn on_become_leader(&mut self, _ctx: &mut Ctx<'_>) {
        self.leading = true;
    }

    fn on_leadership_lost(&mut self, _ctx: &mut Ctx<'_>) {
        self.leading = false;
    }
}
