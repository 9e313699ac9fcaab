//! Scenario tests of MultiPaxos on a tiny in-test network (FIFO delivery, explicit drops).
//! The randomized fault schedules and the linearizability check live in synod-sim; these
//! tests pin down specific paths of the protocol.

use super::*;
use synod_core::session::StateMachine;
use synod_core::{rng_from_seed, Op, OpResult, Rng};

struct Node {
    p: MultiPaxos,
    sm: StateMachine,
    durable: Vec<Bytes>,
    timers: BTreeMap<TimerId, Time>,
    rng: Rng,
    up: bool,
    applied: Vec<(Pos, Command)>,
}

type DropFilter = Box<dyn Fn(NodeId, NodeId, &Msg) -> bool>;

struct Net {
    nodes: Vec<Node>,
    now: Time,
    queue: std::collections::VecDeque<(NodeId, NodeId, Bytes)>,
    replies: Vec<Reply>,
    /// Drop messages matching this filter.
    drop: DropFilter,
    setup: Vec<Setup>,
}

fn params() -> ProtocolParams {
    ProtocolParams::default()
}

impl Net {
    fn new(n: u32) -> Net {
        let members: Vec<NodeId> = (1..=n).collect();
        let setup: Vec<Setup> =
            members.iter().map(|&id| Setup { id, members: members.clone(), params: params() }).collect();
        let mut net = Net {
            nodes: Vec::new(),
            now: Time::ZERO,
            queue: Default::default(),
            replies: Vec::new(),
            drop: Box::new(|_, _, _| false),
            setup,
        };
        for i in 0..n as usize {
            let p = MultiPaxos::new(&net.setup[i], Variant::default()).unwrap();
            net.nodes.push(Node {
                p,
                sm: StateMachine::new(),
                durable: Vec::new(),
                timers: BTreeMap::new(),
                rng: rng_from_seed(i as u64 + 1),
                up: true,
                applied: Vec::new(),
            });
            net.recover(i as NodeId + 1);
        }
        net
    }

    fn idx(id: NodeId) -> usize {
        id as usize - 1
    }

    fn run_actions(&mut self, id: NodeId, actions: Vec<Action>) {
        let peers: Vec<NodeId> = (1..=self.nodes.len() as NodeId).filter(|p| *p != id).collect();
        for a in actions {
            let node = &mut self.nodes[Self::idx(id)];
            match a {
                Action::Send { to, msg } => self.queue.push_back((id, to, msg)),
                Action::Broadcast { msg } => {
                    for p in &peers {
                        self.queue.push_back((id, *p, msg.clone()));
                    }
                }
                Action::Persist { records, .. } => node.durable.extend(records),
                Action::RewriteDurable { records, .. } => node.durable = records,
                Action::Reply { reply, .. } => self.replies.push(reply),
                Action::Apply { pos, cmd, reply } => {
                    let r = node.sm.apply(&cmd).result();
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
                Action::SetTimer { timer, after } => {
                    node.timers.insert(timer, self.now + after);
                }
                Action::CancelTimer { timer } => {
                    node.timers.remove(&timer);
                }
                Action::TakeSnapshot { .. } | Action::InstallSnapshot { .. } => {}
            }
        }
    }

    fn event(&mut self, id: NodeId, ev: Event) {
        let now = self.now;
        let node = &mut self.nodes[Self::idx(id)];
        if !node.up {
            return;
        }
        let mut actions = Vec::new();
        let mut ctx = Ctx::new(id, now, &mut node.rng, &mut actions);
        node.p.on_event(&mut ctx, ev);
        self.run_actions(id, actions);
    }

    fn recover(&mut self, id: NodeId) {
        let now = self.now;
        let node = &mut self.nodes[Self::idx(id)];
        let mut actions = Vec::new();
        let mut ctx = Ctx::new(id, now, &mut node.rng, &mut actions);
        let records = node.durable.clone();
        node.p.recover(&mut ctx, records);
        self.run_actions(id, actions);
    }

    /// Deliver queued messages until none is left.
    fn deliver_all(&mut self) {
        let mut budget = 1_000_000;
        while let Some((from, to, msg)) = self.queue.pop_front() {
            budget -= 1;
            assert!(budget > 0, "message storm");
            if !self.nodes[Self::idx(to)].up || !self.nodes[Self::idx(from)].up {
                continue;
            }
            if let Ok(m) = decode::<Msg>(&msg) {
                if (self.drop)(from, to, &m) {
                    continue;
                }
            }
            self.event(to, Event::Message { from, sent_at: self.now, msg });
        }
    }

    /// Advance virtual time to the next timer and fire it (after delivering everything).
    fn tick(&mut self) {
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

    fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            let before = self.now;
            self.tick();
            if self.now == before && self.queue.is_empty() {
                // Nothing scheduled: jump.
                if self.nodes.iter().all(|n| n.timers.is_empty() || !n.up) {
                    self.now = end;
                }
            }
        }
    }

    fn leader(&self) -> Option<NodeId> {
        let leaders: Vec<NodeId> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.up && n.p.role == Role::Leader)
            .map(|(i, _)| i as NodeId + 1)
            .collect();
        assert!(leaders.len() <= 1 || self.distinct_ballots(&leaders), "two leaders in one ballot: {leaders:?}");
        leaders.into_iter().max_by_key(|l| self.nodes[Self::idx(*l)].p.promised)
    }

    fn distinct_ballots(&self, ids: &[NodeId]) -> bool {
        let mut b: Vec<Ballot> = ids.iter().map(|i| self.nodes[Self::idx(*i)].p.promised).collect();
        b.sort();
        b.dedup();
        b.len() == ids.len()
    }

    fn request(&mut self, at: NodeId, client: u64, seq: u64, op: Op) {
        let cmd = Command { client, seq, acked_below: seq, op };
        self.event(at, Event::Request { client: ClientRef { node: at, conn: client }, cmd });
        self.deliver_all();
    }

    fn reply_for(&self, client: u64, seq: u64) -> Option<&ReplyBody> {
        self.replies.iter().rev().find(|r| r.client == client && r.seq == seq).map(|r| &r.body)
    }

    fn crash(&mut self, id: NodeId) {
        let n = &mut self.nodes[Self::idx(id)];
        n.up = false;
        n.timers.clear();
    }

    /// Restart with the durable records only (fresh protocol and state machine).
    fn restart(&mut self, id: NodeId) {
        let i = Self::idx(id);
        self.nodes[i].p = MultiPaxos::new(&self.setup[i], Variant::default()).unwrap();
        self.nodes[i].sm = StateMachine::new();
        self.nodes[i].applied.clear();
        self.nodes[i].up = true;
        self.recover(id);
    }
}

fn put(k: &str, v: &str) -> Op {
    Op::Put { key: Bytes::copy_from_slice(k.as_bytes()), value: Bytes::copy_from_slice(v.as_bytes()) }
}

fn get(k: &str) -> Op {
    Op::Get { key: Bytes::copy_from_slice(k.as_bytes()) }
}

fn value(v: &str) -> ReplyBody {
    ReplyBody::Done(OpResult::Value(Some(Bytes::copy_from_slice(v.as_bytes()))))
}

fn elect(net: &mut Net) -> NodeId {
    net.run_for(Duration::from_secs(2));
    net.leader().expect("a leader within 2 s")
}

#[test]
fn elects_one_leader_and_replicates() {
    let mut net = Net::new(3);
    let l = elect(&mut net);
    net.request(l, 7, 1, put("a", "1"));
    assert_eq!(net.reply_for(7, 1), Some(&ReplyBody::Done(OpResult::Done)));
    net.request(l, 7, 2, get("a"));
    assert_eq!(net.reply_for(7, 2), Some(&value("1")));
    // Followers learn the commit through heartbeats and execute the same commands.
    net.run_for(Duration::from_millis(200));
    for n in &net.nodes {
        assert_eq!(n.applied.len(), net.nodes[Net::idx(l)].applied.len());
        assert_eq!(n.sm.digest(), net.nodes[Net::idx(l)].sm.digest());
    }
    // A follower redirects clients to the leader.
    let f = (1..=3).find(|i| *i != l).unwrap();
    net.request(f, 8, 1, get("a"));
    assert_eq!(net.reply_for(8, 1), Some(&ReplyBody::NotLeader { leader: Some(l) }));
}

#[test]
fn single_node_cluster_serves_alone() {
    let mut net = Net::new(1);
    assert_eq!(net.leader(), Some(1));
    net.request(1, 1, 1, put("x", "y"));
    net.request(1, 1, 2, get("x"));
    assert_eq!(net.reply_for(1, 2), Some(&value("y")));
}

#[test]
fn leader_crash_elects_new_leader_and_keeps_values() {
    let mut net = Net::new(3);
    let l1 = elect(&mut net);
    for i in 1..=20 {
        net.request(l1, 1, i, put(&format!("k{i}"), &format!("v{i}")));
        assert_eq!(net.reply_for(1, i), Some(&ReplyBody::Done(OpResult::Done)));
    }
    net.crash(l1);
    let t0 = net.now;
    while net.leader().is_none() && net.now.since(t0) < Duration::from_secs(5) {
        net.tick();
    }
    let l2 = net.leader().expect("new leader");
    assert_ne!(l1, l2);
    // Within two election timeouts of the crash (timeouts are 300-600 ms).
    assert!(net.now.since(t0) <= Duration::from_millis(1200), "took {:?}", net.now.since(t0));
    for i in 1..=20 {
        net.request(l2, 2, i, get(&format!("k{i}")));
        assert_eq!(net.reply_for(2, i), Some(&value(&format!("v{i}"))), "k{i}");
    }
    // The old leader comes back from its disk and catches up.
    net.restart(l1);
    net.run_for(Duration::from_secs(1));
    let want = net.nodes[Net::idx(l2)].sm.digest();
    assert_eq!(net.nodes[Net::idx(l1)].sm.digest(), want);
    assert_eq!(net.nodes[Net::idx(l1)].p.log.executed_upto(), net.nodes[Net::idx(l2)].p.log.executed_upto());
    assert_eq!(net.leader(), Some(l2), "a restarted replica does not disturb a healthy leader");
}

#[test]
fn lost_accepts_are_resent_and_holes_filled_by_catchup() {
    let mut net = Net::new(3);
    let l = elect(&mut net);
    let f = (1..=3).find(|i| *i != l).unwrap();
    // Follower f misses every Accept for a while.
    net.drop = Box::new(move |_, to, m| to == f && matches!(m, Msg::Accept { .. }));
    for i in 1..=10 {
        net.request(l, 1, i, put("k", &format!("{i}")));
        assert_eq!(net.reply_for(1, i), Some(&ReplyBody::Done(OpResult::Done)));
    }
    assert_eq!(net.nodes[Net::idx(f)].p.log.executed_upto(), 0);
    net.drop = Box::new(|_, _, _| false);
    net.run_for(Duration::from_millis(500));
    assert_eq!(net.nodes[Net::idx(f)].p.log.executed_upto(), net.nodes[Net::idx(l)].p.log.executed_upto());
    assert_eq!(net.nodes[Net::idx(f)].sm.digest(), net.nodes[Net::idx(l)].sm.digest());
}

#[test]
fn whole_cluster_restart_recovers_acknowledged_writes() {
    let mut net = Net::new(3);
    let l = elect(&mut net);
    for i in 1..=30 {
        net.request(l, 1, i, put(&format!("k{}", i % 7), &format!("{i}")));
        assert_eq!(net.reply_for(1, i), Some(&ReplyBody::Done(OpResult::Done)));
    }
    let want = net.nodes[Net::idx(l)].sm.digest();
    for id in 1..=3 {
        net.crash(id);
    }
    net.queue.clear();
    for id in 1..=3 {
        net.restart(id);
    }
    let l2 = elect(&mut net);
    // Reading through the new leader forces every earlier slot to be re-chosen first.
    net.request(l2, 2, 1, get("k2"));
    assert_eq!(net.reply_for(2, 1), Some(&value("30")));
    net.run_for(Duration::from_millis(300));
    for n in &net.nodes {
        // Every replica rebuilt the pre-crash state (the read changed nothing).
        assert_eq!(n.sm.digest(), want);
    }
}

#[test]
fn retried_put_after_leader_change_is_applied_once() {
    let mut net = Net::new(3);
    let l1 = elect(&mut net);
    // The put reaches a quorum but the reply is lost with the leader.
    net.request(l1, 5, 1, put("c", "1"));
    net.request(l1, 6, 1, put("c", "2"));
    net.crash(l1);
    net.run_for(Duration::from_secs(2));
    let l2 = net.leader().unwrap();
    // Client 5 retries its (5,1) put: must not overwrite client 6's later write.
    net.request(l2, 5, 1, put("c", "1"));
    assert_eq!(net.reply_for(5, 1), Some(&ReplyBody::Done(OpResult::Done)));
    net.request(l2, 9, 1, get("c"));
    assert_eq!(net.reply_for(9, 1), Some(&value("2")));
}

#[test]
fn same_position_same_command_everywhere() {
    let mut net = Net::new(5);
    let mut leader = elect(&mut net);
    let mut seq = 0;
    for round in 0..4 {
        for _ in 0..5 {
            seq += 1;
            net.request(leader, 1, seq, put("k", &format!("{seq}")));
        }
        // Replace the leader a few times.
        net.crash(leader);
        net.run_for(Duration::from_secs(2));
        net.restart(leader);
        leader = net.leader().unwrap_or_else(|| panic!("leader after round {round}"));
    }
    net.run_for(Duration::from_secs(1));
    let mut by_pos: BTreeMap<Pos, Command> = BTreeMap::new();
    for n in &net.nodes {
        for (pos, cmd) in &n.applied {
            if let Some(prev) = by_pos.insert(*pos, cmd.clone()) {
                assert_eq!(&prev, cmd, "different commands at {pos}");
            }
        }
    }
    let d = net.nodes[0].sm.digest();
    assert!(net.nodes.iter().all(|n| n.sm.digest() == d));
}

#[test]
fn garbage_messages_and_unknown_senders_are_ignored() {
    let mut net = Net::new(3);
    let l = elect(&mut net);
    net.event(l, Event::Message { from: 2, sent_at: Time::ZERO, msg: Bytes::from_static(&[0xff, 0xff, 0x01]) });
    let bogus = encode(&Msg::Prepare { ballot: Ballot::new(1000, 99), from_slot: 1 });
    net.event(l, Event::Message { from: 99, sent_at: Time::ZERO, msg: bogus });
    assert_eq!(net.leader(), Some(l));
    assert!(net.nodes[0].p.describe_message(&[1, 2, 3]).contains("undecodable"));
}

#[test]
fn bad_options_and_membership_are_refused() {
    let mut s = Setup { id: 4, members: vec![1, 2, 3], params: params() };
    assert!(MultiPaxos::new(&s, Variant::default()).err().unwrap().contains("not among"));
    s.id = 1;
    s.params.options.insert("bogus".into(), "1".into());
    assert!(MultiPaxos::new(&s, Variant::default()).err().unwrap().contains("bogus"));
}

#[test]
fn unreadable_durable_state_makes_replica_passive() {
    let mut net = Net::new(3);
    net.nodes[0].durable.push(Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0xff]));
    net.restart(1);
    assert!(net.nodes[0].p.status().extra.contains_key("error"));
    net.request(1, 1, 1, get("a"));
    assert!(matches!(net.reply_for(1, 1), Some(ReplyBody::Rejected { .. })));
}
