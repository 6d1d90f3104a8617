//! Request bodies of the local API (every one of them: here and in the files below) and their
//! translation into tracker requests. Unknown fields are errors (a misspelt `dry_run` must not
//! claim for real); every message names the field.
//!
//! In: request bodies as JSON. Out: [`ParsedClaim`] and [`ParsedMove`] (the tracker's requests)
//! or an error naming the field.
//!
//! A claim carries what the instance asks for in one of two forms, as Nova's RPC API does:
//!
//! - `"request_spec"`: a RequestSpec primitive (`nova_object.name` = `RequestSpec`), or
//! - `"legacy": {"request_spec": {...}, "filter_properties": {...}}`: the dicts older Nova
//!   services send (`RequestSpec.from_primitives`).
//!
//! and optionally `"instance"` with who the instance is (uuid, project, user, states, host).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::error::{ApiError, ErrorCode};
use crate::echo::{bounded, bounded_message, quoted};
use crate::inventory::resources::ResourceClass;
use crate::objects::instance::InstanceNUMATopology;
use crate::objects::request_spec::RequestSpec;
use crate::objects::Versioned;
use crate::tracker::model::InstanceRequest;
use crate::tracker::numa::nova::fitted_from_object;
use crate::tracker::numa::FittedTopology;
use crate::tracker::pci::AliasTable;
use crate::tracker::request::from_request_spec;
use crate::tracker::{InstanceInfo, InstanceUpdate, MoveType};
use utoipa::ToSchema;

/// The legacy dicts.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = LegacyRequest)]
pub struct LegacyBody {
    /// The legacy `request_spec` dict (instance_type, instance_properties, num_instances, image).
    #[schema(value_type = Object)]
    pub request_spec: Value,
    /// The legacy `filter_properties` dict (default `{}`).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub filter_properties: Option<Value>,
}

/// Who the instance is.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Instance)]
pub struct InstanceBody {
    /// Uuid (default: the request spec's `instance_uuid`; both given must agree).
    #[schema(format = "uuid")]
    pub uuid: Option<String>,
    /// Project (default: the request spec's).
    #[schema(max_length = 255)]
    pub project_id: Option<String>,
    /// User (default: the request spec's).
    #[schema(max_length = 255)]
    pub user_id: Option<String>,
    /// Guest OS type.
    #[schema(max_length = 255)]
    pub os_type: Option<String>,
    /// VM state (default `building`).
    #[schema(schema_with = nova_enums::vm_state_schema)]
    pub vm_state: Option<String>,
    /// Task state.
    #[schema(schema_with = nova_enums::task_state_schema)]
    pub task_state: Option<String>,
    /// Host the instance is on now (for a move: the source).
    #[schema(max_length = 255)]
    pub host: Option<String>,
    /// Node the instance is on now (for a move: the source).
    #[schema(max_length = 255)]
    pub node: Option<String>,
    /// Where its NUMA cells are now (Nova's instance `numa_topology`, an InstanceNUMATopology
    /// primitive): for a move from a host that is not this one (a live migration keeps its
    /// page size).
    #[schema(value_type = Option<Object>)]
    pub numa_topology: Option<Value>,
}

/// What an instance asks for, in either form.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CurrentRequest)]
pub struct SpecBody {
    /// RequestSpec primitive.
    #[schema(value_type = Option<Object>)]
    pub request_spec: Option<Value>,
    /// Legacy dicts.
    pub legacy: Option<LegacyBody>,
}

/// `POST /v1/claims`: request_spec or legacy, not both.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ClaimRequest)]
pub struct ClaimBody {
    /// The instance.
    pub instance: Option<InstanceBody>,
    /// RequestSpec primitive (nova_object.name = RequestSpec).
    #[schema(value_type = Option<Object>)]
    pub request_spec: Option<Value>,
    /// Legacy dicts.
    pub legacy: Option<LegacyBody>,
    /// Placement's allocation for the instance, by provider uuid (as Nova's compute has it at
    /// spawn): vGPUs and encryption contexts are taken from the providers it names.
    pub allocations: Option<std::collections::BTreeMap<String, AllocationBody>>,
    /// The guest already runs on this host (one taken over from Nova's own tracker): count it
    /// where it is, as `instance.numa_topology` places it (host cells, pins, page size) and
    /// with the PCI devices named here, instead of fitting it again; refused (409) when that
    /// does not match the request or would overcommit.
    pub as_placed: Option<PlacedBody>,
}

impl crate::api::extract::JsonBody for ClaimBody {
    const WHAT: &'static str = "a claim";
}

/// One provider's part of an allocation, in Placement's form.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AllocationBody {
    /// Amount per resource class.
    pub resources: std::collections::BTreeMap<String, i64>,
    /// The provider's generation, as Placement answers it (not used).
    pub generation: Option<i64>,
}

/// Placement's allocation as provider -> class -> amount: the classes rtrack accounts, others
/// (a port's bandwidth, Placement's standard classes) left out.
pub fn parse_allocations(
    given: Option<&std::collections::BTreeMap<String, AllocationBody>>,
) -> Result<
    std::collections::BTreeMap<uuid::Uuid, std::collections::BTreeMap<ResourceClass, i64>>,
    ApiError,
> {
    let mut out = std::collections::BTreeMap::new();
    for (rp, part) in given.into_iter().flatten() {
        let field = format!("allocations.{}", bounded(rp));
        let uuid = uuid::Uuid::parse_str(rp).map_err(|_| {
            ApiError::invalid(&field, format!("{} is not a provider uuid", quoted(rp)))
        })?;
        let mut classes = std::collections::BTreeMap::new();
        for (name, amount) in &part.resources {
            let f = format!("{field}.resources.{}", bounded(name));
            if !(0..=1 << 40).contains(amount) {
                return Err(ApiError::invalid(
                    &f,
                    format!("{amount} is not an amount (0 to 2^40)"),
                ));
            }
            match ResourceClass::from_name(name) {
                Ok(c) => {
                    classes.insert(c, *amount);
                }
                Err(_)
                    if !name.is_empty()
                        && name.len() <= 255
                        && name
                            .bytes()
                            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_') => {
                }
                Err(e) => return Err(ApiError::invalid(&f, e)),
            }
        }
        out.insert(uuid, classes);
    }
    Ok(out)
}

/// `POST /v1/migrations`: request_spec or legacy, not both.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = MigrationRequest)]
pub struct MigrationBody {
    /// The instance as it is now (host/node = the source).
    pub instance: Option<InstanceBody>,
    /// What the instance asks for at the destination: RequestSpec primitive.
    #[schema(value_type = Option<Object>)]
    pub request_spec: Option<Value>,
    /// ... or legacy dicts.
    pub legacy: Option<LegacyBody>,
    /// What it has now (default: what this host records for it, else the same as the new).
    pub current: Option<SpecBody>,
    /// `resize`, `migration`, `live-migration` or `evacuation` (default: resize when the flavor
    /// changes, else migration).
    #[schema(value_type = Option<nova_enums::MoveTypeSchema>)]
    pub move_type: Option<MoveType>,
    /// Nova's migration id (default: rtrack assigns one).
    #[schema(minimum = 1)]
    pub migration_id: Option<i64>,
    /// The migration's uuid (default: derived from the id).
    #[schema(format = "uuid")]
    pub migration_uuid: Option<String>,
    /// Source host (default: the instance's host).
    #[schema(max_length = 255)]
    pub source_compute: Option<String>,
    /// Source node (default: the instance's node).
    #[schema(max_length = 255)]
    pub source_node: Option<String>,
    /// Destination host (default: this host).
    #[schema(max_length = 255)]
    pub dest_compute: Option<String>,
    /// Destination node (default: this node).
    #[schema(max_length = 255)]
    pub dest_node: Option<String>,
    /// Placement's allocation for the instance at the destination, by provider uuid.
    pub allocations: Option<std::collections::BTreeMap<String, AllocationBody>>,
}

impl crate::api::extract::JsonBody for MigrationBody {
    const WHAT: &'static str = "a migration";
}

/// Longest name, id or state accepted in a body's own string fields (Nova's columns for
/// hosts, nodes, projects and users are 255 characters).
pub const MAX_NAME: usize = 255;
/// Longest string accepted anywhere inside a RequestSpec or the legacy dicts (Nova keeps them
/// in TEXT columns of 64 KiB).
pub const MAX_SPEC_STRING: usize = 65_535;

/// Parses a JSON body into `T`, naming what was wrong: every 400 names the JSON path of the
/// field, and quotes of what was sent are bounded.
pub fn parse_body<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::new(
            ErrorCode::MalformedJson,
            format!("the body is empty; expected a JSON object ({what})"),
        )
        .with_details(serde_json::json!({"field": "(body)"})));
    }
    let mut value: Value = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::new(
            ErrorCode::MalformedJson,
            format!(
                "the body is not valid JSON: {}",
                bounded_message(&e.to_string())
            ),
        )
        .with_details(
            serde_json::json!({"field": "(body)", "line": e.line(), "column": e.column()}),
        )
    })?;
    integral_numbers(&mut value);
    if !value.is_object() {
        return Err(ApiError::invalid(
            "(body)",
            format!(
                "is {}; expected a JSON object ({what})",
                crate::objects::base::describe(&value)
            ),
        ));
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." {
            "(body)".to_string()
        } else {
            path
        };
        ApiError::invalid(
            &bounded(&field),
            format!("{what}: {}", bounded_message(&e.into_inner().to_string())),
        )
    })
}

/// Refuses a string field longer than `max` characters, naming it.
fn check_len(field: &str, value: Option<&str>, max: usize) -> Result<(), ApiError> {
    match value {
        Some(v) if v.chars().count() > max => Err(ApiError::invalid(
            field,
            format!(
                "{} is {} characters long; at most {max} are accepted",
                quoted(v),
                v.chars().count()
            ),
        )),
        _ => Ok(()),
    }
}

/// Refuses any string longer than [`MAX_SPEC_STRING`] inside `value`, naming its path.
pub fn check_spec_strings(value: &Value, path: &str) -> Result<(), ApiError> {
    match value {
        Value::String(s) => check_len(path, Some(s), MAX_SPEC_STRING),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, v)| check_spec_strings(v, &format!("{path}[{i}]"))),
        Value::Object(m) => m.iter().try_for_each(|(k, v)| {
            check_len(&format!("{path} (a key)"), Some(k), MAX_SPEC_STRING)?;
            check_spec_strings(v, &format!("{path}.{}", bounded(k)))
        }),
        _ => Ok(()),
    }
}

/// Bounds the string fields of a state update.
pub fn check_update(up: &InstanceUpdate) -> Result<(), ApiError> {
    for (name, value) in [
        ("vm_state", &up.vm_state),
        ("task_state", &up.task_state),
        ("host", &up.host),
        ("node", &up.node),
    ] {
        check_len(name, value.as_deref(), MAX_NAME)?;
    }
    Ok(())
}

impl InstanceBody {
    /// Bounds every field; `prefix` is the body's path to it (`instance.`).
    fn check(&self, prefix: &str) -> Result<(), ApiError> {
        for (name, value) in [
            ("uuid", &self.uuid),
            ("project_id", &self.project_id),
            ("user_id", &self.user_id),
            ("os_type", &self.os_type),
            ("vm_state", &self.vm_state),
            ("task_state", &self.task_state),
            ("host", &self.host),
            ("node", &self.node),
        ] {
            check_len(&format!("{prefix}{name}"), value.as_deref(), MAX_NAME)?;
        }
        // Checked wherever it is sent, though only a move reads it.
        if let Some(v) = self.numa_topology.as_ref().filter(|v| !v.is_null()) {
            let field = format!("{prefix}numa_topology");
            check_spec_strings(v, &field)?;
            Versioned::<InstanceNUMATopology>::from_primitive(v).map_err(|e| {
                ApiError::invalid(
                    &field,
                    format!("{}: {}", bounded(&e.path), bounded_message(&e.message)),
                )
            })?;
        }
        Ok(())
    }
}

/// The RequestSpec in either form; `field` prefixes messages.
fn request_spec(
    primitive: Option<&Value>,
    legacy: Option<&LegacyBody>,
    field: &str,
) -> Result<Versioned<RequestSpec>, ApiError> {
    if let Some(p) = primitive {
        check_spec_strings(p, &format!("{field}request_spec"))?;
    }
    if let Some(l) = legacy {
        check_spec_strings(&l.request_spec, &format!("{field}legacy.request_spec"))?;
        if let Some(f) = &l.filter_properties {
            check_spec_strings(f, &format!("{field}legacy.filter_properties"))?;
        }
    }
    match (primitive, legacy) {
        (Some(p), None) => Versioned::<RequestSpec>::from_primitive(p).map_err(|e| {
            ApiError::invalid(
                &format!("{field}request_spec"),
                format!("{}: {}", bounded(&e.path), bounded_message(&e.message)),
            )
        }),
        (None, Some(l)) => {
            let empty = Value::Object(Map::new());
            RequestSpec::from_legacy(&l.request_spec, l.filter_properties.as_ref().unwrap_or(&empty))
                .map_err(|e| {
                    ApiError::invalid(
                        &format!("{field}legacy.{}", bounded(&e.path)),
                        bounded_message(&e.message),
                    )
                })
        }
        (Some(_), Some(_)) => Err(ApiError::invalid(
            &format!("{field}request_spec"),
            "give either request_spec (a RequestSpec primitive) or legacy (request_spec and filter_properties dicts), not both",
        )),
        (None, None) => Err(ApiError::invalid(
            &format!("{field}request_spec"),
            "is missing; give request_spec (a RequestSpec primitive) or legacy ({\"request_spec\": {...}, \"filter_properties\": {...}})",
        )),
    }
}

/// An instance's request and identity, checked.
pub struct ParsedClaim {
    /// Who the instance is: uuid, owner, states, host and node.
    pub info: InstanceInfo,
    /// What the instance asks of the host: flavor, PCI requests, NUMA cells.
    pub request: InstanceRequest,
}

fn instance_info(
    body: Option<&InstanceBody>,
    spec: &Versioned<RequestSpec>,
    spec_uuid: String,
) -> Result<InstanceInfo, ApiError> {
    let b = body.cloned().unwrap_or_default();
    let uuid = match b.uuid {
        Some(u) if !u.eq_ignore_ascii_case(&spec_uuid) => {
            return Err(ApiError::invalid(
                "instance.uuid",
                format!(
                    "{} differs from the request spec's instance_uuid {}",
                    quoted(&u),
                    quoted(&spec_uuid)
                ),
            ))
        }
        Some(u) => u.to_ascii_lowercase(),
        None => spec_uuid.to_ascii_lowercase(),
    };
    if uuid::Uuid::parse_str(&uuid).is_err() {
        return Err(ApiError::invalid(
            "instance.uuid",
            format!("{} is not a UUID", quoted(&uuid)),
        ));
    }
    Ok(InstanceInfo {
        uuid,
        project_id: b.project_id.or_else(|| spec.obj.project_id.get().cloned()),
        user_id: b.user_id.or_else(|| spec.obj.user_id.get().cloned()),
        os_type: b.os_type,
        vm_state: b.vm_state,
        task_state: b.task_state,
        host: b.host,
        node: b.node,
        allocations: std::collections::BTreeMap::new(),
        placed_numa: None,
        placed_devices: std::collections::BTreeMap::new(),
    })
}

/// Splits a spec into (instance uuid, request).
fn instance_request(
    primitive: Option<&Value>,
    legacy: Option<&LegacyBody>,
    field: &str,
    instance_uuid: Option<&str>,
    aliases: &AliasTable,
) -> Result<(Versioned<RequestSpec>, String, InstanceRequest), ApiError> {
    let mut spec = request_spec(primitive, legacy, field)?;
    // The instance uuid may come from "instance" alone (the legacy dicts often lack it).
    if spec.obj.instance_uuid.get().is_none() {
        if let Some(u) = instance_uuid {
            spec.obj.instance_uuid = u.to_string().into();
        }
    }
    let (uuid, request) = from_request_spec(&spec, aliases).map_err(|e| match e {
        crate::tracker::ClaimError::Invalid { field: f, message } => {
            ApiError::invalid(&format!("{field}{f}"), message)
        }
        other => other.into(),
    })?;
    Ok((spec, uuid, request))
}

impl ClaimBody {
    /// The instance and what it asks for.
    pub fn parse(&self, aliases: &AliasTable) -> Result<ParsedClaim, ApiError> {
        if let Some(i) = &self.instance {
            i.check("instance.")?;
        }
        let given_uuid = self.instance.as_ref().and_then(|i| i.uuid.as_deref());
        let (spec, uuid, request) = instance_request(
            self.request_spec.as_ref(),
            self.legacy.as_ref(),
            "",
            given_uuid,
            aliases,
        )?;
        let mut info = instance_info(self.instance.as_ref(), &spec, uuid)?;
        info.allocations = parse_allocations(self.allocations.as_ref())?;
        if info.allocations.is_empty() {
            info.allocations = crate::tracker::request::group_allocations(&spec);
        }
        self.parse_placed(&mut info, request.numa.is_some())?;
        Ok(ParsedClaim { info, request })
    }
}

/// A move, parsed (the current request may still have to come from the tracker).
pub struct ParsedMove {
    /// Who (host/node = source).
    pub info: InstanceInfo,
    /// What it asks for at the destination.
    pub new: InstanceRequest,
    /// What it has now, when given.
    pub current: Option<InstanceRequest>,
    /// Where its NUMA cells are now, when given.
    pub current_numa: Option<FittedTopology>,
}

impl MigrationBody {
    /// The instance and its requests.
    pub fn parse(&self, aliases: &AliasTable) -> Result<ParsedMove, ApiError> {
        if let Some(i) = &self.instance {
            i.check("instance.")?;
        }
        for (name, value) in [
            ("source_compute", &self.source_compute),
            ("source_node", &self.source_node),
            ("dest_compute", &self.dest_compute),
            ("dest_node", &self.dest_node),
        ] {
            check_len(name, value.as_deref(), MAX_NAME)?;
        }
        if let Some(u) = &self.migration_uuid {
            if uuid::Uuid::parse_str(u).is_err() {
                return Err(ApiError::invalid(
                    "migration_uuid",
                    format!("{} is not a UUID", quoted(u)),
                ));
            }
        }
        let given_uuid = self.instance.as_ref().and_then(|i| i.uuid.as_deref());
        let (spec, uuid, new) = instance_request(
            self.request_spec.as_ref(),
            self.legacy.as_ref(),
            "",
            given_uuid,
            aliases,
        )?;
        let mut info = instance_info(self.instance.as_ref(), &spec, uuid)?;
        info.allocations = parse_allocations(self.allocations.as_ref())?;
        if info.allocations.is_empty() {
            info.allocations = crate::tracker::request::group_allocations(&spec);
        }
        let current = match &self.current {
            None => None,
            Some(c) => {
                let (_, cur_uuid, req) = instance_request(
                    c.request_spec.as_ref(),
                    c.legacy.as_ref(),
                    "current.",
                    Some(&info.uuid),
                    aliases,
                )?;
                if !cur_uuid.eq_ignore_ascii_case(&info.uuid) {
                    return Err(ApiError::invalid(
                        "current.request_spec.instance_uuid",
                        format!("{cur_uuid} differs from the instance {}", info.uuid),
                    ));
                }
                Some(req)
            }
        };
        let current_numa = instance_topology(self.instance.as_ref())?;
        Ok(ParsedMove {
            info,
            new,
            current,
            current_numa,
        })
    }
}

mod attach;
pub mod nova_enums;
mod placed;
mod placement;
mod queries;
mod state_update;
mod values;

pub use attach::AttachBody;

use placed::instance_topology;
pub use placed::{PlacedBody, PlacedDeviceBody};
pub use placement::{AdoptBody, DeviceMapEntry, ReconcileBody, RefreshBody};
pub use queries::{DryRunQuery, VersionQuery};
pub use state_update::InstanceUpdateBody;
use values::integral_numbers;
pub use values::uuid_pattern;

#[cfg(test)]
mod tests;
