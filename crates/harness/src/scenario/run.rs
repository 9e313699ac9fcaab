//! Running a scenario: for each variant a cluster under this process' supervision, the
//! workload (load, optional calibration, measurement), the schedule fired at its times
//! through the nemesis, and a sampler of every replica's memory and metrics. What was
//! measured goes to [`super::report`].

use super::analysis::Event;
use super::report::{self, Measured, RunOutcome};
use super::spec::{RateSpec, Scenario, Sites, StepKind, Who};
use super::variant::Variant;
use crate::cluster::{Cluster, ClusterFile, NodeState, Ports, Spec, StartError};
use crate::nemesis::{Action, LinkSet, NodeSel, Quota};
use anyhow::{bail, Context as _};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use synod_bench::cli::BenchArgs;
use synod_bench::driver::{self, LoadMode, RateControl, RunBound, Stop};
use synod_bench::resources::{self, ResourceSample};
use synod_bench::target::TargetSpec;
use synod_bench::workload::{ValueScale, Workload};
use synod_core::NodeId;

/// Run every variant of the scenario, one after another, each on a fresh cluster that this
/// process supervises, and write the outputs into [`Scenario::out`] (one folder per variant
/// when there are several). Progress and the summary are printed (stdout), faults and
/// supervisor events too (stderr). Ctrl-C finishes the current run and returns an error.
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
    let text = report::write_combined(s, &outcomes)?;
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
        ports: s.base_port.map_or(Ports::Free, Ports::Base),
        log_level: s.log_level.clone(),
        params: v.params.clone(),
        server_exe: s.server_exe.clone(),
        tls: false,
        extra_certs: Vec::new(),
        password: None,
    };
    let cluster = Cluster::start(&spec).map_err(|e| match e {
        StartError::Usage(m) | StartError::Failed(m) => anyhow::anyhow!("starting the {} cluster: {m}", v.label),
    })?;
    let file_path = cluster.file_path.clone();
    let endpoints = cluster.client_endpoints();
    println!("cluster file: {}", file_path.display());
    if let Some(q) = s.cpu_quota {
        for id in 1..=s.replicas as NodeId {
            let a = Action::Cpu { node: NodeSel::Id(id), quota: Quota::Percent(q) };
            match crate::nemesis::execute(&file_path, &a) {
                Ok(lines) => lines.iter().for_each(|l| eprintln!("{l}")),
                Err(e) => {
                    let mut cluster = cluster;
                    cluster.stop();
                    bail!("[cluster] cpu_quota = {q}: {e}");
                }
            }
        }
    }

    if let Some((node, q)) = s.slow {
        let a = Action::Cpu { node: NodeSel::Id(node), quota: Quota::Percent(q) };
        match crate::nemesis::execute(&file_path, &a) {
            Ok(lines) => lines.iter().for_each(|l| eprintln!("slow replica: {l}")),
            Err(e) => {
                let mut cluster = cluster;
                cluster.stop();
                bail!("[cluster] slow = {{ node = {node}, cpu_quota = {q} }}: {e}");
            }
        }
    }
    // [sites]: which replica each site is, and the replicas' links set to half the RTT each way.
    let site_replicas = match &s.sites {
        None => None,
        Some(sites) => match place_sites(sites, &file_path) {
            Ok((ids, lines)) => {
                lines.iter().for_each(|l| eprintln!("{l}"));
                Some(ids)
            }
            Err(e) => {
                let mut cluster = cluster;
                cluster.stop();
                bail!("[sites]: {e}");
            }
        },
    };

    // Supervise on a thread of its own: restarts and exits are served while the load runs.
    let supervisor = cluster.supervise_in_background();

    let result = (|| -> anyhow::Result<RunOutcome> {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        let mut target: TargetSpec =
            format!("{}:synod={}", v.dir_name(), endpoints.join(",")).parse().map_err(anyhow::Error::msg)?;
        // The variant's protocol options (with [cluster.params]'s) also build the client
        // policy, e.g. IDEM's `ambivalence` and `optimistic_wait_ms`.
        target.protocol_options = v.params.options.clone();
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
        let (measured, site_rows) =
            rt.block_on(measure(s, v, dir, &file_path, target, &endpoints, site_replicas.as_deref(), stop))?;
        let mut outcome = report::write_variant(s, v, dir, measured)?;
        if let (Some(sites), Some(rows), Some(ids)) = (&s.sites, site_rows, &site_replicas) {
            let text = sites_summary(sites, ids, &rows);
            std::fs::write(dir.join("sites.csv"), synod_bench::sites::sites_csv(&rows))?;
            outcome.summary.push_str(&text);
            let mut summary = std::fs::read_to_string(dir.join("summary.txt")).unwrap_or_default();
            summary.push_str(&text);
            std::fs::write(dir.join("summary.txt"), summary)?;
        }
        Ok(outcome)
    })();

    let supervisor_log = supervisor.stop().join("\n");
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
    let _ = std::fs::write(logs.join("supervisor.log"), supervisor_log);
    let _ = std::fs::remove_dir_all(&cluster_dir);
    result
}

/// `[sites]`: the replica id of each site (the leader site on the leader, for leader-based
/// protocols) and every link between two sites' replicas delayed by half their RTT, both ways.
fn place_sites(sites: &Sites, cluster_file: &Path) -> Result<(Vec<NodeId>, Vec<String>), String> {
    let leader = leader_now(&ClusterFile::load(cluster_file)?.1)?;
    let ids = sites.replicas(leader);
    let mut lines = vec![format!(
        "sites: {}",
        sites.names.iter().zip(&ids).map(|(n, id)| format!("{n}=node {id}")).collect::<Vec<_>>().join(", ")
    )];
    let n = ids.len();
    for a in 0..n {
        for b in a + 1..n {
            let links: LinkSet = format!("{}-{}", ids[a], ids[b]).parse()?;
            let action = Action::Link {
                links,
                delay_ms: sites.rtt_ms[a][b] / 2.0,
                jitter_ms: 0.0,
                jitter_distribution: "uniform".into(),
                jitter_shape: None,
                bandwidth_mbit: None,
                loss: 0.0,
            };
            crate::nemesis::execute(cluster_file, &action).map_err(|e| e.to_string())?;
            lines.push(format!(
                "  link {}-{} ({}-{}): {} ms each way",
                ids[a],
                ids[b],
                sites.names[a],
                sites.names[b],
                sites.rtt_ms[a][b] / 2.0
            ));
        }
    }
    Ok((ids, lines))
}

/// The per-site lines of the summary.
fn sites_summary(sites: &Sites, ids: &[NodeId], rows: &[(synod_bench::stats::ClassSummary, usize)]) -> String {
    let mut t = String::from("latency per client site (from the call to the answer, ok operations):\n");
    let _ = writeln!(
        t,
        "  {:<6} {:>5} {:>8} {:>8} {:>7} {:>9} {:>9} {:>9}",
        "site", "node", "clients", "ok", "errors", "p50 ms", "p90 ms", "p99 ms"
    );
    for ((c, clients), id) in rows.iter().zip(ids) {
        let _ = writeln!(
            t,
            "  {:<6} {:>5} {:>8} {:>8} {:>7} {:>9.1} {:>9.1} {:>9.1}",
            c.class,
            id,
            clients,
            c.ok,
            c.errors + c.rejected + c.ambivalent,
            c.p50_ms,
            c.p90_ms,
            c.p99_ms
        );
    }
    let _ = writeln!(t, "  (leader site: {})", sites.leader_site.map_or("-".to_string(), |l| sites.names[l].clone()));
    t
}

/// Load the records, calibrate, run the workload and fire the schedule; returns what was
/// measured (the caller writes the files) and, with `[sites]`, the latency per site.
#[allow(clippy::too_many_arguments)]
async fn measure(
    s: &Scenario,
    v: &Variant,
    dir: &Path,
    cluster_file: &Path,
    target: TargetSpec,
    endpoints: &[String],
    site_replicas: Option<&[NodeId]>,
    stop: &Stop,
) -> anyhow::Result<(Measured, Option<Vec<(synod_bench::stats::ClassSummary, usize)>>)> {
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

    let value_scale = ValueScale::default();
    let ctx = Arc::new(FireCtx {
        cluster_file: cluster_file.to_path_buf(),
        value_scale: value_scale.clone(),
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

    // [sites]: site s reaches the other sites' replicas through delaying relays; each
    // client (site i mod n) gets the endpoint list of its site, its own replica at index s.
    let mut proxies = Vec::new();
    let mut site_targets = vec![target.clone()];
    let mut recorder = None;
    if let (Some(sites), Some(ids)) = (&s.sites, site_replicas) {
        site_targets.clear();
        let n = ids.len();
        for a in 0..n {
            let mut eps = Vec::with_capacity(n);
            for b in 0..n {
                let direct = endpoints[ids[b] as usize - 1].clone();
                if a == b {
                    eps.push(direct);
                } else {
                    let one_way = Duration::from_secs_f64(sites.rtt_ms[a][b] / 2000.0);
                    let p = synod_bench::sites::DelayProxy::start(direct, one_way).await?;
                    eps.push(p.addr.to_string());
                    proxies.push(p);
                }
            }
            site_targets.push(TargetSpec { endpoints: eps, ..target.clone() });
        }
        recorder =
            Some(Arc::new(synod_bench::sites::SiteRecorder::new(n, sites.clients_per_site, slot.clone(), s.duration)));
    }
    let (t, rec) = (Arc::new(site_targets), recorder.clone());
    // The client policies' commit paths (Nezha: fast / slow / done) over the run.
    let commits_before = synod_bench::stats::CommitPaths::from_counters(&synod_client::policy_counters());
    let result = driver::run(
        move |i| {
            let (t, rec) = (t.clone(), rec.clone());
            async move {
                let site = synod_bench::sites::site_of(i, t.len());
                let inner = t[site].connect(i, key_size).await?;
                Ok::<_, synod_bench::target::TargetError>(synod_bench::sites::SiteTarget::new(inner, site, rec))
            }
        },
        Workload::new(spec.clone())?.with_value_scale(value_scale),
        &cfg,
        stop.clone(),
    )
    .await;
    drop(proxies);
    sampling_done.store(true, Ordering::SeqCst);
    let mut result = result.context("running the workload")?;
    result.summary.commits =
        commits_before.until(synod_bench::stats::CommitPaths::from_counters(&synod_client::policy_counters()));
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
    let site_rows = match (&s.sites, &recorder) {
        (Some(sites), Some(r)) => Some(r.summaries(&sites.names)),
        _ => None,
    };
    Ok((
        Measured { title, target, spec, cfg, result, events, samples, rate_log, calibrated, initial, before, after },
        site_rows,
    ))
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

/// Shared by the steps of one run while it goes on.
struct FireCtx {
    cluster_file: PathBuf,
    /// The workload's value-size factor (`value-scale` steps).
    value_scale: ValueScale,
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
        match crate::nemesis::find_leader(c) {
            Ok(id) => return Ok(id),
            Err(e) if Instant::now() >= deadline => return Err(format!("cannot resolve `leader`: {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Carry out one step (blocking: faults talk HTTP and wait for elections).
fn fire(kind: &StepKind, t_s: f64, ctx: &FireCtx) -> Result<Vec<String>, String> {
    let file = &ctx.cluster_file;
    let exec = |a: &Action| crate::nemesis::execute(file, a).map_err(|e| e.to_string());
    match kind {
        StepKind::Fault(a) => exec(a),
        StepKind::Faults(actions) => {
            let mut lines = Vec::new();
            for a in actions {
                lines.extend(exec(a).map_err(|e| format!("{} (after: {})", e, lines.join(" | ")))?);
            }
            Ok(lines)
        }
        StepKind::ValueScale(f) => {
            ctx.value_scale.set(*f)?;
            Ok(vec![format!("value sizes x{f} from now on")])
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
            let sample = match n.admin().get("/metrics", Duration::from_millis(300)) {
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
        .filter_map(|n| match n.admin().get("/status", Duration::from_secs(1)) {
            Ok((200, body)) => serde_json::from_str(&body).ok().map(|v| (n.id, v)),
            _ => None,
        })
        .collect()
}
