//! Shared snapshot plumbing: the policy of when to snapshot, and chunked transfer of a
//! snapshot to a lagging replica (InstallSnapshot, Raft §7), usable by any log protocol.

use bytes::Bytes;

/// A snapshot of the state machine covering the replicated log up to `index`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub index: u64,
    /// Term / ballot round of the entry at `index` (Raft's last included term).
    pub term: u64,
    pub data: Bytes,
}

/// When to snapshot and how much log to keep behind it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotPolicy {
    /// Snapshot after this many entries executed since the last snapshot (0 = never).
    pub every: u64,
    /// Entries kept in the log behind the snapshot for catch-up.
    pub keep: u64,
}

impl SnapshotPolicy {
    pub fn from_params(p: &crate::ProtocolParams) -> Self {
        SnapshotPolicy { every: p.snapshot_every, keep: p.snapshot_keep }
    }

    /// Whether a snapshot is due, given the last snapshot's index and the executed index.
    pub fn due(&self, last_snapshot: u64, executed: u64) -> bool {
        self.every > 0 && executed >= last_snapshot + self.every
    }

    /// The first log index to keep once a snapshot at `index` exists.
    pub fn trim_point(&self, index: u64) -> u64 {
        index.saturating_sub(self.keep) + 1
    }
}

/// The chunk of `data` starting at `offset`, at most `max` bytes.
pub fn chunk(data: &[u8], offset: u64, max: usize) -> &[u8] {
    let start = (offset as usize).min(data.len());
    let end = start.saturating_add(max).min(data.len());
    &data[start..end]
}

/// Reassembles a snapshot sent in chunks. Chunks must arrive in order; a chunk for another
/// snapshot restarts the transfer; duplicates and out-of-order chunks are ignored (the sender
/// resends from the offset acknowledged).
#[derive(Clone, Debug, Default)]
pub struct ChunkAssembler {
    index: u64,
    total: u64,
    buf: Vec<u8>,
}

impl ChunkAssembler {
    /// Offer a chunk. Returns the complete data when the last chunk arrived.
    pub fn offer(&mut self, index: u64, offset: u64, total: u64, data: &[u8]) -> Option<Vec<u8>> {
        if index != self.index || total != self.total || offset == 0 {
            if offset != 0 {
                return None;
            }
            self.index = index;
            self.total = total;
            self.buf.clear();
        }
        if offset != self.buf.len() as u64 || self.buf.len() as u64 + data.len() as u64 > total {
            return None;
        }
        self.buf.extend_from_slice(data);
        if self.buf.len() as u64 == total {
            self.total = 0;
            self.index = 0;
            return Some(std::mem::take(&mut self.buf));
        }
        None
    }

    /// Bytes received so far of the snapshot at `index`.
    pub fn received(&self, index: u64) -> u64 {
        if index == self.index {
            self.buf.len() as u64
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy() {
        let p = SnapshotPolicy { every: 100, keep: 30 };
        assert!(!p.due(0, 99));
        assert!(p.due(0, 100));
        assert!(p.due(100, 200));
        assert_eq!(p.trim_point(100), 71);
        assert_eq!(p.trim_point(10), 1);
        assert!(!SnapshotPolicy { every: 0, keep: 0 }.due(0, 1_000_000));
    }

    #[test]
    fn chunks_reassemble_in_order_only() {
        let data: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let mut a = ChunkAssembler::default();
        let mut off = 0u64;
        let mut out = None;
        while out.is_none() {
            let c = chunk(&data, off, 300);
            // A duplicate of the previous chunk and a chunk from the future are ignored.
            if off > 0 {
                assert!(a.offer(7, off - 300, 1000, chunk(&data, off - 300, 300)).is_none());
                assert!(a.offer(7, off + 300, 1000, chunk(&data, off + 300, 300)).is_none());
            }
            out = a.offer(7, off, 1000, c);
            off += c.len() as u64;
            assert_eq!(a.received(7), if out.is_some() { 0 } else { off });
        }
        assert_eq!(out.unwrap(), data);
        // A new transfer can start.
        assert_eq!(a.offer(8, 0, 3, &[1, 2, 3]), Some(vec![1, 2, 3]));
    }
}
