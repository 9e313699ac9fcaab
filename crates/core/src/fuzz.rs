//! Byte mutations for the fuzz harnesses that run as ordinary tests (stable Rust has no
//! cargo-fuzz): every harness takes real, well-formed inputs (captured peer messages, framed
//! client messages, RESP requests, WAL segments, config files) and feeds the decoder mutated
//! copies. A decoder may refuse or accept a mutated input; it must never panic, hang or
//! allocate what the input merely announces. Budget: `SYNOD_FUZZ_ITERS` (see
//! [`iterations`]); the long runs are recorded in docs/testing.md.

use crate::Rng;
use rand::Rng as _;

/// The iteration budget of a harness: `SYNOD_FUZZ_ITERS` if set, else `default` (the CI
/// budget).
pub fn iterations(default: usize) -> usize {
    std::env::var("SYNOD_FUZZ_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Bytes that sit on boundaries of lengths, signs and encodings.
const BOUNDARY: [u8; 8] = [0x00, 0xff, 0x7f, 0x80, b'\r', b'\n', b'-', b'9'];

/// One mutation of `msg`: truncation, bit flips, a boundary byte, a splice with `other`,
/// inserted random bytes, a duplicated or deleted range, or all random bytes.
pub fn mutate(rng: &mut Rng, msg: &[u8], other: &[u8]) -> Vec<u8> {
    let mut m = msg.to_vec();
    match rng.gen_range(0..8) {
        0 => m.truncate(rng.gen_range(0..=m.len())),
        1 => {
            for _ in 0..rng.gen_range(1..4) {
                if !m.is_empty() {
                    let i = rng.gen_range(0..m.len());
                    m[i] ^= 1 << rng.gen_range(0..8);
                }
            }
        }
        2 => {
            if !m.is_empty() {
                let i = rng.gen_range(0..m.len());
                m[i] = BOUNDARY[rng.gen_range(0..BOUNDARY.len())];
            }
        }
        3 => {
            let cut = rng.gen_range(0..=m.len());
            let from = rng.gen_range(0..=other.len());
            m.truncate(cut);
            m.extend_from_slice(&other[from..]);
        }
        4 => {
            let i = rng.gen_range(0..=m.len());
            let extra: Vec<u8> = (0..rng.gen_range(1..16)).map(|_| rng.gen()).collect();
            m.splice(i..i, extra);
        }
        5 => {
            if !m.is_empty() {
                let a = rng.gen_range(0..m.len());
                let b = rng.gen_range(a..=m.len().min(a + 64));
                let copy = m[a..b].to_vec();
                let at = rng.gen_range(0..=m.len());
                m.splice(at..at, copy);
            }
        }
        6 => {
            if !m.is_empty() {
                let a = rng.gen_range(0..m.len());
                let b = rng.gen_range(a..=m.len().min(a + 64));
                m.drain(a..b);
            }
        }
        _ => m = (0..rng.gen_range(0..64)).map(|_| rng.gen()).collect(),
    }
    m
}

/// Cut `bytes` into chunks of random sizes (1 byte up to all of it), as a stream socket may
/// deliver them.
pub fn chunks<'a>(rng: &mut Rng, bytes: &'a [u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = if rng.gen_bool(0.3) { 1 } else { rng.gen_range(1..=rest.len()) };
        let (a, b) = rest.split_at(n);
        out.push(a);
        rest = b;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_change_inputs_and_chunks_cover_them() {
        let mut rng = crate::rng_from_seed(7);
        let msg = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        let changed = (0..1000).filter(|_| mutate(&mut rng, msg, b"other").as_slice() != msg).count();
        assert!(changed > 900, "only {changed} of 1000 mutations changed the input");
        for _ in 0..100 {
            let parts = chunks(&mut rng, msg);
            assert_eq!(parts.concat(), msg.to_vec());
            assert!(parts.iter().all(|p| !p.is_empty()));
        }
    }
}
