//! RSPaxos (Mu et al., "Minimizing the Latency of Consistent Reads… RS-Paxos", HPDC 2014;
//! the fixed-configuration baseline of the Crossword paper, §2 and Fig. 3(b)).
//!
//! MultiPaxos with Crossword's erasure-coding codec fixed at one shard per acceptor
//! (`c = 1`, `d = f + 1` data shards). Since `c = 1` violates Crossword's C4 for `n ≥ 5`,
//! RSPaxos buys safety with larger quorums instead: commit after `q = ⌈(n + d)/2⌉`
//! acceptances and elect a leader with `n + d − q` promises, so that every electing set
//! meets every committing set in `d` acceptors, whose `d` distinct shards rebuild the value.
//! The price is availability: `n = 5` gives `q = 4` (one failure tolerated instead of two),
//! `n = 3` gives `q = 3` (no failure tolerated by commits; two promises elect).
//!
//! RSPaxos has no follower gossip: a follower, whose one shard cannot be executed, fetches
//! the data shards of committed slots from the leader off the critical path (after the same
//! deferral gap as Crossword, option `gossip_gap`); a new leader rebuilds every slot from the
//! shards its promises carry. In the simulator the reduced tolerance stalls commits while
//! more than `n − q` replicas are down during the fault phase; the liveness phase heals
//! every fault, so the checks require progress exactly where RSPaxos promises it.

use crate::crossword::{parse, RsCodec, Scheme};
use crate::layers::NoLayer;
use crate::multipaxos::{MultiPaxos, Variant};
use crate::registry::Setup;
use synod_core::Protocol;

/// Registry constructor (`config` is ignored: RSPaxos is always `c = 1`, balanced).
pub fn build(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
    let (mode, gap, unbalanced) = parse(&setup.params)?;
    if unbalanced {
        return Err("rspaxos: option assign=unbalanced is Crossword's (RSPaxos gives one shard each)".into());
    }
    let codec = Box::new(RsCodec::new(Scheme::RsPaxos, mode, gap));
    Ok(Box::new(MultiPaxos::with_codec(setup, Variant::default(), "rspaxos", Box::new(NoLayer), codec)?))
}

/// Failures RSPaxos tolerates with `n` replicas: `n − q` with `q = ⌈(n + d)/2⌉`, `d = f + 1`
/// (`n = 3`: 0, `n = 5`: 1, `n = 7`: 1).
pub fn tolerates(n: usize) -> usize {
    let d = n.saturating_sub(1) / 2 + 1;
    n.saturating_sub((n + d).div_ceil(2))
}

#[cfg(test)]
mod tests {
    #[test]
    fn tolerance_follows_the_larger_quorum() {
        assert_eq!([3, 5, 7, 9].map(super::tolerates), [0, 1, 1, 2]);
    }
}
