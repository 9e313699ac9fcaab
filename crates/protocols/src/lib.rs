//! The replication protocols of synod, and the one registry that names them.
//!
//! Each protocol lives in its own folder and reads top-down like its paper. Drivers (the
//! runtime, the simulator, the CLI) never `match` on protocol names: they look a protocol up
//! here and call its constructor.

pub mod admission;
pub mod admit;
pub mod chain;
pub mod crossword;
pub mod epaxos;
pub mod fastpaxos;
pub mod holipaxos;
pub mod idem;
pub mod layers;
pub mod mencius;
pub mod multipaxos;
pub mod nezha;
pub mod raft;
pub mod registry;
pub mod rspaxos;

#[cfg(test)]
mod testnet;

#[cfg(test)]
mod decode_tests;

#[cfg(test)]
mod registry_tests;

/// Deliberately broken protocol variants, for the mutation tests that prove the checkers can
/// fail. Only builds with the `mutants` feature have them (the test builds of synod-sim and
/// synod, whose nemesis test runs one as real replicas); a release build never does.
#[cfg(feature = "mutants")]
pub mod mutants {
    use crate::registry::ProtocolInfo;
    use synod_core::client_policy::{home_policy, leader_policy};
    use synod_core::session::Order;

    static MUTANTS: &[ProtocolInfo] = &[
        ProtocolInfo {
            name: "multipaxos-bad-quorum",
            description: "MultiPaxos committing with n/2 replies (non-intersecting quorums)",
            client: leader_policy,
            order: Order::Total,
            tolerates: crate::registry::minority,
            build: crate::multipaxos::mutants::build_bad_quorum,
        },
        ProtocolInfo {
            name: "raft-no-log-check",
            description: "Raft granting votes without the up-to-date log check (§5.4.1)",
            client: leader_policy,
            order: Order::Total,
            tolerates: crate::registry::minority,
            build: crate::raft::build_no_log_check,
        },
        ProtocolInfo {
            name: "craft-majority-quorum",
            description: "CRaft committing coded entries on a majority (q + c = f + 2 < n + 1): a new leader finds fewer than d shards of a committed entry and drops it",
            client: leader_policy,
            order: Order::Total,
            tolerates: crate::raft::craft_tolerates,
            build: crate::raft::build_craft_majority,
        },
        ProtocolInfo {
            name: "mencius-revoke-without-prepare",
            description:
                "Mencius revoking a suspect's slots with no-ops without phase 1 (may overwrite a chosen value)",
            client: home_policy,
            order: Order::Total,
            tolerates: crate::registry::minority,
            build: crate::mencius::mutants::build_revoke_without_prepare,
        },
        ProtocolInfo {
            name: "multipaxos-volatile-accepts",
            description: "MultiPaxos whose followers acknowledge Accepts without persisting them (caught by whole-cluster crashes)",
            client: leader_policy,
            order: Order::Total,
            tolerates: crate::registry::minority,
            build: crate::multipaxos::mutants::build_volatile_accepts,
        },
        ProtocolInfo {
            name: "multipaxos-lease-unchecked",
            description: "MultiPaxos with read leases whose leader answers reads locally without checking that its lease is still valid (a deposed leader serves stale reads)",
            client: leader_policy,
            order: Order::Total,
            tolerates: crate::registry::minority,
            build: crate::multipaxos::mutants::build_lease_unchecked,
        },
        ProtocolInfo {
            name: "raft-lease-unchecked",
            description: "Raft with read leases whose leader answers reads locally without checking that its lease is still valid (a deposed leader serves stale reads)",
            client: leader_policy,
            order: Order::Total,
            tolerates: crate::registry::minority,
            build: crate::raft::build_lease_unchecked,
        },
        ProtocolInfo {
            name: "holipaxos-eager-commit",
            description: "HoliPaxos whose followers take a control message as committing every slot they accepted in its ballot (a mutant layer wrapping the HoliPaxos layer)",
            client: leader_policy,
            order: Order::Total,
            tolerates: crate::registry::minority,
            build: crate::holipaxos::mutants::build_eager_commit,
        },
        ProtocolInfo {
            name: "multipaxos-early-exec",
            description: "MultiPaxos whose followers execute accepted, not yet chosen, values",
            client: leader_policy,
            order: Order::Total,
            tolerates: crate::registry::minority,
            build: crate::multipaxos::mutants::build_early_exec,
        },
        ProtocolInfo {
            name: "epaxos-small-fast-quorum",
            description: "EPaxos with a fast quorum one replica too small (for 3 replicas the leader commits alone; for 5, 2 of 5 with the TryPreAccept recovery)",
            client: home_policy,
            order: Order::Partial,
            tolerates: crate::registry::minority,
            build: crate::epaxos::mutants::build_small_fast_quorum,
        },
        ProtocolInfo {
            name: "crossword-short-quorum",
            description: "Crossword committing with q - 1 acceptances (q + c = n, violating C4): caught when f servers crash after a commit",
            client: leader_policy,
            order: Order::Total,
            tolerates: crate::registry::minority,
            build: crate::crossword::mutants::build_short_quorum,
        },
        ProtocolInfo {
            name: "nezha-small-quorum",
            description: "Nezha whose leader fixes the commit-point from f sync-points (its own included), one short of f + 1",
            client: home_policy,
            order: Order::Total,
            tolerates: crate::registry::minority,
            build: crate::nezha::mutants::build_small_quorum,
        },
        ProtocolInfo {
            name: "nezha-small-super-quorum",
            description: "Nezha whose proxy commits on the fast path with f + ceil(f/2) matching replies, one short of the super quorum",
            client: crate::nezha::proxy::policy_small_super_quorum,
            order: Order::Total,
            tolerates: crate::registry::minority,
            build: crate::nezha::build,
        },
        ProtocolInfo {
            name: "fast-paxos-small-fast-quorum",
            description: "Fast Paxos with a fast quorum one acceptor too small (2 of 3, 3 of 5): a recovery may pick another value than the one chosen fast",
            client: crate::fastpaxos::multicast_policy,
            order: Order::Total,
            tolerates: crate::registry::minority,
            build: crate::fastpaxos::mutants::build_small_fast_quorum,
        },
        ProtocolInfo {
            name: "idem-sticky-off",
            description: "IDEM whose replicas re-run the acceptance test on a retransmission of a request they rejected (non-sticky rejection: a request its client saw rejected by every replica can execute); reject_threshold=2 unless given",
            client: crate::idem::policy::client,
            order: Order::Total,
            tolerates: crate::registry::minority,
            build: crate::idem::mutants::build_forget_rejections,
        },
        ProtocolInfo {
            name: "idem-require-f",
            description: "IDEM whose leader proposes a request after f REQUIREs instead of f + 1 (caught by the simulator's ghost check that only requests a majority accepted are ordered, IDEM §4.3); reject_threshold=2 unless given",
            client: crate::idem::policy::client,
            order: Order::Total,
            tolerates: crate::registry::minority,
            build: crate::idem::mutants::build_require_f,
        },
        ProtocolInfo {
            name: "idem-gc-early",
            description: "IDEM whose implicit garbage collection drops an instance one too early (window n x RT - 1; caught by the simulator's ghost check of Theorem 6.1's rule, IDEM §4.4); reject_threshold=2 unless given",
            client: crate::idem::policy::client,
            order: Order::Total,
            tolerates: crate::registry::minority,
            build: crate::idem::mutants::build_gc_early,
        },
        ProtocolInfo {
            name: "chain-head-answers",
            description: "Chain Replication whose head applies and answers an update as soon as it logged it, before the tail has it (a removed head loses acknowledged updates)",
            client: crate::chain::policy::client,
            order: Order::Total,
            tolerates: crate::registry::minority,
            build: crate::chain::mutants::build_head_answers,
        },
        ProtocolInfo {
            name: "chain-lease-unchecked",
            description: "Chain Replication whose tail answers queries without a valid lease (a deposed, partitioned tail serves stale reads)",
            client: crate::chain::policy::client,
            order: Order::Total,
            tolerates: crate::registry::minority,
            build: crate::chain::mutants::build_lease_unchecked,
        },
    ];

    pub fn all() -> &'static [ProtocolInfo] {
        MUTANTS
    }
}

pub use registry::{find, names, ProtocolInfo, Setup};
