//! Fast Paxos (Lamport, "Fast Paxos", Distributed Computing 19(2), 2006), for a log of
//! slots, on the MultiPaxos core (`crate::multipaxos`). Nezha's most direct competitor
//! (Nezha §8.2: it "suffers the most" from reordering, its collisions fall back to a slow
//! path "even more costly than Multi-Paxos").
//!
//! Reading order, top-down, with the paper's sections:
//! 1. **Classic rounds and leader election** (§2, reused): the MultiPaxos core runs phase 1
//!    once for all slots from its committed prefix with a ballot (the paper's round number
//!    of a coordinator), re-proposes what may have been chosen and fills holes with no-ops.
//!    Classic quorums are majorities.
//! 2. **The fast round** (§3.1, `rounds.rs`): after phase 1 the leader sends phase 2a "any"
//!    ([`FastOpen`](crate::multipaxos::Msg::FastOpen)) for every slot from its next free
//!    one. Clients send each request to every acceptor ([`MulticastPolicy`]); an acceptor
//!    votes it in its next free slot of the open round, persists the vote, and sends its 2b
//!    to the leader — the learner that tallies fast votes. A value is chosen when a fast
//!    quorum of ⌈3n/4⌉ acceptors ([`fast_quorum`]) voted it in the same slot: the leader
//!    commits, executes and answers the client (two message delays), and announces the value
//!    to the other acceptors with a classic 2a (learning a chosen value is always safe), whose
//!    commit marker then commits it everywhere.
//! 3. **Picking a value** (§3.2, `choose.rs`): phase 1 of a later round, and recovery, pick
//!    by the rule O4: among the votes of a quorum Q in the highest round k, if k was fast, a
//!    value v such that some fast quorum R has every acceptor of Q ∩ R voting v in k (it
//!    may have been chosen); otherwise any value voted in k. It is the core's codec hook
//!    that decides a slot from the promises' reports.
//! 4. **Collision recovery** (§3.3, `rounds.rs`): when the votes of one slot differ so that
//!    no value can reach a fast quorum any more (a collision), or a slot stays undecided, the
//!    leader runs *coordinated recovery*: the 2b messages of the fast round, from a classic
//!    quorum, serve as the 1b messages of the next (classic) round of the same leader, so it
//!    picks by O4 and sends a classic 2a at once. Acceptors whose fast vote lost re-propose
//!    its commands in a later slot. A slot that fewer than a classic quorum voted in is
//!    recovered by starting a new round with phase 1 (§3.3's basic recovery).
//! 5. **Quorums** (§3.4/§4, [`fast_quorum`]): any two classic quorums and any classic quorum
//!    with any two fast quorums intersect: majority + 2⌈3n/4⌉ > 2n.
//! 6. **Replies, sessions, durability, snapshots**: the leader answers after execution
//!    (`client.rs`); exactly-once through the session table of the state machine; every vote
//!    is persisted before it leaves; restart, snapshots and compaction are the core's.
//!
//! Per-slot rounds: within the leader's ballot b, the fast round (b, fast) is below the
//! classic round (b, classic) that announces or recovers a slot; phase 1 of a higher ballot
//! closes both. Counters in the status: `fast_path` (slots chosen by a fast quorum),
//! `collisions`, `recoveries` (coordinated), `reproposed` (outvoted commands voted again),
//! `view_changes` (recoveries through a new round).
//!
//! Deviations: one command per fast slot (no batching in fast rounds: a batch is a value
//! acceptors would each form differently); learners other than the leader learn from its
//! announcement, not from the acceptors' 2b messages; no membership changes.

mod choose;
mod client;
mod rounds;

pub use choose::FastChoice;
pub use client::{multicast_policy, FastReplies, MulticastPolicy};
pub(crate) use rounds::Rounds;

use crate::multipaxos::{MultiPaxos, Variant};
use crate::registry::Setup;
use synod_core::Protocol;

/// Fast quorum size for `n` acceptors: ⌈3n/4⌉ (with majority classic quorums, any classic
/// quorum and two fast quorums intersect, §3.4).
pub fn fast_quorum(n: usize) -> usize {
    (3 * n).div_ceil(4)
}

/// Registry constructor.
pub fn build(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
    Ok(Box::new(with_fast_quorum(setup, fast_quorum)?))
}

/// The core with fast rounds whose fast quorum is `fq(n)`.
fn with_fast_quorum(setup: &Setup, fq: fn(usize) -> usize) -> Result<MultiPaxos, String> {
    let mut core = MultiPaxos::with_codec(
        setup,
        Variant::default(),
        "fast-paxos",
        Box::new(FastReplies::default()),
        Box::new(FastChoice { fast_quorum: fq }),
    )?;
    core.fast = Some(Box::new(Rounds::new(fq)));
    Ok(core)
}

/// Deliberately broken variants for the mutation tests (feature `mutants`).
#[cfg(feature = "mutants")]
pub(crate) mod mutants {
    use super::*;

    fn one_short(n: usize) -> usize {
        fast_quorum(n).saturating_sub(1).max(1)
    }

    /// A fast quorum one acceptor too small (3 of 5, 2 of 3): two fast quorums and a
    /// classic one need not intersect, so recovery may pick a value other than one chosen.
    pub fn build_small_fast_quorum(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
        Ok(Box::new(with_fast_quorum(setup, one_short)?))
    }
}

#[cfg(test)]
mod tests;
