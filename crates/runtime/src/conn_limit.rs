//! A cap on simultaneous connections per listening port (`max_connections` in the node
//! config). A connection over the cap is answered with an error in the port's own protocol
//! and closed, so a flood of connections cannot grow a replica's memory without bound; each
//! admitted connection holds a permit until it ends.

use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

#[derive(Clone, Debug)]
pub struct ConnLimit {
    permits: Arc<Semaphore>,
    max: usize,
}

impl ConnLimit {
    pub fn new(max: usize) -> ConnLimit {
        ConnLimit { permits: Arc::new(Semaphore::new(max)), max }
    }

    /// No practical limit (tests and tools that build a shared state by hand).
    pub fn unlimited() -> ConnLimit {
        ConnLimit::new(Semaphore::MAX_PERMITS)
    }

    /// A permit for one more connection, or None when `max` are open.
    pub fn try_admit(&self) -> Option<OwnedSemaphorePermit> {
        self.permits.clone().try_acquire_owned().ok()
    }

    pub fn max(&self) -> usize {
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_come_back_when_connections_end() {
        let limit = ConnLimit::new(2);
        let a = limit.try_admit().expect("first");
        let _b = limit.try_admit().expect("second");
        assert!(limit.try_admit().is_none(), "a third is refused");
        drop(a);
        assert!(limit.try_admit().is_some(), "a slot freed by a closed connection is reused");
    }
}
