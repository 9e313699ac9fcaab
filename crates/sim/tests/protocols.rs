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
