//! The simulator hosts each protocol's client policy, including outcomes the built-in
//! policies never produce: a definitive reject must never take effect, and the checker
//! must catch a protocol that rejects "for good" what it then executes.

use synod_core::client_policy::{ClientConfig, ClientCtx, ClientPolicy, LeaderPolicy, Outcome};
use synod_core::{Command, Ctx, Event, Protocol, Reply, ReplyBody, Status};
use synod_protocols::registry::{ProtocolInfo, Setup};
use synod_sim::sim::FailureKind;
use synod_sim::{run, FaultSet, SimConfig};

/// MultiPaxos that refuses every third request of a session (by its seq, so every replica
/// decides alike). Honest: a refused request is not handed to MultiPaxos. Lying: it is
/// refused and handed on anyway, so it may execute.
struct RejectSome {
    inner: Box<dyn Protocol>,
    lie: bool,
}

impl Protocol for RejectSome {
    fn recover(&mut self, ctx: &mut Ctx<'_>, records: Vec<bytes::Bytes>) {
        self.inner.recover(ctx, records)
    }

    fn on_event(&mut self, ctx: &mut Ctx<'_>, event: Event) {
        if let Event::Request { client, cmd, .. } = &event {
            if cmd.seq % 3 == 0 {
                ctx.answer(*client, cmd, ReplyBody::Rejected { reason: "every third request".into() });
                if !self.lie {
                    return;
                }
            }
        }
        self.inner.on_event(ctx, event)
    }

    fn flush(&mut self, ctx: &mut Ctx<'_>) {
        self.inner.flush(ctx)
    }

    fn status(&self) -> Status {
        self.inner.status()
    }

    fn describe_message(&self, msg: &[u8]) -> String {
        self.inner.describe_message(msg)
    }
}

fn build(s: &Setup, lie: bool) -> Result<Box<dyn Protocol>, String> {
    let inner = (synod_protocols::find("multipaxos")?.build)(s)?;
    Ok(Box::new(RejectSome { inner, lie }))
}

/// The leader policy, except that a `Rejected` reply is final and definitive.
struct StrictRejects(LeaderPolicy);

impl ClientPolicy for StrictRejects {
    fn begin(&mut self, cx: &mut ClientCtx<'_>, cmd: &Command) {
        self.0.begin(cx, cmd)
    }
    fn on_reply(&mut self, cx: &mut ClientCtx<'_>, reply: Reply) {
        match reply.body {
            ReplyBody::Rejected { reason } => {
                cx.cancel_timer(1);
                cx.cancel_timer(2);
                cx.finish(Outcome::Rejected { definitive: true, reason })
            }
            _ => self.0.on_reply(cx, reply),
        }
    }
    fn on_timer(&mut self, cx: &mut ClientCtx<'_>, id: u64) {
        self.0.on_timer(cx, id)
    }
    fn on_unreachable(&mut self, cx: &mut ClientCtx<'_>, node: synod_core::NodeId) {
        self.0.on_unreachable(cx, node)
    }
}

fn strict(cfg: &ClientConfig) -> Box<dyn ClientPolicy> {
    Box::new(StrictRejects(LeaderPolicy::new(cfg.retry.clone())))
}

static HONEST: ProtocolInfo = ProtocolInfo {
    name: "reject-some",
    description: "MultiPaxos refusing every third request",
    client: strict,
    order: synod_core::session::Order::Total,
    tolerates: synod_protocols::registry::minority,
    build: |s| build(s, false),
};
static LYING: ProtocolInfo = ProtocolInfo {
    name: "reject-some-lying",
    description: "MultiPaxos refusing every third request and executing it anyway",
    client: strict,
    order: synod_core::session::Order::Total,
    tolerates: synod_protocols::registry::minority,
    build: |s| build(s, true),
};

#[test]
fn definitive_rejects_are_recorded_and_hold_when_nothing_executes_them() {
    let mut rejected = 0;
    for seed in 0..20 {
        let replicas = if seed % 2 == 1 { 5 } else { 3 };
        let report = run(&SimConfig { replicas, ..SimConfig::new(&HONEST, seed) });
        assert!(report.failure.is_none(), "seed {seed}: {:?}", report.failure);
        assert_eq!(report.stats.ops_rejected as usize, report.history.ops.iter().filter(|o| o.is_rejected()).count());
        rejected += report.stats.ops_rejected;
    }
    assert!(rejected > 100, "every third request is rejected for good: {rejected}");
}

#[test]
fn executing_a_definitively_rejected_request_is_caught() {
    let caught = (0..20).find_map(|seed| {
        let report = run(&SimConfig { faults: FaultSet::none(), ..SimConfig::new(&LYING, seed) });
        report.failure.map(|f| (seed, f.kind))
    });
    let (seed, kind) = caught.expect("a rejected put that executed must be caught");
    assert_eq!(kind, FailureKind::Linearizability, "seed {seed}");
}
