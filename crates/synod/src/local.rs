//! `synod local`: a whole cluster on this machine, one child process per replica.
//!
//! Port layout for base port B and node i (1-based): peers on B+i, clients on B+100+i, admin
//! HTTP on B+200+i, Redis protocol (RESP) on B+300+i — with the default B = 7100 the client
//! endpoints are 127.0.0.1:7201.. (the `synod ctl` default) and `redis-cli -p 7401` talks to
//! node 1. The process machinery and `cluster.toml` live in [`synod_harness::cluster`];
//! this process is the cluster's supervisor: it keeps running when a replica dies (a
//! `synod fault kill`), and restarts replicas that `synod fault restart` asks for.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use synod_core::ProtocolParams;
use synod_harness::cluster::{Cluster, Ports, Spec, StartError};
use synod_wal::FsyncMode;

#[derive(Parser, Debug)]
#[command(after_help = "Ports for base port B and node i: peers B+i, clients B+100+i, admin HTTP B+200+i.\n\
    Each replica logs to <data-dir>/node<i>.log. <data-dir>/cluster.toml describes the running\n\
    cluster for `synod fault --cluster`. Ctrl-C or SIGTERM stops every replica.")]
pub struct Args {
    /// Number of replicas.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=99))]
    pub nodes: u32,
    /// Replication protocol (registry name).
    #[arg(long, default_value = "multipaxos")]
    pub protocol: String,
    /// Directory for configs, logs and WALs (default: a fresh directory under the system
    /// temp dir). Reusing a directory restarts the cluster from its WALs.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// No write-ahead logs (benchmarks only).
    #[arg(long)]
    pub in_memory: bool,
    /// When WAL commits reach the disk: never, batch or always.
    #[arg(long, default_value_t = FsyncMode::Batch)]
    pub fsync: FsyncMode,
    /// First port of the layout (see below).
    #[arg(long, default_value_t = 7100)]
    pub base_port: u16,
    /// Log filter of the replicas.
    #[arg(long, default_value = "info")]
    pub log_level: String,
    /// Protocol parameter KEY=VALUE (repeatable): a ProtocolParams field such as
    /// `snapshot_every=0` or `heartbeat_ms=20`, or a protocol option such as `prevote=true`.
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,
    /// TLS on every port: mutual TLS between the replicas, TLS on the native and Redis
    /// ports. A throwaway CA and node certificates are generated under <data-dir>/tls/;
    /// clients use `--tls-ca <data-dir>/tls/ca.pem` (docs/security.md).
    #[arg(long)]
    pub tls: bool,
    /// A password for the native and Redis ports (clients: `--password`, `redis-cli -a`).
    #[arg(long, env = "SYNOD_PASSWORD")]
    pub password: Option<String>,
}

pub fn main(args: Args) -> ExitCode {
    let mut params = ProtocolParams::default();
    for p in &args.params {
        if let Err(e) = params.set(p) {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    let spec = Spec {
        nodes: args.nodes,
        protocol: args.protocol.clone(),
        data_dir: args.data_dir.clone(),
        in_memory: args.in_memory,
        fsync: args.fsync,
        ports: Ports::Base(args.base_port),
        log_level: args.log_level.clone(),
        params,
        server_exe: None,
        tls: args.tls,
        password: args.password.clone(),
    };
    let mut cluster = match Cluster::start(&spec) {
        Ok(c) => c,
        Err(e @ StartError::Usage(_)) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    print_table(&args, &cluster);

    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            cluster.stop();
            return ExitCode::FAILURE;
        }
    };
    // Reports replicas that die and serves restart requests until a signal; keeps running
    // with every replica down too: `synod fault restart` can bring them back.
    let signal = runtime.block_on(cluster.supervise_until(crate::signal::shutdown()));
    cluster.stop();
    println!("{signal} received: all replicas stopped");
    ExitCode::SUCCESS
}

fn print_table(args: &Args, cluster: &Cluster) {
    let storage = if args.in_memory { "in memory".to_string() } else { format!("fsync {}", args.fsync) };
    let table = cluster.table();
    println!("synod local: {} x {} ({storage}), files in {}", table.len(), args.protocol, cluster.dir.display());
    println!("{:<5} {:<8} {:<22} {:<29} {:<}", "NODE", "PID", "CLIENT", "ADMIN", "DATA DIR");
    for (m, pid, data) in &table {
        let data = match data {
            Some(d) if !args.in_memory => d.display().to_string(),
            _ => "(in memory)".to_string(),
        };
        println!(
            "{:<5} {:<8} {:<22} {:<29} {}",
            m.id,
            pid.map_or("-".to_string(), |p| p.to_string()),
            m.client_addr.to_string(),
            format!("http://{}", m.admin_addr),
            data
        );
    }
    let endpoints = cluster.client_endpoints().join(",");
    println!("logs: {}/node<N>.log", cluster.dir.display());
    println!("cluster file: {}", cluster.file_path.display());
    // What every client needs beyond the endpoints: the CA file, the password.
    let mut ctl_extra = String::new();
    let mut cli_extra = String::new();
    if args.tls {
        let ca = cluster.dir.join("tls").join("ca.pem");
        println!("TLS on every port; CA certificate: {}", ca.display());
        ctl_extra.push_str(&format!(" --tls-ca {}", ca.display()));
        cli_extra.push_str(&format!(" --tls --cacert {}", ca.display()));
    }
    if args.password.is_some() {
        ctl_extra.push_str(" --password <password>");
        cli_extra.push_str(" -a <password>");
    }
    println!("try:  synod ctl --endpoints {endpoints}{ctl_extra} put hello world");
    println!("      synod ctl --endpoints {endpoints}{ctl_extra} status");
    print_resp_hint(table.iter().map(|(m, _, _)| m), &cli_extra);
    println!("      synod fault --cluster {} kill leader", cluster.file_path.display());
    println!("Ctrl-C stops the cluster.");
}

/// The Redis front end's ports and a redis-cli line for the first of them.
fn print_resp_hint<'a>(members: impl Iterator<Item = &'a synod_runtime::Member>, extra: &str) {
    let ports: Vec<String> = members.filter_map(|m| m.resp_addr).map(|a| a.port().to_string()).collect();
    if let Some(first) = ports.first() {
        println!("      redis-cli -p {first}{extra} set hello world   (Redis protocol on ports {})", ports.join(","));
    }
}
