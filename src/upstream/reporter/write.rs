//! Writing one consumer's allocation and keeping the cache in step with it, and saying once
//! what cannot be written (a claim that names no owner for a consumer Placement does not know,
//! a compute node Placement knows under another name).
//!
//! In: the allocation to write (rtrack's parts merged into Placement's, see
//! [`crate::upstream::allocations`]). Out: the write, and the cache after it.

use std::collections::BTreeSet;

use uuid::Uuid;

use super::{ReportOutcome, Reporter, Stop, Target};
use crate::upstream::allocations::{Amounts, Owner};
use crate::upstream::api::PlacementApi;
use crate::upstream::desired::DesiredState;
use crate::upstream::plan::CachedConsumer;

impl<P: PlacementApi> Reporter<P> {
    /// Writes one consumer's allocation; `false` when Placement refused it (over capacity, a
    /// class it does not have...): that consumer only is skipped and counted.
    pub(super) async fn write_allocation(
        &mut self,
        consumer: Uuid,
        resources: Amounts,
        owner: Owner,
        outcome: &mut ReportOutcome,
    ) -> Result<bool, Stop> {
        let cached = self.cache.consumers.get(&consumer).cloned();
        let generation = cached.as_ref().and_then(|c| c.generation);
        match self
            .api
            .put_allocation(consumer, &resources, generation, &owner)
            .await
        {
            Ok(()) => {
                self.note_written(consumer, cached, resources, owner);
                Ok(true)
            }
            Err(e) if e.is_concurrent_update() => Err(Stop::Conflict(Target::Consumer(consumer))),
            Err(e) if e.status().is_some_and(|s| (400..500).contains(&s)) => {
                outcome.allocations_rejected += 1;
                tracing::warn!(%consumer, error = %e, "placement refused the allocation; skipped");
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The cache after a successful write of `consumer`'s whole allocation.
    pub(super) fn note_written(
        &mut self,
        consumer: Uuid,
        before: Option<CachedConsumer>,
        resources: Amounts,
        owner: Owner,
    ) {
        let touched: BTreeSet<Uuid> = resources
            .keys()
            .chain(before.iter().flat_map(|c| c.resources.keys()))
            .copied()
            .collect();
        let generation = before.and_then(|c| c.generation);
        if resources.is_empty() {
            self.cache.consumers.remove(&consumer);
            self.cache.placement_allocations.remove(&consumer);
        } else {
            let on_tree: Amounts = resources
                .iter()
                .filter(|(rp, _)| self.cache.providers.contains_key(rp))
                .map(|(rp, c)| (*rp, c.clone()))
                .collect();
            self.cache.consumers.insert(
                consumer,
                CachedConsumer {
                    // Placement counts every write; a wrong guess costs one conflict and a
                    // re-read.
                    generation: Some(generation.map_or(1, |g| g + 1)),
                    owner: Some(owner),
                    resources,
                },
            );
            self.cache.placement_allocations.insert(consumer, on_tree);
        }
        self.mark_generations_stale(touched.into_iter());
    }

    /// Says once which claims' allocations cannot be written (Placement does not know the
    /// consumer and the claim named no project or user), and when the compute node's name in
    /// Placement is not `hypervisor_hostname` (rtrack never renames it).
    pub(super) fn warn_unwritable(&mut self, desired: &DesiredState) {
        let mut now: BTreeSet<String> = crate::upstream::plan::unowned(desired, &self.cache)
            .into_iter()
            .map(|c| format!("unowned:{c}"))
            .collect();
        let root_name = self.cache.providers.get(&desired.root).map(|p| &p.name);
        let wanted_name = desired.provider(desired.root).map(|p| &p.name);
        if let (Some(have), Some(want)) = (root_name, wanted_name) {
            if have != want {
                now.insert(format!("name:{have}:{want}"));
            }
        }
        for w in now.difference(&self.unwritable_warned) {
            match w.split_once(':') {
                Some(("unowned", c)) => {
                    tracing::warn!(target: "rtrack::upstream", consumer = %c, "the claim names no project_id or user_id and Placement does not know the consumer: its allocation is not written (Placement needs both; Nova's claims carry them)")
                }
                _ => {
                    tracing::warn!(target: "rtrack::upstream", provider = %desired.root, placement_name = ?root_name, hypervisor_hostname = ?wanted_name, "the compute node provider has another name in Placement than hypervisor_hostname; rtrack does not rename it (rename it, or set [host] hypervisor_hostname)")
                }
            }
        }
        self.unwritable_warned = now;
    }
}
