//! Writing a provider as `apply` plans it: creating it (adopting ours when Placement already has
//! it) and replacing its inventories (keeping the classes still in use).
//!
//! In: one `CreateProvider` or `PutInventories` [`Action`](crate::upstream::plan::Action).
//! Out: the write, and the cache after it.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::{conflict_on, ReportOutcome, Reporter, Stop, Target};
use crate::upstream::api::PlacementApi;
use crate::upstream::plan::{CachedProvider, InventoryRecord};
use crate::upstream::UpstreamError;

impl<P: PlacementApi> Reporter<P> {
    /// Creates provider `uuid`; a duplicate name is a conflict when the provider is ours
    /// (re-read and plan again), fatal when another provider has the name.
    pub(super) async fn create_provider(
        &mut self,
        uuid: Uuid,
        name: String,
        parent: Option<Uuid>,
    ) -> Result<(), Stop> {
        match self.api.create_provider(uuid, &name, parent).await {
            Ok(info) => {
                self.cache.providers.insert(
                    uuid,
                    CachedProvider {
                        uuid,
                        name: info.name,
                        parent: info.parent_provider_uuid,
                        generation: info.generation,
                        ..Default::default()
                    },
                );
            }
            Err(e) if e.status() == Some(409) && e.code() == Some("placement.duplicate_name") => {
                // Our uuid exists (created concurrently, or the cache missed it):
                // adopt it. Otherwise another provider has our name.
                if self.api.get_provider(uuid).await?.is_some() {
                    return Err(Stop::Conflict(Target::Provider(uuid)));
                }
                return Err(match self.api.provider_by_name(&name).await? {
                    Some(theirs) => Stop::Fatal(UpstreamError::NameClash {
                        name,
                        ours: uuid,
                        theirs: theirs.uuid,
                    }),
                    None => Stop::Fatal(e),
                });
            }
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    /// Replaces provider `uuid`'s inventories; when Placement says a class to remove is in use,
    /// writes the rest with that class's old record kept, and counts it.
    pub(super) async fn write_inventories(
        &mut self,
        uuid: Uuid,
        inventories: BTreeMap<String, InventoryRecord>,
        outcome: &mut ReportOutcome,
    ) -> Result<(), Stop> {
        let g = self.current_generation(uuid).await?;
        match self.api.put_inventories(uuid, g, &inventories).await {
            Ok(ng) => {
                let p = self.provider_mut(uuid);
                p.generation = ng;
                p.inventories = inventories;
            }
            Err(e) if e.is_inventory_in_use() => {
                // Keep the records of the classes that were to go; write the rest.
                let mut kept = inventories.clone();
                if let Some(c) = self.cache.providers.get(&uuid) {
                    for (class, rec) in &c.inventories {
                        kept.entry(class.clone()).or_insert_with(|| rec.clone());
                    }
                }
                outcome.inventory_in_use += 1;
                if outcome.inventory_in_use_details.len() < 16 {
                    let detail = e.detail().unwrap_or_default();
                    outcome
                        .inventory_in_use_details
                        .push((uuid, detail.chars().take(1000).collect()));
                }
                tracing::warn!(provider = %uuid, error = %e, "inventory in use: keeping the old records of the classes to remove; retrying next cycle");
                match self.api.put_inventories(uuid, g, &kept).await {
                    Ok(ng) => {
                        let p = self.provider_mut(uuid);
                        p.generation = ng;
                        p.inventories = kept;
                    }
                    Err(e) => {
                        return Err(
                            conflict_on(&e, Target::Provider(uuid)).unwrap_or(Stop::Fatal(e))
                        )
                    }
                }
            }
            Err(e) => return Err(conflict_on(&e, Target::Provider(uuid)).unwrap_or(Stop::Fatal(e))),
        }
        Ok(())
    }
}
