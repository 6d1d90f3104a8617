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

/// Largest VCPU count accepted: far above any real flavor, low enough that sums cannot overflow.
pub const MAX_VCPUS: i64 = 1 << 16;
/// Largest memory accepted, MiB.
pub const MAX_MEMORY_MB: i64 = 1 << 40;
/// Largest disk (root, ephemeral) or swap size accepted, GiB or MiB.
pub const MAX_DISK_GB: i64 = 1 << 40;
/// Most devices one PCI request may ask for.
pub const MAX_PCI_COUNT: u32 = 4096;

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
    let extra_specs = f.extra_specs.get().cloned().unwrap_or_default();
    let (extra_resources, mem_encryption_model) =
        super::flavor_classes::extra_classes(&extra_specs, field)?;
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
        extra_specs,
        cpus: None,
        extra_resources,
        mem_encryption_model,
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
            rp_uuids: Vec::new(),
            devices: Vec::new(),
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
        // Nova reads the providers from the first spec only, and only for alias requests
        // (a port's devices are not in Placement).
        let rp_uuids = match (&alias_name, specs[0].get("rp_uuids")) {
            (Some(_), Some(list)) => parse_rp_uuids(list, &format!("{path}.spec[0].rp_uuids"))?,
            _ => Vec::new(),
        };
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
            rp_uuids,
            devices: Vec::new(),
        });
    }
    Ok(out)
}

/// Nova's `rp_uuids` spec value: provider uuids joined by commas, one per device.
fn parse_rp_uuids(list: &str, field: &str) -> Result<Vec<uuid::Uuid>, ClaimError> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|u| {
            uuid::Uuid::parse_str(u).map_err(|_| {
                invalid(
                    field,
                    format!(
                        "{} is not a provider uuid; expected uuids joined by commas",
                        crate::echo::quoted(u)
                    ),
                )
            })
        })
        .collect()
}

/// Applies the RequestSpec's request group to provider mapping to the PCI requests, as Nova's
/// compute does before it claims (`update_pci_request_with_placement_allocations`): the scheduler
/// makes one group per requested device, `<request_id>-<n>`, each allocated from one provider.
/// Groups of other requesters (ports with QoS, the flavor's own) are left alone. When a request
/// already carries `rp_uuids` in its spec, the mapping must agree with it.
pub fn apply_provider_mapping(
    requests: &mut [PciRequest],
    groups: &[&serde_json::Map<String, serde_json::Value>],
    field: &str,
) -> Result<(), ClaimError> {
    let mut parsed: Vec<(String, Vec<uuid::Uuid>)> = Vec::with_capacity(groups.len());
    for (i, g) in groups.iter().enumerate() {
        let Some(requester) = g.get("requester_id").and_then(|v| v.as_str()) else {
            continue;
        };
        let providers = match g.get("provider_uuids") {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(serde_json::Value::Array(list)) => list
                .iter()
                .enumerate()
                .map(|(j, v)| {
                    v.as_str()
                        .and_then(|s| uuid::Uuid::parse_str(s).ok())
                        .ok_or_else(|| {
                            invalid(
                                &format!("{field}[{i}].provider_uuids[{j}]"),
                                "is not a uuid",
                            )
                        })
                })
                .collect::<Result<_, _>>()?,
            Some(_) => {
                return Err(invalid(
                    &format!("{field}[{i}].provider_uuids"),
                    "expected a list of provider uuids",
                ))
            }
        };
        parsed.push((requester.to_string(), providers));
    }
    for r in requests.iter_mut().filter(|r| r.alias_name.is_some()) {
        let mut mapped = Vec::new();
        for (i, (requester, providers)) in parsed.iter().enumerate() {
            if !requester.starts_with(&r.request_id) {
                continue;
            }
            let first = providers.first().ok_or_else(|| {
                invalid(
                    &format!("{field}[{i}].provider_uuids"),
                    format!(
                        "is empty for group {}: the scheduler maps each PCI request group to the provider it allocated from",
                        crate::echo::quoted(requester)
                    ),
                )
            })?;
            mapped.push(*first);
        }
        if mapped.is_empty() {
            continue;
        }
        if !r.rp_uuids.is_empty() {
            let (mut a, mut b) = (r.rp_uuids.clone(), mapped.clone());
            a.sort_unstable();
            b.sort_unstable();
            if a != b {
                return Err(invalid(
                    field,
                    format!(
                        "the request groups of PCI request {} name other providers than its spec's rp_uuids",
                        r.request_id
                    ),
                ));
            }
        }
        r.rp_uuids = mapped;
    }
    Ok(())
}

/// The RequestSpec's request groups that carry their own resources of classes rtrack places
/// below the compute node (a `VGPU` group, say) and the provider Placement allocated each from,
/// as provider -> class -> amount; groups of ports and PCI requests (with a `requester_id`) are
/// the PCI mapping's. Malformed groups are skipped: the claim's `allocations` say the same.
pub fn group_allocations(
    spec: &Versioned<RequestSpec>,
) -> BTreeMap<uuid::Uuid, BTreeMap<crate::inventory::resources::ResourceClass, i64>> {
    let mut out: BTreeMap<uuid::Uuid, BTreeMap<_, i64>> = BTreeMap::new();
    let Some(groups) = spec.obj.requested_resources.get() else {
        return out;
    };
    for g in groups {
        let g = &g.obj.data;
        if g.get("requester_id").is_some_and(|r| !r.is_null()) {
            continue;
        }
        let Some(rp) = g
            .get("provider_uuids")
            .and_then(|p| p.as_array())
            .and_then(|p| p.first())
            .and_then(|p| p.as_str())
            .and_then(|p| uuid::Uuid::parse_str(p).ok())
        else {
            continue;
        };
        let Some(resources) = g.get("resources").and_then(|r| r.as_object()) else {
            continue;
        };
        for (name, amount) in resources {
            let (Ok(class), Some(n)) = (
                crate::inventory::resources::ResourceClass::from_name(name),
                amount.as_i64(),
            ) else {
                continue;
            };
            if class.is_extra() && n > 0 {
                let e = out.entry(rp).or_default().entry(class).or_default();
                *e = e.saturating_add(n);
            }
        }
    }
    out
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
    // The flavor's classes again, now that the image is known (it may ask for memory
    // encryption, and the model judges it).
    let (extra, model) = super::flavor_classes::extra_classes_with(
        &flavor.extra_specs,
        flavor.name.as_deref(),
        Some(&image),
        "request_spec.flavor",
    )?;
    flavor.extra_resources = extra;
    flavor.mem_encryption_model = model;
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
    let mut pci_requests = pci_requests;
    if let Some(groups) = s.requested_resources.get() {
        let groups: Vec<&serde_json::Map<String, serde_json::Value>> =
            groups.iter().map(|g| &g.obj.data).collect();
        apply_provider_mapping(
            &mut pci_requests,
            &groups,
            "request_spec.requested_resources",
        )?;
    }
    for (i, r) in pci_requests.iter().enumerate() {
        if !r.rp_uuids.is_empty() && r.rp_uuids.len() != r.count as usize {
            return Err(invalid(
                &format!("request_spec.pci_requests.requests[{i}]"),
                format!(
                    "Placement allocated {} device(s) for request {} (rp_uuids or its request groups) but it asks for {}",
                    r.rp_uuids.len(),
                    r.request_id,
                    r.count
                ),
            ));
        }
    }
    // The networks' NUMA affinity binds only a guest with a NUMA topology (Nova's filter and
    // claim pass it in the NUMA limits).
    let mut numa = numa;
    if let (Some(n), Some(m)) = (numa.as_mut(), s.network_metadata.get()) {
        n.networks = crate::tracker::numa::GuestNetworks {
            physnets: m
                .obj
                .physnets
                .get()
                .into_iter()
                .flatten()
                .cloned()
                .collect(),
            tunneled: m.obj.tunneled.get().copied().unwrap_or(false),
        };
    }
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
            extra_resources: Default::default(),
            mem_encryption_model: None,
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

    fn group(requester: &str, providers: &[&str]) -> serde_json::Map<String, serde_json::Value> {
        serde_json::json!({"requester_id": requester, "provider_uuids": providers, "use_same_provider": true})
            .as_object()
            .unwrap()
            .clone()
    }

    #[test]
    fn request_groups_map_each_device_to_its_provider_as_novas_compute_does() {
        let f = flavor(&[("pci_passthrough:alias", "vf:2")]);
        let mut reqs = alias_requests(&f, &aliases(), "u1", "flavor").unwrap();
        let id = reqs[0].request_id.clone();
        let a = "aaaaaaaa-0000-4000-8000-000000000001";
        let b = "bbbbbbbb-0000-4000-8000-000000000002";
        let groups = [
            group(&format!("{id}-0"), &[a]),
            group(&format!("{id}-1"), &[b]),
            group("port-1", &[a]),
        ];
        let refs: Vec<_> = groups.iter().collect();
        apply_provider_mapping(&mut reqs, &refs, "rr").unwrap();
        let want: Vec<uuid::Uuid> = [a, b].iter().map(|u| u.parse().unwrap()).collect();
        assert_eq!(reqs[0].rp_uuids, want);
        // The spec's rp_uuids, as Nova's compute writes them, must agree.
        let mut with_spec = reqs.clone();
        with_spec[0].rp_uuids = parse_rp_uuids(&format!("{b},{a}"), "s").unwrap();
        apply_provider_mapping(&mut with_spec, &refs, "rr").unwrap();
        with_spec[0].rp_uuids = parse_rp_uuids(&format!("{b},{b}"), "s").unwrap();
        let e = apply_provider_mapping(&mut with_spec, &refs, "rr").unwrap_err();
        assert!(e.to_string().contains("other providers"), "{e}");
        // A port request keeps no providers.
        let mut port = reqs.clone();
        port[0].alias_name = None;
        port[0].rp_uuids.clear();
        apply_provider_mapping(&mut port, &refs, "rr").unwrap();
        assert!(port[0].rp_uuids.is_empty());
    }

    #[test]
    fn bad_mappings_name_the_field() {
        let f = flavor(&[("pci_passthrough:alias", "vf:1")]);
        let mut reqs = alias_requests(&f, &aliases(), "u1", "flavor").unwrap();
        let id = reqs[0].request_id.clone();
        let empty = [group(&format!("{id}-0"), &[])];
        let e =
            apply_provider_mapping(&mut reqs, &empty.iter().collect::<Vec<_>>(), "rr").unwrap_err();
        assert!(
            e.to_string().starts_with("rr[0].provider_uuids: is empty"),
            "{e}"
        );
        let bad = [group(&format!("{id}-0"), &["nope"])];
        let e =
            apply_provider_mapping(&mut reqs, &bad.iter().collect::<Vec<_>>(), "rr").unwrap_err();
        assert_eq!(e.to_string(), "rr[0].provider_uuids[0]: is not a uuid");
        let e = parse_rp_uuids("x".repeat(500).as_str(), "spec.rp_uuids").unwrap_err();
        assert!(
            e.to_string().starts_with("spec.rp_uuids: \"xxx") && e.to_string().len() < 300,
            "{e}"
        );
    }
}
