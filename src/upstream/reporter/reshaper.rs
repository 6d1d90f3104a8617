//! The reshapes' requests: the consumers read, their moved allocations and the compute node's
//! inventory sent in one `POST /reshaper` (what moves is decided in [`super::reshape`]).

use std::collections::BTreeMap;

use super::{reshape, ReportOutcome, Reporter};
use crate::upstream::api::{ConsumerAllocations, PlacementApi};
use crate::upstream::desired::{DesiredState, ProviderRole};
use crate::upstream::plan::InventoryRecord;
use crate::upstream::UpstreamError;

/// What the reshaper call did.
enum Sent {
    Done,
    /// Placement refused the reshaper to rtrack's user (403): warned, nothing changed.
    Forbidden,
}

impl<P: PlacementApi> Reporter<P> {
    /// Moves `classes` from the compute node to its children with their allocations (see
    /// [`reshape`]); the cache is read again at the next cycle.
    pub(super) async fn reshape(
        &mut self,
        desired: &DesiredState,
        classes: &[String],
        outcome: &mut ReportOutcome,
    ) -> Result<(), UpstreamError> {
        let root = desired.root;
        let mut consumers = BTreeMap::new();
        for c in self.api.provider_allocations(root).await?.into_keys() {
            consumers.insert(c, self.api.get_consumer(c).await?);
        }
        let moved = match reshape::moved_allocations(desired, &self.cache, classes, &consumers) {
            Ok(m) => m,
            Err(why) => {
                tracing::warn!(target: "rtrack::upstream", classes = ?classes, "cannot move the compute node's inventory to its children: {why}; retried next cycle");
                return Ok(());
            }
        };
        let mut inventories = BTreeMap::new();
        if let Some(r) = self.cache.providers.get(&root) {
            let mut inv = r.inventories.clone();
            inv.retain(|class, _| !classes.contains(class));
            inventories.insert(root, (r.generation, inv));
        }
        for p in desired.providers.iter().filter(|p| {
            p.role == ProviderRole::Nested && classes.iter().any(|c| p.inventories.contains_key(c))
        }) {
            if let Some(c) = self.cache.providers.get(&p.uuid) {
                inventories.insert(p.uuid, (c.generation, c.inventories.clone()));
            }
        }
        if let Sent::Forbidden = self.send_reshape(&inventories, &moved).await? {
            return Ok(());
        }
        tracing::info!(target: "rtrack::upstream", classes = ?classes, consumers = moved.len(), "moved the compute node's inventory and its allocations to the children (Placement's reshaper)");
        outcome.reshaped.extend(classes.iter().cloned());
        self.invalidate();
        Ok(())
    }

    /// Turns the `VCPU` of pinned claims into `PCPU` on the compute node (see
    /// [`reshape::pcpu`]); the cache is read again at the next cycle.
    pub(super) async fn reshape_pinned_vcpus(
        &mut self,
        desired: &DesiredState,
        outcome: &mut ReportOutcome,
    ) -> Result<(), UpstreamError> {
        let root = desired.root;
        let generation = self.current_generation(root).await?;
        if self.pcpu_fruitless_at == Some(generation) {
            return Ok(());
        }
        let mut consumers = BTreeMap::new();
        for (c, held) in self.api.provider_allocations(root).await? {
            if held.contains_key("VCPU") && desired.expected.contains_key(&c) {
                consumers.insert(c, self.api.get_consumer(c).await?);
            }
        }
        let moved = reshape::pcpu::moved_allocations(desired, &consumers);
        let inventory = reshape::pcpu::root_inventory(desired, &self.cache, &moved, &consumers);
        let (false, Some(inventory)) = (moved.is_empty(), inventory) else {
            tracing::info!(target: "rtrack::upstream", "pinned claims count PCPU that Placement holds as VCPU for consumers rtrack has no claim for; left as they are");
            self.pcpu_fruitless_at = Some(generation);
            return Ok(());
        };
        let inventories = BTreeMap::from([(root, (generation, inventory))]);
        if let Sent::Forbidden = self.send_reshape(&inventories, &moved).await? {
            return Ok(());
        }
        tracing::info!(target: "rtrack::upstream", consumers = moved.len(), "moved pinned guests' VCPU allocations to PCPU on the compute node (Placement's reshaper)");
        outcome.reshaped.push("VCPU->PCPU".to_string());
        self.pcpu_fruitless_at = None;
        self.invalidate();
        Ok(())
    }

    async fn send_reshape(
        &mut self,
        inventories: &BTreeMap<uuid::Uuid, (u64, BTreeMap<String, InventoryRecord>)>,
        moved: &BTreeMap<uuid::Uuid, ConsumerAllocations>,
    ) -> Result<Sent, UpstreamError> {
        match self.api.reshape(inventories, moved).await {
            Ok(()) => Ok(Sent::Done),
            Err(e) if e.status() == Some(403) => {
                tracing::warn!(target: "rtrack::upstream", error = %e, "Placement refuses the reshaper to rtrack's user: give it the service role (as nova-compute's user has); the compute node keeps its old inventory meanwhile");
                Ok(Sent::Forbidden)
            }
            Err(e) => Err(e),
        }
    }
}
