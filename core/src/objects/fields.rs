//! Field values and their JSON forms. Types are checked strictly: where Nova would coerce
//! (`"64"` to 64, `"false"` to true), rtrack refuses and names the field.
//!
//! In: one field's JSON value from `nova_object.data` (with its path, for messages), or a field's
//! Rust value to encode. Out: the typed value, held as a [`Field`] or an [`NField`], or an
//! [`ObjectError`] naming the field and what was expected; on encoding, the JSON value, with only
//! set fields written.
//!
//! A non-nullable field is a [`Field`] (unset or set); a nullable one is an [`NField`] (unset,
//! null or set). Each field type is a [`Kind`] that decodes and encodes one JSON value.

use std::collections::BTreeMap;
use std::marker::PhantomData;

use serde_json::{Map, Value};

use super::base::{describe, ObjVersion, ObjectError, Reader, Writer};

pub use super::nested::{backport_child, backport_list_children, ListObj, Obj};

/// A non-nullable field: unset, or a value.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Field<T> {
    /// Not in `data` (Nova: not set, lazy-loadable).
    #[default]
    Unset,
    /// A value.
    Set(T),
}

impl<T> Field<T> {
    /// The value, if set.
    pub fn get(&self) -> Option<&T> {
        match self {
            Field::Set(v) => Some(v),
            Field::Unset => None,
        }
    }

    /// True when set.
    pub fn is_set(&self) -> bool {
        matches!(self, Field::Set(_))
    }
}

impl<T> From<T> for Field<T> {
    fn from(v: T) -> Field<T> {
        Field::Set(v)
    }
}

/// A nullable field: unset, null, or a value.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum NField<T> {
    /// Not in `data`.
    #[default]
    Unset,
    /// In `data` as `null`.
    Null,
    /// A value.
    Set(T),
}

impl<T> NField<T> {
    /// The value, if set and not null.
    pub fn get(&self) -> Option<&T> {
        match self {
            NField::Set(v) => Some(v),
            _ => None,
        }
    }

    /// True when set (to null or a value).
    pub fn is_set(&self) -> bool {
        !matches!(self, NField::Unset)
    }

    /// From an option: `None` becomes null.
    pub fn from_option(v: Option<T>) -> NField<T> {
        match v {
            Some(v) => NField::Set(v),
            None => NField::Null,
        }
    }
}

/// One field type.
pub trait Kind {
    /// The Rust value.
    type T: Clone + PartialEq + std::fmt::Debug;
    /// Decodes a (non-null) JSON value.
    fn decode(v: &Value, path: &str, depth: usize) -> Result<Self::T, ObjectError>;
    /// Encodes a value; `name` is the field name (for child-change tracking).
    fn encode(t: &Self::T, w: &mut Writer, name: &str) -> Result<Value, ObjectError>;
}

pub(super) fn type_error(path: &str, expected: &str, v: &Value) -> ObjectError {
    ObjectError::new(path, format!("expected {expected}, got {}", describe(v)))
}

/// IntegerField: a JSON integer, held as `i64`.
pub struct Int;
impl Kind for Int {
    type T = i64;
    fn decode(v: &Value, path: &str, _: usize) -> Result<i64, ObjectError> {
        v.as_i64().ok_or_else(|| type_error(path, "integer", v))
    }
    fn encode(t: &i64, _: &mut Writer, _: &str) -> Result<Value, ObjectError> {
        Ok(Value::from(*t))
    }
}

/// FloatField. JSON does not tell 4 from 4.0, so integers are accepted; output is always a
/// float (`4.0`), as Nova writes it.
pub struct Float;
impl Kind for Float {
    type T = f64;
    fn decode(v: &Value, path: &str, _: usize) -> Result<f64, ObjectError> {
        match v {
            Value::Number(n) => n.as_f64().ok_or_else(|| type_error(path, "number", v)),
            _ => Err(type_error(path, "number", v)),
        }
    }
    fn encode(t: &f64, _: &mut Writer, name: &str) -> Result<Value, ObjectError> {
        serde_json::Number::from_f64(*t)
            .map(Value::Number)
            .ok_or_else(|| ObjectError::new(name, format!("{t} is not a finite number")))
    }
}

/// StringField: a JSON string; numbers and other types are refused.
pub struct Str;
impl Kind for Str {
    type T = String;
    fn decode(v: &Value, path: &str, _: usize) -> Result<String, ObjectError> {
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| type_error(path, "string", v))
    }
    fn encode(t: &String, _: &mut Writer, _: &str) -> Result<Value, ObjectError> {
        Ok(Value::String(t.clone()))
    }
}

/// BooleanField: JSON `true` or `false`; strings and numbers are refused.
pub struct Bool;
impl Kind for Bool {
    type T = bool;
    fn decode(v: &Value, path: &str, _: usize) -> Result<bool, ObjectError> {
        v.as_bool().ok_or_else(|| type_error(path, "boolean", v))
    }
    fn encode(t: &bool, _: &mut Writer, _: &str) -> Result<Value, ObjectError> {
        Ok(Value::Bool(*t))
    }
}

/// UUIDField: a UUID string (Nova only warns on others; rtrack refuses them).
pub struct Uuid;
impl Kind for Uuid {
    type T = String;
    fn decode(v: &Value, path: &str, _: usize) -> Result<String, ObjectError> {
        let s = v
            .as_str()
            .ok_or_else(|| type_error(path, "UUID string", v))?;
        uuid::Uuid::parse_str(s)
            .map(|_| s.to_string())
            .map_err(|_| ObjectError::new(path, format!("expected a UUID, got string {s:?}")))
    }
    fn encode(t: &String, _: &mut Writer, _: &str) -> Result<Value, ObjectError> {
        Ok(Value::String(t.clone()))
    }
}

/// DateTimeField: ISO 8601 in, `YYYY-MM-DDTHH:MM:SSZ` (UTC, whole seconds) out.
pub struct DateTime;
impl Kind for DateTime {
    type T = time::OffsetDateTime;
    fn decode(v: &Value, path: &str, _: usize) -> Result<time::OffsetDateTime, ObjectError> {
        let s = v
            .as_str()
            .ok_or_else(|| type_error(path, "date-time string", v))?;
        parse_datetime(s).ok_or_else(|| {
            ObjectError::new(
                path,
                format!("expected a date-time like \"2025-03-14T09:26:53Z\", got string {s:?}"),
            )
        })
    }
    fn encode(t: &time::OffsetDateTime, _: &mut Writer, _: &str) -> Result<Value, ObjectError> {
        Ok(Value::String(format_utc(*t)))
    }
}

/// Parses the ISO 8601 forms Nova produces and accepts: `Z` or `+hh:mm` offsets, optional
/// fractions, or none (naive times are UTC, as in Nova).
pub fn parse_datetime(s: &str) -> Option<time::OffsetDateTime> {
    use time::format_description::well_known::Rfc3339;
    if let Ok(t) = time::OffsetDateTime::parse(s, &Rfc3339) {
        return Some(t);
    }
    // Naive forms: "2025-03-14T09:26:53" or with a space, optional fraction.
    let normalized = s.replacen(' ', "T", 1);
    time::OffsetDateTime::parse(&format!("{normalized}Z"), &Rfc3339).ok()
}

/// `YYYY-MM-DDTHH:MM:SSZ` (UTC, whole seconds): how Nova's objects write times, and rtrack's
/// reports too.
pub fn format_utc(t: time::OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// IPAddressField: normalized on decode (lower-case, compressed IPv6), like netaddr.
pub struct Ip;
impl Kind for Ip {
    type T = std::net::IpAddr;
    fn decode(v: &Value, path: &str, _: usize) -> Result<std::net::IpAddr, ObjectError> {
        let s = v
            .as_str()
            .ok_or_else(|| type_error(path, "IP address string", v))?;
        s.parse().map_err(|_| {
            ObjectError::new(
                path,
                format!("expected an IPv4 or IPv6 address, got string {s:?}"),
            )
        })
    }
    fn encode(t: &std::net::IpAddr, _: &mut Writer, _: &str) -> Result<Value, ObjectError> {
        Ok(Value::String(t.to_string()))
    }
}

/// DictOfStringsField: a JSON object whose values are all strings.
pub struct DictStr;
impl Kind for DictStr {
    type T = BTreeMap<String, String>;
    fn decode(v: &Value, path: &str, _: usize) -> Result<Self::T, ObjectError> {
        let m = v
            .as_object()
            .ok_or_else(|| type_error(path, "object of strings", v))?;
        m.iter()
            .map(|(k, v)| {
                v.as_str()
                    .map(|s| (k.clone(), s.to_string()))
                    .ok_or_else(|| type_error(&format!("{path}.{k}"), "string", v))
            })
            .collect()
    }
    fn encode(t: &Self::T, _: &mut Writer, _: &str) -> Result<Value, ObjectError> {
        Ok(Value::Object(
            t.iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect(),
        ))
    }
}

/// DictOfNullableStringsField: a JSON object whose values are strings or `null`.
pub struct DictNullStr;
impl Kind for DictNullStr {
    type T = BTreeMap<String, Option<String>>;
    fn decode(v: &Value, path: &str, _: usize) -> Result<Self::T, ObjectError> {
        let m = v
            .as_object()
            .ok_or_else(|| type_error(path, "object of strings or nulls", v))?;
        m.iter()
            .map(|(k, v)| match v {
                Value::Null => Ok((k.clone(), None)),
                Value::String(s) => Ok((k.clone(), Some(s.clone()))),
                _ => Err(type_error(&format!("{path}.{k}"), "string or null", v)),
            })
            .collect()
    }
    fn encode(t: &Self::T, _: &mut Writer, _: &str) -> Result<Value, ObjectError> {
        Ok(Value::Object(
            t.iter()
                .map(|(k, v)| (k.clone(), v.clone().map_or(Value::Null, Value::String)))
                .collect(),
        ))
    }
}

/// ListOfStringsField: a JSON list of strings.
pub struct ListStr;
impl Kind for ListStr {
    type T = Vec<String>;
    fn decode(v: &Value, path: &str, _: usize) -> Result<Self::T, ObjectError> {
        let items = v
            .as_array()
            .ok_or_else(|| type_error(path, "list of strings", v))?;
        items
            .iter()
            .enumerate()
            .map(|(i, x)| {
                x.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| type_error(&format!("{path}[{i}]"), "string", x))
            })
            .collect()
    }
    fn encode(t: &Self::T, _: &mut Writer, _: &str) -> Result<Value, ObjectError> {
        Ok(Value::Array(t.iter().cloned().map(Value::String).collect()))
    }
}

/// ListOfIntegersField and SetOfIntegersField (order kept as given: sets come in Python's set
/// order).
pub struct ListInt;
impl Kind for ListInt {
    type T = Vec<i64>;
    fn decode(v: &Value, path: &str, _: usize) -> Result<Self::T, ObjectError> {
        let items = v
            .as_array()
            .ok_or_else(|| type_error(path, "list of integers", v))?;
        items
            .iter()
            .enumerate()
            .map(|(i, x)| {
                x.as_i64()
                    .ok_or_else(|| type_error(&format!("{path}[{i}]"), "integer", x))
            })
            .collect()
    }
    fn encode(t: &Self::T, _: &mut Writer, _: &str) -> Result<Value, ObjectError> {
        Ok(Value::Array(t.iter().map(|v| Value::from(*v)).collect()))
    }
}

/// ListOfSetsOfIntegersField (NUMA cell siblings).
pub struct ListListInt;
impl Kind for ListListInt {
    type T = Vec<Vec<i64>>;
    fn decode(v: &Value, path: &str, d: usize) -> Result<Self::T, ObjectError> {
        let items = v
            .as_array()
            .ok_or_else(|| type_error(path, "list of lists of integers", v))?;
        items
            .iter()
            .enumerate()
            .map(|(i, x)| ListInt::decode(x, &format!("{path}[{i}]"), d))
            .collect()
    }
    fn encode(t: &Self::T, w: &mut Writer, n: &str) -> Result<Value, ObjectError> {
        t.iter()
            .map(|x| ListInt::encode(x, w, n))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array)
    }
}

/// A field kept as JSON without interpretation (fields of objects rtrack carries but does not
/// use, such as `Instance.metadata` or `RequestSpec.image`); any value but null (the
/// nullability is the field's) passes.
pub struct Json;
impl Kind for Json {
    type T = Value;
    fn decode(v: &Value, _: &str, _: usize) -> Result<Value, ObjectError> {
        Ok(v.clone())
    }
    fn encode(t: &Value, _: &mut Writer, _: &str) -> Result<Value, ObjectError> {
        Ok(t.clone())
    }
}

/// An enum field: a string from a fixed set.
pub trait EnumValues {
    /// Name of the enum for messages.
    const NAME: &'static str;
    /// Accepted values.
    const VALUES: &'static [&'static str];
}

/// EnumField of `E`.
pub struct Enum<E>(PhantomData<E>);
impl<E: EnumValues> Kind for Enum<E> {
    type T = String;
    fn decode(v: &Value, path: &str, _: usize) -> Result<String, ObjectError> {
        let s = v.as_str().ok_or_else(|| type_error(path, E::NAME, v))?;
        if E::VALUES.contains(&s) {
            Ok(s.to_string())
        } else {
            Err(ObjectError::new(
                path,
                format!(
                    "{s:?} is not a valid {}; expected one of {}",
                    E::NAME,
                    E::VALUES.join(", ")
                ),
            ))
        }
    }
    fn encode(t: &String, _: &mut Writer, _: &str) -> Result<Value, ObjectError> {
        Ok(Value::String(t.clone()))
    }
}

impl Reader<'_> {
    fn raw(&self, name: &str) -> Option<&Value> {
        self.data.get(name)
    }

    fn field_path(&self, name: &str) -> String {
        format!("{}.{name}", self.path)
    }

    /// A non-nullable field.
    pub fn req<K: Kind>(&self, name: &str) -> Result<Field<K::T>, ObjectError> {
        match self.raw(name) {
            None => Ok(Field::Unset),
            Some(Value::Null) => Err(ObjectError::new(
                self.field_path(name),
                "is null, but this field cannot be null",
            )),
            Some(v) => K::decode(v, &self.field_path(name), self.depth).map(Field::Set),
        }
    }

    /// A nullable field.
    pub fn opt<K: Kind>(&self, name: &str) -> Result<NField<K::T>, ObjectError> {
        match self.raw(name) {
            None => Ok(NField::Unset),
            Some(Value::Null) => Ok(NField::Null),
            Some(v) => K::decode(v, &self.field_path(name), self.depth).map(NField::Set),
        }
    }
}

impl Writer {
    /// Writes a non-nullable field if set.
    pub fn req<K: Kind>(&mut self, name: &str, f: &Field<K::T>) -> Result<(), ObjectError> {
        if let Field::Set(v) = f {
            let value = K::encode(v, self, name)?;
            self.data.insert(name.to_string(), value);
        }
        Ok(())
    }

    /// Writes a nullable field if set.
    pub fn opt<K: Kind>(&mut self, name: &str, f: &NField<K::T>) -> Result<(), ObjectError> {
        match f {
            NField::Unset => {}
            NField::Null => {
                self.data.insert(name.to_string(), Value::Null);
            }
            NField::Set(v) => {
                let value = K::encode(v, self, name)?;
                self.data.insert(name.to_string(), value);
            }
        }
        Ok(())
    }
}

/// Removes `fields` from encoded data (a backport dropping fields newer than the target).
pub fn drop_fields(data: &mut Map<String, Value>, fields: &[&str]) {
    for f in fields {
        data.remove(*f);
    }
}

/// True when `target` is older than `major.minor`.
pub fn older(target: ObjVersion, major: u16, minor: u16) -> bool {
    target < ObjVersion::new(major, minor)
}
