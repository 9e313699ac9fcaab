//! Computing `deps` and `seq` (§4.3.1 lines 2–3 and 6–7, with the per-replica dependency
//! list of §4.5): for each key, the highest instance of each replica that touched it and the
//! highest `seq` among them. A conservative superset of the interfering instances is allowed
//! ("it can conservatively assume interference if uncertain", §5): reads are tracked like
//! writes, and range or whole-keyspace operations depend on everything.
//!
//! Session barriers ([`synod_core::session::is_barrier`]: the internal command at which the
//! state machine evicts sessions under a partial order) interfere with every command, so
//! every replica applies the same commands before each barrier.

use super::msg::Attrs;
use bytes::Bytes;
use std::collections::HashMap;
use synod_core::kv::Footprint;
use synod_core::session::is_barrier;
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

/// The instances recorded so far, per class of command: per key, per client session, range
/// and whole-keyspace commands, every command with a footprint, session barriers, and every
/// command. Both [`Conflicts`] (the instances in memory) and [`Forgotten`] (the ones dropped
/// from it) are one of these; they differ only in what a range command or a barrier looks
/// up.
struct Index {
    n: usize,
    keys: HashMap<Bytes, Marks>,
    sessions: HashMap<u64, Marks>,
    /// Range and whole-keyspace commands (related to every command with a footprint).
    wide: Marks,
    /// Every command with a footprint (what a range command is related to).
    keyed: Marks,
    /// Session barriers (related to every command).
    barriers: Marks,
    /// Every command (what a barrier is related to).
    every: Marks,
}

impl Index {
    fn new(n: usize) -> Index {
        let m = Marks::new(n);
        Index {
            n,
            keys: HashMap::new(),
            sessions: HashMap::new(),
            wide: m.clone(),
            keyed: m.clone(),
            barriers: m.clone(),
            every: m,
        }
    }

    fn record(&mut self, pos: usize, index: u64, cmds: &[Command], seq: u64) {
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
            if is_barrier(cmd) {
                self.barriers.note(pos, index, seq);
            }
            self.every.note(pos, index, seq);
        }
    }

    /// Add to `a` the recorded instances related to `cmds`: for a keyed command its keys and
    /// the range commands, for a range or whole-keyspace command `ranges`, for a barrier
    /// `barrier`; and the command's session and the barriers for every command.
    fn add_related(&self, cmds: &[Command], a: &mut Attrs, ranges: &Marks, barrier: &Marks) {
        for cmd in cmds {
            match cmd.op.footprint() {
                Footprint::None => {}
                Footprint::Keys(keys) => {
                    for k in keys {
                        if let Some(m) = self.keys.get(k) {
                            m.add_to(a);
                        }
                    }
                    self.wide.add_to(a);
                }
                Footprint::Range { .. } | Footprint::All => ranges.add_to(a),
            }
            if cmd.client != 0 {
                if let Some(m) = self.sessions.get(&cmd.client) {
                    m.add_to(a);
                }
            }
            if is_barrier(cmd) {
                barrier.add_to(a);
            }
            self.barriers.add_to(a);
        }
    }
}

pub(super) struct Conflicts {
    index: Index,
    /// Every instance (no-ops too): what a range or whole-keyspace operation, or a barrier,
    /// depends on.
    all: Marks,
}

impl Conflicts {
    pub(super) fn new(n: usize) -> Conflicts {
        Conflicts { index: Index::new(n), all: Marks::new(n) }
    }

    /// The attributes of `cmds` given everything recorded so far: `deps` the highest
    /// instance per replica of anything that may interfere, `seq` one more than the highest
    /// seq among those (line 2: 1 + max, 0 if none).
    pub(super) fn attrs_for(&self, cmds: &[Command]) -> Attrs {
        let mut a = Attrs { seq: 0, deps: vec![0; self.index.n] };
        self.index.add_related(cmds, &mut a, &self.all, &self.all);
        a.seq += 1;
        a
    }

    /// Record that instance `index` of replica `pos` holds `cmds` with sequence number `seq`
    /// (called for every pre-accept, accept and commit: seq only grows).
    pub(super) fn record(&mut self, pos: usize, index: u64, cmds: &[Command], seq: u64) {
        self.index.record(pos, index, cmds, seq);
        self.all.note(pos, index, seq);
    }

    /// Every later command depends on instance `index` of replica `pos` (an instance covered
    /// by a snapshot whose keys are no longer known).
    pub(super) fn record_wide(&mut self, pos: usize, index: u64, seq: u64) {
        self.index.wide.note(pos, index, seq);
        self.index.barriers.note(pos, index, seq);
        self.all.note(pos, index, seq);
    }
}

/// Whether two command batches interfere: some pair of their operations does, they belong
/// to the same client session, or one is a session barrier.
pub(super) fn interfere(a: &[Command], b: &[Command]) -> bool {
    a.iter().any(|x| {
        b.iter().any(|y| {
            (x.client != 0 && x.client == y.client) || is_barrier(x) || is_barrier(y) || x.op.interferes(&y.op)
        })
    })
}

/// Whether two commands are *related*: they share a key, or one touches a range or the whole
/// key space and the other touches any key, or they belong to the same client session, or
/// one is a session barrier. A
/// symmetric superset of interference ([`interfere`]) and a subset of what [`Conflicts`]
/// makes a command depend on in *both* directions: for a related pair, whichever of the two a
/// replica pre-accepts second gets the other in its `deps`. The optimized recovery (§4.4)
/// reasons about related pairs: "γ committed on the fast path with `deps` A" excludes a
/// related δ that is neither in A nor has γ in its own `deps`.
pub(super) fn related(x: &Command, y: &Command) -> bool {
    if (x.client != 0 && x.client == y.client) || is_barrier(x) || is_barrier(y) {
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
/// everywhere, dropped from memory). A TryPreAccept (§4.4) must check forgotten instances
/// too; [`Forgotten::lookup`] returns, for a batch, the highest forgotten instance per
/// replica *related* to it and their highest seq — exactly the related pairs, nothing else.
pub(super) struct Forgotten {
    index: Index,
}

impl Forgotten {
    pub(super) fn new(n: usize) -> Forgotten {
        Forgotten { index: Index::new(n) }
    }

    pub(super) fn record(&mut self, pos: usize, index: u64, cmds: &[Command], seq: u64) {
        self.index.record(pos, index, cmds, seq);
    }

    /// The highest forgotten instance per replica related to `cmds`, and the highest seq
    /// among all forgotten instances related to it (0 for none).
    pub(super) fn lookup(&self, cmds: &[Command]) -> Attrs {
        let mut a = Attrs { seq: 0, deps: vec![0; self.index.n] };
        self.index.add_related(cmds, &mut a, &self.index.keyed, &self.index.every);
        a
    }
}
