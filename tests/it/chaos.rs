//! Chaos: clients claim, retry, abort, move, revert and update states against the real
//! `rtrackd` while it is SIGKILLed at a random moment; after each restart nothing any caller
//! was told of is lost, nothing is held that every caller was told is gone, usage is the sum of
//! what is held, and the host is never over capacity. Operations in flight at the kill may land
//! either way: they are counted apart and retried.
//!
//! `RTRACK_CHAOS_ROUNDS` (default 3) and `RTRACK_CHAOS_SEED` set the length and the seed; a
//! longer run is `RTRACK_CHAOS_ROUNDS=40 cargo test --release --test it chaos:: -- --nocapture`.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{base_config, claim, request_spec, uuid, Daemon};
use rtrack_fixtures::real::scratch_dir;
use rtrack_fixtures::synthetic::SyntheticHost;
use serde_json::{json, Value};

const RTRACKD: &str = env!("CARGO_BIN_EXE_rtrackd");
const CLIENTS: u64 = 4;
const INSTANCES_PER_CLIENT: u64 = 6;

/// What a client knows of one instance's claim here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    /// Told it is held (an instance claim, or a move claim with this migration id).
    Held(Option<i64>),
    /// Told it is gone (never claimed, aborted, reverted, or refused).
    Gone,
    /// A request was in flight when the daemon died: either may be true.
    InFlight,
}

fn move_body(uuid: &str, migration_id: i64) -> Value {
    json!({
        "instance": {"host": "src1", "node": "src1", "vm_state": "active", "task_state": "resize_prep"},
        "request_spec": request_spec(uuid, 2, 2, 256, 1, None),
        "current": {"request_spec": request_spec(uuid, 1, 1, 128, 1, None)},
        "move_type": "resize",
        "migration_id": migration_id,
    })
}

/// One client: random operations on its own instances until the daemon goes away.
fn client_loop(
    socket: PathBuf,
    client_no: u64,
    known: &mut BTreeMap<String, Known>,
    seed: u64,
    stop: Arc<AtomicBool>,
    next_migration: &mut i64,
) -> u64 {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut ops = 0;
    while !stop.load(Ordering::SeqCst) {
        let n = client_no * 1_000 + rng.u64(0..INSTANCES_PER_CLIENT);
        let id = uuid(n);
        let state = known.get(&id).copied().unwrap_or(Known::Gone);
        // What to do, and what the instance is known to be if it is answered 2xx / refused.
        let (method, path, body, on_ok, on_refused): (&str, String, Option<Value>, Known, Known) =
            match state {
                Known::Gone | Known::InFlight if rng.bool() => (
                    "POST",
                    "/v1/claims".into(),
                    Some(claim(&id, 2, 256, 1, None)),
                    Known::Held(None),
                    Known::Gone,
                ),
                Known::Gone | Known::InFlight => {
                    let mid = *next_migration;
                    *next_migration += 1;
                    (
                        "POST",
                        "/v1/migrations".into(),
                        Some(move_body(&id, mid)),
                        Known::Held(Some(mid)),
                        Known::Gone,
                    )
                }
                Known::Held(None) => match rng.u8(0..3) {
                    0 => (
                        "DELETE",
                        format!("/v1/claims/{id}"),
                        None,
                        Known::Gone,
                        state,
                    ),
                    1 => (
                        "POST",
                        format!("/v1/instances/{id}/state"),
                        Some(json!({"vm_state": "active", "task_state": ""})),
                        state,
                        state,
                    ),
                    // A retry of the claim: idempotent.
                    _ => (
                        "POST",
                        "/v1/claims".into(),
                        Some(claim(&id, 2, 256, 1, None)),
                        state,
                        state,
                    ),
                },
                Known::Held(Some(mid)) => match rng.u8(0..3) {
                    0 => (
                        "DELETE",
                        format!("/v1/claims/{id}"),
                        None,
                        Known::Gone,
                        state,
                    ),
                    1 => (
                        "POST",
                        format!("/v1/migrations/{mid}/revert"),
                        None,
                        Known::Gone,
                        state,
                    ),
                    _ => (
                        "POST",
                        format!("/v1/instances/{id}/state"),
                        Some(json!({"task_state": "resize_migrating"})),
                        state,
                        state,
                    ),
                },
            };
        // A request in flight when the daemon dies leaves the instance unknown.
        let before = known.insert(id.clone(), Known::InFlight);
        match support::try_call(&socket, method, &path, body.as_ref()) {
            None => return ops,
            Some((s, _)) if (200..300).contains(&s) => {
                known.insert(id, on_ok);
            }
            Some((409 | 404, _)) if before != Some(Known::InFlight) => {
                known.insert(id, on_refused);
            }
            Some((409 | 404, _)) => {
                // Refused after an unknown outcome: the truth is read after the next restart.
                known.insert(id, Known::InFlight);
            }
            Some((s, v)) => panic!("{method} {path}: unexpected {s} {v}"),
        }
        ops += 1;
    }
    ops
}

fn held_claims(d: &Daemon) -> BTreeMap<String, Value> {
    let (s, v) = d.call("GET", "/v1/claims", None);
    assert_eq!(s, 200, "{v}");
    v.as_array()
        .unwrap()
        .iter()
        .map(|c| (c["instance_uuid"].as_str().unwrap().to_string(), c.clone()))
        .collect()
}

fn check_usage(d: &Daemon, claims: &BTreeMap<String, Value>) {
    let (s, u) = d.call("GET", "/v1/usage", None);
    assert_eq!(s, 200, "{u}");
    for class in ["VCPU", "MEMORY_MB", "DISK_GB"] {
        let r = &u["resources"][class];
        let used = r["used"].as_i64().unwrap();
        let held: i64 = claims
            .values()
            .map(|c| c["resources"][class].as_i64().unwrap_or(0))
            .sum();
        assert_eq!(
            used, held,
            "{class}: usage is not the sum of what is held: {u}"
        );
        assert!(
            used <= r["capacity"].as_i64().unwrap(),
            "{class} over capacity: {u}"
        );
    }
}

#[test]
fn sigkill_at_random_moments_loses_nothing_acknowledged_and_keeps_nothing_unacknowledged() {
    let rounds: u64 = std::env::var("RTRACK_CHAOS_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let seed: u64 = std::env::var("RTRACK_CHAOS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20261125);
    let tmp = scratch_dir();
    let root = tmp.path().join("host");
    SyntheticHost::small().write(&root);
    let dir = tmp.path().join("d");
    let config = base_config(&root, &dir);
    let mut d = Daemon::start_with(Path::new(RTRACKD), &dir, &config, &[]);
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut known: Vec<BTreeMap<String, Known>> = vec![BTreeMap::new(); CLIENTS as usize];
    let mut next_migration: Vec<i64> = (0..CLIENTS as i64).map(|c| 1 + c * 1_000_000).collect();
    let (mut total_ops, mut in_flight_total, mut landed) = (0u64, 0u64, 0u64);
    for round in 0..rounds {
        let stop = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let socket = d.socket.clone();
                let mut k = std::mem::take(&mut known[c as usize]);
                let mut next = next_migration[c as usize];
                let stop = stop.clone();
                let s = seed ^ (round << 8) ^ c;
                std::thread::spawn(move || {
                    let ops = client_loop(socket, c + 1, &mut k, s, stop, &mut next);
                    (k, next, ops)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(rng.u64(100..1_200)));
        d.kill();
        stop.store(true, Ordering::SeqCst);
        for (c, h) in handles.into_iter().enumerate() {
            let (k, next, ops) = h.join().unwrap();
            known[c] = k;
            next_migration[c] = next;
            total_ops += ops;
        }
        let start = Instant::now();
        d.spawn();
        d.wait_ready();
        let held = held_claims(&d);
        for k in known.iter_mut() {
            for (id, state) in k.iter_mut() {
                let present = held.get(id);
                match *state {
                    Known::Held(mid) => {
                        let c = present.unwrap_or_else(|| {
                            panic!("round {round}: acknowledged claim of {id} lost\n{}", d.log_text())
                        });
                        assert_eq!(c["migration_id"].as_i64(), mid, "{c}");
                    }
                    Known::Gone => assert!(
                        present.is_none(),
                        "round {round}: {id} is held but every caller was told it is not: {present:?}"
                    ),
                    Known::InFlight => {
                        in_flight_total += 1;
                        landed += u64::from(present.is_some());
                        *state = match present {
                            Some(c) => Known::Held(c["migration_id"].as_i64()),
                            None => Known::Gone,
                        };
                    }
                }
            }
        }
        check_usage(&d, &held);
        eprintln!(
            "round {round}: {} claims held after restart ({} ms)",
            held.len(),
            start.elapsed().as_millis()
        );
    }
    eprintln!(
        "chaos: {rounds} rounds, {total_ops} answered operations, {in_flight_total} in flight at a kill ({landed} of them landed), seed {seed}"
    );
    assert!(total_ops > 0, "no operation was answered");
}
