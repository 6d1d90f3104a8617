//! RequestSpec from and to the legacy `request_spec` and `filter_properties` dicts that older
//! callers send (Nova's `RequestSpec.from_primitives`, `to_legacy_request_spec_dict`,
//! `to_legacy_filter_properties_dict`). In: the dicts, whose objects may be primitives or plain
//! dicts; out: a RequestSpec, or an error naming the dict path.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use super::super::base::{
    describe, ChangedFields, NovaObject, ObjVersion, ObjectError, Reader, Versioned,
};
use super::super::compute_node::ComputeNode;
use super::super::fields::{Int, Kind, ListStr, NField, Str, Uuid};
use super::super::flavor::Flavor;
use super::super::opaque::{ImageMetaName, InstanceGroupName, Opaque};
use super::super::Field;
use super::*;

fn legacy_err(path: &str, message: impl Into<String>) -> ObjectError {
    ObjectError::new(path, message)
}

/// Decodes an object given either as a primitive or as a plain dict of its fields (as
/// `sched_utils.build_request_spec()` sends flavors).
fn object_from_dict_or_primitive<T: NovaObject>(
    v: &Value,
    path: &str,
) -> Result<Versioned<T>, ObjectError> {
    let m = v
        .as_object()
        .ok_or_else(|| legacy_err(path, format!("expected an object, got {}", describe(v))))?;
    if m.contains_key("nova_object.name") {
        return Versioned::<T>::from_primitive_at(v, path, 1);
    }
    let obj = T::decode(&mut Reader {
        data: m,
        path,
        version: T::VERSION,
        depth: 1,
    })?;
    Ok(Versioned::new(obj))
}

fn get<'a>(m: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    m.get(key).filter(|v| !v.is_null())
}

fn string_list(v: &Value, path: &str) -> Result<Vec<String>, ObjectError> {
    ListStr::decode(v, path, 0)
}

impl RequestSpec {
    /// Nova's `RequestSpec.from_primitives(context, request_spec, filter_properties)`: builds a
    /// spec from the legacy dicts. Objects inside them may be primitives or, where Nova accepts
    /// dicts, plain dicts.
    pub fn from_legacy(
        request_spec: &Value,
        filter_properties: &Value,
    ) -> Result<Versioned<RequestSpec>, ObjectError> {
        let rs = request_spec.as_object().ok_or_else(|| {
            legacy_err(
                "request_spec",
                format!("expected an object, got {}", describe(request_spec)),
            )
        })?;
        let fp = filter_properties.as_object().ok_or_else(|| {
            legacy_err(
                "filter_properties",
                format!("expected an object, got {}", describe(filter_properties)),
            )
        })?;
        let mut spec = RequestSpec {
            num_instances: Field::Set(match get(rs, "num_instances") {
                None => 1,
                Some(v) => Int::decode(v, "request_spec.num_instances", 0)?,
            }),
            ..RequestSpec::default()
        };

        // image: an ImageMeta primitive, a plain image dict (ImageMeta.from_dict), or nothing.
        spec.image = match get(rs, "image") {
            None => NField::Null,
            Some(v) => NField::Set(image_meta(v, "request_spec.image")?),
        };

        if let Some(inst) = get(rs, "instance_properties") {
            set_from_instance_properties(&mut spec, inst)?;
        }

        if let Some(f) = get(rs, "instance_type") {
            spec.flavor = Field::Set(object_from_dict_or_primitive::<Flavor>(
                f,
                "request_spec.instance_type",
            )?);
        }

        let list = |key: &str| -> Result<NField<Vec<String>>, ObjectError> {
            match get(fp, key) {
                None => Ok(NField::Null),
                Some(v) => string_list(v, &format!("filter_properties.{key}")).map(NField::Set),
            }
        };
        spec.ignore_hosts = list("ignore_hosts")?;
        spec.force_hosts = list("force_hosts")?;
        spec.force_nodes = list("force_nodes")?;

        // retry: {"num_attempts": n, "hosts": [[host, node], ...]}; empty means none.
        spec.retry = match get(fp, "retry") {
            Some(Value::Object(r)) if !r.is_empty() => NField::Set(retry_from_dict(r)?),
            Some(Value::Object(_)) | None => NField::Null,
            Some(other) => {
                return Err(legacy_err(
                    "filter_properties.retry",
                    format!("expected an object, got {}", describe(other)),
                ))
            }
        };

        // limits: {"vcpu", "memory_mb", "disk_gb", "numa_topology"} or a SchedulerLimits.
        let limits = get(fp, "limits").cloned().unwrap_or_else(|| json!({}));
        spec.limits = NField::Set(limits_from_dict(&limits)?);

        spec.instance_group = group_from_filter_properties(fp)?;

        spec.scheduler_hints = scheduler_hints_from_filter_properties(fp)?;

        spec.requested_destination = match get(fp, "requested_destination") {
            None => NField::Null,
            Some(v) => NField::Set(Versioned::from_primitive_at(
                v,
                "filter_properties.requested_destination",
                1,
            )?),
        };
        // obj_set_defaults(): requested_resources defaults to None.
        spec.requested_resources = NField::Null;
        Ok(Versioned::new(spec))
    }

    /// Nova's `to_legacy_request_spec_dict()`, with objects as primitives.
    pub fn to_legacy_request_spec(&self) -> Value {
        let mut rs = Map::new();
        rs.insert(
            "num_instances".into(),
            Value::from(*self.num_instances.get().unwrap_or(&1)),
        );
        rs.insert(
            "image".into(),
            match self.image.get() {
                Some(i) => i.to_primitive(),
                None => json!({}),
            },
        );
        let mut inst = Map::new();
        match &self.numa_topology {
            NField::Unset => {}
            NField::Null => {
                inst.insert("numa_topology".into(), Value::Null);
            }
            NField::Set(t) => {
                inst.insert("numa_topology".into(), t.to_primitive());
            }
        }
        match &self.pci_requests {
            NField::Unset => {}
            NField::Null => {
                inst.insert("pci_requests".into(), Value::Null);
            }
            NField::Set(p) => {
                inst.insert("pci_requests".into(), p.to_primitive());
            }
        }
        for (key, f) in [
            ("project_id", &self.project_id),
            ("user_id", &self.user_id),
            ("availability_zone", &self.availability_zone),
        ] {
            if f.is_set() {
                inst.insert(
                    key.into(),
                    f.get().cloned().map_or(Value::Null, Value::String),
                );
            }
        }
        if let Some(u) = self.instance_uuid.get() {
            inst.insert("uuid".into(), Value::String(u.clone()));
        }
        match self.flavor.get() {
            Some(f) => {
                for key in ["root_gb", "ephemeral_gb", "memory_mb", "vcpus"] {
                    let v = match key {
                        "root_gb" => f.obj.root_gb.get(),
                        "ephemeral_gb" => f.obj.ephemeral_gb.get(),
                        "memory_mb" => f.obj.memory_mb.get(),
                        _ => f.obj.vcpus.get(),
                    };
                    inst.insert(key.into(), v.map_or(Value::Null, |x| Value::from(*x)));
                }
                rs.insert("instance_properties".into(), Value::Object(inst));
                rs.insert("instance_type".into(), f.to_primitive());
            }
            None => {
                rs.insert("instance_properties".into(), Value::Object(inst));
                rs.insert("instance_type".into(), json!({}));
            }
        }
        Value::Object(rs)
    }

    /// Nova's `to_legacy_filter_properties_dict()`, with objects as primitives and Python sets
    /// as sorted lists.
    pub fn to_legacy_filter_properties(&self) -> Value {
        let mut fp = Map::new();
        for (key, f) in [
            ("ignore_hosts", &self.ignore_hosts),
            ("force_hosts", &self.force_hosts),
            ("force_nodes", &self.force_nodes),
        ] {
            if let Some(list) = f.get().filter(|l| !l.is_empty()) {
                fp.insert(key.into(), json!(list));
            }
        }
        if let Some(r) = self.retry.get() {
            let hosts: Vec<Value> = r
                .obj
                .hosts
                .get()
                .and_then(|l| l.obj.objects.get())
                .map(|nodes| {
                    nodes
                        .iter()
                        .map(|cn| json!([cn.obj.host.get(), cn.obj.hypervisor_hostname.get()]))
                        .collect()
                })
                .unwrap_or_default();
            fp.insert(
                "retry".into(),
                json!({"num_attempts": r.obj.num_attempts.get(), "hosts": hosts}),
            );
        }
        if let Some(l) = self.limits.get() {
            let mut m = Map::new();
            if let Some(t) = l.obj.numa_topology.get() {
                m.insert("numa_topology".into(), t.to_primitive());
            }
            for (key, f) in [
                ("vcpu", &l.obj.vcpu),
                ("disk_gb", &l.obj.disk_gb),
                ("memory_mb", &l.obj.memory_mb),
            ] {
                if let Some(v) = f.get() {
                    m.insert(key.into(), Value::from(*v));
                }
            }
            fp.insert("limits".into(), Value::Object(m));
        }
        if let Some(g) = self.instance_group.get() {
            let d = &g.obj.data;
            let set = |key: &str| -> Value {
                let mut items: BTreeSet<String> = BTreeSet::new();
                if let Some(Value::Array(a)) = d.get(key) {
                    items.extend(a.iter().filter_map(|x| x.as_str().map(str::to_string)));
                }
                json!(items)
            };
            fp.insert("group_updated".into(), Value::Bool(true));
            fp.insert("group_hosts".into(), set("hosts"));
            fp.insert(
                "group_policies".into(),
                json!(d
                    .get("policy")
                    .and_then(Value::as_str)
                    .into_iter()
                    .collect::<Vec<_>>()),
            );
            fp.insert("group_members".into(), set("members"));
            fp.insert(
                "group_uuid".into(),
                d.get("uuid").cloned().unwrap_or(Value::Null),
            );
        }
        if let Some(h) = self.scheduler_hints.get().filter(|h| !h.is_empty()) {
            let hints: Map<String, Value> = h
                .iter()
                .map(|(k, v)| (k.clone(), if v.len() == 1 { json!(v[0]) } else { json!(v) }))
                .collect();
            fp.insert("scheduler_hints".into(), Value::Object(hints));
        }
        if let Some(d) = self.requested_destination.get() {
            fp.insert("requested_destination".into(), d.to_primitive());
        }
        Value::Object(fp)
    }
}

/// What `request_spec.instance_properties` gives the spec: numa_topology, pci_requests, uuid,
/// project_id, user_id, availability_zone.
fn set_from_instance_properties(spec: &mut RequestSpec, inst: &Value) -> Result<(), ObjectError> {
    let path = "request_spec.instance_properties";
    let inst = inst
        .as_object()
        .ok_or_else(|| legacy_err(path, format!("expected an object, got {}", describe(inst))))?;
    let s = |k: &str| -> Result<NField<String>, ObjectError> {
        match inst.get(k) {
            None | Some(Value::Null) => Ok(NField::Null),
            Some(v) => Str::decode(v, &format!("{path}.{k}"), 0).map(NField::Set),
        }
    };
    spec.numa_topology = match get(inst, "numa_topology") {
        None => NField::Null,
        Some(Value::String(text)) => {
            let v: Value = serde_json::from_str(text).map_err(|e| {
                legacy_err(
                    &format!("{path}.numa_topology"),
                    format!("not JSON of an InstanceNUMATopology: {e}"),
                )
            })?;
            NField::Set(Versioned::from_primitive_at(
                &v,
                &format!("{path}.numa_topology"),
                1,
            )?)
        }
        Some(v) => NField::Set(Versioned::from_primitive_at(
            v,
            &format!("{path}.numa_topology"),
            1,
        )?),
    };
    spec.pci_requests = match get(inst, "pci_requests") {
        None => NField::Null,
        Some(v) => NField::Set(Versioned::from_primitive_at(
            v,
            &format!("{path}.pci_requests"),
            1,
        )?),
    };
    spec.instance_uuid = match get(inst, "uuid") {
        None => Field::Unset,
        Some(v) => Field::Set(Uuid::decode(v, &format!("{path}.uuid"), 0)?),
    };
    spec.project_id = s("project_id")?;
    spec.user_id = s("user_id")?;
    spec.availability_zone = s("availability_zone")?;
    Ok(())
}

/// `filter_properties.scheduler_hints`: every value becomes a list.
fn scheduler_hints_from_filter_properties(
    fp: &Map<String, Value>,
) -> Result<NField<BTreeMap<String, Vec<String>>>, ObjectError> {
    Ok(match fp.get("scheduler_hints") {
        Some(Value::Null) => NField::Null,
        None => NField::Set(BTreeMap::new()),
        Some(Value::Object(h)) => {
            let mut hints = BTreeMap::new();
            for (k, v) in h {
                let path = format!("filter_properties.scheduler_hints.{k}");
                let values = match v {
                    Value::Array(_) => string_list(v, &path)?,
                    Value::String(s) => vec![s.clone()],
                    other => vec![scalar_to_string(other, &path)?],
                };
                hints.insert(k.clone(), values);
            }
            NField::Set(hints)
        }
        Some(other) => {
            return Err(legacy_err(
                "filter_properties.scheduler_hints",
                format!("expected an object, got {}", describe(other)),
            ))
        }
    })
}

fn scalar_to_string(v: &Value, path: &str) -> Result<String, ObjectError> {
    match v {
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(if *b { "True" } else { "False" }.to_string()),
        other => Err(legacy_err(
            path,
            format!(
                "expected a string or a list of strings, got {}",
                describe(other)
            ),
        )),
    }
}

/// `ImageMeta.from_dict`: a plain image dict becomes an ImageMeta with its `properties` as an
/// ImageMetaProps; a primitive is decoded as such.
fn image_meta(v: &Value, path: &str) -> Result<Versioned<Opaque<ImageMetaName>>, ObjectError> {
    let m = v
        .as_object()
        .ok_or_else(|| legacy_err(path, format!("expected an object, got {}", describe(v))))?;
    if m.contains_key("nova_object.name") {
        return Versioned::from_primitive_at(v, path, 1);
    }
    let mut data = m.clone();
    let props = match data.remove("properties") {
        Some(Value::Object(p)) => p,
        Some(Value::Null) | None => Map::new(),
        Some(other) => {
            return Err(legacy_err(
                &format!("{path}.properties"),
                format!("expected an object, got {}", describe(&other)),
            ))
        }
    };
    let changes: BTreeSet<String> = props.keys().cloned().collect();
    data.insert(
        "properties".into(),
        super::super::base::envelope("ImageMetaProps", ObjVersion::new(1, 44), props, changes),
    );
    Ok(Versioned::new(Opaque::new(data)))
}

fn retry_from_dict(r: &Map<String, Value>) -> Result<Versioned<SchedulerRetries>, ObjectError> {
    let path = "filter_properties.retry";
    // Nova checks only for "hosts" (its test is `('num_attempts' and 'hosts') in retry`).
    let mut retry = SchedulerRetries::default();
    if let Some(hosts) = r.get("hosts") {
        retry.num_attempts = match get(r, "num_attempts") {
            Some(v) => Field::Set(Int::decode(v, &format!("{path}.num_attempts"), 0)?),
            None => Field::Unset,
        };
        let items = hosts.as_array().ok_or_else(|| {
            legacy_err(
                &format!("{path}.hosts"),
                format!("expected a list of [host, node], got {}", describe(hosts)),
            )
        })?;
        let mut nodes = Vec::new();
        for (i, pair) in items.iter().enumerate() {
            let p = format!("{path}.hosts[{i}]");
            let (host, node) = match pair.as_array().map(Vec::as_slice) {
                Some([h, n]) => (h, n),
                _ => return Err(legacy_err(&p, "expected a [host, node] pair")),
            };
            let cn = ComputeNode {
                host: NField::from_option(host.as_str().map(str::to_string)),
                hypervisor_hostname: NField::from_option(node.as_str().map(str::to_string)),
                ..ComputeNode::default()
            };
            nodes.push(Versioned::new(cn));
        }
        retry.hosts = Field::Set(Versioned::new(ComputeNodeList {
            objects: Field::Set(nodes),
        }));
    }
    Ok(Versioned::new(retry))
}

fn limits_from_dict(v: &Value) -> Result<Versioned<SchedulerLimits>, ObjectError> {
    let path = "filter_properties.limits";
    let m = v
        .as_object()
        .ok_or_else(|| legacy_err(path, format!("expected an object, got {}", describe(v))))?;
    if m.contains_key("nova_object.name") {
        return Versioned::from_primitive_at(v, path, 1);
    }
    for key in m.keys() {
        if !["numa_topology", "vcpu", "disk_gb", "memory_mb"].contains(&key.as_str()) {
            return Err(legacy_err(
                &format!("{path}.{key}"),
                "unknown limit; expected numa_topology, vcpu, disk_gb or memory_mb",
            ));
        }
    }
    // SchedulerLimits(**limits) then obj_set_defaults(): every field set, null by default.
    let r = Reader {
        data: m,
        path,
        version: SchedulerLimits::VERSION,
        depth: 1,
    };
    let mut limits = SchedulerLimits::decode_fields(&r)?;
    for f in [&mut limits.vcpu, &mut limits.disk_gb, &mut limits.memory_mb] {
        if !f.is_set() {
            *f = NField::Null;
        }
    }
    if !limits.numa_topology.is_set() {
        limits.numa_topology = NField::Null;
    }
    Ok(Versioned::new(limits))
}

/// New-style `instance_group` (an InstanceGroup primitive), or old-style `group_updated`,
/// `group_policies`, `group_hosts`, `group_members`, `group_uuid`.
fn group_from_filter_properties(
    fp: &Map<String, Value>,
) -> Result<NField<Versioned<Opaque<InstanceGroupName>>>, ObjectError> {
    if let Some(g) = get(fp, "instance_group") {
        return Ok(NField::Set(Versioned::from_primitive_at(
            g,
            "filter_properties.instance_group",
            1,
        )?));
    }
    if fp.get("group_updated") != Some(&Value::Bool(true)) {
        return Ok(NField::Null);
    }
    let list = |key: &str| -> Result<Vec<String>, ObjectError> {
        match get(fp, key) {
            None => Ok(Vec::new()),
            Some(v) => string_list(v, &format!("filter_properties.{key}")),
        }
    };
    let policies = list("group_policies")?;
    let policy = policies.first().cloned().ok_or_else(|| {
        legacy_err(
            "filter_properties.group_policies",
            "an old-style group needs at least one policy",
        )
    })?;
    let mut data = Map::new();
    data.insert("policy".into(), Value::String(policy));
    data.insert("hosts".into(), json!(list("group_hosts")?));
    data.insert("members".into(), json!(list("group_members")?));
    let mut changes: BTreeSet<String> = ["policy", "members"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if let Some(u) = get(fp, "group_uuid") {
        let u = Uuid::decode(u, "filter_properties.group_uuid", 0)?;
        data.insert("uuid".into(), Value::String(u));
        changes.insert("uuid".into());
    }
    // Nova resets the change flag of `hosts` so it is not saved.
    Ok(NField::Set(Versioned {
        obj: Opaque::new(data),
        version: ObjVersion::new(1, 11),
        changes: ChangedFields::Fields(changes),
    }))
}
