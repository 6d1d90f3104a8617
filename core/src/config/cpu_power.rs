//! `[resources] cpu_power_management`, `cpu_power_management_strategy`,
//! `cpu_power_governor_low` and `cpu_power_governor_high`: Nova's `[libvirt]` options of the
//! same names, checked.
//!
//! In: the values as written in `[resources]`. Out: a [`CpuPowerManagement`] when the option
//! is on (`None` when off; the other keys are checked either way, as Nova checks their
//! choices), or a [`ConfigError`] naming the key, the value and what is accepted.
//!
//! rtrack does not power CPUs up or down (it runs no guests): the option says how Nova
//! counts and checks the dedicated CPUs. With it on, a dedicated CPU counts while offline
//! (Nova powers down those no guest runs on), and the CPUs whose governor the probe reads are
//! the dedicated ones.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{ConfigError, Resources, ResourcesConfig};
use crate::echo::quoted;
use crate::probes::CpuSet;

/// `cpu_power_management_strategy`: how Nova powers a dedicated CPU down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PowerStrategy {
    /// Take it offline (`cpuN/online` = 0); Nova's default.
    CpuState,
    /// Switch its cpufreq governor to `cpu_power_governor_low` (it stays online).
    Governor,
}

impl PowerStrategy {
    /// Nova's value.
    pub fn as_str(self) -> &'static str {
        match self {
            PowerStrategy::CpuState => "cpu_state",
            PowerStrategy::Governor => "governor",
        }
    }
}

/// CPU power management as configured, when on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuPowerManagement {
    /// How dedicated CPUs are powered down.
    pub strategy: PowerStrategy,
    /// The governor of a powered-down CPU (`governor` strategy); default `powersave`.
    pub governor_low: String,
    /// The governor of a CPU a guest runs on (`governor` strategy); default `performance`.
    pub governor_high: String,
}

/// Checks the four keys of `[resources]`.
pub fn validate(
    r: &ResourcesConfig,
    file: &Path,
) -> Result<Option<CpuPowerManagement>, ConfigError> {
    let err = |key: &str, value: String, expected: &str| ConfigError::Value {
        file: file.to_path_buf(),
        key: format!("resources.{key}"),
        value,
        expected: expected.to_string(),
    };
    let strategy = match r.cpu_power_management_strategy.as_deref() {
        None | Some("cpu_state") => PowerStrategy::CpuState,
        Some("governor") => PowerStrategy::Governor,
        Some(other) => {
            return Err(err(
                "cpu_power_management_strategy",
                quoted(other),
                "must be cpu_state (offline CPUs) or governor (cpufreq governors), as in Nova",
            ))
        }
    };
    let governor = |key: &str, v: &Option<String>, default: &str| {
        match v.as_deref() {
        None => Ok(default.to_string()),
        Some(g) if is_governor_name(g) => Ok(g.to_string()),
        Some(g) => Err(err(
            key,
            quoted(g),
            "must be a cpufreq governor name such as powersave or performance (1 to 15 letters, digits, _ or -)",
        )),
    }
    };
    let governor_low = governor(
        "cpu_power_governor_low",
        &r.cpu_power_governor_low,
        "powersave",
    )?;
    let governor_high = governor(
        "cpu_power_governor_high",
        &r.cpu_power_governor_high,
        "performance",
    )?;
    Ok(r.cpu_power_management
        .unwrap_or(false)
        .then_some(CpuPowerManagement {
            strategy,
            governor_low,
            governor_high,
        }))
}

/// A cpufreq governor's name as the kernel takes it (`CPUFREQ_NAME_LEN` is 16 with the NUL).
fn is_governor_name(g: &str) -> bool {
    (1..=15).contains(&g.len())
        && g.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl Resources {
    /// The CPUs whose cpufreq governor the probe reads: the dedicated ones when their power is
    /// managed, else none.
    pub fn governor_cpus(&self) -> CpuSet {
        match (&self.cpu_power_management, &self.cpu_dedicated_set) {
            (Some(_), Some(d)) => d.clone(),
            _ => CpuSet::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Option<CpuPowerManagement>, String> {
        let f = Path::new("/etc/rtrack/rtrack.toml");
        super::super::Config::parse(text, f)
            .and_then(|c| c.validate(f))
            .map(|c| c.resources.cpu_power_management)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn off_by_default_with_nova_defaults_when_on() {
        assert_eq!(parse(""), Ok(None));
        assert_eq!(
            parse("[resources]\ncpu_power_management = true\n"),
            Ok(Some(CpuPowerManagement {
                strategy: PowerStrategy::CpuState,
                governor_low: "powersave".into(),
                governor_high: "performance".into(),
            }))
        );
        let on = parse(
            "[resources]\ncpu_power_management = true\ncpu_power_management_strategy = \"governor\"\ncpu_power_governor_low = \"schedutil\"\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(on.strategy, PowerStrategy::Governor);
        assert_eq!(on.governor_low, "schedutil");
    }

    #[test]
    fn bad_choices_are_refused_even_when_off() {
        let e = parse("[resources]\ncpu_power_management_strategy = \"offline\"\n").unwrap_err();
        assert_eq!(
            e,
            "/etc/rtrack/rtrack.toml: resources.cpu_power_management_strategy = \"offline\": must be cpu_state (offline CPUs) or governor (cpufreq governors), as in Nova"
        );
        let e = parse("[resources]\ncpu_power_governor_high = \"perf ormance\"\n").unwrap_err();
        assert!(e.contains("resources.cpu_power_governor_high"), "{e}");
        let e = parse("[resources]\ncpu_power_management = \"yes\"\n").unwrap_err();
        assert!(e.contains("cpu_power_management"), "{e}");
    }

    #[test]
    fn governors_are_read_for_managed_dedicated_cpus_only() {
        let f = Path::new("/x");
        let cfg = |t: &str| {
            super::super::Config::parse(t, f)
                .and_then(|c| c.validate(f))
                .unwrap()
                .resources
        };
        assert!(cfg("[resources]\ncpu_dedicated_set = \"2-5\"\n")
            .governor_cpus()
            .is_empty());
        assert_eq!(
            cfg("[resources]\ncpu_dedicated_set = \"2-5\"\ncpu_power_management = true\n")
                .governor_cpus()
                .to_string(),
            "2-5"
        );
    }
}
