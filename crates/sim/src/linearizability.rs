//! Linearizability checking for the key-value model.
//!
//! Every operation the simulated clients issue touches exactly one key, and operations on
//! different keys are independent in the KV model, so a history is linearizable iff each
//! per-key sub-history is (P-compositionality, Horn & Kroening). Each sub-history is checked
//! with the Wing–Gong search as refined by Lowe and used by Porcupine: walk the call/return
//! entries in time order, tentatively linearize calls whose result the model accepts, and
//! backtrack at a return whose call is not linearized yet; a cache of (set of linearized
//! operations, model state) pairs prunes configurations already explored.
//!
//! An indeterminate operation (no reply) returns at +infinity and the model accepts any
//! output for it, so it may take effect anywhere after its call — including "after
//! everything", which is the same as not at all.
//!
//! An operation rejected for good ([`KvOutput::Rejected`], e.g. IDEM when every replica
//! refused it) must never take effect: it is left out, so the rest of the history has to be
//! linearizable without it (a read of a value only it wrote is a violation).
//!
//! Interval semantics match Porcupine: `[call, return]` is closed, so operations whose
//! intervals touch are concurrent.

use crate::history::{History, KvOp, KvOutput, Operation};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use synod_core::kv::{Footprint, KvStore};
use synod_core::{Op, OpResult};

/// A linearizability violation: the key whose sub-history has no linearization, and a small
/// non-linearizable slice of it that keeps the writes its reads observed (see `minimize`).
#[derive(Clone, Debug)]
pub struct LinViolation {
    pub key: String,
    /// Operations on the key in the full history.
    pub key_ops: usize,
    /// A minimal non-linearizable sub-history, sorted by call time.
    pub slice: Vec<Operation>,
}

impl std::fmt::Display for LinViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "history of key {:?} is not linearizable ({} ops on the key; a minimal non-linearizable slice of {}):",
            self.key,
            self.key_ops,
            self.slice.len()
        )?;
        for op in &self.slice {
            writeln!(f, "  {op}")?;
        }
        Ok(())
    }
}

/// Check a whole history. Keys are checked in sorted order so the reported violation is
/// deterministic.
///
/// A history with `Rich` operations (multi-key operations, scans, transactions) is split
/// into groups of keys that no operation connects (union-find over each operation's keys; a
/// scan's keys are those of the history in its range, a whole-keyspace operation joins
/// everything); each group is checked on its own against the state machine's sequential
/// semantics. Single-key groups of classic operations keep the fast model.
pub fn check(history: &History) -> Result<(), LinViolation> {
    if !history.ops.iter().any(|o| matches!(o.op, KvOp::Rich { .. })) {
        let mut by_key: BTreeMap<&str, Vec<&Operation>> = BTreeMap::new();
        for op in &history.ops {
            by_key.entry(op.op.key()).or_default().push(op);
        }
        for (key, ops) in by_key {
            if !check_ops(&ops) {
                let slice = minimize(&ops, check_ops);
                return Err(LinViolation { key: key.to_string(), key_ops: ops.len(), slice });
            }
        }
        return Ok(());
    }
    for (keys, ops) in groups(history) {
        if !check_rich(&ops) {
            let slice = minimize(&ops, check_rich);
            return Err(LinViolation { key: keys.join(","), key_ops: ops.len(), slice });
        }
    }
    Ok(())
}

/// The keys an operation touches, as text (scans: the history's keys in the range).
fn op_keys(o: &Operation, all: &BTreeSet<String>) -> Vec<String> {
    let text = |k: &[u8]| String::from_utf8_lossy(k).into_owned();
    match &o.op {
        KvOp::Rich { op, .. } => match op.footprint() {
            Footprint::None => Vec::new(),
            Footprint::Keys(ks) => ks.into_iter().map(text).collect(),
            Footprint::Range { start, end } => all
                .iter()
                .filter(|k| k.as_bytes() >= start && (end.is_empty() || k.as_bytes() < end))
                .cloned()
                .collect(),
            Footprint::All => all.iter().cloned().collect(),
        },
        other => vec![other.key().to_string()],
    }
}

/// Independent groups of keys and their operations, in key order.
fn groups(history: &History) -> Vec<(Vec<String>, Vec<&Operation>)> {
    let mut all: BTreeSet<String> = BTreeSet::new();
    for o in &history.ops {
        let text = |k: &[u8]| String::from_utf8_lossy(k).into_owned();
        match &o.op {
            KvOp::Rich { op, .. } => {
                if let Footprint::Keys(ks) = op.footprint() {
                    all.extend(ks.into_iter().map(text));
                }
            }
            other => {
                all.insert(other.key().to_string());
            }
        }
    }
    let index: HashMap<&str, usize> = all.iter().enumerate().map(|(i, k)| (k.as_str(), i)).collect();
    let mut parent: Vec<usize> = (0..all.len()).collect();
    fn find(p: &mut [usize], mut x: usize) -> usize {
        while p[x] != x {
            p[x] = p[p[x]];
            x = p[x];
        }
        x
    }
    let keys_of: Vec<Vec<usize>> = history
        .ops
        .iter()
        .map(|o| op_keys(o, &all).iter().filter_map(|k| index.get(k.as_str()).copied()).collect())
        .collect();
    for ks in &keys_of {
        for w in ks.windows(2) {
            let (a, b) = (find(&mut parent, w[0]), find(&mut parent, w[1]));
            parent[a] = b;
        }
    }
    let mut by_root: BTreeMap<usize, (Vec<String>, Vec<&Operation>)> = BTreeMap::new();
    for (i, k) in all.iter().enumerate() {
        let r = find(&mut parent, i);
        by_root.entry(r).or_default().0.push(k.clone());
    }
    let mut keyless = Vec::new();
    for (o, ks) in history.ops.iter().zip(&keys_of) {
        match ks.first() {
            Some(&k) => {
                let r = find(&mut parent, k);
                by_root.entry(r).or_default().1.push(o);
            }
            None => keyless.push(o),
        }
    }
    let mut out: Vec<(Vec<String>, Vec<&Operation>)> = by_root.into_values().collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    if !keyless.is_empty() {
        out.push((Vec::new(), keyless));
    }
    out
}

/// A classic operation as the state machine's operation and result.
fn as_rich(o: &Operation) -> (Op, Option<u64>, Option<OpResult>) {
    let b = |s: &String| Bytes::copy_from_slice(s.as_bytes());
    let ob = |s: &Option<String>| s.as_ref().map(b);
    let op = match &o.op {
        KvOp::Get { key } => Op::Get { key: b(key) },
        KvOp::Put { key, value } => Op::Put { key: b(key), value: b(value) },
        KvOp::Delete { key } => Op::Delete { key: b(key) },
        KvOp::Cas { key, expect, new } => Op::Cas { key: b(key), expect: ob(expect), new: ob(new) },
        KvOp::Rich { op, stamp } => {
            let out = match &o.output {
                Some(KvOutput::Result(r)) => Some(r.clone()),
                _ => None,
            };
            return (op.clone(), *stamp, out);
        }
    };
    let out = match &o.output {
        Some(KvOutput::Value(v)) => Some(OpResult::Value(ob(v))),
        Some(KvOutput::Done) => Some(OpResult::Done),
        Some(KvOutput::Deleted(d)) => Some(OpResult::Deleted(*d)),
        Some(KvOutput::Cas { ok, current }) => Some(OpResult::Cas { ok: *ok, current: ob(current) }),
        _ => None,
    };
    (op, None, out)
}

/// Operations the search leaves out: rejected ones (they must never take effect) and
/// indeterminate reads (they change nothing and may return anything).
fn left_out(o: &Operation) -> bool {
    o.is_rejected() || (o.is_indeterminate() && reads_only(&o.op))
}

/// Whether an operation never changes the store (checked one by one here rather than
/// trusting `Op::is_write`, which a new write kind could be missing from: leaving out a
/// write would weaken the check).
fn reads_only(op: &KvOp) -> bool {
    match op {
        KvOp::Get { .. } => true,
        KvOp::Put { .. } | KvOp::Delete { .. } | KvOp::Cas { .. } => false,
        KvOp::Rich { op, .. } => matches!(
            op,
            Op::Get { .. }
                | Op::MultiGet { .. }
                | Op::Exists { .. }
                | Op::Strlen { .. }
                | Op::Scan { .. }
                | Op::Versions { .. }
                | Op::ListRange { .. }
                | Op::ListLen { .. }
                | Op::ListIndex { .. }
        ),
    }
}

/// Whether operations of one group of keys are linearizable, with the state machine
/// (`KvStore`, which WATCH versions included) as the sequential model.
pub fn check_rich(ops: &[&Operation]) -> bool {
    struct R {
        op: Op,
        stamp: u64,
        /// None = indeterminate: any result.
        out: Option<OpResult>,
    }
    // An indeterminate read changes nothing and may return anything: left out.
    let kept: Vec<&&Operation> = ops.iter().filter(|o| !left_out(o)).collect();
    let mut keys: BTreeSet<Bytes> = BTreeSet::new();
    let rs: Vec<R> = kept
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let (op, stamp, out) = as_rich(o);
            if let Footprint::Keys(ks) = op.footprint() {
                keys.extend(ks.into_iter().map(Bytes::copy_from_slice));
            }
            // A command no replica applied has no known stamp: one nothing else matches.
            let stamp = stamp.unwrap_or(u64::MAX - i as u64);
            R { op, stamp, out: if o.ret.is_some() { out } else { None } }
        })
        .collect();
    let times: Vec<(u64, u64)> = kept.iter().map(|o| (o.call, o.ret.unwrap_or(u64::MAX))).collect();
    let versions = Op::Versions { keys: keys.into_iter().collect() };
    let id = |s: &KvStore| {
        let mut h = s.digest();
        if let OpResult::Versions(vs) = s.clone().apply(&versions, 0) {
            for v in vs {
                h = (h ^ v).wrapping_mul(0x100000001b3).rotate_left(17);
            }
        }
        h
    };
    let step = |s: &KvStore, i: usize| {
        let r = &rs[i];
        let mut next = s.clone();
        let got = next.apply_stamped(&r.op, 0, false, r.stamp);
        match &r.out {
            Some(want) if *want != got => None,
            _ => Some(next),
        }
    };
    search_with(&times, &vec![NIL; times.len()], KvStore::new(), step, id)
}

/// Whether operations on one key are linearizable.
///
/// Three reductions keep the search small when many operations are indeterminate (an
/// overloaded IDEM leaves dozens per key ambivalent); each keeps the verdict exact:
/// - an indeterminate get changes nothing and may return anything: it is left out;
/// - values no operation observes (no get returns them, no cas expects or reports them) are
///   one value `UNSEEN` to the model: every step gives the same verdict whichever of them
///   the key holds, so the model is a homomorphic image of the original;
/// - indeterminate operations that are then identical (same kind and values) are
///   interchangeable: they are linearized in call order only (see `search_with`'s `gate`),
///   so k pending unobserved writes make k + 1 configurations, not 2^k.
pub fn check_ops(ops: &[&Operation]) -> bool {
    let kept: Vec<&&Operation> = ops.iter().filter(|o| !left_out(o)).collect();
    let mut interner = Interner::default();
    for o in &kept {
        interner.observe(o);
    }
    let compiled: Vec<Compiled> = kept.iter().map(|o| interner.compile(o)).collect();
    search(&compiled)
}

/// Values are interned to small integers so the model state is a `u32` (0 = absent).
#[derive(Default)]
struct Interner {
    ids: HashMap<String, u32>,
    /// Values some operation observes; the others are all `UNSEEN`.
    observed: HashSet<String>,
}

/// The model's id of every value no operation observes.
const UNSEEN: u32 = u32::MAX;

impl Interner {
    /// Note the values `o` observes: a get's result, a cas's expectation and reported value.
    fn observe(&mut self, o: &Operation) {
        let mut note = |v: &Option<String>| {
            if let Some(v) = v {
                self.observed.insert(v.clone());
            }
        };
        if let KvOp::Cas { expect, .. } = &o.op {
            note(expect);
        }
        match &o.output {
            Some(KvOutput::Value(v)) => note(v),
            Some(KvOutput::Cas { current, .. }) => note(current),
            _ => {}
        }
    }

    fn id(&mut self, v: &Option<String>) -> u32 {
        match v {
            None => 0,
            Some(s) if !self.observed.contains(s) => UNSEEN,
            Some(s) => {
                let next = self.ids.len() as u32 + 1;
                *self.ids.entry(s.clone()).or_insert(next)
            }
        }
    }

    fn compile(&mut self, o: &Operation) -> Compiled {
        let kind = match &o.op {
            KvOp::Get { .. } => Kind::Get,
            KvOp::Put { value, .. } => Kind::Put(self.id(&Some(value.clone()))),
            KvOp::Delete { .. } => Kind::Delete,
            KvOp::Cas { expect, new, .. } => Kind::Cas { expect: self.id(expect), new: self.id(new) },
            // `check` sends histories with rich operations to `check_rich`; here one would
            // only be a read that may return anything.
            KvOp::Rich { .. } => Kind::Get,
        };
        let out = match &o.output {
            None => Out::Unknown,
            Some(KvOutput::Value(v)) => Out::Value(self.id(v)),
            Some(KvOutput::Done) => Out::Done,
            Some(KvOutput::Deleted(b)) => Out::Deleted(*b),
            Some(KvOutput::Cas { ok, current }) => Out::Cas { ok: *ok, current: self.id(current) },
            // Left out by `check_ops`; as a fallback it may take effect or not.
            Some(KvOutput::Rejected) | Some(KvOutput::Result(_)) => Out::Unknown,
        };
        let (ret, out) = match o.ret {
            Some(r) => (r, out),
            None => (u64::MAX, Out::Unknown),
        };
        Compiled { kind, out, call: o.call, ret }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Get,
    Put(u32),
    Delete,
    Cas { expect: u32, new: u32 },
}

#[derive(Clone, Copy)]
enum Out {
    Unknown,
    Value(u32),
    Done,
    Deleted(bool),
    Cas { ok: bool, current: u32 },
}

#[derive(Clone, Copy)]
struct Compiled {
    kind: Kind,
    out: Out,
    call: u64,
    ret: u64,
}

/// The sequential KV model for one key: `Some(next state)` if the operation may return its
/// recorded output in state `s`.
fn step(s: u32, op: &Compiled) -> Option<u32> {
    let (ok, next) = match op.kind {
        Kind::Get => (matches!(op.out, Out::Unknown) || matches!(op.out, Out::Value(v) if v == s), s),
        Kind::Put(v) => (matches!(op.out, Out::Unknown | Out::Done), v),
        Kind::Delete => (matches!(op.out, Out::Unknown) || matches!(op.out, Out::Deleted(b) if b == (s != 0)), 0),
        Kind::Cas { expect, new } => {
            let swapped = expect == s;
            let next = if swapped { new } else { s };
            let ok = match op.out {
                Out::Unknown => true,
                Out::Cas { ok, current } => ok == swapped && current == s,
                _ => false,
            };
            (ok, next)
        }
    };
    ok.then_some(next)
}

const NIL: usize = usize::MAX;

/// Lowe's just-in-time linearization search with the single-key KV model.
fn search(ops: &[Compiled]) -> bool {
    let times: Vec<(u64, u64)> = ops.iter().map(|o| (o.call, o.ret)).collect();
    // Identical indeterminate operations, chained in call order.
    let mut order: Vec<usize> = (0..ops.len()).filter(|&i| ops[i].ret == u64::MAX).collect();
    order.sort_by_key(|&i| ops[i].call);
    let mut last: HashMap<Kind, usize> = HashMap::new();
    let mut gate = vec![NIL; ops.len()];
    for i in order {
        if let Some(prev) = last.insert(ops[i].kind, i) {
            gate[i] = prev;
        }
    }
    search_with(&times, &gate, 0u32, |s, i| step(*s, &ops[i]), |s| *s as u64)
}

/// Lowe's just-in-time linearization search over a doubly linked list of entries, for any
/// sequential model: `times[i]` is operation i's (call, return), `step(s, i)` the state
/// after operation i in state s if the model allows its recorded output there, `id(s)` a
/// hash of a state for the cache of explored configurations.
///
/// An operation returning at `u64::MAX` is indeterminate: `step` must accept it in every
/// state. Once the walk reaches such a return, everything left is indeterminate and can be
/// linearized last (or never), so the history is linearizable.
///
/// `gate[i]` (or `NIL`) names an operation that must be linearized before operation i: for
/// indeterminate operations that are interchangeable (same step in every state, both
/// returning at `u64::MAX`, the gate called first), any linearization can swap their roles
/// to respect the gate, so the search loses nothing by keeping to it.
///
/// A configuration is pruned when an explored one has the same state and applied the same
/// operations but one indeterminate operation fewer (see `dominated` below). With k
/// indeterminate operations pending, applying or not applying each would otherwise make up
/// to 2^k configurations that all fail alike on a history that is not linearizable.
fn search_with<S: Clone>(
    times: &[(u64, u64)],
    gate: &[usize],
    init: S,
    step: impl Fn(&S, usize) -> Option<S>,
    id: impl Fn(&S) -> u64,
) -> bool {
    let n = times.len();
    if n == 0 {
        return true;
    }
    // Entries sorted by time, calls before returns at equal times (closed intervals).
    let mut entries: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * n);
    for (i, &(call, ret)) in times.iter().enumerate() {
        entries.push((call, false, i));
        entries.push((ret, true, i));
    }
    entries.sort_unstable();
    // Node 0 is the head sentinel; entry k is node k + 1.
    let m = entries.len();
    let mut next: Vec<usize> = (1..=m + 1).collect();
    next[m] = NIL;
    let mut prev: Vec<usize> = (0..=m).map(|k| k.wrapping_sub(1)).collect();
    let mut op_of = vec![0usize; m + 1];
    let mut is_call = vec![false; m + 1];
    let mut ret_node = vec![0usize; n];
    for (k, &(_, is_ret, id)) in entries.iter().enumerate() {
        op_of[k + 1] = id;
        is_call[k + 1] = !is_ret;
        if is_ret {
            ret_node[id] = k + 1;
        }
    }
    prev[0] = NIL;

    let words = n.div_ceil(64);
    let mut linearized = vec![0u64; words];
    let mut cache: HashSet<(Vec<u64>, u64)> = HashSet::new();
    let mut calls: Vec<(usize, S)> = Vec::new();
    let mut state = init;
    let mut entry = next[0];
    cache.insert((linearized.clone(), id(&state)));

    let lift = |e: usize, next: &mut Vec<usize>, prev: &mut Vec<usize>, mt: usize| {
        next[prev[e]] = next[e];
        prev[next[e]] = prev[e];
        next[prev[mt]] = next[mt];
        if next[mt] != NIL {
            prev[next[mt]] = prev[mt];
        }
    };
    let unlift = |e: usize, next: &mut Vec<usize>, prev: &mut Vec<usize>, mt: usize| {
        next[prev[mt]] = mt;
        if next[mt] != NIL {
            prev[next[mt]] = mt;
        }
        next[prev[e]] = e;
        prev[next[e]] = e;
    };

    let done = |linearized: &[u64], op: usize| linearized[op / 64] & (1 << (op % 64)) != 0;
    let indeterminate = |op: usize| times[op].1 == u64::MAX;
    // Each configuration first tries the completed operations whose calls are reached, then
    // (pass 2) the indeterminate ones: not applying an indeterminate operation yet is
    // explored before applying it, which the dominance rule below relies on.
    let mut pass2 = false;
    while next[0] != NIL {
        if is_call[entry] {
            let op = op_of[entry];
            if indeterminate(op) != pass2 || (gate[op] != NIL && !done(&linearized, gate[op])) {
                entry = next[entry];
                continue;
            }
            match step(&state, op) {
                Some(new_state) => {
                    linearized[op / 64] |= 1 << (op % 64);
                    let h = id(&new_state);
                    // Dominance: a configuration that differs from an explored one only by
                    // having applied some indeterminate operation P, in the same state, can
                    // do nothing the explored one cannot (P may still be applied later there,
                    // or never). That includes applying P as a no-op here (its "explored one"
                    // is the current configuration). A dominated configuration goes into the
                    // cache as explored, so configurations it dominates in turn are pruned.
                    let fresh = cache.insert((linearized.clone(), h));
                    let dominated = fresh
                        && calls
                            .iter()
                            .map(|&(e, _)| op_of[e])
                            .chain(std::iter::once(op))
                            .filter(|&p| indeterminate(p))
                            .any(|p| {
                                let mut without = linearized.clone();
                                without[p / 64] &= !(1 << (p % 64));
                                cache.contains(&(without, h))
                            });
                    if fresh && !dominated {
                        let old = std::mem::replace(&mut state, new_state);
                        calls.push((entry, old));
                        lift(entry, &mut next, &mut prev, ret_node[op]);
                        entry = next[0];
                        pass2 = false;
                    } else {
                        linearized[op / 64] &= !(1 << (op % 64));
                        entry = next[entry];
                    }
                }
                None => entry = next[entry],
            }
        } else if !pass2 && times[op_of[entry]].1 == u64::MAX {
            // Only indeterminate operations are left: apply them last (or never).
            return true;
        } else if !pass2 {
            pass2 = true;
            entry = next[0];
        } else {
            // A return whose call is not linearized yet: undo the last choice.
            let Some((e, s)) = calls.pop() else { return false };
            let op = op_of[e];
            state = s;
            linearized[op / 64] &= !(1 << (op % 64));
            unlift(e, &mut next, &mut prev, ret_node[op]);
            entry = next[e];
            pass2 = indeterminate(op);
        }
    }
    true
}

/// Shrink a non-linearizable per-key history to a small non-linearizable slice (delta
/// debugging: drop chunks of decreasing size while the rest stays non-linearizable).
///
/// A removal is kept only if the rest still fails *for the same reason*: every remaining
/// operation that observed a value keeps a write of that value (if the history had one),
/// and a remaining read of "absent" that follows a write keeps a delete (if the history had
/// one). Without this the shrinking could drop the put a read depends on and report "read a
/// value nobody wrote", a violation the full history does not have.
fn minimize(ops: &[&Operation], check_ops: fn(&[&Operation]) -> bool) -> Vec<Operation> {
    let mut keep: Vec<&Operation> = ops.to_vec();
    keep.sort_by_key(|o| (o.call, o.ret));
    let provenance = Provenance::of(ops);
    let mut chunk = keep.len() / 2;
    while chunk >= 1 {
        let mut start = 0;
        while start < keep.len() {
            let end = (start + chunk).min(keep.len());
            let candidate: Vec<&Operation> = keep[..start].iter().chain(&keep[end..]).copied().collect();
            if !candidate.is_empty() && provenance.holds(&candidate) && !check_ops(&candidate) {
                keep = candidate;
            } else {
                start = end;
            }
        }
        chunk /= 2;
    }
    keep.into_iter().cloned().collect()
}

/// What the operations of one key observed and who could have caused it.
struct Provenance {
    /// Values some operation of the full history writes.
    written: HashSet<String>,
    /// Whether the full history has an operation that can remove the key.
    has_remover: bool,
}

/// The value an operation observed (Some(None) = observed the key absent), if any.
fn observed(o: &Operation) -> Option<Option<&String>> {
    match (&o.op, &o.output) {
        (KvOp::Get { .. }, Some(KvOutput::Value(v))) => Some(v.as_ref()),
        (KvOp::Cas { .. }, Some(KvOutput::Cas { current, .. })) => Some(current.as_ref()),
        (KvOp::Delete { .. }, Some(KvOutput::Deleted(false))) => Some(None),
        _ => None,
    }
}

/// The value an operation may write (Some(None) = it may remove the key).
fn writes(o: &Operation) -> Option<Option<&String>> {
    if o.is_rejected() {
        return None;
    }
    match &o.op {
        KvOp::Put { value, .. } => Some(Some(value)),
        KvOp::Cas { new, .. } => Some(new.as_ref()),
        KvOp::Delete { .. } => Some(None),
        KvOp::Get { .. } | KvOp::Rich { .. } => None,
    }
}

impl Provenance {
    fn of(ops: &[&Operation]) -> Provenance {
        let mut written = HashSet::new();
        let mut has_remover = false;
        for o in ops {
            match writes(o) {
                Some(Some(v)) => {
                    written.insert(v.clone());
                }
                Some(None) => has_remover = true,
                None => {}
            }
        }
        Provenance { written, has_remover }
    }

    fn holds(&self, ops: &[&Operation]) -> bool {
        let mut written: HashSet<&String> = HashSet::new();
        let mut remover = false;
        let mut first_write = u64::MAX;
        for o in ops {
            match writes(o) {
                Some(Some(v)) => {
                    written.insert(v);
                    first_write = first_write.min(o.call);
                }
                Some(None) => remover = true,
                None => {}
            }
        }
        ops.iter().all(|o| match observed(o) {
            Some(Some(v)) => written.contains(v) || !self.written.contains(v),
            // Absent after a write needs something that removes the key.
            Some(None) => remover || !self.has_remover || o.ret.is_none_or(|r| r < first_write),
            None => true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(client: u64, op: KvOp, call: u64, ret: Option<u64>, output: Option<KvOutput>) -> Operation {
        Operation { client, op, call, ret, output }
    }
    fn s(v: &str) -> Option<String> {
        Some(v.to_string())
    }
    fn put(c: u64, v: &str, call: u64, ret: u64) -> Operation {
        op(c, KvOp::Put { key: "k".into(), value: v.into() }, call, Some(ret), Some(KvOutput::Done))
    }
    fn get(c: u64, v: Option<&str>, call: u64, ret: u64) -> Operation {
        op(c, KvOp::Get { key: "k".into() }, call, Some(ret), Some(KvOutput::Value(v.map(String::from))))
    }
    fn hist(ops: Vec<Operation>) -> History {
        History { ops, ..Default::default() }
    }

    #[test]
    fn sequential_and_concurrent() {
        assert!(check(&hist(vec![put(1, "a", 0, 10), get(2, Some("a"), 20, 30)])).is_ok());
        // Stale read after the write completed.
        let err = check(&hist(vec![put(1, "a", 0, 10), get(2, None, 20, 30)])).unwrap_err();
        assert_eq!(err.key, "k");
        assert_eq!(err.slice.len(), 2);
        // Concurrent: either order is fine.
        assert!(check(&hist(vec![put(1, "a", 0, 30), get(2, None, 10, 20)])).is_ok());
        assert!(check(&hist(vec![put(1, "a", 0, 30), get(2, Some("a"), 10, 20)])).is_ok());
        // Touching intervals are concurrent (closed intervals, as in Porcupine).
        assert!(check(&hist(vec![put(1, "a", 0, 10), get(2, None, 10, 20)])).is_ok());
    }

    #[test]
    fn reads_must_not_go_back_in_time() {
        // put a; concurrent put b; reader sees b then a: impossible once b is observed
        // after a completed... a then b then a needs a second write of a.
        let h =
            hist(vec![put(1, "a", 0, 10), put(2, "b", 5, 100), get(3, Some("b"), 20, 30), get(3, Some("a"), 40, 50)]);
        assert!(check(&h).is_err());
        let h =
            hist(vec![put(1, "a", 0, 10), put(2, "b", 5, 100), get(3, Some("a"), 20, 30), get(3, Some("b"), 40, 50)]);
        assert!(check(&h).is_ok());
    }

    #[test]
    fn indeterminate_operations_may_or_may_not_apply() {
        let lost = op(1, KvOp::Put { key: "k".into(), value: "x".into() }, 0, None, None);
        // It may have applied...
        assert!(check(&hist(vec![lost.clone(), get(2, Some("x"), 50, 60)])).is_ok());
        // ...or not.
        assert!(check(&hist(vec![lost.clone(), get(2, None, 50, 60)])).is_ok());
        // But not un-apply once seen.
        assert!(check(&hist(vec![lost, get(2, Some("x"), 50, 60), get(2, None, 70, 80)])).is_err());
    }

    #[test]
    fn rejected_operations_must_never_take_effect() {
        let rejected = |v: &str, call, ret| {
            op(9, KvOp::Put { key: "k".into(), value: v.into() }, call, Some(ret), Some(KvOutput::Rejected))
        };
        // Holds: nobody observes the rejected put's value.
        let h = hist(vec![put(1, "a", 0, 10), rejected("x", 5, 20), get(2, Some("a"), 30, 40)]);
        assert!(check(&h).is_ok());
        // Violated: the rejected put's unique value is read, before or after the reject.
        let h = hist(vec![put(1, "a", 0, 10), rejected("x", 5, 20), get(2, Some("x"), 30, 40)]);
        let v = check(&h).unwrap_err();
        assert_eq!(v.key, "k");
        assert!(check(&hist(vec![rejected("x", 0, 100), get(2, Some("x"), 10, 20)])).is_err());
        // The same put left indeterminate may have taken effect.
        let lost = op(9, KvOp::Put { key: "k".into(), value: "x".into() }, 5, None, None);
        assert!(check(&hist(vec![put(1, "a", 0, 10), lost, get(2, Some("x"), 30, 40)])).is_ok());
        // A rejected delete: the value it would have removed must still be there.
        let del = op(9, KvOp::Delete { key: "k".into() }, 15, Some(20), Some(KvOutput::Rejected));
        assert!(check(&hist(vec![put(1, "a", 0, 10), del.clone(), get(2, Some("a"), 30, 40)])).is_ok());
        assert!(check(&hist(vec![put(1, "a", 0, 10), del, get(2, None, 30, 40)])).is_err());
    }

    #[test]
    fn cas_and_delete() {
        let cas = |c, e: Option<&str>, n: Option<&str>, call, ret, ok, cur: Option<&str>| {
            op(
                c,
                KvOp::Cas { key: "k".into(), expect: e.map(String::from), new: n.map(String::from) },
                call,
                Some(ret),
                Some(KvOutput::Cas { ok, current: cur.map(String::from) }),
            )
        };
        let del = |c, call, ret, existed| {
            op(c, KvOp::Delete { key: "k".into() }, call, Some(ret), Some(KvOutput::Deleted(existed)))
        };
        // Two CAS from absent: only one may win.
        let h = hist(vec![cas(1, None, Some("a"), 0, 10, true, None), cas(2, None, Some("b"), 0, 10, true, None)]);
        assert!(check(&h).is_err());
        let h = hist(vec![
            cas(1, None, Some("a"), 0, 10, true, None),
            cas(2, None, Some("b"), 0, 10, false, s("a").as_deref()),
        ]);
        assert!(check(&h).is_ok());
        // CAS to None deletes.
        let h = hist(vec![put(1, "a", 0, 1), cas(1, Some("a"), None, 2, 3, true, Some("a")), del(2, 4, 5, false)]);
        assert!(check(&h).is_ok());
        let h = hist(vec![put(1, "a", 0, 1), del(2, 2, 3, true), del(2, 4, 5, true)]);
        assert!(check(&h).is_err());
    }

    #[test]
    fn keys_are_independent_and_violation_names_the_key() {
        let mut other = put(1, "z", 0, 10);
        other.op = KvOp::Put { key: "a".into(), value: "z".into() };
        let h = hist(vec![other, put(1, "a", 0, 10), get(2, Some("nope"), 20, 30)]);
        let err = check(&h).unwrap_err();
        assert_eq!(err.key, "k");
        assert_eq!(err.slice.len(), 1, "a read of a never-written value is a violation alone");
    }

    #[test]
    fn minimizing_keeps_the_writes_a_remaining_read_depends_on() {
        // A stale read: b was written (and acknowledged) before the last read, which still
        // sees a. Dropping put(a) would leave "read a value nobody wrote" as the reason.
        let h =
            hist(vec![put(1, "a", 0, 10), get(2, Some("a"), 20, 30), put(1, "b", 40, 50), get(2, Some("a"), 60, 70)]);
        let v = check(&h).unwrap_err();
        let shown: Vec<String> = v.slice.iter().map(|o| o.to_string()).collect();
        assert!(
            v.slice.iter().any(|o| o.op == KvOp::Put { key: "k".into(), value: "a".into() }),
            "the write of a must stay: {shown:?}"
        );
        assert!(v.slice.iter().any(|o| o.op == KvOp::Put { key: "k".into(), value: "b".into() }), "{shown:?}");
        assert_eq!(v.slice.len(), 3, "{shown:?}");
        // The slice is itself a violation, and every write it reads from is in it.
        let refs: Vec<&Operation> = v.slice.iter().collect();
        assert!(!check_ops(&refs));
        // A read of "absent" after a write keeps the delete that explains absence.
        let del = op(3, KvOp::Delete { key: "k".into() }, 12, Some(15), Some(KvOutput::Deleted(true)));
        let h = hist(vec![put(1, "a", 0, 10), del, get(2, None, 20, 30), put(1, "b", 40, 50), get(2, None, 60, 70)]);
        let v = check(&h).unwrap_err();
        assert!(v.slice.iter().any(|o| matches!(o.op, KvOp::Delete { .. })), "{:?}", v.slice);
        // A read of a value nobody ever wrote is still a violation of one operation.
        let h = hist(vec![put(1, "a", 0, 10), get(2, Some("zz"), 20, 30)]);
        assert_eq!(check(&h).unwrap_err().slice.len(), 1);
    }

    fn rich(c: u64, op: Op, stamp: u64, call: u64, ret: u64, out: OpResult) -> Operation {
        Operation {
            client: c,
            op: KvOp::Rich { op, stamp: Some(stamp) },
            call,
            ret: Some(ret),
            output: Some(KvOutput::Result(out)),
        }
    }
    fn bs(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn lists_transactions_and_multi_key_ops_are_checked_against_the_state_machine() {
        let push = |v: &str| Op::ListPush { key: bs("l"), values: vec![bs(v)], left: false, only_existing: false };
        let range = Op::ListRange { key: bs("l"), start: 0, stop: -1 };
        let items = |vs: &[&str]| OpResult::Items(Some(vs.iter().map(|v| bs(v)).collect()));
        // Two concurrent pushes, then a range: either order, but both present.
        let ok = vec![
            rich(1, push("a"), 11, 0, 10, OpResult::Int(1)),
            rich(2, push("b"), 12, 0, 10, OpResult::Int(2)),
            rich(3, range.clone(), 13, 20, 30, items(&["a", "b"])),
        ];
        assert!(check(&hist(ok)).is_ok());
        // A range that misses an acknowledged push (a lost write).
        let lost = vec![
            rich(1, push("a"), 11, 0, 10, OpResult::Int(1)),
            rich(2, push("b"), 12, 0, 10, OpResult::Int(2)),
            rich(3, range.clone(), 13, 20, 30, items(&["a"])),
        ];
        let v = check(&hist(lost)).unwrap_err();
        assert_eq!(v.key, "l");
        // A pop may not return an element twice.
        let pop = Op::ListPop { key: bs("l"), left: true, count: None };
        let twice = vec![
            rich(1, push("a"), 11, 0, 10, OpResult::Int(1)),
            rich(2, pop.clone(), 12, 20, 30, OpResult::Value(Some(bs("a")))),
            rich(3, pop, 13, 20, 30, OpResult::Value(Some(bs("a")))),
        ];
        assert!(check(&hist(twice)).is_err());
        // MSET is atomic: a concurrent MGET sees both keys old or both new, not a mix.
        let mset = Op::MultiPut { pairs: vec![(bs("x"), bs("1")), (bs("y"), bs("1"))] };
        let mget = Op::MultiGet { keys: vec![bs("x"), bs("y")] };
        let torn = vec![
            rich(1, mset.clone(), 21, 0, 100, OpResult::Done),
            rich(2, mget.clone(), 22, 10, 20, OpResult::Values(vec![Some(bs("1")), None])),
        ];
        assert!(check(&hist(torn)).is_err());
        let whole = vec![
            rich(1, mset, 21, 0, 100, OpResult::Done),
            rich(2, mget, 22, 10, 20, OpResult::Values(vec![Some(bs("1")), Some(bs("1"))])),
        ];
        assert!(check(&hist(whole)).is_ok());
        // INCRBY read-modify-writes: two acknowledged +1 from 0 cannot both return 1.
        let incr = Op::IncrBy { key: bs("n"), by: 1 };
        let h = vec![rich(1, incr.clone(), 31, 0, 10, OpResult::Int(1)), rich(2, incr, 32, 0, 10, OpResult::Int(1))];
        assert!(check(&hist(h)).is_err());
    }

    #[test]
    fn watch_aborts_iff_a_watched_key_changed() {
        let versions = Op::Versions { keys: vec![bs("w")] };
        let put = |v: &str| Op::Put { key: bs("w"), value: bs(v) };
        let multi = |watch: u64| Op::Multi { ops: vec![put("m")], watch: vec![(bs("w"), watch)] };
        // put (stamp 5) -> versions sees 5 -> another put (stamp 6) completes -> EXEC must abort.
        let base = vec![
            rich(1, put("a"), 5, 0, 10, OpResult::Done),
            rich(2, versions.clone(), 7, 20, 30, OpResult::Versions(vec![5])),
            rich(1, put("b"), 6, 40, 50, OpResult::Done),
        ];
        let mut executed = base.clone();
        executed.push(rich(2, multi(5), 8, 60, 70, OpResult::Multi(Some(vec![OpResult::Done]))));
        assert!(check(&hist(executed)).is_err(), "EXEC ran although the watched key changed");
        let mut aborted = base.clone();
        aborted.push(rich(2, multi(5), 8, 60, 70, OpResult::Multi(None)));
        assert!(check(&hist(aborted)).is_ok());
        // Versions must name the last writer's stamp.
        let wrong = vec![
            rich(1, put("a"), 5, 0, 10, OpResult::Done),
            rich(2, versions, 7, 20, 30, OpResult::Versions(vec![99])),
        ];
        assert!(check(&hist(wrong)).is_err());
    }

    #[test]
    fn scans_join_the_keys_of_their_range() {
        let scan = Op::Scan { start: bs("g1:"), end: bs("g1;"), limit: 0 };
        let put = |k: &str, v: &str| Op::Put { key: bs(k), value: bs(v) };
        // A scan after both puts completed must see both.
        let h = vec![
            rich(1, put("g1:0", "a"), 1, 0, 10, OpResult::Done),
            rich(2, put("g1:1", "b"), 2, 0, 10, OpResult::Done),
            rich(3, put("g2:0", "z"), 3, 0, 10, OpResult::Done),
            rich(4, scan.clone(), 4, 20, 30, OpResult::Scan(vec![(bs("g1:0"), bs("a"))])),
        ];
        assert!(check(&hist(h)).is_err());
        let h = vec![
            rich(1, put("g1:0", "a"), 1, 0, 10, OpResult::Done),
            rich(2, put("g1:1", "b"), 2, 0, 10, OpResult::Done),
            rich(3, put("g2:0", "z"), 3, 0, 10, OpResult::Done),
            rich(4, scan, 4, 20, 30, OpResult::Scan(vec![(bs("g1:0"), bs("a")), (bs("g1:1"), bs("b"))])),
        ];
        assert!(check(&hist(h)).is_ok());
    }

    /// The definition, by brute force: some subset of the indeterminate operations and some
    /// order of them and all completed ones that respects real time and the register's
    /// sequential semantics (no interning, no reductions).
    fn brute_force(ops: &[&Operation]) -> bool {
        fn go(ops: &[&Operation], placed: &mut Vec<bool>, state: &Option<String>) -> bool {
            if ops.iter().zip(placed.iter()).all(|(o, &p)| p || o.ret.is_none()) {
                return true;
            }
            for i in 0..ops.len() {
                let o = ops[i];
                // Every completed operation that returned before o's call must come first.
                let ready =
                    !placed[i] && ops.iter().zip(placed.iter()).all(|(a, &p)| p || a.ret.is_none_or(|r| r >= o.call));
                if !ready {
                    continue;
                }
                let (next, got) = match &o.op {
                    KvOp::Get { .. } => (state.clone(), KvOutput::Value(state.clone())),
                    KvOp::Put { value, .. } => (Some(value.clone()), KvOutput::Done),
                    KvOp::Delete { .. } => (None, KvOutput::Deleted(state.is_some())),
                    KvOp::Cas { expect, new, .. } => {
                        let ok = expect == state;
                        (if ok { new.clone() } else { state.clone() }, KvOutput::Cas { ok, current: state.clone() })
                    }
                    KvOp::Rich { .. } => unreachable!(),
                };
                if o.output.as_ref().is_some_and(|want| *want != got) {
                    continue;
                }
                placed[i] = true;
                let found = go(ops, placed, &next);
                placed[i] = false;
                if found {
                    return true;
                }
            }
            false
        }
        let kept: Vec<&Operation> = ops.iter().copied().filter(|o| !o.is_rejected()).collect();
        go(&kept, &mut vec![false; kept.len()], &None)
    }

    #[test]
    fn reductions_agree_with_the_definition_on_random_histories() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let vals = ["a", "b", "c"];
        let (mut yes, mut no) = (0, 0);
        for case in 0..30_000 {
            let n = rng.gen_range(2..=7);
            let mut ops = Vec::new();
            for c in 0..n {
                let v = |rng: &mut rand_chacha::ChaCha8Rng| -> Option<String> {
                    let i = rng.gen_range(0..=vals.len());
                    vals.get(i).map(|s| s.to_string())
                };
                let kind = match rng.gen_range(0..4) {
                    0 => KvOp::Get { key: "k".into() },
                    1 => KvOp::Put { key: "k".into(), value: vals[rng.gen_range(0..vals.len())].into() },
                    2 => KvOp::Delete { key: "k".into() },
                    _ => KvOp::Cas { key: "k".into(), expect: v(&mut rng), new: v(&mut rng) },
                };
                let call = rng.gen_range(0..20);
                let (ret, output) = if rng.gen_bool(0.4) {
                    (None, None)
                } else {
                    let out = match &kind {
                        KvOp::Get { .. } => KvOutput::Value(v(&mut rng)),
                        KvOp::Put { .. } => KvOutput::Done,
                        KvOp::Delete { .. } => KvOutput::Deleted(rng.gen_bool(0.5)),
                        _ => KvOutput::Cas { ok: rng.gen_bool(0.5), current: v(&mut rng) },
                    };
                    let out = if rng.gen_bool(0.1) { KvOutput::Rejected } else { out };
                    (Some(call + rng.gen_range(0..10)), Some(out))
                };
                ops.push(op(c, kind, call, ret, output));
            }
            let refs: Vec<&Operation> = ops.iter().collect();
            let want = brute_force(&refs);
            assert_eq!(check_ops(&refs), want, "case {case}: {:#?}", ops);
            if want {
                yes += 1;
            } else {
                no += 1;
            }
        }
        // Both verdicts are well represented, so the agreement means something.
        assert!(yes > 3_000 && no > 3_000, "linearizable {yes}, not {no}");
    }

    #[test]
    fn many_indeterminate_writes_stay_fast_and_a_stale_read_is_still_caught() {
        // What an overloaded IDEM leaves on a key: dozens of ambivalent (indeterminate)
        // writes nobody reads, among completed writes and reads. The search used to try
        // every subset of them (2^k); it must still catch a stale read.
        let mut ops = Vec::new();
        for i in 0..40u64 {
            let t = i * 100;
            let lost = |v: String, kind: u64| match kind {
                0 => KvOp::Put { key: "k".into(), value: v },
                1 => KvOp::Delete { key: "k".into() },
                _ => KvOp::Cas { key: "k".into(), expect: Some(format!("v{}", i.saturating_sub(1))), new: Some(v) },
            };
            ops.push(op(10 + i % 7, lost(format!("x{i}"), i % 3), t, None, None));
            ops.push(put(1, &format!("v{i}"), t + 10, t + 20));
            ops.push(get(2, Some(&format!("v{i}")), t + 30, t + 40));
        }
        let start = std::time::Instant::now();
        assert!(check(&hist(ops.clone())).is_ok());
        // A read of v3 after v39 was written and read: stale.
        ops.push(get(3, Some("v3"), 5_000, 5_010));
        let v = check(&hist(ops)).unwrap_err();
        assert!(v.slice.iter().any(|o| o.output == Some(KvOutput::Value(s("v3")))), "{v}");
        assert!(start.elapsed().as_secs() < 5, "took {:?}", start.elapsed());
    }

    #[test]
    fn many_concurrent_ops_are_fast() {
        // 200 ops in overlapping windows, all consistent with a sequential order.
        let mut ops = Vec::new();
        for i in 0..200u64 {
            let t = i * 10;
            ops.push(put(i % 5, &format!("v{i}"), t, t + 25));
            ops.push(get(5, Some(&format!("v{i}")), t + 26, t + 27));
        }
        let start = std::time::Instant::now();
        assert!(check(&hist(ops)).is_ok());
        assert!(start.elapsed().as_secs() < 5);
    }
}
