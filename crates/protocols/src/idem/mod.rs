//! IDEM: collaborative overload prevention with proactive rejection (Berger et al.,
//! "IDEM: Achieving Low and Reliable Latency in Replicated Systems under Overload").
//!
//! Every replica decides for itself whether to accept a request and tells a rejected client so
//! at once; the leader orders only requests that f + 1 replicas accepted. The paper's
//! agreement protocol (§4.3, PROPOSE/COMMIT in a window) is a stable-leader Paxos; synod runs
//! it on the shared MultiPaxos core (phase 1 = view change §4.5, phase 2 = agreement §4.3, the
//! core's catch-up and snapshots = checkpoints §4.4), and IDEM is a layer on that core
//! ([`crate::layers`]). Reading order, top-down like the paper:
//!
//! 1. **Acceptance test** (§5.1, `accept.rs`) — the shared admission control
//!    ([`crate::admission`]: reject threshold RT on the active requests, active queue
//!    management with fair time-sliced prioritisation, a draw seeded by the request id).
//!    A rejected client gets `ReplyBody::Rejected` at once; rejections are sticky per request
//!    id (a retransmission is rejected again without a new test) and the rejected request is
//!    kept in a bounded cache (§5.2) in case other replicas accepted it.
//! 2. **REQUIRE and ordering** (§4.3, `accept.rs`) — a replica that accepted a request sends
//!    ⟨REQUIRE, id⟩ to the leader; the leader proposes the request once f + 1 replicas
//!    (itself not necessarily among them) required it, fetching its body if it has none
//!    (⟨FETCH, id⟩). Agreement is the core's phase 2; every replica that holds the client's
//!    connection answers it once the request executed (the paper: the leader; with clients
//!    that multicast, the first answer wins). Executed requests leave the active set.
//! 3. **Forwarding** (§5.2, `forward.rs`) — a replica whose accepted request is not executed
//!    within the forward delay (the paper: 10 ms) forwards it to every replica, which accepts
//!    a forward regardless of its load or earlier verdict, so a request one correct replica
//!    accepted is eventually ordered (Property 5.1). After a view change, replicas re-send
//!    their REQUIREs to the new leader.
//! 4. **Implicit garbage collection** (§4.4, §6.1, `forward.rs`) — no checkpoint messages:
//!    a replica drops the log below its newest slot minus the window w = n × RT, since a
//!    proposal that far ahead means f + 1 replicas executed the old requests (they had room to
//!    accept new ones). A lagging replica fetches a snapshot (the core's on-demand transfer).
//!    The durable image is compacted every `compact_every` executed slots.
//!
//! Decisions the paper leaves open, made here:
//! * clients send every request to all replicas (`idem::policy::IdemPolicy`, which marks the
//!   request's `RequestMeta::ext` as multicast). A replica that receives an unmarked request
//!   from a client relays it to its peers (option `relay`, on by default), so that clients
//!   that send to one replica only (other client policies, hosts not yet running the
//!   protocol's policy) still get IDEM's behaviour: every replica runs its own test;
//! * a forward of a request this replica rejected is still accepted (someone else accepted
//!   it, so the client's outcome cannot be a definitive failure);
//! * an accepted request whose client already had a *newer* request executed is released
//!   from the active set (the client gave up on it; if it still commits, the session table
//!   answers it as a stale retry, the same on every replica);
//! * a request accepted but not executed within `hold_max` (default 30 s) is released
//!   (it was executed inside a snapshot this replica installed, or the cluster lost it);
//! * verdicts are sticky per request id, also across a restart: a replica's first verdict
//!   (accept or reject) is made durable before the REJECT or REQUIRE it causes leaves, and a
//!   retransmission gets the same verdict without a new test (`admission::Verdicts` has the
//!   argument why a client's `n` REJECTs then mean that nobody accepted); verdicts are
//!   dropped once a newer request of the same client executed (the session table answers
//!   older ones as stale). The rejection cache (bodies, clients to answer) is in memory;
//! * fast rejects: a verdict's durability would hold its REJECT behind the group commit
//!   (with everything else the replica persisted in that turn), so a replica first sends an
//!   early REJECT that is not held (`ReplyBody::RejectedEarly` through `Action::ReplyNow`)
//!   and the durable one after the commit. The client counts early REJECTs towards
//!   ambivalence only (`n − f`), durable ones towards a definitive failure (`n`): a replica
//!   that crashes before its verdict is durable may forget it (option `early_reject`).
//!
//! Variants: `idem-nopr` (no proactive rejection, `admission=off`) and `idem-noaqm` (tail drop
//! only, `admission=taildrop`), the paper's ablations.

mod accept;
mod forward;
pub mod msg;
pub mod policy;

use crate::admission::{AcceptanceTest, AdmissionConfig, Mode, RejectCache, ReqId, Verdicts};
use crate::layers::{Compaction, LayerMsg, LayerOp, MultiPaxosLayer, TrimPolicy};
use crate::multipaxos::{MultiPaxos, Variant};
use crate::registry::Setup;
use bytes::Bytes;
use msg::{IdemMsg, IdemRecord};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::str::FromStr;
use std::time::Duration;
use synod_core::protocol::{decode, encode};
use synod_core::{ClientRef, Command, Ctx, NodeId, Protocol, ProtocolParams, RequestMeta, Time, TimerId};

/// The layer's periodic tick (forwarding, REQUIRE re-sends, garbage collection).
const TIMER_TICK: TimerId = 10;
/// Recently executed request ids remembered (late REQUIREs, relays and forwards of them are
/// ignored).
const EXECUTED_MEMORY: usize = 8192;

/// Registry constructor for `idem`.
pub fn build(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
    build_named(setup, "idem", Mode::Aqm, Deviation::default())
}

/// Registry constructor for `idem-nopr` (no proactive rejection, §7).
pub fn build_nopr(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
    build_named(setup, "idem-nopr", Mode::Off, Deviation::default())
}

/// Registry constructor for `idem-noaqm` (tail drop only, §7.7).
pub fn build_noaqm(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
    build_named(setup, "idem-noaqm", Mode::TailDrop, Deviation::default())
}

fn build_named(setup: &Setup, name: &'static str, mode: Mode, dev: Deviation) -> Result<Box<dyn Protocol>, String> {
    let cfg = IdemConfig::from_params(&setup.params, mode)?;
    Ok(Box::new(MultiPaxos::with_layer(setup, Variant::default(), name, Box::new(Idem::new(cfg, dev)))?))
}

/// Every option IDEM accepts: the admission options and its own.
pub const OPTIONS: &[&str] = &[
    "admission",
    "reject_threshold",
    "aqm_start_pct",
    "slice_ms",
    "groups",
    "forward_ms",
    "reject_cache",
    "relay",
    "hold_max_ms",
    "compact_every",
    "early_reject",
    // Read by the client policy only (`policy::client`); replicas accept and ignore them, so
    // that one protocol spec (`idem[ambivalence=pessimistic]`) configures both sides.
    "ambivalence",
    "optimistic_wait_ms",
    "await_durable",
];

/// IDEM's knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdemConfig {
    pub admission: AdmissionConfig,
    /// Forward an accepted request not executed within this delay (§5.2; the paper: 10 ms).
    /// Also the period of the layer's tick.
    pub forward_delay: Duration,
    /// Rejected requests kept (sticky rejection, bodies at hand).
    pub reject_cache: usize,
    /// Relay requests received from a client to the other replicas.
    pub relay: bool,
    /// Release an accepted request not executed within this long.
    pub hold_max: Duration,
    /// Compact the durable image every this many executed slots (0 = never).
    pub compact_every: u64,
    /// Send an early REJECT before the verdict is durable (`ReplyBody::RejectedEarly`, not
    /// held by the group commit), then the durable one.
    pub early_reject: bool,
}

fn number<T: FromStr>(p: &ProtocolParams, name: &str, default: T) -> Result<T, String> {
    match p.options.get(name) {
        None => Ok(default),
        Some(v) => v.trim().parse().map_err(|_| format!("option {name}: expected a number, got {v:?}")),
    }
}

impl IdemConfig {
    pub fn from_params(p: &ProtocolParams, mode: Mode) -> Result<IdemConfig, String> {
        p.check_options("idem", OPTIONS)?;
        let admission = AdmissionConfig::from_params(p, mode)?;
        let forward_ms: u64 = number(p, "forward_ms", 10)?;
        let hold_ms: u64 = number(p, "hold_max_ms", 30_000)?;
        if forward_ms == 0 || hold_ms == 0 {
            return Err("options forward_ms and hold_max_ms must be > 0".into());
        }
        Ok(IdemConfig {
            admission,
            forward_delay: Duration::from_millis(forward_ms),
            reject_cache: number(p, "reject_cache", 4096usize)?.max(1),
            relay: p.flag("relay", true)?,
            hold_max: Duration::from_millis(hold_ms),
            compact_every: number(p, "compact_every", p.snapshot_every)?,
            early_reject: p.flag("early_reject", true)?,
        })
    }
}

/// Deliberate deviations for the mutation tests; all off in IDEM. `forget_rejections` breaks
/// the client's definitive failure (a request every replica rejected executes): the simulator
/// catches it with `reject_threshold=2` (mutant `idem-sticky-off`). `require_f` and `gc_early`
/// break the paper's rules for f + 1 REQUIREs (§4.3) and the window r_max = n × RT (§4.4,
/// Theorem 6.1), which this implementation does not rely on for safety: proposals carry the
/// request body (the paper's f + 1 make sure a correct replica can forward it), and the core
/// trims only slots this replica executed and hands a lagging one a snapshot (the paper's
/// window keeps f + 1 replicas able to continue without one). No history shows either, so
/// the layer reports ghost facts the simulator checks the rules on: every acceptance
/// (`Ghost::Accepted`; a command is applied only after a majority accepted it, mutant
/// `idem-require-f`) and every implicit garbage collection (`Ghost::Discarded`; instance s
/// is dropped only once s + r_max arrived, mutant `idem-gc-early`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Deviation {
    /// Propose after f REQUIREs instead of f + 1 (a request only the leader accepted can be
    /// ordered, and lost with the leader: Property 5.1 no longer holds).
    pub require_f: bool,
    /// Re-run the acceptance test on a retransmission of a rejected request instead of
    /// rejecting it again (a request the client saw rejected by all replicas may then
    /// execute).
    pub forget_rejections: bool,
    /// Implicit garbage collection one instance too early (window n × RT − 1, §4.4).
    pub gc_early: bool,
}

/// A request this replica accepted and that has not executed yet (an *active* request).
#[derive(Clone, Debug)]
struct Held {
    cmd: Command,
    /// The client connected here that sent it (answered on execution).
    client: Option<ClientRef>,
    since: Time,
    /// The leader the last REQUIRE went to, and when.
    required: Option<(NodeId, Time)>,
    /// When it was last forwarded.
    forwarded: Option<Time>,
}

/// Leader side: who required a request.
#[derive(Clone, Debug)]
struct Requires {
    from: BTreeSet<NodeId>,
    first: Time,
    /// When the body was last fetched.
    fetched: Option<Time>,
}

/// Counters for the status.
#[derive(Clone, Copy, Debug, Default)]
struct Stats {
    accepted: u64,
    rejected: u64,
    forwarded: u64,
    fetched: u64,
    released: u64,
}

/// The IDEM layer on the MultiPaxos core.
pub struct Idem {
    cfg: IdemConfig,
    dev: Deviation,
    test: AcceptanceTest,
    /// Active requests: accepted here, not executed yet.
    held: BTreeMap<ReqId, Held>,
    rejected: RejectCache,
    /// This replica's verdict per request id, durable (sticky across restarts).
    verdicts: Verdicts,
    executed: BTreeSet<ReqId>,
    executed_order: VecDeque<ReqId>,
    /// Newest executed seq per client session.
    newest: BTreeMap<u64, u64>,
    // Leader state (cleared when leadership is lost).
    requires: BTreeMap<ReqId, Requires>,
    /// Bodies fetched from requirers.
    bodies: BTreeMap<ReqId, Command>,
    /// Requests handed to the core for proposal, and when.
    proposed: BTreeMap<ReqId, Time>,
    ready: Vec<Command>,
    tick_armed: bool,
    stats: Stats,
}

impl Idem {
    pub(crate) fn new(cfg: IdemConfig, dev: Deviation) -> Idem {
        Idem {
            cfg,
            dev,
            test: AcceptanceTest::new(cfg.admission),
            held: BTreeMap::new(),
            rejected: RejectCache::new(cfg.reject_cache),
            verdicts: Verdicts::default(),
            executed: BTreeSet::new(),
            executed_order: VecDeque::new(),
            newest: BTreeMap::new(),
            requires: BTreeMap::new(),
            bodies: BTreeMap::new(),
            proposed: BTreeMap::new(),
            ready: Vec::new(),
            tick_armed: false,
            stats: Stats::default(),
        }
    }

    /// Arm the periodic tick once (it re-arms itself).
    fn arm_tick(&mut self, ctx: &mut Ctx<'_>) {
        if !self.tick_armed {
            self.tick_armed = true;
            ctx.set_timer(TIMER_TICK, self.cfg.forward_delay);
        }
    }

    /// The body of a request, if this replica has it (accepted, rejected or fetched).
    fn body(&self, id: &ReqId) -> Option<&Command> {
        self.held
            .get(id)
            .map(|h| &h.cmd)
            .or_else(|| self.rejected.get(id).map(|r| &r.cmd))
            .or_else(|| self.bodies.get(id))
    }

    fn remember_executed(&mut self, id: ReqId) {
        if self.executed.insert(id) {
            self.executed_order.push_back(id);
            while self.executed_order.len() > EXECUTED_MEMORY {
                if let Some(old) = self.executed_order.pop_front() {
                    self.executed.remove(&old);
                }
            }
        }
    }
}

impl MultiPaxosLayer for Idem {
    fn options(&self) -> &'static [&'static str] {
        OPTIONS
    }

    fn compaction(&self) -> Compaction {
        Compaction { trim: TrimPolicy::Bound("implicit"), compact_every: self.cfg.compact_every }
    }

    fn commit_promptly(&self) -> bool {
        true
    }

    fn admit(
        &mut self,
        core: &MultiPaxos,
        ctx: &mut Ctx<'_>,
        client: ClientRef,
        cmd: Command,
        meta: &RequestMeta,
    ) -> Option<(ClientRef, Command)> {
        self.arm_tick(ctx);
        let multicast = meta.ext.as_ref() == policy::MULTICAST;
        self.on_client_request(core, ctx, client, cmd, multicast);
        None
    }

    fn take_ready(&mut self) -> Vec<Command> {
        std::mem::take(&mut self.ready)
    }

    fn on_command_executed(&mut self, _now: Time, cmd: &Command) -> Option<ClientRef> {
        if cmd.client == 0 {
            return None;
        }
        let id = (cmd.client, cmd.seq);
        self.remember_executed(id);
        let newest = self.newest.entry(cmd.client).or_insert(0);
        *newest = (*newest).max(cmd.seq);
        self.verdicts.executed(cmd.client, cmd.seq);
        self.requires.remove(&id);
        self.bodies.remove(&id);
        self.proposed.remove(&id);
        let held = self.held.remove(&id).and_then(|h| h.client);
        held.or_else(|| self.rejected.take_client(&id))
    }

    fn on_become_leader(&mut self, ctx: &mut Ctx<'_>) {
        // Requests the previous leader proposed are in the log phase 1 recovered; the rest
        // come back with the REQUIREs replicas re-send to the new leader.
        self.proposed.clear();
        self.arm_tick(ctx);
    }

    fn on_leadership_lost(&mut self, _ctx: &mut Ctx<'_>) {
        self.ready.clear();
        self.requires.clear();
        self.bodies.clear();
        self.proposed.clear();
    }

    fn on_message(&mut self, core: &MultiPaxos, ctx: &mut Ctx<'_>, from: NodeId, msg: &[u8]) -> LayerMsg {
        let Ok(msg) = decode::<IdemMsg>(msg) else { return LayerMsg::Handled };
        self.arm_tick(ctx);
        match msg {
            IdemMsg::Relay { cmd } => self.on_relay(core, ctx, cmd),
            IdemMsg::Require { id } => self.on_require(core, ctx, from, id),
            IdemMsg::Forward { cmd } => self.on_forward(core, ctx, cmd),
            IdemMsg::Fetch { id } => self.on_fetch(ctx, from, id),
            IdemMsg::Body { cmd } => self.on_body(core, ctx, cmd),
        }
        LayerMsg::Handled
    }

    fn on_timer(&mut self, core: &MultiPaxos, ctx: &mut Ctx<'_>, timer: TimerId) -> Option<LayerOp> {
        if timer != TIMER_TICK {
            return None;
        }
        ctx.set_timer(TIMER_TICK, self.cfg.forward_delay);
        self.on_tick(core, ctx)
    }

    fn status(&self, _core: &MultiPaxos, extra: &mut BTreeMap<String, String>) {
        let a = self.test.config();
        extra.insert("admission".into(), a.mode.name().into());
        extra.insert("reject_threshold".into(), a.threshold.to_string());
        extra.insert("active".into(), self.held.len().to_string());
        extra.insert("accepted".into(), self.stats.accepted.to_string());
        extra.insert("rejected".into(), self.stats.rejected.to_string());
        extra.insert("forwarded".into(), self.stats.forwarded.to_string());
        extra.insert("fetched".into(), self.stats.fetched.to_string());
        extra.insert("released".into(), self.stats.released.to_string());
        extra.insert("reject_cache".into(), self.rejected.len().to_string());
        extra.insert("verdicts".into(), self.verdicts.len().to_string());
    }

    fn recover_record(&mut self, record: &[u8]) -> Result<(), String> {
        match decode::<IdemRecord>(record) {
            Ok(IdemRecord::Verdict(v)) => {
                self.verdicts.replay(v);
                Ok(())
            }
            Err(e) => Err(format!("idem record: {e}")),
        }
    }

    fn durable_records(&self) -> Vec<Bytes> {
        self.verdicts.records().map(|v| encode(&IdemRecord::Verdict(v))).collect()
    }

    fn describe_message(&self, msg: &[u8]) -> String {
        match decode::<IdemMsg>(msg) {
            Ok(IdemMsg::Relay { cmd }) => format!("Relay c={} s={}", cmd.client, cmd.seq),
            Ok(IdemMsg::Forward { cmd }) => format!("Forward c={} s={}", cmd.client, cmd.seq),
            Ok(IdemMsg::Body { cmd }) => format!("Body c={} s={}", cmd.client, cmd.seq),
            Ok(m) => format!("{m:?}"),
            Err(e) => format!("<undecodable idem message: {e}>"),
        }
    }
}

/// IDEM's mutant for the simulator (feature `mutants`, `synod_protocols::mutants`), with an
/// overload setting unless the check names its own (`reject_threshold=2`: the simulator's 3–5
/// clients exceed it, so requests are rejected, retransmitted and forwarded).
#[cfg(feature = "mutants")]
pub(crate) mod mutants {
    use super::*;

    fn overloaded(setup: &Setup, dev: Deviation) -> Result<Box<dyn Protocol>, String> {
        let mut setup = setup.clone();
        setup.params.options.entry("reject_threshold".into()).or_insert_with(|| "2".into());
        build_named(&setup, "idem", Mode::Aqm, dev)
    }

    /// A retransmission of a rejected request runs the acceptance test again.
    pub fn build_forget_rejections(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
        overloaded(setup, Deviation { forget_rejections: true, ..Deviation::default() })
    }

    /// The leader proposes after f REQUIREs instead of f + 1 (§4.3).
    pub fn build_require_f(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
        overloaded(setup, Deviation { require_f: true, ..Deviation::default() })
    }

    /// Implicit garbage collection one instance too early: window n × RT − 1 (§4.4).
    pub fn build_gc_early(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
        overloaded(setup, Deviation { gc_early: true, ..Deviation::default() })
    }
}

#[cfg(test)]
pub(crate) fn build_with(setup: &Setup, dev: Deviation) -> Result<Box<dyn Protocol>, String> {
    build_named(setup, "idem", Mode::Aqm, dev)
}

#[cfg(test)]
mod tests;
