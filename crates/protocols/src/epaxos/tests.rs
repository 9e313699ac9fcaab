//! Scenario tests of EPaxos's paths on the deterministic test network.

use super::*;
use crate::testnet::{get, put, value, Net, DONE};
use synod_core::{ClientRef, Op, Pos};

fn net(n: u32) -> Net {
    let mut net = Net::new(n, build);
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
    assert_eq!(size(5, None), Ok(4), "N = 5 runs the basic 2F quorum by default");
    assert!(size(5, Some("optimized")).unwrap_err().contains("TryPreAccept"));
    assert_eq!(size(7, Some("basic")), Ok(6));
    assert!(size(3, Some("huge")).is_err());
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
    net.drop = Box::new(|from, _, msg| from == 1 && matches!(decode::<Msg>(msg), Ok(Msg::PreAccept { .. })));
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
    let bad = Msg::PreAccept {
        ballot: Ballot::new(0, 2),
        inst: InstId { space: 2, index: 1 },
        cmds: vec![],
        attrs: Attrs { seq: 1, deps: vec![0; 9] },
    };
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
    // Basic fast quorum for 5 replicas is 4: the leader and the three fastest peers.
    assert_eq!(e.fast_peers(now), vec![3, 5, 4], "the slowest peer (2) is left out");
    // Peer 3 falls silent for more than three heartbeats: it is ranked last.
    e.heard.insert(3, Time::from_millis(10_000 - 4 * e.params.heartbeat_ms));
    assert_eq!(e.fast_peers(now), vec![5, 4, 2]);
}
