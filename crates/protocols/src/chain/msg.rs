//! What chain replicas say to each other, and what they write to their WAL.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use synod_core::{Ballot, Command, NodeId};

/// A chain configuration (§3 of the paper: the master's view of the chain), numbered by
/// `epoch`. Epoch 1 is the setup's member order and needs no agreement; every later one is
/// chosen by a majority of the replicas (`config.rs`). `chain[0]` is the head, the last
/// element the tail. Never empty.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    pub epoch: u64,
    pub chain: Vec<NodeId>,
}

impl Config {
    pub fn head(&self) -> Option<NodeId> {
        self.chain.first().copied()
    }
    pub fn tail(&self) -> Option<NodeId> {
        self.chain.last().copied()
    }
    pub fn contains(&self, id: NodeId) -> bool {
        self.chain.contains(&id)
    }
    /// The node before `id` in the chain (None for the head or a non-member).
    pub fn pred(&self, id: NodeId) -> Option<NodeId> {
        let i = self.chain.iter().position(|&m| m == id)?;
        i.checked_sub(1).map(|j| self.chain[j])
    }
    /// The node after `id` in the chain (None for the tail or a non-member).
    pub fn succ(&self, id: NodeId) -> Option<NodeId> {
        let i = self.chain.iter().position(|&m| m == id)?;
        self.chain.get(i + 1).copied()
    }
    /// A configuration read from the network must name a chain of distinct members.
    pub fn well_formed(&self, members: &[NodeId]) -> bool {
        let mut seen = std::collections::BTreeSet::new();
        !self.chain.is_empty() && self.chain.iter().all(|m| members.contains(m) && seen.insert(*m))
    }
}

impl std::fmt::Display for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let chain: Vec<String> = self.chain.iter().map(|m| m.to_string()).collect();
        write!(f, "e{}[{}]", self.epoch, chain.join("→"))
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    // --- failure detection and configuration gossip (config.rs) ---
    /// Every heartbeat, to every replica: the epoch the sender is in and the replicas it has
    /// not heard from for a failure timeout; `pending`: it accepted a configuration for the
    /// next epoch that is not known chosen (the coordinator finishes that instance).
    Alive {
        epoch: u64,
        suspects: Vec<NodeId>,
        pending: bool,
        /// The sender's history is a prefix-consistent copy (it has not been outside the
        /// chain since its last sync): only such a node may become head.
        trusted: bool,
    },
    /// "Send me your configuration" (the sender saw a newer epoch).
    ConfigReq,
    /// A chosen configuration.
    Decided {
        cfg: Config,
    },
    // --- the configuration group: one Paxos instance per epoch (config.rs) ---
    Prepare {
        ballot: Ballot,
        epoch: u64,
    },
    Promise {
        ballot: Ballot,
        epoch: u64,
        accepted: Option<(Ballot, Config)>,
    },
    Accept {
        ballot: Ballot,
        cfg: Config,
    },
    Accepted {
        ballot: Ballot,
        epoch: u64,
    },
    Nack {
        ballot: Ballot,
        promised: Ballot,
    },
    // --- updates down the chain, acknowledgements up (update.rs) ---
    /// Updates `first, first+1, …` from the predecessor. `reset = Some(s)`: the answer to a
    /// `Need` — drop every update after `s` before appending (repair, §3); `upto` is then
    /// the predecessor's last update, which a new tail must hold before it answers queries
    /// (it may have been processed by an earlier tail).
    Forward {
        epoch: u64,
        reset: Option<u64>,
        upto: u64,
        first: u64,
        entries: Vec<Command>,
    },
    /// From the successor: `stable` = the tail applied everything up to here (the paper's
    /// ack, which lets the receiver drop those updates from its Sent list); `have` = the
    /// successor holds every update up to here (flow control and retransmission).
    Ack {
        epoch: u64,
        stable: u64,
        have: u64,
    },
    /// From a successor that is not yet in sync in this epoch: it applied up to `stable`.
    Need {
        epoch: u64,
        stable: u64,
    },
    /// State transfer: the predecessor's snapshot at `index` (then updates after it, up to
    /// at least `upto` before the node answers queries).
    Snapshot {
        epoch: u64,
        index: u64,
        upto: u64,
        data: Bytes,
    },
    // --- the tail's read lease (query.rs) ---
    LeaseReq {
        cfg: Config,
        round: u64,
    },
    LeaseAck {
        epoch: u64,
        round: u64,
    },
}

/// Durable records. Replayed in order by `recover`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    Entry {
        seq: u64,
        cmd: Command,
    },
    /// Updates after `after` were dropped (repair reset).
    Truncate {
        after: u64,
    },
    /// Updates up to here are stable (applied); lazily written.
    Stable {
        upto: u64,
    },
    Config {
        cfg: Config,
    },
    Promised {
        ballot: Ballot,
    },
    Accepted {
        ballot: Ballot,
        cfg: Config,
    },
    Snapshot {
        index: u64,
        data: Bytes,
    },
    /// Removed from the chain (false) / in sync again after rejoining (true).
    Trusted {
        trusted: bool,
    },
}
