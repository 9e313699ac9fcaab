//! Client sessions (exactly-once semantics) and the replicated state machine that combines
//! them with the KV store.
//!
//! Every command carries (client, seq). The state machine remembers, per client, the results
//! of requests whose reply may not have reached the client yet; a retry of such a request
//! (after a timeout or a leader change) gets the original result and is not applied again.
//! The client tells which results it no longer needs through `acked_below` (Raft thesis §6.3),
//! which keeps the table small even when a client pipelines requests.

use crate::kv::{Command, KvStore, OpResult};
use crate::protocol::Pos;
use imbl::OrdMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Most sessions kept; the least recently active session is evicted beyond this. Eviction
/// depends only on the sequence of applied commands, so every replica evicts the same ones —
/// under a total order. Under a partial order ([`Order::Partial`]) replicas apply
/// non-interfering commands in different orders, so eviction when a new session arrives
/// would pick different victims. There sessions are evicted only at a *session barrier*
/// ([`barrier`]), a command the protocol orders against every other command (EPaxos makes
/// it interfere with everything): every replica has applied the same commands when it
/// applies the barrier, so it holds the same sessions, and picks the same victims by the
/// time stamped on each session's latest command (see [`StateMachine::for_order`]).
pub const DEFAULT_MAX_SESSIONS: usize = 100_000;

/// The sequence number that marks a session barrier (client 0, [`crate::Op::Noop`]).
pub const BARRIER_SEQ: u64 = u64::MAX;

/// A session barrier: an internal command (no session, no effect on the keys) at which the
/// state machine evicts the least recently active sessions beyond its limit. A protocol with
/// a partial order proposes one now and then and orders it against every command.
pub fn barrier() -> Command {
    Command { client: 0, seq: BARRIER_SEQ, acked_below: 0, now_ms: 0, op: crate::Op::Noop }
}

/// Whether `cmd` is a session barrier ([`barrier`]).
pub fn is_barrier(cmd: &Command) -> bool {
    cmd.client == 0 && cmd.seq == BARRIER_SEQ && matches!(cmd.op, crate::Op::Noop)
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Session {
    /// Results of applied requests with seq >= acked_below.
    results: BTreeMap<u64, OpResult>,
    /// Everything below has been acknowledged by the client and forgotten.
    acked_below: u64,
    /// Highest seq ever applied.
    max_applied: u64,
    /// When the session was last active, for deterministic LRU eviction: the apply counter
    /// under a total order, the time stamped on its latest command under a partial order
    /// (a session's commands interfere, so they are applied in one order everywhere).
    last_active: u64,
}

/// The outcome of applying a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// Applied now.
    Fresh(OpResult),
    /// A retry of an applied request: the original result, not applied again.
    Duplicate(OpResult),
    /// A retry of a request whose result the client already acknowledged (or whose session
    /// was evicted): it cannot be answered and was not applied.
    Stale,
}

impl Applied {
    /// The result to send to the client.
    pub fn result(&self) -> OpResult {
        match self {
            Applied::Fresh(r) | Applied::Duplicate(r) => r.clone(),
            Applied::Stale => OpResult::Error("stale request: already answered or session expired".into()),
        }
    }
}

/// How the protocol orders commands, which decides what the state machine may depend on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Order {
    /// One sequence of commands, the same on every replica (MultiPaxos, Raft, Mencius).
    #[default]
    Total,
    /// Only interfering commands are ordered the same everywhere (EPaxos): non-interfering
    /// ones (different keys, different sessions) may run in different orders on different
    /// replicas. Then each command is run at its own stamped time, expiry is decided per key
    /// when a command touches the key (lazily), and sessions are evicted only at session
    /// barriers ([`barrier`]).
    Partial,
}

/// KV store + session table: the replicated state machine. Its snapshot is one postcard blob.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateMachine {
    kv: KvStore,
    /// Persistent map, like the KV store's, so snapshots clone in O(1).
    #[serde(deserialize_with = "crate::bounded_serde::ord_map")]
    sessions: OrdMap<u64, Session>,
    /// Commands applied (including duplicates and no-ops); a logical clock for eviction.
    applied: u64,
    /// The state machine's wall clock (ms): the highest time stamped on an applied command.
    /// Expiry is decided against it, so every replica decides the same.
    clock_ms: u64,
    max_sessions: usize,
    order: Order,
    /// Order-independent fingerprint of the positions applied (a wrapping sum of their
    /// hashes): two replicas that applied the same set of positions have the same value,
    /// whatever the order. The simulator compares states of replicas with equal fingerprints.
    positions: u64,
}

impl Default for StateMachine {
    fn default() -> Self {
        Self::new()
    }
}

impl StateMachine {
    pub fn new() -> Self {
        Self::with_max_sessions(DEFAULT_MAX_SESSIONS)
    }

    pub fn with_max_sessions(max_sessions: usize) -> Self {
        StateMachine {
            kv: KvStore::new(),
            sessions: OrdMap::new(),
            applied: 0,
            clock_ms: 0,
            max_sessions: max_sessions.max(1),
            order: Order::Total,
            positions: 0,
        }
    }

    /// A state machine for a protocol with the given [`Order`].
    pub fn for_order(order: Order) -> Self {
        StateMachine { order, ..Self::new() }
    }

    /// The same with at most `max_sessions` sessions kept (see [`DEFAULT_MAX_SESSIONS`]).
    pub fn max_sessions(self, max_sessions: usize) -> Self {
        StateMachine { max_sessions: max_sessions.max(1), ..self }
    }

    pub fn order(&self) -> Order {
        self.order
    }

    /// The fingerprint of the set of positions applied so far (see [`StateMachine::apply_at`]).
    pub fn positions_fingerprint(&self) -> u64 {
        self.positions
    }

    /// Apply the command committed at `pos` (what drivers call): [`StateMachine::apply`] plus
    /// the position's share of [`StateMachine::positions_fingerprint`].
    pub fn apply_at(&mut self, pos: Pos, cmd: &Command) -> Applied {
        let mut h = (pos.space as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ pos.index.rotate_left(17)
            ^ ((pos.sub as u64) << 48);
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^= h >> 33;
        self.positions = self.positions.wrapping_add(h);
        self.apply(cmd)
    }

    pub fn kv(&self) -> &KvStore {
        &self.kv
    }

    /// Number of commands applied so far.
    pub fn applied_count(&self) -> u64 {
        self.applied
    }

    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// Apply one committed command, with exactly-once semantics for session commands.
    /// Client 0 is "no session" (no-ops, internal commands): always applied.
    pub fn apply(&mut self, cmd: &Command) -> Applied {
        self.applied += 1;
        // The state machine's clock only moves forward: a command stamped by a replica whose
        // clock lags behind does not turn time back.
        self.clock_ms = self.clock_ms.max(cmd.now_ms);
        // Total order: every command runs at the state machine's clock (the same sequence of
        // clocks everywhere). Partial order: at its own time, deciding expiry only for the keys
        // it touches (commands on one key are ordered alike everywhere, so they decide alike).
        let (at, lazy) = match self.order {
            Order::Total => (self.clock_ms, false),
            Order::Partial if cmd.now_ms > 0 => (cmd.now_ms, true),
            Order::Partial => (self.clock_ms, true),
        };
        // Every key the command writes gets this stamp as its version (WATCH): unique per
        // command (a session's sequence numbers never repeat, duplicates are not re-applied)
        // and the same on every replica.
        let stamp = command_stamp(cmd.client, cmd.seq, cmd.now_ms);
        let run = |kv: &mut KvStore, op: &crate::kv::Op| kv.apply_stamped(op, at, lazy, stamp);
        if cmd.client == 0 {
            if is_barrier(cmd) {
                while self.sessions.len() > self.max_sessions {
                    self.evict_one(0);
                }
            }
            return Applied::Fresh(run(&mut self.kv, &cmd.op));
        }
        let now = match self.order {
            Order::Total => self.applied,
            Order::Partial => cmd.now_ms,
        };
        let is_new = !self.sessions.contains_key(&cmd.client);
        let s = self.sessions.entry(cmd.client).or_default();
        s.last_active = now;
        // Forget results the client acknowledged.
        if cmd.acked_below > s.acked_below {
            s.acked_below = cmd.acked_below;
            let keep = s.results.split_off(&cmd.acked_below);
            s.results = keep;
        }
        let outcome = if let Some(r) = s.results.get(&cmd.seq) {
            Applied::Duplicate(r.clone())
        } else if is_new && cmd.acked_below > 1 {
            // The client has had replies before, so its session existed and was evicted:
            // we cannot tell whether this request was applied.
            Applied::Stale
        } else if cmd.seq < s.acked_below || (cmd.seq <= s.max_applied && !s.results.contains_key(&cmd.seq)) {
            // Either acknowledged already, or applied and forgotten: never apply twice.
            Applied::Stale
        } else {
            let r = run(&mut self.kv, &cmd.op);
            s.results.insert(cmd.seq, r.clone());
            s.max_applied = s.max_applied.max(cmd.seq);
            Applied::Fresh(r)
        };
        if is_new && self.order == Order::Total && self.sessions.len() > self.max_sessions {
            self.evict_one(cmd.client);
        }
        outcome
    }

    fn evict_one(&mut self, keep: u64) {
        if let Some((&victim, _)) =
            self.sessions.iter().filter(|(id, _)| **id != keep).min_by_key(|(id, s)| (s.last_active, **id))
        {
            self.sessions.remove(&victim);
        }
    }

    /// Read-only query outside the log (used for lease/local reads): runs the operation
    /// against the current state without touching sessions.
    pub fn read(&self, op: &crate::kv::Op) -> OpResult {
        self.kv.read(op, self.clock_ms)
    }

    /// The state machine's clock (ms).
    pub fn clock_ms(&self) -> u64 {
        self.clock_ms
    }

    /// Serialize the whole state (KV + sessions) for a snapshot.
    pub fn snapshot(&self) -> Vec<u8> {
        // Sized up front: grown by doubling, a snapshot of a few MB costs several reallocs,
        // each a copy into freshly faulted-in pages (most of the snapshot thread's time in a
        // profile, docs/performance.md). Keys and values plus a few bytes of framing each;
        // sessions hold at most a reply each. A low estimate only means a realloc.
        let estimate = self.kv.size_bytes() + 16 * self.kv.len() + 1024 * self.sessions.len() + 64;
        postcard::to_extend(self, Vec::with_capacity(estimate)).expect("state machine serializes")
    }

    /// Replace the state with a snapshot produced by [`StateMachine::snapshot`].
    pub fn restore(data: &[u8]) -> Result<StateMachine, String> {
        postcard::from_bytes(data).map_err(|e| format!("corrupt state machine snapshot: {e}"))
    }

    /// Whether `data` is a snapshot [`StateMachine::restore`] accepts. A protocol checks a
    /// snapshot received from a peer before it acts on it (skips the slots it covers): a
    /// corrupt one would leave the replica past slots whose state it never got.
    pub fn is_valid_snapshot(data: &[u8]) -> bool {
        Self::restore(data).is_ok()
    }

    /// A digest of the replicated state (keys, values, expiries) for cross-replica comparison.
    pub fn digest(&self) -> u64 {
        self.kv.digest()
    }
}

/// A command's version stamp: a 64-bit mix of its identity, never 0 (0 = absent key).
/// The stamp a command gives the keys it writes (their WATCH version): unique per command, the
/// same on every replica. Public for checkers that replay a history (synod-sim).
pub fn command_stamp(client: u64, seq: u64, now_ms: u64) -> u64 {
    let mut h = client.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seq.rotate_left(29) ^ now_ms.rotate_left(47);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{Op, SetCond};
    use bytes::Bytes;

    fn put(client: u64, seq: u64, acked_below: u64, v: &str) -> Command {
        Command {
            client,
            seq,
            acked_below,
            now_ms: 0,
            op: Op::Put { key: Bytes::from_static(b"k"), value: Bytes::copy_from_slice(v.as_bytes()) },
        }
    }

    #[test]
    fn expiry_follows_the_clock_stamped_on_commands() {
        let mut sm = StateMachine::new();
        let set = Command {
            client: 1,
            seq: 1,
            acked_below: 1,
            now_ms: 1_000,
            op: Op::Set {
                key: Bytes::from_static(b"k"),
                value: Bytes::from_static(b"v"),
                cond: crate::kv::SetCond::Always,
                expire_at_ms: Some(1_500),
                keep_ttl: false,
                get: false,
            },
        };
        sm.apply(&set);
        let get = |seq: u64, now_ms: u64| Command {
            client: 1,
            seq,
            acked_below: seq,
            now_ms,
            op: Op::Get { key: Bytes::from_static(b"k") },
        };
        assert_eq!(sm.apply(&get(2, 1_400)).result(), OpResult::Value(Some(Bytes::from_static(b"v"))));
        // A replica with a lagging clock cannot turn the state machine's time back...
        assert_eq!(sm.apply(&get(3, 900)).result(), OpResult::Value(Some(Bytes::from_static(b"v"))));
        assert_eq!(sm.clock_ms(), 1_400);
        // ...and once a command stamped past the deadline applies, the key is gone everywhere.
        assert_eq!(sm.apply(&get(4, 1_500)).result(), OpResult::Value(None));
        assert_eq!(sm.apply(&get(5, 0)).result(), OpResult::Value(None));
    }

    #[test]
    fn retries_are_applied_once() {
        let mut sm = StateMachine::new();
        assert_eq!(sm.apply(&put(7, 1, 1, "a")), Applied::Fresh(OpResult::Done));
        sm.apply(&put(8, 1, 1, "b"));
        // Retry of (7,1) after (8,1) overwrote: must not re-apply "a".
        assert_eq!(sm.apply(&put(7, 1, 1, "a")), Applied::Duplicate(OpResult::Done));
        assert_eq!(sm.kv().get(b"k").unwrap(), &Bytes::from_static(b"b"));
    }

    #[test]
    fn pipelined_results_kept_until_acked() {
        let mut sm = StateMachine::new();
        sm.apply(&put(1, 1, 1, "a"));
        sm.apply(&put(1, 2, 1, "b"));
        sm.apply(&put(1, 3, 1, "c"));
        assert!(matches!(sm.apply(&put(1, 2, 1, "b")), Applied::Duplicate(_)));
        // Client acknowledges 1 and 2.
        sm.apply(&put(1, 4, 3, "d"));
        assert_eq!(sm.apply(&put(1, 2, 3, "b")), Applied::Stale);
        assert!(matches!(sm.apply(&put(1, 3, 3, "c")), Applied::Duplicate(_)));
        assert_eq!(sm.kv().get(b"k").unwrap(), &Bytes::from_static(b"d"));
    }

    #[test]
    fn eviction_is_deterministic_and_bounded() {
        let mut a = StateMachine::with_max_sessions(3);
        for c in 1..=10 {
            a.apply(&put(c, 1, 1, "x"));
        }
        assert_eq!(a.session_count(), 3);
        let mut b = StateMachine::with_max_sessions(3);
        for c in 1..=10 {
            b.apply(&put(c, 1, 1, "x"));
        }
        assert_eq!(a, b);
        // Session 1 was evicted: a later request of it (which has seen replies) is refused
        // rather than risk applying a retry twice.
        assert_eq!(a.apply(&put(1, 2, 2, "y")), Applied::Stale);
        assert_eq!(a.kv().get(b"k").unwrap(), &Bytes::from_static(b"x"));
    }

    #[test]
    fn snapshot_round_trip_includes_sessions() {
        let mut sm = StateMachine::new();
        sm.apply(&put(5, 1, 1, "v"));
        let snap = sm.snapshot();
        let mut r = StateMachine::restore(&snap).unwrap();
        assert_eq!(r, sm);
        assert!(matches!(r.apply(&put(5, 1, 1, "v")), Applied::Duplicate(_)));
        assert!(StateMachine::restore(&snap[..snap.len() / 2]).is_err());
    }

    fn at(client: u64, now_ms: u64, op: Op) -> Command {
        Command { client, seq: 1, acked_below: 1, now_ms, op }
    }

    #[test]
    fn under_a_partial_order_expiry_depends_only_on_the_commands_of_each_key() {
        let b = |s: &str| Bytes::copy_from_slice(s.as_bytes());
        // A sets a with a 100 ms TTL at t=1000; B reads b, stamped 5000 by a replica whose
        // clock runs ahead; C reads a at t=1050. B interferes with neither, so EPaxos may
        // apply [A, B, C] on one replica and [A, C, B] on another.
        let a =
            at(1, 1_000, Op::SetWithTtl { key: b("a"), value: b("1"), cond: SetCond::Always, ttl_ms: 100, get: false });
        let bb = at(2, 5_000, Op::Get { key: b("b") });
        let c = at(3, 1_050, Op::Get { key: b("a") });
        let run = |order: Order, cmds: [&Command; 3]| {
            let mut sm = StateMachine::for_order(order);
            let results: Vec<OpResult> = cmds.iter().map(|c| sm.apply(c).result()).collect();
            (results[2].clone(), sm.digest(), results)
        };
        // A total order runs C at the state machine's clock: which it is depends on B.
        let (c1, _, _) = run(Order::Total, [&a, &bb, &c]);
        let (_, _, r2) = run(Order::Total, [&a, &c, &bb]);
        assert_eq!(c1, OpResult::Value(None));
        assert_eq!(r2[1], OpResult::Value(Some(b("1"))));
        // A partial order runs each command at its own time and expires only what it touches.
        let (c1, d1, _) = run(Order::Partial, [&a, &bb, &c]);
        let (_, d2, r2) = run(Order::Partial, [&a, &c, &bb]);
        assert_eq!(c1, OpResult::Value(Some(b("1"))));
        assert_eq!(r2[1], OpResult::Value(Some(b("1"))));
        assert_eq!(d1, d2, "same state whatever the interleaving");
        // A later command on the key does see it expired, and removes it.
        let mut sm = StateMachine::for_order(Order::Partial);
        sm.apply(&a);
        assert_eq!(sm.apply(&at(4, 1_200, Op::Get { key: b("a") })).result(), OpResult::Value(None));
        assert_eq!(sm.kv().len(), 0);
    }

    #[test]
    fn the_positions_fingerprint_ignores_the_order_and_partial_order_keeps_every_session() {
        let mut x = StateMachine::for_order(Order::Partial);
        let mut y = StateMachine::for_order(Order::Partial);
        let pos = |space: u32, index: u64| Pos { space, index, sub: 0 };
        x.apply_at(pos(1, 1), &put(1, 1, 1, "a"));
        x.apply_at(pos(2, 1), &put(2, 1, 1, "b"));
        y.apply_at(pos(2, 1), &put(2, 1, 1, "b"));
        y.apply_at(pos(1, 1), &put(1, 1, 1, "a"));
        assert_eq!(x.positions_fingerprint(), y.positions_fingerprint());
        y.apply_at(pos(1, 2), &put(1, 2, 2, "c"));
        assert_ne!(x.positions_fingerprint(), y.positions_fingerprint());
        // No count-based eviction under a partial order (it would depend on the order).
        let mut p = StateMachine { max_sessions: 2, ..StateMachine::for_order(Order::Partial) };
        for c in 1..=5 {
            p.apply(&put(c, 1, 1, "x"));
        }
        assert_eq!(p.session_count(), 5);
    }

    #[test]
    fn under_a_partial_order_sessions_are_evicted_at_barriers_alike_whatever_the_interleaving() {
        // Sessions 1..=6 write their own keys (no two interfere), stamped 10, 20, ... ms.
        let cmd = |client: u64, seq: u64, acked_below: u64| Command {
            client,
            seq,
            acked_below,
            now_ms: 10 * client + seq,
            op: Op::Put { key: Bytes::from(format!("k{client}")), value: Bytes::from(format!("{client}.{seq}")) },
        };
        let before_x: Vec<Command> = (1..=6).map(|c| cmd(c, 1, 1)).collect();
        let before_y: Vec<Command> = [5, 3, 6, 1, 4, 2].iter().map(|&c| cmd(c, 1, 1)).collect();
        // After the barrier: every session's next request (its first reply acknowledged) and
        // a late retry of session 2's first request, sessions interleaved differently on the
        // two replicas (one session's own commands keep their order: they interfere).
        let mut after_x: Vec<Command> = (1..=6).map(|c| cmd(c, 2, 2)).collect();
        after_x.push(cmd(2, 1, 1));
        let after_y: Vec<Command> = [(6, 2, 2), (5, 2, 2), (4, 2, 2), (3, 2, 2), (2, 2, 2), (2, 1, 1), (1, 2, 2)]
            .map(|(c, s, a)| cmd(c, s, a))
            .to_vec();
        let run = |before: &[Command], after: &[Command]| {
            let mut sm = StateMachine { max_sessions: 3, ..StateMachine::for_order(Order::Partial) };
            let mut replies = BTreeMap::new();
            for c in before {
                replies.insert((c.client, c.seq, c.acked_below), sm.apply(c));
            }
            // Above the limit, but nothing is evicted before the barrier.
            assert_eq!(sm.session_count(), 6);
            assert!(is_barrier(&barrier()) && !is_barrier(&Command::noop()));
            sm.apply(&barrier());
            assert_eq!(sm.session_count(), 3, "the barrier evicts down to the limit");
            for c in after {
                replies.insert((c.client, c.seq, c.acked_below), sm.apply(c));
            }
            (sm, replies)
        };
        let (x, rx) = run(&before_x, &after_x);
        let (y, ry) = run(&before_y, &after_y);
        assert_eq!(rx, ry, "every reply and dedup decision agrees");
        assert_eq!(x.digest(), y.digest());
        assert_eq!(x, y, "same keys, sessions and clock");
        // The victims are the sessions whose latest command was stamped earliest (1, 2, 3):
        // their next requests cannot be answered safely, the others run.
        for c in 1..=3 {
            assert_eq!(rx[&(c, 2, 2)], Applied::Stale, "session {c} was evicted");
        }
        for c in 4..=6 {
            assert_eq!(rx[&(c, 2, 2)], Applied::Fresh(OpResult::Done), "session {c} kept");
        }
    }
}
