//! Recovery (§6): view change, Viewstamped-Replication style, and the new leader's log
//! rebuild.
//!
//! A follower that does not hear from the leader for an election timeout moves to the next
//! view (status VIEWCHANGE) and tells everyone; each replica of the new view sends its log,
//! sync-point and *last-normal-view* to the view's leader (`DoViewChange`). With f + 1 of
//! them (its own included), the leader rebuilds the log from the replicas whose
//! last-normal-view is the largest:
//! 1. the entries up to the largest sync-point among them, copied from that replica;
//! 2. every later entry present in ⌈f/2⌉ + 1 of them (what a fast-path super quorum may
//!    have committed: f + ⌈f/2⌉ + 1 replicas meet any f + 1 in ⌈f/2⌉ + 1), sorted by
//!    deadline;
//!
//! then distributes it (`StartView`) and is NORMAL again.
//!
//! Only the log after the commit-point moves (§7.3: "the new leader only needs to recover
//! … the requests from its commit-point onwards"): the log up to a replica's commit-point is
//! committed, the same on every replica, so a DoViewChange carries the entries after the
//! sender's commit-point — or after the new leader's, announced in its ViewChange, if that
//! is lower — and a StartView the entries after the receiver's. A view change then moves
//! the uncommitted suffix, not the log since the last checkpoint (which under load took
//! longer than the election timeout to send and handle, and views changed without end). Followers replace their logs; what
//! they held that the new log lacks goes to their late-buffer. Everything is persisted
//! before it is sent (the disk-based mode), so a restarted replica keeps its promises.

use super::msg::{Entry, LogId, Msg, Record, ReqId};
use super::{Dvc, Mode, Nezha};
use std::collections::{BTreeMap, HashMap, HashSet};
use synod_core::{Command, Ctx, NodeId, Reply, ReplyBody};

impl Nezha {
    /// Move to `view` (status VIEWCHANGE) and send this replica's state to its leader.
    pub(super) fn start_view_change(&mut self, ctx: &mut Ctx<'_>, view: u64) {
        if view <= self.view && self.mode == Mode::ViewChange {
            return;
        }
        self.counters.view_changes += 1;
        self.roll_back(ctx);
        // A deposed leader's log is not synced with anybody else's: its sync-point is
        // its whole log only as the leader of its last normal view, which it reports.
        self.view = view;
        self.mode = Mode::ViewChange;
        self.vc_started = ctx.now;
        self.dvcs.clear();
        self.leader_committed = None;
        self.peer_sync.clear();
        self.pending_mods.clear();
        self.leader_len = 0;
        self.election_timeout = ctx.random_between(
            std::time::Duration::from_millis(self.params.election_timeout_min_ms),
            std::time::Duration::from_millis(self.params.election_timeout_max_ms),
        );
        self.persist(ctx, vec![Record::View { view, last_normal: self.last_normal }]);
        ctx.broadcast(&Msg::ViewChange { view, committed: self.committed_point() });
        self.send_dvc(ctx);
    }

    /// Where this replica's DoViewChange starts: its commit-point, or the new leader's if
    /// that is lower (the leader needs the committed entries it lacks), never below the
    /// trim point.
    fn dvc_base(&self) -> u64 {
        let own = self.committed_point();
        self.base.max(own.min(self.leader_committed.unwrap_or(own)))
    }

    /// This replica's DoViewChange: its log after `dvc_base` (synced entries first, then the
    /// released ones), its sync-point and last-normal-view.
    fn own_dvc(&self) -> Dvc {
        let base = self.dvc_base();
        let mut log = self.log[(base - self.base) as usize..].to_vec();
        log.extend(self.unsynced.iter().map(|(id, cmd)| Entry { deadline: id.deadline, cmd: cmd.clone() }));
        Dvc { last_normal: self.last_normal, base, trim: self.base, sync_point: self.len(), commit: self.commit, log }
    }

    fn send_dvc(&mut self, ctx: &mut Ctx<'_>) {
        let leader = self.leader_of(self.view);
        let dvc = self.own_dvc();
        self.dvc_base_sent = dvc.base;
        if leader == self.id {
            self.dvcs.insert(self.id, dvc);
            self.try_finish_view_change(ctx);
        } else {
            let Dvc { last_normal, base, trim, sync_point, commit, log } = dvc;
            ctx.send(leader, &Msg::DoViewChange { view: self.view, last_normal, sync_point, commit, base, trim, log });
        }
    }

    pub(super) fn view_change_tick(&mut self, ctx: &mut Ctx<'_>) {
        // Messages may be lost: repeat the announcement, and the state every few ticks.
        ctx.broadcast(&Msg::ViewChange { view: self.view, committed: self.committed_point() });
        if self.ticks >= self.dvc_tick + 3 && self.leader_of(self.view) != self.id {
            self.dvc_tick = self.ticks;
            self.send_dvc(ctx);
        }
    }

    pub(super) fn on_view_change(&mut self, ctx: &mut Ctx<'_>, from: NodeId, view: u64, committed: u64) {
        if view > self.view {
            self.start_view_change(ctx, view);
        } else if view == self.view && self.mode == Mode::Normal && self.is_leader() {
            // The sender missed this view's start.
            self.send_start_view(ctx, from, Some(committed));
            return;
        }
        if view == self.view && self.mode == Mode::ViewChange && from == self.leader_of(view) && !self.is_leader() {
            // The new leader's commit-point: if it lacks committed entries this replica's
            // DoViewChange left out, send them now.
            self.leader_committed = Some(committed);
            if self.dvc_base() < self.dvc_base_sent {
                self.dvc_tick = self.ticks;
                self.send_dvc(ctx);
            }
        }
    }

    pub(super) fn on_do_view_change(&mut self, ctx: &mut Ctx<'_>, from: NodeId, view: u64, dvc: Dvc) {
        if view > self.view {
            self.start_view_change(ctx, view);
        }
        if view != self.view || self.leader_of(view) != self.id {
            return;
        }
        match self.mode {
            Mode::ViewChange => {
                self.dvcs.insert(from, dvc);
                self.try_finish_view_change(ctx);
            }
            Mode::Normal => self.send_start_view(ctx, from, Some(dvc.base)),
        }
    }

    /// With f + 1 DoViewChanges, rebuild the log (§6) and start the view.
    fn try_finish_view_change(&mut self, ctx: &mut Ctx<'_>) {
        if self.mode != Mode::ViewChange || self.dvcs.len() < self.f() + 1 || !self.dvcs.contains_key(&self.id) {
            return;
        }
        let Some(best) = best_dvc(&self.dvcs) else { return };
        // The rebuilt log starts at the chosen replica's base; this replica keeps its own log
        // up to there, which it must hold and know committed (its commit-point), or which
        // every replica synced (the chosen replica's trim point, §7.3's checkpoint). Else it
        // waits for the DoViewChange from its commit-point on (its ViewChange, repeated every
        // tick, asks for it).
        let from = best.base;
        if from > self.len() || (from > self.committed_point() && from > best.trim) {
            return;
        }
        // The committed entries up to there are no candidates for the rest of the log.
        let known: HashSet<LogId> =
            self.log[..(from.max(self.base) - self.base) as usize].iter().map(|e| e.id()).collect();
        let (base, log) = rebuild_log(&self.dvcs, self.f(), known);
        let commit = self.dvcs.values().map(|d| d.commit).max().unwrap_or(0).min(base + log.len() as u64);
        // What this replica held that the new log lacks is appended again below (the
        // leader's liveness duty for late requests, §5.4).
        let Some(leftovers) = self.install_log(ctx, base, log, commit) else { return };
        // Each follower gets the log after the base of its DoViewChange (committed there).
        let bases: HashMap<NodeId, u64> = self.dvcs.iter().map(|(&id, d)| (id, d.base)).collect();
        self.dvcs.clear();
        self.last_normal = self.view;
        self.mode = Mode::Normal;
        self.persist(ctx, vec![Record::View { view: self.view, last_normal: self.view }]);
        let peers: Vec<NodeId> = self.peers().collect();
        for p in peers {
            self.send_start_view(ctx, p, bases.get(&p).copied());
        }
        // The proxies waiting here (from before, as a follower) get the new view's answer:
        // the leader's reply of this view, which the followers' slow-replies to the
        // StartView complete (§5.4's slow path, without waiting for the proxy's retry).
        for pos in self.applied.max(self.base) + 1..=self.len() {
            self.leader_reply(pos);
        }
        self.speculate(ctx);
        let mut late = self.dom.drain_late();
        late.extend(leftovers);
        self.append_late(ctx, late);
        self.update_commit(ctx);
        self.execute(ctx);
    }

    /// The StartView for a replica whose log is committed up to `committed` (if known):
    /// this view's log after there (after the trim point at least).
    fn send_start_view(&self, ctx: &mut Ctx<'_>, to: NodeId, committed: Option<u64>) {
        let base = committed.map_or(self.base, |c| c.min(self.len()).max(self.base));
        let log = self.log[(base - self.base) as usize..].to_vec();
        ctx.send(to, &Msg::StartView { view: self.view, base, log, commit: self.commit });
    }

    pub(super) fn on_start_view(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: NodeId,
        view: u64,
        base: u64,
        log: Vec<Entry>,
        commit: u64,
    ) {
        if view < self.view || from != self.leader_of(view) || (view == self.view && self.mode == Mode::Normal) {
            return;
        }
        let commit = commit.min(base + log.len() as u64);
        let old_view = self.view;
        self.view = view;
        let Some(leftovers) = self.install_log(ctx, base, log, commit) else {
            self.view = old_view;
            return;
        };
        self.last_normal = view;
        self.mode = Mode::Normal;
        self.leader_contact = ctx.now;
        self.persist(ctx, vec![Record::View { view, last_normal: view }]);
        // The proxies waiting here learn of the new view (after the persists, per the
        // ordering contract): a slow-reply of this view for each of their requests in the
        // new log (synced here), and for each one the new log lacks a pointer to the new
        // leader: the proxy resubmits it at once (§5.5) instead of after its timeout.
        for i in self.applied.max(self.base) + 1..=self.len() {
            let cmd = &self.log[self.at(i)].cmd;
            if let Some((client, _)) = self.proxied.remove(&(cmd.client, cmd.seq)) {
                let body = ReplyBody::SlowReply { view };
                ctx.reply(client, Reply { client: cmd.client, seq: cmd.seq, from: self.id, body });
            }
        }
        for (d, cmd) in leftovers {
            if let Some((client, _)) = self.proxied.remove(&(cmd.client, cmd.seq)) {
                let body = ReplyBody::NotLeader { leader: Some(from) };
                ctx.reply(client, Reply { client: cmd.client, seq: cmd.seq, from: self.id, body });
            }
            self.dom.put_late(d, cmd);
        }
        ctx.send(from, &Msg::LogStatus { view, sync_point: self.len() });
        self.execute(ctx);
    }

    pub(super) fn on_need_view(&mut self, ctx: &mut Ctx<'_>, from: NodeId, view: u64, committed: u64) {
        if view == self.view && self.mode == Mode::Normal && self.is_leader() {
            self.send_start_view(ctx, from, Some(committed));
        }
    }

    /// Replace the log by a new view's log (the entries after `base`; this replica has the
    /// log up to `base`: those positions are committed and were synced everywhere), persisted
    /// as one record. Returns the requests this replica held (logged or released) that the
    /// new log lacks, or None if this replica lacks positions up to `base` (impossible
    /// while the trim bound holds; the view is then not joined).
    fn install_log(
        &mut self,
        ctx: &mut Ctx<'_>,
        base: u64,
        entries: Vec<Entry>,
        commit: u64,
    ) -> Option<Vec<(u64, Command)>> {
        if base > self.len() {
            return None;
        }
        self.roll_back(ctx);
        let mut log: Vec<Entry> =
            if base > self.base { self.log[..(base - self.base) as usize].to_vec() } else { Vec::new() };
        log.extend(entries.into_iter().skip(self.base.saturating_sub(base) as usize));
        let in_new: HashSet<LogId> = log.iter().map(|e| e.id()).collect();
        let in_new_req: HashSet<ReqId> = log.iter().map(|e| (e.cmd.client, e.cmd.seq)).collect();
        let mut leftovers = Vec::new();
        let old = std::mem::take(&mut self.log);
        for e in old.into_iter().skip(self.applied.saturating_sub(self.base) as usize) {
            if !in_new.contains(&e.id()) && !in_new_req.contains(&(e.cmd.client, e.cmd.seq)) {
                leftovers.push((e.deadline, e.cmd));
            }
        }
        for (id, cmd) in std::mem::take(&mut self.unsynced) {
            if !in_new_req.contains(&id.req()) {
                leftovers.push((id.deadline, cmd));
            }
        }
        self.unsynced_ids.clear();
        self.pending_mods.clear();
        self.peer_sync.clear();
        self.log = log;
        for e in &self.log {
            self.dom.note_released(&e.id(), &e.cmd);
        }
        self.reindex();
        self.commit = self.commit.max(commit);
        self.logged = self.len();
        self.leader_len = self.len();
        self.persist(ctx, vec![Record::Log { view: self.view, base: self.base, entries: self.log.clone() }]);
        Some(leftovers)
    }
}

/// The DoViewChange whose synced prefix the new log keeps: the longest among those of the
/// latest normal view (all synced prefixes of one view are prefixes of the view leader's
/// log).
pub(super) fn best_dvc(dvcs: &BTreeMap<NodeId, Dvc>) -> Option<&Dvc> {
    let latest = dvcs.values().map(|d| d.last_normal).max()?;
    dvcs.values().filter(|d| d.last_normal == latest).max_by_key(|d| d.sync_point)
}

/// The log rebuild of §6 over the DoViewChanges of f + 1 replicas: the entries after the
/// returned base (the base of [`best_dvc`]'s). `known`: log-ids of committed entries up to
/// that base, which are not candidates for the rest.
pub(super) fn rebuild_log(dvcs: &BTreeMap<NodeId, Dvc>, f: usize, known: HashSet<LogId>) -> (u64, Vec<Entry>) {
    let Some(best) = best_dvc(dvcs) else { return (0, Vec::new()) };
    let latest = best.last_normal;
    let qualified: Vec<&Dvc> = dvcs.values().filter(|d| d.last_normal == latest).collect();
    // The entries of a DoViewChange up to its sync-point, and after it.
    let split = |d: &Dvc| (d.sync_point.saturating_sub(d.base) as usize).min(d.log.len());
    // (1) The longest synced prefix.
    let mut log: Vec<Entry> = best.log[..split(best)].to_vec();
    let mut in_log = known;
    in_log.extend(log.iter().map(|e| e.id()));
    // (2) Later entries on ⌈f/2⌉ + 1 qualified replicas, by deadline.
    let need = f.div_ceil(2) + 1;
    let mut count: HashMap<LogId, (usize, &Entry)> = HashMap::new();
    for d in &qualified {
        let mut seen = HashSet::new();
        for e in &d.log[split(d)..] {
            let id = e.id();
            if !in_log.contains(&id) && seen.insert(id) {
                count.entry(id).or_insert((0, e)).0 += 1;
            }
        }
    }
    let mut rest: Vec<&Entry> = count.values().filter(|(c, _)| *c >= need).map(|(_, e)| *e).collect();
    rest.sort_by_key(|e| e.id());
    let mut reqs: HashSet<ReqId> = HashSet::new();
    for e in rest {
        if reqs.insert((e.cmd.client, e.cmd.seq)) {
            log.push(e.clone());
        }
    }
    (best.base, log)
}
