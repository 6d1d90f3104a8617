//! The bodies of the routes that talk to Placement: `POST /v1/reconcile`, `POST /v1/adopt` and
//! `POST /v1/refresh` (each may be empty: its defaults).

use serde::{Deserialize, Serialize};

use crate::api::extract::JsonBody;
use crate::probes::pci::PciAddress;

/// `POST /v1/reconcile`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ReconcileRequest)]
pub struct ReconcileBody {
    /// Write what rtrack owns (its inventories; with `report_allocations`, the allocations),
    /// then read Placement again. Default false: read and compare only.
    #[serde(default)]
    pub fix: bool,
    /// Consumers with no local claim whose part on this host's providers to remove (their
    /// other parts kept): each refused while it holds a claim here, was released here, or was
    /// first seen unclaimed less than `[placement] unclaimed_grace_s` ago.
    #[serde(default)]
    #[schema(schema_with = uuid_list_schema)]
    pub remove_unclaimed: Vec<uuid::Uuid>,
}

/// `POST /v1/adopt`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = AdoptRequest)]
pub struct AdoptBody {
    /// Commit the plan (one transaction). Default false: the plan only.
    #[serde(default)]
    pub apply: bool,
    /// Which PCI devices instances have, when the operator knows; an instance not named gets
    /// free devices of the providers it holds, in Nova's pool order (the highest addresses first).
    #[serde(default)]
    pub devices: Vec<DeviceMapEntry>,
    /// Adopt consumers of no type as instances (Placement before 1.38, or allocations written
    /// by a Nova that did not set types), once the operator checked no move is in progress.
    #[serde(default)]
    pub assume_instances: bool,
}

/// One instance's devices in an adoption's device map.
#[derive(Debug, Clone, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeviceMapEntry {
    /// The instance.
    #[schema(format = "uuid")]
    pub instance_uuid: String,
    /// Its devices' PCI addresses (`dddd:bb:ss.f`).
    #[schema(schema_with = address_list_schema)]
    pub addresses: Vec<String>,
}

/// An array of UUIDs (what `uuid::Uuid` parses: the hyphenated form is documented).
fn uuid_list_schema() -> utoipa::openapi::schema::Array {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, SchemaFormat, Type};
    ArrayBuilder::new()
        .items(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::Custom("uuid".into())))
                .pattern(Some(
                    "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$",
                )),
        )
        .build()
}

/// An array of PCI addresses, each matching [`PciAddress::PATTERN`] (what the parser takes).
fn address_list_schema() -> utoipa::openapi::schema::Array {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Type};
    ArrayBuilder::new()
        .items(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(PciAddress::PATTERN)),
        )
        .build()
}

/// `POST /v1/refresh`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = RefreshRequest)]
pub struct RefreshBody {
    /// DISK_GB totals from the caller, in GiB (only with `[host] disk_source = "caller"`): kept
    /// in the state directory and used by this and every later audit until the next.
    #[serde(default)]
    pub disk_gb: Option<crate::api::disk_facts::DiskTotals>,
}

impl JsonBody for ReconcileBody {
    const WHAT: &'static str = "a reconcile request";
}

impl JsonBody for AdoptBody {
    const WHAT: &'static str = "an adopt request";
}

impl JsonBody for RefreshBody {
    const WHAT: &'static str = "a refresh request";
}
