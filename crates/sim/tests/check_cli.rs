//! The `synod check` driver: exit codes, replay lines, history export.

use synod_sim::cli::{replay_command, run_check, CheckArgs};
use synod_sim::FaultSet;

fn args(protocol: &str) -> CheckArgs {
    CheckArgs {
        protocol: protocol.into(),
        seeds: 5,
        seed: None,
        start_seed: 0,
        replicas: 3,
        faults: "all".into(),
        ops: 10,
        workload: "classic".into(),
        keys: None,
        clients: None,
        readers: 0,
        trace: false,
        export_history: None,
        params: Vec::new(),
        clock_skew_ms: 300,
        clock_drift_ppm: 500,
        clock_jump_ms: 200,
    }
}

#[test]
fn clean_protocol_exits_zero_and_exports_histories() {
    let dir = std::env::temp_dir().join(format!("synod-sim-export-{}", std::process::id()));
    let a = CheckArgs { export_history: Some(dir.clone()), ..args("multipaxos") };
    assert_eq!(run_check(&a), 0);
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(files.len(), 5);
    let text = std::fs::read_to_string(dir.join("multipaxos-seed3.json")).unwrap();
    let h = synod_sim::History::from_json(&text).unwrap();
    assert!(!h.ops.is_empty());
    assert!(synod_sim::linearizability::check(&h).is_ok());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_arguments_exit_two() {
    assert_eq!(run_check(&args("no-such-protocol")), 2);
    assert_eq!(run_check(&CheckArgs { faults: "meteor".into(), ..args("multipaxos") }), 2);
    assert_eq!(run_check(&CheckArgs { params: vec!["trim=sometimes".into()], ..args("holipaxos") }), 2);
    assert_eq!(run_check(&CheckArgs { params: vec!["heartbeat_ms=soon".into()], ..args("multipaxos") }), 2);
}

#[test]
fn protocol_options_reach_the_simulated_replicas() {
    // Non-default HoliPaxos trim modes under all faults (the CI sweep runs the defaults).
    for trim in ["quorum", "snapshot"] {
        let a = CheckArgs { params: vec![format!("trim={trim}")], seeds: 20, ..args("holipaxos") };
        assert_eq!(run_check(&a), 0, "trim={trim}");
    }
}

#[test]
fn replay_command_names_non_default_settings() {
    assert_eq!(replay_command("raft", 9, 3, &FaultSet::all(), 30), "synod check --protocol raft --seed 9 --trace");
    assert_eq!(
        replay_command("raft", 9, 5, &FaultSet::parse("crash").unwrap(), 7),
        "synod check --protocol raft --seed 9 --trace --replicas 5 --faults crash --ops 7"
    );
}

#[test]
fn violation_exits_one() {
    let mutant = &synod_protocols::mutants::all()[0];
    let a = CheckArgs { seeds: 500, ops: 30, ..args(mutant.name) };
    assert_eq!(synod_sim::cli::run_check_with(mutant, &a), 1);
}
