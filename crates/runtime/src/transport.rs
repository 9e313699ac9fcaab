//! Replica-to-replica TCP transport.
//!
//! Every replica dials every other one (one outbound connection per peer, used only for
//! sending) and accepts their dials (inbound connections, used only for receiving). So a
//! connection carries one direction of traffic and needs no request/response matching.
//!
//! Outbound: one task per peer drains a bounded queue; all frames queued at the moment are
//! coalesced into one write, which batches small messages under load without adding latency
//! when idle. A full queue (slow or dead peer) drops the message and counts it: protocols
//! tolerate loss, and the node loop must never wait for a peer. The task also reads its
//! socket, on which the peer never sends: EOF or an error there means the peer went away, so
//! the task redials at once instead of losing the next message in a dead socket. And when the
//! peer dials us (an inbound hello), it has restarted: the task replaces its connection, which
//! may be stale without our having seen a FIN, before sending anything more.
//!
//! Link emulation (delay, jitter, bandwidth, loss, block; see [`crate::link`] and
//! docs/faults.md) happens here, in the outbound task, before bytes hit the socket. While a
//! link is normal and its emulated queue empty, the task checks one atomic flag per batch and
//! otherwise runs exactly as without emulation.
//!
//! Handshake: the accepting side sends a random challenge; the dialer answers `PEER_MAGIC` and
//! a `PeerHello` naming the cluster, the sender and the receiver, with an HMAC over the
//! challenge when a cluster secret is configured ([`crate::peer_auth`]); then [`PeerFrame`]s.
//! Anything unexpected (including a failed authentication) closes that one connection with a
//! warning, before anything from it reaches the protocol.

use crate::link::{Emulator, Link};
use crate::metrics::PeerMetrics;
use crate::peer_auth::{self, Secret};
use anyhow::{anyhow, bail, Context as _};
use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;
use synod_core::wire::{self, PeerHello, PEER_MAGIC, PEER_NONCE_BYTES};
use synod_core::{MemberInfo, NodeId, Time};
use synod_tls::Stream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
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
/// An outbound connection lost sooner than this after it was made counts as a failed connect.
const STABLE_CONNECTION: Duration = Duration::from_secs(1);

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
    /// This process's incarnation, sent in every hello (see [`PeerHello::incarnation`]).
    pub incarnation: u64,
    /// The cluster secret: peers must prove they hold it ([`crate::peer_auth`]). None = no
    /// peer authentication.
    pub secret: Option<Secret>,
    /// Most inbound peer connections at once (beyond: refused and closed).
    pub max_connections: usize,
    /// Mutual TLS between replicas (`[tls] peers`): dial with this replica's certificate and
    /// check the peer's name; accept only certificates of the cluster's CA that name the
    /// member the hello claims to be. None = plain TCP.
    pub tls: Option<synod_tls::NodeTls>,
    /// The replica's memory budget for pending requests (`max_pending_bytes`), shared with
    /// the client ports.
    pub budget: crate::budget::MemBudget,
}

/// A fresh incarnation number for a replica starting now: never 0, different across restarts.
pub fn new_incarnation() -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    ((nanos as u64) ^ ((std::process::id() as u64) << 40)) | 1
}

/// Start the outbound task of `peer` in `tasks`; returns the queue handle. `link` is the
/// emulation control of this directed link (a fresh `Link::new(me, peer)` for a normal one).
pub fn spawn_outbound(
    tasks: &mut JoinSet<()>,
    identity: Identity,
    peer: NodeId,
    addr: SocketAddr,
    seed: u64,
    link: Arc<Link>,
) -> PeerSender {
    let (tx, rx) = mpsc::channel(PEER_QUEUE);
    let metrics = PeerMetrics::new(identity.me, peer);
    tasks.spawn(outbound(identity, peer, addr, rx, metrics.clone(), seed, link));
    PeerSender::new(tx, metrics)
}

/// The peers this replica accepts connections from (and counts their messages): the
/// current members. Membership changes add and remove entries ([`PeerSet`]); an inbound
/// connection from a peer that is no longer in it is closed at its next frame.
pub type PeerDirectory = Arc<RwLock<HashMap<NodeId, PeerMetrics>>>;

/// The dynamic side of the transport: when the protocol reports a new configuration
/// (`Action::MembershipChanged`), connect to the members we have no connection to and drop
/// the ones that left (their outbound task ends when its queue handle is dropped).
pub struct PeerSet {
    identity: Identity,
    seed: u64,
    /// Addresses from the config file: a member whose entry carries no address uses these.
    configured: HashMap<NodeId, SocketAddr>,
    inbound: PeerDirectory,
    /// Outbound tasks of peers added at run time (aborted when the set is dropped).
    tasks: JoinSet<()>,
    /// The current configuration with peer addresses (the admin API's `GET /members`).
    current: Arc<Mutex<Vec<(NodeId, String)>>>,
}

impl PeerSet {
    pub fn new(
        identity: Identity,
        seed: u64,
        configured: HashMap<NodeId, SocketAddr>,
        inbound: PeerDirectory,
        current: Arc<Mutex<Vec<(NodeId, String)>>>,
    ) -> PeerSet {
        PeerSet { identity, seed, configured, inbound, tasks: JoinSet::new(), current }
    }

    /// Make `peers` (the node loop's senders) match `members`.
    pub fn apply(&mut self, members: &[MemberInfo], peers: &mut HashMap<NodeId, PeerSender>) {
        let me = self.identity.me;
        let mut current = Vec::new();
        for m in members {
            let addr = match m.addr.parse::<SocketAddr>() {
                Ok(a) => Some(a),
                Err(_) if m.addr.is_empty() => self.configured.get(&m.id).copied(),
                Err(e) => {
                    warn!(member = m.id, addr = %m.addr, "membership entry carries a bad peer address ({e})");
                    self.configured.get(&m.id).copied()
                }
            };
            current.push((m.id, addr.map(|a| a.to_string()).unwrap_or_default()));
            if m.id == me || peers.contains_key(&m.id) {
                continue;
            }
            let Some(addr) = addr else {
                warn!(member = m.id, "no peer address known for a new member; not connecting");
                continue;
            };
            info!(member = m.id, %addr, "membership: connecting to a new member");
            self.inbound.write().expect("peer directory lock").insert(m.id, PeerMetrics::new(me, m.id));
            let link = Arc::new(Link::new(me, m.id));
            let sender =
                spawn_outbound(&mut self.tasks, self.identity.clone(), m.id, addr, self.seed ^ m.id as u64, link);
            peers.insert(m.id, sender);
        }
        let gone: Vec<NodeId> = peers.keys().copied().filter(|p| !members.iter().any(|m| m.id == *p)).collect();
        for p in gone {
            info!(peer = p, "membership: peer removed; closing our connections to it");
            peers.remove(&p);
            self.inbound.write().expect("peer directory lock").remove(&p);
        }
        *self.current.lock().expect("members lock") = current;
    }
}

/// Why an established outbound connection ended.
enum Ended {
    /// The queue is closed: the node is shutting down.
    Shutdown,
    /// The peer dialed us again since we connected, so it restarted and our socket is stale.
    PeerRestarted,
    /// The socket failed (EOF, read or write error, or unexpected data from the peer).
    Lost,
}

async fn outbound(
    identity: Identity,
    peer: NodeId,
    addr: SocketAddr,
    mut rx: mpsc::Receiver<PeerFrame>,
    metrics: PeerMetrics,
    seed: u64,
    link: Arc<Link>,
) {
    let mut rng = synod_core::rng_from_seed(seed);
    // Messages inside the emulated link survive reconnects, as they would on a real network
    // (the peer's TCP stack is not the link). The timer is armed only while it holds some.
    let mut emulator = Emulator::default();
    let mut scratch = BytesMut::new();
    let release = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(release);
    let mut backoff = BACKOFF_MIN;
    let mut failures = 0u64;
    let mut restarts = restart_signal(&identity.cluster, identity.me, peer).subscribe();
    let mut hello = PeerHello {
        cluster: identity.cluster.clone(),
        from: identity.me,
        incarnation: identity.incarnation,
        to: peer,
        mac: Vec::new(),
    };
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        let tcp = match TcpStream::connect(addr).await {
            Ok(s) => s,
            Err(e) => {
                failures += 1;
                // The first failure and then every 50th: a peer that is down for long should
                // not flood the log.
                if failures == 1 || failures.is_multiple_of(50) {
                    info!(peer, %addr, attempts = failures, "cannot connect to peer: {e}");
                }
                sleep_backoff(&mut backoff, &mut rng).await;
                continue;
            }
        };
        // Restarts the peer announced before this connection existed do not concern it.
        restarts.borrow_and_update();
        let _ = tcp.set_nodelay(true);
        let tls = identity.tls.as_ref().map(|t| (&t.peer_connector, synod_tls::peer_server_name(peer)));
        let mut stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, Stream::connect(tcp, tls)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                failures += 1;
                if failures == 1 || failures.is_multiple_of(50) {
                    warn!(peer, %addr, attempts = failures, "TLS handshake with peer failed: {e}");
                }
                sleep_backoff(&mut backoff, &mut rng).await;
                continue;
            }
            Err(_) => {
                warn!(peer, %addr, "no TLS handshake from peer within {HANDSHAKE_TIMEOUT:?}; reconnecting");
                continue;
            }
        };
        // The peer's challenge first; the hello answers it.
        let mut challenge = [0u8; PEER_NONCE_BYTES];
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.read_exact(&mut challenge)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                debug!(peer, %addr, "peer handshake failed (no challenge): {e}");
                sleep_backoff(&mut backoff, &mut rng).await;
                continue;
            }
            Err(_) => {
                warn!(peer, %addr, "peer sent no handshake challenge within {HANDSHAKE_TIMEOUT:?}; reconnecting");
                continue;
            }
        }
        hello.mac = match &identity.secret {
            Some(secret) => peer_auth::mac(secret, &challenge, &hello),
            None => Vec::new(),
        };
        buf.clear();
        buf.extend_from_slice(PEER_MAGIC);
        buf.extend_from_slice(&wire::frame(&hello));
        if let Err(e) = write_flush(&mut stream, &buf).await {
            debug!(peer, %addr, "peer handshake failed: {e}");
            tokio::time::sleep(backoff).await;
            continue;
        }
        info!(peer, %addr, "connected to peer");
        failures = 0;
        let connected_at = tokio::time::Instant::now();
        let (mut reader, mut writer) = stream.into_split();
        let mut probe = [0u8; 64];
        let ended = loop {
            tokio::select! {
                biased;
                Ok(()) = restarts.changed() => {
                    info!(peer, %addr, "peer restarted; replacing our connection to it");
                    break Ended::PeerRestarted;
                }
                // The peer never sends on this connection, so whatever the read yields means
                // the connection is over. Without this read a dead peer's FIN goes unnoticed
                // and the next message is written into a dead socket and lost.
                read = reader.read(&mut probe) => {
                    match read {
                        Ok(0) => info!(peer, %addr, "peer closed the connection; reconnecting"),
                        Ok(n) => warn!(peer, %addr, bytes = n, "unexpected data from peer on an outbound connection; reconnecting"),
                        Err(e) => warn!(peer, %addr, "peer connection lost: {e}; reconnecting"),
                    }
                    break Ended::Lost;
                }
                () = &mut release, if !emulator.is_empty() => {
                    buf.clear();
                    let blocked = link.spec().block;
                    emulator.release_due(&link, blocked, tokio::time::Instant::now(), &mut buf, MAX_WRITE_BYTES);
                    if let Some(next) = emulator.next_release() {
                        release.as_mut().reset(next);
                    }
                    if buf.is_empty() {
                        continue;
                    }
                    if let Err(e) = write_flush(&mut writer, &buf).await {
                        warn!(peer, %addr, "peer connection lost: {e}; reconnecting");
                        break Ended::Lost;
                    }
                    metrics.bytes_sent.increment(buf.len() as u64);
                }
                first = rx.recv() => {
                    let Some(first) = first else {
                        break Ended::Shutdown;
                    };
                    buf.clear();
                    if link.active() || !emulator.is_empty() {
                        // Emulated: everything queued enters the link now; what is due at
                        // once (no delay, idle wire) is written below, the rest by the timer.
                        let spec = link.spec();
                        let now = tokio::time::Instant::now();
                        let mut next = Some(first);
                        let mut taken = 0;
                        while let Some(f) = next {
                            encode_frame(&mut scratch, &f, identity.max_frame_bytes, peer);
                            if !scratch.is_empty() {
                                let _ = emulator.admit(&link, &spec, scratch.split().freeze(), now, &mut rng);
                            }
                            // Bounded, so a sender that keeps up with us cannot hold the task.
                            taken += 1;
                            next = if taken < PEER_QUEUE { rx.try_recv().ok() } else { None };
                        }
                        emulator.release_due(&link, spec.block, now, &mut buf, MAX_WRITE_BYTES);
                        // The queue is FIFO: its front is the next release.
                        if let Some(due) = emulator.next_release() {
                            if due != release.deadline() {
                                release.as_mut().reset(due);
                            }
                        }
                    } else {
                        encode_frame(&mut buf, &first, identity.max_frame_bytes, peer);
                        while buf.len() < MAX_WRITE_BYTES {
                            match rx.try_recv() {
                                Ok(f) => encode_frame(&mut buf, &f, identity.max_frame_bytes, peer),
                                Err(_) => break,
                            }
                        }
                    }
                    if buf.is_empty() {
                        continue;
                    }
                    if let Err(e) = write_flush(&mut writer, &buf).await {
                        warn!(peer, %addr, "peer connection lost: {e}; reconnecting");
                        break Ended::Lost;
                    }
                    metrics.bytes_sent.increment(buf.len() as u64);
                }
            }
        };
        match ended {
            Ended::Shutdown => return,
            // A connection that dies right after it was made (say, the peer rejects our
            // hello) would otherwise be redialed in a hot loop: back off as for a failed
            // connect. A connection that lived is redialed at once, so a restarted peer is
            // reachable again as soon as it listens.
            Ended::Lost if connected_at.elapsed() < STABLE_CONNECTION => {
                sleep_backoff(&mut backoff, &mut rng).await;
            }
            Ended::Lost | Ended::PeerRestarted => backoff = BACKOFF_MIN,
        }
    }
}

/// Write all of `buf` and flush: on a TLS stream the tail of the last record may wait in
/// rustls until a flush (on plain TCP the flush does nothing).
pub async fn write_flush<W: AsyncWriteExt + Unpin>(w: &mut W, buf: &[u8]) -> std::io::Result<()> {
    w.write_all(buf).await?;
    w.flush().await
}

/// Sleep `backoff` plus up to half of it in jitter, then double it (capped).
async fn sleep_backoff(backoff: &mut Duration, rng: &mut impl rand::Rng) {
    let jitter = Duration::from_micros(rng.gen_range(0..=backoff.as_micros() as u64 / 2));
    tokio::time::sleep(*backoff + jitter).await;
    *backoff = (*backoff * 2).min(BACKOFF_MAX);
}

/// Restart announcements for the outbound link (cluster, me, peer): the generation goes up
/// each time that peer completes a handshake on an inbound connection to `me`.
///
/// A peer that dials us from a new incarnation has restarted, and our outbound socket to it
/// may be stale without any FIN having reached us (its host rebooted); the first message
/// written there would be lost. The registry holds the last incarnation seen per link and
/// wakes the outbound task only when it changes: waking it on every inbound dial would make
/// two replicas replace each other's connections forever (each redial is an inbound dial on
/// the other side), which is what happened before incarnations existed. The inbound acceptor
/// and the outbound tasks are wired separately by the caller, so they meet in this
/// process-wide registry instead of through a handle. Keys are tiny and few (one per link), so
/// entries are never removed. Two replicas in one process that share cluster name and ids
/// (tests) can see each other's announcements: that costs a needless reconnect, never a
/// message.
fn restart_signal(cluster: &str, me: NodeId, peer: NodeId) -> watch::Sender<u64> {
    type Links = HashMap<(String, NodeId, NodeId), watch::Sender<u64>>;
    static LINKS: OnceLock<Mutex<Links>> = OnceLock::new();
    let mut links = LINKS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    links.entry((cluster.to_owned(), me, peer)).or_insert_with(|| watch::channel(0).0).clone()
}

/// Append `frame` to `buf` as one wire frame: the postcard encoding of [`PeerFrame`]
/// (varint `sent_at`, varint length, the message bytes), written in place rather than
/// serialized into a fresh buffer and copied (one allocation and one copy less per message;
/// `peer_frames_round_trip` checks that the bytes equal postcard's).
fn encode_frame(buf: &mut BytesMut, frame: &PeerFrame, max_frame_bytes: usize, peer: NodeId) {
    let mut head = [0u8; 2 * MAX_VARINT_BYTES];
    let mut n = put_varint(&mut head, frame.sent_at);
    n += put_varint(&mut head[n..], frame.msg.len() as u64);
    let payload_len = n + frame.msg.len();
    if payload_len > max_frame_bytes {
        // The receiver would close the connection on it; better lose this one message.
        warn!(peer, size = payload_len, limit = max_frame_bytes, "dropping peer message above max_frame_bytes");
        return;
    }
    buf.reserve(4 + payload_len);
    buf.extend_from_slice(&(payload_len as u32).to_be_bytes());
    buf.extend_from_slice(&head[..n]);
    buf.extend_from_slice(&frame.msg);
}

/// Longest LEB128 encoding of a u64 (postcard's varint).
const MAX_VARINT_BYTES: usize = 10;

/// Write `v` as postcard writes a u64 / usize (LEB128); returns the bytes written.
fn put_varint(out: &mut [u8], mut v: u64) -> usize {
    let mut i = 0;
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out[i] = byte;
            return i + 1;
        }
        out[i] = byte | 0x80;
        i += 1;
    }
}

/// Read a postcard varint u64 from the front of `buf`: (value, bytes read). Overlong or
/// overflowing encodings are refused, as postcard refuses them.
fn take_varint(buf: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &b) in buf.iter().enumerate().take(MAX_VARINT_BYTES) {
        let bits = (b & 0x7f) as u64;
        if i == MAX_VARINT_BYTES - 1 && b > 0x01 {
            return None; // more than 64 bits
        }
        v |= bits << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// Decode a [`PeerFrame`] payload without copying the message: it is a slice of `payload`
/// (postcard's own decoding copies it into a new buffer). Malformed input is an error.
fn decode_frame(payload: Bytes) -> Result<PeerFrame, wire::FrameError> {
    let malformed = |what: &str| wire::FrameError::Malformed(format!("peer frame: {what}"));
    let (sent_at, a) = take_varint(&payload).ok_or_else(|| malformed("bad sent_at"))?;
    let (len, b) = take_varint(&payload[a..]).ok_or_else(|| malformed("bad message length"))?;
    let start = a + b;
    if len != (payload.len() - start) as u64 {
        return Err(malformed("message length does not match the frame"));
    }
    Ok(PeerFrame { sent_at, msg: payload.slice(start..) })
}

/// Accept peer connections until the task is aborted; each connection gets its own task in a
/// set owned by this one, so aborting the acceptor closes them all.
pub async fn accept_peers(
    listener: TcpListener,
    identity: Identity,
    members: PeerDirectory,
    inbox: mpsc::Sender<Incoming>,
) {
    let mut conns = JoinSet::new();
    let limit = crate::conn_limit::ConnLimit::new(identity.max_connections);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, addr)) => {
                    let Some(permit) = limit.try_admit() else {
                        warn!(%addr, max = limit.max(), "refusing a peer connection: max_connections reached");
                        drop(stream);
                        continue;
                    };
                    let (identity, members, inbox) = (identity.clone(), members.clone(), inbox.clone());
                    conns.spawn(async move {
                        let _permit = permit;
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
    tcp: TcpStream,
    identity: &Identity,
    members: &PeerDirectory,
    inbox: mpsc::Sender<Incoming>,
) -> anyhow::Result<NodeId> {
    let _ = tcp.set_nodelay(true);
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let challenge = peer_auth::new_challenge();
    let acceptor = identity.tls.as_ref().map(|t| &t.peer_acceptor);
    let mut stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, Stream::accept(tcp, acceptor))
        .await
        .map_err(|_| anyhow!("no TLS handshake within {HANDSHAKE_TIMEOUT:?}"))?
        .context("TLS handshake failed (peers must present a certificate of the cluster's CA)")?;
    let hello = tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
        write_flush(&mut stream, &challenge).await.context("cannot send the handshake challenge")?;
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
    peer_auth::verify(identity.secret.as_ref(), identity.me, &challenge, &hello)?;
    let from = hello.from;
    if identity.tls.is_some() {
        // The chain was checked in the handshake; the certificate must name this member.
        synod_tls::stream_peer_is(&stream, from).with_context(|| format!("peer claiming to be member {from}"))?;
    }
    let member = members.read().expect("peer directory lock").get(&from).cloned();
    let Some(metrics) = member.filter(|_| from != identity.me) else {
        bail!("unknown peer id {from} in the handshake (not a member)");
    };
    debug!(from, "peer connected");
    let incarnation = hello.incarnation;
    let restarted = restart_signal(&identity.cluster, identity.me, from).send_if_modified(|seen| {
        let restarted = *seen != 0 && *seen != incarnation;
        *seen = incarnation;
        restarted
    });
    if restarted {
        info!(from, "peer restarted (new incarnation); our connection to it will be replaced");
    }
    let mut charge = identity.budget.charge();
    loop {
        let frame = match read_frame_charged(&mut stream, &mut buf, identity.max_frame_bytes, &mut charge).await? {
            FrameRead::Frame(frame) => frame,
            FrameRead::End => break,
            FrameRead::OverBudget(e) => bail!("peer {from}: {e}"),
        };
        let f = decode_frame(frame).with_context(|| format!("from peer {from}"))?;
        if !members.read().expect("peer directory lock").contains_key(&from) {
            bail!("peer {from} was removed from the configuration");
        }
        metrics.received.increment(1);
        if inbox.send(Incoming { from, sent_at: Time(f.sent_at), msg: f.msg }).await.is_err() {
            break; // node loop gone: shutting down
        }
    }
    Ok(from)
}

/// Read and check the 8-byte preamble of a connection.
pub async fn read_magic<R: AsyncReadExt + Unpin>(
    stream: &mut R,
    magic: &[u8; 8],
    kind: &'static str,
) -> anyhow::Result<()> {
    let mut got = [0u8; 8];
    stream.read_exact(&mut got).await.context("connection closed before the preamble")?;
    if &got != magic {
        return Err(wire::FrameError::BadMagic(kind).into());
    }
    Ok(())
}

/// `read_buf`, with a TLS peer that closes without `close_notify` (as most clients do)
/// counted as an end of stream like a TCP FIN.
async fn read_some<R: AsyncReadExt + Unpin>(stream: &mut R, buf: &mut BytesMut) -> std::io::Result<usize> {
    match stream.read_buf(buf).await {
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(0),
        other => other,
    }
}

/// What [`read_frame_charged`] read.
pub enum FrameRead {
    Frame(Bytes),
    /// A clean end of stream between frames.
    End,
    /// The connection's buffer would cross the replica's budget for pending requests.
    OverBudget(crate::budget::Exhausted),
}

/// [`read_frame`], charging the buffer's capacity to the replica's memory budget after every
/// read (docs/security.md, resource caps).
pub async fn read_frame_charged<R: AsyncReadExt + Unpin>(
    stream: &mut R,
    buf: &mut BytesMut,
    limit: usize,
    charge: &mut crate::budget::Charge,
) -> anyhow::Result<FrameRead> {
    loop {
        if let Some(frame) = wire::take_frame(buf, limit)? {
            return Ok(FrameRead::Frame(frame));
        }
        buf.reserve(16 * 1024);
        if let Err(e) = charge.set(buf.capacity()) {
            return Ok(FrameRead::OverBudget(e));
        }
        if read_some(stream, buf).await? == 0 {
            if buf.is_empty() {
                return Ok(FrameRead::End);
            }
            bail!("connection closed in the middle of a frame");
        }
    }
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
        if read_some(stream, buf).await? == 0 {
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
    fn malformed_peer_frames_are_errors() {
        let good =
            Bytes::from(postcard::to_allocvec(&PeerFrame { sent_at: 5, msg: Bytes::from_static(b"abc") }).unwrap());
        assert!(decode_frame(good.slice(..good.len() - 1)).is_err(), "truncated message");
        let mut long = good.to_vec();
        long.push(0);
        assert!(decode_frame(Bytes::from(long)).is_err(), "bytes after the message");
        assert!(decode_frame(Bytes::new()).is_err());
        assert!(decode_frame(Bytes::from(vec![0xff; 11])).is_err(), "varint above 64 bits");
        let mut over = vec![0xff; 9];
        over.push(0x02);
        assert!(decode_frame(Bytes::from(over)).is_err(), "varint overflow in the 10th byte");
        assert!(
            decode_frame(Bytes::from(vec![0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01])).is_err()
        );
    }

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
        assert_eq!(decode_frame(payload).unwrap(), f);
        // The hand-written encoding is postcard's, for every varint length; and the
        // zero-copy decoder reads postcard's bytes.
        for sent_at in [0, 1, 127, 128, 300, 1 << 35, u64::MAX] {
            for len in [0usize, 1, 127, 128, 16_384] {
                let f = PeerFrame { sent_at, msg: Bytes::from(vec![7u8; len]) };
                let mut buf = BytesMut::new();
                encode_frame(&mut buf, &f, 1 << 20, 2);
                assert_eq!(buf.freeze(), wire::frame(&f));
                let payload = Bytes::from(postcard::to_allocvec(&f).unwrap());
                assert_eq!(decode_frame(payload).unwrap(), f);
            }
        }
        // Above the limit: nothing is written.
        encode_frame(&mut buf, &PeerFrame { sent_at: 1, msg: Bytes::from(vec![0u8; 2048]) }, 1024, 2);
        assert!(buf.is_empty());
    }

    fn test_identity(me: NodeId, cluster: &str) -> Identity {
        Identity {
            me,
            cluster: cluster.to_owned(),
            max_frame_bytes: 1 << 16,
            incarnation: 100 + me as u64,
            secret: None,
            max_connections: 64,
            tls: None,
            budget: crate::budget::MemBudget::unlimited(),
        }
    }

    /// Accept one connection within a generous deadline and check its preamble.
    async fn accept_hello(listener: &TcpListener) -> TcpStream {
        let (mut stream, _) = tokio::time::timeout(Duration::from_secs(5), listener.accept())
            .await
            .expect("the outbound task dials within 5s")
            .unwrap();
        stream.write_all(&[0u8; PEER_NONCE_BYTES]).await.unwrap();
        read_magic(&mut stream, PEER_MAGIC, "peer").await.unwrap();
        stream
    }

    #[tokio::test]
    async fn an_idle_outbound_connection_closed_by_the_peer_is_redialed() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut tasks = JoinSet::new();
        let _sender =
            spawn_outbound(&mut tasks, test_identity(1, "redial-on-eof"), 2, addr, 7, Arc::new(Link::new(1, 2)));
        // The peer goes away while the link is idle: nothing is queued, nothing is written.
        drop(accept_hello(&listener).await);
        // The task notices the EOF by itself and dials again.
        let mut second = accept_hello(&listener).await;
        let mut buf = BytesMut::new();
        let hello = read_frame(&mut second, &mut buf, 1 << 16).await.unwrap().unwrap();
        assert_eq!(
            wire::decode_payload::<PeerHello>(&hello).unwrap(),
            PeerHello { cluster: "redial-on-eof".into(), from: 1, incarnation: 101, to: 2, mac: Vec::new() }
        );
    }

    #[tokio::test]
    async fn an_inbound_hello_from_a_peer_replaces_our_connection_to_it() {
        let cluster = "redial-on-inbound-hello";
        // Peer 2's listener: it keeps our first connection open, like a stale socket whose
        // FIN never arrived.
        let peer_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut tasks = JoinSet::new();
        let sender = spawn_outbound(
            &mut tasks,
            test_identity(1, cluster),
            2,
            peer_listener.local_addr().unwrap(),
            7,
            Arc::new(Link::new(1, 2)),
        );
        let mut stale = accept_hello(&peer_listener).await;

        // Our own listener, and peer 2 (restarted) dialing into it.
        let our_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let our_addr = our_listener.local_addr().unwrap();
        let members = Arc::new(RwLock::new(HashMap::from([(2, PeerMetrics::new(1, 2))])));
        let (inbox_tx, mut inbox_rx) = mpsc::channel(16);
        tasks.spawn(accept_peers(our_listener, test_identity(1, cluster), members, inbox_tx));
        // Peer 2 dials in with the incarnation we know, then redials with the same one (a
        // lost connection, not a restart): our connection to it stays.
        let dial = |incarnation: u64, seq: u64| async move {
            let mut dial_in = TcpStream::connect(our_addr).await.unwrap();
            let mut preamble = BytesMut::new();
            preamble.extend_from_slice(PEER_MAGIC);
            preamble.extend_from_slice(&wire::frame(&PeerHello {
                cluster: cluster.into(),
                from: 2,
                incarnation,
                to: 1,
                mac: Vec::new(),
            }));
            let frame = PeerFrame { sent_at: seq, msg: Bytes::from_static(b"ping") };
            encode_frame(&mut preamble, &frame, 1 << 16, 1);
            dial_in.write_all(&preamble).await.unwrap();
            dial_in
        };
        let mut conns = Vec::new();
        for (incarnation, seq) in [(10, 1), (10, 2), (11, 3)] {
            conns.push(dial(incarnation, seq).await);
            // Once this message is through, the hello has been handled.
            let got = tokio::time::timeout(Duration::from_secs(5), inbox_rx.recv()).await.unwrap().unwrap();
            assert_eq!((got.from, got.sent_at), (2, Time(seq)));
            if incarnation == 10 {
                let redial = tokio::time::timeout(Duration::from_millis(300), peer_listener.accept()).await;
                assert!(redial.is_err(), "no reconnect without a restart");
            }
        }
        let frame = PeerFrame { sent_at: 5, msg: Bytes::from_static(b"ping") };

        // Our outbound task drops the stale connection and dials again; the next message goes
        // on the new one.
        let mut fresh = accept_hello(&peer_listener).await;
        let mut buf = BytesMut::new();
        read_frame(&mut fresh, &mut buf, 1 << 16).await.unwrap().unwrap(); // hello
        sender.send(frame.clone());
        let sent = read_frame(&mut fresh, &mut buf, 1 << 16).await.unwrap().unwrap();
        assert_eq!(wire::decode_payload::<PeerFrame>(&sent).unwrap(), frame);
        // The stale connection was closed after its hello, with nothing else on it.
        let mut stale_buf = BytesMut::new();
        read_frame(&mut stale, &mut stale_buf, 1 << 16).await.unwrap().unwrap(); // hello
        assert!(read_frame(&mut stale, &mut stale_buf, 1 << 16).await.unwrap().is_none());
    }

    /// A replica with a cluster secret delivers frames only from a dialer that answered its
    /// challenge with the right MAC: a forged hello (right cluster name and a member's id,
    /// as an outsider who knows the config would send) is refused and nothing it sends
    /// reaches the inbox; our own outbound task, holding the secret, gets through.
    #[tokio::test]
    async fn a_peer_without_the_cluster_secret_is_refused() {
        let cluster = "authenticated";
        let secret = Secret::new(b"the cluster secret");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let members = Arc::new(RwLock::new(HashMap::from([(2, PeerMetrics::new(1, 2))])));
        let (inbox_tx, mut inbox_rx) = mpsc::channel(16);
        let mut tasks = JoinSet::new();
        let receiver = Identity { secret: Some(secret.clone()), ..test_identity(1, cluster) };
        tasks.spawn(accept_peers(listener, receiver, members, inbox_tx));

        for mac in [
            Vec::new(),
            vec![0u8; 32],
            peer_auth::mac(
                &Secret::new(b"guess"),
                &[0; 32],
                &PeerHello { cluster: cluster.into(), from: 2, incarnation: 9, to: 1, mac: Vec::new() },
            ),
        ] {
            let mut impostor = TcpStream::connect(addr).await.unwrap();
            let mut challenge = [0u8; PEER_NONCE_BYTES];
            impostor.read_exact(&mut challenge).await.unwrap();
            let mut preamble = BytesMut::new();
            preamble.extend_from_slice(PEER_MAGIC);
            let hello = PeerHello { cluster: cluster.into(), from: 2, incarnation: 9, to: 1, mac };
            preamble.extend_from_slice(&wire::frame(&hello));
            encode_frame(&mut preamble, &PeerFrame { sent_at: 1, msg: Bytes::from_static(b"forged") }, 1 << 16, 1);
            let _ = impostor.write_all(&preamble).await;
            // The replica closes the connection without delivering anything.
            let mut rest = Vec::new();
            let closed = tokio::time::timeout(Duration::from_secs(5), impostor.read_to_end(&mut rest)).await;
            assert!(closed.is_ok(), "the impostor's connection is closed");
            assert!(inbox_rx.try_recv().is_err(), "nothing from an unauthenticated peer is delivered");
        }

        // The real peer 2 holds the secret: its frames are delivered.
        let dialer = Identity { secret: Some(secret), ..test_identity(2, cluster) };
        let sender = spawn_outbound(&mut tasks, dialer, 1, addr, 7, Arc::new(Link::new(2, 1)));
        sender.send(PeerFrame { sent_at: 42, msg: Bytes::from_static(b"real") });
        let got = tokio::time::timeout(Duration::from_secs(5), inbox_rx.recv()).await.unwrap().unwrap();
        assert_eq!((got.from, got.sent_at, &got.msg[..]), (2, Time(42), &b"real"[..]));
    }
}
