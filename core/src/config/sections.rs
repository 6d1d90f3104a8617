//! [`super::Config::validate`] section by section: each function checks one section of the file
//! as written and returns its typed settings, or the [`ConfigError`] naming the key. The defaults
//! of an empty section are the constants below, stated once (the [`Resources`] default and
//! `[host]`'s and `[pci]`'s checks, in their own files, use them too).
//!
//! In: one section of the parsed file and the file's path (for messages). Out: that section's
//! settings ([`Resources`], [`AuditSettings`], [`ApiSettings`], [`MetricsSettings`],
//! [`LogSettings`]).

use std::path::Path;

use super::file::{ApiConfig, AuditConfig, LogConfig, MetricsConfig, ResourcesConfig};
use super::valid::{
    ApiSettings, AuditSettings, LogFormat, LogSettings, MetricsSettings, Resources,
};
use super::{cpu_power, numa, topology, ConfigError};
use crate::probes::CpuSet;

/// `[host] instances_path` when unset (Nova's default).
pub const DEFAULT_INSTANCES_PATH: &str = "/var/lib/nova/instances";
/// `[host] hypervisor_type` when unset.
pub const DEFAULT_HYPERVISOR_TYPE: &str = "rtrack";
/// `[resources] reserved_host_cpus` when unset (Nova's default).
pub const DEFAULT_RESERVED_HOST_CPUS: i64 = 0;
/// `[resources] reserved_host_memory_mb` when unset (Nova's default).
pub const DEFAULT_RESERVED_HOST_MEMORY_MB: i64 = 512;
/// `[resources] reserved_host_disk_mb` when unset (Nova's default).
pub const DEFAULT_RESERVED_HOST_DISK_MB: i64 = 0;
/// `[resources] initial_cpu_allocation_ratio` when unset (Nova's default).
pub const DEFAULT_INITIAL_CPU_ALLOCATION_RATIO: f64 = 4.0;
/// `[resources] initial_ram_allocation_ratio` and `initial_disk_allocation_ratio` when unset.
pub const DEFAULT_INITIAL_RAM_DISK_ALLOCATION_RATIO: f64 = 1.0;
/// `[pci] report_in_placement` when unset.
pub const DEFAULT_PCI_REPORT_IN_PLACEMENT: bool = false;
/// `[audit] interval_s` when unset.
pub const DEFAULT_AUDIT_INTERVAL_S: u64 = 60;
/// `[audit] jitter_s` when unset is the interval divided by this (10% of it).
pub const DEFAULT_AUDIT_JITTER_DIVISOR: u64 = 10;
/// `[api] max_connections` when unset.
pub const DEFAULT_MAX_CONNECTIONS: u64 = 256;
/// `[api] header_timeout_s` when unset.
pub const DEFAULT_HEADER_TIMEOUT_S: u64 = 10;
/// `[api] socket_mode` when unset.
pub const DEFAULT_SOCKET_MODE: u32 = 0o660;
/// `[api] socket_group` when unset.
pub const DEFAULT_SOCKET_GROUP: &str = "rtrack";
/// `[api] max_body_bytes` when unset (1 MiB).
pub const DEFAULT_MAX_BODY_BYTES: u64 = 1 << 20;
/// `[api] request_timeout_s` when unset.
pub const DEFAULT_REQUEST_TIMEOUT_S: u64 = 30;
/// `[log] level` when unset.
pub const DEFAULT_LOG_LEVEL: &str = "info";

fn value_error(file: &Path, key: &str, value: String, expected: &str) -> ConfigError {
    ConfigError::value(file, key, value, expected)
}

fn non_negative(file: &Path, key: &str, v: Option<i64>, default: i64) -> Result<i64, ConfigError> {
    match v {
        None => Ok(default),
        Some(v) if v >= 0 => Ok(v),
        Some(v) => Err(value_error(file, key, v.to_string(), "must be 0 or more")),
    }
}

fn ratio(file: &Path, key: &str, v: Option<f64>) -> Result<Option<f64>, ConfigError> {
    match v {
        None => Ok(None),
        Some(v) if v.is_finite() && v > 0.0 => Ok(Some(v)),
        Some(v) => Err(value_error(
            file,
            key,
            v.to_string(),
            "must be a number greater than 0, e.g. 4.0",
        )),
    }
}

fn cpuset(file: &Path, key: &str, v: &Option<String>) -> Result<Option<CpuSet>, ConfigError> {
    match v {
        None => Ok(None),
        Some(s) => crate::nova_syntax::parse_cpu_spec(s).map(Some).map_err(|e| {
            value_error(
                file,
                key,
                crate::echo::quoted(s),
                &format!("must be a cpulist like \"4-7,12\", where \"^N\" excludes a CPU as in Nova ({e})"),
            )
        }),
    }
}

/// `[resources]`.
pub fn resources(r: &ResourcesConfig, file: &Path) -> Result<Resources, ConfigError> {
    let key = |k: &str| format!("resources.{k}");
    let resources = Resources {
        reserved_host_cpus: non_negative(
            file,
            &key("reserved_host_cpus"),
            r.reserved_host_cpus,
            DEFAULT_RESERVED_HOST_CPUS,
        )?,
        reserved_host_memory_mb: non_negative(
            file,
            &key("reserved_host_memory_mb"),
            r.reserved_host_memory_mb,
            DEFAULT_RESERVED_HOST_MEMORY_MB,
        )?,
        reserved_host_disk_mb: non_negative(
            file,
            &key("reserved_host_disk_mb"),
            r.reserved_host_disk_mb,
            DEFAULT_RESERVED_HOST_DISK_MB,
        )?,
        cpu_allocation_ratio: ratio(file, &key("cpu_allocation_ratio"), r.cpu_allocation_ratio)?,
        ram_allocation_ratio: ratio(file, &key("ram_allocation_ratio"), r.ram_allocation_ratio)?,
        disk_allocation_ratio: ratio(file, &key("disk_allocation_ratio"), r.disk_allocation_ratio)?,
        initial_cpu_allocation_ratio: ratio(
            file,
            &key("initial_cpu_allocation_ratio"),
            r.initial_cpu_allocation_ratio,
        )?
        .unwrap_or(DEFAULT_INITIAL_CPU_ALLOCATION_RATIO),
        initial_ram_allocation_ratio: ratio(
            file,
            &key("initial_ram_allocation_ratio"),
            r.initial_ram_allocation_ratio,
        )?
        .unwrap_or(DEFAULT_INITIAL_RAM_DISK_ALLOCATION_RATIO),
        initial_disk_allocation_ratio: ratio(
            file,
            &key("initial_disk_allocation_ratio"),
            r.initial_disk_allocation_ratio,
        )?
        .unwrap_or(DEFAULT_INITIAL_RAM_DISK_ALLOCATION_RATIO),
        cpu_dedicated_set: cpuset(file, &key("cpu_dedicated_set"), &r.cpu_dedicated_set)?,
        cpu_shared_set: cpuset(file, &key("cpu_shared_set"), &r.cpu_shared_set)?,
        vcpu_pin_set: cpuset(file, &key("vcpu_pin_set"), &r.vcpu_pin_set)?,
        cpu_power_management: cpu_power::validate(r, file)?,
        topology: topology::validate(r, file)?,
        reserved_huge_pages: numa::reserved_huge_pages(
            r.reserved_huge_pages.as_deref().unwrap_or_default(),
            file,
        )?,
        packing_host_numa_cells_allocation_strategy: r
            .packing_host_numa_cells_allocation_strategy
            .unwrap_or(false),
        base_page_size_kb: match r.base_page_size_kb {
            None => None,
            Some(kb) if kb.is_power_of_two() && (4..=65536).contains(&kb) => Some(kb),
            Some(kb) => {
                return Err(value_error(
                    file,
                    "resources.base_page_size_kb",
                    kb.to_string(),
                    "must be a power of two from 4 to 65536 (KiB)",
                ))
            }
        },
        shared_storage_provider: match &r.shared_storage_provider {
            None => None,
            Some(s) => Some(uuid::Uuid::parse_str(s).map_err(|_| {
                value_error(
                    file,
                    "resources.shared_storage_provider",
                    format!("{s:?}"),
                    "must be a UUID",
                )
            })?),
        },
    };
    check_cpu_sets(&resources, file)?;
    Ok(resources)
}

/// Nova's rules between the CPU sets: `vcpu_pin_set` not with `cpu_dedicated_set`, and the
/// dedicated and shared sets apart.
fn check_cpu_sets(r: &Resources, file: &Path) -> Result<(), ConfigError> {
    if let (Some(_), Some(p)) = (&r.cpu_dedicated_set, &r.vcpu_pin_set) {
        return Err(value_error(
            file,
            "resources.vcpu_pin_set",
            format!("\"{p}\""),
            "The 'vcpu_pin_set' config option has been deprecated and cannot be defined alongside cpu_dedicated_set; unset vcpu_pin_set (Nova's rule)",
        ));
    }
    if let (Some(d), Some(s)) = (&r.cpu_dedicated_set, &r.cpu_shared_set) {
        if d.intersects(s) {
            return Err(value_error(
                file,
                "resources.cpu_shared_set",
                format!("\"{s}\""),
                &format!(
                    "must not overlap cpu_dedicated_set \"{d}\" (CPUs in both: {})",
                    d.intersection(s)
                ),
            ));
        }
    }
    Ok(())
}

/// `[audit]`: the interval and the jitter, in seconds.
pub fn audit(a: &AuditConfig, file: &Path) -> Result<AuditSettings, ConfigError> {
    let interval = match a.interval_s {
        None => DEFAULT_AUDIT_INTERVAL_S,
        Some(0) => {
            return Err(value_error(
                file,
                "audit.interval_s",
                "0".into(),
                "must be at least 1 (seconds)",
            ))
        }
        Some(v) => v,
    };
    let jitter = match a.jitter_s {
        None => interval / DEFAULT_AUDIT_JITTER_DIVISOR,
        Some(j) if j < interval => j,
        Some(j) => {
            return Err(value_error(
                file,
                "audit.jitter_s",
                j.to_string(),
                &format!("must be less than audit.interval_s ({interval})"),
            ))
        }
    };
    Ok(AuditSettings {
        interval_s: interval,
        jitter_s: jitter,
    })
}

/// `[api]`.
pub fn api(a: &ApiConfig, file: &Path) -> Result<ApiSettings, ConfigError> {
    let max_connections = match a.max_connections {
        None => DEFAULT_MAX_CONNECTIONS,
        Some(n @ 1..=100_000) => n,
        Some(n) => {
            return Err(value_error(
                file,
                "api.max_connections",
                n.to_string(),
                "must be from 1 to 100000",
            ))
        }
    };
    let header_timeout_s = match a.header_timeout_s {
        None => DEFAULT_HEADER_TIMEOUT_S,
        Some(n @ 1..=3_600) => n,
        Some(n) => {
            return Err(value_error(
                file,
                "api.header_timeout_s",
                n.to_string(),
                "must be from 1 to 3600 (seconds)",
            ))
        }
    };
    let socket_mode = match &a.socket_mode {
        None => DEFAULT_SOCKET_MODE,
        Some(s) => u32::from_str_radix(s.trim_start_matches("0o"), 8)
            .ok()
            .filter(|m| *m <= 0o777)
            .ok_or_else(|| {
                value_error(
                    file,
                    "api.socket_mode",
                    format!("{s:?}"),
                    "must be an octal mode like \"0660\"",
                )
            })?,
    };
    Ok(ApiSettings {
        socket: a.socket.clone(),
        socket_mode,
        socket_group: a
            .socket_group
            .clone()
            .unwrap_or_else(|| DEFAULT_SOCKET_GROUP.to_string()),
        max_body_bytes: a.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES),
        request_timeout_s: a.request_timeout_s.unwrap_or(DEFAULT_REQUEST_TIMEOUT_S),
        max_connections,
        header_timeout_s,
    })
}

/// `[log]`: the format and the level.
pub fn log(l: &LogConfig, file: &Path) -> Result<LogSettings, ConfigError> {
    let format = match l.format.as_deref() {
        None | Some("text") => LogFormat::Text,
        Some("json") => LogFormat::Json,
        Some(other) => {
            return Err(value_error(
                file,
                "log.format",
                format!("{other:?}"),
                "must be \"text\" or \"json\"",
            ))
        }
    };
    let level = match l.level.as_deref() {
        None => DEFAULT_LOG_LEVEL.to_string(),
        Some(l @ ("error" | "warn" | "info" | "debug" | "trace")) => l.to_string(),
        Some(other) => {
            return Err(value_error(
                file,
                "log.level",
                format!("{other:?}"),
                "must be one of error, warn, info, debug, trace",
            ))
        }
    };
    Ok(LogSettings { format, level })
}

/// `[metrics]`: the listener, off unless set.
pub fn metrics(m: &MetricsConfig, file: &Path) -> Result<MetricsSettings, ConfigError> {
    let listen = match &m.listen {
        None => None,
        Some(s) => Some(s.parse::<std::net::SocketAddr>().map_err(|_| {
            value_error(
                file,
                "metrics.listen",
                format!("{s:?}"),
                "must be an address:port like \"127.0.0.1:9466\"",
            )
        })?),
    };
    Ok(MetricsSettings { listen })
}
