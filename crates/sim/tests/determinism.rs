//! Same seed ⇒ byte-identical run; different seeds ⇒ different runs.

use synod_protocols::registry;
use synod_sim::{run, FaultSet, SimConfig};

fn traced(protocol: &str, seed: u64, replicas: usize) -> synod_sim::RunReport {
    let cfg = SimConfig { trace: true, replicas, ..SimConfig::new(registry::find(protocol).unwrap(), seed) };
    run(&cfg)
}

#[test]
fn same_seed_same_trace() {
    for protocol in ["multipaxos", "raft"] {
        for (seed, replicas) in [(7, 3), (12345, 5)] {
            let a = traced(protocol, seed, replicas);
            let b = traced(protocol, seed, replicas);
            assert!(a.failure.is_none(), "{protocol} seed {seed}: {:?}", a.failure);
            assert!(a.trace.len() > 1000, "a real run has a long trace ({} lines)", a.trace.len());
            assert_eq!(a.trace, b.trace, "{protocol} seed {seed}: traces differ");
            assert_eq!(a.history, b.history);
            assert_eq!(a.stats, b.stats);
        }
    }
}

#[test]
fn different_seeds_differ_and_trace_is_optional() {
    let a = traced("multipaxos", 1, 3);
    let b = traced("multipaxos", 2, 3);
    assert_ne!(a.trace, b.trace);
    // Without --trace nothing is collected, and the run itself is unchanged.
    let quiet = run(&SimConfig::new(registry::find("multipaxos").unwrap(), 1));
    assert!(quiet.trace.is_empty());
    assert_eq!(quiet.history, a.history);
    assert_eq!(quiet.stats, a.stats);
}

#[test]
fn faults_parse() {
    assert_eq!(FaultSet::parse("all").unwrap(), FaultSet::all());
    assert_eq!(FaultSet::parse("none").unwrap(), FaultSet::none());
    let f = FaultSet::parse("crash, loss").unwrap();
    assert!(f.crash && f.loss && !f.partition && !f.crash_wipe);
    assert_eq!(f.to_list(), "crash,loss");
    assert!(!FaultSet::all().crash_wipe, "crash-wipe is opt-in");
    assert!(FaultSet::parse("all,crash-wipe").unwrap().crash_wipe);
    assert!(FaultSet::parse("meteor").unwrap_err().contains("unknown fault"));
}
