//! `synod scenario run FILE`: start a cluster, drive a workload, fire faults at given times,
//! and write the results (CSV, JSON, PNG timelines with the faults marked, summary.txt).
//!
//! A scenario is a TOML file:
//!
//! ```toml
//! name = "leader-crash"
//! duration = "60s"            # measured time (after the workload's warm-up)
//! window = "10s"              # tumbling windows (HoliPaxos Fig. 9-11 use 10 s)
//! sample = "500ms"            # replica memory / log-length sampling period
//! [cluster]
//! protocols = ["multipaxos", "raft+", "holipaxos[trim=quorum]"]   # run one after another
//! replicas = 3
//! fsync = "batch"             # in_memory, fsync, data_dir, log_level, [cluster.params]
//! cpu_quota = 40              # optional: every replica capped at 40% of one CPU from its
//!                             # start (cgroup v1), e.g. to give each its own share of a
//!                             # small machine; faults' `cpu` quotas then set it lower
//! [workload]                  # any `synod bench` option, named as on its command line
//! workload = "a"
//! clients = 16
//! [load]                      # optional: open loop at a rate, found by calibration
//! calibrate = "20s"           # closed-loop run before measurement: max throughput
//! rate = "60%"                # of the calibrated max, or ops/s (rate = 4000)
//! [[schedule]]
//! at = "20s"
//! action = "kill leader"      # any `synod fault` action, or a scenario action (below)
//! ```
//!
//! **Variants.** Each entry of `protocols` is `[LABEL:]PROTOCOL[KEY=VALUE,...]`: a
//! registered protocol with its own parameters applied on top of `[cluster.params]` through
//! [`ProtocolParams::set`] (fields such as `snapshot_every=0`, anything else a protocol
//! option such as `trim=quorum`), checked by building the protocol once, so a misspelled
//! option fails at parse time. The label (default: the text as written) names the variant in
//! plots, `normalized.csv` and summaries; its folder is the label with `+` spelled `-plus`
//! and other punctuation turned into `-` (`holipaxos[trim=quorum]` → `holipaxos-trim-quorum`).
//!
//! **Scenario actions** besides the `synod fault` ones (HoliPaxos Fig. 10 and 11):
//! - `rate 60%` / `rate 4000`: change the open-loop arrival rate (percent of the calibrated
//!   maximum, or operations per second); needs an open-loop run (`[load] rate`).
//! - `cpu leader --ramp 100:40 --over 600s [--every 60s]`: a CPU quota ramp, expanded at
//!   parse time into `cpu N --quota PCT` steps every `--every` (default `--over`/10) from
//!   100% to 40% of one CPU, on the node resolved once at the ramp's first step (the leader
//!   *then*: a later leader change does not move the ramp). Each step goes through
//!   [`crate::fault::execute`]; only the first is drawn as a marker.
//! - `cpu all --quota PCT|off`: the quota on every replica, as one event.
//! - `isolate follower|leader|N`: cut every link of one replica both ways (a `partition
//!   --links` resolved when it fires; `follower` is the first replica after the leader in id
//!   order); `heal` ends it.
//!
//! The cluster is the one `synod local` runs ([`crate::cluster`], on free ports), this
//! process supervising it; the workload is `synod bench`'s (its argument struct parses the
//! `[workload]` table, so every option and check is the same); the faults are
//! [`crate::fault::execute`] on the cluster's `cluster.toml`, exactly as `synod fault` does it.
//! Fault times count from the start of measurement (the timeline's zero). While the run
//! goes on a sampler reads every replica's resident memory (`/proc/<pid>/status`, pids from
//! `cluster.toml`, so restarted and added nodes are followed) and its `/metrics` log and
//! snapshot gauges.

use crate::cluster::{Cluster, ClusterFile, NodeState, Ports, Spec, StartError, POLL};
use crate::fault::{Action, LinkSet, NodeSel, Quota};
use anyhow::{bail, Context as _};
use clap::Parser;
use serde::Deserialize;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use synod_bench::cli::{parse_duration, BenchArgs};
use synod_bench::driver::{self, LoadMode, RateControl, RunBound, Stop};
use synod_bench::plot::{self, Marker, Panel};
use synod_bench::report::{self, RunMeta};
use synod_bench::resources::{self, ResourceSample, ResourceWindow};
use synod_bench::stats::TimelineRow;
use synod_bench::target::TargetSpec;
use synod_bench::workload::Workload;
use synod_core::{NodeId, ProtocolParams};
use synod_wal::FsyncMode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: Sub,
}

#[derive(clap::Subcommand, Debug)]
pub enum Sub {
    /// Run a scenario file: cluster + workload + fault schedule, results into a folder.
    Run(RunArgs),
    /// Parse and check a scenario file without running it.
    Check { file: PathBuf },
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The scenario TOML file.
    pub file: PathBuf,
    /// Output folder (default: the file's `out`, else scenario-out/<name>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Multiply the duration, every fault time, ramp lengths and the calibration run by this
    /// (e.g. 0.1 for a quick run of a paper-scale scenario).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Run these variants instead of the file's: comma-separated, same syntax as the file's
    /// `protocols` (`holipaxos[trim=quorum,compact_every=5000],raft+`).
    #[arg(long)]
    pub protocols: Vec<String>,
}

/// The file as written.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct File {
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    duration: String,
    #[serde(default)]
    window: Option<String>,
    #[serde(default)]
    sample: Option<String>,
    #[serde(default)]
    out: Option<PathBuf>,
    cluster: ClusterSection,
    #[serde(default)]
    workload: toml::Table,
    #[serde(default)]
    load: Option<LoadSection>,
    #[serde(default)]
    schedule: Vec<StepSection>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct ClusterSection {
    #[serde(default)]
    protocol: Option<String>,
    #[serde(default)]
    protocols: Option<Vec<String>>,
    #[serde(default = "three")]
    replicas: u32,
    #[serde(default)]
    in_memory: bool,
    #[serde(default = "batch")]
    fsync: FsyncMode,
    /// Parent directory of the cluster's files (e.g. /dev/shm for tmpfs); default: temp dir.
    #[serde(default)]
    data_dir: Option<PathBuf>,
    #[serde(default)]
    log_level: Option<String>,
    #[serde(default)]
    params: ProtocolParams,
    /// Percent of one CPU every replica gets from its start (before loading and calibration).
    #[serde(default)]
    cpu_quota: Option<f64>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct LoadSection {
    #[serde(default)]
    rate: Option<toml::Value>,
    #[serde(default)]
    calibrate: Option<String>,
    #[serde(default)]
    calibrate_clients: Option<usize>,
}

fn three() -> u32 {
    3
}

fn batch() -> FsyncMode {
    FsyncMode::Batch
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct StepSection {
    at: String,
    action: String,
}

/// One protocol run of a scenario: a registered protocol with its own parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct Variant {
    /// Names the variant in plots, `normalized.csv` and summaries.
    pub label: String,
    /// The registered protocol's name.
    pub protocol: String,
    /// `[cluster.params]` with the variant's assignments applied.
    pub params: ProtocolParams,
}

impl Variant {
    /// Parse `[LABEL:]PROTOCOL[KEY=VALUE,...]` on top of `base`, and check the parameters by
    /// building the protocol for a cluster of `replicas`.
    pub fn parse(text: &str, base: &ProtocolParams, replicas: u32) -> Result<Variant, String> {
        let text = text.trim();
        let bad = |why: String| format!("variant `{text}`: {why}");
        let (head, assignments) = match text.split_once('[') {
            None => (text, None),
            Some((head, rest)) => {
                let inner = rest
                    .strip_suffix(']')
                    .ok_or_else(|| bad("expected PROTOCOL[KEY=VALUE,...] with the `]` last".into()))?;
                if inner.contains('[') || inner.contains(']') {
                    return Err(bad("brackets do not nest".into()));
                }
                (head, Some(inner))
            }
        };
        let (label, protocol) = match head.split_once(':') {
            Some((l, p)) => (Some(l.trim()), p.trim()),
            None => (None, head.trim()),
        };
        if protocol.is_empty() {
            return Err(bad("no protocol named".into()));
        }
        let info = synod_protocols::registry::find(protocol).map_err(bad)?;
        let mut params = base.clone();
        let mut written = Vec::new();
        if let Some(inner) = assignments {
            let items: Vec<&str> = inner.split(',').map(str::trim).filter(|a| !a.is_empty()).collect();
            if items.is_empty() {
                return Err(bad("empty `[]`: give KEY=VALUE parameters or leave the brackets out".into()));
            }
            for a in items {
                params.set(a).map_err(bad)?;
                written.push(a.split_whitespace().collect::<String>());
            }
        }
        let setup = synod_protocols::registry::Setup { id: 1, members: (1..=replicas.max(1)).collect(), params };
        (info.build)(&setup).map_err(bad)?;
        let label = match label {
            Some("") => return Err(bad("empty label before `:`".into())),
            Some(l) if !l.chars().all(|c| c.is_ascii_alphanumeric() || "-_.+ ".contains(c)) => {
                return Err(bad(format!("label `{l}` must be letters, digits, spaces, `-`, `_`, `.` or `+`")))
            }
            Some(l) => l.to_string(),
            None if written.is_empty() => info.name.to_string(),
            None => format!("{}[{}]", info.name, written.join(",")),
        };
        Ok(Variant { label, protocol: info.name.to_string(), params: setup.params })
    }

    /// The folder (and bench target label) of this variant: `raft+` → `raft-plus`,
    /// `holipaxos[trim=quorum]` → `holipaxos-trim-quorum`.
    pub fn dir_name(&self) -> String {
        let mut out = String::new();
        for c in self.label.replace('+', "-plus").chars() {
            let c = if c.is_ascii_alphanumeric() || c == '_' || c == '.' { c } else { '-' };
            if !(c == '-' && (out.is_empty() || out.ends_with('-'))) {
                out.push(c);
            }
        }
        out.trim_end_matches('-').to_string()
    }
}

/// Split a comma-separated variant list at the commas outside brackets:
/// `holipaxos[trim=quorum,compact_every=10],raft+` is two variants.
pub fn split_variants(list: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0i32);
    for c in list.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth <= 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter().map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect()
}

/// Parse a list of variants, refusing two that would share a folder.
fn parse_variants(texts: &[String], base: &ProtocolParams, replicas: u32) -> Result<Vec<Variant>, String> {
    let mut out: Vec<Variant> = Vec::new();
    for t in texts {
        let v = Variant::parse(t, base, replicas)?;
        if let Some(o) = out.iter().find(|o| o.dir_name() == v.dir_name()) {
            return Err(format!(
                "variants `{}` and `{}` would share the output folder `{}`; give one a label (LABEL:{})",
                o.label,
                v.label,
                v.dir_name(),
                t.trim()
            ));
        }
        out.push(v);
    }
    Ok(out)
}

/// An open-loop rate: operations per second, or a percentage of the calibrated maximum.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RateSpec {
    Ops(f64),
    Percent(f64),
}

impl RateSpec {
    pub fn parse(s: &str) -> Result<RateSpec, String> {
        let s = s.trim();
        let bad = || {
            format!(
                "rate `{s}`: expected operations per second (e.g. 4000) or a percentage of the calibrated \
                 maximum (e.g. 60%)"
            )
        };
        let (num, pct) = match s.strip_suffix('%') {
            Some(n) => (n.trim(), true),
            None => (s.strip_suffix("ops/s").unwrap_or(s).trim(), false),
        };
        let v: f64 = num.parse().map_err(|_| bad())?;
        if !(v > 0.0 && v.is_finite()) {
            return Err(format!("rate `{s}`: must be positive"));
        }
        if pct && v > 1000.0 {
            return Err(format!("rate `{s}`: more than 1000% of the calibrated maximum is surely a typo"));
        }
        Ok(if pct { RateSpec::Percent(v) } else { RateSpec::Ops(v) })
    }

    /// Operations per second, given the calibrated maximum.
    pub fn ops(self, max: Option<f64>) -> Result<f64, String> {
        match (self, max) {
            (RateSpec::Ops(v), _) => Ok(v),
            (RateSpec::Percent(p), Some(m)) if m > 0.0 => Ok(m * p / 100.0),
            (RateSpec::Percent(p), _) => Err(format!("rate {p}% needs a calibrated maximum ([load] calibrate)")),
        }
    }
}

impl std::fmt::Display for RateSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RateSpec::Ops(v) => write!(f, "{v} ops/s"),
            RateSpec::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// Which replica `isolate` cuts off, resolved when it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    Leader,
    /// The first running replica after the leader in id order (wrapping).
    Follower,
    Id(NodeId),
}

/// What a scheduled step does.
#[derive(Clone, Debug, PartialEq)]
pub enum StepKind {
    /// A `synod fault` action.
    Fault(Action),
    /// Several `synod fault` actions at once, one event (`cpu all --quota off`).
    Faults(Vec<Action>),
    /// Change the open-loop rate.
    Rate(RateSpec),
    /// One step of CPU ramp number `ramp`: quota `pct` on the node its first step resolved.
    Ramp { ramp: usize, node: NodeSel, pct: f64, first: bool },
    /// Cut every link of one replica, both ways.
    Isolate(Who),
}

/// One scheduled step.
#[derive(Clone, Debug)]
pub struct Step {
    pub at: Duration,
    pub text: String,
    pub kind: StepKind,
    /// Drawn as a marker on the plots (ramps: only their first step).
    pub marker: bool,
}

/// The load settings: open loop at a rate (possibly relative to a calibrated maximum).
#[derive(Clone, Debug, PartialEq)]
pub struct Load {
    /// Open-loop rate from the start (None: closed loop, as `[workload]` says).
    pub rate: Option<RateSpec>,
    /// Closed-loop calibration run before measurement.
    pub calibrate: Option<Duration>,
    pub calibrate_clients: usize,
}

/// A checked scenario.
#[derive(Debug)]
pub struct Scenario {
    pub name: String,
    pub description: Option<String>,
    pub duration: Duration,
    pub window: Duration,
    pub sample: Duration,
    pub out: PathBuf,
    pub variants: Vec<Variant>,
    pub replicas: u32,
    pub in_memory: bool,
    pub fsync: FsyncMode,
    pub data_dir: Option<PathBuf>,
    pub log_level: String,
    /// `[cluster.params]` (each variant's params start from these).
    pub params: ProtocolParams,
    /// `[cluster] cpu_quota`: percent of one CPU per replica from its start.
    pub cpu_quota: Option<f64>,
    /// The workload; its target is filled in per run.
    pub bench: BenchArgs,
    pub load: Load,
    pub schedule: Vec<Step>,
}

/// `synod bench` options a scenario sets itself.
const RESERVED: &[(&str, &str)] = &[
    ("target", "the scenario's cluster is the target"),
    ("out", "use the scenario's `out` or --out"),
    ("compare", "a scenario runs its protocols one after another"),
    ("duration", "use the scenario's top-level `duration`"),
    ("ops", "scenarios are timed: use `duration`"),
    ("marker", "markers come from the schedule"),
];

/// `#[command(flatten)]` of the bench arguments, to parse them from a synthetic argv.
#[derive(clap::Parser, Debug)]
#[command(name = "workload", no_binary_name = true)]
struct BenchCli {
    #[command(flatten)]
    bench: BenchArgs,
}

/// The words after `--flag` in `words`, or None.
fn flag_value<'a>(words: &[&'a str], flag: &str) -> Option<&'a str> {
    words.iter().position(|w| *w == flag).and_then(|i| words.get(i + 1).copied())
}

/// Parse one schedule entry at `at` into its steps (a ramp is several), checked against a
/// cluster of `ids` and a run of `duration`; `scale` stretches ramp lengths like times.
fn parse_action(
    text: &str,
    at: Duration,
    duration: Duration,
    ids: &[NodeId],
    scale: f64,
    ramp: usize,
) -> Result<Vec<Step>, String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let norm = words.join(" ");
    let step = |kind| Step { at, text: norm.clone(), kind, marker: true };
    match words.as_slice() {
        [] => Err("empty action".into()),
        ["rate", rest @ ..] => match rest {
            [r] => Ok(vec![step(StepKind::Rate(RateSpec::parse(r)?))]),
            _ => Err(format!("action `{norm}`: expected `rate OPS` or `rate PCT%`")),
        },
        ["cpu", node, rest @ ..] if rest.contains(&"--ramp") => {
            let node: NodeSel = node.parse()?;
            if let NodeSel::Id(id) = node {
                if !ids.contains(&id) {
                    return Err(format!("no node {id} in a cluster of {} (ids {ids:?})", ids.len()));
                }
            }
            let known = ["--ramp", "--over", "--every"];
            for (i, w) in rest.iter().enumerate() {
                if i % 2 == 0 && !known.contains(w) {
                    return Err(format!(
                        "action `{norm}`: unexpected `{w}` (a ramp is `cpu N|leader --ramp FROM:TO --over DURATION \
                         [--every DURATION]`)"
                    ));
                }
            }
            if rest.len() % 2 != 0 {
                return Err(format!("action `{norm}`: `{}` needs a value", rest[rest.len() - 1]));
            }
            let ramp_text = flag_value(rest, "--ramp").expect("checked above");
            let (from, to) = ramp_text
                .split_once(':')
                .and_then(|(a, b)| {
                    Some((a.trim_end_matches('%').parse::<f64>().ok()?, b.trim_end_matches('%').parse::<f64>().ok()?))
                })
                .ok_or_else(|| {
                    format!(
                        "action `{norm}`: --ramp `{ramp_text}`: expected FROM:TO in percent of one CPU, e.g. 100:40"
                    )
                })?;
            if !(from >= 1.0 && to >= 1.0 && from.is_finite() && to.is_finite()) {
                return Err(format!(
                    "action `{norm}`: --ramp {ramp_text}: quotas must be at least 1 (percent of one CPU)"
                ));
            }
            let over = flag_value(rest, "--over")
                .ok_or_else(|| format!("action `{norm}`: a ramp needs --over DURATION"))
                .and_then(|d| parse_duration(d).map_err(|e| format!("action `{norm}`: --over: {e}")))?
                .mul_f64(scale);
            if over.is_zero() {
                return Err(format!("action `{norm}`: --over must be positive"));
            }
            let every = match flag_value(rest, "--every") {
                Some(d) => parse_duration(d).map_err(|e| format!("action `{norm}`: --every: {e}"))?.mul_f64(scale),
                None => over / 10,
            };
            if every.is_zero() || every > over {
                return Err(format!("action `{norm}`: --every must be positive and at most --over"));
            }
            let n = (over.as_secs_f64() / every.as_secs_f64()).round().max(1.0) as u32;
            let end = at + every * n;
            if end >= duration {
                return Err(format!(
                    "action `{norm}`: the ramp's last step at {end:?} is not before the end of the run ({duration:?})"
                ));
            }
            Ok((0..=n)
                .map(|k| Step {
                    at: at + every * k,
                    text: if k == 0 {
                        format!("cpu {} ramp {from}%->{to}% over {:.0}s", words[1], over.as_secs_f64())
                    } else {
                        format!("cpu ramp step {k}/{n}")
                    },
                    kind: StepKind::Ramp {
                        ramp,
                        node,
                        pct: ((from + (to - from) * f64::from(k) / f64::from(n)) * 10.0).round() / 10.0,
                        first: k == 0,
                    },
                    marker: k == 0,
                })
                .collect())
        }
        ["cpu", "all", rest @ ..] => {
            let probe = format!("cpu {} {}", ids.first().copied().unwrap_or(1), rest.join(" "));
            let Action::Cpu { quota, .. } = Action::parse_words(&probe).map_err(|e| e.replace(&probe, &norm))? else {
                unreachable!("parsed as cpu")
            };
            let all = ids.iter().map(|&id| Action::Cpu { node: NodeSel::Id(id), quota }).collect();
            Ok(vec![step(StepKind::Faults(all))])
        }
        ["isolate", rest @ ..] => {
            let who = match rest {
                ["leader"] => Who::Leader,
                ["follower"] => Who::Follower,
                [n] => {
                    let id: NodeId = n
                        .parse()
                        .map_err(|_| format!("action `{norm}`: `{n}` is not leader, follower or a node id"))?;
                    if !ids.contains(&id) {
                        return Err(format!("no node {id} in a cluster of {} (ids {ids:?})", ids.len()));
                    }
                    Who::Id(id)
                }
                _ => return Err(format!("action `{norm}`: expected `isolate leader|follower|N`")),
            };
            if ids.len() < 2 {
                return Err(format!("action `{norm}`: isolating needs at least 2 replicas"));
            }
            Ok(vec![step(StepKind::Isolate(who))])
        }
        _ => {
            let action = Action::parse_words(text)?;
            if matches!(action, Action::Show) {
                return Err("`show` is not a fault".into());
            }
            action.check(ids)?;
            Ok(vec![step(StepKind::Fault(action))])
        }
    }
}

impl Scenario {
    /// Parse and check `text` (named `origin` in errors); `scale` stretches the times.
    pub fn parse(text: &str, origin: &str, scale: f64) -> anyhow::Result<Scenario> {
        if !(scale > 0.0 && scale.is_finite()) {
            bail!("--scale {scale}: must be a positive number");
        }
        let file: File = toml::from_str(text).map_err(|e| anyhow::anyhow!("{origin}: {e}"))?;
        let name = file.name.clone().unwrap_or_else(|| {
            Path::new(origin).file_stem().map_or("scenario".into(), |s| s.to_string_lossy().to_string())
        });
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            bail!("{origin}: name `{name}` must be letters, digits, `-`, `_` or `.`");
        }
        let time = |what: &str, s: &str| -> anyhow::Result<Duration> {
            let d = parse_duration(s).map_err(|e| anyhow::anyhow!("{origin}: {what}: {e}"))?;
            Ok(d.mul_f64(scale))
        };
        let duration = time("duration", &file.duration)?;
        if duration.is_zero() {
            bail!("{origin}: duration must be positive");
        }
        let window = match &file.window {
            Some(w) => parse_duration(w).map_err(|e| anyhow::anyhow!("{origin}: window: {e}"))?,
            None => Duration::from_secs(10),
        };
        if window.is_zero() {
            bail!("{origin}: window must be positive");
        }
        let sample = match &file.sample {
            Some(w) => parse_duration(w).map_err(|e| anyhow::anyhow!("{origin}: sample: {e}"))?,
            None => Duration::from_millis(500),
        };
        if sample < Duration::from_millis(50) {
            bail!("{origin}: sample = {sample:?}: must be at least 50ms (each sample reads every replica's /metrics)");
        }
        let c = &file.cluster;
        if !(1..=99).contains(&c.replicas) {
            bail!("{origin}: [cluster] replicas = {}: must be 1 to 99", c.replicas);
        }
        let texts = match (&c.protocol, &c.protocols) {
            (Some(_), Some(_)) => bail!("{origin}: [cluster] has both `protocol` and `protocols`; keep one"),
            (Some(p), None) => vec![p.clone()],
            (None, Some(ps)) if !ps.is_empty() => ps.clone(),
            (None, Some(_)) => bail!("{origin}: [cluster] protocols is empty"),
            (None, None) => vec!["multipaxos".to_string()],
        };
        let variants = parse_variants(&texts, &c.params, c.replicas)
            .map_err(|e| anyhow::anyhow!("{origin}: [cluster] protocols: {e}"))?;
        let bench = bench_args(&file.workload).map_err(|e| anyhow::anyhow!("{origin}: [workload] {e}"))?;
        let ids: Vec<NodeId> = (1..=c.replicas).collect();
        let mut schedule = Vec::new();
        let mut ramps = 0;
        for (i, s) in file.schedule.iter().enumerate() {
            let what = format!("schedule[{i}] (action `{}`)", s.action);
            let at = time(&format!("{what}: at"), &s.at)?;
            if at >= duration {
                bail!("{origin}: {what}: at = {:?} is not before the end of the run (duration {:?})", at, duration);
            }
            let steps = parse_action(&s.action, at, duration, &ids, scale, ramps)
                .map_err(|e| anyhow::anyhow!("{origin}: {what}: {e}"))?;
            if steps.iter().any(|s| matches!(s.kind, StepKind::Ramp { .. })) {
                ramps += 1;
            }
            schedule.extend(steps);
        }
        schedule.sort_by_key(|s| s.at);

        let l = file.load.as_ref();
        let mut rate = match l.and_then(|l| l.rate.as_ref()) {
            None => None,
            Some(toml::Value::String(s)) => {
                Some(RateSpec::parse(s).map_err(|e| anyhow::anyhow!("{origin}: [load] {e}"))?)
            }
            Some(toml::Value::Integer(i)) => {
                Some(RateSpec::parse(&i.to_string()).map_err(|e| anyhow::anyhow!("{origin}: [load] {e}"))?)
            }
            Some(toml::Value::Float(f)) => {
                Some(RateSpec::parse(&f.to_string()).map_err(|e| anyhow::anyhow!("{origin}: [load] {e}"))?)
            }
            Some(v) => bail!("{origin}: [load] rate: a {} is not a rate (e.g. 4000 or \"60%\")", v.type_str()),
        };
        if let Some(r) = bench.rate {
            if rate.is_some() {
                bail!("{origin}: both [workload] rate and [load] rate are set; keep [load] rate");
            }
            rate = Some(RateSpec::Ops(r));
        }
        let calibrate = match l.and_then(|l| l.calibrate.as_deref()) {
            None => None,
            Some(d) => {
                let d = parse_duration(d).map_err(|e| anyhow::anyhow!("{origin}: [load] calibrate: {e}"))?;
                if d.is_zero() {
                    bail!("{origin}: [load] calibrate must be positive");
                }
                Some(d.mul_f64(scale).max(Duration::from_secs(5).min(d)))
            }
        };
        let calibrate_clients = l.and_then(|l| l.calibrate_clients).unwrap_or(bench.clients);
        if calibrate_clients == 0 {
            bail!("{origin}: [load] calibrate_clients must be at least 1");
        }
        let rate_steps: Vec<&Step> = schedule.iter().filter(|s| matches!(s.kind, StepKind::Rate(_))).collect();
        if let Some(s) = rate_steps.first() {
            if rate.is_none() {
                bail!(
                    "{origin}: `{}` at {:?} changes the open-loop rate, but the run is closed loop: set [load] rate",
                    s.text,
                    s.at
                );
            }
        }
        let percent = matches!(rate, Some(RateSpec::Percent(_)))
            || rate_steps.iter().any(|s| matches!(s.kind, StepKind::Rate(RateSpec::Percent(_))));
        if percent && calibrate.is_none() {
            bail!("{origin}: rates in percent are relative to a calibrated maximum: set [load] calibrate = \"20s\"");
        }
        if bench.sweep.is_some() && (!schedule.is_empty() || rate.is_some() || calibrate.is_some()) {
            bail!("{origin}: a sweep runs the workload several times; it cannot have a fault schedule, [load] rate or calibration");
        }
        if bench.rounds != 1 && !schedule.is_empty() {
            bail!("{origin}: [workload] rounds must be 1 with a fault schedule");
        }
        if c.in_memory && schedule.iter().any(|s| matches!(s.kind, StepKind::Fault(Action::Restart { .. }))) {
            bail!(
                "{origin}: [cluster] in_memory = true with a restart in the schedule: a restarted in-memory \
                 replica comes back empty, which breaks the protocols' durability assumption; use a WAL \
                 (fsync = \"never\" keeps it fast)"
            );
        }
        if let Some(q) = c.cpu_quota {
            if !(q.is_finite() && q > 0.0 && q <= 6400.0) {
                bail!("{origin}: [cluster] cpu_quota = {q}: expected a percentage of one CPU above 0 (e.g. 40)");
            }
        }
        let out = file.out.clone().unwrap_or_else(|| PathBuf::from("scenario-out").join(&name));
        Ok(Scenario {
            name,
            description: file.description,
            duration,
            window,
            sample,
            out,
            variants,
            replicas: c.replicas,
            in_memory: c.in_memory,
            fsync: c.fsync,
            data_dir: c.data_dir.clone(),
            log_level: c.log_level.clone().unwrap_or_else(|| "info".into()),
            params: c.params.clone(),
            cpu_quota: c.cpu_quota,
            bench: BenchArgs { duration, ..bench },
            load: Load { rate, calibrate, calibrate_clients },
            schedule,
        })
    }

    pub fn load(path: &Path, scale: f64) -> anyhow::Result<Scenario> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        Scenario::parse(&text, &path.display().to_string(), scale)
    }

    /// Replace the variants (`--protocols`), same syntax as the file's list.
    pub fn set_variants(&mut self, list: &[String]) -> Result<(), String> {
        let texts: Vec<String> = list.iter().flat_map(|l| split_variants(l)).collect();
        if texts.is_empty() {
            return Err("--protocols: no variant given".into());
        }
        self.variants = parse_variants(&texts, &self.params, self.replicas).map_err(|e| format!("--protocols: {e}"))?;
        Ok(())
    }

    fn markers(&self) -> Vec<Marker> {
        self.schedule
            .iter()
            .filter(|s| s.marker)
            .map(|st| Marker { t_s: st.at.as_secs_f64(), label: st.text.clone() })
            .collect()
    }
}

/// The `[workload]` table as `synod bench` arguments: `clients = 16` is `--clients 16`,
/// `key_size` may be written `key-size`, `true` is a bare flag, an array repeats the option.
fn bench_args(table: &toml::Table) -> Result<BenchArgs, String> {
    let mut argv: Vec<String> = vec!["--target".into(), "synod=127.0.0.1:1".into()];
    for (key, value) in table {
        let flag = key.replace('_', "-");
        if let Some((_, why)) = RESERVED.iter().find(|(k, _)| *k == flag) {
            return Err(format!("`{key}` cannot be set here: {why}"));
        }
        let scalar = |v: &toml::Value| -> Result<Option<String>, String> {
            Ok(match v {
                toml::Value::String(s) => Some(s.clone()),
                toml::Value::Integer(i) => Some(i.to_string()),
                toml::Value::Float(f) => Some(f.to_string()),
                toml::Value::Boolean(_) => None,
                other => return Err(format!("`{key}`: a {} is not an option value", other.type_str())),
            })
        };
        match value {
            toml::Value::Boolean(true) => argv.push(format!("--{flag}")),
            toml::Value::Boolean(false) => {}
            toml::Value::Array(items) => {
                for item in items {
                    let v = scalar(item)?.ok_or_else(|| format!("`{key}`: arrays hold values, not booleans"))?;
                    argv.push(format!("--{flag}"));
                    argv.push(v);
                }
            }
            v => {
                argv.push(format!("--{flag}"));
                argv.push(scalar(v)?.unwrap_or_default());
            }
        }
    }
    let args = BenchCli::try_parse_from(&argv)
        .map_err(|e| {
            let text = e.to_string();
            let first: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).take(2).collect();
            first.join(" ").trim_start_matches("error: ").replace("argument '--", "option '").to_string()
        })?
        .bench;
    args.workload_spec().map_err(|e| e.to_string())?;
    args.run_config(args.clients, args.rate).map_err(|e| e.to_string())?;
    if let Some(s) = &args.sweep {
        synod_bench::cli::Sweep::parse(s)?;
    }
    Ok(args)
}

pub fn main(args: Args) -> ExitCode {
    match args.command {
        Sub::Check { file } => match Scenario::load(&file, 1.0) {
            Ok(s) => {
                let load = match (&s.load.rate, s.load.calibrate) {
                    (None, _) => "closed loop".to_string(),
                    (Some(r), None) => format!("open loop at {r}"),
                    (Some(r), Some(c)) => format!("open loop at {r}, calibrated by a {c:?} closed-loop run"),
                };
                println!(
                    "{}: {} x {} replicas, {:?} measured, {load}, {} step(s): {}",
                    s.name,
                    s.variants.iter().map(|v| v.label.as_str()).collect::<Vec<_>>().join(", "),
                    s.replicas,
                    s.duration,
                    s.schedule.len(),
                    s.schedule.iter().map(|st| format!("{:?} {}", st.at, st.text)).collect::<Vec<_>>().join("; ")
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(2)
            }
        },
        Sub::Run(run) => {
            let mut s = match Scenario::load(&run.file, run.scale) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    return ExitCode::from(2);
                }
            };
            if !run.protocols.is_empty() {
                if let Err(e) = s.set_variants(&run.protocols) {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            }
            if let Some(o) = run.out {
                s.out = o;
            }
            match run_scenario(&s) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// A step as it happened.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Event {
    /// Planned time (s since the start of measurement).
    pub at_s: f64,
    /// When it was applied (s since the start of measurement).
    pub t_s: f64,
    pub action: String,
    pub ok: bool,
    pub detail: Vec<String>,
    /// Drawn on the plots (a ramp's later steps are not).
    pub marker: bool,
}

/// One tumbling window of one run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct WindowRow {
    pub start_s: f64,
    pub end_s: f64,
    pub throughput: f64,
    /// Throughput / the run's best window.
    pub normalized: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Time-weighted open-loop rate offered in the window (None: closed loop).
    pub offered: Option<f64>,
    pub resources: ResourceWindow,
}

/// What one variant's run produced, for the combined outputs.
struct RunOutcome {
    label: String,
    windows: Vec<WindowRow>,
    summary: String,
}

/// Run every variant of the scenario, one after another.
pub fn run_scenario(s: &Scenario) -> anyhow::Result<()> {
    std::fs::create_dir_all(&s.out).with_context(|| format!("creating {}", s.out.display()))?;
    let stop = Stop::new();
    let mut outcomes = Vec::new();
    for v in &s.variants {
        if stop.raised() {
            break;
        }
        let dir = if s.variants.len() > 1 { s.out.join(v.dir_name()) } else { s.out.clone() };
        println!("== {} · {} · {} replicas → {}", s.name, v.label, s.replicas, dir.display());
        outcomes.push(run_one(s, v, &dir, &stop)?);
    }
    let mut text = format!("scenario {}", s.name);
    if let Some(d) = &s.description {
        let _ = write!(text, ": {d}");
    }
    let _ = writeln!(text, "\nmeasured {:.0} s, {} replicas\n", s.duration.as_secs_f64(), s.replicas);
    for o in &outcomes {
        text.push_str(&o.summary);
        text.push('\n');
    }
    if !outcomes.is_empty() && s.bench.sweep.is_none() {
        let mut csv = String::from(
            "protocol,window_start_s,window_end_s,throughput_ops_s,normalized,p50_ms,p99_ms,offered_ops_s,max_rss_mb,\
             leader_max_rss_mb\n",
        );
        let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.1}"));
        for o in &outcomes {
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
    print!("\n{text}");
    println!("results in {}", s.out.display());
    if stop.raised() {
        bail!("interrupted");
    }
    Ok(())
}

/// One variant: cluster up, load, run with the schedule, outputs, cluster down.
fn run_one(s: &Scenario, v: &Variant, dir: &Path, stop: &Stop) -> anyhow::Result<RunOutcome> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let parent = s.data_dir.clone().unwrap_or_else(std::env::temp_dir);
    let cluster_dir = parent.join(format!("synod-scenario-{}-{}-{}-{stamp}", s.name, v.dir_name(), std::process::id()));
    let spec = Spec {
        nodes: s.replicas,
        protocol: v.protocol.clone(),
        data_dir: Some(cluster_dir.clone()),
        in_memory: s.in_memory,
        fsync: s.fsync,
        ports: Ports::Free,
        log_level: s.log_level.clone(),
        params: v.params.clone(),
    };
    let cluster = Cluster::start(&spec).map_err(|e| match e {
        StartError::Usage(m) | StartError::Failed(m) => anyhow::anyhow!("starting the {} cluster: {m}", v.label),
    })?;
    let file_path = cluster.file_path.clone();
    let endpoints = cluster.client_endpoints();
    println!("cluster file: {}", file_path.display());
    if let Some(q) = s.cpu_quota {
        for id in 1..=s.replicas as NodeId {
            let a = Action::Cpu { node: NodeSel::Id(id), quota: crate::fault::Quota::Percent(q) };
            match crate::fault::execute(&file_path, &a) {
                Ok(lines) => lines.iter().for_each(|l| eprintln!("{l}")),
                Err(e) => {
                    let mut cluster = cluster;
                    cluster.stop();
                    bail!("[cluster] cpu_quota = {q}: {e}");
                }
            }
        }
    }

    // Supervise on a thread of its own: restarts and exits are served while the load runs.
    let supervisor_log = Arc::new(Mutex::new(Vec::<String>::new()));
    let done = Arc::new(AtomicBool::new(false));
    let supervisor = {
        let (done, log) = (done.clone(), supervisor_log.clone());
        let mut cluster = cluster;
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                for e in cluster.poll() {
                    eprintln!("{e}");
                    log.lock().expect("log lock").push(e);
                }
                std::thread::sleep(POLL);
            }
            cluster.stop();
        })
    };

    let result = (|| -> anyhow::Result<RunOutcome> {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        let target: TargetSpec =
            format!("{}:synod={}", v.dir_name(), endpoints.join(",")).parse().map_err(anyhow::Error::msg)?;
        if s.bench.sweep.is_some() {
            let args = BenchArgs { targets: vec![target], out: dir.to_path_buf(), ..s.bench.clone() };
            rt.block_on(synod_bench::cli::run_bench(args))?;
            let medians = std::fs::read_to_string(dir.join("medians.csv")).unwrap_or_default();
            return Ok(RunOutcome {
                label: v.label.clone(),
                windows: Vec::new(),
                summary: format!("{}: sweep medians (medians.csv, sweep.png in {})\n{medians}", v.label, dir.display()),
            });
        }
        rt.block_on(measure(s, v, dir, &file_path, target, stop))
    })();

    done.store(true, Ordering::SeqCst);
    let _ = supervisor.join();
    // Keep the replica logs with the results; the data directory (WALs) goes.
    let logs = dir.join("logs");
    let _ = std::fs::create_dir_all(&logs);
    if let Ok(entries) = std::fs::read_dir(&cluster_dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with("node") && name.ends_with(".log") {
                let _ = std::fs::copy(e.path(), logs.join(&name));
            }
        }
    }
    let supervisor_log = supervisor_log.lock().expect("log lock").join("\n");
    let _ = std::fs::write(logs.join("supervisor.log"), supervisor_log);
    let _ = std::fs::remove_dir_all(&cluster_dir);
    result
}

/// Shared by the steps of one run while it goes on.
struct FireCtx {
    cluster_file: PathBuf,
    rate: Option<RateControl>,
    calibrated: Option<f64>,
    /// Node each CPU ramp resolved at its first step.
    ramps: Mutex<HashMap<usize, NodeId>>,
    /// (s since the start of measurement, offered ops/s) from the start on.
    rate_log: Mutex<Vec<(f64, f64)>>,
}

/// `leader` resolved now, retrying while an election is under way (as `synod fault` does).
fn leader_now(c: &ClusterFile) -> Result<NodeId, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match crate::fault::find_leader(c) {
            Ok(id) => return Ok(id),
            Err(e) if Instant::now() >= deadline => return Err(format!("cannot resolve `leader`: {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Carry out one step (blocking: faults talk HTTP and wait for elections).
fn fire(kind: &StepKind, t_s: f64, ctx: &FireCtx) -> Result<Vec<String>, String> {
    let file = &ctx.cluster_file;
    let exec = |a: &Action| crate::fault::execute(file, a).map_err(|e| e.to_string());
    match kind {
        StepKind::Fault(a) => exec(a),
        StepKind::Faults(actions) => {
            let mut lines = Vec::new();
            for a in actions {
                lines.extend(exec(a).map_err(|e| format!("{} (after: {})", e, lines.join(" | ")))?);
            }
            Ok(lines)
        }
        StepKind::Rate(r) => {
            let control = ctx.rate.as_ref().ok_or("the run is closed loop")?;
            let ops = r.ops(ctx.calibrated)?;
            control.set(ops)?;
            ctx.rate_log.lock().expect("rate log").push((t_s, ops));
            Ok(vec![match (r, ctx.calibrated) {
                (RateSpec::Percent(p), Some(m)) => {
                    format!("offered rate {ops:.0} ops/s ({p}% of the calibrated {m:.0} ops/s)")
                }
                _ => format!("offered rate {ops:.0} ops/s"),
            }])
        }
        StepKind::Ramp { ramp, node, pct, first } => {
            let id = if *first {
                let id = match node {
                    NodeSel::Id(id) => *id,
                    NodeSel::Leader => leader_now(&ClusterFile::load(file)?.1)?,
                };
                ctx.ramps.lock().expect("ramps").insert(*ramp, id);
                id
            } else {
                *ctx.ramps
                    .lock()
                    .expect("ramps")
                    .get(ramp)
                    .ok_or("the ramp's node could not be resolved at its first step")?
            };
            let mut lines = exec(&Action::Cpu { node: NodeSel::Id(id), quota: Quota::Percent(*pct) })?;
            if *first && *node == NodeSel::Leader {
                lines.insert(0, format!("ramp on node {id} (the leader at the ramp's start)"));
            }
            Ok(lines)
        }
        StepKind::Isolate(who) => {
            let (_, c) = ClusterFile::load(file)?;
            let running: Vec<NodeId> = c.nodes.iter().filter(|n| n.state == NodeState::Running).map(|n| n.id).collect();
            let (id, why) = match who {
                Who::Id(id) => (*id, String::new()),
                Who::Leader => (leader_now(&c)?, " (the leader)".to_string()),
                Who::Follower => {
                    let l = leader_now(&c)?;
                    let after = running
                        .iter()
                        .copied()
                        .filter(|&n| n > l)
                        .chain(running.iter().copied().filter(|&n| n < l))
                        .next();
                    (after.ok_or("no running follower to isolate")?, format!(" (a follower; leader {l})"))
                }
            };
            let others: Vec<String> = c.ids().into_iter().filter(|&n| n != id).map(|n| format!("{id}-{n}")).collect();
            let links: LinkSet = others.join(",").parse()?;
            let mut lines = exec(&Action::Partition { shape: None, links: Some(links), roles: vec![] })?;
            lines.insert(0, format!("isolating node {id}{why}"));
            Ok(lines)
        }
    }
}

/// Read every running replica's RSS and `/metrics` every `every` from the start of
/// measurement until `done`; pids come from `cluster.toml`, re-read at each sample so that
/// restarted and added replicas are followed.
fn sample_resources(
    cluster_file: PathBuf,
    slot: Arc<OnceLock<Instant>>,
    every: Duration,
    done: Arc<AtomicBool>,
    out: Arc<Mutex<Vec<ResourceSample>>>,
) {
    let start = loop {
        if let Some(t) = slot.get() {
            break *t;
        }
        if done.load(Ordering::SeqCst) {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut k: u32 = 0;
    while !done.load(Ordering::SeqCst) {
        let due = start + every * k;
        let now = Instant::now();
        if now < due {
            std::thread::sleep((due - now).min(Duration::from_millis(50)));
            continue;
        }
        // Skip ticks missed while the machine was busy rather than sampling in a burst.
        k = ((now - start).as_secs_f64() / every.as_secs_f64()).floor() as u32 + 1;
        let Ok((_, c)) = ClusterFile::load(&cluster_file) else { continue };
        for n in c.nodes.iter().filter(|n| n.state == NodeState::Running) {
            let Some(pid) = n.pid else { continue };
            let Ok(kib) = resources::rss_kib(pid) else { continue };
            let t_s = start.elapsed().as_secs_f64();
            let sample = ResourceSample {
                t_s,
                node: n.id,
                pid,
                rss_mb: kib as f64 / 1024.0,
                log_entries: None,
                snapshots: None,
                snapshot_bytes: None,
                state_machine_bytes: None,
                leader: None,
            };
            // A paused replica accepts the connection and never answers: a short timeout.
            let sample = match crate::http::get(n.admin_addr, "/metrics", Duration::from_millis(300)) {
                Ok((200, body)) => sample.with_metrics(&body),
                _ => sample,
            };
            out.lock().expect("samples lock").push(sample);
        }
    }
}

/// Each replica's `/status` (protocol, role, counters) right now, for the summary.
fn statuses(cluster_file: &Path) -> Vec<(NodeId, serde_json::Value)> {
    let Ok((_, c)) = ClusterFile::load(cluster_file) else { return Vec::new() };
    c.nodes
        .iter()
        .filter(|n| n.state == NodeState::Running)
        .filter_map(|n| match crate::http::get(n.admin_addr, "/status", Duration::from_secs(1)) {
            Ok((200, body)) => serde_json::from_str(&body).ok().map(|v| (n.id, v)),
            _ => None,
        })
        .collect()
}

/// The HoliPaxos slowdown-detector counters (overload markers executed, elections they
/// triggered) summed over the replicas that report them.
fn detector_counters(st: &[(NodeId, serde_json::Value)]) -> Option<(u64, u64)> {
    let get = |v: &serde_json::Value, k: &str| v["extra"][k].as_str().and_then(|s| s.parse::<u64>().ok());
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

/// Closed-loop calibration: the throughput this cluster sustains with `clients` clients.
async fn calibrate(
    s: &Scenario,
    target: &TargetSpec,
    spec: &synod_bench::workload::WorkloadSpec,
    length: Duration,
    stop: &Stop,
) -> anyhow::Result<driver::RunResult> {
    let mut cfg = s.bench.run_config(s.load.calibrate_clients, None)?;
    cfg.mode = LoadMode::Closed { think: s.bench.think_time };
    cfg.bound = RunBound::Duration(length);
    if s.bench.progress || std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        cfg.progress = Some(format!("{} calibrating", s.name));
    }
    let mut cal_spec = spec.clone();
    cal_spec.seed = spec.seed.wrapping_add(0xCA1);
    let (t, key_size) = (target.clone(), spec.key_size);
    driver::run(
        move |i| {
            let t = t.clone();
            async move { t.connect(i, key_size).await }
        },
        Workload::new(cal_spec)?,
        &cfg,
        stop.clone(),
    )
    .await
    .context("calibration run")
}

/// Load the records, calibrate, run the workload, fire the schedule, write the files.
async fn measure(
    s: &Scenario,
    v: &Variant,
    dir: &Path,
    cluster_file: &Path,
    target: TargetSpec,
    stop: &Stop,
) -> anyhow::Result<RunOutcome> {
    let label = v.label.as_str();
    let spec = s.bench.workload_spec()?;
    let key_size = spec.key_size;
    if !s.bench.skip_load {
        eprintln!("loading {} records", spec.record_count);
        let t = target.clone();
        let mut load_spec = spec.clone();
        load_spec.seed = spec.seed.wrapping_add(0x10AD);
        let failed = driver::load(
            move |i| {
                let t = t.clone();
                async move { t.connect(i, key_size).await }
            },
            Workload::new(load_spec)?,
            spec.record_count,
            s.bench.clients.clamp(1, 64),
        )
        .await
        .context("loading the records")?;
        if failed > 0 {
            eprintln!("warning: {failed} of {} load inserts failed", spec.record_count);
        }
    }
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\ninterrupted: finishing the current run");
                stop.raise();
            }
        });
    }

    let mut calibrated = None;
    if let Some(length) = s.load.calibrate {
        eprintln!("calibrating: {length:?} closed loop with {} clients", s.load.calibrate_clients);
        let r = calibrate(s, &target, &spec, length, stop).await?;
        let all = r.summary.all();
        if all.throughput <= 0.0 {
            bail!("calibration measured 0 ops/s ({} errors): the cluster does not serve", all.errors);
        }
        eprintln!("calibrated maximum: {:.0} ops/s (p99 {:.2} ms)", all.throughput, all.p99_ms);
        #[derive(serde::Serialize)]
        struct Calibration<'a> {
            clients: usize,
            seconds: f64,
            max_throughput: f64,
            summary: &'a synod_bench::stats::Summary,
        }
        let c = Calibration {
            clients: s.load.calibrate_clients,
            seconds: length.as_secs_f64(),
            max_throughput: all.throughput,
            summary: &r.summary,
        };
        std::fs::write(dir.join("calibration.json"), serde_json::to_vec_pretty(&c)?)?;
        calibrated = Some(all.throughput);
    }
    let initial = match s.load.rate {
        Some(r) => Some(r.ops(calibrated).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let before = tokio::task::spawn_blocking({
        let f = cluster_file.to_path_buf();
        move || statuses(&f)
    })
    .await?;

    let mut cfg = s.bench.run_config(s.bench.clients, initial)?;
    cfg.bound = RunBound::Duration(s.duration);
    let rate = initial.map(RateControl::new);
    cfg.rate_control = rate.clone();
    let slot = Arc::new(OnceLock::new());
    cfg.start_slot = Some(slot.clone());
    let mut title =
        format!("{} · {label} · {} replicas · YCSB-{} · {} clients", s.name, s.replicas, spec.name, cfg.clients);
    if let (Some(r), Some(ops)) = (s.load.rate, initial) {
        let _ = write!(title, " · {ops:.0} ops/s offered");
        if matches!(r, RateSpec::Percent(_)) {
            let _ = write!(title, " ({r})");
        }
    }
    if s.bench.progress || std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        cfg.progress = Some(format!("{} {label}", s.name));
    }

    let ctx = Arc::new(FireCtx {
        cluster_file: cluster_file.to_path_buf(),
        rate: rate.clone(),
        calibrated,
        ramps: Mutex::new(HashMap::new()),
        rate_log: Mutex::new(initial.map(|r| vec![(0.0, r)]).unwrap_or_default()),
    });

    // Memory and log length of every replica, from the start of measurement.
    let samples = Arc::new(Mutex::new(Vec::<ResourceSample>::new()));
    let sampling_done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (f, slot, done, out, every) =
            (cluster_file.to_path_buf(), slot.clone(), sampling_done.clone(), samples.clone(), s.sample);
        std::thread::spawn(move || sample_resources(f, slot, every, done, out))
    };

    // The schedule: each step at its time after the start of measurement.
    let events = Arc::new(Mutex::new(Vec::<Event>::new()));
    let scheduler = {
        let (steps, events, slot, stop, ctx) =
            (s.schedule.clone(), events.clone(), slot.clone(), stop.clone(), ctx.clone());
        tokio::spawn(async move {
            let start: Instant = loop {
                if let Some(t) = slot.get() {
                    break *t;
                }
                if stop.raised() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            };
            for step in steps {
                tokio::time::sleep_until(tokio::time::Instant::from_std(start + step.at)).await;
                if stop.raised() {
                    return;
                }
                let t_s = start.elapsed().as_secs_f64();
                let (kind, ctx) = (step.kind.clone(), ctx.clone());
                let r = tokio::task::spawn_blocking(move || fire(&kind, t_s, &ctx)).await;
                let (ok, detail) = match r {
                    Ok(Ok(lines)) => (true, lines),
                    Ok(Err(e)) => (false, vec![format!("failed: {e}")]),
                    Err(e) => (false, vec![format!("failed: {e}")]),
                };
                eprintln!("\n[{t_s:7.2} s] {}: {}", step.text, detail.join(" | "));
                events.lock().expect("events lock").push(Event {
                    at_s: step.at.as_secs_f64(),
                    t_s,
                    action: step.text.clone(),
                    ok,
                    detail,
                    marker: step.marker,
                });
            }
        })
    };

    let t = target.clone();
    let result = driver::run(
        move |i| {
            let t = t.clone();
            async move { t.connect(i, key_size).await }
        },
        Workload::new(spec.clone())?,
        &cfg,
        stop.clone(),
    )
    .await;
    sampling_done.store(true, Ordering::SeqCst);
    let result = result.context("running the workload")?;
    if stop.raised() {
        scheduler.abort();
    }
    let _ = scheduler.await;
    let _ = sampler.join();
    let after = tokio::task::spawn_blocking({
        let f = cluster_file.to_path_buf();
        move || statuses(&f)
    })
    .await?;
    let events = events.lock().expect("events lock").clone();
    let samples = std::mem::take(&mut *samples.lock().expect("samples lock"));
    let rate_log = ctx.rate_log.lock().expect("rate log").clone();

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
         {} ok, {} rejected, {} errors{}\n",
        all.throughput,
        result.elapsed.as_secs_f64(),
        all.p50_ms,
        all.p99_ms,
        all.p999_ms,
        all.max_ms,
        all.ok,
        all.rejected,
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

    const GOOD: &str = r#"
        name = "crash"
        duration = "30s"
        [cluster]
        protocols = ["multipaxos", "raft+"]
        replicas = 3
        fsync = "never"
        [cluster.params]
        heartbeat_ms = 100
        [workload]
        workload = "a"
        clients = 8
        value_size = "500"
        key_size = 23
        warmup = "1s"
        [[schedule]]
        at = "20s"
        action = "restart all"
        [[schedule]]
        at = "10s"
        action = "kill leader"
    "#;

    fn err(text: &str) -> String {
        format!("{:#}", Scenario::parse(text, "t.toml", 1.0).unwrap_err())
    }

    #[test]
    fn cluster_cpu_quota_is_parsed_and_checked() {
        let with = |q: &str| GOOD.replace("fsync = \"never\"", &format!("fsync = \"never\"\n        cpu_quota = {q}"));
        assert_eq!(Scenario::parse(GOOD, "t.toml", 1.0).unwrap().cpu_quota, None);
        assert_eq!(Scenario::parse(&with("40"), "t.toml", 1.0).unwrap().cpu_quota, Some(40.0));
        assert_eq!(Scenario::parse(&with("12.5"), "t.toml", 1.0).unwrap().cpu_quota, Some(12.5));
        for bad in ["0", "-5", "nan", "7000"] {
            assert!(err(&with(bad)).contains("cpu_quota"), "{bad}: {}", err(&with(bad)));
        }
        assert!(err(&with("\"lots\"")).contains("cpu_quota"));
    }

    #[test]
    fn a_good_file_parses() {
        let s = Scenario::parse(GOOD, "t.toml", 1.0).unwrap();
        assert_eq!(s.name, "crash");
        let labels: Vec<&str> = s.variants.iter().map(|v| v.label.as_str()).collect();
        assert_eq!(labels, vec!["multipaxos", "raft+"]);
        assert_eq!(s.variants[1].dir_name(), "raft-plus");
        assert_eq!(s.variants[1].params.heartbeat_ms, 100, "[cluster.params] apply to every variant");
        assert_eq!(s.sample, Duration::from_millis(500));
        assert_eq!(s.load, Load { rate: None, calibrate: None, calibrate_clients: 8 });
        assert_eq!(s.duration, Duration::from_secs(30));
        assert_eq!(s.bench.duration, Duration::from_secs(30));
        assert_eq!(s.bench.clients, 8);
        assert_eq!(s.bench.warmup, Duration::from_secs(1));
        assert_eq!(s.params.heartbeat_ms, 100);
        assert_eq!(s.fsync, FsyncMode::Never);
        // Sorted by time.
        assert_eq!(s.schedule[0].text, "kill leader");
        assert_eq!(s.schedule[0].at, Duration::from_secs(10));
        assert_eq!(s.schedule[1].kind, StepKind::Fault(Action::Restart { node: crate::fault::NodeOrAll::All }));
        assert_eq!(s.out, PathBuf::from("scenario-out/crash"));

        let scaled = Scenario::parse(GOOD, "t.toml", 0.2).unwrap();
        assert_eq!(scaled.duration, Duration::from_secs(6));
        assert_eq!(scaled.schedule[0].at, Duration::from_secs(2));
    }

    #[test]
    fn bad_files_are_clear_errors() {
        let e = err(&GOOD.replace("replicas = 3", "replicas = 3\nreplica_count = 3"));
        assert!(e.contains("unknown field `replica_count`"), "{e}");
        let e = err(&GOOD.replace("name = \"crash\"", "name = \"crash\"\nspeed = 1"));
        assert!(e.contains("unknown field `speed`"), "{e}");
        let e = err(&GOOD.replace("clients = 8", "clients = 8\nturbo = true"));
        assert!(e.contains("[workload]") && e.contains("turbo"), "{e}");
        let e = err(&GOOD.replace("clients = 8", "clients = \"many\""));
        assert!(e.contains("[workload]") && e.contains("many"), "{e}");
        let e = err(&GOOD.replace("clients = 8", "target = \"redis=1.2.3.4:5\""));
        assert!(e.contains("`target` cannot be set here"), "{e}");
        let e = err(&GOOD.replace("at = \"10s\"", "at = \"10 parsecs\""));
        assert!(e.contains("schedule[1]") && e.contains("unknown unit"), "{e}");
        let e = err(&GOOD.replace("at = \"20s\"", "at = \"45s\""));
        assert!(e.contains("not before the end of the run"), "{e}");
        let e = err(&GOOD.replace("kill leader", "explode leader"));
        assert!(e.contains("schedule[1]") && e.contains("explode"), "{e}");
        let e = err(&GOOD.replace("kill leader", "partition quorum-connected"));
        assert!(e.contains("defined for 5 replicas, this cluster has 3"), "{e}");
        let e = err(&GOOD.replace("kill leader", "kill 4"));
        assert!(e.contains("no node 4"), "{e}");
        let e = err(&GOOD.replace("\"raft+\"", "\"zab\""));
        assert!(e.contains("protocol") && e.contains("zab"), "{e}");
        let e = err(&GOOD.replace("heartbeat_ms", "heartbeat_secs"));
        assert!(e.contains("heartbeat_secs"), "{e}");
        let e = err(&GOOD.replace("duration = \"30s\"", ""));
        assert!(e.contains("missing field `duration`"), "{e}");
        let e = err(&GOOD.replace("warmup = \"1s\"", "sweep = \"clients=1,2\""));
        assert!(e.contains("cannot have a fault schedule"), "{e}");
        let e = err(&GOOD.replace("fsync = \"never\"", "in_memory = true"));
        assert!(e.contains("in-memory"), "{e}");
        let e = err(&GOOD.replace("value_size = \"500\"", "value_size = \"mix:8@x\""));
        assert!(e.contains("not a probability"), "{e}");
    }

    #[test]
    fn shipped_scenarios_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                Scenario::load(&path, 1.0).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
                Scenario::load(&path, 0.2).unwrap_or_else(|e| panic!("{} at scale 0.2: {e:#}", path.display()));
                n += 1;
            }
        }
        assert!(n >= 7, "expected the shipped scenarios in {}, found {n}", dir.display());
    }

    #[test]
    fn variants_carry_their_own_params() {
        let text = GOOD.replace(
            r#"protocols = ["multipaxos", "raft+"]"#,
            r#"protocols = ["holipaxos", "holipaxos[trim=quorum]", "snap:raft+[snapshot_every = 500]", "raft[prevote=true,check_quorum=true]"]"#,
        );
        let s = Scenario::parse(&text, "t.toml", 1.0).unwrap();
        let labels: Vec<&str> = s.variants.iter().map(|v| v.label.as_str()).collect();
        assert_eq!(labels, ["holipaxos", "holipaxos[trim=quorum]", "snap", "raft[prevote=true,check_quorum=true]"]);
        let dirs: Vec<String> = s.variants.iter().map(Variant::dir_name).collect();
        assert_eq!(dirs, ["holipaxos", "holipaxos-trim-quorum", "snap", "raft-prevote-true-check_quorum-true"]);
        assert_eq!(s.variants[1].protocol, "holipaxos");
        assert_eq!(s.variants[1].params.options.get("trim").map(String::as_str), Some("quorum"));
        assert!(s.variants[0].params.options.is_empty(), "a variant's params are its own");
        assert_eq!((s.variants[2].protocol.as_str(), s.variants[2].params.snapshot_every), ("raft+", 500));
        assert_eq!(s.variants[2].params.heartbeat_ms, 100, "on top of [cluster.params]");

        assert_eq!(
            split_variants("holipaxos[trim=quorum,compact_every=10], raft+ ,,multipaxos"),
            ["holipaxos[trim=quorum,compact_every=10]", "raft+", "multipaxos"]
        );
        let mut s = s;
        s.set_variants(&["holipaxos[trim=gle],raft+".into()]).unwrap();
        assert_eq!(s.variants.len(), 2);
        assert!(s.set_variants(&["raft[trim=gle]".into()]).unwrap_err().contains("--protocols"));
    }

    #[test]
    fn bad_variants_are_clear_errors() {
        let with =
            |list: &str| err(&GOOD.replace(r#"protocols = ["multipaxos", "raft+"]"#, &format!("protocols = {list}")));
        let e = with(r#"["raft[trim=gle]"]"#);
        assert!(e.contains("[cluster] protocols") && e.contains("`raft[trim=gle]`") && e.contains("no option"), "{e}");
        let e = with(r#"["holipaxos[trim=sometimes]"]"#);
        assert!(e.contains("sometimes"), "{e}");
        let e = with(r#"["holipaxos[trim=gle"]"#);
        assert!(e.contains("`]` last"), "{e}");
        let e = with(r#"["holipaxos[]"]"#);
        assert!(e.contains("empty `[]`"), "{e}");
        let e = with(r#"["holipaxos[trim]"]"#);
        assert!(e.contains("KEY=VALUE"), "{e}");
        let e = with(r#"["holipaxos[heartbeat_ms=fast]"]"#);
        assert!(e.contains("not a non-negative integer"), "{e}");
        let e = with(r#"["zab[x=1]"]"#);
        assert!(e.contains("unknown protocol") && e.contains("zab"), "{e}");
        let e = with(r#"["holipaxos", "HoliPaxos"]"#);
        assert!(e.contains("share the output folder"), "{e}");
        let e = with(r#"["bad/label:raft"]"#);
        assert!(e.contains("label `bad/label`"), "{e}");
        let e = with(r#"[":raft"]"#);
        assert!(e.contains("empty label"), "{e}");
    }

    fn with_steps(load: &str, steps: &[(&str, &str)]) -> String {
        let mut t = GOOD.split("[[schedule]]").next().unwrap().to_string();
        t.push_str(load);
        for (at, action) in steps {
            t.push_str(&format!("\n[[schedule]]\nat = \"{at}\"\naction = \"{action}\"\n"));
        }
        t
    }

    #[test]
    fn rates_and_calibration() {
        let text =
            with_steps("\n[load]\ncalibrate = \"10s\"\nrate = \"30%\"\n", &[("10s", "rate 45%"), ("20s", "rate 4000")]);
        let s = Scenario::parse(&text, "t.toml", 1.0).unwrap();
        assert_eq!(s.load.rate, Some(RateSpec::Percent(30.0)));
        assert_eq!(s.load.calibrate, Some(Duration::from_secs(10)));
        assert_eq!(s.schedule[0].kind, StepKind::Rate(RateSpec::Percent(45.0)));
        assert_eq!(s.schedule[1].kind, StepKind::Rate(RateSpec::Ops(4000.0)));
        // The calibration is scaled like the run, but not below 5 s.
        let quick = Scenario::parse(&text, "t.toml", 0.1).unwrap();
        assert_eq!(quick.load.calibrate, Some(Duration::from_secs(5)));
        assert_eq!(RateSpec::Percent(60.0).ops(Some(5000.0)), Ok(3000.0));
        assert!(RateSpec::Percent(60.0).ops(None).unwrap_err().contains("calibrate"));

        let s = Scenario::parse(&with_steps("\n[load]\nrate = 2500\n", &[("5s", "rate 3000")]), "t.toml", 1.0).unwrap();
        assert_eq!(s.load.rate, Some(RateSpec::Ops(2500.0)));

        let e = err(&with_steps("\n[load]\nrate = 2500\n", &[("5s", "rate fast")]));
        assert!(e.contains("schedule[0]") && e.contains("rate `fast`") && e.contains("60%"), "{e}");
        let e = err(&with_steps("\n[load]\nrate = 2500\n", &[("5s", "rate -5")]));
        assert!(e.contains("must be positive"), "{e}");
        let e = err(&with_steps("\n[load]\nrate = 2500\n", &[("5s", "rate 10 20")]));
        assert!(e.contains("expected `rate OPS` or `rate PCT%`"), "{e}");
        let e = err(&with_steps("\n[load]\nrate = \"60%\"\n", &[]));
        assert!(e.contains("set [load] calibrate"), "{e}");
        let e = err(&with_steps("", &[("5s", "rate 3000")]));
        assert!(e.contains("closed loop") && e.contains("[load] rate"), "{e}");
        let e = err(&with_steps("\n[load]\nrate = true\n", &[]));
        assert!(e.contains("a boolean is not a rate"), "{e}");
        let e = err(&with_steps("\n[load]\nrate = \"5000%\"\ncalibrate = \"5s\"\n", &[]));
        assert!(e.contains("typo"), "{e}");
        let e = err(&with_steps("\n[load]\nrate = 100\nburst = 3\n", &[]));
        assert!(e.contains("unknown field `burst`"), "{e}");
        let e = err(&with_steps("\n[load]\nrate = 100\n", &[]).replace("clients = 8", "clients = 8\nrate = 50"));
        assert!(e.contains("both [workload] rate and [load] rate"), "{e}");
    }

    #[test]
    fn cpu_ramps_expand_into_quota_steps() {
        let text = with_steps("", &[("2s", "cpu leader --ramp 100:40 --over 20s --every 5s")]);
        let s = Scenario::parse(&text, "t.toml", 1.0).unwrap();
        let steps: Vec<(u64, f64, bool)> = s
            .schedule
            .iter()
            .map(|st| match st.kind {
                StepKind::Ramp { pct, node: NodeSel::Leader, ramp: 0, first } => {
                    assert_eq!(first, st.marker, "only the first step is a marker");
                    (st.at.as_secs(), pct, first)
                }
                ref k => panic!("{k:?}"),
            })
            .collect();
        assert_eq!(
            steps,
            [(2, 100.0, true), (7, 85.0, false), (12, 70.0, false), (17, 55.0, false), (22, 40.0, false)]
        );
        assert!(s.schedule[0].text.contains("ramp 100%->40%"), "{}", s.schedule[0].text);
        // Scaled like every other time; --every defaults to --over / 10.
        let s = Scenario::parse(&with_steps("", &[("10s", "cpu 2 --ramp 100:40 --over 10s")]), "t.toml", 0.5).unwrap();
        assert_eq!(s.schedule.len(), 11);
        assert_eq!(s.schedule[10].at, Duration::from_millis(10_000));
        assert!(matches!(s.schedule[10].kind, StepKind::Ramp { pct, node: NodeSel::Id(2), .. } if pct == 40.0));

        let bad = |a: &str| err(&with_steps("", &[("2s", a)]));
        let e = bad("cpu leader --ramp 100-40 --over 10s");
        assert!(e.contains("expected FROM:TO"), "{e}");
        let e = bad("cpu leader --ramp 100:0 --over 10s");
        assert!(e.contains("at least 1"), "{e}");
        let e = bad("cpu leader --ramp 100:40");
        assert!(e.contains("needs --over"), "{e}");
        let e = bad("cpu leader --ramp 100:40 --over 60s");
        assert!(e.contains("not before the end of the run"), "{e}");
        let e = bad("cpu leader --ramp 100:40 --over 10s --every 20s");
        assert!(e.contains("at most --over"), "{e}");
        let e = bad("cpu leader --ramp 100:40 --over 10s --steps 3");
        assert!(e.contains("unexpected `--steps`"), "{e}");
        let e = bad("cpu 7 --ramp 100:40 --over 10s");
        assert!(e.contains("no node 7"), "{e}");
        let e = bad("cpu leader --ramp 100:40 --over");
        assert!(e.contains("needs a value"), "{e}");
    }

    #[test]
    fn scenario_actions_cpu_all_and_isolate() {
        let s = Scenario::parse(
            &with_steps("", &[("2s", "cpu all --quota off"), ("3s", "isolate follower"), ("4s", "isolate 3")]),
            "t.toml",
            1.0,
        )
        .unwrap();
        let StepKind::Faults(actions) = &s.schedule[0].kind else { panic!("{:?}", s.schedule[0].kind) };
        assert_eq!(actions.len(), 3);
        assert_eq!(actions[2], Action::Cpu { node: NodeSel::Id(3), quota: Quota::Off });
        assert_eq!(s.schedule[1].kind, StepKind::Isolate(Who::Follower));
        assert_eq!(s.schedule[2].kind, StepKind::Isolate(Who::Id(3)));
        let e = err(&with_steps("", &[("2s", "cpu all --quota lots")]));
        assert!(e.contains("lots"), "{e}");
        let e = err(&with_steps("", &[("2s", "isolate 9")]));
        assert!(e.contains("no node 9"), "{e}");
        let e = err(&with_steps("", &[("2s", "isolate someone")]));
        assert!(e.contains("not leader, follower or a node id"), "{e}");
    }

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
                errors: 0,
                throughput: ok as f64,
                p50_ms: 1.0,
                p90_ms: 1.0,
                p99_ms: 2.0,
                p999_ms: 2.0,
                max_ms: 2.0,
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
