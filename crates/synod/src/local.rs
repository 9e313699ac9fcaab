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
    /// Also start this many proxy processes (`synod proxy`): native clients on B+400+i,
    /// Redis on B+500+i. Clients given the proxies' addresses go through them (Nezha's
    /// proxy mode); the replicas' own client ports keep working (non-proxy mode).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=99))]
    pub proxies: u32,
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
        // The proxies' certificates, from the cluster's CA.
        extra_certs: (1..=args.proxies).map(proxy_id).collect(),
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
    let mut proxies = match start_proxies(&args, &cluster) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            cluster.stop();
            return ExitCode::FAILURE;
        }
    };

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
    for p in &mut proxies {
        let _ = p.kill();
        let _ = p.wait();
    }
    cluster.stop();
    println!("{signal} received: all replicas stopped");
    ExitCode::SUCCESS
}

/// The id of proxy `i` (1-based).
fn proxy_id(i: u32) -> u32 {
    1000 + i
}

/// `synod proxy`'s certificate flags for proxy `id` when the cluster has generated TLS files.
fn tls_args(cluster: &Cluster, id: u32) -> Vec<std::ffi::OsString> {
    let dir = cluster.dir.join("tls");
    let (cert, key) = (dir.join(format!("node{id}.pem")), dir.join(format!("node{id}.key")));
    if !cert.exists() {
        return Vec::new();
    }
    vec!["--tls-cert".into(), cert.into(), "--tls-key".into(), key.into()]
}

/// Start `args.proxies` proxy processes for the cluster, wait until each accepts
/// connections, and print their addresses.
fn start_proxies(args: &Args, cluster: &Cluster) -> Result<Vec<std::process::Child>, String> {
    if args.proxies == 0 {
        return Ok(Vec::new());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the synod executable: {e}"))?;
    let mut children = Vec::new();
    let mut rows = Vec::new();
    for i in 1..=args.proxies {
        let port = |off: u32| {
            u16::try_from(u32::from(args.base_port) + off + i).map_err(|_| "proxy port above 65535".to_string())
        };
        let listen = std::net::SocketAddr::from(([127, 0, 0, 1], port(400)?));
        let resp = std::net::SocketAddr::from(([127, 0, 0, 1], port(500)?));
        let log_path = cluster.dir.join(format!("proxy{i}.log"));
        let log = std::fs::File::create(&log_path).map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let child = std::process::Command::new(&exe)
            .arg("proxy")
            .arg("--cluster")
            .arg(&cluster.file_path)
            .args(["--listen", &listen.to_string(), "--resp", &resp.to_string(), "--id", &proxy_id(i).to_string()])
            .args(tls_args(cluster, proxy_id(i)))
            .env("RUST_LOG", &args.log_level)
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| format!("cannot start proxy {i}: {e}"))?;
        rows.push((i, child.id(), listen, resp));
        children.push(child);
    }
    for (i, _, listen, _) in &rows {
        let start = std::time::Instant::now();
        while std::net::TcpStream::connect(listen).is_err() {
            if start.elapsed() > std::time::Duration::from_secs(10) {
                return Err(format!(
                    "proxy {i} does not listen on {listen} (see {}/proxy{i}.log)",
                    cluster.dir.display()
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    println!("{:<5} {:<8} {:<22} {:<}", "PROXY", "PID", "CLIENT", "RESP");
    for (i, pid, listen, resp) in &rows {
        println!("{:<5} {:<8} {:<22} {}", proxy_id(*i), pid, listen.to_string(), resp);
    }
    let endpoints: Vec<String> = rows.iter().map(|r| r.2.to_string()).collect();
    println!(
        "proxies: {}   (synod ctl --endpoints {} ..., synod bench --target synod={})",
        endpoints.join(","),
        endpoints.join(","),
        endpoints.join(",")
    );
    Ok(children)
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
            format!("{}://{}", if args.tls { "https" } else { "http" }, m.admin_addr),
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
        println!(
            "TLS on every port (admin: HTTPS, `curl --cacert {}`); CA certificate: {}",
            ca.display(),
            ca.display()
        );
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
