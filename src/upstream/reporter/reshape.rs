//! Moving a class from the compute node to its children with Placement's reshaper, as
//! nova-compute does at startup (Stein's vGPU reshape, 2025.2's memory encryption one): an older
//! nova-compute left `VGPU` (or `MEM_ENCRYPTION_CONTEXT`) inventory on the root, with instances
//! allocated against it; rtrack reports that class on the children. A plain inventory update
//! cannot remove the root's allocated inventory, so the root's inventory and every affected
//! consumer's allocation are replaced in one transaction (`POST /reshaper`).
//!
//! In: the desired state, the cached tree (usages included) and the affected consumers' current
//! allocations. Out: the new allocations (each consumer's units of the class moved to the
//! children: where rtrack's own claim holds them when it has one, else onto the children with
//! room, the SEV model's child first for contexts, as Nova does), and the reshape request.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::upstream::api::ConsumerAllocations;
use crate::upstream::desired::{DesiredState, ProviderRole};
use crate::upstream::plan::ProviderCache;

/// Classes the compute node holds in Placement, in use, that rtrack reports on children (which
/// Placement already has) instead.
pub fn classes_to_reshape(desired: &DesiredState, cache: &ProviderCache) -> Vec<String> {
    let (Some(cached_root), Some(root)) = (
        cache.providers.get(&desired.root),
        desired.provider(desired.root),
    ) else {
        return Vec::new();
    };
    cached_root
        .inventories
        .keys()
        .filter(|class| {
            !root.inventories.contains_key(*class)
                && cached_root.usages.get(*class).copied().unwrap_or(0) > 0
                && desired.providers.iter().any(|p| {
                    p.role == ProviderRole::Nested
                        && p.inventories.contains_key(*class)
                        && cache.providers.contains_key(&p.uuid)
                })
        })
        .cloned()
        .collect()
}

/// Each consumer's allocation with its units of `classes` on the root moved to the children.
/// Errors say which consumer could not be moved and why (nothing is sent then).
pub fn moved_allocations(
    desired: &DesiredState,
    cache: &ProviderCache,
    classes: &[String],
    consumers: &BTreeMap<Uuid, ConsumerAllocations>,
) -> Result<BTreeMap<Uuid, ConsumerAllocations>, String> {
    let root = desired.root;
    // Room left on each child, per class.
    let mut room: BTreeMap<(Uuid, &str), i64> = BTreeMap::new();
    let mut children: BTreeMap<&str, Vec<Uuid>> = BTreeMap::new();
    for p in desired
        .providers
        .iter()
        .filter(|p| p.role == ProviderRole::Nested)
    {
        for class in classes {
            if let Some(inv) = p.inventories.get(class) {
                let used = cache
                    .providers
                    .get(&p.uuid)
                    .and_then(|c| c.usages.get(class))
                    .copied()
                    .unwrap_or(0) as i64;
                room.insert((p.uuid, class.as_str()), inv.total - inv.reserved - used);
                let list = children.entry(class.as_str()).or_default();
                // SEV's own child first for contexts (Nova moves them there).
                if p.traits.contains("HW_CPU_X86_AMD_SEV") {
                    list.insert(0, p.uuid);
                } else {
                    list.push(p.uuid);
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    for (consumer, current) in consumers {
        let mut moved = current.clone();
        let Some(on_root) = moved.resources.get_mut(&root) else {
            continue;
        };
        let mut taken: BTreeMap<&str, u64> = BTreeMap::new();
        for class in classes {
            if let Some(n) = on_root.remove(class) {
                taken.insert(class.as_str(), n);
            }
        }
        if taken.is_empty() {
            continue;
        }
        if on_root.is_empty() {
            moved.resources.remove(&root);
        }
        let ours = desired.allocations.as_ref().and_then(|a| a.get(consumer));
        for (class, amount) in taken {
            // rtrack's own claim says where its units are.
            let mut left = amount as i64;
            let mut placed: Vec<(Uuid, i64)> = Vec::new();
            if let Some(a) = ours {
                for (rp, r) in &a.resources {
                    if *rp == root {
                        continue;
                    }
                    if let Some(n) = r.get(class) {
                        let n = (*n as i64).min(left);
                        placed.push((*rp, n));
                        left -= n;
                    }
                }
            }
            for rp in children.get(class).into_iter().flatten() {
                if left == 0 {
                    break;
                }
                let free = room.get(&(*rp, class)).copied().unwrap_or(0);
                let n = left.min(free);
                if n > 0 {
                    placed.push((*rp, n));
                    left -= n;
                }
            }
            if left > 0 {
                return Err(format!(
                    "consumer {consumer}: {amount} {class} on the compute node do not fit on its children ({left} left over)"
                ));
            }
            for (rp, n) in placed {
                if let Some(r) = room.get_mut(&(rp, class)) {
                    *r -= n;
                }
                *moved
                    .resources
                    .entry(rp)
                    .or_default()
                    .entry(class.to_string())
                    .or_default() += n as u64;
            }
        }
        out.insert(*consumer, moved);
    }
    Ok(out)
}

pub mod pcpu;

#[cfg(test)]
mod tests;
