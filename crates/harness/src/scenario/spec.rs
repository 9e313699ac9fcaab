//! Scenario files: the TOML as written, and its parsing into a checked [`Scenario`] —
//! variants, times (scaled by `--scale`), the `[workload]` table as `synod bench` arguments,
//! the load settings and the schedule (fault actions checked against the cluster, scenario
//! actions such as ramps expanded into steps). Nothing here starts a process.

use super::variant::{parse_variants, split_variants, Variant};
use crate::nemesis::{Action, NodeSel};
use anyhow::{bail, Context as _};
use clap::Parser;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use synod_bench::cli::{parse_duration, BenchArgs};
use synod_bench::plot::Marker;
use synod_core::{NodeId, ProtocolParams};
use synod_wal::FsyncMode;

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
    #[serde(default)]
    sites: Option<SitesSection>,
}

/// `[sites]`: one site per replica, the RTTs between them, clients at each (EPaxos Fig. 4).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct SitesSection {
    names: Vec<String>,
    rtt_ms: Vec<Vec<f64>>,
    clients_per_site: usize,
    #[serde(default)]
    leader_site: Option<String>,
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
    /// One slow replica from its start: `slow = { node = 3, cpu_quota = 20 }` (EPaxos Fig. 5/6).
    #[serde(default)]
    slow: Option<SlowSection>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct SlowSection {
    node: NodeId,
    cpu_quota: f64,
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

/// An open-loop rate: operations per second, or a percentage of the calibrated maximum.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RateSpec {
    /// Operations per second.
    Ops(f64),
    /// Percent of the calibrated maximum.
    Percent(f64),
}

impl RateSpec {
    /// Parse `4000`, `4000 ops/s` or `60%`.
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
    /// The leader.
    Leader,
    /// The first running replica after the leader in id order (wrapping).
    Follower,
    /// This replica.
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
    /// Multiply every value size the workload draws from now on by this (`value-scale X`).
    ValueScale(f64),
    /// One step of CPU ramp number `ramp`: quota `pct` on the node its first step resolved.
    Ramp {
        /// Which ramp of the schedule (0, 1, ...).
        ramp: usize,
        /// The node as written; resolved at the ramp's first step.
        node: NodeSel,
        /// The quota of this step, percent of one CPU.
        pct: f64,
        /// The ramp's first step (resolves the node, drawn as a marker).
        first: bool,
    },
    /// Cut every link of one replica, both ways.
    Isolate(Who),
}

/// One scheduled step.
#[derive(Clone, Debug)]
pub struct Step {
    /// When, after the start of measurement (scaled).
    pub at: Duration,
    /// The action as written (whitespace normalized), or a ramp step's description.
    pub text: String,
    /// What it does.
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
    /// Clients of the calibration run (default: the workload's).
    pub calibrate_clients: usize,
}

/// Wide-area sites (`[sites]`): site `s` is one replica, `clients_per_site` clients sit at
/// each (client `i` at site `i mod n`, its home replica that site's), the replicas' links
/// and the clients' trips to other sites' replicas carry half the RTT each way.
#[derive(Clone, Debug, PartialEq)]
pub struct Sites {
    /// Site names, one per replica.
    pub names: Vec<String>,
    /// Symmetric round-trip times in ms, zero on the diagonal.
    pub rtt_ms: Vec<Vec<f64>>,
    /// Clients at each site.
    pub clients_per_site: usize,
    /// Index of the site where a leader-based protocol's leader sits: the sites are mapped
    /// onto replica ids so that this site is the leader's (None: site `s` is replica `s + 1`).
    pub leader_site: Option<usize>,
}

impl Sites {
    /// Check the section against a cluster of `replicas`.
    fn check(sec: &SitesSection, replicas: u32) -> Result<Sites, String> {
        let n = sec.names.len();
        if n != replicas as usize {
            return Err(format!("{n} site names for {replicas} replicas: give one site per replica"));
        }
        for (i, name) in sec.names.iter().enumerate() {
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_".contains(c)) {
                return Err(format!("site name `{name}` must be letters, digits, `-` or `_`"));
            }
            if sec.names[..i].contains(name) {
                return Err(format!("site `{name}` is named twice"));
            }
        }
        if sec.rtt_ms.len() != n || sec.rtt_ms.iter().any(|row| row.len() != n) {
            return Err(format!("rtt_ms must be a {n}×{n} matrix (one row per site, in the order of `names`)"));
        }
        for i in 0..n {
            for j in 0..n {
                let v = sec.rtt_ms[i][j];
                if !(v.is_finite() && v >= 0.0) {
                    return Err(format!("rtt_ms[{i}][{j}] = {v}: must be a finite number of ms >= 0"));
                }
                if i == j && v != 0.0 {
                    return Err(format!("rtt_ms[{i}][{i}] = {v}: a site is at distance 0 from itself"));
                }
                if v != sec.rtt_ms[j][i] {
                    return Err(format!(
                        "rtt_ms[{i}][{j}] = {v} but rtt_ms[{j}][{i}] = {}: RTTs are symmetric",
                        sec.rtt_ms[j][i]
                    ));
                }
            }
        }
        if sec.clients_per_site == 0 {
            return Err("clients_per_site must be at least 1".into());
        }
        let leader_site = match &sec.leader_site {
            None => None,
            Some(l) => Some(
                sec.names
                    .iter()
                    .position(|n| n == l)
                    .ok_or_else(|| format!("leader_site `{l}` is not one of the names {:?}", sec.names))?,
            ),
        };
        Ok(Sites {
            names: sec.names.clone(),
            rtt_ms: sec.rtt_ms.clone(),
            clients_per_site: sec.clients_per_site,
            leader_site,
        })
    }

    /// Replica id of each site, given the replica that leads (`leader`; for leaderless
    /// protocols the first replica): the leader site maps to `leader`, the others follow in
    /// id order.
    pub fn replicas(&self, leader: NodeId) -> Vec<NodeId> {
        let n = self.names.len() as u32;
        let shift = match self.leader_site {
            Some(ls) => (leader.saturating_sub(1) + n - ls as u32) % n,
            None => 0,
        };
        (0..n).map(|s| (s + shift) % n + 1).collect()
    }
}

/// A checked scenario.
#[derive(Debug)]
pub struct Scenario {
    /// `name` (default: the file's stem); names the output folder and plots.
    pub name: String,
    /// `description`, the first line of the summary.
    pub description: Option<String>,
    /// Measured time (scaled).
    pub duration: Duration,
    /// Tumbling window of `windows.csv` and the normalized plots (default 10 s).
    pub window: Duration,
    /// Replica memory / metrics sampling period (default 500 ms).
    pub sample: Duration,
    /// Output folder (`out`, `--out`, default `scenario-out/<name>`).
    pub out: PathBuf,
    /// The protocol runs, one after another.
    pub variants: Vec<Variant>,
    /// Replicas per cluster.
    pub replicas: u32,
    /// No write-ahead logs.
    pub in_memory: bool,
    /// When WAL commits reach the disk.
    pub fsync: FsyncMode,
    /// Parent directory of each run's cluster directory (default: the temp dir).
    pub data_dir: Option<PathBuf>,
    /// Log filter of the replicas (default `info`).
    pub log_level: String,
    /// `[cluster.params]` (each variant's params start from these).
    pub params: ProtocolParams,
    /// `[cluster] cpu_quota`: percent of one CPU per replica from its start.
    pub cpu_quota: Option<f64>,
    /// `[cluster] slow`: (node, percent of one CPU) for one replica from its start, applied
    /// after `cpu_quota`.
    pub slow: Option<(NodeId, f64)>,
    /// The workload; its target is filled in per run.
    pub bench: BenchArgs,
    /// `[load]`: open loop and calibration.
    pub load: Load,
    /// The steps, sorted by time (ramps expanded).
    pub schedule: Vec<Step>,
    /// `[sites]`: wide-area client placement and RTTs.
    pub sites: Option<Sites>,
    /// The synod executable the replicas run (not from the file; see
    /// [`crate::cluster::Spec::server_exe`]). None: the running executable.
    pub server_exe: Option<PathBuf>,
    /// Ports from this base ([`crate::cluster::Ports::Base`]); None: ports the OS hands out.
    pub base_port: Option<u16>,
}

/// `synod bench` options a scenario sets itself.
const RESERVED: &[(&str, &str)] = &[
    ("target", "the scenario's cluster is the target"),
    ("out", "use the scenario's `out` or --out"),
    ("compare", "a scenario runs its protocols one after another"),
    ("duration", "use the scenario's top-level `duration`"),
    ("ops", "scenarios are timed: use `duration`"),
    ("marker", "markers come from the schedule"),
    (
        "protocol-option",
        "give protocol options to the variant (`idem[ambivalence=pessimistic]`) or [cluster.params]: \
         they reach both the replicas and the client policy",
    ),
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
        ["value-scale", rest @ ..] => match rest {
            [x] => match x.parse::<f64>() {
                Ok(f) if f > 0.0 && f.is_finite() => Ok(vec![step(StepKind::ValueScale(f))]),
                _ => Err(format!("action `{norm}`: `{x}` is not a positive factor")),
            },
            _ => Err(format!("action `{norm}`: expected `value-scale FACTOR` (e.g. 0.0625 for 64 KB -> 4 KB)")),
        },
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
        let mut bench = bench;
        let sites = match &file.sites {
            None => None,
            Some(sec) => {
                let sites = Sites::check(sec, c.replicas).map_err(|e| anyhow::anyhow!("{origin}: [sites] {e}"))?;
                if file.workload.contains_key("clients") {
                    bail!("{origin}: [sites] sets the clients (clients_per_site × sites): remove [workload] clients");
                }
                if bench.sweep.is_some() || rate.is_some() || calibrate.is_some() {
                    bail!("{origin}: [sites] runs are closed loop without a sweep (per-site clients are the load)");
                }
                bench.clients = sites.clients_per_site * sites.names.len();
                Some(sites)
            }
        };
        let slow = match &c.slow {
            None => None,
            Some(sl) => {
                if !(1..=c.replicas).contains(&sl.node) {
                    bail!("{origin}: [cluster] slow: no node {} in a cluster of {}", sl.node, c.replicas);
                }
                if !(sl.cpu_quota.is_finite() && sl.cpu_quota > 0.0 && sl.cpu_quota <= 6400.0) {
                    bail!(
                        "{origin}: [cluster] slow: cpu_quota = {}: expected a percentage of one CPU above 0",
                        sl.cpu_quota
                    );
                }
                Some((sl.node, sl.cpu_quota))
            }
        };
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
            slow,
            bench: BenchArgs { duration, ..bench },
            load: Load { rate, calibrate, calibrate_clients },
            schedule,
            sites,
            server_exe: None,
            base_port: None,
        })
    }

    /// Read and parse the file at `path` (see [`Scenario::parse`]).
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

    /// One line saying what the scenario runs: variants, replicas, measured time, load and
    /// schedule (what `synod scenario check` prints).
    pub fn describe(&self) -> String {
        let load = match (&self.load.rate, self.load.calibrate) {
            (None, _) => "closed loop".to_string(),
            (Some(r), None) => format!("open loop at {r}"),
            (Some(r), Some(c)) => format!("open loop at {r}, calibrated by a {c:?} closed-loop run"),
        };
        format!(
            "{}: {} x {} replicas, {:?} measured, {load}, {} step(s): {}",
            self.name,
            self.variants.iter().map(|v| v.label.as_str()).collect::<Vec<_>>().join(", "),
            self.replicas,
            self.duration,
            self.schedule.len(),
            self.schedule.iter().map(|st| format!("{:?} {}", st.at, st.text)).collect::<Vec<_>>().join("; ")
        )
    }

    /// The schedule's plot markers (a ramp's later steps are not drawn).
    pub(crate) fn markers(&self) -> Vec<Marker> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nemesis::{NodeOrAll, Quota};

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
    fn a_slow_replica_and_sites_are_parsed_and_checked() {
        let slow = |t: &str| GOOD.replace("fsync = \"never\"", &format!("fsync = \"never\"\n        slow = {t}"));
        assert_eq!(Scenario::parse(GOOD, "t.toml", 1.0).unwrap().slow, None);
        assert_eq!(
            Scenario::parse(&slow("{ node = 3, cpu_quota = 20 }"), "t.toml", 1.0).unwrap().slow,
            Some((3, 20.0))
        );
        assert!(err(&slow("{ node = 4, cpu_quota = 20 }")).contains("no node 4"));
        assert!(err(&slow("{ node = 2, cpu_quota = 0 }")).contains("cpu_quota"));
        assert!(err(&slow("{ node = 2 }")).contains("cpu_quota"));

        let sites = |body: &str| format!("{}\n[sites]\n{body}\n", GOOD.replace("clients = 8\n", ""));
        let good = r#"names = ["CA", "VA", "EU"]
rtt_ms = [[0, 72, 151], [72, 0, 80], [151, 80, 0]]
clients_per_site = 10
leader_site = "VA""#;
        let s = Scenario::parse(&sites(good), "t.toml", 1.0).unwrap();
        let st = s.sites.clone().unwrap();
        assert_eq!(s.bench.clients, 30, "clients_per_site × sites");
        assert_eq!(st.leader_site, Some(1));
        assert_eq!(st.replicas(1), vec![3, 1, 2], "leader node 1 sits at VA");
        assert_eq!(st.replicas(3), vec![2, 3, 1]);
        let bad = |from: &str, to: &str| err(&sites(&good.replace(from, to)));
        assert!(bad("\"EU\"]", "\"EU\", \"JP\"]").contains("4 site names for 3 replicas"));
        assert!(bad("[151, 80, 0]]", "[151, 81, 0]]").contains("symmetric"));
        assert!(bad("[0, 72, 151]", "[5, 72, 151]").contains("distance 0"));
        assert!(bad("[0, 72, 151],", "[0, 72],").contains("3×3"));
        assert!(bad("leader_site = \"VA\"", "leader_site = \"JP\"").contains("leader_site `JP`"));
        assert!(bad("= 10", "= 0").contains("at least 1"));
        assert!(err(&format!("{}\n[sites]\n{good}\n", GOOD)).contains("remove [workload] clients"));
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
        assert_eq!(s.schedule[1].kind, StepKind::Fault(Action::Restart { node: NodeOrAll::All }));
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
        let e = err(&GOOD.replace("clients = 8", "protocol_option = [\"ambivalence=pessimistic\"]"));
        assert!(e.contains("`protocol_option` cannot be set here") && e.contains("variant"), "{e}");
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
}
