//! Leader leases: a leader answers reads from its own state machine, without a log position,
//! while a set of acceptors that intersects every election quorum has promised not to help
//! elect anyone else (Chandra et al., "Paxos Made Live" §5.2; the read path of the Crossword
//! paper's workload, §5: "50% Gets served locally by the lease-holding leader").
//!
//! Two halves, both driven by the replica's own clock (`ctx.now`) only:
//! - [`Grantor`] (every acceptor): on a lease request from the leader it follows, it promises
//!   for `duration` on its clock to refuse phase 1 of every other candidate (including its
//!   own campaign). After a restart it has forgotten whom it promised, so it refuses everyone
//!   for one `duration` ([`Grantor::after_restart`]).
//! - [`Holder`] (the leader): each round records its send time `t` on the leader's clock;
//!   once `needed` acceptors (itself included) granted round `r`, the lease runs until
//!   `t + duration − margin`. Each grant started at or after `t` in real time and lasts at
//!   least `duration / (1 + ρ)` real time on the grantor's clock, while the leader's
//!   `duration − margin` lasts at most `(duration − margin) / (1 − ρ)`; the margin
//!   `duration · 2ρ + guard` covers a rate error ρ of `drift_ppm` per clock (plus `guard`
//!   for scheduling delays). Clock offsets do not matter: only durations are compared.
//!
//! How many grants are needed: an election needs `p` promises among `n` acceptors, so
//! `n − p + 1` grantors intersect every election quorum (a majority for plain MultiPaxos).
//! The protocol also must not answer a read before it executed every slot the election found
//! (values chosen under earlier leaders): [`Holder::valid`] is only half of the condition.

use crate::params::ProtocolParams;
use crate::protocol::NodeId;
use crate::quorum::QuorumTracker;
use crate::time::Time;
use std::collections::BTreeMap;
use std::time::Duration;

/// Lease settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// How long a grant lasts on the grantor's clock.
    pub duration: Duration,
    /// Bound on any clock's rate error, in parts per million.
    pub drift_ppm: u64,
    /// Extra safety margin subtracted from the leader's lease.
    pub guard: Duration,
}

impl LeaseConfig {
    /// How long after a round's send time the leader may use the lease.
    pub fn usable(&self) -> Duration {
        let drift = self.duration.as_nanos() as u64 * 2 * self.drift_ppm / 1_000_000;
        self.duration.saturating_sub(Duration::from_nanos(drift)).saturating_sub(self.guard)
    }

    /// Grants needed among `n` acceptors when an election needs `prepare_quorum` promises.
    pub fn grants_needed(n: usize, prepare_quorum: usize) -> usize {
        (n + 1).saturating_sub(prepare_quorum).max(1)
    }
}

/// The acceptor's side: whom it promised not to desert, and until when (its own clock).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Grantor {
    /// `None` with a time: refuse everyone (after a restart).
    holder: Option<NodeId>,
    until: Time,
}

impl Grantor {
    /// A replica that restarted may have granted a lease it no longer remembers: refuse
    /// every candidate for one lease duration.
    pub fn after_restart(now: Time, cfg: &LeaseConfig) -> Grantor {
        Grantor { holder: None, until: now + cfg.duration }
    }

    /// Grant (or extend) the lease of `holder` from `now`; refused (false) while bound to
    /// another replica (or to everyone, after a restart). The caller checks that it follows
    /// `holder` (its promised ballot is the holder's).
    pub fn grant(&mut self, now: Time, holder: NodeId, cfg: &LeaseConfig) -> bool {
        if self.blocks(now, holder) {
            return false;
        }
        self.holder = Some(holder);
        self.until = self.until.max(now + cfg.duration);
        true
    }

    /// Whether this acceptor must refuse phase 1 of `candidate` now: a lease it granted to
    /// another replica has not expired. The holder itself may start a new ballot (it stops
    /// using its lease when it leaves the old one).
    pub fn blocks(&self, now: Time, candidate: NodeId) -> bool {
        now < self.until && self.holder != Some(candidate)
    }

    /// The current grant, if any: (holder, expiry); `None` as holder means everyone.
    pub fn current(&self, now: Time) -> Option<(Option<NodeId>, Time)> {
        (now < self.until).then_some((self.holder, self.until))
    }
}

/// The leader's side: lease rounds in flight and the lease held.
#[derive(Clone, Debug, Default)]
pub struct Holder {
    next_round: u64,
    /// Rounds not yet granted by enough acceptors: send time and grants.
    rounds: BTreeMap<u64, (Time, QuorumTracker)>,
    /// The lease may be used before this time (leader's clock).
    until: Option<Time>,
}

/// Rounds kept waiting for grants (older ones are forgotten: their lease would be shorter).
const MAX_ROUNDS: usize = 16;

impl Holder {
    /// Forget everything (a new ballot, or leadership lost).
    pub fn reset(&mut self) {
        self.rounds.clear();
        self.until = None;
    }

    /// Start a round at `now`, counting the leader's own grant; returns its number (to put in
    /// the request) — `needed` grants make it effective.
    pub fn start_round(&mut self, now: Time, me: NodeId, needed: usize, cfg: &LeaseConfig) -> u64 {
        self.next_round += 1;
        let round = self.next_round;
        let mut grants = QuorumTracker::new(needed);
        if grants.ack(me) {
            self.extend(now, cfg);
        } else {
            self.rounds.insert(round, (now, grants));
            while self.rounds.len() > MAX_ROUNDS {
                self.rounds.pop_first();
            }
        }
        round
    }

    /// `from` granted `round`; returns true if the lease was extended.
    pub fn granted(&mut self, round: u64, from: NodeId, cfg: &LeaseConfig) -> bool {
        let Some((sent, grants)) = self.rounds.get_mut(&round) else { return false };
        if !grants.ack(from) {
            return false;
        }
        let sent = *sent;
        // This round and every older one are done (an older one's lease is shorter).
        self.rounds = self.rounds.split_off(&(round + 1));
        self.extend(sent, cfg);
        true
    }

    fn extend(&mut self, sent: Time, cfg: &LeaseConfig) {
        let end = sent + cfg.usable();
        self.until = Some(self.until.map_or(end, |u| u.max(end)));
    }

    /// The lease is held at `now`.
    pub fn valid(&self, now: Time) -> bool {
        self.until.is_some_and(|u| now < u)
    }

    /// Lease expiry (leader's clock), if one was ever granted in this ballot.
    pub fn until(&self) -> Option<Time> {
        self.until
    }
}

/// The protocol options leases read (`read_lease`, `lease_ms`, `lease_drift_ppm`).
pub const LEASE_OPTIONS: &[&str] = &["read_lease", "lease_ms", "lease_drift_ppm"];

/// One replica's lease state, the same for every protocol that offers read leases
/// (MultiPaxos and its codecs, Raft and CRaft): the protocol decides when to grant, when a
/// new leadership starts and up to where it must have executed before it reads.
#[derive(Clone, Debug)]
pub struct Leases {
    pub cfg: LeaseConfig,
    /// As an acceptor (voter): whom we promised not to desert, until when.
    pub grantor: Grantor,
    /// As the leader: rounds in flight and the lease held (reset with each leadership).
    pub holder: Holder,
    /// The leader answers lease reads once it executed up to here (the end of what its
    /// election found).
    pub read_floor: u64,
    /// Reads answered from the lease since this replica started (status `lease_reads`).
    pub reads: u64,
}

impl Leases {
    /// From the protocol options: `read_lease=on|off` (default off), `lease_ms` (default the
    /// minimum election timeout, so a leader's crash delays the next election by nothing;
    /// never longer), `lease_drift_ppm` (default 1000). `None` when leases are off.
    pub fn from_params(params: &ProtocolParams) -> Result<Option<Leases>, String> {
        if !params.flag("read_lease", false)? {
            return Ok(None);
        }
        let int = |name: &str, default: u64| -> Result<u64, String> {
            match params.options.get(name) {
                None => Ok(default),
                Some(v) => v.parse::<u64>().map_err(|_| format!("option {name}: {v:?} is not a non-negative integer")),
            }
        };
        let lease_ms = int("lease_ms", params.election_timeout_min_ms)?;
        if lease_ms == 0 || lease_ms > params.election_timeout_min_ms {
            return Err(format!(
                "option lease_ms: {lease_ms} must be in 1..={} (the minimum election timeout: a longer lease would delay elections after a leader's crash)",
                params.election_timeout_min_ms
            ));
        }
        let drift_ppm = int("lease_drift_ppm", 1000)?;
        if drift_ppm >= 100_000 {
            return Err(format!("option lease_drift_ppm: {drift_ppm} is not a plausible clock rate error (< 100000)"));
        }
        let cfg = LeaseConfig { duration: Duration::from_millis(lease_ms), drift_ppm, guard: Duration::from_millis(1) };
        if cfg.usable() <= params.heartbeat() {
            return Err(format!("option lease_ms: {lease_ms} leaves no usable lease beyond a heartbeat interval"));
        }
        Ok(Some(Leases { cfg, grantor: Grantor::default(), holder: Holder::default(), read_floor: 0, reads: 0 }))
    }

    /// A new leadership (or none): the lease held is void, reads wait until `floor` is
    /// executed (`u64::MAX`: not before the protocol sets a floor).
    pub fn lead_from(&mut self, floor: u64) {
        self.holder.reset();
        self.read_floor = floor;
    }

    /// Whether the leader may answer a read from its state machine at `now`, having executed
    /// up to `executed`; counts the read if so. `unchecked` skips the expiry check (the
    /// mutation tests' deliberately unsafe leader).
    pub fn try_read(&mut self, now: Time, executed: u64, unchecked: bool) -> bool {
        if executed < self.read_floor || !(unchecked || self.holder.valid(now)) {
            return false;
        }
        self.reads += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> LeaseConfig {
        LeaseConfig { duration: Duration::from_millis(300), drift_ppm: 1000, guard: Duration::from_millis(1) }
    }

    #[test]
    fn margin_covers_drift_and_guard() {
        // 300 ms − 2 · 1000 ppm · 300 ms − 1 ms = 298.4 ms.
        assert_eq!(cfg().usable(), Duration::from_micros(298_400));
        assert_eq!(LeaseConfig::grants_needed(5, 3), 3);
        assert_eq!(LeaseConfig::grants_needed(5, 4), 2);
        assert_eq!(LeaseConfig::grants_needed(3, 2), 2);
        assert_eq!(LeaseConfig::grants_needed(1, 1), 1);
    }

    #[test]
    fn holder_needs_enough_grants_and_expires() {
        let c = cfg();
        let mut h = Holder::default();
        let t0 = Time::from_millis(1000);
        let r = h.start_round(t0, 1, 2, &c);
        assert!(!h.valid(t0));
        assert!(!h.granted(r + 5, 2, &c), "unknown round");
        assert!(h.granted(r, 2, &c));
        assert!(!h.granted(r, 3, &c), "already effective");
        assert!(h.valid(t0 + Duration::from_millis(298)));
        assert!(!h.valid(t0 + Duration::from_micros(298_400)));
        // An older round granted late does not shorten or extend past the newer one.
        let r1 = h.start_round(t0 + Duration::from_millis(50), 1, 2, &c);
        let r2 = h.start_round(t0 + Duration::from_millis(100), 1, 2, &c);
        assert!(h.granted(r2, 3, &c));
        assert!(!h.granted(r1, 3, &c), "older rounds are dropped");
        assert_eq!(h.until(), Some(t0 + Duration::from_millis(100) + c.usable()));
        h.reset();
        assert!(!h.valid(t0));
    }

    #[test]
    fn grantor_blocks_others_until_expiry() {
        let c = cfg();
        let t0 = Time::from_millis(5000);
        let mut g = Grantor::default();
        assert!(!g.blocks(t0, 2));
        assert!(g.grant(t0, 1, &c));
        assert!(!g.grant(t0, 2, &c), "bound to 1");
        assert!(g.blocks(t0 + Duration::from_millis(299), 2));
        assert!(!g.blocks(t0 + Duration::from_millis(299), 1), "the holder may start a new ballot");
        assert!(!g.blocks(t0 + Duration::from_millis(300), 2));
        let r = Grantor::after_restart(t0, &c);
        assert!(r.blocks(t0, 1) && r.blocks(t0, 2));
        let mut r2 = r;
        assert!(!r2.grant(t0, 1, &c), "nothing is granted right after a restart");
        assert!(!r.blocks(t0 + Duration::from_millis(300), 1));
    }
}
