//! §4.1 Choosing the best configuration.
//!
//! The leader keeps, per follower, a sliding window (2 s) of (data size, response time)
//! samples of its Accept rounds, measured on its own clock (`ctx.now` at send and at the
//! `Accepted`). Every 200 ms it refits an ordinary least squares line per follower over the
//! window with the slowest 5% dropped as outliers: `t_i(s) = a_i + s / b_i` (`a_i` the delay,
//! `b_i` the bandwidth). For a new instance of payload `s` and each candidate `(c, q)` on the
//! boundary `q + c = n + 1`, every follower would receive `c·s/d` bytes; the `(q−1)`-th
//! smallest of the followers' estimates is when the quorum (the leader counts as one) would
//! be complete. The candidate with the smallest estimate wins.
//!
//! The size a sample is fitted on is not the message alone but the bytes ahead of it on the
//! leader's way out: everything sent and not yet answered (all followers) plus the pieces of
//! the same instance sent before it, its own included. A leader's outbound links share its
//! network interface (the paper shapes each host's NIC), so a piece waits behind the whole
//! backlog and behind the pieces to the followers sent first; fitted on the message alone the
//! line is nearly flat (the queue wait dominates), and fitted on the follower's own queue the
//! intercept absorbs the send order learnt under one configuration, so the full copy, once
//! chosen, kept winning on a saturated NIC. The estimate for a candidate is likewise taken at
//! the current backlog plus the candidate's pieces up to that follower.
//!
//! §4.3: with followers down only configurations they leave live may be chosen: candidates
//! whose `q − 1` exceeds the followers heard from within the window are excluded, so with
//! `f` followers silent the chooser falls back to the full copy (`c = d`, `q = f + 1`),
//! MultiPaxos's point. Without samples (start, idle) it also picks the full copy.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;
use synod_core::erasure::{weakest, Assignment};
use synod_core::{NodeId, Time};

/// The sliding window of samples (§4.1: 2 s).
pub const WINDOW: Duration = Duration::from_secs(2);
/// How often the models are refit (§4.1: 200 ms).
pub const REFIT: Duration = Duration::from_millis(200);
/// The share of slowest samples dropped as outliers (§4.1: the highest 5%).
const OUTLIERS: f64 = 0.05;
/// Samples kept per follower at most (a bound on memory at high rates).
const MAX_SAMPLES: usize = 4096;
/// A candidate replaces an earlier one (the full copy comes first) only if it is estimated
/// this much faster: near-ties go to the smaller quorum, which the slowest followers'
/// tails (not in a linear model) affect less.
const MARGIN: f64 = 0.97;

/// One follower's fitted line: response time (s) = `delay` + `per_byte` · size (bytes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Model {
    pub delay: f64,
    pub per_byte: f64,
}

impl Model {
    pub fn estimate(&self, bytes: f64) -> f64 {
        self.delay + self.per_byte * bytes
    }

    /// Ordinary least squares over `(size, time)` points, the slowest `OUTLIERS` dropped.
    /// A window with one size only gives a flat line at the mean time.
    pub fn fit(points: &[(f64, f64)]) -> Option<Model> {
        if points.is_empty() {
            return None;
        }
        let mut pts = points.to_vec();
        pts.sort_by(|a, b| a.1.total_cmp(&b.1));
        let drop = (pts.len() as f64 * OUTLIERS).floor() as usize;
        pts.truncate(pts.len() - drop);
        let n = pts.len() as f64;
        let ms = pts.iter().map(|p| p.0).sum::<f64>() / n;
        let mt = pts.iter().map(|p| p.1).sum::<f64>() / n;
        let var: f64 = pts.iter().map(|p| (p.0 - ms) * (p.0 - ms)).sum();
        let cov: f64 = pts.iter().map(|p| (p.0 - ms) * (p.1 - mt)).sum();
        // Time cannot shrink with size: a negative slope is noise.
        let per_byte = if var > 0.0 { (cov / var).max(0.0) } else { 0.0 };
        Some(Model { delay: (mt - per_byte * ms).max(0.0), per_byte })
    }
}

/// §5.4: per-member shard counts (the leader at position `leader` holding all `n`) for a
/// commit quorum `q` with `d` data shards: every follower starts at one shard and, while some
/// `q − f` servers cover fewer than `d` shards (C2 by enumeration, `erasure::weakest`), the
/// member of that weakest set that `cost` ranks lowest (given the counts and the member's
/// position) gets one more. None for a `q` outside `f + 1 ..= n`.
pub fn grow_unbalanced(
    n: usize,
    d: usize,
    leader: usize,
    q: usize,
    cost: impl Fn(&[usize], usize) -> (f64, f64),
) -> Option<Vec<usize>> {
    let f = d.checked_sub(1)?;
    if q <= f || q > n || leader >= n {
        return None;
    }
    let mut counts = vec![1; n];
    counts[leader] = n;
    while let Some((weak, covered)) = weakest(&Assignment::unbalanced(n, &counts), q - f) {
        if covered >= d {
            break;
        }
        let grow = weak.iter().copied().filter(|&p| counts[p] < n).min_by(|&a, &b| {
            let (ca, cb) = (cost(&counts, a), cost(&counts, b));
            ca.0.total_cmp(&cb.0).then(ca.1.total_cmp(&cb.1))
        })?;
        counts[grow] += 1;
    }
    Some(counts)
}

/// Bytes of one Accept to one follower: (follower, its bytes, bytes ahead of it on the
/// leader's way out at the send, its own included — the sample's size).
type Queued = (NodeId, usize, usize);

/// Per-follower response-time models and the choice among candidate configurations.
#[derive(Debug, Default)]
pub struct Chooser {
    samples: BTreeMap<NodeId, VecDeque<(Time, f64, f64)>>,
    models: BTreeMap<NodeId, Model>,
    fitted_at: Option<Time>,
    /// Accepts in flight: slot → (sent at, per follower: its bytes and the bytes ahead of it
    /// at the send, its own included — the sample's size).
    sent: BTreeMap<u64, (Time, Vec<Queued>)>,
    /// Bytes sent to each follower in rounds it has not answered. Their sum is what a new
    /// Accept queues behind on the leader's network interface, which every outbound link
    /// shares (the paper shapes each host's NIC); on a link of its own it is proportional to
    /// the follower's own queue as long as the followers get alike pieces.
    outstanding: BTreeMap<NodeId, usize>,
}

impl Chooser {
    /// The Accepts of `slot` left at `now`, carrying `bytes` to each follower, in the order
    /// they were sent.
    pub fn on_send(&mut self, now: Time, slot: u64, bytes: Vec<(NodeId, usize)>) {
        // Forget rounds older than the window (their answers are outliers or lost).
        while let Some((&s, &(at, _))) = self.sent.iter().next() {
            if now.since(at) <= WINDOW {
                break;
            }
            if let Some((_, left)) = self.sent.remove(&s) {
                for (p, size, _) in left {
                    self.release(p, size);
                }
            }
        }
        let mut ahead = self.backlog();
        let bytes = bytes
            .into_iter()
            .map(|(p, size)| {
                *self.outstanding.entry(p).or_default() += size;
                ahead += size;
                (p, size, ahead)
            })
            .collect();
        self.sent.insert(slot, (now, bytes));
    }

    /// Bytes sent and not yet answered, all followers together.
    fn backlog(&self) -> usize {
        self.outstanding.values().sum()
    }

    fn release(&mut self, peer: NodeId, size: usize) {
        if let Some(q) = self.outstanding.get_mut(&peer) {
            *q = q.saturating_sub(size);
        }
    }

    /// `from` accepted `slot` at `now`: one sample.
    pub fn on_ack(&mut self, now: Time, from: NodeId, slot: u64) {
        let Some((at, bytes)) = self.sent.get_mut(&slot) else { return };
        let Some(i) = bytes.iter().position(|(p, _, _)| *p == from) else { return };
        let (_, size, queued) = bytes.swap_remove(i);
        let rtt = now.since(*at).as_secs_f64();
        if bytes.is_empty() {
            self.sent.remove(&slot);
        }
        self.release(from, size);
        let q = self.samples.entry(from).or_default();
        q.push_back((now, queued as f64, rtt));
        if q.len() > MAX_SAMPLES {
            q.pop_front();
        }
    }

    /// Refit every follower's model if `REFIT` passed since the last fit.
    pub fn refit(&mut self, now: Time) {
        if self.fitted_at.is_some_and(|t| now.since(t) < REFIT) {
            return;
        }
        self.fitted_at = Some(now);
        self.models.clear();
        for (peer, q) in self.samples.iter_mut() {
            while q.front().is_some_and(|(t, _, _)| now.since(*t) > WINDOW) {
                q.pop_front();
            }
            let points: Vec<(f64, f64)> = q.iter().map(|(_, s, t)| (*s, *t)).collect();
            if let Some(m) = Model::fit(&points) {
                self.models.insert(*peer, m);
            }
        }
        self.samples.retain(|_, q| !q.is_empty());
    }

    /// Followers among `followers` with samples in the window (§4.3's healthy count).
    pub fn healthy(&mut self, now: Time, followers: &[NodeId]) -> usize {
        self.refit(now);
        followers.iter().filter(|p| self.models.contains_key(p)).count()
    }

    /// The fitted model of `peer` (None: no sample in the window).
    pub fn model(&self, peer: NodeId) -> Option<Model> {
        self.models.get(&peer).copied()
    }

    /// When the followers, in the order they are sent to, would have pieces of `bytes`
    /// each (None: no model in the window): behind the backlog and the pieces sent before
    /// theirs.
    fn etas(&self, followers: &[NodeId], bytes: impl Fn(usize) -> f64) -> Vec<Option<f64>> {
        let mut ahead = self.backlog() as f64;
        followers
            .iter()
            .enumerate()
            .map(|(j, p)| {
                ahead += bytes(j);
                self.model(*p).map(|m| m.estimate(ahead))
            })
            .collect()
    }

    /// The `k`-th (from 1) smallest of the estimates that exist.
    fn kth(estimates: Vec<Option<f64>>, k: usize) -> Option<f64> {
        let mut est: Vec<f64> = estimates.into_iter().flatten().collect();
        est.sort_by(f64::total_cmp);
        est.get(k.checked_sub(1)?).copied()
    }

    /// §5.4, unbalanced assignments: per-acceptor shard counts (by position in `members`, the
    /// leader `me` holding all `n`, `erasure::Assignment::unbalanced`) and a commit quorum
    /// `q` for a payload of `bytes`, or None when too few followers have models.
    ///
    /// Candidates: the balanced boundary (`c = n + 1 − q` each), then for each `q` above
    /// `f + 1`: start every follower at one shard and, while some `q − f` servers cover fewer than `d` shards (C2 by
    /// enumeration), give one more shard to the member of that weakest set that delays the
    /// quorum least (then itself least: a follower outside the fastest `q − 1` can take
    /// shards for free); the estimate of `q` is then its `(q−1)`-th fastest follower's. The
    /// fastest `q` wins (near-ties to the smaller quorum, as in [`Chooser::choose`]).
    pub fn choose_unbalanced(
        &mut self,
        now: Time,
        bytes: usize,
        d: usize,
        members: &[NodeId],
        me: NodeId,
    ) -> Option<(Vec<usize>, usize)> {
        self.refit(now);
        let n = members.len();
        let f = d.checked_sub(1)?;
        let leader = members.iter().position(|m| *m == me)?;
        let shard = bytes as f64 / d as f64;
        let followers: Vec<usize> = (0..n).filter(|p| *p != leader).collect();
        let ids: Vec<NodeId> = followers.iter().map(|p| members[*p]).collect();
        let etas = |counts: &[usize]| self.etas(&ids, |j| counts[followers[j]] as f64 * shard);
        // When the fastest `q − 1` followers would have their shards (None: too few models).
        let quorum = |counts: &[usize], q: usize| Self::kth(etas(counts), q - 1);
        let eta = |counts: &[usize], pos: usize| followers.iter().position(|p| *p == pos).and_then(|j| etas(counts)[j]);
        let mut best: Option<(f64, Vec<usize>, usize)> = None;
        let mut consider = |counts: Vec<usize>, q: usize| {
            if let Some(t) = quorum(&counts, q) {
                if best.as_ref().is_none_or(|(b, _, _)| t < *b * MARGIN) {
                    best = Some((t, counts, q));
                }
            }
        };
        // The balanced boundary first (the full copy leading), so an unbalanced assignment
        // is taken only where it is estimated faster than all of them.
        for q in f + 1..=n {
            let c = (n + 1 - q).min(d);
            let mut counts = vec![c; n];
            counts[leader] = n;
            consider(counts, q);
        }
        for q in f + 2..=n {
            let counts = grow_unbalanced(n, d, leader, q, |counts, p| {
                let mut more = counts.to_vec();
                more[p] += 1;
                let inf = f64::INFINITY;
                (quorum(&more, q).unwrap_or(inf), eta(&more, p).unwrap_or(inf))
            });
            if let Some(counts) = counts {
                consider(counts, q);
            }
        }
        best.map(|(_, counts, q)| (counts, q))
    }

    /// The best of `candidates` (`(c, q)`, the full copy first) for a payload of `bytes`
    /// with `d` data shards, among `followers`; `full` when no candidate can be estimated.
    pub fn choose(
        &mut self,
        now: Time,
        bytes: usize,
        d: usize,
        followers: &[NodeId],
        candidates: &[(usize, usize)],
        full: (usize, usize),
    ) -> (usize, usize) {
        self.refit(now);
        let mut best = (f64::INFINITY, full);
        for &(c, q) in candidates {
            let need = q.saturating_sub(1);
            if need == 0 {
                continue;
            }
            let per = (c.min(d) as f64) * bytes as f64 / d as f64;
            // §4.3: a follower without samples in the window is not counted as healthy.
            let Some(t) = Self::kth(self.etas(followers, |_| per), need) else { continue };
            if t < best.0 * MARGIN {
                best = (t, (c, q));
            }
        }
        best.1
    }
}
