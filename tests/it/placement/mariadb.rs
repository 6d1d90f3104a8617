//! Placement as production runs it: MariaDB behind 4 gunicorn workers (`start.sh --db
//! mariadb`), where two writers can race on one provider's generation from different workers. A
//! host's reports race an operator's trait changes and the scheduler's allocations on the same
//! provider tree; nothing may be lost, and every 409 must be retried with a fresh generation.
//!
//! Placement 16.0.0 answers some of these races with 500, not 409: `PUT
//! /resource_providers/{uuid}/traits` does not catch the ResourceProviderConcurrentUpdateDetected
//! that `set_traits` raises when another worker bumped the generation between its check and its
//! update (placement/handlers/trait.py; the DELETE handler catches it), nor a MariaDB deadlock
//! (1213, "Deadlock found when trying to get lock") on its generation UPDATE. One worker on
//! SQLite never shows either. The writers here retry it as they retry a 409, and the test asserts that
//! every 5xx is that one.

use super::*;

use crate::support::placement::{mariadb_server, Raw};

const ROUNDS: usize = 12;

/// The operator adds `add` to the compute node's traits: read, PUT with that generation, again
/// on 409 (what `openstack resource provider trait set` after a fresh GET does) and on
/// Placement's 500 for the same race. Returns its (409s, 500s).
async fn operator_adds_trait(raw: &Raw, node: Uuid, add: &str) -> (usize, usize) {
    let (mut conflicts, mut raced) = (0, 0);
    loop {
        let cur = raw.get(&format!("/resource_providers/{node}/traits")).await;
        let mut traits: BTreeSet<String> = serde_json::from_value(cur["traits"].clone()).unwrap();
        traits.insert(add.to_string());
        let (s, v) = raw
            .put(
                &format!("/resource_providers/{node}/traits"),
                json!({"resource_provider_generation": cur["resource_provider_generation"], "traits": traits}),
            )
            .await;
        match s {
            200 => return (conflicts, raced),
            409 => conflicts += 1,
            500 if is_placement_race(&v.to_string()) => raced += 1,
            _ => panic!("operator's PUT traits: {s} {v}"),
        }
    }
}

/// The scheduler claims VCPU and MEMORY_MB on the compute node for a new consumer (consumer
/// generation null, as Nova's scheduler writes it), again on 409. Returns its 409s.
async fn scheduler_allocates(raw: &Raw, node: Uuid, consumer: Uuid) -> usize {
    let mut conflicts = 0;
    loop {
        let (s, v) = raw
            .put(
                &format!("/allocations/{consumer}"),
                json!({"allocations": {node.to_string(): {"resources": {"VCPU": 1, "MEMORY_MB": 256}}},
                    "project_id": "p", "user_id": "u", "consumer_generation": null,
                    "consumer_type": "INSTANCE"}),
            )
            .await;
        match s {
            204 => return conflicts,
            409 => conflicts += 1,
            _ => panic!("scheduler's PUT allocations: {s} {v}"),
        }
    }
}

/// Placement 16.0.0's 500s for a lost race on PUT traits: the generation moved under it, or
/// InnoDB chose it as a deadlock victim (no retry in that handler).
fn is_placement_race(text: &str) -> bool {
    text.contains("concurrently updated") || text.contains("Deadlock found")
}

/// Placement's access log: (method, path, status) per request, in order.
fn access_log(srv: &Server) -> Vec<(String, String, u16)> {
    std::fs::read_to_string(srv.dir.join("logs/access.log"))
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (_, rest) = l.split_once(']')?;
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some((f[0].to_string(), f[1].to_string(), f[2].parse().ok()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_race_operator_traits_and_scheduler_allocations_without_loss() {
    let Some(srv) = mariadb_server("mariadb-race") else {
        return;
    };
    let t0 = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let mut inv = probe(&SyntheticHost::small(), &tmp.path().join("host"));
    let cfg = config(&srv.url, PCI);
    let node = Uuid::new_v4();
    let settings = rtrack::upstream::validate_placement(&cfg.placement)
        .unwrap()
        .unwrap();
    // Enough conflict tries that a report never gives up under this race: every report must
    // end in step.
    let mut r = Reporter::new(
        HttpPlacement::new(&settings).unwrap(),
        &settings,
        ReporterOptions {
            backoff_base: Duration::from_millis(50),
            backoff_cap: Duration::from_millis(200),
            conflict_tries: 50,
        },
    );
    let raw = srv.client();
    let d = DesiredState::build(&view(&inv, &cfg), &cfg, node, "cmp-race", false, &[]).unwrap();
    r.report(&d).await.unwrap();
    let base_mb = inv.memory.total_mb;

    let (mut rtrack_409, mut operator_409, mut scheduler_409) = (0usize, 0usize, 0usize);
    let (mut operator_500, mut rtrack_failed) = (0usize, 0usize);
    let mut op_traits = BTreeSet::new();
    let mut consumers = Vec::new();
    let mut last = d;
    for round in 0..ROUNDS {
        // The operator writes first: rtrack's cached generation of the compute node is stale
        // at every round, so its write gets at least one 409 whatever the timing.
        let first = format!("CUSTOM_OPERATOR_A{round}");
        let second = format!("CUSTOM_OPERATOR_B{round}");
        for t in [&first, &second] {
            let (s, _) = raw.put(&format!("/traits/{t}"), json!(null)).await;
            assert!(s == 201 || s == 204, "PUT /traits/{t}: {s}");
        }
        let (c, e) = operator_adds_trait(&raw, node, &first).await;
        operator_409 += c;
        operator_500 += e;
        // Then, at once: rtrack's report (memory and the disabled trait change: inventory and
        // traits writes on the compute node), the operator again, and two allocations.
        inv.memory.total_mb = base_mb - 1024 * (round as u64 % 3);
        let d = DesiredState::build(
            &view(&inv, &cfg),
            &cfg,
            node,
            "cmp-race",
            round % 2 == 0,
            &[],
        )
        .unwrap();
        let (c1, c2) = (Uuid::new_v4(), Uuid::new_v4());
        // rtrack's report, again (as the daemon's next cycle would) when Placement failed it.
        let report = async {
            let mut failed = 0;
            loop {
                match r.report(&d).await {
                    Ok(o) if o.backing_off.is_none() => return (o, failed),
                    Ok(o) => {
                        failed += 1;
                        tokio::time::sleep(o.backing_off.unwrap_or_default()).await
                    }
                    Err(e) => {
                        failed += 1;
                        assert!(
                            failed < 20,
                            "round {round}: rtrack's report keeps failing: {e}"
                        );
                        tokio::time::sleep(r.backoff_remaining()).await
                    }
                }
            }
        };
        let ((o, failed), op, s1, s2) = tokio::join!(
            report,
            operator_adds_trait(&raw, node, &second),
            scheduler_allocates(&raw, node, c1),
            scheduler_allocates(&raw, node, c2),
        );
        rtrack_failed += failed;
        assert!(
            o.conflicts >= 1 || failed > 0,
            "round {round}: rtrack wrote with a stale generation yet saw no 409: {}",
            o.requests
        );
        rtrack_409 += o.conflicts as usize;
        operator_409 += op.0;
        operator_500 += op.1;
        scheduler_409 += s1 + s2;
        op_traits.extend([first, second]);
        consumers.extend([c1, c2]);
        last = d;
    }
    // The reporter's view after the race: in step (a report with a fresh read changes nothing
    // more than a retry would).
    r.invalidate();
    let o = r.report(&last).await.unwrap();
    assert_eq!(o.conflicts, 0, "{}", o.requests);

    // rtrack's inventory and traits are in place (its owned traits exactly as desired).
    assert_placement_matches(&raw, &last).await;
    let inv_now = raw
        .get(&format!("/resource_providers/{node}/inventories"))
        .await;
    assert_eq!(
        inv_now["inventories"]["MEMORY_MB"]["total"],
        json!(
            last.providers
                .iter()
                .find(|p| p.uuid == node)
                .unwrap()
                .inventories["MEMORY_MB"]
                .total
        )
    );
    // The operator's traits (not rtrack's) are all kept: docs/upstream.md, "any other trait
    // there ... is kept".
    let traits: BTreeSet<String> = serde_json::from_value(
        raw.get(&format!("/resource_providers/{node}/traits")).await["traits"].clone(),
    )
    .unwrap();
    let lost: Vec<_> = op_traits.difference(&traits).collect();
    assert!(lost.is_empty(), "operator's traits lost: {lost:?}");
    assert_eq!(
        traits.contains("COMPUTE_STATUS_DISABLED"),
        (ROUNDS - 1) % 2 == 0
    );
    // The scheduler's allocations are intact.
    for c in &consumers {
        let a = raw.get(&format!("/allocations/{c}")).await;
        assert_eq!(
            a["allocations"][node.to_string()]["resources"],
            json!({"VCPU": 1, "MEMORY_MB": 256}),
            "allocations of {c}"
        );
    }
    let usages = raw.get(&format!("/resource_providers/{node}/usages")).await;
    assert_eq!(usages["usages"]["VCPU"], json!(consumers.len()));

    // Every 409 Placement sent is one the writers counted and retried: the operator's and the
    // scheduler's (counted here), the rest rtrack's (its outcomes count those of the reports
    // that succeeded; a report Placement failed with 500 counted its 409s nowhere). Each 409 or
    // 5xx on a provider write was followed by a read of that provider and a successful write to
    // the same path (a retry with the fresh generation; a stale one would only get 409 again).
    // The only 5xx are Placement's unhandled races on PUT traits.
    let log = access_log(&srv);
    let total_409 = log.iter().filter(|e| e.2 == 409).count();
    let others = operator_409 + scheduler_409;
    if rtrack_failed == 0 {
        assert_eq!(
            total_409,
            rtrack_409 + others,
            "409s in the access log against the writers' counts (rtrack {rtrack_409}, operator {operator_409}, scheduler {scheduler_409})"
        );
    } else {
        assert!(total_409 >= rtrack_409 + others);
    }
    let errors: Vec<_> = log.iter().filter(|e| e.2 >= 500).collect();
    for (m, path, _) in &errors {
        assert!(
            m == "PUT" && path.ends_with("/traits"),
            "a 5xx other than the PUT traits race: {errors:?}"
        );
    }
    let raced_logged = std::fs::read_to_string(srv.dir.join("logs/placement.log"))
        .unwrap()
        .lines()
        .filter(|l| l.contains("Placement API unexpected error") && is_placement_race(l))
        .count();
    assert_eq!(
        raced_logged,
        errors.len(),
        "every 5xx is Placement's unhandled race on PUT traits: {errors:?}"
    );
    assert!(operator_500 <= errors.len());
    for (i, (m, path, s)) in log.iter().enumerate() {
        if !(*s == 409 || *s >= 500) || m != "PUT" || !path.starts_with("/resource_providers/") {
            continue;
        }
        let provider = path.split('/').take(3).collect::<Vec<_>>().join("/");
        let rest = &log[i + 1..];
        let reread = rest
            .iter()
            .position(|(m2, p2, s2)| m2 == "GET" && p2.starts_with(&provider) && *s2 == 200)
            .or_else(|| {
                rest.iter().position(|(m2, p2, _)| {
                    m2 == "GET" && p2.starts_with("/resource_providers") && p2.contains("in_tree")
                })
            });
        // Another writer's success may be logged between the 409 and the re-read: look for a
        // successful write to the same path after the re-read.
        let retried = reread.and_then(|a| {
            rest[a..]
                .iter()
                .position(|(m2, p2, s2)| m2 == "PUT" && p2 == path && (200..300).contains(s2))
        });
        assert!(
            reread.is_some() && retried.is_some(),
            "{s} on PUT {path} (log line {i}) not followed by a re-read and a successful retry"
        );
    }
    eprintln!(
        "MEASURE MariaDB, 4 workers, {ROUNDS} rounds: 409s {total_409} (rtrack {} , operator {operator_409}, scheduler {scheduler_409}); 500s on PUT traits {} (operator {operator_500}, rtrack reports failed {rtrack_failed}); {} requests; {:.1} s",
        total_409 - others,
        errors.len(),
        log.len(),
        t0.elapsed().as_secs_f64()
    );
}
