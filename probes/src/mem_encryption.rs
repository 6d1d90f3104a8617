//! Memory encryption: AMD SEV, SEV-ES and SEV-SNP as KVM offers them, and how many encrypted
//! guests the host can run.
//!
//! In: `sys/module/kvm_amd/parameters/{sev,sev_es,sev_snp}` (the files Nova's libvirt driver
//! reads), `sys/class/misc/sev` (the firmware device behind `/dev/sev`, outside the sysfs root
//! otherwise), and the `sev`/`sev_es` lines of the misc cgroup's `misc.capacity` (the number of
//! encryption ASIDs, which bounds the guests; libvirt reads the same from CPUID). Out:
//! [`MemoryEncryption`], each value null when the tree does not tell.
//!
//! "Unknown" and "no" differ: a tree with no `sys/module` at all (a captured snapshot) says
//! nothing, so every flag is null; a host whose `kvm_amd` is not loaded (an Intel host) has no
//! SEV, so the flags are false, and so is a flag whose parameter file the kernel does not have.

use std::path::Path;

use serde::Serialize;

use crate::read::{quoted, read_optional, read_text, ReadFailure, Warnings, SYSFS_CAP};
use crate::HostRoot;

/// What the kernel says about memory encryption.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct MemoryEncryption {
    /// KVM runs SEV guests (`kvm_amd` parameter `sev`).
    pub sev: Option<bool>,
    /// KVM runs SEV-ES guests (`sev_es`).
    pub sev_es: Option<bool>,
    /// KVM runs SEV-SNP guests (`sev_snp`); when on, Nova ignores SEV-ES.
    pub sev_snp: Option<bool>,
    /// The SEV firmware device exists (`sys/class/misc/sev`, i.e. `/dev/sev`); null when the tree has no
    /// `sys/class/misc`.
    pub sev_firmware: Option<bool>,
    /// Encryption contexts for SEV guests (`sev` in `misc.capacity`).
    pub sev_guests: Option<u64>,
    /// Encryption contexts for SEV-ES (and SEV-SNP) guests (`sev_es` in `misc.capacity`).
    pub sev_es_guests: Option<u64>,
}

/// Reads the memory encryption state.
pub fn probe_mem_encryption(root: &HostRoot, w: &mut Warnings) -> MemoryEncryption {
    let modules = root.sys_path("module");
    let params = root.sys_path("module/kvm_amd/parameters");
    let flag = |name: &str, w: &mut Warnings| -> Option<bool> {
        if !is_present(&modules) {
            return None;
        }
        let path = params.join(name);
        match read_optional(&path, w) {
            None if is_present(&path) => None,
            None => Some(false),
            Some(raw) => parse_param_bool(&raw, &path, w),
        }
    };
    let sev = flag("sev", w);
    let sev_es = flag("sev_es", w);
    let sev_snp = flag("sev_snp", w);
    let sev_firmware = is_present(&root.sys_path("class/misc"))
        .then(|| is_present(&root.sys_path("class/misc/sev")));
    let (sev_guests, sev_es_guests) = misc_capacity(root, w);
    MemoryEncryption {
        sev,
        sev_es,
        sev_snp,
        sev_firmware,
        sev_guests,
        sev_es_guests,
    }
}

/// Whether `path` exists, without following a final link (nothing outside the root is looked at).
fn is_present(path: &Path) -> bool {
    path.symlink_metadata().is_ok()
}

/// A kernel boolean parameter: `Y`/`N` as the kernel writes them, and `1`/`0` (integer
/// parameters on older kernels); Nova's `bool_from_string` words too.
fn parse_param_bool(raw: &str, path: &Path, w: &mut Warnings) -> Option<bool> {
    match raw.to_ascii_lowercase().as_str() {
        "y" | "1" | "yes" | "true" | "on" => Some(true),
        "n" | "0" | "no" | "false" | "off" => Some(false),
        _ => {
            w.push(
                path,
                format!("value {} is not a kernel boolean (Y or N)", quoted(raw)),
            );
            None
        }
    }
}

/// The `sev` and `sev_es` capacities of the misc cgroup controller (cgroup v2 root, else the
/// v1 `misc` hierarchy). Missing file or line: unknown, no warning (older kernels).
fn misc_capacity(root: &HostRoot, w: &mut Warnings) -> (Option<u64>, Option<u64>) {
    for rel in ["fs/cgroup/misc.capacity", "fs/cgroup/misc/misc.capacity"] {
        let path = root.sys_path(rel);
        match read_text(&path, SYSFS_CAP) {
            Ok(text) => return parse_misc_capacity(&text, &path, w),
            Err(ReadFailure::Missing) => continue,
            Err(e) => {
                w.push(&path, format!("file is {e}"));
                return (None, None);
            }
        }
    }
    (None, None)
}

fn parse_misc_capacity(text: &str, path: &Path, w: &mut Warnings) -> (Option<u64>, Option<u64>) {
    let mut sev = None;
    let mut sev_es = None;
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(key), Some(value)) = (fields.next(), fields.next()) else {
            continue;
        };
        let slot = match key {
            "sev" => &mut sev,
            "sev_es" => &mut sev_es,
            _ => continue,
        };
        match value.parse::<u64>() {
            Ok(n) => *slot = Some(n),
            Err(_) => w.push(
                path,
                format!(
                    "{key}: value {} is not a count of encryption contexts",
                    quoted(value)
                ),
            ),
        }
    }
    (sev, sev_es)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn put(root: &Path, rel: &str, content: &str) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }

    fn probe(root: &Path) -> (MemoryEncryption, Vec<crate::Warning>) {
        let mut w = Warnings::new();
        let m = probe_mem_encryption(&HostRoot::under(root), &mut w);
        (m, w.into_vec())
    }

    #[test]
    fn an_sev_host_shows_flags_firmware_and_contexts() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        put(r, "sys/module/kvm_amd/parameters/sev", "Y\n");
        put(r, "sys/module/kvm_amd/parameters/sev_es", "Y\n");
        put(r, "sys/module/kvm_amd/parameters/sev_snp", "N\n");
        put(r, "sys/class/misc/sev/dev", "10:124\n");
        put(r, "sys/fs/cgroup/misc.capacity", "sev 509\nsev_es 0\n");
        let (m, w) = probe(r);
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(
            m,
            MemoryEncryption {
                sev: Some(true),
                sev_es: Some(true),
                sev_snp: Some(false),
                sev_firmware: Some(true),
                sev_guests: Some(509),
                sev_es_guests: Some(0),
            }
        );
    }

    #[test]
    fn no_kvm_amd_is_no_and_no_sys_module_is_unknown() {
        let dir = tempfile::tempdir().unwrap();
        put(dir.path(), "sys/module/kvm_intel/parameters/nested", "Y\n");
        put(dir.path(), "sys/class/misc/tun/dev", "10:200\n");
        let (m, _) = probe(dir.path());
        assert_eq!(
            (m.sev, m.sev_es, m.sev_snp),
            (Some(false), Some(false), Some(false))
        );
        assert_eq!(m.sev_firmware, Some(false));
        let empty = tempfile::tempdir().unwrap();
        fs::create_dir_all(empty.path().join("sys")).unwrap();
        assert_eq!(probe(empty.path()).0, MemoryEncryption::default());
    }

    #[test]
    fn odd_values_are_unknown_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        put(r, "sys/module/kvm_amd/parameters/sev", "maybe\n");
        put(r, "sys/fs/cgroup/misc.capacity", "sev -1\nsev_es 4\n");
        let (m, w) = probe(r);
        assert_eq!(m.sev, None);
        assert_eq!(m.sev_es, Some(false));
        assert_eq!((m.sev_guests, m.sev_es_guests), (None, Some(4)));
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].path.ends_with("parameters/sev") && w[0].message.contains("\"maybe\""));
        assert!(w[1].path.ends_with("misc.capacity") && w[1].message.contains("\"-1\""));
    }

    #[test]
    fn integer_parameters_of_older_kernels_are_read() {
        let mut w = Warnings::new();
        let p = Path::new("sev");
        assert_eq!(parse_param_bool("1", p, &mut w), Some(true));
        assert_eq!(parse_param_bool("0", p, &mut w), Some(false));
        assert!(w.is_empty());
    }
}
