//! Mediated devices (vGPUs and other mdevs): the parents that can create them, the types each
//! parent offers, and the mediated devices that exist.
//!
//! In: `sys/class/mdev_bus/<parent>/mdev_supported_types/<type>/{name,device_api,
//! available_instances,description}` and `sys/bus/mdev/devices/<uuid>` (its `mdev_type` link
//! names the type, its link target's parent directory is the parent device). Out:
//! [`MediatedDevices`], parents and devices sorted, with a warning for each missing or odd file.
//!
//! These are the files libvirt reads for its `mdev_types` and `mdev` node devices, which is where
//! Nova's libvirt driver gets them. A parent is any device the kernel lists under `mdev_bus`:
//! a GPU's PCI function, each VF of an SR-IOV vGPU card (every VF is its own parent, as in Nova),
//! an s390 subchannel, or a virtual device such as `mtty`. A type whose `available_instances`
//! cannot be read is kept with `null` (it offers nothing that can be counted on).

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::read::{list_dir, parse_int, quoted, SysDir, Warnings};
use crate::HostRoot;

/// What the host offers for mediated devices.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct MediatedDevices {
    /// Devices that can create mediated devices, sorted by address.
    pub parents: Vec<MdevParent>,
    /// Mediated devices that exist, sorted by uuid.
    pub devices: Vec<MdevDevice>,
}

/// A device that can create mediated devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct MdevParent {
    /// Its name under `mdev_bus`: a PCI address (`0000:84:00.0`) for GPUs and their VFs.
    pub address: String,
    /// The types it offers, sorted by type id.
    pub types: Vec<MdevType>,
}

/// One type a parent offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct MdevType {
    /// The type id, the directory name (`nvidia-35`, `i915-GVTg_V5_4`).
    #[serde(rename = "type")]
    pub type_id: String,
    /// Human name (`GRID M60-0B`); optional in the kernel's interface.
    pub name: Option<String>,
    /// The API the device offers (`vfio-pci`, `vfio-ccw`, `vfio-ap`).
    pub device_api: Option<String>,
    /// How many more devices of this type the parent can create now; null when unreadable.
    pub available_instances: Option<u64>,
    /// Free text from the driver (frame buffer size, heads, ...); optional.
    pub description: Option<String>,
}

/// A mediated device that exists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct MdevDevice {
    /// Its uuid (the directory name under `sys/bus/mdev/devices`), lowercase.
    pub uuid: String,
    /// The parent's address; null when the device's link does not show it.
    pub parent: Option<String>,
    /// Its type id; null when `mdev_type` is missing or does not point at a type its parent
    /// offers.
    #[serde(rename = "type")]
    pub type_id: Option<String>,
}

impl MediatedDevices {
    /// The parent named `address`.
    pub fn parent(&self, address: &str) -> Option<&MdevParent> {
        self.parents.iter().find(|p| p.address == address)
    }
}

impl MdevParent {
    /// The type `type_id` on this parent.
    pub fn offered(&self, type_id: &str) -> Option<&MdevType> {
        self.types.iter().find(|t| t.type_id == type_id)
    }
}

/// Reads the mdev parents and devices. A host without `mdev_bus` has none (no warning).
pub fn probe_mdevs(root: &HostRoot, w: &mut Warnings) -> MediatedDevices {
    let parents = probe_parents(root, w);
    let devices = probe_devices(root, &parents, w);
    MediatedDevices { parents, devices }
}

fn probe_parents(root: &HostRoot, w: &mut Warnings) -> Vec<MdevParent> {
    let bus = root.sys_path("class/mdev_bus");
    let Some(names) = list_dir(&bus, w) else {
        return Vec::new();
    };
    let mut parents = Vec::new();
    for name in names {
        let types_dir = bus.join(&name).join("mdev_supported_types");
        let Some(type_ids) = list_dir(&types_dir, w) else {
            w.push(
                &types_dir,
                "directory is missing: a device under mdev_bus offers its types here; parent skipped",
            );
            continue;
        };
        let types = type_ids
            .into_iter()
            .filter_map(|id| probe_type(&types_dir, id, w))
            .collect();
        parents.push(MdevParent {
            address: name,
            types,
        });
    }
    parents
}

fn probe_type(types_dir: &Path, type_id: String, w: &mut Warnings) -> Option<MdevType> {
    let dir = SysDir::open_unlisted(&types_dir.join(&type_id), w)?;
    let available_instances = match dir.read_optional("available_instances", w) {
        Some(raw) => parse_int::<u64>(
            &raw,
            &dir.join("available_instances"),
            "a count of devices that can still be created",
            w,
        ),
        None => {
            w.push(
                &dir.join("available_instances"),
                "file is missing: the type's free capacity is unknown and counted as none",
            );
            None
        }
    };
    let text = |name: &str, w: &mut Warnings| dir.read_optional(name, w).filter(|s| !s.is_empty());
    Some(MdevType {
        name: text("name", w),
        device_api: text("device_api", w),
        available_instances,
        description: text("description", w),
        type_id,
    })
}

fn probe_devices(root: &HostRoot, parents: &[MdevParent], w: &mut Warnings) -> Vec<MdevDevice> {
    let dir = root.sys_path("bus/mdev/devices");
    let Some(names) = list_dir(&dir, w) else {
        return Vec::new();
    };
    let Some(anchor) = SysDir::open_unlisted(&dir, w) else {
        return Vec::new();
    };
    let mut devices = Vec::new();
    for name in names {
        let Some(uuid) = normalized_uuid(&name) else {
            w.push(
                &dir.join(&name),
                "name is not a uuid like 83b8f4f2-509f-382f-3c1e-e6bfe0fa1001: entry skipped",
            );
            continue;
        };
        let parent = anchor
            .link_target(&name)
            .and_then(|target| parent_of_link(&target));
        if parent.is_none() {
            w.push(
                &dir.join(&name),
                "expected a link into the parent device's directory: the parent is unknown",
            );
        }
        let type_id = device_type(&dir.join(&name), parent.as_deref(), parents, w);
        devices.push(MdevDevice {
            uuid,
            parent,
            type_id,
        });
    }
    devices.sort_by(|a, b| a.uuid.cmp(&b.uuid));
    devices
}

/// The type of the device at `dir`: the basename of its `mdev_type` link, when its parent offers
/// that type (a link to a type that is not there is dangling: the type is unknown).
fn device_type(
    dir: &Path,
    parent: Option<&str>,
    parents: &[MdevParent],
    w: &mut Warnings,
) -> Option<String> {
    let link = dir.join("mdev_type");
    let Some(dev) = SysDir::open_unlisted(dir, w) else {
        w.push(dir, "expected a device directory: the type is unknown");
        return None;
    };
    let Some(type_id) = dev.link_basename("mdev_type", w) else {
        w.push(
            &link,
            "link is missing: expected mdev_type -> the parent's mdev_supported_types/<type>",
        );
        return None;
    };
    let offered = parent
        .and_then(|p| parents.iter().find(|x| x.address == p))
        .is_some_and(|p| p.offered(&type_id).is_some());
    if !offered {
        w.push(
            &link,
            format!(
                "link points at type {} that the parent {} does not offer (dangling): the type is unknown",
                quoted(&type_id),
                parent.map(quoted).unwrap_or_else(|| "(unknown)".to_string()),
            ),
        );
        return None;
    }
    Some(type_id)
}

/// The directory holding `target`'s last component: the parent device of an mdev link such as
/// `../../../devices/pci0000:80/0000:80:03.0/0000:84:00.0/<uuid>`.
fn parent_of_link(target: &Path) -> Option<String> {
    let parent: PathBuf = target.parent()?.to_path_buf();
    let name = parent.file_name()?.to_string_lossy().into_owned();
    (!name.is_empty() && name != ".." && name != ".").then_some(name)
}

/// `name` as a lowercase uuid (8-4-4-4-12 hex digits), if it is one.
pub fn normalized_uuid(name: &str) -> Option<String> {
    let groups: Vec<&str> = name.split('-').collect();
    let lens = [8, 4, 4, 4, 12];
    let ok = groups.len() == 5
        && groups
            .iter()
            .zip(lens)
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()));
    ok.then(|| name.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    fn put(path: &Path, content: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }

    /// A GPU at 0000:84:00.0 with `nvidia-35` (16 free) and `nvidia-36` (name missing), and one
    /// mdev of `nvidia-35`.
    fn gpu(root: &Path) -> PathBuf {
        let sys = root.join("sys");
        let gpu = sys.join("devices/pci0000:80/0000:80:03.0/0000:84:00.0");
        let t35 = gpu.join("mdev_supported_types/nvidia-35");
        put(&t35.join("name"), "GRID M60-0B\n");
        put(&t35.join("device_api"), "vfio-pci\n");
        put(&t35.join("available_instances"), "15\n");
        put(&t35.join("description"), "num_heads=2, frl_config=45\n");
        let t36 = gpu.join("mdev_supported_types/nvidia-36");
        put(&t36.join("device_api"), "vfio-pci\n");
        put(&t36.join("available_instances"), "0\n");
        fs::create_dir_all(sys.join("class/mdev_bus")).unwrap();
        symlink(
            "../../devices/pci0000:80/0000:80:03.0/0000:84:00.0",
            sys.join("class/mdev_bus/0000:84:00.0"),
        )
        .unwrap();
        let mdev = gpu.join("83b8f4f2-509f-382f-3c1e-e6bfe0fa1001");
        fs::create_dir_all(&mdev).unwrap();
        symlink("../mdev_supported_types/nvidia-35", mdev.join("mdev_type")).unwrap();
        fs::create_dir_all(sys.join("bus/mdev/devices")).unwrap();
        symlink(
            "../../../devices/pci0000:80/0000:80:03.0/0000:84:00.0/83b8f4f2-509f-382f-3c1e-e6bfe0fa1001",
            sys.join("bus/mdev/devices/83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"),
        )
        .unwrap();
        gpu
    }

    #[test]
    fn parents_types_and_devices_are_read() {
        let dir = tempfile::tempdir().unwrap();
        gpu(dir.path());
        let mut w = Warnings::new();
        let m = probe_mdevs(&HostRoot::under(dir.path()), &mut w);
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(m.parents.len(), 1);
        let p = &m.parents[0];
        assert_eq!(p.address, "0000:84:00.0");
        let ids: Vec<&str> = p.types.iter().map(|t| t.type_id.as_str()).collect();
        assert_eq!(ids, ["nvidia-35", "nvidia-36"]);
        let t35 = p.offered("nvidia-35").unwrap();
        assert_eq!(t35.name.as_deref(), Some("GRID M60-0B"));
        assert_eq!(t35.device_api.as_deref(), Some("vfio-pci"));
        assert_eq!(t35.available_instances, Some(15));
        assert_eq!(p.offered("nvidia-36").unwrap().name, None);
        assert_eq!(
            m.devices,
            vec![MdevDevice {
                uuid: "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001".into(),
                parent: Some("0000:84:00.0".into()),
                type_id: Some("nvidia-35".into()),
            }]
        );
    }

    #[test]
    fn a_missing_count_is_unknown_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let gpu = gpu(dir.path());
        fs::remove_file(gpu.join("mdev_supported_types/nvidia-35/available_instances")).unwrap();
        put(
            &gpu.join("mdev_supported_types/nvidia-36/available_instances"),
            "lots\n",
        );
        let mut w = Warnings::new();
        let m = probe_mdevs(&HostRoot::under(dir.path()), &mut w);
        let p = &m.parents[0];
        assert_eq!(p.offered("nvidia-35").unwrap().available_instances, None);
        assert_eq!(p.offered("nvidia-36").unwrap().available_instances, None);
        let w = w.into_vec();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].path.ends_with("nvidia-35/available_instances"));
        assert!(w[0].message.contains("missing"), "{}", w[0].message);
        assert!(w[1].message.contains("\"lots\""), "{}", w[1].message);
    }

    #[test]
    fn a_dangling_type_link_leaves_the_device_with_no_type() {
        let dir = tempfile::tempdir().unwrap();
        let gpu = gpu(dir.path());
        let link = gpu.join("83b8f4f2-509f-382f-3c1e-e6bfe0fa1001/mdev_type");
        fs::remove_file(&link).unwrap();
        symlink("../mdev_supported_types/nvidia-99", &link).unwrap();
        let mut w = Warnings::new();
        let m = probe_mdevs(&HostRoot::under(dir.path()), &mut w);
        assert_eq!(m.devices[0].type_id, None);
        assert_eq!(m.devices[0].parent.as_deref(), Some("0000:84:00.0"));
        let w = w.into_vec();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].path.ends_with("mdev_type"));
        assert!(w[0].message.contains("\"nvidia-99\""), "{}", w[0].message);
    }

    #[test]
    fn odd_entries_are_skipped_with_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        gpu(dir.path());
        let sys = dir.path().join("sys");
        fs::create_dir_all(sys.join("bus/mdev/devices/not-a-uuid")).unwrap();
        fs::create_dir_all(sys.join("class/mdev_bus/0000:85:00.0")).unwrap();
        let mut w = Warnings::new();
        let m = probe_mdevs(&HostRoot::under(dir.path()), &mut w);
        assert_eq!(m.parents.len(), 1);
        assert_eq!(m.devices.len(), 1);
        let w = w.into_vec();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w
            .iter()
            .any(|x| x.path.ends_with("0000:85:00.0/mdev_supported_types")));
        assert!(w.iter().any(|x| x.path.ends_with("not-a-uuid")));
    }

    #[test]
    fn no_mdev_bus_is_no_parents_and_no_warning() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("sys")).unwrap();
        let mut w = Warnings::new();
        assert_eq!(
            probe_mdevs(&HostRoot::under(dir.path()), &mut w),
            MediatedDevices::default()
        );
        assert!(w.is_empty());
    }

    #[test]
    fn uuids_are_checked_and_lowercased() {
        assert_eq!(
            normalized_uuid("83B8F4F2-509F-382F-3C1E-E6BFE0FA1001").as_deref(),
            Some("83b8f4f2-509f-382f-3c1e-e6bfe0fa1001")
        );
        assert_eq!(normalized_uuid("83b8f4f2509f382f3c1ee6bfe0fa1001"), None);
        assert_eq!(
            normalized_uuid("83b8f4f2-509f-382f-3c1e-e6bfe0fa100g"),
            None
        );
    }
}
