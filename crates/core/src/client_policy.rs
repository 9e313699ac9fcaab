//! Client policies: the client side of a protocol, as an IO-free state machine.
//!
//! Where a request goes and how the replies to it count differ per protocol: MultiPaxos and
//! Raft clients look for the leader and follow `NotLeader` redirects; EPaxos and Mencius
//! clients talk to their home replica; IDEM clients send every request to all replicas and
//! give up after `n − f` rejects (§5.3); Nezha's proxies stamp a deadline, multicast, and
//! commit on a super quorum of matching speculative replies (§5). Each protocol supplies a
//! [`ClientPolicy`] for that (the registry's `client` constructor), and every host — the
//! client library, the simulator's clients, the Redis front end, `synod bench` — runs the
//! same policy code, like the replicas run the same protocol code.
//!
//! A policy handles one request at a time per session (a session has one outstanding
//! request). The host calls [`ClientPolicy::begin`] with the command, then feeds it the
//! replies to that command ([`ClientPolicy::on_reply`]; replies to other commands are dropped
//! by the host), the policy's own timers and the replicas the host failed to reach, until the
//! policy pushes [`ClientAction::Finish`]. The host enforces the overall retry budget itself:
//! when it runs out it abandons the request as [`Outcome::Unknown`] without asking the policy.
//!
//! The policy sees the client's own clock (`ClientCtx::now`, possibly skewed in the
//! simulator) and a seeded RNG, never a real clock or thread.

use crate::kv::{Command, OpResult};
use crate::protocol::{NodeId, Reply, ReplyBody};
use crate::time::Time;
use crate::Rng;
use bytes::Bytes;
use rand::Rng as _;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What travels with a request besides the command: set by the client policy per send.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestMeta {
    /// The sender's clock when it sent the request (a Nezha proxy's send time), or zero.
    pub sent_at: Time,
    /// Protocol-specific bytes (a Nezha deadline, an IDEM attempt number); empty by default.
    pub ext: Bytes,
}

/// The final outcome of one request, as the host reports it to its caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Committed and executed; this is the result (an `OpResult::Error` is the state
    /// machine's deterministic answer).
    Done(OpResult),
    /// Refused by admission control. `definitive`: the request will never execute (IDEM: all
    /// `n` replicas rejected it); otherwise it may still execute later (IDEM's ambivalent
    /// outcome, `n − f` rejects), so its effect is unknown.
    Rejected { definitive: bool, reason: String },
    /// Refused as invalid (too large, malformed): never executed, retrying will not help.
    Invalid(String),
    /// The policy gave up without knowing whether the request executed.
    Unknown(String),
}

/// What a policy asks its host to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientAction {
    /// Send the current request to replica `to` with `meta`. A host that cannot reach `to`
    /// reports it with [`ClientPolicy::on_unreachable`].
    Send {
        to: NodeId,
        meta: RequestMeta,
    },
    /// Arm (or re-arm) one of the policy's timers; it comes back as [`ClientPolicy::on_timer`].
    SetTimer {
        id: u64,
        after: Duration,
    },
    CancelTimer {
        id: u64,
    },
    /// The request is finished; no more events for it reach the policy.
    Finish(Outcome),
}

/// What a host hands the policy with each event.
pub struct ClientCtx<'a> {
    /// The client's clock.
    pub now: Time,
    pub rng: &'a mut Rng,
    /// The replicas the client knows, in the host's endpoint order (the home replica is
    /// `members[home % members.len()]`).
    pub members: &'a [NodeId],
    /// The client's home replica: its index into `members` (nearest, or assigned by the host).
    pub home: usize,
    /// The host's approximate bound on the error of `now` (as
    /// [`Ctx::clock_error`](crate::Ctx::clock_error)); zero unless the host knows one.
    pub clock_error: Duration,
    actions: &'a mut Vec<ClientAction>,
}

impl<'a> ClientCtx<'a> {
    pub fn new(
        now: Time,
        rng: &'a mut Rng,
        members: &'a [NodeId],
        home: usize,
        actions: &'a mut Vec<ClientAction>,
    ) -> Self {
        ClientCtx { now, rng, members, home, clock_error: Duration::ZERO, actions }
    }
    pub fn send(&mut self, to: NodeId, meta: RequestMeta) {
        self.actions.push(ClientAction::Send { to, meta });
    }
    /// Send the request to every known replica.
    pub fn send_all(&mut self, meta: RequestMeta) {
        for &to in self.members {
            self.actions.push(ClientAction::Send { to, meta: meta.clone() });
        }
    }
    pub fn set_timer(&mut self, id: u64, after: Duration) {
        self.actions.push(ClientAction::SetTimer { id, after });
    }
    pub fn cancel_timer(&mut self, id: u64) {
        self.actions.push(ClientAction::CancelTimer { id });
    }
    pub fn finish(&mut self, outcome: Outcome) {
        self.actions.push(ClientAction::Finish(outcome));
    }
    /// The home replica's id (None when no replica is known).
    pub fn home_node(&self) -> Option<NodeId> {
        (!self.members.is_empty()).then(|| self.members[self.home % self.members.len()])
    }
    /// The member after `node` in endpoint order (wrapping), or the home replica if `node`
    /// is not a known member.
    pub fn next_after(&self, node: NodeId) -> Option<NodeId> {
        let n = self.members.len();
        match self.members.iter().position(|&m| m == node) {
            Some(i) => Some(self.members[(i + 1) % n]),
            None => self.home_node(),
        }
    }
    /// A duration drawn uniformly from `[min, max]`.
    pub fn random_between(&mut self, min: Duration, max: Duration) -> Duration {
        if max <= min {
            return min;
        }
        Duration::from_nanos(self.rng.gen_range(min.as_nanos() as u64..=max.as_nanos() as u64))
    }
}

/// The client side of a protocol for one session. See the module documentation.
pub trait ClientPolicy: Send {
    /// A new request: the host has stamped `cmd` and calls this once before any other event
    /// for it. The policy sends it somewhere and arms its timers.
    fn begin(&mut self, cx: &mut ClientCtx<'_>, cmd: &Command);
    /// A reply to the current request (same client and seq) from replica `reply.from`.
    fn on_reply(&mut self, cx: &mut ClientCtx<'_>, reply: Reply);
    /// One of the policy's timers fired.
    fn on_timer(&mut self, cx: &mut ClientCtx<'_>, id: u64);
    /// The host could not deliver a send to `node` (connection refused or closed).
    fn on_unreachable(&mut self, cx: &mut ClientCtx<'_>, node: NodeId);
    /// Counters of how requests finished, for hosts that report them (Nezha's proxy: fast
    /// and slow commits). Empty by default.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// Timing knobs shared by the policies here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryTimes {
    /// How long one attempt waits for an answer before the request is sent elsewhere.
    pub attempt_timeout: Duration,
    /// Backoff before an attempt after a refusal (election in progress, overload): drawn
    /// from this range.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
}

impl Default for RetryTimes {
    fn default() -> Self {
        RetryTimes {
            attempt_timeout: Duration::from_secs(2),
            backoff_min: Duration::from_millis(5),
            backoff_max: Duration::from_millis(50),
        }
    }
}

/// What a protocol's client-policy constructor (the registry's `client`) gets: the host's
/// retry timings and the protocol's options (the same `ProtocolParams::options` the replicas
/// were built with, so a policy can read its own knobs, e.g. a Nezha deadline percentile).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientConfig {
    pub retry: RetryTimes,
    pub options: std::collections::BTreeMap<String, String>,
}

impl ClientConfig {
    pub fn new(retry: RetryTimes) -> Self {
        ClientConfig { retry, options: Default::default() }
    }
}

/// A client-policy constructor: what a registry entry's `client` is.
pub type PolicyFactory = fn(&ClientConfig) -> Box<dyn ClientPolicy>;

/// The registry's constructor for leader-based protocols.
pub fn leader_policy(cfg: &ClientConfig) -> Box<dyn ClientPolicy> {
    Box::new(LeaderPolicy::new(cfg.retry.clone()))
}

/// The registry's constructor for protocols where any replica serves a client.
pub fn home_policy(cfg: &ClientConfig) -> Box<dyn ClientPolicy> {
    Box::new(HomePolicy::new(cfg.retry.clone()))
}

/// The timer ids the policies in this module use.
const ATTEMPT_TIMER: u64 = 1;
const RESEND_TIMER: u64 = 2;

/// Translate a final reply body into an outcome; None for the bodies that are not final.
pub fn final_outcome(body: &ReplyBody) -> Option<Outcome> {
    match body {
        ReplyBody::Done(r) => Some(Outcome::Done(r.clone())),
        ReplyBody::Invalid { reason } => Some(Outcome::Invalid(reason.clone())),
        _ => None,
    }
}

/// If `reply` is final, end the request (cancel the retry timers, report the outcome, mark
/// the policy inactive) and return true.
fn finished(active: &mut bool, cx: &mut ClientCtx<'_>, reply: &Reply) -> bool {
    let Some(outcome) = final_outcome(&reply.body) else { return false };
    *active = false;
    cx.cancel_timer(ATTEMPT_TIMER);
    cx.cancel_timer(RESEND_TIMER);
    cx.finish(outcome);
    true
}

/// Leader-based protocols (MultiPaxos, Raft, HoliPaxos): send to the replica believed to be
/// the leader (at first the home replica), follow `NotLeader { leader }` redirects, move to
/// the next replica on a timeout, an unreachable replica or `NotLeader { leader: None }`
/// (after a backoff), retry the same replica after a backoff on `Rejected`. The leader found
/// is remembered across requests.
#[derive(Clone, Debug)]
pub struct LeaderPolicy {
    times: RetryTimes,
    /// Give up on a `Rejected` answer instead of retrying (Paxos-LBR's clients, IDEM §3.3:
    /// the leader's reject means "overloaded, back off"). The outcome is ambivalent: only the
    /// replica that answered decided, and an earlier send of the same request may have
    /// reached another leader.
    give_up_on_reject: bool,
    /// Where requests go: the last known leader.
    target: Option<NodeId>,
    /// Redirects followed for the current request without an answer (a stale hint can
    /// bounce a client between replicas during an election; after `members` of them the
    /// policy backs off).
    redirects: usize,
    active: bool,
}

impl LeaderPolicy {
    pub fn new(times: RetryTimes) -> Self {
        LeaderPolicy { times, target: None, redirects: 0, active: false, give_up_on_reject: false }
    }

    /// A leader policy that reports a `Rejected` answer to the caller (ambivalent) instead of
    /// retrying it.
    pub fn giving_up_on_reject(times: RetryTimes) -> Self {
        LeaderPolicy { give_up_on_reject: true, ..LeaderPolicy::new(times) }
    }

    /// The replica requests currently go to.
    pub fn target(&self) -> Option<NodeId> {
        self.target
    }

    fn send_now(&mut self, cx: &mut ClientCtx<'_>, to: NodeId) {
        self.target = Some(to);
        cx.send(to, RequestMeta::default());
        cx.set_timer(ATTEMPT_TIMER, self.times.attempt_timeout);
    }

    fn send_later(&mut self, cx: &mut ClientCtx<'_>, to: NodeId) {
        self.target = Some(to);
        cx.cancel_timer(ATTEMPT_TIMER);
        let d = cx.random_between(self.times.backoff_min, self.times.backoff_max);
        cx.set_timer(RESEND_TIMER, d);
    }
}

impl ClientPolicy for LeaderPolicy {
    fn begin(&mut self, cx: &mut ClientCtx<'_>, _cmd: &Command) {
        self.active = true;
        self.redirects = 0;
        let to = match self.target.filter(|t| cx.members.contains(t)) {
            Some(t) => Some(t),
            None => cx.home_node(),
        };
        match to {
            Some(to) => self.send_now(cx, to),
            None => cx.finish(Outcome::Unknown("no replicas known".into())),
        }
    }

    fn on_reply(&mut self, cx: &mut ClientCtx<'_>, reply: Reply) {
        if !self.active || finished(&mut self.active, cx, &reply) {
            return;
        }
        match reply.body {
            ReplyBody::NotLeader { leader: Some(l) } if l != reply.from && cx.members.contains(&l) => {
                self.redirects += 1;
                if self.redirects > cx.members.len() {
                    self.send_later(cx, l);
                } else {
                    self.send_now(cx, l);
                }
            }
            ReplyBody::NotLeader { .. } => {
                if let Some(next) = cx.next_after(reply.from) {
                    self.send_later(cx, next);
                }
            }
            ReplyBody::Rejected { reason } if self.give_up_on_reject => {
                self.active = false;
                cx.cancel_timer(ATTEMPT_TIMER);
                cx.cancel_timer(RESEND_TIMER);
                cx.finish(Outcome::Rejected { definitive: false, reason });
            }
            ReplyBody::Rejected { .. } => self.send_later(cx, reply.from),
            // Speculative replies are not final for a leader-based protocol.
            _ => {}
        }
    }

    fn on_timer(&mut self, cx: &mut ClientCtx<'_>, id: u64) {
        if !self.active {
            return;
        }
        match id {
            ATTEMPT_TIMER => {
                let next = self.target.and_then(|t| cx.next_after(t)).or_else(|| cx.home_node());
                if let Some(next) = next {
                    self.send_now(cx, next);
                }
            }
            RESEND_TIMER => {
                if let Some(t) = self.target.or_else(|| cx.home_node()) {
                    self.send_now(cx, t);
                }
            }
            _ => {}
        }
    }

    fn on_unreachable(&mut self, cx: &mut ClientCtx<'_>, node: NodeId) {
        if self.active && self.target == Some(node) {
            if let Some(next) = cx.next_after(node) {
                self.send_later(cx, next);
            }
        }
    }
}

/// Leaderless protocols where any replica serves a request (EPaxos, Mencius): send to the
/// home replica; on a timeout or an unreachable replica move on to the next one (and stay
/// there for later requests until it fails too); on `Rejected` or `NotLeader` retry the
/// next replica after a backoff.
#[derive(Clone, Debug)]
pub struct HomePolicy {
    times: RetryTimes,
    target: Option<NodeId>,
    active: bool,
}

impl HomePolicy {
    pub fn new(times: RetryTimes) -> Self {
        HomePolicy { times, target: None, active: false }
    }

    fn send_now(&mut self, cx: &mut ClientCtx<'_>, to: NodeId) {
        self.target = Some(to);
        cx.send(to, RequestMeta::default());
        cx.set_timer(ATTEMPT_TIMER, self.times.attempt_timeout);
    }
}

impl ClientPolicy for HomePolicy {
    fn begin(&mut self, cx: &mut ClientCtx<'_>, _cmd: &Command) {
        self.active = true;
        match self.target.filter(|t| cx.members.contains(t)).or_else(|| cx.home_node()) {
            Some(to) => self.send_now(cx, to),
            None => cx.finish(Outcome::Unknown("no replicas known".into())),
        }
    }

    fn on_reply(&mut self, cx: &mut ClientCtx<'_>, reply: Reply) {
        if !self.active || finished(&mut self.active, cx, &reply) {
            return;
        }
        if matches!(reply.body, ReplyBody::NotLeader { .. } | ReplyBody::Rejected { .. }) {
            self.target = cx.next_after(reply.from);
            cx.cancel_timer(ATTEMPT_TIMER);
            let d = cx.random_between(self.times.backoff_min, self.times.backoff_max);
            cx.set_timer(RESEND_TIMER, d);
        }
    }

    fn on_timer(&mut self, cx: &mut ClientCtx<'_>, id: u64) {
        if !self.active {
            return;
        }
        let to = match id {
            ATTEMPT_TIMER => self.target.and_then(|t| cx.next_after(t)),
            RESEND_TIMER => self.target,
            _ => return,
        };
        if let Some(to) = to.or_else(|| cx.home_node()) {
            self.send_now(cx, to);
        }
    }

    fn on_unreachable(&mut self, cx: &mut ClientCtx<'_>, node: NodeId) {
        if self.active && self.target == Some(node) {
            self.target = cx.next_after(node);
            cx.cancel_timer(ATTEMPT_TIMER);
            let d = cx.random_between(self.times.backoff_min, self.times.backoff_max);
            cx.set_timer(RESEND_TIMER, d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::Op;

    fn cmd() -> Command {
        Command { client: 7, seq: 1, acked_below: 1, now_ms: 0, op: Op::Get { key: Bytes::from_static(b"k") } }
    }

    fn reply(from: NodeId, body: ReplyBody) -> Reply {
        Reply { client: 7, seq: 1, from, body }
    }

    /// Run one event against a policy and return the actions it pushed.
    fn step(members: &[NodeId], home: usize, rng: &mut Rng, f: impl FnOnce(&mut ClientCtx<'_>)) -> Vec<ClientAction> {
        let mut actions = Vec::new();
        let mut cx = ClientCtx::new(Time::ZERO, rng, members, home, &mut actions);
        f(&mut cx);
        actions
    }

    fn sends(actions: &[ClientAction]) -> Vec<NodeId> {
        actions.iter().filter_map(|a| if let ClientAction::Send { to, .. } = a { Some(*to) } else { None }).collect()
    }

    #[test]
    fn leader_policy_follows_redirects_and_remembers_the_leader() {
        let members = [1, 2, 3];
        let mut rng = crate::rng_from_seed(1);
        let mut p = LeaderPolicy::new(RetryTimes::default());
        let a = step(&members, 1, &mut rng, |cx| p.begin(cx, &cmd()));
        assert_eq!(sends(&a), vec![2], "the first request goes home");
        let a = step(&members, 1, &mut rng, |cx| p.on_reply(cx, reply(2, ReplyBody::NotLeader { leader: Some(3) })));
        assert_eq!(sends(&a), vec![3], "a redirect to a known leader is followed at once");
        let a = step(&members, 1, &mut rng, |cx| p.on_reply(cx, reply(3, ReplyBody::Done(OpResult::Done))));
        assert!(a.contains(&ClientAction::Finish(Outcome::Done(OpResult::Done))));
        let a = step(&members, 1, &mut rng, |cx| p.begin(cx, &cmd()));
        assert_eq!(sends(&a), vec![3], "the next request goes to the leader found");
    }

    #[test]
    fn a_leader_policy_retries_a_reject_unless_it_gives_up_on_rejects() {
        let members = [1, 2, 3];
        let mut rng = crate::rng_from_seed(3);
        let rejected = || reply(2, ReplyBody::Rejected { reason: "overloaded".into() });
        let mut p = LeaderPolicy::new(RetryTimes::default());
        step(&members, 1, &mut rng, |cx| p.begin(cx, &cmd()));
        let a = step(&members, 1, &mut rng, |cx| p.on_reply(cx, rejected()));
        assert!(a.iter().any(|x| matches!(x, ClientAction::SetTimer { id: RESEND_TIMER, .. })), "retried later");
        assert!(!a.iter().any(|x| matches!(x, ClientAction::Finish(_))));
        let mut p = LeaderPolicy::giving_up_on_reject(RetryTimes::default());
        step(&members, 1, &mut rng, |cx| p.begin(cx, &cmd()));
        let a = step(&members, 1, &mut rng, |cx| p.on_reply(cx, rejected()));
        let ambivalent = Outcome::Rejected { definitive: false, reason: "overloaded".into() };
        assert!(a.contains(&ClientAction::Finish(ambivalent)), "{a:?}");
        assert!(a.contains(&ClientAction::CancelTimer { id: ATTEMPT_TIMER }));
        let a = step(&members, 1, &mut rng, |cx| p.on_reply(cx, reply(2, ReplyBody::Done(OpResult::Done))));
        assert!(a.is_empty(), "nothing after the request finished");
    }

    #[test]
    fn leader_policy_moves_on_after_a_timeout_and_backs_off_without_a_leader() {
        let members = [1, 2, 3];
        let mut rng = crate::rng_from_seed(2);
        let mut p = LeaderPolicy::new(RetryTimes::default());
        step(&members, 0, &mut rng, |cx| p.begin(cx, &cmd()));
        let a = step(&members, 0, &mut rng, |cx| p.on_timer(cx, ATTEMPT_TIMER));
        assert_eq!(sends(&a), vec![2]);
        let a = step(&members, 0, &mut rng, |cx| p.on_reply(cx, reply(2, ReplyBody::NotLeader { leader: None })));
        assert!(sends(&a).is_empty(), "no leader known: wait before the next attempt");
        assert!(a.iter().any(|x| matches!(x, ClientAction::SetTimer { id: RESEND_TIMER, .. })));
        let a = step(&members, 0, &mut rng, |cx| p.on_timer(cx, RESEND_TIMER));
        assert_eq!(sends(&a), vec![3]);
        let a = step(&members, 0, &mut rng, |cx| p.on_reply(cx, reply(3, ReplyBody::Invalid { reason: "big".into() })));
        assert!(a.contains(&ClientAction::Finish(Outcome::Invalid("big".into()))));
        let a = step(&members, 0, &mut rng, |cx| p.on_reply(cx, reply(3, ReplyBody::Done(OpResult::Done))));
        assert!(a.is_empty(), "nothing after the request finished");
    }

    #[test]
    fn home_policy_stays_home_and_fails_over() {
        let members = [1, 2, 3];
        let mut rng = crate::rng_from_seed(3);
        let mut p = HomePolicy::new(RetryTimes::default());
        let a = step(&members, 2, &mut rng, |cx| p.begin(cx, &cmd()));
        assert_eq!(sends(&a), vec![3]);
        let a = step(&members, 2, &mut rng, |cx| p.on_unreachable(cx, 3));
        assert!(sends(&a).is_empty());
        let a = step(&members, 2, &mut rng, |cx| p.on_timer(cx, RESEND_TIMER));
        assert_eq!(sends(&a), vec![1], "after the home replica failed, the next one");
        let a = step(&members, 2, &mut rng, |cx| p.on_reply(cx, reply(1, ReplyBody::Done(OpResult::Done))));
        assert!(a.contains(&ClientAction::Finish(Outcome::Done(OpResult::Done))));
        let a = step(&members, 2, &mut rng, |cx| p.begin(cx, &cmd()));
        assert_eq!(sends(&a), vec![1], "and it stays there");
    }
}
