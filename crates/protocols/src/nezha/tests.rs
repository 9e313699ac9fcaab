//! Scenario tests of Nezha's paths on the deterministic test network.

use super::dom::{Admit, Dom};
use super::hash::SetHash;
use super::msg::{Entry, LogId};
use super::*;
use crate::testnet::{get, put, value, Net, DONE};
use synod_core::Op;

fn net(n: u32) -> Net {
    let mut net = Net::new(n, build);
    net.run_for(Duration::from_millis(200));
    net
}

fn extra(net: &Net, id: NodeId, key: &str) -> u64 {
    net.node(id).p.status().extra[key].parse().unwrap()
}

fn cmd(client: u64, seq: u64, op: Op) -> Command {
    Command { client, seq, acked_below: seq, now_ms: 0, op }
}

#[test]
fn requests_at_any_replica_commit_and_every_replica_executes_the_same_log() {
    let mut net = net(3);
    assert_eq!(net.leader(), Some(1), "view 0's leader is the first member");
    net.request(1, 10, 1, put("a", "1"));
    net.request(2, 11, 1, put("b", "2"));
    net.request(3, 12, 1, put("a", "3"));
    net.run_for(Duration::from_millis(300));
    assert_eq!(net.reply_for(10, 1), Some(&DONE));
    assert_eq!(net.reply_for(11, 1), Some(&DONE), "a follower answers its own client");
    assert_eq!(net.reply_for(12, 1), Some(&DONE));
    net.request(2, 13, 1, get("a"));
    net.run_for(Duration::from_millis(300));
    assert_eq!(net.reply_for(13, 1), Some(&value("3")));
    for id in 1..=3 {
        assert_eq!(net.executed(id), 4, "n{id}");
    }
    net.assert_agreement();
}

#[test]
fn a_late_request_goes_through_the_leaders_deadline_modification() {
    let mut net = net(3);
    // A request whose deadline is already behind what the leader released: late.
    net.request(1, 20, 1, put("k", "1"));
    net.run_for(Duration::from_millis(50));
    let old = 1;
    net.event(
        1,
        Event::Message {
            from: 2,
            sent_at: net.now,
            msg: encode(&Msg::Request { deadline: old, cmd: cmd(21, 1, put("k", "2")) }),
        },
    );
    net.event(
        2,
        Event::Request {
            client: ClientRef { node: 2, conn: 21 },
            cmd: cmd(21, 1, put("k", "2")),
            meta: Default::default(),
        },
    );
    net.run_for(Duration::from_millis(300));
    assert_eq!(net.reply_for(21, 1), Some(&DONE));
    assert!(extra(&net, 1, "deadline_modified") >= 1, "the leader moved the late request's deadline");
    assert_eq!(net.executed(3), 2);
    net.assert_agreement();
}

#[test]
fn a_follower_fetches_requests_it_never_received() {
    let mut net = net(3);
    // Node 3 gets neither the client's request nor its relay.
    net.drop = Box::new(|from, to, m| {
        to == 3 && matches!(synod_core::protocol::decode::<Msg>(m), Ok(Msg::Request { .. })) && (from == 1 || from == 2)
    });
    net.request(2, 30, 1, put("x", "1"));
    net.run_for(Duration::from_millis(300));
    assert_eq!(net.reply_for(30, 1), Some(&DONE));
    assert!(extra(&net, 3, "fetched") >= 1);
    assert_eq!(net.executed(3), 1);
    net.assert_agreement();
}

#[test]
fn the_leader_crashes_and_the_new_view_keeps_every_committed_request() {
    let mut net = net(3);
    for i in 0..5 {
        net.request(1 + (i % 3) as NodeId, 40 + i, 1, put(&format!("k{i}"), "v"));
    }
    net.run_for(Duration::from_millis(300));
    for i in 0..5 {
        assert_eq!(net.reply_for(40 + i, 1), Some(&DONE));
    }
    net.crash(1);
    net.run_for(Duration::from_millis(1500));
    let leader = net.leader().expect("a new leader");
    assert_ne!(leader, 1);
    net.request(3, 50, 1, get("k4"));
    net.run_for(Duration::from_millis(300));

    assert_eq!(net.reply_for(50, 1), Some(&value("v")));
    net.restart(1);
    net.run_for(Duration::from_millis(500));
    assert_eq!(net.executed(1), 6, "the old leader rejoins as a follower and catches up");
    assert_eq!(net.node(1).p.status().role, Role::Follower);
    net.assert_agreement();
}

#[test]
fn every_replica_restarts_from_its_wal() {
    let mut net = net(3);
    for i in 0..4 {
        net.request(2, 60 + i, 1, put(&format!("w{i}"), "v"));
    }
    net.run_for(Duration::from_millis(300));
    for id in 1..=3 {
        net.crash(id);
    }
    for id in 1..=3 {
        net.restart(id);
    }
    net.run_for(Duration::from_millis(2000));
    net.request(3, 70, 1, get("w3"));
    net.run_for(Duration::from_millis(500));
    assert_eq!(net.reply_for(70, 1), Some(&value("v")));
    assert_eq!(net.executed(3), 5, "the committed log is re-executed after the restart");
    net.assert_agreement();
}

#[test]
fn dom_releases_in_deadline_order_and_sends_late_arrivals_to_the_late_buffer() {
    let mut dom = Dom::new(false);
    assert_eq!(dom.admit(30, cmd(1, 1, put("a", "1"))), Admit::Early);
    assert_eq!(dom.admit(10, cmd(2, 1, put("b", "1"))), Admit::Early);
    assert_eq!(dom.admit(10, cmd(2, 1, put("b", "1"))), Admit::Held);
    assert!(dom.release(Time(5)).is_empty(), "nothing before its deadline");
    let out: Vec<u64> = dom.release(Time(40)).iter().map(|(id, _)| id.client).collect();
    assert_eq!(out, vec![2, 1]);
    assert_eq!(dom.admit(20, cmd(3, 1, put("c", "1"))), Admit::Late, "behind the last release");
    assert!(dom.take(&(3, 1)).is_some());
    assert_eq!(dom.eligible_deadline(&cmd(3, 1, put("c", "1")), 25), 31);
    // With commutativity (§7.2) only the last release on the same keys counts.
    let mut dom = Dom::new(true);
    dom.admit(30, cmd(1, 1, put("a", "1")));
    dom.release(Time(40));
    assert_eq!(dom.admit(20, cmd(3, 1, put("c", "1"))), Admit::Early, "commutes with the release on a");
    assert_eq!(dom.admit(20, cmd(4, 1, put("a", "2"))), Admit::Late);
}

#[test]
fn the_set_hash_is_order_free_and_per_key_with_commutativity() {
    let a = (LogId { deadline: 1, client: 1, seq: 1 }, cmd(1, 1, put("a", "1")));
    let b = (LogId { deadline: 2, client: 2, seq: 1 }, cmd(2, 1, put("b", "1")));
    let mut h1 = SetHash::default();
    h1.toggle(&a.0, &a.1);
    h1.toggle(&b.0, &b.1);
    let mut h2 = SetHash::default();
    h2.toggle(&b.0, &b.1);
    h2.toggle(&a.0, &a.1);
    assert_eq!(h1.for_reply(&a.0, &a.1, false), h2.for_reply(&a.0, &a.1, false));
    // A replica without b agrees with one with b on a's keys only.
    let mut h3 = SetHash::default();
    h3.toggle(&a.0, &a.1);
    assert_eq!(h1.for_reply(&a.0, &a.1, true), h3.for_reply(&a.0, &a.1, true));
    assert_ne!(h1.for_reply(&a.0, &a.1, false), h3.for_reply(&a.0, &a.1, false));
    h1.toggle(&b.0, &b.1);
    assert_eq!(h1.for_reply(&a.0, &a.1, false), h3.for_reply(&a.0, &a.1, false), "removal undoes addition");
}

#[test]
fn the_new_leader_keeps_the_longest_synced_prefix_and_entries_on_a_majority_of_the_rest() {
    let e = |d: u64, c: u64| Entry { deadline: d, cmd: cmd(c, 1, put("k", "v")) };
    // f = 2: five replicas, three answer; entries beyond the prefix need ⌈f/2⌉ + 1 = 2.
    let dvc =
        |last_normal, sync_point, log: Vec<Entry>| Dvc { last_normal, base: 0, trim: 0, sync_point, commit: 0, log };
    let mut dvcs = BTreeMap::new();
    dvcs.insert(1, dvc(3, 2, vec![e(1, 1), e(2, 2), e(5, 5), e(6, 6)]));
    dvcs.insert(2, dvc(3, 1, vec![e(1, 1), e(6, 6), e(7, 7)]));
    dvcs.insert(3, dvc(2, 4, vec![e(1, 1), e(9, 9), e(10, 10), e(11, 11)]));
    let (base, log) = view::rebuild_log(&dvcs, 2, Default::default());
    assert_eq!(base, 0);
    let clients: Vec<u64> = log.iter().map(|e| e.cmd.client).collect();
    // Replica 3's older view does not count; 6 is on two qualified replicas, 5 and 7 on one.
    assert_eq!(clients, vec![1, 2, 6]);
}

#[test]
fn snapshots_trim_the_log_below_what_every_replica_synced_and_survive_restarts_and_view_changes() {
    let params = ProtocolParams { snapshot_every: 5, ..ProtocolParams::default() };
    let mut net = Net::with_params(3, build, params);
    net.run_for(Duration::from_millis(200));
    for i in 0..20 {
        net.request(1 + (i % 3) as NodeId, 100 + i, 1, put(&format!("s{}", i % 4), &format!("{i}")));
        net.run_for(Duration::from_millis(60));
    }
    net.run_for(Duration::from_millis(300));
    for id in 1..=3 {
        assert!(extra(&net, id, "snapshots") >= 1, "n{id} took a snapshot");
        assert!(extra(&net, id, "log_base") >= 10, "n{id} trimmed its log");
    }
    // A follower restarts from its compacted WAL (snapshot + suffix).
    net.crash(3);
    net.restart(3);
    net.run_for(Duration::from_millis(300));
    assert_eq!(net.executed(3), 20);
    // The leader fails: the new view is built from trimmed logs.
    net.crash(1);
    net.run_for(Duration::from_millis(1500));
    net.request(3, 200, 1, get("s3"));
    net.run_for(Duration::from_millis(500));
    assert_eq!(net.reply_for(200, 1), Some(&value("19")));
    net.restart(1);
    net.run_for(Duration::from_millis(500));
    assert_eq!(net.executed(1), 21);
    net.assert_agreement();
}

#[test]
fn the_leader_executes_provisionally_and_a_deposed_leader_rolls_back() {
    let mut net = net(3);
    net.request(1, 300, 1, put("p", "1"));
    net.run_for(Duration::from_millis(200));
    // Cut the leader off: what it appends now is executed provisionally, never committed.
    net.cut(&[(1, 2), (1, 3)]);
    net.request(1, 301, 1, put("p", "2"));
    assert_eq!(net.node(1).spec.pending(), 1, "the leader executed the request provisionally");
    assert_eq!(net.node(1).sm.kv().get(b"p").map(|v| v.to_vec()), Some(b"2".to_vec()));
    net.run_for(Duration::from_millis(1500));
    // Nodes 2 and 3 moved on without it.
    net.request(2, 302, 1, put("p", "3"));
    net.run_for(Duration::from_millis(300));
    assert_eq!(net.reply_for(302, 1), Some(&DONE));
    net.drop = Box::new(|_, _, _| false);
    net.run_for(Duration::from_millis(1500));
    assert_eq!(net.node(1).spec.pending(), 0);
    net.request(1, 303, 1, get("p"));
    net.run_for(Duration::from_millis(500));
    let replies: Vec<_> = net.replies.iter().filter(|r| r.client == 303).collect();
    assert!(!replies.is_empty());
    net.assert_agreement();
    let digests: Vec<u64> = (1..=3).map(|id| net.node(id).sm.digest()).collect();
    assert!(digests.windows(2).all(|w| w[0] == w[1]), "the old leader's provisional write was undone");
}

/// A proxied request that only the followers released (the leader never got it) survives
/// the leader's crash in the new view's log, and the proxy waiting for it hears from the new
/// view at once: the new leader's reply with its result and the other follower's
/// slow-reply, both of the new view (the slow path's quorum, §5.4), with no retry.
#[test]
fn a_new_view_answers_the_proxies_of_the_requests_it_kept() {
    let mut net = net(3);
    let req = cmd(70, 1, put("p", "1"));
    let stamp = synod_core::protocol::encode(&proxy::ProxyStamp { bound: 1_000_000 });
    for to in [2, 3] {
        let meta = synod_core::RequestMeta { sent_at: net.now, ext: stamp.clone() };
        net.event(to, Event::Request { client: ClientRef { node: to, conn: 70 }, cmd: req.clone(), meta });
    }
    // One more that only replica 3 got: the new view's log lacks it (one copy of the ⌈f/2⌉ + 1
    // the rebuild needs), and replica 3 sends its proxy to the new leader.
    let lone = cmd(71, 1, put("q", "1"));
    let meta = synod_core::RequestMeta { sent_at: net.now, ext: stamp.clone() };
    net.event(3, Event::Request { client: ClientRef { node: 3, conn: 71 }, cmd: lone, meta });
    // The followers never hear from the leader again: it crashes before the release.
    net.crash(1);
    net.run_for(Duration::from_millis(20));
    let fast: Vec<&synod_core::Reply> = net.replies.iter().filter(|r| r.client == 70).collect();
    assert_eq!(fast.len(), 2, "both followers fast-replied on release: {fast:?}");
    assert!(fast.iter().all(|r| matches!(r.body, ReplyBody::Speculative { view: 0, result: None, .. })));
    net.run_for(Duration::from_millis(1500));
    assert_eq!(net.leader(), Some(2), "view 1's leader");
    let new_view: Vec<&synod_core::Reply> = net.replies.iter().filter(|r| r.client == 70).skip(2).collect();
    assert!(
        new_view.iter().any(|r| r.from == 2
            && matches!(&r.body, ReplyBody::Speculative { view: 1, result: Some(res), .. } if res == &synod_core::OpResult::Done)),
        "the new leader's reply with its result: {new_view:?}"
    );
    assert!(
        new_view.iter().any(|r| r.from == 3 && r.body == ReplyBody::SlowReply { view: 1 }),
        "the follower's slow-reply of the new view: {new_view:?}"
    );
    assert_eq!(
        net.reply_for(71, 1),
        Some(&ReplyBody::NotLeader { leader: Some(2) }),
        "the request the new log lacks: its proxy is pointed to the new leader"
    );
    net.assert_agreement();
}

/// The largest log a DoViewChange and a StartView carried (`(dvc, start_view, count)`),
/// recorded by the test network's drop filter; `cut` drops the links given.
type Sizes = std::rc::Rc<std::cell::RefCell<(usize, usize, usize)>>;

fn record_view_change_sizes(net: &mut Net, sizes: &Sizes, cut: Vec<(NodeId, NodeId)>) {
    let sizes = sizes.clone();
    net.drop = Box::new(move |from, to, m| {
        match synod_core::protocol::decode::<Msg>(m) {
            Ok(Msg::DoViewChange { log, .. }) => {
                let mut s = sizes.borrow_mut();
                s.0 = s.0.max(log.len());
                s.2 += 1;
            }
            Ok(Msg::StartView { log, .. }) => {
                let mut s = sizes.borrow_mut();
                s.1 = s.1.max(log.len());
            }
            _ => {}
        }
        cut.iter().any(|&(a, b)| (a, b) == (from, to) || (b, a) == (from, to))
    });
}

/// Issue 18: a view change moves the log after the commit-point (§7.3), not the whole log
/// since the last checkpoint. 40 committed requests, no checkpoint (snapshot_every at its
/// default 10,000): the leader fails and the DoViewChanges and StartViews carry only the
/// uncommitted suffix (nothing here), where they carried all 40 entries before.
#[test]
fn view_change_messages_carry_only_the_log_after_the_commit_point() {
    let mut net = net(3);
    for i in 0..40 {
        net.request(1 + (i % 3) as NodeId, 400 + i, 1, put(&format!("v{}", i % 5), &format!("{i}")));
        net.run_for(Duration::from_millis(20));
    }
    net.run_for(Duration::from_millis(300));
    for id in 1..=3 {
        assert_eq!(net.executed(id), 40, "n{id}");
        assert_eq!(extra(&net, id, "log_base"), 0, "no checkpoint: the log holds all 40 entries");
    }
    let sizes: Sizes = Default::default();
    record_view_change_sizes(&mut net, &sizes, vec![]);
    net.crash(1);
    net.run_for(Duration::from_millis(1500));
    assert_eq!(net.leader(), Some(2));
    let (dvc, start_view, dvcs) = *sizes.borrow();
    assert!(dvcs >= 1, "a DoViewChange was sent");
    assert_eq!(dvc, 0, "DoViewChange: the log after the commit-point only");
    assert_eq!(start_view, 0, "StartView: the log after the receiver's commit-point only");
    net.request(3, 500, 1, get("v4"));
    net.run_for(Duration::from_millis(500));
    assert_eq!(net.reply_for(500, 1), Some(&value("39")));
    net.restart(1);
    net.run_for(Duration::from_millis(1000));
    assert_eq!(net.executed(1), 41);
    net.assert_agreement();
}

/// A new leader that lacks committed entries (it was cut off while the others committed
/// them) gets them in the DoViewChanges it asks for with its commit-point: the entries after
/// its commit-point, not the others' whole logs.
#[test]
fn a_lagging_new_leader_gets_the_committed_entries_it_lacks() {
    let mut net = net(3);
    for i in 0..10 {
        net.request(1, 600 + i, 1, put("w", &format!("{i}")));
        net.run_for(Duration::from_millis(20));
    }
    net.run_for(Duration::from_millis(200));
    // Replica 2 (view 1's leader) is cut off for less than an election timeout; 1 and 3
    // commit 20 more.
    net.cut(&[(1, 2), (2, 3)]);
    for i in 10..30 {
        net.request(1, 600 + i, 1, put("w", &format!("{i}")));
        net.run_for(Duration::from_millis(3));
    }
    net.run_for(Duration::from_millis(20));
    assert!(net.executed(3) >= 30 && net.executed(2) < 30, "replica 2 lags");
    let sizes: Sizes = Default::default();
    record_view_change_sizes(&mut net, &sizes, vec![]);
    net.crash(1);
    net.run_for(Duration::from_millis(3000));
    let leader = net.leader().expect("a leader");
    net.request(leader, 700, 1, get("w"));
    net.run_for(Duration::from_millis(500));
    assert_eq!(net.reply_for(700, 1), Some(&value("29")));
    assert_eq!(net.executed(2), net.executed(3));
    let (dvc, _, _) = *sizes.borrow();
    assert!(dvc <= 30, "no DoViewChange carried more than the lagging leader lacked: {dvc}");
    net.assert_agreement();
}
