//! Moves (Nova's `_move_claim`, `drop_move_claim`, confirm and revert): resolve what the move
//! is (current request under the lock, source and destination, type), check it against what is
//! tracked and what Nova's usage rules would count, then record the migration and the claim.
//!
//! In: a [`MoveRequest`] (or a migration id to confirm or revert) and the time. Out: a
//! [`ClaimOutcome`] with the migration recorded and, at the destination, the claim, or the records
//! a confirm or revert changes; with the [`Changes`] to commit, or a [`ClaimError`] (refused,
//! conflict, not found).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::claim::{TestKind, TestedClaim};
use super::{ClaimOutcome, MoveRequest, MoveType};
use crate::probes::pci::PciAddress;
use crate::tracker::error::ClaimError;
use crate::tracker::model::{InstanceRecord, MigrationContext, MigrationRecord};
use crate::tracker::numa::{FittedTopology, GuestTopology, PageSize};
use crate::tracker::pci::free::Held;
use crate::tracker::state::{validate_uuid, Changes, ClaimRecord, Tracker};
use crate::tracker::states::{check_task_state, check_vm_state, move_is_counted};
use crate::tracker::usage::on_node;

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
            if let Some(inst) = self.state.instances.get_mut(&m.instance_uuid) {
                if !on_node(inst, &self.settings.names) {
                    let uuid = inst.uuid.clone();
                    self.state.instances.remove(&uuid);
                    changes.instances.insert(uuid, None);
                } else if inst
                    .migration_context
                    .as_ref()
                    .is_some_and(|c| c.migration_id == id)
                {
                    inst.migration_context = None;
                    inst.new_flavor = None;
                    changes
                        .instances
                        .insert(inst.uuid.clone(), Some(inst.clone()));
                }
            }
        }
    }

    /// Nova's `_move_claim` (resize, cold or live migration, evacuation): at the destination,
    /// checks and claims the new flavor's resources and PCI devices (for a live migration, the
    /// devices Nova claims in `check_can_live_migrate_destination`: the flavor's and the ports',
    /// on the destination's NUMA cells) and records the migration (status `pre-migrating`;
    /// `accepted` stays for live migration). At the source, records the outgoing migration
    /// without claiming anything.
    pub fn move_claim(
        &mut self,
        mv: &MoveRequest,
        now: i64,
        dry_run: bool,
    ) -> Result<(ClaimOutcome, Changes), ClaimError> {
        self.invalidate_usage();
        let uuid = mv.instance.uuid.clone();
        validate_uuid(&uuid, "instance.uuid")?;
        let current = match &mv.current {
            Some(c) => c.clone(),
            None => self
                .state
                .instances
                .get(&uuid)
                .map(|r| (*r.request).clone())
                .unwrap_or_else(|| mv.new.clone()),
        };
        let names = self.settings.names.clone();
        let source_compute = mv
            .source_compute
            .clone()
            .or_else(|| mv.instance.host.clone());
        let source_node = mv.source_node.clone().or_else(|| mv.instance.node.clone());
        let dest_compute = mv
            .dest_compute
            .clone()
            .unwrap_or_else(|| names.host.clone());
        let dest_node = mv.dest_node.clone().unwrap_or_else(|| names.node.clone());
        let incoming = dest_compute == names.host && dest_node == names.node;
        let outgoing = source_compute.as_deref() == Some(names.host.as_str())
            && source_node.as_deref() == Some(names.node.as_str());
        if !incoming && !outgoing {
            // Well formed, but sent to a host the move does not involve.
            return Err(ClaimError::Conflict {
                id: uuid.clone(),
                message: format!(
                    "neither source ({}/{}) nor destination ({dest_compute}/{dest_node}) is this host ({}/{})",
                    source_compute.as_deref().unwrap_or("?"),
                    source_node.as_deref().unwrap_or("?"),
                    names.host,
                    names.node
                ),
            });
        }
        let move_type = mv
            .move_type
            .unwrap_or(if mv.new.flavor.id != current.flavor.id {
                MoveType::Resize
            } else {
                MoveType::Migration
            });
        let default_task = match move_type {
            MoveType::LiveMigration => "migrating",
            MoveType::Evacuation => "rebuilding",
            _ => "resize_prep",
        };
        let vm_state = mv.instance.vm_state.as_deref().unwrap_or("active");
        let task_state = mv.instance.task_state.as_deref().unwrap_or(default_task);
        check_vm_state(vm_state, "instance.vm_state")?;
        check_task_state(task_state, "instance.task_state", false)?;
        if incoming && !move_is_counted(vm_state, Some(task_state)) {
            // Nova's usage rules count a move only while its instance is resizing or
            // live-migrating; one granted in any other state would hold nothing.
            return Err(ClaimError::Conflict {
                id: uuid.clone(),
                message: format!(
                    "a move of instance {uuid} with vm_state {vm_state} and task_state {task_state} would not be counted by Nova's usage rules, so it is refused; moves are counted for vm_state active or stopped with a resize or rebuild task state, resized, or active or paused with task_state migrating"
                ),
            });
        }
        let id = match mv.migration_id {
            Some(id) if id > 0 => id,
            Some(id) => {
                return Err(ClaimError::Invalid {
                    field: "migration_id".into(),
                    message: format!("{id} is not a positive id"),
                })
            }
            None => self.state.next_migration_id.max(1),
        };

        // Idempotent retry of the same move claim.
        if let Some(existing) = self.state.move_claims.get(&id) {
            if existing.instance_uuid == uuid && *existing.request == mv.new {
                return Ok((
                    ClaimOutcome {
                        claim: existing.clone(),
                        existing: true,
                        dry_run,
                    },
                    Changes::default(),
                ));
            }
            return Err(ClaimError::Conflict {
                id: id.to_string(),
                message: format!("migration {id} already holds a different claim on this host"),
            });
        }
        if let Some(m) = self.state.migrations.get(&id) {
            if m.instance_uuid != uuid {
                return Err(ClaimError::Conflict {
                    id: id.to_string(),
                    message: format!(
                        "migration {id} belongs to instance {}, not {uuid}",
                        m.instance_uuid
                    ),
                });
            }
        }
        if let Some(existing) = self.state.instances.get(&uuid) {
            // What the tracker knows about the instance must agree with the move.
            if on_node(existing, &names) && !outgoing {
                return Err(ClaimError::Conflict {
                    id: uuid.clone(),
                    message: format!(
                        "instance {uuid} is on this host; a move to this host must come from it (a same-node resize), not from {}/{}",
                        source_compute.as_deref().unwrap_or("?"),
                        source_node.as_deref().unwrap_or("?")
                    ),
                });
            }
            if let Some(ctx) = &existing.migration_context {
                let other_in_progress = ctx.migration_id != id
                    && self
                        .state
                        .migrations
                        .get(&ctx.migration_id)
                        .is_some_and(MigrationRecord::in_progress);
                if other_in_progress {
                    return Err(ClaimError::Conflict {
                        id: uuid.clone(),
                        message: format!(
                            "instance {uuid} is already moving (migration {}); confirm or revert it first",
                            ctx.migration_id
                        ),
                    });
                }
            }
        }

        // The guest's placement now: what this host records, else what the caller says.
        let current_numa: Option<Arc<FittedTopology>> = self
            .state
            .instances
            .get(&uuid)
            .and_then(|i| i.numa_topology.clone())
            .or_else(|| mv.current_numa.clone().map(Arc::new));
        let tested = if incoming {
            let tested = self.test_claim(
                &uuid,
                &mv.new,
                TestKind::Move { migration_id: id },
                &mv.instance.allocations,
                None,
            )?;
            if move_type == MoveType::LiveMigration {
                check_live_page_size(
                    &uuid,
                    current_numa.as_deref(),
                    tested.numa.as_ref(),
                    mv.new.numa.as_ref(),
                )?;
            }
            tested
        } else {
            TestedClaim {
                devices: None,
                assignments: Vec::new(),
                resources: BTreeMap::new(),
                numa: None,
                nested: None,
            }
        };
        let new_numa = tested.numa.map(Arc::new);
        let new_nested = tested.nested.map(Arc::new);
        // What the instance holds here now (none when it comes from another host).
        let current_nested = self
            .state
            .instances
            .get(&uuid)
            .and_then(|i| i.nested.clone());
        let claim = ClaimRecord {
            instance_uuid: uuid.clone(),
            migration_id: Some(id),
            request: Arc::new(mv.new.clone()),
            assignments: tested.assignments,
            resources: tested.resources,
            numa_topology: new_numa.clone(),
            nested: new_nested.clone(),
            claimed_at: now,
        };
        if dry_run {
            return Ok((
                ClaimOutcome {
                    claim,
                    existing: false,
                    dry_run: true,
                },
                Changes::default(),
            ));
        }

        let mut changes = Changes::default();
        self.replace_devices(tested.devices, &mut changes);
        let previous = self.state.migrations.get(&id).cloned();
        let status = match (move_type, previous.as_ref().map(|m| m.status.as_str())) {
            (MoveType::LiveMigration, Some("accepted")) => "accepted".to_string(),
            _ => "pre-migrating".to_string(),
        };
        let migration = MigrationRecord {
            id,
            uuid: mv
                .migration_uuid
                .clone()
                .or(previous.as_ref().map(|m| m.uuid.clone()))
                .unwrap_or_else(|| {
                    uuid::Uuid::new_v5(
                        &uuid::Uuid::NAMESPACE_OID,
                        format!("rtrack.migration.{uuid}.{id}").as_bytes(),
                    )
                    .hyphenated()
                    .to_string()
                }),
            instance_uuid: uuid.clone(),
            source_compute: source_compute.clone(),
            source_node: source_node.clone(),
            dest_compute: Some(dest_compute),
            dest_node: Some(dest_node),
            status,
            migration_type: move_type.as_str().to_string(),
            old_instance_type_id: Some(current.flavor.id),
            new_instance_type_id: Some(mv.new.flavor.id),
            created_at: previous.as_ref().map_or(now, |m| m.created_at),
            updated_at: now,
        };
        self.state.migrations.insert(id, migration.clone());
        changes.migrations.insert(id, Some(migration));
        if self.state.next_migration_id <= id {
            self.state.next_migration_id = id + 1;
            changes.counters = Some(self.counters());
        }

        let existing = self.state.instances.get(&uuid).cloned();
        let record = InstanceRecord {
            uuid: uuid.clone(),
            project_id: mv
                .instance
                .project_id
                .clone()
                .or(existing.as_ref().and_then(|i| i.project_id.clone())),
            user_id: mv
                .instance
                .user_id
                .clone()
                .or(existing.as_ref().and_then(|i| i.user_id.clone())),
            os_type: mv
                .instance
                .os_type
                .clone()
                .or(existing.as_ref().and_then(|i| i.os_type.clone())),
            vm_state: vm_state.to_string(),
            task_state: Some(task_state.to_string()),
            host: source_compute,
            node: source_node,
            request: existing
                .as_ref()
                .map(|i| i.request.clone())
                .unwrap_or_else(|| Arc::new(current.clone())),
            numa_topology: current_numa.clone(),
            nested: current_nested.clone(),
            old_flavor: Some(current.flavor.clone()),
            new_flavor: Some(mv.new.flavor.clone()),
            migration_context: Some(MigrationContext {
                migration_id: id,
                old_pci_requests: current.pci_requests.clone(),
                new_pci_requests: mv.new.pci_requests.clone(),
                old_numa_topology: current_numa,
                new_numa_topology: new_numa,
                old_nested: current_nested,
                new_nested,
            }),
        };
        self.state.instances.insert(uuid.clone(), record.clone());
        changes.instances.insert(uuid.clone(), Some(record));
        if incoming {
            self.state.move_claims.insert(id, claim.clone());
            changes.move_claims.insert(id, Some(claim.clone()));
        }
        Ok((
            ClaimOutcome {
                claim,
                existing: false,
                dry_run: false,
            },
            changes,
        ))
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
            if let Some(inst) = self.state.instances.get_mut(&uuid) {
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
                changes.instances.insert(uuid.clone(), Some(inst.clone()));
                let request = inst.request.clone();
                if let Some(mut claim) = self.state.move_claims.remove(&id) {
                    changes.move_claims.insert(id, None);
                    claim.migration_id = None;
                    claim.request = request;
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
            if let Some(inst) = self.state.instances.get_mut(&m.instance_uuid) {
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
                    .insert(inst.uuid.clone(), Some(inst.clone()));
            }
        }
        Ok(changes)
    }
}

/// Nova's `_test_live_migration_page_size`: a live-migrated guest whose page size was left to
/// the host (`large`, `any`) must get the same size on the destination as it has now.
fn check_live_page_size(
    uuid: &str,
    current: Option<&FittedTopology>,
    fitted: Option<&FittedTopology>,
    requested: Option<&GuestTopology>,
) -> Result<(), ClaimError> {
    let (Some(fitted), Some(requested)) = (fitted, requested) else {
        return Ok(());
    };
    if !matches!(
        requested.pagesize,
        Some(PageSize::Large | PageSize::Any | PageSize::Small)
    ) {
        return Ok(());
    }
    let Some(current) = current else {
        return Err(ClaimError::Invalid {
            field: "instance.numa_topology".into(),
            message: format!(
                "instance {uuid} asks for page size {:?} and is live-migrating from another host: its current numa_topology (an InstanceNUMATopology primitive) is needed to keep its page size",
                requested.pagesize.map(i64::from).unwrap_or_default()
            ),
        });
    };
    let now = current.cells.first().and_then(|c| c.pagesize_kb);
    let then = fitted.cells.first().and_then(|c| c.pagesize_kb);
    if now != then {
        return Err(ClaimError::Conflict {
            id: uuid.to_string(),
            message: format!(
                "Requested page size is different from current page size: the guest has {} KiB pages, this host would give {} KiB",
                now.map_or("no".into(), |p| p.to_string()),
                then.map_or("no".into(), |p| p.to_string())
            ),
        });
    }
    Ok(())
}
