//! 4b. **Completing committed slots held only in part** (Crossword §3.5 and §4.2, follower
//! gossiping; RSPaxos's fetch of the full value).
//!
//! With an erasure-coding codec an acceptor holds only its shards of a value, and a slot it
//! knows is committed cannot be executed until it holds `d` of them. Once per heartbeat
//! interval (the paper's ~20 ms gossip cycle) a replica whose execution is stopped at such a
//! slot asks its peers for the missing parts of every committed slot it holds in part — one
//! batched `FillReq` per peer, planned by the codec (Crossword: the followers whose assigned
//! shards cover the gap, the leader last; RSPaxos: the leader) — and pools what comes back
//! (`Fill`) with its own piece. A follower leaves the last `deferral_gap` bytes of payload at
//! the end of its log alone (they are likely still on their way from the leader) unless the
//! log stopped growing; a leader never defers (after a failover it rebuilds synchronously,
//! §3.5's fc′/fr′). A peer is sent one request at a time: while its answer is outstanding
//! it is not asked again (the same slots would be answered twice) until `RESEND_AFTER`
//! cycles passed (a lost request or answer). Without that rule a peer whose answers took
//! longer than a cycle — behind a shaped NIC, 8 MB of shards take 2 s at 31.25 Mbit/s — was
//! asked again every cycle, each answer queued behind the last, the answerer's NIC filled
//! with copies and the Accepts and heartbeats behind them starved: the shaped Fig. 6 runs
//! stalled at 0 ops/s with every NIC at its cap, and RSPaxos, whose followers all fetch from
//! the leader, lost its leader again and again. Answers are also kept small
//! (`FILL_BYTES`), so what one answer puts ahead of an Accept is bounded. Peers that left a
//! request unanswered for 10 cycles are asked last; a slot that stays incomplete for many
//! cycles (every peer trimmed it) is left to a snapshot. Pooled parts stay in memory; the
//! durable record keeps what this acceptor accepted.
//!
//! With the full-copy codec every held value is executable and none of this runs.

use super::*;

/// Payload bytes asked for in one fetch cycle, and answered in one `Fill` (at least one
/// slot): 256 KB is 64 ms of a 31.25 Mbit/s NIC, so four askers' answers stay well inside an
/// election timeout, and still 64 MB/s per peer on a 4 ms round trip.
const FILL_BYTES: usize = 256 << 10;
/// A peer whose request stayed unanswered this many cycles is asked last (§4.2).
const SILENT_AFTER: u32 = 10;
/// A request unanswered this many cycles is sent again (it or its answer was lost).
const RESEND_AFTER: u32 = 16;
/// Fetch cycles a slot may stay incomplete before the replica takes a snapshot instead.
const SNAPSHOT_AFTER: u32 = 40;

impl MultiPaxos {
    /// One fetch cycle (at most one per heartbeat interval): ask peers for the missing parts
    /// of the committed slots held in part.
    pub(super) fn fill(&mut self, ctx: &mut Ctx<'_>) {
        let last = self.log.last_index();
        if last != self.filling.last.0 {
            self.filling.last = (last, ctx.now);
        }
        let first = self.log.exec_next();
        let upto = self.log.committed_prefix();
        if upto < first || ctx.now < self.filling.next_at {
            return;
        }
        // Execution stops only at an incomplete committed slot: nothing to do otherwise.
        match self.log.get(first) {
            Some(s) if !self.codec.complete(&s.value.value) => {}
            _ => return,
        }
        let cycle = self.params.heartbeat();
        self.filling.next_at = ctx.now + cycle;
        self.filling.stuck = match self.filling.stuck {
            (slot, round) if slot == first => (slot, round + 1),
            _ => (first, 0),
        };
        let round = self.filling.stuck.1;
        if round >= SNAPSHOT_AFTER {
            // Peers no longer hold the slot (trimmed after executing it): a snapshot does.
            // Only followers install snapshots: a leader steps down first.
            if self.role == Role::Leader {
                self.step_down(ctx, None);
            }
            if self.role == Role::Follower {
                self.request_snapshot(ctx, None);
            }
            return;
        }
        // The deferral gap: skip the last `gap` bytes of payload at the end of the log,
        // unless it stopped growing (else the tail would never execute here).
        let idle = ctx.now.since(self.filling.last.1) >= cycle * 5;
        let gap = if self.role == Role::Leader || idle { 0 } else { self.codec.deferral_gap() };
        let mut limit = upto;
        if gap > 0 {
            let mut tail = 0;
            let mut slot = last;
            while slot >= first && tail < gap {
                tail += self.log.get(slot).map_or(0, |s| self.codec.payload_bytes(&s.value.value));
                slot -= 1;
            }
            limit = limit.min(slot);
        }
        let now = ctx.now;
        let silent =
            |p: NodeId| self.filling.asked.get(&p).is_some_and(|(since, _)| now >= *since + cycle * SILENT_AFTER);
        let mut asks: BTreeMap<NodeId, Vec<(u64, Vec<u16>)>> = BTreeMap::new();
        let mut bytes = 0;
        let mut slots = 0;
        for (slot, s) in self.log.range(first, limit) {
            if s.state == SlotState::InProgress || self.codec.complete(&s.value.value) {
                continue;
            }
            for ask in self.codec.fill_plan(&s.value.value, &self.members, self.id, self.leader, round, &silent) {
                asks.entry(ask.peer).or_default().push((slot, ask.parts));
            }
            bytes += self.codec.payload_bytes(&s.value.value);
            slots += 1;
            if bytes >= FILL_BYTES || slots >= self.params.catchup_chunk.max(1) {
                break;
            }
        }
        for (peer, asks) in asks {
            if peer == self.id {
                continue;
            }
            // One request at a time per peer: its answer is on its way (or lost).
            match self.filling.asked.get_mut(&peer) {
                Some((_, last)) if now < *last + cycle * RESEND_AFTER => continue,
                Some((_, last)) => *last = now,
                None => {
                    self.filling.asked.insert(peer, (now, now));
                }
            }
            ctx.send(peer, &Msg::FillReq { asks });
        }
    }

    /// A peer asks for parts of slots: send what we hold of them.
    pub(super) fn on_fill_req(&mut self, ctx: &mut Ctx<'_>, from: NodeId, asks: Vec<(u64, Vec<u16>)>) {
        if asks.iter().any(|(slot, _)| *slot < self.log.first_index()) {
            // Executed and trimmed here: only a snapshot brings the asker past it.
            ctx.send(from, &Msg::Trimmed { first: self.log.first_index(), source: Some(self.id) });
        }
        let mut pieces = Vec::new();
        let mut bytes = 0;
        for (slot, parts) in asks {
            let Some(s) = self.log.get(slot) else { continue };
            if let Some(piece) = self.codec.share(&s.value.value, &parts) {
                bytes += self.codec.payload_bytes(&piece);
                pieces.push((slot, piece));
            }
            if bytes >= FILL_BYTES {
                break;
            }
        }
        // An empty answer still tells the asker we are alive.
        ctx.send(from, &Msg::Fill { pieces });
    }

    /// Parts of slots we asked for: pool them with what we hold of the same payload, and
    /// execute what became complete.
    pub(super) fn on_fill(&mut self, ctx: &mut Ctx<'_>, from: NodeId, pieces: Vec<(u64, Value)>) {
        self.filling.asked.remove(&from);
        let mut completed = false;
        for (slot, piece) in pieces {
            let Some(s) = self.log.get(slot) else { continue };
            if s.state != SlotState::Committed || self.codec.complete(&s.value.value) {
                continue;
            }
            // Only parts of the payload we know is chosen (pool refuses anything else).
            if let Some(pooled) = self.codec.pool(&s.value.value, &piece) {
                completed |= self.codec.complete(&pooled);
                if let Some(s) = self.log.get_mut(slot) {
                    s.value.value = pooled;
                }
            }
        }
        if completed {
            self.execute(ctx);
            // More may be waiting: the next cycle may run at once.
            self.filling.next_at = Time::ZERO;
            self.fill(ctx);
        }
    }
}
