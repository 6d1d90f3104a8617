//! One core's `topology` directory, read for the CPU probe ([`crate::cpu`]): its ids and
//! the CPUs sharing it. Package and die ids are read once per package and die with the list of
//! their CPUs (a list is checked by its last CPU's id first); `die_id` and `cluster_id`
//! missing on the first two CPUs are not looked for again (the kernel builds them for every
//! CPU or for none).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::cpulist::CpuSet;
use crate::read::{parse_int, SysDir, Warnings};

/// What a core's `topology` directory says.
pub(crate) struct Core {
    pub(crate) package: Option<i64>,
    pub(crate) die: Option<i64>,
    pub(crate) cluster: Option<i64>,
    pub(crate) core: Option<i64>,
    pub(crate) thread_siblings: CpuSet,
}

/// A CPU's `topology` directory, its files opened relative to `dir` with `prefix`: the
/// `cpu` directory and `cpu<N>/topology/`, or the `topology` directory itself and nothing.
struct Topology<'a> {
    dir: &'a SysDir,
    prefix: String,
    path: PathBuf,
    /// The `cpu` directory, through which other CPUs' files are read (when it could be opened).
    cpus: Option<&'a SysDir>,
}

impl Topology<'_> {
    fn read_optional(&self, name: &str, w: &mut Warnings) -> Option<String> {
        self.dir.read_optional(&format!("{}{name}", self.prefix), w)
    }

    /// Another CPU's `topology/<name>`; `None` when it cannot be read.
    fn read_other(&self, cpu: u32, name: &str) -> Option<String> {
        let mut ignored = Warnings::new();
        self.cpus?
            .read_optional(&format!("cpu{cpu}/topology/{name}"), &mut ignored)
    }

    fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

/// Reads CPU `id`'s topology; `None`, with a warning, when it has no `topology` directory.
/// Through `cpus` (the open `cpu` directory) one open per file; the `topology` directory is
/// opened only when none of the CPU's own files could be read, to tell a missing (or odd)
/// directory, warned about as before, from missing files. The package and die ids come from
/// `shared` when another CPU's list named this one.
pub(crate) fn read_core(
    cpus: Option<&SysDir>,
    cpu_dir: &Path,
    id: u32,
    shared: &mut SharedIds,
    w: &mut Warnings,
) -> Option<Core> {
    let path = cpu_dir.join(format!("cpu{id}/topology"));
    let own;
    let topo = match cpus {
        Some(dir) => Topology {
            dir,
            prefix: format!("cpu{id}/topology/"),
            path: path.clone(),
            cpus,
        },
        None => {
            own = open_topology(&path, w)?;
            Topology {
                dir: &own,
                prefix: String::new(),
                path: path.clone(),
                cpus: None,
            }
        }
    };
    let mut tw = Warnings::new();
    let core = read_int(&topo, "core_id", &mut tw);
    let thread_siblings = read_set(&topo, id, SIBLINGS, &mut tw);
    if cpus.is_some() && core.is_none() && thread_siblings.is_none() {
        open_topology(&path, w)?;
    }
    let package = shared.package.id_of(&topo, id, &mut tw);
    let die = shared.die.id_of(&topo, id, &mut tw);
    let cluster = shared.cluster.id_of(&topo, id, &mut tw);
    w.extend(tw);
    Some(Core {
        package,
        die,
        cluster,
        core,
        thread_siblings: thread_siblings.unwrap_or_else(|| CpuSet::from_ids([id])),
    })
}

/// An integer id in a `topology` directory, with a warning when it is not one.
fn read_int(topo: &Topology<'_>, name: &str, w: &mut Warnings) -> Option<i64> {
    let raw = topo.read_optional(name, w)?;
    parse_int(&raw, &topo.join(name), "an integer id", w)
}

/// Opens a `topology` directory; `None`, with a warning, when the CPU has none.
fn open_topology(path: &Path, w: &mut Warnings) -> Option<SysDir> {
    let dir = SysDir::open_unlisted(path, w);
    if dir.is_none() {
        w.push(path, "online CPU has no topology directory");
    }
    dir
}

type SetParser = fn(&str) -> Result<CpuSet, String>;

/// The CPUs sharing a core: `core_cpus_list` (kernels since 5.7), else `thread_siblings_list`,
/// else the mask forms of either (some captures carry only masks).
const SIBLINGS: &[(&str, SetParser)] = &[
    ("core_cpus_list", CpuSet::parse_list),
    ("thread_siblings_list", CpuSet::parse_list),
    ("core_cpus", CpuSet::parse_map),
    ("thread_siblings", CpuSet::parse_map),
];

/// The CPUs of a package: `package_cpus_list` (since 5.7), else `core_siblings_list`, else
/// the mask forms.
const PACKAGE_CPUS: &[(&str, SetParser)] = &[
    ("package_cpus_list", CpuSet::parse_list),
    ("core_siblings_list", CpuSet::parse_list),
    ("package_cpus", CpuSet::parse_map),
    ("core_siblings", CpuSet::parse_map),
];

/// The CPUs of a die (since 5.7).
const DIE_CPUS: &[(&str, SetParser)] = &[
    ("die_cpus_list", CpuSet::parse_list),
    ("die_cpus", CpuSet::parse_map),
];

/// The first readable CPU set of `sources` in a `topology` directory, always holding `id`
/// (added with a warning when the file leaves it out); `None` when none is readable.
fn read_set(
    topo: &Topology<'_>,
    id: u32,
    sources: &[(&str, SetParser)],
    w: &mut Warnings,
) -> Option<CpuSet> {
    for &(name, parse) in sources {
        let path = topo.join(name);
        let Some(raw) = topo.read_optional(name, w) else {
            continue;
        };
        match parse(&raw) {
            Ok(mut s) => {
                if !s.contains(id) {
                    w.push(&path, format!("CPUs {s} do not include CPU {id} itself"));
                    s.insert(id);
                }
                return Some(s);
            }
            Err(e) => w.push(&path, format!("not a CPU set: {e}")),
        }
    }
    None
}

/// The package, die and cluster ids of the CPUs, each read once per group where the kernel
/// lists the group's CPUs: a 2-socket host reads two `physical_package_id`s, not one per core.
pub(crate) struct SharedIds {
    package: GroupId,
    die: GroupId,
    cluster: GroupId,
}

impl SharedIds {
    pub(crate) fn new(online: &CpuSet) -> SharedIds {
        SharedIds {
            package: GroupId::new("physical_package_id", PACKAGE_CPUS, false, online),
            die: GroupId::new("die_id", DIE_CPUS, true, online),
            // Read per core: a cluster is a core or a few (x86 L2 clusters, ARM clusters), so
            // its list would cost more reads than it saves.
            cluster: GroupId::new("cluster_id", &[], true, online),
        }
    }
}

/// One id the CPUs of a group share (`physical_package_id`, `die_id`, `cluster_id`).
struct GroupId {
    file: &'static str,
    lists: &'static [(&'static str, SetParser)],
    /// A file the kernel either gives every CPU or none (die and cluster attributes are built
    /// in or not, for all CPUs alike): missing on the first two CPUs read, it is not looked for
    /// on the others.
    all_or_none: bool,
    /// CPUs whose id file was read (or looked for).
    reads: u32,
    /// Of the first CPUs read, those in a row whose id file is missing (not unreadable).
    missing_from_start: u32,
    /// The id file (when `all_or_none`) is missing on the first two CPUs read.
    no_file: bool,
    /// The id is read per core: every list is missing on the first CPU read (kernels before
    /// 5.7 have no die lists), or a list named a CPU of another id (on POWER the package
    /// lists are the NUMA node's CPUs), or other CPUs' files cannot be read.
    no_list: bool,
    online: CpuSet,
    /// The ids of the online CPUs named by a list read so far.
    known: BTreeMap<u32, i64>,
}

impl GroupId {
    fn new(
        file: &'static str,
        lists: &'static [(&'static str, SetParser)],
        all_or_none: bool,
        online: &CpuSet,
    ) -> GroupId {
        GroupId {
            file,
            lists,
            all_or_none,
            reads: 0,
            missing_from_start: 0,
            no_file: false,
            no_list: lists.is_empty(),
            online: online.clone(),
            known: BTreeMap::new(),
        }
    }

    /// CPU `id`'s id: known from a list read earlier, else read, with the group's list so
    /// that its other CPUs need not read it.
    fn id_of(&mut self, topo: &Topology<'_>, id: u32, w: &mut Warnings) -> Option<i64> {
        if let Some(&known) = self.known.get(&id) {
            return Some(known);
        }
        if self.no_file {
            return None;
        }
        let first = self.reads == 0;
        let mut rw = Warnings::new();
        let raw = topo.read_optional(self.file, &mut rw);
        let missing = raw.is_none() && rw.is_empty();
        w.extend(rw);
        if self.reads == self.missing_from_start && missing {
            self.missing_from_start += 1;
        }
        self.reads += 1;
        // Absent on the first two CPUs: built for none (one CPU's missing file may be a
        // capture's gap, an unreadable one is not absent).
        self.no_file = self.all_or_none && self.missing_from_start >= 2;
        let value = parse_int(&raw?, &topo.join(self.file), "an integer id", w)?;
        if !self.no_list {
            let members = read_set(topo, id, self.lists, w);
            self.no_list = first && members.is_none();
            let members = members.unwrap_or_default().intersection(&self.online);
            if self.list_holds(topo, id, value, &members) {
                for cpu in members.iter() {
                    self.known.entry(cpu).or_insert(value);
                }
            } else {
                self.no_list = true;
            }
        }
        Some(value)
    }

    /// True when the last CPU of `members` but `id` has the id `value` too: a list that names
    /// a CPU of another id (POWER's `package_cpus_list` is its NUMA node's CPUs, a hostile tree)
    /// is not the group's, and the ids are read per core from then on.
    fn list_holds(&self, topo: &Topology<'_>, id: u32, value: i64, members: &CpuSet) -> bool {
        let Some(last) = members.iter().filter(|&c| c != id).last() else {
            return true;
        };
        let other = topo.read_other(last, self.file);
        other.and_then(|raw| raw.parse::<i64>().ok()) == Some(value)
    }
}
