//! NUMA-aware vSwitches (Nova's `[neutron] physnets`, `[neutron_physnet_<name>] numa_nodes`,
//! `[neutron_tunnel] numa_nodes`): the NUMA nodes each physical network's vSwitch, and the
//! tunneled networks' one, is on. A guest with a NUMA topology and ports on those networks is
//! fitted only onto cells its networks allow.
//!
//! In: `[neutron]`, `[neutron_physnet.<name>]` and `[neutron_tunnel]` as written. Out:
//! [`NetworkAffinity`], or an error naming the key with Nova's wording; the nodes are checked
//! against the host by [`host_problems`].

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

/// `[neutron]`
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NeutronConfig {
    /// The physical networks with a NUMA affinity (each needs `[neutron_physnet.<name>]`).
    pub physnets: Option<Vec<String>>,
}

/// `[neutron_physnet.<name>]` and `[neutron_tunnel]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NumaNodesConfig {
    /// NUMA node ids.
    pub numa_nodes: Option<Vec<u32>>,
}

/// The NUMA affinity of the host's networks, validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkAffinity {
    /// Physical network -> the nodes its vSwitch is on.
    pub physnets: BTreeMap<String, BTreeSet<u32>>,
    /// The nodes the tunneled networks' vSwitch is on.
    pub tunnel: BTreeSet<u32>,
}

impl NetworkAffinity {
    /// The physical networks whose vSwitch is on `node`.
    pub fn physnets_on(&self, node: u32) -> BTreeSet<String> {
        self.physnets
            .iter()
            .filter(|(_, nodes)| nodes.contains(&node))
            .map(|(p, _)| p.clone())
            .collect()
    }
}

/// Checks the three sections as Nova does (a listed physnet without nodes is an error) and, as
/// rtrack does with every key, refuses a `[neutron_physnet.<name>]` for a physnet not listed.
pub fn validate(
    neutron: &NeutronConfig,
    physnets: &BTreeMap<String, NumaNodesConfig>,
    tunnel: Option<&NumaNodesConfig>,
) -> Result<NetworkAffinity, (String, String, String)> {
    let listed: Vec<String> = neutron.physnets.clone().unwrap_or_default();
    let mut out = NetworkAffinity::default();
    for p in &listed {
        if p.trim().is_empty() || p.len() > 255 {
            return Err((
                "neutron.physnets".into(),
                crate::echo::quoted(p),
                "each must be a physical network name of 1 to 255 characters".into(),
            ));
        }
        let nodes: BTreeSet<u32> = physnets
            .get(p)
            .and_then(|c| c.numa_nodes.clone())
            .unwrap_or_default()
            .into_iter()
            .collect();
        if nodes.is_empty() {
            return Err((
                format!("neutron_physnet.{p}.numa_nodes"),
                "(unset)".into(),
                format!("the physnet '{p}' was listed in '[neutron] physnets' but no corresponding '[neutron_physnet.{p}] numa_nodes' option was defined"),
            ));
        }
        out.physnets.insert(p.clone(), nodes);
    }
    if let Some(extra) = physnets.keys().find(|k| !listed.contains(k)) {
        return Err((
            format!("neutron_physnet.{extra}"),
            "(a section)".into(),
            format!("'{extra}' is not listed in [neutron] physnets, so this section would not be used; list it or remove the section"),
        ));
    }
    out.tunnel = tunnel
        .and_then(|t| t.numa_nodes.clone())
        .unwrap_or_default()
        .into_iter()
        .collect();
    Ok(out)
}

/// The configured nodes that are not NUMA nodes of the host, as (key, why), in Nova's words.
pub fn host_problems(
    affinity: &NetworkAffinity,
    host: &crate::probes::HostInventory,
) -> Vec<(String, String)> {
    let cells: BTreeSet<u32> = host.numa_nodes.iter().map(|n| n.id).collect();
    let mut out = Vec::new();
    for (p, nodes) in &affinity.physnets {
        for n in nodes.iter().filter(|n| !cells.contains(n)) {
            out.push((
                format!("neutron_physnet.{p}.numa_nodes"),
                format!("node {n} for physnet {p} is not present in host affinity set {cells:?}"),
            ));
        }
    }
    for n in affinity.tunnel.iter().filter(|n| !cells.contains(n)) {
        out.push((
            "neutron_tunnel.numa_nodes".into(),
            format!("node {n} for tunneled networks is not present in host affinity set {cells:?}"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(n: &[u32]) -> NumaNodesConfig {
        NumaNodesConfig {
            numa_nodes: Some(n.to_vec()),
        }
    }

    #[test]
    fn physnets_need_their_nodes_and_sections_need_their_physnet() {
        let neutron = NeutronConfig {
            physnets: Some(vec!["foo".into(), "bar".into()]),
        };
        let mut sections = BTreeMap::from([("foo".to_string(), nodes(&[1]))]);
        let e = validate(&neutron, &sections, None).unwrap_err();
        assert_eq!(e.0, "neutron_physnet.bar.numa_nodes");
        assert!(e.2.contains("was listed in '[neutron] physnets'"), "{e:?}");
        sections.insert("bar".into(), nodes(&[0]));
        let a = validate(&neutron, &sections, Some(&nodes(&[0, 1]))).unwrap();
        assert_eq!(a.physnets_on(0), BTreeSet::from(["bar".to_string()]));
        assert_eq!(a.tunnel, BTreeSet::from([0, 1]));
        sections.insert("baz".into(), nodes(&[0]));
        let e = validate(&neutron, &sections, None).unwrap_err();
        assert_eq!(e.0, "neutron_physnet.baz");
    }
}
