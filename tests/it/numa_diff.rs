//! Differential test of NUMA fitting, pinning, hugepages and per-cell usage against real Nova
//! 34 (`nova.virt.hardware`, the libvirt driver's host topology, the NUMATopologyFilter), run by
//! `tests/interop/numa_diff.py` in the venv under `target/nova-functional-venv`.
//!
//! Cases: the named scenarios in `fixtures/numa/scenarios/` (19 from the Nova scenario set, see
//! `fixtures/README.md`, and rtrack's own) and `RTRACK_NUMA_CASES` (default 2,000) seeded random
//! ones from the generator below (hosts of 1-16 cells with and without SMT, hugepages, CPU sets,
//! reserved pages, ratios, packing, and one in eight with dedicated CPUs under CPU power
//! management, some of them offline; sequences of claims, dry runs, frees, resizes with confirm
//! or revert, and restarts with an audit). `RTRACK_NUMA_SEED` changes the seed.
//!
//! CPU power management (`[libvirt] cpu_power_management`): Nova's cells are libvirt's at
//! nova-compute's start (every dedicated CPU powered up), its online CPUs those online now and
//! its available CPUs libvirt's CPU count; rtrack probes the host as it is now (generated sysfs
//! trees for the named scenarios). A configuration both refuse counts as agreement; rtrack's
//! cores of offline CPUs it never saw online are a deliberate difference (explained).
//!
//! Each case runs through rtrack's tracker in-process; its ComputeNode `numa_topology` before
//! every claim goes to Nova's filter. Per step, the test compares: fit or refusal, the host cell
//! of every guest cell, page sizes, pinning up to core and thread order (the number of threads
//! used in each core, and reserved CPUs), and every cell's usage (cpu_usage, memory_usage,
//! pinned CPU count, pages used per size); the filter must accept exactly when rtrack fits.
//! The differences Nova's own bugs explain are counted and listed by case (its fit cache and the
//! page size it keeps between attempts, seen as real Nova disagreeing with Nova's own per-pair
//! fit judged afresh; CPUPinningInvalid after a fit with `isolate` emulator threads); any other
//! difference fails the test. A case stops being compared after a step where the two diverge
//! for such a reason (their states differ from then on).
//!
//! `RTRACK_SKIP_NOVA=1` skips it explicitly.

use crate::support::nova::repo;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use rtrack::config::Config;
use rtrack::probes::{probe_host, CpuSet, HostInventory, HostRoot, ProbeOptions};
use rtrack::tracker::model::{FlavorUsage, HostNames, InstanceRequest};
use rtrack::tracker::numa::constraints::ImageProps;
use rtrack::tracker::numa::{FittedTopology, HostTopology, NumaUsage};
use rtrack::tracker::request::numa_of;
use rtrack::tracker::{
    ClaimError, InstanceInfo, InstanceUpdate, MoveRequest, MoveType, Tracker, TrackerSettings,
    TrackerState,
};
use rtrack_fixtures::real::{unpack, RealFixture};
use serde_json::{json, Value};

use crate::numa_cases;
use numa_cases::{generate, Case, Step};

/// A probe-shaped inventory of explicit cells (no sysfs): what the tracker reads.
fn inventory(case: &Case) -> HostInventory {
    let cpus: Vec<Value> = case
        .host
        .cells
        .iter()
        .flat_map(|c| {
            c.cpus.iter().map(move |cpu| {
                let sib = c
                    .siblings
                    .iter()
                    .find(|s| s.contains(cpu))
                    .cloned()
                    .unwrap_or_else(|| vec![*cpu]);
                json!({"id": cpu, "package": c.socket, "die": null, "cluster": null, "core": cpu,
                       "thread_siblings": CpuSet::from_ids(sib).to_string(), "numa_node": c.id})
            })
        })
        .collect();
    let online = CpuSet::from_ids(case.host.online.iter().copied()).to_string();
    let nodes: Vec<Value> = case
        .host
        .cells
        .iter()
        .map(|c| {
            json!({"id": c.id, "cpus": CpuSet::from_ids(c.cpus.iter().copied()).to_string(),
                   "memory_mb": c.memory_kb / 1024, "memory_kb": c.memory_kb, "free_mb": null,
                   "distances": {}, "has_cpu": !c.cpus.is_empty(), "has_memory": c.memory_kb > 0,
                   "hugepages": c.hugepages.iter().map(|(s, n)| json!({"size_kb": s, "total": n, "free": n})).collect::<Vec<_>>()})
        })
        .collect();
    let total_mb: u64 = case.host.cells.iter().map(|c| c.memory_kb / 1024).sum();
    let inv = serde_json::from_value(json!({
        "host": {"hostname": "numa-diff", "arch": case.host.arch, "kernel": null, "os_release": null},
        "cpu": {"arch": case.host.arch, "vendor": null, "model": null, "flags": [], "sockets": 1,
                "cores": 1, "threads": 1, "cores_per_socket": null, "threads_per_core": null,
                "smt": false, "online": online, "offline": "", "present": online, "possible": online,
                "cpus": cpus},
        "numa_nodes": nodes,
        "memory": {"total_mb": total_mb, "free_mb": null, "available_mb": null,
                   "default_hugepage_size_kb": 2048, "hugepages": [], "base_page_kb": case.host.base_page_kb},
        "disks": {"instances": null, "block_devices": []},
        "pci_devices": [],
        "warnings": []
    }));
    let mut inv = inv.expect("a valid inventory");
    numa_cases::power::take_offline(&mut inv, &case.host);
    inv
}

fn settings(case: &Case) -> TrackerSettings {
    let c = &case.config;
    let mut toml = String::from("[resources]\nreserved_host_memory_mb = 0\n");
    for (k, v) in [
        ("cpu_dedicated_set", &c.cpu_dedicated_set),
        ("cpu_shared_set", &c.cpu_shared_set),
        ("vcpu_pin_set", &c.vcpu_pin_set),
    ] {
        if let Some(v) = v {
            toml.push_str(&format!("{k} = \"{v}\"\n"));
        }
    }
    toml.push_str(&format!(
        "cpu_allocation_ratio = {:?}\nram_allocation_ratio = {:?}\npacking_host_numa_cells_allocation_strategy = {}\n",
        c.cpu_allocation_ratio, c.ram_allocation_ratio, c.packing
    ));
    if c.cpu_power_management {
        toml.push_str("cpu_power_management = true\n");
    }
    if !c.reserved_huge_pages.is_empty() {
        toml.push_str(&format!(
            "reserved_huge_pages = [{}]\n",
            c.reserved_toml().join(", ")
        ));
    }
    if let Some(n) = &c.neutron {
        let names: Vec<String> = n.physnets.keys().map(|p| format!("{p:?}")).collect();
        toml.push_str(&format!("[neutron]\nphysnets = [{}]\n", names.join(", ")));
        for (p, nodes) in &n.physnets {
            toml.push_str(&format!("[neutron_physnet.{p}]\nnuma_nodes = {nodes:?}\n"));
        }
        toml.push_str(&format!("[neutron_tunnel]\nnuma_nodes = {:?}\n", n.tunnel));
    }
    let f = Path::new("numa-diff.toml");
    let cfg = Config::parse(&toml, f)
        .and_then(|c| c.validate(f))
        .unwrap_or_else(|e| panic!("case {}: {e}\n{toml}", case.id));
    TrackerSettings {
        policy: cfg.into(),
        names: HostNames {
            host: "h".into(),
            node: "h".into(),
        },
        node_uuid: "11111111-2222-3333-4444-555555555555".into(),
        node_created_at: time::OffsetDateTime::UNIX_EPOCH,
    }
}

fn uuid_of(id: &str) -> String {
    uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, id.as_bytes())
        .hyphenated()
        .to_string()
}

/// What rtrack answered at one step.
#[derive(Debug, Clone, Default)]
struct RStep {
    result: String,
    error: String,
    fitted: Option<FittedTopology>,
    usage: BTreeMap<u32, Value>,
}

fn request_of(step: &Step) -> Result<Option<InstanceRequest>, String> {
    let f = step.flavor.as_ref().expect("a flavor");
    let mut flavor = FlavorUsage {
        id: 1,
        flavorid: "f".into(),
        name: Some(step.id.clone()),
        vcpus: f.vcpus,
        memory_mb: f.memory_mb,
        root_gb: 0,
        ephemeral_gb: 0,
        swap_mb: 0,
        cpus: None,
        extra_resources: Default::default(),
        mem_encryption_model: None,
        extra_specs: f.extra_specs.clone(),
    };
    let image = json!({"properties": step.image_properties.clone().unwrap_or_default()});
    let props = ImageProps::from_image(image.as_object(), "image").map_err(|e| e.to_string())?;
    let mut numa = numa_of(&mut flavor, &props, None, "flavor").map_err(|e| e.to_string())?;
    if let (Some(n), Some(net)) = (numa.as_mut(), &step.network) {
        n.networks = rtrack::tracker::numa::GuestNetworks {
            physnets: net.physnets.iter().cloned().collect(),
            tunneled: net.tunneled,
        };
    }
    Ok(numa.map(|numa| InstanceRequest {
        flavor,
        is_bfv: true,
        pci_requests: Vec::new(),
        numa: Some(numa),
    }))
}

fn usage_map(t: &Tracker) -> BTreeMap<u32, Value> {
    let u: NumaUsage = t.numa_usage(&t.usage());
    t.numa_host()
        .cells
        .iter()
        .map(|c| {
            let cu = u.cell(c.id);
            (
                c.id,
                json!({"cpu_usage": cu.cpu_usage, "memory_usage": cu.memory_usage_mb,
                          "pinned": cu.pinned.len(), "pages": cu.pages_used}),
            )
        })
        .collect()
}

fn refusal_kind(e: &ClaimError) -> String {
    match e {
        ClaimError::Refused(r) if r.numa.is_some() => "refused".into(),
        ClaimError::Refused(_) => "refused_totals".into(),
        ClaimError::Invalid { .. } => "constraint_error".into(),
        _ => "conflict".into(),
    }
}

/// What rtrack made of a case's host.
struct RHost {
    topology: HostTopology,
    /// The configuration's CPU sets refused on this host (`--check-config`, startup), if so.
    refused: Option<String>,
    /// Some offline CPU's topology is unknown (never seen online): a core of its own.
    uncached_offline: bool,
}

/// Runs a case through rtrack; fills each claim's `rtrack_host` for Nova's filter. `earlier`
/// is a probe the tracker audited before `inv` (it keeps what it saw of CPUs since offline).
fn run_rtrack(
    case: &mut Case,
    inv: HostInventory,
    earlier: Option<HostInventory>,
) -> (Vec<RStep>, RHost) {
    let settings = settings(case);
    let problems = rtrack::tracker::numa::host::config_problems(&inv, &settings.policy.resources);
    if !problems.is_empty() {
        let refused = problems
            .iter()
            .map(|(k, why)| format!("{k}: {why}"))
            .collect::<Vec<_>>()
            .join("; ");
        let host = RHost {
            topology: HostTopology::default(),
            refused: Some(refused),
            uncached_offline: false,
        };
        return (Vec::new(), host);
    }
    let first = earlier.unwrap_or_else(|| inv.clone());
    let mut t = Tracker::new(settings.clone(), first, TrackerState::default());
    let now = time::OffsetDateTime::from_unix_timestamp(1_700_000_000).expect("a time");
    let _ = t.audit(inv, now);
    // The probe as the tracker keeps it (offline CPUs with what it saw of them): restarts
    // below start from these host facts.
    let inv = t.host().clone();
    let host = RHost {
        topology: t.numa_host().clone(),
        refused: None,
        uncached_offline: inv.cpu.offline_cpus.iter().any(|c| !c.topology_cached),
    };
    let mut out = Vec::new();
    let mut migrations: BTreeMap<String, i64> = BTreeMap::new();
    let mut next_migration = 1;
    for step in &mut case.steps {
        let mut r = RStep::default();
        let uuid = uuid_of(&step.id);
        match step.op.as_str() {
            "resize"
                if !t.state().instances.contains_key(&uuid)
                    || migrations.contains_key(&step.id) =>
            {
                r.result = "unknown".into();
            }
            "claim" | "check" | "resize" => {
                let usage = t.usage();
                let node = t.compute_node(&usage, now);
                step.rtrack_host = match &node.obj.numa_topology {
                    rtrack::objects::NField::Set(s) => Some(s.clone()),
                    _ => None,
                };
                match request_of(step) {
                    Err(e) => {
                        r.result = "constraint_error".into();
                        r.error = e;
                    }
                    Ok(None) => r.result = "no_numa".into(),
                    Ok(Some(req)) if step.op == "resize" => {
                        let id = next_migration;
                        let info = InstanceInfo {
                            uuid: uuid.clone(),
                            vm_state: Some("active".into()),
                            task_state: Some("resize_prep".into()),
                            host: Some("h".into()),
                            node: Some("h".into()),
                            ..Default::default()
                        };
                        let mut new = req;
                        new.flavor.id = 2;
                        let mv = MoveRequest {
                            instance: info,
                            current: None,
                            new,
                            current_numa: None,
                            move_type: Some(MoveType::Resize),
                            migration_id: Some(id),
                            migration_uuid: None,
                            source_compute: None,
                            source_node: None,
                            dest_compute: None,
                            dest_node: None,
                        };
                        match t.move_claim(&mv, 1, false) {
                            Ok((o, _)) => {
                                next_migration += 1;
                                migrations.insert(step.id.clone(), id);
                                r.result = "fitted".into();
                                r.fitted = o.claim.numa_topology.as_deref().cloned();
                            }
                            Err(e) => {
                                r.result = refusal_kind(&e);
                                r.error = e.to_string();
                            }
                        }
                    }
                    Ok(Some(req)) => {
                        let info = InstanceInfo {
                            uuid: uuid.clone(),
                            ..Default::default()
                        };
                        match t.instance_claim(&info, &req, 1, step.op == "check") {
                            Ok((o, _)) => {
                                r.result = "fitted".into();
                                r.fitted = o.claim.numa_topology.as_deref().cloned();
                            }
                            Err(e) => {
                                r.result = refusal_kind(&e);
                                r.error = e.to_string();
                            }
                        }
                    }
                }
            }
            "free" => {
                let up = InstanceUpdate {
                    vm_state: Some("deleted".into()),
                    ..Default::default()
                };
                r.result = match t.update_instance(&uuid, &up) {
                    Ok(_) => "freed".into(),
                    Err(_) => "unknown".into(),
                };
                migrations.remove(&step.id);
            }
            "confirm" | "revert" => {
                r.result = match migrations.remove(&step.id) {
                    Some(id) => {
                        let res = if step.op == "confirm" {
                            t.confirm_move(id, 2)
                        } else {
                            t.revert_move(id, 2)
                        };
                        match res {
                            Ok(_) => "freed".into(),
                            Err(e) => format!("error: {e}"),
                        }
                    }
                    None => "unknown".into(),
                };
            }
            "audit" => {
                // A restart: the records as the store holds them, a fresh tracker, an audit.
                let state = t.state().clone();
                t = Tracker::new(settings.clone(), inv.clone(), state);
                let _ = t.audit(inv.clone(), now);
                r.result = "audited".into();
            }
            other => panic!("case {}: unknown op {other}", case.id),
        }
        r.usage = usage_map(&t);
        out.push(r);
    }
    (out, host)
}

const POWER_UNSEEN: &str = "offline dedicated CPUs rtrack never saw online are cores of their own; Nova read their siblings with every dedicated CPU powered up at its start (docs/differences.md)";

/// How Nova's fitted cells differ from rtrack's, beyond core and thread order: host cells,
/// page sizes, threads used per core, reserved CPUs. `None` when they agree.
fn placement_diff(
    nova: &[Value],
    ours: &FittedTopology,
    nova_siblings: &BTreeMap<u32, Vec<Vec<u32>>>,
    our_siblings: &BTreeMap<u32, Vec<Vec<u32>>>,
) -> Option<String> {
    if nova.len() != ours.cells.len() {
        return Some(format!(
            "Nova fitted {} cells, rtrack {}",
            nova.len(),
            ours.cells.len()
        ));
    }
    let hosts: Vec<u64> = nova
        .iter()
        .filter_map(|c| c["host_cell"].as_u64())
        .collect();
    let our_hosts: Vec<u64> = ours.cells.iter().map(|c| u64::from(c.host_cell)).collect();
    if hosts != our_hosts {
        return Some(format!(
            "host cells differ: Nova {hosts:?}, rtrack {our_hosts:?}"
        ));
    }
    for (nc, oc) in nova.iter().zip(&ours.cells) {
        let npage = nc["pagesize"].as_i64();
        if npage != oc.pagesize_kb {
            return Some(format!(
                "page size differs on host cell {}: Nova {npage:?}, rtrack {:?}",
                oc.host_cell, oc.pagesize_kb
            ));
        }
        let npins: Vec<u32> = nc["cpu_pinning"]
            .as_object()
            .map(|m| {
                m.values()
                    .filter_map(|v| v.as_u64())
                    .map(|v| v as u32)
                    .collect()
            })
            .unwrap_or_default();
        let opins: Vec<u32> = oc.cpu_pinning.values().copied().collect();
        let nshape = core_shape(
            &npins,
            nova_siblings
                .get(&oc.host_cell)
                .map(Vec::as_slice)
                .unwrap_or_default(),
        );
        let oshape = core_shape(
            &opins,
            our_siblings
                .get(&oc.host_cell)
                .map(Vec::as_slice)
                .unwrap_or_default(),
        );
        let nres = nc["cpuset_reserved"].as_array().map_or(0, Vec::len);
        let ores = oc.cpuset_reserved.as_ref().map_or(0, CpuSet::len);
        if nshape != oshape || nres != ores {
            return Some(format!("pinning differs beyond core and thread order on host cell {}: Nova threads per core {nshape:?} reserved {nres}, rtrack {oshape:?} reserved {ores}", oc.host_cell));
        }
    }
    None
}

/// Threads used per core (sorted), by the host CPUs given, with `siblings` as the cores.
fn core_shape(cpus: &[u32], siblings: &[Vec<u32>]) -> Vec<usize> {
    let mut per: Vec<usize> = siblings
        .iter()
        .map(|s| s.iter().filter(|c| cpus.contains(c)).count())
        .filter(|n| *n > 0)
        .collect();
    per.sort_unstable();
    per
}

#[derive(Default)]
struct Tally {
    steps: usize,
    compared: usize,
    fitted: usize,
    refused: usize,
    constraint_errors: usize,
    filter_checked: usize,
    /// Configurations both refuse (CPU sets the host does not give).
    config_refused: usize,
    explained: BTreeMap<&'static str, Vec<String>>,
    failures: Vec<String>,
}

/// Whether Nova's cells (`host_cell` of each guest cell, in order) are rtrack's.
fn same_host_cells(nova: &Value, ours: &RStep) -> bool {
    let theirs: Vec<u64> = nova
        .as_array()
        .map(|cells| {
            cells
                .iter()
                .filter_map(|c| c["host_cell"].as_u64())
                .collect()
        })
        .unwrap_or_default();
    let mine: Vec<u64> = ours
        .fitted
        .as_ref()
        .map(|t| t.cells.iter().map(|c| u64::from(c.host_cell)).collect())
        .unwrap_or_default();
    !mine.is_empty() && theirs == mine
}

fn nova_cells(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}

/// Compares one case; returns at the first divergence.
fn compare(case: &Case, ours: &[RStep], rhost: &RHost, nova: &Value, tally: &mut Tally) {
    let id = &case.id;
    let our_host = &rhost.topology;
    match (
        nova.get("host_error").and_then(Value::as_str),
        &rhost.refused,
    ) {
        (Some(e), Some(_)) if e.starts_with("Invalid") => {
            tally.config_refused += 1;
            return;
        }
        (_, Some(why)) => {
            tally.failures.push(format!(
                "{id}: rtrack refuses the configuration ({why}), Nova {}",
                nova.get("host_error")
                    .map_or("accepts it".to_string(), |e| e.to_string())
            ));
            return;
        }
        _ => {}
    }
    if let Some(e) = nova.get("crash").or(nova.get("host_error")) {
        tally
            .failures
            .push(format!("{id}: the Nova harness failed: {e}"));
        return;
    }
    // The host: what the libvirt driver builds from the same facts.
    let nova_host = nova["host"].as_array().cloned().unwrap_or_default();
    let nova_siblings: BTreeMap<u32, Vec<Vec<u32>>> = nova_host
        .iter()
        .map(|c| {
            (
                c["id"].as_u64().unwrap_or(0) as u32,
                serde_json::from_value(c["siblings"].clone()).unwrap_or_default(),
            )
        })
        .collect();
    for (n, o) in nova_host.iter().zip(&our_host.cells) {
        let mut sibs: Vec<Vec<u32>> = o.siblings.iter().map(|s| s.iter().collect()).collect();
        sibs.sort();
        let ours = json!({
            "id": o.id, "socket": o.socket,
            "cpuset": o.cpuset.iter().collect::<Vec<_>>(), "pcpuset": o.pcpuset.iter().collect::<Vec<_>>(),
            "siblings": sibs,
            "memory": o.memory_mb,
            "mempages": o.pages.iter().map(|p| json!({"size_kb": p.size_kb, "total": p.total, "reserved": p.reserved})).collect::<Vec<_>>(),
        });
        if &ours != n {
            if rhost.uncached_offline {
                tally
                    .explained
                    .entry(POWER_UNSEEN)
                    .or_default()
                    .push(id.clone());
                return;
            }
            tally.failures.push(format!(
                "{id}: host cell differs\n  nova:   {n}\n  rtrack: {ours}"
            ));
            return;
        }
    }
    if nova_host.len() != our_host.cells.len() {
        tally.failures.push(format!(
            "{id}: Nova has {} host cells, rtrack {}",
            nova_host.len(),
            our_host.cells.len()
        ));
        return;
    }
    let our_siblings: BTreeMap<u32, Vec<Vec<u32>>> = our_host
        .cells
        .iter()
        .map(|c| {
            (
                c.id,
                c.siblings.iter().map(|s| s.iter().collect()).collect(),
            )
        })
        .collect();
    let steps = nova["steps"].as_array().cloned().unwrap_or_default();
    for (i, (n, o)) in steps.iter().zip(ours).enumerate() {
        tally.steps += 1;
        let at = format!(
            "{id} step {i} ({} {})",
            n["op"].as_str().unwrap_or(""),
            n["id"].as_str().unwrap_or("")
        );
        let nres = n["result"].as_str().unwrap_or("");
        let nocache = &n["nocache"];
        let explain = |why: &'static str, tally: &mut Tally| {
            tally.explained.entry(why).or_default().push(at.clone());
        };
        match (nres, o.result.as_str()) {
            ("constraint_error", "constraint_error") => {
                tally.constraint_errors += 1;
                tally.compared += 1;
                continue;
            }
            ("no_numa", "no_numa") => {
                tally.compared += 1;
                continue;
            }
            ("error", "refused")
                if n["error"]
                    .as_str()
                    .is_some_and(|e| e.starts_with("CPUPinningInvalid")) =>
            {
                explain("Nova fits isolate + isolated emulator threads next to a busy sibling, then fails to pin (CPUPinningInvalid); rtrack refuses", tally);
                return;
            }
            ("error", "fitted")
                if n["error"]
                    .as_str()
                    .is_some_and(|e| e.starts_with("CPUPinningInvalid")) =>
            {
                explain("Nova fits isolate + isolated emulator threads next to a busy sibling, then fails to pin (CPUPinningInvalid); rtrack reserves a whole free core", tally);
                return;
            }
            // Nova's cached fit hands one host cell's pins to another guest cell (the error
            // names CPUs of a cell the guest cell is not on); judged afresh, Nova fits the guest
            // on the same host cells as rtrack.
            ("error", "fitted")
                if n["error"]
                    .as_str()
                    .is_some_and(|e| e.starts_with("CPUPinningUnknown"))
                    && nocache["result"] == "fitted"
                    && same_host_cells(&nocache["cells"], o) =>
            {
                explain("Nova's fit cache pins a guest cell with another host cell's CPUs, then fails to apply it (CPUPinningUnknown); Nova's own fit, judged afresh, takes the same host cells as rtrack", tally);
                return;
            }
            _ => {}
        }
        if nres == "fitted" && o.result == "refused_totals" {
            explain("Placement's totals (VCPU, PCPU, MEMORY_MB with their max_unit) refuse what Nova's NUMA code alone would place; rtrack checks both, as the scheduler does", tally);
            return;
        }
        let ours_fitted = o.result == "fitted";
        if ["claim", "check", "resize"].contains(&n["op"].as_str().unwrap_or(""))
            && nres != o.result.as_str()
        {
            let nc_agrees = nocache["result"].as_str() == Some(o.result.as_str());
            if nc_agrees && (nres == "fitted" || nres == "refused") {
                explain("Nova's fit cache or the page size it keeps between attempts (Nova's own per-pair fit, judged afresh, agrees with rtrack)", tally);
                return;
            }
            tally.failures.push(format!(
                "{at}: Nova {nres} {}, rtrack {} {}",
                n["error"].as_str().unwrap_or(""),
                o.result,
                o.error
            ));
            return;
        }
        if nres == "fitted" && ours_fitted {
            let fitted = o.fitted.as_ref().expect("a fitted topology");
            let real = placement_diff(
                &nova_cells(&n["cells"]),
                fitted,
                &nova_siblings,
                &our_siblings,
            );
            if let Some(why) = real {
                if placement_diff(
                    &nova_cells(&nocache["cells"]),
                    fitted,
                    &nova_siblings,
                    &our_siblings,
                )
                .is_none()
                {
                    explain("Nova's fit cache or the page size it keeps between attempts (Nova's own per-pair fit, judged afresh, agrees with rtrack)", tally);
                    return;
                }
                tally.failures.push(format!("{at}: {why}"));
                return;
            }
        }
        if let Some(f) = n.get("filter").and_then(Value::as_bool) {
            tally.filter_checked += 1;
            if f != ours_fitted && n["op"] != "resize" {
                tally.failures.push(format!("{at}: Nova's NUMATopologyFilter on rtrack's ComputeNode says {f}, rtrack's claim {}", o.result));
                return;
            }
        }
        // Usage of every cell after the step.
        for cell in n["usage"].as_array().cloned().unwrap_or_default() {
            let cid = cell["id"].as_u64().unwrap_or(0) as u32;
            let ou = &o.usage[&cid];
            let pinned = cell["pinned_cpus"].as_array().map_or(0, Vec::len);
            let mut differs = cell["cpu_usage"] != ou["cpu_usage"]
                || cell["memory_usage"] != ou["memory_usage"]
                || json!(pinned) != ou["pinned"];
            for (size, used) in cell["pages_used"].as_object().cloned().unwrap_or_default() {
                if ou["pages"].get(&size).cloned().unwrap_or(json!(0)) != used {
                    differs = true;
                }
            }
            if differs {
                tally.failures.push(format!(
                    "{at}: usage of cell {cid} differs\n  nova:   {cell}\n  rtrack: {ou}"
                ));
                return;
            }
        }
        tally.compared += 1;
        match o.result.as_str() {
            "fitted" => tally.fitted += 1,
            "refused" => tally.refused += 1,
            _ => {}
        }
    }
}

/// A case from a real machine's tree: the cells as rtrack's probe reads them.
fn probed(case: &mut Case, fixture: &str) -> HostInventory {
    let f = RealFixture::named(fixture);
    let u = unpack(f);
    let inv = probe_host(&HostRoot::under(&u.root), &ProbeOptions::default()).expect("a probe");
    case.host.online = inv.cpu.online.iter().collect();
    case.host.arch = inv.cpu.arch.clone().unwrap_or_else(|| "x86_64".into());
    case.host.base_page_kb =
        inv.memory
            .base_page_kb
            .unwrap_or(if case.host.arch.starts_with("ppc64") {
                64
            } else {
                4
            });
    let mut inv = inv;
    inv.memory.base_page_kb = Some(case.host.base_page_kb);
    case.host.cells = numa_cases::power::cells_of(&inv);
    inv
}

#[test]
fn numa_fitting_pinning_and_usage_agree_with_nova() {
    let Some(venv) = crate::support::nova::venv("the NUMA differential test") else {
        return;
    };
    let count: usize = std::env::var("RTRACK_NUMA_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let seed: u64 = std::env::var("RTRACK_NUMA_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_261_125);
    let mut cases = numa_cases::named(&repo().join("fixtures/numa/scenarios"));
    let named = cases.len();
    cases.extend(generate(seed, count));
    // RTRACK_NUMA_ONLY=<case id>: that case alone, with both sides' answers printed.
    let only = std::env::var("RTRACK_NUMA_ONLY").ok();
    if let Some(o) = &only {
        cases.retain(|c| &c.id == o);
    }
    let mut runs = Vec::with_capacity(cases.len());
    for case in &mut cases {
        let (inv, earlier) = match (case.root.clone(), case.power_host.is_some()) {
            (Some(fixture), _) => (probed(case, &fixture), None),
            (None, true) => numa_cases::power::power_host(case),
            (None, false) => (inventory(case), None),
        };
        runs.push(run_rtrack(case, inv, earlier));
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let input = dir.path().join("cases.json");
    std::fs::write(
        &input,
        serde_json::to_vec(&json!({"cases": cases})).expect("json"),
    )
    .expect("write cases");
    let started = std::time::Instant::now();
    let out = Command::new(venv.join("bin/python"))
        .arg("-W")
        .arg("ignore")
        .arg(repo().join("tests/interop/numa_diff.py"))
        .arg(&input)
        .output()
        .expect("run numa_diff.py");
    assert!(
        out.status.success(),
        "numa_diff.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(answers.len(), cases.len(), "one answer per case");
    let mut tally = Tally::default();
    if only.is_some() {
        for ((case, (ours, _)), nova) in cases.iter().zip(&runs).zip(&answers) {
            eprintln!("case: {}", serde_json::to_string(case).unwrap_or_default());
            eprintln!("nova: {nova}");
            for (i, s) in ours.iter().enumerate() {
                eprintln!(
                    "rtrack step {i}: {} {} {:?} {:?}",
                    s.result,
                    s.error,
                    s.fitted.as_ref().map(|t| t
                        .cells
                        .iter()
                        .map(|c| (c.host_cell, c.pagesize_kb, c.cpu_pinning.clone()))
                        .collect::<Vec<_>>()),
                    s.usage
                );
            }
        }
    }
    for ((case, (ours, host)), nova) in cases.iter().zip(&runs).zip(&answers) {
        compare(case, ours, host, nova, &mut tally);
    }
    let with_networks = cases
        .iter()
        .flat_map(|c| &c.steps)
        .filter(|s| s.network.is_some())
        .count();
    let mut report = format!(
        "NUMA differential test against Nova 34: {} cases ({named} named, {count} generated with seed {seed}; {} with CPU power management), {} steps ({with_networks} on networks with a NUMA affinity), {} compared in full ({} fitted, {} refused, {} constraint errors), Nova's filter checked on rtrack's ComputeNode {} times, {} configurations refused by both; Nova took {:.1} s\n",
        cases.len(), cases.iter().filter(|c| c.config.cpu_power_management).count(), tally.steps, tally.compared, tally.fitted, tally.refused, tally.constraint_errors, tally.filter_checked, tally.config_refused, started.elapsed().as_secs_f64()
    );
    for (why, at) in &tally.explained {
        report.push_str(&format!("explained ({} cases): {why}\n", at.len()));
        for a in at.iter().take(20) {
            report.push_str(&format!("    {a}\n"));
        }
    }
    let _ = std::fs::write(repo().join("target/numa-diff-report.txt"), &report);
    eprintln!("{report}");
    assert!(
        tally.failures.is_empty(),
        "{} unexplained differences (first 10):\n{}",
        tally.failures.len(),
        tally
            .failures
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        tally.fitted > count / 4 && tally.refused > count / 20,
        "the cases exercise both fits and refusals: {report}"
    );
}
