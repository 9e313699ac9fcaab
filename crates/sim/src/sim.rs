//! The deterministic simulator.
//!
//! One run = N replicas of a protocol + a few client sessions on virtual time, driven by a
//! single seed. Events (message deliveries, timers, storage completions, client traffic,
//! faults) sit in a binary heap ordered by (virtual time, insertion number), so the run is
//! a pure function of the seed and the configuration: two runs of one seed produce the
//! same trace byte for byte.
//!
//! A run has two phases. In the *fault phase* the network loses, duplicates and reorders
//! messages, partitions come and go, replicas crash and restart (keeping or — with
//! `crash-wipe` — losing their disk) and clocks are skewed. Then everything is healed and
//! the *liveness phase* requires every client operation to complete and the replicas to
//! converge within a bounded virtual time.
//!
//! The driver contract of `synod_core::protocol` is honoured exactly like the tokio runtime
//! does: actions execute in order, `Apply` runs the command on the replica's own
//! `StateMachine` and answers the named client. Without the storage faults a `Persist` is
//! durable at once (so a later send is safe) and `Persisted` comes back after a storage
//! delay; with `storage`/`fsync-error` it is durable when its fsync completes and everything
//! sent after it waits for that (see [`FaultSet::storage`]).

use crate::history::{History, KvOp, KvOutput, Operation};
use crate::linearizability;
use bytes::Bytes;
use rand::Rng as _;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::fmt;
use std::time::Duration;
use synod_core::client_policy::{ClientAction, ClientConfig, ClientCtx, ClientPolicy, Outcome, RetryTimes};
use synod_core::session::StateMachine;
use synod_core::speculation::Speculation;
use synod_core::RequestMeta;
use synod_core::{
    Action, ClientRef, Command, Ctx, Event, Ghost, MemberChange, NodeId, Op, OpResult, Pos, Protocol, ProtocolParams,
    Reply, ReplyBody, Rng, Role, SpeculativeReply, Status, Time, TimerId,
};
use synod_protocols::registry::{ProtocolInfo, Setup};

// ---------------------------------------------------------------------------------------
// Configuration

/// Which faults a run injects. `crash_wipe` (restart with an empty disk) is separate and
/// off by default: it is only safe for protocols that recover from their peers (MultiPaxos
/// without its disk is *not* safe).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultSet {
    pub partition: bool,
    pub crash: bool,
    /// Now and then every replica crashes at once (power loss of the whole cluster) and
    /// they restart from their disks at different times: nothing acknowledged may be lost.
    pub crash_all: bool,
    pub crash_wipe: bool,
    pub loss: bool,
    pub dup: bool,
    pub reorder: bool,
    pub skew: bool,
    /// Clocks that jump (up to ±`ClockBounds::jump`, forwards or backwards) and change their drift
    /// (within ±`ClockBounds::drift_ppm`) at random moments of the fault phase. Off in `all`: only
    /// for protocols whose correctness claims not to depend on clocks (Nezha).
    pub clock_jump: bool,
    /// Storage with a volatile and a durable part, as a disk with `fsync = always`: a
    /// `Persist` is written at once but durable only when its fsync completes (the
    /// storage-done event, after a random delay; fsyncs complete in order), and everything
    /// the replica sends or answers after it is held back until then (the driver contract).
    /// A crash keeps the durable part and a random prefix of the unsynced records, in record
    /// order (the write-back of the page cache got that far); the record after the prefix
    /// may be torn, which WAL recovery truncates, so it is lost too.
    pub storage: bool,
    /// Now and then an fsync returns an error. The runtime's node loop then stops (a failed
    /// commit ends the replica; nothing held back is released, see `crates/runtime/src/node.rs`
    /// `finish_turn`, and the WAL is poisoned): the simulator crashes the replica at that
    /// moment, keeping a random prefix of the unsynced records (after a failed `fdatasync`
    /// the kernel may have written some pages or none), and restarts it later.
    pub fsync_error: bool,
    /// Storage as a disk with `fsync = batch` (`crates/wal`, `FsyncMode::Batch`): a `Persist`
    /// is written at once and counts as done at once (`Persisted` after the write, messages
    /// and answers released without waiting, as the runtime does), and a flusher makes it
    /// durable [`BATCH_INTERVAL`] after the first unsynced write plus the fsync's own time.
    /// A power loss (a whole-cluster crash, `crash-all`) keeps the durable part and a random
    /// prefix of the rest; a single replica's crash is a process crash and keeps everything
    /// written (the page cache). The check then allows exactly the documented window to be
    /// lost: operations answered within [`batch_window`] before a power loss count as
    /// indeterminate (writes) or are dropped (reads). Not in `all`.
    pub fsync_batch: bool,
}

/// The WAL's default `batch_interval` (`WalOptions::DEFAULT_BATCH_INTERVAL`, 2 ms).
pub const BATCH_INTERVAL: u64 = 2 * MS;

/// The longest fsync the storage model draws (both `storage` and `fsync-batch`).
const MAX_FSYNC: u64 = 3 * MS;

/// With `fsync-batch`: how long before a power loss an acknowledged write may be lost. A
/// record written at t is durable by t + `BATCH_INTERVAL` (the flusher starts) + the fsync
/// in flight then (fsyncs complete in order) + its own fsync.
pub fn batch_window() -> Duration {
    Duration::from_nanos(BATCH_INTERVAL + 2 * MAX_FSYNC)
}

const FAULT_NAMES: &[&str] = &[
    "partition",
    "crash",
    "crash-all",
    "crash-wipe",
    "loss",
    "dup",
    "reorder",
    "skew",
    "clock-jump",
    "storage",
    "fsync-error",
    "fsync-batch",
];

impl FaultSet {
    /// Every fault except `crash-wipe`.
    pub fn all() -> FaultSet {
        FaultSet {
            partition: true,
            crash: true,
            crash_all: true,
            crash_wipe: false,
            loss: true,
            dup: true,
            reorder: true,
            skew: true,
            clock_jump: false,
            storage: true,
            fsync_error: true,
            fsync_batch: false,
        }
    }

    pub fn none() -> FaultSet {
        FaultSet::default()
    }

    /// Parse a comma list of fault names, `all` or `none`.
    pub fn parse(list: &str) -> Result<FaultSet, String> {
        let mut f = FaultSet::none();
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match name {
                "all" => {
                    let (wipe, jump, batch) = (f.crash_wipe, f.clock_jump, f.fsync_batch);
                    f = FaultSet::all();
                    f.crash_wipe = wipe;
                    f.clock_jump = jump;
                    f.fsync_batch = batch;
                }
                "none" => {}
                "partition" => f.partition = true,
                "crash" => f.crash = true,
                "crash-all" => f.crash_all = true,
                "crash-wipe" => f.crash_wipe = true,
                "loss" => f.loss = true,
                "dup" => f.dup = true,
                "reorder" => f.reorder = true,
                "skew" => f.skew = true,
                "clock-jump" => f.clock_jump = true,
                "storage" => f.storage = true,
                "fsync-error" => f.fsync_error = true,
                "fsync-batch" => f.fsync_batch = true,
                other => return Err(format!("unknown fault {other:?}; known: all, none, {}", FAULT_NAMES.join(", "))),
            }
        }
        Ok(f)
    }

    /// Whether `Persist` goes through the volatile/durable storage model.
    pub fn volatile_storage(&self) -> bool {
        self.storage || self.fsync_error || self.fsync_batch
    }

    /// The canonical comma list (for replay commands).
    pub fn to_list(&self) -> String {
        let on = [
            self.partition,
            self.crash,
            self.crash_all,
            self.crash_wipe,
            self.loss,
            self.dup,
            self.reorder,
            self.skew,
            self.clock_jump,
            self.storage,
            self.fsync_error,
            self.fsync_batch,
        ];
        let names: Vec<&str> = FAULT_NAMES.iter().zip(on).filter(|(_, on)| *on).map(|(n, _)| *n).collect();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(",")
        }
    }
}

/// Everything that determines a run (together with the protocol code).
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub protocol: &'static ProtocolInfo,
    pub seed: u64,
    /// 3 or 5 (any n >= 1 works).
    pub replicas: usize,
    pub faults: FaultSet,
    /// Client sessions; None = 3 to 5, chosen by the seed.
    pub clients: Option<usize>,
    /// Operations each client issues.
    pub ops_per_client: usize,
    /// Size of the key set (small, to force conflicts).
    pub keys: usize,
    /// The rich workload (`synod check --workload rich`): every operation kind the checker's
    /// state-machine model covers (lists, INCR, APPEND, multi-key operations, scans,
    /// MULTI/EXEC with and without WATCH) on groups of 4 keys (`g<G>:<i>`; even groups hold
    /// strings, odd ones lists); multi-key operations and scans stay inside a group, so
    /// the checker splits the history by group.
    pub rich: bool,
    /// The first `readers` clients issue only Gets (lease reads: a client stuck on a write
    /// at a deposed leader never reads from it again; a reader keeps doing so).
    pub readers: usize,
    /// Virtual duration of the fault phase.
    pub fault_phase: Duration,
    /// After healing, everything must complete and converge within this virtual time.
    pub liveness_timeout: Duration,
    pub params: ProtocolParams,
    /// Vary the batching, pipelining, catch-up and snapshot knobs per seed (half of the
    /// seeds keep `params`): small windows, chunks and frequent snapshots reach code paths
    /// (flow control, chunked catch-up, InstallSnapshot) the defaults never do in a short run.
    pub fuzz_params: bool,
    /// Collect a readable trace (one line per event).
    pub trace: bool,
    /// Scripted network shapes applied at fixed virtual times (on top of the random
    /// faults; the heal at the end of the fault phase clears them too). Used to replay the
    /// partition shapes of the HoliPaxos evaluation.
    pub script: Vec<ScriptedCut>,
    /// Virtual times at which every replica's status is recorded into the report.
    pub probes: Vec<Duration>,
    /// Replicas outside the initial configuration: built as learners (their protocol's
    /// `Setup.members` leaves them out) until a scripted change adds them.
    pub learners: Vec<NodeId>,
    /// Membership changes requested from the current leader at fixed virtual times,
    /// retried until one is answered `Done` (docs/design.md, "Membership").
    pub changes: Vec<ScriptedChange>,
    /// How far the `skew` and `clock-jump` faults move clocks.
    pub clocks: ClockBounds,
}

/// The bounds of the clock faults: with `skew`, every replica's and client's clock starts
/// up to ±`skew` off and drifts by up to ±`drift_ppm`; with `clock-jump`, it also jumps up
/// to `JUMPS` times by up to ±`jump` (its drift changing within ±`drift_ppm`). The
/// replicas' and clients' `clock_error` (`Ctx`, `ClientCtx`) is the bound these imply: `skew`
/// plus `JUMPS` × `jump` with jumps, plus `drift_ppm` of the virtual time elapsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockBounds {
    pub skew: Duration,
    pub drift_ppm: u32,
    pub jump: Duration,
}

impl Default for ClockBounds {
    fn default() -> Self {
        ClockBounds { skew: Duration::from_millis(300), drift_ppm: 500, jump: Duration::from_millis(200) }
    }
}

/// At `at`, ask the current leader for `change` (again every 200 ms until it is done).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptedChange {
    pub at: Duration,
    pub change: MemberChange,
}

/// At `at`, replace the cut replica links by `links` (both directions; empty = reconnect).
/// With `leader_as = Some(x)`, node ids `x` and the current leader (the live leader with the
/// highest ballot) swap places in `links`, so a shape defined for "the leader is x" applies
/// to whichever replica leads when it starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScriptedCut {
    pub at: Duration,
    pub links: Vec<(NodeId, NodeId)>,
    pub leader_as: Option<NodeId>,
}

/// Every replica's status at one probe time (None = crashed).
#[derive(Clone, Debug)]
pub struct Probe {
    pub at: Duration,
    pub statuses: Vec<Option<Status>>,
}

impl SimConfig {
    pub fn new(protocol: &'static ProtocolInfo, seed: u64) -> SimConfig {
        SimConfig {
            protocol,
            seed,
            replicas: 3,
            faults: FaultSet::all(),
            clients: None,
            ops_per_client: 30,
            keys: 3,
            rich: false,
            readers: 0,
            fault_phase: Duration::from_secs(5),
            liveness_timeout: Duration::from_secs(30),
            params: ProtocolParams::default(),
            fuzz_params: true,
            trace: false,
            script: Vec::new(),
            probes: Vec::new(),
            learners: Vec::new(),
            changes: Vec::new(),
            clocks: ClockBounds::default(),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Results

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// The protocol could not be built or restarted.
    Setup,
    /// Two replicas applied different commands at one position.
    Agreement,
    /// A replica applied one position twice (without a restart or snapshot in between).
    DoubleApply,
    /// Replicas that executed the same number of commands have different states.
    Divergence,
    /// A snapshot the protocol asked to install does not decode.
    Snapshot,
    /// A reply whose result does not fit the operation.
    BadReply,
    /// After healing, operations did not complete or replicas did not converge in time.
    Liveness,
    /// The client history is not linearizable.
    Linearizability,
    /// A protocol invariant on the facts the protocol reported about itself broke
    /// (`Ghost`: e.g. IDEM ordered a request a majority had not accepted).
    Invariant,
}

#[derive(Clone, Debug)]
pub struct Failure {
    pub kind: FailureKind,
    /// Virtual time of detection (ns).
    pub at: u64,
    pub detail: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} violation at {}: {}", self.kind, Time(self.at), self.detail)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunStats {
    pub events: u64,
    pub messages_sent: u64,
    pub messages_dropped: u64,
    pub ops_completed: u64,
    pub ops_indeterminate: u64,
    /// Operations the client policy reported rejected for good (IDEM: every replica refused
    /// them); they are in `ops_completed` and checked never to take effect.
    pub ops_rejected: u64,
    pub crashes: u64,
    /// Times every replica crashed at once (fault `crash-all`).
    pub cluster_crashes: u64,
    /// Volatile storage: records written but not yet fsynced that crashes lost, crashes
    /// that left a torn record (truncated by recovery), fsyncs that failed.
    pub unsynced_lost: u64,
    pub torn_records: u64,
    pub fsync_errors: u64,
    pub partitions: u64,
    /// Scripted membership changes that completed.
    pub membership_changes: u64,
    /// Reads answered from a leader's lease (`Action::Read`), judged by the history check.
    pub lease_reads: u64,
    /// Virtual time at the end of the run (ns).
    pub virtual_end: u64,
    /// Applied client commands checked against the replicas that reported accepting them
    /// (ghost facts, [`Ghost`]).
    pub ghost_apply_checks: u64,
    /// Implicit garbage collections checked against Theorem 6.1's rule (`Ghost::Discarded`).
    pub ghost_discard_checks: u64,
    /// The client policies' counters (`ClientPolicy::counters`, e.g. Nezha's fast and slow
    /// commits), summed over the clients.
    pub client_counters: BTreeMap<&'static str, u64>,
}

#[derive(Clone, Debug)]
pub struct RunReport {
    pub seed: u64,
    pub failure: Option<Failure>,
    pub history: History,
    /// Empty unless `SimConfig::trace`.
    pub trace: Vec<String>,
    pub stats: RunStats,
    /// The protocol parameters the run used (after fuzzing).
    pub params: ProtocolParams,
    /// Statuses recorded at `SimConfig::probes`, then at the end of the run.
    pub probes: Vec<Probe>,
}

// ---------------------------------------------------------------------------------------
// Randomness: every stream derives from the one seed.

const STREAM_NET: u64 = 1;
const STREAM_FAULTS: u64 = 2;
const STREAM_CLIENT: u64 = 3;
const STREAM_REPLICA: u64 = 4;
const STREAM_SETUP: u64 = 5;

/// Orders "round.node" ballots and plain terms numerically (statuses print them as text).
fn ballot_key(b: &str) -> (u64, u64) {
    let mut it = b.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d049bb133111eb);
    x ^ (x >> 31)
}

fn derive_rng(seed: u64, stream: u64, index: u64) -> Rng {
    synod_core::rng_from_seed(splitmix(splitmix(seed ^ splitmix(stream)) ^ index))
}

fn uniform(rng: &mut Rng, lo: u64, hi: u64) -> u64 {
    if hi <= lo {
        lo
    } else {
        rng.gen_range(lo..=hi)
    }
}

fn exponential(rng: &mut Rng, mean: u64) -> u64 {
    let u: f64 = rng.gen();
    (-(mean as f64) * (1.0 - u).ln()).min(mean as f64 * 20.0) as u64
}

/// Per-seed protocol knobs: half the seeds keep `base`, the others get small batches,
/// windows and chunks and frequent snapshots.
fn fuzz(base: &ProtocolParams, rng: &mut Rng) -> ProtocolParams {
    let mut p = base.clone();
    if rng.gen_bool(0.5) {
        return p;
    }
    let pick = |rng: &mut Rng, choices: &[u64]| choices[rng.gen_range(0..choices.len())];
    p.max_batch = pick(rng, &[1, 2, 8, base.max_batch as u64]) as usize;
    p.pipeline_window = pick(rng, &[1, 2, 8, base.pipeline_window as u64]) as usize;
    p.catchup_chunk = pick(rng, &[1, 3, 16, base.catchup_chunk as u64]) as usize;
    p.snapshot_every = pick(rng, &[base.snapshot_every, 10, 30, 100]);
    p.snapshot_keep = pick(rng, &[0, 2, 10, 50]).min(p.snapshot_every);
    p.snapshot_chunk_bytes = pick(rng, &[16, 200, 4096, base.snapshot_chunk_bytes as u64]) as usize;
    p
}

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

// ---------------------------------------------------------------------------------------
// Events

enum Ev {
    /// A peer message arriving at replica `to` (dropped if `to` restarted since it was sent).
    Deliver {
        to: usize,
        incarnation: u64,
        from: NodeId,
        sent_at: Time,
        msg: Bytes,
    },
    Timer {
        node: usize,
        incarnation: u64,
        timer: TimerId,
        generation: u64,
    },
    Persisted {
        node: usize,
        incarnation: u64,
        token: u64,
    },
    /// The fsync of persist number `seq` (volatile storage) completes: it and every earlier
    /// persist are durable, or the fsync fails.
    Synced {
        node: usize,
        incarnation: u64,
        seq: u64,
        /// The persist to answer with `Persisted` (None: a batch flush, `fsync-batch`,
        /// whose persists were answered at their write).
        token: Option<u64>,
    },
    /// `fsync-batch`: the flusher of `node` starts an fsync of everything written so far.
    BatchFlush {
        node: usize,
        incarnation: u64,
    },
    Snapshot {
        node: usize,
        incarnation: u64,
        token: u64,
        data: Bytes,
    },
    /// A background compaction (`CompactDurable`) replaces the durable records now.
    Compacted {
        node: usize,
        incarnation: u64,
        id: u64,
    },
    /// A client request arriving at a replica.
    Request {
        node: usize,
        client: usize,
        cmd: Command,
        meta: RequestMeta,
    },
    /// A reply arriving at a client.
    Response {
        client: usize,
        reply: Reply,
    },
    ClientIssue {
        client: usize,
    },
    /// One of the client policy's timers; stale unless `generation` is still the armed one.
    ClientTimer {
        client: usize,
        id: u64,
        generation: u64,
    },
    /// The client could not reach replica `node` (its link is cut or the replica is down:
    /// a refused connection) for request `seq`.
    ClientUnreachable {
        client: usize,
        seq: u64,
        node: NodeId,
    },
    /// The fault-phase retry budget of request `seq` is spent.
    ClientGiveUp {
        client: usize,
        seq: u64,
    },
    FaultTick,
    /// Fault `storage`: a crash aimed inside the fsync window of a persist of `node` (it
    /// alone, or with `crash-all` sometimes the whole cluster: a power loss).
    StorageCrash {
        node: usize,
        incarnation: u64,
    },
    Restart {
        node: usize,
        incarnation: u64,
        wipe: bool,
    },
    /// The end of replica `node`'s turn ([`Protocol::flush`]): scheduled with zero delay
    /// after its first event since the last one, so it runs after every other event due at
    /// the same instant (those form one turn, as a real node loop drains what is ready).
    Flush {
        node: usize,
        incarnation: u64,
    },
    Heal,
    ConvergeCheck,
    Script(usize),
    /// Request scripted membership change `i`.
    Change(usize),
    Probe(Duration),
}

struct Scheduled {
    at: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    /// Reversed: BinaryHeap is a max-heap and we want the earliest (time, seq) first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

// ---------------------------------------------------------------------------------------
// Network

/// Endpoints of a link: replicas by index, clients offset past them.
type Endpoint = usize;

struct Net {
    rng: Rng,
    base: u64,
    jitter: u64,
    loss: f64,
    dup: f64,
    /// Probability of an extra delay that reorders a message past later ones.
    reorder: f64,
    /// Directed replica links that are cut (from index, to index).
    cut: BTreeSet<(usize, usize)>,
    /// Replicas that clients cannot reach (fully isolated nodes).
    client_cut: BTreeSet<usize>,
    /// Latest arrival per directed link, to keep links FIFO when reordering is off.
    last_arrival: BTreeMap<(Endpoint, Endpoint), u64>,
}

impl Net {
    /// Arrival times of a message sent now (none if lost, two if duplicated).
    fn transmit(&mut self, from: Endpoint, to: Endpoint, now: u64) -> Vec<u64> {
        let mut out = Vec::new();
        if self.loss > 0.0 && self.rng.gen_bool(self.loss) {
            return out;
        }
        let copies = if self.dup > 0.0 && self.rng.gen_bool(self.dup) { 2 } else { 1 };
        for _ in 0..copies {
            let mut delay = self.base + exponential(&mut self.rng, self.jitter);
            let mut at = now + delay;
            if self.reorder > 0.0 {
                if self.rng.gen_bool(self.reorder) {
                    delay += uniform(&mut self.rng, MS, 30 * MS);
                    at = now + delay;
                }
            } else {
                let last = self.last_arrival.entry((from, to)).or_insert(0);
                at = at.max(*last);
                *last = at;
            }
            out.push(at);
        }
        out
    }
}

// ---------------------------------------------------------------------------------------
// Replicas

/// A background compaction in flight (see `Action::CompactDurable`).
struct Compaction {
    id: u64,
    token: u64,
    image: Vec<Bytes>,
    /// Records persisted since it began; they follow the image.
    tail: Vec<Bytes>,
}

/// Something a replica sends or answers (held back behind an unsynced persist).
enum Out {
    Send {
        to: NodeId,
        msg: Bytes,
    },
    Broadcast {
        msg: Bytes,
    },
    Reply {
        client: ClientRef,
        reply: Reply,
    },
    /// The result of an `Apply`, `Read` or `Speculate` for a client of this replica.
    ClientReply {
        conn: u64,
        reply: Reply,
    },
}

/// Every replica's clock starts here, so negative skews stay representable.
const CLOCK_BASE: i64 = 1_000_000_000_000;

struct Replica {
    id: NodeId,
    /// None while crashed.
    proto: Option<Box<dyn Protocol>>,
    sm: StateMachine,
    /// What the replica persisted (survives crashes unless wiped).
    durable: Vec<Bytes>,
    /// Volatile storage (faults `storage`, `fsync-error`): records written but not yet
    /// fsynced, with the number of the persist they belong to.
    volatile: std::collections::VecDeque<(u64, Bytes)>,
    /// Persists issued and persists known durable (volatile storage).
    persists: u64,
    synced: u64,
    /// When the last fsync in flight completes (fsyncs complete in order).
    sync_busy_until: u64,
    /// `fsync-batch`: a flush is scheduled (the flusher runs BATCH_INTERVAL after the first
    /// unsynced write).
    flush_armed: bool,
    /// Outputs pushed after a persist that is not durable yet, with the persist number they
    /// wait for (the driver contract: "persist, then send").
    held: std::collections::VecDeque<(u64, Out)>,
    /// A `CompactDurable` being "written": until it completes, `durable` is the content and
    /// persists go to both; a crash forgets it.
    compacting: Option<Compaction>,
    next_compaction: u64,
    /// Armed timers and their generation; a firing with another generation is stale.
    timers: BTreeMap<TimerId, u64>,
    next_generation: u64,
    /// Bumped at every crash and restart; events of an older incarnation are dropped.
    incarnation: u64,
    /// An `Ev::Flush` is scheduled for this incarnation (its turn has not ended yet).
    flush_due: bool,
    rng: Rng,
    clock: Clock,
    /// Positions applied to `sm` since it was last reset (final applies only).
    applied: BTreeSet<Pos>,
    /// Provisional applies not yet confirmed (`Action::Speculate`); the checks look at the
    /// settled state.
    spec: Speculation,
    /// The configuration the replica last reported (`Action::MembershipChanged`): its
    /// broadcasts go there. None = the initial one.
    view: Option<Vec<NodeId>>,
}

/// A replica's or a client's clock: an offset and a drift against virtual time (both zero
/// unless the skew fault is on), and with the clock-jump fault up to `JUMPS` changes during
/// the run, each a jump of the offset and a new drift.
#[derive(Clone, Copy, Debug, Default)]
struct Clock {
    skew_ns: i64,
    drift_ppm: i64,
    /// (virtual time, offset jump in ns, drift change in ppm); unused slots have time 0
    /// and no effect.
    jumps: [(u64, i64, i64); JUMPS],
    /// The error bound the faults' bounds imply: a fixed part (skew and jumps) and a
    /// drift that grows with virtual time.
    error_ns: u64,
    error_ppm: u64,
}

/// Most changes of one clock under the clock-jump fault.
const JUMPS: usize = 3;

impl Clock {
    /// A random clock within the skew fault's bounds.
    fn skewed(rng: &mut Rng, b: &ClockBounds) -> Clock {
        let skew = b.skew.as_nanos().min(i64::MAX as u128 / 4) as i64;
        let drift = i64::from(b.drift_ppm);
        Clock {
            skew_ns: rng.gen_range(-skew..=skew),
            drift_ppm: rng.gen_range(-drift..=drift),
            jumps: Default::default(),
            error_ns: skew as u64,
            error_ppm: drift as u64,
        }
    }

    /// Add up to `JUMPS` changes in the first `within` ns of the run: the offset jumps by
    /// up to ±`b.jump` (backwards too) and the drift moves to a new value in
    /// ±`b.drift_ppm`.
    fn with_jumps(mut self, rng: &mut Rng, within: u64, b: &ClockBounds) -> Clock {
        let jump = b.jump.as_nanos().min(i64::MAX as u128 / 16) as i64;
        let drift_max = i64::from(b.drift_ppm);
        let mut drift = self.drift_ppm;
        let mut at: Vec<u64> = (0..rng.gen_range(1..=JUMPS)).map(|_| rng.gen_range(1..within.max(2))).collect();
        at.sort_unstable();
        for (slot, t) in self.jumps.iter_mut().zip(at) {
            let new_drift = rng.gen_range(-drift_max..=drift_max);
            *slot = (t, rng.gen_range(-jump..=jump), new_drift - drift);
            drift = new_drift;
        }
        self.error_ns += JUMPS as u64 * jump as u64;
        self.error_ppm = self.error_ppm.max(drift_max as u64);
        self
    }

    /// The bound on this clock's error at virtual time `now` (`Ctx::clock_error`).
    fn error_bound(&self, now: u64) -> Duration {
        let drift = (now as u128 * self.error_ppm as u128 / 1_000_000) as u64;
        Duration::from_nanos(self.error_ns.saturating_add(drift))
    }

    fn local_time(&self, now: u64) -> Time {
        let mut drift = now as i128 * self.drift_ppm as i128 / 1_000_000;
        let mut offset = self.skew_ns;
        for &(at, jump, ddrift) in &self.jumps {
            if at > 0 && at <= now {
                offset += jump;
                drift += (now - at) as i128 * ddrift as i128 / 1_000_000;
            }
        }
        Time((CLOCK_BASE + offset + now as i64 + drift as i64).max(0) as u64)
    }

    /// A duration on this (drifting) clock, in virtual nanoseconds.
    fn virtual_duration(&self, d: Duration) -> u64 {
        let ns = d.as_nanos().min(u64::MAX as u128 / 4) as i128;
        (ns * 1_000_000 / (1_000_000 + self.drift_ppm as i128)) as u64
    }
}

impl Replica {
    /// The state machine with final applies only.
    fn settled(&self) -> &StateMachine {
        self.spec.settled(&self.sm)
    }

    fn local_time(&self, now: u64) -> Time {
        self.clock.local_time(now)
    }

    fn virtual_duration(&self, d: Duration) -> u64 {
        self.clock.virtual_duration(d)
    }
}

// ---------------------------------------------------------------------------------------
// Clients

struct Pending {
    seq: u64,
    cmd: Command,
    /// Index in the history.
    hist: usize,
}

/// A simulated client session. Where its requests go and how replies count is the
/// protocol's client policy (the registry's `client`), the same code the client library,
/// the Redis front end and the bench run; this host delivers its sends, runs its timers on
/// the client's own (possibly skewed) clock and maps its outcomes into the history.
struct Client {
    session: u64,
    rng: Rng,
    seq: u64,
    remaining: usize,
    pending: Option<Pending>,
    policy: Box<dyn ClientPolicy>,
    /// The client's home replica (index into the members), drawn at random.
    home: usize,
    clock: Clock,
    /// The policy's armed timers: id → generation.
    timers: BTreeMap<u64, u64>,
    next_generation: u64,
    /// The last value this client saw per key (CAS expectations come from it).
    seen: BTreeMap<String, Option<String>>,
    /// Rich workload: versions read by the last `Versions` (a WATCH), for the next MULTI.
    watch: Option<Vec<(Bytes, u64)>>,
}

/// During the fault phase a client abandons an operation (indeterminate) after this many
/// attempt timeouts' worth of virtual time.
const GIVE_UP_AFTER_TIMEOUTS: u64 = 6;

// ---------------------------------------------------------------------------------------
// The simulation

struct Sim<'a> {
    cfg: &'a SimConfig,
    params: ProtocolParams,
    now: u64,
    queue: BinaryHeap<Scheduled>,
    next_seq: u64,
    members: Vec<NodeId>,
    replicas: Vec<Replica>,
    clients: Vec<Client>,
    history: Vec<Operation>,
    net: Net,
    fault_rng: Rng,
    /// Divides the gaps between faults and the downtime of crashed replicas: a third of the
    /// seeds run a "fault storm" where leaders die moments after being elected.
    fault_intensity: u64,
    /// Probability that an fsync fails (fault `fsync-error`), drawn per seed.
    fsync_error_rate: f64,
    /// A whole-cluster crash (power loss) is in progress: [`Sim::crash`] loses the page cache.
    power_loss: bool,
    /// When the whole cluster lost power and when its first replica came back (virtual ns):
    /// with `fsync-batch`, operations answered from [`batch_window`] before a power loss
    /// until the first restart (answers still in flight) may be lost.
    power_losses: Vec<(u64, Option<u64>)>,
    /// Probability that a persist is followed by a crash inside its fsync window (fault
    /// `storage`), drawn per seed.
    storage_crash_rate: f64,
    healed: bool,
    deadline: u64,
    client_timeout: u64,
    /// The first command applied at each position, by whom.
    chosen: BTreeMap<Pos, (NodeId, Command)>,
    failure: Option<Failure>,
    done: bool,
    trace: Option<Vec<String>>,
    stats: RunStats,
    probes: Vec<Probe>,
    /// Scripted membership changes answered `Done`.
    changes_done: BTreeSet<usize>,
    /// Rich workload: history index of each (session, seq), to record the stamp of the
    /// first applied copy of a command (what WATCH versions are made of).
    hist_of: std::collections::HashMap<(u64, u64), usize>,
    ghost: GhostState,
}

/// What the replicas reported as ghost facts ([`Ghost`]), kept across crashes (it is the
/// run's ground truth, not a replica's memory).
#[derive(Default)]
struct GhostState {
    /// Replicas that accepted each client request (`Ghost::Accepted`). Once any is
    /// reported, every applied client command must have a majority here.
    accepted_by: std::collections::HashMap<(u64, u64), BTreeSet<NodeId>>,
    admission: bool,
}

/// The connection id of scripted membership requests (no client session uses it).
const CHANGE_CONN: u64 = u64::MAX;

/// Upper bound on processed events, so a protocol that spins on zero-delay timers ends
/// as a liveness failure instead of hanging the checker. A normal run takes ~10^4 events.
const MAX_EVENTS: u64 = 3_000_000;

/// Upper bound on pending events: more means a message storm (amplification), reported
/// as a liveness failure before it eats the machine's memory.
const MAX_QUEUE: usize = 200_000;

/// Run one simulation and check it (invariants, liveness, then linearizability).
pub fn run(cfg: &SimConfig) -> RunReport {
    let mut sim = Sim::new(cfg);
    sim.start();
    sim.run_loop();
    let history = History {
        ops: std::mem::take(&mut sim.history),
        note: format!("{} seed {} faults {}", cfg.protocol.name, cfg.seed, cfg.faults.to_list()),
        expect: None,
    };
    let mut failure = sim.failure.take();
    let safety_failed = failure.as_ref().is_some_and(|f| f.kind != FailureKind::Liveness);
    if !safety_failed {
        let checked =
            if cfg.faults.fsync_batch { batch_allowance(&history, &sim.power_losses) } else { history.clone() };
        if let Err(v) = linearizability::check(&checked) {
            failure = Some(Failure { kind: FailureKind::Linearizability, at: sim.now, detail: v.to_string() });
        }
    }
    sim.stats.virtual_end = sim.now;
    sim.stats.ops_completed = history.ops.iter().filter(|o| o.ret.is_some()).count() as u64;
    sim.stats.ops_indeterminate = history.ops.len() as u64 - sim.stats.ops_completed;
    sim.stats.ops_rejected = history.ops.iter().filter(|o| o.is_rejected()).count() as u64;
    for c in &sim.clients {
        for (k, v) in c.policy.counters() {
            *sim.stats.client_counters.entry(k).or_default() += v;
        }
    }
    let trace = sim.trace.take().unwrap_or_default();
    let end = Duration::from_nanos(sim.now);
    sim.probe(end);
    let probes = std::mem::take(&mut sim.probes);
    RunReport { seed: cfg.seed, failure, history, trace, stats: sim.stats, params: sim.params, probes }
}

/// What `fsync = batch` is documented to lose (`crates/wal` `FsyncMode::Batch`): a power
/// loss at T may lose what was written after T - [`batch_window`], so an operation answered
/// in that window (or answered after T by a reply sent before it, i.e. before the first
/// replica is back) may or may not survive. Such writes become indeterminate and such
/// reads are dropped (what they saw may be gone); everything answered earlier must survive,
/// and the check holds the rest of the history to linearizability as usual.
pub fn batch_allowance(history: &History, power_losses: &[(u64, Option<u64>)]) -> History {
    let window = batch_window().as_nanos() as u64;
    let in_window =
        |ret: u64| power_losses.iter().any(|&(t, back)| ret + window >= t && ret <= back.unwrap_or(u64::MAX));
    let mut out = History { ops: Vec::new(), note: history.note.clone(), expect: history.expect };
    for op in &history.ops {
        match op.ret {
            Some(ret) if in_window(ret) && !op.is_rejected() => {
                if op.op.is_read() {
                    continue;
                }
                out.ops.push(crate::history::Operation { ret: None, output: None, ..op.clone() });
            }
            _ => out.ops.push(op.clone()),
        }
    }
    out
}

impl<'a> Sim<'a> {
    fn new(cfg: &'a SimConfig) -> Sim<'a> {
        let n = cfg.replicas.max(1);
        let members: Vec<NodeId> = (1..=n as NodeId).collect();
        let mut setup_rng = derive_rng(cfg.seed, STREAM_SETUP, 0);
        let f = cfg.faults;
        let base = uniform(&mut setup_rng, 100 * US, MS);
        let net = Net {
            rng: derive_rng(cfg.seed, STREAM_NET, 0),
            base,
            jitter: base / 2 + 1,
            loss: if f.loss { setup_rng.gen_range(0.01..0.08) } else { 0.0 },
            dup: if f.dup { setup_rng.gen_range(0.01..0.05) } else { 0.0 },
            reorder: if f.reorder { setup_rng.gen_range(0.01..0.1) } else { 0.0 },
            cut: BTreeSet::new(),
            client_cut: BTreeSet::new(),
            last_arrival: BTreeMap::new(),
        };
        let replicas = members
            .iter()
            .enumerate()
            .map(|(i, &id)| {
                let mut clock = if f.skew { Clock::skewed(&mut setup_rng, &cfg.clocks) } else { Clock::default() };
                if f.clock_jump {
                    clock = clock.with_jumps(&mut setup_rng, cfg.fault_phase.as_nanos() as u64, &cfg.clocks);
                }
                Replica {
                    id,
                    proto: None,
                    sm: StateMachine::for_order(cfg.protocol.order),
                    durable: Vec::new(),
                    volatile: Default::default(),
                    persists: 0,
                    synced: 0,
                    sync_busy_until: 0,
                    flush_armed: false,
                    held: Default::default(),
                    compacting: None,
                    next_compaction: 0,
                    timers: BTreeMap::new(),
                    next_generation: 0,
                    incarnation: 0,
                    flush_due: false,
                    rng: derive_rng(cfg.seed, STREAM_REPLICA, (i as u64) << 32),
                    clock,
                    applied: BTreeSet::new(),
                    spec: Speculation::default(),
                    view: None,
                }
            })
            .collect();
        let nclients = cfg.clients.unwrap_or_else(|| uniform(&mut setup_rng, 3, 5) as usize).max(1);
        let mut clients: Vec<Client> = (0..nclients)
            .map(|i| {
                let mut rng = derive_rng(cfg.seed, STREAM_CLIENT, i as u64);
                let session = rng.gen_range(1..u64::MAX);
                let home = rng.gen_range(0..n);
                let mut clock = if f.skew { Clock::skewed(&mut rng, &cfg.clocks) } else { Clock::default() };
                if f.clock_jump {
                    clock = clock.with_jumps(&mut rng, cfg.fault_phase.as_nanos() as u64, &cfg.clocks);
                }
                Client {
                    session,
                    rng,
                    seq: 0,
                    remaining: cfg.ops_per_client,
                    pending: None,
                    // Replaced below, once the (possibly fuzzed) timings are known.
                    policy: Box::new(synod_core::client_policy::HomePolicy::new(RetryTimes::default())),
                    home,
                    clock,
                    timers: BTreeMap::new(),
                    next_generation: 0,
                    seen: BTreeMap::new(),
                    watch: None,
                }
            })
            .collect();
        let fault_intensity = if setup_rng.gen_bool(1.0 / 3.0) { 5 } else { 1 };
        let fsync_error_rate = if f.fsync_error { setup_rng.gen_range(0.0002..0.002) } else { 0.0 };
        let storage_crash_rate = if f.storage { setup_rng.gen_range(0.001..0.006) } else { 0.0 };
        let params = if cfg.fuzz_params { fuzz(&cfg.params, &mut setup_rng) } else { cfg.params.clone() };
        let client_timeout = params.election_timeout_max_ms.max(100) * MS;
        let client_cfg = ClientConfig {
            retry: RetryTimes {
                attempt_timeout: Duration::from_nanos(client_timeout),
                backoff_min: Duration::from_millis(5),
                backoff_max: Duration::from_millis(30),
            },
            options: params.options.clone(),
        };
        for c in &mut clients {
            c.policy = (cfg.protocol.client)(&client_cfg);
        }
        Sim {
            cfg,
            params,
            now: 0,
            queue: BinaryHeap::new(),
            next_seq: 0,
            members,
            replicas,
            clients,
            history: Vec::new(),
            net,
            fault_rng: derive_rng(cfg.seed, STREAM_FAULTS, 0),
            fault_intensity,
            fsync_error_rate,
            power_loss: false,
            power_losses: Vec::new(),
            storage_crash_rate,
            healed: false,
            deadline: u64::MAX,
            client_timeout,
            chosen: BTreeMap::new(),
            failure: None,
            done: false,
            trace: cfg.trace.then(Vec::new),
            stats: RunStats::default(),
            probes: Vec::new(),
            changes_done: BTreeSet::new(),
            hist_of: Default::default(),
            ghost: GhostState::default(),
        }
    }

    fn schedule(&mut self, at: u64, ev: Ev) {
        self.next_seq += 1;
        self.queue.push(Scheduled { at, seq: self.next_seq, ev });
    }

    fn log(&mut self, who: &str, what: impl FnOnce() -> String) {
        if let Some(t) = self.trace.as_mut() {
            t.push(format!("{} {who:<4} {}", Time(self.now), what()));
        }
    }

    fn fail(&mut self, kind: FailureKind, detail: String) {
        if self.failure.is_none() {
            self.log("sim", || format!("VIOLATION {kind:?}: {detail}"));
            self.failure = Some(Failure { kind, at: self.now, detail });
        }
    }

    fn start(&mut self) {
        if self.trace.is_some() {
            let p = &self.params;
            let text = format!(
                "params: max_batch={} pipeline_window={} catchup_chunk={} snapshot_every={} snapshot_keep={} snapshot_chunk_bytes={}; net base={}us loss={:.3} dup={:.3} reorder={:.3}; fault intensity x{}",
                p.max_batch, p.pipeline_window, p.catchup_chunk, p.snapshot_every, p.snapshot_keep,
                p.snapshot_chunk_bytes, self.net.base / US, self.net.loss, self.net.dup, self.net.reorder,
                self.fault_intensity
            );
            self.log("sim", || text);
        }
        for i in 0..self.replicas.len() {
            self.boot(i, Vec::new());
        }
        for c in 0..self.clients.len() {
            let at = uniform(&mut self.fault_rng, 0, 20 * MS);
            self.schedule(at, Ev::ClientIssue { client: c });
        }
        let f = self.cfg.faults;
        if f.partition || f.crash || f.crash_wipe {
            let at = uniform(&mut self.fault_rng, 50 * MS, 500 * MS);
            self.schedule(at, Ev::FaultTick);
        }
        self.schedule(self.cfg.fault_phase.as_nanos() as u64, Ev::Heal);
        for (i, c) in self.cfg.script.iter().enumerate() {
            self.schedule(c.at.as_nanos() as u64, Ev::Script(i));
        }
        for &at in &self.cfg.probes {
            self.schedule(at.as_nanos() as u64, Ev::Probe(at));
        }
        for (i, c) in self.cfg.changes.iter().enumerate() {
            self.schedule(c.at.as_nanos() as u64, Ev::Change(i));
        }
    }

    /// Apply scripted cut `i` (ignored after the heal: the liveness phase is fault-free).
    fn apply_script(&mut self, i: usize) {
        if self.healed {
            return;
        }
        let c = &self.cfg.script[i];
        let leader = self
            .replicas
            .iter()
            .filter_map(|r| r.proto.as_ref().map(|p| p.status()))
            .filter(|s| s.role == Role::Leader)
            .max_by_key(|s| ballot_key(&s.ballot))
            .map(|s| s.id);
        let swap = |n: NodeId| match (c.leader_as, leader) {
            (Some(x), Some(l)) if n == x => l,
            (Some(x), Some(l)) if n == l => x,
            _ => n,
        };
        let mut cut = BTreeSet::new();
        let mut desc = Vec::new();
        for &(a, b) in &c.links {
            let (a, b) = (swap(a), swap(b));
            let ia = self.members.iter().position(|&m| m == a);
            let ib = self.members.iter().position(|&m| m == b);
            if let (Some(ia), Some(ib)) = (ia, ib) {
                cut.insert((ia, ib));
                cut.insert((ib, ia));
                desc.push(format!("n{a}-n{b}"));
            }
        }
        self.net.cut = cut;
        self.stats.partitions += 1;
        self.log("net", || format!("scripted cut [{}] (leader n{leader:?})", desc.join(" ")));
    }

    fn probe(&mut self, at: Duration) {
        let statuses = self.replicas.iter().map(|r| r.proto.as_ref().map(|p| p.status())).collect();
        self.probes.push(Probe { at, statuses });
    }

    fn run_loop(&mut self) {
        while let Some(s) = self.queue.pop() {
            if self.done || self.failure.is_some() {
                break;
            }
            self.now = s.at;
            // The end of a turn is not an event of its own (the budget counts inputs).
            self.stats.events += u64::from(!matches!(s.ev, Ev::Flush { .. }));
            if self.stats.events > MAX_EVENTS {
                self.fail(FailureKind::Liveness, format!("event budget of {MAX_EVENTS} exhausted (a timer loop?)"));
                break;
            }
            if self.queue.len() > MAX_QUEUE {
                let detail = format!(
                    "{} events pending (a message storm?); {} messages sent so far",
                    self.queue.len(),
                    self.stats.messages_sent
                );
                self.fail(FailureKind::Liveness, detail);
                break;
            }
            self.handle(s.ev);
        }
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Deliver { to, incarnation, from, sent_at, msg } => {
                if self.replicas[to].incarnation != incarnation || self.replicas[to].proto.is_none() {
                    return;
                }
                if self.trace.is_some() {
                    let d = self.replicas[to].proto.as_ref().map(|p| p.describe_message(&msg)).unwrap_or_default();
                    self.log(&format!("n{}", self.replicas[to].id), || format!("<- n{from} {d}"));
                }
                self.on_replica_event(to, Event::Message { from, sent_at, msg });
            }
            Ev::Timer { node, incarnation, timer, generation } => {
                let r = &mut self.replicas[node];
                if r.incarnation != incarnation || r.timers.get(&timer) != Some(&generation) {
                    return;
                }
                r.timers.remove(&timer);
                let id = r.id;
                self.log(&format!("n{id}"), || format!("timer {timer}"));
                self.on_replica_event(node, Event::Timer(timer));
            }
            Ev::Persisted { node, incarnation, token } => {
                if self.replicas[node].incarnation == incarnation {
                    let id = self.replicas[node].id;
                    self.log(&format!("n{id}"), || format!("persisted {token}"));
                    self.on_replica_event(node, Event::Persisted { token });
                }
            }
            Ev::Synced { node, incarnation, seq, token } => {
                if self.replicas[node].incarnation == incarnation && self.replicas[node].proto.is_some() {
                    self.synced(node, seq, token);
                }
            }
            Ev::BatchFlush { node, incarnation } => {
                let r = &mut self.replicas[node];
                if r.incarnation == incarnation && r.proto.is_some() {
                    r.flush_armed = false;
                    let seq = r.persists;
                    let at = (self.now + uniform(&mut self.net.rng, 100 * US, MAX_FSYNC)).max(r.sync_busy_until);
                    r.sync_busy_until = at;
                    self.schedule(at, Ev::Synced { node, incarnation, seq, token: None });
                }
            }
            Ev::Compacted { node, incarnation, id } => {
                let r = &mut self.replicas[node];
                if r.incarnation != incarnation || r.compacting.as_ref().is_none_or(|c| c.id != id) {
                    return;
                }
                let c = r.compacting.take().expect("checked above");
                let n = c.image.len() + c.tail.len();
                r.durable = c.image;
                r.durable.extend(c.tail);
                let id = r.id;
                self.log(&format!("n{id}"), || format!("compacted {} ({n} records)", c.token));
                self.on_replica_event(node, Event::Persisted { token: c.token });
            }
            Ev::Snapshot { node, incarnation, token, data } => {
                if self.replicas[node].incarnation == incarnation {
                    let id = self.replicas[node].id;
                    self.log(&format!("n{id}"), || format!("snapshot taken {token} ({} bytes)", data.len()));
                    self.on_replica_event(node, Event::SnapshotTaken { token, data });
                }
            }
            Ev::Request { node, client, mut cmd, meta } => {
                if self.replicas[node].proto.is_none() {
                    return;
                }
                // The receiving replica stamps its (possibly skewed) clock, as the runtime does.
                cmd.now_ms = self.replicas[node].local_time(self.now).as_nanos() / 1_000_000;
                let id = self.replicas[node].id;
                self.log(&format!("n{id}"), || format!("<- c{client} request seq={} {:?}", cmd.seq, cmd.op));
                self.on_replica_event(
                    node,
                    Event::Request { client: ClientRef { node: id, conn: client as u64 }, cmd, meta },
                );
            }
            Ev::Response { client, reply } => self.client_response(client, reply),
            Ev::ClientIssue { client } => self.client_issue(client),
            Ev::ClientTimer { client, id, generation } => {
                let c = &mut self.clients[client];
                if c.pending.is_none() || c.timers.get(&id) != Some(&generation) {
                    return;
                }
                c.timers.remove(&id);
                self.log(&format!("c{client}"), || format!("timer {id}"));
                self.client_step(client, |p, cx| p.on_timer(cx, id));
            }
            Ev::ClientUnreachable { client, seq, node } => {
                if self.clients[client].pending.as_ref().is_some_and(|p| p.seq == seq) {
                    self.log(&format!("c{client}"), || format!("n{node} unreachable"));
                    self.client_step(client, |p, cx| p.on_unreachable(cx, node));
                }
            }
            Ev::ClientGiveUp { client, seq } => self.client_give_up(client, seq),
            Ev::FaultTick => self.fault_tick(),
            Ev::StorageCrash { node, incarnation } => {
                if self.replicas[node].incarnation == incarnation && self.replicas[node].proto.is_some() {
                    self.storage_crash(node);
                }
            }
            Ev::Restart { node, incarnation, wipe } => {
                if self.replicas[node].incarnation == incarnation && self.replicas[node].proto.is_none() {
                    // The first replica back ends the power loss: answers that reach clients
                    // until then were sent before it.
                    if let Some((_, end @ None)) = self.power_losses.last_mut() {
                        *end = Some(self.now);
                    }
                    self.restart(node, wipe);
                }
            }
            Ev::Flush { node, incarnation } => {
                let r = &mut self.replicas[node];
                if r.incarnation != incarnation {
                    return;
                }
                r.flush_due = false;
                let now = r.local_time(self.now);
                let Some(proto) = r.proto.as_mut() else { return };
                let mut actions = Vec::new();
                proto.flush(&mut Ctx::new(r.id, now, &mut r.rng, &mut actions));
                self.execute(node, actions);
            }
            Ev::Heal => self.heal(),
            Ev::Script(i) => self.apply_script(i),
            Ev::Change(i) => self.request_change(i),
            Ev::Probe(at) => self.probe(at),
            Ev::ConvergeCheck => self.converge_check(),
        }
    }

    // --- replicas -----------------------------------------------------------------------

    fn build(&mut self, node: usize) -> Option<Box<dyn Protocol>> {
        let members = self.members.iter().copied().filter(|m| !self.cfg.learners.contains(m)).collect();
        let setup = Setup { id: self.replicas[node].id, members, params: self.params.clone() };
        match (self.cfg.protocol.build)(&setup) {
            Ok(p) => Some(p),
            Err(e) => {
                self.fail(FailureKind::Setup, format!("building {} replica {}: {e}", self.cfg.protocol.name, setup.id));
                None
            }
        }
    }

    /// Start a replica from `records` (fresh state machine; the protocol re-applies).
    fn boot(&mut self, node: usize, records: Vec<Bytes>) {
        let Some(mut proto) = self.build(node) else { return };
        let r = &mut self.replicas[node];
        r.sm = StateMachine::for_order(self.cfg.protocol.order);
        r.spec.reset();
        r.applied.clear();
        r.timers.clear();
        let id = r.id;
        let nrecords = records.len();
        let mut actions = Vec::new();
        let now = r.local_time(self.now);
        {
            let mut ctx = Ctx::new(id, now, &mut r.rng, &mut actions);
            ctx.clock_error = r.clock.error_bound(self.now);
            proto.recover(&mut ctx, records);
        }
        r.proto = Some(proto);
        r.flush_due = false;
        self.log(&format!("n{id}"), || format!("recover from {nrecords} records"));
        self.execute(node, actions);
        self.end_turn_later(node);
    }

    /// Schedule the end of `node`'s current turn, unless it is already scheduled.
    fn end_turn_later(&mut self, node: usize) {
        let r = &mut self.replicas[node];
        if !r.flush_due && r.proto.is_some() {
            r.flush_due = true;
            let incarnation = r.incarnation;
            self.schedule(self.now, Ev::Flush { node, incarnation });
        }
    }

    fn on_replica_event(&mut self, node: usize, event: Event) {
        let r = &mut self.replicas[node];
        let now = r.local_time(self.now);
        let Some(proto) = r.proto.as_mut() else { return };
        let mut actions = Vec::new();
        {
            let mut ctx = Ctx::new(r.id, now, &mut r.rng, &mut actions);
            ctx.clock_error = r.clock.error_bound(self.now);
            proto.on_event(&mut ctx, event);
        }
        self.execute(node, actions);
        self.end_turn_later(node);
    }

    fn execute(&mut self, node: usize, actions: Vec<Action>) {
        let id = self.replicas[node].id;
        let who = format!("n{id}");
        for action in actions {
            match action {
                Action::Send { to, msg } => self.emit(node, Out::Send { to, msg }),
                Action::Broadcast { msg } => self.emit(node, Out::Broadcast { msg }),
                Action::Persist { token, records } if self.cfg.faults.volatile_storage() => {
                    // Written now, durable when its fsync completes (in order after the
                    // fsyncs already in flight); outputs pushed from now on wait for it.
                    self.log(&who, || format!("persist {token} ({} records, unsynced)", records.len()));
                    let r = &mut self.replicas[node];
                    r.persists += 1;
                    let seq = r.persists;
                    r.volatile.extend(records.into_iter().map(|b| (seq, b)));
                    // Never before the fsync in flight (fsyncs complete in order); one that
                    // would end sooner completes with it (group commit).
                    let incarnation = r.incarnation;
                    let at = if self.cfg.faults.fsync_batch {
                        // Written and done now (the node loop's commit is the write); the
                        // flusher syncs BATCH_INTERVAL after the first unsynced write.
                        let flush = self.now + BATCH_INTERVAL;
                        if !r.flush_armed {
                            r.flush_armed = true;
                            self.schedule(flush, Ev::BatchFlush { node, incarnation });
                        }
                        self.storage_done(node, token);
                        flush + MAX_FSYNC
                    } else {
                        let at = (self.now + uniform(&mut self.net.rng, 100 * US, MAX_FSYNC)).max(r.sync_busy_until);
                        r.sync_busy_until = at;
                        self.schedule(at, Ev::Synced { node, incarnation, seq, token: Some(token) });
                        at
                    };
                    if self.cfg.faults.storage && !self.healed && self.fault_rng.gen_bool(self.storage_crash_rate) {
                        let crash_at = uniform(&mut self.fault_rng, self.now, at);
                        self.schedule(crash_at, Ev::StorageCrash { node, incarnation });
                    }
                }
                Action::Persist { token, records } => {
                    self.log(&who, || format!("persist {token} ({} records)", records.len()));
                    let r = &mut self.replicas[node];
                    if let Some(c) = r.compacting.as_mut() {
                        c.tail.extend(records.iter().cloned());
                    }
                    r.durable.extend(records);
                    self.storage_done(node, token);
                }
                Action::RewriteDurable { token, records } => {
                    // Atomic and durable when it returns (the WAL fsyncs the new base before
                    // renaming it into place), in every fsync mode; it supersedes every
                    // record persisted before it, synced or not.
                    self.log(&who, || format!("rewrite durable {token} ({} records)", records.len()));
                    let r = &mut self.replicas[node];
                    r.compacting = None;
                    r.durable = records;
                    r.volatile.clear();
                    r.persists += 1;
                    r.synced = r.persists;
                    self.release_held(node);
                    self.storage_done(node, token);
                }
                Action::CompactDurable { token, records } => {
                    // Written in the background: a crash before it completes keeps the old
                    // records (the driver's contract), which the fault schedule exercises.
                    self.log(&who, || format!("compact durable {token} ({} records)", records.len()));
                    let r = &mut self.replicas[node];
                    r.next_compaction += 1;
                    let id = r.next_compaction;
                    let image = records.into_iter().map(|parts| Bytes::from(parts.concat())).collect();
                    r.compacting = Some(Compaction { id, token, image, tail: Vec::new() });
                    let incarnation = r.incarnation;
                    let at = self.now + uniform(&mut self.net.rng, MS, 20 * MS);
                    self.schedule(at, Ev::Compacted { node, incarnation, id });
                }
                Action::Reply { client, reply } => self.emit(node, Out::Reply { client, reply }),
                // Depends on nothing persisted: not held behind an fsync in flight.
                Action::ReplyNow { client, reply } => self.release_out(node, Out::Reply { client, reply }),
                Action::Apply { pos, cmd, reply } => self.apply(node, pos, cmd, reply),
                Action::Read { client, cmd } => {
                    // A lease read: no position, so no agreement fact; the client's history
                    // records its result and the linearizability check judges it.
                    self.log(&who, || format!("lease read c{:x}#{} {:?}", cmd.client, cmd.seq, cmd.op));
                    self.stats.lease_reads += 1;
                    let r = &self.replicas[node];
                    let result = r.settled().read(&cmd.op);
                    if client.node == id {
                        let reply = Reply { client: cmd.client, seq: cmd.seq, from: id, body: ReplyBody::Done(result) };
                        self.emit(node, Out::ClientReply { conn: client.conn, reply });
                    }
                }
                Action::Speculate { pos, cmd, reply } => {
                    // Provisional: not an agreement fact until an Apply confirms it.
                    self.log(&who, || format!("speculate {pos} c{:x}#{} {:?}", cmd.client, cmd.seq, cmd.op));
                    let r = &mut self.replicas[node];
                    let result = r.spec.speculate(&mut r.sm, pos, &cmd);
                    if let Some(SpeculativeReply { client, view, digest, owd }) = reply {
                        if client.node == id {
                            let body = ReplyBody::Speculative { view, digest, owd, result: Some(result) };
                            let reply = Reply { client: cmd.client, seq: cmd.seq, from: id, body };
                            self.emit(node, Out::ClientReply { conn: client.conn, reply });
                        }
                    }
                }
                Action::Rollback => {
                    let r = &mut self.replicas[node];
                    let undone = r.spec.rollback(&mut r.sm);
                    self.log(&who, || format!("rollback ({undone} provisional applies undone)"));
                }
                Action::SetTimer { timer, after } => {
                    let r = &mut self.replicas[node];
                    r.next_generation += 1;
                    let generation = r.next_generation;
                    r.timers.insert(timer, generation);
                    let at = self.now.saturating_add(r.virtual_duration(after));
                    let incarnation = r.incarnation;
                    self.schedule(at, Ev::Timer { node, incarnation, timer, generation });
                }
                Action::CancelTimer { timer } => {
                    self.replicas[node].timers.remove(&timer);
                }
                Action::TakeSnapshot { token } => {
                    let data = Bytes::from(self.replicas[node].settled().snapshot());
                    let at = self.now + uniform(&mut self.net.rng, 100 * US, 2 * MS);
                    let incarnation = self.replicas[node].incarnation;
                    self.log(&who, || format!("take snapshot {token}"));
                    self.schedule(at, Ev::Snapshot { node, incarnation, token, data });
                }
                Action::InstallSnapshot { data } => match StateMachine::restore(&data) {
                    Ok(sm) => {
                        self.log(&who, || {
                            format!("install snapshot ({} bytes, {} applied)", data.len(), sm.applied_count())
                        });
                        let r = &mut self.replicas[node];
                        r.sm = sm;
                        r.spec.reset();
                        r.applied.clear();
                    }
                    Err(e) => self.fail(FailureKind::Snapshot, format!("n{id}: {e}")),
                },
                Action::Ghost(fact) => self.ghost_fact(node, fact),
                Action::MembershipChanged { members } => {
                    let ids: Vec<NodeId> = members.iter().map(|m| m.id).collect();
                    self.log(&who, || format!("members {ids:?}"));
                    self.replicas[node].view = Some(ids);
                }
            }
        }
    }

    /// Send or answer now, or hold it back behind a persist that is not durable yet.
    fn emit(&mut self, node: usize, out: Out) {
        let r = &mut self.replicas[node];
        // With fsync = batch nothing waits for the fsync (the runtime releases after the write).
        if r.synced < r.persists && !self.cfg.faults.fsync_batch {
            let barrier = r.persists;
            r.held.push_back((barrier, out));
        } else {
            self.release_out(node, out);
        }
    }

    fn release_out(&mut self, node: usize, out: Out) {
        let id = self.replicas[node].id;
        match out {
            Out::Send { to, msg } => self.send(node, to, msg),
            Out::Broadcast { msg } => {
                let view = self.replicas[node].view.clone();
                for to in view.unwrap_or_else(|| self.members.clone()) {
                    if to != id {
                        self.send(node, to, msg.clone());
                    }
                }
            }
            Out::Reply { client, reply } => {
                self.log(&format!("n{id}"), || format!("reply -> c{} seq={} {:?}", client.conn, reply.seq, reply.body));
                if client.node == id && client.conn == CHANGE_CONN {
                    self.change_answered(reply);
                } else if client.node == id {
                    self.reply_to_client(node, client.conn, reply);
                }
            }
            Out::ClientReply { conn, reply } => self.reply_to_client(node, conn, reply),
        }
    }

    /// Let out what waited for persists that are durable now, in order.
    fn release_held(&mut self, node: usize) {
        loop {
            let r = &mut self.replicas[node];
            match r.held.front() {
                Some(&(barrier, _)) if barrier <= r.synced => {
                    let (_, out) = r.held.pop_front().expect("front exists");
                    self.release_out(node, out);
                }
                _ => break,
            }
        }
    }

    /// The fsync of persist `seq` completed (or failed, with the `fsync-error` fault).
    fn synced(&mut self, node: usize, seq: u64, token: Option<u64>) {
        let id = self.replicas[node].id;
        if self.cfg.faults.fsync_error && !self.healed && self.replicas[node].synced < seq {
            let rate = self.fsync_error_rate;
            if self.fault_rng.gen_bool(rate) {
                self.stats.fsync_errors += 1;
                self.log(&format!("n{id}"), || format!("FSYNC ERROR on persist {token:?}: the replica stops"));
                self.crash(node);
                let k = self.fault_intensity;
                let at = self.now + uniform(&mut self.fault_rng, 50 * MS / k, 1000 * MS / k);
                let incarnation = self.replicas[node].incarnation;
                self.schedule(at, Ev::Restart { node, incarnation, wipe: false });
                return;
            }
        }
        let r = &mut self.replicas[node];
        if seq > r.synced {
            r.synced = seq;
            while r.volatile.front().is_some_and(|(s, _)| *s <= seq) {
                let (_, rec) = r.volatile.pop_front().expect("front exists");
                if let Some(c) = r.compacting.as_mut() {
                    c.tail.push(rec.clone());
                }
                r.durable.push(rec);
            }
        }
        self.release_held(node);
        match token {
            Some(token) => {
                self.log(&format!("n{id}"), || format!("persisted {token} (fsync)"));
                self.on_replica_event(node, Event::Persisted { token });
            }
            None => self.log(&format!("n{id}"), || format!("batch fsync: persists up to #{seq} durable")),
        }
    }

    fn storage_done(&mut self, node: usize, token: u64) {
        let at = self.now + uniform(&mut self.net.rng, 50 * US, 500 * US);
        let incarnation = self.replicas[node].incarnation;
        self.schedule(at, Ev::Persisted { node, incarnation, token });
    }

    fn send(&mut self, from: usize, to: NodeId, msg: Bytes) {
        let from_id = self.replicas[from].id;
        let Some(to_idx) = self.members.iter().position(|&m| m == to) else {
            self.log(&format!("n{from_id}"), || format!("send to unknown node {to} dropped"));
            return;
        };
        self.stats.messages_sent += 1;
        if self.trace.is_some() {
            let d = self.replicas[from].proto.as_ref().map(|p| p.describe_message(&msg)).unwrap_or_default();
            self.log(&format!("n{from_id}"), || format!("-> n{to} {d}"));
        }
        let sent_at = self.replicas[from].local_time(self.now);
        let incarnation = self.replicas[to_idx].incarnation;
        let arrivals = if to_idx == from {
            vec![self.now + 1]
        } else if self.net.cut.contains(&(from, to_idx)) {
            Vec::new()
        } else {
            self.net.transmit(from, to_idx, self.now)
        };
        if arrivals.is_empty() {
            self.stats.messages_dropped += 1;
        }
        for at in arrivals {
            self.schedule(at, Ev::Deliver { to: to_idx, incarnation, from: from_id, sent_at, msg: msg.clone() });
        }
    }

    fn apply(&mut self, node: usize, pos: Pos, cmd: Command, reply: Option<ClientRef>) {
        let id = self.replicas[node].id;
        self.log(&format!("n{id}"), || format!("apply {pos} c{:x}#{} {:?}", cmd.client, cmd.seq, cmd.op));
        match self.chosen.get(&pos) {
            Some((first, c)) if *c != cmd => {
                let detail = format!("position {pos}: n{first} applied {c:?}, n{id} applied {cmd:?}");
                self.fail(FailureKind::Agreement, detail);
                return;
            }
            Some(_) => {}
            None => {
                self.chosen.insert(pos, (id, cmd.clone()));
            }
        }
        if self.cfg.rich {
            if let Some(&h) = self.hist_of.get(&(cmd.client, cmd.seq)) {
                if let KvOp::Rich { stamp: stamp @ None, .. } = &mut self.history[h].op {
                    *stamp = Some(synod_core::session::command_stamp(cmd.client, cmd.seq, cmd.now_ms));
                }
            }
        }
        self.ghost_apply(node, pos, &cmd);
        if !self.replicas[node].applied.insert(pos) {
            self.fail(FailureKind::DoubleApply, format!("n{id} applied position {pos} twice"));
            return;
        }
        let r = &mut self.replicas[node];
        let result = r.spec.apply(&mut r.sm, pos, &cmd);
        if let Some(c) = reply {
            if c.node == id {
                let reply = Reply { client: cmd.client, seq: cmd.seq, from: id, body: ReplyBody::Done(result) };
                self.emit(node, Out::ClientReply { conn: c.conn, reply });
            }
        }
    }

    /// A majority of the replicas (the protocols' f + 1).
    fn majority(&self) -> usize {
        self.replicas.len() / 2 + 1
    }

    /// Record a ghost fact (checked when the command is applied).
    fn ghost_fact(&mut self, node: usize, fact: Ghost) {
        let id = self.replicas[node].id;
        self.log(&format!("n{id}"), || format!("ghost {fact:?}"));
        match fact {
            Ghost::Accepted { client, seq } => {
                self.ghost.admission = true;
                self.ghost.accepted_by.entry((client, seq)).or_default().insert(id);
            }
            Ghost::Discarded { upto, newest, r_max } => {
                self.stats.ghost_discard_checks += 1;
                if upto.saturating_add(r_max) > newest {
                    let detail = format!(
                        "n{id} discarded the log up to instance {upto} with the newest instance it received at \
                         {newest}: implicit garbage collection may drop instance s only once s + r_max = s + \
                         {r_max} arrived (IDEM §4.4, Theorem 6.1)"
                    );
                    self.fail(FailureKind::Invariant, detail);
                }
            }
        }
    }

    /// With admission control reporting acceptances, a client command is applied only after
    /// a majority accepted it (IDEM §4.3: the leader waits for f + 1 REQUIREs).
    fn ghost_apply(&mut self, node: usize, pos: Pos, cmd: &Command) {
        if !self.ghost.admission || cmd.client == 0 {
            return;
        }
        self.stats.ghost_apply_checks += 1;
        let by: Vec<NodeId> =
            self.ghost.accepted_by.get(&(cmd.client, cmd.seq)).into_iter().flatten().copied().collect();
        if by.len() < self.majority() {
            let id = self.replicas[node].id;
            let detail = format!(
                "n{id} applied c{:x}#{} at {pos}, which only {by:?} accepted (a request is ordered once a \
                 majority accepted it, IDEM §4.3: f + 1 REQUIREs)",
                cmd.client, cmd.seq
            );
            self.fail(FailureKind::Invariant, detail);
        }
    }

    fn reply_to_client(&mut self, node: usize, conn: u64, reply: Reply) {
        let client = conn as usize;
        if client >= self.clients.len() || self.net.client_cut.contains(&node) {
            return;
        }
        let n = self.replicas.len();
        for at in self.net.transmit(node, n + client, self.now) {
            self.schedule(at, Ev::Response { client, reply: reply.clone() });
        }
    }

    // --- faults -------------------------------------------------------------------------

    fn crashed(&self) -> usize {
        self.replicas.iter().filter(|r| r.proto.is_none()).count()
    }

    fn fault_tick(&mut self) {
        if self.healed {
            return;
        }
        let f = self.cfg.faults;
        let mut kinds = Vec::new();
        if f.partition {
            kinds.push(0);
        }
        if f.crash || f.crash_wipe || f.crash_all {
            kinds.push(1);
        }
        let n = self.replicas.len();
        match kinds[self.fault_rng.gen_range(0..kinds.len())] {
            0 => {
                let active = !self.net.cut.is_empty() || !self.net.client_cut.is_empty();
                if active && self.fault_rng.gen_bool(0.5) {
                    self.net.cut.clear();
                    self.net.client_cut.clear();
                    self.log("net", || "partition healed".into());
                } else {
                    self.new_partition(n);
                }
            }
            // The whole cluster loses power now and then (only when every replica is up,
            // never with a wiped disk); otherwise a minority crashes, one replica at a time.
            _ if f.crash_all && self.crashed() == 0 && self.fault_rng.gen_bool(0.04) => {
                self.stats.cluster_crashes += 1;
                self.log("sim", || "WHOLE-CLUSTER CRASH".into());
                self.power_loss = true;
                self.power_losses.push((self.now, None));
                for node in 0..n {
                    self.crash(node);
                    let k = self.fault_intensity;
                    let at = self.now + uniform(&mut self.fault_rng, 50 * MS / k, 2000 * MS / k);
                    let incarnation = self.replicas[node].incarnation;
                    self.schedule(at, Ev::Restart { node, incarnation, wipe: false });
                }
                self.power_loss = false;
            }
            _ if !(f.crash || f.crash_wipe) => {}
            _ => {
                let max_down = (n - 1) / 2;
                let alive: Vec<usize> = (0..n).filter(|&i| self.replicas[i].proto.is_some()).collect();
                if self.crashed() < max_down && !alive.is_empty() {
                    // Leaders are where the interesting bugs hide (half-replicated entries,
                    // elections with divergent logs): aim at one most of the time.
                    let leaders: Vec<usize> = alive
                        .iter()
                        .copied()
                        .filter(|&i| self.replicas[i].proto.as_ref().is_some_and(|p| p.status().role == Role::Leader))
                        .collect();
                    let pool = if !leaders.is_empty() && self.fault_rng.gen_bool(0.6) { &leaders } else { &alive };
                    let node = pool[self.fault_rng.gen_range(0..pool.len())];
                    let wipe = f.crash_wipe && (!f.crash || self.fault_rng.gen_bool(0.5));
                    self.crash(node);
                    let k = self.fault_intensity;
                    let at = self.now + uniform(&mut self.fault_rng, 100 * MS / k, 3000 * MS / k);
                    let incarnation = self.replicas[node].incarnation;
                    self.schedule(at, Ev::Restart { node, incarnation, wipe });
                }
            }
        }
        let k = self.fault_intensity;
        let at = self.now + uniform(&mut self.fault_rng, 100 * MS / k, 800 * MS / k);
        self.schedule(at, Ev::FaultTick);
    }

    /// A crash while `node` has unsynced records: the whole cluster (with `crash-all`, half
    /// of the time, when every replica is up) or this replica alone (if a minority
    /// stays up).
    fn storage_crash(&mut self, node: usize) {
        if self.healed || self.replicas[node].volatile.is_empty() {
            return;
        }
        let n = self.replicas.len();
        let k = self.fault_intensity;
        // With fsync = batch only a power loss can lose written records: always whole.
        let f = self.cfg.faults;
        let whole = f.crash_all && self.crashed() == 0 && (f.fsync_batch || self.fault_rng.gen_bool(0.5));
        let victims: Vec<usize> = if whole {
            self.stats.cluster_crashes += 1;
            self.log("sim", || "WHOLE-CLUSTER CRASH (power loss during an fsync)".into());
            self.power_loss = true;
            self.power_losses.push((self.now, None));
            (0..n).collect()
        } else if self.crashed() < (n - 1) / 2 {
            vec![node]
        } else {
            return;
        };
        for v in victims {
            self.crash(v);
            let at = self.now + uniform(&mut self.fault_rng, 50 * MS / k, 2000 * MS / k);
            let incarnation = self.replicas[v].incarnation;
            self.schedule(at, Ev::Restart { node: v, incarnation, wipe: false });
        }
        self.power_loss = false;
    }

    fn new_partition(&mut self, n: usize) {
        self.net.cut.clear();
        self.net.client_cut.clear();
        self.stats.partitions += 1;
        let leaders: Vec<usize> = (0..n)
            .filter(|&i| self.replicas[i].proto.as_ref().is_some_and(|p| p.status().role == Role::Leader))
            .collect();
        let x = if !leaders.is_empty() && self.fault_rng.gen_bool(0.5) {
            leaders[self.fault_rng.gen_range(0..leaders.len())]
        } else {
            self.fault_rng.gen_range(0..n)
        };
        let desc = match self.fault_rng.gen_range(0..3) {
            0 => {
                for j in (0..n).filter(|&j| j != x) {
                    self.net.cut.insert((x, j));
                    self.net.cut.insert((j, x));
                }
                // Sometimes clients still reach the isolated node: a cut-off leader keeps
                // accepting requests it can only append locally.
                let clients_too = self.fault_rng.gen_bool(0.5);
                if clients_too {
                    self.net.client_cut.insert(x);
                }
                format!("isolate n{}{}", x + 1, if clients_too { " (and from clients)" } else { " from peers" })
            }
            1 => {
                for a in 0..n {
                    for b in (a + 1)..n {
                        if self.fault_rng.gen_bool(0.35) {
                            self.net.cut.insert((a, b));
                            self.net.cut.insert((b, a));
                        }
                    }
                }
                let links: Vec<String> =
                    self.net.cut.iter().filter(|(a, b)| a < b).map(|(a, b)| format!("n{}-n{}", a + 1, b + 1)).collect();
                format!("partial, cut links [{}]", links.join(" "))
            }
            _ => {
                let inbound = self.fault_rng.gen_bool(0.5);
                for j in (0..n).filter(|&j| j != x) {
                    self.net.cut.insert(if inbound { (j, x) } else { (x, j) });
                }
                format!("asymmetric: n{} {} cut", x + 1, if inbound { "inbound" } else { "outbound" })
            }
        };
        self.log("net", || format!("partition: {desc}"));
    }

    fn crash(&mut self, node: usize) {
        self.stats.crashes += 1;
        // Volatile storage: the page cache reached the disk up to a random record; the one
        // after it may be torn (WAL recovery truncates it), the rest is gone.
        let unsynced = self.replicas[node].volatile.len();
        if unsynced > 0 {
            // With fsync = batch only a power loss loses the page cache; a replica that
            // crashes alone is a process crash (its written records are all on the disk).
            let process_crash = self.cfg.faults.fsync_batch && !self.power_loss;
            let kept = if process_crash { unsynced } else { self.fault_rng.gen_range(0..=unsynced) };
            let torn = kept < unsynced && self.fault_rng.gen_bool(0.5);
            let r = &mut self.replicas[node];
            let survivors: Vec<Bytes> = r.volatile.drain(..).take(kept).map(|(_, b)| b).collect();
            r.durable.extend(survivors);
            self.stats.unsynced_lost += (unsynced - kept) as u64;
            self.stats.torn_records += u64::from(torn);
            let id = r.id;
            self.log(&format!("n{id}"), || {
                format!(
                    "crash loses {} of {unsynced} unsynced records{}",
                    unsynced - kept,
                    if torn { " (the first of them torn)" } else { "" }
                )
            });
        }
        let r = &mut self.replicas[node];
        r.volatile.clear();
        r.held.clear();
        r.persists = 0;
        r.synced = 0;
        r.sync_busy_until = 0;
        r.flush_armed = false;
        r.proto = None;
        r.timers.clear();
        r.compacting = None;
        r.incarnation += 1;
        r.sm = StateMachine::for_order(self.cfg.protocol.order);
        r.spec.reset();
        r.applied.clear();
        let id = r.id;
        self.log(&format!("n{id}"), || "CRASH".into());
    }

    fn restart(&mut self, node: usize, wipe: bool) {
        let r = &mut self.replicas[node];
        r.incarnation += 1;
        r.rng = derive_rng(self.cfg.seed, STREAM_REPLICA, ((node as u64) << 32) | r.incarnation);
        if wipe {
            r.durable.clear();
        }
        let id = r.id;
        let records = r.durable.clone();
        self.log(&format!("n{id}"), || format!("RESTART{}", if wipe { " with a wiped disk" } else { "" }));
        self.boot(node, records);
    }

    fn heal(&mut self) {
        self.healed = true;
        self.net.cut.clear();
        self.net.client_cut.clear();
        self.net.loss = 0.0;
        self.net.dup = 0.0;
        self.net.reorder = 0.0;
        self.log("sim", || "HEAL: liveness phase begins".into());
        for node in 0..self.replicas.len() {
            if self.replicas[node].proto.is_none() {
                self.restart(node, false);
            }
        }
        self.deadline = self.now + self.cfg.liveness_timeout.as_nanos() as u64;
        self.schedule(self.now + 100 * MS, Ev::ConvergeCheck);
    }

    fn converge_check(&mut self) {
        // Equal progress must mean equal state: replicas that applied the same set of
        // positions (in whatever order a partial-order protocol allows) hold the same state;
        // under a total order, replicas that applied the same number of commands applied the
        // same prefix, so they too must be equal (this also catches a replica that skipped a
        // command another one applied).
        let total = self.cfg.protocol.order == synod_core::session::Order::Total;
        let mut by_set: BTreeMap<u64, (NodeId, u64)> = BTreeMap::new();
        let mut by_count: BTreeMap<u64, (NodeId, u64)> = BTreeMap::new();
        for r in self.replicas.iter().filter(|r| r.proto.is_some()) {
            let sm = r.settled();
            let (set, count, digest) = (sm.positions_fingerprint(), sm.applied_count(), sm.digest());
            let mut clash = None;
            if let Some(&(other, d)) = by_set.get(&set) {
                if d != digest {
                    clash = Some(format!(
                        "n{other} and n{} applied the same {count} positions but their states differ",
                        r.id
                    ));
                }
            }
            if let Some(&(other, d)) = by_count.get(&count).filter(|_| total) {
                if d != digest && clash.is_none() {
                    clash = Some(format!("n{other} and n{} executed {count} commands but their states differ", r.id));
                }
            }
            if let Some(detail) = clash {
                self.fail(FailureKind::Divergence, detail);
                return;
            }
            by_set.entry(set).or_insert((r.id, digest));
            by_count.entry(count).or_insert((r.id, digest));
        }
        let clients_done = self.clients.iter().all(|c| c.remaining == 0 && c.pending.is_none());
        let all_up = self.replicas.iter().all(|r| r.proto.is_some());
        // Replicas outside the final configuration (removed, or learners never added) stop
        // receiving the log: only members must end equal.
        // The final configuration is what the most advanced replica knows (a removed one
        // may never learn of its removal: nobody talks to it any more).
        let initial: Vec<NodeId> = self.members.iter().copied().filter(|m| !self.cfg.learners.contains(m)).collect();
        let last = self.replicas.iter().max_by_key(|r| r.settled().applied_count()).and_then(|r| r.view.clone());
        let last = last.unwrap_or(initial);
        let members_equal = self
            .replicas
            .iter()
            .filter(|r| last.contains(&r.id))
            .map(|r| r.settled().positions_fingerprint())
            .collect::<BTreeSet<u64>>()
            .len()
            == 1;
        let changes_done = self.changes_done.len() == self.cfg.changes.len();
        if clients_done && all_up && members_equal && changes_done {
            self.log("sim", || "converged: all operations complete, replicas equal".into());
            self.done = true;
            return;
        }
        if self.now >= self.deadline {
            let pending: Vec<String> = self
                .clients
                .iter()
                .enumerate()
                .filter(|(_, c)| c.remaining > 0 || c.pending.is_some())
                .map(|(i, c)| {
                    format!("c{i} ({} left, pending seq {:?})", c.remaining, c.pending.as_ref().map(|p| p.seq))
                })
                .collect();
            let progress: Vec<String> = self
                .replicas
                .iter()
                .map(|r| {
                    let role = r.proto.as_ref().map(|p| p.status().role.to_string()).unwrap_or("down".into());
                    format!("n{} {role} applied={}", r.id, r.settled().applied_count())
                })
                .collect();
            let detail = format!(
                "not done {} after healing: clients waiting: [{}]; replicas: [{}]",
                Time(self.cfg.liveness_timeout.as_nanos() as u64),
                pending.join(", "),
                progress.join(", ")
            );
            self.fail(FailureKind::Liveness, detail);
            return;
        }
        self.schedule(self.now + 100 * MS, Ev::ConvergeCheck);
    }

    // --- membership changes -------------------------------------------------------------

    /// Ask the live leader with the highest ballot for scripted change `i` (retried every
    /// 200 ms until answered `Done`; the request id is `i`).
    fn request_change(&mut self, i: usize) {
        if self.changes_done.contains(&i) {
            return;
        }
        let leader = self
            .replicas
            .iter()
            .enumerate()
            .filter_map(|(n, r)| r.proto.as_ref().map(|p| (n, p.status())))
            .filter(|(_, s)| s.role == Role::Leader)
            .max_by_key(|(_, s)| ballot_key(&s.ballot))
            .map(|(n, _)| n);
        if let Some(node) = leader {
            let id = self.replicas[node].id;
            let change = self.cfg.changes[i].change.clone();
            self.log(&format!("n{id}"), || format!("<- admin change {i}: {change:?}"));
            let client = ClientRef { node: id, conn: CHANGE_CONN };
            self.on_replica_event(node, Event::Reconfigure { client, id: i as u64, change });
        }
        if !self.changes_done.contains(&i) {
            self.schedule(self.now + 200 * MS, Ev::Change(i));
        }
    }

    fn change_answered(&mut self, reply: Reply) {
        if matches!(reply.body, ReplyBody::Done(_)) && (reply.seq as usize) < self.cfg.changes.len() {
            self.stats.membership_changes += 1;
            self.changes_done.insert(reply.seq as usize);
        }
    }

    // --- clients ------------------------------------------------------------------------

    fn client_issue(&mut self, ci: usize) {
        let keys = self.cfg.keys.max(1);
        let c = &mut self.clients[ci];
        if c.remaining == 0 || c.pending.is_some() {
            return;
        }
        c.remaining -= 1;
        c.seq += 1;
        let seq = c.seq;
        let key = format!("k{}", c.rng.gen_range(0..keys));
        let unique = format!("c{ci}.{seq}");
        let roll = c.rng.gen_range(0..100);
        let kv = if self.cfg.rich {
            KvOp::Rich { op: rich_op(c, ci, seq, keys), stamp: None }
        } else if roll < 35 || ci < self.cfg.readers {
            KvOp::Get { key }
        } else if roll < 65 {
            KvOp::Put { key, value: unique }
        } else if roll < 75 {
            KvOp::Delete { key }
        } else {
            let expect = if c.rng.gen_bool(0.8) {
                c.seen.get(&key).cloned().flatten()
            } else {
                Some(format!("c{ci}.{}", c.rng.gen_range(1..=seq)))
            };
            let new = if c.rng.gen_bool(0.85) { Some(unique) } else { None };
            KvOp::Cas { key, expect, new }
        };
        let b = |s: &str| Bytes::copy_from_slice(s.as_bytes());
        let op = match &kv {
            KvOp::Get { key } => Op::Get { key: b(key) },
            KvOp::Put { key, value } => Op::Put { key: b(key), value: b(value) },
            KvOp::Delete { key } => Op::Delete { key: b(key) },
            KvOp::Cas { key, expect, new } => {
                Op::Cas { key: b(key), expect: expect.as_deref().map(b), new: new.as_deref().map(b) }
            }
            KvOp::Rich { op, .. } => op.clone(),
        };
        // One operation outstanding per session: every earlier request has its answer (or
        // was abandoned), so the state machine may forget all results below `seq`.
        let cmd = Command { client: c.session, seq, acked_below: seq, now_ms: 0, op };
        let hist = self.history.len();
        if self.cfg.rich {
            self.hist_of.insert((c.session, seq), hist);
        }
        self.history.push(Operation { client: c.session, op: kv, call: self.now, ret: None, output: None });
        c.pending = Some(Pending { seq, cmd: cmd.clone(), hist });
        let text = self.history[hist].op_text();
        self.log(&format!("c{ci}"), || format!("invoke seq={seq} {text}"));
        self.schedule(self.now + GIVE_UP_AFTER_TIMEOUTS * self.client_timeout, Ev::ClientGiveUp { client: ci, seq });
        self.client_step(ci, |p, cx| p.begin(cx, &cmd));
    }

    /// Run one event through client `ci`'s policy and carry out what it asks for.
    fn client_step(&mut self, ci: usize, f: impl FnOnce(&mut dyn ClientPolicy, &mut ClientCtx<'_>)) {
        let mut actions = Vec::new();
        let c = &mut self.clients[ci];
        let now = c.clock.local_time(self.now);
        let mut cx = ClientCtx::new(now, &mut c.rng, &self.members, c.home, &mut actions);
        cx.clock_error = c.clock.error_bound(self.now);
        f(c.policy.as_mut(), &mut cx);
        for action in actions {
            let Some(p) = self.clients[ci].pending.as_ref() else { return };
            let (seq, cmd) = (p.seq, p.cmd.clone());
            match action {
                ClientAction::Send { to, meta } => self.client_send(ci, seq, cmd, to, meta),
                ClientAction::SetTimer { id, after } => {
                    let c = &mut self.clients[ci];
                    c.next_generation += 1;
                    let generation = c.next_generation;
                    c.timers.insert(id, generation);
                    let at = self.now + c.clock.virtual_duration(after);
                    self.schedule(at, Ev::ClientTimer { client: ci, id, generation });
                }
                ClientAction::CancelTimer { id } => {
                    self.clients[ci].timers.remove(&id);
                }
                ClientAction::Finish(outcome) => self.client_finish(ci, outcome),
            }
        }
    }

    /// Send the pending request to replica `to`. A cut client link or a crashed replica is
    /// reported back to the policy as unreachable (a refused connection) after one network
    /// delay.
    fn client_send(&mut self, ci: usize, seq: u64, cmd: Command, to: NodeId, meta: RequestMeta) {
        let n = self.replicas.len();
        let Some(node) = self.members.iter().position(|&m| m == to) else {
            self.schedule(self.now + self.net.base, Ev::ClientUnreachable { client: ci, seq, node: to });
            return;
        };
        self.log(&format!("c{ci}"), || format!("-> n{to} seq={seq}"));
        if self.net.client_cut.contains(&node) || self.replicas[node].proto.is_none() {
            self.schedule(self.now + self.net.base, Ev::ClientUnreachable { client: ci, seq, node: to });
            return;
        }
        for at in self.net.transmit(n + ci, node, self.now) {
            self.schedule(at, Ev::Request { node, client: ci, cmd: cmd.clone(), meta: meta.clone() });
        }
    }

    /// The policy finished the pending request: record its outcome in the history.
    fn client_finish(&mut self, ci: usize, outcome: Outcome) {
        self.clients[ci].timers.clear();
        match outcome {
            Outcome::Done(result) => self.client_done(ci, result),
            Outcome::Invalid(reason) => {
                self.fail(FailureKind::BadReply, format!("c{ci}: valid request refused as invalid: {reason}"));
            }
            Outcome::Rejected { definitive: true, reason } => {
                // Refused for good: the operation must never take effect. The history
                // records it so the linearizability checker verifies exactly that.
                let p = self.clients[ci].pending.take().expect("pending");
                self.log(&format!("c{ci}"), || format!("seq={} rejected for good: {reason}", p.seq));
                let op = &mut self.history[p.hist];
                op.ret = Some(self.now);
                op.output = Some(KvOutput::Rejected);
                self.next_op_later(ci);
            }
            Outcome::Rejected { definitive: false, reason } | Outcome::Unknown(reason) => {
                // May or may not take effect: the operation stays indeterminate.
                let p = self.clients[ci].pending.take().expect("pending");
                self.log(&format!("c{ci}"), || format!("seq={} outcome unknown (indeterminate): {reason}", p.seq));
                self.next_op_later(ci);
            }
        }
    }

    /// The fault-phase retry budget of request `seq` is spent: abandon it (indeterminate).
    /// After the heal a request is never abandoned: it must complete.
    fn client_give_up(&mut self, ci: usize, seq: u64) {
        if self.healed || self.clients[ci].pending.as_ref().is_none_or(|p| p.seq != seq) {
            return;
        }
        let c = &mut self.clients[ci];
        c.pending = None;
        c.timers.clear();
        self.log(&format!("c{ci}"), || format!("give up seq={seq} (indeterminate)"));
        self.next_op_later(ci);
    }

    /// Schedule the client's next operation. Think times are bursty: half are short (the
    /// operations of several clients overlap and conflict), half long enough that the
    /// workload spans the whole fault phase instead of finishing before the first fault.
    fn next_op_later(&mut self, ci: usize) {
        let spread = 4 * self.cfg.fault_phase.as_nanos() as u64 / self.cfg.ops_per_client.max(1) as u64;
        let rng = &mut self.clients[ci].rng;
        let think = if rng.gen_bool(0.5) { uniform(rng, 0, 2 * MS) } else { uniform(rng, 0, spread) };
        self.schedule(self.now + think, Ev::ClientIssue { client: ci });
    }

    fn client_response(&mut self, ci: usize, reply: Reply) {
        let c = &self.clients[ci];
        let Some(p) = c.pending.as_ref() else { return };
        if reply.client != c.session || reply.seq != p.seq {
            return;
        }
        self.log(&format!("c{ci}"), || format!("<- n{} seq={} {:?}", reply.from, reply.seq, reply.body));
        self.client_step(ci, |p, cx| p.on_reply(cx, reply));
    }

    fn client_done(&mut self, ci: usize, result: OpResult) {
        let now = self.now;
        let p = self.clients[ci].pending.take().expect("pending");
        let op = &mut self.history[p.hist];
        let s = |v: Option<Bytes>| v.map(|b| String::from_utf8_lossy(&b).into_owned());
        let output = match (&op.op, result) {
            (KvOp::Rich { .. }, OpResult::Error(e)) if e.starts_with("stale request") => {
                self.log(&format!("c{ci}"), || format!("seq={} answered with error {e:?}", p.seq));
                self.next_op_later(ci);
                return;
            }
            (KvOp::Rich { op: rich, .. }, result) => {
                let text = |b: &Bytes| String::from_utf8_lossy(b).into_owned();
                let c = &mut self.clients[ci];
                match (rich, &result) {
                    (Op::Versions { keys }, OpResult::Versions(vs)) => {
                        c.watch = Some(keys.iter().cloned().zip(vs.iter().copied()).collect());
                    }
                    (Op::Get { key }, OpResult::Value(v)) => {
                        c.seen.insert(text(key), v.as_ref().map(text));
                    }
                    (Op::Put { key, value }, _) => {
                        c.seen.insert(text(key), Some(text(value)));
                    }
                    _ => {}
                }
                op.ret = Some(now);
                op.output = Some(KvOutput::Result(result));
                self.next_op_later(ci);
                return;
            }
            (KvOp::Get { .. }, OpResult::Value(v)) => KvOutput::Value(s(v)),
            (KvOp::Put { .. }, OpResult::Done) => KvOutput::Done,
            (KvOp::Delete { .. }, OpResult::Deleted(b)) => KvOutput::Deleted(b),
            (KvOp::Cas { .. }, OpResult::Cas { ok, current }) => KvOutput::Cas { ok, current: s(current) },
            (_, OpResult::Error(e)) => {
                // The state machine could not tell whether the request ran (stale session):
                // the operation stays indeterminate.
                self.log(&format!("c{ci}"), || format!("seq={} answered with error {e:?}", p.seq));
                self.next_op_later(ci);
                return;
            }
            (op, other) => {
                let detail = format!("c{ci}: result {other:?} does not fit {op:?}");
                self.fail(FailureKind::BadReply, detail);
                return;
            }
        };
        let key = op.op.key().to_string();
        let seen = match (&op.op, &output) {
            (KvOp::Put { value, .. }, _) => Some(value.clone()),
            (KvOp::Cas { new, .. }, KvOutput::Cas { ok: true, .. }) => new.clone(),
            (_, KvOutput::Value(v)) | (_, KvOutput::Cas { current: v, .. }) => v.clone(),
            _ => None,
        };
        op.ret = Some(now);
        op.output = Some(output);
        self.clients[ci].seen.insert(key, seen);
        self.next_op_later(ci);
    }
}

/// One operation of the rich workload (see [`SimConfig::rich`]).
fn rich_op(c: &mut Client, ci: usize, seq: u64, keys: usize) -> Op {
    let groups = (keys / 4).max(1) as u64;
    let g = c.rng.gen_range(0..groups);
    let key = |i: u64| Bytes::from(format!("g{g}:{i}"));
    let unique = Bytes::from(format!("c{ci}.{seq}"));
    let rng = &mut c.rng;
    let roll = rng.gen_range(0..100);
    if g % 2 == 1 {
        // A group of lists.
        let k = key(rng.gen_range(0..4));
        let other = key(rng.gen_range(0..4));
        let left = rng.gen_bool(0.5);
        return match roll {
            0..25 => Op::ListPush { key: k, values: vec![unique], left, only_existing: false },
            25..40 => Op::ListPop { key: k, left, count: rng.gen_bool(0.3).then_some(2) },
            40..55 => Op::ListRange { key: k, start: 0, stop: -1 },
            55..62 => Op::ListLen { key: k },
            62..70 => Op::ListIndex { key: k, index: rng.gen_range(-2..2) },
            70..80 => Op::ListMove { from: k, to: other, from_left: left, to_left: rng.gen_bool(0.5) },
            80..85 => Op::Delete { key: k },
            85..92 => Op::Multi {
                ops: vec![
                    Op::ListPush { key: k, values: vec![unique], left, only_existing: false },
                    Op::ListPop { key: other, left: !left, count: None },
                ],
                watch: Vec::new(),
            },
            _ => Op::Scan { start: Bytes::from(format!("g{g}:")), end: Bytes::from(format!("g{g};")), limit: 0 },
        };
    }
    // A group of strings; key 3 is a counter (INCRBY), the others take unique values.
    let k = key(rng.gen_range(0..3));
    let k2 = key(rng.gen_range(0..3));
    let counter = key(3);
    if let Some(watch) = c.watch.take() {
        // MULTI/EXEC after a WATCH of the keys read by the last `Versions`.
        let target = watch.first().map(|(k, _)| k.clone()).unwrap_or(k);
        return Op::Multi {
            ops: vec![Op::Put { key: target, value: unique }, Op::IncrBy { key: counter, by: 1 }],
            watch,
        };
    }
    let expect = c.seen.get(&String::from_utf8_lossy(&k).into_owned()).cloned().flatten().map(Bytes::from);
    match roll {
        0..15 => Op::Get { key: if rng.gen_bool(0.8) { k } else { counter } },
        15..27 => Op::Put { key: k, value: unique },
        27..31 => Op::Delete { key: if rng.gen_bool(0.7) { k } else { counter } },
        31..38 => Op::Cas { key: k, expect, new: Some(unique) },
        38..46 => Op::IncrBy { key: counter, by: rng.gen_range(1..5) },
        46..50 => Op::Append { key: k, value: unique },
        50..57 => Op::MultiGet { keys: vec![k, k2, counter] },
        57..62 => Op::MultiPut { pairs: vec![(k, unique.clone()), (k2, Bytes::from(format!("{}m", ci)))] },
        62..65 => Op::MultiDelete { keys: vec![k, k2] },
        65..68 => Op::Exists { keys: vec![k, k2, counter] },
        68..74 => Op::Scan { start: Bytes::from(format!("g{g}:")), end: Bytes::from(format!("g{g};")), limit: 0 },
        74..82 => Op::Multi {
            ops: vec![Op::Put { key: k, value: unique }, Op::IncrBy { key: counter, by: 1 }, Op::Get { key: k2 }],
            watch: Vec::new(),
        },
        82..90 => Op::Versions { keys: if rng.gen_bool(0.5) { vec![k] } else { vec![k, counter] } },
        _ => Op::Strlen { key: k },
    }
}

impl Operation {
    fn op_text(&self) -> String {
        match &self.op {
            KvOp::Get { key } => format!("get {key}"),
            KvOp::Put { key, value } => format!("put {key}={value}"),
            KvOp::Delete { key } => format!("delete {key}"),
            KvOp::Cas { key, expect, new } => format!("cas {key} {expect:?}->{new:?}"),
            KvOp::Rich { op, .. } => format!("{op:?}"),
        }
    }
}
