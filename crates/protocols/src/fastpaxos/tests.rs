//! Fast Paxos paths on the deterministic test network: a fast commit (§3.1), a collision
//! recovered by the leader's classic round (§3.3) with both commands executed once and in
//! the same order everywhere, and a leader crash in the middle of that recovery.

use super::*;
use crate::multipaxos::Msg;
use crate::testnet::{get, Net};
use bytes::Bytes;
use std::time::Duration;
use synod_core::protocol::decode;
use synod_core::{ClientRef, Command, Event, NodeId, Op, OpResult, ReplyBody, RequestMeta, Time};

fn append(v: &str) -> Op {
    Op::Append { key: Bytes::from_static(b"k"), value: Bytes::copy_from_slice(v.as_bytes()) }
}

/// A client's multicast: the same command (one send time) to each replica in `order`,
/// before any of them hears from another.
fn multicast(net: &mut Net, client: u64, op: Op, order: &[NodeId]) {
    let cmd = Command { client, seq: 1, acked_below: 1, now_ms: 0, op };
    let meta = RequestMeta { sent_at: Time::from_millis(1_000 + client), ext: Bytes::new() };
    for &at in order {
        let ev = Event::Request { client: ClientRef { node: at, conn: client }, cmd: cmd.clone(), meta: meta.clone() };
        net.event(at, ev);
    }
}

fn counter(net: &Net, id: NodeId, key: &str) -> u64 {
    net.node(id).p.status().extra.get(key).and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn read_k(net: &mut Net, leader: NodeId, client: u64) -> Option<ReplyBody> {
    let all: Vec<NodeId> = (1..=net.nodes.len() as NodeId).collect();
    multicast(net, client, get("k"), &all);
    net.deliver_all();
    net.run_for(Duration::from_secs(2));
    let _ = leader;
    net.reply_for(client, 1).cloned()
}

fn started(n: u32) -> (Net, NodeId) {
    let mut net = Net::new(n, build);
    let (leader, _) = net.await_leader(Duration::from_secs(5)).expect("a leader");
    (net, leader)
}

#[test]
fn quorum_sizes() {
    assert_eq!([1, 2, 3, 4, 5, 7, 9].map(fast_quorum), [1, 2, 3, 3, 4, 6, 7]);
    for n in 1..=20usize {
        let (classic, fast) = (n / 2 + 1, fast_quorum(n));
        assert!(classic + 2 * fast > 2 * n, "n={n}: a classic quorum and two fast quorums intersect");
    }
}

#[test]
fn same_order_everywhere_commits_fast_and_the_leader_answers() {
    let (mut net, leader) = started(3);
    multicast(&mut net, 10, append("a"), &[1, 2, 3]);
    net.deliver_all();
    assert_eq!(net.reply_for(10, 1), Some(&ReplyBody::Done(OpResult::Int(1))));
    let from: Vec<NodeId> = net.replies.iter().filter(|r| r.client == 10).map(|r| r.from).collect();
    assert_eq!(from, vec![leader], "only the leader answers");
    assert_eq!(counter(&net, leader, "fast_path"), 1);
    assert_eq!(counter(&net, leader, "collisions"), 0);
    assert_eq!(counter(&net, leader, "recoveries"), 0);
    // The followers learn it from the leader's announcement (commit marker included).
    for id in 1..=3 {
        assert_eq!(net.node(id).applied.len(), 1, "n{id} executed the command");
    }
    net.assert_agreement();
}

#[test]
fn a_collision_is_recovered_and_both_commands_execute_once_in_one_order() {
    let (mut net, leader) = started(3);
    let others: Vec<NodeId> = (1..=3).filter(|i| *i != leader).collect();
    // The leader and one follower see a before b, the other follower b before a: in the
    // first slot of the fast round the votes are a, a, b — no value can reach the fast
    // quorum of 3 — and likewise in the second.
    multicast(&mut net, 11, append("a"), &[leader, others[0]]);
    multicast(&mut net, 12, append("b"), &[leader, others[0], others[1]]);
    multicast(&mut net, 11, append("a"), &[others[1]]);
    net.deliver_all();
    net.run_for(Duration::from_secs(3));
    assert!(counter(&net, leader, "collisions") >= 1, "a collision was detected");
    assert!(counter(&net, leader, "recoveries") >= 1);
    assert!(matches!(net.reply_for(11, 1), Some(ReplyBody::Done(_))));
    assert!(matches!(net.reply_for(12, 1), Some(ReplyBody::Done(_))));
    // Each exactly once, in the order the recovery picked (a won the first slot).
    assert_eq!(read_k(&mut net, leader, 13), Some(crate::testnet::value("ab")));
    net.assert_agreement();
    // And every replica executed the same commands at the same positions.
    for id in 1..=3 {
        assert!(net.executed(id) >= 2, "n{id}");
    }
}

#[test]
fn a_leader_crash_in_the_middle_of_a_recovery() {
    let (mut net, leader) = started(3);
    let others: Vec<NodeId> = (1..=3).filter(|i| *i != leader).collect();
    // The leader's classic 2a messages (its recovery of the collision) never leave.
    net.drop = Box::new(move |from, _, msg| from == leader && matches!(decode::<Msg>(msg), Ok(Msg::Accept { .. })));
    multicast(&mut net, 21, append("a"), &[leader, others[0]]);
    multicast(&mut net, 22, append("b"), &[leader, others[0], others[1]]);
    multicast(&mut net, 21, append("a"), &[others[1]]);
    net.deliver_all();
    assert!(counter(&net, leader, "recoveries") >= 1, "the leader started recovering");
    assert!(net.reply_for(21, 1).is_none() && net.reply_for(22, 1).is_none(), "nothing committed yet");
    net.crash(leader);
    net.drop = Box::new(|_, _, _| false);
    let (next, _) = net.await_leader(Duration::from_secs(5)).expect("a new leader");
    assert_ne!(next, leader);
    net.run_for(Duration::from_secs(3));
    // The new leader's phase 1 picks by O4 from the fast votes; both commands execute once
    // and the new leader (which got both requests from the clients) answers them.
    assert!(matches!(net.reply_for(21, 1), Some(ReplyBody::Done(_))));
    assert!(matches!(net.reply_for(22, 1), Some(ReplyBody::Done(_))));
    let v = read_k(&mut net, next, 23);
    assert!(v == Some(crate::testnet::value("ab")) || v == Some(crate::testnet::value("ba")), "{v:?}");
    net.assert_agreement();
    // The old leader comes back and converges on the same log.
    net.restart(leader);
    net.run_for(Duration::from_secs(3));
    net.assert_agreement();
    assert_eq!(net.executed(leader), net.executed(next));
}
