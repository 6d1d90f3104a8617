//! The single extra specs and image properties of a NUMA request, each checked as Nova's getter
//! of the same name checks it (`get_cpu_policy_constraint`, `get_cpu_thread_policy_constraint`,
//! `get_emulator_thread_policy_constraint`, `get_realtime_cpu_constraint`,
//! `get_dedicated_cpu_constraint`, `_get_numa_pagesize_constraint`,
//! `_get_numa_node_count_constraint`, the per-cell lists).
//!
//! In: the flavor ([`FlavorView`]) and the image's [`ImageProps`]. Out: each value, or a
//! [`ClaimError::Invalid`] naming the extra spec or property with Nova's meaning.

use super::super::flavor_view::{invalid, truthy, FlavorView, NUMA_NODES_MAX};
use super::super::image::ImageProps;
use super::super::{CpuPolicy, EmulatorPolicy, PageSize, ThreadPolicy};
use crate::echo::quoted;
use crate::nova_syntax::{parse_cpu_spec, string_to_bytes};
use crate::probes::CpuSet;
use crate::tracker::error::ClaimError;

/// A CPU mask as Nova reads `hw:cpu_dedicated_mask` and the realtime mask: `^N` alone
/// excludes from all the guest's CPUs.
fn parse_mask(mask: &str, vcpus: i64, field: String) -> Result<CpuSet, ClaimError> {
    let spec = if mask.trim().starts_with('^') {
        format!("0-{},{mask}", vcpus - 1)
    } else {
        mask.to_string()
    };
    parse_cpu_spec(&spec).map_err(|e| invalid(field, e))
}

pub(super) fn all_cpus(vcpus: i64) -> CpuSet {
    CpuSet::from_ids(0..vcpus.max(0) as u32)
}

/// Nova's `get_cpu_policy_constraint`.
pub(super) fn cpu_policy(
    f: &FlavorView<'_>,
    image: &ImageProps,
    image_path: &str,
) -> Result<Option<CpuPolicy>, ClaimError> {
    let parse = |v: &str| match v {
        "dedicated" => Some(CpuPolicy::Dedicated),
        "shared" => Some(CpuPolicy::Shared),
        "mixed" => Some(CpuPolicy::Mixed),
        _ => None,
    };
    let flavor = match f.spec("hw:cpu_policy") {
        None | Some("") => None,
        Some(v) => Some(parse(v).ok_or_else(|| {
            invalid(
                f.field("hw:cpu_policy"),
                format!("CPU policy requested from 'flavor extra specs' is invalid, given: {}, available: dedicated, shared, mixed", quoted(v)),
            )
        })?),
    };
    let img = image.cpu_policy.as_deref().and_then(parse);
    let forbidden = || {
        invalid(
            format!("{image_path}.properties.hw_cpu_policy"),
            "Image property 'hw_cpu_policy' is not permitted to override CPU pinning policy set against the flavor",
        )
    };
    Ok(match flavor {
        Some(CpuPolicy::Dedicated) => Some(CpuPolicy::Dedicated),
        Some(CpuPolicy::Mixed) => {
            if img == Some(CpuPolicy::Dedicated) {
                return Err(forbidden());
            }
            Some(CpuPolicy::Mixed)
        }
        Some(CpuPolicy::Shared) => {
            if matches!(img, Some(CpuPolicy::Mixed | CpuPolicy::Dedicated)) {
                return Err(forbidden());
            }
            Some(CpuPolicy::Shared)
        }
        None => img,
    })
}

/// Nova's `get_cpu_thread_policy_constraint`.
pub(super) fn thread_policy(
    f: &FlavorView<'_>,
    image: &ImageProps,
    image_path: &str,
) -> Result<Option<ThreadPolicy>, ClaimError> {
    let parse = |v: &str| match v {
        "prefer" => Some(ThreadPolicy::Prefer),
        "isolate" => Some(ThreadPolicy::Isolate),
        "require" => Some(ThreadPolicy::Require),
        _ => None,
    };
    let flavor = match f.spec("hw:cpu_thread_policy") {
        None | Some("") => None,
        Some(v) => Some(parse(v).ok_or_else(|| {
            invalid(
                f.field("hw:cpu_thread_policy"),
                format!("CPU thread policy requested from 'flavor extra specs' is invalid, given: {}, available: prefer, isolate, require", quoted(v)),
            )
        })?),
    };
    let img = image.cpu_thread_policy.as_deref().and_then(parse);
    Ok(match flavor {
        None | Some(ThreadPolicy::Prefer) => flavor.or(img),
        Some(p) => {
            if img.is_some_and(|i| i != p) {
                return Err(invalid(
                    format!("{image_path}.properties.hw_cpu_thread_policy"),
                    "Image property 'hw_cpu_thread_policy' is not permitted to override CPU thread pinning policy set against the flavor",
                ));
            }
            Some(p)
        }
    })
}

/// Nova's `get_emulator_thread_policy_constraint` (flavor only).
pub(super) fn emulator_policy(f: &FlavorView<'_>) -> Result<Option<EmulatorPolicy>, ClaimError> {
    match f.spec("hw:emulator_threads_policy") {
        None | Some("") => Ok(None),
        Some("share") => Ok(Some(EmulatorPolicy::Share)),
        Some("isolate") => Ok(Some(EmulatorPolicy::Isolate)),
        Some(v) => Err(invalid(
            f.field("hw:emulator_threads_policy"),
            format!("CPU emulator threads option requested is invalid, given: {}, available: share, isolate", quoted(v)),
        )),
    }
}

/// Nova's `get_realtime_cpu_constraint`: the realtime guest CPUs, when `hw:cpu_realtime` is on.
pub(super) fn realtime_cpus(
    f: &FlavorView<'_>,
    image: &ImageProps,
    image_path: &str,
    emulator: Option<EmulatorPolicy>,
) -> Result<Option<CpuSet>, ClaimError> {
    if !f.spec("hw:cpu_realtime").is_some_and(truthy) {
        return Ok(None);
    }
    // The image's mask wins over the flavor's: it is more specific.
    let (mask, field) = match (&image.cpu_realtime_mask, f.spec("hw:cpu_realtime_mask")) {
        (Some(m), _) if !m.is_empty() => (
            Some(m.as_str()),
            format!("{image_path}.properties.hw_cpu_realtime_mask"),
        ),
        (_, Some(m)) if !m.is_empty() => (Some(m), f.field("hw:cpu_realtime_mask")),
        _ => (None, f.field("hw:cpu_realtime_mask")),
    };
    let all = all_cpus(f.vcpus);
    let rt = match mask {
        Some(m) => parse_mask(m, f.vcpus, field.clone())?,
        None => all.clone(),
    };
    let not_found = "Use of realtime CPUs requires either one or more non-realtime CPU(s) or offloaded emulator threads.";
    if rt.is_empty() || (rt == all && emulator.is_none()) {
        return Err(invalid(field, not_found));
    }
    if !rt.is_subset(&all) {
        return Err(invalid(
            field,
            "Realtime policy vCPU(s) mask is configured with RT vCPUs that are not a subset of the vCPUs in the flavor. See hw:cpu_realtime_mask or hw_cpu_realtime_mask",
        ));
    }
    Ok(Some(rt))
}

/// Nova's `get_dedicated_cpu_constraint`: `hw:cpu_dedicated_mask`.
pub(super) fn dedicated_mask(f: &FlavorView<'_>) -> Result<Option<CpuSet>, ClaimError> {
    let Some(mask) = f.spec("hw:cpu_dedicated_mask").filter(|m| !m.is_empty()) else {
        return Ok(None);
    };
    let field = f.field("hw:cpu_dedicated_mask");
    let pcpus = parse_mask(mask, f.vcpus, field.clone())?;
    let all = all_cpus(f.vcpus);
    if pcpus.is_empty() || all.difference(&pcpus).is_empty() {
        return Err(invalid(field, "Mixed instance must have at least 1 pinned vCPU and 1 unpinned vCPU. See 'hw:cpu_dedicated_mask'."));
    }
    if !pcpus.is_subset(&all) {
        return Err(invalid(field, "Mixed instance dedicated vCPU(s) mask is not a subset of vCPUs in the flavor. See \"hw:cpu_dedicated_mask\""));
    }
    Ok(Some(pcpus))
}

/// Nova's `_get_numa_pagesize_constraint`: none, small, large, any, or a size in KiB.
pub(super) fn pagesize(
    f: &FlavorView<'_>,
    image: &ImageProps,
    image_path: &str,
) -> Result<Option<PageSize>, ClaimError> {
    let parse = |v: &str, field: String| -> Result<Option<PageSize>, ClaimError> {
        Ok(match v {
            "any" => Some(PageSize::Any),
            "large" => Some(PageSize::Large),
            "small" => Some(PageSize::Small),
            d if !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()) => match d.parse::<i64>() {
                Ok(0) => None,
                Ok(kb) => Some(PageSize::Kb(kb)),
                Err(_) => {
                    return Err(invalid(
                        field,
                        format!("Invalid memory page size {}", quoted(v)),
                    ))
                }
            },
            other => {
                let bytes = string_to_bytes(other).ok_or_else(|| {
                    invalid(
                        field.clone(),
                        format!("Invalid memory page size {}", quoted(v)),
                    )
                })?;
                // Nova keeps the page size in an integer field: KiB, truncated.
                let kb = (bytes / 1024.0).trunc();
                match kb {
                    0.0 => None,
                    kb if kb.abs() < 1e15 => Some(PageSize::from(kb as i64)),
                    _ => {
                        return Err(invalid(
                            field,
                            format!("Invalid memory page size {}", quoted(v)),
                        ))
                    }
                }
            }
        })
    };
    let flavor_req = f.spec("hw:mem_page_size").filter(|v| !v.is_empty());
    let image_req = image.mem_page_size.as_deref().filter(|v| !v.is_empty());
    let image_field = format!("{image_path}.properties.hw_mem_page_size");
    let Some(flavor_req) = flavor_req else {
        return match image_req {
            Some(i) => Err(invalid(
                image_field,
                format!("Page size {i} forbidden against '<empty>'"),
            )),
            None => Ok(None),
        };
    };
    let size = parse(flavor_req, f.field("hw:mem_page_size"))?;
    match image_req {
        Some(i) if matches!(size, Some(PageSize::Any | PageSize::Large)) => parse(i, image_field),
        Some(i) => Err(invalid(
            image_field,
            format!("Page size {i} forbidden against '{flavor_req}'"),
        )),
        None => Ok(size),
    }
}

/// Nova's `_get_numa_node_count_constraint`.
pub(super) fn node_count(
    f: &FlavorView<'_>,
    image: &ImageProps,
    image_path: &str,
) -> Result<Option<i64>, ClaimError> {
    let flavor = f.spec("hw:numa_nodes").filter(|v| !v.is_empty());
    // Nova tests truthiness for the conflict (an image's 0 is no value) but then takes the
    // image's value as it is, so an image's 0 is refused below.
    let img = image.numa_nodes;
    if flavor.is_some() && img.is_some_and(|n| n != 0) {
        return Err(invalid(
            format!("{image_path}.properties.hw_numa_nodes"),
            "Image property 'hw_numa_nodes' is not permitted to override NUMA configuration set against the flavor",
        ));
    }
    let bad = |shown: String, field: String| {
        invalid(
            field,
            format!(
                "The property 'numa_nodes' cannot be {shown}. It must be a number greater than 0"
            ),
        )
    };
    match (flavor, img) {
        (Some(v), _) => {
            // Nova's is_int_like: the text is exactly an integer's canonical spelling.
            let n = v.parse::<i64>().ok().filter(|n| n.to_string() == v);
            match n {
                Some(n) if n >= 1 => Ok(Some(n)),
                _ => Err(bad(quoted(v), f.field("hw:numa_nodes"))),
            }
        }
        (None, Some(n)) if n < 1 => Err(bad(
            format!("'{n}'"),
            format!("{image_path}.properties.hw_numa_nodes"),
        )),
        (None, n) => Ok(n),
    }
}

/// Guest CPUs per cell and memory per cell, as listed (each may be absent).
pub(super) type CellLists = (Option<Vec<CpuSet>>, Option<Vec<i64>>);

/// `hw:numa_cpus.N` or `hw:numa_mem.N` in the flavor, else the image's, never both.
pub(super) fn cell_lists(
    f: &FlavorView<'_>,
    image: &ImageProps,
    image_path: &str,
) -> Result<CellLists, ClaimError> {
    let mut cpus = Vec::new();
    for i in 0..NUMA_NODES_MAX {
        let key = format!("hw:numa_cpus.{i}");
        let Some(v) = f.spec(&key) else { break };
        cpus.push(parse_cpu_spec(v).map_err(|e| invalid(f.field(&key), e))?);
    }
    let mut mem = Vec::new();
    for i in 0..NUMA_NODES_MAX {
        let key = format!("hw:numa_mem.{i}");
        let Some(v) = f.spec(&key) else { break };
        mem.push(
            v.trim()
                .parse::<i64>()
                .ok()
                .filter(|m| *m >= 0)
                .ok_or_else(|| {
                    invalid(
                        f.field(&key),
                        format!("{} is not a memory size in MiB", quoted(v)),
                    )
                })?,
        );
    }
    let forbidden = |name: &str| {
        invalid(
            format!("{image_path}.properties.{name}"),
            format!("Image property '{name}' is not permitted to override NUMA configuration set against the flavor"),
        )
    };
    let cpus = match (cpus.is_empty(), &image.numa_cpus) {
        (true, img) => img.clone(),
        (false, Some(_)) => return Err(forbidden("hw_numa_cpus")),
        (false, None) => Some(cpus),
    };
    let mem = match (mem.is_empty(), &image.numa_mem) {
        (true, img) => img.clone(),
        (false, Some(_)) => return Err(forbidden("hw_numa_mem")),
        (false, None) => Some(mem),
    };
    Ok((cpus, mem))
}
