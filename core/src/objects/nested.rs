//! Fields that hold other objects (ObjectField, ListOfObjectsField) and the backport of such
//! children when the parent is encoded for an older manifest, as oslo.versionedobjects does.
//!
//! In: child objects and a version manifest. Out: their primitives, backported in place.

use std::marker::PhantomData;

use serde_json::{Map, Value};

use super::base::{Manifest, NovaObject, ObjVersion, ObjectError, Versioned, Writer};
use super::fields::{type_error, Kind};

/// ObjectField of `O`.
pub struct Obj<O>(PhantomData<O>);
impl<O: NovaObject + std::fmt::Debug + PartialEq> Kind for Obj<O> {
    type T = Versioned<O>;
    fn decode(v: &Value, path: &str, depth: usize) -> Result<Versioned<O>, ObjectError> {
        Versioned::<O>::from_primitive_at(v, path, depth + 1)
    }
    fn encode(t: &Versioned<O>, w: &mut Writer, name: &str) -> Result<Value, ObjectError> {
        let v = encode_child(t)?;
        if has_changes(&v) {
            w.changed_children.insert(name.to_string());
        }
        Ok(v)
    }
}

/// ListOfObjectsField of `O`.
pub struct ListObj<O>(PhantomData<O>);
impl<O: NovaObject + std::fmt::Debug + PartialEq> Kind for ListObj<O> {
    type T = Vec<Versioned<O>>;
    fn decode(v: &Value, path: &str, depth: usize) -> Result<Self::T, ObjectError> {
        let items = v
            .as_array()
            .ok_or_else(|| type_error(path, &format!("list of {} objects", O::NAME), v))?;
        items
            .iter()
            .enumerate()
            .map(|(i, x)| Versioned::<O>::from_primitive_at(x, &format!("{path}[{i}]"), depth + 1))
            .collect()
    }
    fn encode(t: &Self::T, w: &mut Writer, name: &str) -> Result<Value, ObjectError> {
        let items = t.iter().map(encode_child).collect::<Result<Vec<_>, _>>()?;
        if items.iter().any(has_changes) {
            w.changed_children.insert(name.to_string());
        }
        Ok(Value::Array(items))
    }
}

/// A child object inside a parent being encoded: at its own version with its own changes
/// (Nova's `ObjectField.to_primitive`); backports happen afterwards in `make_compatible`.
fn encode_child<O: NovaObject>(child: &Versioned<O>) -> Result<Value, ObjectError> {
    child.to_primitive_at(child.version, None)
}

/// An encoded child with changes of its own (or in its children) makes its parent field
/// changed, as Nova's `obj_what_changed` does.
fn has_changes(prim: &Value) -> bool {
    prim.get("nova_object.changes").is_some()
}

/// Backports the child object (or list of objects) in `data[field]` as oslo's
/// `_obj_make_obj_compatible` does: nothing when the field is absent or null, or when the
/// manifest does not name the child; else the child's data goes through its own
/// `make_compatible` for the manifest's version and its version key is rewritten. The child's
/// `changes` are left as they were, as Nova leaves them. Without a manifest Nova fails ("No rule
/// for `<field>`"), and so does this.
pub fn backport_child<C: NovaObject>(
    data: &mut Map<String, Value>,
    field: &str,
    parent: &str,
    manifest: Option<&Manifest>,
) -> Result<(), ObjectError> {
    let Some(value) = data.get_mut(field) else {
        return Ok(());
    };
    if value.is_null() {
        return Ok(());
    }
    let Some(manifest) = manifest else {
        return Err(ObjectError::new(
            format!("{parent}.{field}"),
            "backporting needs a version manifest naming the child objects' versions (Nova: No rule for this field)",
        ));
    };
    let Some(&to) = manifest.get(C::NAME) else {
        return Ok(());
    };
    backport_in_place::<C>(value, to, manifest, &format!("{parent}.{field}"))
}

/// Backports the elements of a list object's `objects` (oslo `ObjectListBase`): to the
/// manifest's version for the child name, else to 1.0, as oslo does.
pub fn backport_list_children<C: NovaObject>(
    data: &mut Map<String, Value>,
    parent: &str,
    manifest: Option<&Manifest>,
) -> Result<(), ObjectError> {
    let to = manifest
        .and_then(|m| m.get(C::NAME).copied())
        .unwrap_or(ObjVersion::new(1, 0));
    match data.get_mut("objects") {
        Some(v) => backport_in_place::<C>(
            v,
            to,
            manifest.unwrap_or(&Manifest::new()),
            &format!("{parent}.objects"),
        ),
        None => Ok(()),
    }
}

fn backport_in_place<C: NovaObject>(
    value: &mut Value,
    to: ObjVersion,
    manifest: &Manifest,
    path: &str,
) -> Result<(), ObjectError> {
    match value {
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                backport_one::<C>(item, to, manifest, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        other => backport_one::<C>(other, to, manifest, path),
    }
}

fn backport_one<C: NovaObject>(
    prim: &mut Value,
    to: ObjVersion,
    manifest: &Manifest,
    path: &str,
) -> Result<(), ObjectError> {
    let Some(obj) = prim.as_object_mut() else {
        return Err(ObjectError::new(path, "expected an object primitive"));
    };
    let current = obj
        .get("nova_object.version")
        .and_then(Value::as_str)
        .and_then(ObjVersion::parse)
        .ok_or_else(|| ObjectError::new(path, "object primitive without a version"))?;
    // A manifest asking for a newer version than the child has cannot upgrade it.
    let to = if to.major == current.major && to <= current {
        to
    } else {
        current
    };
    if C::OPAQUE && to == current {
        return Ok(());
    }
    if let Some(Value::Object(data)) = obj.get_mut("nova_object.data") {
        C::make_compatible(data, to, Some(manifest))?;
    }
    obj.insert("nova_object.version".into(), Value::String(to.to_string()));
    Ok(())
}
