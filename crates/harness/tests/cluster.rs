//! Real clusters through the library alone: a three-replica cluster started, hurt and stopped
//! with the supervisor ([`Cluster`]), `cluster.toml` ([`ClusterFile`]) and the nemesis
//! ([`execute`]); and the shipped smoke scenario run with [`run_scenario`].
//!
//! This test binary is its own replica executable (`harness = false`, so it has its own
//! `main`): [`Cluster`] starts `<exe> server --config nodeN.toml [--join]` with the running
//! executable when [`Spec::server_exe`] is None, and run that way this binary serves one
//! replica with `synod_runtime`, as `synod server` does. No synod binary needs to be built.

use std::path::Path;
use std::time::{Duration, Instant};
use synod_core::{NodeId, ProtocolParams};
use synod_harness::cluster::{Cluster, ClusterFile, NodeState, Ports, Spec};
use synod_harness::nemesis::{execute, find_leader, process_alive, Action, NodeOrAll};
use synod_harness::scenario::{run_scenario, Scenario};
use synod_runtime::NodeConfig;
use synod_wal::FsyncMode;

/// Upper bound for anything that "should happen soon" on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("server") {
        std::process::exit(serve(&args[1..]));
    }
    let tests: [(&str, fn()); 2] = [
        (
            "a_killed_leader_is_replaced_and_restarted_through_the_nemesis",
            a_killed_leader_is_replaced_and_restarted_through_the_nemesis,
        ),
        ("the_smoke_scenario_runs_through_the_library", the_smoke_scenario_runs_through_the_library),
    ];
    // Like libtest: arguments that are not options filter the tests by name.
    let filter: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    for (name, test) in tests {
        if filter.iter().all(|f| name.contains(f.as_str())) {
            test();
            println!("test {name} ... ok");
        } else {
            println!("test {name} ... filtered out");
        }
    }
}

/// `server --config FILE [--join]`: one replica until SIGTERM or SIGINT.
fn serve(args: &[String]) -> i32 {
    let config = match args {
        [flag, path, rest @ ..] if flag == "--config" && rest.iter().all(|a| a == "--join") => path,
        _ => {
            eprintln!("usage: server --config FILE [--join], got {args:?}");
            return 2;
        }
    };
    let join = args.iter().any(|a| a == "--join");
    let config = match NodeConfig::load(Path::new(config)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let shutdown = async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    };
    let result = runtime.block_on(async move {
        match join {
            true => synod_runtime::run_joining(config, shutdown).await,
            false => synod_runtime::run(config, shutdown).await,
        }
    });
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    }
}

/// The ids `cluster.toml` lists as running.
fn now_running(file: &Path) -> Vec<NodeId> {
    let (_, c) = ClusterFile::load(file).unwrap();
    c.nodes.iter().filter(|n| n.state == NodeState::Running).map(|n| n.id).collect()
}

/// Poll `f` until it returns Some, or panic saying what did not happen.
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn a_killed_leader_is_replaced_and_restarted_through_the_nemesis() {
    let dir = tempfile::tempdir().unwrap();
    let spec = Spec {
        nodes: 3,
        protocol: "multipaxos".into(),
        data_dir: Some(dir.path().join("cluster")),
        in_memory: false,
        fsync: FsyncMode::Never,
        ports: Ports::Free,
        log_level: "info".into(),
        params: ProtocolParams {
            heartbeat_ms: 100,
            election_timeout_min_ms: 600,
            election_timeout_max_ms: 1000,
            ..Default::default()
        },
        server_exe: None,
        tls: false,
        extra_certs: Vec::new(),
        password: None,
    };
    let cluster = Cluster::start(&spec).unwrap_or_else(|e| panic!("starting the cluster: {e}"));
    let file = cluster.file_path.clone();
    assert_eq!(cluster.client_endpoints().len(), 3);

    let (_, c) = ClusterFile::load(&cluster.dir).unwrap();
    assert_eq!(c.supervisor_pid, std::process::id());
    assert_eq!(c.ids(), vec![1, 2, 3]);
    assert!(c.nodes.iter().all(|n| n.state == NodeState::Running && n.starts == 1), "{c:?}");
    let first_pids: Vec<u32> = c.nodes.iter().map(|n| n.pid.expect("a running node has a pid")).collect();
    assert!(first_pids.iter().all(|&p| process_alive(p)));

    // Supervise on a thread, as a scenario run does: exits are reaped and restart requests
    // served while the nemesis works on cluster.toml from here.
    let supervisor = cluster.supervise_in_background();

    let leader: NodeId = wait_for("a leader", || find_leader(&c).ok());
    let out = execute(&file, &Action::parse_words("kill leader").unwrap()).unwrap_or_else(|e| panic!("kill: {e}"));
    // `leader` resolves again inside execute; an election in between is possible but rare.
    let killed: NodeId = out[0]
        .strip_prefix("killed node ")
        .and_then(|r| r.split_whitespace().next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("{out:?}"));
    assert!(out[0].contains("(the leader)") && out[0].contains("SIGKILL"), "{out:?} (leader was {leader})");

    // The supervisor notices the exit; the other two elect a leader among themselves.
    wait_for("cluster.toml marking the killed node exited", || {
        let (_, now) = ClusterFile::load(&file).ok()?;
        let n = now.node(killed).ok()?;
        (n.state == NodeState::Exited && n.pid.is_none()).then_some(())
    });
    assert!(supervisor.events().iter().any(|e| e.starts_with(&format!("node {killed} (pid "))));
    // (Right after the kill the survivors still name the old leader, until they time it out.)
    let new_leader = wait_for("a new leader", || {
        let (_, now) = ClusterFile::load(&file).ok()?;
        find_leader(&now).ok().filter(|&l| l != killed)
    });
    assert!(now_running(&file).contains(&new_leader));

    // Restart through the nemesis: a request to the supervisor thread, back from its WAL.
    let out =
        execute(&file, &Action::Restart { node: NodeOrAll::Id(killed) }).unwrap_or_else(|e| panic!("restart: {e}"));
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(
        out[0].starts_with(&format!("restarted node {killed} (pid ")) && out[0].ends_with("from its WAL"),
        "{out:?}"
    );
    let (_, now) = ClusterFile::load(&file).unwrap();
    assert_eq!(now.node(killed).unwrap().starts, 2);
    assert!(now.nodes.iter().all(|n| n.state == NodeState::Running), "{now:?}");

    // `show`: a header and one line per replica, all running again.
    let shown = execute(&file, &Action::Show).unwrap();
    assert_eq!(shown.len(), 4, "{shown:?}");
    assert!(shown[1..].iter().all(|l| l.contains(": pid ")), "{shown:?}");

    // Stopping the supervisor stops every replica and says so in cluster.toml.
    let events = supervisor.stop();
    assert!(events.iter().any(|e| e.starts_with(&format!("node {killed} restarted (pid "))), "{events:?}");
    let (_, end) = ClusterFile::load(&file).unwrap();
    assert!(end.nodes.iter().all(|n| n.state == NodeState::Exited && n.pid.is_none()), "{end:?}");
    let last_pids: Vec<u32> = now.nodes.iter().filter_map(|n| n.pid).collect();
    assert!(last_pids.iter().chain(&first_pids).all(|&p| !process_alive(p)), "a replica outlived the cluster");
}

/// scenarios/smoke.toml (3 x MultiPaxos, kill the leader at 3 s, restart it at 5 s of 8 s):
/// both faults applied, the outputs written.
fn the_smoke_scenario_runs_through_the_library() {
    let out = tempfile::tempdir().unwrap();
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/smoke.toml");
    let mut s = Scenario::load(&file, 1.0).unwrap_or_else(|e| panic!("{e:#}"));
    s.out = out.path().to_path_buf();
    assert_eq!(s.server_exe, None, "the replicas are this binary");
    run_scenario(&s).unwrap_or_else(|e| panic!("{e:#}"));

    for f in ["summary.txt", "events.json", "windows.csv", "normalized.csv", "memory.csv", "logs/supervisor.log"] {
        assert!(out.path().join(f).is_file(), "{f} missing");
    }
    let events: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("events.json")).unwrap()).unwrap();
    let events = events.as_array().unwrap();
    let actions: Vec<&str> = events.iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["kill leader", "restart all"], "{events:?}");
    assert!(events.iter().all(|e| e["ok"] == true), "{events:?}");
    let summary = std::fs::read_to_string(out.path().join("summary.txt")).unwrap();
    assert!(summary.starts_with("scenario smoke: "), "{summary}");
    assert!(summary.contains("baseline before the first fault"), "{summary}");
    assert!(summary.contains(" s kill leader: lowest interval"), "{summary}");
}
