//! PCI cases for the differential test: a synthetic host (SR-IOV PFs with their VFs, plain
//! functions, NUMA nodes and sockets), `[pci]` device specs and aliases, and steps (claims, dry
//! runs, frees, restarts, port attach and detach, live-migration claims); the named scenarios,
//! read from `fixtures/pci_cases/*.toml` (one file per scenario, a comment at its top saying
//! what it checks), and a seeded generator of random ones.
//!
//! Devices are named by address here; provider uuids, request ids and NUMA cells are filled in
//! by the test from rtrack's tracker when the case runs.

pub mod vdpa;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// PCI ids as the files write them: hexadecimal text (`"8086"`, class `"030200"`).
mod hex {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer, T: Into<u32> + Copy>(v: &T, s: S) -> Result<S::Ok, S::Error> {
        let v: u32 = (*v).into();
        s.serialize_str(&if v > 0xffff {
            format!("{v:06x}")
        } else {
            format!("{v:04x}")
        })
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: TryFrom<u32>>(d: D) -> Result<T, D::Error> {
        let text = String::deserialize(d)?;
        u32::from_str_radix(&text, 16)
            .ok()
            .and_then(|v| T::try_from(v).ok())
            .ok_or_else(|| serde::de::Error::custom(format!("{text:?}: expected hexadecimal")))
    }
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// An SR-IOV PF and its VFs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pf {
    pub address: String,
    #[serde(with = "hex")]
    pub vendor: u16,
    #[serde(with = "hex")]
    pub pf_product: u16,
    #[serde(with = "hex")]
    pub vf_product: u16,
    pub vfs: u32,
    pub offset: u32,
    pub stride: u32,
    /// -1: unknown.
    pub numa: i32,
    /// "iavf" (a netdev per VF when the PF has an ifname), "vfio-pci" (none), or unbound.
    pub vf_driver: Option<String>,
    pub ifname: Option<String>,
    /// VFs from this index on lose their netdev (so their `parent_ifname`).
    pub netdev_until: Option<u32>,
    /// The first `vdpa` VFs have a vDPA device on them (Nova's `vdpa` type).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub vdpa: u32,
}

impl Pf {
    pub fn new(address: &str, ids: (u16, u16, u16), vfs: u32, numa: i32) -> Pf {
        Pf {
            address: address.into(),
            vendor: ids.0,
            pf_product: ids.1,
            vf_product: ids.2,
            vfs,
            offset: 8,
            stride: 1,
            numa,
            vf_driver: Some("iavf".into()),
            ifname: None,
            netdev_until: None,
            vdpa: 0,
        }
    }
}

/// A function without SR-IOV.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plain {
    pub address: String,
    #[serde(with = "hex")]
    pub vendor: u16,
    #[serde(with = "hex")]
    pub product: u16,
    #[serde(with = "hex")]
    pub class: u32,
    pub numa: i32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    pub numa_nodes: u32,
    pub sockets: u32,
    pub memory_mb_per_node: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pfs: Vec<Pf>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plain: Vec<Plain>,
}

impl Host {
    pub fn new(numa_nodes: u32, pfs: Vec<Pf>, plain: Vec<Plain>) -> Host {
        Host {
            numa_nodes,
            sockets: 1,
            memory_mb_per_node: 8192,
            pfs,
            plain,
        }
    }
}

/// Intel E810 (PF 1592, VFs 1889).
pub const E810: (u16, u16, u16) = (0x8086, 0x1592, 0x1889);
/// Intel X710 (PF 1572, VFs 154c).
pub const X710: (u16, u16, u16) = (0x8086, 0x1572, 0x154c);
/// Mellanox ConnectX-5 (PF 1017, VFs 1018).
pub const CX5: (u16, u16, u16) = (0x15b3, 0x1017, 0x1018);

pub fn gpu(address: &str, numa: i32) -> Plain {
    Plain {
        address: address.into(),
        vendor: 0x10de,
        product: 0x20b0,
        class: 0x030200,
        numa,
    }
}

pub fn nvme(address: &str, numa: i32) -> Plain {
    Plain {
        address: address.into(),
        vendor: 0x144d,
        product: 0xa808,
        class: 0x010802,
        numa,
    }
}

/// A PCI request of a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Req {
    pub count: u32,
    pub spec: BTreeMap<String, String>,
    /// An alias request as the scheduler hands it over (alias_name set).
    pub alias: Option<String>,
    /// A neutron port's request (requester_id set, no alias).
    pub port: bool,
    pub numa_policy: Option<String>,
    /// Placement's allocation: the provider (named by the address it is named after) of each
    /// device, once per device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub providers: Vec<String>,
    /// Placement's allocation picked when the case runs, from the providers whose devices
    /// match the spec (seeded); none when none does.
    pub providers_auto: Option<u64>,
}

pub fn m(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A port's request for a VF with `spec` (count 1).
pub fn port(pairs: &[(&str, &str)]) -> Req {
    Req {
        count: 1,
        spec: m(pairs),
        alias: None,
        port: true,
        numa_policy: None,
        providers: Vec::new(),
        providers_auto: None,
    }
}

/// An alias request (as a RequestSpec carries it) of `count` devices matching `pairs`.
pub fn aliased(alias: &str, count: u32, pairs: &[(&str, &str)]) -> Req {
    Req {
        count,
        spec: m(pairs),
        alias: Some(alias.into()),
        port: false,
        numa_policy: None,
        providers: Vec::new(),
        providers_auto: None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Build claim (Nova: claim_instance + allocate).
    Claim,
    /// Dry run (Nova: support_requests, and claim_instance on a copy).
    Check,
    /// The instance's devices freed (rtrack: abort; Nova: free_instance).
    Free,
    /// Ports attached to a running instance.
    Attach,
    /// The device of one port request freed and the request removed.
    Detach,
    /// A new tracker over the stored records, then an audit.
    Restart,
    /// A live migration's destination claim (Nova: claim_only).
    LiveClaim,
    /// It succeeded: the destination keeps the devices (Nova: allocate).
    LiveConfirm,
    /// It was rolled back: the destination frees them (Nova: free_claims).
    LiveRevert,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub op: Op,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub instance: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<Req>,
    /// `pci_passthrough:alias` of the flavor ("a:2,b:1").
    pub flavor_alias: Option<String>,
    /// `hw:pci_numa_affinity_policy` of the flavor.
    pub flavor_numa_policy: Option<String>,
    /// The guest has a one-cell NUMA topology with this much memory (MiB).
    pub guest_mb: Option<i64>,
    /// Detach: the n-th request given to the instance (by claims and attaches, failed ones
    /// too).
    #[serde(default, skip_serializing_if = "is_zero_index")]
    pub request_index: usize,
}

fn is_zero_index(v: &usize) -> bool {
    *v == 0
}

impl Step {
    pub fn new(op: Op, instance: u32) -> Step {
        Step {
            op,
            instance,
            requests: Vec::new(),
            flavor_alias: None,
            flavor_numa_policy: None,
            guest_mb: None,
            request_index: 0,
        }
    }
    pub fn reqs(mut self, r: Vec<Req>) -> Step {
        self.requests = r;
        self
    }
}

pub fn claim(i: u32, r: Vec<Req>) -> Step {
    Step::new(Op::Claim, i).reqs(r)
}
pub fn check(r: Vec<Req>) -> Step {
    Step::new(Op::Check, 0).reqs(r)
}
pub fn free(i: u32) -> Step {
    Step::new(Op::Free, i)
}
pub fn attach(i: u32, r: Vec<Req>) -> Step {
    Step::new(Op::Attach, i).reqs(r)
}
pub fn detach(i: u32, request_index: usize) -> Step {
    let mut s = Step::new(Op::Detach, i);
    s.request_index = request_index;
    s
}
pub fn restart() -> Step {
    Step::new(Op::Restart, 0)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub id: String,
    #[serde(default)]
    pub report_in_placement: bool,
    pub host: Host,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_spec: Vec<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alias: Vec<BTreeMap<String, String>>,
    pub steps: Vec<Step>,
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

fn hex(v: u16) -> String {
    format!("{v:04x}")
}

/// What the generator knows of a tracked kind of device (to write requests for it).
struct Kind {
    vendor: String,
    product: String,
    dev_type: &'static str,
    physnet: Option<String>,
    alias: Option<String>,
}

fn random_host(r: &mut Rng) -> Host {
    let numa_nodes = *r.pick(&[1u32, 1, 2, 2, 2]);
    let sockets = if numa_nodes == 2 && r.chance(40) {
        2
    } else {
        1
    };
    let npfs = r.range(1, 4) as usize;
    let mut buses = vec![0x18u32, 0x3b, 0x5e, 0x86, 0xaf, 0xd8];
    let mut pfs: Vec<Pf> = Vec::new();
    let numa = |r: &mut Rng| -> i32 {
        if r.chance(10) {
            -1
        } else {
            r.range(0, u64::from(numa_nodes) - 1) as i32
        }
    };
    while pfs.len() < npfs {
        let bus = buses.remove(r.range(0, buses.len() as u64 - 1) as usize);
        let ids = *r.pick(&[E810, E810, X710, CX5]);
        let vfs = *r.pick(&[0u32, 1, 2, 3, 4, 4, 6, 8, 16]);
        // Sometimes two PFs of one card (functions 0 and 1), the second's VFs right after the
        // first's. (Not interleaved: then the pool order after a restart depends on which VFs
        // of a pool are in use, which differs by design; see restart-interleaved-vfs.)
        let pair = pfs.len() + 2 <= npfs && r.chance(20);
        let node = numa(r);
        let driver = *r.pick(&["iavf", "iavf", "iavf", "vfio-pci", "vfio-pci", "none"]);
        for f in 0..if pair { 2 } else { 1 } {
            let mut pf = Pf::new(&format!("0000:{bus:02x}:00.{f}"), ids, vfs, node);
            if f == 1 {
                pf.offset = 7 + vfs;
            }
            pf.vf_driver = (driver != "none").then(|| driver.to_string());
            pf.ifname = (!r.chance(10)).then(|| format!("ens{bus:x}f{f}"));
            if driver == "iavf" && vfs > 1 && r.chance(10) {
                pf.netdev_until = Some(r.range(1, u64::from(vfs) - 1) as u32);
            }
            pfs.push(pf);
        }
    }
    let mut plain = Vec::new();
    for slot in 1..=r.range(0, 3) as u32 {
        let node = numa(r);
        let address = format!("0000:{:02x}:00.0", slot + 0x30);
        plain.push(match r.range(0, 2) {
            0 => gpu(&address, node),
            1 => Plain {
                product: 0x2236,
                ..gpu(&address, node)
            },
            _ => nvme(&address, node),
        });
    }
    let mut h = Host::new(numa_nodes, pfs, plain);
    h.sockets = sockets;
    h
}

/// A random case: host, specs, aliases, 5-15 steps.
fn random_case(r: &mut Rng, id: String) -> Case {
    let host = random_host(r);
    let rip = r.chance(25);
    let mut specs = Vec::new();
    let mut kinds: Vec<Kind> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    // Sometimes one PF's VFs go to another network through an address spec first.
    if r.chance(20) {
        let pf = r.pick(&host.pfs).clone();
        let bus = &pf.address[..7];
        specs.push(m(&[
            ("address", &format!("{bus}:*.*")),
            ("vendor_id", &hex(pf.vendor)),
            ("product_id", &hex(pf.vf_product)),
            ("physical_network", "physnet2"),
        ]));
        kinds.push(Kind {
            vendor: hex(pf.vendor),
            product: hex(pf.vf_product),
            dev_type: "type-VF",
            physnet: Some("physnet2".into()),
            alias: None,
        });
    }
    for pf in &host.pfs {
        let (v, p) = (hex(pf.vendor), hex(pf.vf_product));
        if !seen.insert((v.clone(), p.clone())) {
            continue;
        }
        let mut s = m(&[("vendor_id", &v), ("product_id", &p)]);
        let physnet = r
            .chance(50)
            .then(|| r.pick(&["physnet1", "physnet1", "physnet2"]).to_string());
        if let Some(n) = &physnet {
            s.insert("physical_network".into(), n.clone());
        }
        if r.chance(20) {
            s.insert("trusted".into(), r.pick(&["true", "yes"]).to_string());
        }
        if r.chance(15) {
            s.insert(
                "live_migratable".into(),
                r.pick(&["yes", "false"]).to_string(),
            );
        }
        specs.push(s);
        kinds.push(Kind {
            vendor: v,
            product: p,
            dev_type: "type-VF",
            physnet,
            alias: None,
        });
    }
    // PFs too, sometimes (not with Placement: a PF and its VFs are never both reported).
    if !rip {
        for pf in &host.pfs {
            let (v, p) = (hex(pf.vendor), hex(pf.pf_product));
            if r.chance(25) && seen.insert((v.clone(), p.clone())) {
                specs.push(m(&[("vendor_id", &v), ("product_id", &p)]));
                kinds.push(Kind {
                    vendor: v,
                    product: p,
                    dev_type: "type-PF",
                    physnet: None,
                    alias: None,
                });
            }
        }
    }
    for d in &host.plain {
        let (v, p) = (hex(d.vendor), hex(d.product));
        if r.chance(80) && seen.insert((v.clone(), p.clone())) {
            let mut s = m(&[("vendor_id", &v), ("product_id", &p)]);
            if rip && r.chance(30) {
                s.insert("one_time_use".into(), "true".into());
            }
            specs.push(s);
            kinds.push(Kind {
                vendor: v,
                product: p,
                dev_type: "type-PCI",
                physnet: None,
                alias: None,
            });
        }
    }
    // Aliases for the kinds without a network.
    let mut aliases = Vec::new();
    let mut n = 0;
    for k in kinds.iter_mut().filter(|k| k.physnet.is_none()) {
        n += 1;
        let name = format!("a{n}");
        let mut a = m(&[
            ("name", &name),
            ("vendor_id", &k.vendor),
            ("product_id", &k.product),
            ("device_type", k.dev_type),
        ]);
        if r.chance(25) {
            a.insert(
                "numa_policy".into(),
                r.pick(&["required", "legacy", "preferred", "socket"])
                    .to_string(),
            );
        }
        if r.chance(10) {
            a.insert("live_migratable".into(), r.pick(&["yes", "no"]).to_string());
        }
        aliases.push(a);
        k.alias = Some(name);
    }
    // Rarely, an alias name given twice (for another kind of the same device type; not with
    // Placement, where Nova allows one spec per alias: see alias-multi-spec-in-placement).
    if !rip && r.chance(8) && aliases.len() >= 2 {
        let first = aliases[0].clone();
        if let Some(other) = aliases[1..]
            .iter()
            .find(|a| a["device_type"] == first["device_type"])
            .cloned()
        {
            let mut twice = other.clone();
            twice.insert("name".into(), first["name"].clone());
            for k in ["numa_policy", "live_migratable"] {
                match first.get(k) {
                    Some(v) => twice.insert(k.into(), v.clone()),
                    None => twice.remove(k),
                };
            }
            if r.chance(25) {
                // Without device_type (Nova fails every alias then).
                aliases[0].remove("device_type");
                twice.remove("device_type");
            }
            aliases.push(twice);
        }
    }
    let physnets: Vec<String> = {
        let mut p: Vec<String> = kinds.iter().filter_map(|k| k.physnet.clone()).collect();
        p.sort();
        p.dedup();
        p
    };
    let ifnames: Vec<String> = host.pfs.iter().filter_map(|p| p.ifname.clone()).collect();
    let aliased_kinds: Vec<&Kind> = kinds.iter().filter(|k| k.alias.is_some()).collect();
    let policies = ["required", "legacy", "preferred", "socket"];

    let random_requests = |r: &mut Rng, ports_only: bool| -> (Vec<Req>, Option<String>) {
        let mut reqs = Vec::new();
        let mut flavor = Vec::new();
        for _ in 0..r.range(1, 3) {
            let want_port = ports_only || aliased_kinds.is_empty() || r.chance(35);
            if want_port && !physnets.is_empty() {
                let mut spec = vec![("physical_network", r.pick(&physnets).clone())];
                if r.chance(10) {
                    spec[0].1 = "physnet3".into();
                }
                if r.chance(15) {
                    spec.push((
                        "trusted",
                        r.pick(&["true", "TRUE", "yes", "True", "YES"]).to_string(),
                    ));
                }
                if r.chance(15) && !ifnames.is_empty() {
                    spec.push(("parent_ifname", r.pick(&ifnames).clone()));
                }
                let pairs: Vec<(&str, &str)> = spec.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let mut p = port(&pairs);
                if r.chance(30) {
                    p.numa_policy = Some(r.pick(&policies).to_string());
                }
                reqs.push(p);
            } else if !ports_only && !aliased_kinds.is_empty() {
                let k = r.pick(&aliased_kinds);
                let count = r.range(1, 3) as u32;
                let name = k.alias.clone().unwrap_or_default();
                if r.chance(50) {
                    flavor.push(format!("{name}:{count}"));
                } else {
                    let mut q = aliased(
                        &name,
                        count,
                        &[
                            ("vendor_id", &k.vendor),
                            ("product_id", &k.product),
                            ("dev_type", k.dev_type),
                        ],
                    );
                    if r.chance(30) {
                        q.numa_policy = Some(r.pick(&policies).to_string());
                    }
                    if rip && r.chance(70) {
                        q.providers_auto = Some(r.next());
                    }
                    reqs.push(q);
                }
            }
        }
        let flavor = (!flavor.is_empty()).then(|| flavor.join(","));
        (reqs, flavor)
    };

    let mut steps = Vec::new();
    let mut live: Vec<u32> = Vec::new();
    // Port requests given to each instance: (instance, index among its requests).
    let mut given: BTreeMap<u32, usize> = BTreeMap::new();
    let mut ports: Vec<(u32, usize)> = Vec::new();
    let mut next = 1u32;
    for _ in 0..r.range(5, 15) {
        let roll = r.range(0, 99);
        let numa_guest = host.numa_nodes > 1 && r.chance(30);
        if roll < 40 || live.is_empty() {
            let (reqs, flavor) = random_requests(r, false);
            let i = next;
            next += 1;
            let mut s = claim(i, reqs);
            s.flavor_alias = flavor;
            if r.chance(15) {
                s.flavor_numa_policy = Some(r.pick(&policies).to_string());
            }
            if numa_guest {
                s.guest_mb = Some(64);
            }
            let nreq = s.requests.len()
                + s.flavor_alias
                    .as_deref()
                    .map_or(0, |a| a.split(',').count());
            for (j, q) in s.requests.iter().enumerate() {
                if q.port {
                    ports.push((i, j));
                }
            }
            given.insert(i, nreq);
            live.push(i);
            steps.push(s);
        } else if roll < 55 {
            let (reqs, flavor) = random_requests(r, false);
            let mut s = check(reqs);
            s.flavor_alias = flavor;
            if numa_guest {
                s.guest_mb = Some(64);
            }
            steps.push(s);
        } else if roll < 70 {
            let i = live.remove(r.range(0, live.len() as u64 - 1) as usize);
            ports.retain(|(x, _)| *x != i);
            steps.push(free(i));
        } else if roll < 78 {
            steps.push(restart());
        } else if roll < 90 && !physnets.is_empty() {
            let i = *r.pick(&live);
            let (reqs, _) = random_requests(r, true);
            let base = given.get(&i).copied().unwrap_or(0);
            for j in 0..reqs.len() {
                ports.push((i, base + j));
            }
            *given.entry(i).or_default() += reqs.len();
            steps.push(attach(i, reqs));
        } else if !ports.is_empty() {
            let (i, j) = ports.remove(r.range(0, ports.len() as u64 - 1) as usize);
            steps.push(detach(i, j));
        } else {
            steps.push(restart());
        }
    }
    Case {
        id,
        host,
        report_in_placement: rip,
        device_spec: specs,
        alias: aliases,
        steps,
    }
}

/// `count` random cases from `seed`.
pub fn generate(seed: u64, count: usize) -> Vec<Case> {
    let mut r = Rng::new(seed);
    (0..count)
        .map(|n| {
            let mut c = random_case(&mut r, format!("random-{seed}-{n}"));
            vdpa::sprinkle(
                &mut c,
                seed ^ (n as u64).wrapping_mul(0x9E37_79B9) ^ 0x7664_7061,
            );
            c
        })
        .collect()
}

/// The named scenarios: `fixtures/pci_cases/*.toml`, in file name order (a comment at the top
/// of each says what it checks).
pub fn named() -> Vec<Case> {
    let dir = rtrack_fixtures::fixtures_dir().join("pci_cases");
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|f| f.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()))
        })
        .collect()
}
