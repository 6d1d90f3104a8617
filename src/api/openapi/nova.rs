//! The Nova objects inside request bodies, described as the server reads them: primitives'
//! envelopes (from the object types' names and versions), the fields the tracker interprets
//! with the bounds it checks (flavor sizes, uuids, string lengths), and the rules across fields
//! that serde's types cannot say (one of `request_spec` and `legacy`; the instance uuid given
//! once). Fields of Nova's objects that rtrack carries or ignores are left undescribed (any
//! value of their Nova type is accepted there).
//!
//! In: the body schemas utoipa derived from the body types. Out: the same with these parts set.

use serde_json::{json, Value};

use crate::api::bodies::{uuid_pattern, MAX_NAME, MAX_SPEC_STRING};
use crate::objects::flavor::Flavor;
use crate::objects::instance::InstanceNUMATopology;
use crate::objects::pci_request::{InstancePCIRequest, InstancePCIRequests};
use crate::objects::request_spec::RequestSpec;
use crate::objects::NovaObject;
use crate::tracker::request::{MAX_DISK_GB, MAX_MEMORY_MB, MAX_PCI_COUNT, MAX_VCPUS};

/// The primitive of a Nova object `T` as [`crate::objects::Versioned::from_primitive`] reads it:
/// the envelope's name, namespace, a version of `T`'s major up to rtrack's (each number at most
/// five digits, leading zeros allowed) and `data`; `nova_object.changes` lists field names;
/// other envelope keys are ignored.
pub fn primitive_schema<T: NovaObject>(description: &str, data: Value) -> Value {
    let v = T::VERSION;
    let number = |n: u16| {
        let digits = n.to_string();
        format!("0{{0,{}}}{digits}", 5 - digits.len())
    };
    let minors: Vec<String> = (0..=v.minor).map(number).collect();
    let version = format!("^{}\\.(?:{})$", number(v.major), minors.join("|"));
    json!({"type": "object", "description": description,
        "required": ["nova_object.name", "nova_object.namespace", "nova_object.version", "nova_object.data"],
        "properties": {
            "nova_object.name": {"type": "string", "enum": [T::NAME]},
            "nova_object.namespace": {"type": "string", "enum": [crate::objects::base::NAMESPACE]},
            "nova_object.version": {"type": "string", "pattern": version, "examples": [v.to_string()]},
            "nova_object.data": data,
            "nova_object.changes": {"type": "array", "items": {"type": "string"}}}})
}

/// A string inside a RequestSpec or the legacy dicts.
fn spec_string(nullable: bool) -> Value {
    let kind = if nullable {
        json!(["string", "null"])
    } else {
        json!("string")
    };
    json!({"type": kind, "maxLength": MAX_SPEC_STRING})
}

fn size(min: i64, max: i64) -> Value {
    json!({"type": "integer", "format": "int64", "minimum": min, "maximum": max})
}

/// A flavor's fields (in a Flavor primitive's data, or the legacy flavor dict), as
/// `tracker::request::flavor_usage` checks them.
fn flavor_fields() -> Value {
    json!({"type": "object",
        "description": "Nova's Flavor fields; those listed are the ones rtrack accounts. extra_specs rtrack reads: hw:* (CPU policy, NUMA, pages), resources*:*, trait*:HW_CPU_HYPERTHREADING, pci_passthrough:alias (names from [pci] alias)",
        "required": ["id", "vcpus", "memory_mb"],
        "properties": {
            "id": {"type": "integer", "format": "int64"},
            "vcpus": size(1, MAX_VCPUS),
            "memory_mb": size(1, MAX_MEMORY_MB),
            "root_gb": size(0, MAX_DISK_GB),
            "ephemeral_gb": size(0, MAX_DISK_GB),
            "swap": size(0, MAX_DISK_GB),
            "flavorid": spec_string(false),
            "name": spec_string(true),
            "extra_specs": {"type": "object", "additionalProperties": spec_string(false)}}})
}

fn flavor_primitive() -> Value {
    primitive_schema::<Flavor>("A Flavor primitive", flavor_fields())
}

/// A RequestSpec primitive; `uuid`: whether its `instance_uuid` is described (a move's current
/// spec, if it has one, names the instance already named).
fn request_spec(uuid: bool) -> Value {
    let mut data = json!({"type": "object", "required": ["flavor"], "properties": {
        "flavor": flavor_primitive(),
        "num_instances": {"type": "integer", "format": "int64"},
        "is_bfv": {"type": "boolean"},
        "project_id": spec_string(true),
        "user_id": spec_string(true),
        "availability_zone": spec_string(true)}});
    if uuid {
        data["properties"]["instance_uuid"] = json!({"type": "string", "format": "uuid"});
    }
    primitive_schema::<RequestSpec>(
        "A RequestSpec primitive: the instance (instance_uuid) and its flavor",
        data,
    )
}

/// The legacy `request_spec` dict (`RequestSpec.from_primitives`); `uuid` as for
/// [`request_spec`]. A null value counts as not given.
fn legacy_spec(uuid: bool) -> Value {
    let mut instance = json!({"type": ["object", "null"], "properties": {
        "project_id": spec_string(true),
        "user_id": spec_string(true),
        "availability_zone": spec_string(true)}});
    if uuid {
        instance["properties"]["uuid"] = json!({"type": ["string", "null"], "format": "uuid"});
    }
    json!({"type": "object", "required": ["instance_type"],
        "description": "The legacy request_spec dict: instance_type (a Flavor primitive or a flavor dict), instance_properties, num_instances",
        "properties": {
            "instance_type": {"oneOf": [flavor_primitive(), {"allOf": [flavor_fields(),
                {"not": {"required": ["nova_object.name"]}}]}]},
            "instance_properties": instance,
            "num_instances": {"type": ["integer", "null"], "format": "int64"}}})
}

/// Exactly one of the body's places names the instance: the spec (its `instance_uuid`, or the
/// legacy `instance_properties.uuid`) or `instance.uuid`. (The server also takes both when
/// they are the same uuid.)
fn uuid_once() -> Value {
    let in_spec = json!({"anyOf": [
        {"required": ["request_spec"], "properties": {"request_spec": {"type": "object",
            "properties": {"nova_object.data": {"required": ["instance_uuid"]}}}}},
        {"required": ["legacy"], "properties": {"legacy": {"type": "object",
            "properties": {"request_spec": {"required": ["instance_properties"], "properties": {
                "instance_properties": {"type": "object", "required": ["uuid"],
                    "properties": {"uuid": {"type": "string"}}}}}}}}}]});
    let in_instance = json!({"required": ["instance"], "properties": {"instance": {
        "type": "object", "required": ["uuid"], "properties": {"uuid": {"type": "string"}}}}});
    json!({"oneOf": [in_spec, in_instance], "description": "The instance uuid in one place: the spec (instance_uuid, or the legacy instance_properties.uuid) or instance.uuid. Both are taken too when they are the same uuid; different ones are refused (400)."})
}

/// The port requests attached to a running instance (`tracker::request::pci_requests_from_object`
/// and `Tracker::attach_pci`): at least one request, each with a count, specs, the port
/// (`requester_id`), no alias, and distinct request ids.
fn port_requests() -> Value {
    use crate::objects::enums::PciNumaAffinityPolicy;
    use crate::objects::fields::EnumValues;
    let mut policies: Vec<Value> = PciNumaAffinityPolicy::VALUES
        .iter()
        .map(|v| Value::from(*v))
        .collect();
    policies.push(Value::Null);
    let request = primitive_schema::<InstancePCIRequest>(
        "A port's InstancePCIRequest primitive (no alias_name)",
        json!({"type": "object", "required": ["count", "spec", "requester_id"], "properties": {
            "count": size(1, MAX_PCI_COUNT.into()),
            "spec": {"type": "array", "minItems": 1, "items": {"type": "object",
                "additionalProperties": {"type": ["string", "null"]}}},
            "requester_id": spec_string(false),
            "request_id": {"type": ["string", "null"], "format": "uuid"},
            "is_new": {"type": "boolean"},
            "numa_policy": {"type": ["string", "null"], "enum": policies}}}),
    );
    primitive_schema::<InstancePCIRequests>(
        "An InstancePCIRequests primitive holding the ports' requests (its instance_uuid, if given, is the path's)",
        json!({"type": "object", "required": ["requests"], "properties": {
            "requests": {"type": "array", "minItems": 1, "items": request}}}),
    )
}

/// Whether `schema` (as utoipa writes an `Option`) takes null: a type list with `"null"`, or
/// one of its `oneOf`/`anyOf` alternatives is `{"type": "null"}`.
pub fn accepts_null(schema: &Value) -> bool {
    let null_type = |s: &Value| match s.get("type") {
        Some(Value::String(t)) => t == "null",
        Some(Value::Array(types)) => types.iter().any(|t| t == "null"),
        _ => false,
    };
    null_type(schema)
        || ["oneOf", "anyOf"].iter().any(|k| {
            schema
                .get(*k)
                .and_then(Value::as_array)
                .is_some_and(|alts| alts.iter().any(null_type))
        })
}

/// `schema`, or null (JSON Schema 2020-12): `"null"` added to its type (and to its `enum`, if it
/// has one), or, for a schema without a type (a reference, alternatives), one of it and null.
pub fn or_null(mut schema: Value) -> Value {
    if accepts_null(&schema) {
        return schema;
    }
    let Some(object) = schema.as_object_mut() else {
        return schema;
    };
    match object.get_mut("type") {
        Some(Value::String(t)) => {
            let t = Value::String(std::mem::take(t));
            object.insert("type".into(), json!([t, "null"]));
        }
        Some(Value::Array(types)) => types.push(Value::from("null")),
        _ => return json!({"oneOf": [schema, {"type": "null"}]}),
    }
    if let Some(Value::Array(values)) = object.get_mut("enum") {
        if !values.contains(&Value::Null) {
            values.push(Value::Null);
        }
    }
    schema
}

/// States the uuid rule where `v` names it only by `"format": "uuid"` (an annotation in
/// OpenAPI 3.1, which a reader need not check): every such string schema gets the pattern of
/// what the server parses as a uuid.
pub fn uuid_patterns(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if m.get("format").and_then(Value::as_str) == Some("uuid") && !m.contains_key("pattern")
            {
                m.insert("pattern".into(), Value::String(uuid_pattern()));
            }
            m.values_mut().for_each(uuid_patterns);
        }
        Value::Array(items) => items.iter_mut().for_each(uuid_patterns),
        _ => {}
    }
}

/// Sets the Nova parts and the rules across fields in the body schemas.
pub fn describe_bodies(bodies: &mut Value) {
    // One of request_spec and legacy given (not null), not both: the server answers 400 to
    // both or neither. A null one counts as not given.
    let one_form = json!({"oneOf": [
        {"required": ["request_spec"], "properties": {"request_spec": {"type": "object"}}},
        {"required": ["legacy"], "properties": {"legacy": {"type": "object"}}}]});
    for (name, rules) in [
        ("ClaimRequest", json!([one_form, uuid_once()])),
        ("MigrationRequest", json!([one_form, uuid_once()])),
        ("CurrentRequest", json!([one_form])),
    ] {
        if let Some(schema) = bodies.get_mut(name).and_then(Value::as_object_mut) {
            schema.insert("allOf".into(), rules);
        }
    }
    let set = |bodies: &mut Value, at: &str, schema: Value| {
        if let Some(property) = bodies.pointer_mut(at) {
            let nullable = accepts_null(property);
            let described = property.get("description").cloned();
            *property = if nullable { or_null(schema) } else { schema };
            if let Some(d) = described {
                property["description"] = d;
            }
        }
    };
    for body in ["ClaimRequest", "MigrationRequest"] {
        set(
            bodies,
            &format!("/{body}/properties/request_spec"),
            request_spec(true),
        );
    }
    set(
        bodies,
        "/CurrentRequest/properties/request_spec",
        request_spec(false),
    );
    set(
        bodies,
        "/LegacyRequest/properties/request_spec",
        legacy_spec(true),
    );
    // A move's current spec in the legacy form: LegacyRequest without the instance uuid.
    if let Some(legacy) = bodies.get("LegacyRequest").cloned() {
        let mut current = legacy;
        current["properties"]["request_spec"] = legacy_spec(false);
        set(bodies, "/CurrentRequest/properties/legacy", current);
    }
    set(
        bodies,
        "/LegacyRequest/properties/filter_properties",
        json!({"type": "object", "description": "The legacy filter_properties dict (ignore_hosts, force_hosts, force_nodes, retry, limits, scheduler_hints, group_*, requested_destination)"}),
    );
    set(
        bodies,
        "/Instance/properties/numa_topology",
        primitive_schema::<InstanceNUMATopology>(
            "An InstanceNUMATopology primitive",
            json!({"type": "object"}),
        ),
    );
    set(
        bodies,
        "/AttachRequest/properties/pci_requests",
        port_requests(),
    );
    // Placement's allocations: provider uuids to amounts per class (`bodies::parse_allocations`).
    let uuid_key = json!({"type": "string", "format": "uuid", "pattern": uuid_pattern()});
    for body in ["ClaimRequest", "MigrationRequest"] {
        if let Some(a) = bodies.pointer_mut(&format!("/{body}/properties/allocations")) {
            a["propertyNames"] = uuid_key.clone();
        }
    }
    set(
        bodies,
        "/AllocationBody/properties/resources",
        json!({"type": "object", "propertyNames": {"type": "string", "pattern": format!("^[A-Z0-9_]{{1,{MAX_NAME}}}$")},
            "additionalProperties": size(0, 1 << 40)}),
    );
}
