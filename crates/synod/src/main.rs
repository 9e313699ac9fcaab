//! The `synod` command: a thin dispatcher, one module per subcommand. The harness behind
//! `local`, `fault` and `scenario` (cluster supervision, the nemesis, scenarios) is the
//! `synod-harness` library; those modules only parse arguments and call into it.
//!
//! Exit codes: 0 success, 1 runtime failure (or a failed `ctl cas`), 2 bad usage or config.

mod ctl;
mod fault;
mod local;
mod proxy;
mod scenario;
mod server;
mod signal;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// mimalloc instead of glibc's malloc: a replica allocates and frees small buffers for every
/// message, and glibc's allocator (with its consolidation passes) was ~12% of a replica's
/// CPU in `perf` profiles under load (docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `purge_delay` option (the same index in mimalloc v2 and v3, `mi_option_e`).
const MI_OPTION_PURGE_DELAY: std::os::raw::c_int = 15;

extern "C" {
    /// From the mimalloc library that `mimalloc` links (libmimalloc-sys).
    fn mi_option_set(option: std::os::raw::c_int, value: std::os::raw::c_long);
}

/// Let mimalloc keep freed memory for 10 s (its default: 1 s) before returning it to the OS,
/// unless `MIMALLOC_PURGE_DELAY` says otherwise. A replica under load takes a snapshot every
/// second or so (a few MB, `snapshot_every`); with the default the memory of the previous
/// one was already returned, and every snapshot wrote into freshly faulted, zeroed pages:
/// 5-8% of a follower's CPU in `clear_page_erms`, gone with this (docs/performance.md). An
/// idle replica still returns what it freed, 10 s later.
fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets an integer option; mimalloc reads it on its next purge decision.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, 10_000) };
    }
}

#[derive(Parser)]
#[command(name = "synod", version, about = "A protocol-generic, linearizable, replicated key-value store")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one replica from a config file.
    #[command(alias = "run")]
    Server(server::Args),
    /// Run a whole cluster of replicas on this machine (child processes), for trying synod out.
    Local(local::Args),
    /// A stateless proxy in front of a cluster (Nezha's proxies): runs the protocol's client
    /// policy for the clients that connect to it.
    Proxy(proxy::Args),
    /// Talk to a cluster: put, get, del, cas, scan, status.
    Ctl(ctl::Args),
    /// Run seeded fault schedules in the deterministic simulator and check linearizability.
    Check(synod_sim::cli::CheckArgs),
    /// Load generator: YCSB workloads against synod, Redis or etcd, HDR percentiles and plots.
    Bench(Box<synod_bench::cli::BenchArgs>),
    /// The nemesis: kill, restart, pause, partition, slow down or skew a replica of a running
    /// local cluster (`synod local` prints its cluster file).
    Fault(fault::Args),
    /// Fault scenarios: a cluster, a workload and a fault schedule from a TOML file.
    Scenario(scenario::Args),
    /// List the registered protocols.
    Protocols,
}

fn main() -> ExitCode {
    keep_freed_memory();
    let cli = Cli::parse();
    match cli.command {
        Command::Server(args) => server::main(args),
        Command::Local(args) => local::main(args),
        Command::Proxy(args) => proxy::main(args),
        Command::Ctl(args) => ctl::main(args),
        Command::Check(args) => ExitCode::from(synod_sim::cli::run_check(&args).clamp(0, 255) as u8),
        Command::Bench(args) => bench(*args),
        Command::Fault(args) => fault::main(args),
        Command::Scenario(args) => scenario::main(args),
        Command::Protocols => {
            for p in synod_protocols::registry::all() {
                let t = p.tolerates;
                println!("{:<12} {} [failures tolerated: {} of 3, {} of 5]", p.name, p.description, t(3), t(5));
            }
            ExitCode::SUCCESS
        }
    }
}

fn bench(args: synod_bench::cli::BenchArgs) -> ExitCode {
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(synod_bench::cli::run_bench(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
