//! Fuzzed API bodies against the real `rtrackd` (proptest, fixed seed): valid claim, move and
//! state-update bodies with values replaced, fields added and removed. Whatever is sent, the
//! answer is never a 5xx, an error names the field (its JSON path), nothing sent is echoed
//! whole in an answer or in the log, and usage never exceeds capacity.
//!
//! `RTRACK_FUZZ_CASES` (default 300) sets the number of bodies.

use std::path::Path;

use crate::support::{base_config, claim, request_spec, uuid, Daemon};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use rtrack_fixtures::real::scratch_dir;
use rtrack_fixtures::synthetic::SyntheticHost;
use serde_json::{json, Value};

const RTRACKD: &str = env!("CARGO_BIN_EXE_rtrackd");
/// Longest error answer accepted: bounded echo means a few KB at most, whatever was sent.
const MAX_ERROR_BYTES: usize = 4_096;
/// Longest log line accepted.
const MAX_LOG_LINE: usize = 8_192;

/// A value to put somewhere in a body.
fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        "[a-z_./-]{0,12}".prop_map(Value::from),
        "\\PC{0,30}".prop_map(Value::from),
        (1usize..300_000).prop_map(|n| Value::from("A".repeat(n))),
        Just(json!([])),
        Just(json!({})),
        Just(json!({"nova_object.name": "Flavor"})),
        Just(Value::from("../../etc/passwd")),
    ]
}

#[derive(Debug, Clone)]
enum Mutation {
    /// Replace the value at the n-th path (modulo the count) with a leaf.
    Replace(usize, Value),
    /// Remove the n-th path.
    Remove(usize),
    /// Add a field named so to the n-th object.
    Add(usize, String, Value),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), leaf()).prop_map(|(i, v)| Mutation::Replace(i, v)),
        1 => any::<usize>().prop_map(Mutation::Remove),
        1 => (any::<usize>(), "[a-z_]{1,10}", leaf()).prop_map(|(i, k, v)| Mutation::Add(i, k, v)),
    ]
}

/// Every JSON pointer in `v`.
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                out.push(p.clone());
                pointers(x, p, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                let p = format!("{at}/{i}");
                out.push(p.clone());
                pointers(x, p, out);
            }
        }
        _ => {}
    }
}

fn apply(body: &mut Value, m: &Mutation) {
    let mut ps = Vec::new();
    pointers(body, String::new(), &mut ps);
    if ps.is_empty() {
        return;
    }
    match m {
        Mutation::Replace(i, v) => {
            if let Some(x) = body.pointer_mut(&ps[i % ps.len()]) {
                *x = v.clone();
            }
        }
        Mutation::Remove(i) => {
            let p = &ps[i % ps.len()];
            let (parent, key) = p.rsplit_once('/').unwrap();
            match body.pointer_mut(parent) {
                Some(Value::Object(o)) => {
                    o.remove(&key.replace("~1", "/").replace("~0", "~"));
                }
                Some(Value::Array(a)) => {
                    if let Ok(k) = key.parse::<usize>() {
                        if k < a.len() {
                            a.remove(k);
                        }
                    }
                }
                _ => {}
            }
        }
        Mutation::Add(i, k, v) => {
            let objects: Vec<&String> = ps
                .iter()
                .filter(|p| body.pointer(p).is_some_and(Value::is_object))
                .collect();
            let target = if objects.is_empty() {
                String::new()
            } else {
                objects[i % objects.len()].clone()
            };
            if let Some(Value::Object(o)) = body.pointer_mut(&target) {
                o.insert(k.clone(), v.clone());
            }
        }
    }
}

/// The valid bodies that get mutated: (method, path, body).
fn bases() -> Vec<(&'static str, String, Value)> {
    let u = uuid(7);
    let mut with_instance = claim(&u, 1, 256, 1, Some("vf:1"));
    with_instance["instance"] = json!({"vm_state": "building", "host": "cmp1", "project_id": "p"});
    vec![
        ("POST", "/v1/claims".into(), with_instance),
        (
            "POST",
            "/v1/claims?dry_run=true".into(),
            claim(&uuid(8), 1, 256, 1, None),
        ),
        (
            "POST",
            "/v1/migrations".into(),
            json!({
                "instance": {"host": "src1", "node": "src1", "vm_state": "active", "task_state": "resize_prep"},
                "request_spec": request_spec(&uuid(9), 2, 2, 512, 1, None),
                "current": {"request_spec": request_spec(&uuid(9), 1, 1, 256, 1, None)},
                "move_type": "resize", "migration_id": 5, "source_compute": "src1",
            }),
        ),
        (
            "POST",
            format!("/v1/instances/{}/state", uuid(10)),
            json!({"vm_state": "active", "task_state": "", "host": "cmp1", "node": "cmp1", "apply_new_flavor": false}),
        ),
        (
            "POST",
            "/v1/claims".into(),
            json!({"legacy": {
                "request_spec": {"instance_type": request_spec(&uuid(11), 1, 1, 256, 1, None)["nova_object.data"]["flavor"].clone(),
                                 "instance_properties": {"uuid": uuid(11), "project_id": "p"}, "num_instances": 1},
                "filter_properties": {},
            }}),
        ),
    ]
}

#[test]
fn fuzzed_bodies_get_no_5xx_bounded_answers_and_field_naming_errors() {
    let cases: u32 = std::env::var("RTRACK_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let tmp = scratch_dir();
    let root = tmp.path().join("host");
    SyntheticHost::small().write(&root);
    let dir = tmp.path().join("d");
    let config = base_config(&root, &dir);
    let d = Daemon::start_with(Path::new(RTRACKD), &dir, &config, &[]);
    // The state update needs an instance to update.
    let (s, v) = d.call(
        "POST",
        "/v1/claims",
        Some(&claim(&uuid(10), 1, 256, 1, None)),
    );
    assert_eq!(s, 201, "{v}");

    let bases = bases();
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    let strategy = (0..bases.len(), proptest::collection::vec(mutation(), 1..4));
    let statuses: std::cell::RefCell<std::collections::BTreeMap<u16, u32>> = Default::default();
    let result = runner.run(&strategy, |(which, mutations)| {
        let (method, path, base) = &bases[which];
        let mut body = base.clone();
        for m in &mutations {
            apply(&mut body, m);
        }
        let (status, answer) = d.call(method, path, Some(&body));
        *statuses.borrow_mut().entry(status).or_default() += 1;
        prop_assert!(status < 500, "{status} for {path}: {answer}");
        if status >= 400 {
            let text = answer.to_string();
            prop_assert!(
                text.len() <= MAX_ERROR_BYTES,
                "{} bytes of error for {path}: {}",
                text.len(),
                &text[..300]
            );
            if answer["error"]["code"] == "invalid_request" {
                let field = answer["error"]["details"]["field"].as_str().unwrap_or("");
                prop_assert!(!field.is_empty(), "400 without a field: {answer}");
                let message = answer["error"]["message"].as_str().unwrap_or("");
                prop_assert!(
                    message.starts_with(field),
                    "message does not start with its field: {answer}"
                );
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}\n--- log tail:\n{}", tail(&d.log_text()));
    }
    eprintln!("answers by status: {:?}", statuses.borrow());
    let (s, u) = d.call("GET", "/v1/usage", None);
    assert_eq!(s, 200);
    for (class, r) in u["resources"].as_object().unwrap() {
        assert!(r["used"].as_i64() <= r["capacity"].as_i64(), "{class}: {u}");
    }
    let log = d.log_text();
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(longest <= MAX_LOG_LINE, "a log line of {longest} bytes");
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(20)..]
        .iter()
        .map(|l| &l[..l.len().min(400)])
        .collect::<Vec<_>>()
        .join("\n")
}
