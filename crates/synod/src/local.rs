//! `synod local`: a whole cluster on this machine, one child process per replica.
//!
//! The children are this very executable run as `synod server --config nodeN.toml`, so the
//! local cluster exercises exactly what a real deployment runs. Port layout for base port B
//! and node i (1-based): peers on B+i, clients on B+100+i, admin HTTP on B+200+i — with the
//! default B = 7100 the client endpoints are 127.0.0.1:7201.. (the `synod ctl` default).

use clap::Parser;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use synod_core::{Limits, NodeId, ProtocolParams};
use synod_runtime::{Member, NodeConfig};
use synod_wal::FsyncMode;

/// How long a replica may take from spawn to answering `/health`.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a replica may take to exit after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Parser, Debug)]
#[command(after_help = "Ports for base port B and node i: peers B+i, clients B+100+i, admin HTTP B+200+i.\n\
    Each replica logs to <data-dir>/node<i>.log. Ctrl-C or SIGTERM stops every replica.")]
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
}

/// One running replica.
struct Node {
    id: NodeId,
    member: Member,
    data_dir: PathBuf,
    log: PathBuf,
    child: Child,
    /// Set once the child has exited (and been reported).
    exited: bool,
}

pub fn main(args: Args) -> ExitCode {
    let (dir, configs) = match prepare(&args) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let mut nodes = Vec::new();
    for (config, path) in &configs {
        match spawn(config, path, &dir) {
            Ok(n) => nodes.push(n),
            Err(e) => {
                eprintln!("error: {e}");
                stop_all(&mut nodes);
                return ExitCode::FAILURE;
            }
        }
    }
    if let Err(e) = wait_healthy(&mut nodes) {
        eprintln!("error: {e}");
        stop_all(&mut nodes);
        return ExitCode::FAILURE;
    }
    print_table(&args, &dir, &nodes);

    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            stop_all(&mut nodes);
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(supervise(&mut nodes));
    stop_all(&mut nodes);
    match outcome {
        Ok(signal) => {
            println!("{signal} received: all replicas stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Check the ports, create the directory and write one config per node.
fn prepare(args: &Args) -> Result<(PathBuf, Vec<(NodeConfig, PathBuf)>), String> {
    let n = args.nodes;
    if u32::from(args.base_port) + 200 + n > u32::from(u16::MAX) {
        return Err(format!(
            "--base-port {} leaves no room for {n} nodes (needs base + 200 + nodes <= 65535)",
            args.base_port
        ));
    }
    let addr = |port: u32| SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port as u16));
    let base = u32::from(args.base_port);
    let members: Vec<Member> = (1..=n)
        .map(|i| Member {
            id: i,
            peer_addr: addr(base + i),
            client_addr: addr(base + 100 + i),
            admin_addr: addr(base + 200 + i),
        })
        .collect();
    for m in &members {
        for (kind, a) in [("peer", m.peer_addr), ("client", m.client_addr), ("admin", m.admin_addr)] {
            if let Err(e) = TcpListener::bind(a) {
                return Err(format!(
                    "port {} ({kind} port of node {}) is not available: {e}; choose another --base-port",
                    a.port(),
                    m.id
                ));
            }
        }
    }
    let dir = match &args.data_dir {
        Some(d) => d.clone(),
        None => {
            let stamp = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
            std::env::temp_dir().join(format!("synod-local-{}-{stamp}", std::process::id()))
        }
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let dir = dir.canonicalize().map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut configs = Vec::new();
    for m in &members {
        let config = NodeConfig {
            id: m.id,
            cluster: "synod-local".into(),
            protocol: args.protocol.clone(),
            data_dir: Some(dir.join(format!("node{}", m.id))),
            in_memory: args.in_memory,
            fsync: args.fsync,
            members: members.clone(),
            params: ProtocolParams::default(),
            limits: Limits::default(),
            log_level: Some(args.log_level.clone()),
        };
        config.validate().map_err(|e| e.to_string())?;
        let text = toml::to_string(&config).map_err(|e| format!("cannot render the config of node {}: {e}", m.id))?;
        let path = dir.join(format!("node{}.toml", m.id));
        let text = format!("# Written by `synod local`; run with `synod server --config {}`.\n{text}", path.display());
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        configs.push((config, path));
    }
    Ok((dir, configs))
}

/// Start `synod server --config <path>` as a child process logging to `<dir>/node<id>.log`.
fn spawn(config: &NodeConfig, path: &Path, dir: &Path) -> Result<Node, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the synod executable: {e}"))?;
    let log = dir.join(format!("node{}.log", config.id));
    let open_log = || {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| format!("cannot open log {}: {e}", log.display()))
    };
    let mut cmd = Command::new(&exe);
    cmd.arg("server").arg("--config").arg(path).stdin(Stdio::null()).stdout(open_log()?).stderr(open_log()?);
    // Ctrl-C in the terminal reaches only this process, which then stops the replicas in
    // order; and if this process dies without doing so, the kernel sends them SIGTERM.
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
        #[cfg(target_os = "linux")]
        // SAFETY: prctl is async-signal-safe and touches only the child being set up.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let child = cmd.spawn().map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    Ok(Node {
        id: config.id,
        member: config.me().clone(),
        data_dir: config.data_dir.clone().unwrap_or_default(),
        log,
        child,
        exited: false,
    })
}

/// Wait until every replica answers `/health`, or fail naming the one that did not.
fn wait_healthy(nodes: &mut [Node]) -> Result<(), String> {
    let start = Instant::now();
    for node in nodes.iter_mut() {
        loop {
            if let Ok(Some(status)) = node.child.try_wait() {
                node.exited = true;
                return Err(format!(
                    "node {} exited during startup ({status}); last lines of {}:\n{}",
                    node.id,
                    node.log.display(),
                    tail(&node.log, 20)
                ));
            }
            if matches!(crate::http::get(node.member.admin_addr, "/health", Duration::from_secs(1)), Ok((200, _))) {
                break;
            }
            if start.elapsed() > STARTUP_TIMEOUT {
                return Err(format!(
                    "node {} did not answer http://{}/health within {STARTUP_TIMEOUT:?}; see {}",
                    node.id,
                    node.member.admin_addr,
                    node.log.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

fn print_table(args: &Args, dir: &Path, nodes: &[Node]) {
    let storage = if args.in_memory { "in memory".to_string() } else { format!("fsync {}", args.fsync) };
    println!("synod local: {} x {} ({storage}), files in {}", nodes.len(), args.protocol, dir.display());
    println!("{:<5} {:<8} {:<22} {:<29} {:<}", "NODE", "PID", "CLIENT", "ADMIN", "DATA DIR");
    for n in nodes {
        let data = if args.in_memory { "(in memory)".to_string() } else { n.data_dir.display().to_string() };
        println!(
            "{:<5} {:<8} {:<22} {:<29} {}",
            n.id,
            n.child.id(),
            n.member.client_addr.to_string(),
            format!("http://{}", n.member.admin_addr),
            data
        );
    }
    let endpoints: Vec<String> = nodes.iter().map(|n| n.member.client_addr.to_string()).collect();
    println!("logs: {}/node<N>.log", dir.display());
    println!("try:  synod ctl --endpoints {} put hello world", endpoints.join(","));
    println!("      synod ctl --endpoints {} status", endpoints.join(","));
    println!("Ctrl-C stops the cluster.");
}

/// Run until a signal, reporting replicas that die (the others keep running, as in a real
/// cluster). Fails only when every replica is gone.
async fn supervise(nodes: &mut [Node]) -> Result<&'static str, String> {
    let signal = crate::signal::shutdown();
    tokio::pin!(signal);
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            s = &mut signal => return Ok(s),
            _ = tick.tick() => {}
        }
        for n in nodes.iter_mut().filter(|n| !n.exited) {
            if let Ok(Some(status)) = n.child.try_wait() {
                n.exited = true;
                eprintln!(
                    "node {} (pid {}) exited ({status}); the other replicas keep running. Last lines of {}:\n{}",
                    n.id,
                    n.child.id(),
                    n.log.display(),
                    tail(&n.log, 10)
                );
            }
        }
        if nodes.iter().all(|n| n.exited) {
            return Err("every replica has exited".into());
        }
    }
}

/// SIGTERM every live replica, wait for them, SIGKILL the ones that do not exit in time.
fn stop_all(nodes: &mut [Node]) {
    for n in nodes.iter_mut().filter(|n| !n.exited) {
        terminate(&n.child);
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    for n in nodes.iter_mut().filter(|n| !n.exited) {
        loop {
            match n.child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() >= deadline => {
                    eprintln!("node {} did not stop within {STOP_TIMEOUT:?}; killing it", n.id);
                    let _ = n.child.kill();
                    let _ = n.child.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        n.exited = true;
    }
}

#[cfg(unix)]
fn terminate(child: &Child) {
    // SAFETY: kill(2) on the pid of a child we have not reaped yet (so it cannot be reused).
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
}

#[cfg(not(unix))]
fn terminate(_child: &Child) {}

/// The last `lines` lines of a log file (for error messages).
fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
