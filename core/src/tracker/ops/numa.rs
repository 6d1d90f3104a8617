//! NUMA views of the tracker: every cell's usage (the placements of what the usage rules count),
//! the reports of `GET /v1/usage` and `GET /v1/numa`, and what a new configuration would leave
//! over capacity.
//!
//! In: the records and the host view. Out: [`NumaUsage`], [`CellReport`]s and [`CellDetail`]s,
//! the pinned CPUs that are offline ([`OfflinePin`]), and lines naming what would be over
//! capacity.

use std::collections::BTreeSet;

use crate::tracker::host_view::HostView;
use crate::tracker::numa::power::{guest_running, OfflinePin};
use crate::tracker::numa::report::{cell_details, cell_reports, CellDetail, CellReport};
use crate::tracker::numa::{HostTopology, NumaUsage};
use crate::tracker::usage::Usage;
use crate::tracker::Tracker;

impl Tracker {
    /// The usage of every NUMA cell: the placements of the consumers `usage` counts.
    pub fn numa_usage(&self, usage: &Usage) -> NumaUsage {
        NumaUsage::of(
            &self.view.numa,
            usage.consumers.iter().filter_map(|c| c.numa.as_deref()),
        )
    }

    /// The host's NUMA cells.
    pub fn numa_host(&self) -> &HostTopology {
        &self.view.numa
    }

    /// What the claims hold that would be over NUMA capacity under `config` (CPU sets, reserved
    /// pages): pins outside the new dedicated CPUs, pages above the new reserve. Empty when
    /// the new configuration fits what is held, or when it already did not before.
    pub fn numa_problems_under(&self, config: &crate::config::ValidConfig) -> Vec<String> {
        let usage = self.usage();
        let now = self.numa_usage(&usage).overcommit(&self.view.numa);
        let mut settings = self.settings.clone();
        settings.policy = config.into();
        let view = HostView::build(self.view.host.clone(), &settings, self.generation);
        let numa = NumaUsage::of(
            &view.numa,
            usage.consumers.iter().filter_map(|c| c.numa.as_deref()),
        );
        numa.overcommit(&view.numa)
            .into_iter()
            .filter(|p| !now.contains(p))
            .collect()
    }

    /// Every NUMA cell's usage, for `GET /v1/usage`.
    pub fn numa_report(&self) -> Vec<CellReport> {
        cell_reports(&self.view.numa, &self.numa_usage(&self.usage()))
    }

    /// Every NUMA cell with what holds each CPU and its local PCI devices (`GET /v1/numa`).
    pub fn numa_details(&self) -> Vec<CellDetail> {
        let usage = self.usage();
        let devices: Vec<(String, Option<u32>, String)> = self
            .state
            .devices
            .values()
            .map(|d| {
                (
                    d.address.to_string(),
                    d.numa_node,
                    d.status.as_str().to_string(),
                )
            })
            .collect();
        cell_details(
            &self.view.numa,
            &self.view.host,
            &self.numa_usage(&usage),
            usage
                .consumers
                .iter()
                .filter_map(|c| c.numa.as_deref().map(|t| (c.instance_uuid.as_str(), t))),
            &devices,
        )
    }

    /// Host CPUs pinned by the placements that count (guest CPUs and emulator threads) that are
    /// not online, by CPU then instance; whether each instance runs, and whether its CPU is
    /// powered down on purpose (CPU power management on, guest not running).
    pub fn offline_pins(&self) -> Vec<OfflinePin> {
        let usage = self.usage();
        let online = &self.view.host.cpu.online;
        let managed = self
            .settings
            .policy
            .resources
            .cpu_power_management
            .is_some();
        let mut out = BTreeSet::new();
        for c in &usage.consumers {
            let Some(numa) = c.numa.as_deref() else {
                continue;
            };
            let running = self
                .state
                .instances
                .get(&c.instance_uuid)
                .is_some_and(|i| guest_running(&i.vm_state, i.task_state.as_deref()));
            for cell in &numa.cells {
                for cpu in cell.pinned_host_cpus().iter() {
                    if !online.contains(cpu) {
                        out.insert(OfflinePin {
                            cpu,
                            instance: c.instance_uuid.clone(),
                            running,
                            powered_down: managed && !running,
                        });
                    }
                }
            }
        }
        out.into_iter().collect()
    }
}
