//! Reporting upstream from the daemon: every `report_interval_s` (and soon after an audit or a
//! reload), copy what Placement should hold from the tracker under its lock, let go of the
//! lock, then let the [`Reporter`] send the differences. Claims never wait on the network.
//! Also POSTs the ComputeNode primitive to `[upstream.http]` when it changed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{watch, Notify};
use uuid::Uuid;

use crate::api::shared::DaemonState;
use crate::tracker::compute_node::without_updated_at;
use crate::tracker::pci::devices::DeviceStatus;
use crate::tracker::state::Tracker;
use crate::tracker::usage::UsageSource;
use crate::upstream::desired::{CONSUMER_INSTANCE, CONSUMER_MIGRATION};
use crate::upstream::{
    install_crypto_provider, validate_http_push, Consumer, DesiredState, HttpPlacement, HttpPush,
    PlacementSettings, ReportOutcome, Reporter, ReporterOptions, ResourceKey, UpstreamError,
};

/// The Placement consumers of the local claims, as Nova holds them: an instance's allocation
/// under its uuid; during a move, the source side under the migration's uuid.
pub fn consumers(t: &Tracker) -> Vec<Consumer> {
    let usage = t.usage();
    let state = t.state();
    let mut out: BTreeMap<Uuid, Consumer> = BTreeMap::new();
    let owner = |instance: &str| -> (String, String) {
        let rec = state.instances.get(instance);
        (
            rec.and_then(|r| r.project_id.clone())
                .unwrap_or_else(|| "unknown".into()),
            rec.and_then(|r| r.user_id.clone())
                .unwrap_or_else(|| "unknown".into()),
        )
    };
    for c in &usage.consumers {
        let (uuid, kind) = match c.source {
            UsageSource::Instance | UsageSource::IncomingMigration => {
                (c.instance_uuid.clone(), CONSUMER_INSTANCE)
            }
            UsageSource::OutgoingMigration | UsageSource::SameNodeMigration => {
                match c.migration_id.and_then(|id| state.migrations.get(&id)) {
                    Some(m) => (m.uuid.clone(), CONSUMER_MIGRATION),
                    None => (c.instance_uuid.clone(), CONSUMER_INSTANCE),
                }
            }
        };
        let Ok(uuid) = Uuid::parse_str(&uuid) else {
            tracing::warn!(consumer = %uuid, "not a UUID; its usage is not reported as an allocation");
            continue;
        };
        let (project_id, user_id) = owner(&c.instance_uuid);
        let entry = out.entry(uuid).or_insert_with(|| Consumer {
            uuid,
            project_id,
            user_id,
            consumer_type: kind.to_string(),
            resources: BTreeMap::new(),
        });
        for (class, amount) in &c.resources {
            if *amount > 0 {
                *entry
                    .resources
                    .entry(ResourceKey::Host(class.as_str().to_string()))
                    .or_default() += *amount as u64;
            }
        }
    }
    // Devices go to the instance's consumer here, else to its migration's.
    for d in state.devices.values() {
        if !matches!(d.status, DeviceStatus::Allocated | DeviceStatus::Claimed) {
            continue;
        }
        let Some(o) = &d.owner else { continue };
        let target = Uuid::parse_str(&o.instance_uuid)
            .ok()
            .filter(|u| out.contains_key(u))
            .or_else(|| {
                state
                    .migrations
                    .values()
                    .filter(|m| m.instance_uuid == o.instance_uuid && m.in_progress())
                    .filter_map(|m| Uuid::parse_str(&m.uuid).ok())
                    .find(|u| out.contains_key(u))
            });
        if let Some(u) = target {
            if let Some(c) = out.get_mut(&u) {
                c.resources.insert(ResourceKey::PciDevice(d.address), 1);
            }
        }
    }
    out.into_values()
        .filter(|c| !c.resources.is_empty())
        .collect()
}

/// What one report needs, copied under the tracker lock.
struct Snapshot {
    desired: Result<DesiredState, UpstreamError>,
    compute_node: Value,
}

fn snapshot(
    state: &DaemonState,
    with_allocations: bool,
    push_version: Option<crate::objects::ObjVersion>,
) -> Snapshot {
    let config = state.config();
    state.service.read(|t| {
        let consumers = if with_allocations {
            consumers(t)
        } else {
            Vec::new()
        };
        let settings = t.settings();
        let desired = Uuid::parse_str(&settings.node_uuid)
            .map_err(|_| {
                UpstreamError::Input(format!(
                    "the compute node uuid {:?} is not a UUID",
                    settings.node_uuid
                ))
            })
            .and_then(|uuid| {
                DesiredState::build(
                    t.host(),
                    &config,
                    uuid,
                    &settings.names.node,
                    false,
                    &consumers,
                )
            });
        let node = t.compute_node(&t.usage(), time::OffsetDateTime::now_utc());
        let compute_node = match push_version {
            None => node.to_primitive(),
            Some(v) => node
                .to_primitive_at(v, Some(&crate::objects::current_manifest()))
                .unwrap_or_else(|e| {
                    tracing::warn!(target: "rtrack::upstream", error = %e, "cannot backport the ComputeNode; sending the newest");
                    node.to_primitive()
                }),
        };
        Snapshot {
            desired,
            compute_node,
        }
    })
}

fn record(state: &DaemonState, outcome: &Result<ReportOutcome, UpstreamError>) {
    let m = &state.metrics;
    match outcome {
        Ok(o) => {
            for (kind, n) in &o.requests.0 {
                m.upstream_requests
                    .get_or_create(&vec![("kind", kind.to_string())])
                    .inc_by(*n);
            }
            let label = if o.backing_off.is_some() {
                "backing_off"
            } else if o.changes > 0 {
                "changed"
            } else {
                "unchanged"
            };
            m.upstream_reports
                .get_or_create(&vec![("outcome", label.to_string())])
                .inc();
            if o.changes > 0 || o.conflicts > 0 || o.inventory_in_use > 0 {
                tracing::info!(target: "rtrack::upstream", requests = %o.requests, changes = o.changes,
                    conflicts = o.conflicts, inventory_in_use = o.inventory_in_use,
                    allocations_rejected = o.allocations_rejected, "Placement updated");
            } else {
                tracing::debug!(target: "rtrack::upstream", requests = %o.requests, "Placement already up to date");
            }
        }
        Err(e) => {
            m.upstream_reports
                .get_or_create(&vec![("outcome", "error".to_string())])
                .inc();
            tracing::warn!(target: "rtrack::upstream", error = %e, "report to Placement failed; retrying with backoff");
        }
    }
}

/// Reports until `stop` turns true: to Placement when `placement` is set, and the ComputeNode
/// to `[upstream.http]` when that is configured. `kick` asks for a report now (after an audit
/// or a reload).
pub async fn run(
    state: Arc<DaemonState>,
    placement: Option<PlacementSettings>,
    kick: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) {
    install_crypto_provider();
    let mut reporter = match &placement {
        None => None,
        Some(settings) => match HttpPlacement::new(settings) {
            Ok(api) => Some(Reporter::new(api, settings, ReporterOptions::default())),
            Err(e) => {
                tracing::error!(target: "rtrack::upstream", error = %e, "cannot set up the Placement client; not reporting to Placement");
                None
            }
        },
    };
    let mut push_version = None;
    let mut push = match validate_http_push(state.config().upstream_http.as_ref()).and_then(|p| {
        push_version = p.as_ref().and_then(|p| p.object_version);
        p.map(HttpPush::new).transpose()
    }) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(target: "rtrack::upstream", error = %e, "cannot set up [upstream.http]; not pushing");
            None
        }
    };
    if reporter.is_none() && push.is_none() {
        return;
    }
    // Without Placement, the ComputeNode is checked for changes every minute.
    let interval = placement
        .as_ref()
        .map_or(Duration::from_secs(60), |p| p.report_interval);
    let allocations = placement.as_ref().is_some_and(|p| p.report_allocations);
    let mut last_pushed: Option<Value> = None;
    loop {
        let st = state.clone();
        let snap =
            match tokio::task::spawn_blocking(move || snapshot(&st, allocations, push_version))
                .await
            {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(error = %e, "building the upstream snapshot failed");
                    return;
                }
            };
        let mut wait = interval;
        if let Some(r) = reporter.as_mut() {
            let outcome = match snap.desired {
                Ok(desired) => r.report(&desired).await,
                Err(e) => Err(e),
            };
            record(&state, &outcome);
            wait = match &outcome {
                Ok(o) => o.backing_off.unwrap_or(interval).min(interval),
                Err(_) => r
                    .backoff_remaining()
                    .max(Duration::from_secs(1))
                    .min(interval),
            };
        }
        if let Some(p) = push.as_mut() {
            let cmp = without_updated_at(&snap.compute_node);
            if last_pushed.as_ref() != Some(&cmp) {
                match p.push(&snap.compute_node).await {
                    Ok(_) => last_pushed = Some(cmp),
                    Err(e) => {
                        tracing::warn!(target: "rtrack::upstream", error = %e, "POST of the ComputeNode failed; retrying next cycle")
                    }
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = kick.notified() => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}
