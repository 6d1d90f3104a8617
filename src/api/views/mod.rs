//! The API's answers as types: each serializes to the answer a route gives (field order is key
//! order) and describes itself (`utoipa::ToSchema`), so the OpenAPI document's answer schemas
//! are derived from the same definitions the routes answer with.
//!
//! In: the tracker's records and the report loop's results. Out: the answers, one file per
//! subject: [`claims`] (claims, moves, aborts, state updates), [`pci`], [`host`] (health,
//! usage, NUMA) and [`placement`] (reconcile, refresh, adopt).

pub mod claims;
pub mod host;
pub mod pci;
pub mod placement;

pub use claims::*;
pub use host::*;
pub use pci::*;
pub use placement::*;

/// Every answer type, registered as components of the document (with the types they use).
#[derive(utoipa::OpenApi)]
#[openapi(components(schemas(
    Health,
    Usage,
    Numa,
    ClaimView,
    ClaimAnswer,
    ClaimShown,
    DryRun,
    MoveClaim,
    MoveDryRun,
    MigrationView,
    Aborted,
    MigrationFinished,
    InstanceUpdated,
    PciDevices,
    Released,
    Attached,
    Detached,
    Reconciled,
    Refreshed,
    AdoptionPlanView
)))]
pub struct Views;

/// The component schemas of every answer type, as JSON (OpenAPI 3.1).
pub fn schemas() -> serde_json::Map<String, serde_json::Value> {
    let components = <Views as utoipa::OpenApi>::openapi().components;
    components
        .and_then(|c| serde_json::to_value(c.schemas).ok())
        .and_then(|v| match v {
            serde_json::Value::Object(m) => Some(m),
            _ => None,
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
