//! Independent oracles: the probes must agree with what other tools read from the same
//! real-machine trees: `lspci -nn -vmm -D` (pciutils), `lscpu -J` (util-linux) and hwloc's
//! `lstopo` output (`.console` / `.xml`). The oracle files were produced by those tools, not by
//! rtrack (see fixtures/README.md).
//!
//! Known disagreements are listed in `KNOWN_DISAGREEMENTS` with the reason; each is still
//! asserted, against the value rtrack is expected to give instead.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test or bench: a panic is its failure

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use rtrack_fixtures::real::{unpack, RealFixture, REAL_FIXTURES};
use rtrack_probes::pci::{NumaSource, PciDevice};
use rtrack_probes::{probe_host, CpuSet, HostInventory, HostRoot, ProbeOptions};

fn probe(fixture: &RealFixture) -> HostInventory {
    let unpacked = unpack(fixture);
    probe_host(&HostRoot::under(&unpacked.root), &ProbeOptions::default())
        .unwrap_or_else(|e| panic!("{}: {e}", fixture.name))
}

// ---------------------------------------------------------------------------------------------
// lspci -vmm

#[derive(Debug, Default)]
struct LspciDevice {
    slot: String,
    class: String,
    vendor: String,
    vendor_name: String,
    device: String,
    device_name: String,
    svendor: Option<String>,
    sdevice: Option<String>,
    rev: Option<String>,
    prog_if: Option<String>,
    numa: Option<u32>,
}

/// `Name [abcd]` -> ("Name", "abcd")
fn split_bracket(v: &str) -> (String, String) {
    match v.rfind(" [") {
        Some(i) if v.ends_with(']') => (v[..i].to_string(), v[i + 2..v.len() - 1].to_string()),
        _ => (
            String::new(),
            v.trim_matches(|c| c == '[' || c == ']').to_string(),
        ),
    }
}

fn parse_lspci(text: &str) -> Vec<LspciDevice> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut d = LspciDevice::default();
        for line in block.lines() {
            let Some((k, v)) = line.split_once(":\t") else {
                continue;
            };
            match k {
                "Slot" => d.slot = v.to_string(),
                "Class" => d.class = split_bracket(v).1,
                "Vendor" => (d.vendor_name, d.vendor) = split_bracket(v),
                "Device" => (d.device_name, d.device) = split_bracket(v),
                "SVendor" => d.svendor = Some(split_bracket(v).1),
                "SDevice" => d.sdevice = Some(split_bracket(v).1),
                "Rev" => d.rev = Some(v.to_string()),
                "ProgIf" => d.prog_if = Some(v.to_string()),
                "NUMANode" => d.numa = Some(v.parse().expect("NUMANode number")),
                _ => {}
            }
        }
        if !d.slot.is_empty() {
            out.push(d);
        }
    }
    out
}

fn check_against_lspci(fixture: &RealFixture, inv: &HostInventory, oracle: &Path) {
    let text = std::fs::read_to_string(oracle).unwrap();
    let expected = parse_lspci(&text);
    assert!(!expected.is_empty(), "{}: empty oracle", oracle.display());
    let ours: BTreeMap<String, &PciDevice> = inv
        .pci_devices
        .iter()
        .map(|d| (d.address.to_string(), d))
        .collect();
    let theirs: BTreeSet<&str> = expected.iter().map(|d| d.slot.as_str()).collect();
    let ours_set: BTreeSet<&str> = ours.keys().map(String::as_str).collect();
    assert_eq!(
        ours_set, theirs,
        "{}: PCI address sets differ",
        fixture.name
    );
    let mut name_checks = 0;
    for e in &expected {
        let d = ours[&e.slot];
        let ctx = format!("{} {}", fixture.name, e.slot);
        assert_eq!(d.vendor_id, e.vendor, "{ctx}: vendor");
        assert_eq!(d.product_id, e.device, "{ctx}: device");
        // lspci's Class is class+subclass; ProgIf is the low byte (omitted when 00 on some
        // versions).
        assert_eq!(&d.class[..4], e.class, "{ctx}: class");
        assert_eq!(
            &d.class[4..],
            e.prog_if.as_deref().unwrap_or("00"),
            "{ctx}: prog-if"
        );
        if let Some(rev) = &e.rev {
            assert_eq!(d.revision.as_deref(), Some(rev.as_str()), "{ctx}: revision");
        }
        if let Some(sv) = &e.svendor {
            assert_eq!(
                d.subsystem_vendor_id.as_deref(),
                Some(sv.as_str()),
                "{ctx}: subsystem vendor"
            );
        }
        if let Some(sd) = &e.sdevice {
            assert_eq!(
                d.subsystem_product_id.as_deref(),
                Some(sd.as_str()),
                "{ctx}: subsystem device"
            );
        }
        // lspci prints the kernel's numa_node and omits -1. rtrack may place a -1 device through
        // local_cpulist; that must say so in numa_node_source.
        match e.numa {
            Some(n) => {
                assert_eq!(d.numa_node, Some(n), "{ctx}: NUMA node");
                assert_eq!(d.numa_node_source, Some(NumaSource::NumaNode), "{ctx}");
            }
            None => assert_ne!(
                d.numa_node_source,
                Some(NumaSource::NumaNode),
                "{ctx}: NUMA"
            ),
        }
        // Names: both databases know most devices; where both give a name it must be the same
        // vendor (product names differ between pci.ids snapshots only for renamed entries).
        if !e.vendor_name.is_empty() && !e.vendor_name.starts_with("Vendor") {
            assert_eq!(
                d.vendor_name.as_deref(),
                Some(e.vendor_name.as_str()),
                "{ctx}: vendor name"
            );
            name_checks += 1;
        }
    }
    assert!(
        name_checks > 0,
        "{}: no vendor names compared",
        fixture.name
    );
}

// ---------------------------------------------------------------------------------------------
// lscpu -J

fn lscpu_fields(path: &Path) -> BTreeMap<String, String> {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut out = BTreeMap::new();
    fn walk(items: &serde_json::Value, out: &mut BTreeMap<String, String>) {
        for item in items.as_array().into_iter().flatten() {
            let field = item["field"]
                .as_str()
                .unwrap_or_default()
                .trim_end_matches(':')
                .to_string();
            let data = match &item["data"] {
                serde_json::Value::String(s) => s.clone(),
                _ => String::new(),
            };
            out.insert(field, data);
            if let Some(children) = item.get("children") {
                walk(children, out);
            }
        }
    }
    walk(&v["lscpu"], &mut out);
    out
}

/// Fields where rtrack deliberately differs from lscpu on a fixture, and what rtrack gives.
const KNOWN_DISAGREEMENTS: &[(&str, &str, &str, &str)] = &[
    // lscpu reads only the *_list topology files, which this capture lacks; rtrack falls back to
    // the masks (core_cpus, package_cpus) and agrees with hwloc: 2 packages, 8 cores.
    (
        "hwloc-fakememinitiators-1np2c+1npp+gi",
        "Socket(s)",
        "0",
        "2",
    ),
    (
        "hwloc-fakememinitiators-1np2c+1npp+gi",
        "Core(s) per socket",
        "0",
        "4",
    ),
    (
        "hwloc-fakememinitiators-1np2c+1npp+gi",
        "Thread(s) per core",
        "0",
        "1",
    ),
    // A hybrid part: 6 P-cores with 2 threads, 8 E-cores with 1. lscpu prints the threads of
    // the first core; rtrack reports null threads_per_core (not uniform), as for sockets.
    (
        "hwloc-20em64t-hybrid-1p6c2t+2ca4co1t",
        "Thread(s) per core",
        "2",
        "null",
    ),
    // lscpu prints one section per kind of ARM core (main ID register), each with its own
    // "Core(s) per socket" (four sections of 5 on a GB10); the package has 20 cores, as
    // hwloc counts them.
    ("hwloc-nvidia-dgx-gb10", "Core(s) per socket", "5", "20"),
    // 17 online cores split 9 + 8 over two sockets: lscpu prints 17 / 2 = 8 (integer division);
    // rtrack reports null cores_per_socket (not uniform) and 17 cores, as hwloc counts.
    (
        "hwloc-offline-cpu0-node0",
        "Core(s) per socket",
        "8",
        "null",
    ),
];

fn check_against_lscpu(fixture: &RealFixture, inv: &HostInventory, oracle: &Path) {
    let f = lscpu_fields(oracle);
    let cpu = &inv.cpu;
    let name = fixture.name;
    let ours = |field: &str| -> String {
        match field {
            "Socket(s)" => cpu.sockets.to_string(),
            "Core(s) per socket" => cpu
                .cores_per_socket
                .map_or("null".into(), |v| v.to_string()),
            "Thread(s) per core" => cpu
                .threads_per_core
                .map_or("null".into(), |v| v.to_string()),
            _ => unreachable!(),
        }
    };
    for field in ["Socket(s)", "Core(s) per socket", "Thread(s) per core"] {
        let theirs = &f[field];
        match KNOWN_DISAGREEMENTS
            .iter()
            .find(|(n, fl, _, _)| *n == name && *fl == field)
        {
            Some((_, _, lscpu_says, rtrack_says)) => {
                assert_eq!(theirs, lscpu_says, "{name}: oracle changed for {field}");
                assert_eq!(ours(field), *rtrack_says, "{name}: {field}");
            }
            None => assert_eq!(&ours(field), theirs, "{name}: {field}"),
        }
    }
    let online = CpuSet::parse_list(&f["On-line CPU(s) list"]).unwrap();
    assert_eq!(cpu.online, online, "{name}: online CPUs");
    if let Some(off) = f.get("Off-line CPU(s) list") {
        assert_eq!(
            cpu.offline,
            CpuSet::parse_list(off).unwrap(),
            "{name}: offline CPUs"
        );
    }
    let nodes: usize = f["NUMA node(s)"].parse().unwrap();
    assert_eq!(inv.numa_nodes.len(), nodes, "{name}: NUMA node count");
    for node in &inv.numa_nodes {
        let key = format!("NUMA node{} CPU(s)", node.id);
        let theirs = f
            .get(&key)
            .unwrap_or_else(|| panic!("{name}: lscpu has no {key}"));
        let theirs = if theirs == "None" {
            String::new()
        } else {
            theirs.clone()
        };
        assert_eq!(
            node.cpus,
            CpuSet::parse_list(&theirs).unwrap(),
            "{name}: {key}"
        );
    }
    // "-": lscpu (util-linux 2.38.1) has no name for the ARM part (Cortex-X925/A725 of a GB10).
    if let Some(model) = f.get("Model name").filter(|m| *m != "-") {
        assert_eq!(cpu.model.as_deref(), Some(model.as_str()), "{name}: model");
    }
    if let Some(vendor) = f.get("Vendor ID") {
        assert_eq!(
            cpu.vendor.as_deref(),
            Some(vendor.as_str()),
            "{name}: vendor"
        );
    }
    // "46 bits physical, 57 bits virtual": lscpu reads the same line libvirt does.
    if let Some(sizes) = f.get("Address sizes") {
        let physical: u32 = sizes
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{name}: Address sizes {sizes:?}"));
        assert_eq!(
            cpu.maxphysaddr_bits,
            Some(physical),
            "{name}: address sizes"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// hwloc lstopo output: packages, cores and PUs of the topology tree.

struct HwlocCounts {
    packages: usize,
    cores: usize,
    pus: CpuSet,
}

fn hwloc_console_counts(text: &str) -> HwlocCounts {
    let mut packages = 0;
    let mut cores = 0;
    let mut pus = CpuSet::new();
    for line in text.lines() {
        let t = line.trim_start();
        // Tree lines only ("Core L#3 (P#5)"); later sections mention objects in parentheses.
        if t.starts_with("Package L#") && t.contains("(P#") {
            packages += 1;
        } else if t.starts_with("Core L#") {
            cores += 1;
        } else if let Some(rest) = t.strip_prefix("PU L#") {
            let p = rest
                .split("(P#")
                .nth(1)
                .and_then(|s| s.split(')').next())
                .unwrap();
            pus.insert(p.parse().unwrap());
        }
    }
    HwlocCounts {
        packages,
        cores,
        pus,
    }
}

fn hwloc_xml_counts(text: &str) -> HwlocCounts {
    let mut pus = CpuSet::new();
    for chunk in text.split("type=\"PU\"").skip(1) {
        let p = chunk
            .split("os_index=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap();
        pus.insert(p.parse().unwrap());
    }
    HwlocCounts {
        packages: text.matches("type=\"Package\"").count(),
        cores: text.matches("type=\"Core\"").count(),
        pus,
    }
}

fn check_against_hwloc(fixture: &RealFixture, inv: &HostInventory, counts: HwlocCounts) {
    let name = fixture.name;
    assert_eq!(
        inv.cpu.sockets as usize, counts.packages,
        "{name}: packages (hwloc)"
    );
    assert_eq!(
        inv.cpu.cores as usize, counts.cores,
        "{name}: cores (hwloc)"
    );
    assert_eq!(inv.cpu.online, counts.pus, "{name}: PUs (hwloc)");
}

// ---------------------------------------------------------------------------------------------
// hwloc lstopo output: caches of level 2 and above, and CPU kinds.

/// A cache as hwloc shows it: level, type, size as lstopo prints it, CPUs.
type HwlocCache = (u32, String, String, CpuSet);

/// lstopo's size text: `hwloc_memory_size_printf_value` rounds to KiB below 10 MiB, to MiB
/// below 10 GiB, else GiB.
fn hwloc_size(bytes: u64) -> String {
    if bytes < 10 << 20 {
        format!("{}KiB", ((bytes >> 9) + 1) >> 1)
    } else if bytes < 10 << 30 {
        format!("{}MiB", ((bytes >> 19) + 1) >> 1)
    } else {
        format!("{}GiB", ((bytes >> 29) + 1) >> 1)
    }
}

/// `L3Cache` -> (3, Unified); `L2dCache` -> (2, Data); `L2iCache` -> (2, Instruction).
fn hwloc_cache_kind(name: &str) -> Option<(u32, String)> {
    let rest = name.strip_prefix('L')?.strip_suffix("Cache")?;
    let (digits, kind) = match rest.chars().last()? {
        'd' => (&rest[..rest.len() - 1], "Data"),
        'i' => (&rest[..rest.len() - 1], "Instruction"),
        _ => (rest, "Unified"),
    };
    Some((digits.parse().ok()?, kind.to_string()))
}

/// The caches of a `.console` tree: each cache's CPUs are the PUs indented below it.
fn hwloc_console_caches(text: &str) -> Vec<HwlocCache> {
    let mut out = Vec::new();
    // Open caches: (indent, level, type, size, PUs so far).
    let mut open: Vec<(usize, u32, String, String, CpuSet)> = Vec::new();
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        let t = line.trim_start();
        if !t.contains(" L#") {
            continue;
        }
        while open.last().is_some_and(|o| o.0 >= indent) {
            let (_, l, k, s, c) = open.pop().unwrap();
            out.push((l, k, s, c));
        }
        let name = t.split_whitespace().next().unwrap_or("");
        if let Some((level, kind)) = hwloc_cache_kind(name).filter(|(l, _)| *l >= 2) {
            let size = t
                .split("size=")
                .nth(1)
                .and_then(|s| s.split([' ', ')']).next())
                .unwrap_or("")
                .to_string();
            open.push((indent, level, kind, size, CpuSet::new()));
        } else if let Some(rest) = t.strip_prefix("PU L#") {
            let p: u32 = rest
                .split("(P#")
                .nth(1)
                .and_then(|s| s.split(')').next())
                .and_then(|s| s.parse().ok())
                .unwrap();
            for o in &mut open {
                o.4.insert(p);
            }
        }
    }
    out.extend(open.into_iter().map(|(_, l, k, s, c)| (l, k, s, c)));
    out
}

fn xml_attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    tag.split(&format!(" {name}=\"")).nth(1)?.split('"').next()
}

/// The caches of an hwloc `.xml` export (`cpuset` is a bitmap of `0x`-prefixed 32-bit words).
fn hwloc_xml_caches(text: &str) -> Vec<HwlocCache> {
    let mut out = Vec::new();
    for tag in text.split("<object ").skip(1) {
        let tag = format!(" {}", tag.split('>').next().unwrap_or(""));
        let tag = tag.as_str();
        let Some(kind) = xml_attr(tag, "type").and_then(hwloc_cache_kind) else {
            continue;
        };
        let level: u32 = xml_attr(tag, "depth").unwrap().parse().unwrap();
        if level < 2 {
            continue;
        }
        let kind = match xml_attr(tag, "cache_type") {
            Some("1") => "Data",
            Some("2") => "Instruction",
            _ => kind.1.as_str(),
        }
        .to_string();
        let size: u64 = xml_attr(tag, "cache_size").unwrap().parse().unwrap();
        let map = xml_attr(tag, "cpuset").unwrap().replace("0x", "");
        out.push((
            level,
            kind,
            hwloc_size(size),
            CpuSet::parse_map(&map).unwrap(),
        ));
    }
    out
}

/// One hwloc CPU kind: its CPUs and its infos as `Name=Value` (a `CoreType` also as its bare
/// value, `IntelAtom`: the name rtrack gives it).
type HwlocKind = (CpuSet, Vec<String>);

fn hwloc_info(name: &str, value: &str) -> Vec<String> {
    let value = value.trim_matches('"');
    let mut out = vec![format!("{name}={value}")];
    if name == "CoreType" {
        out.push(value.to_string());
    }
    out
}

/// The CPU kinds section of a `.console`: `CPU kind #0 efficiency 0 cpuset 0x…` and the
/// indented `Name = Value` lines under it.
fn hwloc_console_cpu_kinds(text: &str) -> Vec<HwlocKind> {
    let mut out: Vec<HwlocKind> = Vec::new();
    let mut in_kind = false;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("CPU kind #") {
            let map = rest
                .split(" cpuset ")
                .nth(1)
                .unwrap()
                .trim()
                .replace("0x", "");
            out.push((CpuSet::parse_map(&map).unwrap(), Vec::new()));
            in_kind = true;
        } else if let (true, Some(kind)) = (in_kind, out.last_mut()) {
            match line.strip_prefix("  ").and_then(|l| l.split_once(" = ")) {
                Some((k, v)) => kind.1.extend(hwloc_info(k.trim(), v.trim())),
                None => in_kind = false,
            }
        }
    }
    out
}

/// The `<cpukind cpuset="0x…">` elements of an hwloc `.xml` export and their `<info>`.
fn hwloc_xml_cpu_kinds(text: &str) -> Vec<HwlocKind> {
    let mut out = Vec::new();
    for block in text.split("<cpukind ").skip(1) {
        let head = format!(" {}", block.split('>').next().unwrap_or(""));
        let map = xml_attr(&head, "cpuset").unwrap().replace("0x", "");
        let body = block.split("</cpukind>").next().unwrap_or("");
        let infos = body
            .split("<info ")
            .skip(1)
            .flat_map(|tag| {
                let tag = format!(" {tag}");
                hwloc_info(
                    xml_attr(&tag, "name").unwrap(),
                    xml_attr(&tag, "value").unwrap(),
                )
            })
            .collect();
        out.push((CpuSet::parse_map(&map).unwrap(), infos));
    }
    out
}

/// One kind (or none listed) is no core types; else the same kinds, each named by one of
/// hwloc's infos of it.
fn check_core_types_against_hwloc(name: &str, inv: &HostInventory, theirs: &[HwlocKind]) {
    if theirs.len() <= 1 {
        assert!(inv.core_types.is_empty(), "{name}: core types");
        return;
    }
    assert_eq!(inv.core_types.len(), theirs.len(), "{name}: {theirs:?}");
    for kind in &inv.core_types {
        let infos = theirs
            .iter()
            .find(|(cpus, _)| *cpus == kind.cpus)
            .map(|(_, infos)| infos)
            .unwrap_or_else(|| panic!("{name}: no hwloc kind has the CPUs of {kind:?}"));
        assert!(infos.contains(&kind.name), "{name}: {kind:?} vs {infos:?}");
    }
}

fn check_caches_against_hwloc(fixture: &RealFixture, inv: &HostInventory, theirs: Vec<HwlocCache>) {
    let name = fixture.name;
    let mut ours: Vec<HwlocCache> = inv
        .caches
        .iter()
        .map(|c| {
            let size = hwloc_size(c.size_kb.unwrap_or(0) << 10);
            (c.level, c.kind.clone(), size, c.cpus.clone())
        })
        .collect();
    let mut theirs = theirs;
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs, "{name}: caches (hwloc)");
}

// ---------------------------------------------------------------------------------------------

#[test]
fn caches_and_core_types_agree_with_hwloc_on_every_real_fixture_that_has_them() {
    let dir = rtrack_fixtures::fixtures_dir().join("oracles");
    let mut compared = Vec::new();
    let mut hybrid = Vec::new();
    for fixture in REAL_FIXTURES {
        let base = fixture.name.strip_prefix("hwloc-").unwrap_or(fixture.name);
        let console = std::fs::read_to_string(dir.join(format!("{base}.console")));
        let xml = std::fs::read_to_string(dir.join(format!("{base}.xml"))).or_else(|_| {
            std::fs::read_to_string(dir.join(format!("{base}.lstopo.from-fixture.xml")))
        });
        let theirs = match (&console, &xml) {
            (Ok(text), _) => hwloc_console_caches(text),
            (_, Ok(text)) => hwloc_xml_caches(text),
            _ => continue,
        };
        let inv = probe(fixture);
        check_caches_against_hwloc(fixture, &inv, theirs);
        let kinds = match (&console, &xml) {
            (Ok(text), _) => hwloc_console_cpu_kinds(text),
            (_, Ok(text)) => hwloc_xml_cpu_kinds(text),
            _ => Vec::new(),
        };
        check_core_types_against_hwloc(fixture.name, &inv, &kinds);
        if !inv.caches.is_empty() {
            compared.push(fixture.name);
        }
        if kinds.len() > 1 {
            hybrid.push(fixture.name);
        }
    }
    assert_eq!(
        hybrid,
        [
            "hwloc-20em64t-hybrid-1p6c2t+2ca4co1t",
            "hwloc-nvidia-dgx-gb10"
        ]
    );
    // Guard against an oracle silently not being found: every fixture with an lstopo output
    // and cache directories.
    assert_eq!(compared.len(), 14, "{compared:?}");
}

#[test]
fn every_real_fixture_agrees_with_its_oracles() {
    let mut lspci = 0;
    let mut lscpu = 0;
    let mut hwloc = 0;
    for fixture in REAL_FIXTURES {
        let inv = probe(fixture);
        if let Some(p) = fixture
            .oracle_file("lspci-nn-vmm-D.txt")
            .or_else(|| fixture.oracle_file("lspci-nn-vmm-D.from-fixture.txt"))
        {
            check_against_lspci(fixture, &inv, &p);
            lspci += 1;
        }
        if let Some(p) = fixture
            .oracle_file("lscpu-J.json")
            .or_else(|| fixture.oracle_file("lscpu-J.from-fixture.json"))
        {
            check_against_lscpu(fixture, &inv, &p);
            lscpu += 1;
        }
        let base = fixture.name.strip_prefix("hwloc-").unwrap_or("");
        let dir = rtrack_fixtures::fixtures_dir().join("oracles");
        if let Ok(text) = std::fs::read_to_string(dir.join(format!("{base}.console"))) {
            check_against_hwloc(fixture, &inv, hwloc_console_counts(&text));
            hwloc += 1;
        } else if let Ok(text) =
            std::fs::read_to_string(dir.join(format!("{base}.xml"))).or_else(|_| {
                let name = fixture.name;
                std::fs::read_to_string(dir.join(format!("{name}.lstopo.from-fixture.xml")))
            })
        {
            check_against_hwloc(fixture, &inv, hwloc_xml_counts(&text));
            hwloc += 1;
        }
    }
    // Guard against an oracle silently not being found.
    assert_eq!((lspci, lscpu, hwloc), (4, 11, 15));
}

#[test]
fn this_vm_fixture_matches_the_live_lspci_of_the_machine_it_was_taken_on() {
    let fixture = RealFixture::named("this-vm");
    let inv = probe(fixture);
    check_against_lspci(
        fixture,
        &inv,
        &fixture.oracle_file("lspci-nn-vmm-D.live.txt").unwrap(),
    );
}
