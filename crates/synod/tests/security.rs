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
    let refusals = ["sent no authentication", "failed authentication"];
    if let Err(log) = cluster.wait_log(1, &refusals, Duration::from_secs(10)).await {
        panic!("refusals {refusals:?} logged within 10 s:\n{log}");
    }
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

/// Generate the cluster's certificates (node ids 1..=n on 127.0.0.1) under `dir`.
fn certificates(dir: &std::path::Path, n: u32) -> synod_runtime::tls::Generated {
    let local = vec!["127.0.0.1".parse().unwrap()];
    synod_runtime::tls::generate(dir, &(1..=n).map(|id| (id, local.clone())).collect::<Vec<_>>()).unwrap()
}

/// Dial a peer port over TLS with `files` (a certificate), claim to be member `from` and
/// send a frame; returns whether the replica closed the connection (and how far it got:
/// `None` when the TLS handshake itself failed).
async fn tls_impostor(addr: &str, files: &synod_runtime::tls::NodeFiles, from: u32, to: u32) -> Option<bool> {
    let tls = synod_runtime::tls::NodeTls::load(files).unwrap();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut s = match tls.peer_connector.connect(synod_runtime::tls::peer_server_name(to), tcp).await {
        Ok(s) => s,
        Err(_) => return None,
    };
    let mut challenge = [0u8; PEER_NONCE_BYTES];
    if s.read_exact(&mut challenge).await.is_err() {
        return None; // refused right after the handshake (the client certificate)
    }
    let mut bytes = PEER_MAGIC.to_vec();
    let hello = PeerHello { cluster: "synod-test".into(), from, incarnation: 77, to, mac: Vec::new() };
    bytes.extend_from_slice(&wire::frame(&hello));
    bytes.extend_from_slice(&[0, 0, 0, 4, 1, 2, 3, 4]);
    let _ = s.write_all(&bytes).await;
    let _ = s.flush().await;
    let mut rest = Vec::new();
    Some(tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut rest)).await.is_ok())
}

/// Mutual TLS between replicas, TLS and a password on the native and Redis ports, against a
/// real 3-process cluster: the cluster works for a client with the CA and the password;
/// without TLS, without the password or with a wrong one a client gets a clear refusal; a
/// peer with a certificate of another CA, without TLS, or with a member's certificate that
/// names another member is refused and logged, and nothing it sends is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_everywhere_and_native_auth() {
    const PASSWORD: &str = "the-native-and-redis-password";
    let certs_dir = tempfile::tempdir().unwrap();
    let ours = certificates(&certs_dir.path().join("cluster"), 3);
    let theirs = certificates(&certs_dir.path().join("stranger"), 3);
    let resp_ports = common::free_ports(3);
    let cluster = Cluster::start(3, FsyncMode::Batch, |c| {
        let files = &ours.nodes[c.id as usize - 1].1;
        c.tls = Some(synod_runtime::TlsConfig {
            ca: files.ca.clone(),
            cert: files.cert.clone(),
            key: files.key.clone(),
            peers: true,
            native: true,
            redis: true,
            admin: true,
        });
        c.password = Some(PASSWORD.into());
        c.admin.token = Some(TOKEN.into());
        for (m, port) in c.members.iter_mut().zip(&resp_ports) {
            m.resp_addr = Some(format!("127.0.0.1:{port}").parse().unwrap());
        }
    })
    .await;
    // With the CA and the password: a working cluster (the replicas reached each other over
    // mutual TLS to elect a leader and commit).
    let mut client = cluster.client().await;
    client.put("k", "v1").await.unwrap();
    assert_eq!(client.get("k").await.unwrap().as_deref(), Some(&b"v1"[..]));

    // Native port: no password, a wrong one, no TLS, another CA: each refused, clearly.
    let endpoints = cluster.endpoints();
    let quick =
        |o: synod_client::ClientOptions| synod_client::ClientOptions { max_retry_time: Duration::from_secs(3), ..o };
    let no_pass = quick(synod_client::ClientOptions { password: None, ..cluster.client_options() });
    let err = synod_client::Client::with_options(&endpoints, no_pass).await.unwrap_err();
    assert!(matches!(&err, synod_client::ClientError::Auth { reason, .. } if reason.starts_with("NOAUTH")), "{err}");
    let wrong = quick(synod_client::ClientOptions { password: Some("guess".into()), ..cluster.client_options() });
    let err = synod_client::Client::with_options(&endpoints, wrong).await.unwrap_err();
    assert!(err.to_string().contains("WRONGPASS"), "{err}");
    let plain = quick(synod_client::ClientOptions { tls: None, ..cluster.client_options() });
    assert!(synod_client::Client::with_options(&endpoints, plain).await.is_err(), "plain TCP to a TLS port fails");
    let other_ca = synod_client::ClientTls::from_ca_file(&theirs.ca).unwrap();
    let stranger = quick(synod_client::ClientOptions { tls: Some(other_ca), ..cluster.client_options() });
    assert!(
        synod_client::Client::with_options(&endpoints, stranger).await.is_err(),
        "a replica of another CA is not trusted"
    );

    // Peer port of node 1: another CA's certificate, plain TCP, and node 3's genuine
    // certificate claiming to be node 2 are all refused.
    let peer1 = cluster.configs[0].me().peer_addr.to_string();
    assert_eq!(tls_impostor(&peer1, &theirs.nodes[1].1, 2, 1).await, None, "another CA: handshake refused");
    let mut plain_peer = TcpStream::connect(&peer1).await.unwrap();
    let _ = plain_peer.write_all(PEER_MAGIC).await;
    assert!(
        common::closed_within(&mut plain_peer, Duration::from_secs(20)).await,
        "plain TCP to a TLS peer port: closed"
    );
    assert_eq!(
        tls_impostor(&peer1, &ours.nodes[2].1, 2, 1).await,
        Some(true),
        "node 3's certificate as node 2: closed"
    );
    let refusals = ["does not name synod-node-2", "TLS handshake failed"];
    if let Err(log) = cluster.wait_log(1, &refusals, Duration::from_secs(20)).await {
        panic!("refusals {refusals:?} logged within 20 s:\n{log}");
    }
    client.put("k", "v2").await.unwrap();
    assert_eq!(client.get("k").await.unwrap().as_deref(), Some(&b"v2"[..]));

    // Redis port over TLS, on a follower too (it forwards to the leader's native port over
    // TLS with the password): AUTH then SET/GET.
    for (i, port) in resp_ports.iter().enumerate() {
        let addr = format!("127.0.0.1:{port}");
        let cmds = format!(
            "*2\r\n$4\r\nAUTH\r\n${}\r\n{PASSWORD}\r\n*3\r\n$3\r\nSET\r\n$2\r\nrk\r\n$2\r\nr{i}\r\n*2\r\n$3\r\nGET\r\n$2\r\nrk\r\n",
            PASSWORD.len()
        );
        let expected = format!("+OK\r\n+OK\r\n$2\r\nr{i}\r\n");
        let got = common::resp_over_tls(&addr, &ours.ca, cmds.as_bytes(), expected.len()).await;
        assert_eq!(got, expected, "node {}", i + 1);
        let noauth = common::resp_over_tls(&addr, &ours.ca, b"*1\r\n$4\r\nPING\r\n", 8).await;
        assert!(noauth.starts_with("-NOAUTH"), "{noauth}");
    }

    // Admin port over HTTPS: plain HTTP is answered with a 400 that says to use HTTPS; with
    // the CA it works; the token is still required for changes; another CA is not trusted.
    let admin1 = cluster.configs[0].me().admin_addr;
    let mut plain = TcpStream::connect(admin1).await.unwrap();
    plain.write_all(format!("GET /status HTTP/1.0\r\nHost: {admin1}\r\n\r\n").as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), plain.read_to_end(&mut raw)).await.unwrap().unwrap();
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 400") && text.contains("speaks HTTPS only"), "{text}");
    let with_ca = synod_harness::http::Admin::new(admin1, Some(&ours.ca), Some(TOKEN.into())).unwrap();
    let no_token = synod_harness::http::Admin::new(admin1, Some(&ours.ca), None).unwrap();
    let other_ca = synod_harness::http::Admin::new(admin1, Some(&theirs.ca), Some(TOKEN.into())).unwrap();
    let (with_ca, no_token, other_ca) = tokio::task::spawn_blocking(move || {
        let t = Duration::from_secs(10);
        (
            (with_ca.get("/status", t).unwrap(), with_ca.post_json("/fault/heal", "", t).unwrap()),
            no_token.post_json("/fault/heal", "", t).unwrap(),
            other_ca.get("/status", t).map_err(|e| e.to_string()),
        )
    })
    .await
    .unwrap();
    assert_eq!(with_ca.0 .0, 200, "{}", with_ca.0 .1);
    assert!(with_ca.0 .1.contains("\"admin_addr\""), "{}", with_ca.0 .1);
    assert_eq!(with_ca.1 .0, 200, "POST /fault/heal with the token: {}", with_ca.1 .1);
    assert_eq!(no_token.0, 401, "POST /fault/heal without the token: {}", no_token.1);
    assert!(other_ca.is_err(), "a replica of another CA is not trusted: {other_ca:?}");
    // The harness (synod fault, synod ctl) finds HTTPS and the CA in the node config.
    let from_config = synod_harness::http::Admin::of(&cluster.configs[1]).unwrap();
    assert!(from_config.is_tls());
    let status = tokio::task::spawn_blocking(move || from_config.get("/health", Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.0, 200);
    cluster.assert_running();
}

/// Resident memory of a process, from /proc (bytes).
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/<pid>/status");
    kb * 1024
}

/// The issue's numbers: 30 Redis and 30 peer connections each send most of a 64 MiB frame
/// to one replica (3.6 GB in all). With `max_pending_bytes` = 384 MiB the replica's resident
/// memory grows by less than 1 GiB (with 512 MiB its peak was 918-1048 MiB above the start:
/// about twice the budget, too close to the bound to test); the connections beyond the budget are told so and
/// closed; and an ordinary client is still served while the others hold the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pending_request_budget_holds_against_60_connections_sending_64_mib_frames() {
    const CONNS: usize = 30;
    const SENT: usize = 60 << 20; // of a frame announced at 64 MiB - 1 KiB
    const ANNOUNCED: usize = (64 << 20) - 1024;
    let resp_ports = common::free_ports(3);
    let cluster = Cluster::start(3, FsyncMode::Batch, |c| {
        for (m, port) in c.members.iter_mut().zip(&resp_ports) {
            m.resp_addr = Some(format!("127.0.0.1:{port}").parse().unwrap());
        }
        c.max_pending_bytes = 384 << 20;
    })
    .await;
    let mut client = cluster.client().await;
    client.put("k", "v1").await.unwrap();
    let pid = cluster.children[0].as_ref().unwrap().id();
    let before = rss(pid);
    let peer1 = cluster.configs[0].me().peer_addr.to_string();
    let resp1 = format!("127.0.0.1:{}", resp_ports[0]);
    let chunk = vec![b'x'; 1 << 20];
    // Each task: a preamble announcing the big frame, then 1 MiB writes until SENT or the
    // replica closes; returns the connection (held open) and what the replica answered.
    let mut tasks = Vec::new();
    for i in 0..2 * CONNS {
        let (peer1, resp1, chunk) = (peer1.clone(), resp1.clone(), chunk.clone());
        tasks.push(tokio::spawn(async move {
            let redis = i % 2 == 0;
            let mut s = TcpStream::connect(if redis { &resp1 } else { &peer1 }).await.unwrap();
            let mut preamble = Vec::new();
            if redis {
                preamble.extend_from_slice(format!("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n${ANNOUNCED}\r\n").as_bytes());
            } else {
                let mut challenge = [0u8; PEER_NONCE_BYTES];
                s.read_exact(&mut challenge).await.unwrap();
                preamble.extend_from_slice(PEER_MAGIC);
                // No cluster secret in this cluster: a hello naming a member passes.
                let from = 2 + (i as u32 / 2) % 2;
                let hello =
                    PeerHello { cluster: "synod-test".into(), from, incarnation: 1000 + i as u64, to: 1, mac: vec![] };
                preamble.extend_from_slice(&wire::frame(&hello));
                preamble.extend_from_slice(&(ANNOUNCED as u32).to_be_bytes());
            }
            s.write_all(&preamble).await.unwrap();
            let mut sent = 0;
            while sent < SENT {
                if s.write_all(&chunk).await.is_err() {
                    break;
                }
                sent += chunk.len();
            }
            // Whatever the replica answered before closing (the Redis refusal).
            let mut answer = Vec::new();
            let _ = tokio::time::timeout(Duration::from_millis(500), s.read_to_end(&mut answer)).await;
            (s, sent, String::from_utf8_lossy(&answer).into_owned())
        }));
    }
    let mut held = Vec::new();
    let mut refused_redis = 0;
    let mut total_sent = 0;
    let mut peak = before;
    for t in tasks {
        let (s, sent, answer) = tokio::time::timeout(Duration::from_secs(300), t).await.unwrap().unwrap();
        total_sent += sent;
        if answer.contains("memory budget for pending requests exhausted") {
            refused_redis += 1;
        }
        held.push(s);
        peak = peak.max(rss(pid));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = rss(pid);
    peak = peak.max(after);
    eprintln!(
        "replica 1 RSS: before {} MiB, peak {} MiB, after {} MiB; {} MiB sent by {} connections; {refused_redis} Redis connections refused",
        before >> 20,
        peak >> 20,
        after >> 20,
        total_sent >> 20,
        2 * CONNS
    );
    assert!(refused_redis > 0, "Redis connections beyond the budget get the error");
    assert!(peak - before < 1 << 30, "RSS grew by {} MiB", (peak - before) >> 20);
    let budget = ["memory budget for pending requests exhausted"];
    assert!(cluster.wait_log(1, &budget, Duration::from_secs(10)).await.is_ok(), "refusals logged");
    // An ordinary client is still served while the budget is held by the others.
    client.put("k", "v2").await.unwrap();
    assert_eq!(client.get("k").await.unwrap().as_deref(), Some(&b"v2"[..]));
    drop(held);
    cluster.assert_running();
}
