//! Request bodies the tests send (RequestSpec primitives, claims) and the check of an answer
//! against its OpenAPI schema.

use std::collections::BTreeSet;

use serde_json::Value;

/// A RequestSpec primitive asking for a flavor (and PCI aliases through `pci_passthrough:alias`).
pub fn request_spec(
    uuid: &str,
    flavor_id: i64,
    vcpus: i64,
    memory_mb: i64,
    root_gb: i64,
    alias: Option<&str>,
) -> Value {
    let mut extra = serde_json::Map::new();
    if let Some(a) = alias {
        extra.insert("pci_passthrough:alias".into(), a.into());
    }
    serde_json::json!({
        "nova_object.name": "RequestSpec", "nova_object.namespace": "nova",
        "nova_object.version": "1.14",
        "nova_object.data": {
            "instance_uuid": uuid, "project_id": "p1", "user_id": "u1", "num_instances": 1,
            "flavor": {
                "nova_object.name": "Flavor", "nova_object.namespace": "nova",
                "nova_object.version": "1.2",
                "nova_object.data": {"id": flavor_id, "flavorid": format!("f{flavor_id}"),
                    "name": format!("f{flavor_id}"), "vcpus": vcpus, "memory_mb": memory_mb,
                    "root_gb": root_gb, "ephemeral_gb": 0, "swap": 0, "extra_specs": extra}
            }
        }
    })
}

/// `spec` (a RequestSpec primitive) with an image of these properties (an ImageMetaProps
/// primitive's data: typed values), as Nova sends it.
pub fn with_image(mut spec: Value, name: &str, properties: Value) -> Value {
    spec["nova_object.data"]["image"] = serde_json::json!({
        "nova_object.name": "ImageMeta", "nova_object.namespace": "nova",
        "nova_object.version": "1.8",
        "nova_object.data": {"id": format!("{name}-id"), "name": name, "properties": {
            "nova_object.name": "ImageMetaProps", "nova_object.namespace": "nova",
            "nova_object.version": "1.44", "nova_object.data": properties}}});
    spec
}

/// A claim body for `alias` (of VFs 8086:1889) whose PCI request `request_id` Placement
/// allocated from `providers` (one per device), as Nova sends it: the request in
/// `pci_requests`, one request group `<request_id>-<n>` per device with its provider.
pub fn mapped_claim(instance: &str, alias: &str, request_id: &str, providers: &[&str]) -> Value {
    let mut spec = request_spec(
        instance,
        1,
        1,
        512,
        1,
        Some(&format!("{alias}:{}", providers.len())),
    );
    let data = spec["nova_object.data"].as_object_mut().unwrap();
    data.insert(
        "pci_requests".into(),
        serde_json::json!({
        "nova_object.name": "InstancePCIRequests", "nova_object.namespace": "nova",
        "nova_object.version": "1.1",
        "nova_object.data": {"instance_uuid": instance, "requests": [{
            "nova_object.name": "InstancePCIRequest", "nova_object.namespace": "nova",
            "nova_object.version": "1.4", "nova_object.data": {
                "count": providers.len(),
                "spec": [{"vendor_id": "8086", "product_id": "1889", "dev_type": "type-VF"}],
                "alias_name": alias, "is_new": false, "request_id": request_id}}]}}),
    );
    let groups: Vec<Value> = providers
        .iter()
        .enumerate()
        .map(|(i, p)| {
            serde_json::json!({
            "nova_object.name": "RequestGroup", "nova_object.namespace": "nova",
            "nova_object.version": "1.3", "nova_object.data": {
                "use_same_provider": true, "requester_id": format!("{request_id}-{i}"),
                "resources": {"CUSTOM_PCI_8086_1889": 1}, "provider_uuids": [p]}})
        })
        .collect();
    data.insert("requested_resources".into(), Value::Array(groups));
    serde_json::json!({"request_spec": spec})
}

/// A claim body.
pub fn claim(uuid: &str, vcpus: i64, memory_mb: i64, root_gb: i64, alias: Option<&str>) -> Value {
    serde_json::json!({"request_spec": request_spec(uuid, 1, vcpus, memory_mb, root_gb, alias)})
}

/// A uuid from a number.
pub fn uuid(n: u64) -> String {
    format!("00000000-0000-4000-8000-{n:012}")
}

/// Checks `answer` against `schema` (references resolved in `doc`): every key an object answer
/// has is documented, and every documented key is there. Hand-written answer schemas would
/// otherwise drift from what the routes build.
pub fn check_shape(doc: &Value, schema: &Value, answer: &Value, at: &str) {
    let schema = match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let name = r.trim_start_matches("#/components/schemas/");
            &doc["components"]["schemas"][name]
        }
        None => schema,
    };
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        if answer.is_null() {
            return;
        }
        for s in all {
            check_shape(doc, s, answer, at);
        }
        return;
    }
    if let Some(alternatives) = schema.get("oneOf").and_then(Value::as_array) {
        if answer.is_null() {
            // A value that may be null (JSON Schema 2020-12): one of it and {"type": "null"}.
            assert!(
                alternatives.iter().any(|s| s["type"] == "null"),
                "{at}: null, not one of {alternatives:?}"
            );
            return;
        }
        if schema.get("properties").is_none() {
            // One of several shapes: the answer must match one of them.
            let names: BTreeSet<String> = answer
                .as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            assert!(
                alternatives.iter().any(|s| {
                    let s = match s.get("$ref").and_then(Value::as_str) {
                        Some(r) => {
                            &doc["components"]["schemas"]
                                [r.trim_start_matches("#/components/schemas/")]
                        }
                        None => s,
                    };
                    s["properties"]
                        .as_object()
                        .is_some_and(|p| p.keys().cloned().collect::<BTreeSet<_>>() == names)
                }),
                "{at}: {answer} matches none of {alternatives:?}"
            );
            return;
        }
    }
    match (schema.get("properties").and_then(Value::as_object), answer) {
        (Some(props), Value::Object(fields)) => {
            let documented: BTreeSet<&String> = props.keys().collect();
            let answered: BTreeSet<&String> = fields.keys().collect();
            // Keys a schema leaves out of its `required` list may be absent; every key answered
            // must be documented.
            let required: BTreeSet<&String> = match schema.get("required").and_then(Value::as_array)
            {
                Some(r) if props.len() > r.len() => documented
                    .iter()
                    .copied()
                    .filter(|k| r.iter().any(|x| x == k.as_str()))
                    .collect(),
                _ => documented.clone(),
            };
            assert!(
                answered.is_subset(&documented) && required.is_subset(&answered),
                "{at}: answer keys {answered:?} vs documented properties {documented:?} (required {required:?})"
            );
            for (k, v) in fields {
                check_shape(doc, &props[k], v, &format!("{at}.{k}"));
            }
        }
        (None, Value::Object(fields)) => {
            if let Some(each) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for (k, v) in fields {
                    check_shape(doc, each, v, &format!("{at}.{k}"));
                }
            }
        }
        (_, Value::Array(items)) => {
            if let Some(each) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    check_shape(doc, each, v, &format!("{at}[{i}]"));
                }
            }
        }
        _ => {}
    }
}
