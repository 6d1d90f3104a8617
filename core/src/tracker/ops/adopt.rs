//! Adoption: turning the instances a host already runs (known from Placement's allocations when
//! rtrack takes over from nova-compute) into local claims, all or nothing.
//!
//! In: one [`Adoptee`] per consumer (who it is and what its allocation says it takes, as an
//! instance request), and whether to apply. Out: an [`AdoptionPlan`]: the claims that would be
//! (or were) made, the instances already held here, and every consumer that does not fit the
//! host as probed, with the reason; and the [`Changes`] when applied.
//!
//! The claims are made one after the other on a copy of the tracker, so that each sees the
//! ones before it; the copy replaces the tracker only when every adoptee fits. A host where one
//! running instance is left out would count its resources as free, so nothing is adopted while
//! any adoptee does not fit.

use serde::Serialize;

use super::{ClaimOutcome, InstanceInfo};
use crate::tracker::error::ClaimError;
use crate::tracker::model::InstanceRequest;
use crate::tracker::{Changes, ClaimRecord, Tracker};

/// One instance to adopt.
#[derive(Debug, Clone)]
pub struct Adoptee {
    /// Who it is; `allocations` carries Placement's allocation (vGPU parents, encryption models).
    pub info: InstanceInfo,
    /// What it takes.
    pub request: InstanceRequest,
}

/// Why a consumer is not adopted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AdoptProblem {
    /// The consumer (instance or migration uuid).
    pub consumer: String,
    /// Why, in words (with the numbers of a refused claim).
    pub reason: String,
}

/// What adoption does (or would do).
#[derive(Debug, Clone, Default, Serialize)]
pub struct AdoptionPlan {
    /// Claims to make (made, when applied), in consumer order.
    pub claims: Vec<ClaimRecord>,
    /// Instances this host holds already: left as they are.
    pub existing: Vec<String>,
    /// Consumers that cannot be adopted, and why.
    pub problems: Vec<AdoptProblem>,
    /// Whether the claims were committed.
    pub applied: bool,
}

impl Tracker {
    /// Plans the adoption of `adoptees` (and with `apply`, makes it, when nothing stands in the
    /// way). `problems` found by the caller (consumers it could not turn into a request) count
    /// like the tracker's.
    pub fn adopt(
        &mut self,
        adoptees: &[Adoptee],
        mut problems: Vec<AdoptProblem>,
        now: i64,
        apply: bool,
    ) -> Result<(AdoptionPlan, Changes), ClaimError> {
        let mut scratch = self.clone();
        let mut plan = AdoptionPlan::default();
        let mut changes = Changes::default();
        for a in adoptees {
            let uuid = &a.info.uuid;
            if self.state().claims.contains_key(uuid) || self.state().instances.contains_key(uuid) {
                plan.existing.push(uuid.clone());
                continue;
            }
            match scratch.instance_claim(&a.info, &a.request, now, false) {
                Ok((ClaimOutcome { claim, .. }, c)) => {
                    plan.claims.push(claim);
                    changes.merge(c);
                }
                Err(e) => problems.push(AdoptProblem {
                    consumer: uuid.clone(),
                    reason: e.to_string(),
                }),
            }
        }
        plan.problems = problems;
        if !apply || !plan.problems.is_empty() || changes.is_empty() {
            return Ok((plan, Changes::default()));
        }
        *self = scratch;
        plan.applied = true;
        Ok((plan, changes))
    }
}
