//! One RESP connection.
//!
//! A connection is one *session* of the exactly-once protocol: a random client id, and one
//! sequence number per data command. Pipelining: everything readable is parsed and submitted
//! at once (up to [`MAX_INFLIGHT`] commands or `max_frame_bytes` of payload in flight; beyond
//! that the connection stops reading its socket, which is TCP backpressure), and replies
//! leave strictly in request order — a queue of slots, each either a ready reply or a
//! sequence number still waiting for its result.
//!
//! Where a command goes and how the answers to it count is the protocol's client policy
//! (the registry's `client`, `synod_core::client_policy`), one instance per command in
//! flight, reused for later commands of the connection once it finished its own (a policy
//! runs one request at a time, like a client session; what it learns — Nezha's one-way-delay
//! estimates — carries over, as in the client library and a proxy's native sessions): a send to this replica goes to its node loop, a send to another replica straight
//! to that replica's native client port through the
//! [`Forwarder`](super::forward::Forwarder) (a failed forwarding connection is reported to
//! the policy as unreachable). The policy's home replica is the leader this replica knows of
//! when it is a follower, else this replica, so the leader policy forwards straight to the
//! leader and follows `NotLeader` redirects, and a leaderless protocol's commands are led
//! here. Policy timers run on the connection's tick. Only after `give_up_after` does the
//! client get `-TRYAGAIN`. Because every retry carries the same (client, seq), a command is
//! applied at most once however many times it is sent.

use super::commands::{self, Shape, Translated};
use super::forward::FwdEvent;
use super::parse::RequestParser;
use super::reply::RespValue;
use super::server;
use super::RespShared;
use crate::client::{ClientInput, REPLY_QUEUE};
use anyhow::Context as _;
use bytes::{Bytes, BytesMut};
use rand::Rng as _;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;
use synod_core::client_policy::{ClientAction, ClientCtx, ClientPolicy, Outcome, RequestMeta};
use synod_core::wire::ServerMsg;
use synod_core::{Command, NodeId, Op, OpResult, Reply, Role, Time};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Data commands submitted and not yet answered, per connection.
pub const MAX_INFLIGHT: usize = 1024;
/// How often pending commands are checked for the give-up time and due policy timers.
const TICK: Duration = Duration::from_millis(20);
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A place in the reply order.
/// Each carries the protocol version in force when its command ran (HELLO may change it
/// in the middle of a pipeline).
enum Slot {
    Ready(RespValue, u8),
    /// The result of this sequence number, once it arrives.
    Wait(u64, u8),
    /// QUIT: flush what came before, then close.
    Close,
}

/// One command queued between MULTI and EXEC.
enum Queued {
    /// A data command: part of the transaction's `Op::Multi`, rendered with its shape.
    Op(Op, Shape),
    /// A reply decided at queue time (connection commands such as PING, and commands whose
    /// arguments Redis would refuse when EXEC runs them, e.g. a syntax error).
    Fixed(RespValue),
}

/// The state of MULTI … EXEC.
#[derive(Default)]
struct MultiState {
    queued: Vec<Queued>,
    /// An unknown command or a wrong arity was queued: EXEC answers EXECABORT.
    dirty: bool,
}

/// A data command on its way through the log.
struct Pending {
    cmd: Command,
    shape: Shape,
    /// EXEC: how to render each queued command (the data ones from the `Multi` result).
    exec: Option<Vec<Queued>>,
    size: usize,
    started: Instant,
    /// The client policy running this command, and its armed timers.
    policy: Box<dyn ClientPolicy>,
    timers: BTreeMap<u64, Instant>,
    last_error: String,
}

/// An event for the policy of one pending command.
enum PolicyEvent {
    Begin,
    Reply(Reply),
    Timer(u64),
    Unreachable(NodeId),
}

/// Per-connection state visible to the local commands (CLIENT, HELLO, AUTH …).
pub struct ConnState {
    pub id: u64,
    pub peer: SocketAddr,
    /// 2 or 3 (HELLO).
    pub proto: u8,
    pub authed: bool,
    pub name: Option<Bytes>,
    pub lib_name: Option<Bytes>,
    pub lib_ver: Option<Bytes>,
}

struct Conn<'a> {
    shared: &'a RespShared,
    st: ConnState,
    session: u64,
    next_seq: u64,
    out: VecDeque<Slot>,
    pending: BTreeMap<u64, Pending>,
    /// Results that arrived before the replies ahead of them.
    done: HashMap<u64, RespValue>,
    inflight_bytes: usize,
    fwd_tx: mpsc::UnboundedSender<FwdEvent>,
    /// The policies' randomness (backoffs).
    rng: synod_core::Rng,
    /// Policies whose command finished, for the next commands (a fresh Nezha proxy policy
    /// has no one-way-delay samples and stamps every request with the clamp D).
    idle_policies: Vec<Box<dyn ClientPolicy>>,
    closing: bool,
    /// Inside MULTI.
    multi: Option<MultiState>,
    /// WATCHed keys and the versions read (through the log) when they were watched.
    watched: Vec<(Bytes, u64)>,
    /// WATCH commands whose versions have not arrived yet.
    watch_pending: std::collections::BTreeSet<u64>,
    /// A WATCH failed (error or timeout): the next EXEC aborts, since its keys' versions are
    /// unknown.
    watch_failed: bool,
    /// An EXEC that arrived while a WATCH was still in flight: it needs the versions, so it
    /// (and everything after it) waits.
    deferred: Option<Vec<Bytes>>,
}

/// Serve one connection until the client leaves, sends QUIT, or breaks the framing.
pub async fn serve(tcp: TcpStream, peer: SocketAddr, id: u64, shared: &RespShared) -> anyhow::Result<()> {
    let _ = tcp.set_nodelay(true);
    let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, synod_tls::Stream::accept(tcp, shared.tls.as_ref()))
        .await
        .context("no TLS handshake in time")?
        .context("TLS handshake failed")?;
    let (mut rd, mut wr) = stream.into_split();
    let (local_tx, mut local_rx) = mpsc::channel(REPLY_QUEUE);
    let (fwd_tx, mut fwd_rx) = mpsc::unbounded_channel();
    if shared.inbox.send(ClientInput::Open { conn: id, replies: local_tx }).await.is_err() {
        return Ok(()); // shutting down
    }
    let mut session = 0;
    while session == 0 {
        session = rand::thread_rng().gen();
    }
    let mut c = Conn {
        shared,
        st: ConnState {
            id,
            peer,
            proto: 2,
            authed: shared.password.is_none(),
            name: None,
            lib_name: None,
            lib_ver: None,
        },
        session,
        next_seq: 1,
        out: VecDeque::new(),
        pending: BTreeMap::new(),
        done: HashMap::new(),
        inflight_bytes: 0,
        fwd_tx,
        rng: synod_core::rng_from_seed(rand::thread_rng().gen()),
        idle_policies: Vec::new(),
        closing: false,
        multi: None,
        watched: Vec::new(),
        watch_pending: Default::default(),
        watch_failed: false,
        deferred: None,
    };
    let mut parser = RequestParser::new(shared.limits.max_frame_bytes);
    let mut rbuf = BytesMut::with_capacity(16 * 1024);
    let mut charge = shared.budget.charge();
    let mut wbuf = BytesMut::with_capacity(16 * 1024);
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let result = async {
        loop {
            if c.deferred.is_some() && c.watch_pending.is_empty() {
                if let Some(args) = c.deferred.take() {
                    c.request(args).await;
                }
            }
            // Parse and submit everything complete, as far as the in-flight limits allow.
            while !c.closing && c.has_room() {
                match parser.next(&mut rbuf) {
                    Ok(Some(args)) => c.request(args).await,
                    Ok(None) => break,
                    Err(e) => {
                        c.ready(RespValue::err(format!("ERR {e}")));
                        c.out.push_back(Slot::Close);
                        c.closing = true;
                    }
                }
            }
            if c.flush(&mut wbuf) {
                crate::transport::write_flush(&mut wr, &wbuf).await.context("writing replies")?;
                return Ok(());
            }
            if !wbuf.is_empty() {
                crate::transport::write_flush(&mut wr, &wbuf).await.context("writing replies")?;
                wbuf.clear();
            }
            let can_read = !c.closing && c.has_room();
            tokio::select! {
                n = rd.read_buf(&mut rbuf), if can_read => {
                    // A TLS client closing without close_notify: an ordinary end.
                    let n = match n {
                        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(0),
                        other => other,
                    };
                    if n.context("reading requests")? == 0 {
                        return Ok(());
                    }
                    // The node-wide budget for pending requests: over it, this connection
                    // is told so and closed (as Redis closes a client over its query
                    // buffer limit).
                    if let Err(e) = charge.set(rbuf.capacity() + parser.held()) {
                        tracing::warn!(peer = %c.st.peer, "closing a RESP connection: {e}");
                        c.ready(RespValue::err(format!("ERR {e}")));
                        c.out.push_back(Slot::Close);
                        c.closing = true;
                    }
                }
                Some(msg) = local_rx.recv() => {
                    if let ServerMsg::Reply(r) = msg {
                        c.reply(r).await;
                    }
                }
                Some(ev) = fwd_rx.recv() => match ev {
                    FwdEvent::Reply(r) => c.reply(r).await,
                    FwdEvent::Failed { node, seq, reason, .. } => {
                        if let Some(p) = c.pending.get_mut(&seq) {
                            p.last_error = reason;
                        }
                        c.step(seq, PolicyEvent::Unreachable(node)).await;
                    }
                },
                _ = tick.tick(), if !c.pending.is_empty() => c.check_timeouts().await,
            }
        }
    }
    .await;
    let _ = shared.inbox.send(ClientInput::Closed { conn: id }).await;
    result
}

impl Conn<'_> {
    fn has_room(&self) -> bool {
        self.deferred.is_none()
            && self.pending.len() < MAX_INFLIGHT
            && self.inflight_bytes < self.shared.limits.max_frame_bytes
    }

    /// One parsed request.
    async fn request(&mut self, args: Vec<Bytes>) {
        self.shared.stats.total_commands.fetch_add(1, Ordering::Relaxed);
        // Redis's order of checks: unknown command, arity, authentication, then the command.
        // Inside MULTI, the first two also doom the transaction (EXECABORT).
        let Some(spec) = commands::lookup(&args[0]) else {
            return self.queue_error(commands::unknown_command(&args));
        };
        if !spec.arity_ok(args.len()) {
            return self.queue_error(commands::wrong_arity(spec.name));
        }
        if !self.st.authed && !matches!(spec.name, "auth" | "hello" | "quit") {
            return self.queue_error(RespValue::err("NOAUTH Authentication required."));
        }
        match (spec.name, self.multi.is_some()) {
            ("multi", true) => return self.ready(RespValue::err("ERR MULTI calls can not be nested")),
            ("multi", false) => {
                self.multi = Some(MultiState::default());
                return self.ready(RespValue::ok());
            }
            ("exec", false) => return self.ready(RespValue::err("ERR EXEC without MULTI")),
            ("discard", false) => return self.ready(RespValue::err("ERR DISCARD without MULTI")),
            ("exec", true) => {
                if !self.watch_pending.is_empty() {
                    self.deferred = Some(args);
                    return;
                }
                return self.exec().await;
            }
            ("discard", true) => {
                self.multi = None;
                self.unwatch();
                return self.ready(RespValue::ok());
            }
            ("watch", true) => return self.ready(RespValue::err("ERR WATCH inside MULTI is not allowed")),
            ("unwatch", false) => {
                self.unwatch();
                return self.ready(RespValue::ok());
            }
            ("quit", _) => {}
            (_, true) => {
                let queued = match commands::translate(&args, &self.shared.cursors) {
                    Translated::Data { op, shape } => Queued::Op(op, shape),
                    Translated::Reply(v) => Queued::Fixed(v),
                    Translated::Local(spec) => match server::local(spec, &args, &mut self.st, self.shared) {
                        server::Outcome::Reply(v) => Queued::Fixed(v),
                        server::Outcome::Quit => Queued::Fixed(RespValue::ok()),
                    },
                };
                if let Some(m) = &mut self.multi {
                    m.queued.push(queued);
                }
                return self.ready(RespValue::Simple("QUEUED".into()));
            }
            _ => {}
        }
        match commands::translate(&args, &self.shared.cursors) {
            Translated::Reply(v) => self.ready(v),
            Translated::Local(spec) => match server::local(spec, &args, &mut self.st, self.shared) {
                server::Outcome::Reply(v) => self.ready(v),
                server::Outcome::Quit => {
                    self.ready(RespValue::ok());
                    self.out.push_back(Slot::Close);
                    self.closing = true;
                }
            },
            Translated::Data { op, shape } => {
                let seq = self.submit(op, shape, None).await;
                if let (Some(seq), Shape::Watch) = (seq, shape) {
                    self.watch_pending.insert(seq);
                }
            }
        }
    }

    /// An error answered at once; inside MULTI it also dooms the transaction.
    fn queue_error(&mut self, v: RespValue) {
        if let Some(m) = &mut self.multi {
            m.dirty = true;
        }
        self.ready(v)
    }

    fn unwatch(&mut self) {
        self.watched.clear();
        self.watch_pending.clear();
        self.watch_failed = false;
    }

    /// EXEC: the queued data commands become one `Op::Multi` (one log entry, applied
    /// atomically), conditioned on the versions of the watched keys.
    async fn exec(&mut self) {
        let Some(m) = self.multi.take() else { return };
        let watch = std::mem::take(&mut self.watched);
        let watch_failed = self.watch_failed;
        self.unwatch();
        if m.dirty {
            return self.ready(RespValue::err("EXECABORT Transaction discarded because of previous errors."));
        }
        if watch_failed {
            return self.ready(RespValue::NullArray);
        }
        let ops: Vec<Op> = m
            .queued
            .iter()
            .filter_map(|q| match q {
                Queued::Op(op, _) => Some(op.clone()),
                Queued::Fixed(_) => None,
            })
            .collect();
        if ops.is_empty() && watch.is_empty() {
            let replies = m.queued.into_iter().filter_map(|q| if let Queued::Fixed(v) = q { Some(v) } else { None });
            return self.ready(RespValue::Array(replies.collect()));
        }
        self.submit(Op::Multi { ops, watch }, Shape::Done, Some(m.queued)).await;
    }

    fn ready(&mut self, v: RespValue) {
        self.out.push_back(Slot::Ready(v, self.st.proto));
    }

    /// Send a data command through the log; its sequence number, or None if refused.
    async fn submit(&mut self, op: Op, shape: Shape, exec: Option<Vec<Queued>>) -> Option<u64> {
        self.shared.metrics.client_requests.increment(1);
        if let Err(e) = op.validate(&self.shared.limits) {
            self.shared.metrics.client_invalid.increment(1);
            self.ready(RespValue::err(format!("ERR {e}; nothing was applied")));
            return None;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        // Everything below the oldest unanswered command has its result here already.
        let acked_below = self.pending.keys().next().copied().unwrap_or(seq);
        let size = op.size();
        let cmd = Command { client: self.session, seq, acked_below, now_ms: 0, op };
        let policy = self.idle_policies.pop().unwrap_or_else(|| (self.shared.policy)(&self.shared.client_config));
        let (started, last_error, timers) = (Instant::now(), String::new(), BTreeMap::new());
        self.pending.insert(seq, Pending { cmd, shape, exec, size, started, policy, timers, last_error });
        self.inflight_bytes += size;
        self.out.push_back(Slot::Wait(seq, self.st.proto));
        self.step(seq, PolicyEvent::Begin).await;
        Some(seq)
    }

    /// The policy's home replica (index into the members): the leader this replica knows
    /// of when it is a follower, else this replica (a leader, a leaderless protocol's
    /// replica, or no leader known).
    fn home(&self) -> usize {
        let me = self.shared.me;
        let members = &self.shared.members;
        let status = self.shared.status.borrow();
        let node = match (status.role, status.leader) {
            (Role::Leader | Role::Replica, _) => me,
            (_, Some(l)) if l != me && self.shared.forwarder.knows(l) => l,
            _ => me,
        };
        members.iter().position(|&m| m == node).unwrap_or(0)
    }

    /// Run one event through the policy of command `seq` and carry out what it asks for.
    async fn step(&mut self, seq: u64, first: PolicyEvent) {
        let home = self.home();
        let mut queue = VecDeque::from([first]);
        while let Some(ev) = queue.pop_front() {
            let Some(p) = self.pending.get_mut(&seq) else { return };
            let mut actions = Vec::new();
            let mut cx = ClientCtx::new(wall_now(), &mut self.rng, &self.shared.members, home, &mut actions);
            match ev {
                PolicyEvent::Begin => p.policy.begin(&mut cx, &p.cmd),
                PolicyEvent::Reply(r) => p.policy.on_reply(&mut cx, r),
                PolicyEvent::Timer(id) => p.policy.on_timer(&mut cx, id),
                PolicyEvent::Unreachable(node) => p.policy.on_unreachable(&mut cx, node),
            }
            for action in actions {
                let Some(p) = self.pending.get_mut(&seq) else { return };
                match action {
                    ClientAction::Send { to, meta } => {
                        let cmd = p.cmd.clone();
                        if let Err(e) = self.send_to(to, cmd, meta).await {
                            if let Some(p) = self.pending.get_mut(&seq) {
                                p.last_error = e;
                            }
                            queue.push_back(PolicyEvent::Unreachable(to));
                        }
                    }
                    ClientAction::SetTimer { id, after } => {
                        p.timers.insert(id, Instant::now() + after);
                    }
                    ClientAction::CancelTimer { id } => {
                        p.timers.remove(&id);
                    }
                    ClientAction::Finish(outcome) => {
                        self.finish_outcome(seq, outcome);
                        return;
                    }
                }
            }
        }
    }

    /// Send a command to node `to`: this replica's node loop, or another replica through the
    /// forwarder. An error means it was not sent.
    async fn send_to(&mut self, to: NodeId, cmd: Command, meta: RequestMeta) -> Result<(), String> {
        if to == self.shared.me {
            let input = ClientInput::Request { conn: self.st.id, cmd, meta };
            return self.shared.inbox.send(input).await.map_err(|_| "replica shutting down".to_string());
        }
        self.shared.stats.forwarded.fetch_add(1, Ordering::Relaxed);
        self.shared.forwarder.send(to, cmd, meta, &self.fwd_tx)
    }

    /// A reply from the node loop or from a forwarding connection.
    async fn reply(&mut self, r: Reply) {
        if r.client != self.session || !self.pending.contains_key(&r.seq) {
            return; // answered already
        }
        if let Some(p) = self.pending.get_mut(&r.seq) {
            p.last_error = format!("node {}: {:?}", r.from, r.body);
        }
        let seq = r.seq;
        self.step(seq, PolicyEvent::Reply(r)).await;
    }

    /// The policy finished command `seq`: render its outcome.
    fn finish_outcome(&mut self, seq: u64, outcome: Outcome) {
        let Some(p) = self.pending.get_mut(&seq) else { return };
        let v = match outcome {
            Outcome::Done(result) => {
                if p.shape == Shape::Watch && self.watch_pending.remove(&seq) {
                    match (&p.cmd.op, &result) {
                        (Op::Versions { keys }, OpResult::Versions(vs)) if keys.len() == vs.len() => {
                            self.watched.extend(keys.iter().cloned().zip(vs.iter().copied()))
                        }
                        _ => self.watch_failed = true,
                    }
                }
                match p.exec.take() {
                    Some(queued) => render_exec(queued, result, &self.shared.cursors),
                    None => commands::render(p.shape, result, &self.shared.cursors),
                }
            }
            Outcome::Invalid(reason) => RespValue::err(format!("ERR {reason}")),
            // Overload (IDEM: every replica rejected it): a distinct error code that Redis
            // clients treat as transient (`BUSY`, like a server busy with a script), so the
            // caller backs off and retries; nothing was applied.
            Outcome::Rejected { definitive: true, reason } => {
                RespValue::err(format!("BUSY rejected: {reason}; nothing was applied, retry later"))
            }
            Outcome::Rejected { definitive: false, reason } => {
                RespValue::err(format!("TRYAGAIN rejected: {reason}; the command may or may not have been applied"))
            }
            Outcome::Unknown(reason) => {
                RespValue::err(format!("TRYAGAIN {reason}; the command may or may not have been applied"))
            }
        };
        // The policy finished its request: it can run the next one.
        if let Some(p) = self.finish(seq, v) {
            self.idle_policies.push(p.policy);
        }
    }

    /// Answer command `seq` with `v`; its pending state, if it was pending.
    fn finish(&mut self, seq: u64, v: RespValue) -> Option<Pending> {
        // A WATCH answered otherwise than with versions (error, timeout).
        if self.watch_pending.remove(&seq) {
            self.watch_failed = true;
        }
        let p = self.pending.remove(&seq)?;
        self.inflight_bytes -= p.size;
        self.done.insert(seq, v);
        Some(p)
    }

    async fn check_timeouts(&mut self) {
        let now = Instant::now();
        let mut due = Vec::new();
        let mut expired = Vec::new();
        for (seq, p) in &mut self.pending {
            if now.duration_since(p.started) >= self.shared.give_up_after {
                expired.push((*seq, p.last_error.clone()));
                continue;
            }
            let fired: Vec<u64> = p.timers.iter().filter(|(_, at)| **at <= now).map(|(id, _)| *id).collect();
            for id in fired {
                p.timers.remove(&id);
                due.push((*seq, id));
            }
        }
        for (seq, last) in expired {
            let msg = format!(
                "TRYAGAIN no answer from the cluster within {:?} (last: {last}); the command may or may not have been applied",
                self.shared.give_up_after
            );
            self.finish(seq, RespValue::err(msg));
        }
        for (seq, id) in due {
            self.step(seq, PolicyEvent::Timer(id)).await;
        }
    }

    /// Encode every reply that is ready, in order, into `out`. Returns true when a QUIT (or a
    /// protocol error) was reached: `out` then holds the last bytes to send.
    fn flush(&mut self, out: &mut BytesMut) -> bool {
        while let Some(slot) = self.out.front() {
            match slot {
                Slot::Ready(..) => {
                    if let Some(Slot::Ready(v, proto)) = self.out.pop_front() {
                        v.encode(proto, out);
                    }
                }
                Slot::Wait(seq, proto) => match self.done.remove(seq) {
                    Some(v) => {
                        v.encode(*proto, out);
                        self.out.pop_front();
                    }
                    None => return false,
                },
                Slot::Close => return true,
            }
        }
        false
    }
}

/// EXEC's reply: the array of the queued commands' replies, in order (data commands from the
/// transaction's results, the others as decided at queue time), or a null array when a
/// watched key had changed.
/// The policies' clock: wall-clock time since the Unix epoch.
fn wall_now() -> Time {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Time(d.as_nanos() as u64)
}

fn render_exec(queued: Vec<Queued>, result: OpResult, cursors: &commands::Cursors) -> RespValue {
    match result {
        OpResult::Multi(None) => RespValue::NullArray,
        OpResult::Multi(Some(results)) => {
            let mut results = results.into_iter();
            RespValue::Array(
                queued
                    .into_iter()
                    .map(|q| match q {
                        Queued::Fixed(v) => v,
                        Queued::Op(_, shape) => match results.next() {
                            Some(r) => commands::render(shape, r, cursors),
                            None => RespValue::err("ERR internal error: missing transaction result"),
                        },
                    })
                    .collect(),
            )
        }
        OpResult::Error(e) => RespValue::err(e),
        other => RespValue::err(format!("ERR internal error: result {other:?} does not fit EXEC")),
    }
}
