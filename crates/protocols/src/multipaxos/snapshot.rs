//! 6. **Log trimming, snapshots and durable compaction.**
//!
//! The in-memory log is trimmed up to a bound: behind a periodic snapshot
//! (`TrimPolicy::Snapshot`, Raft-style) or up to a cluster bound the layer supplies
//! (`TrimPolicy::Bound`, HoliPaxos's GLE or quorum trim, §3.3), a bounded number of slots per
//! event. The durable image is compacted to snapshot + log suffix (in the background for our
//! own snapshots). A replica that needs trimmed slots fetches an on-demand snapshot in chunks,
//! preferably from a peer that is not the leader, and installs it.

use super::*;

impl MultiPaxos {
    /// Trim the in-memory log up to the layer's cluster bound (HoliPaxos: GLE /
    /// quorum-executed), never past what this replica executed nor past a snapshot being
    /// taken for compaction.
    pub(super) fn trim_log(&mut self) {
        if !matches!(self.trim, TrimPolicy::Bound(_)) {
            return;
        }
        let floor = match self.snapshot_pending {
            Some((_, index, true)) => index,
            _ => u64::MAX,
        };
        let upto = self.trim_bound.min(self.log.executed_upto()).min(floor);
        self.trim_to = self.trim_to.max(upto + 1);
    }

    /// Free the next [`TRIM_STEP`] trimmable slots. GLE jumps by a whole partition's worth
    /// of log when a silent node reports again (330k slots in a Fig. 9d run, whose replicas
    /// all logged 60-140 ms "message" events right after the heal): freeing them in one
    /// event would hold the node loop that long.
    pub(super) fn trim_step(&mut self) {
        let first = self.log.first_index();
        if first < self.trim_to {
            self.log.trim_before(self.trim_to.min(first + TRIM_STEP));
        }
    }

    /// Ask the driver for a snapshot (for compaction and/or a peer).
    pub(super) fn take_snapshot(&mut self, ctx: &mut Ctx<'_>, compact: bool) {
        if let Some(p) = self.snapshot_pending.as_mut() {
            p.2 |= compact;
            return;
        }
        let token = self.next_token;
        self.next_token += 1;
        self.snapshot_pending = Some((token, self.log.executed_upto(), compact));
        self.pending_members = self.member_infos();
        ctx.push(Action::TakeSnapshot { token });
    }

    /// Take a snapshot for compaction when the trim policy says one is due.
    pub(super) fn maybe_snapshot(&mut self, ctx: &mut Ctx<'_>) {
        let executed = self.log.executed_upto();
        let due = match self.trim {
            TrimPolicy::Snapshot => self.policy.due(self.durable_base, executed),
            _ => self.compact_every > 0 && executed >= self.durable_base + self.compact_every,
        };
        if due && self.snapshot_pending.is_none() {
            self.take_snapshot(ctx, true);
        }
    }

    /// The driver took the snapshot we asked for: serve the peers waiting for it, and compact
    /// the durable image (and, under `TrimPolicy::Snapshot`, the log) behind it.
    pub(super) fn on_snapshot_taken(&mut self, ctx: &mut Ctx<'_>, token: u64, data: Bytes) {
        let Some((t, index, compact)) = self.snapshot_pending else { return };
        if t != token {
            return;
        }
        self.snapshot_pending = None;
        self.snapshot = Some(LocalSnapshot { index, data, members: std::mem::take(&mut self.pending_members) });
        for to in std::mem::take(&mut self.snapshot_waiters) {
            self.send_snapshot_chunk(ctx, to, 0);
        }
        if compact && index > self.durable_base {
            if self.trim == TrimPolicy::Snapshot {
                // Freed TRIM_STEP slots per event like the other modes (`trim_step`).
                self.trim_to = self.trim_to.max(self.policy.trim_point(index));
            }
            // In the background: the image is what is durable already plus a snapshot of
            // executed slots, which a crash may lose without harm.
            self.rewrite_durable(ctx, true);
        }
    }

    /// Replace the durable records by: promise, snapshot, every held slot after it, commit
    /// marker. Atomic in both drivers; in the background (`CompactDurable`) for our own
    /// snapshots, synchronously for an installed one.
    pub(super) fn rewrite_durable(&mut self, ctx: &mut Ctx<'_>, background: bool) {
        let Some(s) = &self.snapshot else { return };
        let mut records = vec![
            Record::Promise(self.promised_other),
            Record::Promise(self.promised),
            Record::Led(self.led),
            Record::Snapshot { index: s.index, data: s.data.clone() },
            Record::Members(s.members.clone()),
        ];
        for (slot, e) in self.log.range(s.index + 1, self.log.last_index()) {
            records.push(match e.state {
                SlotState::InProgress if e.value.fast => {
                    Record::FastAccept { slot, ballot: e.value.ballot, value: e.value.value.clone() }
                }
                SlotState::InProgress => Record::Accept { slot, ballot: e.value.ballot, value: e.value.value.clone() },
                _ => Record::Chosen { slot, value: e.value.value.clone() },
            });
        }
        let c = self.log.committed_prefix();
        records.push(Record::CommitUpto(c));
        // The layer's durable state as it is now (what it garbage-collected stays behind).
        records.extend(self.layer.durable_records().into_iter().map(Record::Layer));
        self.persisted_commit = c;
        self.durable_base = s.index;
        // The snapshot's bytes go to the driver as they are, behind their encoded header.
        let records = records
            .iter()
            .map(|r| match r {
                Record::Snapshot { index, data } => {
                    encode_with_payload(&Record::Snapshot { index: *index, data: Bytes::new() }, data.clone())
                }
                r => vec![encode(r)],
            })
            .collect();
        ctx.push(compaction(0, records, background));
    }

    /// §3.3: fetch an on-demand snapshot, preferably from a peer that is not the leader.
    pub(super) fn request_snapshot(&mut self, ctx: &mut Ctx<'_>, preferred: Option<NodeId>) {
        if self.fetch.is_some() {
            return;
        }
        let from = preferred.unwrap_or_else(|| self.snapshot_source(0));
        self.fetch = Some(Fetch { from, progress_at: ctx.now, tries: 0 });
        ctx.send(from, &Msg::SnapshotReq { index: 0, offset: 0 });
        ctx.set_timer(TIMER_SNAPSHOT, self.params.heartbeat() * 4);
    }

    /// The `k`-th candidate snapshot source: the peers that are not the leader first.
    pub(super) fn snapshot_source(&self, k: u32) -> NodeId {
        let mut peers: Vec<NodeId> = self.members.iter().copied().filter(|m| *m != self.id).collect();
        peers.sort_by_key(|p| (Some(*p) == self.leader, *p));
        if peers.is_empty() {
            return self.id;
        }
        peers[k as usize % peers.len()]
    }

    /// A snapshot transfer stalled: start over with the next source.
    pub(super) fn on_snapshot_timer(&mut self, ctx: &mut Ctx<'_>) {
        let stalled = self.params.heartbeat() * 4;
        let Some(f) = self.fetch.as_mut() else { return };
        if ctx.now.since(f.progress_at) >= stalled {
            // No progress: start over with the next source.
            f.tries += 1;
            f.progress_at = ctx.now;
            let tries = f.tries;
            let from = self.snapshot_source(tries);
            if let Some(f) = self.fetch.as_mut() {
                f.from = from;
            }
            ctx.send(from, &Msg::SnapshotReq { index: 0, offset: 0 });
        }
        ctx.set_timer(TIMER_SNAPSHOT, stalled);
    }

    /// A peer asks for a snapshot: continue a transfer, start one from our current snapshot,
    /// or take a fresh one first.
    pub(super) fn on_snapshot_req(&mut self, ctx: &mut Ctx<'_>, from: NodeId, index: u64, offset: u64) {
        match &self.snapshot {
            Some(s) if offset > 0 && s.index == index => self.send_snapshot_chunk(ctx, from, offset),
            // A fresh transfer: our cached snapshot is good if it is current.
            Some(s) if s.index == self.log.executed_upto() => self.send_snapshot_chunk(ctx, from, 0),
            _ => {
                self.snapshot_waiters.insert(from);
                self.take_snapshot(ctx, false);
            }
        }
    }

    /// Send one chunk of our snapshot from `offset`.
    pub(super) fn send_snapshot_chunk(&self, ctx: &mut Ctx<'_>, to: NodeId, offset: u64) {
        let Some(s) = &self.snapshot else { return };
        let data = chunk(&s.data, offset, self.params.snapshot_chunk_bytes).to_vec();
        let members = s.members.clone();
        ctx.send(to, &Msg::SnapshotChunk { index: s.index, offset, total: s.data.len() as u64, data, members });
    }

    #[allow(clippy::too_many_arguments)] // the fields of Msg::SnapshotChunk
    pub(super) fn on_snapshot_chunk(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: NodeId,
        index: u64,
        offset: u64,
        total: u64,
        data: Vec<u8>,
        members: Vec<MemberInfo>,
    ) {
        let Some(f) = self.fetch.as_mut() else { return };
        if f.from != from || self.role == Role::Leader {
            return;
        }
        f.progress_at = ctx.now;
        if index <= self.log.executed_upto() {
            // This source is no further than we are: try the next one, and give up after
            // asking everyone (the next Trimmed answer starts over).
            f.tries += 1;
            let tries = f.tries;
            if tries as usize >= self.members.len() {
                self.fetch = None;
                ctx.cancel_timer(TIMER_SNAPSHOT);
                return;
            }
            let next = self.snapshot_source(tries);
            if let Some(f) = self.fetch.as_mut() {
                f.from = next;
            }
            ctx.send(next, &Msg::SnapshotReq { index: 0, offset: 0 });
            return;
        }
        let Some(full) = self.incoming.offer(index, offset, total, &data) else {
            let received = self.incoming.received(index);
            ctx.send(from, &Msg::SnapshotReq { index, offset: received });
            return;
        };
        self.fetch = None;
        ctx.cancel_timer(TIMER_SNAPSHOT);
        self.install_snapshot(ctx, index, Bytes::from(full), members);
    }

    /// Jump to a peer's snapshot covering every slot up to `index`.
    pub(super) fn install_snapshot(&mut self, ctx: &mut Ctx<'_>, index: u64, data: Bytes, members: Vec<MemberInfo>) {
        if index <= self.log.executed_upto() || !synod_core::session::StateMachine::is_valid_snapshot(&data) {
            return;
        }
        ctx.push(Action::InstallSnapshot { data: data.clone() });
        // Only followers fetch snapshots: no leader-side membership state to update.
        self.set_members(ctx, members.clone());
        self.log.skip_to(index + 1);
        self.waiting.retain(|slot, _| *slot > index);
        self.snapshot = Some(LocalSnapshot { index, data, members });
        self.snapshots_installed += 1;
        self.leader_commit = self.leader_commit.max(index);
        self.rewrite_durable(ctx, false);
        self.execute(ctx);
        if let Some(l) = self.leader.filter(|l| *l != self.id) {
            self.request_catchup(ctx, l);
        }
    }
}
