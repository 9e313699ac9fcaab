//! Regenerate the simulator-exported part of the history corpus
//! (`crates/sim/tests/histories/sim-*.json`):
//! `cargo run -p synod-sim --example gen_corpus -- crates/sim/tests/histories`.
//!
//! Linearizable histories come from clean MultiPaxos runs; non-linearizable ones from a
//! replica-applies-locally protocol (no agreement at all). The verdict recorded in
//! `expect` is the Rust checker's; the corpus test requires Porcupine to agree.

use synod_core::{Ctx, Event, Pos, Protocol, Role, Status};
use synod_protocols::registry::{self, ProtocolInfo, Setup};
use synod_sim::{linearizability, run, FaultSet, SimConfig};

struct LocalApply {
    id: u32,
    next: u64,
}

impl Protocol for LocalApply {
    fn recover(&mut self, _ctx: &mut Ctx<'_>, _records: Vec<bytes::Bytes>) {}
    fn on_event(&mut self, ctx: &mut Ctx<'_>, event: Event) {
        if let Event::Request { client, cmd, .. } = event {
            self.next += 1;
            ctx.apply(Pos { space: self.id, index: self.next, sub: 0 }, cmd, Some(client));
        }
    }
    fn status(&self) -> Status {
        Status {
            id: self.id,
            protocol: "local-apply".into(),
            role: Role::Replica,
            ballot: String::new(),
            leader: None,
            commit_index: self.next,
            execute_index: self.next,
            extra: Default::default(),
        }
    }
}

fn local(s: &Setup) -> Result<Box<dyn Protocol>, String> {
    Ok(Box::new(LocalApply { id: s.id, next: 0 }))
}

static LOCAL_APPLY: ProtocolInfo = ProtocolInfo {
    name: "local-apply",
    description: "no agreement",
    client: synod_core::client_policy::home_policy,
    order: synod_core::session::Order::Total,
    build: local,
};

fn main() {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).unwrap_or("crates/sim/tests/histories".into()));
    let write = |name: String, info: &'static ProtocolInfo, seed: u64, faults: FaultSet, ops: usize| {
        let cfg = SimConfig { faults, ops_per_client: ops, ..SimConfig::new(info, seed) };
        let mut h = run(&cfg).history;
        h.expect = Some(linearizability::check(&h).is_ok());
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, h.to_json()).expect("write corpus file");
        println!("{}: {} ops, linearizable: {:?}", path.display(), h.ops.len(), h.expect);
    };
    let mp = registry::find("multipaxos").expect("multipaxos is registered");
    for seed in [1, 2, 3] {
        write(format!("sim-multipaxos-seed{seed}"), mp, seed, FaultSet::all(), 30);
    }
    write("sim-multipaxos-seed4-long".into(), mp, 4, FaultSet::all(), 100);
    for seed in [1, 2, 3] {
        write(format!("sim-local-apply-seed{seed}"), &LOCAL_APPLY, seed, FaultSet::none(), 20);
    }
}
