//! A claim's vGPUs and encryption contexts: placed on the providers below the compute node after
//! the per-class check passed, with the units every counted consumer holds taken out first.
//!
//! In: the request's units of nested classes, the view's providers, the usage. Out: the
//! [`NestedAllocation`] to record, or the shortfalls (per provider) for the refusal.

use std::collections::BTreeMap;

use crate::inventory::resources::ResourceClass;
use crate::tracker::error::{ClaimError, ResourceShortfall};
use crate::tracker::model::InstanceRequest;
use crate::tracker::nested::assign::{assign, AssignError, AssignInput};
use crate::tracker::nested::{NestedAllocation, NestedKey, NestedUsage};
use crate::tracker::state::Tracker;
use crate::tracker::usage::Usage;

impl Tracker {
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
        mapping: Option<&BTreeMap<NestedKey, BTreeMap<ResourceClass, i64>>>,
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
