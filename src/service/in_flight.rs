//! Instances whose changes are on their way to disk. An operation on one of them waits until
//! they are committed or rolled back, so that what it answers (an idempotent retry's
//! "existing", a refusal, a conflict) is about committed state, never about changes that may
//! still roll back.
//!
//! In: the instance uuids a batch of changes touches, marked when it is queued and cleared when it
//! is committed or rolled back. Out: whether any of a set of instances has changes in flight, and a
//! wait until none has.

use std::collections::{BTreeSet, HashMap};

use parking_lot::{Condvar, Mutex};

/// Instance uuids with uncommitted changes, counted (the audit may touch an instance whose own
/// operation is still in flight).
#[derive(Default)]
pub struct InFlight {
    uuids: Mutex<HashMap<String, usize>>,
    changed: Condvar,
}

impl InFlight {
    /// True if any of `uuids` has changes in flight.
    pub fn any(&self, uuids: &BTreeSet<String>) -> bool {
        let map = self.uuids.lock();
        uuids.iter().any(|u| map.contains_key(u))
    }

    /// Waits until none of `uuids` has changes in flight. The check and the wait happen under
    /// one lock, so a commit that finishes in between is not missed.
    pub fn wait_until_settled(&self, uuids: &BTreeSet<String>) {
        let mut map = self.uuids.lock();
        while uuids.iter().any(|u| map.contains_key(u)) {
            self.changed.wait(&mut map);
        }
    }

    /// Marks `uuids` as having changes in flight.
    pub fn enter(&self, uuids: &BTreeSet<String>) {
        let mut map = self.uuids.lock();
        for u in uuids {
            *map.entry(u.clone()).or_default() += 1;
        }
    }

    /// Their changes are committed or rolled back (and memory agrees with the store again).
    pub fn leave(&self, uuids: &BTreeSet<String>) {
        let mut map = self.uuids.lock();
        for u in uuids {
            if let Some(n) = map.get_mut(u) {
                *n -= 1;
                if *n == 0 {
                    map.remove(u);
                }
            }
        }
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_waiter_wakes_when_the_last_change_on_its_instance_settles() {
        let f = Arc::new(InFlight::default());
        let a: BTreeSet<String> = ["a".to_string()].into();
        f.enter(&a);
        f.enter(&a);
        assert!(f.any(&a));
        let waiter = {
            let f = f.clone();
            let a = a.clone();
            std::thread::spawn(move || f.wait_until_settled(&a))
        };
        f.leave(&a);
        assert!(f.any(&a), "one change is still in flight");
        f.leave(&a);
        waiter.join().unwrap();
        assert!(!f.any(&a));
    }
}
