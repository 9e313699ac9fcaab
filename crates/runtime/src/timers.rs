//! Protocol timers: one ordered set of deadlines, so the node loop sleeps on the earliest one
//! instead of running a task per timer. Re-arming a timer replaces its deadline.

use std::collections::{BTreeSet, HashMap};
use synod_core::TimerId;
use tokio::time::Instant;

#[derive(Default, Debug)]
pub struct Timers {
    by_deadline: BTreeSet<(Instant, TimerId)>,
    deadline_of: HashMap<TimerId, Instant>,
}

impl Timers {
    /// Arm (or re-arm) `timer` to fire at `at`.
    pub fn set(&mut self, timer: TimerId, at: Instant) {
        if let Some(old) = self.deadline_of.insert(timer, at) {
            self.by_deadline.remove(&(old, timer));
        }
        self.by_deadline.insert((at, timer));
    }

    pub fn cancel(&mut self, timer: TimerId) {
        if let Some(old) = self.deadline_of.remove(&timer) {
            self.by_deadline.remove(&(old, timer));
        }
    }

    /// The earliest deadline, if any timer is armed.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.by_deadline.first().map(|(at, _)| *at)
    }

    /// Disarm and return every timer due at `now`, earliest first.
    pub fn expired(&mut self, now: Instant) -> Vec<TimerId> {
        let mut fired = Vec::new();
        while let Some(&(at, timer)) = self.by_deadline.first() {
            if at > now {
                break;
            }
            self.by_deadline.pop_first();
            self.deadline_of.remove(&timer);
            fired.push(timer);
        }
        fired
    }

    pub fn len(&self) -> usize {
        self.deadline_of.len()
    }

    pub fn is_empty(&self) -> bool {
        self.deadline_of.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rearm_cancel_and_expire_in_order() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut t = Timers::default();
        t.set(1, ms(30));
        t.set(2, ms(10));
        t.set(3, ms(20));
        t.set(1, ms(5)); // re-arm: the 30 ms deadline is gone
        t.cancel(3);
        assert_eq!(t.len(), 2);
        assert_eq!(t.next_deadline(), Some(ms(5)));
        assert_eq!(t.expired(ms(4)), Vec::<TimerId>::new());
        assert_eq!(t.expired(ms(40)), vec![1, 2]);
        assert!(t.is_empty());
        assert_eq!(t.next_deadline(), None);
    }
}
