//! The configuration file's checks: defaults, unknown keys, values, types.

use super::*;

fn parse(text: &str) -> Result<ValidConfig, ConfigError> {
    let f = Path::new("/etc/rtrack/rtrack.toml");
    Config::parse(text, f)?.validate(f)
}

#[test]
fn empty_file_gives_nova_defaults() {
    let c = parse("").unwrap();
    assert_eq!(c.resources, Resources::default());
    assert_eq!(c.resources.reserved_host_memory_mb, 512);
    assert_eq!(c.host.hypervisor_type, "rtrack");
    assert_eq!(c.host.instances_path, Path::new("/var/lib/nova/instances"));
    assert_eq!(c.host.disk_source, DiskSource::Statvfs);
    assert!(c.host.state_dir.is_none() && c.host.compute_node_uuid.is_none());
    assert!(c.pci.device_specs.is_empty() && c.pci.aliases.is_empty());
    assert!(!c.pci.report_in_placement);
    assert_eq!(
        c.audit,
        AuditSettings {
            interval_s: 60,
            jitter_s: 6
        }
    );
    assert_eq!(
        c.api,
        ApiSettings {
            socket: None,
            socket_mode: 0o660,
            socket_group: "rtrack".into(),
            max_body_bytes: 1 << 20,
            request_timeout_s: 30,
            max_connections: 256,
            header_timeout_s: 10,
        }
    );
    assert_eq!(c.metrics.listen, None);
    assert_eq!(
        c.log,
        LogSettings {
            format: LogFormat::Text,
            level: "info".into()
        }
    );
}

#[test]
fn unknown_keys_are_errors_naming_file_and_key() {
    let e = parse("[resources]\ncpu_alocation_ratio = 2.0\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("/etc/rtrack/rtrack.toml:"), "{e}");
    assert!(e.contains("cpu_alocation_ratio"), "{e}");
    let e = parse("[resourcez]\n").unwrap_err().to_string();
    assert!(e.contains("resourcez"), "{e}");
}

#[test]
fn bad_values_name_key_value_and_what_is_accepted() {
    let e = parse("[resources]\ncpu_allocation_ratio = -1.0\n")
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "/etc/rtrack/rtrack.toml: resources.cpu_allocation_ratio = -1: must be a number greater than 0, e.g. 4.0"
    );
    let e = parse("[audit]\ninterval_s = 0\n").unwrap_err().to_string();
    assert!(
        e.contains("audit.interval_s = 0: must be at least 1"),
        "{e}"
    );
    let e = parse("[api]\nsocket_mode = \"rw\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("api.socket_mode = \"rw\""), "{e}");
    let e = parse("[resources]\ncpu_dedicated_set = \"4-2\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("cpulist"), "{e}");
    let e = parse("[resources]\nvcpu_pin_set = \"0-3\"\ncpu_dedicated_set = \"4-5\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("resources.vcpu_pin_set") && e.contains("unset vcpu_pin_set"),
        "{e}"
    );
    let legacy = parse("[resources]\nvcpu_pin_set = \"0-3\"\ncpu_shared_set = \"4\"\n").unwrap();
    assert!(
        legacy.resources.legacy_cpus(),
        "vcpu_pin_set keeps Nova's legacy mode"
    );
    let e = parse("[resources]\ncpu_dedicated_set = \"0-3\"\ncpu_shared_set = \"3-5\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("CPUs in both: 3"), "{e}");
    let e = parse("[host]\nstate_dir = \"relative\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("host.state_dir"), "{e}");
}

#[test]
fn wrong_types_are_syntax_errors_with_the_key() {
    let e = parse("[resources]\nreserved_host_memory_mb = \"lots\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("reserved_host_memory_mb"), "{e}");
}

#[test]
fn service_id_is_a_positive_database_id() {
    assert_eq!(
        parse("[host]\nservice_id = 7\n").unwrap().host.service_id,
        Some(7)
    );
    let e = parse("[host]\nservice_id = 0\n").unwrap_err().to_string();
    assert!(
        e.contains("host.service_id") && e.contains("positive"),
        "{e}"
    );
}
