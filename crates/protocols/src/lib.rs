//! The replication protocols of synod, and the one registry that names them.
//!
//! Each protocol lives in its own folder and reads top-down like its paper. Drivers (the
//! runtime, the simulator, the CLI) never `match` on protocol names: they look a protocol up
//! here and call its constructor.

pub mod multipaxos;
pub mod registry;

pub use registry::{find, names, ProtocolInfo, Setup};
