//! Persistent memory namespaces: what `ndctl list -X` shows, which is what Nova's libvirt driver
//! reads for virtual persistent memory (vPMEM).
//!
//! In: `sys/bus/nd/devices/namespace<R>.<N>` (`devtype`, `alt_name`, `mode`, `holder`, `size`,
//! `uuid`, `numa_node`, the `driver` link) and, for a namespace in device-dax mode, its holder
//! `sys/bus/nd/devices/dax<R>.<N>` (`size`, `dax_region/align`, and the device-dax instance
//! `dax<R>.<M>/` inside it, whose name is the character device `/dev/dax<R>.<M>`). Out: the
//! [`PmemNamespace`]s, sorted by region and number, with a warning for each odd file.
//!
//! Nova takes a namespace's `name` (the kernel's `alt_name`), `size` (ndctl's: the dax device's,
//! which is the namespace less its info block and page map), `align` (the dax region's) and
//! `devpath` (`/dev/` + the first device-dax instance). Idle seed namespaces (size 0, one per
//! region for creating the next) are left out, as ndctl leaves them out.

use std::path::Path;

use serde::Serialize;

use crate::read::{list_dir, parse_int, quoted, SysDir, Warnings};
use crate::HostRoot;

/// A persistent memory namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PmemNamespace {
    /// The kernel's name, `namespace0.0`.
    pub dev: String,
    /// Its name (`alt_name`, ndctl's `name`), what `[devices] pmem_namespaces` names it by;
    /// null when it has none.
    pub name: Option<String>,
    /// ndctl's mode: `devdax`, `fsdax`, `sector` or `raw` (the kernel's `dax`, `memory`, `safe`,
    /// `raw`); another word as the kernel wrote it; null when `mode` is missing.
    pub mode: Option<String>,
    /// Bound to its driver (ndctl lists only these unless asked).
    pub enabled: bool,
    /// Bytes: for a device-dax namespace the dax device's size (Nova's); else the namespace's.
    pub size: Option<u64>,
    /// Device-dax only: the dax region's alignment, bytes (Nova's `align`).
    pub align: Option<u64>,
    /// Device-dax only: the character device, `/dev/dax0.0` (Nova's `devpath`); null when the
    /// holder has no device-dax instance.
    pub devpath: Option<String>,
    /// Device-dax only: the driver of the device-dax instance, `device_dax`, or `kmem` when the
    /// memory was handed to the kernel as system RAM.
    pub dax_driver: Option<String>,
    /// `numa_node` (the kernel's; -1 when none).
    pub numa_node: Option<i64>,
    /// The namespace's uuid, when it has a label.
    pub uuid: Option<String>,
}

impl PmemNamespace {
    /// A device-dax namespace bound to its driver with a character device: what Nova can give a
    /// guest.
    pub fn is_usable_devdax(&self) -> bool {
        self.enabled && self.mode.as_deref() == Some("devdax") && self.devpath.is_some()
    }
}

/// Reads the namespaces under `sys/bus/nd/devices`. A host without the bus has none (no warning).
pub fn probe_pmem(root: &HostRoot, w: &mut Warnings) -> Vec<PmemNamespace> {
    let bus = root.sys_path("bus/nd/devices");
    let Some(names) = list_dir(&bus, w) else {
        return Vec::new();
    };
    let mut out: Vec<PmemNamespace> = names
        .iter()
        .filter(|n| n.starts_with("namespace"))
        .filter_map(|n| probe_namespace(&bus, n, w))
        .collect();
    out.sort_by_key(|n| sort_key(&n.dev));
    out
}

/// `namespace12.3` -> (12, 3, name), so that region 10 comes after region 2.
fn sort_key(dev: &str) -> (u64, u64, String) {
    let digits = dev.trim_start_matches(|c: char| !c.is_ascii_digit());
    let mut parts = digits
        .split('.')
        .map(|p| p.parse::<u64>().unwrap_or(u64::MAX));
    (
        parts.next().unwrap_or(u64::MAX),
        parts.next().unwrap_or(u64::MAX),
        dev.to_string(),
    )
}

/// ndctl's word for the kernel's `mode`.
fn ndctl_mode(kernel: &str) -> String {
    match kernel {
        "dax" => "devdax",
        "memory" => "fsdax",
        "safe" => "sector",
        other => other,
    }
    .to_string()
}

fn probe_namespace(bus: &Path, dev: &str, w: &mut Warnings) -> Option<PmemNamespace> {
    let dir = SysDir::open_unlisted(&bus.join(dev), w)?;
    let int = |name: &str, expected: &str, w: &mut Warnings| -> Option<u64> {
        let raw = dir.read_optional(name, w)?;
        parse_int::<u64>(&raw, &dir.join(name), expected, w)
    };
    let size = int("size", "a size in bytes", w);
    if size == Some(0) {
        return None;
    }
    let text = |name: &str, w: &mut Warnings| dir.read_optional(name, w).filter(|s| !s.is_empty());
    let mode = text("mode", w).map(|m| ndctl_mode(&m));
    let enabled = dir.link_basename("driver", w).is_some();
    let numa_node = dir
        .read_optional("numa_node", w)
        .and_then(|raw| parse_int::<i64>(&raw, &dir.join("numa_node"), "a node number", w));
    let mut ns = PmemNamespace {
        dev: dev.to_string(),
        name: text("alt_name", w),
        mode,
        enabled,
        size,
        align: None,
        devpath: None,
        dax_driver: None,
        numa_node,
        uuid: text("uuid", w),
    };
    if ns.mode.as_deref() == Some("devdax") && enabled {
        match text("holder", w) {
            Some(holder) => read_dax(bus, &holder, &mut ns, w),
            None => w.push(
                &dir.join("holder"),
                "a device-dax namespace bound to its driver names no holder: its dax device is unknown",
            ),
        }
    }
    Some(ns)
}

/// Fills in a device-dax namespace's size, alignment and character device from its holder
/// (`dax<R>.<N>` on the nd bus).
fn read_dax(bus: &Path, holder: &str, ns: &mut PmemNamespace, w: &mut Warnings) {
    // The holder's name comes from a file: it must be one entry of the bus, nothing more.
    let plain =
        holder.starts_with("dax") && !holder.contains('/') && holder != "." && holder != "..";
    if !plain {
        w.push(
            &bus.join(&ns.dev).join("holder"),
            format!(
                "value {} is not a dax device name like dax0.0",
                quoted(holder)
            ),
        );
        return;
    }
    let Some(mut dax) = SysDir::open(&bus.join(holder), w) else {
        w.push(
            &bus.join(holder),
            "the namespace's holder is missing: its dax device is unknown",
        );
        return;
    };
    let int = |name: &str, expected: &str, w: &mut Warnings| -> Option<u64> {
        let raw = dax.read_optional(name, w)?;
        parse_int::<u64>(&raw, &dax.join(name), expected, w)
    };
    if let Some(size) = int("size", "a size in bytes", w) {
        ns.size = Some(size);
    }
    ns.align = int("dax_region/align", "an alignment in bytes", w);
    // The device-dax instances inside the holder, lowest id first (ndctl's `devices[0]`).
    let mut children: Vec<(u64, u64, String)> = dax
        .entries(w)
        .into_iter()
        .filter(|e| {
            e.strip_prefix("dax").is_some_and(|rest| {
                rest.split_once('.').is_some_and(|(a, b)| {
                    !a.is_empty()
                        && !b.is_empty()
                        && a.bytes().all(|c| c.is_ascii_digit())
                        && b.bytes().all(|c| c.is_ascii_digit())
                })
            })
        })
        .map(|e| sort_key(&e))
        .collect();
    children.sort();
    let Some((_, _, first)) = children.into_iter().next() else {
        w.push(
            dax.path(),
            "no device-dax instance (dax<R>.<M>) in the namespace's dax device: it has no /dev/dax character device",
        );
        return;
    };
    ns.dax_driver = dax.link_basename(&format!("{first}/driver"), w);
    ns.devpath = Some(format!("/dev/{first}"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    fn put(root: &Path, rel: &str, content: &str) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }

    fn link(root: &Path, rel: &str, target: &str) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        symlink(target, path).unwrap();
    }

    const REGION: &str = "sys/devices/ndbus0/region0";

    /// A device-dax namespace `namespace0.<n>` named `name` with its dax device.
    fn devdax(r: &Path, n: u32, name: &str) {
        let ns = format!("{REGION}/namespace0.{n}");
        put(r, &format!("{ns}/devtype"), "nd_namespace_pmem\n");
        put(r, &format!("{ns}/alt_name"), &format!("{name}\n"));
        put(r, &format!("{ns}/mode"), "dax\n");
        put(r, &format!("{ns}/holder"), &format!("dax0.{n}\n"));
        put(r, &format!("{ns}/size"), "4294967296\n");
        put(r, &format!("{ns}/numa_node"), "0\n");
        link(
            r,
            &format!("{ns}/driver"),
            "../../../bus/nd/drivers/nd_pmem",
        );
        let dax = format!("{REGION}/dax0.{n}");
        put(r, &format!("{dax}/size"), "4292870144\n");
        put(r, &format!("{dax}/dax_region/align"), "2097152\n");
        put(r, &format!("{dax}/dax0.{n}/dev"), "252:0\n");
        link(
            r,
            &format!("{dax}/dax0.{n}/driver"),
            "../../../../bus/dax/drivers/device_dax",
        );
        link(
            r,
            &format!("sys/bus/nd/devices/namespace0.{n}"),
            &format!("../../../devices/ndbus0/region0/namespace0.{n}"),
        );
        link(
            r,
            &format!("sys/bus/nd/devices/dax0.{n}"),
            &format!("../../../devices/ndbus0/region0/dax0.{n}"),
        );
    }

    fn probe(r: &Path) -> (Vec<PmemNamespace>, Vec<crate::Warning>) {
        let mut w = Warnings::new();
        let out = probe_pmem(&HostRoot::under(r), &mut w);
        (out, w.into_vec())
    }

    #[test]
    fn devdax_namespaces_show_novas_size_align_and_devpath() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        devdax(r, 1, "ns_1");
        devdax(r, 0, "ns_0");
        let (got, w) = probe(r);
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(
            got[0],
            PmemNamespace {
                dev: "namespace0.0".into(),
                name: Some("ns_0".into()),
                mode: Some("devdax".into()),
                enabled: true,
                size: Some(4292870144),
                align: Some(2097152),
                devpath: Some("/dev/dax0.0".into()),
                dax_driver: Some("device_dax".into()),
                numa_node: Some(0),
                uuid: None,
            }
        );
        assert_eq!(got[1].devpath.as_deref(), Some("/dev/dax0.1"));
        assert!(got.iter().all(PmemNamespace::is_usable_devdax));
    }

    #[test]
    fn other_modes_seeds_and_unnamed_namespaces_are_listed_as_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        let fs = "sys/devices/ndbus0/region1/namespace1.0";
        put(r, &format!("{fs}/alt_name"), "fs_0\n");
        put(r, &format!("{fs}/mode"), "memory\n");
        put(r, &format!("{fs}/size"), "8589934592\n");
        link(
            r,
            &format!("{fs}/driver"),
            "../../../bus/nd/drivers/nd_pmem",
        );
        link(
            r,
            "sys/bus/nd/devices/namespace1.0",
            "../../../devices/ndbus0/region1/namespace1.0",
        );
        // The region's idle seed: size 0, no name.
        let seed = "sys/devices/ndbus0/region1/namespace1.1";
        put(r, &format!("{seed}/alt_name"), "\n");
        put(r, &format!("{seed}/mode"), "raw\n");
        put(r, &format!("{seed}/size"), "0\n");
        link(
            r,
            "sys/bus/nd/devices/namespace1.1",
            "../../../devices/ndbus0/region1/namespace1.1",
        );
        // namespace10.0 sorts after namespace1.0.
        let late = "sys/devices/ndbus0/region10/namespace10.0";
        put(r, &format!("{late}/mode"), "dax\n");
        put(r, &format!("{late}/size"), "1073741824\n");
        link(
            r,
            "sys/bus/nd/devices/namespace10.0",
            "../../../devices/ndbus0/region10/namespace10.0",
        );
        devdax(r, 0, "ns_0");
        let (got, w) = probe(r);
        assert!(w.is_empty(), "{w:?}");
        let devs: Vec<&str> = got.iter().map(|n| n.dev.as_str()).collect();
        assert_eq!(devs, ["namespace0.0", "namespace1.0", "namespace10.0"]);
        assert_eq!(got[1].mode.as_deref(), Some("fsdax"));
        assert_eq!(got[1].size, Some(8589934592));
        assert!(!got[1].is_usable_devdax());
        // Not bound to a driver: listed, never usable, its dax device not looked for.
        assert!(!got[2].enabled && got[2].name.is_none() && !got[2].is_usable_devdax());
    }

    #[test]
    fn a_holder_without_a_dax_instance_or_odd_values_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        devdax(r, 0, "ns_0");
        fs::remove_dir_all(r.join(REGION).join("dax0.0/dax0.0")).unwrap();
        put(r, &format!("{REGION}/dax0.0/dax_region/align"), "huge\n");
        let (got, w) = probe(r);
        assert_eq!((got[0].devpath.as_ref(), got[0].align), (None, None));
        assert!(!got[0].is_usable_devdax());
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].message.contains("\"huge\""), "{w:?}");
        assert!(w[1].message.contains("no device-dax instance"), "{w:?}");
        // A holder that would lead out of the bus directory is not followed.
        put(r, &format!("{REGION}/namespace0.0/holder"), "../../etc\n");
        let (_, w) = probe(r);
        assert!(w[0].message.contains("not a dax device name"), "{w:?}");
    }

    #[test]
    fn no_nd_bus_is_no_namespaces() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("sys")).unwrap();
        assert_eq!(probe(dir.path()), (Vec::new(), Vec::new()));
    }
}
