//! PCI probe: every function under `sys/bus/pci/devices`, with its ids, class, NUMA node,
//! driver, IOMMU group, network interfaces and SR-IOV relations, and human names from the PCI ID
//! database.
//!
//! In: `sys/bus/pci/devices/<address>/{uevent,vendor,device,class,subsystem_vendor,
//! subsystem_device,revision,numa_node,local_cpulist,sriov_totalvfs,sriov_numvfs}` (the id files
//! only where `uevent` lacks the ids) and the links `driver`,
//! `iommu_group`, `physfn`, `virtfn<N>`, `net/`, `virtio<N>/net/`; the first 64 bytes of `config`
//! only when there is no `revision` file. Out: [`PciDevice`]s sorted by
//! address.
//!
//! A device directory is opened once and its files are opened relative to it; it is listed
//! only for a PF's `virtfn<N>` links (and for `net/` when the tree has no `sys/class/net`): for
//! a VF, a missing optional attribute costs one failed `openat`, less than a listing. `config`,
//! `resource<N>`, `rom`, `vpd`, `reset`, `remove` and `rescan` are never read: they can block,
//! need root, or act on the device. `vendor`, `device` and `class` are mandatory; a device
//! missing one is skipped with a warning. Ids always come from the attribute files, never from
//! config space: a VF's own config space reads `ffff`.

use std::cmp::Ordering;
use std::fmt;
use std::path::Path;

use serde::{Serialize, Serializer};

use crate::cpulist::CpuSet;
use crate::numa::NumaTopology;
use crate::read::{
    list_dir, parse_hex, parse_int, quoted, read_prefix, ReadFailure, SysDir, Warnings,
};
use crate::HostRoot;
use sriov::{sriov_role, SriovRole};

pub use crate::pci_uevent::{parse_uevent, PciUevent};

mod sriov;

/// A PCI function address `domain:bus:device.function`. The domain can be wider than 16 bits
/// (Intel VMD uses `10000`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddress {
    /// Segment/domain.
    pub domain: u32,
    /// Bus number, 0-255.
    pub bus: u8,
    /// Device (slot), 0-31.
    pub device: u8,
    /// Function, 0-7.
    pub function: u8,
}

impl PciAddress {
    /// What [`PciAddress::parse`] accepts, as a regular expression (the API document's pattern):
    /// a device number below 32 is `00` to `1f`.
    pub const PATTERN: &'static str = "^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[01][0-9a-fA-F]\\.[0-7]$";

    /// Parses `dddd:bb:ss.f` (domain of 4 to 8 hex digits).
    pub fn parse(s: &str) -> Option<PciAddress> {
        let (domain, rest) = s.split_once(':')?;
        let (bus, rest) = rest.split_once(':')?;
        let (device, function) = rest.split_once('.')?;
        let hex_ok = |v: &str, min: usize, max: usize| {
            (min..=max).contains(&v.len()) && v.chars().all(|c| c.is_ascii_hexdigit())
        };
        if !hex_ok(domain, 4, 8)
            || !hex_ok(bus, 2, 2)
            || !hex_ok(device, 2, 2)
            || !hex_ok(function, 1, 1)
        {
            return None;
        }
        let addr = PciAddress {
            domain: u32::from_str_radix(domain, 16).ok()?,
            bus: u8::from_str_radix(bus, 16).ok()?,
            device: u8::from_str_radix(device, 16).ok()?,
            function: u8::from_str_radix(function, 16).ok()?,
        };
        (addr.device < 32 && addr.function < 8).then_some(addr)
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl Serialize for PciAddress {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for PciAddress {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<PciAddress, D::Error> {
        let s = String::deserialize(d)?;
        PciAddress::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!("{s:?} is not a PCI address like 0000:3b:00.0"))
        })
    }
}

/// Nova's device type.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize,
)]
pub enum PciDevType {
    /// A plain function, or an SR-IOV-incapable one.
    #[serde(rename = "type-PCI")]
    Pci,
    /// An SR-IOV physical function (`sriov_totalvfs` > 0), whether or not VFs are enabled.
    #[serde(rename = "type-PF")]
    Pf,
    /// An SR-IOV virtual function (has a `physfn` link).
    #[serde(rename = "type-VF")]
    Vf,
    /// A VF with a vDPA device on it ([`crate::vdpa`]): Nova's `vdpa`, pooled apart and given
    /// only to requests that ask for `dev_type: vdpa`. Still a VF of its PF.
    #[serde(rename = "vdpa")]
    Vdpa,
}

impl PciDevType {
    /// Nova's string for the type.
    pub fn as_str(self) -> &'static str {
        match self {
            PciDevType::Pci => "type-PCI",
            PciDevType::Pf => "type-PF",
            PciDevType::Vf => "type-VF",
            PciDevType::Vdpa => "vdpa",
        }
    }

    /// A VF or a vDPA device: a function with a parent PF (Nova's `CHILD_TYPES`), whose use
    /// makes its PF unavailable and which a used PF makes unavailable.
    pub fn is_child(self) -> bool {
        matches!(self, PciDevType::Vf | PciDevType::Vdpa)
    }
}

/// Where a device's NUMA node came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NumaSource {
    /// The device's `numa_node` file.
    NumaNode,
    /// `numa_node` was -1 or absent, and `local_cpulist` lies within exactly one node.
    LocalCpulist,
}

/// One PCI function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PciDevice {
    /// `domain:bus:device.function`.
    pub address: PciAddress,
    /// Vendor id, 4 lower-case hex digits.
    pub vendor_id: String,
    /// Device (product) id, 4 lower-case hex digits.
    pub product_id: String,
    /// Class, subclass and programming interface, 6 lower-case hex digits.
    pub class: String,
    /// Subsystem vendor id.
    pub subsystem_vendor_id: Option<String>,
    /// Subsystem device id.
    pub subsystem_product_id: Option<String>,
    /// Revision, 2 hex digits.
    pub revision: Option<String>,
    /// NUMA node; null when the kernel does not know (-1) and `local_cpulist` does not tell.
    pub numa_node: Option<u32>,
    /// Where `numa_node` came from; null when unknown.
    pub numa_node_source: Option<NumaSource>,
    /// Bound driver (basename of the `driver` link); null when unbound.
    pub driver: Option<String>,
    /// IOMMU group number.
    pub iommu_group: Option<u32>,
    /// Network interfaces on this function.
    pub net_interfaces: Vec<String>,
    /// Nova's device type.
    pub dev_type: PciDevType,
    /// For a VF, the address of its PF.
    pub parent_addr: Option<PciAddress>,
    /// For a PF, its VFs in `virtfn<N>` order.
    pub virtfns: Vec<PciAddress>,
    /// For a PF, `sriov_numvfs` (VFs enabled).
    pub sriov_numvfs: Option<u32>,
    /// For an SR-IOV capable function, `sriov_totalvfs`.
    pub sriov_totalvfs: Option<u32>,
    /// Vendor name from the PCI ID database.
    pub vendor_name: Option<String>,
    /// Device name from the PCI ID database.
    pub product_name: Option<String>,
    /// Subclass (or class) name from the PCI ID database.
    pub class_name: Option<String>,
    /// The card's serial number from VPD (a VF's is its PF's); read only when asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card_serial_number: Option<String>,
}

impl PciDevice {
    /// True for PCI-to-PCI and host bridges (class 06xx), which are never pooled.
    pub fn is_bridge(&self) -> bool {
        self.class.starts_with("06")
    }
}

impl PartialOrd for PciDevice {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for PciDevice {
    fn cmp(&self, other: &Self) -> Ordering {
        self.address.cmp(&other.address)
    }
}

/// Reads every PCI function. `numa` resolves devices whose `numa_node` is -1 through their
/// `local_cpulist`.
pub fn probe_pci(
    root: &HostRoot,
    numa: &NumaTopology,
    read_vpd: bool,
    w: &mut Warnings,
) -> Vec<PciDevice> {
    let devices_dir = root.sys_path("bus/pci/devices");
    let Some(names) = list_dir(&devices_dir, w) else {
        if !devices_dir.exists() {
            // s390x, some guests and partial captures have no PCI bus: no devices, not an
            // unusable root.
            w.push(
                &devices_dir,
                "directory is missing: the host has no PCI devices",
            );
        }
        return Vec::new();
    };
    let mut netdevs = netdevs_by_function(root, w);
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let Some(address) = PciAddress::parse(&name) else {
            w.push(
                &devices_dir.join(&name),
                "name is not a PCI address like 0000:3b:00.0: entry skipped",
            );
            continue;
        };
        let known_netdevs = netdevs
            .as_mut()
            .map(|m| m.remove(&address).unwrap_or_default());
        if let Some(dev) = probe_function(&devices_dir.join(&name), address, numa, known_netdevs, w)
        {
            out.push(dev);
        }
    }
    out.sort();
    if read_vpd {
        card_serials(&devices_dir, &mut out, w);
    }
    out
}

/// Each PF's card serial number from its VPD, given to its VFs too (libvirt's
/// `_get_vf_parent_pci_vpd_info`).
fn card_serials(devices_dir: &Path, devices: &mut [PciDevice], w: &mut Warnings) {
    let mut serials: std::collections::HashMap<PciAddress, String> = Default::default();
    for d in devices.iter_mut().filter(|d| d.dev_type == PciDevType::Pf) {
        d.card_serial_number = crate::vpd::read_serial(&devices_dir.join(d.address.to_string()), w);
        if let Some(sn) = &d.card_serial_number {
            serials.insert(d.address, sn.clone());
        }
    }
    for d in devices.iter_mut() {
        if let Some(pf) = d.parent_addr {
            d.card_serial_number = serials.get(&pf).cloned();
        }
    }
}

/// Network interfaces per PCI function, from the `sys/class/net/<if>` links (one `readlink` per
/// interface instead of listing a `net/` directory per function). The function is the last PCI
/// address in the link target: `../../devices/pci0000:00/0000:00:03.0/virtio2/net/eth0`.
/// `None` when the tree has no `sys/class/net`, or one holding something else than links (a
/// captured tree, never real sysfs): then each function's `net/` directory is listed instead.
fn netdevs_by_function(
    root: &HostRoot,
    w: &mut Warnings,
) -> Option<std::collections::HashMap<PciAddress, Vec<String>>> {
    let class_net = root.sys_path("class/net");
    // Listed once, each link read relative to the open directory (no path walk per interface).
    let mut dir = SysDir::open(&class_net, w)?;
    let mut names = dir.entries(w);
    names.sort();
    let mut map: std::collections::HashMap<PciAddress, Vec<String>> = Default::default();
    for name in names {
        let path = class_net.join(&name);
        let Some(target) = dir.link_target(&name) else {
            w.push(
                &path,
                "not a link to a device: network interfaces taken from each function's net/ instead",
            );
            return None;
        };
        let function = target
            .iter()
            .rev()
            .filter_map(|c| c.to_str())
            .find_map(PciAddress::parse);
        if let Some(function) = function {
            map.entry(function).or_default().push(name);
        }
    }
    Some(map)
}

fn probe_function(
    dir: &Path,
    address: PciAddress,
    numa: &NumaTopology,
    known_netdevs: Option<Vec<String>>,
    w: &mut Warnings,
) -> Option<PciDevice> {
    // Entries are opened by name relative to the directory, without listing it first: a missing
    // optional attribute costs one failed `openat`, less than a listing of every function.
    let Some(sysdir) = SysDir::open_unlisted(dir, w) else {
        w.push(dir, "device directory cannot be opened: device skipped");
        return None;
    };

    // `uevent` carries the ids, class and subsystem ids in one file (the kernel fills it from
    // the same struct pci_dev as the attribute files); the attribute files are the fallback for
    // captured trees without it.
    let ue = sysdir
        .read_optional("uevent", w)
        .map(|text| parse_uevent(&text, &dir.join("uevent"), w))
        .unwrap_or_default();

    let (vendor_id, product_id, class) = mandatory_ids(&sysdir, dir, &ue, w)?;

    let subsystem_vendor_id = uevent_hex(ue.subsystem_vendor, 4)
        .or_else(|| hex_attr(&sysdir, dir, "subsystem_vendor", 4, w));
    let subsystem_product_id = uevent_hex(ue.subsystem_device, 4)
        .or_else(|| hex_attr(&sysdir, dir, "subsystem_device", 4, w));
    let revision = revision_of(&sysdir, dir, w);

    let (numa_node, numa_node_source) = numa_of(&sysdir, dir, numa, w);

    // `uevent` names the bound driver too (no DRIVER line: unbound); else the `driver` link.
    let driver = if ue.present {
        ue.driver.clone()
    } else {
        sysdir.link_basename("driver", w)
    };
    let iommu_group = sysdir
        .link_basename("iommu_group", w)
        .and_then(|g| parse_int(&g, &dir.join("iommu_group"), "an IOMMU group number", w));

    let SriovRole {
        dev_type,
        parent_addr,
        sriov_totalvfs,
        sriov_numvfs,
    } = sriov_role(&sysdir, dir, w);

    // Listing the directory is needed only for a PF's `virtfn<N>` links, and for `net/` and
    // `virtio<N>/net/` when the tree has no `sys/class/net`.
    let needs_listing = sriov_numvfs.is_some_and(|n| n > 0) || known_netdevs.is_none();
    let entries = if needs_listing {
        list_dir(dir, w).unwrap_or_default()
    } else {
        Vec::new()
    };

    let net_interfaces = known_netdevs.unwrap_or_else(|| function_netdevs(dir, &entries, w));
    let virtfns = virtfns_of(&sysdir, dir, &entries, w);

    let (vendor_name, product_name, class_name) =
        crate::pci_names::pci_names(&vendor_id, &product_id, &class);
    Some(PciDevice {
        address,
        vendor_id,
        product_id,
        class,
        subsystem_vendor_id,
        subsystem_product_id,
        revision,
        numa_node,
        numa_node_source,
        driver,
        iommu_group,
        net_interfaces,
        dev_type,
        parent_addr,
        virtfns,
        sriov_numvfs,
        sriov_totalvfs,
        vendor_name,
        product_name,
        class_name,
        card_serial_number: None,
    })
}

/// An id from `uevent` as the attribute file writes it: `digits` lowercase hex digits.
fn uevent_hex(v: Option<u32>, digits: usize) -> Option<String> {
    v.map(|v| format!("{v:0digits$x}"))
}

/// The ids every function has: vendor, device (product) and class, from `uevent` or else the
/// attribute files. `None`, with a warning naming those missing, when any is.
fn mandatory_ids(
    sysdir: &SysDir,
    dir: &Path,
    ue: &PciUevent,
    w: &mut Warnings,
) -> Option<(String, String, String)> {
    let mut missing = Vec::new();
    let vendor_id = uevent_hex(ue.vendor, 4).or_else(|| hex_attr(sysdir, dir, "vendor", 4, w));
    let product_id = uevent_hex(ue.device, 4).or_else(|| hex_attr(sysdir, dir, "device", 4, w));
    let class = uevent_hex(ue.class, 6).or_else(|| hex_attr(sysdir, dir, "class", 6, w));
    for (name, v) in [
        ("vendor", &vendor_id),
        ("device", &product_id),
        ("class", &class),
    ] {
        if v.is_none() {
            missing.push(name);
        }
    }
    let (Some(vendor_id), Some(product_id), Some(class)) = (vendor_id, product_id, class) else {
        w.push(
            dir,
            format!(
                "mandatory attribute(s) {} missing or unreadable: device skipped",
                missing.join(", ")
            ),
        );
        return None;
    };
    Some((vendor_id, product_id, class))
}

/// A hex id attribute (`vendor`, `class`, ...) of `digits` hex digits, as the kernel writes it.
fn hex_attr(
    sysdir: &SysDir,
    dir: &Path,
    name: &str,
    digits: usize,
    w: &mut Warnings,
) -> Option<String> {
    let raw = sysdir.read_optional(name, w)?;
    let path = dir.join(name);
    let expected = format!("a hex value like 0x{}", "0".repeat(digits));
    // The kernel writes these as `0x` and zero-padded hex digits: anything else (a decimal
    // `65536`, a sign) is not what sysfs says, and is not guessed at.
    if !(raw.starts_with("0x") || raw.starts_with("0X")) {
        w.push(&path, format!("value {} is not {expected}", quoted(&raw)));
        return None;
    }
    let v = parse_hex(&raw, &path, &expected, w)?;
    if u64::from(v) >= 1u64 << (4 * digits as u32) {
        w.push(
            &path,
            format!("value {} is wider than {digits} hex digits", quoted(&raw)),
        );
        return None;
    }
    Some(format!("{v:0digits$x}"))
}

/// The revision: the `revision` file, else byte 8 of the config header.
fn revision_of(sysdir: &SysDir, dir: &Path, w: &mut Warnings) -> Option<String> {
    match sysdir.read_optional("revision", w) {
        Some(raw) => {
            let path = dir.join("revision");
            parse_hex(&raw, &path, "a hex value like 0x00", w)
                .filter(|v| *v <= 0xff)
                .map(|v| format!("{v:02x}"))
        }
        // Kernels before 4.x have no `revision` file; byte 8 of the config header is the same.
        None => match read_prefix(&dir.join("config"), 64) {
            Ok(header) if header.len() > 8 => Some(format!("{:02x}", header[8])),
            Ok(_) | Err(ReadFailure::Missing) => None,
            Err(e) => {
                w.push(&dir.join("config"), format!("header is {e}"));
                None
            }
        },
    }
}

/// The function's NUMA node: its `numa_node` file, else the cell that holds its `local_cpulist`.
fn numa_of(
    sysdir: &SysDir,
    dir: &Path,
    numa: &NumaTopology,
    w: &mut Warnings,
) -> (Option<u32>, Option<NumaSource>) {
    let mut numa_node = None;
    let mut numa_node_source = None;
    if let Some(raw) = sysdir.read_optional("numa_node", w) {
        let path = dir.join("numa_node");
        if let Some(n) = parse_int::<i64>(&raw, &path, "a NUMA node number or -1", w) {
            if n >= 0 {
                match u32::try_from(n) {
                    Ok(n) => {
                        numa_node = Some(n);
                        numa_node_source = Some(NumaSource::NumaNode);
                    }
                    Err(_) => w.push(&path, format!("NUMA node {n} is out of range")),
                }
            }
        }
    }
    if numa_node.is_none() {
        if let Some(raw) = sysdir.read_optional("local_cpulist", w) {
            match CpuSet::parse_list(&raw) {
                Ok(cpus) => {
                    if let Some(node) = numa.node_holding(&cpus) {
                        numa_node = Some(node);
                        numa_node_source = Some(NumaSource::LocalCpulist);
                    }
                }
                Err(e) => w.push(&dir.join("local_cpulist"), format!("not a cpulist: {e}")),
            }
        }
    }
    (numa_node, numa_node_source)
}

/// The network interfaces under the function's `net/` (or `virtio<N>/net/`), when the tree has
/// no `sys/class/net` to say it.
fn function_netdevs(dir: &Path, entries: &[String], w: &mut Warnings) -> Vec<String> {
    let mut names = Vec::new();
    for sub in entries
        .iter()
        .filter(|e| *e == "net" || e.starts_with("virtio"))
    {
        // virtio functions carry their netdev one level down: virtio0/net/eth0.
        let net = if sub == "net" {
            dir.join("net")
        } else {
            dir.join(sub).join("net")
        };
        names.extend(list_dir(&net, w).unwrap_or_default());
    }
    names
}

/// A PF's VFs, from its `virtfn<N>` links, in N order.
fn virtfns_of(
    sysdir: &SysDir,
    dir: &Path,
    entries: &[String],
    w: &mut Warnings,
) -> Vec<PciAddress> {
    let mut virtfn_links: Vec<(u32, &String)> = entries
        .iter()
        .filter_map(|e| {
            e.strip_prefix("virtfn")
                .and_then(|n| n.parse().ok())
                .map(|n| (n, e))
        })
        .collect();
    virtfn_links.sort_unstable_by_key(|(n, _)| *n);
    let mut virtfns = Vec::with_capacity(virtfn_links.len());
    for (_, link) in virtfn_links {
        if let Some(base) = sysdir.link_basename(link, w) {
            match PciAddress::parse(&base) {
                Some(a) => virtfns.push(a),
                None => w.push(
                    &dir.join(link),
                    format!("link target {base:?} is not a PCI address"),
                ),
            }
        }
    }
    virtfns
}

#[cfg(test)]
mod tests;
