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

/// Warnings of the client-side commands (bench, ctl, fault, scenario) on stderr: without a
/// subscriber a run's `tracing::warn!` (a reconnect that failed, operations still open at the
/// end) would vanish. `RUST_LOG` overrides the level. Servers and proxies set up their own.
fn client_side_logging() {
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".to_string());
    let filter =
        tracing_subscriber::EnvFilter::try_new(&filter).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr).try_init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(cli.command, Command::Ctl(_) | Command::Bench(_) | Command::Fault(_) | Command::Scenario(_)) {
        client_side_logging();
    }
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
