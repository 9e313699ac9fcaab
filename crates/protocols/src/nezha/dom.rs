//! Deadline-Ordered Multicast (§3): the receiver side (early-buffer, late-buffer, release at
//! the deadline on the replica's own clock) and the sender side (the one-way-delay estimate
//! that sets deadlines).
//!
//! DOM is best effort: a request that arrives after a conflicting request with a later
//! deadline was released goes to the late-buffer, and the slow path (§5.4) sorts it out.
//! Clocks matter for the fast-commit ratio only, never for correctness.

use super::msg::{LogId, ReqId};
use std::collections::{BTreeMap, HashMap, VecDeque};
use synod_core::kv::Footprint;
use synod_core::{Command, Time};

/// The early-buffer (a priority queue by deadline, §5.1) with its eligibility check, and the
/// late-buffer (a map by `<client-id, request-id>`).
#[derive(Default)]
pub struct Dom {
    early: BTreeMap<LogId, Command>,
    early_ids: HashMap<ReqId, u64>,
    late: HashMap<ReqId, (u64, Command)>,
    /// Insertion order of the late-buffer, for its bound.
    late_order: VecDeque<ReqId>,
    /// The last released log-id (without commutativity, the eligibility bar).
    last: Option<LogId>,
    /// With commutativity (§7.2): the largest released deadline per key, and over all
    /// releases (whole-keyspace commands conflict with everything).
    last_key: HashMap<Vec<u8>, u64>,
    last_any: u64,
    /// The largest deadline of a released whole-keyspace command (it conflicts with every
    /// later request).
    last_all: u64,
    pub commutativity: bool,
}

/// Most requests the late-buffer holds; older ones are dropped (the slow path fetches a
/// request it needs from the leader).
const LATE_MAX: usize = 65_536;

/// Where an arriving request went.
#[derive(Debug, PartialEq, Eq)]
pub enum Admit {
    Early,
    Late,
    /// Already held (a duplicate copy).
    Held,
}

impl Dom {
    pub fn new(commutativity: bool) -> Dom {
        Dom { commutativity, ..Dom::default() }
    }

    /// The eligibility check of §5.1 / §7.2: may a request with this log-id still enter
    /// the early-buffer?
    pub fn eligible(&self, id: &LogId, cmd: &Command) -> bool {
        if !self.commutativity {
            return self.last.is_none_or(|l| *id > l);
        }
        match cmd.op.footprint() {
            Footprint::None => true,
            Footprint::Keys(keys) => {
                id.deadline > self.last_all
                    && keys.iter().all(|k| self.last_key.get(*k).is_none_or(|d| id.deadline > *d))
            }
            Footprint::Range { .. } | Footprint::All => id.deadline > self.last_any,
        }
    }

    /// The smallest deadline that makes `cmd` eligible now (the leader's deadline
    /// modification of §5.4, ③ in Fig. 5).
    pub fn eligible_deadline(&self, cmd: &Command, now: u64) -> u64 {
        let bar = if !self.commutativity {
            self.last.map_or(0, |l| l.deadline)
        } else {
            match cmd.op.footprint() {
                Footprint::None => 0,
                Footprint::Keys(keys) => {
                    keys.iter().filter_map(|k| self.last_key.get(*k)).fold(self.last_all, |a, d| a.max(*d))
                }
                Footprint::Range { .. } | Footprint::All => self.last_any,
            }
        };
        now.max(bar.saturating_add(1))
    }

    pub fn holds(&self, req: &ReqId) -> bool {
        self.early_ids.contains_key(req) || self.late.contains_key(req)
    }

    /// A request arrives with its deadline.
    pub fn admit(&mut self, deadline: u64, cmd: Command) -> Admit {
        let req = (cmd.client, cmd.seq);
        if self.holds(&req) {
            return Admit::Held;
        }
        let id = LogId::of(deadline, &cmd);
        if self.eligible(&id, &cmd) {
            self.early_ids.insert(req, deadline);
            self.early.insert(id, cmd);
            Admit::Early
        } else {
            self.put_late(deadline, cmd);
            Admit::Late
        }
    }

    /// Whether the late-buffer holds the request.
    pub fn is_late(&self, req: &ReqId) -> bool {
        self.late.contains_key(req)
    }

    /// Put a request into the late-buffer (a late arrival, or an entry a follower removed
    /// from its log).
    pub fn put_late(&mut self, deadline: u64, cmd: Command) {
        let req = (cmd.client, cmd.seq);
        if self.late.insert(req, (deadline, cmd)).is_none() {
            self.late_order.push_back(req);
        }
        while self.late.len() > LATE_MAX {
            match self.late_order.pop_front() {
                Some(old) => {
                    self.late.remove(&old);
                }
                None => break,
            }
        }
    }

    /// The earliest deadline in the early-buffer (when the release timer must fire).
    pub fn next_deadline(&self) -> Option<u64> {
        self.early.keys().next().map(|id| id.deadline)
    }

    /// Release, in deadline order, every request whose deadline has passed on this clock.
    pub fn release(&mut self, now: Time) -> Vec<(LogId, Command)> {
        let mut out = Vec::new();
        while let Some(entry) = self.early.first_entry() {
            if entry.key().deadline > now.as_nanos() {
                break;
            }
            let (id, cmd) = entry.remove_entry();
            self.early_ids.remove(&id.req());
            self.note_released(&id, &cmd);
            out.push((id, cmd));
        }
        out
    }

    /// Raise the eligibility bars past a request appended to the log.
    pub fn note_released(&mut self, id: &LogId, cmd: &Command) {
        self.last = Some(self.last.map_or(*id, |l| l.max(*id)));
        self.last_any = self.last_any.max(id.deadline);
        match cmd.op.footprint() {
            Footprint::None => {}
            Footprint::Keys(keys) => {
                for k in keys {
                    let d = self.last_key.entry(k.to_vec()).or_insert(0);
                    *d = (*d).max(id.deadline);
                }
            }
            Footprint::Range { .. } | Footprint::All => self.last_all = self.last_all.max(id.deadline),
        }
    }

    /// Take a request out of either buffer (a follower's log-modification found it there).
    pub fn take(&mut self, req: &ReqId) -> Option<(u64, Command)> {
        if let Some(deadline) = self.early_ids.remove(req) {
            let id = LogId { deadline, client: req.0, seq: req.1 };
            return self.early.remove(&id).map(|cmd| (deadline, cmd));
        }
        self.late.remove(req)
    }

    /// Every request in the late-buffer (a new leader appends them, §5.4's liveness rule).
    pub fn drain_late(&mut self) -> Vec<(u64, Command)> {
        self.late_order.clear();
        let mut v: Vec<(u64, Command)> = self.late.drain().map(|(_, x)| x).collect();
        v.sort_by_key(|(d, c)| LogId::of(*d, c));
        v
    }

    pub fn early_len(&self) -> usize {
        self.early.len()
    }
    pub fn late_len(&self) -> usize {
        self.late.len()
    }
}

/// The one-way-delay estimate of §3: per receiver, a sliding window of OWD samples (receive
/// time minus send time on synchronized clocks); the estimate is a percentile P of the window
/// (the paper's 50th) plus the clock-error term β(σ_S + σ_R) ([`OwdEstimator::estimate`]),
/// clamped to `[0, clamp]` (an estimate out of that range, negative or beyond the clamp D,
/// becomes D). The deadline of a message to several receivers is the send time plus the
/// largest estimate.
#[derive(Clone, Debug)]
pub struct OwdEstimator {
    window: usize,
    percentile: u32,
    clamp: u64,
    samples: HashMap<u32, Window>,
}

/// One receiver's samples: in arrival order (to drop the oldest) and sorted (so the
/// percentile is a lookup: the estimate is taken for every request a proxy sends, and
/// copying and sorting the window each time cost a proxy about a sixth of its CPU).
#[derive(Clone, Debug, Default)]
struct Window {
    order: VecDeque<i64>,
    sorted: Vec<i64>,
}

impl OwdEstimator {
    pub fn new(window: usize, percentile: u32, clamp_ns: u64) -> OwdEstimator {
        OwdEstimator {
            window: window.max(1),
            percentile: percentile.min(100),
            clamp: clamp_ns,
            samples: HashMap::new(),
        }
    }

    /// A sample for `receiver`: sent at `sent` on the sender's clock, received at `recv` on
    /// the receiver's.
    pub fn sample(&mut self, receiver: u32, sent: Time, recv: Time) {
        let owd = recv.as_nanos() as i64 - sent.as_nanos() as i64;
        self.sample_owd(receiver, owd);
    }

    /// A one-way delay measured by the receiver (receive time minus send time, §3: "the
    /// estimated OWD will be replied to the sender").
    pub fn sample_owd(&mut self, receiver: u32, owd: i64) {
        let w = self.samples.entry(receiver).or_default();
        w.order.push_back(owd);
        let at = w.sorted.partition_point(|&x| x < owd);
        w.sorted.insert(at, owd);
        while w.order.len() > self.window {
            let Some(old) = w.order.pop_front() else { break };
            if let Ok(at) = w.sorted.binary_search(&old) {
                w.sorted.remove(at);
            }
        }
    }

    /// The estimate for one receiver, P + `error` (the clamp D when it has no samples yet or
    /// the sum is out of `[0, D]`). `error` is §3's β(σ_S + σ_R): the clock-error bounds of
    /// sender and receiver ([`clock_error_term`]).
    pub fn estimate(&self, receiver: u32, error: u64) -> u64 {
        let Some(v) = self.samples.get(&receiver).map(|w| &w.sorted).filter(|v| !v.is_empty()) else {
            return self.clamp;
        };
        let rank = ((v.len() - 1) as u64 * self.percentile as u64 / 100) as usize;
        let p = v[rank];
        match u64::try_from(p).ok().and_then(|p| p.checked_add(error)) {
            Some(owd) if owd <= self.clamp => owd,
            _ => self.clamp,
        }
    }

    /// The estimate for a multicast: the largest over the receivers.
    pub fn estimate_all(&self, receivers: impl IntoIterator<Item = u32>, error: u64) -> u64 {
        receivers.into_iter().map(|r| self.estimate(r, error)).max().unwrap_or(self.clamp)
    }
}

/// §3's clock-error term β(σ_S + σ_R) in nanoseconds, from the sender's error bound
/// (`Ctx::clock_error` / `ClientCtx::clock_error`) and β in percent. The receivers' bounds
/// are not reported to the sender: it takes them to be its own (the hosts of a deployment
/// run the same clock synchronization), so σ_S + σ_R = 2σ_S.
pub fn clock_error_term(own_error: std::time::Duration, beta_pct: u64) -> u64 {
    let sigma = own_error.as_nanos().min(u64::MAX as u128) as u64;
    (sigma as u128 * 2 * beta_pct as u128 / 100).min(u64::MAX as u128) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sorted window gives the same percentile as sorting the last `window` samples.
    #[test]
    fn the_estimate_is_the_percentile_of_the_last_window_samples() {
        let mut e = OwdEstimator::new(5, 50, 1_000_000);
        let samples = [900, 100, 500, 300, 700, 200, 800, 800, 50];
        for (k, &s) in samples.iter().enumerate() {
            e.sample_owd(2, s);
            let mut last: Vec<i64> = samples[k.saturating_sub(4)..=k].to_vec();
            last.sort_unstable();
            let want = last[(last.len() - 1) * 50 / 100] as u64;
            assert_eq!(e.estimate(2, 0), want, "after {} samples", k + 1);
        }
        // Out of [0, D] (a negative sample at the median, or beyond D with the margin): D.
        for _ in 0..5 {
            e.sample_owd(2, -10);
        }
        assert_eq!(e.estimate(2, 0), 1_000_000);
        e.sample_owd(3, 999_999);
        assert_eq!(e.estimate(3, 0), 999_999);
        assert_eq!(e.estimate(3, 2), 1_000_000);
        assert_eq!(e.estimate(4, 0), 1_000_000, "no samples");
    }
}
