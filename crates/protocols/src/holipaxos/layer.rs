//! HoliPaxos as a layer on the MultiPaxos core: where each mechanism of the paper hooks
//! into the core's phases (`crate::layers::MultiPaxosLayer`), in the order of the module
//! documentation (`super`).

use super::msg::{HoliMsg, Marker};
use super::trim::TrimMode;
use super::{Holi, Overload, OPTIONS};
use crate::layers::{Campaign, Compaction, LayerMsg, LayerOp, MultiPaxosLayer, NackVerdict, TrimPolicy};
use crate::multipaxos::{Msg, MultiPaxos};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::time::Duration;
use synod_core::protocol::{decode, encode};
use synod_core::{Ballot, Ctx, NodeId, Role, Time, TimerId};

/// The leader's slowdown-detector sampling tick (§3.2).
const TIMER_SLOWDOWN: TimerId = 3;
/// The backed-off election a follower starts for an overload marker (§3.2).
const TIMER_OVERLOAD: TimerId = 4;

impl MultiPaxosLayer for Holi {
    fn options(&self) -> &'static [&'static str] {
        OPTIONS
    }

    /// §3.3: GLE or quorum trim (a bound this layer computes), periodic snapshots, or none.
    fn compaction(&self) -> Compaction {
        let trim = match self.cfg.trim {
            TrimMode::None => TrimPolicy::None,
            TrimMode::Snapshot => TrimPolicy::Snapshot,
            mode @ (TrimMode::Gle | TrimMode::Quorum) => TrimPolicy::Bound(mode.name()),
        };
        Compaction { trim, compact_every: self.cfg.compact_every }
    }

    // ----- §3.1.2 churn avoidance: Rules 2 and 3 around phase 1 ---------------------------

    /// Rule 2: a node that could not hear from a quorum probes with the invalid ballot 0;
    /// a quorum of rejections proves it quorum-connected again.
    fn campaign(&mut self, quorum: usize) -> Campaign {
        if self.churn.next_attempt_passive(quorum) {
            Campaign::Probe
        } else {
            Campaign::Elect
        }
    }

    /// Rule 1 counts our own elections; Rule 2 counts the answers to this attempt.
    fn on_campaign(&mut self, now: Time, ballot: Ballot) {
        self.churn.own_election(now);
        self.churn.attempt_started(ballot);
    }

    fn on_probe(&mut self) {
        self.churn.attempt_started(Ballot::ZERO);
    }

    /// A Rule 2 probe is rejected and changes nothing; Rule 3 rejects a churner below a
    /// higher competitor without handing it a ballot to outbid.
    fn screen_prepare(&mut self, core: &MultiPaxos, now: Time, from: NodeId, ballot: Ballot) -> Option<Ballot> {
        if ballot.is_zero() {
            return Some(core.promised());
        }
        let live = core.live_leader(now);
        if self.churn.on_prepare(from, ballot, now, live) {
            return Some(Ballot::ZERO);
        }
        None
    }

    /// Rule 2 counting. A node requalified by its probe campaigns at its next election
    /// timeout, not at once: the probe's answers arrive before the live leader's next
    /// control message does, and an immediate Prepare (with a ballot above everything the
    /// answers revealed) deposed the stable leader after every heal of a partition that had
    /// isolated a node.
    fn on_phase1_answer(&mut self, from: NodeId, ballot: Ballot, quorum: usize) {
        self.churn.response(ballot, from, quorum);
    }

    /// A rejection counts as an answer (Rule 2) and its ballot is remembered. Rule 3
    /// (§3.1.2): a common node rejected this attempt "without giving a valid ballot"
    /// because a higher churner or a live leader is in the race; the election will fail, so
    /// the candidate gives it up now rather than at the next timeout: a candidate rejects
    /// every control message below its ballot, so after a heal the blocked churner, whose
    /// ballot kept climbing with its attempts, deposed the stable leader as soon as that
    /// leader's first heartbeat reached it (Fig. 9(d) at paper scale: a leader change and
    /// ~1 s with nothing served).
    fn on_nack(&mut self, core: &MultiPaxos, from: NodeId, ballot: Ballot, promised: Ballot) -> NackVerdict {
        self.churn.response(ballot, from, core.quorum());
        NackVerdict { note_ballot: true, give_up: promised.is_zero() && !ballot.is_zero() }
    }

    /// A new leadership collects LE reports afresh and starts its slowdown detector.
    fn on_become_leader(&mut self, ctx: &mut Ctx<'_>) {
        self.les.clear();
        self.detector.reset();
        self.declaring = false;
        self.remedying = false;
        self.leader_since = ctx.now;
        if self.cfg.slowdown.enabled {
            ctx.set_timer(TIMER_SLOWDOWN, self.cfg.slowdown.sample);
        }
    }

    fn on_leadership_lost(&mut self, ctx: &mut Ctx<'_>) {
        ctx.cancel_timer(TIMER_SLOWDOWN);
    }

    // ----- §3.1.1 integrated failure detector, Rule 1, §3.4 single control message --------

    /// §3.4: the control message replaces the heartbeat.
    fn heartbeat(&mut self, core: &MultiPaxos) -> Option<Bytes> {
        let msg = HoliMsg::Control { ballot: core.promised(), le: core.executed_upto(), gle: core.trim_bound() };
        Some(encode(&msg))
    }

    /// Rule 1: a churning node's heartbeats are stretched.
    fn heartbeat_penalty(&mut self, now: Time) -> u32 {
        self.churn.penalty(now)
    }

    /// §3.1.1: a stale leader's control message is rejected with the higher ballot.
    fn rejects_stale_leaders(&self) -> bool {
        true
    }

    fn on_leader_heard(&mut self) {
        self.churn.leader_heard();
    }

    /// `Control`: follow, batch-commit up to the leader's LE (§3.4), trim to GLE (§3.3).
    /// `ControlAck` (at the leader): a member's LE, from which GLE is computed.
    fn on_message(&mut self, core: &MultiPaxos, _ctx: &mut Ctx<'_>, from: NodeId, msg: &[u8]) -> LayerMsg {
        match decode::<HoliMsg>(msg) {
            Ok(HoliMsg::Control { ballot, le, gle }) => LayerMsg::Beat { ballot, commit_upto: le, trim_bound: gle },
            Ok(HoliMsg::ControlAck { ballot, le }) => {
                if core.role() != Role::Leader || ballot != core.promised() {
                    return LayerMsg::Handled;
                }
                self.les.report(from, le);
                self.les.report(core.id(), core.executed_upto());
                LayerMsg::Trim(self.les.bound(self.cfg.trim, core.members(), core.quorum()))
            }
            Err(_) => LayerMsg::Handled,
        }
    }

    /// Answer the control message with our LE (the core made it durable first).
    fn after_beat(&mut self, core: &MultiPaxos, ctx: &mut Ctx<'_>, from: NodeId, ballot: Ballot) {
        let ack = HoliMsg::ControlAck { ballot, le: core.executed_upto() };
        ctx.send(from, &Msg::Layer(encode(&ack)));
    }

    // ----- §3.2 slowdown detection and overload markers -----------------------------------

    fn on_executed(&mut self, core: &MultiPaxos, ctx: &mut Ctx<'_>, slot: u64, entry: &[u8]) {
        if let Ok(m) = decode::<Marker>(entry) {
            self.on_marker(core, ctx, slot, m);
        }
    }

    fn on_timer(&mut self, core: &MultiPaxos, ctx: &mut Ctx<'_>, timer: TimerId) -> Option<LayerOp> {
        match timer {
            TIMER_SLOWDOWN => self.on_slowdown_tick(core, ctx),
            TIMER_OVERLOAD => self.on_overload_timer(core),
            _ => None,
        }
    }

    // ----- §3.3 on-demand snapshots -------------------------------------------------------

    /// The most advanced other follower (the leader's LE reports) that executed past the
    /// trimmed slots.
    fn snapshot_source(&self, core: &MultiPaxos, requester: NodeId, first: u64) -> Option<NodeId> {
        core.members()
            .iter()
            .copied()
            .filter(|m| *m != core.id() && *m != requester)
            .filter_map(|m| self.les.get(m).filter(|le| *le + 1 >= first).map(|le| (le, m)))
            .max()
            .map(|(_, m)| m)
    }

    // ----- observability ------------------------------------------------------------------

    fn status(&self, core: &MultiPaxos, extra: &mut BTreeMap<String, String>) {
        let mut churn = self.churn.clone();
        let now = core.leader_heard_at();
        extra.insert("passive".into(), self.churn.is_passive().to_string());
        extra.insert("own_elections".into(), churn.own_elections(now).to_string());
        let dq: Vec<String> = self.churn.disqualified(None).iter().map(|n| n.to_string()).collect();
        extra.insert("rule3_churners_below_others".into(), dq.join(","));
        extra.insert("overload_markers".into(), self.markers_executed.to_string());
        extra.insert("marker_elections".into(), self.marker_elections.to_string());
        extra.insert("slow".into(), self.detector.is_slow().to_string());
        let (c_pos, c_neg) = self.detector.cusum();
        extra.insert(
            "slowdown".into(),
            format!(
                "samples={} inflight={} variance={:.0} cusum=+{c_pos:.0}/{c_neg:.0}",
                self.detector.samples_seen(),
                self.detector.last_inflight(),
                self.detector.variance()
            ),
        );
        if let Some(o) = &self.overload {
            extra.insert("overload".into(), format!("slot {} by n{} remedied={}", o.slot, o.leader, o.remedied));
        }
    }

    fn describe_message(&self, msg: &[u8]) -> String {
        match decode::<HoliMsg>(msg) {
            Ok(m) => format!("{m:?}"),
            Err(e) => format!("<undecodable: {e}>"),
        }
    }

    fn describe_value(&self, entry: &[u8]) -> String {
        match decode::<Marker>(entry) {
            Ok(m) => format!("Marker({m:?})"),
            Err(e) => format!("<undecodable: {e}>"),
        }
    }
}

impl Holi {
    /// Algorithm 1 at the leader: sample the in-flight operations and the executed count;
    /// on a detection commit an overload declaration, or, later, a remediation.
    fn on_slowdown_tick(&mut self, core: &MultiPaxos, ctx: &mut Ctx<'_>) -> Option<LayerOp> {
        if core.role() != Role::Leader {
            return None;
        }
        if core.membership_pending() {
            // Nothing may be proposed after a pending membership entry: sample next tick.
            ctx.set_timer(TIMER_SLOWDOWN, self.cfg.slowdown.sample);
            return None;
        }
        let inflight = core.inflight_ops(ctx);
        let (executed, ballot, now, id) = (core.cmds_executed(), core.promised(), ctx.now, core.id());
        self.detector.sample(inflight, executed);
        let mut propose = None;
        if self.detector.is_slow() && self.may_declare(now) {
            self.declaring = true;
            let variance = self.detector.variance().round() as u64;
            propose = Some(Marker::Overload { leader: id, ballot, at_ms: now.as_millis(), variance });
        } else if let Some(o) = self.overload {
            // A later leader whose detector, once able to judge, is calm and sees at most
            // half the declarer's in-flight variance remedies the declaration: the leader
            // change fixed the problem. Under a general overload the new leader sees the
            // same fluctuation and never remedies, so no new declaration (and no new
            // election) follows before the long timeout.
            let calm = self.detector.samples_seen() >= 2 * self.detector.warm_up()
                && self.detector.variance() * 2.0 <= o.variance as f64;
            if !o.remedied && o.ballot != ballot && !self.remedying && !self.detector.is_slow() && calm {
                self.remedying = true;
                propose = Some(Marker::Remedied { slot: o.slot });
            }
        }
        ctx.set_timer(TIMER_SLOWDOWN, self.cfg.slowdown.sample);
        propose.map(|m| LayerOp::Propose(encode(&m)))
    }

    /// A marker reached execution on this replica (every replica, in log order).
    fn on_marker(&mut self, core: &MultiPaxos, ctx: &mut Ctx<'_>, slot: u64, m: Marker) {
        let (id, role, promised, last) = (core.id(), core.role(), core.promised(), core.last_successful_leader());
        let min = Duration::from_millis(core.params().election_timeout_min_ms);
        match m {
            Marker::Overload { leader, ballot, variance, .. } => {
                self.markers_executed += 1;
                self.overload =
                    Some(Overload { slot, leader, ballot, variance, executed_at: ctx.now, remedied: false });
                self.declared.insert(leader, ctx.now);
                if leader == id {
                    self.declaring = false;
                } else if role == Role::Follower
                    && last == Some(leader)
                    && promised == ballot
                    && slot > self.handled_marker
                    && !self.sits_out(id, ctx.now)
                {
                    // One election per marker and follower, after a random backoff so
                    // that followers do not all campaign at once.
                    self.handled_marker = slot;
                    self.marker_elections += 1;
                    self.marker_election_for = Some(ballot);
                    let after = ctx.random_between(Duration::ZERO, min / 2);
                    ctx.set_timer(TIMER_OVERLOAD, after);
                }
            }
            Marker::Remedied { slot: declared } => {
                if let Some(o) = self.overload.as_mut().filter(|o| o.slot == declared) {
                    o.remedied = true;
                }
                self.remedying = false;
            }
        }
    }

    /// The marker-triggered election is due, if we still follow the declarer's ballot.
    fn on_overload_timer(&mut self, core: &MultiPaxos) -> Option<LayerOp> {
        let due = self.marker_election_for.take();
        (core.role() == Role::Follower && due == Some(core.promised())).then_some(LayerOp::StartElection)
    }
}
