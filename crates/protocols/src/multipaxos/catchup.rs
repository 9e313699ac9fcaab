//! 4. **Catch-up: hole filling for lagging or restarted followers.**
//!
//! A follower behind the leader's committed prefix asks for chosen values in chunks
//! (`CatchupReq` / `CatchupResp`), one request in flight at a time. A peer that trimmed the
//! requested slots answers `Trimmed`, pointing to a snapshot source (`snapshot.rs`).
//!
//! Layer hook here: `snapshot_source`.

use super::*;

impl MultiPaxos {
    /// Ask `leader` for the next chunk of chosen slots if we are behind its committed prefix
    /// (one request in flight at a time, none while a snapshot is being fetched).
    pub(super) fn request_catchup(&mut self, ctx: &mut Ctx<'_>, leader: NodeId) {
        let have = self.log.committed_prefix();
        if have >= self.leader_commit || ctx.now < self.catchup_pending_until || self.fetch.is_some() {
            return;
        }
        let to = self.leader_commit.min(have + self.params.catchup_chunk as u64);
        self.catchup_pending_until = ctx.now + self.params.heartbeat() * 2;
        ctx.send(leader, &Msg::CatchupReq { from: have + 1, to });
    }

    /// Serve chosen slots `[from, to]` (one chunk at most), or say they are trimmed here.
    pub(super) fn on_catchup_req(&mut self, ctx: &mut Ctx<'_>, from_node: NodeId, from: u64, to: u64) {
        if from < self.log.first_index() {
            // Trimmed here: only a snapshot can bring the requester past this point. Point
            // it to a peer the layer knows to be further (HoliPaxos: the most advanced other
            // follower of the leader's LE reports), or to this replica.
            let first = self.log.first_index();
            let source = self.layer.snapshot_source(self, from_node, first);
            ctx.send(from_node, &Msg::Trimmed { first, source: source.or(Some(self.id)) });
            return;
        }
        let to = to.min(from.saturating_add(self.params.catchup_chunk as u64 - 1));
        // Only executable values: a slot held in part is completed with `fill.rs`.
        let entries: Vec<(u64, Value)> = self
            .log
            .range(from, to)
            .filter(|(_, s)| s.state != SlotState::InProgress && self.codec.complete(&s.value.value))
            .map(|(slot, s)| (slot, s.value.value.clone()))
            .collect();
        if !entries.is_empty() {
            ctx.send(
                from_node,
                &Msg::CatchupResp { ballot: self.promised, entries, commit_upto: self.log.committed_prefix() },
            );
        }
    }

    /// Chosen values for us: record them (durable as `Chosen`), execute, ask for more.
    pub(super) fn on_catchup_resp(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: NodeId,
        entries: Vec<(u64, Value)>,
        commit_upto: u64,
    ) {
        let before = self.log.committed_prefix();
        let mut records = Vec::new();
        for (slot, value) in entries {
            // A slot committed here but held in part is replaced by the whole chosen value.
            let complete = |s: &synod_core::log::Slot<Entry>| self.codec.complete(&s.value.value);
            if self.log.is_committed(slot) && self.log.get(slot).is_none_or(complete) {
                continue;
            }
            if !self.codec.complete(&value) {
                continue;
            }
            // Chosen values: the ballot they are filed under no longer matters.
            self.log.set(slot, Entry { ballot: Ballot::ZERO, value: value.clone(), fast: false }, SlotState::Committed);
            records.push(Record::Chosen { slot, value });
        }
        if !records.is_empty() {
            self.persist(ctx, &records);
        }
        self.leader_commit = self.leader_commit.max(commit_upto);
        // Ask for the next chunk at once only if this one moved the committed prefix: a
        // response that filled nothing below a gap (e.g. the responder lacks the slot too)
        // waits for the pending timeout instead of ping-ponging at one instant.
        if self.log.committed_prefix() > before {
            self.catchup_pending_until = Time::ZERO;
        }
        self.execute(ctx);
        if self.role == Role::Follower {
            self.request_catchup(ctx, from);
        }
    }

    /// The slots we asked for (to catch up, or to complete a slot held in part: `fill.rs`)
    /// are trimmed at the peer: fetch a snapshot. A leader stopped at a slot it cannot
    /// complete any more steps down first (only followers install snapshots).
    pub(super) fn on_trimmed(&mut self, ctx: &mut Ctx<'_>, first: u64, source: Option<NodeId>) {
        if first <= self.log.exec_next() {
            return;
        }
        if self.role == Role::Leader {
            self.step_down(ctx, None);
        }
        if self.role == Role::Follower {
            self.request_snapshot(ctx, source.filter(|s| *s != self.id));
        }
    }
}
