//! Raft (Ongaro & Ousterhout, "In Search of an Understandable Consensus Algorithm", and the
//! thesis for PreVote §9.6, CheckQuorum §6.2/§9.6, log compaction §5).
//!
//! Reading order, top-down (section numbers of the paper):
//! 1. **Leader election (§5.2)** — a follower whose election timer expires becomes candidate
//!    for `term + 1`, votes for itself and asks for votes; a voter grants at most one vote per
//!    term, only to a candidate whose log is at least as up-to-date as its own (§5.4.1).
//!    *PreVote* (option `prevote`): first ask whether a vote *would* be granted, without
//!    changing any term, so a partitioned node cannot disrupt a working leader when it returns.
//!    *CheckQuorum* (option `check_quorum`): a leader that has not heard from a majority for an
//!    election timeout steps down, and a node that hears from a live leader ignores vote
//!    requests (leader stickiness). `raft` = both off; `raft+` = both on (the HoliPaxos
//!    evaluation's "Raft+").
//! 2. **Log replication (§5.3)** — the leader appends client batches to its log and sends
//!    AppendEntries with the (index, term) of the preceding entry; a follower accepts only if
//!    it has that entry (consistency check), truncating a conflicting suffix. On a rejection
//!    the follower hints the first index of the conflicting term so the leader backs up a term
//!    at a time. Replication is pipelined (up to `pipeline_window` messages in flight per
//!    follower); heartbeats are empty AppendEntries.
//! 3. **Commitment (§5.3, §5.4.2)** — an entry is committed once a majority stores it *and* it
//!    is from the leader's current term (earlier-term entries commit indirectly). A new leader
//!    appends a no-op so this happens promptly.
//! 4. **Log compaction (§7)** — every `snapshot_every` executed entries the state machine is
//!    snapshotted, the log behind it (minus `snapshot_keep` entries for catch-up) is dropped,
//!    and the durable state is rewritten as hard state + snapshot + log suffix. A follower that
//!    needs a compacted entry receives the snapshot in chunks (InstallSnapshot).
//! 5. **Read leases** (`lease.rs`, option `read_lease=on`) — a leader a majority granted a
//!    lease answers Gets from its state machine without a log entry.

pub mod codec;
mod craft;
mod lease;
mod msg;

pub use codec::{EntryCodec, FullCopy, ReedSolomon};
pub use msg::{Batch, Entry, Msg, Payload, Record, Shard, SnapshotChunk};

use crate::registry::Setup;
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use synod_core::batch::{Batcher, Waiter};
use synod_core::lease::{Leases, LEASE_OPTIONS};
use synod_core::log::{InstanceLog, SlotState};
use synod_core::protocol::{compaction, decode, encode, encode_with_payload};
use synod_core::quorum::{majority, QuorumTracker};
use synod_core::snapshot::{chunk, ChunkAssembler, Snapshot, SnapshotPolicy};
use synod_core::{
    Action, ClientRef, Command, Ctx, Event, NodeId, Pos, Protocol, ProtocolParams, ReplyBody, Role, Status, Time,
    TimerId,
};

const TIMER_ELECTION: TimerId = 1;
const TIMER_HEARTBEAT: TimerId = 2;
/// Log entries freed per event while trimming behind a snapshot.
const TRIM_STEP: u64 = 256;
/// Most bytes of commands in one entry.
const MAX_BATCH_BYTES: usize = 1 << 20;

/// `raft`: plain Raft (options may turn PreVote/CheckQuorum on).
pub fn build(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
    Ok(Box::new(Raft::new(setup, "raft", false)?))
}

/// `raft+`: Raft with PreVote and CheckQuorum on by default.
pub fn build_plus(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
    Ok(Box::new(Raft::new(setup, "raft+", true)?))
}

/// `craft`: CRaft (Wang et al., FAST 2020) — Raft with Reed–Solomon coded entries (one shard
/// per server, `d = f + 1`) while every follower is healthy, full copies once one is silent.
pub fn build_craft(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
    Ok(Box::new(Raft::with_codec(setup, "craft", false, Box::new(ReedSolomon::default()))?))
}

/// Failures CRaft survives (one at a time, each after the switch to full copies of the
/// previous completed, it survives `f`): a new leader must hear from `n + d − q` replicas to
/// rebuild or drop the coded entries at the end of its log, so at most `q − d` may be down
/// (`n = 3`: 1, `n = 5`: 1, `n = 7`: 2), and never more than a minority.
pub fn craft_tolerates(n: usize) -> usize {
    let q = ReedSolomon::quorum(n);
    let d = ReedSolomon::data_shards(n);
    (q - d).min(crate::registry::minority(n))
}

/// Deliberate bug for the mutation test: CRaft committing coded entries on a majority
/// (`q + c = f + 2`, below `n + 1`), so two failures after a commit leave fewer than `d`
/// shards and the next leader drops a committed entry.
#[cfg(feature = "mutants")]
pub fn build_craft_majority(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
    let codec = ReedSolomon { majority_quorum: true };
    Ok(Box::new(Raft::with_codec(setup, "craft-majority-quorum", false, Box::new(codec))?))
}

/// Deliberate bug for the mutation test: grant votes without the up-to-date log check
/// (§5.4.1), so a leader missing committed entries can be elected and overwrite them.
#[cfg(feature = "mutants")]
pub fn build_no_log_check(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
    let mut r = Raft::new(setup, "raft-no-log-check", false)?;
    r.skip_log_check = true;
    Ok(Box::new(r))
}

/// Deliberate bug for the mutation test: with `read_lease=on` forced, the leader answers
/// lease reads without checking that its lease is still valid (a deposed leader serves
/// stale reads).
#[cfg(feature = "mutants")]
pub fn build_lease_unchecked(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
    let mut setup = setup.clone();
    setup.params.options.insert("read_lease".into(), "on".into());
    let mut r = Raft::new(&setup, "raft-lease-unchecked", false)?;
    r.lease_reads_unchecked = true;
    Ok(Box::new(r))
}

/// The leader's view of one follower (§5.3 nextIndex/matchIndex, plus flow control).
#[derive(Clone, Debug)]
struct Progress {
    next: u64,
    matched: u64,
    in_flight: usize,
    last_heard: Time,
    last_sent: Time,
    /// Bytes of the snapshot the follower acknowledged, while it is being sent one.
    snapshot_offset: Option<u64>,
    /// After a rejection the leader probes with one message at a time until the follower's
    /// log matches (etcd's probe state); pipelining resumes after a success. Without this,
    /// every rejection of a pipelined window triggers a new window and messages multiply.
    probing: bool,
    /// `prev_index` of the outstanding probe; rejections of anything else are stale.
    probe_prev: u64,
    /// CRaft: the follower holds every entry up to here in full (as it last reported;
    /// counts only up to `matched`, where its log is known to match ours).
    full: u64,
    full_known: bool,
    /// CRaft: when the outstanding `Fill` left.
    fill_sent: Option<Time>,
}

/// CRaft: a new leader holding only shards of some entries gathers its followers' pieces
/// before it leads: it rebuilds each entry from `d` shards (or a full copy), or drops it and
/// everything after it once `n + d − q` replicas reported fewer (it cannot have committed).
/// One follower's answer to `Gather`: the indices asked, the entries it holds there, and the
/// index of its snapshot (everything up to it was executed there).
type Report = (Vec<u64>, Vec<(u64, Entry)>, u64);

#[derive(Debug, Default)]
struct Recovery {
    /// What each follower reported: the indices it was asked and the entries it holds there.
    reports: BTreeMap<NodeId, Report>,
    /// The snapshot being pulled from a follower that compacted a committed entry we hold
    /// only a shard of (`craft.rs`, part 6).
    pull: Option<Pull>,
}

/// A recovering CRaft leader's transfer of a follower's snapshot towards itself.
#[derive(Debug)]
struct Pull {
    from: NodeId,
    /// The snapshot must cover at least this entry (our first partial one).
    wanted: u64,
    /// The index of the snapshot whose chunks arrive (0 before the first).
    index: u64,
    /// When the last request left (re-sent after two heartbeats without an answer).
    sent: Time,
}

pub struct Raft {
    id: NodeId,
    name: &'static str,
    members: Vec<NodeId>,
    params: ProtocolParams,
    prevote: bool,
    check_quorum: bool,
    skip_log_check: bool,
    /// Mutant: lease reads without checking the lease's expiry.
    lease_reads_unchecked: bool,
    policy: SnapshotPolicy,
    /// What an entry becomes on its way to each follower (Raft: full copies; CRaft: shards).
    codec: Box<dyn EntryCodec>,

    // Persistent state (Fig. 2).
    term: u64,
    voted_for: Option<NodeId>,
    log: InstanceLog<Entry>,
    snapshot: Option<Snapshot>,

    // Volatile state.
    role: Role,
    leader: Option<NodeId>,
    commit: u64,
    persisted_commit: u64,
    /// When this node last heard from a leader of its term (leader stickiness).
    last_leader_contact: Option<Time>,
    /// CRaft: our log matches the current leader's up to here (its last accepted Append or
    /// snapshot); only this far do we report full copies to it (`FillResp`).
    leader_match: u64,
    votes: QuorumTracker,
    /// A pre-election is running (votes asked for `term + 1` without changing term).
    pre_candidate: bool,
    broken: Option<String>,
    /// Read leases (`lease.rs`; `None` unless `read_lease=on`).
    leases: Option<Leases>,

    // Leader state.
    progress: BTreeMap<NodeId, Progress>,
    /// CRaft: uncommitted entries under the coded commit rule (sent as shards in this term,
    /// or recovered from an earlier term), and the shards of those sent coded.
    coded: BTreeSet<u64>,
    pieces: BTreeMap<u64, Vec<Shard>>,
    /// CRaft: some follower was silent for an election timeout — new entries go out in full
    /// and coded ones are re-replicated in full.
    degraded: bool,
    /// CRaft: a new leader gathering shards (it neither appends nor replicates meanwhile).
    recovering: Option<Recovery>,
    queue: Batcher,
    waiting: BTreeMap<u64, Vec<Option<Waiter>>>,

    // Snapshots.
    snapshot_pending: Option<(u64, u64, u64)>, // (token, index, term)
    /// Entries below this index are dropped, [`TRIM_STEP`] per event (freeing ten thousand
    /// entries at once would stop the replica for milliseconds).
    trim_to: u64,
    next_token: u64,
    incoming: ChunkAssembler,
}

impl Raft {
    fn new(setup: &Setup, name: &'static str, plus: bool) -> Result<Raft, String> {
        Raft::with_codec(setup, name, plus, Box::new(FullCopy))
    }

    fn with_codec(setup: &Setup, name: &'static str, plus: bool, codec: Box<dyn EntryCodec>) -> Result<Raft, String> {
        let p = &setup.params;
        p.validate()?;
        let options: Vec<&str> = ["prevote", "check_quorum"].iter().chain(LEASE_OPTIONS).copied().collect();
        p.check_options(name, &options)?;
        if !setup.members.contains(&setup.id) {
            return Err(format!("node {} is not among the members {:?}", setup.id, setup.members));
        }
        Ok(Raft {
            id: setup.id,
            name,
            members: setup.members.clone(),
            params: p.clone(),
            prevote: p.flag("prevote", plus)?,
            check_quorum: p.flag("check_quorum", plus)?,
            skip_log_check: false,
            lease_reads_unchecked: false,
            policy: SnapshotPolicy::from_params(p),
            codec,
            term: 0,
            voted_for: None,
            log: InstanceLog::new(),
            snapshot: None,
            role: Role::Follower,
            leader: None,
            commit: 0,
            persisted_commit: 0,
            last_leader_contact: None,
            leader_match: 0,
            votes: QuorumTracker::majority_of(setup.members.len()),
            pre_candidate: false,
            broken: None,
            leases: Leases::from_params(p)?,
            progress: BTreeMap::new(),
            coded: BTreeSet::new(),
            pieces: BTreeMap::new(),
            degraded: false,
            recovering: None,
            queue: Batcher::new(),
            waiting: BTreeMap::new(),
            snapshot_pending: None,
            trim_to: 0,
            next_token: 1,
            incoming: ChunkAssembler::default(),
        })
    }

    fn quorum(&self) -> usize {
        majority(self.members.len())
    }

    fn peers(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.members.iter().copied().filter(move |m| *m != self.id)
    }

    fn last_index(&self) -> u64 {
        self.log.last_index()
    }

    /// Term of the entry at `index` (0 for index 0; the snapshot's term at its index); None
    /// if unknown (compacted or beyond the log).
    fn term_at(&self, index: u64) -> Option<u64> {
        if index == 0 {
            return Some(0);
        }
        if let Some(s) = &self.snapshot {
            if s.index == index {
                return Some(s.term);
            }
        }
        self.log.get(index).map(|s| s.value.term)
    }

    fn last_term(&self) -> u64 {
        self.term_at(self.last_index()).unwrap_or(0)
    }

    fn persist(&self, ctx: &mut Ctx<'_>, records: Vec<Record>) {
        ctx.persist(0, records.iter().map(encode).collect());
    }

    fn persist_hard_state(&self, ctx: &mut Ctx<'_>) {
        self.persist(ctx, vec![Record::HardState { term: self.term, voted_for: self.voted_for }]);
    }

    fn election_timeout_min(&self) -> Duration {
        Duration::from_millis(self.params.election_timeout_min_ms)
    }

    fn reset_election_timer(&self, ctx: &mut Ctx<'_>) {
        let min = self.election_timeout_min();
        let max = Duration::from_millis(self.params.election_timeout_max_ms);
        let after = ctx.random_between(min, max);
        ctx.set_timer(TIMER_ELECTION, after);
    }

    // ---------------------------------------------------------------------------------------
    // §5.2 Leader election (with PreVote)
    // ---------------------------------------------------------------------------------------

    fn on_election_timeout(&mut self, ctx: &mut Ctx<'_>) {
        if self.role == Role::Leader {
            self.check_quorum_tick(ctx);
            return;
        }
        if self.prevote {
            self.campaign(ctx, true);
        } else {
            self.campaign(ctx, false);
        }
    }

    fn campaign(&mut self, ctx: &mut Ctx<'_>, pre: bool) {
        if let Some(until) = self.lease_blocks(ctx.now, self.id) {
            // A lease we granted another leader still binds our own vote (`lease.rs`):
            // campaign once it expired.
            ctx.set_timer(TIMER_ELECTION, until.since(ctx.now) + Duration::from_millis(1));
            return;
        }
        self.role = Role::Candidate;
        self.leader = None;
        self.pre_candidate = pre;
        self.votes = QuorumTracker::majority_of(self.members.len());
        let term = if pre {
            self.term + 1
        } else {
            self.term += 1;
            self.voted_for = Some(self.id);
            self.persist_hard_state(ctx);
            self.term
        };
        self.votes.ack(self.id);
        self.reset_election_timer(ctx);
        if self.votes.reached() {
            self.won_vote(ctx);
            return;
        }
        ctx.broadcast(&Msg::RequestVote {
            term,
            last_index: self.last_index(),
            last_term: self.last_term(),
            pre_vote: pre,
        });
    }

    /// Whether a candidate's log is at least as up-to-date as ours (§5.4.1).
    fn log_ok(&self, last_index: u64, last_term: u64) -> bool {
        self.skip_log_check || (last_term, last_index) >= (self.last_term(), self.last_index())
    }

    /// CheckQuorum's leader stickiness: we heard from a live leader within the minimum
    /// election timeout, so a vote request is a disruption, not a failure.
    fn in_lease(&self, now: Time) -> bool {
        match (self.role, self.last_leader_contact) {
            (Role::Leader, _) => true,
            (_, Some(t)) => self.leader.is_some() && now.since(t) < self.election_timeout_min(),
            _ => false,
        }
    }

    fn on_request_vote(&mut self, ctx: &mut Ctx<'_>, from: NodeId, m: (u64, u64, u64, bool)) {
        let (term, last_index, last_term, pre_vote) = m;
        if self.lease_blocks(ctx.now, from).is_some() {
            // We granted another leader a lease that still runs (`lease.rs`): no vote, and
            // no disruption of that leader by a higher term.
            return;
        }
        if term > self.term && (pre_vote || self.check_quorum) && self.in_lease(ctx.now) {
            // Thesis §9.6: ignore while a leader is known to be alive.
            return;
        }
        if pre_vote {
            let granted = term > self.term && self.log_ok(last_index, last_term);
            let reply_term = if granted { term } else { self.term };
            ctx.send(from, &Msg::Vote { term: reply_term, granted, pre_vote: true });
            return;
        }
        if term > self.term {
            self.become_follower(ctx, term, None);
        }
        let granted =
            term == self.term && self.voted_for.is_none_or(|v| v == from) && self.log_ok(last_index, last_term);
        if granted && self.voted_for.is_none() {
            self.voted_for = Some(from);
            self.persist_hard_state(ctx);
        }
        if granted {
            self.reset_election_timer(ctx);
        }
        ctx.send(from, &Msg::Vote { term: self.term, granted, pre_vote: false });
    }

    fn on_vote(&mut self, ctx: &mut Ctx<'_>, from: NodeId, term: u64, granted: bool, pre_vote: bool) {
        if self.role != Role::Candidate || pre_vote != self.pre_candidate {
            if term > self.term && !pre_vote {
                self.become_follower(ctx, term, None);
            }
            return;
        }
        let asked = if pre_vote { self.term + 1 } else { self.term };
        if term > asked || (!granted && term > self.term) {
            self.become_follower(ctx, term, None);
            return;
        }
        if granted && term == asked && self.votes.ack(from) {
            self.won_vote(ctx);
        }
    }

    fn won_vote(&mut self, ctx: &mut Ctx<'_>) {
        if self.pre_candidate {
            self.campaign(ctx, false);
        } else {
            self.become_leader(ctx);
        }
    }

    fn become_follower(&mut self, ctx: &mut Ctx<'_>, term: u64, leader: Option<NodeId>) {
        let was_leader = self.role == Role::Leader;
        if term > self.term {
            self.term = term;
            self.voted_for = None;
            self.persist_hard_state(ctx);
        }
        self.role = Role::Follower;
        self.pre_candidate = false;
        self.leader = leader;
        self.leader_match = 0;
        self.progress.clear();
        self.coded.clear();
        self.pieces.clear();
        self.degraded = false;
        self.recovering = None;
        self.lease_lead_from(u64::MAX);
        if was_leader {
            ctx.cancel_timer(TIMER_HEARTBEAT);
        }
        for p in self.queue.drain() {
            if let Some(c) = p.client {
                self.redirect(ctx, c, &p.cmd);
            }
        }
        self.reset_election_timer(ctx);
    }

    fn become_leader(&mut self, ctx: &mut Ctx<'_>) {
        self.role = Role::Leader;
        self.pre_candidate = false;
        self.leader = Some(self.id);
        self.lease_lead_from(u64::MAX);
        // CRaft: a leader holding shards at the end of its log may drop them (`craft.rs`,
        // part 5), so it probes its followers below the first of them: an acknowledgement
        // of an entry it later drops would leave a match index its log no longer has.
        let next = self.first_partial().unwrap_or(self.last_index() + 1);
        self.progress = self
            .peers()
            .map(|p| {
                (
                    p,
                    Progress {
                        next,
                        matched: 0,
                        in_flight: 0,
                        last_heard: ctx.now,
                        last_sent: Time::ZERO,
                        snapshot_offset: None,
                        probing: true,
                        probe_prev: next - 1,
                        full: 0,
                        full_known: false,
                        fill_sent: None,
                    },
                )
            })
            .collect();
        if self.codec.codes() && self.first_partial().is_some() {
            // CRaft: rebuild the entries we hold only shards of before leading.
            self.recovering = Some(Recovery::default());
            self.gather(ctx);
            ctx.set_timer(TIMER_ELECTION, self.election_timeout_min());
            self.on_heartbeat_timer(ctx);
            return;
        }
        self.start_leading(ctx);
    }

    fn start_leading(&mut self, ctx: &mut Ctx<'_>) {
        if self.codec.codes() {
            // Earlier-term entries not known committed: the coded commit rule (their
            // followers may hold shards only).
            self.coded = (self.commit + 1..=self.last_index()).collect();
        }
        // A no-op of the new term lets earlier-term entries commit (§5.4.2, §8); lease reads
        // wait until it is executed (`lease.rs`).
        self.lease_lead_from(self.last_index() + 1);
        self.append(ctx, Vec::new(), Vec::new());
        ctx.set_timer(TIMER_ELECTION, self.election_timeout_min());
        self.on_heartbeat_timer(ctx);
        self.propose_queued(ctx);
    }

    /// CheckQuorum: a leader that has not heard from a majority within an election timeout
    /// steps down.
    fn check_quorum_tick(&mut self, ctx: &mut Ctx<'_>) {
        let window = self.election_timeout_min();
        if self.check_quorum {
            let heard = 1 + self.progress.values().filter(|p| ctx.now.since(p.last_heard) < window).count();
            if heard < self.quorum() {
                self.become_follower(ctx, self.term, None);
                return;
            }
        }
        ctx.set_timer(TIMER_ELECTION, window);
    }

    // ---------------------------------------------------------------------------------------
    // §5.3 Log replication
    // ---------------------------------------------------------------------------------------

    fn redirect(&self, ctx: &mut Ctx<'_>, client: ClientRef, cmd: &Command) {
        let leader = self.leader.filter(|l| *l != self.id);
        ctx.answer(client, cmd, ReplyBody::NotLeader { leader });
    }

    fn on_request(&mut self, ctx: &mut Ctx<'_>, client: ClientRef, cmd: Command) {
        match self.role {
            // A read the lease covers is answered at once, without an entry (`lease.rs`); the
            // leader appends the turn's other requests as one entry at its end (`flush`); a
            // candidate holds them until it wins or learns the leader.
            Role::Leader => {
                let Some(cmd) = self.try_lease_read(ctx, client, cmd) else { return };
                self.queue.push(Some(client), cmd);
            }
            Role::Candidate => self.queue.push(Some(client), cmd),
            _ => self.redirect(ctx, client, &cmd),
        }
    }

    /// Append queued requests as new entries while fewer than `pipeline_window` entries are
    /// uncommitted (adaptive batching: the rest waits and goes out in larger batches).
    fn propose_queued(&mut self, ctx: &mut Ctx<'_>) {
        if self.role != Role::Leader || self.recovering.is_some() {
            return;
        }
        let mut appended = false;
        while !self.queue.is_empty() && self.last_index() - self.commit < self.params.pipeline_window as u64 {
            let batch = self.queue.take(self.params.max_batch, MAX_BATCH_BYTES);
            let waiters: Vec<Option<Waiter>> = batch.iter().map(Waiter::for_pending).collect();
            let value: Batch = batch.into_iter().map(|p| p.cmd).collect();
            self.append_local(ctx, value, waiters);
            appended = true;
        }
        if appended {
            self.replicate(ctx);
            self.maybe_commit(ctx);
        }
    }

    fn append(&mut self, ctx: &mut Ctx<'_>, value: Batch, waiters: Vec<Option<Waiter>>) {
        self.append_local(ctx, value, waiters);
        self.replicate(ctx);
        self.maybe_commit(ctx);
    }

    fn append_local(&mut self, ctx: &mut Ctx<'_>, value: Batch, waiters: Vec<Option<Waiter>>) {
        let index = self.last_index() + 1;
        if self.codec.codes() && !self.degraded {
            if let Some(shards) = self.codec.split(&value, &self.members) {
                self.coded.insert(index);
                self.pieces.insert(index, shards);
            }
        }
        let entry = Entry::full(self.term, value);
        self.log.set(index, entry.clone(), SlotState::InProgress);
        // Persisted before the AppendEntries that carry it leave (driver contract), so the
        // leader counts itself in the match quorum.
        self.persist(ctx, vec![Record::Entries { first: index, entries: vec![entry] }]);
        if waiters.iter().any(|w| w.is_some()) {
            self.waiting.insert(index, waiters);
        }
    }

    /// Send what each follower is missing, up to its flow-control window.
    fn replicate(&mut self, ctx: &mut Ctx<'_>) {
        let peers: Vec<NodeId> = self.peers().collect();
        for p in peers {
            self.send_to(ctx, p, false);
        }
    }

    fn send_to(&mut self, ctx: &mut Ctx<'_>, to: NodeId, heartbeat: bool) {
        // A recovering CRaft leader sends nothing it holds only shards of.
        let last = match (&self.recovering, self.first_partial()) {
            (Some(_), Some(p)) => self.last_index().min(p - 1),
            _ => self.last_index(),
        };
        let first = self.log.first_index();
        let Some(pr) = self.progress.get(&to).cloned() else { return };
        // The entry before `next` was compacted away (its term is unknown): only a snapshot
        // can bring this follower forward.
        if pr.next < first || self.term_at(pr.next - 1).is_none() {
            self.send_snapshot_chunk(ctx, to);
            return;
        }
        let mut pr = pr;
        let mut sent = false;
        let window = if pr.probing { 1 } else { self.params.pipeline_window };
        while pr.next <= last && pr.in_flight < window {
            let to_index = last.min(pr.next + self.params.catchup_chunk as u64 - 1);
            let entries: Vec<Entry> =
                self.log.range(pr.next, to_index).map(|(i, s)| self.piece(i, &s.value, to)).collect();
            let prev_index = pr.next - 1;
            let prev_term = self.term_at(prev_index).unwrap_or(0);
            pr.probe_prev = prev_index;
            ctx.send(to, &Msg::Append { term: self.term, prev_index, prev_term, entries, commit: self.commit });
            pr.next = to_index + 1;
            pr.in_flight += 1;
            sent = true;
        }
        if !sent && heartbeat {
            let prev_index = pr.next - 1;
            let prev_term = self.term_at(prev_index).unwrap_or(0);
            ctx.send(
                to,
                &Msg::Append { term: self.term, prev_index, prev_term, entries: Vec::new(), commit: self.commit },
            );
            sent = true;
        }
        if sent {
            pr.last_sent = ctx.now;
        }
        self.progress.insert(to, pr);
    }

    fn on_heartbeat_timer(&mut self, ctx: &mut Ctx<'_>) {
        if self.role != Role::Leader {
            return;
        }
        // Messages may be lost: a follower that has not answered for two heartbeats is probed
        // again from its match index.
        let stale = self.params.heartbeat() * 2;
        for pr in self.progress.values_mut() {
            if pr.probing && pr.snapshot_offset.is_none() {
                // Re-send the probe every heartbeat: it or its answer may have been lost.
                pr.next = pr.probe_prev + 1;
                pr.in_flight = 0;
            } else if pr.in_flight > 0 && ctx.now.since(pr.last_heard) >= stale && ctx.now.since(pr.last_sent) >= stale
            {
                pr.in_flight = 0;
                pr.next = pr.matched + 1;
                pr.probing = true;
            }
        }
        let peers: Vec<NodeId> = self.peers().collect();
        for p in peers {
            self.send_to(ctx, p, true);
        }
        self.lease_request(ctx);
        self.craft_tick(ctx);
        self.persist_commit_marker(ctx);
        ctx.set_timer(TIMER_HEARTBEAT, self.params.heartbeat());
    }

    /// A message of `from` as the leader of `term` (Append, Snapshot; CRaft's Fill, Gather,
    /// PullSnapshot): false if its term is stale; otherwise we follow `from` in `term` and
    /// note the contact (leader stickiness).
    fn heard_from_leader(&mut self, ctx: &mut Ctx<'_>, from: NodeId, term: u64) -> bool {
        if term < self.term {
            return false;
        }
        if term > self.term || self.role != Role::Follower || self.leader != Some(from) {
            self.become_follower(ctx, term, Some(from));
        }
        self.last_leader_contact = Some(ctx.now);
        true
    }

    /// A follower's answer of `term` (AppendResp, SnapshotResp; CRaft's FillResp, Gathered,
    /// PulledSnapshot): a newer term deposes us; it counts only while we lead `term`, and
    /// then refreshes when we last heard from `from` — its progress is returned.
    fn heard_from_follower(&mut self, ctx: &mut Ctx<'_>, from: NodeId, term: u64) -> Option<&mut Progress> {
        if term > self.term {
            self.become_follower(ctx, term, None);
            return None;
        }
        if self.role != Role::Leader || term < self.term {
            return None;
        }
        let pr = self.progress.get_mut(&from)?;
        pr.last_heard = ctx.now;
        Some(pr)
    }

    fn on_append(&mut self, ctx: &mut Ctx<'_>, from: NodeId, m: AppendArgs) {
        if !self.heard_from_leader(ctx, from, m.term) {
            ctx.send(from, &Msg::AppendResp { term: self.term, success: false, index: 0, prev: 0 });
            return;
        }
        self.reset_election_timer(ctx);

        // Consistency check (§5.3). Entries up to our commit index are known to match.
        let base = self.commit.max(self.snapshot.as_ref().map_or(0, |s| s.index));
        if m.prev_index > self.last_index() {
            ctx.send(
                from,
                &Msg::AppendResp { term: self.term, success: false, index: self.last_index() + 1, prev: m.prev_index },
            );
            return;
        }
        if m.prev_index >= base {
            if let Some(t) = self.term_at(m.prev_index) {
                if t != m.prev_term {
                    // Fast back-up: the first index of the conflicting term.
                    let mut hint = m.prev_index;
                    while hint > base + 1 && self.term_at(hint - 1) == Some(t) {
                        hint -= 1;
                    }
                    ctx.send(
                        from,
                        &Msg::AppendResp { term: self.term, success: false, index: hint, prev: m.prev_index },
                    );
                    return;
                }
            }
        }
        // Append, skipping what we have and truncating a conflicting suffix.
        let mut index = m.prev_index;
        let mut new_from: Option<u64> = None;
        let mut new_entries = Vec::new();
        for e in m.entries {
            index += 1;
            if new_from.is_none() {
                if index <= base {
                    continue;
                }
                match self.term_at(index) {
                    Some(t) if t == e.term => {
                        self.upgrade(ctx, index, e);
                        continue;
                    }
                    Some(_) => {
                        self.log.truncate_after(index - 1);
                        self.waiting.retain(|i, _| *i < index);
                    }
                    None => {}
                }
                new_from = Some(index);
            }
            self.log.set(index, e.clone(), SlotState::InProgress);
            new_entries.push(e);
        }
        if let Some(first) = new_from {
            self.persist(ctx, vec![Record::Entries { first, entries: new_entries }]);
        }
        let matched = index;
        self.leader_match = self.leader_match.max(matched);
        let new_commit = m.commit.min(matched);
        if new_commit > self.commit {
            self.advance_commit(ctx, new_commit);
        }
        ctx.send(from, &Msg::AppendResp { term: self.term, success: true, index: matched, prev: m.prev_index });
    }

    fn on_append_resp(&mut self, ctx: &mut Ctx<'_>, from: NodeId, term: u64, success: bool, index: u64, prev: u64) {
        let Some(pr) = self.heard_from_follower(ctx, from, term) else { return };
        if success {
            pr.in_flight = pr.in_flight.saturating_sub(1);
            pr.probing = false;
            if index > pr.matched {
                pr.matched = index;
            }
            pr.next = pr.next.max(pr.matched + 1);
            self.maybe_commit(ctx);
            self.fill(ctx, from);
        } else {
            // Stale rejections (of an earlier window, or below what already matched) change
            // nothing; a fresh one backs up by the follower's hint and starts probing.
            if prev < pr.matched || (pr.probing && prev != pr.probe_prev) || index == 0 {
                return;
            }
            pr.next = index.min(prev).max(pr.matched + 1);
            pr.in_flight = 0;
            pr.probing = true;
        }
        self.send_to(ctx, from, false);
    }

    // ---------------------------------------------------------------------------------------
    // §5.3/§5.4.2 Commitment and execution
    // ---------------------------------------------------------------------------------------

    fn maybe_commit(&mut self, ctx: &mut Ctx<'_>) {
        if self.role != Role::Leader {
            return;
        }
        let mut matches: Vec<u64> = self.progress.values().map(|p| p.matched).collect();
        matches.push(self.last_index());
        matches.sort_unstable_by(|a, b| b.cmp(a));
        let mut n = matches[self.quorum() - 1];
        if !self.coded.is_empty() {
            // CRaft: a coded entry commits once `q` replicas hold a piece of it, or a
            // majority holds it in full (after the switch to full copies).
            let q = self.codec.coded_quorum(self.members.len()).min(matches.len());
            let mut fulls: Vec<u64> = self.progress.values().map(|p| p.full.min(p.matched)).collect();
            fulls.push(self.last_index());
            fulls.sort_unstable_by(|a, b| b.cmp(a));
            let safe = matches[q - 1].max(fulls[self.quorum() - 1]);
            if safe < n {
                if let Some(&c) = self.coded.range(safe + 1..=n).next() {
                    n = c - 1;
                }
            }
        }
        // Only entries of the current term commit by counting replicas (§5.4.2).
        if n > self.commit && self.term_at(n) == Some(self.term) {
            self.advance_commit(ctx, n);
            self.propose_queued(ctx);
        }
    }

    fn advance_commit(&mut self, ctx: &mut Ctx<'_>, to: u64) {
        let to = to.min(self.last_index());
        for i in (self.commit + 1).max(self.log.first_index())..=to {
            self.log.mark_committed(i);
        }
        self.commit = self.commit.max(to);
        if !self.coded.is_empty() {
            self.coded = self.coded.split_off(&(self.commit + 1));
            self.pieces = self.pieces.split_off(&(self.commit + 1));
        }
        self.execute(ctx);
    }

    fn execute(&mut self, ctx: &mut Ctx<'_>) {
        while let Some((index, entry)) = self.log.next_to_execute() {
            // CRaft: a shard cannot be executed; the leader's Fill brings the full copy.
            let Payload::Full(batch) = &entry.value else { break };
            let waiters = self.waiting.remove(&index).unwrap_or_default();
            for (i, cmd) in batch.iter().enumerate() {
                ctx.apply(Pos::slot(index, i as u32), cmd.clone(), Waiter::matching(waiters.get(i), cmd));
            }
            self.log.advance_exec();
        }
        self.maybe_snapshot(ctx);
    }

    fn persist_commit_marker(&mut self, ctx: &mut Ctx<'_>) {
        if self.commit > self.persisted_commit {
            self.persisted_commit = self.commit;
            self.persist(ctx, vec![Record::Commit(self.commit)]);
        }
    }

    // ---------------------------------------------------------------------------------------
    // §7 Log compaction and InstallSnapshot
    // ---------------------------------------------------------------------------------------

    fn maybe_snapshot(&mut self, ctx: &mut Ctx<'_>) {
        let last = self.snapshot.as_ref().map_or(0, |s| s.index);
        let executed = self.log.executed_upto();
        if self.snapshot_pending.is_none() && self.policy.due(last, executed) {
            let token = self.next_token;
            self.next_token += 1;
            let term = self.term_at(executed).unwrap_or(0);
            self.snapshot_pending = Some((token, executed, term));
            ctx.push(Action::TakeSnapshot { token });
        }
    }

    fn on_snapshot_taken(&mut self, ctx: &mut Ctx<'_>, token: u64, data: Bytes) {
        let Some((t, index, term)) = self.snapshot_pending else { return };
        if t != token {
            return;
        }
        self.snapshot_pending = None;
        if self.snapshot.as_ref().is_some_and(|s| s.index >= index) {
            return;
        }
        self.snapshot = Some(Snapshot { index, term, data });
        self.trim_to = self.trim_to.max(self.policy.trim_point(index));
        // In the background: the image holds only what is durable already plus a snapshot of
        // executed (so committed) entries, which a crash may lose without harm.
        self.rewrite_durable(ctx, true);
    }

    /// Replace the durable records by hard state + snapshot + the log after it; in the
    /// background (`CompactDurable`) for our own snapshots, synchronously for an installed
    /// one (the reply to the leader must not claim a snapshot a crash could lose).
    fn rewrite_durable(&mut self, ctx: &mut Ctx<'_>, background: bool) {
        let Some(s) = &self.snapshot else { return };
        let suffix: Vec<Entry> = self.log.range(s.index + 1, self.last_index()).map(|(_, e)| e.value.clone()).collect();
        let mut records = vec![
            Record::HardState { term: self.term, voted_for: self.voted_for },
            Record::Snapshot { index: s.index, term: s.term, data: s.data.clone() },
        ];
        if !suffix.is_empty() {
            records.push(Record::Entries { first: s.index + 1, entries: suffix });
        }
        records.push(Record::Commit(self.commit));
        self.persisted_commit = self.commit;
        // The snapshot's bytes go to the driver as they are, behind their encoded header.
        let records = records
            .iter()
            .map(|r| match r {
                Record::Snapshot { index, term, data } => encode_with_payload(
                    &Record::Snapshot { index: *index, term: *term, data: Bytes::new() },
                    data.clone(),
                ),
                r => vec![encode(r)],
            })
            .collect();
        ctx.push(compaction(0, records, background));
    }

    fn send_snapshot_chunk(&mut self, ctx: &mut Ctx<'_>, to: NodeId) {
        if self.snapshot.is_none() {
            return;
        }
        let Some(pr) = self.progress.get_mut(&to) else { return };
        let offset = pr.snapshot_offset.unwrap_or(0);
        if pr.snapshot_offset.is_some() && pr.in_flight > 0 {
            return;
        }
        pr.snapshot_offset = Some(offset);
        pr.in_flight = 1;
        pr.last_sent = ctx.now;
        self.send_chunk(ctx, to, offset, Msg::Snapshot);
    }

    /// Send `to` the chunk at `offset` of our snapshot, wrapped by `wrap`: `Msg::Snapshot` to
    /// a follower, `Msg::PulledSnapshot` to a recovering CRaft leader (`craft.rs`, part 6).
    fn send_chunk(&self, ctx: &mut Ctx<'_>, to: NodeId, offset: u64, wrap: fn(SnapshotChunk) -> Msg) {
        let Some(s) = &self.snapshot else { return };
        let data = s.data.slice_ref(chunk(&s.data, offset, self.params.snapshot_chunk_bytes));
        let total = s.data.len() as u64;
        ctx.send(to, &wrap(SnapshotChunk { term: self.term, index: s.index, snap_term: s.term, offset, total, data }));
    }

    fn on_snapshot(&mut self, ctx: &mut Ctx<'_>, from: NodeId, m: SnapshotChunk) {
        if !self.heard_from_leader(ctx, from, m.term) {
            ctx.send(from, &Msg::AppendResp { term: self.term, success: false, index: 0, prev: 0 });
            return;
        }
        self.reset_election_timer(ctx);
        if m.index <= self.log.executed_upto() {
            // Already have everything it covers.
            self.leader_match = self.leader_match.max(m.index);
            ctx.send(from, &Msg::SnapshotResp { term: self.term, index: m.index, offset: m.total, done: true });
            return;
        }
        let Some(data) = self.incoming.offer(m.index, m.offset, m.total, &m.data) else {
            let offset = self.incoming.received(m.index);
            ctx.send(from, &Msg::SnapshotResp { term: self.term, index: m.index, offset, done: false });
            return;
        };
        // Install: the snapshot replaces the state machine and the log up to its index (a
        // corrupt one is dropped: the leader sends it again).
        let data = Bytes::from(data);
        if !synod_core::session::StateMachine::is_valid_snapshot(&data) {
            return;
        }
        // CRaft: a follower sent a snapshot past a shard it could not execute keeps the
        // entries after it when its entry at the snapshot's index matches (§7).
        let keep = self.codec.codes() && self.term_at(m.index) == Some(m.snap_term);
        self.install_snapshot(ctx, Snapshot { index: m.index, term: m.snap_term, data }, keep);
        self.leader_match = self.leader_match.max(m.index);
        ctx.send(from, &Msg::SnapshotResp { term: self.term, index: m.index, offset: m.total, done: true });
    }

    /// A peer's (valid) snapshot replaces the state machine and the log up to its index,
    /// durably before anything is answered. With `keep` (our entry at its index has its
    /// term, so our log matches up to there, §7) the entries after it stay, and so do the
    /// waiters for them; otherwise the log restarts after it.
    fn install_snapshot(&mut self, ctx: &mut Ctx<'_>, snap: Snapshot, keep: bool) {
        let index = snap.index;
        ctx.push(Action::InstallSnapshot { data: snap.data.clone() });
        self.snapshot = Some(snap);
        if keep {
            self.log.skip_to(index + 1);
            self.waiting.retain(|i, _| *i > index);
        } else {
            self.log.reset_to(index + 1);
            self.waiting.clear();
        }
        self.commit = if keep { self.commit.max(index) } else { index };
        self.rewrite_durable(ctx, false);
    }

    fn on_snapshot_resp(&mut self, ctx: &mut Ctx<'_>, from: NodeId, term: u64, index: u64, offset: u64, done: bool) {
        let Some(pr) = self.heard_from_follower(ctx, from, term) else { return };
        if !done && pr.snapshot_offset.is_none() {
            // A late (duplicate) answer to a transfer that already ended: setting the offset
            // again would stop the probe of this follower's log for good (`synod check
            // --protocol craft --seed 237 --param read_lease=on --readers 1`).
            return;
        }
        pr.in_flight = 0;
        // CRaft: the fill path's chunk was answered (`craft.rs`, `fill`).
        pr.fill_sent = None;
        if done {
            pr.snapshot_offset = None;
            pr.probing = false;
            pr.matched = pr.matched.max(index);
            pr.next = pr.matched + 1;
            // CRaft: everything the snapshot covers is executed there, so held in full.
            if pr.full_known {
                pr.full = pr.full.max(index);
            }
            self.maybe_commit(ctx);
        } else {
            pr.snapshot_offset = Some(offset);
        }
        // CRaft: the next chunk of a snapshot sent past the follower's shards (`fill`).
        self.fill(ctx, from);
        self.send_to(ctx, from, false);
    }
}

struct AppendArgs {
    term: u64,
    prev_index: u64,
    prev_term: u64,
    entries: Vec<Entry>,
    commit: u64,
}

impl Protocol for Raft {
    fn recover(&mut self, ctx: &mut Ctx<'_>, records: Vec<Bytes>) {
        let mut commit = 0;
        for r in &records {
            match decode::<Record>(r) {
                Ok(Record::HardState { term, voted_for }) => {
                    self.term = term;
                    self.voted_for = voted_for;
                }
                Ok(Record::Entries { first, entries }) => {
                    // Entries the snapshot already covers are skipped.
                    let start = first.max(self.log.first_index());
                    self.log.truncate_after(start - 1);
                    for (i, e) in entries.into_iter().enumerate() {
                        let index = first + i as u64;
                        if index >= start {
                            self.log.set(index, e, SlotState::InProgress);
                        }
                    }
                }
                Ok(Record::Commit(c)) => commit = commit.max(c),
                Ok(Record::Full { index, entry }) => {
                    if let Some(slot) = self.log.get_mut(index) {
                        if slot.value.term == entry.term {
                            slot.value = entry;
                        }
                    }
                }
                Ok(Record::Snapshot { index, term, data }) => {
                    ctx.push(Action::InstallSnapshot { data: data.clone() });
                    self.snapshot = Some(Snapshot { index, term, data });
                    self.log.reset_to(index + 1);
                    self.commit = index;
                }
                Err(e) => {
                    self.broken = Some(format!("undecodable durable record: {e}"));
                    return;
                }
            }
        }
        self.persisted_commit = commit;
        if commit > self.commit {
            self.advance_commit(ctx, commit);
        }
        self.lease_restart(ctx.now);
        if self.members.len() == 1 {
            self.campaign(ctx, false);
        } else {
            self.reset_election_timer(ctx);
        }
    }

    fn on_event(&mut self, ctx: &mut Ctx<'_>, event: Event) {
        if self.broken.is_some() {
            if let Event::Request { client, cmd, .. } = event {
                let reason = "replica is passive: its durable state is unreadable".to_string();
                ctx.answer(client, &cmd, ReplyBody::Rejected { reason });
            }
            return;
        }
        match event {
            Event::Message { from, msg, .. } => {
                if !self.members.contains(&from) || from == self.id {
                    return;
                }
                let Ok(msg) = decode::<Msg>(&msg) else { return };
                match msg {
                    Msg::RequestVote { term, last_index, last_term, pre_vote } => {
                        self.on_request_vote(ctx, from, (term, last_index, last_term, pre_vote))
                    }
                    Msg::Vote { term, granted, pre_vote } => self.on_vote(ctx, from, term, granted, pre_vote),
                    Msg::Append { term, prev_index, prev_term, entries, commit } => {
                        self.on_append(ctx, from, AppendArgs { term, prev_index, prev_term, entries, commit })
                    }
                    Msg::AppendResp { term, success, index, prev } => {
                        self.on_append_resp(ctx, from, term, success, index, prev)
                    }
                    Msg::Snapshot(c) => self.on_snapshot(ctx, from, c),
                    Msg::SnapshotResp { term, index, offset, done } => {
                        self.on_snapshot_resp(ctx, from, term, index, offset, done)
                    }
                    Msg::Fill { term, entries } => self.on_fill(ctx, from, term, entries),
                    Msg::FillResp { term, full } => self.on_fill_resp(ctx, from, term, full),
                    Msg::Gather { term, indices } => self.on_gather(ctx, from, term, indices),
                    Msg::Gathered { term, asked, entries, compacted } => {
                        self.on_gathered(ctx, from, term, (asked, entries, compacted))
                    }
                    Msg::PullSnapshot { term, index, offset } => self.on_pull_snapshot(ctx, from, term, index, offset),
                    Msg::PulledSnapshot(c) => self.on_pulled_snapshot(ctx, from, c),
                    Msg::LeaseReq { term, round } => self.on_lease_req(ctx, from, term, round),
                    Msg::LeaseAck { term, round } => self.on_lease_ack(ctx, from, term, round),
                }
            }
            Event::Request { client, cmd, .. } => self.on_request(ctx, client, cmd),
            Event::Reconfigure { client, id, .. } => {
                let reason = "membership change not supported by raft".to_string();
                let reply =
                    synod_core::Reply { client: 0, seq: id, from: self.id, body: ReplyBody::Invalid { reason } };
                ctx.reply(client, reply);
            }
            Event::Timer(TIMER_ELECTION) => self.on_election_timeout(ctx),
            Event::Timer(TIMER_HEARTBEAT) => self.on_heartbeat_timer(ctx),
            Event::SnapshotTaken { token, data } => self.on_snapshot_taken(ctx, token, data),
            Event::Timer(_) | Event::Persisted { .. } => {}
        }
        if self.log.first_index() < self.trim_to {
            self.log.trim_before(self.trim_to.min(self.log.first_index() + TRIM_STEP));
        }
        if self.role == Role::Follower && self.commit > self.persisted_commit + self.params.catchup_chunk as u64 {
            self.persist_commit_marker(ctx);
        }
    }

    /// The end of the driver's turn: the requests queued during it become one entry.
    fn flush(&mut self, ctx: &mut Ctx<'_>) {
        self.propose_queued(ctx);
    }

    fn status(&self) -> Status {
        let mut extra = BTreeMap::new();
        extra.insert("last_index".into(), self.last_index().to_string());
        extra.insert("log_len".into(), self.log.len().to_string());
        extra.insert("queued".into(), self.queue.len().to_string());
        extra.insert("prevote".into(), self.prevote.to_string());
        extra.insert("check_quorum".into(), self.check_quorum.to_string());
        if self.codec.codes() {
            extra.insert("coded_uncommitted".into(), self.coded.len().to_string());
            extra.insert("degraded".into(), self.degraded.to_string());
            extra.insert("recovering".into(), self.recovering.is_some().to_string());
            extra.insert("full_upto".into(), self.full_upto().to_string());
        }
        if let Some(s) = &self.snapshot {
            extra.insert("snapshot_index".into(), s.index.to_string());
            extra.insert("snapshot_bytes".into(), s.data.len().to_string());
        }
        if let Some(e) = &self.broken {
            extra.insert("error".into(), e.clone());
        }
        self.lease_status(&mut extra);
        Status {
            id: self.id,
            protocol: self.name.into(),
            role: self.role,
            ballot: self.term.to_string(),
            leader: self.leader,
            commit_index: self.commit,
            execute_index: self.log.executed_upto(),
            extra,
        }
    }

    fn describe_message(&self, msg: &[u8]) -> String {
        match decode::<Msg>(msg) {
            Ok(Msg::Append { term, prev_index, prev_term, entries, commit }) => {
                let shards = entries.iter().filter(|e| e.is_partial()).count();
                if shards == 0 {
                    format!("Append t={term} prev={prev_index}/{prev_term} entries={} commit={commit}", entries.len())
                } else {
                    format!(
                        "Append t={term} prev={prev_index}/{prev_term} entries={} ({shards} coded) commit={commit}",
                        entries.len()
                    )
                }
            }
            Ok(Msg::Fill { term, entries }) => {
                let idx: Vec<u64> = entries.iter().map(|(i, _)| *i).collect();
                format!("Fill t={term} {idx:?}")
            }
            Ok(Msg::Gathered { term, asked, entries, compacted }) => {
                let held: Vec<String> = entries
                    .iter()
                    .map(|(i, e)| match &e.value {
                        Payload::Full(_) => format!("{i}:full"),
                        Payload::Shard(s) => format!("{i}:shard{}", s.index),
                    })
                    .collect();
                format!("Gathered t={term} asked={asked:?} held={held:?} compacted={compacted}")
            }
            Ok(Msg::Snapshot(c)) => format!("Snapshot {}", c.describe()),
            Ok(Msg::PulledSnapshot(c)) => format!("PulledSnapshot {}", c.describe()),
            Ok(m) => format!("{m:?}"),
            Err(e) => format!("<undecodable: {e}>"),
        }
    }
}

#[cfg(test)]
mod tests;
