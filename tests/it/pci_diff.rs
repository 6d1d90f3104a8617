//! Differential test of rtrack's PCI tracker against real Nova 34 (`nova.pci.manager`,
//! `nova.pci.stats`, the PciDevice state machine, `nova.compute.claims`,
//! `nova.compute.pci_placement_translator`), run by `tests/interop/pci_diff.py` in the venv
//! under `target/nova-functional-venv`.
//!
//! Cases: the named scenarios in `tests/it/pci_cases/mod.rs` (tags, tie order, parent_ifname
//! layouts, PF/VF exclusivity, NUMA policies, one-time use, Placement's provider mapping, live
//! migration with ports, attach and detach, restarts, dry runs, vDPA devices, and one minimal
//! case per difference found) and `RTRACK_PCI_CASES` (default 800) seeded random ones (1-4 PFs
//! with 0-16 VFs, plain functions, 1-2 NUMA nodes in 1-2 sockets, netdevs or not; specs by
//! vendor/product with networks, trusted, live_migratable, one_time_use; aliases; 5-15 steps of
//! claims with 1-3 requests, dry runs, frees, restarts, attach and detach; one case in six with
//! vDPA devices on some VFs of a PF and `vnic_type=vdpa` ports). `RTRACK_PCI_SEED`
//! changes the seed; `RTRACK_PCI_ONLY=<case id>` runs that case alone and prints both sides'
//! answers (with `-- --nocapture`).
//!
//! Each case runs through rtrack's tracker in-process on a synthetic sysfs tree; what rtrack
//! tracked (every probed function, the NUMA cells and sockets, the provider uuids, the cells it
//! placed each NUMA guest on, the providers of each request as Placement would allocate them)
//! goes to Nova, which runs the same steps in one process (two halves run in parallel). Per
//! step the test compares: granted or refused; the pool each request's devices came from (which
//! device of a pool is taken differs by design); then the pools (in order, with counts and, with
//! Placement, rp_uuid; Nova's pools at count 0 left out) and the number of devices per status in
//! each pool. An instance claim (and a dry run) is Nova's Claim._test_pci then claim_instance, a
//! dry run also the NUMA fit's support_requests on the guest's cells; a live migration's
//! destination claim and an attach are claim_instance alone. A NUMA guest rtrack refuses is asked
//! of Nova on every cell it would fit on. The tally (also in `target/pci-diff-report.txt`) is
//! printed at the end.
//!
//! Deliberate differences (docs/differences.md) are counted by kind, and a case stops being
//! compared after one of them changed either side's state: Nova's claim_instance failing
//! half-way and leaking (`nova-half-way-leak`; a leak of request ids alone changes nothing
//! claims use, so the case goes on), an alias defined twice without device_type
//! (`nova-alias-dev-type`), one provider's devices in two pools with rp_uuids
//! (`provider-split-pools`), a one-time-use device kept reserved after use
//! (`one-time-use-held`), Nova's pool order after a pool emptied and refilled (`nova-pool-order`:
//! it goes to the end; rtrack orders pools as a restarted Nova does), a live migration's
//! destination devices `claimed` in Nova and `allocated` in rtrack (`move-claim-status`), and
//! rp_uuids naming a provider with too few devices left (`nova-under-allocation`: Nova gives
//! fewer devices than asked, rtrack refuses). Anything else fails the test with the case, the
//! step and both answers. `RTRACK_PCI_ALL=1` lists every case of each kind.
//!
//! `RTRACK_SKIP_NOVA=1` skips it explicitly.

use crate::support::nova::repo;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use rtrack::config::Config;
use rtrack::probes::pci::PciAddress;
use rtrack::probes::{probe_host, CpuSet, HostInventory, HostRoot, ProbeOptions};
use rtrack::tracker::model::{FlavorUsage, HostNames, InstanceRequest, PciRequest};
use rtrack::tracker::numa::{GuestCell, GuestTopology};
use rtrack::tracker::pci::{AliasTable, NumaPolicy, PoolKey};
use rtrack::tracker::request::alias_requests;
use rtrack::tracker::{
    ClaimError, InstanceInfo, MoveRequest, MoveType, Tracker, TrackerSettings, TrackerState,
};
use rtrack_fixtures::synthetic::{PlainFunction, SyntheticHost, SyntheticPf};
use serde_json::{json, Value};

use crate::pci_cases;
use pci_cases::{Case, Op, Rng, Step};

const NODE: &str = "compute1";

fn uuid_of(s: &str) -> String {
    uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, s.as_bytes())
        .hyphenated()
        .to_string()
}

fn instance_uuid(n: u32) -> String {
    format!("00000000-0000-4000-8000-{n:012}")
}

/// Writes the case's host as a sysfs tree and probes it.
fn probe(case: &Case) -> HostInventory {
    let h = &case.host;
    let cores_per_socket = (2 * h.numa_nodes / h.sockets).max(2);
    let synthetic = SyntheticHost {
        description: format!("synthetic: PCI differential case {}", case.id),
        sockets: h.sockets,
        numa_nodes: h.numa_nodes,
        cores_per_socket,
        threads_per_core: 1,
        memory_mb_per_node: h.memory_mb_per_node,
        hugepages_2m_per_node: 0,
        pfs: h
            .pfs
            .iter()
            .map(|p| {
                let mut s = SyntheticPf::e810(&p.address, p.vfs, p.numa, p.vf_driver.as_deref());
                s.vendor_id = p.vendor;
                s.pf_device_id = p.pf_product;
                s.vf_device_id = p.vf_product;
                s.total_vfs = 64;
                s.vf_offset = p.offset;
                s.vf_stride = p.stride;
                s.ifname = p.ifname.clone();
                s
            })
            .collect(),
        plain: h
            .plain
            .iter()
            .map(|d| PlainFunction {
                address: d.address.clone(),
                vendor_id: d.vendor,
                device_id: d.product,
                class: d.class,
                numa_node: d.numa,
                driver: Some("vfio-pci".into()),
            })
            .collect(),
    };
    let dir = rtrack_fixtures::real::scratch_dir();
    // The first `vdpa` VFs of a PF get a vDPA device each (bound to vhost_vdpa).
    let devices = h
        .pfs
        .iter()
        .zip(&synthetic.pfs)
        .flat_map(|(pf, spf)| spf.vf_addresses().into_iter().take(pf.vdpa as usize))
        .enumerate()
        .map(|(i, vf)| rtrack_fixtures::vdpa::vhost(&format!("vdpa{i}"), &vf, i as u32))
        .collect();
    rtrack_fixtures::vdpa::VdpaHost {
        base: synthetic.clone(),
        devices,
    }
    .write(dir.path());
    // VFs from `netdev_until` on lose their netdev (a VF the PF driver did not give one).
    for (pf, spf) in h.pfs.iter().zip(&synthetic.pfs) {
        let Some(until) = pf.netdev_until else {
            continue;
        };
        let (domain, rest) = pf.address.split_once(':').expect("domain");
        let parent = dir
            .path()
            .join(format!("sys/devices/pci{domain}:{}", &rest[..2]));
        for (i, vf) in spf.vf_addresses().iter().enumerate().skip(until as usize) {
            let _ = std::fs::remove_dir_all(parent.join(vf).join("net"));
            if let Some(ifname) = &pf.ifname {
                let _ =
                    std::fs::remove_file(dir.path().join(format!("sys/class/net/{ifname}v{i}")));
            }
        }
    }
    probe_host(&HostRoot::under(dir.path()), &ProbeOptions::default()).expect("a probe")
}

fn toml_table(name: &str, entries: &[BTreeMap<String, String>]) -> String {
    let mut out = String::new();
    for e in entries {
        out.push_str(&format!("[[{name}]]\n"));
        for (k, v) in e {
            out.push_str(&format!("{k} = {v:?}\n"));
        }
    }
    out
}

fn config_text(case: &Case) -> String {
    let mut toml = String::from(
        "[resources]\nreserved_host_memory_mb = 0\ncpu_allocation_ratio = 16.0\nram_allocation_ratio = 1.0\n\n[pci]\n",
    );
    toml.push_str(&format!(
        "report_in_placement = {}\n",
        case.report_in_placement
    ));
    toml.push_str(&toml_table("pci.device_spec", &case.device_spec));
    toml.push_str(&toml_table("pci.alias", &case.alias));
    toml
}

/// A pool's identity: ids, NUMA node and every tag but rp_uuid (the PF's or own address is
/// one of them).
fn our_pool(k: &PoolKey) -> String {
    let tags: Vec<String> = k
        .tags
        .iter()
        .filter(|(t, _)| t.as_str() != "rp_uuid")
        .map(|(t, v)| format!("{t}={v}"))
        .collect();
    format!(
        "{}:{} numa={} {{{}}}",
        k.vendor_id,
        k.product_id,
        k.numa_node.map_or("None".into(), |n| n.to_string()),
        tags.join(",")
    )
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "None".into(),
        other => other.to_string(),
    }
}

fn nova_pool(p: &Value) -> String {
    let tags: BTreeMap<String, String> = p["tags"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(t, _)| t.as_str() != "rp_uuid")
                .map(|(t, v)| (t.clone(), text(v)))
                .collect()
        })
        .unwrap_or_default();
    let tags: Vec<String> = tags.iter().map(|(t, v)| format!("{t}={v}")).collect();
    format!(
        "{}:{} numa={} {{{}}}",
        text(&p["vendor_id"]),
        text(&p["product_id"]),
        text(&p["numa_node"]),
        tags.join(",")
    )
}

/// Devices per status.
type StatusCounts = BTreeMap<String, usize>;

/// A pool after a step: identity, devices available, provider.
type PoolView = (String, usize, Option<String>);

/// What rtrack answered at one step.
#[derive(Debug, Clone, Default)]
struct RStep {
    op: String,
    /// Not run (its instance is not held here, or its request not held): no Nova step either.
    skipped: bool,
    ok: bool,
    error: String,
    /// Per request position: the pools of the devices given, sorted.
    assigned: Vec<Vec<String>>,
    /// The requests as given (for messages).
    requests: Vec<Value>,
    /// The Nova steps this step became.
    nova_steps: Vec<usize>,
    /// A NUMA guest rtrack refused: Nova was asked (dry runs) on each cell it fits on.
    numa_refused: bool,
    /// Some request is held to providers while a provider's devices sit in two pools.
    split_provider: bool,
    status: BTreeMap<String, String>,
    pools: Vec<PoolView>,
}

/// A case run through rtrack, and the case for Nova.
struct RCase {
    config_error: Option<String>,
    nova: Value,
    steps: Vec<RStep>,
    /// Every tracked device's pool.
    pool_of: BTreeMap<String, String>,
    initial_status: BTreeMap<String, String>,
    initial_pools: Vec<PoolView>,
}

struct Inst {
    requests: Vec<PciRequest>,
    migration: Option<i64>,
}

struct Run<'a> {
    case: &'a Case,
    settings: TrackerSettings,
    aliases: AliasTable,
    inv: HostInventory,
    t: Tracker,
    insts: BTreeMap<u32, Inst>,
    next_migration: i64,
    nova_steps: Vec<Value>,
}

fn now() -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(1_700_000_000).expect("a time")
}

fn status_of(t: &Tracker) -> BTreeMap<String, String> {
    t.state()
        .devices
        .values()
        .map(|d| (d.address.to_string(), d.status.as_str().to_string()))
        .collect()
}

fn pools_of(t: &Tracker) -> Vec<PoolView> {
    t.pools()
        .iter()
        .map(|p| {
            (
                our_pool(&p.key),
                p.count(),
                p.rp_uuid.map(|u| u.to_string()),
            )
        })
        .collect()
}

fn error_kind(e: &ClaimError) -> String {
    match e {
        ClaimError::Refused(_) => format!("refused: {e}"),
        other => format!("error: {other}"),
    }
}

impl Run<'_> {
    fn flavor(&self, step: &Step) -> FlavorUsage {
        let mut extra = BTreeMap::new();
        if let Some(a) = &step.flavor_alias {
            extra.insert("pci_passthrough:alias".to_string(), a.clone());
        }
        if let Some(p) = &step.flavor_numa_policy {
            extra.insert("hw:pci_numa_affinity_policy".to_string(), p.clone());
        }
        FlavorUsage {
            id: 1,
            flavorid: "f1".into(),
            name: None,
            vcpus: 1,
            memory_mb: step.guest_mb.unwrap_or(64),
            root_gb: 0,
            ephemeral_gb: 0,
            swap_mb: 0,
            extra_specs: extra,
            cpus: None,
            extra_resources: Default::default(),
            mem_encryption_model: None,
        }
    }

    /// The providers whose devices match `spec`, with how many of them are available.
    fn providers_matching(&self, spec: &BTreeMap<String, String>) -> Vec<(uuid::Uuid, usize)> {
        let view = self.t.view();
        let uuids = self.t.pci_provider_uuids();
        let mut out = Vec::new();
        for (addr, group) in &view.pci_providers {
            let matching: Vec<_> = group
                .members
                .iter()
                .filter_map(|m| self.t.state().devices.get(m))
                .filter(|d| {
                    spec.get("vendor_id").is_none_or(|v| *v == d.vendor_id)
                        && spec.get("product_id").is_none_or(|v| *v == d.product_id)
                        && spec
                            .get("dev_type")
                            .is_none_or(|v| v == d.dev_type.as_str())
                })
                .collect();
            if let (false, Some(u)) = (matching.is_empty(), uuids.get(addr)) {
                let available = matching
                    .iter()
                    .filter(|d| d.status.as_str() == "available")
                    .count();
                out.push((*u, available));
            }
        }
        out
    }

    /// rtrack's requests and Nova's (explicit ones; the flavor's aliases go to Nova as the
    /// flavor's extra specs).
    fn requests(
        &self,
        sidx: usize,
        step: &Step,
        uuid: &str,
    ) -> Result<(Vec<PciRequest>, Vec<Value>), String> {
        let mut ours = Vec::new();
        let mut nova = Vec::new();
        let providers = self.t.pci_provider_uuids();
        let mut taken: BTreeMap<uuid::Uuid, usize> = BTreeMap::new();
        for (i, q) in step.requests.iter().enumerate() {
            let request_id = uuid_of(&format!("{}/{sidx}/{i}", self.case.id));
            let mut rp: Vec<uuid::Uuid> = q
                .providers
                .iter()
                .map(|a| {
                    let addr = PciAddress::parse(a).expect("a PCI address");
                    *providers.get(&addr).unwrap_or_else(|| {
                        panic!("case {}: no provider named after {a}", self.case.id)
                    })
                })
                .collect();
            if let Some(seed) = q.providers_auto {
                // As Placement allocates: each device from a provider that has one left (and
                // that no earlier request of the step took); sometimes all from one provider,
                // whatever it has left (Placement and the host disagreeing).
                let mut r = Rng::new(seed);
                let mut left = self.providers_matching(&q.spec);
                for (u, n) in left.iter_mut() {
                    *n = n.saturating_sub(taken.get(u).copied().unwrap_or(0));
                }
                if r.chance(15) && !left.is_empty() {
                    let (u, _) = *r.pick(&left);
                    rp = vec![u; q.count as usize];
                } else {
                    for _ in 0..q.count {
                        left.retain(|(_, n)| *n > 0);
                        if left.is_empty() {
                            break;
                        }
                        let i = r.range(0, left.len() as u64 - 1) as usize;
                        left[i].1 -= 1;
                        rp.push(left[i].0);
                    }
                    if rp.len() < q.count as usize {
                        rp.clear();
                    }
                }
                for u in &rp {
                    *taken.entry(*u).or_default() += 1;
                }
            }
            let requester_id = q.port.then(|| format!("port-{sidx}-{i}"));
            ours.push(PciRequest {
                request_id: request_id.clone(),
                count: q.count,
                specs: vec![q.spec.clone()],
                alias_name: q.alias.clone(),
                numa_policy: q
                    .numa_policy
                    .as_deref()
                    .and_then(NumaPolicy::parse)
                    .unwrap_or(NumaPolicy::Legacy),
                requester_id: requester_id.clone(),
                rp_uuids: rp.clone(),
                devices: Vec::new(),
            });
            let mut spec: serde_json::Map<String, Value> =
                q.spec.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
            if !rp.is_empty() {
                let list: Vec<String> = rp.iter().map(|u| u.to_string()).collect();
                spec.insert("rp_uuids".into(), json!(list.join(",")));
            }
            let mut r = json!({"count": q.count, "spec": [spec], "alias_name": q.alias,
                               "request_id": request_id, "requester_id": requester_id});
            if let Some(p) = &q.numa_policy {
                r["numa_policy"] = json!(p);
            }
            nova.push(r);
        }
        let flavor = self.flavor(step);
        let from_flavor =
            alias_requests(&flavor, &self.aliases, uuid, "flavor").map_err(|e| e.to_string())?;
        ours.extend(from_flavor);
        Ok((ours, nova))
    }

    fn guest(&self, step: &Step) -> Option<GuestTopology> {
        step.guest_mb.map(|mb| GuestTopology {
            cells: vec![GuestCell {
                id: 0,
                cpuset: CpuSet::from_ids([0]),
                pcpuset: CpuSet::new(),
                memory_mb: mb,
            }],
            cpu_policy: None,
            thread_policy: None,
            emulator_threads: None,
            pagesize: None,
            networks: Default::default(),
            core_types: None,
        })
    }

    /// The host cells a one-cell guest of `mb` fits on, PCI aside (memory is what fills them
    /// in these cases; CPUs are overcommitted 16 times).
    fn cells_fitting(&self, mb: i64) -> Vec<u32> {
        let usage = self.t.numa_usage(&self.t.usage());
        self.t
            .numa_host()
            .cells
            .iter()
            .filter(|c| c.memory_mb - usage.cell(c.id).memory_usage_mb >= mb)
            .map(|c| c.id)
            .collect()
    }

    fn assigned(
        &self,
        reqs: &[PciRequest],
        assignments: &[rtrack::tracker::pci::claim::Assignment],
    ) -> Vec<Vec<String>> {
        let specs = &self.t.settings().policy.device_specs;
        let mut out = vec![Vec::new(); reqs.len()];
        for a in assignments {
            let i = reqs
                .iter()
                .position(|r| r.request_id == a.request_id)
                .expect("an assignment for a request of the step");
            let d = &self.t.state().devices[&a.address];
            out[i].push(our_pool(&d.pool_key(specs)));
        }
        for v in &mut out {
            v.sort();
        }
        out
    }

    fn push_nova(&mut self, v: Value) -> usize {
        self.nova_steps.push(v);
        self.nova_steps.len() - 1
    }

    /// Whether some request is held to providers while a provider's devices are in two pools
    /// (Nova's support_requests asserts one pool per provider over all its pools, those at
    /// count 0 too; claim_instance over the pools left for the request).
    fn split_provider(&self, reqs: &[PciRequest]) -> bool {
        // Every pool, emptied ones too: Nova keeps a pool consumed to count 0 with its rp_uuid.
        let mut pools_per_rp: BTreeMap<uuid::Uuid, usize> = BTreeMap::new();
        for p in &self.t.pci_index().pools {
            if let Some(rp) = p.rp_uuid {
                *pools_per_rp.entry(rp).or_default() += 1;
            }
        }
        reqs.iter()
            .any(|r| r.alias_name.is_some() && !r.rp_uuids.is_empty())
            && pools_per_rp.values().any(|n| *n > 1)
    }

    fn step(&mut self, sidx: usize, step: &Step) -> RStep {
        let mut r = RStep {
            op: format!("{:?}", step.op),
            ..RStep::default()
        };
        let uuid = match step.op {
            Op::Check => uuid_of(&format!("{}/check/{sidx}", self.case.id)),
            _ => instance_uuid(step.instance),
        };
        let held = self.t.state().claims.contains_key(&uuid);
        match step.op {
            Op::Claim | Op::Check | Op::LiveClaim => {
                let (reqs, nova_reqs) = match self.requests(sidx, step, &uuid) {
                    Ok(x) => x,
                    Err(e) => {
                        r.error = format!("error: {e}");
                        r.nova_steps.push(self.push_nova(json!({
                            "op": if step.op == Op::Check { "check" } else { "claim" },
                            "instance": uuid, "requests": [], "flavor_alias": step.flavor_alias,
                            "flavor_numa_policy": step.flavor_numa_policy})));
                        return self.finish(r);
                    }
                };
                r.requests = reqs
                    .iter()
                    .map(|q| json!({"count": q.count, "spec": q.specs, "alias": q.alias_name,
                                    "port": q.requester_id.is_some(), "policy": q.numa_policy.as_str(),
                                    "rp_uuids": q.rp_uuids}))
                    .collect();
                r.split_provider = self.split_provider(&reqs);
                let guest = self.guest(step);
                let fitting = step.guest_mb.map(|mb| self.cells_fitting(mb));
                let req = InstanceRequest {
                    flavor: self.flavor(step),
                    is_bfv: false,
                    pci_requests: reqs.clone(),
                    numa: guest,
                };
                let result = if step.op == Op::LiveClaim {
                    let id = self.next_migration;
                    self.next_migration += 1;
                    let mv = MoveRequest {
                        instance: InstanceInfo {
                            uuid: uuid.clone(),
                            host: Some("other".into()),
                            node: Some("other".into()),
                            vm_state: Some("active".into()),
                            task_state: Some("migrating".into()),
                            ..InstanceInfo::default()
                        },
                        current: Some(req.clone()),
                        new: req,
                        current_numa: None,
                        move_type: Some(MoveType::LiveMigration),
                        migration_id: Some(id),
                        migration_uuid: None,
                        source_compute: None,
                        source_node: None,
                        dest_compute: Some(NODE.into()),
                        dest_node: Some(NODE.into()),
                    };
                    let res = self.t.move_claim(&mv, 10, false);
                    if res.is_ok() {
                        self.insts.entry(step.instance).or_insert(Inst {
                            requests: Vec::new(),
                            migration: None,
                        });
                    }
                    if let Some(inst) = self.insts.get_mut(&step.instance) {
                        inst.migration = res.is_ok().then_some(id);
                    }
                    res
                } else {
                    let info = InstanceInfo {
                        uuid: uuid.clone(),
                        vm_state: Some("active".into()),
                        ..InstanceInfo::default()
                    };
                    self.t.instance_claim(&info, &req, 10, step.op == Op::Check)
                };
                if step.op != Op::Check {
                    self.insts
                        .entry(step.instance)
                        .or_insert(Inst {
                            requests: Vec::new(),
                            migration: None,
                        })
                        .requests
                        .extend(reqs.iter().cloned());
                }
                let mut cells: Option<Vec<u32>> = None;
                match &result {
                    Ok((o, _)) => {
                        r.ok = true;
                        r.assigned = self.assigned(&reqs, &o.claim.assignments);
                        cells = o.claim.numa_topology.as_ref().map(|t| t.host_cells());
                    }
                    Err(e) => r.error = error_kind(e),
                }
                let nova_op = match step.op {
                    Op::Check => "check",
                    Op::LiveClaim => "claim_only",
                    _ => "claim",
                };
                // An instance claim tests the requests against the pools first (Claim._test_pci);
                // a live migration's destination claims them directly.
                let mut nova = json!({"op": nova_op, "instance": uuid, "requests": nova_reqs,
                                      "test_pci": step.op != Op::LiveClaim,
                                      "flavor_alias": step.flavor_alias,
                                      "flavor_numa_policy": step.flavor_numa_policy,
                                      "numa_cells": cells});
                match (&result, fitting) {
                    (Err(ClaimError::Refused(_)), Some(fitting)) => {
                        // Which cell Nova's NUMA fit would pick is not compared: Nova's claim on
                        // each cell the guest fits on must refuse too.
                        r.numa_refused = true;
                        nova["op"] = json!("check");
                        for c in fitting {
                            nova["numa_cells"] = json!([c]);
                            let n = self.push_nova(nova.clone());
                            r.nova_steps.push(n);
                        }
                    }
                    _ => {
                        let n = self.push_nova(nova);
                        r.nova_steps.push(n);
                    }
                }
            }
            Op::Free => {
                if !held {
                    r.skipped = true;
                    return self.finish(r);
                }
                match self.t.abort(&uuid) {
                    Ok(_) => r.ok = true,
                    Err(e) => r.error = error_kind(&e),
                }
                self.insts.remove(&step.instance);
                let n = self.push_nova(json!({"op": "free", "instance": uuid}));
                r.nova_steps.push(n);
            }
            Op::Attach => {
                if !held {
                    r.skipped = true;
                    return self.finish(r);
                }
                let (reqs, nova_reqs) = self.requests(sidx, step, &uuid).expect("port requests");
                r.requests = nova_reqs.clone();
                match self.t.attach_pci(&uuid, &reqs) {
                    Ok((o, _)) => {
                        r.ok = true;
                        r.assigned = self.assigned(&reqs, &o.assignments);
                    }
                    Err(e) => r.error = error_kind(&e),
                }
                if let Some(inst) = self.insts.get_mut(&step.instance) {
                    inst.requests.extend(reqs);
                }
                let n = self
                    .push_nova(json!({"op": "attach", "instance": uuid, "requests": nova_reqs}));
                r.nova_steps.push(n);
            }
            Op::Detach => {
                let request_id = self
                    .insts
                    .get(&step.instance)
                    .and_then(|i| i.requests.get(step.request_index))
                    .map(|q| q.request_id.clone());
                let holds = request_id.as_ref().is_some_and(|id| {
                    held && self.t.state().instances[&uuid]
                        .request
                        .pci_requests
                        .iter()
                        .any(|q| &q.request_id == id)
                });
                let Some(request_id) = request_id.filter(|_| holds) else {
                    r.skipped = true;
                    return self.finish(r);
                };
                match self.t.detach_pci(&uuid, &request_id) {
                    Ok(_) => r.ok = true,
                    Err(e) => r.error = error_kind(&e),
                }
                let n = self.push_nova(json!({"op": "free_request", "instance": uuid,
                                              "request_index": step.request_index}));
                r.nova_steps.push(n);
            }
            Op::Restart => {
                let state = self.t.state().clone();
                self.t = Tracker::new(self.settings.clone(), self.inv.clone(), state);
                let _ = self.t.audit(self.inv.clone(), now());
                r.ok = true;
                let n = self.push_nova(json!({"op": "restart"}));
                r.nova_steps.push(n);
            }
            Op::LiveConfirm | Op::LiveRevert => {
                let Some(id) = self
                    .insts
                    .get_mut(&step.instance)
                    .and_then(|i| i.migration.take())
                else {
                    r.skipped = true;
                    return self.finish(r);
                };
                let res = if step.op == Op::LiveConfirm {
                    self.t.confirm_move(id, 20)
                } else {
                    self.insts.remove(&step.instance);
                    self.t.revert_move(id, 20)
                };
                match res {
                    Ok(_) => r.ok = true,
                    Err(e) => r.error = error_kind(&e),
                }
                let op = if step.op == Op::LiveConfirm {
                    "allocate"
                } else {
                    "free_claims"
                };
                let n = self.push_nova(json!({"op": op, "instance": uuid}));
                r.nova_steps.push(n);
            }
        }
        self.finish(r)
    }

    fn finish(&self, mut r: RStep) -> RStep {
        r.status = status_of(&self.t);
        r.pools = pools_of(&self.t);
        r
    }
}

/// Runs a case through rtrack; builds the case for Nova from what rtrack tracked and did.
fn run_rtrack(case: &Case) -> RCase {
    let inv = probe(case);
    let text = config_text(case);
    let file = Path::new("pci-diff.toml");
    let cfg = match Config::parse(&text, file).and_then(|c| c.validate(file)) {
        Ok(c) => c,
        Err(e) => {
            return RCase {
                config_error: Some(e.to_string()),
                nova: nova_case(case, &[], &[], Vec::new()),
                steps: Vec::new(),
                pool_of: BTreeMap::new(),
                initial_status: BTreeMap::new(),
                initial_pools: Vec::new(),
            }
        }
    };
    let settings = TrackerSettings {
        policy: (&cfg).into(),
        names: HostNames {
            host: NODE.into(),
            node: NODE.into(),
        },
        node_uuid: "11111111-2222-3333-4444-555555555555".into(),
        node_created_at: time::OffsetDateTime::UNIX_EPOCH,
    };
    let mut t = Tracker::new(settings.clone(), inv.clone(), TrackerState::default());
    let _ = t.audit(inv.clone(), now());
    // The functions the libvirt driver reports: all of them (Nova's device specs decide
    // which it tracks), with rtrack's view of the tracked ones.
    let view = t.view();
    let uuids = t.pci_provider_uuids();
    let tracked = &t.state().devices;
    let host = t.host();
    let by_addr: BTreeMap<PciAddress, &rtrack::probes::pci::PciDevice> =
        host.pci_devices.iter().map(|d| (d.address, d)).collect();
    let mut devices = Vec::new();
    for d in host.pci_devices.iter().filter(|d| !d.is_bridge()) {
        let mut dev = json!({"address": d.address.to_string(), "vendor_id": d.vendor_id,
                             "product_id": d.product_id, "dev_type": d.dev_type.as_str(),
                             "parent_addr": d.parent_addr.map(|a| a.to_string()),
                             "numa_node": d.numa_node});
        match tracked.get(&d.address) {
            Some(td) => {
                dev["vendor_id"] = json!(td.vendor_id);
                dev["product_id"] = json!(td.product_id);
                dev["dev_type"] = json!(td.dev_type.as_str());
                dev["numa_node"] = json!(td.numa_node);
                dev["parent_addr"] = json!(td.parent_addr.map(|a| a.to_string()));
                dev["parent_ifname"] = json!(td.parent_ifname);
                let provider = td.parent_addr.unwrap_or(td.address);
                if view
                    .pci_providers
                    .get(&provider)
                    .is_some_and(|g| g.members.contains(&td.address))
                {
                    dev["rp_uuid"] = json!(uuids.get(&provider).map(|u| u.to_string()));
                }
            }
            None => {
                // A VF with a netdev names its PF's interface.
                let ifname = (!d.net_interfaces.is_empty())
                    .then(|| d.parent_addr.and_then(|p| by_addr.get(&p)))
                    .flatten()
                    .and_then(|pf| pf.net_interfaces.first().cloned());
                dev["parent_ifname"] = json!(ifname);
            }
        }
        devices.push(dev);
    }
    let cells: Vec<Value> = view
        .numa
        .cells
        .iter()
        .map(|c| json!({"id": c.id, "socket": c.socket}))
        .collect();
    let specs = &settings.policy.device_specs;
    let pool_of: BTreeMap<String, String> = tracked
        .values()
        .map(|d| (d.address.to_string(), our_pool(&d.pool_key(specs))))
        .collect();
    let initial_status = status_of(&t);
    let initial_pools = pools_of(&t);
    let mut run = Run {
        case,
        settings,
        aliases: cfg.pci.aliases.clone(),
        inv,
        t,
        insts: BTreeMap::new(),
        next_migration: 1,
        nova_steps: Vec::new(),
    };
    let steps: Vec<RStep> = case
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| run.step(i, s))
        .collect();
    let nova = nova_case(case, &devices, &cells, std::mem::take(&mut run.nova_steps));
    RCase {
        config_error: None,
        nova,
        steps,
        pool_of,
        initial_status,
        initial_pools,
    }
}

fn nova_case(case: &Case, devices: &[Value], cells: &[Value], steps: Vec<Value>) -> Value {
    json!({"id": case.id, "report_in_placement": case.report_in_placement,
           "device_spec": case.device_spec, "alias": case.alias, "host_cells": cells,
           "devices": devices, "steps": steps})
}

#[derive(Default)]
struct Tally {
    steps: usize,
    compared: usize,
    skipped: usize,
    granted: usize,
    refused: usize,
    checks: usize,
    config_errors: usize,
    /// Dry runs where Nova's support_requests and its own claim_instance disagree.
    support_vs_claim: Vec<String>,
    explained: BTreeMap<&'static str, Vec<String>>,
    failures: Vec<String>,
}

const EXPLAINED: &[(&str, &str)] = &[
    (
        "nova-half-way-leak",
        "Nova's claim_instance fails half-way and leaks (devices keep request_id, a PF removed from the pools is not restored); rtrack refuses exactly and leaves nothing",
    ),
    (
        "nova-alias-dev-type",
        "an alias defined twice without device_type: Nova fails every alias (PciInvalidAlias, KeyError 'dev_type'), rtrack accepts it",
    ),
    (
        "provider-split-pools",
        "one provider's devices in two pools (VFs of one PF with and without parent_ifname, or vDPA and plain VFs of one PF) held to rp_uuids: Nova refuses (_assert_one_pool_per_rp_uuid) or, when only one of the pools has enough, takes them all from it; rtrack counts per provider and takes them from both pools, plainest first",
    ),
    (
        "one-time-use-held",
        "a one-time-use device freed: Nova's tracker gives it out again (only Placement's reserved inventory protects it), rtrack keeps it reserved until an operator releases it",
    ),
    (
        "nova-pool-order",
        "Nova's pool order depends on history (a pool emptied by a PF/VF claim and refilled by the free goes to the end); rtrack orders pools as a restarted Nova does",
    ),
    (
        "move-claim-status",
        "a live migration's destination claim: Nova's devices are claimed (their PF unclaimable) until the migration ends, rtrack's allocated (unavailable) at once",
    ),
    (
        "nova-under-allocation",
        "rp_uuids naming a provider with fewer devices left than allocated from it, next to others: Nova drops that provider's pool but passes the request on the count of the pools left and gives fewer devices than asked; rtrack refuses",
    ),
];

/// A deliberate difference (docs/differences.md): counted, not a failure.
fn accepted(kind: &str) -> bool {
    EXPLAINED.iter().any(|(k, _)| *k == kind)
}

/// Errors Nova raises for a claim it cannot make.
const NOVA_REFUSALS: &[&str] = &[
    "ComputeResourcesUnavailable",
    "PciDeviceRequestFailed",
    "InterfaceAttachPciClaimFailed",
    "PciDeviceInvalidStatus",
    "PciDeviceVFInvalidStatus",
    "PciDevicePFInvalidStatus",
];

struct Cmp<'a> {
    case: &'a Case,
    r: &'a RCase,
    /// One-time-use devices rtrack holds reserved and Nova gave back.
    held: BTreeSet<String>,
}

fn nova_assigned(
    devices: &Value,
    nreqs: usize,
    pool_of: &BTreeMap<String, String>,
) -> Vec<Vec<String>> {
    let mut out = vec![Vec::new(); nreqs];
    for d in devices.as_array().cloned().unwrap_or_default() {
        let addr = text(&d["address"]);
        let pool = pool_of
            .get(&addr)
            .cloned()
            .unwrap_or_else(|| format!("untracked {addr}"));
        match d["request_index"].as_u64() {
            Some(i) if (i as usize) < nreqs => out[i as usize].push(pool),
            // A device for no request of the step: in a bucket of its own, so it differs.
            _ => {
                out.resize(nreqs + 1, Vec::new());
                out[nreqs].push(pool);
            }
        }
    }
    for v in &mut out {
        v.sort();
    }
    out
}

/// A note when Nova gave some request fewer devices than it asked for.
fn short(step: &Value, given: &[Vec<String>]) -> String {
    let mut out = String::new();
    for (i, r) in step["requests"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let want = r["count"].as_u64().unwrap_or(0) as usize;
        let got = given.get(i).map_or(0, Vec::len);
        if got < want {
            out.push_str(&format!(
                "\n  (Nova gave request {i} {got} of the {want} devices it asks for)"
            ));
        }
    }
    out
}

fn nova_addresses(devices: &Value) -> BTreeSet<String> {
    devices
        .as_array()
        .map(|a| a.iter().map(|d| text(&d["address"])).collect())
        .unwrap_or_default()
}

impl Cmp<'_> {
    /// Nova's pools with count > 0, less the devices rtrack holds reserved, in order.
    fn nova_pools(&self, pools: &Value, nova_status: &Value) -> Vec<PoolView> {
        let rip = self.case.report_in_placement;
        let mut held_per_pool: BTreeMap<&String, usize> = BTreeMap::new();
        for a in &self.held {
            if nova_status[a.as_str()] == "available" {
                if let Some(p) = self.r.pool_of.get(a) {
                    *held_per_pool.entry(p).or_default() += 1;
                }
            }
        }
        pools
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter_map(|p| {
                let id = nova_pool(p);
                let count = (p["count"].as_u64().unwrap_or(0) as usize)
                    .saturating_sub(held_per_pool.get(&id).copied().unwrap_or(0));
                (count > 0).then(|| {
                    (
                        id,
                        count,
                        if rip {
                            p["rp_uuid"].as_str().map(String::from)
                        } else {
                            None
                        },
                    )
                })
            })
            .collect()
    }

    /// Compares the state after a step; `Err` names the first difference.
    fn state(
        &mut self,
        nova: &Value,
        status: &BTreeMap<String, String>,
        pools: &[PoolView],
        tally: &mut Tally,
        at: &str,
    ) -> Result<(), Diff> {
        let ns = &nova["status"];
        let nova_addrs: BTreeSet<String> = ns
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        let ours: BTreeSet<String> = status.keys().cloned().collect();
        if nova_addrs != ours {
            return Err(Diff::Other(format!(
                "the tracked devices differ\n  nova only:   {:?}\n  rtrack only: {:?}",
                nova_addrs.difference(&ours).collect::<Vec<_>>(),
                ours.difference(&nova_addrs).collect::<Vec<_>>()
            )));
        }
        // A one-time-use device freed: reserved here, available in Nova.
        for (a, s) in status {
            if s == "reserved" && ns[a.as_str()] == "available" && self.held.insert(a.clone()) {
                let e = tally.explained.entry("one-time-use-held").or_default();
                if !e
                    .iter()
                    .any(|x| x.starts_with(&format!("{} ", self.case.id)))
                {
                    e.push(at.to_string());
                }
            }
        }
        // Devices per status per pool.
        let mut per_pool: BTreeMap<&String, (StatusCounts, StatusCounts)> = BTreeMap::new();
        for (a, s) in status {
            let pool = &self.r.pool_of[a];
            let e = per_pool.entry(pool).or_default();
            let ours = if self.held.contains(a) && s == "reserved" {
                "available".to_string()
            } else {
                s.clone()
            };
            let mut theirs = text(&ns[a.as_str()]);
            if accepted("move-claim-status") && (theirs == "claimed" || theirs == "unclaimable") {
                // Nova's two-phase claim (claim_only, then allocate) as rtrack's one phase.
                theirs = if theirs == "claimed" {
                    "allocated".into()
                } else {
                    "unavailable".into()
                };
                let e = tally.explained.entry("move-claim-status").or_default();
                if !e
                    .iter()
                    .any(|x| x.starts_with(&format!("{} ", self.case.id)))
                {
                    e.push(at.to_string());
                }
            }
            *e.0.entry(theirs).or_default() += 1;
            *e.1.entry(ours).or_default() += 1;
        }
        for (pool, (n, o)) in &per_pool {
            if n != o {
                // Nova's two-phase claim (claim_only, then allocate) named as rtrack's one.
                let mut one_phase: BTreeMap<String, usize> = BTreeMap::new();
                for (st, k) in n {
                    let st = match st.as_str() {
                        "claimed" => "allocated",
                        "unclaimable" => "unavailable",
                        other => other,
                    };
                    *one_phase.entry(st.to_string()).or_default() += k;
                }
                let why = if &one_phase == o {
                    " (move-claim-status: Nova's claimed/unclaimable are rtrack's allocated/unavailable)"
                } else {
                    ""
                };
                return Err(Diff::Other(format!(
                    "devices per status differ in pool {pool}{why}\n  nova:   {n:?}\n  rtrack: {o:?}"
                )));
            }
        }
        let np = self.nova_pools(&nova["pools"], ns);
        if np != pools {
            let mut a = np.clone();
            let mut b = pools.to_vec();
            a.sort();
            b.sort();
            let shown = format!(
                "\n  nova:   {}\n  rtrack: {}",
                show_pools(&np),
                show_pools(pools)
            );
            let restarted = self.nova_pools(&nova["restart_pools"], ns);
            if a == b && restarted != pools {
                return Err(Diff::Other(format!("pools differ in order, and from a restarted Nova's order too{shown}\n  nova restarted: {}", show_pools(&restarted))));
            }
            if a == b {
                return Err(Diff::PoolOrder(format!("pools differ in order only (nova-pool-order: Nova's pool order depends on history, a pool emptied and refilled goes to the end; a restarted Nova orders them as rtrack does){shown}")));
            }
            return Err(Diff::Other(format!("pools differ{shown}")));
        }
        Ok(())
    }
}

/// How the state after a step differs.
enum Diff {
    /// The same pools in another order, the order a restarted Nova has.
    PoolOrder(String),
    Other(String),
}

fn show_pools(p: &[PoolView]) -> String {
    p.iter()
        .map(|(id, n, rp)| match rp {
            Some(rp) => format!("[{id} x{n} rp={rp}]"),
            None => format!("[{id} x{n}]"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn alias_twice_without_type(case: &Case) -> bool {
    let mut seen: BTreeMap<&String, usize> = BTreeMap::new();
    for a in &case.alias {
        if let Some(n) = a.get("name") {
            *seen.entry(n).or_default() += 1;
        }
    }
    case.alias
        .iter()
        .any(|a| a.get("name").is_some_and(|n| seen[n] > 1) && !a.contains_key("device_type"))
}

fn snapshot_changed(before: &Value, after: &Value) -> bool {
    before["status"] != after["status"]
        || before["owners"] != after["owners"]
        || before["pools"] != after["pools"]
}

/// Compares one case; returns at the first divergence.
fn compare(case: &Case, r: &RCase, nova: &Value, tally: &mut Tally) {
    let id = &case.id;
    let explain = |tally: &mut Tally, kind: &'static str, at: &str| {
        let seen = tally.explained.entry(kind).or_default();
        // A one-time-use device held is counted once per case (at the free that held it).
        if kind != "one-time-use-held" || !seen.iter().any(|a| a.starts_with(&format!("{id} "))) {
            seen.push(at.to_string());
        }
    };
    match (nova["config_error"].as_str(), &r.config_error) {
        (Some(e), None) => {
            if alias_twice_without_type(case) && e.starts_with("PciInvalidAlias") {
                explain(tally, "nova-alias-dev-type", &format!("{id} (config)"));
            } else {
                tally.failures.push(format!(
                    "{id}: Nova refuses the configuration ({e}), rtrack accepts it"
                ));
            }
            return;
        }
        (None, Some(e)) => {
            tally.failures.push(format!(
                "{id}: rtrack refuses the configuration ({e}), Nova accepts it"
            ));
            return;
        }
        (Some(_), Some(_)) => {
            tally.config_errors += 1;
            return;
        }
        (None, None) => {}
    }
    let mut c = Cmp {
        case,
        r,
        held: BTreeSet::new(),
    };
    if let Err(Diff::Other(e) | Diff::PoolOrder(e)) = c.state(
        &nova["initial"],
        &r.initial_status,
        &r.initial_pools,
        tally,
        &format!("{id} (start)"),
    ) {
        tally.failures.push(format!("{id} at start: {e}"));
        return;
    }
    let nsteps = nova["steps"].as_array().cloned().unwrap_or_default();
    let mut prev = nova["initial"].clone();
    for (i, s) in r.steps.iter().enumerate() {
        tally.steps += 1;
        if s.skipped {
            tally.skipped += 1;
            continue;
        }
        let at = format!("{id} step {i} ({})", s.op);
        let ns: Vec<&Value> = s.nova_steps.iter().map(|j| &nsteps[*j]).collect();
        let ours_desc = if s.ok {
            format!("granted {:?}", s.assigned)
        } else {
            s.error.clone()
        };
        let fail = |tally: &mut Tally, why: String| {
            tally.failures.push(format!(
                "{at}: {why}\n  requests: {}\n  rtrack: {ours_desc}",
                serde_json::to_string(&s.requests).unwrap_or_default()
            ));
        };
        let mut stop = false;
        match s.op.as_str() {
            "Claim" | "LiveClaim" | "Attach" | "Check" if s.numa_refused || s.op == "Check" => {
                tally.checks += usize::from(s.op == "Check");
                // Dry runs: what Nova's claim_instance would do.
                for n in &ns {
                    let cl = &n["claimable"];
                    // An instance claim: the NUMA fit's support_requests on the guest's cells,
                    // Claim._test_pci, then claim_instance.
                    let cl_ok = cl["ok"].as_bool().unwrap_or(false);
                    let supported = n["supported"].as_bool().unwrap_or(false);
                    if supported != cl_ok {
                        tally.support_vs_claim.push(at.clone());
                    }
                    let nova_ok = supported && cl_ok;
                    let nova_why = if cl_ok {
                        "support_requests on the guest's cells refuses it".to_string()
                    } else {
                        text(&cl["error"])
                    };
                    let nreq = n["requests"].as_array().map_or(0, Vec::len);
                    let nova_pools = nova_assigned(&cl["devices"], nreq, &r.pool_of);
                    let cells = &n["numa_cells"];
                    match (nova_ok, s.ok && !s.numa_refused) {
                        (true, false) => {
                            if nova_addresses(&cl["devices"])
                                .iter()
                                .any(|a| c.held.contains(a))
                            {
                                explain(tally, "one-time-use-held", &at);
                                return;
                            }
                            if accepted("nova-under-allocation")
                                && !short(n, &nova_pools).is_empty()
                            {
                                explain(tally, "nova-under-allocation", &at);
                                continue;
                            }
                            fail(
                                tally,
                                format!(
                                    "Nova's claim grants it (NUMA cells {cells}): {nova_pools:?}{}",
                                    short(n, &nova_pools)
                                ),
                            );
                            return;
                        }
                        (false, true) => {
                            if s.split_provider {
                                explain(tally, "provider-split-pools", &at);
                                continue;
                            }
                            fail(
                                tally,
                                format!("Nova's claim refuses it (NUMA cells {cells}): {nova_why}"),
                            );
                            return;
                        }
                        (true, true) => {
                            if nova_pools != s.assigned {
                                if nova_addresses(&cl["devices"])
                                    .iter()
                                    .any(|a| c.held.contains(a))
                                {
                                    explain(tally, "one-time-use-held", &at);
                                    return;
                                }
                                if s.split_provider {
                                    explain(tally, "provider-split-pools", &at);
                                    continue;
                                }
                                fail(tally, format!("Nova's claim takes the devices from other pools: {nova_pools:?}{}", short(n, &nova_pools)));
                                return;
                            }
                            tally.granted += 1;
                        }
                        (false, false) => tally.refused += 1,
                    }
                }
            }
            "Claim" | "LiveClaim" | "Attach" => {
                let n = ns[0];
                let n_ok = n["ok"].as_bool().unwrap_or(false);
                let n_err = text(&n["error"]);
                let nreq = n["requests"].as_array().map_or(0, Vec::len);
                let nova_pools = nova_assigned(&n["devices"], nreq, &r.pool_of);
                match (n_ok, s.ok) {
                    (false, false) => {
                        if snapshot_changed(&prev, n) {
                            explain(tally, "nova-half-way-leak", &at);
                            // Only request ids left on devices back in their pools: what claims
                            // use is intact, go on.
                            if prev["status"] != n["status"] || prev["pools"] != n["pools"] {
                                return;
                            }
                        }
                        // An attach that claimed nothing (no device tracked at all) fails on
                        // `devices[0]` in _claim_pci_device_for_interface_attach.
                        let nothing_to_attach = s.op == "Attach"
                            && n_err.starts_with("IndexError")
                            && !snapshot_changed(&prev, n);
                        if !nothing_to_attach && !NOVA_REFUSALS.iter().any(|k| n_err.starts_with(k))
                        {
                            fail(tally, format!("Nova fails with {n_err}"));
                            return;
                        }
                        tally.refused += 1;
                    }
                    (false, true) => {
                        if s.split_provider
                            && (n_err.starts_with("PciDeviceRequestFailed")
                                || n_err.starts_with("ComputeResourcesUnavailable"))
                        {
                            explain(tally, "provider-split-pools", &at);
                            return;
                        }
                        fail(tally, format!("Nova refuses: {n_err}"));
                        return;
                    }
                    (true, false) => {
                        if nova_addresses(&n["devices"])
                            .iter()
                            .any(|a| c.held.contains(a))
                        {
                            explain(tally, "one-time-use-held", &at);
                            return;
                        }
                        if accepted("nova-under-allocation") && !short(n, &nova_pools).is_empty() {
                            explain(tally, "nova-under-allocation", &at);
                            return;
                        }
                        fail(
                            tally,
                            format!("Nova grants it: {nova_pools:?}{}", short(n, &nova_pools)),
                        );
                        return;
                    }
                    (true, true) => {
                        if nova_pools != s.assigned {
                            if nova_addresses(&n["devices"])
                                .iter()
                                .any(|a| c.held.contains(a))
                            {
                                explain(tally, "one-time-use-held", &at);
                                return;
                            }
                            if s.split_provider {
                                // Nova takes them all from the one pool of the provider that
                                // can give them (the other is filtered out by its count).
                                explain(tally, "provider-split-pools", &at);
                                return;
                            }
                            fail(
                                tally,
                                format!(
                                    "Nova takes the devices from other pools: {nova_pools:?}{}",
                                    short(n, &nova_pools)
                                ),
                            );
                            stop = true;
                        }
                        tally.granted += 1;
                    }
                }
            }
            _ => {
                // Frees, detaches, restarts, the end of a live migration.
                let n = ns[0];
                let n_ok = n["ok"].as_bool().unwrap_or(false);
                if n_ok != s.ok {
                    fail(tally, format!("Nova: ok {n_ok} {}", text(&n["error"])));
                    return;
                }
            }
        }
        if stop {
            return;
        }
        let after = ns.last().copied().unwrap_or(&prev).clone();
        match c.state(&after, &s.status, &s.pools, tally, &at) {
            Ok(()) => {}
            Err(Diff::PoolOrder(_)) if accepted("nova-pool-order") => {
                explain(tally, "nova-pool-order", &at);
                return;
            }
            Err(Diff::PoolOrder(e) | Diff::Other(e)) => {
                fail(tally, format!("after the step, {e}"));
                return;
            }
        }
        prev = after;
        tally.compared += 1;
    }
}

/// The kind of an unexplained difference, from its message (for the report's summary).
fn failure_kind(message: &str) -> &'static str {
    if message.contains("(nova-pool-order:") {
        "nova-pool-order"
    } else if message.contains("(move-claim-status:") {
        "move-claim-status"
    } else if message.contains("devices it asks for)") {
        "nova-under-allocation"
    } else {
        "not of a known kind"
    }
}

/// Runs `cases` through rtrack, then through Nova in one process; the seconds each took.
fn run_part(cases: &[Case], venv: &Path) -> (Vec<RCase>, Vec<Value>, f64, f64) {
    let started = std::time::Instant::now();
    let runs: Vec<RCase> = cases.iter().map(run_rtrack).collect();
    let rtrack_secs = started.elapsed().as_secs_f64();
    let dir = tempfile::tempdir().expect("a temp dir");
    let input = dir.path().join("cases.json");
    let nova_cases: Vec<&Value> = runs.iter().map(|r| &r.nova).collect();
    std::fs::write(
        &input,
        serde_json::to_vec(&json!({ "cases": nova_cases })).expect("json"),
    )
    .expect("write cases");
    let started = std::time::Instant::now();
    let out = Command::new(venv.join("bin/python"))
        .arg("-W")
        .arg("ignore")
        .arg(repo().join("tests/interop/pci_diff.py"))
        .arg(&input)
        .output()
        .expect("run pci_diff.py");
    assert!(
        out.status.success(),
        "pci_diff.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    (runs, answers, rtrack_secs, started.elapsed().as_secs_f64())
}

#[test]
fn pci_claims_pools_and_device_states_agree_with_nova() {
    let Some(venv) = crate::support::nova::venv("the PCI differential test") else {
        return;
    };
    let count: usize = std::env::var("RTRACK_PCI_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(800);
    let seed: u64 = std::env::var("RTRACK_PCI_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_261_126);
    let started = std::time::Instant::now();
    let mut cases = pci_cases::named();
    let named = cases.len();
    cases.extend(pci_cases::generate(seed, count));
    let only = std::env::var("RTRACK_PCI_ONLY").ok();
    if let Some(o) = &only {
        cases.retain(|c| &c.id == o);
        assert!(!cases.is_empty(), "no case {o}");
    }
    // Two halves, each on its own thread: rtrack's runs, then one Nova process for them.
    let half = cases.len().div_ceil(2).max(1);
    let parts: Vec<(Vec<RCase>, Vec<Value>, f64, f64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = cases
            .chunks(half)
            .map(|chunk| {
                let venv = &venv;
                scope.spawn(move || run_part(chunk, venv))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a part's thread"))
            .collect()
    });
    let rtrack_secs = parts.iter().map(|p| p.2).sum::<f64>();
    let nova_secs = parts.iter().map(|p| p.3).sum::<f64>();
    let mut runs = Vec::with_capacity(cases.len());
    let mut answers = Vec::with_capacity(cases.len());
    for (r, a, _, _) in parts {
        runs.extend(r);
        answers.extend(a);
    }
    assert_eq!(answers.len(), cases.len(), "one answer per case");
    if only.is_some() {
        for ((case, r), nova) in cases.iter().zip(&runs).zip(&answers) {
            eprintln!("case for Nova: {}", r.nova);
            eprintln!("nova: {nova}");
            eprintln!("rtrack: config error {:?}", r.config_error);
            eprintln!(
                "rtrack at start: {:?} {:?}",
                r.initial_status, r.initial_pools
            );
            for (i, (s, st)) in r.steps.iter().zip(&case.steps).enumerate() {
                eprintln!(
                    "rtrack step {i} {:?}: skipped {} ok {} {} assigned {:?} nova steps {:?}\n  status {:?}\n  pools {}",
                    st.op, s.skipped, s.ok, s.error, s.assigned, s.nova_steps, s.status, show_pools(&s.pools)
                );
            }
        }
    }
    let mut tally = Tally::default();
    for ((case, r), nova) in cases.iter().zip(&runs).zip(&answers) {
        compare(case, r, nova, &mut tally);
    }
    let mut report = format!(
        "PCI differential test against Nova 34: {} cases ({} named, {} generated with seed {seed}; {} with vDPA devices), {} steps, {} compared in full ({} grants and {} refusals agreed, {} dry runs), {} skipped (instance not held), {} configurations both refused; rtrack took {rtrack_secs:.1} s and Nova {nova_secs:.1} s (wall time of two halves run in parallel), {:.1} s in all\n",
        cases.len(),
        if only.is_some() { 0 } else { named },
        if only.is_some() { 0 } else { count },
        cases
            .iter()
            .filter(|c| c.host.pfs.iter().any(|p| p.vdpa > 0))
            .count(),
        tally.steps,
        tally.compared,
        tally.granted,
        tally.refused,
        tally.checks,
        tally.skipped,
        tally.config_errors,
        started.elapsed().as_secs_f64(),
    );
    for (kind, why) in EXPLAINED {
        let at = tally.explained.get(kind).cloned().unwrap_or_default();
        report.push_str(&format!("explained {kind} ({} times): {why}\n", at.len()));
        for a in at
            .iter()
            .take(if std::env::var_os("RTRACK_PCI_ALL").is_some() {
                1000
            } else {
                10
            })
        {
            report.push_str(&format!("    {a}\n"));
        }
    }
    report.push_str(&format!(
        "Nova's support_requests and its own claim_instance disagreed on {} dry runs (rtrack's dry run is compared with both passing, as an instance claim needs){}\n",
        tally.support_vs_claim.len(),
        tally
            .support_vs_claim
            .iter()
            .take(5)
            .map(|a| format!("\n    {a}"))
            .collect::<String>()
    ));
    report.push_str(&format!(
        "unexplained differences: {}\n",
        tally.failures.len()
    ));
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for f in &tally.failures {
        *by_kind.entry(failure_kind(f)).or_default() += 1;
    }
    for (kind, n) in &by_kind {
        report.push_str(&format!("    {n} {kind}\n"));
    }
    let _ = std::fs::write(repo().join("target/pci-diff-report.txt"), &report);
    eprintln!("{report}");
    // Those of no known kind first.
    tally
        .failures
        .sort_by_key(|f| failure_kind(f) != "not of a known kind");
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
    if only.is_none() {
        assert!(
            tally.granted > count && tally.refused > count / 10,
            "the cases exercise both grants and refusals: {report}"
        );
    }
}
