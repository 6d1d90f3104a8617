//! Nova's enum field values (nova/objects/fields.py, nova/virt/arch.py).
//!
//! In: a string from a primitive's enum field, or the probed architecture. Out: the values Nova
//! accepts for each enum ([`EnumValues`]), against which decoding checks the string, and
//! [`is_nova_architecture`].

use super::fields::EnumValues;

/// ArchitectureField: a CPU architecture name Nova knows (`x86_64`, `aarch64`...).
pub struct Architecture;
impl EnumValues for Architecture {
    const NAME: &'static str = "architecture";
    const VALUES: &'static [&'static str] = &[
        "alpha",
        "armv6",
        "armv7l",
        "armv7b",
        "aarch64",
        "cris",
        "i686",
        "ia64",
        "lm32",
        "m68k",
        "microblaze",
        "microblazeel",
        "mips",
        "mipsel",
        "mips64",
        "mips64el",
        "openrisc",
        "parisc",
        "parisc64",
        "ppc",
        "ppcle",
        "ppc64",
        "ppc64le",
        "ppcemb",
        "s390",
        "s390x",
        "sh4",
        "sh4eb",
        "sparc",
        "sparc64",
        "unicore32",
        "x86_64",
        "xtensa",
        "xtensaeb",
    ];
}

/// HVTypeField: a hypervisor type as Nova names it (`kvm`, `qemu`, `ironic`...).
pub struct HvType;
impl EnumValues for HvType {
    const NAME: &'static str = "hypervisor virt type";
    const VALUES: &'static [&'static str] = &[
        "baremetal",
        "bhyve",
        "docker",
        "fake",
        "hyperv",
        "ironic",
        "kqemu",
        "kvm",
        "lxc",
        "lxd",
        "openvz",
        "parallels",
        "phyp",
        "qemu",
        "test",
        "uml",
        "vbox",
        "vz",
        "vmware",
        "xen",
        "zvm",
        "prsm",
    ];
}

/// VMModeField: the ABI a guest expects (`hvm` for full virtualization, `xen`, `uml`, `exe`).
pub struct VmMode;
impl EnumValues for VmMode {
    const NAME: &'static str = "VM mode";
    const VALUES: &'static [&'static str] = &["hvm", "xen", "uml", "exe"];
}

/// PciDeviceTypeField: what a PCI device is (plain device, SR-IOV PF or VF, or vDPA device).
pub struct PciDeviceType;
impl EnumValues for PciDeviceType {
    const NAME: &'static str = "PCI device type";
    const VALUES: &'static [&'static str] = &["type-PCI", "type-PF", "type-VF", "vdpa"];
}

/// PciDeviceStatusField: where a PCI device is in Nova's claim and allocation life cycle.
pub struct PciDeviceStatus;
impl EnumValues for PciDeviceStatus {
    const NAME: &'static str = "PCI device status";
    const VALUES: &'static [&'static str] = &[
        "available",
        "claimed",
        "allocated",
        "removed",
        "deleted",
        "unavailable",
        "unclaimable",
    ];
}

/// MigrationTypeField: the kind of move (cold migration, resize, live migration, evacuation).
pub struct MigrationType;
impl EnumValues for MigrationType {
    const NAME: &'static str = "migration type";
    const VALUES: &'static [&'static str] =
        &["migration", "resize", "live-migration", "evacuation"];
}

/// PCINUMAAffinityPolicyField: how strictly a PCI device must share the guest's NUMA node.
pub struct PciNumaAffinityPolicy;
impl EnumValues for PciNumaAffinityPolicy {
    const NAME: &'static str = "PCI NUMA affinity policy";
    const VALUES: &'static [&'static str] = &["required", "legacy", "preferred", "socket"];
}

/// True if `arch` is one of Nova's architecture names.
pub fn is_nova_architecture(arch: &str) -> bool {
    Architecture::VALUES.contains(&arch)
}
