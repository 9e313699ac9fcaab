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
//! line is nearly flat (the queue wait dominates). The x axis is thus the NIC's, shared by
//! every configuration: samples taken under one configuration inform the estimates of all of
//! them, so no candidate goes unexplored for lack of samples at its sizes.
//!
//! The estimate for a candidate is taken at the backlog *as the candidate would have made
//! it*: the payload bytes in flight (per follower, unanswered) times the candidate's share
//! `c/d`, plus its pieces up to that follower. This is the steady state of choosing the
//! candidate for every instance, which is what the paper's fit on the message size implies
//! (there the slope absorbs the queue of like messages ahead and scales with the size). Taken
//! at the actual backlog instead, a saturated NIC's queue of full copies is the same for
//! every candidate, the candidates differ by the new instance's own pieces only (≈ 0.7 ms
//! in 16 ms at 4 KB over 31.25 Mbit/s, inside the near-tie margin), and the full copy, once
//! chosen, kept winning although one shard each triples the throughput (Fig. 6 at 128 KB).
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

/// One Accept to one follower: the follower, its bytes and the instance's payload bytes,
/// and the bytes ahead of it on the leader's way out at the send, its own included (the
/// sample's size).
#[derive(Clone, Copy, Debug)]
struct Queued {
    peer: NodeId,
    bytes: usize,
    payload: usize,
    ahead: usize,
}

/// What is sent to one follower and not yet answered.
#[derive(Clone, Copy, Debug, Default)]
struct Outstanding {
    /// The bytes of its pieces.
    bytes: usize,
    /// The payload bytes of the instances those pieces belong to.
    payload: usize,
}

/// Per-follower response-time models and the choice among candidate configurations.
#[derive(Debug, Default)]
pub struct Chooser {
    samples: BTreeMap<NodeId, VecDeque<(Time, f64, f64)>>,
    models: BTreeMap<NodeId, Model>,
    fitted_at: Option<Time>,
    /// Accepts in flight: slot → (sent at, per follower: its bytes and the bytes ahead of it
    /// at the send, its own included — the sample's size).
    sent: BTreeMap<u64, (Time, Vec<Queued>)>,
    /// Sent to each follower in rounds it has not answered. The bytes' sum is what a new
    /// Accept queues behind on the leader's network interface, which every outbound link
    /// shares (the paper shapes each host's NIC); on a link of its own it is proportional to
    /// the follower's own queue as long as the followers get alike pieces.
    outstanding: BTreeMap<NodeId, Outstanding>,
}

impl Chooser {
    /// The Accepts of `slot`, an instance of `payload` bytes, left at `now`, carrying `bytes`
    /// to each follower, in the order they were sent.
    pub fn on_send(&mut self, now: Time, slot: u64, payload: usize, bytes: Vec<(NodeId, usize)>) {
        // Forget rounds older than the window (their answers are outliers or lost).
        while let Some((&s, &(at, _))) = self.sent.iter().next() {
            if now.since(at) <= WINDOW {
                break;
            }
            if let Some((_, left)) = self.sent.remove(&s) {
                for piece in left {
                    self.release(&piece);
                }
            }
        }
        let mut ahead = self.backlog();
        let bytes = bytes
            .into_iter()
            .map(|(peer, size)| {
                let o = self.outstanding.entry(peer).or_default();
                o.bytes += size;
                o.payload += payload;
                ahead += size;
                Queued { peer, bytes: size, payload, ahead }
            })
            .collect();
        self.sent.insert(slot, (now, bytes));
    }

    /// Bytes sent and not yet answered, all followers together.
    fn backlog(&self) -> usize {
        self.outstanding.values().map(|o| o.bytes).sum()
    }

    /// The payload bytes of the pieces sent and not yet answered, all followers together:
    /// the backlog a configuration sending `r` payload bytes per payload byte to each
    /// follower would have made is `r` times this.
    fn payload_backlog(&self) -> usize {
        self.outstanding.values().map(|o| o.payload).sum()
    }

    fn release(&mut self, piece: &Queued) {
        if let Some(o) = self.outstanding.get_mut(&piece.peer) {
            o.bytes = o.bytes.saturating_sub(piece.bytes);
            o.payload = o.payload.saturating_sub(piece.payload);
        }
    }

    /// `from` accepted `slot` at `now`: one sample.
    pub fn on_ack(&mut self, now: Time, from: NodeId, slot: u64) {
        let Some((at, bytes)) = self.sent.get_mut(&slot) else { return };
        let Some(i) = bytes.iter().position(|q| q.peer == from) else { return };
        let piece = bytes.swap_remove(i);
        let rtt = now.since(*at).as_secs_f64();
        if bytes.is_empty() {
            self.sent.remove(&slot);
        }
        self.release(&piece);
        let q = self.samples.entry(from).or_default();
        q.push_back((now, piece.ahead as f64, rtt));
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
    /// each (None: no model in the window) under a configuration sending `share` bytes per
    /// payload byte to a follower on average: behind the backlog that configuration would
    /// have made of the payloads in flight, and behind the pieces sent before theirs.
    fn etas(&self, followers: &[NodeId], share: f64, bytes: impl Fn(usize) -> f64) -> Vec<Option<f64>> {
        let mut ahead = share * self.payload_backlog() as f64;
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
        // A follower's share of a payload byte, on average over the followers.
        let share = |counts: &[usize]| {
            followers.iter().map(|p| counts[*p].min(d) as f64).sum::<f64>() / (followers.len().max(1) * d) as f64
        };
        let etas = |counts: &[usize]| self.etas(&ids, share(counts), |j| counts[followers[j]] as f64 * shard);
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
            let share = c.min(d) as f64 / d as f64;
            let per = share * bytes as f64;
            // §4.3: a follower without samples in the window is not counted as healthy.
            let Some(t) = Self::kth(self.etas(followers, share, |_| per), need) else { continue };
            if t < best.0 * MARGIN {
                best = (t, (c, q));
            }
        }
        best.1
    }
}
