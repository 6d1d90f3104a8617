//! The packaged configuration file `packaging/rtrack.toml` (installed as
//! /etc/rtrack/rtrack.toml) against rtrack's own loader:
//!
//! 1. as shipped it loads and validates, and means exactly the built-in defaults;
//! 2. its examples are true: uncommenting every `# key = value` line and every commented
//!    section header gives a file that validates, [placement] included for each auth method;
//! 3. it documents every key: the key names are read from `Config`'s own `Deserialize`
//!    implementation (no hand-kept list), and each must be one of the file's examples.
//!
//! It also checks that the systemd unit agrees with the daemon's defaults.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use regex::Regex;
use rtrack::config::Config;
use rtrack::upstream::{validate_http_push, validate_placement, AuthSettings, UpstreamError};
use serde::de::{self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, Visitor};

fn packaging(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging")
        .join(file)
}

fn shipped_text() -> String {
    std::fs::read_to_string(packaging("rtrack.toml")).unwrap()
}

/// The file with every commented example assignment (`# key = value`) and every commented
/// section header (`# [section]`, `# [[array]]`) made real; prose comments stay. Returns the
/// text and how many lines were uncommented.
fn uncomment(text: &str) -> (String, usize) {
    let example =
        Regex::new(r"^# ((?:[A-Za-z0-9_]+ = .*)|(?:\[\[?[A-Za-z0-9_.\-]+\]\]?))$").unwrap();
    let mut count = 0;
    let mut out = String::new();
    for line in text.lines() {
        match example.captures(line) {
            Some(c) => {
                count += 1;
                out.push_str(&c[1]);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    (out, count)
}

/// Writes the uncommented copy to a temporary file, as an operator's edited file would be.
fn uncommented_file() -> (tempfile::TempDir, PathBuf) {
    let (text, count) = uncomment(&shipped_text());
    assert!(count > 50, "only {count} examples found");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rtrack.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

#[test]
fn the_shipped_file_validates_and_means_the_defaults() {
    let path = packaging("rtrack.toml");
    let config = Config::load(&path).unwrap();
    config.validate(&path).unwrap();
    // Every key is commented out: the file means what an absent file means.
    assert_eq!(config, Config::default());
    assert_eq!(validate_placement(&config.placement).unwrap(), None);
    assert_eq!(
        validate_http_push(config.upstream.http.as_ref()).unwrap(),
        None
    );
}

#[test]
fn every_documented_example_validates() {
    let (_dir, path) = uncommented_file();
    let mut config = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    // Validation covers [placement] too, and its examples belong to different auth methods:
    // the next test validates them method by method.
    config.placement = Default::default();
    // vcpu_pin_set excludes cpu_dedicated_set (Nova's rule): its example is checked alone.
    let mut legacy = config.clone();
    legacy.resources.cpu_dedicated_set = None;
    legacy.resources.cpu_power_management = None;
    let legacy = legacy.validate(&path).unwrap_or_else(|e| panic!("{e}"));
    assert!(legacy.resources.vcpu_pin_set.is_some() && legacy.resources.legacy_cpus());
    config.resources.vcpu_pin_set = None;
    let valid = config.validate(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(valid.pci.device_specs.len(), 4);
    assert_eq!(valid.pci.aliases.len(), 2);
    assert!(valid.resources.cpu_dedicated_set.is_some());
    assert!(valid.metrics.listen.is_some());
    let push = validate_http_push(config.upstream.http.as_ref()).unwrap();
    assert!(push.is_some());
}

/// `[placement]` with all examples set is not one valid configuration: each auth method
/// rejects the keys of the others. For each method, drop exactly the keys that
/// `validate_placement` names as unused by it; the rest must validate.
#[test]
fn placement_examples_validate_for_every_auth_method() {
    let (text, _) = uncomment(&shipped_text());
    let doc: toml::Table = toml::from_str(&text).unwrap();
    for method in ["noauth", "token", "password", "application_credential"] {
        let mut doc = doc.clone();
        // The clouds.yaml entry is a source of values, not a method; tested with real files in
        // config::placement_sources.
        for source in ["cloud", "clouds_yaml"] {
            doc["placement"].as_table_mut().unwrap().remove(source);
        }
        let mut dropped = Vec::new();
        let settings = loop {
            let placement = doc
                .get_mut("placement")
                .and_then(toml::Value::as_table_mut)
                .unwrap();
            placement.insert("auth".into(), toml::Value::String(method.into()));
            let text = toml::to_string(&doc).unwrap();
            let config = Config::parse(&text, Path::new("uncommented.toml")).unwrap();
            match validate_placement(&config.placement) {
                Ok(Some(s)) => break s,
                Ok(None) => panic!("{method}: the endpoint example is missing"),
                Err(UpstreamError::Config { key, value, .. }) if value == "(set)" => {
                    let name = key.strip_prefix("placement.").unwrap().to_string();
                    assert!(!dropped.contains(&name), "{method}: {key} dropped twice");
                    doc["placement"].as_table_mut().unwrap().remove(&name);
                    dropped.push(name);
                }
                Err(e) => panic!("{method}: {e}"),
            }
        };
        match (method, &settings.auth) {
            ("noauth", AuthSettings::NoAuth { roles, .. }) => assert!(roles.is_some()),
            ("token", AuthSettings::Token(_)) => {}
            ("password", AuthSettings::Keystone(k)) => assert!(matches!(
                k.method,
                rtrack::upstream::KeystoneMethod::Password { .. }
            )),
            ("application_credential", AuthSettings::Keystone(k)) => assert!(matches!(
                k.method,
                rtrack::upstream::KeystoneMethod::ApplicationCredential { .. }
            )),
            (m, other) => panic!("{m}: got {other:?}"),
        }
        assert!(
            dropped.len() <= 16,
            "{method}: dropped {dropped:?}, more than the other methods' keys"
        );
    }
}

#[test]
fn every_config_key_is_documented_with_an_example() {
    let keys = config_keys();
    // Sanity: the introspection sees nested sections and optional sub-tables.
    for k in [
        "host.root",
        "resources.cpu_shared_set",
        "pci.device_spec",
        "placement.password",
        "upstream.http.url",
    ] {
        assert!(keys.contains(k), "{k} not found in {keys:?}");
    }
    let (text, _) = uncomment(&shipped_text());
    let doc: toml::Value = toml::from_str(&text).unwrap();
    let missing: Vec<&String> = keys
        .iter()
        .filter(|k| {
            // `*`: any key of a table of tables (`mdev.*.mdev_class`: the example's one type).
            k.split('.')
                .try_fold(&doc, |v, part| match part {
                    "*" => v.as_table().and_then(|t| t.values().next()),
                    _ => v.get(part),
                })
                .is_none()
        })
        .collect();
    assert!(
        missing.is_empty(),
        "packaging/rtrack.toml has no `# key = value` example for {missing:?}"
    );
}

#[test]
fn the_unit_matches_the_daemon_defaults() {
    let unit = std::fs::read_to_string(packaging("rtrackd.service")).unwrap();
    let values = |key: &str| -> Vec<String> {
        unit.lines()
            .filter_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(str::to_string)
            .collect()
    };
    let config = rtrack::daemon::config_file::DEFAULT_CONFIG;
    assert_eq!(
        values("ExecStart"),
        [format!("/usr/bin/rtrackd --config {config}")]
    );
    assert_eq!(values("Type"), ["notify"]);
    assert_eq!(values("RuntimeDirectory"), ["rtrack"]);
    assert_eq!(values("StateDirectory"), ["rtrack"]);
    // The places rtrackd writes by default are the writable ones.
    let socket_dir = Path::new(rtrack::cli::rtrackctl::DEFAULT_SOCKET)
        .parent()
        .unwrap()
        .display()
        .to_string();
    let writable = values("ReadWritePaths").join(" ");
    let writable: Vec<&str> = writable.split_whitespace().collect();
    assert!(writable.contains(&socket_dir.as_str()), "{writable:?}");
    assert!(writable.contains(&"/var/lib/rtrack"), "{writable:?}");
    assert_eq!(values("ProtectSystem"), ["strict"]);
}

// --- Config's keys, read from its Deserialize implementation -------------------------------

/// Every dotted key `Config` accepts (`host`, `host.root`, ..., `upstream.http.url`).
fn config_keys() -> BTreeSet<String> {
    let keys = RefCell::new(BTreeSet::new());
    let recorder = Recorder {
        path: String::new(),
        keys: &keys,
    };
    <Config as serde::Deserialize>::deserialize(recorder).unwrap();
    keys.into_inner()
}

/// A deserializer that answers every request with a plain value of the requested type and,
/// for each struct, records its field names and then fills every field, so that nested
/// structs (also inside `Option`) are visited and recorded too.
struct Recorder<'a> {
    path: String,
    keys: &'a RefCell<BTreeSet<String>>,
}

type DeError = de::value::Error;

impl<'de> Deserializer<'de> for Recorder<'_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, DeError> {
        Err(de::Error::custom(format!(
            "{}: a type the key recorder does not know",
            self.path
        )))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let mut keys = self.keys.borrow_mut();
        for f in fields {
            keys.insert(join(&self.path, f));
        }
        drop(keys);
        visitor.visit_map(Fields {
            path: self.path,
            fields,
            next: 0,
            keys: self.keys,
        })
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_some(self)
    }

    /// A table of tables keyed by name (`[mdev.<type>]`): one entry, recorded under `*`.
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_map(Fields {
            path: self.path,
            fields: &["*"],
            next: 0,
            keys: self.keys,
        })
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let empty: Vec<u8> = Vec::new();
        visitor.visit_seq(de::value::SeqDeserializer::<_, DeError>::new(
            empty.into_iter(),
        ))
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_bool(false)
    }

    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_i64(0)
    }

    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_u64(1)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_f64(1.0)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_str("x")
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_str("x")
    }

    serde::forward_to_deserialize_any! {
        i8 i16 i32 i128 u8 u16 u32 u128 f32 char bytes byte_buf unit unit_struct
        newtype_struct tuple tuple_struct enum identifier ignored_any
    }
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

/// One struct's fields, each given once, each value recorded under its dotted path.
struct Fields<'a> {
    path: String,
    fields: &'static [&'static str],
    next: usize,
    keys: &'a RefCell<BTreeSet<String>>,
}

impl<'de> MapAccess<'de> for Fields<'_> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        match self.fields.get(self.next) {
            None => Ok(None),
            Some(f) => seed
                .deserialize(IntoDeserializer::<DeError>::into_deserializer(*f))
                .map(Some),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let field = self.fields[self.next];
        self.next += 1;
        seed.deserialize(Recorder {
            path: join(&self.path, field),
            keys: self.keys,
        })
    }
}
