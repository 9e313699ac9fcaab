//! Entry codecs: the extension point of the Raft core for what a log entry becomes on its
//! way to each follower (the Raft counterpart of `crate::layers::codec` for MultiPaxos).
//!
//! The core calls an [`EntryCodec`] where an entry is replicated, committed and rebuilt:
//! * **replication** — [`split`](EntryCodec::split): a new entry of the leader becomes one
//!   piece per member (or `None`: every follower gets the full copy, plain Raft);
//! * **commitment** — [`coded_quorum`](EntryCodec::coded_quorum): replicas (the leader
//!   included) that must hold a piece of a coded entry before it commits, unless a majority
//!   holds it in full;
//! * **a new leader** — [`rebuild`](EntryCodec::rebuild) an entry from the pieces its
//!   followers report, and [`reports_to_decide`](EntryCodec::reports_to_decide): how many
//!   replicas' reports prove that an entry whose pieces they do not hold was never committed.
//!
//! [`FullCopy`] is Raft: it never splits, so every entry is full and none of the coded paths
//! of the core runs. [`ReedSolomon`] is CRaft's code (Wang et al., FAST 2020): one shard of a
//! Reed–Solomon codeword with `d = f + 1` data shards per server (`c = 1`, the shared
//! `synod_core::erasure` code and its balanced round-robin assignment).

use super::msg::{Batch, Shard};
use bytes::Bytes;
use synod_core::erasure::{Assignment, Code};
use synod_core::protocol::{decode, encode};
use synod_core::quorum::majority;
use synod_core::NodeId;

/// The extension point. Every method but [`name`](EntryCodec::name) defaults to Raft's
/// full-copy replication.
pub trait EntryCodec: Send {
    /// Whether entries may be coded at all (false: the core's coded paths never run).
    fn codes(&self) -> bool {
        false
    }

    /// The pieces of a new entry, one per member in `members` order (sorted, containing the
    /// leader); `None`: full copies.
    fn split(&mut self, batch: &Batch, members: &[NodeId]) -> Option<Vec<Shard>> {
        let _ = (batch, members);
        None
    }

    /// Replicas, the leader included, that must hold a piece of a coded entry to commit it.
    fn coded_quorum(&self, n: usize) -> usize {
        majority(n)
    }

    /// Replicas whose reports without `d` pieces of an entry prove it was never committed
    /// (any such set meets every coded commit quorum in `d` replicas, and every majority).
    fn reports_to_decide(&self, n: usize) -> usize {
        majority(n)
    }

    /// The batch that `shards` (pieces of one entry: same index and term) give, if enough.
    fn rebuild(&self, shards: &[Shard]) -> Option<Batch> {
        let _ = shards;
        None
    }
}

/// Raft: full copies everywhere.
#[derive(Clone, Copy, Debug, Default)]
pub struct FullCopy;

impl EntryCodec for FullCopy {}

/// CRaft's coding: `c = 1`, `d = f + 1`, coded commit on `q = ⌈(n + d)/2⌉` replicas.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReedSolomon {
    /// Mutation test only: commit coded entries on a majority (`q + c = f + 2 < n + 1`,
    /// so `q − f` replicas hold fewer than `d` shards).
    pub majority_quorum: bool,
}

impl ReedSolomon {
    /// RSPaxos's quorum, which CRaft shares: `⌈(n + d)/2⌉`, `d = f + 1`.
    pub fn quorum(n: usize) -> usize {
        let d = Self::data_shards(n);
        (n + d).div_ceil(2)
    }

    pub fn data_shards(n: usize) -> usize {
        (n.max(1) - 1) / 2 + 1
    }
}

impl EntryCodec for ReedSolomon {
    fn codes(&self) -> bool {
        true
    }

    fn split(&mut self, batch: &Batch, members: &[NodeId]) -> Option<Vec<Shard>> {
        let n = members.len();
        if n < 2 {
            return None;
        }
        let code = Code::for_cluster(n).ok()?;
        let bytes = encode(batch);
        let shards = code.encode(&bytes).ok()?;
        // Balanced round-robin with c = 1: member i holds shard i.
        let assignment = Assignment::balanced(n, 1);
        Some(
            (0..n)
                .map(|pos| {
                    let index = assignment.of(pos)[0];
                    Shard {
                        n: n as u16,
                        d: code.d as u16,
                        len: bytes.len() as u32,
                        cmds: batch.len() as u32,
                        index: index as u16,
                        bytes: shards[index].clone(),
                    }
                })
                .collect(),
        )
    }

    fn coded_quorum(&self, n: usize) -> usize {
        if self.majority_quorum {
            majority(n)
        } else {
            Self::quorum(n)
        }
    }

    fn reports_to_decide(&self, n: usize) -> usize {
        // n + d − q: every such set meets a coded commit quorum in d replicas. Never below a
        // majority (entries committed in full copies are held by a majority).
        let correct = n + Self::data_shards(n) - Self::quorum(n);
        correct.max(majority(n))
    }

    fn rebuild(&self, shards: &[Shard]) -> Option<Batch> {
        let first = shards.first()?;
        let code = Code::new(first.n as usize, first.d as usize).ok()?;
        let same: Vec<(usize, Bytes)> = shards
            .iter()
            .filter(|s| (s.n, s.d, s.len) == (first.n, first.d, first.len))
            .map(|s| (s.index as usize, s.bytes.clone()))
            .collect();
        let bytes = code.decode(first.len as usize, &same).ok()?;
        decode::<Batch>(&bytes).ok()
    }
}
