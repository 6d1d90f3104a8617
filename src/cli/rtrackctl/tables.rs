//! `rtrackctl`'s human output: aligned tables of usage, claims and migrations, one-line claim
//! summaries. `--json` bypasses all of this.
//!
//! In: rtrackd's JSON answers (usage, claims, migrations). Out: aligned text for stdout, numbers
//! right-aligned.

use std::fmt::Write as _;

use serde_json::Value;

pub(super) fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

pub(super) fn resources_text(v: &Value) -> String {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

pub(super) fn claim_line(c: &Value) -> String {
    let devices: Vec<&str> = c["pci_devices"]
        .as_array()
        .map(|a| a.iter().filter_map(|d| d["address"].as_str()).collect())
        .unwrap_or_default();
    let mut s = format!(
        "{} {}",
        c["instance_uuid"].as_str().unwrap_or("?"),
        resources_text(&c["resources"])
    );
    if !devices.is_empty() {
        let _ = write!(s, " PCI {}", devices.join(","));
    }
    // vGPUs: each mdev with its parent, `new` when the hypervisor side is to create it.
    let mdevs: Vec<String> = c["mdevs"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|m| {
                    format!(
                        "{}@{}{}",
                        m["uuid"].as_str().unwrap_or("?"),
                        m["parent"].as_str().unwrap_or("?"),
                        if m["existing"] == Value::Bool(false) {
                            "(new)"
                        } else {
                            ""
                        }
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    if !mdevs.is_empty() {
        let _ = write!(s, " MDEV {}", mdevs.join(","));
    }
    // vPMEM: each namespace with its character device.
    let pmem: Vec<String> = c["pmem_namespaces"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|n| {
                    format!(
                        "{}@{}",
                        n["name"].as_str().unwrap_or("?"),
                        n["devpath"].as_str().unwrap_or("?")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    if !pmem.is_empty() {
        let _ = write!(s, " PMEM {}", pmem.join(","));
    }
    s
}

/// Columns of numbers are right-aligned, the others left-aligned.
pub(super) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    let numeric: Vec<bool> = (0..header.len())
        .map(|i| {
            rows.iter().all(|r| {
                r.get(i)
                    .is_none_or(|c| c == "-" || c.parse::<f64>().is_ok())
            })
        })
        .collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(c.len());
            }
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if numeric[i] {
                    format!("{c:>w$}", w = widths[i])
                } else {
                    format!("{c:<w$}", w = widths[i])
                }
            })
            .collect();
        let _ = writeln!(out, "{}", parts.join("  ").trim_end());
    };
    line(header.to_vec(), &mut out);
    for r in rows {
        line(r.iter().map(String::as_str).collect(), &mut out);
    }
    out
}

pub(super) fn num(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub(super) fn usage_table(v: &Value) -> String {
    let rows: Vec<Vec<String>> = v["resources"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, r)| {
                    vec![
                        k.clone(),
                        num(&r["total"]),
                        num(&r["reserved"]),
                        num(&r["allocation_ratio"]),
                        num(&r["capacity"]),
                        num(&r["used"]),
                        num(&r["free"]),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    let mut out = table(
        &[
            "RESOURCE", "TOTAL", "RESERVED", "RATIO", "CAPACITY", "USED", "FREE",
        ],
        &rows,
    );
    let pools: Vec<Vec<String>> = v["pci_pools"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| {
                    vec![
                        format!(
                            "{}:{}",
                            p["vendor_id"].as_str().unwrap_or("?"),
                            p["product_id"].as_str().unwrap_or("?")
                        ),
                        p["tags"]["dev_type"].as_str().unwrap_or("-").to_string(),
                        num(&p["numa_node"]),
                        p["tags"]["address"].as_str().unwrap_or("-").to_string(),
                        num(&p["total"]),
                        num(&p["free"]),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    if !pools.is_empty() {
        out.push('\n');
        out.push_str(&table(
            &["PCI POOL", "TYPE", "NUMA", "ADDRESS", "TOTAL", "FREE"],
            &pools,
        ));
    }
    let cells: Vec<Vec<String>> = v["numa_cells"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    let pages: Vec<String> = c["mempages"]
                        .as_array()
                        .map(|p| {
                            p.iter()
                                .skip(1)
                                .filter(|p| p["total"].as_i64().unwrap_or(0) > 0)
                                .map(|p| {
                                    format!(
                                        "{}K {}/{}",
                                        num(&p["size_kb"]),
                                        num(&p["used"]),
                                        num(&p["total"])
                                    )
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    let dash = |s: &Value| match s.as_str() {
                        Some("") | None => "-".to_string(),
                        Some(s) => s.to_string(),
                    };
                    vec![
                        num(&c["id"]),
                        dash(&c["cpus"]),
                        num(&c["cpu_usage"]),
                        dash(&c["pcpus"]),
                        dash(&c["pinned_cpus"]),
                        format!("{}/{}", num(&c["memory_usage_mb"]), num(&c["memory_mb"])),
                        if pages.is_empty() {
                            "-".into()
                        } else {
                            pages.join(" ")
                        },
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    if !cells.is_empty() {
        out.push('\n');
        out.push_str(&table(
            &[
                "NUMA",
                "SHARED",
                "FLOATING",
                "DEDICATED",
                "PINNED",
                "MEMORY_MB",
                "HUGEPAGES (used/total)",
            ],
            &cells,
        ));
    }
    let _ = writeln!(
        out,
        "\n{} instance(s), {} claim(s), {} migration(s) in progress",
        num(&v["instances"]),
        num(&v["claims"]),
        num(&v["migrations_in_progress"])
    );
    out
}

pub(super) fn claims_table(list: &[Value]) -> String {
    if list.is_empty() {
        return "no claims\n".into();
    }
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|c| {
            let r = &c["resources"];
            vec![
                c["instance_uuid"].as_str().unwrap_or("?").to_string(),
                num(&c["migration_id"]),
                num(&r["VCPU"]),
                num(&r["PCPU"]),
                num(&r["MEMORY_MB"]),
                num(&r["DISK_GB"]),
                c["pci_devices"]
                    .as_array()
                    .map(|a| a.len().to_string())
                    .unwrap_or_else(|| "0".into()),
                pmem_names(c),
                c["claimed_at"].as_str().unwrap_or("-").to_string(),
            ]
        })
        .collect();
    table(
        &[
            "INSTANCE",
            "MIGRATION",
            "VCPU",
            "PCPU",
            "MEMORY_MB",
            "DISK_GB",
            "PCI",
            "PMEM",
            "CLAIMED_AT",
        ],
        &rows,
    )
}

/// A claim's vPMEM namespaces by name, `-` for none.
fn pmem_names(c: &Value) -> String {
    let names: Vec<&str> = c["pmem_namespaces"]
        .as_array()
        .map(|a| a.iter().filter_map(|n| n["name"].as_str()).collect())
        .unwrap_or_default();
    if names.is_empty() {
        "-".into()
    } else {
        names.join(",")
    }
}

pub(super) fn migrations_table(list: &[Value]) -> String {
    if list.is_empty() {
        return "no migrations\n".into();
    }
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|m| {
            vec![
                num(&m["id"]),
                m["instance_uuid"].as_str().unwrap_or("?").to_string(),
                m["migration_type"].as_str().unwrap_or("?").to_string(),
                m["status"].as_str().unwrap_or("?").to_string(),
                format!(
                    "{}/{}",
                    m["source_compute"].as_str().unwrap_or("-"),
                    m["source_node"].as_str().unwrap_or("-")
                ),
                format!(
                    "{}/{}",
                    m["dest_compute"].as_str().unwrap_or("-"),
                    m["dest_node"].as_str().unwrap_or("-")
                ),
            ]
        })
        .collect();
    table(
        &["ID", "INSTANCE", "TYPE", "STATUS", "SOURCE", "DESTINATION"],
        &rows,
    )
}
