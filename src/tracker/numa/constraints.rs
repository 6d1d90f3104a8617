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

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{CpuPolicy, EmulatorPolicy, GuestCell, GuestTopology, PageSize, ThreadPolicy};
use crate::echo::quoted;
use crate::nova_syntax::{parse_cpu_spec, string_to_bytes};
use crate::probes::CpuSet;
use crate::tracker::error::ClaimError;

/// Nova's `ImageMetaProps.NUMA_NODES_MAX`: `hw:numa_cpus.N` and `hw:numa_mem.N` are read for N
/// below it.
pub const NUMA_NODES_MAX: usize = 128;

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

/// The NUMA-related image properties (Nova's ImageMetaProps fields of the same names).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageProps {
    /// The image's name (for messages).
    pub name: Option<String>,
    /// `hw_cpu_policy`.
    pub cpu_policy: Option<String>,
    /// `hw_cpu_thread_policy`.
    pub cpu_thread_policy: Option<String>,
    /// `hw_cpu_realtime_mask`.
    pub cpu_realtime_mask: Option<String>,
    /// `hw_numa_nodes`.
    pub numa_nodes: Option<i64>,
    /// `hw_numa_cpus` (or `hw_numa_cpus.N` in a glance dict).
    pub numa_cpus: Option<Vec<CpuSet>>,
    /// `hw_numa_mem` (or `hw_numa_mem.N`), MiB.
    pub numa_mem: Option<Vec<i64>>,
    /// `hw_mem_page_size`.
    pub mem_page_size: Option<String>,
    /// `hw_locked_memory`.
    pub locked_memory: Option<bool>,
    /// `hw_pci_numa_affinity_policy`.
    pub pci_numa_affinity_policy: Option<String>,
    /// `traits_required` (or `trait:NAME=required` in a glance dict).
    pub traits_required: Vec<String>,
}

const CPU_POLICIES: [&str; 3] = ["dedicated", "shared", "mixed"];
const THREAD_POLICIES: [&str; 3] = ["prefer", "isolate", "require"];
const PCI_POLICIES: [&str; 4] = ["required", "legacy", "preferred", "socket"];

fn invalid(field: String, message: impl Into<String>) -> ClaimError {
    ClaimError::Invalid {
        field,
        message: message.into(),
    }
}

/// oslo's `bool_from_string`, not strict: anything but a true word is false.
fn truthy(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "1" | "t" | "true" | "on" | "y" | "yes"
    )
}

impl ImageProps {
    /// Reads the properties of an image: `image` is an ImageMeta's `nova_object.data` (its
    /// `properties` an ImageMetaProps primitive, or a plain dict of glance properties). Values
    /// are coerced as ImageMetaProps' fields do; a value the field refuses is an error naming
    /// `path.properties.<key>`.
    pub fn from_image(
        image: Option<&Map<String, Value>>,
        path: &str,
    ) -> Result<ImageProps, ClaimError> {
        let mut props = ImageProps::default();
        let Some(image) = image else {
            return Ok(props);
        };
        props.name = image
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_string);
        let data = match image.get("properties") {
            Some(Value::Object(p)) => match p.get("nova_object.data") {
                Some(Value::Object(d)) => d,
                _ => p,
            },
            _ => return Ok(props),
        };
        let field = |k: &str| format!("{path}.properties.{k}");
        let string = |k: &str| -> Result<Option<String>, ClaimError> {
            match data.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(invalid(
                    field(k),
                    format!("expected a string, got {}", quoted(&other.to_string())),
                )),
            }
        };
        let enumerated = |k: &str, allowed: &[&str]| -> Result<Option<String>, ClaimError> {
            match string(k)? {
                Some(v) if !allowed.contains(&v.as_str()) => Err(invalid(
                    field(k),
                    format!("Invalid image metadata. Error: Field value {} is invalid (expected one of {})", quoted(&v), allowed.join(", ")),
                )),
                v => Ok(v),
            }
        };
        let integer = |k: &str, v: &Value| -> Result<i64, ClaimError> {
            match v {
                Value::Number(n) => n
                    .as_i64()
                    .ok_or_else(|| invalid(field(k), format!("{n} is not an integer"))),
                Value::String(s) => s
                    .trim()
                    .parse()
                    .map_err(|_| invalid(field(k), format!("{} is not an integer", quoted(s)))),
                other => Err(invalid(
                    field(k),
                    format!("expected an integer, got {}", quoted(&other.to_string())),
                )),
            }
        };
        props.cpu_policy = enumerated("hw_cpu_policy", &CPU_POLICIES)?;
        props.cpu_thread_policy = enumerated("hw_cpu_thread_policy", &THREAD_POLICIES)?;
        props.pci_numa_affinity_policy = enumerated("hw_pci_numa_affinity_policy", &PCI_POLICIES)?;
        props.cpu_realtime_mask = string("hw_cpu_realtime_mask")?;
        props.mem_page_size = string("hw_mem_page_size")?;
        props.numa_nodes = match data.get("hw_numa_nodes") {
            None | Some(Value::Null) => None,
            Some(v) => Some(integer("hw_numa_nodes", v)?),
        };
        props.locked_memory = match data.get("hw_locked_memory") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(Value::String(s)) => Some(truthy(s)),
            Some(Value::Number(n)) => Some(n.as_i64() == Some(1)),
            Some(other) => {
                return Err(invalid(
                    field("hw_locked_memory"),
                    format!("expected a boolean, got {}", quoted(&other.to_string())),
                ))
            }
        };
        // The primitive's lists, or a glance dict's numbered keys.
        props.numa_cpus = match data.get("hw_numa_cpus") {
            Some(Value::Array(cells)) => Some(
                cells
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let f = field(&format!("hw_numa_cpus[{i}]"));
                        let ids = c
                            .as_array()
                            .ok_or_else(|| invalid(f.clone(), "expected a list of CPU numbers"))?;
                        ids.iter()
                            .map(|id| {
                                id.as_u64()
                                    .and_then(|v| u32::try_from(v).ok())
                                    .filter(|v| *v <= crate::nova_syntax::MAX_CPU_ID)
                                    .ok_or_else(|| {
                                        invalid(f.clone(), format!("{id} is not a CPU number"))
                                    })
                            })
                            .collect::<Result<Vec<u32>, _>>()
                            .map(CpuSet::from_ids)
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            Some(Value::Null) | None => numbered(data, "hw_numa_cpus", |k, v| match v {
                Value::String(s) => parse_cpu_spec(s).map_err(|e| invalid(field(k), e)),
                other => Err(invalid(
                    field(k),
                    format!("expected a CPU list, got {}", quoted(&other.to_string())),
                )),
            })?,
            Some(other) => {
                return Err(invalid(
                    field("hw_numa_cpus"),
                    format!(
                        "expected a list of CPU lists, got {}",
                        quoted(&other.to_string())
                    ),
                ))
            }
        };
        props.numa_mem = match data.get("hw_numa_mem") {
            Some(Value::Array(list)) => Some(
                list.iter()
                    .enumerate()
                    .map(|(i, v)| integer(&format!("hw_numa_mem[{i}]"), v))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            Some(Value::Null) | None => numbered(data, "hw_numa_mem", |k, v| integer(k, v))?,
            Some(other) => {
                return Err(invalid(
                    field("hw_numa_mem"),
                    format!(
                        "expected a list of sizes, got {}",
                        quoted(&other.to_string())
                    ),
                ))
            }
        };
        match data.get("traits_required") {
            Some(Value::Array(list)) => {
                props.traits_required = list
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect();
            }
            _ => {
                props.traits_required = data
                    .iter()
                    .filter(|(k, v)| k.starts_with("trait:") && v.as_str() == Some("required"))
                    .map(|(k, _)| k["trait:".len()..].to_string())
                    .collect();
            }
        }
        Ok(props)
    }
}

/// `key.0`, `key.1`... until one is missing, each read with `read`.
fn numbered<T>(
    data: &Map<String, Value>,
    key: &str,
    read: impl Fn(&str, &Value) -> Result<T, ClaimError>,
) -> Result<Option<Vec<T>>, ClaimError> {
    let mut out = Vec::new();
    for i in 0..NUMA_NODES_MAX {
        let k = format!("{key}.{i}");
        match data.get(&k) {
            Some(v) => out.push(read(&k, v)?),
            None => break,
        }
    }
    Ok((!out.is_empty()).then_some(out))
}

/// What [`numa_constraints`] reads: the flavor's sizes and extra specs, and where they came from
/// (for error paths).
pub struct FlavorView<'a> {
    /// Guest CPUs.
    pub vcpus: i64,
    /// Guest memory, MiB.
    pub memory_mb: i64,
    /// The flavor's extra specs.
    pub extra_specs: &'a BTreeMap<String, String>,
    /// The flavor's JSON path in the request, e.g. `request_spec.flavor`.
    pub path: &'a str,
}

impl FlavorView<'_> {
    fn spec(&self, key: &str) -> Option<&str> {
        self.extra_specs.get(key).map(String::as_str)
    }

    fn field(&self, key: &str) -> String {
        format!("{}.extra_specs.{key}", self.path)
    }
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

fn all_cpus(vcpus: i64) -> CpuSet {
    CpuSet::from_ids(0..vcpus.max(0) as u32)
}

/// Nova's `get_cpu_policy_constraint`.
fn cpu_policy(
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
fn thread_policy(
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
fn emulator_policy(f: &FlavorView<'_>) -> Result<Option<EmulatorPolicy>, ClaimError> {
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
fn realtime_cpus(
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
fn dedicated_mask(f: &FlavorView<'_>) -> Result<Option<CpuSet>, ClaimError> {
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
fn pagesize(
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
fn node_count(
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
type CellLists = (Option<Vec<CpuSet>>, Option<Vec<i64>>);

/// `hw:numa_cpus.N` or `hw:numa_mem.N` in the flavor, else the image's, never both.
fn cell_lists(
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
    let mut dedicated = dedicated_mask(f)?;

    let (req_vcpu, req_pcpu) = explicit_cpu_resources(f)?;
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
            dedicated = dedicated.or(realtime);
        }
    }

    let nodes = node_count(f, image, image_path)?;
    let pages = pagesize(f, image, image_path)?;
    if f.spec("hw:pmem")
        .is_some_and(|v| v.split(',').any(|l| !l.trim().is_empty()))
    {
        return Err(invalid(
            f.field("hw:pmem"),
            "virtual persistent memory (vPMEM) is not tracked by rtrack; this host cannot claim it",
        ));
    }
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

    if nodes.is_none() && pages.is_none() && !policy.is_some_and(CpuPolicy::pins) {
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
            if !avail.contains(cpu) {
                return Err(invalid(
                    field,
                    format!("CPU number {cpu} is assigned to two nodes"),
                ));
            }
            avail = avail.difference(&CpuSet::from_ids([cpu]));
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
        let ids: Vec<String> = avail.iter().map(|c| c.to_string()).collect();
        return Err(invalid(
            f.field("hw:numa_cpus.0"),
            format!(
                "CPU number {{{}}} is not assigned to any node",
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

#[cfg(test)]
mod tests;
