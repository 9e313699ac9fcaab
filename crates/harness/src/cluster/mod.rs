//! Cluster supervision: a cluster of replica processes on this machine, shared by
//! `synod local` and `synod scenario run`, and its description file `cluster.toml`
//! ([`ClusterFile`]).
//!
//! The children are the synod executable run as `synod server --config nodeN.toml` (by
//! default the running executable, see [`Spec::server_exe`]), so a local cluster exercises
//! exactly what a real deployment runs. [`Cluster::start`] writes the configs
//! (`config` module) and starts the replicas; [`Cluster::poll`] is one supervision step,
//! run in a loop by [`Cluster::supervise_until`] (`synod local`) or on a thread of its own by
//! [`Cluster::supervise_in_background`] (scenarios); [`Cluster::stop`] (or dropping the
//! [`Cluster`]) stops the replicas.
//!
//! **Who restarts a killed replica.** The process that spawned the replicas (the
//! *supervisor*: `synod local`, or the scenario runner) stays their parent for their whole
//! life: it reaps them, stops them on Ctrl-C, and is the only one that starts them again.
//! `synod fault kill` only sends SIGKILL; the supervisor notices the exit, logs it, keeps
//! the other replicas running and marks the node `exited` in `cluster.toml`.
//! `synod fault restart N` drops a request file `control/restart-N` into the cluster
//! directory; the supervisor picks it up within [`POLL`], spawns the replica again from the
//! same config (same WAL directory) and writes the new pid into `cluster.toml`. Keeping the
//! supervisor the only parent means a restarted replica is stopped with the cluster, dies with
//! it (PR_SET_PDEATHSIG), and never outlives a test as an orphan.

mod config;
mod file;

pub use file::{ClusterFile, NodeEntry, NodeState, CLUSTER_FILE};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use synod_core::{NodeId, ProtocolParams};
use synod_runtime::{Member, NodeConfig};
use synod_wal::FsyncMode;

/// How long a replica may take from spawn to answering `/health`.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a replica may take to exit after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the supervisor looks for exited replicas and restart requests.
pub const POLL: Duration = Duration::from_millis(100);

/// Where the replicas listen.
#[derive(Clone, Copy, Debug)]
pub enum Ports {
    /// For base port B and node i (1-based): peers B+i, clients B+100+i, admin B+200+i.
    Base(u16),
    /// Ports the OS hands out (scenarios and tests: never collide with anything).
    Free,
}

/// What cluster to start.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Number of replicas (ids 1..=nodes).
    pub nodes: u32,
    /// Registered protocol name (see `synod_protocols::registry`).
    pub protocol: String,
    /// Directory for configs, logs, WALs and `cluster.toml`; None: a fresh temp directory.
    pub data_dir: Option<PathBuf>,
    /// No write-ahead logs: a restarted replica comes back empty.
    pub in_memory: bool,
    /// When WAL commits reach the disk.
    pub fsync: FsyncMode,
    /// Where the replicas listen.
    pub ports: Ports,
    /// Log filter of the replicas (`info`, `debug`, ...).
    pub log_level: String,
    /// Protocol parameters, written into every node config.
    pub params: ProtocolParams,
    /// The synod executable the replicas run as `<exe> server --config nodeN.toml`;
    /// None: the running executable (`synod local`, `synod scenario run`). A program that
    /// is not synod itself (a test, another tool) names the synod binary here.
    pub server_exe: Option<PathBuf>,
    /// TLS on every port (peers mutual, native and Redis ports): a throwaway CA and node
    /// certificates are generated under `<dir>/tls/` (docs/security.md).
    pub tls: bool,
    /// The replicas' `password` (native AUTH and Redis `requirepass`); None = none.
    pub password: Option<String>,
    /// With `tls`: more identities the throwaway CA certifies, `<dir>/tls/node<id>.pem` and
    /// `.key` naming `synod-node-<id>`, `localhost` and 127.0.0.1 (proxies).
    pub extra_certs: Vec<u32>,
}

/// Why a cluster could not be started: bad settings (exit code 2) or a failure (1).
#[derive(Debug)]
pub enum StartError {
    /// The spec cannot work (no replicas, unknown protocol, ports taken, ...).
    Usage(String),
    /// A replica could not be started or did not become healthy.
    Failed(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Usage(m) | StartError::Failed(m) => f.write_str(m),
        }
    }
}

/// One replica process.
struct Node {
    config: NodeConfig,
    config_path: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    starts: u32,
    /// Started with `--join` (added to the running cluster by a membership change).
    join: bool,
}

/// The supervisor of a running cluster: owns the child processes.
pub struct Cluster {
    /// The cluster directory: configs, logs, WALs, `cluster.toml` and `control/`.
    pub dir: PathBuf,
    /// The `cluster.toml` in [`Cluster::dir`], kept current by [`Cluster::poll`].
    pub file_path: PathBuf,
    /// The protocol every replica runs.
    pub protocol: String,
    /// Whether the replicas run without write-ahead logs.
    pub in_memory: bool,
    /// The executable started for each replica (None: the running one).
    server_exe: Option<PathBuf>,
    nodes: Vec<Node>,
}

impl Cluster {
    /// Write the configs, start every replica, wait until all answer `/health`, and write
    /// `cluster.toml`. On failure every started replica is stopped again.
    pub fn start(spec: &Spec) -> Result<Cluster, StartError> {
        let (dir, configs) = config::prepare(spec).map_err(StartError::Usage)?;
        let mut cluster = Cluster {
            file_path: dir.join(CLUSTER_FILE),
            dir,
            protocol: spec.protocol.clone(),
            in_memory: spec.in_memory,
            server_exe: spec.server_exe.clone(),
            nodes: configs
                .into_iter()
                .map(|(config, config_path)| Node {
                    log: config_path.with_extension("log"),
                    config,
                    config_path,
                    child: None,
                    starts: 0,
                    join: false,
                })
                .collect(),
        };
        let _ = std::fs::remove_dir_all(cluster.dir.join("control"));
        for i in 0..cluster.nodes.len() {
            if let Err(e) = cluster.spawn(i) {
                cluster.stop();
                return Err(StartError::Failed(e));
            }
        }
        if let Err(e) = cluster.wait_healthy() {
            cluster.stop();
            return Err(StartError::Failed(e));
        }
        if let Err(e) = cluster.write_file() {
            cluster.stop();
            return Err(StartError::Failed(e));
        }
        Ok(cluster)
    }

    /// The replicas' ids and addresses, in start order.
    pub fn members(&self) -> Vec<Member> {
        self.nodes.iter().map(|n| n.config.me().clone()).collect()
    }

    /// The replicas' client addresses (`host:port`), for `synod ctl` and the bench targets.
    pub fn client_endpoints(&self) -> Vec<String> {
        self.members().iter().map(|m| m.client_addr.to_string()).collect()
    }

    /// (id, pid if running, data dir) per node, for the startup table.
    pub fn table(&self) -> Vec<(Member, Option<u32>, Option<PathBuf>)> {
        self.nodes
            .iter()
            .map(|n| (n.config.me().clone(), n.child.as_ref().map(Child::id), n.config.data_dir.clone()))
            .collect()
    }

    /// The description as it stands.
    pub fn description(&self) -> ClusterFile {
        ClusterFile {
            protocol: self.protocol.clone(),
            dir: self.dir.clone(),
            supervisor_pid: std::process::id(),
            in_memory: self.in_memory,
            nodes: self
                .nodes
                .iter()
                .map(|n| {
                    let m = n.config.me();
                    NodeEntry {
                        id: m.id,
                        pid: n.child.as_ref().map(Child::id),
                        state: if n.child.is_some() { NodeState::Running } else { NodeState::Exited },
                        peer_addr: m.peer_addr,
                        client_addr: m.client_addr,
                        admin_addr: m.admin_addr,
                        config: n.config_path.clone(),
                        log: n.log.clone(),
                        data_dir: if self.in_memory { None } else { n.config.data_dir.clone() },
                        starts: n.starts,
                    }
                })
                .collect(),
        }
    }

    fn write_file(&self) -> Result<(), String> {
        self.description().write(&self.file_path)
    }

    /// Start `synod server --config <path>` for node index `i`, logging to `node<id>.log`.
    fn spawn(&mut self, i: usize) -> Result<(), String> {
        let exe = match &self.server_exe {
            Some(exe) => exe.clone(),
            None => std::env::current_exe().map_err(|e| format!("cannot find the synod executable: {e}"))?,
        };
        let node = &mut self.nodes[i];
        let open_log = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&node.log)
                .map_err(|e| format!("cannot open log {}: {e}", node.log.display()))
        };
        let mut cmd = Command::new(&exe);
        cmd.arg("server").arg("--config").arg(&node.config_path);
        if node.join {
            cmd.arg("--join");
        }
        cmd.stdin(Stdio::null()).stdout(open_log()?).stderr(open_log()?);
        // Ctrl-C in the terminal reaches only the supervisor, which then stops the replicas
        // in order; and if the supervisor dies without doing so, the kernel sends them SIGTERM.
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
        node.child = Some(child);
        node.starts += 1;
        Ok(())
    }

    /// Wait until every running replica answers `/health`, or fail naming the one that did not.
    fn wait_healthy(&mut self) -> Result<(), String> {
        let start = Instant::now();
        for node in self.nodes.iter_mut() {
            let id = node.config.id;
            let admin = crate::http::Admin::of(&node.config)?;
            while let Some(child) = node.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    node.child = None;
                    return Err(format!(
                        "node {id} exited during startup ({status}); last lines of {}:\n{}",
                        node.log.display(),
                        tail(&node.log, 20)
                    ));
                }
                if matches!(admin.get("/health", Duration::from_secs(1)), Ok((200, _))) {
                    break;
                }
                if start.elapsed() > STARTUP_TIMEOUT {
                    return Err(format!(
                        "node {id} did not answer {} within {STARTUP_TIMEOUT:?}; see {}",
                        admin.url("/health"),
                        node.log.display()
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    /// One supervision step: reap replicas that exited (the others keep running, as in a
    /// real cluster), then serve restart requests from `control/`. Returns what happened,
    /// one line per event, and keeps `cluster.toml` current.
    pub fn poll(&mut self) -> Vec<String> {
        let mut events = Vec::new();
        for n in self.nodes.iter_mut() {
            let Some(child) = n.child.as_mut() else { continue };
            if let Ok(Some(status)) = child.try_wait() {
                let pid = child.id();
                n.child = None;
                events.push(format!(
                    "node {} (pid {pid}) exited ({status}); the other replicas keep running. Last lines of {}:\n{}",
                    n.config.id,
                    n.log.display(),
                    tail(&n.log, 5)
                ));
            }
        }
        let control = self.dir.join("control");
        if let Ok(entries) = std::fs::read_dir(&control) {
            let mut requests: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
            requests.sort();
            for path in requests {
                let name = path.file_name().map(|f| f.to_string_lossy().to_string()).unwrap_or_default();
                let parse = |prefix: &str| name.strip_prefix(prefix).and_then(|s| s.parse::<NodeId>().ok());
                let event = if let Some(id) = parse("restart-") {
                    self.restart(id)
                } else if let Some(id) = parse("join-") {
                    self.join(id)
                } else if let Some(id) = parse("retire-") {
                    self.retire(id)
                } else {
                    continue;
                };
                let _ = std::fs::remove_file(&path);
                events.push(event);
            }
        }
        if !events.is_empty() {
            if let Err(e) = self.write_file() {
                events.push(format!("error: {e}"));
            }
        }
        events
    }

    /// Start node `id` again from its config (its WAL directory is kept).
    fn restart(&mut self, id: NodeId) -> String {
        let Some(i) = self.nodes.iter().position(|n| n.config.id == id) else {
            return format!("restart request for unknown node {id} ignored");
        };
        if let Some(c) = &self.nodes[i].child {
            return format!("restart request for node {id} ignored: it is running (pid {})", c.id());
        }
        match self.spawn(i) {
            Ok(()) => format!("node {id} restarted (pid {})", self.nodes[i].child.as_ref().map_or(0, Child::id)),
            Err(e) => format!("node {id} could not be restarted: {e}"),
        }
    }

    /// Start a new replica `id` on free ports with `--join` (membership changes: the
    /// caller then asks the leader to add it). Its config lists the current nodes and itself.
    fn join(&mut self, id: NodeId) -> String {
        if self.nodes.iter().any(|n| n.config.id == id) {
            return format!("join request for node {id} ignored: it exists");
        }
        let Some(template) = self.nodes.first().map(|n| n.config.clone()) else {
            return "join request ignored: no node to copy the configuration from".into();
        };
        let free = || -> Result<std::net::SocketAddr, String> {
            let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
            l.local_addr().map_err(|e| e.to_string())
        };
        let me = match (free(), free(), free()) {
            (Ok(peer_addr), Ok(client_addr), Ok(admin_addr)) => {
                Member { id, peer_addr, client_addr, admin_addr, resp_addr: None }
            }
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return format!("node {id} not started: {e}"),
        };
        let mut members = self.members();
        members.push(me);
        let config = NodeConfig { id, data_dir: Some(self.dir.join(format!("node{id}"))), members, ..template };
        if let Err(e) = config.validate() {
            return format!("node {id} not started: {e}");
        }
        let config_path = self.dir.join(format!("node{id}.toml"));
        let text = match toml::to_string(&config) {
            Ok(t) => format!(
                "# Written by `synod fault add-node`; run with `synod server --join --config {}`.\n{t}",
                config_path.display()
            ),
            Err(e) => return format!("node {id} not started: {e}"),
        };
        if let Err(e) = std::fs::write(&config_path, text) {
            return format!("node {id} not started: cannot write {}: {e}", config_path.display());
        }
        self.nodes.push(Node {
            log: config_path.with_extension("log"),
            config,
            config_path,
            child: None,
            starts: 0,
            join: true,
        });
        let i = self.nodes.len() - 1;
        match self.spawn(i) {
            Ok(()) => format!("node {id} started to join (pid {})", self.nodes[i].child.as_ref().map_or(0, Child::id)),
            Err(e) => format!("node {id} could not be started: {e}"),
        }
    }

    /// Stop replica `id` (removed from the configuration) and forget it.
    fn retire(&mut self, id: NodeId) -> String {
        let Some(i) = self.nodes.iter().position(|n| n.config.id == id) else {
            return format!("retire request for unknown node {id} ignored");
        };
        let mut node = self.nodes.remove(i);
        if let Some(mut child) = node.child.take() {
            signal(child.id(), libc::SIGCONT);
            signal(child.id(), libc::SIGTERM);
            let deadline = Instant::now() + STOP_TIMEOUT;
            while !matches!(child.try_wait(), Ok(Some(_)) | Err(_)) {
                if Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        format!("node {id} retired (stopped and removed from cluster.toml)")
    }

    /// SIGTERM every live replica, wait for them, SIGKILL the ones that do not exit in time.
    /// Paused (SIGSTOPped) replicas are continued first so that they can exit.
    pub fn stop(&mut self) {
        for n in self.nodes.iter().filter_map(|n| n.child.as_ref()) {
            signal(n.id(), libc::SIGCONT);
            signal(n.id(), libc::SIGTERM);
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        for n in self.nodes.iter_mut() {
            let Some(child) = n.child.as_mut() else { continue };
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() >= deadline => {
                        eprintln!("node {} did not stop within {STOP_TIMEOUT:?}; killing it", n.config.id);
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
            n.child = None;
        }
        let _ = self.write_file();
        crate::cgroup::remove_cpu_cgroups(&self.dir);
    }

    /// Supervise until `until` resolves, returning its output: every [`POLL`] one
    /// [`Cluster::poll`] step, whose events go to stderr. Keeps going with every replica down
    /// too (`synod fault restart` can bring them back). The replicas keep running afterwards;
    /// [`Cluster::stop`] stops them.
    pub async fn supervise_until<F: std::future::Future>(&mut self, until: F) -> F::Output {
        tokio::pin!(until);
        let mut tick = tokio::time::interval(POLL);
        loop {
            tokio::select! {
                out = &mut until => return out,
                _ = tick.tick() => {}
            }
            for event in self.poll() {
                eprintln!("{event}");
            }
        }
    }
}

/// A cluster supervised on a thread of its own ([`Cluster::supervise_in_background`]):
/// replicas that exit are reaped and restart, join and retire requests served while the
/// caller does something else (drives a workload, applies faults). [`Supervisor::stop`]
/// (or dropping it) stops the replicas.
pub struct Supervisor {
    done: Arc<AtomicBool>,
    events: Arc<Mutex<Vec<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Cluster {
    /// Hand the cluster to a supervision thread: every [`POLL`] one [`Cluster::poll`] step,
    /// whose events go to stderr and are kept (see [`Supervisor::events`]).
    pub fn supervise_in_background(self) -> Supervisor {
        let done = Arc::new(AtomicBool::new(false));
        let events = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (done, log) = (done.clone(), events.clone());
            let mut cluster = self;
            std::thread::spawn(move || {
                while !done.load(Ordering::SeqCst) {
                    for e in cluster.poll() {
                        eprintln!("{e}");
                        log.lock().expect("log lock").push(e);
                    }
                    std::thread::sleep(POLL);
                }
                cluster.stop();
            })
        };
        Supervisor { done, events, thread: Some(thread) }
    }
}

impl Supervisor {
    /// The supervision events so far (exits, restarts, ...), one line each.
    pub fn events(&self) -> Vec<String> {
        self.events.lock().expect("log lock").clone()
    }

    /// Stop supervising and stop every replica; returns all the events.
    pub fn stop(mut self) -> Vec<String> {
        self.finish();
        std::mem::take(&mut *self.events.lock().expect("log lock"))
    }

    fn finish(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.finish();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.nodes.iter().any(|n| n.child.is_some()) {
            self.stop();
        }
    }
}

#[cfg(unix)]
fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on the pid of a child we have not reaped yet (so it cannot be reused).
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// The last `lines` lines of a log file (for error messages).
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
