//! State updates (Nova's `update_usage`): an instance's records changed to its new state, refused
//! when the rules would then count more than fits.
//!
//! In: the instance's uuid and an [`InstanceUpdate`] (a new vm or task state, host or node, or the
//! switch to its new flavor). Out: the records changed ([`Changes`]; a deleted or shelved-offloaded
//! instance's devices and claim are freed and its moves here ended), or a [`ClaimError`] (not
//! found, invalid, refused).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::InstanceUpdate;
use crate::inventory::resources::ResourceClass;
use crate::tracker::error::{ClaimError, Refusal};
use crate::tracker::model::{HostNames, InstanceRecord};
use crate::tracker::nova_states::{check_task_state, check_vm_state};
use crate::tracker::usage::on_node;
use crate::tracker::{Changes, Tracker};

impl Tracker {
    /// Nova's `update_usage`: applies an instance's new state; a deleted or shelved-offloaded
    /// instance stops counting and its devices are freed. A refusal leaves every record as it
    /// was.
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
        if up.apply_new_flavor && before.new_flavor.is_none() {
            // A well-formed request that the instance's state does not allow: refused before
            // anything changes.
            return Err(ClaimError::Conflict {
                id: uuid.to_string(),
                message: format!(
                    "apply_new_flavor: instance {uuid} has no new flavor (no resize in progress)"
                ),
            });
        }
        let counted_before = self.counted();
        let mut inst = before.clone();
        apply_update(Arc::make_mut(&mut inst), up, &self.settings.names);
        self.state.instances.insert(uuid.to_string(), inst.clone());
        // A state change may make the rules count again what they had stopped counting (an
        // instance back from `deleted`, a move back in a resize state): that is a grant, and
        // it must fit like one.
        if let Err(e) = self.check_counted_again(uuid, &counted_before) {
            self.state.instances.insert(uuid.to_string(), before);
            self.invalidate_usage();
            return Err(e);
        }
        let mut changes = Changes::default();
        if inst.releases_resources() {
            self.end_released(uuid, inst, &mut changes);
        } else {
            changes.instances.insert(uuid.to_string(), Some(inst));
        }
        Ok(changes)
    }

    /// What the rules count now: NUMA overcommits, nested conflicts and usage per class.
    fn counted(&mut self) -> Counted {
        let usage = self.usage();
        Counted {
            numa: self.numa_usage(&usage).overcommit(self.numa_host()),
            nested: self.nested_conflicts(&usage),
            used: usage.used.clone(),
        }
    }

    /// Refuses what an instance's new state makes the rules count beyond what fits: a NUMA
    /// overcommit, a nested conflict or a class short that `before` did not have.
    fn check_counted_again(&mut self, uuid: &str, before: &Counted) -> Result<(), ClaimError> {
        let after = self.counted();
        let numa_new: Vec<String> = after
            .numa
            .into_iter()
            .filter(|v| !before.numa.contains(v))
            .collect();
        if !numa_new.is_empty() {
            return Err(ClaimError::Conflict {
                id: uuid.to_string(),
                message: format!(
                    "instance {uuid} counted again in this state would overcommit NUMA cells: {}",
                    numa_new.join("; ")
                ),
            });
        }
        let nested_new: Vec<String> = after
            .nested
            .into_iter()
            .filter(|c| !before.nested.contains(c))
            .collect();
        if !nested_new.is_empty() {
            return Err(ClaimError::Conflict {
                id: uuid.to_string(),
                message: format!(
                    "instance {uuid} counted again in this state would overcommit its vGPUs or encryption contexts: {}",
                    nested_new.join("; ")
                ),
            });
        }
        let grown: BTreeMap<ResourceClass, i64> = after
            .used
            .iter()
            .filter(|(class, after)| **after > before.used.get(class).copied().unwrap_or(0))
            .map(|(class, after)| {
                (
                    class.clone(),
                    after - before.used.get(class).copied().unwrap_or(0),
                )
            })
            .collect();
        let shortfalls = self.shortfalls(&grown, &before.used);
        if !shortfalls.is_empty() {
            return Err(ClaimError::Refused(Box::new(Refusal {
                instance_uuid: uuid.to_string(),
                resources: shortfalls,
                pci: None,
                numa: None,
            })));
        }
        Ok(())
    }

    /// A deleted (or offloaded) instance: its moves here end, in-progress migrations go to
    /// `error`, its devices and claim are freed, and the record goes unless a move still needs it.
    fn end_released(&mut self, uuid: &str, inst: Arc<InstanceRecord>, changes: &mut Changes) {
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
            self.set_migration_status(id, "error", changes);
        }
        self.free_devices(uuid, None, changes);
        if self.state.claims.remove(uuid).is_some() {
            changes.claims.insert(uuid.to_string(), None);
        }
        self.state.instances.insert(uuid.to_string(), inst.clone());
        changes.instances.insert(uuid.to_string(), Some(inst));
        self.forget_instance_unless_moving(uuid, changes);
    }
}

/// What the rules count at one moment, to tell what a state change adds.
struct Counted {
    numa: Vec<String>,
    nested: BTreeSet<String>,
    used: BTreeMap<ResourceClass, i64>,
}

/// The record with the update applied: states, host and node; a live migration's end takes the
/// new placements, as Nova's post-migration does; `apply_new_flavor` (checked by the caller: a
/// new flavor exists) takes the new flavor and placement, as Nova's `apply_migration_context`.
fn apply_update(inst: &mut InstanceRecord, up: &InstanceUpdate, names: &HostNames) {
    if let Some(v) = &up.vm_state {
        inst.vm_state = v.clone();
    }
    if let Some(t) = &up.task_state {
        inst.task_state = if t.is_empty() { None } else { Some(t.clone()) };
    }
    let was_here = on_node(inst, names);
    if let Some(h) = &up.host {
        inst.host = Some(h.clone());
    }
    if let Some(n) = &up.node {
        inst.node = Some(n.clone());
    }
    if !was_here && on_node(inst, names) {
        if let Some(ctx) = &inst.migration_context {
            if ctx.new_numa_topology.is_some() || ctx.new_nested.is_some() {
                inst.numa_topology = ctx.new_numa_topology.clone();
                inst.nested = ctx.new_nested.clone();
            }
        }
    }
    if up.apply_new_flavor {
        if let Some(new) = inst.new_flavor.clone() {
            std::sync::Arc::make_mut(&mut inst.request).flavor = new;
            if let Some(ctx) = &inst.migration_context {
                inst.numa_topology = ctx.new_numa_topology.clone();
                inst.nested = ctx.new_nested.clone();
            }
        }
    }
}
