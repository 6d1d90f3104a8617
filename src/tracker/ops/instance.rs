//! State updates (Nova's `update_usage`): an instance's records changed to its new state, refused
//! when the rules would then count more than fits.
//!
//! In: the instance's uuid and an [`InstanceUpdate`] (a new vm or task state, host or node, or the
//! switch to its new flavor). Out: the records changed ([`Changes`]; a deleted or shelved-offloaded
//! instance's devices and claim are freed and its moves here ended), or a [`ClaimError`] (not
//! found, invalid, refused).

use std::collections::BTreeMap;

use super::InstanceUpdate;
use crate::inventory::resources::ResourceClass;
use crate::tracker::error::{ClaimError, Refusal};
use crate::tracker::nova_states::{check_task_state, check_vm_state};
use crate::tracker::{Changes, Tracker};

impl Tracker {
    /// Nova's `update_usage`: applies an instance's new state; a deleted or shelved-offloaded
    /// instance stops counting and its devices are freed.
    pub fn update_instance(
        &mut self,
        uuid: &str,
        up: &InstanceUpdate,
    ) -> Result<Changes, ClaimError> {
        self.invalidate_usage();
        if let Some(v) = &up.vm_state {
            check_vm_state(v, "vm_state")?;
        }
        if let Some(t) = &up.task_state {
            check_task_state(t, "task_state", true)?;
        }
        let Some(before) = self.state.instances.get(uuid).cloned() else {
            return Err(ClaimError::NotFound {
                what: "instance",
                id: uuid.to_string(),
            });
        };
        let usage_before = self.usage();
        let numa_before = self.numa_usage(&usage_before).overcommit(self.numa_host());
        let nested_before = self.nested_conflicts(&usage_before);
        let names = self.settings.names.clone();
        let used_before = usage_before.used;
        let Some(inst) = self.state.instances.get_mut(uuid) else {
            return Err(ClaimError::NotFound {
                what: "instance",
                id: uuid.to_string(),
            });
        };
        if let Some(v) = &up.vm_state {
            inst.vm_state = v.clone();
        }
        if let Some(t) = &up.task_state {
            inst.task_state = if t.is_empty() { None } else { Some(t.clone()) };
        }
        let was_here = crate::tracker::usage::on_node(inst, &names);
        if let Some(h) = &up.host {
            inst.host = Some(h.clone());
        }
        if let Some(n) = &up.node {
            inst.node = Some(n.clone());
        }
        // Moved here by its state (a live migration's end): it takes its new placements, as
        // Nova's post-migration does.
        if !was_here && crate::tracker::usage::on_node(inst, &names) {
            if let Some(ctx) = &inst.migration_context {
                if ctx.new_numa_topology.is_some() || ctx.new_nested.is_some() {
                    inst.numa_topology = ctx.new_numa_topology.clone();
                    inst.nested = ctx.new_nested.clone();
                }
            }
        }
        if up.apply_new_flavor {
            let Some(new) = inst.new_flavor.clone() else {
                // A well-formed request that the instance's state does not allow.
                return Err(ClaimError::Conflict {
                    id: uuid.to_string(),
                    message: format!("apply_new_flavor: instance {uuid} has no new flavor (no resize in progress)"),
                });
            };
            std::sync::Arc::make_mut(&mut inst.request).flavor = new;
            // Nova's apply_migration_context: the instance takes its new placement.
            if let Some(ctx) = &inst.migration_context {
                inst.numa_topology = ctx.new_numa_topology.clone();
                inst.nested = ctx.new_nested.clone();
            }
        }
        let inst = inst.clone();
        // A state change may make the rules count again what they had stopped counting (an
        // instance back from `deleted`, a move back in a resize state): that is a grant, and
        // it must fit like one.
        let usage_after = self.usage();
        let numa_after = self.numa_usage(&usage_after).overcommit(self.numa_host());
        let nested_after = self.nested_conflicts(&usage_after);
        let used_after = usage_after.used;
        let numa_new: Vec<String> = numa_after
            .into_iter()
            .filter(|v| !numa_before.contains(v))
            .collect();
        if !numa_new.is_empty() {
            self.state.instances.insert(uuid.to_string(), before);
            return Err(ClaimError::Conflict {
                id: uuid.to_string(),
                message: format!(
                    "instance {uuid} counted again in this state would overcommit NUMA cells: {}",
                    numa_new.join("; ")
                ),
            });
        }
        let nested_new: Vec<String> = nested_after
            .into_iter()
            .filter(|c| !nested_before.contains(c))
            .collect();
        if !nested_new.is_empty() {
            self.state.instances.insert(uuid.to_string(), before);
            return Err(ClaimError::Conflict {
                id: uuid.to_string(),
                message: format!(
                    "instance {uuid} counted again in this state would overcommit its vGPUs or encryption contexts: {}",
                    nested_new.join("; ")
                ),
            });
        }
        let grown: BTreeMap<ResourceClass, i64> = used_after
            .iter()
            .filter(|(class, after)| **after > used_before.get(class).copied().unwrap_or(0))
            .map(|(class, after)| {
                (
                    class.clone(),
                    after - used_before.get(class).copied().unwrap_or(0),
                )
            })
            .collect();
        let shortfalls = self.shortfalls(&grown, &used_before);
        if !shortfalls.is_empty() {
            self.state.instances.insert(uuid.to_string(), before);
            return Err(ClaimError::Refused(Box::new(Refusal {
                instance_uuid: uuid.to_string(),
                resources: shortfalls,
                pci: None,
                numa: None,
            })));
        }
        let mut changes = Changes::default();
        if inst.releases_resources() {
            // Deleted (or offloaded) while moving: its moves here end too.
            let moves: Vec<i64> = self
                .state
                .move_claims
                .iter()
                .filter(|(_, c)| c.instance_uuid == uuid)
                .map(|(id, _)| *id)
                .collect();
            for id in moves {
                self.state.move_claims.remove(&id);
                changes.move_claims.insert(id, None);
            }
            let in_progress: Vec<i64> = self
                .state
                .migrations
                .values()
                .filter(|m| m.instance_uuid == uuid && m.in_progress())
                .map(|m| m.id)
                .collect();
            for id in in_progress {
                self.set_migration_status(id, "error", &mut changes);
            }
            self.free_devices(uuid, None, &mut changes);
            if self.state.claims.remove(uuid).is_some() {
                changes.claims.insert(uuid.to_string(), None);
            }
            self.state.instances.insert(uuid.to_string(), inst.clone());
            changes.instances.insert(uuid.to_string(), Some(inst));
            self.forget_instance_unless_moving(uuid, &mut changes);
        } else {
            changes.instances.insert(uuid.to_string(), Some(inst));
        }
        Ok(changes)
    }
}
