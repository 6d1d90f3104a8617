//! The versioned-object model: versions, the primitive envelope, errors, and the trait every
//! object implements.
//!
//! In: a primitive (a JSON value or text) to decode; an object to encode, with a target version and
//! optionally a [`Manifest`]. Out: a [`Versioned`] object (the object, the version it came at, its
//! changed fields) or an [`ObjectError`] naming the path; a primitive at the target version,
//! rewritten by the object's `obj_make_compatible`.
//!
//! A primitive is `{"nova_object.name", "nova_object.namespace", "nova_object.version",
//! "nova_object.data", "nova_object.changes"?}` (oslo.versionedobjects). `data` holds only the
//! fields that are set; a missing field is *unset*, `null` is a value (allowed only for nullable
//! fields). `changes` lists changed fields; it comes from a Python set, so its order means nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Value};

/// The only namespace rtrack speaks.
pub const NAMESPACE: &str = "nova";

/// Deepest nesting accepted in a primitive (objects in objects in lists...). Real Nova objects
/// nest a few levels; anything deeper is hostile or broken input.
pub const MAX_DEPTH: usize = 32;

/// An object version `MAJOR.MINOR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjVersion {
    /// Major version: a different one is incompatible.
    pub major: u16,
    /// Minor version: older ones are backward compatible.
    pub minor: u16,
}

impl ObjVersion {
    /// `major.minor`.
    pub const fn new(major: u16, minor: u16) -> ObjVersion {
        ObjVersion { major, minor }
    }

    /// Parses `"1.19"`.
    pub fn parse(s: &str) -> Option<ObjVersion> {
        let (a, b) = s.split_once('.')?;
        let digits =
            |x: &str| !x.is_empty() && x.len() <= 5 && x.chars().all(|c| c.is_ascii_digit());
        if !digits(a) || !digits(b) {
            return None;
        }
        Some(ObjVersion::new(a.parse().ok()?, b.parse().ok()?))
    }
}

impl fmt::Display for ObjVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// What went wrong, and where: `path` is like `ComputeNode.data.vcpus` or
/// `RequestSpec.data.flavor.data.extra_specs`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ObjectError {
    /// Where in the primitive.
    pub path: String,
    /// What was wrong and what was expected.
    pub message: String,
}

impl ObjectError {
    /// An error at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> ObjectError {
        ObjectError {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// Target versions per object name for backports (what nova-conductor sends as
/// `version_manifest`).
pub type Manifest = BTreeMap<String, ObjVersion>;

/// Which fields count as changed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ChangedFields {
    /// Nothing changed (as if loaded from the database): no `changes` key.
    #[default]
    None,
    /// Every set field changed (an object built in code).
    AllSet,
    /// These fields changed (as decoded).
    Fields(BTreeSet<String>),
}

/// An object with its version and changed-field set.
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned<T> {
    /// The object.
    pub obj: T,
    /// The version it was decoded at, or its current version when built in code. Encoding
    /// without a target uses this version, as Nova does.
    pub version: ObjVersion,
    /// Changed fields.
    pub changes: ChangedFields,
}

impl<T: NovaObject> Versioned<T> {
    /// A new object at the current version, every set field changed.
    pub fn new(obj: T) -> Versioned<T> {
        Versioned {
            obj,
            version: T::VERSION,
            changes: ChangedFields::AllSet,
        }
    }

    /// A new object with no changes recorded (as if loaded from storage).
    pub fn unchanged(obj: T) -> Versioned<T> {
        Versioned {
            obj,
            version: T::VERSION,
            changes: ChangedFields::None,
        }
    }

    /// Decodes a primitive: checks the envelope, the name, the namespace and the version, then
    /// the fields. `path` names where this primitive sits (the object name at the top).
    pub fn from_primitive_at(
        v: &Value,
        path: &str,
        depth: usize,
    ) -> Result<Versioned<T>, ObjectError> {
        if depth > MAX_DEPTH {
            return Err(ObjectError::new(
                path,
                format!("objects nested deeper than {MAX_DEPTH} levels"),
            ));
        }
        let env = Envelope::parse(v, path)?;
        if env.name != T::NAME {
            return Err(ObjectError::new(
                path,
                format!("expected a {} object, got {:?}", T::NAME, env.name),
            ));
        }
        let version = check_version::<T>(env.version, path)?;
        let data_path = format!("{path}.data");
        let obj = T::decode(&mut Reader {
            data: env.data,
            path: &data_path,
            version,
            depth,
        })?;
        let changes = match env.changes {
            None => ChangedFields::None,
            Some(list) => ChangedFields::Fields(list),
        };
        Ok(Versioned {
            obj,
            version,
            changes,
        })
    }

    /// Decodes a top-level primitive.
    pub fn from_primitive(v: &Value) -> Result<Versioned<T>, ObjectError> {
        Self::from_primitive_at(v, T::NAME, 0)
    }

    /// Decodes JSON text (recursion-limited by serde_json as well).
    pub fn from_json(text: &str) -> Result<Versioned<T>, ObjectError> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| ObjectError::new(T::NAME, format!("not valid JSON: {e}")))?;
        Self::from_primitive(&v)
    }

    /// Encodes at this object's own version, children at theirs (Nova's `obj_to_primitive()`).
    pub fn to_primitive(&self) -> Value {
        match self.to_primitive_at(self.version, None) {
            Ok(v) => v,
            // Without a target or manifest nothing is backported, so nothing can fail.
            Err(e) => unreachable!("encoding at the object's own version failed: {e}"),
        }
    }

    /// Nova's `obj_to_primitive(target_version, version_manifest)`: encodes every set field,
    /// then, when `target` differs from the object's version or a manifest is given, runs the
    /// object's `obj_make_compatible`, which drops or rewrites fields for `target` and backports
    /// each child object named in the manifest to the manifest's version. `changes` keeps only
    /// fields still present.
    pub fn to_primitive_at(
        &self,
        target: ObjVersion,
        manifest: Option<&Manifest>,
    ) -> Result<Value, ObjectError> {
        if target.major != self.version.major || target > self.version {
            return Err(ObjectError::new(
                T::NAME,
                format!(
                    "cannot encode version {target}: this object is version {} and only older minor versions of the same major can be produced",
                    self.version
                ),
            ));
        }
        let mut w = Writer {
            data: Map::new(),
            changed_children: BTreeSet::new(),
        };
        self.obj.encode(&mut w)?;
        let Writer {
            mut data,
            changed_children,
        } = w;
        if target != self.version || manifest.is_some_and(|m| !m.is_empty()) {
            T::make_compatible(&mut data, target, manifest)?;
        }
        let mut changes: BTreeSet<String> = match &self.changes {
            ChangedFields::None => BTreeSet::new(),
            ChangedFields::AllSet => data.keys().cloned().collect(),
            ChangedFields::Fields(f) => f.clone(),
        };
        // A parent counts a field whose child object has changes (obj_what_changed).
        changes.extend(changed_children);
        changes.retain(|f| data.contains_key(f));
        Ok(envelope(T::NAME, target, data, changes))
    }
}

/// Builds `{"nova_object.name", ...}`; `changes` is left out when empty.
pub fn envelope(
    name: &str,
    version: ObjVersion,
    data: Map<String, Value>,
    changes: BTreeSet<String>,
) -> Value {
    let mut out = Map::new();
    out.insert("nova_object.name".into(), Value::String(name.into()));
    out.insert(
        "nova_object.namespace".into(),
        Value::String(NAMESPACE.into()),
    );
    out.insert(
        "nova_object.version".into(),
        Value::String(version.to_string()),
    );
    out.insert("nova_object.data".into(), Value::Object(data));
    if !changes.is_empty() {
        out.insert(
            "nova_object.changes".into(),
            Value::Array(changes.into_iter().map(Value::String).collect()),
        );
    }
    Value::Object(out)
}

fn check_version<T: NovaObject>(v: ObjVersion, path: &str) -> Result<ObjVersion, ObjectError> {
    if v.major == T::VERSION.major && v.minor <= T::VERSION.minor {
        Ok(v)
    } else {
        Err(ObjectError::new(
            path,
            format!(
                "{} version {v} is not supported: rtrack supports {}.0 to {} (same major, minor up to {})",
                T::NAME,
                T::VERSION.major,
                T::VERSION,
                T::VERSION.minor
            ),
        ))
    }
}

/// The parsed envelope of a primitive.
pub struct Envelope<'a> {
    /// `nova_object.name`.
    pub name: &'a str,
    /// `nova_object.version`.
    pub version: ObjVersion,
    /// `nova_object.data`.
    pub data: &'a Map<String, Value>,
    /// `nova_object.changes`, if present.
    pub changes: Option<BTreeSet<String>>,
}

impl<'a> Envelope<'a> {
    /// Checks the envelope keys and types.
    pub fn parse(v: &'a Value, path: &str) -> Result<Envelope<'a>, ObjectError> {
        let obj = v.as_object().ok_or_else(|| {
            ObjectError::new(
                path,
                format!(
                    "expected an object primitive (a JSON object), got {}",
                    describe(v)
                ),
            )
        })?;
        let missing: Vec<&str> = [
            "nova_object.name",
            "nova_object.namespace",
            "nova_object.version",
            "nova_object.data",
        ]
        .into_iter()
        .filter(|k| !obj.contains_key(*k))
        .collect();
        if !missing.is_empty() {
            return Err(ObjectError::new(
                path,
                format!(
                    "missing {}; an object primitive needs nova_object.name, nova_object.namespace, nova_object.version and nova_object.data",
                    missing.join(", ")
                ),
            ));
        }
        let string = |key: &str| -> Result<&'a str, ObjectError> {
            obj[key].as_str().ok_or_else(|| {
                ObjectError::new(
                    format!("{path}.{key}"),
                    format!("expected a string, got {}", describe(&obj[key])),
                )
            })
        };
        let name = string("nova_object.name")?;
        let namespace = string("nova_object.namespace")?;
        if namespace != NAMESPACE {
            return Err(ObjectError::new(
                format!("{path}.nova_object.namespace"),
                format!("namespace {namespace:?} is not supported; expected \"nova\""),
            ));
        }
        let vs = string("nova_object.version")?;
        let version = ObjVersion::parse(vs).ok_or_else(|| {
            ObjectError::new(
                format!("{path}.nova_object.version"),
                format!("{vs:?} is not a version like \"1.19\""),
            )
        })?;
        let data = obj["nova_object.data"].as_object().ok_or_else(|| {
            ObjectError::new(
                format!("{path}.nova_object.data"),
                format!(
                    "expected a JSON object, got {}",
                    describe(&obj["nova_object.data"])
                ),
            )
        })?;
        let changes = match obj.get("nova_object.changes") {
            None => None,
            Some(Value::Array(items)) => {
                let mut set = BTreeSet::new();
                for (i, item) in items.iter().enumerate() {
                    let s = item.as_str().ok_or_else(|| {
                        ObjectError::new(
                            format!("{path}.nova_object.changes[{i}]"),
                            format!("expected a field name (string), got {}", describe(item)),
                        )
                    })?;
                    set.insert(s.to_string());
                }
                Some(set)
            }
            Some(other) => {
                return Err(ObjectError::new(
                    format!("{path}.nova_object.changes"),
                    format!("expected a list of field names, got {}", describe(other)),
                ))
            }
        };
        Ok(Envelope {
            name,
            version,
            data,
            changes,
        })
    }
}

/// Short description of a JSON value for messages: `string "64"`, `integer 64`, `object`.
pub fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) if n.is_f64() => format!("number {n}"),
        Value::Number(n) => format!("integer {n}"),
        Value::String(s) => {
            let short: String = s.chars().take(40).collect();
            if short.len() < s.len() {
                format!("string {short:?}...")
            } else {
                format!("string {s:?}")
            }
        }
        Value::Array(_) => "a list".to_string(),
        Value::Object(_) => "an object".to_string(),
    }
}

/// A versioned object type.
pub trait NovaObject: Sized + Clone {
    /// `nova_object.name`.
    const NAME: &'static str;
    /// The newest version rtrack implements.
    const VERSION: ObjVersion;
    /// Carried without interpretation (see [`super::opaque`]): never backported.
    const OPAQUE: bool = false;

    /// Reads the fields from `nova_object.data`.
    fn decode(r: &mut Reader<'_>) -> Result<Self, ObjectError>;

    /// Writes the set fields (at the current version; children at their wanted versions).
    fn encode(&self, w: &mut Writer) -> Result<(), ObjectError>;

    /// Nova's `obj_make_compatible`: rewrites encoded data for `target`, and backports child
    /// objects per the manifest (see [`super::fields::backport_child`]). Called only when the
    /// target differs from the object's version or a manifest is given.
    fn make_compatible(
        _data: &mut Map<String, Value>,
        _target: ObjVersion,
        _manifest: Option<&Manifest>,
    ) -> Result<(), ObjectError> {
        Ok(())
    }
}

/// Reads `nova_object.data`, tracking the path for messages.
pub struct Reader<'a> {
    /// The data map.
    pub data: &'a Map<String, Value>,
    /// Path of the data map, e.g. `ComputeNode.data`.
    pub path: &'a str,
    /// The version being decoded.
    pub version: ObjVersion,
    /// Nesting depth.
    pub depth: usize,
}

/// Writes `nova_object.data`.
pub struct Writer {
    /// The data map being built.
    pub data: Map<String, Value>,
    /// Fields whose child objects have changes.
    pub changed_children: BTreeSet<String>,
}
