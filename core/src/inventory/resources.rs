//! Resource inventory per class, as Placement models it: what the host can hand out.
//!
//! In: the probed host and the `[resources]` configuration. Out: one [`ResourceInventory`] per
//! resource class with a total above zero, computed as Nova's libvirt driver does:
//!
//! - VCPU: the online CPUs of `cpu_shared_set` when set; none when only `cpu_dedicated_set` is
//!   set; else every online CPU. Reserved `reserved_host_cpus`, ratio `cpu_allocation_ratio`.
//! - PCPU: the online CPUs of `cpu_dedicated_set`, ratio 1.0, nothing reserved; with
//!   `cpu_power_management`, every CPU of it that exists, online or not (Nova's
//!   `_get_pcpu_available`: CPU ids below the host's CPU count, libvirt's size of `present`).
//! - MEMORY_MB: `MemTotal`; reserved `reserved_host_memory_mb`, ratio `ram_allocation_ratio`.
//! - DISK_GB: the instances filesystem size in whole GiB (Nova's `local_gb`); reserved
//!   `ceil(reserved_host_disk_mb / 1024)`, ratio `disk_allocation_ratio`. Left out when the
//!   instances path is on shared storage (reported on the sharing provider instead).
//!
//! Ratios: the configured value, else the `initial_*` one (4.0, 1.0, 1.0). min_unit and
//! step_size are 1, max_unit is the total.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;

use crate::config::Resources;
use crate::probes::{CpuSet, HostInventory};

/// A resource class rtrack accounts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceClass {
    /// Floating (shared) CPUs.
    Vcpu,
    /// Dedicated (pinned) CPUs.
    Pcpu,
    /// Memory in MiB.
    MemoryMb,
    /// Local disk in GiB.
    DiskGb,
    /// Virtual GPUs (mediated devices), Nova's default class for them.
    Vgpu,
    /// Memory encryption contexts (one per AMD SEV guest).
    MemEncryptionContext,
    /// An operator's class (`CUSTOM_` then capitals, digits and `_`, 255 characters at most):
    /// from provider.yaml, or a vGPU type's `mdev_class`.
    Custom(Arc<str>),
}

impl ResourceClass {
    /// The classes every host has, in report order.
    pub const ALL: [ResourceClass; 4] = [
        ResourceClass::Vcpu,
        ResourceClass::Pcpu,
        ResourceClass::MemoryMb,
        ResourceClass::DiskGb,
    ];

    /// Placement's name.
    pub fn as_str(&self) -> &str {
        match self {
            ResourceClass::Vcpu => "VCPU",
            ResourceClass::Pcpu => "PCPU",
            ResourceClass::MemoryMb => "MEMORY_MB",
            ResourceClass::DiskGb => "DISK_GB",
            ResourceClass::Vgpu => "VGPU",
            ResourceClass::MemEncryptionContext => "MEM_ENCRYPTION_CONTEXT",
            ResourceClass::Custom(name) => name,
        }
    }

    /// The class named `name`: one rtrack accounts (`VCPU`, ..., `VGPU`,
    /// `MEM_ENCRYPTION_CONTEXT`) or a custom one. The error says what was expected.
    pub fn from_name(name: &str) -> Result<ResourceClass, String> {
        Ok(match name {
            "VCPU" => ResourceClass::Vcpu,
            "PCPU" => ResourceClass::Pcpu,
            "MEMORY_MB" => ResourceClass::MemoryMb,
            "DISK_GB" => ResourceClass::DiskGb,
            "VGPU" => ResourceClass::Vgpu,
            "MEM_ENCRYPTION_CONTEXT" => ResourceClass::MemEncryptionContext,
            _ if is_custom_name(name) => ResourceClass::Custom(Arc::from(name)),
            _ => {
                return Err(format!(
                    "{} is not a resource class rtrack accounts: expected VCPU, PCPU, MEMORY_MB, DISK_GB, VGPU, MEM_ENCRYPTION_CONTEXT or CUSTOM_ followed by capitals, digits and _ (255 characters at most)",
                    crate::echo::quoted(name)
                ))
            }
        })
    }

    /// A class that is not on every host (VGPU, MEM_ENCRYPTION_CONTEXT, custom ones).
    pub fn is_extra(&self) -> bool {
        !ResourceClass::ALL.contains(self)
    }
}

pub use crate::nova_syntax::is_custom_name;

impl Serialize for ResourceClass {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for ResourceClass {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ResourceClass, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        ResourceClass::from_name(&name).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for ResourceClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One class's inventory record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResourceInventory {
    /// The class.
    pub class: ResourceClass,
    /// Amount the host has.
    pub total: i64,
    /// Amount kept for the host.
    pub reserved: i64,
    /// Smallest amount one consumer may take.
    pub min_unit: i64,
    /// Largest amount one consumer may take.
    pub max_unit: i64,
    /// Allocations must be a multiple of this (Placement's `step_size`).
    pub step_size: i64,
    /// Overcommit factor.
    pub allocation_ratio: f64,
}

impl ResourceInventory {
    /// What consumers may use in all: `(total - reserved) x ratio`, rounded down (Placement's
    /// rule). Never negative.
    pub fn capacity(&self) -> i64 {
        let c = ((self.total - self.reserved) as f64 * self.allocation_ratio).floor();
        if c <= 0.0 {
            0
        } else {
            c as i64
        }
    }
}

/// Options that change which classes are reported.
#[derive(Debug, Clone, Copy, Default)]
pub struct InventoryOptions {
    /// DISK_GB lives on a sharing provider, not on this host.
    pub shared_disk: bool,
}

/// The CPUs that exist as Nova's libvirt driver counts them with `cpu_power_management`
/// (`Host.get_available_cpus`): every id below libvirt's CPU count, the size of the kernel's
/// `present` map (its holes included); the online CPUs when `present` is unknown.
pub fn available_cpus(inv: &HostInventory) -> CpuSet {
    match inv.cpu.present.iter().last() {
        Some(max) => CpuSet::from_ids(0..=max),
        None => inv.cpu.online.clone(),
    }
}

/// The CPU sets VCPU and PCPU are drawn from: shared CPUs must be online; dedicated ones too,
/// unless their power is managed (then every one that exists counts).
pub fn cpu_sets(inv: &HostInventory, res: &Resources) -> (CpuSet, CpuSet) {
    let online = &inv.cpu.online;
    let dedicated = match &res.cpu_dedicated_set {
        None => CpuSet::new(),
        Some(d) if res.cpu_power_management.is_some() => d.intersection(&available_cpus(inv)),
        Some(d) => d.intersection(online),
    };
    let shared = match (&res.cpu_shared_set, &res.cpu_dedicated_set) {
        // Nova's legacy option decides VCPU whenever it is set.
        _ if res.vcpu_pin_set.is_some() => res
            .vcpu_pin_set
            .as_ref()
            .map_or_else(CpuSet::new, |p| p.intersection(online)),
        (Some(s), _) => s.intersection(online),
        (None, Some(_)) => CpuSet::new(),
        (None, None) => online.clone(),
    };
    (shared, dedicated)
}

/// Computes the inventory records with a total above zero.
pub fn compute_inventory(
    inv: &HostInventory,
    res: &Resources,
    opts: InventoryOptions,
) -> Vec<ResourceInventory> {
    let (shared, dedicated) = cpu_sets(inv, res);
    let record = |class, total: i64, reserved: i64, ratio: f64| ResourceInventory {
        class,
        total,
        reserved,
        min_unit: 1,
        max_unit: total,
        step_size: 1,
        allocation_ratio: ratio,
    };
    let mut out = vec![
        record(
            ResourceClass::Vcpu,
            shared.len() as i64,
            res.reserved_host_cpus,
            res.cpu_allocation_ratio
                .unwrap_or(res.initial_cpu_allocation_ratio),
        ),
        record(ResourceClass::Pcpu, dedicated.len() as i64, 0, 1.0),
        record(
            ResourceClass::MemoryMb,
            inv.memory.total_mb as i64,
            res.reserved_host_memory_mb,
            res.ram_allocation_ratio
                .unwrap_or(res.initial_ram_allocation_ratio),
        ),
    ];
    if !opts.shared_disk {
        let local_gb = inv
            .disks
            .instances
            .as_ref()
            .map_or(0, |f| f.total_gb as i64);
        out.push(record(
            ResourceClass::DiskGb,
            local_gb,
            reserved_disk_gb(res.reserved_host_disk_mb),
            res.disk_allocation_ratio
                .unwrap_or(res.initial_disk_allocation_ratio),
        ));
    }
    out.retain(|r| r.total > 0);
    out
}

/// Reserved disk in whole GiB, rounded up (Nova's `compute_utils.convert_mb_to_ceil_gb`).
pub fn reserved_disk_gb(mb: i64) -> i64 {
    if mb <= 0 {
        0
    } else {
        (mb + 1023) / 1024
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_is_total_minus_reserved_times_ratio_rounded_down() {
        let r = ResourceInventory {
            class: ResourceClass::Vcpu,
            total: 10,
            reserved: 1,
            min_unit: 1,
            max_unit: 10,
            step_size: 1,
            allocation_ratio: 1.5,
        };
        assert_eq!(r.capacity(), 13);
        let over = ResourceInventory { reserved: 20, ..r };
        assert_eq!(over.capacity(), 0);
    }

    #[test]
    fn reserved_disk_rounds_up_to_whole_gib() {
        assert_eq!(reserved_disk_gb(0), 0);
        assert_eq!(reserved_disk_gb(1), 1);
        assert_eq!(reserved_disk_gb(1024), 1);
        assert_eq!(reserved_disk_gb(1025), 2);
    }
}
