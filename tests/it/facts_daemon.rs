//! End to end on a live `rtrackd`: Intel TDX contexts and vPMEM namespaces (the TDX and PMEM
//! hosts of `fixtures/kit/src/facts.rs`) claimed over the API and with `rtrackctl` as Nova's
//! functional tests claim them (test_intel_tdx.py, test_vpmem.py): granted while capacity lasts,
//! refused with Nova's reasons after, the namespaces named in the claim, kept across a SIGKILL,
//! freed by a delete, held on both sides of a same-host resize; every answer checked against
//! the OpenAPI document. A configuration naming a namespace the host does not offer is refused
//! by `--check-config`, with Nova's reason.

use crate::support;

use std::path::Path;
use std::process::Command;

use crate::support::{check_shape, uuid, Daemon};
use rtrack_fixtures::facts::FactsHost;
use serde_json::{json, Value};

const RTRACKD: &str = env!("CARGO_BIN_EXE_rtrackd");
const RTRACKCTL: &str = env!("CARGO_BIN_EXE_rtrackctl");

struct Host {
    _tmp: tempfile::TempDir,
    dir: std::path::PathBuf,
    config: String,
}

fn host(facts: FactsHost, devices: &str) -> Host {
    let tmp = rtrack_fixtures::real::scratch_dir();
    let root = tmp.path().join("host");
    facts.write(&root);
    let dir = tmp.path().join("d");
    let config = support::base_config(&root, &dir) + devices;
    Host {
        _tmp: tmp,
        dir,
        config,
    }
}

/// Nova's TDX image (test_intel_tdx.py): UEFI, stateless, q35, no video.
fn tdx_image() -> Value {
    json!({"hw_firmware_type": "uefi", "hw_firmware_stateless": true,
           "hw_machine_type": "q35", "hw_video_model": "none"})
}

fn claim_body(instance: &str, extra: &[(&str, &str)], image: Option<Value>) -> Value {
    let mut spec = support::request_spec(instance, 7, 1, 256, 1, None);
    for (k, v) in extra {
        spec["nova_object.data"]["flavor"]["nova_object.data"]["extra_specs"][*k] = json!(v);
    }
    if let Some(props) = image {
        spec = support::with_image(spec, "img", props);
    }
    json!({"request_spec": spec})
}

fn ok(doc: &Value, path: &str, method: &str, status: &str) -> Value {
    doc["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"].clone()
}

fn ctl(d: &Daemon, args: &[&str]) -> (i32, String) {
    let out = Command::new(RTRACKCTL)
        .arg("--socket")
        .arg(&d.socket)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr),
    )
}

fn message(v: &Value) -> &str {
    v["error"]["message"].as_str().unwrap_or("")
}

const TDX: [(&str, &str); 2] = [
    ("hw:mem_encryption", "true"),
    ("hw:mem_encryption_model", "intel-tdx"),
];

#[test]
fn tdx_contexts_are_claimed_refused_with_novas_reasons_and_freed() {
    let h = host(
        FactsHost::tdx_host(),
        "[devices]\ncpu_mode = \"host-passthrough\"\nnum_intel_tdx_guests = 2\n",
    );
    let d = Daemon::start_with(Path::new(RTRACKD), &h.dir, &h.config, &[]);
    let (_, doc) = d.call("GET", "/v1/openapi.json", None);
    // The configured count wins over the cgroup's 63, as in Nova's code.
    assert_eq!(d.usage_of("MEM_ENCRYPTION_CONTEXT"), (0, 2));
    let (s, inv) = d.call("GET", "/v1/inventory", None);
    assert_eq!(s, 200);
    check_shape(
        &doc,
        &ok(&doc, "/v1/inventory", "get", "200"),
        &inv,
        "inventory",
    );
    assert_eq!(inv["offered"]["intel_tdx"]["slots"], 2);
    assert_eq!(inv["memory_encryption"]["tdx_guests"], 63);

    // Nova's image demands, each refused with its reason before anything is claimed.
    for (key, value, reason) in [
        (
            "hw_firmware_type",
            json!("bios"),
            "doesn't have the 'hw_firmware_type' property set to 'uefi'",
        ),
        (
            "hw_firmware_stateless",
            json!(false),
            "requires stateless firmware",
        ),
        (
            "hw_video_model",
            json!("vga"),
            "incompatible with an attached video device",
        ),
        (
            "hw_machine_type",
            json!("pc"),
            "q35 type is required for intel-tdx to work",
        ),
    ] {
        let mut img = tdx_image();
        img[key] = value;
        let (s, v) = d.call(
            "POST",
            "/v1/claims",
            Some(&claim_body(&uuid(1), &TDX, Some(img))),
        );
        assert_eq!(s, 400, "{key}: {v}");
        assert!(message(&v).contains(reason), "{key}: {v}");
        assert_eq!(
            v["error"]["details"]["field"],
            format!("request_spec.image.properties.{key}")
        );
    }
    assert_eq!(d.usage_of("MEM_ENCRYPTION_CONTEXT"), (0, 2));

    // SEV is not offered on this host at all.
    let sev = [("hw:mem_encryption", "true")];
    let uefi = json!({"hw_firmware_type": "uefi"});
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&claim_body(&uuid(4), &sev, Some(uefi))),
    );
    assert_eq!(s, 409, "{v}");
    assert!(
        message(&v).contains("amd-sev (not offered on this host)"),
        "{v}"
    );
    // Two guests: one from the flavor, one from the image's own properties.
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&claim_body(&uuid(1), &TDX, Some(tdx_image()))),
    );
    assert_eq!(s, 201, "{v}");
    check_shape(
        &doc,
        &ok(&doc, "/v1/claims", "post", "201"),
        &v,
        "tdx claim",
    );
    assert_eq!(
        v["nested"],
        json!([{"provider": {"mem_encryption": "intel-tdx"}, "class": "MEM_ENCRYPTION_CONTEXT", "amount": 1}])
    );
    let mut img = tdx_image();
    img["hw_mem_encryption"] = json!(true);
    img["hw_mem_encryption_model"] = json!("intel-tdx");
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&claim_body(&uuid(2), &[], Some(img))),
    );
    assert_eq!(s, 201, "{v}");
    // Full: refused naming the model's provider.
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&claim_body(&uuid(3), &TDX, Some(tdx_image()))),
    );
    assert_eq!(s, 409, "{v}");
    assert_eq!(
        v["error"]["details"]["resources"][0]["class"],
        "MEM_ENCRYPTION_CONTEXT"
    );
    assert!(
        message(&v).contains("MEM_ENCRYPTION_CONTEXT requested 1, used 2 of capacity 2"),
        "{v}"
    );

    // A delete frees the context; rtrackctl claims it with the image's properties.
    let (s, _) = d.call("DELETE", &format!("/v1/claims/{}", uuid(1)), None);
    assert!((200..300).contains(&s));
    let mut args = vec![
        "claim",
        "--instance",
        "",
        "--vcpus",
        "1",
        "--memory-mb",
        "256",
        "--extra-spec",
        "hw:mem_encryption=true",
        "--extra-spec",
        "hw:mem_encryption_model=intel-tdx",
        "--image-property",
        "hw_firmware_type=uefi",
        "--image-property",
        "hw_firmware_stateless=true",
        "--image-property",
        "hw_video_model=none",
    ];
    let id = uuid(5);
    args[2] = &id;
    let (code, text) = ctl(&d, &args);
    assert_eq!(code, 0, "{text}");
    assert_eq!(d.usage_of("MEM_ENCRYPTION_CONTEXT"), (2, 2));
    let other = uuid(6);
    args[2] = &other;
    let (code, text) = ctl(&d, &args);
    assert_eq!(code, 3, "{text}");
    assert!(
        text.contains("MEM_ENCRYPTION_CONTEXT requested 1, used 2 of capacity 2"),
        "{text}"
    );
}

const VPMEM: &str = "[devices]\npmem_namespaces = [\"4GB:ns_0\", \"SMALL:ns_1|ns_2\"]\n";

fn namespaces(v: &Value) -> Vec<String> {
    v["pmem_namespaces"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|n| n["name"].as_str().unwrap_or("?").to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn vpmem_namespaces_are_given_refused_kept_and_freed_as_in_novas_test() {
    let h = host(FactsHost::pmem_host(), VPMEM);
    let mut d = Daemon::start_with(Path::new(RTRACKD), &h.dir, &h.config, &[]);
    let (_, doc) = d.call("GET", "/v1/openapi.json", None);
    assert_eq!(d.usage_of("CUSTOM_PMEM_NAMESPACE_4GB"), (0, 1));
    assert_eq!(d.usage_of("CUSTOM_PMEM_NAMESPACE_SMALL"), (0, 2));
    let small = [("hw:pmem", "SMALL")];

    // test_create_servers_with_vpmem: two SMALL guests, the third refused with Nova's words.
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&claim_body(&uuid(1), &small, None)),
    );
    assert_eq!(s, 201, "{v}");
    check_shape(
        &doc,
        &ok(&doc, "/v1/claims", "post", "201"),
        &v,
        "vpmem claim",
    );
    assert_eq!(namespaces(&v), ["ns_1"]);
    assert_eq!(v["pmem_namespaces"][0]["devpath"], "/dev/dax0.1");
    assert_eq!(v["pmem_namespaces"][0]["size"], 4292870144u64);
    assert_eq!(v["pmem_namespaces"][0]["align"], 2097152);
    // vPMEM gives the guest one NUMA cell, as in Nova.
    assert_eq!(v["numa_cells"].as_array().map(Vec::len), Some(1), "{v}");
    let (code, text) = ctl(
        &d,
        &[
            "claim",
            "--instance",
            &uuid(2),
            "--vcpus",
            "1",
            "--memory-mb",
            "256",
            "--extra-spec",
            "hw:pmem=SMALL",
        ],
    );
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("PMEM ns_2@/dev/dax0.2"), "{text}");
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&claim_body(&uuid(3), &small, None)),
    );
    assert_eq!(s, 409, "{v}");
    assert!(
        message(&v).contains(
            "Needed 1 units of resource class CUSTOM_PMEM_NAMESPACE_SMALL, but 0 are available."
        ),
        "{v}"
    );
    // A guest asking for one of each label takes the 4GB one and, after a delete, a SMALL one.
    let both = [("hw:pmem", "4GB,SMALL")];
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&claim_body(&uuid(4), &both, None)),
    );
    assert_eq!(s, 409, "{v}");
    let (s, _) = d.call("DELETE", &format!("/v1/claims/{}", uuid(1)), None);
    assert!((200..300).contains(&s));
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&claim_body(&uuid(4), &both, None)),
    );
    assert_eq!(s, 201, "{v}");
    assert_eq!(namespaces(&v), ["ns_0", "ns_1"]);

    // Durable: after a SIGKILL the same namespaces are held, and listed.
    d.restart();
    let (s, v) = d.call("GET", &format!("/v1/claims/{}", uuid(4)), None);
    assert_eq!(s, 200, "{v}");
    check_shape(
        &doc,
        &ok(&doc, "/v1/claims/{instance_uuid}", "get", "200"),
        &v,
        "claim",
    );
    assert_eq!(namespaces(&v), ["ns_0", "ns_1"]);
    let (code, text) = ctl(&d, &["claims"]);
    assert_eq!(code, 0, "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with(&uuid(4)))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains(" ns_0,ns_1 "), "{text}");
    assert_eq!(d.usage_of("CUSTOM_PMEM_NAMESPACE_SMALL"), (2, 2));

    // test_resize_same_host: a SMALL guest resized to 4GB,SMALL holds its old namespace (the
    // migration's) and new ones until confirmed; refused while no SMALL one is free.
    let (s, _) = d.call("DELETE", &format!("/v1/claims/{}", uuid(4)), None);
    assert!((200..300).contains(&s));
    let m = uuid(8);
    let (s, v) = d.call("POST", "/v1/claims", Some(&claim_body(&m, &small, None)));
    assert_eq!(s, 201, "{v}");
    assert_eq!(namespaces(&v), ["ns_1"]);
    let mut new_spec = support::request_spec(&m, 8, 1, 256, 1, None);
    new_spec["nova_object.data"]["flavor"]["nova_object.data"]["extra_specs"]["hw:pmem"] =
        json!("4GB,SMALL");
    let mut old_spec = support::request_spec(&m, 7, 1, 256, 1, None);
    old_spec["nova_object.data"]["flavor"]["nova_object.data"]["extra_specs"]["hw:pmem"] =
        json!("SMALL");
    let body = json!({
        "instance": {"uuid": m, "host": "cmp1", "node": "cmp1", "vm_state": "active"},
        "request_spec": new_spec,
        "current": {"request_spec": old_spec},
    });
    let (s, v) = d.call("POST", "/v1/migrations", Some(&body));
    assert_eq!(s, 409, "{v}");
    assert!(
        message(&v).contains(
            "Needed 1 units of resource class CUSTOM_PMEM_NAMESPACE_SMALL, but 0 are available."
        ),
        "{v}"
    );
    let (s, _) = d.call("DELETE", &format!("/v1/claims/{}", uuid(2)), None);
    assert!((200..300).contains(&s));
    let (s, v) = d.call("POST", "/v1/migrations", Some(&body));
    assert_eq!(s, 201, "{v}");
    assert_eq!(namespaces(&v["claim"]), ["ns_0", "ns_2"], "{v}");
    assert_eq!(d.usage_of("CUSTOM_PMEM_NAMESPACE_SMALL"), (2, 2));
    assert_eq!(d.usage_of("CUSTOM_PMEM_NAMESPACE_4GB"), (1, 1));
    let id = v["migration"]["id"].as_i64().unwrap();
    let (s, v) = d.call("POST", &format!("/v1/migrations/{id}/confirm"), None);
    assert_eq!(s, 200, "{v}");
    // Confirmed: the old side's ns_1 is free again, the new ones stay with the guest.
    assert_eq!(d.usage_of("CUSTOM_PMEM_NAMESPACE_SMALL"), (1, 2));
    let (s, v) = d.call("GET", &format!("/v1/claims/{m}"), None);
    assert_eq!(s, 200, "{v}");
    assert_eq!(namespaces(&v), ["ns_0", "ns_2"], "{v}");
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&claim_body(&uuid(7), &small, None)),
    );
    assert_eq!(s, 201, "{v}");
    assert_eq!(namespaces(&v), ["ns_1"]);
}

#[test]
fn a_namespace_the_host_does_not_offer_is_refused_with_novas_reason() {
    for (entry, reason) in [
        ("SMALL:ns_9", "The PMEM namespace ns_9 isn't on host"),
        ("FS:fs_0", "The PMEM namespace fs_0 isn't on host as a usable device-dax namespace (namespace1.0: it is in fsdax mode"),
    ] {
        let h = host(
            FactsHost::pmem_host(),
            &format!("[devices]\npmem_namespaces = [\"4GB:ns_0\", \"{entry}\"]\n"),
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
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text}");
        assert!(text.contains("devices.pmem_namespaces"), "{text}");
        assert!(text.contains(reason), "{text}");
    }
}
