//! The analysis of a measured run: pure functions on the timeline, the resource samples and
//! the events (tumbling windows, the dip and recovery after each fault, leader changes, the
//! offered rate over time, the slowdown detector's counters).

use serde_json::Value;
use std::fmt::Write as _;
use std::time::Duration;
use synod_bench::resources::{ResourceSample, ResourceWindow};
use synod_bench::stats::TimelineRow;
use synod_core::{NodeId, ProtocolParams};

/// A step as it happened.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Event {
    /// Planned time (s since the start of measurement).
    pub at_s: f64,
    /// When it was applied (s since the start of measurement).
    pub t_s: f64,
    /// The step as written (normalized whitespace; ramps described).
    pub action: String,
    /// Whether it was applied.
    pub ok: bool,
    /// What was done, one line per step (or why it failed).
    pub detail: Vec<String>,
    /// Drawn on the plots (a ramp's later steps are not).
    pub marker: bool,
}

/// One tumbling window of one run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct WindowRow {
    /// Window start (s since the start of measurement).
    pub start_s: f64,
    /// Window end (s since the start of measurement).
    pub end_s: f64,
    /// Completed operations per second in the window.
    pub throughput: f64,
    /// Throughput / the run's best window.
    pub normalized: f64,
    /// Median latency in the window.
    pub p50_ms: f64,
    /// 99th percentile latency in the window.
    pub p99_ms: f64,
    /// Time-weighted open-loop rate offered in the window (None: closed loop).
    pub offered: Option<f64>,
    /// Replica memory and log length in the window.
    pub resources: ResourceWindow,
}

/// The HoliPaxos slowdown-detector counters (overload markers executed, elections they
/// triggered) summed over the replicas that report them.
pub(super) fn detector_counters(st: &[(NodeId, Value)]) -> Option<(u64, u64)> {
    let get = |v: &Value, k: &str| v["extra"][k].as_str().and_then(|s| s.parse::<u64>().ok());
    let markers: Vec<u64> = st.iter().filter_map(|(_, v)| get(v, "overload_markers")).collect();
    if markers.is_empty() {
        return None;
    }
    // Every replica executes every marker: the most any replica saw is the count.
    let elections = st.iter().filter_map(|(_, v)| get(v, "marker_elections")).sum();
    Some((markers.into_iter().max().unwrap_or(0), elections))
}

/// Leader changes seen by the sampler: (time, new leader) whenever the leader changes,
/// where a sampling tick (`every`) counts only if exactly one replica reports the leader role
/// in it (while an old leader has not yet noticed it was replaced, two claim it: ambiguous).
pub fn leader_changes(samples: &[ResourceSample], every: Duration) -> Vec<(f64, NodeId)> {
    let every = every.as_secs_f64().max(1e-3);
    let mut ticks: std::collections::BTreeMap<i64, Vec<(f64, NodeId)>> = Default::default();
    for s in samples.iter().filter(|s| s.leader == Some(true)) {
        ticks.entry((s.t_s / every).round() as i64).or_default().push((s.t_s, s.node));
    }
    let mut out: Vec<(f64, NodeId)> = Vec::new();
    for claims in ticks.values() {
        let [(t, n)] = claims.as_slice() else { continue };
        if out.last().is_none_or(|l| l.1 != *n) {
            out.push((*t, *n));
        }
    }
    out
}

/// The parameters that differ from the defaults, as `key=value` (options as `trim=quorum`).
pub fn params_changed(p: &ProtocolParams) -> Vec<String> {
    let (Ok(serde_json::Value::Object(mine)), Ok(serde_json::Value::Object(default))) =
        (serde_json::to_value(p), serde_json::to_value(ProtocolParams::default()))
    else {
        return Vec::new();
    };
    let mut out: Vec<String> = mine
        .iter()
        .filter(|(k, v)| *k != "options" && default.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    out.extend(p.options.iter().map(|(k, v)| format!("{k}={v}")));
    out
}

/// Time-weighted mean of the offered rate over [start, end), from `(since, rate)` changes.
pub fn offered(log: &[(f64, f64)], start: f64, end: f64) -> Option<f64> {
    if log.is_empty() || end <= start {
        return log.first().map(|_| log.iter().rev().find(|(t, _)| *t <= start).map_or(log[0].1, |l| l.1));
    }
    let mut total = 0.0;
    for (i, &(t, r)) in log.iter().enumerate() {
        let next = log.get(i + 1).map_or(f64::INFINITY, |n| n.0);
        let (a, b) = (t.max(start), next.min(end));
        if b > a {
            total += r * (b - a);
        }
    }
    Some(total / (end - start))
}

/// Throughput per window and normalized to the best window: (window start, ops/s,
/// normalized), from [`synod_bench::stats::Recorder::windows`].
pub fn windows(rows: &[TimelineRow]) -> Vec<(f64, f64, f64)> {
    let mut out: Vec<(f64, f64, f64)> =
        rows.iter().map(|r| (r.t_s, r.classes.last().map_or(0.0, |c| c.throughput), 0.0)).collect();
    let best = out.iter().map(|w| w.1).fold(0.0, f64::max);
    for w in &mut out {
        w.2 = if best > 0.0 { w.1 / best } else { 0.0 };
    }
    out
}

/// Per fault: throughput before, the dip, intervals without a completed operation, and when
/// throughput was back to 90% of the pre-fault baseline.
pub fn analyze(rows: &[TimelineRow], events: &[Event]) -> String {
    let mut out = String::new();
    let tput = |r: &TimelineRow| r.classes.last().map_or(0.0, |c| c.throughput);
    let interval = rows.get(1).map_or(1.0, |r| r.t_s - rows[0].t_s).max(1e-9);
    let first = events.first().map_or(f64::INFINITY, |e| e.t_s);
    // Baseline: median of the whole intervals before the first fault (the first interval is
    // left out when there are others: it may include connection ramp-up).
    let mut before: Vec<f64> =
        rows.iter().filter(|r| r.t_s + interval <= first).skip(1).map(tput).collect::<Vec<f64>>();
    if before.is_empty() {
        before = rows.iter().filter(|r| r.t_s + interval <= first).map(tput).collect();
    }
    before.sort_by(f64::total_cmp);
    let Some(&baseline) = before.get(before.len() / 2) else {
        if !events.is_empty() {
            out.push_str("  (no whole interval before the first fault: no baseline for the dip analysis)\n");
        }
        return out;
    };
    let _ = writeln!(out, "  baseline before the first fault: {baseline:.0} ops/s (median of {interval} s intervals)");
    for (i, e) in events.iter().enumerate() {
        let next = events.get(i + 1).map_or(f64::INFINITY, |n| n.t_s);
        // Intervals overlapping [fault, next fault).
        let span: Vec<&TimelineRow> = rows.iter().filter(|r| r.t_s + interval > e.t_s && r.t_s < next).collect();
        let dip = span.iter().map(|r| tput(r)).fold(f64::INFINITY, f64::min);
        let zero = span.iter().filter(|r| r.classes.last().is_some_and(|c| c.ok == 0)).count();
        let p99 = span.iter().map(|r| r.classes.last().map_or(0.0, |c| c.p99_ms)).fold(0.0, f64::max);
        let dip_at = span.iter().position(|r| tput(r) < 0.9 * baseline);
        let recovered = dip_at.and_then(|d| span[d..].iter().find(|r| tput(r) >= 0.9 * baseline));
        let recovery = match (dip_at, recovered) {
            (None, _) => "throughput stayed above 90% of baseline".to_string(),
            (Some(_), Some(r)) => format!(
                "back to >= 90% of baseline in the interval starting at {:.0} s ({:.1} s after the fault)",
                r.t_s,
                (r.t_s + interval - e.t_s).max(0.0)
            ),
            (Some(_), None) => "not back to 90% of baseline before the next fault / the end".to_string(),
        };
        let _ = writeln!(
            out,
            "  t={:.1} s {}{}: lowest interval {:.0} ops/s ({:.0}% of baseline), {} interval(s) with no completed \
             operation, worst p99 {:.1} ms; {}",
            e.t_s,
            e.action,
            if e.ok { "" } else { " (FAILED)" },
            if dip.is_finite() { dip } else { 0.0 },
            if dip.is_finite() && baseline > 0.0 { 100.0 * dip / baseline } else { 0.0 },
            zero,
            p99,
            recovery
        );
        if let Some(d) = e.detail.first() {
            let _ = writeln!(out, "      {d}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offered_rate_and_leader_changes() {
        let log = [(0.0, 100.0), (5.0, 300.0)];
        assert_eq!(offered(&log, 0.0, 10.0), Some(200.0));
        assert_eq!(offered(&log, 5.0, 10.0), Some(300.0));
        assert_eq!(offered(&[], 0.0, 10.0), None);
        let sample = |t_s: f64, node: NodeId, leader: bool| ResourceSample {
            t_s,
            node,
            pid: 1,
            rss_mb: 1.0,
            log_entries: None,
            snapshots: None,
            snapshot_bytes: None,
            state_machine_bytes: None,
            leader: Some(leader),
        };
        let samples = [
            sample(0.0, 1, true),
            sample(0.01, 2, false),
            sample(0.5, 1, true),
            // Both claim it at 1.0 s (the old leader has not noticed yet): not counted.
            sample(1.0, 2, true),
            sample(1.01, 1, true),
            sample(1.5, 2, true),
            sample(1.51, 1, false),
            sample(2.0, 2, true),
        ];
        assert_eq!(leader_changes(&samples, Duration::from_millis(500)), [(0.0, 1), (1.5, 2)]);
        let mut p = ProtocolParams::default();
        assert!(params_changed(&p).is_empty());
        p.set("snapshot_every=0").unwrap();
        p.set("trim=quorum").unwrap();
        assert_eq!(params_changed(&p), ["snapshot_every=0", "trim=quorum"]);
    }

    fn row(t: f64, ok: u64) -> TimelineRow {
        TimelineRow {
            t_s: t,
            dropped: 0,
            classes: vec![synod_bench::stats::ClassSummary {
                class: "all".into(),
                ok,
                rejected: 0,
                ambivalent: 0,
                errors: 0,
                throughput: ok as f64,
                p50_ms: 1.0,
                p90_ms: 1.0,
                p99_ms: 2.0,
                p999_ms: 2.0,
                max_ms: 2.0,
                reject_throughput: 0.0,
                reject_p50_ms: 0.0,
                reject_p99_ms: 0.0,
                definitive_reject_p50_ms: 0.0,
                ambivalent_reject_p50_ms: 0.0,
            }],
        }
    }

    #[test]
    fn windows_and_dip_analysis() {
        let rows: Vec<TimelineRow> =
            [100, 100, 100, 100, 0, 0, 50, 95, 100, 100].iter().enumerate().map(|(i, &ok)| row(i as f64, ok)).collect();
        let w = windows(&[row(0.0, 80), row(5.0, 69)]);
        assert_eq!(w.len(), 2);
        assert!((w[0].1 - 80.0).abs() < 1e-9 && (w[1].1 - 69.0).abs() < 1e-9, "{w:?}");
        assert!((w[0].2 - 1.0).abs() < 1e-9 && (w[1].2 - 69.0 / 80.0).abs() < 1e-9);
        assert_eq!(w[1].0, 5.0);
        let events =
            vec![Event { at_s: 4.0, t_s: 4.0, action: "kill leader".into(), ok: true, detail: vec![], marker: true }];
        let a = analyze(&rows, &events);
        assert!(a.contains("baseline before the first fault: 100 ops/s"), "{a}");
        assert!(a.contains("lowest interval 0 ops/s (0% of baseline), 2 interval(s) with no completed"), "{a}");
        assert!(a.contains("interval starting at 7 s (4.0 s after the fault)"), "{a}");
    }
}
