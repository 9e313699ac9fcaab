//! Computing `deps` and `seq` (§4.3.1 lines 2–3 and 6–7, with the per-replica dependency
//! list of §4.5): for each key, the highest instance of each replica that touched it and the
//! highest `seq` among them. A conservative superset of the interfering instances is allowed
//! ("it can conservatively assume interference if uncertain", §5): reads are tracked like
//! writes, and range or whole-keyspace operations depend on everything.

use super::msg::Attrs;
use bytes::Bytes;
use std::collections::HashMap;
use synod_core::kv::Footprint;
use synod_core::Command;

/// Highest instance per replica and highest seq, for one key (or one class of commands).
#[derive(Clone, Debug)]
struct Marks {
    idx: Vec<u64>,
    seq: u64,
}

impl Marks {
    fn new(n: usize) -> Marks {
        Marks { idx: vec![0; n], seq: 0 }
    }

    fn note(&mut self, pos: usize, index: u64, seq: u64) {
        self.idx[pos] = self.idx[pos].max(index);
        self.seq = self.seq.max(seq);
    }

    fn add_to(&self, a: &mut Attrs) {
        for (d, &i) in a.deps.iter_mut().zip(&self.idx) {
            *d = (*d).max(i);
        }
        a.seq = a.seq.max(self.seq);
    }
}

pub(super) struct Conflicts {
    n: usize,
    keys: HashMap<Bytes, Marks>,
    /// Per client session: all commands of a session interfere (module docs).
    sessions: HashMap<u64, Marks>,
    /// Range and whole-keyspace operations: every command depends on them.
    wide: Marks,
    /// Every instance: what a range or whole-keyspace operation depends on.
    all: Marks,
}

impl Conflicts {
    pub(super) fn new(n: usize) -> Conflicts {
        Conflicts { n, keys: HashMap::new(), sessions: HashMap::new(), wide: Marks::new(n), all: Marks::new(n) }
    }

    /// The attributes of `cmds` given everything recorded so far: `deps` the highest
    /// instance per replica of anything that may interfere, `seq` one more than the highest
    /// seq among those (line 2: 1 + max, 0 if none).
    pub(super) fn attrs_for(&self, cmds: &[Command]) -> Attrs {
        let mut a = Attrs { seq: 0, deps: vec![0; self.n] };
        for cmd in cmds {
            match cmd.op.footprint() {
                Footprint::None => {}
                Footprint::Keys(keys) => {
                    for k in keys {
                        if let Some(m) = self.keys.get(k) {
                            m.add_to(&mut a);
                        }
                    }
                    self.wide.add_to(&mut a);
                }
                Footprint::Range { .. } | Footprint::All => {
                    self.all.add_to(&mut a);
                }
            }
            if cmd.client != 0 {
                if let Some(m) = self.sessions.get(&cmd.client) {
                    m.add_to(&mut a);
                }
            }
        }
        a.seq += 1;
        a
    }

    /// Record that instance `index` of replica `pos` holds `cmds` with sequence number `seq`
    /// (called for every pre-accept, accept and commit: seq only grows).
    pub(super) fn record(&mut self, pos: usize, index: u64, cmds: &[Command], seq: u64) {
        let n = self.n;
        for cmd in cmds {
            match cmd.op.footprint() {
                Footprint::None => {}
                Footprint::Keys(keys) => {
                    for k in keys {
                        match self.keys.get_mut(k) {
                            Some(m) => m.note(pos, index, seq),
                            None => {
                                let mut m = Marks::new(n);
                                m.note(pos, index, seq);
                                self.keys.insert(Bytes::copy_from_slice(k), m);
                            }
                        }
                    }
                }
                Footprint::Range { .. } | Footprint::All => self.wide.note(pos, index, seq),
            }
            if cmd.client != 0 {
                self.sessions.entry(cmd.client).or_insert_with(|| Marks::new(n)).note(pos, index, seq);
            }
        }
        self.all.note(pos, index, seq);
    }
}

impl Conflicts {
    /// Every later command depends on instance `index` of replica `pos` (an instance covered
    /// by a snapshot whose keys are no longer known).
    pub(super) fn record_wide(&mut self, pos: usize, index: u64, seq: u64) {
        self.wide.note(pos, index, seq);
        self.all.note(pos, index, seq);
    }
}

/// Whether two command batches interfere: some pair of their operations does, or they belong
/// to the same client session.
pub(super) fn interfere(a: &[Command], b: &[Command]) -> bool {
    a.iter().any(|x| b.iter().any(|y| (x.client != 0 && x.client == y.client) || x.op.interferes(&y.op)))
}

/// Whether two commands are *related*: they share a key, or one touches a range or the whole
/// key space and the other touches any key, or they belong to the same client session. A
/// symmetric superset of interference ([`interfere`]) and a subset of what [`Conflicts`]
/// makes a command depend on in *both* directions: for a related pair, whichever of the two a
/// replica pre-accepts second gets the other in its `deps`. The optimized recovery (§4.4)
/// reasons about related pairs: "γ committed on the fast path with `deps` A" excludes a
/// related δ that is neither in A nor has γ in its own `deps`.
pub(super) fn related(x: &Command, y: &Command) -> bool {
    if x.client != 0 && x.client == y.client {
        return true;
    }
    match (x.op.footprint(), y.op.footprint()) {
        (Footprint::None, _) | (_, Footprint::None) => false,
        (Footprint::Keys(a), Footprint::Keys(b)) => a.iter().any(|k| b.contains(k)),
        _ => true,
    }
}

/// [`related`] for batches.
pub(super) fn related_batches(a: &[Command], b: &[Command]) -> bool {
    a.iter().any(|x| b.iter().any(|y| related(x, y)))
}

/// What a replica still knows about the instances it has forgotten (executed, committed
/// everywhere, dropped from memory): per key, per session, and for range/whole-keyspace
/// commands, the highest forgotten instance of each replica and the highest `seq` among them.
/// A TryPreAccept (§4.4) must check forgotten instances too; [`Forgotten::lookup`] returns,
/// for a batch, the highest forgotten instance per replica *related* to it and their highest
/// seq — exactly the related pairs, nothing else.
pub(super) struct Forgotten {
    n: usize,
    keys: HashMap<Bytes, Marks>,
    sessions: HashMap<u64, Marks>,
    /// Range and whole-keyspace commands (related to every command with a footprint).
    wide: Marks,
    /// Every command with a footprint (what a range command is related to).
    keyed: Marks,
}

impl Forgotten {
    pub(super) fn new(n: usize) -> Forgotten {
        Forgotten { n, keys: HashMap::new(), sessions: HashMap::new(), wide: Marks::new(n), keyed: Marks::new(n) }
    }

    pub(super) fn record(&mut self, pos: usize, index: u64, cmds: &[Command], seq: u64) {
        let n = self.n;
        for cmd in cmds {
            match cmd.op.footprint() {
                Footprint::None => {}
                Footprint::Keys(keys) => {
                    for k in keys {
                        match self.keys.get_mut(k) {
                            Some(m) => m.note(pos, index, seq),
                            None => {
                                let mut m = Marks::new(n);
                                m.note(pos, index, seq);
                                self.keys.insert(Bytes::copy_from_slice(k), m);
                            }
                        }
                    }
                    self.keyed.note(pos, index, seq);
                }
                Footprint::Range { .. } | Footprint::All => {
                    self.wide.note(pos, index, seq);
                    self.keyed.note(pos, index, seq);
                }
            }
            if cmd.client != 0 {
                self.sessions.entry(cmd.client).or_insert_with(|| Marks::new(n)).note(pos, index, seq);
            }
        }
    }

    /// The highest forgotten instance per replica related to `cmds`, and the highest seq
    /// among all forgotten instances related to it (0 for none).
    pub(super) fn lookup(&self, cmds: &[Command]) -> Attrs {
        let mut a = Attrs { seq: 0, deps: vec![0; self.n] };
        for cmd in cmds {
            match cmd.op.footprint() {
                Footprint::None => {}
                Footprint::Keys(keys) => {
                    for k in keys {
                        if let Some(m) = self.keys.get(k) {
                            m.add_to(&mut a);
                        }
                    }
                    self.wide.add_to(&mut a);
                }
                Footprint::Range { .. } | Footprint::All => self.keyed.add_to(&mut a),
            }
            if cmd.client != 0 {
                if let Some(m) = self.sessions.get(&cmd.client) {
                    m.add_to(&mut a);
                }
            }
        }
        a
    }
}
