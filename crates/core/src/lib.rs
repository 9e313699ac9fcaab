//! synod-core: the protocol interface and the building blocks every protocol shares.
//!
//! A protocol is a deterministic, IO-free state machine (see [`protocol::Protocol`]): it is
//! handed [`protocol::Event`]s together with the current time and a seeded RNG in a
//! [`protocol::Ctx`], and answers with [`protocol::Action`]s. The tokio runtime and the
//! deterministic simulator both drive the very same protocol code through this interface.
//! See `docs/design.md` for how each protocol of the papers maps onto it.

pub mod ballot;
pub mod batch;
pub mod bounded_serde;
pub mod client_policy;
pub mod erasure;
pub mod fuzz;
pub mod kv;
pub mod lease;
pub mod log;
pub mod params;
pub mod protocol;
pub mod quorum;
pub mod session;
pub mod snapshot;
pub mod speculation;
pub mod time;
pub mod wire;

pub use ballot::Ballot;
pub use client_policy::{ClientAction, ClientConfig, ClientCtx, ClientPolicy, Outcome, RequestMeta, RetryTimes};
pub use kv::{Command, Op, OpResult};
pub use params::{Limits, ProtocolParams};
pub use protocol::{
    Action, ClientRef, Ctx, Event, Ghost, MemberChange, MemberInfo, NodeId, Pos, Protocol, Reply, ReplyBody, Role,
    SpeculativeReply, Status, TimerId,
};
pub use time::Time;

/// The seeded random number generator handed to protocols. ChaCha8 is portable and stable
/// across platforms and crate versions, so a seed reproduces the same run everywhere.
pub type Rng = rand_chacha::ChaCha8Rng;

/// Build the RNG for a seed.
pub fn rng_from_seed(seed: u64) -> Rng {
    use rand::SeedableRng;
    Rng::seed_from_u64(seed)
}
