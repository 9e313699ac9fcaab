//! §5.1 and §4.3: the acceptance test at every replica, REQUIRE, and the leader's proposal
//! after f + 1 REQUIREs.

use super::*;
use crate::admission::Verdict;
use crate::multipaxos::Msg;
use msg::IdemRecord;
use synod_core::protocol::encode;
use synod_core::{Ghost, ReplyBody, Role};

/// Send an IDEM message to one replica.
pub(super) fn send(ctx: &mut Ctx<'_>, to: NodeId, msg: &IdemMsg) {
    ctx.send(to, &Msg::Layer(encode(msg)));
}

/// Send an IDEM message to every other replica.
pub(super) fn broadcast(ctx: &mut Ctx<'_>, msg: &IdemMsg) {
    ctx.broadcast(&Msg::Layer(encode(msg)));
}

/// Where a request came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// Directly from a client connected to this replica.
    Client(ClientRef),
    /// Relayed by a peer that received it from the client.
    Relay,
}

impl Idem {
    /// A request from a client connected here: relay it to the peers unless the client sent it
    /// to all of them (duplicates are recognised by request id), then decide.
    pub(super) fn on_client_request(
        &mut self,
        core: &MultiPaxos,
        ctx: &mut Ctx<'_>,
        client: ClientRef,
        cmd: Command,
        multicast: bool,
    ) {
        let id = (cmd.client, cmd.seq);
        if self.cfg.relay && !multicast && !self.held.contains_key(&id) {
            broadcast(ctx, &IdemMsg::Relay { cmd: cmd.clone() });
        }
        self.arrive(core, ctx, Origin::Client(client), cmd);
    }

    pub(super) fn on_relay(&mut self, core: &MultiPaxos, ctx: &mut Ctx<'_>, cmd: Command) {
        self.arrive(core, ctx, Origin::Relay, cmd);
    }

    /// §5.1: a request reaches this replica. Duplicates of an accepted request are absorbed,
    /// a rejected one is rejected again (sticky, no new test), anything else is tested.
    fn arrive(&mut self, core: &MultiPaxos, ctx: &mut Ctx<'_>, origin: Origin, cmd: Command) {
        let id = (cmd.client, cmd.seq);
        let client = match origin {
            Origin::Client(c) => Some(c),
            Origin::Relay => None,
        };
        // A client retrying a request of its session at or below the newest one executed here
        // has had it executed (its reply was lost): it is ordered again without the
        // acceptance test, and the session table answers the original result. Rejecting it
        // would tell the client that an executed request never executes (seed 323 at
        // reject_threshold=2: every replica rejected such a retry).
        let retry_of_executed =
            client.is_some() && self.newest.get(&cmd.client).is_some_and(|newest| *newest >= cmd.seq);
        if self.executed.contains(&id) {
            match origin {
                // A late relay of an executed request: nothing to do.
                Origin::Relay => return,
                // A client retrying an executed request: order it again so that it gets its
                // answer (the session table returns the original result, it does not re-run).
                Origin::Client(_) => {
                    self.executed.remove(&id);
                }
            }
        }
        if let Some(h) = self.held.get_mut(&id) {
            if client.is_some() {
                h.client = client;
            }
            return;
        }
        if retry_of_executed {
            return self.accept(core, ctx, cmd, client);
        }
        // Sticky verdicts, also across a restart and after a release (`admission::Verdicts`
        // has the argument): an id accepted here before is accepted again, one rejected here
        // is rejected again, neither re-runs the test.
        match self.verdicts.get(&id) {
            Some(true) => return self.accept(core, ctx, cmd, client),
            Some(false) if !self.dev.forget_rejections => {
                // Keep the client to answer if the request executes after all (other replicas
                // may have accepted it).
                if let Some(c) = client {
                    let reason = "rejected (overload): this request was rejected here before".to_string();
                    self.reject_early(ctx, c, &cmd, &reason);
                    ctx.answer(c, &cmd, ReplyBody::Rejected { reason });
                    self.rejected.insert(cmd, client);
                } else if !self.rejected.contains(&id) {
                    self.rejected.insert(cmd, None);
                }
                return;
            }
            _ => {}
        }
        match self.test.test(ctx.now, cmd.client, cmd.seq, self.held.len()) {
            Verdict::Accept => self.accept(core, ctx, cmd, client),
            Verdict::Reject(reason) => {
                self.stats.rejected += 1;
                if let Some(c) = client {
                    self.reject_early(ctx, c, &cmd, &reason);
                }
                // Durable before the REJECT leaves.
                self.note_verdict(core, ctx, id, false);
                if let Some(c) = client {
                    ctx.answer(c, &cmd, ReplyBody::Rejected { reason });
                }
                self.rejected.insert(cmd, client);
            }
        }
    }

    /// The early REJECT (option `early_reject`, on by default): sent at once, not held by
    /// the group commit that makes the verdict durable, so a client learns of the rejection
    /// within a round trip even when the replica's turn also persists other records. It
    /// depends on nothing persisted because it promises nothing a crash could break: the
    /// client counts it towards ambivalence only (`policy`), and the durable `Rejected`
    /// follows after the commit for a definitive failure.
    fn reject_early(&mut self, ctx: &mut Ctx<'_>, client: ClientRef, cmd: &Command, reason: &str) {
        if self.cfg.early_reject {
            ctx.answer_now(client, cmd, ReplyBody::RejectedEarly { reason: reason.to_string() });
        }
    }

    /// Note this replica's verdict on a request; a new one is made durable before anything it
    /// causes leaves (a REJECT, a REQUIRE, a FORWARD). Without proactive rejection
    /// (`idem-nopr`) a replica never rejects, so there is nothing to keep consistent and
    /// nothing is written.
    fn note_verdict(&mut self, core: &MultiPaxos, ctx: &mut Ctx<'_>, id: ReqId, accepted: bool) {
        if self.test.config().mode == Mode::Off {
            return;
        }
        if let Some(r) = self.verdicts.note(id, accepted) {
            core.persist_layer(ctx, encode(&IdemRecord::Verdict(r)));
        }
    }

    /// Accept a request: it becomes active here, and the leader learns it with a REQUIRE.
    pub(super) fn accept(&mut self, core: &MultiPaxos, ctx: &mut Ctx<'_>, cmd: Command, client: Option<ClientRef>) {
        let id = (cmd.client, cmd.seq);
        // Durable before the REQUIRE (and any FORWARD) leaves.
        self.note_verdict(core, ctx, id, true);
        let client = client.or_else(|| self.rejected.take_client(&id));
        self.stats.accepted += 1;
        // The simulator checks that only requests a majority accepted are ordered (§4.3).
        ctx.ghost(Ghost::Accepted { client: id.0, seq: id.1 });
        self.held.insert(id, Held { cmd, client, since: ctx.now, required: None, forwarded: None });
        self.send_require(core, ctx, id);
    }

    /// ⟨REQUIRE, id⟩ to the leader this replica follows (counted directly when it leads; held
    /// until a leader is known otherwise: the tick retries).
    pub(super) fn send_require(&mut self, core: &MultiPaxos, ctx: &mut Ctx<'_>, id: ReqId) {
        let Some(leader) = core.leader() else { return };
        if let Some(h) = self.held.get_mut(&id) {
            h.required = Some((leader, ctx.now));
        }
        if leader == core.id() {
            self.on_require(core, ctx, leader, id);
        } else {
            send(ctx, leader, &IdemMsg::Require { id });
        }
    }

    /// REQUIREs needed before the leader proposes: f + 1, a majority of the members.
    fn require_quorum(&self, core: &MultiPaxos) -> usize {
        if self.dev.require_f {
            core.quorum().saturating_sub(1).max(1)
        } else {
            core.quorum()
        }
    }

    /// §4.3 at the leader: count REQUIREs from members; propose after f + 1.
    pub(super) fn on_require(&mut self, core: &MultiPaxos, ctx: &mut Ctx<'_>, from: NodeId, id: ReqId) {
        if core.role() != Role::Leader || self.executed.contains(&id) || !core.members().contains(&from) {
            return;
        }
        let now = ctx.now;
        self.requires.entry(id).or_insert_with(|| Requires { from: BTreeSet::new(), first: now, fetched: None });
        if let Some(r) = self.requires.get_mut(&id) {
            r.from.insert(from);
        }
        self.maybe_propose(core, ctx, id);
    }

    /// Hand the request to the core for proposal if f + 1 replicas required it and it was not
    /// proposed recently; fetch its body from a requirer if this replica has none.
    pub(super) fn maybe_propose(&mut self, core: &MultiPaxos, ctx: &mut Ctx<'_>, id: ReqId) {
        let quorum = self.require_quorum(core);
        let Some(r) = self.requires.get(&id) else { return };
        if r.from.len() < quorum {
            return;
        }
        // A proposal lost with a failed phase 2 is repeated after hold-off (a duplicate
        // that does commit is answered from the session table, never re-run).
        let resend = self.cfg.forward_delay * 20;
        if self.proposed.get(&id).is_some_and(|t| ctx.now.since(*t) < resend) {
            return;
        }
        match self.body(&id).cloned() {
            Some(cmd) => {
                self.proposed.insert(id, ctx.now);
                self.ready.push(cmd);
            }
            None => {
                let due = r.fetched.is_none_or(|t| ctx.now.since(t) >= self.cfg.forward_delay);
                let source = r.from.iter().copied().find(|n| *n != core.id());
                if let (true, Some(source)) = (due, source) {
                    self.stats.fetched += 1;
                    send(ctx, source, &IdemMsg::Fetch { id });
                    if let Some(r) = self.requires.get_mut(&id) {
                        r.fetched = Some(ctx.now);
                    }
                }
            }
        }
    }

    /// ⟨FETCH, id⟩: send the body if this replica has it.
    pub(super) fn on_fetch(&mut self, ctx: &mut Ctx<'_>, from: NodeId, id: ReqId) {
        if let Some(cmd) = self.body(&id).cloned() {
            send(ctx, from, &IdemMsg::Body { cmd });
        }
    }

    /// The answer to our FETCH.
    pub(super) fn on_body(&mut self, core: &MultiPaxos, ctx: &mut Ctx<'_>, cmd: Command) {
        let id = (cmd.client, cmd.seq);
        if core.role() != Role::Leader || !self.requires.contains_key(&id) || self.executed.contains(&id) {
            return;
        }
        self.bodies.insert(id, cmd);
        self.maybe_propose(core, ctx, id);
    }
}
