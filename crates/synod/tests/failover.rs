//! Three real replicas: round trip, follower crash, leader crash with timed failover, and
//! catch-up of restarted replicas.

mod common;

use common::{test_params, Cluster};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use synod_client::Client;
use synod_core::NodeId;
use synod_wal::FsyncMode;

/// Put `count` fresh keys through `client`, remembering each acknowledged one.
async fn put_some(client: &mut Client, acked: &mut BTreeMap<String, String>, tag: &str, count: usize) {
    for i in 0..count {
        let (k, v) = (format!("{tag}-{i:03}"), format!("value-{tag}-{i}"));
        client.put(k.clone(), v.clone()).await.unwrap_or_else(|e| panic!("put {k}: {e}"));
        acked.insert(k, v);
    }
}

/// Every acknowledged key must read back its value (linearizable reads through the leader).
async fn assert_all_readable(client: &mut Client, acked: &BTreeMap<String, String>) {
    for (k, v) in acked {
        let got = client.get(k.clone()).await.unwrap_or_else(|e| panic!("get {k}: {e}"));
        assert_eq!(got.as_deref(), Some(v.as_bytes()), "key {k}");
    }
}

fn other_than(ids: &[NodeId], not: NodeId) -> NodeId {
    *ids.iter().find(|&&i| i != not).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_survive_crashes_and_catch_up() {
    let mut cluster = Cluster::start(3, FsyncMode::Batch, |_| {}).await;
    let mut client = cluster.client().await;
    let mut acked = BTreeMap::new();

    // Round trip, plus the other operations once.
    client.put("hello", "world").await.unwrap();
    assert_eq!(client.get("hello").await.unwrap().as_deref(), Some(&b"world"[..]));
    assert_eq!(client.get("missing").await.unwrap(), None);
    assert_eq!(
        client.cas("hello", Some("world".into()), Some("there".into())).await.unwrap(),
        (true, Some("world".into()))
    );
    assert!(client.delete("hello").await.unwrap());
    assert!(!client.delete("hello").await.unwrap());
    put_some(&mut client, &mut acked, "a", 20).await;
    assert_eq!(client.scan("a-", "a-005", 0).await.unwrap().len(), 5);

    // kill -9 a follower: the other two still form a majority.
    let leader = cluster.wait_for_leader(&[]).await;
    let follower = other_than(&[1, 2, 3], leader);
    cluster.kill9(follower);
    put_some(&mut client, &mut acked, "b", 20).await;
    assert_all_readable(&mut client, &acked).await;

    // Restart it: it catches up with what it missed.
    cluster.spawn(follower);
    let leader_index = cluster.status(leader).await.expect("leader answers").execute_index;
    let converged = cluster.wait_for_same_execute_index(leader_index).await;
    assert!(converged >= leader_index);

    // kill -9 the leader: a new one within two election timeouts.
    cluster.kill9(leader);
    let killed_at = Instant::now();
    let killed_wall = std::time::SystemTime::now();
    let new_leader = cluster.wait_for_leader(&[leader]).await;
    let failover = killed_at.elapsed();
    let bound = Duration::from_millis(2 * test_params().election_timeout_max_ms);
    eprintln!("failover from node {leader} to node {new_leader} took {failover:?} (bound {bound:?})");
    assert_ne!(new_leader, leader);
    assert!(
        failover <= bound,
        "new leader after {failover:?}, more than two election timeouts ({bound:?}); leader killed at {killed_wall:?}\n{}",
        cluster.logs()
    );

    // Every acknowledged value survived, and the cluster keeps taking writes.
    assert_all_readable(&mut client, &acked).await;
    put_some(&mut client, &mut acked, "c", 20).await;

    // The old leader comes back (from its WAL) and catches up.
    cluster.spawn(leader);
    let leader_index = cluster.status(new_leader).await.expect("new leader answers").execute_index;
    cluster.wait_for_same_execute_index(leader_index).await;
    assert_all_readable(&mut client, &acked).await;

    // The restarted replica really holds the data: make it the only way to a majority by
    // killing another one, then read everything again.
    let third = other_than(&[1, 2, 3].into_iter().filter(|&i| i != leader).collect::<Vec<_>>(), new_leader);
    cluster.kill9(third);
    assert_all_readable(&mut client, &acked).await;
}
