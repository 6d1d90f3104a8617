//! End to end on a live `rtrackd` (the synthetic mdev-gpu host: two M60 GPUs offering
//! `nvidia-35`, SEV and SEV-ES, and a provider.yaml licence): VGPU, MEM_ENCRYPTION_CONTEXT and
//! custom classes claimed over the API and with `rtrackctl`, granted while capacity lasts,
//! refused with the class (and the provider) after, freed by an abort; every answer checked
//! against the OpenAPI document. And a configuration naming a type the host does not offer (yet)
//! is a warning naming the key; the type is offered once the host has it.

use crate::support;

use std::path::Path;
use std::process::Command;

use crate::support::{check_shape, uuid, Daemon};
use serde_json::{json, Value};

const RTRACKD: &str = env!("CARGO_BIN_EXE_rtrackd");
const RTRACKCTL: &str = env!("CARGO_BIN_EXE_rtrackctl");

const LICENCE_YAML: &str = "meta:\n  schema_version: '1.0'\nproviders:\n  - identification:\n      uuid: $COMPUTE_NODE\n    inventories:\n      additional:\n        - CUSTOM_LICENCE: {total: 1}\n";

struct Host {
    _tmp: tempfile::TempDir,
    dir: std::path::PathBuf,
    config: String,
}

fn host(devices: &str) -> Host {
    let tmp = rtrack_fixtures::real::scratch_dir();
    let root = tmp.path().join("host");
    rtrack_fixtures::vgpu::VgpuHost::mdev_gpu().write(&root);
    let dir = tmp.path().join("d");
    let yaml = tmp.path().join("provider_config");
    std::fs::create_dir_all(&yaml).unwrap();
    std::fs::write(yaml.join("licence.yaml"), LICENCE_YAML).unwrap();
    let config = support::base_config(&root, &dir).replacen(
        "[resources]\n",
        &format!(
            "[resources]\nprovider_config_location = \"{}\"\n",
            yaml.display()
        ),
        1,
    ) + devices;
    Host {
        _tmp: tmp,
        dir,
        config,
    }
}

fn claim_body(instance: &str, extra: &[(&str, &str)]) -> Value {
    let mut spec = support::request_spec(instance, 7, 1, 256, 1, None);
    for (k, v) in extra {
        spec["nova_object.data"]["flavor"]["nova_object.data"]["extra_specs"][*k] = json!(v);
    }
    // An encrypted guest boots a UEFI image (Nova refuses it otherwise).
    if extra.iter().any(|(k, _)| *k == "hw:mem_encryption") {
        spec = support::with_image(spec, "uefi", json!({"hw_firmware_type": "uefi"}));
    }
    json!({"request_spec": spec})
}

/// `rtrackctl claim` of a small instance with these extra specs: exit code and output.
fn ctl_claim(d: &Daemon, instance: &str, extra: &[(&str, &str)]) -> (i32, String) {
    let mut args = vec![
        "claim".to_string(),
        "--instance".into(),
        instance.into(),
        "--vcpus".into(),
        "1".into(),
        "--memory-mb".into(),
        "256".into(),
    ];
    for (k, v) in extra {
        args.push("--extra-spec".into());
        args.push(format!("{k}={v}"));
    }
    if extra.iter().any(|(k, _)| *k == "hw:mem_encryption") {
        args.push("--image-property".into());
        args.push("hw_firmware_type=uefi".into());
    }
    let out = Command::new(RTRACKCTL)
        .arg("--socket")
        .arg(&d.socket)
        .args(&args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr),
    )
}

fn ok(doc: &Value, path: &str, method: &str, status: &str) -> Value {
    doc["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"].clone()
}

#[test]
fn vgpus_contexts_and_custom_classes_are_claimed_refused_and_freed() {
    let h =
        host("[devices]\nenabled_mdev_types = [\"nvidia-35\"]\nnum_memory_encrypted_guests = 2\n");
    let d = Daemon::start_with(Path::new(RTRACKD), &h.dir, &h.config, &[]);
    let (_, doc) = d.call("GET", "/v1/openapi.json", None);
    // 84:00.0: 2 existing + 14, 85:00.0: 16; SEV min(410, 2) + SEV-ES 99; one licence.
    assert_eq!(d.usage_of("VGPU"), (0, 32));
    assert_eq!(d.usage_of("MEM_ENCRYPTION_CONTEXT"), (0, 101));
    assert_eq!(d.usage_of("CUSTOM_LICENCE"), (0, 1));

    // rtrackctl: two vGPUs, the first GPU's two existing mdevs.
    let a = uuid(1);
    let out = Command::new(RTRACKCTL)
        .arg("--socket")
        .arg(&d.socket)
        .args([
            "claim",
            "--instance",
            &a,
            "--vcpus",
            "1",
            "--memory-mb",
            "256",
            "--extra-spec",
            "resources:VGPU=2",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("MDEV 4b20d080-1b54-4048-85b3-a6a62d165c01@0000:84:00.0,e2b4cbbd-7a2c-4c8e-9d0f-3c1f9d2c5a02@0000:84:00.0"),
        "{text}"
    );

    // The API: 16 on the other GPU (the freest; one request takes one parent), then 14 on the
    // first. The claim lists its mdevs, new ones marked.
    let b = uuid(2);
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&claim_body(&b, &[("resources:VGPU", "16")])),
    );
    assert_eq!(s, 201, "{v}");
    check_shape(
        &doc,
        &ok(&doc, "/v1/claims", "post", "201"),
        &v,
        "vgpu claim",
    );
    let (s, shown) = d.call("GET", &format!("/v1/claims/{b}"), None);
    assert_eq!(s, 200);
    let mdevs = shown["mdevs"].as_array().unwrap();
    assert_eq!(mdevs.len(), 16);
    assert!(mdevs.iter().all(|m| m["type"] == "nvidia-35"
        && m["existing"] == false
        && m["parent"] == "0000:85:00.0"));
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&claim_body(&uuid(4), &[("resources:VGPU", "14")])),
    );
    assert_eq!(s, 201, "{v}");
    assert_eq!(d.usage_of("VGPU"), (32, 32));

    // Full: refused with the class and the numbers, nothing changed.
    let c = uuid(3);
    let one = claim_body(&c, &[("resources:VGPU", "1")]);
    let (s, v) = d.call("POST", "/v1/claims", Some(&one));
    assert_eq!(s, 409, "{v}");
    assert_eq!(v["error"]["code"], "claim_refused");
    let r = &v["error"]["details"]["resources"][0];
    assert_eq!(
        (r["class"].as_str(), r["used"].as_i64()),
        (Some("VGPU"), Some(32))
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("VGPU requested 1, used 32 of capacity 32"),
        "{v}"
    );

    // SEV: two contexts, then refused naming the model's provider; SEV-ES still has room.
    let sev = [("hw:mem_encryption", "true")];
    // Without a UEFI image: Nova's reason, nothing claimed.
    let mut bare = claim_body(&uuid(10), &sev);
    bare["request_spec"]["nova_object.data"]
        .as_object_mut()
        .unwrap()
        .remove("image");
    let (s, v) = d.call("POST", "/v1/claims", Some(&bare));
    assert_eq!(s, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("doesn't have the 'hw_firmware_type' property set to 'uefi'"),
        "{v}"
    );
    for n in 10..12 {
        let (s, v) = d.call("POST", "/v1/claims", Some(&claim_body(&uuid(n), &sev)));
        assert_eq!(s, 201, "{v}");
    }
    let (s, v) = d.call("POST", "/v1/claims", Some(&claim_body(&uuid(12), &sev)));
    assert_eq!(s, 409, "{v}");
    assert_eq!(
        v["error"]["details"]["resources"][0]["provider"],
        "amd-sev contexts"
    );
    let es = [
        ("hw:mem_encryption", "true"),
        ("hw:mem_encryption_model", "amd-sev-es"),
    ];
    let (s, v) = d.call("POST", "/v1/claims", Some(&claim_body(&uuid(13), &es)));
    assert_eq!(s, 201, "{v}");
    assert_eq!(d.usage_of("MEM_ENCRYPTION_CONTEXT"), (3, 101));
    // With rtrackctl too: one more SEV-ES context.
    let (code, text) = ctl_claim(&d, &uuid(14), &es);
    assert_eq!(code, 0, "{text}");
    assert_eq!(d.usage_of("MEM_ENCRYPTION_CONTEXT"), (4, 101));

    // The operator's licence: one, then refused (rtrackctl exits 3 naming the class).
    let lic = [("resources:CUSTOM_LICENCE", "1")];
    let (code, text) = ctl_claim(&d, &uuid(20), &lic);
    assert_eq!(code, 0, "{text}");
    let (code, text) = ctl_claim(&d, &uuid(21), &lic);
    assert_eq!(code, 3, "{text}");
    assert!(
        text.contains("CUSTOM_LICENCE requested 1, used 1 of capacity 1"),
        "{text}"
    );
    let (s, v) = d.call("POST", "/v1/claims", Some(&claim_body(&uuid(21), &lic)));
    assert_eq!(s, 409, "{v}");
    assert_eq!(
        v["error"]["details"]["resources"][0]["class"],
        "CUSTOM_LICENCE"
    );

    // An abort frees the vGPUs and their mdevs: the refused claim fits now and gets one of them.
    let (s, v) = d.call("DELETE", &format!("/v1/claims/{a}"), None);
    assert!((200..300).contains(&s), "{v}");
    assert_eq!(d.usage_of("VGPU"), (30, 32));
    let (s, v) = d.call("POST", "/v1/claims", Some(&one));
    assert_eq!(s, 201, "{v}");
    assert_eq!(
        v["mdevs"][0]["uuid"],
        "4b20d080-1b54-4048-85b3-a6a62d165c01"
    );
    assert_eq!(v["mdevs"][0]["existing"], true);
}

#[test]
fn vgpus_go_where_placement_put_them_by_the_allocation_or_the_request_groups() {
    let h = host("[devices]\nenabled_mdev_types = [\"nvidia-35\"]\n");
    let d = Daemon::start_with(Path::new(RTRACKD), &h.dir, &h.config, &[]);
    let (_, node) = d.call("GET", "/v1/compute-node", None);
    let node = uuid::Uuid::parse_str(node["nova_object.data"]["uuid"].as_str().unwrap()).unwrap();
    // rtrack's uuid for the second GPU's provider (no nova-compute left one).
    let second = uuid::Uuid::new_v5(&node, b"cmp1_pci_0000_85_00_0").to_string();
    // Placement's allocation in the body.
    let mut body = claim_body(&uuid(1), &[("resources:VGPU", "1")]);
    body["allocations"] = json!({second.clone(): {"resources": {"VGPU": 1, "VCPU": 1}}});
    let (s, v) = d.call("POST", "/v1/claims", Some(&body));
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["mdevs"][0]["parent"], "0000:85:00.0");
    // The RequestSpec's request group, mapped to its provider by the scheduler.
    let mut body = claim_body(&uuid(2), &[("resources1:VGPU", "1")]);
    body["request_spec"]["nova_object.data"]["requested_resources"] = json!([{
        "nova_object.name": "RequestGroup", "nova_object.namespace": "nova",
        "nova_object.version": "1.3", "nova_object.data": {
            "use_same_provider": true, "resources": {"VGPU": 1}, "provider_uuids": [second]}}]);
    let (s, v) = d.call("POST", "/v1/claims", Some(&body));
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["mdevs"][0]["parent"], "0000:85:00.0");
    // A provider that is not one of this host's vGPU parents: 409, nothing claimed.
    let mut body = claim_body(&uuid(3), &[("resources:VGPU", "1")]);
    body["allocations"] = json!({node.to_string(): {"resources": {"VGPU": 1}}});
    let (s, v) = d.call("POST", "/v1/claims", Some(&body));
    assert_eq!(s, 409, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&node.to_string()),
        "{v}"
    );
    assert_eq!(d.usage_of("VGPU"), (2, 32));
}

/// A type no parent offers yet (the vendor driver has not created it) is a warning naming the
/// key, as Nova starts and offers nothing for it: `--check-config` passes, the daemon starts
/// with the types the host has, and offers the new one at the first audit that sees it.
#[test]
fn a_type_the_host_does_not_offer_yet_is_a_warning_and_offered_once_it_appears() {
    let h = host(
        "[devices]\nenabled_mdev_types = [\"nvidia-35\", \"nvidia-37\"]\n[mdev.nvidia-37]\ndevice_addresses = [\"0000:85:00.0\"]\n",
    );
    std::fs::create_dir_all(&h.dir).unwrap();
    let cfg = h.dir.join("rtrack.toml");
    std::fs::write(&cfg, &h.config).unwrap();
    let out = Command::new(RTRACKD)
        .arg("--config")
        .arg(&cfg)
        .arg("--check-config")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("warning:"), "{text}");
    assert!(text.contains("devices.enabled_mdev_types[1]"), "{text}");
    assert!(text.contains("nvidia-35, nvidia-36"), "{text}");
    assert!(
        text.contains("mdev.nvidia-37.device_addresses[0]"),
        "{text}"
    );

    let d = Daemon::start_with(Path::new(RTRACKD), &h.dir, &h.config, &[]);
    // 84:00.0 offers nvidia-35 (2 existing + 14); 85:00.0 is given to nvidia-37 and has none.
    assert_eq!(d.usage_of("VGPU"), (0, 16));
    let tdir = h
        ._tmp
        .path()
        .join("host/sys/class/mdev_bus/0000:85:00.0/mdev_supported_types/nvidia-37");
    std::fs::create_dir_all(tdir.join("devices")).unwrap();
    for (f, v) in [
        ("name", "GRID M60-2Q\n"),
        ("device_api", "vfio-pci\n"),
        ("available_instances", "4\n"),
    ] {
        std::fs::write(tdir.join(f), v).unwrap();
    }
    let (s, v) = d.call("POST", "/v1/refresh", None);
    assert_eq!(s, 200, "{v}");
    assert_eq!(d.usage_of("VGPU"), (0, 20));
}
