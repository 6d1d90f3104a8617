//! The Placement consumers of the local claims, by Nova's rules: an instance's allocation under
//! its uuid; during a move, the source side under the migration's uuid.
//!
//! In: the tracker's committed records and usage. Out: [`Consumer`]s for [`DesiredState`].
//!
//! [`DesiredState`]: super::DesiredState

use std::collections::BTreeMap;

use uuid::Uuid;

use super::desired::{Consumer, ResourceKey, CONSUMER_INSTANCE, CONSUMER_MIGRATION};
use crate::tracker::pci::devices::DeviceStatus;
use crate::tracker::state::Tracker;
use crate::tracker::usage::UsageSource;

/// The Placement consumers of the local claims, as Nova holds them: an instance's allocation
/// under its uuid; during a move, the source side under the migration's uuid.
pub fn consumers(t: &Tracker) -> Vec<Consumer> {
    let usage = t.usage();
    let state = t.state();
    let mut out: BTreeMap<Uuid, Consumer> = BTreeMap::new();
    let owner = |instance: &str| -> (String, String) {
        let rec = state.instances.get(instance);
        (
            rec.and_then(|r| r.project_id.clone())
                .unwrap_or_else(|| "unknown".into()),
            rec.and_then(|r| r.user_id.clone())
                .unwrap_or_else(|| "unknown".into()),
        )
    };
    for c in &usage.consumers {
        let (uuid, kind) = match c.source {
            UsageSource::Instance | UsageSource::IncomingMigration => {
                (c.instance_uuid.clone(), CONSUMER_INSTANCE)
            }
            UsageSource::OutgoingMigration | UsageSource::SameNodeMigration => {
                match c.migration_id.and_then(|id| state.migrations.get(&id)) {
                    Some(m) => (m.uuid.clone(), CONSUMER_MIGRATION),
                    None => (c.instance_uuid.clone(), CONSUMER_INSTANCE),
                }
            }
        };
        let Ok(uuid) = Uuid::parse_str(&uuid) else {
            tracing::warn!(consumer = %uuid, "not a UUID; its usage is not reported as an allocation");
            continue;
        };
        let (project_id, user_id) = owner(&c.instance_uuid);
        let entry = out.entry(uuid).or_insert_with(|| Consumer {
            uuid,
            project_id,
            user_id,
            consumer_type: kind.to_string(),
            resources: BTreeMap::new(),
        });
        // Units held below the compute node land on their provider; the rest of a class on
        // the compute node.
        let mut below: BTreeMap<&crate::inventory::resources::ResourceClass, i64> = BTreeMap::new();
        for u in c.nested.iter().flat_map(|n| n.units.iter()) {
            if u.amount > 0 {
                *below.entry(&u.class).or_default() += u.amount;
                *entry
                    .resources
                    .entry(ResourceKey::Nested(
                        u.provider.clone(),
                        u.class.as_str().to_string(),
                    ))
                    .or_default() += u.amount as u64;
            }
        }
        for (class, amount) in &c.resources {
            let here = amount - below.get(class).copied().unwrap_or(0);
            if here > 0 {
                *entry
                    .resources
                    .entry(ResourceKey::Host(class.as_str().to_string()))
                    .or_default() += here as u64;
            }
        }
    }
    // Devices go to the instance's consumer here, else to its migration's.
    for d in state.devices.values() {
        if !matches!(d.status, DeviceStatus::Allocated | DeviceStatus::Claimed) {
            continue;
        }
        let Some(o) = &d.owner else { continue };
        let target = Uuid::parse_str(&o.instance_uuid)
            .ok()
            .filter(|u| out.contains_key(u))
            .or_else(|| {
                state
                    .migrations
                    .values()
                    .filter(|m| m.instance_uuid == o.instance_uuid && m.in_progress())
                    .filter_map(|m| Uuid::parse_str(&m.uuid).ok())
                    .find(|u| out.contains_key(u))
            });
        if let Some(u) = target {
            if let Some(c) = out.get_mut(&u) {
                c.resources.insert(ResourceKey::PciDevice(d.address), 1);
            }
        }
    }
    out.into_values()
        .filter(|c| !c.resources.is_empty())
        .collect()
}
