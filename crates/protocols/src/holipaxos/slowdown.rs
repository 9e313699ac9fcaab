//! The leader's slowdown self-detector (HoliPaxos §3.2, Algorithm 1).
//!
//! Every sample period (paper: 0.5 s) the leader records how many operations are in flight
//! (received from clients, not yet executed) and how many it has executed in total. Each
//! time `samples` observations (paper: 15, i.e. 7.5 s) have filled a window, it computes
//! their variance, pushes it to a queue of recent variances, runs a two-sided CUSUM on the
//! deviation of the new variance from the queue's mean and starts a new window (tumbling
//! windows, Algorithm 1 line 22; `sliding` moves the window by one sample instead):
//!
//! ```text
//! dev = variance − mean(variance_queue)
//! C⁺  = max(0, C⁺ + dev − ω)        C⁻ = min(0, C⁻ + dev + ω)
//! C⁺ > threshold  and  TP(recent) ≤ TP(before)·(1 + tp_gain)          →  slow
//! C⁻ < −threshold                                                      →  recovered
//! ```
//!
//! (NOTES.md: the extraction lost the signs of Algorithm 1 line 10; this is the standard
//! two-sided CUSUM with drift ω.) Using the *variance* rather than the count keeps a steady
//! load increase from looking like a change point; the throughput test (line 11) dismisses
//! a rise in variance that comes with more work done: TP(recent) is the throughput since
//! CUSUM's change point (the window where C⁺ last left 0) and TP(before) that of the window
//! before it, because a moderate rise crosses the threshold several windows after the
//! change, when the last two windows are both after it. `tp_gain` is the margin by which the
//! throughput must have grown for the change to be dismissed (the paper says "a substantial
//! increase"; 0 is the literal `TP ≤ TP_last`).

use std::collections::VecDeque;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlowdownConfig {
    pub enabled: bool,
    pub sample: Duration,
    pub samples: usize,
    /// CUSUM decision threshold, in (ops)².
    pub threshold: f64,
    /// CUSUM drift ω, in (ops)².
    pub omega: f64,
    pub tp_gain: f64,
    /// Measure the in-flight fluctuation robustly: the squared, normal-scaled median
    /// absolute deviation (1.4826·MAD)² instead of the variance. Both are in (ops)² and
    /// agree for a steady Gaussian-like swing, but one outlier among the `samples` (a single
    /// 50 ms stall: a CPU-quota throttle, an fsync) moves the MAD hardly at all, while it
    /// lifts the variance by spike²/samples for a whole window — enough to cross the
    /// paper's threshold when a healthy leader's in-flight count is near 0. The paper
    /// reacts to a "sustained fluctuation"; this is that, made explicit. Off by default
    /// (Algorithm 1 as printed).
    pub robust: bool,
    /// Slide the window by one sample (a variance and a CUSUM step every sample) instead of
    /// Algorithm 1's tumbling windows (line 22, `metrics ← nil`: one variance and one CUSUM
    /// step per full window of `samples`). Sliding reacts up to a window sooner, but every
    /// excursion of the in-flight count then lands in `samples` overlapping windows, so
    /// CUSUM adds it up about `samples` times: one short stall of a healthy leader near its
    /// CPU quota crossed the threshold (Fig. 10(c) false markers, sessions 4 and 5, which
    /// ran this mode). Off by default (Algorithm 1 as printed).
    pub sliding: bool,
    /// A leader may declare a new overload only once the previous declaration is remedied
    /// or this long after it.
    pub redeclare_after: Duration,
    /// A replica that declared itself overloaded (as leader) sits out the elections that
    /// later markers trigger for this long: its slowness is the one thing the cluster
    /// knows about it, and a marker election that hands the lead back to it (Fig. 10(b):
    /// a healthy leader's declaration re-elected the node at 16% CPU) undoes the remedy.
    /// It still campaigns on an ordinary timeout, so liveness does not depend on it. The
    /// paper is silent on who should win a marker election. Zero turns this off.
    pub sitout: Duration,
}

impl Default for SlowdownConfig {
    fn default() -> Self {
        SlowdownConfig {
            enabled: true,
            sample: Duration::from_millis(500),
            samples: 15,
            threshold: 3000.0,
            omega: 100.0,
            tp_gain: 0.1,
            robust: false,
            sliding: false,
            redeclare_after: Duration::from_secs(60),
            sitout: Duration::from_secs(600),
        }
    }
}

/// What one sample concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing changed (or not enough history yet).
    Steady,
    /// An increasing change point without a matching throughput increase (line 12).
    Slow,
    /// An increasing change point dismissed because throughput grew as much.
    Busier,
    /// A decreasing change point (line 15).
    Recovered,
}

#[derive(Clone, Debug)]
pub struct SlowdownDetector {
    cfg: SlowdownConfig,
    /// In-flight counts of the current window (the last `samples` when sliding).
    inflight: VecDeque<f64>,
    /// The latest in-flight sample.
    last: u64,
    /// Executed-operation totals of the last `2 * samples + 1` samples (for TP of this and
    /// the previous window).
    executed: VecDeque<u64>,
    variances: VecDeque<f64>,
    c_pos: f64,
    c_neg: f64,
    /// Tumbling mode: where the current rise of C⁺ began (CUSUM's change-point estimate, the
    /// last window C⁺ was 0): the executed total and sample count at that window's start,
    /// and the throughput (ops per sample) of the window before it.
    rise: Option<(u64, usize, f64)>,
    slow: bool,
    seen: usize,
}

impl SlowdownDetector {
    pub fn new(cfg: SlowdownConfig) -> Self {
        SlowdownDetector {
            cfg,
            inflight: VecDeque::new(),
            last: 0,
            executed: VecDeque::new(),
            variances: VecDeque::new(),
            c_pos: 0.0,
            c_neg: 0.0,
            rise: None,
            slow: false,
            seen: 0,
        }
    }

    pub fn config(&self) -> &SlowdownConfig {
        &self.cfg
    }

    /// Forget everything (a new leadership starts from a clean history).
    pub fn reset(&mut self) {
        *self = SlowdownDetector::new(self.cfg);
    }

    /// The detector's current opinion (Algorithm 1's `is_slow`).
    pub fn is_slow(&self) -> bool {
        self.slow
    }

    /// The in-flight variance of the latest full window (0 before the first).
    pub fn variance(&self) -> f64 {
        self.variances.back().copied().unwrap_or(0.0)
    }

    /// The latest in-flight sample (0 before the first).
    pub fn last_inflight(&self) -> u64 {
        self.last
    }

    /// Samples recorded since the last reset.
    pub fn samples_seen(&self) -> usize {
        self.seen
    }

    /// Samples needed before a verdict can be reached at all (a full variance window plus
    /// the throughput history of the "since/before" comparison; two windows when tumbling).
    pub fn warm_up(&self) -> usize {
        let w = self.cfg.samples.max(2);
        if self.cfg.sliding {
            w + (w / 3).max(1) + 1
        } else {
            2 * w + 1
        }
    }

    pub fn cusum(&self) -> (f64, f64) {
        (self.c_pos, self.c_neg)
    }

    /// Record one sample: operations in flight now and operations executed so far.
    pub fn sample(&mut self, inflight: u64, executed_total: u64) -> Verdict {
        let w = self.cfg.samples.max(2);
        self.seen += 1;
        self.last = inflight;
        self.inflight.push_back(inflight as f64);
        if self.inflight.len() > w {
            self.inflight.pop_front();
        }
        self.executed.push_back(executed_total);
        if self.executed.len() > 2 * w + 1 {
            self.executed.pop_front();
        }
        if self.inflight.len() < w {
            return Verdict::Steady;
        }
        let variance = if self.cfg.robust {
            let mad = 1.4826 * mad(self.inflight.iter().copied());
            mad * mad
        } else {
            let mean = self.inflight.iter().sum::<f64>() / w as f64;
            self.inflight.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / w as f64
        };
        if !self.cfg.sliding {
            self.inflight.clear(); // line 22: metrics ← nil
        }
        self.variances.push_back(variance);
        if self.variances.len() > w {
            self.variances.pop_front();
        }
        let mean_var = self.variances.iter().sum::<f64>() / self.variances.len() as f64;
        let dev = variance - mean_var;
        let rising = self.c_pos > 0.0;
        self.c_pos = (self.c_pos + dev - self.cfg.omega).max(0.0);
        self.c_neg = (self.c_neg + dev + self.cfg.omega).min(0.0);
        if self.c_pos == 0.0 {
            self.rise = None;
        } else if !rising && !self.cfg.sliding {
            self.rise = self.window_throughputs(w).map(|(_, before)| {
                let e = &self.executed;
                (e[e.len() - 1 - w], self.seen - w, before)
            });
        }
        if self.c_pos > self.cfg.threshold {
            // Line 11: dismiss the change point if throughput grew with it. CUSUM crosses
            // the threshold some windows after the change when the rise is moderate (a load
            // step: 20 s after it in a Fig. 10(c) run), by when this window and the last are
            // both after the change and equal; so the tumbling mode compares the throughput
            // since the change point (where C⁺ last left 0) with the window before it.
            // Without that history the change cannot be told apart from a load increase:
            // keep watching.
            let tps = if self.cfg.sliding { self.throughputs(w) } else { self.since_rise(executed_total) };
            let Some((tp, tp_last)) = tps else { return Verdict::Steady };
            self.c_pos = 0.0;
            self.c_neg = 0.0;
            self.rise = None;
            if tp <= tp_last * (1.0 + self.cfg.tp_gain) {
                self.slow = true;
                return Verdict::Slow;
            }
            if !self.cfg.sliding {
                // The load changed: learn the new normal variance instead of measuring the
                // next windows against the old one (they would cross again, with no
                // throughput change left to dismiss them).
                self.variances.clear();
            }
            return Verdict::Busier;
        }
        if self.c_neg < -self.cfg.threshold {
            self.c_pos = 0.0;
            self.c_neg = 0.0;
            self.slow = false;
            return Verdict::Recovered;
        }
        Verdict::Steady
    }

    /// Throughput since the current rise of C⁺ began and of the window before it.
    fn since_rise(&self, executed_total: u64) -> Option<(f64, f64)> {
        let (at, seen_at, before) = self.rise?;
        let n = self.seen.saturating_sub(seen_at).max(1);
        Some(((executed_total - at) as f64 / n as f64, before))
    }

    /// Algorithm 1 line 11: TP(metrics) and TP(metrics_last), the throughput of the window
    /// that just filled and of the one before it (ops per sample).
    fn window_throughputs(&self, w: usize) -> Option<(f64, f64)> {
        if self.executed.len() < 2 * w + 1 {
            return None;
        }
        let e = &self.executed;
        let last = e.len() - 1;
        let this = (e[last] - e[last - w]) as f64 / w as f64;
        let before = (e[last - w] - e[last - 2 * w]) as f64 / w as f64;
        Some((this, before))
    }

    /// Sliding mode: throughput rates (ops per sample) *since* the change and *before* it: a CUSUM
    /// alarm fires a few samples after the change, so "since" is the last `w / 3` samples
    /// and "before" the `w` samples preceding them (Algorithm 1's TP(metrics) and
    /// TP(metrics_last), made comparable for a sliding window).
    fn throughputs(&self, w: usize) -> Option<(f64, f64)> {
        let r = (w / 3).max(1);
        if self.executed.len() < r + w + 1 {
            return None;
        }
        let e = &self.executed;
        let last = e.len() - 1;
        let recent = (e[last] - e[last - r]) as f64 / r as f64;
        let before = (e[last - r] - e[last - r - w]) as f64 / w as f64;
        Some((recent, before))
    }
}

/// Median absolute deviation from the median.
fn mad(xs: impl Iterator<Item = f64>) -> f64 {
    fn median(v: &mut [f64]) -> f64 {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n == 0 {
            0.0
        } else if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    }
    let mut v: Vec<f64> = xs.collect();
    let m = median(&mut v);
    let mut dev: Vec<f64> = v.iter().map(|x| (x - m).abs()).collect();
    median(&mut dev)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic pseudo-random sequence (no RNG dependency in the detector tests).
    fn noise(i: u64, amplitude: u64) -> u64 {
        let x = i.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (x >> 33) % (amplitude + 1)
    }

    /// Feed samples; returns the index of the first `Slow` verdict and the verdicts seen.
    fn run(d: &mut SlowdownDetector, n: u64, f: impl Fn(u64) -> (u64, u64)) -> (Option<u64>, Vec<Verdict>) {
        let mut executed = 0;
        let mut first = None;
        let mut seen = Vec::new();
        for i in 0..n {
            let (inflight, done) = f(i);
            executed += done;
            let v = d.sample(inflight, executed);
            if v == Verdict::Slow && first.is_none() {
                first = Some(i);
            }
            seen.push(v);
        }
        (first, seen)
    }

    #[test]
    fn a_step_in_inflight_variance_is_detected() {
        let mut d = SlowdownDetector::new(SlowdownConfig::default());
        // 60 s healthy: ~100 in flight ± 5, 10k ops executed per sample. Then the leader
        // loses CPU: the queue swings between ~100 and ~400 and throughput drops a little.
        let (first, seen) =
            run(&mut d, 240, |i| if i < 120 { (100 + noise(i, 10), 10_000) } else { (100 + noise(i, 300), 9_000) });
        assert!(seen[..120].iter().all(|v| *v == Verdict::Steady), "no false alarm while healthy");
        let at = first.expect("slowdown detected");
        assert!((120..140).contains(&at), "detected at sample {at} (step at 120)");
        assert!(d.is_slow());
    }

    #[test]
    fn a_load_increase_with_matching_throughput_is_not_a_slowdown() {
        let mut d = SlowdownDetector::new(SlowdownConfig::default());
        // Stepwise load increases (Fig. 10c): every 100 samples the in-flight level and its
        // spread grow with the offered load, and so does the executed throughput.
        let (first, seen) = run(&mut d, 500, |i| {
            let step = i / 100;
            let level = 100 + 60 * step;
            (level + noise(i, 10 + 20 * step), 10_000 + 4_000 * step)
        });
        assert_eq!(first, None, "verdicts: {:?}", seen.iter().filter(|v| **v != Verdict::Steady).collect::<Vec<_>>());
        assert!(!d.is_slow());
    }

    #[test]
    fn isolated_stalls_trip_the_sliding_variance_but_not_the_robust_measure_nor_tumbling_windows() {
        // Fig. 10(c) as measured on a real leader at 75% load: in flight 0-7, and about
        // every 40 s one sample catches a short stall with ~190 operations queued. With
        // the variance, each stall alone crosses the threshold (a false slowdown); the
        // robust measure ignores single outliers.
        // That was with sliding windows; Algorithm 1's tumbling windows count each stall
        // once and do not declare either.
        let stalls = |i: u64| if i % 80 == 40 { (190, 9_000) } else { (noise(i, 7), 10_000) };
        let sliding = SlowdownConfig { sliding: true, ..SlowdownConfig::default() };
        let mut plain = SlowdownDetector::new(sliding);
        let (first, _) = run(&mut plain, 400, stalls);
        assert!(first.is_some(), "the variance over sliding windows declares on an isolated stall");
        let mut robust = SlowdownDetector::new(SlowdownConfig { robust: true, ..sliding });
        let (first, seen) = run(&mut robust, 400, stalls);
        assert_eq!(first, None, "verdicts: {:?}", seen.iter().filter(|v| **v != Verdict::Steady).collect::<Vec<_>>());
        let mut tumbling = SlowdownDetector::new(SlowdownConfig::default());
        let (first, seen) = run(&mut tumbling, 400, stalls);
        assert_eq!(first, None, "verdicts: {:?}", seen.iter().filter(|v| **v != Verdict::Steady).collect::<Vec<_>>());
    }

    #[test]
    fn the_robust_measure_still_detects_a_slow_leader() {
        // (The robust measure was made for sliding windows: over one tumbling window of 15
        // samples the MAD is too coarse an estimate and the load steps below trip it.)
        let robust = SlowdownConfig { robust: true, sliding: true, ..SlowdownConfig::default() };
        let mut d = SlowdownDetector::new(robust);
        let (first, seen) =
            run(&mut d, 240, |i| if i < 120 { (100 + noise(i, 10), 10_000) } else { (100 + noise(i, 300), 9_000) });
        assert!(seen[..120].iter().all(|v| *v == Verdict::Steady), "no false alarm while healthy");
        let at = first.expect("slowdown detected");
        assert!((120..140).contains(&at), "detected at sample {at} (step at 120)");
        // and a load increase with matching throughput is still dismissed
        let mut d = SlowdownDetector::new(robust);
        let (first, _) = run(&mut d, 500, |i| {
            let step = i / 100;
            (100 + 60 * step + noise(i, 10 + 20 * step), 10_000 + 4_000 * step)
        });
        assert_eq!(first, None);
    }

    #[test]
    fn a_load_step_whose_variance_rise_is_slow_to_cross_is_still_dismissed() {
        // Fig. 10(c) at paper scale, 75% step: the in-flight swing grows moderately with the
        // load, CUSUM crosses ~20 s after the step, when this window and the last one are
        // both after it (equal throughput). Measured from where C+ began to rise, the
        // throughput grew by 25%: a busier leader, not a slower one.
        let mut d = SlowdownDetector::new(SlowdownConfig::default());
        let (first, seen) =
            run(&mut d, 600, |i| if i < 300 { (50 + noise(i, 20), 6_000) } else { (50 + noise(i, 100), 7_500) });
        assert_eq!(first, None, "verdicts: {:?}", seen.iter().filter(|v| **v != Verdict::Steady).collect::<Vec<_>>());
        assert!(seen.contains(&Verdict::Busier), "the rise was seen and dismissed");
        // The same rise without more throughput is a slowdown.
        let mut d = SlowdownDetector::new(SlowdownConfig::default());
        let (first, _) =
            run(&mut d, 600, |i| if i < 300 { (50 + noise(i, 20), 6_000) } else { (50 + noise(i, 100), 6_000) });
        assert!(first.is_some_and(|at| at > 300), "{first:?}");
    }

    #[test]
    fn mad_ignores_one_outlier() {
        assert_eq!(mad([1.0, 2.0, 3.0, 4.0, 100.0].into_iter()), 1.0);
        assert_eq!(mad(std::iter::empty()), 0.0);
    }

    #[test]
    fn recovery_clears_the_flag_and_reset_forgets() {
        let mut d = SlowdownDetector::new(SlowdownConfig::default());
        let (first, seen) = run(&mut d, 300, |i| match i {
            0..=59 => (100 + noise(i, 10), 10_000),
            60..=179 => (100 + noise(i, 300), 9_000),
            _ => (100 + noise(i, 10), 10_000),
        });
        assert!(first.is_some());
        assert!(seen.contains(&Verdict::Recovered), "the variance fell back: recovered");
        assert!(!d.is_slow());
        d.reset();
        assert_eq!(d.cusum(), (0.0, 0.0));
    }
}
