//! A memory budget for pending requests, shared by every connection of a replica (peer,
//! native client and Redis ports): `max_pending_bytes` in the node config.
//!
//! What it counts: the read buffers of the connections, i.e. the bytes of requests and
//! messages that have arrived but are not yet complete (a frame or RESP command still being
//! received) or not yet taken out of the buffer. Per connection the frame limit already holds
//! (`limits.max_frame_bytes`), and a buffer grows with the bytes that arrive, not with the
//! length a sender announces; but 60 connections each sending most of a 64 MiB frame still
//! add up to 4 GB. With the budget, the connection whose buffer would cross it is answered
//! with an error in its own protocol and closed (see [`Exhausted`]), and the others go on.
//!
//! A connection charges its buffer's capacity after every read ([`Charge::set`]) and
//! releases it when the buffer shrinks or the connection ends (drop).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes of each connection's buffer not charged to the budget (`max_connections` bounds
/// them: 1024 connections × 64 KiB = 64 MiB per port).
pub const FREE_PER_CONNECTION: usize = 64 * 1024;

/// The shared budget (cheap to clone).
#[derive(Clone, Debug)]
pub struct MemBudget {
    used: Arc<AtomicUsize>,
    max: usize,
}

/// The budget is exhausted: the connection that asked is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("memory budget for pending requests exhausted (max_pending_bytes = {max}); try again later")]
pub struct Exhausted {
    pub max: usize,
}

impl MemBudget {
    pub fn new(max: usize) -> MemBudget {
        MemBudget { used: Arc::new(AtomicUsize::new(0)), max }
    }

    /// No practical limit (tests, tools).
    pub fn unlimited() -> MemBudget {
        MemBudget::new(usize::MAX)
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// Bytes charged right now, across all connections.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// A connection's account, starting at zero.
    pub fn charge(&self) -> Charge {
        Charge { budget: self.clone(), held: 0 }
    }

    fn try_add(&self, n: usize) -> Result<(), Exhausted> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| u.checked_add(n).filter(|t| *t <= self.max))
            .map(|_| ())
            .map_err(|_| Exhausted { max: self.max })
    }

    fn sub(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }
}

/// What one connection holds of the budget; returned on drop.
#[derive(Debug)]
pub struct Charge {
    budget: MemBudget,
    held: usize,
}

impl Charge {
    /// Make this connection hold `bytes` (its buffer's capacity now). Growing beyond what the
    /// budget has left fails and leaves the charge as it was.
    pub fn set(&mut self, bytes: usize) -> Result<(), Exhausted> {
        // The first FREE_PER_CONNECTION bytes of every connection are covered by
        // `max_connections` instead: an ordinary client is never refused because others
        // hold the budget.
        let bytes = bytes.saturating_sub(FREE_PER_CONNECTION);
        if bytes > self.held {
            self.budget.try_add(bytes - self.held)?;
        } else {
            self.budget.sub(self.held - bytes);
        }
        self.held = bytes;
        Ok(())
    }

    pub fn held(&self) -> usize {
        self.held
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.sub(self.held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_share_the_budget_and_return_it() {
        let budget = MemBudget::new(100);
        let mut a = budget.charge();
        let mut b = budget.charge();
        let free = FREE_PER_CONNECTION;
        a.set(free + 60).unwrap();
        assert_eq!(b.set(free + 50), Err(Exhausted { max: 100 }), "60 + 50 > 100");
        assert_eq!(b.held(), 0, "a refused growth charges nothing");
        b.set(free).unwrap();
        assert_eq!(budget.used(), 60, "the first FREE_PER_CONNECTION bytes are free");
        b.set(free + 40).unwrap();
        assert_eq!(budget.used(), 100);
        a.set(free + 10).unwrap(); // the buffer shrank
        b.set(free + 90).unwrap();
        drop(a);
        drop(b);
        assert_eq!(budget.used(), 0, "everything returned when connections end");
        assert!(MemBudget::unlimited().charge().set(usize::MAX).is_ok());
    }
}
