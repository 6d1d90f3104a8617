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
}
