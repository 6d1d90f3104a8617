//! Chaos against a real Placement, with `[placement] report_allocations = true`: the scheduler
//! (this test) writes each build's allocation before its claim arrives, some with a part on a
//! Neutron bandwidth provider, some never followed by a claim; a client claims, aborts, resizes
//! on the same host, confirms and reverts; rtrackd is SIGKILLed at a random moment and
//! restarted. After each round, once rtrackd has caught up: every consumer no one released
//! still has its whole allocation (the claim's part on this host, every other part) with the
//! scheduler's project and user, and every released one holds nothing on this host's tree.
//!
//! `RTRACK_CHAOS_ROUNDS` (default 3) and `RTRACK_CHAOS_SEED` set the length and the seed.
//! `RTRACK_SKIP_PLACEMENT=1` skips it with the other Placement tests.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::placement::{server, Raw};
use crate::support::{poll, request_spec, Daemon};
use rtrack_fixtures::synthetic::SyntheticHost;
use serde_json::{json, Value};
use uuid::Uuid;

const RTRACKD: &str = env!("CARGO_BIN_EXE_rtrackd");
const BW: &str = "NET_BW_EGR_KILOBIT_PER_SEC";

/// What the test knows of one instance.
#[derive(Debug, Clone, PartialEq)]
enum Known {
    /// The scheduler allocated; no claim was ever sent.
    Scheduled,
    /// Told it is held; with the migration of a same-host resize in progress.
    Held(Option<(i64, Uuid)>),
    /// Told it was aborted: nothing of it may stay on this host's tree.
    Released,
    /// A request was in flight when rtrackd died: read back after the restart.
    InFlight,
}

struct World {
    known: BTreeMap<Uuid, Known>,
    /// The part the scheduler put on the bandwidth provider, if any, per instance.
    foreign: BTreeMap<Uuid, Option<u64>>,
    /// Migrations told finished (confirmed or reverted): their consumer holds nothing here.
    finished: Vec<Uuid>,
    next: u64,
    next_migration: i64,
}

fn spec(instance: Uuid, flavor: i64, vcpus: i64, memory: i64) -> Value {
    request_spec(&instance.to_string(), flavor, vcpus, memory, 0, None)
}

/// Builds in all: room for every one of them in Placement.
const MAX_BUILDS: u64 = 150;

fn resize_body(instance: Uuid, id: i64, migration: Uuid) -> Value {
    json!({
        "instance": {"host": "cmp1", "node": "cmp1", "vm_state": "active", "task_state": "resize_prep"},
        "request_spec": spec(instance, 2, 2, 64),
        "current": {"request_spec": spec(instance, 1, 1, 64)},
        "move_type": "resize", "migration_id": id, "migration_uuid": migration,
    })
}

/// One step of the client; `false` when rtrackd went away.
fn step(
    socket: &Path,
    placement: &dyn Fn(Uuid, Option<u64>),
    w: &mut World,
    rng: &mut fastrand::Rng,
) -> bool {
    let held: Vec<(Uuid, Option<(i64, Uuid)>)> = w
        .known
        .iter()
        .filter_map(|(u, k)| match k {
            Known::Held(m) => Some((*u, *m)),
            _ => None,
        })
        .collect();
    let may_build = w.next < MAX_BUILDS;
    if held.is_empty() && !may_build {
        std::thread::sleep(Duration::from_millis(10));
        return support::try_call(socket, "GET", "/healthz", None).is_some();
    }
    if may_build && (held.len() < 6 || rng.u8(0..3) == 0) {
        // A build: the scheduler's allocation first, then (mostly) the claim.
        w.next += 1;
        let instance = Uuid::from_u128(0xc0ffee << 64 | w.next as u128);
        let bw = rng.bool().then(|| rng.u64(1..100) * 10);
        placement(instance, bw);
        w.foreign.insert(instance, bw);
        w.known.insert(instance, Known::Scheduled);
        if rng.u8(0..5) == 0 {
            return true; // its claim never comes
        }
        w.known.insert(instance, Known::InFlight);
        let body = json!({"request_spec": spec(instance, 1, 1, 64)});
        return match support::try_call(socket, "POST", "/v1/claims", Some(&body)) {
            None => false,
            Some((s, v)) => {
                assert!((200..300).contains(&s), "claim: {s} {v}");
                w.known.insert(instance, Known::Held(None));
                true
            }
        };
    }
    let (instance, moving) = held[rng.usize(0..held.len())];
    w.known.insert(instance, Known::InFlight);
    let (method, path, body, after) = match moving {
        None if rng.bool() => (
            "DELETE",
            format!("/v1/claims/{instance}"),
            None,
            Known::Released,
        ),
        None => {
            w.next_migration += 1;
            let id = w.next_migration;
            let m = Uuid::from_u128(0xfeed << 64 | id as u128);
            (
                "POST",
                "/v1/migrations".to_string(),
                Some(resize_body(instance, id, m)),
                Known::Held(Some((id, m))),
            )
        }
        Some((id, _)) => {
            let verb = if rng.bool() { "confirm" } else { "revert" };
            (
                "POST",
                format!("/v1/migrations/{id}/{verb}"),
                None,
                Known::Held(None),
            )
        }
    };
    match support::try_call(socket, method, &path, body.as_ref()) {
        None => false,
        Some((s, v)) => {
            assert!((200..300).contains(&s), "{method} {path}: {s} {v}");
            if let Some((_, m)) = moving {
                w.finished.push(m);
            }
            w.known.insert(instance, after);
            true
        }
    }
}

fn allocation(rt: &tokio::runtime::Runtime, raw: &Raw, c: Uuid) -> Value {
    rt.block_on(raw.get(&format!("/allocations/{c}")))
}

#[test]
fn sigkill_at_random_moments_never_loses_a_consumers_allocation_nor_keeps_a_released_one() {
    let Some(srv) = server("chaos-placement") else {
        return;
    };
    let rounds: u32 = std::env::var("RTRACK_CHAOS_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let seed: u64 = std::env::var("RTRACK_CHAOS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    println!("RTRACK_CHAOS_SEED={seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let raw = srv.client();
    let tmp = rtrack_fixtures::real::scratch_dir();
    let root = tmp.path().join("host");
    SyntheticHost::small().write(&root);
    let dir = tmp.path().join("d");
    let cfg = support::base_config(&root, &dir).replace(
        "cpu_allocation_ratio = 4.0",
        "cpu_allocation_ratio = 16.0",
    ) + &format!(
        "\n[placement]\nendpoint = \"{}\"\nreport_interval_s = 1\nrefresh_interval_s = 1\nreport_allocations = true\n",
        srv.url
    );
    let mut d = Daemon::start_with(Path::new(RTRACKD), &dir, &cfg, &[]);
    let node: Uuid = std::fs::read_to_string(dir.join("state/compute_id"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let started = Instant::now();
    while rt
        .block_on(raw.send(
            reqwest::Method::GET,
            &format!("/resource_providers/{node}/inventories"),
            None,
        ))
        .1["inventories"]["VCPU"]
        .is_null()
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never registered"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A Neutron agent's bandwidth provider below the compute node.
    let bw_rp = Uuid::new_v4();
    let (s, v) = rt.block_on(raw.send(
        reqwest::Method::POST,
        "/resource_providers",
        Some(json!({"uuid": bw_rp, "name": "cmp1:ovs-agent:br-int", "parent_provider_uuid": node})),
    ));
    assert!((200..300).contains(&s), "{v}");
    let (s, v) = rt.block_on(raw.put(
        &format!("/resource_providers/{bw_rp}/inventories"),
        json!({"resource_provider_generation": 0, "inventories": {BW: {"total": 1_000_000}}}),
    ));
    assert!((200..300).contains(&s), "{v}");
    let placement = |c: Uuid, bw: Option<u64>| {
        let mut allocations =
            json!({node.to_string(): {"resources": {"VCPU": 1, "MEMORY_MB": 64}}});
        if let Some(n) = bw {
            allocations[bw_rp.to_string()] = json!({"resources": {BW: n}});
        }
        let (s, v) = rt.block_on(raw.put(
            &format!("/allocations/{c}"),
            json!({
            "allocations": allocations, "project_id": "proj", "user_id": "user",
            "consumer_generation": null, "consumer_type": "INSTANCE"}),
        ));
        assert!(
            (200..300).contains(&s),
            "the scheduler's allocation: {s} {v}"
        );
    };
    let mut w = World {
        known: BTreeMap::new(),
        foreign: BTreeMap::new(),
        finished: Vec::new(),
        next: 0,
        next_migration: 0,
    };
    let mut ops = 0u64;
    for round in 0..rounds {
        // SIGKILL at a random moment while the client works.
        let killed = Arc::new(AtomicBool::new(false));
        let pid = d.pid();
        let after = Duration::from_millis(rng.u64(300..1500));
        let k = killed.clone();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(after);
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            k.store(true, Ordering::SeqCst);
        });
        while step(&d.socket, &placement, &mut w, &mut rng) {
            ops += 1;
            assert!(!killed.load(Ordering::SeqCst) || ops < 100_000);
        }
        killer.join().unwrap();
        d.restart();
        settle(&d, &mut w);
        check(&rt, &raw, &d, node, bw_rp, &w, round);
    }
    println!(
        "MEASURE chaos with Placement: {rounds} rounds, {ops} operations, {} instances",
        w.next
    );
}

/// Learns what happened to the requests in flight at the kill.
fn settle(d: &Daemon, w: &mut World) {
    let (s, claims) = d.call("GET", "/v1/claims", None);
    assert_eq!(s, 200);
    let held: BTreeMap<Uuid, Option<i64>> = claims
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["instance_uuid"].as_str().unwrap().parse().unwrap(),
                c["migration_id"].as_i64(),
            )
        })
        .collect();
    for (u, k) in w.known.iter_mut() {
        if *k == Known::InFlight {
            // Unknown either way: held, or gone (never claimed, or released). Held ones are
            // checked as held; the others only for what never changes (owner, other parts).
            *k = match held.get(u) {
                Some(Some(id)) => {
                    Known::Held(Some((*id, Uuid::from_u128(0xfeed << 64 | *id as u128))))
                }
                Some(None) => Known::Held(None),
                None => Known::InFlight,
            };
        }
    }
}

fn check(
    rt: &tokio::runtime::Runtime,
    raw: &Raw,
    d: &Daemon,
    node: Uuid,
    bw_rp: Uuid,
    w: &World,
    round: u32,
) {
    // Caught up: Placement holds what the claims hold on this host's tree, and the releases are
    // done.
    let caught_up = || {
        let (s, r) = d.call("POST", "/v1/reconcile", None);
        let in_step = s == 200 && r["counts"]["missing"] == 0 && r["counts"]["different"] == 0;
        let gone = |c: &Uuid| {
            allocation(rt, raw, *c)["allocations"]
                .get(node.to_string())
                .is_none()
        };
        let released_gone = w
            .known
            .iter()
            .filter(|(_, k)| **k == Known::Released)
            .all(|(c, _)| gone(c))
            && w.finished.iter().all(gone);
        (in_step && released_gone)
            .then_some(())
            .ok_or_else(|| format!("{r}\n{}", d.log_text()))
    };
    let what = format!("round {round}: caught up");
    poll(
        &what,
        Duration::from_secs(60),
        Duration::from_millis(500),
        caught_up,
    );
    for (c, k) in &w.known {
        let a = allocation(rt, raw, *c);
        let bw = w.foreign.get(c).copied().flatten();
        let what = format!("round {round}: {c} ({k:?}): {a}");
        // Whatever happened, the scheduler's other parts and owner are as it wrote them.
        assert_eq!(
            a["allocations"][bw_rp.to_string()]["resources"][BW].as_u64(),
            bw,
            "{what}"
        );
        if !a["allocations"].as_object().unwrap().is_empty() {
            assert_eq!(
                (a["project_id"].as_str(), a["user_id"].as_str()),
                (Some("proj"), Some("user")),
                "{what}"
            );
        }
        let here = &a["allocations"][node.to_string()]["resources"];
        match k {
            Known::Scheduled => assert_eq!(here["VCPU"], 1, "never claimed, untouched: {what}"),
            Known::Held(None) => assert!(here["VCPU"].as_i64().is_some_and(|v| v >= 1), "{what}"),
            Known::Held(Some((_, m))) => {
                let old = allocation(rt, raw, *m);
                assert_eq!(here["VCPU"], 2, "the new flavor under the instance: {what}");
                assert_eq!(
                    old["allocations"][node.to_string()]["resources"]["VCPU"],
                    1,
                    "the old under the migration: {old}"
                );
            }
            Known::Released => assert!(here.is_null(), "released: {what}"),
            Known::InFlight => {}
        }
    }
}
