//! Core type probe: on hybrid processors, which CPUs are of which kind of core.
//!
//! In: `sys/devices/cpu_core/cpus`, `sys/devices/cpu_atom/cpus` and
//! `sys/devices/cpu_lowpower/cpus` (the per-kind PMUs of Intel hybrid parts), else
//! `sys/devices/system/cpu/cpu<N>/cpu_capacity` (ARM big.LITTLE and DynamIQ). Out: a
//! [`CoreType`] per kind, empty on a host with one kind of core.
//!
//! Names are hwloc's (`look_sysfscpukinds_by_pmu_sets` and the `LinuxCapacity` info of
//! `topology-linux.c`): `IntelCore`, `IntelAtom`, `IntelLowPower` for the PMUs, and
//! `LinuxCapacity=<N>` for CPUs of capacity N, so that `lstopo --cpukinds` shows the same
//! names. The PMU sets win when present, as in hwloc: an Intel hybrid kernel also writes
//! capacities. A kind's CPUs are limited to the present ones.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::cpulist::CpuSet;
use crate::read::{quoted, read_optional, Warnings};
use crate::HostRoot;

/// One kind of core and its CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CoreType {
    /// hwloc's name: `IntelCore`, `IntelAtom`, `IntelLowPower`, or `LinuxCapacity=<N>`.
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
        kinds = capacity_kinds(root, present, w);
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

/// Kinds by `cpu_capacity`, highest capacity first. Only read when the CPUs have it (the
/// first present CPU tells: most x86 kernels write none).
fn capacity_kinds(root: &HostRoot, present: &CpuSet, w: &mut Warnings) -> Vec<CoreType> {
    let cpu_dir = root.sys_path("devices/system/cpu");
    let Some(first) = present.iter().next() else {
        return Vec::new();
    };
    if read_optional(&cpu_dir.join(format!("cpu{first}/cpu_capacity")), w).is_none() {
        return Vec::new();
    }
    let mut by_capacity: BTreeMap<u64, CpuSet> = BTreeMap::new();
    let mut unknown = CpuSet::new();
    for cpu in present.iter() {
        let path = cpu_dir.join(format!("cpu{cpu}/cpu_capacity"));
        match read_optional(&path, w).map(|raw| (raw.parse::<u64>(), raw)) {
            Some((Ok(c), _)) => by_capacity.entry(c).or_default().insert(cpu),
            Some((Err(_), raw)) => {
                w.push(
                    &path,
                    format!("value {} is not a capacity (integer)", quoted(&raw)),
                );
                unknown.insert(cpu);
            }
            None => unknown.insert(cpu),
        }
    }
    if !unknown.is_empty() && by_capacity.len() > 1 {
        w.push(
            &cpu_dir,
            format!("CPUs {unknown} have no readable cpu_capacity: their core type is unknown"),
        );
    }
    by_capacity
        .into_iter()
        .rev()
        .map(|(c, cpus)| CoreType {
            name: format!("LinuxCapacity={c}"),
            cpus,
        })
        .collect()
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
}
