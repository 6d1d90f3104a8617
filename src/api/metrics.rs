//! Prometheus metrics: counters and histograms updated as things happen, and gauges of the
//! inventory, usage and PCI pools set from the tracker at each scrape (so they are never stale
//! and cost nothing between scrapes).
//!
//! In: events as they happen (claim decisions, audits, commits, upstream requests and reports, API
//! requests, refused peers, connections) and, at each scrape, the [`TrackerService`]'s committed
//! inventory, usage and pools. Out: the metrics as OpenMetrics text or in the classic Prometheus
//! text format ([`Metrics::render`]).
//!
//! Served on the API socket (`GET /metrics`) and, when `[metrics] listen` is set, on a TCP
//! listener that serves nothing else.

use std::fmt::Write as _;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::api::error::claim_error_code;
use crate::service::TrackerService;
use crate::tracker::ClaimError;

type Labels = Vec<(&'static str, String)>;

/// Every metric rtrackd exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    inventory_total: Family<Labels, Gauge>,
    inventory_reserved: Family<Labels, Gauge>,
    inventory_capacity: Family<Labels, Gauge>,
    inventory_used: Family<Labels, Gauge>,
    pci_pool_devices: Family<Labels, Gauge>,
    pci_pool_free: Family<Labels, Gauge>,
    pci_devices_reserved: Gauge,
    instances: Gauge,
    migrations_in_progress: Gauge,
    /// Claim decisions by operation, outcome and reason.
    pub claims: Family<Labels, Counter>,
    /// Audit duration (probe + update), seconds.
    pub audit_duration: Histogram,
    /// Audits that failed (probe or commit).
    pub audit_failures: Counter,
    /// Warnings of the last probe.
    pub probe_warnings: Gauge,
    /// Mdevs given to claims that the host no longer shows (last audit).
    pub mdevs_missing: Gauge,
    /// PCI devices held by a claim that the host no longer shows.
    pub pci_devices_missing: Gauge,
    /// Host CPUs pinned by counted instances that are offline, but those Nova powered down on
    /// purpose (CPU power management, guest not running).
    pub pinned_cpus_offline: Gauge,
    /// 1 while the store refuses changes (claims answer 503).
    pub store_unavailable: Gauge,
    /// Per NUMA cell: shared CPUs, floating guest CPUs on them, dedicated CPUs, pinned CPUs.
    pub numa_cell_cpus: Family<Labels, Gauge>,
    /// Per NUMA cell: memory and the memory of the guest cells placed on it, bytes.
    pub numa_cell_memory_bytes: Family<Labels, Gauge>,
    /// Store commit latency, seconds (one observation per transaction).
    pub commit_latency: Histogram,
    /// Upstream requests by kind.
    pub upstream_requests: Family<Labels, Counter>,
    /// Upstream report cycles by outcome.
    pub upstream_reports: Family<Labels, Counter>,
    /// Drift between local claims, Placement and the host by kind (last reconciliation).
    pub placement_drift: Family<Labels, Gauge>,
    /// API requests refused because the peer is not allowed.
    pub forbidden_peers: Counter,
    /// API requests by route and status.
    pub api_requests: Family<Labels, Counter>,
    /// API request latency by method and route (claims: `POST /v1/claims`), seconds.
    pub api_request_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    /// API connections open, and those closed at once over the cap.
    pub connections: crate::api::server::ConnCounters,
    /// Where a change's time goes, by stage, seconds (see [`Metrics::stage`]).
    pub change_stage_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    /// Its `queue` stage, kept at hand: the API observes it for every claim and move.
    pub stage_queue: Histogram,
    /// Its `answer` stage, kept at hand likewise.
    pub stage_answer: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

fn latency_histogram() -> Histogram {
    // 100 us to ~6.5 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 17))
}

fn stage_histogram() -> Histogram {
    // 10 us (a decision) to ~5 s.
    Histogram::new(exponential_buckets(0.00001, 2.0, 20))
}

/// The stages of a change, in the order a claim goes through them: `queue` (from the API to a
/// blocking-pool thread), `lock`, `decide`, `commit` (the service), `answer` (from the decision
/// answered to the API taking it up again; claims and moves only).
pub const CHANGE_STAGES: [&str; 5] = ["queue", "lock", "decide", "commit", "answer"];

/// The histogram of `stage` in the stages' family (created at its first use).
fn stage_in(family: &Family<Labels, Histogram, fn() -> Histogram>, stage: &str) -> Histogram {
    family
        .get_or_create(&vec![("stage", stage.to_string())])
        .clone()
}

impl Metrics {
    /// The histogram of one of [`CHANGE_STAGES`].
    pub fn stage(&self, stage: &'static str) -> Histogram {
        stage_in(&self.change_stage_seconds, stage)
    }

    /// The service's stages, for [`TrackerService::observe_stages`].
    pub fn service_stages(&self) -> crate::service::ChangeStages {
        crate::service::ChangeStages {
            lock: self.stage("lock"),
            decide: self.stage("decide"),
            commit: self.stage("commit"),
        }
    }

    /// Every drift kind at 0 (at start, and when the Placement settings change).
    pub fn clear_drift(&self) {
        for kind in crate::upstream::reconcile::DRIFT_KINDS {
            self.placement_drift
                .get_or_create(&vec![("kind", kind.to_string())])
                .set(0);
        }
    }

    /// Creates and registers every metric.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("rtrack");
        let change_stage_seconds: Family<Labels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(stage_histogram);
        let stage_queue = stage_in(&change_stage_seconds, "queue");
        let stage_answer = stage_in(&change_stage_seconds, "answer");
        let m = Metrics {
            inventory_total: Family::default(),
            inventory_reserved: Family::default(),
            inventory_capacity: Family::default(),
            inventory_used: Family::default(),
            pci_pool_devices: Family::default(),
            pci_pool_free: Family::default(),
            pci_devices_reserved: Gauge::default(),
            instances: Gauge::default(),
            migrations_in_progress: Gauge::default(),
            claims: Family::default(),
            audit_duration: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            audit_failures: Counter::default(),
            probe_warnings: Gauge::default(),
            mdevs_missing: Gauge::default(),
            pci_devices_missing: Gauge::default(),
            pinned_cpus_offline: Gauge::default(),
            store_unavailable: Gauge::default(),
            numa_cell_cpus: Family::default(),
            numa_cell_memory_bytes: Family::default(),
            commit_latency: latency_histogram(),
            upstream_requests: Family::default(),
            upstream_reports: Family::default(),
            placement_drift: Family::default(),
            forbidden_peers: Counter::default(),
            api_requests: Family::default(),
            api_request_seconds: Family::new_with_constructor(latency_histogram),
            connections: crate::api::server::ConnCounters::default(),
            change_stage_seconds,
            stage_queue,
            stage_answer,
            registry: Registry::default(),
        };
        register_resources(&mut registry, &m);
        register_tracker(&mut registry, &m);
        register_store_and_upstream(&mut registry, &m);
        register_api(&mut registry, &m);
        Metrics { registry, ..m }
    }

    /// Counts a claim decision. `operation` is `instance_claim` or `move_claim`.
    pub fn count_claim(&self, operation: &'static str, result: Result<ClaimDecision, &ClaimError>) {
        let (outcome, reason) = match result {
            Ok(ClaimDecision::Granted) => ("granted", String::new()),
            Ok(ClaimDecision::Existing) => ("existing", String::new()),
            Ok(ClaimDecision::DryRun) => ("dry_run_fits", String::new()),
            Err(e) => (claim_error_code(e).as_str(), refusal_reason(e)),
        };
        self.count_claim_outcome(operation, outcome, reason);
    }

    /// Counts a failure that is not the tracker's decision (the store failed, shutting down).
    pub fn count_claim_error(&self, operation: &'static str) {
        self.count_claim_outcome(operation, "error", String::new());
    }

    /// Counts a claim with this outcome (an API error code for a request that could not be
    /// read) and reason.
    pub fn count_claim_outcome(&self, operation: &'static str, outcome: &str, reason: String) {
        self.claims
            .get_or_create(&vec![
                ("operation", operation.to_string()),
                ("outcome", outcome.to_string()),
                ("reason", reason),
            ])
            .inc();
    }

    /// Sets the gauges from the tracker, then renders everything: OpenMetrics text, or the
    /// classic Prometheus text format (what `promtool check metrics` and older scrapers read).
    pub fn render(&self, service: &TrackerService, openmetrics: bool) -> String {
        self.store_unavailable
            .set(i64::from(service.store_unavailable().is_some()));
        service.read(|t| {
            let used = t.used();
            for fam in [
                &self.inventory_total,
                &self.inventory_reserved,
                &self.inventory_capacity,
                &self.inventory_used,
                &self.pci_pool_devices,
                &self.pci_pool_free,
                &self.numa_cell_cpus,
                &self.numa_cell_memory_bytes,
            ] {
                fam.clear();
            }
            for cell in t.numa_report() {
                let count = |list: &str| {
                    crate::probes::CpuSet::parse_list(list).map_or(0, |s| s.len() as i64)
                };
                let labels =
                    |kind: &str| vec![("cell", cell.id.to_string()), ("kind", kind.to_string())];
                for (kind, v) in [
                    ("shared", count(&cell.cpus)),
                    ("shared_used", cell.cpu_usage),
                    ("dedicated", count(&cell.pcpus)),
                    ("pinned", count(&cell.pinned_cpus)),
                ] {
                    self.numa_cell_cpus.get_or_create(&labels(kind)).set(v);
                }
                for (kind, mb) in [("total", cell.memory_mb), ("used", cell.memory_usage_mb)] {
                    self.numa_cell_memory_bytes
                        .get_or_create(&labels(kind))
                        .set(mb.saturating_mul(1 << 20));
                }
            }
            for (class, inv) in t.inventory() {
                let l = vec![("resource_class", class.as_str().to_string())];
                self.inventory_total.get_or_create(&l).set(inv.total);
                self.inventory_reserved.get_or_create(&l).set(inv.reserved);
                self.inventory_capacity
                    .get_or_create(&l)
                    .set(inv.capacity());
                self.inventory_used
                    .get_or_create(&l)
                    .set(used.get(class).copied().unwrap_or(0));
            }
            for p in t.pool_usage() {
                let l = vec![
                    ("vendor_id", p.vendor_id.clone()),
                    ("product_id", p.product_id.clone()),
                    (
                        "numa_node",
                        p.numa_node.map(|n| n.to_string()).unwrap_or_default(),
                    ),
                    (
                        "dev_type",
                        p.tags.get("dev_type").cloned().unwrap_or_default(),
                    ),
                    (
                        "address",
                        p.tags.get("address").cloned().unwrap_or_default(),
                    ),
                ];
                self.pci_pool_devices
                    .get_or_create(&l)
                    .set(i64::from(p.total));
                self.pci_pool_free.get_or_create(&l).set(i64::from(p.free));
            }
            let s = t.state();
            self.pci_devices_reserved.set(
                s.devices
                    .values()
                    .filter(|d| d.status == crate::tracker::pci::DeviceStatus::Reserved)
                    .count() as i64,
            );
            self.instances.set(s.instances.len() as i64);
            let view = t.view();
            self.pci_devices_missing.set(
                s.devices
                    .values()
                    .filter(|d| d.owner.is_some() && !view.tracked.contains_key(&d.address))
                    .count() as i64,
            );
            // Pinned CPUs Nova powered down on purpose (stopped guests) are not counted.
            let offline: std::collections::BTreeSet<u32> = t
                .offline_pins()
                .iter()
                .filter(|p| !p.powered_down)
                .map(|p| p.cpu)
                .collect();
            self.pinned_cpus_offline.set(offline.len() as i64);
            self.migrations_in_progress
                .set(s.migrations.values().filter(|m| m.in_progress()).count() as i64);
        });
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            // Encoding into a String cannot fail; say so rather than serve half a page.
            out.clear();
            let _ = writeln!(out, "# metrics could not be encoded");
        }
        if openmetrics {
            out
        } else {
            to_prometheus_text(&out)
        }
    }
}

/// OpenMetrics text to the Prometheus text format 0.0.4: counter families are named with their
/// `_total` suffix, and `# EOF` / `# UNIT` lines go. Samples are the same in both.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let mut counters = std::collections::BTreeSet::new();
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some(name) = rest.strip_suffix(" counter") {
                counters.insert(name.to_string());
            }
        }
    }
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|p| {
            let rest = line.strip_prefix(p)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{p}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// How a claim that did not fail ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimDecision {
    /// Granted now.
    Granted,
    /// Already held (an idempotent retry).
    Existing,
    /// A dry run that fits.
    DryRun,
}

/// A refusal's reason for the `reason` label: the classes short, `+`-joined (bounded set).
fn refusal_reason(e: &ClaimError) -> String {
    match e {
        ClaimError::Refused(r) => {
            let mut parts: Vec<&str> = r.resources.iter().map(|s| s.class.as_str()).collect();
            if r.numa.is_some() {
                parts.push("NUMA");
            }
            if r.pci.is_some() {
                parts.push("PCI");
            }
            parts.join("+")
        }
        _ => String::new(),
    }
}

/// Registers the host's resources and PCI pools.
fn register_resources(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "resource_inventory",
        "Amount of each resource class the host has",
        m.inventory_total.clone(),
    );
    registry.register(
        "resource_reserved",
        "Amount of each resource class kept for the host",
        m.inventory_reserved.clone(),
    );
    registry.register(
        "resource_capacity",
        "What claims may use in all: (total - reserved) x allocation ratio",
        m.inventory_capacity.clone(),
    );
    registry.register(
        "resource_used",
        "Amount of each resource class in use by instances and migrations",
        m.inventory_used.clone(),
    );
    registry.register(
        "pci_pool_devices",
        "Tracked PCI devices in each pool",
        m.pci_pool_devices.clone(),
    );
    registry.register(
        "pci_pool_free",
        "Available PCI devices in each pool",
        m.pci_pool_free.clone(),
    );
    registry.register(
        "pci_devices_reserved",
        "One-time-use PCI devices used and not yet released (rtrackctl pci release)",
        m.pci_devices_reserved.clone(),
    );
}

/// Registers what the tracker holds and what the audit finds.
fn register_tracker(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "instances",
        "Instances tracked on or moving to this node",
        m.instances.clone(),
    );
    registry.register(
        "migrations_in_progress",
        "Migrations holding resources on this node",
        m.migrations_in_progress.clone(),
    );
    registry.register(
        "claims",
        "Claim decisions by operation, outcome and reason",
        m.claims.clone(),
    );
    registry.register(
        "audit_duration_seconds",
        "Time of one audit: probe and tracker update",
        m.audit_duration.clone(),
    );
    registry.register(
        "audit_failures",
        "Audits that failed (probe or commit); retried next interval",
        m.audit_failures.clone(),
    );
    registry.register(
        "probe_warnings",
        "Warnings of the last probe (unreadable or inconsistent sysfs/procfs files)",
        m.probe_warnings.clone(),
    );
    registry.register(
        "mdevs_missing",
        "Mediated devices given to claims that the host no longer shows (last audit); each is logged",
        m.mdevs_missing.clone(),
    );
    registry.register(
        "pci_devices_missing",
        "PCI devices held by a claim that the host no longer shows (kept until freed)",
        m.pci_devices_missing.clone(),
    );
    registry.register(
        "pinned_cpus_offline",
        "Host CPUs pinned by instances counted here that are offline (with CPU power management, only those of running guests)",
        m.pinned_cpus_offline.clone(),
    );
    registry.register(
        "numa_cell_cpus",
        "CPUs of each NUMA cell (cell) by kind: shared, shared_used (floating guest CPUs placed there), dedicated, pinned",
        m.numa_cell_cpus.clone(),
    );
    registry.register(
        "numa_cell_memory_bytes",
        "Memory of each NUMA cell (cell), kind total or used (by the guest cells placed there)",
        m.numa_cell_memory_bytes.clone(),
    );
}

/// Registers the store's and the Placement reporter's metrics.
fn register_store_and_upstream(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "store_unavailable",
        "1 while the state store refuses changes (claims and moves answer 503), else 0",
        m.store_unavailable.clone(),
    );
    registry.register(
        "store_commit_seconds",
        "Time of one store transaction (write and fsync)",
        m.commit_latency.clone(),
    );
    registry.register(
        "upstream_requests",
        "Requests sent to Placement by kind",
        m.upstream_requests.clone(),
    );
    registry.register(
        "upstream_reports",
        "Placement report cycles by outcome",
        m.upstream_reports.clone(),
    );
    // Every kind from the start, so that an alert's series exists before the first drift.
    m.clear_drift();
    registry.register(
        "placement_drift",
        "Drift between the local claims, Placement's allocations and the host's inventory, by kind, at the last reconciliation",
        m.placement_drift.clone(),
    );
}

/// Registers the API server's metrics.
fn register_api(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "api_forbidden_peers",
        "API connections refused because the peer is neither root nor in the socket group",
        m.forbidden_peers.clone(),
    );
    registry.register(
        "api_connections",
        "API connections open now (socket and metrics listener)",
        m.connections.open.clone(),
    );
    registry.register(
        "api_connections_rejected",
        "API connections closed at once because [api] max_connections were open",
        m.connections.rejected.clone(),
    );
    registry.register(
        "api_request_seconds",
        "Time to answer an API request (claims: route /v1/claims), by method and route",
        m.api_request_seconds.clone(),
    );
    // Every stage from the start, so that a rate over it exists before the first claim.
    for stage in CHANGE_STAGES {
        m.stage(stage);
    }
    registry.register(
        "change_stage_seconds",
        "Where a change to the tracker spends its time, by stage: queue (API to a worker thread), \
         lock, decide, commit (waiting for the store writer), answer (back to the API; claims \
         and moves)",
        m.change_stage_seconds.clone(),
    );
    registry.register(
        "api_requests",
        "API requests by route and HTTP status",
        m.api_requests.clone(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every metric the registry exposes, as `(name, type)` from its `# TYPE` lines.
    fn exposed() -> Vec<(String, String)> {
        let m = Metrics::new();
        // Families print nothing until they have a series: give each one.
        let one = |k: &'static str| vec![(k, "x".to_string())];
        for f in [
            &m.inventory_total,
            &m.inventory_reserved,
            &m.inventory_capacity,
            &m.inventory_used,
            &m.pci_pool_devices,
            &m.pci_pool_free,
            &m.numa_cell_cpus,
            &m.numa_cell_memory_bytes,
        ] {
            f.get_or_create(&one("resource_class")).set(1);
        }
        for f in [
            &m.claims,
            &m.upstream_requests,
            &m.upstream_reports,
            &m.api_requests,
        ] {
            f.get_or_create(&one("label")).inc();
        }
        m.api_request_seconds
            .get_or_create(&one("route"))
            .observe(0.001);
        let mut out = String::new();
        encode(&mut out, &m.registry).unwrap();
        out.lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| {
                let mut p = l.split_whitespace();
                Some((p.next()?.to_string(), p.next()?.to_string()))
            })
            .collect()
    }

    #[test]
    fn every_metric_is_documented_with_its_type_and_follows_the_naming_rules() {
        let docs = include_str!("../../docs/metrics.md");
        let all = exposed();
        assert!(all.len() >= 20, "{all:?}");
        // And every metric the docs list is one the registry exposes.
        for row in docs.lines().filter(|l| l.starts_with("| `rtrack_")) {
            let listed = row.split('`').nth(1).unwrap_or_default();
            assert!(
                all.iter().any(|(n, k)| {
                    listed == n || (k == "counter" && listed == format!("{n}_total"))
                }),
                "docs/metrics.md lists {listed}, which the registry does not expose"
            );
        }
        for (name, kind) in &all {
            // OpenMetrics: a counter family's samples end in _total; units in the name.
            let shown = if kind == "counter" {
                format!("`{name}_total`")
            } else {
                format!("`{name}`")
            };
            let row = docs
                .lines()
                .find(|l| l.starts_with(&format!("| {shown}")))
                .unwrap_or_else(|| panic!("docs/metrics.md has no row for {shown}"));
            assert!(
                row.contains(&format!("| {kind} |")),
                "{shown} is a {kind}: {row}"
            );
            assert!(name.starts_with("rtrack_"), "{name}");
            if kind == "histogram" {
                assert!(
                    name.ends_with("_seconds"),
                    "{name}: histograms here measure seconds"
                );
            }
        }
    }

    #[test]
    fn refusal_reasons_name_the_classes() {
        let e = ClaimError::Refused(Box::new(crate::tracker::error::Refusal {
            instance_uuid: "u".into(),
            resources: vec![crate::tracker::error::ResourceShortfall {
                class: crate::inventory::resources::ResourceClass::MemoryMb,
                requested: 10,
                used: 0,
                capacity: 5,
                max_unit: 5,
                provider: None,
            }],
            pci: None,
            numa: None,
        }));
        assert_eq!(refusal_reason(&e), "MEMORY_MB");
        let m = Metrics::new();
        m.count_claim("instance_claim", Err(&e));
        m.count_claim("instance_claim", Ok(ClaimDecision::Granted));
        let mut out = String::new();
        encode(&mut out, &m.registry).unwrap();
        assert!(
            out.contains(
                "rtrack_claims_total{operation=\"instance_claim\",outcome=\"claim_refused\",reason=\"MEMORY_MB\"} 1"
            ),
            "{out}"
        );
        assert!(out.contains("outcome=\"granted\",reason=\"\"} 1"), "{out}");
        let text = to_prometheus_text(&out);
        assert!(
            text.contains("# TYPE rtrack_claims_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("# HELP rtrack_claims_total Claim decisions"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE rtrack_probe_warnings gauge\n"),
            "{text}"
        );
        assert!(!text.contains("# EOF"), "{text}");
    }
}
