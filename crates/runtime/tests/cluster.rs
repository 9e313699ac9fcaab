//! A 3-replica MultiPaxos cluster in one process, on loopback: puts and gets through the
//! leader (following redirects), admin HTTP, and durability across a full restart.

mod common;

use common::{cluster_configs, http_get, wait_executed, Running, Session};
use std::time::Duration;
use synod_core::{ReplyBody, Role};
use synod_wal::FsyncMode;

/// The metrics recorder is process-wide and both tests run clusters with node ids 1..3, so
/// they would overwrite each other's per-node gauges: run them one at a time.
static CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_serve_and_survive_a_full_restart() {
    let _one_cluster_at_a_time = CLUSTER.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(3, "multipaxos", Some(dir.path()), FsyncMode::Always);
    let client_addrs: Vec<_> = configs.iter().map(|c| c.me().client_addr).collect();
    let nodes: Vec<Running> = configs.iter().cloned().map(Running::start).collect();

    // A request sent to a follower is redirected; the session follows to the leader.
    let mut s = Session::new(0x5eed, client_addrs.clone());
    for i in 0..30 {
        s.put(&format!("key{i}"), &format!("value{i}")).await;
    }
    for i in 0..30 {
        assert_eq!(s.get(&format!("key{i}")).await.as_deref(), Some(format!("value{i}").as_bytes()));
    }
    assert_eq!(s.get("missing").await, None);

    // Exactly one leader, and every replica agrees who it is.
    let mut leaders = Vec::new();
    for addr in &client_addrs {
        let st = common::RawClient::connect(*addr).await.status().await;
        if st.role == Role::Leader {
            leaders.push(st.id);
        }
    }
    assert_eq!(leaders.len(), 1, "one leader: {leaders:?}");
    let leader = leaders[0];
    // A follower answers a request with a redirect to that leader.
    let follower = configs.iter().find(|c| c.id != leader).unwrap();
    let mut raw = common::RawClient::connect(follower.me().client_addr).await;
    let cmd = synod_core::Command { client: 99, seq: 1, acked_below: 1, now_ms: 0, op: synod_core::Op::Noop };
    let reply = raw.request(cmd, Duration::from_secs(5)).await.expect("follower answers");
    assert_eq!(reply.body, ReplyBody::NotLeader { leader: Some(leader) });
    assert_eq!(reply.from, follower.id);

    // Admin HTTP of the leader.
    let admin = configs[leader as usize - 1].me().admin_addr;
    let (code, body) = http_get(admin, "/health").await;
    assert_eq!((code, body.as_str()), (200, "ok"));
    let (code, body) = http_get(admin, "/status").await;
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["role"], "leader");
    assert_eq!(v["id"], leader);
    assert_eq!(v["client_addr"], configs[leader as usize - 1].me().client_addr.to_string());
    assert!(v["commit_index"].as_u64().unwrap() >= 60, "{v}");
    let (code, metrics) = http_get(admin, "/metrics").await;
    assert_eq!(code, 200);
    let line = metrics
        .lines()
        .find(|l| l.starts_with("synod_wal_commits_total") && l.contains(&format!("node=\"{leader}\"")))
        .unwrap_or_else(|| panic!("wal commits metric in:\n{metrics}"));
    let commits: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(commits > 0.0, "{line}");
    assert!(metrics.contains("synod_peer_messages_sent_total"), "{metrics}");
    assert!(metrics.contains(&format!("synod_role{{node=\"{leader}\",role=\"leader\"}} 1")), "{metrics}");

    // Stop everything, restart on the same data dirs: acknowledged puts are still there.
    for n in nodes {
        n.stop().await.unwrap();
    }
    let nodes: Vec<Running> = configs.iter().cloned().map(Running::start).collect();
    let mut s2 = Session::new(0xbeef, client_addrs.clone());
    for i in 0..30 {
        assert_eq!(s2.get(&format!("key{i}")).await.as_deref(), Some(format!("value{i}").as_bytes()), "key{i}");
    }
    s2.put("after-restart", "yes").await;
    assert_eq!(s2.get("after-restart").await.as_deref(), Some(&b"yes"[..]));
    for n in nodes {
        n.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_follower_does_not_stall_the_cluster_and_catches_up() {
    let _one_cluster_at_a_time = CLUSTER.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(3, "multipaxos", Some(dir.path()), FsyncMode::Never);
    let client_addrs: Vec<_> = configs.iter().map(|c| c.me().client_addr).collect();
    let mut nodes: Vec<Option<Running>> = configs.iter().cloned().map(|c| Some(Running::start(c))).collect();
    let mut s = Session::new(11, client_addrs.clone());
    for i in 0..10 {
        s.put(&format!("k{i}"), "before").await;
    }
    let mut leader = None;
    for addr in &client_addrs {
        let st = common::RawClient::connect(*addr).await.status().await;
        if st.role == Role::Leader {
            leader = Some(st.id);
        }
    }
    let leader = leader.expect("a leader");
    let follower = configs.iter().find(|c| c.id != leader).unwrap().id;

    // With a follower down, the leader's sends to it queue, then drop; commits go on with
    // the remaining majority.
    nodes[follower as usize - 1].take().unwrap().stop().await.unwrap();
    for i in 0..50 {
        s.put(&format!("k{i}"), "during").await;
    }

    // Back up: it reconnects, catches up and executes everything the leader did.
    nodes[follower as usize - 1] = Some(Running::start(configs[follower as usize - 1].clone()));
    let leader_addr = configs[leader as usize - 1].me().client_addr;
    let target = common::RawClient::connect(leader_addr).await.status().await.execute_index;
    let st = wait_executed(configs[follower as usize - 1].me().client_addr, target, Duration::from_secs(20)).await;
    assert_eq!(st.leader, Some(leader));
    assert_eq!(s.get("k49").await.as_deref(), Some(&b"during"[..]));
    for n in nodes.into_iter().flatten() {
        n.stop().await.unwrap();
    }
}

/// A client that connected while only one replica was up learns the others when that replica
/// redirects it to a leader it cannot address yet. (Before, it cycled on the one replica it
/// knew until its 30 s retry budget ran out: the first `synod bench` probe of a freshly
/// started cluster sometimes hung that long on a quiet machine.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_learns_replicas_that_started_after_it_connected() {
    let _one_cluster_at_a_time = CLUSTER.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(3, "multipaxos", Some(dir.path()), FsyncMode::Always);
    let addrs: Vec<String> = configs.iter().map(|c| c.me().client_addr.to_string()).collect();

    // Only node 1 answers when the client connects: it knows no other node id.
    let first = Running::start(configs[0].clone());
    let mut client = synod_client::Client::connect(&addrs).await.expect("node 1 answers");
    first.stop().await.unwrap();

    // Nodes 2 and 3 elect one of themselves; then node 1 comes back as a follower.
    let rest: Vec<Running> = configs[1..].iter().cloned().map(Running::start).collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let leader = loop {
        let mut found = None;
        for c in &configs[1..] {
            if common::RawClient::connect(c.me().client_addr).await.status().await.role == Role::Leader {
                found = Some(c.id);
            }
        }
        if let Some(l) = found {
            break l;
        }
        assert!(tokio::time::Instant::now() < deadline, "no leader among nodes 2 and 3");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_ne!(leader, 1);
    let first = Running::start(configs[0].clone());

    // The client's home is node 1, which redirects to the leader: the put must get through
    // well within the retry budget (30 s).
    let started = std::time::Instant::now();
    let put = tokio::time::timeout(Duration::from_secs(10), client.put("k", "v")).await;
    assert!(matches!(put, Ok(Ok(()))), "put through a leader learned late: {put:?} after {:?}", started.elapsed());
    assert_eq!(client.get("k").await.unwrap().as_deref(), Some(&b"v"[..]));

    first.stop().await.unwrap();
    for n in rest {
        n.stop().await.unwrap();
    }
}
