//! Scenario tests of MultiPaxos on the in-test network (crate::testnet).

use super::*;
use crate::testnet::{get, put, value, Net, DONE};

fn net(n: u32) -> Net {
    Net::new(n, build)
}

fn is_accept(m: &[u8]) -> bool {
    matches!(decode::<Msg>(m), Ok(Msg::Accept { .. }))
}

fn elect(net: &mut Net) -> NodeId {
    net.run_for(Duration::from_secs(2));
    net.leader().expect("a leader within 2 s")
}

#[test]
fn elects_one_leader_and_replicates() {
    let mut net = net(3);
    let l = elect(&mut net);
    net.request(l, 7, 1, put("a", "1"));
    assert_eq!(net.reply_for(7, 1), Some(&DONE));
    net.request(l, 7, 2, get("a"));
    assert_eq!(net.reply_for(7, 2), Some(&value("1")));
    // Followers learn the commit through heartbeats and execute the same commands.
    net.run_for(Duration::from_millis(200));
    for n in &net.nodes {
        assert_eq!(n.applied.len(), net.node(l).applied.len());
        assert_eq!(n.sm.digest(), net.node(l).sm.digest());
    }
    // A follower redirects clients to the leader.
    let f = (1..=3).find(|i| *i != l).unwrap();
    net.request(f, 8, 1, get("a"));
    assert_eq!(net.reply_for(8, 1), Some(&ReplyBody::NotLeader { leader: Some(l) }));
}

#[test]
fn requests_of_one_turn_share_one_slot() {
    let mut net = net(3);
    let l = elect(&mut net);
    let next_slot = |net: &Net| net.node(l).p.status().extra["next_slot"].parse::<u64>().unwrap();
    let before = next_slot(&net);
    net.requests_in_one_turn(l, vec![(1, 1, put("a", "1")), (2, 1, put("b", "2")), (3, 1, get("a"))]);
    assert_eq!(next_slot(&net), before + 1, "three requests of one turn, one slot");
    assert_eq!(net.reply_for(1, 1), Some(&DONE));
    assert_eq!(net.reply_for(2, 1), Some(&DONE));
    assert_eq!(net.reply_for(3, 1), Some(&value("1")));
    // Requests of separate turns get a slot each.
    net.request(l, 1, 2, put("a", "3"));
    net.request(l, 2, 2, get("a"));
    assert_eq!(next_slot(&net), before + 3);
    assert_eq!(net.reply_for(2, 2), Some(&value("3")));
    net.run_for(Duration::from_millis(200));
    net.assert_agreement();
}

#[test]
fn single_node_cluster_serves_alone() {
    let mut net = net(1);
    assert_eq!(net.leader(), Some(1));
    net.request(1, 1, 1, put("x", "y"));
    net.request(1, 1, 2, get("x"));
    assert_eq!(net.reply_for(1, 2), Some(&value("y")));
}

#[test]
fn leader_crash_elects_new_leader_and_keeps_values() {
    let mut net = net(3);
    let l1 = elect(&mut net);
    for i in 1..=20 {
        net.request(l1, 1, i, put(&format!("k{i}"), &format!("v{i}")));
        assert_eq!(net.reply_for(1, i), Some(&DONE));
    }
    net.crash(l1);
    let (l2, took) = net.await_leader(Duration::from_secs(5)).expect("new leader");
    assert_ne!(l1, l2);
    // Within two election timeouts of the crash (timeouts are 300-600 ms).
    assert!(took <= Duration::from_millis(1200), "took {took:?}");
    for i in 1..=20 {
        net.request(l2, 2, i, get(&format!("k{i}")));
        assert_eq!(net.reply_for(2, i), Some(&value(&format!("v{i}"))), "k{i}");
    }
    // The old leader comes back from its disk and catches up.
    net.restart(l1);
    net.run_for(Duration::from_secs(1));
    let want = net.node(l2).sm.digest();
    assert_eq!(net.node(l1).sm.digest(), want);
    assert_eq!(net.executed(l1), net.executed(l2));
    assert_eq!(net.leader(), Some(l2), "a restarted replica does not disturb a healthy leader");
}

#[test]
fn lost_accepts_are_resent_and_holes_filled_by_catchup() {
    let mut net = net(3);
    let l = elect(&mut net);
    let f = (1..=3).find(|i| *i != l).unwrap();
    // Follower f misses every Accept for a while.
    net.drop = Box::new(move |_, to, m| to == f && is_accept(m));
    for i in 1..=10 {
        net.request(l, 1, i, put("k", &format!("{i}")));
        assert_eq!(net.reply_for(1, i), Some(&DONE));
    }
    assert_eq!(net.executed(f), 0);
    net.drop = Box::new(|_, _, _| false);
    net.run_for(Duration::from_millis(500));
    assert_eq!(net.executed(f), net.executed(l));
    assert_eq!(net.node(f).sm.digest(), net.node(l).sm.digest());
}

#[test]
fn whole_cluster_restart_recovers_acknowledged_writes() {
    let mut net = net(3);
    let l = elect(&mut net);
    for i in 1..=30 {
        net.request(l, 1, i, put(&format!("k{}", i % 7), &format!("{i}")));
        assert_eq!(net.reply_for(1, i), Some(&DONE));
    }
    let want = net.node(l).sm.digest();
    for id in 1..=3 {
        net.crash(id);
    }
    net.queue.clear();
    for id in 1..=3 {
        net.restart(id);
    }
    let l2 = elect(&mut net);
    // Reading through the new leader forces every earlier slot to be re-chosen first.
    net.request(l2, 2, 1, get("k2"));
    assert_eq!(net.reply_for(2, 1), Some(&value("30")));
    net.run_for(Duration::from_millis(300));
    for n in &net.nodes {
        // Every replica rebuilt the pre-crash state (the read changed nothing).
        assert_eq!(n.sm.digest(), want);
    }
}

#[test]
fn retried_put_after_leader_change_is_applied_once() {
    let mut net = net(3);
    let l1 = elect(&mut net);
    // The put reaches a quorum but the reply is lost with the leader.
    net.request(l1, 5, 1, put("c", "1"));
    net.request(l1, 6, 1, put("c", "2"));
    net.crash(l1);
    net.run_for(Duration::from_secs(2));
    let l2 = net.leader().unwrap();
    // Client 5 retries its (5,1) put: must not overwrite client 6's later write.
    net.request(l2, 5, 1, put("c", "1"));
    assert_eq!(net.reply_for(5, 1), Some(&DONE));
    net.request(l2, 9, 1, get("c"));
    assert_eq!(net.reply_for(9, 1), Some(&value("2")));
}

#[test]
fn same_position_same_command_everywhere() {
    let mut net = net(5);
    let mut leader = elect(&mut net);
    let mut seq = 0;
    for round in 0..4 {
        for _ in 0..5 {
            seq += 1;
            net.request(leader, 1, seq, put("k", &format!("{seq}")));
        }
        // Replace the leader a few times.
        net.crash(leader);
        net.run_for(Duration::from_secs(2));
        net.restart(leader);
        leader = net.leader().unwrap_or_else(|| panic!("leader after round {round}"));
    }
    net.run_for(Duration::from_secs(1));
    net.assert_agreement();
    let d = net.nodes[0].sm.digest();
    assert!(net.nodes.iter().all(|n| n.sm.digest() == d));
}

#[test]
fn garbage_messages_and_unknown_senders_are_ignored() {
    let mut net = net(3);
    let l = elect(&mut net);
    net.event(l, Event::Message { from: 2, sent_at: Time::ZERO, msg: Bytes::from_static(&[0xff, 0xff, 0x01]) });
    let bogus = encode(&Msg::Prepare { ballot: Ballot::new(1000, 99), from_slot: 1 });
    net.event(l, Event::Message { from: 99, sent_at: Time::ZERO, msg: bogus });
    assert_eq!(net.leader(), Some(l));
    assert!(net.nodes[0].p.describe_message(&[1, 2, 3]).contains("undecodable"));
}

#[test]
fn bad_options_and_membership_are_refused() {
    // A replica outside the members starts as a learner joining the cluster (membership
    // changes), an empty configuration is refused.
    let mut s = Setup { id: 4, members: vec![1, 2, 3], params: ProtocolParams::default() };
    let learner = MultiPaxos::new(&s, Variant::default()).unwrap();
    assert_eq!(learner.status().extra["members"], "1,2,3");
    assert!(!learner.is_member());
    s.members.clear();
    assert!(MultiPaxos::new(&s, Variant::default()).err().unwrap().contains("members is empty"));
    s.members = vec![1, 2, 3];
    s.id = 1;
    s.params.options.insert("bogus".into(), "1".into());
    assert!(MultiPaxos::new(&s, Variant::default()).err().unwrap().contains("bogus"));
}

#[test]
fn unreadable_durable_state_makes_replica_passive() {
    let mut net = net(3);
    net.nodes[0].durable.push(Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0xff]));
    net.restart(1);
    assert!(net.nodes[0].p.status().extra.contains_key("error"));
    net.request(1, 1, 1, get("a"));
    assert!(matches!(net.reply_for(1, 1), Some(ReplyBody::Rejected { .. })));
}

#[test]
fn a_far_behind_candidate_gets_behind_instead_of_the_backlog_and_catches_up() {
    // A replica back from a long absence campaigns at once. Its Prepare asks for every slot
    // after its committed prefix; a Promise would carry all of them (in a real run, 161 MB
    // that the transport refused on every retry while the leader stalled building them).
    // The acceptors promise (plain Paxos: the old leader is deposed as usual) but answer
    // `Behind`; the candidate gives up, catches up in chunks, and a leader serves again.
    let params = ProtocolParams { catchup_chunk: 8, ..ProtocolParams::default() };
    let mut net = Net::with_params(3, build, params);
    let l = elect(&mut net);
    let f = (1..=3).find(|i| *i != l).unwrap();
    net.crash(f);
    for i in 1..=60 {
        net.request(l, 1, i, put(&format!("k{i}"), &format!("v{i}")));
        assert_eq!(net.reply_for(1, i), Some(&DONE));
    }
    let biggest_promise = std::rc::Rc::new(std::cell::Cell::new(0usize));
    let behind_answers = std::rc::Rc::new(std::cell::Cell::new(0usize));
    let (bp, ba) = (biggest_promise.clone(), behind_answers.clone());
    net.drop = Box::new(move |_, to, m| {
        match decode::<Msg>(m) {
            Ok(Msg::Promise { accepted, .. }) if to == f => bp.set(bp.get().max(accepted.len())),
            Ok(Msg::Behind { .. }) if to == f => ba.set(ba.get() + 1),
            _ => {}
        }
        false
    });
    net.restart(f);
    net.event(f, Event::Timer(TIMER_ELECTION));
    net.deliver_all();
    assert_eq!(behind_answers.get(), 2, "both acceptors answer the far-behind candidate with Behind");
    assert_eq!(biggest_promise.get(), 0, "no promise carrying the backlog");
    assert_ne!(net.node(f).p.status().role, Role::Leader);
    let (leader, _) = net.await_leader(Duration::from_secs(3)).expect("a leader again");
    net.request(leader, 2, 1, put("after", "x"));
    assert_eq!(net.reply_for(2, 1), Some(&DONE));
    net.run_for(Duration::from_millis(500));
    assert_eq!(net.executed(f), net.executed(leader), "the candidate caught up");
    assert_eq!(net.node(f).sm.digest(), net.node(leader).sm.digest());
    assert!(biggest_promise.get() <= 8 + 64, "promises stay within a chunk and a window");
    net.assert_agreement();
}

#[test]
fn followers_of_a_stale_leader_send_work_to_it_not_to_an_abandoned_candidate() {
    // 5 nodes, leader L. Three followers promise a higher ballot of candidate C, whose
    // campaign goes nowhere (C never hears the promises). L keeps heartbeating with its old
    // ballot: the baseline failure detector keeps the followers quiet (no election while
    // idle), so they must send work to L — redirected clients, a layer's messages such as
    // IDEM's REQUIREs — not to C, which never leads: otherwise nothing reaches L, it never
    // learns of the higher ballot, and the cluster stalls (simulator: idem, 5 replicas,
    // seed 1000907).
    let mut net = net(5);
    let l = elect(&mut net);
    let others: Vec<NodeId> = (1..=5).filter(|&i| i != l).collect();
    let (c, promisers) = (others[0], &others[1..]);
    net.drop = Box::new(|_, _, m| matches!(decode::<Msg>(m), Ok(Msg::Promise { .. })));
    let ballot = Ballot::new(1000, c);
    let prepare = encode(&Msg::Prepare { ballot, from_slot: 1 });
    for &p in promisers {
        net.event(p, Event::Message { from: c, sent_at: net.now, msg: prepare.clone() });
        assert_eq!(net.node(p).p.status().leader, Some(c), "n{p} promised the candidate");
    }
    net.drop = Box::new(|_, _, _| false);
    net.run_for(Duration::from_millis(300));
    for &p in promisers {
        let s = net.node(p).p.status();
        assert_eq!(s.ballot, ballot.to_string(), "n{p} keeps its promise");
        assert_eq!(s.leader, Some(l), "n{p} follows the live (stale) leader");
    }
    assert_eq!(net.leader(), Some(l), "idle: no election (the baseline's detector)");
    // A client at a promiser is sent to L; L's Accept is refused by the promisers, L steps
    // down and the cluster elects a leader above the candidate's ballot, which serves.
    net.request(promisers[0], 9, 1, put("k", "v"));
    assert_eq!(net.reply_for(9, 1), Some(&ReplyBody::NotLeader { leader: Some(l) }));
    net.request(l, 9, 1, put("k", "v"));
    net.run_for(Duration::from_secs(3));
    let (l2, _) = net.await_leader(Duration::from_secs(5)).expect("a leader after the stale one steps down");
    net.request(l2, 9, 2, put("k", "w"));
    assert_eq!(net.reply_for(9, 2), Some(&DONE));
}
