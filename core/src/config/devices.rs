//! `[devices]` and `[mdev.<type>]`: which mediated device types are offered as vGPUs, on which
//! parents, as which resource class; how many memory-encrypted guests the host runs when the
//! kernel does not say; whether Intel TDX can be offered (`cpu_mode`) and how many TDX guests;
//! which persistent memory namespaces are offered as vPMEM. Nova's `[devices]
//! enabled_mdev_types`, its `[mdev_<type>]` groups, and its `[libvirt] cpu_mode`,
//! `num_intel_tdx_guests` and `pmem_namespaces`.
//!
//! In: the sections as written and the file's path. Out: an [`MdevPolicy`], or a
//! [`ConfigError`] naming the key. Nova's rules, stricter where Nova silently drops a setting
//! (docs/differences.md): a second type without `device_addresses` is an error (Nova ignores the
//! type with a warning), and addresses are compared as PCI addresses, not as strings.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::ConfigError;
use crate::nova_syntax::is_custom_name;
use crate::probes::pci::PciAddress;

/// `[devices]`
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DevicesConfig {
    /// Mediated device types offered as vGPUs (Nova's `enabled_mdev_types`), e.g.
    /// `["nvidia-35"]`. Default none.
    pub enabled_mdev_types: Option<Vec<String>>,
    /// How many SEV guests the host runs, when the kernel's misc cgroup does not say (or fewer
    /// than it says). Nova's former `[libvirt] num_memory_encrypted_guests`.
    pub num_memory_encrypted_guests: Option<i64>,
    /// The CPU mode guests run with (Nova's `[libvirt] cpu_mode`): Intel TDX is offered only
    /// with `host-passthrough`, as Nova offers it.
    pub cpu_mode: Option<String>,
    /// How many Intel TDX guests the host runs (Nova's `[libvirt] num_intel_tdx_guests`): when
    /// set it wins over the kernel's count, as in Nova's code.
    pub num_intel_tdx_guests: Option<i64>,
    /// Persistent memory namespaces offered as vPMEM, Nova's `[libvirt] pmem_namespaces`
    /// entries (`"LABEL:name|name"`).
    pub pmem_namespaces: Option<Vec<String>>,
}

/// Nova's `[libvirt] cpu_mode` choices.
pub const CPU_MODES: [&str; 4] = ["host-model", "host-passthrough", "custom", "none"];

/// `[mdev.<type>]`
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MdevTypeConfig {
    /// The parents (PCI addresses, or a virtual parent's name) that offer this type. None: every
    /// parent no other type names (at most one type may leave it out).
    pub device_addresses: Option<Vec<String>>,
    /// The resource class: `VGPU` (default) or `CUSTOM_*`.
    pub mdev_class: Option<String>,
    /// At most this many devices of the type on the whole host.
    pub max_instances: Option<i64>,
}

/// One enabled type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnabledMdevType {
    /// The type id (`nvidia-35`).
    pub type_id: String,
    /// The parents it is offered on; empty: the default type.
    pub device_addresses: Vec<String>,
    /// The class its vGPUs are reported and claimed as: `VGPU` or a `CUSTOM_` class.
    pub class: String,
    /// Host-wide cap.
    pub max_instances: Option<u64>,
}

/// The validated `[devices]` settings: vGPUs, memory encryption, vPMEM.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MdevPolicy {
    /// Enabled types, in configuration order.
    pub types: Vec<EnabledMdevType>,
    /// `[devices] num_memory_encrypted_guests`.
    pub num_memory_encrypted_guests: Option<u64>,
    /// `[devices] cpu_mode`.
    pub cpu_mode: Option<String>,
    /// `[devices] num_intel_tdx_guests`.
    pub num_intel_tdx_guests: Option<u64>,
    /// `[devices] pmem_namespaces`, parsed.
    pub pmem: Vec<super::pmem::PmemLabel>,
}

impl MdevPolicy {
    /// The type a parent offers as vGPUs: the one naming its address, else the default type.
    pub fn type_for(&self, parent: &str) -> Option<&EnabledMdevType> {
        self.types
            .iter()
            .find(|t| t.device_addresses.iter().any(|a| a == parent))
            .or_else(|| self.types.iter().find(|t| t.device_addresses.is_empty()))
    }
}

/// A parent name as written: a PCI address (normalised to lowercase with a domain, as sysfs
/// names it), or a virtual parent's name (`mtty`).
fn parent_name(raw: &str) -> Option<String> {
    if let Some(a) = PciAddress::parse(raw) {
        return Some(a.to_string());
    }
    let plain = !raw.is_empty()
        && raw.len() <= 64
        && raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
    // Something that looks like a PCI address but is not one is a typo, not a virtual parent.
    let pci_like = raw.contains(':') && raw.contains('.');
    (plain && !pci_like).then(|| raw.to_string())
}

/// Checks `[devices]` and `[mdev.*]`.
pub(super) fn validate(
    devices: &DevicesConfig,
    mdev: &BTreeMap<String, MdevTypeConfig>,
    file: &Path,
) -> Result<MdevPolicy, ConfigError> {
    let err = |key: String, value: String, expected: &str| ConfigError::Value {
        file: file.to_path_buf(),
        key,
        value,
        expected: expected.to_string(),
    };
    let enabled = devices.enabled_mdev_types.clone().unwrap_or_default();
    for name in mdev.keys() {
        if !enabled.contains(name) {
            return Err(err(
                format!("mdev.{name}"),
                "(section)".into(),
                "configures a type that is not in devices.enabled_mdev_types; add it there or remove the section",
            ));
        }
    }
    let mut types: Vec<EnabledMdevType> = Vec::new();
    let mut owner: BTreeMap<String, String> = BTreeMap::new();
    for (i, type_id) in enabled.iter().enumerate() {
        let key = format!("devices.enabled_mdev_types[{i}]");
        let valid_id = !type_id.is_empty()
            && type_id.len() <= 128
            && type_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if !valid_id {
            return Err(err(
                key,
                crate::echo::quoted(type_id),
                "must be an mdev type id as the kernel names it under mdev_supported_types, e.g. \"nvidia-35\"",
            ));
        }
        if types.iter().any(|t| &t.type_id == type_id) {
            return Err(err(key, crate::echo::quoted(type_id), "is listed twice"));
        }
        let section = mdev.get(type_id).cloned().unwrap_or_default();
        let class = match &section.mdev_class {
            None => "VGPU".to_string(),
            Some(c) => match c.as_str() {
                "VGPU" => c.clone(),
                _ if is_custom_name(c) => c.clone(),
                _ => {
                    return Err(err(
                        format!("mdev.{type_id}.mdev_class"),
                        crate::echo::quoted(c),
                        "must be VGPU or a custom class (CUSTOM_ then capitals, digits and _), as Nova's mdev_class",
                    ))
                }
            },
        };
        let max_instances = match section.max_instances {
            None => None,
            Some(n) if n >= 1 => Some(n as u64),
            Some(n) => {
                return Err(err(
                    format!("mdev.{type_id}.max_instances"),
                    n.to_string(),
                    "must be 1 or more",
                ))
            }
        };
        let mut device_addresses = Vec::new();
        for (j, raw) in section.device_addresses.iter().flatten().enumerate() {
            let akey = format!("mdev.{type_id}.device_addresses[{j}]");
            let Some(name) = parent_name(raw) else {
                return Err(err(
                    akey,
                    crate::echo::quoted(raw),
                    "must be a PCI address like 0000:84:00.0 or a virtual parent's name under sys/class/mdev_bus",
                ));
            };
            if let Some(other) = owner.insert(name.clone(), type_id.clone()) {
                return Err(err(
                    akey,
                    crate::echo::quoted(raw),
                    &format!(
                        "is already given to type {}: a parent offers one type (Nova: duplicate types for PCI ID)",
                        crate::echo::quoted(&other)
                    ),
                ));
            }
            device_addresses.push(name);
        }
        if device_addresses.is_empty() {
            if let Some(default) = types.iter().find(|t| t.device_addresses.is_empty()) {
                return Err(err(
                    format!("mdev.{type_id}.device_addresses"),
                    "(none)".into(),
                    &format!(
                        "type {} already applies to every parent no type names; give this type its device_addresses",
                        crate::echo::quoted(&default.type_id)
                    ),
                ));
            }
        }
        types.push(EnabledMdevType {
            type_id: type_id.clone(),
            device_addresses,
            class,
            max_instances,
        });
    }
    let settings = device_settings(devices, file)?;
    Ok(MdevPolicy { types, ..settings })
}

/// The `[devices]` keys besides the mdev types: encryption counts, `cpu_mode`, vPMEM.
fn device_settings(devices: &DevicesConfig, file: &Path) -> Result<MdevPolicy, ConfigError> {
    let err = |key: &str, value: String, expected: &str| ConfigError::Value {
        file: file.to_path_buf(),
        key: format!("devices.{key}"),
        value,
        expected: expected.to_string(),
    };
    let count = |key: &str, v: Option<i64>| match v {
        None => Ok(None),
        Some(n) if n >= 0 => Ok(Some(n as u64)),
        Some(n) => Err(err(key, n.to_string(), "must be 0 or more")),
    };
    if let Some(m) = &devices.cpu_mode {
        if !CPU_MODES.contains(&m.as_str()) {
            return Err(err(
                "cpu_mode",
                crate::echo::quoted(m),
                "must be one of host-model, host-passthrough, custom, none (Nova's [libvirt] cpu_mode)",
            ));
        }
    }
    Ok(MdevPolicy {
        types: Vec::new(),
        num_memory_encrypted_guests: count(
            "num_memory_encrypted_guests",
            devices.num_memory_encrypted_guests,
        )?,
        cpu_mode: devices.cpu_mode.clone(),
        num_intel_tdx_guests: count("num_intel_tdx_guests", devices.num_intel_tdx_guests)?,
        pmem: super::pmem::validate(devices.pmem_namespaces.as_deref().unwrap_or_default(), file)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn policy(text: &str) -> Result<MdevPolicy, String> {
        let c = Config::parse(text, Path::new("rtrack.toml")).map_err(|e| e.to_string())?;
        validate(&c.devices, &c.mdev, Path::new("rtrack.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn types_addresses_classes_and_caps_are_read() {
        let p = policy(
            r#"
[devices]
enabled_mdev_types = ["nvidia-35", "nvidia-36"]
[mdev.nvidia-35]
device_addresses = ["0000:84:00.0", "0000:85:00.0"]
mdev_class = "CUSTOM_M60_0B"
max_instances = 20
"#,
        )
        .unwrap();
        assert_eq!(p.types.len(), 2);
        assert_eq!(
            p.types[0].device_addresses,
            ["0000:84:00.0", "0000:85:00.0"]
        );
        assert_eq!(p.types[0].class, "CUSTOM_M60_0B");
        assert_eq!(p.types[0].max_instances, Some(20));
        assert_eq!(p.types[1].class, "VGPU");
        assert_eq!(p.type_for("0000:85:00.0").unwrap().type_id, "nvidia-35");
        assert_eq!(p.type_for("0000:86:00.0").unwrap().type_id, "nvidia-36");
    }

    #[test]
    fn mistakes_name_the_key() {
        for (text, key) in [
            (
                "[devices]\nenabled_mdev_types = [\"a\"]\n[mdev.b]\nmax_instances = 1\n",
                "mdev.b",
            ),
            (
                "[devices]\nenabled_mdev_types = [\"a b\"]\n",
                "devices.enabled_mdev_types[0]",
            ),
            (
                "[devices]\nenabled_mdev_types = [\"a\"]\n[mdev.a]\nmdev_class = \"PCPU\"\n",
                "mdev.a.mdev_class",
            ),
            (
                "[devices]\nenabled_mdev_types = [\"a\"]\n[mdev.a]\nmax_instances = 0\n",
                "mdev.a.max_instances",
            ),
            (
                "[devices]\nenabled_mdev_types = [\"a\"]\n[mdev.a]\ndevice_addresses = [\"0000:84:00.9\"]\n",
                "mdev.a.device_addresses[0]",
            ),
            (
                "[devices]\nenabled_mdev_types = [\"a\", \"b\"]\n[mdev.a]\ndevice_addresses = [\"0000:84:00.0\"]\n[mdev.b]\ndevice_addresses = [\"0000:84:00.0\"]\n",
                "mdev.b.device_addresses[0]",
            ),
            (
                "[devices]\nenabled_mdev_types = [\"a\", \"b\"]\n",
                "mdev.b.device_addresses",
            ),
            (
                "[devices]\nnum_memory_encrypted_guests = -1\n",
                "devices.num_memory_encrypted_guests",
            ),
            (
                "[devices]\nnum_intel_tdx_guests = -1\n",
                "devices.num_intel_tdx_guests",
            ),
            ("[devices]\ncpu_mode = \"host\"\n", "devices.cpu_mode"),
            (
                "[devices]\npmem_namespaces = [\"ns_0\"]\n",
                "devices.pmem_namespaces[0]",
            ),
        ] {
            let e = policy(text).unwrap_err();
            assert!(e.contains(&format!("{key} =")), "{key}: {e}");
        }
    }

    #[test]
    fn tdx_and_pmem_settings_are_read() {
        let p = policy(
            "[devices]\ncpu_mode = \"host-passthrough\"\nnum_intel_tdx_guests = 100\npmem_namespaces = [\"4GB:ns_0\", \"SMALL:ns_1|ns_2\"]\n",
        )
        .unwrap();
        assert_eq!(p.cpu_mode.as_deref(), Some("host-passthrough"));
        assert_eq!(p.num_intel_tdx_guests, Some(100));
        assert_eq!(p.pmem.len(), 2);
        assert_eq!(p.pmem[1].class, "CUSTOM_PMEM_NAMESPACE_SMALL");
        let p = policy("[devices]\n").unwrap();
        assert_eq!((p.cpu_mode, p.num_intel_tdx_guests), (None, None));
        assert!(p.pmem.is_empty());
    }

    #[test]
    fn virtual_parents_are_names() {
        let p = policy("[devices]\nenabled_mdev_types = [\"mtty-1\"]\n[mdev.mtty-1]\ndevice_addresses = [\"mtty\"]\n").unwrap();
        assert_eq!(p.types[0].device_addresses, ["mtty"]);
    }
}
