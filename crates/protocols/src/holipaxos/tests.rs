//! Scenario tests of the HoliPaxos layers on the in-test network (crate::testnet): each
//! mechanism on the partition shape or situation the paper describes.

use super::*;
use crate::multipaxos::Msg;
use crate::testnet::{get, put, value, Build, Net, DONE};
use synod_core::protocol::decode;
use synod_core::{ReplyBody, Role};

fn params(opts: &[(&str, &str)]) -> ProtocolParams {
    let mut p = ProtocolParams::default();
    for (k, v) in opts {
        p.options.insert(k.to_string(), v.to_string());
    }
    p
}

fn net_with(n: u32, opts: &[(&str, &str)]) -> Net {
    Net::with_params(n, build, params(opts))
}

fn elect(net: &mut Net) -> NodeId {
    net.run_for(Duration::from_secs(2));
    net.leader().expect("a leader within 2 s")
}

fn extra(net: &Net, id: NodeId, key: &str) -> String {
    net.node(id).p.status().extra.get(key).cloned().unwrap_or_default()
}

fn num(net: &Net, id: NodeId, key: &str) -> u64 {
    extra(net, id, key).parse().unwrap_or_else(|_| panic!("n{id} status {key:?} = {:?}", extra(net, id, key)))
}

fn write_many(net: &mut Net, leader: NodeId, client: u64, n: u64) {
    for i in 1..=n {
        net.request(leader, client, i, put(&format!("k{}", i % 5), &format!("{client}.{i}")));
        assert_eq!(net.reply_for(client, i), Some(&DONE), "write {i} via n{leader}");
    }
}

fn converged(net: &Net) {
    let d = net.nodes[0].sm.digest();
    assert!(net.nodes.iter().all(|n| n.sm.digest() == d), "replicas differ");
    net.assert_agreement();
}

#[test]
fn elects_and_serves_with_control_messages() {
    let mut net = net_with(3, &[]);
    let l = elect(&mut net);
    net.request(l, 1, 1, put("a", "1"));
    assert_eq!(net.reply_for(1, 1), Some(&DONE));
    net.request(l, 1, 2, get("a"));
    assert_eq!(net.reply_for(1, 2), Some(&value("1")));
    net.run_for(Duration::from_millis(300));
    for n in &net.nodes {
        assert_eq!(n.sm.digest(), net.node(l).sm.digest());
        assert_eq!(n.p.status().protocol, "holipaxos");
    }
    let f = (1..=3).find(|i| *i != l).unwrap();
    assert_eq!(net.node(f).p.status().role, Role::Follower);
    net.request(f, 2, 1, get("a"));
    assert_eq!(net.reply_for(2, 1), Some(&ReplyBody::NotLeader { leader: Some(l) }));
}

#[test]
fn followers_commit_up_to_le_only_without_gaps() {
    let mut net = net_with(3, &[]);
    let l = elect(&mut net);
    let f = (1..=3).find(|i| *i != l).unwrap();
    // f misses the Accept of one slot (the 3rd write): it must not execute past the gap
    // even though the control message announces a higher LE, until it fetched the slot.
    let dropped = std::rc::Rc::new(std::cell::Cell::new(0));
    let d = dropped.clone();
    net.drop = Box::new(move |_, to, m| {
        if to == f && matches!(decode::<Msg>(m), Ok(Msg::Accept { slot: 4, .. })) {
            d.set(d.get() + 1);
            return true;
        }
        // Hold catch-up back for now.
        to == l && from_is_catchup(m)
    });
    write_many(&mut net, l, 1, 6);
    net.run_for(Duration::from_millis(200));
    assert!(dropped.get() >= 1);
    assert_eq!(net.executed(f), 3, "stops at the gap before slot 4");
    assert!(net.node(f).p.status().commit_index < net.executed(l));
    net.drop = Box::new(|_, _, _| false);
    net.run_for(Duration::from_millis(300));
    assert_eq!(net.executed(f), net.executed(l));
    converged(&net);
}

fn from_is_catchup(m: &[u8]) -> bool {
    matches!(decode::<Msg>(m), Ok(Msg::CatchupReq { .. }))
}

// ---------------------------------------------------------------------------------------
// §3.3 log management

#[test]
fn gle_trimming_keeps_the_log_short_and_never_drops_what_a_replica_needs() {
    let mut net = net_with(3, &[]);
    let l = elect(&mut net);
    write_many(&mut net, l, 1, 100);
    net.run_for(Duration::from_millis(300));
    for id in 1..=3 {
        assert!(num(&net, id, "log_first") > 90, "n{id} trimmed: first {}", num(&net, id, "log_first"));
        assert!(num(&net, id, "log_len") < 10);
    }
    // A follower goes down: GLE freezes at what it executed, nobody trims past it.
    let f = (1..=3).find(|i| *i != l).unwrap();
    let f_le = net.executed(f);
    net.crash(f);
    write_many(&mut net, l, 2, 100);
    net.run_for(Duration::from_millis(300));
    for id in (1..=3).filter(|i| *i != f) {
        assert!(num(&net, id, "log_first") <= f_le + 1, "n{id} kept what n{f} needs");
        assert!(num(&net, id, "gle") <= f_le);
    }
    // It comes back from its disk and catches up from the log alone (no snapshot).
    net.restart(f);
    net.run_for(Duration::from_secs(1));
    assert_eq!(net.executed(f), net.executed(l));
    assert_eq!(num(&net, f, "snapshots_installed"), 0);
    converged(&net);
    // And trimming resumes.
    assert!(num(&net, l, "log_first") > f_le + 50);
}

#[test]
fn quorum_trim_sends_a_lagging_replica_a_snapshot_from_a_non_leader() {
    let mut net = net_with(3, &[("trim", "quorum")]);
    let l = elect(&mut net);
    let f = (1..=3).find(|i| *i != l).unwrap();
    write_many(&mut net, l, 1, 20);
    net.crash(f);
    write_many(&mut net, l, 2, 60);
    net.run_for(Duration::from_millis(300));
    assert!(num(&net, l, "log_first") > 60, "quorum trim does not wait for n{f}");
    // The leader never serves the snapshot (it is dropped if it tries).
    net.drop = Box::new(move |from, _, m| from == l && matches!(decode::<Msg>(m), Ok(Msg::SnapshotChunk { .. })));
    net.restart(f);
    net.run_for(Duration::from_secs(2));
    assert_eq!(num(&net, f, "snapshots_installed"), 1);
    assert_eq!(net.executed(f), net.executed(l));
    converged(&net);
    // The installed snapshot is durable: a restart recovers from it.
    net.crash(f);
    net.restart(f);
    net.run_for(Duration::from_secs(1));
    assert_eq!(net.node(f).sm.digest(), net.node(l).sm.digest());
}

#[test]
fn a_wiped_node_recovers_with_an_on_demand_snapshot_while_gle_is_frozen() {
    let p = ProtocolParams { snapshot_chunk_bytes: 100, ..Default::default() };
    let mut net = Net::with_params(3, build, p);
    let l = elect(&mut net);
    write_many(&mut net, l, 1, 50);
    net.run_for(Duration::from_millis(300));
    let f = (1..=3).find(|i| *i != l).unwrap();
    let gle = num(&net, l, "gle");
    assert!(gle > 40);
    net.wipe(f);
    net.run_for(Duration::from_millis(100));
    assert_eq!(num(&net, l, "gle"), gle, "GLE frozen while n{f} recovers");
    net.run_for(Duration::from_secs(2));
    assert_eq!(num(&net, f, "snapshots_installed"), 1);
    assert_eq!(net.node(f).sm.digest(), net.node(l).sm.digest());
    write_many(&mut net, l, 2, 20);
    net.run_for(Duration::from_millis(300));
    assert!(num(&net, l, "gle") > gle, "GLE advances again once n{f} executes");
    converged(&net);
}

#[test]
fn snapshot_mode_compacts_periodically_and_compact_every_bounds_the_disk() {
    let mut p = params(&[("trim", "snapshot")]);
    p.snapshot_every = 20;
    p.snapshot_keep = 5;
    let mut net = Net::with_params(3, build, p);
    let l = elect(&mut net);
    write_many(&mut net, l, 1, 70);
    net.run_for(Duration::from_millis(300));
    assert!(num(&net, l, "snapshot_index") >= 60);
    assert!(net.node(l).durable.len() < 40, "durable image compacted: {} records", net.node(l).durable.len());
    // GLE mode with compact_every: memory trimmed by GLE, disk compacted every 30 entries.
    let mut net = net_with(3, &[("compact_every", "30")]);
    let l = elect(&mut net);
    write_many(&mut net, l, 1, 70);
    net.run_for(Duration::from_millis(300));
    for id in 1..=3 {
        assert!(net.node(id).durable.len() < 60, "n{id}: {} records", net.node(id).durable.len());
    }
    // A full restart recovers every write from the compacted images.
    let want = net.node(l).sm.digest();
    for id in 1..=3 {
        net.crash(id);
    }
    net.queue.clear();
    for id in 1..=3 {
        net.restart(id);
    }
    let l = elect(&mut net);
    net.request(l, 9, 1, get("k0"));
    assert_eq!(net.reply_for(9, 1), Some(&value("1.70")));
    net.run_for(Duration::from_millis(300));
    for n in &net.nodes {
        assert_eq!(n.sm.digest(), want);
    }
}

// ---------------------------------------------------------------------------------------
// §3.1 failure detector and churn rules, on the paper's partition shapes

/// Run `net` for `secs` under the cut `links`, issuing one write per tick to the current
/// leader. Returns (leader changes in the second half, writes served in the second half,
/// the final leader).
fn run_shape(net: &mut Net, links: &[(NodeId, NodeId)], secs: u64) -> (usize, u64, Option<NodeId>) {
    net.cut(links);
    let start = net.now;
    let half = start + Duration::from_secs(secs / 2);
    let end = start + Duration::from_secs(secs);
    let (mut changes, mut served, mut seq) = (0, 0, 0);
    let mut last = net.leader();
    while net.now < end {
        net.tick();
        let l = net.leader();
        if l != last && l.is_some() {
            if net.now >= half {
                changes += 1;
            }
            last = l;
        }
        if let Some(l) = l {
            seq += 1;
            net.request(l, 77, seq, put("k", &seq.to_string()));
            if net.now >= half && net.reply_for(77, seq) == Some(&DONE) {
                served += 1;
            }
        }
    }
    (changes, served, net.leader())
}

fn shape_net(n: u32, b: Build, opts: &[(&str, &str)], leader: NodeId) -> Net {
    let mut net = Net::with_params(n, b, params(opts));
    // Make `leader` the leader first: nobody else's Prepare gets through.
    net.drop = Box::new(move |from, _, m| from != leader && matches!(decode::<Msg>(m), Ok(Msg::Prepare { .. })));
    let mut t = 0;
    while net.leader() != Some(leader) && t < 200 {
        net.run_for(Duration::from_millis(100));
        t += 1;
    }
    assert_eq!(net.leader(), Some(leader), "setup: n{leader} leads");
    net
}

#[test]
fn leader_quorum_loss_fig2_the_stable_node_takes_over() {
    // 5 nodes, leader B=2; A, B, C, D lose every link except to E=5.
    let cut: Vec<(NodeId, NodeId)> = [(1, 2), (1, 3), (1, 4), (2, 3), (2, 4), (3, 4)].into_iter().collect();
    let mut net = shape_net(5, build, &[], 2);
    let (changes, served, l) = run_shape(&mut net, &cut, 20);
    assert_eq!(l, Some(5), "E, the only quorum-connected node, leads");
    assert_eq!(changes, 0);
    assert!(served > 100, "served {served}");
}

#[test]
fn leader_quorum_loss_fig2_baseline_multipaxos_without_the_integrated_detector() {
    // The same cut with plain MultiPaxos. Idle (no client writes), nothing tells B its
    // ballot is stale: E keeps hearing B's heartbeats and never campaigns, A, C and D cannot
    // reach a quorum, and B, unable to commit, stays "leader" - the unavailability the
    // paper reports. HoliPaxos in the same idle run: E takes over.
    let cut: Vec<(NodeId, NodeId)> = [(1, 2), (1, 3), (1, 4), (2, 3), (2, 4), (3, 4)].into_iter().collect();
    for (b, expect) in [(crate::multipaxos::build as Build, Some(2)), (build as Build, Some(5))] {
        let mut net = shape_net(5, b, &[], 2);
        net.drop = Box::new(|_, _, _| false);
        net.cut(&cut);
        net.run_for(Duration::from_secs(20));
        assert_eq!(net.leader(), expect, "{}", if expect == Some(2) { "multipaxos" } else { "holipaxos" });
        if expect == Some(2) {
            assert_ne!(net.node(5).p.status().role, Role::Leader, "E never campaigns");
            // A write to B cannot commit; its Accept is rejected by E (promised to a
            // candidate's higher ballot), so B learns it is stale and steps down, and E,
            // no longer hearing B, takes over: under load the baseline recovers.
            net.request(2, 9, 1, put("k", "v"));
            net.run_for(Duration::from_secs(10));
            assert_eq!(net.leader(), Some(5), "E leads once B stepped down");
        }
    }
}

#[test]
fn rule1_breaks_the_three_node_churn_fig3() {
    // A=1 and C=3 cannot reach each other; B=2 is common. Rules 2 and 3 off: Rule 1 alone.
    let opts = [("rule2", "off"), ("rule3", "off")];
    let mut net = shape_net(3, build, &opts, 1);
    let (changes, served, l) = run_shape(&mut net, &[(1, 3)], 30);
    assert_eq!(l, Some(2), "the common node ends up leading");
    assert_eq!(changes, 0, "stable in the second half");
    assert!(served > 100);
    // Without any rule the same shape churns.
    let off = [("rule1", "off"), ("rule2", "off"), ("rule3", "off")];
    let mut net = shape_net(3, build, &off, 1);
    let (changes_off, served_off, _) = run_shape(&mut net, &[(1, 3)], 30);
    eprintln!("rule 1: {changes} changes, {served} served; no rules: {changes_off} changes, {served_off} served");
    // (The in-test network has no latency, so churn costs little throughput here; the
    // leader changes are what the rule removes.)
    assert!(changes_off >= 3, "without the rules the leaders churn ({changes_off})");
}

#[test]
fn rule2_quorum_disconnected_node_goes_passive_fig5a() {
    // 5 nodes led by A=1; D=4 reaches only E=5. Left active, D's elections make E promise
    // higher ballots and reject A's heartbeats.
    let cut: Vec<(NodeId, NodeId)> = [(4, 1), (4, 2), (4, 3)].into_iter().collect();
    let opts = [("rule1", "off"), ("rule3", "off")];
    let mut net = shape_net(5, build, &opts, 1);
    let (changes, served, l) = run_shape(&mut net, &cut, 20);
    assert!(l.is_some_and(|l| l != 4));
    assert_eq!(changes, 0);
    assert!(served > 100);
    assert_eq!(extra(&net, 4, "passive"), "true");
    // Healed: the passive node requalifies (its probes reach a quorum) and follows.
    net.drop = Box::new(|_, _, _| false);
    net.run_for(Duration::from_secs(2));
    assert_eq!(extra(&net, 4, "passive"), "false");
    assert_eq!(net.node(4).p.status().leader, net.leader());
    // Plain MultiPaxos on the same shape keeps being disrupted.
    let mut net = shape_net(5, crate::multipaxos::build, &[], 1);
    let (mp_changes, mp_served, _) = run_shape(&mut net, &cut, 20);
    eprintln!(
        "holipaxos rule 2: {changes} changes, {served} served; multipaxos: {mp_changes} changes, {mp_served} served"
    );
    assert!(served > mp_served);
}

#[test]
fn rule3_common_nodes_pick_the_highest_churner_fig5b() {
    // A=1 is cut off (quorum-disconnected, Rule 2 parks it); B=2 and C=3 cannot see each
    // other, nor can D=4 and E=5; B and C both reach D and E. Every node but A can form a
    // quorum, none sees all: B, C (and D, E) would take turns forever.
    let cut: Vec<(NodeId, NodeId)> = [(1, 2), (1, 3), (1, 4), (1, 5), (2, 3), (4, 5)].into_iter().collect();
    let opts = [("rule1", "off")];
    let mut net = shape_net(5, build, &opts, 2);
    let (changes, served, l) = run_shape(&mut net, &cut, 30);
    assert!(l.is_some(), "a leader");
    assert_eq!(changes, 0, "stable in the second half (leader n{l:?})");
    assert!(served > 100);
    // All rules together on the same shape.
    let mut net = shape_net(5, build, &[], 2);
    let (changes_all, served_all, _) = run_shape(&mut net, &cut, 30);
    assert_eq!(changes_all, 0);
    assert!(served_all > 100);
}

// ---------------------------------------------------------------------------------------
// §3.2 slowdown detector and overload markers

/// Options that make the detector react within a few seconds of synthetic load.
const FAST_DETECTOR: &[(&str, &str)] =
    &[("slowdown_sample_ms", "100"), ("slowdown_samples", "6"), ("slowdown_threshold", "50"), ("slowdown_omega", "1")];

/// Make `who`'s driver queue swing (requests pile up, nothing is executed) for up to 4 s
/// or until another node leads; returns the leader after that.
fn swing_until_replaced(net: &mut Net, who: NodeId) -> NodeId {
    for k in 0..40u64 {
        net.nodes[Net::idx(who)].load.queued_requests = if k % 2 == 0 { 0 } else { 40 + 10 * (k % 5) };
        net.run_for(Duration::from_millis(100));
        if net.leader() != Some(who) {
            break;
        }
    }
    net.nodes[Net::idx(who)].load.queued_requests = 0;
    net.await_leader(Duration::from_secs(3)).expect("a leader").0
}

#[test]
fn a_slow_leader_declares_overload_and_exactly_one_election_follows() {
    let mut net = net_with(3, FAST_DETECTOR);
    let l1 = elect(&mut net);
    write_many(&mut net, l1, 1, 5);
    net.run_for(Duration::from_secs(2));
    let l2 = swing_until_replaced(&mut net, l1);
    assert_ne!(l2, l1, "the slow leader was replaced");
    assert!((1..=3).all(|id| num(&net, id, "overload_markers") == 1));
    let elections: u64 = (1..=3).map(|id| num(&net, id, "marker_elections")).sum();
    assert!((1..=2).contains(&elections), "one election cycle per marker ({elections} marker elections)");
    // The new leader remedies the marker after a calm detector window; the old marker never
    // triggers another election.
    net.run_for(Duration::from_secs(5));
    assert_eq!(net.leader(), Some(l2));
    assert!(extra(&net, l2, "overload").contains("remedied=true"), "{}", extra(&net, l2, "overload"));
    let after: u64 = (1..=3).map(|id| num(&net, id, "marker_elections")).sum();
    assert_eq!(after, elections);
    write_many(&mut net, l2, 2, 5);
}

#[test]
fn general_overload_does_not_churn_leaders() {
    // Every leader looks slow (the whole cluster is overloaded): the first declaration
    // moves leadership once; its successor cannot declare again before the marker is
    // remedied (it never is: it is slow too) or the long timeout.
    let mut net = net_with(3, FAST_DETECTOR);
    let l1 = elect(&mut net);
    let mut leaders = vec![l1];
    for k in 0..150u64 {
        for id in 1..=3 {
            net.nodes[Net::idx(id)].load.queued_requests = if k % 2 == 0 { 0 } else { 40 + 10 * (k % 5) };
        }
        net.run_for(Duration::from_millis(100));
        if let Some(l) = net.leader() {
            if leaders.last() != Some(&l) {
                leaders.push(l);
            }
        }
    }
    assert!(leaders.len() <= 2, "at most one leader change in 15 s of general overload: {leaders:?}");
    let markers = num(&net, leaders[0], "overload_markers");
    assert!(markers <= 1, "{markers} declarations");
}

#[test]
fn options_are_validated_and_shown() {
    let s = |opts: &[(&str, &str)]| Setup { id: 1, members: vec![1, 2, 3], params: params(opts) };
    assert!(build(&s(&[("trim", "often")])).err().unwrap().contains("trim"));
    assert!(build(&s(&[("rule3_window_ms", "soon")])).err().unwrap().contains("rule3_window_ms"));
    assert!(build(&s(&[("rule1_window_ms", "0")])).err().unwrap().contains("> 0"));
    assert!(build(&s(&[("bogus", "1")])).err().unwrap().contains("known"));
    assert!(build(&s(&[("slowdown_threshold", "NaN")])).is_err());
    let p = build(&s(&[("trim", "quorum"), ("rule2", "off")])).unwrap();
    assert_eq!(p.status().extra["trim"], "quorum");
    // Plain MultiPaxos keeps refusing options.
    assert!(crate::multipaxos::build(&s(&[("trim", "gle")])).is_err());
    let cfg = HoliConfig::from_params(&params(&[("rule3_attempts", "4"), ("slowdown", "false")])).unwrap();
    assert_eq!(cfg.churn.rule3_attempts, 4);
    assert!(!cfg.slowdown.enabled);
}

#[test]
fn a_slow_highest_id_leader_is_replaced_too() {
    // Rule 3 favours the highest id; an overloaded leader with the highest id must still
    // be replaced by the election its marker starts.
    for leader in [3, 2, 1] {
        let mut net = shape_net(3, build, FAST_DETECTOR, leader);
        net.drop = Box::new(|_, _, _| false);
        write_many(&mut net, leader, 1, 5);
        net.run_for(Duration::from_secs(2));
        let l2 = swing_until_replaced(&mut net, leader);
        assert_ne!(l2, leader, "the slow leader n{leader} was replaced");
    }
}

#[test]
fn healing_the_quorum_connected_partition_keeps_the_leader_fig9d() {
    // Fig. 9(d) shape as in the Rule 3 test, all rules on, then the heal, for each first
    // leader and several heal instants. In paper-scale runs the churner that Rule 3 had
    // blocked during the partition deposed the stable leader right after the heal: still a
    // candidate with a ballot raised by every blocked attempt, it rejected the leader's
    // first control message (a leader change and ~1 s with nothing served).
    let cut: Vec<(NodeId, NodeId)> = [(1, 2), (1, 3), (1, 4), (1, 5), (2, 3), (4, 5)].into_iter().collect();
    let mut runs = Vec::new();
    for first in [2, 3, 4, 5] {
        for offset in 0..6u64 {
            let mut net = shape_net(5, build, &[], first);
            let (_, _, l) = run_shape(&mut net, &cut, 20);
            net.run_for(Duration::from_millis(offset * 83));
            let l = net.leader().or(l).expect("a leader during the partition");
            net.drop = Box::new(|_, _, _| false);
            let healed = net.now;
            let mut leaders = vec![(0, Some(l))];
            let mut seq = 0;
            while net.now < healed + Duration::from_secs(10) {
                net.tick();
                let now = net.leader();
                if now != leaders.last().unwrap().1 {
                    leaders.push((net.now.since(healed).as_millis(), now));
                }
                if let Some(now) = now {
                    seq += 1;
                    net.request(now, 78, seq, put("k", &seq.to_string()));
                }
            }
            assert!(seq > 100);
            net.run_for(Duration::from_secs(1));
            converged(&net);
            runs.push((first, offset, leaders));
        }
    }
    // Before the two fixes (a Rule-3-rejected candidate steps down; a requalified probe
    // waits for its timeout) every one of these 24 heals deposed the leader. What remains is
    // the case the paper allows ("a rejected node can still win the election if ... it has
    // gained additional connectivity"): the blocked churner's election timer fires before
    // the leader's first control message reaches it, and the leader, which never saw its
    // attempts, promises its higher ballot (3 of 24 here).
    let changed: Vec<_> = runs.iter().filter(|(_, _, l)| l.len() > 1).collect();
    eprintln!("{} of {} heals changed the leader: {changed:?}", changed.len(), runs.len());
    assert!(
        changed.len() * 4 <= runs.len(),
        "leader changes after the heal (first leader, offset, (ms, leader)...): {changed:?}"
    );
    for (first, offset, leaders) in &changed {
        let back = leaders.last().unwrap();
        assert!(
            back.0 < 1500 && back.1.is_some(),
            "n{first}/{offset}: no stable leader soon after the heal: {leaders:?}"
        );
    }
}

#[test]
fn a_replica_that_declared_itself_slow_sits_out_later_marker_elections() {
    // Fig. 10(b) at paper scale: the slowed node declared, a healthy node took over, and a
    // later declaration by a healthy leader started an election that the slowed node won
    // (it then led at 16% CPU for the rest of the run). Here: l1 declares, l2 takes over;
    // then l2 declares too; the election its marker starts must go to the third node.
    for first in [1, 2, 3] {
        let opts: Vec<(&str, &str)> =
            FAST_DETECTOR.iter().copied().chain([("slowdown_redeclare_ms", "3000")]).collect();
        let mut net = shape_net(3, build, &opts, first);
        net.drop = Box::new(|_, _, _| false);
        write_many(&mut net, first, 1, 5);
        net.run_for(Duration::from_secs(2));
        let l2 = swing_until_replaced(&mut net, first);
        assert_ne!(l2, first);
        net.run_for(Duration::from_secs(5));
        assert_eq!(net.leader(), Some(l2));
        let l3 = swing_until_replaced(&mut net, l2);
        let third = (1..=3).find(|i| *i != first && *i != l2).unwrap();
        assert_eq!(l3, third, "n{first} declared, then n{l2}: the lead goes to n{third}, not back to n{first}");
        assert_eq!(num(&net, first, "marker_elections"), 0, "n{first} sat out");
    }
}
