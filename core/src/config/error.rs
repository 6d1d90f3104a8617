//! Configuration errors: which file, which key, what was wrong and what is accepted; and the
//! TOML parser's errors, with a secret's line never shown.
//!
//! In: the file's path and what went wrong: an I/O error, the TOML text with the parser's error, or
//! a key, its value and what is accepted. Out: a [`ConfigError`] naming the file and the key; a
//! line that sets a secret (a key naming a password, token or secret) is never quoted.

use std::path::{Path, PathBuf};

/// A configuration error: which file, which key, what was wrong.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{file}: cannot read the configuration file: {source}")]
    Read {
        /// The file.
        file: PathBuf,
        /// The I/O error that stopped the read.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML or does not fit the schema (unknown key, wrong type).
    #[error("{file}: {message}")]
    Syntax {
        /// The file.
        file: PathBuf,
        /// The parser's message (names the key and the line).
        message: String,
    },
    /// A value is out of range or malformed.
    #[error("{file}: {key} = {value}: {expected}")]
    Value {
        /// The file.
        file: PathBuf,
        /// Dotted key, e.g. `resources.cpu_allocation_ratio`.
        key: String,
        /// The value as written.
        value: String,
        /// What is accepted.
        expected: String,
    },
}

impl ConfigError {
    /// A bad value: the file, the dotted key, the value as written, what is accepted.
    pub fn value(file: &Path, key: &str, value: String, expected: &str) -> ConfigError {
        ConfigError::Value {
            file: file.to_path_buf(),
            key: key.to_string(),
            value,
            expected: expected.to_string(),
        }
    }
}

/// Whether a key (or a line setting one) holds a secret whose value is never shown.
pub fn is_secret_key(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    ["password", "token", "secret"]
        .iter()
        .any(|k| t.contains(k))
}

/// A TOML error as a message: the parser's own text quotes the offending line, which is
/// shown unless it sets a secret; then only its position and the parser's words (with any
/// quoted value removed) are.
pub fn syntax_error(text: &str, file: &Path, e: &toml::de::Error) -> ConfigError {
    let span = e.span().unwrap_or(0..0);
    let start = span.start.min(text.len());
    let line_no = text[..start].matches('\n').count() + 1;
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let line = &text[line_start..line_end];
    let message = if is_secret_key(line) {
        let words = e.message();
        // Drop anything quoted: a parser may cite the value it choked on.
        let mut clean = String::new();
        let mut quoted = false;
        for c in words.chars() {
            match c {
                '"' | '`' | '\'' => {
                    quoted = !quoted;
                    if quoted {
                        clean.push_str("<hidden>");
                    }
                }
                _ if quoted => {}
                _ => clean.push(c),
            }
        }
        format!(
            "line {line_no}, column {}: {}; the line is not shown because it sets a secret",
            start - line_start + 1,
            clean.trim_end()
        )
    } else {
        crate::echo::bounded_message(&e.to_string())
            .trim_end()
            .replace('\n', "\n  ")
    };
    ConfigError::Syntax {
        file: file.to_path_buf(),
        message,
    }
}
