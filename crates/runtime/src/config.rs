//! Node configuration: one TOML file per replica.
//!
//! Every replica of a cluster lists all members (itself included) with their three addresses,
//! so a config file is self-contained and the files of one cluster differ only in `id` and
//! `data_dir`. Validation happens before anything is bound or opened, and every error names
//! the offending setting.

use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use synod_core::{Limits, NodeId, ProtocolParams};
use synod_wal::FsyncMode;

/// The configuration of one replica.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// This replica; must appear in `members`.
    pub id: NodeId,
    /// Cluster name, checked in the peer handshake so that two clusters sharing hosts never
    /// exchange messages.
    #[serde(default = "default_cluster")]
    pub cluster: String,
    /// Registry name of the replication protocol.
    #[serde(default = "default_protocol")]
    pub protocol: String,
    /// Directory of the write-ahead log; required unless `in_memory`.
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    /// No WAL at all: persisted records are considered durable at once (benchmarks only; a
    /// restarted replica comes back empty).
    #[serde(default)]
    pub in_memory: bool,
    /// When WAL commits reach the disk.
    #[serde(default = "default_fsync")]
    pub fsync: FsyncMode,
    /// All replicas, this one included (`[[members]]`).
    pub members: Vec<Member>,
    #[serde(default)]
    pub params: ProtocolParams,
    #[serde(default)]
    pub limits: Limits,
    /// Log filter (e.g. `info`, `synod_runtime=debug`); read by the binary.
    #[serde(default)]
    pub log_level: Option<String>,
    /// Password of the Redis front end (`requirepass`): RESP connections must `AUTH` (or
    /// `HELLO 3 AUTH default <password>`) before anything else. None = no authentication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// Shared secret of the cluster's replicas: a peer must prove it holds it before anything
    /// it sends is delivered (docs/security.md). None = peers are not authenticated. Give at
    /// most one of `cluster_secret` and `cluster_secret_file` (a file keeps it out of the
    /// config; surrounding white space is ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_secret: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_secret_file: Option<PathBuf>,
    /// The admin HTTP endpoint's access rules (`[admin]`).
    #[serde(default)]
    pub admin: AdminConfig,
    /// Most simultaneous connections accepted on each listening port (peer, native client,
    /// Redis); beyond it a new connection gets an error and is closed.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Most bytes of pending requests held at once across all connections (peer, native,
    /// Redis): the connections' read buffers. A connection whose buffer would cross it gets
    /// an error and is closed (docs/security.md).
    #[serde(default = "default_max_pending_bytes")]
    pub max_pending_bytes: usize,
    /// `[tls]`: TLS on this replica's ports (docs/security.md). None = no TLS anywhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
    /// The error bound of this host's synchronized clock, in microseconds, as the clock
    /// synchronization reports it (e.g. chrony's root dispersion, Huygens' σ): handed to the
    /// protocol as `Ctx::clock_error`. Nezha widens its deadlines by it (§3); nothing's
    /// correctness depends on it. 0 (default) = no error known (one host, or unknown).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub clock_error_us: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// `[tls]`: certificate files and which ports use TLS. Every member of a cluster must agree
/// on `peers` and `native` (replicas dial each other's peer ports, and the Redis front end
/// forwards to the other replicas' native ports). Relative paths are relative to the
/// replica's working directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The cluster's CA certificate (PEM): members' certificates must chain to it.
    pub ca: PathBuf,
    /// This replica's certificate chain (PEM); it must name `synod-node-<id>` (a DNS subject
    /// alternative name), and the addresses clients dial (IP or DNS SANs).
    pub cert: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// Mutual TLS between replicas: each side checks the other's certificate against `ca`
    /// and its name against the member id.
    #[serde(default = "default_true")]
    pub peers: bool,
    /// TLS on the native client port.
    #[serde(default = "default_true")]
    pub native: bool,
    /// TLS on the Redis port (`redis-cli --tls --cacert <ca>`).
    #[serde(default = "default_true")]
    pub redis: bool,
    /// HTTPS on the admin port (`curl --cacert <ca> https://…/status`); plain HTTP sent to
    /// it is answered with a 400 that says so. `synod fault`, `synod ctl` and the harness
    /// read the CA from the node config.
    #[serde(default = "default_true")]
    pub admin: bool,
}

impl TlsConfig {
    pub fn files(&self) -> synod_tls::NodeFiles {
        synod_tls::NodeFiles { ca: self.ca.clone(), cert: self.cert.clone(), key: self.key.clone() }
    }
}

/// `[admin]`: who may change the cluster through the admin port.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Bearer token required by the endpoints that change the cluster (`/fault/*`,
    /// `/members/add|remove`): `Authorization: Bearer <token>`. None = no token asked
    /// (only for development clusters on a trusted host). Reading endpoints (`/status`,
    /// `/metrics`, `/health`, `GET /fault`, `GET /members`) stay open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// Fault injection (`POST /fault/*`): false turns it off entirely (production).
    #[serde(default = "default_true")]
    pub faults: bool,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig { token: None, token_file: None, faults: true }
    }
}

fn default_true() -> bool {
    true
}

fn default_max_pending_bytes() -> usize {
    NodeConfig::DEFAULT_MAX_PENDING_BYTES
}

fn default_max_connections() -> usize {
    NodeConfig::DEFAULT_MAX_CONNECTIONS
}

/// Read a secret given inline or as a file (one of them at most).
fn secret_from(inline: &Option<String>, file: &Option<PathBuf>, what: &str) -> Result<Option<Vec<u8>>, ConfigError> {
    match (inline, file) {
        (Some(_), Some(_)) => Err(ConfigError::Invalid(format!("give {what} or {what}_file, not both"))),
        (Some(s), None) => Ok(Some(s.as_bytes().to_vec())),
        (None, Some(path)) => {
            let text =
                std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.clone(), source })?;
            let text = text.trim();
            if text.is_empty() {
                return Err(ConfigError::Invalid(format!("{what}_file {} is empty", path.display())));
            }
            Ok(Some(text.as_bytes().to_vec()))
        }
        (None, None) => Ok(None),
    }
}

/// One replica and where to reach it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Member {
    pub id: NodeId,
    /// Replica-to-replica TCP.
    pub peer_addr: SocketAddr,
    /// Native client protocol.
    pub client_addr: SocketAddr,
    /// HTTP: /status, /metrics, /health.
    pub admin_addr: SocketAddr,
    /// Redis protocol (RESP2/RESP3) front end; None = off. See docs/redis.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resp_addr: Option<SocketAddr>,
}

fn default_cluster() -> String {
    "synod".into()
}

fn default_protocol() -> String {
    "multipaxos".into()
}

fn default_fsync() -> FsyncMode {
    FsyncMode::Batch
}

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("invalid config: {0}")]
    Parse(String),
    #[error("invalid config: {0}")]
    Invalid(String),
}

impl NodeConfig {
    /// `max_connections` when the config does not say.
    pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
    /// `max_pending_bytes` when the config does not say: 512 MiB (eight frames of the default
    /// 64 MiB limit).
    pub const DEFAULT_MAX_PENDING_BYTES: usize = 512 << 20;

    /// Parse and validate a TOML document.
    pub fn from_toml_str(s: &str) -> Result<NodeConfig, ConfigError> {
        let config: NodeConfig = toml::from_str(s).map_err(|e| ConfigError::Parse(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// Read, parse and validate a config file.
    pub fn load(path: &Path) -> Result<NodeConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
        Self::from_toml_str(&text).map_err(|e| match e {
            ConfigError::Parse(m) => ConfigError::Parse(format!("{}: {m}", path.display())),
            ConfigError::Invalid(m) => ConfigError::Invalid(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// Check everything that can be checked without binding sockets.
    pub fn validate(&self) -> Result<(), ConfigError> {
        synod_protocols::registry::find(&self.protocol).map_err(|e| ConfigError::Invalid(format!("protocol: {e}")))?;
        self.validate_except_protocol()
    }

    /// [`NodeConfig::validate`] minus the registry lookup, for drivers handed a protocol
    /// instance directly (tests, experiments).
    pub fn validate_except_protocol(&self) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        if self.cluster.is_empty() {
            return invalid("cluster name must not be empty".into());
        }
        if self.members.is_empty() {
            return invalid("members is empty: list every replica, this one included, as [[members]]".into());
        }
        let mut ids = HashSet::new();
        let mut addrs = HashSet::new();
        for m in &self.members {
            if !ids.insert(m.id) {
                return invalid(format!("duplicate member id {}", m.id));
            }
            let resp = m.resp_addr.map(|a| ("resp_addr", a));
            for (what, addr) in
                [("peer_addr", m.peer_addr), ("client_addr", m.client_addr), ("admin_addr", m.admin_addr)]
                    .into_iter()
                    .chain(resp)
            {
                if addr.port() == 0 {
                    return invalid(format!("member {}: {what} {addr} needs an explicit port", m.id));
                }
                if !addrs.insert(addr) {
                    return invalid(format!("duplicate address {addr} ({what} of member {})", m.id));
                }
            }
        }
        if !ids.contains(&self.id) {
            let mut known: Vec<_> = ids.into_iter().collect();
            known.sort_unstable();
            return invalid(format!("own id {} is missing from members (member ids: {known:?})", self.id));
        }
        self.params.validate().map_err(|e| ConfigError::Invalid(format!("params: {e}")))?;
        if self.limits.max_frame_bytes < 1024 {
            return invalid(format!("limits.max_frame_bytes ({}) must be at least 1024", self.limits.max_frame_bytes));
        }
        if self.password.as_deref() == Some("") {
            return invalid("password must not be empty (leave it out to disable authentication)".into());
        }
        if self.cluster_secret.as_deref().is_some_and(|s| s.len() < 16) {
            return invalid("cluster_secret must be at least 16 characters (e.g. `openssl rand -hex 32`)".into());
        }
        if self.admin.token.as_deref() == Some("") {
            return invalid("admin.token must not be empty (leave it out to disable it)".into());
        }
        if self.max_pending_bytes < self.limits.max_frame_bytes {
            return invalid(format!(
                "max_pending_bytes ({}) must be at least limits.max_frame_bytes ({}): one whole frame must fit",
                self.max_pending_bytes, self.limits.max_frame_bytes
            ));
        }
        if self.max_connections == 0 {
            return invalid("max_connections must be at least 1".into());
        }
        if !self.in_memory && self.data_dir.is_none() {
            return invalid("data_dir is required unless in_memory = true".into());
        }
        Ok(())
    }

    /// The cluster secret (inline or from its file), if peers are authenticated.
    pub fn cluster_secret(&self) -> Result<Option<Vec<u8>>, ConfigError> {
        let secret = secret_from(&self.cluster_secret, &self.cluster_secret_file, "cluster_secret")?;
        if secret.as_ref().is_some_and(|s| s.len() < 16) {
            return Err(ConfigError::Invalid("cluster_secret must be at least 16 characters".into()));
        }
        Ok(secret)
    }

    /// The replica's TLS machinery when `[tls]` is set: the files are read and checked here
    /// (an error names the file).
    pub fn load_tls(&self) -> Result<Option<synod_tls::NodeTls>, ConfigError> {
        match &self.tls {
            None => Ok(None),
            Some(t) => {
                synod_tls::NodeTls::load(&t.files()).map(Some).map_err(|e| ConfigError::Invalid(format!("tls: {e}")))
            }
        }
    }

    /// The admin token (inline or from its file), if the admin port asks for one.
    pub fn admin_token(&self) -> Result<Option<String>, ConfigError> {
        let token = secret_from(&self.admin.token, &self.admin.token_file, "admin.token")?;
        Ok(token.map(|t| String::from_utf8_lossy(&t).into_owned()))
    }

    /// This replica's entry in `members` (call after validation).
    pub fn me(&self) -> &Member {
        self.members.iter().find(|m| m.id == self.id).expect("validated config lists its own id among the members")
    }

    /// Member ids in a fixed order (sorted), as handed to the protocol constructor.
    pub fn member_ids(&self) -> Vec<NodeId> {
        let mut ids: Vec<NodeId> = self.members.iter().map(|m| m.id).collect();
        ids.sort_unstable();
        ids
    }
}
