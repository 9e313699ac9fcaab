//! `synod scenario run FILE`: start a cluster, drive a workload, fire faults at given times,
//! and write the results (CSV, JSON, PNG timeline with the faults marked, summary.txt).
//!
//! A scenario is a TOML file:
//!
//! ```toml
//! name = "leader-crash"
//! duration = "60s"            # measured time (after the workload's warm-up)
//! window = "10s"              # normalized-throughput windows (HoliPaxos Fig. 9 uses 10 s)
//! [cluster]
//! protocols = ["multipaxos", "raft", "raft+"]   # or protocol = "raft"; run one after another
//! replicas = 3
//! fsync = "batch"             # in_memory, fsync, data_dir, log_level, [cluster.params]
//! [workload]                  # any `synod bench` option, named as on its command line
//! workload = "a"
//! clients = 16
//! [[schedule]]
//! at = "20s"
//! action = "kill leader"      # any `synod fault` action
//! [[schedule]]
//! at = "35s"
//! action = "restart all"
//! ```
//!
//! The cluster is the one `synod local` runs ([`crate::cluster`], on free ports), this
//! process supervising it; the workload is `synod bench`'s (its argument struct parses the
//! `[workload]` table, so every option and check is the same); the faults are
//! [`crate::fault::execute`] on the cluster's `cluster.toml`, exactly as `synod fault` does it.
//! Fault times count from the start of measurement (the timeline's zero).

use crate::cluster::{Cluster, Ports, Spec, StartError, POLL};
use crate::fault::Action;
use anyhow::{bail, Context as _};
use clap::Parser;
use serde::Deserialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use synod_bench::cli::{parse_duration, BenchArgs};
use synod_bench::driver::{self, RunBound, Stop};
use synod_bench::plot::{self, Marker};
use synod_bench::report::{self, RunMeta};
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
    /// Multiply the duration and every fault time by this (e.g. 0.2 for a quick run of a
    /// paper-scale scenario).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Run these protocols instead of the file's (comma-separated).
    #[arg(long, value_delimiter = ',')]
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
    out: Option<PathBuf>,
    cluster: ClusterSection,
    #[serde(default)]
    workload: toml::Table,
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

/// One scheduled fault.
#[derive(Clone, Debug)]
pub struct Step {
    pub at: Duration,
    pub text: String,
    pub action: Action,
}

/// A checked scenario.
#[derive(Debug)]
pub struct Scenario {
    pub name: String,
    pub description: Option<String>,
    pub duration: Duration,
    pub window: Duration,
    pub out: PathBuf,
    pub protocols: Vec<String>,
    pub replicas: u32,
    pub in_memory: bool,
    pub fsync: FsyncMode,
    pub data_dir: Option<PathBuf>,
    pub log_level: String,
    pub params: ProtocolParams,
    /// The workload; its target is filled in per run.
    pub bench: BenchArgs,
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
        let c = &file.cluster;
        let protocols = match (&c.protocol, &c.protocols) {
            (Some(_), Some(_)) => bail!("{origin}: [cluster] has both `protocol` and `protocols`; keep one"),
            (Some(p), None) => vec![p.clone()],
            (None, Some(ps)) if !ps.is_empty() => ps.clone(),
            (None, Some(_)) => bail!("{origin}: [cluster] protocols is empty"),
            (None, None) => vec!["multipaxos".to_string()],
        };
        for p in &protocols {
            synod_protocols::registry::find(p).map_err(|e| anyhow::anyhow!("{origin}: [cluster] protocol: {e}"))?;
        }
        if !(1..=99).contains(&c.replicas) {
            bail!("{origin}: [cluster] replicas = {}: must be 1 to 99", c.replicas);
        }
        let bench = bench_args(&file.workload).map_err(|e| anyhow::anyhow!("{origin}: [workload] {e}"))?;
        let ids: Vec<NodeId> = (1..=c.replicas).collect();
        let mut schedule = Vec::new();
        for (i, s) in file.schedule.iter().enumerate() {
            let what = format!("schedule[{i}] (action `{}`)", s.action);
            let at = time(&format!("{what}: at"), &s.at)?;
            if at >= duration {
                bail!("{origin}: {what}: at = {:?} is not before the end of the run (duration {:?})", at, duration);
            }
            let action = Action::parse_words(&s.action).map_err(|e| anyhow::anyhow!("{origin}: {what}: {e}"))?;
            if matches!(action, Action::Show) {
                bail!("{origin}: {what}: `show` is not a fault");
            }
            action.check(&ids).map_err(|e| anyhow::anyhow!("{origin}: {what}: {e}"))?;
            schedule.push(Step { at, text: s.action.split_whitespace().collect::<Vec<_>>().join(" "), action });
        }
        schedule.sort_by_key(|s| s.at);
        if bench.sweep.is_some() && !schedule.is_empty() {
            bail!("{origin}: a sweep runs the workload several times; it cannot have a fault schedule");
        }
        if bench.rounds != 1 && !schedule.is_empty() {
            bail!("{origin}: [workload] rounds must be 1 with a fault schedule");
        }
        if c.in_memory && schedule.iter().any(|s| matches!(s.action, Action::Restart { .. })) {
            bail!(
                "{origin}: [cluster] in_memory = true with a restart in the schedule: a restarted in-memory \
                 replica comes back empty, which breaks the protocols' durability assumption; use a WAL \
                 (fsync = \"never\" keeps it fast)"
            );
        }
        let out = file.out.clone().unwrap_or_else(|| PathBuf::from("scenario-out").join(&name));
        Ok(Scenario {
            name,
            description: file.description,
            duration,
            window,
            out,
            protocols,
            replicas: c.replicas,
            in_memory: c.in_memory,
            fsync: c.fsync,
            data_dir: c.data_dir.clone(),
            log_level: c.log_level.clone().unwrap_or_else(|| "info".into()),
            params: c.params.clone(),
            bench: BenchArgs { duration, ..bench },
            schedule,
        })
    }

    pub fn load(path: &Path, scale: f64) -> anyhow::Result<Scenario> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        Scenario::parse(&text, &path.display().to_string(), scale)
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
                println!(
                    "{}: {} x {} replicas, {:?} measured, {} fault(s): {}",
                    s.name,
                    s.protocols.join(","),
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
                for p in &run.protocols {
                    if let Err(e) = synod_protocols::registry::find(p) {
                        eprintln!("error: --protocols: {e}");
                        return ExitCode::from(2);
                    }
                }
                s.protocols = run.protocols.clone();
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

/// A fault as it happened.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Event {
    /// Planned time (s since the start of measurement).
    pub at_s: f64,
    /// When it was applied (s since the start of measurement).
    pub t_s: f64,
    pub action: String,
    pub ok: bool,
    pub detail: Vec<String>,
}

/// What one protocol's run produced, for the combined outputs.
struct RunOutcome {
    protocol: String,
    windows: Vec<(f64, f64, f64)>,
    summary: String,
}

/// Run every protocol of the scenario, one after another.
pub fn run_scenario(s: &Scenario) -> anyhow::Result<()> {
    std::fs::create_dir_all(&s.out).with_context(|| format!("creating {}", s.out.display()))?;
    let stop = Stop::new();
    let mut outcomes = Vec::new();
    for protocol in &s.protocols {
        if stop.raised() {
            break;
        }
        let dir = if s.protocols.len() > 1 { s.out.join(protocol.replace('+', "-plus")) } else { s.out.clone() };
        println!("== {} · {protocol} · {} replicas → {}", s.name, s.replicas, dir.display());
        outcomes.push(run_one(s, protocol, &dir, &stop)?);
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
        let mut csv = String::from("protocol,window_start_s,window_end_s,throughput_ops_s,normalized\n");
        for o in &outcomes {
            for (start, tput, norm) in &o.windows {
                let _ = writeln!(
                    csv,
                    "{},{start:.1},{:.1},{tput:.1},{norm:.4}",
                    o.protocol,
                    start + s.window.as_secs_f64()
                );
            }
        }
        std::fs::write(s.out.join("normalized.csv"), csv)?;
        let series: Vec<(String, Vec<(f64, f64)>)> = outcomes
            .iter()
            .map(|o| {
                let half = s.window.as_secs_f64() / 2.0;
                (o.protocol.clone(), o.windows.iter().map(|(start, _, n)| (start + half, *n)).collect())
            })
            .collect();
        let markers: Vec<Marker> =
            s.schedule.iter().map(|st| Marker { t_s: st.at.as_secs_f64(), label: st.text.clone() }).collect();
        plot::series_over_time(
            &s.out.join("normalized.png"),
            &format!(
                "{}: throughput in {:.0} s windows, normalized to each protocol's best",
                s.name,
                s.window.as_secs_f64()
            ),
            "normalized throughput",
            &series,
            &markers,
        )?;
    }
    std::fs::write(s.out.join("summary.txt"), &text)?;
    print!("\n{text}");
    println!("results in {}", s.out.display());
    if stop.raised() {
        bail!("interrupted");
    }
    Ok(())
}

/// One protocol: cluster up, load, run with the schedule, outputs, cluster down.
fn run_one(s: &Scenario, protocol: &str, dir: &Path, stop: &Stop) -> anyhow::Result<RunOutcome> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let parent = s.data_dir.clone().unwrap_or_else(std::env::temp_dir);
    let cluster_dir = parent.join(format!(
        "synod-scenario-{}-{}-{}-{stamp}",
        s.name,
        protocol.replace('+', "plus"),
        std::process::id()
    ));
    let spec = Spec {
        nodes: s.replicas,
        protocol: protocol.to_string(),
        data_dir: Some(cluster_dir.clone()),
        in_memory: s.in_memory,
        fsync: s.fsync,
        ports: Ports::Free,
        log_level: s.log_level.clone(),
        params: s.params.clone(),
    };
    let cluster = Cluster::start(&spec).map_err(|e| match e {
        StartError::Usage(m) | StartError::Failed(m) => anyhow::anyhow!("starting the {protocol} cluster: {m}"),
    })?;
    let file_path = cluster.file_path.clone();
    let endpoints = cluster.client_endpoints();
    println!("cluster file: {}", file_path.display());

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
        let target: TargetSpec = format!("{}:synod={}", protocol.replace('+', "-plus"), endpoints.join(","))
            .parse()
            .map_err(anyhow::Error::msg)?;
        if s.bench.sweep.is_some() {
            let args = BenchArgs { targets: vec![target], out: dir.to_path_buf(), ..s.bench.clone() };
            rt.block_on(synod_bench::cli::run_bench(args))?;
            let medians = std::fs::read_to_string(dir.join("medians.csv")).unwrap_or_default();
            return Ok(RunOutcome {
                protocol: protocol.to_string(),
                windows: Vec::new(),
                summary: format!("{protocol}: sweep medians (medians.csv, sweep.png in {})\n{medians}", dir.display()),
            });
        }
        rt.block_on(measure(s, protocol, dir, &file_path, target, stop))
    })();

    done.store(true, Ordering::SeqCst);
    let _ = supervisor.join();
    // Keep the replica logs with the results; the data directory (WALs) goes.
    let logs = dir.join("logs");
    let _ = std::fs::create_dir_all(&logs);
    for id in 1..=s.replicas {
        let _ = std::fs::copy(cluster_dir.join(format!("node{id}.log")), logs.join(format!("node{id}.log")));
    }
    let supervisor_log = supervisor_log.lock().expect("log lock").join("\n");
    let _ = std::fs::write(logs.join("supervisor.log"), supervisor_log);
    let _ = std::fs::remove_dir_all(&cluster_dir);
    result
}

/// Load the records, run the workload, fire the schedule, write the files.
async fn measure(
    s: &Scenario,
    protocol: &str,
    dir: &Path,
    cluster_file: &Path,
    target: TargetSpec,
    stop: &Stop,
) -> anyhow::Result<RunOutcome> {
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
    let mut cfg = s.bench.run_config(s.bench.clients, s.bench.rate)?;
    cfg.bound = RunBound::Duration(s.duration);
    let slot = Arc::new(OnceLock::new());
    cfg.start_slot = Some(slot.clone());
    let title =
        format!("{} · {protocol} · {} replicas · YCSB-{} · {} clients", s.name, s.replicas, spec.name, cfg.clients);
    if s.bench.progress || std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        cfg.progress = Some(format!("{} {protocol}", s.name));
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

    // The schedule: each fault at its time after the start of measurement.
    let events = Arc::new(Mutex::new(Vec::<Event>::new()));
    let scheduler = {
        let (steps, events, slot, file, stop) =
            (s.schedule.clone(), events.clone(), slot.clone(), cluster_file.to_path_buf(), stop.clone());
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
                let (file, action) = (file.clone(), step.action.clone());
                let r = tokio::task::spawn_blocking(move || crate::fault::execute(&file, &action)).await;
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
    .await
    .context("running the workload")?;
    if stop.raised() {
        scheduler.abort();
    }
    let _ = scheduler.await;
    let events = events.lock().expect("events lock").clone();

    let markers: Vec<Marker> = events
        .iter()
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

    let rows = result.recorder.timeline_rows();
    let windows = windows(&rows, s.window.as_secs_f64());
    let mut wcsv = String::from("window_start_s,window_end_s,throughput_ops_s,normalized\n");
    for (start, tput, norm) in &windows {
        let _ = writeln!(wcsv, "{start:.1},{:.1},{tput:.1},{norm:.4}", start + s.window.as_secs_f64());
    }
    std::fs::write(dir.join("windows.csv"), wcsv)?;

    let all = result.summary.all();
    let mut summary = format!(
        "{protocol}: {:.0} ops/s over {:.1} s, p50 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms, max {:.1} ms; \
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
    summary.push_str(&analyze(&rows, &events));
    let _ = writeln!(summary, "files: {}", dir.display());
    std::fs::write(dir.join("summary.txt"), &summary)?;
    Ok(RunOutcome { protocol: protocol.to_string(), windows, summary })
}

/// Mean throughput in tumbling windows of `w` seconds, and normalized to the best window:
/// (window start, ops/s, normalized).
pub fn windows(rows: &[TimelineRow], w: f64) -> Vec<(f64, f64, f64)> {
    let interval = rows.get(1).map_or(1.0, |r| r.t_s - rows[0].t_s).max(1e-9);
    let end = rows.len() as f64 * interval;
    let n = (end / w).ceil().max(1.0) as usize;
    let mut out: Vec<(f64, f64, f64)> = (0..n)
        .map(|k| {
            let (start, stop) = (k as f64 * w, ((k + 1) as f64 * w).min(end));
            let ok: u64 = rows
                .iter()
                .filter(|r| r.t_s + 1e-9 >= start && r.t_s + 1e-9 < stop)
                .map(|r| r.classes.last().map_or(0, |c| c.ok))
                .sum();
            (start, ok as f64 / (stop - start).max(1e-9), 0.0)
        })
        .collect();
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
    fn a_good_file_parses() {
        let s = Scenario::parse(GOOD, "t.toml", 1.0).unwrap();
        assert_eq!(s.name, "crash");
        assert_eq!(s.protocols, vec!["multipaxos", "raft+"]);
        assert_eq!(s.duration, Duration::from_secs(30));
        assert_eq!(s.bench.duration, Duration::from_secs(30));
        assert_eq!(s.bench.clients, 8);
        assert_eq!(s.bench.warmup, Duration::from_secs(1));
        assert_eq!(s.params.heartbeat_ms, 100);
        assert_eq!(s.fsync, FsyncMode::Never);
        // Sorted by time.
        assert_eq!(s.schedule[0].text, "kill leader");
        assert_eq!(s.schedule[0].at, Duration::from_secs(10));
        assert_eq!(s.schedule[1].action, Action::Restart { node: crate::fault::NodeOrAll::All });
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
        let w = windows(&rows, 5.0);
        assert_eq!(w.len(), 2);
        assert!((w[0].1 - 80.0).abs() < 1e-9 && (w[1].1 - 69.0).abs() < 1e-9, "{w:?}");
        assert!((w[0].2 - 1.0).abs() < 1e-9 && (w[1].2 - 69.0 / 80.0).abs() < 1e-9);
        let events = vec![Event { at_s: 4.0, t_s: 4.0, action: "kill leader".into(), ok: true, detail: vec![] }];
        let a = analyze(&rows, &events);
        assert!(a.contains("baseline before the first fault: 100 ops/s"), "{a}");
        assert!(a.contains("lowest interval 0 ops/s (0% of baseline), 2 interval(s) with no completed"), "{a}");
        assert!(a.contains("interval starting at 7 s (4.0 s after the fault)"), "{a}");
    }
}
