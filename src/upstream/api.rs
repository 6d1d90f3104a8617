//! What the reporter needs of Placement, as typed calls behind the [`PlacementApi`] trait, so
//! its logic does not depend on HTTP ([`super::client::HttpPlacement`] is the HTTP one; the
//! tests have an in-memory one). In: providers, inventories, traits, allocations to write.
//! Out: what Placement holds, or an [`UpstreamError`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Deserialize;
use uuid::Uuid;

use super::allocations::{Amounts, Owner};
use super::plan::InventoryRecord;
use super::UpstreamError;

/// Requests sent, by kind (`get_inventories`, `put_traits`, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestCounts(pub BTreeMap<&'static str, u64>);

impl RequestCounts {
    /// All requests.
    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }

    /// Requests of one kind.
    pub fn get(&self, kind: &str) -> u64 {
        self.0.get(kind).copied().unwrap_or(0)
    }

    /// `self - earlier`, per kind (requests made since `earlier` was taken).
    pub fn since(&self, earlier: &RequestCounts) -> RequestCounts {
        RequestCounts(
            self.0
                .iter()
                .map(|(k, v)| (*k, v - earlier.get(k)))
                .filter(|(_, v)| *v > 0)
                .collect(),
        )
    }
}

impl fmt::Display for RequestCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
        write!(f, "{} ({})", self.total(), parts.join(", "))
    }
}

/// A provider as Placement lists it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ProviderInfo {
    /// The provider's uuid.
    pub uuid: Uuid,
    /// The provider's name.
    pub name: String,
    /// Provider generation: Placement refuses a write to the provider that gives a stale one.
    pub generation: u64,
    /// Parent provider's uuid; absent or null for a root provider.
    #[serde(default)]
    pub parent_provider_uuid: Option<Uuid>,
}

/// A consumer's allocations: generation and provider -> class -> amount.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConsumerAllocations {
    /// Consumer generation; `None` when Placement has no such consumer.
    pub generation: Option<u64>,
    /// provider -> class -> amount.
    pub resources: BTreeMap<Uuid, BTreeMap<String, u64>>,
    /// project, user, consumer type (when the consumer exists).
    pub owner: Option<Owner>,
}

/// The Placement calls the reporter makes. Implemented over HTTP by `HttpPlacement`; a test
/// double can implement it to drive the reporter without a server.
#[allow(async_fn_in_trait)]
pub trait PlacementApi {
    /// `GET /`: picks the microversion to use.
    async fn negotiate(&mut self) -> Result<(u32, u32), UpstreamError>;
    /// `GET /resource_providers?in_tree={root}`.
    async fn providers_in_tree(&mut self, root: Uuid) -> Result<Vec<ProviderInfo>, UpstreamError>;
    /// `GET /resource_providers/{uuid}` (`None` on 404).
    async fn get_provider(&mut self, uuid: Uuid) -> Result<Option<ProviderInfo>, UpstreamError>;
    /// `GET /resource_providers?name={name}`.
    async fn provider_by_name(&mut self, name: &str)
        -> Result<Option<ProviderInfo>, UpstreamError>;
    /// `POST /resource_providers`.
    async fn create_provider(
        &mut self,
        uuid: Uuid,
        name: &str,
        parent: Option<Uuid>,
    ) -> Result<ProviderInfo, UpstreamError>;
    /// `PUT /resource_providers/{uuid}` (rename; does not bump the generation).
    async fn rename_provider(
        &mut self,
        uuid: Uuid,
        name: &str,
        parent: Option<Uuid>,
    ) -> Result<(), UpstreamError>;
    /// `DELETE /resource_providers/{uuid}`.
    async fn delete_provider(&mut self, uuid: Uuid) -> Result<(), UpstreamError>;
    /// `GET .../inventories`: generation and records.
    async fn get_inventories(
        &mut self,
        uuid: Uuid,
    ) -> Result<(u64, BTreeMap<String, InventoryRecord>), UpstreamError>;
    /// `PUT .../inventories`: the new generation.
    async fn put_inventories(
        &mut self,
        uuid: Uuid,
        generation: u64,
        inventories: &BTreeMap<String, InventoryRecord>,
    ) -> Result<u64, UpstreamError>;
    /// `GET .../traits`.
    async fn get_traits(&mut self, uuid: Uuid) -> Result<(u64, BTreeSet<String>), UpstreamError>;
    /// `PUT .../traits`: the new generation.
    async fn put_traits(
        &mut self,
        uuid: Uuid,
        generation: u64,
        traits: &BTreeSet<String>,
    ) -> Result<u64, UpstreamError>;
    /// `GET .../aggregates`.
    async fn get_aggregates(&mut self, uuid: Uuid) -> Result<(u64, BTreeSet<Uuid>), UpstreamError>;
    /// `PUT .../aggregates`: the new generation.
    async fn put_aggregates(
        &mut self,
        uuid: Uuid,
        generation: u64,
        aggregates: &BTreeSet<Uuid>,
    ) -> Result<u64, UpstreamError>;
    /// `GET .../usages`.
    async fn get_usages(&mut self, uuid: Uuid) -> Result<BTreeMap<String, u64>, UpstreamError>;
    /// `GET .../allocations`: consumer -> class -> amount, on this provider.
    async fn provider_allocations(
        &mut self,
        uuid: Uuid,
    ) -> Result<BTreeMap<Uuid, BTreeMap<String, u64>>, UpstreamError>;
    /// `GET /allocations/{consumer}`.
    async fn get_consumer(&mut self, consumer: Uuid) -> Result<ConsumerAllocations, UpstreamError>;
    /// `PUT /allocations/{consumer}`: the consumer's whole allocation (empty: removes it, safely
    /// with the generation) and its owner. `generation` `None` means "the consumer must not
    /// exist yet".
    async fn put_allocation(
        &mut self,
        consumer: Uuid,
        resources: &Amounts,
        generation: Option<u64>,
        owner: &Owner,
    ) -> Result<(), UpstreamError>;
    /// `POST /reshaper` (1.30): in one transaction, the providers' inventories (generation and
    /// records) and the consumers' whole allocations replaced.
    async fn reshape(
        &mut self,
        inventories: &BTreeMap<Uuid, (u64, BTreeMap<String, InventoryRecord>)>,
        allocations: &BTreeMap<Uuid, ConsumerAllocations>,
    ) -> Result<(), UpstreamError>;
    /// `PUT /resource_classes/{name}`.
    async fn ensure_resource_class(&mut self, name: &str) -> Result<(), UpstreamError>;
    /// `PUT /traits/{name}`.
    async fn ensure_trait(&mut self, name: &str) -> Result<(), UpstreamError>;
    /// Requests sent so far, by kind.
    fn counts(&self) -> RequestCounts;
}

/// The microversion that gave consumers a type (`consumer_type`, required in writes from then).
pub const CONSUMER_TYPES: (u32, u32) = (1, 38);
/// The last one without: writes there leave an existing consumer's type as it is.
pub const BEFORE_CONSUMER_TYPES: (u32, u32) = (1, 36);

/// A type Placement accepts in a write (`^[A-Z0-9_]+$`); it reads back "unknown" for consumers
/// written without one.
pub fn sendable_type(t: &str) -> bool {
    !t.is_empty()
        && t.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// The `POST /reshaper` body: each provider's inventory with its generation, each consumer's
/// whole allocation with its owner and generation (`consumer_type` only `with_types`).
pub fn reshaper_body(
    inventories: &BTreeMap<Uuid, (u64, BTreeMap<String, InventoryRecord>)>,
    allocations: &BTreeMap<Uuid, ConsumerAllocations>,
    with_types: bool,
) -> serde_json::Value {
    use serde_json::json;
    let inventories: BTreeMap<Uuid, serde_json::Value> = inventories
        .iter()
        .map(|(rp, (generation, inv))| {
            (
                *rp,
                json!({"resource_provider_generation": generation, "inventories": inv}),
            )
        })
        .collect();
    let allocations: BTreeMap<Uuid, serde_json::Value> = allocations
        .iter()
        .map(|(c, a)| {
            let (project, user, ctype) = a
                .owner
                .clone()
                .unwrap_or_else(|| ("unknown".into(), "unknown".into(), String::new()));
            let per_rp: BTreeMap<Uuid, serde_json::Value> = a
                .resources
                .iter()
                .map(|(rp, r)| (*rp, json!({"resources": r})))
                .collect();
            let mut body = json!({
                "allocations": per_rp,
                "project_id": project,
                "user_id": user,
                "consumer_generation": a.generation,
            });
            if with_types {
                body["consumer_type"] = json!(if ctype.is_empty() {
                    "INSTANCE".to_string()
                } else {
                    ctype
                });
            }
            (*c, body)
        })
        .collect();
    json!({"inventories": inventories, "allocations": allocations})
}
