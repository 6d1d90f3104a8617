//! Decoding errors, backports and the legacy RequestSpec translation.

use serde_json::{json, Value};

use super::compute_node::ComputeNode;
use super::pci_device::PciDevice;
use super::pci_device_pool::{PciDevicePool, PciDevicePoolList};
use super::request_spec::RequestSpec;
use super::{current_manifest, Manifest, ObjVersion, Versioned};

fn pool(numa: Value) -> Value {
    json!({
        "nova_object.name": "PciDevicePool", "nova_object.namespace": "nova", "nova_object.version": "1.1",
        "nova_object.data": {"product_id": "1889", "vendor_id": "8086", "numa_node": numa,
                             "tags": {"dev_type": "type-VF", "address": "0000:3b:00.0"}, "count": 7},
        "nova_object.changes": ["count", "numa_node", "product_id", "tags", "vendor_id"]
    })
}

fn node(data: Value) -> Value {
    json!({"nova_object.name": "ComputeNode", "nova_object.namespace": "nova", "nova_object.version": "1.19",
           "nova_object.data": data})
}

fn err<T: super::NovaObject + std::fmt::Debug>(v: &Value) -> String {
    Versioned::<T>::from_primitive(v).unwrap_err().to_string()
}

#[test]
fn wrong_types_name_the_field_and_are_never_coerced() {
    assert_eq!(
        err::<ComputeNode>(&node(json!({"vcpus": "64"}))),
        "ComputeNode.data.vcpus: expected integer, got string \"64\""
    );
    assert_eq!(
        err::<ComputeNode>(&node(json!({"vcpus": 64.7}))),
        "ComputeNode.data.vcpus: expected integer, got number 64.7"
    );
    assert_eq!(
        err::<ComputeNode>(&node(json!({"deleted": "false"}))),
        "ComputeNode.data.deleted: expected boolean, got string \"false\""
    );
    assert_eq!(
        err::<ComputeNode>(&node(json!({"vcpus": null}))),
        "ComputeNode.data.vcpus: is null, but this field cannot be null"
    );
    assert!(err::<ComputeNode>(&node(json!({"uuid": "nope"}))).contains("expected a UUID"));
    assert!(err::<ComputeNode>(&node(json!({"numa_topology": "{"}))).contains("NUMATopology"));
    assert!(err::<ComputeNode>(&node(json!({"metrics": "{}"}))).contains("metrics"));
    let mut nested = node(json!({}));
    nested["nova_object.data"]["pci_device_pools"] = json!({
        "nova_object.name": "PciDevicePoolList", "nova_object.namespace": "nova", "nova_object.version": "1.1",
        "nova_object.data": {"objects": [pool(json!(0)), {"nova_object.name": "PciDevicePool", "nova_object.namespace": "nova",
            "nova_object.version": "1.1", "nova_object.data": {"count": "1"}}]}});
    assert_eq!(
        err::<ComputeNode>(&nested),
        "ComputeNode.data.pci_device_pools.data.objects[1].data.count: expected integer, got string \"1\""
    );
    let mut hv = node(json!({}));
    hv["nova_object.data"]["supported_hv_specs"] = json!([{"nova_object.name": "HVSpec", "nova_object.namespace": "nova",
        "nova_object.version": "1.2", "nova_object.data": {"arch": "x86_64", "hv_type": "kvmx", "vm_mode": "hvm"}}]);
    assert!(err::<ComputeNode>(&hv).contains("\"kvmx\" is not a valid hypervisor virt type"));
}

#[test]
fn versions_outside_what_rtrack_knows_are_errors_with_the_supported_range() {
    let mut v = node(json!({}));
    v["nova_object.version"] = json!("1.20");
    assert_eq!(
        err::<ComputeNode>(&v),
        "ComputeNode: ComputeNode version 1.20 is not supported: rtrack supports 1.0 to 1.19 (same major, minor up to 19)"
    );
    v["nova_object.version"] = json!("2.0");
    assert!(err::<ComputeNode>(&v).contains("version 2.0 is not supported"));
    v["nova_object.version"] = json!(1.19);
    assert!(
        err::<ComputeNode>(&v).contains("nova_object.version: expected a string, got number 1.19")
    );
    v["nova_object.version"] = json!("1.x");
    assert!(err::<ComputeNode>(&v).contains("\"1.x\" is not a version"));
}

#[test]
fn envelope_problems() {
    let mut v = node(json!({}));
    v.as_object_mut().unwrap().remove("nova_object.name");
    assert!(err::<ComputeNode>(&v).contains("missing nova_object.name"));
    let mut v = node(json!({}));
    v["nova_object.namespace"] = json!("cinder");
    assert!(err::<ComputeNode>(&v).contains("namespace \"cinder\" is not supported"));
    let mut v = node(json!({}));
    v["nova_object.name"] = json!("Service");
    assert!(err::<ComputeNode>(&v).contains("expected a ComputeNode object, got \"Service\""));
    assert!(err::<ComputeNode>(&json!([1, 2])).contains("expected an object primitive"));
    let e = Versioned::<ComputeNode>::from_json("{\"nova_object.name\": \"Comp")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("ComputeNode: not valid JSON"), "{e}");
}

#[test]
fn deep_nesting_is_refused_without_overflowing_the_stack() {
    // JSON nested far past serde_json's recursion limit.
    let deep = "[".repeat(100_000) + &"]".repeat(100_000);
    let e = Versioned::<ComputeNode>::from_json(&deep)
        .unwrap_err()
        .to_string();
    assert!(e.contains("recursion limit"), "{e}");
    // Object primitives nested past rtrack's own limit (the JSON itself is fine).
    let mut v = json!({"nova_object.name": "PciDevicePoolList", "nova_object.namespace": "nova",
                       "nova_object.version": "1.1", "nova_object.data": {"objects": []}});
    for _ in 0..40 {
        v = json!({"nova_object.name": "PciDevicePoolList", "nova_object.namespace": "nova",
                   "nova_object.version": "1.1", "nova_object.data": {"objects": [v]}});
    }
    let e = Versioned::<PciDevicePoolList>::from_primitive(&v)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("expected a PciDevicePool object") || e.contains("nested deeper"),
        "{e}"
    );
}

#[test]
fn unknown_fields_are_ignored_as_nova_does() {
    let v = node(json!({"vcpus": 4, "pci_stats": "[]"}));
    let n = Versioned::<ComputeNode>::from_primitive(&v).unwrap();
    assert_eq!(n.obj.vcpus.get(), Some(&4));
    assert!(n.to_primitive()["nova_object.data"]
        .get("pci_stats")
        .is_none());
}

#[test]
fn pool_list_at_1_0_carries_1_0_pools_without_numa_node() {
    let list = json!({"nova_object.name": "PciDevicePoolList", "nova_object.namespace": "nova", "nova_object.version": "1.1",
        "nova_object.data": {"objects": [pool(json!(1))]}, "nova_object.changes": ["objects"]});
    let l = Versioned::<PciDevicePoolList>::from_primitive(&list).unwrap();
    // A manifest that does not name PciDevicePool: the list takes its children to 1.0 (oslo).
    let mut m = Manifest::new();
    m.insert("PciDevicePoolList".into(), ObjVersion::new(1, 0));
    let out = l.to_primitive_at(ObjVersion::new(1, 0), Some(&m)).unwrap();
    let p = &out["nova_object.data"]["objects"][0];
    assert_eq!(p["nova_object.version"], "1.0");
    assert!(p["nova_object.data"].get("numa_node").is_none());
    // Nova leaves the child's changes as they were.
    assert!(p["nova_object.changes"]
        .as_array()
        .unwrap()
        .contains(&json!("numa_node")));
}

#[test]
fn compute_node_below_1_13_gets_a_service_id() {
    let n =
        Versioned::<ComputeNode>::from_primitive(&node(json!({"service_id": null, "host": "h"})))
            .unwrap();
    let out = n
        .to_primitive_at(ObjVersion::new(1, 12), Some(&current_manifest()))
        .unwrap();
    assert_eq!(out["nova_object.data"]["service_id"], -1);
    let out = n
        .to_primitive_at(ObjVersion::new(1, 13), Some(&current_manifest()))
        .unwrap();
    assert_eq!(out["nova_object.data"]["service_id"], Value::Null);
    assert!(n.to_primitive_at(ObjVersion::new(1, 20), None).is_err());
}

#[test]
fn pci_device_backports_follow_nova() {
    let dev = json!({"nova_object.name": "PciDevice", "nova_object.namespace": "nova", "nova_object.version": "1.7",
        "nova_object.data": {"address": "0000:3b:01.0", "parent_addr": "0000:3b:00.0", "extra_info": {},
                             "status": "unavailable", "dev_type": "type-VF", "request_id": null,
                             "uuid": "0b5e8a4c-1c3e-4a3e-8f0e-2b1c3d4e5f60"}});
    let d = Versioned::<PciDevice>::from_primitive(&dev).unwrap();
    let m = current_manifest();
    // 1.4: parent_addr kept, but a 1.5 status cannot be represented.
    let e = d
        .to_primitive_at(ObjVersion::new(1, 4), Some(&m))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("\"unavailable\" cannot be represented in PciDevice 1.4"),
        "{e}"
    );
    // 1.3: parent_addr moves into extra_info.phys_function; Nova checks statuses no more.
    let out = d.to_primitive_at(ObjVersion::new(1, 3), Some(&m)).unwrap();
    let data = &out["nova_object.data"];
    assert_eq!(data["extra_info"]["phys_function"], "0000:3b:00.0");
    assert!(data.get("parent_addr").is_none() && data.get("uuid").is_none());
    assert!(data.get("request_id").is_some());
    let out = d.to_primitive_at(ObjVersion::new(1, 1), Some(&m)).unwrap();
    assert!(out["nova_object.data"].get("request_id").is_none());
    let mut vdpa = dev.clone();
    vdpa["nova_object.data"]["dev_type"] = json!("vdpa");
    vdpa["nova_object.data"]["status"] = json!("available");
    let d = Versioned::<PciDevice>::from_primitive(&vdpa).unwrap();
    assert!(d
        .to_primitive_at(ObjVersion::new(1, 6), Some(&m))
        .unwrap_err()
        .to_string()
        .contains("vdpa"));
}

#[test]
fn built_objects_list_every_set_field_as_changed() {
    let p = Versioned::new(PciDevicePool {
        product_id: "1889".to_string().into(),
        vendor_id: "8086".to_string().into(),
        numa_node: super::NField::Null,
        tags: super::Field::Set(Default::default()),
        count: 3.into(),
    });
    let out = p.to_primitive();
    let changes: Vec<&str> = out["nova_object.changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(
        changes,
        vec!["count", "numa_node", "product_id", "tags", "vendor_id"]
    );
    assert_eq!(
        Versioned::unchanged(p.obj)
            .to_primitive()
            .get("nova_object.changes"),
        None
    );
}

fn legacy_pair() -> (Value, Value) {
    let request_spec = json!({
        "num_instances": 2,
        "image": {"id": "d5b7c3a1-9e8f-4a2b-8c6d-7e5f4a3b2c1d", "name": "ubuntu", "properties": {"hw_pci_numa_affinity_policy": "preferred"}},
        "instance_properties": {
            "uuid": "8f0e7a52-6c1b-4d3e-a9f8-2b7c6d5e4f31", "project_id": "p1", "user_id": "u1",
            "availability_zone": "nova", "numa_topology": null,
            "pci_requests": {"nova_object.name": "InstancePCIRequests", "nova_object.namespace": "nova", "nova_object.version": "1.1",
                "nova_object.data": {"instance_uuid": "8f0e7a52-6c1b-4d3e-a9f8-2b7c6d5e4f31", "requests": [
                    {"nova_object.name": "InstancePCIRequest", "nova_object.namespace": "nova", "nova_object.version": "1.4",
                     "nova_object.data": {"count": 1, "spec": [{"vendor_id": "8086", "product_id": "1889", "dev_type": "type-VF"}],
                                          "alias_name": "vf", "is_new": false, "request_id": null, "requester_id": null, "numa_policy": "legacy"}}]}}
        },
        "instance_type": {"id": 42, "name": "m1", "memory_mb": 2048, "vcpus": 2, "root_gb": 20, "ephemeral_gb": 0,
                          "flavorid": "m1", "swap": 0, "rxtx_factor": 1.0, "vcpu_weight": null, "disabled": false,
                          "is_public": true, "extra_specs": {"pci_passthrough:alias": "vf:1"}}
    });
    let filter_properties = json!({
        "ignore_hosts": ["bad"], "force_hosts": ["cmp1"], "force_nodes": ["cmp1"],
        "retry": {"num_attempts": 2, "hosts": [["cmp0", "cmp0.example"]]},
        "limits": {"vcpu": 16, "memory_mb": 4096},
        "group_updated": true, "group_policies": ["anti-affinity"], "group_hosts": ["cmp9"],
        "group_members": ["a", "b"], "group_uuid": "1b2c3d4e-5f60-4a7b-8c9d-0e1f2a3b4c5d",
        "scheduler_hints": {"group": "g1", "same_host": ["x", "y"]}
    });
    (request_spec, filter_properties)
}

#[test]
fn legacy_dicts_become_a_request_spec() {
    let (rs, fp) = legacy_pair();
    let spec = RequestSpec::from_legacy(&rs, &fp).unwrap();
    let s = &spec.obj;
    assert_eq!(s.num_instances.get(), Some(&2));
    assert_eq!(
        s.instance_uuid.get().map(String::as_str),
        Some("8f0e7a52-6c1b-4d3e-a9f8-2b7c6d5e4f31")
    );
    assert_eq!(s.project_id.get().map(String::as_str), Some("p1"));
    let flavor = &s.flavor.get().unwrap().obj;
    assert_eq!(flavor.extra_spec("pci_passthrough:alias"), Some("vf:1"));
    assert_eq!(
        s.pci_requests
            .get()
            .unwrap()
            .obj
            .requests
            .get()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(s.force_hosts.get().unwrap(), &vec!["cmp1".to_string()]);
    let retry = &s.retry.get().unwrap().obj;
    assert_eq!(retry.num_attempts.get(), Some(&2));
    let limits = &s.limits.get().unwrap().obj;
    assert_eq!(
        (
            limits.vcpu.get(),
            limits.memory_mb.get(),
            limits.disk_gb.get()
        ),
        (Some(&16), Some(&4096), None)
    );
    let hints = s.scheduler_hints.get().unwrap();
    assert_eq!(hints["group"], vec!["g1"]);
    assert_eq!(hints["same_host"], vec!["x", "y"]);
    let group = &s.instance_group.get().unwrap().obj.data;
    assert_eq!(group["policy"], "anti-affinity");
    // The result is a valid RequestSpec primitive rtrack can read back.
    let prim = spec.to_primitive();
    Versioned::<RequestSpec>::from_primitive(&prim).unwrap();
    assert_eq!(
        prim["nova_object.data"]["image"]["nova_object.name"],
        "ImageMeta"
    );
}

#[test]
fn request_spec_back_to_legacy_dicts() {
    let (rs, fp) = legacy_pair();
    let spec = RequestSpec::from_legacy(&rs, &fp).unwrap();
    let rs2 = spec.obj.to_legacy_request_spec();
    assert_eq!(rs2["num_instances"], 2);
    assert_eq!(
        rs2["instance_properties"]["uuid"],
        "8f0e7a52-6c1b-4d3e-a9f8-2b7c6d5e4f31"
    );
    assert_eq!(rs2["instance_properties"]["memory_mb"], 2048);
    assert_eq!(rs2["instance_type"]["nova_object.name"], "Flavor");
    let fp2 = spec.obj.to_legacy_filter_properties();
    assert_eq!(
        fp2["retry"],
        json!({"num_attempts": 2, "hosts": [["cmp0", "cmp0.example"]]})
    );
    assert_eq!(fp2["limits"], json!({"vcpu": 16, "memory_mb": 4096}));
    assert_eq!(
        fp2["scheduler_hints"],
        json!({"group": "g1", "same_host": ["x", "y"]})
    );
    assert_eq!(fp2["group_policies"], json!(["anti-affinity"]));
    assert_eq!(fp2["group_members"], json!(["a", "b"]));
    assert_eq!(fp2["force_hosts"], json!(["cmp1"]));
    // And round again: the same spec.
    let again = RequestSpec::from_legacy(&rs2, &fp2).unwrap();
    assert_eq!(
        again.obj.flavor.get().unwrap().obj,
        spec.obj.flavor.get().unwrap().obj
    );
    assert_eq!(again.obj.scheduler_hints, spec.obj.scheduler_hints);
    assert_eq!(again.obj.pci_requests, spec.obj.pci_requests);
}

#[test]
fn malformed_legacy_input_names_the_key() {
    let (mut rs, fp) = legacy_pair();
    rs["instance_type"]["vcpus"] = json!("two");
    let e = RequestSpec::from_legacy(&rs, &fp).unwrap_err().to_string();
    assert_eq!(
        e,
        "request_spec.instance_type.vcpus: expected integer, got string \"two\""
    );
    let (rs, mut fp) = legacy_pair();
    fp["retry"]["hosts"] = json!([["only-host"]]);
    assert!(RequestSpec::from_legacy(&rs, &fp)
        .unwrap_err()
        .to_string()
        .contains("[host, node] pair"));
    let (rs, mut fp) = legacy_pair();
    fp["limits"] = json!({"cpus": 3});
    assert!(RequestSpec::from_legacy(&rs, &fp)
        .unwrap_err()
        .to_string()
        .contains("filter_properties.limits.cpus"));
    assert!(RequestSpec::from_legacy(&json!([]), &json!({}))
        .unwrap_err()
        .to_string()
        .starts_with("request_spec:"));
}
