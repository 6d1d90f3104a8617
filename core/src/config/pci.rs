//! `[pci] device_spec` and `[pci] alias` entries: TOML tables turned into string maps (Nova
//! stores every tag as a string; booleans become "true"/"false") and validated by the PCI
//! tracker's own rules, with the file and entry index in every message.
//!
//! In: the `[pci]` section as written ([`PciConfig`], its [`DeviceSpecConfig`] and
//! [`AliasConfig`] entries) and the file's path. Out: the [`PciSettings`] (the [`DeviceSpec`]s in
//! file order, the [`AliasTable`], `report_in_placement`), or a [`ConfigError`] naming
//! `pci.device_spec[i].key` or `pci.alias[i].key`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::pci_policy::alias::add_alias;
use crate::pci_policy::{AliasTable, DeviceSpec, SpecError};

use super::sections::DEFAULT_PCI_REPORT_IN_PLACEMENT;
use super::{ConfigError, PciConfig, PciSettings};

/// A device spec entry as written.
pub type DeviceSpecConfig = BTreeMap<String, toml::Value>;
/// An alias entry as written.
pub type AliasConfig = BTreeMap<String, toml::Value>;

fn at(file: &Path, section: &str, index: usize, e: SpecError) -> ConfigError {
    ConfigError::Value {
        file: file.to_path_buf(),
        key: format!("{section}[{index}].{}", e.key),
        value: e.value,
        expected: e.expected,
    }
}

/// A tag value as Nova's string: strings as they are, booleans as "true"/"false".
fn string_value(key: &str, v: &toml::Value) -> Result<String, SpecError> {
    match v {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        other => Err(SpecError {
            key: key.to_string(),
            value: other.to_string(),
            expected: "must be a string or a boolean".to_string(),
        }),
    }
}

fn validate_device_specs(
    entries: &[DeviceSpecConfig],
    file: &Path,
) -> Result<Vec<DeviceSpec>, ConfigError> {
    let mut specs = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let mut values = BTreeMap::new();
        let mut regex_address = None;
        for (key, v) in entry {
            if key == "address" {
                if let toml::Value::Table(t) = v {
                    let mut m = BTreeMap::new();
                    for (part, pv) in t {
                        m.insert(
                            part.clone(),
                            string_value(&format!("address.{part}"), pv)
                                .map_err(|e| at(file, "pci.device_spec", i, e))?,
                        );
                    }
                    regex_address = Some(m);
                    continue;
                }
            }
            values.insert(
                key.clone(),
                string_value(key, v).map_err(|e| at(file, "pci.device_spec", i, e))?,
            );
        }
        specs.push(
            DeviceSpec::new(values, regex_address)
                .map_err(|e| at(file, "pci.device_spec", i, e))?,
        );
    }
    Ok(specs)
}

fn validate_aliases(entries: &[AliasConfig], file: &Path) -> Result<AliasTable, ConfigError> {
    let mut table = AliasTable::new();
    for (i, entry) in entries.iter().enumerate() {
        let mut values = BTreeMap::new();
        for (key, v) in entry {
            values.insert(
                key.clone(),
                string_value(key, v).map_err(|e| at(file, "pci.alias", i, e))?,
            );
        }
        add_alias(&mut table, values).map_err(|e| at(file, "pci.alias", i, e))?;
    }
    Ok(table)
}

/// `[pci]`: the device specs and the alias table, with the rules between them and
/// `report_in_placement`.
pub(super) fn validate(p: &PciConfig, file: &Path) -> Result<PciSettings, ConfigError> {
    let report_in_placement = p
        .report_in_placement
        .unwrap_or(DEFAULT_PCI_REPORT_IN_PLACEMENT);
    let device_specs = validate_device_specs(&p.device_spec, file)?;
    // Nova's rule: a used device is kept from the scheduler only by its provider's
    // reserved inventory.
    let one_time_use = device_specs
        .iter()
        .position(|s| s.tags.get("one_time_use").map(String::as_str) == Some("true"));
    if let (false, Some(i)) = (report_in_placement, one_time_use) {
        return Err(ConfigError::Value {
            file: file.to_path_buf(),
            key: format!("pci.device_spec[{i}].one_time_use"),
            value: "true".into(),
            expected: "requires [pci] report_in_placement = true".into(),
        });
    }
    let aliases = validate_aliases(&p.alias, file)?;
    if let Some((name, why)) =
        crate::pci_policy::alias::table_problems(&aliases, report_in_placement)
            .into_iter()
            .next()
    {
        let index = p
            .alias
            .iter()
            .position(|a| a.get("name").and_then(|n| n.as_str()).map(str::trim) == Some(&name))
            .unwrap_or(0);
        return Err(ConfigError::Value {
            file: file.to_path_buf(),
            key: format!("pci.alias[{index}]"),
            value: format!("name = {name:?}"),
            expected: why,
        });
    }
    Ok(PciSettings {
        device_specs,
        aliases,
        report_in_placement,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::path::Path;

    #[test]
    fn device_specs_and_aliases_load_with_nova_keys() {
        let text = r#"
[[pci.device_spec]]
vendor_id = "8086"
product_id = "1889"
physical_network = "physnet1"
trusted = true

[[pci.device_spec]]
address = { bus = "5e", function = "[0-3]" }

[[pci.alias]]
name = "vf"
vendor_id = "8086"
product_id = "1889"
device_type = "type-VF"
"#;
        let f = Path::new("/etc/rtrack/rtrack.toml");
        let c = Config::parse(text, f).unwrap().validate(f).unwrap();
        assert_eq!(c.pci.device_specs.len(), 2);
        assert_eq!(c.pci.device_specs[0].tags["trusted"], "true");
        assert_eq!(c.pci.aliases["vf"].specs[0]["dev_type"], "type-VF");
    }

    #[test]
    fn errors_name_the_entry_index() {
        let f = Path::new("/etc/rtrack/rtrack.toml");
        let text =
            "[[pci.device_spec]]\nvendor_id = \"8086\"\n[[pci.device_spec]]\nproduct_id = 1889\n";
        let e = Config::parse(text, f)
            .unwrap()
            .validate(f)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "/etc/rtrack/rtrack.toml: pci.device_spec[1].product_id = 1889: must be a string or a boolean");
        let text = "[[pci.alias]]\nname = \"a\"\ndevice_type = \"type-XX\"\n";
        let e = Config::parse(text, f)
            .unwrap()
            .validate(f)
            .unwrap_err()
            .to_string();
        assert!(e.contains("pci.alias[0].device_type = \"type-XX\""), "{e}");
    }
}
