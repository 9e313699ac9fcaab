//! A tiny deterministic network for scenario tests of protocol cores: FIFO delivery, explicit
//! message filters, crash/restart from durable records. Randomized fault schedules and the
//! linearizability check live in synod-sim; these tests pin down specific protocol paths.

use crate::registry::Setup;
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;
use synod_core::protocol::LoadInfo;
use synod_core::session::StateMachine;
use synod_core::speculation::Speculation;
use synod_core::{
    rng_from_seed, Action, ClientRef, Command, Ctx, Event, NodeId, Op, OpResult, Pos, Protocol, ProtocolParams, Reply,
    ReplyBody, Rng, Role, Time, TimerId,
};

pub type Build = fn(&Setup) -> Result<Box<dyn Protocol>, String>;

/// Decides whether the message `from → to` with these bytes is dropped.
pub type DropFilter = Box<dyn Fn(NodeId, NodeId, &[u8]) -> bool>;

pub struct Node {
    pub p: Box<dyn Protocol>,
    pub sm: StateMachine,
    /// Provisional applies not yet confirmed (`Action::Speculate`).
    pub spec: Speculation,
    pub durable: Vec<Bytes>,
    timers: BTreeMap<TimerId, Time>,
    rng: Rng,
    pub up: bool,
    pub applied: Vec<(Pos, Command)>,
    /// What the driver reports about this replica's load (`Ctx::load`).
    pub load: LoadInfo,
    /// The configuration this replica last reported (`Action::MembershipChanged`);
    /// `Broadcast` goes to these members (every node until the first report).
    pub members: Option<Vec<NodeId>>,
}

pub struct Net {
    pub nodes: Vec<Node>,
    pub now: Time,
    pub queue: VecDeque<(NodeId, NodeId, Bytes)>,
    pub replies: Vec<Reply>,
    pub drop: DropFilter,
    setup: Vec<Setup>,
    build: Build,
    /// The order the replicas' state machines follow (see [`Net::use_order`]).
    order: synod_core::session::Order,
}

impl Net {
    pub fn new(n: u32, build: Build) -> Net {
        Self::with_params(n, build, ProtocolParams::default())
    }

    pub fn with_params(n: u32, build: Build, params: ProtocolParams) -> Net {
        let members: Vec<NodeId> = (1..=n).collect();
        let setup: Vec<Setup> =
            members.iter().map(|&id| Setup { id, members: members.clone(), params: params.clone() }).collect();
        let mut net = Net {
            nodes: Vec::new(),
            now: Time::ZERO,
            queue: VecDeque::new(),
            replies: Vec::new(),
            drop: Box::new(|_, _, _| false),
            setup,
            build,
            order: synod_core::session::Order::Total,
        };
        for i in 0..n as usize {
            let p = build(&net.setup[i]).expect("valid setup");
            net.nodes.push(Node {
                p,
                sm: StateMachine::new(),
                spec: Speculation::default(),
                durable: Vec::new(),
                timers: BTreeMap::new(),
                rng: rng_from_seed(i as u64 + 1),
                up: true,
                applied: Vec::new(),
                load: LoadInfo::default(),
                members: None,
            });
            net.recover(i as NodeId + 1);
        }
        net
    }

    /// Give every replica a state machine for `order` (a protocol's `ProtocolInfo::order`);
    /// call before any command is applied. Restarts keep it.
    pub fn use_order(&mut self, order: synod_core::session::Order) {
        self.order = order;
        for n in &mut self.nodes {
            n.sm = StateMachine::for_order(order);
        }
    }

    pub fn idx(id: NodeId) -> usize {
        id as usize - 1
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[Self::idx(id)]
    }

    fn run_actions(&mut self, id: NodeId, actions: Vec<Action>) {
        let peers: Vec<NodeId> = match &self.nodes[Self::idx(id)].members {
            Some(m) => m.iter().copied().filter(|p| *p != id).collect(),
            None => (1..=self.nodes.len() as NodeId).filter(|p| *p != id).collect(),
        };
        let mut followups = Vec::new();
        for a in actions {
            let node = &mut self.nodes[Self::idx(id)];
            match a {
                Action::Send { to, msg } => self.queue.push_back((id, to, msg)),
                Action::Broadcast { msg } => {
                    for p in &peers {
                        self.queue.push_back((id, *p, msg.clone()));
                    }
                }
                // Durable at once, reported after this event's actions (like the drivers).
                Action::Persist { records, token } => {
                    node.durable.extend(records);
                    followups.push(Event::Persisted { token });
                }
                Action::RewriteDurable { records, token } => {
                    node.durable = records;
                    followups.push(Event::Persisted { token });
                }
                Action::CompactDurable { records, token } => {
                    node.durable = records.into_iter().map(|parts| Bytes::from(parts.concat())).collect();
                    followups.push(Event::Persisted { token });
                }
                Action::Reply { reply, .. } | Action::ReplyNow { reply, .. } => self.replies.push(reply),
                Action::Apply { pos, cmd, reply } => {
                    let r = node.spec.apply(&mut node.sm, pos, &cmd);
                    node.applied.push((pos, cmd.clone()));
                    if reply.is_some() {
                        self.replies.push(Reply {
                            client: cmd.client,
                            seq: cmd.seq,
                            from: id,
                            body: ReplyBody::Done(r),
                        });
                    }
                }
                Action::Read { cmd, .. } => {
                    let r = node.spec.settled(&node.sm).read(&cmd.op);
                    self.replies.push(Reply { client: cmd.client, seq: cmd.seq, from: id, body: ReplyBody::Done(r) });
                }
                Action::Speculate { pos, cmd, reply } => {
                    let r = node.spec.speculate(&mut node.sm, pos, &cmd);
                    if let Some(s) = reply {
                        let body =
                            ReplyBody::Speculative { view: s.view, digest: s.digest, owd: s.owd, result: Some(r) };
                        self.replies.push(Reply { client: cmd.client, seq: cmd.seq, from: id, body });
                    }
                }
                Action::Rollback => {
                    node.spec.rollback(&mut node.sm);
                }
                Action::Ghost(_) => {}
                Action::SetTimer { timer, after } => {
                    node.timers.insert(timer, self.now + after);
                }
                Action::CancelTimer { timer } => {
                    node.timers.remove(&timer);
                }
                Action::TakeSnapshot { token } => {
                    let data = Bytes::from(node.spec.settled(&node.sm).snapshot());
                    followups.push(Event::SnapshotTaken { token, data });
                }
                Action::InstallSnapshot { data } => {
                    node.sm = StateMachine::restore(&data).expect("valid snapshot");
                    node.spec.reset();
                }
                Action::MembershipChanged { members } => {
                    node.members = Some(members.iter().map(|m| m.id).collect());
                }
            }
        }
        for ev in followups {
            self.event(id, ev);
        }
    }

    /// One event, a turn of its own.
    pub fn event(&mut self, id: NodeId, ev: Event) {
        self.turn(id, vec![ev]);
    }

    /// Events handed over back to back, then the end of the turn (`Protocol::flush`), as the
    /// runtime's node loop does with what it drained at once.
    pub fn turn(&mut self, id: NodeId, events: Vec<Event>) {
        let now = self.now;
        let node = &mut self.nodes[Self::idx(id)];
        if !node.up {
            return;
        }
        let mut actions = Vec::new();
        let mut ctx = Ctx::new(id, now, &mut node.rng, &mut actions);
        ctx.load = node.load;
        for ev in events {
            node.p.on_event(&mut ctx, ev);
        }
        node.p.flush(&mut ctx);
        self.run_actions(id, actions);
    }

    fn recover(&mut self, id: NodeId) {
        let now = self.now;
        let node = &mut self.nodes[Self::idx(id)];
        let mut actions = Vec::new();
        let mut ctx = Ctx::new(id, now, &mut node.rng, &mut actions);
        let records = node.durable.clone();
        node.p.recover(&mut ctx, records);
        node.p.flush(&mut ctx);
        self.run_actions(id, actions);
    }

    /// Deliver queued messages until none is left.
    pub fn deliver_all(&mut self) {
        let mut budget = 1_000_000;
        while let Some((from, to, msg)) = self.queue.pop_front() {
            budget -= 1;
            assert!(budget > 0, "message storm");
            // Like the runtime and the simulator: a send to a node that does not exist is
            // dropped (a malformed message may name one).
            if to == 0 || Self::idx(to) >= self.nodes.len() {
                continue;
            }
            if !self.nodes[Self::idx(to)].up || !self.nodes[Self::idx(from)].up || (self.drop)(from, to, &msg) {
                continue;
            }
            self.event(to, Event::Message { from, sent_at: self.now, msg });
        }
    }

    /// Deliver everything, then advance virtual time to the next timer and fire it.
    pub fn tick(&mut self) {
        self.deliver_all();
        let next = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.up)
            .flat_map(|(i, n)| n.timers.iter().map(move |(t, at)| (*at, i, *t)))
            .min();
        let Some((at, i, timer)) = next else { return };
        self.now = self.now.max(at);
        self.nodes[i].timers.remove(&timer);
        self.event(i as NodeId + 1, Event::Timer(timer));
        self.deliver_all();
    }

    pub fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            let before = self.now;
            self.tick();
            if self.now == before && self.queue.is_empty() && self.nodes.iter().all(|n| n.timers.is_empty() || !n.up) {
                self.now = end;
            }
        }
    }

    /// The live leader with the highest ballot/term (asserts no two live leaders share one).
    pub fn leader(&self) -> Option<NodeId> {
        let leaders: Vec<(NodeId, String)> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.up && n.p.status().role == Role::Leader)
            .map(|(i, n)| (i as NodeId + 1, n.p.status().ballot))
            .collect();
        let mut ballots: Vec<&String> = leaders.iter().map(|(_, b)| b).collect();
        ballots.sort();
        ballots.dedup();
        assert_eq!(ballots.len(), leaders.len(), "two leaders in one ballot/term: {leaders:?}");
        leaders.iter().max_by_key(|(_, b)| ballot_key(b)).map(|(id, _)| *id)
    }

    /// Run until a leader exists (at most `limit`); returns it and how long it took.
    pub fn await_leader(&mut self, limit: Duration) -> Option<(NodeId, Duration)> {
        let t0 = self.now;
        while self.leader().is_none() && self.now.since(t0) < limit {
            self.tick();
        }
        self.leader().map(|l| (l, self.now.since(t0)))
    }

    pub fn request(&mut self, at: NodeId, client: u64, seq: u64, op: Op) {
        let cmd = Command { client, seq, acked_below: seq, now_ms: 0, op };
        self.event(at, Event::Request { client: ClientRef { node: at, conn: client }, cmd, meta: Default::default() });
        self.deliver_all();
    }

    /// Requests `(client, seq, op)` arriving at `at` in one turn.
    pub fn requests_in_one_turn(&mut self, at: NodeId, reqs: Vec<(u64, u64, Op)>) {
        let events = reqs
            .into_iter()
            .map(|(client, seq, op)| {
                let cmd = Command { client, seq, acked_below: seq, now_ms: 0, op };
                Event::Request { client: ClientRef { node: at, conn: client }, cmd, meta: Default::default() }
            })
            .collect();
        self.turn(at, events);
        self.deliver_all();
    }

    pub fn reply_for(&self, client: u64, seq: u64) -> Option<&ReplyBody> {
        self.replies.iter().rev().find(|r| r.client == client && r.seq == seq).map(|r| &r.body)
    }

    pub fn crash(&mut self, id: NodeId) {
        let n = &mut self.nodes[Self::idx(id)];
        n.up = false;
        n.timers.clear();
    }

    /// Restart with the durable records only (fresh protocol and state machine).
    pub fn restart(&mut self, id: NodeId) {
        let i = Self::idx(id);
        self.nodes[i].p = (self.build)(&self.setup[i]).expect("valid setup");
        self.nodes[i].sm = StateMachine::for_order(self.order);
        self.nodes[i].spec.reset();
        self.nodes[i].applied.clear();
        self.nodes[i].up = true;
        self.recover(id);
    }

    /// Start a new replica `id` (the next index) that joins the cluster: it is built with
    /// the current members of `via` (not itself), so it starts as a learner.
    pub fn add_node(&mut self, via: NodeId) -> NodeId {
        let id = self.nodes.len() as NodeId + 1;
        let members: Vec<NodeId> = match &self.node(via).members {
            Some(m) => m.clone(),
            None => self.setup[Self::idx(via)].members.clone(),
        };
        let setup = Setup { id, members, params: self.setup[0].params.clone() };
        self.setup.push(setup);
        let p = (self.build)(&self.setup[Self::idx(id)]).expect("valid setup");
        self.nodes.push(Node {
            p,
            sm: StateMachine::for_order(self.order),
            spec: Speculation::default(),
            durable: Vec::new(),
            timers: BTreeMap::new(),
            rng: rng_from_seed(id as u64),
            up: true,
            applied: Vec::new(),
            load: LoadInfo::default(),
            members: None,
        });
        self.recover(id);
        id
    }

    /// Ask `at` for a membership change (admin request `id`); the reply lands in
    /// `replies` with `client == 0` and `seq == id`.
    pub fn reconfigure(&mut self, at: NodeId, id: u64, change: synod_core::MemberChange) {
        self.event(at, Event::Reconfigure { client: ClientRef { node: at, conn: 0 }, id, change });
        self.deliver_all();
    }

    /// Cut the links between `a` and `b` in both directions (on top of `drop`'s filter).
    pub fn cut(&mut self, links: &[(NodeId, NodeId)]) {
        let links: Vec<(NodeId, NodeId)> = links.to_vec();
        self.drop =
            Box::new(move |from, to, _| links.iter().any(|&(a, b)| (a, b) == (from, to) || (b, a) == (from, to)));
    }

    /// Restart with an empty disk (a replaced machine).
    pub fn wipe(&mut self, id: NodeId) {
        self.crash(id);
        self.nodes[Self::idx(id)].durable.clear();
        self.restart(id);
    }

    pub fn executed(&self, id: NodeId) -> u64 {
        self.node(id).p.status().execute_index
    }

    /// Every command applied at a position is the same on every replica.
    pub fn assert_agreement(&self) {
        let mut by_pos: BTreeMap<Pos, &Command> = BTreeMap::new();
        for n in &self.nodes {
            for (pos, cmd) in &n.applied {
                if let Some(prev) = by_pos.insert(*pos, cmd) {
                    assert_eq!(prev, cmd, "different commands at {pos}");
                }
            }
        }
    }
}

/// Orders "round.node" ballots and plain term numbers numerically.
fn ballot_key(b: &str) -> (u64, u64) {
    let mut it = b.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

pub fn put(k: &str, v: &str) -> Op {
    Op::Put { key: Bytes::copy_from_slice(k.as_bytes()), value: Bytes::copy_from_slice(v.as_bytes()) }
}

pub fn get(k: &str) -> Op {
    Op::Get { key: Bytes::copy_from_slice(k.as_bytes()) }
}

pub fn value(v: &str) -> ReplyBody {
    ReplyBody::Done(OpResult::Value(Some(Bytes::copy_from_slice(v.as_bytes()))))
}

pub const DONE: ReplyBody = ReplyBody::Done(OpResult::Done);
