//! Trait and resource class names: the CPU flag table, architecture traits, the standard trait
//! list, and Nova's normalization of names from `[pci] device_spec` tags.
//!
//! In: the probed CPU flags and architecture, and a device spec's `resource_class` and `traits`
//! tags with the device's vendor and product ids. Out: Placement trait names (CPU flags,
//! `HW_ARCH_*`, the traits rtrack owns on the compute node) and the PCI resource class and traits,
//! normalized as Nova does.
//!
//! Data files beside this module (compiled in): `cpu_flag_traits.tsv` (from Nova's libvirt
//! `CPU_TRAITS_MAPPING` and os-traits, with /proc/cpuinfo names; sources in its header) and
//! `standard_traits.txt` (every trait of os-traits 3.9.0).

use std::collections::BTreeSet;
use std::sync::OnceLock;

const CPU_FLAG_TABLE: &str = include_str!("cpu_flag_traits.tsv");
const STANDARD_TRAITS: &str = include_str!("standard_traits.txt");

/// Always on the compute node provider (Nova's libvirt driver sets it too).
pub const COMPUTE_NODE: &str = "COMPUTE_NODE";
/// Set while the compute service is disabled, so the scheduler skips the node.
pub const COMPUTE_STATUS_DISABLED: &str = "COMPUTE_STATUS_DISABLED";
/// CPUs have simultaneous multithreading.
pub const HW_CPU_HYPERTHREADING: &str = "HW_CPU_HYPERTHREADING";
/// On every PCI child provider rtrack (or Nova) manages.
pub const COMPUTE_MANAGED_PCI_DEVICE: &str = "COMPUTE_MANAGED_PCI_DEVICE";
/// The guest's physical address bits can be the host's (`hw:maxphysaddr_mode=passthrough`).
pub const COMPUTE_ADDRESS_SPACE_PASSTHROUGH: &str = "COMPUTE_ADDRESS_SPACE_PASSTHROUGH";
/// The guest's physical address bits can be set (`hw:maxphysaddr_mode=emulate`).
pub const COMPUTE_ADDRESS_SPACE_EMULATED: &str = "COMPUTE_ADDRESS_SPACE_EMULATED";
/// On a PCI provider whose device spec says `live_migratable = true`.
pub const HW_PCI_LIVE_MIGRATABLE: &str = "HW_PCI_LIVE_MIGRATABLE";
/// On a PCI provider whose device spec says `one_time_use = true`.
pub const HW_PCI_ONE_TIME_USE: &str = "HW_PCI_ONE_TIME_USE";
/// On a sharing provider: its inventory is shared with the members of its aggregates.
pub const MISC_SHARES_VIA_AGGREGATE: &str = "MISC_SHARES_VIA_AGGREGATE";
/// On the compute node and the children made for it: nova-compute's mark (rtrack stands in).
pub const OWNER_NOVA: &str = "OWNER_NOVA";
/// The tracker applies the `socket` PCI NUMA affinity policy (Nova's libvirt driver: always).
pub const COMPUTE_SOCKET_PCI_NUMA_AFFINITY: &str = "COMPUTE_SOCKET_PCI_NUMA_AFFINITY";
/// Remote-managed (smart NIC) ports can be claimed: a device spec tracks such VFs (Nova sets it
/// when its PCI pools hold remote-managed devices).
pub const COMPUTE_REMOTE_MANAGED_PORTS: &str = "COMPUTE_REMOTE_MANAGED_PORTS";

/// Placement's standard resource classes (os-resource-classes 1.1.0 `STANDARDS`).
pub const STANDARD_RESOURCE_CLASSES: &[&str] = &[
    "VCPU",
    "MEMORY_MB",
    "DISK_GB",
    "PCI_DEVICE",
    "SRIOV_NET_VF",
    "NUMA_SOCKET",
    "NUMA_CORE",
    "NUMA_THREAD",
    "NUMA_MEMORY_MB",
    "IPV4_ADDRESS",
    "VGPU",
    "VGPU_DISPLAY_HEAD",
    "NET_BW_EGR_KILOBIT_PER_SEC",
    "NET_BW_IGR_KILOBIT_PER_SEC",
    "PCPU",
    "MEM_ENCRYPTION_CONTEXT",
    "FPGA",
    "PGPU",
    "NET_PACKET_RATE_KILOPACKET_PER_SEC",
    "NET_PACKET_RATE_EGR_KILOPACKET_PER_SEC",
    "NET_PACKET_RATE_IGR_KILOPACKET_PER_SEC",
];

/// Kernel architecture name (`uname -m`) to os-traits `HW_ARCH_*`. Names with no trait (riscv64,
/// loongarch64 in os-traits 3.9.0) give none.
const ARCH_TRAITS: &[(&str, &str)] = &[
    ("x86_64", "HW_ARCH_X86_64"),
    ("amd64", "HW_ARCH_X86_64"),
    ("i386", "HW_ARCH_I686"),
    ("i486", "HW_ARCH_I686"),
    ("i586", "HW_ARCH_I686"),
    ("i686", "HW_ARCH_I686"),
    ("aarch64", "HW_ARCH_AARCH64"),
    ("arm64", "HW_ARCH_AARCH64"),
    ("armv6l", "HW_ARCH_ARMV6"),
    ("armv7l", "HW_ARCH_ARMV7"),
    ("armv7b", "HW_ARCH_ARMV7B"),
    ("ppc", "HW_ARCH_PPC"),
    ("ppcle", "HW_ARCH_PPCLE"),
    ("ppc64", "HW_ARCH_PPC64"),
    ("ppc64le", "HW_ARCH_PPC64LE"),
    ("s390", "HW_ARCH_S390"),
    ("s390x", "HW_ARCH_S390X"),
    ("mips", "HW_ARCH_MIPS"),
    ("mipsel", "HW_ARCH_MIPSEL"),
    ("mips64", "HW_ARCH_MIPS64"),
    ("mips64el", "HW_ARCH_MIPS64EL"),
    ("sparc", "HW_ARCH_SPARC"),
    ("sparc64", "HW_ARCH_SPARC64"),
    ("ia64", "HW_ARCH_IA64"),
    ("alpha", "HW_ARCH_ALPHA"),
    ("parisc", "HW_ARCH_PARISC"),
    ("parisc64", "HW_ARCH_PARISC64"),
    ("m68k", "HW_ARCH_M68K"),
    ("sh4", "HW_ARCH_SH4"),
    ("xtensa", "HW_ARCH_XTENSA"),
];

/// One row of the CPU flag table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuFlagTrait {
    /// Flag as `/proc/cpuinfo` writes it.
    pub flag: String,
    /// The trait.
    pub trait_name: String,
}

/// The CPU flag table (comments and blank lines skipped).
pub fn cpu_flag_table() -> &'static [CpuFlagTrait] {
    static TABLE: OnceLock<Vec<CpuFlagTrait>> = OnceLock::new();
    TABLE.get_or_init(|| {
        CPU_FLAG_TABLE
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .filter_map(|l| {
                let mut cols = l.split('\t');
                Some(CpuFlagTrait {
                    flag: cols.next()?.to_string(),
                    trait_name: cols.next()?.to_string(),
                })
            })
            .collect()
    })
}

/// Every os-traits 3.9.0 trait.
pub fn standard_traits() -> &'static BTreeSet<String> {
    static SET: OnceLock<BTreeSet<String>> = OnceLock::new();
    SET.get_or_init(|| {
        STANDARD_TRAITS
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .collect()
    })
}

/// The traits for a host's CPU flags.
pub fn cpu_traits<S: AsRef<str>>(flags: &[S]) -> BTreeSet<String> {
    let flags: BTreeSet<&str> = flags.iter().map(AsRef::as_ref).collect();
    cpu_flag_table()
        .iter()
        .filter(|r| flags.contains(r.flag.as_str()))
        .map(|r| r.trait_name.clone())
        .collect()
}

/// The `HW_ARCH_*` trait for a kernel architecture name.
pub fn arch_trait(arch: &str) -> Option<&'static str> {
    ARCH_TRAITS
        .iter()
        .find(|(a, _)| *a == arch)
        .map(|(_, t)| *t)
}

/// The compute node traits Nova's resource tracker itself sets (not its virt driver): all rtrack
/// sets when nova-compute runs on it and its driver sets the others.
pub fn tracker_root_traits() -> BTreeSet<String> {
    [COMPUTE_NODE, OWNER_NOVA, COMPUTE_REMOTE_MANAGED_PORTS]
        .iter()
        .map(|t| t.to_string())
        .collect()
}

/// The traits on the compute node that rtrack decides: added when true, removed when false.
/// Every other trait on the node belongs to someone else and is left alone.
pub fn owned_root_traits() -> BTreeSet<String> {
    let mut owned: BTreeSet<String> = cpu_flag_table()
        .iter()
        .map(|r| r.trait_name.clone())
        .collect();
    owned.extend(
        standard_traits()
            .iter()
            .filter(|t| t.starts_with("HW_ARCH_"))
            .cloned(),
    );
    for t in [
        COMPUTE_NODE,
        COMPUTE_STATUS_DISABLED,
        HW_CPU_HYPERTHREADING,
        OWNER_NOVA,
        COMPUTE_SOCKET_PCI_NUMA_AFFINITY,
        COMPUTE_REMOTE_MANAGED_PORTS,
        COMPUTE_ADDRESS_SPACE_PASSTHROUGH,
        COMPUTE_ADDRESS_SPACE_EMULATED,
    ] {
        owned.insert(t.to_string());
    }
    owned
}

/// Standard traits a vGPU type's description justifies (NVIDIA's drivers write
/// `num_heads=4, ..., max_resolution=4096x2160`): `HW_GPU_MAX_DISPLAY_HEADS_<n>` and
/// `HW_GPU_RESOLUTION_W<w>H<h>`, when os-traits has them. Nova sets none on its vGPU providers.
pub fn gpu_type_traits(description: Option<&str>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for part in description.unwrap_or_default().split(',') {
        let Some((key, value)) = part.split_once('=') else {
            continue;
        };
        let candidate = match key.trim() {
            "num_heads" => format!("HW_GPU_MAX_DISPLAY_HEADS_{}", value.trim()),
            "max_resolution" => match value.trim().split_once('x') {
                Some((w, h)) => format!("HW_GPU_RESOLUTION_W{}H{}", w.trim(), h.trim()),
                None => continue,
            },
            _ => continue,
        };
        if standard_traits().contains(&candidate) {
            out.insert(candidate);
        }
    }
    out
}

/// os-traits' and os-resource-classes' `normalize_name`: runs of characters other than A-Z,
/// a-z and 0-9 become one `_`, then upper case, with `CUSTOM_` in front.
pub fn normalize_custom(name: &str) -> String {
    let mut out = String::from("CUSTOM_");
    let mut in_run = false;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_uppercase());
            in_run = false;
        } else if !in_run {
            out.push('_');
            in_run = true;
        }
    }
    out
}

/// Nova's PCI resource class: the spec's `resource_class` upper-cased (standard or already
/// `CUSTOM_` names as they are, others normalized), else `CUSTOM_PCI_<VENDOR>_<PRODUCT>`.
pub fn pci_resource_class(spec_rc: Option<&str>, vendor_id: &str, product_id: &str) -> String {
    match spec_rc.map(str::trim).filter(|s| !s.is_empty()) {
        Some(rc) => {
            let up = rc.to_ascii_uppercase();
            if STANDARD_RESOURCE_CLASSES.contains(&up.as_str()) || up.starts_with("CUSTOM_") {
                up
            } else {
                normalize_custom(rc)
            }
        }
        None => format!("CUSTOM_PCI_{vendor_id}_{product_id}").to_ascii_uppercase(),
    }
}

/// Nova's PCI traits: the spec's comma-separated `traits` (standard ones as they are, `CUSTOM_`
/// ones upper-cased, others normalized) plus `COMPUTE_MANAGED_PCI_DEVICE`.
pub fn pci_traits(spec_traits: Option<&str>) -> BTreeSet<String> {
    let mut out = BTreeSet::from([COMPUTE_MANAGED_PCI_DEVICE.to_string()]);
    for t in spec_traits
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        let up = t.to_ascii_uppercase();
        if standard_traits().contains(t) {
            out.insert(t.to_string());
        } else if up.starts_with("CUSTOM_") {
            out.insert(up);
        } else {
            out.insert(normalize_custom(t));
        }
    }
    out
}

/// Placement's rule for custom names: `^CUSTOM_[A-Z0-9_]+$`.
pub fn is_valid_custom(name: &str) -> bool {
    name.strip_prefix("CUSTOM_").is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vgpu_types_description_gives_the_standard_traits_it_justifies() {
        let t = gpu_type_traits(Some(
            "num_heads=4, frl_config=60, framebuffer=2048M, max_resolution=2560x1600, max_instance=8",
        ));
        assert_eq!(
            t.into_iter().collect::<Vec<_>>(),
            ["HW_GPU_MAX_DISPLAY_HEADS_4", "HW_GPU_RESOLUTION_W2560H1600"]
        );
        // No such standard traits (3 heads; 4096x2160 is not in os-traits 3.9.0), or no text.
        assert!(gpu_type_traits(Some("num_heads=3, max_resolution=4096x2160")).is_empty());
        assert!(gpu_type_traits(Some("Intel GVT-g low_gm_size: 64MB")).is_empty());
        assert!(gpu_type_traits(None).is_empty());
    }

    #[test]
    fn every_table_trait_is_a_standard_trait() {
        assert!(cpu_flag_table().len() >= 40);
        for row in cpu_flag_table() {
            assert!(
                standard_traits().contains(&row.trait_name),
                "{} is not in os-traits 3.9.0",
                row.trait_name
            );
        }
        for (_, t) in ARCH_TRAITS {
            assert!(standard_traits().contains(*t), "{t}");
        }
        for t in [
            COMPUTE_NODE,
            COMPUTE_STATUS_DISABLED,
            HW_CPU_HYPERTHREADING,
            COMPUTE_MANAGED_PCI_DEVICE,
            MISC_SHARES_VIA_AGGREGATE,
        ] {
            assert!(standard_traits().contains(t), "{t}");
        }
        assert_eq!(standard_traits().len(), 377);
    }

    #[test]
    fn cpuinfo_names_map_to_nova_traits() {
        let flags = [
            "fpu",
            "pni",
            "sse4_1",
            "sse4_2",
            "avx2",
            "vmx",
            "sha_ni",
            "pclmulqdq",
        ];
        let t = cpu_traits(&flags);
        let want: BTreeSet<String> = [
            "HW_CPU_X86_SSE3",
            "HW_CPU_X86_SSE41",
            "HW_CPU_X86_SSE42",
            "HW_CPU_X86_AVX2",
            "HW_CPU_X86_VMX",
            "HW_CPU_X86_INTEL_VMX",
            "HW_CPU_X86_SHA",
            "HW_CPU_X86_CLMUL",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(t, want);
        assert!(cpu_traits::<&str>(&[]).is_empty());
    }

    #[test]
    fn arch_traits() {
        assert_eq!(arch_trait("x86_64"), Some("HW_ARCH_X86_64"));
        assert_eq!(arch_trait("aarch64"), Some("HW_ARCH_AARCH64"));
        assert_eq!(arch_trait("ppc64le"), Some("HW_ARCH_PPC64LE"));
        assert_eq!(arch_trait("riscv64"), None);
        let owned = owned_root_traits();
        assert!(owned.contains("HW_ARCH_S390X") && owned.contains("COMPUTE_STATUS_DISABLED"));
        assert!(!owned.contains("COMPUTE_MANAGED_PCI_DEVICE"));
    }

    #[test]
    fn normalization_follows_os_traits() {
        assert_eq!(normalize_custom("my-nic  fast"), "CUSTOM_MY_NIC_FAST");
        assert_eq!(normalize_custom("a.b"), "CUSTOM_A_B");
        assert_eq!(
            pci_resource_class(None, "8086", "1592"),
            "CUSTOM_PCI_8086_1592"
        );
        assert_eq!(
            pci_resource_class(None, "10de", "20b5"),
            "CUSTOM_PCI_10DE_20B5"
        );
        assert_eq!(pci_resource_class(Some("pgpu"), "x", "y"), "PGPU");
        assert_eq!(
            pci_resource_class(Some("custom_gpu"), "x", "y"),
            "CUSTOM_GPU"
        );
        assert_eq!(
            pci_resource_class(Some("my gpu"), "x", "y"),
            "CUSTOM_MY_GPU"
        );
        let t = pci_traits(Some("HW_GPU_API_VULKAN, custom_fast,blue-ish,"));
        let want: BTreeSet<String> = [
            "COMPUTE_MANAGED_PCI_DEVICE",
            "HW_GPU_API_VULKAN",
            "CUSTOM_FAST",
            "CUSTOM_BLUE_ISH",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(t, want);
        assert!(is_valid_custom("CUSTOM_PCI_8086_1592"));
        assert!(!is_valid_custom("CUSTOM_"));
        assert!(!is_valid_custom("CUSTOM_a"));
    }
}
