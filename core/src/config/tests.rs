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
    assert_eq!(c.audit_interval_s, 60);
    assert_eq!(c.socket_mode, 0o660);
    assert_eq!(c.hypervisor_type, "rtrack");
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
        parse("[host]\nservice_id = 7\n").unwrap().service_id,
        Some(7)
    );
    let e = parse("[host]\nservice_id = 0\n").unwrap_err().to_string();
    assert!(
        e.contains("host.service_id") && e.contains("positive"),
        "{e}"
    );
}
