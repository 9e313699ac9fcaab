//! `synod check`: run many seeded simulations of a protocol and check every one.

use crate::sim::{self, FaultSet, RunReport, SimConfig};
use std::path::{Path, PathBuf};
use std::time::Instant;
use synod_protocols::registry::{self, ProtocolInfo};

/// Arguments of `synod check`.
#[derive(clap::Args, Clone, Debug)]
pub struct CheckArgs {
    /// Protocol to check (a registry name).
    #[arg(long, short = 'p')]
    pub protocol: String,
    /// Number of seeds (schedules) to run.
    #[arg(long, default_value_t = 100)]
    pub seeds: u64,
    /// Replay exactly this seed (overrides --seeds/--start-seed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// First seed of the range.
    #[arg(long, default_value_t = 0)]
    pub start_seed: u64,
    /// Cluster size (3 or 5).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=9))]
    pub replicas: u64,
    /// Faults to inject: comma list of partition, crash, crash-all, crash-wipe, loss, dup,
    /// reorder, skew, clock-jump, storage, fsync-error; or "all" (everything but crash-wipe
    /// and clock-jump) or "none" (docs/faults.md, "Simulator faults").
    #[arg(long, default_value = "all")]
    pub faults: String,
    /// Operations per simulated client.
    #[arg(long, default_value_t = 30)]
    pub ops: usize,
    /// Workload: "classic" (get/put/delete/cas on --keys keys) or "rich" (lists, INCR,
    /// APPEND, multi-key operations, scans, MULTI/EXEC with WATCH on groups of 4 keys;
    /// checked against the state machine's semantics). For histories of 10^4 operations:
    /// `--workload rich --clients 20 --ops 500 --keys 64`.
    #[arg(long, default_value = "classic", value_parser = ["classic", "rich"])]
    pub workload: String,
    /// Number of keys (classic default 3; rich: 4 per group, default 32).
    #[arg(long)]
    pub keys: Option<usize>,
    /// Simulated clients (default: 3 to 5, chosen by the seed).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub clients: Option<u64>,
    /// The first N simulated clients issue only Gets (a client that keeps reading from a
    /// deposed leader is what exposes stale lease reads; the others stall on their writes).
    #[arg(long, default_value_t = 0)]
    pub readers: usize,
    /// Print the full event trace of each run.
    #[arg(long)]
    pub trace: bool,
    /// Write each run's client history (docs/history-format.md) into this directory.
    #[arg(long)]
    pub export_history: Option<PathBuf>,
    /// Protocol parameter KEY=VALUE (repeatable), as for `synod local --param`: a
    /// ProtocolParams field (e.g. `snapshot_every=50`) or a protocol option (e.g.
    /// `trim=quorum`). The simulator still varies batching/window/snapshot knobs per seed
    /// around these values.
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,
    /// Bounds of the clock faults (`skew`, `clock-jump`): initial offset up to ±this many
    /// milliseconds …
    #[arg(long, default_value_t = 300)]
    pub clock_skew_ms: u64,
    /// … drift up to ±this many ppm …
    #[arg(long, default_value_t = 500)]
    pub clock_drift_ppm: u32,
    /// … and up to 3 jumps of up to ±this many milliseconds. The replicas' and clients'
    /// clock-error bound (`Ctx::clock_error`) follows from them.
    #[arg(long, default_value_t = 200)]
    pub clock_jump_ms: u64,
}

impl CheckArgs {
    /// The clock-fault bounds the flags give.
    pub fn clock_bounds(&self) -> crate::ClockBounds {
        crate::ClockBounds {
            skew: std::time::Duration::from_millis(self.clock_skew_ms),
            drift_ppm: self.clock_drift_ppm,
            jump: std::time::Duration::from_millis(self.clock_jump_ms),
        }
    }
}

/// Totals over a batch of runs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckSummary {
    pub schedules: u64,
    pub operations: u64,
    /// Operations without an answer (checked as "may or may not have happened").
    pub indeterminate: u64,
    pub crashes: u64,
    /// Whole-cluster crashes (every replica down at once).
    pub cluster_crashes: u64,
    /// Volatile storage: unsynced records lost in crashes, torn records, failed fsyncs.
    pub unsynced_lost: u64,
    pub torn_records: u64,
    pub fsync_errors: u64,
    pub partitions: u64,
    /// Reads answered from a leader's lease (no log position), checked like every other op.
    pub lease_reads: u64,
    /// Applied client commands checked against the acceptances the replicas reported
    /// (`Ghost::Accepted`, admission control).
    pub ghost_apply_checks: u64,
    /// Implicit garbage collections checked against Theorem 6.1's rule (`Ghost::Discarded`).
    pub ghost_discard_checks: u64,
    pub messages: u64,
    /// Virtual seconds simulated.
    pub virtual_seconds: f64,
    pub violations: u64,
    pub seconds: f64,
}

/// Counters protocols report in `Status::extra` that say which paths a schedule exercised
/// (EPaxos: slow path, SCCs of more than one instance, recovery, session barriers; Mencius: skips and
/// revocations; Nezha: entries a follower found in place — what a fast path needs — or had
/// to move, fetch or wait for, late arrivals, deadline modifications, view changes).
/// `synod check` prints in how many schedules each was non-zero at the end.
pub const PATH_COUNTERS: &[&str] = &[
    "fast_path",
    "slow_path",
    "sccs_multi",
    "recoveries",
    "try_pre_accepts",
    "tpa_committed",
    "collisions",
    "noops",
    "reproposed",
    "commit_replies",
    "barriers",
    "snapshots",
    "skips",
    "revocations",
    "synced_in_place",
    "synced_moved",
    "fetched",
    "late",
    "deadline_modified",
    "view_changes",
];

/// Lines of trace shown with a violation.
const TRACE_TAIL: usize = 40;

/// Run the check and print a summary; returns the process exit code (0 = no violation,
/// 1 = violation found, 2 = bad arguments).
pub fn run_check(args: &CheckArgs) -> i32 {
    let protocol = match registry::find(&args.protocol) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    run_check_with(protocol, args)
}

/// [`run_check`] for a protocol that need not be in the registry (tests use mutants).
pub fn run_check_with(protocol: &'static ProtocolInfo, args: &CheckArgs) -> i32 {
    let faults = match FaultSet::parse(&args.faults) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: --faults: {e}");
            return 2;
        }
    };
    if let Some(dir) = &args.export_history {
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!("error: cannot create {}: {e}", dir.display());
            return 2;
        }
    }
    let mut params = synod_core::ProtocolParams::default();
    for p in &args.params {
        if let Err(e) = params.set(p) {
            eprintln!("error: --param: {e}");
            return 2;
        }
    }
    // A bad protocol option is a usage error, found before any schedule runs.
    let probe = registry::Setup { id: 1, members: (1..=args.replicas as u32).collect(), params: params.clone() };
    if let Err(e) = (protocol.build)(&probe) {
        eprintln!("error: --param: {e}");
        return 2;
    }
    let seeds: Vec<u64> = match args.seed {
        Some(s) => vec![s],
        None => (args.start_seed..args.start_seed.saturating_add(args.seeds)).collect(),
    };
    let config = |seed: u64, trace: bool| SimConfig {
        replicas: args.replicas as usize,
        faults,
        ops_per_client: args.ops,
        readers: args.readers,
        rich: args.workload == "rich",
        keys: args.keys.unwrap_or(if args.workload == "rich" { 32 } else { 3 }).max(1),
        clients: args.clients.map(|c| c as usize),
        // Long histories need longer after the heal: with fsync windows and a pipeline
        // window of 1 (a fuzzed knob) a leader commits a few hundred slots per second.
        liveness_timeout: std::time::Duration::from_secs(30)
            .max(std::time::Duration::from_millis(10 * args.ops as u64 * args.clients.unwrap_or(5))),
        trace,
        params: params.clone(),
        clocks: args.clock_bounds(),
        ..SimConfig::new(protocol, seed)
    };
    let start = Instant::now();
    let mut summary = CheckSummary::default();
    let mut code = 0;
    // counter -> (schedules where it was non-zero, total over schedules)
    let mut paths: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
    // Client-policy counters: name -> (schedules where it was non-zero, total).
    let mut client_paths: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
    for &seed in &seeds {
        let report = sim::run(&config(seed, args.trace));
        if let Some(last) = report.probes.last() {
            for key in PATH_COUNTERS {
                let total: u64 = last
                    .statuses
                    .iter()
                    .flatten()
                    .filter_map(|s| s.extra.get(*key).and_then(|v| v.parse::<u64>().ok()))
                    .sum();
                let seen = last.statuses.iter().flatten().any(|s| s.extra.contains_key(*key));
                if seen {
                    let e = paths.entry(key).or_default();
                    e.0 += u64::from(total > 0);
                    e.1 += total;
                }
            }
        }
        for (k, v) in &report.stats.client_counters {
            let e = client_paths.entry(k).or_default();
            e.0 += u64::from(*v > 0);
            e.1 += v;
        }
        summary.schedules += 1;
        summary.operations += report.history.ops.len() as u64;
        summary.indeterminate += report.stats.ops_indeterminate;
        summary.crashes += report.stats.crashes;
        summary.cluster_crashes += report.stats.cluster_crashes;
        summary.unsynced_lost += report.stats.unsynced_lost;
        summary.torn_records += report.stats.torn_records;
        summary.fsync_errors += report.stats.fsync_errors;
        summary.partitions += report.stats.partitions;
        summary.lease_reads += report.stats.lease_reads;
        summary.ghost_apply_checks += report.stats.ghost_apply_checks;
        summary.ghost_discard_checks += report.stats.ghost_discard_checks;
        summary.messages += report.stats.messages_sent;
        summary.virtual_seconds += report.stats.virtual_end as f64 / 1e9;
        if args.trace {
            for line in &report.trace {
                println!("{line}");
            }
        }
        if let Some(dir) = &args.export_history {
            if let Err(e) = export(dir, protocol.name, &report) {
                eprintln!("error: {e}");
                return 2;
            }
        }
        if let Some(failure) = &report.failure {
            summary.violations += 1;
            code = 1;
            println!("VIOLATION: protocol {} seed {seed}", protocol.name);
            println!("{failure}");
            // Replay with the trace on (the run is deterministic) to show how it ended.
            let traced = if args.trace { report.clone() } else { sim::run(&config(seed, true)) };
            let tail = traced.trace.len().saturating_sub(TRACE_TAIL);
            println!("--- last {} trace lines ---", traced.trace.len() - tail);
            for line in &traced.trace[tail..] {
                println!("{line}");
            }
            println!("--- replay ---");
            let mut replay = replay_command(protocol.name, seed, args.replicas, &faults, args.ops);
            for p in &args.params {
                replay.push_str(&format!(" --param {p}"));
            }
            if args.readers > 0 {
                replay.push_str(&format!(" --readers {}", args.readers));
            }
            if args.workload != "classic" {
                replay.push_str(&format!(" --workload {}", args.workload));
            }
            if let Some(k) = args.keys {
                replay.push_str(&format!(" --keys {k}"));
            }
            if args.clock_bounds() != crate::ClockBounds::default() {
                replay.push_str(&format!(
                    " --clock-skew-ms {} --clock-drift-ppm {} --clock-jump-ms {}",
                    args.clock_skew_ms, args.clock_drift_ppm, args.clock_jump_ms
                ));
            }
            if let Some(c) = args.clients {
                replay.push_str(&format!(" --clients {c}"));
            }
            println!("{replay}");
            break;
        }
    }
    summary.seconds = start.elapsed().as_secs_f64();
    println!(
        "schedules run: {}, operations checked: {}, violations: {}, {:.1} schedules/s, {:.0} ops/s",
        summary.schedules,
        summary.operations,
        summary.violations,
        summary.schedules as f64 / summary.seconds.max(1e-9),
        summary.operations as f64 / summary.seconds.max(1e-9),
    );
    println!(
        "  ({} indeterminate ops, {} crashes ({} whole-cluster), {} partitions, {} messages, {:.0} virtual seconds in {:.2} s)",
        summary.indeterminate,
        summary.crashes,
        summary.cluster_crashes,
        summary.partitions,
        summary.messages,
        summary.virtual_seconds,
        summary.seconds
    );
    if faults.volatile_storage() {
        println!(
            "  storage: {} unsynced records lost in crashes, {} torn records, {} fsync errors",
            summary.unsynced_lost, summary.torn_records, summary.fsync_errors
        );
    }
    if summary.ghost_apply_checks > 0 {
        println!(
            "  ghost check (admission control): {} applied commands checked to have been accepted by a majority",
            summary.ghost_apply_checks
        );
    }
    if summary.ghost_discard_checks > 0 {
        println!(
            "  ghost check (implicit GC): {} discards checked against Theorem 6.1's window (s only after s + r_max)",
            summary.ghost_discard_checks
        );
    }
    if summary.lease_reads > 0 {
        println!("  lease reads (answered by a leader without a log position): {}", summary.lease_reads);
    }
    if !paths.is_empty() {
        let parts: Vec<String> =
            paths.iter().map(|(k, (sched, total))| format!("{k} in {sched} schedules ({total} in all)")).collect();
        println!("  paths (at the end of each run, summed over replicas): {}", parts.join(", "));
    }
    if !client_paths.is_empty() {
        let total: u64 = client_paths.values().map(|(_, t)| t).sum();
        let parts: Vec<String> = client_paths
            .iter()
            .map(|(k, (sched, t))| {
                format!("{k} {t} ({:.1}%, in {sched} schedules)", 100.0 * *t as f64 / total.max(1) as f64)
            })
            .collect();
        println!("  client outcomes (summed over clients): {}", parts.join(", "));
    }
    code
}

/// The one-line command that replays a seed with its trace.
pub fn replay_command(protocol: &str, seed: u64, replicas: u64, faults: &FaultSet, ops: usize) -> String {
    let mut cmd = format!("synod check --protocol {protocol} --seed {seed} --trace");
    if replicas != 3 {
        cmd.push_str(&format!(" --replicas {replicas}"));
    }
    if *faults != FaultSet::all() {
        cmd.push_str(&format!(" --faults {}", faults.to_list()));
    }
    if ops != 30 {
        cmd.push_str(&format!(" --ops {ops}"));
    }
    cmd
}

fn export(dir: &Path, protocol: &str, report: &RunReport) -> Result<(), String> {
    let path = dir.join(format!("{protocol}-seed{}.json", report.seed));
    std::fs::write(&path, report.history.to_json()).map_err(|e| format!("writing {}: {e}", path.display()))
}
