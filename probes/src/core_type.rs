//! Core type probe: on hybrid processors, which CPUs are of which kind of core.
//!
//! In, the first source that tells two kinds apart, in hwloc's order
//! (`look_sysfscpukinds` in `topology-linux.c`):
//! 1. `sys/devices/cpu_core/cpus`, `cpu_atom/cpus`, `cpu_lowpower/cpus`: the per-kind PMUs of
//!    Intel hybrid parts (an Intel hybrid kernel also writes capacities: the PMUs win);
//! 2. `sys/devices/system/cpu/cpu<N>/regs/identification/midr_el1` (ARM): one kind per main
//!    ID register value; where the kernel has them, they alone decide, as in hwloc, because
//!    `cpu_capacity` differs between cores of one kind (an NVIDIA GB10 has five capacities for
//!    two kinds of core);
//! 3. `cpu<N>/cpu_capacity` (ARM big.LITTLE and DynamIQ without `regs`);
//! 4. `cpu<N>/cpufreq/base_frequency` (intel_pstate): the kinds of an Intel hybrid part whose
//!    kernel has no hybrid PMUs.
//!
//! Out: a [`CoreType`] per kind, the fastest first; empty on a host with one kind of core.
//!
//! Names are hwloc's, so that `lstopo --cpukinds` shows the same: `IntelCore`, `IntelAtom`,
//! `IntelLowPower` for the PMUs; `LinuxCapacity=<N>` for a capacity (for a MIDR kind, the
//! least capacity of its CPUs, hwloc's `LinuxCapacity` info of that kind; `CPUPart=0x<part>`
//! when the CPUs have no capacity); `FrequencyBaseMHz=<N>` for a base frequency. A kind's CPUs
//! are limited to the present ones.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::cpulist::CpuSet;
use crate::read::{quoted, read_optional, Warnings};
use crate::HostRoot;

/// One kind of core and its CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CoreType {
    /// hwloc's name: `IntelCore`, `IntelAtom`, `IntelLowPower`, `LinuxCapacity=<N>`,
    /// `CPUPart=0x<part>` or `FrequencyBaseMHz=<N>`.
    pub name: String,
    /// Its CPUs (cpulist).
    pub cpus: CpuSet,
}

/// The Intel hybrid PMUs, their hwloc names, performance cores first.
pub const PMU_KINDS: [(&str, &str); 3] = [
    ("cpu_core", "IntelCore"),
    ("cpu_atom", "IntelAtom"),
    ("cpu_lowpower", "IntelLowPower"),
];

/// The core types of the `present` CPUs; empty with one kind.
pub fn probe_core_types(root: &HostRoot, present: &CpuSet, w: &mut Warnings) -> Vec<CoreType> {
    let mut kinds = pmu_kinds(root, present, w);
    if kinds.is_empty() {
        // Where the kernel has main ID registers they alone decide, as in hwloc: one value is
        // one kind, whatever the capacities and frequencies say.
        kinds = match midr_kinds(root, present, w) {
            Some(k) => k,
            None => match capacity_kinds(root, present, w) {
                k if k.is_empty() => base_frequency_kinds(root, present, w),
                k => k,
            },
        };
    }
    if kinds.len() < 2 {
        return Vec::new();
    }
    kinds
}

fn pmu_kinds(root: &HostRoot, present: &CpuSet, w: &mut Warnings) -> Vec<CoreType> {
    let mut out = Vec::new();
    for (pmu, name) in PMU_KINDS {
        let path = root.sys_path(&format!("devices/{pmu}/cpus"));
        let Some(raw) = read_optional(&path, w) else {
            continue;
        };
        match CpuSet::parse_list(&raw) {
            Ok(s) => {
                let cpus = s.intersection(present);
                if !cpus.is_empty() {
                    out.push(CoreType {
                        name: name.to_string(),
                        cpus,
                    });
                }
            }
            Err(e) => w.push(
                &path,
                format!("not a cpulist: {e}; core type {name} unknown"),
            ),
        }
    }
    out
}

/// The present CPUs grouped by the number in `cpu<N>/<file>`, or `None` when the first present
/// CPU has no such file (the kernel does not write it on this host). CPUs without a readable
/// value are left out, with a warning when there are kinds to tell apart.
fn per_cpu_values(
    root: &HostRoot,
    present: &CpuSet,
    file: &str,
    what: &str,
    parse: fn(&str) -> Option<u64>,
    w: &mut Warnings,
) -> Option<BTreeMap<u64, CpuSet>> {
    let cpu_dir = root.sys_path("devices/system/cpu");
    let first = present.iter().next()?;
    // The first CPU's value tells whether the kernel writes the file at all; it is kept, not
    // read again.
    let first_raw = read_optional(&cpu_dir.join(format!("cpu{first}/{file}")), w)?;
    let mut first_raw = Some(first_raw);
    let mut by_value: BTreeMap<u64, CpuSet> = BTreeMap::new();
    let mut unknown = CpuSet::new();
    for cpu in present.iter() {
        let path = cpu_dir.join(format!("cpu{cpu}/{file}"));
        let raw = first_raw.take().or_else(|| read_optional(&path, w));
        match raw.map(|raw| (parse(&raw), raw)) {
            Some((Some(v), _)) => by_value.entry(v).or_default().insert(cpu),
            Some((None, raw)) => {
                w.push(&path, format!("value {} is not {what}", quoted(&raw)));
                unknown.insert(cpu);
            }
            None => unknown.insert(cpu),
        }
    }
    if !unknown.is_empty() && by_value.len() > 1 {
        w.push(
            &cpu_dir,
            format!("CPUs {unknown} have no readable {file}: their core type is unknown"),
        );
    }
    Some(by_value)
}

fn decimal(raw: &str) -> Option<u64> {
    raw.parse().ok()
}

fn hexadecimal(raw: &str) -> Option<u64> {
    u64::from_str_radix(raw.strip_prefix("0x").unwrap_or(raw), 16).ok()
}

/// Kinds by `cpu_capacity`, highest capacity first.
fn capacity_kinds(root: &HostRoot, present: &CpuSet, w: &mut Warnings) -> Vec<CoreType> {
    let capacities = per_cpu_values(
        root,
        present,
        "cpu_capacity",
        "a capacity (integer)",
        decimal,
        w,
    );
    named_fastest_first(capacities.unwrap_or_default(), "LinuxCapacity")
}

/// Kinds by intel_pstate's `base_frequency` (kHz), named in MHz, highest first.
fn base_frequency_kinds(root: &HostRoot, present: &CpuSet, w: &mut Warnings) -> Vec<CoreType> {
    let file = "cpufreq/base_frequency";
    let khz = per_cpu_values(root, present, file, "a frequency in kHz", decimal, w);
    let mut mhz: BTreeMap<u64, CpuSet> = BTreeMap::new();
    for (khz, cpus) in khz.unwrap_or_default() {
        let set = mhz.entry(khz / 1000).or_default();
        cpus.iter().for_each(|cpu| set.insert(cpu));
    }
    named_fastest_first(mhz, "FrequencyBaseMHz")
}

fn named_fastest_first(by_value: BTreeMap<u64, CpuSet>, info: &str) -> Vec<CoreType> {
    by_value
        .into_iter()
        .rev()
        .map(|(v, cpus)| CoreType {
            name: format!("{info}={v}"),
            cpus,
        })
        .collect()
}

/// Kinds by ARM's main ID register, or `None` without `regs/identification/midr_el1`. Each
/// kind is named by the least capacity of its CPUs, as hwloc's `LinuxCapacity` info of it,
/// and ordered by it, highest first; by its part number when the CPUs have no capacity or two
/// kinds share one.
fn midr_kinds(root: &HostRoot, present: &CpuSet, w: &mut Warnings) -> Option<Vec<CoreType>> {
    let file = "regs/identification/midr_el1";
    let by_midr = per_cpu_values(
        root,
        present,
        file,
        "a register value (hex)",
        hexadecimal,
        w,
    )?;
    if by_midr.len() < 2 {
        return Some(Vec::new());
    }
    let capacities: BTreeMap<u64, CpuSet> = per_cpu_values(
        root,
        present,
        "cpu_capacity",
        "a capacity (integer)",
        decimal,
        w,
    )
    .unwrap_or_default();
    let capacity_of = |cpu: u32| {
        capacities
            .iter()
            .find(|(_, s)| s.contains(cpu))
            .map(|c| *c.0)
    };
    let mut kinds: Vec<MidrKind> = by_midr
        .into_iter()
        .map(|(midr, cpus)| MidrKind {
            least_capacity: cpus.iter().filter_map(capacity_of).min(),
            midr,
            cpus,
        })
        .collect();
    kinds.sort_by(|a, b| (b.least_capacity.cmp(&a.least_capacity)).then(a.midr.cmp(&b.midr)));
    // The first naming that tells every kind apart: capacity, part number, whole register.
    let namings: [fn(&MidrKind) -> Option<String>; 3] = [
        |k| k.least_capacity.map(|c| format!("LinuxCapacity={c}")),
        |k| Some(format!("CPUPart=0x{:03x}", (k.midr >> 4) & 0xfff)),
        |k| Some(format!("MIDR=0x{:08x}", k.midr)),
    ];
    let names = namings
        .iter()
        .map(|name| kinds.iter().map(name).collect::<Option<Vec<String>>>())
        .find_map(|names| names.filter(|n| distinct(n)))
        .unwrap_or_default();
    let kinds = kinds
        .into_iter()
        .zip(names)
        .map(|(k, name)| CoreType { name, cpus: k.cpus });
    Some(kinds.collect())
}

/// CPUs with one main ID register value.
struct MidrKind {
    least_capacity: Option<u64>,
    midr: u64,
    cpus: CpuSet,
}

fn distinct(names: &[String]) -> bool {
    let mut sorted: Vec<&String> = names.iter().collect();
    sorted.sort();
    sorted.windows(2).all(|p| p[0] != p[1])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::path::Path;

    fn write(dir: &Path, rel: &str, content: &str) {
        let p = dir.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }

    fn probe(dir: &Path, present: &str) -> (Vec<(String, String)>, Warnings) {
        let mut w = Warnings::new();
        let t = probe_core_types(
            &HostRoot::under(dir),
            &CpuSet::parse_list(present).unwrap(),
            &mut w,
        );
        (
            t.into_iter()
                .map(|t| (t.name, t.cpus.to_string()))
                .collect(),
            w,
        )
    }

    #[test]
    fn intel_hybrid_pmus_name_the_kinds_as_hwloc_does() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "sys/devices/cpu_core/cpus", "0-15\n");
        write(dir.path(), "sys/devices/cpu_atom/cpus", "16-31\n");
        // Capacities are there too on newer kernels: the PMUs win.
        write(
            dir.path(),
            "sys/devices/system/cpu/cpu0/cpu_capacity",
            "1024\n",
        );
        let (t, w) = probe(dir.path(), "0-31");
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(
            t,
            [
                ("IntelCore".to_string(), "0-15".to_string()),
                ("IntelAtom".to_string(), "16-31".to_string())
            ]
        );
    }

    #[test]
    fn one_kind_of_core_is_no_core_types() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "sys/devices/cpu_core/cpus", "0-15\n");
        assert!(probe(dir.path(), "0-15").0.is_empty());
        let dir = tempfile::tempdir().unwrap();
        for cpu in 0..4 {
            write(
                dir.path(),
                &format!("sys/devices/system/cpu/cpu{cpu}/cpu_capacity"),
                "1024\n",
            );
        }
        assert!(probe(dir.path(), "0-3").0.is_empty());
        assert!(probe(tempfile::tempdir().unwrap().path(), "0-3")
            .0
            .is_empty());
    }

    #[test]
    fn capacities_make_kinds_biggest_first_and_gaps_are_warnings() {
        let dir = tempfile::tempdir().unwrap();
        for (cpu, cap) in [(0, "446"), (1, "446"), (2, "1024"), (3, "1024"), (4, "big")] {
            write(
                dir.path(),
                &format!("sys/devices/system/cpu/cpu{cpu}/cpu_capacity"),
                &format!("{cap}\n"),
            );
        }
        let (t, w) = probe(dir.path(), "0-5");
        assert_eq!(
            t,
            [
                ("LinuxCapacity=1024".to_string(), "2-3".to_string()),
                ("LinuxCapacity=446".to_string(), "0-1".to_string())
            ]
        );
        let messages: Vec<&str> = w.as_slice().iter().map(|w| w.message.as_str()).collect();
        assert!(
            messages[0].contains("\"big\" is not a capacity"),
            "{messages:?}"
        );
        assert!(
            messages[1].contains("CPUs 4-5 have no readable cpu_capacity"),
            "{messages:?}"
        );
    }
    fn per_cpu(dir: &Path, file: &str, values: &[(u32, &str)]) {
        for (cpu, v) in values {
            write(
                dir,
                &format!("sys/devices/system/cpu/cpu{cpu}/{file}"),
                &format!("{v}\n"),
            );
        }
    }

    #[test]
    fn arm_main_id_registers_decide_over_capacities_as_in_hwloc() {
        // NVIDIA GB10's pattern: two kinds of core, five capacities.
        let dir = tempfile::tempdir().unwrap();
        let (little, big) = ("0x00000000410fd871", "0x00000000410fd851");
        let midr = [
            (0, little),
            (1, little),
            (2, big),
            (3, big),
            (4, little),
            (5, big),
        ];
        per_cpu(dir.path(), "regs/identification/midr_el1", &midr);
        let caps = [
            (0, "718"),
            (1, "718"),
            (2, "997"),
            (3, "1024"),
            (4, "731"),
            (5, "1017"),
        ];
        per_cpu(dir.path(), "cpu_capacity", &caps);
        let (t, w) = probe(dir.path(), "0-5");
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(
            t,
            [
                ("LinuxCapacity=997".to_string(), "2-3,5".to_string()),
                ("LinuxCapacity=718".to_string(), "0-1,4".to_string())
            ]
        );
        // Without capacities, the part numbers name them.
        let dir = tempfile::tempdir().unwrap();
        per_cpu(dir.path(), "regs/identification/midr_el1", &midr);
        let names: Vec<String> = probe(dir.path(), "0-5")
            .0
            .into_iter()
            .map(|t| t.0)
            .collect();
        assert_eq!(names, ["CPUPart=0xd85", "CPUPart=0xd87"]);
        // One register value is one kind, however the capacities differ.
        let dir = tempfile::tempdir().unwrap();
        per_cpu(
            dir.path(),
            "regs/identification/midr_el1",
            &[(0, big), (1, big)],
        );
        per_cpu(dir.path(), "cpu_capacity", &[(0, "997"), (1, "1024")]);
        assert!(probe(dir.path(), "0-1").0.is_empty());
    }

    #[test]
    fn intel_base_frequencies_make_kinds_without_hybrid_pmus() {
        // The i7-1370P of hwloc's tests: P-cores 1.9 GHz base, E-cores 1.4 GHz.
        let dir = tempfile::tempdir().unwrap();
        let khz = [
            (0, "1900000"),
            (1, "1900000"),
            (2, "1400000"),
            (3, "1400000"),
        ];
        per_cpu(dir.path(), "cpufreq/base_frequency", &khz);
        let (t, w) = probe(dir.path(), "0-3");
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(
            t,
            [
                ("FrequencyBaseMHz=1900".to_string(), "0-1".to_string()),
                ("FrequencyBaseMHz=1400".to_string(), "2-3".to_string())
            ]
        );
        // The PMUs, when there, name them instead.
        write(dir.path(), "sys/devices/cpu_core/cpus", "0-1\n");
        write(dir.path(), "sys/devices/cpu_atom/cpus", "2-3\n");
        assert_eq!(probe(dir.path(), "0-3").0[0].0, "IntelCore");
    }
}
