//! The answers of the routes that talk to Placement: a reconciliation's drift (with what a fix
//! left and why, or the removals asked for), a refresh, and an adoption plan.
//!
//! In: the report loop's [`Drift`], [`FixReport`], [`RemovalReport`] and [`ReportSummary`]; the
//! tracker's [`AdoptionPlan`]. Out: the answers' types.

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::ToSchema;

use super::claims::ClaimView;
use crate::api::shared::ReportSummary;
use crate::tracker::ops::adopt::AdoptionPlan;
use crate::upstream::reconcile::{Drift, DriftKind};
use crate::upstream::reporter::drift::{FixReport, RemovalRefused, RemovalReport};

/// `POST /v1/reconcile`: the drift, and with `fix` what was found first, what stays and why;
/// with `remove_unclaimed`, what was removed and what was refused.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Reconciled {
    /// What differs now (after a fix: what stays).
    pub drift: Drift,
    /// `drift` counted by kind (unclaimed, missing, different, inventory_gone).
    pub counts: BTreeMap<&'static str, usize>,
    /// With `fix`: what differed before the writes.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub found: Option<Drift>,
    /// With `fix`: `found` counted by kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub found_counts: Option<BTreeMap<&'static str, usize>>,
    /// Whether rtrack wrote what it owns.
    pub fixed: bool,
    /// With `fix`: whether rtrack writes this host's allocations.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub report_allocations: Option<bool>,
    /// With `fix`: each drift that stays, and why rtrack leaves it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub not_touched: Option<Vec<NotTouched>>,
    /// With `remove_unclaimed`: consumers whose part on this host was removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub removed: Option<Vec<uuid::Uuid>>,
    /// With `remove_unclaimed`: consumers left as they are, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub refused: Option<Vec<RemovalRefused>>,
}

/// A drift rtrack leaves as it is: a consumer's (with its kind) or an inventory's (provider and
/// class), and why.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NotTouched {
    /// The consumer, for a consumer's drift.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub consumer: Option<uuid::Uuid>,
    /// How the consumer's allocation differs.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub kind: Option<DriftKind>,
    /// The provider, for an inventory's drift.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub provider: Option<uuid::Uuid>,
    /// The inventory's class.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub class: Option<String>,
    /// Why rtrack leaves it.
    pub why: &'static str,
}

impl Reconciled {
    /// What a read and compare found.
    pub fn inspected(d: Drift) -> Reconciled {
        Reconciled::new(d, false)
    }

    /// What a fix found, what stays and why.
    pub fn fixed(f: FixReport) -> Reconciled {
        let not_touched = not_touched(&f.remaining, f.report_allocations);
        Reconciled {
            found_counts: Some(f.found.counts()),
            found: Some(f.found),
            report_allocations: Some(f.report_allocations),
            not_touched: Some(not_touched),
            ..Reconciled::new(f.remaining, true)
        }
    }

    /// What a removal did, and the drift read after.
    pub fn removed(r: RemovalReport, d: Drift) -> Reconciled {
        Reconciled {
            removed: Some(r.removed),
            refused: Some(r.refused),
            ..Reconciled::new(d, false)
        }
    }

    fn new(drift: Drift, fixed: bool) -> Reconciled {
        Reconciled {
            counts: drift.counts(),
            drift,
            found: None,
            found_counts: None,
            fixed,
            report_allocations: None,
            not_touched: None,
            removed: None,
            refused: None,
        }
    }
}

/// Why rtrack leaves each drift of `d` as it is.
fn not_touched(d: &Drift, report_allocations: bool) -> Vec<NotTouched> {
    let consumers = d.consumers.iter().map(|c| {
        let why = if !report_allocations {
            "allocations here are written by Nova's scheduler and conductor ([placement] report_allocations = false): nova-manage placement heal_allocations and audit repair them"
        } else if c.kind == DriftKind::Unclaimed {
            "no local claim here: rtrack removes only what it released; if no build for it is on its way, `rtrackctl reconcile --remove-unclaimed <uuid>` removes this host's part"
        } else {
            "Placement refused the allocation (see rtrackd's log: over capacity, a class it lacks)"
        };
        NotTouched {
            consumer: Some(c.consumer),
            kind: Some(c.kind),
            provider: None,
            class: None,
            why,
        }
    });
    let inventories = d.inventories.iter().map(|i| {
        let why = if i.used.unwrap_or(0) > 0 {
            "allocations still use it: Placement refuses to remove inventory in use; it goes once they do"
        } else {
            "rtrack removes it at its next report (or Placement refused: see rtrackd's log)"
        };
        NotTouched {
            consumer: None,
            kind: None,
            provider: Some(i.provider),
            class: Some(i.class.clone()),
            why,
        }
    });
    consumers.chain(inventories).collect()
}

/// `POST /v1/refresh`: audited, and reported when Placement is configured.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Refreshed {
    /// Always true: a failed audit is answered 503.
    pub audited: bool,
    /// What the report wrote; null without Placement.
    #[schema(required)]
    pub placement: Option<ReportSummary>,
}

/// `POST /v1/adopt`: the adoption plan (applied when asked and possible).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = AdoptionPlan)]
pub struct AdoptionPlanView {
    /// Whether the claims were committed.
    pub applied: bool,
    /// Claims to make (made, when applied), in consumer order.
    pub claims: Vec<ClaimView>,
    /// Instances this host holds already: left as they are.
    pub existing: Vec<String>,
    /// Consumers that cannot be adopted, and why.
    pub problems: Vec<AdoptProblem>,
    /// What adoption noticed about consumers it adopts.
    pub notes: Vec<AdoptNote>,
}

/// Why a consumer is not adopted.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AdoptProblem {
    /// The consumer (instance or migration uuid).
    pub consumer: String,
    /// Why, in words (with the numbers of a refused claim).
    pub reason: String,
}

/// A note about a consumer adopted.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AdoptNote {
    /// The consumer.
    pub consumer: String,
    /// What was noticed.
    pub note: String,
}

impl AdoptionPlanView {
    /// The plan with adoption's notes.
    pub fn new(plan: &AdoptionPlan, notes: Vec<AdoptNote>) -> AdoptionPlanView {
        AdoptionPlanView {
            applied: plan.applied,
            claims: plan.claims.iter().map(ClaimView::from).collect(),
            existing: plan.existing.clone(),
            problems: plan
                .problems
                .iter()
                .map(|p| AdoptProblem {
                    consumer: p.consumer.clone(),
                    reason: p.reason.clone(),
                })
                .collect(),
            notes,
        }
    }
}
