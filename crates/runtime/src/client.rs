//! The native client listener: `CLIENT_MAGIC`, then `ClientMsg` frames in and `ServerMsg`
//! frames out, on one connection per client.
//!
//! Requests travel to the node loop through one bounded inbox shared by all connections; when
//! it is full a connection stops reading its socket (TCP backpressure) rather than dropping a
//! request. Replies come back through a per-connection queue, and a writer coalesces whatever
//! is queued into one write.

use crate::metrics::NodeMetrics;
use crate::transport::{read_frame, read_frame_charged, read_magic, write_flush, FrameRead};
use anyhow::Context as _;
use bytes::BytesMut;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use synod_core::wire::{self, ClientMsg, ServerMsg, CLIENT_MAGIC};
use synod_core::{Command, Limits, NodeId, Reply, ReplyBody, Status};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tracing::{debug, warn};

/// Client requests waiting for the node loop, across all connections.
pub const CLIENT_INBOX: usize = 4096;
/// Replies queued per connection before further ones are dropped (the client retries).
pub const REPLY_QUEUE: usize = 4096;
const MAX_WRITE_BYTES: usize = 1 << 20;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What client connections tell the node loop.
#[derive(Debug)]
pub enum ClientInput {
    /// A new connection and where its replies go.
    Open {
        conn: u64,
        replies: mpsc::Sender<ServerMsg>,
    },
    Request {
        conn: u64,
        cmd: Command,
        meta: synod_core::RequestMeta,
    },
    Closed {
        conn: u64,
    },
    /// A membership change from the admin API; the answer goes to `conn` with `seq == id`.
    Reconfigure {
        conn: u64,
        id: u64,
        change: synod_core::MemberChange,
    },
}

#[derive(Clone)]
pub struct ClientShared {
    pub me: NodeId,
    pub limits: Limits,
    pub inbox: mpsc::Sender<ClientInput>,
    pub status: watch::Receiver<Status>,
    pub metrics: NodeMetrics,
    pub next_conn: Arc<AtomicU64>,
    /// Most client connections at once; beyond it a connection gets `ServerMsg::Refused`.
    pub limit: crate::conn_limit::ConnLimit,
    /// TLS on this port (`[tls] native`). None = plain TCP.
    pub tls: Option<synod_tls::TlsAcceptor>,
    /// The config's `password`: a connection must send `ClientMsg::Auth` with it first.
    pub password: Option<Arc<str>>,
    /// The replica's memory budget for pending requests (`max_pending_bytes`).
    pub budget: crate::budget::MemBudget,
}

/// `ServerMsg::Refused` reasons of the password check.
pub const NOAUTH: &str = "NOAUTH authentication required: this replica has a password \
     (synod_client::ClientOptions::password, synod ctl/bench --password)";
pub const WRONGPASS: &str = "WRONGPASS invalid password";

/// Whether `given` is the configured password (constant time), or no password is configured.
pub(crate) fn password_ok(configured: Option<&str>, given: &str) -> bool {
    use subtle::ConstantTimeEq;
    configured.is_none_or(|p| bool::from(p.as_bytes().ct_eq(given.as_bytes())))
}

/// Accept client connections until the task is aborted (which closes them all).
pub async fn accept_clients(listener: TcpListener, shared: ClientShared) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, addr)) => {
                    let Some(permit) = shared.limit.try_admit() else {
                        warn!(%addr, max = shared.limit.max(), "refusing a client connection: max_connections reached");
                        let reason = format!("max number of clients reached ({})", shared.limit.max());
                        let frame = wire::frame(&ServerMsg::Refused { reason });
                        let tls = shared.tls.clone();
                        tokio::spawn(async move {
                            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                                let mut s = synod_tls::Stream::accept(stream, tls.as_ref()).await?;
                                write_flush(&mut s, &frame).await
                            })
                            .await;
                        });
                        continue;
                    };
                    let shared = shared.clone();
                    let conn = shared.next_conn.fetch_add(1, Ordering::Relaxed);
                    conns.spawn(async move {
                        let _permit = permit;
                        match serve_client(stream, conn, &shared).await {
                            Ok(()) => debug!(%addr, conn, "client disconnected"),
                            Err(e) => warn!(%addr, conn, "closing client connection: {e:#}"),
                        }
                        let _ = shared.inbox.send(ClientInput::Closed { conn }).await;
                    });
                }
                Err(e) => {
                    warn!("client listener: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next() => {}
        }
    }
}

/// The opening of a native client connection, on a replica's client port and on a proxy's
/// (`crate::proxy`): the TLS handshake (with `tls`), the client preamble and, with a
/// `password`, the `Auth` that must come first (anything else, or a wrong password, is
/// refused with `ServerMsg::Refused` and the connection ends: `Ok(None)`). Bytes read past
/// the handshake stay in `buf`.
pub(crate) async fn accept_handshake(
    tcp: TcpStream,
    tls: Option<&synod_tls::TlsAcceptor>,
    password: Option<&str>,
    max_frame: usize,
    buf: &mut BytesMut,
) -> anyhow::Result<Option<synod_tls::Stream>> {
    let _ = tcp.set_nodelay(true);
    let mut stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
        let mut stream = synod_tls::Stream::accept(tcp, tls).await.context("TLS handshake failed")?;
        read_magic(&mut stream, CLIENT_MAGIC, "client").await?;
        Ok::<_, anyhow::Error>(stream)
    })
    .await
    .context("no client preamble in time")??;
    if password.is_some() {
        // The first message must be the password; nothing else is read before it.
        let first = tokio::time::timeout(HANDSHAKE_TIMEOUT, read_frame(&mut stream, buf, max_frame))
            .await
            .context("no AUTH in time")??;
        let Some(first) = first else { return Ok(None) };
        let refusal = match wire::decode_payload::<ClientMsg>(&first)? {
            ClientMsg::Auth { password: given } if password_ok(password, &given) => None,
            ClientMsg::Auth { .. } => Some(WRONGPASS),
            _ => Some(NOAUTH),
        };
        if let Some(reason) = refusal {
            warn!("refusing a client connection: {reason}");
            let frame = wire::frame(&ServerMsg::Refused { reason: reason.into() });
            let _ = tokio::time::timeout(Duration::from_secs(1), write_flush(&mut stream, &frame)).await;
            return Ok(None);
        }
    }
    Ok(Some(stream))
}

async fn serve_client(tcp: TcpStream, conn: u64, shared: &ClientShared) -> anyhow::Result<()> {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let handshake =
        accept_handshake(tcp, shared.tls.as_ref(), shared.password.as_deref(), shared.limits.max_frame_bytes, &mut buf);
    let Some(stream) = handshake.await? else { return Ok(()) };
    let (mut rd, wr) = stream.into_split();
    let (tx, rx) = mpsc::channel(REPLY_QUEUE);
    if shared.inbox.send(ClientInput::Open { conn, replies: tx.clone() }).await.is_err() {
        return Ok(()); // shutting down
    }
    let mut charge = shared.budget.charge();
    let reader = async {
        loop {
            let frame = match read_frame_charged(&mut rd, &mut buf, shared.limits.max_frame_bytes, &mut charge).await {
                Ok(FrameRead::Frame(frame)) => frame,
                Ok(FrameRead::End) => break,
                Ok(FrameRead::OverBudget(e)) => {
                    let _ = tx.send(ServerMsg::Refused { reason: e.to_string() }).await;
                    // Let the writer send the refusal before the connection closes.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    anyhow::bail!("{e}");
                }
                Err(e) => return Err(e),
            };
            match wire::decode_payload::<ClientMsg>(&frame)? {
                ClientMsg::Request { cmd, meta } => {
                    shared.metrics.client_requests.increment(1);
                    if let Err(e) = cmd.op.validate(&shared.limits) {
                        shared.metrics.client_invalid.increment(1);
                        let body = ReplyBody::Invalid { reason: e.to_string() };
                        let reply = Reply { client: cmd.client, seq: cmd.seq, from: shared.me, body };
                        if tx.send(ServerMsg::Reply(reply)).await.is_err() {
                            break;
                        }
                        continue;
                    }
                    if shared.inbox.send(ClientInput::Request { conn, cmd, meta }).await.is_err() {
                        break;
                    }
                }
                ClientMsg::Status => {
                    let status = shared.status.borrow().clone();
                    if tx.send(ServerMsg::Status(status)).await.is_err() {
                        break;
                    }
                }
                // Authenticated already (or no password configured): a repeated AUTH with
                // the right password is harmless; a wrong one ends the connection.
                ClientMsg::Auth { password } => {
                    if !password_ok(shared.password.as_deref(), &password) {
                        let _ = tx.send(ServerMsg::Refused { reason: WRONGPASS.into() }).await;
                        anyhow::bail!("{WRONGPASS}");
                    }
                }
            }
        }
        Ok::<_, anyhow::Error>(())
    };
    tokio::select! {
        r = reader => r,
        r = write_replies(wr, rx) => r,
    }
}

/// Write queued replies, coalescing all that are ready into one write.
async fn write_replies(mut wr: synod_tls::WriteHalf, mut rx: mpsc::Receiver<ServerMsg>) -> anyhow::Result<()> {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    while let Some(first) = rx.recv().await {
        buf.clear();
        put_msg(&mut buf, &first);
        while buf.len() < MAX_WRITE_BYTES {
            match rx.try_recv() {
                Ok(m) => put_msg(&mut buf, &m),
                Err(_) => break,
            }
        }
        write_flush(&mut wr, &buf).await.context("writing replies")?;
    }
    Ok(())
}

/// Append `msg` to `buf` as one wire frame (`wire::frame`'s bytes), serialized in place
/// rather than into a fresh buffer that is then copied.
fn put_msg(buf: &mut BytesMut, msg: &ServerMsg) {
    let at = buf.len();
    buf.extend_from_slice(&[0; 4]);
    // Through `io::Write` (whole slices), not `Extend<u8>` (byte by byte).
    postcard::to_io(msg, bytes::BufMut::writer(&mut *buf)).expect("server messages serialize");
    let len = (buf.len() - at - 4) as u32;
    buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use synod_core::OpResult;

    #[test]
    fn replies_are_framed_in_place_as_wire_frame_does() {
        let mut buf = BytesMut::new();
        let msgs = [
            ServerMsg::Reply(Reply { client: 1, seq: 2, from: 3, body: ReplyBody::Done(OpResult::Done) }),
            ServerMsg::Refused { reason: "full".into() },
        ];
        let mut expected = Vec::new();
        for m in &msgs {
            put_msg(&mut buf, m);
            expected.extend_from_slice(&wire::frame(m));
        }
        assert_eq!(&buf[..], &expected[..]);
    }
}
