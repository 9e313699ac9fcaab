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
use std::collections::{BTreeMap, HashMap, HashSet};

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
pub fn check(history: &History) -> Result<(), LinViolation> {
    let mut by_key: BTreeMap<&str, Vec<&Operation>> = BTreeMap::new();
    for op in &history.ops {
        by_key.entry(op.op.key()).or_default().push(op);
    }
    for (key, ops) in by_key {
        if !check_ops(&ops) {
            let slice = minimize(&ops);
            return Err(LinViolation { key: key.to_string(), key_ops: ops.len(), slice });
        }
    }
    Ok(())
}

/// Whether operations on one key are linearizable.
pub fn check_ops(ops: &[&Operation]) -> bool {
    let mut interner = Interner::default();
    let compiled: Vec<Compiled> = ops.iter().filter(|o| !o.is_rejected()).map(|o| interner.compile(o)).collect();
    search(&compiled)
}

/// Values are interned to small integers so the model state is a `u32` (0 = absent).
#[derive(Default)]
struct Interner {
    ids: HashMap<String, u32>,
}

impl Interner {
    fn id(&mut self, v: &Option<String>) -> u32 {
        match v {
            None => 0,
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
        };
        let out = match &o.output {
            None => Out::Unknown,
            Some(KvOutput::Value(v)) => Out::Value(self.id(v)),
            Some(KvOutput::Done) => Out::Done,
            Some(KvOutput::Deleted(b)) => Out::Deleted(*b),
            Some(KvOutput::Cas { ok, current }) => Out::Cas { ok: *ok, current: self.id(current) },
            // Left out by `check_ops`; as a fallback it may take effect or not.
            Some(KvOutput::Rejected) => Out::Unknown,
        };
        let (ret, out) = match o.ret {
            Some(r) => (r, out),
            None => (u64::MAX, Out::Unknown),
        };
        Compiled { kind, out, call: o.call, ret }
    }
}

#[derive(Clone, Copy)]
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

/// Lowe's just-in-time linearization search over a doubly linked list of entries.
fn search(ops: &[Compiled]) -> bool {
    let n = ops.len();
    if n == 0 {
        return true;
    }
    // Entries sorted by time, calls before returns at equal times (closed intervals).
    let mut entries: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * n);
    for (i, o) in ops.iter().enumerate() {
        entries.push((o.call, false, i));
        entries.push((o.ret, true, i));
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
    let mut cache: HashSet<(Vec<u64>, u32)> = HashSet::new();
    let mut calls: Vec<(usize, u32)> = Vec::new();
    let mut state = 0u32;
    let mut entry = next[0];

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

    while next[0] != NIL {
        if is_call[entry] {
            let id = op_of[entry];
            match step(state, &ops[id]) {
                Some(new_state) => {
                    linearized[id / 64] |= 1 << (id % 64);
                    if cache.insert((linearized.clone(), new_state)) {
                        calls.push((entry, state));
                        state = new_state;
                        lift(entry, &mut next, &mut prev, ret_node[id]);
                        entry = next[0];
                    } else {
                        linearized[id / 64] &= !(1 << (id % 64));
                        entry = next[entry];
                    }
                }
                None => entry = next[entry],
            }
        } else {
            // A return whose call is not linearized yet: undo the last choice.
            let Some((e, s)) = calls.pop() else { return false };
            let id = op_of[e];
            state = s;
            linearized[id / 64] &= !(1 << (id % 64));
            unlift(e, &mut next, &mut prev, ret_node[id]);
            entry = next[e];
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
fn minimize(ops: &[&Operation]) -> Vec<Operation> {
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
        KvOp::Get { .. } => None,
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
        let h = hist(vec![
            put(1, "a", 0, 10),
            get(2, Some("a"), 20, 30),
            put(1, "b", 40, 50),
            get(2, Some("a"), 60, 70),
        ]);
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
        let h = hist(vec![
            put(1, "a", 0, 10),
            del,
            get(2, None, 20, 30),
            put(1, "b", 40, 50),
            get(2, None, 60, 70),
        ]);
        let v = check(&h).unwrap_err();
        assert!(v.slice.iter().any(|o| matches!(o.op, KvOp::Delete { .. })), "{:?}", v.slice);
        // A read of a value nobody ever wrote is still a violation of one operation.
        let h = hist(vec![put(1, "a", 0, 10), get(2, Some("zz"), 20, 30)]);
        assert_eq!(check(&h).unwrap_err().slice.len(), 1);
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
