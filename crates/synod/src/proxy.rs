//! `synod proxy`: a stateless proxy process in front of a cluster (Nezha's proxies, §4).
//!
//! It runs the protocol's client policy — the same code the client library embeds in the
//! non-proxy mode — for the clients that connect to it: they speak the native client protocol
//! (or Redis, with `--resp`) to the proxy, which multicasts to the replicas and answers once
//! the policy commits. See `synod_runtime::proxy`.

use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use synod_core::NodeId;
use synod_harness::cluster::ClusterFile;
use synod_runtime::proxy::ProxyConfig;
use synod_runtime::NodeConfig;
use tracing_subscriber::EnvFilter;

#[derive(Parser, Debug)]
#[command(after_help = "Clients connect to --listen with the native protocol (synod ctl, synod bench \
    --target synod=ADDR,..., the client library) or to --resp with the Redis protocol. Logging: RUST_LOG \
    (default info).")]
pub struct Args {
    /// The cluster to serve: the `cluster.toml` that `synod local` prints (or its directory).
    #[arg(long)]
    pub cluster: PathBuf,
    /// The native client listener.
    #[arg(long, default_value = "127.0.0.1:7501")]
    pub listen: SocketAddr,
    /// A Redis-protocol listener as well.
    #[arg(long)]
    pub resp: Option<SocketAddr>,
    /// The id this proxy reports in its status (default: 100000 + the listen port); must
    /// differ from the replicas' ids and from the other proxies' ids a client is given.
    #[arg(long)]
    pub id: Option<NodeId>,
    /// One attempt without a committed answer for this long is resubmitted (§5.5).
    #[arg(long, default_value = "1s", value_parser = synod_bench::cli::parse_duration)]
    pub attempt_timeout: Duration,
    /// The error bound of this host's synchronized clock in microseconds (Nezha widens its
    /// deadlines by it, §3); default: the replicas' `clock_error_us`.
    #[arg(long)]
    pub clock_error_us: Option<u64>,
    /// This proxy's certificate chain (PEM), signed by the cluster's CA: required when the
    /// replicas' config has `[tls]` with `native` or `redis` on (the proxy then serves those
    /// ports with TLS and dials the replicas with TLS, checking them against the CA).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

pub fn main(args: Args) -> ExitCode {
    let cfg = match load(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_string());
    let filter = match EnvFilter::try_new(&filter) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: invalid log filter {filter:?}: {e}");
            return ExitCode::from(2);
        }
    };
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr).init();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
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
    match runtime.block_on(synod_runtime::proxy::run(cfg, shutdown)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The proxy's config from the cluster file: the replicas' client addresses, the protocol,
/// and the protocol options of the first replica's config (the policy reads its own).
fn load(args: &Args) -> Result<ProxyConfig, String> {
    let (path, cluster) = ClusterFile::load(&args.cluster)?;
    let first = cluster.nodes.first().ok_or_else(|| format!("{}: the cluster has no nodes", path.display()))?;
    let node = NodeConfig::load(&first.config).map_err(|e| format!("{}: {e}", first.config.display()))?;
    let replicas = cluster.nodes.iter().map(|n| (n.id, n.client_addr)).collect();
    let id = args.id.unwrap_or(100_000 + u32::from(args.listen.port()));
    let mut cfg = ProxyConfig::new(id, &cluster.protocol, replicas, args.listen);
    cfg.options = node.params.options.clone();
    cfg.resp = args.resp;
    cfg.attempt_timeout = args.attempt_timeout;
    cfg.limits = node.limits;
    cfg.clock_error = Duration::from_micros(args.clock_error_us.unwrap_or(node.clock_error_us));
    // The cluster's security, from the replica's config: its password, and TLS where its
    // client ports have it (with this proxy's own certificate).
    cfg.security.password = node.password.clone();
    if let Some(t) = &node.tls {
        cfg.security.tls_native = t.native;
        cfg.security.tls_redis = t.redis;
    }
    let wants_tls = cfg.security.tls_native || cfg.security.tls_redis;
    cfg.security.tls = match (&args.tls_cert, &args.tls_key, &node.tls) {
        (Some(cert), Some(key), Some(t)) => {
            let files = synod_runtime::tls::NodeFiles { ca: t.ca.clone(), cert: cert.clone(), key: key.clone() };
            Some(synod_runtime::tls::NodeTls::load(&files).map_err(|e| e.to_string())?)
        }
        (Some(_), _, None) => {
            return Err(format!("--tls-cert: the cluster ({}) has no TLS", first.config.display()));
        }
        _ if wants_tls => {
            return Err(format!(
                "the cluster uses TLS on its client ports ({}): give the proxy its certificate, signed by the \
                 cluster's CA (--tls-cert, --tls-key)",
                first.config.display()
            ));
        }
        _ => None,
    };
    Ok(cfg)
}
