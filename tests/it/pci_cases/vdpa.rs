//! vDPA in the generated PCI cases: VFs with vDPA devices (Nova's `vdpa` type) are pooled apart
//! from plain VFs of the same product and given only to requests asking `dev_type: vdpa` (a
//! `vnic_type=vdpa` port, an alias of `device_type = "vdpa"`), making their PF unavailable as
//! a VF does. A seeded pass gives some generated cases vDPA devices and ports; the named vDPA
//! scenarios are `fixtures/pci_cases/2*-vdpa-*.toml`.

use super::{Case, Rng};

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
