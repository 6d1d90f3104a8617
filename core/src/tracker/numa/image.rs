//! The properties of an image rtrack judges a guest by (NUMA, CPU policies, memory encryption),
//! read the way Nova's ImageMetaProps reads them: from a primitive (typed values) or from a
//! glance dict (strings, `hw_numa_cpus.N` keys, `trait:NAME=required`).
//!
//! In: an ImageMeta's `nova_object.data` (or nothing). Out: [`ImageProps`], or a
//! [`ClaimError::Invalid`] naming `<path>.properties.<key>` for a value the field refuses.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::flavor_view::{invalid, truthy, NUMA_NODES_MAX};
use crate::echo::quoted;
use crate::nova_syntax::parse_cpu_spec;
use crate::probes::CpuSet;
use crate::tracker::error::ClaimError;

/// The image properties rtrack reads (Nova's ImageMetaProps fields of the same names).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageProps {
    /// The image's name (for messages).
    pub name: Option<String>,
    /// The image's id (for messages; none for a volume's image).
    #[serde(default)]
    pub id: Option<String>,
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
    /// `hw_mem_encryption`.
    #[serde(default)]
    pub mem_encryption: Option<bool>,
    /// `hw_mem_encryption_model`.
    #[serde(default)]
    pub mem_encryption_model: Option<crate::tracker::nested::EncryptionModel>,
    /// `hw_firmware_type` (`bios`, `uefi`).
    #[serde(default)]
    pub firmware_type: Option<String>,
    /// `hw_firmware_stateless`.
    #[serde(default)]
    pub firmware_stateless: Option<bool>,
    /// `hw_machine_type`.
    #[serde(default)]
    pub machine_type: Option<String>,
    /// `hw_video_model`.
    #[serde(default)]
    pub video_model: Option<String>,
}

const CPU_POLICIES: [&str; 3] = ["dedicated", "shared", "mixed"];
const THREAD_POLICIES: [&str; 3] = ["prefer", "isolate", "require"];
const PCI_POLICIES: [&str; 4] = ["required", "legacy", "preferred", "socket"];
const FIRMWARE_TYPES: [&str; 2] = ["uefi", "bios"];
const VIDEO_MODELS: [&str; 9] = [
    "cirrus", "qxl", "vga", "vmvga", "xen", "virtio", "gop", "none", "bochs",
];
const ENCRYPTION_MODELS: [&str; 4] = ["amd-sev", "amd-sev-es", "amd-sev-snp", "intel-tdx"];

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
        props.id = image.get("id").and_then(Value::as_str).map(str::to_string);
        let data = match image.get("properties") {
            Some(Value::Object(p)) => match p.get("nova_object.data") {
                Some(Value::Object(d)) => d,
                _ => p,
            },
            _ => return Ok(props),
        };
        let r = Reader { data, path };
        props.cpu_policy = r.enumerated("hw_cpu_policy", &CPU_POLICIES)?;
        props.cpu_thread_policy = r.enumerated("hw_cpu_thread_policy", &THREAD_POLICIES)?;
        props.pci_numa_affinity_policy =
            r.enumerated("hw_pci_numa_affinity_policy", &PCI_POLICIES)?;
        props.cpu_realtime_mask = r.string("hw_cpu_realtime_mask")?;
        props.mem_page_size = r.string("hw_mem_page_size")?;
        props.numa_nodes = match data.get("hw_numa_nodes") {
            None | Some(Value::Null) => None,
            Some(v) => Some(r.integer("hw_numa_nodes", v)?),
        };
        props.locked_memory = flexible(data, "hw_locked_memory", path)?;
        props.read_encryption(&r)?;
        props.numa_cpus = r.numa_cpus()?;
        props.numa_mem = r.numa_mem()?;
        props.traits_required = r.traits_required();
        Ok(props)
    }

    /// The memory encryption properties and what the models demand of the image.
    fn read_encryption(&mut self, r: &Reader<'_>) -> Result<(), ClaimError> {
        self.mem_encryption = flexible(r.data, "hw_mem_encryption", r.path)?;
        self.firmware_stateless = flexible(r.data, "hw_firmware_stateless", r.path)?;
        self.mem_encryption_model = r
            .enumerated("hw_mem_encryption_model", &ENCRYPTION_MODELS)?
            .and_then(|m| crate::tracker::nested::EncryptionModel::from_name(&m));
        self.firmware_type = r.enumerated("hw_firmware_type", &FIRMWARE_TYPES)?;
        self.video_model = r.enumerated("hw_video_model", &VIDEO_MODELS)?;
        self.machine_type = r.string("hw_machine_type")?;
        Ok(())
    }
}

/// An image's properties (`data`) and their JSON path in the request, read as ImageMetaProps'
/// fields coerce them.
struct Reader<'a> {
    data: &'a Map<String, Value>,
    path: &'a str,
}

impl Reader<'_> {
    fn field(&self, k: &str) -> String {
        format!("{}.properties.{k}", self.path)
    }

    fn string(&self, k: &str) -> Result<Option<String>, ClaimError> {
        match self.data.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(invalid(
                self.field(k),
                format!("expected a string, got {}", quoted(&other.to_string())),
            )),
        }
    }

    fn enumerated(&self, k: &str, allowed: &[&str]) -> Result<Option<String>, ClaimError> {
        match self.string(k)? {
            Some(v) if !allowed.contains(&v.as_str()) => Err(invalid(
                self.field(k),
                format!(
                    "Invalid image metadata. Error: Field value {} is invalid (expected one of {})",
                    quoted(&v),
                    allowed.join(", ")
                ),
            )),
            v => Ok(v),
        }
    }

    fn integer(&self, k: &str, v: &Value) -> Result<i64, ClaimError> {
        match v {
            Value::Number(n) => n
                .as_i64()
                .ok_or_else(|| invalid(self.field(k), format!("{n} is not an integer"))),
            Value::String(s) => s
                .trim()
                .parse()
                .map_err(|_| invalid(self.field(k), format!("{} is not an integer", quoted(s)))),
            other => Err(invalid(
                self.field(k),
                format!("expected an integer, got {}", quoted(&other.to_string())),
            )),
        }
    }

    /// `hw_numa_cpus`: the primitive's list of CPU lists, or a glance dict's numbered keys.
    fn numa_cpus(&self) -> Result<Option<Vec<CpuSet>>, ClaimError> {
        Ok(match self.data.get("hw_numa_cpus") {
            Some(Value::Array(cells)) => Some(
                cells
                    .iter()
                    .enumerate()
                    .map(|(i, c)| self.cpu_list(&self.field(&format!("hw_numa_cpus[{i}]")), c))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            Some(Value::Null) | None => numbered(self.data, "hw_numa_cpus", |k, v| match v {
                Value::String(s) => parse_cpu_spec(s).map_err(|e| invalid(self.field(k), e)),
                other => Err(invalid(
                    self.field(k),
                    format!("expected a CPU list, got {}", quoted(&other.to_string())),
                )),
            })?,
            Some(other) => {
                return Err(invalid(
                    self.field("hw_numa_cpus"),
                    format!(
                        "expected a list of CPU lists, got {}",
                        quoted(&other.to_string())
                    ),
                ))
            }
        })
    }

    /// One cell's CPU numbers in the primitive's `hw_numa_cpus`.
    fn cpu_list(&self, f: &str, cell: &Value) -> Result<CpuSet, ClaimError> {
        let ids = cell
            .as_array()
            .ok_or_else(|| invalid(f.to_string(), "expected a list of CPU numbers"))?;
        ids.iter()
            .map(|id| {
                id.as_u64()
                    .and_then(|v| u32::try_from(v).ok())
                    .filter(|v| *v <= crate::nova_syntax::MAX_CPU_ID)
                    .ok_or_else(|| invalid(f.to_string(), format!("{id} is not a CPU number")))
            })
            .collect::<Result<Vec<u32>, _>>()
            .map(CpuSet::from_ids)
    }

    /// `hw_numa_mem`: the primitive's list, or a glance dict's numbered keys.
    fn numa_mem(&self) -> Result<Option<Vec<i64>>, ClaimError> {
        Ok(match self.data.get("hw_numa_mem") {
            Some(Value::Array(list)) => Some(
                list.iter()
                    .enumerate()
                    .map(|(i, v)| self.integer(&format!("hw_numa_mem[{i}]"), v))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            Some(Value::Null) | None => {
                numbered(self.data, "hw_numa_mem", |k, v| self.integer(k, v))?
            }
            Some(other) => {
                return Err(invalid(
                    self.field("hw_numa_mem"),
                    format!(
                        "expected a list of sizes, got {}",
                        quoted(&other.to_string())
                    ),
                ))
            }
        })
    }

    /// `traits_required` as a list (the primitive), else a glance dict's `trait:X=required`.
    fn traits_required(&self) -> Vec<String> {
        match self.data.get("traits_required") {
            Some(Value::Array(list)) => list
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
            _ => self
                .data
                .iter()
                .filter(|(k, v)| k.starts_with("trait:") && v.as_str() == Some("required"))
                .map(|(k, _)| k["trait:".len()..].to_string())
                .collect(),
        }
    }
}

/// A FlexibleBooleanField: a boolean, or a string or number read as one.
fn flexible(data: &Map<String, Value>, k: &str, path: &str) -> Result<Option<bool>, ClaimError> {
    match data.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::String(s)) => Ok(Some(truthy(s))),
        Some(Value::Number(n)) => Ok(Some(n.as_i64() == Some(1))),
        Some(other) => Err(invalid(
            format!("{path}.properties.{k}"),
            format!("expected a boolean, got {}", quoted(&other.to_string())),
        )),
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
