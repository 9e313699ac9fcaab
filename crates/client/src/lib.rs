//! The native synod client.
//!
//! A [`Client`] is one *session* of the exactly-once protocol (`synod_core::session`): it has
//! a random nonzero session id, numbers its requests 1, 2, 3, … and retries a request with the
//! *same* sequence number until it gets an answer. The replicated state machine remembers the
//! result of each (client, seq), so a put that is retried after a leader change — because its
//! reply was lost, not the put — is applied once and the retry gets the original result.
//!
//! Where a request goes and how the replies to it count is the protocol's *client policy*
//! (`synod_core::client_policy`, the registry entry's `client`): the leader policy follows
//! `NotLeader` redirects, the home policy stays with one replica, IDEM's multicasts and
//! counts rejects, Nezha's stamps a deadline and counts a super quorum of speculative
//! replies. This client hosts the policy: it learns every endpoint's node id (asking each for
//! its `Status`), opens a connection to a replica the first time the policy sends there and
//! keeps it, routes the replies by (client, seq) to the policy, runs its timers, and reports
//! a replica it cannot connect to or whose connection breaks as unreachable. The overall
//! retry budget (`max_retry_time`) is the client's own: when it runs out the request is
//! abandoned with [`ClientError::Timeout`].
//!
//! One request is outstanding per client (`&mut self`); create several clients for
//! concurrency. They are cheap: one TCP connection per replica actually used.

use bytes::{Bytes, BytesMut};
use rand::Rng as _;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};
use synod_core::client_policy::{leader_policy, ClientAction, ClientConfig, ClientCtx, ClientPolicy, Outcome};
use synod_core::client_policy::{RequestMeta, RetryTimes};
use synod_core::wire::{self, ClientMsg, FrameError, ServerMsg, CLIENT_MAGIC};
use synod_core::{Command, NodeId, Op, OpResult, Reply, ReplyBody, Status, Time};
use synod_tls::{ReadHalf, Stream, WriteHalf};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Largest reply frame accepted (a big scan); matches the replicas' default frame limit.
const MAX_REPLY_FRAME: usize = 64 * 1024 * 1024;
/// Backoff while no endpoint answers a status query grows from the first to the last value.
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_millis(500);
/// Backoff range the policies draw from after a refusal (election in progress, overload).
const POLICY_BACKOFF_MIN: Duration = Duration::from_millis(10);
const POLICY_BACKOFF_MAX: Duration = Duration::from_millis(100);
/// While some endpoints' node ids are unknown (they were down), ask again this often.
const REFRESH_IDS_EVERY: Duration = Duration::from_secs(1);
/// ... and at most this often while replicas redirect to a leader whose endpoint we do not
/// know.
const REFRESH_IDS_REDIRECT: Duration = Duration::from_millis(100);

pub use synod_core::client_policy::PolicyFactory;

/// Timing knobs and the client policy of a client.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// How long one attempt may wait for an answer before the policy tries elsewhere (the
    /// policies' `attempt_timeout`). A request slower than this is retried with the same seq,
    /// which is safe.
    pub request_timeout: Duration,
    /// How long a request is retried in total before [`ClientError::Timeout`].
    pub max_retry_time: Duration,
    /// The client's home replica (index into the endpoints, modulo their number): where the
    /// policy sends first. A leader-based cluster redirects the client to its leader; a
    /// leaderless one (EPaxos, Mencius) serves it there, so spreading clients over the
    /// replicas (or giving each the nearest) spreads the command leaders.
    pub home: usize,
    /// The protocol's client policy: its registry entry's `client`
    /// (`synod_protocols::find(name)?.client`). The default, the leader policy, serves every
    /// protocol whose replicas either answer a request or redirect it.
    pub policy: PolicyFactory,
    /// Look the policy up by the protocol name the replicas report (`Status.protocol`), e.g.
    /// `Some(synod_protocols::registry::client_for)`; when set and the name is known it
    /// replaces `policy`.
    pub resolve_policy: Option<fn(&str) -> Option<PolicyFactory>>,
    /// The protocol's options (as given to the replicas), handed to the policy.
    pub protocol_options: BTreeMap<String, String>,
    /// TLS to the native ports (replicas with `[tls] native`); None = plain TCP.
    pub tls: Option<ClientTls>,
    /// The replicas' password (their config's `password`), sent first on every connection.
    pub password: Option<String>,
}

/// How a client checks the replicas' certificates: against a CA, with the endpoint's host
/// (an IP address or DNS name) as the name the certificate must carry.
#[derive(Clone)]
pub struct ClientTls {
    connector: synod_tls::TlsConnector,
}

impl ClientTls {
    /// Trust the CA certificate(s) of a PEM file (`synod local --tls` writes `<dir>/tls/ca.pem`).
    pub fn from_ca_file(path: &std::path::Path) -> Result<ClientTls, String> {
        synod_tls::client_connector(path).map(|connector| ClientTls { connector }).map_err(|e| e.to_string())
    }
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientTls")
    }
}

/// How connections are opened: TLS and the password (from [`ClientOptions`]).
#[derive(Clone, Debug, Default)]
struct Access {
    tls: Option<ClientTls>,
    password: Option<String>,
}

impl ClientOptions {
    fn access(&self) -> Access {
        Access { tls: self.tls.clone(), password: self.password.clone() }
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            request_timeout: Duration::from_secs(2),
            max_retry_time: Duration::from_secs(30),
            home: 0,
            policy: leader_policy,
            resolve_policy: None,
            protocol_options: BTreeMap::new(),
            tls: None,
            password: None,
        }
    }
}

impl ClientOptions {
    /// What the policy constructor gets.
    pub fn client_config(&self) -> ClientConfig {
        ClientConfig {
            retry: RetryTimes {
                attempt_timeout: self.request_timeout,
                backoff_min: POLICY_BACKOFF_MIN,
                backoff_max: POLICY_BACKOFF_MAX,
            },
            options: self.protocol_options.clone(),
        }
    }
}

/// Why a request or a status query failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no endpoints given")]
    NoEndpoints,
    /// The replicas refused the request as invalid (e.g. value too large). It was not applied
    /// and retrying it will not help.
    #[error("request refused as invalid: {0}")]
    Invalid(String),
    /// Refused by admission control (IDEM). `definitive`: it will never be applied (every
    /// replica refused it); otherwise it may still be applied later: its outcome is unknown.
    #[error("request rejected ({}): {reason}", if *definitive { "never applied" } else { "it may or may not be applied" })]
    Rejected { definitive: bool, reason: String },
    /// The client policy gave up without knowing whether the request was applied.
    #[error("outcome unknown: {0}; the request may or may not have been applied")]
    Unknown(String),
    /// No final answer within `max_retry_time`. The request may have been applied or not:
    /// the client cannot tell (it will never retry it, so it is applied at most once).
    #[error(
        "no answer after {elapsed:.1?} (last error: {last_error}); the outcome is unknown: \
         the request may or may not have been applied"
    )]
    Timeout { elapsed: Duration, last_error: String },
    /// The state machine executed the request and reported an error (deterministically, on
    /// every replica), e.g. a retry of a request whose session expired.
    #[error("the operation failed: {0}")]
    Failed(String),
    /// The replicas refused the password (or asked for one that was not given).
    #[error("authentication failed at {endpoint}: {reason}")]
    Auth { endpoint: String, reason: String },
    /// No endpoint answered while connecting; nothing was sent.
    #[error("no replica answered within {elapsed:.1?}: {errors}")]
    NoReplicaReachable { elapsed: Duration, errors: String },
    /// One endpoint could not be queried (status queries only; requests retry instead).
    #[error("{endpoint}: {reason}")]
    Unreachable { endpoint: String, reason: String },
    /// A replica answered something this client does not understand.
    #[error("protocol error: {0}")]
    Protocol(String),
}

impl ClientError {
    /// Whether the request certainly was not applied (and never will be).
    pub fn never_applied(&self) -> bool {
        matches!(self, ClientError::Invalid(_) | ClientError::Rejected { definitive: true, .. })
    }
}

/// The client policies' counters (`ClientPolicy::counters`, e.g. Nezha's `fast_commits`,
/// `slow_commits`, `done_commits`) summed over every request any client of this process
/// finished: what `synod bench` reports as the fast-commit ratio.
static POLICY_COUNTERS: std::sync::Mutex<BTreeMap<&'static str, u64>> = std::sync::Mutex::new(BTreeMap::new());

/// A snapshot of the process-wide policy counters (see [`POLICY_COUNTERS`]).
pub fn policy_counters() -> BTreeMap<String, u64> {
    let c = POLICY_COUNTERS.lock().unwrap_or_else(|p| p.into_inner());
    c.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn add_policy_counters(before: &[(&'static str, u64)], after: &[(&'static str, u64)]) {
    if after.is_empty() {
        return;
    }
    let mut c = POLICY_COUNTERS.lock().unwrap_or_else(|p| p.into_inner());
    for (name, v) in after {
        let was = before.iter().find(|(n, _)| n == name).map_or(0, |(_, b)| *b);
        *c.entry(*name).or_default() += v.saturating_sub(was);
    }
}

/// Map a policy's outcome to this client's result.
pub fn outcome_result(outcome: Outcome) -> Result<OpResult, ClientError> {
    match outcome {
        Outcome::Done(OpResult::Error(e)) => Err(ClientError::Failed(e)),
        Outcome::Done(result) => Ok(result),
        Outcome::Invalid(reason) => Err(ClientError::Invalid(reason)),
        Outcome::Rejected { definitive, reason } => Err(ClientError::Rejected { definitive, reason }),
        Outcome::Unknown(reason) => Err(ClientError::Unknown(reason)),
    }
}

/// One session with a synod cluster. See the crate documentation.
pub struct Client {
    endpoints: Vec<String>,
    opts: ClientOptions,
    /// Session id: random, nonzero (0 means "no session" to the state machine).
    client_id: u64,
    /// Sequence number of the next request.
    next_seq: u64,
    /// Every request below this has had its reply (or was given up and will never be retried,
    /// which is as good for the state machine: it may forget the result).
    acked_below: u64,
    /// Node id → index into `endpoints`, learned from the endpoints' `Status.id`.
    ids: HashMap<NodeId, usize>,
    /// The known node ids in endpoint order (what the policy sees as members).
    members: Vec<NodeId>,
    /// The protocol the replicas report running.
    protocol: Option<String>,
    last_refresh: Instant,
    /// The endpoint the last request was sent to.
    current: usize,
    policy: Box<dyn ClientPolicy>,
    rng: synod_core::Rng,
    /// Open connections by node, opened on the policy's first send there.
    links: HashMap<NodeId, Link>,
    next_link: u64,
    /// What the connections' reader tasks report.
    events_tx: mpsc::UnboundedSender<LinkEvent>,
    events: mpsc::UnboundedReceiver<LinkEvent>,
    /// An authentication refusal seen by the last status round.
    auth_error: Option<ClientError>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("client_id", &self.client_id)
            .field("next_seq", &self.next_seq)
            .field("endpoint", &self.endpoints[self.current])
            .finish()
    }
}

/// One connection of the client: the write half; a task reads the other half.
struct Link {
    id: u64,
    writer: WriteHalf,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// What a connection's reader task reports.
enum LinkEvent {
    Msg { node: NodeId, link: u64, msg: ServerMsg },
    Closed { node: NodeId, link: u64, why: String },
}

/// An event for the policy of the current request.
enum PolicyEvent {
    Reply(Reply),
    Timer(u64),
    Unreachable(NodeId),
}

/// The client's clock for the policy: wall-clock time since the Unix epoch.
fn wall_now() -> Time {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Time(d.as_nanos() as u64)
}

impl Client {
    /// A client with default options. Waits (up to `max_retry_time`) until at least one
    /// endpoint answers a status query, and learns the node ids of those that do.
    pub async fn connect(endpoints: &[impl AsRef<str>]) -> Result<Client, ClientError> {
        Self::with_options(endpoints, ClientOptions::default()).await
    }

    /// A client with explicit options; see [`Client::connect`].
    pub async fn with_options(endpoints: &[impl AsRef<str>], opts: ClientOptions) -> Result<Client, ClientError> {
        if endpoints.is_empty() {
            return Err(ClientError::NoEndpoints);
        }
        let mut client_id = 0;
        while client_id == 0 {
            client_id = rand::thread_rng().gen();
        }
        let home = opts.home % endpoints.len();
        let policy = (opts.policy)(&opts.client_config());
        let (events_tx, events) = mpsc::unbounded_channel();
        let mut c = Client {
            endpoints: endpoints.iter().map(|e| e.as_ref().to_string()).collect(),
            opts,
            client_id,
            next_seq: 1,
            acked_below: 1,
            ids: HashMap::new(),
            members: Vec::new(),
            protocol: None,
            last_refresh: Instant::now(),
            current: home,
            policy,
            rng: synod_core::rng_from_seed(rand::thread_rng().gen()),
            links: HashMap::new(),
            next_link: 0,
            events_tx,
            events,
            auth_error: None,
        };
        let start = Instant::now();
        let mut backoff = BACKOFF_MIN;
        loop {
            let (reachable, errors) = c.refresh_ids().await;
            if !reachable {
                // A password problem does not go away by waiting: report it at once.
                if let Some(e) = c.auth_error.take() {
                    return Err(e);
                }
            }
            if reachable {
                let found = c.opts.resolve_policy.zip(c.protocol.as_deref()).and_then(|(f, name)| f(name));
                if let Some(factory) = found {
                    c.policy = factory(&c.opts.client_config());
                }
                return Ok(c);
            }
            if start.elapsed() >= c.opts.max_retry_time {
                return Err(ClientError::NoReplicaReachable { elapsed: start.elapsed(), errors: errors.join("; ") });
            }
            backoff = sleep_backoff(backoff).await;
        }
    }

    /// This session's id.
    pub fn client_id(&self) -> u64 {
        self.client_id
    }

    /// The endpoint the last request was sent to (the leader, once found, under the leader
    /// policy); the home endpoint before the first request.
    pub fn current_endpoint(&self) -> &str {
        &self.endpoints[self.current]
    }

    /// Run one operation, retrying (same seq) until it has a final answer or
    /// `max_retry_time` has passed.
    pub async fn execute(&mut self, op: Op) -> Result<OpResult, ClientError> {
        let seq = self.next_seq;
        self.next_seq += 1;
        let cmd = Command { client: self.client_id, seq, acked_below: self.acked_below, now_ms: 0, op };
        let result = self.execute_command(&cmd).await;
        // Final answer or given up: either way this seq is never sent again, so the state
        // machine may forget its result (see `acked_below`).
        self.acked_below = self.next_seq;
        result
    }

    /// Run `cmd` through the policy until it finishes or the retry budget is spent.
    async fn execute_command(&mut self, cmd: &Command) -> Result<OpResult, ClientError> {
        let start = Instant::now();
        let deadline = tokio::time::Instant::now() + self.opts.max_retry_time;
        if self.ids.len() < self.endpoints.len() && self.last_refresh.elapsed() >= REFRESH_IDS_EVERY {
            self.refresh_ids().await;
        }
        // Connections that broke since the last request; replies to earlier requests.
        while let Ok(ev) = self.events.try_recv() {
            if let LinkEvent::Closed { node, link, .. } = ev {
                self.drop_link(node, link);
            }
        }
        let mut last_error = String::from("none");
        let mut timers: HashMap<u64, tokio::time::Instant> = HashMap::new();
        let mut inbox: VecDeque<PolicyEvent> = VecDeque::new();
        let counters_before = self.policy.counters();
        let mut actions = self.step(|p, cx| p.begin(cx, cmd));
        loop {
            for action in std::mem::take(&mut actions) {
                match action {
                    ClientAction::Send { to, meta } => {
                        tracing::debug!(node = to, seq = cmd.seq, "send");
                        if let Err(why) = self.send_to(to, cmd, meta, deadline).await {
                            tracing::debug!(node = to, seq = cmd.seq, "cannot send: {why}");
                            last_error = format!("node {to}: {why}");
                            inbox.push_back(PolicyEvent::Unreachable(to));
                        }
                    }
                    ClientAction::SetTimer { id, after } => {
                        timers.insert(id, tokio::time::Instant::now() + after);
                    }
                    ClientAction::CancelTimer { id } => {
                        timers.remove(&id);
                    }
                    ClientAction::Finish(outcome) => {
                        add_policy_counters(&counters_before, &self.policy.counters());
                        return outcome_result(outcome);
                    }
                }
            }
            if let Some(ev) = inbox.pop_front() {
                // A replica we have not mapped yet (it was not up when we connected) may be
                // the one the policy must reach: a redirect to a leader we cannot address, or
                // a retry. Learn the missing ids first, or the policy cycles among the
                // replicas it knows until the retry budget is spent.
                if self.ids.len() < self.endpoints.len() {
                    let unknown_leader = matches!(&ev, PolicyEvent::Reply(Reply {
                        body: ReplyBody::NotLeader { leader: Some(l) }, ..
                    }) if !self.ids.contains_key(l));
                    let due = if unknown_leader { REFRESH_IDS_REDIRECT } else { REFRESH_IDS_EVERY };
                    if self.last_refresh.elapsed() >= due {
                        self.refresh_ids().await;
                    }
                }
                actions = self.step(|p, cx| match ev {
                    PolicyEvent::Reply(r) => p.on_reply(cx, r),
                    PolicyEvent::Timer(id) => p.on_timer(cx, id),
                    PolicyEvent::Unreachable(node) => p.on_unreachable(cx, node),
                });
                tracing::trace!(seq = cmd.seq, members = ?self.members, "policy stepped");
                continue;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ClientError::Timeout { elapsed: start.elapsed(), last_error });
            }
            let next_timer = timers.iter().min_by_key(|(_, at)| **at).map(|(id, at)| (*id, *at));
            let wake = next_timer.map_or(deadline, |(_, at)| at.min(deadline));
            tokio::select! {
                ev = self.events.recv() => match ev {
                    Some(LinkEvent::Msg { node, link, msg }) => match msg {
                        ServerMsg::Reply(r) if r.client == cmd.client && r.seq == cmd.seq => {
                            tracing::debug!(node, seq = cmd.seq, "reply: {}", describe(&r.body));
                            if !matches!(r.body, ReplyBody::Done(_)) {
                                last_error = format!("node {node}: {}", describe(&r.body));
                            }
                            inbox.push_back(PolicyEvent::Reply(r));
                        }
                        ServerMsg::Refused { reason } => {
                            last_error = format!("node {node} refused the connection: {reason}");
                            if self.drop_link(node, link) {
                                inbox.push_back(PolicyEvent::Unreachable(node));
                            }
                        }
                        // A late reply to an earlier request of this session, or a status.
                        _ => {}
                    },
                    Some(LinkEvent::Closed { node, link, why }) if self.drop_link(node, link) => {
                        last_error = format!("node {node}: {why}");
                        inbox.push_back(PolicyEvent::Unreachable(node));
                    }
                    // A connection replaced since, or the channel (never: we hold a sender).
                    Some(LinkEvent::Closed { .. }) | None => {}
                },
                _ = tokio::time::sleep_until(wake) => {
                    if let Some((id, at)) = next_timer {
                        if at <= tokio::time::Instant::now() {
                            timers.remove(&id);
                            if last_error == "none" {
                                last_error = format!("no reply within {:?}", self.opts.request_timeout);
                            }
                            inbox.push_back(PolicyEvent::Timer(id));
                        }
                    }
                }
            }
        }
    }

    /// Run one event through the policy; return what it asks for.
    fn step(&mut self, f: impl FnOnce(&mut dyn ClientPolicy, &mut ClientCtx<'_>)) -> Vec<ClientAction> {
        let mut actions = Vec::new();
        let home = self.home_index();
        let mut cx = ClientCtx::new(wall_now(), &mut self.rng, &self.members, home, &mut actions);
        f(self.policy.as_mut(), &mut cx);
        actions
    }

    /// The home endpoint as an index into `members`: the first known member at or after it.
    fn home_index(&self) -> usize {
        let home = self.opts.home % self.endpoints.len();
        let ep = |m: &NodeId| self.ids.get(m).copied().unwrap_or(usize::MAX);
        self.members.iter().position(|m| ep(m) >= home).unwrap_or(0)
    }

    /// Send the request to node `to`, connecting first if needed (within the attempt and
    /// overall budgets).
    async fn send_to(
        &mut self,
        to: NodeId,
        cmd: &Command,
        meta: RequestMeta,
        deadline: tokio::time::Instant,
    ) -> Result<(), String> {
        let Some(&ep) = self.ids.get(&to) else {
            return Err("not one of the endpoints".into());
        };
        self.current = ep;
        let limit = (tokio::time::Instant::now() + self.opts.request_timeout).min(deadline);
        if !self.links.contains_key(&to) {
            let stream = tokio::time::timeout_at(limit, connect(&self.endpoints[ep], &self.opts.access()))
                .await
                .map_err(|_| "connect timed out".to_string())?
                .map_err(|e| format!("connect failed: {e}"))?;
            let (rd, writer) = stream.into_split();
            self.next_link += 1;
            let id = self.next_link;
            let reader = tokio::spawn(read_loop(rd, to, id, self.events_tx.clone()));
            self.links.insert(to, Link { id, writer, reader });
        }
        let frame = wire::frame(&ClientMsg::Request { cmd: cmd.clone(), meta });
        let link = self.links.get_mut(&to).expect("link just ensured");
        let written = match tokio::time::timeout_at(limit, write_flush(&mut link.writer, &frame)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("send failed: {e}")),
            Err(_) => Err("send timed out".to_string()),
        };
        if written.is_err() {
            self.links.remove(&to);
        }
        written
    }

    /// Forget the connection to `node` if it is still `link`; whether it was.
    fn drop_link(&mut self, node: NodeId, link: u64) -> bool {
        if self.links.get(&node).is_some_and(|l| l.id == link) {
            self.links.remove(&node);
            true
        } else {
            false
        }
    }

    /// Ask every endpoint for its status and remember which node id each one is. Returns
    /// whether any endpoint answered, and the errors of those that did not.
    async fn refresh_ids(&mut self) -> (bool, Vec<String>) {
        let mut any = false;
        let mut errors = Vec::new();
        // Not `self.status_all()`: the future must not hold `&self` (the policy is not `Sync`).
        let endpoints = self.endpoints.clone();
        let access = self.opts.access();
        self.auth_error = None;
        for (idx, (_endpoint, res)) in
            status_all_access(&endpoints, self.opts.request_timeout, &access).await.into_iter().enumerate()
        {
            match res {
                Ok(s) => {
                    any = true;
                    self.ids.retain(|_, &mut i| i != idx);
                    self.protocol = Some(s.protocol.clone());
                    self.ids.insert(s.id, idx);
                }
                // The error names the endpoint already.
                Err(e) => {
                    errors.push(e.to_string());
                    if let ClientError::Auth { endpoint, reason } = e {
                        self.auth_error = Some(ClientError::Auth { endpoint, reason });
                    }
                }
            }
        }
        let mut members: Vec<(usize, NodeId)> = self.ids.iter().map(|(&id, &ep)| (ep, id)).collect();
        members.sort();
        self.members = members.into_iter().map(|(_, id)| id).collect();
        self.last_refresh = Instant::now();
        (any, errors)
    }

    /// Query one endpoint's status (over the client protocol), within `request_timeout`.
    pub async fn status(&self, endpoint: &str) -> Result<Status, ClientError> {
        status_access(endpoint, self.opts.request_timeout, &self.opts.access()).await
    }

    /// Query every endpoint's status concurrently, in endpoint order.
    pub async fn status_all(&self) -> Vec<(String, Result<Status, ClientError>)> {
        status_all_access(&self.endpoints, self.opts.request_timeout, &self.opts.access()).await
    }

    /// Value of `key`, or None if absent.
    pub async fn get(&mut self, key: impl Into<Bytes>) -> Result<Option<Bytes>, ClientError> {
        match self.execute(Op::Get { key: key.into() }).await? {
            OpResult::Value(v) => Ok(v),
            other => Err(unexpected("get", other)),
        }
    }

    pub async fn put(&mut self, key: impl Into<Bytes>, value: impl Into<Bytes>) -> Result<(), ClientError> {
        match self.execute(Op::Put { key: key.into(), value: value.into() }).await? {
            OpResult::Done => Ok(()),
            other => Err(unexpected("put", other)),
        }
    }

    /// Delete `key`; returns whether it existed.
    pub async fn delete(&mut self, key: impl Into<Bytes>) -> Result<bool, ClientError> {
        match self.execute(Op::Delete { key: key.into() }).await? {
            OpResult::Deleted(existed) => Ok(existed),
            other => Err(unexpected("delete", other)),
        }
    }

    /// Compare-and-swap: if the value of `key` is `expect` (None = absent), set it to `new`
    /// (None = delete). Returns whether it swapped and the value found.
    pub async fn cas(
        &mut self,
        key: impl Into<Bytes>,
        expect: Option<Bytes>,
        new: Option<Bytes>,
    ) -> Result<(bool, Option<Bytes>), ClientError> {
        match self.execute(Op::Cas { key: key.into(), expect, new }).await? {
            OpResult::Cas { ok, current } => Ok((ok, current)),
            other => Err(unexpected("cas", other)),
        }
    }

    /// Pairs with keys in `[start, end)` (empty `end` = unbounded), at most `limit` (0 = all).
    pub async fn scan(
        &mut self,
        start: impl Into<Bytes>,
        end: impl Into<Bytes>,
        limit: u32,
    ) -> Result<Vec<(Bytes, Bytes)>, ClientError> {
        match self.execute(Op::Scan { start: start.into(), end: end.into(), limit }).await? {
            OpResult::Scan(pairs) => Ok(pairs),
            other => Err(unexpected("scan", other)),
        }
    }
}

fn unexpected(what: &str, got: OpResult) -> ClientError {
    ClientError::Protocol(format!("unexpected result for {what}: {got:?}"))
}

/// Query one endpoint's status over the client protocol (no session needed), without TLS
/// or password; [`status_with`] for replicas that need them.
pub async fn status_of(endpoint: &str, timeout: Duration) -> Result<Status, ClientError> {
    status_access(endpoint, timeout, &Access::default()).await
}

/// [`status_of`] with the TLS and password of `opts`.
pub async fn status_with(endpoint: &str, timeout: Duration, opts: &ClientOptions) -> Result<Status, ClientError> {
    status_access(endpoint, timeout, &opts.access()).await
}

async fn status_access(endpoint: &str, timeout: Duration, access: &Access) -> Result<Status, ClientError> {
    let unreachable = |reason: String| ClientError::Unreachable { endpoint: endpoint.to_string(), reason };
    let query = async {
        let mut conn = Conn::open(endpoint, access).await.map_err(|e| Err(format!("connect failed: {e}")))?;
        conn.send(&ClientMsg::Status).await.map_err(|e| Err(e.to_string()))?;
        loop {
            match conn.recv().await.map_err(|e| Err(e.to_string()))? {
                ServerMsg::Status(s) => return Ok(s),
                ServerMsg::Reply(_) => continue,
                ServerMsg::Refused { reason } if is_auth_refusal(&reason) => return Err(Ok(reason)),
                ServerMsg::Refused { reason } => {
                    return Err(Err(format!("the replica refused the connection: {reason}")))
                }
            }
        }
    };
    match tokio::time::timeout(timeout, query).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(Ok(reason))) => Err(ClientError::Auth { endpoint: endpoint.to_string(), reason }),
        Ok(Err(Err(e))) => Err(unreachable(e)),
        Err(_) => Err(unreachable(format!("no status answer within {timeout:?}"))),
    }
}

/// Whether a refusal is about the password (`NOAUTH`, `WRONGPASS`).
fn is_auth_refusal(reason: &str) -> bool {
    reason.starts_with("NOAUTH") || reason.starts_with("WRONGPASS")
}

/// Query the status of several endpoints concurrently; results in the order given.
pub async fn status_all(
    endpoints: &[impl AsRef<str>],
    timeout: Duration,
) -> Vec<(String, Result<Status, ClientError>)> {
    status_all_access(endpoints, timeout, &Access::default()).await
}

/// [`status_all`] with the TLS and password of `opts`.
pub async fn status_all_with(
    endpoints: &[impl AsRef<str>],
    timeout: Duration,
    opts: &ClientOptions,
) -> Vec<(String, Result<Status, ClientError>)> {
    status_all_access(endpoints, timeout, &opts.access()).await
}

async fn status_all_access(
    endpoints: &[impl AsRef<str>],
    timeout: Duration,
    access: &Access,
) -> Vec<(String, Result<Status, ClientError>)> {
    let handles: Vec<_> = endpoints
        .iter()
        .map(|e| {
            let e = e.as_ref().to_string();
            let access = access.clone();
            tokio::spawn(async move { status_access(&e, timeout, &access).await })
        })
        .collect();
    let mut out = Vec::with_capacity(endpoints.len());
    for (e, h) in endpoints.iter().zip(handles) {
        let r = h.await.unwrap_or_else(|j| Err(ClientError::Protocol(format!("status task failed: {j}"))));
        out.push((e.as_ref().to_string(), r));
    }
    out
}

/// A short description of a non-final reply, for `ClientError::Timeout`'s last error.
fn describe(body: &ReplyBody) -> String {
    match body {
        ReplyBody::Done(_) => "done".into(),
        ReplyBody::NotLeader { leader: Some(l) } => format!("not the leader (node {l} is)"),
        ReplyBody::NotLeader { leader: None } => "no leader known (election?)".into(),
        ReplyBody::Rejected { reason } => format!("rejected: {reason}"),
        ReplyBody::RejectedEarly { reason } => format!("rejected (not yet durable): {reason}"),
        ReplyBody::Speculative { view, .. } => format!("speculative reply (view {view})"),
        ReplyBody::SlowReply { view } => format!("slow reply (view {view})"),
        ReplyBody::Invalid { reason } => format!("invalid: {reason}"),
    }
}

/// Open a client-protocol connection: connect (TLS if asked), then the magic and the
/// password.
async fn connect(endpoint: &str, access: &Access) -> std::io::Result<Stream> {
    let tcp = TcpStream::connect(endpoint).await?;
    tcp.set_nodelay(true)?;
    let tls = match &access.tls {
        Some(t) => {
            let name = synod_tls::server_name_of(endpoint)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
            Some((&t.connector, name))
        }
        None => None,
    };
    let mut stream = Stream::connect(tcp, tls).await?;
    let mut preamble = CLIENT_MAGIC.to_vec();
    if let Some(password) = &access.password {
        preamble.extend_from_slice(&wire::frame(&ClientMsg::Auth { password: password.clone() }));
    }
    write_flush(&mut stream, &preamble).await?;
    Ok(stream)
}

/// Write all of `buf` and flush (TLS holds the tail of a record until a flush).
async fn write_flush<W: AsyncWriteExt + Unpin>(w: &mut W, buf: &[u8]) -> std::io::Result<()> {
    w.write_all(buf).await?;
    w.flush().await
}

/// Read frames from one connection and hand them to the client until it breaks.
async fn read_loop(mut rd: ReadHalf, node: NodeId, link: u64, tx: mpsc::UnboundedSender<LinkEvent>) {
    let mut buf = BytesMut::with_capacity(4096);
    let why = loop {
        match wire::take_frame(&mut buf, MAX_REPLY_FRAME) {
            Ok(Some(payload)) => match wire::decode_payload::<ServerMsg>(&payload) {
                Ok(msg) => {
                    if tx.send(LinkEvent::Msg { node, link, msg }).is_err() {
                        return;
                    }
                }
                Err(e) => break e.to_string(),
            },
            Ok(None) => match rd.read_buf(&mut buf).await {
                Ok(0) => break "connection closed by the replica".to_string(),
                Ok(_) => {}
                Err(e) => break e.to_string(),
            },
            Err(e) => break e.to_string(),
        }
    };
    let _ = tx.send(LinkEvent::Closed { node, link, why });
}

/// Sleep `current` plus up to 50% jitter; return the next (doubled, capped) backoff.
async fn sleep_backoff(current: Duration) -> Duration {
    let jitter = rand::thread_rng().gen_range(0..=current.as_micros() as u64 / 2);
    tokio::time::sleep(current + Duration::from_micros(jitter)).await;
    (current * 2).min(BACKOFF_MAX)
}

/// Errors on one connection; each one makes the client drop the connection.
#[derive(Debug, thiserror::Error)]
enum ConnError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("connection closed by the replica")]
    Closed,
    #[error("{0}")]
    Frame(#[from] FrameError),
    #[error("the replica answered with TLS: connect with TLS (ClientOptions::tls, --tls-ca)")]
    Tls,
}

/// Whether a plain connection got the start of a TLS record (an alert or handshake, TLS 1.x)
/// instead of a frame: the replica's port has TLS on.
fn looks_like_tls(buf: &[u8]) -> bool {
    buf.len() >= 3 && matches!(buf[0], 0x15 | 0x16) && buf[1] == 0x03 && buf[2] <= 0x04
}

/// One client-protocol connection: magic, then length-prefixed postcard frames.
struct Conn {
    stream: Stream,
    buf: BytesMut,
}

impl Conn {
    async fn open(endpoint: &str, access: &Access) -> std::io::Result<Conn> {
        Ok(Conn { stream: connect(endpoint, access).await?, buf: BytesMut::with_capacity(4096) })
    }

    async fn send(&mut self, msg: &ClientMsg) -> Result<(), ConnError> {
        write_flush(&mut self.stream, &wire::frame(msg)).await?;
        Ok(())
    }

    async fn recv(&mut self) -> Result<ServerMsg, ConnError> {
        loop {
            if looks_like_tls(&self.buf) {
                return Err(ConnError::Tls);
            }
            if let Some(payload) = wire::take_frame(&mut self.buf, MAX_REPLY_FRAME)? {
                return Ok(wire::decode_payload(&payload)?);
            }
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return Err(ConnError::Closed);
            }
        }
    }
}

#[cfg(test)]
mod tests;
