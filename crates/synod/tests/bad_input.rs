//! Garbage, oversized frames and malformed payloads on a replica's client and peer ports
//! close that connection; the replica keeps serving.

mod common;

use common::Cluster;
use std::time::Duration;
use synod_client::ClientError;
use synod_core::wire::{self, PeerHello, CLIENT_MAGIC, PEER_MAGIC};
use synod_wal::FsyncMode;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Send `bytes` and assert that the replica closes the connection (EOF or reset) rather
/// than waiting for more or answering.
async fn assert_closed_after(addr: &str, bytes: &[u8], what: &str) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    // The replica may close before reading everything, so a failed write is fine.
    let _ = s.write_all(bytes).await;
    let outcome = common::closed_within(&mut s, Duration::from_secs(20)).await;
    assert!(outcome, "{what}: connection to {addr} still open after 20 s");
}

fn length_prefix(len: u32) -> [u8; 4] {
    len.to_be_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_oversized_frames_close_the_connection_only() {
    // A small value limit, to check that an oversized *value* is refused as Invalid too.
    let cluster = Cluster::start(3, FsyncMode::Batch, |c| c.limits.max_value_bytes = 4096).await;
    let mut client = cluster.client().await;
    client.put("before", "1").await.unwrap();

    let limit = cluster.configs[0].limits.max_frame_bytes as u32;
    for id in 1..=3u32 {
        let me = cluster.configs[id as usize - 1].me().clone();
        let (client_addr, peer_addr) = (me.client_addr.to_string(), me.peer_addr.to_string());

        // Client port.
        assert_closed_after(&client_addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP on the client port").await;
        let mut oversized = CLIENT_MAGIC.to_vec();
        oversized.extend_from_slice(&length_prefix(limit + 1));
        oversized.extend_from_slice(&[0u8; 64]);
        assert_closed_after(&client_addr, &oversized, "oversized client frame").await;
        let mut malformed = CLIENT_MAGIC.to_vec();
        malformed.extend_from_slice(&length_prefix(6));
        malformed.extend_from_slice(&[0xff; 6]);
        assert_closed_after(&client_addr, &malformed, "malformed client frame").await;

        // Peer port.
        assert_closed_after(&peer_addr, &[0xAB; 64], "garbage on the peer port").await;
        let mut oversized = PEER_MAGIC.to_vec();
        oversized.extend_from_slice(&length_prefix(u32::MAX));
        assert_closed_after(&peer_addr, &oversized, "oversized peer frame").await;
        let mut wrong_cluster = PEER_MAGIC.to_vec();
        wrong_cluster.extend_from_slice(&wire::frame(&PeerHello {
            cluster: "another-cluster".into(),
            from: 2,
            incarnation: 1,
            to: 1,
            mac: Vec::new(),
        }));
        assert_closed_after(&peer_addr, &wrong_cluster, "peer hello of another cluster").await;
        let mut bad_after_hello = PEER_MAGIC.to_vec();
        let from = if id == 1 { 2 } else { 1 };
        bad_after_hello.extend_from_slice(&wire::frame(&PeerHello {
            cluster: "synod-test".into(),
            from,
            incarnation: 1,
            to: 1,
            mac: Vec::new(),
        }));
        bad_after_hello.extend_from_slice(&length_prefix(limit + 1));
        assert_closed_after(&peer_addr, &bad_after_hello, "oversized frame after a valid peer hello").await;
    }

    // Every replica still serves, and the cluster still agrees.
    cluster.assert_running();
    for id in 1..=3 {
        assert!(cluster.status(id).await.is_some(), "node {id} stopped answering\n{}", cluster.logs());
    }
    client.put("after", "2").await.unwrap();
    assert_eq!(client.get("before").await.unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(client.get("after").await.unwrap().as_deref(), Some(&b"2"[..]));

    // A value above max_value_bytes is refused, finally, and the session keeps working.
    let err = client.put("big", vec![7u8; 5000]).await.unwrap_err();
    assert!(matches!(err, ClientError::Invalid(_)), "{err}");
    assert_eq!(client.get("big").await.unwrap(), None);
    let mut fresh = cluster.client().await;
    assert_eq!(fresh.get("after").await.unwrap().as_deref(), Some(&b"2"[..]));
}
