//! The outputs of a scenario: per variant the bench's files plus `events.csv/json`,
//! `memory.csv/json`, `windows.csv`, the plots and `summary.txt` (with the dip analysis of
//! [`super::analysis`]); for the whole scenario `normalized.csv`, `normalized.png`,
//! `windows.png` and the combined `summary.txt`.

use super::analysis::{analyze, detector_counters, leader_changes, offered, params_changed, windows, Event, WindowRow};
use super::spec::Scenario;
use super::variant::Variant;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;
use synod_bench::driver::{RunConfig, RunResult};
use synod_bench::plot::{self, Marker, Panel};
use synod_bench::report::{self, RunMeta};
use synod_bench::resources::{self, ResourceSample};
use synod_bench::stats::TimelineRow;
use synod_bench::target::TargetSpec;
use synod_bench::workload::WorkloadSpec;
use synod_core::NodeId;

/// What one variant's run produced, for the combined outputs.
pub(super) struct RunOutcome {
    /// The variant's label.
    pub label: String,
    /// Its tumbling windows (empty for a sweep).
    pub windows: Vec<WindowRow>,
    /// Its part of the combined summary.
    pub summary: String,
}

/// What one variant's measured run produced, for [`write_variant`].
pub(super) struct Measured {
    /// Title of the run's plots.
    pub title: String,
    /// The cluster as a bench target.
    pub target: TargetSpec,
    /// The workload as run.
    pub spec: WorkloadSpec,
    /// The driver settings of the measured run.
    pub cfg: RunConfig,
    /// The measured run: recorder, summary, elapsed time.
    pub result: RunResult,
    /// The schedule's steps as they happened.
    pub events: Vec<Event>,
    /// Every replica's memory and metrics over time.
    pub samples: Vec<ResourceSample>,
    /// (s since the start of measurement, offered ops/s) changes.
    pub rate_log: Vec<(f64, f64)>,
    /// The calibrated maximum throughput, if the run was calibrated.
    pub calibrated: Option<f64>,
    /// The initial open-loop rate (None: closed loop).
    pub initial: Option<f64>,
    /// Each replica's `/status` before measurement.
    pub before: Vec<(NodeId, Value)>,
    /// Each replica's `/status` after measurement.
    pub after: Vec<(NodeId, Value)>,
}

/// The combined outputs of all variants (`normalized.csv`, `normalized.png`, `windows.png`,
/// `summary.txt`); returns the summary text.
pub(super) fn write_combined(s: &Scenario, outcomes: &[RunOutcome]) -> anyhow::Result<String> {
    let mut text = format!("scenario {}", s.name);
    if let Some(d) = &s.description {
        let _ = write!(text, ": {d}");
    }
    let _ = writeln!(text, "\nmeasured {:.0} s, {} replicas\n", s.duration.as_secs_f64(), s.replicas);
    for o in outcomes {
        text.push_str(&o.summary);
        text.push('\n');
    }
    if !outcomes.is_empty() && s.bench.sweep.is_none() {
        let mut csv = String::from(
            "protocol,window_start_s,window_end_s,throughput_ops_s,normalized,p50_ms,p99_ms,offered_ops_s,max_rss_mb,\
             leader_max_rss_mb\n",
        );
        let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.1}"));
        for o in outcomes {
            for w in &o.windows {
                let _ = writeln!(
                    csv,
                    "{},{:.1},{:.1},{:.1},{:.4},{:.3},{:.3},{},{},{}",
                    o.label,
                    w.start_s,
                    w.end_s,
                    w.throughput,
                    w.normalized,
                    w.p50_ms,
                    w.p99_ms,
                    opt(w.offered),
                    opt(w.resources.max_rss_mb),
                    opt(w.resources.leader_max_rss_mb)
                );
            }
        }
        std::fs::write(s.out.join("normalized.csv"), csv)?;
        let mid = |w: &WindowRow| (w.start_s + w.end_s) / 2.0;
        let series = |f: &dyn Fn(&WindowRow) -> Option<f64>| -> Vec<(String, Vec<(f64, f64)>)> {
            outcomes
                .iter()
                .map(|o| (o.label.clone(), o.windows.iter().filter_map(|w| Some((mid(w), f(w)?))).collect()))
                .collect()
        };
        let markers = s.markers();
        let title = format!("{}: {:.0} s windows", s.name, s.window.as_secs_f64());
        if !s.bench.no_plots {
            plot::series_over_time(
                &s.out.join("normalized.png"),
                &format!("{title}, throughput normalized to each protocol's best"),
                "normalized throughput",
                &series(&|w| Some(w.normalized)),
                &markers,
            )?;
            let panels = vec![
                Panel {
                    y_desc: "normalized throughput".into(),
                    series: series(&|w| Some(w.normalized)),
                    log: false,
                    points: true,
                },
                Panel {
                    y_desc: "p99 latency (ms, log)".into(),
                    series: series(&|w| (w.p99_ms > 0.0).then_some(w.p99_ms)),
                    log: true,
                    points: true,
                },
                Panel {
                    y_desc: "max replica RSS (MB)".into(),
                    series: series(&|w| w.resources.max_rss_mb),
                    log: false,
                    points: true,
                },
            ];
            plot::panels_over_time(&s.out.join("windows.png"), &title, &panels, &markers)?;
        }
    }
    std::fs::write(s.out.join("summary.txt"), &text)?;
    Ok(text)
}

/// One variant's files and summary, from what its run measured.
pub(super) fn write_variant(s: &Scenario, v: &Variant, dir: &Path, m: Measured) -> anyhow::Result<RunOutcome> {
    let Measured { title, target, spec, cfg, result, events, samples, rate_log, calibrated, initial, before, after } =
        m;
    let label = v.label.as_str();
    let markers: Vec<Marker> = events
        .iter()
        .filter(|e| e.marker)
        .map(|e| Marker { t_s: e.t_s, label: if e.ok { e.action.clone() } else { format!("{} (failed)", e.action) } })
        .collect();
    let meta = RunMeta { target: &target, workload: &spec, config: &cfg, point: None, round: 1, markers: &markers };
    report::write_run(dir, &title, &meta, &result, !s.bench.no_plots)?;
    let mut csv = String::from("at_s,t_s,action,ok,detail\n");
    for e in &events {
        let _ = writeln!(
            csv,
            "{:.3},{:.3},{},{},\"{}\"",
            e.at_s,
            e.t_s,
            e.action,
            e.ok,
            e.detail.join(" | ").replace('"', "'")
        );
    }
    std::fs::write(dir.join("events.csv"), csv)?;
    std::fs::write(dir.join("events.json"), serde_json::to_vec_pretty(&events)?)?;
    std::fs::write(dir.join("memory.csv"), resources::samples_csv(&samples))?;
    std::fs::write(dir.join("memory.json"), serde_json::to_vec_pretty(&samples)?)?;

    let w = s.window.as_secs_f64();
    let wrows = result.recorder.windows(s.window);
    let res = resources::windows(&samples, w, wrows.len());
    let end = result.elapsed.as_secs_f64();
    let windows: Vec<WindowRow> = windows(&wrows)
        .into_iter()
        .zip(wrows.iter())
        .zip(res)
        .map(|(((start, tput, norm), row), resources)| {
            let all = row.classes.last().expect("all class");
            let stop = (start + w).min(end.max(start));
            WindowRow {
                start_s: start,
                end_s: start + w,
                throughput: tput,
                normalized: norm,
                p50_ms: all.p50_ms,
                p99_ms: all.p99_ms,
                offered: offered(&rate_log, start, stop),
                resources,
            }
        })
        .collect();
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.1}"));
    let mut wcsv = String::from(
        "window_start_s,window_end_s,throughput_ops_s,normalized,p50_ms,p99_ms,offered_ops_s,max_rss_mb,max_rss_node,\
         leader_max_rss_mb,max_log_entries\n",
    );
    for r in &windows {
        let _ = writeln!(
            wcsv,
            "{:.1},{:.1},{:.1},{:.4},{:.3},{:.3},{},{},{},{},{}",
            r.start_s,
            r.end_s,
            r.throughput,
            r.normalized,
            r.p50_ms,
            r.p99_ms,
            opt(r.offered),
            opt(r.resources.max_rss_mb),
            r.resources.max_rss_node.map_or(String::new(), |n| n.to_string()),
            opt(r.resources.leader_max_rss_mb),
            r.resources.max_log_entries.map_or(String::new(), |n| format!("{n:.0}"))
        );
    }
    std::fs::write(dir.join("windows.csv"), wcsv)?;
    let rows = result.recorder.timeline_rows();
    if !s.bench.no_plots {
        plot_run(dir, &title, &rows, &windows, &samples, &rate_log, &markers, s.window.as_secs_f64())?;
    }

    let all = result.summary.all();
    let mut summary = format!(
        "{label}: {:.0} ops/s over {:.1} s, p50 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms, max {:.1} ms; \
         {} ok, {} rejected, {} ambivalent, {} errors{}\n",
        all.throughput,
        result.elapsed.as_secs_f64(),
        all.p50_ms,
        all.p99_ms,
        all.p999_ms,
        all.max_ms,
        all.ok,
        all.rejected,
        all.ambivalent,
        all.errors,
        if result.interrupted { " (interrupted)" } else { "" }
    );
    let changed = params_changed(&v.params);
    if !changed.is_empty() {
        let _ = writeln!(summary, "  protocol {} with {}", v.protocol, changed.join(", "));
    }
    if let Some(m) = calibrated {
        let _ = writeln!(
            summary,
            "  calibrated maximum: {m:.0} ops/s ({:?} closed loop, {} clients); offered {}",
            s.load.calibrate.unwrap_or_default(),
            s.load.calibrate_clients,
            rate_log.iter().map(|(t, r)| format!("{r:.0} ops/s from {t:.0} s")).collect::<Vec<_>>().join(", ")
        );
    } else if let Some(r) = initial {
        let _ = writeln!(summary, "  open loop at {r:.0} ops/s");
    }
    if result.summary.dropped > 0 {
        let _ = writeln!(summary, "  {} arrivals dropped (over max_outstanding)", result.summary.dropped);
    }
    let changes = leader_changes(&samples, s.sample);
    if !changes.is_empty() {
        let shown: Vec<String> = changes.iter().take(12).map(|(t, n)| format!("n{n} from {t:.1} s")).collect();
        let more =
            if changes.len() > 12 { format!(", ... ({} changes in all)", changes.len() - 1) } else { String::new() };
        let _ = writeln!(summary, "  leader: {}{more}", shown.join(", "));
    }
    if let (Some((m0, e0)), Some((m1, e1))) = (detector_counters(&before), detector_counters(&after)) {
        let _ = writeln!(
            summary,
            "  slowdown detector during measurement: {} overload marker(s) executed, {} election(s) triggered",
            m1.saturating_sub(m0),
            e1.saturating_sub(e0)
        );
    }
    if let Some(peak) = samples.iter().max_by(|a, b| a.rss_mb.total_cmp(&b.rss_mb)) {
        let _ = writeln!(
            summary,
            "  memory: peak RSS {:.1} MB (node {} at {:.1} s), {} samples every {:?} in memory.csv",
            peak.rss_mb,
            peak.node,
            peak.t_s,
            samples.len(),
            s.sample
        );
    }
    // Rate steps are not faults: what was served at each offered rate, instead of a dip.
    let is_rate = |e: &Event| e.action.starts_with("rate ");
    let mut steps: Vec<(f64, String)> = vec![(0.0, "start".to_string())];
    steps.extend(events.iter().filter(|e| is_rate(e)).map(|e| (e.t_s, e.action.clone())));
    if steps.len() > 1 {
        for (i, (t, what)) in steps.iter().enumerate() {
            let next = steps.get(i + 1).map_or(f64::INFINITY, |n| n.0);
            let span: Vec<&TimelineRow> = rows.iter().filter(|r| r.t_s + 1e-9 >= *t && r.t_s < next).collect();
            let served = span.iter().filter_map(|r| r.classes.last()).map(|c| c.throughput).sum::<f64>()
                / span.len().max(1) as f64;
            let p99 = span.iter().filter_map(|r| r.classes.last()).map(|c| c.p99_ms).fold(0.0, f64::max);
            let _ = writeln!(
                summary,
                "  t={t:.1} s {what}: offered {}, served {served:.0} ops/s (mean of {} intervals), worst interval p99 \
                 {p99:.1} ms",
                offered(&rate_log, *t, next.min(end)).map_or("-".into(), |o| format!("{o:.0} ops/s")),
                span.len()
            );
        }
    }
    let marked: Vec<Event> = events.iter().filter(|e| e.marker && !is_rate(e)).cloned().collect();
    summary.push_str(&analyze(&rows, &marked));
    let failed: Vec<&Event> = events.iter().filter(|e| !e.ok && !e.marker).collect();
    for e in failed {
        let _ = writeln!(summary, "  t={:.1} s {} FAILED: {}", e.t_s, e.action, e.detail.join(" | "));
    }
    let _ = writeln!(summary, "files: {}", dir.display());
    std::fs::write(dir.join("summary.txt"), &summary)?;
    Ok(RunOutcome { label: label.to_string(), windows, summary })
}

/// `latency.png` (p50/p99 per interval and per window, throughput and offered rate) and
/// `memory.png` (RSS and log length per replica) of one run.
#[allow(clippy::too_many_arguments)]
fn plot_run(
    dir: &Path,
    title: &str,
    rows: &[TimelineRow],
    windows: &[WindowRow],
    samples: &[ResourceSample],
    rate_log: &[(f64, f64)],
    markers: &[Marker],
    window_s: f64,
) -> anyhow::Result<()> {
    let interval = rows.get(1).map_or(1.0, |r| r.t_s - rows[0].t_s).max(1e-9);
    let per_interval = |f: &dyn Fn(&synod_bench::stats::ClassSummary) -> f64, skip_empty: bool| -> Vec<(f64, f64)> {
        rows.iter()
            .filter_map(|r| {
                let a = r.classes.last()?;
                (!skip_empty || a.ok > 0).then(|| (r.t_s + interval / 2.0, f(a)))
            })
            .collect()
    };
    let mid = |w: &WindowRow| (w.start_s + w.end_s) / 2.0;
    let lat = Panel {
        y_desc: "latency (ms, log)".into(),
        series: vec![
            (format!("p99 per {interval} s"), per_interval(&|a| a.p99_ms, true)),
            (format!("p50 per {interval} s"), per_interval(&|a| a.p50_ms, true)),
            (format!("p99 per {window_s} s window"), windows.iter().map(|w| (mid(w), w.p99_ms)).collect()),
            (format!("p50 per {window_s} s window"), windows.iter().map(|w| (mid(w), w.p50_ms)).collect()),
        ],
        log: true,
        points: true,
    };
    let end = rows.len() as f64 * interval;
    let mut offered_pts = Vec::new();
    for (i, &(t, r)) in rate_log.iter().enumerate() {
        let next = rate_log.get(i + 1).map_or(end, |n| n.0);
        offered_pts.push((t, r));
        offered_pts.push((next, r));
    }
    let mut tput = vec![(format!("throughput per {interval} s"), per_interval(&|a| a.throughput, false))];
    if !offered_pts.is_empty() {
        tput.push(("offered rate".into(), offered_pts));
    }
    let tput = Panel { y_desc: "ops/s".into(), series: tput, log: false, points: false };
    plot::panels_over_time(&dir.join("latency.png"), &format!("{title}: latency"), &[lat, tput], markers)?;

    let mut nodes: Vec<NodeId> = samples.iter().map(|s| s.node).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let per_node = |f: &dyn Fn(&ResourceSample) -> Option<f64>| -> Vec<(String, Vec<(f64, f64)>)> {
        nodes
            .iter()
            .map(|&n| {
                let pts = samples.iter().filter(|s| s.node == n).filter_map(|s| Some((s.t_s, f(s)?))).collect();
                (format!("n{n}"), pts)
            })
            .collect()
    };
    let panels = [
        Panel { y_desc: "RSS (MB)".into(), series: per_node(&|s| Some(s.rss_mb)), log: false, points: false },
        Panel { y_desc: "log entries".into(), series: per_node(&|s| s.log_entries), log: false, points: false },
    ];
    plot::panels_over_time(&dir.join("memory.png"), &format!("{title}: replica memory"), &panels, markers)
}
