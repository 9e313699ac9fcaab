//! Tests every registered protocol gets without writing them (issue 14, item 5): a protocol
//! added to `registry::all()` is crashed and restarted whole, restarted from its WAL, and
//! caught up through snapshots here, at 3 and 5 replicas, on the deterministic test network.
//! (Malformed peer messages are `decode_tests`; randomized fault schedules with the
//! linearizability checker are `synod check`.)
//!
//! The client here knows nothing about the protocol: it sends a request to one replica,
//! follows `NotLeader` hints, moves on after `Rejected`, `NotLeader { None }` or silence, and
//! retries with the same (client, seq), which the state machine deduplicates.

use crate::registry::{self, ProtocolInfo};
use crate::testnet::{get, put, value, Net, DONE};
use std::time::Duration;
use synod_core::{NodeId, Op, ProtocolParams, ReplyBody};

/// How long one attempt waits for a reply before the client tries another replica.
const ATTEMPT: Duration = Duration::from_millis(1500);
/// Attempts before a request is declared lost (a liveness failure of the protocol).
const ATTEMPTS: usize = 20;

struct Driver {
    client: u64,
    seq: u64,
    /// Where the next request goes (the last replica that answered, or a leader hint).
    target: NodeId,
}

impl Driver {
    fn new(client: u64) -> Driver {
        Driver { client, seq: 0, target: 1 }
    }

    /// Run `op` to completion through the protocol; the final reply, or None if no replica
    /// answered it within `ATTEMPTS` attempts.
    fn run(&mut self, net: &mut Net, op: Op) -> Option<ReplyBody> {
        self.seq += 1;
        let n = net.nodes.len() as NodeId;
        for _ in 0..ATTEMPTS {
            if !net.node(self.target).up {
                // Connection refused: back off a little (an election may be under way),
                // then the next replica.
                net.run_for(Duration::from_millis(200));
                self.target = self.target % n + 1;
                continue;
            }
            net.request(self.target, self.client, self.seq, op.clone());
            let t0 = net.now;
            loop {
                match net.reply_for(self.client, self.seq).cloned() {
                    Some(ReplyBody::Done(r)) => return Some(ReplyBody::Done(r)),
                    Some(ReplyBody::Invalid { reason }) => panic!("a valid request refused as invalid: {reason}"),
                    Some(ReplyBody::NotLeader { leader: Some(l) }) if l != self.target && l >= 1 && l <= n => {
                        net.replies.retain(|r| !(r.client == self.client && r.seq == self.seq));
                        self.target = l;
                        break;
                    }
                    Some(_) => {
                        // NotLeader without a hint, Rejected, or a speculative reply: wait a
                        // little, then try the next replica.
                        net.replies.retain(|r| !(r.client == self.client && r.seq == self.seq));
                        net.run_for(Duration::from_millis(100));
                        self.target = self.target % n + 1;
                        break;
                    }
                    None if net.now.since(t0) >= ATTEMPT => {
                        self.target = self.target % n + 1;
                        break;
                    }
                    None => net.tick(),
                }
            }
        }
        None
    }
}

fn net_for(p: &ProtocolInfo, n: u32, params: ProtocolParams) -> Net {
    let mut net = Net::with_params(n, p.build, params);
    net.use_order(p.order);
    net.run_for(Duration::from_secs(2));
    net
}

/// Every replica that is up has executed the same commands into the same state.
fn assert_converged(p: &ProtocolInfo, net: &mut Net) {
    let mut last = None;
    for _ in 0..100 {
        net.run_for(Duration::from_millis(100));
        let states: Vec<(u64, u64)> = net
            .nodes
            .iter()
            .filter(|x| x.up)
            .map(|x| (x.sm.positions_fingerprint() ^ x.sm.applied_count(), x.sm.digest()))
            .collect();
        if states.windows(2).all(|w| w[0] == w[1]) {
            net.assert_agreement();
            return;
        }
        last = Some(states);
    }
    panic!("{}: replicas did not converge: {last:?}", p.name);
}

fn write_all(p: &ProtocolInfo, net: &mut Net, d: &mut Driver, from: usize, to: usize, what: &str) {
    for i in from..to {
        let r = d.run(net, put(&format!("k{i}"), &format!("v{i}")));
        assert_eq!(r, Some(DONE), "{}: put k{i} ({what})", p.name);
        // Messages are delivered instantly here: let heartbeats and timers run between
        // writes, as they would between a real client's requests.
        net.run_for(Duration::from_millis(5));
    }
}

fn read_all(p: &ProtocolInfo, net: &mut Net, d: &mut Driver, to: usize, what: &str) {
    for i in 0..to {
        let r = d.run(net, get(&format!("k{i}")));
        assert_eq!(r, Some(value(&format!("v{i}"))), "{}: get k{i} ({what})", p.name);
    }
}

/// Crash every replica at once (messages in flight are lost), restart each from its durable
/// records, and give them time to elect and catch up.
fn crash_and_restart_all(net: &mut Net, n: u32) {
    for id in 1..=n {
        net.crash(id);
    }
    net.queue.clear();
    for id in 1..=n {
        net.restart(id);
    }
    net.run_for(Duration::from_secs(3));
}

/// Every replica crashes at once (every acknowledged write was persisted before its reply)
/// and restarts from its durable records alone: nothing acknowledged is lost, and the
/// cluster serves again.
fn whole_cluster_crash(p: &ProtocolInfo, n: u32) {
    let mut net = net_for(p, n, ProtocolParams::default());
    let mut d = Driver::new(11);
    write_all(p, &mut net, &mut d, 0, 20, "before the crash");
    crash_and_restart_all(&mut net, n);
    read_all(p, &mut net, &mut d, 20, "after every replica restarted");
    write_all(p, &mut net, &mut d, 20, 30, "after the restart");
    assert_converged(p, &mut net);
}

/// One replica is down while the others go on (if the protocol tolerates a failure at this
/// size; otherwise it is down only while nothing is written), then restarts from its WAL and
/// catches up.
fn restart_from_wal(p: &ProtocolInfo, n: u32) {
    let mut net = net_for(p, n, ProtocolParams::default());
    let mut d = Driver::new(12);
    write_all(p, &mut net, &mut d, 0, 10, "all up");
    net.crash(n);
    if (p.tolerates)(n as usize) >= 1 {
        write_all(p, &mut net, &mut d, 10, 25, "one replica down");
    } else {
        net.run_for(Duration::from_secs(1));
        net.restart(n);
        write_all(p, &mut net, &mut d, 10, 25, "after a restart with no failure tolerated");
        net.crash(n);
    }
    net.restart(n);
    write_all(p, &mut net, &mut d, 25, 30, "after the restart");
    assert_converged(p, &mut net);
    read_all(p, &mut net, &mut d, 30, "after catch-up");
}

/// With snapshots every few commands, a replica that was down while the log moved far on
/// (and was trimmed) catches up through a snapshot; then every replica is restarted from its
/// compacted durable state and the cluster still has every write.
fn snapshot_catch_up(p: &ProtocolInfo, n: u32) {
    let params = ProtocolParams { snapshot_every: 8, snapshot_keep: 2, ..ProtocolParams::default() };
    let mut net = net_for(p, n, params);
    let mut d = Driver::new(13);
    write_all(p, &mut net, &mut d, 0, 10, "all up");
    if (p.tolerates)(n as usize) >= 1 {
        net.crash(n);
        write_all(p, &mut net, &mut d, 10, 80, "one replica down");
        net.restart(n);
    } else {
        // No failure tolerated at this size: nobody can fall behind; snapshots and the
        // compacted restart below are still exercised.
        write_all(p, &mut net, &mut d, 10, 80, "all up (no failure tolerated)");
    }
    write_all(p, &mut net, &mut d, 80, 300, "after the restart");
    assert_converged(p, &mut net);
    // Compaction may be amortized (EPaxos waits until a peer has every commit, and until as
    // many commands ran as it holds); after a further round of writes with everyone up, a
    // WAL without compaction would hold at least one record per command (600): every
    // replica must hold fewer than half that.
    net.run_for(Duration::from_secs(3));
    write_all(p, &mut net, &mut d, 300, 600, "with every replica back");
    assert_converged(p, &mut net);
    let durable: Vec<usize> = net.nodes.iter().map(|x| x.durable.len()).collect();
    assert!(durable.iter().all(|&r| r < 300), "{} n={n}: the WAL is not compacted: {durable:?} records", p.name);
    crash_and_restart_all(&mut net, n);
    read_all(p, &mut net, &mut d, 600, "after restarting from compacted state");
    assert_converged(p, &mut net);
}

fn for_every_protocol(test: fn(&ProtocolInfo, u32)) {
    for p in registry::all() {
        for n in [3, 5] {
            test(p, n);
        }
    }
}

#[test]
fn every_protocol_survives_a_whole_cluster_crash() {
    for_every_protocol(whole_cluster_crash);
}

#[test]
fn every_protocol_restarts_a_replica_from_its_wal() {
    for_every_protocol(restart_from_wal);
}

#[test]
fn every_protocol_catches_up_a_replica_through_snapshots() {
    for_every_protocol(snapshot_catch_up);
}

/// The whole-cluster crash test fails for a protocol that acknowledges before its votes are
/// durable (the mutant whose followers ack Accepts without persisting them).
#[cfg(feature = "mutants")]
#[test]
fn the_whole_cluster_crash_test_catches_volatile_accepts() {
    let m = crate::mutants::all().iter().find(|m| m.name == "multipaxos-volatile-accepts").expect("mutant registered");
    let caught = std::panic::catch_unwind(|| whole_cluster_crash(m, 3)).is_err();
    assert!(caught, "a protocol that forgets acknowledged writes in a whole-cluster crash passed");
}
