//! The NUMA topologies as Nova's objects: the host's NUMATopology with every cell's usage (the
//! ComputeNode's `numa_topology`), and a guest's InstanceNUMATopology (fitted, as a claim's
//! answer carries it; or as nova-api computed it, to check against the flavor and image).
//!
//! In: a [`HostTopology`] and its [`NumaUsage`]; a [`FittedTopology`]; an InstanceNUMATopology
//! object. Out: the objects (with the fields Nova sets, in the shape its primitives have), or the
//! guest cells an InstanceNUMATopology describes.

use std::collections::BTreeMap;

use super::host::HostTopology;
use super::usage::NumaUsage;
use super::{
    CpuPolicy, EmulatorPolicy, FittedCell, FittedTopology, GuestCell, GuestTopology, PageSize,
    ThreadPolicy,
};
use crate::objects::instance::{InstanceNUMACell, InstanceNUMATopology};
use crate::objects::numa::{NUMACell, NUMAPagesTopology, NUMATopology, NetworkMetadata};
use crate::objects::{Field, NField, Versioned};
use crate::probes::CpuSet;
use crate::tracker::error::ClaimError;

fn ids(s: &CpuSet) -> Vec<i64> {
    s.iter().map(i64::from).collect()
}

/// The host topology with usage, as the ComputeNode's `numa_topology` object.
pub fn host_object(host: &HostTopology, usage: &NumaUsage) -> Versioned<NUMATopology> {
    let cells = host
        .cells
        .iter()
        .map(|cell| {
            let u = usage.cell(cell.id);
            Versioned::new(NUMACell {
                id: Field::Set(i64::from(cell.id)),
                cpuset: Field::Set(ids(&cell.cpuset)),
                pcpuset: Field::Set(ids(&cell.pcpuset)),
                memory: Field::Set(cell.memory_mb),
                cpu_usage: Field::Set(u.cpu_usage),
                memory_usage: Field::Set(u.memory_usage_mb),
                pinned_cpus: Field::Set(ids(&u.pinned)),
                siblings: Field::Set(cell.siblings.iter().map(ids).collect()),
                mempages: Field::Set(
                    cell.pages
                        .iter()
                        .map(|p| {
                            Versioned::new(NUMAPagesTopology {
                                size_kb: Field::Set(p.size_kb),
                                total: Field::Set(p.total),
                                used: Field::Set(u.pages(p.size_kb)),
                                reserved: Field::Set(p.reserved),
                            })
                        })
                        .collect(),
                ),
                network_metadata: Field::Set(Versioned::new(NetworkMetadata {
                    physnets: Field::Set(cell.physnets.iter().cloned().collect()),
                    tunneled: Field::Set(cell.tunneled),
                })),
                socket: match cell.socket {
                    Some(s) => NField::Set(s),
                    None => NField::Null,
                },
            })
        })
        .collect();
    Versioned::new(NUMATopology {
        cells: Field::Set(cells),
    })
}

fn cell_object(c: &FittedCell) -> Versioned<InstanceNUMACell> {
    Versioned::new(InstanceNUMACell {
        id: Field::Set(i64::from(c.host_cell)),
        cpuset: Field::Set(ids(&c.cpuset)),
        pcpuset: Field::Set(ids(&c.pcpuset)),
        cpuset_reserved: match &c.cpuset_reserved {
            Some(r) => NField::Set(ids(r)),
            None => NField::Null,
        },
        memory: Field::Set(c.memory_mb),
        pagesize: match c.pagesize_kb {
            Some(p) => NField::Set(p),
            None => NField::Null,
        },
        cpu_topology: NField::Unset,
        cpu_pinning_raw: if c.cpu_pinning.is_empty() {
            NField::Null
        } else {
            NField::Set(
                c.cpu_pinning
                    .iter()
                    .map(|(g, h)| (g.to_string(), i64::from(*h)))
                    .collect(),
            )
        },
        cpu_policy: match c.cpu_policy {
            Some(p) => NField::Set(p.as_str().to_string()),
            None => NField::Null,
        },
        cpu_thread_policy: match c.thread_policy {
            Some(p) => NField::Set(p.as_str().to_string()),
            None => NField::Null,
        },
    })
}

/// A fitted guest as Nova's InstanceNUMATopology (what `numa_fit_instance_to_host` returns):
/// each cell's `id` is its host cell, `cpu_pinning_raw` maps guest to host CPUs.
pub fn instance_object(t: &FittedTopology) -> Versioned<InstanceNUMATopology> {
    Versioned::new(InstanceNUMATopology {
        id: Field::Unset,
        instance_uuid: Field::Unset,
        cells: Field::Set(t.cells.iter().map(cell_object).collect()),
        emulator_threads_policy: match t.emulator_threads {
            Some(p) => NField::Set(p.as_str().to_string()),
            None => NField::Null,
        },
    })
}

fn invalid(field: String, message: impl Into<String>) -> ClaimError {
    ClaimError::Invalid {
        field,
        message: message.into(),
    }
}

fn cpu_set(v: &[i64], field: &str) -> Result<CpuSet, ClaimError> {
    v.iter()
        .map(|c| {
            u32::try_from(*c)
                .ok()
                .filter(|c| *c <= crate::nova_syntax::MAX_CPU_ID)
                .ok_or_else(|| invalid(field.to_string(), format!("{c} is not a CPU number")))
        })
        .collect::<Result<Vec<u32>, _>>()
        .map(CpuSet::from_ids)
}

fn policy_of<T>(
    v: &NField<String>,
    field: String,
    parse: fn(&str) -> Option<T>,
    allowed: &str,
) -> Result<Option<T>, ClaimError> {
    match v {
        NField::Set(s) => parse(s).map(Some).ok_or_else(|| {
            invalid(
                field,
                format!("{} is not one of {allowed}", crate::echo::quoted(s)),
            )
        }),
        _ => Ok(None),
    }
}

fn parse_cpu_policy(s: &str) -> Option<CpuPolicy> {
    match s {
        "shared" => Some(CpuPolicy::Shared),
        "dedicated" => Some(CpuPolicy::Dedicated),
        "mixed" => Some(CpuPolicy::Mixed),
        _ => None,
    }
}

fn parse_thread_policy(s: &str) -> Option<ThreadPolicy> {
    match s {
        "prefer" => Some(ThreadPolicy::Prefer),
        "isolate" => Some(ThreadPolicy::Isolate),
        "require" => Some(ThreadPolicy::Require),
        _ => None,
    }
}

fn parse_emulator_policy(s: &str) -> Option<EmulatorPolicy> {
    match s {
        "share" => Some(EmulatorPolicy::Share),
        "isolate" => Some(EmulatorPolicy::Isolate),
        _ => None,
    }
}

/// A fitted InstanceNUMATopology (an instance's `numa_topology`, e.g. the source's during a
/// live migration) read into a [`FittedTopology`]; guest cells are numbered in list order.
pub fn fitted_from_object(
    t: &InstanceNUMATopology,
    path: &str,
) -> Result<FittedTopology, ClaimError> {
    let cells = t.cells.get().map(Vec::as_slice).unwrap_or_default();
    let mut out = Vec::with_capacity(cells.len());
    for (i, c) in cells.iter().enumerate() {
        let c = &c.obj;
        let p = format!("{path}.cells[{i}]");
        let host =
            c.id.get()
                .and_then(|v| u32::try_from(*v).ok())
                .ok_or_else(|| invalid(format!("{p}.id"), "is missing or not a NUMA node id"))?;
        let mut pinning = BTreeMap::new();
        if let NField::Set(raw) = &c.cpu_pinning_raw {
            for (g, h) in raw {
                let g: u32 = g.parse().map_err(|_| {
                    invalid(
                        format!("{p}.cpu_pinning_raw"),
                        format!("{} is not a guest CPU", crate::echo::quoted(g)),
                    )
                })?;
                let h = u32::try_from(*h).map_err(|_| {
                    invalid(
                        format!("{p}.cpu_pinning_raw"),
                        format!("{h} is not a host CPU"),
                    )
                })?;
                pinning.insert(g, h);
            }
        }
        out.push(FittedCell {
            guest_cell: i as u32,
            host_cell: host,
            cpuset: cpu_set(
                c.cpuset.get().map(Vec::as_slice).unwrap_or_default(),
                &format!("{p}.cpuset"),
            )?,
            pcpuset: cpu_set(
                c.pcpuset.get().map(Vec::as_slice).unwrap_or_default(),
                &format!("{p}.pcpuset"),
            )?,
            memory_mb: c.memory.get().copied().unwrap_or(0),
            pagesize_kb: match &c.pagesize {
                NField::Set(p) if *p != 0 => Some(*p),
                _ => None,
            },
            cpu_pinning: pinning,
            cpuset_reserved: match &c.cpuset_reserved {
                NField::Set(r) => Some(cpu_set(r, &format!("{p}.cpuset_reserved"))?),
                _ => None,
            },
            cpu_policy: policy_of(
                &c.cpu_policy,
                format!("{p}.cpu_policy"),
                parse_cpu_policy,
                "shared, dedicated, mixed",
            )?,
            thread_policy: policy_of(
                &c.cpu_thread_policy,
                format!("{p}.cpu_thread_policy"),
                parse_thread_policy,
                "prefer, isolate, require",
            )?,
        });
    }
    Ok(FittedTopology {
        cells: out,
        emulator_threads: policy_of(
            &t.emulator_threads_policy,
            format!("{path}.emulator_threads_policy"),
            parse_emulator_policy,
            "share, isolate",
        )?,
    })
}

/// Checks that the InstanceNUMATopology nova-api put in the RequestSpec says what the flavor and
/// image say (`ours`): the same cells with the same CPUs and memory, page size and policies.
/// `Err` names the first field that differs.
pub fn check_requested(
    theirs: Option<&InstanceNUMATopology>,
    ours: Option<&GuestTopology>,
    path: &str,
) -> Result<(), ClaimError> {
    let (theirs, ours) = match (theirs, ours) {
        (None, None) => return Ok(()),
        (Some(t), None) if t.cells.get().is_none_or(Vec::is_empty) => return Ok(()),
        (Some(_), None) => {
            return Err(invalid(
                path.to_string(),
                "has NUMA cells, but the flavor and image ask for no NUMA topology",
            ))
        }
        (None, Some(_)) => return Ok(()),
        (Some(t), Some(o)) => (t, o),
    };
    let cells = theirs.cells.get().map(Vec::as_slice).unwrap_or_default();
    if cells.len() != ours.cells.len() {
        return Err(invalid(
            format!("{path}.cells"),
            format!(
                "has {} cells; the flavor and image ask for {}",
                cells.len(),
                ours.cells.len()
            ),
        ));
    }
    for (i, (c, o)) in cells.iter().zip(&ours.cells).enumerate() {
        check_requested_cell(&c.obj, o, ours, &format!("{path}.cells[{i}]"))?;
    }
    let their_emu = policy_of(
        &theirs.emulator_threads_policy,
        format!("{path}.emulator_threads_policy"),
        parse_emulator_policy,
        "share, isolate",
    )?;
    if their_emu != ours.emulator_threads {
        return Err(invalid(
            format!("{path}.emulator_threads_policy"),
            format!(
                "is {:?}; the flavor gives {:?}",
                their_emu.map(EmulatorPolicy::as_str),
                ours.emulator_threads.map(EmulatorPolicy::as_str)
            ),
        ));
    }
    Ok(())
}

/// One cell of [`check_requested`]: nova-api's cell `c` (at JSON path `p`) against our cell `o`
/// of `ours`.
fn check_requested_cell(
    c: &InstanceNUMACell,
    o: &GuestCell,
    ours: &GuestTopology,
    p: &str,
) -> Result<(), ClaimError> {
    let differs = |field: &str, theirs: String, ours: String| {
        invalid(
            format!("{p}.{field}"),
            format!("is {theirs}; the flavor and image give {ours}"),
        )
    };
    let their_cpus = cpu_set(
        c.cpuset.get().map(Vec::as_slice).unwrap_or_default(),
        &format!("{p}.cpuset"),
    )?;
    let their_pcpus = cpu_set(
        c.pcpuset.get().map(Vec::as_slice).unwrap_or_default(),
        &format!("{p}.pcpuset"),
    )?;
    if their_cpus != o.cpuset {
        return Err(differs(
            "cpuset",
            format!("\"{their_cpus}\""),
            format!("\"{}\"", o.cpuset),
        ));
    }
    if c.pcpuset.is_set() && their_pcpus != o.pcpuset {
        return Err(differs(
            "pcpuset",
            format!("\"{their_pcpus}\""),
            format!("\"{}\"", o.pcpuset),
        ));
    }
    let mem = c.memory.get().copied().unwrap_or(-1);
    if mem != o.memory_mb {
        return Err(differs("memory", mem.to_string(), o.memory_mb.to_string()));
    }
    let their_page = match &c.pagesize {
        NField::Set(p) if *p != 0 => Some(PageSize::from(*p)),
        _ => None,
    };
    // A topology already fitted somewhere carries the size chosen for small, large or any.
    let fitted_size = matches!(
        (their_page, ours.pagesize),
        (
            Some(PageSize::Kb(_)),
            Some(PageSize::Small | PageSize::Large | PageSize::Any)
        )
    );
    if their_page != ours.pagesize && !fitted_size {
        return Err(differs(
            "pagesize",
            format!("{:?}", their_page.map(i64::from)),
            format!("{:?}", ours.pagesize.map(i64::from)),
        ));
    }
    let their_policy = policy_of(
        &c.cpu_policy,
        format!("{p}.cpu_policy"),
        parse_cpu_policy,
        "shared, dedicated, mixed",
    )?;
    if their_policy != ours.cpu_policy {
        return Err(differs(
            "cpu_policy",
            format!("{:?}", their_policy.map(CpuPolicy::as_str)),
            format!("{:?}", ours.cpu_policy.map(CpuPolicy::as_str)),
        ));
    }
    let their_threads = policy_of(
        &c.cpu_thread_policy,
        format!("{p}.cpu_thread_policy"),
        parse_thread_policy,
        "prefer, isolate, require",
    )?;
    if their_threads != ours.thread_policy {
        return Err(differs(
            "cpu_thread_policy",
            format!("{:?}", their_threads.map(ThreadPolicy::as_str)),
            format!("{:?}", ours.thread_policy.map(ThreadPolicy::as_str)),
        ));
    }
    Ok(())
}
