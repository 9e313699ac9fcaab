//! Forwarding commands to the leader over the native client protocol.
//!
//! redis-cli, redis-benchmark and redis-py (outside cluster mode) do not follow `MOVED`
//! redirects, so a RESP connection on a follower hands its commands to the leader itself: the
//! *same* `Command` (same session id and sequence number) goes to the leader's native client
//! port, which is exactly what a native client would send. A retry after a failure or a
//! leader change therefore stays exactly-once: the state machine answers a repeated
//! (client, seq) with the original result.
//!
//! One multiplexed connection per target replica, shared by every RESP connection of this
//! listener: requests are written as they come, replies are routed back by (client, seq).
//! When the connection fails every waiting request is told so at once (its RESP connection
//! retries); a connection that was sent requests and has been silent since for
//! [`SILENCE_LIMIT`] is dropped the same way.
//!
//! A request may have several replies from one replica (Nezha: a fast-reply, then a
//! slow-reply): a partial reply (`Speculative`, `SlowReply`) keeps the request's route, a
//! final one removes it; routes nobody answered finally are dropped after [`ROUTE_LIFETIME`].
//! The Nezha proxy process (`crate::proxy`) sends through this forwarder too.

use bytes::BytesMut;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;
use synod_core::wire::{self, ClientMsg, ServerMsg, CLIENT_MAGIC};
use synod_core::{Command, NodeId, Reply, ReplyBody, RequestMeta};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::debug;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// A forwarding connection with requests outstanding and nothing received for this long is
/// considered dead.
pub const SILENCE_LIMIT: Duration = Duration::from_secs(5);
/// A request's route to its sender is forgotten this long after it was sent (a request
/// answered with partial replies only gets no final one).
pub const ROUTE_LIFETIME: Duration = Duration::from_secs(30);
/// Requests queued towards one replica before `send` refuses (the caller retries later).
const QUEUE: usize = 8192;

/// What comes back to the RESP connection that forwarded a command.
#[derive(Debug)]
pub enum FwdEvent {
    Reply(Reply),
    /// The command may not have reached `node` (or its reply was lost).
    Failed {
        node: NodeId,
        client: u64,
        seq: u64,
        reason: String,
    },
}

struct FwdReq {
    cmd: Command,
    meta: RequestMeta,
    back: mpsc::UnboundedSender<FwdEvent>,
}

/// Connections to the other replicas' native client ports.
pub struct Forwarder {
    addrs: HashMap<NodeId, SocketAddr>,
    max_frame: usize,
    conns: Mutex<HashMap<NodeId, mpsc::Sender<FwdReq>>>,
    security: Security,
}

/// How the forwarder reaches the native ports: TLS (`[tls] native`) and the password.
#[derive(Clone, Default)]
struct Security {
    tls: Option<synod_tls::TlsConnector>,
    password: Option<String>,
}

impl Forwarder {
    pub fn new(addrs: HashMap<NodeId, SocketAddr>, max_frame: usize) -> Forwarder {
        Forwarder { addrs, max_frame, conns: Mutex::new(HashMap::new()), security: Security::default() }
    }

    /// Dial the native ports with TLS (`tls`, checking the replica's certificate against its
    /// IP address) and authenticate with `password` (the cluster's replicas share one).
    pub fn set_security(&mut self, tls: Option<synod_tls::TlsConnector>, password: Option<String>) {
        self.security = Security { tls, password };
    }

    pub fn knows(&self, node: NodeId) -> bool {
        self.addrs.contains_key(&node)
    }

    /// Queue `cmd` for `node`; its reply (or failure) arrives on `back`. An error means it was
    /// not queued at all.
    pub fn send(
        &self,
        node: NodeId,
        cmd: Command,
        meta: RequestMeta,
        back: &mpsc::UnboundedSender<FwdEvent>,
    ) -> Result<(), String> {
        let addr = *self.addrs.get(&node).ok_or_else(|| format!("node {node} is not a member"))?;
        let tx = {
            let mut conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
            match conns.get(&node) {
                Some(tx) if !tx.is_closed() => tx.clone(),
                _ => {
                    let (tx, rx) = mpsc::channel(QUEUE);
                    tokio::spawn(run_connection(node, addr, self.max_frame, self.security.clone(), rx));
                    conns.insert(node, tx.clone());
                    tx
                }
            }
        };
        tx.try_send(FwdReq { cmd, meta, back: back.clone() }).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => format!("forwarding queue to node {node} is full"),
            mpsc::error::TrySendError::Closed(_) => format!("forwarding connection to node {node} closed"),
        })
    }
}

/// The name a replica's certificate carries for its native port at `addr`: the IP address.
fn rustls_name(addr: SocketAddr) -> synod_tls::rustls::pki_types::ServerName<'static> {
    synod_tls::rustls::pki_types::ServerName::IpAddress(addr.ip().into())
}

/// One forwarding connection: runs until it fails or the forwarder is dropped, then fails
/// whatever is outstanding or still queued.
async fn run_connection(
    node: NodeId,
    addr: SocketAddr,
    max_frame: usize,
    security: Security,
    mut rx: mpsc::Receiver<FwdReq>,
) {
    let mut waiters: Waiters = HashMap::new();
    let reason = serve(addr, max_frame, &security, &mut rx, &mut waiters).await;
    debug!(%addr, "forwarding connection closed: {reason}");
    rx.close();
    while let Ok(req) = rx.try_recv() {
        let (client, seq) = (req.cmd.client, req.cmd.seq);
        let _ = req.back.send(FwdEvent::Failed { node, client, seq, reason: reason.clone() });
    }
    for ((client, seq), (back, _)) in waiters {
        let _ = back.send(FwdEvent::Failed { node, client, seq, reason: reason.clone() });
    }
}

/// Where the replies to each (client, seq) go, and when it was sent.
type Waiters = HashMap<(u64, u64), (mpsc::UnboundedSender<FwdEvent>, Instant)>;

async fn serve(
    addr: SocketAddr,
    max_frame: usize,
    security: &Security,
    rx: &mut mpsc::Receiver<FwdReq>,
    waiters: &mut Waiters,
) -> String {
    let connect = async {
        let tcp = TcpStream::connect(addr).await?;
        let _ = tcp.set_nodelay(true);
        let tls = security.tls.as_ref().map(|c| (c, rustls_name(addr)));
        synod_tls::Stream::connect(tcp, tls).await
    };
    let mut stream = match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return format!("cannot connect to {addr}: {e}"),
        Err(_) => return format!("connecting to {addr} timed out"),
    };
    let mut preamble = CLIENT_MAGIC.to_vec();
    if let Some(password) = &security.password {
        preamble.extend_from_slice(&wire::frame(&ClientMsg::Auth { password: password.clone() }));
    }
    if let Err(e) = crate::transport::write_flush(&mut stream, &preamble).await {
        return format!("writing to {addr}: {e}");
    }
    let (mut rd, mut wr) = stream.into_split();
    let mut rbuf = BytesMut::with_capacity(16 * 1024);
    let mut wbuf = BytesMut::with_capacity(16 * 1024);
    // The first write since the last thing read: silence since then is suspicious.
    let mut unanswered_since: Option<Instant> = None;
    let mut check = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            req = rx.recv() => {
                let Some(req) = req else { return "forwarder dropped".into() };
                wbuf.clear();
                let mut next = Some(req);
                let now = Instant::now();
                unanswered_since.get_or_insert(now);
                while let Some(req) = next {
                    wbuf.extend_from_slice(&wire::frame(&ClientMsg::Request { cmd: req.cmd.clone(), meta: req.meta.clone() }));
                    waiters.insert((req.cmd.client, req.cmd.seq), (req.back, now));
                    next = if wbuf.len() < 1 << 20 { rx.try_recv().ok() } else { None };
                }
                if let Err(e) = crate::transport::write_flush(&mut wr, &wbuf).await {
                    return format!("writing to {addr}: {e}");
                }
            }
            n = rd.read_buf(&mut rbuf) => {
                match n {
                    Ok(0) => return format!("{addr} closed the connection"),
                    Ok(_) => unanswered_since = None,
                    Err(e) => return format!("reading from {addr}: {e}"),
                }
                loop {
                    match wire::take_frame(&mut rbuf, max_frame) {
                        Ok(Some(payload)) => match wire::decode_payload::<ServerMsg>(&payload) {
                            Ok(ServerMsg::Reply(r)) => {
                                let key = (r.client, r.seq);
                                let partial = matches!(r.body, ReplyBody::Speculative { .. } | ReplyBody::SlowReply { .. });
                                if partial {
                                    if let Some((back, _)) = waiters.get(&key) {
                                        let _ = back.send(FwdEvent::Reply(r));
                                    }
                                } else if let Some((back, _)) = waiters.remove(&key) {
                                    let _ = back.send(FwdEvent::Reply(r));
                                }
                            }
                            Ok(ServerMsg::Status(_)) => {}
                            Ok(ServerMsg::Refused { reason }) => return format!("{addr} refused the connection: {reason}"),
                            Err(e) => return format!("bad reply from {addr}: {e}"),
                        },
                        Ok(None) => break,
                        Err(e) => return format!("bad reply from {addr}: {e}"),
                    }
                }
            }
            _ = check.tick() => {
                if unanswered_since.is_some_and(|t| t.elapsed() > SILENCE_LIMIT) {
                    return format!("{addr} silent for {SILENCE_LIMIT:?} with requests outstanding");
                }
                waiters.retain(|_, (back, sent)| sent.elapsed() < ROUTE_LIFETIME && !back.is_closed());
            }
        }
    }
}
