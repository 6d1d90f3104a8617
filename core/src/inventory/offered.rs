//! What the host offers guests beyond its own four classes under the configuration: memory
//! encryption contexts per model (the Intel TDX decision with its inputs) and the persistent
//! memory namespaces given as vPMEM. The `offered` key of the `--once` report and of
//! `GET /v1/inventory`.
//!
//! In: nothing; the tracker's view fills these plain types. Out: JSON (docs/inventory.md) and
//! the table's rows.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The `offered` key of the report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offered {
    /// Encryption contexts offered per model (`amd-sev`, `intel-tdx`...): each model's
    /// provider total. A model not offered is absent.
    pub memory_encryption: BTreeMap<String, i64>,
    /// Intel TDX: offered or not, why, and from what.
    pub intel_tdx: IntelTdxOffer,
    /// The namespaces offered as vPMEM, in configuration order.
    pub pmem_namespaces: Vec<VpmemNamespace>,
    /// vGPU parents, encryption models and namespaces left out, and why.
    pub warnings: Vec<String>,
}

/// Intel TDX under the configuration (Nova's `supports_intel_tdx` and `max_intel_tdx_guests`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntelTdxOffer {
    /// TD guests can run here: x86_64, KVM runs them, `[devices] cpu_mode = host-passthrough`.
    pub supported: bool,
    /// Why not, when not.
    pub why_not: Option<String>,
    /// The misc cgroup's `tdx` capacity.
    pub cgroup_capacity: Option<u64>,
    /// `[devices] num_intel_tdx_guests`.
    pub configured: Option<u64>,
    /// TD guests offered: the configured count when set, else the cgroup's, else 0.
    pub slots: u64,
}

/// A persistent memory namespace offered to guests: Nova's `LibvirtVPMEMDevice` (what its
/// `Resource.metadata` records of a namespace given to an instance) and its class.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct VpmemNamespace {
    /// Its name (the kernel's `alt_name`).
    pub name: String,
    /// The label `[devices] pmem_namespaces` gives it, what `hw:pmem` asks for.
    pub label: String,
    /// `CUSTOM_PMEM_NAMESPACE_<LABEL>`.
    pub resource_class: String,
    /// Its character device, `/dev/dax0.0`.
    pub devpath: String,
    /// Bytes (the dax device's).
    pub size: u64,
    /// The dax region's alignment, bytes.
    pub align: u64,
}
