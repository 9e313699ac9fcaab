//! synod-runtime: runs any registered protocol core on a real machine.
//!
//! [`run`] binds the three listeners of a replica (peers, clients, admin HTTP), opens the
//! write-ahead log, replays it into the protocol and then drives the protocol from one node
//! loop (see [`node`]) until the shutdown future resolves. Nothing here knows which protocol
//! it runs: the registry builds it from the configured name.

pub mod admin;
pub mod budget;
pub mod client;
pub mod config;
pub mod conn_limit;
pub mod link;
pub mod metrics;
pub mod node;
pub mod peer_auth;
pub mod proxy;
pub mod resp;
pub mod storage;
pub mod timers;
pub mod transport;

pub use config::{AdminConfig, ConfigError, Member, NodeConfig, TlsConfig};
pub use synod_tls as tls;

use anyhow::{anyhow, Context as _};
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use storage::{Storage, WalStorage};
use synod_core::Protocol;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tracing::info;

/// Peer messages waiting for the node loop; a full inbox makes the connections stop reading
/// (TCP backpressure towards the senders, whose queues then drop).
const PEER_INBOX: usize = 16 * 1024;

/// Run a replica of the configured protocol until `shutdown` resolves. Binds all listeners
/// first (an address in use is an error naming it and the listener), recovers from the WAL,
/// and syncs the WAL on exit.
pub async fn run(config: NodeConfig, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
    run_node(config, false, shutdown).await
}

/// [`run`] for a replica that joins an existing cluster (`synod server --join`): `members`
/// lists the cluster's current members and this replica, but the protocol starts with the
/// others only, as a learner that is not a member until an administrator's membership
/// change adding it is committed (docs/design.md, "Membership"). After a restart its
/// durable state says whether it is a member by then.
pub async fn run_joining(
    config: NodeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    run_node(config, true, shutdown).await
}

async fn run_node(
    config: NodeConfig,
    join: bool,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    config.validate()?;
    let info = synod_protocols::registry::find(&config.protocol).map_err(|e| anyhow!(e))?;
    let mut members = config.member_ids();
    if join {
        members.retain(|m| *m != config.id);
        if members.is_empty() {
            anyhow::bail!("--join: the config must list the cluster's current members besides this replica");
        }
    }
    let setup = synod_protocols::Setup { id: config.id, members, params: config.params.clone() };
    let protocol = (info.build)(&setup).map_err(|e| anyhow!("protocol {}: {e}", info.name))?;
    run_protocol(config, protocol, shutdown).await
}

/// [`run`] with a protocol instance built by the caller (`config.protocol` is then only a
/// label). For tests and experiments with protocols outside the registry.
pub async fn run_protocol(
    config: NodeConfig,
    protocol: Box<dyn Protocol>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    config.validate_except_protocol()?;
    // Before any metric handle is created: handles made without a recorder are no-ops.
    let _ = metrics::prometheus();
    let me = config.me().clone();
    // Certificates are read before anything is bound: a bad file stops the start.
    let tls = config.load_tls()?;
    let budget = budget::MemBudget::new(config.max_pending_bytes);
    let tls_flags = config.tls.as_ref().map(|t| (t.peers, t.native, t.redis)).unwrap_or_default();
    let peer_listener = bind(me.peer_addr, "peer").await?;
    let client_listener = bind(me.client_addr, "client").await?;
    let admin_listener = bind(me.admin_addr, "admin").await?;
    let resp_listener = match me.resp_addr {
        Some(addr) => Some((bind(addr, "RESP").await?, addr)),
        None => None,
    };

    let (storage, records): (Option<Box<dyn Storage>>, _) = if config.in_memory {
        (None, Vec::new())
    } else {
        let dir = config.data_dir.clone().expect("validated: data_dir present unless in_memory");
        let fsync = config.fsync;
        let open = tokio::task::spawn_blocking(move || {
            WalStorage::open(&dir, fsync).with_context(|| format!("opening the write-ahead log in {}", dir.display()))
        });
        let (wal, records) = open.await.context("write-ahead log open thread failed")??;
        (Some(Box::new(wal)), records)
    };
    let seed = random_seed();
    info!(
        id = config.id,
        protocol = %config.protocol,
        peer = %me.peer_addr,
        client = %me.client_addr,
        admin = %me.admin_addr,
        tls = ?config.tls.as_ref().map(|t| format!("peers={} native={} redis={} admin={}", t.peers, t.native, t.redis, t.admin)),
        recovered_records = records.len(),
        seed,
        "replica starting"
    );

    let node_metrics = metrics::NodeMetrics::new(config.id);
    let (status_tx, status_rx) = watch::channel(protocol.status());
    let identity = transport::Identity {
        me: config.id,
        cluster: config.cluster.clone(),
        max_frame_bytes: config.limits.max_frame_bytes,
        incarnation: transport::new_incarnation(),
        secret: config.cluster_secret()?.map(|s| peer_auth::Secret::new(&s)),
        max_connections: config.max_connections,
        tls: tls.clone().filter(|_| tls_flags.0),
        budget: budget.clone(),
    };

    let mut tasks = JoinSet::new();
    let mut peers = HashMap::new();
    let mut inbound_metrics = HashMap::new();
    // Each outbound task holds the emulation control of its link (admin fault API).
    let mut links = Vec::new();
    // The replica's NIC: every outbound link shares its egress budget (POST /fault/egress).
    let egress = Arc::new(link::Egress::default());
    for m in config.members.iter().filter(|m| m.id != config.id) {
        let link = Arc::new(link::Link::with_egress(config.id, m.id, egress.clone()));
        links.push((m.id, link.clone()));
        let sender =
            transport::spawn_outbound(&mut tasks, identity.clone(), m.id, m.peer_addr, seed ^ m.id as u64, link);
        peers.insert(m.id, sender);
        inbound_metrics.insert(m.id, metrics::PeerMetrics::new(config.id, m.id));
    }
    let (peer_tx, peer_rx) = mpsc::channel(PEER_INBOX);
    let inbound: transport::PeerDirectory = Arc::new(std::sync::RwLock::new(inbound_metrics));
    tasks.spawn(transport::accept_peers(peer_listener, identity.clone(), inbound.clone(), peer_tx));
    let (client_tx, client_rx) = mpsc::channel(client::CLIENT_INBOX);
    let next_conn = Arc::new(AtomicU64::new(1));
    let current_members = Arc::new(std::sync::Mutex::new(
        config.members.iter().map(|m| (m.id, m.peer_addr.to_string())).collect::<Vec<_>>(),
    ));
    let admin_control = admin::AdminControl {
        inbox: client_tx.clone(),
        next_conn: next_conn.clone(),
        members: current_members.clone(),
    };
    if let Some((listener, addr)) = resp_listener {
        let mut shared = resp::RespShared::new(
            &config,
            addr,
            client_tx.clone(),
            status_rx.clone(),
            node_metrics.clone(),
            next_conn.clone(),
        );
        shared.tls = tls.as_ref().filter(|_| tls_flags.2).map(|t| t.client_acceptor.clone());
        shared.budget = budget.clone();
        shared.forwarder.set_security(
            tls.as_ref().filter(|_| tls_flags.1).map(|t| t.client_connector.clone()),
            config.password.clone(),
        );
        tasks.spawn(resp::serve(listener, shared));
    }
    tasks.spawn(client::accept_clients(
        client_listener,
        client::ClientShared {
            me: config.id,
            limits: config.limits,
            inbox: client_tx,
            status: status_rx.clone(),
            metrics: node_metrics.clone(),
            next_conn,
            limit: conn_limit::ConnLimit::new(config.max_connections),
            tls: tls.as_ref().filter(|_| tls_flags.1).map(|t| t.client_acceptor.clone()),
            password: config.password.as_deref().map(Arc::from),
            budget,
        },
    ));
    let mut driver = node::Driver::new(config.id, protocol, storage, seed, peers, status_tx, node_metrics);
    if let Ok(info) = synod_protocols::registry::find(&config.protocol) {
        driver.set_order(info.order);
    }
    driver.set_clock_error(std::time::Duration::from_micros(config.clock_error_us));
    let configured = config.members.iter().map(|m| (m.id, m.peer_addr)).collect();
    driver.set_peer_set(transport::PeerSet::new(identity, seed, configured, inbound, current_members));
    // The fault API moves the offset of the clock the node loop reads.
    let faults = link::Faults::with_links(config.id, links, egress, driver.clock().clone());
    let router = admin::router(admin::AdminState {
        me: me.clone(),
        status: status_rx,
        faults,
        control: Some(admin_control),
        access: admin::AdminAccess { token: config.admin_token()?.map(Arc::from), faults: config.admin.faults },
    });
    let admin_tls = tls.as_ref().filter(|_| config.tls.as_ref().is_some_and(|t| t.admin));
    tasks.spawn(admin::serve(admin_listener, router, admin_tls.map(|t| t.client_acceptor.clone())));

    let result = async {
        driver.recover(records).await?;
        driver.run(peer_rx, client_rx, shutdown).await
    }
    .await;
    // Stop accepting and close every connection before the final sync, so nothing new
    // arrives while the log is flushed.
    tasks.shutdown().await;
    let synced = driver.sync();
    info!(id = config.id, "replica stopped");
    result.and(synced)
}

/// Bind one listener; the error names the listener and the address.
async fn bind(addr: SocketAddr, which: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).await.with_context(|| format!("cannot bind the {which} listener on {addr}"))
}

/// A seed for the protocol's RNG that differs across processes and restarts (election
/// timeouts must not collide); logged at startup so a run can be correlated.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    h.write_u32(std::process::id());
    h.finish()
}
