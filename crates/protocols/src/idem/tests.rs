//! Scenario tests of the IDEM layer on the test network: the paths of §4.3 and §5 one by one.

use super::*;
use crate::multipaxos::Msg;
use crate::testnet::{get, put, value, Build, Net};
use synod_core::{OpResult, ReplyBody};

fn params(opts: &[&str]) -> ProtocolParams {
    let mut p = ProtocolParams::default();
    for o in opts {
        p.set(o).unwrap();
    }
    p
}

fn net_with(n: u32, build: Build, opts: &[&str]) -> Net {
    let mut net = Net::with_params(n, build, params(opts));
    net.await_leader(Duration::from_secs(5)).expect("a leader");
    net
}

fn net(n: u32, opts: &[&str]) -> Net {
    net_with(n, super::build, opts)
}

fn idem_msg(bytes: &[u8]) -> Option<IdemMsg> {
    match decode::<Msg>(bytes) {
        Ok(Msg::Layer(b)) => decode::<IdemMsg>(&b).ok(),
        _ => None,
    }
}

fn is_accept(bytes: &[u8]) -> bool {
    matches!(decode::<Msg>(bytes), Ok(Msg::Accept { .. }))
}

fn followers(net: &Net) -> Vec<NodeId> {
    let leader = net.leader().unwrap();
    (1..=net.nodes.len() as NodeId).filter(|&n| n != leader).collect()
}

fn stat(net: &Net, n: NodeId, key: &str) -> u64 {
    net.node(n).p.status().extra.get(key).and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn done() -> ReplyBody {
    ReplyBody::Done(OpResult::Done)
}

#[test]
fn a_request_at_a_follower_executes_everywhere_and_is_answered_there() {
    let mut net = net(3, &[]);
    let leader = net.leader().unwrap();
    let follower = followers(&net)[0];
    net.request(follower, 1, 1, put("k", "v"));
    // The answer comes from the follower that holds the client, as soon as the leader's
    // prompt commit notice arrives: no forward, no heartbeat wait.
    assert_eq!(net.reply_for(1, 1), Some(&done()));
    assert_eq!(stat(&net, follower, "forwarded"), 0);
    net.request(leader, 1, 2, get("k"));
    assert_eq!(net.reply_for(1, 2), Some(&value("v")));
    net.run_for(Duration::from_millis(100));
    for n in 1..=3 {
        assert_eq!(net.executed(n), net.executed(leader));
        assert_eq!(stat(&net, n, "active"), 0, "n{n} still holds requests");
    }
    net.assert_agreement();
}

/// §5.1: at RT active requests a replica rejects at once; the rejection is sticky: a
/// retransmission is rejected again even once there is room (and the mutant that forgets
/// rejections accepts it).
fn sticky_rejection(build: Build) -> Option<ReplyBody> {
    let mut net = net_with(3, build, &["reject_threshold=2", "admission=taildrop", "relay=false"]);
    let f = followers(&net)[0];
    // No Accept gets through: accepted requests stay active.
    net.drop = Box::new(|_, _, b| is_accept(b));
    net.request(f, 1, 1, put("a", "1"));
    net.request(f, 2, 1, put("b", "1"));
    net.request(f, 3, 1, put("c", "1"));
    assert!(net.reply_for(1, 1).is_none() && net.reply_for(2, 1).is_none());
    assert!(matches!(net.reply_for(3, 1), Some(ReplyBody::Rejected { .. })), "{:?}", net.reply_for(3, 1));
    net.replies.clear();
    net.drop = Box::new(|_, _, _| false);
    net.run_for(Duration::from_millis(2000));
    assert_eq!(net.reply_for(1, 1), Some(&done()));
    assert_eq!(net.reply_for(2, 1), Some(&done()));
    assert_eq!(stat(&net, f, "active"), 0);
    net.request(f, 3, 1, put("c", "1"));
    net.run_for(Duration::from_millis(500));
    net.reply_for(3, 1).cloned()
}

#[test]
fn rejection_at_the_threshold_is_immediate_and_sticky() {
    assert!(matches!(sticky_rejection(super::build), Some(ReplyBody::Rejected { .. })));
}

/// A client whose reply was lost retries a request that executed: it gets the original
/// result, not a rejection — even at the threshold. (Found by the simulator, seed 323 at
/// reject_threshold=2: every replica rejected such a retry, so the client was told that a
/// request it had executed never would.)
#[test]
fn a_retry_of_an_executed_request_is_answered_not_rejected() {
    let mut net = net(3, &["reject_threshold=2", "admission=taildrop", "relay=false"]);
    let f = followers(&net)[0];
    // The client sends to every replica (no relay): f + 1 REQUIREs, the leader proposes.
    for n in 1..=3 {
        net.request(n, 9, 1, put("k", "v"));
    }
    net.run_for(Duration::from_millis(200));
    assert_eq!(net.reply_for(9, 1), Some(&done()));
    // Fill the follower up to the threshold: no Accept gets through, so both stay active.
    net.drop = Box::new(|_, _, b| is_accept(b));
    net.request(f, 1, 1, put("a", "1"));
    net.request(f, 2, 1, put("b", "1"));
    net.request(f, 3, 1, put("c", "1"));
    assert!(matches!(net.reply_for(3, 1), Some(ReplyBody::Rejected { .. })), "the threshold is reached");
    net.replies.clear();
    net.request(f, 9, 1, put("k", "v"));
    net.run_for(Duration::from_millis(50));
    assert!(
        !matches!(net.reply_for(9, 1), Some(ReplyBody::Rejected { .. })),
        "the retry of an executed request was rejected: {:?}",
        net.reply_for(9, 1)
    );
    net.drop = Box::new(|_, _, _| false);
    net.run_for(Duration::from_millis(2000));
    assert_eq!(net.reply_for(9, 1), Some(&done()), "the retry gets the original result");
    net.assert_agreement();
}

/// Verdicts are sticky across a restart (and across compactions of the durable image): a
/// replica that rejected a request, crashed and restarted rejects a retransmission again
/// although it has room now. Before, rejections were in memory only and the restarted replica
/// accepted the retransmission and forwarded it, so a request its client saw rejected by all
/// replicas executed (`synod check --protocol idem --seed 419 --param reject_threshold=2`).
#[test]
fn a_rejection_is_sticky_across_a_restart_and_a_compaction() {
    let mut net = net(3, &["reject_threshold=2", "admission=taildrop", "relay=false", "compact_every=2"]);
    let f = followers(&net)[0];
    net.drop = Box::new(|_, _, b| is_accept(b));
    net.request(f, 1, 1, put("a", "1"));
    net.request(f, 2, 1, put("b", "1"));
    net.request(f, 3, 1, put("c", "1"));
    assert!(matches!(net.reply_for(3, 1), Some(ReplyBody::Rejected { .. })), "{:?}", net.reply_for(3, 1));
    net.drop = Box::new(|_, _, _| false);
    // Enough executed slots for the durable image to be compacted (every 2) a few times.
    for seq in 1..=6 {
        net.request(net.leader().unwrap(), 4, seq, put("d", &seq.to_string()));
    }
    net.run_for(Duration::from_millis(2000));
    assert_eq!(net.reply_for(1, 1), Some(&done()));
    assert_eq!(stat(&net, f, "active"), 0);
    // Garbage collection follows the session table: of client 4's six requests (forwarded to
    // and accepted by `f`) only the newest verdict is kept; one per client 1, 2, 3.
    assert_eq!(stat(&net, f, "verdicts"), 4);
    net.crash(f);
    net.restart(f);
    net.run_for(Duration::from_millis(500));
    assert_eq!(stat(&net, f, "verdicts"), 4, "verdicts recovered from the compacted image and the later records");
    net.replies.clear();
    net.request(f, 3, 1, put("c", "1"));
    net.run_for(Duration::from_millis(500));
    assert!(
        matches!(net.reply_for(3, 1), Some(ReplyBody::Rejected { .. })),
        "the restarted replica changed its verdict: {:?}",
        net.reply_for(3, 1)
    );
    net.assert_agreement();
}

/// The other half of the same rule: a replica that accepted a request (and may have required
/// or forwarded it) and restarted must not reject a retransmission of it, even when full.
#[test]
fn an_acceptance_is_sticky_across_a_restart() {
    let mut net = net(3, &["reject_threshold=2", "admission=taildrop", "relay=false", "forward_ms=1000"]);
    let f = followers(&net)[0];
    net.drop = Box::new(|_, _, b| is_accept(b));
    net.request(f, 1, 1, put("a", "1"));
    net.run_for(Duration::from_millis(5));
    net.crash(f);
    net.restart(f);
    // Fill the restarted replica up to the threshold.
    net.request(f, 2, 1, put("b", "1"));
    net.request(f, 3, 1, put("c", "1"));
    net.replies.clear();
    net.request(f, 1, 1, put("a", "1"));
    net.run_for(Duration::from_millis(5));
    assert!(
        !matches!(net.reply_for(1, 1), Some(ReplyBody::Rejected { .. })),
        "the restarted replica rejected a request it had accepted: {:?}",
        net.reply_for(1, 1)
    );
    net.drop = Box::new(|_, _, _| false);
    net.run_for(Duration::from_millis(3000));
    assert_eq!(net.reply_for(1, 1), Some(&done()));
    net.assert_agreement();
}

#[test]
fn the_forget_rejections_mutant_is_caught() {
    let forget = |s: &Setup| build_with(s, Deviation { forget_rejections: true, ..Deviation::default() });
    assert_eq!(sticky_rejection(forget), Some(done()));
}

/// §4.3: the leader orders a request only after f + 1 REQUIREs. With relaying off and a long
/// forward delay, a request one follower accepted waits; forwarding (§5.2) then makes the
/// others accept it and it executes (Property 5.1). The mutant proposing after f REQUIREs
/// orders a request only the leader accepted at once.
fn one_require(build: Build, at_leader: bool) -> (Option<ReplyBody>, Option<ReplyBody>) {
    let mut net = net_with(3, build, &["relay=false", "forward_ms=1000"]);
    let at = if at_leader { net.leader().unwrap() } else { followers(&net)[0] };
    net.request(at, 1, 1, put("k", "v"));
    net.run_for(Duration::from_millis(500));
    let early = net.reply_for(1, 1).cloned();
    net.run_for(Duration::from_millis(2000));
    (early, net.reply_for(1, 1).cloned())
}

#[test]
fn the_leader_waits_for_f_plus_1_requires_and_forwarding_completes_them() {
    for at_leader in [false, true] {
        let (early, late) = one_require(super::build, at_leader);
        assert_eq!(early, None, "ordered with one REQUIRE (at leader: {at_leader})");
        assert_eq!(late, Some(done()), "forwarding did not complete it (at leader: {at_leader})");
    }
}

#[test]
fn the_require_f_mutant_is_caught() {
    let require_f = |s: &Setup| build_with(s, Deviation { require_f: true, ..Deviation::default() });
    let (early, _) = one_require(require_f, true);
    assert_eq!(early, Some(done()));
}

/// §5.2 FETCH: the leader has f + 1 REQUIREs but not the request (it never received it).
#[test]
fn the_leader_fetches_a_request_it_never_received() {
    let mut net = net(3, &[]);
    let leader = net.leader().unwrap();
    let f = followers(&net)[0];
    // The relay to the leader is lost; the other follower's REQUIRE and ours make f + 1.
    net.drop = Box::new(move |_, to, b| to == leader && matches!(idem_msg(b), Some(IdemMsg::Relay { .. })));
    net.request(f, 1, 1, put("k", "v"));
    net.run_for(Duration::from_millis(5));
    assert_eq!(net.reply_for(1, 1), Some(&done()));
    assert!(stat(&net, leader, "fetched") >= 1);
    net.assert_agreement();
}

/// §4.5: the leader crashes after the followers accepted (and required) a request it had not
/// proposed yet; they re-send their REQUIREs to the new leader, which orders it.
#[test]
fn requires_are_resent_to_a_new_leader() {
    let mut net = net(3, &[]);
    let old = net.leader().unwrap();
    let f = followers(&net)[0];
    net.drop = Box::new(move |_, to, b| to == old && idem_msg(b).is_some());
    net.request(f, 1, 1, put("k", "v"));
    net.crash(old);
    net.drop = Box::new(|_, _, _| false);
    net.run_for(Duration::from_secs(3));
    assert_ne!(net.leader(), Some(old));
    assert_eq!(net.reply_for(1, 1), Some(&done()));
    net.assert_agreement();
}

/// A replica that rejected a request still executes it if others accepted it (and answers its
/// client then: §5.3 success after a REJECT).
#[test]
fn a_rejecting_replica_answers_when_the_request_executes_after_all() {
    let mut net = net(3, &["reject_threshold=1", "admission=taildrop"]);
    let fs = followers(&net);
    let busy = fs[0];
    // `busy` alone holds request (1, 1): nothing of it leaves `busy`.
    net.drop = Box::new(move |from, _, b| {
        from == busy && idem_msg(b).is_some_and(|m| !matches!(m, IdemMsg::Relay { cmd } if cmd.client == 2))
    });
    net.request(busy, 1, 1, put("a", "1"));
    // The next request finds `busy` full; the relays let the leader and the other follower
    // accept it.
    net.request(busy, 2, 1, put("b", "2"));
    net.run_for(Duration::from_millis(5));
    let answers: Vec<&ReplyBody> = net.replies.iter().filter(|r| r.client == 2).map(|r| &r.body).collect();
    assert!(
        matches!(answers[..], [ReplyBody::RejectedEarly { .. }, ReplyBody::Rejected { .. }, ReplyBody::Done(_)]),
        "{answers:?}"
    );
    net.assert_agreement();
}

/// Restart from the WAL: a replica that crashed re-executes its log and catches up.
#[test]
fn a_replica_restarts_from_its_durable_records() {
    let mut net = net(3, &[]);
    let f = followers(&net)[0];
    for seq in 1..=20 {
        net.request(f, 1, seq, put("k", &seq.to_string()));
    }
    net.run_for(Duration::from_millis(100));
    let before = net.executed(f);
    assert!(before >= 1);
    net.crash(f);
    net.restart(f);
    assert_eq!(net.executed(f), before, "re-executed its committed log from the WAL");
    net.request(f, 1, 21, get("k"));
    net.run_for(Duration::from_millis(100));
    assert_eq!(net.reply_for(1, 21), Some(&value("20")));
    net.assert_agreement();
}

/// §4.4: the log is trimmed implicitly once it is a window (n × RT) past a slot.
#[test]
fn implicit_garbage_collection_trims_a_window_behind() {
    let mut net = net(3, &["reject_threshold=2"]);
    let leader = net.leader().unwrap();
    for seq in 1..=40 {
        net.request(leader, 1, seq, put("k", "v"));
    }
    net.run_for(Duration::from_millis(100));
    let last = stat(&net, leader, "log_last");
    for n in 1..=3 {
        let first = stat(&net, n, "log_first");
        assert!(first > 1 && first + 6 >= last, "n{n}: log_first {first}, log_last {last}");
    }
}

/// The trim bound is exactly the window n × RT behind the newest slot; the mutant that
/// collects one instance too early trims one slot further (same schedule, same log).
fn trim_position(build: Build) -> (u64, u64) {
    let mut net = net_with(3, build, &["reject_threshold=4"]);
    let leader = net.leader().unwrap();
    for seq in 1..=60 {
        net.request(leader, 1, seq, put("k", "v"));
        net.run_for(Duration::from_millis(2));
    }
    net.run_for(Duration::from_millis(200));
    (stat(&net, leader, "gle"), stat(&net, leader, "log_last"))
}

#[test]
fn the_gc_early_mutant_is_caught() {
    let (bound, last) = trim_position(super::build);
    assert_eq!(bound, last - 12, "window n x RT = 12");
    let gc_early = |s: &Setup| build_with(s, Deviation { gc_early: true, ..Deviation::default() });
    let (bound_early, last_early) = trim_position(gc_early);
    assert_eq!(last_early, last);
    assert_eq!(bound_early, last - 11, "the mutant trims one instance too early");
}

#[test]
fn options_are_checked() {
    let mut p = params(&["reject_threshold=0"]);
    assert!(IdemConfig::from_params(&p, Mode::Aqm).is_err());
    p = params(&["forward_ms=5", "relay=false"]);
    let c = IdemConfig::from_params(&p, Mode::Aqm).unwrap();
    assert_eq!((c.forward_delay, c.relay), (Duration::from_millis(5), false));
    p = params(&["no_such=1"]);
    assert!(IdemConfig::from_params(&p, Mode::Aqm).is_err());
}

/// The actions of one replica (no leader known yet) for a request arriving beyond RT.
fn actions_for_a_reject(opts: &[&str]) -> Vec<synod_core::Action> {
    use synod_core::{ClientRef, Event, Time};
    let setup = Setup { id: 1, members: vec![1, 2, 3], params: params(opts) };
    let mut p = super::build(&setup).unwrap();
    let mut rng = synod_core::rng_from_seed(1);
    let mut actions = Vec::new();
    p.recover(&mut Ctx::new(1, Time::ZERO, &mut rng, &mut actions), Vec::new());
    for client in 1..=3 {
        actions.clear();
        let cmd = Command { client, seq: 1, acked_below: 1, now_ms: 0, op: put("k", "v") };
        let event = Event::Request { client: ClientRef { node: 1, conn: client }, cmd, meta: RequestMeta::default() };
        p.on_event(&mut Ctx::new(1, Time::ZERO, &mut rng, &mut actions), event);
    }
    actions
}

/// Fast rejects: the early REJECT leaves through `Action::ReplyNow` ahead of the verdict's
/// `Persist`, so no driver holds it behind the group commit; the durable `Rejected` comes
/// after the `Persist` (held until it is durable). With `early_reject=false` only the latter.
#[test]
fn a_reject_is_sent_early_and_again_once_durable() {
    use synod_core::Action;
    let kinds = |actions: &[Action]| -> Vec<&'static str> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::ReplyNow { reply, .. } if matches!(reply.body, ReplyBody::RejectedEarly { .. }) => {
                    Some("early reject now")
                }
                Action::Reply { reply, .. } if matches!(reply.body, ReplyBody::Rejected { .. }) => Some("reject"),
                Action::Persist { .. } => Some("persist"),
                Action::Reply { .. } | Action::ReplyNow { .. } => Some("other reply"),
                _ => None,
            })
            .collect()
    };
    let opts = ["reject_threshold=2", "admission=taildrop", "relay=false"];
    assert_eq!(kinds(&actions_for_a_reject(&opts)), ["early reject now", "persist", "reject"]);
    let late = ["reject_threshold=2", "admission=taildrop", "relay=false", "early_reject=false"];
    assert_eq!(kinds(&actions_for_a_reject(&late)), ["persist", "reject"]);
}
