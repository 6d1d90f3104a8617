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
use uuid::Uuid;

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

/// What `--remove-unclaimed` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RemovalReport {
    /// Consumers whose part on this host's providers was removed (their other parts kept).
    pub removed: Vec<Uuid>,
    /// Consumers left as they are, and why.
    pub refused: Vec<RemovalRefused>,
}

/// A consumer `--remove-unclaimed` left alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct RemovalRefused {
    /// The consumer.
    pub consumer: Uuid,
    /// Why.
    pub why: String,
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

    /// Removes this host's part of the allocations of consumers an operator named
    /// (`rtrackctl reconcile --remove-unclaimed`), each only when it holds no local claim here,
    /// was not released here, and has been seen with no claim for `unclaimed_grace_s` at
    /// least (before that, its build may still be on its way). Other parts stay.
    pub async fn remove_unclaimed(
        &mut self,
        desired: &DesiredState,
        consumers: &[Uuid],
    ) -> Result<RemovalReport, UpstreamError> {
        let drift = self.inspect(desired).await?;
        let owned = crate::upstream::allocations::OwnedParts::of(desired, &self.cache);
        let mut report = RemovalReport::default();
        for c in consumers {
            match self.why_not_remove(desired, &drift, *c) {
                Some(why) => report.refused.push(RemovalRefused { consumer: *c, why }),
                None => {
                    let mut outcome = ReportOutcome::default();
                    if self.clear_one(*c, &owned, &mut outcome).await? {
                        tracing::info!(target: "rtrack::upstream", consumer = %c, "unclaimed consumer's part on this host removed from Placement, as the operator asked");
                        report.removed.push(*c);
                    } else {
                        report.refused.push(RemovalRefused {
                            consumer: *c,
                            why: "Placement refused the write (see rtrackd's log)".into(),
                        });
                    }
                }
            }
        }
        Ok(report)
    }

    fn why_not_remove(&self, desired: &DesiredState, drift: &Drift, c: Uuid) -> Option<String> {
        if desired.expected.contains_key(&c) {
            return Some("it holds a local claim here (abort or delete it instead)".into());
        }
        if desired.released.contains_key(&c) {
            return Some("it was released here: the report loop removes its part".into());
        }
        let unclaimed = drift
            .consumers
            .iter()
            .any(|d| d.consumer == c && d.kind == crate::upstream::reconcile::DriftKind::Unclaimed);
        if !unclaimed {
            return Some("it holds nothing on this host's providers".into());
        }
        let seen = self
            .suspects
            .get(&format!("unclaimed:{c}"))
            .map(|t| t.elapsed());
        match seen {
            Some(age) if age >= self.unclaimed_grace => None,
            Some(age) => Some(format!(
                "first seen with no local claim {} s ago; a build for it may still be on its way ([placement] unclaimed_grace_s = {})",
                age.as_secs(),
                self.unclaimed_grace.as_secs()
            )),
            None => Some(format!(
                "not seen with no local claim at a report yet; a build for it may still be on its way ([placement] unclaimed_grace_s = {})",
                self.unclaimed_grace.as_secs()
            )),
        }
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
