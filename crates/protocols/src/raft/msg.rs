//! Raft messages and durable records (Ongaro & Ousterhout, Fig. 2, plus PreVote §9.6 of the
//! thesis and InstallSnapshot §7).

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use synod_core::{Command, NodeId};

/// A log entry's payload: a batch of client commands (empty = the leader's no-op).
pub type Batch = Vec<Command>;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub term: u64,
    pub value: Payload,
}

impl Entry {
    pub fn full(term: u64, batch: Batch) -> Entry {
        Entry { term, value: Payload::Full(batch) }
    }

    /// Whether this replica holds only a piece of the entry (CRaft) and cannot execute it.
    pub fn is_partial(&self) -> bool {
        matches!(self.value, Payload::Shard(_))
    }
}

/// What a replica holds of an entry: the batch, or (CRaft) one shard of its codeword.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Payload {
    Full(Batch),
    Shard(Shard),
}

/// One Reed–Solomon shard of an entry's batch (its postcard bytes, `len` long, coded into
/// `n` shards of which any `d` rebuild it). Pieces of one entry are those with the same
/// log index and term (one leader per term appends once per index).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub n: u16,
    pub d: u16,
    pub len: u32,
    /// Commands in the batch (for traces and status).
    pub cmds: u32,
    pub index: u16,
    pub bytes: Bytes,
}

/// One chunk of a snapshot covering the log up to `index` (the entry there has term
/// `snap_term`): `data` is its bytes at `offset` of `total`. A leader sends it to a follower
/// (`Msg::Snapshot`, InstallSnapshot §7); a CRaft follower to a recovering leader
/// (`Msg::PulledSnapshot`). Postcard encodes a newtype variant of this struct exactly as the
/// struct variant with the same fields it replaced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotChunk {
    /// The sender's term.
    pub term: u64,
    pub index: u64,
    pub snap_term: u64,
    pub offset: u64,
    pub total: u64,
    /// `Bytes`, not `Vec<u8>`: serialized as one byte string (a memcpy), not byte by byte,
    /// and a chunk is a zero-copy slice of the snapshot.
    pub data: Bytes,
}

impl SnapshotChunk {
    /// For traces: the term, the index and the chunk's place (not its bytes).
    pub fn describe(&self) -> String {
        format!("t={} index={} {}/{}", self.term, self.index, self.offset, self.total)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// RequestVote. With `pre_vote`, `term` is the term the candidate *would* use and nobody
    /// changes state (thesis §9.6).
    RequestVote {
        term: u64,
        last_index: u64,
        last_term: u64,
        pre_vote: bool,
    },
    Vote {
        term: u64,
        granted: bool,
        pre_vote: bool,
    },
    /// AppendEntries: `entries` follow `prev_index`; empty entries = heartbeat.
    Append {
        term: u64,
        prev_index: u64,
        prev_term: u64,
        entries: Vec<Entry>,
        commit: u64,
    },
    /// Reply to Append. On success `index` is the follower's match index; on failure it is a
    /// hint where the leader should retry (fast back-up by term: the first index of the
    /// conflicting term, or the follower's last index + 1).
    AppendResp {
        term: u64,
        success: bool,
        index: u64,
        /// The `prev_index` of the request answered (lets the leader ignore stale rejections).
        prev: u64,
    },
    /// One chunk of a snapshot for a follower whose next entry was compacted away.
    Snapshot(SnapshotChunk),
    /// The follower has `offset` bytes of the snapshot (or, with `done`, installed it).
    SnapshotResp {
        term: u64,
        index: u64,
        offset: u64,
        done: bool,
    },
    /// CRaft: full copies of entries (index, entry) the follower may hold as a shard only
    /// (it replaces a shard of the same index and term, and persists it); empty = a probe.
    Fill {
        term: u64,
        entries: Vec<(u64, Entry)>,
    },
    /// The follower holds every entry up to `full` in full.
    FillResp {
        term: u64,
        full: u64,
    },
    /// CRaft: a new leader asks for what its followers hold of these entries.
    Gather {
        term: u64,
        indices: Vec<u64>,
    },
    /// The follower's entries at the asked indices (those it has; full or shard), and the
    /// index of its snapshot (0: none): it executed every entry up to there, so they are
    /// committed, and it may hold them only in that snapshot.
    Gathered {
        term: u64,
        asked: Vec<u64>,
        entries: Vec<(u64, Entry)>,
        compacted: u64,
    },
    /// CRaft: a recovering leader asks a follower for the chunk at `offset` of its snapshot
    /// (one covering at least `index`): the leader holds only a shard of a committed entry
    /// that the follower compacted.
    PullSnapshot {
        term: u64,
        index: u64,
        offset: u64,
    },
    /// One chunk of the follower's snapshot for the recovering leader.
    PulledSnapshot(SnapshotChunk),
    /// The leader of `term` starts lease round `round` (`lease.rs`), with each heartbeat.
    LeaseReq {
        term: u64,
        round: u64,
    },
    /// A follower of `term` granted round `round`: it votes for no other candidate for the
    /// lease duration on its clock.
    LeaseAck {
        term: u64,
        round: u64,
    },
}

/// What Raft persists, replayed in order on restart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// currentTerm and votedFor.
    HardState { term: u64, voted_for: Option<NodeId> },
    /// Entries starting at `first`; everything after `first - 1` that was there is replaced.
    Entries { first: u64, entries: Vec<Entry> },
    /// Everything up to `upto` is committed (written lazily; only speeds up restart).
    Commit(u64),
    /// A snapshot of the state machine covering the log up to `index` (term `term`).
    Snapshot { index: u64, term: u64, data: Bytes },
    /// CRaft: the full copy of the entry at `index` replaces the shard held there (same
    /// term); nothing after it changes.
    Full { index: u64, entry: Entry },
}

#[cfg(test)]
mod wire_tests {
    use super::*;

    /// The shape `Snapshot` and `PulledSnapshot` had before they shared [`SnapshotChunk`]
    /// (struct variants at the same places): the encoding is unchanged.
    #[derive(Serialize)]
    enum Before {
        _V0,
        _V1,
        _V2,
        _V3,
        Snapshot { term: u64, index: u64, snap_term: u64, offset: u64, total: u64, data: Bytes },
        _V5,
        _V6,
        _V7,
        _V8,
        _V9,
        _V10,
        PulledSnapshot { term: u64, index: u64, snap_term: u64, offset: u64, total: u64, data: Bytes },
    }

    #[test]
    fn snapshot_chunks_encode_as_before() {
        let c = SnapshotChunk {
            term: 7,
            index: 300,
            snap_term: 6,
            offset: 65536,
            total: 1 << 20,
            data: Bytes::from_static(b"chunk"),
        };
        let old = |pulled: bool| {
            let (term, index, snap_term, offset, total, data) =
                (7, 300, 6, 65536, 1 << 20, Bytes::from_static(b"chunk"));
            let m = if pulled {
                Before::PulledSnapshot { term, index, snap_term, offset, total, data }
            } else {
                Before::Snapshot { term, index, snap_term, offset, total, data }
            };
            postcard::to_allocvec(&m).unwrap()
        };
        assert_eq!(postcard::to_allocvec(&Msg::Snapshot(c.clone())).unwrap(), old(false));
        assert_eq!(postcard::to_allocvec(&Msg::PulledSnapshot(c.clone())).unwrap(), old(true));
        let back: Msg = postcard::from_bytes(&old(true)).unwrap();
        assert_eq!(back, Msg::PulledSnapshot(c));
    }
}
