//! A claim's vGPUs, encryption contexts and vPMEM namespaces: placed on the providers below (or,
//! for vPMEM, the classes on) the compute node after the per-class check passed, with the units
//! every counted consumer holds taken out first.
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
use crate::tracker::pci::providers::{derived_provider_uuid, provider_name};

/// Units per nested provider and class.
pub(crate) type NestedMapping = BTreeMap<NestedKey, BTreeMap<ResourceClass, i64>>;
use crate::tracker::usage::Usage;
use crate::tracker::Tracker;

impl Tracker {
    /// Remembers the vGPU and encryption providers nova-compute created (derived uuid -> theirs),
    /// so claims follow allocations made against them.
    pub fn adopt_nested_providers(&mut self, adopted: &BTreeMap<Uuid, Uuid>) {
        self.nested_adopted.clone_from(adopted);
    }

    /// The uuid each nested provider is known by in Placement: a vGPU parent's or an encryption
    /// model's is nova-compute's when adopted, else the one rtrack derives from the compute node
    /// and the provider's name; a provider.yaml class's is the uuid of the provider it names
    /// (the compute node, such a child, or a PCI child), as the report puts it there; a vPMEM
    /// class's is the compute node's.
    pub fn nested_provider_uuids(&self) -> BTreeMap<NestedKey, Uuid> {
        let node = Uuid::parse_str(&self.settings.node_uuid).unwrap_or_default();
        let node_name = &self.settings.names.node;
        let mut by_name: BTreeMap<String, Uuid> = BTreeMap::new();
        by_name.insert(node_name.clone(), node);
        for p in &self.view.nested {
            if !p.key.is_child() {
                continue;
            }
            let name = p.key.provider_name(node_name);
            let derived = derived_provider_uuid(node, &name);
            let uuid = self
                .nested_adopted
                .get(&derived)
                .copied()
                .unwrap_or(derived);
            by_name.insert(name, uuid);
        }
        for (address, uuid) in self.pci_provider_uuids() {
            by_name.insert(provider_name(node_name, &address), uuid);
        }
        self.view
            .nested
            .iter()
            .filter_map(|p| {
                by_name
                    .get(&p.key.provider_name(node_name))
                    .map(|u| (p.key.clone(), *u))
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
        // One provider can hold several classes (provider.yaml's on the compute node).
        let mut by_uuid: BTreeMap<Uuid, Vec<NestedKey>> = BTreeMap::new();
        for (k, u) in self.nested_provider_uuids() {
            by_uuid.entry(u).or_default().push(k);
        }
        let class_of = |k: &NestedKey| {
            self.view
                .nested
                .iter()
                .find(|p| &p.key == k)
                .map(|p| &p.class)
        };
        let mut out: NestedMapping = BTreeMap::new();
        for (rp, classes) in allocations {
            for (class, amount) in classes {
                if *amount <= 0 || !class.is_extra() {
                    continue;
                }
                let key = by_uuid
                    .get(rp)
                    .and_then(|keys| keys.iter().find(|k| class_of(k) == Some(class)));
                match key {
                    Some(key) => {
                        let n = out
                            .entry(key.clone())
                            .or_default()
                            .entry(class.clone())
                            .or_default();
                        *n = n.saturating_add(*amount);
                    }
                    None if nested_classes.contains(class)
                        || *class == ResourceClass::MemEncryptionContext =>
                    {
                        return Err(ClaimError::Conflict {
                            id: uuid.to_string(),
                            message: format!(
                                "Placement's allocation (allocations, or request_spec.requested_resources) puts {amount} {class} on provider {rp}, which does not hold {class} on this host (providers that do: {})",
                                by_uuid
                                    .iter()
                                    .filter(|(_, keys)| keys.iter().any(|k| class_of(k) == Some(class)))
                                    .map(|(u, _)| u.to_string())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        });
                    }
                    None => {}
                }
            }
        }
        Ok((!out.is_empty()).then_some(out))
    }

    /// What the counted consumers hold below the compute node beyond what it has: providers
    /// over their total, mdevs held twice. A state change must not add to these.
    pub(crate) fn nested_conflicts(&self, usage: &Usage) -> std::collections::BTreeSet<String> {
        let mut out = std::collections::BTreeSet::new();
        let used = self.nested_usage(usage);
        for p in &self.view.nested {
            let n = used.used.get(&p.key).copied().unwrap_or(0);
            if n > p.total {
                out.insert(format!("{} would hold {n} of {}", p.key, p.total));
            }
        }
        let mut holders: BTreeMap<&str, usize> = BTreeMap::new();
        for c in &usage.consumers {
            for m in c.nested.iter().flat_map(|n| n.mdevs.iter()) {
                *holders.entry(m.uuid.as_str()).or_default() += 1;
            }
        }
        for (mdev, n) in holders {
            if n > 1 {
                out.insert(format!("mdev {mdev} would be held by {n} consumers"));
            }
        }
        let mut holders: BTreeMap<&str, usize> = BTreeMap::new();
        for c in &usage.consumers {
            for ns in c.nested.iter().flat_map(|n| n.pmem.iter()) {
                *holders.entry(ns.name.as_str()).or_default() += 1;
            }
        }
        for (name, n) in holders {
            if n > 1 {
                out.insert(format!(
                    "PMEM namespace {name} would be held by {n} consumers"
                ));
            }
        }
        out
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
            pmem: &self.view.pmem,
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
