//! `synod server`: run one replica until Ctrl-C or SIGTERM.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use synod_core::NodeId;
use synod_runtime::NodeConfig;
use synod_wal::FsyncMode;
use tracing_subscriber::EnvFilter;

#[derive(Parser, Debug)]
#[command(after_help = "Logging: RUST_LOG overrides the config's log_level (default: info).")]
pub struct Args {
    /// The replica's TOML config file.
    #[arg(long, env = "SYNOD_CONFIG")]
    pub config: PathBuf,
    /// Override the config's `id` (so one file can serve every replica of a cluster).
    #[arg(long)]
    pub id: Option<NodeId>,
    /// Override the config's `data_dir`.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Run without a write-ahead log (benchmarks only: a restarted replica comes back empty).
    #[arg(long)]
    pub in_memory: bool,
    /// Override the config's `fsync` mode: never, batch or always.
    #[arg(long)]
    pub fsync: Option<FsyncMode>,
    /// Join an existing cluster: `members` lists its current members and this replica,
    /// which starts empty and is not a member until `synod ctl member add` (or the admin
    /// API's POST /members/add) committed its addition (MultiPaxos / HoliPaxos).
    #[arg(long)]
    pub join: bool,
    /// Threads that run the replica's network tasks and node loop. 1 (the default): one
    /// thread runs everything (a current-thread runtime), so handing a message from a
    /// connection task to the node loop and a reply back costs no thread wake-up; blocking
    /// fsyncs still run on a separate thread (docs/performance.md). N > 1: a work-stealing
    /// runtime with N workers; 0: one worker per CPU.
    #[arg(long, env = "SYNOD_THREADS", default_value_t = 1)]
    pub threads: usize,
}

pub fn main(args: Args) -> ExitCode {
    let config = match load(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let filter =
        std::env::var("RUST_LOG").ok().or_else(|| config.log_level.clone()).unwrap_or_else(|| "info".to_string());
    let filter = match EnvFilter::try_new(&filter) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: invalid log filter {filter:?}: {e}");
            return ExitCode::from(2);
        }
    };
    // Colours only on a terminal: `synod local` sends replica logs to files.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr).init();

    let runtime = match args.threads {
        1 => tokio::runtime::Builder::new_current_thread().enable_all().build(),
        0 => tokio::runtime::Builder::new_multi_thread().enable_all().build(),
        n => tokio::runtime::Builder::new_multi_thread().worker_threads(n).enable_all().build(),
    };
    let runtime = match runtime {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let shutdown = async {
        let signal = crate::signal::shutdown().await;
        tracing::info!("{signal} received, shutting down");
    };
    let run = async move {
        match args.join {
            true => synod_runtime::run_joining(config, shutdown).await,
            false => synod_runtime::run(config, shutdown).await,
        }
    };
    match runtime.block_on(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("replica failed: {e:#}");
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Read the config, apply the command-line overrides, then validate the result (so an
/// override can fix what the file leaves open, e.g. the id).
fn load(args: &Args) -> Result<NodeConfig, String> {
    let path = args.config.display();
    let text = std::fs::read_to_string(&args.config).map_err(|e| format!("cannot read config file {path}: {e}"))?;
    let mut config: NodeConfig = toml::from_str(&text).map_err(|e| format!("invalid config {path}: {e}"))?;
    if let Some(id) = args.id {
        config.id = id;
    }
    if let Some(dir) = &args.data_dir {
        config.data_dir = Some(dir.clone());
    }
    if args.in_memory {
        config.in_memory = true;
    }
    if let Some(fsync) = args.fsync {
        config.fsync = fsync;
    }
    config.validate().map_err(|e| format!("{path}: {e}"))?;
    Ok(config)
}
