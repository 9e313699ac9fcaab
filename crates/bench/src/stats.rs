//! Latency and throughput statistics: HDR histograms per operation class, counters of
//! rejected and failed operations, and a per-interval timeline.
//!
//! Latencies are recorded in microseconds. Percentiles come from the histograms, never from
//! means: replication latency distributions are multi-modal (fast path / slow path, leader
//! change stalls) and a mean describes none of the modes.

use crate::workload::OpClass;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::time::Duration;

/// Highest latency a histogram tracks (larger values are clamped to it): one hour.
const MAX_LATENCY_US: u64 = 3_600_000_000;

fn histogram(sigfig: u8) -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, sigfig).expect("static histogram bounds are valid")
}

/// How one operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    Ok,
    /// The target answered and refused for good (overload, invalid request, IDEM when every
    /// replica refused): the operation was not and will not be executed.
    Rejected,
    /// Refused, but the operation may still execute (IDEM's ambivalent `n − f` rejects).
    Ambivalent,
    /// Transport failure, timeout or an error answer.
    Error,
}

/// Counters and latency histogram of one class, over the whole run or one interval.
#[derive(Clone, Debug)]
pub struct ClassStats {
    /// Latency of the operations that succeeded.
    pub hist: Histogram<u64>,
    /// Latency of the rejected operations (definitive and ambivalent): how fast a client
    /// learns that it was refused.
    pub reject_hist: Histogram<u64>,
    /// Latency of the ambivalent rejects alone (also in `reject_hist`; the definitive ones
    /// are the difference): IDEM's optimistic clients wait after `n − f` REJECTs, so the
    /// two kinds have different latencies.
    pub ambivalent_hist: Histogram<u64>,
    pub rejected: u64,
    pub ambivalent: u64,
    pub errors: u64,
}

impl ClassStats {
    pub(crate) fn new(sigfig: u8) -> ClassStats {
        ClassStats {
            hist: histogram(sigfig),
            reject_hist: histogram(sigfig),
            ambivalent_hist: histogram(sigfig),
            rejected: 0,
            ambivalent: 0,
            errors: 0,
        }
    }

    pub(crate) fn record(&mut self, latency: Duration, completion: Completion) {
        let us = (latency.as_micros() as u64).max(1);
        match completion {
            Completion::Ok => self.hist.saturating_record(us),
            Completion::Rejected => {
                self.rejected += 1;
                self.reject_hist.saturating_record(us);
            }
            Completion::Ambivalent => {
                self.ambivalent += 1;
                self.reject_hist.saturating_record(us);
                self.ambivalent_hist.saturating_record(us);
            }
            Completion::Error => self.errors += 1,
        }
    }

    pub fn ok(&self) -> u64 {
        self.hist.len()
    }

    /// Latency of the definitive rejects (every reject that is not ambivalent).
    pub fn definitive_hist(&self) -> Histogram<u64> {
        let mut h = self.reject_hist.clone();
        h.subtract(&self.ambivalent_hist).expect("ambivalent rejects are recorded in reject_hist too");
        h
    }
}

/// One interval of the timeline.
#[derive(Clone, Debug)]
pub struct Interval {
    pub classes: [ClassStats; 4],
    /// Open loop: arrivals dropped because too many operations were outstanding.
    pub dropped: u64,
}

/// Everything recorded during the measured part of one run.
#[derive(Clone, Debug)]
pub struct Recorder {
    pub interval: Duration,
    pub classes: [ClassStats; 4],
    pub timeline: Vec<Interval>,
    pub dropped: u64,
}

impl Recorder {
    pub fn new(interval: Duration) -> Recorder {
        assert!(!interval.is_zero(), "validated by the caller");
        Recorder { interval, classes: OpClass::ALL.map(|_| ClassStats::new(3)), timeline: Vec::new(), dropped: 0 }
    }

    fn interval_mut(&mut self, at: Duration) -> &mut Interval {
        let idx = (at.as_nanos() / self.interval.as_nanos()) as usize;
        while self.timeline.len() <= idx {
            // Two significant digits are plenty per interval and keep the timeline small.
            self.timeline.push(Interval { classes: OpClass::ALL.map(|_| ClassStats::new(2)), dropped: 0 });
        }
        &mut self.timeline[idx]
    }

    /// Record one operation that completed `at` after the start of measurement.
    pub fn record(&mut self, class: OpClass, at: Duration, latency: Duration, completion: Completion) {
        self.classes[class.index()].record(latency, completion);
        self.interval_mut(at).classes[class.index()].record(latency, completion);
    }

    /// Record an arrival dropped (open loop) at `at`.
    pub fn record_drop(&mut self, at: Duration) {
        self.dropped += 1;
        self.interval_mut(at).dropped += 1;
    }

    /// Make the timeline cover `elapsed` (intervals with no completions are real: a stall).
    pub fn extend_to(&mut self, elapsed: Duration) {
        if !elapsed.is_zero() {
            let _ = self.interval_mut(elapsed - Duration::from_nanos(1));
        }
    }

    /// All classes merged.
    pub fn overall(&self) -> ClassStats {
        merge(&self.classes)
    }

    pub fn summary(&self, elapsed: Duration) -> Summary {
        let secs = elapsed.as_secs_f64().max(1e-9);
        let mut classes: Vec<ClassSummary> = OpClass::ALL
            .iter()
            .filter(|c| {
                let s = &self.classes[c.index()];
                s.ok() + s.rejected + s.errors > 0
            })
            .map(|c| ClassSummary::of(c.name(), &self.classes[c.index()], secs))
            .collect();
        classes.push(ClassSummary::of("all", &self.overall(), secs));
        Summary { elapsed_s: secs, dropped: self.dropped, classes, commits: CommitPaths::default() }
    }

    pub fn timeline_rows(&self) -> Vec<TimelineRow> {
        let secs = self.interval.as_secs_f64();
        self.timeline
            .iter()
            .enumerate()
            .map(|(i, iv)| TimelineRow {
                t_s: i as f64 * secs,
                dropped: iv.dropped,
                classes: OpClass::ALL
                    .iter()
                    .map(|c| ClassSummary::of(c.name(), &iv.classes[c.index()], secs))
                    .chain(std::iter::once(ClassSummary::of("all", &merge(&iv.classes), secs)))
                    .collect(),
            })
            .collect()
    }
}

impl Recorder {
    /// The timeline merged into tumbling windows of `window` (HoliPaxos Fig. 9–11 report
    /// 10 s windows): one row per window, starting at 0, with each class's percentiles over
    /// every operation that completed in it (histograms merged, not percentiles averaged)
    /// and throughput over the part of the window the timeline covers. An interval belongs
    /// to the window its start falls in, so a window that is not a multiple of the interval
    /// is rounded to whole intervals.
    pub fn windows(&self, window: Duration) -> Vec<TimelineRow> {
        let (iv, w) = (self.interval.as_nanos(), window.as_nanos().max(1));
        let mut groups: Vec<(usize, Vec<&Interval>)> = Vec::new();
        for (i, interval) in self.timeline.iter().enumerate() {
            let k = (i as u128 * iv / w) as usize;
            match groups.last_mut() {
                Some((last, members)) if *last == k => members.push(interval),
                _ => groups.push((k, vec![interval])),
            }
        }
        groups
            .into_iter()
            .map(|(k, members)| {
                let secs = members.len() as f64 * self.interval.as_secs_f64();
                let per_class: Vec<ClassStats> = (0..OpClass::ALL.len())
                    .map(|c| merge(&members.iter().map(|m| m.classes[c].clone()).collect::<Vec<_>>()))
                    .collect();
                TimelineRow {
                    t_s: k as f64 * window.as_secs_f64(),
                    dropped: members.iter().map(|m| m.dropped).sum(),
                    classes: OpClass::ALL
                        .iter()
                        .map(|c| ClassSummary::of(c.name(), &per_class[c.index()], secs))
                        .chain(std::iter::once(ClassSummary::of("all", &merge(&per_class), secs)))
                        .collect(),
                }
            })
            .collect()
    }
}

fn merge(classes: &[ClassStats]) -> ClassStats {
    let mut all = ClassStats::new(classes[0].hist.sigfig());
    for c in classes {
        all.hist.add(&c.hist).expect("same bounds");
        all.reject_hist.add(&c.reject_hist).expect("same bounds");
        all.ambivalent_hist.add(&c.ambivalent_hist).expect("same bounds");
        all.rejected += c.rejected;
        all.ambivalent += c.ambivalent;
        all.errors += c.errors;
    }
    all
}

/// Percentiles in milliseconds and throughput in operations per second of one class.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClassSummary {
    pub class: String,
    pub ok: u64,
    /// Refused for good (definitive rejects, invalid requests).
    pub rejected: u64,
    /// Refused, but may still execute (ambivalent rejects).
    pub ambivalent: u64,
    pub errors: u64,
    /// Successful operations per second.
    pub throughput: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    /// Rejected operations (definitive and ambivalent) per second, and how long a client
    /// waited to learn of the rejection.
    pub reject_throughput: f64,
    pub reject_p50_ms: f64,
    pub reject_p99_ms: f64,
    /// The reject p50 split: definitive rejects and ambivalent ones (0 when none).
    pub definitive_reject_p50_ms: f64,
    pub ambivalent_reject_p50_ms: f64,
}

impl ClassSummary {
    pub(crate) fn of(name: &str, s: &ClassStats, secs: f64) -> ClassSummary {
        let q = |q: f64| if s.hist.is_empty() { 0.0 } else { s.hist.value_at_quantile(q) as f64 / 1000.0 };
        let rq = |q: f64| {
            if s.reject_hist.is_empty() {
                0.0
            } else {
                s.reject_hist.value_at_quantile(q) as f64 / 1000.0
            }
        };
        let p50 = |h: &Histogram<u64>| if h.is_empty() { 0.0 } else { h.value_at_quantile(0.5) as f64 / 1000.0 };
        ClassSummary {
            class: name.to_string(),
            ok: s.ok(),
            rejected: s.rejected,
            ambivalent: s.ambivalent,
            errors: s.errors,
            throughput: s.ok() as f64 / secs,
            p50_ms: q(0.5),
            p90_ms: q(0.9),
            p99_ms: q(0.99),
            p999_ms: q(0.999),
            max_ms: if s.hist.is_empty() { 0.0 } else { s.hist.max() as f64 / 1000.0 },
            reject_throughput: s.reject_hist.len() as f64 / secs,
            reject_p50_ms: rq(0.5),
            reject_p99_ms: rq(0.99),
            definitive_reject_p50_ms: p50(&s.definitive_hist()),
            ambivalent_reject_p50_ms: p50(&s.ambivalent_hist),
        }
    }
}

/// The result of one run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// Measured time (warm-up excluded).
    pub elapsed_s: f64,
    /// Open-loop arrivals dropped because the outstanding bound was reached.
    pub dropped: u64,
    /// One entry per class that saw operations, then `all`.
    pub classes: Vec<ClassSummary>,
    /// How the client policy committed the run's requests (Nezha: fast path, slow path,
    /// or a replica's `Done`), warm-up included; zeros for policies that do not count.
    pub commits: CommitPaths,
}

/// Requests committed per path, as the client policies count them (`ClientPolicy::counters`
/// in this process, plus the counters of the proxy processes the bench talked to).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CommitPaths {
    pub fast: u64,
    pub slow: u64,
    pub done: u64,
}

impl CommitPaths {
    /// From counters named `fast_commits`, `slow_commits`, `done_commits`.
    pub fn from_counters(c: &std::collections::BTreeMap<String, u64>) -> CommitPaths {
        let get = |k: &str| c.get(k).copied().unwrap_or(0);
        CommitPaths { fast: get("fast_commits"), slow: get("slow_commits"), done: get("done_commits") }
    }
    /// `later - self`, per path.
    pub fn until(self, later: CommitPaths) -> CommitPaths {
        CommitPaths {
            fast: later.fast.saturating_sub(self.fast),
            slow: later.slow.saturating_sub(self.slow),
            done: later.done.saturating_sub(self.done),
        }
    }
    pub fn total(&self) -> u64 {
        self.fast + self.slow + self.done
    }
    /// The share of commits on the fast path, in percent (None without counted commits).
    pub fn fast_pct(&self) -> Option<f64> {
        (self.total() > 0).then(|| 100.0 * self.fast as f64 / self.total() as f64)
    }
}

impl Summary {
    pub fn class(&self, name: &str) -> Option<&ClassSummary> {
        self.classes.iter().find(|c| c.class == name)
    }

    /// The all-classes line.
    pub fn all(&self) -> &ClassSummary {
        self.class("all").expect("summary always has `all`")
    }
}

/// One timeline interval: start time (seconds since the start of measurement) and one entry
/// per class plus `all`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimelineRow {
    pub t_s: f64,
    pub dropped: u64,
    pub classes: Vec<ClassSummary>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_paths_count_the_difference_and_the_fast_share() {
        let counters = |f: u64, s: u64| {
            [("fast_commits".to_string(), f), ("slow_commits".to_string(), s), ("other".to_string(), 7)]
                .into_iter()
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        let before = CommitPaths::from_counters(&counters(10, 5));
        let run = before.until(CommitPaths::from_counters(&counters(100, 15)));
        assert_eq!(run, CommitPaths { fast: 90, slow: 10, done: 0 });
        assert_eq!(run.fast_pct(), Some(90.0));
        assert_eq!(CommitPaths::default().fast_pct(), None, "no counted commits: no ratio");
    }

    #[test]
    fn percentiles_per_class_and_overall() {
        let mut r = Recorder::new(Duration::from_secs(1));
        for i in 1..=1000u64 {
            r.record(OpClass::Read, Duration::from_millis(i), Duration::from_micros(i * 10), Completion::Ok);
        }
        r.record(OpClass::Write, Duration::from_millis(10), Duration::from_millis(50), Completion::Ok);
        r.record(OpClass::Write, Duration::from_millis(10), Duration::from_millis(1), Completion::Rejected);
        r.record(OpClass::Write, Duration::from_millis(11), Duration::from_millis(1), Completion::Ambivalent);
        r.record(OpClass::Write, Duration::from_millis(12), Duration::from_millis(1), Completion::Ambivalent);
        r.record(OpClass::Scan, Duration::from_millis(1500), Duration::from_millis(1), Completion::Error);
        let s = r.summary(Duration::from_secs(2));
        let read = s.class("read").unwrap();
        assert_eq!(read.ok, 1000);
        assert!((read.p50_ms - 5.0).abs() < 0.01, "{read:?}");
        assert!((read.p99_ms - 9.9).abs() < 0.01, "{read:?}");
        assert!((read.max_ms - 10.0).abs() < 0.01);
        assert!((read.throughput - 500.0).abs() < 1e-9);
        let write = s.class("write").unwrap();
        assert_eq!((write.ok, write.rejected, write.ambivalent, write.errors), (1, 1, 2, 0));
        assert_eq!(s.all().ambivalent, 2, "counted apart from definitive rejects");
        assert_eq!(s.class("scan").unwrap().errors, 1);
        assert!(s.class("rmw").is_none(), "classes without operations are left out");
        let all = s.all();
        assert_eq!((all.ok, all.rejected, all.errors), (1001, 1, 1));
        assert!((all.max_ms - 50.0).abs() < 0.1);
        // Rejections have their own latency (1 ms each) and rate; the success latency and
        // goodput do not include them.
        assert!((write.reject_p50_ms - 1.0).abs() < 0.01, "{write:?}");
        assert!((write.reject_throughput - 1.5).abs() < 1e-9, "3 rejects in 2 s: {write:?}");
        assert!((write.p50_ms - 50.0).abs() < 0.1, "{write:?}");
        assert_eq!(read.reject_throughput, 0.0);
        // ... split by kind: the definitive one alone, the two ambivalent ones alone.
        assert!((write.definitive_reject_p50_ms - 1.0).abs() < 0.01, "{write:?}");
        assert!((write.ambivalent_reject_p50_ms - 1.0).abs() < 0.01, "{write:?}");
        assert_eq!((read.definitive_reject_p50_ms, read.ambivalent_reject_p50_ms), (0.0, 0.0));
    }

    #[test]
    fn reject_latency_splits_definitive_from_ambivalent() {
        let mut r = Recorder::new(Duration::from_secs(1));
        let ms = Duration::from_millis;
        for i in 0..10 {
            r.record(OpClass::Write, ms(i), ms(2), Completion::Rejected);
        }
        for i in 0..5 {
            r.record(OpClass::Write, ms(i), ms(7), Completion::Ambivalent);
        }
        let all = r.summary(Duration::from_secs(1)).all().clone();
        assert!((all.reject_p50_ms - 2.0).abs() < 0.01, "both kinds: {all:?}");
        assert!((all.definitive_reject_p50_ms - 2.0).abs() < 0.01, "{all:?}");
        assert!((all.ambivalent_reject_p50_ms - 7.0).abs() < 0.01, "{all:?}");
        let c = &r.classes[OpClass::Write.index()];
        assert_eq!((c.definitive_hist().len(), c.ambivalent_hist.len()), (10, 5));
        // Merged intervals keep the split.
        let w = r.windows(Duration::from_secs(10));
        let all = w[0].classes.last().unwrap();
        assert!((all.ambivalent_reject_p50_ms - 7.0).abs() < 0.01, "{all:?}");
    }

    #[test]
    fn timeline_buckets_by_completion_time() {
        let mut r = Recorder::new(Duration::from_millis(500));
        r.record(OpClass::Read, Duration::from_millis(100), Duration::from_millis(1), Completion::Ok);
        r.record(OpClass::Read, Duration::from_millis(499), Duration::from_millis(3), Completion::Ok);
        r.record(OpClass::Read, Duration::from_millis(1200), Duration::from_millis(2), Completion::Ok);
        r.record_drop(Duration::from_millis(1300));
        r.extend_to(Duration::from_secs(2));
        let rows = r.timeline_rows();
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[0].classes[0].ok, 2);
        assert!((rows[0].classes[0].throughput - 4.0).abs() < 1e-9);
        assert_eq!(rows[1].classes[0].ok, 0, "an interval without completions is a stall, not a gap");
        assert_eq!(rows[2].dropped, 1);
        assert!((rows[2].t_s - 1.0).abs() < 1e-9);
        assert_eq!(r.dropped, 1);
    }

    #[test]
    fn windows_merge_histograms_of_their_intervals() {
        let mut r = Recorder::new(Duration::from_millis(500));
        // Window 0 (0-2 s): 99 fast reads and one 100 ms write; window 1: a stall, then two.
        for i in 0..99u64 {
            r.record(OpClass::Read, Duration::from_millis(i * 20), Duration::from_millis(1), Completion::Ok);
        }
        r.record(OpClass::Write, Duration::from_millis(1900), Duration::from_millis(100), Completion::Ok);
        r.record(OpClass::Read, Duration::from_millis(3600), Duration::from_millis(5), Completion::Ok);
        r.record(OpClass::Read, Duration::from_millis(3700), Duration::from_millis(7), Completion::Error);
        r.extend_to(Duration::from_secs(5));
        let w = r.windows(Duration::from_secs(2));
        assert_eq!(w.len(), 3, "0-2, 2-4, 4-5 s");
        assert_eq!((w[0].t_s, w[1].t_s, w[2].t_s), (0.0, 2.0, 4.0));
        let all = |i: usize| w[i].classes.last().unwrap().clone();
        assert_eq!(all(0).ok, 100);
        assert!((all(0).throughput - 50.0).abs() < 1e-9);
        assert!((all(0).p50_ms - 1.0).abs() < 0.05, "{:?}", all(0));
        assert!((all(0).max_ms - 100.0).abs() < 1.0, "the slow write is in the window's histogram");
        assert_eq!((all(1).ok, all(1).errors), (1, 1));
        assert!((all(1).p99_ms - 5.0).abs() < 0.1);
        // The last window covers 1 s of timeline: its throughput is over that second.
        assert_eq!(all(2).ok, 0);
        assert_eq!(w[0].classes[0].class, "read");
    }
}
