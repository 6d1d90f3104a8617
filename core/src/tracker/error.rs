//! Why the tracker refused something, structurally: which resource class or PCI request,
//! requested, used, capacity, and for PCI every pool considered and why it was rejected.
//!
//! In: what an operation found wrong: the resource classes short of room ([`ResourceShortfall`]),
//! the PCI request that could not be met ([`PciRefusal`]), a conflict, a malformed field, a missing
//! record. Out: a [`ClaimError`]; its [`Refusal`] serializes into the API's error details and reads
//! as one sentence, and [`ClaimError::code`] gives the short code for APIs and metrics.

use std::fmt;

use serde::Serialize;

use super::refusals::{NumaRefusal, PciRefusal};
use crate::inventory::resources::ResourceClass;

/// One resource class that does not fit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceShortfall {
    /// The class.
    pub class: ResourceClass,
    /// Asked for.
    pub requested: i64,
    /// In use already.
    pub used: i64,
    /// `(total - reserved) x ratio`.
    pub capacity: i64,
    /// Largest single request allowed (the total).
    pub max_unit: i64,
    /// For a class held below the compute node: the provider(s) considered (an mdev parent,
    /// an encryption model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
}

/// A claim that does not fit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// The instance.
    pub instance_uuid: String,
    /// Classes that do not fit.
    pub resources: Vec<ResourceShortfall>,
    /// The PCI request that could not be met.
    pub pci: Option<PciRefusal>,
    /// Why the guest's NUMA cells fit on no combination of host cells, per host cell.
    pub numa: Option<NumaRefusal>,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "instance {} does not fit on this host:",
            self.instance_uuid
        )?;
        let mut sep = " ";
        for r in &self.resources {
            let on = r
                .provider
                .as_ref()
                .map(|p| format!(" on {p}"))
                .unwrap_or_default();
            if r.class.as_str().starts_with("CUSTOM_PMEM_NAMESPACE_") {
                // Nova's words when it cannot give the namespaces (`_claim_resources`).
                write!(
                    f,
                    "{sep}Needed {} units of resource class {}, but {} are available.",
                    r.requested,
                    r.class,
                    (r.capacity - r.used).max(0)
                )?;
            } else if r.requested > r.max_unit {
                write!(
                    f,
                    "{sep}{}{on} requested {} is more than the largest allowed unit {}",
                    r.class, r.requested, r.max_unit
                )?;
            } else {
                write!(
                    f,
                    "{sep}{}{on} requested {}, used {} of capacity {} (free {})",
                    r.class,
                    r.requested,
                    r.used,
                    r.capacity,
                    (r.capacity - r.used).max(0)
                )?;
            }
            sep = "; ";
        }
        if let Some(n) = &self.numa {
            write!(f, "{sep}NUMA: {}", n.reason)?;
            for cell in &n.cells {
                let why: Vec<String> = cell
                    .verdicts
                    .iter()
                    .filter(|v| v.reason != "fits")
                    .map(|v| format!("guest cell {}: {}", v.guest_cell, v.reason))
                    .collect();
                if !why.is_empty() {
                    write!(f, "; host cell {}: {}", cell.id, why.join(", "))?;
                }
            }
            sep = "; ";
        }
        if let Some(p) = &self.pci {
            let rejected = p.pools.iter().filter(|v| v.rejected.is_some()).count();
            write!(
                f,
                "{sep}PCI request {}{} for {} device(s): {} usable after filtering {} pool(s) ({} rejected)",
                p.request_id,
                p.alias_name.as_ref().map(|a| format!(" (alias {a})")).unwrap_or_default(),
                p.requested,
                p.usable,
                p.pools.len(),
                rejected
            )?;
        }
        Ok(())
    }
}

/// Everything the tracker can refuse.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClaimError {
    /// The host does not have room.
    #[error("{0}")]
    Refused(Box<Refusal>),
    /// The request conflicts with what is tracked (same instance, different request...).
    #[error("{message}")]
    Conflict {
        /// Instance or migration concerned.
        id: String,
        /// What conflicts.
        message: String,
    },
    /// The request is malformed.
    #[error("{field}: {message}")]
    Invalid {
        /// Field path.
        field: String,
        /// What was wrong and what was expected.
        message: String,
    },
    /// No such instance, claim or migration.
    #[error("{what} {id} is not known to this host")]
    NotFound {
        /// "instance", "claim", "migration".
        what: &'static str,
        /// Its id.
        id: String,
    },
}
