//! The execution algorithm (§4.3.2): a committed command runs once its whole dependency graph
//! is committed; strongly connected components (Tarjan) run in inverse topological order,
//! commands inside one by increasing `seq` (ties by instance).
//!
//! Incremental: the search is never repeated over a part of the graph that is known to wait.
//! - A search starts only from a newly committed instance, or from an instance whose known
//!   blocker was executed (`candidates`), never from every unexecuted instance.
//! - A search that stops at an uncommitted instance `b` marks every instance left on its
//!   stack `stuck_on` b: each has a path to `b` (Tarjan's stack holds the path to the current
//!   instance and instances whose low link points to it), so none can run before `b` commits.
//!   When `b` commits it is searched alone; if that search stops at `c`, `b` is stuck on `c`
//!   and the instances stuck on `b` are too, through the chain (resolved with path
//!   compression), without looking at them. They are searched again only once an instance
//!   of their chain executes. A later search that reaches a stuck instance stops there.
//! - Edges come from an index of the committed unexecuted instances, not a scan of the
//!   log, and stop at a session barrier: a committed barrier that depends on every earlier
//!   instance of its sub-space reaches all of them (its own edges stop at a barrier below
//!   it, by induction), so an instance depending on it needs no edge below it
//!   (reachability, hence components and their order, is unchanged).

use super::commit::batches_interfere;
use super::msg::{InstId, Phase};
use super::Epaxos;
use std::collections::{HashMap, HashSet};

use synod_core::batch::Waiter;
use synod_core::session::is_barrier;
use synod_core::{Ctx, Pos};

struct Frame {
    v: InstId,
    edges: Vec<InstId>,
    next: usize,
}

/// Where an instance stands for execution.
#[derive(PartialEq, Eq)]
enum State {
    Uncommitted,
    Committed,
    Executed,
}

impl Epaxos {
    /// Instance `id` (of sub-space `p`) was committed here: search from it next time.
    pub(super) fn note_committed(&mut self, p: usize, id: InstId) {
        self.to_execute.insert(id);
        self.candidates.push(id);
        let i = &self.insts[p][&id.index];
        if i.cmds.iter().any(is_barrier) && i.attrs.deps.get(p).is_some_and(|&d| d + 1 >= id.index) {
            self.barrier_insts[p].insert(id.index);
        }
    }

    /// Execute everything that can be executed (module docs: only from the candidates).
    pub(super) fn execute(&mut self, ctx: &mut Ctx<'_>) {
        while let Some(v) = self.candidates.pop() {
            self.step();
            if !self.to_execute.contains(&v) || self.blocker(v).is_some() {
                continue;
            }
            if let Err((blocked, visited)) = self.execute_from(ctx, v) {
                // Step 1: wait for the missing commit (and ask for it / take the instance
                // over when it takes too long: `on_tick`).
                self.saw(blocked, ctx.now);
                for w in visited {
                    self.stick(w, blocked);
                }
            }
        }
        self.propose_when_due(ctx);
        self.maybe_snapshot(ctx);
    }

    fn step(&self) {
        self.exec_steps.set(self.exec_steps.get() + 1);
    }

    fn state(&self, id: InstId) -> State {
        let Some(p) = self.pos_of(id.space) else { return State::Executed };
        if id.index <= self.pruned_upto[p] {
            return State::Executed;
        }
        match self.insts[p].get(&id.index) {
            Some(i) if i.executed => State::Executed,
            Some(i) if i.phase == Phase::Committed => State::Committed,
            _ => State::Uncommitted,
        }
    }

    /// Committed instance `w` waits for uncommitted `b` (it has a path to it).
    fn stick(&mut self, w: InstId, b: InstId) {
        if self.stuck_on.insert(w, b) != Some(b) {
            self.waiters.entry(b).or_default().push(w);
        }
    }

    /// The uncommitted instance committed instance `v` is known to wait for: the end of its
    /// `stuck_on` chain, if that is still uncommitted (the chain is then shortened to it).
    /// None when nothing is known (never searched, or an instance of the chain executed).
    fn blocker(&mut self, v: InstId) -> Option<InstId> {
        let mut path = Vec::new();
        let mut at = v;
        let b = loop {
            let next = *self.stuck_on.get(&at)?;
            self.step();
            match self.state(next) {
                State::Uncommitted => break next,
                State::Executed => return None,
                State::Committed => {
                    path.push(at);
                    at = next;
                }
            }
        };
        for u in path {
            self.stick(u, b);
        }
        Some(b)
    }

    /// The dependencies of committed instance `v` that are not executed yet: every
    /// instance of replica k up to `deps[k]` that interferes with it (§4.5), down to the
    /// latest session barrier among them (module docs). Err names an instance that is not
    /// committed here (its command is not known to be final).
    fn edges(&self, v: InstId) -> Result<Vec<InstId>, InstId> {
        let inst = self.inst(v).expect("a committed instance");
        let mut out = Vec::new();
        for (p, &dep) in inst.attrs.deps.iter().enumerate() {
            let space = self.members[p];
            let floor = self.executed_upto[p] + 1;
            if dep < floor {
                continue;
            }
            // In v's own sub-space only a barrier below v: each barrier's own edges then stop
            // at a lower one, so by induction a barrier reaches every instance below it (a
            // barrier whose deps reach past itself must not lean on a later one).
            let top = if space == v.space { dep.min(v.index.saturating_sub(1)) } else { dep };
            let lo = if top < floor {
                floor
            } else {
                self.barrier_insts[p].range(floor..=top).next_back().map_or(floor, |&b| b)
            };
            if dep > self.committed_upto[p] {
                let first = self.committed_upto[p] + 1;
                if first >= lo {
                    return Err(InstId { space, index: first });
                }
                for index in lo..=dep {
                    self.step();
                    if self.insts[p].get(&index).is_none_or(|i| i.phase != Phase::Committed) {
                        return Err(InstId { space, index });
                    }
                }
            }
            for &w in self.to_execute.range(InstId { space, index: lo }..=InstId { space, index: dep }) {
                self.step();
                if w != v && batches_interfere(&inst.cmds, &self.insts[p][&w.index].cmds) {
                    out.push(w);
                }
            }
        }
        Ok(out)
    }

    /// Tarjan's algorithm from `start`, executing each component as it completes. On Err, the
    /// instance that blocks and the instances visited but not executed.
    fn execute_from(&mut self, ctx: &mut Ctx<'_>, start: InstId) -> Result<(), (InstId, Vec<InstId>)> {
        let mut counter = 0u64;
        let mut index: HashMap<InstId, (u64, u64)> = HashMap::new();
        let mut stack: Vec<InstId> = Vec::new();
        let mut on_stack: HashSet<InstId> = HashSet::new();
        let mut calls: Vec<Frame> = Vec::new();
        let visit = |this: &Self,
                     v: InstId,
                     counter: &mut u64,
                     index: &mut HashMap<InstId, (u64, u64)>,
                     stack: &mut Vec<InstId>,
                     on_stack: &mut HashSet<InstId>|
         -> Result<Frame, InstId> {
            let edges = this.edges(v)?;
            index.insert(v, (*counter, *counter));
            *counter += 1;
            stack.push(v);
            on_stack.insert(v);
            Ok(Frame { v, edges, next: 0 })
        };
        let fail = |blocked: InstId, stack: &Vec<InstId>| Err((blocked, stack.clone()));
        match visit(self, start, &mut counter, &mut index, &mut stack, &mut on_stack) {
            Ok(f) => calls.push(f),
            Err(b) => return fail(b, &vec![start]),
        }
        while let Some(top) = calls.last_mut() {
            if top.next < top.edges.len() {
                let w = top.edges[top.next];
                top.next += 1;
                let v = top.v;
                self.step();
                if self.state(w) == State::Executed {
                    continue;
                }
                match index.get(&w) {
                    None => {
                        // An instance already known to wait: so does everything on the stack.
                        if let Some(b) = self.blocker(w) {
                            return fail(b, &stack);
                        }
                        match visit(self, w, &mut counter, &mut index, &mut stack, &mut on_stack) {
                            Ok(f) => calls.push(f),
                            Err(b) => {
                                let mut visited = stack.clone();
                                visited.push(w);
                                return fail(b, &visited);
                            }
                        }
                    }
                    Some(&(wi, _)) if on_stack.contains(&w) => {
                        let e = index.get_mut(&v).expect("visited");
                        e.1 = e.1.min(wi);
                    }
                    Some(_) => {}
                }
            } else {
                let frame = calls.pop().expect("top");
                let (vi, vlow) = index[&frame.v];
                if vlow == vi {
                    let mut scc = Vec::new();
                    loop {
                        let w = stack.pop().expect("on the stack");
                        on_stack.remove(&w);
                        scc.push(w);
                        if w == frame.v {
                            break;
                        }
                    }
                    self.execute_component(ctx, scc);
                }
                if let Some(parent) = calls.last() {
                    let pv = parent.v;
                    let e = index.get_mut(&pv).expect("visited");
                    e.1 = e.1.min(vlow);
                }
            }
        }
        Ok(())
    }

    /// Step 4: execute one strongly connected component, by `seq` (ties by instance id).
    fn execute_component(&mut self, ctx: &mut Ctx<'_>, mut scc: Vec<InstId>) {
        scc.sort_by_key(|id| (self.inst(*id).map_or(0, |i| i.attrs.seq), *id));
        if scc.len() > 1 {
            self.counters.sccs_multi += 1;
            self.counters.scc_max = self.counters.scc_max.max(scc.len() as u64);
        }
        for id in scc {
            let p = self.pos_of(id.space).expect("member");
            let waiters =
                if id.space == self.id { self.proposed.remove(&id.index).unwrap_or_default() } else { Vec::new() };
            let inst = self.insts[p].get_mut(&id.index).expect("committed");
            if inst.executed {
                continue;
            }
            inst.executed = true;
            self.max_exec_seq = self.max_exec_seq.max(inst.attrs.seq);
            let cmds = inst.cmds.clone();
            for (k, cmd) in cmds.into_iter().enumerate() {
                let waiter = waiters
                    .iter()
                    .find(|w| w.cmd.client == cmd.client && w.cmd.seq == cmd.seq)
                    .and_then(Waiter::for_pending);
                let reply = Waiter::matching(Some(&waiter), &cmd);
                ctx.apply(Pos { space: id.space, index: id.index, sub: k as u32 }, cmd, reply);
                self.counters.executed += 1;
            }
            self.to_execute.remove(&id);
            self.stuck_on.remove(&id);
            if let Some(waiting) = self.waiters.remove(&id) {
                self.candidates.extend(waiting);
            }
            while self.insts[p].get(&(self.executed_upto[p] + 1)).is_some_and(|i| i.executed) {
                self.executed_upto[p] += 1;
            }
            while self.barrier_insts[p].first().is_some_and(|&b| b <= self.executed_upto[p]) {
                self.barrier_insts[p].pop_first();
            }
        }
    }
}
