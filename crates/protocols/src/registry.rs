//! The protocol registry: name → constructor. Adding a protocol means adding one entry here.

use synod_core::client_policy::{home_policy, leader_policy, PolicyFactory};
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
    /// The client side of the protocol: a fresh policy for one client session (where its
    /// requests go, how replies count). Every host — the client library, the simulator's
    /// clients, the Redis front end, `synod bench` — runs it. Leader-based protocols use
    /// [`leader_policy`], protocols where any replica serves a client [`home_policy`]; a
    /// protocol with its own client logic supplies a constructor from its folder.
    pub client: PolicyFactory,
    /// Whether every replica applies commands in one sequence (the state machine and the
    /// simulator's convergence check rely on it) or only interfering ones in the same order.
    pub order: Order,
    /// How many of `n` replicas may fail with the cluster still committing: `n − 1 − ⌊n/2⌋`
    /// ([`minority`]) for majority-quorum protocols; fewer for protocols whose quorums are
    /// larger (RSPaxos). Shown by `synod protocols`; the shared registry tests crash no more.
    pub tolerates: fn(usize) -> usize,
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
        client: leader_policy,
        order: Order::Total,
        tolerates: minority,
        build: crate::multipaxos::build,
    },
    ProtocolInfo {
        name: "holipaxos",
        description: "MultiPaxos + HoliPaxos layers: integrated failure detector and churn rules 1-3, slowdown detector with overload markers, GLE log trimming (options trim=gle|quorum|snapshot), single control message",
        client: leader_policy,
        order: Order::Total,
        tolerates: minority,
        build: crate::holipaxos::build,
    },
    ProtocolInfo {
        name: "raft",
        description: "Raft (options prevote, check_quorum default off), snapshots + InstallSnapshot",
        client: leader_policy,
        order: Order::Total,
        tolerates: minority,
        build: crate::raft::build,
    },
    ProtocolInfo {
        name: "raft+",
        description: "Raft with PreVote and CheckQuorum on (HoliPaxos's Raft+ baseline)",
        client: leader_policy,
        order: Order::Total,
        tolerates: minority,
        build: crate::raft::build_plus,
    },
    ProtocolInfo {
        name: "mencius",
        description: "Mencius: rotating slot owners (Coordinated Paxos), skips, revocation of a suspect's slots; clients use any replica",
        client: home_policy,
        order: Order::Total,
        tolerates: minority,
        build: crate::mencius::build,
    },
    ProtocolInfo {
        name: "epaxos",
        description: "EPaxos: leaderless, dependency-ordered commits with fast (F+floor((F+1)/2)) and slow paths, Tarjan execution, explicit-prepare recovery; clients use any replica",
        client: home_policy,
        order: Order::Partial,
        tolerates: minority,
        build: crate::epaxos::build,
    },
    ProtocolInfo {
        name: "crossword",
        description: "Crossword: MultiPaxos with per-instance Reed-Solomon shards, (c, q) on q + c = n + 1 chosen by per-follower response-time models (options config=adaptive|rotate|<c>, gossip_gap), follower gossip, shard pooling on failover",
        client: leader_policy,
        order: Order::Total,
        tolerates: minority,
        build: crate::crossword::build,
    },
    ProtocolInfo {
        name: "rspaxos",
        description: "RSPaxos: MultiPaxos with one Reed-Solomon shard per acceptor, commit quorum ceil((n+d)/2) (n=5: 4, one failure tolerated), followers fetch values from the leader",
        client: leader_policy,
        order: Order::Total,
        tolerates: crate::rspaxos::tolerates,
        build: crate::rspaxos::build,
    },
    ProtocolInfo {
        name: "craft",
        description: "CRaft: Raft with one Reed-Solomon shard per server (d = f+1) while all followers answer, coded commit quorum ceil((n+d)/2); switches to full copies (re-sending coded entries in full) once a follower is silent; a new leader rebuilds from d shards",
        client: leader_policy,
        order: Order::Total,
        tolerates: crate::raft::craft_tolerates,
        build: crate::raft::build_craft,
    },
    ProtocolInfo {
        name: "idem",
        description: "IDEM: every replica runs an acceptance test (reject threshold, active queue management) and rejects early; the leader orders requests f+1 replicas accepted; forwarding, rejected cache, fetch, implicit GC (options reject_threshold, admission, forward_ms, relay)",
        client: crate::idem::policy::client,
        order: Order::Total,
        tolerates: minority,
        build: crate::idem::build,
    },
    ProtocolInfo {
        name: "idem-nopr",
        description: "IDEM without proactive rejection (the paper's IDEM_noPR ablation)",
        client: crate::idem::policy::client,
        order: Order::Total,
        tolerates: minority,
        build: crate::idem::build_nopr,
    },
    ProtocolInfo {
        name: "idem-noaqm",
        description: "IDEM with tail drop only, no active queue management (the paper's ablation)",
        client: crate::idem::policy::client,
        order: Order::Total,
        tolerates: minority,
        build: crate::idem::build_noaqm,
    },
    ProtocolInfo {
        name: "paxos-lbr",
        description: "MultiPaxos with leader-based rejection (IDEM's baseline): the leader runs the acceptance test; options reject_threshold, admission",
        client: crate::layers::lbr::client,
        order: Order::Total,
        tolerates: minority,
        build: crate::layers::lbr::build,
    },
    ProtocolInfo {
        name: "raft-admit",
        description: "Raft behind IDEM's acceptance test (admission control in front of any protocol, crate::admit): each replica rejects at once what exceeds its active-request threshold; options reject_threshold, admission, hold_max_ms and Raft's",
        client: crate::layers::lbr::client,
        order: Order::Total,
        tolerates: minority,
        build: crate::admit::build_raft,
    },
    ProtocolInfo {
        name: "nezha",
        description: "Nezha: deadline-ordered multicast (DOM) by a proxy in the client, leader's speculative fast-reply + followers' hashes (super quorum f+ceil(f/2)+1), slow path on leader + f slow-replies, VR-style view change; options commutativity, offload, dom, speculate",
        client: crate::nezha::proxy::policy,
        order: Order::Total,
        tolerates: minority,
        build: crate::nezha::build,
    },
    ProtocolInfo {
        name: "fast-paxos",
        description: "Fast Paxos (Lamport 2006) on the MultiPaxos core: clients multicast to all acceptors, which vote in the next free slot of the leader's fast round; chosen by a fast quorum ceil(3n/4); collisions recovered by the leader's classic round (coordinated recovery, rule O4), losers re-voted in later slots",
        client: crate::fastpaxos::multicast_policy,
        order: Order::Total,
        tolerates: minority,
        build: crate::fastpaxos::build,
    },
    ProtocolInfo {
        name: "chain",
        description: "Chain Replication (van Renesse & Schneider, OSDI'04): updates at the head, forwarded down the chain, applied by the tail, acks back up; queries at the tail under a read lease from the configuration group; the chain configuration (epoch, order) chosen by a majority of the replicas (Paxos per epoch), failed nodes removed, recovered ones rejoin at the tail with state transfer (options lease_ms, lease_drift_ppm)",
        client: crate::chain::policy::client,
        order: Order::Total,
        tolerates: minority,
        build: crate::chain::build,
    },
];

/// Failures tolerated by protocols whose quorums are majorities: ⌊(n − 1)/2⌋.
pub fn minority(n: usize) -> usize {
    n.saturating_sub(1) / 2
}

/// Every registered protocol.
pub fn all() -> &'static [ProtocolInfo] {
    REGISTRY
}

/// The mutants in a build with the `mutants` feature, none otherwise.
fn mutants() -> &'static [ProtocolInfo] {
    #[cfg(feature = "mutants")]
    return crate::mutants::all();
    #[cfg(not(feature = "mutants"))]
    &[]
}

/// Names of the registered protocols.
pub fn names() -> Vec<&'static str> {
    REGISTRY.iter().map(|p| p.name).collect()
}

/// The client-policy constructor of the protocol named `name` (for hosts that learn the
/// protocol from a replica's `Status.protocol`, e.g. `synod_client::ClientOptions::resolve_policy`).
pub fn client_for(name: &str) -> Option<PolicyFactory> {
    find(name).ok().map(|p| p.client)
}

/// Look a protocol up by name; the error lists the known ones. Builds with the `mutants`
/// feature (test builds only) also find the deliberately broken variants, so that tests can
/// run them as real replicas (crates/synod/tests/nemesis.rs).
pub fn find(name: &str) -> Result<&'static ProtocolInfo, String> {
    REGISTRY
        .iter()
        .chain(mutants())
        .find(|p| p.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| format!("unknown protocol {name:?}; known protocols: {}", names().join(", ")))
}
