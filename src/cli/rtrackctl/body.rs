//! Request bodies built from `rtrackctl`'s flags: a RequestSpec primitive the tracker reads as
//! it reads Nova's, and the escaping of paths and queries.
//!
//! In: the parsed [`RequestArgs`] (instance, sizes, `--pci-alias`, `--dedicated-cpus`,
//! `--extra-spec`, `--image-property`, project, user, or a `--file`), and ids and query values to put in a target. Out: the claim or move body
//! `{"request_spec": ...}` (or the file's document with `--instance` filled in), a flavor id
//! derived from the sizes, and percent-escaped path segments and queries; a usage [`Failure`] for
//! bad flags.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{usage, Failure, RequestArgs};
use crate::echo::quoted;
use crate::objects::flavor::Flavor;
use crate::objects::request_spec::RequestSpec;
use crate::objects::NovaObject;

pub(super) fn encode_query(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_' {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

pub(super) fn path_segment(s: &str) -> Result<String, Failure> {
    if s.is_empty() || s.contains('/') || s.contains('?') || s.contains('#') {
        return Err(usage(format!("{s:?} is not an id (no '/', '?' or '#')")));
    }
    Ok(encode_query(s))
}

/// An instance uuid for a path, checked here: a mistyped one is a usage error (exit 2), not the
/// daemon's "no such instance" (exit 1).
pub(super) fn instance_segment(s: &str) -> Result<String, Failure> {
    if uuid::Uuid::parse_str(s).is_err() {
        return Err(usage(format!("{}: not an instance UUID", quoted(s))));
    }
    path_segment(s)
}

/// A PCI address for a path, checked here as [`instance_segment`] checks a uuid.
pub(super) fn address_segment(s: &str) -> Result<String, Failure> {
    if crate::probes::pci::PciAddress::parse(s).is_none() {
        return Err(usage(format!(
            "{}: not a PCI address (dddd:bb:ss.f)",
            quoted(s)
        )));
    }
    path_segment(s)
}

/// A stable flavor id from the sizes: the same flags give the same flavor (a retry is the same
/// claim), other sizes another (a move with other sizes is a resize).
pub(super) fn derived_flavor_id(a: &RequestArgs, extra: &BTreeMap<String, String>) -> i64 {
    // FNV-1a, 63 bits.
    let mut h: u64 = 0xcbf29ce484222325;
    let text = format!(
        "{}/{}/{}/{}/{}/{:?}",
        a.vcpus.unwrap_or(0),
        a.memory_mb.unwrap_or(0),
        a.disk_gb,
        a.ephemeral_gb,
        a.swap_mb,
        extra
    );
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    ((h >> 1) % 1_000_000_000) as i64 + 1
}

/// The API body for a claim or a move from the flags (a RequestSpec primitive) or a file.
pub fn claim_body(a: &RequestArgs) -> Result<Value, Failure> {
    if let Some(f) = &a.file {
        let text = if f.as_os_str() == "-" {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                .map_err(|e| usage(format!("stdin: {e}")))?;
            s
        } else {
            std::fs::read_to_string(f).map_err(|e| usage(format!("{}: {e}", f.display())))?
        };
        let mut v: Value = serde_json::from_str(&text)
            .map_err(|e| usage(format!("{}: not JSON: {e}", f.display())))?;
        if let (Some(u), Some(obj)) = (&a.instance, v.as_object_mut()) {
            obj.entry("instance")
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .map(|i| i.insert("uuid".into(), u.clone().into()));
        }
        return Ok(v);
    }
    let uuid = a
        .instance
        .as_deref()
        .ok_or_else(|| usage("--instance UUID is required (or --file)"))?;
    if uuid::Uuid::parse_str(uuid).is_err() {
        return Err(usage(format!("--instance {uuid:?}: not a UUID")));
    }
    let vcpus = a
        .vcpus
        .ok_or_else(|| usage("--vcpus N is required (or --file)"))?;
    let memory_mb = a
        .memory_mb
        .ok_or_else(|| usage("--memory-mb N is required (or --file)"))?;
    let mut extra = BTreeMap::new();
    let mut aliases = Vec::new();
    for p in &a.pci_alias {
        match p.split_once(':') {
            Some((name, count))
                if !name.is_empty() && count.parse::<u32>().is_ok_and(|c| c > 0) =>
            {
                aliases.push(format!("{name}:{count}"))
            }
            _ => {
                return Err(usage(format!(
                    "--pci-alias {p:?}: expected NAME:COUNT with COUNT at least 1, e.g. vf:2"
                )))
            }
        }
    }
    if !aliases.is_empty() {
        extra.insert("pci_passthrough:alias".to_string(), aliases.join(","));
    }
    if a.dedicated_cpus {
        extra.insert("hw:cpu_policy".to_string(), "dedicated".to_string());
    }
    let pair = |flag: &str, kv: &str| -> Result<(String, String), Failure> {
        match kv.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(usage(format!("{flag} {kv:?}: expected KEY=VALUE"))),
        }
    };
    for kv in &a.extra_spec {
        let (k, v) = pair("--extra-spec", kv)?;
        extra.insert(k, v);
    }
    let mut image_props = serde_json::Map::new();
    for kv in &a.image_property {
        let (k, v) = pair("--image-property", kv)?;
        image_props.insert(k, Value::String(v));
    }
    let flavor_id = a.flavor_id.unwrap_or_else(|| derived_flavor_id(a, &extra));
    let name = format!("rtrackctl-{vcpus}c-{memory_mb}m-{}g", a.disk_gb);
    let flavor = json!({
        "nova_object.name": Flavor::NAME,
        "nova_object.namespace": "nova",
        "nova_object.version": Flavor::VERSION.to_string(),
        "nova_object.data": {
            "id": flavor_id, "flavorid": name, "name": name, "vcpus": vcpus,
            "memory_mb": memory_mb, "root_gb": a.disk_gb, "ephemeral_gb": a.ephemeral_gb,
            "swap": a.swap_mb, "extra_specs": extra,
        },
    });
    let mut data = json!({
        "instance_uuid": uuid,
        "num_instances": 1,
        "is_bfv": a.boot_from_volume,
        "flavor": flavor,
    });
    if let Some(p) = &a.project {
        data["project_id"] = p.clone().into();
    }
    if let Some(u) = &a.user {
        data["user_id"] = u.clone().into();
    }
    if !image_props.is_empty() {
        // Values as glance keeps them, strings (rtrackd reads them as ImageMeta.from_dict does).
        data["image"] = json!({
            "nova_object.name": "ImageMeta",
            "nova_object.namespace": "nova",
            "nova_object.version": "1.8",
            "nova_object.data": {"properties": {
                "nova_object.name": "ImageMetaProps",
                "nova_object.namespace": "nova",
                "nova_object.version": "1.44",
                "nova_object.data": image_props,
            }},
        });
    }
    Ok(json!({
        "request_spec": {
            "nova_object.name": RequestSpec::NAME,
            "nova_object.namespace": "nova",
            "nova_object.version": RequestSpec::VERSION.to_string(),
            "nova_object.data": data,
        }
    }))
}
