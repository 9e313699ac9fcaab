//! Peer authentication, the admin token, the fault switch and the connection cap, against a
//! real 3-process cluster (docs/security.md).

mod common;

use common::Cluster;
use std::time::Duration;
use synod_core::wire::{self, PeerHello, ServerMsg, CLIENT_MAGIC, PEER_MAGIC, PEER_NONCE_BYTES};
use synod_wal::FsyncMode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SECRET: &str = "a-test-cluster-secret-of-enough-length";
const TOKEN: &str = "admin-token-for-the-test";

/// One HTTP/1.0 request; returns the status code.
async fn http(addr: &str, method: &str, path: &str, token: Option<&str>, body: &str) -> u16 {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut raw)).await.unwrap().unwrap();
    let text = String::from_utf8_lossy(&raw);
    text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("bad HTTP answer {text:?}"))
}

/// Dial a peer port as an impostor that knows the cluster name and a member id but not the
/// secret; returns whether the replica closed the connection without reading on.
async fn forge_peer(addr: &str, cluster: &str, from: u32, to: u32, mac: Vec<u8>) -> bool {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut challenge = [0u8; PEER_NONCE_BYTES];
    s.read_exact(&mut challenge).await.unwrap();
    let mut bytes = PEER_MAGIC.to_vec();
    bytes.extend_from_slice(&wire::frame(&PeerHello { cluster: cluster.into(), from, incarnation: 77, to, mac }));
    // A protocol message would follow; it must never be delivered.
    bytes.extend_from_slice(&[0, 0, 0, 4, 1, 2, 3, 4]);
    let _ = s.write_all(&bytes).await;
    common::closed_within(&mut s, Duration::from_secs(20)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authenticated_peers_admin_token_fault_switch_and_connection_cap() {
    let cluster = Cluster::start(3, FsyncMode::Batch, |c| {
        c.cluster_secret = Some(SECRET.into());
        c.admin.token = Some(TOKEN.into());
        c.admin.faults = c.id != 3;
        c.max_connections = 6;
    })
    .await;
    // Peers that hold the secret form a working cluster.
    let mut client = cluster.client().await;
    client.put("k", "v1").await.unwrap();

    // An impostor claiming to be node 2, with no MAC and with a made-up one, is refused.
    let cluster_name = cluster.configs[0].cluster.clone();
    let peer1 = cluster.configs[0].me().peer_addr.to_string();
    assert!(forge_peer(&peer1, &cluster_name, 2, 1, Vec::new()).await, "hello without a MAC: closed");
    assert!(forge_peer(&peer1, &cluster_name, 2, 1, vec![0x5a; 32]).await, "hello with a forged MAC: closed");
    let log = std::fs::read_to_string(cluster.log_path(1)).unwrap();
    assert!(log.contains("sent no authentication"), "refusal logged:\n{log}");
    assert!(log.contains("failed authentication"), "refusal logged:\n{log}");
    client.put("k", "v2").await.unwrap();
    assert_eq!(client.get("k").await.unwrap().as_deref(), Some(&b"v2"[..]));

    // Admin: reading is open; changing needs the token; fault injection can be off.
    let admin1 = cluster.configs[0].me().admin_addr.to_string();
    let admin3 = cluster.configs[2].me().admin_addr.to_string();
    assert_eq!(http(&admin1, "GET", "/status", None, "").await, 200);
    assert_eq!(http(&admin1, "POST", "/fault/heal", None, "").await, 401);
    assert_eq!(http(&admin1, "POST", "/fault/heal", Some("wrong-token"), "").await, 401);
    assert_eq!(http(&admin1, "POST", "/members/remove", None, r#"{"id":3}"#).await, 401);
    assert_eq!(http(&admin1, "POST", "/fault/heal", Some(TOKEN), "").await, 200);
    assert_eq!(http(&admin3, "POST", "/fault/heal", Some(TOKEN), "").await, 403);
    assert_eq!(http(&admin3, "POST", "/fault/clock", Some(TOKEN), r#"{"offset_ms":5}"#).await, 403);

    // Connection cap on the native port of node 3: beyond max_connections a new connection
    // is told why and closed; a freed slot is reused.
    let client3 = cluster.configs[2].me().client_addr.to_string();
    let mut held = Vec::new();
    let mut refused = None;
    for _ in 0..12 {
        let mut s = TcpStream::connect(&client3).await.unwrap();
        s.write_all(CLIENT_MAGIC).await.unwrap();
        let mut buf = bytes::BytesMut::new();
        let got = tokio::time::timeout(Duration::from_millis(500), s.read_buf(&mut buf)).await;
        if let Ok(Ok(n)) = got {
            if n > 0 {
                let frame = wire::take_frame(&mut buf, 1 << 20).unwrap().expect("a whole frame");
                refused = Some(wire::decode_payload::<ServerMsg>(&frame).unwrap());
                break;
            }
        }
        held.push(s);
    }
    match refused {
        Some(ServerMsg::Refused { reason }) => assert!(reason.contains("max number of clients"), "{reason}"),
        other => panic!("expected a refusal after the cap, got {other:?} after {} connections", held.len()),
    }
    assert!(held.len() <= 6, "{} connections were admitted with max_connections = 6", held.len());
    drop(held);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut again = TcpStream::connect(&client3).await.unwrap();
    again.write_all(CLIENT_MAGIC).await.unwrap();
    let mut buf = [0u8; 16];
    let quiet = tokio::time::timeout(Duration::from_millis(500), again.read(&mut buf)).await;
    assert!(quiet.is_err(), "after the others closed, a new connection is admitted (no refusal)");

    client.put("k", "v3").await.unwrap();
    cluster.assert_running();
}
