//! NUMA cases for the differential test: the scenario format of `fixtures/numa/scenarios/`
//! (a host of explicit cells or a real machine's tree, Nova's configuration options, steps),
//! and a seeded generator of random ones.

pub mod power;

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// One host cell.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cell {
    pub id: u32,
    pub cpus: Vec<u32>,
    pub siblings: Vec<Vec<u32>>,
    pub socket: Option<i64>,
    pub memory_kb: u64,
    /// Hugepage pools: size in KiB -> pages.
    pub hugepages: BTreeMap<u64, u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Host {
    pub arch: String,
    pub base_page_kb: u64,
    /// Every CPU of the cells as libvirt reported them when Nova started (with the dedicated
    /// ones powered up).
    pub online: Vec<u32>,
    pub cells: Vec<Cell>,
    /// CPUs of `online` that are offline now (dedicated CPUs Nova powered down).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub offline: Vec<u32>,
    /// libvirt's CPU count (`getCPUMap`: the size of the kernel's `present` map), when known:
    /// what `Host.get_available_cpus` counts under CPU power management.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_count: Option<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct CaseConfig {
    pub cpu_dedicated_set: Option<String>,
    pub cpu_shared_set: Option<String>,
    /// Nova's legacy `vcpu_pin_set`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub vcpu_pin_set: Option<String>,
    /// Nova's spellings: strings or {node, size, count} objects.
    pub reserved_huge_pages: Vec<Value>,
    pub cpu_allocation_ratio: f64,
    pub ram_allocation_ratio: f64,
    #[serde(rename = "packing_host_numa_cells_allocation_strategy")]
    pub packing: bool,
    /// `[libvirt] cpu_power_management` (the `cpu_state` strategy).
    #[serde(default)]
    pub cpu_power_management: bool,
    /// NUMA-aware vSwitches: physnet -> nodes, and the tunnel's nodes.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub neutron: Option<NeutronCase>,
}

/// `[neutron] physnets`, `[neutron_physnet_*] numa_nodes`, `[neutron_tunnel] numa_nodes`.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct NeutronCase {
    pub physnets: BTreeMap<String, Vec<u32>>,
    pub tunnel: Vec<u32>,
}

/// A guest's networks (the RequestSpec's `network_metadata`).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct NetworkCase {
    pub physnets: Vec<String>,
    pub tunneled: bool,
}

impl CaseConfig {
    /// `reserved_huge_pages` as TOML values.
    pub fn reserved_toml(&self) -> Vec<String> {
        self.reserved_huge_pages
            .iter()
            .map(|v| match v {
                Value::String(s) => format!("{s:?}"),
                Value::Object(m) => {
                    let f = |k: &str| match &m[k] {
                        Value::String(s) => format!("{s:?}"),
                        other => other.to_string(),
                    };
                    format!(
                        "{{node = {}, size = {}, count = {}}}",
                        f("node"),
                        f("size"),
                        f("count")
                    )
                }
                other => other.to_string(),
            })
            .collect()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Flavor {
    pub vcpus: i64,
    pub memory_mb: i64,
    #[serde(default)]
    pub extra_specs: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Step {
    pub op: String,
    #[serde(default)]
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub flavor: Option<Flavor>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub image_properties: Option<serde_json::Map<String, Value>>,
    /// The ComputeNode numa_topology rtrack reported before the step (filled by the test).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rtrack_host: Option<String>,
    /// The guest's networks.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub network: Option<NetworkCase>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Case {
    pub id: String,
    pub host: Host,
    pub config: CaseConfig,
    pub steps: Vec<Step>,
    /// A real fixture to probe for the host instead of `host.cells`.
    #[serde(skip)]
    pub root: Option<String>,
    /// A generated host with power-managed CPUs (`rtrack_fixtures::power`) to probe instead.
    #[serde(skip)]
    pub power_host: Option<String>,
    /// With `power_host`: rtrack probed the host once with every CPU online before (it keeps
    /// what it saw of CPUs that went offline since).
    #[serde(skip)]
    pub seen_online: bool,
}

/// The named scenarios (`NN-name.json`, not the `.nova.json` answers) in `dir`.
pub fn named(dir: &Path) -> Vec<Case> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            n.ends_with(".json") && !n.ends_with(".nova.json")
        })
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| {
            let v: Value = serde_json::from_slice(&std::fs::read(p).expect("read")).expect("json");
            let name = p
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("?")
                .to_string();
            from_scenario(&name, &v)
        })
        .collect()
}

fn from_scenario(name: &str, v: &Value) -> Case {
    let h = &v["host"];
    let cfg = &v["config"];
    let root = h["root"]["tar"].as_str().map(|t| {
        let file = t
            .rsplit('/')
            .next()
            .unwrap_or(t)
            .trim_end_matches(".tar.bz2");
        format!("hwloc-{file}")
    });
    let cells = h["cells"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| Cell {
                    id: c["id"].as_u64().unwrap_or(0) as u32,
                    cpus: serde_json::from_value(c["cpus"].clone()).unwrap_or_default(),
                    siblings: serde_json::from_value(c["siblings"].clone()).unwrap_or_default(),
                    socket: c["socket"].as_i64(),
                    memory_kb: c["memory_mb"].as_u64().unwrap_or(0) * 1024,
                    hugepages: c["hugepages"]
                        .as_object()
                        .map(|m| {
                            m.iter()
                                .map(|(k, n)| (k.parse().unwrap_or(0), n.as_u64().unwrap_or(0)))
                                .collect()
                        })
                        .unwrap_or_default(),
                })
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let online = cells.iter().flat_map(|c| c.cpus.iter().copied()).collect();
    Case {
        id: name.to_string(),
        host: Host {
            arch: h["arch"].as_str().unwrap_or("x86_64").to_string(),
            base_page_kb: h["system_page_kb"].as_u64().unwrap_or(4),
            online,
            cells,
            offline: Vec::new(),
            cpu_count: None,
        },
        config: CaseConfig {
            cpu_dedicated_set: cfg["cpu_dedicated_set"].as_str().map(str::to_string),
            vcpu_pin_set: cfg["vcpu_pin_set"].as_str().map(str::to_string),
            cpu_shared_set: cfg["cpu_shared_set"].as_str().map(str::to_string),
            reserved_huge_pages: cfg["reserved_huge_pages"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
            cpu_allocation_ratio: cfg["cpu_allocation_ratio"].as_f64().unwrap_or(4.0),
            ram_allocation_ratio: cfg["ram_allocation_ratio"].as_f64().unwrap_or(1.0),
            packing: cfg["packing_host_numa_cells_allocation_strategy"]
                .as_bool()
                .unwrap_or(false),
            neutron: serde_json::from_value(cfg["neutron"].clone()).ok(),
            cpu_power_management: cfg["cpu_power_management"].as_bool().unwrap_or(false),
        },
        steps: serde_json::from_value(v["steps"].clone()).expect("steps"),
        root,
        power_host: h["power_host"].as_str().map(str::to_string),
        seen_online: h["seen_online"].as_bool().unwrap_or(false),
    }
}

/// xorshift64*: a small seeded generator, the same sequence on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in lo..=hi.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.range(0, items.len() as u64 - 1) as usize]
    }
}

fn cpulist(cpus: &[u32]) -> String {
    let mut v = cpus.to_vec();
    v.sort_unstable();
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// A random host: 1-16 cells (at most 256 CPUs), with or without SMT, hugepages, CPU sets.
fn random_host(r: &mut Rng) -> (Host, CaseConfig) {
    let ncells = *r.pick(&[1u32, 1, 2, 2, 2, 3, 4, 4, 8, 16]);
    let threads = if r.chance(60) { 2 } else { 1 };
    let cores = match ncells {
        16 => r.range(1, 4),
        8 => r.range(1, 6),
        _ => r.range(1, 8),
    } as u32;
    let per = cores * threads;
    let total = per * ncells;
    let mut cells = Vec::new();
    for n in 0..ncells {
        // Threads of core c are c and c + (all cores of the host), as on most x86 machines.
        let cpus: Vec<u32> = (0..threads)
            .flat_map(|t| (0..cores).map(move |c| t * cores * ncells + n * cores + c))
            .collect();
        let siblings: Vec<Vec<u32>> = (0..cores)
            .map(|c| {
                (0..threads)
                    .map(|t| t * cores * ncells + n * cores + c)
                    .collect()
            })
            .collect();
        let memory_mb = *r.pick(&[2048u64, 4096, 8192, 16384, 32768, 65536]);
        let mut hugepages = BTreeMap::new();
        if r.chance(50) {
            let max_2m = memory_mb / 2 / 2; // at most a quarter of the memory
            hugepages.insert(2048, r.range(0, max_2m));
        }
        if r.chance(35) && memory_mb >= 8192 {
            hugepages.insert(1_048_576, r.range(0, memory_mb / 1024 / 4));
        }
        if r.chance(20) {
            // Pools of sizes the kernel supports but nobody configured.
            hugepages.entry(2048).or_insert(0);
            hugepages.entry(1_048_576).or_insert(0);
        }
        cells.push(Cell {
            id: n,
            cpus,
            siblings,
            socket: Some(i64::from(n / 2.max(ncells / 2).max(1))),
            memory_kb: memory_mb * 1024,
            hugepages,
        });
    }
    let online: Vec<u32> = (0..total).collect();
    let mut cfg = CaseConfig {
        cpu_allocation_ratio: *r.pick(&[1.0, 1.5, 4.0, 16.0]),
        ram_allocation_ratio: *r.pick(&[1.0, 1.0, 1.5]),
        packing: r.chance(25),
        ..CaseConfig::default()
    };
    match r.range(0, 3) {
        // Legacy: neither set, or Nova's vcpu_pin_set on some of the CPUs.
        0 => {
            if r.chance(40) {
                let mut pinned: Vec<u32> =
                    online.iter().copied().filter(|_| r.chance(60)).collect();
                if pinned.is_empty() {
                    pinned.push(online[0]);
                }
                cfg.vcpu_pin_set = Some(cpulist(&pinned));
            }
        }
        // Both sets: the first core's threads of each cell shared, the rest dedicated.
        1 | 2 => {
            let mut shared = Vec::new();
            let mut dedicated = Vec::new();
            for c in &cells {
                for (i, s) in c.siblings.iter().enumerate() {
                    if i == 0 && (cores > 1 || r.chance(50)) {
                        shared.extend(s);
                    } else {
                        dedicated.extend(s);
                    }
                }
            }
            if !shared.is_empty() {
                cfg.cpu_shared_set = Some(cpulist(&shared));
            }
            if !dedicated.is_empty() {
                cfg.cpu_dedicated_set = Some(cpulist(&dedicated));
            }
        }
        // Dedicated only.
        _ => cfg.cpu_dedicated_set = Some(cpulist(&online)),
    }
    if r.chance(25) {
        for c in &cells {
            for (size, total) in &c.hugepages {
                if *total > 0 && r.chance(50) {
                    let count = r.range(0, *total / 2);
                    cfg.reserved_huge_pages.push(if r.chance(50) {
                        json!(format!(
                            "node:{},size:{},count:{count}",
                            c.id,
                            if *size == 1_048_576 {
                                "1GB".to_string()
                            } else {
                                size.to_string()
                            }
                        ))
                    } else {
                        json!({"node": c.id, "size": size, "count": count})
                    });
                }
            }
        }
    }
    let host = Host {
        arch: "x86_64".into(),
        base_page_kb: 4,
        online,
        cells,
        offline: Vec::new(),
        cpu_count: None,
    };
    (host, cfg)
}

/// With a chance of 1 in 8, CPU power management on a host with dedicated CPUs: some of them
/// (never CPU 0) powered down, as Nova leaves those no guest runs on. Drawn from its own
/// generator so that the other cases stay as they were.
fn power_manage(r: &mut Rng, host: &mut Host, cfg: &mut CaseConfig) {
    let Some(dedicated) = cfg.cpu_dedicated_set.clone() else {
        return;
    };
    if !r.chance(12) {
        return;
    }
    cfg.cpu_power_management = true;
    host.cpu_count = Some(host.online.len() as u32);
    host.offline = dedicated
        .split(',')
        .filter_map(|c| c.parse::<u32>().ok())
        .filter(|c| *c != 0 && r.chance(50))
        .collect();
}

/// A random flavor with NUMA-relevant extra specs (valid most of the time, not always).
fn random_flavor(r: &mut Rng, host: &Host) -> (Flavor, Option<serde_json::Map<String, Value>>) {
    let max_nodes = host.cells.len().min(4) as u64;
    let nodes = if r.chance(60) {
        1
    } else {
        r.range(1, max_nodes)
    };
    let per_node = r.range(1, 4);
    let vcpus = (nodes * per_node) as i64;
    let mem_unit = *r.pick(&[256i64, 512, 1024, 2048]);
    let memory_mb = nodes as i64 * mem_unit * r.range(1, 4) as i64;
    let mut specs = BTreeMap::new();
    let policy = *r.pick(&["dedicated", "dedicated", "shared", "none", "mixed", "image"]);
    match policy {
        "dedicated" => {
            specs.insert("hw:cpu_policy".into(), "dedicated".into());
            if r.chance(35) {
                specs.insert(
                    "hw:cpu_thread_policy".into(),
                    r.pick(&["prefer", "isolate", "require"]).to_string(),
                );
            }
            if r.chance(20) {
                specs.insert(
                    "hw:emulator_threads_policy".into(),
                    r.pick(&["share", "isolate"]).to_string(),
                );
            }
        }
        "mixed" => {
            specs.insert("hw:cpu_policy".into(), "mixed".into());
            if vcpus > 1 {
                specs.insert("hw:cpu_dedicated_mask".into(), "^0".into());
            }
        }
        "shared" => {
            specs.insert("hw:cpu_policy".into(), "shared".into());
        }
        _ => {}
    }
    if nodes > 1 || r.chance(40) {
        specs.insert("hw:numa_nodes".into(), nodes.to_string());
    }
    if r.chance(40) {
        specs.insert(
            "hw:mem_page_size".into(),
            r.pick(&["small", "large", "any", "2048", "1GB", "2MB"])
                .to_string(),
        );
    }
    if nodes == 2 && r.chance(20) && vcpus >= 2 {
        // Asymmetric cells.
        let first = r.range(1, vcpus as u64 - 1) as i64;
        let mem_first = mem_unit;
        specs.insert("hw:numa_cpus.0".into(), format!("0-{}", first - 1));
        specs.insert("hw:numa_cpus.1".into(), format!("{first}-{}", vcpus - 1));
        specs.insert("hw:numa_mem.0".into(), mem_first.to_string());
        specs.insert("hw:numa_mem.1".into(), (memory_mb - mem_first).to_string());
    }
    let image = if policy == "image" {
        let mut m = serde_json::Map::new();
        m.insert("hw_cpu_policy".into(), json!("dedicated"));
        if r.chance(30) {
            m.insert(
                "hw_cpu_thread_policy".into(),
                json!(r.pick(&["prefer", "require", "isolate"]).to_string()),
            );
        }
        Some(m)
    } else {
        None
    };
    (
        Flavor {
            vcpus,
            memory_mb,
            extra_specs: specs,
        },
        image,
    )
}

/// `count` random cases from `seed`.
/// Physnets p0 and p1 on random non-empty sets of the host's cells; the tunnel on some.
fn random_neutron(r: &mut Rng, host: &Host) -> NeutronCase {
    let ids: Vec<u32> = host.cells.iter().map(|c| c.id).collect();
    let subset = |r: &mut Rng, non_empty: bool| -> Vec<u32> {
        let mut v: Vec<u32> = ids.iter().copied().filter(|_| r.chance(40)).collect();
        if v.is_empty() && non_empty {
            v.push(*r.pick(&ids));
        }
        v
    };
    NeutronCase {
        physnets: [
            ("p0".to_string(), subset(r, true)),
            ("p1".to_string(), subset(r, true)),
        ]
        .into(),
        tunnel: subset(r, false),
    }
}

/// Some of p0, p1 and p9 (a physnet with no affinity), tunneled or not.
fn random_network(r: &mut Rng) -> NetworkCase {
    NetworkCase {
        physnets: ["p0", "p1", "p9"]
            .iter()
            .filter(|_| r.chance(40))
            .map(|p| p.to_string())
            .collect(),
        tunneled: r.chance(40),
    }
}

pub fn generate(seed: u64, count: usize) -> Vec<Case> {
    let mut r = Rng::new(seed);
    let mut out = Vec::with_capacity(count);
    for n in 0..count {
        let (mut host, mut config) = random_host(&mut r);
        let mut p = Rng::new(seed ^ (n as u64).wrapping_mul(0x9E37_79B9) ^ 0x5057_524d);
        power_manage(&mut p, &mut host, &mut config);
        if r.chance(30) {
            config.neutron = Some(random_neutron(&mut r, &host));
        }
        let mut steps = Vec::new();
        let mut live: Vec<String> = Vec::new();
        let mut resizing: Vec<String> = Vec::new();
        let nsteps = r.range(4, 14);
        for s in 0..nsteps {
            let roll = r.range(0, 99);
            let id = format!("g{s}");
            if roll < 55 || live.is_empty() {
                let (flavor, image) = random_flavor(&mut r, &host);
                let op = if r.chance(15) { "check" } else { "claim" };
                if op == "claim" {
                    live.push(id.clone());
                }
                steps.push(Step {
                    op: op.into(),
                    id,
                    flavor: Some(flavor),
                    image_properties: image,
                    rtrack_host: None,
                    network: None,
                });
            } else if roll < 72 {
                let victim = live.remove(r.range(0, live.len() as u64 - 1) as usize);
                resizing.retain(|x| x != &victim);
                steps.push(Step {
                    op: "free".into(),
                    id: victim,
                    flavor: None,
                    image_properties: None,
                    rtrack_host: None,
                    network: None,
                });
            } else if roll < 84 {
                let target = r.pick(&live).clone();
                if resizing.contains(&target) {
                    let op = if r.chance(50) { "confirm" } else { "revert" };
                    resizing.retain(|x| x != &target);
                    steps.push(Step {
                        op: op.into(),
                        id: target,
                        flavor: None,
                        image_properties: None,
                        rtrack_host: None,
                        network: None,
                    });
                } else {
                    let (flavor, image) = random_flavor(&mut r, &host);
                    resizing.push(target.clone());
                    steps.push(Step {
                        op: "resize".into(),
                        id: target,
                        flavor: Some(flavor),
                        image_properties: image,
                        rtrack_host: None,
                        network: None,
                    });
                }
            } else {
                steps.push(Step {
                    op: "audit".into(),
                    id: String::new(),
                    flavor: None,
                    image_properties: None,
                    rtrack_host: None,
                    network: None,
                });
            }
        }
        if config.neutron.is_some() {
            for st in steps.iter_mut().filter(|s| s.flavor.is_some()) {
                if r.chance(50) {
                    st.network = Some(random_network(&mut r));
                }
            }
        }
        out.push(Case {
            id: format!("random-{seed}-{n}"),
            host,
            config,
            steps,
            root: None,
            power_host: None,
            seen_online: false,
        });
    }
    out
}
