//! What each consumer should hold in Placement: the claims' resources placed on the providers
//! rtrack reports (the compute node, the sharing provider, vGPU/encryption/PMEM providers, PCI
//! children), as `DesiredState::expected`.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::desired::{Consumer, DesiredAllocation, ResourceKey};
use crate::probes::pci::PciAddress;
use crate::tracker::nested::NestedKey;

/// Where each kind of resource is reported.
pub struct AllocationPlaces<'a> {
    /// The compute node.
    pub node: Uuid,
    /// The sharing provider (DISK_GB), when configured.
    pub shared: Option<Uuid>,
    /// The provider of each vGPU parent, encryption model and PMEM label.
    pub nested: &'a BTreeMap<NestedKey, Uuid>,
    /// With PCI in Placement: each device's provider and class; without, devices are not
    /// allocated in Placement (Nova's).
    pub devices: Option<&'a BTreeMap<PciAddress, (Uuid, String)>>,
}

/// Each consumer's allocation by provider and class; a part whose provider is not reported is
/// left out with a warning.
pub fn expected_allocations(
    consumers: &[Consumer],
    places: &AllocationPlaces<'_>,
    warnings: &mut Vec<String>,
) -> BTreeMap<Uuid, DesiredAllocation> {
    let mut out = BTreeMap::new();
    for c in consumers {
        let mut resources: BTreeMap<Uuid, BTreeMap<String, u64>> = BTreeMap::new();
        for (key, amount) in &c.resources {
            if *amount == 0 {
                continue;
            }
            let (rp, class) = match key {
                ResourceKey::Host(class) => {
                    let rp = match places.shared {
                        Some(s) if class == "DISK_GB" => s,
                        _ => places.node,
                    };
                    (rp, class.clone())
                }
                ResourceKey::Nested(k, class) => match places.nested.get(k) {
                    Some(rp) => (*rp, class.clone()),
                    None => {
                        warnings.push(format!(
                            "consumer {}: the provider of {k} is not reported (the parent or model is gone); that part of its allocation is left out",
                            c.uuid
                        ));
                        continue;
                    }
                },
                // Without PCI in Placement, devices are not allocated there (Nova's).
                ResourceKey::PciDevice(_) if places.devices.is_none() => continue,
                ResourceKey::PciDevice(a) => match places.devices.and_then(|d| d.get(a)) {
                    Some((rp, class)) => (*rp, class.clone()),
                    None => {
                        warnings.push(format!(
                            "consumer {}: PCI device {a} is not reported in Placement; that part of its allocation is left out",
                            c.uuid
                        ));
                        continue;
                    }
                },
            };
            *resources.entry(rp).or_default().entry(class).or_default() += amount;
        }
        if resources.is_empty() {
            continue;
        }
        out.insert(
            c.uuid,
            DesiredAllocation {
                project_id: c.project_id.clone(),
                user_id: c.user_id.clone(),
                consumer_type: c.consumer_type.clone(),
                resources,
            },
        );
    }
    out
}
