//! `[devices] pmem_namespaces`: which persistent memory namespaces are offered to guests as
//! virtual persistent memory (vPMEM), under which label. Nova's `[libvirt] pmem_namespaces`.
//!
//! In: the list as written (`["4GB:ns_0", "SMALL:ns_1|ns_2"]`; an item may also hold several
//! entries joined by commas, as Nova's option string does). Out: the [`PmemLabel`]s, or a
//! [`ConfigError`] with Nova's reason. Whether each namespace is on the host is checked against
//! the probe by the tracker (`nested::pmem::host_problems` there), as Nova checks at start.
//!
//! Nova's parse, kept exactly: each entry is split at its first `:` into the label and the
//! names, names at `|`, nothing trimmed inside an entry (oslo trims each list item); a label
//! names the resource class `CUSTOM_PMEM_NAMESPACE_<LABEL>`, normalised as os-resource-classes
//! does (runs of other characters become `_`, letters upper-cased), so two labels may share one.

use std::path::Path;

use super::ConfigError;

/// One label and the namespaces it offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmemLabel {
    /// The label as written (`4GB`), what `hw:pmem` names.
    pub label: String,
    /// Its class, `CUSTOM_PMEM_NAMESPACE_4GB`.
    pub class: String,
    /// The namespaces' names (their `alt_name`), in configuration order.
    pub names: Vec<String>,
}

/// os-resource-classes' `normalize_name("PMEM_NAMESPACE_" + label)`, Nova's class for a label.
pub fn pmem_class(label: &str) -> String {
    let mut out = String::from("CUSTOM_PMEM_NAMESPACE_");
    let mut in_run = false;
    for c in label.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_uppercase());
            in_run = false;
        } else if !in_run {
            out.push('_');
            in_run = true;
        }
    }
    out
}

/// Checks `[devices] pmem_namespaces` (Nova's host-independent reasons).
pub(super) fn validate(items: &[String], file: &Path) -> Result<Vec<PmemLabel>, ConfigError> {
    let err = |i: usize, entry: &str, reason: String| {
        ConfigError::Value {
        file: file.to_path_buf(),
        key: format!("devices.pmem_namespaces[{i}]"),
        value: crate::echo::quoted(entry),
        expected: format!(
            "The pmem_namespaces configuration is invalid: {reason} (expected LABEL:NAME or LABEL:NAME|NAME..., e.g. \"SMALL:ns_1|ns_2\", as Nova's [libvirt] pmem_namespaces)"
        ),
    }
    };
    let mut out: Vec<PmemLabel> = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        // oslo's ListOpt: split at commas, each item trimmed, empty items dropped.
        for entry in item.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let Some((label, names)) = entry.split_once(':') else {
                return Err(err(
                    i,
                    entry,
                    "The configuration doesn't follow the format".into(),
                ));
            };
            let class = pmem_class(label);
            if !crate::nova_syntax::is_custom_name(&class) {
                return Err(err(
                    i,
                    entry,
                    format!(
                        "label {} makes no resource class (255 characters at most)",
                        crate::echo::quoted(label)
                    ),
                ));
            }
            let mut these = Vec::new();
            for name in names.split('|') {
                if seen.contains(&name) {
                    return Err(err(
                        i,
                        entry,
                        format!("Duplicated PMEM namespace {name} configured"),
                    ));
                }
                seen.push(name);
                these.push(name.to_string());
            }
            out.push(PmemLabel {
                label: label.to_string(),
                class,
                names: these,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(items: &[&str]) -> Result<Vec<PmemLabel>, String> {
        let items: Vec<String> = items.iter().map(|s| s.to_string()).collect();
        validate(&items, Path::new("rtrack.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn labels_names_and_classes_are_novas() {
        let got = v(&["4GB:ns_0", "SMALL:ns_1|ns_2"]).unwrap();
        assert_eq!(
            got,
            [
                PmemLabel {
                    label: "4GB".into(),
                    class: "CUSTOM_PMEM_NAMESPACE_4GB".into(),
                    names: vec!["ns_0".into()],
                },
                PmemLabel {
                    label: "SMALL".into(),
                    class: "CUSTOM_PMEM_NAMESPACE_SMALL".into(),
                    names: vec!["ns_1".into(), "ns_2".into()],
                },
            ]
        );
        // Nova's option string pasted whole is the same list.
        assert_eq!(v(&["4GB:ns_0, SMALL:ns_1|ns_2"]).unwrap(), got);
        assert_eq!(pmem_class("262144MB"), "CUSTOM_PMEM_NAMESPACE_262144MB");
        assert_eq!(
            pmem_class("fast-big..one"),
            "CUSTOM_PMEM_NAMESPACE_FAST_BIG_ONE"
        );
        assert_eq!(pmem_class("small"), pmem_class("SMALL"));
    }

    #[test]
    fn novas_reasons_name_the_entry() {
        let e = v(&["4GB:ns_0", "SMALL"]).unwrap_err();
        assert!(
            e.starts_with("rtrack.toml: devices.pmem_namespaces[1] = \"SMALL\": The pmem_namespaces configuration is invalid: The configuration doesn't follow the format"),
            "{e}"
        );
        let e = v(&["4GB:ns_0", "SMALL:ns_1|ns_0"]).unwrap_err();
        assert!(
            e.contains("Duplicated PMEM namespace ns_0 configured"),
            "{e}"
        );
        // Names are not trimmed inside an entry, as in Nova: " ns_1" is another name.
        assert_eq!(v(&["A:ns_1| ns_1"]).unwrap()[0].names, ["ns_1", " ns_1"]);
        assert!(v(&[]).unwrap().is_empty());
    }
}
