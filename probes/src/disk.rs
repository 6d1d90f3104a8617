//! Disk probe: the filesystem that holds instance disks (capacity and free space, as Nova's
//! `local_gb`) and the host's block devices.
//!
//! In: `statvfs(instances_path)` (a real path on this host, not under the probe root: the
//! instances directory is where guests' disks will live), `sys/block/<dev>/{size,removable,ro,
//! queue/rotational,queue/logical_block_size,device/model}`. Out: [`DiskInfo`].
//!
//! `size` is always in 512-byte sectors whatever the device's block size.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::read::{link_basename, list_dir, parse_int, read_optional, Warnings};
use crate::HostRoot;

const GIB: u64 = 1024 * 1024 * 1024;

/// Disk inventory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct DiskInfo {
    /// The filesystem holding the instances path; null when not probed or unreadable.
    pub instances: Option<InstancesFilesystem>,
    /// Block devices under `sys/block`, sorted by name.
    pub block_devices: Vec<BlockDevice>,
}

/// Capacity of the filesystem that holds instance disks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct InstancesFilesystem {
    /// The configured instances path.
    pub path: String,
    /// The path actually measured: the instances path, or its nearest existing ancestor when it
    /// does not exist yet.
    pub measured_path: String,
    /// Filesystem size in whole GiB, rounded down (Nova's `local_gb`).
    pub total_gb: u64,
    /// Space available to unprivileged users in whole GiB, rounded down (`f_bavail`).
    pub free_gb: u64,
    /// Used space in whole GiB, rounded down (`f_blocks - f_bfree`).
    pub used_gb: u64,
    /// Exact size in bytes.
    pub total_bytes: u64,
    /// Exact available bytes.
    pub free_bytes: u64,
}

/// One block device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct BlockDevice {
    /// Kernel name (`nvme0n1`, `sda`, `vda`).
    pub name: String,
    /// Size in 512-byte sectors.
    pub size_sectors: u64,
    /// Size in bytes (`size_sectors * 512`).
    pub size_bytes: u64,
    /// Spinning disk; null when unknown.
    pub rotational: Option<bool>,
    /// Removable media.
    pub removable: Option<bool>,
    /// Read-only.
    pub read_only: Option<bool>,
    /// Logical block size in bytes.
    pub logical_block_size: Option<u64>,
    /// Model string from the device, when it has one.
    pub model: Option<String>,
    /// PCI function of the controller, taken from the device's sysfs path.
    pub pci_address: Option<String>,
    /// Driver of the underlying device (`device/driver` link), when present.
    pub driver: Option<String>,
}

/// Options for the disk probe.
#[derive(Debug, Clone, Default)]
pub struct DiskOptions {
    /// Where instance disks live; `None` skips the filesystem measurement.
    pub instances_path: Option<PathBuf>,
    /// Also list `loop*`, `ram*` and `zram*` devices.
    pub include_virtual: bool,
}

/// Reads the disk inventory.
pub fn probe_disks(root: &HostRoot, opts: &DiskOptions, w: &mut Warnings) -> DiskInfo {
    let instances = opts
        .instances_path
        .as_deref()
        .and_then(|p| measure_instances_fs(p, w));
    DiskInfo {
        instances,
        block_devices: probe_block_devices(root, opts.include_virtual, w),
    }
}

/// statvfs of the instances path, or of its nearest existing ancestor.
pub fn measure_instances_fs(path: &Path, w: &mut Warnings) -> Option<InstancesFilesystem> {
    let mut measured = path.to_path_buf();
    while !measured.exists() {
        match measured.parent() {
            Some(parent) => measured = parent.to_path_buf(),
            None => {
                w.push(path, "no existing ancestor: instances filesystem unknown");
                return None;
            }
        }
    }
    let st = match nix::sys::statvfs::statvfs(&measured) {
        Ok(st) => st,
        Err(e) => {
            w.push(
                &measured,
                format!("statvfs failed: {e}: instances filesystem unknown"),
            );
            return None;
        }
    };
    let frsize = st.fragment_size() as u64;
    let total_bytes = (st.blocks() as u64).saturating_mul(frsize);
    let free_bytes = (st.blocks_available() as u64).saturating_mul(frsize);
    let used_bytes = (st.blocks() as u64)
        .saturating_sub(st.blocks_free() as u64)
        .saturating_mul(frsize);
    Some(InstancesFilesystem {
        path: path.display().to_string(),
        measured_path: measured.display().to_string(),
        total_gb: total_bytes / GIB,
        free_gb: free_bytes / GIB,
        used_gb: used_bytes / GIB,
        total_bytes,
        free_bytes,
    })
}

/// True for device names skipped unless asked for: loop, RAM and compressed-RAM devices.
pub fn is_virtual_block_device(name: &str) -> bool {
    ["loop", "ram", "zram"].iter().any(|p| {
        name.strip_prefix(p)
            .is_some_and(|rest| rest.chars().all(|c| c.is_ascii_digit()))
    })
}

fn probe_block_devices(
    root: &HostRoot,
    include_virtual: bool,
    w: &mut Warnings,
) -> Vec<BlockDevice> {
    let block = root.sys_path("block");
    let Some(names) = list_dir(&block, w) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for name in names {
        if !include_virtual && is_virtual_block_device(&name) {
            continue;
        }
        let dir = block.join(&name);
        let size_path = dir.join("size");
        let Some(raw) = read_optional(&size_path, w) else {
            w.push(&size_path, "file is missing: block device skipped");
            continue;
        };
        let Some(size_sectors) =
            parse_int::<u64>(&raw, &size_path, "a size in 512-byte sectors", w)
        else {
            continue;
        };
        let flag = |rel: &str, w: &mut Warnings| -> Option<bool> {
            let path = dir.join(rel);
            let raw = read_optional(&path, w)?;
            match raw.as_str() {
                "0" => Some(false),
                "1" => Some(true),
                _ => {
                    w.push(
                        &path,
                        format!("value {} is not 0 or 1", crate::read::quoted(&raw)),
                    );
                    None
                }
            }
        };
        let rotational = flag("queue/rotational", w);
        let removable = flag("removable", w);
        let read_only = flag("ro", w);
        let lbs_path = dir.join("queue/logical_block_size");
        let logical_block_size = read_optional(&lbs_path, w)
            .and_then(|raw| parse_int(&raw, &lbs_path, "a block size in bytes", w));
        let model = read_optional(&dir.join("device/model"), w).filter(|m| !m.is_empty());
        let driver = link_basename(&dir.join("device/driver"), w);
        // sys/block/<dev> links to ../devices/pci0000:00/0000:00:05.0/virtio2/block/vda: the last
        // PCI address in the target is the controller.
        let pci_address = std::fs::read_link(&dir).ok().and_then(|t| {
            t.iter()
                .rev()
                .filter_map(|c| c.to_str())
                .find(|c| crate::pci::PciAddress::parse(c).is_some())
                .map(str::to_string)
        });
        out.push(BlockDevice {
            name,
            size_sectors,
            size_bytes: size_sectors.saturating_mul(512),
            rotational,
            removable,
            read_only,
            logical_block_size,
            model,
            pci_address,
            driver,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_devices_are_recognised_by_name() {
        assert!(is_virtual_block_device("loop0"));
        assert!(is_virtual_block_device("zram12"));
        assert!(is_virtual_block_device("ram3"));
        assert!(!is_virtual_block_device("vda"));
        assert!(!is_virtual_block_device("loopy"));
        assert!(!is_virtual_block_device("nvme0n1"));
    }

    #[test]
    fn instances_path_falls_back_to_an_existing_ancestor() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Warnings::new();
        let fs = measure_instances_fs(&dir.path().join("not/yet/there"), &mut w).unwrap();
        assert_eq!(fs.measured_path, dir.path().display().to_string());
        assert!(fs.total_bytes > 0);
        assert!(fs.free_bytes <= fs.total_bytes);
        assert_eq!(fs.total_gb, fs.total_bytes / GIB);
        assert!(w.is_empty());
    }

    #[test]
    fn block_devices_with_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        let b = dir.path().join("sys/block");
        std::fs::create_dir_all(b.join("vda/queue")).unwrap();
        std::fs::write(b.join("vda/size"), "2048\n").unwrap();
        std::fs::write(b.join("vda/queue/rotational"), "maybe\n").unwrap();
        std::fs::create_dir_all(b.join("sdb")).unwrap();
        std::fs::write(b.join("sdb/size"), "lots\n").unwrap();
        std::fs::create_dir_all(b.join("loop0")).unwrap();
        let mut w = Warnings::new();
        let disks = probe_disks(
            &HostRoot::under(dir.path()),
            &DiskOptions::default(),
            &mut w,
        );
        assert_eq!(disks.block_devices.len(), 1);
        assert_eq!(disks.block_devices[0].size_bytes, 1024 * 1024);
        assert_eq!(disks.block_devices[0].rotational, None);
        assert_eq!(w.len(), 2, "{w:?}");
    }
}
