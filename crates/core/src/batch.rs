//! Batching of client requests: a leader queues requests while its pipeline is full and
//! proposes them together in one log entry when room frees up (adaptive batching: no timer,
//! batches grow with load).

use crate::kv::Command;
use crate::protocol::ClientRef;
use std::collections::VecDeque;

/// A client waiting for the command it sent, once that command is executed. A leader records
/// waiters for the entries it proposes; another leader may later fill the same position with a
/// different command, so a waiter is answered only if the executed command is its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waiter {
    pub client: ClientRef,
    /// (client id, seq) of the command it waits for.
    pub session: (u64, u64),
}

impl Waiter {
    pub fn for_pending(p: &Pending) -> Option<Waiter> {
        p.client.map(|client| Waiter { client, session: (p.cmd.client, p.cmd.seq) })
    }

    /// The client to answer if `cmd` is the command this waiter waits for.
    pub fn matching(waiter: Option<&Option<Waiter>>, cmd: &Command) -> Option<ClientRef> {
        waiter.copied().flatten().filter(|w| w.session == (cmd.client, cmd.seq)).map(|w| w.client)
    }
}

/// One queued request and the client to answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    pub client: Option<ClientRef>,
    pub cmd: Command,
}

#[derive(Clone, Debug, Default)]
pub struct Batcher {
    queue: VecDeque<Pending>,
    bytes: usize,
}

impl Batcher {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, client: Option<ClientRef>, cmd: Command) {
        self.bytes += cmd.op.size();
        self.queue.push_back(Pending { client, cmd });
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Bytes of queued operations.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Take up to `max_cmds` requests, stopping early once `max_bytes` is reached (a single
    /// request larger than `max_bytes` still forms a batch of its own).
    pub fn take(&mut self, max_cmds: usize, max_bytes: usize) -> Vec<Pending> {
        let mut out = Vec::new();
        let mut size = 0;
        while let Some(p) = self.queue.front() {
            let s = p.cmd.op.size();
            if out.len() >= max_cmds || (!out.is_empty() && size + s > max_bytes) {
                break;
            }
            size += s;
            self.bytes -= s;
            out.push(self.queue.pop_front().expect("front exists"));
        }
        out
    }

    /// Take everything (e.g. to redirect queued clients after losing leadership).
    pub fn drain(&mut self) -> Vec<Pending> {
        self.bytes = 0;
        self.queue.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::Op;
    use bytes::Bytes;

    fn cmd(seq: u64, n: usize) -> Command {
        Command {
            client: 1,
            seq,
            acked_below: 0,
            now_ms: 0,
            op: Op::Put { key: Bytes::from_static(b"k"), value: Bytes::from(vec![0u8; n]) },
        }
    }

    #[test]
    fn takes_by_count_and_bytes() {
        let mut b = Batcher::new();
        for i in 0..5 {
            b.push(None, cmd(i, 9)); // 10 bytes each
        }
        assert_eq!(b.bytes(), 50);
        assert_eq!(b.take(2, 1000).len(), 2);
        assert_eq!(b.take(10, 25).len(), 2);
        assert_eq!(b.bytes(), 10);
        b.push(None, cmd(9, 99));
        assert_eq!(b.take(10, 5).len(), 1, "oversized first request still goes alone");
        assert_eq!(b.take(10, 5).len(), 1);
        assert!(b.is_empty());
    }
}
