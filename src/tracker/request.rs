//! Turning what a caller sends (a RequestSpec object, or the legacy `request_spec` and
//! `filter_properties` dicts, and the instance) into an [`InstanceRequest`], with every value
//! checked: a malformed request is refused with the field and what was expected, before anything
//! is claimed.
//!
//! In: a decoded [`RequestSpec`] (the API turns the legacy dicts into one first) and the
//! `[pci] alias` table ([`AliasTable`]). Out: the instance's uuid and its [`InstanceRequest`]
//! (flavor sizes as [`FlavorUsage`], [`PciRequest`]s, the guest's NUMA cells), or a [`ClaimError`]
//! naming the field.
//!
//! PCI requests come from the RequestSpec's `pci_requests` when it has any (they already hold the
//! flavor's alias requests and the neutron port requests); otherwise from the flavor's
//! `pci_passthrough:alias` extra spec through `[pci] alias`. A flavor's
//! `hw:pci_numa_affinity_policy` overrides an alias's NUMA policy, as in Nova.

use std::collections::BTreeMap;

use super::error::ClaimError;
use super::model::{FlavorUsage, InstanceRequest, PciRequest};
use super::numa::constraints::{numa_constraints, FlavorView, ImageProps};
use super::numa::nova::check_requested;
use super::numa::GuestTopology;
use super::pci::{AliasTable, NumaPolicy};
use crate::objects::flavor::Flavor;
use crate::objects::pci_request::InstancePCIRequests;
use crate::objects::request_spec::RequestSpec;
use crate::objects::Versioned;

/// Largest sizes accepted: far above any real flavor, low enough that sums cannot overflow.
const MAX_VCPUS: i64 = 1 << 16;
const MAX_MEMORY_MB: i64 = 1 << 40;
const MAX_DISK_GB: i64 = 1 << 40;
const MAX_PCI_COUNT: u32 = 4096;

fn invalid(field: &str, message: impl Into<String>) -> ClaimError {
    ClaimError::Invalid {
        field: field.to_string(),
        message: message.into(),
    }
}

/// Checks a Flavor object and keeps what consumes resources.
pub fn flavor_usage(f: &Flavor, field: &str) -> Result<FlavorUsage, ClaimError> {
    let int = |name: &str, v: Option<&i64>, max: i64| -> Result<i64, ClaimError> {
        match v {
            None => Err(invalid(
                &format!("{field}.{name}"),
                "is missing; a flavor needs it",
            )),
            Some(v) if *v < 0 => Err(invalid(
                &format!("{field}.{name}"),
                format!("{v} is negative"),
            )),
            Some(v) if *v > max => Err(invalid(
                &format!("{field}.{name}"),
                format!("{v} is above the largest accepted value {max}"),
            )),
            Some(v) => Ok(*v),
        }
    };
    let vcpus = int("vcpus", f.vcpus.get(), MAX_VCPUS)?;
    let memory_mb = int("memory_mb", f.memory_mb.get(), MAX_MEMORY_MB)?;
    if vcpus == 0 {
        return Err(invalid(
            &format!("{field}.vcpus"),
            "0: a flavor has at least one VCPU",
        ));
    }
    if memory_mb == 0 {
        return Err(invalid(
            &format!("{field}.memory_mb"),
            "0: a flavor has some memory",
        ));
    }
    Ok(FlavorUsage {
        id: *f
            .id
            .get()
            .ok_or_else(|| invalid(&format!("{field}.id"), "is missing; a flavor needs its id"))?,
        flavorid: f.flavorid.get().cloned().unwrap_or_default(),
        name: f.name.get().cloned(),
        vcpus,
        memory_mb,
        root_gb: int("root_gb", f.root_gb.get().or(Some(&0)), MAX_DISK_GB)?,
        ephemeral_gb: int(
            "ephemeral_gb",
            f.ephemeral_gb.get().or(Some(&0)),
            MAX_DISK_GB,
        )?,
        swap_mb: int("swap", f.swap.get().or(Some(&0)), MAX_DISK_GB)?,
        extra_specs: f.extra_specs.get().cloned().unwrap_or_default(),
        cpus: None,
    })
}

/// A deterministic request id for an alias request (Nova generates a random one; rtrack's must
/// be the same when the same claim is retried).
fn alias_request_id(instance_uuid: &str, alias: &str, index: usize) -> String {
    uuid::Uuid::new_v5(
        &uuid::Uuid::NAMESPACE_OID,
        format!("rtrack.pci.{instance_uuid}.{alias}.{index}").as_bytes(),
    )
    .hyphenated()
    .to_string()
}

/// The flavor's `hw:pci_numa_affinity_policy`, checked.
fn flavor_numa_policy(flavor: &FlavorUsage, field: &str) -> Result<Option<NumaPolicy>, ClaimError> {
    match flavor.extra_specs.get("hw:pci_numa_affinity_policy") {
        None => Ok(None),
        Some(p) => NumaPolicy::parse(p).map(Some).ok_or_else(|| {
            invalid(
                &format!("{field}.extra_specs.hw:pci_numa_affinity_policy"),
                format!("{p:?} is not a policy; expected required, legacy, preferred or socket"),
            )
        }),
    }
}

/// Nova's `get_pci_numa_policy_constraint`: the flavor's policy, else the image's; the image may
/// not name another one.
fn pci_numa_policy(
    flavor: &FlavorUsage,
    image: &ImageProps,
    field: &str,
) -> Result<Option<NumaPolicy>, ClaimError> {
    let from_flavor = flavor_numa_policy(flavor, field)?;
    let from_image = image
        .pci_numa_affinity_policy
        .as_deref()
        .and_then(NumaPolicy::parse);
    match (from_flavor, from_image) {
        (Some(f), Some(i)) if f != i => Err(invalid(
            "request_spec.image.properties.hw_pci_numa_affinity_policy",
            "Image property 'hw_pci_numa_affinity_policy' is not permitted to override the 'hw:pci_numa_affinity_policy' flavor extra spec.",
        )),
        (f, i) => Ok(f.or(i)),
    }
}

/// The guest's NUMA constraints and CPU demand from its flavor and image (the demand is kept
/// in the flavor, which moves carry), checked against the `numa_topology` nova-api computed
/// when there is one.
pub fn numa_of(
    flavor: &mut FlavorUsage,
    image: &ImageProps,
    requested: Option<&crate::objects::instance::InstanceNUMATopology>,
    field: &str,
) -> Result<Option<GuestTopology>, ClaimError> {
    let c = numa_constraints(
        &FlavorView {
            vcpus: flavor.vcpus,
            memory_mb: flavor.memory_mb,
            extra_specs: &flavor.extra_specs,
            path: field,
        },
        image,
        "request_spec.image",
    )?;
    flavor.cpus = Some(c.cpus);
    check_requested(requested, c.numa.as_ref(), "request_spec.numa_topology")?;
    Ok(c.numa)
}

/// Nova's `get_pci_requests_from_flavor`: one request per `alias:count` in
/// `pci_passthrough:alias`, with the flavor's `hw:pci_numa_affinity_policy` over the aliases'.
pub fn alias_requests(
    flavor: &FlavorUsage,
    aliases: &AliasTable,
    instance_uuid: &str,
    field: &str,
) -> Result<Vec<PciRequest>, ClaimError> {
    let policy = flavor_numa_policy(flavor, field)?;
    alias_requests_with_policy(flavor, aliases, instance_uuid, policy, field)
}

/// [`alias_requests`] with the affinity policy already decided (the flavor's or the image's).
pub fn alias_requests_with_policy(
    flavor: &FlavorUsage,
    aliases: &AliasTable,
    instance_uuid: &str,
    override_policy: Option<NumaPolicy>,
    field: &str,
) -> Result<Vec<PciRequest>, ClaimError> {
    let Some(spec) = flavor.extra_specs.get("pci_passthrough:alias") else {
        return Ok(Vec::new());
    };
    let key = format!("{field}.extra_specs.pci_passthrough:alias");
    let mut out = Vec::new();
    for (i, item) in spec.split(',').enumerate() {
        let (name, count) = item
            .split_once(':')
            .ok_or_else(|| invalid(&key, format!("{item:?} is not name:count (e.g. \"vf:2\")")))?;
        let name = name.trim();
        let count: u32 = count.trim().parse().ok().filter(|c| (1..=MAX_PCI_COUNT).contains(c)).ok_or_else(|| {
            invalid(&key, format!("count {count:?} for alias {name:?} is not a number from 1 to {MAX_PCI_COUNT}"))
        })?;
        let alias = aliases.get(name).ok_or_else(|| {
            let known: Vec<&str> = aliases.keys().map(String::as_str).collect();
            invalid(
                &key,
                format!(
                    "alias {name:?} is not defined in [pci] alias (defined: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            )
        })?;
        out.push(PciRequest {
            request_id: alias_request_id(instance_uuid, name, i),
            count,
            specs: alias.specs.clone(),
            alias_name: Some(name.to_string()),
            numa_policy: override_policy.unwrap_or(alias.numa_policy),
            requester_id: None,
        });
    }
    Ok(out)
}

/// Converts an InstancePCIRequests object.
pub fn pci_requests_from_object(
    reqs: &Versioned<InstancePCIRequests>,
    instance_uuid: &str,
    flavor_policy: Option<NumaPolicy>,
    field: &str,
) -> Result<Vec<PciRequest>, ClaimError> {
    let mut out = Vec::new();
    for (i, r) in reqs
        .obj
        .requests
        .get()
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .enumerate()
    {
        let r = &r.obj;
        let path = format!("{field}.requests[{i}]");
        let count = *r
            .count
            .get()
            .ok_or_else(|| invalid(&format!("{path}.count"), "is missing"))?;
        if count < 1 || count > i64::from(MAX_PCI_COUNT) {
            return Err(invalid(
                &format!("{path}.count"),
                format!("{count} is not from 1 to {MAX_PCI_COUNT}"),
            ));
        }
        let specs: Vec<BTreeMap<String, String>> = r
            .spec
            .get()
            .map(|list| {
                list.iter()
                    .map(|m| {
                        m.iter()
                            .filter_map(|(k, v)| v.clone().map(|v| (k.clone(), v)))
                            .collect()
                    })
                    .collect()
            })
            .unwrap_or_default();
        if specs.is_empty() {
            return Err(invalid(
                &format!("{path}.spec"),
                "is empty; a PCI request needs at least one spec",
            ));
        }
        let alias_name = r.alias_name.get().cloned();
        let policy = match r.numa_policy.get() {
            Some(p) => NumaPolicy::parse(p).unwrap_or(NumaPolicy::Legacy),
            None => NumaPolicy::Legacy,
        };
        // The flavor's policy overrides an alias's (not a neutron port's).
        let policy = match (&alias_name, flavor_policy) {
            (Some(_), Some(f)) => f,
            _ => policy,
        };
        out.push(PciRequest {
            request_id: r.request_id.get().cloned().unwrap_or_else(|| {
                alias_request_id(instance_uuid, alias_name.as_deref().unwrap_or("request"), i)
            }),
            count: count as u32,
            specs,
            alias_name,
            numa_policy: policy,
            requester_id: r.requester_id.get().cloned(),
        });
    }
    Ok(out)
}

/// The instance request in a RequestSpec.
pub fn from_request_spec(
    spec: &Versioned<RequestSpec>,
    aliases: &AliasTable,
) -> Result<(String, InstanceRequest), ClaimError> {
    let s = &spec.obj;
    let uuid = s.instance_uuid.get().cloned().ok_or_else(|| {
        invalid(
            "request_spec.instance_uuid",
            "is missing; the claim needs the instance uuid",
        )
    })?;
    let flavor_obj = s.flavor.get().ok_or_else(|| {
        invalid(
            "request_spec.flavor",
            "is missing; a claim needs the flavor",
        )
    })?;
    let mut flavor = flavor_usage(&flavor_obj.obj, "request_spec.flavor")?;
    let image = ImageProps::from_image(s.image.get().map(|i| &i.obj.data), "request_spec.image")?;
    let numa = numa_of(
        &mut flavor,
        &image,
        s.numa_topology.get().map(|t| &t.obj),
        "request_spec.flavor",
    )?;
    let flavor_policy = pci_numa_policy(&flavor, &image, "request_spec.flavor")?;
    let pci_requests = match s.pci_requests.get() {
        Some(r) if r.obj.requests.get().is_some_and(|l| !l.is_empty()) => {
            pci_requests_from_object(r, &uuid, flavor_policy, "request_spec.pci_requests")?
        }
        _ => alias_requests_with_policy(
            &flavor,
            aliases,
            &uuid,
            flavor_policy,
            "request_spec.flavor",
        )?,
    };
    Ok((
        uuid,
        InstanceRequest {
            is_bfv: s.is_bfv.get().copied().unwrap_or(false),
            flavor,
            pci_requests,
            numa,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::pci::alias::add_alias;

    fn flavor(extra: &[(&str, &str)]) -> FlavorUsage {
        FlavorUsage {
            id: 1,
            flavorid: "f".into(),
            name: None,
            vcpus: 2,
            memory_mb: 1024,
            root_gb: 10,
            ephemeral_gb: 5,
            swap_mb: 1536,
            cpus: None,
            extra_specs: extra
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn aliases() -> AliasTable {
        let mut t = AliasTable::new();
        add_alias(
            &mut t,
            [
                ("name", "vf"),
                ("vendor_id", "8086"),
                ("product_id", "1889"),
                ("device_type", "type-VF"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        )
        .unwrap();
        t
    }

    #[test]
    fn disk_truncates_swap_per_instance() {
        let f = flavor(&[]);
        assert_eq!(f.disk_gb(false), 10 + 5 + 1);
        assert_eq!(f.disk_gb(true), 5 + 1);
    }

    #[test]
    fn aliases_become_requests_with_stable_ids_and_flavor_policy() {
        let f = flavor(&[
            ("pci_passthrough:alias", "vf:2"),
            ("hw:pci_numa_affinity_policy", "required"),
        ]);
        let r = alias_requests(&f, &aliases(), "u1", "flavor").unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].count, 2);
        assert_eq!(r[0].numa_policy, NumaPolicy::Required);
        assert_eq!(r[0].specs[0]["dev_type"], "type-VF");
        assert_eq!(r, alias_requests(&f, &aliases(), "u1", "flavor").unwrap());
    }

    #[test]
    fn bad_aliases_are_named() {
        let e = alias_requests(
            &flavor(&[("pci_passthrough:alias", "gpu:1")]),
            &aliases(),
            "u",
            "flavor",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("alias \"gpu\" is not defined in [pci] alias (defined: vf)"),
            "{e}"
        );
        let e = alias_requests(
            &flavor(&[("pci_passthrough:alias", "vf:zero")]),
            &aliases(),
            "u",
            "flavor",
        )
        .unwrap_err();
        assert!(e.to_string().contains("count \"zero\""), "{e}");
        let e = alias_requests(
            &flavor(&[("pci_passthrough:alias", "vf")]),
            &aliases(),
            "u",
            "flavor",
        )
        .unwrap_err();
        assert!(e.to_string().contains("not name:count"), "{e}");
        let e = alias_requests(
            &flavor(&[
                ("pci_passthrough:alias", "vf:1"),
                ("hw:pci_numa_affinity_policy", "strict"),
            ]),
            &aliases(),
            "u",
            "flavor",
        )
        .unwrap_err();
        assert!(e.to_string().contains("not a policy"), "{e}");
    }

    #[test]
    fn negative_and_absurd_flavors_are_refused() {
        let mut f = Flavor {
            id: 1.into(),
            vcpus: (-1).into(),
            memory_mb: 512.into(),
            ..Flavor::default()
        };
        assert!(flavor_usage(&f, "flavor")
            .unwrap_err()
            .to_string()
            .contains("flavor.vcpus: -1 is negative"));
        f.vcpus = (1 << 30).into();
        assert!(flavor_usage(&f, "flavor")
            .unwrap_err()
            .to_string()
            .contains("above the largest"));
        f.vcpus = 1.into();
        f.memory_mb = crate::objects::Field::Unset;
        assert!(flavor_usage(&f, "flavor")
            .unwrap_err()
            .to_string()
            .contains("flavor.memory_mb: is missing"));
    }
}
