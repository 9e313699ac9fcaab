//! `synod scenario run` end to end on the shipped CI-sized scenario (kill -9 of the leader and
//! restart, 8 s), and `synod fault` on a running cluster: kill, restart, pause/resume, and the
//! exit codes of bad usage.

use std::path::Path;
use std::process::{Command, Output};

mod common;

const SYNOD: &str = env!("CARGO_BIN_EXE_synod");

fn scenarios() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios")
}

fn text(o: &Output) -> String {
    format!("stdout:\n{}\nstderr:\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn smoke_scenario_kills_and_restarts_the_leader() {
    let out = tempfile::tempdir().unwrap();
    let o = Command::new(SYNOD)
        .args(["scenario", "run"])
        .arg(scenarios().join("smoke.toml"))
        .arg("--out")
        .arg(out.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    for f in [
        "summary.json",
        "summary.csv",
        "timeline.csv",
        "timeline.json",
        "timeline.png",
        "cdf.png",
        "events.csv",
        "events.json",
        "windows.csv",
        "summary.txt",
        "normalized.csv",
        "normalized.png",
        "logs/node1.log",
    ] {
        let p = out.path().join(f);
        assert!(p.is_file() && std::fs::metadata(&p).unwrap().len() > 0, "{f} missing\n{}", text(&o));
    }
    let png = std::fs::read(out.path().join("timeline.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");

    // Both faults were applied, at their times, and did what they say.
    let events: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("events.json")).unwrap()).unwrap();
    let events = events.as_array().unwrap();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0]["action"], "kill leader");
    assert!(events.iter().all(|e| e["ok"] == true), "{events:?}");
    assert!(events[0]["detail"][0].as_str().unwrap().contains("(the leader)"), "{events:?}");
    assert!(events[1]["detail"][0].as_str().unwrap().starts_with("restarted node"), "{events:?}");
    for (e, at) in events.iter().zip([3.0, 5.0]) {
        let t = e["t_s"].as_f64().unwrap();
        assert!(t >= at - 0.01 && t < at + 1.0, "fault planned at {at} s applied at {t} s");
    }
    let supervisor = std::fs::read_to_string(out.path().join("logs/supervisor.log")).unwrap();
    assert!(supervisor.contains("exited") && supervisor.contains("restarted"), "{supervisor}");

    // The cluster served before the crash and again at the end (a new leader, then the
    // restarted node back): the last second of the timeline has completed operations.
    let timeline: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("timeline.json")).unwrap()).unwrap();
    let rows = timeline.as_array().unwrap();
    let ok = |r: &serde_json::Value| r["classes"].as_array().unwrap().last().unwrap()["ok"].as_u64().unwrap();
    assert!(rows.len() >= 15, "{} intervals", rows.len());
    assert!(rows[..5].iter().all(|r| ok(r) > 0), "no load before the crash");
    let tail: u64 = rows[rows.len() - 2..].iter().map(ok).sum();
    assert!(tail > 0, "no completed operation in the last second: the cluster did not recover");
    let summary = std::fs::read_to_string(out.path().join("summary.txt")).unwrap();
    assert!(summary.contains("kill leader") && summary.contains("baseline"), "{summary}");

    // Memory sampled every 0.5 s from every replica (the killed one while it ran), with the
    // log length from /metrics; per-window latency and memory; the extra plots.
    let memory = std::fs::read_to_string(out.path().join("memory.csv")).unwrap();
    let mut lines = memory.lines();
    assert!(lines.next().unwrap().starts_with("t_s,node,pid,rss_mb,log_entries"), "{memory}");
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    for node in ["1", "2", "3"] {
        let mine: Vec<&Vec<&str>> = rows.iter().filter(|r| r[1] == node).collect();
        assert!(mine.len() >= 4, "node {node}: {} samples in 8 s\n{memory}", mine.len());
        assert!(mine.iter().all(|r| r[3].parse::<f64>().unwrap() > 1.0), "RSS below 1 MB?\n{memory}");
        assert!(mine.iter().any(|r| !r[4].is_empty()), "node {node} never answered /metrics\n{memory}");
    }
    let windows = std::fs::read_to_string(out.path().join("windows.csv")).unwrap();
    assert!(windows.starts_with("window_start_s,window_end_s,throughput_ops_s,normalized,p50_ms,p99_ms"), "{windows}");
    assert!(windows.lines().nth(1).unwrap().split(',').nth(7).unwrap().parse::<f64>().unwrap() > 1.0, "{windows}");
    for f in ["latency.png", "memory.png", "windows.png"] {
        let png = std::fs::read(out.path().join(f)).unwrap();
        assert_eq!(&png[1..4], b"PNG", "{f}");
    }
}

fn fault(cluster: &Path, args: &[&str]) -> Output {
    Command::new(SYNOD).arg("fault").arg("--cluster").arg(cluster).args(args).output().unwrap()
}

#[test]
fn fault_cli_on_a_local_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let (mut local, file) = common::start_local(dir.path(), &["--fsync", "never"]);
    let result = std::panic::catch_unwind(|| {
        // Bad usage: exit 2 with a clear message.
        let o = fault(&file, &["kill", "9"]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains("no node 9"), "{}", text(&o));
        let o = fault(&file, &["partition", "quorum-connected"]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains("defined for 5 replicas"), "{}", text(&o));
        let o = fault(&dir.path().join("nope.toml"), &["heal"]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        // Restarting a running node is refused (a failure, exit 1).
        let o = fault(&file, &["restart", "1"]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(text(&o).contains("is running"), "{}", text(&o));

        // kill leader, then restart it through the supervisor.
        let o = fault(&file, &["kill", "leader"]);
        assert!(o.status.success(), "{}", text(&o));
        let said = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(said.starts_with("killed node ") && said.contains("(the leader)"), "{said}");
        let o = fault(&file, &["restart", "all"]);
        assert!(o.status.success(), "{}", text(&o));
        assert!(String::from_utf8_lossy(&o.stdout).contains("restarted node"), "{}", text(&o));
        let cluster = std::fs::read_to_string(&file).unwrap();
        assert!(!cluster.contains("state = \"exited\""), "{cluster}");

        // pause/resume: the process is stopped (T) and continued.
        let o = fault(&file, &["pause", "2"]);
        assert!(o.status.success(), "{}", text(&o));
        let o = fault(&file, &["show"]);
        assert!(String::from_utf8_lossy(&o.stdout).contains("PAUSED"), "{}", text(&o));
        let o = fault(&file, &["resume", "all"]);
        assert!(o.status.success(), "{}", text(&o));
        let o = fault(&file, &["show"]);
        assert!(!String::from_utf8_lossy(&o.stdout).contains("PAUSED"), "{}", text(&o));
    });
    // SAFETY: SIGTERM to the `synod local` we started; it stops its replicas.
    unsafe {
        libc::kill(local.id() as i32, libc::SIGTERM);
    }
    let _ = local.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

#[test]
fn scenario_check_reports_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "duration = \"10s\"\n[cluster]\nreplicas = 3\n[[schedule]]\nat = \"5s\"\naction = \"partition leader-quorum-loss\"\n").unwrap();
    let o = Command::new(SYNOD).args(["scenario", "check"]).arg(&bad).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("defined for 5 replicas, this cluster has 3"), "{}", text(&o));
    let o =
        Command::new(SYNOD).args(["scenario", "check"]).arg(scenarios().join("leader-crash.toml")).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
}
