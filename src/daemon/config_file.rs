//! Loading the configuration file with the command line's overrides on top, for `--once`,
//! `--check-config` and the daemon (at start and on every SIGHUP).
//!
//! In: the `--config` path (else `/etc/rtrack/rtrack.toml` when it exists, else the built-in
//! defaults), the command line's [`Overrides`], and systemd's `STATE_DIRECTORY` and
//! `RUNTIME_DIRECTORY`. Out: a [`LoadedConfig`] (the file's path, the [`ValidConfig`] with the
//! overrides applied, the raw TOML for the reload diff) or a [`ConfigError`]; and the state
//! directory and socket paths.

use std::path::{Path, PathBuf};

use crate::config::{Config, ConfigError, ValidConfig};
use crate::probes::HostRoot;

/// Where the configuration lives by default (read when present).
pub const DEFAULT_CONFIG: &str = "/etc/rtrack/rtrack.toml";

/// Command-line values that win over the file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--root`: sysfs is DIR/sys, procfs DIR/proc.
    pub root: Option<PathBuf>,
    /// `--sysfs`: the sysfs mount point; wins over `--root`.
    pub sysfs: Option<PathBuf>,
    /// `--procfs`: the procfs mount point; wins over `--root`.
    pub procfs: Option<PathBuf>,
    /// `--state-dir`: the state directory (compute node uuid, database).
    pub state_dir: Option<PathBuf>,
}

/// A loaded configuration.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    /// The file read, if any (`None`: built-in defaults).
    pub path: Option<PathBuf>,
    /// Checked values, overrides applied.
    pub valid: ValidConfig,
    /// The file as TOML (for diffs on reload); an empty table without a file.
    pub raw: toml::Value,
}

/// Reads `path` (or the default file when it exists, else the built-in defaults) and applies
/// `overrides`.
pub fn load(path: Option<&Path>, overrides: &Overrides) -> Result<LoadedConfig, ConfigError> {
    let chosen = match path {
        Some(p) => Some(p.to_path_buf()),
        None => Some(PathBuf::from(DEFAULT_CONFIG)).filter(|p| p.exists()),
    };
    let (mut valid, raw) = match &chosen {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                file: p.clone(),
                source,
            })?;
            let config = Config::parse(&text, p)?;
            // Parsed twice: typed for use, untyped for the key-by-key diff on reload.
            let raw: toml::Value = toml::from_str(&text)
                .map_err(|e: toml::de::Error| crate::config::syntax_error(&text, p, &e))?;
            // One validation for startup, SIGHUP and --check-config, [placement] and
            // [upstream.http] included.
            let valid = config.validate(p)?;
            (valid, raw)
        }
        None => (
            ValidConfig::defaults(),
            toml::Value::Table(toml::Table::new()),
        ),
    };
    if let Some(root) = &overrides.root {
        valid.host.probe_root = HostRoot::under(root);
    }
    if let Some(sys) = &overrides.sysfs {
        valid.host.probe_root.sys = sys.clone();
    }
    if let Some(p) = &overrides.procfs {
        valid.host.probe_root.proc = p.clone();
    }
    if let Some(s) = &overrides.state_dir {
        valid.host.state_dir = Some(s.clone());
    }
    // Read with the file, so that startup, SIGHUP and --check-config see the same files.
    valid.provider_configs =
        crate::config::provider_yaml::load_dir(&valid.provider_config_location)?;
    Ok(LoadedConfig {
        path: chosen,
        valid,
        raw,
    })
}

/// A directory systemd passes in `var` (`StateDirectory=`, `RuntimeDirectory=`). It may pass
/// several, colon-separated: the first is ours.
fn systemd_directory(var: &str) -> Option<PathBuf> {
    let v = std::env::var_os(var)?;
    let first = v.to_str()?.split(':').next()?;
    (!first.is_empty()).then(|| PathBuf::from(first))
}

/// The state directory: configured (or `--state-dir`), else `$STATE_DIRECTORY` (systemd's
/// `StateDirectory=`), else `/var/lib/rtrack`.
pub fn state_dir(cfg: &ValidConfig) -> PathBuf {
    cfg.host
        .state_dir
        .clone()
        .or_else(|| systemd_directory("STATE_DIRECTORY"))
        .unwrap_or_else(|| PathBuf::from("/var/lib/rtrack"))
}

/// The API socket: configured, else `$RUNTIME_DIRECTORY/rtrack.sock`, else
/// `/run/rtrack/rtrack.sock`.
pub fn socket_path(cfg: &ValidConfig) -> PathBuf {
    cfg.api.socket.clone().unwrap_or_else(|| {
        systemd_directory("RUNTIME_DIRECTORY")
            .map(|d| d.join("rtrack.sock"))
            .unwrap_or_else(|| PathBuf::from("/run/rtrack/rtrack.sock"))
    })
}

/// What the configuration names that the probed host does not have (CPU sets naming CPUs that
/// are not online, `reserved_huge_pages` for nodes or page sizes it lacks, PMEM namespaces), one
/// line per key with the file: startup and `--check-config` refuse such a file, SIGHUP keeps the
/// old one. What the host may still gain (mdev types and parents, which appear when a vendor
/// driver loads) is not refused: those lines come back as warnings, to be logged.
pub fn check_against_host(
    loaded: &LoadedConfig,
    host: &crate::probes::HostInventory,
) -> Result<Vec<String>, String> {
    let file = loaded
        .path
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "(built-in defaults)".into());
    let lines = |list: Vec<(String, String)>| -> Vec<String> {
        list.iter()
            .map(|(key, why)| format!("{file}: {key}: {why}"))
            .collect()
    };
    let mut problems = crate::tracker::numa::host::config_problems(host, &loaded.valid.resources);
    problems.extend(crate::pci_policy::spec::remote_managed_problems(
        &loaded.valid.pci.device_specs,
        &host.pci_devices,
    ));
    problems.extend(crate::config::neutron::host_problems(
        &loaded.valid.network_affinity,
        host,
    ));
    problems.extend(crate::tracker::nested::pmem::host_problems(
        host,
        &loaded.valid.mdev.pmem,
    ));
    if !problems.is_empty() {
        return Err(lines(problems).join("\n"));
    }
    Ok(lines(crate::tracker::nested::host_mismatches(
        host,
        &loaded.valid.mdev,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_win_and_the_raw_table_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rtrack.toml");
        std::fs::write(
            &p,
            "[host]\nroot = \"/srv/a\"\nstate_dir = \"/srv/state\"\n[resources]\ncpu_allocation_ratio = 2.0\n",
        )
        .unwrap();
        let l = load(Some(&p), &Overrides::default()).unwrap();
        assert_eq!(l.valid.host.probe_root.sys, PathBuf::from("/srv/a/sys"));
        assert_eq!(state_dir(&l.valid), PathBuf::from("/srv/state"));
        assert_eq!(
            l.raw["resources"]["cpu_allocation_ratio"].as_float(),
            Some(2.0)
        );
        let l = load(
            Some(&p),
            &Overrides {
                root: Some("/srv/b".into()),
                state_dir: Some("/tmp/s".into()),
                ..Overrides::default()
            },
        )
        .unwrap();
        assert_eq!(l.valid.host.probe_root.proc, PathBuf::from("/srv/b/proc"));
        assert_eq!(state_dir(&l.valid), PathBuf::from("/tmp/s"));
    }

    #[test]
    fn a_missing_named_file_is_an_error_naming_it() {
        let e = load(
            Some(Path::new("/nonexistent/rtrack.toml")),
            &Overrides::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("/nonexistent/rtrack.toml"), "{e}");
    }
}
