//! The answer schemas of the reads that describe the host: the `--once` inventory report
//! (`GET /v1/inventory`) and the NUMA cells of `GET /v1/usage` and `GET /v1/numa`. Written here,
//! not derived: they are the probes' and the core's types, which do not depend on utoipa (the
//! other answers are derived from `api::views`).
//!
//! In: nothing. Out: their JSON schemas (OpenAPI 3.1: JSON Schema 2020-12), referenced from the document's
//! components.

use serde_json::{json, Value};

use super::schema_ref;

/// The `--once` report (`docs/inventory.md`): the keys tools read.
pub fn inventory_report_schema() -> Value {
    let mut v = json!({"type": "object", "description": "docs/inventory.md; the keys tools read", "properties": {
                "rtrack_version": {"type": "string"}, "probed_at": {"type": "string"},
                "host": {"type": "object"}, "cpu": {"type": "object"}, "numa_nodes": {"type": "array", "items": {"type": "object"}},
                "memory": {"type": "object"}, "disks": {"type": "object"}, "pci_devices": {"type": "array", "items": {"type": "object"}},
                "vdpa_devices": {"type": "array", "description": "absent when there are none", "items": {"type": "object", "properties": {
                    "name": {"type": "string"}, "pci_parent": {"type": ["string", "null"]},
                    "driver": {"type": ["string", "null"]}, "chardev": {"type": ["string", "null"]}}}},
                "dedicated_cpus": {"type": "object", "description": "absent without cpu_dedicated_set", "properties": {
                    "power_management": {"type": ["object", "null"]},
                    "cpus": {"type": "array", "items": {"type": "object", "properties": {
                        "cpu": {"type": "integer"}, "numa_node": {"type": ["integer", "null"]},
                        "state": {"type": "string", "enum": ["online", "offline", "absent"]},
                        "governor": {"type": ["string", "null"]}, "counted": {"type": "boolean"}}}}}},
                "mediated_devices": {"type": "object", "properties": {
                    "parents": {"type": "array", "items": {"type": "object", "properties": {
                        "address": {"type": "string"},
                        "types": {"type": "array", "items": {"type": "object", "properties": {
                            "type": {"type": "string"}, "name": {"type": ["string", "null"]},
                            "device_api": {"type": ["string", "null"]},
                            "available_instances": {"type": ["integer", "null"]},
                            "description": {"type": ["string", "null"]}}}}}}},
                    "devices": {"type": "array", "items": {"type": "object", "properties": {
                        "uuid": {"type": "string"}, "parent": {"type": ["string", "null"]}, "type": {"type": ["string", "null"]}}}}}},
                "memory_encryption": {"type": "object", "properties": {
                    "sev": {"type": ["boolean", "null"]}, "sev_es": {"type": ["boolean", "null"]},
                    "sev_snp": {"type": ["boolean", "null"]}, "sev_firmware": {"type": ["boolean", "null"]},
                    "sev_guests": {"type": ["integer", "null"]}, "sev_es_guests": {"type": ["integer", "null"]},
                    "tdx": {"type": ["boolean", "null"]}, "tdx_guests": {"type": ["integer", "null"]},
                    "tdx_host_platform": {"type": ["boolean", "null"]}}},
                "warnings": {"type": "array", "items": {"type": "object", "properties": {"path": {"type": "string"}, "message": {"type": "string"}}}},
                "compute_node": {"type": "object"}}});
    v["properties"]["caches"] = caches_schema();
    v["properties"]["core_types"] = core_types_schema();
    v["properties"]["pmem_namespaces"] = pmem_namespaces_schema();
    v["properties"]["offered"] = offered_schema();
    v["properties"]["uptime"] = json!({"type": "object", "properties": {
        "seconds": {"type": ["integer", "null"]},
        "load_average": {"type": ["array", "null"], "items": {"type": "number"}}}});
    // Every key but the ones a host may not have.
    let required: Vec<Value> = v["properties"]
        .as_object()
        .map(|p| {
            p.keys()
                .filter(|k| !matches!(k.as_str(), "dedicated_cpus" | "vdpa_devices" | "offered"))
                .map(|k| Value::String(k.clone()))
                .collect()
        })
        .unwrap_or_default();
    v["required"] = Value::Array(required);
    v
}

/// The probe's persistent memory namespaces.
fn pmem_namespaces_schema() -> Value {
    json!({"type": "array", "items": {"type": "object", "properties": {
        "dev": {"type": "string"}, "name": {"type": ["string", "null"]}, "mode": {"type": ["string", "null"]},
        "enabled": {"type": "boolean"}, "size": {"type": ["integer", "null"], "format": "int64"},
        "align": {"type": ["integer", "null"], "format": "int64"}, "devpath": {"type": ["string", "null"]},
        "dax_driver": {"type": ["string", "null"]}, "numa_node": {"type": ["integer", "null"]},
        "uuid": {"type": ["string", "null"]}}}})
}

/// What the host offers guests under the configuration.
fn offered_schema() -> Value {
    json!({"type": "object", "description": "what the host offers guests under the configuration: memory encryption contexts per model, the Intel TDX decision, vPMEM namespaces", "properties": {
        "memory_encryption": {"type": "object", "additionalProperties": {"type": "integer"}},
        "intel_tdx": {"type": "object", "properties": {
            "supported": {"type": "boolean"}, "why_not": {"type": ["string", "null"]},
            "cgroup_capacity": {"type": ["integer", "null"]}, "configured": {"type": ["integer", "null"]},
            "slots": {"type": "integer"}}},
        "pmem_namespaces": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "label": {"type": "string"}, "resource_class": {"type": "string"},
            "devpath": {"type": "string"}, "size": {"type": "integer", "format": "int64"}, "align": {"type": "integer", "format": "int64"}}}},
        "warnings": {"type": "array", "items": {"type": "string"}}}})
}

/// One NUMA cell in `GET /v1/usage` (`tracker::numa::report::CellReport`).
pub fn numa_cell_schema() -> Value {
    json!({"type": "object", "description": "One host NUMA cell; cpulists as strings", "properties": {
                "id": {"type": "integer"}, "cpus": {"type": "string", "description": "shared CPUs (Nova's cpuset)"},
                "pcpus": {"type": "string", "description": "dedicated CPUs (Nova's pcpuset)"},
                "cpu_usage": {"type": "integer", "description": "floating guest CPUs placed on the cell"},
                "pinned_cpus": {"type": "string"}, "memory_mb": {"type": "integer"}, "memory_usage_mb": {"type": "integer"},
                "mempages": {"type": "array", "items": {"type": "object", "properties": {
                    "size_kb": {"type": "integer"}, "total": {"type": "integer"}, "used": {"type": "integer"},
                    "reserved": {"type": "integer"}, "kernel_free": {"type": ["integer", "null"], "description": "hugepage pools only"}}}}}})
}

/// One NUMA cell in `GET /v1/numa` (`tracker::numa::report::CellDetail`).
pub fn numa_detail_schema() -> Value {
    json!({"allOf": [schema_ref("NumaCell"), {"type": "object", "properties": {
                "socket": {"type": ["integer", "null"]},
                "cores": {"type": "array", "items": {"type": "array", "items": {"type": "object", "properties": {
                    "cpu": {"type": "integer"},
                    "state": {"type": "string", "enum": ["free", "shared", "pinned", "emulator", "isolated", "unused"]},
                    "instance": {"type": "string", "format": "uuid"},
                    "online": {"type": "boolean"},
                    "governor": {"type": "string", "description": "cpufreq governor, read for dedicated CPUs under power management"}}}}},
                "pci_devices": {"type": "array", "items": {"type": "array", "items": {"type": "string"}, "description": "[address, status]"}},
                "caches": caches_schema(),
                "l3_domains": {"type": "array", "items": {"type": "string", "description": "cpulist"}, "description": "the cell's CPUs by L3 domain"},
                "core_types": core_types_schema()}}]})
}

/// CPU cache instances of level 2 and above (`--once`'s `caches`, a cell's in `GET /v1/numa`).
fn caches_schema() -> Value {
    json!({"type": "array", "description": "one per cache instance of level 2 and above", "items": {"type": "object", "properties": {
        "level": {"type": "integer"}, "type": {"type": "string", "enum": ["Unified", "Data", "Instruction"]},
        "size_kb": {"type": ["integer", "null"]}, "cpus": {"type": "string", "description": "cpulist"}}}})
}

/// Core types of hybrid parts (empty with one kind of core).
fn core_types_schema() -> Value {
    json!({"type": "array", "description": "hybrid hosts only", "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "cpus": {"type": "string", "description": "cpulist"}}}})
}
