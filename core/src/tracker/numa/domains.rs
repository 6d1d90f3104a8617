//! What a host cell holds beyond Nova's view of it: its CPU caches, its L3 domains (the unit
//! [`super::align`] fills), its core types on hybrid hosts, and its NUMA distances; and what the
//! placement policies mean on this host.
//!
//! In: the probe ([`HostInventory`]: `caches`, `core_types`, each node's `distances`) and a
//! cell's CPUs. Out: a [`CellFacts`] per cell; [`policy_problems`] names the configured core
//! types the host does not have ([`super::host::policy_summary`] says what each policy does here).
//!
//! A cell's L3 domains are each L3's CPUs within the cell, by lowest CPU. CPUs of the cell no
//! L3 lists (offline ones: the kernel removes an offline CPU's cache directory) are one domain
//! more. A cell without any L3 fact has no domains: the policy then sees one domain, the cell.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::config::TopologyPolicy;
use crate::probes::cache::CacheInstance;
use crate::probes::core_type::CoreType;
use crate::probes::{CpuSet, HostInventory};

/// A cell's caches, L3 domains, core types and distances.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CellFacts {
    /// Cache instances of level 2 and above with CPUs in the cell (each whole: an L3 that spans
    /// two cells is listed in both).
    pub caches: Vec<CacheInstance>,
    /// The cell's CPUs grouped by L3 instance, by lowest CPU; empty without L3 facts.
    pub l3_domains: Vec<CpuSet>,
    /// The host's core types, limited to the cell's CPUs; empty on a host with one kind.
    pub core_types: Vec<CoreType>,
    /// Distance to each node, by node id (the node's `distance`).
    pub distances: BTreeMap<u32, u32>,
}

impl CellFacts {
    /// The facts of the cell of node `node` whose CPUs are `cpus`.
    pub fn of(inv: &HostInventory, node: u32, cpus: &CpuSet) -> CellFacts {
        let caches: Vec<CacheInstance> = inv
            .caches
            .iter()
            .filter(|c| c.cpus.intersects(cpus))
            .cloned()
            .collect();
        let mut l3_domains: Vec<CpuSet> = Vec::new();
        for c in caches.iter().filter(|c| c.level == 3) {
            let d = c.cpus.intersection(cpus);
            if !l3_domains.iter().any(|x| x.intersects(&d)) {
                l3_domains.push(d);
            }
        }
        if !l3_domains.is_empty() {
            let listed = CpuSet::from_ids(l3_domains.iter().flat_map(|d| d.iter()));
            let rest = cpus.difference(&listed);
            if !rest.is_empty() {
                l3_domains.push(rest);
            }
        }
        l3_domains.sort_by_key(|d| d.iter().next());
        let core_types = inv
            .core_types
            .iter()
            .map(|t| CoreType {
                name: t.name.clone(),
                cpus: t.cpus.intersection(cpus),
            })
            .filter(|t| !t.cpus.is_empty())
            .collect();
        let distances = inv
            .numa_nodes
            .iter()
            .find(|n| n.id == node)
            .map(|n| n.distances.clone())
            .unwrap_or_default();
        CellFacts {
            caches,
            l3_domains,
            core_types,
            distances,
        }
    }

    /// The L3 domain holding `cpu` (its index), if the cell has domains and one holds it.
    pub fn l3_of(&self, cpu: u32) -> Option<usize> {
        self.l3_domains.iter().position(|d| d.contains(cpu))
    }

    /// The CPUs of the cell whose core type is one of `names`.
    pub fn cpus_of_types(&self, names: &[String]) -> CpuSet {
        CpuSet::from_ids(
            self.core_types
                .iter()
                .filter(|t| names.contains(&t.name))
                .flat_map(|t| t.cpus.iter()),
        )
    }
}

/// The core types `dedicated_core_types` names that a hybrid host does not have (a host with
/// one kind of core has no types, and the key has no effect there: not a problem).
pub fn policy_problems(inv: &HostInventory, policy: &TopologyPolicy) -> Vec<(String, String)> {
    let (Some(names), false) = (&policy.dedicated_core_types, inv.core_types.is_empty()) else {
        return Vec::new();
    };
    let have: Vec<&str> = inv.core_types.iter().map(|t| t.name.as_str()).collect();
    names
        .iter()
        .filter(|n| !have.contains(&n.as_str()))
        .map(|n| {
            (
                "resources.dedicated_core_types".to_string(),
                format!(
                    "{n} is not a core type of this host (its types: {})",
                    have.join(", ")
                ),
            )
        })
        .collect()
}
