//! Reading what Placement holds on the compute node's tree for adoption: the providers, and
//! every consumer's allocations there with its owner.
//!
//! In: the desired state (which tree, which providers are rtrack's). Out: [`HoldingsRead`]: the
//! holdings, and the desired state with the providers nova-compute created in place of
//! rtrack's own (and which those are).

use std::collections::BTreeMap;

use uuid::Uuid;

use super::{ReportOutcome, Reporter};
use crate::probes::pci::PciAddress;
use crate::upstream::adoption::{HeldConsumer, HeldProvider, PlacementHoldings};
use crate::upstream::api::PlacementApi;
use crate::upstream::desired::{DesiredState, ProviderRole};
use crate::upstream::UpstreamError;

/// What [`Reporter::read_holdings`] read.
#[derive(Debug, Clone)]
pub struct HoldingsRead {
    /// The tree and its consumers.
    pub holdings: PlacementHoldings,
    /// The desired state with nova-compute's providers in place of rtrack's.
    pub desired: DesiredState,
    /// nova-compute's PCI providers, by the address each is named after.
    pub adopted_pci: BTreeMap<PciAddress, Uuid>,
    /// nova-compute's vGPU and encryption providers: rtrack's uuid -> theirs.
    pub adopted_nested: BTreeMap<Uuid, Uuid>,
    /// Placement has no compute node provider of rtrack's uuid: what it has instead.
    pub root_problem: Option<String>,
}

impl<P: PlacementApi> Reporter<P> {
    /// Reads the tree, its allocations and each consumer's owner (one `GET /allocations/{c}`
    /// per consumer). Writes nothing.
    pub async fn read_holdings(
        &mut self,
        desired: &DesiredState,
    ) -> Result<HoldingsRead, UpstreamError> {
        self.refresh(desired).await?;
        let mut outcome = ReportOutcome::default();
        let adopted = self
            .with_adoptions(desired, &mut outcome)
            .unwrap_or_else(|| desired.clone());
        let mut holdings = PlacementHoldings {
            root: adopted.root,
            ..Default::default()
        };
        for p in self.cache.providers.values().filter(|p| {
            adopted
                .provider(p.uuid)
                .is_none_or(|d| d.role != ProviderRole::Sharing)
        }) {
            holdings.providers.insert(
                p.uuid,
                HeldProvider {
                    name: p.name.clone(),
                    parent: p.parent,
                },
            );
        }
        let consumers: Vec<Uuid> = self.cache.placement_allocations.keys().copied().collect();
        for c in consumers {
            // The consumer's own answer: read now, and with the sharing provider's DISK_GB,
            // which the tree's listing leaves out.
            let a = self.api.get_consumer(c).await?;
            let resources: crate::upstream::reconcile::Amounts = a
                .resources
                .into_iter()
                .filter(|(rp, r)| self.cache.providers.contains_key(rp) && !r.is_empty())
                .collect();
            if resources.is_empty() {
                continue;
            }
            holdings.consumers.insert(
                c,
                HeldConsumer {
                    owner: a.owner,
                    resources,
                },
            );
        }
        let root_problem = if self.cache.providers.contains_key(&adopted.root) {
            None
        } else {
            let name = adopted
                .provider(adopted.root)
                .map(|r| r.name.clone())
                .unwrap_or_default();
            Some(match self.api.provider_by_name(&name).await? {
                Some(p) => format!(
                    "Placement's compute node provider named {name:?} is {}, not this node's {}: this state directory was started before the take-over; stop rtrackd, move the state directory aside and start with [host] compute_node_uuid = \"{}\"",
                    p.uuid, adopted.root, p.uuid
                ),
                None => format!(
                    "Placement has no compute node provider {} (named {name:?}) yet: let rtrackd report once, then adopt",
                    adopted.root
                ),
            })
        };
        Ok(HoldingsRead {
            holdings,
            desired: adopted,
            adopted_pci: outcome.adopted_pci_providers,
            adopted_nested: outcome.adopted_nested_providers,
            root_problem,
        })
    }
}
