//! `/proc/cpuinfo`: the processor's vendor, model and feature flags, in every architecture's
//! format (x86, ARM64, POWER, s390x, RISC-V).
//!
//! In: the text of `proc/cpuinfo`. Out: a [`CpuinfoSummary`]. The CPU probe ([`crate::cpu`])
//! reads the file and uses this for names and flags only; counts come from sysfs.

use std::collections::BTreeMap;
use std::collections::BTreeSet;

/// The parts of `/proc/cpuinfo` rtrack uses.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CpuinfoSummary {
    /// Architecture guessed from the format, used when `proc/sys/kernel/arch` is absent.
    pub arch_hint: Option<String>,
    /// Vendor name.
    pub vendor: Option<String>,
    /// Model name.
    pub model: Option<String>,
    /// ARM64 implementer number.
    pub implementer: Option<String>,
    /// ARM64 part number.
    pub part: Option<String>,
    /// Feature flags, sorted and unique.
    pub flags: Vec<String>,
    /// x86: the physical address bits of the first `address sizes` line.
    pub maxphysaddr_bits: Option<u32>,
}

/// The physical address bits of an `address sizes` value (`46 bits physical, 57 bits
/// virtual`): the leading decimal number, as libvirt reads it.
fn address_bits(value: &str) -> Option<u32> {
    let digits: String = value
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok().filter(|b| (1..=64).contains(b))
}

/// Parses `/proc/cpuinfo` in any of the kernel's formats. Only the first processor's values are
/// used: hosts with mixed processors (big.LITTLE) report the first.
pub fn parse_cpuinfo(text: &str) -> CpuinfoSummary {
    let mut first: BTreeMap<String, String> = BTreeMap::new();
    let mut s390_machine: Option<String> = None;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let key = key.trim();
        let value = value.trim();
        // s390x: "processor 0: version = FF,  identification = 0133E8,  machine = 3906"
        if key.starts_with("processor ") {
            if s390_machine.is_none() {
                s390_machine = value
                    .split(',')
                    .filter_map(|kv| kv.split_once('='))
                    .find(|(k, _)| k.trim() == "machine")
                    .map(|(_, v)| v.trim().to_string());
            }
            continue;
        }
        first
            .entry(key.to_string())
            .or_insert_with(|| value.to_string());
    }
    let get = |k: &str| first.get(k).filter(|v| !v.is_empty()).cloned();
    let split_flags = |v: Option<String>| -> Vec<String> {
        let set: BTreeSet<String> = v
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect();
        set.into_iter().collect()
    };

    let mut out = CpuinfoSummary::default();
    if let Some(implementer) = get("CPU implementer") {
        // ARM (64- or 32-bit).
        let part = get("CPU part");
        let arch_level = get("CPU architecture");
        out.arch_hint = Some(match arch_level.as_deref() {
            Some("8") | Some("AArch64") | None => "aarch64".to_string(),
            Some(_) => "armv7l".to_string(),
        });
        let (vendor, model) = arm_names(&implementer, part.as_deref());
        out.vendor = Some(vendor);
        out.model = get("model name").or(model);
        out.flags = split_flags(get("Features"));
        out.implementer = Some(implementer);
        out.part = part;
    } else if get("vendor_id").as_deref() == Some("IBM/S390") {
        out.arch_hint = Some("s390x".to_string());
        out.vendor = Some("IBM".to_string());
        out.model = Some(match s390_machine {
            Some(m) => format!("IBM/S390 machine {m}"),
            None => "IBM/S390".to_string(),
        });
        out.flags = split_flags(get("features"));
    } else if let Some(cpu) = get("cpu").filter(|_| first.contains_key("timebase")) {
        // POWER: "cpu : POWER9, altivec supported"; no flags line.
        out.arch_hint = Some("ppc64le".to_string());
        out.vendor = Some("IBM".to_string());
        out.model = Some(cpu);
    } else if let Some(isa) = get("isa") {
        out.arch_hint = Some(
            if isa.starts_with("rv32") {
                "riscv32"
            } else {
                "riscv64"
            }
            .to_string(),
        );
        out.vendor = get("mvendorid");
        out.model = get("uarch").or(Some(isa));
    } else {
        // x86 and anything else that follows its layout.
        out.flags = split_flags(get("flags"));
        if first.contains_key("flags") || first.contains_key("vendor_id") {
            let long_mode = out.flags.iter().any(|f| f == "lm");
            out.arch_hint = Some(if long_mode { "x86_64" } else { "i686" }.to_string());
        }
        out.vendor = get("vendor_id");
        out.model = get("model name");
        out.maxphysaddr_bits = first.get("address sizes").and_then(|v| address_bits(v));
    }
    out
}

/// Names for ARM implementer/part numbers. The vendor list is the architected one; the part table
/// covers server cores and is extended when a machine shows an unknown one (the raw numbers are
/// always reported too).
fn arm_names(implementer: &str, part: Option<&str>) -> (String, Option<String>) {
    let imp = parse_arm_number(implementer);
    let vendor = match imp {
        Some(0x41) => "ARM",
        Some(0x42) => "Broadcom",
        Some(0x43) => "Cavium",
        Some(0x46) => "Fujitsu",
        Some(0x48) => "HiSilicon",
        Some(0x4e) => "NVIDIA",
        Some(0x50) => "APM",
        Some(0x51) => "Qualcomm",
        Some(0x53) => "Samsung",
        Some(0x61) => "Apple",
        Some(0x6d) => "Microsoft",
        Some(0xc0) => "Ampere",
        _ => "",
    };
    let vendor = if vendor.is_empty() {
        format!("implementer {implementer}")
    } else {
        vendor.to_string()
    };
    let part_num = part.and_then(parse_arm_number);
    let model = match (imp, part_num) {
        (Some(0x41), Some(0xd03)) => Some("Cortex-A53"),
        (Some(0x41), Some(0xd07)) => Some("Cortex-A57"),
        (Some(0x41), Some(0xd08)) => Some("Cortex-A72"),
        (Some(0x41), Some(0xd0b)) => Some("Cortex-A76"),
        (Some(0x41), Some(0xd0c)) => Some("Neoverse-N1"),
        (Some(0x41), Some(0xd40)) => Some("Neoverse-V1"),
        (Some(0x41), Some(0xd49)) => Some("Neoverse-N2"),
        (Some(0x41), Some(0xd4f)) => Some("Neoverse-V2"),
        (Some(0x41), Some(0xd8e)) => Some("Neoverse-N3"),
        (Some(0x43), Some(0x0af)) => Some("ThunderX2 99xx"),
        (Some(0x46), Some(0x001)) => Some("A64FX"),
        (Some(0x48), Some(0xd01)) => Some("Kunpeng-920"),
        (Some(0x50), Some(0x000)) => Some("X-Gene"),
        (Some(0xc0), Some(0xac3)) => Some("Ampere-1"),
        (Some(0xc0), Some(0xac4)) => Some("Ampere-1a"),
        _ => None,
    };
    let model = match (model, part) {
        (Some(m), _) => Some(m.to_string()),
        (None, Some(p)) => Some(format!("{vendor} part {p}")),
        (None, None) => None,
    };
    (vendor, model)
}

fn parse_arm_number(s: &str) -> Option<u32> {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x86_address_sizes() {
        let s = parse_cpuinfo(
            "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu lm\naddress sizes\t: 46 bits physical, 57 bits virtual\n\nprocessor\t: 1\naddress sizes\t: 39 bits physical, 48 bits virtual\n",
        );
        assert_eq!(
            s.maxphysaddr_bits,
            Some(46),
            "the first processor's, as libvirt"
        );
        let s = parse_cpuinfo("processor\t: 0\nflags\t\t: lm\naddress sizes\t: lots\n");
        assert_eq!(s.maxphysaddr_bits, None);
        let s = parse_cpuinfo(
            "CPU implementer\t: 0x41\nCPU part\t: 0xd0c\naddress sizes\t: 48 bits physical\n",
        );
        assert_eq!(s.maxphysaddr_bits, None, "x86 only, as libvirt");
    }

    #[test]
    fn x86_cpuinfo() {
        let s = parse_cpuinfo(
            "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R)\nflags\t\t: fpu lm avx2 fpu\n\nprocessor\t: 1\nvendor_id\t: Other\n",
        );
        assert_eq!(s.arch_hint.as_deref(), Some("x86_64"));
        assert_eq!(s.vendor.as_deref(), Some("GenuineIntel"));
        assert_eq!(s.model.as_deref(), Some("Intel(R) Xeon(R)"));
        assert_eq!(s.flags, vec!["avx2", "fpu", "lm"]);
    }

    #[test]
    fn arm64_cpuinfo_has_no_model_name() {
        let s = parse_cpuinfo(
            "processor\t: 0\nFeatures\t: fp asimd\nCPU implementer\t: 0x48\nCPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: 0xd01\n",
        );
        assert_eq!(s.arch_hint.as_deref(), Some("aarch64"));
        assert_eq!(s.vendor.as_deref(), Some("HiSilicon"));
        assert_eq!(s.model.as_deref(), Some("Kunpeng-920"));
        assert_eq!(s.implementer.as_deref(), Some("0x48"));
        assert_eq!(s.flags, vec!["asimd", "fp"]);
    }

    #[test]
    fn arm64_unknown_part_keeps_the_numbers() {
        let s = parse_cpuinfo("CPU implementer\t: 0x99\nCPU architecture: 8\nCPU part\t: 0x123\n");
        assert_eq!(s.vendor.as_deref(), Some("implementer 0x99"));
        assert_eq!(s.model.as_deref(), Some("implementer 0x99 part 0x123"));
    }

    #[test]
    fn power_cpuinfo() {
        let s = parse_cpuinfo(
            "processor\t: 0\ncpu\t\t: POWER9, altivec supported\nclock\t\t: 3450.000000MHz\n\ntimebase\t: 512000000\nplatform\t: PowerNV\n",
        );
        assert_eq!(s.arch_hint.as_deref(), Some("ppc64le"));
        assert_eq!(s.model.as_deref(), Some("POWER9, altivec supported"));
        assert_eq!(s.vendor.as_deref(), Some("IBM"));
        assert!(s.flags.is_empty());
    }

    #[test]
    fn s390x_cpuinfo() {
        let s = parse_cpuinfo(
            "vendor_id       : IBM/S390\n# processors    : 2\nbogomips per cpu: 3033.00\nfeatures\t: esan3 zarch stfle msa\nprocessor 0: version = FF,  identification = 0133E8,  machine = 3906\nprocessor 1: version = FF,  identification = 0133E8,  machine = 3906\n",
        );
        assert_eq!(s.arch_hint.as_deref(), Some("s390x"));
        assert_eq!(s.model.as_deref(), Some("IBM/S390 machine 3906"));
        assert_eq!(s.flags, vec!["esan3", "msa", "stfle", "zarch"]);
    }

    #[test]
    fn riscv_cpuinfo() {
        let s = parse_cpuinfo("processor\t: 0\nhart\t\t: 1\nisa\t\t: rv64imafdc\nmmu\t\t: sv39\nuarch\t\t: sifive,u74-mc\n");
        assert_eq!(s.arch_hint.as_deref(), Some("riscv64"));
        assert_eq!(s.model.as_deref(), Some("sifive,u74-mc"));
    }

    #[test]
    fn garbage_cpuinfo_gives_nothing_and_no_panic() {
        let s = parse_cpuinfo("\0\0\0:::\n:\nflags");
        assert_eq!(s.model, None);
    }
}
