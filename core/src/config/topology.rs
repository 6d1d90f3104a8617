//! `[resources] pin_alignment`, `prefer_closest_cells` and `dedicated_core_types`: rtrack's own
//! placement policies beyond Nova's (cache domains, NUMA distances, core types), all off by
//! default; and the names of core types, as the probe, the configuration and the flavor extra
//! spec `rtrack:cpu_core_type` write them.
//!
//! In: the values as written in `[resources]`. Out: a [`TopologyPolicy`], or a [`ConfigError`]
//! naming the key, the value and what is accepted.
//!
//! The policies choose among what Nova's rules allow (which CPUs, which of the cells that fit),
//! never whether a guest fits: `docs/differences.md` says so and the property tests hold it.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{ConfigError, ResourcesConfig};
use crate::echo::quoted;

/// `pin_alignment`: what a dedicated guest cell's pins are aligned to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PinAlignment {
    /// Nova's choice of CPUs.
    #[default]
    None,
    /// Fill L3 cache domains: a guest cell one free domain can hold is not spread over two.
    L3,
}

impl PinAlignment {
    /// The configured value.
    pub fn as_str(self) -> &'static str {
        match self {
            PinAlignment::None => "none",
            PinAlignment::L3 => "l3",
        }
    }
}

/// The placement policies beyond Nova's, as configured.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopologyPolicy {
    /// `pin_alignment`.
    pub pin_alignment: PinAlignment,
    /// `prefer_closest_cells`: multi-cell guests take the fitting cells closest together.
    pub prefer_closest_cells: bool,
    /// `dedicated_core_types`: the core types dedicated guests pin (hwloc's names); `None`:
    /// every type.
    pub dedicated_core_types: Option<Vec<String>>,
}

impl TopologyPolicy {
    /// Every policy off: Nova's placement exactly.
    pub fn is_off(&self) -> bool {
        self.pin_alignment == PinAlignment::None
            && !self.prefer_closest_cells
            && self.dedicated_core_types.is_none()
    }
}

/// The hwloc name of a core type written as hwloc (`IntelCore`, `IntelAtom`, `IntelLowPower`,
/// `LinuxCapacity=446`) or as the kernel's PMU (`cpu_core`, `cpu_atom`, `cpu_lowpower`) names it.
pub fn core_type_name(raw: &str) -> Result<String, String> {
    let raw = raw.trim();
    for (pmu, name) in crate::probes::core_type::PMU_KINDS {
        if raw == pmu || raw == name {
            return Ok(name.to_string());
        }
    }
    if let Some(n) = raw.strip_prefix("LinuxCapacity=") {
        if let Ok(c) = n.parse::<u64>() {
            return Ok(format!("LinuxCapacity={c}"));
        }
    }
    Err(format!(
        "{} is not a core type: IntelCore (or cpu_core), IntelAtom (cpu_atom), IntelLowPower (cpu_lowpower) or LinuxCapacity=N, as rtrackd --once lists them in core_types",
        quoted(raw)
    ))
}

/// Checks the three keys of `[resources]`.
pub fn validate(r: &ResourcesConfig, file: &Path) -> Result<TopologyPolicy, ConfigError> {
    let err = |key: &str, value: String, expected: String| ConfigError::Value {
        file: file.to_path_buf(),
        key: format!("resources.{key}"),
        value,
        expected,
    };
    let pin_alignment = match r.pin_alignment.as_deref() {
        None | Some("none") => PinAlignment::None,
        Some("l3") => PinAlignment::L3,
        Some(other) => {
            return Err(err(
                "pin_alignment",
                quoted(other),
                "must be \"none\" (Nova's choice of CPUs) or \"l3\" (fill L3 cache domains)".into(),
            ))
        }
    };
    let dedicated_core_types = match &r.dedicated_core_types {
        None => None,
        Some(list) if list.is_empty() => {
            return Err(err(
                "dedicated_core_types",
                "[]".into(),
                "must name at least one core type; leave it out for every type".into(),
            ))
        }
        Some(list) => Some(
            list.iter()
                .map(|n| core_type_name(n))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| err("dedicated_core_types", format!("{list:?}"), e))?,
        ),
    };
    Ok(TopologyPolicy {
        pin_alignment,
        prefer_closest_cells: r.prefer_closest_cells.unwrap_or(false),
        dedicated_core_types,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> Result<TopologyPolicy, ConfigError> {
        let r: ResourcesConfig = toml::from_str(toml_text).expect("test toml");
        validate(&r, Path::new("t.toml"))
    }

    #[test]
    fn every_policy_is_off_by_default() {
        let p = parse("").unwrap();
        assert!(p.is_off());
        assert_eq!(p, TopologyPolicy::default());
    }

    #[test]
    fn values_and_both_spellings_of_core_types() {
        let p = parse(
            "pin_alignment = \"l3\"\nprefer_closest_cells = true\ndedicated_core_types = [\"cpu_core\", \"LinuxCapacity=1024\"]",
        )
        .unwrap();
        assert_eq!(p.pin_alignment, PinAlignment::L3);
        assert!(p.prefer_closest_cells);
        assert_eq!(
            p.dedicated_core_types.as_deref(),
            Some(&["IntelCore".to_string(), "LinuxCapacity=1024".to_string()][..])
        );
        assert!(!p.is_off());
    }

    #[test]
    fn bad_values_name_the_key_and_what_is_accepted() {
        let e = parse("pin_alignment = \"l2\"").unwrap_err().to_string();
        assert!(
            e.contains("resources.pin_alignment = \"l2\": must be \"none\""),
            "{e}"
        );
        let e = parse("dedicated_core_types = [\"big\"]")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("resources.dedicated_core_types")
                && e.contains("\"big\" is not a core type"),
            "{e}"
        );
        let e = parse("dedicated_core_types = []").unwrap_err().to_string();
        assert!(e.contains("at least one core type"), "{e}");
    }
}
