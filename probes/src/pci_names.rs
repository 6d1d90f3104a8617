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
    /// found under its ids with its name: the tables are sorted, their offsets and lengths
    /// point at the right names, and no entry was dropped.
    #[test]
    fn every_entry_of_the_file_is_found_by_its_ids() {
        let text = include_str!("../data/pci.ids");
        let (mut vendor, mut class, mut checked) = (None, None, 0);
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let fields: Vec<&str> = line.trim_start_matches('\t').splitn(2, "  ").collect();
            let tabs = line.len() - line.trim_start_matches('\t').len();
            let [id, name] = fields[..] else {
                panic!("{line:?}")
            };
            let found = match (tabs, id.strip_prefix("C ")) {
                (0, Some(c)) => {
                    (class, vendor) = (Some(c), None);
                    pci_names("", "", &format!("{c}ff")).2
                }
                (0, None) => {
                    (vendor, class) = (Some(id), None);
                    pci_names(id, "", "").0
                }
                (1, _) => match (vendor, class) {
                    (Some(v), _) => pci_names(v, id, "").1,
                    (None, Some(c)) => pci_names("", "", &format!("{c}{id}")).2,
                    (None, None) => panic!("{line:?} under nothing"),
                },
                _ => continue,
            };
            // A file may name one id twice; the first entry wins.
            if found.as_deref() != Some(name) {
                let first = format!("{id}  {}", found.as_deref().unwrap_or("?"));
                assert!(text.contains(&first), "{line:?}: found {found:?}");
            }
            checked += 1;
        }
        assert!(checked > 20_000, "{checked} entries");
    }
}
