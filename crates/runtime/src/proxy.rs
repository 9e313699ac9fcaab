//! A stateless proxy process (Nezha §4, "proxies"): `synod proxy`.
//!
//! Nezha's clients do not talk to the replicas themselves: proxies stamp each request with
//! its deadline, multicast it, and do the quorum checks (fast path: a super quorum of
//! matching hashes with the leader's result; slow path: the leader and f slow-replies). The
//! client library embeds the same code for the non-proxy mode (Nezha-Non-Proxy): the
//! protocol's [`ClientPolicy`] (`synod_protocols::nezha::proxy::NezhaProxy`). This module
//! hosts that policy in its own process instead:
//!
//! - it accepts the native client protocol (`CLIENT_MAGIC`, `ClientMsg` frames): a client's
//!   `Request` is run through the protocol's client policy — one policy per client session,
//!   so a session's one-way-delay estimates and increasing deadlines carry from request to
//!   request — and the policy's outcome comes back as a `Done` (or `Invalid`/`Rejected`)
//!   reply; a `Status` query is answered with this proxy's own status (protocol
//!   `<protocol>-proxy`, role `Replica`, and the policy counters in `extra`, e.g. Nezha's
//!   `fast_commits`/`slow_commits`/`done_commits`);
//! - optionally the Redis protocol (the replicas' RESP front end, with this proxy as its
//!   host: every command goes out through the policy to the replicas);
//! - to the replicas it sends through [`Forwarder`] (one multiplexed connection per
//!   replica, replies routed back by (client, seq)).
//!
//! - security as at a replica (docs/security.md): with [`ProxySecurity`], TLS on the proxy's
//!   ports (its own certificate, signed by the cluster's CA) and the cluster's password
//!   asked of its clients (the native handshake is the replica's,
//!   [`crate::client::accept_handshake`]; the Redis front end's `requirepass` is the
//!   replica's); towards the replicas it dials TLS and authenticates with the same password
//!   (the forwarder's, as the replicas' Redis front end does).
//!
//! Nothing is kept beyond the requests in flight: killing a proxy loses no acknowledged
//! request. A client whose proxy dies retries the same (client, seq) through another proxy
//! (the leader policy moves on to the next endpoint), and the replicas' session tables make
//! the retry exactly-once.

use crate::metrics::NodeMetrics;
use crate::resp::forward::{Forwarder, FwdEvent};
use crate::transport::read_frame;
use anyhow::Context as _;
use bytes::BytesMut;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use synod_core::client_policy::{ClientAction, ClientConfig, ClientCtx, ClientPolicy, Outcome, PolicyFactory};
use synod_core::wire::{self, ClientMsg, ServerMsg};
use synod_core::{Command, Limits, NodeId, Reply, ReplyBody, Role, Status, Time};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{debug, info, warn};

/// Replies queued per client connection.
const REPLY_QUEUE: usize = 4096;

/// What a proxy needs to know.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// This proxy's id, as its `Status` reports it (distinct from the replicas' ids, so a
    /// client given several proxies tells them apart).
    pub id: NodeId,
    /// The protocol the replicas run (its registry entry gives the client policy).
    pub protocol: String,
    /// The replicas and their native client addresses, in configuration order.
    pub replicas: Vec<(NodeId, SocketAddr)>,
    /// The protocol options the replicas were started with (the policy reads its own).
    pub options: BTreeMap<String, String>,
    /// The native client listener.
    pub listen: SocketAddr,
    /// The Redis-protocol listener, if any.
    pub resp: Option<SocketAddr>,
    /// One attempt without an answer for this long is resubmitted by the policy.
    pub attempt_timeout: Duration,
    /// A request still unfinished after this long is dropped without an answer (its client
    /// retries).
    pub give_up_after: Duration,
    pub limits: Limits,
    /// The error bound of this host's clock, handed to the policy (`ClientCtx::clock_error`).
    pub clock_error: Duration,
    /// TLS and the password, on both sides of the proxy.
    pub security: ProxySecurity,
}

/// A proxy's TLS and password (docs/security.md), mirroring the cluster's: `synod proxy`
/// takes them from the replicas' config (`[tls]` flags, CA, `password`) and its own
/// certificate.
#[derive(Clone, Debug, Default)]
pub struct ProxySecurity {
    /// The proxy's certificate and key, and the cluster's CA (which the replicas'
    /// certificates chain to). Required when either flag below is on.
    pub tls: Option<synod_tls::NodeTls>,
    /// TLS on the proxy's native port and towards the replicas' native ports (the cluster's
    /// `[tls] native`).
    pub tls_native: bool,
    /// TLS on the proxy's Redis port (the cluster's `[tls] redis`).
    pub tls_redis: bool,
    /// The cluster's password: the proxy's clients must give it (native `Auth`, Redis
    /// `AUTH`), and the proxy gives it to the replicas.
    pub password: Option<String>,
}

impl ProxySecurity {
    fn acceptor(&self, on: bool) -> Option<synod_tls::TlsAcceptor> {
        self.tls.as_ref().filter(|_| on).map(|t| t.client_acceptor.clone())
    }

    /// A forwarder to the replicas, dialing as this security says.
    fn forwarder(&self, replicas: &[(NodeId, SocketAddr)], max_frame: usize) -> Forwarder {
        let mut f = Forwarder::new(replicas.iter().copied().collect(), max_frame);
        let connector = self.tls.as_ref().filter(|_| self.tls_native).map(|t| t.client_connector.clone());
        f.set_security(connector, self.password.clone());
        f
    }
}

impl ProxyConfig {
    /// Defaults for everything but the addresses and the protocol.
    pub fn new(id: NodeId, protocol: &str, replicas: Vec<(NodeId, SocketAddr)>, listen: SocketAddr) -> ProxyConfig {
        ProxyConfig {
            id,
            protocol: protocol.to_string(),
            replicas,
            options: BTreeMap::new(),
            listen,
            resp: None,
            attempt_timeout: Duration::from_secs(1),
            give_up_after: Duration::from_secs(10),
            limits: Limits::default(),
            clock_error: Duration::ZERO,
            security: ProxySecurity::default(),
        }
    }
}

/// What every connection of a proxy shares.
pub struct ProxyShared {
    cfg: ProxyConfig,
    members: Vec<NodeId>,
    forwarder: Forwarder,
    policy: PolicyFactory,
    client_config: ClientConfig,
    /// The policies' counters summed over finished requests (Nezha: fast/slow/done commits).
    counters: Mutex<BTreeMap<&'static str, u64>>,
    requests: AtomicU64,
}

impl ProxyShared {
    pub fn new(cfg: ProxyConfig) -> anyhow::Result<ProxyShared> {
        if cfg.replicas.is_empty() {
            anyhow::bail!("a proxy needs at least one replica");
        }
        if cfg.replicas.iter().any(|(id, _)| *id == cfg.id) {
            anyhow::bail!("the proxy's id {} is also a replica's id", cfg.id);
        }
        let sec = &cfg.security;
        if (sec.tls_native || sec.tls_redis) && sec.tls.is_none() {
            anyhow::bail!("the cluster uses TLS on its client ports: the proxy needs a certificate signed by its CA");
        }
        let policy = synod_protocols::registry::client_for(&cfg.protocol)
            .with_context(|| format!("unknown protocol `{}`", cfg.protocol))?;
        let client_config = ClientConfig {
            retry: synod_core::RetryTimes {
                attempt_timeout: cfg.attempt_timeout,
                backoff_min: Duration::from_millis(10),
                backoff_max: Duration::from_millis(100),
            },
            options: cfg.options.clone(),
        };
        Ok(ProxyShared {
            members: cfg.replicas.iter().map(|(id, _)| *id).collect(),
            forwarder: cfg.security.forwarder(&cfg.replicas, cfg.limits.max_frame_bytes),
            policy,
            client_config,
            counters: Mutex::new(BTreeMap::new()),
            requests: AtomicU64::new(0),
            cfg,
        })
    }

    /// This proxy's status: its id, `<protocol>-proxy`, and the policy counters.
    pub fn status(&self) -> Status {
        let mut extra: BTreeMap<String, String> = self
            .counters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        extra.insert("proxy".into(), "true".into());
        extra.insert("requests".into(), self.requests.load(Ordering::Relaxed).to_string());
        let replicas: Vec<String> = self.cfg.replicas.iter().map(|(id, a)| format!("{id}={a}")).collect();
        extra.insert("replicas".into(), replicas.join(","));
        Status {
            id: self.cfg.id,
            protocol: format!("{}-proxy", self.cfg.protocol),
            role: Role::Replica,
            ballot: String::new(),
            leader: None,
            commit_index: 0,
            execute_index: 0,
            extra,
        }
    }

    fn add_counters(&self, before: &[(&'static str, u64)], after: &[(&'static str, u64)]) {
        let mut c = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        for (name, v) in after {
            let was = before.iter().find(|(n, _)| n == name).map_or(0, |(_, b)| *b);
            *c.entry(*name).or_default() += v.saturating_sub(was);
        }
    }
}

/// Run a proxy until `shutdown` resolves: bind its listeners (an address in use is an
/// error), then serve clients.
pub async fn run(cfg: ProxyConfig, shutdown: impl std::future::Future<Output = ()>) -> anyhow::Result<()> {
    let listener = TcpListener::bind(cfg.listen).await.with_context(|| format!("client listener on {}", cfg.listen))?;
    let resp_listener = match cfg.resp {
        Some(a) => Some((TcpListener::bind(a).await.with_context(|| format!("RESP listener on {a}"))?, a)),
        None => None,
    };
    let shared = Arc::new(ProxyShared::new(cfg)?);
    info!(id = shared.cfg.id, listen = %shared.cfg.listen, protocol = %shared.cfg.protocol, "proxy ready");
    let mut tasks = JoinSet::new();
    tasks.spawn(accept(listener, shared.clone()));
    if let Some((l, addr)) = resp_listener {
        tasks.spawn(crate::resp::serve(l, resp_shared(&shared, addr)));
    }
    shutdown.await;
    tasks.shutdown().await;
    Ok(())
}

/// The Redis front end hosted by a proxy: not a member, so every command goes through the
/// policy and the forwarder to the replicas.
fn resp_shared(shared: &Arc<ProxyShared>, addr: SocketAddr) -> crate::resp::RespShared {
    let cfg = &shared.cfg;
    // The front end tells a replica's node loop about its connections; a proxy has none.
    let (inbox, mut drain) = mpsc::channel(1024);
    tokio::spawn(async move { while drain.recv().await.is_some() {} });
    let (_status_tx, status) = watch::channel(shared.status());
    crate::resp::RespShared {
        me: cfg.id,
        protocol: format!("{}-proxy", cfg.protocol),
        limits: cfg.limits,
        password: cfg.security.password.clone(),
        in_memory: true,
        fsync: "n/a (proxy)".into(),
        resp_addr: addr,
        resp_addrs: HashMap::new(),
        inbox,
        status,
        metrics: NodeMetrics::new(cfg.id),
        next_conn: Arc::new(AtomicU64::new(1)),
        forwarder: cfg.security.forwarder(&cfg.replicas, cfg.limits.max_frame_bytes),
        members: shared.members.clone(),
        policy: shared.policy,
        client_config: shared.client_config.clone(),
        cursors: crate::resp::commands::Cursors::new(crate::resp::commands::MAX_CURSORS),
        stats: Default::default(),
        started: std::time::Instant::now(),
        give_up_after: cfg.give_up_after,
        tls: cfg.security.acceptor(cfg.security.tls_redis),
        budget: crate::budget::MemBudget::unlimited(),
        limit: crate::conn_limit::ConnLimit::new(10_000),
    }
}

async fn accept(listener: TcpListener, shared: Arc<ProxyShared>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, addr)) => {
                    let shared = shared.clone();
                    conns.spawn(async move {
                        match serve(stream, &shared).await {
                            Ok(()) => debug!(%addr, "client disconnected"),
                            Err(e) => warn!(%addr, "closing client connection: {e:#}"),
                        }
                    });
                }
                Err(e) => {
                    warn!("proxy listener: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next() => {}
        }
    }
}

/// One client session seen by this proxy: its policy and its request in flight.
struct Session {
    policy: Box<dyn ClientPolicy>,
    current: Option<InFlight>,
}

struct InFlight {
    cmd: Command,
    started: Instant,
    timers: BTreeMap<u64, Instant>,
    counters_before: Vec<(&'static str, u64)>,
}

enum Event {
    Begin,
    Reply(Reply),
    Timer(u64),
    Unreachable(NodeId),
}

/// Serve one client connection (any number of sessions) until it closes.
async fn serve(tcp: TcpStream, shared: &ProxyShared) -> anyhow::Result<()> {
    let sec = &shared.cfg.security;
    let max_frame = shared.cfg.limits.max_frame_bytes;
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let acceptor = sec.acceptor(sec.tls_native);
    let handshake =
        crate::client::accept_handshake(tcp, acceptor.as_ref(), sec.password.as_deref(), max_frame, &mut buf);
    let Some(stream) = handshake.await? else { return Ok(()) };
    let (mut rd, mut wr) = stream.into_split();
    let (in_tx, mut in_rx) = mpsc::channel::<ClientMsg>(1024);
    let reader = tokio::spawn(async move {
        loop {
            let frame = match read_frame(&mut rd, &mut buf, max_frame).await {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(()),
                Err(e) => return Err(e),
            };
            let msg = wire::decode_payload::<ClientMsg>(&frame)?;
            if in_tx.send(msg).await.is_err() {
                return Ok(());
            }
        }
    });
    let (out_tx, mut out_rx) = mpsc::channel::<ServerMsg>(REPLY_QUEUE);
    let writer = tokio::spawn(async move {
        let mut buf = BytesMut::new();
        while let Some(first) = out_rx.recv().await {
            buf.clear();
            buf.extend_from_slice(&wire::frame(&first));
            while let Ok(m) = out_rx.try_recv() {
                buf.extend_from_slice(&wire::frame(&m));
            }
            wr.write_all(&buf).await?;
        }
        Ok::<_, std::io::Error>(())
    });
    let mut conn = Conn {
        shared,
        sessions: HashMap::new(),
        out: out_tx,
        rng: synod_core::rng_from_seed(rand::random()),
        fwd_tx: mpsc::unbounded_channel().0,
    };
    let (fwd_tx, mut fwd_rx) = mpsc::unbounded_channel();
    conn.fwd_tx = fwd_tx;
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            msg = in_rx.recv() => match msg {
                Some(ClientMsg::Status) => {
                    if conn.out.send(ServerMsg::Status(shared.status())).await.is_err() {
                        break;
                    }
                }
                Some(ClientMsg::Request { cmd, .. }) => conn.request(cmd).await,
                // Authenticated already (or no password): a repeated AUTH with the right
                // password is harmless; a wrong one ends the connection, as at a replica.
                Some(ClientMsg::Auth { password }) => {
                    if !crate::client::password_ok(sec.password.as_deref(), &password) {
                        let reason = crate::client::WRONGPASS.to_string();
                        let _ = conn.out.send(ServerMsg::Refused { reason }).await;
                        break;
                    }
                }
                None => break,
            },
            Some(ev) = fwd_rx.recv() => match ev {
                FwdEvent::Reply(r) => {
                    let client = r.client;
                    let seq = r.seq;
                    conn.step(client, seq, Event::Reply(r)).await;
                }
                FwdEvent::Failed { node, client, seq, .. } => conn.step(client, seq, Event::Unreachable(node)).await,
            },
            _ = tick.tick() => conn.fire_timers().await,
        }
        if writer.is_finished() {
            break;
        }
    }
    reader.abort();
    drop(conn);
    let _ = writer.await;
    Ok(())
}

struct Conn<'a> {
    shared: &'a ProxyShared,
    sessions: HashMap<u64, Session>,
    out: mpsc::Sender<ServerMsg>,
    rng: synod_core::Rng,
    fwd_tx: mpsc::UnboundedSender<FwdEvent>,
}

impl Conn<'_> {
    async fn request(&mut self, cmd: Command) {
        if let Err(e) = cmd.op.validate(&self.shared.cfg.limits) {
            let body = ReplyBody::Invalid { reason: e.to_string() };
            let _ = self
                .out
                .send(ServerMsg::Reply(Reply { client: cmd.client, seq: cmd.seq, from: self.shared.cfg.id, body }))
                .await;
            return;
        }
        self.shared.requests.fetch_add(1, Ordering::Relaxed);
        let (client, seq) = (cmd.client, cmd.seq);
        let session = self
            .sessions
            .entry(client)
            .or_insert_with(|| Session { policy: (self.shared.policy)(&self.shared.client_config), current: None });
        if let Some(cur) = &session.current {
            if cur.cmd.seq == seq {
                return; // a retransmission of the request in flight: its answer is coming
            }
            if cur.cmd.seq > seq {
                return; // an old request the session has given up on
            }
        }
        // A session has one request outstanding: a newer one replaces any earlier one.
        let counters_before = session.policy.counters();
        session.current = Some(InFlight { cmd, started: Instant::now(), timers: BTreeMap::new(), counters_before });
        self.step(client, seq, Event::Begin).await;
    }

    /// Run one event through the policy of session `client` (if `seq` is its request in
    /// flight) and carry out what it asks for.
    async fn step(&mut self, client: u64, seq: u64, first: Event) {
        let mut queue = VecDeque::from([first]);
        while let Some(ev) = queue.pop_front() {
            let Some(s) = self.sessions.get_mut(&client) else { return };
            let Some(cur) = s.current.as_mut().filter(|c| c.cmd.seq == seq) else { return };
            let mut actions = Vec::new();
            let mut cx = ClientCtx::new(wall_now(), &mut self.rng, &self.shared.members, 0, &mut actions);
            cx.clock_error = self.shared.cfg.clock_error;
            match ev {
                Event::Begin => s.policy.begin(&mut cx, &cur.cmd),
                Event::Reply(r) => s.policy.on_reply(&mut cx, r),
                Event::Timer(id) => s.policy.on_timer(&mut cx, id),
                Event::Unreachable(node) => s.policy.on_unreachable(&mut cx, node),
            }
            for action in actions {
                match action {
                    ClientAction::Send { to, meta } => {
                        if let Err(e) = self.shared.forwarder.send(to, cur.cmd.clone(), meta, &self.fwd_tx) {
                            debug!(node = to, "proxy cannot send: {e}");
                            queue.push_back(Event::Unreachable(to));
                        }
                    }
                    ClientAction::SetTimer { id, after } => {
                        cur.timers.insert(id, Instant::now() + after);
                    }
                    ClientAction::CancelTimer { id } => {
                        cur.timers.remove(&id);
                    }
                    ClientAction::Finish(outcome) => {
                        let Some(done) = s.current.take() else { return };
                        self.shared.add_counters(&done.counters_before, &s.policy.counters());
                        let body = match outcome {
                            Outcome::Done(r) => ReplyBody::Done(r),
                            Outcome::Invalid(reason) => ReplyBody::Invalid { reason },
                            Outcome::Rejected { reason, .. } => ReplyBody::Rejected { reason },
                            // No answer: the client's own attempt timeout retries (here or
                            // through another proxy), with the same seq.
                            Outcome::Unknown(why) => {
                                debug!(client, seq, "policy gave up: {why}");
                                return;
                            }
                        };
                        let reply = Reply { client, seq, from: self.shared.cfg.id, body };
                        let _ = self.out.send(ServerMsg::Reply(reply)).await;
                        return;
                    }
                }
            }
        }
    }

    /// Fire due policy timers; drop requests past the give-up time.
    async fn fire_timers(&mut self) {
        let now = Instant::now();
        let give_up = self.shared.cfg.give_up_after;
        let mut due = Vec::new();
        for (client, s) in &mut self.sessions {
            let Some(cur) = &s.current else { continue };
            if now.duration_since(cur.started) > give_up {
                s.current = None;
                continue;
            }
            for (id, at) in &cur.timers {
                if *at <= now {
                    due.push((*client, cur.cmd.seq, *id));
                }
            }
        }
        for (client, seq, id) in due {
            if let Some(cur) = self.sessions.get_mut(&client).and_then(|s| s.current.as_mut()) {
                cur.timers.remove(&id);
            }
            self.step(client, seq, Event::Timer(id)).await;
        }
    }
}

/// The policy's clock: wall-clock time since the Unix epoch, as the replicas' clocks.
fn wall_now() -> Time {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Time(d.as_nanos() as u64)
}
