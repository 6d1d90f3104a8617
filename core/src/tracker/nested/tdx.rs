//! Intel TDX as Nova 34's libvirt driver offers it: whether the host runs TD guests, and how
//! many at once.
//!
//! In: the probe (architecture, `kvm_intel`'s `tdx`, the misc cgroup's `tdx` capacity) and the
//! `[devices]` settings (`cpu_mode`, `num_intel_tdx_guests`). Out: an [`IntelTdxOffer`] (the
//! decision and its inputs, for `--once`) and, when it offers guests, the provider of the
//! `intel-tdx` model. Pure.
//!
//! Nova (`Host.supports_intel_tdx`, `_get_tdx_capacity`): supported on x86_64 when `[libvirt]
//! cpu_mode` is `host-passthrough` and libvirt's domain capabilities show TDX, which libvirt
//! shows when KVM runs TD guests (`kvm_intel.tdx=Y`, what rtrack reads instead). Guests: the
//! configured `num_intel_tdx_guests` when set, even above the cgroup's count (the option's help
//! says the lower of the two; the code returns the configured one, and its unit test
//! `test_slots_with_capacity_and_config_more` holds it); else the cgroup's; else none.

use std::collections::BTreeSet;

use super::{EncryptionModel, NestedKey, NestedProvider};
use crate::config::devices::MdevPolicy;
use crate::inventory::offered::IntelTdxOffer;
use crate::inventory::resources::ResourceClass;
use crate::probes::HostInventory;

/// Nova's `_get_tdx_capacity`: the guests, and the warning Nova logs on the way (if any).
pub fn tdx_slots(cgroup: Option<u64>, configured: Option<u64>) -> (u64, Option<String>) {
    match (cgroup, configured) {
        (None, None) => (
            0,
            Some("Intel TDX: the misc cgroup does not give the TDX capacity (no tdx line in sys/fs/cgroup/misc.capacity) and devices.num_intel_tdx_guests is not set: no TDX guests offered, as Nova assumes".into()),
        ),
        (None, Some(c)) => (c, None),
        (Some(cg), Some(c)) if c > cg => (
            c,
            Some(format!("Intel TDX: devices.num_intel_tdx_guests = {c} is more than the {cg} TDX guests the misc cgroup gives; {c} offered, as Nova offers the configured count")),
        ),
        (Some(_), Some(c)) => (c, None),
        (Some(cg), None) => (cg, None),
    }
}

/// Whether and how much Intel TDX the host offers under `policy`; warnings for a host that
/// could run TD guests but is configured not to, and for Nova's capacity warnings.
pub fn tdx_offer(
    host: &HostInventory,
    policy: &MdevPolicy,
    warnings: &mut Vec<String>,
) -> IntelTdxOffer {
    let enc = &host.memory_encryption;
    let x86 = host.cpu.arch.as_deref() == Some("x86_64");
    let passthrough = policy.cpu_mode.as_deref() == Some("host-passthrough");
    let why_not = if !x86 {
        Some("not an x86_64 host".to_string())
    } else if enc.tdx != Some(true) {
        Some(match enc.tdx {
            None => "unknown whether KVM runs TD guests (no sys/module in the tree)".to_string(),
            _ => "KVM does not run TD guests (kvm_intel parameter tdx is not Y)".to_string(),
        })
    } else if !passthrough {
        warnings.push("Intel TDX: KVM runs TD guests but devices.cpu_mode is not host-passthrough: no TDX guests offered (Nova needs [libvirt] cpu_mode = host-passthrough for TDX)".into());
        Some("devices.cpu_mode is not host-passthrough (Nova's [libvirt] cpu_mode)".to_string())
    } else {
        None
    };
    let configured = policy.num_intel_tdx_guests;
    let slots = if why_not.is_none() {
        let (n, warning) = tdx_slots(enc.tdx_guests, configured);
        warnings.extend(warning);
        n
    } else {
        0
    };
    IntelTdxOffer {
        supported: why_not.is_none(),
        why_not,
        cgroup_capacity: enc.tdx_guests,
        configured,
        slots,
    }
}

/// The provider of the `intel-tdx` model, `<node>_intel_tdx`, when the offer has guests (Nova
/// removes the child when its total is 0).
pub fn tdx_provider(offer: &IntelTdxOffer) -> Option<NestedProvider> {
    (offer.slots > 0).then(|| NestedProvider {
        key: NestedKey::MemEncryption(EncryptionModel::IntelTdx),
        class: ResourceClass::MemEncryptionContext,
        total: i64::try_from(offer.slots).unwrap_or(i64::MAX),
        max_unit: 1,
        traits: BTreeSet::from([
            EncryptionModel::IntelTdx.trait_name().to_string(),
            crate::inventory::traits::OWNER_NOVA.to_string(),
        ]),
        mdev_type: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configured_count_wins_as_in_novas_code() {
        assert_eq!(tdx_slots(Some(63), None), (63, None));
        assert_eq!(tdx_slots(Some(63), Some(5)), (5, None));
        assert_eq!(tdx_slots(Some(63), Some(0)), (0, None));
        let (n, w) = tdx_slots(Some(63), Some(100));
        assert_eq!(n, 100);
        assert!(w.unwrap().contains("more than the 63"));
        assert_eq!(tdx_slots(None, Some(5)), (5, None));
        let (n, w) = tdx_slots(None, None);
        assert_eq!(n, 0);
        assert!(w.unwrap().contains("num_intel_tdx_guests is not set"));
    }
}
