//! nova-compute's steady-state reporting, replayed: what its resource tracker and report client
//! send to Placement per `update_available_resource` cycle for a host whose resources did not
//! change (`nova/compute/resource_tracker.py` `_update_available_resource`,
//! `_remove_deleted_instances_allocations`, `_update_to_placement`; `nova/scheduler/client/
//! report.py` `get_provider_tree_and_ensure_root`, `_refresh_associations`,
//! `get_allocations_for_provider_tree`; Nova master, the same in 2025.2).
//!
//! Per cycle: the compute node's allocations twice (one read to remove deleted instances'
//! allocations, one in `get_allocations_for_provider_tree`), each child's allocations, and each
//! consumer's allocations (`GET /allocations/{uuid}`, 1.28). When the association refresh is due
//! (`[compute] resource_provider_association_refresh`, 300 s): the tree (`?in_tree`, 1.14) and
//! each provider's inventories (no microversion), aggregates (1.19) and traits (1.6) as well.
//! Writes happen only when something changed: none here.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;
use uuid::Uuid;

/// A host's tree as nova-compute caches it.
pub struct NovaHost {
    /// The compute node.
    pub node: Uuid,
    /// Its providers, the compute node first.
    pub providers: Vec<Uuid>,
}

async fn get(http: &reqwest::Client, url: &str, path: &str, mv: Option<&str>) -> Value {
    let mut r = http
        .get(format!("{url}{path}"))
        .header("x-auth-token", "admin")
        .header("accept", "application/json");
    if let Some(v) = mv {
        r = r.header("openstack-api-version", format!("placement {v}"));
    }
    // keystoneauth retries a request whose connection failed; so does the replay (a busy
    // server closes idle kept-alive connections under it).
    let req = r.build().unwrap_or_else(|e| panic!("GET {path}: {e}"));
    for _ in 0..3 {
        if let Some(again) = req.try_clone() {
            if let Ok(resp) = http.execute(again).await {
                return resp.json().await.unwrap_or(Value::Null);
            }
        }
    }
    panic!("GET {path}: no answer after 3 tries")
}

/// One host's cycle.
async fn cycle(http: &reqwest::Client, url: &str, h: &NovaHost, refresh: bool) {
    // _remove_deleted_instances_allocations
    get(
        http,
        url,
        &format!("/resource_providers/{}/allocations", h.node),
        None,
    )
    .await;
    if refresh {
        get(
            http,
            url,
            &format!("/resource_providers?in_tree={}", h.node),
            Some("1.14"),
        )
        .await;
        for p in &h.providers {
            get(
                http,
                url,
                &format!("/resource_providers/{p}/inventories"),
                None,
            )
            .await;
            get(
                http,
                url,
                &format!("/resource_providers/{p}/aggregates"),
                Some("1.19"),
            )
            .await;
            get(
                http,
                url,
                &format!("/resource_providers/{p}/traits"),
                Some("1.6"),
            )
            .await;
        }
    }
    // get_allocations_for_provider_tree
    let mut consumers = BTreeSet::new();
    for p in &h.providers {
        let v = get(
            http,
            url,
            &format!("/resource_providers/{p}/allocations"),
            None,
        )
        .await;
        if let Some(m) = v["allocations"].as_object() {
            consumers.extend(m.keys().cloned());
        }
    }
    for c in consumers {
        get(http, url, &format!("/allocations/{c}"), Some("1.28")).await;
    }
}

/// Every host's cycle at once (each host's requests in order, as its report client sends them).
pub async fn steady_cycle(url: &str, hosts: &[NovaHost], refresh: bool) {
    let url: Arc<str> = Arc::from(url);
    let mut tasks = Vec::new();
    for h in hosts {
        // Each host its own client and connections, as each nova-compute has.
        let http = reqwest::Client::builder()
            .no_proxy()
            .pool_idle_timeout(std::time::Duration::from_millis(900))
            .build()
            .unwrap();
        let url = url.clone();
        let h = NovaHost {
            node: h.node,
            providers: h.providers.clone(),
        };
        tasks.push(tokio::spawn(async move {
            cycle(&http, &url, &h, refresh).await
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}
