//! Churn avoidance for MultiPaxos-family elections (HoliPaxos §3.1.2, Rules 1–3).
//!
//! Pure bookkeeping, driven by the protocol with its own clock: which elections this node
//! started (Rule 1), whether its last phase 1 reached a quorum of *responses* (Rule 2), and
//! which candidates other nodes saw campaigning (Rule 3). Nothing here sends messages; the
//! protocol asks the questions ("how much penalty?", "passive?", "reject this Prepare?") at
//! the points where the paper applies the rules. Any leader-based protocol with ballots and
//! a phase 1 can reuse it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;
use synod_core::{Ballot, NodeId, Time};

/// Knobs of the three rules. The paper tuned Rule 1 to 5 elections in a 3 s window and
/// Rule 3 to a 5 s window, for its own (shorter) election timeouts. With synod's default
/// 300–600 ms timeouts a churning node runs about one election per second, so the defaults
/// here are Rule 1: 3 elections in 3 s, penalty ×4 per election (the third makes the
/// heartbeat interval 200 ms, the fourth 800 ms — past every follower's timeout); Rule 3:
/// 2 attempts per candidate in 5 s. Rule 3 still triggers first (≈ 2 s of churn against
/// ≈ 3 s), as §3.1.2 requires for the two rules to combine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChurnConfig {
    pub rule1: bool,
    /// Sliding window over which a node counts the elections it started itself.
    pub rule1_window: Duration,
    /// Elections within the window at which the penalty starts.
    pub rule1_elections: usize,
    /// Factor by which the penalty grows with every further election in the window.
    pub rule1_factor: u32,
    /// Cap on the penalty multiplier.
    pub rule1_max_penalty: u32,
    pub rule2: bool,
    pub rule3: bool,
    /// Sliding window over which a node remembers the election attempts it received.
    pub rule3_window: Duration,
    /// Attempts within the window that make a candidate a "churner".
    pub rule3_attempts: usize,
}

impl Default for ChurnConfig {
    fn default() -> Self {
        ChurnConfig {
            rule1: true,
            rule1_window: Duration::from_secs(3),
            rule1_elections: 3,
            rule1_factor: 4,
            rule1_max_penalty: 64,
            rule2: true,
            rule3: true,
            rule3_window: Duration::from_secs(5),
            rule3_attempts: 2,
        }
    }
}

/// The state of the three rules on one node.
#[derive(Clone, Debug)]
pub struct ChurnRules {
    cfg: ChurnConfig,
    /// Rule 1: start times of the elections this node ran (valid ballots only).
    own: VecDeque<Time>,
    /// Rule 2: this node campaigns with the invalid ballot 0.
    passive: bool,
    /// Rule 2: the ballot of the last phase 1 and the distinct nodes that answered it
    /// (promises and rejections alike).
    attempt: Option<(Ballot, BTreeSet<NodeId>)>,
    /// Rule 3: when each candidate's Prepares (valid ballots) arrived.
    seen: BTreeMap<NodeId, VecDeque<Time>>,
    /// Rule 3: the last ballot each candidate campaigned with (a duplicated or re-sent
    /// Prepare is not a new attempt).
    last_ballot: BTreeMap<NodeId, Ballot>,
}

impl ChurnRules {
    pub fn new(cfg: ChurnConfig) -> Self {
        ChurnRules {
            cfg,
            own: VecDeque::new(),
            passive: false,
            attempt: None,
            seen: BTreeMap::new(),
            last_ballot: BTreeMap::new(),
        }
    }

    pub fn config(&self) -> &ChurnConfig {
        &self.cfg
    }

    // --- Rule 1: pause leader elections for churning nodes -------------------------------

    /// This node starts an election (a real one, not a passive probe).
    pub fn own_election(&mut self, now: Time) {
        self.own.push_back(now);
        self.prune_own(now);
    }

    fn prune_own(&mut self, now: Time) {
        while self.own.front().is_some_and(|t| now.since(*t) > self.cfg.rule1_window) {
            self.own.pop_front();
        }
    }

    /// Elections this node started within the window.
    pub fn own_elections(&mut self, now: Time) -> usize {
        self.prune_own(now);
        self.own.len()
    }

    /// The multiplier on this node's heartbeat interval: 1 normally; once it started
    /// `rule1_elections` elections within the window, `factor^k` where k grows with each
    /// further election (capped). A churning leader then heartbeats so rarely that a central
    /// node times out and takes over; following it, the churners stop campaigning. It falls
    /// back to 1 as soon as the window holds fewer elections ("once nodes stop initiating
    /// excessive leader elections, they reset").
    pub fn penalty(&mut self, now: Time) -> u32 {
        if !self.cfg.rule1 {
            return 1;
        }
        let n = self.own_elections(now);
        if n < self.cfg.rule1_elections {
            return 1;
        }
        let k = (n - self.cfg.rule1_elections + 1) as u32;
        self.cfg.rule1_factor.max(1).saturating_pow(k).min(self.cfg.rule1_max_penalty.max(1))
    }

    // --- Rule 2: prevent quorum-disconnected nodes from leader elections ------------------

    /// Called when this node's election timer fires and it is about to campaign again: if
    /// the previous phase 1 did not hear from a quorum (counting itself), the node goes
    /// passive. Returns whether the next attempt must use the invalid ballot 0.
    pub fn next_attempt_passive(&mut self, quorum: usize) -> bool {
        if !self.cfg.rule2 {
            return false;
        }
        if let Some((_, heard)) = &self.attempt {
            if heard.len() + 1 < quorum {
                self.passive = true;
            }
        }
        self.passive
    }

    /// A phase 1 with `ballot` begins (ballot 0 when passive).
    pub fn attempt_started(&mut self, ballot: Ballot) {
        self.attempt = Some((ballot, BTreeSet::new()));
    }

    /// `from` answered the phase 1 with `ballot` (a promise or any rejection). Returns true
    /// when this answer brings a passive node back to a quorum: it may campaign for real.
    pub fn response(&mut self, ballot: Ballot, from: NodeId, quorum: usize) -> bool {
        let Some((b, heard)) = self.attempt.as_mut() else { return false };
        if *b != ballot {
            return false;
        }
        heard.insert(from);
        if self.passive && heard.len() + 1 >= quorum {
            self.passive = false;
            return true;
        }
        false
    }

    /// This node follows a live leader again: the last attempt no longer says anything
    /// about its connectivity.
    pub fn leader_heard(&mut self) {
        self.attempt = None;
    }

    pub fn is_passive(&self) -> bool {
        self.passive
    }

    // --- Rule 3: common nodes break churn -------------------------------------------------

    fn prune_seen(&mut self, now: Time) {
        let w = self.cfg.rule3_window;
        for q in self.seen.values_mut() {
            while q.front().is_some_and(|t| now.since(*t) > w) {
                q.pop_front();
            }
        }
        self.seen.retain(|_, q| !q.is_empty());
    }

    fn is_churner(&self, node: NodeId) -> bool {
        self.seen.get(&node).is_some_and(|q| q.len() >= self.cfg.rule3_attempts)
    }

    /// A Prepare with a valid ballot from `from` arrived. Records the attempt and decides
    /// whether to reject it: `from` is a churner (enough attempts in the window) and a
    /// node with a higher id is still in the race — churning too, or the live leader this
    /// node follows (`live_leader`). All common nodes apply the same deterministic choice,
    /// so only the highest-id churner can collect their promises. Candidates are
    /// requalified automatically: once they stop campaigning for a window, or once every
    /// higher-id competitor has gone quiet (a crashed winner cannot block the others).
    pub fn on_prepare(&mut self, from: NodeId, ballot: Ballot, now: Time, live_leader: Option<NodeId>) -> bool {
        if !self.cfg.rule3 {
            return false;
        }
        self.prune_seen(now);
        if self.last_ballot.insert(from, ballot) != Some(ballot) {
            self.seen.entry(from).or_default().push_back(now);
        }
        self.rejects(from, live_leader)
    }

    /// Whether a Prepare from `from` would be rejected now (without recording an attempt).
    pub fn rejects(&self, from: NodeId, live_leader: Option<NodeId>) -> bool {
        if !self.cfg.rule3 || !self.is_churner(from) {
            return false;
        }
        let higher_churner = self.seen.keys().any(|&c| c > from && self.is_churner(c));
        let higher_leader = live_leader.is_some_and(|l| l > from);
        higher_churner || higher_leader
    }

    /// Candidates this node currently rejects (for status and tests).
    pub fn disqualified(&self, live_leader: Option<NodeId>) -> Vec<NodeId> {
        self.seen.keys().copied().filter(|&c| self.rejects(c, live_leader)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> Time {
        Time::from_millis(ms)
    }

    /// A distinct ballot per attempt.
    fn b(ms: u64) -> Ballot {
        Ballot::new(ms + 1, 0)
    }

    #[test]
    fn rule1_penalty_grows_after_threshold_and_resets() {
        let mut r = ChurnRules::new(ChurnConfig::default());
        for i in 0..2 {
            r.own_election(t(i * 900));
            assert_eq!(r.penalty(t(i * 900)), 1);
        }
        r.own_election(t(1800));
        assert_eq!(r.penalty(t(1800)), 4, "3 elections in 3 s");
        r.own_election(t(2000));
        assert_eq!(r.penalty(t(2000)), 16);
        r.own_election(t(2400));
        assert_eq!(r.penalty(t(2400)), 64);
        // No election for a window: back to normal.
        assert_eq!(r.penalty(t(2400 + 3001)), 1);
        let mut capped = ChurnRules::new(ChurnConfig { rule1_max_penalty: 8, ..Default::default() });
        for i in 0..10 {
            capped.own_election(t(i * 10));
        }
        assert_eq!(capped.penalty(t(100)), 8);
        let mut off = ChurnRules::new(ChurnConfig { rule1: false, ..Default::default() });
        for i in 0..10 {
            off.own_election(t(i * 10));
        }
        assert_eq!(off.penalty(t(100)), 1);
    }

    #[test]
    fn rule2_passive_without_quorum_of_responses_and_back() {
        let mut r = ChurnRules::new(ChurnConfig::default());
        let q = 3; // 5 nodes
        assert!(!r.next_attempt_passive(q), "no attempt yet");
        let b = Ballot::new(4, 1);
        r.attempt_started(b);
        // Only one peer answers (a rejection counts): 2 < 3.
        assert!(!r.response(b, 5, q));
        assert!(!r.response(Ballot::new(3, 1), 4, q), "an answer to an older ballot does not count");
        assert!(r.next_attempt_passive(q));
        r.attempt_started(Ballot::ZERO);
        assert!(!r.response(Ballot::ZERO, 5, q));
        assert!(!r.response(Ballot::ZERO, 5, q), "duplicates count once");
        assert!(r.response(Ballot::ZERO, 2, q), "a quorum of responses requalifies");
        assert!(!r.is_passive());
        r.attempt_started(Ballot::new(5, 1));
        r.leader_heard();
        assert!(!r.next_attempt_passive(q), "hearing a leader clears the attempt");
    }

    #[test]
    fn rule3_rejects_all_but_the_highest_churner_and_requalifies() {
        let mut r = ChurnRules::new(ChurnConfig::default());
        // Nodes 1 and 3 alternate campaigns (the 3-node churn shape, seen from node 2).
        let mut now = 0;
        let mut rejected = Vec::new();
        for _ in 0..4 {
            now += 400;
            rejected.push((1, r.on_prepare(1, b(now), t(now), None)));
            now += 400;
            rejected.push((3, r.on_prepare(3, b(now), t(now), None)));
        }
        assert!(rejected.iter().all(|(n, rej)| *n == 1 || !rej), "the highest churner is never rejected");
        assert!(rejected.iter().any(|(n, rej)| *n == 1 && *rej), "the lower churner is rejected: {rejected:?}");
        assert_eq!(r.disqualified(None), vec![1]);
        // Node 3 now leads and stops campaigning; node 1 keeps trying: still rejected while
        // node 3 is the live leader here.
        for _ in 0..20 {
            now += 400;
            assert!(r.on_prepare(1, b(now), t(now), Some(3)));
        }
        // The leader dies (no live leader any more) and its attempts aged out: node 1 is
        // requalified, so a crashed winner cannot block the election forever.
        now += 400;
        assert!(!r.on_prepare(1, b(now), t(now), None));
        // A re-sent (duplicated) Prepare is not a new attempt.
        let mut dup = ChurnRules::new(ChurnConfig::default());
        for _ in 0..5 {
            assert!(!dup.on_prepare(1, b(7), t(7), None));
            assert!(!dup.on_prepare(2, b(8), t(8), None));
        }
        // A single attempt of a lower node is never rejected (normal failover).
        let mut fresh = ChurnRules::new(ChurnConfig::default());
        assert!(!fresh.on_prepare(1, b(0), t(0), Some(3)));
        // Attempts older than the window are forgotten.
        let mut r = ChurnRules::new(ChurnConfig::default());
        for i in 0..3 {
            r.on_prepare(1, b(i * 100), t(i * 100), None);
            r.on_prepare(2, b(i * 100 + 50), t(i * 100 + 50), None);
        }
        assert!(r.rejects(1, None));
        assert!(!r.on_prepare(1, b(10_000), t(10_000), None), "window expired: requalified");
    }
}
