//! The end of moves (Nova's `drop_move_claim`, confirm and revert); the move claim itself is in
//! `move_claim.rs`.
//!
//! In: a migration id to drop, confirm or revert, and the time. Out: the records that changes,
//! with the [`Changes`] to commit, or a [`ClaimError`] (not found, conflict).

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::probes::pci::PciAddress;
use crate::tracker::error::ClaimError;
use crate::tracker::model::MigrationRecord;
use crate::tracker::pci::free::Held;
use crate::tracker::usage::on_node;
use crate::tracker::{Changes, Tracker};

impl Tracker {
    pub(in crate::tracker) fn set_migration_status(
        &mut self,
        id: i64,
        status: &str,
        changes: &mut Changes,
    ) {
        if let Some(m) = self.state.migrations.get_mut(&id) {
            if m.status != status {
                m.status = status.to_string();
                changes.migrations.insert(id, Some(m.clone()));
            }
        }
    }

    /// Drops the destination side of a move: frees its devices, ends the migration with
    /// `status`, and forgets the instance if it is not on this node.
    pub(in crate::tracker) fn drop_move_claim(
        &mut self,
        id: i64,
        status: &str,
        changes: &mut Changes,
    ) {
        if let Some(claim) = self.state.move_claims.remove(&id) {
            // By address: on the same node the instance's old devices serve the same requests.
            let given: BTreeSet<PciAddress> = claim.assignments.iter().map(|a| a.address).collect();
            self.free_held(&claim.instance_uuid, Held::At(&given), changes);
            changes.move_claims.insert(id, None);
        }
        self.set_migration_status(id, status, changes);
        if let Some(m) = self.state.migrations.get(&id).cloned() {
            if let Some(shared) = self.state.instances.get_mut(&m.instance_uuid) {
                if !on_node(shared, &self.settings.names) {
                    let uuid = shared.uuid.clone();
                    self.state.instances.remove(&uuid);
                    changes.instances.insert(uuid, None);
                } else if shared
                    .migration_context
                    .as_ref()
                    .is_some_and(|c| c.migration_id == id)
                {
                    let inst = Arc::make_mut(shared);
                    inst.migration_context = None;
                    inst.new_flavor = None;
                    changes
                        .instances
                        .insert(shared.uuid.clone(), Some(shared.clone()));
                }
            }
        }
    }

    pub(in crate::tracker) fn migration(&self, id: i64) -> Result<MigrationRecord, ClaimError> {
        self.state
            .migrations
            .get(&id)
            .cloned()
            .ok_or(ClaimError::NotFound {
                what: "migration",
                id: id.to_string(),
            })
    }

    pub(in crate::tracker) fn sides(&self, m: &MigrationRecord) -> (bool, bool) {
        let n = &self.settings.names;
        (
            m.source_compute.as_deref() == Some(n.host.as_str())
                && m.source_node.as_deref() == Some(n.node.as_str()),
            m.dest_compute.as_deref() == Some(n.host.as_str())
                && m.dest_node.as_deref() == Some(n.node.as_str()),
        )
    }

    /// Confirms a move (`drop_move_claim_at_source` and the destination's completion): the
    /// migration becomes `confirmed`; at the source the old flavor's usage and devices are
    /// dropped; at the destination the instance now lives here with its new flavor and keeps the
    /// devices claimed for it.
    pub fn confirm_move(&mut self, id: i64, now: i64) -> Result<Changes, ClaimError> {
        self.invalidate_usage();
        let m = self.migration(id)?;
        if !m.in_progress() {
            return Err(ClaimError::Conflict {
                id: id.to_string(),
                message: format!("migration {id} is already {}", m.status),
            });
        }
        let (at_source, at_dest) = self.sides(&m);
        let mut changes = Changes::default();
        let uuid = m.instance_uuid.clone();
        let names = self.settings.names.clone();
        if at_source {
            // Old devices: all the instance holds but those the move claimed on this same node
            // (by address: a Neutron port's request id is the same on both sides).
            let new_devices: BTreeSet<PciAddress> = self
                .state
                .move_claims
                .get(&id)
                .map(|c| c.assignments.iter().map(|a| a.address).collect())
                .unwrap_or_default();
            let old_devices: BTreeSet<PciAddress> = self
                .state
                .devices
                .values()
                .filter(|d| d.owner.as_ref().is_some_and(|o| o.instance_uuid == uuid))
                .map(|d| d.address)
                .filter(|a| !new_devices.contains(a))
                .collect();
            self.free_held(&uuid, Held::At(&old_devices), &mut changes);
            if !at_dest {
                self.state.claims.remove(&uuid);
                changes.claims.insert(uuid.clone(), None);
            }
        }
        self.set_migration_status(id, "confirmed", &mut changes);
        if let Some(m) = self.state.migrations.get_mut(&id) {
            m.updated_at = now;
            changes.migrations.insert(id, Some(m.clone()));
        }
        if at_dest {
            if let Some(shared) = self.state.instances.get_mut(&uuid) {
                let inst = Arc::make_mut(shared);
                let new_flavor = inst
                    .new_flavor
                    .clone()
                    .unwrap_or_else(|| inst.request.flavor.clone());
                let new_ctx = inst.migration_context.clone();
                let new_constraints = self
                    .state
                    .move_claims
                    .get(&id)
                    .map(|c| c.request.numa.clone());
                inst.host = Some(names.host.clone());
                inst.node = Some(names.node.clone());
                let request = Arc::make_mut(&mut inst.request);
                request.flavor = new_flavor;
                if let Some(numa) = new_constraints {
                    request.numa = numa;
                }
                if let Some(ctx) = new_ctx {
                    request.pci_requests = ctx.new_pci_requests;
                    inst.numa_topology = ctx.new_numa_topology;
                    inst.nested = ctx.new_nested;
                }
                inst.old_flavor = None;
                inst.new_flavor = None;
                inst.migration_context = None;
                inst.task_state = None;
                if inst.vm_state == "resized" {
                    inst.vm_state = "active".into();
                }
                let request = inst.request.clone();
                changes.instances.insert(uuid.clone(), Some(shared.clone()));
                if let Some(mut claim) = self.state.move_claims.remove(&id) {
                    changes.move_claims.insert(id, None);
                    let held = Arc::make_mut(&mut claim);
                    held.migration_id = None;
                    held.request = request;
                    self.state.claims.insert(uuid.clone(), claim.clone());
                    changes.claims.insert(uuid.clone(), Some(claim));
                }
            }
        } else {
            self.forget_instance_unless_moving(&uuid, &mut changes);
        }
        Ok(changes)
    }

    /// Reverts a move (`drop_move_claim_at_dest` and the source's side): the migration becomes
    /// `reverted`; at the destination the new flavor's usage and devices are dropped; at the
    /// source the instance is back with its old flavor.
    pub fn revert_move(&mut self, id: i64, now: i64) -> Result<Changes, ClaimError> {
        self.invalidate_usage();
        let m = self.migration(id)?;
        if !m.in_progress() {
            return Err(ClaimError::Conflict {
                id: id.to_string(),
                message: format!("migration {id} is already {}", m.status),
            });
        }
        let (at_source, at_dest) = self.sides(&m);
        let mut changes = Changes::default();
        let names = self.settings.names.clone();
        // A resize on this host is both sides: dropping the destination's claim clears the
        // context the source needs to put the old placements back, so take it first.
        let source_ctx = at_source
            .then(|| {
                self.state
                    .instances
                    .get(&m.instance_uuid)
                    .and_then(|i| i.migration_context.clone())
                    .filter(|c| c.migration_id == id)
            })
            .flatten();
        if at_dest {
            self.drop_move_claim(id, "reverted", &mut changes);
        } else {
            self.set_migration_status(id, "reverted", &mut changes);
        }
        if let Some(m) = self.state.migrations.get_mut(&id) {
            m.updated_at = now;
            changes.migrations.insert(id, Some(m.clone()));
        }
        if at_source {
            if let Some(shared) = self.state.instances.get_mut(&m.instance_uuid) {
                let inst = Arc::make_mut(shared);
                if let Some(old) = inst.old_flavor.take() {
                    Arc::make_mut(&mut inst.request).flavor = old;
                }
                if let Some(ctx) = inst.migration_context.take().or(source_ctx) {
                    let request = Arc::make_mut(&mut inst.request);
                    request.pci_requests = ctx.old_pci_requests;
                    inst.numa_topology = ctx.old_numa_topology;
                    inst.nested = ctx.old_nested;
                }
                inst.new_flavor = None;
                inst.host = Some(names.host.clone());
                inst.node = Some(names.node.clone());
                inst.task_state = None;
                if inst.vm_state == "resized" {
                    inst.vm_state = "active".into();
                }
                changes
                    .instances
                    .insert(shared.uuid.clone(), Some(shared.clone()));
            }
        }
        Ok(changes)
    }
}
