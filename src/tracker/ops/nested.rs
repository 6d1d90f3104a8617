//! A claim's vGPUs and encryption contexts: placed on the providers below the compute node after
//! the per-class check passed, with the units every counted consumer holds taken out first.
//!
//! In: the request's units of nested classes, the view's providers, the usage. Out: the
//! [`NestedAllocation`] to record, or the shortfalls (per provider) for the refusal.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::inventory::resources::ResourceClass;
use crate::tracker::error::{ClaimError, ResourceShortfall};
use crate::tracker::model::InstanceRequest;
use crate::tracker::nested::assign::{assign, AssignError, AssignInput};
use crate::tracker::nested::{NestedAllocation, NestedKey, NestedUsage};
use crate::tracker::pci::providers::derived_provider_uuid;

/// Units per nested provider and class.
pub(crate) type NestedMapping = BTreeMap<NestedKey, BTreeMap<ResourceClass, i64>>;
use crate::tracker::state::Tracker;
use crate::tracker::usage::Usage;

impl Tracker {
    /// Remembers the vGPU and encryption providers nova-compute created (derived uuid -> theirs),
    /// so claims follow allocations made against them.
    pub fn adopt_nested_providers(&mut self, adopted: &BTreeMap<Uuid, Uuid>) {
        self.nested_adopted.clone_from(adopted);
    }

    /// The uuid each nested provider is known by in Placement: nova-compute's when adopted,
    /// else the one rtrack derives from the compute node and the provider's name.
    pub fn nested_provider_uuids(&self) -> BTreeMap<NestedKey, Uuid> {
        let node = Uuid::parse_str(&self.settings.node_uuid).unwrap_or_default();
        self.view
            .nested
            .iter()
            .map(|p| {
                let name = format!("{}_{}", self.settings.names.node, p.key.name_suffix());
                let derived = derived_provider_uuid(node, &name);
                let uuid = self
                    .nested_adopted
                    .get(&derived)
                    .copied()
                    .unwrap_or(derived);
                (p.key.clone(), uuid)
            })
            .collect()
    }

    /// Placement's allocation as units per nested provider; `None` when it names no nested
    /// class. A nested class on a provider that is not one of this host's is a conflict.
    pub(crate) fn nested_mapping(
        &self,
        uuid: &str,
        allocations: &BTreeMap<Uuid, BTreeMap<ResourceClass, i64>>,
    ) -> Result<Option<NestedMapping>, ClaimError> {
        let nested_classes: std::collections::BTreeSet<&ResourceClass> =
            self.view.nested.iter().map(|p| &p.class).collect();
        let by_uuid: BTreeMap<Uuid, NestedKey> = self
            .nested_provider_uuids()
            .into_iter()
            .map(|(k, u)| (u, k))
            .collect();
        let mut out: NestedMapping = BTreeMap::new();
        for (rp, classes) in allocations {
            for (class, amount) in classes {
                if *amount <= 0 || !class.is_extra() {
                    continue;
                }
                match by_uuid.get(rp) {
                    Some(key) => {
                        *out.entry(key.clone())
                            .or_default()
                            .entry(class.clone())
                            .or_default() += amount;
                    }
                    None if nested_classes.contains(class)
                        || *class == ResourceClass::MemEncryptionContext =>
                    {
                        return Err(ClaimError::Conflict {
                            id: uuid.to_string(),
                            message: format!(
                                "Placement's allocation puts {amount} {class} on provider {rp}, which is not a vGPU parent or memory encryption provider of this host (known: {})",
                                by_uuid.keys().map(Uuid::to_string).collect::<Vec<_>>().join(", ")
                            ),
                        });
                    }
                    None => {}
                }
            }
        }
        Ok((!out.is_empty()).then_some(out))
    }

    /// Units and mdevs the counted consumers hold below the compute node.
    pub fn nested_usage(&self, usage: &Usage) -> NestedUsage {
        let mut n = NestedUsage::default();
        for c in &usage.consumers {
            if let Some(a) = &c.nested {
                n.add(a);
            }
        }
        n
    }

    /// Places the nested units of `req` (none when it asks for none); `salt` keeps new mdev
    /// uuids distinct per claim. `Err(Ok(shortfalls))` is a refusal, `Err(Err(e))` a request
    /// whose Placement allocation does not fit it.
    pub(crate) fn place_nested(
        &self,
        uuid: &str,
        req: &InstanceRequest,
        resources: &BTreeMap<ResourceClass, i64>,
        usage: Option<&Usage>,
        mapping: Option<&NestedMapping>,
        salt: &str,
    ) -> Result<Option<NestedAllocation>, Result<Vec<ResourceShortfall>, ClaimError>> {
        let providers = &self.view.nested;
        let wanted: BTreeMap<ResourceClass, i64> = resources
            .iter()
            .filter(|(c, n)| **n > 0 && c.is_extra())
            .map(|(c, n)| (c.clone(), *n))
            .collect();
        let model = req.flavor.mem_encryption_model;
        let placed_here = wanted.contains_key(&ResourceClass::MemEncryptionContext)
            && model.is_some()
            || wanted
                .keys()
                .any(|c| providers.iter().any(|p| &p.class == c));
        if !placed_here {
            return Ok(None);
        }
        let derived;
        let usage = match usage {
            Some(u) => u,
            None => {
                derived = self.usage();
                &derived
            }
        };
        let nested_usage = self.nested_usage(usage);
        let input = AssignInput {
            requested: &wanted,
            model,
            mapping,
            usage: &nested_usage,
            mdevs: &self.view.host.mediated_devices,
            salt,
        };
        match assign(providers, &input) {
            Ok(a) if a.is_empty() => Ok(None),
            Ok(a) => Ok(Some(a)),
            Err(AssignError::Shortfall(s)) => Err(Ok(s)),
            Err(AssignError::Mapping(message)) => Err(Err(ClaimError::Conflict {
                id: uuid.to_string(),
                message,
            })),
        }
    }
}
