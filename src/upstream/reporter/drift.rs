//! The reporter's side of reconciliation: judging the drift found at each refresh (a drift
//! counts once it is seen at two refreshes running: a build between the scheduler's allocation
//! and the host's claim, or a deletion between the host's release and the allocation's, shows for
//! a moment), and the operator's `rtrackctl reconcile [--fix]`: read Placement now, compare, and
//! with `--fix` write what rtrack owns.
//!
//! In: the desired state and Placement (through the reporter's cache). Out: a [`DriftReport`]
//! per refresh, a [`Drift`] on demand, a [`FixReport`] after `--fix`.

use std::collections::BTreeSet;

use serde::Serialize;

use super::{adopt, ReportOutcome, Reporter};
use crate::upstream::api::PlacementApi;
use crate::upstream::desired::DesiredState;
use crate::upstream::reconcile::{compare, Drift};
use crate::upstream::UpstreamError;

/// How long a consumer's drift must have been seen before it counts, at most (a refresh
/// interval when that is shorter).
const DRIFT_MIN_AGE: std::time::Duration = std::time::Duration::from_secs(60);

/// Drift seen at a refresh.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DriftReport {
    /// As read, before this cycle's writes.
    pub found: Drift,
    /// After them: what stays (writes Placement refused, or allocations rtrack does not write).
    pub remaining: Drift,
    /// The part of `remaining` that counts: consumers seen drifting at the previous refresh too,
    /// and every inventory drift (it is what the cycle's own writes left).
    pub confirmed: Drift,
}

/// What `--fix` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FixReport {
    /// As read before fixing.
    pub found: Drift,
    /// Read again after the writes: what stays.
    pub remaining: Drift,
    /// Whether rtrack writes this host's allocations (`report_allocations`).
    pub report_allocations: bool,
}

impl<P: PlacementApi> Reporter<P> {
    /// `desired` with the providers nova-compute created in place of rtrack's own, when there
    /// are any (`None`: `desired` as it is). Records them in `outcome`.
    pub(super) fn with_adoptions(
        &self,
        desired: &DesiredState,
        outcome: &mut ReportOutcome,
    ) -> Option<DesiredState> {
        let adopted = adopt::adoptions(desired, &self.cache);
        let nested = adopt::nested_adoptions(desired, &self.cache);
        if adopted.is_empty() && nested.is_empty() {
            return None;
        }
        if !adopted.is_empty() {
            tracing::info!(providers = ?adopted, "reporting the PCI providers nova-compute created under their uuids");
        }
        let owned = adopt::with_adopted(desired, &adopted, &nested);
        outcome.adopted_pci_providers = adopted;
        outcome.adopted_nested_providers = nested;
        Some(owned)
    }

    /// The drift after this cycle's writes, judged against the previous refreshes': a
    /// consumer's counts once seen at two refreshes running and for a minute at least (failed
    /// cycles refresh again at once, which must not confirm a build in flight; a refresh
    /// interval shorter than a minute is enough).
    pub(super) fn judge_drift(&mut self, desired: &DesiredState, found: Drift) -> DriftReport {
        let remaining = compare(desired, &self.cache);
        let now = std::time::Instant::now();
        let min_age = self
            .refresh_interval
            .map_or(DRIFT_MIN_AGE, |r| r.min(DRIFT_MIN_AGE));
        let seen: std::collections::BTreeMap<String, std::time::Instant> = remaining
            .keys()
            .into_iter()
            .map(|k| {
                let first = self.suspects.get(&k).copied().unwrap_or(now);
                (k, first)
            })
            .collect();
        let keep: BTreeSet<String> = seen
            .iter()
            .filter(|(k, first)| {
                k.starts_with("inventory:") || now.duration_since(**first) >= min_age
            })
            .map(|(k, _)| k.clone())
            .collect();
        let confirmed = remaining.only(&keep);
        self.suspects = seen;
        DriftReport {
            found,
            remaining,
            confirmed,
        }
    }

    /// Reads Placement now and compares (`rtrackctl reconcile`): nothing is written. The next
    /// report uses what was read.
    pub async fn inspect(&mut self, desired: &DesiredState) -> Result<Drift, UpstreamError> {
        self.refresh(desired).await?;
        let mut outcome = ReportOutcome::default();
        let owned = self.with_adoptions(desired, &mut outcome);
        Ok(compare(owned.as_ref().unwrap_or(desired), &self.cache))
    }

    /// Reads Placement, writes what differs from the desired state (with `report_allocations`,
    /// the allocations too), and reads again (`rtrackctl reconcile --fix`).
    pub async fn fix(&mut self, desired: &DesiredState) -> Result<FixReport, UpstreamError> {
        let found = self.inspect(desired).await?;
        // Not held back by a backoff: an operator asked, and the tree was just read.
        self.backoff.succeeded();
        self.report(desired).await?;
        let remaining = self.inspect(desired).await?;
        Ok(FixReport {
            found,
            remaining,
            report_allocations: desired.allocations.is_some(),
        })
    }
}
