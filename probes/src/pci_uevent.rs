//! A PCI function's `uevent`: driver, ids, class and subsystem ids in one read, so the
//! attribute files are read only for what it lacks.
//!
//! In: the file's text and path. Out: a [`PciUevent`], with a warning naming the path for each
//! malformed value (which stays unknown).

use std::path::Path;

use crate::read::{quoted, Warnings};

/// The values of a PCI `uevent` file rtrack uses.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PciUevent {
    /// A `uevent` file was read.
    pub present: bool,
    /// `DRIVER`: the bound driver.
    pub driver: Option<String>,
    /// `PCI_ID` vendor.
    pub vendor: Option<u32>,
    /// `PCI_ID` device.
    pub device: Option<u32>,
    /// `PCI_CLASS` (24 bits).
    pub class: Option<u32>,
    /// `PCI_SUBSYS_ID` vendor.
    pub subsystem_vendor: Option<u32>,
    /// `PCI_SUBSYS_ID` device.
    pub subsystem_device: Option<u32>,
}

/// Parses a PCI `uevent` (`PCI_ID=8086:37D2`, `PCI_CLASS=20000`, `PCI_SUBSYS_ID=15D9:37D2`).
/// A malformed value is a warning and stays unknown, so the attribute file is read instead.
pub fn parse_uevent(text: &str, path: &Path, w: &mut Warnings) -> PciUevent {
    let mut ue = PciUevent {
        present: true,
        ..PciUevent::default()
    };
    // Hex digits only: `from_str_radix` would take a sign (`+1`).
    let hex = |v: &str, max: u32| {
        (!v.is_empty() && v.len() <= 8 && v.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| u32::from_str_radix(v, 16).ok())
            .flatten()
            .filter(|n| *n <= max)
    };
    for line in text.lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        match key {
            "PCI_ID" | "PCI_SUBSYS_ID" => {
                let pair = value
                    .split_once(':')
                    .and_then(|(a, b)| Some((hex(a, 0xffff)?, hex(b, 0xffff)?)));
                match (key, pair) {
                    ("PCI_ID", Some((v, d))) => (ue.vendor, ue.device) = (Some(v), Some(d)),
                    (_, Some((v, d))) => {
                        (ue.subsystem_vendor, ue.subsystem_device) = (Some(v), Some(d))
                    }
                    (_, None) => w.push(
                        path,
                        format!("{key}={} is not VVVV:DDDD hex", quoted(value)),
                    ),
                }
            }
            "DRIVER" if !value.is_empty() => ue.driver = Some(value.to_string()),
            "PCI_CLASS" => match hex(value, 0xff_ffff) {
                Some(c) => ue.class = Some(c),
                None => w.push(
                    path,
                    format!("PCI_CLASS={} is not a 24-bit hex class", quoted(value)),
                ),
            },
            _ => {}
        }
    }
    ue
}
