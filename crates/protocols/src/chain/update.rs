//! §2 / §3: update processing, repair after a configuration change, state transfer to a
//! node that rejoins at the tail, snapshots.
//!
//! Invariant (the paper's "Update Propagation Invariant", §3): for servers `i` before `j` in
//! the chain, `Hist_j ⊑ Hist_i` — a predecessor holds every update its successors hold. It
//! holds across configurations because a new chain keeps the order of the old one and only
//! appends at the tail, and a node appended there first replaces everything it holds
//! beyond its applied prefix with its predecessor's updates.

use super::*;

impl Chain {
    // ---------------------------------------------------------------------------------
    // §2 "Update Processing": the head sequences the update, logs it and forwards it.

    pub(super) fn on_update_request(&mut self, ctx: &mut Ctx<'_>, client: ClientRef, cmd: Command) {
        if !self.is_head() {
            ctx.answer(client, &cmd, ReplyBody::NotLeader { leader: self.cfg.head() });
            return;
        }
        if !self.synced {
            // An untrusted head (a rejoined node not yet reset by a predecessor) must not
            // sequence updates: its log may hold updates it sequenced as an earlier head.
            ctx.answer(client, &cmd, ReplyBody::Rejected { reason: "chain head: not in sync yet".into() });
            return;
        }
        if self.last - self.stable >= MAX_INFLIGHT {
            ctx.answer(client, &cmd, ReplyBody::Rejected { reason: "chain head: too many updates in flight".into() });
            return;
        }
        let seq = self.last + 1;
        self.log.insert(seq, cmd.clone());
        self.last = seq;
        // Persist before anything that depends on it leaves (the driver's contract).
        self.persist(ctx, vec![Record::Entry { seq, cmd }]);
        self.waiters.insert(seq, client);
        if self.variant.head_answers {
            // Mutant: the head answers before the tail has the update.
            self.apply_upto(ctx, seq);
        }
        if self.is_tail() {
            // A chain of one: the head is the tail; it applies the update once it is durable.
            self.apply_durable(ctx);
        } else {
            self.push_forward(ctx);
        }
    }

    /// Send the successor the updates it does not have yet, within the window.
    pub(super) fn push_forward(&mut self, ctx: &mut Ctx<'_>) {
        let Some(succ) = self.cfg.succ(self.me) else { return };
        if !self.succ_synced || !self.synced {
            return;
        }
        self.sent_upto = self.sent_upto.max(self.succ_have);
        while self.sent_upto < self.last && self.sent_upto - self.succ_have < WINDOW {
            let first = self.sent_upto + 1;
            if first <= self.snap_index {
                // The successor is behind our snapshot: it will ask again (Need) after the
                // retransmission timeout and get the snapshot.
                return;
            }
            let entries: Vec<Command> = self.log.range(first..).take(CHUNK).map(|(_, c)| c.clone()).collect();
            if entries.is_empty() {
                return;
            }
            self.sent_upto += entries.len() as u64;
            ctx.send(succ, &Msg::Forward { epoch: self.cfg.epoch, reset: None, upto: 0, first, entries });
        }
    }

    /// Updates from the predecessor: log them, forward them; the tail applies them.
    pub(super) fn on_forward(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: NodeId,
        reset: Option<(u64, u64)>,
        first: u64,
        entries: Vec<Command>,
    ) {
        if self.cfg.pred(self.me) != Some(from) {
            return;
        }
        if let Some((after, upto)) = reset {
            if !self.synced {
                // Repair (§3): our predecessor's history is authoritative past what we
                // applied; drop our unacknowledged suffix and take its.
                if after != self.stable || first != after + 1 {
                    return;
                }
                // Keep the updates that agree with the predecessor's; drop from the first
                // that differs (or that this chunk does not cover).
                let mut keep = after;
                for (i, cmd) in entries.iter().enumerate() {
                    let seq = first + i as u64;
                    if self.log.get(&seq) != Some(cmd) {
                        break;
                    }
                    keep = seq;
                }
                if self.last > keep {
                    // Until the predecessor's updates replace the dropped ones this node may
                    // lack committed updates (a crash may take the re-sent ones): untrusted,
                    // durably before the truncation, so it does not become head meanwhile.
                    self.set_trusted(ctx, false);
                    self.log.split_off(&(keep + 1));
                    self.last = keep;
                    self.forget_unsynced_after(keep);
                    self.persist(ctx, vec![Record::Truncate { after: keep }]);
                }
                self.synced = true;
                self.catchup_to = upto;
                self.repairs += 1;
            }
        }
        if !self.synced {
            return;
        }
        let mut records = Vec::new();
        for (i, cmd) in entries.into_iter().enumerate() {
            let seq = first + i as u64;
            if seq <= self.last {
                continue;
            }
            if seq != self.last + 1 {
                break;
            }
            self.log.insert(seq, cmd.clone());
            self.last = seq;
            records.push(Record::Entry { seq, cmd });
        }
        self.persist(ctx, records);
        self.maybe_trusted(ctx);
        if self.is_tail() {
            // §2: the tail's history is the state; everything it holds durably is processed.
            self.apply_durable(ctx);
        } else {
            self.push_forward(ctx);
        }
        let ack = Msg::Ack { epoch: self.cfg.epoch, stable: self.stable, have: self.last };
        ctx.send(from, &ack);
    }

    /// §3: an acknowledgement from the successor: the tail processed everything up to
    /// `stable`, so those updates leave our `Sent` list (they are applied here) and the
    /// acknowledgement goes on to our predecessor.
    pub(super) fn on_ack(&mut self, ctx: &mut Ctx<'_>, from: NodeId, stable: u64, have: u64) {
        if self.cfg.succ(self.me) != Some(from) {
            return;
        }
        if !self.succ_synced {
            // We restarted, the successor did not: it is in sync in this epoch (it acks only
            // then), so what it holds is a prefix of our log; carry on from there.
            self.succ_synced = true;
            self.succ_have = have.min(self.last);
            self.sent_upto = self.succ_have;
        }
        self.succ_have = self.succ_have.max(have.min(self.last));
        let upto = stable.min(self.last);
        if upto > self.stable {
            self.apply_upto(ctx, upto);
            if let Some(pred) = self.cfg.pred(self.me) {
                if self.synced {
                    ctx.send(pred, &Msg::Ack { epoch: self.cfg.epoch, stable: self.stable, have: self.last });
                }
            }
        }
        self.push_forward(ctx);
    }

    /// The tail: process every update it holds durably (§2: the tail's history is the
    /// state; the rest follows when the driver reports it durable, `on_persisted`).
    pub(super) fn apply_durable(&mut self, ctx: &mut Ctx<'_>) {
        self.apply_upto(ctx, self.last.min(self.durable));
    }

    /// Apply the updates up to `upto` (they are stable: the tail has processed them); the
    /// head answers the clients waiting for them.
    pub(super) fn apply_upto(&mut self, ctx: &mut Ctx<'_>, upto: u64) {
        if upto <= self.stable {
            return;
        }
        for (&seq, cmd) in self.log.range(self.stable + 1..=upto) {
            let reply = self.waiters.remove(&seq);
            ctx.apply(Pos::slot(seq, 0), cmd.clone(), reply);
        }
        self.stable = upto;
        // The stable point is an optimisation for restarts (re-apply without waiting for an
        // acknowledgement); written lazily, at most every few updates.
        if self.stable >= self.stable_persisted + 64 || self.is_tail() {
            self.stable_persisted = self.stable;
            self.persist(ctx, vec![Record::Stable { upto: self.stable }]);
        }
        self.maybe_snapshot(ctx);
    }

    // ---------------------------------------------------------------------------------
    // §3 repair: after a configuration change every node but the head asks its (possibly
    // new) predecessor for what it lacks; the predecessor answers with everything after the
    // node's applied prefix — its `Sent` list — or with its snapshot first when it has
    // trimmed that far (§3 "Extending a Chain": a new tail receives the state, then the
    // updates after it).

    /// The successor is (re)starting in this epoch: it applied up to `stable`.
    pub(super) fn on_need(&mut self, ctx: &mut Ctx<'_>, from: NodeId, stable: u64) {
        // Only a node holding every committed update brings a successor in sync: what it
        // sends (up to `upto`) is what makes the successor trusted.
        if self.cfg.succ(self.me) != Some(from) || !self.synced || !self.trusted || stable > self.last {
            return;
        }
        self.succ_synced = true;
        let epoch = self.cfg.epoch;
        let mut after = stable;
        if stable < self.snap_index {
            let Some(data) = self.snapshot.clone() else { return };
            self.transfers += 1;
            ctx.send(from, &Msg::Snapshot { epoch, index: self.snap_index, upto: self.last, data });
            after = self.snap_index;
        }
        self.succ_have = after;
        let entries: Vec<Command> = self.log.range(after + 1..).take(CHUNK).map(|(_, c)| c.clone()).collect();
        self.sent_upto = after + entries.len() as u64;
        let upto = self.last;
        ctx.send(from, &Msg::Forward { epoch, reset: Some(after), upto, first: after + 1, entries });
        self.push_forward(ctx);
    }

    /// State transfer: install the predecessor's snapshot (the node rejoins at the tail, or
    /// lagged behind the predecessor's compaction).
    pub(super) fn on_snapshot(&mut self, ctx: &mut Ctx<'_>, from: NodeId, index: u64, upto: u64, data: Bytes) {
        if self.cfg.pred(self.me) != Some(from) || self.synced || index <= self.stable {
            return;
        }
        ctx.push(Action::InstallSnapshot { data: data.clone() });
        self.log.clear();
        self.forget_unsynced_after(index);
        self.snap_index = index;
        self.stable = index;
        self.last = index;
        self.durable = index;
        self.stable_persisted = index;
        self.snapshot = Some(data);
        self.snap_req = None;
        // Synchronous: the acknowledgement below must not claim state a crash could lose.
        let token = self.next_token;
        self.next_token += 1;
        let image = self.durable_image();
        ctx.push(synod_core::protocol::compaction(token, image, false));
        self.synced = true;
        self.catchup_to = upto;
        self.transfers += 1;
        self.maybe_trusted(ctx);
        if self.is_tail() {
            self.apply_durable(ctx);
        }
        ctx.send(from, &Msg::Ack { epoch: self.cfg.epoch, stable: self.stable, have: self.last });
    }

    /// Every heartbeat: a node out of sync asks again; the predecessor goes back to what its
    /// successor holds when that made no progress since the last heartbeat (lost messages);
    /// the tail repeats its acknowledgement (lost acknowledgements).
    pub(super) fn repair_tick(&mut self, ctx: &mut Ctx<'_>) {
        if !self.cfg.contains(self.me) {
            return;
        }
        let epoch = self.cfg.epoch;
        if let Some(pred) = self.cfg.pred(self.me) {
            if !self.synced {
                ctx.send(pred, &Msg::Need { epoch, stable: self.stable });
            } else {
                ctx.send(pred, &Msg::Ack { epoch, stable: self.stable, have: self.last });
            }
        }
        if self.cfg.succ(self.me).is_some() && self.succ_synced && self.synced {
            if self.succ_have < self.sent_upto && self.succ_have == self.succ_have_at_tick {
                self.sent_upto = self.succ_have;
            }
            self.succ_have_at_tick = self.succ_have;
            self.push_forward(ctx);
        }
    }

    /// A new configuration is in effect here: reset the per-epoch state of the data path.
    pub(super) fn enter_epoch(&mut self, ctx: &mut Ctx<'_>) {
        self.synced = self.is_head() && self.trusted;
        self.succ_synced = false;
        self.succ_have = 0;
        self.sent_upto = 0;
        self.succ_have_at_tick = 0;
        if !self.is_head() {
            // Clients waiting here will retry at the new head (the session table answers a
            // retry of an update that did commit).
            let head = self.cfg.head();
            for (seq, client) in std::mem::take(&mut self.waiters) {
                if let Some(cmd) = self.log.get(&seq) {
                    ctx.answer(client, cmd, ReplyBody::NotLeader { leader: head });
                }
            }
        }
        if let Some(pred) = self.cfg.pred(self.me) {
            ctx.send(pred, &Msg::Need { epoch: self.cfg.epoch, stable: self.stable });
        } else if self.is_tail() {
            // A chain of one: a new tail processes everything it holds durably.
            self.apply_durable(ctx);
        }
    }

    /// A node brought in sync by its predecessor is trusted again (may become head) only
    /// once it holds everything the predecessor held then (`catchup_to`): that includes
    /// every committed update, and a snapshot or a first chunk alone does not (the rest may
    /// be lost on the way, and the predecessor may fail before re-sending it).
    fn maybe_trusted(&mut self, ctx: &mut Ctx<'_>) {
        if self.synced && !self.trusted && self.last >= self.catchup_to {
            self.set_trusted(ctx, true);
        }
    }

    pub(super) fn set_trusted(&mut self, ctx: &mut Ctx<'_>, trusted: bool) {
        if self.trusted != trusted {
            self.trusted = trusted;
            self.persist(ctx, vec![Record::Trusted { trusted }]);
        }
    }

    // ---------------------------------------------------------------------------------
    // Snapshots and compaction.

    fn maybe_snapshot(&mut self, ctx: &mut Ctx<'_>) {
        if self.snapshot_every == 0 || self.snap_req.is_some() || self.stable < self.snap_index + self.snapshot_every {
            return;
        }
        let token = self.next_token;
        self.next_token += 1;
        self.snap_req = Some((token, self.stable));
        ctx.push(Action::TakeSnapshot { token });
    }

    pub(super) fn on_snapshot_taken(&mut self, ctx: &mut Ctx<'_>, token: u64, data: Bytes) {
        let Some((t, index)) = self.snap_req else { return };
        if t != token {
            return;
        }
        self.snap_req = None;
        if index <= self.snap_index {
            return;
        }
        self.snap_index = index;
        self.snapshot = Some(data);
        self.log = self.log.split_off(&(index + 1));
        let token = self.next_token;
        self.next_token += 1;
        let image = self.durable_image();
        ctx.push(synod_core::protocol::compaction(token, image, true));
    }

    /// Everything durable, compacted: the snapshot, the configuration and acceptor state,
    /// the updates after the snapshot and the stable point.
    fn durable_image(&self) -> Vec<Vec<Bytes>> {
        let mut recs = Vec::new();
        if let Some(data) = &self.snapshot {
            recs.push(Record::Snapshot { index: self.snap_index, data: data.clone() });
        }
        recs.push(Record::Config { cfg: self.cfg.clone() });
        recs.push(Record::Promised { ballot: self.promised });
        if let Some((ballot, cfg)) = &self.accepted {
            recs.push(Record::Accepted { ballot: *ballot, cfg: cfg.clone() });
        }
        for (&seq, cmd) in &self.log {
            recs.push(Record::Entry { seq, cmd: cmd.clone() });
        }
        recs.push(Record::Stable { upto: self.stable });
        recs.push(Record::Trusted { trusted: self.trusted });
        recs.iter().map(|r| vec![synod_core::protocol::encode(r)]).collect()
    }
}
