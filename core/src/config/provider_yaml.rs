//! Nova's provider config files (`provider.yaml`): operators' own inventories and traits for the
//! compute node and its children, read from a directory (`*.yaml`, in name order) with Nova's
//! schema 1.x and rules (`nova/compute/provider_config.py`).
//!
//! In: the directory. Out: [`ProviderConfigs`] (each provider's identification, additional
//! inventories and traits, and its file), with warnings for what Nova only warns about, or a
//! [`ConfigError`] naming the file, the key and what was expected. Nova's errors are errors
//! here too: an unknown major schema version, a class or trait that is not `CUSTOM_*`, a value
//! of the wrong type, a provider defined twice (naming both files).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use yaml_rust2::Yaml;

use super::ConfigError;
use crate::nova_syntax::is_custom_name;

/// Nova's default location.
pub const DEFAULT_LOCATION: &str = "/etc/nova/provider_config";

/// Largest provider config file read (Nova has no limit; real ones are a few KiB).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// Which provider an entry is for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProviderTarget {
    /// `uuid: $COMPUTE_NODE`: the compute node.
    ComputeNode,
    /// By uuid.
    Uuid(uuid::Uuid),
    /// By name.
    Name(String),
}

impl std::fmt::Display for ProviderTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProviderTarget::ComputeNode => f.write_str("$COMPUTE_NODE"),
            ProviderTarget::Uuid(u) => write!(f, "{u}"),
            ProviderTarget::Name(n) => f.write_str(n),
        }
    }
}

/// One additional inventory (Placement's fields; unset ones take Placement's defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct ExtraInventory {
    /// Units in all (at least 1).
    pub total: i64,
    /// Kept back (default 0).
    pub reserved: i64,
    /// Smallest allocation (default 1).
    pub min_unit: i64,
    /// Largest allocation (default: the total).
    pub max_unit: Option<i64>,
    /// Allocation granularity (default 1).
    pub step_size: i64,
    /// Overcommit (default 1.0).
    pub allocation_ratio: f64,
}

/// One provider's entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderConfig {
    /// Which provider.
    pub target: ProviderTarget,
    /// Additional inventories by class (`CUSTOM_*`).
    pub inventories: BTreeMap<String, ExtraInventory>,
    /// Additional traits (`CUSTOM_*`).
    pub traits: BTreeSet<String>,
    /// The file it came from.
    pub source: PathBuf,
}

/// Everything the directory's files say.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProviderConfigs {
    /// Providers, in file then entry order.
    pub providers: Vec<ProviderConfig>,
    /// What Nova only warns about (a minor schema version it does not know, an entry with
    /// nothing to add).
    pub warnings: Vec<String>,
}

/// Reads every `*.yaml` of `dir`. A missing directory has none (Nova logs the same).
pub fn load_dir(dir: &Path) -> Result<ProviderConfigs, ConfigError> {
    let mut out = ProviderConfigs::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(source) => {
            return Err(ConfigError::Read {
                file: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut seen: BTreeMap<ProviderTarget, PathBuf> = BTreeMap::new();
    for file in files {
        let meta = std::fs::metadata(&file).map_err(|source| ConfigError::Read {
            file: file.clone(),
            source,
        })?;
        // A FIFO or a device named *.yaml would block the read or never end.
        if !meta.is_file() {
            return Err(value_error(
                &file,
                "(file)",
                "(not a regular file)".into(),
                "a regular file (a provider config file)",
            ));
        }
        if meta.len() > MAX_FILE_BYTES {
            return Err(value_error(
                &file,
                "(file)",
                format!("{} bytes", meta.len()),
                "a provider config file of at most 1 MiB",
            ));
        }
        let text = std::fs::read_to_string(&file).map_err(|source| ConfigError::Read {
            file: file.clone(),
            source,
        })?;
        let parsed = parse(&text, &file)?;
        out.warnings.extend(parsed.warnings);
        for p in parsed.providers {
            if let Some(first) = seen.insert(p.target.clone(), file.clone()) {
                return Err(value_error(
                    &file,
                    "providers[].identification",
                    p.target.to_string(),
                    &format!(
                        "a provider defined once: it is also defined in {} (Nova: multiple definitions)",
                        first.display()
                    ),
                ));
            }
            out.providers.push(p);
        }
    }
    Ok(out)
}

fn value_error(file: &Path, key: &str, value: String, expected: &str) -> ConfigError {
    ConfigError::value(file, key, value, expected)
}

/// A YAML value quoted for a message, bounded.
fn shown(v: &Yaml) -> String {
    let s = match v {
        Yaml::Real(s) | Yaml::String(s) => format!("{s:?}"),
        Yaml::Integer(i) => i.to_string(),
        Yaml::Boolean(b) => b.to_string(),
        Yaml::Array(_) => "(a list)".into(),
        Yaml::Hash(_) => "(a mapping)".into(),
        Yaml::Alias(_) => "(an alias)".into(),
        Yaml::Null => "null".into(),
        Yaml::BadValue => "(a bad value)".into(),
    };
    crate::echo::bounded(&s)
}

/// Placement's pattern for class and trait names.
fn is_placement_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && s.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// Parses one file's text (`file` for messages).
pub fn parse(text: &str, file: &Path) -> Result<ProviderConfigs, ConfigError> {
    let err = |key: &str, value: String, expected: &str| value_error(file, key, value, expected);
    let docs = super::yaml::load(text).map_err(|e| ConfigError::Syntax {
        file: file.to_path_buf(),
        message: e.to_string(),
    })?;
    let Some(Yaml::Hash(top)) = docs.first() else {
        return Err(err(
            "(file)",
            docs.first().map_or("(empty)".into(), shown),
            "a mapping with meta.schema_version (Nova: unable to detect schema version)",
        ));
    };
    if field(top, "__source_file").is_some() {
        return Err(err(
            "__source_file",
            "(set)".into(),
            "no __source_file key (Nova reserves it)",
        ));
    }
    let mut out = ProviderConfigs::default();
    check_schema_version(top, file, &mut out.warnings)?;
    let providers = match field(top, "providers") {
        None | Some(Yaml::Null) => return Ok(out),
        Some(Yaml::Array(list)) => list,
        Some(other) => return Err(err("providers", shown(&other), "a list of providers")),
    };
    for (i, p) in providers.iter().enumerate() {
        let Yaml::Hash(p) = p else {
            return Err(err(
                &format!("providers[{i}]"),
                shown(p),
                "a mapping with identification",
            ));
        };
        let target = provider_target(p, i, file)?;
        let inventories = provider_inventories(p, i, file)?;
        let traits = provider_traits(p, i, file)?;
        if inventories.is_empty() && traits.is_empty() {
            out.warnings.push(format!(
                "{}: provider {target} has no additional inventories or traits and is ignored (as in Nova)",
                file.display()
            ));
            continue;
        }
        out.providers.push(ProviderConfig {
            target,
            inventories,
            traits,
            source: file.to_path_buf(),
        });
    }
    Ok(out)
}

/// The value of key `k` of a YAML mapping.
fn field(h: &yaml_rust2::yaml::Hash, k: &str) -> Option<Yaml> {
    h.get(&Yaml::String(k.to_string())).cloned()
}

/// `meta.schema_version` must be 1.x, as in Nova; a minor version above 0 is a warning.
fn check_schema_version(
    top: &yaml_rust2::yaml::Hash,
    file: &Path,
    warnings: &mut Vec<String>,
) -> Result<(), ConfigError> {
    let err =
        |value: String, expected: &str| value_error(file, "meta.schema_version", value, expected);
    let version = match field(top, "meta") {
        Some(Yaml::Hash(meta)) => field(&meta, "schema_version"),
        _ => None,
    };
    let version = match version {
        Some(Yaml::String(s)) => s,
        Some(other) => {
            return Err(err(
                shown(&other),
                "a string such as '1.0' (quoted: YAML reads 1.0 as a number)",
            ))
        }
        None => {
            return Err(err(
                "(missing)".into(),
                "the schema version, e.g. schema_version: '1.0' (Nova: unable to detect schema version)",
            ))
        }
    };
    match version.split_once('.') {
        Some(("1", minor))
            if minor == "0"
                || (!minor.starts_with('0')
                    && !minor.is_empty()
                    && minor.bytes().all(|b| b.is_ascii_digit())) =>
        {
            if minor != "0" {
                warnings.push(format!(
                    "{}: schema version {version}: the major version is supported, not the minor; some fields may be ignored (as in Nova)",
                    file.display()
                ));
            }
            Ok(())
        }
        _ => Err(err(
            format!("{version:?}"),
            "schema version 1.x (the only major version Nova and rtrack know)",
        )),
    }
}

/// `providers[i].identification`: exactly one of a uuid (or `$COMPUTE_NODE`) or a name.
fn provider_target(
    p: &yaml_rust2::yaml::Hash,
    i: usize,
    file: &Path,
) -> Result<ProviderTarget, ConfigError> {
    let err = |k: &str, value: String, expected: &str| {
        value_error(file, &format!("providers[{i}].{k}"), value, expected)
    };
    match field(p, "identification") {
        Some(Yaml::Hash(id)) if id.len() == 1 => match (field(&id, "uuid"), field(&id, "name")) {
            (Some(Yaml::String(u)), None) if u == "$COMPUTE_NODE" => {
                Ok(ProviderTarget::ComputeNode)
            }
            (Some(Yaml::String(u)), None) => match uuid::Uuid::parse_str(&u) {
                Ok(parsed) if u.len() == 36 => Ok(ProviderTarget::Uuid(parsed)),
                _ => Err(err(
                    "identification.uuid",
                    format!("{:?}", crate::echo::bounded(&u)),
                    "a provider uuid (8-4-4-4-12 hex digits) or $COMPUTE_NODE",
                )),
            },
            (None, Some(Yaml::String(n))) if !n.is_empty() && n.chars().count() <= 200 => {
                Ok(ProviderTarget::Name(n))
            }
            (u, n) => Err(err(
                "identification",
                u.or(n).map_or("(neither)".into(), |v| shown(&v)),
                "exactly one of uuid (a uuid or $COMPUTE_NODE) or name (1 to 200 characters)",
            )),
        },
        other => Err(err(
            "identification",
            other.map_or("(missing)".into(), |v| shown(&v)),
            "a mapping with exactly one of uuid or name",
        )),
    }
}

/// The list under `providers[i].<section>.additional` (none when absent or null).
fn additional(
    p: &yaml_rust2::yaml::Hash,
    i: usize,
    section: &str,
    expected: &str,
    file: &Path,
) -> Result<Vec<Yaml>, ConfigError> {
    let Some(value) = field(p, section) else {
        return Ok(Vec::new());
    };
    let Yaml::Hash(h) = value else {
        return Err(value_error(
            file,
            &format!("providers[{i}].{section}"),
            shown(&value),
            "a mapping with additional",
        ));
    };
    match field(&h, "additional") {
        None | Some(Yaml::Null) => Ok(Vec::new()),
        Some(Yaml::Array(items)) => Ok(items),
        Some(other) => Err(value_error(
            file,
            &format!("providers[{i}].{section}.additional"),
            shown(&other),
            expected,
        )),
    }
}

/// `providers[i].inventories.additional`: custom classes, each once.
fn provider_inventories(
    p: &yaml_rust2::yaml::Hash,
    i: usize,
    file: &Path,
) -> Result<BTreeMap<String, ExtraInventory>, ConfigError> {
    let err = |key: &str, value: String, expected: &str| value_error(file, key, value, expected);
    let items = additional(
        p,
        i,
        "inventories",
        "a list of {CLASS: {total: N, ...}} mappings",
        file,
    )?;
    let mut inventories = BTreeMap::new();
    for (j, item) in items.iter().enumerate() {
        let at = format!("providers[{i}].inventories.additional[{j}]");
        let Yaml::Hash(item) = item else {
            return Err(err(
                &at,
                shown(item),
                "a mapping of resource class to its inventory",
            ));
        };
        for (class, fields) in item {
            let Yaml::String(class) = class else {
                return Err(err(&at, shown(class), "resource class names as keys"));
            };
            let key = format!("{at}.{}", crate::echo::bounded(class));
            if !is_placement_name(class) || !is_custom_name(class) {
                return Err(err(
                    &key,
                    format!("{:?}", crate::echo::bounded(class)),
                    "a custom resource class: CUSTOM_ then capitals, digits and _ (only custom classes can be added, as in Nova)",
                ));
            }
            let inv = extra_inventory(fields, &key, file)?;
            if inventories.insert(class.clone(), inv).is_some() {
                return Err(err(&key, "(twice)".into(), "each class once per provider"));
            }
        }
    }
    Ok(inventories)
}

/// `providers[i].traits.additional`: custom traits.
fn provider_traits(
    p: &yaml_rust2::yaml::Hash,
    i: usize,
    file: &Path,
) -> Result<BTreeSet<String>, ConfigError> {
    let items = additional(p, i, "traits", "a list of trait names", file)?;
    let mut traits = BTreeSet::new();
    for (j, t) in items.iter().enumerate() {
        match t {
            Yaml::String(s) if is_placement_name(s) && is_custom_name(s) => {
                traits.insert(s.clone());
            }
            other => {
                return Err(value_error(
                    file,
                    &format!("providers[{i}].traits.additional[{j}]"),
                    shown(other),
                    "a custom trait: CUSTOM_ then capitals, digits and _ (only custom traits can be added, as in Nova)",
                ))
            }
        }
    }
    Ok(traits)
}

fn extra_inventory(fields: &Yaml, key: &str, file: &Path) -> Result<ExtraInventory, ConfigError> {
    let err = |k: &str, value: String, expected: &str| {
        value_error(file, &format!("{key}.{k}"), value, expected)
    };
    let Yaml::Hash(h) = fields else {
        return Err(value_error(
            file,
            key,
            shown(fields),
            "a mapping with total and optionally reserved, min_unit, max_unit, step_size, allocation_ratio",
        ));
    };
    let mut inv = ExtraInventory {
        total: 0,
        reserved: 0,
        min_unit: 1,
        max_unit: None,
        step_size: 1,
        allocation_ratio: 1.0,
    };
    let mut total = None;
    for (k, v) in h {
        let Yaml::String(k) = k else {
            return Err(value_error(file, key, shown(k), "field names as keys"));
        };
        let int = |v: &Yaml, min: i64| -> Result<i64, ConfigError> {
            match v {
                Yaml::Integer(n) if *n >= min && *n < (1 << 53) => Ok(*n),
                other => Err(err(
                    k,
                    shown(other),
                    &format!("a whole number of at least {min}"),
                )),
            }
        };
        match k.as_str() {
            "total" => total = Some(int(v, 1)?),
            "reserved" => inv.reserved = int(v, 0)?,
            "min_unit" => inv.min_unit = int(v, 1)?,
            "max_unit" => inv.max_unit = Some(int(v, 1)?),
            "step_size" => inv.step_size = int(v, 1)?,
            "allocation_ratio" => {
                let r = match v {
                    Yaml::Integer(n) => Some(*n as f64),
                    Yaml::Real(s) => s.parse::<f64>().ok(),
                    _ => None,
                };
                match r {
                    Some(r) if r.is_finite() && r > 0.0 => inv.allocation_ratio = r,
                    _ => return Err(err(k, shown(v), "a number greater than 0")),
                }
            }
            other => {
                return Err(value_error(
                    file,
                    &format!("{key}.{}", crate::echo::bounded(other)),
                    "(set)".into(),
                    "one of total, reserved, min_unit, max_unit, step_size, allocation_ratio",
                ))
            }
        }
    }
    inv.total = total.ok_or_else(|| err("total", "(missing)".into(), "the inventory's total"))?;
    if inv.reserved > inv.total {
        return Err(err(
            "reserved",
            inv.reserved.to_string(),
            &format!("at most the total {}", inv.total),
        ));
    }
    Ok(inv)
}

#[cfg(test)]
mod tests;
