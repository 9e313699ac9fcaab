//! A cluster of replica processes on this machine, shared by `synod local` and
//! `synod scenario run`, and its description file `cluster.toml`.
//!
//! The children are this very executable run as `synod server --config nodeN.toml`, so a
//! local cluster exercises exactly what a real deployment runs.
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

use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use synod_core::{NodeId, ProtocolParams};
use synod_runtime::{Member, NodeConfig};
use synod_wal::FsyncMode;

/// How long a replica may take from spawn to answering `/health`.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a replica may take to exit after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the supervisor looks for exited replicas and restart requests.
pub const POLL: Duration = Duration::from_millis(100);
/// Name of the description file inside the cluster directory.
pub const CLUSTER_FILE: &str = "cluster.toml";

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
    pub nodes: u32,
    pub protocol: String,
    /// Directory for configs, logs, WALs and `cluster.toml`; None: a fresh temp directory.
    pub data_dir: Option<PathBuf>,
    pub in_memory: bool,
    pub fsync: FsyncMode,
    pub ports: Ports,
    pub log_level: String,
    pub params: ProtocolParams,
}

/// Why a cluster could not be started: bad settings (exit code 2) or a failure (1).
#[derive(Debug)]
pub enum StartError {
    Usage(String),
    Failed(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Usage(m) | StartError::Failed(m) => f.write_str(m),
        }
    }
}

/// `cluster.toml`: everything `synod fault` needs to find and hurt the replicas.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    pub protocol: String,
    /// The cluster directory (holds this file, the configs, logs and `control/`).
    pub dir: PathBuf,
    /// The process that spawned the replicas and restarts them on request.
    pub supervisor_pid: u32,
    pub in_memory: bool,
    pub nodes: Vec<NodeEntry>,
}

/// One replica in `cluster.toml`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeEntry {
    pub id: NodeId,
    /// Pid of the running process (absent while the node is down).
    #[serde(default)]
    pub pid: Option<u32>,
    pub state: NodeState,
    pub peer_addr: SocketAddr,
    pub client_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub config: PathBuf,
    pub log: PathBuf,
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    /// How many times the supervisor has started this node.
    pub starts: u32,
}

impl NodeEntry {
    /// The admin bearer token from this node's config file, if it has one.
    pub fn admin_token(&self) -> Option<String> {
        NodeConfig::load(&self.config).ok().and_then(|c| c.admin_token().ok().flatten())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    Running,
    Exited,
}

impl ClusterFile {
    /// Load from a `cluster.toml` path or from the cluster directory holding one.
    pub fn load(path: &Path) -> Result<(PathBuf, ClusterFile), String> {
        let file = if path.is_dir() { path.join(CLUSTER_FILE) } else { path.to_path_buf() };
        let text = std::fs::read_to_string(&file).map_err(|e| {
            format!(
                "cannot read cluster file {}: {e} (give the file `synod local` printed, or its directory)",
                file.display()
            )
        })?;
        let c: ClusterFile =
            toml::from_str(&text).map_err(|e| format!("invalid cluster file {}: {e}", file.display()))?;
        Ok((file, c))
    }

    pub fn node(&self, id: NodeId) -> Result<&NodeEntry, String> {
        self.nodes.iter().find(|n| n.id == id).ok_or_else(|| {
            let ids: Vec<String> = self.nodes.iter().map(|n| n.id.to_string()).collect();
            format!("no node {id} in this cluster (nodes: {})", ids.join(", "))
        })
    }

    pub fn ids(&self) -> Vec<NodeId> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    pub fn control_dir(&self) -> PathBuf {
        self.dir.join("control")
    }

    /// Write atomically (temp file + rename), so a reader never sees half a file.
    fn write(&self, path: &Path) -> Result<(), String> {
        let text = toml::to_string(self).map_err(|e| format!("cannot render the cluster file: {e}"))?;
        let text = format!(
            "# Written by the synod process {} that supervises this cluster; read by `synod fault`.\n{text}",
            self.supervisor_pid
        );
        let tmp = path.with_extension("toml.tmp");
        std::fs::write(&tmp, text).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, path).map_err(|e| format!("cannot write {}: {e}", path.display()))
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
    pub dir: PathBuf,
    pub file_path: PathBuf,
    pub protocol: String,
    pub in_memory: bool,
    nodes: Vec<Node>,
}

impl Cluster {
    /// Write the configs, start every replica, wait until all answer `/health`, and write
    /// `cluster.toml`. On failure every started replica is stopped again.
    pub fn start(spec: &Spec) -> Result<Cluster, StartError> {
        let (dir, configs) = prepare(spec).map_err(StartError::Usage)?;
        let mut cluster = Cluster {
            file_path: dir.join(CLUSTER_FILE),
            dir,
            protocol: spec.protocol.clone(),
            in_memory: spec.in_memory,
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

    pub fn members(&self) -> Vec<Member> {
        self.nodes.iter().map(|n| n.config.me().clone()).collect()
    }

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
        let node = &mut self.nodes[i];
        let exe = std::env::current_exe().map_err(|e| format!("cannot find the synod executable: {e}"))?;
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
            let admin = node.config.me().admin_addr;
            while let Some(child) = node.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    node.child = None;
                    return Err(format!(
                        "node {id} exited during startup ({status}); last lines of {}:\n{}",
                        node.log.display(),
                        tail(&node.log, 20)
                    ));
                }
                if matches!(crate::http::get(admin, "/health", Duration::from_secs(1)), Ok((200, _))) {
                    break;
                }
                if start.elapsed() > STARTUP_TIMEOUT {
                    return Err(format!(
                        "node {id} did not answer http://{admin}/health within {STARTUP_TIMEOUT:?}; see {}",
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
        crate::fault::remove_cpu_cgroups(&self.dir);
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

/// Check the ports, create the directory and write one config per node.
fn prepare(spec: &Spec) -> Result<(PathBuf, Vec<(NodeConfig, PathBuf)>), String> {
    let n = spec.nodes;
    if n == 0 {
        return Err("a cluster needs at least one replica".into());
    }
    synod_protocols::registry::find(&spec.protocol).map_err(|e| format!("protocol: {e}"))?;
    let addr = |port: u16| SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    let members: Vec<Member> = match spec.ports {
        Ports::Base(base) => {
            if u32::from(base) + 300 + n > u32::from(u16::MAX) {
                return Err(format!(
                    "--base-port {base} leaves no room for {n} nodes (needs base + 300 + nodes <= 65535)"
                ));
            }
            let p = |off: u32| addr((u32::from(base) + off) as u16);
            (1..=n)
                .map(|i| Member {
                    id: i,
                    peer_addr: p(i),
                    client_addr: p(100 + i),
                    admin_addr: p(200 + i),
                    resp_addr: Some(p(300 + i)),
                })
                .collect()
        }
        Ports::Free => {
            // Bound together so they are distinct, released just before the replicas bind.
            let listeners: Vec<TcpListener> = (0..3 * n)
                .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
                .collect::<Result<_, _>>()
                .map_err(|e| format!("cannot find free ports: {e}"))?;
            let ports: Vec<u16> = listeners.iter().filter_map(|l| l.local_addr().ok()).map(|a| a.port()).collect();
            (1..=n)
                .map(|i| {
                    let k = 3 * (i - 1) as usize;
                    Member {
                        id: i,
                        peer_addr: addr(ports[k]),
                        client_addr: addr(ports[k + 1]),
                        admin_addr: addr(ports[k + 2]),
                        resp_addr: None,
                    }
                })
                .collect()
        }
    };
    for m in &members {
        let resp = m.resp_addr.map(|a| ("RESP", a));
        for (kind, a) in
            [("peer", m.peer_addr), ("client", m.client_addr), ("admin", m.admin_addr)].into_iter().chain(resp)
        {
            if let Err(e) = TcpListener::bind(a) {
                return Err(format!(
                    "port {} ({kind} port of node {}) is not available: {e}; choose another --base-port",
                    a.port(),
                    m.id
                ));
            }
        }
    }
    let dir = match &spec.data_dir {
        Some(d) => d.clone(),
        None => {
            let stamp = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
            std::env::temp_dir().join(format!("synod-local-{}-{stamp}", std::process::id()))
        }
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let dir = dir.canonicalize().map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut configs = Vec::new();
    // Every local cluster gets its own peer secret and admin token (docs/security.md): the
    // default is authenticated, and `synod fault` reads the token from the node configs.
    let cluster_secret = synod_runtime::peer_auth::random_hex(32);
    let admin_token = synod_runtime::peer_auth::random_hex(24);
    for m in &members {
        let config = NodeConfig {
            id: m.id,
            cluster: "synod-local".into(),
            protocol: spec.protocol.clone(),
            data_dir: Some(dir.join(format!("node{}", m.id))),
            in_memory: spec.in_memory,
            fsync: spec.fsync,
            members: members.clone(),
            params: spec.params.clone(),
            limits: synod_core::Limits::default(),
            log_level: Some(spec.log_level.clone()),
            password: None,
            cluster_secret: Some(cluster_secret.clone()),
            cluster_secret_file: None,
            admin: synod_runtime::AdminConfig { token: Some(admin_token.clone()), ..Default::default() },
            max_connections: synod_runtime::NodeConfig::DEFAULT_MAX_CONNECTIONS,
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

/// The last `lines` lines of a log file (for error messages).
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
