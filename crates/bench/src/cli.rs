//! `synod bench`: command-line arguments and the top-level loop over sweep points, rounds
//! and targets.
//!
//! Runs are ordered point by point, and within a point round by round with every target once
//! per round (A B A B …), so slow drift of the machine (thermal, other tenants) affects every
//! target alike instead of biasing whichever ran last.

use crate::driver::{self, LoadMode, RunBound, RunConfig, Stop};
use crate::plot::Marker;
use crate::report::{self, RunMeta, RunRecord};
use crate::target::TargetSpec;
use crate::workload::{KeyDist, Mix, ValueSize, Workload, WorkloadSpec};
use anyhow::{bail, Context as _};
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::time::Duration;

/// Benchmark synod and other key-value stores with YCSB workloads.
#[derive(clap::Args, Clone, Debug)]
pub struct BenchArgs {
    /// System to drive: KIND=HOST:PORT[,HOST:PORT...] or LABEL:KIND=..., KIND one of synod,
    /// redis, etcd. Repeat with --compare to measure several side by side.
    #[arg(long = "target", required = true, value_name = "TARGET")]
    pub targets: Vec<TargetSpec>,
    /// synod targets: connect with TLS, checking the replicas' certificates against this CA
    /// file (`synod local --tls` writes `<dir>/tls/ca.pem`).
    #[arg(long, value_name = "CA.pem")]
    pub tls_ca: Option<PathBuf>,
    /// synod targets: the replicas' password (native AUTH).
    #[arg(long, env = "SYNOD_PASSWORD")]
    pub password: Option<String>,
    /// synod targets: a protocol option (KEY=VALUE, repeatable) for the client policy the
    /// registry supplies for the protocol the replicas report, e.g. `ambivalence=pessimistic`
    /// for IDEM. Give the replicas the same options. A target's own `synod[KEY=VALUE,...]`
    /// options take precedence.
    #[arg(long = "protocol-option", value_name = "KEY=VALUE")]
    pub protocol_options: Vec<String>,
    /// YCSB core workload: a (50/50 read/update), b (95/5), c (read only), d (read latest,
    /// 5% insert), e (short scans, 5% insert), f (read-modify-write).
    #[arg(long, short = 'w', default_value = "a")]
    pub workload: String,
    /// Override the operation mix, e.g. `read=0.9,update=0.1` (read, update, insert, scan, rmw).
    #[arg(long)]
    pub mix: Option<String>,
    /// Key chooser: uniform, zipfian[:THETA], latest[:THETA] (default: the workload's).
    #[arg(long)]
    pub distribution: Option<String>,
    /// Zipfian constant for zipfian/latest when --distribution does not give one.
    #[arg(long)]
    pub theta: Option<f64>,
    /// Records loaded before measuring (YCSB recordcount).
    #[arg(long, default_value_t = 1000)]
    pub records: u64,
    /// Key length in bytes ("user" + hashed record number, zero-padded).
    #[arg(long, default_value_t = 23)]
    pub key_size: usize,
    /// Value sizes: N, fixed:N, normal:MEAN[,SD] (SD defaults to 10% of MEAN),
    /// mix:N@P,N@P,...
    #[arg(long, default_value = "500")]
    pub value_size: String,
    /// Longest scan (scan lengths are uniform in 1..=N).
    #[arg(long, default_value_t = 100)]
    pub max_scan_len: u32,
    /// Percentage of updates/RMWs sent to one hot key (EPaxos-style conflict rate).
    #[arg(long, default_value_t = 0.0)]
    pub conflict: f64,
    /// RNG seed: the same seed gives the same operation stream.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Simulated clients (connections), each with one request outstanding.
    #[arg(long, short = 'c', default_value_t = 16)]
    pub clients: usize,
    /// Closed loop: pause between a reply and the client's next request.
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    pub think_time: Duration,
    /// Closed loop: after a rejected operation, wait a random time in MIN-MAX before the next
    /// request (e.g. `50ms-100ms`, IDEM's clients; one value: a fixed back-off).
    #[arg(long, value_parser = parse_backoff)]
    pub reject_backoff: Option<(Duration, Duration)>,
    /// Open loop: Poisson arrivals at this many operations per second (latency measured from
    /// the intended send time).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Open loop: arrivals beyond this many queued + in-flight requests are dropped (counted).
    #[arg(long, default_value_t = 10_000)]
    pub max_outstanding: usize,
    /// Measured duration of each run (e.g. 10s, 500ms, 2m).
    #[arg(long, short = 'd', value_parser = parse_duration, default_value = "10s", conflicts_with = "ops")]
    pub duration: Duration,
    /// Stop each run after this many measured operations instead of a duration.
    #[arg(long)]
    pub ops: Option<u64>,
    /// Unmeasured warm-up before each run.
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    pub warmup: Duration,
    /// Timeline resolution.
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    pub interval: Duration,
    /// An operation slower than this counts as an error and its connection is reopened.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub op_timeout: Duration,
    /// Output directory (created); each run gets a subdirectory.
    #[arg(long, short = 'o', default_value = "bench-out")]
    pub out: PathBuf,
    /// Run once per value: `clients=1,2,4,8` or `rate=1000,2000` (draws a throughput-latency
    /// curve).
    #[arg(long)]
    pub sweep: Option<String>,
    /// Compare several --target: run the same workload against each in alternation.
    #[arg(long)]
    pub compare: bool,
    /// Rounds per target and sweep point (medians are reported).
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Event to mark on timeline plots: SECONDS=LABEL (seconds since start of measurement).
    #[arg(long = "marker", value_name = "SECONDS=LABEL")]
    pub markers: Vec<Marker>,
    /// Do not load the records before the first run against each target.
    #[arg(long)]
    pub skip_load: bool,
    /// Print a progress line to stderr even when it is not a terminal.
    #[arg(long)]
    pub progress: bool,
    /// Write CSV/JSON only, no PNG plots.
    #[arg(long)]
    pub no_plots: bool,
}

/// `10s`, `500ms`, `2m`, `1.5s`, `250us`, or a plain number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("`{s}` is not a duration (e.g. 10s, 500ms, 2m)"))?;
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n / 1e3,
        "us" | "µs" => n / 1e6,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        other => return Err(format!("`{s}`: unknown unit `{other}` (us, ms, s, m, h)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("`{s}` is not a valid duration"))
}

/// `MIN-MAX` or one duration (`50ms-100ms`, `5ms`): a reject back-off range.
pub fn parse_backoff(s: &str) -> Result<(Duration, Duration), String> {
    let (lo, hi) = match s.split_once('-') {
        Some((lo, hi)) => (parse_duration(lo)?, parse_duration(hi)?),
        None => {
            let d = parse_duration(s)?;
            (d, d)
        }
    };
    if hi < lo {
        return Err(format!("back-off `{s}`: the maximum is below the minimum"));
    }
    Ok((lo, hi))
}

/// A swept parameter.
#[derive(Clone, Debug, PartialEq)]
pub enum Sweep {
    Clients(Vec<usize>),
    Rate(Vec<f64>),
    /// Percentages of writes sent to one hot key (EPaxos §7.1's interference rates).
    Conflict(Vec<f64>),
}

impl Sweep {
    pub fn parse(s: &str) -> Result<Sweep, String> {
        let (name, values) = s
            .split_once('=')
            .ok_or_else(|| format!("sweep `{s}`: expected clients=1,2,4, rate=1000,2000 or conflict=0,2,25,100"))?;
        let values: Vec<&str> = values.split(',').map(str::trim).filter(|v| !v.is_empty()).collect();
        if values.is_empty() {
            return Err(format!("sweep `{s}`: no values"));
        }
        match name.trim() {
            "clients" => values
                .iter()
                .map(|v| {
                    v.parse::<usize>()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| format!("sweep `{s}`: `{v}` is not a positive client count"))
                })
                .collect::<Result<_, _>>()
                .map(Sweep::Clients),
            "rate" => values
                .iter()
                .map(|v| {
                    v.parse::<f64>()
                        .ok()
                        .filter(|r| *r > 0.0 && r.is_finite())
                        .ok_or_else(|| format!("sweep `{s}`: `{v}` is not a positive rate"))
                })
                .collect::<Result<_, _>>()
                .map(Sweep::Rate),
            "conflict" => values
                .iter()
                .map(|v| {
                    v.parse::<f64>()
                        .ok()
                        .filter(|c| (0.0..=100.0).contains(c))
                        .ok_or_else(|| format!("sweep `{s}`: `{v}` is not a percentage in 0..=100"))
                })
                .collect::<Result<_, _>>()
                .map(Sweep::Conflict),
            other => Err(format!("sweep `{s}`: unknown parameter `{other}` (clients, rate, conflict)")),
        }
    }
}

impl BenchArgs {
    /// The workload these arguments describe.
    pub fn workload_spec(&self) -> anyhow::Result<WorkloadSpec> {
        let mut spec = WorkloadSpec::preset(&self.workload)?;
        if let Some(m) = &self.mix {
            spec.mix = Mix::parse(m)?;
            spec.name = format!("{}+mix", spec.name);
        }
        if let Some(d) = &self.distribution {
            spec.key_dist = KeyDist::parse(d)?;
        }
        if let Some(t) = self.theta {
            if !(t > 0.0 && t < 1.0) {
                bail!("--theta {t}: must be in (0, 1)");
            }
            let explicit = self.distribution.as_deref().is_some_and(|d| d.contains(':'));
            if !explicit {
                spec.key_dist = match spec.key_dist {
                    KeyDist::Zipfian { .. } => KeyDist::Zipfian { theta: t },
                    KeyDist::Latest { .. } => KeyDist::Latest { theta: t },
                    KeyDist::Uniform => bail!("--theta applies to zipfian or latest, not uniform"),
                };
            }
        }
        spec.record_count = self.records;
        spec.key_size = self.key_size;
        spec.value_size = ValueSize::parse(&self.value_size)?;
        spec.max_scan_len = self.max_scan_len;
        spec.conflict_pct = self.conflict;
        spec.seed = self.seed;
        spec.validate()?;
        Ok(spec)
    }

    /// The driver configuration for one run at `clients` connections (open loop at `rate`).
    pub fn run_config(&self, clients: usize, rate: Option<f64>) -> anyhow::Result<RunConfig> {
        if self.interval.is_zero() {
            bail!("--interval must be positive");
        }
        let mode = match rate {
            Some(rate) => LoadMode::Open { rate, max_outstanding: self.max_outstanding },
            None => LoadMode::Closed { think: self.think_time },
        };
        let bound = match self.ops {
            Some(0) => bail!("--ops must be at least 1"),
            Some(n) => RunBound::Ops(n),
            None if self.duration.is_zero() => bail!("--duration must be positive"),
            None => RunBound::Duration(self.duration),
        };
        Ok(RunConfig {
            clients,
            mode,
            warmup: self.warmup,
            bound,
            interval: self.interval,
            op_timeout: self.op_timeout,
            grace: Duration::from_secs(5).min(self.op_timeout),
            progress: None,
            start_slot: None,
            rate_control: None,
            reject_backoff: self.reject_backoff,
        })
    }
}

/// Run the benchmark described by `args`; prints a summary per run and, for comparisons and
/// sweeps, the medians table.
pub async fn run_bench(args: BenchArgs) -> anyhow::Result<()> {
    let spec = args.workload_spec()?;
    if args.targets.len() > 1 && !args.compare {
        bail!("{} targets given: add --compare to run them side by side", args.targets.len());
    }
    if args.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    if args.clients == 0 {
        bail!("--clients must be at least 1");
    }
    if let Some(r) = args.rate {
        if !(r > 0.0 && r.is_finite()) {
            bail!("--rate must be a positive number of operations per second");
        }
    }
    let options = crate::target::parse_protocol_options(&args.protocol_options.join(","))
        .map_err(|e| anyhow::anyhow!("--protocol-option: {e}"))?;
    let mut targets = args.targets.clone();
    for t in &mut targets {
        t.tls_ca = args.tls_ca.clone();
        t.password = args.password.clone();
        if t.kind == crate::target::TargetKind::Synod {
            for (k, v) in &options {
                t.protocol_options.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
    }
    if !options.is_empty() && !targets.iter().any(|t| t.kind == crate::target::TargetKind::Synod) {
        bail!("--protocol-option is for synod targets, and none is given");
    }
    // Unique labels: they name directories and table rows.
    for i in 0..targets.len() {
        let base = targets[i].label.clone();
        let mut n = 1;
        while targets[..i].iter().any(|t| t.label == targets[i].label) {
            n += 1;
            targets[i].label = format!("{base}-{n}");
        }
    }
    let sweep = args.sweep.as_deref().map(Sweep::parse).transpose().map_err(anyhow::Error::msg)?;
    if matches!(sweep, Some(Sweep::Rate(_))) && args.rate.is_none() {
        tracing::info!("sweeping rate: runs are open loop");
    }
    let base_conflict = spec.conflict_pct;
    let points: Vec<(Option<String>, usize, Option<f64>, f64)> = match &sweep {
        None => vec![(None, args.clients, args.rate, base_conflict)],
        Some(Sweep::Clients(cs)) => {
            cs.iter().map(|&c| (Some(format!("clients={c}")), c, args.rate, base_conflict)).collect()
        }
        Some(Sweep::Rate(rs)) => {
            rs.iter().map(|&r| (Some(format!("rate={r}")), args.clients, Some(r), base_conflict)).collect()
        }
        Some(Sweep::Conflict(cs)) => {
            cs.iter().map(|&c| (Some(format!("conflict={c}")), args.clients, args.rate, c)).collect()
        }
    };
    let progress = args.progress || std::io::stderr().is_terminal();
    let plots = !args.no_plots;
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;

    let stop = Stop::new();
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\ninterrupted: finishing the current run");
                stop.raise();
            }
        });
    }

    let mut loaded = vec![args.skip_load; targets.len()];
    let mut records = Vec::new();
    'outer: for (point, clients, rate, conflict) in &points {
        let mut spec = spec.clone();
        spec.conflict_pct = *conflict;
        for round in 1..=args.rounds {
            for (ti, target) in targets.iter().enumerate() {
                if stop.raised() {
                    break 'outer;
                }
                let key_size = spec.key_size;
                if !loaded[ti] {
                    eprintln!("loading {} records into {target}", spec.record_count);
                    let t = target.clone();
                    let load_clients = (*clients).clamp(1, 64);
                    let mut load_spec = spec.clone();
                    load_spec.seed = spec.seed.wrapping_add(0x10AD);
                    let failed = driver::load(
                        move |i| {
                            let t = t.clone();
                            async move { t.connect(i, key_size).await }
                        },
                        Workload::new(load_spec)?,
                        spec.record_count,
                        load_clients,
                    )
                    .await
                    .with_context(|| format!("loading {target}"))?;
                    if failed > 0 {
                        eprintln!("warning: {failed} of {} load inserts failed", spec.record_count);
                    }
                    loaded[ti] = true;
                }
                let mut cfg = args.run_config(*clients, *rate)?;
                let mut title = format!("{} · YCSB-{} · {clients} clients", target.label, spec.name);
                if let Some(r) = rate {
                    title.push_str(&format!(" · {r} ops/s offered"));
                }
                if args.rounds > 1 {
                    title.push_str(&format!(" · round {round}"));
                }
                if progress {
                    cfg.progress = Some(title.clone());
                }
                let commits_before = commit_paths(target).await;
                let t = target.clone();
                let mut result = driver::run(
                    move |i| {
                        let t = t.clone();
                        async move { t.connect(i, key_size).await }
                    },
                    Workload::new(spec.clone())?,
                    &cfg,
                    stop.clone(),
                )
                .await
                .with_context(|| format!("running against {target}"))?;
                result.summary.commits = commits_before.until(commit_paths(target).await);
                let mut dir = args.out.join(&target.label);
                if let Some(p) = point {
                    dir = dir.join(p.replace('=', "-"));
                }
                dir = dir.join(format!("round-{round}"));
                let meta = RunMeta {
                    target,
                    workload: &spec,
                    config: &cfg,
                    point: point.as_deref(),
                    round,
                    markers: &args.markers,
                };
                report::write_run(&dir, &title, &meta, &result, plots)?;
                print_run(&title, &result);
                records.push(RunRecord {
                    target: target.label.clone(),
                    point: point.clone(),
                    round,
                    summary: result.summary,
                });
            }
        }
    }
    let rows = report::write_invocation(&args.out, &format!("YCSB-{}", spec.name), &records, plots)?;
    if records.len() > 1 {
        println!("\nmedians over rounds (x = ratio to the first target):\n{}", report::medians_table(&rows));
    }
    println!("results in {}", args.out.display());
    if stop.raised() {
        bail!("interrupted");
    }
    Ok(())
}

/// The commit-path counters a run of `target` moves: the client policies' in this process
/// and, for synod, those of the proxy processes among its endpoints (their status says
/// `proxy = true`).
async fn commit_paths(target: &crate::target::TargetSpec) -> crate::stats::CommitPaths {
    let mut counters = synod_client::policy_counters();
    if target.kind == crate::target::TargetKind::Synod {
        for (_, status) in synod_client::status_all(&target.endpoints, std::time::Duration::from_secs(2)).await {
            let Ok(status) = status else { continue };
            if status.extra.get("proxy").map(String::as_str) != Some("true") {
                continue;
            }
            for (k, v) in &status.extra {
                if let Ok(v) = v.parse::<u64>() {
                    if k.ends_with("_commits") {
                        *counters.entry(k.clone()).or_default() += v;
                    }
                }
            }
        }
    }
    crate::stats::CommitPaths::from_counters(&counters)
}

fn print_run(title: &str, r: &driver::RunResult) {
    println!("{title}{}", if r.interrupted { " (interrupted)" } else { "" });
    println!(
        "  {:<6} {:>10} {:>8} {:>10} {:>7} {:>11} {:>8} {:>8} {:>8} {:>9} {:>8}",
        "class", "ok", "rejected", "ambivalent", "errors", "ops/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms"
    );
    for c in &r.summary.classes {
        println!(
            "  {:<6} {:>10} {:>8} {:>10} {:>7} {:>11.0} {:>8.3} {:>8.3} {:>8.3} {:>9.3} {:>8.3}",
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
            c.max_ms
        );
    }
    let all = r.summary.all();
    if all.reject_throughput > 0.0 {
        println!(
            "  rejected (definitive + ambivalent): {:.0} ops/s, p50 {:.3} ms, p99 {:.3} ms; goodput {:.0} ops/s",
            all.reject_throughput, all.reject_p50_ms, all.reject_p99_ms, all.throughput
        );
    }
    if r.summary.dropped > 0 {
        println!("  dropped arrivals (open loop, over --max-outstanding): {}", r.summary.dropped);
    }
    for (why, n) in &r.error_reasons {
        println!("  error ({n}x): {why}");
    }
    let c = r.summary.commits;
    if let Some(pct) = c.fast_pct() {
        println!(
            "  commits (client policy, warm-up included): fast {} / slow {} / done {}: fast-commit ratio {pct:.1}%",
            c.fast, c.slow, c.done
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn parse(args: &[&str]) -> Result<BenchArgs, String> {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
            .map(|c| c.bench)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("10 parsecs").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("abc").unwrap_err().contains("not a duration"));
    }

    #[test]
    fn reject_backoff_parses_a_range_or_one_value() {
        let ms = Duration::from_millis;
        assert_eq!(parse_backoff("50ms-100ms"), Ok((ms(50), ms(100))));
        assert_eq!(parse_backoff("5ms"), Ok((ms(5), ms(5))));
        assert!(parse_backoff("100ms-50ms").unwrap_err().contains("below the minimum"));
        let args = parse(&["--target", "synod=127.0.0.1:1", "--reject-backoff", "1ms-2ms"]).unwrap();
        assert_eq!(args.run_config(4, None).unwrap().reject_backoff, Some((ms(1), ms(2))));
    }

    #[test]
    fn sweeps_parse() {
        assert_eq!(Sweep::parse("clients=1,2,4"), Ok(Sweep::Clients(vec![1, 2, 4])));
        assert_eq!(Sweep::parse("rate=1000,2500.5"), Ok(Sweep::Rate(vec![1000.0, 2500.5])));
        assert!(Sweep::parse("clients=0").unwrap_err().contains("positive client count"));
        assert!(Sweep::parse("threads=1").unwrap_err().contains("unknown parameter"));
        assert_eq!(Sweep::parse("conflict=0,2,25,100"), Ok(Sweep::Conflict(vec![0.0, 2.0, 25.0, 100.0])));
        assert!(Sweep::parse("conflict=101").unwrap_err().contains("percentage"));
    }

    #[test]
    fn arguments_build_the_workload() {
        let a = parse(&[
            "--target",
            "synod=127.0.0.1:7201,127.0.0.1:7202",
            "--target",
            "redis=127.0.0.1:6379",
            "--compare",
            "-w",
            "b",
            "--distribution",
            "uniform",
            "--value-size",
            "normal:1000",
            "--records",
            "5000",
            "--conflict",
            "10",
        ])
        .unwrap();
        assert_eq!(a.targets.len(), 2);
        assert_eq!(a.targets[0].endpoints, vec!["127.0.0.1:7201", "127.0.0.1:7202"]);
        let s = a.workload_spec().unwrap();
        assert_eq!(s.key_dist, KeyDist::Uniform);
        assert_eq!(s.value_size, ValueSize::Normal { mean: 1000.0, sd: 100.0 });
        assert_eq!((s.record_count, s.conflict_pct), (5000, 10.0));
        assert!((s.mix.read - 0.95).abs() < 1e-12);

        let a = parse(&["--target", "redis=127.0.0.1:6379", "--theta", "0.8"]).unwrap();
        assert_eq!(a.workload_spec().unwrap().key_dist, KeyDist::Zipfian { theta: 0.8 });
    }

    #[test]
    fn bad_arguments_are_clear_errors() {
        assert!(parse(&["--target", "mongo=1.2.3.4:5"]).unwrap_err().contains("unknown kind `mongo`"));
        assert!(parse(&["--target", "redis=localhost"]).unwrap_err().contains("not HOST:PORT"));
        assert!(parse(&["--target", "redis=127.0.0.1:1", "--marker", "x=boom"])
            .unwrap_err()
            .contains("not a number of seconds"));
        let a = parse(&["--target", "redis=127.0.0.1:1", "--value-size", "mix:8@x"]).unwrap();
        assert!(a.workload_spec().unwrap_err().to_string().contains("not a probability"));
        let a = parse(&["--target", "redis=127.0.0.1:1", "--distribution", "uniform", "--theta", "0.5"]).unwrap();
        assert!(a.workload_spec().unwrap_err().to_string().contains("not uniform"));
    }

    #[tokio::test]
    async fn several_targets_need_compare() {
        let a = parse(&["--target", "redis=127.0.0.1:1", "--target", "etcd=127.0.0.1:2"]).unwrap();
        let e = run_bench(a).await.unwrap_err().to_string();
        assert!(e.contains("--compare"), "{e}");
    }
}
