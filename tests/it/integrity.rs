//! Claim integrity under faults, end to end against the real `rtrackd`: a 2xx means committed,
//! readers see committed state only, a failed commit leaves nothing, and whatever is granted is
//! counted. Slow and failing commits are forced by holding SQLite's write lock from another
//! connection (`BEGIN IMMEDIATE`), never by sleeps in rtrackd.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::support::{claim, env, poll, request_spec, uuid, Daemon, Env};
use rtrack::cli::client;
use serde_json::{json, Value};

const RTRACKD: &str = env!("CARGO_BIN_EXE_rtrackd");

fn start(e: &Env, extra: &str) -> Daemon {
    support::start_on(Path::new(RTRACKD), e, extra)
}

fn db(e: &Env) -> PathBuf {
    e.dir.join("state/rtrack.db")
}

/// Holds SQLite's write lock on the daemon's database until dropped (or rolled back).
struct WriteLock(Option<rusqlite::Connection>);

impl WriteLock {
    fn take(path: &Path) -> WriteLock {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.busy_timeout(Duration::from_secs(10)).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        WriteLock(Some(conn))
    }

    fn release(&mut self) {
        if let Some(c) = self.0.take() {
            c.execute_batch("ROLLBACK").unwrap();
        }
    }
}

impl Drop for WriteLock {
    fn drop(&mut self) {
        self.release();
    }
}

/// Sends a request from another thread; its answer (status, body) or the transport error
/// arrives on the receiver.
fn send(
    socket: &Path,
    method: &'static str,
    path: &str,
    body: Option<Value>,
    timeout: Duration,
) -> mpsc::Receiver<Result<(u16, Value), String>> {
    let (tx, rx) = mpsc::channel();
    let socket = socket.to_path_buf();
    let path = path.to_string();
    std::thread::spawn(move || {
        let bytes = body.map(|b| b.to_string().into_bytes());
        let r = client::request(&socket, method, &path, bytes.as_deref(), timeout)
            .map(|r| (r.status, r.json().unwrap_or(Value::Null)))
            .map_err(|e| e.to_string());
        let _ = tx.send(r);
    });
    rx
}

#[test]
fn a_retry_waits_for_the_commit_and_readers_never_see_an_uncommitted_claim() {
    let e = env();
    let mut d = start(&e, "");
    let a = uuid(1);
    let body = claim(&a, 2, 1024, 1, None);

    let mut lock = WriteLock::take(&db(&e));
    let first = send(
        &d.socket,
        "POST",
        "/v1/claims",
        Some(body.clone()),
        Duration::from_secs(30),
    );
    // The claim is decided at once and then waits for the lock in its commit.
    std::thread::sleep(Duration::from_millis(500));
    let retry = send(
        &d.socket,
        "POST",
        "/v1/claims",
        Some(body.clone()),
        Duration::from_secs(30),
    );
    std::thread::sleep(Duration::from_millis(500));

    // Nothing is acknowledged or shown while the commit waits.
    assert!(
        first.try_recv().is_err(),
        "the claim was answered before its commit"
    );
    assert!(
        retry.try_recv().is_err(),
        "the retry was answered before the claim's commit"
    );
    let (s, v) = d.call("GET", &format!("/v1/claims/{a}"), None);
    assert_eq!(s, 404, "an uncommitted claim is visible: {v}");
    assert_eq!(d.usage_of("VCPU").0, 0, "usage counts an uncommitted claim");
    let (s, node) = d.call("GET", "/v1/compute-node", None);
    assert_eq!(s, 200);
    assert_eq!(node["nova_object.data"]["vcpus_used"], 0, "{node}");
    let (s, list) = d.call("GET", "/v1/claims", None);
    assert_eq!(s, 200);
    assert_eq!(list.as_array().map(Vec::len), Some(0), "{list}");

    lock.release();
    let (s1, v1) = first
        .recv_timeout(Duration::from_secs(20))
        .unwrap()
        .unwrap();
    let (s2, v2) = retry
        .recv_timeout(Duration::from_secs(20))
        .unwrap()
        .unwrap();
    assert_eq!(s1, 201, "{v1}");
    assert_eq!(s2, 200, "{v2}");
    assert_eq!(v2["existing"], true, "{v2}");
    assert_eq!(d.usage_of("VCPU").0, 2);

    // Both answers are durable.
    d.restart();
    let (s, v) = d.call("GET", &format!("/v1/claims/{a}"), None);
    assert_eq!(s, 200, "{v}");
}

#[test]
fn sigkill_while_a_commit_waits_loses_nothing_anyone_was_told_of() {
    let e = env();
    let mut d = start(&e, "");
    let a = uuid(2);
    let body = claim(&a, 2, 1024, 1, None);
    let mut lock = WriteLock::take(&db(&e));
    let first = send(
        &d.socket,
        "POST",
        "/v1/claims",
        Some(body.clone()),
        Duration::from_secs(30),
    );
    std::thread::sleep(Duration::from_millis(300));
    let retry = send(
        &d.socket,
        "POST",
        "/v1/claims",
        Some(body.clone()),
        Duration::from_secs(30),
    );
    std::thread::sleep(Duration::from_millis(500));
    d.kill();
    lock.release();
    let answers = [first, retry].map(|rx| rx.recv_timeout(Duration::from_secs(20)).unwrap());
    for a in &answers {
        assert!(
            !matches!(a, Ok((s, _)) if (200..300).contains(s)),
            "a caller was told of a claim that was never committed: {a:?}"
        );
    }
    d.spawn();
    d.wait_ready();
    let (s, _) = d.call("GET", &format!("/v1/claims/{a}"), None);
    assert_eq!(s, 404, "nobody was told of it, and it was never committed");
}

#[test]
fn a_claim_told_to_a_retry_is_not_aborted_when_the_first_caller_leaves() {
    let e = env();
    // The first caller's request times out while its commit waits for the lock.
    let mut d = start(&e, "request_timeout_s = 2\n");
    let a = uuid(3);
    let body = claim(&a, 2, 1024, 1, None);
    let mut lock = WriteLock::take(&db(&e));
    let first = send(
        &d.socket,
        "POST",
        "/v1/claims",
        Some(body.clone()),
        Duration::from_secs(30),
    );
    std::thread::sleep(Duration::from_millis(1_500));
    let retry = send(
        &d.socket,
        "POST",
        "/v1/claims",
        Some(body.clone()),
        Duration::from_secs(30),
    );
    // The first request times out at 2 s; the lock goes at 2.5 s, before the retry's own
    // timeout (at 3.5 s).
    let (s1, v1) = first
        .recv_timeout(Duration::from_secs(20))
        .unwrap()
        .unwrap();
    assert_eq!(s1, 503, "{v1}");
    assert_eq!(v1["error"]["code"], "timeout", "{v1}");
    std::thread::sleep(Duration::from_millis(500));
    lock.release();
    let (s2, v2) = retry
        .recv_timeout(Duration::from_secs(20))
        .unwrap()
        .unwrap();
    assert!(
        (200..300).contains(&s2),
        "the retry should be answered once the claim is committed: {s2} {v2}"
    );
    // Whatever the order of the abort of the first and the retry, the claim the retry was
    // told of stays, in memory and on disk.
    std::thread::sleep(Duration::from_millis(500));
    let (s, v) = d.call("GET", &format!("/v1/claims/{a}"), None);
    assert_eq!(
        s,
        200,
        "the retry's answer was voided: {v}\n{}",
        d.log_text()
    );
    d.restart();
    let (s, v) = d.call("GET", &format!("/v1/claims/{a}"), None);
    assert_eq!(s, 200, "{v}");
}

#[test]
fn a_failed_commit_leaves_nothing_in_memory_and_nothing_is_served_from_it() {
    let e = env();
    let mut d = start(&e, "");
    let a = uuid(4);
    let body = claim(&a, 2, 1024, 1, None);
    let mut lock = WriteLock::take(&db(&e));
    // Held past the store's busy timeout (5 s): the commit fails.
    let (s, v) = d.call("POST", "/v1/claims", Some(&body));
    assert!(s == 500 || s == 503, "{s} {v}");
    let code = v["error"]["code"].as_str().unwrap_or_default().to_string();
    assert!(code == "store_failed" || code == "store_unavailable", "{v}");
    let (s, v) = d.call("GET", &format!("/v1/claims/{a}"), None);
    assert_eq!(s, 404, "a claim whose commit failed is served: {v}");
    assert_eq!(d.usage_of("VCPU").0, 0);
    // A retry while the store is still locked is refused, never "existing".
    let (s, v) = d.call("POST", "/v1/claims", Some(&body));
    assert!(s >= 500, "{s} {v}");
    lock.release();

    // Once the store can be written again, the retry is a new claim, and durable.
    let every = Duration::from_millis(200);
    let (s, v) = poll(
        "the store writable again",
        Duration::from_secs(10),
        every,
        || {
            let (s, v) = d.call("POST", "/v1/claims", Some(&body));
            (s != 503)
                .then_some((s, v.clone()))
                .ok_or(format!("{s} {v}"))
        },
    );
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["existing"], false, "{v}");
    let (s, h) = d.call("GET", "/healthz", None);
    assert_eq!(s, 200);
    assert!(h["store_unavailable"].is_null(), "{h}");
    d.restart();
    let (s, v) = d.call("GET", &format!("/v1/claims/{a}"), None);
    assert_eq!(s, 200, "{v}");
    assert_eq!(d.usage_of("VCPU").0, 2);
}

fn migration(uuid: &str, vcpus: i64, vm_state: &str, task_state: Option<&str>) -> Value {
    let mut instance = json!({"host": "src1", "node": "src1", "vm_state": vm_state});
    if let Some(t) = task_state {
        instance["task_state"] = json!(t);
    }
    json!({
        "instance": instance,
        "request_spec": request_spec(uuid, 2, vcpus, 1024, 1, None),
        "current": {"request_spec": request_spec(uuid, 1, 1, 512, 1, None)},
        "move_type": "resize",
    })
}

#[test]
fn moves_that_nova_would_not_count_are_refused_and_unknown_states_are_400() {
    let e = env();
    // 8 CPUs at ratio 1.0: 8 VCPU.
    let d = start(&e, "");
    let (s, v) = d.call("GET", "/v1/usage", None);
    assert_eq!(s, 200);
    let capacity = v["resources"]["VCPU"]["capacity"].as_i64().unwrap();
    let max_unit = v["resources"]["VCPU"]["max_unit"].as_i64().unwrap();
    assert_eq!(capacity % max_unit, 0, "{v}");

    for (n, vm, task) in [
        (10, "building", None),
        (11, "deleted", None),
        (12, "active", Some("spawning")),
        (13, "error", Some("rebuilding")),
    ] {
        let (s, v) = d.call(
            "POST",
            "/v1/migrations",
            Some(&migration(&uuid(n), 2, vm, task)),
        );
        assert_eq!(s, 409, "a move in {vm}/{task:?} was not refused: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("would not be counted")),
            "{v}"
        );
    }
    for (n, vm, task, field) in [
        (20, "../../etc/passwd", None, "instance.vm_state"),
        (21, "active", Some("resize-prep"), "instance.task_state"),
    ] {
        let (s, v) = d.call(
            "POST",
            "/v1/migrations",
            Some(&migration(&uuid(n), 2, vm, task)),
        );
        assert_eq!(s, 400, "{v}");
        assert_eq!(v["error"]["details"]["field"], field, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(
                    |m| m.contains("expected one of") && m.contains("resize_prep, ")
                        || m.contains("expected one of") && m.contains("active, building")
                ),
            "{v}"
        );
    }
    assert_eq!(d.usage_of("VCPU").0, 0, "refused moves hold nothing");

    // A granted move is counted from the moment it is granted.
    let (s, v) = d.call(
        "POST",
        "/v1/migrations",
        Some(&migration(&uuid(30), 2, "active", Some("resize_prep"))),
    );
    assert_eq!(s, 201, "{v}");
    assert_eq!(d.usage_of("VCPU").0, 2);
    // It stops being counted when its instance leaves the resize state...
    let (s, v) = d.call(
        "POST",
        &format!("/v1/instances/{}/state", uuid(30)),
        Some(&json!({"task_state": ""})),
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(d.usage_of("VCPU").0, 0);
    // ... and the freed room is claimed by others ...
    for k in 0..capacity / max_unit {
        let body = claim(&uuid(100 + k as u64), max_unit, 512, 1, None);
        let (s, v) = d.call("POST", "/v1/claims", Some(&body));
        assert_eq!(s, 201, "{v}");
    }
    // ... so going back into a resize state would be a grant over capacity: refused.
    let (s, v) = d.call(
        "POST",
        &format!("/v1/instances/{}/state", uuid(30)),
        Some(&json!({"task_state": "resize_migrating"})),
    );
    assert_eq!(s, 409, "{v}");
    assert_eq!(v["error"]["code"], "claim_refused", "{v}");
    assert_eq!(d.usage_of("VCPU").0, capacity, "never over capacity");
    // An unknown state in an update is a 400 naming the field.
    let (s, v) = d.call(
        "POST",
        &format!("/v1/instances/{}/state", uuid(100)),
        Some(&json!({"vm_state": "runnning"})),
    );
    assert_eq!(s, 400, "{v}");
    assert_eq!(v["error"]["details"]["field"], "vm_state", "{v}");
    // Strings are bounded, and the echo of one too.
    let mut body = migration(&uuid(33), 2, "active", Some("resize_prep"));
    body["source_compute"] = json!("h".repeat(100_000));
    let (s, v) = d.call("POST", "/v1/migrations", Some(&body));
    assert_eq!(s, 400, "{v}");
    assert_eq!(v["error"]["details"]["field"], "source_compute", "{v}");
    assert!(
        v.to_string().len() < 1_000,
        "unbounded echo: {} bytes",
        v.to_string().len()
    );
    // A typed field names its path.
    let mut body = claim(&uuid(34), 1, 512, 1, None);
    body["instance"] = json!({"host": 5});
    let (s, v) = d.call("POST", "/v1/claims", Some(&body));
    assert_eq!(s, 400, "{v}");
    assert_eq!(v["error"]["details"]["field"], "instance.host", "{v}");
    let (s, v) = d.call(
        "POST",
        &format!("/v1/instances/{}/state", uuid(100)),
        Some(&json!({"apply_new_flavor": "yes"})),
    );
    assert_eq!(s, 400, "{v}");
    assert_eq!(v["error"]["details"]["field"], "apply_new_flavor", "{v}");
    // A claim for an instance Nova counts as using nothing is refused.
    let mut body = claim(&uuid(32), 1, 512, 1, None);
    body["instance"] = json!({"vm_state": "deleted"});
    let (s, v) = d.call("POST", "/v1/claims", Some(&body));
    assert_eq!(s, 409, "{v}");
}

/// A flavor as large as the API takes, with NUMA cells that list every vCPU: refused in
/// milliseconds (the work is linear and done off the connections' thread), and nobody waits
/// behind it (the issue: 15 s for one, `/healthz` as long, quadratic in the CPU count).
#[test]
fn the_largest_numa_flavor_is_refused_at_once_and_holds_nobody_up() {
    let e = env();
    let d = start(&e, "");
    let mut spec = request_spec(&uuid(900), 1, 65536, 256, 1, None);
    spec["nova_object.data"]["flavor"]["nova_object.data"]["extra_specs"] = json!({
        "hw:numa_nodes": "2", "hw:numa_cpus.0": "0-32767", "hw:numa_cpus.1": "32768-65535",
        "hw:numa_mem.0": "128", "hw:numa_mem.1": "128"});
    let body = json!({"request_spec": spec});
    let started = Instant::now();
    let pending: Vec<_> = (0..4)
        .map(|i| {
            let path = if i % 2 == 0 {
                "/v1/claims?dry_run=true"
            } else {
                "/v1/claims"
            };
            send(
                &d.socket,
                "POST",
                path,
                Some(body.clone()),
                Duration::from_secs(60),
            )
        })
        .collect();
    let mut slowest_health = Duration::ZERO;
    while started.elapsed() < Duration::from_millis(500) {
        let t = Instant::now();
        assert_eq!(d.call("GET", "/healthz", None).0, 200);
        slowest_health = slowest_health.max(t.elapsed());
    }
    for rx in pending {
        let (s, v) = rx.recv().unwrap().unwrap();
        assert_eq!(s, 409, "{v}");
        assert_eq!(v["error"]["code"], "claim_refused", "{v}");
    }
    let all = started.elapsed();
    println!("MEASURE 4 claims of 65,536 vCPUs in NUMA cells: {all:?}; slowest /healthz meanwhile {slowest_health:?}");
    // Debug build, two cores: generous bounds that the quadratic code missed by orders of
    // magnitude.
    assert!(all < Duration::from_secs(5), "{all:?}");
    assert!(
        slowest_health < Duration::from_secs(1),
        "{slowest_health:?}"
    );
    // A list with a vCPU left out names a bounded number of them.
    let mut spec = request_spec(&uuid(901), 1, 65536, 256, 1, None);
    spec["nova_object.data"]["flavor"]["nova_object.data"]["extra_specs"] = json!({
        "hw:numa_nodes": "2", "hw:numa_cpus.0": "0", "hw:numa_cpus.1": "1",
        "hw:numa_mem.0": "128", "hw:numa_mem.1": "128"});
    let (s, v) = d.call("POST", "/v1/claims", Some(&json!({"request_spec": spec})));
    assert_eq!(s, 400, "{v}");
    let m = v["error"]["message"].as_str().unwrap();
    assert!(m.contains("(65534 in all)") && m.len() < 600, "{m}");
}
