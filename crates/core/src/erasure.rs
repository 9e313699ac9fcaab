//! Erasure coding, shared by the erasure-coded protocols (Crossword, RSPaxos, CRaft).
//!
//! A payload is cut into `d` data shards and extended with `n − d` parity shards by a
//! Reed–Solomon code (`reed-solomon-simd`, Leopard-RS): any `d` of the `n` shards give the
//! payload back. Crossword (§3.1) takes `d = f + 1` for `n = 2f + 1` servers, so that a
//! majority can always rebuild what was committed.
//!
//! Which shards each server stores is an [`Assignment`] (§3.2): balanced round-robin gives
//! server `i` the `c` shards `i, i+1, …, i+c−1 (mod n)`; an unbalanced one gives each server
//! its own count (§5.4, for followers with unequal bandwidth).
//!
//! ## The availability constraint (§3.3; formulas restored in the papers' NOTES.md)
//! A configuration of one instance is `(c, q)`: `c` shards per server, commit after `q` Accept
//! replies (the leader's own included). With `f` failures tolerated:
//! - **C1** (quorum intersection with the `n − f` servers of any later phase 1): `q ≥ f + 1`;
//! - **C2** (a committed value can be rebuilt): every `q − f` servers of the commit quorum that
//!   a later leader is sure to hear from hold at least `d` distinct shards between them — since
//!   any `q − f` servers are part of some commit quorum, every set of `q − f` servers must;
//! - **C4** (C2 for balanced round-robin): the worst `q − f` servers are adjacent and cover
//!   `min(n, q − f + c − 1)` shards, so with `d = f + 1` C2 ⟺ `q + c ≥ 2f + 2` = `n + 1` for
//!   the odd cluster sizes the paper uses.
//!
//! [`c2_holds`] checks C2 by enumeration for any assignment; the tests check C2 ⟺ C4 for
//! balanced round-robin, n = 3…9. The fastest valid configurations lie on `q + c = n + 1`
//! ([`boundary_configs`]).

use bytes::Bytes;
use std::collections::BTreeSet;

/// Why coding failed. None of these panics: bad shard sets come from the network.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodingError {
    #[error("invalid code: {d} data shards of {n} (need 1 ≤ d ≤ n ≤ 65535)")]
    BadCode { d: usize, n: usize },
    #[error("{have} distinct shards given, {need} needed to rebuild")]
    TooFewShards { have: usize, need: usize },
    #[error("shard index {index} out of range for {n} shards")]
    BadIndex { index: usize, n: usize },
    #[error("shards of unequal or odd size ({0} bytes)")]
    BadShardSize(usize),
    #[error("the shards cannot hold a payload of {len} bytes")]
    BadLength { len: usize },
    #[error("Reed–Solomon: {0}")]
    Codec(String),
}

/// A Reed–Solomon code with `d` data shards out of `n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Code {
    pub n: usize,
    pub d: usize,
}

impl Code {
    pub fn new(n: usize, d: usize) -> Result<Code, CodingError> {
        if d == 0 || d > n || n > 65_535 {
            return Err(CodingError::BadCode { d, n });
        }
        Ok(Code { n, d })
    }

    /// Crossword's code for `n` servers: `d = f + 1 = ⌊(n−1)/2⌋ + 1`.
    pub fn for_cluster(n: usize) -> Result<Code, CodingError> {
        Code::new(n, (n.max(1) - 1) / 2 + 1)
    }

    /// Bytes per shard for a payload of `len` bytes (even, as the codec needs; ≥ 2).
    pub fn shard_bytes(&self, len: usize) -> usize {
        let per = len.div_ceil(self.d).max(2);
        per + per % 2
    }

    /// Cut `payload` into the `n` shards of its codeword (index = position in the vector).
    pub fn encode(&self, payload: &[u8]) -> Result<Vec<Bytes>, CodingError> {
        let size = self.shard_bytes(payload.len());
        let mut data: Vec<Vec<u8>> = (0..self.d)
            .map(|i| {
                let start = (i * size).min(payload.len());
                let end = ((i + 1) * size).min(payload.len());
                let mut shard = payload[start..end].to_vec();
                shard.resize(size, 0);
                shard
            })
            .collect();
        let parity = if self.n > self.d {
            reed_solomon_simd::encode(self.d, self.n - self.d, &data).map_err(|e| CodingError::Codec(e.to_string()))?
        } else {
            Vec::new()
        };
        data.extend(parity);
        Ok(data.into_iter().map(Bytes::from).collect())
    }

    /// Rebuild a payload of `len` bytes from any `d` distinct shards `(index, bytes)`; extra
    /// shards and duplicates are ignored.
    pub fn decode(&self, len: usize, shards: &[(usize, Bytes)]) -> Result<Bytes, CodingError> {
        let size = self.shard_bytes(len);
        let mut data: Vec<Option<&[u8]>> = vec![None; self.d];
        let mut parity = Vec::new();
        let mut seen = BTreeSet::new();
        for (index, bytes) in shards {
            if *index >= self.n {
                return Err(CodingError::BadIndex { index: *index, n: self.n });
            }
            if bytes.len() != size {
                return Err(CodingError::BadShardSize(bytes.len()));
            }
            if !seen.insert(*index) {
                continue;
            }
            if *index < self.d {
                data[*index] = Some(bytes);
            } else {
                parity.push((*index - self.d, bytes.as_ref()));
            }
        }
        if seen.len() < self.d {
            return Err(CodingError::TooFewShards { have: seen.len(), need: self.d });
        }
        if size * self.d < len {
            return Err(CodingError::BadLength { len });
        }
        let restored = if data.iter().all(Option::is_some) {
            Default::default()
        } else {
            // Leopard-RS decoding has a fixed cost of ~125 µs (transforms over the whole
            // field), whatever the payload size: see benches/erasure.rs.
            let originals = data.iter().enumerate().filter_map(|(i, s)| s.map(|s| (i, s)));
            reed_solomon_simd::decode(self.d, self.n - self.d, originals, parity)
                .map_err(|e| CodingError::Codec(e.to_string()))?
        };
        let mut out = Vec::with_capacity(size * self.d);
        for (i, shard) in data.iter().enumerate() {
            match shard {
                Some(s) => out.extend_from_slice(s),
                None => out.extend_from_slice(
                    restored.get(&i).ok_or_else(|| CodingError::Codec(format!("shard {i} not restored")))?,
                ),
            }
        }
        out.truncate(len);
        Ok(Bytes::from(out))
    }
}

/// Which shards each server (by position `0..n`) holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    n: usize,
    shards: Vec<Vec<usize>>,
}

impl Assignment {
    /// Balanced round-robin (§3.2): server `i` holds shards `i, …, i+c−1 (mod n)`.
    pub fn balanced(n: usize, c: usize) -> Assignment {
        let c = c.clamp(1, n.max(1));
        Assignment { n, shards: (0..n).map(|i| (0..c).map(|k| (i + k) % n).collect()).collect() }
    }

    /// Unbalanced (§5.4): server `i` holds `counts[i]` consecutive shards, starting where the
    /// previous server's stopped (wrapping), so faster servers carry more of the codeword.
    pub fn unbalanced(n: usize, counts: &[usize]) -> Assignment {
        let mut next = 0;
        let shards = counts
            .iter()
            .map(|&c| {
                let held: Vec<usize> = (0..c.min(n)).map(|k| (next + k) % n).collect();
                next = (next + c) % n.max(1);
                held
            })
            .collect();
        Assignment { n, shards }
    }

    /// Shards held by server `i`.
    pub fn of(&self, server: usize) -> &[usize] {
        &self.shards[server]
    }

    pub fn servers(&self) -> usize {
        self.shards.len()
    }

    /// Distinct shards held by these servers together.
    pub fn coverage(&self, servers: &[usize]) -> usize {
        servers.iter().flat_map(|&s| self.shards[s].iter().copied()).collect::<BTreeSet<_>>().len()
    }
}

/// C1 and C2 by enumeration: `q ≥ f + 1` and every set of `q − f` servers covers ≥ `d` shards.
pub fn c2_holds(assignment: &Assignment, f: usize, d: usize, q: usize) -> bool {
    if q < f + 1 || q > assignment.servers() {
        return false;
    }
    weakest(assignment, q - f).is_none_or(|(_, covered)| covered >= d)
}

/// The set of `k` servers covering the fewest distinct shards, and that coverage (None when
/// `k` is 0 or above the servers); the first such set in lexicographic order.
pub fn weakest(assignment: &Assignment, k: usize) -> Option<(Vec<usize>, usize)> {
    if k == 0 || k > assignment.servers() {
        return None;
    }
    fn every_subset(
        a: &Assignment,
        start: usize,
        k: usize,
        chosen: &mut Vec<usize>,
        worst: &mut Option<(Vec<usize>, usize)>,
    ) {
        if chosen.len() == k {
            let covered = a.coverage(chosen);
            if worst.as_ref().is_none_or(|(_, w)| covered < *w) {
                *worst = Some((chosen.clone(), covered));
            }
            return;
        }
        for s in start..a.servers() {
            chosen.push(s);
            every_subset(a, s + 1, k, chosen, worst);
            chosen.pop();
        }
    }
    let mut worst = None;
    every_subset(assignment, 0, k, &mut Vec::with_capacity(k), &mut worst);
    worst
}

/// C1 and C4 (balanced round-robin, `d = f + 1`): `q ≥ f + 1` and `q + c ≥ 2f + 2`, which is
/// the paper's `q + c ≥ n + 1` for odd `n = 2f + 1` (for even `n`, `f = (n−2)/2` and the bound
/// is `q + c ≥ n`).
pub fn c4_holds(n: usize, f: usize, q: usize, c: usize) -> bool {
    q > f && q <= n && (1..=n).contains(&c) && q + c >= 2 * f + 2
}

/// The configurations `(c, q)` on the boundary `q + c = n + 1` with `q ≥ f + 1`, from the
/// full copy (`c = d`, `q = f + 1`, MultiPaxos's point) to one shard each (`c = 1`, `q = n`).
pub fn boundary_configs(n: usize) -> Vec<(usize, usize)> {
    let f = (n.max(1) - 1) / 2;
    (f + 1..=n).map(|q| (n + 1 - q, q)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn c2_by_enumeration_equals_c4_for_balanced_round_robin() {
        // n = 3…9, even sizes included (f = ⌊(n−1)/2⌋, d = f + 1).
        let mut checked = 0;
        for n in 3..=9usize {
            let f = (n - 1) / 2;
            let d = f + 1;
            for c in 1..=n {
                let a = Assignment::balanced(n, c);
                for q in 1..=n {
                    assert_eq!(c2_holds(&a, f, d, q), c4_holds(n, f, q, c), "n={n} c={c} q={q}");
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, (3..=9).map(|n| n * n).sum::<usize>());
        // The paper's examples: n = 5 → (c, q) ∈ {(3,3), (2,4), (1,5)}; RSPaxos's (1, 4) fails.
        assert_eq!(boundary_configs(5), vec![(3, 3), (2, 4), (1, 5)]);
        assert!(!c2_holds(&Assignment::balanced(5, 1), 2, 3, 4));
        assert!(c2_holds(&Assignment::balanced(5, 1), 1, 3, 4), "RSPaxos with n=5 tolerates one failure");
    }

    #[test]
    fn unbalanced_assignments_are_checked_by_enumeration() {
        // Five servers, counts 3,3,1,1,1: the leader and a fast follower hold full copies.
        let a = Assignment::unbalanced(5, &[3, 3, 1, 1, 1]);
        assert_eq!(a.of(0), &[0, 1, 2]);
        assert_eq!(a.of(1), &[3, 4, 0]);
        assert_eq!(a.of(2), &[1]);
        assert_eq!(a.coverage(&[2, 3, 4]), 3);
        // q = 5: any 3 servers must cover 3 shards — servers 2,3,4 cover {1,2,3}: ok.
        assert!(c2_holds(&a, 2, 3, 5));
        // q = 4: any 2 servers — 2 and 3 cover {1,2} only.
        assert!(!c2_holds(&a, 2, 3, 4));
    }

    #[test]
    fn any_d_shards_rebuild_and_fewer_fail_cleanly() {
        let code = Code::for_cluster(5).unwrap();
        assert_eq!((code.n, code.d), (5, 3));
        let payload: Vec<u8> = (0..1001u32).map(|i| (i * 7) as u8).collect();
        let shards = code.encode(&payload).unwrap();
        assert_eq!(shards.len(), 5);
        for a in 0..5 {
            for b in a + 1..5 {
                for c in b + 1..5 {
                    let set: Vec<(usize, Bytes)> = [a, b, c].iter().map(|&i| (i, shards[i].clone())).collect();
                    assert_eq!(code.decode(payload.len(), &set).unwrap(), payload, "{a},{b},{c}");
                }
            }
        }
        let two = vec![(0, shards[0].clone()), (4, shards[4].clone()), (4, shards[4].clone())];
        assert_eq!(code.decode(payload.len(), &two), Err(CodingError::TooFewShards { have: 2, need: 3 }));
        assert!(matches!(code.decode(payload.len(), &[(9, shards[0].clone())]), Err(CodingError::BadIndex { .. })));
        let short = vec![(0, shards[0].slice(1..)), (1, shards[1].clone()), (2, shards[2].clone())];
        assert!(matches!(code.decode(payload.len(), &short), Err(CodingError::BadShardSize(_))));
        assert!(Code::new(3, 0).is_err() && Code::new(3, 4).is_err());
    }

    proptest! {
        #[test]
        fn every_payload_round_trips_through_any_d_shards(
            payload in proptest::collection::vec(any::<u8>(), 0..3000),
            n in 1usize..10,
            pick in any::<u64>(),
        ) {
            let code = Code::for_cluster(n).unwrap();
            let shards = code.encode(&payload).unwrap();
            prop_assert_eq!(shards.len(), n);
            // A pseudo-random choice of d distinct shards.
            let mut order: Vec<usize> = (0..n).collect();
            let mut x = pick;
            for i in (1..n).rev() {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                order.swap(i, (x >> 33) as usize % (i + 1));
            }
            let set: Vec<(usize, Bytes)> = order[..code.d].iter().map(|&i| (i, shards[i].clone())).collect();
            prop_assert_eq!(code.decode(payload.len(), &set).unwrap(), Bytes::from(payload));
        }
    }
}
