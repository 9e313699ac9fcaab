//! The layer interface with a layer other than HoliPaxos: entries a layer proposes from its
//! own timer are ordered in the log like commands, reach the layer on every replica at the
//! same slot, and never reach the state machine.

use super::*;
use crate::multipaxos::Variant;
use crate::registry::Setup;
use crate::testnet::{put, Net, DONE};
use std::time::Duration;
use synod_core::{Protocol, Role};

const TIMER_TICK: TimerId = 7;
const TICKS: u8 = 3;

/// Proposes one entry per tick of its own timer while leading (`TICKS` in all, numbered),
/// and records where each entry was executed.
#[derive(Default)]
struct Ticker {
    proposed: u8,
    executed: Vec<(u64, Vec<u8>)>,
}

impl MultiPaxosLayer for Ticker {
    fn on_become_leader(&mut self, ctx: &mut Ctx<'_>) {
        ctx.set_timer(TIMER_TICK, Duration::from_millis(30));
    }

    fn on_leadership_lost(&mut self, ctx: &mut Ctx<'_>) {
        ctx.cancel_timer(TIMER_TICK);
    }

    fn on_timer(&mut self, core: &MultiPaxos, ctx: &mut Ctx<'_>, timer: TimerId) -> Option<LayerOp> {
        if timer != TIMER_TICK || core.role() != Role::Leader || self.proposed == TICKS {
            return None;
        }
        self.proposed += 1;
        ctx.set_timer(TIMER_TICK, Duration::from_millis(30));
        Some(LayerOp::Propose(Bytes::from(vec![self.proposed])))
    }

    fn on_executed(&mut self, _core: &MultiPaxos, _ctx: &mut Ctx<'_>, slot: u64, entry: &[u8]) {
        self.executed.push((slot, entry.to_vec()));
    }

    fn status(&self, _core: &MultiPaxos, extra: &mut BTreeMap<String, String>) {
        let list = |f: fn(&(u64, Vec<u8>)) -> String| self.executed.iter().map(f).collect::<Vec<_>>().join(",");
        extra.insert("ticker_slots".into(), list(|(slot, _)| slot.to_string()));
        extra.insert("ticker_entries".into(), list(|(_, e)| format!("{e:?}")));
    }
}

fn build(setup: &Setup) -> Result<Box<dyn Protocol>, String> {
    Ok(Box::new(MultiPaxos::with_layer(setup, Variant::default(), "ticker", Box::<Ticker>::default())?))
}

#[test]
fn layer_entries_are_ordered_with_commands_and_reach_every_replica_at_the_same_slot() {
    let mut net = Net::new(3, build);
    net.run_for(Duration::from_secs(2));
    let leader = net.leader().expect("a leader within 2 s");
    for seq in 1..=20u64 {
        net.request(leader, 1, seq, put(&format!("k{}", seq % 4), &seq.to_string()));
        net.run_for(Duration::from_millis(10));
        assert_eq!(net.reply_for(1, seq), Some(&DONE), "write {seq}");
    }
    net.run_for(Duration::from_millis(500));
    let extra = |id: u32, key: &str| net.node(id).p.status().extra.get(key).cloned().unwrap_or_default();
    for id in 1..=3 {
        assert_eq!(extra(id, "ticker_slots"), extra(leader, "ticker_slots"), "n{id}: layer entries elsewhere");
        assert_eq!(extra(id, "ticker_entries"), "[1],[2],[3]", "n{id}: the entries in proposal order");
    }
    let slots: Vec<u64> = extra(leader, "ticker_slots").split(',').map(|s| s.parse().unwrap()).collect();
    // Interleaved with the client writes, and never applied to the state machine.
    for n in &net.nodes {
        assert!(n.applied.iter().all(|(pos, _)| !slots.contains(&pos.index)), "a layer entry was applied");
        assert_eq!(n.applied.len(), 20);
        assert_eq!(n.sm.digest(), net.nodes[0].sm.digest());
    }
    assert!(slots.iter().any(|s| net.nodes[0].applied.iter().any(|(p, _)| p.index > *s)), "{slots:?}");
    net.assert_agreement();
}
