//! Every registered protocol survives many seeded fault schedules without a violation.
//! (Sized for release mode: `cargo test -p synod-sim --release`.)

use synod_protocols::registry;
use synod_sim::{run, FaultSet, SimConfig};

fn check_seeds(protocol: &str, seeds: std::ops::Range<u64>, replicas: usize, faults: FaultSet) -> (u64, u64) {
    let info = registry::find(protocol).unwrap();
    let mut ops = 0;
    let mut indeterminate = 0;
    for seed in seeds {
        let cfg = SimConfig { replicas, faults, ..SimConfig::new(info, seed) };
        let report = run(&cfg);
        if let Some(f) = &report.failure {
            panic!(
                "{protocol} seed {seed} ({replicas} replicas, faults {}): {f}\nreplay: synod check --protocol {protocol} --seed {seed} --replicas {replicas} --faults {} --trace",
                faults.to_list(),
                faults.to_list()
            );
        }
        ops += report.history.ops.len() as u64;
        indeterminate += report.stats.ops_indeterminate;
    }
    (ops, indeterminate)
}

#[test]
fn multipaxos_200_seeds_all_faults() {
    let (ops, _) = check_seeds("multipaxos", 0..200, 3, FaultSet::all());
    assert!(ops >= 200 * 3 * 30);
}

#[test]
fn multipaxos_five_replicas() {
    check_seeds("multipaxos", 1000..1050, 5, FaultSet::all());
}

#[test]
fn multipaxos_without_faults_answers_everything() {
    let (ops, indeterminate) = check_seeds("multipaxos", 0..20, 3, FaultSet::none());
    assert!(ops > 0);
    assert_eq!(indeterminate, 0, "with a healthy network every operation gets its reply");
}

#[test]
fn every_registered_protocol_100_seeds() {
    for p in registry::all() {
        check_seeds(p.name, 500..600, 3, FaultSet::all());
    }
}

/// Seed 523 (found by the storage faults): the Nezha leader of a new view appended a
/// request left over from the view change, crashed before that record's fsync and lost it;
/// restarted as the leader of its view, it recovered the request into its late-buffer, where
/// every retry found it "held" and nothing appended it (a liveness violation 30 s after the
/// heal). Fixed by the leader's duty of §5.4: it picks what its late-buffer holds.
#[test]
fn nezha_seed_523_a_restarted_leader_picks_its_late_buffer() {
    let (ops, _) = check_seeds("nezha", 523..524, 3, FaultSet::all());
    assert!(ops > 0);
}

/// The rich workload (lists, INCRBY, multi-key operations, scans, MULTI/EXEC with WATCH)
/// under every fault: histories hold those kinds, the stamps WATCH compares are recorded,
/// and the state-machine model accepts them.
#[test]
fn rich_workload_histories_are_linearizable() {
    use synod_sim::KvOp;
    let info = synod_protocols::find("multipaxos").unwrap();
    let (mut lists, mut watched, mut stamped) = (0, 0, 0);
    for seed in 0..6 {
        let cfg = synod_sim::SimConfig {
            rich: true,
            keys: 16,
            clients: Some(6),
            ops_per_client: 80,
            ..synod_sim::SimConfig::new(info, seed)
        };
        let r = synod_sim::run(&cfg);
        assert!(r.failure.is_none(), "seed {seed}: {:?}", r.failure);
        for o in &r.history.ops {
            if let KvOp::Rich { op, stamp } = &o.op {
                stamped += usize::from(stamp.is_some());
                match op {
                    synod_core::Op::ListPush { .. } | synod_core::Op::ListMove { .. } => lists += 1,
                    synod_core::Op::Multi { watch, .. } if !watch.is_empty() => watched += 1,
                    _ => {}
                }
            }
        }
    }
    println!("rich: {lists} list writes, {watched} watched transactions, {stamped} stamped ops");
    assert!(lists > 0 && watched > 0 && stamped > 0);
}

/// Chain replication, sweep seed 468: a chain of one (head and tail) applied an update
/// before it was durable, crashed and lost it, then sequenced a retry of the client's
/// request at the same position (agreement). The tail now applies durable updates only.
#[test]
fn chain_seed_468_the_tail_applies_only_durable_updates() {
    let (ops, _) = check_seeds("chain", 468..469, 3, FaultSet::all());
    assert!(ops > 0);
}

/// Chain replication, sweep seed 49: a rejoining node got the snapshot but not the updates
/// after it, counted itself trusted and became head without a committed update. A node is
/// trusted again only once it holds all its predecessor held when it brought it in sync.
#[test]
fn chain_seed_49_a_node_with_the_snapshot_alone_is_not_trusted() {
    let (ops, _) = check_seeds("chain", 49..50, 3, FaultSet::all());
    assert!(ops > 0);
}

/// Chain replication, sweep seed 1000576 (5 replicas): a restarted middle node (its stable
/// point is written lazily, so it recovered with stable 0) was reset by its predecessor,
/// truncated its whole log, crashed before the re-sent updates were durable and later became
/// head without committed updates. A reset now keeps the updates that agree with the
/// predecessor's, and a node that truncates is untrusted until it holds the predecessor's.
#[test]
fn chain_seed_1000576_a_truncating_node_is_untrusted_until_it_caught_up() {
    let (ops, _) = check_seeds("chain", 1_000_576..1_000_577, 5, FaultSet::all());
    assert!(ops > 0);
}
