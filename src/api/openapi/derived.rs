//! The answer schemas, derived from the answer types ([`crate::api::views`]): utoipa's
//! components, with each flattened type (`#[serde(flatten)]`, an `allOf` in utoipa's output)
//! merged into one object, as the answer has its keys, and the answers a client must tell
//! apart made exact.
//!
//! In: [`views::schemas`]. Out: the answer components of the document.

use serde_json::{Map, Value};

use crate::api::views;

/// The answers a client must tell apart (a claim, a dry run, a move): each lists every key as
/// required and no other, so that exactly one of the alternatives documented matches.
const EXACT: &[&str] = &["ClaimAnswer", "DryRun", "MoveClaim", "MoveDryRun"];

/// Every answer component, flattened types merged, [`EXACT`] ones exact.
pub fn answer_schemas() -> Map<String, Value> {
    let derived = views::schemas();
    let mut out = Map::new();
    for (name, schema) in &derived {
        let mut schema = merged(&derived, schema);
        lift_descriptions(&mut schema);
        if EXACT.contains(&name.as_str()) {
            schema = exact(schema);
        }
        out.insert(name.clone(), schema);
    }
    out
}

/// `schema` with its `allOf` parts (references to other components, or objects) merged into
/// one object: their properties in order, their required lists joined; its own description kept.
fn merged(all: &Map<String, Value>, schema: &Value) -> Value {
    let Some(parts) = schema.get("allOf").and_then(Value::as_array) else {
        return schema.clone();
    };
    let mut properties = Map::new();
    let mut required = Vec::new();
    for part in parts {
        let part = match part.get("$ref").and_then(Value::as_str) {
            Some(r) => {
                let name = r.trim_start_matches("#/components/schemas/");
                match all.get(name) {
                    Some(s) => merged(all, s),
                    None => return schema.clone(),
                }
            }
            None => part.clone(),
        };
        if let Some(p) = part.get("properties").and_then(Value::as_object) {
            properties.extend(p.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        if let Some(r) = part.get("required").and_then(Value::as_array) {
            required.extend(r.iter().cloned());
        }
    }
    let mut out = Map::new();
    out.insert("type".into(), Value::from("object"));
    if let Some(d) = schema.get("description") {
        out.insert("description".into(), d.clone());
    }
    out.insert("required".into(), Value::Array(required));
    out.insert("properties".into(), Value::Object(properties));
    Value::Object(out)
}

/// A nullable property utoipa writes as `{"oneOf": [{"type": "null"}, {"$ref", "description"}]}`
/// gets its description on the property, where readers look for it.
fn lift_descriptions(schema: &mut Value) {
    let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    for property in properties.values_mut() {
        let Some(alternatives) = property.get_mut("oneOf").and_then(Value::as_array_mut) else {
            continue;
        };
        let description = alternatives
            .iter_mut()
            .filter_map(Value::as_object_mut)
            .find_map(|a| a.remove("description"));
        if let (Some(d), Some(p)) = (description, property.as_object_mut()) {
            p.insert("description".into(), d);
        }
    }
}

/// `schema` with every property required and no other.
pub fn exact(mut schema: Value) -> Value {
    let keys: Vec<Value> = schema["properties"]
        .as_object()
        .map(|p| p.keys().cloned().map(Value::String).collect())
        .unwrap_or_default();
    schema["required"] = Value::Array(keys);
    schema["additionalProperties"] = Value::Bool(false);
    schema
}
