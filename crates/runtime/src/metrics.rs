//! Prometheus metrics of a replica.
//!
//! One recorder per process (the `metrics` facade is global); every series carries a `node`
//! label so that several replicas in one process (tests, benchmarks) stay apart. Handles are
//! resolved once at startup so that the hot paths only bump atomics.

use metrics::{Counter, Gauge};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;
use synod_core::{NodeId, Role, Status};

/// The process-wide Prometheus recorder, installed on first use. `None` if another recorder
/// was installed by the embedding program (then `/metrics` says so).
pub fn prometheus() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| match PrometheusBuilder::new().install_recorder() {
            Ok(h) => Some(h),
            Err(e) => {
                tracing::warn!("cannot install the Prometheus recorder: {e}; /metrics will be empty");
                None
            }
        })
        .as_ref()
}

/// Per-peer counters.
#[derive(Clone)]
pub struct PeerMetrics {
    pub sent: Counter,
    pub received: Counter,
    /// Messages dropped because the peer's outbound queue was full.
    pub dropped: Counter,
    pub bytes_sent: Counter,
}

impl PeerMetrics {
    pub fn new(node: NodeId, peer: NodeId) -> Self {
        let (n, p) = (node.to_string(), peer.to_string());
        PeerMetrics {
            sent: metrics::counter!("synod_peer_messages_sent_total", "node" => n.clone(), "peer" => p.clone()),
            received: metrics::counter!("synod_peer_messages_received_total", "node" => n.clone(), "peer" => p.clone()),
            dropped: metrics::counter!("synod_peer_messages_dropped_total", "node" => n.clone(), "peer" => p.clone()),
            bytes_sent: metrics::counter!("synod_peer_bytes_sent_total", "node" => n, "peer" => p),
        }
    }
}

/// Counters and gauges of the node loop and the client listener.
#[derive(Clone)]
pub struct NodeMetrics {
    node: String,
    pub client_requests: Counter,
    pub client_invalid: Counter,
    pub replies: Counter,
    /// Replies dropped because the client connection's queue was full or it was gone.
    pub replies_dropped: Counter,
    pub applied: Counter,
    pub wal_commits: Counter,
    pub wal_records: Counter,
    pub wal_bytes: Counter,
    pub batches: Counter,
    pub events: Counter,
    pub commit_index: Gauge,
    pub execute_index: Gauge,
    pub queued_requests: Gauge,
    /// Snapshots of the state machine taken, how long each took to serialize (off the node
    /// loop), how long the node loop itself stopped for it (the pause, which HoliPaxos's
    /// comparison with periodic snapshots is about), and their size.
    pub snapshots: Counter,
    pub snapshot_seconds: metrics::Histogram,
    pub snapshot_pause_seconds: metrics::Histogram,
    /// Duration of one node-loop turn (a batch of events, their actions, the WAL commit).
    pub turn_seconds: metrics::Histogram,
    pub snapshot_bytes: Gauge,
    /// Background compactions of the write-ahead log (`CompactDurable`): from the action to
    /// the install, and how long the node loop spent installing (appending what was committed
    /// meanwhile, fsync, rename).
    pub compactions: Counter,
    pub compaction_seconds: metrics::Histogram,
    pub compaction_install_seconds: metrics::Histogram,
    /// Bytes of keys and values held by the state machine, and the protocol's log length.
    pub state_bytes: Gauge,
    pub log_len: Gauge,
    last_role: Option<Role>,
}

impl NodeMetrics {
    pub fn new(node: NodeId) -> Self {
        let n = node.to_string();
        let c = |name: &'static str| metrics::counter!(name, "node" => n.clone());
        let g = |name: &'static str| metrics::gauge!(name, "node" => n.clone());
        NodeMetrics {
            client_requests: c("synod_client_requests_total"),
            client_invalid: c("synod_client_requests_invalid_total"),
            replies: c("synod_client_replies_total"),
            replies_dropped: c("synod_client_replies_dropped_total"),
            applied: c("synod_applied_commands_total"),
            wal_commits: c("synod_wal_commits_total"),
            wal_records: c("synod_wal_records_total"),
            wal_bytes: c("synod_wal_bytes_total"),
            batches: c("synod_node_batches_total"),
            events: c("synod_node_events_total"),
            commit_index: g("synod_commit_index"),
            execute_index: g("synod_execute_index"),
            queued_requests: g("synod_queued_requests"),
            snapshots: c("synod_snapshots_total"),
            snapshot_seconds: metrics::histogram!("synod_snapshot_duration_seconds", "node" => n.clone()),
            snapshot_pause_seconds: metrics::histogram!("synod_snapshot_pause_seconds", "node" => n.clone()),
            turn_seconds: metrics::histogram!("synod_turn_seconds", "node" => n.clone()),
            snapshot_bytes: g("synod_snapshot_bytes"),
            compactions: c("synod_wal_compactions_total"),
            compaction_seconds: metrics::histogram!("synod_wal_compaction_seconds", "node" => n.clone()),
            compaction_install_seconds: metrics::histogram!(
                "synod_wal_compaction_install_seconds",
                "node" => n.clone()
            ),
            state_bytes: g("synod_state_machine_bytes"),
            log_len: g("synod_log_entries"),
            last_role: None,
            node: n,
        }
    }

    /// Publish the protocol's view of itself: indexes and a one-hot role gauge.
    pub fn observe_status(&mut self, status: &Status) {
        self.commit_index.set(status.commit_index as f64);
        self.execute_index.set(status.execute_index as f64);
        if let Some(len) = status.extra.get("log_len").and_then(|l| l.parse::<f64>().ok()) {
            self.log_len.set(len);
        }
        if self.last_role == Some(status.role) {
            return;
        }
        self.last_role = Some(status.role);
        for role in [Role::Leader, Role::Follower, Role::Candidate, Role::Replica, Role::Recovering] {
            let v = if role == status.role { 1.0 } else { 0.0 };
            metrics::gauge!("synod_role", "node" => self.node.clone(), "role" => role.to_string()).set(v);
        }
    }
}
