//! What changed between two configuration files, key by key, for the SIGHUP log line.
//!
//! In: the old and new files as parsed TOML (`toml::Value`). Out: one [`Change`] per dotted key
//! (arrays compared whole, secrets shown as `(hidden)`), and whether a key applies live on SIGHUP
//! ([`applies_live`]) or needs a restart.

use std::collections::BTreeMap;

/// Keys whose values are never shown.
const SECRET_KEYS: &[&str] = &[
    "placement.password",
    "placement.token",
    "placement.application_credential_secret",
];

/// One changed key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Dotted key, e.g. `resources.cpu_allocation_ratio`, or `pci.alias` for a whole array.
    pub key: String,
    /// Old value as TOML (`(unset)` if absent, `(hidden)` for secrets).
    pub old: String,
    /// New value.
    pub new: String,
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} -> {}", self.key, self.old, self.new)
    }
}

fn flatten(prefix: &str, v: &toml::Value, out: &mut BTreeMap<String, String>) {
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        // Arrays (device_spec, alias) compare as a whole.
        other => {
            out.insert(prefix.to_string(), other.to_string());
        }
    }
}

/// Keys that differ between `old` and `new` (parsed TOML documents).
pub fn diff(old: &toml::Value, new: &toml::Value) -> Vec<Change> {
    let mut a = BTreeMap::new();
    let mut b = BTreeMap::new();
    flatten("", old, &mut a);
    flatten("", new, &mut b);
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| {
            let show = |v: Option<&String>| match v {
                None => "(unset)".to_string(),
                Some(_) if SECRET_KEYS.contains(&k.as_str()) => "(hidden)".to_string(),
                Some(v) => v.clone(),
            };
            Change {
                key: k.clone(),
                old: show(a.get(k)),
                new: show(b.get(k)),
            }
        })
        .collect()
}

/// True for keys a running daemon applies on SIGHUP; the others need a restart.
pub fn applies_live(key: &str) -> bool {
    key.starts_with("resources.")
        || key.starts_with("pci.")
        || key.starts_with("audit.")
        || key.starts_with("placement.")
        || key.starts_with("upstream.")
        || key == "log.level"
        || key == "api.socket_group"
}

/// The configuration a reload puts in force: the new file's values of what [`applies_live`]
/// (`[resources]` with the provider config files, `[pci]`, `[audit]`, `[placement]`,
/// `[upstream]`, `log.level`, `api.socket_group`), the running ones of everything else, which
/// needs a restart (`[host]`, the rest of `[api]`, `[metrics]`, `log.format`, `[devices]`,
/// `[mdev.*]`, `[neutron*]`). Keep in step with [`applies_live`].
pub fn in_force_after_reload(
    running: &super::ValidConfig,
    new: &super::ValidConfig,
) -> super::ValidConfig {
    let mut v = running.clone();
    v.resources = new.resources.clone();
    v.provider_config_location = new.provider_config_location.clone();
    v.provider_configs = new.provider_configs.clone();
    v.pci = new.pci.clone();
    v.audit = new.audit;
    v.placement = new.placement.clone();
    v.placement_settings = new.placement_settings.clone();
    v.upstream_http = new.upstream_http.clone();
    v.http_push = new.http_push.clone();
    v.log.level = new.log.level.clone();
    v.api.socket_group = new.api.socket_group.clone();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> toml::Value {
        toml::from_str(s).unwrap()
    }

    #[test]
    fn changed_added_and_removed_keys_are_listed_with_secrets_hidden() {
        let old = t("[resources]\ncpu_allocation_ratio = 16.0\nreserved_host_cpus = 1\n[placement]\npassword = \"a\"\n");
        let new = t("[resources]\ncpu_allocation_ratio = 4.0\n[audit]\ninterval_s = 30\n[placement]\npassword = \"b\"\n");
        let d: Vec<String> = diff(&old, &new).iter().map(|c| c.to_string()).collect();
        assert_eq!(
            d,
            vec![
                "audit.interval_s: (unset) -> 30",
                "placement.password: (hidden) -> (hidden)",
                "resources.cpu_allocation_ratio: 16.0 -> 4.0",
                "resources.reserved_host_cpus: 1 -> (unset)",
            ]
        );
        assert!(diff(&old, &old).is_empty());
        assert!(applies_live("resources.cpu_allocation_ratio"));
        assert!(!applies_live("api.socket"));
    }

    #[test]
    fn a_reload_puts_in_force_what_applies_live_and_keeps_the_rest() {
        let parse = |text: &str| {
            let f = std::path::Path::new("r.toml");
            crate::config::Config::parse(text, f)
                .and_then(|c| c.validate(f))
                .unwrap()
        };
        let running = parse("[host]\nhypervisor_type = \"QEMU\"\n[resources]\ncpu_allocation_ratio = 4.0\n[log]\nformat = \"text\"\nlevel = \"info\"\n[api]\nmax_connections = 10\nsocket_group = \"a\"\n[devices]\nenabled_mdev_types = [\"nvidia-35\"]\n");
        let text = "[host]\nhypervisor_type = \"other\"\n[resources]\ncpu_allocation_ratio = 8.0\n[log]\nformat = \"json\"\nlevel = \"debug\"\n[api]\nmax_connections = 20\nsocket_group = \"b\"\n[audit]\ninterval_s = 7\n";
        let v = in_force_after_reload(&running, &parse(text));
        // Live.
        assert_eq!(v.resources.cpu_allocation_ratio, Some(8.0));
        assert_eq!(v.log.level, "debug");
        assert_eq!(v.api.socket_group, "b");
        assert_eq!(v.audit.interval_s, 7);
        // A restart's.
        assert_eq!(v.host.hypervisor_type, "QEMU");
        assert_eq!(v.log.format, running.log.format);
        assert_eq!(v.api.max_connections, 10);
        assert_eq!(v.mdev, running.mdev);
        for key in [
            "resources.x",
            "pci.x",
            "audit.x",
            "placement.x",
            "upstream.x",
            "log.level",
            "api.socket_group",
        ] {
            assert!(applies_live(key), "{key}");
        }
        for key in [
            "host.x",
            "api.socket",
            "metrics.x",
            "log.format",
            "devices.x",
            "mdev.x",
            "neutron.x",
        ] {
            assert!(!applies_live(key), "{key}");
        }
    }
}
