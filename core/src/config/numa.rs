//! The NUMA keys of `[resources]`, checked: `reserved_huge_pages` in Nova's two spellings,
//! `base_page_size_kb`, and the refusal of `vcpu_pin_set`.
//!
//! In: the values as written in the file. Out: [`ReservedPages`] entries (node, page size in
//! KiB, count) or a [`ConfigError`] naming the key, the value and what is accepted.

use std::path::Path;

use serde::Deserialize;

use super::ConfigError;
use crate::echo::quoted;
use crate::nova_syntax::size_kib;

/// One `reserved_huge_pages` entry as written: Nova's string `"node:0,size:1GB,count:2"` or a
/// table `{node = 0, size = "1GB", count = 2}` (`size` may be KiB as an integer).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum ReservedPagesConfig {
    /// `"node:0,size:1GB,count:2"`.
    Text(String),
    /// `{node = 0, size = "1GB", count = 2}`.
    Table {
        /// NUMA node id.
        node: toml::Value,
        /// Page size: KiB as an integer or digits, or a size with a unit ("2MB", "1GB").
        size: toml::Value,
        /// Pages to keep from guests.
        count: toml::Value,
    },
}

/// Pages of one size kept from guests on one node, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReservedPages {
    /// NUMA node id.
    pub node: u32,
    /// Page size, KiB.
    pub size_kb: i64,
    /// Pages reserved.
    pub count: i64,
}

/// Largest page size accepted, KiB (16 GiB: POWER's largest hugepage).
const MAX_PAGE_KB: i64 = 16 * 1024 * 1024;

fn integer(v: &toml::Value) -> Option<i64> {
    match v {
        toml::Value::Integer(i) => Some(*i),
        toml::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn text_of(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => quoted(s),
        other => other.to_string(),
    }
}

/// Checks `[resources] reserved_huge_pages`.
pub fn reserved_huge_pages(
    list: &[ReservedPagesConfig],
    file: &Path,
) -> Result<Vec<ReservedPages>, ConfigError> {
    let mut out = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let key = format!("resources.reserved_huge_pages[{i}]");
        let err = |value: String, expected: &str| ConfigError::Value {
            file: file.to_path_buf(),
            key: key.clone(),
            value,
            expected: expected.to_string(),
        };
        let (node, size, count, shown) = match item {
            ReservedPagesConfig::Text(s) => {
                let mut node = None;
                let mut size = None;
                let mut count = None;
                for part in s.split(',') {
                    let Some((k, v)) = part.split_once(':') else {
                        return Err(err(
                            quoted(s),
                            "must be \"node:N,size:SIZE,count:N\" (e.g. \"node:0,size:1GB,count:2\")",
                        ));
                    };
                    let slot = match k.trim() {
                        "node" => &mut node,
                        "size" => &mut size,
                        "count" => &mut count,
                        other => {
                            return Err(err(
                                quoted(s),
                                &format!(
                                    "has an unknown part {}; the parts are node, size and count",
                                    quoted(other)
                                ),
                            ))
                        }
                    };
                    *slot = Some(toml::Value::String(v.trim().to_string()));
                }
                match (node, size, count) {
                    (Some(n), Some(z), Some(c)) => (n, z, c, quoted(s)),
                    _ => {
                        return Err(err(
                            quoted(s),
                            "needs node, size and count (e.g. \"node:0,size:1GB,count:2\")",
                        ))
                    }
                }
            }
            ReservedPagesConfig::Table { node, size, count } => (
                node.clone(),
                size.clone(),
                count.clone(),
                format!(
                    "{{node = {}, size = {}, count = {}}}",
                    text_of(node),
                    text_of(size),
                    text_of(count)
                ),
            ),
        };
        let node = integer(&node)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| {
                err(
                    shown.clone(),
                    &format!("node {} must be a NUMA node id (0 or more)", text_of(&node)),
                )
            })?;
        let size_kb = match &size {
            toml::Value::Integer(kb) => Ok(*kb),
            toml::Value::String(s) => size_kib(s),
            other => Err(format!("{other} is not a size")),
        }
        .map_err(|e| err(shown.clone(), &format!("size: {e}")))?;
        if size_kb <= 0 || size_kb > MAX_PAGE_KB {
            return Err(err(
                shown,
                &format!("size must be a page size from 1 KiB to {MAX_PAGE_KB} KiB"),
            ));
        }
        let count = integer(&count).filter(|c| *c >= 0).ok_or_else(|| {
            err(
                shown.clone(),
                &format!("count {} must be 0 or more", text_of(&count)),
            )
        })?;
        out.push(ReservedPages {
            node,
            size_kb,
            count,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> Result<Vec<ReservedPages>, ConfigError> {
        #[derive(Deserialize)]
        struct W {
            r: Vec<ReservedPagesConfig>,
        }
        let w: W = toml::from_str(toml_text).expect("test toml");
        reserved_huge_pages(&w.r, Path::new("t.toml"))
    }

    #[test]
    fn both_spellings_and_every_size_form_nova_accepts() {
        let r = parse(
            r#"r = ["node:0,size:1GB,count:2", {node = 1, size = 2048, count = 512}, {node = "2", size = "2MB", count = "3"}, "node:3,size:2048,count:1"]"#,
        )
        .unwrap();
        assert_eq!(
            r,
            vec![
                ReservedPages {
                    node: 0,
                    size_kb: 1_048_576,
                    count: 2
                },
                ReservedPages {
                    node: 1,
                    size_kb: 2048,
                    count: 512
                },
                ReservedPages {
                    node: 2,
                    size_kb: 2048,
                    count: 3
                },
                ReservedPages {
                    node: 3,
                    size_kb: 2048,
                    count: 1
                },
            ]
        );
    }

    #[test]
    fn bad_entries_name_the_entry_and_the_part() {
        let e = parse(r#"r = ["node:0,size:1GB"]"#).unwrap_err().to_string();
        assert!(
            e.contains("reserved_huge_pages[0]") && e.contains("needs node, size and count"),
            "{e}"
        );
        let e = parse(r#"r = ["node:0,size:1GB,count:2", "node:x,size:2MB,count:1"]"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("reserved_huge_pages[1]") && e.contains("node \"x\""),
            "{e}"
        );
        let e = parse(r#"r = [{node = 0, size = "huge", count = 1}]"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("size: \"huge\" is not a size"), "{e}");
        let e = parse(r#"r = [{node = 0, size = 2048, count = -1}]"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("count -1 must be 0 or more"), "{e}");
        let e = parse(r#"r = ["node:0,size:2MB,count:1,colour:red"]"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown part \"colour\""), "{e}");
    }
}
