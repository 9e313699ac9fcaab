//! synod-sim: deterministic simulation and linearizability checking for every registered
//! protocol.
//!
//! The simulator ([`sim`]) runs N replicas of a protocol and a few client sessions in one
//! process on virtual time, driving the unchanged protocol code through the same
//! [`synod_core::Protocol`] trait the tokio runtime uses. Everything random — network
//! delays, losses, partitions, crashes, clock skew, the clients' workload, each replica's
//! RNG — derives from one `u64` seed, so a seed replays a run exactly.
//!
//! Each run is checked three ways: agreement invariants during the run (no two replicas
//! apply different commands at one position, no position applied twice, equal state
//! digests at equal progress), a liveness phase after the faults are healed, and
//! linearizability of the clients' history ([`linearizability`]), which an independent Go
//! oracle (`tools/porcupine`) cross-checks on a saved corpus.

pub mod cli;
pub mod history;
pub mod linearizability;
pub mod sim;

pub use cli::{run_check, CheckArgs};
pub use history::{History, KvOp, KvOutput, Operation};
pub use sim::{run, ClockBounds, Failure, FaultSet, Probe, RunReport, ScriptedChange, ScriptedCut, SimConfig};
