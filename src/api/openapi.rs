//! The OpenAPI 3 description of the local API, served at `/v1/openapi.json`.
//!
//! In: [`ROUTES`] (declared once in `api/mod.rs`, where the router is built from the same list),
//! the error table, the request body types and the answer types ([`super::views`]), whose
//! schemas are derived from their definitions; the host reports' schemas are written in
//! `answers.rs`. Out: the document. Tests check that it lists exactly [`ROUTES`], and the
//! end-to-end tests call every documented operation on a live daemon.

use serde_json::{json, Value};

mod answers;
mod derived;
mod nova;

use super::bodies::{
    AdoptBody, AttachBody, ClaimBody, DeviceMapEntry, InstanceUpdateBody, MigrationBody,
    ReconcileBody, RefreshBody,
};
use super::error::ErrorCode;
use crate::objects::compute_node::ComputeNode;
use crate::objects::NovaObject;
use answers::{inventory_report_schema, numa_cell_schema, numa_detail_schema};

/// The ComputeNode versions `?version=` accepts: every minor of the current major up to it.
fn compute_node_versions() -> Vec<String> {
    let current = ComputeNode::VERSION;
    (0..=current.minor)
        .map(|minor| format!("{}.{minor}", current.major))
        .collect()
}

pub use super::ROUTES;

/// True when a concrete path matches a template (`{x}` matches one segment).
pub fn path_matches(template: &str, path: &str) -> bool {
    let t: Vec<&str> = template.split('/').collect();
    let p: Vec<&str> = path.split('/').collect();
    t.len() == p.len()
        && t.iter()
            .zip(&p)
            .all(|(a, b)| (a.starts_with('{') && !b.is_empty()) || a == b)
}

fn err_responses(statuses: &[u16]) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    for status in statuses {
        let codes: Vec<&str> = ErrorCode::ALL
            .iter()
            .filter(|c| c.status().as_u16() == *status)
            .map(|c| c.as_str())
            .collect();
        let what = if codes.is_empty() {
            "error".to_string()
        } else {
            format!("codes: {}", codes.join(", "))
        };
        m.insert(
            status.to_string(),
            json!({"description": what, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}),
        );
    }
    m
}

fn ok(description: &str, schema: Value) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": schema}}})
}

fn with_errors(mut responses: serde_json::Map<String, Value>, codes: &[u16]) -> Value {
    responses.extend(err_responses(codes));
    Value::Object(responses)
}

fn responses(pairs: &[(&str, Value)], codes: &[u16]) -> Value {
    let m = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    with_errors(m, codes)
}

/// `response` with OpenAPI links to the operations that take what it returns.
fn linked(mut response: Value, links: Value) -> Value {
    response["links"] = links;
    response
}

/// From a new claim to the operations on the instance it names.
fn claim_links() -> Value {
    let to = |op: &str, what: &str| {
        json!({"operationId": op, "description": what,
        "parameters": {if op.starts_with("get") || op.starts_with("abort") { "instance_uuid" } else { "uuid" }: "$response.body#/instance_uuid"}})
    };
    json!({
        "getClaim": to("getClaim", "The claim just made"),
        "abortClaim": to("abortClaim", "Abort the claim just made"),
        "updateInstance": to("updateInstance", "Change the claimed instance's state"),
        "attachPci": to("attachPci", "Attach a port's devices to the claimed instance"),
    })
}

/// From a new move claim to the operations on its migration.
fn migration_links() -> Value {
    let to = |op: &str, what: &str| {
        json!({"operationId": op, "description": what,
        "parameters": {"id": "$response.body#/migration/id"}})
    };
    json!({
        "getMigration": to("getMigration", "The migration just recorded"),
        "confirmMigration": to("confirmMigration", "Confirm the move"),
        "revertMigration": to("revertMigration", "Revert the move"),
        "getClaim": {"operationId": "getClaim", "description": "The move claim",
            "parameters": {"instance_uuid": "$response.body#/claim/instance_uuid"}},
    })
}

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// A request body with an example (what Nova sends, trimmed to what rtrack reads).
fn with_example(mut body: Value, example: Value) -> Value {
    body["content"]["application/json"]["example"] = example;
    body
}

/// A RequestSpec primitive for one small instance.
fn example_spec(instance_uuid: &str) -> Value {
    let flavor = json!({"nova_object.name": "Flavor", "nova_object.namespace": "nova",
        "nova_object.version": "1.2", "nova_object.data": {"id": 1, "flavorid": "m1.tiny",
            "name": "m1.tiny", "vcpus": 1, "memory_mb": 512, "root_gb": 1, "ephemeral_gb": 0,
            "swap": 0, "extra_specs": {}}});
    json!({"nova_object.name": "RequestSpec", "nova_object.namespace": "nova",
        "nova_object.version": "1.14", "nova_object.data": {"instance_uuid": instance_uuid,
            "project_id": "p1", "user_id": "u1", "num_instances": 1, "flavor": flavor}})
}

fn body(name: &str) -> Value {
    json!({"required": true, "content": {"application/json": {"schema": schema_ref(name)}}})
}

fn path_param(name: &str, schema: Value, description: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "schema": schema, "description": description})
}

fn dry_run_param() -> Value {
    // As `DryRunQuery::flag` reads it: a bare `?dry_run` (empty) asks for a dry run too.
    json!({"name": "dry_run", "in": "query", "required": false, "allowEmptyValue": true,
           "schema": {"type": "string", "enum": ["true", "1", "", "false", "0"]},
           "description": "true, 1 or empty: answer whether it fits (200, or 409 with the reason) without claiming; false or 0: claim"})
}

/// The document.
pub fn document() -> Value {
    let s = Shared::new();
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "rtrackd local API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Claims and inventory of one compute host, over HTTP/1.1 on the Unix socket /run/rtrack/rtrack.sock (root and the socket group only). Errors are {\"error\": {\"code\", \"message\", \"details\"}}.",
        },
        "servers": [{"url": "http://localhost", "description": "the Unix socket ([api] socket)"}],
        "paths": paths(&s),
        "components": components(&s),
    })
}

/// Values several parts of the document use.
struct Shared {
    uuid: Value,
    id: Value,
    std_errors: &'static [u16],
    error_codes: Vec<&'static str>,
}

impl Shared {
    fn new() -> Shared {
        Shared {
            uuid: json!({"type": "string", "format": "uuid", "pattern": super::bodies::uuid_pattern()}),
            id: json!({"type": "integer", "format": "int64", "minimum": 1}),
            std_errors: &[403, 503],
            error_codes: ErrorCode::ALL.iter().map(|c| c.as_str()).collect(),
        }
    }
}

/// The paths, reads first, then writes.
fn paths(s: &Shared) -> Value {
    let mut paths = read_paths(s);
    if let (Some(p), Value::Object(w)) = (paths.as_object_mut(), write_paths(s)) {
        p.extend(w);
    }
    paths
}

/// Health, metrics, this document and the host's reads.
fn read_paths(s: &Shared) -> Value {
    let std_errors = s.std_errors;
    json!({
        "/healthz": {"get": {"operationId": "healthz", "summary": "Liveness and audit health",
            "responses": responses(&[("200", ok("ok, or degraded when audits fail", schema_ref("Health")))], std_errors)}},
        "/metrics": {"get": {"operationId": "metrics", "summary": "Prometheus metrics (OpenMetrics text)",
            "responses": responses(&[("200", json!({"description": "metrics: the Prometheus text format (0.0.4) unless the Accept header asks for OpenMetrics", "content": {"text/plain": {"schema": {"type": "string"}}, "application/openmetrics-text": {"schema": {"type": "string"}}}}))], std_errors)}},
        "/v1/openapi.json": {"get": {"operationId": "openapi", "summary": "This document",
            "responses": responses(&[("200", ok("OpenAPI 3 document", json!({"type": "object"})))], std_errors)}},
        "/v1/inventory": {"get": {"operationId": "getInventory", "summary": "The rtrackd --once report from the last audit, with the ComputeNode as it is now",
            "responses": responses(&[("200", ok("report (docs/inventory.md)", schema_ref("InventoryReport")))], std_errors)}},
        "/v1/compute-node": {"get": {"operationId": "getComputeNode", "summary": "The ComputeNode primitive (oslo.versionedobjects JSON)",
            "parameters": [{"name": "version", "in": "query", "required": false, "schema": {"type": "string", "enum": compute_node_versions()}, "description": "Backport to this ComputeNode version, e.g. 1.16"}],
            "responses": responses(&[("200", ok("primitive", json!({"type": "object"})))], &[400, 403, 503])}},
        "/v1/usage": {"get": {"operationId": "getUsage", "summary": "Per resource class: total, reserved, capacity, used, free; PCI pools; NUMA cells",
            "responses": responses(&[("200", ok("usage", schema_ref("Usage")))], std_errors)}},
        "/v1/numa": {"get": {"operationId": "getNuma", "summary": "Every NUMA cell: each core's CPUs with what holds them, memory and pages, local PCI devices",
            "responses": responses(&[("200", ok("cells", schema_ref("Numa")))], std_errors)}},
    })
}

/// Claims, moves, instances, PCI devices and Placement.
fn write_paths(s: &Shared) -> Value {
    let Shared {
        uuid,
        id,
        std_errors,
        ..
    } = s;
    json!({
        "/v1/claims": {
            "get": {"operationId": "listClaims", "summary": "Every claim held (instance claims, then move claims)",
                "responses": responses(&[("200", ok("claims", json!({"type": "array", "items": schema_ref("Claim")})))], std_errors)},
            "post": {"operationId": "createClaim", "summary": "Claim resources for an instance (Nova's instance_claim); idempotent for the same request",
                "parameters": [dry_run_param()], "requestBody": with_example(body("ClaimRequest"), json!({
                    "instance": {"project_id": "p1", "user_id": "u1", "vm_state": "building"},
                    "request_spec": example_spec("6f8b1f5e-3c6a-4e0b-9a57-2b1f1d0c0a11")})),
                "responses": responses(&[("201", linked(ok("claimed", schema_ref("ClaimAnswer")), claim_links())), ("200", ok("already held (same request), or a dry run that fits", json!({"oneOf": [schema_ref("ClaimAnswer"), schema_ref("DryRun")]})))], &[400, 403, 409, 413, 415, 500, 503, 507])}},
        "/v1/claims/{instance_uuid}": {
            "parameters": [path_param("instance_uuid", uuid.clone(), "Instance")],
            "get": {"operationId": "getClaim", "summary": "The instance's claim (or its move claim here)",
                "responses": responses(&[("200", ok("claim", schema_ref("ClaimShown")))], &[400, 403, 404, 503])},
            "delete": {"operationId": "abortClaim", "summary": "Abort the claim (Nova's abort_instance_claim); frees its devices",
                "responses": responses(&[("200", ok("aborted", schema_ref("Aborted")))], &[400, 403, 404, 500, 503, 507])}},
        "/v1/migrations": {
            "get": {"operationId": "listMigrations", "summary": "Migrations known to this host",
                "responses": responses(&[("200", ok("migrations", json!({"type": "array", "items": schema_ref("Migration")})))], std_errors)},
            "post": {"operationId": "createMigration", "summary": "Resize, migrate, live-migrate or evacuate: the destination claims, the source records the outgoing move",
                "parameters": [dry_run_param()], "requestBody": with_example(body("MigrationRequest"), json!({
                    "instance": {"host": "cmp0", "node": "cmp0", "vm_state": "active"},
                    "request_spec": example_spec("0b7c3e52-9d0e-4f1a-8c2b-6a5d4e3f2a10"),
                    "move_type": "migration", "source_compute": "cmp0", "source_node": "cmp0"})),
                "responses": responses(&[("201", linked(ok("claimed", schema_ref("MoveClaim")), migration_links())), ("200", ok("already held, or a dry run that fits", json!({"oneOf": [schema_ref("MoveClaim"), schema_ref("MoveDryRun")]})))], &[400, 403, 409, 413, 415, 500, 503, 507])}},
        "/v1/migrations/{id}": {
            "parameters": [path_param("id", id.clone(), "Migration id")],
            "get": {"operationId": "getMigration", "summary": "One migration",
                "responses": responses(&[("200", ok("migration", schema_ref("Migration")))], &[400, 403, 404, 503])}},
        "/v1/migrations/{id}/confirm": {
            "parameters": [path_param("id", id.clone(), "Migration id")],
            "post": {"operationId": "confirmMigration", "summary": "Confirm: the source frees the old side",
                "responses": responses(&[("200", ok("confirmed", schema_ref("MigrationFinished")))], &[400, 403, 404, 409, 500, 503])}},
        "/v1/migrations/{id}/revert": {
            "parameters": [path_param("id", id.clone(), "Migration id")],
            "post": {"operationId": "revertMigration", "summary": "Revert: the destination frees the new side",
                "responses": responses(&[("200", ok("reverted", schema_ref("MigrationFinished")))], &[400, 403, 404, 409, 500, 503])}},
        "/v1/instances/{uuid}/state": {
            "parameters": [path_param("uuid", uuid.clone(), "Instance")],
            "post": {"operationId": "updateInstance", "summary": "Change an instance's vm/task state or host (Nova's update_usage)",
                "requestBody": body("InstanceUpdate"),
                "responses": responses(&[("200", ok("updated", schema_ref("InstanceUpdated")))], &[400, 403, 404, 409, 413, 415, 500, 503])}},
        "/v1/instances/{uuid}/pci-requests": {
            "parameters": [path_param("uuid", uuid.clone(), "Instance (running here, holding a claim)")],
            "post": {"operationId": "attachPci", "summary": "Devices for ports attached to a running instance (Nova's interface attach): the port's requests are claimed on the instance's NUMA cells and added to the instance; the same requests again answer what they hold",
                "requestBody": body("AttachRequest"),
                "responses": responses(&[
                    ("201", linked(ok("attached", schema_ref("Attached")), json!({"detachPci": {"operationId": "detachPci",
                        "description": "Detach the port's devices again",
                        "parameters": {"uuid": "$response.body#/instance_uuid", "request_id": "$response.body#/pci_devices/0/request_id"}}}))),
                    ("200", ok("already attached: nothing changed", schema_ref("Attached")))],
                    &[400, 403, 404, 409, 413, 415, 500, 503])}},
        "/v1/instances/{uuid}/pci-requests/{request_id}": {
            "parameters": [path_param("uuid", uuid.clone(), "Instance"), path_param("request_id", json!({"type": "string", "maxLength": 255}), "The port's InstancePCIRequest request_id")],
            "delete": {"operationId": "detachPci", "summary": "Frees a port's devices and removes its request (Nova's interface detach); a flavor's requests are not detached",
                "responses": responses(&[("200", ok("detached", schema_ref("Detached")))], &[400, 403, 404, 409, 500, 503])}},
        "/v1/pci-devices": {"get": {"operationId": "listPciDevices", "summary": "Every tracked PCI device: state (available, claimed, allocated, unavailable, unclaimable, reserved), holder, one-time use, Placement provider",
            // No links from here. To an instance's operations: a device's `instance_uuid` is null
            // while it is free, and a runtime expression cannot pick a held device, so such a
            // link would mostly give null (sent as the text "None", answered 404) as a uuid. To
            // a device's release: the first device listed is seldom one to release (409), and a
            // read that never fails as the start of sequences leaves the claims' and moves'
            // links untried.
            "responses": responses(&[("200", ok("devices", schema_ref("PciDevices")))], std_errors)}},
        "/v1/pci-devices/{address}/release": {
            "parameters": [path_param("address", json!({"type": "string", "pattern": crate::probes::pci::PciAddress::PATTERN}), "PCI address")],
            "post": {"operationId": "releasePciDevice", "summary": "Releases a one-time-use device reserved after use: available again, its provider's inventory unreserved",
                "responses": responses(&[("200", ok("released", schema_ref("Released")))], &[400, 403, 404, 409, 500, 503])}},
        "/v1/reconcile": {"post": {"operationId": "reconcile", "summary": "Reads Placement now and compares the local claims, Placement's allocations on this host's tree and the host's inventory (unclaimed, missing, different, inventory_gone); with fix, writes what rtrack owns and reads again; with remove_unclaimed, removes this host's part of the consumers named that hold no claim here",
            "requestBody": {"required": false, "content": {"application/json": {"schema": schema_ref("ReconcileRequest")}}},
            "responses": responses(&[("200", ok("the drift", schema_ref("Reconciled")))],
                &[400, 403, 409, 413, 415, 500, 503])}},
        "/v1/refresh": {"post": {"operationId": "refresh", "summary": "Audits now (the host probed again) and reports to Placement now, without waiting for a backoff; answered once both are done (503 not_ready when either failed). With [host] disk_source = \"caller\", disk_gb gives the DISK_GB totals first (kept in the state directory)",
            "requestBody": {"required": false, "content": {"application/json": {"schema": schema_ref("RefreshRequest")}}},
            "responses": responses(&[("200", ok("done", schema_ref("Refreshed")))],
                &[400, 403, 409, 413, 415, 500, 503])}},
        "/v1/adopt": {"post": {"operationId": "adopt", "summary": "The instances Placement's allocations say this host runs (a host taken over from nova-compute), as local claims: the plan, committed in one transaction with apply when every consumer fits",
            "requestBody": {"required": false, "content": {"application/json": {"schema": schema_ref("AdoptRequest")}}},
            "responses": responses(&[("200", ok("the plan (applied when asked and possible)", schema_ref("AdoptionPlan")))],
                &[400, 403, 409, 413, 415, 500, 503])}},
    })
}

/// The schemas: the error's and the host reports' (written here), the answers' (derived from
/// the answer types) and the request bodies' (derived from the body types).
fn components(s: &Shared) -> Value {
    let mut schemas = json!({
        "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "object", "required": ["code", "message", "details"], "properties": {
            "code": {"type": "string", "enum": s.error_codes},
            "message": {"type": "string"},
            "details": {"description": "claim_refused: {instance_uuid, resources: [{class, requested, used, capacity, max_unit}], pci: {request_id, alias_name, requested, usable, pools: [{pool, count, rejected}]}}; others: the field or id"}}}}},
        "InventoryReport": inventory_report_schema(),
        "NumaCell": numa_cell_schema(),
        "NumaDetail": numa_detail_schema(),
    });
    if let Some(all) = schemas.as_object_mut() {
        all.extend(derived::answer_schemas());
    }
    json!({"schemas": schemas_with_bodies(schemas)})
}

/// The answer schemas with the request bodies' schemas added: those are derived from the body
/// types (utoipa), so the document describes exactly what the server decodes.
fn schemas_with_bodies(mut answers: Value) -> Value {
    #[derive(utoipa::OpenApi)]
    #[openapi(components(schemas(
        ClaimBody,
        MigrationBody,
        InstanceUpdateBody,
        AttachBody,
        ReconcileBody,
        AdoptBody,
        RefreshBody,
        crate::api::disk_facts::DiskTotals,
        DeviceMapEntry
    )))]
    struct Bodies;
    let components = <Bodies as utoipa::OpenApi>::openapi().components;
    let mut bodies = components
        .and_then(|c| serde_json::to_value(c.schemas).ok())
        .unwrap_or_else(|| json!({}));
    nova::describe_bodies(&mut bodies);
    nova::uuid_patterns(&mut bodies);
    if let (Some(all), Some(bodies)) = (answers.as_object_mut(), bodies.as_object()) {
        all.extend(bodies.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    answers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::nova_states::VM_STATES;

    #[test]
    fn every_route_is_documented_and_nothing_else() {
        let doc = document();
        let paths = doc["paths"].as_object().unwrap();
        let mut documented = Vec::new();
        for (path, item) in paths {
            for (method, _) in item.as_object().unwrap() {
                if method != "parameters" {
                    documented.push((method.to_uppercase(), path.clone()));
                }
            }
        }
        let mut routes: Vec<(String, String)> = ROUTES
            .iter()
            .map(|(m, p)| (m.to_string(), p.to_string()))
            .collect();
        documented.sort();
        routes.sort();
        assert_eq!(documented, routes);
    }

    #[test]
    fn every_reference_resolves() {
        let doc = document();
        let text = doc.to_string();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for part in text.split("#/components/schemas/").skip(1) {
            let name: String = part.chars().take_while(|c| c.is_alphanumeric()).collect();
            assert!(
                schemas.contains_key(&name),
                "{name} is referenced, not defined"
            );
        }
    }

    #[test]
    fn the_document_accepts_exactly_what_the_server_accepts() {
        let doc = document();
        let schemas = &doc["components"]["schemas"];
        // One of request_spec and legacy, not both (the server answers 400 to both).
        for name in ["ClaimRequest", "MigrationRequest"] {
            assert_eq!(
                schemas[name]["allOf"][0]["oneOf"],
                json!([
                    {"required": ["request_spec"], "properties": {"request_spec": {"type": "object"}}},
                    {"required": ["legacy"], "properties": {"legacy": {"type": "object"}}}]),
                "{name}"
            );
        }
        // ?version= lists exactly the versions the backport produces.
        let listed: Vec<String> = serde_json::from_value(
            doc["paths"]["/v1/compute-node"]["get"]["parameters"][0]["schema"]["enum"].clone(),
        )
        .unwrap();
        let node = crate::objects::Versioned::new(ComputeNode::default());
        for minor in 0..60u16 {
            let v = crate::objects::ObjVersion::new(1, minor);
            let produced = node
                .to_primitive_at(v, Some(&crate::objects::current_manifest()))
                .is_ok();
            assert_eq!(listed.contains(&v.to_string()), produced, "{v}");
        }
        assert!(!listed.contains(&"1.45".to_string()));
        // Both metrics formats, the text format first (the default).
        let content = &doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"];
        assert!(
            content.get("text/plain").is_some()
                && content.get("application/openmetrics-text").is_some()
        );
        // String fields are bounded as the server bounds them, states are Nova's.
        let instance = &schemas["Instance"]["properties"];
        assert_eq!(
            instance["host"]["maxLength"],
            super::super::bodies::MAX_NAME
        );
        assert_eq!(
            instance["vm_state"]["enum"].as_array().unwrap().len(),
            VM_STATES.len() + 1
        );
        assert_eq!(
            schemas["MigrationRequest"]["properties"]["source_compute"]["maxLength"],
            255
        );
    }

    /// The body schemas come from the body types: each lists exactly the fields the server
    /// decodes, and refuses others as the server does (`deny_unknown_fields`).
    #[test]
    fn body_schemas_are_the_body_types() {
        use crate::api::bodies::InstanceBody;
        let doc = document();
        let schemas = &doc["components"]["schemas"];
        let keys = |v: &Value| -> Vec<String> {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        for (name, fields) in [
            ("ClaimRequest", serde_json::to_value(ClaimBody::default())),
            (
                "MigrationRequest",
                serde_json::to_value(MigrationBody::default()),
            ),
            ("Instance", serde_json::to_value(InstanceBody::default())),
            (
                "InstanceUpdate",
                serde_json::to_value(InstanceUpdateBody::default()),
            ),
        ] {
            let fields = fields.unwrap();
            assert_eq!(keys(&schemas[name]["properties"]), keys(&fields), "{name}");
            assert_eq!(schemas[name]["additionalProperties"], false, "{name}");
        }
        assert_eq!(
            schemas["MoveType"]["enum"],
            json!(["resize", "migration", "live-migration", "evacuation"])
        );
    }

    /// Every `(path, value)` in `v`, depth first, with JSON pointers as paths.
    fn walk<'a>(v: &'a Value, at: String, out: &mut Vec<(String, &'a Value)>) {
        out.push((at.clone(), v));
        let escape = |k: &str| k.replace('~', "~0").replace('/', "~1");
        match v {
            Value::Object(m) => {
                for (k, child) in m {
                    walk(child, format!("{at}/{}", escape(k)), out);
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    walk(child, format!("{at}/{i}"), out);
                }
            }
            _ => {}
        }
    }

    /// What makes a document OpenAPI 3.1 (JSON Schema 2020-12) and not 3.0 in `doc`, as messages.
    fn not_openapi_31(doc: &Value) -> Vec<String> {
        let mut problems = Vec::new();
        if doc["openapi"] != "3.1.0" {
            problems.push(format!("openapi is {}", doc["openapi"]));
        }
        let mut all = Vec::new();
        walk(doc, String::new(), &mut all);
        // The schemas: the components' and every `schema` of a parameter, body or answer.
        let mut schemas = Vec::new();
        for (at, v) in &all {
            if at.starts_with("/components/schemas/") || at.contains("/schema") {
                schemas.push((at, *v));
            }
        }
        const TYPES: [&str; 7] = [
            "null", "boolean", "object", "array", "number", "string", "integer",
        ];
        for (at, v) in schemas {
            let Some(m) = v.as_object() else { continue };
            // Examples are `examples` lists in 2020-12 (`example` only at the media types).
            for key in ["nullable", "example", "x-nullable"] {
                if m.contains_key(key) && !at.ends_with("/properties") {
                    problems.push(format!("{at}: 3.0 keyword {key}"));
                }
            }
            for key in ["exclusiveMinimum", "exclusiveMaximum"] {
                if m.get(key).is_some_and(|b| !b.is_number()) && !at.ends_with("/properties") {
                    problems.push(format!("{at}: {key} is not a number"));
                }
            }
            if let Some(t) = m.get("type").filter(|_| !at.ends_with("/properties")) {
                let listed: Vec<&Value> = match t {
                    Value::Array(ts) => ts.iter().collect(),
                    one => vec![one],
                };
                let names: std::collections::BTreeSet<&str> =
                    listed.iter().filter_map(|t| t.as_str()).collect();
                if listed.is_empty()
                    || names.len() != listed.len()
                    || !names.iter().all(|n| TYPES.contains(n))
                {
                    problems.push(format!("{at}: type {t}"));
                }
            }
        }
        // Every reference resolves (JSON pointers into this document).
        for (at, v) in &all {
            if at.ends_with("/$ref") {
                let target = v.as_str().and_then(|r| r.strip_prefix('#'));
                if target.and_then(|p| doc.pointer(p)).is_none() {
                    problems.push(format!("{at}: {v} does not resolve"));
                }
            }
        }
        problems
    }

    #[test]
    fn the_document_is_openapi_3_1() {
        let doc = document();
        assert_eq!(not_openapi_31(&doc), Vec::<String>::new());
        let schemas = &doc["components"]["schemas"];
        // What may be null says so with the type "null" (or a null alternative): the hand-written
        // answers, the derived bodies (an Option) and the Nova parts set over them.
        assert_eq!(
            schemas["Health"]["properties"]["last_audit_at"]["type"],
            json!(["string", "null"])
        );
        assert_eq!(
            schemas["MoveDryRun"]["properties"]["migration"]["oneOf"],
            json!([{"type": "null"}, schema_ref("Migration")])
        );
        let task_state = &schemas["InstanceUpdate"]["properties"]["task_state"];
        assert!(nova::accepts_null(task_state), "{task_state}");
        assert!(task_state["enum"]
            .as_array()
            .unwrap()
            .contains(&Value::Null));
        for body in ["ClaimRequest", "MigrationRequest"] {
            let allocations = &schemas[body]["properties"]["allocations"];
            assert!(
                allocations["propertyNames"]["pattern"].is_string(),
                "{body}"
            );
        }
        // And the check finds what 3.0 writes.
        for (part, value) in [
            ("/openapi", json!("3.0.3")),
            (
                "/components/schemas/Health/properties/version/nullable",
                json!(true),
            ),
            (
                "/components/schemas/Health/properties/version/example",
                json!("1"),
            ),
            (
                "/components/schemas/Health/properties/version/type",
                json!(["string", "nil"]),
            ),
            (
                "/components/schemas/Usage/properties/instances/exclusiveMinimum",
                json!(true),
            ),
            (
                "/components/schemas/Claim/properties/resources/$ref",
                json!("#/components/schemas/Nothing"),
            ),
        ] {
            let mut wrong = doc.clone();
            let (parent, key) = part.rsplit_once('/').unwrap();
            wrong.pointer_mut(parent).unwrap()[key] = value;
            assert_eq!(not_openapi_31(&wrong).len(), 1, "{part}");
        }
    }

    /// The schema at `pointer` (`/a/0/b`) inside values of `schema`: references resolved,
    /// properties and array items followed (`allOf` parts searched); None when it names no
    /// documented place.
    fn schema_at<'a>(doc: &'a Value, schema: &'a Value, pointer: &str) -> Option<&'a Value> {
        let resolve = |mut s: &'a Value| {
            while let Some(r) = s.get("$ref").and_then(Value::as_str) {
                s = doc.pointer(r.strip_prefix('#')?)?;
            }
            Some(s)
        };
        let mut at = resolve(schema)?;
        for segment in pointer.split('/').skip(1) {
            let step = |s: &'a Value| -> Option<&'a Value> {
                if segment.parse::<usize>().is_ok() {
                    s.get("items")
                } else {
                    s.get("properties")?.get(segment)
                }
            };
            let parts = at.get("allOf").and_then(Value::as_array);
            let found = step(at).or_else(|| parts?.iter().find_map(|p| resolve(p).and_then(&step)));
            at = resolve(found?)?;
        }
        Some(at)
    }

    /// Every link of the document takes its values where its answer always has one: a link's
    /// runtime expression names a documented field that cannot be null (a null would be sent
    /// as a uuid or an id), and the link names an operation and its parameters.
    #[test]
    fn no_link_takes_a_value_that_may_be_null() {
        let doc = document();
        let operations: Vec<&Value> = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .flat_map(|item| item.as_object().unwrap().values())
            .filter(|op| op.get("operationId").is_some())
            .collect();
        let parameters_of = |id: &str| -> Vec<String> {
            let (path, _) = doc["paths"]
                .as_object()
                .unwrap()
                .iter()
                .find(|(_, item)| {
                    item.as_object()
                        .unwrap()
                        .values()
                        .any(|op| op["operationId"] == id)
                })
                .unwrap_or_else(|| panic!("no operation {id}"));
            path.split('{')
                .skip(1)
                .filter_map(|p| p.split('}').next())
                .map(str::to_string)
                .collect()
        };
        let mut links = 0;
        for op in operations {
            for (status, response) in op["responses"].as_object().unwrap() {
                let Some(declared) = response.get("links").and_then(Value::as_object) else {
                    continue;
                };
                let schema = &response["content"]["application/json"]["schema"];
                for (name, link) in declared {
                    let target = link["operationId"].as_str().unwrap();
                    let wanted = parameters_of(target);
                    let given = link["parameters"].as_object().unwrap();
                    let mut names: Vec<&String> = given.keys().collect();
                    names.sort();
                    let mut wanted_sorted: Vec<&String> = wanted.iter().collect();
                    wanted_sorted.sort();
                    assert_eq!(names, wanted_sorted, "{name}: {target}'s path parameters");
                    for (parameter, expression) in given {
                        let at = format!("{} {status} {name}.{parameter}", op["operationId"]);
                        let pointer = expression
                            .as_str()
                            .and_then(|e| e.strip_prefix("$response.body#"))
                            .unwrap_or_else(|| panic!("{at}: {expression}"));
                        let field = schema_at(&doc, schema, pointer)
                            .unwrap_or_else(|| panic!("{at}: {pointer} is not documented"));
                        assert!(!nova::accepts_null(field), "{at}: {pointer} may be null");
                        links += 1;
                    }
                }
            }
        }
        assert!(links >= 10, "{links}");
        // And the check sees a nullable field: a free device's instance.
        let devices = &doc["paths"]["/v1/pci-devices"]["get"]["responses"]["200"]["content"]
            ["application/json"]["schema"];
        let instance = schema_at(&doc, devices, "/pci_devices/0/instance_uuid").unwrap();
        assert!(nova::accepts_null(instance));
        let claims = &doc["paths"]["/v1/claims"]["get"]["responses"]["200"]["content"]
            ["application/json"]["schema"];
        let migration = schema_at(&doc, claims, "/0/migration_id").unwrap();
        assert!(nova::accepts_null(migration));
        assert!(schema_at(&doc, devices, "/pci_devices/0/nothing").is_none());
    }

    #[test]
    fn null_is_added_as_2020_12_says() {
        use nova::or_null;
        assert_eq!(
            or_null(json!({"type": "string", "enum": ["a"]})),
            json!({"type": ["string", "null"], "enum": ["a", null]})
        );
        assert_eq!(
            or_null(json!({"type": ["integer", "null"]})),
            json!({"type": ["integer", "null"]})
        );
        assert_eq!(
            or_null(schema_ref("X")),
            json!({"oneOf": [schema_ref("X"), {"type": "null"}]})
        );
    }

    #[test]
    fn every_error_code_is_documented_once_with_its_status() {
        let doc = document();
        let listed = &doc["components"]["schemas"]["Error"]["properties"]["error"]["properties"]
            ["code"]["enum"];
        let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(listed, &json!(codes));
        let unique: std::collections::BTreeSet<&str> = codes.iter().copied().collect();
        assert_eq!(unique.len(), codes.len(), "a code string is used twice");
        let api_md = include_str!("../../docs/api.md");
        for c in ErrorCode::ALL {
            assert!(
                api_md.contains(&format!("`{}`", c.as_str())),
                "{} is not in docs/api.md",
                c.as_str()
            );
            if matches!(c, ErrorCode::NoSuchRoute | ErrorCode::MethodNotAllowed) {
                // Answered for paths and methods the document does not have.
                continue;
            }
            let status = c.status().as_u16().to_string();
            let described = doc["paths"]
                .as_object()
                .unwrap()
                .values()
                .flat_map(|item| item.as_object().unwrap().values())
                .filter_map(|op| op.get("responses"))
                .any(|r| r.get(&status).is_some());
            assert!(
                described,
                "status {status} of {} is in no operation",
                c.as_str()
            );
        }
    }

    /// The document's patterns accept exactly what the server's parsers accept.
    #[test]
    fn patterns_are_the_parsers() {
        use crate::objects::base::Envelope;
        use crate::objects::request_spec::RequestSpec;
        use crate::probes::pci::PciAddress;
        let address = regex::Regex::new(PciAddress::PATTERN).unwrap();
        for a in [
            "0000:3b:01.0",
            "0000:3b:1f.7",
            "0000:3b:20.0",
            "B472:9E:2f.2",
            "10000:00:00.0",
            "000:00:00.0",
            "0000:00:00.8",
            "0000:0:00.0",
            "0000:00:00",
            "0000:00:00.0 ",
            "123456789:00:00.0",
            "+000:00:00.0",
        ] {
            assert_eq!(address.is_match(a), PciAddress::parse(a).is_some(), "{a}");
        }
        let uuid = regex::Regex::new(&crate::api::bodies::uuid_pattern()).unwrap();
        let h = "6f8b1f5e-3c6a-4e0b-9a57-2b1f1d0c0a11";
        for u in [
            h.to_string(),
            h.to_uppercase(),
            h.replace('-', ""),
            format!("{{{h}}}"),
            format!("urn:uuid:{h}"),
            format!("URN:UUID:{h}"),
            format!("uRn:uUiD:{h}"),
            format!("urn:uuid:{{{h}}}"),
            format!("urn-uuid:{h}"),
            format!("{{{}}}", h.replace('-', "")),
            format!("urn:uuid:{}", h.replace('-', "")),
            format!("{h} "),
            format!("{{{h}"),
            h.replacen('-', "", 1),
            h.replace('a', "g"),
            h[1..].to_string(),
            format!("{h}0"),
            String::new(),
            "None".to_string(),
        ] {
            assert_eq!(uuid.is_match(&u), uuid::Uuid::parse_str(&u).is_ok(), "{u}");
        }
        // Every uuid an input takes says so with the pattern, not the format alone.
        let doc = document();
        for (at, v) in {
            let mut all = Vec::new();
            walk(&doc, String::new(), &mut all);
            all
        } {
            let request = at.contains("/parameters/")
                || at.contains("/propertyNames")
                || [
                    "ClaimRequest",
                    "MigrationRequest",
                    "AttachRequest",
                    "AdoptRequest",
                    "Instance",
                    "LegacyRequest",
                ]
                .iter()
                .any(|b| at.starts_with(&format!("/components/schemas/{b}/")));
            if request && v.get("format").and_then(Value::as_str) == Some("uuid") {
                assert_eq!(v["pattern"], uuid.as_str(), "{at}");
            }
        }
        let spec = nova::primitive_schema::<RequestSpec>("", json!({}));
        let version = regex::Regex::new(
            spec["properties"]["nova_object.version"]["pattern"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        for v in [
            "1.0",
            "1.15",
            "1.16",
            "01.015",
            "00001.00015",
            "000001.0",
            "1.000000",
            "2.0",
            "0.1",
            "1.",
            ".1",
            "1.1a",
            "1.-1",
            "1.99999",
            "1.100",
        ] {
            let primitive = json!({"nova_object.name": "RequestSpec", "nova_object.namespace": "nova",
                "nova_object.version": v, "nova_object.data": {}});
            let accepted = Envelope::parse(&primitive, "x").is_ok_and(|e| {
                e.version.major == RequestSpec::VERSION.major
                    && e.version.minor <= RequestSpec::VERSION.minor
            });
            assert_eq!(version.is_match(v), accepted, "{v}");
        }
    }

    #[test]
    fn templates_match_concrete_paths() {
        assert!(path_matches("/v1/claims/{instance_uuid}", "/v1/claims/abc"));
        assert!(!path_matches("/v1/claims/{instance_uuid}", "/v1/claims/"));
        assert!(!path_matches("/v1/claims/{instance_uuid}", "/v1/claims"));
        assert!(path_matches(
            "/v1/migrations/{id}/confirm",
            "/v1/migrations/3/confirm"
        ));
    }
}
