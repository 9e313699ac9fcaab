//! The erasure-coding payload codec (Crossword §3; RSPaxos): a batch becomes a Reed–Solomon
//! codeword of `n` shards with `d = f + 1` data shards (`synod_core::erasure`), each acceptor
//! is sent only its shards, and phase 1 and execution rebuild the batch from any `d` shards.
//!
//! * **§3.1–3.2 shards and assignment.** Per instance a configuration `(c, q)`: acceptor `i`
//!   (its position among the sorted members) gets the `c` shards `i, …, i+c−1 (mod n)`
//!   (balanced round-robin); with `c ≥ d` every acceptor gets a full copy: a fresh batch
//!   chosen at the full copy is sent as itself, uncoded, in one broadcast (MultiPaxos's
//!   point costs no codec work), a re-proposed coded payload as its `d` data shards. The
//!   leader keeps the data shards (its acceptance is complete).
//! * **§3.3 availability.** Crossword's configurations lie on `q + c = n + 1` (C4) with a
//!   majority electing a leader; RSPaxos fixes `c = 1` and compensates with larger quorums:
//!   commit `q = ⌈(n + d)/2⌉`, elect `n + d − q`, so that any electing set meets any
//!   committing set in `d` acceptors holding `d` distinct shards (Mu et al. 2014). For
//!   `n = 5` that is `q = 4`: one failure tolerated, not two.
//! * **§3.6 the new leader (ap′, fc′/fr′).** Pieces of one slot are shards of one payload
//!   when their `origin` (the ballot that made the payload, kept on re-proposal) and code
//!   agree; an acceptor pools such pieces rather than replace them, so it never loses a
//!   shard of the value it accepted. A candidate takes the value some acceptor knows is
//!   chosen, else the highest-ballot one, and pools every reported shard of that payload:
//!   with `d` shards it rebuilds and re-proposes it; with fewer, the value cannot have been
//!   chosen (C2: the electing quorum meets any committing one in servers holding `d`
//!   shards of it, accepted in its ballot or pooled since) and the slot is free.
//! * **§3.5/§4.2 gossip.** A follower completes a committed slot by asking the peers whose
//!   assigned shards cover what it lacks, starting after itself and skipping the leader
//!   (asked last), for exactly those shards; RSPaxos followers ask the leader for the data
//!   shards instead (it has no gossip). After `ESCALATE` fruitless cycles everyone is
//!   asked for everything missing.

use super::chooser::{grow_unbalanced, Chooser};
use crate::layers::codec::{Ask, PayloadCodec, Pieces, Proposal, Recovered};
use crate::multipaxos::{AcceptedSlot, Batch, Coded, Value};
use bytes::Bytes;
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use synod_core::erasure::{boundary_configs, Assignment, Code};
use synod_core::protocol::{decode, encode};
use synod_core::quorum::majority;
use synod_core::{Ballot, NodeId, Time};

/// The deferral gap's default (§4.2: 400 KB).
pub const DEFAULT_GAP: usize = 400_000;

/// Fetch cycles a slot stays incomplete before everyone is asked for everything missing.
/// Not sooner: on a saturated network the planned peers' answers take several cycles, and
/// asking everyone (the leader and the followers holding pooled copies answer with every
/// shard they have) multiplies the bytes each slot costs — the flood that kept Crossword's
/// followers' NICs full and its leader's heartbeats late in the shaped Fig. 6 runs. A peer
/// silent for `SILENT_AFTER` cycles is already routed around by the plan itself.
const ESCALATE: u32 = 10;

/// How the configuration of each instance is picked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// §4.1: the per-follower response-time models pick the fastest boundary configuration.
    Adaptive,
    /// Always `c` shards per acceptor (the boundary's `q = n + 1 − c`); the ablation.
    Fixed(usize),
    /// Cycle through the boundary configurations, one per instance (for the checks: every
    /// configuration mixed in one schedule).
    Rotate,
}

/// Which protocol's quorums and fetch path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// Crossword: configurations on `q + c = n + 1`, majority phase 1, follower gossip.
    Crossword,
    /// RSPaxos: `c = 1`, commit `⌈(n+d)/2⌉`, phase 1 `n + d − q`, full values from the leader.
    RsPaxos,
}

/// The erasure-coding codec.
pub struct RsCodec {
    scheme: Scheme,
    mode: Mode,
    gap: usize,
    /// Mutation test only: commit one acceptance early when `c < d` (`q + c = n`, violating
    /// C4 while C1 still holds).
    short_quorum: bool,
    chooser: Chooser,
    /// §5.4: the adaptive chooser may give each follower its own shard count.
    unbalanced: bool,
    rotate: usize,
    /// Instances proposed per configuration `c` (status).
    chosen: BTreeMap<usize, u64>,
}

impl RsCodec {
    pub fn new(scheme: Scheme, mode: Mode, gap: usize) -> RsCodec {
        RsCodec {
            scheme,
            mode,
            gap,
            short_quorum: false,
            chooser: Chooser::default(),
            unbalanced: false,
            rotate: 0,
            chosen: BTreeMap::new(),
        }
    }

    /// §5.4: let the adaptive chooser pick per-follower shard counts (`assign=unbalanced`).
    pub fn with_unbalanced(mut self) -> RsCodec {
        self.unbalanced = true;
        self
    }

    /// The mutant that commits with `q − 1` acceptances.
    #[cfg(any(test, feature = "mutants"))]
    pub fn with_short_quorum(mut self) -> RsCodec {
        self.short_quorum = true;
        self
    }

    /// The code for `n` acceptors (`d = f + 1`).
    fn code(n: usize) -> Option<Code> {
        Code::for_cluster(n).ok()
    }

    /// RSPaxos's commit quorum `⌈(n + d)/2⌉`.
    pub fn rspaxos_quorum(n: usize) -> usize {
        let d = (n.max(1) - 1) / 2 + 1;
        (n + d).div_ceil(2)
    }

    /// The configuration `(c, q, counts)` for a new instance of `bytes` payload bytes:
    /// `counts` the per-member shard counts of an unbalanced assignment (§5.4; `c` then the
    /// smallest follower count), empty for balanced round-robin.
    fn configure(&mut self, now: Time, bytes: usize, members: &[NodeId], me: NodeId) -> (usize, usize, Vec<u16>) {
        let n = members.len();
        let d = (n - 1) / 2 + 1;
        let followers: Vec<NodeId> = members.iter().copied().filter(|m| *m != me).collect();
        let full = (d, n + 1 - d);
        let mut counts = Vec::new();
        let (c, q) = match (self.scheme, self.mode) {
            (Scheme::RsPaxos, _) => (1, Self::rspaxos_quorum(n)),
            (Scheme::Crossword, Mode::Fixed(c)) => {
                let c = c.clamp(1, d);
                (c, n + 1 - c)
            }
            (Scheme::Crossword, Mode::Rotate) if self.unbalanced => {
                // Every quorum above the majority, with the weakest sets grown from a
                // rotating member: one unbalanced assignment after another (the checks).
                self.rotate += 1;
                let q = d + 1 + self.rotate % (n - d);
                let leader = members.iter().position(|m| *m == me).unwrap_or(0);
                let start = self.rotate / (n - d);
                let each = grow_unbalanced(n, d, leader, q, |_, p| (((p + n - start % n) % n) as f64, 0.0));
                match each {
                    Some(each) => {
                        let c;
                        (c, counts) = Self::per_follower(&each, members, me, d);
                        (c, q)
                    }
                    None => full,
                }
            }
            (Scheme::Crossword, Mode::Rotate) => {
                let all = boundary_configs(n);
                self.rotate = (self.rotate + 1) % all.len();
                all[self.rotate]
            }
            (Scheme::Crossword, Mode::Adaptive) if self.unbalanced => {
                match self.chooser.choose_unbalanced(now, bytes, d, members, me) {
                    Some((each, q)) => {
                        let c;
                        (c, counts) = Self::per_follower(&each, members, me, d);
                        (c, q)
                    }
                    None => full,
                }
            }
            (Scheme::Crossword, Mode::Adaptive) => {
                self.chooser.choose(now, bytes, d, &followers, &boundary_configs(n), full)
            }
        };
        // §4.3, for the fixed and rotating modes too: a quorum larger than the followers
        // heard from lately (plus the leader) would stall; fall back to the full copy.
        let (c, q) = if self.scheme == Scheme::Crossword && q > 1 + self.chooser.healthy(now, &followers) {
            counts.clear();
            full
        } else {
            (c, q)
        };
        *self.chosen.entry(if counts.is_empty() { c } else { 0 }).or_default() += 1;
        // The mutant breaks C4 only (q + c = n), never C1: balanced coded configurations only.
        let short = self.short_quorum && c < d && counts.is_empty();
        (c, if short { q - 1 } else { q }, counts)
    }

    /// Per-member counts as a configuration: the smallest follower count (at most `d`) and
    /// the counts, or none where the followers' counts are equal (balanced, or the full copy).
    fn per_follower(each: &[usize], members: &[NodeId], me: NodeId, d: usize) -> (usize, Vec<u16>) {
        let theirs: Vec<usize> = members.iter().zip(each).filter(|(m, _)| **m != me).map(|(_, k)| *k).collect();
        let c = theirs.iter().copied().min().unwrap_or(d).min(d);
        let counts =
            if theirs.iter().any(|k| *k != theirs[0]) { each.iter().map(|k| *k as u16).collect() } else { Vec::new() };
        (c, counts)
    }

    /// The shards acceptor `pos` is assigned: its arc of an unbalanced assignment (`counts`
    /// by position, §5.4), else its `c` shards of balanced round-robin (data shards when
    /// `c ≥ d`). Nothing for a position outside `counts` (a malformed piece).
    fn assigned(n: usize, d: usize, c: usize, counts: &[u16], pos: usize) -> Vec<usize> {
        if !counts.is_empty() {
            let each: Vec<usize> = counts.iter().map(|k| *k as usize).collect();
            return if pos < each.len() { Assignment::unbalanced(n, &each).of(pos).to_vec() } else { Vec::new() };
        }
        if c >= d {
            (0..d).collect()
        } else {
            Assignment::balanced(n, c).of(pos).to_vec()
        }
    }

    /// The batch a complete piece stands for.
    fn rebuild(c: &Coded) -> Option<Bytes> {
        let code = Code::new(c.n as usize, c.d as usize).ok()?;
        let shards: Vec<(usize, Bytes)> = c.shards.iter().map(|(i, b)| (*i as usize, b.clone())).collect();
        code.decode(c.len as usize, &shards).ok()
    }

    /// The union of two pieces of one payload (shards sorted by index, no duplicates).
    fn union(a: &Coded, b: &Coded) -> Coded {
        let mut shards: BTreeMap<u16, Bytes> = a.shards.iter().cloned().collect();
        for (i, s) in &b.shards {
            shards.entry(*i).or_insert_with(|| s.clone());
        }
        Coded { shards: shards.into_iter().collect(), ..a.clone() }
    }

    /// A complete piece reduced to its data shards (what a leader keeps).
    fn compact(c: &Coded) -> Option<Coded> {
        let d = c.d as usize;
        if c.shards.iter().take(d).map(|(i, _)| *i as usize).eq(0..d) {
            return Some(Coded { shards: c.shards[..d].to_vec(), ..c.clone() });
        }
        let payload = Self::rebuild(c)?;
        let all = Code::new(c.n as usize, d).ok()?.encode(&payload).ok()?;
        Some(Coded { shards: all.into_iter().take(d).enumerate().map(|(i, b)| (i as u16, b)).collect(), ..c.clone() })
    }
}

impl PayloadCodec for RsCodec {
    fn options(&self) -> &'static [&'static str] {
        &["config", "gossip_gap", "assign"]
    }

    fn prepare_quorum(&self, n: usize) -> usize {
        match self.scheme {
            Scheme::RsPaxos if n >= 3 => {
                let d = (n - 1) / 2 + 1;
                n + d - Self::rspaxos_quorum(n)
            }
            _ => majority(n),
        }
    }

    fn encode(
        &mut self,
        now: Time,
        slot: u64,
        ballot: Ballot,
        value: Value,
        members: &[NodeId],
        me: NodeId,
    ) -> Proposal {
        let n = members.len();
        // The configuration, when chosen before coding (a fresh Crossword batch).
        let mut preset = None;
        // A fresh batch gets this ballot as its origin; a recovered one keeps its identity.
        let (origin, payload, cmds, code) = match value {
            Value::Cmds(batch) if n >= 3 => {
                let cmds = batch.len() as u32;
                let payload = encode(&batch);
                if self.scheme == Scheme::Crossword {
                    // The full copy (c ≥ d, a majority: MultiPaxos's point) needs no code:
                    // the batch itself goes to everyone in one broadcast, and nobody
                    // decodes it (small values pay no codec work, §5.1).
                    let (c, quorum, counts) = self.configure(now, payload.len(), members, me);
                    let d = (n - 1) / 2 + 1;
                    if c >= d {
                        let sizes = members.iter().filter(|m| **m != me).map(|m| (*m, payload.len())).collect();
                        self.chooser.on_send(now, slot, payload.len(), sizes);
                        let v = Value::Cmds(batch);
                        return Proposal { own: v.clone(), pieces: Pieces::Same(v), quorum };
                    }
                    preset = Some((c, quorum, counts));
                }
                (ballot, payload, cmds, Self::code(n))
            }
            Value::Coded(c) => match Self::rebuild(&c) {
                Some(p) => (c.origin, p, c.cmds, Code::new(c.n as usize, c.d as usize).ok()),
                None => (ballot, encode(&Batch::new()), 0, Self::code(n)),
            },
            // Membership and layer entries (and tiny clusters): a full copy to everyone.
            other => {
                return Proposal { own: other.clone(), pieces: Pieces::Same(other), quorum: majority(n) };
            }
        };
        let Some(code) = code.filter(|_| n >= 3) else {
            let batch: Batch = decode(&payload).unwrap_or_default();
            let v = Value::Cmds(batch);
            return Proposal { own: v.clone(), pieces: Pieces::Same(v), quorum: majority(n) };
        };
        let Ok(shards) = code.encode(&payload) else {
            let v = Value::Cmds(decode(&payload).unwrap_or_default());
            return Proposal { own: v.clone(), pieces: Pieces::Same(v), quorum: majority(n) };
        };
        let (c, quorum, counts) = if code.n == n {
            preset.unwrap_or_else(|| self.configure(now, payload.len(), members, me))
        } else {
            // A payload coded for another membership: full pieces, a majority (C4 holds for
            // any q with c = d).
            (code.d, majority(n), Vec::new())
        };
        let piece = |mut held: Vec<usize>| Coded {
            origin,
            n: code.n as u16,
            d: code.d as u16,
            c: c as u16,
            counts: counts.clone(),
            len: payload.len() as u32,
            cmds,
            shards: {
                held.sort_unstable();
                held.into_iter().map(|i| (i as u16, shards[i].clone())).collect()
            },
        };
        let own = piece((0..code.d).collect());
        let mut each = Vec::with_capacity(n);
        let mut sizes = Vec::with_capacity(n);
        for (pos, m) in members.iter().enumerate() {
            if *m == me {
                continue;
            }
            let p = if code.n == n { piece(Self::assigned(n, code.d, c, &counts, pos)) } else { own.clone() };
            sizes.push((*m, p.bytes()));
            each.push((*m, Value::Coded(p)));
        }
        self.chooser.on_send(now, slot, payload.len(), sizes);
        Proposal { own: Value::Coded(own), pieces: Pieces::Each(each), quorum }
    }

    fn piece_for(&self, own: &Value, members: &[NodeId], to: NodeId) -> Value {
        let Value::Coded(c) = own else { return own.clone() };
        let (n, d) = (c.n as usize, c.d as usize);
        let Some(pos) = members.iter().position(|m| *m == to) else { return own.clone() };
        if members.len() != n || c.c as usize >= d {
            return own.clone();
        }
        let Some(all) = Self::rebuild(c).and_then(|p| Code::new(n, d).ok()?.encode(&p).ok()) else {
            return own.clone();
        };
        let mut held = Self::assigned(n, d, c.c as usize, &c.counts, pos);
        held.sort_unstable();
        let shards = held.into_iter().map(|i| (i as u16, all[i].clone())).collect();
        Value::Coded(Coded { shards, ..c.clone() })
    }

    fn reprepare_stuck(&self) -> bool {
        // RSPaxos's quorums are fixed: nothing to gain.
        self.scheme == Scheme::Crossword
    }

    fn on_accepted(&mut self, now: Time, from: NodeId, slot: u64) {
        self.chooser.on_ack(now, from, slot);
    }

    fn merge(&self, held: Option<&Value>, incoming: Value) -> Value {
        match (held, &incoming) {
            (Some(held), _) => self.pool(held, &incoming).unwrap_or(incoming),
            (None, _) => incoming,
        }
    }

    fn pool(&self, held: &Value, incoming: &Value) -> Option<Value> {
        match (held, incoming) {
            (Value::Coded(a), Value::Coded(b)) if a.same_payload(b) => Some(Value::Coded(Self::union(a, b))),
            _ => None,
        }
    }

    fn recover(&self, reports: &[AcceptedSlot]) -> Recovered {
        // The candidate value: one some acceptor knows is chosen, else the highest ballot's.
        let Some(winner) = reports.iter().find(|a| a.committed).or_else(|| reports.iter().max_by_key(|a| a.ballot))
        else {
            return Recovered::Free;
        };
        let Value::Coded(w) = &winner.value else {
            return if winner.committed {
                Recovered::Chosen(winner.value.clone())
            } else {
                Recovered::Propose(winner.value.clone())
            };
        };
        // Pool every reported shard of that payload (§3.6), whatever ballot it came with.
        let mut pooled = w.clone();
        for r in reports {
            if let Value::Coded(c) = &r.value {
                if c.same_payload(w) {
                    pooled = Self::union(&pooled, c);
                }
            }
        }
        match (pooled.complete().then(|| Self::compact(&pooled)).flatten(), winner.committed) {
            (Some(v), true) => Recovered::Chosen(Value::Coded(v)),
            (Some(v), false) => Recovered::Propose(Value::Coded(v)),
            (None, true) => Recovered::Undecided,
            // ap′: fewer than d shards of the highest-ballot payload: it was not chosen.
            (None, false) => Recovered::Free,
        }
    }

    fn payload<'a>(&self, held: &'a Value) -> Option<Cow<'a, Value>> {
        match held {
            Value::Coded(c) => {
                if !c.complete() {
                    return None;
                }
                let bytes = Self::rebuild(c)?;
                let batch: Batch = decode(&bytes).ok()?;
                Some(Cow::Owned(Value::Cmds(batch)))
            }
            v => Some(Cow::Borrowed(v)),
        }
    }

    fn complete(&self, held: &Value) -> bool {
        match held {
            Value::Coded(c) => c.complete(),
            _ => true,
        }
    }

    fn payload_bytes(&self, held: &Value) -> usize {
        match held {
            Value::Coded(c) => c.len as usize,
            _ => 0,
        }
    }

    fn deferral_gap(&self) -> usize {
        self.gap
    }

    fn fill_plan(
        &self,
        held: &Value,
        members: &[NodeId],
        me: NodeId,
        leader: Option<NodeId>,
        round: u32,
        silent: &dyn Fn(NodeId) -> bool,
    ) -> Vec<Ask> {
        let Value::Coded(c) = held else { return Vec::new() };
        let (n, d) = (c.n as usize, c.d as usize);
        let have: BTreeSet<usize> = c.shards.iter().map(|(i, _)| *i as usize).collect();
        let missing: Vec<u16> = (0..n).filter(|i| !have.contains(i)).map(|i| i as u16).collect();
        let leader = leader.filter(|l| *l != me && members.contains(l));
        let everyone = || -> Vec<Ask> {
            members.iter().filter(|m| **m != me).map(|m| Ask { peer: *m, parts: missing.clone() }).collect()
        };
        if round >= ESCALATE || members.len() != n || c.c as usize >= d {
            return everyone();
        }
        if self.scheme == Scheme::RsPaxos {
            // No gossip: the leader holds the data shards.
            return match leader {
                Some(l) => vec![Ask { peer: l, parts: missing }],
                None => everyone(),
            };
        }
        // §4.2: peers from the one after us on (wrapping), the leader and silent peers
        // last, each asked for the shards it is assigned that we do not expect yet.
        let Some(me_pos) = members.iter().position(|m| *m == me) else { return everyone() };
        let order: Vec<usize> = (1..n).map(|k| (me_pos + k) % n).collect();
        let (first, later): (Vec<usize>, Vec<usize>) =
            order.into_iter().partition(|&p| Some(members[p]) != leader && !silent(members[p]));
        let mut expected = have;
        let mut asks = Vec::new();
        for pos in first.into_iter().chain(later) {
            if expected.len() >= d {
                break;
            }
            let assigned = if Some(members[pos]) == leader {
                (0..d).collect()
            } else {
                Self::assigned(n, d, c.c as usize, &c.counts, pos)
            };
            let parts: Vec<u16> = assigned.into_iter().filter(|i| expected.insert(*i)).map(|i| i as u16).collect();
            if !parts.is_empty() {
                asks.push(Ask { peer: members[pos], parts });
            }
        }
        asks
    }

    fn share(&self, held: &Value, parts: &[u16]) -> Option<Value> {
        let Value::Coded(c) = held else { return None };
        let shards: Vec<(u16, Bytes)> = c.shards.iter().filter(|(i, _)| parts.contains(i)).cloned().collect();
        (!shards.is_empty()).then(|| Value::Coded(Coded { shards, ..c.clone() }))
    }

    fn status(&self, extra: &mut BTreeMap<String, String>) {
        // Key 0: unbalanced assignments (§5.4).
        let configs: Vec<String> = self
            .chosen
            .iter()
            .map(|(c, k)| if *c == 0 { format!("unbalanced:{k}") } else { format!("c{c}:{k}") })
            .collect();
        extra.insert("coded_instances".into(), configs.join(","));
    }
}
