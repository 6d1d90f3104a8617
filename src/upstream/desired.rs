//! What Placement should hold for this host, computed from a snapshot. Pure: no I/O, no clock,
//! no lock; the daemon builds it from data it copied while holding the tracker lock, then lets
//! go of the lock before reporting.
//!
//! In: the tracker's [`HostView`] of the probe (inventory per class and the PCI functions the
//! device specs selected, derived once per audit), the [`ValidConfig`], the compute node's uuid and
//! `hypervisor_hostname`, whether the service is disabled, and the local claims
//! ([`Consumer`]s). Out: a [`DesiredState`]: providers (the compute node, PCI children, the
//! sharing provider), each with inventories, traits and aggregates, and the allocations.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::traits;
use super::UpstreamError;
use crate::config::ValidConfig;
use crate::inventory::resources::ResourceClass;
use crate::probes::pci::PciAddress;
use crate::tracker::host_view::HostView;
use crate::tracker::nested::NestedKey;

use super::children::pmem_inventories;
pub use super::children::{is_nested_provider_name, nested_provider_name};
use super::children::{merge_provider_configs, nested_children, pci_children, sharing_provider};
use super::expected::{expected_allocations, AllocationPlaces};

/// `consumer_type` of an instance's own allocation.
pub const CONSUMER_INSTANCE: &str = "INSTANCE";
/// `consumer_type` of the allocation a migration holds on the source host during a move (Nova
/// moves the instance's source-side allocation to the migration uuid).
pub const CONSUMER_MIGRATION: &str = "MIGRATION";

/// What a claim takes, keyed by where it comes from. The tracker fills this; the reporter maps
/// it to providers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResourceKey {
    /// A host resource class (`VCPU`, `PCPU`, `MEMORY_MB`, `DISK_GB`): on the compute node, or
    /// DISK_GB on the sharing provider when `[resources] shared_storage_provider` is set.
    Host(String),
    /// One PCI function (a type-PCI device, a PF, or a VF); the amount is normally 1. It lands
    /// on the child provider that holds that function (a VF's lands on its PF's provider).
    PciDevice(PciAddress),
    /// Units of a class on a provider below the compute node (a vGPU parent's, an encryption
    /// model's).
    Nested(NestedKey, String),
}

/// One local claim holder, as the tracker reports it: an instance, or during a move the
/// migration that holds the source side (uuid = migration uuid, type [`CONSUMER_MIGRATION`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumer {
    /// Instance uuid, or migration uuid for the source side of a move.
    pub uuid: Uuid,
    /// Owning project, when the claim named it (Nova's claims do).
    pub project_id: Option<String>,
    /// Owning user, when the claim named it.
    pub user_id: Option<String>,
    /// [`CONSUMER_INSTANCE`], [`CONSUMER_MIGRATION`], or another free-form type.
    pub consumer_type: String,
    /// Amounts taken.
    pub resources: BTreeMap<ResourceKey, u64>,
}

/// Which allocation ratio to send for a class.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RatioRule {
    /// This value, whatever Placement holds (a configured `*_allocation_ratio`, or a class
    /// with a fixed ratio such as PCPU).
    Fixed(f64),
    /// Keep the value Placement holds for the class (an operator may have changed it through
    /// the API); this `initial_*` value when Placement has no inventory of the class yet.
    InitialOrKeep(f64),
}

/// One class's desired inventory.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredInventory {
    /// How much of the class the provider has in all (Placement's `total`).
    pub total: i64,
    /// How much of it is kept for the host and never allocated (Placement's `reserved`).
    pub reserved: i64,
    /// Smallest allocation.
    pub min_unit: i64,
    /// Largest allocation.
    pub max_unit: i64,
    /// Allocation granularity.
    pub step_size: i64,
    /// Ratio rule.
    pub ratio: RatioRule,
    /// Never report a total below what Placement says is used (PCI: Nova's rule). `max_unit`
    /// follows the raised total.
    pub floor_at_usage: bool,
    /// `reserved` is what Placement holds (an operator may lower it: Nova's way of cleaning a
    /// used one-time-use device); `reserved` above is sent only when Placement has no record.
    pub reserved_kept: bool,
}

impl DesiredInventory {
    /// `total` units taken one or more at a time, up to all of them, nothing reserved, ratio 1,
    /// never below what Placement says is used (a child's devices, vGPUs, contexts).
    pub fn units(total: i64) -> DesiredInventory {
        DesiredInventory {
            total,
            reserved: 0,
            min_unit: 1,
            max_unit: total,
            step_size: 1,
            ratio: RatioRule::Fixed(1.0),
            floor_at_usage: true,
            reserved_kept: false,
        }
    }
}

/// What a provider is to rtrack: decides what rtrack may change or delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderRole {
    /// The compute node (root of the tree).
    ComputeNode,
    /// A PCI child: rtrack owns it whole and deletes it when the device goes.
    Pci {
        /// The address it is named after (a PF's for its VFs, the device's own otherwise).
        address: PciAddress,
    },
    /// The shared storage provider: rtrack manages only DISK_GB, one trait and one aggregate
    /// on it, never its name, and never deletes it.
    Sharing,
    /// A vGPU parent's or an encryption model's provider: rtrack owns its inventory and the
    /// traits it sets, and deletes it when the parent or model goes.
    Nested,
}

/// One provider as it should be.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredProvider {
    /// The provider's uuid in Placement (the compute node's, or one derived per PCI device).
    pub uuid: Uuid,
    /// Name (used at creation; kept in step only for providers rtrack names).
    pub name: String,
    /// Parent provider.
    pub parent: Option<Uuid>,
    /// What the provider is to rtrack, which decides what rtrack may change on it.
    pub role: ProviderRole,
    /// Inventories by class.
    pub inventories: BTreeMap<String, DesiredInventory>,
    /// Classes rtrack decides on this provider; `None` = all (classes missing from
    /// `inventories` are removed).
    pub owned_classes: Option<BTreeSet<String>>,
    /// Traits that should be set.
    pub traits: BTreeSet<String>,
    /// Traits rtrack decides; others are kept as they are. `None` = all.
    pub owned_traits: Option<BTreeSet<String>>,
    /// Aggregates the provider must be in (others are kept).
    pub aggregates: BTreeSet<Uuid>,
}

/// A consumer's part of its allocation on this host's providers, as the local claims hold it.
/// Placement's parts on other providers, and an owner Placement already has, are kept when it
/// is written (see [`super::allocations`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredAllocation {
    /// The project the claim named (used only for a consumer Placement does not know yet).
    pub project_id: Option<String>,
    /// The user the claim named (likewise).
    pub user_id: Option<String>,
    /// Consumer type for a new consumer (`INSTANCE` or `MIGRATION`).
    pub consumer_type: String,
    /// provider -> class -> amount.
    pub resources: BTreeMap<Uuid, BTreeMap<String, u64>>,
}

/// Everything Placement should hold for this host.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredState {
    /// The compute node provider's uuid (root of the tree).
    pub root: Uuid,
    /// Providers, parents before children.
    pub providers: Vec<DesiredProvider>,
    /// Allocations by consumer; `None` when rtrack does not manage allocations.
    pub allocations: Option<BTreeMap<Uuid, DesiredAllocation>>,
    /// What the local claims should hold in Placement, whoever writes it (rtrack with
    /// `report_allocations`, else Nova's scheduler): reconciliation compares it with Placement.
    pub expected: BTreeMap<Uuid, DesiredAllocation>,
    /// The PCI provider and class each reported device is counted under.
    pub device_providers: BTreeMap<PciAddress, (Uuid, String)>,
    /// Consumers whose local claims were released here, with the time of the release: their
    /// part on this host's providers is removed (with `report_allocations`), and nothing else.
    pub released: BTreeMap<Uuid, i64>,
    /// PCI providers whose total was raised above what the device specs report, to what
    /// instances still hold there (Nova warns "Needed to adjust inventories").
    pub pci_raised: Vec<PciRaised>,
    /// Names of nested providers a report leaves as they are, though not wanted: mdev parents
    /// no enabled type applies to (Nova's driver leaves their providers in place too).
    pub left_alone: BTreeSet<String>,
    /// Things left out and why (logged by the reporter when they change).
    pub warnings: Vec<String>,
}

/// A PCI provider's total raised to what is held on it (see [`DesiredState::pci_raised`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct PciRaised {
    /// The provider's name.
    pub provider: String,
    /// Its class.
    pub class: String,
    /// The devices the device specs report there.
    pub reported: i64,
    /// The total written: what claims hold there.
    pub total: i64,
}

pub use crate::tracker::pci::providers::{
    derived_provider_uuid as pci_provider_uuid, provider_name as pci_provider_name,
};

/// What the desired state needs from the tracker besides the view and the claims: the PCI
/// providers' stored uuids (a provider missing here gets the uuid rtrack derives), the
/// one-time-use devices held after use, and the consumers released here.
#[derive(Debug, Clone, Default)]
pub struct ReportInputs {
    /// Provider uuids by the address each provider is named after.
    pub uuids: BTreeMap<PciAddress, Uuid>,
    /// One-time-use devices in use, or used and not yet released before their reservation was
    /// seen in Placement: their provider is reserved whole.
    pub one_time_used: BTreeSet<PciAddress>,
    /// One-time-use devices used and not yet released whose reservation Placement has shown:
    /// their provider's `reserved` is left as Placement holds it (an operator cleans one by
    /// lowering it, Nova's way).
    pub one_time_kept: BTreeSet<PciAddress>,
    /// One-time-use devices released by `rtrackctl pci release` whose provider's `reserved`
    /// rtrack lowers to 0. Every other PCI provider's `reserved` is left as Placement holds it
    /// (0 on a new one), as Nova leaves it: the operator's.
    pub one_time_unreserve: BTreeSet<PciAddress>,
    /// Consumers released here, with when (see [`DesiredState::released`]).
    pub released: BTreeMap<Uuid, i64>,
    /// Devices instances hold that no device spec reports any more, by provider address: their
    /// provider stays, its total raised to what is held (Nova's rule).
    pub held_unreported: BTreeMap<PciAddress, crate::tracker::pci::providers::ProviderGroup>,
}

/// The compute node's own inventories, with Nova's ratio precedence per class.
fn root_inventories(view: &HostView, config: &ValidConfig) -> BTreeMap<String, DesiredInventory> {
    let res = &config.resources;
    let rule = |r: &crate::inventory::resources::ResourceInventory| match r.class {
        ResourceClass::Vcpu => res.cpu_allocation_ratio.map_or(
            RatioRule::InitialOrKeep(res.initial_cpu_allocation_ratio),
            RatioRule::Fixed,
        ),
        ResourceClass::MemoryMb => res.ram_allocation_ratio.map_or(
            RatioRule::InitialOrKeep(res.initial_ram_allocation_ratio),
            RatioRule::Fixed,
        ),
        ResourceClass::DiskGb => res.disk_allocation_ratio.map_or(
            RatioRule::InitialOrKeep(res.initial_disk_allocation_ratio),
            RatioRule::Fixed,
        ),
        ResourceClass::Pcpu => RatioRule::Fixed(1.0),
        _ => RatioRule::Fixed(r.allocation_ratio),
    };
    view.node_inventory
        .values()
        .map(|r| {
            (
                r.class.as_str().to_string(),
                DesiredInventory {
                    total: r.total,
                    reserved: r.reserved,
                    min_unit: r.min_unit,
                    max_unit: r.max_unit,
                    step_size: r.step_size,
                    ratio: rule(r),
                    floor_at_usage: false,
                    reserved_kept: false,
                },
            )
        })
        .collect()
}

/// The compute node's traits: Nova's fixed ones, the host's CPU and architecture traits,
/// remote-managed ports, and `COMPUTE_STATUS_DISABLED` when the service is disabled.
fn root_traits(
    view: &HostView,
    service_disabled: bool,
    warnings: &mut Vec<String>,
) -> BTreeSet<String> {
    let inv = &*view.host;
    let mut root_traits = BTreeSet::from([
        traits::COMPUTE_NODE.to_string(),
        traits::OWNER_NOVA.to_string(),
        traits::COMPUTE_SOCKET_PCI_NUMA_AFFINITY.to_string(),
    ]);
    if view
        .tracked
        .values()
        .any(|d| d.tags.get("remote_managed").map(String::as_str) == Some("true"))
    {
        root_traits.insert(traits::COMPUTE_REMOTE_MANAGED_PORTS.to_string());
    }
    root_traits.extend(arch_and_cpu_traits(inv, warnings));
    if inv.cpu.smt {
        root_traits.insert(traits::HW_CPU_HYPERTHREADING.to_string());
    }
    if service_disabled {
        root_traits.insert(traits::COMPUTE_STATUS_DISABLED.to_string());
    }
    root_traits
}

/// The architecture's trait and, on x86, the CPU flags' and address-space traits.
fn arch_and_cpu_traits(
    inv: &crate::probes::HostInventory,
    warnings: &mut Vec<String>,
) -> Vec<String> {
    let mut out = Vec::new();
    let Some(a) = inv.cpu.arch.as_deref().or(inv.host.arch.as_deref()) else {
        return out;
    };
    match traits::arch_trait(a) {
        Some(t) => out.push(t.to_string()),
        None => warnings.push(format!("architecture {a:?} has no HW_ARCH_* trait")),
    }
    // The flag table holds x86 flag names; ARM's "aes" is not x86's AES-NI.
    if matches!(a, "x86_64" | "amd64" | "i386" | "i486" | "i586" | "i686") {
        out.extend(traits::cpu_traits(&inv.cpu.flags));
        // QEMU sets a guest's physical address bits (passed through or emulated) wherever
        // libvirt reports the host's, which it reads from the same line.
        if inv.cpu.maxphysaddr_bits.is_some() {
            out.push(traits::COMPUTE_ADDRESS_SPACE_PASSTHROUGH.to_string());
            out.push(traits::COMPUTE_ADDRESS_SPACE_EMULATED.to_string());
        }
    }
    out
}

/// The compute node's traits rtrack owns. Under nova-compute its virt driver sets the
/// hypervisor's traits: only the tracker's own are rtrack's then, and the others are left out
/// of `root_traits`.
fn root_trait_owner(config: &ValidConfig, root_traits: &mut BTreeSet<String>) -> BTreeSet<String> {
    let by_rtrack = config
        .placement_settings
        .as_ref()
        .is_none_or(|p| p.hypervisor_traits_by_rtrack);
    if by_rtrack {
        return traits::owned_root_traits();
    }
    let tracker = traits::tracker_root_traits();
    root_traits.retain(|t| tracker.contains(t));
    tracker
}

/// Name given to the sharing provider when rtrack has to create it.
pub fn sharing_provider_name(uuid: Uuid) -> String {
    format!("shared-storage-{uuid}")
}

impl DesiredState {
    /// Computes the desired state. `consumers` are the local claims; they become allocations
    /// only with `[placement] report_allocations = true`, but their PCI usage always keeps a
    /// PCI provider's total from dropping below it. PCI providers get derived uuids (see
    /// [`DesiredState::build_with`]).
    pub fn build(
        view: &HostView,
        config: &ValidConfig,
        node_uuid: Uuid,
        hypervisor_hostname: &str,
        service_disabled: bool,
        consumers: &[Consumer],
    ) -> Result<DesiredState, UpstreamError> {
        DesiredState::build_with(
            view,
            config,
            node_uuid,
            hypervisor_hostname,
            service_disabled,
            consumers,
            &ReportInputs::default(),
        )
    }

    /// [`DesiredState::build`] with the PCI providers' stored uuids and held devices, and the
    /// consumers released here.
    pub fn build_with(
        view: &HostView,
        config: &ValidConfig,
        node_uuid: Uuid,
        hypervisor_hostname: &str,
        service_disabled: bool,
        consumers: &[Consumer],
        pci: &ReportInputs,
    ) -> Result<DesiredState, UpstreamError> {
        if hypervisor_hostname.trim().is_empty() {
            return Err(UpstreamError::Input(
                "hypervisor_hostname is empty; it names the compute node provider".into(),
            ));
        }
        let inv = &*view.host;
        let res = &config.resources;
        let shared = res.shared_storage_provider;
        let mut warnings = Vec::new();

        // ---- compute node
        // vPMEM: the classes of its namespaces, on the compute node as Nova reports them.
        let pmem = pmem_inventories(view, consumers);
        let mut root_inventories = root_inventories(view, config);
        root_inventories.extend(pmem.values().cloned());
        let mut root_traits = root_traits(view, service_disabled, &mut warnings);
        let owned_traits = root_trait_owner(config, &mut root_traits);
        let mut providers = vec![DesiredProvider {
            uuid: node_uuid,
            name: hypervisor_hostname.to_string(),
            parent: None,
            role: ProviderRole::ComputeNode,
            inventories: root_inventories,
            owned_classes: None,
            traits: root_traits,
            owned_traits: Some(owned_traits),
            aggregates: shared.into_iter().collect(),
        }];

        // ---- PCI children
        let (device_provider, pci_raised) = if config.pci.report_in_placement {
            warnings.extend(view.pci_provider_warnings.iter().cloned());
            let children = pci_children(view, node_uuid, hypervisor_hostname, consumers, pci);
            providers.extend(children.providers);
            warnings.extend(children.raised.iter().map(|r| {
                format!(
                    "PCI provider {}: instances hold {} {} there, more than the {} the device specs report; the total is kept at what is held until they are freed",
                    r.provider, r.total, r.class, r.reported
                )
            }));
            (children.device_provider, children.raised)
        } else {
            (BTreeMap::new(), Vec::new())
        };

        // ---- vGPU parents and encryption models, named as nova-compute names them
        let (children, mut nested_provider) =
            nested_children(view, node_uuid, hypervisor_hostname, consumers);
        nested_provider.extend(pmem.into_keys().map(|k| (k, node_uuid)));
        providers.extend(children);
        warnings.extend(view.nested_warnings.iter().cloned());

        // ---- sharing provider
        if let Some(s) = shared {
            providers.push(sharing_provider(s, inv, config, &mut warnings));
        }

        // ---- provider.yaml: additional inventories and traits on the providers they name
        merge_provider_configs(&mut providers, &config.provider_configs);
        for p in &view.nested {
            if let NestedKey::Operator { provider, .. } = &p.key {
                if let Some(d) = providers.iter().find(|d| &d.name == provider) {
                    nested_provider.insert(p.key.clone(), d.uuid);
                }
            }
        }

        // ---- allocations (what the claims hold; written only with report_allocations)
        let places = AllocationPlaces {
            node: node_uuid,
            shared,
            nested: &nested_provider,
            devices: config.pci.report_in_placement.then_some(&device_provider),
        };
        let expected = expected_allocations(consumers, &places, &mut warnings);
        let allocations = config
            .placement
            .report_allocations
            .unwrap_or(false)
            .then(|| expected.clone());

        Ok(DesiredState {
            root: node_uuid,
            providers,
            allocations,
            expected,
            device_providers: device_provider,
            released: pci.released.clone(),
            pci_raised,
            left_alone: view
                .nested_left_alone
                .iter()
                .map(|k| nested_provider_name(hypervisor_hostname, k))
                .collect(),
            warnings,
        })
    }

    /// The provider with this uuid.
    pub fn provider(&self, uuid: Uuid) -> Option<&DesiredProvider> {
        self.providers.iter().find(|p| p.uuid == uuid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;

    fn config(text: &str) -> ValidConfig {
        let f = Path::new("t.toml");
        Config::parse(text, f).unwrap().validate(f).unwrap()
    }

    /// An instance of project p and user u holding `resources`.
    fn instance_consumer<const N: usize>(resources: [(ResourceKey, u64); N]) -> Consumer {
        Consumer {
            uuid: Uuid::new_v4(),
            project_id: Some("p".into()),
            user_id: Some("u".into()),
            consumer_type: CONSUMER_INSTANCE.into(),
            resources: BTreeMap::from(resources),
        }
    }

    fn host() -> crate::probes::HostInventory {
        let dir = tempfile::tempdir().unwrap();
        rtrack_fixtures::synthetic::SyntheticHost::small().write(dir.path());
        crate::probes::probe_host(
            &crate::probes::HostRoot::under(dir.path()),
            &crate::probes::ProbeOptions::default(),
        )
        .unwrap()
    }

    #[test]
    fn vgpu_parents_and_sev_models_are_children_named_as_nova_names_them() {
        let dir = tempfile::tempdir().unwrap();
        rtrack_fixtures::vgpu::VgpuHost::mdev_gpu().write(dir.path());
        let inv = crate::probes::probe_host(
            &crate::probes::HostRoot::under(dir.path()),
            &crate::probes::ProbeOptions::default(),
        )
        .unwrap();
        let mut c = config(
            "[devices]\nenabled_mdev_types = [\"nvidia-35\"]\n[placement]\nreport_allocations = true\n",
        );
        c.placement.report_allocations = Some(true);
        let node = Uuid::new_v4();
        let view = HostView::of_config(inv, &c);
        let gpu = NestedKey::Mdev("0000:85:00.0".into());
        let consumer = instance_consumer([
            (ResourceKey::Host("VCPU".into()), 1),
            (ResourceKey::Nested(gpu.clone(), "VGPU".into()), 2),
        ]);
        let d = DesiredState::build(
            &view,
            &c,
            node,
            "cmp-1",
            false,
            std::slice::from_ref(&consumer),
        )
        .unwrap();
        let names: Vec<&str> = d.providers.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "cmp-1",
                "cmp-1_pci_0000_84_00_0",
                "cmp-1_pci_0000_85_00_0",
                "cmp-1_amd_sev",
                "cmp-1_amd_sev_es"
            ]
        );
        // Nothing of the children's classes on the root.
        assert!(!d.providers[0].inventories.contains_key("VGPU"));
        let gpu0 = &d.providers[1];
        assert_eq!(gpu0.parent, Some(node));
        assert_eq!(gpu0.role, ProviderRole::Nested);
        let vgpu = &gpu0.inventories["VGPU"];
        assert_eq!((vgpu.total, vgpu.max_unit, vgpu.reserved), (16, 16, 0));
        let sev = &d.providers[3];
        let ctx = &sev.inventories["MEM_ENCRYPTION_CONTEXT"];
        assert_eq!((ctx.total, ctx.max_unit), (410, 1));
        assert!(sev.traits.contains("HW_CPU_X86_AMD_SEV"));
        // What the host's facts justify: Nova's owner mark, and the display heads and largest
        // resolution the type's description gives.
        for t in [
            "OWNER_NOVA",
            "HW_GPU_MAX_DISPLAY_HEADS_2",
            "HW_GPU_RESOLUTION_W2560H1600",
        ] {
            assert!(gpu0.traits.contains(t), "{t}: {:?}", gpu0.traits);
        }
        for t in [
            "OWNER_NOVA",
            "COMPUTE_SOCKET_PCI_NUMA_AFFINITY",
            "COMPUTE_NODE",
        ] {
            assert!(d.providers[0].traits.contains(t), "{t}");
        }
        assert!(!d.providers[0]
            .traits
            .contains("COMPUTE_REMOTE_MANAGED_PORTS"));
        assert!(d.providers[4].traits.contains("HW_CPU_X86_AMD_SEV_ES"));
        // The allocation's VGPU goes to the second GPU's provider, the VCPU to the root.
        let a = &d.allocations.as_ref().unwrap()[&consumer.uuid];
        assert_eq!(a.resources[&d.providers[2].uuid]["VGPU"], 2);
        assert_eq!(a.resources[&node]["VCPU"], 1);
        assert!(is_nested_provider_name("cmp-1", "cmp-1_pci_0000_84_00_0"));
        assert!(is_nested_provider_name("cmp-1", "cmp-1_amd_sev_es"));
        assert!(!is_nested_provider_name("cmp-1", "cmp-1_0000:3B:00.0"));
        assert!(!is_nested_provider_name("cmp-1", "cmp-2_amd_sev"));
    }

    #[test]
    fn pci_names_are_novas() {
        let a = PciAddress::parse("0000:3b:00.0").unwrap();
        assert_eq!(pci_provider_name("cmp-1", &a), "cmp-1_0000:3B:00.0");
        let n = Uuid::parse_str("11111111-2222-3333-4444-555555555555").unwrap();
        assert_eq!(
            pci_provider_uuid(n, "cmp-1_0000:3B:00.0"),
            pci_provider_uuid(n, "cmp-1_0000:3B:00.0")
        );
        assert_ne!(
            pci_provider_uuid(n, "cmp-1_0000:3B:00.0"),
            pci_provider_uuid(n, "cmp-1_0000:3B:00.1")
        );
    }

    #[test]
    fn under_nova_compute_the_hypervisor_traits_are_its_drivers() {
        let c =
            config("[placement]\nendpoint = \"http://p\"\nhypervisor_traits = \"nova-compute\"\n");
        let d = DesiredState::build(
            &HostView::of_config(host(), &c),
            &c,
            Uuid::new_v4(),
            "cmp-1",
            true,
            &[],
        )
        .unwrap();
        let root = d.provider(d.root).unwrap();
        assert_eq!(
            root.traits.iter().map(String::as_str).collect::<Vec<_>>(),
            ["COMPUTE_NODE", "OWNER_NOVA"],
            "the service's disabled trait, the CPU and arch traits are the driver's"
        );
        let owned = root.owned_traits.as_ref().unwrap();
        assert!(!owned.contains("HW_CPU_X86_AVX2") && !owned.contains("COMPUTE_STATUS_DISABLED"));
        let e = Config::parse(
            "[placement]\nendpoint = \"http://p\"\nhypervisor_traits = \"libvirt\"\n",
            Path::new("t.toml"),
        )
        .unwrap()
        .validate(Path::new("t.toml"))
        .unwrap_err()
        .to_string();
        assert!(e.contains("placement.hypervisor_traits"), "{e}");
    }

    #[test]
    fn root_has_inventory_and_owned_traits() {
        let inv = host();
        let c = config("[resources]\ncpu_allocation_ratio = 2.0\nreserved_host_disk_mb = 1025\n");
        let node = Uuid::new_v4();
        let d = DesiredState::build(&HostView::of_config(inv, &c), &c, node, "cmp-1", true, &[])
            .unwrap();
        let root = &d.providers[0];
        assert_eq!(root.uuid, node);
        assert_eq!(root.inventories["VCPU"].total, 8);
        assert_eq!(root.inventories["VCPU"].ratio, RatioRule::Fixed(2.0));
        assert_eq!(
            root.inventories["MEMORY_MB"].ratio,
            RatioRule::InitialOrKeep(1.0)
        );
        assert_eq!(root.inventories["MEMORY_MB"].reserved, 512);
        for t in [
            "COMPUTE_NODE",
            "HW_ARCH_X86_64",
            "HW_CPU_X86_AVX2",
            "HW_CPU_X86_SSE42",
            "HW_CPU_HYPERTHREADING",
            "COMPUTE_STATUS_DISABLED",
            "COMPUTE_ADDRESS_SPACE_PASSTHROUGH",
            "COMPUTE_ADDRESS_SPACE_EMULATED",
        ] {
            assert!(root.traits.contains(t), "{t} missing: {:?}", root.traits);
        }
        assert_eq!(d.providers.len(), 1, "no PCI without report_in_placement");
        assert_eq!(d.allocations, None);
    }

    #[test]
    fn pci_children_follow_nova_rules() {
        let inv = host();
        // VFs of 3b:00.0 (8), PF 3b:00.1 alone (no VFs enabled), and both PF 5e:00.0 and its
        // VFs (only the VFs may be reported). The NVMe drive has its own spec and class.
        let c = config(
            r#"
[pci]
report_in_placement = true
[[pci.device_spec]]
address = "0000:3b:00.*"
traits = "custom_fast, HW_NIC_SRIOV"
[[pci.device_spec]]
address = "0000:3b:*.*"
[[pci.device_spec]]
address = "0000:5e:00.0"
live_migratable = "yes"
[[pci.device_spec]]
vendor_id = "144d"
resource_class = "nvme disk"
live_migratable = "no"
"#,
        );
        let node = Uuid::new_v4();
        let d = DesiredState::build(&HostView::of_config(inv, &c), &c, node, "cmp-1", false, &[])
            .unwrap();
        let names: Vec<&str> = d.providers.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "cmp-1",
                "cmp-1_0000:01:00.0",
                "cmp-1_0000:3B:00.0",
                "cmp-1_0000:3B:00.1",
                "cmp-1_0000:5E:00.0"
            ]
        );
        let p = |n: &str| d.providers.iter().find(|p| p.name == n).unwrap();
        assert_eq!(
            p("cmp-1_0000:01:00.0").inventories["CUSTOM_NVME_DISK"].total,
            1
        );
        // 3b:00.0's VFs (8086:1889, at 3b:01.x) match the second spec; the PF matches the
        // first, but a PF with tracked VFs is not reported itself.
        let vfs = &p("cmp-1_0000:3B:00.0").inventories["CUSTOM_PCI_8086_1889"];
        assert_eq!((vfs.total, vfs.max_unit), (8, 8));
        assert!(!p("cmp-1_0000:3B:00.0").traits.contains("CUSTOM_FAST"));
        assert!(p("cmp-1_0000:3B:00.0")
            .traits
            .contains("COMPUTE_MANAGED_PCI_DEVICE"));
        assert!(p("cmp-1_0000:3B:00.1").traits.contains("CUSTOM_FAST"));
        assert!(p("cmp-1_0000:3B:00.1").traits.contains("OWNER_NOVA"));
        // Nova 34's set: COMPUTE_MANAGED_PCI_DEVICE, OWNER_NOVA, HW_PCI_LIVE_MIGRATABLE only
        // where the spec says live_migratable (yes, normalized to true).
        let set = |n: &str| p(n).traits.iter().map(String::as_str).collect::<Vec<_>>();
        assert_eq!(
            set("cmp-1_0000:5E:00.0"),
            [
                "COMPUTE_MANAGED_PCI_DEVICE",
                "HW_PCI_LIVE_MIGRATABLE",
                "OWNER_NOVA"
            ]
        );
        assert_eq!(
            set("cmp-1_0000:01:00.0"),
            ["COMPUTE_MANAGED_PCI_DEVICE", "OWNER_NOVA"]
        );
        assert!(p("cmp-1_0000:3B:00.1").traits.contains("HW_NIC_SRIOV"));
        assert_eq!(
            p("cmp-1_0000:3B:00.1").inventories["CUSTOM_PCI_8086_1592"].total,
            1
        );
        // The exact PF address also matches its 4 VFs: the VFs are reported, the PF is not.
        assert_eq!(
            p("cmp-1_0000:5E:00.0").inventories["CUSTOM_PCI_8086_1889"].total,
            4
        );
        assert!(
            d.warnings.iter().any(|w| w.contains("0000:5e:00.0")),
            "{:?}",
            d.warnings
        );
        assert!(d.providers[1..].iter().all(|p| p.parent == Some(node)));
    }

    #[test]
    fn usage_keeps_pci_total_and_allocations_map_to_providers() {
        let inv = host();
        let c = config(
            "[placement]\nendpoint = \"http://x\"\nreport_allocations = true\n[resources]\nshared_storage_provider = \"aaaaaaaa-0000-0000-0000-000000000001\"\n[pci]\nreport_in_placement = true\n[[pci.device_spec]]\naddress = \"0000:01:00.0\"\n",
        );
        let node = Uuid::new_v4();
        let nvme = PciAddress::parse("0000:01:00.0").unwrap();
        let consumer = instance_consumer([
            (ResourceKey::Host("VCPU".into()), 2),
            (ResourceKey::Host("DISK_GB".into()), 10),
            (ResourceKey::PciDevice(nvme), 1),
        ]);
        // Two consumers claiming the one device (a stale claim): total follows usage.
        let other = Consumer {
            uuid: Uuid::new_v4(),
            ..consumer.clone()
        };
        let d = DesiredState::build(
            &HostView::of_config(inv, &c),
            &c,
            node,
            "cmp-1",
            false,
            &[consumer.clone(), other],
        )
        .unwrap();
        let child = d
            .providers
            .iter()
            .find(|p| matches!(p.role, ProviderRole::Pci { .. }))
            .unwrap();
        assert_eq!(child.inventories["CUSTOM_PCI_144D_A808"].total, 2);
        let shared = Uuid::parse_str("aaaaaaaa-0000-0000-0000-000000000001").unwrap();
        let a = &d.allocations.as_ref().unwrap()[&consumer.uuid];
        assert_eq!(a.resources[&node]["VCPU"], 2);
        assert_eq!(a.resources[&shared]["DISK_GB"], 10);
        assert_eq!(a.resources[&child.uuid]["CUSTOM_PCI_144D_A808"], 1);
        let root = &d.providers[0];
        assert!(!root.inventories.contains_key("DISK_GB"));
        assert!(root.aggregates.contains(&shared));
        let sp = d
            .providers
            .iter()
            .find(|p| p.role == ProviderRole::Sharing)
            .unwrap();
        assert!(sp.traits.contains("MISC_SHARES_VIA_AGGREGATE"));
        assert!(sp.aggregates.contains(&shared));
    }

    /// Nova's `_adjust_for_removals_and_held_devices`: a device an instance holds after the
    /// device spec that selected it is gone keeps its provider, at what is held (the device
    /// spec reports 0 there), with its allocation mapped; once freed the provider goes.
    #[test]
    fn a_device_held_after_its_spec_is_gone_keeps_its_provider_at_what_is_held() {
        use crate::tracker::pci::devices::{DeviceOwner, DeviceStatus};
        use crate::tracker::pci::providers::held_unreported;
        let inv = host();
        let with = config(
            "[placement]\nendpoint = \"http://x\"\n[pci]\nreport_in_placement = true\n[[pci.device_spec]]\naddress = \"0000:01:00.0\"\n",
        );
        let without =
            config("[placement]\nendpoint = \"http://x\"\n[pci]\nreport_in_placement = true\n");
        let node = Uuid::new_v4();
        let nvme = PciAddress::parse("0000:01:00.0").unwrap();
        let consumer = instance_consumer([(ResourceKey::PciDevice(nvme), 1)]);
        let mut held = HostView::of_config(inv.clone(), &with).tracked[&nvme]
            .as_ref()
            .clone();
        held.status = DeviceStatus::Allocated;
        held.owner = Some(DeviceOwner {
            instance_uuid: consumer.uuid.to_string(),
            request_id: None,
        });
        let view = HostView::of_config(inv, &without);
        assert!(view.pci_providers.is_empty());
        let pci = ReportInputs {
            held_unreported: held_unreported([&held], &view.tracked),
            ..Default::default()
        };
        let build = |consumers: &[Consumer], pci: &ReportInputs| {
            DesiredState::build_with(&view, &without, node, "cmp-1", false, consumers, pci).unwrap()
        };
        let d = build(std::slice::from_ref(&consumer), &pci);
        let child = d
            .providers
            .iter()
            .find(|p| matches!(p.role, ProviderRole::Pci { .. }))
            .expect("the held device's provider is kept");
        assert_eq!(child.name, "cmp-1_0000:01:00.0");
        assert_eq!(child.inventories["CUSTOM_PCI_144D_A808"].total, 1);
        assert_eq!(child.inventories["CUSTOM_PCI_144D_A808"].reserved, 0);
        assert_eq!(
            d.pci_raised,
            [PciRaised {
                provider: "cmp-1_0000:01:00.0".into(),
                class: "CUSTOM_PCI_144D_A808".into(),
                reported: 0,
                total: 1,
            }]
        );
        assert_eq!(d.device_providers[&nvme].0, child.uuid);
        assert_eq!(
            d.expected[&consumer.uuid].resources[&child.uuid]["CUSTOM_PCI_144D_A808"],
            1
        );
        // Freed: nothing held, no provider, nothing raised.
        let d = build(&[], &ReportInputs::default());
        assert!(!d
            .providers
            .iter()
            .any(|p| matches!(p.role, ProviderRole::Pci { .. })));
        assert!(d.pci_raised.is_empty());
    }

    /// A PCI provider's `reserved` is Placement's (the operator's, as in Nova), but for a
    /// one-time-use device in use (whole), reserved after use (Placement's, whole when new) or
    /// released by `rtrackctl pci release` (0, written).
    #[test]
    fn a_pci_providers_reserved_is_placements_but_where_one_time_use_decides() {
        let inv = host();
        let c = config(
            "[placement]\nendpoint = \"http://x\"\n[pci]\nreport_in_placement = true\n[[pci.device_spec]]\naddress = \"0000:01:00.0\"\none_time_use = true\n",
        );
        let view = HostView::of_config(inv, &c);
        let nvme = PciAddress::parse("0000:01:00.0").unwrap();
        let reserved = |pci: &ReportInputs| {
            let d = DesiredState::build_with(&view, &c, Uuid::new_v4(), "cmp-1", false, &[], pci)
                .unwrap();
            let p = d
                .providers
                .iter()
                .find(|p| matches!(p.role, ProviderRole::Pci { .. }))
                .expect("the device's provider");
            let i = &p.inventories["CUSTOM_PCI_144D_A808"];
            (i.reserved, i.reserved_kept)
        };
        let set = BTreeSet::from([nvme]);
        assert_eq!(reserved(&ReportInputs::default()), (0, true));
        let used = ReportInputs {
            one_time_used: set.clone(),
            ..Default::default()
        };
        assert_eq!(reserved(&used), (1, false));
        let kept = ReportInputs {
            one_time_kept: set.clone(),
            ..Default::default()
        };
        assert_eq!(reserved(&kept), (1, true));
        let unreserve = ReportInputs {
            one_time_unreserve: set,
            ..Default::default()
        };
        assert_eq!(reserved(&unreserve), (0, false));
    }
}
