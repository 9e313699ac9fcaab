//! The native synod client.
//!
//! A [`Client`] is one *session* of the exactly-once protocol (`synod_core::session`): it has
//! a random nonzero session id, numbers its requests 1, 2, 3, … and retries a request with the
//! *same* sequence number until it gets an answer. The replicated state machine remembers the
//! result of each (client, seq), so a put that is retried after a leader change — because its
//! reply was lost, not the put — is applied once and the retry gets the original result.
//!
//! Finding the leader: the client talks to one replica at a time. A replica that is not the
//! leader answers `NotLeader { leader }`; the client maps the node id to one of its endpoints
//! (learned by asking every endpoint for its `Status`) and goes there. A connection error, a
//! timeout or `NotLeader { leader: None }` (election in progress) moves the client to the next
//! endpoint after a short randomized backoff. The leader found is cached for later requests.
//!
//! One request is outstanding per client (`&mut self`); create several clients for
//! concurrency. They are cheap: one TCP connection each.

use bytes::{Bytes, BytesMut};
use rand::Rng as _;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use synod_core::wire::{self, ClientMsg, FrameError, ServerMsg, CLIENT_MAGIC};
use synod_core::{Command, NodeId, Op, OpResult, ReplyBody, Status};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest reply frame accepted (a big scan); matches the replicas' default frame limit.
const MAX_REPLY_FRAME: usize = 64 * 1024 * 1024;
/// Backoff between attempts grows from the first to the last value (plus jitter).
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_millis(500);

/// Timing knobs of a client.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// How long one attempt (connect + request + reply) may take before the client tries
    /// elsewhere. A request slower than this is retried with the same seq, which is safe.
    pub request_timeout: Duration,
    /// How long a request is retried in total before [`ClientError::Timeout`].
    pub max_retry_time: Duration,
    /// The endpoint tried first (index into the endpoints, modulo their number): the
    /// client's home replica. A leader-based cluster redirects the client to its leader; a
    /// leaderless one (EPaxos, Mencius) serves it there, so spreading clients over the
    /// replicas (or giving each the nearest) spreads the command leaders.
    pub home: usize,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions { request_timeout: Duration::from_secs(2), max_retry_time: Duration::from_secs(30), home: 0 }
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
    /// Endpoint the next attempt goes to: the leader once it is known.
    current: usize,
    /// Open connection, to `endpoints[conn.0]`.
    conn: Option<(usize, Conn)>,
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

/// What became of one attempt of a request.
enum Attempt {
    Final(Result<OpResult, ClientError>),
    /// Go to this endpoint right away (a redirect to a known leader).
    Redirect(usize),
    /// Try the next endpoint after a backoff; the string says why.
    Next(String),
    /// Retry the same endpoint after a backoff (the replica is overloaded).
    Again(String),
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
        let mut c = Client {
            endpoints: endpoints.iter().map(|e| e.as_ref().to_string()).collect(),
            opts,
            client_id,
            next_seq: 1,
            acked_below: 1,
            ids: HashMap::new(),
            current: home,
            conn: None,
        };
        let start = Instant::now();
        let mut backoff = BACKOFF_MIN;
        loop {
            let (reachable, errors) = c.refresh_ids().await;
            if reachable {
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

    /// The endpoint requests currently go to (the leader, once found).
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

    async fn execute_command(&mut self, cmd: &Command) -> Result<OpResult, ClientError> {
        let start = Instant::now();
        let mut backoff = BACKOFF_MIN;
        let mut last_error = String::from("none");
        // Redirects in a row without an answer: a stale leader hint can bounce the client
        // between replicas during an election, so after a few the client backs off.
        let mut redirects = 0;
        loop {
            let elapsed = start.elapsed();
            if elapsed >= self.opts.max_retry_time {
                return Err(ClientError::Timeout { elapsed, last_error });
            }
            let budget = self.opts.request_timeout.min(self.opts.max_retry_time - elapsed);
            match self.attempt(cmd, budget).await {
                Attempt::Final(r) => return r,
                Attempt::Redirect(idx) => {
                    last_error = format!("redirected to {}", self.endpoints[idx]);
                    self.current = idx;
                    redirects += 1;
                    if redirects > self.endpoints.len() {
                        backoff = sleep_backoff(backoff).await;
                    }
                }
                Attempt::Next(why) => {
                    tracing::debug!(endpoint = %self.endpoints[self.current], seq = cmd.seq, "retrying elsewhere: {why}");
                    last_error = format!("{}: {why}", self.endpoints[self.current]);
                    self.conn = None;
                    self.current = (self.current + 1) % self.endpoints.len();
                    backoff = sleep_backoff(backoff).await;
                }
                Attempt::Again(why) => {
                    last_error = format!("{}: {why}", self.endpoints[self.current]);
                    backoff = sleep_backoff(backoff).await;
                }
            }
        }
    }

    /// Send `cmd` to the current endpoint and wait for its reply, within `budget`.
    async fn attempt(&mut self, cmd: &Command, budget: Duration) -> Attempt {
        let deadline = tokio::time::Instant::now() + budget;
        let conn = match self.connection(deadline).await {
            Ok(c) => c,
            Err(e) => return Attempt::Next(e),
        };
        let exchange = async {
            conn.send(&ClientMsg::Request { cmd: cmd.clone(), meta: Default::default() }).await?;
            loop {
                match conn.recv().await? {
                    // A late reply to an earlier request of this session: not ours.
                    ServerMsg::Reply(r) if r.client == cmd.client && r.seq == cmd.seq => return Ok::<_, ConnError>(r),
                    ServerMsg::Refused { reason } => return Err(ConnError::Refused(reason)),
                    _ => continue,
                }
            }
        };
        let reply = match tokio::time::timeout_at(deadline, exchange).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Attempt::Next(e.to_string()),
            Err(_) => return Attempt::Next(format!("no reply within {budget:?}")),
        };
        match reply.body {
            ReplyBody::Done(OpResult::Error(e)) => Attempt::Final(Err(ClientError::Failed(e))),
            ReplyBody::Done(result) => Attempt::Final(Ok(result)),
            ReplyBody::Invalid { reason } => Attempt::Final(Err(ClientError::Invalid(reason))),
            ReplyBody::Rejected { reason } => Attempt::Again(format!("rejected: {reason}")),
            ReplyBody::NotLeader { leader: None } => Attempt::Next("no leader known (election?)".into()),
            ReplyBody::NotLeader { leader: Some(id) } => {
                let here = self.current;
                if !self.ids.contains_key(&id) {
                    // A replica we have not identified yet (it was down when we asked).
                    self.refresh_ids().await;
                    // Stay put: the decision below is relative to the replica that answered.
                    self.current = here;
                }
                match self.ids.get(&id) {
                    Some(&idx) if idx != here => Attempt::Redirect(idx),
                    Some(_) => Attempt::Next(format!("node {id} names itself as leader but refuses")),
                    None => Attempt::Next(format!("leader is node {id}, which none of the endpoints is")),
                }
            }
            ReplyBody::Speculative { .. } => Attempt::Final(Err(ClientError::Protocol(
                "speculative replies (Nezha fast path) are not supported by this client".into(),
            ))),
        }
    }

    /// The open connection to the current endpoint, opening it if needed.
    async fn connection(&mut self, deadline: tokio::time::Instant) -> Result<&mut Conn, String> {
        if !matches!(&self.conn, Some((idx, _)) if *idx == self.current) {
            self.conn = None;
            let endpoint = &self.endpoints[self.current];
            let conn = tokio::time::timeout_at(deadline, Conn::open(endpoint))
                .await
                .map_err(|_| "connect timed out".to_string())?
                .map_err(|e| format!("connect failed: {e}"))?;
            self.conn = Some((self.current, conn));
        }
        Ok(&mut self.conn.as_mut().expect("connection just opened").1)
    }

    /// Ask every endpoint for its status and remember which node id each one is. Moves
    /// `current` to the leader if a replica names one. Returns whether any endpoint answered,
    /// and the errors of those that did not.
    async fn refresh_ids(&mut self) -> (bool, Vec<String>) {
        let mut any = false;
        let mut errors = Vec::new();
        let mut leader = None;
        for (idx, (_endpoint, res)) in self.status_all().await.into_iter().enumerate() {
            match res {
                Ok(s) => {
                    any = true;
                    self.ids.insert(s.id, idx);
                    if s.role == synod_core::Role::Leader {
                        leader = Some(s.id);
                    }
                    leader = leader.or(s.leader);
                }
                // The error names the endpoint already.
                Err(e) => errors.push(e.to_string()),
            }
        }
        if let Some(&idx) = leader.and_then(|l| self.ids.get(&l)) {
            self.current = idx;
        }
        (any, errors)
    }

    /// Query one endpoint's status (over the client protocol), within `request_timeout`.
    pub async fn status(&self, endpoint: &str) -> Result<Status, ClientError> {
        status_of(endpoint, self.opts.request_timeout).await
    }

    /// Query every endpoint's status concurrently, in endpoint order.
    pub async fn status_all(&self) -> Vec<(String, Result<Status, ClientError>)> {
        status_all(&self.endpoints, self.opts.request_timeout).await
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

/// Query one endpoint's status over the client protocol (no session needed).
pub async fn status_of(endpoint: &str, timeout: Duration) -> Result<Status, ClientError> {
    let unreachable = |reason: String| ClientError::Unreachable { endpoint: endpoint.to_string(), reason };
    let query = async {
        let mut conn = Conn::open(endpoint).await.map_err(|e| format!("connect failed: {e}"))?;
        conn.send(&ClientMsg::Status).await.map_err(|e| e.to_string())?;
        loop {
            match conn.recv().await.map_err(|e| e.to_string())? {
                ServerMsg::Status(s) => return Ok(s),
                ServerMsg::Reply(_) => continue,
                ServerMsg::Refused { reason } => return Err(format!("the replica refused the connection: {reason}")),
            }
        }
    };
    match tokio::time::timeout(timeout, query).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(unreachable(e)),
        Err(_) => Err(unreachable(format!("no status answer within {timeout:?}"))),
    }
}

/// Query the status of several endpoints concurrently; results in the order given.
pub async fn status_all(
    endpoints: &[impl AsRef<str>],
    timeout: Duration,
) -> Vec<(String, Result<Status, ClientError>)> {
    let handles: Vec<_> = endpoints
        .iter()
        .map(|e| {
            let e = e.as_ref().to_string();
            tokio::spawn(async move { status_of(&e, timeout).await })
        })
        .collect();
    let mut out = Vec::with_capacity(endpoints.len());
    for (e, h) in endpoints.iter().zip(handles) {
        let r = h.await.unwrap_or_else(|j| Err(ClientError::Protocol(format!("status task failed: {j}"))));
        out.push((e.as_ref().to_string(), r));
    }
    out
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
    #[error("the replica refused the connection: {0}")]
    Refused(String),
    #[error("{0}")]
    Frame(#[from] FrameError),
}

/// One client-protocol connection: magic, then length-prefixed postcard frames.
struct Conn {
    stream: TcpStream,
    buf: BytesMut,
}

impl Conn {
    async fn open(endpoint: &str) -> std::io::Result<Conn> {
        let mut stream = TcpStream::connect(endpoint).await?;
        stream.set_nodelay(true)?;
        stream.write_all(CLIENT_MAGIC).await?;
        Ok(Conn { stream, buf: BytesMut::with_capacity(4096) })
    }

    async fn send(&mut self, msg: &ClientMsg) -> Result<(), ConnError> {
        self.stream.write_all(&wire::frame(msg)).await?;
        Ok(())
    }

    async fn recv(&mut self) -> Result<ServerMsg, ConnError> {
        loop {
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
