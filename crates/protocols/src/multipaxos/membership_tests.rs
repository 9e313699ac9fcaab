//! Single-server membership changes through the log (docs/design.md, "Membership"), for
//! MultiPaxos and HoliPaxos on the in-test network.

use crate::testnet::{get, put, value, Build, Net, DONE};
use std::time::Duration;
use synod_core::{MemberChange, NodeId, OpResult, ProtocolParams, ReplyBody, Role};

fn params(opts: &[(&str, &str)]) -> ProtocolParams {
    let mut p = ProtocolParams::default();
    for (k, v) in opts {
        p.options.insert(k.to_string(), v.to_string());
    }
    p
}

fn elect(net: &mut Net) -> NodeId {
    net.run_for(Duration::from_secs(2));
    net.leader().expect("a leader within 2 s")
}

fn extra(net: &Net, id: NodeId, key: &str) -> String {
    net.node(id).p.status().extra.get(key).cloned().unwrap_or_default()
}

fn write_many(net: &mut Net, leader: NodeId, client: u64, from: u64, n: u64) {
    for i in from..from + n {
        net.request(leader, client, i, put(&format!("k{}", i % 7), &format!("{client}.{i}")));
        assert_eq!(net.reply_for(client, i), Some(&DONE), "write {i} via n{leader}");
    }
}

/// Ask the leader for a change and run until it answers; returns the answer.
fn change(net: &mut Net, req: u64, change: MemberChange) -> ReplyBody {
    let l = net.leader().expect("a leader");
    net.reconfigure(l, req, change);
    for _ in 0..200 {
        if let Some(r) = net.replies.iter().rev().find(|r| r.client == 0 && r.seq == req) {
            return r.body.clone();
        }
        net.tick();
    }
    panic!("no answer to membership request {req}");
}

fn add(id: NodeId) -> MemberChange {
    MemberChange::Add { id, addr: format!("127.0.0.1:{}", 7000 + id) }
}

fn same_state(net: &Net, ids: &[NodeId]) {
    let d = net.node(ids[0]).sm.digest();
    for id in ids {
        assert_eq!(net.node(*id).sm.digest(), d, "n{id} differs from n{}", ids[0]);
    }
    net.assert_agreement();
}

const OK: ReplyBody = ReplyBody::Done(OpResult::Done);

/// HoliPaxos with GLE trim: a 4th node joins, fetches an on-demand snapshot (the log is
/// trimmed) and catches up; the quorum becomes 3 of 4; removing node 3 makes the quorum 2
/// of 3 again and node 3 no longer freezes GLE.
#[test]
fn holipaxos_add_then_remove_changes_quorum_and_gle() {
    let mut net = Net::with_params(3, crate::holipaxos::build, params(&[]));
    let l = elect(&mut net);
    write_many(&mut net, l, 1, 1, 30);
    net.run_for(Duration::from_millis(500));
    assert!(net.node(l).p.status().extra["log_first"].parse::<u64>().unwrap() > 1, "log trimmed before the add");

    let n4 = net.add_node(l);
    assert_eq!(n4, 4);
    net.run_for(Duration::from_millis(300));
    assert_ne!(net.node(4).p.status().role, Role::Leader, "a learner never campaigns");
    assert_eq!(change(&mut net, 1, add(4)), OK);
    net.run_for(Duration::from_secs(1));
    for id in 1..=4 {
        assert_eq!(extra(&net, id, "members"), "1,2,3,4", "n{id}");
    }
    assert!(extra(&net, 4, "snapshots_installed").parse::<u64>().unwrap() >= 1, "n4 caught up by a snapshot");
    let l = net.leader().expect("leader after the add");
    write_many(&mut net, l, 2, 1, 10);
    net.run_for(Duration::from_millis(500));
    same_state(&net, &[1, 2, 3, 4]);

    // Quorum is 3 of 4: with two of the four down nothing commits.
    let down: Vec<NodeId> = (1..=4).filter(|i| *i != l).take(2).collect();
    for d in &down {
        net.crash(*d);
    }
    net.request(l, 3, 1, put("x", "1"));
    net.run_for(Duration::from_millis(300));
    assert_eq!(net.reply_for(3, 1), None, "2 of 4 is not a quorum");
    for d in &down {
        net.restart(*d);
    }
    net.run_for(Duration::from_secs(2));
    let l = net.leader().expect("leader after restarts");

    // Remove node 3 (or another non-leader), crash it: 2 of 3 commit, GLE moves on.
    let gone = if l == 3 { 2 } else { 3 };
    assert_eq!(change(&mut net, 2, MemberChange::Remove { id: gone }), OK);
    net.run_for(Duration::from_millis(300));
    let rest: Vec<NodeId> = (1..=4).filter(|i| *i != gone).collect();
    let want = rest.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    for id in &rest {
        assert_eq!(extra(&net, *id, "members"), want, "n{id}");
    }
    // With the removed node and one more down, the two left are a quorum of the three.
    net.crash(gone);
    let frozen = net.executed(gone);
    let l = net.leader().expect("leader");
    let other = rest.iter().copied().find(|i| *i != l).unwrap();
    net.crash(other);
    net.request(l, 4, 1, put("y", "2"));
    net.run_for(Duration::from_millis(300));
    assert_eq!(net.reply_for(4, 1), Some(&DONE), "2 of the 3 members commit without the removed node");
    net.restart(other);
    net.run_for(Duration::from_secs(2));
    let l = net.leader().expect("leader");
    write_many(&mut net, l, 5, 1, 20);
    net.run_for(Duration::from_millis(600));
    let gle: u64 = extra(&net, l, "gle").parse().unwrap();
    assert!(gle > frozen, "the removed node no longer freezes GLE: gle {gle}, its LE {frozen}");
    same_state(&net, &rest);
}

/// A node joining a cluster far into its log (here 1,200 slots, with catch-up chunks of 1
/// slot an acceptor takes Accepts at most 256 slots past its execution point) does not hold
/// the slots below the leader's as holes while it waits for its snapshot: in a real run the
/// joiner's slot buffer grew to the leader's slot number (a 10^8-slot cluster would cost
/// gigabytes) and its memory kept growing long after (Fig. 11(c)).
#[test]
fn a_joiner_far_behind_holds_no_window_of_holes() {
    for (name, build) in [("multipaxos", crate::multipaxos::build as Build), ("holipaxos", crate::holipaxos::build)] {
        let mut p = params(&[]);
        p.catchup_chunk = 1;
        let mut net = Net::with_params(3, build, p);
        let l = elect(&mut net);
        write_many(&mut net, l, 1, 1, 1200);
        net.run_for(Duration::from_millis(300));
        let n4 = net.add_node(l);
        // Hold back its catch-up (in a real run the snapshot takes seconds) while Accepts flow.
        let catching_up = std::rc::Rc::new(std::cell::Cell::new(false));
        let open = catching_up.clone();
        net.drop = Box::new(move |_, to, m| {
            to == 4
                && !open.get()
                && !matches!(
                    synod_core::protocol::decode::<crate::multipaxos::Msg>(m),
                    Ok(crate::multipaxos::Msg::Accept { .. })
                )
        });
        assert_eq!(change(&mut net, 1, add(n4)), OK, "{name}");
        let l = net.leader().expect("leader");
        let mut widest = 0u64;
        for i in 0..60 {
            net.request(l, 2, i + 1, put("k", &format!("{i}")));
            net.run_for(Duration::from_millis(20));
            let last: u64 = extra(&net, n4, "log_last").parse().unwrap();
            widest = widest.max(last.saturating_sub(net.executed(n4)));
        }
        catching_up.set(true);
        net.run_for(Duration::from_secs(2));
        assert!(widest <= 256 + 2, "{name}: the joiner held {widest} slots past its execution point");
        assert_eq!(net.executed(n4), net.executed(l), "{name}: the joiner caught up");
        same_state(&net, &[1, 2, 3, n4]);
    }
}

/// A second change is refused while the first is pending; a change already in effect is
/// answered at once; raft refuses membership changes with a clear error.
#[test]
fn one_change_at_a_time() {
    let mut net = Net::with_params(3, crate::multipaxos::build, params(&[]));
    let l = elect(&mut net);
    net.add_node(l);
    // Both requests in the same instant: the first is proposed, the second refused.
    let client = synod_core::ClientRef { node: l, conn: 0 };
    net.event(l, synod_core::Event::Reconfigure { client, id: 1, change: add(4) });
    net.event(l, synod_core::Event::Reconfigure { client, id: 2, change: MemberChange::Remove { id: 2 } });
    let second = net.replies.iter().find(|r| r.seq == 2).map(|r| r.body.clone());
    assert!(
        matches!(&second, Some(ReplyBody::Rejected { reason }) if reason.contains("not committed yet")),
        "{second:?}"
    );
    assert!(!extra(&net, l, "config_pending").is_empty(), "a change is pending");
    net.run_for(Duration::from_millis(500));
    assert_eq!(net.replies.iter().find(|r| r.seq == 1).map(|r| r.body.clone()), Some(OK));
    assert_eq!(change(&mut net, 3, add(4)), OK, "already a member: answered at once");
    assert!(matches!(change(&mut net, 4, MemberChange::Add { id: 5, addr: String::new() }), ReplyBody::Invalid { .. }));
    // A follower redirects.
    let f = (1..=4).find(|i| *i != net.leader().unwrap()).unwrap();
    net.reconfigure(f, 5, MemberChange::Remove { id: 4 });
    let r = net.replies.iter().rev().find(|r| r.seq == 5).map(|r| r.body.clone());
    assert!(matches!(r, Some(ReplyBody::NotLeader { .. })), "{r:?}");

    let mut raft = Net::new(3, crate::raft::build);
    let l = elect(&mut raft);
    raft.reconfigure(l, 1, add(4));
    let r = raft.replies.iter().find(|r| r.client == 0 && r.seq == 1).map(|r| r.body.clone());
    assert!(
        matches!(&r, Some(ReplyBody::Invalid { reason }) if reason == "membership change not supported by raft"),
        "{r:?}"
    );
}

/// A removed leader steps down; the others elect a leader among themselves and keep
/// serving; the removed node never campaigns again.
#[test]
fn a_removed_leader_steps_down() {
    let mut net = Net::with_params(3, crate::holipaxos::build, params(&[]));
    let l = elect(&mut net);
    write_many(&mut net, l, 1, 1, 5);
    assert_eq!(change(&mut net, 1, MemberChange::Remove { id: l }), OK);
    assert_ne!(net.node(l).p.status().role, Role::Leader);
    net.run_for(Duration::from_secs(3));
    let l2 = net.leader().expect("a new leader");
    assert_ne!(l2, l);
    write_many(&mut net, l2, 2, 1, 5);
    net.request(l2, 2, 6, get("k1"));
    assert_eq!(net.reply_for(2, 6), Some(&value("2.1")));
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.leader(), Some(l2), "the removed node does not disrupt the new configuration");
    let rest: Vec<NodeId> = (1..=3).filter(|i| *i != l).collect();
    same_state(&net, &rest);
}

/// MultiPaxos without trimming: the new node learns the log through catch-up, and the
/// configuration survives restarts (WAL replay) on every node; with compaction (HoliPaxos
/// `compact_every`) it survives through the snapshot's `Members` record.
#[test]
fn configuration_is_recovered_from_the_wal_and_from_snapshots() {
    for (build, opts) in [
        (crate::multipaxos::build as Build, vec![]),
        (crate::holipaxos::build as Build, vec![("compact_every", "8"), ("trim", "gle")]),
    ] {
        let mut net = Net::with_params(3, build, params(&opts));
        let l = elect(&mut net);
        write_many(&mut net, l, 1, 1, 10);
        net.add_node(l);
        assert_eq!(change(&mut net, 1, add(4)), OK);
        let l = net.leader().unwrap();
        write_many(&mut net, l, 2, 1, 30);
        net.run_for(Duration::from_millis(500));
        same_state(&net, &[1, 2, 3, 4]);
        for id in 1..=4 {
            net.crash(id);
        }
        for id in 1..=4 {
            net.restart(id);
            assert_eq!(extra(&net, id, "members"), "1,2,3,4", "n{id} after restart ({opts:?})");
        }
        net.run_for(Duration::from_secs(2));
        let l = net.leader().expect("leader after restart");
        write_many(&mut net, l, 3, 1, 5);
        net.run_for(Duration::from_millis(500));
        same_state(&net, &[1, 2, 3, 4]);
    }
}
