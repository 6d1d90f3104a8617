//! Vendor, device and class names of a PCI function from the PCI ID database compiled into
//! rtrack (the pci-ids crate; pci.ids of the date in docs/inventory.md).
//!
//! In: the ids as the PCI probe prints them (hex, no `0x`). Out: the three names, each `None`
//! when the database has no entry.

/// Vendor, device and class names from the compiled-in PCI ID database (pci-ids crate).
pub fn pci_names(
    vendor_id: &str,
    product_id: &str,
    class: &str,
) -> (Option<String>, Option<String>, Option<String>) {
    let vid = u16::from_str_radix(vendor_id, 16).ok();
    let pid = u16::from_str_radix(product_id, 16).ok();
    let vendor_name = vid
        .and_then(<pci_ids::Vendor as pci_ids::FromId<u16>>::from_id)
        .map(|v| v.name().to_string());
    let product_name = match (vid, pid) {
        (Some(v), Some(p)) => pci_ids::Device::from_vid_pid(v, p).map(|d| d.name().to_string()),
        _ => None,
    };
    let cid = class.get(0..2).and_then(|c| u8::from_str_radix(c, 16).ok());
    let sid = class.get(2..4).and_then(|c| u8::from_str_radix(c, 16).ok());
    let class_name = match (cid, sid) {
        (Some(c), Some(s)) => pci_ids::Subclass::from_cid_sid(c, s)
            .map(|sc| sc.name().to_string())
            .or_else(|| {
                <pci_ids::Class as pci_ids::FromId<u8>>::from_id(c).map(|cl| cl.name().to_string())
            }),
        _ => None,
    };
    (vendor_name, product_name, class_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_id_database() {
        let (v, p, c) = pci_names("8086", "1889", "020000");
        assert_eq!(v.as_deref(), Some("Intel Corporation"));
        assert_eq!(p.as_deref(), Some("Ethernet Adaptive Virtual Function"));
        assert_eq!(c.as_deref(), Some("Ethernet controller"));
        let (v, p, c) = pci_names("fff0", "0001", "ff0000");
        assert_eq!((v, p), (None, None));
        assert_eq!(c.as_deref(), Some("Unassigned class"));
    }
}
