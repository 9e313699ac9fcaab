//! A real multi-process cluster for the integration tests: every replica is the `synod`
//! binary run as `synod server --config ...` in a temp dir, on ports the OS handed out.
//!
//! Everything waits by polling with generous deadlines (the tests run on small, loaded
//! machines); nothing relies on a fixed sleep being long enough.

#![allow(dead_code)] // each test binary uses a different part of this module

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use synod_client::{Client, ClientOptions};
use synod_core::{NodeId, ProtocolParams, Role, Status};
use synod_runtime::{Member, NodeConfig};
use synod_wal::FsyncMode;

/// Upper bound for anything that "should happen soon" on a loaded machine.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Election timing used by the tests: long enough not to trigger spuriously on a loaded
/// 2-core machine, short enough for fast failover tests.
pub fn test_params() -> ProtocolParams {
    ProtocolParams {
        heartbeat_ms: 100,
        election_timeout_min_ms: 600,
        election_timeout_max_ms: 1000,
        ..Default::default()
    }
}

/// `n` distinct free ports (bound together, then released just before use), below Linux's
/// ephemeral range (32768..): a port the OS handed out for `:0` is in that range, where the
/// replicas' own outgoing peer connections take their local ports, so one of them could take
/// a listener's port before the replica bound it ("Address already in use", seen in CI).
pub fn free_ports(n: usize) -> Vec<u16> {
    use std::time::{SystemTime, UNIX_EPOCH};
    let seed = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().subsec_nanos() ^ std::process::id();
    let mut listeners: Vec<TcpListener> = Vec::with_capacity(n);
    for attempt in 0..12_000u32 {
        if listeners.len() == n {
            break;
        }
        // 7919 is prime to 12,000: the attempts visit distinct ports.
        let port = 20_000 + (seed.wrapping_add(attempt.wrapping_mul(7919)) % 12_000) as u16;
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
            listeners.push(l);
        }
    }
    assert_eq!(listeners.len(), n, "no {n} free ports in 20000..32000");
    listeners.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub configs: Vec<NodeConfig>,
    pub children: Vec<Option<Child>>,
    /// Extra environment of every replica process (e.g. `SYNOD_WAL_POWER_LOSS=1`).
    pub env: Vec<(String, String)>,
}

impl Cluster {
    /// Write the configs of an `n`-replica cluster (ids 1..=n) without starting anything;
    /// `tweak` adjusts each config.
    pub fn configure(n: u32, fsync: FsyncMode, tweak: impl Fn(&mut NodeConfig)) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let ports = free_ports(3 * n as usize);
        let addr = |p: u16| -> SocketAddr { format!("127.0.0.1:{p}").parse().unwrap() };
        let members: Vec<Member> = (0..n as usize)
            .map(|i| Member {
                id: i as NodeId + 1,
                peer_addr: addr(ports[3 * i]),
                client_addr: addr(ports[3 * i + 1]),
                admin_addr: addr(ports[3 * i + 2]),
                resp_addr: None,
            })
            .collect();
        let configs: Vec<NodeConfig> = members
            .iter()
            .map(|m| {
                let mut c = NodeConfig {
                    id: m.id,
                    cluster: "synod-test".into(),
                    protocol: "multipaxos".into(),
                    data_dir: Some(dir.path().join(format!("node{}", m.id))),
                    in_memory: false,
                    fsync,
                    members: members.clone(),
                    params: test_params(),
                    limits: Default::default(),
                    // SYNOD_TEST_LOG=debug (say) for more detail in the logs printed on failure.
                    log_level: Some(std::env::var("SYNOD_TEST_LOG").unwrap_or_else(|_| "info".into())),
                    password: None,
                    cluster_secret: None,
                    cluster_secret_file: None,
                    admin: Default::default(),
                    max_connections: NodeConfig::DEFAULT_MAX_CONNECTIONS,
                    max_pending_bytes: NodeConfig::DEFAULT_MAX_PENDING_BYTES,
                    clock_error_us: 0,
                    tls: None,
                };
                tweak(&mut c);
                c.validate().unwrap();
                c
            })
            .collect();
        for c in &configs {
            std::fs::write(dir.path().join(format!("node{}.toml", c.id)), toml::to_string(c).unwrap()).unwrap();
        }
        let children = configs.iter().map(|_| None).collect();
        Cluster { dir, configs, children, env: Vec::new() }
    }

    /// Configure and start an `n`-replica cluster, and wait until it has a leader.
    pub async fn start(n: u32, fsync: FsyncMode, tweak: impl Fn(&mut NodeConfig)) -> Cluster {
        Cluster::start_with_env(n, fsync, &[], tweak).await
    }

    /// [`Cluster::start`] with extra environment for every replica process.
    pub async fn start_with_env(
        n: u32,
        fsync: FsyncMode,
        env: &[(&str, &str)],
        tweak: impl Fn(&mut NodeConfig),
    ) -> Cluster {
        let mut c = Cluster::configure(n, fsync, tweak);
        c.env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        for id in 1..=n {
            c.spawn(id);
        }
        c.wait_for_leader(&[]).await;
        c
    }

    fn idx(id: NodeId) -> usize {
        id as usize - 1
    }

    pub fn config_path(&self, id: NodeId) -> PathBuf {
        self.dir.path().join(format!("node{id}.toml"))
    }

    pub fn log_path(&self, id: NodeId) -> PathBuf {
        self.dir.path().join(format!("node{id}.log"))
    }

    /// Start (or restart) replica `id`; its output is appended to `node<id>.log`.
    /// Wait until node `id`'s log contains every one of `needles` (log lines are written by a
    /// background thread, so a line can trail the event that caused it); return the log.
    pub async fn wait_log(&self, id: NodeId, needles: &[&str], timeout: Duration) -> Result<String, String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let log = std::fs::read_to_string(self.log_path(id)).unwrap_or_default();
            if needles.iter().all(|n| log.contains(n)) {
                return Ok(log);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(log);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn spawn(&mut self, id: NodeId) {
        assert!(self.children[Self::idx(id)].is_none(), "node {id} is already running");
        let log = || std::fs::OpenOptions::new().create(true).append(true).open(self.log_path(id)).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_synod"))
            .arg("server")
            .arg("--config")
            .arg(self.config_path(id))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log())
            .stderr(log())
            .spawn()
            .expect("spawn synod server");
        self.children[Self::idx(id)] = Some(child);
    }

    /// kill -9 replica `id` and reap it.
    pub fn kill9(&mut self, id: NodeId) {
        let mut child = self.children[Self::idx(id)].take().unwrap_or_else(|| panic!("node {id} is not running"));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }

    pub fn is_running(&self, id: NodeId) -> bool {
        self.children[Self::idx(id)].is_some()
    }

    pub fn running_ids(&self) -> Vec<NodeId> {
        self.configs.iter().map(|c| c.id).filter(|id| self.is_running(*id)).collect()
    }

    pub fn endpoint(&self, id: NodeId) -> String {
        self.configs[Self::idx(id)].me().client_addr.to_string()
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.configs.iter().map(|c| c.me().client_addr.to_string()).collect()
    }

    pub async fn client(&self) -> Client {
        Client::with_options(&self.endpoints(), self.client_options()).await.expect("client connects")
    }

    /// Client options that match the configs: their CA when the native port has TLS, their
    /// password.
    pub fn client_options(&self) -> ClientOptions {
        let c = &self.configs[0];
        let tls = c.tls.as_ref().filter(|t| t.native).map(|t| synod_client::ClientTls::from_ca_file(&t.ca).unwrap());
        ClientOptions {
            request_timeout: Duration::from_secs(2),
            max_retry_time: PATIENCE,
            tls,
            password: c.password.clone(),
            ..Default::default()
        }
    }

    /// Status of a running replica, or None if it does not answer.
    pub async fn status(&self, id: NodeId) -> Option<Status> {
        synod_client::status_with(&self.endpoint(id), Duration::from_secs(2), &self.client_options()).await.ok()
    }

    /// Poll until a running replica not in `not` reports itself leader and every running
    /// replica that answers agrees (or, at least, a majority of the running ones does).
    /// Returns the leader's id.
    pub async fn wait_for_leader(&self, not: &[NodeId]) -> NodeId {
        let start = Instant::now();
        loop {
            for id in self.running_ids() {
                if not.contains(&id) {
                    continue;
                }
                if let Some(s) = self.status(id).await {
                    if s.role == Role::Leader {
                        return id;
                    }
                }
            }
            self.assert_running();
            assert!(start.elapsed() < PATIENCE, "no leader (excluding {not:?}) within {PATIENCE:?}\n{}", self.logs());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Poll until every running replica reports the same, nonzero execute index, and that
    /// index is at least `at_least`. Returns it.
    pub async fn wait_for_same_execute_index(&self, at_least: u64) -> u64 {
        let start = Instant::now();
        loop {
            let mut indices = Vec::new();
            for id in self.running_ids() {
                indices.push(self.status(id).await.map(|s| s.execute_index));
            }
            if let Some(Some(first)) = indices.first() {
                if *first >= at_least.max(1) && indices.iter().all(|i| *i == Some(*first)) {
                    return *first;
                }
            }
            self.assert_running();
            assert!(
                start.elapsed() < PATIENCE,
                "execute indices of {:?} did not converge to >= {at_least} within {PATIENCE:?}: {indices:?}\n{}",
                self.running_ids(),
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Fail (with the logs) if a replica that should run has exited.
    pub fn assert_running(&self) {
        for (i, c) in self.children.iter().enumerate() {
            if let Some(c) = c {
                // try_wait needs &mut; a replica that exited shows up in /proc as gone or zombie.
                let state = std::fs::read_to_string(format!("/proc/{}/stat", c.id())).unwrap_or_default();
                let zombie = state.rsplit(')').next().map(|s| s.trim_start().starts_with('Z')).unwrap_or(true);
                assert!(!zombie, "node {} exited unexpectedly\n{}", i + 1, self.logs());
            }
        }
    }

    /// The tail of every replica's log, for assertion messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for c in &self.configs {
            let text = std::fs::read_to_string(self.log_path(c.id)).unwrap_or_default();
            // The tests' status polls open a connection each; their lines only hide the rest.
            let lines: Vec<&str> = text.lines().filter(|l| !l.contains("synod_runtime::client")).collect();
            out.push_str(&format!("---- node {} log (tail) ----\n", c.id));
            out.push_str(&lines[lines.len().saturating_sub(60)..].join("\n"));
            out.push('\n');
        }
        out
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in self.children.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A base port B for `synod local --base-port B`: B+1..=B+`nodes`, and the same at +100,
/// +200 and +300 (peer, client, admin, Redis), all free right now (another process may still take one before synod binds it; see
/// [`start_local`]).
pub fn free_base_port(nodes: u16) -> u16 {
    use std::time::{SystemTime, UNIX_EPOCH};
    let seed = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().subsec_nanos() ^ std::process::id();
    for attempt in 0..500u32 {
        // Below Linux's ephemeral range (32768..), where outgoing connections take ports.
        let base = 20_000 + (seed.wrapping_add(attempt.wrapping_mul(7919)) % 12_000) as u16;
        let free = (1..=nodes)
            .flat_map(|i| [i, 100 + i, 200 + i, 300 + i])
            .all(|o| TcpListener::bind(("127.0.0.1", base + o)).is_ok());
        if free {
            return base;
        }
    }
    panic!("no free base port found");
}

/// Start `synod local --base-port B --data-dir DIR ARGS...` and wait until it has written
/// `cluster.toml` (every replica answers /health). Its output goes to `DIR/local.out`. If it
/// exits first because a port was taken meanwhile, it is started again on another base; any
/// other early exit fails the test with its output and the replicas' logs.
pub fn start_local(dir: &std::path::Path, args: &[&str]) -> (Child, PathBuf) {
    let file = dir.join("cluster.toml");
    let out_path = dir.join("local.out");
    for attempt in 0..5 {
        let base = free_base_port(4);
        let out = std::fs::File::create(&out_path).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_synod"))
            .args(["local", "--base-port", &base.to_string(), "--data-dir"])
            .arg(dir)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        let start = Instant::now();
        loop {
            if file.exists() {
                return (child, file);
            }
            if let Some(status) = child.try_wait().unwrap() {
                let output = std::fs::read_to_string(&out_path).unwrap_or_default();
                let taken = output.contains("is not available") || output.contains("in use");
                if taken && attempt < 4 {
                    eprintln!("synod local: port taken meanwhile, retrying on another base:\n{output}");
                    break;
                }
                panic!("synod local exited ({status}) before writing cluster.toml:\n{output}\n{}", node_logs(dir));
            }
            if start.elapsed() > Duration::from_secs(120) {
                let _ = child.kill();
                let output = std::fs::read_to_string(&out_path).unwrap_or_default();
                panic!("synod local wrote no cluster.toml within 120 s:\n{output}\n{}", node_logs(dir));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    unreachable!("the last attempt panics instead of retrying")
}

/// The last lines of every `node*.log` in `dir`.
fn node_logs(dir: &std::path::Path) -> String {
    let mut out = String::new();
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "log")).collect())
        .unwrap_or_default();
    logs.sort();
    for log in logs {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        out.push_str(&format!(
            "---- {} (tail) ----\n{}\n",
            log.display(),
            lines[lines.len().saturating_sub(30)..].join("\n")
        ));
    }
    out
}

/// Read until the replica closes `stream` (EOF or reset); false if it is still open after
/// `timeout`. Whatever is read meanwhile is ignored.
pub async fn closed_within(stream: &mut tokio::net::TcpStream, timeout: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 256];
    tokio::time::timeout(timeout, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    })
    .await
    .is_ok()
}

/// RESP over TLS: send `commands` (already encoded) and read until `expect` bytes arrived.
pub async fn resp_over_tls(addr: &str, ca: &std::path::Path, commands: &[u8], expect: usize) -> String {
    let connector = synod_runtime::tls::client_connector(ca).unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = synod_runtime::tls::server_name_of(addr).unwrap();
    let mut s = connector.connect(name, tcp).await.expect("TLS to the Redis port");
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.write_all(commands).await.unwrap();
    s.flush().await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while got.len() < expect {
        let n = tokio::time::timeout(Duration::from_secs(20), s.read(&mut buf)).await.unwrap().unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// `synod local` stopped (SIGTERM, then SIGKILL) when the test ends, however it ends.
pub struct Local(pub Child);

impl Drop for Local {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own, unreaped child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
