//! `cluster.toml`, the description of a running cluster: which process supervises it, and
//! each replica's pid, state, addresses, config and log. The supervisor ([`super::Cluster`])
//! writes it; the nemesis ([`crate::nemesis`]), the scenario sampler and `synod ctl member`
//! read it.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use synod_core::NodeId;
use synod_runtime::NodeConfig;

/// Name of the description file inside the cluster directory.
pub const CLUSTER_FILE: &str = "cluster.toml";

/// `cluster.toml`: everything `synod fault` needs to find and hurt the replicas.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    /// The protocol every replica runs.
    pub protocol: String,
    /// The cluster directory (holds this file, the configs, logs and `control/`).
    pub dir: PathBuf,
    /// The process that spawned the replicas and restarts them on request.
    pub supervisor_pid: u32,
    /// The replicas run without write-ahead logs (a restarted one comes back empty).
    pub in_memory: bool,
    /// The replicas, in start order (added nodes last).
    pub nodes: Vec<NodeEntry>,
}

/// One replica in `cluster.toml`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeEntry {
    /// The replica's id.
    pub id: NodeId,
    /// Pid of the running process (absent while the node is down).
    #[serde(default)]
    pub pid: Option<u32>,
    /// Whether the process runs (as the supervisor last saw it).
    pub state: NodeState,
    /// Address of the replica-to-replica protocol.
    pub peer_addr: SocketAddr,
    /// Address of the client protocol.
    pub client_addr: SocketAddr,
    /// Address of the admin HTTP API (`/health`, `/status`, `/metrics`, `/fault/...`).
    pub admin_addr: SocketAddr,
    /// The node's config file (`synod server --config`).
    pub config: PathBuf,
    /// The node's log file (stdout and stderr).
    pub log: PathBuf,
    /// The node's WAL directory (absent when the cluster runs in memory).
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    /// How many times the supervisor has started this node.
    pub starts: u32,
}

impl NodeEntry {
    /// The node's admin endpoint as its config file describes it: HTTPS with the cluster's
    /// CA when `[tls] admin = true`, and the admin bearer token. A config that cannot be read
    /// leaves plain HTTP without a token (the request then fails with the server's answer).
    pub fn admin(&self) -> crate::http::Admin {
        match NodeConfig::load(&self.config) {
            Ok(c) => crate::http::Admin::of(&c).unwrap_or_else(|_| crate::http::Admin::plain(self.admin_addr)),
            Err(_) => crate::http::Admin::plain(self.admin_addr),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
/// A replica process' state in `cluster.toml`.
pub enum NodeState {
    /// The process runs (it may be paused).
    Running,
    /// The process exited (killed, crashed or stopped); the supervisor can restart it.
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

    /// The entry of node `id`, or an error naming the cluster's nodes.
    pub fn node(&self, id: NodeId) -> Result<&NodeEntry, String> {
        self.nodes.iter().find(|n| n.id == id).ok_or_else(|| {
            let ids: Vec<String> = self.nodes.iter().map(|n| n.id.to_string()).collect();
            format!("no node {id} in this cluster (nodes: {})", ids.join(", "))
        })
    }

    /// The ids of all nodes, running or not.
    pub fn ids(&self) -> Vec<NodeId> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    /// Where restart/join/retire requests for the supervisor go (`control/restart-N`, ...).
    pub fn control_dir(&self) -> PathBuf {
        self.dir.join("control")
    }

    /// Write atomically (temp file + rename), so a reader never sees half a file.
    pub(super) fn write(&self, path: &Path) -> Result<(), String> {
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
