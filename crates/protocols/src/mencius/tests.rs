//! Scenario tests of Mencius's rules on the deterministic test network.

use super::*;
use crate::testnet::{get, put, value, Net};

fn net(n: u32) -> Net {
    let mut net = Net::new(n, build);
    net.run_for(Duration::from_millis(500));
    net
}

#[test]
fn any_replica_proposes_in_its_own_slots_and_idle_ones_skip() {
    let mut net = net(3);
    // Node 3 proposes; it owns slots 3, 6, …; nodes 1 and 2 skip 1 and 2 (Rule 2).
    net.request(3, 7, 1, put("a", "1"));
    net.run_for(Duration::from_millis(200));
    assert_eq!(net.reply_for(7, 1), Some(&ReplyBody::Done(synod_core::OpResult::Done)));
    net.request(1, 8, 1, get("a"));
    net.run_for(Duration::from_millis(200));
    assert_eq!(net.reply_for(8, 1), Some(&value("1")));
    for id in 1..=3 {
        assert!(net.executed(id) >= 2, "n{id} executed {}", net.executed(id));
    }
    net.assert_agreement();
}

#[test]
fn a_crashed_owner_is_revoked_and_the_others_keep_executing() {
    let mut net = net(3);
    net.request(1, 7, 1, put("a", "1"));
    net.run_for(Duration::from_millis(200));
    net.crash(2);
    // Node 2's slots stop being skipped by it; node 3 (its successor in the ring) revokes.
    for seq in 2..=6 {
        let at = if seq % 2 == 0 { 1 } else { 3 };
        net.request(at, 7, seq, put("a", &seq.to_string()));
        net.run_for(Duration::from_millis(300));
    }
    net.run_for(Duration::from_secs(3));
    for seq in 2..=6 {
        assert!(net.reply_for(7, seq).is_some(), "request {seq} answered with node 2 down");
    }
    let revoked: u64 =
        [1, 3].iter().map(|&i| net.node(i).p.status().extra["revocations"].parse::<u64>().unwrap()).sum();
    assert!(revoked >= 1, "someone revoked node 2's slots");
    // Node 2 returns, learns what was decided (including its revoked slots) and proposes again.
    net.restart(2);
    net.run_for(Duration::from_secs(2));
    net.request(2, 9, 1, get("a"));
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.reply_for(9, 1), Some(&value("6")));
    net.assert_agreement();
}

#[test]
fn a_revocation_keeps_a_value_the_slow_owner_got_chosen() {
    let mut net = net(3);
    // Node 1's Accept for its slot reaches node 2 only; its commit is lost (node 1 crashes).
    net.drop = Box::new(|from, to, msg| from == 1 && (to == 3 || matches!(decode::<Msg>(msg), Ok(Msg::Commit { .. }))));
    net.request(1, 7, 1, put("k", "chosen"));
    net.run_for(Duration::from_millis(50));
    net.crash(1);
    net.drop = Box::new(|_, _, _| false);
    net.request(3, 8, 1, get("k"));
    net.run_for(Duration::from_secs(4));
    // The value node 1 and node 2 accepted (a majority: chosen) survives the revocation.
    assert_eq!(net.reply_for(8, 1), Some(&value("chosen")));
    net.assert_agreement();
}

#[test]
fn a_replica_behind_the_trimmed_log_catches_up_from_a_snapshot_and_restarts_from_it() {
    let params = ProtocolParams { snapshot_every: 10, snapshot_keep: 2, ..Default::default() };
    let mut net = Net::with_params(3, build, params);
    net.run_for(Duration::from_millis(500));
    net.crash(3);
    for seq in 1..=40 {
        net.request(1 + (seq % 2) as NodeId, 7, seq, put(&format!("k{}", seq % 5), &seq.to_string()));
        net.run_for(Duration::from_millis(100));
    }
    net.run_for(Duration::from_secs(2));
    assert!(net.reply_for(7, 40).is_some(), "the two live replicas keep serving");
    let first = |net: &Net, id| net.node(id).p.status().extra["snapshot_upto"].parse::<u64>().unwrap();
    assert!(first(&net, 1) >= 10, "node 1 took snapshots");
    // Node 3 returns behind node 1's trimmed log: it installs a snapshot, then executes on.
    net.restart(3);
    net.run_for(Duration::from_secs(3));
    assert!(first(&net, 3) >= 10, "node 3 installed a snapshot");
    net.request(3, 8, 1, get("k0"));
    net.run_for(Duration::from_secs(1));
    assert_eq!(net.reply_for(8, 1), Some(&value("40")));
    assert_eq!(net.node(3).sm.digest(), net.node(1).sm.digest(), "same state");
    // Every replica restarts from its compacted records (snapshot + later slots).
    for id in 1..=3 {
        net.crash(id);
    }
    for id in 1..=3 {
        net.restart(id);
    }
    net.run_for(Duration::from_secs(3));
    net.request(2, 9, 1, get("k0"));
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.reply_for(9, 1), Some(&value("40")));
}

/// A replica back from an outage pulls catch-up chunks one round trip apart, not one per
/// heartbeat: with 2-slot chunks and ~600 decided slots behind, it is level with the others
/// within a few heartbeats (one chunk per heartbeat would take ~300 of them).
#[test]
fn catch_up_is_pipelined_at_the_round_trip_rate() {
    let params = ProtocolParams { catchup_chunk: 2, ..ProtocolParams::default() };
    let mut net = Net::with_params(3, build, params);
    net.run_for(Duration::from_millis(500));
    net.crash(3);
    for seq in 1..=200u64 {
        let at = if seq % 2 == 0 { 1 } else { 2 };
        net.request(at, 7, seq, put(&format!("k{seq}"), "v"));
        net.run_for(Duration::from_millis(20));
    }
    net.run_for(Duration::from_secs(1));
    let target = net.executed(1);
    assert!(target >= 200, "the live replicas executed {target}");
    net.restart(3);
    let hb = ProtocolParams::default().heartbeat();
    net.run_for(hb * 4);
    assert_eq!(net.executed(3), target, "caught up within 4 heartbeats");
    net.assert_agreement();
}

#[test]
fn an_idle_cluster_does_not_revoke_when_the_next_command_waits_for_a_skip() {
    // Wide-area regression (EPaxos Fig. 4 at 5 sites): after an idle spell longer than
    // 4 × the election timeout, the first command left every replica "stuck for long" at
    // once (the stall clock ran from the last move of the execution point), so all of them
    // revoked the owner of the next slot together — a duel that never ended when a phase 1
    // round trip is a good part of the timeout. The clock now starts when there is something
    // to wait for.
    let mut net = net(3);
    net.run_for(Duration::from_secs(5)); // idle: 5 s > 4 × election_timeout_max
    let revocations = |net: &Net| -> u64 {
        (1..=3).map(|i| net.node(i).p.status().extra["revocations"].parse::<u64>().unwrap()).sum()
    };
    // Node 1 cannot hear node 2 (whose slot 2 is next) for a moment: node 3's command in
    // slot 3 leaves node 1's execution point waiting for node 2's skip.
    net.cut(&[(2, 1)]);
    net.request(3, 7, 1, put("a", "1"));
    net.run_for(ProtocolParams::default().heartbeat() * 2);
    assert_eq!(revocations(&net), 0, "no replica may revoke an owner it has waited for only a heartbeat");
    net.cut(&[]);
    net.run_for(Duration::from_secs(2));
    assert!(net.executed(1) >= 1 && net.executed(3) >= 1);
    net.assert_agreement();
}
