//! Layers on the MultiPaxos core: the extension points `crate::multipaxos` calls.
//!
//! A layer changes *when* the core campaigns, *whom* it promises, *what* its leader sends
//! periodically, *what* it writes to the log besides client commands and *how far* the log
//! may be trimmed. It never changes Paxos itself: phase 1, phase 2 and the quorum rules stay
//! the core's, so a layer cannot make MultiPaxos unsafe, only more or less live.
//!
//! The core owns one layer (`Box<dyn MultiPaxosLayer>`); plain MultiPaxos runs with
//! [`NoLayer`], whose every method is the default no-op. HoliPaxos (`crate::holipaxos`) is a
//! layer. The core knows nothing about the layers above it: a layer's messages travel as
//! opaque bytes in `Msg::Layer`, its log entries as opaque bytes in `Value::Layer`, and only
//! the layer decodes them.
//!
//! Hooks that need the core's state get `core: &MultiPaxos`, a read-only view (its
//! `pub(crate)` accessors). Hooks never mutate the core directly: when a layer wants the core
//! to act (propose a log entry, start an election, follow a leader's beat, trim), it returns
//! what it wants and the core does it after the hook, with the layer back in place. So a
//! core action that itself reaches a hook (executing an entry, stepping down) always finds
//! the layer. Hooks may push actions into `ctx` directly (send their own messages, arm their
//! own timers); those are ordered before whatever the core does with the hook's answer.
//!
//! Timers: the core uses timer ids 1 (election), 2 (heartbeat) and 5 (snapshot fetch); every
//! other id belongs to the layer and is handed to [`MultiPaxosLayer::on_timer`].
//!
//! Hooks, in the order of the paper's phases:
//! * request arrival — [`admit`](MultiPaxosLayer::admit) (admission control: IDEM's
//!   acceptance test, Paxos-LBR's rejection at the leader),
//!   [`take_ready`](MultiPaxosLayer::take_ready) (commands the layer wants proposed),
//!   [`on_command_executed`](MultiPaxosLayer::on_command_executed);
//! * election — [`campaign`](MultiPaxosLayer::campaign) (campaign or probe when the election
//!   timer expires), [`on_campaign`](MultiPaxosLayer::on_campaign),
//!   [`on_probe`](MultiPaxosLayer::on_probe), [`screen_prepare`](MultiPaxosLayer::screen_prepare)
//!   (refuse a Prepare before the ballot rules), [`on_phase1_answer`](MultiPaxosLayer::on_phase1_answer),
//!   [`on_nack`](MultiPaxosLayer::on_nack), [`on_become_leader`](MultiPaxosLayer::on_become_leader),
//!   [`on_leadership_lost`](MultiPaxosLayer::on_leadership_lost);
//! * the leader's periodic message — [`heartbeat`](MultiPaxosLayer::heartbeat),
//!   [`heartbeat_penalty`](MultiPaxosLayer::heartbeat_penalty),
//!   [`rejects_stale_leaders`](MultiPaxosLayer::rejects_stale_leaders),
//!   [`on_leader_heard`](MultiPaxosLayer::on_leader_heard), [`on_message`](MultiPaxosLayer::on_message),
//!   [`after_beat`](MultiPaxosLayer::after_beat);
//! * execution — [`on_executed`](MultiPaxosLayer::on_executed), [`on_timer`](MultiPaxosLayer::on_timer);
//! * trimming and snapshots — [`compaction`](MultiPaxosLayer::compaction),
//!   [`snapshot_source`](MultiPaxosLayer::snapshot_source);
//! * the layer's durable state — [`recover_record`](MultiPaxosLayer::recover_record),
//!   [`durable_records`](MultiPaxosLayer::durable_records) (written with
//!   `MultiPaxos::persist_layer`);
//! * observability — [`options`](MultiPaxosLayer::options), [`status`](MultiPaxosLayer::status),
//!   [`describe_message`](MultiPaxosLayer::describe_message),
//!   [`describe_value`](MultiPaxosLayer::describe_value).

pub mod codec;
pub mod lbr;
#[cfg(feature = "mutants")]
pub mod mutants;

use crate::multipaxos::MultiPaxos;
use bytes::Bytes;
use std::collections::BTreeMap;
use synod_core::{Ballot, ClientRef, Command, Ctx, NodeId, RequestMeta, Time, TimerId};

/// What the core does when its election timer expires (and it may campaign).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Campaign {
    /// Run phase 1 with a new ballot.
    Elect,
    /// Send a Prepare with the null ballot instead, which every acceptor rejects without
    /// promising anything: the answers tell the layer whether a quorum is reachable.
    Probe,
}

/// The layer's reading of a rejection (`Nack`) of one of our ballots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NackVerdict {
    /// Remember the rejection's ballot as seen (so our next ballot outbids it), even when
    /// the core would not act on the rejection.
    pub note_ballot: bool,
    /// The rejection dooms our candidacy: a candidate in the rejected ballot gives it up now.
    pub give_up: bool,
}

/// What a layer message asks of the core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerMsg {
    /// Nothing (the layer handled it, or ignored it).
    Handled,
    /// A leader's periodic message in place of the core's heartbeat: follow the leader of
    /// `ballot`, learn that every slot up to `commit_upto` is chosen, raise the trim bound to
    /// `trim_bound`; then the core calls [`MultiPaxosLayer::after_beat`].
    Beat { ballot: Ballot, commit_upto: u64, trim_bound: u64 },
    /// Raise the trim bound (if given) and trim what may be trimmed now.
    Trim(Option<u64>),
}

/// Something a layer's timer asks of the core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayerOp {
    /// Propose this layer entry (it reaches [`MultiPaxosLayer::on_executed`] on every replica
    /// once chosen). Only a leader proposes.
    Propose(Bytes),
    /// Start an election now.
    StartElection,
    /// Raise the trim bound to this slot and trim what may be trimmed now
    /// (`TrimPolicy::Bound`).
    Trim(u64),
}

/// How the core trims its log and compacts its durable image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrimPolicy {
    /// Never trim the log.
    None,
    /// Periodic snapshots (`snapshot_every`, keeping `snapshot_keep` entries), like Raft.
    Snapshot,
    /// Trim up to a bound the layer supplies ([`LayerMsg::Beat`], [`LayerMsg::Trim`]);
    /// the name is reported in the status.
    Bound(&'static str),
}

impl TrimPolicy {
    pub fn name(self) -> &'static str {
        match self {
            TrimPolicy::None => "none",
            TrimPolicy::Snapshot => "snapshot",
            TrimPolicy::Bound(name) => name,
        }
    }
}

/// The layer's compaction settings, read once when the core is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compaction {
    pub trim: TrimPolicy,
    /// Compact the durable image every this many executed entries (0 = never), for the
    /// policies other than `Snapshot` (which has its own schedule).
    pub compact_every: u64,
}

/// The extension points of the MultiPaxos core. Every method has a no-op default: a layer
/// implements only the ones it needs.
pub trait MultiPaxosLayer: Send {
    // ----- configuration ----------------------------------------------------------------

    /// The protocol options this layer accepts (the core rejects any other).
    fn options(&self) -> &'static [&'static str] {
        &[]
    }

    /// How the core trims and compacts (plain MultiPaxos: periodic snapshots).
    fn compaction(&self) -> Compaction {
        Compaction { trim: TrimPolicy::Snapshot, compact_every: 0 }
    }

    // ----- 0. request arrival (admission control) ------------------------------------------

    /// A client request arrived at this replica. `Some` hands it (back) to the core, which
    /// proposes it (leader), holds it (candidate) or redirects the client (follower); `None`:
    /// the layer took it (rejected it with `ctx.answer`, or holds it to propose later through
    /// [`take_ready`](MultiPaxosLayer::take_ready)). Default: the core handles every request.
    fn admit(
        &mut self,
        _core: &MultiPaxos,
        _ctx: &mut Ctx<'_>,
        client: ClientRef,
        cmd: Command,
        _meta: &RequestMeta,
    ) -> Option<(ClientRef, Command)> {
        Some((client, cmd))
    }

    /// Client commands the layer wants proposed now. The core asks after every event while
    /// it leads and proposes them like client requests (nobody waits for them at the core:
    /// the layer answers through [`on_command_executed`](MultiPaxosLayer::on_command_executed)).
    fn take_ready(&mut self) -> Vec<Command> {
        Vec::new()
    }

    /// A client command was executed here (every replica, in log order). `Some(client)`: a
    /// client connected to this replica to answer with the result, if the core has none.
    fn on_command_executed(&mut self, _now: Time, _cmd: &Command) -> Option<ClientRef> {
        None
    }

    // ----- 1. election (phase 1) ---------------------------------------------------------

    /// The election timer of a member expired and it is not leading: campaign or probe.
    fn campaign(&mut self, _quorum: usize) -> Campaign {
        Campaign::Elect
    }

    /// This replica started phase 1 with the new `ballot`.
    fn on_campaign(&mut self, _now: Time, _ballot: Ballot) {}

    /// This replica sent a probe ([`Campaign::Probe`]).
    fn on_probe(&mut self) {}

    /// A Prepare from the member `from` that is not a repeat of the ballot we promised it:
    /// `Some(promised)` refuses it with a `Nack` carrying `promised`, before the core's
    /// ballot rules; `None` lets the core decide.
    fn screen_prepare(&mut self, _core: &MultiPaxos, _now: Time, _from: NodeId, _ballot: Ballot) -> Option<Ballot> {
        None
    }

    /// A phase-1 answer (promise, rejection, or `Behind`) from `from` for `ballot`.
    fn on_phase1_answer(&mut self, _from: NodeId, _ballot: Ballot, _quorum: usize) {}

    /// A member rejected our `ballot`, having promised `promised`.
    fn on_nack(&mut self, _core: &MultiPaxos, _from: NodeId, _ballot: Ballot, _promised: Ballot) -> NackVerdict {
        NackVerdict::default()
    }

    /// Phase 1 succeeded: this replica leads (called after the re-proposals left, before
    /// the first periodic message).
    fn on_become_leader(&mut self, _ctx: &mut Ctx<'_>) {}

    /// This replica was leader and stepped down.
    fn on_leadership_lost(&mut self, _ctx: &mut Ctx<'_>) {}

    // ----- 2. the leader's periodic message and failure detection -------------------------

    /// The leader's periodic message: `Some(bytes)` is broadcast as `Msg::Layer` *instead
    /// of* the core's heartbeat (its receivers' layers answer it with [`LayerMsg::Beat`]).
    fn heartbeat(&mut self, _core: &MultiPaxos) -> Option<Bytes> {
        None
    }

    /// Tell the followers about newly committed slots at once (a heartbeat right after each
    /// commit) instead of on the next Accept or heartbeat: IDEM's COMMIT reaches every replica
    /// within a round trip (§4.3), and its replicas answer clients and stop forwarding only
    /// once they executed a request.
    fn commit_promptly(&self) -> bool {
        false
    }

    /// Multiplier on the heartbeat interval.
    fn heartbeat_penalty(&mut self, _now: Time) -> u32 {
        1
    }

    /// Answer a periodic message from a leader whose ballot is below our promise with a
    /// `Nack` (so it steps down), instead of the baseline's silence.
    fn rejects_stale_leaders(&self) -> bool {
        false
    }

    /// This replica heard from the leader it follows.
    fn on_leader_heard(&mut self) {}

    /// A `Msg::Layer` from `from`.
    fn on_message(&mut self, _core: &MultiPaxos, _ctx: &mut Ctx<'_>, _from: NodeId, _msg: &[u8]) -> LayerMsg {
        LayerMsg::Handled
    }

    /// The core followed, learned from and trimmed by a [`LayerMsg::Beat`] of `from` in
    /// `ballot` (not called when it refused the beat).
    fn after_beat(&mut self, _core: &MultiPaxos, _ctx: &mut Ctx<'_>, _from: NodeId, _ballot: Ballot) {}

    // ----- 3. execution and the layer's own timers ----------------------------------------

    /// The layer entry of `slot` was executed (every replica, in log order, among the
    /// commands around it).
    fn on_executed(&mut self, _core: &MultiPaxos, _ctx: &mut Ctx<'_>, _slot: u64, _entry: &[u8]) {}

    /// A timer the layer armed fired.
    fn on_timer(&mut self, _core: &MultiPaxos, _ctx: &mut Ctx<'_>, _timer: TimerId) -> Option<LayerOp> {
        None
    }

    // ----- 4. trimming and snapshots ------------------------------------------------------

    /// A replica asks for slots this one trimmed (everything below `first`): a peer other
    /// than `requester` and this replica that is known to have executed that far, to fetch
    /// a snapshot from (`None`: this replica).
    fn snapshot_source(&self, _core: &MultiPaxos, _requester: NodeId, _first: u64) -> Option<NodeId> {
        None
    }

    // ----- 5. the layer's own durable state ----------------------------------------------

    /// A record the layer persisted (`MultiPaxos::persist_layer`), replayed in write order at
    /// recovery, before the recovered log is executed. An error makes the replica passive,
    /// like an undecodable core record (its durable state cannot be trusted).
    fn recover_record(&mut self, _record: &[u8]) -> Result<(), String> {
        Ok(())
    }

    /// The layer's live durable state, written into every compacted durable image after the
    /// core's records: layer records persisted earlier and not listed here are dropped by
    /// the compaction (the layer's garbage collection of its durable state).
    fn durable_records(&self) -> Vec<Bytes> {
        Vec::new()
    }

    // ----- observability ------------------------------------------------------------------

    /// Add the layer's entries to the status.
    fn status(&self, _core: &MultiPaxos, _extra: &mut BTreeMap<String, String>) {}

    /// Render a layer message for traces.
    fn describe_message(&self, msg: &[u8]) -> String {
        format!("Layer({} bytes)", msg.len())
    }

    /// Render a layer log entry for traces.
    fn describe_value(&self, entry: &[u8]) -> String {
        format!("Layer({} bytes)", entry.len())
    }
}

/// Plain MultiPaxos: no layer.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoLayer;

impl MultiPaxosLayer for NoLayer {}

#[cfg(test)]
mod tests;
