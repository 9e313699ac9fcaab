//! Scenario tests of EPaxos's paths on the deterministic test network.

use super::*;
use crate::testnet::{get, put, value, Net, DONE};
use msg::TpaOutcome;
use synod_core::{ClientRef, Op, Pos};

fn net(n: u32) -> Net {
    let mut net = Net::new(n, build);
    net.run_for(Duration::from_millis(300));
    net
}

/// [`net`] with one protocol option (`key=value`).
fn net_with(n: u32, option: &str) -> Net {
    let mut params = ProtocolParams::default();
    params.set(option).unwrap();
    let mut net = Net::with_params(n, build, params);
    net.run_for(Duration::from_millis(300));
    net
}

fn counter(net: &Net, id: NodeId, key: &str) -> u64 {
    net.node(id).p.status().extra[key].parse().unwrap()
}

fn total(net: &Net, key: &str) -> u64 {
    (1..=net.nodes.len() as NodeId).filter(|&i| net.node(i).up).map(|i| counter(net, i, key)).sum()
}

/// Hand a request to a replica without delivering anything (so requests at several
/// replicas are concurrent).
fn submit(net: &mut Net, at: NodeId, client: u64, seq: u64, op: Op) {
    let cmd = Command { client, seq, acked_below: seq, now_ms: 0, op };
    net.event(at, Event::Request { client: ClientRef { node: at, conn: client }, cmd, meta: Default::default() });
}

/// The positions at which `key` was written, in the order node `id` applied them.
fn writes_of(net: &Net, id: NodeId, key: &str) -> Vec<Pos> {
    net.node(id)
        .applied
        .iter()
        .filter(|(_, c)| matches!(&c.op, Op::Put { key: k, .. } if &k[..] == key.as_bytes()))
        .map(|(p, _)| *p)
        .collect()
}

#[test]
fn quorum_sizes_follow_section_4_4() {
    let size = |n: u32, opt: Option<&str>| {
        let mut params = ProtocolParams::default();
        if let Some(o) = opt {
            params.set(&format!("fast_quorum={o}")).unwrap();
        }
        let setup = Setup { id: 1, members: (1..=n).collect(), params };
        Epaxos::new(&setup, Variant::default()).map(|e| e.fast_quorum)
    };
    assert_eq!(size(3, None), Ok(2), "F + floor((F+1)/2) = 2 = 2F for N = 3");
    assert_eq!(size(3, Some("basic")), Ok(2));
    assert_eq!(size(5, None), Ok(3), "N = 5: the optimized F + floor((F+1)/2) = 3 by default (the paper's)");
    assert_eq!(size(5, Some("optimized")), Ok(3));
    assert_eq!(size(5, Some("basic")), Ok(4));
    assert_eq!(size(7, None), Ok(5));
    assert_eq!(size(7, Some("basic")), Ok(6));
    assert!(size(3, Some("huge")).is_err());
    // Even N (a membership change, or 4 replicas): N − 1 and at least a majority, with
    // either rule, and no TryPreAccept (see `fast_quorum_size`).
    assert_eq!(size(2, None), Ok(2));
    assert_eq!(size(4, None), Ok(3));
    assert_eq!(size(4, Some("basic")), Ok(3));
    assert_eq!(size(6, None), Ok(5));
    assert_eq!(fast_quorum_size(4, FastQuorum::Optimized), (3, false));
    assert_eq!(size(1, None), Ok(1));
}

/// Two interfering commands proposed at once at two replicas of four, each replica's
/// PreAccepts reaching only its nearest peer first: with a fast quorum of two (the odd-N
/// formulas applied to N = 4) both committed on the fast path through disjoint pairs, and
/// neither depended on the other.
#[test]
fn with_four_replicas_interfering_commands_do_not_both_take_disjoint_fast_paths() {
    let mut net = net(4);
    submit(&mut net, 1, 11, 1, put("x", "a"));
    submit(&mut net, 3, 12, 1, put("x", "b"));
    net.run_for(Duration::from_secs(3));
    let order = writes_of(&net, 1, "x");
    assert_eq!(order.len(), 2, "both writes executed");
    for id in 2..=4 {
        assert_eq!(writes_of(&net, id, "x"), order, "replica {id} executed x's writes in replica 1's order");
    }
    // Each leader's fast quorum (3 of 4) meets the other's: whoever saw the other write
    // first changed the attributes, so at least one took the slow path.
    assert!(total(&net, "slow_path") >= 1, "a fast quorum of 3 of 4 overlaps the other leader's");
}

#[test]
fn non_conflicting_commands_commit_on_the_fast_path_at_any_replica() {
    let mut net = net(3);
    for (i, at) in [1, 2, 3].into_iter().enumerate() {
        net.request(at, 10 + i as u64, 1, put(&format!("k{at}"), "v"));
    }
    net.run_for(Duration::from_millis(100));
    for i in 0..3 {
        assert_eq!(net.reply_for(10 + i, 1), Some(&DONE));
    }
    assert_eq!(total(&net, "fast_path"), 3);
    assert_eq!(total(&net, "slow_path"), 0);
    net.request(2, 20, 1, get("k1"));
    net.run_for(Duration::from_millis(100));
    assert_eq!(net.reply_for(20, 1), Some(&value("v")));
    for id in 1..=3 {
        assert_eq!(counter(&net, id, "commands_executed"), 4, "n{id}");
    }
    net.assert_agreement();
}

#[test]
fn concurrent_conflicting_commands_take_the_slow_path_and_run_in_one_order_everywhere() {
    let mut net = net(5);
    for round in 0..20u64 {
        for at in 1..=5u32 {
            submit(&mut net, at, at as u64 * 100, round + 1, put("hot", &format!("{at}.{round}")));
        }
        net.deliver_all();
    }
    net.run_for(Duration::from_secs(1));
    assert!(total(&net, "slow_path") > 0, "conflicts at 5 replicas need the slow path");
    assert!(total(&net, "sccs_multi") > 0, "concurrent conflicting commands form dependency cycles");
    let order = writes_of(&net, 1, "hot");
    assert_eq!(order.len(), 100);
    for id in 2..=5 {
        assert_eq!(writes_of(&net, id, "hot"), order, "n{id} wrote 'hot' in another order");
    }
    let digests: Vec<u64> = net.nodes.iter().map(|n| n.sm.digest()).collect();
    assert!(digests.windows(2).all(|w| w[0] == w[1]), "states differ: {digests:?}");
    net.assert_agreement();
}

#[test]
fn a_command_leader_that_crashes_before_its_commit_is_recovered_by_explicit_prepare() {
    let mut net = net(3);
    // Node 1's commit never leaves it; then it crashes. Its fast-quorum peer (node 2) holds
    // the pre-accepted tuple; Explicit Prepare (line 32) must finish it with those attributes.
    net.drop = Box::new(|from, _, msg| from == 1 && matches!(decode::<Msg>(msg), Ok(Msg::Commit { .. })));
    net.request(1, 7, 1, put("a", "1"));
    assert_eq!(net.reply_for(7, 1), Some(&DONE), "committed on the fast path and executed at node 1");
    net.crash(1);
    net.drop = Box::new(|_, _, _| false);
    net.run_for(Duration::from_secs(3));
    assert!(total(&net, "recoveries") >= 1);
    net.request(3, 8, 1, get("a"));
    net.run_for(Duration::from_millis(200));
    assert_eq!(net.reply_for(8, 1), Some(&value("1")), "the fast-path commit survived its leader");
    net.assert_agreement();
}

#[test]
fn an_instance_nobody_else_saw_is_finished_as_a_noop_and_its_request_proposed_again() {
    let mut net = net(3);
    // Node 1's PreAccept for its first instance is lost; node 1 is cut off long enough for
    // the others to take the instance over (they learn it exists from node 1's heartbeats).
    net.drop = Box::new(|from, _, msg| from == 1 && matches!(decode::<Msg>(msg), Ok(Msg::PreAccept(_))));
    net.request(1, 7, 1, put("a", "1"));
    net.drop =
        Box::new(|from, to, msg| (from == 1 || to == 1) && !matches!(decode::<Msg>(msg), Ok(Msg::Heartbeat { .. })));
    net.run_for(Duration::from_secs(3));
    assert!(total(&net, "noops") >= 1, "the unseen instance became a no-op");
    net.drop = Box::new(|_, _, _| false);
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.reply_for(7, 1), Some(&DONE), "the displaced request was proposed again");
    assert!(counter(&net, 1, "reproposed") >= 1);
    net.request(2, 8, 1, get("a"));
    net.run_for(Duration::from_millis(200));
    assert_eq!(net.reply_for(8, 1), Some(&value("1")));
    net.assert_agreement();
}

#[test]
fn a_replica_restarts_from_its_log_and_re_executes_in_the_same_order() {
    let mut net = net(3);
    for seq in 1..=10u64 {
        for at in 1..=3u32 {
            submit(&mut net, at, at as u64, seq, put(&format!("k{}", seq % 2), &format!("{at}.{seq}")));
        }
        net.deliver_all();
    }
    net.run_for(Duration::from_millis(500));
    let before = writes_of(&net, 2, "k0");
    net.crash(2);
    net.restart(2);
    net.run_for(Duration::from_millis(500));
    assert_eq!(writes_of(&net, 2, "k0"), before, "re-execution from the log keeps the order");
    assert_eq!(counter(&net, 2, "commands_executed"), 30);
    assert_eq!(net.node(2).sm.digest(), net.node(1).sm.digest());
    // And it keeps serving as a command leader with fresh instance numbers.
    net.request(2, 9, 1, put("k0", "after"));
    net.run_for(Duration::from_millis(200));
    assert_eq!(net.reply_for(9, 1), Some(&DONE));
    net.request(3, 10, 1, get("k0"));
    net.run_for(Duration::from_millis(200));
    assert_eq!(net.reply_for(10, 1), Some(&value("after")));
    net.assert_agreement();
}

#[test]
fn a_replica_that_missed_commits_catches_up_from_heartbeats() {
    let mut net = net(3);
    net.cut(&[(1, 3), (2, 3)]);
    for seq in 1..=5u64 {
        net.request(1, 7, seq, put("a", &seq.to_string()));
    }
    net.run_for(Duration::from_millis(200));
    assert_eq!(counter(&net, 3, "commands_executed"), 0);
    net.drop = Box::new(|_, _, _| false);
    net.run_for(Duration::from_secs(2));
    assert_eq!(counter(&net, 3, "commands_executed"), 5);
    assert_eq!(net.node(3).sm.digest(), net.node(1).sm.digest());
}

#[test]
fn malformed_attributes_are_ignored() {
    let mut net = net(3);
    let bad = Msg::PreAccept(msg::Proposal {
        ballot: Ballot::new(0, 2),
        inst: InstId { space: 2, index: 1 },
        cmds: vec![],
        attrs: Attrs { seq: 1, deps: vec![0; 9] },
    });
    net.event(1, Event::Message { from: 2, sent_at: Time::ZERO, msg: encode(&bad) });
    assert!(net.queue.is_empty(), "no answer to a PreAccept with the wrong number of deps");
    let far = Msg::Prepare { ballot: Ballot::new(1, 2), inst: InstId { space: 3, index: u64::MAX } };
    net.event(1, Event::Message { from: 2, sent_at: Time::ZERO, msg: encode(&far) });
    assert!(net.queue.is_empty(), "an instance far past the window is ignored");
}

#[test]
fn a_replica_restarted_from_a_snapshot_still_answers_for_what_a_peer_missed() {
    let params = ProtocolParams { snapshot_every: 5, ..ProtocolParams::default() };
    let mut net = Net::with_params(3, build, params);
    net.run_for(Duration::from_millis(300));
    net.cut(&[(1, 3), (2, 3)]);
    for seq in 1..=40u64 {
        net.request(1, 7, seq, put("a", &seq.to_string()));
    }
    net.run_for(Duration::from_millis(200));
    assert!(counter(&net, 1, "snapshots") >= 2);
    assert!(
        matches!(decode::<Record>(&net.node(1).durable[0]), Ok(Record::Snapshot { .. })),
        "the log was compacted to a snapshot"
    );
    // Node 1 restarts from its compacted log: same state, without re-running what the
    // snapshot covers.
    net.crash(1);
    net.restart(1);
    net.run_for(Duration::from_millis(200));
    assert!(counter(&net, 1, "commands_executed") < 40);
    assert_eq!(net.node(1).sm.digest(), net.node(2).sm.digest());
    // Node 2 goes down; node 3, which missed everything, must get every commit from node 1.
    net.crash(2);
    net.drop = Box::new(|_, _, _| false);
    net.run_for(Duration::from_secs(3));
    assert_eq!(net.node(3).sm.digest(), net.node(1).sm.digest());
    net.request(3, 8, 1, get("a"));
    net.run_for(Duration::from_millis(300));
    assert_eq!(net.reply_for(8, 1), Some(&value("40")));
}

#[test]
fn thrifty_fast_quorums_avoid_the_slowest_and_the_silent_peers_section_7_3() {
    let setup = Setup { id: 1, members: vec![1, 2, 3, 4, 5], params: ProtocolParams::default() };
    let mut e = Epaxos::new(&setup, Variant::default()).unwrap();
    let now = Time::from_millis(10_000);
    for (peer, rtt_ms) in [(2, 9), (3, 1), (4, 5), (5, 2)] {
        e.rtt.insert(peer, Duration::from_millis(rtt_ms));
        e.heard.insert(peer, now);
    }
    // The optimized fast quorum for 5 replicas is 3: the leader and the two fastest peers.
    assert_eq!(e.fast_peers(now), vec![3, 5], "the slower peers (4, 2) are left out");
    // Peer 3 falls silent for more than three heartbeats: it is ranked last.
    e.heard.insert(3, Time::from_millis(10_000 - 4 * e.params.heartbeat_ms));
    assert_eq!(e.fast_peers(now), vec![5, 4]);
}

/// `reply=commit`: a put is answered when its instance commits at the command leader, even
/// while its execution waits for an interfering instance that is not committed yet; a read
/// still waits for execution, and sees the put.
#[test]
fn with_reply_at_commit_a_put_is_answered_before_it_can_execute() {
    let mut params = ProtocolParams::default();
    params.set("reply=commit").unwrap();
    let mut net = Net::with_params(3, build, params);
    net.run_for(Duration::from_millis(300));
    // Node 2 never hears back about its put on k: instance 2.1 is pre-accepted at node 2 and
    // its fast-quorum peer, committed nowhere. Then node 2 crashes.
    net.drop = Box::new(|_, to, _| to == 2);
    submit(&mut net, 2, 7, 1, put("k", "x"));
    net.deliver_all();
    net.crash(2);
    net.drop = Box::new(|_, _, _| false);
    // Node 1's put on k depends on 2.1 (node 1 or node 3 knows it): it commits but cannot
    // execute.
    submit(&mut net, 1, 8, 1, put("k", "y"));
    // (Its thrifty PreAccept may have gone to the crashed node: the fallback takes retry_ms.)
    let t0 = net.now;
    while net.reply_for(8, 1).is_none() && net.now.since(t0) < Duration::from_secs(1) {
        net.tick();
    }
    assert_eq!(net.reply_for(8, 1), Some(&DONE), "answered at commit");
    assert_eq!(counter(&net, 1, "commit_replies"), 1);
    assert_eq!(counter(&net, 1, "commands_executed"), 0, "execution waits for 2.1");
    // Explicit Prepare finishes 2.1 (node 1 saw its command); then both run, x before y.
    net.run_for(Duration::from_secs(3));
    net.request(3, 9, 1, get("k"));
    net.run_for(Duration::from_millis(200));
    assert_eq!(net.reply_for(9, 1), Some(&value("y")));
    assert_eq!(net.replies.iter().filter(|r| r.client == 8).count(), 1, "answered once, not again at execution");
    net.assert_agreement();
}

// --- Optimized EPaxos: TryPreAccept recovery (§4.4) -------------------------------------------

fn five(id: NodeId) -> Epaxos {
    let setup = Setup { id, members: vec![1, 2, 3, 4, 5], params: ProtocolParams::default() };
    Epaxos::new(&setup, Variant::default()).unwrap()
}

fn cmd(client: u64, key: &str) -> Command {
    Command { client, seq: 1, acked_below: 1, now_ms: 0, op: put(key, "v") }
}

/// Put instance `id` into `e`'s log as given (and into its conflict map, as a vote would).
fn place(e: &mut Epaxos, id: InstId, phase: Phase, cmds: Vec<Command>, seq: u64, deps: [u64; 5]) {
    let ballot = Epaxos::default_ballot(id.space);
    e.vote(id, ballot, phase, cmds, Attrs { seq, deps: deps.to_vec() });
    if phase == Phase::Committed {
        let p = e.pos_of(id.space).unwrap();
        e.advance_committed(p);
    }
}

fn tpa(e: &mut Epaxos, id: InstId, cmds: &[Command], seq: u64, deps: [u64; 5]) -> TpaOutcome {
    let mut rng = synod_core::rng_from_seed(1);
    let mut actions = Vec::new();
    let mut ctx = Ctx::new(e.id, Time::from_millis(1), &mut rng, &mut actions);
    let ballot = Ballot::new(1, e.id);
    e.try_pre_accept_here(&mut ctx, id, ballot, cmds, &Attrs { seq, deps: deps.to_vec() })
}

/// The conflict test a replica runs on a TryPreAccept (§4.4), case by case: γ = instance 1.1
/// (a put on "a", seq 5, deps nothing but 4.1) asked at replica 4.
#[test]
fn try_pre_accept_accepts_only_what_no_known_command_contradicts() {
    let gamma = InstId { space: 1, index: 1 };
    let g = vec![cmd(0, "a")];
    let deps = [0, 0, 0, 1, 0];
    // Nothing known: pre-accepted, at the default ballot, under the recovery's promise.
    let mut e = five(4);
    assert_eq!(tpa(&mut e, gamma, &g, 5, deps), TpaOutcome::Ok);
    let i = e.inst(gamma).unwrap();
    assert_eq!((i.phase, i.vballot, i.ballot), (Phase::PreAccepted, Epaxos::default_ballot(1), Ballot::new(1, 4)));
    // Asked again: still Ok (a retransmission).
    assert_eq!(tpa(&mut e, gamma, &g, 5, deps), TpaOutcome::Ok);

    // A committed put on "a" not in γ's deps that does not depend on γ: γ was not committed
    // on the fast path (it would have to be in one of the two's deps).
    let mut e = five(4);
    place(&mut e, InstId { space: 2, index: 1 }, Phase::Committed, vec![cmd(0, "a")], 1, [0; 5]);
    assert_eq!(tpa(&mut e, gamma, &g, 5, deps), TpaOutcome::NotFast);
    assert_eq!(e.inst(gamma).unwrap().phase, Phase::None, "not pre-accepted");
    // The same, uncommitted: its deps may still grow to include γ; defer on it.
    let mut e = five(4);
    place(&mut e, InstId { space: 2, index: 1 }, Phase::PreAccepted, vec![cmd(0, "a")], 1, [0; 5]);
    assert_eq!(tpa(&mut e, gamma, &g, 5, deps), TpaOutcome::Defer { on: InstId { space: 2, index: 1 } });
    // ...but not if it depends on γ, nor if it touches another key.
    let mut e = five(4);
    place(&mut e, InstId { space: 2, index: 1 }, Phase::Committed, vec![cmd(0, "a")], 6, [1, 0, 0, 0, 0]);
    place(&mut e, InstId { space: 3, index: 1 }, Phase::Committed, vec![cmd(0, "b")], 9, [0; 5]);
    assert_eq!(tpa(&mut e, gamma, &g, 5, deps), TpaOutcome::Ok);
    // In γ's deps (4.1) with a smaller seq: fine; with a seq at least γ's, committed: not fast.
    let mut e = five(4);
    place(&mut e, InstId { space: 4, index: 1 }, Phase::Committed, vec![cmd(0, "a")], 4, [0; 5]);
    assert_eq!(tpa(&mut e, gamma, &g, 5, deps), TpaOutcome::Ok);
    let mut e = five(4);
    place(&mut e, InstId { space: 4, index: 1 }, Phase::Committed, vec![cmd(0, "a")], 5, [0; 5]);
    assert_eq!(tpa(&mut e, gamma, &g, 5, deps), TpaOutcome::NotFast);
    // Same session, other key: related (all commands of a session interfere).
    let mut e = five(4);
    place(&mut e, InstId { space: 2, index: 1 }, Phase::Committed, vec![cmd(9, "z")], 1, [0; 5]);
    assert_eq!(tpa(&mut e, gamma, &[cmd(9, "a")], 5, deps), TpaOutcome::NotFast);

    // This replica pre-accepted other attributes in the original round: not fast.
    let mut e = five(4);
    place(&mut e, gamma, Phase::PreAccepted, g.clone(), 6, deps);
    assert_eq!(tpa(&mut e, gamma, &g, 5, deps), TpaOutcome::NotFast);
    // It voted at a higher ballot (an earlier recovery): ask again later.
    let mut e = five(4);
    e.vote(gamma, Ballot::new(1, 3), Phase::PreAccepted, g.clone(), Attrs { seq: 5, deps: deps.to_vec() });
    assert_eq!(tpa(&mut e, gamma, &g, 5, deps), TpaOutcome::Retry);
    // The command leader itself, alive, did not commit it: not fast.
    let mut e = five(1);
    place(&mut e, gamma, Phase::PreAccepted, g.clone(), 5, deps);
    assert_eq!(tpa(&mut e, gamma, &g, 5, deps), TpaOutcome::NotFast);

    // Forgotten instances count too: one related and above γ's deps is a committed conflict.
    let mut e = five(4);
    e.forgotten.record(1, 3, &[cmd(0, "a")], 2);
    assert_eq!(tpa(&mut e, gamma, &g, 5, deps), TpaOutcome::NotFast);
    let mut e = five(4);
    e.forgotten.record(1, 3, &[cmd(0, "b")], 2);
    assert_eq!(tpa(&mut e, gamma, &g, 5, deps), TpaOutcome::Ok, "unrelated");
    // Forgotten before a restart from a snapshot (keys unknown): cannot tell.
    let mut e = five(4);
    e.restored_unknown = vec![0, 7, 0, 0, 0];
    assert_eq!(tpa(&mut e, gamma, &g, 5, deps), TpaOutcome::Retry);
}

/// When recovery runs TryPreAccept, and what must have been in the fast quorum.
#[test]
fn try_pre_accept_runs_only_when_the_fast_path_may_have_been_taken() {
    let gamma = InstId { space: 1, index: 1 };
    let e = five(3);
    let g = vec![cmd(0, "a")];
    let attrs = Attrs { seq: 1, deps: vec![0; 5] };
    let held = Some(Reported {
        phase: Phase::PreAccepted,
        vballot: Epaxos::default_ballot(1),
        cmds: g.clone(),
        attrs: attrs.clone(),
    });
    // 2 reports the tuple, 3 and 4 know nothing; 1 (leader) and 5 are silent: the fast
    // quorum could only have been {1, 2, 5}.
    let replies: BTreeMap<NodeId, Option<Reported>> = [(2, held.clone()), (3, None), (4, None)].into();
    let t = e.plan_try_pre_accept(gamma, &replies, g.clone(), attrs.clone()).expect("TryPreAccept");
    assert_eq!(t.must, BTreeSet::from([1, 2, 5]));
    assert_eq!(t.targets, BTreeSet::from([1, 3, 4, 5]));
    assert_eq!(t.holders, 2, "the command leader and replica 2");
    // Four answered without the leader: at most {1, 2} could hold it, fewer than 3.
    let replies: BTreeMap<NodeId, Option<Reported>> = [(2, held.clone()), (3, None), (4, None), (5, None)].into();
    assert!(e.plan_try_pre_accept(gamma, &replies, g.clone(), attrs.clone()).is_none());
    // The command leader answered: it did not commit, and now cannot.
    let replies: BTreeMap<NodeId, Option<Reported>> = [(1, held.clone()), (2, held.clone()), (3, None)].into();
    assert!(e.plan_try_pre_accept(gamma, &replies, g, attrs).is_none());
}

/// A tuple committed on the optimized fast path (3 of 5) whose leader and third fast-quorum
/// member fail before anyone else learns the commit: the survivors see it at one replica only.
/// A conflicting put at replica 4, pre-accepted at 4 and 5 without it, defers the recovery
/// until it commits (depending on the tuple); then TryPreAccept commits the tuple as it was,
/// and every replica orders the two puts as the failed leader did. Returns whether every
/// survivor committed the tuple with the attributes the failed leader committed, and ordered
/// the fast-path put first.
fn fast_path_commit_seen_by_one_survivor(build: crate::testnet::Build) -> bool {
    let mut net = Net::new(5, build);
    net.run_for(Duration::from_millis(300));
    net.drop = Box::new(|from, _, msg| from == 1 && matches!(decode::<Msg>(msg), Ok(Msg::Commit { .. })));
    net.request(1, 7, 1, put("a", "1"));
    assert_eq!(net.reply_for(7, 1), Some(&DONE), "committed on the fast path and executed at node 1");
    assert_eq!(counter(&net, 1, "fast_path"), 1);
    let first = writes_of(&net, 1, "a");
    net.crash(1);
    net.crash(3); // node 1's fast quorum was {1, 2, 3} (ring order among equal RTTs)
    net.cut(&[(4, 2)]);
    submit(&mut net, 4, 8, 1, put("a", "2"));
    net.run_for(Duration::from_secs(3));
    net.drop = Box::new(|_, _, _| false);
    net.run_for(Duration::from_secs(4));
    assert_eq!(net.reply_for(8, 1), Some(&DONE));
    net.assert_agreement();
    // What each replica committed for 1.1 (from its durable log).
    let committed = |id: NodeId| -> Option<Attrs> {
        net.node(id).durable.iter().rev().find_map(|r| match decode::<Record>(r) {
            Ok(Record::Inst { inst: InstId { space: 1, index: 1 }, phase: Phase::Committed, attrs, .. }) => Some(attrs),
            _ => None,
        })
    };
    let fast = committed(1).expect("node 1 committed 1.1");
    let same_attrs = [2, 4, 5].iter().all(|&id| committed(id).as_ref() == Some(&fast));
    let same_order = [2, 4, 5].iter().all(|&id| {
        let order = writes_of(&net, id, "a");
        order.len() == 2 && order[0] == first[0]
    });
    same_attrs && same_order
}

#[test]
fn a_fast_path_commit_seen_by_one_survivor_is_recovered_by_try_pre_accept() {
    assert!(fast_path_commit_seen_by_one_survivor(build), "a survivor committed 1.1 differently");
}

/// The same with the basic recovery on the optimized quorum (mutant `epaxos-no-try-pre-accept`):
/// the survivors order the fast-path put again and commit it with other attributes than the
/// failed leader did (here the order happens to survive: the later put ends up after it).
#[test]
fn without_try_pre_accept_the_fast_path_order_is_lost() {
    fn skip(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
        Ok(Box::new(Epaxos::new(setup, Variant { skip_try_pre_accept: true, ..Variant::default() })?))
    }
    assert!(!fast_path_commit_seen_by_one_survivor(skip));
}

/// A replica that promises a recovering replica's ballot (or votes for a lead's message)
/// restarts its own wait before taking the instance over: in the wide area a recovery takes
/// longer than the takeover timeout, and replicas that took instances over from each other
/// kept every one of them unfinished (the 5-site, 100%-interference execution stall).
#[test]
fn a_replica_that_sees_a_recovery_in_progress_waits_before_taking_the_instance_over() {
    let mut e = five(4);
    let id = InstId { space: 1, index: 1 };
    let mut rng = synod_core::rng_from_seed(1);
    let mut actions = Vec::new();
    let t0 = Time::from_millis(1_000);
    e.saw(id, t0);
    e.takeover_at.insert(id, t0 + Duration::from_millis(300));
    let later = Time::from_millis(1_250);
    let mut ctx = Ctx::new(4, later, &mut rng, &mut actions);
    e.on_prepare(&mut ctx, 2, Ballot::new(1, 2), id);
    assert_eq!(e.unsettled.get(&id), Some(&later), "the wait restarts at the Prepare");
    assert!(!e.takeover_at.contains_key(&id), "the takeover time is drawn again from now");
    assert!(actions.iter().any(|a| matches!(a, synod_core::Action::Send { .. })), "and it answered");
}

/// Deliver at most `k` queued messages (the rest stay in flight).
fn deliver_some(net: &mut Net, k: usize) {
    for _ in 0..k {
        let Some((from, to, msg)) = net.queue.pop_front() else { return };
        net.event(to, Event::Message { from, sent_at: net.now, msg });
    }
}

#[test]
fn a_steady_stream_of_new_interfering_commands_does_not_starve_an_old_one_section_4_9() {
    // Replicas 1 and 2 propose a new put on the hot key at every step while earlier ones
    // are still in flight; replica 3 proposes one command in the middle. New commands keep
    // acquiring dependencies on each other (§4.9), but a command leader proposes nothing
    // new while `pipeline_window` of its own are unexecuted, so the chains stay finite and
    // the old command executes while the stream goes on.
    let mut net = net(3);
    let old_at = 20u64;
    let mut answered_at = None;
    for step in 1..=400u64 {
        submit(&mut net, 1, 100, step, put("hot", &format!("a{step}")));
        submit(&mut net, 2, 200, step, put("hot", &format!("b{step}")));
        if step == old_at {
            submit(&mut net, 3, 300, 1, put("hot", "old"));
        }
        deliver_some(&mut net, 12);
        if answered_at.is_none() && net.reply_for(300, 1).is_some() {
            answered_at = Some(step);
        }
    }
    let answered_at = answered_at.expect("the old command was executed while the stream went on");
    assert!(answered_at < old_at + 100, "answered at step {answered_at}, 100+ steps after it was proposed");
    let later = (answered_at + 1..=400).filter(|&s| net.reply_for(100, s).is_some()).count();
    assert!(later > 0, "the stream kept going after the old command ran");
    net.run_for(Duration::from_secs(1));
    assert_eq!(net.reply_for(300, 1), Some(&DONE));
    let order = writes_of(&net, 1, "hot");
    assert_eq!(order.len(), 801);
    for id in 2..=3 {
        assert_eq!(writes_of(&net, id, "hot"), order, "n{id} wrote 'hot' in another order");
    }
    net.assert_agreement();
}

#[test]
fn session_barriers_evict_the_same_sessions_on_every_replica() {
    let mut net = net_with(3, "barrier_every=4");
    // Nothing applied yet: every replica gets a partial-order state machine of 2 sessions.
    net.use_order(synod_core::session::Order::Partial);
    for n in &mut net.nodes {
        n.sm = synod_core::session::StateMachine::for_order(synod_core::session::Order::Partial).max_sessions(2);
    }
    // Nine sessions write their own keys at all three replicas concurrently, twice: no two
    // of their commands interfere, so replicas apply them in different orders. Each replica
    // proposes a barrier after four of its commands: after the first of the second round.
    for seq in 1..=2u64 {
        for c in 0..9u64 {
            let at = (c % 3) as NodeId + 1;
            let cmd = Command {
                client: 10 + c,
                seq,
                acked_below: seq,
                now_ms: 1_000 * seq + c,
                op: put(&format!("k{c}"), "v"),
            };
            net.event(
                at,
                Event::Request { client: ClientRef { node: at, conn: 10 + c }, cmd, meta: Default::default() },
            );
        }
        // Node 3 hears of the others' commits late in the first round (it fetches them),
        // so it runs its own commands first.
        if seq == 1 {
            net.drop = Box::new(|_, to, msg| to == 3 && matches!(decode::<Msg>(msg), Ok(Msg::Commit { .. })));
        }
        net.deliver_all();
        net.drop = Box::new(|_, _, _| false);
        net.run_for(Duration::from_millis(500));
    }
    assert!(total(&net, "barriers") >= 3, "barriers proposed: {}", total(&net, "barriers"));
    let keys = |id: NodeId| -> Vec<Pos> {
        net.node(id).applied.iter().filter(|(_, c)| c.client != 0).map(|(p, _)| *p).collect()
    };
    assert!(
        (2..=3).any(|id| keys(id) != keys(1)),
        "non-interfering commands ran in the same order everywhere: {:?}",
        keys(1)
    );
    let barriers = |id: NodeId| -> Vec<Pos> {
        net.node(id).applied.iter().filter(|(_, c)| synod_core::session::is_barrier(c)).map(|(p, _)| *p).collect()
    };
    assert_eq!(barriers(2), barriers(1));
    assert_eq!(barriers(3), barriers(1));
    // Same sessions, results and keys on every replica: every dedup decision agreed.
    let sm1 = &net.node(1).sm;
    assert!(sm1.session_count() < 9, "sessions were evicted: {}", sm1.session_count());
    for id in 2..=3 {
        assert!(net.node(id).sm == *sm1, "n{id}'s state machine differs from n1's");
    }
    // Some second requests came from evicted sessions: refused, not applied twice.
    assert!((0..9).all(|c| net.reply_for(10 + c, 2).is_some()), "every second request was answered");
    let stale = (0..9).filter(|c| net.reply_for(10 + c, 2) != Some(&DONE)).count();
    assert!(stale > 0, "no request found its session evicted");
    net.assert_agreement();
}

#[test]
fn with_batch_ms_requests_wait_for_the_timer_and_go_out_in_one_instance() {
    let mut net = net_with(3, "batch_ms=5");
    for c in 0..10u64 {
        submit(&mut net, 1, 10 + c, 1, put(&format!("k{c}"), "v"));
    }
    net.deliver_all();
    assert!(net.replies.is_empty(), "nothing is proposed before the timer fires");
    assert_eq!(net.node(1).p.status().ballot, "0", "no instance of node 1 yet");
    net.run_for(Duration::from_millis(20));
    for c in 0..10u64 {
        assert_eq!(net.reply_for(10 + c, 1), Some(&DONE));
    }
    assert_eq!(net.node(1).p.status().ballot, "1", "the ten requests shared one instance");
    assert_eq!(total(&net, "commands_executed"), 30);
    let mut bad = ProtocolParams::default();
    bad.set("batch_ms=soon").unwrap();
    assert!(Epaxos::new(&Setup { id: 1, members: vec![1, 2, 3], params: bad }, Variant::default()).is_err());
    net.assert_agreement();
}

/// A replica that falls behind with session barriers on (every command depends on the last
/// barrier, which depends on everything before it): replica 3 misses the commit of one early
/// instance of replica 1 while replicas 1 and 2 commit `rounds` commands each, then fetches
/// it. Returns replica 3's executor work and the instances it executed.
fn lagging_replica_with_barriers(rounds: u64) -> (u64, u64) {
    let mut net = net_with(3, "barrier_every=3");
    let held = InstId { space: 1, index: 1 };
    net.drop = Box::new(move |_, to, msg| {
        to == 3 && matches!(decode::<Msg>(msg), Ok(Msg::Commit { entries }) if entries.iter().any(|e| e.0 == held))
    });
    for r in 0..rounds {
        submit(&mut net, 1, 100 + r % 50, r / 50 + 1, put(&format!("a{}", r % 50), "v"));
        submit(&mut net, 2, 200 + r % 50, r / 50 + 1, put(&format!("b{}", r % 50), "v"));
        net.deliver_all();
    }
    let behind = (net.executed(3), net.executed(1));
    assert!(behind.0 * 10 < behind.1, "n3 waits for the instance it missed: {behind:?}");
    net.drop = Box::new(|_, _, _| false);
    net.run_for(Duration::from_secs(1));
    assert_eq!(net.executed(3), net.executed(1), "n3 caught up");
    assert_eq!(net.executed(1), 2 * rounds + total(&net, "barriers"));
    net.assert_agreement();
    let instances = net.node(3).p.status().commit_index;
    (counter(&net, 3, "exec_steps"), instances)
}

#[test]
fn executor_work_per_commit_stays_bounded_when_a_replica_lags_with_barriers() {
    let runs: Vec<(u64, u64)> = [150, 600].into_iter().map(lagging_replica_with_barriers).collect();
    for &(steps, instances) in &runs {
        eprintln!("{instances} instances: {steps} executor steps ({} per instance)", steps / instances);
    }
    for &(steps, instances) in &runs {
        assert!(steps <= 40 * instances, "{steps} executor steps for {instances} instances: not incremental");
    }
    // Four times the instances: about four times the work (a search from scratch per commit
    // grows with the square).
    let growth = runs[1].0 as f64 / runs[0].0 as f64;
    assert!(growth < 6.0, "work grew {growth:.1}x for 4x the instances");
}
