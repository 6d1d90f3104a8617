//! provider.yaml inventories as the tracker counts them: each additional class of each entry is
//! one [`NestedProvider`] keyed by the provider's name and the class, so claims asking for
//! `resources:CUSTOM_X` are checked and placed like vGPUs, and the report puts the inventory
//! and the allocations on that provider.
//!
//! In: the entries, this host's provider names (compute node, PCI children, vGPU and encryption
//! children) and the compute node's uuid; the classes each of those already has. Out: the
//! providers, and `(key, why)` for entries that cannot apply (no such provider here; a class the
//! provider already has: Nova refuses to update Placement then).

use std::collections::{BTreeMap, BTreeSet};

use super::{NestedKey, NestedProvider};
use crate::config::provider_yaml::{ProviderConfigs, ProviderTarget};
use crate::inventory::resources::ResourceClass;

/// This host's providers as provider.yaml can name them.
pub struct TreeNames<'a> {
    /// The compute node's name (`hypervisor_hostname`).
    pub root: &'a str,
    /// The compute node's uuid.
    pub root_uuid: Option<uuid::Uuid>,
    /// Each provider's name with the classes it already has (the compute node included).
    pub classes: BTreeMap<String, BTreeSet<String>>,
}

/// The providers provider.yaml adds inventory to, and the entries that do not apply.
pub fn operator_providers(
    configs: &ProviderConfigs,
    tree: &TreeNames<'_>,
) -> (Vec<NestedProvider>, Vec<(String, String)>) {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    // One provider named twice (by `$COMPUTE_NODE` and by its name, say): the first entry of a
    // class wins, as the report merges it.
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    for c in &configs.providers {
        let name = match &c.target {
            ProviderTarget::ComputeNode => Some(tree.root.to_string()),
            ProviderTarget::Uuid(u) if Some(*u) == tree.root_uuid => Some(tree.root.to_string()),
            ProviderTarget::Uuid(_) => None,
            ProviderTarget::Name(n) => tree.classes.contains_key(n).then(|| n.clone()),
        };
        let Some(name) = name else {
            problems.push((
                format!("{}: {}", c.source.display(), c.target),
                "names no provider of this host (the compute node by $COMPUTE_NODE, its uuid or name; children by name): ignored, as Nova does"
                    .to_string(),
            ));
            continue;
        };
        let owned = tree.classes.get(&name).cloned().unwrap_or_default();
        for (class, inv) in &c.inventories {
            if owned.contains(class) {
                problems.push((
                    format!("{}: {}.{class}", c.source.display(), c.target),
                    format!("provider {name} already has {class} from rtrack itself; an additional inventory cannot replace it (Nova refuses the same)"),
                ));
                continue;
            }
            if !seen.insert((name.clone(), class.clone())) {
                problems.push((
                    format!("{}: {}.{class}", c.source.display(), c.target),
                    format!("provider {name} already gets {class} from an earlier entry; this one is left out"),
                ));
                continue;
            }
            let Ok(rc) = ResourceClass::from_name(class) else {
                continue;
            };
            // `as` saturates: a huge ratio gives i64::MAX, never a wrapped negative.
            let capacity = ((inv.total - inv.reserved) as f64 * inv.allocation_ratio).floor();
            let capacity = if capacity > 0.0 { capacity as i64 } else { 0 };
            out.push(NestedProvider {
                key: NestedKey::Operator {
                    provider: name.clone(),
                    class: class.clone(),
                },
                class: rc,
                total: capacity,
                max_unit: inv.max_unit.unwrap_or(inv.total).min(capacity.max(1)),
                traits: BTreeSet::new(),
                mdev_type: None,
            });
        }
    }
    (out, problems)
}
