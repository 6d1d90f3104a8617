//! Reporting upstream from the daemon: every `report_interval_s` (and soon after an audit or a
//! reload), copy what Placement should hold from the tracker under its lock, let go of the
//! lock, then let the [`Reporter`] send the differences. Claims never wait on the network.
//! Also POSTs the ComputeNode primitive to `[upstream.http]` when it changed.
//!
//! In: the [`DaemonState`] (the tracker's host view, claims and ComputeNode, read under its lock),
//! the [`PlacementSettings`] and `[upstream.http]` settings, kicks after audits and reloads, and
//! the stop signal. Out: a [`DesiredState`] per cycle for the [`Reporter`], which sends Placement
//! the differences; the ComputeNode primitive POSTed when it changed; a metric and a log line per
//! report.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{watch, Notify};
use tracing::Instrument;
use uuid::Uuid;

use crate::api::shared::DaemonState;
use crate::tracker::node_template::without_volatile_fields;
use crate::upstream::consumers::consumers;
use crate::upstream::desired::ReportInputs;
use crate::upstream::{
    install_crypto_provider, DesiredState, HttpPlacement, HttpPush, HttpPushSettings,
    PlacementSettings, ReportOutcome, Reporter, ReporterOptions, UpstreamError,
};

/// What one report needs, copied under the tracker lock.
pub(super) struct Snapshot {
    pub(super) desired: Result<DesiredState, UpstreamError>,
    compute_node: Value,
}

pub(super) fn snapshot(
    state: &DaemonState,
    with_consumers: bool,
    push_version: Option<crate::objects::ObjVersion>,
) -> Snapshot {
    let config = state.config();
    // Under the lock: only what changes with claims. The view is shared, not copied.
    let (consumers, view, node_uuid, node_name, node, pci) = state.service.read(|t| {
        // Reconciliation compares them with Placement's allocations, whoever writes those.
        let consumers = if with_consumers {
            consumers(t)
        } else {
            Vec::new()
        };
        let settings = t.settings();
        let held_unreported = t.held_unreported_pci();
        let mut uuids = t.pci_provider_uuids();
        for a in held_unreported.keys() {
            uuids.entry(*a).or_insert_with(|| t.pci_provider_uuid(a));
        }
        let pci = ReportInputs {
            uuids,
            held_unreported,
            one_time_used: t.one_time_used(),
            one_time_kept: t.one_time_kept(),
            one_time_unreserve: t.one_time_unreserve(),
            released: t
                .state()
                .released_consumers
                .iter()
                .map(|(u, r)| (*u, r.released_at))
                .collect(),
        };
        (
            consumers,
            t.view(),
            settings.node_uuid.clone(),
            settings.names.node.clone(),
            t.compute_node(&t.usage(), time::OffsetDateTime::now_utc()),
            pci,
        )
    });
    let desired = Uuid::parse_str(&node_uuid)
        .map_err(|_| {
            UpstreamError::Input(format!("the compute node uuid {node_uuid:?} is not a UUID"))
        })
        .and_then(|uuid| {
            DesiredState::build_with(&view, &config, uuid, &node_name, false, &consumers, &pci)
        });
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
}

/// Publishes a refresh's drift (metric, `/healthz`) and logs each drift once: when it is
/// confirmed, when it is gone, and what this cycle's writes fixed.
fn note_drift(
    state: &DaemonState,
    d: &crate::upstream::reporter::drift::DriftReport,
    logged: &mut std::collections::BTreeSet<String>,
) {
    for (kind, n) in d.confirmed.counts() {
        state
            .metrics
            .placement_drift
            .get_or_create(&vec![("kind", kind.to_string())])
            .set(n as i64);
    }
    state.set_drift(Some(crate::api::shared::DriftHealth {
        counts: d.confirmed.counts(),
        at: Some(crate::inventory::format_utc(time::OffsetDateTime::now_utc())),
    }));
    let remaining = d.remaining.keys();
    for c in &d.found.consumers {
        if !remaining.contains(&c.key()) {
            tracing::info!(target: "rtrack::upstream", consumer = %c.consumer, kind = c.kind.as_str(), local = ?c.local, placement = ?c.placement, "drift found and fixed (report_allocations): Placement now holds what the local claims hold");
        }
    }
    let confirmed = d.confirmed.keys();
    for c in &d.confirmed.consumers {
        if logged.insert(c.key()) {
            tracing::warn!(target: "rtrack::upstream", consumer = %c.consumer, kind = c.kind.as_str(), local = ?c.local, placement = ?c.placement, "drift between the local claims and Placement (rtrackctl reconcile shows it; --fix repairs what rtrack owns)");
        }
    }
    for i in &d.confirmed.inventories {
        if logged.insert(i.key()) {
            tracing::warn!(target: "rtrack::upstream", provider = %i.provider, name = %i.provider_name, class = %i.class, placement_total = i.placement_total, host_total = i.host_total, used = ?i.used, "Placement holds inventory the host no longer has (kept while allocations use it)");
        }
    }
    logged.retain(|k| {
        let keep = confirmed.contains(k);
        if !keep {
            tracing::info!(target: "rtrack::upstream", drift = %k, "drift gone");
        }
        keep
    });
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

/// Lets the tracker forget released consumers whose part is gone from Placement (or, without a
/// Placement to report to, every one: nothing of theirs is rtrack's to remove).
pub(super) async fn forget_released(state: &Arc<DaemonState>, done: Option<Vec<(Uuid, i64)>>) {
    let st = state.clone();
    let result = tokio::task::spawn_blocking(move || {
        let done = done.unwrap_or_else(|| {
            st.service.read(|t| {
                t.state()
                    .released_consumers
                    .iter()
                    .map(|(u, r)| (*u, r.released_at))
                    .collect()
            })
        });
        st.service.forget_released(&done)
    })
    .await;
    if !matches!(result, Ok(Ok(()))) {
        tracing::warn!(target: "rtrack::upstream", "cannot record that released consumers are gone from Placement; they are looked at again next cycle");
    }
}

/// The reporter and the push built from one configuration's settings.
struct Upstreams {
    settings: (Option<PlacementSettings>, Option<HttpPushSettings>),
    reporter: Option<Reporter<HttpPlacement>>,
    push: Option<HttpPush>,
}

impl Upstreams {
    fn build(settings: (Option<PlacementSettings>, Option<HttpPushSettings>)) -> Upstreams {
        let reporter = match &settings.0 {
            None => None,
            Some(p) => match HttpPlacement::new(p) {
                Ok(api) => {
                    tracing::info!(target: "rtrack::upstream", endpoint = %p.endpoint.as_ref().map_or("(Keystone's catalog)".to_string(), |e| e.to_string()), "reporting to Placement");
                    Some(Reporter::new(api, p, ReporterOptions::default()))
                }
                Err(e) => {
                    tracing::error!(target: "rtrack::upstream", error = %e, "cannot set up the Placement client; not reporting to Placement");
                    None
                }
            },
        };
        let push = match settings.1.clone().map(HttpPush::new).transpose() {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(target: "rtrack::upstream", error = %e, "cannot set up [upstream.http]; not pushing");
                None
            }
        };
        Upstreams {
            settings,
            reporter,
            push,
        }
    }
}

/// Reports until `stop` turns true: to Placement when `[placement]` is set, and the ComputeNode
/// to `[upstream.http]` when that is configured, each with the settings in force: a reload
/// that changes them (new credentials, say) starts the reporter over with the new ones. `kick`
/// asks for a report now (after an audit or a reload).
pub async fn run(state: Arc<DaemonState>, kick: Arc<Notify>, mut stop: watch::Receiver<bool>) {
    install_crypto_provider();
    let (tx, mut commands) = tokio::sync::mpsc::channel(4);
    state.set_upstream(Some(tx));
    let mut logged_drift = std::collections::BTreeSet::new();
    let mut up: Option<Upstreams> = None;
    let mut last_pushed: Option<Value> = None;
    let mut cycle: u64 = 0;
    loop {
        let cfg = state.config();
        let wanted = (cfg.placement_settings.clone(), cfg.http_push.clone());
        if up.as_ref().map(|u| &u.settings) != Some(&wanted) {
            if up.is_some() {
                tracing::info!(target: "rtrack::upstream", "upstream settings changed: reporting starts over with the new ones");
                last_pushed = None;
                // The drift judged under the old settings says nothing about the new ones.
                state.set_drift(None);
                state.metrics.clear_drift();
                logged_drift.clear();
            }
            up = Some(Upstreams::build(wanted));
        }
        let Some(u) = up.as_mut() else { return };
        if u.reporter.is_none() {
            forget_released(&state, None).await;
        }
        if u.reporter.is_none() && u.push.is_none() {
            // Nothing to report to; a reload may change that.
            tokio::select! {
                _ = kick.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(60)) => {}
                Some(cmd) = commands.recv() => {
                    super::upstream_commands::handle(&state, None, false, cmd).await;
                }
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
            continue;
        }
        let placement = u.settings.0.clone();
        let push_version = u.settings.1.as_ref().and_then(|p| p.object_version);
        let reporter = &mut u.reporter;
        let push = &mut u.push;
        // Without Placement, the ComputeNode is checked for changes every minute.
        let interval = placement
            .as_ref()
            .map_or(Duration::from_secs(60), |p| p.report_interval);
        let with_consumers = placement.is_some();
        if cycle == 0 && placement.is_some() {
            // Hosts started together do not all register in the same second; a command (a
            // refresh someone waits for) ends the wait.
            tokio::select! {
                _ = tokio::time::sleep(crate::upstream::backoff::first_report_delay(interval)) => {}
                Some(cmd) = commands.recv() => {
                    super::upstream_commands::handle(&state, reporter.as_mut(), true, cmd).await;
                }
                _ = stop.changed() => return,
            }
        }
        cycle += 1;
        // One span per cycle: every line the report logs says which cycle it belongs to.
        let span = tracing::info_span!("report", cycle);
        let wait = async {
            let snap = snapshot_off_thread(&state, with_consumers, push_version).await?;
            let mut wait = interval;
            if let Some(r) = reporter.as_mut() {
                wait =
                    report_to_placement(&state, r, snap.desired, interval, &mut logged_drift).await;
            }
            if let Some(p) = push.as_mut() {
                push_if_changed(p, &snap.compute_node, &mut last_pushed).await;
            }
            Some(wait)
        }
        .instrument(span)
        .await;
        let Some(wait) = wait else { return };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = kick.notified() => {}
            Some(cmd) = commands.recv() => {
                let placement = up.as_ref().and_then(|u| u.settings.0.clone());
                let reporter = up.as_mut().and_then(|u| u.reporter.as_mut());
                super::upstream_commands::handle(&state, reporter, placement.is_some(), cmd).await;
            }
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// [`snapshot`], taken on a blocking thread (it waits for the tracker lock); `None`, logged,
/// when that task failed.
async fn snapshot_off_thread(
    state: &Arc<DaemonState>,
    with_consumers: bool,
    push_version: Option<crate::objects::ObjVersion>,
) -> Option<Snapshot> {
    let st = state.clone();
    match tokio::task::spawn_blocking(move || snapshot(&st, with_consumers, push_version)).await {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::error!(error = %e, "building the upstream snapshot failed");
            None
        }
    }
}

/// One report to Placement, and what its outcome says to the rest of the daemon (metrics,
/// released claims, drift, one-time-use readings, providers taken over from nova-compute).
/// Returns how long to wait before the next report.
async fn report_to_placement(
    state: &Arc<DaemonState>,
    r: &mut Reporter<HttpPlacement>,
    desired: Result<DesiredState, UpstreamError>,
    interval: Duration,
    logged_drift: &mut std::collections::BTreeSet<String>,
) -> Duration {
    let outcome = match desired {
        Ok(desired) => r.report(&desired).await,
        Err(e) => Err(e),
    };
    record(state, &outcome);
    forget_released(state, Some(r.take_released_done())).await;
    if let Some(d) = outcome.as_ref().ok().and_then(|o| o.drift.as_ref()) {
        note_drift(state, d, logged_drift);
    }
    if let Ok(o) = &outcome {
        note_one_time_use(state, &o.one_time_use_reserved).await;
        state
            .service
            .adopt_nested_providers(&o.adopted_nested_providers);
        if !o.adopted_pci_providers.is_empty() {
            // Kept, so that claims follow allocations made against these providers
            // and the next report names them without looking them up.
            let st = state.clone();
            let adopted = o.adopted_pci_providers.clone();
            let kept =
                tokio::task::spawn_blocking(move || st.service.adopt_pci_providers(&adopted)).await;
            if !matches!(kept, Ok(Ok(()))) {
                tracing::warn!(target: "rtrack::upstream", "cannot store the uuids of the PCI providers taken over from nova-compute; they are looked up again at the next report");
            }
        }
    }
    match &outcome {
        Ok(o) => match o.backing_off {
            Some(b) => b.min(interval),
            None => crate::upstream::backoff::cycle_wait(interval),
        },
        Err(_) => r
            .backoff_remaining()
            .max(Duration::from_secs(1))
            .min(interval),
    }
}

/// POSTs the ComputeNode to `[upstream.http]` when it differs (volatile fields aside) from the
/// last one that went through.
async fn push_if_changed(p: &mut HttpPush, compute_node: &Value, last_pushed: &mut Option<Value>) {
    let cmp = without_volatile_fields(compute_node);
    if last_pushed.as_ref() != Some(&cmp) {
        match p.push(compute_node).await {
            Ok(_) => *last_pushed = Some(cmp),
            Err(e) => {
                tracing::warn!(target: "rtrack::upstream", error = %e, "POST of the ComputeNode failed; retrying next cycle")
            }
        }
    }
}

/// Tells the tracker what a report found of one-time-use devices' reservations in Placement
/// (a store write: off the async threads), and logs the devices an operator cleaned there.
pub(super) async fn note_one_time_use(
    state: &std::sync::Arc<DaemonState>,
    readings: &std::collections::BTreeMap<
        crate::probes::pci::PciAddress,
        crate::tracker::pci::devices::OneTimeUseReading,
    >,
) {
    if readings.is_empty() {
        return;
    }
    let st = state.clone();
    let seen = readings.clone();
    let noted =
        tokio::task::spawn_blocking(move || st.service.note_one_time_use_reservations(&seen)).await;
    match noted {
        Ok(Ok(noted)) => {
            for a in noted.cleaned {
                tracing::info!(target: "rtrack::upstream", device = %a, "one-time-use PCI device cleaned: its provider's reserved was lowered in Placement; it is available again");
            }
            for a in noted.found_reserved {
                tracing::warn!(target: "rtrack::upstream", device = %a, "one-time-use PCI device used before rtrack tracked it: Placement holds its provider reserved whole; kept reserved until cleaned (lower reserved in Placement, or rtrackctl pci release)");
            }
        }
        Ok(Err(e)) => {
            tracing::warn!(target: "rtrack::upstream", error = %e, "cannot record one-time-use reservations seen in Placement; the next report tries again");
        }
        Err(e) => tracing::error!(error = %e, "recording one-time-use reservations failed"),
    }
}
