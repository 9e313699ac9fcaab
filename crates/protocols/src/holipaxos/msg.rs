//! HoliPaxos's own messages and log entries. The MultiPaxos core carries them as opaque
//! bytes (`Msg::Layer`, `Value::Layer`); only this layer decodes them.

use serde::{Deserialize, Serialize};
use synod_core::{Ballot, NodeId};

/// HoliPaxos messages (inside `crate::multipaxos::Msg::Layer`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HoliMsg {
    /// The single control message (§3.4), in place of MultiPaxos's heartbeat: the leader's
    /// ballot (failure detector), its last executed index `le` (a batch commit marker) and
    /// `gle` (the trim bound).
    Control { ballot: Ballot, le: u64, gle: u64 },
    /// A follower's answer to `Control`: its last executed index.
    ControlAck { ballot: Ballot, le: u64 },
}

/// Markers written to the log (§3.2), inside `crate::multipaxos::Value::Layer`: ordered like
/// any value, never applied to the state machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Marker {
    /// Overload declaration: `leader`, leading in `ballot`, found itself slow at `at_ms`
    /// (its clock), with its in-flight variance at that point (ops²). Followers whose last
    /// successful leader it is start one election.
    Overload { leader: NodeId, ballot: Ballot, at_ms: u64, variance: u64 },
    /// The overload declared in slot `slot` was remedied by a leader change.
    Remedied { slot: u64 },
}
