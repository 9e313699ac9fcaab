//! Snapshots on a real (in-process, loopback) Raft cluster: the log is compacted behind
//! periodic snapshots, a follower that missed the compacted part catches up through
//! InstallSnapshot, the node loop's pause per snapshot is recorded, and a full restart
//! recovers from WAL + snapshot.

mod common;

use common::{cluster_configs, http_get, wait_executed, Running, Session};
use std::time::Duration;
use synod_core::Role;
use synod_wal::FsyncMode;

/// The sum of a metric's samples for one node (`name{node="id"...} value` lines).
fn metric(text: &str, name: &str, node: u32) -> f64 {
    let values: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| l.contains(&format!("node=\"{node}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .collect();
    assert!(!values.is_empty(), "no {name} for node {node} in:\n{text}");
    values.iter().sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lagging_follower_catches_up_from_a_snapshot_and_restart_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let mut configs = cluster_configs(3, "raft+", Some(dir.path()), FsyncMode::Never);
    for c in &mut configs {
        c.params.snapshot_every = 40;
        c.params.snapshot_keep = 10;
    }
    let client_addrs: Vec<_> = configs.iter().map(|c| c.me().client_addr).collect();
    let mut nodes: Vec<Option<Running>> = configs.iter().cloned().map(|c| Some(Running::start(c))).collect();
    let mut s = Session::new(21, client_addrs.clone());
    s.put("first", "1").await;
    let mut leader = None;
    for addr in &client_addrs {
        let st = common::RawClient::connect(*addr).await.status().await;
        if st.role == Role::Leader {
            leader = Some(st.id);
        }
    }
    let leader = leader.expect("a leader");
    let follower = configs.iter().find(|c| c.id != leader).unwrap().id;

    // The follower misses 200 commands; the others snapshot every 40 and keep only 10 behind,
    // so what it missed is no longer in any log.
    nodes[follower as usize - 1].take().unwrap().stop().await.unwrap();
    for i in 0..200 {
        s.put(&format!("k{i}"), &format!("v{i}")).await;
    }
    let admin = configs[leader as usize - 1].me().admin_addr;
    let (_, m) = http_get(admin, "/metrics").await;
    assert!(metric(&m, "synod_snapshots_total", leader) >= 3.0, "leader took snapshots:\n{m}");
    assert!(metric(&m, "synod_snapshot_pause_seconds_count", leader) >= 3.0, "pause recorded:\n{m}");
    let log_len = metric(&m, "synod_log_entries", leader);
    assert!(log_len < 100.0, "log compacted behind the snapshots, length {log_len}");

    nodes[follower as usize - 1] = Some(Running::start(configs[follower as usize - 1].clone()));
    let target = common::RawClient::connect(configs[leader as usize - 1].me().client_addr).await.status().await;
    wait_executed(configs[follower as usize - 1].me().client_addr, target.execute_index, Duration::from_secs(30)).await;
    let (_, fm) = http_get(configs[follower as usize - 1].me().admin_addr, "/metrics").await;
    let state = metric(&fm, "synod_state_machine_bytes", follower);
    assert!(state >= 200.0 * 6.0, "the follower holds the installed state ({state} bytes)");

    // Restart everything: WAL + latest snapshot bring every acknowledged write back.
    for n in nodes.into_iter().flatten() {
        n.stop().await.unwrap();
    }
    let nodes: Vec<Running> = configs.iter().cloned().map(Running::start).collect();
    let mut s2 = Session::new(22, client_addrs.clone());
    for i in (0..200).step_by(13) {
        assert_eq!(s2.get(&format!("k{i}")).await.as_deref(), Some(format!("v{i}").as_bytes()), "k{i}");
    }
    assert_eq!(s2.get("first").await.as_deref(), Some(&b"1"[..]));
    for n in nodes {
        n.stop().await.unwrap();
    }
}
