//! The incremental set hash of §7.1 and its per-key refinement of §7.2.
//!
//! Logs are ordered by deadline everywhere, so two logs are equal when their *sets* of
//! entries are: the hash of a set is the XOR of the hashes of its entries, updated in O(1)
//! when an entry is added or removed (a modified entry is a removal and an addition). With
//! the commutativity optimization a fast-reply carries only the XOR of the write entries
//! that touch the request's keys, so requests on other keys do not spoil the match.
//!
//! The paper hashes entries with SHA-1; this uses a 64-bit mix of the log-id (the proxy
//! compares hashes of honest replicas, so collision resistance against an adversary is not
//! needed; accidental collisions have probability 2^-64 per comparison).

use super::msg::LogId;
use std::collections::HashMap;
use synod_core::kv::Footprint;
use synod_core::Command;

/// The hash of one entry.
pub fn entry_hash(id: &LogId) -> u64 {
    fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    mix(mix(mix(id.deadline) ^ id.client).wrapping_add(0x9e37_79b9_7f4a_7c15) ^ id.seq)
}

/// A digest of a command's encoding: a follower checks that the copy of a request it holds
/// is the leader's (a retry through another replica carries another receive time).
pub fn cmd_digest(cmd: &Command) -> u64 {
    let bytes = synod_core::protocol::encode(cmd);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes.iter() {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The running set hash of a log.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SetHash {
    /// Over every entry.
    all: u64,
    /// Per key, over the write entries that touch it.
    per_key: HashMap<Vec<u8>, u64>,
    /// Over the write entries that touch the whole key space or a range.
    wide: u64,
}

impl SetHash {
    /// Add or remove (XOR is its own inverse) an entry.
    pub fn toggle(&mut self, id: &LogId, cmd: &Command) {
        let h = entry_hash(id);
        self.all ^= h;
        if !cmd.op.is_write() {
            return;
        }
        match cmd.op.footprint() {
            Footprint::None => {}
            Footprint::Keys(mut keys) => {
                keys.sort_unstable();
                keys.dedup();
                for k in keys {
                    let e = self.per_key.entry(k.to_vec()).or_insert(0);
                    *e ^= h;
                    if *e == 0 {
                        self.per_key.remove(k);
                    }
                }
            }
            Footprint::Range { .. } | Footprint::All => self.wide ^= h,
        }
    }

    /// The hash a fast-reply for `cmd` carries: the whole set, or with commutativity the
    /// entries that do not commute with `cmd` (writes on its keys, wide writes) plus `cmd`
    /// itself.
    pub fn for_reply(&self, id: &LogId, cmd: &Command, commutativity: bool) -> u64 {
        if !commutativity {
            return self.all;
        }
        match cmd.op.footprint() {
            Footprint::None => entry_hash(id),
            Footprint::Keys(keys) => {
                let mut h = self.wide;
                let mut seen: Vec<&[u8]> = Vec::with_capacity(keys.len());
                for k in keys {
                    if !seen.contains(&k) {
                        seen.push(k);
                        h ^= self.per_key.get(k).copied().unwrap_or(0);
                    }
                }
                // A read is not in the per-key hashes: add it so the reply names it.
                if !cmd.op.is_write() {
                    h ^= entry_hash(id);
                }
                h
            }
            Footprint::Range { .. } | Footprint::All => self.all,
        }
    }

    pub fn clear(&mut self) {
        *self = SetHash::default();
    }
}
