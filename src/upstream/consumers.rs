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
use crate::tracker::Tracker;

/// The Placement consumers of the local claims, as Nova holds them: an instance's allocation
/// under its uuid; during a move, the source side (the old flavor) under the migration's uuid
/// (the tracker's usage says which holds what).
pub fn consumers(t: &Tracker) -> Vec<Consumer> {
    let usage = t.usage();
    let state = t.state();
    let mut out: BTreeMap<Uuid, Consumer> = BTreeMap::new();
    for c in &usage.consumers {
        let kind = if c.holder.migration {
            CONSUMER_MIGRATION
        } else {
            CONSUMER_INSTANCE
        };
        let Ok(uuid) = Uuid::parse_str(&c.holder.uuid) else {
            tracing::warn!(consumer = %c.holder.uuid, "not a UUID; its usage is not reported as an allocation");
            continue;
        };
        let rec = state.instances.get(&c.instance_uuid);
        let project_id = rec.and_then(|r| r.project_id.clone());
        let user_id = rec.and_then(|r| r.user_id.clone());
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
    // Devices go to the consumer that holds their side: during a same-node resize the old
    // requests' devices are the migration's, the new ones the instance's.
    for d in state.devices.values() {
        if !matches!(d.status, DeviceStatus::Allocated | DeviceStatus::Claimed) {
            continue;
        }
        let Some(o) = &d.owner else { continue };
        let inst = state.instances.get(&o.instance_uuid);
        let own = Uuid::parse_str(&o.instance_uuid)
            .ok()
            .filter(|u| out.contains_key(u));
        let migration = inst
            .and_then(|i| i.migration_context.as_ref())
            .and_then(|ctx| state.migrations.get(&ctx.migration_id))
            .filter(|m| m.in_progress())
            .and_then(|m| Uuid::parse_str(&m.uuid).ok())
            .filter(|u| out.contains_key(u));
        let old_side_only = inst
            .and_then(|i| i.migration_context.as_ref())
            .zip(o.request_id.as_deref())
            .is_some_and(|(ctx, r)| {
                ctx.old_pci_requests.iter().any(|q| q.request_id == r)
                    && !ctx.new_pci_requests.iter().any(|q| q.request_id == r)
            });
        let target = match (own, migration) {
            (Some(_), Some(m)) if old_side_only => Some(m),
            (Some(i), _) => Some(i),
            (None, m) => m,
        };
        if let Some(c) = target.and_then(|u| out.get_mut(&u)) {
            c.resources.insert(ResourceKey::PciDevice(d.address), 1);
        }
    }
    out.into_values()
        .filter(|c| !c.resources.is_empty())
        .collect()
}
