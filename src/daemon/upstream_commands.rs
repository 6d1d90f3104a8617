//! What the API asks of the report loop, which owns the Placement client: reconcile now (and
//! fix), or read the tree's allocations for an adoption. Handled between report cycles, so
//! they never race the loop's own writes.
//!
//! In: an [`UpstreamCommand`] and the loop's reporter. Out: the answer on the command's reply
//! channel (an [`UpstreamCommandError`] when Placement is not configured or does not answer).

use std::sync::Arc;

use crate::api::shared::{DaemonState, ReconcileAnswer, UpstreamCommand, UpstreamCommandError};
use crate::upstream::{HttpPlacement, Reporter};

/// Answers one command.
pub async fn handle(
    state: &Arc<DaemonState>,
    mut reporter: Option<&mut Reporter<HttpPlacement>>,
    configured: bool,
    cmd: UpstreamCommand,
) {
    answer(state, reporter.as_deref_mut(), configured, cmd).await;
    if let Some(r) = reporter {
        super::report::forget_released(state, Some(r.take_released_done())).await;
    }
}

async fn answer(
    state: &Arc<DaemonState>,
    reporter: Option<&mut Reporter<HttpPlacement>>,
    configured: bool,
    cmd: UpstreamCommand,
) {
    let not_configured = || {
        if configured {
            UpstreamCommandError::ClientUnavailable
        } else {
            UpstreamCommandError::NotConfigured
        }
    };
    let desired = {
        let st = state.clone();
        match tokio::task::spawn_blocking(move || super::report::snapshot(&st, true, None).desired)
            .await
        {
            Ok(Ok(d)) => Ok(d),
            Ok(Err(e)) => Err(UpstreamCommandError::Desired(e.to_string())),
            Err(e) => Err(UpstreamCommandError::Desired(format!(
                "building the desired state failed: {e}"
            ))),
        }
    };
    match cmd {
        UpstreamCommand::Reconcile { fix, remove, reply } => {
            let answer = match (reporter, desired) {
                (None, _) => Err(not_configured()),
                (_, Err(e)) => Err(e),
                (Some(r), Ok(d)) if !remove.is_empty() => {
                    match r.remove_unclaimed(&d, &remove).await {
                        Ok(report) => r
                            .inspect(&d)
                            .await
                            .map(|drift| ReconcileAnswer::Removed(report, drift))
                            .map_err(placement_error),
                        Err(e) => Err(placement_error(e)),
                    }
                }
                (Some(r), Ok(d)) if fix => r
                    .fix(&d)
                    .await
                    .map(ReconcileAnswer::Fixed)
                    .map_err(placement_error),
                (Some(r), Ok(d)) => r
                    .inspect(&d)
                    .await
                    .map(ReconcileAnswer::Inspected)
                    .map_err(placement_error),
            };
            let _ = reply.send(answer);
        }
        UpstreamCommand::ReportNow { reply } => {
            let answer = match (reporter, desired) {
                (None, _) => Err(not_configured()),
                (_, Err(e)) => Err(e),
                (Some(r), Ok(d)) => {
                    let outcome = r.report_now(&d).await;
                    if let Ok(o) = &outcome {
                        super::report::note_one_time_use(state, &o.one_time_use_reserved).await;
                    }
                    outcome
                        .map(|o| crate::api::shared::ReportSummary {
                            changes: o.changes,
                            requests: o.requests.total(),
                            conflicts: o.conflicts,
                            inventory_in_use: o
                                .inventory_in_use_details
                                .into_iter()
                                .map(|(provider, detail)| crate::api::shared::InventoryInUse {
                                    provider,
                                    pci: d.provider(provider).is_some_and(|p| {
                                        matches!(
                                            p.role,
                                            crate::upstream::desired::ProviderRole::Pci { .. }
                                        )
                                    }),
                                    detail,
                                })
                                .collect(),
                            pci_raised: d.pci_raised.clone(),
                        })
                        .map_err(placement_error)
                }
            };
            let _ = reply.send(answer);
        }
        UpstreamCommand::ReadAllocations { reply } => {
            let answer = match (reporter, desired) {
                (None, _) => Err(not_configured()),
                (_, Err(e)) => Err(e),
                (Some(r), Ok(d)) => r.read_holdings(&d).await.map_err(placement_error),
            };
            let _ = reply.send(answer);
        }
    }
}

/// What Placement (or the client before it) said, for the API.
fn placement_error(e: impl std::fmt::Display) -> UpstreamCommandError {
    UpstreamCommandError::Placement(e.to_string())
}
