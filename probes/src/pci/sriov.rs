//! A PCI function's SR-IOV role, from its `physfn` link and `sriov_*` attributes.
//!
//! In: the function's sysfs directory. Out: its [`PciDevType`], a VF's PF and a PF's VF
//! counts, with a warning naming the path of each malformed value.

use std::path::Path;

use super::{PciAddress, PciDevType};
use crate::read::{parse_int, SysDir, Warnings};

/// What [`sriov_role`] reads.
pub(super) struct SriovRole {
    /// VF, PF (`sriov_totalvfs` > 0) or neither.
    pub(super) dev_type: PciDevType,
    /// A VF's PF.
    pub(super) parent_addr: Option<PciAddress>,
    /// `sriov_totalvfs` (not read for a VF).
    pub(super) sriov_totalvfs: Option<u32>,
    /// `sriov_numvfs` (not read for a VF).
    pub(super) sriov_numvfs: Option<u32>,
}

/// The function's SR-IOV role.
pub(super) fn sriov_role(sysdir: &SysDir, dir: &Path, w: &mut Warnings) -> SriovRole {
    // A VF has a `physfn` link to its PF; only other functions can carry `sriov_*`.
    let physfn = sysdir.link_basename("physfn", w);
    let is_vf = physfn.is_some();
    let parent_addr = physfn.and_then(|base| {
        let parsed = PciAddress::parse(&base);
        if parsed.is_none() {
            w.push(
                &dir.join("physfn"),
                format!("link target {base:?} is not a PCI address: VF whose PF is unknown"),
            );
        }
        parsed
    });
    let (sriov_totalvfs, sriov_numvfs) = if is_vf {
        (None, None)
    } else {
        let count = |name: &str, w: &mut Warnings| -> Option<u32> {
            let raw = sysdir.read_optional(name, w)?;
            parse_int(&raw, &dir.join(name), "a VF count", w)
        };
        (count("sriov_totalvfs", w), count("sriov_numvfs", w))
    };
    let dev_type = if is_vf {
        PciDevType::Vf
    } else if sriov_totalvfs.is_some_and(|n| n > 0) {
        PciDevType::Pf
    } else {
        PciDevType::Pci
    };
    SriovRole {
        dev_type,
        parent_addr,
        sriov_totalvfs,
        sriov_numvfs,
    }
}
