//! The client side of chain replication (issue 14's `ClientPolicy`): updates go to the head,
//! queries to the tail (§2). Each kind has its own target, remembered across requests and
//! refreshed by the replicas' `NotLeader { leader }` hints: a replica that is not the head
//! names the head of the newest configuration it knows for an update, the tail for a query.
//! After an epoch change the old head or tail redirects (or is unreachable, and the policy
//! moves on to the next replica, which redirects). A tail without a valid lease answers
//! `Rejected` and the query is retried after a backoff.

use synod_core::client_policy::{ClientConfig, ClientCtx, ClientPolicy, LeaderPolicy};
use synod_core::{Command, NodeId, Reply};

pub struct ChainPolicy {
    updates: LeaderPolicy,
    queries: LeaderPolicy,
    /// The current request is a query.
    query: bool,
}

/// The registry's constructor.
pub fn client(cfg: &ClientConfig) -> Box<dyn ClientPolicy> {
    Box::new(ChainPolicy {
        updates: LeaderPolicy::new(cfg.retry.clone()),
        queries: LeaderPolicy::new(cfg.retry.clone()),
        query: false,
    })
}

impl ChainPolicy {
    fn current(&mut self) -> &mut LeaderPolicy {
        if self.query {
            &mut self.queries
        } else {
            &mut self.updates
        }
    }
}

impl ClientPolicy for ChainPolicy {
    fn begin(&mut self, cx: &mut ClientCtx<'_>, cmd: &Command) {
        self.query = !cmd.op.is_write();
        self.current().begin(cx, cmd);
    }
    fn on_reply(&mut self, cx: &mut ClientCtx<'_>, reply: Reply) {
        self.current().on_reply(cx, reply);
    }
    fn on_timer(&mut self, cx: &mut ClientCtx<'_>, id: u64) {
        self.current().on_timer(cx, id);
    }
    fn on_unreachable(&mut self, cx: &mut ClientCtx<'_>, node: NodeId) {
        self.current().on_unreachable(cx, node);
    }
}
