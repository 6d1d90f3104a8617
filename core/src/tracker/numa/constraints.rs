//! A guest's NUMA constraints and CPU demand from its flavor's extra specs and its image's
//! properties, with Nova's rules (`numa_get_constraints` and the scheduler's
//! `_translate_pinning_policies`): which extra specs trigger a NUMA topology, how the image may
//! narrow or must not override the flavor, how guest CPUs and memory spread over guest cells.
//!
//! In: the flavor's vCPUs, memory and extra specs, and the image properties ([`ImageProps`],
//! read from an ImageMetaProps primitive or a plain glance dict). Out: [`Constraints`]: the
//! [`GuestTopology`] (none when nothing asks for one) and the [`CpuDemand`] Placement would be
//! asked for; or a [`ClaimError::Invalid`] naming the extra spec or image property, with Nova's
//! meaning.

use serde::{Deserialize, Serialize};

pub use super::flavor_view::FlavorView;
use super::flavor_view::{invalid, truthy};
pub use super::image::ImageProps;
use super::{CpuPolicy, EmulatorPolicy, GuestCell, GuestTopology, ThreadPolicy};
use crate::echo::quoted;
use crate::probes::CpuSet;
use crate::tracker::error::ClaimError;

/// What the guest asks of Placement in CPUs: floating (VCPU) and pinned (PCPU, with the
/// emulator threads' CPU under `isolate`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuDemand {
    /// VCPU.
    pub shared: i64,
    /// PCPU.
    pub dedicated: i64,
}

/// The constraints of one flavor and image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Constraints {
    /// The guest topology, when the flavor or image asks for one.
    pub numa: Option<GuestTopology>,
    /// CPUs to claim per class.
    pub cpus: CpuDemand,
}

/// `resources[N]:VCPU` and `resources[N]:PCPU` summed over the request groups, as Nova's
/// `_get_vcpu_pcpu_resources` reads them (a value that is not an integer is skipped there, and
/// refused by Placement later; here it is refused at once).
fn explicit_cpu_resources(f: &FlavorView<'_>) -> Result<(i64, i64), ClaimError> {
    let mut vcpu = 0;
    let mut pcpu = 0;
    for (key, value) in f.extra_specs {
        let Some(rest) = key.strip_prefix("resources") else {
            continue;
        };
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && rest.starts_with('0') {
            continue;
        }
        let class = &rest[digits..];
        let slot = if class.starts_with(":VCPU") {
            &mut vcpu
        } else if class.starts_with(":PCPU") {
            &mut pcpu
        } else {
            continue;
        };
        let n: i64 = value
            .trim()
            .parse()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| {
                invalid(
                    f.field(key),
                    format!("{} is not a number of CPUs", quoted(value)),
                )
            })?;
        *slot += n;
    }
    Ok((vcpu, pcpu))
}

/// `rtrack:cpu_core_type`: the core types a pinned guest's CPUs should use, comma-separated
/// hwloc or kernel names (rtrack's own extra spec; Nova lets unknown namespaces through).
fn core_types(f: &FlavorView<'_>) -> Result<Option<Vec<String>>, ClaimError> {
    const KEY: &str = "rtrack:cpu_core_type";
    let Some(v) = f.spec(KEY) else {
        return Ok(None);
    };
    let names: Vec<String> = v
        .split(',')
        .filter(|n| !n.trim().is_empty())
        .map(crate::config::topology::core_type_name)
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(f.field(KEY), e))?;
    if names.is_empty() {
        return Err(invalid(f.field(KEY), "names no core type"));
    }
    Ok(Some(names))
}

/// `trait[N]:HW_CPU_HYPERTHREADING` in the flavor, else `required` when the image requires it.
fn hyperthreading_trait(f: &FlavorView<'_>, image: &ImageProps) -> Option<String> {
    for (key, value) in f.extra_specs {
        if let Some(rest) = key.strip_prefix("trait") {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if (digits == 0 || !rest.starts_with('0'))
                && rest[digits..].starts_with(":HW_CPU_HYPERTHREADING")
            {
                return Some(value.clone());
            }
        }
    }
    image
        .traits_required
        .iter()
        .any(|t| t == "HW_CPU_HYPERTHREADING")
        .then(|| "required".to_string())
}

/// The CPU policy explicit `resources:VCPU`/`resources:PCPU` extra specs imply, checked as
/// Nova's `numa_get_constraints` does (never with a CPU policy, never both, PCPUs matching the
/// flavor's vCPUs and isolated emulator threads).
fn policy_of_cpu_resources(
    f: &FlavorView<'_>,
    mut policy: Option<CpuPolicy>,
    emulator: Option<EmulatorPolicy>,
    req_vcpu: i64,
    req_pcpu: i64,
) -> Result<Option<CpuPolicy>, ClaimError> {
    if policy.is_some() && (req_vcpu > 0 || req_pcpu > 0) {
        return Err(invalid(
            f.field(if req_pcpu > 0 { "resources:PCPU" } else { "resources:VCPU" }),
            "It is not possible to use the 'resources:VCPU' or 'resources:PCPU' extra specs in combination with the 'hw:cpu_policy' extra spec or 'hw_cpu_policy' image metadata property; use one or the other",
        ));
    }
    if req_vcpu > 0 && req_pcpu > 0 {
        return Err(invalid(
            f.field("resources:PCPU"),
            "It is not possible to specify both 'resources:VCPU' and 'resources:PCPU' extra specs; use one or the other",
        ));
    }
    if req_pcpu > 0 {
        let isolated = emulator == Some(EmulatorPolicy::Isolate);
        if isolated && f.vcpus + 1 != req_pcpu {
            return Err(invalid(
                f.field("resources:PCPU"),
                "You have requested 'hw:emulator_threads_policy=isolate' but have not requested sufficient PCPUs to handle this policy; you must allocate exactly flavor.vcpus + 1 PCPUs.",
            ));
        }
        if !isolated && f.vcpus != req_pcpu {
            return Err(invalid(
                f.field("resources:PCPU"),
                "There is a mismatch between the number of PCPUs requested via 'resourcesNN:PCPU' and the flavor); you must allocate exactly flavor.vcpus PCPUs",
            ));
        }
        policy = Some(CpuPolicy::Dedicated);
    }
    if req_vcpu > 0 {
        policy = Some(CpuPolicy::Shared);
    }
    Ok(policy)
}

/// Nova's checks of the thread, emulator, dedicated-mask and realtime options against the CPU
/// policy; the dedicated CPUs of a `mixed` guest (its dedicated or realtime mask).
fn check_cpu_policy(
    f: &FlavorView<'_>,
    policy: Option<CpuPolicy>,
    threads: Option<ThreadPolicy>,
    emulator: Option<EmulatorPolicy>,
    dedicated: Option<CpuSet>,
    realtime: Option<CpuSet>,
) -> Result<Option<CpuSet>, ClaimError> {
    match policy {
        None | Some(CpuPolicy::Shared) => {
            if threads.is_some() {
                return Err(invalid(
                    f.field("hw:cpu_thread_policy"),
                    "Cannot set cpu thread pinning policy in a non dedicated cpu pinning policy",
                ));
            }
            if emulator == Some(EmulatorPolicy::Isolate) {
                return Err(invalid(f.field("hw:emulator_threads_policy"), "An isolated CPU emulator threads option requires a dedicated CPU policy option."));
            }
            if dedicated.is_some() {
                return Err(invalid(
                    f.field("hw:cpu_dedicated_mask"),
                    "Cannot specify 'hw:cpu_dedicated_mask' without the 'mixed' policy.",
                ));
            }
            if realtime.is_some() {
                return Err(invalid(
                    f.field("hw:cpu_realtime"),
                    "Cannot set realtime policy in a non dedicated cpu pinning policy",
                ));
            }
        }
        Some(CpuPolicy::Dedicated) => {
            if dedicated.is_some() {
                return Err(invalid(
                    f.field("hw:cpu_dedicated_mask"),
                    "Cannot specify 'hw:cpu_dedicated_mask' without the 'mixed' policy.",
                ));
            }
        }
        Some(CpuPolicy::Mixed) => {
            if realtime.is_some() == dedicated.is_some() {
                return Err(invalid(
                    f.field("hw:cpu_dedicated_mask"),
                    "Dedicated CPU set can be specified from either 'hw:cpu_dedicated_mask' or 'hw:cpu_realtime_mask' when using 'mixed' CPU policy. 'hw:cpu_dedicated_mask' and 'hw:cpu_realtime_mask' can not be specified at the same time, or be specified with none of them.",
                ));
            }
            return Ok(dedicated.or(realtime));
        }
    }
    Ok(dedicated)
}

/// Nova's `numa_get_constraints` plus the CPU classes the scheduler would ask Placement for.
/// `image_path` is the image's JSON path in the request (its properties are under it).
pub fn numa_constraints(
    f: &FlavorView<'_>,
    image: &ImageProps,
    image_path: &str,
) -> Result<Constraints, ClaimError> {
    let mut policy = cpu_policy(f, image, image_path)?;
    let mut threads = thread_policy(f, image, image_path)?;
    let emulator = emulator_policy(f)?;
    let realtime = realtime_cpus(f, image, image_path, emulator)?;
    let dedicated = dedicated_mask(f)?;

    let (req_vcpu, req_pcpu) = explicit_cpu_resources(f)?;
    policy = policy_of_cpu_resources(f, policy, emulator, req_vcpu, req_pcpu)?;

    let ht = hyperthreading_trait(f, image);
    if threads.is_some() && ht.is_some() {
        return Err(invalid(
            f.field("hw:cpu_thread_policy"),
            "It is not possible to use the 'trait:HW_CPU_HYPERTHREADING' extra spec in combination with the 'hw:cpu_thread_policy' extra spec or 'hw_cpu_thread_policy' image metadata property; use one or the other",
        ));
    }
    match ht.as_deref() {
        Some("forbidden") => threads = Some(ThreadPolicy::Isolate),
        Some("required") => threads = Some(ThreadPolicy::Require),
        _ => {}
    }

    let dedicated = check_cpu_policy(f, policy, threads, emulator, dedicated, realtime)?;

    let nodes = node_count(f, image, image_path)?;
    let pages = pagesize(f, image, image_path)?;
    let core_types = core_types(f)?;
    // Nova's `get_vpmems`: labels trimmed, empty ones dropped; vPMEM gives the guest a NUMA
    // topology (one cell by default), as pinning and page sizes do.
    let vpmems = f
        .spec("hw:pmem")
        .is_some_and(|v| v.split(',').any(|l| !l.trim().is_empty()));
    locked_memory(f, image, image_path)?;

    let all = all_cpus(f.vcpus);
    let pcpus = match policy {
        Some(CpuPolicy::Dedicated) => all.clone(),
        _ => dedicated.unwrap_or_default(),
    };
    let vcpus = all.difference(&pcpus);

    // What Placement is asked for: explicit resources win; pinning policies move CPUs to PCPU
    // (plus one for isolated emulator threads); otherwise every guest CPU is a VCPU.
    let emulator_extra =
        i64::from(emulator == Some(EmulatorPolicy::Isolate) && policy.is_some_and(CpuPolicy::pins));
    let cpus = if req_pcpu > 0 {
        CpuDemand {
            shared: 0,
            dedicated: req_pcpu,
        }
    } else if req_vcpu > 0 {
        CpuDemand {
            shared: req_vcpu,
            dedicated: 0,
        }
    } else if policy.is_some_and(CpuPolicy::pins) {
        CpuDemand {
            shared: vcpus.len() as i64,
            dedicated: pcpus.len() as i64 + emulator_extra,
        }
    } else {
        CpuDemand {
            shared: f.vcpus,
            dedicated: 0,
        }
    };

    if nodes.is_none() && pages.is_none() && !vpmems && !policy.is_some_and(CpuPolicy::pins) {
        return Ok(Constraints { numa: None, cpus });
    }
    let nodes = nodes.unwrap_or(1);
    let (cpu_list, mem_list) = cell_lists(f, image, image_path)?;
    let cells = match (cpu_list, mem_list) {
        (None, None) => auto_cells(f, nodes, &vcpus, &pcpus)?,
        (Some(c), Some(m)) => {
            if c.len() as i64 != nodes || m.len() as i64 != nodes {
                return Err(invalid(
                    f.field("hw:numa_cpus.0"),
                    "CPU and memory allocation must be provided for all NUMA nodes",
                ));
            }
            manual_cells(f, &vcpus, &pcpus, c, m)?
        }
        _ => {
            return Err(invalid(
                f.field("hw:numa_cpus.0"),
                "CPU and memory allocation must be provided for all NUMA nodes",
            ))
        }
    };
    Ok(Constraints {
        numa: Some(GuestTopology {
            cells,
            cpu_policy: policy,
            thread_policy: threads,
            emulator_threads: emulator,
            pagesize: pages,
            networks: Default::default(),
            core_types: core_types.filter(|_| policy.is_some_and(CpuPolicy::pins)),
        }),
        cpus,
    })
}

/// Nova's `get_locked_memory_constraint` (without memory encryption): locked memory needs a
/// page size, and flavor and image must agree.
fn locked_memory(
    f: &FlavorView<'_>,
    image: &ImageProps,
    image_path: &str,
) -> Result<(), ClaimError> {
    let flavor = f.spec("hw:locked_memory").map(truthy);
    if let (Some(fl), Some(im)) = (flavor, image.locked_memory) {
        if fl != im {
            return Err(invalid(
                f.field("hw:locked_memory"),
                format!("locked_memory value in image ({}) and flavor ({}) conflict. A consistent value is expected if both specified.", py_bool(im), py_bool(fl)),
            ));
        }
    }
    let locked = flavor.or(image.locked_memory).unwrap_or(false);
    let has_pagesize = f.spec("hw:mem_page_size").is_some_and(|v| !v.is_empty())
        || image
            .mem_page_size
            .as_deref()
            .is_some_and(|v| !v.is_empty());
    if locked && !has_pagesize {
        let field = if flavor.is_some() {
            f.field("hw:locked_memory")
        } else {
            format!("{image_path}.properties.hw_locked_memory")
        };
        return Err(invalid(
            field,
            "locked_memory value in image or flavor is forbidden when mem_page_size is not set.",
        ));
    }
    Ok(())
}

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// Nova's `_get_numa_topology_auto`: CPUs and memory spread evenly.
fn auto_cells(
    f: &FlavorView<'_>,
    nodes: i64,
    vcpus: &CpuSet,
    pcpus: &CpuSet,
) -> Result<Vec<GuestCell>, ClaimError> {
    if f.vcpus % nodes != 0 || f.memory_mb % nodes != 0 {
        return Err(invalid(
            f.field("hw:numa_nodes"),
            "Instance CPUs and/or memory cannot be evenly distributed across instance NUMA nodes. Explicit assignment of CPUs and memory to nodes is required",
        ));
    }
    let per = f.vcpus / nodes;
    Ok((0..nodes)
        .map(|n| {
            let cpus = CpuSet::from_ids((n * per) as u32..((n + 1) * per) as u32);
            GuestCell {
                id: n as u32,
                cpuset: cpus.intersection(vcpus),
                pcpuset: cpus.intersection(pcpus),
                memory_mb: f.memory_mb / nodes,
            }
        })
        .collect())
}

/// Nova's `_get_numa_topology_manual`: the cells as the flavor or image lists them.
fn manual_cells(
    f: &FlavorView<'_>,
    vcpus: &CpuSet,
    pcpus: &CpuSet,
    cpu_list: Vec<CpuSet>,
    mem_list: Vec<i64>,
) -> Result<Vec<GuestCell>, ClaimError> {
    let mut avail = all_cpus(f.vcpus);
    let mut cells = Vec::with_capacity(cpu_list.len());
    let mut total = 0i64;
    for (node, (cpus, mem)) in cpu_list.into_iter().zip(mem_list).enumerate() {
        let field = f.field(&format!("hw:numa_cpus.{node}"));
        for cpu in cpus.iter() {
            if i64::from(cpu) > f.vcpus - 1 {
                return Err(invalid(
                    field,
                    format!("CPU number {cpu} is larger than max {}", f.vcpus - 1),
                ));
            }
            if !avail.remove(cpu) {
                return Err(invalid(
                    field,
                    format!("CPU number {cpu} is assigned to two nodes"),
                ));
            }
        }
        total = total.saturating_add(mem);
        cells.push(GuestCell {
            id: node as u32,
            cpuset: cpus.intersection(vcpus),
            pcpuset: cpus.intersection(pcpus),
            memory_mb: mem,
        });
    }
    if !avail.is_empty() {
        // Nova lists them one by one; a list as long as a flavor's vCPUs is cut.
        let ids: Vec<String> = avail.iter().take(32).map(|c| c.to_string()).collect();
        let more = if avail.len() > 32 {
            format!(", … ({} in all)", avail.len())
        } else {
            String::new()
        };
        return Err(invalid(
            f.field("hw:numa_cpus.0"),
            format!(
                "CPU number {{{}{more}}} is not assigned to any node",
                ids.join(", ")
            ),
        ));
    }
    if total != f.memory_mb {
        return Err(invalid(
            f.field("hw:numa_mem.0"),
            format!(
                "{total} MB of memory assigned, but expected {} MB",
                f.memory_mb
            ),
        ));
    }
    Ok(cells)
}

mod policies;

use policies::{
    all_cpus, cell_lists, cpu_policy, dedicated_mask, emulator_policy, node_count, pagesize,
    realtime_cpus, thread_policy,
};

#[cfg(test)]
mod tests;
