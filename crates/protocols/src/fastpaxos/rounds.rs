//! Steps 2 and 4, **the fast round** (§3.1) and **collision recovery** (§3.3), on the
//! MultiPaxos core: the acceptor's fast vote, the leader's tally of fast 2b messages,
//! coordinated recovery in the leader's classic round, and recovery through a new round.
//!
//! The core calls in at its extension points for fast rounds: `fast_open` when phase 1
//! made it leader, `fast_close` when it campaigns or steps down, `fast_request` for a client
//! request, `on_fast_open`/`on_fast_accepted` for the two messages, `revote_losers` when a
//! classic 2a replaced one of our fast votes, and `fast_tick` on the leader's heartbeat.

use crate::layers::codec::{Pieces, Recovered};
use crate::multipaxos::{AcceptedSlot, Entry, Msg, MultiPaxos, Record, Value, ACCEPT_AHEAD_CHUNKS};
use std::collections::BTreeMap;
use std::time::Duration;
use synod_core::log::SlotState;
use synod_core::{Ballot, ClientRef, Command, Ctx, NodeId, Role, Time};

/// Commands an acceptor holds while no fast round is open to it (an election), voted once
/// one opens. Beyond this, clients retry.
const MAX_PENDING: usize = 4096;
/// Slots the leader scans per tick for holes (slots no vote reached it for).
const MAX_HOLE_SCAN: u64 = 1024;

/// Fast-round state of one replica.
pub(crate) struct Rounds {
    fast_quorum: fn(usize) -> usize,
    /// The fast round open to this replica: (the leader's ballot, first slot of "any").
    open: Option<(Ballot, u64)>,
    /// The next slot this acceptor may vote in (also past every slot it holds).
    next_free: u64,
    /// Leader: the fast votes of each undecided slot of the open round.
    tallies: BTreeMap<u64, Tally>,
    /// Commands received while no round was open to us.
    pending: Vec<Command>,
    counters: Counters,
}

struct Tally {
    votes: BTreeMap<NodeId, Value>,
    since: Time,
}

#[derive(Default)]
struct Counters {
    fast: u64,
    collisions: u64,
    recoveries: u64,
    reproposed: u64,
    new_rounds: u64,
}

impl Rounds {
    pub(crate) fn new(fast_quorum: fn(usize) -> usize) -> Rounds {
        Rounds {
            fast_quorum,
            open: None,
            next_free: 0,
            tallies: BTreeMap::new(),
            pending: Vec::new(),
            counters: Counters::default(),
        }
    }

    pub(crate) fn status(&self, extra: &mut BTreeMap<String, String>) {
        let c = &self.counters;
        extra.insert("fast_path".into(), c.fast.to_string());
        extra.insert("collisions".into(), c.collisions.to_string());
        extra.insert("recoveries".into(), c.recoveries.to_string());
        extra.insert("reproposed".into(), c.reproposed.to_string());
        extra.insert("view_changes".into(), c.new_rounds.to_string());
        if let Some((b, from)) = self.open {
            extra.insert("fast_round".into(), format!("{b} from {from}"));
        }
    }
}

impl MultiPaxos {
    fn rounds(&mut self) -> Option<&mut Rounds> {
        self.fast.as_deref_mut()
    }

    // ----- §3.1: the leader opens the fast round ------------------------------------------

    /// Phase 1 made us leader and the re-proposals left: phase 2a "any" for every slot
    /// from the next free one. Requests held while campaigning become our fast votes.
    pub(crate) fn fast_open(&mut self, ctx: &mut Ctx<'_>) {
        let (ballot, from_slot) = (self.promised, self.next_slot);
        let Some(f) = self.rounds() else { return };
        f.open = Some((ballot, from_slot));
        f.tallies.clear();
        ctx.broadcast(&Msg::FastOpen { ballot, from_slot });
        let mut held = std::mem::take(&mut f.pending);
        held.extend(self.queue.drain().into_iter().map(|p| p.cmd));
        self.vote_pending(ctx, held);
    }

    /// A new ballot (ours or another's) closes the fast round.
    pub(crate) fn fast_close(&mut self) {
        if let Some(f) = self.rounds() {
            f.open = None;
            f.tallies.clear();
        }
    }

    /// The leader's "any" at an acceptor: follow the leader, then vote what we held.
    pub(crate) fn on_fast_open(&mut self, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot, from_slot: u64) {
        if !self.follow(ctx, from, ballot) {
            return;
        }
        let Some(f) = self.rounds() else { return };
        if f.open == Some((ballot, from_slot)) {
            return;
        }
        f.open = Some((ballot, from_slot));
        let held = std::mem::take(&mut f.pending);
        self.vote_pending(ctx, held);
    }

    fn vote_pending(&mut self, ctx: &mut Ctx<'_>, cmds: Vec<Command>) {
        for cmd in cmds {
            self.fast_request(ctx, None, cmd);
        }
    }

    // ----- §3.1: an acceptor votes a client's value in the fast round ----------------------

    /// A client request (or an outvoted command, `client` None): vote it in our next free
    /// slot of the open fast round, persisted before the 2b leaves for the leader.
    pub(crate) fn fast_request(&mut self, ctx: &mut Ctx<'_>, _client: Option<ClientRef>, cmd: Command) {
        let (role, promised, leader, me) = (self.role, self.promised, self.leader, self.id);
        let last = self.log.last_index();
        let ahead = (self.params.catchup_chunk.max(1) as u64).saturating_mul(ACCEPT_AHEAD_CHUNKS);
        let limit = self.log.exec_next().saturating_add(ahead);
        let Some(f) = self.rounds() else { return };
        let open = f.open.filter(|(b, _)| {
            *b == promised
                && ((role == Role::Leader && b.node == me) || (role == Role::Follower && leader == Some(b.node)))
        });
        let Some((ballot, from_slot)) = open else {
            if f.pending.len() < MAX_PENDING {
                f.pending.push(cmd);
            }
            return;
        };
        let slot = from_slot.max(last + 1).max(f.next_free);
        if slot > limit {
            return; // far behind: catch up first (the client retries)
        }
        f.next_free = slot + 1;
        let value = Value::Cmds(vec![cmd]);
        self.log.set(slot, Entry { ballot, value: value.clone(), fast: true }, SlotState::InProgress);
        self.persist(ctx, &[Record::FastAccept { slot, ballot, value: value.clone() }]);
        if role == Role::Leader {
            self.fast_tally(ctx, me, slot, value);
        } else {
            ctx.send(ballot.node, &Msg::FastAccepted { ballot, slot, value });
        }
    }

    // ----- §3.1/§3.3: the leader tallies fast votes ----------------------------------------

    /// A fast 2b from an acceptor.
    pub(crate) fn on_fast_accepted(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: NodeId,
        ballot: Ballot,
        slot: u64,
        value: Value,
    ) {
        if self.role != Role::Leader || ballot != self.promised || !self.members.contains(&from) {
            return;
        }
        self.fast_tally(ctx, from, slot, value);
    }

    /// Whether the leader already decided `slot` in its ballot (announced, recovering, or
    /// committed).
    fn fast_decided(&self, slot: u64) -> bool {
        self.log.is_committed(slot)
            || self.in_flight.contains_key(&slot)
            || self.log.get(slot).is_some_and(|s| !s.value.fast && s.value.ballot == self.promised)
    }

    fn fast_tally(&mut self, ctx: &mut Ctx<'_>, from: NodeId, slot: u64, value: Value) {
        let decided = self.fast_decided(slot);
        let Some(f) = self.rounds() else { return };
        let Some((_, from_slot)) = f.open else { return };
        if slot < from_slot || decided {
            return;
        }
        let now = ctx.now;
        f.tallies.entry(slot).or_insert_with(|| Tally { votes: BTreeMap::new(), since: now }).votes.insert(from, value);
        self.fast_decide(ctx, slot, false);
    }

    /// Decide `slot` if its votes allow: a fast quorum for one value chooses it (§3.1); a
    /// collision — no value can reach a fast quorum any more — or a timeout, with votes from
    /// a classic quorum, starts coordinated recovery (§3.3).
    fn fast_decide(&mut self, ctx: &mut Ctx<'_>, slot: u64, timed_out: bool) {
        let (n, quorum) = (self.members.len(), self.quorum);
        let Some(f) = self.rounds() else { return };
        let fq = (f.fast_quorum)(n);
        let Some(t) = f.tallies.get(&slot) else { return };
        let mut counts: Vec<(&Value, usize)> = Vec::new();
        for v in t.votes.values() {
            match counts.iter_mut().find(|(x, _)| *x == v) {
                Some(c) => c.1 += 1,
                None => counts.push((v, 1)),
            }
        }
        let voters = t.votes.len();
        if let Some((v, _)) = counts.iter().find(|(_, c)| *c >= fq) {
            let v = (*v).clone();
            return self.fast_chosen(ctx, slot, v);
        }
        let best = counts.iter().map(|(_, c)| *c).max().unwrap_or(0);
        let collision = counts.len() > 1 && best + n.saturating_sub(voters) < fq;
        if (collision || timed_out) && voters >= quorum {
            self.coordinated_recovery(ctx, slot, collision);
        }
    }

    /// A fast quorum voted `value` in `slot`: it is chosen. Commit and execute it here (the
    /// leader answers its client), and announce it to the acceptors in our classic round.
    fn fast_chosen(&mut self, ctx: &mut Ctx<'_>, slot: u64, value: Value) {
        if let Some(f) = self.rounds() {
            f.tallies.remove(&slot);
            f.counters.fast += 1;
        }
        let ballot = self.promised;
        let outvoted = self.replace_own_vote(ctx, slot, ballot, &value);
        self.log.mark_committed(slot);
        let commit_upto = self.log.committed_prefix();
        ctx.broadcast(&Msg::Accept { ballot, slot, value: value.clone(), commit_upto });
        self.execute(ctx);
        if let Some(old) = outvoted {
            self.revote_losers(ctx, old, &value);
        }
    }

    /// Coordinated recovery (§3.3): the fast round's 2b messages of a classic quorum are the
    /// 1b messages of our next, classic, round for `slot`: pick by O4 and send its 2a.
    fn coordinated_recovery(&mut self, ctx: &mut Ctx<'_>, slot: u64, collision: bool) {
        let ballot = self.promised;
        let n = self.members.len();
        let Some(f) = self.rounds() else { return };
        let Some(t) = f.tallies.remove(&slot) else { return };
        f.counters.recoveries += 1;
        if collision {
            f.counters.collisions += 1;
        }
        let reports: Vec<AcceptedSlot> = t
            .votes
            .values()
            .map(|value| AcceptedSlot { slot, ballot, value: value.clone(), committed: false, fast: true })
            .collect();
        let value = match self.codec.recover_among(&reports, t.votes.len(), n) {
            Recovered::Chosen(v) | Recovered::Propose(v) => v,
            Recovered::Free | Recovered::Undecided => Value::noop(),
        };
        let outvoted = self.replace_own_vote(ctx, slot, ballot, &value);
        let quorum = self.quorum;
        self.track(ctx, slot, vec![None; value.len()], quorum);
        self.send_accepts(ctx, slot, Pieces::Same(value.clone()));
        if let Some(old) = outvoted {
            self.revote_losers(ctx, old, &value);
        }
        self.commit_ready(ctx);
    }

    /// Our own vote for `slot` becomes `value` in our classic round (persisted before the
    /// 2a leaves); returns the fast vote it replaced, if different.
    fn replace_own_vote(&mut self, ctx: &mut Ctx<'_>, slot: u64, ballot: Ballot, value: &Value) -> Option<Value> {
        let old = self.log.get(slot).filter(|s| s.value.fast).map(|s| s.value.value.clone());
        self.log.set(slot, Entry { ballot, value: value.clone(), fast: false }, SlotState::InProgress);
        self.persist(ctx, &[Record::Accept { slot, ballot, value: value.clone() }]);
        old.filter(|o| o != value)
    }

    /// A classic 2a replaced our fast vote `old` with `chosen`: vote the commands of `old`
    /// that lost again, in a later slot (exactly-once: the session table drops a repeat).
    pub(crate) fn revote_losers(&mut self, ctx: &mut Ctx<'_>, old: Value, chosen: &Value) {
        let Value::Cmds(old) = old else { return };
        let kept = |c: &Command| match chosen {
            Value::Cmds(b) => b.iter().any(|x| x.client == c.client && x.seq == c.seq),
            _ => false,
        };
        let losers: Vec<Command> = old.into_iter().filter(|c| !kept(c) && !self.chosen_elsewhere(c)).collect();
        if let Some(f) = self.rounds() {
            f.counters.reproposed += losers.len() as u64;
        }
        self.vote_pending(ctx, losers);
    }

    /// Whether `cmd` is already chosen in a slot we know committed. An outvoted command is
    /// often one that won another slot (two requests that reached the acceptors in different
    /// orders each win one of the two slots): voting it again would only take one more slot
    /// that its duplicate wins or loses, and push this acceptor's next free slot ahead of the
    /// others', so that their later votes land in different slots and collide. The scan covers
    /// the recent log only (where the slots a collision involves are).
    fn chosen_elsewhere(&self, cmd: &Command) -> bool {
        const WINDOW: u64 = 512;
        let last = self.log.last_index();
        cmd.client != 0
            && (last.saturating_sub(WINDOW).max(1)..=last).any(|slot| {
                self.log.is_committed(slot)
                    && self.log.get(slot).is_some_and(|s| match &s.value.value {
                        Value::Cmds(cs) => cs.iter().any(|c| c.client == cmd.client && c.seq == cmd.seq),
                        _ => false,
                    })
            })
    }

    // ----- the leader's tick: undecided slots ----------------------------------------------

    /// Recover slots that stayed undecided: with votes from a classic quorum, coordinated
    /// recovery after two heartbeats; otherwise (votes lost, acceptors down, holes) a new
    /// round with phase 1 after an election timeout (§3.3's basic recovery). Re-sends the
    /// "any" for acceptors that restarted. Returns true if it started a new round.
    pub(crate) fn fast_tick(&mut self, ctx: &mut Ctx<'_>) -> bool {
        if self.role != Role::Leader {
            return false;
        }
        let recover_after = self.params.heartbeat() * 2;
        let new_round_after = Duration::from_millis(self.params.election_timeout_max_ms);
        let ballot = self.promised;
        let lo = self.log.committed_prefix() + 1;
        let last = self.log.last_index();
        let Some(f) = self.rounds() else { return false };
        let Some((_, from_slot)) = f.open else { return false };
        ctx.broadcast(&Msg::FastOpen { ballot, from_slot });
        // Holes below the highest slot we know of age like undecided slots.
        let hi = f.tallies.keys().next_back().copied().unwrap_or(0).max(last);
        let lo = lo.max(from_slot);
        let holes: Vec<u64> = (lo..=hi.min(lo + MAX_HOLE_SCAN)).collect();
        for slot in holes {
            if !self.fast_decided(slot) {
                let now = ctx.now;
                if let Some(f) = self.rounds() {
                    f.tallies.entry(slot).or_insert(Tally { votes: BTreeMap::new(), since: now });
                }
            }
        }
        let now = ctx.now;
        let due: Vec<u64> = match self.rounds() {
            Some(f) => f.tallies.iter().filter(|(_, t)| now.since(t.since) >= recover_after).map(|(s, _)| *s).collect(),
            None => Vec::new(),
        };
        for slot in due {
            self.fast_decide(ctx, slot, true);
        }
        let stuck = self.rounds().is_some_and(|f| f.tallies.values().any(|t| now.since(t.since) >= new_round_after));
        if stuck {
            if let Some(f) = self.rounds() {
                f.counters.new_rounds += 1;
            }
            self.phase1(ctx, true);
            return true;
        }
        false
    }
}
