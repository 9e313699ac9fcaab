//! The execution algorithm (§4.3.2): a committed command runs once its whole dependency graph
//! is committed; strongly connected components (Tarjan) run in inverse topological order,
//! commands inside one by increasing `seq` (ties by instance).

use super::commit::batches_interfere;
use super::msg::{InstId, Phase};
use super::Epaxos;
use std::collections::{HashMap, HashSet};

use synod_core::batch::Waiter;
use synod_core::{Ctx, Pos};

struct Frame {
    v: InstId,
    edges: Vec<InstId>,
    next: usize,
}

impl Epaxos {
    /// Execute everything that can be executed.
    ///
    /// An instance whose search stopped at an uncommitted instance `b` is not searched again
    /// until `b` is committed: every instance on its path to `b` has a path to `b`, so none
    /// of them can run before `b` commits, and the search would stop again.
    pub(super) fn execute(&mut self, ctx: &mut Ctx<'_>) {
        let starts: Vec<InstId> = self.to_execute.iter().copied().collect();
        for v in starts {
            if !self.to_execute.contains(&v) {
                continue;
            }
            if let Some(b) = self.stuck_on.get(&v) {
                if !self.is_committed(*b) {
                    continue;
                }
                self.stuck_on.remove(&v);
            }
            if let Err((blocked, visited)) = self.execute_from(ctx, v) {
                // Step 1: wait for the missing commit (and ask for it / take the instance
                // over when it takes too long: `on_tick`).
                self.saw(blocked, ctx.now);
                for w in visited {
                    self.stuck_on.insert(w, blocked);
                }
            }
        }
        self.propose_when_due(ctx);
        self.maybe_snapshot(ctx);
    }

    /// The dependencies of committed instance `v` that are not executed yet: every
    /// instance of replica k up to `deps[k]` that interferes with it (§4.5). Err names an
    /// instance that is not committed here (its command is not known to be final).
    fn edges(&self, v: InstId) -> Result<Vec<InstId>, InstId> {
        let inst = self.inst(v).expect("a committed instance");
        let mut out = Vec::new();
        for (p, &dep) in inst.attrs.deps.iter().enumerate() {
            let space = self.members[p];
            let mut j = self.executed_upto[p] + 1;
            while j <= dep {
                let w = InstId { space, index: j };
                j += 1;
                if w == v {
                    continue;
                }
                match self.insts[p].get(&w.index) {
                    Some(i) if i.executed => {}
                    Some(i) if i.phase == Phase::Committed => {
                        if batches_interfere(&inst.cmds, &i.cmds) {
                            out.push(w);
                        }
                    }
                    _ => return Err(w),
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
                if self.inst(w).is_some_and(|i| i.executed) {
                    continue;
                }
                match index.get(&w) {
                    None => match visit(self, w, &mut counter, &mut index, &mut stack, &mut on_stack) {
                        Ok(f) => calls.push(f),
                        Err(b) => {
                            let mut visited = stack.clone();
                            visited.push(w);
                            return fail(b, &visited);
                        }
                    },
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
            while self.insts[p].get(&(self.executed_upto[p] + 1)).is_some_and(|i| i.executed) {
                self.executed_upto[p] += 1;
            }
        }
    }
}
