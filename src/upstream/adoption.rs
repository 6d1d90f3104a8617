//! Adoption, Placement's side: what the tree nova-compute left holds ([`PlacementHoldings`]),
//! turned into one instance request per consumer ([`Adoptee`]) for the tracker to claim.
//!
//! In: the holdings read from Placement, the [`DesiredState`] (which providers are rtrack's and
//! which devices each PCI provider stands for), the tracked devices, the operator's map of
//! instance -> device addresses (optional), and whether the host has no CPU sets (legacy CPUs).
//! Out: the adoptees, the consumers that cannot be adopted and why, and notes on what rtrack
//! chose where Placement does not say (which device of a provider, which pinned CPUs).
//!
//! Each consumer's request is sized by its allocation: VCPU and PCPU (all PCPU: a dedicated
//! guest), MEMORY_MB, DISK_GB, the extra classes (`resources:CLASS=N`), and one PCI request
//! per PCI provider it holds devices of, held to that provider.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use uuid::Uuid;

use super::desired::{DesiredState, ProviderRole, CONSUMER_INSTANCE, CONSUMER_MIGRATION};
use super::reconcile::Amounts;
use crate::inventory::resources::ResourceClass;
use crate::probes::pci::{PciAddress, PciDevType};
use crate::tracker::model::{FlavorUsage, InstanceRequest, PciRequest};
use crate::tracker::numa::image::ImageProps;
use crate::tracker::ops::adopt::{AdoptProblem, Adoptee};
use crate::tracker::pci::NumaPolicy;
use crate::tracker::InstanceInfo;

/// A provider of the tree as Placement lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeldProvider {
    /// Its name.
    pub name: String,
    /// Its parent.
    pub parent: Option<Uuid>,
}

/// A consumer holding allocations on the tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeldConsumer {
    /// Its project, user and consumer type (`INSTANCE`, `MIGRATION`), when Placement says.
    pub owner: Option<(String, String, String)>,
    /// What it holds on the tree: provider -> class -> amount.
    pub resources: Amounts,
}

/// What Placement holds on the compute node's tree.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PlacementHoldings {
    /// The compute node provider (rtrack's uuid).
    pub root: Uuid,
    /// Providers of the tree.
    pub providers: BTreeMap<Uuid, HeldProvider>,
    /// Consumers with allocations on the tree.
    pub consumers: BTreeMap<Uuid, HeldConsumer>,
}

/// A tracked device, as adoption needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceFacts {
    /// Its address.
    pub address: PciAddress,
    /// Vendor id.
    pub vendor_id: String,
    /// Product id.
    pub product_id: String,
    /// Nova's type.
    pub dev_type: PciDevType,
    /// Free to claim.
    pub available: bool,
}

/// The adoptees, the problems, and the notes on what rtrack chose.
#[derive(Debug, Default)]
pub struct Translation {
    /// One per consumer that can be adopted.
    pub adoptees: Vec<Adoptee>,
    /// Consumers that cannot, and why.
    pub problems: Vec<AdoptProblem>,
    /// What rtrack chose where Placement does not say, per consumer.
    pub notes: Vec<(String, String)>,
}

const HOST_CLASSES: [&str; 4] = ["VCPU", "PCPU", "MEMORY_MB", "DISK_GB"];

/// Turns the holdings into adoptees.
pub fn adoptees(
    h: &PlacementHoldings,
    desired: &DesiredState,
    devices: &[DeviceFacts],
    device_map: &BTreeMap<Uuid, Vec<PciAddress>>,
    legacy_cpus: bool,
    assume_instances: bool,
) -> Translation {
    let mut out = Translation::default();
    let role: BTreeMap<Uuid, ProviderRole> =
        desired.providers.iter().map(|p| (p.uuid, p.role)).collect();
    let mut by_provider: BTreeMap<Uuid, Vec<&DeviceFacts>> = BTreeMap::new();
    for d in devices {
        if let Some((rp, _)) = desired.device_providers.get(&d.address) {
            by_provider.entry(*rp).or_default().push(d);
        }
    }
    for (uuid, c) in &h.consumers {
        let mut notes = Vec::new();
        match translate(
            *uuid,
            c,
            h,
            desired,
            &role,
            &by_provider,
            device_map,
            legacy_cpus,
            assume_instances,
            &mut notes,
        ) {
            Ok(a) => {
                out.adoptees.push(a);
                out.notes
                    .extend(notes.into_iter().map(|n| (uuid.to_string(), n)));
            }
            Err(reason) => out.problems.push(AdoptProblem {
                consumer: uuid.to_string(),
                reason,
            }),
        }
    }
    out
}

/// One consumer's request, or why it cannot be adopted.
#[allow(clippy::too_many_arguments)]
fn translate(
    uuid: Uuid,
    c: &HeldConsumer,
    h: &PlacementHoldings,
    desired: &DesiredState,
    role: &BTreeMap<Uuid, ProviderRole>,
    by_provider: &BTreeMap<Uuid, Vec<&DeviceFacts>>,
    device_map: &BTreeMap<Uuid, Vec<PciAddress>>,
    legacy_cpus: bool,
    assume_instances: bool,
    notes: &mut Vec<String>,
) -> Result<Adoptee, String> {
    let consumer = uuid.to_string();
    let (project, user, kind) = c.owner.clone().unwrap_or_default();
    if kind == CONSUMER_MIGRATION {
        return Err("a move in progress holds it (a migration consumer): confirm or revert the move with nova-compute before the take-over".into());
    }
    // A migration's allocation adopted as an instance would never be released.
    if kind != CONSUMER_INSTANCE && !assume_instances {
        return Err(format!(
            "Placement does not say it is an instance (consumer type {}; types need Placement 1.38 and a Nova that sets them): check that no move is in progress, then adopt with --assume-instances",
            if kind.is_empty() { "not given".to_string() } else { format!("{kind:?}") }
        ));
    }
    let Held {
        host,
        extra,
        nested,
        pci,
    } = held_by_role(c, h, desired, role)?;
    let (vcpu, pcpu) = (
        host.get("VCPU").copied().unwrap_or(0),
        host.get("PCPU").copied().unwrap_or(0),
    );
    if vcpu > 0 && pcpu > 0 {
        return Err(format!("it holds {vcpu} VCPU and {pcpu} PCPU (a mixed CPU policy guest): which of its CPUs are pinned is not in its allocation; claim it with its flavor instead"));
    }
    if vcpu + pcpu == 0 || host.get("MEMORY_MB").copied().unwrap_or(0) == 0 {
        return Err(format!(
            "it holds no CPUs or no memory here ({:?}): not an instance rtrack can size",
            host
        ));
    }
    let mut extra_specs = BTreeMap::new();
    if pcpu > 0 {
        extra_specs.insert("hw:cpu_policy".to_string(), "dedicated".to_string());
        notes.push(format!("{pcpu} pinned CPUs: chosen by rtrack's NUMA fit (its real pinning is the hypervisor's)"));
    }
    for (class, n) in &extra {
        extra_specs.insert(format!("resources:{class}"), n.to_string());
    }
    let pci_requests = pci_requests_of(&pci, by_provider, device_map.get(&uuid), notes)?;
    let mut flavor = FlavorUsage {
        id: 0,
        flavorid: "adopted".into(),
        name: Some("adopted".into()),
        vcpus: (vcpu + pcpu) as i64,
        memory_mb: host.get("MEMORY_MB").copied().unwrap_or(0) as i64,
        root_gb: host.get("DISK_GB").copied().unwrap_or(0) as i64,
        ephemeral_gb: 0,
        swap_mb: 0,
        extra_specs,
        cpus: None,
        extra_resources: BTreeMap::new(),
        mem_encryption_model: None,
    };
    let built = crate::tracker::flavor_classes::extra_classes(&flavor.extra_specs, "adopted")
        .and_then(|(extra, model)| {
            flavor.extra_resources = extra;
            flavor.mem_encryption_model = model;
            crate::tracker::request::numa_of(&mut flavor, &ImageProps::default(), None, "adopted")
        });
    let numa = built.map_err(|e| e.to_string())?;
    if legacy_cpus && pcpu > 0 {
        notes.push("this host has no CPU sets: its pinned CPUs count as VCPU, as Nova's".into());
    }
    Ok(Adoptee {
        info: InstanceInfo {
            uuid: consumer.clone(),
            project_id: (!project.is_empty()).then_some(project),
            user_id: (!user.is_empty()).then_some(user),
            vm_state: Some("active".into()),
            allocations: nested,
            ..Default::default()
        },
        request: InstanceRequest {
            flavor,
            is_bfv: host.get("DISK_GB").copied().unwrap_or(0) == 0,
            pci_requests,
            numa,
        },
    })
}

/// A consumer's allocation sorted by the role of each provider it is on.
struct Held<'a> {
    /// Host classes (VCPU, PCPU, MEMORY_MB, DISK_GB) on the root or a sharing provider.
    host: BTreeMap<&'a str, u64>,
    /// Every other class, as the flavor's `resources:` extra specs.
    extra: BTreeMap<String, u64>,
    /// What it holds on each nested provider.
    nested: BTreeMap<Uuid, BTreeMap<ResourceClass, i64>>,
    /// Devices it holds on each PCI provider.
    pci: Vec<(Uuid, u64)>,
}

/// Sorts `c`'s allocation by provider role; a provider not of this host (and not another
/// service's child) is an error naming it.
fn held_by_role<'a>(
    c: &HeldConsumer,
    h: &PlacementHoldings,
    desired: &DesiredState,
    role: &BTreeMap<Uuid, ProviderRole>,
) -> Result<Held<'a>, String> {
    let mut host: BTreeMap<&str, u64> = BTreeMap::new();
    let mut extra: BTreeMap<String, u64> = BTreeMap::new();
    let mut nested: BTreeMap<Uuid, BTreeMap<ResourceClass, i64>> = BTreeMap::new();
    let mut pci: Vec<(Uuid, u64)> = Vec::new();
    let mut bad = Vec::new();
    for (rp, classes) in &c.resources {
        match role.get(rp) {
            Some(ProviderRole::ComputeNode) | Some(ProviderRole::Sharing) => {
                for (class, n) in classes {
                    match HOST_CLASSES.iter().find(|c| *c == class) {
                        Some(c) => *host.entry(*c).or_default() += n,
                        None => *extra.entry(class.clone()).or_default() += n,
                    }
                }
            }
            Some(ProviderRole::Nested) => {
                for (class, n) in classes {
                    *extra.entry(class.clone()).or_default() += n;
                    if let Ok(rc) = ResourceClass::from_name(class) {
                        nested.entry(*rp).or_default().insert(rc, *n as i64);
                    }
                }
            }
            Some(ProviderRole::Pci { .. }) => {
                pci.push((*rp, classes.values().sum()));
            }
            None => match h.providers.get(rp) {
                // Another service's provider under the compute node (Neutron's): theirs.
                Some(p) if p.parent.is_some() && !is_rtrack_name(&p.name, desired) => {}
                _ => bad.push(format!(
                    "it holds {classes:?} on provider {rp}, which is not one of this host's as probed (a device gone, or not selected by a [pci] device_spec)"
                )),
            },
        }
    }
    if !bad.is_empty() {
        return Err(bad.join("; "));
    }
    Ok(Held {
        host,
        extra,
        nested,
        pci,
    })
}

/// One request per PCI provider the consumer holds devices of, held to Placement's allocation,
/// with the devices the operator's device map names for it (`mapped`).
fn pci_requests_of(
    pci: &[(Uuid, u64)],
    by_provider: &BTreeMap<Uuid, Vec<&DeviceFacts>>,
    mapped: Option<&Vec<PciAddress>>,
    notes: &mut Vec<String>,
) -> Result<Vec<PciRequest>, String> {
    let mut pci_requests = Vec::new();
    let mapped: BTreeSet<PciAddress> = mapped.into_iter().flatten().copied().collect();
    let mut mapped_used = BTreeSet::new();
    for (rp, count) in pci {
        let members = by_provider.get(rp).cloned().unwrap_or_default();
        let Some(first) = members.first() else {
            return Err(format!("provider {rp} has no tracked device"));
        };
        let chosen: Vec<PciAddress> = members
            .iter()
            .map(|d| d.address)
            .filter(|a| mapped.contains(a))
            .collect();
        mapped_used.extend(chosen.iter().copied());
        if !mapped.is_empty() && chosen.len() as u64 != *count {
            return Err(format!(
                "the device map names {} device(s) of provider {rp} for it, Placement allocated {count}",
                chosen.len()
            ));
        }
        if let Some(d) = members
            .iter()
            .find(|d| chosen.contains(&d.address) && !d.available)
        {
            return Err(format!(
                "device {} named in the device map is not free here",
                d.address
            ));
        }
        if chosen.is_empty() {
            notes.push(format!("{count} device(s) of provider {rp}: free ones in Nova's pool order, the highest addresses first (no device map entry)"));
        }
        let dev_type = first.dev_type.as_str();
        pci_requests.push(PciRequest {
            request_id: format!("adopted-{rp}"),
            count: *count as u32,
            specs: vec![BTreeMap::from([
                ("vendor_id".to_string(), first.vendor_id.clone()),
                ("product_id".to_string(), first.product_id.clone()),
                ("dev_type".to_string(), dev_type.to_string()),
            ])],
            // As a flavor alias request: those are held to Placement's allocation (a port's are
            // not); the name is not looked up anywhere.
            alias_name: Some("adopted".into()),
            numa_policy: NumaPolicy::Legacy,
            requester_id: None,
            rp_uuids: vec![*rp; *count as usize],
            devices: chosen,
        });
    }
    if let Some(stray) = mapped.iter().find(|a| !mapped_used.contains(a)) {
        return Err(format!(
            "the device map names {stray} for it, which is not on a provider it holds devices of"
        ));
    }
    Ok(pci_requests)
}

/// A child name rtrack would give one of its providers (the compute node's name, `_`, ...).
fn is_rtrack_name(name: &str, desired: &DesiredState) -> bool {
    desired
        .provider(desired.root)
        .is_some_and(|r| name.starts_with(&format!("{}_", r.name)))
}
