//! Removing this host's part of the allocations of consumers released here (an abort, a
//! deletion, a move away or its end), and nothing else: each consumer is read fresh, its parts
//! on rtrack's providers are taken out, and the rest is written back with its owner and
//! generation (an empty rest removes the consumer). A consumer rtrack never held is never
//! touched here.
//!
//! In: the desired state's released consumers. Out: requests to Placement, and the releases
//! done (seen gone, or written gone), for the caller to forget.

use uuid::Uuid;

use super::{ReportOutcome, Reporter};
use crate::upstream::allocations::OwnedParts;
use crate::upstream::api::PlacementApi;
use crate::upstream::backoff::conflict_pause;
use crate::upstream::desired::DesiredState;
use crate::upstream::plan::CachedConsumer;
use crate::upstream::UpstreamError;

impl<P: PlacementApi> Reporter<P> {
    /// Takes this host's part out of each released consumer's allocation. Without
    /// `report_allocations` the allocations are Nova's scheduler's: nothing is written and the
    /// releases are done.
    pub(super) async fn clear_released(
        &mut self,
        desired: &DesiredState,
        outcome: &mut ReportOutcome,
    ) -> Result<(), UpstreamError> {
        let Some(wanted) = &desired.allocations else {
            self.released_done
                .extend(desired.released.iter().map(|(u, at)| (*u, *at)));
            return Ok(());
        };
        let owned = OwnedParts::of(desired, &self.cache);
        for (consumer, at) in &desired.released {
            // Held again since (a move reverted): its claim's part is written instead.
            if !wanted.contains_key(consumer) && !self.clear_one(*consumer, &owned, outcome).await?
            {
                continue;
            }
            self.released_done.push((*consumer, *at));
        }
        Ok(())
    }

    /// One consumer; `false` while its part could not be removed yet (retried next cycle).
    pub(super) async fn clear_one(
        &mut self,
        consumer: Uuid,
        owned: &OwnedParts,
        outcome: &mut ReportOutcome,
    ) -> Result<bool, UpstreamError> {
        let tries = self.opts.conflict_tries.max(1);
        for attempt in 1..=tries {
            let now = self.api.get_consumer(consumer).await?;
            let rest = owned.others(&now.resources);
            if rest == crate::upstream::allocations::normalized(&now.resources) {
                return Ok(true);
            }
            let owner = now
                .owner
                .clone()
                .unwrap_or_else(|| ("unknown".into(), "unknown".into(), String::new()));
            match self
                .api
                .put_allocation(consumer, &rest, now.generation, &owner)
                .await
            {
                Ok(()) => {
                    tracing::info!(target: "rtrack::upstream", %consumer, kept = ?rest, "released here: this host's part of its allocation removed from Placement");
                    self.note_written(
                        consumer,
                        Some(CachedConsumer {
                            generation: now.generation,
                            resources: now.resources,
                            owner: now.owner,
                        }),
                        rest,
                        owner,
                    );
                    outcome.changes += 1;
                    return Ok(true);
                }
                Err(e) if e.is_concurrent_update() => {
                    outcome.conflicts += 1;
                    tokio::time::sleep(conflict_pause(attempt)).await;
                }
                Err(e) if e.status().is_some_and(|s| (400..500).contains(&s)) => {
                    tracing::warn!(target: "rtrack::upstream", %consumer, error = %e, "cannot remove this host's part of a released consumer's allocation; retrying next cycle");
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    }

    /// The releases done since the last call: their part is gone from Placement (or is not
    /// rtrack's to remove), so the tracker may forget them.
    pub fn take_released_done(&mut self) -> Vec<(Uuid, i64)> {
        std::mem::take(&mut self.released_done)
    }
}
