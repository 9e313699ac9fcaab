//! Nezha (Geng, Sivaraman, Prabhakar, Rosenblum, "Nezha: Deployable and High-Performance
//! Consensus Using Synchronized Clocks", VLDB 2023).
//!
//! One leader and 2f followers (§4). Requests are multicast with a *deadline* (send time plus
//! an estimated one-way delay) and every replica releases them from its *early-buffer* in
//! deadline order when its own clock passes the deadline (Deadline-Ordered Multicast, DOM,
//! §3, [`dom`]), so most requests land at the same log position everywhere:
//!
//! - **Fast path** (§5.3, Fig. 4, [`normal`]): on release the leader appends (and executes)
//!   the request and answers with the result, followers append it and answer with a hash of
//!   their log ([`hash`], §7.1; per key with the commutativity optimization, §7.2). A proxy
//!   that sees matching (view, hash) replies from a super quorum f + ⌈f/2⌉ + 1 including the
//!   leader commits in one round trip ([`proxy`]).
//! - **Slow path** (§5.4, Fig. 5, [`normal`]): the leader picks late requests out of its
//!   late-buffer by moving their deadline, and broadcasts *log-modification*s (the log-ids of
//!   its entries); followers make their logs match (taking requests from their own buffers,
//!   fetching the rest), advance their *sync-point* and report it (*log-status*, also their
//!   *slow-reply*); an entry is committed once the leader and f followers have synced it.
//!   The leader broadcasts its *commit-point* (§7.3); every replica executes its log up to it.
//! - **View change** (§6, [`view`]): Viewstamped-Replication style; the new leader rebuilds
//!   the log from f + 1 replicas of the latest normal view: the longest synced prefix, plus
//!   the later entries found on ⌈f/2⌉ + 1 of them, sorted by deadline.
//!
//! Choices where the paper leaves room, and deviations:
//! - **proxies** (§4): the registry's client policy is [`proxy::NezhaProxy`]; it stamps
//!   `RequestMeta { sent_at, ext: ProxyStamp { bound } }` and multicasts. A replica takes
//!   the deadline as the command's time (`now_ms`), so all copies are identical, answers a
//!   fast-reply on release (the leader with its speculative result) and, a follower, a
//!   `SlowReply` once synced. Followers persist what they release before fast-replying.
//!   Options `offload=false` (the leader answers `Done` at execution) and `dom=false`
//!   (release on arrival) are the §9.3 ablations.
//! - **plain clients**: a request without a stamp makes the receiving replica its proxy: it
//!   stamps the deadline from its own one-way-delay estimates to its peers (§3's estimator
//!   over the `sent_at` of peer messages), relays it, and answers `Done` at the
//!   commit-point.
//! - **speculative execution** (§5.3): the leader executes each entry when it appends it
//!   (`Action::Speculate`), the commit-point confirms it (`Apply`), a deposed leader rolls
//!   back what is not confirmed (`Action::Rollback`, §6); followers execute committed entries
//!   only. Clients are answered `Done` at the commit-point; a proxy commits on the first
//!   `Done` or on a fast/slow quorum of matching speculative replies.
//! - **disk-based** (§8.8): the view, the synced log and every new view's log are persisted
//!   before the replica answers (the ordering contract holds messages until then), so a
//!   restarted replica resumes in its view as a follower (or as the leader of its view) with
//!   its log and re-executes committed entries. The diskless mode with crash vectors is not
//!   implemented.
//! - **clock error** (§3): the deadline's one-way-delay estimate is P + β(σ_S + σ_R) with σ
//!   the driver's clock-error bound (`Ctx::clock_error`, `ClientCtx::clock_error`; the
//!   receivers' σ taken to be the sender's own), β = `owd_beta_pct`/100, clamped to D =
//!   `owd_max_ms` when out of [0, D].
//! - **batching** (as the paper's implementation batches its log-modifications): the
//!   early-buffer is released, the leader's commit-point announced and a follower's
//!   log-status sent once per driver turn (`Protocol::flush`), covering every event of it.
//! - **OWD feedback**: each replica returns its one-way-delay sample of a proxied request
//!   in its fast-reply (§3); the proxy keeps the window and takes the percentile.
//! - a receiver clamps a deadline more than D ahead of its own clock to D: badly skewed
//!   clocks then cost fast commits, never a long hold. (An honest sender's deadline can be
//!   up to D + σ_S + σ_R ahead of the receiver's clock; holding that long was tried: with
//!   the simulator's clock faults, σ ≈ 1 s, every request and each of its retries waited
//!   seconds and a client ran out of the liveness budget, seed 190 of
//!   `synod check --protocol nezha --faults all,clock-jump`.)
//! - **retries**: the leader appends a request again unless it is in the uncommitted part of
//!   its log; executing a retry twice is harmless (the session table answers it from the
//!   first execution). A follower checks that its copy of a request is the leader's (a digest
//!   of the command) before putting it in its log. The leader picks its late-buffer at every
//!   tick (§5.4's liveness rule; a restarted leader recovers requests there). After a view
//!   change the replicas answer the proxies waiting on them in the new view (the leader's
//!   reply, followers' slow-replies, and `NotLeader` with the new leader for a request the
//!   new log lacks: the proxy resubmits at once, §5.5).
//!
//! - **checkpoints** (§7.3): every `snapshot_every` executed entries a replica snapshots its
//!   state machine and compacts its WAL to the snapshot plus the log after it; the log is
//!   trimmed only below the *stable* point — the smallest sync-point of all replicas in the
//!   leader's view, announced with the commit-point — so no replica ever needs a trimmed
//!   entry from another (fetches carry the log after the trim point; view changes only the
//!   log after the commit-point, §7.3, see [`view`]). A replica that stays away keeps the others from trimming; a replica whose disk
//!   is wiped cannot rejoin (that needs snapshot transfer, not implemented).
//!
//! Not yet: proxies as separate processes, snapshot transfer, the diskless mode,
//! membership changes.

pub mod dom;
pub mod hash;
pub mod msg;
pub mod proxy;
#[cfg(test)]
mod tests;

mod normal;
mod view;

use crate::registry::Setup;
use bytes::Bytes;
use dom::{Dom, OwdEstimator};
use hash::SetHash;
use msg::{Entry, LogId, Msg, Record, ReqId};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;
use synod_core::protocol::{decode, encode};
use synod_core::{ClientRef, Command, Ctx, Event, NodeId, Protocol, ProtocolParams, ReplyBody, Role, Status, Time};

const TIMER_TICK: u64 = 1;
const TIMER_RELEASE: u64 = 2;
/// Most client connections remembered for requests not yet executed here.
const MAX_WAITING: usize = 1 << 16;

/// Registry constructor.
pub fn build(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
    Ok(Box::new(Nezha::new(setup, Variant::default())?))
}

/// Deliberate deviations, used only by the mutation tests.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Variant {
    /// The leader counts a quorum one replica too small for the commit-point (f followers'
    /// sync-points minus one).
    pub small_quorum: bool,
}

/// Options (`synod … -p key=value`).
#[derive(Clone, Debug)]
pub struct Options {
    /// The commutativity optimization of §7.2 (on by default).
    pub commutativity: bool,
    /// Percentile of the OWD window that sets deadlines (§3; the paper uses 50).
    pub owd_percentile: u32,
    /// OWD samples kept per peer.
    pub owd_window: usize,
    /// The clamp D of §3, in milliseconds.
    pub owd_max_ms: u64,
    /// β of §3 in percent (default 100): the deadline's margin for clock error is
    /// β(σ_S + σ_R), from the driver's `Ctx::clock_error`.
    pub owd_beta_pct: u64,
    /// The leader executes entries when it appends them (§5.3), provisionally, and a
    /// deposed leader rolls them back (on by default).
    pub speculate: bool,
    /// Quorum-check offloading (§5.3, on by default): replicas answer a proxy's request
    /// with fast- and slow-replies and the proxy counts the quorums. Off (the ablation of
    /// §9.3): the leader answers the proxy once the request is committed and executed.
    pub offload: bool,
    /// Deadline-ordered multicast (§3, on by default). Off (the ablation of §9.3): replicas
    /// release a request as soon as it arrives, keeping its deadline as its log-id.
    pub dom: bool,
}

impl Options {
    fn parse(p: &ProtocolParams) -> Result<Options, String> {
        p.check_options(
            "nezha",
            &[
                "commutativity",
                "owd_percentile",
                "owd_window",
                "owd_max_ms",
                "owd_beta_pct",
                "speculate",
                "offload",
                "dom",
            ],
        )?;
        let num = |k: &str, d: u64| -> Result<u64, String> {
            match p.options.get(k) {
                None => Ok(d),
                Some(v) => v.parse().map_err(|_| format!("option {k}: expected a number, got {v:?}")),
            }
        };
        let o = Options {
            commutativity: p.flag("commutativity", true)?,
            owd_percentile: num("owd_percentile", 50)? as u32,
            owd_window: num("owd_window", 1000)? as usize,
            owd_max_ms: num("owd_max_ms", 10)?,
            owd_beta_pct: num("owd_beta_pct", 100)?,
            speculate: p.flag("speculate", true)?,
            offload: p.flag("offload", true)?,
            dom: p.flag("dom", true)?,
        };
        if o.owd_percentile > 100 {
            return Err("option owd_percentile: at most 100".into());
        }
        Ok(o)
    }
}

/// §5.1 *status*.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Normal,
    ViewChange,
}

/// A DoViewChange as the new leader keeps it.
#[derive(Clone, Debug)]
struct Dvc {
    last_normal: u64,
    /// `log` holds the positions after `base` (the sender's commit-point or the new
    /// leader's, at least the sender's trim point `trim`).
    base: u64,
    trim: u64,
    sync_point: u64,
    commit: u64,
    log: Vec<Entry>,
}

/// Counters shown in the status.
#[derive(Clone, Debug, Default)]
struct Counters {
    /// Requests that went to a late-buffer on arrival.
    late: u64,
    /// Late requests whose deadline the leader moved (§5.4 ③).
    modified: u64,
    /// Entries a follower synced from a request it had released at the same position with
    /// the same deadline (what a fast path needs) vs. from elsewhere (slow path only).
    synced_in_place: u64,
    synced_moved: u64,
    /// Entries fetched from the leader.
    fetched: u64,
    view_changes: u64,
    /// Requests released from the early-buffer, and the sum of how long after its
    /// deadline each was released (the release timer's and the event loop's lag), in µs.
    released: u64,
    release_lag_us: u64,
}

pub struct Nezha {
    id: NodeId,
    /// Sorted; the leader of view v is `members[v % n]` (§5.1).
    members: Vec<NodeId>,
    params: ProtocolParams,
    opts: Options,
    variant: Variant,

    view: u64,
    last_normal: u64,
    mode: Mode,

    dom: Dom,
    /// The log synced with the leader of `view` (the leader's own log) after `base`:
    /// position i at `[i - base - 1]`.
    log: Vec<Entry>,
    /// Entries trimmed from the front of the log: committed and synced by every replica
    /// (so no replica ever needs them from another), and covered by a snapshot.
    base: u64,
    /// Every replica has synced the log up to here (the leader's minimum over all
    /// sync-points, announced with the commit-point): the trim bound.
    stable: u64,
    /// A snapshot requested: its token and the log position it covers.
    snap_pending: Option<(u64, u64)>,
    snapshots: u64,
    /// Where each request's latest copy sits in `log`.
    index_of: HashMap<ReqId, u64>,
    /// Followers: requests released from the early-buffer, not yet placed by the leader.
    unsynced: BTreeMap<LogId, Command>,
    unsynced_ids: HashMap<ReqId, u64>,
    /// The set hash of the entries trimmed from the log (the same on every replica that
    /// trimmed to the same point: the log up to `base` is committed and identical).
    trimmed: SetHash,
    /// The set hash of the trimmed entries, `log` and `unsynced`.
    hash: SetHash,
    /// Log entries handed to the WAL, and those known durable (the leader counts itself
    /// for the commit-point only with those).
    logged: u64,
    durable: u64,
    persisting: BTreeMap<u64, u64>,
    next_token: u64,
    commit: u64,
    applied: u64,
    /// The leader: entries up to here are applied provisionally (`Action::Speculate`).
    speculated: u64,

    // Leader.
    peer_sync: HashMap<NodeId, u64>,
    // Follower.
    pending_mods: BTreeMap<u64, (LogId, u64)>,
    leader_len: u64,
    fetch_sent: Option<Time>,
    leader_contact: Time,
    election_timeout: Duration,
    // View change.
    dvcs: BTreeMap<NodeId, Dvc>,
    vc_started: Time,
    ticks: u64,
    /// The tick of the last DoViewChange resent.
    dvc_tick: u64,
    /// The commit-point the leader of this view announced in its ViewChange (the others
    /// send it their logs from there on), and the base of this replica's last DoViewChange.
    leader_committed: Option<u64>,
    dvc_base_sent: u64,

    /// Clients waiting here for a request's execution.
    waiting: HashMap<ReqId, ClientRef>,
    /// Proxies (§4) that multicast a request to this replica and wait for its fast-reply
    /// (on release) and slow-reply (a follower, once synced), with the request's one-way
    /// delay as measured here (receive time minus the proxy's send time, §3), returned in
    /// the fast-reply.
    proxied: HashMap<ReqId, (ClientRef, i64)>,
    /// The leader: the fast-replies of appended entries, sent with their speculative
    /// execution (position → reply).
    fast_replies: BTreeMap<u64, synod_core::SpeculativeReply>,
    owd: OwdEstimator,
    counters: Counters,
    /// Work deferred to the end of the driver's turn (`Protocol::flush`), done once for
    /// all the turn's events as the paper's implementation batches it: releasing the
    /// early-buffer (one log-modification and one persist for every request released in
    /// the turn), the leader's commit-point announcement, a follower's log-status.
    release_due: bool,
    commit_due: bool,
    status_due: bool,
}

impl Nezha {
    pub(crate) fn new(setup: &Setup, variant: Variant) -> Result<Nezha, String> {
        let opts = Options::parse(&setup.params)?;
        let mut members = setup.members.clone();
        members.sort_unstable();
        members.dedup();
        if !members.contains(&setup.id) {
            return Err(format!("replica {} is not a member of {members:?}", setup.id));
        }
        let owd_max = Duration::from_millis(opts.owd_max_ms).as_nanos() as u64;
        Ok(Nezha {
            id: setup.id,
            members,
            params: setup.params.clone(),
            dom: Dom::new(opts.commutativity),
            owd: OwdEstimator::new(opts.owd_window, opts.owd_percentile, owd_max),
            opts,
            variant,
            view: 0,
            last_normal: 0,
            mode: Mode::Normal,
            log: Vec::new(),
            base: 0,
            stable: 0,
            snap_pending: None,
            snapshots: 0,
            index_of: HashMap::new(),
            unsynced: BTreeMap::new(),
            unsynced_ids: HashMap::new(),
            trimmed: SetHash::default(),
            hash: SetHash::default(),
            logged: 0,
            durable: 0,
            persisting: BTreeMap::new(),
            next_token: 1,
            commit: 0,
            applied: 0,
            speculated: 0,
            peer_sync: HashMap::new(),
            pending_mods: BTreeMap::new(),
            leader_len: 0,
            fetch_sent: None,
            leader_contact: Time::ZERO,
            election_timeout: Duration::from_millis(setup.params.election_timeout_max_ms),
            dvcs: BTreeMap::new(),
            vc_started: Time::ZERO,
            ticks: 0,
            dvc_tick: 0,
            leader_committed: None,
            dvc_base_sent: 0,
            waiting: HashMap::new(),
            proxied: HashMap::new(),
            fast_replies: BTreeMap::new(),
            counters: Counters::default(),
            release_due: false,
            commit_due: false,
            status_due: false,
        })
    }

    /// The log's last position.
    fn len(&self) -> u64 {
        self.base + self.log.len() as u64
    }

    /// The log is committed up to here (its trim point, or the commit-point as far as the
    /// log reaches): these positions hold the same entries on every replica, in every view.
    fn committed_point(&self) -> u64 {
        self.base.max(self.commit.min(self.len()))
    }

    /// Where position `i` (> base) sits in `log`.
    fn at(&self, i: u64) -> usize {
        (i - self.base - 1) as usize
    }

    fn n(&self) -> usize {
        self.members.len()
    }

    /// f for n = 2f + 1.
    fn f(&self) -> usize {
        (self.n() - 1) / 2
    }

    fn leader_of(&self, view: u64) -> NodeId {
        self.members[(view % self.n() as u64) as usize]
    }

    fn is_leader(&self) -> bool {
        self.leader_of(self.view) == self.id
    }

    fn peers(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.members.iter().copied().filter(move |&m| m != self.id)
    }

    fn owd_max(&self) -> u64 {
        Duration::from_millis(self.opts.owd_max_ms).as_nanos() as u64
    }

    /// §3's β(σ_S + σ_R) for this replica's clock-error bound.
    fn clock_margin(&self, ctx: &Ctx<'_>) -> u64 {
        dom::clock_error_term(ctx.clock_error, self.opts.owd_beta_pct)
    }

    fn persist(&mut self, ctx: &mut Ctx<'_>, records: Vec<Record>) {
        let token = self.next_token;
        self.next_token += 1;
        self.persisting.insert(token, self.len());
        ctx.persist(token, records.iter().map(encode).collect());
    }

    fn on_persisted(&mut self, ctx: &mut Ctx<'_>, token: u64) {
        // Persists complete in order: everything up to this token is durable.
        let done: Vec<u64> = self.persisting.range(..=token).map(|(t, _)| *t).collect();
        for t in done {
            if let Some(len) = self.persisting.remove(&t) {
                self.durable = self.durable.max(len).min(self.len());
            }
        }
        if self.is_leader() && self.mode == Mode::Normal {
            self.update_commit(ctx);
        }
    }

    /// Rebuild the request index and the set hash from `log` and `unsynced`.
    fn reindex(&mut self) {
        self.index_of.clear();
        self.hash = self.trimmed.clone();
        for (i, e) in self.log.iter().enumerate() {
            self.index_of.insert((e.cmd.client, e.cmd.seq), self.base + i as u64 + 1);
            self.hash.toggle(&e.id(), &e.cmd);
        }
        for (id, cmd) in &self.unsynced {
            self.hash.toggle(id, cmd);
        }
    }

    /// Execute the log up to the commit-point (§5.4, §7.3), answering the clients waiting
    /// here.
    fn execute(&mut self, ctx: &mut Ctx<'_>) {
        let upto = self.commit.min(self.len());
        while self.applied < upto {
            self.applied += 1;
            self.speculated = self.speculated.max(self.applied);
            let e = &self.log[self.at(self.applied)];
            let reply = self.waiting.remove(&(e.cmd.client, e.cmd.seq));
            self.proxied.remove(&(e.cmd.client, e.cmd.seq));
            ctx.apply(synod_core::Pos::slot(self.applied, 0), e.cmd.clone(), reply);
        }
        self.maybe_snapshot(ctx);
    }

    /// Every `snapshot_every` entries that every replica has synced and this one executed,
    /// snapshot the state machine, then trim the log and compact the WAL (§7.3's periodic
    /// checkpoints).
    fn maybe_snapshot(&mut self, ctx: &mut Ctx<'_>) {
        let every = self.params.snapshot_every;
        if every == 0 || self.snap_pending.is_some() || self.applied.min(self.stable) < self.base + every {
            return;
        }
        let token = self.next_token;
        self.next_token += 1;
        self.snap_pending = Some((token, self.applied));
        ctx.push(synod_core::Action::TakeSnapshot { token });
    }

    fn on_snapshot_taken(&mut self, ctx: &mut Ctx<'_>, token: u64, data: Bytes) {
        let Some((t, index)) = self.snap_pending else { return };
        if t != token {
            return;
        }
        self.snap_pending = None;
        let trim = index.min(self.stable).min(self.len());
        if trim <= self.base {
            return;
        }
        for e in self.log.drain(..(trim - self.base) as usize) {
            self.trimmed.toggle(&e.id(), &e.cmd);
            let req = (e.cmd.client, e.cmd.seq);
            if self.index_of.get(&req).is_some_and(|&i| i <= trim) {
                self.index_of.remove(&req);
            }
        }
        self.base = trim;
        self.snapshots += 1;
        // The image: the view, the snapshot (state after `index`, log kept from `trim`),
        // and the entries handed to the WAL already.
        let head = Record::Snapshot { index, base: trim, trimmed: self.trimmed.clone(), data: Bytes::new() };
        let mut records = vec![
            vec![encode(&Record::View { view: self.view, last_normal: self.last_normal })],
            synod_core::protocol::encode_with_payload(&head, data),
        ];
        for i in trim + 1..=self.logged.min(self.len()) {
            records.push(vec![encode(&Record::Synced { index: i, entry: self.log[self.at(i)].clone() })]);
        }
        // Released entries a fast-reply may have vouched for.
        for (id, cmd) in &self.unsynced {
            records.push(vec![encode(&Record::Released { entry: Entry { deadline: id.deadline, cmd: cmd.clone() } })]);
        }
        ctx.push(synod_core::protocol::compaction(token, records, true));
    }

    /// The leader executes what it appended, provisionally (§5.3, ④ in Fig. 4): the result
    /// would go to a proxy in the leader's fast-reply; the commit-point confirms it.
    fn speculate(&mut self, ctx: &mut Ctx<'_>) {
        if !self.opts.speculate || !self.is_leader() || self.mode != Mode::Normal {
            return;
        }
        let from = self.speculated.max(self.applied).max(self.base) + 1;
        for i in from..=self.len() {
            let cmd = self.log[self.at(i)].cmd.clone();
            let reply = self.fast_replies.remove(&i);
            ctx.push(synod_core::Action::Speculate { pos: synod_core::Pos::slot(i, 0), cmd, reply });
        }
        self.speculated = self.speculated.max(self.len());
    }

    /// Undo the provisional applies past the commit-point (a deposed leader, §6: "it needs
    /// to abandon its current state").
    fn roll_back(&mut self, ctx: &mut Ctx<'_>) {
        if self.speculated > self.applied {
            ctx.push(synod_core::Action::Rollback);
        }
        self.speculated = self.applied;
        self.fast_replies.clear();
    }

    fn remember_client(&mut self, client: ClientRef, cmd: &Command) {
        if self.waiting.len() >= MAX_WAITING {
            // The client retries after its timeout; an unbounded table would not help it.
            return;
        }
        self.waiting.insert((cmd.client, cmd.seq), client);
    }

    fn on_tick(&mut self, ctx: &mut Ctx<'_>) {
        ctx.set_timer(TIMER_TICK, self.params.heartbeat());
        self.ticks += 1;
        match self.mode {
            Mode::Normal if self.is_leader() => self.leader_tick(ctx),
            Mode::Normal => {
                if ctx.now.since(self.leader_contact) > self.election_timeout {
                    self.start_view_change(ctx, self.view + 1);
                } else {
                    self.follower_tick(ctx);
                }
            }
            Mode::ViewChange => {
                if ctx.now.since(self.vc_started) > self.election_timeout {
                    self.start_view_change(ctx, self.view + 1);
                } else {
                    self.view_change_tick(ctx);
                }
            }
        }
    }

    fn on_message(&mut self, ctx: &mut Ctx<'_>, from: NodeId, msg: Msg) {
        match msg {
            Msg::Request { deadline, cmd } => self.receive(ctx, deadline, cmd),
            Msg::LogMod { view, start, ids, commit, stable } => {
                self.on_log_mod(ctx, from, view, start, ids, (commit, stable))
            }
            Msg::Fetch { view, from: index } => self.on_fetch(ctx, from, view, index),
            Msg::Entries { view, start, entries, commit } => self.on_entries(ctx, from, view, start, entries, commit),
            Msg::LogStatus { view, sync_point } => self.on_log_status(ctx, from, view, sync_point),
            Msg::ViewChange { view, committed } => self.on_view_change(ctx, from, view, committed),
            Msg::DoViewChange { view, last_normal, sync_point, commit, base, trim, log } => {
                self.on_do_view_change(ctx, from, view, Dvc { last_normal, base, trim, sync_point, commit, log })
            }
            Msg::StartView { view, base, log, commit } => self.on_start_view(ctx, from, view, base, log, commit),
            Msg::NeedView { view, committed } => self.on_need_view(ctx, from, view, committed),
        }
    }
}

impl Protocol for Nezha {
    fn recover(&mut self, ctx: &mut Ctx<'_>, records: Vec<Bytes>) {
        // Requests released here and not (yet) in the log; a new view's log makes the
        // earlier ones leftovers (late-buffer).
        let mut released: BTreeMap<LogId, Command> = BTreeMap::new();
        let mut leftovers: Vec<(LogId, Command)> = Vec::new();
        for bytes in records {
            let Ok(rec) = decode::<Record>(&bytes) else { continue };
            match rec {
                Record::View { view, last_normal } => {
                    self.view = view;
                    self.last_normal = last_normal;
                }
                Record::Synced { index, entry } => {
                    if index > self.base && index <= self.len() + 1 {
                        let keep = self.at(index);
                        self.log.truncate(keep);
                        self.log.push(entry);
                    }
                }
                Record::Released { entry } => {
                    released.insert(entry.id(), entry.cmd);
                }
                Record::Log { view, base, entries } => {
                    leftovers.extend(std::mem::take(&mut released));
                    self.view = self.view.max(view);
                    self.last_normal = view;
                    // The new view's log from `base` on; what this replica trimmed since
                    // is committed and identical.
                    if base >= self.base && base <= self.len() {
                        let keep = self.at(base + 1);
                        self.log.truncate(keep);
                        self.log.extend(entries);
                    } else if base < self.base {
                        let skip = (self.base - base) as usize;
                        self.log = entries.into_iter().skip(skip).collect();
                    }
                }
                Record::Snapshot { index, base, trimmed, data } => {
                    self.trimmed = trimmed;
                    self.base = base;
                    self.log.clear();
                    self.applied = index;
                    self.commit = self.commit.max(index);
                    self.stable = self.stable.max(base);
                    ctx.push(synod_core::Action::InstallSnapshot { data });
                }
            }
        }
        self.mode = if self.last_normal == self.view { Mode::Normal } else { Mode::ViewChange };
        self.durable = self.len();
        self.logged = self.durable;
        self.speculated = self.applied;
        for e in &self.log {
            self.dom.note_released(&e.id(), &e.cmd);
        }
        // Released requests back where they were (after the log's last entry, not in it;
        // with commutativity also those ordered before it, as `prune_unsynced` keeps them:
        // a fast-reply may have vouched for them, and the view-change state must hold
        // them), the others to the late-buffer; a leader of its view keeps none unsynced (it
        // picks them from its late-buffer at the next tick, §5.4).
        let in_log: std::collections::HashSet<ReqId> = self.log.iter().map(|e| (e.cmd.client, e.cmd.seq)).collect();
        let last = self.log.last().map(|e| e.id());
        let leading = self.is_leader() && self.mode == Mode::Normal;
        for (id, cmd) in released {
            if in_log.contains(&id.req()) || self.unsynced_ids.contains_key(&id.req()) {
                continue;
            }
            if !leading && (self.opts.commutativity || last.is_none_or(|l| id > l)) {
                self.dom.note_released(&id, &cmd);
                self.unsynced_ids.insert(id.req(), id.deadline);
                self.unsynced.insert(id, cmd);
            } else {
                leftovers.push((id, cmd));
            }
        }
        for (id, cmd) in leftovers {
            if !in_log.contains(&id.req()) && !self.unsynced_ids.contains_key(&id.req()) {
                self.dom.put_late(id.deadline, cmd);
            }
        }
        self.reindex();
        self.election_timeout = ctx.random_between(
            Duration::from_millis(self.params.election_timeout_min_ms),
            Duration::from_millis(self.params.election_timeout_max_ms),
        );
        self.leader_contact = ctx.now;
        self.vc_started = ctx.now;
        ctx.set_timer(TIMER_TICK, self.params.heartbeat());
    }

    fn on_event(&mut self, ctx: &mut Ctx<'_>, event: Event) {
        match event {
            Event::Message { from, sent_at, msg } => {
                if from == self.id || !self.members.contains(&from) {
                    return;
                }
                // Every peer message is a one-way-delay sample for the deadlines this
                // replica stamps when it relays a client's request (§3).
                self.owd.sample(from, sent_at, ctx.now);
                let Ok(msg) = decode::<Msg>(&msg) else { return };
                self.on_message(ctx, from, msg);
            }
            Event::Request { client, cmd, meta } => {
                match (!meta.ext.is_empty()).then(|| decode::<proxy::ProxyStamp>(&meta.ext)) {
                    Some(Ok(stamp)) => self.on_proxied(ctx, client, cmd, meta.sent_at, stamp.bound),
                    Some(Err(_)) => {
                        let body = ReplyBody::Invalid { reason: "nezha: undecodable proxy stamp".into() };
                        ctx.reply(client, synod_core::Reply { client: cmd.client, seq: cmd.seq, from: self.id, body });
                    }
                    None => self.on_request(ctx, client, cmd),
                }
            }
            Event::Timer(TIMER_TICK) => self.on_tick(ctx),
            Event::Timer(TIMER_RELEASE) => self.release_due = true,
            Event::Timer(_) => {}
            Event::Persisted { token } => self.on_persisted(ctx, token),
            Event::SnapshotTaken { token, data } => self.on_snapshot_taken(ctx, token, data),
            Event::Reconfigure { client, id, .. } => {
                let body = ReplyBody::Invalid { reason: "nezha does not support membership changes".into() };
                ctx.reply(client, synod_core::Reply { client: 0, seq: id, from: self.id, body });
            }
        }
    }

    /// The end of a turn: the deferred work, in protocol order (release first: it may
    /// advance the sync-point a log-status reports and the commit-point).
    fn flush(&mut self, ctx: &mut Ctx<'_>) {
        if std::mem::take(&mut self.release_due) {
            self.release(ctx);
        }
        let normal = self.mode == Mode::Normal;
        if std::mem::take(&mut self.commit_due) && normal && self.is_leader() {
            ctx.broadcast(&self.heartbeat());
        }
        if std::mem::take(&mut self.status_due) && normal && !self.is_leader() {
            ctx.send(self.leader_of(self.view), &Msg::LogStatus { view: self.view, sync_point: self.len() });
        }
    }

    fn status(&self) -> Status {
        let mut extra = BTreeMap::new();
        extra.insert("mode".into(), format!("{:?}", self.mode).to_lowercase());
        extra.insert("sync_point".into(), self.len().to_string());
        extra.insert("log_base".into(), self.base.to_string());
        extra.insert("snapshots".into(), self.snapshots.to_string());
        extra.insert("unsynced".into(), self.unsynced.len().to_string());
        extra.insert("early".into(), self.dom.early_len().to_string());
        extra.insert("late_buffer".into(), self.dom.late_len().to_string());
        extra.insert("late".into(), self.counters.late.to_string());
        extra.insert("deadline_modified".into(), self.counters.modified.to_string());
        extra.insert("synced_in_place".into(), self.counters.synced_in_place.to_string());
        extra.insert("synced_moved".into(), self.counters.synced_moved.to_string());
        extra.insert("fetched".into(), self.counters.fetched.to_string());
        extra.insert("view_changes".into(), self.counters.view_changes.to_string());
        extra.insert("released".into(), self.counters.released.to_string());
        extra.insert("release_lag_us".into(), self.counters.release_lag_us.to_string());
        let role = match self.mode {
            Mode::ViewChange => Role::Candidate,
            Mode::Normal if self.is_leader() => Role::Leader,
            Mode::Normal => Role::Follower,
        };
        Status {
            id: self.id,
            protocol: "nezha".into(),
            role,
            ballot: self.view.to_string(),
            leader: (self.mode == Mode::Normal).then(|| self.leader_of(self.view)),
            commit_index: self.commit,
            execute_index: self.applied,
            extra,
        }
    }

    fn describe_message(&self, msg: &[u8]) -> String {
        match decode::<Msg>(msg) {
            Ok(Msg::Request { deadline, cmd }) => {
                format!("Request c{:x}#{} deadline={}", cmd.client, cmd.seq, Time(deadline))
            }
            Ok(Msg::LogMod { view, start, ids, commit, .. }) => {
                let ids: Vec<String> = ids.iter().map(|(l, _)| format!("c{:x}#{}", l.client, l.seq)).collect();
                format!("LogMod v={view} start={start} [{}] commit={commit}", ids.join(" "))
            }
            Ok(Msg::Fetch { view, from }) => format!("Fetch v={view} from={from}"),
            Ok(Msg::Entries { view, start, entries, commit }) => {
                format!("Entries v={view} start={start} n={} commit={commit}", entries.len())
            }
            Ok(Msg::LogStatus { view, sync_point }) => format!("LogStatus v={view} sync={sync_point}"),
            Ok(Msg::ViewChange { view, committed }) => format!("ViewChange v={view} committed={committed}"),
            Ok(Msg::DoViewChange { view, last_normal, sync_point, commit, base, trim, log }) => format!(
                "DoViewChange v={view} last_normal={last_normal} sync={sync_point} commit={commit} base={base} trim={trim} log={}",
                log.len()
            ),
            Ok(Msg::StartView { view, base, log, commit }) => {
                format!("StartView v={view} base={base} log={} commit={commit}", log.len())
            }
            Ok(Msg::NeedView { view, committed }) => format!("NeedView v={view} committed={committed}"),
            Err(_) => format!("<{} undecodable bytes>", msg.len()),
        }
    }
}

#[cfg(feature = "mutants")]
pub mod mutants {
    use super::*;

    pub fn build_small_quorum(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
        Ok(Box::new(Nezha::new(setup, Variant { small_quorum: true })?))
    }
}
