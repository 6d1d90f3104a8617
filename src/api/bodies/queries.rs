//! The query strings: `?dry_run=` of claims and moves, `?version=` of the ComputeNode.

use serde::Deserialize;

use crate::api::error::ApiError;
use crate::echo::quoted;

/// `?dry_run=...`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DryRunQuery {
    /// Answer whether it fits, claim nothing.
    #[serde(default)]
    pub dry_run: Option<String>,
}

impl DryRunQuery {
    /// The flag, checked.
    pub fn flag(&self) -> Result<bool, ApiError> {
        match self.dry_run.as_deref() {
            None | Some("false") | Some("0") => Ok(false),
            Some("true") | Some("1") | Some("") => Ok(true),
            Some(other) => Err(ApiError::invalid(
                "dry_run",
                format!("{} is not a boolean; expected true or false", quoted(other)),
            )),
        }
    }
}

/// `?version=X.Y`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionQuery {
    /// ComputeNode version to backport to.
    pub version: Option<String>,
}
