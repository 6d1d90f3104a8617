//! CPU power management on generated hosts (`rtrack_fixtures::power`): what counts, what is
//! refused, the cells, and the topology kept for offline CPUs.

use std::path::Path;

use super::*;
use crate::config::Config;
use crate::inventory::resources::{compute_inventory, InventoryOptions, ResourceClass};
use crate::probes::{probe_host, HostRoot, ProbeOptions};
use crate::tracker::numa::host::{config_problems, HostTopology};
use rtrack_fixtures::power::PowerHost;

fn resources(toml: &str) -> Resources {
    let f = Path::new("power.toml");
    Config::parse(&format!("[resources]\n{toml}"), f)
        .and_then(|c| c.validate(f))
        .unwrap_or_else(|e| panic!("{e}"))
        .resources
}

fn probe(host: &PowerHost, res: &Resources) -> HostInventory {
    let dir = rtrack_fixtures::real::scratch_dir();
    host.write(dir.path());
    let opts = ProbeOptions {
        cpu_governors: res.governor_cpus(),
        ..ProbeOptions::default()
    };
    probe_host(&HostRoot::under(dir.path()), &opts).unwrap()
}

fn total(inv: &HostInventory, res: &Resources, class: ResourceClass) -> i64 {
    compute_inventory(inv, res, InventoryOptions::default())
        .iter()
        .find(|r| r.class == class)
        .map_or(0, |r| r.total)
}

fn sets(cells: &[CpuSet]) -> Vec<String> {
    cells.iter().map(CpuSet::to_string).collect()
}

const MIXED: &str = "cpu_dedicated_set = \"1-3,5-7\"\ncpu_shared_set = \"4,8-9\"\n";

#[test]
fn offline_dedicated_cpus_count_only_when_their_power_is_managed() {
    // Option off: today's refusal, and they are not counted.
    let off = resources(MIXED);
    let inv = probe(&PowerHost::cpu_state(), &off);
    let p = config_problems(&inv, &off);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].0, "resources.cpu_dedicated_set");
    assert!(
        p[0].1.contains("names CPUs 1-3,5-7 that are not online"),
        "{p:?}"
    );
    assert!(p[0].1.contains("cpu_power_management = true"), "{p:?}");
    assert_eq!(total(&inv, &off, ResourceClass::Pcpu), 0);
    // On: counted (PCPU 6, VCPU 3 as Nova's PowerManagementMixedInstances host), in their cell.
    let on = resources(&format!("{MIXED}cpu_power_management = true\n"));
    let inv = probe(&PowerHost::cpu_state(), &on);
    assert_eq!(config_problems(&inv, &on), []);
    assert_eq!(total(&inv, &on, ResourceClass::Pcpu), 6);
    assert_eq!(total(&inv, &on, ResourceClass::Vcpu), 3);
    let t = HostTopology::build(&inv, &on);
    assert_eq!(t.cells[0].pcpuset.to_string(), "1-3,5-7");
    assert_eq!(t.cells[0].cpuset.to_string(), "4,8-9");
    assert_eq!(t.cells[0].socket, Some(0));
    assert_eq!(
        sets(&t.cells[0].siblings),
        ["1", "2", "3", "4", "5", "6", "7", "8", "9"]
    );
}

#[test]
fn dedicated_cpus_must_exist_and_shared_ones_be_online() {
    let res = resources(
        "cpu_dedicated_set = \"1-3,12\"\ncpu_shared_set = \"4-5\"\ncpu_power_management = true\n",
    );
    let inv = probe(&PowerHost::cpu_state(), &res);
    let p = config_problems(&inv, &res);
    assert_eq!(p.len(), 2, "{p:?}");
    assert_eq!(p[0].0, "resources.cpu_shared_set");
    assert!(p[0].1.contains("names CPUs 5 that are not online"), "{p:?}");
    assert_eq!(p[1].0, "resources.cpu_dedicated_set");
    assert!(
        p[1].1
            .contains("names CPUs 12 that do not exist on this host (CPUs 0-9;"),
        "{p:?}"
    );
}

#[test]
fn each_strategy_refuses_what_nova_refuses() {
    // governor: every dedicated CPU online.
    let res = resources(&format!(
        "{MIXED}cpu_power_management = true\ncpu_power_management_strategy = \"governor\"\n"
    ));
    let p = config_problems(&probe(&PowerHost::cpu_state(), &res), &res);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].1
            .contains("all the cores need to be online before modifying the governor strategy")
            && p[0].1.contains("dedicated CPUs 1-3,5-7 are offline"),
        "{p:?}"
    );
    // governor: cpufreq on every dedicated CPU but 0; cpu_state does without.
    let res = resources(
        "cpu_dedicated_set = \"0-9\"\ncpu_power_management = true\ncpu_power_management_strategy = \"governor\"\n",
    );
    let p = config_problems(&probe(&PowerHost::no_cpufreq(), &res), &res);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].1.contains("dedicated CPUs 1-9 have no cpufreq"),
        "{p:?}"
    );
    let res = resources("cpu_dedicated_set = \"0-9\"\ncpu_power_management = true\n");
    assert_eq!(
        config_problems(&probe(&PowerHost::no_cpufreq(), &res), &res),
        []
    );
    // cpu_state: one governor among the online dedicated CPUs but CPU 0.
    let p = config_problems(&probe(&PowerHost::mixed_governors(), &res), &res);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].0, "resources.cpu_power_management_strategy");
    assert!(
        p[0].1
            .contains("run performance on CPUs 2-3, powersave on CPUs 1,4-9"),
        "{p:?}"
    );
}

#[test]
fn offline_cpus_are_cores_of_their_own_unless_seen_online() {
    let res = resources(
        "cpu_dedicated_set = \"2-7,10-15\"\ncpu_shared_set = \"0-1,8-9\"\ncpu_power_management = true\n",
    );
    let host = PowerHost::two_node_smt();
    let mut inv = probe(&host, &res);
    assert_eq!(config_problems(&inv, &res), []);
    let t = HostTopology::build(&inv, &res);
    assert_eq!(t.cells[0].pcpuset.to_string(), "2-3,10-11");
    assert_eq!(
        sets(&t.cells[0].siblings),
        ["0,8", "1,9", "2", "3", "10", "11"]
    );
    assert_eq!(t.cells[0].socket, Some(0));
    assert_eq!(t.cells[1].pcpuset.to_string(), "4-7,12-15");
    assert_eq!(
        sets(&t.cells[1].siblings),
        ["4,12", "5,13", "6", "7", "14", "15"]
    );
    assert_eq!(t.cells[1].socket, Some(1));
    // Seen online by an earlier probe: the cores are whole again, as Nova reports them.
    let earlier = probe(
        &PowerHost {
            offline: vec![],
            ..host.clone()
        },
        &res,
    );
    carry_offline_topology(&earlier, &mut inv);
    assert!(inv.cpu.offline_cpus.iter().all(|c| c.topology_cached));
    let t = HostTopology::build(&inv, &res);
    assert_eq!(sets(&t.cells[0].siblings), ["0,8", "1,9", "2,10", "3,11"]);
    assert_eq!(sets(&t.cells[1].siblings), ["4,12", "5,13", "6,14", "7,15"]);
    // And carried on from audit to audit while they stay offline.
    let mut again = probe(&host, &res);
    carry_offline_topology(&inv, &mut again);
    assert_eq!(again.cpu.offline_cpus, inv.cpu.offline_cpus);
}

#[test]
fn running_guests_are_those_nova_started() {
    assert!(guest_running("active", None));
    assert!(guest_running("paused", None));
    assert!(guest_running("active", Some("image_snapshot")));
    assert!(!guest_running("active", Some("powering-off")));
    assert!(!guest_running("stopped", None));
    assert!(!guest_running("shelved", None));
    assert!(!guest_running("building", Some("spawning")));
}
