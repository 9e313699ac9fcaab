//! Closed-loop throughput/latency of a 3-replica cluster in one process on loopback.
//!
//!     cargo run --release -p synod-runtime --example loopback_bench -- [never|batch|always|memory] [clients] [seconds]
//!
//! Each client is one session with one outstanding put (16-byte keys, 100-byte values) sent to
//! the leader. Prints ops/s and latency percentiles.

use bytes::{Bytes, BytesMut};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use synod_core::wire::{self, ClientMsg, ServerMsg, CLIENT_MAGIC};
use synod_core::{Command, Op, ReplyBody, Role};
use synod_runtime::{Member, NodeConfig};
use synod_wal::FsyncMode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn connect(addr: SocketAddr) -> TcpStream {
    loop {
        if let Ok(mut s) = TcpStream::connect(addr).await {
            s.set_nodelay(true).unwrap();
            s.write_all(CLIENT_MAGIC).await.unwrap();
            return s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn call(s: &mut TcpStream, buf: &mut BytesMut, msg: &ClientMsg) -> ServerMsg {
    s.write_all(&wire::frame(msg)).await.unwrap();
    loop {
        if let Some(f) = wire::take_frame(buf, 64 << 20).unwrap() {
            return wire::decode_payload(&f).unwrap();
        }
        buf.reserve(4096);
        assert!(s.read_buf(buf).await.unwrap() > 0, "connection closed");
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("batch").to_string();
    let clients: u64 = args.get(2).map_or(32, |s| s.parse().unwrap());
    let secs: u64 = args.get(3).map_or(5, |s| s.parse().unwrap());

    let dir = tempfile::tempdir().unwrap();
    let listeners: Vec<_> = (0..9).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    drop(listeners);
    let members: Vec<Member> = (0..3u32)
        .map(|i| {
            let a = &addrs[3 * i as usize..];
            Member { id: i + 1, peer_addr: a[0], client_addr: a[1], admin_addr: a[2], resp_addr: None }
        })
        .collect();
    let mut stops = Vec::new();
    for id in 1..=3u32 {
        let mut c: NodeConfig = toml::from_str(&format!("id = {id}\nmembers = []\n")).unwrap();
        c.members = members.clone();
        if mode == "memory" {
            c.in_memory = true;
        } else {
            c.fsync = mode.parse::<FsyncMode>().unwrap();
            c.data_dir = Some(dir.path().join(format!("n{id}")));
        }
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        stops.push((
            tx,
            tokio::spawn(synod_runtime::run(c, async move {
                rx.await.ok();
            })),
        ));
    }

    // Find the leader.
    let leader = 'found: loop {
        for m in &members {
            let mut s = connect(m.client_addr).await;
            if let ServerMsg::Status(st) = call(&mut s, &mut BytesMut::new(), &ClientMsg::Status).await {
                if st.role == Role::Leader {
                    break 'found m.client_addr;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    let end = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for c in 0..clients {
        tasks.push(tokio::spawn(async move {
            let mut s = connect(leader).await;
            let mut buf = BytesMut::new();
            let mut lat = Vec::new();
            let mut seq = 0;
            while Instant::now() < end {
                seq += 1;
                let key = Bytes::from(format!("k{:015}", (c * 1_000_003 + seq) % 100_000));
                let cmd = Command {
                    client: c + 1,
                    seq,
                    acked_below: seq,
                    now_ms: 0,
                    op: Op::Put { key, value: Bytes::from(vec![b'v'; 100]) },
                };
                let t = Instant::now();
                match call(&mut s, &mut buf, &ClientMsg::Request { cmd, meta: Default::default() }).await {
                    ServerMsg::Reply(r) if matches!(r.body, ReplyBody::Done(_)) => lat.push(t.elapsed()),
                    other => panic!("unexpected {other:?}"),
                }
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort();
    let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
    println!(
        "mode={mode} clients={clients} ops={} ops/s={:.0} p50={:?} p99={:?} max={:?}",
        all.len(),
        all.len() as f64 / secs as f64,
        pct(0.5),
        pct(0.99),
        all.last().unwrap()
    );
    for (tx, h) in stops {
        tx.send(()).unwrap();
        h.await.unwrap().unwrap();
    }
}
