//! Vendor, device and class names of a PCI function from the PCI ID database compiled into
//! rtrack (`probes/data/pci.ids`, of the date in docs/inventory.md; tables made by build.rs).
//!
//! In: the ids as the PCI probe prints them (hex, no `0x`). Out: the three names, each `None`
//! when the database has no entry.

// NAMES, VENDORS, DEVICES, CLASSES, SUBCLASSES.
include!(concat!(env!("OUT_DIR"), "/pci_names.rs"));

/// Vendor, device and class names from the compiled-in PCI ID database. The class name is the
/// subclass's where the database has one, else the class's.
pub fn pci_names(
    vendor_id: &str,
    product_id: &str,
    class: &str,
) -> (Option<String>, Option<String>, Option<String>) {
    let vid = u16::from_str_radix(vendor_id, 16).ok();
    let pid = u16::from_str_radix(product_id, 16).ok();
    let vendor_name = vid.and_then(|v| name_in(&VENDORS, u32::from(v)));
    let product_name = match (vid, pid) {
        (Some(v), Some(p)) => name_in(&DEVICES, u32::from(v) << 16 | u32::from(p)),
        _ => None,
    };
    let cid = class.get(0..2).and_then(|c| u8::from_str_radix(c, 16).ok());
    let sid = class.get(2..4).and_then(|c| u8::from_str_radix(c, 16).ok());
    let class_name = match (cid, sid) {
        (Some(c), Some(s)) => name_in(&SUBCLASSES, u32::from(c) << 8 | u32::from(s))
            .or_else(|| name_in(&CLASSES, u32::from(c))),
        _ => None,
    };
    (
        vendor_name.map(str::to_string),
        product_name.map(str::to_string),
        class_name.map(str::to_string),
    )
}

fn name_in(table: &[(u32, u32, u32)], key: u32) -> Option<&'static str> {
    let at = table.binary_search_by_key(&key, |e| e.0).ok()?;
    let &(_, offset, len) = table.get(at)?;
    NAMES.get(offset as usize..(offset as usize).checked_add(len as usize)?)
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

    /// Every vendor, device, class and subclass line of the file, walked here on its own, is
    /// found in its table under its full key (a device under its vendor, a subclass under its
    /// class) with exactly its name, the first one where an id repeats: the tables are sorted,
    /// keyed right, their offsets and lengths point at the right names, and none was dropped.
    #[test]
    fn every_entry_of_the_file_is_found_by_its_ids() {
        let hex = |id: &str| u32::from_str_radix(id, 16).unwrap();
        let mut first = std::collections::BTreeMap::new();
        let mut parent = None;
        for line in include_str!("../data/pci.ids")
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let entry = line.trim_start_matches('\t');
            let tabs = line.len() - entry.len();
            let Some((id, name)) = entry.split_once("  ") else {
                panic!("{line:?}")
            };
            let key = match (tabs, id.strip_prefix("C "), parent) {
                (0, Some(class), _) => {
                    parent = Some(("subclass", hex(class)));
                    ("class", hex(class))
                }
                (0, None, _) => {
                    parent = Some(("device", hex(id)));
                    ("vendor", hex(id))
                }
                (1, _, Some(("device", vendor))) => ("device", vendor << 16 | hex(id)),
                (1, _, Some(("subclass", class))) => ("subclass", class << 8 | hex(id)),
                (2, _, Some(_)) => continue,
                _ => panic!("{line:?}"),
            };
            first.entry(key).or_insert(name);
        }
        let table = |kind| match kind {
            "vendor" => &VENDORS[..],
            "device" => &DEVICES[..],
            "class" => &CLASSES[..],
            _ => &SUBCLASSES[..],
        };
        for (&(kind, key), name) in &first {
            assert_eq!(name_in(table(kind), key), Some(*name), "{kind} {key:x}");
        }
        let count = |kind| first.keys().filter(|k| k.0 == kind).count();
        assert_eq!(
            [
                VENDORS.len(),
                DEVICES.len(),
                CLASSES.len(),
                SUBCLASSES.len()
            ],
            [
                count("vendor"),
                count("device"),
                count("class"),
                count("subclass")
            ]
        );
        assert!(count("device") > 19_000, "{} devices", count("device"));
    }
}
