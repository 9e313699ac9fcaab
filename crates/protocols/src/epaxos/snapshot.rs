//! Snapshots, log compaction and forgetting executed instances. The paper leaves this to
//! "production implementations ... using snapshots [7]" (§4.7); what we do:
//!
//! - **Forgetting** (memory): an instance is dropped from memory once it is executed here and
//!   every replica reports it committed (heartbeats carry each replica's committed prefix per
//!   sub-space): nobody can ask for it any more, a restarting replica finds it in its own
//!   durable state. With snapshots on, only instances a durable snapshot covers are dropped.
//! - **Snapshots** (disk): every `snapshot_every` executed commands the replica asks for a
//!   snapshot, noting exactly which instances it has executed at that moment (a prefix per
//!   sub-space plus a few executed above it — execution follows dependencies, not indices).
//!   When the snapshot arrives the durable log is compacted in the background to that
//!   snapshot plus the records of every instance still in memory — the ones the snapshot
//!   covers too, since a peer may still need their commits (found by the simulator: a
//!   replica restarted from a snapshot could no longer answer for instances a crashed peer
//!   had not committed, and that peer never caught up).
//! - **Restart** from a compacted log installs the snapshot, marks the covered instances
//!   executed and replays the rest. Commands proposed afterwards depend on the highest
//!   forgotten instance of every replica (as a whole-keyspace command would): this replica
//!   no longer knows the keys those instances touched, and a slower replica may not have
//!   executed them yet.

use super::msg::{InstId, Record};
use super::Epaxos;
use bytes::Bytes;
use synod_core::protocol::{compaction, encode, encode_with_payload};
use synod_core::{Action, Ctx, NodeId};

/// A snapshot requested from the driver and not yet returned.
pub(super) struct PendingSnapshot {
    pub token: u64,
    pub covered: Vec<u64>,
    pub extras: Vec<InstId>,
    pub max_seq: u64,
}

impl Epaxos {
    /// After execution: ask for a snapshot every `snapshot_every` executed commands, and
    /// not before half as many commands were executed as instances are held in memory (the
    /// compacted image holds them all: while a peer is down nothing is forgotten, and
    /// compacting every `snapshot_every` commands would cost time quadratic in the outage;
    /// this way the intervals grow geometrically and the cost stays linear).
    pub(super) fn maybe_snapshot(&mut self, ctx: &mut Ctx<'_>) {
        let every = self.params.snapshot_every;
        let held: u64 = self.insts.iter().map(|m| m.len() as u64).sum();
        if every == 0
            || self.snap_pending.is_some()
            || self.counters.executed < self.snap_executed_at + every.max(held / 2)
        {
            return;
        }
        let covered = self.executed_upto.clone();
        let mut extras = Vec::new();
        for (p, insts) in self.insts.iter().enumerate() {
            for (&index, i) in insts.range(covered[p] + 1..) {
                if i.executed {
                    extras.push(InstId { space: self.members[p], index });
                }
            }
        }
        let max_seq = self.max_exec_seq;
        self.snap_token += 1;
        let token = self.snap_token;
        self.snap_executed_at = self.counters.executed;
        self.snap_pending = Some(PendingSnapshot { token, covered, extras, max_seq });
        ctx.push(Action::TakeSnapshot { token });
    }

    /// The snapshot is ready: compact the durable log to it plus every instance it does not
    /// cover (in the background; `Persisted` with the token reports it done).
    pub(super) fn on_snapshot_taken(&mut self, ctx: &mut Ctx<'_>, token: u64, data: Bytes) {
        let Some(pending) = self.snap_pending.take_if(|p| p.token == token) else { return };
        let PendingSnapshot { covered, extras, max_seq, .. } = pending;
        let forgotten = self.pruned_upto.clone();
        let head = Record::Snapshot { covered: covered.clone(), extras, forgotten, max_seq, data: Bytes::new() };
        let mut records = vec![encode_with_payload(&head, data)];
        for (p, insts) in self.insts.iter().enumerate() {
            let space = self.members[p];
            for (&index, i) in insts {
                let id = InstId { space, index };
                records.push(vec![encode(&Self::record_of(id, i))]);
            }
        }
        self.snap_writing = Some((token, covered));
        ctx.push(compaction(token, records, true));
    }

    /// The compacted log is durable: instances the snapshot covers may be forgotten.
    pub(super) fn on_persisted(&mut self, token: u64) {
        if let Some((t, covered)) = self.snap_writing.take() {
            if t == token {
                self.snap_durable = covered;
                self.snapshots += 1;
            } else {
                self.snap_writing = Some((t, covered));
            }
        }
    }

    /// Drop from memory the instances every replica has committed and this one executed
    /// (and, with snapshots on, a durable snapshot covers).
    pub(super) fn forget(&mut self) {
        let peers: Vec<NodeId> = self.members.iter().copied().filter(|&m| m != self.id).collect();
        if !peers.iter().all(|p| self.peer_committed.contains_key(p)) {
            return;
        }
        for p in 0..self.n() {
            let mut floor = self.executed_upto[p];
            for peer in &peers {
                floor = floor.min(self.peer_committed[peer][p]);
            }
            if self.params.snapshot_every > 0 {
                floor = floor.min(self.snap_durable[p]);
            }
            if floor > self.pruned_upto[p] {
                let kept = self.insts[p].split_off(&(floor + 1));
                let gone = std::mem::replace(&mut self.insts[p], kept);
                if self.try_pre_accept {
                    for (index, i) in gone {
                        self.forgotten.record(p, index, &i.cmds, i.attrs.seq);
                    }
                }
                self.pruned_upto[p] = floor;
                let space = self.members[p];
                self.unsettled.retain(|id, _| id.space != space || id.index > floor);
                self.takeover_at.retain(|id, _| id.space != space || id.index > floor);
            }
        }
    }

    /// Recovery of a snapshot record: install it; the instances it covers are executed
    /// (their records follow it in the compacted log and are marked executed by
    /// [`Epaxos::covered_by_snapshot`]); the ones below `forgotten` are gone.
    pub(super) fn restore_snapshot(
        &mut self,
        ctx: &mut Ctx<'_>,
        covered: Vec<u64>,
        extras: Vec<InstId>,
        forgotten: Vec<u64>,
        max_seq: u64,
        data: Bytes,
    ) -> bool {
        let n = self.n();
        if covered.len() != n || forgotten.len() != n || forgotten.iter().zip(&covered).any(|(f, c)| f > c) {
            return false;
        }
        ctx.push(Action::InstallSnapshot { data });
        self.insts = vec![Default::default(); n];
        self.conflicts = super::conflicts::Conflicts::new(n);
        self.forgotten = super::conflicts::Forgotten::new(n);
        self.restored_unknown = forgotten.clone();
        self.restored_seq = max_seq;
        for p in 0..n {
            self.executed_upto[p] = forgotten[p];
            self.committed_upto[p] = forgotten[p];
            self.pruned_upto[p] = forgotten[p];
            self.snap_durable[p] = covered[p];
            self.known[p] = self.known[p].max(covered[p]);
            self.conflicts.record_wide(p, forgotten[p], max_seq);
        }
        self.snap_covered = Some((covered, extras.into_iter().collect()));
        self.max_exec_seq = self.max_exec_seq.max(max_seq);
        self.snapshots += 1;
        true
    }

    /// During recovery: whether the snapshot restored covers instance `id` (it is executed).
    pub(super) fn covered_by_snapshot(&self, id: InstId) -> bool {
        let Some((covered, extras)) = &self.snap_covered else { return false };
        self.pos_of(id.space).is_some_and(|p| id.index <= covered[p]) || extras.contains(&id)
    }
}
