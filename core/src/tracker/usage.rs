//! Usage, rebuilt from the records every time it is needed, with Nova's rules
//! (`_update_usage_from_instances` and `_update_usage_from_migrations`):
//!
//! 1. Every instance on this node that still holds resources counts its flavor.
//! 2. Migrations that are still in progress (`error` counts; confirmed, reverted, failed,
//!    completed, cancelled and done do not), for instances that are resizing or
//!    live-migrating, the newest per instance, count:
//!    - same-node: the new flavor while the instance still has the old one, else the old flavor
//!      (held for a revert);
//!    - incoming, instance not yet here: the new flavor;
//!    - outgoing, instance gone from here: the old flavor, unless it was already cleared;
//!    - an instance that is here and counted already adds nothing more.
//!
//!    A migration whose instance records another migration in its context is stale: it counts
//!    nothing and the audit marks it `error`.
//!
//! In: this node's names ([`HostNames`]), the instance and migration records ([`InstanceRecord`],
//! [`MigrationRecord`]), and whether disk is shared. Out: a [`Usage`] (used per class, the
//! [`Consumer`]s counted and why, the stale migrations), and the ComputeNode's `stats` counters.
//!
//! Deriving usage rather than keeping running totals means it cannot drift.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use super::model::{FlavorUsage, HostNames, InstanceRecord, MigrationRecord, ResourceRules};
use super::nested::NestedAllocation;
use super::numa::FittedTopology;
use crate::inventory::resources::ResourceClass;

/// Why an instance or migration is counted here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UsageSource {
    /// The instance is on this node.
    Instance,
    /// An incoming move (new flavor).
    IncomingMigration,
    /// An outgoing move held for a revert (old flavor).
    OutgoingMigration,
    /// A resize on this very node (the other flavor).
    SameNodeMigration,
}

/// The Placement consumer that holds a counted side, by Nova's rule: during a resize, a cold or
/// a live migration the source side (the old flavor) is the migration's, the destination side
/// the instance's; an evacuation keeps both on the instance.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Holder {
    /// The consumer's uuid: the instance's, or the migration's.
    pub uuid: String,
    /// It is the migration's (Placement `consumer_type` MIGRATION), not the instance's.
    pub migration: bool,
}

/// One counted consumer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Consumer {
    /// The instance counted (the moving one, for migration usage).
    pub instance_uuid: String,
    /// Migration, for migration usage.
    pub migration_id: Option<i64>,
    /// Why the resources count here: the instance itself, or which side of a move.
    pub source: UsageSource,
    /// Who holds it in Placement.
    pub holder: Holder,
    /// Flavor counted.
    pub flavor_id: i64,
    /// Resources counted.
    pub resources: BTreeMap<ResourceClass, i64>,
    /// The NUMA placement counted with it (the instance's, or the move's side), if any.
    #[serde(skip)]
    pub numa: Option<Arc<FittedTopology>>,
    /// Its vGPUs and encryption contexts (the instance's, or the move's side), if any.
    #[serde(skip)]
    pub nested: Option<Arc<NestedAllocation>>,
}

/// Usage of the node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Used per class (reserved amounts not included).
    pub used: BTreeMap<ResourceClass, i64>,
    /// What is counted, and why.
    pub consumers: Vec<Consumer>,
    /// Instances on this node that count.
    pub tracked_instances: BTreeSet<String>,
    /// Migrations counted, by instance.
    pub tracked_migrations: BTreeMap<String, i64>,
    /// Migrations found stale (their instance's context names another migration).
    pub stale_migrations: Vec<i64>,
}

impl Usage {
    /// Amount used of a class.
    pub fn used(&self, class: ResourceClass) -> i64 {
        *self.used.get(&class).unwrap_or(&0)
    }
}

/// True if the instance is on this node.
pub fn on_node(inst: &InstanceRecord, names: &HostNames) -> bool {
    inst.host.as_deref() == Some(names.host.as_str())
        && inst.node.as_deref() == Some(names.node.as_str())
}

fn flavor_for<'a>(
    inst: &'a InstanceRecord,
    m: &MigrationRecord,
    new: bool,
) -> Option<&'a FlavorUsage> {
    // Only resizes stash flavors; other moves keep the instance's flavor (Nova's _get_flavor).
    if m.migration_type == "resize" {
        if new {
            inst.new_flavor.as_ref()
        } else {
            inst.old_flavor.as_ref()
        }
    } else {
        Some(&inst.request.flavor)
    }
}

/// How the host counts: disk on a sharing provider, CPUs in legacy mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CountingRules {
    /// DISK_GB lives on a sharing provider.
    pub shared_disk: bool,
    /// Neither CPU set is configured: pinned CPUs count as VCPU.
    pub legacy_cpus: bool,
}

/// What a migration's side holds: its NUMA placement and its nested units (Nova's
/// `_get_migration_context_resource`).
fn side_placement(inst: &InstanceRecord, new: bool) -> Placed {
    let Some(ctx) = inst.migration_context.as_ref() else {
        return (None, None);
    };
    if new {
        (ctx.new_numa_topology.clone(), ctx.new_nested.clone())
    } else {
        (ctx.old_numa_topology.clone(), ctx.old_nested.clone())
    }
}

/// Where a consumer's resources are: NUMA cells, nested providers.
type Placed = (Option<Arc<FittedTopology>>, Option<Arc<NestedAllocation>>);

/// Computes usage from the records.
pub fn compute_usage(
    names: &HostNames,
    instances: &BTreeMap<String, Arc<InstanceRecord>>,
    migrations: &BTreeMap<i64, MigrationRecord>,
    rules: CountingRules,
) -> Usage {
    let mut counting = Counting {
        usage: Usage::default(),
        rules,
        own: BTreeMap::new(),
    };
    for inst in instances.values() {
        if on_node(inst, names) && !inst.releases_resources() {
            counting
                .own
                .insert(&inst.uuid, counting.usage.consumers.len());
            counting.add(
                inst,
                &inst.request.flavor,
                (inst.numa_topology.clone(), inst.nested.clone()),
                UsageSource::Instance,
                None,
                Holder {
                    uuid: inst.uuid.clone(),
                    migration: false,
                },
            );
            counting.usage.tracked_instances.insert(inst.uuid.clone());
        }
    }
    for m in newest_moves(instances, migrations).values() {
        counting.count_move(names, &instances[&m.instance_uuid], m);
    }
    counting.usage
}

/// Usage being counted, and where each instance's own count is in `usage.consumers`.
struct Counting<'a> {
    usage: Usage,
    rules: CountingRules,
    own: BTreeMap<&'a str, usize>,
}

impl Counting<'_> {
    /// Counts a flavor for `inst` (or its migration), held in Placement by `holder`.
    fn add(
        &mut self,
        inst: &InstanceRecord,
        flavor: &FlavorUsage,
        (numa, nested): Placed,
        source: UsageSource,
        migration_id: Option<i64>,
        holder: Holder,
    ) {
        let resources = flavor.resources(ResourceRules {
            is_bfv: inst.request.is_bfv,
            shared_disk: self.rules.shared_disk,
            legacy_cpus: self.rules.legacy_cpus,
        });
        for (class, amount) in &resources {
            *self.usage.used.entry(class.clone()).or_default() += amount;
        }
        self.usage.consumers.push(Consumer {
            instance_uuid: inst.uuid.clone(),
            migration_id,
            source,
            holder,
            flavor_id: flavor.id,
            resources,
            numa,
            nested,
        });
    }

    /// Nova's `_update_usage_from_migration` for the newest move `m` of `inst`.
    fn count_move(&mut self, names: &HostNames, inst: &InstanceRecord, m: &MigrationRecord) {
        if let Some(ctx) = &inst.migration_context {
            if ctx.migration_id != m.id {
                self.usage.stale_migrations.push(m.id);
                return;
            }
        }
        let incoming = m.dest_compute.as_deref() == Some(names.host.as_str())
            && m.dest_node.as_deref() == Some(names.node.as_str());
        let outbound = m.source_compute.as_deref() == Some(names.host.as_str())
            && m.source_node.as_deref() == Some(names.node.as_str());
        let tracked = self.usage.tracked_instances.contains(&inst.uuid);
        let by_instance = Holder {
            uuid: inst.uuid.clone(),
            migration: false,
        };
        // Nova moves the source side to the migration's consumer for every move but an
        // evacuation (the source host is down; the instance holds both until it comes back).
        let by_migration = if m.migration_type == "evacuation" {
            by_instance.clone()
        } else {
            Holder {
                uuid: m.uuid.clone(),
                migration: true,
            }
        };
        let counted = if incoming && outbound {
            let new = Some(inst.request.flavor.id) == m.old_instance_type_id;
            // The instance's own count is the side it has now: the old one (the migration's)
            // until the new flavor is applied.
            if new {
                hold_instance_as(&mut self.usage, &self.own, &inst.uuid, &by_migration);
            }
            let holder = if new { by_instance } else { by_migration };
            flavor_for(inst, m, new).map(|f| (f, new, UsageSource::SameNodeMigration, holder))
        } else if incoming && !tracked {
            flavor_for(inst, m, true)
                .map(|f| (f, true, UsageSource::IncomingMigration, by_instance))
        } else if outbound && !tracked {
            flavor_for(inst, m, false)
                .map(|f| (f, false, UsageSource::OutgoingMigration, by_migration))
        } else {
            // The instance is still here and counted as itself; while it leaves, the source
            // side is the migration's in Placement.
            if outbound && tracked && by_migration.migration {
                hold_instance_as(&mut self.usage, &self.own, &inst.uuid, &by_migration);
            }
            None
        };
        if let Some((flavor, new, source, holder)) = counted {
            let placed = side_placement(inst, new);
            self.add(inst, flavor, placed, source, Some(m.id), holder);
            self.usage
                .tracked_migrations
                .insert(inst.uuid.clone(), m.id);
        }
    }
}

/// The newest in-progress migration per instance that is resizing or live-migrating: by update
/// (else creation) time; on a tie, the higher id (created later).
fn newest_moves<'a>(
    instances: &BTreeMap<String, Arc<InstanceRecord>>,
    migrations: &'a BTreeMap<i64, MigrationRecord>,
) -> BTreeMap<&'a str, &'a MigrationRecord> {
    let mut newest: BTreeMap<&str, &MigrationRecord> = BTreeMap::new();
    for m in migrations.values().filter(|m| m.in_progress()) {
        let Some(inst) = instances.get(&m.instance_uuid) else {
            continue;
        };
        if !inst.in_resize_state() && !inst.live_migrating() {
            continue;
        }
        let time = |x: &MigrationRecord| {
            let t = if x.updated_at > 0 {
                x.updated_at
            } else {
                x.created_at
            };
            (t, x.id)
        };
        match newest.get(m.instance_uuid.as_str()) {
            Some(other) if time(other) >= time(m) => {}
            _ => {
                newest.insert(&m.instance_uuid, m);
            }
        }
    }
    newest
}

/// The instance's own count (not its migrations') is held in Placement by `holder`.
fn hold_instance_as(
    usage: &mut Usage,
    own: &BTreeMap<&str, usize>,
    instance: &str,
    holder: &Holder,
) {
    if let Some(c) = own.get(instance).and_then(|i| usage.consumers.get_mut(*i)) {
        c.holder = holder.clone();
    }
}

/// Nova's compute stats counters for the instances counted on this node.
pub fn stats(
    instances: &BTreeMap<String, Arc<InstanceRecord>>,
    usage: &Usage,
    failed_builds: u64,
) -> BTreeMap<String, String> {
    // Counted by (prefix, value) borrowed from the records; the names are built once per
    // distinct key, not once per instance.
    let mut by_part: BTreeMap<(&str, &str), i64> = BTreeMap::new();
    for uuid in &usage.tracked_instances {
        let Some(inst) = instances.get(uuid) else {
            continue;
        };
        for key in [
            ("num_instances", ""),
            ("num_vm_", inst.vm_state.as_str()),
            ("num_task_", inst.task_state.as_deref().unwrap_or("None")),
            ("num_os_type_", inst.os_type.as_deref().unwrap_or("None")),
            ("num_proj_", inst.project_id.as_deref().unwrap_or("None")),
        ] {
            *by_part.entry(key).or_default() += 1;
        }
    }
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    for ((prefix, value), n) in by_part {
        *counts.entry(format!("{prefix}{value}")).or_default() += n;
    }
    let get = |counts: &BTreeMap<String, i64>, k: &str| *counts.get(k).unwrap_or(&0);
    let io = [
        "num_vm_building",
        "num_task_resize_migrating",
        "num_task_rebuilding",
        "num_task_resize_prep",
        "num_task_image_snapshot",
        "num_task_image_backup",
        "num_task_rescuing",
        "num_task_unshelving",
    ]
    .iter()
    .map(|k| get(&counts, k))
    .sum::<i64>();
    let mut out: BTreeMap<String, String> = counts
        .into_iter()
        .map(|(k, v)| (k, v.to_string()))
        .collect();
    if !usage.tracked_instances.is_empty() {
        out.insert("io_workload".into(), io.to_string());
    }
    out.insert("failed_builds".into(), failed_builds.to_string());
    out
}

/// Nova's `calculate_workload`: instances with a task in progress.
pub fn current_workload(stats: &BTreeMap<String, String>) -> i64 {
    stats
        .iter()
        .filter(|(k, _)| k.starts_with("num_task") && !k.ends_with("None"))
        .map(|(_, v)| v.parse::<i64>().unwrap_or(0))
        .sum()
}
