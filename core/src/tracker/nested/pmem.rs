//! Virtual persistent memory (vPMEM) as Nova's libvirt driver offers it: the namespaces
//! `[devices] pmem_namespaces` names, one class per label on the compute node, and the named
//! namespaces a claim is given.
//!
//! In: the probe's namespaces, the configured labels, the namespaces the counted consumers hold.
//! Out: the [`VpmemNamespace`]s offered, one [`NestedProvider`] per class (keyed
//! [`NestedKey::Pmem`]: the units are the compute node's, as Nova reports them on the root), the
//! namespaces given to a claim, and the configuration's problems on this host. Pure.
//!
//! Nova (`_discover_vpmems`, `_update_provider_tree_for_vpmems`, `_claim_resources`): a
//! namespace is offered when `ndctl list` shows it with that name in device-dax mode; each class
//! has total = max_unit = its namespaces; a claim takes free namespaces of each class it asks for
//! (an arbitrary one in Nova; the lowest name first here) or is refused with "Needed N units of
//! resource class X, but M are available".

use std::collections::{BTreeMap, BTreeSet};

use super::{NestedKey, NestedProvider, NestedUnits};
use crate::config::pmem::PmemLabel;
use crate::inventory::offered::VpmemNamespace;
use crate::inventory::resources::ResourceClass;
use crate::probes::pmem::PmemNamespace;
use crate::probes::HostInventory;

/// Why the host's namespace named `name` cannot be offered; `None` when it can.
fn unusable(host: &HostInventory, name: &str) -> Option<String> {
    let named: Vec<&PmemNamespace> = host
        .pmem_namespaces
        .iter()
        .filter(|n| n.name.as_deref() == Some(name))
        .collect();
    if named.iter().any(|n| n.is_usable_devdax()) {
        return None;
    }
    let Some(n) = named.first() else {
        return Some(format!(
            "The PMEM namespace {name} isn't on host (no namespace under sys/bus/nd/devices has that alt_name)"
        ));
    };
    let why = if !n.enabled {
        "it is not bound to its driver".to_string()
    } else if n.mode.as_deref() != Some("devdax") {
        format!(
            "it is in {} mode; only devdax namespaces are given to guests",
            n.mode.as_deref().unwrap_or("an unknown")
        )
    } else {
        "its dax device has no /dev/dax character device".to_string()
    };
    Some(format!(
        "The PMEM namespace {name} isn't on host as a usable device-dax namespace ({}: {why})",
        n.dev
    ))
}

/// The namespaces offered under `labels`, in configuration order; a warning for each named
/// namespace the host does not offer now (left out, as if not configured).
pub fn offered_namespaces(
    host: &HostInventory,
    labels: &[PmemLabel],
    warnings: &mut Vec<String>,
) -> Vec<VpmemNamespace> {
    let mut out = Vec::new();
    for l in labels {
        for name in &l.names {
            if let Some(why) = unusable(host, name) {
                warnings.push(format!("vPMEM label {}: {why}: not offered", l.label));
                continue;
            }
            let Some(ns) = host
                .pmem_namespaces
                .iter()
                .find(|n| n.name.as_deref() == Some(name.as_str()) && n.is_usable_devdax())
            else {
                continue;
            };
            out.push(VpmemNamespace {
                name: name.clone(),
                label: l.label.clone(),
                resource_class: l.class.clone(),
                devpath: ns.devpath.clone().unwrap_or_default(),
                size: ns.size.unwrap_or(0),
                align: ns.align.unwrap_or(0),
            });
        }
    }
    out
}

/// One provider per class with namespaces: total = max_unit = the class's namespaces (Nova's
/// inventory on the compute node).
pub fn pmem_providers(offered: &[VpmemNamespace]) -> Vec<NestedProvider> {
    let mut per_class: BTreeMap<&str, i64> = BTreeMap::new();
    for n in offered {
        *per_class.entry(n.resource_class.as_str()).or_default() += 1;
    }
    per_class
        .into_iter()
        .filter_map(|(class, total)| {
            let rc = ResourceClass::from_name(class).ok()?;
            Some(NestedProvider {
                key: NestedKey::Pmem(class.to_string()),
                class: rc,
                total,
                max_unit: total,
                traits: BTreeSet::new(),
                mdev_type: None,
            })
        })
        .collect()
}

/// The namespaces for a claim's vPMEM units: per class, the free ones (not in `held`), lowest
/// name first. Units with fewer free namespaces than asked get what there is (the unit check
/// before refuses that case).
pub fn give_namespaces(
    units: &[NestedUnits],
    offered: &[VpmemNamespace],
    held: &BTreeSet<String>,
) -> Vec<VpmemNamespace> {
    let mut out: Vec<VpmemNamespace> = Vec::new();
    for u in units {
        let NestedKey::Pmem(class) = &u.provider else {
            continue;
        };
        let mut free: Vec<&VpmemNamespace> = offered
            .iter()
            .filter(|n| &n.resource_class == class && !held.contains(&n.name))
            .filter(|n| !out.iter().any(|o| o.name == n.name))
            .collect();
        free.sort_by(|a, b| a.name.cmp(&b.name));
        out.extend(
            free.into_iter()
                .take(usize::try_from(u.amount).unwrap_or(0))
                .cloned(),
        );
    }
    out
}

/// What `[devices] pmem_namespaces` names that the host does not offer: Nova refuses to start
/// then (`PMEMNamespaceConfigInvalid`). `(key, why)` for the startup check.
pub fn host_problems(host: &HostInventory, labels: &[PmemLabel]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (i, l) in labels.iter().enumerate() {
        for name in &l.names {
            if let Some(why) = unusable(host, name) {
                out.push((
                    format!("devices.pmem_namespaces ({} entry {})", l.label, i + 1),
                    format!("The pmem_namespaces configuration is invalid: {why}"),
                ));
            }
        }
    }
    out
}

/// Namespaces given to counted claims that are no longer offered (gone from the host, or from
/// the configuration), with the claim holding each: the audit's report (Nova's
/// `AssignedResourceNotFound` at its start).
pub fn missing_namespaces<'a>(
    offered: &[VpmemNamespace],
    held: impl Iterator<Item = (&'a str, &'a std::sync::Arc<super::NestedAllocation>)>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (instance, alloc) in held {
        for n in &alloc.pmem {
            if !offered.iter().any(|o| o.name == n.name) {
                out.push((instance.to_string(), n.name.clone()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::pmem::PmemNamespace;

    fn ns(dev: &str, name: &str, mode: &str, devpath: Option<&str>) -> PmemNamespace {
        PmemNamespace {
            dev: dev.into(),
            name: Some(name.into()),
            mode: Some(mode.into()),
            enabled: true,
            size: Some(4292870144),
            align: Some(2097152),
            devpath: devpath.map(str::to_string),
            dax_driver: Some("device_dax".into()),
            numa_node: Some(0),
            uuid: None,
        }
    }

    fn host() -> HostInventory {
        let mut h = crate::tracker::nested::tests::host();
        h.pmem_namespaces = vec![
            ns("namespace0.0", "ns_0", "devdax", Some("/dev/dax0.0")),
            ns("namespace0.1", "ns_1", "devdax", Some("/dev/dax0.1")),
            ns("namespace0.2", "ns_2", "devdax", Some("/dev/dax0.2")),
            ns("namespace1.0", "fs_0", "fsdax", None),
        ];
        h
    }

    fn labels(items: &[(&str, &[&str])]) -> Vec<PmemLabel> {
        items
            .iter()
            .map(|(l, names)| PmemLabel {
                label: l.to_string(),
                class: crate::config::pmem::pmem_class(l),
                names: names.iter().map(|n| n.to_string()).collect(),
            })
            .collect()
    }

    #[test]
    fn novas_vpmem_test_host_offers_one_4gb_and_two_small() {
        let mut w = Vec::new();
        let offered = offered_namespaces(
            &host(),
            &labels(&[("4GB", &["ns_0"]), ("SMALL", &["ns_1", "ns_2"])]),
            &mut w,
        );
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(offered[0].devpath, "/dev/dax0.0");
        assert_eq!((offered[0].size, offered[0].align), (4292870144, 2097152));
        let p = pmem_providers(&offered);
        let got: Vec<(String, i64, i64)> = p
            .iter()
            .map(|p| (p.class.to_string(), p.total, p.max_unit))
            .collect();
        assert_eq!(
            got,
            [
                ("CUSTOM_PMEM_NAMESPACE_4GB".to_string(), 1, 1),
                ("CUSTOM_PMEM_NAMESPACE_SMALL".to_string(), 2, 2)
            ]
        );
    }

    #[test]
    fn namespaces_not_usable_are_named_with_the_reason() {
        let conf = labels(&[("A", &["fs_0", "ns_9"]), ("B", &["ns_1"])]);
        let problems = host_problems(&host(), &conf);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0]
                .1
                .contains("The PMEM namespace fs_0 isn't on host as a usable device-dax namespace (namespace1.0: it is in fsdax mode"),
            "{problems:?}"
        );
        assert!(problems[1]
            .1
            .contains("The PMEM namespace ns_9 isn't on host"));
        let mut w = Vec::new();
        let offered = offered_namespaces(&host(), &conf, &mut w);
        assert_eq!(offered.len(), 1);
        assert_eq!(w.len(), 2);
    }

    #[test]
    fn claims_get_free_namespaces_lowest_name_first() {
        let mut w = Vec::new();
        let offered = offered_namespaces(
            &host(),
            &labels(&[("SMALL", &["ns_2", "ns_1"]), ("4GB", &["ns_0"])]),
            &mut w,
        );
        let small = NestedUnits {
            provider: NestedKey::Pmem("CUSTOM_PMEM_NAMESPACE_SMALL".into()),
            class: ResourceClass::from_name("CUSTOM_PMEM_NAMESPACE_SMALL").unwrap(),
            amount: 1,
        };
        let given = give_namespaces(std::slice::from_ref(&small), &offered, &BTreeSet::new());
        assert_eq!(given[0].name, "ns_1");
        let held = BTreeSet::from(["ns_1".to_string()]);
        let given = give_namespaces(std::slice::from_ref(&small), &offered, &held);
        assert_eq!(given[0].name, "ns_2");
        let two = NestedUnits { amount: 2, ..small };
        let names: Vec<String> = give_namespaces(&[two], &offered, &BTreeSet::new())
            .into_iter()
            .map(|n| n.name)
            .collect();
        assert_eq!(names, ["ns_1", "ns_2"]);
    }
}
