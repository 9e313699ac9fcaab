//! Membership changes end to end (docs/design.md, "Membership"): a 3-node HoliPaxos cluster
//! under `synod local` serves writes while `synod fault add-node` starts a 4th replica that
//! joins (snapshot + log) and `synod fault remove-node 1` removes an original one. Every
//! acknowledged write must be readable afterwards and the members must end equal.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

const SYNOD: &str = env!("CARGO_BIN_EXE_synod");

fn text(o: &Output) -> String {
    format!("stdout:\n{}\nstderr:\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Client endpoints of the nodes cluster.toml lists now.
fn endpoints(file: &Path) -> String {
    let t: toml::Value = toml::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let nodes = t["nodes"].as_array().unwrap();
    nodes.iter().map(|n| n["client_addr"].as_str().unwrap().to_string()).collect::<Vec<_>>().join(",")
}

fn admin_addrs(file: &Path) -> Vec<(u64, String)> {
    let t: toml::Value = toml::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let nodes = t["nodes"].as_array().unwrap();
    nodes
        .iter()
        .map(|n| (n["id"].as_integer().unwrap() as u64, n["admin_addr"].as_str().unwrap().to_string()))
        .collect()
}

fn ctl(endpoints: &str, args: &[&str]) -> Output {
    Command::new(SYNOD).args(["ctl", "--endpoints", endpoints, "--retry-time", "10s"]).args(args).output().unwrap()
}

fn status(admin: &str) -> serde_json::Value {
    let addr: std::net::SocketAddr = admin.parse().unwrap();
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
    use std::io::{Read, Write};
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s.write_all(format!("GET /status HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    serde_json::from_str(raw.split_once("\r\n\r\n").unwrap().1).unwrap()
}

#[test]
fn add_a_fourth_node_under_load_then_remove_an_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let (mut local, file) = common::start_local(dir.path(), &["--protocol", "holipaxos", "--fsync", "never"]);
    let result = std::panic::catch_unwind(|| {
        let stop = Arc::new(AtomicBool::new(false));
        let acked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
        let load = {
            let (stop, acked, file) = (stop.clone(), acked.clone(), file.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let (k, v) = (format!("k{i}"), format!("v{i}"));
                    if ctl(&endpoints(&file), &["put", &k, &v]).status.success() {
                        acked.lock().unwrap().push((k, v));
                    }
                }
            })
        };
        std::thread::sleep(Duration::from_secs(2));
        let o = Command::new(SYNOD).args(["fault", "--cluster"]).arg(&file).arg("add-node").output().unwrap();
        assert!(o.status.success(), "add-node: {}", text(&o));
        assert!(text(&o).contains("node 4 started") && text(&o).contains("committed"), "{}", text(&o));
        std::thread::sleep(Duration::from_secs(2));
        let o =
            Command::new(SYNOD).args(["fault", "--cluster"]).arg(&file).args(["remove-node", "1"]).output().unwrap();
        assert!(o.status.success(), "remove-node: {}", text(&o));
        std::thread::sleep(Duration::from_secs(2));
        stop.store(true, Ordering::Relaxed);
        load.join().unwrap();

        let admins = admin_addrs(&file);
        let ids: Vec<u64> = admins.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, vec![2, 3, 4], "cluster.toml lists the new configuration");
        let acked = acked.lock().unwrap().clone();
        assert!(acked.len() >= 10, "the cluster kept serving: {} writes acknowledged", acked.len());
        let eps = endpoints(&file);
        for (k, v) in acked.iter().step_by((acked.len() / 25).max(1)).chain(acked.last()) {
            let o = ctl(&eps, &["get", k]);
            assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), v, "{k}: {}", text(&o));
        }
        // The members end equal: same executed index, same member list, node 4 included.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let st: Vec<serde_json::Value> = admins.iter().map(|(_, a)| status(a)).collect();
            let exec: Vec<u64> = st.iter().map(|s| s["execute_index"].as_u64().unwrap()).collect();
            let members: Vec<&str> = st.iter().map(|s| s["extra"]["members"].as_str().unwrap_or("")).collect();
            if exec.iter().all(|e| *e == exec[0]) && members.iter().all(|m| *m == "2,3,4") {
                break;
            }
            assert!(Instant::now() < deadline, "members never converged: exec {exec:?}, members {members:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    unsafe { libc::kill(local.id() as i32, libc::SIGTERM) };
    let _ = local.wait();
    if let Err(e) = result {
        for id in 1..=4 {
            let log = dir.path().join(format!("node{id}.log"));
            let t = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = t.lines().rev().take(15).collect();
            eprintln!("--- node{id}.log ---\n{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
        }
        std::panic::resume_unwind(e);
    }
}
