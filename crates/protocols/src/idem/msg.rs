//! IDEM's messages between replicas (§4.3, §5.2). They travel inside the MultiPaxos core's
//! `Msg::Layer`; agreement itself (the paper's PROPOSE / COMMIT) is the core's phase 2.

use crate::admission::{ReqId, VerdictRecord};
use serde::{Deserialize, Serialize};
use synod_core::Command;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum IdemMsg {
    /// A request a client sent to this replica only, handed to the others as if the client had
    /// multicast it: each receiver runs its own acceptance test on it (§4.2 assumes clients
    /// send every request to all replicas; option `relay`).
    Relay { cmd: Command },
    /// ⟨REQUIRE, id⟩: the sender accepted the request and asks the leader to order it (§4.3).
    Require { id: ReqId },
    /// A forwarded request (§5.2): the sender accepted it and it was not executed within the
    /// forward delay. The receiver accepts it whatever its own load or earlier verdict.
    Forward { cmd: Command },
    /// ⟨FETCH, id⟩: the leader lacks the body of a request it has enough REQUIREs for (§5.2).
    Fetch { id: ReqId },
    /// The answer to a FETCH: the request's body (stored, not accepted).
    Body { cmd: Command },
}

/// IDEM's durable records (`Record::Layer` of the MultiPaxos core).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum IdemRecord {
    /// This replica's verdict on a request (sticky across restarts: `admission::Verdicts`).
    Verdict(VerdictRecord),
}
