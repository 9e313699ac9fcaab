//! Output files: per run `summary.{json,csv}`, `timeline.{json,csv}`, `timeline.png`,
//! `cdf.png`; per invocation `runs.csv` (every run, every class), `medians.{json,csv}`
//! (per target and sweep point, the median over rounds, with ratios to the first target)
//! and `sweep.png` / `cdf-compare.png`.

use crate::driver::{RunConfig, RunResult};
use crate::plot::{self, CurvePoint, Marker};
use crate::stats::Summary;
use crate::target::TargetSpec;
use crate::workload::{OpClass, WorkloadSpec};
use anyhow::Context as _;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// What a run was, stored next to what it measured.
#[derive(Clone, Debug, Serialize)]
pub struct RunMeta<'a> {
    pub target: &'a TargetSpec,
    pub workload: &'a WorkloadSpec,
    pub config: &'a RunConfig,
    /// Sweep point (`clients=4`), if sweeping.
    pub point: Option<&'a str>,
    /// Round number, from 1.
    pub round: usize,
    pub markers: &'a [Marker],
}

fn write(path: &Path, contents: impl AsRef<[u8]>) -> anyhow::Result<()> {
    std::fs::write(path, contents).with_context(|| format!("writing {}", path.display()))
}

const CLASS_HEADER: &str = "class,ok,rejected,ambivalent,errors,throughput_ops_s,p50_ms,p90_ms,p99_ms,p999_ms,max_ms,\
                            reject_ops_s,reject_p50_ms,reject_p99_ms,definitive_reject_p50_ms,ambivalent_reject_p50_ms";

fn class_csv(c: &crate::stats::ClassSummary) -> String {
    format!(
        "{},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3}",
        c.class,
        c.ok,
        c.rejected,
        c.ambivalent,
        c.errors,
        c.throughput,
        c.p50_ms,
        c.p90_ms,
        c.p99_ms,
        c.p999_ms,
        c.max_ms,
        c.reject_throughput,
        c.reject_p50_ms,
        c.reject_p99_ms,
        c.definitive_reject_p50_ms,
        c.ambivalent_reject_p50_ms
    )
}

/// The commit-path columns (Nezha's fast-commit ratio), after `dropped`.
const COMMITS_HEADER: &str = "fast_commits,slow_commits,done_commits,fast_commit_pct";

fn commits_csv(s: &Summary) -> String {
    let c = s.commits;
    let pct = c.fast_pct().map_or(String::new(), |p| format!("{p:.2}"));
    format!("{},{},{},{pct}", c.fast, c.slow, c.done)
}

/// Write one run's files into `dir` (created if needed).
pub fn write_run(dir: &Path, title: &str, meta: &RunMeta<'_>, result: &RunResult, plots: bool) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    #[derive(Serialize)]
    struct Out<'a> {
        meta: &'a RunMeta<'a>,
        interrupted: bool,
        summary: &'a Summary,
        /// Why operations failed: (reason, count), a few distinct reasons at most.
        error_reasons: &'a [(String, u64)],
    }
    let out =
        Out { meta, interrupted: result.interrupted, summary: &result.summary, error_reasons: &result.error_reasons };
    write(&dir.join("summary.json"), serde_json::to_vec_pretty(&out)?)?;
    let mut csv = format!("{CLASS_HEADER},dropped,{COMMITS_HEADER}\n");
    for c in &result.summary.classes {
        let _ = writeln!(csv, "{},{},{}", class_csv(c), result.summary.dropped, commits_csv(&result.summary));
    }
    write(&dir.join("summary.csv"), csv)?;

    let rows = result.recorder.timeline_rows();
    write(&dir.join("timeline.json"), serde_json::to_vec_pretty(&rows)?)?;
    let mut csv = format!("t_s,{CLASS_HEADER},dropped\n");
    for r in &rows {
        for c in &r.classes {
            let _ = writeln!(csv, "{:.3},{},{}", r.t_s, class_csv(c), r.dropped);
        }
    }
    write(&dir.join("timeline.csv"), csv)?;
    let overall = result.recorder.overall();
    if !overall.reject_hist.is_empty() {
        write(&dir.join("reject_hist.csv"), reject_hist_csv(&overall))?;
    }

    if plots {
        plot::timeline(&dir.join("timeline.png"), title, &rows, meta.markers)?;
        let hists: Vec<(String, &hdrhistogram::Histogram<u64>)> = OpClass::ALL
            .iter()
            .map(|c| (c.name().to_string(), &result.recorder.classes[c.index()].hist))
            .filter(|(_, h)| !h.is_empty())
            .collect();
        plot::cdf(&dir.join("cdf.png"), &format!("{title}: latency CDF"), &hists)?;
    }
    Ok(())
}

/// Width of the buckets of `reject_hist.csv`, and where its last (open) bucket starts.
const REJECT_BUCKET_US: u64 = 500;
const REJECT_BUCKETS_TO_US: u64 = 30_000;

/// `reject_hist.csv`: how many rejects (all classes) took how long, definitive and
/// ambivalent apart, in 0.5 ms buckets up to 30 ms and one bucket above (`from_ms,to_ms,
/// definitive,ambivalent`; the last row's `to_ms` is empty).
pub fn reject_hist_csv(c: &crate::stats::ClassStats) -> String {
    let (definitive, ambivalent) = (c.definitive_hist(), &c.ambivalent_hist);
    let count = |h: &hdrhistogram::Histogram<u64>, lo: u64, hi: Option<u64>| -> u64 {
        h.iter_recorded()
            .filter(|v| {
                let at = h.median_equivalent(v.value_iterated_to());
                at >= lo && hi.is_none_or(|hi| at < hi)
            })
            .map(|v| v.count_at_value())
            .sum()
    };
    let mut csv = String::from("from_ms,to_ms,definitive,ambivalent\n");
    let mut lo = 0;
    while lo < REJECT_BUCKETS_TO_US {
        let hi = lo + REJECT_BUCKET_US;
        let (d, a) = (count(&definitive, lo, Some(hi)), count(ambivalent, lo, Some(hi)));
        let _ = writeln!(csv, "{:.1},{:.1},{d},{a}", lo as f64 / 1e3, hi as f64 / 1e3);
        lo = hi;
    }
    let (d, a) = (count(&definitive, lo, None), count(ambivalent, lo, None));
    let _ = writeln!(csv, "{:.1},,{d},{a}", lo as f64 / 1e3);
    csv
}

/// One finished run, for the per-invocation files.
#[derive(Clone, Debug, Serialize)]
pub struct RunRecord {
    pub target: String,
    pub point: Option<String>,
    pub round: usize,
    pub summary: Summary,
}

/// `runs.csv`: every run, every class.
pub fn runs_csv(runs: &[RunRecord]) -> String {
    let mut csv = format!("target,point,round,elapsed_s,{CLASS_HEADER},dropped,{COMMITS_HEADER}\n");
    for r in runs {
        for c in &r.summary.classes {
            let _ = writeln!(
                csv,
                "{},{},{},{:.3},{},{},{}",
                r.target,
                r.point.as_deref().unwrap_or(""),
                r.round,
                r.summary.elapsed_s,
                class_csv(c),
                r.summary.dropped,
                commits_csv(&r.summary)
            );
        }
    }
    csv
}

/// Median over rounds of one target at one sweep point (all classes merged).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MedianRow {
    pub point: Option<String>,
    pub target: String,
    pub rounds: usize,
    pub throughput: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub errors: u64,
    /// This target's median throughput / the first target's (at the same point).
    pub throughput_ratio: f64,
    /// This target's median p99 / the first target's.
    pub p99_ratio: f64,
}

fn median(mut xs: Vec<f64>) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// Medians per (point, target) in the order they first appear; ratios relative to the first
/// target of each point.
pub fn medians(runs: &[RunRecord]) -> Vec<MedianRow> {
    let mut keys: Vec<(Option<String>, String)> = Vec::new();
    for r in runs {
        let k = (r.point.clone(), r.target.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut rows: Vec<MedianRow> = keys
        .into_iter()
        .map(|(point, target)| {
            let mine: Vec<&RunRecord> = runs.iter().filter(|r| r.point == point && r.target == target).collect();
            let m = |f: &dyn Fn(&RunRecord) -> f64| median(mine.iter().map(|r| f(r)).collect());
            MedianRow {
                rounds: mine.len(),
                throughput: m(&|r| r.summary.all().throughput),
                p50_ms: m(&|r| r.summary.all().p50_ms),
                p99_ms: m(&|r| r.summary.all().p99_ms),
                p999_ms: m(&|r| r.summary.all().p999_ms),
                errors: mine.iter().map(|r| r.summary.all().errors).sum(),
                point,
                target,
                throughput_ratio: 1.0,
                p99_ratio: 1.0,
            }
        })
        .collect();
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    for i in 0..rows.len() {
        if let Some(base) = rows.iter().find(|b| b.point == rows[i].point).cloned() {
            rows[i].throughput_ratio = ratio(rows[i].throughput, base.throughput);
            rows[i].p99_ratio = ratio(rows[i].p99_ms, base.p99_ms);
        }
    }
    rows
}

/// The medians as an aligned text table (printed at the end of a comparison or sweep).
pub fn medians_table(rows: &[MedianRow]) -> String {
    let mut s = format!(
        "{:<16} {:<14} {:>6} {:>12} {:>9} {:>9} {:>9} {:>8} {:>9} {:>9}\n",
        "point", "target", "rounds", "ops/s", "p50 ms", "p99 ms", "p99.9 ms", "errors", "x tput", "x p99"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{:<16} {:<14} {:>6} {:>12.0} {:>9.3} {:>9.3} {:>9.3} {:>8} {:>9.2} {:>9.2}",
            r.point.as_deref().unwrap_or("-"),
            r.target,
            r.rounds,
            r.throughput,
            r.p50_ms,
            r.p99_ms,
            r.p999_ms,
            r.errors,
            r.throughput_ratio,
            r.p99_ratio
        );
    }
    s
}

/// Write `runs.csv`, `medians.{json,csv}` and, for sweeps, `sweep.png` into `dir`.
pub fn write_invocation(dir: &Path, title: &str, runs: &[RunRecord], plots: bool) -> anyhow::Result<Vec<MedianRow>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    write(&dir.join("runs.csv"), runs_csv(runs))?;
    let rows = medians(runs);
    write(&dir.join("medians.json"), serde_json::to_vec_pretty(&rows)?)?;
    let mut csv =
        String::from("point,target,rounds,throughput_ops_s,p50_ms,p99_ms,p999_ms,errors,throughput_ratio,p99_ratio\n");
    for r in &rows {
        let _ = writeln!(
            csv,
            "{},{},{},{:.3},{:.3},{:.3},{:.3},{},{:.4},{:.4}",
            r.point.as_deref().unwrap_or(""),
            r.target,
            r.rounds,
            r.throughput,
            r.p50_ms,
            r.p99_ms,
            r.p999_ms,
            r.errors,
            r.throughput_ratio,
            r.p99_ratio
        );
    }
    write(&dir.join("medians.csv"), csv)?;
    if plots && rows.iter().any(|r| r.point.is_some()) {
        let mut series: Vec<(String, Vec<CurvePoint>)> = Vec::new();
        for r in &rows {
            let p = CurvePoint {
                label: r.point.clone().unwrap_or_default(),
                throughput: r.throughput,
                p50_ms: r.p50_ms,
                p99_ms: r.p99_ms,
            };
            match series.iter_mut().find(|s| s.0 == r.target) {
                Some(s) => s.1.push(p),
                None => series.push((r.target.clone(), vec![p])),
            }
        }
        plot::sweep(&dir.join("sweep.png"), &format!("{title}: throughput vs latency"), &series)?;
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::ClassSummary;

    fn run(target: &str, point: Option<&str>, round: usize, tput: f64, p99: f64) -> RunRecord {
        let c = ClassSummary {
            class: "all".into(),
            ok: 10,
            rejected: 0,
            ambivalent: 0,
            errors: 1,
            throughput: tput,
            p50_ms: p99 / 2.0,
            p90_ms: p99,
            p99_ms: p99,
            p999_ms: p99,
            max_ms: p99,
            reject_throughput: 0.0,
            reject_p50_ms: 0.0,
            reject_p99_ms: 0.0,
            definitive_reject_p50_ms: 0.0,
            ambivalent_reject_p50_ms: 0.0,
        };
        RunRecord {
            target: target.into(),
            point: point.map(String::from),
            round,
            summary: Summary { elapsed_s: 1.0, dropped: 0, classes: vec![c], commits: Default::default() },
        }
    }

    #[test]
    fn reject_histogram_splits_definitive_from_ambivalent() {
        use crate::stats::{Completion, Recorder};
        use std::time::Duration;
        let mut r = Recorder::new(Duration::from_secs(1));
        let us = Duration::from_micros;
        for (lat, kind, times) in [
            (us(1_200), Completion::Rejected, 3),
            (us(6_100), Completion::Ambivalent, 2),
            (us(900), Completion::Ambivalent, 1),
            (us(45_000), Completion::Rejected, 1),
            (us(800), Completion::Ok, 5),
        ] {
            for _ in 0..times {
                r.record(OpClass::Write, Duration::ZERO, lat, kind);
            }
        }
        let csv = reject_hist_csv(&r.overall());
        let rows: Vec<&str> = csv.lines().collect();
        assert_eq!(rows[0], "from_ms,to_ms,definitive,ambivalent");
        assert_eq!(rows.len(), 1 + 60 + 1, "0.5 ms buckets to 30 ms, one open bucket");
        assert_eq!(rows[2], "0.5,1.0,0,1");
        assert_eq!(rows[3], "1.0,1.5,3,0");
        assert_eq!(rows[13], "6.0,6.5,0,2");
        assert_eq!(rows[61], "30.0,,1,0");
        let total: u64 =
            rows[1..].iter().map(|l| l.rsplit(',').take(2).map(|n| n.parse::<u64>().unwrap()).sum::<u64>()).sum();
        assert_eq!(total, 7, "every reject in one bucket, successes in none");
    }

    #[test]
    fn medians_and_ratios_per_point_and_target() {
        let runs = vec![
            run("synod", None, 1, 100.0, 2.0),
            run("redis", None, 1, 400.0, 1.0),
            run("synod", None, 2, 300.0, 4.0),
            run("redis", None, 2, 500.0, 1.0),
            run("synod", None, 3, 200.0, 3.0),
            run("redis", None, 3, 450.0, 0.5),
        ];
        let rows = medians(&runs);
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].target.as_str(), rows[0].rounds), ("synod", 3));
        assert_eq!(rows[0].throughput, 200.0);
        assert_eq!(rows[0].p99_ms, 3.0);
        assert_eq!(rows[0].errors, 3);
        assert_eq!(rows[1].throughput, 450.0);
        assert!((rows[1].throughput_ratio - 2.25).abs() < 1e-9);
        assert!((rows[1].p99_ratio - 1.0 / 3.0).abs() < 1e-9);
        let table = medians_table(&rows);
        assert!(table.contains("synod") && table.contains("2.25"), "{table}");
    }

    #[test]
    fn sweep_files_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let runs = vec![
            run("redis", Some("clients=1"), 1, 100.0, 0.2),
            run("redis", Some("clients=2"), 1, 190.0, 0.3),
            run("redis", Some("clients=4"), 1, 350.0, 0.6),
        ];
        let rows = write_invocation(dir.path(), "test", &runs, true).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[2].point.as_deref(), Some("clients=4"));
        let csv = std::fs::read_to_string(dir.path().join("runs.csv")).unwrap();
        assert_eq!(csv.lines().count(), 4);
        assert!(csv.lines().nth(1).unwrap().starts_with("redis,clients=1,1,"));
        let png = std::fs::read(dir.path().join("sweep.png")).unwrap();
        assert_eq!(&png[1..4], b"PNG");
    }
}
