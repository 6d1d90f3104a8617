//! Reading Placement into the reporter's cache: the whole tree on a refresh, one provider or one
//! consumer after a generation conflict.
//!
//! In: what the desired state names (root, sharing provider, consumers). Out: the
//! [`ProviderCache`] the planner compares against.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use uuid::Uuid;

use super::Reporter;

/// Every how many refreshes everything is read again, generations or not (12: hourly at the
/// default `refresh_interval_s`).
pub(super) const FULL_READ_EVERY: u32 = 12;
use crate::upstream::api::PlacementApi;
use crate::upstream::desired::{DesiredState, ProviderRole};
use crate::upstream::plan::{CachedConsumer, CachedProvider, ProviderCache};
use crate::upstream::traits::COMPUTE_MANAGED_PCI_DEVICE;
use crate::upstream::UpstreamError;

impl<P: PlacementApi> Reporter<P> {
    /// Re-reads what rtrack manages: our tree, the sharing provider, the allocations on our
    /// tree, and (with `report_allocations`) the consumers whose allocations changed. Once the
    /// cache has been read, a provider whose generation Placement lists unchanged keeps its
    /// cached inventories, traits and aggregates: every write of those bumps its generation.
    /// Allocations are read at every refresh all the same, because removing a consumer's
    /// allocations (`DELETE /allocations`, or a rewrite that leaves a provider out) does not
    /// bump the providers it leaves; usages are summed from them. Every
    /// [`FULL_READ_EVERY`]th refresh reads everything (aggregates set below 1.19 bump nothing,
    /// and a restored database can repeat a generation) and negotiates the microversion again.
    pub(super) async fn refresh(&mut self, desired: &DesiredState) -> Result<(), UpstreamError> {
        let light = self.cache_known && self.refreshes_since_full_read + 1 < FULL_READ_EVERY;
        // Microversions: at the first refresh, at each full read (a Placement upgraded in
        // place is picked up within the hour) and after Placement refused ours (406).
        if !light || !self.negotiated {
            self.api.negotiate().await?;
            self.negotiated = true;
        }
        let old = light.then(|| std::mem::take(&mut self.cache));
        let result = self.refresh_from(desired, old.as_ref()).await;
        match (&result, old) {
            (Ok(()), _) => {
                self.needs_read.clear();
                self.refreshes_since_full_read = if light {
                    self.refreshes_since_full_read + 1
                } else {
                    0
                };
            }
            // Keep what was known: the next refresh compares generations with it again.
            (Err(_), Some(old)) => self.cache = old,
            (Err(_), None) => {}
        }
        result
    }

    async fn refresh_from(
        &mut self,
        desired: &DesiredState,
        old: Option<&ProviderCache>,
    ) -> Result<(), UpstreamError> {
        let mut cache = ProviderCache::default();
        self.read_providers(desired, old, &mut cache).await?;
        self.read_tree_allocations(desired, &mut cache).await?;
        if desired.allocations.is_some() {
            self.read_consumers(old, &mut cache).await?;
        }
        // Custom classes and traits in use on our providers exist: no need to PUT them again.
        for p in cache.providers.values() {
            let classes: Vec<String> = p
                .inventories
                .keys()
                .filter(|c| c.starts_with("CUSTOM_"))
                .cloned()
                .collect();
            let traits: Vec<String> = p
                .traits
                .iter()
                .filter(|t| t.starts_with("CUSTOM_"))
                .cloned()
                .collect();
            cache.classes.extend(classes);
            cache.custom_traits.extend(traits);
        }
        self.cache = cache;
        self.cache_valid = true;
        self.cache_known = true;
        self.refreshed_at = Some(Instant::now());
        Ok(())
    }

    /// Our tree's providers and the sharing provider into `cache`: those whose generation is
    /// unchanged since `old` (and not marked to read) as they were, the others read again.
    async fn read_providers(
        &mut self,
        desired: &DesiredState,
        old: Option<&ProviderCache>,
        cache: &mut ProviderCache,
    ) -> Result<(), UpstreamError> {
        let mut infos = self.api.providers_in_tree(desired.root).await?;
        for p in desired
            .providers
            .iter()
            .filter(|p| p.role == ProviderRole::Sharing)
        {
            if let Some(info) = self.api.get_provider(p.uuid).await? {
                infos.push(info);
            }
        }
        // Classes the compute node may still hold from an older nova-compute that rtrack
        // reports on children: their usage decides whether a reshape is needed.
        let root_classes = desired
            .provider(desired.root)
            .map(|p| p.inventories.keys().collect::<BTreeSet<_>>())
            .unwrap_or_default();
        let moving: BTreeSet<&String> = desired
            .providers
            .iter()
            .filter(|p| p.role == ProviderRole::Nested)
            .flat_map(|p| p.inventories.keys())
            .filter(|c| !root_classes.contains(c))
            .collect();
        let mut unchanged: BTreeSet<Uuid> = BTreeSet::new();
        for info in infos {
            if let Some(known) = old.and_then(|o| o.providers.get(&info.uuid)).filter(|c| {
                c.generation == info.generation
                    && c.generation != super::STALE_GENERATION
                    && !self.needs_read.contains(&c.uuid)
            }) {
                let mut p = known.clone();
                p.name = info.name;
                p.parent = info.parent_provider_uuid;
                unchanged.insert(p.uuid);
                cache.providers.insert(p.uuid, p);
                continue;
            }
            let mut p = CachedProvider {
                uuid: info.uuid,
                name: info.name,
                parent: info.parent_provider_uuid,
                generation: info.generation,
                ..Default::default()
            };
            self.read_provider_parts(&mut p).await?;
            let nested = desired
                .provider(p.uuid)
                .is_some_and(|d| d.role == ProviderRole::Nested);
            let old_root =
                p.uuid == desired.root && p.inventories.keys().any(|c| moving.contains(c));
            if p.usages.is_empty() && (nested || old_root) {
                p.usages = self.api.get_usages(p.uuid).await?;
            }
            cache.providers.insert(p.uuid, p);
        }
        Ok(())
    }

    /// Placement's allocations on our tree, and the usages summed from them where rtrack uses
    /// them. Allocations on our tree only: the sharing provider also carries other hosts'. Read
    /// at every refresh: reconciliation compares them with the local claims.
    async fn read_tree_allocations(
        &mut self,
        desired: &DesiredState,
        cache: &mut ProviderCache,
    ) -> Result<(), UpstreamError> {
        let tree: Vec<Uuid> = cache
            .providers
            .values()
            .filter(|p| {
                desired
                    .provider(p.uuid)
                    .is_none_or(|d| d.role != ProviderRole::Sharing)
            })
            .map(|p| p.uuid)
            .collect();
        for rp in &tree {
            let mut usages: BTreeMap<String, u64> = BTreeMap::new();
            for (consumer, resources) in self.api.provider_allocations(*rp).await? {
                if resources.is_empty() {
                    continue;
                }
                for (class, n) in &resources {
                    *usages.entry(class.clone()).or_default() += n;
                }
                cache
                    .placement_allocations
                    .entry(consumer)
                    .or_default()
                    .insert(*rp, resources);
            }
            // What GET usages answers (every class of the inventory, 0 included), without
            // asking and fresh where the provider was not read again: kept where rtrack uses it
            // (PCI children's floor, nested providers, the compute node's reshapes).
            if let Some(p) = cache.providers.get_mut(rp) {
                let nested = desired
                    .provider(p.uuid)
                    .is_some_and(|d| d.role == ProviderRole::Nested);
                if p.traits.contains(COMPUTE_MANAGED_PCI_DEVICE) || nested || p.uuid == desired.root
                {
                    let mut all: BTreeMap<String, u64> =
                        p.inventories.keys().map(|c| (c.clone(), 0)).collect();
                    all.extend(usages);
                    p.usages = all;
                }
            }
        }
        Ok(())
    }

    /// The consumers holding allocations on our tree: those known in `old` with the same
    /// allocations on our tree as they were, the others read.
    async fn read_consumers(
        &mut self,
        old: Option<&ProviderCache>,
        cache: &mut ProviderCache,
    ) -> Result<(), UpstreamError> {
        let consumers: BTreeSet<Uuid> = cache.placement_allocations.keys().copied().collect();
        for c in consumers {
            // Known, with the same allocations on our tree as when it was read: its
            // generation is the same too.
            let known = old.and_then(|o| o.consumers.get(&c)).filter(|_| {
                old.and_then(|o| o.placement_allocations.get(&c))
                    == cache.placement_allocations.get(&c)
            });
            if let Some(k) = known {
                cache.consumers.insert(c, k.clone());
                continue;
            }
            let a = self.api.get_consumer(c).await?;
            cache.consumers.insert(
                c,
                CachedConsumer {
                    generation: a.generation,
                    resources: a.resources,
                    owner: a.owner,
                },
            );
        }
        Ok(())
    }

    /// Inventories, traits, aggregates (and usages of PCI providers) of one provider.
    pub(super) async fn read_provider_parts(
        &mut self,
        p: &mut CachedProvider,
    ) -> Result<(), UpstreamError> {
        // The first read's generation: a write by someone else between these reads (an
        // operator's traits) moves the generation past it, so our next write conflicts and
        // re-reads. The last read's generation would vouch for traits read before that write,
        // and our next PUT traits would remove what the operator had just added.
        let (g, inv) = self.api.get_inventories(p.uuid).await?;
        let (_, traits) = self.api.get_traits(p.uuid).await?;
        let (_, aggs) = self.api.get_aggregates(p.uuid).await?;
        p.inventories = inv;
        p.traits = traits;
        p.aggregates = aggs;
        p.generation = g;
        p.usages = if p.traits.contains(COMPUTE_MANAGED_PCI_DEVICE) {
            self.api.get_usages(p.uuid).await?
        } else {
            Default::default()
        };
        Ok(())
    }

    pub(super) async fn reread_provider(
        &mut self,
        desired: &DesiredState,
        uuid: Uuid,
    ) -> Result<(), UpstreamError> {
        match self.api.get_provider(uuid).await? {
            None => {
                // Gone (deleted by someone, or Placement lost its database): a full refresh
                // will recreate what is missing.
                self.refresh(desired).await?;
            }
            Some(info) => {
                let mut p = CachedProvider {
                    uuid,
                    name: info.name,
                    parent: info.parent_provider_uuid,
                    generation: info.generation,
                    ..Default::default()
                };
                self.read_provider_parts(&mut p).await?;
                self.cache.providers.insert(uuid, p);
            }
        }
        Ok(())
    }

    pub(super) async fn reread_consumer(&mut self, consumer: Uuid) -> Result<(), UpstreamError> {
        let a = self.api.get_consumer(consumer).await?;
        if a.resources.is_empty() && a.generation.is_none() {
            self.cache.consumers.remove(&consumer);
        } else {
            self.cache.consumers.insert(
                consumer,
                CachedConsumer {
                    generation: a.generation,
                    resources: a.resources,
                    owner: a.owner,
                },
            );
        }
        Ok(())
    }
}
