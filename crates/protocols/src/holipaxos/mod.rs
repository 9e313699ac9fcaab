//! HoliPaxos (Liang, Jabrayilov, Aghayev, Charapko, PVLDB 18(8) 2025) as a layer on the
//! MultiPaxos core of `crate::multipaxos` (the interface: `crate::layers`).
//!
//! HoliPaxos does not change Paxos: phase 1, phase 2 and the quorum rules are the ones of
//! `multipaxos`, so safety is MultiPaxos's. It changes *when* elections start, *who* may
//! win, *how the log is cleaned* and *what the leader sends*. All of it is one layer,
//! `Holi`, configured by [`HoliConfig`]: the core calls its hooks (`layer.rs`) at the points
//! named below; plain `multipaxos` runs with the no-op layer. HoliPaxos's own messages and
//! markers ([`msg`]) travel through the core as opaque bytes.
//!
//! Reading order (paper sections):
//!
//! 1. **Integrated failure detector (§3.1.1).** The leader's periodic message carries its
//!    ballot; a node receiving it from a stale leader answers with a rejection (`Nack`)
//!    carrying the higher ballot, which makes the old leader step down (the Leader-Quorum-
//!    Loss partition of Fig. 2). Timeouts are drawn per node and per reset from the seeded
//!    RNG, so nodes do not time out together. → `rejects_stale_leaders` (used by the core's
//!    `follow`), `on_nack`. Plain
//!    `multipaxos` does not reject: like the paper's baseline, its failure detector only
//!    knows that the leader it followed is alive (a stale leader's heartbeat still resets
//!    the election timer), so the stale leader learns the higher ballot only when one of
//!    its Accepts is rejected.
//! 2. **Churn avoidance (§3.1.2), [`churn`].**
//!    *Rule 1*: a node counts the elections it started in a sliding window (3 s); from the
//!    3rd on, its heartbeat interval is multiplied by a penalty that grows ×4 with each
//!    further election, so a churning leader's heartbeats stop reaching followers in time,
//!    a central node times out and takes over (Fig. 3), and the churners, now hearing a
//!    leader, stop campaigning; it resets when the window empties. → `heartbeat_penalty`.
//!    *Rule 2*: a node counts the distinct answers (promises *and* rejections) to its
//!    phase 1; without a quorum it turns passive and probes with the invalid ballot 0, which
//!    every node rejects without promising anything; a quorum of answers to a probe
//!    requalifies it and it campaigns at once (Fig. 5a). → `campaign`, `on_probe`,
//!    `screen_prepare` (ballot 0), `on_phase1_answer`.
//!    *Rule 3*: every node remembers the Prepares it received (5 s window); a candidate
//!    with ≥ 2 attempts in the window is a churner, and a churner is rejected (`Nack` with
//!    ballot 0, i.e. without handing it a ballot to outbid) while a higher-id node is still
//!    in the race — churning too, or the live leader this node follows. All common nodes
//!    reach the same deterministic choice (Theorem 1, case 1), so the highest-id churner
//!    wins. Requalification: attempts age out of the window, and a churner is no longer
//!    blocked once every higher competitor is quiet (a crashed winner cannot block the
//!    others). Rule 1 (3 own elections / 3 s) needs longer to trigger than Rule 3 (2
//!    attempts of each of two churners), as the paper requires; see [`churn::ChurnConfig`]
//!    for how the paper's 5 elections / 3 s translate to synod's timeouts. →
//!    `screen_prepare`.
//! 3. **Slowdown detector (§3.2, Algorithm 1), [`slowdown`].** Every 0.5 s the leader
//!    samples its in-flight operations (queued + proposed-not-executed + what the driver
//!    holds, `ctx.load.queued_requests`) and its executed count; one variance per
//!    tumbling window of 15 samples (Algorithm 1 empties `metrics` after each window;
//!    `slowdown_sliding = on` slides it by one sample instead, which counted each stall 15
//!    times and made healthy leaders declare in Fig. 10(c)), two-sided CUSUM (threshold
//!    3000, ω 100 ops²); a change that comes with ≥ 10 % more throughput — measured from
//!    CUSUM's change point, where C⁺ last left 0, against the window before it — is
//!    dismissed, and the variance baseline is then re-learned at the new load. On a
//!    detection the leader commits an *overload declaration marker*
//!    ([`msg::Marker::Overload`]) to the log. A follower executing it whose
//!    last successful leader (the one whose Accepts it took) is the declarer, still
//!    in the declared ballot, starts one election after a random backoff — at most one
//!    marker-triggered election per marker and node. A later leader writes a *remediation
//!    marker* once its detector, warmed up, is calm and its in-flight variance is at most
//!    half the variance recorded in the declaration (the paper leaves the remedy test open;
//!    a new leader under the *same* overload sees no change point of its own, so the
//!    comparison must be with the declarer's level); until the
//!    declaration is remedied (or `slowdown_redeclare_ms` passed) no new one is written, so
//!    a general overload causes one election cycle, not churn. A replica that declared
//!    itself overloaded sits out the elections later markers start for
//!    `slowdown_sitout_ms` (default 10 min; the paper does not say who should win), so a
//!    marker election does not hand the lead back to the slow node. → `on_timer`
//!    (`on_slowdown_tick`), `on_executed` (`on_marker`). `slowdown_robust = on` replaces the variance by the squared,
//!    normal-scaled median absolute deviation (see [`slowdown::SlowdownConfig::robust`]):
//!    with the printed variance, one short stall of a leader whose in-flight count is
//!    near 0 crosses the paper's threshold (measured in Fig. 10c, session 4 note).
//! 4. **Log management (§3.3), [`trim`].** Followers report their last executed index
//!    (LE) in the answer to every control message; the leader computes GLE = min LE over
//!    all members (frozen while one is silent) and sends it; every node trims its in-memory
//!    log up to GLE. No periodic snapshots: a node that finds its next entries trimmed
//!    (a wiped node, or a lagging one under quorum trim) asks a *non-leader* peer for an
//!    on-demand snapshot (chunked), while its own reported LE keeps GLE frozen. Options
//!    `trim = gle | quorum | snapshot | none` select HoliPaxos's GLE trim, the paper's
//!    "quorum trim" comparison, Raft-style periodic snapshots, or nothing. → `compaction`,
//!    `on_message` (`ControlAck`), `snapshot_source`; the core's `trim_log`,
//!    `request_snapshot`, `install_snapshot`.
//!    Durability: the paper's system is in-memory. Here the durable image (snapshot + log
//!    suffix) is compacted every `compact_every` executed entries — by default the cluster's
//!    `snapshot_every`, so the WAL stays bounded like every other protocol's (`0` = never:
//!    the WAL keeps every record); a restarted node replays its records and never needs a
//!    peer for that. (Found by the shared registry tests: the WAL grew without bound.)
//! 5. **Single control message (§3.4).** `HoliMsg::Control { ballot, le, gle }` replaces the
//!    heartbeat: ballot (failure detector), the leader's LE as a batch commit marker, GLE.
//!    A follower marks committed, in slot order, every slot up to LE that it accepted *in
//!    the leader's ballot* and stops at the first gap or older-ballot value (which it
//!    fetches) — the paper's "commit up to LE only without gaps", plus the ballot check that
//!    keeps it safe when a follower still holds an older leader's value. → `heartbeat`,
//!    `on_message` (`Control`: the core's `learn_commit`), `after_beat`.
//!
//! 6. **Reconfiguration (§3.3's fix for an extended failure freezing GLE).** Single-server
//!    membership changes through the log, shared with MultiPaxos (multipaxos "Membership"
//!    section, docs/design.md): GLE and quorum trim use the current members, so a removed
//!    node no longer freezes GLE and a new node's LE counts once it joined; the new node
//!    catches up through an on-demand snapshot when the log is trimmed.
//!
//! Marker state is protocol state derived from the log, so a node
//! that skips markers by installing a snapshot does not know about them (only liveness
//! heuristics depend on markers).

pub mod churn;
mod layer;
pub mod msg;
pub mod slowdown;
pub mod trim;

use crate::multipaxos::{MultiPaxos, Variant};
use crate::registry::Setup;
use churn::{ChurnConfig, ChurnRules};
use slowdown::{SlowdownConfig, SlowdownDetector};
use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;
use synod_core::{Ballot, NodeId, Protocol, ProtocolParams, Time};
use trim::{LeTracker, TrimMode};

/// Registry constructor for `holipaxos`.
pub fn build(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
    let cfg = HoliConfig::from_params(&setup.params)?;
    Ok(Box::new(MultiPaxos::with_layer(setup, Variant::default(), "holipaxos", Box::new(Holi::new(cfg)))?))
}

/// Every option `holipaxos` accepts (ProtocolParams::options).
pub const OPTIONS: &[&str] = &[
    "trim",
    "compact_every",
    "rule1",
    "rule1_window_ms",
    "rule1_elections",
    "rule1_factor",
    "rule1_max_penalty",
    "rule2",
    "rule3",
    "rule3_window_ms",
    "rule3_attempts",
    "slowdown",
    "slowdown_sample_ms",
    "slowdown_samples",
    "slowdown_threshold",
    "slowdown_omega",
    "slowdown_tp_gain",
    "slowdown_robust",
    "slowdown_sliding",
    "slowdown_redeclare_ms",
    "slowdown_sitout_ms",
];

/// The knobs of the HoliPaxos layers, from protocol options.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HoliConfig {
    pub trim: TrimMode,
    /// Compact the durable image every this many executed entries (0 = never; the option's
    /// default is the cluster's `snapshot_every`).
    pub compact_every: u64,
    pub churn: ChurnConfig,
    pub slowdown: SlowdownConfig,
}

impl Default for HoliConfig {
    fn default() -> Self {
        HoliConfig {
            trim: TrimMode::Gle,
            compact_every: 0,
            churn: ChurnConfig::default(),
            slowdown: SlowdownConfig::default(),
        }
    }
}

fn number<T: FromStr>(p: &ProtocolParams, name: &str, default: T) -> Result<T, String> {
    match p.options.get(name) {
        None => Ok(default),
        Some(v) => v.trim().parse().map_err(|_| format!("option {name}: expected a number, got {v:?}")),
    }
}

fn millis(p: &ProtocolParams, name: &str, default: Duration) -> Result<Duration, String> {
    let ms: u64 = number(p, name, default.as_millis() as u64)?;
    if ms == 0 {
        return Err(format!("option {name} must be > 0"));
    }
    Ok(Duration::from_millis(ms))
}

impl HoliConfig {
    pub fn from_params(p: &ProtocolParams) -> Result<HoliConfig, String> {
        p.check_options("holipaxos", OPTIONS)?;
        let d = HoliConfig::default();
        let trim = match p.options.get("trim") {
            None => d.trim,
            Some(s) => TrimMode::parse(s)?,
        };
        let churn = ChurnConfig {
            rule1: p.flag("rule1", d.churn.rule1)?,
            rule1_window: millis(p, "rule1_window_ms", d.churn.rule1_window)?,
            rule1_elections: number(p, "rule1_elections", d.churn.rule1_elections)?.max(1),
            rule1_factor: number(p, "rule1_factor", d.churn.rule1_factor)?.max(1),
            rule1_max_penalty: number(p, "rule1_max_penalty", d.churn.rule1_max_penalty)?.max(1),
            rule2: p.flag("rule2", d.churn.rule2)?,
            rule3: p.flag("rule3", d.churn.rule3)?,
            rule3_window: millis(p, "rule3_window_ms", d.churn.rule3_window)?,
            rule3_attempts: number(p, "rule3_attempts", d.churn.rule3_attempts)?.max(1),
        };
        let slowdown = SlowdownConfig {
            enabled: p.flag("slowdown", d.slowdown.enabled)?,
            sample: millis(p, "slowdown_sample_ms", d.slowdown.sample)?,
            samples: number(p, "slowdown_samples", d.slowdown.samples)?.max(2),
            threshold: number(p, "slowdown_threshold", d.slowdown.threshold)?,
            omega: number(p, "slowdown_omega", d.slowdown.omega)?,
            tp_gain: number(p, "slowdown_tp_gain", d.slowdown.tp_gain)?,
            robust: p.flag("slowdown_robust", d.slowdown.robust)?,
            sliding: p.flag("slowdown_sliding", d.slowdown.sliding)?,
            redeclare_after: millis(p, "slowdown_redeclare_ms", d.slowdown.redeclare_after)?,
            sitout: millis(p, "slowdown_sitout_ms", d.slowdown.sitout)?,
        };
        if !(slowdown.threshold.is_finite() && slowdown.omega.is_finite() && slowdown.tp_gain.is_finite()) {
            return Err("slowdown_threshold, slowdown_omega and slowdown_tp_gain must be finite numbers".into());
        }
        Ok(HoliConfig { trim, compact_every: number(p, "compact_every", p.snapshot_every)?, churn, slowdown })
    }
}

/// An overload declaration as every replica learns it by executing the marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Overload {
    pub slot: u64,
    pub leader: NodeId,
    pub ballot: Ballot,
    /// The declarer's in-flight variance when it declared.
    pub variance: u64,
    /// When this replica executed the marker (its clock).
    pub executed_at: Time,
    pub remedied: bool,
}

/// The HoliPaxos layer: its state on one replica (owned by the `MultiPaxos` core, which
/// calls it through `crate::layers::MultiPaxosLayer`).
pub(crate) struct Holi {
    pub cfg: HoliConfig,
    pub churn: ChurnRules,
    pub detector: SlowdownDetector,
    pub les: LeTracker,
    pub overload: Option<Overload>,
    /// This leader proposed a declaration not yet executed.
    pub declaring: bool,
    /// This leader proposed a remediation not yet executed.
    pub remedying: bool,
    /// Highest marker slot this replica started an election for.
    pub handled_marker: u64,
    /// A marker-triggered election is scheduled, valid while we still promise this ballot.
    pub marker_election_for: Option<Ballot>,
    pub marker_elections: u64,
    pub markers_executed: u64,
    pub leader_since: Time,
    /// When this replica executed each declarer's latest overload marker.
    pub declared: BTreeMap<NodeId, Time>,
}

impl Holi {
    pub fn new(cfg: HoliConfig) -> Holi {
        Holi {
            cfg,
            churn: ChurnRules::new(cfg.churn),
            detector: SlowdownDetector::new(cfg.slowdown),
            les: LeTracker::default(),
            overload: None,
            declaring: false,
            remedying: false,
            handled_marker: 0,
            marker_election_for: None,
            marker_elections: 0,
            markers_executed: 0,
            leader_since: Time::ZERO,
            declared: BTreeMap::new(),
        }
    }

    /// Whether `id` declared itself overloaded recently enough to sit out marker elections.
    pub fn sits_out(&self, id: NodeId, now: Time) -> bool {
        let sitout = self.cfg.slowdown.sitout;
        self.declared.get(&id).is_some_and(|t| !sitout.is_zero() && now.since(*t) < sitout)
    }

    /// Whether a new overload declaration is allowed now (§3.2: only once the previous
    /// one is remedied or a long timeout passed).
    pub fn may_declare(&self, now: Time) -> bool {
        !self.declaring
            && match &self.overload {
                None => true,
                Some(o) => o.remedied || now.since(o.executed_at) >= self.cfg.slowdown.redeclare_after,
            }
    }
}

/// Deliberately broken HoliPaxos variants for the mutation tests (feature `mutants`).
#[cfg(feature = "mutants")]
pub(crate) mod mutants {
    use super::*;
    use crate::layers::mutants::EagerCommit;

    /// Followers take every control message as committing all they accepted in its ballot
    /// (a mutant expressed as a layer wrapping the HoliPaxos layer).
    pub fn build_eager_commit(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
        let cfg = HoliConfig::from_params(&setup.params)?;
        let layer = Box::new(EagerCommit(Holi::new(cfg)));
        Ok(Box::new(MultiPaxos::with_layer(setup, Variant::default(), "holipaxos", layer)?))
    }
}

#[cfg(test)]
mod tests;
