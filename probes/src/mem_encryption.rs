//! Memory encryption: AMD SEV, SEV-ES and SEV-SNP, and Intel TDX, as KVM offers them, and how
//! many encrypted guests the host can run.
//!
//! In: `sys/module/kvm_amd/parameters/{sev,sev_es,sev_snp}` (the files Nova's libvirt driver
//! reads), `sys/class/misc/sev` (the firmware device behind `/dev/sev`, outside the sysfs root
//! otherwise), `sys/module/kvm_intel/parameters/tdx` (KVM runs TD guests: what libvirt needs to
//! report TDX in its domain capabilities; the kernel sets it back to `N` when the TDX module
//! fails to come up), the `sev`/`sev_es`/`tdx` lines of the misc cgroup's `misc.capacity` (the
//! encryption ASIDs or TDX private KeyIDs, which bound the guests; Nova reads the `tdx` line
//! there), and the CPU flags (`tdx_host_platform`: the platform has TDX KeyIDs, a fact shown,
//! not a condition). Out: [`MemoryEncryption`], each value null when the tree does not tell.
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
    /// KVM runs Intel TDX guests (`kvm_intel` parameter `tdx`).
    #[serde(default)]
    pub tdx: Option<bool>,
    /// TDX guests the host can run at once (`tdx` in `misc.capacity`: its private KeyIDs).
    #[serde(default)]
    pub tdx_guests: Option<u64>,
    /// The CPU flags show `tdx_host_platform` (the platform has TDX KeyIDs); null when the CPU
    /// flags are unknown. `tdx_guest` would mean this is itself a TD guest.
    #[serde(default)]
    pub tdx_host_platform: Option<bool>,
}

/// The misc cgroup's capacities rtrack reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct MiscCapacity {
    sev: Option<u64>,
    sev_es: Option<u64>,
    tdx: Option<u64>,
}

/// Reads the memory encryption state. `cpu_flags` are the probed CPU flags (empty: unknown).
pub fn probe_mem_encryption(
    root: &HostRoot,
    cpu_flags: &[String],
    w: &mut Warnings,
) -> MemoryEncryption {
    let modules = root.sys_path("module");
    let flag = |module: &str, name: &str, w: &mut Warnings| -> Option<bool> {
        if !is_present(&modules) {
            return None;
        }
        let path = modules.join(module).join("parameters").join(name);
        match read_optional(&path, w) {
            None if is_present(&path) => None,
            None => Some(false),
            Some(raw) => parse_param_bool(&raw, &path, w),
        }
    };
    let sev = flag("kvm_amd", "sev", w);
    let sev_es = flag("kvm_amd", "sev_es", w);
    let sev_snp = flag("kvm_amd", "sev_snp", w);
    let tdx = flag("kvm_intel", "tdx", w);
    let sev_firmware = is_present(&root.sys_path("class/misc"))
        .then(|| is_present(&root.sys_path("class/misc/sev")));
    let misc = misc_capacity(root, w);
    let tdx_host_platform =
        (!cpu_flags.is_empty()).then(|| cpu_flags.iter().any(|f| f == "tdx_host_platform"));
    MemoryEncryption {
        sev,
        sev_es,
        sev_snp,
        sev_firmware,
        sev_guests: misc.sev,
        sev_es_guests: misc.sev_es,
        tdx,
        tdx_guests: misc.tdx,
        tdx_host_platform,
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

/// The `sev`, `sev_es` and `tdx` capacities of the misc cgroup controller (cgroup v2 root,
/// else the v1 `misc` hierarchy). Missing file or line: unknown, no warning (older kernels; the
/// kernel lists only resources with a capacity).
fn misc_capacity(root: &HostRoot, w: &mut Warnings) -> MiscCapacity {
    for rel in ["fs/cgroup/misc.capacity", "fs/cgroup/misc/misc.capacity"] {
        let path = root.sys_path(rel);
        match read_text(&path, SYSFS_CAP) {
            Ok(text) => return parse_misc_capacity(&text, &path, w),
            Err(ReadFailure::Missing) => continue,
            Err(e) => {
                w.push(&path, format!("file is {e}"));
                return MiscCapacity::default();
            }
        }
    }
    MiscCapacity::default()
}

fn parse_misc_capacity(text: &str, path: &Path, w: &mut Warnings) -> MiscCapacity {
    let mut out = MiscCapacity::default();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(key), Some(value)) = (fields.next(), fields.next()) else {
            continue;
        };
        let slot = match key {
            "sev" => &mut out.sev,
            "sev_es" => &mut out.sev_es,
            "tdx" => &mut out.tdx,
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
    out
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
        probe_with_flags(root, &[])
    }

    fn probe_with_flags(root: &Path, flags: &[&str]) -> (MemoryEncryption, Vec<crate::Warning>) {
        let mut w = Warnings::new();
        let flags: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
        let m = probe_mem_encryption(&HostRoot::under(root), &flags, &mut w);
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
                tdx: Some(false),
                tdx_guests: None,
                tdx_host_platform: None,
            }
        );
    }

    #[test]
    fn a_tdx_host_shows_the_parameter_its_keyids_and_the_platform_flag() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        put(r, "sys/module/kvm_intel/parameters/tdx", "Y\n");
        put(r, "sys/fs/cgroup/misc.capacity", "tdx 63\n");
        let (m, w) = probe_with_flags(r, &["tdx_host_platform", "vmx"]);
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(
            (m.tdx, m.tdx_guests, m.tdx_host_platform),
            (Some(true), Some(63), Some(true))
        );
        // No kvm_amd on an Intel host: SEV is off, not unknown.
        assert_eq!((m.sev, m.sev_guests), (Some(false), None));
        // TDX brought up and failed: the kernel writes N back.
        put(r, "sys/module/kvm_intel/parameters/tdx", "N\n");
        put(r, "sys/fs/cgroup/misc.capacity", "sev 0\n");
        let (m, _) = probe_with_flags(r, &["vmx"]);
        assert_eq!(
            (m.tdx, m.tdx_guests, m.tdx_host_platform),
            (Some(false), None, Some(false))
        );
    }

    #[test]
    fn a_tdx_line_that_is_not_a_count_is_unknown_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        put(r, "sys/fs/cgroup/misc/misc.capacity", "tdx lots\nsev 4\n");
        let (m, w) = probe(r);
        assert_eq!((m.tdx_guests, m.sev_guests), (None, Some(4)));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].message.starts_with("tdx: value \"lots\""), "{w:?}");
        // No sys/module at all: TDX is unknown, like SEV.
        assert_eq!(m.tdx, None);
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
