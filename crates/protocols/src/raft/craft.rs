//! CRaft (Wang et al., "CRaft: An Erasure-coding-supported Version of Raft", FAST 2020), as
//! the Crossword paper describes it (§2, Fig. 2 and Fig. 3(b)): the Raft core with the
//! [`ReedSolomon`](super::ReedSolomon) entry codec. The parts, in the order of the paper:
//!
//! 1. **Coded replication.** While every follower answered within an election timeout, the
//!    leader cuts each new entry into a Reed–Solomon codeword of `n` shards, `d = f + 1` of
//!    which rebuild it, and sends follower `i` (its position among the members) shard `i`
//!    only (`c = 1`). The leader keeps the full entry.
//! 2. **Commitment.** A coded entry commits once `q = ⌈(n + d)/2⌉` replicas (the leader
//!    included) hold it — RSPaxos's quorum: any `n + d − q` replicas then hold `d` distinct
//!    shards of it — or once a majority holds it in full. Full-copy entries commit on a
//!    majority as in Raft. Raft's election (a majority of votes, §5.4.1's up-to-date check)
//!    is unchanged: a committed entry is on `q` replicas, so every elected leader has it —
//!    but maybe only as a shard.
//! 3. **The switch to full copies (CRaft's fallback).** Once a follower has been silent for
//!    an election timeout the leader is *degraded*: new entries go out in full, and every
//!    entry a follower holds only a shard of is re-sent to it in full (`Fill`), replacing
//!    the shard and re-persisted (`Record::Full`). Coded entries then commit on a majority of
//!    full copies, and after the fills complete the cluster tolerates `f` failures again.
//!    Before they complete, it tolerates `q − d` (`n = 5`: one): the window is CRaft's
//!    weakness (Crossword §2, Fig. 2), shown by the tests of this folder.
//! 4. **Execution at followers.** A follower cannot execute a shard; the leader fills the
//!    committed entries a follower holds as shards (in the healthy state only those: the
//!    critical path carries one shard). A follower executes up to its first shard.
//! 5. **A new leader** holding shards at the end of its log gathers what its followers hold
//!    of those entries (`Gather`/`Gathered`) before it appends or replicates: with a full
//!    copy or `d` distinct shards of an entry (same index and term) it rebuilds it; once
//!    `n + d − q` replicas (itself included) reported fewer and no full copy, the entry was
//!    never committed (a committed one is held by `q` replicas, of which `d` are among any
//!    `n + d − q`; or in full by a majority) and it drops it with everything after it. With
//!    fewer replicas reachable it waits: the loss of availability the paper describes.
//! 6. **A new leader behind its followers' snapshots.** Followers execute coded entries
//!    through fills and then compact them into snapshots (§7 of Raft) like any other. A
//!    new leader may hold only a shard of an entry its followers executed and compacted:
//!    then no follower holds that entry in its log, neither in full nor as a shard, and
//!    without more the leader could neither rebuild it nor — worse — tell it from an entry
//!    that was never committed. Crossword §4.3 ("Snapshots") says what CRaft needs here:
//!    without follower gossiping, servers take snapshots only with *state-sending snapshot
//!    messages*, and §5.3 bounds the failover downtime of the coded protocols "by the
//!    interval between expensive state-sending snapshots". So a follower's `Gathered`
//!    carries its snapshot index; a follower executed every entry up to it, so each of them
//!    is committed, and by Leader Completeness (Raft §5.4.3; a coded entry commits on
//!    `q` ≥ a majority, so every elected leader has it) it is in our log at the same index
//!    and term. The leader therefore pulls that follower's snapshot towards itself
//!    (`PullSnapshot` / `PulledSnapshot`, chunked like InstallSnapshot), installs it as a
//!    follower would — keeping its log after the snapshot's index, which matches — and goes
//!    on rebuilding or dropping the entries after it. Never compacting coded entries until
//!    every replica held them in full would also do, but it blocks compaction for as long as
//!    one replica is down, which is exactly when CRaft runs on full copies for a long time.

use super::msg::{Entry, Msg, Payload, Record, SnapshotChunk};
use super::{Pull, Raft, Report};
use bytes::Bytes;
use synod_core::snapshot::Snapshot;
use synod_core::{Ctx, NodeId, Role, Time};

/// Most entries asked for in one `Gather`.
const GATHER_MAX: usize = 256;

impl Raft {
    /// The first entry this replica holds only a shard of (executed entries are full).
    pub(super) fn first_partial(&self) -> Option<u64> {
        if !self.codec.codes() {
            return None;
        }
        let from = self.log.exec_next().max(self.log.first_index());
        self.log.range(from, self.last_index()).find(|(_, s)| s.value.is_partial()).map(|(i, _)| i)
    }

    /// Every entry up to here is held in full.
    pub(super) fn full_upto(&self) -> u64 {
        self.first_partial().map_or(self.last_index(), |p| p - 1)
    }

    /// What follower `to` is sent of the entry at `index`: its shard while the entry is
    /// coded and the leader is healthy, else the full copy.
    pub(super) fn piece(&self, index: u64, entry: &Entry, to: NodeId) -> Entry {
        if !self.degraded {
            if let (Some(shards), Some(pos)) = (self.pieces.get(&index), self.members.iter().position(|m| *m == to)) {
                if let Some(s) = shards.get(pos) {
                    return Entry { term: entry.term, value: Payload::Shard(s.clone()) };
                }
            }
        }
        entry.clone()
    }

    /// A full copy of the entry we hold a shard of at `index` (same term) replaces it.
    pub(super) fn upgrade(&mut self, ctx: &mut Ctx<'_>, index: u64, incoming: Entry) {
        if incoming.is_partial() {
            return;
        }
        let Some(slot) = self.log.get_mut(index) else { return };
        if slot.value.term != incoming.term || !slot.value.is_partial() {
            return;
        }
        slot.value = incoming.clone();
        self.persist(ctx, vec![Record::Full { index, entry: incoming }]);
    }

    /// Every heartbeat of a CRaft leader: detect silent followers (switch), fill, gather.
    pub(super) fn craft_tick(&mut self, ctx: &mut Ctx<'_>) {
        if !self.codec.codes() || self.role != Role::Leader {
            return;
        }
        let window = self.election_timeout_min();
        let degraded = self.progress.values().any(|p| ctx.now.since(p.last_heard) >= window);
        if degraded && !self.degraded {
            // The switch: coded entries a follower holds shards of go to it in full.
            for pr in self.progress.values_mut() {
                pr.fill_sent = None;
            }
        }
        self.degraded = degraded;
        if self.recovering.is_some() {
            self.gather(ctx);
            self.pull_snapshot(ctx, false);
            return;
        }
        let peers: Vec<NodeId> = self.peers().collect();
        for p in peers {
            self.fill(ctx, p);
        }
    }

    /// Send follower `to` full copies of entries it may hold only shards of: the committed
    /// ones (it must execute them) and, once degraded, every one it has. One `Fill` in
    /// flight per follower (re-sent after two heartbeats); the first of a term is an empty
    /// probe that learns how far the follower holds full copies.
    pub(super) fn fill(&mut self, ctx: &mut Ctx<'_>, to: NodeId) {
        if !self.codec.codes() || self.role != Role::Leader || self.recovering.is_some() {
            return;
        }
        let stale = self.params.heartbeat() * 2;
        let first = self.log.first_index();
        let chunk = self.params.catchup_chunk.max(1) as u64;
        let upto_all = if self.degraded { u64::MAX } else { self.commit };
        let term = self.term;
        let Some(pr) = self.progress.get_mut(&to) else { return };
        if pr.fill_sent.is_some_and(|t| ctx.now.since(t) < stale) {
            return;
        }
        let upto = pr.matched.min(upto_all);
        let entries: Vec<(u64, Entry)> = match pr.full_known {
            false => Vec::new(),
            true if pr.full >= upto => return,
            true if pr.full + 1 < first => {
                // Compacted here: only the snapshot brings the follower past its shards. It
                // goes whatever the follower's `next` (its log may match ours far beyond).
                // Its chunks are timed by `fill_sent` (cleared by each SnapshotResp): the
                // answers to the Appends that flow meanwhile keep `last_heard` fresh, so the
                // core's timeout never re-sends a lost chunk (`synod check --protocol craft
                // --seed 3040`: a chunk lost in a partition stalled the transfer and the
                // probe behind it for good). No answer for two heartbeats: send it again.
                if pr.fill_sent.is_some() {
                    pr.in_flight = 0;
                }
                pr.fill_sent = Some(ctx.now);
                self.send_snapshot_chunk(ctx, to);
                return;
            }
            true => {
                let from = pr.full + 1;
                self.log.range(from, upto.min(from + chunk - 1)).map(|(i, s)| (i, s.value.clone())).collect()
            }
        };
        pr.fill_sent = Some(ctx.now);
        ctx.send(to, &Msg::Fill { term, entries });
    }

    pub(super) fn on_fill(&mut self, ctx: &mut Ctx<'_>, from: NodeId, term: u64, entries: Vec<(u64, Entry)>) {
        if !self.heard_from_leader(ctx, from, term) {
            return;
        }
        for (index, e) in entries {
            self.upgrade(ctx, index, e);
        }
        self.execute(ctx);
        // Only entries known to match the leader's: a full copy of an entry the leader has
        // replaced (an earlier term's, at the same index) is no full copy of its entry.
        let full = self.full_upto().min(self.leader_match);
        ctx.send(from, &Msg::FillResp { term: self.term, full });
    }

    pub(super) fn on_fill_resp(&mut self, ctx: &mut Ctx<'_>, from: NodeId, term: u64, full: u64) {
        let Some(pr) = self.heard_from_follower(ctx, from, term) else { return };
        pr.fill_sent = None;
        pr.full = if pr.full_known { pr.full.max(full) } else { full };
        pr.full_known = true;
        self.maybe_commit(ctx);
        self.fill(ctx, from);
    }

    // ----- a new leader's recovery ----------------------------------------------------------

    /// Ask the followers that have not reported on our first partial entry for the pieces of
    /// our partial entries (at most [`GATHER_MAX`]; the next ones once these are settled).
    pub(super) fn gather(&mut self, ctx: &mut Ctx<'_>) {
        let Some(first) = self.first_partial() else { return };
        let indices: Vec<u64> = self
            .log
            .range(first, self.last_index())
            .filter(|(_, s)| s.value.is_partial())
            .map(|(i, _)| i)
            .take(GATHER_MAX)
            .collect();
        let reported: Vec<NodeId> = self
            .recovering
            .as_ref()
            .map(|r| r.reports.iter().filter(|(_, (asked, _, _))| asked.contains(&first)).map(|(p, _)| *p).collect())
            .unwrap_or_default();
        for p in self.peers().filter(|p| !reported.contains(p)).collect::<Vec<_>>() {
            ctx.send(p, &Msg::Gather { term: self.term, indices: indices.clone() });
        }
    }

    pub(super) fn on_gather(&mut self, ctx: &mut Ctx<'_>, from: NodeId, term: u64, indices: Vec<u64>) {
        if !self.heard_from_leader(ctx, from, term) {
            return;
        }
        self.reset_election_timer(ctx);
        let entries: Vec<(u64, Entry)> =
            indices.iter().filter_map(|i| self.log.get(*i).map(|s| (*i, s.value.clone()))).collect();
        let compacted = self.snapshot.as_ref().map_or(0, |s| s.index);
        ctx.send(from, &Msg::Gathered { term: self.term, asked: indices, entries, compacted });
    }

    pub(super) fn on_gathered(&mut self, ctx: &mut Ctx<'_>, from: NodeId, term: u64, report: Report) {
        if self.heard_from_follower(ctx, from, term).is_none() {
            return;
        }
        let Some(r) = self.recovering.as_mut() else { return };
        r.reports.insert(from, report);
        self.settle_recovery(ctx);
    }

    /// Rebuild or drop our partial entries from the reports so far; lead once none is left.
    fn settle_recovery(&mut self, ctx: &mut Ctx<'_>) {
        let n = self.members.len();
        let decide = self.codec.reports_to_decide(n);
        let Some(r) = self.recovering.take() else { return };
        while let Some(index) = self.first_partial() {
            let Some(own) = self.log.get(index).map(|s| s.value.clone()) else { break };
            let mut reporters = 1;
            let mut full = None;
            let mut shards = Vec::new();
            if let Payload::Shard(s) = &own.value {
                shards.push(s.clone());
            }
            for (asked, held, _) in r.reports.values() {
                if !asked.contains(&index) {
                    continue;
                }
                reporters += 1;
                for (i, e) in held {
                    if *i != index || e.term != own.term {
                        continue;
                    }
                    match &e.value {
                        Payload::Full(b) => full = Some(b.clone()),
                        Payload::Shard(s) => shards.push(s.clone()),
                    }
                }
            }
            if let Some(batch) = full.or_else(|| self.codec.rebuild(&shards)) {
                self.upgrade(ctx, index, Entry::full(own.term, batch));
                continue;
            }
            // Part 6: a follower executed the entry and compacted it (so it was committed,
            // whatever the other reports say): its snapshot brings us past it.
            let behind = r.reports.iter().filter(|(_, (_, _, c))| *c >= index).max_by_key(|(_, (_, _, c))| *c);
            if let Some(source) = behind.map(|(p, _)| *p) {
                let mut r = r;
                if r.pull.as_ref().is_none_or(|p| p.wanted != index) {
                    r.pull = Some(Pull { from: source, wanted: index, index: 0, sent: Time::ZERO });
                }
                self.recovering = Some(r);
                self.pull_snapshot(ctx, false);
                return;
            }
            if reporters >= decide && index > self.commit {
                // Fewer than d shards among n + d − q replicas: never committed.
                self.log.truncate_after(index - 1);
                self.waiting.retain(|i, _| *i < index);
                self.persist(ctx, vec![Record::Entries { first: index, entries: Vec::new() }]);
                for pr in self.progress.values_mut() {
                    pr.next = pr.next.min(index);
                    pr.probe_prev = pr.probe_prev.min(index - 1);
                    pr.matched = pr.matched.min(index - 1);
                    pr.full = pr.full.min(index - 1);
                }
                break;
            }
            // Not enough reports yet: keep waiting (more arrive, or the gather is resent).
            self.recovering = Some(r);
            return;
        }
        self.execute(ctx);
        self.start_leading(ctx);
    }
}

impl Raft {
    // ----- part 6: a recovering leader pulls a follower's snapshot -------------------------

    /// Ask the pull's source for the next chunk of its snapshot: at once with `now`, or when
    /// none was asked for within two heartbeats (the request or its answer may be lost).
    fn pull_snapshot(&mut self, ctx: &mut Ctx<'_>, now: bool) {
        let stale = self.params.heartbeat() * 2;
        let term = self.term;
        let Some(p) = self.recovering.as_mut().and_then(|r| r.pull.as_mut()) else { return };
        if !now && p.sent != Time::ZERO && ctx.now.since(p.sent) < stale {
            return;
        }
        p.sent = ctx.now;
        let offset = self.incoming.received(p.index);
        ctx.send(p.from, &Msg::PullSnapshot { term, index: p.wanted, offset });
    }

    /// A follower sends the leader the chunk at `offset` of its snapshot, if it covers `index`.
    pub(super) fn on_pull_snapshot(&mut self, ctx: &mut Ctx<'_>, from: NodeId, term: u64, index: u64, offset: u64) {
        if !self.heard_from_leader(ctx, from, term) {
            return;
        }
        self.reset_election_timer(ctx);
        if self.snapshot.as_ref().is_some_and(|s| s.index >= index) {
            self.send_chunk(ctx, from, offset, Msg::PulledSnapshot);
        }
    }

    /// The recovering leader assembles the pulled snapshot and, once complete, installs it
    /// (keeping its log after it) and goes on settling its partial entries.
    pub(super) fn on_pulled_snapshot(&mut self, ctx: &mut Ctx<'_>, from: NodeId, m: SnapshotChunk) {
        if self.heard_from_follower(ctx, from, m.term).is_none() {
            return;
        }
        let Some(p) = self.recovering.as_mut().and_then(|r| r.pull.as_mut()) else { return };
        if p.from != from || m.index < p.wanted {
            return;
        }
        p.index = m.index;
        let Some(data) = self.incoming.offer(m.index, m.offset, m.total, &m.data) else {
            self.pull_snapshot(ctx, true);
            return;
        };
        let data = Bytes::from(data);
        // Every entry the snapshot covers is committed, so it is in our log with the same
        // term (Leader Completeness); one that does not match (or is corrupt) is not
        // installed — we never execute past our own log — and is pulled again after two
        // heartbeats.
        let matches = self.term_at(m.index) == Some(m.snap_term) && m.index >= self.log.exec_next();
        if !matches || !synod_core::session::StateMachine::is_valid_snapshot(&data) {
            return;
        }
        if let Some(r) = self.recovering.as_mut() {
            r.pull = None;
        }
        self.install_snapshot(ctx, Snapshot { index: m.index, term: m.snap_term, data }, true);
        self.execute(ctx);
        self.settle_recovery(ctx);
    }
}
