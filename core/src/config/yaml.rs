//! YAML documents read with a bound on what they expand to. The byte cap on a file bounds its
//! text, not its tree: aliases copy the node they name, so a few hundred bytes of nested
//! aliases ("billion laughs") expand to 10^9 nodes. The events are counted first, each alias
//! as the size of the node it names, and a document whose tree would exceed the budget, or
//! nest deeper than the limit, is refused before it is built.
//!
//! In: the text. Out: the documents, or what was exceeded (the caller names the file).

use std::collections::BTreeMap;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;
use yaml_rust2::Yaml;

/// Most nodes a file may expand to, aliases counted as copies. A 1 MiB file of plain nodes
/// has at most about half a million.
pub const MAX_NODES: u64 = 1_000_000;
/// Deepest nesting of sequences and mappings (dropping a deeper tree would exhaust the stack).
pub const MAX_DEPTH: usize = 128;

/// Counts the tree an event stream builds.
#[derive(Default)]
struct Budget {
    nodes: u64,
    /// Size of each anchored node, by anchor id.
    anchored: BTreeMap<usize, u64>,
    /// Open collections: anchor id and the count when each started.
    open: Vec<(usize, u64)>,
    exceeded: Option<String>,
}

impl Budget {
    fn add(&mut self, n: u64) {
        self.nodes = self.nodes.saturating_add(n);
        if self.nodes > MAX_NODES && self.exceeded.is_none() {
            self.exceeded = Some(format!(
                "it expands to more than {MAX_NODES} nodes (aliases count as copies of what they name)"
            ));
        }
    }
}

impl MarkedEventReceiver for Budget {
    fn on_event(&mut self, ev: Event, _mark: Marker) {
        if self.exceeded.is_some() {
            return;
        }
        match ev {
            Event::Scalar(_, _, anchor, _) => {
                self.add(1);
                if anchor > 0 {
                    self.anchored.insert(anchor, 1);
                }
            }
            Event::Alias(id) => {
                let n = self.anchored.get(&id).copied().unwrap_or(1);
                self.add(n);
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                self.add(1);
                self.open.push((anchor, self.nodes - 1));
                if self.open.len() > MAX_DEPTH {
                    self.exceeded = Some(format!("it nests deeper than {MAX_DEPTH} levels"));
                }
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some((anchor, start)) = self.open.pop() {
                    if anchor > 0 {
                        self.anchored.insert(anchor, self.nodes - start);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Why a YAML text was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum YamlError {
    /// Not YAML: where, and the parser's words.
    Syntax {
        /// Line, from 1.
        line: usize,
        /// Column, from 1.
        column: usize,
        /// What the parser says (bounded).
        info: String,
    },
    /// Valid YAML whose tree is too large or too deep to build.
    TooLarge(String),
}

impl std::fmt::Display for YamlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            YamlError::Syntax { line, column, info } => {
                write!(f, "not YAML at line {line}, column {column}: {info}")
            }
            YamlError::TooLarge(why) => write!(f, "refused: {why}"),
        }
    }
}

impl From<yaml_rust2::ScanError> for YamlError {
    fn from(e: yaml_rust2::ScanError) -> YamlError {
        YamlError::Syntax {
            line: e.marker().line(),
            column: e.marker().col() + 1,
            info: crate::echo::bounded(e.info()),
        }
    }
}

/// The documents of `text`, refused when they would expand beyond [`MAX_NODES`] or nest
/// beyond [`MAX_DEPTH`].
pub fn load(text: &str) -> Result<Vec<Yaml>, YamlError> {
    let mut budget = Budget::default();
    Parser::new_from_str(text).load(&mut budget, true)?;
    if let Some(why) = budget.exceeded {
        return Err(YamlError::TooLarge(why));
    }
    Ok(yaml_rust2::YamlLoader::load_from_str(text)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file: nine levels of ten aliases each.
    fn laughs() -> String {
        let mut s = String::from("a0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
        for i in 1..10 {
            let prev = format!("*a{}", i - 1);
            let row = [prev.as_str(); 10].join(",");
            s.push_str(&format!("a{i}: &a{i} [{row}]\n"));
        }
        s
    }

    #[test]
    fn nested_aliases_are_refused_before_they_expand() {
        let text = laughs();
        assert!(text.len() < 700, "{}", text.len());
        let started = std::time::Instant::now();
        let e = load(&text).unwrap_err().to_string();
        assert!(e.contains("more than 1000000 nodes"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn ordinary_aliases_and_deep_but_bounded_trees_load() {
        let docs = load("base: &b {x: 1, y: [1, 2]}\nother: *b\nthird: *b\n").unwrap();
        assert_eq!(docs[0]["third"]["y"][1].as_i64(), Some(2));
        let deep = "[".repeat(100) + &"]".repeat(100);
        assert!(load(&deep).is_ok());
        let deeper = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert!(load(&deeper)
            .unwrap_err()
            .to_string()
            .contains("deeper than 128"));
        assert!(load("a: [").is_err());
    }
}
