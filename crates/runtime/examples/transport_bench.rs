//! Throughput of one outbound peer link on loopback: small frames pushed as fast as the
//! queue takes them (a full queue drops, as in a replica), counted at the receiving end.
//! With a third argument the link is emulated at that many Mbit/s (docs/faults.md), which
//! shows the cost of the emulated path; without it the link is off (the fast path).
//!
//!     cargo run --release -p synod-runtime --example transport_bench -- [seconds] [msg bytes] [mbit]
use bytes::{Bytes, BytesMut};
use std::time::{Duration, Instant};
use synod_core::wire::PEER_MAGIC;
use synod_runtime::transport::{self, Identity, PeerFrame};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let secs: u64 = args.get(1).map_or(3, |s| s.parse().unwrap());
    let size: usize = args.get(2).map_or(64, |s| s.parse().unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut tasks = JoinSet::new();
    let identity = Identity {
        me: 1,
        cluster: "bench".into(),
        max_frame_bytes: 1 << 20,
        incarnation: 1,
        secret: None,
        max_connections: 16,
        tls: None,
        budget: synod_runtime::budget::MemBudget::unlimited(),
    };
    let link = std::sync::Arc::new(synod_runtime::link::Link::new(1, 2));
    if let Some(mbit) = args.get(3) {
        link.set(synod_runtime::link::LinkSpec { bandwidth_mbit: Some(mbit.parse().unwrap()), ..Default::default() });
    }
    let sender = transport::spawn_outbound(&mut tasks, identity, 2, listener.local_addr().unwrap(), 7, link);
    let (mut stream, _) = listener.accept().await.unwrap();
    stream.write_all(&[0u8; synod_core::wire::PEER_NONCE_BYTES]).await.unwrap(); // the challenge
    transport::read_magic(&mut stream, PEER_MAGIC, "peer").await.unwrap();
    let mut buf = BytesMut::new();
    transport::read_frame(&mut stream, &mut buf, 1 << 20).await.unwrap().unwrap();
    let msg = Bytes::from(vec![7u8; size]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let producer = tokio::spawn(async move {
        let mut i = 0u64;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            sender.send(PeerFrame { sent_at: i, msg: msg.clone() });
            i += 1;
            if i.is_multiple_of(256) {
                tokio::task::yield_now().await;
            }
        }
        i
    });
    let started = Instant::now();
    let mut got = 0u64;
    while started.elapsed() < Duration::from_secs(secs) {
        transport::read_frame(&mut stream, &mut buf, 1 << 20).await.unwrap().unwrap();
        got += 1;
    }
    let el = started.elapsed().as_secs_f64();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent = producer.await.unwrap();
    println!("size={size} received/s={:.0} offered={sent}", got as f64 / el);
}
