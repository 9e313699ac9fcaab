//! The systems a benchmark drives: synod (native client), any Redis-protocol server, etcd v3.
//!
//! Each simulated client owns one [`Target`] — one connection — and has one operation
//! outstanding on it, so the load a run offers is the same whichever system is measured.
//!
//! How the YCSB operations map:
//!
//! | op | synod | Redis | etcd |
//! |---|---|---|---|
//! | read | `Get` | `GET` | range get of the key |
//! | update / insert | `Put` | `SET` | put |
//! | scan(start, n) | `Scan { start, end: "", limit: n }` | `MGET` of the n records numbered from the start record (see below) | range get from `start` with `limit n` |
//! | read-modify-write | `Get` then `Put` | `GET` then `SET` | get then put |
//!
//! Redis has no ordered range over plain string keys (`SCAN` walks the hash table in cursor
//! order and its `COUNT` is a hint, not a range), so a scan is emulated as one `MGET` of the
//! `n` keys whose *record numbers* follow the start record: the same number of keys read in
//! one round trip, but not the same keys a key-ordered scan returns. Keep that in mind when
//! comparing workload E across targets.

use crate::workload::{key_for, BenchOp};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use synod_core::{Op, OpResult};

/// How the target answered one operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// The target answered and refused the operation (overloaded, invalid request, a
    /// definitive reject): the system is alive but did not do the work.
    Rejected(String),
    /// Refused, but the operation may still execute (an ambivalent reject: IDEM's `n − f`).
    Ambivalent(String),
    /// The target answered with an error for this operation (a failed operation, a timeout
    /// inside the client library, an unexpected answer).
    Error(String),
}

/// The connection itself failed; the driver drops it and connects again.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("cannot connect to {target}: {reason}")]
    Connect { target: String, reason: String },
    #[error("connection failed: {0}")]
    Transport(String),
}

/// One connection to a system under test.
pub trait Target: Send {
    /// Run one operation to completion (both round trips of a read-modify-write).
    fn execute(&mut self, op: &BenchOp) -> impl Future<Output = Result<Outcome, TargetError>> + Send;
}

/// Which kind of system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    Synod,
    Redis,
    Etcd,
}

impl TargetKind {
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::Synod => "synod",
            TargetKind::Redis => "redis",
            TargetKind::Etcd => "etcd",
        }
    }
}

/// A target named on the command line: `KIND=ENDPOINTS` or `LABEL:KIND=ENDPOINTS`, endpoints
/// comma-separated `host:port` (e.g. `synod=127.0.0.1:7201,127.0.0.1:7202`,
/// `raft:synod=127.0.0.1:7301`, `redis=127.0.0.1:6379`, `etcd=127.0.0.1:2379`). A synod
/// target may carry the protocol's options for its client policy in brackets after the kind,
/// as a scenario variant names them: `pess:synod[ambivalence=pessimistic]=127.0.0.1:7201`.
///
/// A sharded synod deployment (several independent clusters, one per key range, as in the
/// Crossword paper's §5.6 / Fig. 13) is several endpoint groups separated by `;`:
/// `synod=A1,A2,A3;B1,B2,B3`. Each simulated client then has one session per cluster and
/// sends each operation to the cluster owning its key ([`shard_of`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TargetSpec {
    /// Name used in reports and directory names.
    pub label: String,
    pub kind: TargetKind,
    pub endpoints: Vec<String>,
    /// Sharded synod targets: the endpoints of each cluster, in key-range order (empty: one
    /// cluster, `endpoints`). `endpoints` then lists all of them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<Vec<String>>,
    /// synod targets: the CA file to check the replicas' TLS certificates against
    /// (`--tls-ca`); None = plain TCP.
    #[serde(skip)]
    pub tls_ca: Option<std::path::PathBuf>,
    /// synod targets: the replicas' password (`--password`).
    #[serde(skip)]
    pub password: Option<String>,
    /// synod targets: the protocol's options (`KEY=VALUE`, as the replicas were given them),
    /// handed to the client policy the registry supplies for the protocol the replicas
    /// report (`ClientOptions::protocol_options`), e.g. IDEM's `ambivalence=pessimistic`.
    /// From the target's brackets, `--protocol-option`, or a scenario variant's parameters.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub protocol_options: BTreeMap<String, String>,
}

impl fmt::Display for TargetSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({} {}", self.label, self.kind.name(), self.endpoints.join(","))?;
        if !self.protocol_options.is_empty() {
            let opts: Vec<String> = self.protocol_options.iter().map(|(k, v)| format!("{k}={v}")).collect();
            write!(f, " [{}]", opts.join(","))?;
        }
        f.write_str(")")
    }
}

impl std::str::FromStr for TargetSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<TargetSpec, String> {
        // `[KEY=VALUE,...]` after the kind holds `=` signs of its own: the endpoints start at
        // the first `=` after the `]`.
        let split = match (s.find('['), s.find('=')) {
            (Some(open), Some(eq)) if open < eq => s[open..].find(']').map(|close| open + close + 1),
            _ => s.find('='),
        };
        let Some((left, endpoints)) = split.and_then(|i| s[i..].strip_prefix('=').map(|rest| (&s[..i], rest))) else {
            return Err(format!(
                "target `{s}`: expected KIND=HOST:PORT[,HOST:PORT...] or KIND[KEY=VALUE,...]=HOST:PORT... \
                 with KIND synod, redis or etcd"
            ));
        };
        let (left, protocol_options) = match left.split_once('[') {
            None => (left, BTreeMap::new()),
            Some((head, rest)) => {
                let inner = rest.strip_suffix(']').ok_or_else(|| format!("target `{s}`: expected `]` before `=`"))?;
                let opts = parse_protocol_options(inner).map_err(|e| format!("target `{s}`: {e}"))?;
                if opts.is_empty() {
                    return Err(format!("target `{s}`: empty `[]`: give KEY=VALUE options or leave the brackets out"));
                }
                (head, opts)
            }
        };
        let (label, kind) = match left.split_once(':') {
            Some((label, kind)) => (label.trim(), kind.trim()),
            None => (left.trim(), left.trim()),
        };
        let kind = match kind {
            "synod" => TargetKind::Synod,
            "redis" => TargetKind::Redis,
            "etcd" => TargetKind::Etcd,
            other => return Err(format!("target `{s}`: unknown kind `{other}` (synod, redis, etcd)")),
        };
        if label.is_empty() || !label.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            return Err(format!("target `{s}`: label `{label}` must be non-empty letters, digits, `-`, `_` or `.`"));
        }
        let groups: Vec<&str> = endpoints.split(';').collect();
        if groups.len() > 1 && kind != TargetKind::Synod {
            return Err(format!("target `{s}`: `;` (one endpoint group per shard) is for synod targets only"));
        }
        let list = |group: &str| -> Vec<String> {
            group.split(',').map(str::trim).filter(|e| !e.is_empty()).map(String::from).collect()
        };
        let shards: Vec<Vec<String>> =
            if groups.len() > 1 { groups.iter().map(|g| list(g)).collect() } else { Vec::new() };
        if let Some(i) = shards.iter().position(Vec::is_empty) {
            return Err(format!("target `{s}`: shard {} has no endpoints", i + 1));
        }
        let endpoints: Vec<String> = groups.iter().flat_map(|g| list(g)).collect();
        if endpoints.is_empty() {
            return Err(format!("target `{s}`: no endpoints"));
        }
        for e in &endpoints {
            let hostport = e.rsplit_once("://").map_or(e.as_str(), |(_, rest)| rest).trim_end_matches('/');
            let port_ok = hostport.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if !port_ok {
                return Err(format!("target `{s}`: endpoint `{e}` is not HOST:PORT"));
            }
        }
        if !protocol_options.is_empty() && kind != TargetKind::Synod {
            return Err(format!("target `{s}`: protocol options are for synod targets only"));
        }
        Ok(TargetSpec {
            label: label.to_string(),
            kind,
            endpoints,
            shards,
            tls_ca: None,
            password: None,
            protocol_options,
        })
    }
}

/// `KEY=VALUE,KEY=VALUE` (a target's brackets): protocol options for the client policy. Keys
/// are letters, digits and `_`; a key given twice is an error.
pub fn parse_protocol_options(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for item in text.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        let (k, v) = item.split_once('=').ok_or_else(|| format!("protocol option `{item}`: expected KEY=VALUE"))?;
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("protocol option `{item}`: the key must be letters, digits or `_`"));
        }
        if out.insert(k.to_string(), v.to_string()).is_some() {
            return Err(format!("protocol option `{k}` given twice"));
        }
    }
    Ok(out)
}

impl TargetSpec {
    /// The native client's options for simulated client number `client` of a synod target:
    /// its home replica, the protocol's client policy looked up by the name the replicas
    /// report, and the protocol options that policy is built with.
    pub fn client_options(&self, client: usize, tls: Option<synod_client::ClientTls>) -> synod_client::ClientOptions {
        synod_client::ClientOptions {
            home: client,
            resolve_policy: Some(synod_protocols::registry::client_for),
            protocol_options: self.protocol_options.clone(),
            tls,
            password: self.password.clone(),
            ..Default::default()
        }
    }

    /// Open the connection of simulated client number `client`. `key_size` is the workload's
    /// (Redis needs it to emulate scans).
    pub async fn connect(&self, client: usize, key_size: usize) -> Result<AnyTarget, TargetError> {
        let fail = |reason: String| TargetError::Connect { target: self.to_string(), reason };
        if !self.shards.is_empty() {
            let mut clusters = Vec::with_capacity(self.shards.len());
            for group in &self.shards {
                let one = TargetSpec { endpoints: group.clone(), shards: Vec::new(), ..self.clone() };
                match Box::pin(one.connect(client, key_size)).await? {
                    AnyTarget::Synod(t) => clusters.push(*t),
                    _ => return Err(fail("a shard is not a synod cluster".into())),
                }
            }
            return Ok(AnyTarget::Sharded(ShardedTarget { clusters }));
        }
        Ok(match self.kind {
            TargetKind::Synod => {
                // Each client starts at its own replica: leaderless protocols then have every
                // replica lead commands; leader-based ones redirect to the leader.
                // The protocol's client policy, found by the name the replicas report.
                let tls = match &self.tls_ca {
                    Some(ca) => Some(synod_client::ClientTls::from_ca_file(ca).map_err(fail)?),
                    None => None,
                };
                let opts = self.client_options(client, tls);
                let client =
                    synod_client::Client::with_options(&self.endpoints, opts).await.map_err(|e| fail(e.to_string()))?;
                AnyTarget::Synod(Box::new(SynodTarget { client }))
            }
            TargetKind::Redis => {
                // Clients are spread over the endpoints (e.g. synod's Redis front end on
                // every replica); a single redis-server has one.
                let endpoint = &self.endpoints[client % self.endpoints.len()];
                let url = if endpoint.contains("://") { endpoint.clone() } else { format!("redis://{endpoint}/") };
                let c = redis::Client::open(url.as_str()).map_err(|e| fail(e.to_string()))?;
                let conn = c.get_multiplexed_async_connection().await.map_err(|e| fail(e.to_string()))?;
                AnyTarget::Redis(RedisTarget { conn, key_size })
            }
            TargetKind::Etcd => {
                let urls: Vec<String> = self
                    .endpoints
                    .iter()
                    .map(|e| if e.contains("://") { e.clone() } else { format!("http://{e}") })
                    .collect();
                let client = etcd::EtcdKv::connect(&urls, std::time::Duration::from_secs(5)).await.map_err(fail)?;
                AnyTarget::Etcd(Box::new(EtcdTarget { client }))
            }
        })
    }
}

/// A connection to any supported kind of target (static dispatch: the trait's futures are
/// not object safe, and an enum keeps the hot path free of boxing).
pub enum AnyTarget {
    Synod(Box<SynodTarget>),
    Sharded(ShardedTarget),
    Redis(RedisTarget),
    Etcd(Box<EtcdTarget>),
}

impl Target for AnyTarget {
    async fn execute(&mut self, op: &BenchOp) -> Result<Outcome, TargetError> {
        match self {
            AnyTarget::Synod(t) => t.execute(op).await,
            AnyTarget::Sharded(t) => t.execute(op).await,
            AnyTarget::Redis(t) => t.execute(op).await,
            AnyTarget::Etcd(t) => t.execute(op).await,
        }
    }
}

/// synod through its native client library: one session per simulated client.
pub struct SynodTarget {
    client: synod_client::Client,
}

impl SynodTarget {
    /// One synod operation; `Ok(Err(outcome))` is an answer that ends the benchmark operation.
    async fn run(&mut self, op: Op) -> Result<Result<OpResult, Outcome>, TargetError> {
        use synod_client::ClientError as E;
        match self.client.execute(op).await {
            Ok(r) => Ok(Ok(r)),
            Err(E::Invalid(reason)) => Ok(Err(Outcome::Rejected(reason))),
            Err(E::Rejected { definitive: true, reason }) => Ok(Err(Outcome::Rejected(reason))),
            Err(E::Rejected { definitive: false, reason }) => Ok(Err(Outcome::Ambivalent(reason))),
            Err(e @ (E::Failed(_) | E::Timeout { .. } | E::Unknown(_))) => Ok(Err(Outcome::Error(e.to_string()))),
            Err(e) => Err(TargetError::Transport(e.to_string())),
        }
    }
}

impl Target for SynodTarget {
    async fn execute(&mut self, op: &BenchOp) -> Result<Outcome, TargetError> {
        let expect_done = |r: OpResult| match r {
            OpResult::Done => Outcome::Ok,
            other => Outcome::Error(format!("put answered {other:?}")),
        };
        Ok(match op {
            BenchOp::Read { key } => match self.run(Op::Get { key: key.clone() }).await? {
                Ok(OpResult::Value(_)) => Outcome::Ok,
                Ok(other) => Outcome::Error(format!("get answered {other:?}")),
                Err(o) => o,
            },
            BenchOp::Update { key, value } | BenchOp::Insert { key, value } => {
                match self.run(Op::Put { key: key.clone(), value: value.clone() }).await? {
                    Ok(r) => expect_done(r),
                    Err(o) => o,
                }
            }
            BenchOp::Scan { start, count, .. } => {
                match self.run(Op::Scan { start: start.clone(), end: Bytes::new(), limit: *count }).await? {
                    Ok(OpResult::Scan(_)) => Outcome::Ok,
                    Ok(other) => Outcome::Error(format!("scan answered {other:?}")),
                    Err(o) => o,
                }
            }
            BenchOp::ReadModifyWrite { key, value } => match self.run(Op::Get { key: key.clone() }).await? {
                Ok(OpResult::Value(_)) => match self.run(Op::Put { key: key.clone(), value: value.clone() }).await? {
                    Ok(r) => expect_done(r),
                    Err(o) => o,
                },
                Ok(other) => Outcome::Error(format!("get answered {other:?}")),
                Err(o) => o,
            },
        })
    }
}

/// Which of `shards` key ranges `key` falls in. The key space is cut into `shards` equal
/// ranges: for YCSB keys (`"user"` + zero-padded decimal digits, [`key_for`]) ranges of the
/// number after `"user"` over its digit space, so that the shards hold equal shares of the
/// records; for any other key, ranges of its first 8 bytes read as a big-endian number.
pub fn shard_of(key: &[u8], shards: usize) -> usize {
    if shards <= 1 {
        return 0;
    }
    let ycsb = key.strip_prefix(b"user").filter(|d| !d.is_empty() && d.len() <= 19 && d.iter().all(u8::is_ascii_digit));
    let (value, space): (u128, u128) = match ycsb {
        Some(digits) => {
            let v = digits.iter().fold(0u128, |v, d| v * 10 + u128::from(d - b'0'));
            // key_for: 19 digits hold a 63-bit hash; fewer hold the hash modulo 10^digits.
            let space = if digits.len() >= 19 { 1u128 << 63 } else { 10u128.pow(digits.len() as u32) };
            (v.min(space - 1), space)
        }
        None => {
            let mut prefix = [0u8; 8];
            let n = key.len().min(8);
            prefix[..n].copy_from_slice(&key[..n]);
            (u128::from(u64::from_be_bytes(prefix)), 1u128 << 64)
        }
    };
    (value * shards as u128 / space) as usize
}

/// Several synod clusters, one per key range: each operation goes to the cluster owning its
/// key (a scan to the one owning its start key, and stays within that cluster's range).
pub struct ShardedTarget {
    clusters: Vec<SynodTarget>,
}

impl Target for ShardedTarget {
    async fn execute(&mut self, op: &BenchOp) -> Result<Outcome, TargetError> {
        let key = match op {
            BenchOp::Read { key }
            | BenchOp::Update { key, .. }
            | BenchOp::Insert { key, .. }
            | BenchOp::ReadModifyWrite { key, .. } => key,
            BenchOp::Scan { start, .. } => start,
        };
        let shard = shard_of(key, self.clusters.len());
        self.clusters[shard].execute(op).await
    }
}

/// A Redis-protocol server, plain string keys.
pub struct RedisTarget {
    conn: redis::aio::MultiplexedConnection,
    key_size: usize,
}

/// Map a Redis error: transport failures end the connection; `BUSY`, `LOADING`, `TRYAGAIN`,
/// `OOM` and read-only replicas are refusals; any other error reply is an operation error.
fn redis_outcome(e: redis::RedisError) -> Result<Outcome, TargetError> {
    use redis::ErrorKind as K;
    if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() {
        return Err(TargetError::Transport(e.to_string()));
    }
    let refused = matches!(e.kind(), K::BusyLoadingError | K::TryAgain | K::ReadOnly)
        || matches!(e.code(), Some("BUSY" | "OOM" | "LOADING" | "TRYAGAIN" | "READONLY"));
    Ok(if refused { Outcome::Rejected(e.to_string()) } else { Outcome::Error(e.to_string()) })
}

impl Target for RedisTarget {
    async fn execute(&mut self, op: &BenchOp) -> Result<Outcome, TargetError> {
        let conn = &mut self.conn;
        let get = |key: &Bytes| redis::cmd("GET").arg(key.as_ref()).to_owned();
        let set = |key: &Bytes, value: &Bytes| redis::cmd("SET").arg(key.as_ref()).arg(value.as_ref()).to_owned();
        let result: redis::RedisResult<()> = match op {
            BenchOp::Read { key } => get(key).query_async::<Option<Vec<u8>>>(conn).await.map(drop),
            BenchOp::Update { key, value } | BenchOp::Insert { key, value } => {
                set(key, value).query_async::<()>(conn).await
            }
            BenchOp::Scan { record, count, .. } => {
                let mut cmd = redis::cmd("MGET");
                for n in *record..*record + *count as u64 {
                    cmd.arg(key_for(n, self.key_size).as_ref());
                }
                cmd.query_async::<Vec<Option<Vec<u8>>>>(conn).await.map(drop)
            }
            BenchOp::ReadModifyWrite { key, value } => {
                match get(key).query_async::<Option<Vec<u8>>>(&mut *conn).await {
                    Ok(_) => set(key, value).query_async::<()>(conn).await,
                    Err(e) => Err(e),
                }
            }
        };
        match result {
            Ok(()) => Ok(Outcome::Ok),
            Err(e) => redis_outcome(e),
        }
    }
}

/// etcd v3 over gRPC.
pub struct EtcdTarget {
    client: etcd::EtcdKv,
}

/// Map an etcd error: gRPC statuses are answers (resource exhausted / invalid argument are
/// refusals, the rest operation errors); an unavailable server or a broken channel ends the
/// connection.
fn etcd_outcome(s: tonic::Status) -> Result<Outcome, TargetError> {
    use tonic::Code;
    Ok(match s.code() {
        Code::ResourceExhausted | Code::InvalidArgument | Code::FailedPrecondition => {
            Outcome::Rejected(format!("{:?}: {}", s.code(), s.message()))
        }
        Code::Unavailable => return Err(TargetError::Transport(format!("unavailable: {}", s.message()))),
        // tonic reports a broken connection as Unknown "transport error".
        Code::Unknown if s.message().contains("transport") => {
            return Err(TargetError::Transport(s.message().to_string()))
        }
        c => Outcome::Error(format!("{c:?}: {}", s.message())),
    })
}

impl Target for EtcdTarget {
    async fn execute(&mut self, op: &BenchOp) -> Result<Outcome, TargetError> {
        let c = &mut self.client;
        let r = match op {
            BenchOp::Read { key } => c.range(key.to_vec(), Vec::new(), 0).await.map(drop),
            BenchOp::Update { key, value } | BenchOp::Insert { key, value } => {
                c.put(key.to_vec(), value.to_vec()).await.map(drop)
            }
            // range_end "\0": every key from `start` on (etcd's "from key").
            BenchOp::Scan { start, count, .. } => c.range(start.to_vec(), vec![0], *count as i64).await.map(drop),
            BenchOp::ReadModifyWrite { key, value } => match c.range(key.to_vec(), Vec::new(), 0).await {
                Ok(_) => c.put(key.to_vec(), value.to_vec()).await.map(drop),
                Err(e) => Err(e),
            },
        };
        match r {
            Ok(()) => Ok(Outcome::Ok),
            Err(e) => etcd_outcome(e),
        }
    }
}

pub mod etcd;

#[cfg(test)]
mod tests;
