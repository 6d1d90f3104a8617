//! Placement's data is not rtrack's to destroy: against a real Placement and the real
//! `rtrackd`, with `[placement] report_allocations = true`.
//!
//! - A host taken over from nova-compute keeps every instance's allocation until it is adopted
//!   (and after: nothing needs writing).
//! - A build in flight (the scheduler's allocation, no claim yet) survives a restart.
//! - A claimed consumer's parts on other providers (a Neutron agent's bandwidth, a sharing
//!   provider's addresses) and its project and user survive rtrack's writes and its release.
//! - A move between two rtrack hosts on one Placement: the source side under the migration's
//!   consumer, the destination side under the instance's, stable across refreshes and restarts
//!   of either side; confirm and revert release the right one. A same-host resize: the old
//!   flavor under the migration.
//! - The sharing provider's DISK_GB part stays with the claim.
//! - A consumer released while Placement was down (and rtrackd restarted meanwhile) is removed
//!   once Placement answers, and nothing else.
//!
//! `RTRACK_SKIP_PLACEMENT=1` skips these with the other Placement tests.

use crate::support;

use std::path::Path;
use std::time::Duration;

use crate::support::eventually;
use crate::support::placement::{server, Raw, Server};
use crate::support::{request_spec, Daemon};
use rtrack_fixtures::synthetic::SyntheticHost;
use serde_json::{json, Value};
use uuid::Uuid;

const RTRACKD: &str = env!("CARGO_BIN_EXE_rtrackd");

/// Blocking calls to a Placement server.
struct P {
    rt: tokio::runtime::Runtime,
    raw: Raw,
}

impl P {
    fn new(srv: &Server) -> P {
        P {
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            raw: srv.client(),
        }
    }

    fn get(&self, path: &str) -> Value {
        self.rt.block_on(self.raw.get(path))
    }

    fn status(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        self.rt.block_on(self.raw.send(method, path, body))
    }

    fn must(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let (s, v) = self.status(method.clone(), path, Some(body));
        assert!((200..300).contains(&s), "{method} {path}: {s} {v}");
        v
    }

    fn provider(&self, uuid: Uuid, name: &str, parent: Option<Uuid>) {
        self.must(
            reqwest::Method::POST,
            "/resource_providers",
            json!({"uuid": uuid, "name": name, "parent_provider_uuid": parent}),
        );
    }

    fn inventory(&self, rp: Uuid, inv: Value) -> Value {
        let g = self.get(&format!("/resource_providers/{rp}"))["generation"].clone();
        self.must(
            reqwest::Method::PUT,
            &format!("/resource_providers/{rp}/inventories"),
            json!({"resource_provider_generation": g, "inventories": inv}),
        )
    }

    /// What the scheduler does: a new consumer's whole allocation.
    fn allocate(&self, consumer: Uuid, allocations: Value) {
        self.must(
            reqwest::Method::PUT,
            &format!("/allocations/{consumer}"),
            json!({"allocations": allocations, "project_id": "proj", "user_id": "user",
                   "consumer_generation": null, "consumer_type": "INSTANCE"}),
        );
    }

    /// A consumer's allocation as Placement answers it, without the providers' generations
    /// (which other consumers' writes move); `consumer_generation` tells a write to this one.
    fn allocation(&self, consumer: impl std::fmt::Display) -> Value {
        let mut v = self.get(&format!("/allocations/{consumer}"));
        if let Some(m) = v["allocations"].as_object_mut() {
            for part in m.values_mut() {
                if let Some(o) = part.as_object_mut() {
                    o.remove("generation");
                }
            }
        }
        v
    }
}

/// A host's configuration: reports every second, refreshes every second, writes allocations.
/// `extra` lines starting with `resources.` go into `[resources]`.
fn config(root: &Path, dir: &Path, url: &str, name: &str, extra: &str) -> String {
    let (resources, extra): (Vec<&str>, Vec<&str>) =
        extra.lines().partition(|l| l.starts_with("resources."));
    let resources: String = resources
        .iter()
        .map(|l| format!("{}\n", l.trim_start_matches("resources.")))
        .collect();
    let extra = extra.join("\n");
    support::base_config(root, dir)
        .replacen("[resources]\n", &format!("[resources]\n{resources}"), 1)
        .replace("hypervisor_hostname = \"cmp1\"", &format!("hypervisor_hostname = \"{name}\""))
        .replace("host = \"cmp1\"\n", &format!("host = \"{name}\"\n"))
        + &format!(
            "\n[placement]\nendpoint = \"{url}\"\nreport_interval_s = 1\nrefresh_interval_s = 1\nreport_allocations = true\n{extra}"
        )
}

/// A daemon for host `name` on the small synthetic host.
struct Host {
    _tmp: tempfile::TempDir,
    d: Daemon,
    node: String,
}

fn host(srv: &Server, name: &str, extra: &str) -> Host {
    let tmp = rtrack_fixtures::real::scratch_dir();
    let root = tmp.path().join("host");
    SyntheticHost::small().write(&root);
    let dir = tmp.path().join("d");
    let cfg = config(&root, &dir, &srv.url, name, extra);
    let d = Daemon::start_with(Path::new(RTRACKD), &dir, &cfg, &[]);
    let node = std::fs::read_to_string(dir.join("state/compute_id"))
        .unwrap()
        .trim()
        .to_string();
    Host { _tmp: tmp, d, node }
}

impl Host {
    fn registered(&self, p: &P) {
        eventually(
            "the compute node registered",
            Duration::from_secs(30),
            &mut || {
                p.status(
                    reqwest::Method::GET,
                    &format!("/resource_providers/{}/inventories", self.node),
                    None,
                )
                .1["inventories"]["VCPU"]["total"]
                    .is_i64()
            },
        );
    }

    fn post(&self, path: &str, body: &Value) -> Value {
        let (s, v) = self.d.call("POST", path, Some(body));
        assert!((200..300).contains(&s), "POST {path}: {s} {v}");
        v
    }

    fn restart(&mut self, kill: bool) {
        if kill {
            self.d.kill();
        } else {
            self.d.signal(nix::sys::signal::Signal::SIGTERM);
            assert!(self.d.wait_exit(Duration::from_secs(30)).is_some());
        }
        self.d.spawn();
        self.d.wait_ready();
    }

    /// Several report and refresh cycles.
    fn cycles(&self) {
        std::thread::sleep(Duration::from_millis(3500));
    }
}

/// The part of `alloc` on `rp`.
fn part(alloc: &Value, rp: impl std::fmt::Display) -> Value {
    alloc["allocations"][rp.to_string()]["resources"].clone()
}

fn providers_of(alloc: &Value) -> Vec<String> {
    let mut v: Vec<String> = alloc["allocations"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// A claim body whose RequestSpec names no project or user (as `rtrackctl claim` without
/// `--project`), or the support's `p1`/`u1`.
fn claim_body(uuid: Uuid, vcpus: i64, memory_mb: i64, owner: bool) -> Value {
    let mut spec = request_spec(&uuid.to_string(), 1, vcpus, memory_mb, 1, None);
    if !owner {
        let data = spec["nova_object.data"].as_object_mut().unwrap();
        data.remove("project_id");
        data.remove("user_id");
    }
    json!({"request_spec": spec})
}

#[test]
fn a_host_taken_over_keeps_every_instance_allocation_until_it_is_adopted() {
    let Some(srv) = server("safety-takeover") else {
        return;
    };
    let p = P::new(&srv);
    // nova-compute's tree: its root named cmp1, three instances.
    let root = Uuid::new_v4();
    p.provider(root, "cmp1", None);
    p.inventory(
        root,
        json!({"VCPU": {"total": 8, "allocation_ratio": 4.0}, "MEMORY_MB": {"total": 16384, "reserved": 512},
               "DISK_GB": {"total": 100}}),
    );
    let instances: Vec<Uuid> = (0..3).map(|_| Uuid::new_v4()).collect();
    for (i, c) in instances.iter().enumerate() {
        p.allocate(
            *c,
            json!({root.to_string(): {"resources": {"VCPU": i + 1, "MEMORY_MB": 512, "DISK_GB": 1}}}),
        );
    }
    let before: Vec<Value> = instances.iter().map(|c| p.allocation(c)).collect();
    let h = host(&srv, "cmp1", "");
    assert_eq!(
        h.node,
        root.to_string(),
        "nova-compute's compute node taken over"
    );
    h.cycles();
    for (c, b) in instances.iter().zip(&before) {
        assert_eq!(&p.allocation(c), b, "{c}: untouched before adoption");
    }
    assert!(
        !h.d.log_text().contains("found and fixed"),
        "{}",
        h.d.log_text()
    );
    // Each is an unclaimed drift, left alone; then adopted, and still nothing written.
    let (_, r) =
        h.d.call("POST", "/v1/reconcile", Some(&json!({"fix": true})));
    assert_eq!(r["counts"]["unclaimed"], 3, "{r}");
    let plan = h.post("/v1/adopt", &json!({"apply": true}));
    assert_eq!(plan["claims"].as_array().unwrap().len(), 3, "{plan}");
    h.cycles();
    for (c, b) in instances.iter().zip(&before) {
        assert_eq!(
            &p.allocation(c),
            b,
            "{c}: the claims hold what Placement holds"
        );
    }
    let (_, r) = h.d.call("POST", "/v1/reconcile", None);
    assert_eq!(r["counts"]["unclaimed"], 0, "{r}");
}

#[test]
fn a_build_in_flight_survives_a_restart_and_a_claimed_consumer_keeps_its_owner() {
    let Some(srv) = server("safety-restart") else {
        return;
    };
    let p = P::new(&srv);
    let mut h = host(&srv, "cmp1", "");
    h.registered(&p);
    // The scheduler allocates for a build whose claim has not arrived.
    let build = Uuid::new_v4();
    let root = h.node.clone();
    p.allocate(
        build,
        json!({&root: {"resources": {"VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 1}}}),
    );
    let before = p.allocation(build);
    h.cycles();
    h.restart(false);
    h.cycles();
    assert_eq!(p.allocation(build), before, "after a SIGTERM restart");
    h.restart(true);
    h.cycles();
    assert_eq!(p.allocation(build), before, "after a SIGKILL restart");
    // The claim arrives, naming another project than the scheduler's: Placement's owner stays,
    // and with the same amounts nothing is written at all.
    h.post("/v1/claims", &claim_body(build, 2, 1024, true));
    h.cycles();
    assert_eq!(p.allocation(build), before, "same amounts: no write");
    // Aborted: rtrack held it and released it, so its part goes.
    let (s, v) = h.d.call("DELETE", &format!("/v1/claims/{build}"), None);
    assert_eq!(s, 200, "{v}");
    eventually(
        "the released allocation removed",
        Duration::from_secs(30),
        &mut || {
            p.allocation(build)["allocations"]
                .as_object()
                .is_some_and(|m| m.is_empty())
        },
    );
}

/// A consumer an older Nova wrote without a type reads back as "unknown", which a write may not
/// send: rtrack's merged write and its release keep it so (and are not refused).
#[test]
fn a_consumer_without_a_type_keeps_it_through_writes_and_releases() {
    let Some(srv) = server("safety-untyped") else {
        return;
    };
    let p = P::new(&srv);
    let h = host(&srv, "cmp1", "");
    h.registered(&p);
    let bw = Uuid::new_v4();
    p.provider(bw, "agent-bw", None);
    p.inventory(bw, json!({"NET_BW_EGR_KILOBIT_PER_SEC": {"total": 10000}}));
    let build = Uuid::new_v4();
    let root = h.node.clone();
    let (s, v) = p.rt.block_on(p.raw.send_at(
        "1.36",
        reqwest::Method::PUT,
        &format!("/allocations/{build}"),
        Some(json!({"allocations": {
                &root: {"resources": {"VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 1}},
                bw.to_string(): {"resources": {"NET_BW_EGR_KILOBIT_PER_SEC": 1000}}},
            "project_id": "proj", "user_id": "user", "consumer_generation": null})),
    ));
    assert_eq!(s, 204, "{v}");
    let untyped = p.allocation(build)["consumer_type"].clone();
    // The claim holds less than the scheduler wrote: rtrack writes its part.
    h.post("/v1/claims", &claim_body(build, 1, 512, true));
    eventually(
        "rtrack's part written",
        Duration::from_secs(30),
        &mut || part(&p.allocation(build), &root)["VCPU"] == 1,
    );
    let a = p.allocation(build);
    assert_eq!(a["consumer_type"], untyped, "{a}");
    assert_eq!(part(&a, bw)["NET_BW_EGR_KILOBIT_PER_SEC"], 1000, "{a}");
    // Released: rtrack's part goes, the bandwidth and the type stay.
    let (s, v) = h.d.call("DELETE", &format!("/v1/claims/{build}"), None);
    assert_eq!(s, 200, "{v}");
    eventually(
        "the released part removed",
        Duration::from_secs(30),
        &mut || providers_of(&p.allocation(build)) == [bw.to_string()],
    );
    assert_eq!(p.allocation(build)["consumer_type"], untyped);
}

#[test]
fn parts_on_other_providers_and_the_owner_survive_writes_and_releases() {
    let Some(srv) = server("safety-foreign") else {
        return;
    };
    let p = P::new(&srv);
    let h = host(&srv, "cmp1", "");
    h.registered(&p);
    let root: Uuid = h.node.parse().unwrap();
    // A Neutron agent's bandwidth provider below the compute node, one as a root of its own,
    // and a sharing provider of IP addresses.
    let (bw_child, bw_root, ips) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    p.provider(bw_child, "cmp1:Open vSwitch agent:br-int", Some(root));
    p.provider(bw_root, "cmp1:NIC Switch agent", None);
    p.provider(ips, "ip-pool", None);
    let bw = json!({"NET_BW_EGR_KILOBIT_PER_SEC": {"total": 10000}});
    p.inventory(bw_child, bw.clone());
    p.inventory(bw_root, bw);
    p.inventory(ips, json!({"IPV4_ADDRESS": {"total": 64}}));
    let (same, other) = (Uuid::new_v4(), Uuid::new_v4());
    for (c, vcpu) in [(same, 2), (other, 2)] {
        p.allocate(
            c,
            json!({
                root.to_string(): {"resources": {"VCPU": vcpu, "MEMORY_MB": 1024, "DISK_GB": 1}},
                bw_child.to_string(): {"resources": {"NET_BW_EGR_KILOBIT_PER_SEC": 1000}},
                bw_root.to_string(): {"resources": {"NET_BW_EGR_KILOBIT_PER_SEC": 500}},
                ips.to_string(): {"resources": {"IPV4_ADDRESS": 1}}}),
        );
    }
    let before_same = p.allocation(same);
    // Claimed with no project or user named: the same amounts, and 4 VCPU for the other.
    h.post("/v1/claims", &claim_body(same, 2, 1024, false));
    h.post("/v1/claims", &claim_body(other, 4, 1024, false));
    eventually(
        "the other's VCPU written",
        Duration::from_secs(30),
        &mut || part(&p.allocation(other), root)["VCPU"] == 4,
    );
    h.cycles();
    assert_eq!(p.allocation(same), before_same, "same amounts: untouched");
    let a = p.allocation(other);
    assert_eq!(
        providers_of(&a),
        {
            let mut v = vec![
                root.to_string(),
                bw_child.to_string(),
                bw_root.to_string(),
                ips.to_string(),
            ];
            v.sort();
            v
        },
        "{a}"
    );
    assert_eq!(
        part(&a, bw_child)["NET_BW_EGR_KILOBIT_PER_SEC"],
        1000,
        "{a}"
    );
    assert_eq!(part(&a, bw_root)["NET_BW_EGR_KILOBIT_PER_SEC"], 500, "{a}");
    assert_eq!(part(&a, ips)["IPV4_ADDRESS"], 1, "{a}");
    assert_eq!(
        (a["project_id"].as_str(), a["user_id"].as_str()),
        (Some("proj"), Some("user")),
        "{a}"
    );
    assert_eq!(a["consumer_type"], "INSTANCE", "{a}");
    let (_, r) = h.d.call("POST", "/v1/reconcile", None);
    assert_eq!(r["counts"]["different"], 0, "{r}");
    // Released: only this host's part goes.
    let (s, _) = h.d.call("DELETE", &format!("/v1/claims/{other}"), None);
    assert_eq!(s, 200);
    eventually(
        "the compute node's part removed",
        Duration::from_secs(30),
        &mut || {
            p.allocation(other)["allocations"]
                .get(root.to_string())
                .is_none()
        },
    );
    let a = p.allocation(other);
    assert_eq!(providers_of(&a).len(), 3, "{a}");
    assert_eq!(
        part(&a, bw_child)["NET_BW_EGR_KILOBIT_PER_SEC"],
        1000,
        "{a}"
    );
    assert_eq!(a["project_id"], "proj", "{a}");
}

/// The body of a move of `instance` from cmp1 to `dest`, recorded on either side.
fn move_body(instance: Uuid, migration: Uuid, id: i64, dest: &str, kind: &str) -> Value {
    let (vm, task) = if kind == "live-migration" {
        ("active", "migrating")
    } else {
        ("active", "resize_prep")
    };
    let new = if kind == "resize" { 4 } else { 2 };
    json!({
        "instance": {"uuid": instance, "host": "cmp1", "node": "cmp1", "vm_state": vm,
                     "task_state": task, "project_id": "p1", "user_id": "u1"},
        "request_spec": request_spec(&instance.to_string(), if new == 4 { 2 } else { 1 }, new, 1024, 1, None),
        "current": {"request_spec": request_spec(&instance.to_string(), 1, 2, 1024, 1, None)},
        "move_type": kind,
        "migration_id": id,
        "migration_uuid": migration,
        "source_compute": "cmp1", "source_node": "cmp1",
        "dest_compute": dest, "dest_node": dest,
    })
}

/// Each consumer's generation: equal across refreshes when nobody writes.
fn generations(p: &P, consumers: &[Uuid]) -> Vec<Value> {
    consumers
        .iter()
        .map(|c| p.allocation(c)["consumer_generation"].clone())
        .collect()
}

#[test]
fn a_move_between_two_rtrack_hosts_puts_each_side_under_its_consumer() {
    let Some(srv) = server("safety-move") else {
        return;
    };
    let p = P::new(&srv);
    let mut a = host(&srv, "cmp1", "");
    let mut b = host(&srv, "cmp2", "");
    a.registered(&p);
    b.registered(&p);
    for (kind, finish) in [("migration", "confirm"), ("live-migration", "revert")] {
        let instance = Uuid::new_v4();
        let migration = Uuid::new_v4();
        let id = if kind == "migration" { 7 } else { 8 };
        a.post("/v1/claims", &claim_body(instance, 2, 1024, true));
        eventually("the claim written", Duration::from_secs(30), &mut || {
            part(&p.allocation(instance), &a.node)["VCPU"] == 2
        });
        // The destination claims, the source records the move.
        b.post(
            "/v1/migrations",
            &move_body(instance, migration, id, "cmp2", kind),
        );
        a.post(
            "/v1/migrations",
            &move_body(instance, migration, id, "cmp2", kind),
        );
        eventually(
            "each side under its consumer",
            Duration::from_secs(30),
            &mut || {
                providers_of(&p.allocation(instance)) == vec![b.node.clone()]
                    && providers_of(&p.allocation(migration)) == vec![a.node.clone()]
            },
        );
        let m = p.allocation(migration);
        assert_eq!(m["consumer_type"], "MIGRATION", "{m}");
        assert_eq!(m["project_id"], "p1", "{m}");
        // Stable: no rewrite at later refreshes, nor after either side restarts.
        let g = generations(&p, &[instance, migration]);
        a.cycles();
        assert_eq!(
            generations(&p, &[instance, migration]),
            g,
            "{kind}: no flip"
        );
        a.restart(true);
        b.restart(false);
        a.cycles();
        assert_eq!(
            generations(&p, &[instance, migration]),
            g,
            "{kind}: after restarts"
        );
        assert_eq!(providers_of(&p.allocation(instance)), vec![b.node.clone()]);
        match finish {
            "confirm" => {
                // finish_resize: the instance is on cmp2 now; both sides confirm.
                let up = json!({"vm_state": "resized", "task_state": "", "host": "cmp2", "node": "cmp2"});
                a.post(&format!("/v1/instances/{instance}/state"), &up);
                b.post(&format!("/v1/instances/{instance}/state"), &up);
                a.post(&format!("/v1/migrations/{id}/confirm"), &json!({}));
                b.post(&format!("/v1/migrations/{id}/confirm"), &json!({}));
                eventually(
                    "the migration's consumer gone",
                    Duration::from_secs(30),
                    &mut || providers_of(&p.allocation(migration)).is_empty(),
                );
                a.cycles();
                assert_eq!(providers_of(&p.allocation(instance)), vec![b.node.clone()]);
            }
            _ => {
                b.post(&format!("/v1/migrations/{id}/revert"), &json!({}));
                a.post(&format!("/v1/migrations/{id}/revert"), &json!({}));
                eventually("back on the source", Duration::from_secs(30), &mut || {
                    providers_of(&p.allocation(instance)) == vec![a.node.clone()]
                        && providers_of(&p.allocation(migration)).is_empty()
                });
                a.cycles();
                assert_eq!(providers_of(&p.allocation(instance)), vec![a.node.clone()]);
            }
        }
    }
}

#[test]
fn a_same_host_resize_holds_the_old_flavor_under_the_migration() {
    let Some(srv) = server("safety-resize") else {
        return;
    };
    let p = P::new(&srv);
    let mut h = host(&srv, "cmp1", "");
    h.registered(&p);
    let instance = Uuid::new_v4();
    let migration = Uuid::new_v4();
    h.post("/v1/claims", &claim_body(instance, 2, 1024, true));
    h.post(
        "/v1/migrations",
        &move_body(instance, migration, 9, "cmp1", "resize"),
    );
    eventually(
        "old under the migration, new under the instance",
        Duration::from_secs(30),
        &mut || {
            part(&p.allocation(instance), &h.node)["VCPU"] == 4
                && part(&p.allocation(migration), &h.node)["VCPU"] == 2
        },
    );
    let g = generations(&p, &[instance, migration]);
    h.restart(true);
    h.cycles();
    assert_eq!(generations(&p, &[instance, migration]), g);
    h.post("/v1/migrations/9/confirm", &json!({}));
    eventually(
        "the migration's consumer gone",
        Duration::from_secs(30),
        &mut || providers_of(&p.allocation(migration)).is_empty(),
    );
    assert_eq!(part(&p.allocation(instance), &h.node)["VCPU"], 4);
}

#[test]
fn the_sharing_providers_disk_part_stays_with_the_claim() {
    let Some(srv) = server("safety-sharing") else {
        return;
    };
    let p = P::new(&srv);
    let shared = Uuid::new_v4();
    let h = host(
        &srv,
        "cmp1",
        &format!("resources.shared_storage_provider = \"{shared}\"\n"),
    );
    eventually("the sharing provider", Duration::from_secs(30), &mut || {
        p.status(
            reqwest::Method::GET,
            &format!("/resource_providers/{shared}/inventories"),
            None,
        )
        .1["inventories"]["DISK_GB"]
            .is_object()
    });
    h.registered(&p);
    let c = Uuid::new_v4();
    p.allocate(
        c,
        json!({&h.node: {"resources": {"VCPU": 2, "MEMORY_MB": 1024}},
               shared.to_string(): {"resources": {"DISK_GB": 1}}}),
    );
    let before = p.allocation(c);
    h.post("/v1/claims", &claim_body(c, 2, 1024, true));
    h.cycles();
    assert_eq!(
        p.allocation(c),
        before,
        "the claim holds what the scheduler allocated"
    );
    let (s, _) = h.d.call("DELETE", &format!("/v1/claims/{c}"), None);
    assert_eq!(s, 200);
    // Released: this host's part goes; the sharing provider's DISK_GB is the scheduler's (a
    // claim on shared storage does not count disk) and stays for Nova to remove.
    eventually("released", Duration::from_secs(30), &mut || {
        providers_of(&p.allocation(c)) == vec![shared.to_string()]
    });
    assert_eq!(part(&p.allocation(c), shared)["DISK_GB"], 1);
}

#[test]
fn a_release_while_placement_is_down_is_done_when_it_answers_and_nothing_else() {
    let Some(srv) = server("safety-down") else {
        return;
    };
    let p = P::new(&srv);
    let mut h = host(&srv, "cmp1", "");
    h.registered(&p);
    let (released, kept, build) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    h.post("/v1/claims", &claim_body(released, 1, 512, true));
    h.post("/v1/claims", &claim_body(kept, 1, 512, true));
    p.allocate(
        build,
        json!({&h.node: {"resources": {"VCPU": 1, "MEMORY_MB": 256}}}),
    );
    eventually("written", Duration::from_secs(30), &mut || {
        part(&p.allocation(released), &h.node)["VCPU"] == 1
            && part(&p.allocation(kept), &h.node)["VCPU"] == 1
    });
    let before_kept = p.allocation(kept);
    let before_build = p.allocation(build);
    assert_eq!(part(&before_build, &h.node)["VCPU"], 1, "{before_build}");
    srv.stop();
    let (s, _) = h.d.call("DELETE", &format!("/v1/claims/{released}"), None);
    assert_eq!(s, 200);
    std::thread::sleep(Duration::from_secs(2));
    // rtrackd restarts while Placement is still down: the release is on disk.
    h.restart(true);
    srv.start_again(false);
    eventually(
        "the release done once Placement answers",
        Duration::from_secs(60),
        &mut || providers_of(&p.allocation(released)).is_empty(),
    );
    h.cycles();
    assert_eq!(p.allocation(kept), before_kept);
    assert_eq!(p.allocation(build), before_build);
    assert_eq!(part(&p.allocation(build), &h.node)["VCPU"], 1);
}
