//! HoliPaxos in the simulator: the fault sweep for every trimming mode, the paper's
//! partition shapes (Fig. 2, 3, 5a, 5b / evaluation Fig. 9a–d) with liveness and leader
//! stability during the partition, and the overload marker's one-election-per-marker bound.
//! (Sized for release mode: `cargo test -p synod-sim --release --test holipaxos`.)

use std::time::Duration;
use synod_core::{NodeId, ProtocolParams, Role, Status};
use synod_protocols::registry;
use synod_sim::{run, FaultSet, RunReport, ScriptedCut, SimConfig};

fn params(opts: &[(&str, &str)]) -> ProtocolParams {
    let mut p = ProtocolParams::default();
    for (k, v) in opts {
        p.options.insert(k.to_string(), v.to_string());
    }
    p
}

fn base(seed: u64) -> SimConfig {
    SimConfig::new(registry::find("holipaxos").unwrap(), seed)
}

fn must_pass(cfg: &SimConfig) -> RunReport {
    let report = run(cfg);
    if let Some(f) = &report.failure {
        // Replay the seed with a trace (runs are deterministic) for the failure message.
        let traced = run(&SimConfig { trace: true, ..cfg.clone() });
        let skip = traced.trace.len().saturating_sub(60);
        let tail = traced.trace[skip..].join("\n");
        if let Ok(path) = std::env::var("HOLIPAXOS_TRACE") {
            std::fs::write(path, traced.trace.join("\n")).expect("write trace");
        }
        panic!(
            "holipaxos seed {} ({} replicas, options {:?}): {f}\n--- trace tail ---\n{tail}",
            cfg.seed, cfg.replicas, cfg.params.options
        );
    }
    report
}

#[test]
fn every_trim_mode_survives_all_faults() {
    // The default (GLE) is swept by `synod check` / scripts/check-all.sh; the comparison
    // modes exercise trimming below lagging replicas, Trimmed replies, on-demand snapshot
    // transfers under loss and crashes, and compacted durable images.
    let modes: &[&[(&str, &str)]] = &[&[("trim", "quorum")], &[("trim", "snapshot")], &[("compact_every", "7")]];
    // HOLIPAXOS_SEEDS=N soaks longer (default 120 seeds per mode).
    let seeds: u64 = std::env::var("HOLIPAXOS_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(120);
    for (m, opts) in modes.iter().enumerate() {
        for seed in 0..seeds {
            let replicas = if seed % 4 == 0 { 5 } else { 3 };
            must_pass(&SimConfig { params: params(opts), replicas, ..base(seed + 10_000 * m as u64) });
        }
    }
}

fn leader_of(statuses: &[Option<Status>]) -> Option<(NodeId, String)> {
    statuses
        .iter()
        .flatten()
        .filter(|s| s.role == Role::Leader)
        .max_by_key(|s| {
            let mut it = s.ballot.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
            (it.next().unwrap_or(0), it.next().unwrap_or(0))
        })
        .map(|s| (s.id, s.ballot.clone()))
}

/// Run a shape: faults off except the scripted cut from 2 s to the heal at 20 s. Checks
/// the run (safety, liveness after the heal), that one leader (same node, same ballot)
/// held from 12 s to 19.9 s, and that clients completed operations in that window.
fn shape(replicas: usize, links: &[(NodeId, NodeId)], leader_as: NodeId, seed: u64) -> (NodeId, u64) {
    let cfg = SimConfig {
        replicas,
        faults: FaultSet::none(),
        fault_phase: Duration::from_secs(20),
        // Enough to keep writing through 20 s: a stale baseline leader learns its ballot is
        // stale only from a rejected Accept (no heartbeat rejection without HoliPaxos).
        ops_per_client: 3000,
        clients: Some(3),
        script: vec![ScriptedCut { at: Duration::from_secs(2), links: links.to_vec(), leader_as: Some(leader_as) }],
        probes: vec![Duration::from_secs(12), Duration::from_millis(19_900)],
        ..base(seed)
    };
    let report = must_pass(&cfg);
    let a = leader_of(&report.probes[0].statuses).unwrap_or_else(|| panic!("seed {seed}: no leader at 12 s"));
    let b = leader_of(&report.probes[1].statuses).unwrap_or_else(|| panic!("seed {seed}: no leader at 19.9 s"));
    assert_eq!(a, b, "seed {seed}: the leader changed during the partition's second half");
    let (from, to) = (12_000_000_000u64, 19_900_000_000u64);
    let served = report.history.ops.iter().filter(|o| o.ret.is_some_and(|r| (from..to).contains(&r))).count() as u64;
    assert!(served >= 20, "seed {seed}: only {served} operations completed between 12 s and 19.9 s");
    (a.0, served)
}

#[test]
fn fig9a_leader_quorum_loss_five_nodes() {
    // Leader B=2; A, B, C, D keep only their links to E=5.
    let links = [(1, 2), (1, 3), (1, 4), (2, 3), (2, 4), (3, 4)];
    for seed in 0..4 {
        let (leader, _) = shape(5, &links, 2, seed);
        assert_ne!(leader, 0);
    }
}

#[test]
fn fig9b_three_node_leader_churn() {
    // Leader A=1 and C=3 cannot reach each other; B=2 is common.
    for seed in 0..4 {
        shape(3, &[(1, 3)], 1, seed);
    }
}

#[test]
fn fig9c_quorum_disconnected_node_five_nodes() {
    // Leader E=5; D=4 reaches only C=3 (Fig. 5a).
    for seed in 0..4 {
        shape(5, &[(4, 1), (4, 2), (4, 5)], 5, seed);
    }
}

#[test]
fn fig9d_quorum_connected_churners_five_nodes() {
    // A=1 cut off; B=2 / C=3 and D=4 / E=5 cannot see each other; B and C reach D and E
    // (Fig. 5b). Leader B.
    let links = [(1, 2), (1, 3), (1, 4), (1, 5), (2, 3), (4, 5)];
    for seed in 0..4 {
        shape(5, &links, 2, seed);
    }
}

#[test]
fn overload_markers_cause_at_most_one_election_each() {
    // A hair-trigger detector (the simulated load is tiny) so that markers are declared
    // under all faults: every replica starts at most one election per marker, and the
    // protocol stays safe and live.
    let opts = [
        ("slowdown_sample_ms", "50"),
        ("slowdown_samples", "4"),
        ("slowdown_threshold", "0.2"),
        ("slowdown_omega", "0"),
        ("slowdown_tp_gain", "1000"),
        ("slowdown_redeclare_ms", "2000"),
    ];
    let (mut markers_seen, mut elections_seen) = (0, 0);
    for seed in 0..150 {
        let report = must_pass(&SimConfig { params: params(&opts), ..base(seed) });
        let end = &report.probes.last().unwrap().statuses;
        let get = |s: &Status, k: &str| s.extra.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        for s in end.iter().flatten() {
            let (markers, elections) = (get(s, "overload_markers"), get(s, "marker_elections"));
            // A replica counts the markers it executed since its last restart; it can have
            // started an election for each at most once.
            assert!(
                elections <= markers,
                "seed {}: n{} started {elections} elections for {markers} markers",
                seed,
                s.id
            );
            markers_seen += markers;
            elections_seen += elections;
        }
    }
    eprintln!("markers executed {markers_seen}, marker-triggered elections {elections_seen}");
    assert!(markers_seen > 0 && elections_seen > 0, "the hair-trigger detector declared overloads");
}

/// For any registered protocol on a shape: whether the leader (node and ballot) at 12 s
/// is still the leader at 19.9 s, and how many replicas believe they lead at 19.9 s.
fn stable_under(
    protocol: &str,
    replicas: usize,
    links: &[(NodeId, NodeId)],
    leader_as: NodeId,
    seed: u64,
) -> (bool, usize) {
    let cfg = SimConfig {
        replicas,
        faults: FaultSet::none(),
        fault_phase: Duration::from_secs(20),
        // Enough to keep writing through 20 s.
        ops_per_client: 3000,
        clients: Some(3),
        script: vec![ScriptedCut { at: Duration::from_secs(2), links: links.to_vec(), leader_as: Some(leader_as) }],
        probes: vec![Duration::from_secs(12), Duration::from_millis(19_900)],
        ..SimConfig::new(registry::find(protocol).unwrap(), seed)
    };
    let r = run(&cfg);
    assert!(r.failure.is_none(), "{protocol} seed {seed}: {:?}", r.failure);
    let a = leader_of(&r.probes[0].statuses);
    let claims = r.probes[1].statuses.iter().flatten().filter(|s| s.role == Role::Leader).count();
    (a.is_some() && a == leader_of(&r.probes[1].statuses), claims)
}

#[test]
fn plain_multipaxos_keeps_churning_on_the_churn_shapes() {
    // The baseline on the same shapes. Its leaders keep changing through the partition, or,
    // because it has no heartbeat rejection (§3.1.1), a cut-off ex-leader that receives no
    // more requests never learns its ballot is stale and goes on believing it leads (a
    // second, useless "leader" that any client reaching it restarts the churn with).
    // HoliPaxos: one stable leader, and it is the only one.
    let d = [(1, 2), (1, 3), (1, 4), (1, 5), (2, 3), (4, 5)];
    for seed in 0..2 {
        let (stable, claims) = stable_under("multipaxos", 3, &[(1, 3)], 1, seed);
        assert!(!stable || claims > 1, "9b seed {seed}: stable with {claims} leader(s)");
        let (stable, claims) = stable_under("multipaxos", 5, &d, 2, seed);
        assert!(!stable || claims > 1, "9d seed {seed}: stable with {claims} leader(s)");
        assert_eq!(stable_under("holipaxos", 3, &[(1, 3)], 1, seed), (true, 1), "9b seed {seed}");
        assert_eq!(stable_under("holipaxos", 5, &d, 2, seed), (true, 1), "9d seed {seed}");
    }
}
