//! Membership changes in the simulator (docs/design.md, "Membership"): a learner is added
//! and an original member removed while the fault schedule runs; every run must stay
//! linearizable, agree on every position, complete both changes and converge.
//! (Sized for release mode: `cargo test -p synod-sim --release --test membership`;
//! MEMBERSHIP_SEEDS=N soaks longer.)

use std::time::Duration;
use synod_core::{MemberChange, ProtocolParams};
use synod_protocols::registry;
use synod_sim::{run, FaultSet, ScriptedChange, SimConfig};

fn config(protocol: &str, seed: u64, opts: &[(&str, &str)]) -> SimConfig {
    let mut params = ProtocolParams::default();
    for (k, v) in opts {
        params.options.insert(k.to_string(), v.to_string());
    }
    SimConfig {
        replicas: 4,
        learners: vec![4],
        changes: vec![
            ScriptedChange { at: Duration::from_millis(800), change: MemberChange::Add { id: 4, addr: "n4".into() } },
            ScriptedChange { at: Duration::from_millis(2500), change: MemberChange::Remove { id: 1 } },
        ],
        faults: FaultSet::all(),
        params,
        ..SimConfig::new(registry::find(protocol).unwrap(), seed)
    }
}

fn sweep(protocol: &str, opts: &[(&str, &str)], seeds: u64) {
    let mut changes = 0;
    for seed in 0..seeds {
        let cfg = config(protocol, seed, opts);
        let report = run(&cfg);
        if let Some(f) = &report.failure {
            let traced = run(&SimConfig { trace: true, ..cfg.clone() });
            if let Ok(path) = std::env::var("MEMBERSHIP_TRACE") {
                std::fs::write(path, traced.trace.join("\n")).expect("write trace");
            }
            let skip = traced.trace.len().saturating_sub(60);
            panic!("{protocol} {opts:?} seed {seed}: {f}\n--- trace tail ---\n{}", traced.trace[skip..].join("\n"));
        }
        assert_eq!(report.stats.membership_changes, 2, "{protocol} seed {seed}: both changes completed");
        changes += report.stats.membership_changes;
    }
    assert_eq!(changes, 2 * seeds);
}

fn seeds() -> u64 {
    std::env::var("MEMBERSHIP_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(60)
}

#[test]
fn multipaxos_add_and_remove_under_all_faults() {
    sweep("multipaxos", &[], seeds());
}

#[test]
fn holipaxos_add_and_remove_under_all_faults() {
    sweep("holipaxos", &[], seeds());
    // Quorum trim and compaction: the learner needs snapshots, and the configuration must
    // survive in compacted durable images.
    sweep("holipaxos", &[("trim", "quorum"), ("compact_every", "7")], seeds() / 2);
}

#[test]
fn raft_refuses_and_the_run_reports_it() {
    let mut cfg = SimConfig { faults: FaultSet::none(), replicas: 3, learners: vec![], ..config("raft", 1, &[]) };
    cfg.changes.remove(0);
    let report = run(&cfg);
    // Raft answers Invalid: the changes never complete, which the liveness check reports.
    assert_eq!(report.stats.membership_changes, 0);
    assert!(report.failure.is_some_and(|f| f.detail.contains("not done")));
}
