//! PCI cases for the differential test: a synthetic host (SR-IOV PFs with their VFs, plain
//! functions, NUMA nodes and sockets), `[pci]` device specs and aliases, and steps (claims, dry
//! runs, frees, restarts, port attach and detach, live-migration claims); the named scenarios
//! and a seeded generator of random ones.
//!
//! Devices are named by address here; provider uuids, request ids and NUMA cells are filled in
//! by the test from rtrack's tracker when the case runs.

pub mod vdpa;

use std::collections::BTreeMap;

/// An SR-IOV PF and its VFs.
#[derive(Debug, Clone)]
pub struct Pf {
    pub address: String,
    pub vendor: u16,
    pub pf_product: u16,
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
    /// VFs with netdevs: `parent_ifname` = `ifname`.
    pub fn netdev(mut self, ifname: &str) -> Pf {
        self.ifname = Some(ifname.into());
        self.vf_driver = Some("iavf".into());
        self
    }
    /// VFs bound to vfio-pci: no netdev, no `parent_ifname`.
    pub fn vfio(mut self, ifname: &str) -> Pf {
        self.ifname = Some(ifname.into());
        self.vf_driver = Some("vfio-pci".into());
        self
    }
}

/// A function without SR-IOV.
#[derive(Debug, Clone)]
pub struct Plain {
    pub address: String,
    pub vendor: u16,
    pub product: u16,
    pub class: u32,
    pub numa: i32,
}

#[derive(Debug, Clone)]
pub struct Host {
    pub numa_nodes: u32,
    pub sockets: u32,
    pub memory_mb_per_node: u64,
    pub pfs: Vec<Pf>,
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
#[derive(Debug, Clone)]
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

impl Req {
    pub fn policy(mut self, p: &str) -> Req {
        self.numa_policy = Some(p.into());
        self
    }
    pub fn rp(mut self, providers: &[&str]) -> Req {
        self.providers = providers.iter().map(|p| p.to_string()).collect();
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

#[derive(Debug, Clone)]
pub struct Step {
    pub op: Op,
    pub instance: u32,
    pub requests: Vec<Req>,
    /// `pci_passthrough:alias` of the flavor ("a:2,b:1").
    pub flavor_alias: Option<String>,
    /// `hw:pci_numa_affinity_policy` of the flavor.
    pub flavor_numa_policy: Option<String>,
    /// The guest has a one-cell NUMA topology with this much memory (MiB).
    pub guest_mb: Option<i64>,
    /// Detach: the n-th request given to the instance (by claims and attaches, failed ones
    /// too).
    pub request_index: usize,
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
    pub fn alias(mut self, a: &str) -> Step {
        self.flavor_alias = Some(a.into());
        self
    }
    pub fn flavor_policy(mut self, p: &str) -> Step {
        self.flavor_numa_policy = Some(p.into());
        self
    }
    pub fn numa(mut self, mb: i64) -> Step {
        self.guest_mb = Some(mb);
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
pub fn live_claim(i: u32, r: Vec<Req>) -> Step {
    Step::new(Op::LiveClaim, i).reqs(r)
}
pub fn live_confirm(i: u32) -> Step {
    Step::new(Op::LiveConfirm, i)
}
pub fn live_revert(i: u32) -> Step {
    Step::new(Op::LiveRevert, i)
}

#[derive(Debug, Clone)]
pub struct Case {
    pub id: String,
    pub host: Host,
    pub report_in_placement: bool,
    pub device_spec: Vec<BTreeMap<String, String>>,
    pub alias: Vec<BTreeMap<String, String>>,
    pub steps: Vec<Step>,
}

fn case(
    id: &str,
    host: Host,
    device_spec: Vec<BTreeMap<String, String>>,
    alias: Vec<BTreeMap<String, String>>,
    steps: Vec<Step>,
) -> Case {
    Case {
        id: id.into(),
        host,
        report_in_placement: false,
        device_spec,
        alias,
        steps,
    }
}

fn in_placement(mut c: Case) -> Case {
    c.report_in_placement = true;
    c
}

const VF_E810: &[(&str, &str)] = &[
    ("vendor_id", "8086"),
    ("product_id", "1889"),
    ("dev_type", "type-VF"),
];
const PF_E810: &[(&str, &str)] = &[
    ("vendor_id", "8086"),
    ("product_id", "1592"),
    ("dev_type", "type-PF"),
];
const GPU: &[(&str, &str)] = &[
    ("vendor_id", "10de"),
    ("product_id", "20b0"),
    ("dev_type", "type-PCI"),
];
const NVME: &[(&str, &str)] = &[
    ("vendor_id", "144d"),
    ("product_id", "a808"),
    ("dev_type", "type-PCI"),
];

fn alias_of(name: &str, pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut a = m(&[("name", name)]);
    for (k, v) in pairs {
        let k = if *k == "dev_type" { "device_type" } else { k };
        a.insert(k.to_string(), v.to_string());
    }
    a
}

/// The named scenarios.
pub fn named() -> Vec<Case> {
    let physnet1 = [("physical_network", "physnet1")];
    let mut out = Vec::new();

    // Tags: a device spec's trusted "yes" is kept as written and requests match it
    // case-insensitively ("YES" yes, "True" no); managed is normalized to "true".
    out.push(case(
        "tags-trusted-and-managed",
        Host::new(
            1,
            vec![Pf::new("0000:3b:00.0", E810, 4, 0).netdev("ens1f0")],
            vec![],
        ),
        vec![m(&[
            ("vendor_id", "8086"),
            ("product_id", "1889"),
            ("physical_network", "physnet1"),
            ("trusted", "yes"),
            ("managed", "yes"),
        ])],
        vec![],
        vec![
            claim(
                1,
                vec![port(&[
                    ("physical_network", "physnet1"),
                    ("trusted", "YES"),
                ])],
            ),
            claim(
                2,
                vec![port(&[
                    ("physical_network", "physnet1"),
                    ("trusted", "True"),
                ])],
            ),
            check(vec![port(&[
                ("physical_network", "physnet1"),
                ("managed", "yes"),
            ])]),
            claim(
                3,
                vec![port(&[
                    ("physical_network", "physnet1"),
                    ("managed", "true"),
                ])],
            ),
            claim(
                4,
                vec![port(&[
                    ("physical_network", "physnet1"),
                    ("trusted", "yes"),
                ])],
            ),
            check(vec![port(&physnet1)]),
            free(3),
            claim(
                5,
                vec![port(&[
                    ("physical_network", "physnet1"),
                    ("trusted", "yes"),
                ])],
            ),
        ],
    ));

    // live_migratable: "yes" in an alias and a spec both mean "true"; "no" only matches
    // pools that say "false"; an alias without it takes the plainest pool first.
    out.push(case(
        "tags-live-migratable",
        Host::new(
            1,
            vec![
                Pf::new("0000:3b:00.0", E810, 3, 0).netdev("ens1f0"),
                Pf::new("0000:86:00.0", E810, 3, 0).netdev("ens3f0"),
                Pf::new("0000:af:00.0", E810, 3, 0).netdev("ens4f0"),
            ],
            vec![],
        ),
        vec![
            m(&[
                ("address", "0000:3b:*.*"),
                ("vendor_id", "8086"),
                ("product_id", "1889"),
                ("live_migratable", "yes"),
            ]),
            m(&[
                ("address", "0000:86:*.*"),
                ("vendor_id", "8086"),
                ("product_id", "1889"),
                ("live_migratable", "no"),
            ]),
            m(&[("vendor_id", "8086"), ("product_id", "1889")]),
        ],
        vec![
            alias_of(
                "lm",
                &[
                    ("vendor_id", "8086"),
                    ("product_id", "1889"),
                    ("dev_type", "type-VF"),
                    ("live_migratable", "yes"),
                ],
            ),
            alias_of(
                "nolm",
                &[
                    ("vendor_id", "8086"),
                    ("product_id", "1889"),
                    ("dev_type", "type-VF"),
                    ("live_migratable", "no"),
                ],
            ),
            alias_of("any", VF_E810),
        ],
        vec![
            Step::new(Op::Claim, 1).alias("lm:2"),
            Step::new(Op::Claim, 2).alias("nolm:1"),
            Step::new(Op::Claim, 3).alias("any:4"),
            Step::new(Op::Check, 0).alias("lm:2"),
            Step::new(Op::Claim, 4).alias("lm:1,nolm:2"),
            Step::new(Op::Check, 0).alias("any:1"),
            free(3),
            Step::new(Op::Claim, 5).alias("any:3"),
        ],
    ));

    // Tie order: VFs of two vendors on physnet1; a port any can serve takes the
    // first-discovered PF's (the Mellanox one, at the lower address), whatever the spec order.
    out.push(case(
        "tie-order-two-vendors",
        Host::new(
            1,
            vec![
                Pf::new("0000:18:00.0", CX5, 2, 0).netdev("enp24s0f0"),
                Pf::new("0000:3b:00.0", E810, 2, 0).netdev("ens1f0"),
            ],
            vec![],
        ),
        vec![
            m(&[
                ("vendor_id", "8086"),
                ("product_id", "1889"),
                ("physical_network", "physnet1"),
            ]),
            m(&[
                ("vendor_id", "15b3"),
                ("product_id", "1018"),
                ("physical_network", "physnet1"),
            ]),
        ],
        vec![],
        vec![
            check(vec![port(&physnet1)]),
            claim(1, vec![port(&physnet1)]),
            claim(2, vec![port(&physnet1), port(&physnet1)]),
            claim(3, vec![port(&physnet1)]),
            claim(4, vec![port(&physnet1)]),
            free(1),
            claim(5, vec![port(&physnet1)]),
        ],
    ));

    // parent_ifname: VFs with netdevs carry their PF's interface name, vfio-pci VFs none; a
    // PF whose VFs are half with and half without netdevs has two pools.
    let mut split = Pf::new("0000:86:00.0", E810, 4, 0).netdev("ens3f0");
    split.netdev_until = Some(2);
    out.push(case(
        "parent-ifname-layouts",
        Host::new(
            1,
            vec![
                Pf::new("0000:3b:00.0", E810, 2, 0).netdev("ens1f0"),
                Pf::new("0000:5e:00.0", E810, 2, 0).vfio("ens2f0"),
                split,
            ],
            vec![],
        ),
        vec![m(&[
            ("vendor_id", "8086"),
            ("product_id", "1889"),
            ("physical_network", "physnet1"),
        ])],
        vec![],
        vec![
            claim(
                1,
                vec![port(&[
                    ("physical_network", "physnet1"),
                    ("parent_ifname", "ens3f0"),
                ])],
            ),
            claim(2, vec![port(&[("parent_ifname", "ens2f0")])]),
            claim(3, vec![port(&physnet1)]),
            claim(
                4,
                vec![
                    port(&[("parent_ifname", "ens3f0")]),
                    port(&[("parent_ifname", "ens1f0")]),
                ],
            ),
            check(vec![port(&[("parent_ifname", "ens3f0")])]),
            claim(5, vec![port(&physnet1), port(&physnet1), port(&physnet1)]),
            free(4),
            check(vec![port(&[("parent_ifname", "ens3f0")])]),
        ],
    ));

    // PF/VF exclusivity: a PF claimed hides its VFs; a VF claimed makes its PF unavailable;
    // frees give back exactly that.
    let pfvf_specs = vec![
        m(&[("vendor_id", "8086"), ("product_id", "1889")]),
        m(&[("vendor_id", "8086"), ("product_id", "1592")]),
    ];
    let pfvf_alias = vec![alias_of("vf", VF_E810), alias_of("pf", PF_E810)];
    let two_pfs = Host::new(
        1,
        vec![
            Pf::new("0000:3b:00.0", E810, 4, 0).vfio("ens1f0"),
            Pf::new("0000:5e:00.0", E810, 2, 0).vfio("ens2f0"),
        ],
        vec![],
    );
    out.push(case(
        "pf-vf-exclusivity",
        two_pfs.clone(),
        pfvf_specs.clone(),
        pfvf_alias.clone(),
        vec![
            Step::new(Op::Claim, 1).alias("pf:1"),
            Step::new(Op::Check, 0).alias("vf:3"),
            Step::new(Op::Claim, 2).alias("vf:2"),
            Step::new(Op::Check, 0).alias("pf:1"),
            free(1),
            Step::new(Op::Check, 0).alias("pf:2"),
            Step::new(Op::Claim, 3).alias("vf:1"),
            Step::new(Op::Check, 0).alias("pf:1"),
            free(2),
            free(3),
            Step::new(Op::Claim, 4).alias("vf:1,pf:1"),
            free(4),
            Step::new(Op::Claim, 5).alias("pf:2"),
            Step::new(Op::Check, 0).alias("vf:1"),
            free(5),
        ],
    ));

    // A pool emptied (its PF claimed) and refilled (the PF freed), then a VF any PF can give.
    out.push(case(
        "pool-emptied-and-refilled",
        two_pfs.clone(),
        pfvf_specs.clone(),
        pfvf_alias.clone(),
        vec![
            Step::new(Op::Claim, 1).alias("pf:1"),
            free(1),
            Step::new(Op::Claim, 2).alias("vf:1"),
        ],
    ));

    // Nova's claim_instance fails half-way: a VF of the first PF, then two PFs: the VF goes
    // back to its pool but its PF, removed from the pools, does not.
    out.push(case(
        "nova-half-way-leak",
        two_pfs,
        pfvf_specs,
        pfvf_alias,
        vec![
            Step::new(Op::Check, 0).alias("vf:1,pf:2"),
            Step::new(Op::Claim, 1).alias("vf:1,pf:2"),
            Step::new(Op::Claim, 2).alias("pf:2"),
        ],
    ));

    // NUMA policies on a 2-node host: a big guest with a GPU fills node 1, so later guests
    // land on node 0, where there is no GPU; the NVMe drive has no NUMA node.
    let numa_host = Host::new(
        2,
        vec![Pf::new("0000:3b:00.0", E810, 2, 0).netdev("ens1f0")],
        vec![
            gpu("0000:31:00.0", 1),
            gpu("0000:32:00.0", 1),
            gpu("0000:33:00.0", 1),
            nvme("0000:01:00.0", -1),
        ],
    );
    let numa_specs = vec![
        m(&[("vendor_id", "10de"), ("product_id", "20b0")]),
        m(&[("vendor_id", "144d"), ("product_id", "a808")]),
        m(&[
            ("vendor_id", "8086"),
            ("product_id", "1889"),
            ("physical_network", "physnet1"),
        ]),
    ];
    let numa_alias = vec![alias_of("gpu", GPU), alias_of("nvme", NVME), {
        let mut a = alias_of("gpu-required", GPU);
        a.insert("numa_policy".into(), "required".into());
        a
    }];
    out.push(case(
        "numa-policies",
        numa_host,
        numa_specs,
        numa_alias,
        vec![
            Step::new(Op::Claim, 1).alias("gpu-required:1").numa(7680),
            Step::new(Op::Check, 0).alias("gpu-required:1").numa(1024),
            Step::new(Op::Claim, 2)
                .alias("gpu:1")
                .flavor_policy("required")
                .numa(1024),
            Step::new(Op::Claim, 3)
                .alias("gpu:1")
                .flavor_policy("legacy")
                .numa(1024),
            Step::new(Op::Claim, 4)
                .reqs(vec![aliased("gpu", 1, GPU).policy("legacy")])
                .numa(1024),
            Step::new(Op::Claim, 5)
                .alias("gpu:1")
                .flavor_policy("preferred")
                .numa(1024),
            Step::new(Op::Claim, 6)
                .alias("nvme:1")
                .flavor_policy("legacy")
                .numa(1024),
            free(6),
            Step::new(Op::Claim, 7)
                .alias("nvme:1")
                .flavor_policy("required")
                .numa(1024),
            Step::new(Op::Claim, 8)
                .reqs(vec![port(&physnet1).policy("required")])
                .numa(1024),
            Step::new(Op::Claim, 9)
                .alias("gpu:1")
                .flavor_policy("socket")
                .numa(1024),
            Step::new(Op::Claim, 10)
                .alias("gpu:1")
                .flavor_policy("required"),
            free(1),
            Step::new(Op::Claim, 11)
                .alias("gpu:2")
                .flavor_policy("required")
                .numa(1024),
        ],
    ));

    // The socket policy on 4 nodes in 2 sockets: nodes 1-3 filled by big guests with an NVMe
    // each, a guest on node 0 may use a GPU on node 1 (same socket) but not on node 3.
    let mut socket_host = Host::new(
        4,
        vec![],
        vec![
            gpu("0000:31:00.0", 1),
            gpu("0000:33:00.0", 3),
            nvme("0000:01:00.0", 1),
            nvme("0000:02:00.0", 2),
            nvme("0000:03:00.0", 3),
        ],
    );
    socket_host.sockets = 2;
    out.push(case(
        "numa-socket",
        socket_host,
        vec![
            m(&[("vendor_id", "10de"), ("product_id", "20b0")]),
            m(&[("vendor_id", "144d"), ("product_id", "a808")]),
        ],
        vec![alias_of("gpu", GPU), alias_of("nvme", NVME)],
        vec![
            Step::new(Op::Claim, 1)
                .alias("nvme:1")
                .flavor_policy("required")
                .numa(7680),
            Step::new(Op::Claim, 2)
                .alias("nvme:1")
                .flavor_policy("required")
                .numa(7680),
            Step::new(Op::Claim, 3)
                .alias("nvme:1")
                .flavor_policy("required")
                .numa(7680),
            Step::new(Op::Check, 0)
                .alias("gpu:2")
                .flavor_policy("socket")
                .numa(1024),
            Step::new(Op::Claim, 4)
                .alias("gpu:1")
                .flavor_policy("socket")
                .numa(1024),
            Step::new(Op::Claim, 5)
                .alias("gpu:1")
                .flavor_policy("socket")
                .numa(1024),
            Step::new(Op::Claim, 6)
                .alias("gpu:1")
                .flavor_policy("required")
                .numa(1024),
            Step::new(Op::Claim, 7)
                .alias("gpu:1")
                .flavor_policy("preferred")
                .numa(1024),
            free(4),
            Step::new(Op::Claim, 8)
                .reqs(vec![aliased("gpu", 1, GPU).policy("socket")])
                .numa(1024),
        ],
    ));

    // One-time use: a GPU used once stays reserved in rtrack; Nova's tracker gives it out
    // again (only Placement's reserved inventory protects it).
    out.push(in_placement(case(
        "one-time-use",
        Host::new(
            1,
            vec![],
            vec![gpu("0000:31:00.0", 0), gpu("0000:32:00.0", 0)],
        ),
        vec![m(&[
            ("vendor_id", "10de"),
            ("product_id", "20b0"),
            ("one_time_use", "true"),
        ])],
        vec![alias_of("gpu", GPU)],
        vec![
            claim(1, vec![aliased("gpu", 1, GPU).rp(&["0000:32:00.0"])]),
            check(vec![aliased("gpu", 1, GPU).rp(&["0000:31:00.0"])]),
            free(1),
            claim(2, vec![aliased("gpu", 1, GPU).rp(&["0000:31:00.0"])]),
            check(vec![aliased("gpu", 1, GPU)]),
            claim(3, vec![aliased("gpu", 1, GPU).rp(&["0000:32:00.0"])]),
        ],
    )));

    // Placement's allocation decides the provider: PF B's VFs although PF A's come first;
    // a request split across A and B; more than a provider has left.
    let rp_host = Host::new(
        1,
        vec![
            Pf::new("0000:3b:00.0", E810, 4, 0).netdev("ens1f0"),
            Pf::new("0000:5e:00.0", E810, 4, 0).netdev("ens2f0"),
        ],
        vec![gpu("0000:31:00.0", 0)],
    );
    out.push(in_placement(case(
        "provider-mappings",
        rp_host.clone(),
        vec![
            m(&[("vendor_id", "8086"), ("product_id", "1889")]),
            m(&[("vendor_id", "10de"), ("product_id", "20b0")]),
        ],
        vec![alias_of("vf", VF_E810), alias_of("gpu", GPU)],
        vec![
            claim(1, vec![aliased("vf", 1, VF_E810).rp(&["0000:5e:00.0"])]),
            claim(
                2,
                vec![aliased("vf", 3, VF_E810).rp(&[
                    "0000:3b:00.0",
                    "0000:5e:00.0",
                    "0000:5e:00.0",
                ])],
            ),
            claim(
                3,
                vec![aliased("vf", 2, VF_E810).rp(&["0000:5e:00.0", "0000:5e:00.0"])],
            ),
            check(vec![aliased("vf", 1, VF_E810).rp(&["0000:5e:00.0"])]),
            claim(
                4,
                vec![
                    aliased("vf", 3, VF_E810).rp(&["0000:3b:00.0", "0000:3b:00.0", "0000:3b:00.0"]),
                    aliased("gpu", 1, GPU).rp(&["0000:31:00.0"]),
                ],
            ),
            check(vec![aliased("vf", 1, VF_E810).rp(&["0000:3b:00.0"])]),
            claim(5, vec![aliased("vf", 1, VF_E810)]),
            free(2),
            claim(
                6,
                vec![aliased("vf", 2, VF_E810).rp(&["0000:5e:00.0", "0000:5e:00.0"])],
            ),
            restart(),
            claim(7, vec![aliased("vf", 1, VF_E810).rp(&["0000:3b:00.0"])]),
        ],
    )));

    // One provider's VFs in two pools (with and without netdev): Nova refuses any allocation
    // from it (_assert_one_pool_per_rp_uuid); rtrack takes them from both pools.
    let mut split = Pf::new("0000:86:00.0", E810, 4, 0).netdev("ens3f0");
    split.netdev_until = Some(2);
    out.push(in_placement(case(
        "provider-split-pools",
        Host::new(
            1,
            vec![Pf::new("0000:3b:00.0", E810, 2, 0).netdev("ens1f0"), split],
            vec![],
        ),
        vec![m(&[("vendor_id", "8086"), ("product_id", "1889")])],
        vec![alias_of("vf", VF_E810)],
        vec![
            claim(1, vec![aliased("vf", 1, VF_E810).rp(&["0000:3b:00.0"])]),
            claim(
                2,
                vec![aliased("vf", 3, VF_E810).rp(&[
                    "0000:86:00.0",
                    "0000:86:00.0",
                    "0000:86:00.0",
                ])],
            ),
        ],
    )));

    // Live migration with ports: the destination claims, a rollback frees, a success keeps.
    let live_host = Host::new(
        2,
        vec![
            Pf::new("0000:3b:00.0", E810, 3, 0).netdev("ens1f0"),
            Pf::new("0000:af:00.0", E810, 3, 1).netdev("ens4f0"),
        ],
        vec![],
    );
    out.push(case(
        "live-migration-ports",
        live_host.clone(),
        vec![m(&[
            ("vendor_id", "8086"),
            ("product_id", "1889"),
            ("physical_network", "physnet1"),
        ])],
        vec![],
        vec![
            live_claim(1, vec![port(&physnet1), port(&physnet1)]),
            live_revert(1),
            live_claim(2, vec![port(&physnet1), port(&physnet1)]),
            claim(3, vec![port(&physnet1)]),
            live_confirm(2),
            free(3),
            Step::new(Op::LiveClaim, 4)
                .reqs(vec![port(&physnet1).policy("required")])
                .numa(1024),
            live_confirm(4),
            live_claim(5, vec![port(&physnet1), port(&physnet1), port(&physnet1)]),
            free(2),
            restart(),
            free(4),
        ],
    ));

    // Ports attached to and detached from running instances.
    out.push(case(
        "attach-detach",
        live_host,
        vec![m(&[
            ("vendor_id", "8086"),
            ("product_id", "1889"),
            ("physical_network", "physnet1"),
        ])],
        vec![],
        vec![
            claim(1, vec![]),
            attach(1, vec![port(&physnet1)]),
            attach(1, vec![port(&physnet1)]),
            detach(1, 0),
            attach(1, vec![port(&[("physical_network", "physnet2")])]),
            claim(2, vec![port(&physnet1)]).numa(1024),
            attach(2, vec![port(&physnet1).policy("required")]),
            attach(2, vec![port(&physnet1).policy("preferred")]),
            detach(1, 1),
            restart(),
            detach(2, 1),
            attach(1, vec![port(&physnet1), port(&physnet1)]),
            free(2),
            check(vec![port(&physnet1), port(&physnet1), port(&physnet1)]),
            free(1),
            check(vec![port(&physnet1); 6]),
        ],
    ));

    // Two PFs of one card whose VFs interleave (stride 2): after a restart Nova orders pools by
    // their first available VF, rtrack by their first VF. They agree here because Nova takes a
    // pool's last added VF, so PF 0's first VF stays free in Nova too; which VFs of a pool are
    // in use differs by design, so random hosts have no interleaved VFs.
    let mut pf0 = Pf::new("0000:d8:00.0", E810, 2, 0).netdev("ens8f0");
    let mut pf1 = Pf::new("0000:d8:00.1", E810, 2, 0).netdev("ens8f1");
    pf0.stride = 2;
    pf1.stride = 2;
    out.push(case(
        "restart-interleaved-vfs",
        Host::new(1, vec![pf0, pf1], vec![]),
        vec![m(&[
            ("vendor_id", "8086"),
            ("product_id", "1889"),
            ("physical_network", "physnet1"),
        ])],
        vec![],
        vec![
            claim(1, vec![port(&physnet1)]),
            restart(),
            claim(2, vec![port(&physnet1)]),
        ],
    ));

    // With PCI in Placement an alias may have one spec only: Nova refuses an alias name given
    // twice (PciInvalidAlias), rtrack accepts it.
    out.push(in_placement(case(
        "alias-multi-spec-in-placement",
        Host::new(
            1,
            vec![],
            vec![gpu("0000:31:00.0", 0), nvme("0000:01:00.0", 0)],
        ),
        vec![m(&[("vendor_id", "10de")]), m(&[("vendor_id", "144d")])],
        vec![alias_of("dev", GPU), alias_of("dev", NVME)],
        vec![Step::new(Op::Claim, 1).alias("dev:2")],
    )));

    // Legacy and preferred policies when the guest's cell alone has too few devices: Nova
    // keeps the pool order among the pools on the guest's cells and those without a NUMA node
    // (here the NUMA-less PF 18's pool comes first), rtrack takes the local pools first. A big
    // guest without devices fills node 1 first, so the next guests land on node 0.
    out.push(case(
        "numa-legacy-pool-order",
        Host::new(
            2,
            vec![
                Pf::new("0000:18:00.0", E810, 3, -1).netdev("ens1f0"),
                Pf::new("0000:3b:00.0", E810, 1, 0).netdev("ens2f0"),
            ],
            vec![],
        ),
        vec![m(&[("vendor_id", "8086"), ("product_id", "1889")])],
        vec![alias_of("vf", VF_E810)],
        vec![
            claim(1, vec![]).numa(7680),
            Step::new(Op::Check, 0)
                .alias("vf:2")
                .flavor_policy("legacy")
                .numa(1024),
            Step::new(Op::Check, 0)
                .alias("vf:2")
                .flavor_policy("preferred")
                .numa(1024),
            Step::new(Op::Claim, 2)
                .alias("vf:2")
                .flavor_policy("legacy")
                .numa(1024),
        ],
    ));

    // Placement's allocation names a provider with fewer devices left than it allocated from
    // it, next to one with plenty: Nova drops the short provider's pool but passes the request
    // on the count of the pools left, then gives fewer devices than asked; rtrack refuses.
    out.push(in_placement(case(
        "rp-provider-short",
        rp_host.clone(),
        vec![m(&[("vendor_id", "8086"), ("product_id", "1889")])],
        vec![alias_of("vf", VF_E810)],
        vec![
            claim(1, vec![aliased("vf", 3, VF_E810).rp(&["0000:3b:00.0"; 3])]),
            claim(
                2,
                vec![aliased("vf", 3, VF_E810).rp(&[
                    "0000:3b:00.0",
                    "0000:3b:00.0",
                    "0000:5e:00.0",
                ])],
            ),
        ],
    )));

    // A restart in the middle: claims, restart, frees and claims after it, restart again.
    out.push(case(
        "restart-mid-sequence",
        Host::new(
            1,
            vec![
                Pf::new("0000:3b:00.0", E810, 3, 0).netdev("ens1f0"),
                Pf::new("0000:5e:00.0", X710, 3, 0).vfio("ens2f0"),
            ],
            vec![gpu("0000:31:00.0", 0), nvme("0000:01:00.0", 0)],
        ),
        vec![
            m(&[("vendor_id", "8086"), ("product_id", "1889")]),
            m(&[("vendor_id", "8086"), ("product_id", "1572")]),
            m(&[("vendor_id", "8086"), ("product_id", "154c")]),
            m(&[("vendor_id", "10de")]),
        ],
        vec![
            alias_of("vf", VF_E810),
            alias_of(
                "x710",
                &[
                    ("vendor_id", "8086"),
                    ("product_id", "1572"),
                    ("dev_type", "type-PF"),
                ],
            ),
            alias_of("gpu", GPU),
        ],
        vec![
            Step::new(Op::Claim, 1).alias("vf:2,gpu:1"),
            Step::new(Op::Claim, 2).alias("x710:1"),
            restart(),
            Step::new(Op::Check, 0).alias("gpu:1"),
            free(1),
            Step::new(Op::Claim, 3).alias("vf:3"),
            restart(),
            free(2),
            Step::new(Op::Claim, 4).alias("x710:1,gpu:1"),
            restart(),
        ],
    ));

    // Dry runs change nothing, granted or refused.
    out.push(case(
        "dry-runs",
        Host::new(
            1,
            vec![Pf::new("0000:3b:00.0", E810, 2, 0).netdev("ens1f0")],
            vec![gpu("0000:31:00.0", 0)],
        ),
        vec![
            m(&[("vendor_id", "8086"), ("product_id", "1889")]),
            m(&[("vendor_id", "10de"), ("product_id", "20b0")]),
        ],
        vec![alias_of("vf", VF_E810), alias_of("gpu", GPU)],
        vec![
            Step::new(Op::Check, 0).alias("vf:2,gpu:1"),
            Step::new(Op::Check, 0).alias("vf:3"),
            Step::new(Op::Claim, 1).alias("vf:1"),
            Step::new(Op::Check, 0).alias("vf:1,gpu:1"),
            Step::new(Op::Check, 0).alias("vf:2"),
            Step::new(Op::Claim, 2).alias("vf:1,gpu:1"),
            Step::new(Op::Check, 0).alias("gpu:1"),
        ],
    ));

    // An alias defined twice without device_type: Nova's alias parsing fails (KeyError
    // 'dev_type'), rtrack accepts it.
    out.push(case(
        "nova-alias-dev-type",
        Host::new(
            1,
            vec![],
            vec![gpu("0000:31:00.0", 0), nvme("0000:01:00.0", 0)],
        ),
        vec![m(&[("vendor_id", "10de")]), m(&[("vendor_id", "144d")])],
        vec![
            m(&[
                ("name", "dev"),
                ("vendor_id", "10de"),
                ("product_id", "20b0"),
            ]),
            m(&[
                ("name", "dev"),
                ("vendor_id", "144d"),
                ("product_id", "a808"),
            ]),
        ],
        vec![Step::new(Op::Claim, 1).alias("dev:2")],
    ));

    out.extend(vdpa::named());
    out
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
