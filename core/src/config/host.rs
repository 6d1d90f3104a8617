//! `[host]`: what to probe, where state and instances live, names, addresses and identity,
//! checked into [`HostSettings`] for [`Config::validate`](super::Config::validate).

use std::path::{Path, PathBuf};

use super::sections::{DEFAULT_HYPERVISOR_TYPE, DEFAULT_INSTANCES_PATH};
use super::{ConfigError, DiskSource, HostConfig, HostSettings};

/// Checks `[host]`; errors name `file`, the key, the value and what is accepted.
pub(super) fn validate(h: &HostConfig, file: &Path) -> Result<HostSettings, ConfigError> {
    let err = |key: &str, value: String, expected: &str| ConfigError::Value {
        file: file.to_path_buf(),
        key: key.to_string(),
        value,
        expected: expected.to_string(),
    };
    for (key, v) in [
        ("host.hypervisor_hostname", &h.hypervisor_hostname),
        ("host.host", &h.host),
        ("host.hypervisor_type", &h.hypervisor_type),
    ] {
        if let Some(v) = v {
            if v.trim().is_empty() || v.len() > 255 {
                return Err(err(key, format!("{v:?}"), "must be 1 to 255 characters"));
            }
        }
    }
    let host_ip = match &h.host_ip {
        None => None,
        Some(s) => Some(s.parse::<std::net::IpAddr>().map_err(|_| {
            err(
                "host.host_ip",
                format!("{s:?}"),
                "must be an IPv4 or IPv6 address",
            )
        })?),
    };
    if let Some(id) = h.service_id.filter(|id| *id < 1) {
        return Err(err(
            "host.service_id",
            id.to_string(),
            "must be a positive integer (the id of the nova-compute Service in Nova's database)",
        ));
    }
    let disk_source = match h.disk_source.as_deref() {
        None | Some("statvfs") => DiskSource::Statvfs,
        Some("caller") => DiskSource::Caller,
        Some(other) => {
            return Err(err(
                "host.disk_source",
                crate::echo::quoted(other),
                "must be \"statvfs\" (the instances path's filesystem) or \"caller\" (the totals POST /v1/refresh gives)",
            ))
        }
    };
    let compute_node_uuid = match &h.compute_node_uuid {
        None => None,
        Some(s) => Some(
            uuid::Uuid::parse_str(s.trim())
                .map_err(|_| {
                    err(
                        "host.compute_node_uuid",
                        crate::echo::quoted(s),
                        "must be a UUID (the compute node's, e.g. from nova-compute's compute_id file)",
                    )
                })?
                .hyphenated()
                .to_string(),
        ),
    };
    let mut probe_root = match &h.root {
        Some(r) => crate::probes::HostRoot::under(r),
        None => crate::probes::HostRoot::system(),
    };
    if let Some(s) = &h.sysfs {
        probe_root.sys = s.clone();
    }
    if let Some(p) = &h.procfs {
        probe_root.proc = p.clone();
    }
    for (key, p) in [
        ("host.root", &h.root),
        ("host.sysfs", &h.sysfs),
        ("host.procfs", &h.procfs),
        ("host.state_dir", &h.state_dir),
        ("host.instances_path", &h.instances_path),
    ] {
        if let Some(p) = p {
            if !p.is_absolute() {
                return Err(err(
                    key,
                    format!("{:?}", p.display().to_string()),
                    "must be an absolute path",
                ));
            }
        }
    }
    Ok(HostSettings {
        probe_root,
        state_dir: h.state_dir.clone(),
        instances_path: h
            .instances_path
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_INSTANCES_PATH)),
        disk_source,
        hypervisor_hostname: h.hypervisor_hostname.clone(),
        host: h.host.clone(),
        hypervisor_type: h
            .hypervisor_type
            .clone()
            .unwrap_or_else(|| DEFAULT_HYPERVISOR_TYPE.to_string()),
        host_ip,
        service_id: h.service_id,
        compute_node_uuid,
    })
}
