//! vDPA cases for the PCI differential test: VFs with vDPA devices (Nova's `vdpa` type) pooled
//! apart from plain VFs of the same product, given only to requests asking `dev_type: vdpa`
//! (a `vnic_type=vdpa` port, an alias of `device_type = "vdpa"`), making their PF unavailable
//! as a VF does; and a seeded pass that gives some generated cases vDPA devices and ports.

use super::{
    alias_of, aliased, case, check, claim, free, in_placement, m, port, restart, Case, Host, Op,
    Pf, Req, Rng, Step, E810,
};

/// Mellanox ConnectX-6 Dx (PF 101d, VFs 101e), Nova's VDPAServersTest card.
pub const CX6DX: (u16, u16, u16) = (0x15b3, 0x101d, 0x101e);

/// A port of `vnic_type=vdpa` on `physnet` (Nova's request: physical_network, remote_managed
/// false, dev_type vdpa).
fn vdpa_port(physnet: &str) -> Req {
    port(&[
        ("physical_network", physnet),
        ("remote_managed", "False"),
        ("dev_type", "vdpa"),
    ])
}

/// The CX6 Dx PF at `address` with `vfs` VFs, the first `vdpa` of them with vDPA devices.
fn cx6(address: &str, vfs: u32, vdpa: u32) -> Pf {
    let mut pf = Pf::new(address, CX6DX, vfs, 0);
    pf.offset = 1;
    pf.vf_driver = Some("mlx5_core".into());
    pf.vdpa = vdpa;
    pf
}

/// The named vDPA scenarios.
pub fn named() -> Vec<Case> {
    let mut out = Vec::new();
    let physnet4 = [("physical_network", "physnet4")];

    // Nova's VDPAServersTest: a PF and 4 VFs, all vDPA, specs with physnet4 for both. A
    // vdpa port takes a vDPA VF and makes the PF unavailable; a plain port never does.
    out.push(case(
        "vdpa-servers",
        Host::new(
            1,
            vec![
                cx6("0000:06:00.0", 4, 4),
                Pf::new("0000:3b:00.0", E810, 2, 0).netdev("ens1f0"),
            ],
            vec![],
        ),
        vec![
            m(&[
                ("vendor_id", "15b3"),
                ("product_id", "101d"),
                ("physical_network", "physnet4"),
            ]),
            m(&[
                ("vendor_id", "15b3"),
                ("product_id", "101e"),
                ("physical_network", "physnet4"),
            ]),
            m(&[
                ("vendor_id", "8086"),
                ("product_id", "1889"),
                ("physical_network", "physnet1"),
            ]),
        ],
        vec![],
        vec![
            check(vec![port(&physnet4)]),
            claim(1, vec![vdpa_port("physnet4")]),
            claim(2, vec![vdpa_port("physnet4"), vdpa_port("physnet4")]),
            check(vec![vdpa_port("physnet1")]),
            claim(3, vec![port(&[("physical_network", "physnet1")])]),
            claim(4, vec![vdpa_port("physnet4"), vdpa_port("physnet4")]),
            restart(),
            free(2),
            claim(5, vec![vdpa_port("physnet4")]),
            free(1),
            free(5),
            claim(6, vec![port(&physnet4)]),
        ],
    ));

    // Half the VFs of a PF with vDPA devices: two pools of one product; each kind of request
    // gets its own kind only; a PF alias after the VFs are free.
    out.push(case(
        "vdpa-mixed-vfs",
        Host::new(1, vec![cx6("0000:06:00.0", 4, 2)], vec![]),
        vec![
            m(&[
                ("vendor_id", "15b3"),
                ("product_id", "101e"),
                ("physical_network", "physnet1"),
            ]),
            m(&[("vendor_id", "15b3"), ("product_id", "101d")]),
        ],
        vec![alias_of(
            "pf",
            &[
                ("vendor_id", "15b3"),
                ("product_id", "101d"),
                ("dev_type", "type-PF"),
            ],
        )],
        vec![
            claim(1, vec![port(&[("physical_network", "physnet1")])]),
            claim(2, vec![vdpa_port("physnet1")]),
            claim(3, vec![port(&[("physical_network", "physnet1")])]),
            check(vec![port(&[("physical_network", "physnet1")])]),
            claim(4, vec![vdpa_port("physnet1")]),
            Step::new(Op::Check, 0).alias("pf:1"),
            free(1),
            free(2),
            free(3),
            free(4),
            Step::new(Op::Claim, 5).alias("pf:1"),
            check(vec![vdpa_port("physnet1")]),
        ],
    ));

    // With PCI in Placement (specs without a network): the vDPA VFs and the plain ones are
    // children of one PF provider, of one class; type-VF requests held to that provider get
    // plain VFs only, and none once only vDPA ones are left.
    let vf = [
        ("vendor_id", "15b3"),
        ("product_id", "101e"),
        ("dev_type", "type-VF"),
    ];
    out.push(in_placement(case(
        "vdpa-in-placement",
        Host::new(1, vec![cx6("0000:06:00.0", 4, 2)], vec![]),
        vec![m(&[("vendor_id", "15b3"), ("product_id", "101e")])],
        vec![alias_of("vf", &vf)],
        vec![
            claim(1, vec![aliased("vf", 1, &vf).rp(&["0000:06:00.0"])]),
            check(vec![
                aliased("vf", 2, &vf).rp(&["0000:06:00.0", "0000:06:00.0"])
            ]),
            claim(2, vec![aliased("vf", 1, &vf).rp(&["0000:06:00.0"])]),
            check(vec![aliased("vf", 1, &vf).rp(&["0000:06:00.0"])]),
            Step::new(Op::Claim, 3).alias("vf:1"),
            free(1),
            restart(),
            Step::new(Op::Claim, 4).alias("vf:1"),
        ],
    )));

    // An alias cannot ask for vDPA devices (Nova's alias schema): the configuration is refused.
    out.push(case(
        "vdpa-alias-refused",
        Host::new(1, vec![cx6("0000:06:00.0", 2, 2)], vec![]),
        vec![m(&[("vendor_id", "15b3"), ("product_id", "101e")])],
        vec![alias_of(
            "v",
            &[
                ("vendor_id", "15b3"),
                ("product_id", "101e"),
                ("dev_type", "vdpa"),
            ],
        )],
        vec![Step::new(Op::Claim, 1).alias("v:1")],
    ));
    out
}

/// Gives a generated case vDPA devices, one case in six, from its own generator (the case's
/// other draws stay as they were): the first VFs of one PF become vDPA devices, and some port
/// requests on a network become `vnic_type=vdpa` ports.
pub fn sprinkle(c: &mut Case, seed: u64) {
    let mut r = Rng::new(seed);
    if !r.chance(17) {
        return;
    }
    let with_vfs: Vec<usize> = (0..c.host.pfs.len())
        .filter(|i| c.host.pfs[*i].vfs > 0)
        .collect();
    if with_vfs.is_empty() {
        return;
    }
    let i = *r.pick(&with_vfs);
    let vfs = c.host.pfs[i].vfs;
    c.host.pfs[i].vdpa = r.range(1, u64::from(vfs)) as u32;
    for step in &mut c.steps {
        for q in step.requests.iter_mut().filter(|q| q.port) {
            if r.chance(40) {
                q.spec.insert("dev_type".into(), "vdpa".into());
                q.spec
                    .entry("remote_managed".into())
                    .or_insert_with(|| "False".into());
            }
        }
    }
}
