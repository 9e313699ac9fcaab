//! Resource use of the replicas over a run: resident memory of each replica process (from
//! `/proc/<pid>/status`) and the log / snapshot gauges its `/metrics` endpoint exports.
//!
//! HoliPaxos Fig. 11 (d)–(f) plots memory over time to compare log management methods: GLE
//! trimming keeps it low and flat, periodic snapshots make it saw-tooth, a disconnected
//! follower freezes trimming and memory climbs. Reading VmRSS from outside costs the
//! replicas nothing and needs no cooperation; the log length and snapshot counters come
//! from the replica's own Prometheus gauges (`synod_log_entries`, `synod_snapshots_total`,
//! ...) so that a memory bump can be told apart from a log that stopped being trimmed.

use serde::Serialize;
use std::fmt::Write as _;

/// Resident set size of process `pid` in KiB (`VmRSS` of `/proc/<pid>/status`).
pub fn rss_kib(pid: u32) -> std::io::Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    vm_rss_kib(&text).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("/proc/{pid}/status has no VmRSS line"))
    })
}

/// The `VmRSS:  1234 kB` line of a `/proc/<pid>/status` text, in KiB.
pub fn vm_rss_kib(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut words = line["VmRSS:".len()..].split_whitespace();
    let n: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") | None => Some(n),
        _ => None,
    }
}

/// The value of the first sample of metric `name` in a Prometheus text exposition whose
/// labels contain every `key="value"` of `labels` (a replica process exports its own node
/// only, so the name alone usually suffices). Comments, other metrics and histogram
/// suffixes (`_bucket`, `_sum`, `_count`) of other names are skipped.
pub fn prometheus_value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || !line.starts_with(name) {
            continue;
        }
        let rest = &line[name.len()..];
        let (label_text, value) = if let Some(r) = rest.strip_prefix('{') {
            let Some((l, v)) = r.split_once('}') else { continue };
            (l, v)
        } else if rest.starts_with(' ') {
            ("", rest)
        } else {
            continue; // a longer name sharing the prefix
        };
        if !labels.iter().all(|(k, v)| label_text.split(',').any(|kv| kv.trim() == format!("{k}=\"{v}\""))) {
            continue;
        }
        if let Some(v) = value.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()) {
            return Some(v);
        }
    }
    None
}

/// One replica at one instant.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ResourceSample {
    /// Seconds since the start of measurement.
    pub t_s: f64,
    pub node: u32,
    pub pid: u32,
    /// Resident memory in MiB.
    pub rss_mb: f64,
    /// From `/metrics` when the replica answered in time (`None`: no answer, e.g. paused).
    pub log_entries: Option<f64>,
    pub snapshots: Option<f64>,
    pub snapshot_bytes: Option<f64>,
    pub state_machine_bytes: Option<f64>,
    /// Whether the replica reported the leader role (`synod_role{role="leader"}`).
    pub leader: Option<bool>,
}

impl ResourceSample {
    /// Fill the `/metrics` fields from a scrape.
    pub fn with_metrics(mut self, text: &str) -> ResourceSample {
        self.log_entries = prometheus_value(text, "synod_log_entries", &[]);
        self.snapshots = prometheus_value(text, "synod_snapshots_total", &[]);
        self.snapshot_bytes = prometheus_value(text, "synod_snapshot_bytes", &[]);
        self.state_machine_bytes = prometheus_value(text, "synod_state_machine_bytes", &[]);
        self.leader = prometheus_value(text, "synod_role", &[("role", "leader")]).map(|v| v > 0.5);
        self
    }
}

pub const SAMPLE_HEADER: &str = "t_s,node,pid,rss_mb,log_entries,snapshots,snapshot_bytes,state_machine_bytes,leader";

/// The samples as CSV (empty fields where `/metrics` did not answer).
pub fn samples_csv(samples: &[ResourceSample]) -> String {
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.0}"));
    let mut csv = format!("{SAMPLE_HEADER}\n");
    for s in samples {
        let _ = writeln!(
            csv,
            "{:.3},{},{},{:.2},{},{},{},{},{}",
            s.t_s,
            s.node,
            s.pid,
            s.rss_mb,
            opt(s.log_entries),
            opt(s.snapshots),
            opt(s.snapshot_bytes),
            opt(s.state_machine_bytes),
            s.leader.map_or(String::new(), |l| l.to_string())
        );
    }
    csv
}

/// Per tumbling window of `window_s` seconds starting at 0: the highest RSS of any replica
/// (MiB) and which node it was, the leader's highest RSS, and the longest log, over the
/// samples in the window; `None` for a window without samples.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ResourceWindow {
    pub start_s: f64,
    pub max_rss_mb: Option<f64>,
    pub max_rss_node: Option<u32>,
    pub leader_max_rss_mb: Option<f64>,
    pub max_log_entries: Option<f64>,
}

pub fn windows(samples: &[ResourceSample], window_s: f64, count: usize) -> Vec<ResourceWindow> {
    (0..count)
        .map(|k| {
            let (start, end) = (k as f64 * window_s, (k + 1) as f64 * window_s);
            let mine: Vec<&ResourceSample> =
                samples.iter().filter(|s| s.t_s + 1e-9 >= start && s.t_s + 1e-9 < end).collect();
            let top = mine.iter().max_by(|a, b| a.rss_mb.total_cmp(&b.rss_mb));
            let leader = mine.iter().filter(|s| s.leader == Some(true)).map(|s| s.rss_mb).reduce(f64::max);
            ResourceWindow {
                start_s: start,
                max_rss_mb: top.map(|s| s.rss_mb),
                max_rss_node: top.map(|s| s.node),
                leader_max_rss_mb: leader,
                max_log_entries: mine.iter().filter_map(|s| s.log_entries).reduce(f64::max),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_of_this_process() {
        let before = rss_kib(std::process::id()).unwrap();
        assert!(before > 100, "a test binary's RSS is more than 100 KiB: {before}");
        // Touch 64 MiB: RSS must grow by about that much.
        let mut block = vec![0u8; 64 << 20];
        for i in (0..block.len()).step_by(4096) {
            block[i] = (i % 251) as u8 + 1;
        }
        let after = rss_kib(std::process::id()).unwrap();
        assert!(after >= before + 48 * 1024, "RSS {before} KiB -> {after} KiB after touching 64 MiB");
        assert!(std::hint::black_box(&block)[4096] != 0);
        assert!(rss_kib(u32::MAX).is_err(), "no such process");
    }

    #[test]
    fn status_and_metrics_parse() {
        assert_eq!(vm_rss_kib("Name:\tsynod\nVmPeak:\t  9 kB\nVmRSS:\t   12345 kB\n"), Some(12345));
        assert_eq!(vm_rss_kib("Name:\tkthreadd\n"), None);
        let m = "# HELP synod_log_entries x\n# TYPE synod_log_entries gauge\nsynod_log_entries{node=\"2\"} 4711\n\
                 synod_log_entries_total{node=\"2\"} 1\nsynod_snapshots_total{node=\"2\"} 3\n\
                 synod_role{node=\"2\",role=\"follower\"} 0\nsynod_role{node=\"2\",role=\"leader\"} 1\n\
                 synod_snapshot_bytes 1.5e6\n";
        assert_eq!(prometheus_value(m, "synod_log_entries", &[]), Some(4711.0));
        assert_eq!(prometheus_value(m, "synod_role", &[("role", "leader")]), Some(1.0));
        assert_eq!(prometheus_value(m, "synod_role", &[("role", "candidate")]), None);
        assert_eq!(prometheus_value(m, "synod_snapshot_bytes", &[]), Some(1.5e6));
        assert_eq!(prometheus_value(m, "synod_snapshots", &[]), None, "a prefix is not a name");
        let s = ResourceSample {
            t_s: 0.5,
            node: 2,
            pid: 9,
            rss_mb: 10.0,
            log_entries: None,
            snapshots: None,
            snapshot_bytes: None,
            state_machine_bytes: None,
            leader: None,
        }
        .with_metrics(m);
        assert_eq!((s.log_entries, s.snapshots, s.leader), (Some(4711.0), Some(3.0), Some(true)));
        let csv = samples_csv(&[s]);
        assert_eq!(csv.lines().nth(1), Some("0.500,2,9,10.00,4711,3,1500000,,true"));
    }

    #[test]
    fn windows_take_the_maximum() {
        let s = |t_s: f64, node: u32, rss_mb: f64, leader: bool| ResourceSample {
            t_s,
            node,
            pid: node,
            rss_mb,
            log_entries: Some(rss_mb * 10.0),
            snapshots: None,
            snapshot_bytes: None,
            state_machine_bytes: None,
            leader: Some(leader),
        };
        let samples =
            vec![s(0.0, 1, 30.0, true), s(0.0, 2, 40.0, false), s(5.5, 1, 35.0, true), s(12.0, 2, 20.0, true)];
        let w = windows(&samples, 10.0, 3);
        assert_eq!((w[0].max_rss_mb, w[0].max_rss_node, w[0].leader_max_rss_mb), (Some(40.0), Some(2), Some(35.0)));
        assert_eq!(w[0].max_log_entries, Some(400.0));
        assert_eq!((w[1].max_rss_mb, w[1].leader_max_rss_mb), (Some(20.0), Some(20.0)));
        assert_eq!(w[2].max_rss_mb, None);
    }
}
