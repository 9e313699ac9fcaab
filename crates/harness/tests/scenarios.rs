//! Every shipped scenario file, through the library's public API: it parses (at full scale and
//! scaled down), and its schedule is one a run can carry out on the scenario's cluster.

use std::path::{Path, PathBuf};
use std::time::Duration;
use synod_core::NodeId;
use synod_harness::nemesis::{Action, NodeOrAll, NodeSel};
use synod_harness::scenario::{Scenario, StepKind, Who};

fn shipped() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

/// The node ids a step names explicitly (not `leader`, `all` or `follower`).
fn named_nodes(kind: &StepKind) -> Vec<NodeId> {
    let from_action = |a: &Action| -> Vec<NodeId> {
        match a {
            Action::Kill { node: NodeSel::Id(id) }
            | Action::Pause { node: NodeSel::Id(id) }
            | Action::RemoveNode { node: NodeSel::Id(id) }
            | Action::Cpu { node: NodeSel::Id(id), .. }
            | Action::Clock { node: NodeSel::Id(id), .. }
            | Action::Restart { node: NodeOrAll::Id(id) }
            | Action::Resume { node: NodeOrAll::Id(id) }
            | Action::Egress { node: NodeOrAll::Id(id), .. } => vec![*id],
            Action::Partition { links: Some(l), roles, .. } => {
                l.links.iter().flat_map(|&(a, b)| [a, b]).chain(roles.iter().copied()).collect()
            }
            Action::Partition { roles, .. } => roles.clone(),
            Action::Link { links, .. } => links.links.iter().flat_map(|&(a, b)| [a, b]).collect(),
            _ => Vec::new(),
        }
    };
    match kind {
        StepKind::Fault(a) => from_action(a),
        StepKind::Faults(actions) => actions.iter().flat_map(from_action).collect(),
        StepKind::Ramp { node: NodeSel::Id(id), .. } | StepKind::Isolate(Who::Id(id)) => vec![*id],
        _ => Vec::new(),
    }
}

#[test]
fn every_shipped_scenario_has_a_valid_schedule() {
    let files = shipped();
    assert!(files.len() >= 7, "expected the shipped scenarios, found {files:?}");
    for path in &files {
        let name = path.display();
        let s = Scenario::load(path, 1.0).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        assert!(!s.variants.is_empty(), "{name}: no protocol to run");
        let mut dirs: Vec<String> = s.variants.iter().map(|v| v.dir_name()).collect();
        dirs.sort();
        dirs.dedup();
        assert_eq!(dirs.len(), s.variants.len(), "{name}: two variants share an output folder");
        assert!(s.duration > Duration::ZERO && s.window > Duration::ZERO, "{name}");
        assert!(s.replicas >= 1, "{name}");

        // Sorted, inside the measured time, and aimed at nodes the cluster has: an action
        // that a fresh cluster of `replicas` nodes (ids 1..=replicas) cannot take fails here.
        let ids: Vec<NodeId> = (1..=s.replicas).collect();
        let mut added = 0;
        for (i, step) in s.schedule.iter().enumerate() {
            assert!(step.at < s.duration, "{name}: step {i} `{}` at {:?} is after the end", step.text, step.at);
            if i > 0 {
                assert!(s.schedule[i - 1].at <= step.at, "{name}: the schedule is not sorted at step {i}");
            }
            if let StepKind::Fault(Action::AddNode) = step.kind {
                added += 1;
            }
            let known = s.replicas + added;
            for id in named_nodes(&step.kind) {
                assert!(id >= 1 && id <= known, "{name}: `{}` names node {id} of {known}", step.text);
            }
            if let StepKind::Fault(a) = &step.kind {
                assert!(!matches!(a, Action::Show), "{name}: `show` is not a fault");
                a.check(&ids).unwrap_or_else(|e| panic!("{name}: `{}`: {e}", step.text));
            }
            if matches!(step.kind, StepKind::Rate(_)) {
                assert!(s.load.rate.is_some(), "{name}: `{}` in a closed-loop run", step.text);
            }
        }
        // Only a ramp's first step is drawn; every other step is.
        for step in &s.schedule {
            match step.kind {
                StepKind::Ramp { first, .. } => assert_eq!(step.marker, first, "{name}: `{}`", step.text),
                _ => assert!(step.marker, "{name}: `{}` is not drawn", step.text),
            }
        }
        let line = s.describe();
        assert!(line.starts_with(&format!("{}: ", s.name)), "{name}: {line}");
        assert!(line.contains(&format!("{} step(s)", s.schedule.len())), "{name}: {line}");

        // --scale stretches the run and every (non-ramp) time alike.
        let half = Scenario::load(path, 0.5).unwrap_or_else(|e| panic!("{name} at scale 0.5: {e:#}"));
        assert_eq!(half.duration, s.duration.mul_f64(0.5), "{name}");
        let plain = |sc: &Scenario| -> Vec<(Duration, String)> {
            sc.schedule
                .iter()
                .filter(|st| !matches!(st.kind, StepKind::Ramp { .. }))
                .map(|st| (st.at, st.text.clone()))
                .collect()
        };
        let scaled: Vec<(Duration, String)> = plain(&s).into_iter().map(|(at, t)| (at.mul_f64(0.5), t)).collect();
        assert_eq!(plain(&half), scaled, "{name}");
    }
}

#[test]
fn a_scenario_with_a_node_outside_the_cluster_is_refused() {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/smoke.toml"))
        .expect("scenarios/smoke.toml");
    let bad = text.replace("action = \"kill leader\"", "action = \"kill 4\"");
    assert_ne!(bad, text, "smoke.toml no longer kills the leader; adjust this test");
    let e = format!("{:#}", Scenario::parse(&bad, "smoke.toml", 1.0).unwrap_err());
    assert!(e.contains("no node 4"), "{e}");
}
