//! `[pci] device_spec`: which host PCI devices rtrack tracks, and the tags their pools carry.
//!
//! In: one `[pci] device_spec` entry as string values (an `address` table as a map of regular
//! expressions), and a probed [`PciDevice`] with the host's other functions ([`HostDevices`]). Out:
//! a [`DeviceSpec`] or a [`SpecError`] naming the key; whether a device matches, the first spec
//! that does ([`first_match`]), and the tags its pool carries.
//!
//! Nova's syntax and matching (nova/pci/devspec.py): `vendor_id` and `product_id` (hex, default
//! any), `address` as a glob `[[[domain]:]bus]:][slot][.[function]]` with `*` wildcards or as a
//! dict of regular expressions (`domain`, `bus`, `slot`, `function`, matched from the start as
//! Python's `re.match` does), or `devname` (a network interface) instead of an address. Every
//! other key is a tag (`physical_network`, `trusted`, `remote_managed`, `resource_class`,
//! `traits`...). An exact address naming a PF also matches that PF's VFs, and so does the
//! devname of a PF's interface. The first spec that matches a device wins.
//!
//! Unlike Nova, domains wider than 16 bits are accepted (Intel VMD uses `10000`).

use std::collections::BTreeMap;

use regex::Regex;

use crate::probes::pci::{PciAddress, PciDevType, PciDevice};

/// Tags whose values Nova 34 normalizes to "true"/"false" in a device spec
/// (`PciDeviceSpec._normalize_device_spec_tag`); every other tag (`trusted`, `remote_managed`,
/// `physical_network`...) keeps the value as written, and requests match it case-insensitively.
const BOOLEAN_TAGS: &[&str] = &["managed", "live_migratable", "one_time_use"];

/// Tags that configure Placement and do not go into pool keys.
pub const NON_POOL_TAGS: &[&str] = &["resource_class", "traits", "rp_uuid", "rp_uuids"];

/// A problem in one device spec or alias entry; the config loader adds file and index.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key} = {value}: {expected}")]
pub struct SpecError {
    /// The key within the entry.
    pub key: String,
    /// The value as written.
    pub value: String,
    /// What is accepted.
    pub expected: String,
}

fn spec_err(key: &str, value: &str, expected: impl Into<String>) -> SpecError {
    SpecError {
        key: key.to_string(),
        value: format!("{value:?}"),
        expected: expected.into(),
    }
}

/// One `[[pci.device_spec]]` entry, validated.
#[derive(Debug, Clone)]
pub struct DeviceSpec {
    /// Vendor id (4 lower-case hex digits), `None` for any.
    pub vendor_id: Option<String>,
    /// Product id, `None` for any.
    pub product_id: Option<String>,
    /// Where the device must be.
    pub location: Location,
    /// Tags (values normalized to strings), including `resource_class` and `traits`.
    pub tags: BTreeMap<String, String>,
}

/// How a spec names device addresses.
#[derive(Debug, Clone)]
pub enum Location {
    /// Glob address; `exact` when no part is a wildcard (then a PF address also matches its VFs).
    Glob(GlobAddress),
    /// Regular expressions per address part.
    Regex(RegexAddress),
    /// The function carrying this network interface (a PF's name also matches its VFs).
    Devname(String),
}

/// `dddd:bb:ss.f` with `None` for `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobAddress {
    /// PCI domain (segment) to match; `None` matches any.
    pub domain: Option<u32>,
    /// Bus number to match; `None` matches any.
    pub bus: Option<u8>,
    /// Slot (device).
    pub slot: Option<u8>,
    /// Function number (0-7) to match; `None` matches any.
    pub function: Option<u8>,
}

impl GlobAddress {
    /// Parses Nova's glob form. Missing leading parts and empty parts are wildcards.
    pub fn parse(s: &str) -> Result<GlobAddress, SpecError> {
        let bad = |why: &str| {
            spec_err(
                "address",
                s,
                format!("{why}; expected a PCI address glob like \"0000:3b:*.*\""),
            )
        };
        let (dbs, func) = match s.split_once('.') {
            Some((d, f)) => (d, Some(f)),
            None => (s, None),
        };
        let parts: Vec<&str> = if dbs.is_empty() {
            Vec::new()
        } else {
            dbs.split(':').collect()
        };
        if parts.len() > 3 {
            return Err(bad("too many ':'"));
        }
        let mut all = vec![""; 3 - parts.len()];
        all.extend(parts);
        let field = |v: &str, max: u64, name: &str| -> Result<Option<u64>, SpecError> {
            let v = v.trim();
            if v.is_empty() || v == "*" {
                return Ok(None);
            }
            match u64::from_str_radix(v, 16) {
                Ok(n) if n <= max => Ok(Some(n)),
                Ok(_) => Err(bad(&format!("{name} {v} is above {max:x}"))),
                Err(_) => Err(bad(&format!("{name} {v:?} is not hex or *"))),
            }
        };
        Ok(GlobAddress {
            domain: field(all[0], 0xffff_ffff, "domain")?.map(|v| v as u32),
            bus: field(all[1], 0xff, "bus")?.map(|v| v as u8),
            slot: field(all[2], 0x1f, "slot")?.map(|v| v as u8),
            function: match func {
                Some(f) => field(f, 7, "function")?.map(|v| v as u8),
                None => None,
            },
        })
    }

    /// True when every part is given.
    pub fn exact(&self) -> Option<PciAddress> {
        Some(PciAddress {
            domain: self.domain?,
            bus: self.bus?,
            device: self.slot?,
            function: self.function?,
        })
    }

    fn matches(&self, a: &PciAddress) -> bool {
        self.domain.is_none_or(|d| d == a.domain)
            && self.bus.is_none_or(|b| b == a.bus)
            && self.slot.is_none_or(|s| s == a.device)
            && self.function.is_none_or(|f| f == a.function)
    }
}

/// Regular expressions per address part, matched from the start of Nova's zero-padded forms
/// (`0000`, `3b`, `00`, `0`).
#[derive(Debug, Clone)]
pub struct RegexAddress {
    parts: [(String, Regex); 4],
}

impl RegexAddress {
    /// Builds from a map with keys `domain`, `bus`, `slot`, `function` (missing ones match any).
    pub fn parse(map: &BTreeMap<String, String>) -> Result<RegexAddress, SpecError> {
        for key in map.keys() {
            if !["domain", "bus", "slot", "function"].contains(&key.as_str()) {
                return Err(spec_err(
                    &format!("address.{key}"),
                    &map[key],
                    "unknown part; expected domain, bus, slot or function",
                ));
            }
        }
        let compile = |key: &str| -> Result<(String, Regex), SpecError> {
            let src = map.get(key).map(String::as_str).unwrap_or(".*");
            // Python's re.match anchors at the start only.
            Regex::new(&format!("^(?:{src})"))
                .map(|r| (src.to_string(), r))
                .map_err(|e| {
                    spec_err(
                        &format!("address.{key}"),
                        src,
                        format!("not a regular expression: {e}"),
                    )
                })
        };
        Ok(RegexAddress {
            parts: [
                compile("domain")?,
                compile("bus")?,
                compile("slot")?,
                compile("function")?,
            ],
        })
    }

    fn matches(&self, a: &PciAddress) -> bool {
        let values = [
            format!("{:04x}", a.domain),
            format!("{:02x}", a.bus),
            format!("{:02x}", a.device),
            format!("{:x}", a.function),
        ];
        self.parts
            .iter()
            .zip(values)
            .all(|((_, r), v)| r.is_match(&v))
    }
}

/// What a spec needs to know about the host besides the device itself: which function carries
/// a network interface, and which functions are PFs.
pub trait HostDevices {
    /// The function carrying interface `ifname`, and whether it is a PF.
    fn function_by_ifname(&self, ifname: &str) -> Option<(PciAddress, bool)>;
    /// True if the function at `address` is an SR-IOV PF.
    fn is_pf(&self, address: &PciAddress) -> bool;
}

impl HostDevices for [PciDevice] {
    fn function_by_ifname(&self, ifname: &str) -> Option<(PciAddress, bool)> {
        self.iter()
            .find(|d| d.net_interfaces.iter().any(|n| n == ifname))
            .map(|d| (d.address, d.dev_type == PciDevType::Pf))
    }

    fn is_pf(&self, address: &PciAddress) -> bool {
        self.iter()
            .any(|d| d.address == *address && d.dev_type == PciDevType::Pf)
    }
}

impl DeviceSpec {
    /// Validates one entry given as string values (`address` as a glob) plus an optional regex
    /// address map.
    pub fn new(
        mut values: BTreeMap<String, String>,
        regex_address: Option<BTreeMap<String, String>>,
    ) -> Result<DeviceSpec, SpecError> {
        let id = |key: &str, v: Option<String>| -> Result<Option<String>, SpecError> {
            match v {
                None => Ok(None),
                Some(v) if v.trim() == "*" => Ok(None),
                Some(v) => parse_id(key, &v).map(Some),
            }
        };
        let vendor_id = id("vendor_id", values.remove("vendor_id"))?;
        let product_id = id("product_id", values.remove("product_id"))?;
        let address = values.remove("address");
        let devname = values.remove("devname");
        let location = match (address, regex_address, devname) {
            (Some(_), Some(_), _) => unreachable!("address is either a string or a table"),
            (Some(a), None, None) => Location::Glob(GlobAddress::parse(&a)?),
            (None, Some(m), None) => Location::Regex(RegexAddress::parse(&m)?),
            (None, None, Some(d)) => {
                if d.trim().is_empty() {
                    return Err(spec_err("devname", &d, "must name a network interface"));
                }
                Location::Devname(d)
            }
            (None, None, None) => Location::Glob(GlobAddress {
                domain: None,
                bus: None,
                slot: None,
                function: None,
            }),
            (_, _, Some(d)) => {
                return Err(spec_err(
                    "devname",
                    &d,
                    "cannot be combined with address; give one of them",
                ))
            }
        };
        let mut tags = BTreeMap::new();
        for (key, value) in values {
            let value = if BOOLEAN_TAGS.contains(&key.as_str()) {
                normalize_bool(&key, &value)?
            } else {
                value
            };
            tags.insert(key, value);
        }
        Ok(DeviceSpec {
            vendor_id,
            product_id,
            location,
            tags,
        })
    }

    /// `remote_managed` is true (Nova reads it with `bool_from_string`).
    pub fn remote_managed(&self) -> bool {
        self.tags.get("remote_managed").is_some_and(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "true" | "1" | "yes" | "on" | "y" | "t"
            )
        })
    }

    /// Nova's match: ids equal (or any), the address (or the PF's, for a PF-naming spec)
    /// matches, and for a remote-managed spec the card has a serial number in its VPD
    /// (`_ensure_remote_managed_dev_vpd_serial`: the backend finds the card by it).
    pub fn matches(&self, dev: &PciDevice, host: &(impl HostDevices + ?Sized)) -> bool {
        if self.remote_managed()
            && dev
                .card_serial_number
                .as_deref()
                .is_none_or(|s| s.trim().is_empty())
        {
            return false;
        }
        if self.vendor_id.as_ref().is_some_and(|v| *v != dev.vendor_id)
            || self
                .product_id
                .as_ref()
                .is_some_and(|p| *p != dev.product_id)
        {
            return false;
        }
        match &self.location {
            Location::Glob(g) => {
                if let (Some(exact), Some(parent)) = (g.exact(), dev.parent_addr) {
                    if exact == parent && host.is_pf(&exact) {
                        return true;
                    }
                }
                g.matches(&dev.address)
            }
            Location::Regex(r) => r.matches(&dev.address),
            Location::Devname(name) => match host.function_by_ifname(name) {
                None => false,
                Some((addr, is_pf)) => {
                    dev.address == addr || (is_pf && dev.parent_addr == Some(addr))
                }
            },
        }
    }

    /// The tags that go into pool keys (all but resource_class, traits, rp_uuid(s)).
    pub fn pool_tags(&self) -> impl Iterator<Item = (&String, &String)> {
        self.tags
            .iter()
            .filter(|(k, _)| !NON_POOL_TAGS.contains(&k.as_str()))
    }
}

/// The first spec matching `dev`, with its index.
pub fn first_match<'a>(
    specs: &'a [DeviceSpec],
    dev: &PciDevice,
    host: &(impl HostDevices + ?Sized),
) -> Option<(usize, &'a DeviceSpec)> {
    specs.iter().enumerate().find(|(_, s)| s.matches(dev, host))
}

/// Device specs Nova refuses on this host: a remote-managed spec that selects a PF (only VFs
/// can be remote-managed: `PciDeviceInvalidPFRemoteManaged`), or that names an interface the
/// host does not have (`PciDeviceRemoteManagedNotPresent`). Each as (`pci.device_spec[i].key`,
/// why).
pub fn remote_managed_problems(specs: &[DeviceSpec], host: &[PciDevice]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        if !spec.remote_managed() {
            continue;
        }
        if let Location::Devname(name) = &spec.location {
            if host.function_by_ifname(name).is_none() {
                out.push((
                    format!("pci.device_spec[{i}].devname"),
                    format!("{name:?} is not a network interface on this host; a remote-managed spec must name one that is there"),
                ));
                continue;
            }
        }
        // The serial number does not matter here: a PF is never remote-managed.
        let mut probe_spec = spec.clone();
        probe_spec.tags.remove("remote_managed");
        if let Some(pf) = host
            .iter()
            .find(|d| d.dev_type == PciDevType::Pf && probe_spec.matches(d, host))
        {
            out.push((
                format!("pci.device_spec[{i}].remote_managed"),
                format!(
                    "the spec selects PF {} ({}:{}); only VFs can be remote-managed (Nova refuses this spec): give the VFs' product id",
                    pf.address, pf.vendor_id, pf.product_id
                ),
            ));
        }
    }
    out
}

/// A vendor or product id: up to 4 hex digits, optional `0x`; normalized to 4 lower-case digits.
pub fn parse_id(key: &str, v: &str) -> Result<String, SpecError> {
    let t = v.trim();
    let digits = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    match u32::from_str_radix(digits, 16) {
        Ok(n) if !digits.is_empty() && n <= 0xffff => Ok(format!("{n:04x}")),
        _ => Err(spec_err(
            key,
            v,
            "must be a hex id of up to 4 digits like \"8086\", or \"*\"",
        )),
    }
}

fn normalize_bool(key: &str, v: &str) -> Result<String, SpecError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" | "y" | "t" => Ok("true".to_string()),
        "false" | "no" | "off" | "0" | "n" | "f" => Ok("false".to_string()),
        _ => Err(spec_err(key, v, "must be a boolean (true or false)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(
        addr: &str,
        vendor: &str,
        product: &str,
        parent: Option<&str>,
        dev_type: PciDevType,
    ) -> PciDevice {
        PciDevice {
            address: PciAddress::parse(addr).unwrap(),
            vendor_id: vendor.into(),
            product_id: product.into(),
            class: "020000".into(),
            subsystem_vendor_id: None,
            subsystem_product_id: None,
            revision: None,
            numa_node: Some(0),
            numa_node_source: None,
            driver: None,
            iommu_group: None,
            net_interfaces: vec![],
            dev_type,
            parent_addr: parent.map(|p| PciAddress::parse(p).unwrap()),
            virtfns: vec![],
            sriov_numvfs: None,
            sriov_totalvfs: None,
            vendor_name: None,
            product_name: None,
            class_name: None,
            card_serial_number: None,
        }
    }

    fn spec(pairs: &[(&str, &str)]) -> DeviceSpec {
        DeviceSpec::new(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            None,
        )
        .unwrap()
    }

    #[test]
    fn globs_follow_nova() {
        let g = GlobAddress::parse("0000:3b:*.*").unwrap();
        assert_eq!(
            (g.domain, g.bus, g.slot, g.function),
            (Some(0), Some(0x3b), None, None)
        );
        let g = GlobAddress::parse(":0a:00.").unwrap();
        assert_eq!(
            (g.domain, g.bus, g.slot, g.function),
            (None, Some(0x0a), Some(0), None)
        );
        let g = GlobAddress::parse("10000:00:04.0").unwrap();
        assert_eq!(g.exact(), PciAddress::parse("10000:00:04.0"));
        assert!(GlobAddress::parse("0000:3b:20.0").is_err());
        assert!(GlobAddress::parse("0:0:0:0.0").is_err());
        assert!(GlobAddress::parse("0000:zz:00.0").is_err());
    }

    #[test]
    fn empty_spec_matches_everything() {
        let s = spec(&[]);
        let d = dev("0000:01:00.0", "10de", "15f8", None, PciDevType::Pci);
        assert!(s.matches(&d, &[][..]));
    }

    #[test]
    fn exact_pf_address_also_matches_its_vfs() {
        let pf = dev("0000:3b:00.0", "8086", "1592", None, PciDevType::Pf);
        let vf = dev(
            "0000:3b:01.0",
            "8086",
            "1889",
            Some("0000:3b:00.0"),
            PciDevType::Vf,
        );
        let other_vf = dev(
            "0000:5e:01.0",
            "8086",
            "1889",
            Some("0000:5e:00.0"),
            PciDevType::Vf,
        );
        let host = [pf.clone(), vf.clone(), other_vf.clone()];
        let s = spec(&[("address", "0000:3b:00.0")]);
        assert!(s.matches(&pf, &host[..]));
        assert!(s.matches(&vf, &host[..]));
        assert!(!s.matches(&other_vf, &host[..]));
        // With a product id, only the VFs' id matches.
        let s = spec(&[("address", "0000:3b:00.0"), ("product_id", "1889")]);
        assert!(!s.matches(&pf, &host[..]));
        assert!(s.matches(&vf, &host[..]));
    }

    #[test]
    fn devname_of_a_pf_matches_its_vfs() {
        let mut pf = dev("0000:3b:00.0", "8086", "1592", None, PciDevType::Pf);
        pf.net_interfaces = vec!["ens1f0".into()];
        let vf = dev(
            "0000:3b:01.0",
            "8086",
            "1889",
            Some("0000:3b:00.0"),
            PciDevType::Vf,
        );
        let host = [pf.clone(), vf.clone()];
        let s = spec(&[("devname", "ens1f0")]);
        assert!(s.matches(&vf, &host[..]));
        assert!(s.matches(&pf, &host[..]));
        assert!(!spec(&[("devname", "nope")]).matches(&vf, &host[..]));
    }

    #[test]
    fn regex_addresses_match_from_the_start() {
        let m: BTreeMap<String, String> = [
            ("bus".to_string(), "3[bc]".to_string()),
            ("function".to_string(), "[0-3]".to_string()),
        ]
        .into();
        let s = DeviceSpec::new(BTreeMap::new(), Some(m)).unwrap();
        assert!(s.matches(
            &dev("0000:3c:00.2", "8086", "1889", None, PciDevType::Pci),
            &[][..]
        ));
        assert!(!s.matches(
            &dev("0000:3c:00.5", "8086", "1889", None, PciDevType::Pci),
            &[][..]
        ));
        assert!(!s.matches(
            &dev("0000:4b:00.0", "8086", "1889", None, PciDevType::Pci),
            &[][..]
        ));
        let bad: BTreeMap<String, String> = [("bus".to_string(), "(".to_string())].into();
        assert!(DeviceSpec::new(BTreeMap::new(), Some(bad))
            .unwrap_err()
            .to_string()
            .contains("address.bus"));
    }

    #[test]
    fn nova_normalizes_exactly_its_own_boolean_tags() {
        for (tag, written, kept) in [
            ("managed", "YES", "true"),
            ("managed", "off", "false"),
            ("live_migratable", "y", "true"),
            ("live_migratable", "0", "false"),
            ("one_time_use", "True", "true"),
            ("trusted", "YES", "YES"),
            ("trusted", "yes", "yes"),
            ("remote_managed", "True", "True"),
            ("physical_network", "PhysNet1", "PhysNet1"),
        ] {
            let s = spec(&[(tag, written)]);
            assert_eq!(s.tags[tag], kept, "{tag} = {written}");
        }
        // Strict for the normalized ones, anything goes for the others.
        for tag in ["managed", "live_migratable", "one_time_use"] {
            assert!(
                DeviceSpec::new([(tag.to_string(), "maybe".to_string())].into(), None).is_err()
            );
        }
        assert_eq!(spec(&[("trusted", "maybe")]).tags["trusted"], "maybe");
    }

    #[test]
    fn tags_are_normalized_and_bad_values_named() {
        let s = spec(&[
            ("vendor_id", "0x8086"),
            ("trusted", "Yes"),
            ("physical_network", "physnet1"),
            ("resource_class", "CUSTOM_X"),
        ]);
        assert_eq!(s.vendor_id.as_deref(), Some("8086"));
        // Nova 34 normalizes only managed, live_migratable and one_time_use.
        assert_eq!(s.tags["trusted"], "Yes");
        let pool: Vec<_> = s.pool_tags().map(|(k, _)| k.as_str()).collect();
        assert_eq!(pool, vec!["physical_network", "trusted"]);
        let e = DeviceSpec::new(
            [("vendor_id".to_string(), "80866".to_string())].into(),
            None,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "vendor_id = \"80866\": must be a hex id of up to 4 digits like \"8086\", or \"*\""
        );
        let e = DeviceSpec::new([("managed".to_string(), "maybe".to_string())].into(), None)
            .unwrap_err();
        assert!(e.to_string().contains("boolean"));
        let e = DeviceSpec::new(
            [
                ("devname".to_string(), "eth0".to_string()),
                ("address".to_string(), "*:*:*.*".to_string()),
            ]
            .into(),
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("cannot be combined"));
    }
}
