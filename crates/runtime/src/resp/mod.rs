//! The Redis-compatible front end: RESP2 and RESP3 (`HELLO 3`) on every replica that has a
//! `resp_addr`, so redis-cli, redis-benchmark, redis-py, Jedis/YCSB … become clients of the
//! replicated store, whatever protocol runs underneath. See `docs/redis.md` for the design
//! decisions and the command list.
//!
//! - [`parse`]: requests (multibulk and inline), bounded and incremental;
//! - [`commands`]: the command table and the translation of data commands into one [`Op`]
//!   each (multi-key commands are one log entry, hence atomic);
//! - [`conn`]: one task per connection: a *session* of the exactly-once protocol (random
//!   client id, one sequence number per command), pipelining with replies in request order,
//!   retries and forwarding to the leader;
//! - [`forward`]: the connections to the other replicas' native client ports used for that;
//! - [`server`]: what the connection answers itself (PING, HELLO, AUTH, INFO, COMMAND, …);
//! - [`reply`]: reply values and their RESP2/RESP3 encodings (`redis-protocol`).
//!
//! [`Op`]: synod_core::Op

pub mod commands;
pub mod conn;
pub mod forward;
pub mod parse;
pub mod reply;
pub mod server;

use crate::client::ClientInput;
use crate::config::NodeConfig;
use crate::metrics::NodeMetrics;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use synod_core::{Limits, NodeId, Status};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tracing::{debug, warn};

/// Counters shown by INFO.
#[derive(Debug, Default)]
pub struct RespStats {
    pub connected: AtomicU64,
    pub total_connections: AtomicU64,
    pub total_commands: AtomicU64,
    pub forwarded: AtomicU64,
}

/// Everything the connections of one RESP listener share.
pub struct RespShared {
    pub me: NodeId,
    pub protocol: String,
    pub limits: Limits,
    /// `requirepass`: connections must AUTH (or HELLO … AUTH) first.
    pub password: Option<String>,
    pub in_memory: bool,
    pub fsync: String,
    pub resp_addr: SocketAddr,
    /// RESP address of each member that has one (INFO shows the leader's).
    pub resp_addrs: HashMap<NodeId, SocketAddr>,
    pub inbox: mpsc::Sender<ClientInput>,
    pub status: watch::Receiver<Status>,
    pub metrics: NodeMetrics,
    /// Connection ids, shared with the native listener: the node loop keys replies by them.
    pub next_conn: Arc<AtomicU64>,
    pub forwarder: forward::Forwarder,
    /// The cluster's members in configuration order (what the client policies see).
    pub members: Vec<NodeId>,
    /// The protocol's client policy (registry `client`; the leader policy for an unknown
    /// name) and its configuration (`retry.attempt_timeout`: one attempt, a local submit or
    /// a forward, without an answer for this long is retried elsewhere).
    pub policy: synod_core::client_policy::PolicyFactory,
    pub client_config: synod_core::ClientConfig,
    pub cursors: commands::Cursors,
    pub stats: RespStats,
    pub started: Instant,
    /// Per-command retry budget before the client is told `TRYAGAIN`.
    pub give_up_after: Duration,
    /// Most RESP connections at once; beyond it Redis's `-ERR max number of clients reached`.
    pub limit: crate::conn_limit::ConnLimit,
    /// TLS on this port (`[tls] redis`). None = plain TCP.
    pub tls: Option<synod_tls::TlsAcceptor>,
    /// The replica's memory budget for pending requests (`max_pending_bytes`).
    pub budget: crate::budget::MemBudget,
}

impl RespShared {
    /// The shared state of the listener of `config`'s replica (whose `resp_addr` is `addr`).
    pub fn new(
        config: &NodeConfig,
        addr: SocketAddr,
        inbox: mpsc::Sender<ClientInput>,
        status: watch::Receiver<Status>,
        metrics: NodeMetrics,
        next_conn: Arc<AtomicU64>,
    ) -> RespShared {
        let clients = config.members.iter().filter(|m| m.id != config.id).map(|m| (m.id, m.client_addr)).collect();
        RespShared {
            me: config.id,
            protocol: config.protocol.clone(),
            limits: config.limits,
            password: config.password.clone(),
            in_memory: config.in_memory,
            fsync: config.fsync.to_string(),
            resp_addr: addr,
            resp_addrs: config.members.iter().filter_map(|m| Some((m.id, m.resp_addr?))).collect(),
            inbox,
            status,
            metrics,
            next_conn,
            forwarder: forward::Forwarder::new(clients, config.limits.max_frame_bytes),
            members: config.members.iter().map(|m| m.id).collect(),
            policy: synod_protocols::registry::client_for(&config.protocol)
                .unwrap_or(synod_core::client_policy::leader_policy),
            client_config: synod_core::ClientConfig {
                retry: synod_core::RetryTimes {
                    attempt_timeout: Duration::from_secs(2),
                    backoff_min: Duration::from_millis(10),
                    backoff_max: Duration::from_millis(100),
                },
                options: config.params.options.clone(),
            },
            cursors: commands::Cursors::new(commands::MAX_CURSORS),
            stats: RespStats::default(),
            started: Instant::now(),
            give_up_after: Duration::from_secs(20),
            limit: crate::conn_limit::ConnLimit::new(config.max_connections),
            tls: None,
            budget: crate::budget::MemBudget::unlimited(),
        }
    }
}

/// Accept RESP connections until the task is aborted (which closes them all).
pub async fn serve(listener: TcpListener, shared: RespShared) {
    let shared = Arc::new(shared);
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, addr)) => {
                    let Some(permit) = shared.limit.try_admit() else {
                        // Redis's own answer and behaviour (maxclients): the error, then close.
                        warn!(%addr, max = shared.limit.max(), "refusing a RESP connection: max_connections reached");
                        let tls = shared.tls.clone();
                        tokio::spawn(async move {
                            let reply = b"-ERR max number of clients reached\r\n";
                            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                                let mut s = synod_tls::Stream::accept(stream, tls.as_ref()).await?;
                                crate::transport::write_flush(&mut s, reply).await
                            })
                            .await;
                        });
                        continue;
                    };
                    let shared = shared.clone();
                    let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
                    conns.spawn(async move {
                        let _permit = permit;
                        shared.stats.connected.fetch_add(1, Ordering::Relaxed);
                        shared.stats.total_connections.fetch_add(1, Ordering::Relaxed);
                        match conn::serve(stream, addr, id, &shared).await {
                            Ok(()) => debug!(%addr, id, "RESP client disconnected"),
                            Err(e) => debug!(%addr, id, "RESP connection ended: {e:#}"),
                        }
                        shared.stats.connected.fetch_sub(1, Ordering::Relaxed);
                    });
                }
                Err(e) => {
                    warn!("RESP listener: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next() => {}
        }
    }
}
