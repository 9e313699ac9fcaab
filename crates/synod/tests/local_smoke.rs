//! `synod local` starts a working cluster that `synod ctl` can use, and SIGTERM stops every
//! replica it started.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;

const SYNOD: &str = env!("CARGO_BIN_EXE_synod");

fn ctl(endpoints: &str, args: &[&str]) -> Output {
    Command::new(SYNOD).args(["ctl", "--endpoints", endpoints]).args(args).output().expect("run synod ctl")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn alive(pid: i32) -> bool {
    // A process that has exited but not been reaped is a zombie: gone for our purposes.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'),
        Err(_) => false,
    }
}

#[test]
fn local_cluster_serves_ctl_and_stops_on_sigterm() {
    let base = common::free_base_port(3);
    let dir = tempfile::tempdir().unwrap();
    let mut local = Command::new(SYNOD)
        .args(["local", "--nodes", "3", "--base-port", &base.to_string(), "--data-dir"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn synod local");

    // Read the table: one row per node with its pid, then the example command.
    let (tx, rx) = mpsc::channel();
    let out = local.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut pids = Vec::new();
    let mut example = None;
    let start = Instant::now();
    while example.is_none() {
        let line = rx.recv_timeout(Duration::from_secs(90)).unwrap_or_else(|e| {
            let _ = local.kill();
            panic!("synod local printed no table within 90 s ({e})")
        });
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() >= 4 && cols[0].parse::<u32>().is_ok() {
            pids.push(cols[1].parse::<i32>().expect("pid column"));
        }
        if line.contains("synod ctl --endpoints") && line.contains(" put ") {
            example = Some(line);
        }
        assert!(start.elapsed() < Duration::from_secs(120));
    }
    assert_eq!(pids.len(), 3, "one table row per node");
    let example = example.unwrap();
    let endpoints = format!("127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}", base + 101, base + 102, base + 103);
    assert!(example.contains(&endpoints), "{example}");
    for p in &pids {
        assert!(alive(*p), "replica pid {p} is not running");
    }

    // The printed example works, and so do get and status.
    let put = ctl(&endpoints, &["put", "hello", "world"]);
    assert!(put.status.success(), "{put:?}");
    assert_eq!(stdout(&put), "OK");
    let get = ctl(&endpoints, &["get", "hello"]);
    assert!(get.status.success(), "{get:?}");
    assert_eq!(stdout(&get), "world");
    let missing = ctl(&endpoints, &["get", "nope"]);
    assert!(missing.status.success());
    assert_eq!(stdout(&missing), "(nil)");
    let cas = ctl(&endpoints, &["cas", "--absent", "fresh", "v1"]);
    assert_eq!(stdout(&cas), "OK");
    let cas = ctl(&endpoints, &["cas", "fresh", "wrong", "v2"]);
    assert_eq!(cas.status.code(), Some(1));
    assert_eq!(stdout(&cas), "FAILED, current value: v1");
    let scan = ctl(&endpoints, &["scan", "", ""]);
    assert_eq!(stdout(&scan), "fresh\tv1\nhello\tworld");

    let status = ctl(&endpoints, &["status"]);
    assert!(status.status.success(), "{status:?}");
    let table = stdout(&status);
    assert_eq!(table.lines().count(), 4, "{table}");
    assert_eq!(table.lines().filter(|l| l.contains(" leader ")).count(), 1, "{table}");
    let json = ctl(&endpoints, &["status", "-o", "json"]);
    let rows: serde_json::Value = serde_json::from_slice(&json.stdout).expect("status -o json is JSON");
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|r| r["up"] == true && r["status"]["protocol"] == "multipaxos"), "{rows:?}");

    // SIGTERM: `synod local` stops every replica and exits cleanly.
    // SAFETY: kill(2) on our own, unreaped child.
    assert_eq!(unsafe { libc::kill(local.id() as i32, libc::SIGTERM) }, 0);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = local.try_wait().unwrap() {
            break s;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "synod local did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "synod local exited with {status}");
    for p in &pids {
        let start = Instant::now();
        while alive(*p) {
            assert!(start.elapsed() < Duration::from_secs(30), "replica pid {p} survived synod local");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // The status of a stopped cluster: every node down, exit code 1.
    let down = ctl(&endpoints, &["--timeout", "500ms", "status"]);
    assert_eq!(down.status.code(), Some(1));
    assert_eq!(stdout(&down).lines().filter(|l| l.contains(" down ")).count(), 3, "{}", stdout(&down));
}
