//! The records of resources below the compute node: encryption models, the key naming each
//! nested provider, a provider's units, and what a claim holds there ([`NestedAllocation`]).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::inventory::offered::{IntelTdxOffer, VpmemNamespace};
use crate::inventory::resources::ResourceClass;

/// Memory encryption models, Nova's `MemEncryptionModel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EncryptionModel {
    /// AMD SEV.
    #[serde(rename = "amd-sev")]
    AmdSev,
    /// AMD SEV-ES.
    #[serde(rename = "amd-sev-es")]
    AmdSevEs,
    /// AMD SEV-SNP.
    #[serde(rename = "amd-sev-snp")]
    AmdSevSnp,
    /// Intel TDX.
    #[serde(rename = "intel-tdx")]
    IntelTdx,
}

impl EncryptionModel {
    /// Nova's name (`hw:mem_encryption_model`).
    pub fn as_str(self) -> &'static str {
        match self {
            EncryptionModel::AmdSev => "amd-sev",
            EncryptionModel::AmdSevEs => "amd-sev-es",
            EncryptionModel::AmdSevSnp => "amd-sev-snp",
            EncryptionModel::IntelTdx => "intel-tdx",
        }
    }

    /// The model named `s`.
    pub fn from_name(s: &str) -> Option<EncryptionModel> {
        [
            EncryptionModel::AmdSev,
            EncryptionModel::AmdSevEs,
            EncryptionModel::AmdSevSnp,
            EncryptionModel::IntelTdx,
        ]
        .into_iter()
        .find(|m| m.as_str() == s)
    }

    /// The trait on its provider (os-traits).
    pub fn trait_name(self) -> &'static str {
        match self {
            EncryptionModel::AmdSev => "HW_CPU_X86_AMD_SEV",
            EncryptionModel::AmdSevEs => "HW_CPU_X86_AMD_SEV_ES",
            EncryptionModel::AmdSevSnp => "HW_CPU_X86_AMD_SEV_SNP",
            EncryptionModel::IntelTdx => "HW_CPU_X86_INTEL_TDX",
        }
    }
}

/// Which nested provider.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NestedKey {
    /// The vGPU provider of an mdev parent (its name under `mdev_bus`).
    Mdev(String),
    /// The provider of one memory encryption model.
    MemEncryption(EncryptionModel),
    /// A class an operator added to a provider with provider.yaml.
    Operator {
        /// The provider's name.
        provider: String,
        /// The class.
        class: String,
    },
    /// The vPMEM namespaces of one class (`CUSTOM_PMEM_NAMESPACE_<LABEL>`), on the compute node.
    Pmem(String),
}

impl NestedKey {
    /// The provider's name after the compute node's: `<node>_<suffix>`, as nova-compute names
    /// it: libvirt's node device name for a parent (`pci_0000_84_00_0`), the model with `_` for
    /// encryption (`amd_sev`).
    pub fn name_suffix(&self) -> String {
        match self {
            NestedKey::Mdev(parent) => match crate::probes::pci::PciAddress::parse(parent) {
                Some(a) => format!(
                    "pci_{:04x}_{:02x}_{:02x}_{:x}",
                    a.domain, a.bus, a.device, a.function
                ),
                None => parent.replace(['/', ':', '.', '-'], "_"),
            },
            NestedKey::MemEncryption(m) => m.as_str().replace('-', "_"),
            NestedKey::Operator { provider, .. } => provider.clone(),
            NestedKey::Pmem(class) => class.clone(),
        }
    }

    /// A child provider rtrack makes under the compute node (a vGPU parent's, an encryption
    /// model's); not an operator's class on a provider of its own, nor a compute node class.
    pub fn is_child(&self) -> bool {
        matches!(self, NestedKey::Mdev(_) | NestedKey::MemEncryption(_))
    }

    /// The name of the provider holding these units under the compute node named `node`.
    pub fn provider_name(&self, node: &str) -> String {
        match self {
            NestedKey::Operator { provider, .. } => provider.clone(),
            NestedKey::Pmem(_) => node.to_string(),
            other => format!("{node}_{}", other.name_suffix()),
        }
    }
}

impl std::fmt::Display for NestedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NestedKey::Mdev(p) => write!(f, "mdev parent {p}"),
            NestedKey::MemEncryption(m) => write!(f, "{} contexts", m.as_str()),
            NestedKey::Operator { provider, class } => write!(f, "{class} of {provider}"),
            NestedKey::Pmem(class) => write!(f, "vPMEM namespaces of {class}"),
        }
    }
}

/// A provider below the compute node and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NestedProvider {
    /// Which one.
    pub key: NestedKey,
    /// Its one class (VGPU or the type's class; MEM_ENCRYPTION_CONTEXT).
    pub class: ResourceClass,
    /// Units in all (nothing reserved, ratio 1).
    pub total: i64,
    /// Largest allocation: the total for vGPUs, 1 for encryption contexts (Nova's).
    pub max_unit: i64,
    /// Traits on it (besides what Placement's owner adds).
    pub traits: BTreeSet<String>,
    /// For a vGPU parent: the mdev type it offers.
    pub mdev_type: Option<String>,
}

/// Units a claim holds on one nested provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NestedUnits {
    /// The provider.
    pub provider: NestedKey,
    /// The class.
    pub class: ResourceClass,
    /// How many.
    pub amount: i64,
}

/// A mediated device given to a claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdevGiven {
    /// Its uuid: an existing mdev's, or a new one for the hypervisor side to create.
    pub uuid: String,
    /// The parent it is (to be) created on.
    pub parent: String,
    /// Its type.
    #[serde(rename = "type")]
    pub type_id: String,
    /// It existed when it was given (else the hypervisor side creates it with this uuid).
    pub existing: bool,
}

/// What a claim holds below the compute node, and the named devices it is given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NestedAllocation {
    /// Units per provider.
    pub units: Vec<NestedUnits>,
    /// Mediated devices, one per vGPU unit.
    pub mdevs: Vec<MdevGiven>,
    /// Persistent memory namespaces, one per vPMEM unit (Nova's `Instance.resources`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pmem: Vec<VpmemNamespace>,
}

impl NestedAllocation {
    /// Nothing held.
    pub fn is_empty(&self) -> bool {
        self.units.is_empty()
    }
}

/// Units used per provider by the counted consumers' allocations, and the mdevs and
/// namespaces they hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NestedUsage {
    /// Units used per provider.
    pub used: BTreeMap<NestedKey, i64>,
    /// Mdev uuids given.
    pub mdevs: BTreeSet<String>,
    /// vPMEM namespace names given.
    pub pmem: BTreeSet<String>,
}

impl NestedUsage {
    /// Adds one consumer's allocation.
    pub fn add(&mut self, a: &NestedAllocation) {
        for u in &a.units {
            *self.used.entry(u.provider.clone()).or_default() += u.amount;
        }
        self.mdevs.extend(a.mdevs.iter().map(|m| m.uuid.clone()));
        self.pmem.extend(a.pmem.iter().map(|n| n.name.clone()));
    }
}

/// What the host offers below (and, for vPMEM, on) the compute node under `policy`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NestedOffer {
    /// The providers, in key order.
    pub providers: Vec<NestedProvider>,
    /// The Intel TDX decision.
    pub intel_tdx: IntelTdxOffer,
    /// The vPMEM namespaces offered.
    pub pmem: Vec<VpmemNamespace>,
    /// The mdev parents of the host that no enabled type applies to: Nova's driver does not
    /// report them, so a provider made for one earlier is left as it is.
    pub left_alone: Vec<NestedKey>,
}
