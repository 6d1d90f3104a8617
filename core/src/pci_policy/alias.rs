//! `[pci] alias`: names for PCI device requests in flavors (`pci_passthrough:alias = "a:2"`).
//!
//! In: one `[pci] alias` entry as string values, added to an [`AliasTable`]. Out: the
//! [`AliasTable`]: for each name an [`Alias`] with its [`NumaPolicy`] and the specs a request
//! carries (as `InstancePCIRequest.spec`), or a [`SpecError`] naming the key.
//!
//! Nova's schema and rules (nova/pci/request.py): `name` (required), `vendor_id` and
//! `product_id` (exactly 4 hex digits), `device_type` (`type-PCI`, `type-PF`, `type-VF`, not
//! `vdpa`, which only ports request; stored as `dev_type` in the request spec), `numa_policy` (`legacy` by default,
//! `preferred`, `required`, `socket`), `resource_class`, `traits`, `live_migratable`. Entries with
//! the same name are ORed together and must agree on NUMA policy and device type. Unlike Nova,
//! a malformed alias is rejected when the configuration is loaded, not at every claim.

use std::collections::BTreeMap;

use super::spec::SpecError;

/// NUMA affinity policy of a PCI request (Nova's PCINUMAAffinityPolicy).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum NumaPolicy {
    /// Devices must be on the instance's NUMA nodes.
    Required,
    /// Local devices first, else devices with no NUMA node, else fail (Nova's default).
    Legacy,
    /// Local devices first, then any.
    Preferred,
    /// Devices on the instance's NUMA nodes or on the same socket.
    Socket,
}

impl NumaPolicy {
    /// Nova's string.
    pub fn as_str(self) -> &'static str {
        match self {
            NumaPolicy::Required => "required",
            NumaPolicy::Legacy => "legacy",
            NumaPolicy::Preferred => "preferred",
            NumaPolicy::Socket => "socket",
        }
    }

    /// Parses Nova's string.
    pub fn parse(s: &str) -> Option<NumaPolicy> {
        match s {
            "required" => Some(NumaPolicy::Required),
            "legacy" => Some(NumaPolicy::Legacy),
            "preferred" => Some(NumaPolicy::Preferred),
            "socket" => Some(NumaPolicy::Socket),
            _ => None,
        }
    }
}

/// The device types an alias may ask for (Nova's `_ALIAS_SCHEMA`): not `vdpa`, which only a
/// `vnic_type=vdpa` port requests.
pub const DEVICE_TYPES: &[&str] = &["type-PCI", "type-PF", "type-VF"];

/// One alias name: its policy and the specs any of which a device may match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alias {
    /// The alias name.
    pub name: String,
    /// NUMA policy (a flavor's `hw:pci_numa_affinity_policy` overrides it).
    pub numa_policy: NumaPolicy,
    /// Request specs as Nova stores them in `InstancePCIRequest.spec`: string maps with
    /// `vendor_id`, `product_id`, `dev_type` and the other given keys.
    pub specs: Vec<BTreeMap<String, String>>,
}

/// All aliases by name.
pub type AliasTable = BTreeMap<String, Alias>;

/// Nova's checks of the whole table (`_validate_aliases`): every spec names `vendor_id` and
/// `product_id` (with PCI in Placement, a `resource_class` will do instead), and with PCI in
/// Placement an alias has one spec only (Placement cannot choose between alternatives). Each
/// problem as (alias name, what is wrong).
pub fn table_problems(table: &AliasTable, in_placement: bool) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, alias) in table {
        if in_placement && alias.specs.len() > 1 {
            out.push((
                name.clone(),
                format!(
                    "has {} specs; with [pci] report_in_placement an alias has one spec (Placement cannot choose between alternatives): give the devices one resource_class in [pci] device_spec and name it here instead",
                    alias.specs.len()
                ),
            ));
            continue;
        }
        let named = |s: &BTreeMap<String, String>| {
            (s.contains_key("vendor_id") && s.contains_key("product_id"))
                || (in_placement && s.contains_key("resource_class"))
        };
        if !alias.specs.iter().all(named) {
            out.push((
                name.clone(),
                if in_placement {
                    "needs vendor_id and product_id, or resource_class (Nova refuses an alias without them)".to_string()
                } else {
                    "needs vendor_id and product_id (Nova refuses an alias without them)".to_string()
                },
            ));
        }
    }
    out
}

/// Validates one alias entry (given as strings) and adds it to `table`.
pub fn add_alias(
    table: &mut AliasTable,
    mut values: BTreeMap<String, String>,
) -> Result<(), SpecError> {
    reject_unknown_keys(&values)?;
    let name = values
        .remove("name")
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty() && n.len() <= 256)
        .ok_or_else(|| {
            alias_err(
                "name",
                "",
                "every alias needs a name of 1 to 256 characters",
            )
        })?;
    for key in ["vendor_id", "product_id"] {
        if let Some(v) = values.get(key) {
            if v.len() != 4 || !v.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(alias_err(
                    key,
                    v,
                    "must be exactly 4 hex digits, like \"8086\"",
                ));
            }
            let lower = v.to_ascii_lowercase();
            values.insert(key.to_string(), lower);
        }
    }
    if let Some(c) = values.get("capability_type") {
        if c != "pci" {
            return Err(alias_err("capability_type", c, "must be \"pci\""));
        }
    }
    let numa_policy = match values.remove("numa_policy") {
        None => NumaPolicy::Legacy,
        Some(p) if p.is_empty() => NumaPolicy::Legacy,
        Some(p) => NumaPolicy::parse(&p).ok_or_else(|| {
            alias_err(
                "numa_policy",
                &p,
                "must be one of legacy, preferred, required, socket",
            )
        })?,
    };
    // Nova normalizes an alias's live_migratable (strictly) and no other key.
    if let Some(v) = values.get("live_migratable") {
        let normalized = match v.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" | "1" | "y" | "t" => "true",
            "false" | "no" | "off" | "0" | "n" | "f" => "false",
            _ => {
                return Err(alias_err(
                    "live_migratable",
                    v,
                    "must be a boolean (true or false)",
                ))
            }
        };
        values.insert("live_migratable".to_string(), normalized.to_string());
    }
    if let Some(t) = values.remove("device_type") {
        if !DEVICE_TYPES.contains(&t.as_str()) {
            return Err(alias_err(
                "device_type",
                &t,
                "must be one of type-PCI, type-PF, type-VF (vDPA devices are requested by vnic_type=vdpa ports, as in Nova)",
            ));
        }
        values.insert("dev_type".to_string(), t);
    }
    add_spec(table, name, numa_policy, values)
}

/// The [`SpecError`] for `key`'s `value` (shown quoted).
fn alias_err(key: &str, value: &str, expected: &str) -> SpecError {
    SpecError {
        key: key.to_string(),
        value: format!("{value:?}"),
        expected: expected.to_string(),
    }
}

/// Every key of an alias entry is one Nova's alias schema knows.
fn reject_unknown_keys(values: &BTreeMap<String, String>) -> Result<(), SpecError> {
    for key in values.keys() {
        if ![
            "name",
            "capability_type",
            "product_id",
            "vendor_id",
            "device_type",
            "numa_policy",
            "resource_class",
            "traits",
            "live_migratable",
        ]
        .contains(&key.as_str())
        {
            return Err(alias_err(
                key,
                &values[key],
                "unknown alias key; expected name, capability_type, vendor_id, product_id, device_type, numa_policy, resource_class, traits or live_migratable",
            ));
        }
    }
    Ok(())
}

/// Adds `values` as a spec of alias `name`: a new alias, or one more spec of an alias defined
/// before, which must agree with it on NUMA policy and device type.
fn add_spec(
    table: &mut AliasTable,
    name: String,
    numa_policy: NumaPolicy,
    values: BTreeMap<String, String>,
) -> Result<(), SpecError> {
    match table.get_mut(&name) {
        None => {
            table.insert(
                name.clone(),
                Alias {
                    name,
                    numa_policy,
                    specs: vec![values],
                },
            );
        }
        Some(existing) => {
            if existing.numa_policy != numa_policy {
                return Err(alias_err(
                    "numa_policy",
                    numa_policy.as_str(),
                    &format!(
                        "alias {name:?} is defined more than once with different NUMA policies ({} and {})",
                        existing.numa_policy.as_str(),
                        numa_policy.as_str()
                    ),
                ));
            }
            let first_type = existing.specs.first().and_then(|s| s.get("dev_type"));
            if first_type != values.get("dev_type") {
                return Err(alias_err(
                    "device_type",
                    values.get("dev_type").map(String::as_str).unwrap_or("(none)"),
                    &format!(
                        "alias {name:?} is defined more than once with different device types ({} and {})",
                        first_type.map(String::as_str).unwrap_or("(none)"),
                        values.get("dev_type").map(String::as_str).unwrap_or("(none)")
                    ),
                ));
            }
            existing.specs.push(values);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn live_migratable_is_normalized_as_nova_does_and_nothing_else() {
        let mut t = AliasTable::new();
        add_alias(
            &mut t,
            entry(&[
                ("name", "a"),
                ("live_migratable", "YES"),
                ("vendor_id", "8086"),
            ]),
        )
        .unwrap();
        assert_eq!(t["a"].specs[0]["live_migratable"], "true");
        add_alias(&mut t, entry(&[("name", "b"), ("live_migratable", "off")])).unwrap();
        assert_eq!(t["b"].specs[0]["live_migratable"], "false");
        assert!(add_alias(
            &mut t,
            entry(&[("name", "c"), ("live_migratable", "sometimes")])
        )
        .is_err());
    }

    #[test]
    fn an_alias_cannot_ask_for_vdpa_devices() {
        // Nova's alias schema allows type-PCI, type-PF and type-VF only: vDPA devices go to
        // vnic_type=vdpa ports (found by the PCI differential test).
        let mut t = AliasTable::new();
        let e = add_alias(
            &mut t,
            entry(&[
                ("name", "v"),
                ("vendor_id", "15b3"),
                ("product_id", "101e"),
                ("device_type", "vdpa"),
            ]),
        )
        .unwrap_err();
        assert_eq!(
            (e.key.as_str(), e.value.as_str()),
            ("device_type", "\"vdpa\"")
        );
        assert!(
            e.expected
                .contains("must be one of type-PCI, type-PF, type-VF"),
            "{e:?}"
        );
        assert!(t.is_empty());
    }

    #[test]
    fn same_name_entries_are_ored() {
        let mut t = AliasTable::new();
        add_alias(
            &mut t,
            entry(&[
                ("name", "vf"),
                ("vendor_id", "8086"),
                ("product_id", "1889"),
                ("device_type", "type-VF"),
            ]),
        )
        .unwrap();
        add_alias(
            &mut t,
            entry(&[
                ("name", "vf"),
                ("vendor_id", "15B3"),
                ("product_id", "101e"),
                ("device_type", "type-VF"),
            ]),
        )
        .unwrap();
        let a = &t["vf"];
        assert_eq!(a.numa_policy, NumaPolicy::Legacy);
        assert_eq!(a.specs.len(), 2);
        assert_eq!(a.specs[1]["vendor_id"], "15b3");
        assert_eq!(a.specs[0]["dev_type"], "type-VF");
        assert!(!a.specs[0].contains_key("device_type"));
    }

    /// Nova 34 fails every alias when one defined twice has no `device_type` (a KeyError on
    /// 'dev_type' in `_get_alias_from_config`); rtrack ORs the entries (docs/differences.md).
    #[test]
    fn same_name_entries_without_device_type_are_ored_where_nova_fails() {
        let mut t = AliasTable::new();
        for (vendor, product) in [("8086", "1889"), ("15b3", "101e")] {
            add_alias(
                &mut t,
                entry(&[
                    ("name", "nic"),
                    ("vendor_id", vendor),
                    ("product_id", product),
                ]),
            )
            .unwrap();
        }
        assert_eq!(t["nic"].specs.len(), 2);
        assert!(t["nic"].specs.iter().all(|s| !s.contains_key("dev_type")));
    }

    #[test]
    fn aliases_need_ids_and_one_spec_with_pci_in_placement() {
        let mut t = AliasTable::new();
        add_alias(&mut t, entry(&[("name", "a"), ("vendor_id", "8086")])).unwrap();
        add_alias(
            &mut t,
            entry(&[("name", "b"), ("resource_class", "CUSTOM_GPU")]),
        )
        .unwrap();
        for (v, p) in [("8086", "1889"), ("15b3", "101e")] {
            add_alias(
                &mut t,
                entry(&[("name", "c"), ("vendor_id", v), ("product_id", p)]),
            )
            .unwrap();
        }
        let names = |v: Vec<(String, String)>| v.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        assert_eq!(names(table_problems(&t, false)), ["a", "b"]);
        assert_eq!(names(table_problems(&t, true)), ["a", "c"]);
    }

    #[test]
    fn conflicting_duplicates_and_bad_values_are_rejected() {
        let mut t = AliasTable::new();
        add_alias(&mut t, entry(&[("name", "a"), ("device_type", "type-VF")])).unwrap();
        let e = add_alias(&mut t, entry(&[("name", "a"), ("device_type", "type-PF")])).unwrap_err();
        assert!(e.to_string().contains("different device types"), "{e}");
        let e = add_alias(
            &mut t,
            entry(&[
                ("name", "a"),
                ("device_type", "type-VF"),
                ("numa_policy", "socket"),
            ]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("different NUMA policies"), "{e}");
        let e = add_alias(&mut t, entry(&[("name", "b"), ("vendor_id", "808")])).unwrap_err();
        assert!(e.to_string().contains("exactly 4 hex digits"), "{e}");
        let e = add_alias(&mut t, entry(&[("name", "b"), ("numa_policy", "strict")])).unwrap_err();
        assert!(
            e.to_string()
                .contains("legacy, preferred, required, socket"),
            "{e}"
        );
        let e = add_alias(&mut t, entry(&[("vendor_id", "8086")])).unwrap_err();
        assert!(e.to_string().contains("needs a name"), "{e}");
        let e = add_alias(&mut t, entry(&[("name", "c"), ("vendorid", "8086")])).unwrap_err();
        assert!(e.to_string().contains("unknown alias key"), "{e}");
        // The message lists every key the alias takes.
        for key in [
            "name",
            "capability_type",
            "vendor_id",
            "product_id",
            "device_type",
        ] {
            assert!(e.to_string().contains(key), "{key}: {e}");
        }
    }
}
