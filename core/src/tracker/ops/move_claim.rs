//! Nova's `_move_claim` (resize, cold or live migration, evacuation) in three steps: resolve
//! what the move is (the current request, source and destination, type, states, migration id),
//! check it against what is tracked (an idempotent retry answers the claim held), then test the
//! destination's resources and record the migration, the moving instance and the claim.
//!
//! In: a [`MoveRequest`] and the time. Out: a [`ClaimOutcome`] with its [`Changes`], or a
//! [`ClaimError`] (refused, conflict, invalid).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::claim::{TestKind, TestedClaim};
use super::{ClaimOutcome, MoveRequest, MoveType};
use crate::tracker::error::ClaimError;
use crate::tracker::model::{InstanceRecord, InstanceRequest, MigrationContext, MigrationRecord};
use crate::tracker::nested::NestedAllocation;
use crate::tracker::nova_states::{check_task_state, check_vm_state, move_is_counted};
use crate::tracker::numa::{FittedTopology, GuestTopology, PageSize};
use crate::tracker::resource_tracker::validate_uuid;
use crate::tracker::usage::on_node;
use crate::tracker::{Changes, ClaimRecord, Tracker};

/// What a move is, resolved from the request and what this host tracks.
struct ResolvedMove {
    uuid: String,
    /// The instance's request now (what this host records, else the caller's).
    current: InstanceRequest,
    source_compute: Option<String>,
    source_node: Option<String>,
    dest_compute: String,
    dest_node: String,
    /// This host is the destination.
    incoming: bool,
    /// This host is the source.
    outgoing: bool,
    move_type: MoveType,
    vm_state: String,
    task_state: String,
    /// The migration id.
    id: i64,
}

/// The guest's placement before and after the move.
struct Placements {
    current_numa: Option<Arc<FittedTopology>>,
    new_numa: Option<Arc<FittedTopology>>,
    current_nested: Option<Arc<NestedAllocation>>,
    new_nested: Option<Arc<NestedAllocation>>,
}

impl Tracker {
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
        let r = self.resolve_move(mv)?;
        if let Some(existing) = self.check_move(mv, &r, dry_run)? {
            return Ok((existing, Changes::default()));
        }
        let uuid = &r.uuid;
        // The guest's placement now: what this host records, else what the caller says.
        let current_numa: Option<Arc<FittedTopology>> = self
            .state
            .instances
            .get(uuid)
            .and_then(|i| i.numa_topology.clone())
            .or_else(|| mv.current_numa.clone().map(Arc::new));
        let tested = if r.incoming {
            let tested = self.test_claim(
                uuid,
                &mv.new,
                TestKind::Move { migration_id: r.id },
                &mv.instance.allocations,
                None,
            )?;
            if r.move_type == MoveType::LiveMigration {
                check_live_page_size(
                    uuid,
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
        let placements = Placements {
            current_numa,
            new_numa: tested.numa.map(Arc::new),
            // What the instance holds here now (none when it comes from another host).
            current_nested: self
                .state
                .instances
                .get(uuid)
                .and_then(|i| i.nested.clone()),
            new_nested: tested.nested.map(Arc::new),
        };
        let claim = ClaimRecord {
            instance_uuid: uuid.clone(),
            migration_id: Some(r.id),
            request: Arc::new(mv.new.clone()),
            assignments: tested.assignments,
            resources: tested.resources,
            numa_topology: placements.new_numa.clone(),
            nested: placements.new_nested.clone(),
            claimed_at: now,
        };
        if dry_run {
            return Ok(ClaimOutcome::would_fit(claim));
        }
        let mut changes = Changes::default();
        self.replace_devices(tested.devices, &mut changes);
        self.record_migration(mv, &r, now, &mut changes);
        self.record_moving_instance(mv, &r, placements, &mut changes);
        if r.incoming {
            let shared = Arc::new(claim.clone());
            self.state.move_claims.insert(r.id, shared.clone());
            changes.move_claims.insert(r.id, Some(shared));
        }
        Ok((ClaimOutcome::granted(claim), changes))
    }

    /// The move's parts: who moves, from where to where, of which type, in which states, under
    /// which migration id; refused when this host is neither end or Nova would not count it.
    fn resolve_move(&self, mv: &MoveRequest) -> Result<ResolvedMove, ClaimError> {
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
        let names = &self.settings.names;
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
        Ok(ResolvedMove {
            uuid,
            current,
            source_compute,
            source_node,
            dest_compute,
            dest_node,
            incoming,
            outgoing,
            move_type,
            vm_state: vm_state.to_string(),
            task_state: task_state.to_string(),
            id,
        })
    }

    /// The move against what is tracked: the same move claimed again answers the claim held
    /// (`Some`); a migration id or an instance the move cannot be is a conflict.
    fn check_move(
        &self,
        mv: &MoveRequest,
        r: &ResolvedMove,
        dry_run: bool,
    ) -> Result<Option<ClaimOutcome>, ClaimError> {
        let (uuid, id) = (&r.uuid, r.id);
        if let Some(existing) = self.state.move_claims.get(&id) {
            if &existing.instance_uuid == uuid && *existing.request == mv.new {
                return Ok(Some(ClaimOutcome {
                    claim: ClaimRecord::clone(existing),
                    existing: true,
                    dry_run,
                }));
            }
            return Err(ClaimError::Conflict {
                id: id.to_string(),
                message: format!("migration {id} already holds a different claim on this host"),
            });
        }
        if let Some(m) = self.state.migrations.get(&id) {
            if &m.instance_uuid != uuid {
                return Err(ClaimError::Conflict {
                    id: id.to_string(),
                    message: format!(
                        "migration {id} belongs to instance {}, not {uuid}",
                        m.instance_uuid
                    ),
                });
            }
        }
        let Some(existing) = self.state.instances.get(uuid) else {
            return Ok(None);
        };
        // What the tracker knows about the instance must agree with the move.
        if on_node(existing, &self.settings.names) && !r.outgoing {
            return Err(ClaimError::Conflict {
                id: uuid.clone(),
                message: format!(
                    "instance {uuid} is on this host; a move to this host must come from it (a same-node resize), not from {}/{}",
                    r.source_compute.as_deref().unwrap_or("?"),
                    r.source_node.as_deref().unwrap_or("?")
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
        Ok(None)
    }

    /// Records the migration (`pre-migrating`; a live migration's `accepted` stays) and moves
    /// the next free id past it.
    fn record_migration(
        &mut self,
        mv: &MoveRequest,
        r: &ResolvedMove,
        now: i64,
        changes: &mut Changes,
    ) {
        let (uuid, id) = (&r.uuid, r.id);
        let previous = self.state.migrations.get(&id).cloned();
        let status = match (r.move_type, previous.as_ref().map(|m| m.status.as_str())) {
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
            source_compute: r.source_compute.clone(),
            source_node: r.source_node.clone(),
            dest_compute: Some(r.dest_compute.clone()),
            dest_node: Some(r.dest_node.clone()),
            status,
            migration_type: r.move_type.as_str().to_string(),
            old_instance_type_id: Some(r.current.flavor.id),
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
    }

    /// Records the moving instance on its source with the move's context (old and new flavor,
    /// PCI requests, NUMA placement and nested units).
    fn record_moving_instance(
        &mut self,
        mv: &MoveRequest,
        r: &ResolvedMove,
        p: Placements,
        changes: &mut Changes,
    ) {
        let uuid = &r.uuid;
        let existing = self.state.instances.get(uuid).cloned();
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
            vm_state: r.vm_state.clone(),
            task_state: Some(r.task_state.clone()),
            host: r.source_compute.clone(),
            node: r.source_node.clone(),
            request: existing
                .as_ref()
                .map(|i| i.request.clone())
                .unwrap_or_else(|| Arc::new(r.current.clone())),
            numa_topology: p.current_numa.clone(),
            nested: p.current_nested.clone(),
            old_flavor: Some(r.current.flavor.clone()),
            new_flavor: Some(mv.new.flavor.clone()),
            migration_context: Some(MigrationContext {
                migration_id: r.id,
                old_pci_requests: r.current.pci_requests.clone(),
                new_pci_requests: mv.new.pci_requests.clone(),
                old_numa_topology: p.current_numa,
                new_numa_topology: p.new_numa,
                old_nested: p.current_nested,
                new_nested: p.new_nested,
            }),
        };
        let record = Arc::new(record);
        self.state.instances.insert(uuid.clone(), record.clone());
        changes.instances.insert(uuid.clone(), Some(record));
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
