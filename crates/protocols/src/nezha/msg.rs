//! Nezha's messages (§5.2) and durable records.

use serde::{Deserialize, Serialize};
use synod_core::Command;

/// A request's place in the deadline order: `(deadline, client-id, request-id)` (§5.2's
/// *log-id* triple, ordered deadline first so logs sort by deadline, ties broken by ids).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LogId {
    /// Nanoseconds on the synchronized clock.
    pub deadline: u64,
    pub client: u64,
    pub seq: u64,
}

impl LogId {
    pub fn of(deadline: u64, cmd: &Command) -> LogId {
        LogId { deadline, client: cmd.client, seq: cmd.seq }
    }
    /// The request's identity without its deadline (the late-buffer key, §5.1).
    pub fn req(&self) -> ReqId {
        (self.client, self.seq)
    }
}

/// `<client-id, request-id>`.
pub type ReqId = (u64, u64);

/// A log entry: the request and the deadline it has in this log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub deadline: u64,
    pub cmd: Command,
}

impl Entry {
    pub fn id(&self) -> LogId {
        LogId::of(self.deadline, &self.cmd)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Msg {
    /// DOM multicast of a client request by the replica that received it (a plain client
    /// talks to one replica; that replica acts as the request's proxy, §4).
    Request { deadline: u64, cmd: Command },
    /// §5.2 *log-modification*, batched: the leader's log-ids at positions `start..`, and
    /// its commit-point (§5.4, §7.3) and the position every replica has synced (the trim
    /// bound). Each log-id comes with the digest of the command
    /// ([`super::hash::cmd_digest`]). Doubles as the leader's heartbeat (empty `ids`).
    LogMod { view: u64, start: u64, ids: Vec<(LogId, u64)>, commit: u64, stable: u64 },
    /// A follower asks the leader for the entries from `from` on (requests it holds in no
    /// buffer: "the follower fetches it from other replicas", §5.4).
    Fetch { view: u64, from: u64 },
    /// The leader's entries from `start` on, with the commands.
    Entries { view: u64, start: u64, entries: Vec<Entry>, commit: u64 },
    /// §5.2 *log-status*: a follower's sync-point.
    LogStatus { view: u64, sync_point: u64 },
    /// §6: a replica suspects the leader of `view - 1` (or earlier) and moves to `view`.
    /// `committed`: the sender's log is committed up to here (§7.3: a view change moves
    /// only the log after the commit-point; from the view's leader it tells the others from
    /// where to send their logs, from the others where the leader's StartView may start).
    ViewChange { view: u64, committed: u64 },
    /// §6: a replica's state for the new leader of `view`.
    /// `log` holds the entries after `base` (synced ones first, then released ones): `base`
    /// is the sender's commit-point (or the new leader's, if lower), at least its trim point
    /// `trim`; the log up to `base` is committed (§7.3).
    DoViewChange { view: u64, last_normal: u64, sync_point: u64, commit: u64, base: u64, trim: u64, log: Vec<Entry> },
    /// §6: the new leader's recovered log after `base` (the receiver's commit-point, or the
    /// leader's trim point); followers replace theirs with it.
    StartView { view: u64, base: u64, log: Vec<Entry>, commit: u64 },
    /// A replica heard a leader of a view it has not started: it asks for its StartView
    /// (from its commit-point `committed` on).
    NeedView { view: u64, committed: u64 },
}

/// Durable records (the disk-based mode of §8.8: persisted before the replica answers).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Record {
    /// The replica moved to `view`; `last_normal` is the last view in which it was NORMAL.
    View { view: u64, last_normal: u64 },
    /// Entry at `index` of the log synced with the leader of the current view (the entries
    /// from `index` on are replaced).
    Synced { index: u64, entry: Entry },
    /// A new view's log (StartView): the entries after `base` (every replica has the log up
    /// to `base`: it is committed and was synced everywhere).
    Log { view: u64, base: u64, entries: Vec<Entry> },
    /// A snapshot: the state machine after `index` log entries; the log is kept from
    /// `base + 1` on (`base <= index`: entries after the trim bound stay for the peers).
    Snapshot { index: u64, base: u64, trimmed: super::hash::SetHash, data: bytes::Bytes },
    /// A follower released a request from its early-buffer (persisted before its fast-reply
    /// vouches for it: a fast commit counts on it surviving a restart).
    Released { entry: Entry },
}
