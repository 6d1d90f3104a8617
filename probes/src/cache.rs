//! Cache probe: the CPU caches of level 2 and above, one entry per cache instance, with the
//! CPUs that share it.
//!
//! In: `sys/devices/system/cpu/cpu<N>/cache/index<M>/{level,type,size,shared_cpu_list,id}` for
//! every online CPU (`shared_cpu_map` when the list is missing). Out: [`CacheInstance`]s
//! sorted by level, type and first CPU.
//!
//! The rules are hwloc's (`look_sysfscpu` in `topology-linux.c`), so that the probe and
//! `lstopo` agree on the same tree: a cache's CPUs are its shared set restricted to the online
//! CPUs, an instance is one distinct (level, type, CPUs), a missing `type` means unified, and a
//! `size` is read as the number before its `K`. Level 1 caches are skipped after reading their
//! `level` (no policy needs them).
//!
//! Each cache is read once, from its first CPU: the CPUs its `index<M>/shared_cpu_list` names
//! share it, so on x86 (where every CPU numbers its caches alike) their `index<M>` is not
//! opened, and elsewhere only its `level` (and `type`, for a split cache) is read to confirm it
//! is that cache ([`IndexNumbering`]); and a thread whose core sibling, read before it, has caches of level 2 and above that all hold
//! the thread is not read at all (threads of a core share its level 1 caches too). On a
//! 256-CPU host that is 3 opens per core plus 5 per cache instead of 14 per CPU. A CPU without a `cache` directory (guests, some ARM boards,
//! captures that left it out) or an index whose files are missing or odd is a warning; the
//! rest of the caches are still reported.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

pub use crate::cache_index::parse_size_kb;
use crate::cache_index::{read_cache, read_kind, read_level, read_size, CacheRead, Index};
use crate::cpulist::CpuSet;
use crate::read::{SysDir, Warnings};
use crate::HostRoot;

/// One cache instance of level 2 or above.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CacheInstance {
    /// Cache level (2, 3, 4).
    pub level: u32,
    /// `Unified`, `Data` or `Instruction`, as the kernel writes it.
    #[serde(rename = "type")]
    pub kind: String,
    /// Size in KiB; null when `size` is missing or not a size.
    pub size_kb: Option<u64>,
    /// The online CPUs sharing it (cpulist).
    pub cpus: CpuSet,
}

/// Whether `index<M>` is the same cache on every CPU whose `index<M>/shared_cpu_list` names
/// it, so that a CPU's `index<M>` another CPU's list named need not be read at all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum IndexNumbering {
    /// x86: every CPU numbers its caches alike (CPUID leaf 4 order: L1d, L1i, L2, L3, hybrid
    /// P- and E-cores included), and the kernel builds `shared_cpu_list` index by index.
    SameOnEveryCpu,
    /// Elsewhere (device tree, ACPI PPTT): CPUs of different kinds number their caches
    /// differently, and since Linux 6.3 `shared_cpu_list` names the CPUs with a cache of the
    /// same level and type at any index. A named CPU's `index<M>` is the same cache only when
    /// its level (and type, for a split cache) is: those are read first.
    #[default]
    MayDiffer,
}

impl IndexNumbering {
    /// The numbering of an architecture as `proc/sys/kernel/arch` (or `uname -m`) names it;
    /// unknown means it may differ.
    pub fn for_arch(arch: Option<&str>) -> IndexNumbering {
        match arch {
            Some("x86_64" | "x86" | "i386" | "i486" | "i586" | "i686") => {
                IndexNumbering::SameOnEveryCpu
            }
            _ => IndexNumbering::MayDiffer,
        }
    }
}

/// Reads the caches of the online CPUs. `siblings` maps a CPU to its core's CPUs (the CPU
/// probe's `thread_siblings`); pass an empty map when unknown.
pub fn probe_caches(
    root: &HostRoot,
    online: &CpuSet,
    siblings: &BTreeMap<u32, CpuSet>,
    numbering: IndexNumbering,
    w: &mut Warnings,
) -> Vec<CacheInstance> {
    let cpu_dir = root.sys_path("devices/system/cpu");
    let mut scan = Scan {
        numbering,
        ..Scan::default()
    };
    // CPUs whose caches are those of a thread sibling read before them.
    let mut same_as_read = CpuSet::new();
    let mut without = CpuSet::new();
    for cpu in online.iter() {
        if same_as_read.contains(cpu) {
            continue;
        }
        let core = siblings.get(&cpu).cloned().unwrap_or_default();
        match scan.read_cpu(&cpu_dir, cpu, online, &core, w) {
            Some(same) => same.iter().for_each(|c| same_as_read.insert(c)),
            None => without.insert(cpu),
        }
    }
    warn_missing(&cpu_dir, online, &without, w);
    let mut out: Vec<CacheInstance> = scan.found.into_values().collect();
    out.sort_by(|a, b| {
        (a.level, &a.kind, a.cpus.iter().next()).cmp(&(b.level, &b.kind, b.cpus.iter().next()))
    });
    out
}

/// What the caches read so far say.
#[derive(Default)]
struct Scan {
    numbering: IndexNumbering,
    found: BTreeMap<(u32, String, CpuSet), CacheInstance>,
    /// (level, type, id) -> the CPUs of the first instance seen with that id.
    ids: BTreeMap<(u32, String, u64), CpuSet>,
    /// (index number, CPU) -> the cache read at that index of another CPU whose
    /// `shared_cpu_list` names this one: on x86 the same cache, not read again (a 256-CPU host
    /// would otherwise read each L3 256 times); elsewhere, the same cache if its level (and
    /// type) say so ([`IndexNumbering`]).
    at_index: BTreeMap<(u32, u32), usize>,
    /// The caches of `at_index`: level, type and CPUs.
    known: Vec<(u32, String, CpuSet)>,
}

impl Scan {
    /// Reads `cpu`'s caches (those not known already): `None` when it has no `cache`
    /// directory, else the other CPUs of its core that have all of its caches of level 2 and
    /// above, and so all of its caches (threads of a core share its level 1 caches): theirs
    /// are not read.
    fn read_cpu(
        &mut self,
        cpu_dir: &Path,
        cpu: u32,
        online: &CpuSet,
        core: &CpuSet,
        w: &mut Warnings,
    ) -> Option<CpuSet> {
        let dir = cpu_dir.join(format!("cpu{cpu}/cache"));
        // Listed once; each index's files are opened relative to it (`index2/level`), without
        // opening the index directory: most indexes are only asked their level.
        let mut cache = SysDir::open(&dir, w)?;
        let mut entries = cache.entries(w);
        entries.sort();
        let mut same = core.intersection(online);
        same.remove(cpu);
        for name in &entries {
            let Some(number) = index_number(name) else {
                continue;
            };
            let known = self.at_index.get(&(number, cpu)).copied();
            if let (Some(k), IndexNumbering::SameOnEveryCpu) = (known, self.numbering) {
                same = same.intersection(&self.known[k].2);
                continue;
            }
            let index = Index {
                cache: &cache,
                name,
            };
            let Some(level) = read_level(&index, w) else {
                same = CpuSet::new();
                continue;
            };
            if level < 2 {
                continue;
            }
            let mut kind = None;
            if let Some(k) = known {
                if self.is_known(k, level, &index, &mut kind, w) {
                    same = same.intersection(&self.known[k].2);
                    continue;
                }
            }
            match read_cache(&index, cpu, level, kind, online, w) {
                None => same = CpuSet::new(),
                Some(read) => {
                    same = same.intersection(&read.cpus);
                    self.record(number, &dir.join(name), read, w);
                }
            }
        }
        Some(same)
    }

    /// True when the `index<M>` of level `level` at `index` is the known cache `k` another
    /// CPU's `index<M>` named: the same level, and for a split cache the same type (a CPU has
    /// one cache of each level and type). A type read to tell is left in `read`, so that it is
    /// not read again.
    fn is_known(
        &self,
        k: usize,
        level: u32,
        index: &Index<'_>,
        read: &mut Option<String>,
        w: &mut Warnings,
    ) -> bool {
        let (known_level, kind, _) = &self.known[k];
        if *known_level != level {
            return false;
        }
        kind == "Unified" || read.insert(read_kind(index, w)) == kind
    }

    /// Records one cache read at `index<number>` (`path`).
    fn record(&mut self, number: u32, path: &Path, read: CacheRead, w: &mut Warnings) {
        self.known
            .push((read.level, read.kind.clone(), read.cpus.clone()));
        for c in read.cpus.iter() {
            self.at_index.insert((number, c), self.known.len() - 1);
        }
        if let Some(id) = read.id {
            self.check_id(path, id, &read, w);
        }
        let key = (read.level, read.kind.clone(), read.cpus.clone());
        if self.found.contains_key(&key) {
            return;
        }
        let size_kb = read_size(path, w);
        self.found.insert(
            key,
            CacheInstance {
                level: read.level,
                kind: read.kind,
                size_kb,
                cpus: read.cpus,
            },
        );
    }

    /// Warns when a cache id was seen before with other CPUs.
    fn check_id(&mut self, path: &Path, id: u64, read: &CacheRead, w: &mut Warnings) {
        let key = (read.level, read.kind.clone(), id);
        match self.ids.get(&key) {
            Some(seen) if *seen != read.cpus => w.push(
                path,
                format!(
                    "L{} {} cache id {id} is shared by CPUs {} here and {seen} elsewhere: counted as two caches",
                    read.level, read.kind, read.cpus
                ),
            ),
            Some(_) => {}
            None => {
                self.ids.insert(key, read.cpus.clone());
            }
        }
    }
}

/// `index<M>` -> M.
fn index_number(name: &str) -> Option<u32> {
    name.strip_prefix("index")?.parse().ok()
}

/// One warning for the online CPUs without a `cache` directory: every one of them (the caches
/// are unknown) or some (theirs are).
fn warn_missing(cpu_dir: &Path, online: &CpuSet, without: &CpuSet, w: &mut Warnings) {
    if without.is_empty() {
        return;
    }
    if without.len() == online.len() {
        w.push(
            cpu_dir,
            "no online CPU has a cache directory (cpu<N>/cache): cache domains unknown",
        );
    } else {
        w.push(
            cpu_dir,
            format!(
                "CPUs {without} have no cache directory (cpu<N>/cache): their caches are unknown"
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn write(dir: &Path, rel: &str, content: &str) {
        let p = dir.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }

    fn index(dir: &Path, cpu: u32, i: u32, level: u32, kind: &str, size: &str, shared: &str) {
        let base = format!("sys/devices/system/cpu/cpu{cpu}/cache/index{i}");
        write(dir, &format!("{base}/level"), &format!("{level}\n"));
        write(dir, &format!("{base}/type"), &format!("{kind}\n"));
        write(dir, &format!("{base}/size"), &format!("{size}\n"));
        write(
            dir,
            &format!("{base}/shared_cpu_list"),
            &format!("{shared}\n"),
        );
    }

    #[test]
    fn sizes_are_read_as_the_kernel_writes_them() {
        assert_eq!(parse_size_kb("32768K"), Some(32768));
        assert_eq!(parse_size_kb("32M"), Some(32768));
        assert_eq!(parse_size_kb("512"), Some(512));
        assert_eq!(parse_size_kb("K"), None);
        assert_eq!(parse_size_kb("-1K"), None);
        assert_eq!(parse_size_kb(""), None);
    }

    #[test]
    fn instances_are_merged_level_one_skipped_and_offline_cpus_left_out() {
        let dir = tempfile::tempdir().unwrap();
        for cpu in 0..4u32 {
            index(dir.path(), cpu, 0, 1, "Data", "32K", &cpu.to_string());
            let core = if cpu < 2 { "0-1" } else { "2-3" };
            index(dir.path(), cpu, 2, 2, "Unified", "1024K", core);
            // CPU 4 is offline: the L3 lists it, the report does not.
            index(dir.path(), cpu, 3, 3, "Unified", "32768K", "0-4");
        }
        let mut w = Warnings::new();
        let online = CpuSet::parse_list("0-3").unwrap();
        let c = probe_caches(
            &HostRoot::under(dir.path()),
            &online,
            &BTreeMap::new(),
            IndexNumbering::MayDiffer,
            &mut w,
        );
        assert!(w.is_empty(), "{w:?}");
        let shown: Vec<(u32, &str, Option<u64>, String)> = c
            .iter()
            .map(|c| (c.level, c.kind.as_str(), c.size_kb, c.cpus.to_string()))
            .collect();
        assert_eq!(
            shown,
            [
                (2, "Unified", Some(1024), "0-1".to_string()),
                (2, "Unified", Some(1024), "2-3".to_string()),
                (3, "Unified", Some(32768), "0-3".to_string()),
            ]
        );
        let json = serde_json::to_value(&c[2]).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"level": 3, "type": "Unified", "size_kb": 32768, "cpus": "0-3"})
        );
    }

    /// Cores {0,2} and {1,3}; an L3 over all four. CPU 2 has only broken files: it is never
    /// read, since CPU 0 of its core has every cache it has.
    fn two_cores_with_a_broken_thread(dir: &Path) {
        for cpu in [0u32, 1, 3] {
            index(dir, cpu, 0, 1, "Data", "48K", "");
            // CPU 1's and 3's L2s do not hold each other, though the topology says they share
            // a core: both are read (an L2 each).
            let l2 = ["0,2", "1", "", "3"][cpu as usize];
            index(dir, cpu, 2, 2, "Unified", "2048K", l2);
            index(dir, cpu, 3, 3, "Unified", "32768K", "0-3");
        }
        write(dir, "sys/devices/system/cpu/cpu2/cache/index2/level", "x\n");
    }

    /// The caches as `L<level> <cpus>`, and the files opened to read them.
    fn caches_and_opens(
        dir: &Path,
        online: &str,
        siblings: &[(u32, &str)],
        numbering: IndexNumbering,
    ) -> (Vec<String>, u64) {
        let siblings: BTreeMap<u32, CpuSet> = siblings
            .iter()
            .map(|&(c, s)| (c, CpuSet::parse_list(s).unwrap()))
            .collect();
        let online = CpuSet::parse_list(online).unwrap();
        let mut w = Warnings::new();
        let before = crate::confine::opens_attempted();
        let c = probe_caches(&HostRoot::under(dir), &online, &siblings, numbering, &mut w);
        let opens = crate::confine::opens_attempted() - before;
        assert!(w.is_empty(), "{w:?}");
        let shown = c.iter().map(|c| format!("L{} {}", c.level, c.cpus));
        (shown.collect(), opens)
    }

    #[test]
    fn a_threads_caches_are_its_siblings_and_a_known_index_is_not_read_again() {
        let dir = tempfile::tempdir().unwrap();
        two_cores_with_a_broken_thread(dir.path());
        let cores = [(0, "0,2"), (2, "0,2"), (1, "1,3"), (3, "1,3")];
        let (shown, opens) =
            caches_and_opens(dir.path(), "0-3", &cores, IndexNumbering::SameOnEveryCpu);
        assert_eq!(shown, ["L2 0,2", "L2 1", "L2 3", "L3 0-3"]);
        // CPU 0: its listing, index0's level, then level, type, shared_cpu_list, id (missing)
        // and size of its L2 and L3; CPUs 1 and 3: the same but for the L3, known from CPU 0.
        assert_eq!(opens, (1 + 1 + 5 + 5) + (1 + 1 + 5) + (1 + 1 + 5));
        // Where the numbering may differ, the known L3's level is read first (it is unified:
        // its type need not be).
        let (shown, opens) = caches_and_opens(dir.path(), "0-3", &cores, IndexNumbering::MayDiffer);
        assert_eq!(shown, ["L2 0,2", "L2 1", "L2 3", "L3 0-3"]);
        assert_eq!(opens, (1 + 1 + 5 + 5) + (1 + 1 + 5 + 1) + (1 + 1 + 5 + 1));
    }

    #[test]
    fn cpus_of_two_kinds_numbering_their_caches_differently_each_keep_their_own() {
        // A device-tree host since Linux 6.3: CPUs 0-1 have L1s and an L3 at index2; CPUs 2-3
        // have L1s, their own L2 at index2 and the L3 at index3. CPU 0's L3 lists CPUs 2-3
        // (the kernel matches caches by level and type, not by index): their index2 is
        // nevertheless their L2.
        let dir = tempfile::tempdir().unwrap();
        for cpu in 0..4u32 {
            index(dir.path(), cpu, 0, 1, "Data", "64K", &cpu.to_string());
            index(
                dir.path(),
                cpu,
                1,
                1,
                "Instruction",
                "64K",
                &cpu.to_string(),
            );
            if cpu < 2 {
                index(dir.path(), cpu, 2, 3, "Unified", "8192K", "0-3");
            } else {
                index(dir.path(), cpu, 2, 2, "Unified", "512K", &cpu.to_string());
                index(dir.path(), cpu, 3, 3, "Unified", "8192K", "0-3");
            }
        }
        let (shown, _) = caches_and_opens(dir.path(), "0-3", &[], IndexNumbering::MayDiffer);
        assert_eq!(shown, ["L2 2", "L2 3", "L3 0-3"]);
        // A split L2 named by another CPU's list is checked by its type too.
        index(dir.path(), 0, 2, 2, "Data", "512K", "0-1");
        index(dir.path(), 0, 3, 2, "Instruction", "512K", "0");
        index(dir.path(), 1, 2, 2, "Instruction", "512K", "1");
        index(dir.path(), 1, 3, 2, "Data", "512K", "0-1");
        let (shown, opens) = caches_and_opens(dir.path(), "0-1", &[], IndexNumbering::MayDiffer);
        assert_eq!(shown, ["L2 0-1", "L2 0", "L2 1"]);
        // Each CPU: its listing, two L1 levels, and two L2s of 5 files each (level, type,
        // shared_cpu_list, id, size), but for the size of CPU 1's data L2, the instance CPU 0
        // found. CPU 1's index2, named by CPU 0's, has its type read once, to tell it is not
        // that cache, and not again to read it.
        assert_eq!(opens, 2 * (1 + 2 + 5 + 5) - 1);
    }

    #[test]
    fn missing_and_odd_cache_files_are_warnings() {
        let dir = tempfile::tempdir().unwrap();
        index(dir.path(), 0, 2, 2, "Unified", "lots", "0");
        index(dir.path(), 0, 3, 3, "Sideways", "8192K", "1");
        write(
            dir.path(),
            "sys/devices/system/cpu/cpu0/cache/index4/level",
            "x\n",
        );
        write(
            dir.path(),
            "sys/devices/system/cpu/cpu0/cache/index5/level",
            "2\n",
        );
        let mut w = Warnings::new();
        let online = CpuSet::parse_list("0-2").unwrap();
        let c = probe_caches(
            &HostRoot::under(dir.path()),
            &online,
            &BTreeMap::new(),
            IndexNumbering::MayDiffer,
            &mut w,
        );
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].size_kb, None);
        // The L3's list lacks CPU 0 itself: it is added, as for thread siblings.
        assert_eq!(c[1].kind, "Unified");
        assert_eq!(c[1].cpus.to_string(), "0-1");
        let messages: Vec<&str> = w.as_slice().iter().map(|w| w.message.as_str()).collect();
        let expect = [
            "value \"lots\" is not a size like 32768K",
            "is not Unified, Data or Instruction",
            "do not include CPU 0 itself",
            "value \"x\" is not a cache level",
            "neither shared_cpu_list nor shared_cpu_map",
            "CPUs 1-2 have no cache directory",
        ];
        for e in expect {
            assert!(messages.iter().any(|m| m.contains(e)), "{e}: {messages:?}");
        }
    }

    #[test]
    fn an_index_that_is_no_directory_is_warned_about_as_such() {
        // `index2/level` is read without opening `index2`; when that fails, `index2` itself is
        // what is wrong, and the warning says so (not "level missing").
        let dir = tempfile::tempdir().unwrap();
        index(dir.path(), 0, 3, 3, "Unified", "8192K", "0");
        write(
            dir.path(),
            "sys/devices/system/cpu/cpu0/cache/index2",
            "x\n",
        );
        let mut w = Warnings::new();
        let online = CpuSet::parse_list("0").unwrap();
        let c = probe_caches(
            &HostRoot::under(dir.path()),
            &online,
            &BTreeMap::new(),
            IndexNumbering::MayDiffer,
            &mut w,
        );
        assert_eq!(c.len(), 1);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w.as_slice()[0].path.ends_with("cache/index2"), "{w:?}");
        assert_eq!(
            w.as_slice()[0].message,
            "expected a directory, found a file"
        );
    }

    #[test]
    fn a_host_without_caches_says_so_once() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("sys/devices/system/cpu/cpu0")).unwrap();
        let mut w = Warnings::new();
        let online = CpuSet::parse_list("0-7").unwrap();
        assert!(probe_caches(
            &HostRoot::under(dir.path()),
            &online,
            &BTreeMap::new(),
            IndexNumbering::MayDiffer,
            &mut w
        )
        .is_empty());
        assert_eq!(w.len(), 1);
        assert!(w.as_slice()[0]
            .message
            .contains("no online CPU has a cache"));
    }
}
