//! Replica-to-replica TCP transport.
//!
//! Every replica dials every other one (one outbound connection per peer, used only for
//! sending) and accepts their dials (inbound connections, used only for receiving). So a
//! connection carries one direction of traffic and needs no request/response matching.
//!
//! Outbound: one task per peer drains a bounded queue; all frames queued at the moment are
//! coalesced into one write, which batches small messages under load without adding latency
//! when idle. A full queue (slow or dead peer) drops the message and counts it: protocols
//! tolerate loss, and the node loop must never wait for a peer.
//!
//! Inbound: `PEER_MAGIC`, a `PeerHello` naming the cluster and the sender, then [`PeerFrame`]s.
//! Anything unexpected closes that one connection with a warning.

use crate::metrics::PeerMetrics;
use anyhow::{anyhow, bail, Context as _};
use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use synod_core::wire::{self, PeerHello, PEER_MAGIC};
use synod_core::{NodeId, Time};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

/// One protocol message on a peer connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerFrame {
    /// The sender's clock (nanoseconds) when the message was released.
    pub sent_at: u64,
    pub msg: Bytes,
}

/// A message received from a peer, on its way to the node loop.
#[derive(Debug)]
pub struct Incoming {
    pub from: NodeId,
    pub sent_at: Time,
    pub msg: Bytes,
}

/// Messages queued per peer before new ones are dropped.
pub const PEER_QUEUE: usize = 8192;
/// Most bytes coalesced into one write.
const MAX_WRITE_BYTES: usize = 1 << 20;
/// Longest wait for the preamble of an inbound connection.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The node loop's handle on one peer's outbound queue.
pub struct PeerSender {
    tx: mpsc::Sender<PeerFrame>,
    metrics: PeerMetrics,
}

impl PeerSender {
    /// A handle on an existing queue (the outbound task, or a test, owns the receiver).
    pub fn new(tx: mpsc::Sender<PeerFrame>, metrics: PeerMetrics) -> Self {
        PeerSender { tx, metrics }
    }

    /// Queue a message; never waits. A full queue drops it (counted).
    pub fn send(&self, frame: PeerFrame) {
        match self.tx.try_send(frame) {
            Ok(()) => self.metrics.sent.increment(1),
            Err(_) => self.metrics.dropped.increment(1),
        }
    }
}

/// Who we are, as told to peers in the handshake.
#[derive(Clone, Debug)]
pub struct Identity {
    pub me: NodeId,
    pub cluster: String,
    pub max_frame_bytes: usize,
}

/// Start the outbound task of `peer` in `tasks`; returns the queue handle.
pub fn spawn_outbound(
    tasks: &mut JoinSet<()>,
    identity: Identity,
    peer: NodeId,
    addr: SocketAddr,
    seed: u64,
) -> PeerSender {
    let (tx, rx) = mpsc::channel(PEER_QUEUE);
    let metrics = PeerMetrics::new(identity.me, peer);
    tasks.spawn(outbound(identity, peer, addr, rx, metrics.clone(), seed));
    PeerSender::new(tx, metrics)
}

async fn outbound(
    identity: Identity,
    peer: NodeId,
    addr: SocketAddr,
    mut rx: mpsc::Receiver<PeerFrame>,
    metrics: PeerMetrics,
    seed: u64,
) {
    let mut rng = synod_core::rng_from_seed(seed);
    let mut backoff = BACKOFF_MIN;
    let mut failures = 0u64;
    let hello = wire::frame(&PeerHello { cluster: identity.cluster.clone(), from: identity.me });
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        let mut stream = match TcpStream::connect(addr).await {
            Ok(s) => s,
            Err(e) => {
                failures += 1;
                // The first failure and then every 50th: a peer that is down for long should
                // not flood the log.
                if failures == 1 || failures.is_multiple_of(50) {
                    info!(peer, %addr, attempts = failures, "cannot connect to peer: {e}");
                }
                let jitter = {
                    use rand::Rng as _;
                    Duration::from_micros(rng.gen_range(0..=backoff.as_micros() as u64 / 2))
                };
                tokio::time::sleep(backoff + jitter).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        buf.clear();
        buf.extend_from_slice(PEER_MAGIC);
        buf.extend_from_slice(&hello);
        if let Err(e) = stream.write_all(&buf).await {
            debug!(peer, %addr, "peer handshake failed: {e}");
            tokio::time::sleep(backoff).await;
            continue;
        }
        info!(peer, %addr, "connected to peer");
        backoff = BACKOFF_MIN;
        failures = 0;
        loop {
            let Some(first) = rx.recv().await else {
                return; // the node is shutting down
            };
            buf.clear();
            encode_frame(&mut buf, &first, identity.max_frame_bytes, peer);
            while buf.len() < MAX_WRITE_BYTES {
                match rx.try_recv() {
                    Ok(f) => encode_frame(&mut buf, &f, identity.max_frame_bytes, peer),
                    Err(_) => break,
                }
            }
            if buf.is_empty() {
                continue;
            }
            if let Err(e) = stream.write_all(&buf).await {
                warn!(peer, %addr, "peer connection lost: {e}; reconnecting");
                break;
            }
            metrics.bytes_sent.increment(buf.len() as u64);
        }
    }
}

fn encode_frame(buf: &mut BytesMut, frame: &PeerFrame, max_frame_bytes: usize, peer: NodeId) {
    let payload = postcard::to_allocvec(frame).expect("peer frames serialize");
    if payload.len() > max_frame_bytes {
        // The receiver would close the connection on it; better lose this one message.
        warn!(peer, size = payload.len(), limit = max_frame_bytes, "dropping peer message above max_frame_bytes");
        return;
    }
    wire::put_frame(buf, &payload);
}

/// Accept peer connections until the task is aborted; each connection gets its own task in a
/// set owned by this one, so aborting the acceptor closes them all.
pub async fn accept_peers(
    listener: TcpListener,
    identity: Identity,
    members: Arc<HashMap<NodeId, PeerMetrics>>,
    inbox: mpsc::Sender<Incoming>,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, addr)) => {
                    let (identity, members, inbox) = (identity.clone(), members.clone(), inbox.clone());
                    conns.spawn(async move {
                        match serve_peer(stream, &identity, &members, inbox).await {
                            Ok(from) => debug!(%addr, from, "peer connection closed"),
                            Err(e) => warn!(%addr, "closing peer connection: {e:#}"),
                        }
                    });
                }
                Err(e) => {
                    warn!("peer listener: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next() => {}
        }
    }
}

/// Read one inbound peer connection to its end. Returns the peer id on a clean close.
async fn serve_peer(
    mut stream: TcpStream,
    identity: &Identity,
    members: &HashMap<NodeId, PeerMetrics>,
    inbox: mpsc::Sender<Incoming>,
) -> anyhow::Result<NodeId> {
    let _ = stream.set_nodelay(true);
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let hello = tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
        read_magic(&mut stream, PEER_MAGIC, "peer").await?;
        let frame = read_frame(&mut stream, &mut buf, identity.max_frame_bytes)
            .await?
            .ok_or_else(|| anyhow!("connection closed before the peer hello"))?;
        wire::decode_payload::<PeerHello>(&frame).context("bad peer hello")
    })
    .await
    .map_err(|_| anyhow!("no peer handshake within {HANDSHAKE_TIMEOUT:?}"))??;
    if hello.cluster != identity.cluster {
        bail!("peer {} belongs to cluster {:?}, this node to {:?}", hello.from, hello.cluster, identity.cluster);
    }
    let from = hello.from;
    let Some(metrics) = members.get(&from).filter(|_| from != identity.me) else {
        bail!("unknown peer id {from} in the handshake");
    };
    debug!(from, "peer connected");
    while let Some(frame) = read_frame(&mut stream, &mut buf, identity.max_frame_bytes).await? {
        let f: PeerFrame = wire::decode_payload(&frame).with_context(|| format!("from peer {from}"))?;
        metrics.received.increment(1);
        if inbox.send(Incoming { from, sent_at: Time(f.sent_at), msg: f.msg }).await.is_err() {
            break; // node loop gone: shutting down
        }
    }
    Ok(from)
}

/// Read and check the 8-byte preamble of a connection.
pub async fn read_magic(stream: &mut TcpStream, magic: &[u8; 8], kind: &'static str) -> anyhow::Result<()> {
    let mut got = [0u8; 8];
    stream.read_exact(&mut got).await.context("connection closed before the preamble")?;
    if &got != magic {
        return Err(wire::FrameError::BadMagic(kind).into());
    }
    Ok(())
}

/// Read the next frame; `None` on a clean end of stream between frames.
pub async fn read_frame<R: AsyncReadExt + Unpin>(
    stream: &mut R,
    buf: &mut BytesMut,
    limit: usize,
) -> anyhow::Result<Option<Bytes>> {
    loop {
        if let Some(frame) = wire::take_frame(buf, limit)? {
            return Ok(Some(frame));
        }
        buf.reserve(16 * 1024);
        if stream.read_buf(buf).await? == 0 {
            if buf.is_empty() {
                return Ok(None);
            }
            bail!("connection closed in the middle of a frame");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_peer_queue_drops_instead_of_waiting() {
        let (tx, mut rx) = mpsc::channel(2);
        let sender = PeerSender::new(tx, PeerMetrics::new(1, 2));
        for i in 0..5u64 {
            sender.send(PeerFrame { sent_at: i, msg: Bytes::new() }); // never blocks
        }
        assert_eq!(rx.try_recv().unwrap().sent_at, 0);
        assert_eq!(rx.try_recv().unwrap().sent_at, 1);
        assert!(rx.try_recv().is_err(), "messages beyond the queue's capacity were dropped");
    }

    #[test]
    fn peer_frames_round_trip() {
        let f = PeerFrame { sent_at: 123_456_789, msg: Bytes::from_static(b"hello") };
        let mut buf = BytesMut::new();
        encode_frame(&mut buf, &f, 1024, 2);
        let payload = wire::take_frame(&mut buf, 1024).unwrap().unwrap();
        assert_eq!(wire::decode_payload::<PeerFrame>(&payload).unwrap(), f);
        // Above the limit: nothing is written.
        encode_frame(&mut buf, &PeerFrame { sent_at: 1, msg: Bytes::from(vec![0u8; 2048]) }, 1024, 2);
        assert!(buf.is_empty());
    }
}
