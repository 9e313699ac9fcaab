//! Normal operation: DOM release (§3), the fast path (§5.3, Fig. 4) and the slow path
//! (§5.4, Fig. 5).

use super::dom::Admit;
use super::hash::cmd_digest;
use super::msg::{Entry, LogId, Msg, Record};
use super::{Mode, Nezha, TIMER_RELEASE};
use std::time::Duration;
use synod_core::{ClientRef, Command, Ctx, NodeId, Reply, ReplyBody, Time};

impl Nezha {
    // ---------------------------------------------------------------------------------
    // Requests and DOM.
    // ---------------------------------------------------------------------------------

    /// A client request at this replica. The replica acts as the request's proxy (§4): it
    /// stamps the deadline — its clock plus the largest one-way-delay estimate to its peers
    /// (§3) — and multicasts it.
    pub(super) fn on_request(&mut self, ctx: &mut Ctx<'_>, client: ClientRef, cmd: Command) {
        self.remember_client(client, &cmd);
        let owd = self.owd.estimate_all(self.peers(), self.clock_margin(ctx));
        let deadline = ctx.now.as_nanos().saturating_add(owd);
        ctx.broadcast(&Msg::Request { deadline, cmd: cmd.clone() });
        self.receive(ctx, deadline, cmd);
    }

    /// A request a proxy multicast to every replica (§4, §5.2), with its deadline
    /// `sent_at + bound` on the proxy's clock. This replica answers the proxy itself: a
    /// fast-reply on release, a slow-reply once synced (a follower). Without quorum-check
    /// offloading, or without the leader's speculative execution, the leader answers the
    /// proxy at execution instead.
    pub(super) fn on_proxied(
        &mut self,
        ctx: &mut Ctx<'_>,
        client: ClientRef,
        mut cmd: Command,
        sent_at: Time,
        bound: u64,
    ) {
        let req = (cmd.client, cmd.seq);
        let deadline = sent_at.as_nanos().saturating_add(bound);
        // The command's time (`Command::now_ms`, stamped by each receiving host) becomes
        // the deadline, the same at every replica: the copies the proxy multicast are then
        // identical (a follower checks its copy against the leader's digest), and so is
        // every replica's execution of it.
        cmd.now_ms = deadline / 1_000_000;
        let fast = self.opts.offload && self.opts.speculate;
        // A retry of a request already in the uncommitted part of the leader's log: its
        // fast-reply went out before (or was lost); answer at execution.
        let uncommitted = self.index_of.get(&req).is_some_and(|&i| i > self.commit);
        if self.is_leader() && (!fast || uncommitted) {
            self.remember_client(client, &cmd);
        } else if self.opts.offload && self.proxied.len() < super::MAX_WAITING {
            let owd = ctx.now.as_nanos() as i64 - sent_at.as_nanos() as i64;
            self.proxied.insert(req, (client, owd));
        }
        self.receive(ctx, deadline, cmd);
    }

    /// A request arrives at this replica as a DOM receiver (§3, §5.1).
    pub(super) fn receive(&mut self, ctx: &mut Ctx<'_>, deadline: u64, cmd: Command) {
        let req = (cmd.client, cmd.seq);
        // A copy already waiting to be executed here (the original request, a duplicated
        // message or a retry) needs nothing more.
        if self.index_of.get(&req).is_some_and(|&i| i > self.commit) || self.unsynced_ids.contains_key(&req) {
            return;
        }
        // A deadline far beyond this clock comes from a badly skewed sender: hold it no
        // longer than the clamp D (not D plus the clock-error margin: with clocks seconds
        // apart that would hold each request for seconds, and every retry again).
        let deadline = deadline.min(ctx.now.as_nanos().saturating_add(self.owd_max()));
        let leading = self.is_leader() && self.mode == Mode::Normal;
        if leading && self.dom.is_late(&req) {
            // A retry of a request the leader kept in its late-buffer (from before a restart
            // or a view change): the leader's liveness duty (§5.4), taken up at once.
            self.pick_late(ctx);
            return;
        }
        match self.dom.admit(deadline, cmd) {
            Admit::Held | Admit::Early => {}
            Admit::Late => {
                self.counters.late += 1;
                if leading {
                    // §5.4 ③: the leader moves a late request's deadline to make it
                    // eligible for the early-buffer.
                    if let Some((_, cmd)) = self.dom.take(&req) {
                        self.counters.modified += 1;
                        let d = self.dom.eligible_deadline(&cmd, ctx.now.as_nanos());
                        self.dom.admit(d, cmd);
                    }
                }
            }
        }
        // Released at the end of the turn, with whatever else arrived in it.
        self.release_due = true;
    }

    /// Release what the early-buffer holds up to now (§3): the leader appends to its log,
    /// followers to the unsynced part of theirs.
    pub(super) fn release(&mut self, ctx: &mut Ctx<'_>) {
        // Without DOM (the ablation) a request is released as soon as it arrives.
        let now = if self.opts.dom { ctx.now } else { Time(u64::MAX) };
        let released = self.dom.release(now);
        for (id, _) in &released {
            self.counters.released += 1;
            self.counters.release_lag_us += ctx.now.as_nanos().saturating_sub(id.deadline) / 1_000;
        }
        if !released.is_empty() {
            if self.is_leader() && self.mode == Mode::Normal {
                let start = self.len() + 1;
                for (id, cmd) in released {
                    self.append(id, cmd);
                    self.leader_reply(self.len());
                }
                self.broadcast_mods(ctx, start);
            } else {
                let normal = self.mode == Mode::Normal;
                let mut replies = Vec::new();
                let mut records = Vec::with_capacity(released.len());
                for (id, cmd) in released {
                    self.hash.toggle(&id, &cmd);
                    if normal {
                        if let Some(&(client, owd)) = self.proxied.get(&id.req()) {
                            // Fig. 4 ④: a follower's fast-reply carries the hash of its log
                            // up to this entry.
                            let digest = self.hash.for_reply(&id, &cmd, self.opts.commutativity);
                            let body = ReplyBody::Speculative { view: self.view, digest, owd, result: None };
                            replies.push((client, Reply { client: cmd.client, seq: cmd.seq, from: self.id, body }));
                        }
                    }
                    records.push(Record::Released { entry: Entry { deadline: id.deadline, cmd: cmd.clone() } });
                    self.unsynced_ids.insert(id.req(), id.deadline);
                    self.unsynced.insert(id, cmd);
                }
                // Persisted first: a fast-reply vouches for the entry across a restart (the
                // ordering contract holds the replies until the records are durable).
                if !records.is_empty() {
                    self.persist(ctx, records);
                }
                for (client, reply) in replies {
                    ctx.reply(client, reply);
                }
                self.advance_sync(ctx);
            }
        }
        if let Some(d) = self.dom.next_deadline() {
            ctx.set_timer(TIMER_RELEASE, Time(d).since(ctx.now).max(Duration::from_micros(1)));
        }
    }

    // ---------------------------------------------------------------------------------
    // The leader.
    // ---------------------------------------------------------------------------------

    /// Append a released request to the leader's log (Fig. 4 ③/④).
    pub(super) fn append(&mut self, id: LogId, cmd: Command) {
        self.hash.toggle(&id, &cmd);
        self.log.push(Entry { deadline: id.deadline, cmd });
        self.index_of.insert(id.req(), self.len());
    }

    /// The leader's answer to the proxy waiting here for the entry at `pos`: its fast-reply
    /// (Fig. 4 ④), whose hash covers the log up to this entry and which leaves with the
    /// speculative execution's result; without quorum-check offloading or speculation, a
    /// `Done` at execution.
    pub(super) fn leader_reply(&mut self, pos: u64) {
        let e = &self.log[self.at(pos)];
        let req = (e.cmd.client, e.cmd.seq);
        let Some((client, owd)) = self.proxied.remove(&req) else { return };
        if !(self.opts.offload && self.opts.speculate) {
            let cmd = e.cmd.clone();
            self.remember_client(client, &cmd);
            return;
        }
        let digest = self.hash.for_reply(&e.id(), &e.cmd, self.opts.commutativity);
        self.fast_replies.insert(pos, synod_core::SpeculativeReply { client, view: self.view, digest, owd });
    }

    /// Persist the entries from `start` on, then broadcast their log-modification (§5.4
    /// ⑦; persisted first so a restarted leader never reuses a position a follower synced).
    pub(super) fn broadcast_mods(&mut self, ctx: &mut Ctx<'_>, start: u64) {
        let len = self.len();
        if start > len {
            return;
        }
        let records = (start..=len).map(|i| Record::Synced { index: i, entry: self.log[self.at(i)].clone() }).collect();
        self.logged = len;
        self.persist(ctx, records);
        self.speculate(ctx);
        // The log-modification carries the commit-point: no separate announcement needed.
        self.commit_due = false;
        let ids: Vec<(LogId, u64)> = self.log[self.at(start)..].iter().map(|e| (e.id(), cmd_digest(&e.cmd))).collect();
        for chunk_start in (0..ids.len()).step_by(self.params.catchup_chunk.max(1)) {
            let end = (chunk_start + self.params.catchup_chunk.max(1)).min(ids.len());
            let msg = Msg::LogMod {
                view: self.view,
                start: start + chunk_start as u64,
                ids: ids[chunk_start..end].to_vec(),
                commit: self.commit,
                stable: self.stable,
            };
            ctx.broadcast(&msg);
        }
        self.update_commit(ctx);
    }

    pub(super) fn leader_tick(&mut self, ctx: &mut Ctx<'_>) {
        // The heartbeat: an empty log-modification with the log's end and the commit-point.
        ctx.broadcast(&self.heartbeat());
        self.pick_late(ctx);
    }

    /// "The leader must pick it out of its late-buffer eventually for liveness" (§5.4):
    /// a leader in its normal view appends every request its late-buffer holds. A late
    /// arrival is picked at once (③ in `receive`); what a replica held before it became the
    /// leader is picked when the view starts; this catches what a restarted leader recovered
    /// there (a request whose log record it lost in the crash, before the fsync, and that no
    /// other replica was told of: every retry of it would otherwise wait in the buffer).
    pub(super) fn pick_late(&mut self, ctx: &mut Ctx<'_>) {
        if !self.is_leader() || self.mode != Mode::Normal || self.dom.late_len() == 0 {
            return;
        }
        let late = self.dom.drain_late();
        self.append_late(ctx, late);
    }

    /// Append requests from a late-buffer (or left over from a view change) with a
    /// deadline that makes them eligible (§5.4 ③), skipping those already waiting in the
    /// uncommitted part of the log, and broadcast their log-modification.
    pub(super) fn append_late(&mut self, ctx: &mut Ctx<'_>, late: Vec<(u64, Command)>) {
        let start = self.len() + 1;
        for (_, cmd) in late {
            let req = (cmd.client, cmd.seq);
            if self.index_of.get(&req).is_some_and(|&i| i > self.commit) {
                continue;
            }
            let d = self.dom.eligible_deadline(&cmd, ctx.now.as_nanos());
            let id = LogId::of(d, &cmd);
            self.dom.note_released(&id, &cmd);
            self.append(id, cmd);
            self.leader_reply(self.len());
        }
        self.broadcast_mods(ctx, start);
    }

    /// An empty log-modification: the log's end, the commit-point and the trim bound.
    pub(super) fn heartbeat(&self) -> Msg {
        Msg::LogMod {
            view: self.view,
            start: self.len() + 1,
            ids: Vec::new(),
            commit: self.commit,
            stable: self.stable,
        }
    }

    /// A follower's log-status (§5.2); with the leader's own log, f + 1 sync-points fix the
    /// commit-point (§5.4, "in the background").
    pub(super) fn on_log_status(&mut self, ctx: &mut Ctx<'_>, from: NodeId, view: u64, sync_point: u64) {
        if view > self.view {
            ctx.send(self.leader_of(view), &Msg::NeedView { view, committed: self.committed_point() });
            return;
        }
        if view < self.view || !self.is_leader() || self.mode != Mode::Normal {
            return;
        }
        let s = sync_point.min(self.len());
        let e = self.peer_sync.entry(from).or_insert(0);
        *e = (*e).max(s);
        self.update_commit(ctx);
    }

    /// The commit-point: the (f + 1)-th largest sync-point, the leader's own log included.
    /// The leader counts its whole log: a follower's sync-point covers only entries whose
    /// log-modification (or StartView) left the leader, i.e. after the leader persisted
    /// them; alone (n = 1) it counts what is reported durable.
    pub(super) fn update_commit(&mut self, ctx: &mut Ctx<'_>) {
        let own = if self.n() == 1 { self.durable } else { self.len() };
        let mut points: Vec<u64> = vec![own];
        points.extend(self.peers().map(|p| self.peer_sync.get(&p).copied().unwrap_or(0)));
        points.sort_unstable_by(|a, b| b.cmp(a));
        let quorum = if self.variant.small_quorum { self.f() } else { self.f() + 1 };
        let c = points[quorum.max(1) - 1];
        // Every replica has synced up to the smallest sync-point: nobody will need those
        // entries from another replica again.
        self.stable = self.stable.max(points.last().copied().unwrap_or(0).min(c.max(self.commit)));
        if c > self.commit {
            self.commit = c;
            self.execute(ctx);
            // Tell the followers at the end of this turn: they execute and answer their
            // clients.
            self.commit_due = true;
        }
    }

    /// A follower asks for entries it holds nowhere.
    pub(super) fn on_fetch(&mut self, ctx: &mut Ctx<'_>, from: NodeId, view: u64, index: u64) {
        if view != self.view || !self.is_leader() || self.mode != Mode::Normal || index <= self.base {
            return;
        }
        let len = self.len();
        if index > len {
            return;
        }
        let end = len.min(index + self.params.catchup_chunk.max(1) as u64 - 1);
        let entries = self.log[self.at(index)..=self.at(end)].to_vec();
        ctx.send(from, &Msg::Entries { view: self.view, start: index, entries, commit: self.commit });
    }

    // ---------------------------------------------------------------------------------
    // Followers.
    // ---------------------------------------------------------------------------------

    /// A message from the leader of `view`: false if it is not for this replica's view (a
    /// newer view it missed is asked for).
    fn check_leader(&mut self, ctx: &mut Ctx<'_>, from: NodeId, view: u64) -> bool {
        if view > self.view {
            ctx.send(from, &Msg::NeedView { view, committed: self.committed_point() });
            return false;
        }
        if view < self.view || self.mode != Mode::Normal || self.is_leader() || from != self.leader_of(view) {
            return false;
        }
        self.leader_contact = ctx.now;
        true
    }

    /// A log-modification; `commit` and `stable` are the leader's commit-point and trim
    /// bound.
    pub(super) fn on_log_mod(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: NodeId,
        view: u64,
        start: u64,
        ids: Vec<(LogId, u64)>,
        (commit, stable): (u64, u64),
    ) {
        if !self.check_leader(ctx, from, view) {
            return;
        }
        let synced = self.len();
        self.leader_len = self.leader_len.max(start.saturating_sub(1) + ids.len() as u64);
        for (k, id) in ids.into_iter().enumerate() {
            let i = start + k as u64;
            if i > synced {
                self.pending_mods.insert(i, id);
            }
        }
        self.commit = self.commit.max(commit);
        self.stable = self.stable.max(stable);
        self.advance_sync(ctx);
    }

    /// Make the log match the leader's log-modifications, in order (§5.4 ⑧/⑨): each
    /// request is taken from where this replica holds it (released, early- or late-buffer)
    /// if it is the leader's copy; otherwise it is fetched.
    pub(super) fn advance_sync(&mut self, ctx: &mut Ctx<'_>) {
        if self.is_leader() || self.mode != Mode::Normal {
            return;
        }
        loop {
            let i = self.len() + 1;
            let Some(&(id, digest)) = self.pending_mods.get(&i) else { break };
            let req = id.req();
            let found = match self.unsynced_ids.get(&req).copied() {
                Some(d) => {
                    let old = LogId { deadline: d, client: req.0, seq: req.1 };
                    let cmd = self.unsynced.remove(&old).expect("indexed");
                    self.unsynced_ids.remove(&req);
                    self.hash.toggle(&old, &cmd);
                    Some((d, cmd))
                }
                None => self.dom.take(&req),
            };
            match found {
                Some((d, cmd)) if cmd_digest(&cmd) == digest => {
                    if d == id.deadline {
                        self.counters.synced_in_place += 1;
                    } else {
                        self.counters.synced_moved += 1;
                    }
                    self.pending_mods.remove(&i);
                    self.push_synced(Entry { deadline: id.deadline, cmd });
                }
                Some((d, cmd)) => {
                    // Another copy of the request (a retry stamped elsewhere): keep it
                    // aside and fetch the leader's.
                    self.dom.put_late(d, cmd);
                    break;
                }
                None => break,
            }
        }
        let len = self.len();
        self.pending_mods.retain(|&i, _| i > len);
        if len > self.logged {
            self.prune_unsynced();
            let records = (self.logged + 1..=len)
                .map(|i| Record::Synced { index: i, entry: self.log[self.at(i)].clone() })
                .collect();
            let first = self.logged + 1;
            self.logged = len;
            self.persist(ctx, records);
            // The slow-reply and log-status of §5.4 ⑩ (after the persist, per the
            // ordering contract).
            for i in first..=len {
                let cmd = &self.log[self.at(i)].cmd;
                if let Some((client, _)) = self.proxied.remove(&(cmd.client, cmd.seq)) {
                    let body = ReplyBody::SlowReply { view: self.view };
                    ctx.reply(client, Reply { client: cmd.client, seq: cmd.seq, from: self.id, body });
                }
            }
            self.status_due = true;
        }
        self.execute(ctx);
        // Stopped short of the leader's log: a request this replica does not hold (or
        // holds in another copy), or a lost log-modification.
        if self.leader_len > len {
            self.fetch(ctx);
        }
    }

    fn fetch(&mut self, ctx: &mut Ctx<'_>) {
        let retry = self.params.heartbeat();
        if self.fetch_sent.is_some_and(|t| ctx.now.since(t) < retry) {
            return;
        }
        self.fetch_sent = Some(ctx.now);
        let from = self.len() + 1;
        ctx.send(self.leader_of(self.view), &Msg::Fetch { view: self.view, from });
    }

    fn push_synced(&mut self, entry: Entry) {
        self.hash.toggle(&entry.id(), &entry.cmd);
        self.dom.note_released(&entry.id(), &entry.cmd);
        self.log.push(entry);
        let e = self.log.last().expect("pushed");
        self.index_of.insert((e.cmd.client, e.cmd.seq), self.len());
    }

    /// Released requests ordered before the last synced entry can no longer be placed in
    /// deadline order: they go to the late-buffer, where a log-modification still finds
    /// them.
    ///
    /// With commutativity (§7.2) the leader's log is in deadline order per key only: a
    /// request on another key with an earlier deadline may still follow, and a fast-reply
    /// may have vouched for it, so released requests stay (in the view-change state too)
    /// until the leader's log places them.
    fn prune_unsynced(&mut self) {
        if self.opts.commutativity {
            return;
        }
        let Some(last) = self.log.last().map(|e| e.id()) else { return };
        let stale: Vec<LogId> = self.unsynced.range(..last).map(|(id, _)| *id).collect();
        for id in stale {
            if let Some(cmd) = self.unsynced.remove(&id) {
                self.unsynced_ids.remove(&id.req());
                self.hash.toggle(&id, &cmd);
                self.dom.put_late(id.deadline, cmd);
            }
        }
    }

    /// The leader's entries with their commands (the answer to a fetch).
    pub(super) fn on_entries(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: NodeId,
        view: u64,
        start: u64,
        entries: Vec<Entry>,
        commit: u64,
    ) {
        if !self.check_leader(ctx, from, view) {
            return;
        }
        self.fetch_sent = None;
        for (k, e) in entries.into_iter().enumerate() {
            let i = start + k as u64;
            if i == self.len() + 1 {
                let req = (e.cmd.client, e.cmd.seq);
                if let Some(d) = self.unsynced_ids.remove(&req) {
                    let old = LogId { deadline: d, client: req.0, seq: req.1 };
                    if let Some(cmd) = self.unsynced.remove(&old) {
                        self.hash.toggle(&old, &cmd);
                    }
                } else {
                    self.dom.take(&req);
                }
                self.counters.fetched += 1;
                self.push_synced(e);
                self.pending_mods.remove(&i);
            }
        }
        self.leader_len = self.leader_len.max(start.saturating_sub(1));
        self.commit = self.commit.max(commit);
        self.advance_sync(ctx);
    }

    pub(super) fn follower_tick(&mut self, ctx: &mut Ctx<'_>) {
        // Periodic log-status (§5.2), which also lets a restarted leader relearn the
        // sync-points; and a fetch if this replica is behind the leader's log.
        let len = self.len();
        ctx.send(self.leader_of(self.view), &Msg::LogStatus { view: self.view, sync_point: len });
        if self.leader_len > len {
            self.fetch(ctx);
        }
    }
}
