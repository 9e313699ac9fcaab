//! The client side of IDEM (§5.3, Theorems 6.3 and 6.4) as a [`ClientPolicy`].
//!
//! A request goes to every replica. Its outcome:
//! * **success** — a reply (from any replica): the request executed;
//! * **failure** — `n` REJECTs from distinct replicas: every replica rejected it, none will
//!   ever propose it, so it never executes (`Outcome::Rejected { definitive: true }`). Only
//!   durable REJECTs count here (`ReplyBody::Rejected`, sent once the replica's verdict is
//!   durable); an early one (`ReplyBody::RejectedEarly`, sent before, not held by the group
//!   commit) may be forgotten in a crash;
//! * **ambivalence** — `n − f` REJECTs, early or durable: it may still execute if one of the
//!   other `f` replicas
//!   accepted it. A *pessimistic* client gives up at once; an *optimistic* one (the paper's
//!   evaluation, 5 ms) waits that long for a reply or the last REJECTs, then gives up
//!   (`Outcome::Rejected { definitive: false }`: the effect is unknown). If by then every
//!   replica refused, but some only early, the last REJECTs *have* come and only their
//!   durable copies are missing (they follow at the end of the replica's turn): the client
//!   waits for them, at most one more attempt timeout, and ends definitively
//!   (`await_durable`, default on; off gives up at the wait as before).
//!
//! A request nobody answers within the attempt timeout is sent to every replica again (same
//! request id: replicas that hold it absorb the copy, those that rejected it reject again);
//! rejections counted so far still count. That is sound because a replica's verdict on a
//! request id is durable and final (`crate::admission::Verdicts`): a replica that rejected it
//! never accepts it through its own test, not even after a restart, so `n` REJECTs collected
//! over several attempts still mean that no replica ever accepted the request.

use std::collections::BTreeSet;
use std::time::Duration;
use synod_core::client_policy::{ClientConfig, RetryTimes};
use synod_core::{ClientCtx, ClientPolicy, Command, NodeId, Outcome, Reply, ReplyBody, RequestMeta};

/// `RequestMeta::ext` of a request the client sent to every replica: replicas need not relay it.
pub const MULTICAST: &[u8] = b"idem:all";

/// The registry's constructor: options `ambivalence = optimistic | pessimistic`,
/// `optimistic_wait_ms` (default 5) and `await_durable` (default true).
pub fn client(cfg: &ClientConfig) -> Box<dyn ClientPolicy> {
    let wait = cfg.options.get("optimistic_wait_ms").and_then(|v| v.trim().parse().ok()).unwrap_or(5);
    let mode = match cfg.options.get("ambivalence").map(|s| s.trim()) {
        Some("pessimistic") => Ambivalence::Pessimistic,
        _ => Ambivalence::Optimistic(Duration::from_millis(wait)),
    };
    let await_durable = !matches!(cfg.options.get("await_durable").map(|s| s.trim()), Some("false" | "off" | "0"));
    let mut p = IdemPolicy::new(mode, cfg.retry.clone());
    p.await_durable = await_durable;
    Box::new(p)
}

fn meta() -> RequestMeta {
    RequestMeta { ext: bytes::Bytes::from_static(MULTICAST), ..RequestMeta::default() }
}

const ATTEMPT_TIMER: u64 = 1;
const WAIT_TIMER: u64 = 2;

/// What a client does once `n − f` replicas rejected its request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ambivalence {
    /// Give up at once (lowest reject latency).
    Pessimistic,
    /// Wait this long for a reply or the remaining REJECTs (the paper: 5 ms).
    Optimistic(Duration),
}

impl Default for Ambivalence {
    fn default() -> Self {
        Ambivalence::Optimistic(Duration::from_millis(5))
    }
}

/// IDEM's client policy for one session.
#[derive(Clone, Debug)]
pub struct IdemPolicy {
    mode: Ambivalence,
    times: RetryTimes,
    /// Replicas whose rejection of the current request is durable.
    rejects: BTreeSet<NodeId>,
    /// Replicas that rejected it, early or durably (ambivalence counts these).
    refusing: BTreeSet<NodeId>,
    last_reason: String,
    waiting: bool,
    /// Optimistic: once every replica refused when the wait ends, wait for their durable
    /// REJECTs instead of giving up ambivalently.
    await_durable: bool,
    /// The wait ended with every replica refused: waiting for the durable REJECTs.
    extended: bool,
    active: bool,
}

impl IdemPolicy {
    pub fn new(mode: Ambivalence, times: RetryTimes) -> IdemPolicy {
        IdemPolicy {
            mode,
            times,
            rejects: BTreeSet::new(),
            refusing: BTreeSet::new(),
            last_reason: String::new(),
            waiting: false,
            await_durable: true,
            extended: false,
            active: false,
        }
    }

    fn finish(&mut self, cx: &mut ClientCtx<'_>, outcome: Outcome) {
        self.active = false;
        cx.cancel_timer(ATTEMPT_TIMER);
        cx.cancel_timer(WAIT_TIMER);
        cx.finish(outcome);
    }

    fn rejected(&mut self, cx: &mut ClientCtx<'_>, definitive: bool) {
        let n = cx.members.len();
        let reason = format!("rejected by {} of {n} replicas: {}", self.refusing.len(), self.last_reason);
        self.finish(cx, Outcome::Rejected { definitive, reason });
    }
}

impl Default for IdemPolicy {
    fn default() -> Self {
        IdemPolicy::new(Ambivalence::default(), RetryTimes::default())
    }
}

impl ClientPolicy for IdemPolicy {
    fn begin(&mut self, cx: &mut ClientCtx<'_>, _cmd: &Command) {
        self.rejects.clear();
        self.refusing.clear();
        self.last_reason.clear();
        self.waiting = false;
        self.extended = false;
        self.active = true;
        if cx.members.is_empty() {
            self.finish(cx, Outcome::Unknown("no replicas known".into()));
            return;
        }
        cx.send_all(meta());
        cx.set_timer(ATTEMPT_TIMER, self.times.attempt_timeout);
    }

    fn on_reply(&mut self, cx: &mut ClientCtx<'_>, reply: Reply) {
        if !self.active {
            return;
        }
        // Only a durable REJECT counts towards a definitive failure (`RejectedEarly` may be
        // forgotten in a crash).
        let durable = matches!(reply.body, ReplyBody::Rejected { .. });
        match reply.body {
            ReplyBody::Done(r) => self.finish(cx, Outcome::Done(r)),
            ReplyBody::Invalid { reason } => self.finish(cx, Outcome::Invalid(reason)),
            ReplyBody::Rejected { reason } | ReplyBody::RejectedEarly { reason } => {
                if !cx.members.contains(&reply.from) {
                    return;
                }
                self.refusing.insert(reply.from);
                if durable {
                    self.rejects.insert(reply.from);
                }
                self.last_reason = reason;
                let n = cx.members.len();
                let f = (n - 1) / 2;
                if self.rejects.len() >= n {
                    self.rejected(cx, true);
                } else if self.refusing.len() >= n - f && !self.waiting {
                    match self.mode {
                        Ambivalence::Pessimistic => self.rejected(cx, false),
                        Ambivalence::Optimistic(wait) => {
                            self.waiting = true;
                            cx.set_timer(WAIT_TIMER, wait);
                        }
                    }
                }
            }
            // IDEM replicas neither redirect nor answer speculatively.
            ReplyBody::NotLeader { .. } | ReplyBody::Speculative { .. } | ReplyBody::SlowReply { .. } => {}
        }
    }

    fn on_timer(&mut self, cx: &mut ClientCtx<'_>, id: u64) {
        if !self.active {
            return;
        }
        match id {
            // Every replica refused (some only early): their durable REJECTs are on the way.
            WAIT_TIMER if self.await_durable && !self.extended && self.refusing.len() >= cx.members.len() => {
                self.extended = true;
                cx.set_timer(WAIT_TIMER, self.times.attempt_timeout);
            }
            WAIT_TIMER => self.rejected(cx, false),
            ATTEMPT_TIMER => {
                cx.send_all(meta());
                cx.set_timer(ATTEMPT_TIMER, self.times.attempt_timeout);
            }
            _ => {}
        }
    }

    fn on_unreachable(&mut self, _cx: &mut ClientCtx<'_>, _node: NodeId) {
        // Nothing to do: the other replicas got the request too; the attempt timer resends.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use synod_core::{rng_from_seed, ClientAction, Op, OpResult};

    fn cmd() -> Command {
        Command { client: 7, seq: 1, acked_below: 1, now_ms: 0, op: Op::Get { key: Bytes::from_static(b"k") } }
    }

    fn reject(from: NodeId) -> Reply {
        Reply { client: 7, seq: 1, from, body: ReplyBody::Rejected { reason: "busy".into() } }
    }

    fn early_reject(from: NodeId) -> Reply {
        Reply { client: 7, seq: 1, from, body: ReplyBody::RejectedEarly { reason: "busy".into() } }
    }

    /// Drive a policy over `members`; returns the actions of each step.
    struct Drive {
        p: IdemPolicy,
        members: Vec<NodeId>,
        rng: synod_core::Rng,
    }

    impl Drive {
        fn new(mode: Ambivalence, n: u32) -> Drive {
            Drive { p: IdemPolicy::new(mode, RetryTimes::default()), members: (1..=n).collect(), rng: rng_from_seed(1) }
        }
        fn step(&mut self, f: impl FnOnce(&mut IdemPolicy, &mut ClientCtx<'_>)) -> Vec<ClientAction> {
            let mut actions = Vec::new();
            let mut cx = ClientCtx::new(synod_core::Time::ZERO, &mut self.rng, &self.members, 0, &mut actions);
            f(&mut self.p, &mut cx);
            actions
        }
    }

    fn finished(actions: &[ClientAction]) -> Option<&Outcome> {
        actions.iter().find_map(|a| match a {
            ClientAction::Finish(o) => Some(o),
            _ => None,
        })
    }

    #[test]
    fn multicasts_to_every_replica() {
        let mut d = Drive::new(Ambivalence::Pessimistic, 3);
        let a = d.step(|p, cx| p.begin(cx, &cmd()));
        let to: Vec<NodeId> = a
            .iter()
            .filter_map(|a| match a {
                ClientAction::Send { to, .. } => Some(*to),
                _ => None,
            })
            .collect();
        assert_eq!(to, vec![1, 2, 3]);
    }

    #[test]
    fn a_reply_is_success_even_after_rejects() {
        let mut d = Drive::new(Ambivalence::default(), 3);
        d.step(|p, cx| p.begin(cx, &cmd()));
        assert!(finished(&d.step(|p, cx| p.on_reply(cx, reject(1)))).is_none());
        let done = Reply { client: 7, seq: 1, from: 2, body: ReplyBody::Done(OpResult::Done) };
        let a = d.step(|p, cx| p.on_reply(cx, done));
        assert_eq!(finished(&a), Some(&Outcome::Done(OpResult::Done)));
    }

    #[test]
    fn pessimistic_gives_up_after_n_minus_f_rejects_ambivalently() {
        let mut d = Drive::new(Ambivalence::Pessimistic, 5);
        d.step(|p, cx| p.begin(cx, &cmd()));
        for from in [1, 2] {
            assert!(finished(&d.step(|p, cx| p.on_reply(cx, reject(from)))).is_none());
        }
        // A repeated reject from the same replica does not count twice.
        assert!(finished(&d.step(|p, cx| p.on_reply(cx, reject(2)))).is_none());
        let a = d.step(|p, cx| p.on_reply(cx, reject(3)));
        assert!(matches!(finished(&a), Some(Outcome::Rejected { definitive: false, .. })), "{a:?}");
    }

    #[test]
    fn optimistic_waits_then_gives_up_ambivalently() {
        let mut d = Drive::new(Ambivalence::Optimistic(Duration::from_millis(5)), 3);
        d.step(|p, cx| p.begin(cx, &cmd()));
        d.step(|p, cx| p.on_reply(cx, reject(1)));
        let a = d.step(|p, cx| p.on_reply(cx, reject(2)));
        assert!(finished(&a).is_none());
        assert!(a.contains(&ClientAction::SetTimer { id: WAIT_TIMER, after: Duration::from_millis(5) }));
        let a = d.step(|p, cx| p.on_timer(cx, WAIT_TIMER));
        assert!(matches!(finished(&a), Some(Outcome::Rejected { definitive: false, .. })));
    }

    #[test]
    fn n_rejects_are_a_definitive_failure() {
        let mut d = Drive::new(Ambivalence::Optimistic(Duration::from_millis(5)), 3);
        d.step(|p, cx| p.begin(cx, &cmd()));
        d.step(|p, cx| p.on_reply(cx, reject(1)));
        d.step(|p, cx| p.on_reply(cx, reject(3)));
        let a = d.step(|p, cx| p.on_reply(cx, reject(2)));
        assert!(matches!(finished(&a), Some(Outcome::Rejected { definitive: true, .. })), "{a:?}");
        // Nothing after the end.
        assert!(d.step(|p, cx| p.on_timer(cx, WAIT_TIMER)).is_empty());
    }

    #[test]
    fn silence_resends_to_everyone_and_keeps_the_rejects() {
        let mut d = Drive::new(Ambivalence::Pessimistic, 3);
        d.step(|p, cx| p.begin(cx, &cmd()));
        d.step(|p, cx| p.on_reply(cx, reject(1)));
        let a = d.step(|p, cx| p.on_timer(cx, ATTEMPT_TIMER));
        assert_eq!(a.iter().filter(|a| matches!(a, ClientAction::Send { .. })).count(), 3);
        let a = d.step(|p, cx| p.on_reply(cx, reject(2)));
        assert!(matches!(finished(&a), Some(Outcome::Rejected { definitive: false, .. })));
    }

    #[test]
    fn early_rejects_count_for_ambivalence_only() {
        // Pessimistic: n − f early rejects end the request, ambivalently.
        let mut d = Drive::new(Ambivalence::Pessimistic, 3);
        d.step(|p, cx| p.begin(cx, &cmd()));
        assert!(finished(&d.step(|p, cx| p.on_reply(cx, early_reject(1)))).is_none());
        let a = d.step(|p, cx| p.on_reply(cx, early_reject(2)));
        assert!(matches!(finished(&a), Some(Outcome::Rejected { definitive: false, .. })), "{a:?}");

        // Optimistic: n early rejects are not a definitive failure (a replica may forget one
        // in a crash and accept the request later); the durable ones that follow are.
        let mut d = Drive::new(Ambivalence::Optimistic(Duration::from_millis(5)), 3);
        d.step(|p, cx| p.begin(cx, &cmd()));
        for from in [1, 2, 3] {
            assert!(finished(&d.step(|p, cx| p.on_reply(cx, early_reject(from)))).is_none());
        }
        d.step(|p, cx| p.on_reply(cx, reject(1)));
        d.step(|p, cx| p.on_reply(cx, reject(2)));
        let a = d.step(|p, cx| p.on_reply(cx, reject(3)));
        assert!(matches!(finished(&a), Some(Outcome::Rejected { definitive: true, .. })), "{a:?}");

        // Only early rejects: the optimistic wait ends ambivalently when the durable
        // REJECTs are not awaited.
        let mut d = Drive::new(Ambivalence::Optimistic(Duration::from_millis(5)), 3);
        d.p.await_durable = false;
        d.step(|p, cx| p.begin(cx, &cmd()));
        for from in [1, 2, 3] {
            d.step(|p, cx| p.on_reply(cx, early_reject(from)));
        }
        let a = d.step(|p, cx| p.on_timer(cx, WAIT_TIMER));
        assert!(matches!(finished(&a), Some(Outcome::Rejected { definitive: false, .. })), "{a:?}");
    }

    #[test]
    fn optimistic_awaits_the_durable_rejects_once_everyone_refused() {
        let wait = Duration::from_millis(5);
        let mut d = Drive::new(Ambivalence::Optimistic(wait), 3);
        d.step(|p, cx| p.begin(cx, &cmd()));
        for from in [1, 2, 3] {
            d.step(|p, cx| p.on_reply(cx, early_reject(from)));
        }
        d.step(|p, cx| p.on_reply(cx, reject(2)));
        // The wait ends with all three refused, one durably: wait for the other two.
        let a = d.step(|p, cx| p.on_timer(cx, WAIT_TIMER));
        assert!(finished(&a).is_none(), "{a:?}");
        let attempt = RetryTimes::default().attempt_timeout;
        assert!(a.contains(&ClientAction::SetTimer { id: WAIT_TIMER, after: attempt }), "{a:?}");
        d.step(|p, cx| p.on_reply(cx, reject(1)));
        let a = d.step(|p, cx| p.on_reply(cx, reject(3)));
        assert!(matches!(finished(&a), Some(Outcome::Rejected { definitive: true, .. })), "{a:?}");

        // A durable REJECT that never comes (its replica crashed): ambivalent after the
        // extra wait, once.
        let mut d = Drive::new(Ambivalence::Optimistic(wait), 3);
        d.step(|p, cx| p.begin(cx, &cmd()));
        for from in [1, 2, 3] {
            d.step(|p, cx| p.on_reply(cx, early_reject(from)));
        }
        assert!(finished(&d.step(|p, cx| p.on_timer(cx, WAIT_TIMER))).is_none());
        let a = d.step(|p, cx| p.on_timer(cx, WAIT_TIMER));
        assert!(matches!(finished(&a), Some(Outcome::Rejected { definitive: false, .. })), "{a:?}");

        // Only n − f refused when the wait ends: ambivalent at once, as before.
        let mut d = Drive::new(Ambivalence::Optimistic(wait), 3);
        d.step(|p, cx| p.begin(cx, &cmd()));
        d.step(|p, cx| p.on_reply(cx, early_reject(1)));
        d.step(|p, cx| p.on_reply(cx, reject(2)));
        let a = d.step(|p, cx| p.on_timer(cx, WAIT_TIMER));
        assert!(matches!(finished(&a), Some(Outcome::Rejected { definitive: false, .. })), "{a:?}");
    }

    #[test]
    fn options_choose_the_mode() {
        let cfg = |opts: &[(&str, &str)]| ClientConfig {
            retry: RetryTimes::default(),
            options: opts.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        };
        let run = |opts: &[(&str, &str)], replies: Vec<Reply>, timer: bool| {
            let (members, mut rng, mut actions) = (vec![1, 2, 3], rng_from_seed(1), Vec::new());
            let mut p = client(&cfg(opts));
            {
                let mut cx = ClientCtx::new(synod_core::Time::ZERO, &mut rng, &members, 0, &mut actions);
                p.begin(&mut cx, &cmd());
                for r in replies {
                    p.on_reply(&mut cx, r);
                }
                if timer {
                    p.on_timer(&mut cx, WAIT_TIMER);
                }
            }
            finished(&actions).cloned()
        };
        // Pessimistic: two early rejects of three end the request.
        let two = || vec![early_reject(1), early_reject(2)];
        assert!(matches!(run(&[("ambivalence", "pessimistic")], two(), false), Some(Outcome::Rejected { .. })));
        assert_eq!(run(&[], two(), false), None, "optimistic by default");
        let three = || vec![early_reject(1), early_reject(2), early_reject(3)];
        assert_eq!(run(&[], three(), true), None, "awaits the durable rejects by default");
        let off = run(&[("await_durable", "false")], three(), true);
        assert!(matches!(off, Some(Outcome::Rejected { definitive: false, .. })), "{off:?}");
    }
}
