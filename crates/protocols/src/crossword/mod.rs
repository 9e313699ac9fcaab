//! Crossword (Hu et al., "Crossword: Adaptive Consensus for Dynamic Data-Heavy Workloads"):
//! MultiPaxos whose instances are erasure-coded with a per-instance trade-off between the
//! shards each acceptor gets (`c`) and the acceptances that commit (`q`).
//!
//! Crossword is the MultiPaxos core (`crate::multipaxos`: phase 1, phase 2, commit,
//! catch-up, membership, snapshots, WAL) with a payload codec, [`RsCodec`], at the core's
//! extension points (`crate::layers::codec`). Reading order, like the paper:
//! 1. **§3.1 the codeword** — a batch is encoded into `n` Reed–Solomon shards, any
//!    `d = f + 1` of which rebuild it (`synod_core::erasure`);
//! 2. **§3.2 assignments** — balanced round-robin: acceptor `i` gets shards
//!    `i … i+c−1 (mod n)` (`codec.rs`);
//! 3. **§3.3 availability** — C1 `q ≥ f + 1` and C4 `q + c ≥ n + 1`; the candidates are the
//!    boundary `q + c = n + 1` (`synod_core::erasure::boundary_configs`; C2 ⟺ C4 is tested
//!    there by enumeration for n = 3…9);
//! 4. **§3.4/§4.1 the configuration chooser** (`chooser.rs`) — per-follower linear models
//!    of response time against payload size, the fastest estimated quorum completion;
//!    `config=<c>` fixes the configuration instead (the ablation), `config=rotate` cycles
//!    through all of them (checks);
//! 5. **§3.5/§4.2 follower gossip** — a follower that knows a slot is committed but holds
//!    fewer than `d` shards asks the peers assigned the missing ones, batched per cycle,
//!    after a deferral gap (`gossip_gap`, default 400 KB) (`multipaxos/fill.rs` drives it,
//!    `codec.rs` plans it);
//! 6. **§3.6 leader failover** — phase 1 pools the shards of the highest-ballot payload
//!    reported by the promises; with `d` it is rebuilt and re-proposed, with fewer it cannot
//!    have been chosen (ap′); committed slots the new leader holds in part are rebuilt from
//!    its peers before it executes them (fc′/fr′).
//!
//! Shards are what acceptors persist (`Record::Accept` with a `Value::Coded` piece);
//! snapshots, compaction and restart from the WAL are the core's.
//!
//! 7. **§5.4 unbalanced assignments** (`assign=unbalanced`) — the chooser gives each
//!    follower its own shard count (consecutive arcs, `erasure::Assignment::unbalanced`),
//!    growing the counts of the weakest sets until C2 holds by enumeration, per quorum size,
//!    and keeps the fastest estimate (`Chooser::choose_unbalanced`).
//!
//! Not yet: heartbeat replies as zero-size samples (only Accept rounds feed the models).

mod chooser;
mod codec;

pub use chooser::{Chooser, Model};
pub use codec::{Mode, RsCodec, Scheme, DEFAULT_GAP};

use crate::layers::NoLayer;
use crate::multipaxos::{MultiPaxos, Variant};
use crate::registry::Setup;
use synod_core::{Protocol, ProtocolParams};

/// `config` (adaptive | rotate | c), `gossip_gap` (bytes, or `off`: only once the log stops
/// growing) and `assign` (balanced | unbalanced: §5.4, per-follower shard counts, chosen by
/// the models or, with `config=rotate`, cycled through for the checks).
pub(crate) fn parse(params: &ProtocolParams) -> Result<(Mode, usize, bool), String> {
    let mode = match params.options.get("config").map(String::as_str) {
        None | Some("adaptive") => Mode::Adaptive,
        Some("rotate") => Mode::Rotate,
        Some(c) => Mode::Fixed(
            c.parse()
                .ok()
                .filter(|c| *c >= 1)
                .ok_or_else(|| format!("option config: expected adaptive, rotate or a shard count ≥ 1, got {c:?}"))?,
        ),
    };
    let gap = match params.options.get("gossip_gap").map(String::as_str) {
        None => DEFAULT_GAP,
        // Never while the log grows: followers complete slots only once it stops (RSPaxos
        // as the paper runs it, "no gossiping"; the leader holds every value).
        Some("off") => usize::MAX,
        Some(g) => g.parse().map_err(|_| format!("option gossip_gap: expected bytes, got {g:?}"))?,
    };
    let unbalanced = match params.options.get("assign").map(String::as_str) {
        None | Some("balanced") => false,
        Some("unbalanced") if matches!(mode, Mode::Fixed(_)) => {
            return Err("option assign=unbalanced needs config=adaptive or config=rotate".into())
        }
        Some("unbalanced") => true,
        Some(a) => return Err(format!("option assign: expected balanced or unbalanced, got {a:?}")),
    };
    Ok((mode, gap, unbalanced))
}

/// Registry constructor.
pub fn build(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
    let (mode, gap, unbalanced) = parse(&setup.params)?;
    let codec = RsCodec::new(Scheme::Crossword, mode, gap);
    let codec = Box::new(if unbalanced { codec.with_unbalanced() } else { codec });
    Ok(Box::new(MultiPaxos::with_codec(setup, Variant::default(), "crossword", Box::new(NoLayer), codec)?))
}

/// Deliberately broken Crossword for the mutation tests (feature `mutants`).
#[cfg(feature = "mutants")]
pub(crate) mod mutants {
    use super::*;

    /// One shard per acceptor committed with `n − 1` acceptances (`q + c = n`, violating C4;
    /// C1 holds): for n = 5 that is RSPaxos's commit quorum with Crossword's majority phase
    /// 1 — the paper's Fig. 2. After the leader fails, the majority that elects the next one
    /// may hold fewer than `d` shards of a committed value, which is then lost.
    pub fn build_short_quorum(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
        let (_, gap, _) = parse(&setup.params)?;
        let codec = Box::new(RsCodec::new(Scheme::Crossword, Mode::Fixed(1), gap).with_short_quorum());
        Ok(Box::new(MultiPaxos::with_codec(
            setup,
            Variant::default(),
            "crossword-short-quorum",
            Box::new(NoLayer),
            codec,
        )?))
    }
}

#[cfg(test)]
mod tests;
