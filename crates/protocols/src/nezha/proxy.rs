//! The Nezha proxy (§4): the client side of Nezha as a [`ClientPolicy`].
//!
//! It is the DOM sender: it stamps each request with its send time `s` and a latency bound
//! `l` (the deadline is `s + l`, §5.2) from its one-way-delay estimates to the replicas (§3:
//! a percentile — the paper's 50th — over a sliding window per replica, clamped), multicasts
//! the request to every replica and does the quorum checks the paper offloads from the
//! leader (§5.3, §5.4):
//! - **fast path**: fast-replies with matching (view, hash) from a super quorum
//!   f + ⌈f/2⌉ + 1 that includes the leader (whose reply carries the result); a follower's
//!   slow-reply of the same view stands in for its fast-reply;
//! - **slow path**: the leader's fast-reply and slow-replies of the same view from f
//!   followers (a fast-reply does not stand in for a slow-reply);
//! - a `Done` from any replica (a replica that executed the request at the commit-point)
//!   is final as well.
//!
//! On a timeout it resubmits with a new send time (§5.5). Each replica measures the
//! request's one-way delay (its receive time minus `s`) and returns it in its fast-reply
//! (§3: "the estimated OWD will be replied to the sender"); the proxy keeps the window and
//! takes the percentile. A final reply without one (`Done`) counts half the round trip.
//!
//! Wire form: `RequestMeta { sent_at: s, ext }` with `ext` the postcard encoding of
//! [`ProxyStamp`]; a fast-reply is `Speculative { view, digest: hash, owd, result }` (result from
//! the leader only), a slow-reply `SlowReply { view }`.

use super::dom::{clock_error_term, OwdEstimator};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;
use synod_core::client_policy::{final_outcome, ClientConfig, ClientCtx, ClientPolicy, RequestMeta};
use synod_core::protocol::encode;
use synod_core::{Command, NodeId, OpResult, Outcome, Reply, ReplyBody, Time};

const ATTEMPT_TIMER: u64 = 1;

/// What a proxy adds to a request (`RequestMeta::ext`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxyStamp {
    /// The latency bound `l` in nanoseconds: the deadline is `sent_at + l`.
    pub bound: u64,
}

/// One replica's latest reply to the current request.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Vote {
    Fast { view: u64, hash: u64, result: Option<OpResult> },
    Slow { view: u64 },
}

/// The super quorum f + ⌈f/2⌉ + 1 for n = 2f + 1 (§5.3).
pub fn super_quorum(n: usize) -> usize {
    let f = n.saturating_sub(1) / 2;
    f + f.div_ceil(2) + 1
}

/// The quorum check of §5.3/§5.4 over the replies so far: the leader's result once the fast
/// or the slow quorum is complete. `members` sorted (the leader of view v is
/// `members[v % n]`, as at the replicas); `super_quorum` is [`super_quorum`] (a mutant
/// passes one less).
fn committed(votes: &BTreeMap<NodeId, Vote>, members: &[NodeId], super_quorum: usize) -> Option<(OpResult, bool)> {
    let n = members.len();
    let f = n.saturating_sub(1) / 2;
    // The leader's fast-reply: the one that carries the result, from the leader of its
    // view. Take the highest view.
    let (leader, view, hash, result) = votes
        .iter()
        .filter_map(|(id, v)| match v {
            Vote::Fast { view, hash, result: Some(r) } if members[(*view % n as u64) as usize] == *id => {
                Some((*id, *view, *hash, r.clone()))
            }
            _ => None,
        })
        .max_by_key(|(_, view, _, _)| *view)?;
    let slow = votes.iter().filter(|(id, v)| **id != leader && **v == Vote::Slow { view }).count();
    if slow >= f {
        return Some((result, false));
    }
    let fast = votes
        .iter()
        .filter(|(id, v)| {
            **id == leader
                || match v {
                    Vote::Fast { view: w, hash: h, result: None } => *w == view && *h == hash,
                    Vote::Slow { view: w } => *w == view,
                    Vote::Fast { .. } => false,
                }
        })
        .count();
    (fast >= super_quorum).then_some((result, true))
}

/// The registry's client policy for nezha: a proxy per session, with the protocol's OWD
/// options (`owd_window`, `owd_percentile`, `owd_max_ms`, `owd_beta_pct`) and the host's
/// attempt timeout.
pub fn policy(cfg: &ClientConfig) -> Box<dyn ClientPolicy> {
    Box::new(proxy_from(cfg))
}

/// The mutant's client policy: a super quorum one replica too small.
pub fn policy_small_super_quorum(cfg: &ClientConfig) -> Box<dyn ClientPolicy> {
    Box::new(proxy_from(cfg).with_small_super_quorum())
}

fn proxy_from(cfg: &ClientConfig) -> NezhaProxy {
    let num = |k: &str, d: u64| cfg.options.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(d);
    NezhaProxy::new(
        num("owd_window", 1000) as usize,
        num("owd_percentile", 50) as u32,
        Duration::from_millis(num("owd_max_ms", 10)),
        cfg.retry.attempt_timeout,
    )
    .with_beta_pct(num("owd_beta_pct", 100))
}

/// A Nezha proxy for one session.
#[derive(Clone, Debug)]
pub struct NezhaProxy {
    owd: OwdEstimator,
    /// β of §3, in percent.
    beta_pct: u64,
    attempt_timeout: Duration,
    sent_at: Time,
    /// The deadline of the session's last request: deadlines increase within a session, so
    /// a later request never sorts before an earlier one (the log rebuild of §6 sorts by
    /// deadline, and a session's requests do not commute: the session table executes
    /// them in order).
    last_deadline: u64,
    votes: BTreeMap<NodeId, Vote>,
    active: bool,
    /// The new leader named by the `NotLeader` that made this request's last retry.
    retried_for: Option<NodeId>,
    /// The fast-path quorum (a mutant makes it one too small).
    small_super_quorum: bool,
    /// Requests committed on the fast path, on the slow path, and by a `Done`.
    pub fast_commits: u64,
    pub slow_commits: u64,
    pub done_commits: u64,
    /// Requests resubmitted because a replica reported a new view without them.
    pub view_retries: u64,
}

impl NezhaProxy {
    /// `percentile` and `clamp` as in §3 (the paper: 50th percentile); `window` samples per
    /// replica.
    pub fn new(window: usize, percentile: u32, clamp: Duration, attempt_timeout: Duration) -> NezhaProxy {
        NezhaProxy {
            owd: OwdEstimator::new(window, percentile, clamp.as_nanos() as u64),
            beta_pct: 100,
            attempt_timeout,
            sent_at: Time::ZERO,
            last_deadline: 0,
            votes: BTreeMap::new(),
            active: false,
            retried_for: None,
            small_super_quorum: false,
            fast_commits: 0,
            slow_commits: 0,
            done_commits: 0,
            view_retries: 0,
        }
    }

    /// β of §3 in percent (100 by default).
    pub fn with_beta_pct(mut self, beta_pct: u64) -> NezhaProxy {
        self.beta_pct = beta_pct;
        self
    }

    /// The mutation test's proxy: a super quorum one replica too small.
    pub fn with_small_super_quorum(mut self) -> NezhaProxy {
        self.small_super_quorum = true;
        self
    }

    /// The latency bound for a multicast to `members` now, from a proxy whose clock has the
    /// error bound `clock_error`: P + β(σ_S + σ_R), clamped (§3).
    pub fn bound(&self, members: &[NodeId], clock_error: Duration) -> u64 {
        self.owd.estimate_all(members.iter().copied(), clock_error_term(clock_error, self.beta_pct))
    }

    fn submit(&mut self, cx: &mut ClientCtx<'_>) {
        self.sent_at = cx.now;
        self.votes.clear();
        let mut bound = self.bound(cx.members, cx.clock_error);
        let now = cx.now.as_nanos();
        if now.saturating_add(bound) <= self.last_deadline {
            bound = self.last_deadline + 1 - now;
        }
        self.last_deadline = now.saturating_add(bound);
        let stamp = ProxyStamp { bound };
        cx.send_all(RequestMeta { sent_at: cx.now, ext: encode(&stamp) });
        cx.set_timer(ATTEMPT_TIMER, self.attempt_timeout);
    }

    fn finish(&mut self, cx: &mut ClientCtx<'_>, outcome: Outcome) {
        self.active = false;
        cx.cancel_timer(ATTEMPT_TIMER);
        cx.finish(outcome);
    }
}

impl ClientPolicy for NezhaProxy {
    fn begin(&mut self, cx: &mut ClientCtx<'_>, _cmd: &Command) {
        if cx.members.is_empty() {
            cx.finish(Outcome::Unknown("no replicas known".into()));
            return;
        }
        self.active = true;
        self.retried_for = None;
        self.submit(cx);
    }

    fn on_reply(&mut self, cx: &mut ClientCtx<'_>, reply: Reply) {
        if !self.active || !cx.members.contains(&reply.from) {
            return;
        }
        // The one-way delay: as the replica measured it (its receive time minus the send
        // time, returned in its fast-reply, §3); for a final reply without one (a `Done`,
        // the leader's answer without quorum-check offloading) half the round trip. A
        // slow-reply comes a round later and is no sample. (Half the round trip of a
        // fast-reply would count the early-buffer hold: the deadline would feed back into
        // the next estimate.)
        match &reply.body {
            ReplyBody::Speculative { owd, .. } => self.owd.sample_owd(reply.from, *owd),
            ReplyBody::SlowReply { .. } => {}
            _ => {
                let rtt = cx.now.since(self.sent_at);
                self.owd.sample(reply.from, self.sent_at, self.sent_at + rtt / 2);
            }
        }
        if let Some(outcome) = final_outcome(&reply.body) {
            if matches!(outcome, Outcome::Done(_)) {
                self.done_commits += 1;
            }
            self.finish(cx, outcome);
            return;
        }
        let vote = match reply.body {
            ReplyBody::SlowReply { view } => Vote::Slow { view },
            ReplyBody::Speculative { view, digest, result, .. } => Vote::Fast { view, hash: digest, result },
            ReplyBody::NotLeader { leader: Some(leader) } if self.retried_for != Some(leader) => {
                // A replica entered a new view whose log lacks this request: retry to the
                // new leader's quorum now (§5.5), once per new leader.
                self.retried_for = Some(leader);
                self.view_retries += 1;
                self.submit(cx);
                return;
            }
            _ => return,
        };
        // A slow-reply is never replaced by a fast-reply of the same view.
        let keep = matches!((self.votes.get(&reply.from), &vote), (Some(Vote::Slow { view: a }), Vote::Fast { view: b, .. }) if a >= b);
        if !keep {
            self.votes.insert(reply.from, vote);
        }
        let mut members = cx.members.to_vec();
        members.sort_unstable();
        let quorum = super_quorum(members.len()) - usize::from(self.small_super_quorum);
        if let Some((result, fast)) = committed(&self.votes, &members, quorum) {
            if fast {
                self.fast_commits += 1;
            } else {
                self.slow_commits += 1;
            }
            self.finish(cx, Outcome::Done(result));
        }
    }

    fn on_timer(&mut self, cx: &mut ClientCtx<'_>, id: u64) {
        if self.active && id == ATTEMPT_TIMER {
            // §5.5: resubmit with a new send time.
            self.submit(cx);
        }
    }

    fn on_unreachable(&mut self, _cx: &mut ClientCtx<'_>, _node: NodeId) {
        // The other replicas may still form a quorum; the attempt timer covers the rest.
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("fast_commits", self.fast_commits),
            ("slow_commits", self.slow_commits),
            ("done_commits", self.done_commits),
            ("view_retries", self.view_retries),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use synod_core::client_policy::ClientAction;
    use synod_core::rng_from_seed;

    fn cmd() -> Command {
        Command { client: 9, seq: 4, acked_below: 4, now_ms: 0, op: synod_core::Op::Noop }
    }
    fn fast(from: NodeId, view: u64, hash: u64, result: Option<OpResult>) -> Reply {
        Reply { client: 9, seq: 4, from, body: ReplyBody::Speculative { view, digest: hash, owd: 0, result } }
    }
    fn slow(from: NodeId, view: u64) -> Reply {
        Reply { client: 9, seq: 4, from, body: ReplyBody::SlowReply { view } }
    }

    struct Host {
        members: Vec<NodeId>,
        rng: synod_core::Rng,
        now: Time,
    }
    impl Host {
        fn new(n: u32) -> Host {
            Host { members: (1..=n).collect(), rng: rng_from_seed(1), now: Time::from_millis(1000) }
        }
        fn run(&mut self, f: impl FnOnce(&mut ClientCtx<'_>)) -> Vec<ClientAction> {
            let mut out = Vec::new();
            let mut cx = ClientCtx::new(self.now, &mut self.rng, &self.members, 0, &mut out);
            f(&mut cx);
            out
        }
    }
    fn finished(a: &[ClientAction]) -> Option<Outcome> {
        a.iter().find_map(|x| if let ClientAction::Finish(o) = x { Some(o.clone()) } else { None })
    }
    fn proxy() -> NezhaProxy {
        NezhaProxy::new(100, 50, Duration::from_millis(10), Duration::from_millis(500))
    }

    #[test]
    fn multicasts_with_a_deadline_to_every_replica() {
        let mut h = Host::new(3);
        let mut p = proxy();
        let a = h.run(|cx| p.begin(cx, &cmd()));
        let sends: Vec<&RequestMeta> =
            a.iter().filter_map(|x| if let ClientAction::Send { meta, .. } = x { Some(meta) } else { None }).collect();
        assert_eq!(sends.len(), 3);
        assert!(sends.iter().all(|m| m.sent_at == h.now));
        let stamp: ProxyStamp = synod_core::protocol::decode(&sends[0].ext).unwrap();
        assert_eq!(stamp.bound, 10_000_000, "no samples yet: the clamp");
    }

    #[test]
    fn fast_path_needs_a_super_quorum_with_the_leader() {
        // n = 5, f = 2: super quorum 2 + 1 + 1 = 4.
        let mut h = Host::new(5);
        let mut p = proxy();
        h.run(|cx| p.begin(cx, &cmd()));
        for from in [2, 3, 4, 5] {
            let a = h.run(|cx| p.on_reply(cx, fast(from, 0, 77, None)));
            assert_eq!(finished(&a), None, "followers alone never commit");
        }
        let a = h.run(|cx| p.on_reply(cx, fast(1, 0, 77, Some(OpResult::Done))));
        assert_eq!(finished(&a), Some(Outcome::Done(OpResult::Done)));
        assert_eq!(p.fast_commits, 1);
    }

    #[test]
    fn fast_path_counts_only_matching_hashes_and_views() {
        let mut h = Host::new(5);
        let mut p = proxy();
        h.run(|cx| p.begin(cx, &cmd()));
        h.run(|cx| p.on_reply(cx, fast(1, 0, 77, Some(OpResult::Done))));
        h.run(|cx| p.on_reply(cx, fast(2, 0, 77, None)));
        let a = h.run(|cx| p.on_reply(cx, fast(3, 0, 78, None)));
        assert_eq!(finished(&a), None, "a different hash does not count");
        let a = h.run(|cx| p.on_reply(cx, fast(4, 1, 77, None)));
        assert_eq!(finished(&a), None, "a different view does not count");
        let a = h.run(|cx| p.on_reply(cx, fast(5, 0, 77, None)));
        assert_eq!(finished(&a), None, "3 matching of 4 needed");
        // A slow-reply of the same view stands in for replica 3's fast-reply.
        let a = h.run(|cx| p.on_reply(cx, slow(3, 0)));
        assert_eq!(finished(&a), Some(Outcome::Done(OpResult::Done)));
        assert_eq!(p.fast_commits, 1);
    }

    #[test]
    fn one_short_of_the_super_quorum_is_not_enough_for_three_replicas() {
        // n = 3, f = 1: super quorum 1 + 1 + 1 = 3; slow quorum leader + 1.
        let mut h = Host::new(3);
        let mut p = proxy();
        h.run(|cx| p.begin(cx, &cmd()));
        h.run(|cx| p.on_reply(cx, fast(1, 0, 5, Some(OpResult::Value(None)))));
        let a = h.run(|cx| p.on_reply(cx, fast(2, 0, 5, None)));
        assert_eq!(finished(&a), None);
        let a = h.run(|cx| p.on_reply(cx, fast(3, 0, 5, None)));
        assert_eq!(finished(&a), Some(Outcome::Done(OpResult::Value(None))));
    }

    #[test]
    fn slow_path_needs_the_leader_and_f_slow_replies() {
        let mut h = Host::new(5);
        let mut p = proxy();
        h.run(|cx| p.begin(cx, &cmd()));
        h.run(|cx| p.on_reply(cx, slow(2, 3)));
        let a = h.run(|cx| p.on_reply(cx, slow(3, 3)));
        assert_eq!(finished(&a), None, "no leader reply yet");
        let a = h.run(|cx| p.on_reply(cx, fast(4, 3, 1, Some(OpResult::Done))));
        assert_eq!(finished(&a), Some(Outcome::Done(OpResult::Done)));
        assert_eq!(p.slow_commits, 1);
    }

    #[test]
    fn fast_replies_do_not_replace_slow_replies_and_stale_views_do_not_count() {
        let mut h = Host::new(3);
        let mut p = proxy();
        h.run(|cx| p.begin(cx, &cmd()));
        h.run(|cx| p.on_reply(cx, slow(2, 1)));
        h.run(|cx| p.on_reply(cx, fast(2, 1, 9, None)));
        let a = h.run(|cx| p.on_reply(cx, fast(1, 2, 9, Some(OpResult::Done))));
        assert_eq!(finished(&a), None, "replica 1 does not lead view 2: its result does not count");
        let a = h.run(|cx| p.on_reply(cx, fast(3, 2, 9, Some(OpResult::Done))));
        assert_eq!(finished(&a), None, "the slow-reply is of an older view than the leader's");
        let a = h.run(|cx| p.on_reply(cx, slow(1, 2)));
        assert_eq!(finished(&a), Some(Outcome::Done(OpResult::Done)));
    }

    #[test]
    fn a_new_view_without_the_request_resubmits_at_once_once_per_leader() {
        let mut h = Host::new(3);
        let mut p = proxy();
        h.run(|cx| p.begin(cx, &cmd()));
        h.now = Time::from_millis(1010);
        let not_leader = |from| Reply { client: 9, seq: 4, from, body: ReplyBody::NotLeader { leader: Some(2) } };
        let sends = |a: &[ClientAction]| {
            a.iter()
                .filter_map(|x| if let ClientAction::Send { meta, .. } = x { Some(meta.sent_at) } else { None })
                .collect::<Vec<_>>()
        };
        let a = h.run(|cx| p.on_reply(cx, not_leader(3)));
        assert_eq!(sends(&a), vec![Time::from_millis(1010); 3], "resubmitted to every replica with a new send time");
        assert_eq!(finished(&a), None);
        let a = h.run(|cx| p.on_reply(cx, not_leader(1)));
        assert!(sends(&a).is_empty(), "the second report of the same new leader does not resubmit again");
        assert_eq!(p.view_retries, 1);
        // The new view's slow path commits it: the new leader (2 leads view 1) and f = 1.
        h.run(|cx| p.on_reply(cx, fast(2, 1, 3, Some(OpResult::Done))));
        let a = h.run(|cx| p.on_reply(cx, slow(3, 1)));
        assert_eq!(finished(&a), Some(Outcome::Done(OpResult::Done)));
    }

    #[test]
    fn done_is_final_and_a_timeout_resubmits_with_a_new_send_time() {
        let mut h = Host::new(3);
        let mut p = proxy();
        h.run(|cx| p.begin(cx, &cmd()));
        h.now = Time::from_millis(1600);
        let a = h.run(|cx| p.on_timer(cx, ATTEMPT_TIMER));
        let metas: Vec<&RequestMeta> =
            a.iter().filter_map(|x| if let ClientAction::Send { meta, .. } = x { Some(meta) } else { None }).collect();
        assert_eq!(metas.len(), 3);
        assert!(metas.iter().all(|m| m.sent_at == Time::from_millis(1600)));
        h.now = Time::from_millis(1604);
        let a = h.run(|cx| p.on_reply(cx, Reply { client: 9, seq: 4, from: 2, body: ReplyBody::Done(OpResult::Done) }));
        assert_eq!(finished(&a), Some(Outcome::Done(OpResult::Done)));
        // The round trip of 4 ms gave replica 2 a 2 ms sample.
        assert_eq!(p.owd.estimate(2, 0), 2_000_000);
    }

    #[test]
    fn a_fast_reply_carries_the_replicas_own_one_way_delay() {
        let mut h = Host::new(3);
        let mut p = proxy();
        h.run(|cx| p.begin(cx, &cmd()));
        // The reply comes 5 ms after the send (the early-buffer held the request), but the
        // replica measured 300 µs on the way there: that is the sample, not half the 5 ms.
        h.now = Time::from_millis(1005);
        let body = ReplyBody::Speculative { view: 0, digest: 1, owd: 300_000, result: None };
        h.run(|cx| p.on_reply(cx, Reply { client: 9, seq: 4, from: 3, body }));
        assert_eq!(p.owd.estimate(3, 0), 300_000);
        // A slow-reply is no sample.
        h.run(|cx| p.on_reply(cx, slow(2, 0)));
        assert_eq!(p.owd.estimate(2, 0), 10_000_000, "no samples: the clamp D");
    }

    #[test]
    fn the_deadline_widens_with_the_clock_error_bound_up_to_the_clamp() {
        let mut h = Host::new(3);
        let mut p = proxy();
        h.run(|cx| p.begin(cx, &cmd()));
        h.now = Time::from_millis(1002);
        // Followers' fast-replies without the leader's keep the request open; each carries
        // the follower's own sample (1 ms).
        for from in [2, 3] {
            let body = ReplyBody::Speculative { view: 0, digest: 1, owd: 1_000_000, result: None };
            h.run(|cx| p.on_reply(cx, Reply { client: 9, seq: 4, from, body }));
        }
        let a = h.run(|cx| p.on_reply(cx, Reply { client: 9, seq: 4, from: 1, body: ReplyBody::Done(OpResult::Done) }));
        assert!(finished(&a).is_some());
        // Every replica's sample: 1 ms (the leader's: half of its 2 ms round trip).
        let members = [1, 2, 3];
        assert_eq!(p.bound(&members, Duration::ZERO), 1_000_000);
        // σ = 1 ms on both sides, β = 1: P + 2 ms.
        assert_eq!(p.bound(&members, Duration::from_millis(1)), 3_000_000);
        // β = 0.5.
        assert_eq!(p.clone().with_beta_pct(50).bound(&members, Duration::from_millis(1)), 2_000_000);
        // Beyond D (10 ms): D.
        assert_eq!(p.bound(&members, Duration::from_millis(300)), 10_000_000);
        // The stamp the host's clock error gives.
        let mut h = Host::new(3);
        h.now = Time::from_millis(2000);
        let mut out = Vec::new();
        let mut cx = ClientCtx::new(h.now, &mut h.rng, &h.members, 0, &mut out);
        cx.clock_error = Duration::from_micros(500);
        p.begin(&mut cx, &cmd());
        let stamps: Vec<ProxyStamp> = out
            .iter()
            .filter_map(|x| match x {
                ClientAction::Send { meta, .. } => synod_core::protocol::decode(&meta.ext).ok(),
                _ => None,
            })
            .collect();
        assert_eq!(stamps.len(), 3);
        assert!(stamps.iter().all(|s| s.bound == 2_000_000), "{stamps:?}");
    }
}
