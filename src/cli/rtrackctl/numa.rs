//! `rtrackctl numa`: one screen per host, read at a glance. Per NUMA cell its socket, its
//! cores grouped by L3 domain (with the L3's size) and marked with their core type on hybrid
//! hosts, as a grid of CPUs marked free, shared, pinned by an instance (a letter per instance),
//! kept for an instance's emulator threads or idle next to an `isolate` guest (and `!` when
//! offline), its memory and pages per size, and the PCI devices local to it; CPU power
//! management and the pinned CPUs that are offline.
//!
//! In: the answer of `GET /v1/numa`. Out: the text.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::Value;

/// Letters for instances, in order of first appearance.
const TAGS: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

fn page_size(kb: i64) -> String {
    match kb {
        kb if kb >= 1_048_576 && kb % 1_048_576 == 0 => format!("{}G", kb / 1_048_576),
        kb if kb >= 1024 && kb % 1024 == 0 => format!("{}M", kb / 1024),
        kb => format!("{kb}K"),
    }
}

/// The screen for a `GET /v1/numa` answer.
pub(super) fn numa_screen(v: &Value) -> String {
    let mut out = String::new();
    let mut tags: BTreeMap<String, char> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut tag_of = |inst: &str| -> char {
        if let Some(t) = tags.get(inst) {
            return *t;
        }
        let t = TAGS.chars().nth(order.len()).unwrap_or('*');
        tags.insert(inst.to_string(), t);
        order.push(inst.to_string());
        t
    };
    let cells = v["cells"].as_array().cloned().unwrap_or_default();
    let letters = core_type_letters(&cells);
    if v["legacy_cpus"].as_bool() == Some(true) {
        let _ = writeln!(
            out,
            "No CPU sets configured: every CPU is both shared and dedicated (pinned guests take VCPU)."
        );
    }
    for c in &cells {
        let socket = c["socket"]
            .as_i64()
            .map_or("no single socket".into(), |s| format!("socket {s}"));
        let _ = writeln!(
            out,
            "\nCell {} ({socket}): memory {} MiB, {} MiB used by NUMA guests; shared CPUs {}, {} floating guest CPUs on them; dedicated CPUs {}",
            c["id"],
            c["memory_mb"],
            c["memory_usage_mb"],
            non_empty(c["cpus"].as_str()),
            c["cpu_usage"],
            non_empty(c["pcpus"].as_str()),
        );
        draw_cores(&mut out, c, &letters, &mut tag_of);
        let pages: Vec<String> = c["mempages"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|p| {
                let total = p["total"].as_i64().unwrap_or(0);
                let used = p["used"].as_i64().unwrap_or(0);
                let reserved = p["reserved"].as_i64().unwrap_or(0);
                let mut s = format!(
                    "{} {used}/{total} used, {} free",
                    page_size(p["size_kb"].as_i64().unwrap_or(0)),
                    (total - used - reserved).max(0)
                );
                if reserved > 0 {
                    let _ = write!(s, ", {reserved} reserved");
                }
                if let Some(k) = p["kernel_free"].as_i64() {
                    let _ = write!(s, " (kernel: {k} free)");
                }
                s
            })
            .collect();
        let _ = writeln!(out, "  pages: {}", pages.join("; "));
        let devices = c["pci_devices"].as_array().cloned().unwrap_or_default();
        if !devices.is_empty() {
            // Counts by status, and the devices in use by address (free ones are many).
            let mut by_status: BTreeMap<String, usize> = BTreeMap::new();
            let mut busy = Vec::new();
            for d in &devices {
                let status = d[1].as_str().unwrap_or("?").to_string();
                if status != "available" {
                    busy.push(format!("{} {status}", d[0].as_str().unwrap_or("?")));
                }
                *by_status.entry(status).or_default() += 1;
            }
            let counts: Vec<String> = by_status.iter().map(|(s, n)| format!("{n} {s}")).collect();
            let _ = write!(
                out,
                "  PCI: {} device(s): {}",
                devices.len(),
                counts.join(", ")
            );
            if !busy.is_empty() {
                let shown: Vec<&String> = busy.iter().take(8).collect();
                let more = busy.len().saturating_sub(8);
                let _ = write!(
                    out,
                    "; in use: {}{}",
                    shown
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    }
                );
            }
            let _ = writeln!(out);
        }
    }
    power_lines(&mut out, v, &mut tag_of);
    let _ = writeln!(
        out,
        "\n. free dedicated CPU   s shared CPU   - in neither CPU set   letter: pinned by an instance   * its emulator threads   ~ kept idle beside an isolate guest   ! offline"
    );
    if !letters.is_empty() {
        let _ = writeln!(out, "Core types: {}", core_type_legend(&letters));
    }
    for inst in &order {
        let _ = writeln!(out, "  {} = {inst}", tags[inst]);
    }
    out
}

/// One core as `[cpu mark ...]`, prefixed with its core type's letter on hybrid hosts.
fn core_text(core: &Value, kind: Option<char>, tag_of: &mut dyn FnMut(&str) -> char) -> String {
    let mut cell = String::from(" ");
    if let Some(k) = kind {
        cell.push(k);
    }
    cell.push('[');
    for (i, cpu) in core.as_array().into_iter().flatten().enumerate() {
        if i > 0 {
            cell.push(' ');
        }
        let mark = match cpu["state"].as_str().unwrap_or("") {
            "free" => ".".to_string(),
            "shared" => "s".to_string(),
            "unused" => "-".to_string(),
            state => {
                let t = tag_of(cpu["instance"].as_str().unwrap_or("?"));
                match state {
                    "emulator" => format!("{t}*"),
                    "isolated" => format!("{t}~"),
                    _ => t.to_string(),
                }
            }
        };
        let offline = if cpu["online"].as_bool() == Some(false) {
            "!"
        } else {
            ""
        };
        let _ = write!(cell, "{}{mark}{offline}", cpu["cpu"]);
    }
    cell.push(']');
    cell
}

fn core_type_legend(letters: &[(String, char)]) -> String {
    let legend: Vec<String> = letters
        .iter()
        .map(|(name, letter)| match name.as_str() {
            "IntelCore" => format!("{letter}[..] performance (IntelCore)"),
            "IntelAtom" => format!("{letter}[..] efficiency (IntelAtom)"),
            "IntelLowPower" => format!("{letter}[..] low power (IntelLowPower)"),
            other => format!("{letter}[..] {other}"),
        })
        .collect();
    legend.join("   ")
}

/// The host's core types, in the order the cells list them (performance first), each with the
/// letter that marks its cores: `P` (`IntelCore`), `E` (`IntelAtom`), `L` (`IntelLowPower`);
/// any other kind (`LinuxCapacity=<N>`, one per capacity on big.LITTLE parts) the next of `A`,
/// `B`, `C`, ..., so no two kinds share a letter.
fn core_type_letters(cells: &[Value]) -> Vec<(String, char)> {
    let mut names: Vec<&str> = Vec::new();
    let kinds = cells
        .iter()
        .flat_map(|c| c["core_types"].as_array().into_iter().flatten());
    for name in kinds.filter_map(|k| k["name"].as_str()) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let mut spare = ('A'..='Z').filter(|l| !matches!(l, 'P' | 'E' | 'L'));
    names
        .into_iter()
        .map(|name| {
            let letter = match name {
                "IntelCore" => 'P',
                "IntelAtom" => 'E',
                "IntelLowPower" => 'L',
                _ => spare.next().unwrap_or('?'),
            };
            (name.to_string(), letter)
        })
        .collect()
}

/// The cell's cores, wrapped at 100 columns: one group per L3 domain (with the L3's size) when
/// the cell has L3 facts, else one `cores:` group; each core marked with its type on hybrid
/// hosts.
fn draw_cores(
    out: &mut String,
    c: &Value,
    letters: &[(String, char)],
    tag_of: &mut dyn FnMut(&str) -> char,
) {
    let cpus_of = |v: &Value| -> Vec<u64> {
        v.as_str()
            .and_then(|s| crate::probes::CpuSet::parse_list(s).ok())
            .map(|s| s.iter().map(u64::from).collect())
            .unwrap_or_default()
    };
    let kinds: Vec<(char, Vec<u64>)> = c["core_types"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|k| {
            let name = k["name"].as_str().unwrap_or("?");
            let letter = letters.iter().find(|(n, _)| n == name).map_or('?', |l| l.1);
            (letter, cpus_of(&k["cpus"]))
        })
        .collect();
    let first_cpu = |core: &Value| core[0]["cpu"].as_u64();
    let kind_of = |core: &Value| {
        let cpu = first_cpu(core)?;
        kinds
            .iter()
            .find(|(_, cpus)| cpus.contains(&cpu))
            .map(|(k, _)| *k)
    };
    let cores = c["cores"].as_array().cloned().unwrap_or_default();
    let domains: Vec<Vec<u64>> = c["l3_domains"]
        .as_array()
        .into_iter()
        .flatten()
        .map(cpus_of)
        .collect();
    let mut groups: Vec<(String, Vec<&Value>)> = Vec::new();
    if domains.is_empty() {
        groups.push(("  cores:".into(), cores.iter().collect()));
    } else {
        for (i, d) in domains.iter().enumerate() {
            let size = c["caches"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|k| k["level"] == 3 && cpus_of(&k["cpus"]).iter().any(|x| d.contains(x)))
                .and_then(|k| k["size_kb"].as_u64())
                .map_or(String::new(), |kb| format!(" {}", page_size(kb as i64)));
            let members = cores
                .iter()
                .filter(|core| first_cpu(core).is_some_and(|x| d.contains(&x)))
                .collect();
            groups.push((format!("  L3 #{i}{size}:"), members));
        }
    }
    for (head, members) in groups {
        let mut line = head;
        for core in members {
            let cell = core_text(core, kind_of(core), tag_of);
            if line.len() + cell.len() > 100 {
                let _ = writeln!(out, "{line}");
                line = String::from("        ");
            }
            line.push_str(&cell);
        }
        let _ = writeln!(out, "{line}");
    }
}

/// CPU power management, and the pinned CPUs that are offline (by instance letter).
fn power_lines(out: &mut String, v: &Value, tag_of: &mut dyn FnMut(&str) -> char) {
    if let Some(pm) = v["cpu_power_management"].as_object() {
        let strategy = pm.get("strategy").and_then(Value::as_str).unwrap_or("?");
        let how = if strategy == "governor" {
            format!(
                "governor: {} when idle, {} when pinned",
                pm.get("governor_low")
                    .and_then(Value::as_str)
                    .unwrap_or("?"),
                pm.get("governor_high")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
            )
        } else {
            "cpu_state: dedicated CPUs no guest runs on are offline".to_string()
        };
        let _ = writeln!(out, "\nCPU power management: {how}");
    }
    let pins = v["offline_pinned"].as_array().cloned().unwrap_or_default();
    if pins.is_empty() {
        return;
    }
    let shown: Vec<String> = pins
        .iter()
        .map(|p| {
            let why = if p["powered_down"].as_bool() == Some(true) {
                "powered down, guest not running"
            } else if p["running"].as_bool() == Some(true) {
                "GUEST RUNNING"
            } else {
                "needed when the guest starts"
            };
            format!(
                "{}{} ({why})",
                p["cpu"],
                tag_of(p["instance"].as_str().unwrap_or("?"))
            )
        })
        .collect();
    let _ = writeln!(out, "Pinned CPUs offline: {}", shown.join(", "));
}

fn non_empty(s: Option<&str>) -> &str {
    match s {
        Some("") | None => "none",
        Some(s) => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cores_show_who_holds_each_cpu() {
        let v = json!({"legacy_cpus": false, "base_page_kb": 4, "cells": [{
            "id": 0, "socket": 0, "cpus": "0,4", "pcpus": "1-3,5-7", "cpu_usage": 1, "pinned_cpus": "1,5,2",
            "memory_mb": 4096, "memory_usage_mb": 1024,
            "mempages": [{"size_kb": 4, "total": 1000, "used": 10, "reserved": 0},
                         {"size_kb": 2048, "total": 64, "used": 8, "reserved": 4, "kernel_free": 60}],
            "cores": [[{"cpu": 0, "state": "shared"}, {"cpu": 4, "state": "shared"}],
                      [{"cpu": 1, "state": "pinned", "instance": "u1"}, {"cpu": 5, "state": "pinned", "instance": "u1"}],
                      [{"cpu": 2, "state": "emulator", "instance": "u2"}, {"cpu": 6, "state": "isolated", "instance": "u2"}],
                      [{"cpu": 3, "state": "free"}, {"cpu": 7, "state": "free"}]],
            "pci_devices": [["0000:3b:02.0", "allocated"]]}]});
        let s = numa_screen(&v);
        assert!(
            s.contains("cores: [0s 4s] [1a 5a] [2b* 6b~] [3. 7.]"),
            "{s}"
        );
        assert!(
            s.contains("2M 8/64 used, 52 free, 4 reserved (kernel: 60 free)"),
            "{s}"
        );
        assert!(
            s.contains("PCI: 1 device(s): 1 allocated; in use: 0000:3b:02.0 allocated"),
            "{s}"
        );
        assert!(s.contains("a = u1") && s.contains("b = u2"), "{s}");
    }

    #[test]
    fn cores_are_grouped_by_l3_domain_and_marked_with_their_type() {
        let v = json!({"legacy_cpus": true, "cells": [{
            "id": 0, "socket": 0, "cpus": "0-3", "pcpus": "0-3", "cpu_usage": 0, "pinned_cpus": "",
            "memory_mb": 4096, "memory_usage_mb": 0, "mempages": [],
            "cores": [[{"cpu": 0, "state": "free"}, {"cpu": 1, "state": "free"}],
                      [{"cpu": 2, "state": "pinned", "instance": "u1"}], [{"cpu": 3, "state": "free"}]],
            "pci_devices": [],
            "caches": [{"level": 3, "type": "Unified", "size_kb": 32768, "cpus": "0-1"},
                       {"level": 3, "type": "Unified", "size_kb": 16384, "cpus": "2-3"}],
            "l3_domains": ["0-1", "2-3"],
            "core_types": [{"name": "IntelCore", "cpus": "0-1"}, {"name": "IntelAtom", "cpus": "2-3"}]}]});
        let s = numa_screen(&v);
        assert!(s.contains("  L3 #0 32M: P[0. 1.]\n"), "{s}");
        assert!(s.contains("  L3 #1 16M: E[2a] E[3.]\n"), "{s}");
        assert!(s.contains("Core types: P[..] performance"), "{s}");
    }

    #[test]
    fn each_capacity_of_a_big_little_host_has_a_letter_of_its_own() {
        let core = |cpu: u32| json!([{"cpu": cpu, "state": "free"}]);
        let v = json!({"legacy_cpus": true, "cells": [{
            "id": 0, "socket": 0, "cpus": "0-5", "pcpus": "0-5", "cpu_usage": 0, "pinned_cpus": "",
            "memory_mb": 4096, "memory_usage_mb": 0, "mempages": [], "pci_devices": [],
            "cores": [core(0), core(1), core(2), core(3), core(4), core(5)],
            "core_types": [{"name": "LinuxCapacity=1024", "cpus": "0-1"},
                           {"name": "LinuxCapacity=768", "cpus": "2-3"},
                           {"name": "LinuxCapacity=320", "cpus": "4-5"}]}]});
        let s = numa_screen(&v);
        assert!(
            s.contains("cores: A[0.] A[1.] B[2.] B[3.] C[4.] C[5.]\n"),
            "{s}"
        );
        assert!(
            s.contains("Core types: A[..] LinuxCapacity=1024   B[..] LinuxCapacity=768   C[..] LinuxCapacity=320\n"),
            "{s}"
        );
    }

    #[test]
    fn offline_cpus_and_offline_pins_are_shown() {
        let v = json!({"legacy_cpus": false, "base_page_kb": 4,
            "cpu_power_management": {"strategy": "cpu_state", "governor_low": "powersave", "governor_high": "performance"},
            "offline_pinned": [{"cpu": 2, "instance": "u1", "running": true, "powered_down": false},
                               {"cpu": 3, "instance": "u2", "running": false, "powered_down": true}],
            "cells": [{
            "id": 0, "socket": 0, "cpus": "4", "pcpus": "1-3", "cpu_usage": 0, "pinned_cpus": "2-3",
            "memory_mb": 4096, "memory_usage_mb": 1024, "mempages": [],
            "cores": [[{"cpu": 1, "state": "free", "online": false}], [{"cpu": 2, "state": "pinned", "instance": "u1", "online": false}],
                      [{"cpu": 3, "state": "pinned", "instance": "u2", "online": false}], [{"cpu": 4, "state": "shared", "online": true}]],
            "pci_devices": []}]});
        let s = numa_screen(&v);
        assert!(s.contains("cores: [1.!] [2a!] [3b!] [4s]"), "{s}");
        assert!(
            s.contains(
                "CPU power management: cpu_state: dedicated CPUs no guest runs on are offline"
            ),
            "{s}"
        );
        assert!(
            s.contains(
                "Pinned CPUs offline: 2a (GUEST RUNNING), 3b (powered down, guest not running)"
            ),
            "{s}"
        );
    }
}
