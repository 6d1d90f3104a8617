//! The Placement consumers this host held and let go of. rtrack removes its part of a
//! consumer's allocation only when it can prove the consumer left this host: it held a local
//! claim for it, and an explicit operation (an abort, a deletion, a move away, a confirmed or
//! reverted move) released it. Such a release is recorded in the same commit as the operation,
//! so that it survives a crash, and kept until the reporter has seen the consumer's part on this
//! host's providers gone from Placement.
//!
//! In: the records before and after an operation (the holders of each instance it touched).
//! Out: [`ReleasedConsumer`] rows in the operation's [`Changes`].

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::changes::Changes;
use super::records::{holdings, ReleasedConsumer};
use super::resource_tracker::Tracker;
use super::usage::compute_usage;

impl Tracker {
    /// The consumers `instance` is held under now, from its record and its migrations only.
    fn holders_of(&self, instance: &str) -> BTreeSet<Uuid> {
        let Some(inst) = self.state.instances.get(instance) else {
            return BTreeSet::new();
        };
        let instances = BTreeMap::from([(instance.to_string(), inst.clone())]);
        let migrations = self
            .state
            .migrations
            .iter()
            .filter(|(_, m)| m.instance_uuid == instance)
            .map(|(id, m)| (*id, m.clone()))
            .collect();
        let usage = compute_usage(
            &self.settings.names,
            &instances,
            &migrations,
            self.settings.counting_rules(),
        );
        holdings(&usage).remove(instance).unwrap_or_default()
    }

    /// Brings the holders of `instances` up to date; returns the consumers they no longer
    /// hold, with their instance.
    pub(super) fn refresh_holders(&mut self, instances: &BTreeSet<String>) -> Vec<(Uuid, String)> {
        let mut let_go = Vec::new();
        for i in instances {
            let now = self.holders_of(i);
            let before = if now.is_empty() {
                self.holders.remove(i)
            } else {
                self.holders.insert(i.clone(), now.clone())
            };
            for u in before.unwrap_or_default().difference(&now) {
                let_go.push((*u, i.clone()));
            }
        }
        let_go
    }

    /// Every instance's holders, derived again (the records were replaced).
    pub(super) fn derive_holders(&mut self) {
        self.holders = holdings(&self.usage());
    }

    /// Records in `changes` the consumers the operation that made them released (held before,
    /// not after), and drops the records of consumers held again. Called once per operation,
    /// after it changed the records and before its changes are committed.
    pub fn note_releases(&mut self, changes: &mut Changes, now: i64) {
        let touched = changes.instances_touched();
        if touched.is_empty() {
            return;
        }
        for (consumer, instance) in self.refresh_holders(&touched) {
            let rec = ReleasedConsumer {
                instance_uuid: instance,
                released_at: now,
            };
            self.state.released_consumers.insert(consumer, rec.clone());
            changes.released_consumers.insert(consumer, Some(rec));
        }
        for i in &touched {
            let held: Vec<Uuid> = self.holders.get(i).into_iter().flatten().copied().collect();
            for u in held {
                if self.state.released_consumers.remove(&u).is_some() {
                    changes.released_consumers.insert(u, None);
                }
            }
        }
    }

    /// Forgets released consumers whose part the reporter saw gone from Placement, each only
    /// if it is still the release the reporter saw (`released_at`): a consumer held and
    /// released again since is kept.
    pub fn forget_released(&mut self, done: &[(Uuid, i64)]) -> Changes {
        let mut changes = Changes::default();
        for (u, at) in done {
            if self
                .state
                .released_consumers
                .get(u)
                .is_some_and(|r| r.released_at == *at)
            {
                self.state.released_consumers.remove(u);
                changes.released_consumers.insert(*u, None);
            }
        }
        changes
    }
}
