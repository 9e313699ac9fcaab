//! The protocol registry: name → constructor. Adding a protocol means adding one entry here.

use synod_core::session::Order;
use synod_core::{NodeId, Protocol, ProtocolParams};

/// What a protocol needs to know to construct a replica.
#[derive(Clone, Debug)]
pub struct Setup {
    /// This replica.
    pub id: NodeId,
    /// All members of the cluster, this replica included, in a fixed order.
    pub members: Vec<NodeId>,
    pub params: ProtocolParams,
}

/// One registered protocol.
pub struct ProtocolInfo {
    pub name: &'static str,
    pub description: &'static str,
    /// Whether clients should look for a single leader (redirects) or may talk to any replica.
    pub leader_based: bool,
    /// Whether every replica applies commands in one sequence (the state machine and the
    /// simulator's convergence check rely on it) or only interfering ones in the same order.
    pub order: Order,
    /// Construct a replica; the error explains a bad option.
    pub build: fn(&Setup) -> Result<Box<dyn Protocol>, String>,
}

impl std::fmt::Debug for ProtocolInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProtocolInfo").field("name", &self.name).finish()
    }
}

static REGISTRY: &[ProtocolInfo] = &[
    ProtocolInfo {
        name: "multipaxos",
        description: "MultiPaxos with a stable leader, phase-2 pipelining, adaptive batching, catch-up, periodic snapshots (snapshot_every)",
        leader_based: true,
        order: Order::Total,
        build: crate::multipaxos::build,
    },
    ProtocolInfo {
        name: "holipaxos",
        description: "MultiPaxos + HoliPaxos layers: integrated failure detector and churn rules 1-3, slowdown detector with overload markers, GLE log trimming (options trim=gle|quorum|snapshot), single control message",
        leader_based: true,
        order: Order::Total,
        build: crate::holipaxos::build,
    },
    ProtocolInfo {
        name: "raft",
        description: "Raft (options prevote, check_quorum default off), snapshots + InstallSnapshot",
        leader_based: true,
        order: Order::Total,
        build: crate::raft::build,
    },
    ProtocolInfo {
        name: "raft+",
        description: "Raft with PreVote and CheckQuorum on (HoliPaxos's Raft+ baseline)",
        leader_based: true,
        order: Order::Total,
        build: crate::raft::build_plus,
    },
    ProtocolInfo {
        name: "mencius",
        description: "Mencius: rotating slot owners (Coordinated Paxos), skips, revocation of a suspect's slots; clients use any replica",
        leader_based: false,
        order: Order::Total,
        build: crate::mencius::build,
    },
    ProtocolInfo {
        name: "epaxos",
        description: "EPaxos: leaderless, dependency-ordered commits with fast (F+floor((F+1)/2)) and slow paths, Tarjan execution, explicit-prepare recovery; clients use any replica",
        leader_based: false,
        order: Order::Partial,
        build: crate::epaxos::build,
    },
    ProtocolInfo {
        name: "nezha",
        description: "Nezha: deadline-ordered multicast (DOM), leader log with log-modifications and sync-points, fast-path hashes and proxy quorum checks, VR-style view change; clients use any replica (it relays with a deadline)",
        leader_based: false,
        order: Order::Total,
        build: crate::nezha::build,
    },
];

/// Every registered protocol.
pub fn all() -> &'static [ProtocolInfo] {
    REGISTRY
}

/// Names of the registered protocols.
pub fn names() -> Vec<&'static str> {
    REGISTRY.iter().map(|p| p.name).collect()
}

/// Look a protocol up by name; the error lists the known ones.
pub fn find(name: &str) -> Result<&'static ProtocolInfo, String> {
    REGISTRY
        .iter()
        .find(|p| p.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| format!("unknown protocol {name:?}; known protocols: {}", names().join(", ")))
}
