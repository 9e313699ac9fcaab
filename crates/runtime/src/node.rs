//! The node loop: the one task that owns the protocol, the state machine, the storage and the
//! timers.
//!
//! Each turn waits for at least one input, drains whatever else is ready (up to
//! [`MAX_BATCH_EVENTS`]), hands every event to the protocol and executes the actions in order,
//! then tells the protocol the turn ended ([`Protocol::flush`]: a leader proposes the turn's
//! requests together there).
//! Records persisted anywhere in the turn go to storage immediately, but there is only ONE
//! commit per turn (group commit), and every message, reply or result produced after the first
//! persist of the turn is held back until that commit returned: this is the durability
//! contract of `synod_core::protocol` ("persist, then send" is safe) at the cost of one fsync
//! per turn rather than per record. Messages produced before any persist leave at once, and
//! so does a reply the protocol marks as depending on nothing persisted (`Action::ReplyNow`).
//! `Persisted`, `SnapshotTaken` and messages to self become events of the next turn.

use crate::client::ClientInput;
use crate::metrics::NodeMetrics;
use crate::storage::Storage;
use crate::timers::Timers;
use crate::transport::{Incoming, PeerFrame, PeerSender, PeerSet};
use anyhow::Context as _;
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;
use synod_core::session::StateMachine;
use synod_core::speculation::Speculation;
use synod_core::wire::ServerMsg;
use synod_core::{
    Action, ClientRef, Ctx, Event, NodeId, Protocol, Reply, ReplyBody, Rng, SpeculativeReply, Status, Time,
};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::{debug, error, warn};

/// Most events handled in one turn (one group commit).
pub const MAX_BATCH_EVENTS: usize = 256;

/// The replica's clock: monotonic, but anchored at the wall clock at startup so that the
/// `sent_at` stamps of different machines are comparable (as well as their clocks are
/// synchronized), which Nezha-style deadline protocols need.
///
/// It also carries an offset set at run time by the admin fault API (`POST /fault/clock`,
/// docs/faults.md) to emulate a replica whose clock is off. Clones share the offset, so the
/// admin handler moves the clock the node loop reads; only the time the protocol reads moves,
/// timers (tokio sleeps) are unaffected.
#[derive(Clone, Debug)]
pub struct Clock {
    base: Instant,
    base_nanos: u64,
    offset_nanos: Arc<AtomicI64>,
    /// The configured bound on this clock's error (`clock_error_us`), handed to the
    /// protocol as `Ctx::clock_error`. An injected offset does not change it: a clock
    /// synchronization that went wrong does not know it.
    error: std::time::Duration,
}

impl Clock {
    pub fn new() -> Clock {
        let wall = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        Clock {
            base: Instant::now(),
            base_nanos: wall.as_nanos() as u64,
            offset_nanos: Default::default(),
            error: std::time::Duration::ZERO,
        }
    }

    /// The same clock with the error bound `error` (`NodeConfig::clock_error_us`).
    pub fn with_error(mut self, error: std::time::Duration) -> Clock {
        self.error = error;
        self
    }

    pub fn error(&self) -> std::time::Duration {
        self.error
    }

    pub fn now(&self) -> Time {
        self.at(Instant::now())
    }

    /// The replica's time at instant `t` (an instant already read spares a clock read).
    pub fn at(&self, t: Instant) -> Time {
        let t = self.base_nanos + t.saturating_duration_since(self.base).as_nanos() as u64;
        Time(t.saturating_add_signed(self.offset_nanos.load(Ordering::Relaxed)))
    }

    /// Run `offset_nanos` ahead of (negative: behind) the wall clock from now on, for every
    /// clone of this clock. Absolute, not cumulative; a negative step moves time backwards.
    pub fn set_offset_nanos(&self, offset_nanos: i64) {
        self.offset_nanos.store(offset_nanos, Ordering::Relaxed);
    }

    pub fn offset_nanos(&self) -> i64 {
        self.offset_nanos.load(Ordering::Relaxed)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// An event whose handling (protocol step + executing its actions) takes this long is logged:
/// everything else on the replica waited for it.
const SLOW_EVENT: std::time::Duration = std::time::Duration::from_millis(50);

/// A name for an event in logs (no payload).
fn event_kind(event: &Event) -> &'static str {
    match event {
        Event::Message { .. } => "message",
        Event::Request { .. } => "request",
        Event::Timer(_) => "timer",
        Event::Persisted { .. } => "persisted",
        Event::SnapshotTaken { .. } => "snapshot-taken",
        Event::Reconfigure { .. } => "reconfigure",
    }
}

/// Something that leaves the replica, possibly held back until the turn's commit.
enum Outgoing {
    Peer(NodeId, Bytes),
    Broadcast(Bytes),
    Client(ClientRef, Reply),
}

/// Everything one replica is made of, driven by [`Driver::run`].
pub struct Driver {
    pub(crate) id: NodeId,
    protocol: Box<dyn Protocol>,
    sm: StateMachine,
    /// Provisional applies not yet confirmed (`Action::Speculate`).
    spec: Speculation,
    /// `None` while a commit runs on a blocking thread, or for `in_memory` replicas.
    storage: Option<Box<dyn Storage>>,
    in_memory: bool,
    timers: Timers,
    rng: Rng,
    clock: Clock,
    peers: HashMap<NodeId, PeerSender>,
    clients: HashMap<u64, mpsc::Sender<ServerMsg>>,
    /// Events the replica generated for itself; handled at the start of the next turn.
    internal: VecDeque<Event>,
    /// The thread that serializes snapshots.
    snapshot_worker: Worker,
    /// Snapshots serialized on blocking threads come back here as `SnapshotTaken` events.
    snapshots_tx: mpsc::UnboundedSender<Event>,
    snapshots_rx: mpsc::UnboundedReceiver<Event>,
    /// Background WAL rewrites (`CompactDurable`) begun and not installed: storage id ->
    /// (protocol token, start time). The writer thread signals on `rewrites_tx` when an image
    /// is ready to install.
    compacting: HashMap<u64, (u64, Instant)>,
    next_compaction: u64,
    rewrites_tx: mpsc::UnboundedSender<()>,
    rewrites_rx: mpsc::UnboundedReceiver<()>,
    status: watch::Sender<Status>,
    metrics: NodeMetrics,
    /// Connects to / drops peers when the configuration changes (None: fixed peers).
    peer_set: Option<PeerSet>,
    /// Moving average of how long a blocking commit (an fsync) took, in microseconds: it
    /// decides where the next one runs (see [`Driver::commit`]).
    commit_micros: f64,
}

/// A blocking commit that recently took less than this on average runs inline on the node
/// loop's thread: a hand-off to the blocking pool and back costs two thread wake-ups (tens of
/// microseconds of CPU on a busy machine), more than a fast sync (a tmpfs, a disk with a
/// power-loss-protected cache). Slower ones go to the blocking pool so that the network
/// tasks sharing the thread keep going meanwhile.
const INLINE_COMMIT_MICROS: f64 = 50.0;

/// Bookkeeping of one turn.
#[derive(Default)]
struct Turn {
    /// Records were written in this turn: everything outgoing waits for the commit.
    dirty: bool,
    held: Vec<Outgoing>,
    tokens: Vec<u64>,
    records: u64,
    bytes: u64,
}

impl Driver {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: NodeId,
        protocol: Box<dyn Protocol>,
        storage: Option<Box<dyn Storage>>,
        seed: u64,
        peers: HashMap<NodeId, PeerSender>,
        status: watch::Sender<Status>,
        metrics: NodeMetrics,
    ) -> Driver {
        let (snapshots_tx, snapshots_rx) = mpsc::unbounded_channel();
        let (rewrites_tx, rewrites_rx) = mpsc::unbounded_channel();
        Driver {
            id,
            protocol,
            sm: StateMachine::new(),
            spec: Speculation::default(),
            in_memory: storage.is_none(),
            storage,
            timers: Timers::default(),
            rng: synod_core::rng_from_seed(seed),
            clock: Clock::new(),
            peers,
            clients: HashMap::new(),
            internal: VecDeque::new(),
            snapshot_worker: Worker::new("synod-snapshot"),
            snapshots_tx,
            snapshots_rx,
            compacting: HashMap::new(),
            next_compaction: 0,
            rewrites_tx,
            rewrites_rx,
            status,
            metrics,
            peer_set: None,
            // Start on the blocking pool until a commit has been measured.
            commit_micros: f64::INFINITY,
        }
    }

    /// Follow membership changes (`Action::MembershipChanged`) with `peer_set`.
    pub fn set_peer_set(&mut self, peer_set: PeerSet) {
        self.peer_set = Some(peer_set);
    }

    /// A handle on the clock the node loop reads (shares its offset; see [`Clock`]).
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The bound on this replica's clock error the protocol is told (`Ctx::clock_error`).
    pub fn set_clock_error(&mut self, error: std::time::Duration) {
        self.clock = self.clock.clone().with_error(error);
    }

    /// The replicated state machine (tests and diagnostics).
    pub fn state_machine(&self) -> &StateMachine {
        &self.sm
    }

    /// How the protocol orders commands (from the registry): the state machine decides
    /// expiry and session eviction accordingly (`synod_core::session::Order`).
    pub fn set_order(&mut self, order: synod_core::session::Order) {
        self.sm = StateMachine::for_order(order);
        self.spec.reset();
    }

    /// Hand the recovered records to the protocol; must come before any event.
    pub async fn recover(&mut self, records: Vec<Bytes>) -> anyhow::Result<()> {
        let mut actions = Vec::new();
        let mut ctx = Ctx::new(self.id, self.clock.now(), &mut self.rng, &mut actions);
        ctx.clock_error = self.clock.error();
        self.protocol.recover(&mut ctx, records);
        self.protocol.flush(&mut ctx);
        let mut turn = Turn::default();
        for a in actions {
            self.execute(a, &mut turn)?;
        }
        self.finish_turn(turn).await
    }

    /// Run until `shutdown` resolves. Returns an error only if storage fails (the replica can
    /// no longer keep its promises and must stop).
    pub async fn run(
        &mut self,
        mut peer_rx: mpsc::Receiver<Incoming>,
        mut client_rx: mpsc::Receiver<ClientInput>,
        shutdown: impl Future<Output = ()>,
    ) -> anyhow::Result<()> {
        tokio::pin!(shutdown);
        let mut events = Vec::with_capacity(MAX_BATCH_EVENTS);
        loop {
            events.clear();
            events.extend(self.internal.drain(..));
            if events.is_empty() {
                let deadline = self.timers.next_deadline();
                tokio::select! {
                    biased;
                    _ = &mut shutdown => return Ok(()),
                    Some(m) = peer_rx.recv() => events.push(incoming_event(m)),
                    Some(ev) = self.snapshots_rx.recv() => events.push(ev),
                    Some(()) = self.rewrites_rx.recv() => self.finish_compaction()?,
                    _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {}
                    Some(c) = client_rx.recv() => self.client_input(c, &mut events),
                }
            }
            for timer in self.timers.expired(Instant::now()) {
                events.push(Event::Timer(timer));
            }
            // Drain what else is ready, alternating so neither side starves the other.
            while events.len() < MAX_BATCH_EVENTS {
                let mut progressed = false;
                if let Ok(m) = peer_rx.try_recv() {
                    events.push(incoming_event(m));
                    progressed = true;
                }
                if let Ok(c) = client_rx.try_recv() {
                    self.client_input(c, &mut events);
                    progressed = true;
                }
                if let Ok(ev) = self.snapshots_rx.try_recv() {
                    events.push(ev);
                    progressed = true;
                }
                if let Ok(()) = self.rewrites_rx.try_recv() {
                    self.finish_compaction()?;
                    progressed = true;
                }
                if !progressed {
                    break;
                }
            }
            let queued = client_rx.len() as u64;
            self.metrics.queued_requests.set(queued as f64);
            self.turn(events.drain(..), queued).await?;
            // Let the connection tasks run once per turn: they send what the turn released
            // and read what arrived meanwhile. Without this, a turn whose commit did not
            // suspend (an inline one) followed by internal events (`Persisted`) would keep
            // the thread, and on a one-thread runtime nothing would leave the replica.
            tokio::task::yield_now().await;
        }
    }

    fn client_input(&mut self, input: ClientInput, events: &mut Vec<Event>) {
        match input {
            ClientInput::Open { conn, replies } => {
                self.clients.insert(conn, replies);
            }
            ClientInput::Closed { conn } => {
                self.clients.remove(&conn);
            }
            ClientInput::Reconfigure { conn, id, change } => {
                events.push(Event::Reconfigure { client: ClientRef { node: self.id, conn }, id, change })
            }
            ClientInput::Request { conn, mut cmd, meta } => {
                // Stamp this replica's wall clock (see `Command::now_ms`): expiry decisions
                // then travel through the log and every replica decides them the same way.
                cmd.now_ms = self.clock.now().as_nanos() / 1_000_000;
                events.push(Event::Request { client: ClientRef { node: self.id, conn }, cmd, meta })
            }
        }
    }

    /// Handle a batch of events: protocol steps, one commit, then release.
    pub async fn turn(&mut self, events: impl Iterator<Item = Event>, queued: u64) -> anyhow::Result<()> {
        let mut turn = Turn::default();
        let mut actions = Vec::new();
        let mut n = 0u64;
        let started = Instant::now();
        // One clock read per event: the end of one event is the start of the next, and the
        // time the protocol reads.
        let mut event_started = started;
        for event in events {
            n += 1;
            let kind = event_kind(&event);
            let mut ctx = Ctx::new(self.id, self.clock.at(event_started), &mut self.rng, &mut actions);
            ctx.load.queued_requests = queued;
            ctx.clock_error = self.clock.error();
            self.protocol.on_event(&mut ctx, event);
            for a in actions.drain(..) {
                self.execute(a, &mut turn)?;
            }
            let event_done = Instant::now();
            let took = event_done - event_started;
            event_started = event_done;
            if took >= SLOW_EVENT {
                warn!(?took, event = kind, "slow event: the node loop stopped for it");
            }
        }
        if n > 0 {
            // The end of the turn: what the protocol deferred to do once per turn (e.g. the
            // requests of the turn proposed in one log entry).
            let mut ctx = Ctx::new(self.id, self.clock.at(event_started), &mut self.rng, &mut actions);
            ctx.load.queued_requests = queued;
            self.protocol.flush(&mut ctx);
            for a in actions.drain(..) {
                self.execute(a, &mut turn)?;
            }
        }
        if n == 0 && !turn.dirty && turn.held.is_empty() {
            return Ok(());
        }
        self.metrics.batches.increment(1);
        self.metrics.events.increment(n);
        let result = self.finish_turn(turn).await;
        self.metrics.turn_seconds.record(started.elapsed().as_secs_f64());
        result
    }

    /// Execute one action. Storage writes happen now; what leaves the replica is held back
    /// if records were written earlier in the turn.
    fn execute(&mut self, action: Action, turn: &mut Turn) -> anyhow::Result<()> {
        match action {
            Action::Send { to, msg } => self.outgoing(Outgoing::Peer(to, msg), turn),
            Action::Broadcast { msg } => self.outgoing(Outgoing::Broadcast(msg), turn),
            Action::Reply { client, reply } => self.outgoing(Outgoing::Client(client, reply), turn),
            // Depends on nothing persisted: not held by the turn's commit.
            Action::ReplyNow { client, reply } => self.release(Outgoing::Client(client, reply)),
            Action::Persist { token, records } => {
                if let Some(st) = self.storage.as_mut() {
                    st.append(&records).context("write-ahead log append")?;
                    turn.dirty = true;
                    turn.records += records.len() as u64;
                    turn.bytes += records.iter().map(|r| r.len() as u64).sum::<u64>();
                }
                turn.tokens.push(token);
            }
            Action::RewriteDurable { token, records } => {
                if let Some(st) = self.storage.as_mut() {
                    st.rewrite(&records).context("write-ahead log rewrite")?;
                    turn.dirty = true;
                }
                // It superseded any background compaction (which gets no report).
                self.compacting.clear();
                turn.tokens.push(token);
            }
            Action::CompactDurable { token, records } => match self.storage.as_mut() {
                // Nothing is kept: the compaction is complete at once.
                None => turn.tokens.push(token),
                Some(st) => {
                    self.next_compaction += 1;
                    let id = self.next_compaction;
                    let tx = self.rewrites_tx.clone();
                    // Framing, writing and fsyncing the image happen on the WAL's thread;
                    // the node loop only installs it (`finish_compaction`).
                    let on_written = Box::new(move || {
                        let _ = tx.send(()); // gone only when the replica stops
                    });
                    st.begin_rewrite(id, records, on_written).context("write-ahead log compaction")?;
                    self.compacting.insert(id, (token, Instant::now()));
                }
            },
            Action::Apply { pos, cmd, reply } => {
                let result = self.spec.apply(&mut self.sm, pos, &cmd);
                self.metrics.applied.increment(1);
                if let Some(client) = reply {
                    let reply =
                        Reply { client: cmd.client, seq: cmd.seq, from: self.id, body: ReplyBody::Done(result) };
                    self.outgoing(Outgoing::Client(client, reply), turn);
                }
            }
            Action::Read { client, cmd } => {
                let result = self.spec.settled(&self.sm).read(&cmd.op);
                let reply = Reply { client: cmd.client, seq: cmd.seq, from: self.id, body: ReplyBody::Done(result) };
                self.outgoing(Outgoing::Client(client, reply), turn);
            }
            Action::Speculate { pos, cmd, reply } => {
                let result = self.spec.speculate(&mut self.sm, pos, &cmd);
                if let Some(SpeculativeReply { client, view, digest, owd }) = reply {
                    let body = ReplyBody::Speculative { view, digest, owd, result: Some(result) };
                    let reply = Reply { client: cmd.client, seq: cmd.seq, from: self.id, body };
                    self.outgoing(Outgoing::Client(client, reply), turn);
                }
            }
            Action::Rollback => {
                self.spec.rollback(&mut self.sm);
            }
            // Facts for the simulator's invariants only.
            Action::Ghost(_) => {}
            Action::SetTimer { timer, after } => self.timers.set(timer, Instant::now() + after),
            Action::CancelTimer { timer } => self.timers.cancel(timer),
            Action::TakeSnapshot { token } => {
                // The snapshot must be the state at this point of the log, but the node loop
                // must not stop for the serialization: clone (O(1), the state machine's maps
                // are persistent) and serialize the clone on a blocking thread. The protocol
                // learns of it through a later `SnapshotTaken` event, as it would of a slow
                // disk; it keeps replicating and applying meanwhile.
                let started = Instant::now();
                // Confirmed applies only: a provisional one may still be rolled back.
                let sm = self.spec.settled(&self.sm).clone();
                self.metrics.snapshot_pause_seconds.record(started.elapsed().as_secs_f64());
                let (tx, metrics) = (self.snapshots_tx.clone(), self.metrics.clone());
                let serialize = move || {
                    let data = Bytes::from(sm.snapshot());
                    metrics.snapshots.increment(1);
                    metrics.snapshot_seconds.record(started.elapsed().as_secs_f64());
                    metrics.snapshot_bytes.set(data.len() as f64);
                    // The receiver is gone only when the replica stops.
                    let _ = tx.send(Event::SnapshotTaken { token, data });
                };
                if let Err(e) = self.snapshot_worker.run(Box::new(serialize)) {
                    error!("cannot start the snapshot thread: {e}; no snapshot this time");
                }
            }
            Action::MembershipChanged { members } => {
                if let Some(ps) = self.peer_set.as_mut() {
                    ps.apply(&members, &mut self.peers);
                }
            }
            Action::InstallSnapshot { data } => match StateMachine::restore(&data) {
                Ok(sm) => {
                    self.sm = sm;
                    self.spec.reset();
                }
                Err(e) => error!("not installing snapshot of {} bytes: {e}; keeping the current state", data.len()),
            },
        }
        Ok(())
    }

    /// Install a background compaction whose image is written (`CompactDurable`), and report
    /// it to the protocol. A failure to write the image leaves the old records in place.
    fn finish_compaction(&mut self) -> anyhow::Result<()> {
        let Some(st) = self.storage.as_mut() else { return Ok(()) };
        let started = Instant::now();
        match st.finish_rewrite() {
            Ok(Some(id)) => {
                self.metrics.compaction_install_seconds.record(started.elapsed().as_secs_f64());
                // Begun before it, never installed: superseded (the WAL replaced them).
                self.compacting.retain(|other, _| *other >= id);
                if let Some((token, began)) = self.compacting.remove(&id) {
                    self.metrics.compactions.increment(1);
                    self.metrics.compaction_seconds.record(began.elapsed().as_secs_f64());
                    self.internal.push_back(Event::Persisted { token });
                }
            }
            Ok(None) => {}
            Err(e) => {
                // A storage that can no longer be trusted fails the next commit and stops the
                // replica; a failed image write (e.g. disk full) only means no compaction.
                warn!("write-ahead log compaction not installed, the old records stay: {e:#}");
            }
        }
        Ok(())
    }

    fn outgoing(&mut self, out: Outgoing, turn: &mut Turn) {
        if turn.dirty {
            turn.held.push(out);
        } else {
            self.release(out);
        }
    }

    /// Commit what the turn wrote, release what it held back, and queue the `Persisted`
    /// events.
    async fn finish_turn(&mut self, turn: Turn) -> anyhow::Result<()> {
        if turn.dirty {
            self.commit().await?;
            self.metrics.wal_commits.increment(1);
            self.metrics.wal_records.increment(turn.records);
            self.metrics.wal_bytes.increment(turn.bytes);
        }
        let sent_at = self.clock.now();
        for out in turn.held {
            self.release_at(out, sent_at);
        }
        self.internal.extend(turn.tokens.into_iter().map(|token| Event::Persisted { token }));
        let status = self.protocol.status();
        self.metrics.observe_status(&status);
        self.metrics.state_bytes.set(self.sm.kv().size_bytes() as f64);
        self.status.send_replace(status);
        Ok(())
    }

    /// One group commit. A commit that may block on the disk (fsync = always) runs on the
    /// blocking pool so that the network tasks sharing the runtime's workers keep going:
    /// measured with `examples/loopback_bench` (3 replicas, 32 clients, 2 cores) that is
    /// 4.2-5.0k puts/s against 2.0-2.4k with the fsync inline on a worker. Unless syncs are
    /// fast: then the hand-off costs more than the sync and it runs inline
    /// ([`INLINE_COMMIT_MICROS`]; every commit is timed, so a disk that becomes slow moves
    /// the next commits back to the pool). Commits that only write (never / batch, whose
    /// fsync runs on the WAL's flusher thread) always stay inline. Either way the commit has
    /// returned before anything held back by the turn is released.
    async fn commit(&mut self) -> anyhow::Result<()> {
        let mut st = self.storage.take().expect("storage present outside a commit");
        if !st.commit_blocks() {
            let r = st.commit();
            self.storage = Some(st);
            return r.context("write-ahead log commit");
        }
        let (st, r, took) = if self.commit_micros < INLINE_COMMIT_MICROS {
            let started = std::time::Instant::now();
            let r = st.commit();
            (st, r, started.elapsed())
        } else {
            tokio::task::spawn_blocking(move || {
                let started = std::time::Instant::now();
                let r = st.commit();
                (st, r, started.elapsed())
            })
            .await
            .context("write-ahead log commit thread failed")?
        };
        let micros = took.as_secs_f64() * 1e6;
        self.commit_micros =
            if self.commit_micros.is_finite() { 0.9 * self.commit_micros + 0.1 * micros } else { micros };
        // A single slow sync sends the next commit to the pool at once.
        if micros >= 4.0 * INLINE_COMMIT_MICROS {
            self.commit_micros = self.commit_micros.max(micros);
        }
        self.storage = Some(st);
        r.context("write-ahead log commit")
    }

    /// Flush everything to stable storage (shutdown).
    pub fn sync(&mut self) -> anyhow::Result<()> {
        match self.storage.as_mut() {
            Some(st) => st.sync().context("write-ahead log sync"),
            None if self.in_memory => Ok(()),
            None => anyhow::bail!("storage lost by a failed commit"),
        }
    }

    fn release(&mut self, out: Outgoing) {
        let sent_at = match out {
            Outgoing::Client(..) => Time(0), // no stamp: spare the clock read
            _ => self.clock.now(),
        };
        self.release_at(out, sent_at);
    }

    /// Let `out` leave, stamped `sent_at` (the messages a commit held back share one stamp).
    fn release_at(&mut self, out: Outgoing, sent_at: Time) {
        match out {
            Outgoing::Peer(to, msg) if to == self.id => {
                self.internal.push_back(Event::Message { from: self.id, sent_at, msg })
            }
            Outgoing::Peer(to, msg) => match self.peers.get(&to) {
                Some(p) => p.send(PeerFrame { sent_at: sent_at.as_nanos(), msg }),
                None => warn!(to, "protocol sent a message to an unknown replica; dropped"),
            },
            Outgoing::Broadcast(msg) => {
                let sent_at = sent_at.as_nanos();
                for p in self.peers.values() {
                    p.send(PeerFrame { sent_at, msg: msg.clone() });
                }
            }
            Outgoing::Client(client, reply) => {
                if client.node != self.id {
                    debug!(?client, "reply for a client of another replica; dropped");
                    return;
                }
                let Some(tx) = self.clients.get(&client.conn) else {
                    return; // the connection is gone; the client retries elsewhere
                };
                match tx.try_send(ServerMsg::Reply(reply)) {
                    Ok(()) => self.metrics.replies.increment(1),
                    Err(mpsc::error::TrySendError::Full(_)) => self.metrics.replies_dropped.increment(1),
                    Err(mpsc::error::TrySendError::Closed(_)) => {
                        self.metrics.replies_dropped.increment(1);
                        self.clients.remove(&client.conn);
                    }
                }
            }
        }
    }
}

/// A background thread that runs jobs one after the other, started on the first job and kept:
/// a snapshot every few hundred milliseconds (`snapshot_every` entries under load) on a thread
/// of its own each paid for the thread's start and for its allocator's fresh, faulted-in
/// memory. It runs at a lower priority: on a machine with few cores the replica's own threads
/// (node loop, network) should win the CPU over it. A job that panics ends the thread; the
/// next job starts a new one. The thread ends when the worker is dropped.
struct Worker {
    name: &'static str,
    jobs: Option<std::sync::mpsc::Sender<Job>>,
}

type Job = Box<dyn FnOnce() + Send>;

impl Worker {
    fn new(name: &'static str) -> Worker {
        Worker { name, jobs: None }
    }

    fn run(&mut self, job: Job) -> std::io::Result<()> {
        let job = match &self.jobs {
            Some(tx) => match tx.send(job) {
                Ok(()) => return Ok(()),
                Err(std::sync::mpsc::SendError(job)) => job, // the thread is gone
            },
            None => job,
        };
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new().name(self.name.into()).spawn(move || {
            lower_thread_priority();
            while let Ok(job) = rx.recv() {
                job();
            }
        })?;
        tx.send(job).map_err(|_| std::io::Error::other("the new thread ended at once"))?;
        self.jobs = Some(tx);
        Ok(())
    }
}

/// Lower the calling thread's scheduling priority (nice +10; Linux applies `setpriority` on a
/// thread id to that thread only). Best effort: failure leaves the priority as it is.
fn lower_thread_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: plain syscalls on the calling thread, no memory passed.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 10);
    }
}

fn incoming_event(m: Incoming) -> Event {
    Event::Message { from: m.from, sent_at: m.sent_at, msg: m.msg }
}

#[cfg(test)]
mod tests {
    //! The action contract, checked with a recording storage: writes before the commit,
    //! messages after a persist only once the commit returned, `Persisted` afterwards.

    use super::*;
    use crate::metrics::PeerMetrics;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use synod_core::{Command, Op, Pos, Role};

    type Journal = Arc<Mutex<Vec<String>>>;

    /// Records storage calls, and at commit time everything that already left the replica.
    struct Recording {
        journal: Journal,
        peer_rx: Arc<Mutex<mpsc::Receiver<PeerFrame>>>,
        client_rx: Arc<Mutex<mpsc::Receiver<ServerMsg>>>,
    }

    fn drain(journal: &Journal, peer: &Mutex<mpsc::Receiver<PeerFrame>>, client: &Mutex<mpsc::Receiver<ServerMsg>>) {
        let mut j = journal.lock().unwrap();
        while let Ok(f) = peer.lock().unwrap().try_recv() {
            j.push(format!("send {}", String::from_utf8_lossy(&f.msg)));
        }
        while let Ok(m) = client.lock().unwrap().try_recv() {
            match m {
                ServerMsg::Reply(r) => j.push(format!("reply {} {:?}", r.seq, r.body)),
                ServerMsg::Status(_) => j.push("status".into()),
                ServerMsg::Refused { reason } => j.push(format!("refused {reason}")),
            }
        }
    }

    impl Storage for Recording {
        fn append(&mut self, records: &[Bytes]) -> anyhow::Result<()> {
            self.journal.lock().unwrap().push(format!("append {}", records.len()));
            Ok(())
        }
        fn rewrite(&mut self, records: &[Bytes]) -> anyhow::Result<()> {
            self.journal.lock().unwrap().push(format!("rewrite {}", records.len()));
            Ok(())
        }
        fn begin_rewrite(
            &mut self,
            id: u64,
            records: Vec<Vec<Bytes>>,
            on_written: Box<dyn FnOnce() + Send + Sync>,
        ) -> anyhow::Result<()> {
            self.journal.lock().unwrap().push(format!("begin rewrite {id} {}", records.len()));
            on_written();
            Ok(())
        }
        fn finish_rewrite(&mut self) -> anyhow::Result<Option<u64>> {
            Ok(None)
        }
        fn commit(&mut self) -> anyhow::Result<()> {
            drain(&self.journal, &self.peer_rx, &self.client_rx);
            self.journal.lock().unwrap().push("commit".into());
            Ok(())
        }
        fn sync(&mut self) -> anyhow::Result<()> {
            self.journal.lock().unwrap().push("sync".into());
            Ok(())
        }
        fn commit_blocks(&self) -> bool {
            true // exercise the blocking-pool path
        }
    }

    /// On a request: send, persist, send, apply with a reply, arm a timer. On `Persisted`:
    /// broadcast. On the timer: send.
    struct Scripted;

    impl Protocol for Scripted {
        fn recover(&mut self, ctx: &mut Ctx<'_>, records: Vec<Bytes>) {
            assert!(records.is_empty());
            ctx.push(Action::Send { to: 2, msg: Bytes::from_static(b"hello") });
        }
        fn on_event(&mut self, ctx: &mut Ctx<'_>, event: Event) {
            match event {
                Event::Request { client, cmd, .. } => {
                    ctx.push(Action::Send { to: 2, msg: Bytes::from_static(b"before") });
                    ctx.persist(7, vec![Bytes::from_static(b"r1"), Bytes::from_static(b"r2")]);
                    ctx.push(Action::Send { to: 2, msg: Bytes::from_static(b"after") });
                    ctx.push(Action::Send { to: 1, msg: Bytes::from_static(b"self") });
                    ctx.apply(Pos::slot(1, 0), cmd, Some(client));
                    ctx.set_timer(9, Duration::from_millis(1));
                }
                Event::Persisted { token } => {
                    ctx.push(Action::Broadcast { msg: Bytes::from(format!("persisted {token}")) })
                }
                Event::Message { from, msg, .. } => {
                    ctx.send(2, &format!("got {} from {from}", String::from_utf8_lossy(&msg)))
                }
                Event::Timer(t) => ctx.push(Action::Send { to: 2, msg: Bytes::from(format!("timer {t}")) }),
                Event::SnapshotTaken { .. } | Event::Reconfigure { .. } => {}
            }
        }
        fn status(&self) -> Status {
            Status {
                id: 1,
                protocol: "scripted".into(),
                role: Role::Leader,
                ballot: "0".into(),
                leader: Some(1),
                commit_index: 0,
                execute_index: 0,
                extra: Default::default(),
            }
        }
    }

    #[tokio::test]
    async fn persist_before_send_group_commit_and_persisted_events() {
        let journal: Journal = Default::default();
        let (peer_tx, peer_rx) = mpsc::channel(64);
        let (client_tx, client_rx) = mpsc::channel(64);
        let (peer_rx, client_rx) = (Arc::new(Mutex::new(peer_rx)), Arc::new(Mutex::new(client_rx)));
        let storage = Recording { journal: journal.clone(), peer_rx: peer_rx.clone(), client_rx: client_rx.clone() };
        let peers = HashMap::from([(2, PeerSender::new(peer_tx, PeerMetrics::new(1, 2)))]);
        let (status_tx, status_rx) = watch::channel(Scripted.status());
        let mut d =
            Driver::new(1, Box::new(Scripted), Some(Box::new(storage)), 42, peers, status_tx, NodeMetrics::new(1));
        d.clients.insert(5, client_tx);

        d.recover(Vec::new()).await.unwrap();
        drain(&journal, &peer_rx, &client_rx);
        let cmd = Command {
            client: 77,
            seq: 1,
            acked_below: 1,
            now_ms: 0,
            op: Op::Put { key: Bytes::from_static(b"k"), value: Bytes::from_static(b"v") },
        };
        let req = |cmd: &Command| Event::Request {
            client: ClientRef { node: 1, conn: 5 },
            cmd: cmd.clone(),
            meta: Default::default(),
        };
        // Two requests in one turn: two appends, ONE commit.
        d.turn([req(&cmd), req(&Command { seq: 2, ..cmd.clone() })].into_iter(), 0).await.unwrap();
        drain(&journal, &peer_rx, &client_rx);
        let expected = [
            "send hello", // from recover: nothing written, left at once
            "append 2",   // first request
            "append 2",   // second request
            // The first request's "before" preceded every write of the turn: it left before
            // the commit. Everything else waited for it.
            "send before",
            "commit",
            "send after",
            "send before",
            "send after",
            "reply 1 Done(Done)",
            "reply 2 Done(Done)",
        ];
        assert_eq!(*journal.lock().unwrap(), expected.map(String::from).to_vec());
        assert_eq!(d.state_machine().applied_count(), 2);
        assert_eq!(d.state_machine().kv().get(b"k"), Some(&Bytes::from_static(b"v")));
        assert_eq!(status_rx.borrow().protocol, "scripted");

        // Next turn: the internal events (two self messages, two Persisted) come back.
        journal.lock().unwrap().clear();
        let internal: Vec<Event> = d.internal.drain(..).collect();
        assert_eq!(internal.len(), 4);
        assert!(matches!(internal[0], Event::Message { from: 1, .. }));
        assert!(matches!(internal[3], Event::Persisted { token: 7 }));
        d.turn(internal.into_iter(), 0).await.unwrap();
        drain(&journal, &peer_rx, &client_rx);
        let j = journal.lock().unwrap().clone();
        assert_eq!(j.len(), 4, "{j:?}");
        assert_eq!(j.iter().filter(|s| s.starts_with("send persisted 7")).count(), 2);
        assert!(!j.iter().any(|s| s == "commit"), "no writes, no commit: {j:?}");

        // The timer armed by the requests fires once (re-armed, not duplicated).
        assert_eq!(d.timers.len(), 1);
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(d.timers.expired(Instant::now()), vec![9]);
    }
}
