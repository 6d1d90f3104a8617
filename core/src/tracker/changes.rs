//! What an operation changed in the records: rows to write or delete, persisted by the caller
//! before it answers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use super::model::{InstanceRecord, MigrationRecord};
use super::pci::devices::TrackedDevice;
use super::records::{ClaimRecord, Counters, PciProviderRecord, ReleasedConsumer, TrackerState};
use crate::probes::pci::PciAddress;

/// What an operation changed: rows to write (`Some`) or delete (`None`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Changes {
    /// Tracked PCI devices written or removed, by address.
    pub devices: BTreeMap<PciAddress, Option<Arc<TrackedDevice>>>,
    /// Instance records written or removed, by uuid.
    pub instances: BTreeMap<String, Option<Arc<InstanceRecord>>>,
    /// Migration records written or removed, by id.
    pub migrations: BTreeMap<i64, Option<MigrationRecord>>,
    /// Instance claims.
    pub claims: BTreeMap<String, Option<Arc<ClaimRecord>>>,
    /// Move claims.
    pub move_claims: BTreeMap<i64, Option<Arc<ClaimRecord>>>,
    /// Counters changed.
    pub counters: Option<Counters>,
    /// A new ComputeNode primitive to keep.
    pub compute_node: Option<serde_json::Value>,
    /// PCI provider uuids written or removed, by address.
    pub pci_providers: BTreeMap<PciAddress, Option<PciProviderRecord>>,
    /// Released consumers recorded or forgotten.
    pub released_consumers: BTreeMap<uuid::Uuid, Option<ReleasedConsumer>>,
}

impl Changes {
    /// True when nothing changed.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
            && self.instances.is_empty()
            && self.migrations.is_empty()
            && self.claims.is_empty()
            && self.move_claims.is_empty()
            && self.counters.is_none()
            && self.compute_node.is_none()
            && self.pci_providers.is_empty()
            && self.released_consumers.is_empty()
    }

    /// The instances these changes concern: an operation on one of them must wait until these
    /// are committed (or rolled back) before it can see them.
    pub fn instances_touched(&self) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = self.instances.keys().cloned().collect();
        out.extend(self.claims.keys().cloned());
        out.extend(
            self.move_claims
                .values()
                .flatten()
                .map(|c| c.instance_uuid.clone()),
        );
        out.extend(
            self.migrations
                .values()
                .flatten()
                .map(|m| m.instance_uuid.clone()),
        );
        out.extend(
            self.devices
                .values()
                .flatten()
                .filter_map(|d| d.owner.as_ref().map(|o| o.instance_uuid.clone())),
        );
        out
    }

    /// Adds later changes on top of these.
    pub fn merge(&mut self, later: Changes) {
        self.devices.extend(later.devices);
        self.instances.extend(later.instances);
        self.migrations.extend(later.migrations);
        self.claims.extend(later.claims);
        self.move_claims.extend(later.move_claims);
        self.pci_providers.extend(later.pci_providers);
        self.released_consumers.extend(later.released_consumers);
        if later.counters.is_some() {
            self.counters = later.counters;
        }
        if later.compute_node.is_some() {
            self.compute_node = later.compute_node;
        }
    }
}

impl TrackerState {
    /// Applies committed changes it owns (no copies), as the store does: `Some` writes a row,
    /// `None` deletes it.
    pub fn apply_owned(&mut self, c: Changes) {
        fn put<K: Ord, V>(map: &mut BTreeMap<K, V>, rows: BTreeMap<K, Option<V>>) {
            for (k, v) in rows {
                match v {
                    Some(v) => {
                        map.insert(k, v);
                    }
                    None => {
                        map.remove(&k);
                    }
                }
            }
        }
        put(&mut self.devices, c.devices);
        put(&mut self.instances, c.instances);
        put(&mut self.migrations, c.migrations);
        put(&mut self.claims, c.claims);
        put(&mut self.move_claims, c.move_claims);
        put(&mut self.pci_providers, c.pci_providers);
        put(&mut self.released_consumers, c.released_consumers);
        if let Some(counters) = c.counters {
            self.failed_builds = counters.failed_builds;
            self.next_migration_id = counters.next_migration_id;
        }
        if let Some(node) = c.compute_node {
            self.compute_node = Some(node);
        }
    }
}
